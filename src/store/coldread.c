/* Cold reads: a reader far behind the tail (a backlog) reads older segments that are
 * mostly not in the page cache.
 *
 * Buffered, every such pread makes the event loop allocate page-cache pages and take the
 * I/O completions (the kernel's read-ahead runs in the reader's context): a 10 GB backlog
 * read at 60 % of the in-cache rate with the loop's core saturated (bench/backlog.sh). So
 * a read of an older segment (immutable: fdatasync'd when it rolled), or of the tail
 * segment's synced part (its dio_end, plog.c seg_dfd), first tries the page cache without
 * blocking (RWF_NOWAIT: the in-cache rate is unchanged), and on a miss
 * starts a chain: the owner reads the DC_CHUNK aligned bytes around the request with
 * O_DIRECT into chunk k, which serves the following reads (a consumer asks for ~256
 * records at a time). Once a second read is served from the chain (the reader moves on,
 * it was not a one-off), a reader thread reads chunk k + 1, the DC_CHUNK bytes right
 * after chunk k, into the log's second buffer while the owner delivers from chunk k. A
 * read that straddles the two is served from both; a read that starts in k + 1 makes it
 * chunk k and asks for the next one into the old buffer. The owner waits only when it
 * needs a chunk still in flight (the rest of that read), and reads a chunk still queued
 * itself rather than wait behind other logs' reads.
 *
 * A chain ends (both buffers freed) when its reader reads past the tail's dio_end (it
 * caught up with the writer: a chunk there is read short, and ends the chain like the end
 * of a file), another segment, or outside the two chunks; at a truncation; at log close.
 * Warm readers never
 * start one, and a chain never reads ahead a chunk the page cache holds (mincore): a
 * stray miss in cached data costs one chunk, and the reads past it go to the page cache
 * again. At most DC_MAX_LOGS logs have a chain.
 *
 * No copy (store_cold_read): a read within one chunk returns a
 * pointer into it and the caller's mqd_read_t pins the chunk until its next read. A
 * pinned chunk is never freed nor reused as the read-ahead buffer; a chain that lets go
 * of it marks it `dropped`, and the last unpin frees it. A 10 GB backlog read at 0.74 of
 * the in-cache rate with every record copied out of the chunks (the loop's CPU was the
 * bound), 0.83-0.84 without the copy (docs/performance.md section 11).
 *
 * Chunk states, guarded by c->mu (the owner reads a chunk's buffer without the lock only
 * once it saw it READY; the thread writes it only while READING):
 *   (new) --owner pread--> READY                     chain start: chunk k
 *   (new) --ask--> QUEUED --thread--> READING --> READY | FAILED
 *                  QUEUED --owner needs it--> (owner preads) READY | FAILED
 *   release: QUEUED -> unlinked and freed; READY/FAILED -> freed;
 *            READING -> `orphan`: the thread frees it when the pread returns.
 * A buffer is never freed while a read writes into it, and an orphan does not point at
 * its log, so a log can end its chain and be freed at once. Each queued chunk holds its
 * own dup of the segment's O_DIRECT descriptor, closed after its read, so retention or
 * truncation closing the segment never leaves a read on a reused descriptor. */
#include "config.h"
#include "store/store_int.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

enum { CK_QUEUED = 1, CK_READING, CK_READY, CK_FAILED };

struct cold_chunk {
    cold_chunk_t *next; /* in the readers' queue */
    uint8_t *buf;       /* DC_CHUNK bytes, DC_ALIGN aligned */
    int fd;             /* own dup of the O_DIRECT descriptor while queued or read */
    int state;
    bool orphan;  /* its chain ended while a thread was reading it */
    int pins;     /* mqd_read_t's pointing into it (owner thread; it is READY then) */
    bool dropped; /* pinned when its chain let it go: freed by the last unpin */
    uint64_t pos; /* file position (a DC_ALIGN multiple) */
    size_t want;  /* bytes to read: DC_CHUNK, less below the tail's dio_end */
    size_t len;   /* bytes read (READY; < DC_CHUNK only at the end of the file) */
};

struct store_cold {
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* threads wait for queued chunks */
    pthread_cond_t done_cv; /* the owner waits for a chunk being read */
    cold_chunk_t *q, *q_tail;
    pthread_t thr[STORE_COLD_THREADS];
    int started[STORE_COLD_THREADS];
    int stop;
    store_cold_stats_t stats;
    store_cold_io_t io; /* the store's cold reads go through it (store_cold_set_io) */
};

static ssize_t io_preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    return preadv2(fd, iov, cnt, off, flags);
}

/* mincore of a mapping that is never touched: no I/O, no copy. */
static bool io_cached(int fd, uint64_t pos, size_t len)
{
    uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t a = pos & ~(pg - 1);
    size_t span = (size_t)(pos + len - a), npg = (span + pg - 1) / pg;
    unsigned char vec[DC_CHUNK / 4096 + 2];
    if (len == 0 || npg > sizeof vec)
        return false;
    void *m = mmap(NULL, span, PROT_READ, MAP_SHARED, fd, (off_t)a);
    if (m == MAP_FAILED)
        return false;
    bool all = mincore(m, span, vec) == 0;
    for (size_t i = 0; all && i < npg; i++)
        all = vec[i] & 1;
    munmap(m, span);
    return all;
}

void store_cold_set_io(mqd_store_t *st, const store_cold_io_t *io)
{
    if (st->cold)
        st->cold->io = io ? *io : (store_cold_io_t){pread, io_preadv2, io_cached};
}

void store_cold_get_io(mqd_store_t *st, store_cold_io_t *out)
{
    *out = st->cold ? st->cold->io : (store_cold_io_t){pread, io_preadv2, io_cached};
}

static cold_chunk_t *chunk_new(void)
{
    cold_chunk_t *k = calloc(1, sizeof *k);
    if (k && posix_memalign((void **)&k->buf, DC_ALIGN, DC_CHUNK) != 0) {
        free(k);
        return NULL;
    }
    if (k)
        k->fd = -1;
    return k;
}

static void chunk_free(cold_chunk_t *k)
{
    if (!k)
        return;
    if (k->fd >= 0)
        close(k->fd);
    free(k->buf);
    free(k);
}

/* Reads chunk k (state READING, not in the queue) and closes its descriptor. c->mu not
 * held; the caller publishes the result with read_done. */
static ssize_t chunk_pread(const struct store_cold *c, cold_chunk_t *k)
{
    ssize_t got = c->io.pread(k->fd, k->buf, k->want, (off_t)k->pos);
    close(k->fd);
    k->fd = -1;
    return got;
}

/* Publishes a read's result (c->mu held). */
static void read_done(struct store_cold *c, cold_chunk_t *k, ssize_t got)
{
    c->stats.bytes += got > 0 ? (uint64_t)got : 0;
    k->len = got > 0 ? (size_t)got : 0;
    k->state = got >= 0 ? CK_READY : CK_FAILED;
}

static void q_unlink(struct store_cold *c, cold_chunk_t *k)
{
    cold_chunk_t *prev = NULL;
    for (cold_chunk_t *x = c->q; x; prev = x, x = x->next) {
        if (x != k)
            continue;
        if (prev)
            prev->next = k->next;
        else
            c->q = k->next;
        if (c->q_tail == k)
            c->q_tail = prev;
        k->next = NULL;
        return;
    }
}

/* Takes queued chunk k off the queue and reads it (c->mu held on entry and on return,
 * dropped around the read). */
static ssize_t take_and_read(struct store_cold *c, cold_chunk_t *k)
{
    q_unlink(c, k);
    k->state = CK_READING;
    pthread_mutex_unlock(&c->mu);
    ssize_t got = chunk_pread(c, k);
    pthread_mutex_lock(&c->mu);
    return got;
}

static void *reader_main(void *arg)
{
    struct store_cold *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        cold_chunk_t *k = c->q;
        if (!k) {
            if (c->stop)
                break;
            pthread_cond_wait(&c->work_cv, &c->mu);
            continue;
        }
        ssize_t got = take_and_read(c, k);
        c->stats.ahead_reads++;
        if (k->orphan) {
            c->stats.orphans++;
            c->stats.bytes += got > 0 ? (uint64_t)got : 0;
            pthread_mutex_unlock(&c->mu);
            chunk_free(k);
            pthread_mutex_lock(&c->mu);
            continue;
        }
        read_done(c, k, got);
        pthread_cond_broadcast(&c->done_cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

struct store_cold *store_cold_start(void)
{
    struct store_cold *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->work_cv, NULL);
    pthread_cond_init(&c->done_cv, NULL);
    c->io = (store_cold_io_t){pread, io_preadv2, io_cached};
    for (unsigned i = 0; i < STORE_COLD_THREADS; i++) {
        c->started[i] = pthread_create(&c->thr[i], NULL, reader_main, c) == 0;
        if (!c->started[i]) {
            store_cold_stop(c);
            return NULL;
        }
        pthread_setname_np(c->thr[i], "mqd-coldread");
    }
    return c;
}

void store_cold_stop(struct store_cold *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->work_cv);
    pthread_mutex_unlock(&c->mu);
    for (unsigned i = 0; i < STORE_COLD_THREADS; i++)
        if (c->started[i])
            pthread_join(c->thr[i], NULL);
    /* The threads drain the queue before they stop; every chain was ended before. */
    pthread_cond_destroy(&c->done_cv);
    pthread_cond_destroy(&c->work_cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void store_cold_stats(mqd_store_t *st, store_cold_stats_t *out)
{
    struct store_cold *c = st->cold;
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
}

/* Frees k now, or hands it to the thread reading it. Owner thread. */
static void chunk_release(struct store_cold *c, cold_chunk_t *k)
{
    if (!k)
        return;
    if (k->pins) {
        k->dropped = true; /* READY: no thread holds it; the last unpin frees it */
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (k->state == CK_READING) {
        k->orphan = true;
        k = NULL;
    } else if (k->state == CK_QUEUED) {
        q_unlink(c, k);
    }
    pthread_mutex_unlock(&c->mu);
    chunk_free(k);
}

/* Bytes of a chunk at pos (a DC_ALIGN multiple) a direct read may take: DC_CHUNK, or
 * what is left below the tail's dio_end (a DC_ALIGN multiple too). */
static size_t chunk_want(const cold_req_t *q, uint64_t pos)
{
    if (pos >= q->dio_end)
        return 0;
    return q->dio_end - pos < DC_CHUNK ? (size_t)(q->dio_end - pos) : DC_CHUNK;
}

/* Asks a thread for the chunk after ch->cur, into `spare` (a chunk no read uses) or a
 * new buffer. Nothing past the segment's records or the end of the file, and nothing
 * the page cache holds: then `cached_next` is set, and reads past ch->cur go there. */
static void chunk_ask(struct store_cold *c, cold_chain_t *ch, const cold_req_t *q,
                      cold_chunk_t *spare)
{
    uint64_t pos = ch->cur->pos + DC_CHUNK;
    size_t len = 0, want = chunk_want(q, pos);
    if (ch->cur->len == DC_CHUNK && pos < q->seg_end && want)
        len = q->seg_end - pos < want ? (size_t)(q->seg_end - pos) : want;
    if (len)
        ch->cached_next = c->io.cached(q->fd, pos, len);
    if (!len || ch->cached_next) {
        chunk_free(spare);
        return;
    }
    cold_chunk_t *k = spare ? spare : chunk_new();
    if (!k)
        return;
    k->fd = fcntl(q->dfd, F_DUPFD_CLOEXEC, 0);
    if (k->fd < 0) {
        chunk_free(k);
        return;
    }
    k->next = NULL;
    k->pos = pos;
    k->want = want;
    k->len = 0;
    k->orphan = false;
    k->state = CK_QUEUED;
    pthread_mutex_lock(&c->mu);
    if (c->q_tail)
        c->q_tail->next = k;
    else
        c->q = k;
    c->q_tail = k;
    pthread_cond_signal(&c->work_cv);
    pthread_mutex_unlock(&c->mu);
    ch->nxt = k;
}

/* Waits until k is read; reads it here if no thread has taken it yet. 0 when READY. */
static int chunk_wait(struct store_cold *c, cold_chunk_t *k)
{
    pthread_mutex_lock(&c->mu);
    if (k->state == CK_QUEUED) {
        ssize_t got = take_and_read(c, k);
        c->stats.sync_reads++;
        read_done(c, k, got);
    } else if (k->state == CK_READING) {
        c->stats.waits++;
        while (k->state == CK_READING)
            pthread_cond_wait(&c->done_cv, &c->mu);
    }
    int rc = k->state == CK_READY ? 0 : -1;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Makes ch->nxt (read) chunk k and asks for the next one into the old buffer. */
static int chain_advance(struct store_cold *c, cold_chain_t *ch, const cold_req_t *q)
{
    if (!ch->nxt && !ch->cached_next)
        chunk_ask(c, ch, q, NULL);
    if (!ch->nxt || chunk_wait(c, ch->nxt) != 0)
        return -1;
    cold_chunk_t *old = ch->cur;
    ch->cur = ch->nxt;
    ch->nxt = NULL;
    if (old->pins) { /* records still point into it: a new buffer for the read-ahead */
        chunk_release(c, old);
        old = NULL;
    }
    chunk_ask(c, ch, q, old);
    return 0;
}

/* Serves q from the chain (segment q->base). Returns q->n, or 0 when it cannot. A read
 * within one chunk is not copied: *src points into the chunk, pinned in *pin. */
static size_t chain_serve(mqd_plog_t *log, const cold_req_t *q, uint8_t *dst,
                          const uint8_t **src, cold_chunk_t **pin)
{
    struct store_cold *c = log->st->cold;
    cold_chain_t *ch = &log->cold;
    cold_chunk_t *k = ch->cur;
    if (q->pos < k->pos)
        return 0;
    if (q->pos >= k->pos + k->len) {
        /* Past chunk k: on into k + 1 if the read starts there (and it is not cached) */
        if (k->len < DC_CHUNK || q->pos >= k->pos + 2 * (uint64_t)DC_CHUNK || ch->cached_next ||
            chain_advance(c, ch, q) != 0)
            return 0;
        k = ch->cur;
        if (q->pos >= k->pos + k->len)
            return 0;
    } else if (ch->served && !ch->nxt && !ch->cached_next) {
        chunk_ask(c, ch, q, NULL); /* a second read here: the reader is moving on */
    }
    size_t a = (size_t)(k->pos + k->len - q->pos);
    if (a >= q->n) {
        *src = k->buf + (q->pos - k->pos); /* no copy: the caller pins k */
        k->pins++;
        *pin = k;
        ch->served++;
        return q->n;
    }
    /* Straddles chunks k and k + 1: the rest comes from k + 1, read once. */
    if (k->len < DC_CHUNK)
        return 0;
    if (!ch->nxt && !ch->cached_next)
        chunk_ask(c, ch, q, NULL);
    cold_chunk_t *x = ch->nxt;
    size_t rest = q->n - a;
    if (x && (chunk_wait(c, x) != 0 || rest > x->len))
        return 0;
    if (x)
        memcpy(dst + a, x->buf, rest);
    else if (!ch->cached_next ||
             pread(q->fd, dst + a, rest, (off_t)(k->pos + k->len)) != (ssize_t)rest)
        return 0;
    memcpy(dst, k->buf + (q->pos - k->pos), a);
    ch->served++;
    return q->n;
}

/* A page-cache miss: reads chunk k around q here, then serves q from the new chain. */
static size_t chain_start(mqd_plog_t *log, const cold_req_t *q, uint8_t *dst,
                          const uint8_t **src, cold_chunk_t **pin)
{
    mqd_store_t *st = log->st;
    struct store_cold *c = st->cold;
    if (!c || st->dc_logs >= DC_MAX_LOGS)
        return 0;
    cold_chunk_t *k = chunk_new();
    if (!k)
        return 0;
    k->pos = q->pos & ~(uint64_t)(DC_ALIGN - 1);
    k->want = chunk_want(q, k->pos);
    ssize_t got = c->io.pread(q->dfd, k->buf, k->want, (off_t)k->pos);
    pthread_mutex_lock(&c->mu);
    c->stats.chains++;
    c->stats.sync_reads++;
    read_done(c, k, got);
    pthread_mutex_unlock(&c->mu);
    if (k->state != CK_READY || k->len == 0) {
        chunk_free(k);
        return 0;
    }
    log->cold = (cold_chain_t){.cur = k, .base = q->base};
    st->dc_logs++;
    size_t n = chain_serve(log, q, dst, src, pin);
    if (n == 0)
        store_cold_end(log);
    return n;
}

void store_cold_end(mqd_plog_t *log)
{
    cold_chain_t *ch = &log->cold;
    if (!ch->cur)
        return;
    chunk_release(log->st->cold, ch->nxt);
    chunk_release(log->st->cold, ch->cur);
    ch->cur = ch->nxt = NULL;
    log->st->dc_logs--;
}

static size_t cold_read(mqd_plog_t *log, const cold_req_t *q, uint8_t *dst, const uint8_t **src,
                        cold_chunk_t **pin)
{
    cold_chain_t *ch = &log->cold;
    if (q->dfd < 0 || q->pos + q->n > q->dio_end) {
        store_cold_end(log); /* the reader caught up with what the tail synced */
        return 0;
    }
    if (q->n > DC_CHUNK)
        return 0; /* a record larger than a chunk: buffered */
    if (ch->cur && ch->base == q->base) {
        size_t n = chain_serve(log, q, dst, src, pin);
        if (n)
            return n;
    }
    store_cold_end(log);
    struct iovec v = {dst, q->n};
    ssize_t got = log->st->cold->io.preadv2(q->fd, &v, 1, (off_t)q->pos, RWF_NOWAIT);
    if (got == (ssize_t)q->n)
        return q->n; /* in the page cache */
    if (got < 0 && errno == EOPNOTSUPP)
        return 0; /* no RWF_NOWAIT here (tmpfs): the caller's buffered read */
    return chain_start(log, q, dst, src, pin);
}

size_t store_cold_read(mqd_plog_t *log, const cold_req_t *q, uint8_t *dst, const uint8_t **src,
                       void **pin)
{
    cold_chunk_t *k = NULL;
    *src = dst;
    size_t n = cold_read(log, q, dst, src, &k);
    *pin = k;
    return n;
}

void store_cold_pin_span(const void *pin, const uint8_t **p, size_t *n)
{
    const cold_chunk_t *k = pin;
    *p = k ? k->buf : NULL;
    *n = k ? k->len : 0;
}

void store_cold_unpin(void *pin)
{
    cold_chunk_t *k = pin;
    if (k && --k->pins == 0 && k->dropped)
        chunk_free(k);
}
