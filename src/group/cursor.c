/* A group's position in one partition:
 *   floor      the committed offset: every offset below is done
 *   done bits  offsets above the floor settled out of order
 *   held bits  offsets handed out to a link and not settled yet
 *   redeliver  released offsets and those of consumers that went away, sorted
 *   next_read  the first offset the plain (unfiltered) scan has not reached
 *   deferred   offsets a Service Bus receiver deferred: neither free nor done until
 *              settled through <queue>/$management (docs/servicebus.md); saved
 *   sched      scheduled records (MQD_REC_SCHEDULED) the scan reached before their
 *              time: hidden until then, then redelivered; the time is the record's, so
 *              a restart's scan hides them again
 * A link with a selector on the shared group scans from its own position and takes only
 * free offsets (neither done nor held), so what it does not select stays for the others
 * and the floor never passes it.
 * Saved as the committed offset (group offsets table) plus (floor, done ranges, delivery
 * states) in one blob, batched by the server's periodic timer and on detach, so a restart
 * redelivers only what was not settled, with its delivery-count. */
#include "config.h"
#include "group/group_int.h"

#include <stdlib.h>
#include <string.h>

#define BM_SLACK 4096 /* compact the bitmap when the floor moved this many bits */

static bool bit_get(const uint8_t *bm, size_t nbits, uint64_t bm_base, uint64_t off)
{
    uint64_t i = off - bm_base;
    return off >= bm_base && i < nbits && (bm[i >> 3] >> (i & 7)) & 1;
}

/* The bitmaps cover [bm_base, bm_base + done_bits); bm_base = floor rounded down to 8. */
static uint64_t bm_base(const mqd_cursor_t *sh)
{
    return sh->floor & ~(uint64_t)7;
}

static bool is_done(const mqd_cursor_t *sh, uint64_t off)
{
    return off < sh->floor || bit_get(sh->done, sh->done_bits, bm_base(sh), off);
}

static bool is_held(const mqd_cursor_t *sh, uint64_t off)
{
    return bit_get(sh->held, sh->done_bits, bm_base(sh), off);
}

/* Grows both bitmaps to cover offset `off`. */
static int bm_cover(mqd_cursor_t *sh, uint64_t off)
{
    uint64_t i = off - bm_base(sh);
    if (i < sh->done_bits)
        return 0;
    size_t nbits = sh->done_bits ? sh->done_bits : 1024;
    while (nbits <= i)
        nbits *= 2;
    uint8_t *nd = realloc(sh->done, nbits / 8);
    if (!nd)
        return MQD_ENOMEM;
    sh->done = nd;
    uint8_t *nh = realloc(sh->held, nbits / 8);
    if (!nh)
        return MQD_ENOMEM;
    sh->held = nh;
    memset(nd + sh->done_bits / 8, 0, (nbits - sh->done_bits) / 8);
    memset(nh + sh->done_bits / 8, 0, (nbits - sh->done_bits) / 8);
    sh->done_bits = nbits;
    return 0;
}

static int bit_set(mqd_cursor_t *sh, uint8_t **bm, uint64_t off)
{
    int rc = bm_cover(sh, off);
    if (rc != 0)
        return rc;
    uint64_t i = off - bm_base(sh);
    (*bm)[i >> 3] |= (uint8_t)(1u << (i & 7));
    return 0;
}

static void bit_clear(mqd_cursor_t *sh, uint8_t *bm, uint64_t off)
{
    uint64_t i = off - bm_base(sh);
    if (off >= bm_base(sh) && i < sh->done_bits)
        bm[i >> 3] &= (uint8_t) ~(1u << (i & 7));
}

static void bm_shift(uint8_t *bm, size_t bytes, uint64_t shift)
{
    if (shift >= bytes) {
        memset(bm, 0, bytes);
    } else {
        memmove(bm, bm + shift, bytes - shift);
        memset(bm + bytes - shift, 0, shift);
    }
}

/* Moves the floor over set bits; drops whole bytes below it. */
static void floor_advance(mqd_cursor_t *sh)
{
    uint64_t old_base = bm_base(sh);
    while (bit_get(sh->done, sh->done_bits, old_base, sh->floor))
        sh->floor++;
    uint64_t shift = (bm_base(sh) - old_base) / 8;
    if (shift == 0)
        return;
    bm_shift(sh->done, sh->done_bits / 8, shift);
    bm_shift(sh->held, sh->done_bits / 8, shift);
}

/* Delivery states are sorted by offset: a consumer that goes away with thousands
 * unsettled leaves as many, and every hand-out looks one up. */
static size_t dc_lower(const mqd_cursor_t *sh, uint64_t off)
{
    size_t lo = 0, hi = sh->dc_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (sh->dc_off[mid] < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t dc_find(const mqd_cursor_t *sh, uint64_t off)
{
    size_t i = dc_lower(sh, off);
    return i < sh->dc_n && sh->dc_off[i] == off ? i : SIZE_MAX;
}

static void dc_remove(mqd_cursor_t *sh, uint64_t off)
{
    size_t i = dc_find(sh, off);
    if (i == SIZE_MAX)
        return;
    sh->dc_n--;
    memmove(sh->dc_off + i, sh->dc_off + i + 1, (sh->dc_n - i) * sizeof *sh->dc_off);
    memmove(sh->dc_val + i, sh->dc_val + i + 1, (sh->dc_n - i) * sizeof *sh->dc_val);
}

static uint32_t dc_get(const mqd_cursor_t *sh, uint64_t off)
{
    size_t i = sh->dc_n ? dc_find(sh, off) : SIZE_MAX;
    return i == SIZE_MAX ? 0 : sh->dc_val[i];
}

static int dc_set(mqd_cursor_t *sh, uint64_t off, uint32_t val)
{
    size_t i = dc_lower(sh, off);
    if (i < sh->dc_n && sh->dc_off[i] == off) {
        sh->dc_val[i] = val;
        return 0;
    }
    if (sh->dc_n == sh->dc_cap) {
        size_t ncap = sh->dc_cap ? sh->dc_cap * 2 : 16;
        uint64_t *no = realloc(sh->dc_off, ncap * sizeof *no);
        if (!no)
            return MQD_ENOMEM;
        sh->dc_off = no;
        uint32_t *nv = realloc(sh->dc_val, ncap * sizeof *nv);
        if (!nv)
            return MQD_ENOMEM;
        sh->dc_val = nv;
        sh->dc_cap = ncap;
    }
    memmove(sh->dc_off + i + 1, sh->dc_off + i, (sh->dc_n - i) * sizeof *sh->dc_off);
    memmove(sh->dc_val + i + 1, sh->dc_val + i, (sh->dc_n - i) * sizeof *sh->dc_val);
    sh->dc_off[i] = off;
    sh->dc_val[i] = val;
    sh->dc_n++;
    return 0;
}

/* A delivery attempt of `off` ended without settlement: it was acquired, and counts
 * as failed unless the consumer released it. */
static void dc_attempt(mqd_cursor_t *sh, uint64_t off, bool failed)
{
    uint32_t v = dc_get(sh, off), n = MQD_DC_COUNT(v);
    if (failed && n < MQD_DC_COUNT(UINT32_MAX))
        n++;
    dc_set(sh, off, n | MQD_DC_SEEN);
}

/* The first index of r->v (sorted) whose offset is >= off. */
static size_t redeliver_at(const mqd_redeliver_t *r, uint64_t off)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r->v[mid] < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int redeliver_add(mqd_redeliver_t *r, uint64_t off)
{
    size_t lo = redeliver_at(r, off);
    if (lo < r->n && r->v[lo] == off)
        return 0;
    uint64_t *nv = mqd_array_grow(r->v, &r->cap, r->n, sizeof *nv, 64);
    if (!nv)
        return MQD_ENOMEM;
    r->v = nv;
    memmove(r->v + lo + 1, r->v + lo, (r->n - lo) * sizeof *r->v);
    r->v[lo] = off;
    r->n++;
    return 0;
}

static void redeliver_remove(mqd_redeliver_t *r, uint64_t off)
{
    size_t lo = redeliver_at(r, off);
    if (lo < r->n && r->v[lo] == off) {
        r->n--;
        memmove(r->v + lo, r->v + lo + 1, (r->n - lo) * sizeof *r->v);
    }
}

static bool is_deferred(const mqd_cursor_t *sh, uint64_t off)
{
    size_t i = sh->deferred.n ? redeliver_at(&sh->deferred, off) : 0;
    return i < sh->deferred.n && sh->deferred.v[i] == off;
}

static size_t sched_find(const mqd_cursor_t *sh, uint64_t off)
{
    for (size_t i = 0; i < sh->sched_n; i++)
        if (sh->sched[i].off == off)
            return i;
    return SIZE_MAX;
}

static void sched_drop(mqd_cursor_t *sh, size_t i)
{
    sh->sched[i] = sh->sched[--sh->sched_n];
}

bool mqd_cursor_sched_hide(mqd_cursor_t *sh, const mqd_rec_t *r)
{
    int64_t due = mqd_rec_scheduled_ms(r);
    if (due <= mqd_now_ms())
        return false;
    if (sched_find(sh, r->offset) != SIZE_MAX)
        return true;
    struct mqd_sched *ns = mqd_array_grow(sh->sched, &sh->sched_cap, sh->sched_n, sizeof *ns, 8);
    if (!ns)
        return false; /* out of memory: delivered now rather than lost */
    sh->sched = ns;
    sh->sched[sh->sched_n++] = (struct mqd_sched){.off = r->offset, .due = due};
    return true;
}

bool mqd_cursor_sched_release(mqd_cursor_t *sh)
{
    int64_t now = sh->sched_n ? mqd_now_ms() : 0;
    bool any = false;
    for (size_t i = 0; i < sh->sched_n;) {
        if (sh->sched[i].due > now) {
            i++;
            continue;
        }
        if (redeliver_add(&sh->redeliver, sh->sched[i].off) != 0)
            break; /* out of memory: stays hidden until the next try */
        sh->redeliver_gen++;
        sched_drop(sh, i);
        any = true;
    }
    return any;
}

int64_t mqd_cursor_sched_next(const mqd_cursor_t *sh)
{
    int64_t first = INT64_MAX;
    for (size_t i = 0; i < sh->sched_n; i++)
        if (sh->sched[i].due < first)
            first = sh->sched[i].due;
    return first;
}

/* Blob: floor u64, count u32, then count x (start u64, end u64) done ranges; then,
 * optional (older blobs end before it), BLOB_DC_MAGIC u32, m u32, m x (offset u64,
 * state u32): the delivery states of offsets not done, where an offset that was held
 * when saved counts one more failed attempt (its delivery was outstanding). */
#define BLOB_DC_MAGIC 0x32434451u /* "QDC2" */
#define BLOB_MAX_RANGE (1u << 26)

/* Returns the bytes it read. */
static size_t load_states(mqd_cursor_t *sh, const uint8_t *b, size_t len)
{
    uint32_t magic, m;
    if (len < 8)
        return len;
    memcpy(&magic, b, 4);
    memcpy(&m, b + 4, 4);
    if (magic != BLOB_DC_MAGIC)
        return 0;
    if (8 + (size_t)m * 12 > len)
        m = (uint32_t)((len - 8) / 12);
    for (uint32_t i = 0; i < m; i++) {
        uint64_t off;
        uint32_t v;
        memcpy(&off, b + 8 + (size_t)i * 12, 8);
        memcpy(&v, b + 8 + (size_t)i * 12 + 8, 4);
        if (!is_done(sh, off))
            dc_set(sh, off, v);
    }
    return 8 + (size_t)m * 12;
}

/* Optional, after the delivery states (older blobs end before it): BLOB_DEFER_MAGIC u32,
 * n u32, n x offset u64: the deferred offsets. */
#define BLOB_DEFER_MAGIC 0x31464451u /* "QDF1" */

static void load_deferred(mqd_cursor_t *sh, const uint8_t *b, size_t len)
{
    uint32_t magic, n;
    if (len < 8)
        return;
    memcpy(&magic, b, 4);
    memcpy(&n, b + 4, 4);
    for (uint32_t i = 0; magic == BLOB_DEFER_MAGIC && i < n && 8 + (size_t)(i + 1) * 8 <= len;
         i++) {
        uint64_t off;
        memcpy(&off, b + 8 + (size_t)i * 8, 8);
        if (!is_done(sh, off) && redeliver_add(&sh->deferred, off) != 0)
            return;
    }
}

static int load_blob(mqd_cursor_t *sh, const void *blob, size_t len)
{
    const uint8_t *b = blob;
    uint32_t n = 0, i;
    if (len < 12)
        return MQD_ECORRUPT;
    memcpy(&sh->floor, b, 8);
    memcpy(&n, b + 8, 4);
    for (i = 0; i < n && 12 + (size_t)(i + 1) * 16 <= len; i++) {
        uint64_t s, e;
        memcpy(&s, b + 12 + (size_t)i * 16, 8);
        memcpy(&e, b + 12 + (size_t)i * 16 + 8, 8);
        for (uint64_t o = s; o < e && o - s < BLOB_MAX_RANGE; o++)
            bit_set(sh, &sh->done, o);
    }
    floor_advance(sh);
    if (i == n && 12 + (size_t)n * 16 <= len) {
        size_t at = 12 + (size_t)n * 16;
        at += load_states(sh, b + at, len - at);
        load_deferred(sh, b + at, len - at);
    }
    return 0;
}

int mqd_cursor_init(mqd_cursor_t *sh, mqd_part_t *p, const char *group, mqd_offset_reset_t reset)
{
    memset(sh, 0, sizeof *sh);
    mqd_read_init(&sh->rd);
    mqd_topic_t *t = mqd_part_topic(p);
    mqd_meta_t *m = mqd_srv_meta(mqd_topic_srv(t));
    void *blob = NULL;
    size_t len = 0;
    uint64_t committed;
    int rc = mqd_meta_acks_get(m, mqd_topic_name(t), group, mqd_part_id(p), &blob, &len);
    if (rc == 0) {
        rc = load_blob(sh, blob, len);
        free(blob);
    } else if (rc == MQD_ENOENT) {
        rc = mqd_meta_offset_get(m, mqd_topic_name(t), group, mqd_part_id(p), &committed);
        if (rc == 0) {
            sh->floor = committed;
        } else if (rc == MQD_ENOENT) {
            /* a new group starts where auto_offset_reset says */
            sh->floor = reset == MQD_OFFSET_RESET_LATEST
                            ? mqd_part_visible_end(p, MQD_READ_UNCOMMITTED)
                            : mqd_plog_start_offset(mqd_part_log(p));
            sh->dirty = true;
            rc = 0;
        }
    }
    if (rc != 0)
        return rc;
    if (sh->floor < mqd_plog_start_offset(mqd_part_log(p)))
        mqd_cursor_seek(sh, p, mqd_plog_start_offset(mqd_part_log(p)));
    sh->next_read = sh->floor;
    return 0;
}

void mqd_cursor_seek(mqd_cursor_t *sh, mqd_part_t *p, uint64_t offset)
{
    /* not the log's end offset: a position past the visible end would skip records
     * whose sends are not settled yet (and, after a crash, any reusing their offsets) */
    uint64_t start = mqd_plog_start_offset(mqd_part_log(p));
    uint64_t end = mqd_part_visible_end(p, MQD_READ_UNCOMMITTED);
    if (offset < start)
        offset = start;
    if (offset > end)
        offset = end;
    sh->floor = offset;
    sh->next_read = offset;
    if (sh->done)
        memset(sh->done, 0, sh->done_bits / 8);
    if (sh->held)
        memset(sh->held, 0, sh->done_bits / 8);
    sh->redeliver.n = 0;
    sh->redeliver_gen++;
    sh->dc_n = 0;
    sh->deferred.n = 0;
    sh->sched_n = 0;
    sh->rd_pos = sh->rd.n; /* drop the read-ahead */
    sh->dirty = true;
}

void mqd_cursor_reread(mqd_cursor_t *sh)
{
    if (sh->held)
        memset(sh->held, 0, sh->done_bits / 8);
    sh->inflight = 0;
    sh->redeliver.n = 0;
    sh->redeliver_gen++;
    sh->next_read = sh->floor;
    sh->sched_n = 0; /* the scan finds them again */
    sh->rd_pos = sh->rd.n; /* drop the read-ahead: the log may be cut back by epoch */
}

void mqd_cursor_free(mqd_cursor_t *sh)
{
    free(sh->done);
    free(sh->held);
    free(sh->redeliver.v);
    free(sh->dc_off);
    free(sh->dc_val);
    free(sh->deferred.v);
    free(sh->sched);
    mqd_read_free(&sh->rd);
    memset(sh, 0, sizeof *sh);
}

static bool read_one(mqd_cursor_t *sh, mqd_part_t *p, uint64_t off, mqd_rec_t *rec)
{
    int rc = mqd_plog_read(mqd_part_log(p), off, off + 1, 1, 1, &sh->rd);
    sh->rd_pos = sh->rd.n; /* the read-ahead was replaced: refill next time */
    if (rc != 0 || sh->rd.n == 0 || sh->rd.recs[0].offset != off)
        return false;
    *rec = sh->rd.recs[0];
    return true;
}

/* Marks an offset done without touching the in-flight count. */
static void mark_done(mqd_cursor_t *sh, uint64_t off)
{
    if (off < sh->floor || bit_set(sh, &sh->done, off) != 0)
        return;
    bit_clear(sh, sh->held, off);
    dc_remove(sh, off);
    redeliver_remove(&sh->deferred, off);
    size_t si = sched_find(sh, off);
    if (si != SIZE_MAX)
        sched_drop(sh, si);
    floor_advance(sh);
    sh->dirty = true;
}

bool mqd_cursor_free_at(const mqd_cursor_t *sh, uint64_t off)
{
    return !is_done(sh, off) && !is_held(sh, off) && !is_deferred(sh, off) &&
           (!sh->sched_n || sched_find(sh, off) == SIZE_MAX);
}

bool mqd_cursor_is_deferred(const mqd_cursor_t *sh, uint64_t off)
{
    return is_deferred(sh, off);
}

bool mqd_cursor_is_held(const mqd_cursor_t *sh, uint64_t off)
{
    return !is_done(sh, off) && is_held(sh, off);
}

bool mqd_cursor_settled(const mqd_cursor_t *sh, uint64_t off)
{
    return is_done(sh, off);
}

uint32_t mqd_cursor_take(mqd_cursor_t *sh, uint64_t off)
{
    if (bit_set(sh, &sh->held, off) != 0)
        return 0; /* out of memory: delivered untracked, a restart redelivers it */
    redeliver_remove(&sh->redeliver, off);
    sh->inflight++;
    sh->dirty = true; /* a restart must count this attempt if it is still outstanding */
    return dc_get(sh, off);
}

void mqd_cursor_skip(mqd_cursor_t *sh, uint64_t off)
{
    mark_done(sh, off);
}

static bool next_redelivery(mqd_cursor_t *sh, mqd_part_t *p, mqd_rec_t *rec, uint32_t *dcount)
{
    while (sh->redeliver.n) {
        uint64_t off = sh->redeliver.v[0];
        if (!mqd_cursor_free_at(sh, off) || !read_one(sh, p, off, rec)) {
            redeliver_remove(&sh->redeliver, off);
            continue;
        }
        *dcount = mqd_cursor_take(sh, off);
        return true;
    }
    return false;
}

bool mqd_cursor_next(mqd_cursor_t *sh, mqd_part_t *p, mqd_rec_t *rec, uint32_t *dcount)
{
    mqd_cursor_sched_release(sh);
    if (next_redelivery(sh, p, rec, dcount))
        return true;
    for (int guard = 0; guard < 1024; guard++) {
        if (sh->rd_pos >= sh->rd.n) {
            /* read committed: never past the first offset of an open transaction */
            mqd_server_t *s = mqd_topic_srv(mqd_part_topic(p));
            int rc = mqd_plog_read(mqd_part_log(p), sh->next_read,
                                   mqd_part_visible_end(p, MQD_READ_COMMITTED), 256,
                                   mqd_srv_conf(s)->prefetch_bytes, &sh->rd);
            sh->rd_pos = 0;
            if (rc == MQD_ERANGE) {
                /* retention passed us: what was deleted counts as consumed */
                uint64_t start = mqd_plog_start_offset(mqd_part_log(p));
                if (sh->floor < start)
                    mqd_cursor_seek(sh, p, start);
                else
                    sh->next_read = start;
                continue;
            }
            if (rc != 0 || sh->rd.n == 0)
                return false;
        }
        const mqd_rec_t *r = &sh->rd.recs[sh->rd_pos++];
        if (r->offset < sh->next_read)
            continue;
        sh->next_read = r->offset + 1;
        if (!mqd_cursor_free_at(sh, r->offset))
            continue; /* settled before a restart, or taken by a link with a selector */
        if ((r->flags & MQD_REC_KIND_MASK) != MQD_REC_DATA ||
            ((r->flags & MQD_REC_TXN) &&
             !mqd_core_txn_committed(mqd_topic_srv(mqd_part_topic(p)), r->txn))) {
            mark_done(sh, r->offset); /* control records and aborted sends are never delivered */
            continue;
        }
        if ((r->flags & MQD_REC_SCHEDULED) && mqd_cursor_sched_hide(sh, r))
            continue; /* its time is ahead: redelivered then (mqd_cursor_sched_release) */
        *rec = *r;
        *dcount = mqd_cursor_take(sh, r->offset);
        return true;
    }
    return false;
}

void mqd_cursor_done(mqd_cursor_t *sh, uint64_t off)
{
    if (sh->inflight)
        sh->inflight--;
    mark_done(sh, off);
}

void mqd_cursor_release(mqd_cursor_t *sh, uint64_t off, bool failed)
{
    if (sh->inflight)
        sh->inflight--;
    if (is_done(sh, off))
        return;
    bit_clear(sh, sh->held, off);
    dc_attempt(sh, off, failed);
    redeliver_add(&sh->redeliver, off);
    sh->redeliver_gen++;
    sh->dirty = true;
}

int mqd_cursor_defer(mqd_cursor_t *sh, uint64_t off)
{
    if (sh->inflight)
        sh->inflight--;
    if (is_done(sh, off))
        return 0;
    bit_clear(sh, sh->held, off);
    dc_attempt(sh, off, false);
    sh->dirty = true;
    int rc = redeliver_add(&sh->deferred, off);
    if (rc != 0) { /* out of memory: back to the queue rather than lost */
        redeliver_add(&sh->redeliver, off);
        sh->redeliver_gen++;
    }
    return rc;
}

static int put_bytes(uint8_t **b, size_t *cap, size_t at, const void *v, size_t n)
{
    if (at + n > *cap) {
        size_t ncap = (*cap + n) * 2;
        uint8_t *nb = realloc(*b, ncap);
        if (!nb)
            return MQD_ENOMEM;
        *b = nb;
        *cap = ncap;
    }
    memcpy(*b + at, v, n);
    return 0;
}

/* The done ranges above the floor, from byte 12 on; returns their count or -1. */
static int64_t encode_ranges(const mqd_cursor_t *sh, uint8_t **b, size_t *cap)
{
    uint64_t base = bm_base(sh);
    int64_t n = 0;
    for (uint64_t o = sh->floor; o - base < sh->done_bits;) {
        if (!bit_get(sh->done, sh->done_bits, base, o)) {
            o++;
            continue;
        }
        uint64_t s = o;
        while (o - base < sh->done_bits && bit_get(sh->done, sh->done_bits, base, o))
            o++;
        if (put_bytes(b, cap, 12 + (size_t)n * 16, &s, 8) != 0 ||
            put_bytes(b, cap, 12 + (size_t)n * 16 + 8, &o, 8) != 0)
            return -1;
        n++;
    }
    return n;
}

static int put_state(uint8_t **b, size_t *cap, size_t *at, uint64_t off, uint32_t v)
{
    int rc = put_bytes(b, cap, *at, &off, 8);
    rc = rc ? rc : put_bytes(b, cap, *at + 8, &v, 4);
    *at += 12;
    return rc;
}

/* Delivery states after the ranges: known ones, and held offsets one attempt up. */
static int encode_states(const mqd_cursor_t *sh, uint8_t **b, size_t *cap, size_t *at)
{
    size_t head = *at;
    uint32_t magic = BLOB_DC_MAGIC, m = 0;
    int rc = put_bytes(b, cap, head, &magic, 4);
    *at += 8;
    for (size_t i = 0; rc == 0 && i < sh->dc_n; i++) {
        uint64_t off = sh->dc_off[i];
        if (is_done(sh, off) || is_held(sh, off))
            continue;
        rc = put_state(b, cap, at, off, sh->dc_val[i]);
        m++;
    }
    uint64_t base = bm_base(sh);
    for (uint64_t o = base; rc == 0 && o - base < sh->done_bits; o++) {
        if (((o - base) & 7) == 0 && sh->held[(o - base) >> 3] == 0) {
            o += 7; /* nothing held in this byte */
            continue;
        }
        if (!is_held(sh, o) || is_done(sh, o))
            continue;
        uint32_t v = dc_get(sh, o), n = MQD_DC_COUNT(v);
        rc = put_state(b, cap, at, o, (n < MQD_DC_COUNT(UINT32_MAX) ? n + 1 : n) | MQD_DC_SEEN);
        m++;
    }
    return rc ? rc : put_bytes(b, cap, head + 4, &m, 4);
}

static int encode_deferred(const mqd_cursor_t *sh, uint8_t **b, size_t *cap, size_t *at)
{
    uint32_t magic = BLOB_DEFER_MAGIC, n = (uint32_t)sh->deferred.n;
    int rc = put_bytes(b, cap, *at, &magic, 4);
    rc = rc ? rc : put_bytes(b, cap, *at + 4, &n, 4);
    *at += 8;
    for (size_t i = 0; rc == 0 && i < sh->deferred.n; i++, *at += 8)
        rc = put_bytes(b, cap, *at, &sh->deferred.v[i], 8);
    return rc;
}

static uint8_t *encode_blob(const mqd_cursor_t *sh, size_t *len)
{
    size_t cap = 64;
    uint8_t *b = malloc(cap);
    if (!b)
        return NULL;
    int64_t n = encode_ranges(sh, &b, &cap);
    size_t at = 12 + (size_t)(n < 0 ? 0 : n) * 16;
    uint32_t n32 = (uint32_t)n;
    if (n < 0 || encode_states(sh, &b, &cap, &at) != 0 ||
        (sh->deferred.n && encode_deferred(sh, &b, &cap, &at) != 0)) {
        free(b);
        return NULL;
    }
    memcpy(b, &sh->floor, 8);
    memcpy(b + 8, &n32, 4);
    *len = at;
    return b;
}

int mqd_cursor_save(mqd_cursor_t *sh, mqd_part_t *p, const char *group)
{
    size_t len;
    uint8_t *b = encode_blob(sh, &len);
    if (!b)
        return MQD_ENOMEM;
    mqd_topic_t *t = mqd_part_topic(p);
    mqd_server_t *s = mqd_topic_srv(t);
    mqd_meta_t *m = mqd_srv_meta(s);
    mqd_meta_offset_t o = {.topic = mqd_topic_name(t),
                           .group = group,
                           .partition = mqd_part_id(p),
                           .offset = sh->floor};
    int rc = mqd_meta_offsets_commit(m, &o, 1);
    if (rc == 0)
        rc = mqd_meta_acks_put(m, mqd_topic_name(t), group, mqd_part_id(p), b, len);
    free(b);
    if (rc == 0)
        sh->dirty = false;
    const mqd_repl_hooks_t *repl = mqd_srv_repl(s);
    if (rc == 0 && repl->group_saved) /* cluster: it fails over with the partition */
        repl->group_saved(repl->arg, t, mqd_part_id(p), group, sh->floor);
    return rc;
}
