/* The high-watermark checkpoint (Kafka's replication-offset-checkpoint): each node keeps
 * the watermark of every replica it holds, leader or follower, in
 * data_dir/replication-offset-checkpoint, so that a node that leads right after its own
 * restart, before any follower reported, exposes what was committed instead of nothing.
 *
 * Why exposing up to the checkpoint is safe: a watermark H (the leader's, or the one a
 * follower learned from its leader) means every record below H was on every in-sync
 * replica when H was set. A later leader comes from the in-sync set (or was in it when
 * H was set, or reached the leader's watermark to rejoin it), so it holds those records:
 * they are never cut away by a truncation by epoch, and a consumer that read them never
 * sees them vanish. The checkpoint only lags the live watermark (by up to
 * hw_checkpoint_interval_ms plus one write), so a restarted leader may expose less than
 * was committed until its followers report, never more.
 *
 * Never above what the log holds: the value trusted is min(H, the log's stable offset,
 * the end of its records of epochs <= EPOCH), EPOCH being the epoch of the record at
 * H - 1 when the line was written. A power cut that took the log's unsynced tail lowers
 * the stable offset; a truncation by epoch that cut below H and fetched other records
 * in their place (an unclean election) left records of a later epoch there, which the
 * epoch bound excludes (two replicas' records of one epoch at one offset are the same
 * record).
 *
 * Writing: the loop collects the values every hw_checkpoint_interval_ms and, when one
 * changed, hands the file's bytes to a writer thread (temp file, fdatasync, rename,
 * directory fsync: mqd_repl_hwck_write), so no fsync runs on the loop; a newer state
 * replaces one the thread has not taken yet. A clean stop joins the thread and writes
 * the last values itself. */
#include "config.h"
#include "repl/repl_int.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct hwck {
    mqd_repl_hwck_t ck; /* loop thread: the values as last collected (or read) */
    int64_t last_ms;
    bool dirty;   /* ck changed since it was last handed to the writer */
    bool running; /* the writer thread exists */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *pending; /* under mu: bytes for the writer, NULL: none */
    size_t pending_len;
    bool stop;
    char *dir;
};

/* The epoch of the record at off (a stable one): what the checkpoint line names. */
static int epoch_at(mqd_repl_t *r, mqd_plog_t *log, uint64_t off, uint32_t *epoch)
{
    size_t len = 0, pos = 0, cap = r->cap < 4096 ? r->cap : 4096;
    uint64_t next;
    mqd_raw_rec_t rec;
    int rc = mqd_plog_read_raw(log, off, r->buf, cap, &len, &next);
    if (rc == MQD_ETOOBIG && (rc = mqd_repl_grow(r, len)) == 0)
        rc = mqd_plog_read_raw(log, off, r->buf, len, &len, &next);
    if (rc == 0 && mqd_store_raw_next(r->buf, len, &pos, &rec) != 1)
        rc = MQD_EIO;
    if (rc == 0)
        *epoch = rec.epoch;
    return rc;
}

uint64_t mqd_repl_hwck_trusted(mqd_repl_t *r, mqd_plog_t *log, const mqd_repl_hwck_ent_t *e)
{
    uint64_t stable = mqd_plog_stable_offset(log), end;
    uint32_t largest;
    uint64_t v = e->hw < stable ? e->hw : stable;
    if (v == 0 || mqd_repl_epoch_end(r, log, e->epoch, &end, &largest) != 0)
        return 0;
    return v < end ? v : end;
}

static void *writer(void *arg)
{
    struct hwck *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->pending && !h->stop)
            pthread_cond_wait(&h->cv, &h->mu);
        if (!h->pending)
            break; /* stopping, nothing left */
        char *b = h->pending;
        size_t n = h->pending_len;
        h->pending = NULL;
        pthread_mutex_unlock(&h->mu);
        int rc = mqd_repl_hwck_write(h->dir, b, n);
        if (rc != 0)
            MQD_WARN("repl", "%s/%s not written: %s (the previous one stays)", h->dir,
                     MQD_REPL_HWCK_FILE, mqd_strerror(rc));
        free(b);
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* The watermark this node knows for rp's replica, bounded by its stable offset, into the
 * table; nothing while it knows none (the line read at start stays). */
static void collect_one(mqd_repl_t *r, struct hwck *h, rpart_t *rp)
{
    mqd_plog_t *log = mqd_part_log(rp->local);
    if (!rp->lead && !mqd_part_hw_set(rp->local))
        return;
    uint64_t hw = rp->lead ? rp->lead->hw : mqd_part_hw(rp->local);
    uint64_t stable = mqd_plog_stable_offset(log);
    if (hw > stable)
        hw = stable; /* a follower learns the leader's, which may be above its own log */
    const mqd_repl_hwck_ent_t *old = mqd_repl_hwck_get(&h->ck, rp->topic, rp->part);
    if (old && old->hw == hw)
        return;
    uint32_t epoch = 0;
    if (hw > mqd_plog_start_offset(log) && epoch_at(r, log, hw - 1, &epoch) != 0)
        return; /* truncating (MQD_EAGAIN) or unreadable: the next time */
    if (mqd_repl_hwck_set(&h->ck, rp->topic, rp->part, hw, epoch) > 0)
        h->dirty = true;
}

static void collect(mqd_repl_t *r)
{
    for (rpart_t *rp = r->parts; rp; rp = rp->next)
        if (rp->local && rp->ps.n_replicas > 1) /* one replica: the stable offset is all */
            collect_one(r, r->hwck, rp);
}

void mqd_repl_hwck_tick(mqd_repl_t *r, int64_t now_ms)
{
    struct hwck *h = r->hwck;
    if (!h || !h->running || now_ms - h->last_ms < (int64_t)r->conf->hw_checkpoint_interval_ms)
        return;
    h->last_ms = now_ms;
    collect(r);
    char *b;
    size_t n;
    if (!h->dirty || mqd_repl_hwck_format(&h->ck, &b, &n) != 0)
        return;
    h->dirty = false;
    pthread_mutex_lock(&h->mu);
    free(h->pending); /* not taken yet: this one is newer */
    h->pending = b;
    h->pending_len = n;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* A replicated partition on disk gets the watermark its checkpoint line allows (0 without
 * one) before anything reads it: until then the commit point follows the stable offset
 * as on a single node, and a consumer attached before this node knew its role would read
 * records nobody committed. */
static void seed(mqd_repl_t *r, struct hwck *h)
{
    size_t n = 0, from_file = 0;
    for (mqd_topic_t *t = mqd_srv_topic_first(r->s); t; t = mqd_srv_topic_next(t)) {
        if (mqd_topic_conf(t)->replication_factor <= 1 || mqd_topic_temporary(t) ||
            mqd_topic_name(t)[0] == '$')
            continue;
        for (uint32_t i = 0; i < mqd_topic_nparts(t); i++) {
            mqd_part_t *p = mqd_topic_part(t, i);
            if (mqd_part_hw_set(p))
                continue;
            const mqd_repl_hwck_ent_t *e = mqd_repl_hwck_get(&h->ck, mqd_topic_name(t), i);
            uint64_t hw = e ? mqd_repl_hwck_trusted(r, mqd_part_log(p), e) : 0;
            mqd_part_set_hw(p, hw);
            n++;
            from_file += e != NULL;
            if (e && hw < e->hw)
                MQD_NOTICE("repl",
                           "%s/%u: checkpointed high watermark %" PRIu64 " (epoch %" PRIu32
                           ") trusted only up to %" PRIu64 " (stable %" PRIu64 ")",
                           mqd_topic_name(t), i, e->hw, e->epoch, hw,
                           mqd_plog_stable_offset(mqd_part_log(p)));
        }
    }
    if (n)
        MQD_NOTICE("repl", "high watermarks of %zu replicas set, %zu of them from %s/%s", n,
                   from_file, h->dir, MQD_REPL_HWCK_FILE);
}

int mqd_repl_hwck_start(mqd_repl_t *r)
{
    struct hwck *h = calloc(1, sizeof *h);
    if (!h || !(h->dir = strdup(r->conf->data_dir))) {
        free(h);
        return MQD_ENOMEM;
    }
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    r->hwck = h;
    int rc = mqd_repl_hwck_read(h->dir, &h->ck);
    if (rc == MQD_ECORRUPT || (rc != 0 && rc != MQD_ENOENT))
        MQD_WARN("repl",
                 "%s/%s: %s: ignored (every replica starts from watermark 0 until its "
                 "followers or leader report)",
                 h->dir, MQD_REPL_HWCK_FILE, mqd_strerror(rc));
    seed(r, h);
    h->last_ms = mqd_now_ms();
    if (pthread_create(&h->th, NULL, writer, h) != 0) {
        MQD_WARN("repl", "no high-watermark checkpoint writer thread: checkpoints only at a "
                         "clean stop");
        return 0;
    }
    h->running = true;
    return 0;
}

void mqd_repl_hwck_stop(mqd_repl_t *r)
{
    struct hwck *h = r->hwck;
    if (!h)
        return;
    if (h->running) {
        pthread_mutex_lock(&h->mu);
        h->stop = true;
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->th, NULL); /* it writes what it was handed first */
        h->running = false;
    }
    /* a clean stop: the last values, whether or not they changed since */
    collect(r);
    char *b;
    size_t n;
    int rc = mqd_repl_hwck_format(&h->ck, &b, &n);
    if (rc == 0) {
        rc = mqd_repl_hwck_write(h->dir, b, n);
        free(b);
    }
    if (rc != 0)
        MQD_WARN("repl", "%s/%s not written at stop: %s", h->dir, MQD_REPL_HWCK_FILE,
                 mqd_strerror(rc));
    else
        MQD_NOTICE("repl", "high watermarks of %zu replicas written to %s/%s", h->ck.n, h->dir,
                   MQD_REPL_HWCK_FILE);
    free(h->pending);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    mqd_repl_hwck_clear(&h->ck);
    free(h->dir);
    free(h);
    r->hwck = NULL;
}
