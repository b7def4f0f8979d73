/* The store: the set of partition logs and the flusher thread.
 *
 * Batching design. The owner (event loop) never issues a write or a sync. mqd_plog_append
 * encodes records (header + CRC) into the log's in-memory pending batch; mqd_store_commit
 * moves each pending batch onto the log's hand-off queue under the log mutex (a pointer
 * swap) and kicks the flusher. The flusher takes every queued batch of a log at once,
 * writes them with ONE pwritev at the end of the active segment, updates the in-memory
 * indexes, and then:
 *   flush=sync   fdatasync once for all of them (group commit), then stable = durable =
 *                the end of the batch;
 *   flush=async  stable = end of the batch at once; fdatasync after flush_messages
 *                records or flush_interval_ms, then durable catches up.
 * Rolls happen between batches on the flusher: the old segment (and its indexes) is
 * fdatasync'd before the new one is linked in, so a batch never spans two files and stable
 * never passes unsynced bytes of an old segment. An error from any write or sync marks
 * the log failed for good: stable stops (and, in async mode, falls back to durable), the
 * unsynced tail is cut back if possible, and appends return MQD_EFAILED.
 *
 * When stable advances, the flusher puts the log on st->adv and calls wake(); the owner's
 * mqd_store_dispatch runs those logs' on_stable callbacks. Locks: st->mu guards the log list,
 * the work list, the batch free list and each log's `flushing` flag; log->mu guards a
 * log's segment list, indexes and queue. The flusher never holds st->mu while doing I/O.
 *
 * Cost with many partitions: a commit walks only the logs appended to since the last
 * one, a kick makes the flusher visit only the logs on its work list, the timed pass
 * (async syncs, checkpoints; once per TICK_MS) only the logs on st->timed, a dispatch only
 * the logs on st->adv, and a lookup by name is a hash probe. Nothing walks every log
 * except open-time recovery and close, so idle partitions cost no CPU.
 */
#include "config.h"
#include "store/store_int.h"
#include "util/util.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TICK_MS 20
#define CKPT_EVERY_MS 2000
#define IDX_STEP 1024 /* index entries appended to the files at once, between checkpoints */

static ssize_t io_pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
    return pwritev(fd, iov, n, off);
}

void mqd_store_io_default(mqd_store_io_t *io)
{
    *io = (mqd_store_io_t){io_pwritev, pwrite, fdatasync, fsync, ftruncate, syncfs};
}

void mqd_store_set_io(mqd_store_t *st, const mqd_store_io_t *io)
{
    if (io)
        st->io = *io;
    else
        mqd_store_io_default(&st->io);
}

batch_t *store_batch_get(mqd_store_t *st)
{
    pthread_mutex_lock(&st->mu);
    batch_t *b = st->free_batches;
    if (b)
        st->free_batches = b->next;
    pthread_mutex_unlock(&st->mu);
    if (!b)
        b = calloc(1, sizeof *b);
    return b;
}

/* Keeps buffers for reuse (a steady stream allocates nothing), dropping huge ones. */
void store_batch_put(mqd_store_t *st, batch_t *b)
{
    if (b->cap > (16u << 20)) {
        free(b->buf);
        b->buf = NULL;
        b->cap = 0;
    }
    b->len = 0;
    b->nrec = 0;
    pthread_mutex_lock(&st->mu);
    b->next = st->free_batches;
    st->free_batches = b;
    pthread_mutex_unlock(&st->mu);
}

/* Puts log on its flusher's work list and wakes that flusher (st->mu held). */
static void work_add(mqd_plog_t *log)
{
    flusher_t *fl = log->fl;
    if (!log->on_work) {
        log->on_work = 1;
        log->work_next = NULL;
        if (fl->work_tail)
            fl->work_tail->work_next = log;
        else
            fl->work = log;
        fl->work_tail = log;
    }
    if (!fl->kick) {
        fl->kick = 1;
        pthread_cond_signal(&fl->work_cv);
    }
}

static void work_del(mqd_plog_t *log)
{
    flusher_t *fl = log->fl;
    if (!log->on_work)
        return;
    mqd_plog_t *prev = NULL;
    for (mqd_plog_t *l = fl->work; l; prev = l, l = l->work_next) {
        if (l != log)
            continue;
        if (prev)
            prev->work_next = l->work_next;
        else
            fl->work = l->work_next;
        if (fl->work_tail == l)
            fl->work_tail = prev;
        break;
    }
    log->on_work = 0;
}

/* Removes log from a singly linked list threaded through the field at `link`. */
static void chain_del(mqd_plog_t **head, mqd_plog_t *log, size_t link)
{
#define NEXTP(l) ((mqd_plog_t **)((char *)(l) + link))
    for (mqd_plog_t **pp = head; *pp; pp = NEXTP(*pp)) {
        if (*pp == log) {
            *pp = *NEXTP(log);
            return;
        }
    }
#undef NEXTP
}

/* st->mu held. A flusher whose timed list was empty sleeps without a timeout: wake it. */
static void timed_push(mqd_plog_t *log)
{
    flusher_t *fl = log->fl;
    if (log->on_timed)
        return;
    log->on_timed = 1;
    log->timed_next = fl->timed;
    if (!fl->timed && !fl->timed_cur)
        pthread_cond_signal(&fl->work_cv);
    fl->timed = log;
}

void store_lists_del(mqd_store_t *st, mqd_plog_t *log)
{
    work_del(log);
    if (log->on_timed) {
        chain_del(&log->fl->timed, log, offsetof(mqd_plog_t, timed_next));
        chain_del(&log->fl->timed_cur, log, offsetof(mqd_plog_t, timed_next));
        log->on_timed = 0;
    }
    if (log->on_adv) {
        chain_del(&st->adv, log, offsetof(mqd_plog_t, adv_next));
        log->on_adv = 0;
    }
    if (log->on_tdone) {
        chain_del(&st->tdone, log, offsetof(mqd_plog_t, tdone_next));
        log->on_tdone = 0;
    }
}

void store_kick_log(mqd_store_t *st, mqd_plog_t *log)
{
    pthread_mutex_lock(&st->mu);
    work_add(log);
    pthread_mutex_unlock(&st->mu);
}

/* ---- flusher ---- */

void store_announce(mqd_plog_t *log)
{
    mqd_store_t *st = log->st;
    pthread_mutex_lock(&st->mu);
    if (!log->on_adv) {
        log->on_adv = 1;
        log->adv_next = st->adv;
        st->adv = log;
    }
    pthread_cond_broadcast(&st->done_cv);
    pthread_mutex_unlock(&st->mu);
    if (st->wake)
        st->wake(st->wake_arg);
}

void store_log_fail(mqd_plog_t *log, seg_t *s, const char *what, int err)
{
    if (__atomic_exchange_n(&log->failed, 1, __ATOMIC_ACQ_REL))
        return;
    __atomic_store_n(&log->fail_err, err ? err : EIO, __ATOMIC_RELEASE);
    MQD_ERR("store", "%s: %s failed (%s): partition failed; nothing after offset %" PRIu64
            " is durable", log->dir, what, strerror(err),
            __atomic_load_n(&log->durable, __ATOMIC_ACQUIRE));
    /* Make unsynced bytes disappear so a restart cannot resurrect data that was never
     * acknowledged: also the whole records of a short write, which s->size never
     * counted (fsyncgate: after a failed write or sync nothing past `synced` is known
     * to be on disk). The zeroer keeps off the tail until a resume. Best effort: the
     * log stays failed either way. */
    store_zero_detach(log);
    pthread_mutex_lock(&log->mu);
    if (log->st->io.ftruncate(s->fd, (off_t)s->synced) == 0)
        s->size = s->synced;
    pthread_mutex_unlock(&log->mu);
    __atomic_store_n(&log->stable, log->durable, __ATOMIC_RELEASE);
    store_announce(log); /* the owner fails the sends waiting for this log */
}

static void free_batches(mqd_store_t *st, batch_t *b)
{
    while (b) {
        batch_t *n = b->next;
        store_batch_put(st, b);
        b = n;
    }
}

static const double hist_bounds[MQD_STORE_HIST_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1};

const double *mqd_store_hist_bounds(void) { return hist_bounds; }

void mqd_store_stats(mqd_store_t *st, mqd_store_stats_t *out)
{
    pthread_mutex_lock(&st->mu);
    *out = st->stats;
    pthread_mutex_unlock(&st->mu);
}

/* Records one fdatasync (flusher thread) and warns about slow ones. */
static void note_sync(mqd_plog_t *log, uint64_t t0)
{
    double secs = (double)(mqd_mono_ns() - t0) / 1e9;
    mqd_store_stats_t *x = &log->st->stats;
    size_t i = 0;
    while (i < MQD_STORE_HIST_BUCKETS && secs > hist_bounds[i])
        i++;
    pthread_mutex_lock(&log->st->mu);
    x->fsyncs++;
    x->bucket[i]++;
    x->sum_s += secs;
    if (secs * 1000 > MQD_STORE_SLOW_FSYNC_MS)
        x->slow++;
    pthread_mutex_unlock(&log->st->mu);
    if (secs * 1000 > MQD_STORE_SLOW_FSYNC_MS)
        MQD_WARN_RL("store", "slow fsync topic=%s partition=%u ms=%.0f", log->topic, log->partition,
                    secs * 1000);
}

/* flush_sync = syncfs: one syncfs (every dirty page and the journal of the file system,
 * then a device flush) makes the writes of every flusher that finished writing before it
 * started durable, so N partitions written at once cost about one device flush instead
 * of N fdatasyncs (bench: 8 files x 16 KiB, 0.9-1.6 ms per round against 2.6-2.9 ms with
 * 4 threads of fdatasyncs). The caller's writes are complete. 0: durable; 1: a syncfs
 * covering them failed (maybe for another file of the file system: the caller's own
 * fdatasync tells, as it reports the errors of its own file). */
static int group_sync(mqd_store_t *st, int fd)
{
    pthread_mutex_lock(&st->gs_mu);
    uint64_t me = ++st->gs_asked;
    while (st->gs_done < me && st->gs_failed < me) {
        if (st->gs_running) {
            pthread_cond_wait(&st->gs_cv, &st->gs_mu);
            continue;
        }
        st->gs_running = 1;
        uint64_t covers = st->gs_asked;
        pthread_mutex_unlock(&st->gs_mu);
        int rc = st->io.syncfs(fd);
        pthread_mutex_lock(&st->gs_mu);
        st->gs_running = 0;
        if (rc == 0)
            st->gs_done = covers;
        else
            st->gs_failed = covers;
        pthread_cond_broadcast(&st->gs_cv);
    }
    int failed = st->gs_done < me;
    pthread_mutex_unlock(&st->gs_mu);
    return failed;
}

void mqd_store_set_syncfs(mqd_store_t *st, int on)
{
    st->use_syncfs = on;
}

/* fdatasync (or a shared syncfs) of the active segment; durable catches up with stable. */
static int sync_tail(mqd_plog_t *log, seg_t *s, uint64_t upto)
{
    uint64_t t0 = mqd_mono_ns();
    if ((!log->st->use_syncfs || group_sync(log->st, s->fd) != 0) &&
        log->st->io.fdatasync(s->fd) != 0) {
        store_log_fail(log, s, "fdatasync", errno);
        return MQD_EIO;
    }
    note_sync(log, t0);
    __atomic_store_n(&s->synced, s->size, __ATOMIC_RELEASE); /* cold reads (plog.c) */
    log->unsynced_recs = 0;
    log->last_sync_ms = mqd_now_ms();
    __atomic_store_n(&log->durable, upto, __ATOMIC_RELEASE);
    return 0;
}

static int roll(mqd_plog_t *log, seg_t *old, uint64_t base)
{
    if (store_zero_cut(log, old) != 0) {
        store_log_fail(log, old, "cut of the pre-zeroed tail", errno);
        return MQD_EIO;
    }
    if (old->synced < old->size &&
        sync_tail(log, old, __atomic_load_n(&log->stable, __ATOMIC_ACQUIRE)) != 0)
        return MQD_EIO;
    if (seg_index_write(log, old, 0, 1) != 0) {
        store_log_fail(log, old, "index sync at roll", errno);
        return MQD_EIO;
    }
    seg_t *s;
    if (seg_create(log, base, &s) != 0) {
        store_log_fail(log, old, "segment create", errno);
        return MQD_EIO;
    }
    pthread_mutex_lock(&log->mu);
    s->prev = old;
    old->next = s;
    log->tail = s;
    pthread_mutex_unlock(&log->mu);
    if (ckpt_write(log, base, 0, base, 1) == 0) {
        log->ckpt_durable = base;
        log->ckpt_hint = 0;
        log->last_ckpt_ms = mqd_now_ms();
    }
    return 0;
}

static int need_roll(const seg_t *s, const mqd_plog_config_t *c, uint64_t add, int64_t now)
{
    if (s->size == 0)
        return 0;
    return s->size >= c->segment_bytes || s->size + add > UINT32_MAX ||
           (c->segment_ms > 0 && now - s->created_ms >= c->segment_ms);
}

/* Appends batches to s with as few pwritev calls as IOV_MAX allows (normally one). */
static int write_all(seg_t *s, batch_t *b)
{
    struct iovec iov[64];
    uint64_t pos = s->size;
    while (b) {
        int n = 0;
        size_t want = 0;
        for (; b && n < (int)MQD_ARRAY_LEN(iov); b = b->next, n++) {
            iov[n] = (struct iovec){b->buf, b->len};
            want += b->len;
        }
        struct iovec *v = iov;
        while (want > 0) {
            ssize_t w = s->st->io.pwritev(s->fd, v, n, (off_t)pos);
            if (w <= 0)
                return w == 0 ? ENOSPC : errno;
            pos += (uint64_t)w;
            want -= (size_t)w;
            while (n > 0 && (size_t)w >= v->iov_len) {
                w -= (ssize_t)v->iov_len;
                v++;
                n--;
            }
            if (n > 0) {
                v->iov_base = (uint8_t *)v->iov_base + w;
                v->iov_len -= (size_t)w;
            }
        }
    }
    return 0;
}

static void index_batches(mqd_plog_t *log, seg_t *s, const mqd_plog_config_t *c, batch_t *b)
{
    pthread_mutex_lock(&log->mu);
    for (; b; b = b->next) {
        for (size_t i = 0; i < b->len;) {
            const uint8_t *p = b->buf + i;
            seg_index_add(s, c, rd64(p + 8), s->size + i, (int64_t)rd64(p + 16));
            i += 4 + (size_t)rd32(p);
        }
        s->size += b->len;
    }
    pthread_mutex_unlock(&log->mu);
}

/* Splits off the longest run of batches that fits in s below segment_bytes (at least
 * one), so a flusher that fell behind still rolls on time. */
static batch_t *take_group(const seg_t *s, const mqd_plog_config_t *c, batch_t *b,
                           uint64_t *len)
{
    uint64_t n = b->len;
    while (b->next && s->size + n + b->next->len <= c->segment_bytes) {
        b = b->next;
        n += b->len;
    }
    batch_t *rest = b->next;
    b->next = NULL;
    *len = n;
    return rest;
}

/* Writes (and in sync mode syncs) the batches; returns 1 if stable advanced. */
static int flush_batches(mqd_plog_t *log, batch_t *b, const mqd_plog_config_t *c, int64_t now)
{
    int adv = 0;
    batch_t *rest = NULL; /* split off b by take_group: freed too when a write fails */
    while (b && !__atomic_load_n(&log->failed, __ATOMIC_ACQUIRE)) {
        seg_t *s = log->tail;
        if (need_roll(s, c, b->len, now)) {
            if (roll(log, s, b->first_off) != 0)
                break;
            s = log->tail;
        }
        uint64_t total, nrec = 0, end = b->end_off;
        rest = take_group(s, c, b, &total);
        for (batch_t *x = b; x; x = x->next) {
            nrec += x->nrec;
            end = x->end_off;
        }
        store_zero_before_write(log, s, s->size + total, c);
        int err = write_all(s, b);
        if (err) {
            store_log_fail(log, s, "write", err);
            break;
        }
        index_batches(log, s, c, b); /* the files follow at checkpoints and rolls */
        if (c->flush == MQD_FLUSH_SYNC && sync_tail(log, s, end) != 0)
            break;
        __atomic_store_n(&log->stable, end, __ATOMIC_RELEASE);
        adv = 1;
        log->unsynced_recs += c->flush == MQD_FLUSH_SYNC ? 0 : nrec;
        if (c->flush == MQD_FLUSH_ASYNC && c->flush_messages &&
            log->unsynced_recs >= c->flush_messages)
            sync_tail(log, s, end);
        free_batches(log->st, b);
        b = rest;
        rest = NULL;
    }
    free_batches(log->st, b);
    free_batches(log->st, rest);
    return adv;
}

static void maybe_ckpt(mqd_plog_t *log, seg_t *s, int64_t now, int force)
{
    uint64_t d = __atomic_load_n(&log->durable, __ATOMIC_ACQUIRE);
    if ((d == log->ckpt_durable && !(force && log->ckpt_hint)) || s->synced != s->size ||
        (!force && now - log->last_ckpt_ms < CKPT_EVERY_MS))
        return;
    /* The index files get the entries added since the last checkpoint first, so a
     * recovery from this checkpoint rescans at most what came after it. A failed index
     * write only costs a longer scan at the next start. */
    seg_index_write(log, s, 0, 0);
    if (ckpt_write(log, s->base, s->synced, s->next_off, force) == 0) {
        log->ckpt_durable = d;
        log->ckpt_hint = !force;
    }
    log->last_ckpt_ms = now;
}

/* First half of a flusher visit to one log: writes (and syncs) its queued batches.
 * Returns 1 if its stable offset advanced. */
static int flush_log_batches(mqd_plog_t *log, int64_t now)
{
    pthread_mutex_lock(&log->mu);
    batch_t *b = log->queue;
    log->queue = log->queue_tail = NULL;
    mqd_plog_config_t c = log->cfg;
    pthread_mutex_unlock(&log->mu);
    return b ? flush_batches(log, b, &c, now) : 0; /* frees the batches */
}

/* Second half: directory sync, truncation, timed sync, checkpoint. These run after the
 * owner was told about the batches' stable offset, so a checkpoint (an extra fdatasync,
 * rename and directory fsync) never delays a settlement. */
static void flush_log_rest(mqd_plog_t *log, int64_t now, int stopping)
{
    mqd_plog_config_t c = log->cfg;
    if (__atomic_exchange_n(&log->dir_dirty, 0, __ATOMIC_ACQ_REL) &&
        store_fsync_dir(log->st, log->dir) != 0)
        __atomic_store_n(&log->dir_dirty, 1, __ATOMIC_RELEASE); /* EMFILE: again next visit */
    if (__atomic_load_n(&log->trunc_req, __ATOMIC_ACQUIRE))
        store_do_truncate(log);
    if (__atomic_load_n(&log->resume_req, __ATOMIC_ACQUIRE))
        store_do_resume(log);
    if (__atomic_load_n(&log->failed, __ATOMIC_ACQUIRE))
        return;
    seg_t *s = log->tail;
    if (s->synced < s->size &&
        (stopping || now - log->last_sync_ms >= (int64_t)c.flush_interval_ms))
        sync_tail(log, s, __atomic_load_n(&log->stable, __ATOMIC_ACQUIRE));
    if (stopping && !__atomic_load_n(&log->failed, __ATOMIC_ACQUIRE) &&
        store_zero_cut(log, s) != 0)
        store_log_fail(log, s, "cut of the pre-zeroed tail", errno);
    if (!__atomic_load_n(&log->failed, __ATOMIC_ACQUIRE)) {
        /* A busy log's index files follow in small steps, not all at the checkpoint:
         * 2 s at 100 MB/s is ~1 MB of entries, a few ms that batches would wait for. */
        if (s->n_idx - s->idx_on_disk >= IDX_STEP)
            seg_index_write(log, s, 0, 0);
        maybe_ckpt(log, s, now, stopping);
        if (stopping)
            seg_index_write(log, s, 0, 0);
    }
}

/* Does the timed pass still have work on log (flusher thread)? */
static int needs_timed(mqd_plog_t *log)
{
    if (__atomic_load_n(&log->failed, __ATOMIC_ACQUIRE))
        return 0;
    const seg_t *s = log->tail;
    return s->synced < s->size ||
           __atomic_load_n(&log->durable, __ATOMIC_ACQUIRE) != log->ckpt_durable;
}

/* Flushes one log (st->mu held, dropped around the I/O) and files it on the timed and
 * advanced lists. The owner frees a log only after waiting for !flushing. */
static void visit(mqd_store_t *st, mqd_plog_t *log, int64_t now, int stopping)
{
    log->flushing = 1;
    pthread_mutex_unlock(&st->mu);
    if (flush_log_batches(log, now)) {
        /* Tell the owner now, not at the end of the pass: under a steady stream the work
         * list refills during every fdatasync, so the pass would go on to write and sync
         * the next batches (and checkpoints) first, and settlements of data already
         * durable would wait for those syncs too. */
        store_announce(log);
    }
    flush_log_rest(log, now, stopping);
    int timed = needs_timed(log);
    pthread_mutex_lock(&st->mu);
    log->flushing = 0;
    if (timed)
        timed_push(log);
}

/* One pass of flusher fl (st->mu held): its work list, then, when `all`, its timed list
 * (every log of its share when stopping). */
static void flusher_pass(flusher_t *fl, int stopping, int all)
{
    mqd_store_t *st = fl->st;
    int64_t now = mqd_now_ms();
    mqd_plog_t *log;
    while ((log = fl->work) != NULL) {
        fl->work = log->work_next;
        if (!fl->work)
            fl->work_tail = NULL;
        log->on_work = 0;
        visit(st, log, now, stopping);
    }
    if (stopping) {
        /* the owner is joining us: the list cannot change under the walk */
        for (log = st->logs; log; log = log->next)
            if (log->fl == fl)
                visit(st, log, now, stopping);
    } else if (all) {
        /* fl->timed_cur, not a local: the owner may unlink a log from it meanwhile */
        fl->timed_cur = fl->timed;
        fl->timed = NULL;
        while ((log = fl->timed_cur) != NULL) {
            fl->timed_cur = log->timed_next;
            log->on_timed = 0;
            visit(st, log, now, stopping);
        }
    }
    /* waiters on truncations and on !flushing; visit() already told the owner (wake)
     * about every advance, as it happened */
    pthread_cond_broadcast(&st->done_cv);
}

/* Applies st->flush_boost to the calling flusher (its own thread, st->mu not held). */
static void apply_boost(flusher_t *fl)
{
    mqd_store_t *st = fl->st;
    int want = __atomic_load_n(&st->flush_boost, __ATOMIC_RELAXED);
    if (want == fl->boost)
        return;
    errno = 0;
    /* the process's nice: its main thread's (Linux's PRIO_PROCESS with 0 would name this
     * thread, which is what is being changed) */
    int base = getpriority(PRIO_PROCESS, (id_t)getpid());
    if (base == -1 && errno != 0)
        base = 0;
    int nice = base - want < -20 ? -20 : base - want;
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice) != 0 &&
        !__atomic_exchange_n(&st->flush_boost_warned, 1, __ATOMIC_RELAXED))
        MQD_INFO("store", "flush threads stay at the process's priority: raising it by %d "
                 "(flush_priority_boost) was refused (%s); allow it with LimitNICE=%d in the "
                 "systemd unit, CAP_SYS_NICE, or set flush_priority_boost = 0",
                 want, strerror(errno), nice);
    fl->boost = want; /* tried: not again until the setting changes */
}

void mqd_store_set_flush_boost(mqd_store_t *st, unsigned boost)
{
    __atomic_store_n(&st->flush_boost, boost > 19 ? 19 : (int)boost, __ATOMIC_RELAXED);
    pthread_mutex_lock(&st->mu);
    for (unsigned i = 0; i < st->nfl; i++) {
        st->fl[i].kick = 1;
        pthread_cond_signal(&st->fl[i].work_cv);
    }
    pthread_mutex_unlock(&st->mu);
}

static void *flusher_main(void *arg)
{
    flusher_t *fl = arg;
    mqd_store_t *st = fl->st;
    int64_t last_all = 0;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        if (__atomic_load_n(&st->flush_boost, __ATOMIC_RELAXED) != fl->boost) {
            pthread_mutex_unlock(&st->mu);
            apply_boost(fl);
            pthread_mutex_lock(&st->mu);
        }
        int stopping = st->stop;
        int64_t now = mqd_now_ms();
        int all = stopping || now - last_all >= TICK_MS;
        fl->kick = 0;
        if (all)
            last_all = now;
        flusher_pass(fl, stopping, all);
        if (stopping)
            break;
        if (fl->kick || st->stop)
            continue;
        if (!fl->timed) {
            pthread_cond_wait(&fl->work_cv, &st->mu); /* nothing timed: sleep until work */
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&fl->work_cv, &st->mu, &ts);
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

/* ---- store ---- */

/* Stops and joins the started flushers; the last pass of each syncs and checkpoints
 * its logs. */
static void stop_flushers(mqd_store_t *st)
{
    pthread_mutex_lock(&st->mu);
    st->stop = 1;
    for (unsigned i = 0; i < st->nfl; i++)
        pthread_cond_signal(&st->fl[i].work_cv);
    pthread_mutex_unlock(&st->mu);
    for (unsigned i = 0; i < st->nfl; i++) {
        if (st->fl[i].started)
            pthread_join(st->fl[i].thr, NULL);
        pthread_cond_destroy(&st->fl[i].work_cv);
    }
}

int mqd_store_open_ex(const char *data_dir, unsigned flushers, mqd_store_wake_fn wake,
                      void *wake_arg, mqd_store_t **out)
{
    if (flushers == 0)
        flushers = MQD_STORE_FLUSHERS_DEFAULT;
    if (flushers > MQD_STORE_FLUSHERS_MAX)
        flushers = MQD_STORE_FLUSHERS_MAX;
    mqd_store_t *st = calloc(1, sizeof *st);
    if (!st)
        return MQD_ENOMEM;
    size_t n = strlen(data_dir) + 16;
    st->root = malloc(n);
    st->fl = calloc(flushers, sizeof *st->fl);
    if (!st->root || !st->fl) {
        free(st->root);
        free(st->fl);
        free(st);
        return MQD_ENOMEM;
    }
    mqd_store_io_default(&st->io);
    snprintf(st->root, n, "%s/topics", data_dir);
    int rc = mqd_mkdirs(st->root, 0755);
    snprintf(st->root, n, "%s", data_dir);
    st->wake = wake;
    st->wake_arg = wake_arg;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->done_cv, NULL);
    pthread_mutex_init(&st->gs_mu, NULL);
    pthread_cond_init(&st->gs_cv, NULL);
    st->nfl = flushers;
    for (unsigned i = 0; i < flushers; i++) {
        st->fl[i].st = st;
        pthread_cond_init(&st->fl[i].work_cv, NULL);
    }
    for (unsigned i = 0; rc == 0 && i < flushers; i++) {
        if (pthread_create(&st->fl[i].thr, NULL, flusher_main, &st->fl[i]) != 0) {
            rc = MQD_ENOMEM;
        } else {
            char name[16];
            snprintf(name, sizeof name, "mqd-flush%u", i);
            pthread_setname_np(st->fl[i].thr, name); /* top -H, perf, ps -L */
            st->fl[i].started = 1;
        }
    }
    if (rc == 0 && !(st->cold = store_cold_start()))
        rc = MQD_ENOMEM;
    if (rc == 0 && !(st->zero = store_zero_start()))
        rc = MQD_ENOMEM;
    if (rc != 0) {
        MQD_ERR("store", "cannot open store at %s: %s", data_dir, mqd_strerror(rc));
        stop_flushers(st);
        store_cold_stop(st->cold);
        pthread_cond_destroy(&st->gs_cv);
        pthread_mutex_destroy(&st->gs_mu);
        pthread_cond_destroy(&st->done_cv);
        pthread_mutex_destroy(&st->mu);
        free(st->fl);
        free(st->root);
        free(st);
        return rc;
    }
    *out = st;
    return 0;
}

void mqd_store_warm(mqd_store_t *st)
{
    if (!st->warm)
        st->warm = store_warm_start(st->root);
}

int mqd_store_open(const char *data_dir, mqd_store_wake_fn wake, void *wake_arg, mqd_store_t **out)
{
    return mqd_store_open_ex(data_dir, 0, wake, wake_arg, out);
}

void mqd_store_close(mqd_store_t *st)
{
    if (!st)
        return;
    store_warm_stop(st->warm);
    mqd_store_commit(st);
    store_zero_stop(st->zero); /* first: the flushers' last pass cuts the zeros */
    stop_flushers(st);
    while (st->logs) {
        mqd_plog_t *l = st->logs;
        st->logs = l->next;
        plog_free(l);
    }
    store_zero_free(st->zero);
    store_cold_stop(st->cold);
    free(st->htab);
    while (st->free_batches) {
        batch_t *b = st->free_batches;
        st->free_batches = b->next;
        free(b->buf);
        free(b);
    }
    pthread_cond_destroy(&st->gs_cv);
    pthread_mutex_destroy(&st->gs_mu);
    pthread_cond_destroy(&st->done_cv);
    pthread_mutex_destroy(&st->mu);
    free(st->fl);
    free(st->root);
    free(st);
}

void mqd_store_commit(mqd_store_t *st)
{
    mqd_plog_t *ready = NULL;
    while (st->pend_logs) {
        mqd_plog_t *l = st->pend_logs;
        st->pend_logs = l->pend_next;
        l->on_pend = 0;
        batch_t *b = l->pending;
        if (!b || b->nrec == 0)
            continue;
        l->pending = NULL;
        /* before the hand-off: until then only this thread can touch the batch */
        if (l->tap)
            l->tap(l, b->first_off, b->buf, b->len, b->nrec, l->tap_arg);
        pthread_mutex_lock(&l->mu);
        b->next = NULL;
        if (l->queue_tail)
            l->queue_tail->next = b;
        else
            l->queue = b;
        l->queue_tail = b;
        pthread_mutex_unlock(&l->mu);
        l->pend_next = ready;
        ready = l;
    }
    if (!ready)
        return;
    pthread_mutex_lock(&st->mu);
    for (mqd_plog_t *l = ready; l; l = l->pend_next)
        work_add(l);
    pthread_mutex_unlock(&st->mu);
}

void mqd_store_dispatch(mqd_store_t *st)
{
    pthread_mutex_lock(&st->mu);
    mqd_plog_t *l;
    /* Popped one at a time: a callback may drop logs, which unlinks them from st->adv. */
    while ((l = st->adv) != NULL) {
        st->adv = l->adv_next;
        l->on_adv = 0;
        if (!l->cb)
            continue;
        pthread_mutex_unlock(&st->mu);
        l->cb(l, mqd_plog_stable_offset(l), l->cb_arg);
        pthread_mutex_lock(&st->mu);
    }
    /* Then asynchronous truncations that ended (truncate.c); a stable callback above may
     * have dropped a log, which took it off this list too. */
    while ((l = st->tdone) != NULL) {
        st->tdone = l->tdone_next;
        l->on_tdone = 0;
        pthread_mutex_unlock(&st->mu);
        store_truncate_done(l);
        pthread_mutex_lock(&st->mu);
    }
    pthread_mutex_unlock(&st->mu);
}

int mqd_plog_wait_stable(mqd_plog_t *log, uint64_t offset)
{
    mqd_store_t *st = log->st;
    if (offset > log->end)
        return MQD_ERANGE;
    mqd_store_commit(st);
    pthread_mutex_lock(&st->mu);
    while (mqd_plog_stable_offset(log) < offset && !mqd_plog_failed(log))
        pthread_cond_wait(&st->done_cv, &st->mu);
    pthread_mutex_unlock(&st->mu);
    return mqd_plog_stable_offset(log) >= offset ? 0 : MQD_EFAILED;
}

static size_t log_hash(const char *topic, uint32_t partition)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)topic; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    h = (h ^ partition) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h ^ (h >> 29));
}

/* Inserts log into the name table, doubling it past a load of 1 (owner thread). */
static int htab_add(mqd_store_t *st, mqd_plog_t *log)
{
    if (st->hcount + 1 > st->hcap) {
        size_t cap = st->hcap ? st->hcap * 2 : 256;
        mqd_plog_t **t = calloc(cap, sizeof *t);
        if (!t)
            return MQD_ENOMEM;
        for (size_t i = 0; i < st->hcap; i++) {
            while (st->htab[i]) {
                mqd_plog_t *l = st->htab[i];
                st->htab[i] = l->hnext;
                size_t b = log_hash(l->topic, l->partition) & (cap - 1);
                l->hnext = t[b];
                t[b] = l;
            }
        }
        free(st->htab);
        st->htab = t;
        st->hcap = cap;
    }
    size_t b = log_hash(log->topic, log->partition) & (st->hcap - 1);
    log->hnext = st->htab[b];
    st->htab[b] = log;
    st->hcount++;
    return 0;
}

static void htab_del(mqd_store_t *st, mqd_plog_t *log)
{
    if (!st->hcap)
        return;
    size_t b = log_hash(log->topic, log->partition) & (st->hcap - 1);
    for (mqd_plog_t **pp = &st->htab[b]; *pp; pp = &(*pp)->hnext) {
        if (*pp == log) {
            *pp = log->hnext;
            st->hcount--;
            return;
        }
    }
}

mqd_plog_t *mqd_store_log_find(mqd_store_t *st, const char *topic, uint32_t partition)
{
    if (!st->hcap)
        return NULL;
    size_t b = log_hash(topic, partition) & (st->hcap - 1);
    for (mqd_plog_t *l = st->htab[b]; l; l = l->hnext)
        if (l->partition == partition && strcmp(l->topic, topic) == 0)
            return l;
    return NULL;
}

int mqd_store_log_open(mqd_store_t *st, const char *topic, uint32_t partition,
                       const mqd_plog_config_t *cfg, mqd_plog_t **out)
{
    mqd_plog_t *log = mqd_store_log_find(st, topic, partition);
    if (log) {
        if (cfg)
            mqd_plog_set_config(log, cfg);
        *out = log;
        return 0;
    }
    int rc = plog_open(st, topic, partition, cfg, &log);
    if (rc == 0 && (rc = htab_add(st, log)) != 0)
        plog_free(log);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&st->mu);
    log->fl = &st->fl[st->next_fl++ % st->nfl];
    log->next = st->logs;
    st->logs = log;
    if (log->ckpt_durable != log->end)
        timed_push(log); /* its first checkpoint */
    pthread_mutex_unlock(&st->mu);
    *out = log;
    return 0;
}

static void rm_dir_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (store_is_dots(e->d_name))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0 && errno == EISDIR)
            rm_dir_files(p);
    }
    closedir(d);
    rmdir(dir);
}

/* Takes l off the owner's list of logs with uncommitted records. */
static void pend_del(mqd_store_t *st, mqd_plog_t *l)
{
    for (mqd_plog_t **pp = &st->pend_logs; l->on_pend && *pp; pp = &(*pp)->pend_next) {
        if (*pp == l) {
            *pp = l->pend_next;
            l->on_pend = 0;
            break;
        }
    }
}

int mqd_store_drop_topic(mqd_store_t *st, const char *topic)
{
    if (!topic || strchr(topic, '/') || !*topic || topic[0] == '.')
        return MQD_EINVAL;
    pthread_mutex_lock(&st->mu);
    for (mqd_plog_t **pp = &st->logs; *pp;) {
        mqd_plog_t *l = *pp;
        if (strcmp(l->topic, topic) != 0) {
            pp = &l->next;
            continue;
        }
        while (l->flushing)
            pthread_cond_wait(&st->done_cv, &st->mu);
        *pp = l->next; /* only the owner changes the list, so pp is still valid */
        store_lists_del(st, l);
        pend_del(st, l);
        htab_del(st, l);
        pthread_mutex_unlock(&st->mu);
        plog_free(l);
        pthread_mutex_lock(&st->mu);
    }
    pthread_mutex_unlock(&st->mu);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/topics/%s", st->root, topic);
    rm_dir_files(p);
    snprintf(p, sizeof p, "%s/topics", st->root);
    return store_fsync_dir(st, p);
}
