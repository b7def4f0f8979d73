/* A group's position in one partition:
 *   floor      the committed offset: every offset below is done
 *   done bits  offsets above the floor settled out of order
 *   redeliver  released offsets and those of consumers that went away, sorted
 *   next_read  the first offset never handed out
 * Saved as the committed offset (group offsets table) plus (floor, done ranges) in one
 * blob, batched by the server's periodic timer and on detach, so a restart redelivers
 * only what was not settled. */
#include "config.h"
#include "server/broker.h"

#include <stdlib.h>
#include <string.h>

#define BM_SLACK 4096 /* compact the bitmap when the floor moved this many bits */

static bool bit_get(const mqd_cursor_t *sh, uint64_t bm_base, uint64_t off)
{
    uint64_t i = off - bm_base;
    return i < sh->done_bits && (sh->done[i >> 3] >> (i & 7)) & 1;
}

/* The bitmap covers [bm_base, bm_base + done_bits); bm_base = floor rounded down to 8. */
static uint64_t bm_base(const mqd_cursor_t *sh) { return sh->floor & ~(uint64_t)7; }

static int bit_set(mqd_cursor_t *sh, uint64_t off)
{
    uint64_t i = off - bm_base(sh);
    if (i >= sh->done_bits) {
        size_t nbits = sh->done_bits ? sh->done_bits : 1024;
        while (nbits <= i)
            nbits *= 2;
        uint8_t *nd = realloc(sh->done, nbits / 8);
        if (!nd)
            return MQD_ENOMEM;
        memset(nd + sh->done_bits / 8, 0, (nbits - sh->done_bits) / 8);
        sh->done = nd;
        sh->done_bits = nbits;
    }
    sh->done[i >> 3] |= (uint8_t)(1u << (i & 7));
    return 0;
}

/* Moves the floor over set bits; drops whole bytes below it. */
static void floor_advance(mqd_cursor_t *sh)
{
    uint64_t old_base = bm_base(sh);
    while (bit_get(sh, old_base, sh->floor))
        sh->floor++;
    uint64_t shift = (bm_base(sh) - old_base) / 8;
    if (shift == 0)
        return;
    size_t bytes = sh->done_bits / 8;
    if (shift >= bytes) {
        memset(sh->done, 0, bytes);
    } else {
        memmove(sh->done, sh->done + shift, bytes - shift);
        memset(sh->done + bytes - shift, 0, shift);
    }
}

static void dc_remove(mqd_cursor_t *sh, uint64_t off)
{
    for (size_t i = 0; i < sh->dc_n; i++) {
        if (sh->dc_off[i] == off) {
            sh->dc_off[i] = sh->dc_off[sh->dc_n - 1];
            sh->dc_val[i] = sh->dc_val[sh->dc_n - 1];
            sh->dc_n--;
            return;
        }
    }
}

static uint32_t dc_get(const mqd_cursor_t *sh, uint64_t off)
{
    for (size_t i = 0; i < sh->dc_n; i++)
        if (sh->dc_off[i] == off)
            return sh->dc_val[i];
    return 0;
}

static void dc_bump(mqd_cursor_t *sh, uint64_t off)
{
    for (size_t i = 0; i < sh->dc_n; i++) {
        if (sh->dc_off[i] == off) {
            sh->dc_val[i]++;
            return;
        }
    }
    if (sh->dc_n == sh->dc_cap) {
        size_t ncap = sh->dc_cap ? sh->dc_cap * 2 : 16;
        uint64_t *no = realloc(sh->dc_off, ncap * sizeof *no);
        if (!no)
            return;
        sh->dc_off = no;
        uint32_t *nv = realloc(sh->dc_val, ncap * sizeof *nv);
        if (!nv)
            return;
        sh->dc_val = nv;
        sh->dc_cap = ncap;
    }
    sh->dc_off[sh->dc_n] = off;
    sh->dc_val[sh->dc_n++] = 1;
}

static int redeliver_add(mqd_redeliver_t *r, uint64_t off)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r->v[mid] < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < r->n && r->v[lo] == off)
        return 0;
    if (r->n == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 64;
        uint64_t *nv = realloc(r->v, ncap * sizeof *nv);
        if (!nv)
            return MQD_ENOMEM;
        r->v = nv;
        r->cap = ncap;
    }
    memmove(r->v + lo + 1, r->v + lo, (r->n - lo) * sizeof *r->v);
    r->v[lo] = off;
    r->n++;
    return 0;
}

/* Blob: floor u64, count u32, then count x (start u64, end u64) done ranges. */
/* Blob: floor u64, count u32, then count x (start u64, end u64) done ranges. */
static int load_blob(mqd_cursor_t *sh, const void *blob, size_t len)
{
    const uint8_t *b = blob;
    uint32_t n = 0;
    if (len < 12)
        return MQD_ECORRUPT;
    memcpy(&sh->floor, b, 8);
    memcpy(&n, b + 8, 4);
    for (uint32_t i = 0; i < n && 12 + (size_t)(i + 1) * 16 <= len; i++) {
        uint64_t s, e;
        memcpy(&s, b + 12 + i * 16, 8);
        memcpy(&e, b + 12 + i * 16 + 8, 8);
        for (uint64_t o = s; o < e && o - s < (1u << 26); o++)
            bit_set(sh, o);
    }
    floor_advance(sh);
    return 0;
}

int mqd_cursor_init(mqd_cursor_t *sh, mqd_part_t *p, const char *group, mqd_offset_reset_t reset)
{
    memset(sh, 0, sizeof *sh);
    mqd_read_init(&sh->rd);
    mqd_meta_t *m = p->topic->srv->meta;
    void *blob = NULL;
    size_t len = 0;
    uint64_t committed;
    int rc = mqd_meta_acks_get(m, p->topic->name, group, p->id, &blob, &len);
    if (rc == 0) {
        rc = load_blob(sh, blob, len);
        free(blob);
    } else if (rc == MQD_ENOENT) {
        rc = mqd_meta_offset_get(m, p->topic->name, group, p->id, &committed);
        if (rc == 0) {
            sh->floor = committed;
        } else if (rc == MQD_ENOENT) {
            /* a new group starts where auto_offset_reset says */
            sh->floor = reset == MQD_OFFSET_RESET_LATEST ? mqd_plog_stable_offset(p->log)
                                                         : mqd_plog_start_offset(p->log);
            sh->dirty = true;
            rc = 0;
        }
    }
    if (rc != 0)
        return rc;
    if (sh->floor < mqd_plog_start_offset(p->log))
        mqd_cursor_seek(sh, p, mqd_plog_start_offset(p->log));
    sh->next_read = sh->floor;
    return 0;
}

void mqd_cursor_seek(mqd_cursor_t *sh, mqd_part_t *p, uint64_t offset)
{
    uint64_t start = mqd_plog_start_offset(p->log), end = mqd_plog_end_offset(p->log);
    if (offset < start)
        offset = start;
    if (offset > end)
        offset = end;
    sh->floor = offset;
    sh->next_read = offset;
    if (sh->done)
        memset(sh->done, 0, sh->done_bits / 8);
    sh->redeliver.n = 0;
    sh->dc_n = 0;
    sh->rd_pos = sh->rd.n; /* drop the read-ahead */
    sh->dirty = true;
}

void mqd_cursor_free(mqd_cursor_t *sh)
{
    free(sh->done);
    free(sh->redeliver.v);
    free(sh->dc_off);
    free(sh->dc_val);
    mqd_read_free(&sh->rd);
    memset(sh, 0, sizeof *sh);
}

static bool read_one(mqd_cursor_t *sh, mqd_part_t *p, uint64_t off, mqd_rec_t *rec)
{
    int rc = mqd_plog_read(p->log, off, off + 1, 1, 1, &sh->rd);
    sh->rd_pos = sh->rd.n; /* the read-ahead was replaced: refill next time */
    if (rc != 0 || sh->rd.n == 0 || sh->rd.recs[0].offset != off)
        return false;
    *rec = sh->rd.recs[0];
    return true;
}

/* Marks an offset done without touching the in-flight count. */
static void mark_done(mqd_cursor_t *sh, uint64_t off)
{
    if (off < sh->floor || bit_set(sh, off) != 0)
        return;
    dc_remove(sh, off);
    floor_advance(sh);
    sh->dirty = true;
}

static bool next_redelivery(mqd_cursor_t *sh, mqd_part_t *p, mqd_rec_t *rec, uint32_t *dcount)
{
    while (sh->redeliver.n) {
        uint64_t off = sh->redeliver.v[0];
        sh->redeliver.n--;
        memmove(sh->redeliver.v, sh->redeliver.v + 1, sh->redeliver.n * sizeof *sh->redeliver.v);
        if (off < sh->floor || bit_get(sh, bm_base(sh), off))
            continue;
        if (read_one(sh, p, off, rec)) {
            *dcount = dc_get(sh, off);
            return true;
        }
    }
    return false;
}

bool mqd_cursor_next(mqd_cursor_t *sh, mqd_part_t *p, mqd_rec_t *rec, uint32_t *dcount)
{
    if (next_redelivery(sh, p, rec, dcount)) {
        sh->inflight++;
        return true;
    }
    for (int guard = 0; guard < 1024; guard++) {
        if (sh->rd_pos >= sh->rd.n) {
            /* read committed: never past the first offset of an open transaction */
            int rc = mqd_plog_read(p->log, sh->next_read, mqd_txn_lso(p), 256,
                                   p->topic->srv->conf->prefetch_bytes, &sh->rd);
            sh->rd_pos = 0;
            if (rc == MQD_ERANGE) {
                /* retention passed us: what was deleted counts as consumed */
                uint64_t start = mqd_plog_start_offset(p->log);
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
        if (r->offset < sh->floor || bit_get(sh, bm_base(sh), r->offset))
            continue; /* settled before a restart */
        if ((r->flags & MQD_REC_KIND_MASK) != MQD_REC_DATA ||
            ((r->flags & MQD_REC_TXN) && !mqd_txn_committed(p->topic->srv, r->txn))) {
            mark_done(sh, r->offset); /* control records and aborted sends are never delivered */
            continue;
        }
        *rec = *r;
        *dcount = 0;
        sh->inflight++;
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
    if (off < sh->floor || bit_get(sh, bm_base(sh), off))
        return;
    if (failed)
        dc_bump(sh, off);
    redeliver_add(&sh->redeliver, off);
}

static uint8_t *encode_blob(const mqd_cursor_t *sh, size_t *len)
{
    size_t cap = 64, n = 0;
    uint8_t *b = malloc(cap);
    if (!b)
        return NULL;
    uint64_t base = bm_base(sh);
    for (uint64_t o = sh->floor; o - base < sh->done_bits;) {
        if (!bit_get(sh, base, o)) {
            o++;
            continue;
        }
        uint64_t s = o;
        while (o - base < sh->done_bits && bit_get(sh, base, o))
            o++;
        if (12 + (n + 1) * 16 > cap) {
            cap = cap * 2 + 16;
            uint8_t *nb = realloc(b, cap);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
        }
        memcpy(b + 12 + n * 16, &s, 8);
        memcpy(b + 12 + n * 16 + 8, &o, 8);
        n++;
    }
    uint32_t n32 = (uint32_t)n;
    memcpy(b, &sh->floor, 8);
    memcpy(b + 8, &n32, 4);
    *len = 12 + n * 16;
    return b;
}

int mqd_cursor_save(mqd_cursor_t *sh, mqd_part_t *p, const char *group)
{
    size_t len;
    uint8_t *b = encode_blob(sh, &len);
    if (!b)
        return MQD_ENOMEM;
    mqd_meta_t *m = p->topic->srv->meta;
    mqd_meta_offset_t o = {.topic = p->topic->name, .group = group, .partition = p->id,
                           .offset = sh->floor};
    int rc = mqd_meta_offsets_commit(m, &o, 1);
    if (rc == 0)
        rc = mqd_meta_acks_put(m, p->topic->name, group, p->id, b, len);
    free(b);
    if (rc == 0)
        sh->dirty = false;
    return rc;
}
