/* Pre-zeroed segment tails (segment_prezero = BYTES, flush=sync logs only; off by
 * default).
 *
 * An append grows the file, so each group commit's fdatasync also writes the file's new
 * size and block map (a journal commit; the inode itself on ext4 without a journal, as on
 * the development VM); an overwrite of blocks already written is data plus one device
 * flush. bench/fsync-modes, 14 KiB batches, one evening: append + fdatasync p50 0.335 ms
 * / p99 0.570 ms, overwrite of a pre-zeroed file p50 0.163 / p99 0.268; the next evening
 * 0.267 / 0.820 against 0.321 / 0.575. End to end at 10k msgs/s it lowered the median
 * (0.57-0.73 ms against 0.76-1.07) but not the p99: the zeroing's own writes and syncs
 * compete with the group commits (docs/performance.md section 11).
 *
 * So one zeroer thread per store keeps `window` bytes of zeros written and fdatasync'd
 * ahead of each written log's tail, in whole pieces of min(window / 4, ZCHUNK) (each
 * piece's own sync stays short, so a group commit that meets one waits little), with a
 * rest after each as long as the piece took (pace()). It never runs on a flusher: the
 * extension's sync would stall the batches behind it. What it cannot avoid: the group
 * commit that meets a piece is slow, and about (write rate / disk bandwidth) of the
 * messages meet one (docs/performance.md section 12), which is why it is opt-in.
 *
 * Who writes where (all under z->mu):
 *   - the flusher, before it writes [s->size, end) to its tail s, records zwpos = end and,
 *     if the zeroer is writing a piece that starts below `end`, waits for that write to
 *     finish (it has fallen behind: rare), so its data always lands after the zeros;
 *   - the zeroer writes a piece [from, to) only with from >= zwpos, i.e. never over bytes
 *     a flusher wrote or is writing.
 * A segment's zeros end where it ends: the flusher stops the zeroer for it and cuts the
 * file back to its records (ftruncate + fdatasync) before it rolls, at a clean close and
 * before a truncation; a log dropped or freed is detached first. After a crash the
 * recovery scan (segment.c) finds zeros after the last record and cuts them silently;
 * anything else there is a torn tail, cut and logged as before.
 *
 * Bounded: at most PREZERO_MAX_LOGS logs hold zeros at once (the first written; a log
 * holds at most window + ZCHUNK bytes of them, until it rolls, truncates or closes), so a
 * broker with 10,000 busy partitions does not pre-write 10,000 windows. */
#include "config.h"
#include "store/store_int.h"
#include "util/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ZCHUNK (1u << 20)
#define PREZERO_MAX_LOGS 256
#define PACE_MIN_NS 1000000u

struct store_zero {
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* the zeroer waits for queued logs */
    pthread_cond_t done_cv; /* flushers wait for a write or a piece to finish */
    pthread_cond_t pace_cv; /* the zeroer rests between pieces (woken by stop only) */
    mqd_plog_t *q, *q_tail; /* logs whose zeros fell below half the window */
    pthread_t thr;
    int started, stop;
    uint64_t window; /* 0: off */
    size_t nlogs;    /* logs with zseg set */
    uint8_t *zeros;  /* ZCHUNK zero bytes */
    store_zero_stats_t stats;
};

static void q_del(struct store_zero *z, mqd_plog_t *log)
{
    mqd_plog_t *prev = NULL;
    for (mqd_plog_t *x = z->q; x && log->zqueued; prev = x, x = x->znext) {
        if (x != log)
            continue;
        if (prev)
            prev->znext = log->znext;
        else
            z->q = log->znext;
        if (z->q_tail == log)
            z->q_tail = prev;
        log->znext = NULL;
        log->zqueued = 0;
    }
}

/* Writes ZCHUNK-sized zeros over [from, to) (z->mu not held). 0 or an errno. */
static int write_zeros(const struct store_zero *z, const mqd_store_io_t *io, int fd,
                       uint64_t from, uint64_t to)
{
    while (from < to) {
        size_t n = to - from < ZCHUNK ? (size_t)(to - from) : ZCHUNK;
        ssize_t w = io->pwrite(fd, z->zeros, n, (off_t)from);
        if (w <= 0)
            return w == 0 ? ENOSPC : errno;
        from += (uint64_t)w;
    }
    return 0;
}

/* After a piece that took `took` ns, the zeroer rests as long (at least PACE_MIN_NS)
 * before the next one (z->mu held): group commits running meanwhile share the disk with
 * one piece at a time, never with a burst (a window refilled back to back slowed every
 * sync during it, 0.3 -> 1.5 ms, and messages queued behind several of them). */
static void pace(struct store_zero *z, uint64_t took)
{
    uint64_t until = mqd_mono_ns() + (took > PACE_MIN_NS ? took : PACE_MIN_NS);
    while (!z->stop) {
        uint64_t now = mqd_mono_ns();
        if (now >= until)
            return;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (until - now);
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&z->pace_cv, &z->mu, &ts);
    }
}

/* Zeroes log's tail up to zwpos + window, a piece at a time (z->mu held, dropped around
 * the I/O). */
static void fill(struct store_zero *z, mqd_plog_t *log)
{
    for (;;) {
        seg_t *s = log->zseg;
        if (!s || z->stop || !z->window || __atomic_load_n(&log->failed, __ATOMIC_ACQUIRE))
            return;
        uint64_t target = log->zwpos + z->window;
        if (log->zlimit && target > log->zlimit)
            target = log->zlimit;
        target &= ~(uint64_t)4095;
        uint64_t from = log->zend > log->zwpos ? log->zend : log->zwpos;
        if (from >= target)
            return;
        uint64_t piece = (z->window / 4) & ~(uint64_t)4095;
        piece = piece < 4096 ? 4096 : piece > ZCHUNK ? ZCHUNK : piece;
        uint64_t to = target - from > piece ? from + piece : target;
        /* Whole pieces only, but for the last one below the segment's end: a piece costs
         * a device flush whatever its size, and chasing the tail a few KiB at a time
         * (the flusher moves it on during every sync) made one flush per group commit. */
        if (to - from < piece && !(log->zlimit && to >= (log->zlimit & ~(uint64_t)4095)))
            return;
        uint64_t t0 = mqd_mono_ns();
        log->zbusy = log->zwriting = 1;
        log->zfrom = from;
        log->zdirty = 1;
        pthread_mutex_unlock(&z->mu);
        int err = write_zeros(z, &log->st->io, s->fd, from, to);
        pthread_mutex_lock(&z->mu);
        log->zwriting = 0;
        pthread_cond_broadcast(&z->done_cv);
        pthread_mutex_unlock(&z->mu);
        if (!err && log->st->io.fdatasync(s->fd) != 0)
            err = errno;
        pthread_mutex_lock(&z->mu);
        log->zbusy = 0;
        pthread_cond_broadcast(&z->done_cv);
        if (err) {
            /* Not an error of the log: its appends go on, unzeroed. */
            MQD_WARN("store", "%s: pre-zeroing the segment tail failed (%s); appending "
                     "without it", log->dir, strerror(err));
            log->zoff = 1;
            return;
        }
        log->zend = to;
        z->stats.bytes += to - from;
        z->stats.pieces++;
        pace(z, mqd_mono_ns() - t0);
    }
}

static void *zero_main(void *arg)
{
    struct store_zero *z = arg;
    pthread_mutex_lock(&z->mu);
    while (!z->stop) {
        mqd_plog_t *log = z->q;
        if (!log) {
            pthread_cond_wait(&z->work_cv, &z->mu);
            continue;
        }
        z->q = log->znext;
        if (!z->q)
            z->q_tail = NULL;
        log->znext = NULL;
        log->zqueued = 0;
        fill(z, log);
    }
    pthread_mutex_unlock(&z->mu);
    return NULL;
}

struct store_zero *store_zero_start(void)
{
    struct store_zero *z = calloc(1, sizeof *z);
    if (!z)
        return NULL;
    z->zeros = calloc(1, ZCHUNK);
    pthread_mutex_init(&z->mu, NULL);
    pthread_cond_init(&z->work_cv, NULL);
    pthread_cond_init(&z->done_cv, NULL);
    pthread_cond_init(&z->pace_cv, NULL);
    if (!z->zeros || pthread_create(&z->thr, NULL, zero_main, z) != 0) {
        store_zero_free(z);
        return NULL;
    }
    pthread_setname_np(z->thr, "mqd-zero");
    z->started = 1;
    return z;
}

void store_zero_stop(struct store_zero *z)
{
    if (!z || !z->started)
        return;
    pthread_mutex_lock(&z->mu);
    z->stop = 1;
    pthread_cond_signal(&z->work_cv);
    pthread_cond_signal(&z->pace_cv);
    pthread_mutex_unlock(&z->mu);
    pthread_join(z->thr, NULL);
    z->started = 0;
}

void store_zero_free(struct store_zero *z)
{
    if (!z)
        return;
    store_zero_stop(z);
    pthread_cond_destroy(&z->done_cv);
    pthread_cond_destroy(&z->pace_cv);
    pthread_cond_destroy(&z->work_cv);
    pthread_mutex_destroy(&z->mu);
    free(z->zeros);
    free(z);
}

void mqd_store_set_prezero(mqd_store_t *st, uint64_t window)
{
    struct store_zero *z = st->zero;
    if (!z)
        return;
    pthread_mutex_lock(&z->mu);
    __atomic_store_n(&z->window, window ? (window + 4095) & ~(uint64_t)4095 : 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&z->mu);
}

void store_zero_stats(mqd_store_t *st, store_zero_stats_t *out)
{
    struct store_zero *z = st->zero;
    memset(out, 0, sizeof *out);
    if (!z)
        return;
    pthread_mutex_lock(&z->mu);
    *out = z->stats;
    out->logs = z->nlogs;
    pthread_mutex_unlock(&z->mu);
}

void store_zero_before_write(mqd_plog_t *log, seg_t *s, uint64_t end, const mqd_plog_config_t *c)
{
    struct store_zero *z = log->st->zero;
    /* Off (the default) and nothing attached: no lock per group commit. zseg is only
     * set on this flusher thread, and cleared here or while the log is not flushing. */
    if (!z || (!__atomic_load_n(&z->window, __ATOMIC_RELAXED) && !log->zseg))
        return;
    pthread_mutex_lock(&z->mu);
    if (!log->zseg && z->window && c->flush == MQD_FLUSH_SYNC && !log->zoff &&
        z->nlogs < PREZERO_MAX_LOGS) {
        log->zseg = s; /* the file ends at s->size: recovery, a roll or a cut made it so */
        log->zend = log->zwpos = s->size;
        z->nlogs++;
    }
    if (log->zseg == s) {
        while (log->zwriting && end > log->zfrom) {
            z->stats.waits++;
            pthread_cond_wait(&z->done_cv, &z->mu);
        }
        if (end > log->zwpos)
            log->zwpos = end;
        log->zlimit = c->segment_bytes;
        if (z->window && log->zend < end + z->window / 2 && !log->zqueued && !log->zbusy) {
            log->zqueued = 1;
            if (z->q_tail)
                z->q_tail->znext = log;
            else
                z->q = log;
            z->q_tail = log;
            pthread_cond_signal(&z->work_cv);
        }
    }
    pthread_mutex_unlock(&z->mu);
}

/* Stops zeroing for log (waits for a piece in progress). Returns whether the zeroer may
 * have left zeros past the records of the segment it worked on. z->mu held. */
static int detach_locked(struct store_zero *z, mqd_plog_t *log)
{
    while (log->zbusy)
        pthread_cond_wait(&z->done_cv, &z->mu);
    q_del(z, log);
    if (log->zseg) {
        log->zseg = NULL;
        z->nlogs--;
    }
    int dirty = log->zdirty;
    log->zdirty = 0;
    return dirty;
}

void store_zero_detach(mqd_plog_t *log)
{
    struct store_zero *z = log->st ? log->st->zero : NULL;
    if (!z)
        return;
    pthread_mutex_lock(&z->mu);
    detach_locked(z, log);
    pthread_mutex_unlock(&z->mu);
}

int store_zero_cut(mqd_plog_t *log, seg_t *s)
{
    struct store_zero *z = log->st->zero;
    if (!z)
        return 0;
    pthread_mutex_lock(&z->mu);
    int dirty = detach_locked(z, log);
    pthread_mutex_unlock(&z->mu);
    struct stat sb;
    if (!dirty || fstat(s->fd, &sb) != 0 || (uint64_t)sb.st_size <= s->size)
        return 0;
    if (log->st->io.ftruncate(s->fd, (off_t)s->size) != 0 || log->st->io.fdatasync(s->fd) != 0)
        return MQD_EIO;
    return 0;
}
