/* Duplicate detection by message-id within a topic's dedup_window_ms: a producer that
 * resends after a lost disposition is accepted without a second copy being stored.
 * The window is kept in memory (a hash of message-id bytes, expired in arrival order).
 *
 * After a restart the window is rebuilt from the partition logs at start-up, before the
 * listeners open (mqd_topics_dedup_warm): every partition is read from the time-index
 * position of (now - dedup_window_ms) to its stable end and the message-ids of the
 * records found go back into the window with their stored timestamps. So a producer's
 * retry of a send that was durable before a crash is still recognised, SQLite is never
 * involved, a topic without dedup costs nothing at startup, and the scan (a whole window
 * of records) never stalls the event loop while it serves clients. A topic whose dedup
 * is turned on later (a reload) is rebuilt the same way at its first check.
 * Transactional records count only if their transaction committed (an aborted send may
 * be sent again), so this runs after the transactions are loaded. */
#include "config.h"
#include "core/core.h"
#include "core/core_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct dedup_ent {
    uint64_t h;  /* 0 = empty slot */
    int64_t ts;
} dedup_ent_t;

struct mqd_dedup {
    dedup_ent_t *tab;  /* open addressing */
    size_t cap, n;
    uint64_t *fifo;    /* hashes in arrival order (ring) */
    int64_t *fifo_ts;
    size_t head, len, fcap;
};

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h ? h : 1;
}

static dedup_ent_t *find(struct mqd_dedup *d, uint64_t h)
{
    size_t i = (size_t)(h * 0x9E3779B97F4A7C15ull >> 11) & (d->cap - 1);
    while (d->tab[i].h && d->tab[i].h != h)
        i = (i + 1) & (d->cap - 1);
    return &d->tab[i];
}

/* Removes a key, keeping the probe chains of open addressing intact. */
static void erase(struct mqd_dedup *d, uint64_t h)
{
    dedup_ent_t *e = find(d, h);
    if (!e->h)
        return;
    size_t i = (size_t)(e - d->tab);
    d->tab[i].h = 0;
    d->n--;
    for (size_t j = (i + 1) & (d->cap - 1); d->tab[j].h; j = (j + 1) & (d->cap - 1)) {
        dedup_ent_t moved = d->tab[j];
        d->tab[j].h = 0;
        *find(d, moved.h) = moved;
    }
}

static int grow(struct mqd_dedup *d)
{
    size_t ncap = d->cap ? d->cap * 2 : 1024;
    dedup_ent_t *old = d->tab;
    size_t ocap = d->cap;
    d->tab = calloc(ncap, sizeof *d->tab);
    if (!d->tab) {
        d->tab = old;
        return MQD_ENOMEM;
    }
    d->cap = ncap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].h)
            *find(d, old[i].h) = old[i];
    free(old);
    uint64_t *nf = malloc(ncap * sizeof *nf);
    int64_t *nt = malloc(ncap * sizeof *nt);
    if (!nf || !nt) {
        free(nf);
        free(nt);
        return MQD_ENOMEM;
    }
    for (size_t i = 0; i < d->len; i++) {
        nf[i] = d->fifo[(d->head + i) % d->fcap];
        nt[i] = d->fifo_ts[(d->head + i) % d->fcap];
    }
    free(d->fifo);
    free(d->fifo_ts);
    d->fifo = nf;
    d->fifo_ts = nt;
    d->head = 0;
    d->fcap = ncap;
    return 0;
}

static void insert(struct mqd_dedup *d, dedup_ent_t *e, uint64_t h, int64_t ts)
{
    e->h = h;
    e->ts = ts;
    d->n++;
    d->fifo[(d->head + d->len) % d->fcap] = h;
    d->fifo_ts[(d->head + d->len) % d->fcap] = ts;
    d->len++;
}

/* Adds a stored record's message-id (if any) to the window; MQD_ENOMEM stops the scan. */
static int add_record(mqd_topic_t *t, const mqd_rec_t *rec, int64_t since)
{
    struct mqd_dedup *d = t->dedup;
    mqd_msg_info_t mi;
    if ((rec->flags & MQD_REC_KIND_MASK) != MQD_REC_DATA || rec->timestamp_ms < since ||
        ((rec->flags & MQD_REC_TXN) &&
         !mqd_core_txn_committed(t->srv, rec->txn)) ||
        mqd_msg_scan_stored(rec->data, rec->len, &mi) != 0 || mi.message_id.len == 0)
        return 0;
    if ((d->n + 1) * 2 > d->cap && grow(d) != 0)
        return MQD_ENOMEM;
    uint64_t h = hash_bytes(rec->data + mi.message_id.off, mi.message_id.len);
    dedup_ent_t *e = find(d, h);
    if (!e->h)
        insert(d, e, h, rec->timestamp_ms);
    return 0;
}

/* Reads partition p from (now - window) to its stable end into the window: the log's
 * own, not the high watermark, since a new leader holds records above the watermark it
 * took over that a producer's resend must still find (forwarded sends after a failover,
 * docs/replication.md). */
static int rebuild_part(mqd_topic_t *t, mqd_part_t *p, int64_t since, mqd_read_t *rd, size_t *n)
{
    uint64_t from;
    int rc = mqd_plog_offset_for_time(p->log, since, &from);
    while (rc == 0) {
        rc = mqd_plog_read(p->log, from, mqd_plog_stable_offset(p->log), 8192, 4u << 20, rd);
        if (rc == MQD_ERANGE) { /* retention moved the start meanwhile */
            from = mqd_plog_start_offset(p->log);
            rc = 0;
            continue;
        }
        if (rc != 0 || rd->n == 0)
            break;
        for (size_t i = 0; i < rd->n && rc == 0; i++)
            rc = add_record(t, &rd->recs[i], since);
        *n += rd->n;
        from = rd->next_offset;
    }
    return rc;
}

/* The first dedup check since start: the window as the logs remember it. Records are
 * added partition after partition, so the FIFO is not in time order across partitions:
 * an id may then outlive the window by up to the spread between partitions, which can
 * only make detection stricter for that long, never miss a duplicate. */
static void rebuild(mqd_topic_t *t, int64_t now)
{
    uint64_t t0 = mqd_mono_ns();
    int64_t since = now - t->conf.dedup_window_ms;
    mqd_read_t rd;
    size_t scanned = 0;
    int rc = 0;
    mqd_read_init(&rd);
    for (uint32_t i = 0; i < t->nparts && rc == 0; i++)
        rc = rebuild_part(t, t->parts[i], since, &rd, &scanned);
    mqd_read_free(&rd);
    if (rc != 0)
        MQD_WARN("dedup", "topic=%s: rebuilding the window from the log failed: %s", t->name,
                 mqd_strerror(rc));
    MQD_INFO("dedup", "topic=%s: window rebuilt from the log: %zu ids from %zu records in %.1f ms",
             t->name, t->dedup->n, scanned, (double)(mqd_mono_ns() - t0) / 1e6);
}

static void expire(struct mqd_dedup *d, int64_t now, int64_t window)
{
    while (d->len && now - d->fifo_ts[d->head] > window) {
        uint64_t h = d->fifo[d->head];
        dedup_ent_t *e = find(d, h);
        if (e->h && e->ts == d->fifo_ts[d->head])
            erase(d, h);
        d->head = (d->head + 1) % d->fcap;
        d->len--;
    }
}

void mqd_dedup_warm(mqd_topic_t *t)
{
    if (!t->conf.dedup_window_ms || t->dedup || !(t->dedup = calloc(1, sizeof *t->dedup)))
        return;
    rebuild(t, mqd_now_ms());
}

bool mqd_dedup_seen(mqd_topic_t *t, const uint8_t *msg, const mqd_msg_info_t *mi)
{
    if (mi->message_id.len == 0)
        return false;
    int64_t now = mqd_now_ms();
    if (!t->dedup) {
        mqd_dedup_warm(t); /* normally done at start-up; here after a reload turned it on */
        if (!t->dedup)
            return false;
    }
    struct mqd_dedup *d = t->dedup;
    if (d->cap)
        expire(d, now, t->conf.dedup_window_ms);
    if ((d->n + 1) * 2 > d->cap && grow(d) != 0)
        return false;
    uint64_t h = hash_bytes(msg + mi->message_id.off, mi->message_id.len);
    dedup_ent_t *e = find(d, h);
    if (e->h) {
        t->msgs_duplicate++;
        return true;
    }
    insert(d, e, h, now);
    return false;
}

uint64_t mqd_dedup_key(const uint8_t *msg, const mqd_msg_info_t *mi)
{
    return mi->message_id.len ? hash_bytes(msg + mi->message_id.off, mi->message_id.len) : 0;
}

void mqd_dedup_forget(mqd_topic_t *t, uint64_t key)
{
    /* its FIFO entry stays: expire() skips entries whose key is gone */
    if (key && t->dedup && t->dedup->cap)
        erase(t->dedup, key);
}

void mqd_dedup_forget_pending(mqd_topic_t *t, const mqd_pending_t *pe)
{
    mqd_dedup_forget(t, pe->dedup_key);
    for (size_t i = 0; i < pe->n_batch_keys; i++)
        mqd_dedup_forget(t, pe->batch_keys[i]);
}

void mqd_dedup_free(mqd_topic_t *t)
{
    if (!t->dedup)
        return;
    free(t->dedup->tab);
    free(t->dedup->fifo);
    free(t->dedup->fifo_ts);
    free(t->dedup);
    t->dedup = NULL;
}
