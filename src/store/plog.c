/* Partition logs on the owner thread: open, append into the pending batch, read,
 * time lookup, retention, and the parts of truncation that need no disk sync. */
#include "config.h"
#include "store/store_int.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define READ_CHUNK_MIN (64u << 10)
#define READ_CHUNK_MAX (8u << 20)

void mqd_plog_config_default(mqd_plog_config_t *c)
{
    memset(c, 0, sizeof *c);
    c->segment_bytes = 1ull << 30;
    c->segment_ms = 7ll * 24 * 3600 * 1000;
    c->flush = MQD_FLUSH_SYNC;
    c->flush_interval_ms = 1000;
    c->index_interval_bytes = 4096;
}

static void clamp_config(mqd_plog_config_t *c)
{
    /* Index positions are u32: keep segments well below 4 GiB. */
    if (c->segment_bytes == 0 || c->segment_bytes > (3ull << 30))
        c->segment_bytes = 3ull << 30;
    if (c->index_interval_bytes == 0)
        c->index_interval_bytes = 4096;
    if (c->flush_interval_ms == 0)
        c->flush_interval_ms = 1000;
}

static int topic_name_ok(const char *t)
{
    return t && *t && strcmp(t, ".") != 0 && strcmp(t, "..") != 0 && !strchr(t, '/') &&
           strlen(t) < 256;
}

void plog_free(mqd_plog_t *log)
{
    if (!log)
        return;
    store_zero_detach(log); /* before its segments' descriptors close */
    store_fd_forget(log);
    while (log->head) {
        seg_t *s = log->head;
        log->head = s->next;
        seg_free(s);
    }
    while (log->queue) {
        batch_t *b = log->queue;
        log->queue = b->next;
        free(b->buf);
        free(b);
    }
    if (log->pending) {
        free(log->pending->buf);
        free(log->pending);
    }
    store_cold_end(log);
    store_corrupt_free(log);
    pthread_mutex_destroy(&log->mu);
    free(log->topic);
    free(log->dir);
    free(log);
}

int plog_open(mqd_store_t *st, const char *topic, uint32_t partition,
              const mqd_plog_config_t *cfg, mqd_plog_t **out)
{
    if (!topic_name_ok(topic))
        return MQD_EINVAL;
    mqd_plog_t *log = calloc(1, sizeof *log);
    if (!log)
        return MQD_ENOMEM;
    pthread_mutex_init(&log->mu, NULL);
    log->st = st;
    log->partition = partition;
    log->topic = strdup(topic);
    size_t n = strlen(st->root) + strlen(topic) + 32;
    log->dir = malloc(n);
    int rc = MQD_ENOMEM;
    if (!log->topic || !log->dir)
        goto err;
    snprintf(log->dir, n, "%s/topics/%s/%u", st->root, topic, partition);
    if (cfg)
        log->cfg = *cfg;
    else
        mqd_plog_config_default(&log->cfg);
    clamp_config(&log->cfg);
    rc = mqd_mkdirs(log->dir, 0755);
    if (rc == 0)
        rc = log_recover(log);
    /* An empty log may be one whose directories an earlier run made and then died before
     * their parents were synced: sync topics/T/N's chain before anything is appended. */
    if (rc == 0 && log->end == 0)
        rc = mqd_fsync_parents(log->dir, strlen(st->root));
    if (rc != 0)
        goto err;
    /* Recovery synced what it kept: the log holds no descriptor until it is used, so a
     * start with 40,000 partitions opens them one at a time, not all at once. */
    store_fd_release(log, NULL);
    log->last_sync_ms = log->last_ckpt_ms = mqd_now_ms();
    /* A clean restart keeps the checkpoint it found; otherwise write one soon. */
    log->ckpt_durable = log->ckpt_clean ? log->end : UINT64_MAX;
    *out = log;
    return 0;
err:
    MQD_ERR("store", "cannot open %s/%u: %s", topic, partition, mqd_strerror(rc));
    plog_free(log);
    return rc;
}

void mqd_plog_set_config(mqd_plog_t *log, const mqd_plog_config_t *cfg)
{
    mqd_plog_config_t c = *cfg;
    clamp_config(&c);
    pthread_mutex_lock(&log->mu);
    log->cfg = c;
    pthread_mutex_unlock(&log->mu);
}

void mqd_plog_set_stable_cb(mqd_plog_t *log, mqd_plog_stable_cb cb, void *arg)
{
    log->cb = cb;
    log->cb_arg = arg;
}

void mqd_plog_set_commit_tap(mqd_plog_t *log, mqd_plog_tap_fn fn, void *arg)
{
    log->tap = fn;
    log->tap_arg = arg;
}

void mqd_plog_set_epoch(mqd_plog_t *log, uint32_t epoch)
{
    log->epoch = epoch;
}

int plog_batch_reserve(mqd_plog_t *log, size_t more)
{
    if (!log->pending) {
        log->pending = store_batch_get(log->st);
        if (!log->pending)
            return MQD_ENOMEM;
        log->pending->first_off = log->end;
    }
    if (!log->on_pend) {
        log->on_pend = 1;
        log->pend_next = log->st->pend_logs;
        log->st->pend_logs = log;
    }
    batch_t *b = log->pending;
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64 << 10;
    while (cap < b->len + more)
        cap *= 2;
    uint8_t *p = realloc(b->buf, cap);
    if (!p)
        return MQD_ENOMEM;
    b->buf = p;
    b->cap = cap;
    return 0;
}

int mqd_plog_append(mqd_plog_t *log, const mqd_rec_in_t *recs, size_t n, uint64_t *first_offset)
{
    if (__atomic_load_n(&log->failed, __ATOMIC_ACQUIRE))
        return MQD_EFAILED;
    if (log->truncating)
        return MQD_EAGAIN; /* truncate.c: the flusher is cutting the tail */
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (recs[i].len > REC_MAX_DATA)
            return MQD_ETOOBIG;
        total += REC_HDR + recs[i].len;
    }
    /* The flusher writes through the tail's descriptor: open before it gets the batch. */
    store_fd_touch(log);
    pthread_mutex_lock(&log->mu);
    int rc = seg_fd_get(log, log->tail);
    pthread_mutex_unlock(&log->mu);
    if (rc < 0)
        return rc;
    rc = plog_batch_reserve(log, total);
    if (rc != 0)
        return rc;
    batch_t *b = log->pending;
    int64_t now = 0;
    uint64_t first = log->end;
    for (size_t i = 0; i < n; i++) {
        const mqd_rec_in_t *r = &recs[i];
        uint8_t *p = b->buf + b->len;
        uint32_t len = REC_LEN_MIN + r->len;
        uint64_t off = log->end++;
        int64_t ts = r->timestamp_ms;
        if (ts == 0)
            ts = now ? now : (now = mqd_now_ms());
        memcpy(p, &len, 4);
        memcpy(p + 8, &off, 8);
        memcpy(p + 16, &ts, 8);
        memcpy(p + 24, &log->epoch, 4);
        memcpy(p + 28, &r->flags, 4);
        memcpy(p + 32, &r->txn, 8);
        if (r->len)
            memcpy(p + REC_HDR, r->data, r->len);
        uint32_t crc = mqd_crc32c(0, p + 8, len - 4);
        memcpy(p + 4, &crc, 4);
        b->len += REC_HDR + r->len;
        b->nrec++;
    }
    b->end_off = log->end;
    *first_offset = first;
    return 0;
}

/* ---- reads ---- */

void mqd_read_init(mqd_read_t *r)
{
    memset(r, 0, sizeof *r);
}

void mqd_read_free(mqd_read_t *r)
{
    store_cold_unpin(r->pin);
    free(r->recs);
    free(r->buf);
    memset(r, 0, sizeof *r);
}

static int read_reserve(mqd_read_t *r, size_t bytes, size_t recs)
{
    if (bytes > r->cap_buf) {
        uint8_t *p = realloc(r->buf, bytes);
        if (!p)
            return MQD_ENOMEM;
        r->buf = p;
        r->cap_buf = bytes;
    }
    if (recs > r->cap_recs) {
        size_t c = r->cap_recs ? r->cap_recs * 2 : 64;
        while (c < recs)
            c *= 2;
        mqd_rec_t *p = realloc(r->recs, c * sizeof *p);
        if (!p)
            return MQD_ENOMEM;
        r->recs = p;
        r->cap_recs = c;
    }
    return 0;
}

typedef struct rd_pos {
    int fd;
    int dfd;          /* the segment's O_DIRECT descriptor, else -1 */
    uint64_t base;    /* the segment's base offset */
    uint64_t pos, seg_end, at_off;
    uint64_t next_off; /* offset after the segment's last record (when located) */
    uint64_t dio_end; /* O_DIRECT reads stay below (cold_req_t) */
    uint64_t avg_rec; /* the segment's average record size (bytes incl. header), 0 unknown */
    int has_next;
} rd_pos_t;

/* The O_DIRECT descriptor of a segment (opened on first use, under log->mu) and the
 * bytes it may read. Older segments were fdatasync'd when they rolled and are never
 * written again; the tail is read directly only below its synced size rounded down to
 * a page: those pages are clean and never rewritten (appends go past them; a failed
 * log cuts only unsynced bytes; a truncation ends the chain first), so a direct read
 * sees exactly what a buffered one would, and never makes the kernel write back pages
 * the flusher is about to sync. */
static int seg_dfd(const mqd_plog_t *log, seg_t *s, uint64_t *dio_end)
{
    *dio_end = UINT64_MAX;
    if (s == log->tail) {
        *dio_end = __atomic_load_n(&s->synced, __ATOMIC_ACQUIRE) & ~(uint64_t)(DC_ALIGN - 1);
        if (*dio_end == 0)
            return -1;
    }
    if (s->dfd == -1) {
        char p[4096];
        seg_path(log, s->base, "log", p, sizeof p);
        s->dfd = store_fd_open(log->st, p, O_RDONLY | O_DIRECT);
        if (s->dfd < 0)
            s->dfd = errno == EMFILE || errno == ENFILE ? -1 : -2; /* -2: the file system
                                                 * refuses O_DIRECT: buffered reads only */
    }
    return s->dfd >= 0 ? s->dfd : -1;
}

static uint64_t seg_avg_rec(const seg_t *s)
{
    return s->next_off > s->base ? s->size / (s->next_off - s->base) : 0;
}

/* s's descriptor for a read (log->mu held). Opening an older segment closes the log's
 * other older ones (fdlru.c): a reader moving through a long log holds one at a time. */
int plog_read_fd(mqd_plog_t *log, seg_t *s)
{
    if (s->fd >= 0 || s == log->tail)
        return seg_fd_get(log, s);
    for (seg_t *o = log->head; o != log->tail; o = o->next) {
        if (o->fd >= 0) {
            store_fd_close(log->st, o->fd);
            o->fd = -1;
        }
        if (o->dfd >= 0) {
            store_fd_close(log->st, o->dfd);
            o->dfd = -1;
        }
    }
    return seg_fd_get(log, s);
}

int plog_locate_seg(mqd_plog_t *log, uint64_t from, seg_t **sp, int *fd)
{
    seg_t *s = log->tail;
    while (s && s->base > from)
        s = s->prev;
    *sp = s;
    if (!s)
        return MQD_ERANGE;
    *fd = plog_read_fd(log, s);
    return *fd < 0 ? MQD_EIO : 0;
}

/* Locates `from` (or the next segment's start) under the log mutex. */
static int read_locate(mqd_plog_t *log, uint64_t from, rd_pos_t *p)
{
    pthread_mutex_lock(&log->mu);
    seg_t *s;
    int rc = plog_locate_seg(log, from, &s, &p->fd);
    if (rc == 0) {
        p->dfd = seg_dfd(log, s, &p->dio_end);
        p->base = s->base;
        p->pos = seg_lookup_pos(s, from, &p->at_off);
        p->seg_end = s->size;
        p->next_off = s->next ? s->next->base : s->next_off;
        p->avg_rec = seg_avg_rec(s);
        p->has_next = s->next != NULL;
        if (p->pos >= p->seg_end && s->next) {
            s = s->next;
            p->fd = plog_read_fd(log, s);
            if (p->fd < 0)
                rc = MQD_EIO;
            p->dfd = p->fd < 0 ? -1 : seg_dfd(log, s, &p->dio_end);
            p->base = s->base;
            p->pos = 0;
            p->at_off = s->base;
            p->seg_end = s->size;
            p->next_off = s->next ? s->next->base : s->next_off;
            p->avg_rec = seg_avg_rec(s);
            p->has_next = s->next != NULL;
        }
    }
    pthread_mutex_unlock(&log->mu);
    return rc;
}

typedef struct rd_lim { uint64_t from, bound; size_t max_recs, max_bytes; } rd_lim_t;

/* Parses records in r->buf[0..got); returns 1 when the read is complete, 0 when more
 * bytes are needed (p->pos moved to the first unparsed record), or an error. */
static int read_parse(mqd_plog_t *log, mqd_read_t *r, const uint8_t *buf, size_t got,
                      rd_pos_t *p, const rd_lim_t *l, size_t *used)
{
    size_t c = 0;
    while (c + REC_HDR <= got) {
        const uint8_t *h = buf + c;
        uint32_t len = rd32(h);
        uint64_t off = rd64(h + 8);
        if (p->at_off >= l->bound) /* not `off`: a damaged offset must not end the read */
            return 1;
        if (len < REC_LEN_MIN || off != p->at_off)
            goto corrupt;
        if (c + 4 + len > got)
            break;
        if (off >= l->from) {
            if (r->n && (*used + 4 + len > l->max_bytes))
                return 1;
            if (mqd_crc32c(0, h + 8, len - 4) != rd32(h + 4))
                goto corrupt;
            mqd_rec_t *o = &r->recs[r->n++];
            o->offset = off;
            o->timestamp_ms = (int64_t)rd64(h + 16);
            o->epoch = rd32(h + 24);
            o->flags = rd32(h + 28);
            o->txn = rd64(h + 32);
            o->data = h + REC_HDR;
            o->len = len - REC_LEN_MIN;
            *used += 4 + len;
            r->next_offset = off + 1;
            if (r->n >= l->max_recs)
                return 1;
        }
        c += 4 + len;
        p->at_off++;
    }
    p->pos += c;
    return 0;
corrupt:
    p->pos += c; /* the damaged record: mqd_plog_read skips it (corrupt.c) */
    MQD_UNUSED(log);
    return MQD_ECORRUPT;
}

/* The damaged record at p->pos: r gets one MQD_REC_CORRUPT record for each offset the
 * damage covers from `from` on (below the bound, within max_recs), p moves to the next
 * intact record. 0, or an error when the damage cannot be skipped. */
static int skip_corrupt(mqd_plog_t *log, mqd_read_t *r, rd_pos_t *p, const rd_lim_t *l)
{
    uint64_t np, no;
    int rc = store_corrupt_skip(log, p->fd, p->base, p->pos, p->at_off, p->seg_end, p->next_off,
                                &np, &no);
    if (rc == 0)
        rc = read_reserve(r, 1, l->max_recs); /* r->n is 0: nothing points into r->buf */
    if (rc != 0)
        return rc;
    uint64_t o = p->at_off > l->from ? p->at_off : l->from;
    for (; o < no && o < l->bound && r->n < l->max_recs; o++) {
        r->recs[r->n++] = (mqd_rec_t){.offset = o, .flags = MQD_REC_CORRUPT, .data = r->buf};
        r->next_offset = o + 1;
    }
    if (o < no && r->n) /* the rest of the span at the next read */
        return 0;
    p->pos = np;
    p->at_off = no;
    return 0;
}

/* Bytes to pread for one call: max_bytes, but no more than max_recs records of the
 * segment's average size need (plus the index gap before `from` and some slack). Bytes
 * past the last record returned are read again by the next call, so over-reading is a
 * pure cost: a cursor asking for 256 x 1 KiB records with a 1 MiB budget used to copy
 * every byte of the log ~4 times out of the page cache (bench/backlog.sh: rchar is
 * 4.0 x the payload). */
static size_t chunk_for(const mqd_plog_t *log, size_t max_bytes, size_t max_recs, uint64_t avg_rec)
{
    size_t want = max_bytes < READ_CHUNK_MAX ? max_bytes : READ_CHUNK_MAX;
    if (avg_rec && max_recs < want / avg_rec)
        want = max_recs * avg_rec + max_recs * avg_rec / 8;
    want += log->cfg.index_interval_bytes + REC_HDR;
    return want < READ_CHUNK_MIN ? READ_CHUNK_MIN : want > READ_CHUNK_MAX ? READ_CHUNK_MAX : want;
}

int mqd_plog_read(mqd_plog_t *log, uint64_t from, uint64_t upper, size_t max_records,
                  size_t max_bytes, mqd_read_t *r)
{
    uint64_t stable = mqd_plog_stable_offset(log);
    rd_lim_t l = {from, upper < stable ? upper : stable,
                  max_records == 0 ? 1 : max_records < 8192 ? max_records : 8192, max_bytes};
    r->n = 0;
    r->next_offset = from;
    store_cold_unpin(r->pin); /* the last read's records go */
    r->pin = NULL;
    if (log->truncating)
        return MQD_EAGAIN; /* truncate.c: segments may go under the read */
    if (from < log->start)
        return MQD_ERANGE;
    if (from >= l.bound)
        return 0;
    rd_pos_t p = {.fd = -1, .dfd = -1};
    store_fd_touch(log);
    int rc = read_locate(log, from, &p);
    size_t want = chunk_for(log, max_bytes, l.max_recs, p.avg_rec), used = 0;
    while (rc == 0) {
        if (p.pos >= p.seg_end) {
            if (r->n || !p.has_next)
                break;
            uint64_t base = p.base;
            rc = read_locate(log, p.at_off, &p);
            /* Back into the segment just read: it ended before the offsets it claims
             * (damage kept in an unhealthy segment). Re-reading it would never end.
             * (By base: a descriptor number is reused once fdlru.c closes one.) */
            if (rc == 0 && p.base == base && p.pos < p.seg_end)
                rc = MQD_ECORRUPT;
            continue;
        }
        size_t n = (size_t)(p.seg_end - p.pos < want ? p.seg_end - p.pos : want);
        rc = read_reserve(r, n, l.max_recs);
        ssize_t got = -1;
        const uint8_t *src = r->buf;
        if (rc == 0) {
            /* the page cache, else O_DIRECT chunks (coldread.c): records of a chunk are
             * not copied, r pins the chunk instead (a cold read copied every byte once
             * more than a warm one: ~3 s of the loop's CPU for a 10 GB backlog) */
            cold_req_t q = {p.fd, p.dfd, p.base, p.pos, n, p.seg_end, p.dio_end};
            store_cold_unpin(r->pin); /* an earlier pass of this loop found no record */
            size_t cold = store_cold_read(log, &q, r->buf, &src, &r->pin);
            got = cold ? (ssize_t)cold : pread(p.fd, r->buf, n, (off_t)p.pos);
        }
        if (rc == 0 && got <= 0)
            rc = got == 0 ? 1 : MQD_EIO; /* 0: a failed log cut its unsynced tail */
        if (rc == 0)
            rc = read_parse(log, r, src, (size_t)got, &p, &l, &used);
        if (rc == MQD_ECORRUPT && p.pos < p.seg_end) {
            if (r->n)
                return 0; /* what came before first; the next read starts at the damage */
            rc = skip_corrupt(log, r, &p, &l);
        }
        if (rc == 1 || (rc == 0 && r->n))
            return 0; /* done, or a partial chunk after some records: caller reads on */
        if (rc == 0 && r->n == 0 && p.pos < p.seg_end) {
            uint8_t h[4]; /* a record larger than the chunk: size the next read to it */
            uint64_t left = p.seg_end - p.pos;
            bool hdr = left >= REC_HDR && pread(p.fd, h, 4, (off_t)p.pos) == 4;
            /* A partial record up to the segment end never completes (damage kept in an
             * unhealthy segment): fail instead of spinning. */
            if (left < REC_HDR || (hdr && 4 + (uint64_t)rd32(h) > left)) {
                rc = skip_corrupt(log, r, &p, &l); /* a damaged length */
                if (rc == 0 && r->n)
                    return 0;
            } else if (hdr && 4 + (size_t)rd32(h) > want)
                want = 4 + (size_t)rd32(h);
        }
        if (r->n >= l.max_recs)
            break;
    }
    return rc < 0 ? rc : 0;
}

int mqd_plog_offset_for_time(mqd_plog_t *log, int64_t ts_ms, uint64_t *out)
{
    uint64_t from = UINT64_MAX;
    if (log->truncating)
        return MQD_EAGAIN; /* the flusher rebuilds the time index */
    pthread_mutex_lock(&log->mu);
    for (seg_t *s = log->head; s; s = s->next) {
        if (s->next_off > s->base && s->max_ts >= ts_ms) {
            from = seg_lookup_time(s, ts_ms);
            break;
        }
    }
    pthread_mutex_unlock(&log->mu);
    if (from == UINT64_MAX) {
        *out = log->end;
        return 0;
    }
    mqd_read_t r;
    mqd_read_init(&r);
    int rc = 0;
    uint64_t found = log->end;
    while (found == log->end) {
        rc = mqd_plog_read(log, from, UINT64_MAX, 1024, 1 << 20, &r);
        if (rc != 0 || r.n == 0)
            break;
        for (size_t i = 0; i < r.n && found == log->end; i++)
            if (r.recs[i].timestamp_ms >= ts_ms)
                found = r.recs[i].offset;
        from = r.next_offset;
    }
    mqd_read_free(&r);
    if (rc == 0)
        *out = found;
    return rc;
}

/* ---- accessors ---- */

uint64_t mqd_plog_start_offset(const mqd_plog_t *log) { return log->start; }
uint64_t mqd_plog_end_offset(const mqd_plog_t *log) { return log->end; }

uint64_t mqd_plog_stable_offset(const mqd_plog_t *log)
{
    /* A failed log reports nothing past its last good sync as stable. */
    if (__atomic_load_n(&log->failed, __ATOMIC_ACQUIRE))
        return __atomic_load_n(&log->durable, __ATOMIC_ACQUIRE);
    return __atomic_load_n(&log->stable, __ATOMIC_ACQUIRE);
}

uint64_t mqd_plog_durable_offset(const mqd_plog_t *log)
{
    return __atomic_load_n(&log->durable, __ATOMIC_ACQUIRE);
}

uint64_t mqd_plog_size_bytes(const mqd_plog_t *log)
{
    mqd_plog_t *l = (mqd_plog_t *)log; /* the mutex is not part of the logical state */
    uint64_t n = 0;
    pthread_mutex_lock(&l->mu);
    for (seg_t *s = l->head; s; s = s->next)
        n += s->size;
    pthread_mutex_unlock(&l->mu);
    return n;
}

int64_t mqd_plog_last_timestamp(const mqd_plog_t *log)
{
    mqd_plog_t *l = (mqd_plog_t *)log;
    int64_t ts = 0;
    pthread_mutex_lock(&l->mu);
    for (seg_t *s = l->tail; s && ts == 0; s = s->prev)
        ts = s->next_off > s->base ? s->max_ts : 0;
    pthread_mutex_unlock(&l->mu);
    return ts;
}

bool mqd_plog_failed(const mqd_plog_t *log) { return __atomic_load_n(&log->failed, __ATOMIC_ACQUIRE); }
bool mqd_plog_unhealthy(const mqd_plog_t *log)
{
    return __atomic_load_n(&log->unhealthy, __ATOMIC_ACQUIRE);
}
const char *mqd_plog_topic(const mqd_plog_t *log) { return log->topic; }
uint32_t mqd_plog_partition(const mqd_plog_t *log) { return log->partition; }

/* ---- retention ---- */

static int deletable(const mqd_plog_t *log, const seg_t *s, uint64_t total, uint64_t keep_from,
                     int64_t now_ms)
{
    const mqd_plog_config_t *c = &log->cfg;
    if (!s->next || s->next->base > keep_from || s->next->base > mqd_plog_stable_offset(log))
        return 0;
    if (c->retention_consumed)
        return 1;
    if (c->retention_bytes && total - s->size >= c->retention_bytes)
        return 1;
    return c->retention_ms && s->max_ts < now_ms - c->retention_ms;
}

int mqd_plog_retain(mqd_plog_t *log, uint64_t keep_from, int64_t now_ms)
{
    if (log->truncating)
        return 0; /* the flusher changes the segment list: next time */
    uint64_t total = mqd_plog_size_bytes(log);
    int n = 0;
    for (;;) {
        pthread_mutex_lock(&log->mu);
        seg_t *s = log->head;
        int del = deletable(log, s, total, keep_from, now_ms);
        if (del) {
            /* Only the flusher touches the tail, and s is never the tail. */
            log->head = s->next;
            log->head->prev = NULL;
            log->start = log->head->base;
        }
        pthread_mutex_unlock(&log->mu);
        if (!del)
            break;
        MQD_INFO("store", "%s: retention deletes segment %" PRIu64 " (%" PRIu64 " bytes)",
                 log->dir, s->base, s->size);
        total -= s->size;
        seg_unlink(log, s);
        seg_free(s);
        n++;
    }
    if (n) {
        /* The directory fsync is the flusher's job: the owner never waits on disk. */
        __atomic_store_n(&log->dir_dirty, 1, __ATOMIC_RELEASE);
        store_kick_log(log->st, log);
    }
    return n;
}
