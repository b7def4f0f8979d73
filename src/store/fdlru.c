/* A cap on the segment descriptors a store holds open (max_open_files).
 *
 * Every partition used to keep its tail's .log open, plus every older segment it had
 * recovered or read: 40,960 auto-created topics took every descriptor of a process
 * limited to 20,000, and a restart reopened them all at recovery. Now a log's segments
 * are open only while it is in use: the owner keeps the logs that hold descriptors in
 * a list ordered by last use (append, read, truncation), and when more than the cap
 * are open it closes the least recently used logs' segments until an eighth of the cap
 * is free again. A closed segment is reopened on its next use. The rules that make the
 * closing safe against the flusher are in store_int.h. */
#include "config.h"
#include "store/store_int.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define TRIM_VISITS 64

size_t store_fd_default_cap(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return MQD_STORE_FD_MAX_DEFAULT;
    size_t lim = (size_t)rl.rlim_cur;
    size_t n = lim > MQD_STORE_FD_RESERVE ? (lim - MQD_STORE_FD_RESERVE) / 2 : 0;
    /* Connections get the rest (accept_guard.c keeps this much for partition files):
     * half of a 20,000 limit was 10,000 connections at most; idle partitions reopen on
     * demand, so thousands of open segments are plenty. */
    if (n > MQD_STORE_FD_MAX_DEFAULT)
        n = MQD_STORE_FD_MAX_DEFAULT;
    return n < MQD_STORE_FD_MIN ? MQD_STORE_FD_MIN : n;
}

int store_fd_open(mqd_store_t *st, const char *path, int flags)
{
    int fd = open(path, flags | O_CLOEXEC, 0644);
    if (fd >= 0)
        __atomic_add_fetch(&st->fd_open, 1, __ATOMIC_RELAXED);
    return fd;
}

void store_fd_close(mqd_store_t *st, int fd)
{
    if (fd < 0)
        return;
    close(fd);
    __atomic_sub_fetch(&st->fd_open, 1, __ATOMIC_RELAXED);
}

static size_t cap_of(mqd_store_t *st)
{
    if (!st->fd_cap)
        st->fd_cap = store_fd_default_cap();
    return st->fd_cap;
}

void mqd_store_set_max_open_files(mqd_store_t *st, size_t n)
{
    size_t def = store_fd_default_cap();
    st->fd_cap = n ? (n < MQD_STORE_FD_MIN ? MQD_STORE_FD_MIN : n) : def;
    if (st->fd_cap > def)
        MQD_WARN("store", "max_open_files = %zu is over (RLIMIT_NOFILE - 64) / 2 = %zu: partition "
                 "files may take the descriptors connections and mqd's own files need; raise "
                 "LimitNOFILE or leave max_open_files at 0", st->fd_cap, def);
}

void mqd_store_fd_stats(mqd_store_t *st, mqd_store_fd_stats_t *out)
{
    out->open = __atomic_load_n(&st->fd_open, __ATOMIC_RELAXED);
    out->cap = cap_of(st);
    out->reopens = __atomic_load_n(&st->fd_reopens, __ATOMIC_RELAXED);
    out->evictions = st->fd_evictions;
}

int seg_fd_get(mqd_plog_t *log, seg_t *s)
{
    if (s->fd >= 0)
        return s->fd;
    char p[4096];
    seg_path(log, s->base, "log", p, sizeof p);
    s->fd = store_fd_open(log->st, p, O_RDWR);
    if (s->fd < 0) {
        MQD_ERR("store", "%s: cannot reopen segment %" PRIu64 ": %s", log->dir, s->base,
                strerror(errno));
        return MQD_EIO;
    }
    __atomic_add_fetch(&log->st->fd_reopens, 1, __ATOMIC_RELAXED); /* truncations: flusher */
    return s->fd;
}

static void lru_unlink(mqd_store_t *st, mqd_plog_t *log)
{
    if (!log->on_lru)
        return;
    if (log->lru_prev)
        log->lru_prev->lru_next = log->lru_next;
    else
        st->lru_head = log->lru_next;
    if (log->lru_next)
        log->lru_next->lru_prev = log->lru_prev;
    else
        st->lru_tail = log->lru_prev;
    log->lru_prev = log->lru_next = NULL;
    log->on_lru = 0;
}

void store_fd_forget(mqd_plog_t *log)
{
    lru_unlink(log->st, log);
}

/* Whether the flusher has nothing of log's tail to write or sync (st->mu held). The
 * flusher changes the tail and its size only while `flushing`; pre-zeroing starts only
 * from a flush. */
static int tail_idle(const mqd_plog_t *log)
{
    if (log->flushing || log->queue || log->pending ||
        __atomic_load_n(&log->trunc_req, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&log->resume_req, __ATOMIC_ACQUIRE)) /* resume.c uses the tail's fd */
        return 0;
    const seg_t *t = log->tail;
    return __atomic_load_n(&t->synced, __ATOMIC_ACQUIRE) == t->size &&
           !__atomic_load_n(&log->zseg, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&log->zdirty, __ATOMIC_ACQUIRE);
}

static size_t seg_close_fds(mqd_store_t *st, seg_t *s)
{
    size_t n = (s->fd >= 0) + (s->dfd >= 0);
    store_fd_close(st, s->fd);
    s->fd = -1;
    if (s->dfd >= 0) {
        store_fd_close(st, s->dfd);
        s->dfd = -1;
    }
    return n;
}

/* store_fd_release; *left: descriptors of log still open afterwards. */
static size_t release(mqd_plog_t *log, const seg_t *keep, size_t *left)
{
    mqd_store_t *st = log->st;
    size_t n = 0, kept = 0;
    pthread_mutex_lock(&st->mu);
    int idle = tail_idle(log);
    /* A truncation's flusher relinks the tail and reopens what it cuts (truncate.c,
     * seg_truncate_at); with the owner free to run meanwhile (mqd_plog_truncate_start),
     * none of the log's descriptors is closed until it is done, whichever segment is
     * the tail at that moment. */
    int cutting = __atomic_load_n(&log->trunc_req, __ATOMIC_ACQUIRE) != 0;
    pthread_mutex_lock(&log->mu);
    for (seg_t *s = log->head; s; s = s->next) {
        if (cutting || s == keep || (s == log->tail && !idle))
            kept += (s->fd >= 0) + (s->dfd >= 0);
        else
            n += seg_close_fds(st, s);
    }
    pthread_mutex_unlock(&log->mu);
    pthread_mutex_unlock(&st->mu);
    *left = kept;
    return n;
}

size_t store_fd_release(mqd_plog_t *log, const seg_t *keep)
{
    size_t left;
    return release(log, keep, &left);
}

static void lru_push_head(mqd_store_t *st, mqd_plog_t *log)
{
    lru_unlink(st, log);
    log->lru_next = st->lru_head;
    if (st->lru_head)
        st->lru_head->lru_prev = log;
    else
        st->lru_tail = log;
    st->lru_head = log;
    log->on_lru = 1;
}

void store_fd_touch(mqd_plog_t *log)
{
    mqd_store_t *st = log->st;
    if (st->lru_head != log)
        lru_push_head(st, log);
    /* Room for what the caller may open next: a segment and its O_DIRECT twin. */
    size_t cap = cap_of(st), low = cap - cap / 8;
    if (__atomic_load_n(&st->fd_open, __ATOMIC_RELAXED) + 2 <= cap)
        return;
    /* At most TRIM_VISITS logs a call, and a log that keeps its tail (the flusher has
     * work for it) goes to the head: with more busy logs than the cap, each call costs
     * O(TRIM_VISITS), not a walk of every log. */
    mqd_plog_t *l = st->lru_tail;
    for (unsigned v = 0; v < TRIM_VISITS && l && l != log &&
                         __atomic_load_n(&st->fd_open, __ATOMIC_RELAXED) + 2 > low;
         v++) {
        mqd_plog_t *prev = l->lru_prev;
        size_t left;
        if (release(l, NULL, &left))
            st->fd_evictions++;
        if (left == 0) {
            lru_unlink(st, l);
            store_cold_end(l); /* its read-ahead buffers go with its descriptors */
        } else {
            lru_push_head(st, l);
        }
        l = prev;
    }
}
