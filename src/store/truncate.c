/* Truncation: deletes every record at or after an offset (a follower cut back to its
 * leader's log after a leader change). The work always runs on the log's flusher thread,
 * which owns the tail: mqd_plog_truncate_to blocks its caller until it is done (tools,
 * tests), mqd_plog_truncate_start returns at once and the end is reported like a stable
 * offset: the flusher files the log on st->tdone and wakes the owner, whose
 * mqd_store_dispatch runs the callback. While an asynchronous one runs, the owner
 * refuses reads, appends and retention of the log (MQD_EAGAIN), so the flusher may free
 * segments and rebuild indexes without a reader holding them, and fdlru.c keeps the
 * log's descriptors open. */
#include "config.h"
#include "store/store_int.h"
#include "util/util.h"

#include <errno.h>

/* Flusher: unlinks the segments wholly at or after `off` and cuts the one holding it. */
static int truncate_segments(mqd_plog_t *log, uint64_t off)
{
    seg_t *dead = NULL;
    pthread_mutex_lock(&log->mu);
    while (log->tail != log->head && log->tail->base >= off) {
        seg_t *s = log->tail;
        log->tail = s->prev;
        log->tail->next = NULL;
        s->next = dead;
        dead = s;
    }
    pthread_mutex_unlock(&log->mu);
    while (dead) {
        seg_t *s = dead;
        dead = s->next;
        seg_unlink(log, s);
        seg_free(s);
    }
    seg_t *t = log->tail;
    if (t->base < off || t->base == off)
        return seg_truncate_at(log, t, off < t->base ? t->base : off, false);
    /* Everything goes: restart the log at `off` with a fresh segment. */
    seg_t *s;
    int rc = seg_create(log, off, &s);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&log->mu);
    log->head = log->tail = s;
    pthread_mutex_unlock(&log->mu);
    seg_unlink(log, t);
    seg_free(t);
    return 0;
}

/* Files log on the store's list of ended truncations and wakes the owner. */
static void announce_done(mqd_plog_t *log)
{
    mqd_store_t *st = log->st;
    pthread_mutex_lock(&st->mu);
    if (!log->on_tdone) {
        log->on_tdone = 1;
        log->tdone_next = st->tdone;
        st->tdone = log;
    }
    pthread_cond_broadcast(&st->done_cv);
    pthread_mutex_unlock(&st->mu);
    if (st->wake)
        st->wake(st->wake_arg);
}

void store_do_truncate(mqd_plog_t *log)
{
    uint64_t off = log->trunc_req - 1;
    /* set by the owner before it published trunc_req, cleared only after we clear it */
    int async = log->truncating;
    store_zero_detach(log); /* the truncation cuts the zeros with the rest */
    int reset = log->trunc_reset;
    int rc = reset ? store_reset_segments(log, off) : truncate_segments(log, off);
    if (rc == 0)
        rc = store_fsync_dir(log->st, log->dir); /* the unlinks and a new segment */
    seg_t *t = log->tail;
    if (rc == 0 && ckpt_write(log, t->base, t->size, t->next_off, 1) != 0)
        rc = MQD_EIO;
    if (rc != 0)
        store_log_fail(log, t, reset ? "reset" : "truncate", EIO);
    pthread_mutex_lock(&log->mu);
    log->start = log->head->base;
    pthread_mutex_unlock(&log->mu);
    log->trunc_end = t->next_off; /* the owner sets its end from it */
    if (reset && rc == 0) {
        /* nothing below the new start is held, so nothing there is unstable */
        __atomic_store_n(&log->stable, log->trunc_end, __ATOMIC_RELEASE);
        __atomic_store_n(&log->durable, log->trunc_end, __ATOMIC_RELEASE);
    }
    if (log->stable > log->trunc_end)
        __atomic_store_n(&log->stable, log->trunc_end, __ATOMIC_RELEASE);
    if (log->durable > log->trunc_end)
        __atomic_store_n(&log->durable, log->trunc_end, __ATOMIC_RELEASE);
    log->ckpt_durable = log->durable;
    log->trunc_rc = rc;
    __atomic_store_n(&log->trunc_req, 0, __ATOMIC_RELEASE);
    if (async)
        announce_done(log);
}

/* Owner: the checks all kinds share, then hands the request to the flusher. A reset
 * (reset.c) goes forward from the end, a truncation back from it. */
int store_truncate_ask(mqd_plog_t *log, uint64_t offset, int async, int reset)
{
    /* (a synchronous one during a resume is served first, as it always was) */
    if (log->truncating || (async && __atomic_load_n(&log->resume_req, __ATOMIC_ACQUIRE)))
        return MQD_EAGAIN;
    if (reset ? offset < log->end || offset >= UINT64_MAX / 2 : offset > log->end)
        return MQD_ERANGE;
    mqd_store_commit(log->st);
    store_cold_end(log); /* its chunks may hold bytes about to be cut */
    log->truncating = async;
    log->trunc_reset = reset;
    __atomic_store_n(&log->trunc_req, offset + 1, __ATOMIC_RELEASE);
    store_kick_log(log->st, log);
    return 0;
}

int mqd_plog_truncate_to(mqd_plog_t *log, uint64_t offset)
{
    mqd_store_t *st = log->st;
    if (offset == log->end && !log->pending && !log->truncating)
        return 0;
    int rc = store_truncate_ask(log, offset, 0, 0);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&st->mu);
    while (__atomic_load_n(&log->trunc_req, __ATOMIC_ACQUIRE) || log->flushing)
        pthread_cond_wait(&st->done_cv, &st->mu);
    pthread_mutex_unlock(&st->mu);
    log->end = log->trunc_end;
    return log->trunc_rc;
}

int mqd_plog_truncate_start(mqd_plog_t *log, uint64_t offset, mqd_plog_truncated_cb cb,
                            void *arg)
{
    int rc = store_truncate_ask(log, offset, 1, 0);
    if (rc == 0) {
        log->trunc_cb = cb;
        log->trunc_cb_arg = arg;
    }
    return rc;
}

bool mqd_plog_truncating(const mqd_plog_t *log)
{
    return log->truncating;
}

void store_truncate_done(mqd_plog_t *log)
{
    if (!log->truncating || __atomic_load_n(&log->trunc_req, __ATOMIC_ACQUIRE))
        return;
    log->truncating = 0;
    log->end = log->trunc_end;
    if (log->trunc_reset)
        store_corrupt_free(log); /* offsets it skipped are gone with their segments */
    mqd_plog_truncated_cb cb = log->trunc_cb;
    log->trunc_cb = NULL;
    if (cb)
        cb(log, log->end, log->trunc_rc, log->trunc_cb_arg);
}
