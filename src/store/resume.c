/* Resuming a failed partition log (issue 16, point 5).
 *
 * A log fails on the first write or sync error (store.c log_fail): nothing past its
 * durable offset is trusted any more (after a failed fdatasync the kernel may have
 * dropped the dirty pages and still serve them from the cache: "fsyncgate"), stable
 * falls back to durable, the owner fails every send still waiting. A resume makes the
 * log usable again without a restart:
 *   owner    drops the uncommitted batch, sets end = durable, asks the flusher;
 *   flusher  frees the batches queued before the failure, truncates the tail segment to
 *            the durable offset (the file and the in-memory indexes), writes and
 *            fdatasyncs a probe block past the end and cuts it again, writes a durable
 *            checkpoint; only when all of that succeeded it clears `failed`. Otherwise
 *            the log stays failed and resume_rc says why (MQD_ENOSPC: still full).
 * Either way the owner hears of it through the stable callback (store_announce).
 */
#include "config.h"
#include "store/store_int.h"
#include "util/util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROBE_BYTES 4096

/* Proves the file system takes a block and syncs it again, and leaves the file as it
 * was. 0 or an errno. */
static int probe(seg_t *s)
{
    const mqd_store_io_t *io = &s->st->io;
    static const uint8_t zeros[PROBE_BYTES];
    ssize_t w = io->pwrite(s->fd, zeros, sizeof zeros, (off_t)s->size);
    int err = w == (ssize_t)sizeof zeros ? 0 : w < 0 ? errno : ENOSPC;
    if (err == 0 && io->fdatasync(s->fd) != 0)
        err = errno;
    if (io->ftruncate(s->fd, (off_t)s->size) != 0 && err == 0)
        err = errno;
    if (err == 0 && io->fdatasync(s->fd) != 0)
        err = errno;
    return err;
}

static void drop_queue(mqd_plog_t *log)
{
    pthread_mutex_lock(&log->mu);
    batch_t *b = log->queue;
    log->queue = log->queue_tail = NULL;
    pthread_mutex_unlock(&log->mu);
    while (b) {
        batch_t *n = b->next;
        store_batch_put(log->st, b);
        b = n;
    }
}

void store_do_resume(mqd_plog_t *log)
{
    uint64_t d = __atomic_load_n(&log->durable, __ATOMIC_ACQUIRE);
    seg_t *t = log->tail;
    drop_queue(log); /* their sends were failed: never written after the resume */
    store_zero_detach(log);
    errno = 0;
    /* Under the log mutex: the owner keeps reading while a resume runs (it does not
     * wait as for truncate_to), and the rescan rebuilds the indexes its reads look up. */
    pthread_mutex_lock(&log->mu);
    int rc = seg_truncate_at(log, t, d < t->base ? t->base : d, true);
    int terr = errno;
    pthread_mutex_unlock(&log->mu);
    int err = rc == 0 ? probe(t) : terr ? terr : EIO;
    if (err == 0 && ckpt_write(log, t->base, t->size, t->next_off, 1) != 0)
        err = errno ? errno : EIO;
    if (err == 0) {
        log->ckpt_durable = d;
        log->ckpt_hint = 0;
        log->unsynced_recs = 0;
        log->last_sync_ms = log->last_ckpt_ms = mqd_now_ms();
        __atomic_store_n(&log->stable, d, __ATOMIC_RELEASE);
        __atomic_store_n(&log->fail_err, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&log->failed, 0, __ATOMIC_RELEASE);
        MQD_NOTICE("store", "%s: partition resumed at offset %" PRIu64, log->dir, d);
    } else {
        __atomic_store_n(&log->fail_err, err, __ATOMIC_RELEASE);
        MQD_WARN("store", "%s: resume failed (%s): the partition stays failed", log->dir,
                 strerror(err));
    }
    log->resume_rc = err == 0 ? 0 : mqd_errno_rc(err);
    __atomic_store_n(&log->resume_req, 0, __ATOMIC_RELEASE);
    store_announce(log);
}

int mqd_plog_resume(mqd_plog_t *log)
{
    if (!__atomic_load_n(&log->failed, __ATOMIC_ACQUIRE))
        return 0;
    if (__atomic_load_n(&log->resume_req, __ATOMIC_ACQUIRE) || log->truncating)
        return MQD_EAGAIN;
    if (log->pending) { /* appended before the failure, never committed */
        store_batch_put(log->st, log->pending);
        log->pending = NULL;
    }
    /* While failed nothing appends, and durable no longer moves: the next offset is
     * the first one that was not made durable. */
    log->end = __atomic_load_n(&log->durable, __ATOMIC_ACQUIRE);
    store_cold_end(log); /* its chunks may hold bytes about to be cut */
    __atomic_store_n(&log->resume_req, 1, __ATOMIC_RELEASE);
    store_kick_log(log->st, log);
    return 0;
}

bool mqd_plog_resuming(const mqd_plog_t *log)
{
    return __atomic_load_n(&log->resume_req, __ATOMIC_ACQUIRE);
}

int mqd_plog_fail_errno(const mqd_plog_t *log)
{
    return __atomic_load_n(&log->fail_err, __ATOMIC_ACQUIRE);
}
