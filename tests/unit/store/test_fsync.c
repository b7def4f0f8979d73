/* I/O error injection through the store's I/O table (mqd_store_set_io): an fdatasync or write error fails the
 * partition for good and nothing unsynced is ever reported stable or survives reopen. */
#include "config.h"
#include "store/store.h"
#include "store/store_int.h"
#include "util/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "store_test.h"

#define SEED 0xf00du

static int sync_calls;

static int fail_fdatasync(int fd)
{
    (void)fd;
    __atomic_add_fetch(&sync_calls, 1, __ATOMIC_RELAXED);
    errno = EIO;
    return -1;
}

static int syncfs_calls, fdatasync_ok_calls; /* counted by the syncfs tests */

static int count_syncfs(int fd)
{
    __atomic_add_fetch(&syncfs_calls, 1, __ATOMIC_RELAXED);
    return syncfs(fd);
}

static int fail_syncfs(int fd)
{
    (void)fd;
    __atomic_add_fetch(&syncfs_calls, 1, __ATOMIC_RELAXED);
    errno = EIO;
    return -1;
}

static int fallback_fdatasync(int fd)
{
    __atomic_add_fetch(&fdatasync_ok_calls, 1, __ATOMIC_RELAXED);
    return fdatasync(fd);
}

static ssize_t fail_pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
    (void)fd; (void)iov; (void)n; (void)off;
    errno = EIO;
    return -1;
}

/* Writes at most 7 bytes per call: the flusher must loop, not lose data. */
static ssize_t short_pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
    (void)n;
    size_t len = iov[0].iov_len < 7 ? iov[0].iov_len : 7;
    return pwrite(fd, iov[0].iov_base, len, off);
}

typedef struct fx { char *dir; mqd_store_t *st; mqd_plog_t *log; mqd_plog_config_t cfg; } fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    f->dir = tmpdir_in("/tmp");
    mqd_plog_config_default(&f->cfg);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    if (f->st)
        mqd_store_set_io(f->st, NULL);
    mqd_store_close(f->st);
    rm_rf(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static void fx_open(fx_t *f)
{
    assert_int_equal(mqd_store_open(f->dir, NULL, NULL, &f->st), 0);
    assert_int_equal(mqd_store_log_open(f->st, "t", 0, &f->cfg, &f->log), 0);
}

static void check_failed_then_reopen(fx_t *f, uint64_t good)
{
    assert_true(mqd_plog_failed(f->log));
    assert_int_equal(mqd_plog_stable_offset(f->log), good);
    assert_int_equal(mqd_plog_durable_offset(f->log), good);
    mqd_rec_in_t in = {"y", 1, 0, 0, 0};
    uint64_t off;
    assert_int_equal(mqd_plog_append(f->log, &in, 1, &off), MQD_EFAILED);
    assert_int_equal(mqd_plog_wait_stable(f->log, good + 1), MQD_EFAILED);
    /* Reads stay within what was synced. */
    assert_int_equal(read_check(f->log, 0, UINT64_MAX, SEED, 100, 100, 1 << 20), (long)good);
    mqd_store_set_io(f->st, NULL);
    mqd_store_close(f->st);
    fx_open(f);
    assert_false(mqd_plog_failed(f->log));
    assert_int_equal(mqd_plog_end_offset(f->log), good);
    assert_int_equal(read_check(f->log, 0, UINT64_MAX, SEED, 100, 100, 1 << 20), (long)good);
}

static void test_sync_eio(void **state)
{
    fx_t *f = *state;
    fx_open(f);
    assert_int_equal(append_n(f->st, f->log, 100, 10, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 100), 0);
    f->st->io.fdatasync = fail_fdatasync;
    assert_int_equal(append_n(f->st, f->log, 50, 50, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 150), MQD_EFAILED);
    assert_int_equal(sync_calls, 1); /* never retried */
    check_failed_then_reopen(f, 100);
}

static uint64_t cb_stable;
static int cb_calls;

static void on_stable(mqd_plog_t *log, uint64_t stable, void *arg)
{
    (void)log;
    (void)arg;
    cb_stable = stable;
    cb_calls++;
}

/* Owner side of a resume: waits (bounded) until the flusher finished it. */
static void wait_resumed(fx_t *f)
{
    for (int i = 0; i < 10000 && mqd_plog_resuming(f->log); i++)
        usleep(1000);
    assert_false(mqd_plog_resuming(f->log));
    mqd_store_dispatch(f->st);
}

static off_t seg0_size(fx_t *f)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/topics/t/0/%020u.log", f->dir, 0);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    return sb.st_size;
}

/* Issue 16 (5): a failed fdatasync fails the log, tells the owner through the stable
 * callback, cuts the unsynced bytes; a resume while syncs still fail keeps it failed,
 * one after they work truncates to the durable offset and takes appends again. */
static void test_sync_eio_resume(void **state)
{
    fx_t *f = *state;
    fx_open(f);
    mqd_plog_set_stable_cb(f->log, on_stable, NULL);
    assert_int_equal(append_n(f->st, f->log, 100, 10, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 100), 0);
    off_t good_size = seg0_size(f);
    mqd_store_dispatch(f->st);
    cb_calls = 0;
    f->st->io.fdatasync = fail_fdatasync;
    assert_int_equal(append_n(f->st, f->log, 50, 50, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 150), MQD_EFAILED);
    assert_int_equal(mqd_plog_fail_errno(f->log), EIO);
    mqd_store_dispatch(f->st);
    assert_int_equal(cb_calls, 1); /* the owner hears of the failure */
    assert_int_equal(cb_stable, 100);
    assert_int_equal(seg0_size(f), good_size); /* the unsynced records are gone */

    assert_int_equal(mqd_plog_resume(f->log), 0); /* syncs still fail: the probe too */
    wait_resumed(f);
    assert_true(mqd_plog_failed(f->log));

    mqd_store_set_io(f->st, NULL);
    assert_int_equal(mqd_plog_resume(f->log), 0);
    wait_resumed(f);
    assert_false(mqd_plog_failed(f->log));
    assert_int_equal(mqd_plog_fail_errno(f->log), 0);
    assert_int_equal(mqd_plog_end_offset(f->log), 100);
    assert_int_equal(seg0_size(f), good_size); /* the probe block was cut again */
    assert_int_equal(append_n(f->st, f->log, 50, 50, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 150), 0);
    assert_int_equal(read_check(f->log, 0, UINT64_MAX, SEED, 100, 100, 1 << 20), 150);
    mqd_store_close(f->st);
    fx_open(f);
    assert_int_equal(mqd_plog_end_offset(f->log), 150);
    assert_int_equal(read_check(f->log, 0, UINT64_MAX, SEED, 100, 100, 1 << 20), 150);
}

static void test_write_eio(void **state)
{
    fx_t *f = *state;
    fx_open(f);
    assert_int_equal(append_n(f->st, f->log, 100, 10, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 100), 0);
    f->st->io.pwritev = fail_pwritev;
    assert_int_equal(append_n(f->st, f->log, 50, 50, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 150), MQD_EFAILED);
    check_failed_then_reopen(f, 100);
}

static int slow_calls;

/* The first write is slow (batches queue behind it), every later one fails. */
static ssize_t slow_then_fail_pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
    if (__atomic_add_fetch(&slow_calls, 1, __ATOMIC_RELAXED) == 1) {
        usleep(300000);
        return pwritev(fd, iov, n, off);
    }
    errno = EIO;
    return -1;
}

/* A write error with more queued batches than one group (segment_bytes splits them):
 * the partition fails and every batch is returned to the pool (the ones after the failed
 * group were leaked: found by fuzz_conn; the sanitizer build's leak check sees it). */
static void test_write_eio_queued(void **state)
{
    fx_t *f = *state;
    f->cfg.segment_bytes = 4096;
    fx_open(f);
    slow_calls = 0;
    f->st->io.pwritev = slow_then_fail_pwritev;
    assert_int_equal(append_n(f->st, f->log, 1, 1, SEED, 3000, 0, 0), 0);
    usleep(50000); /* the flusher is in the slow write */
    assert_int_equal(append_n(f->st, f->log, 6, 1, SEED, 3000, 0, 0), 0); /* 6 batches */
    assert_int_equal(mqd_plog_wait_stable(f->log, 7), MQD_EFAILED);
    assert_true(mqd_plog_failed(f->log));
    assert_true(__atomic_load_n(&slow_calls, __ATOMIC_RELAXED) >= 2);
}

static void test_async_eio(void **state)
{
    fx_t *f = *state;
    f->cfg.flush = MQD_FLUSH_ASYNC;
    f->cfg.flush_interval_ms = 20;
    fx_open(f);
    assert_int_equal(append_n(f->st, f->log, 100, 10, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 100), 0);
    for (int i = 0; i < 300 && mqd_plog_durable_offset(f->log) < 100; i++)
        usleep(10000);
    assert_int_equal(mqd_plog_durable_offset(f->log), 100);
    f->st->io.fdatasync = fail_fdatasync;
    assert_int_equal(append_n(f->st, f->log, 50, 50, SEED, 100, 0, 0), 0);
    /* Page-cache stable first (async promise), then the interval sync fails. */
    for (int i = 0; i < 300 && !mqd_plog_failed(f->log); i++)
        usleep(10000);
    check_failed_then_reopen(f, 100);
}

/* flush_sync = syncfs: 8 partitions on 8 flushers, 20 rounds of a commit to each. Every
 * record becomes stable and durable and reads back; no fdatasync is made for a group
 * commit, and the flushers share syncfs calls (at most one per log per round). */
static void test_syncfs_shared(void **state)
{
    fx_t *f = *state;
    mqd_plog_t *logs[8];
    assert_int_equal(mqd_store_open_ex(f->dir, 8, NULL, NULL, &f->st), 0);
    mqd_store_set_syncfs(f->st, 1);
    for (uint32_t i = 0; i < 8; i++)
        assert_int_equal(mqd_store_log_open(f->st, "t", i, &f->cfg, &logs[i]), 0);
    f->log = logs[0];
    syncfs_calls = fdatasync_ok_calls = 0;
    f->st->io.syncfs = count_syncfs;
    f->st->io.fdatasync = fallback_fdatasync;
    for (int r = 0; r < 20; r++) {
        for (uint32_t i = 0; i < 8; i++)
            assert_int_equal(append_n(f->st, logs[i], 25, 25, SEED + i, 100, 0, 0), 0);
        for (uint32_t i = 0; i < 8; i++)
            assert_int_equal(mqd_plog_wait_stable(logs[i], (uint64_t)(r + 1) * 25), 0);
    }
    for (uint32_t i = 0; i < 8; i++) {
        assert_int_equal(mqd_plog_durable_offset(logs[i]), 500);
        assert_false(mqd_plog_failed(logs[i]));
        assert_int_equal(read_check(logs[i], 0, UINT64_MAX, SEED + i, 100, 100, 1 << 20), 500);
    }
    int calls = __atomic_load_n(&syncfs_calls, __ATOMIC_RELAXED);
    assert_true(calls >= 20 && calls <= 160);
    assert_int_equal(__atomic_load_n(&fdatasync_ok_calls, __ATOMIC_RELAXED), 0);
    print_message("syncfs calls for 160 group commits: %d\n", calls);
}

/* A failing syncfs (another file's error, say) falls back to the partition's own
 * fdatasync: the log stays healthy when that succeeds and fails when it does not. */
static void test_syncfs_error_falls_back(void **state)
{
    fx_t *f = *state;
    assert_int_equal(mqd_store_open(f->dir, NULL, NULL, &f->st), 0);
    mqd_store_set_syncfs(f->st, 1);
    assert_int_equal(mqd_store_log_open(f->st, "t", 0, &f->cfg, &f->log), 0);
    syncfs_calls = fdatasync_ok_calls = 0;
    f->st->io.syncfs = fail_syncfs;
    f->st->io.fdatasync = fallback_fdatasync;
    assert_int_equal(append_n(f->st, f->log, 100, 10, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 100), 0);
    assert_false(mqd_plog_failed(f->log));
    /* each failed syncfs was followed by the log's own fdatasync (checkpoints add more) */
    int sf = __atomic_load_n(&syncfs_calls, __ATOMIC_RELAXED);
    assert_true(sf >= 1);
    assert_true(__atomic_load_n(&fdatasync_ok_calls, __ATOMIC_RELAXED) >= sf);
    f->st->io.fdatasync = fail_fdatasync;
    assert_int_equal(append_n(f->st, f->log, 50, 50, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 150), MQD_EFAILED);
    check_failed_then_reopen(f, 100);
}

static void test_short_writes(void **state)
{
    fx_t *f = *state;
    fx_open(f);
    f->st->io.pwritev = short_pwritev;
    assert_int_equal(append_n(f->st, f->log, 300, 30, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 300), 0);
    mqd_store_set_io(f->st, NULL);
    assert_false(mqd_plog_failed(f->log));
    assert_int_equal(read_check(f->log, 0, UINT64_MAX, SEED, 100, 100, 1 << 20), 300);
}

/* ---- clean restarts write nothing; fds; many partitions ---- */

static int n_sync, n_pwrite, n_trunc, n_fsync;

static int count_fdatasync(int fd)
{
    __atomic_add_fetch(&n_sync, 1, __ATOMIC_RELAXED);
    return fdatasync(fd);
}

static int count_fsync(int fd)
{
    __atomic_add_fetch(&n_fsync, 1, __ATOMIC_RELAXED);
    return fsync(fd);
}

static ssize_t count_pwrite(int fd, const void *b, size_t n, off_t off)
{
    __atomic_add_fetch(&n_pwrite, 1, __ATOMIC_RELAXED);
    return pwrite(fd, b, n, off);
}

static int count_ftruncate(int fd, off_t len)
{
    __atomic_add_fetch(&n_trunc, 1, __ATOMIC_RELAXED);
    return ftruncate(fd, len);
}

/* st's table counts; set before its logs open, so recovery's I/O is counted too. */
static void counting_io(mqd_store_t *st)
{
    n_sync = n_pwrite = n_trunc = n_fsync = 0;
    st->io.fdatasync = count_fdatasync;
    st->io.fsync = count_fsync;
    st->io.pwrite = count_pwrite;
    st->io.ftruncate = count_ftruncate;
}

static int count_open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

#define NPART 64

/* After a clean close, reopening 64 partitions (two segments each, indexes and
 * checkpoints in place) issues no fdatasync, fsync, pwrite or ftruncate, keeps one fd per
 * segment, and an idle store then writes nothing either (no checkpoint rewrite). */
static void test_clean_reopen_is_read_only(void **state)
{
    fx_t *f = *state;
    f->cfg.segment_bytes = 8192;
    f->cfg.index_interval_bytes = 256;
    assert_int_equal(mqd_store_open(f->dir, NULL, NULL, &f->st), 0);
    mqd_plog_t *logs[NPART];
    for (uint32_t p = 0; p < NPART; p++) {
        assert_int_equal(mqd_store_log_open(f->st, "many", p, &f->cfg, &logs[p]), 0);
        assert_int_equal(append_n(f->st, logs[p], 150, 50, SEED + p, 100, 0, 0), 0);
    }
    for (uint32_t p = 0; p < NPART; p++)
        assert_int_equal(mqd_plog_wait_stable(logs[p], 150), 0);
    char pdir[256];
    snprintf(pdir, sizeof pdir, "%.200s/topics/many/0", f->dir);
    int nseg = count_files(pdir, "log");
    assert_true(nseg >= 2);
    mqd_store_close(f->st);

    int fds0 = count_open_fds();
    assert_int_equal(mqd_store_open(f->dir, NULL, NULL, &f->st), 0);
    counting_io(f->st);
    for (uint32_t p = 0; p < NPART; p++) {
        assert_int_equal(mqd_store_log_open(f->st, "many", p, &f->cfg, &logs[p]), 0);
        assert_int_equal(mqd_plog_end_offset(logs[p]), 150);
        assert_false(mqd_plog_unhealthy(logs[p]));
    }
    assert_int_equal(n_sync, 0);
    assert_int_equal(n_fsync, 0);
    assert_int_equal(n_pwrite, 0);
    assert_int_equal(n_trunc, 0);
    /* no segment descriptor stays open after recovery (fdlru.c: opened on use), only
     * the store's own (it used to be one .log fd per segment: NPART * nseg) */
    int fds = count_open_fds() - fds0;
    assert_true(fds <= 4);
    mqd_store_fd_stats_t fs;
    mqd_store_fd_stats(f->st, &fs);
    assert_int_equal(fs.open, 0);
    usleep(100 * 1000); /* five timed passes of the flusher */
    assert_int_equal(n_sync + n_fsync + n_pwrite + n_trunc, 0);
    for (uint32_t p = 0; p < NPART; p++) {
        assert_ptr_equal(mqd_store_log_find(f->st, "many", p), logs[p]);
        assert_int_equal(read_check(logs[p], 0, UINT64_MAX, SEED + p, 100, 200, 1 << 20), 150);
    }
    assert_null(mqd_store_log_find(f->st, "many", NPART));
    assert_null(mqd_store_log_find(f->st, "other", 0));
    /* Appends after the clean reopen continue and survive the next one. */
    assert_int_equal(append_n(f->st, logs[7], 10, 5, SEED + 7, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(logs[7], 160), 0);
    assert_true(n_sync > 0);
    mqd_store_set_io(f->st, NULL);
    mqd_store_close(f->st);
    assert_int_equal(mqd_store_open(f->dir, NULL, NULL, &f->st), 0);
    assert_int_equal(mqd_store_log_open(f->st, "many", 7, &f->cfg, &f->log), 0);
    assert_int_equal(read_check(f->log, 0, UINT64_MAX, SEED + 7, 100, 200, 1 << 20), 160);
    assert_int_equal(mqd_store_drop_topic(f->st, "many"), 0);
    assert_null(mqd_store_log_find(f->st, "many", 7));
}

/* A restart without a clean close (records after the last checkpoint, possibly only in
 * the page cache) still syncs the tail before calling it stable. */
static void test_unclean_reopen_syncs(void **state)
{
    fx_t *f = *state;
    fx_open(f);
    assert_int_equal(append_n(f->st, f->log, 20, 5, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 20), 0);
    mqd_store_close(f->st);
    /* No checkpoint: recovery cannot know the file was synced. */
    char p[4096];
    snprintf(p, sizeof p, "%s/topics/t/0/recovery.ckpt", f->dir);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mqd_store_open(f->dir, NULL, NULL, &f->st), 0);
    counting_io(f->st);
    mqd_store_warm(f->st); /* read-ahead threads racing the open change nothing */
    mqd_store_warm(f->st);
    assert_int_equal(mqd_store_log_open(f->st, "t", 0, &f->cfg, &f->log), 0);
    assert_true(n_sync >= 1);
    assert_int_equal(mqd_plog_end_offset(f->log), 20);
    assert_int_equal(read_check(f->log, 0, UINT64_MAX, SEED, 100, 50, 1 << 20), 20);
    /* and the flusher writes a fresh checkpoint soon */
    for (int i = 0; i < 200 && access(p, F_OK) != 0; i++)
        usleep(10 * 1000);
    assert_int_equal(access(p, F_OK), 0);
}

/* The periodic checkpoint of a busy log is a hint written in place without a sync (a
 * lost or torn one only lengthens the next recovery's scan), once the file exists: the
 * first one makes a new file, so it is written the synced way (temp, fdatasync, rename,
 * directory fsync: its name is durable). A clean close still writes it durably, so the
 * next open is clean. */
static uint64_t ckpt_off(const char *path)
{
    uint8_t b[36];
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return UINT64_MAX;
    ssize_t n = pread(fd, b, sizeof b, 0);
    close(fd);
    uint64_t off;
    memcpy(&off, b + 24, 8);
    return n == (ssize_t)sizeof b ? off : UINT64_MAX;
}

static void test_periodic_ckpt_is_a_hint(void **state)
{
    fx_t *f = *state;
    char p[4096];
    snprintf(p, sizeof p, "%s/topics/t/0/recovery.ckpt", f->dir);
    fx_open(f);
    assert_int_equal(append_n(f->st, f->log, 10, 5, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 10), 0);
    counting_io(f->st); /* from here on: the timed pass's first checkpoint only */
    for (int i = 0; i < 400 && ckpt_off(p) != 10; i++)
        usleep(10 * 1000);
    assert_int_equal(ckpt_off(p), 10);
    usleep(50 * 1000);
    assert_true(n_sync >= 1);  /* a new file: written synced... */
    assert_true(n_fsync >= 1); /* ...and its name */
    assert_int_equal(append_n(f->st, f->log, 10, 5, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 20), 0);
    counting_io(f->st); /* from here on: the timed pass's next checkpoint only */
    for (int i = 0; i < 400 && ckpt_off(p) != 20; i++)
        usleep(10 * 1000);
    assert_int_equal(ckpt_off(p), 20);
    usleep(50 * 1000);
    assert_int_equal(n_sync, 0);
    assert_int_equal(n_fsync, 0);
    assert_true(n_pwrite >= 1);
    mqd_store_close(f->st);
    f->st = NULL;
    assert_true(n_sync >= 1); /* the close made it durable */
    assert_true(n_fsync >= 1);
    assert_int_equal(mqd_store_open(f->dir, NULL, NULL, &f->st), 0);
    assert_int_equal(mqd_store_log_open(f->st, "t", 0, &f->cfg, &f->log), 0);
    assert_int_equal(f->log->ckpt_clean, 1);
    assert_int_equal(read_check(f->log, 0, UINT64_MAX, SEED, 100, 50, 1 << 20), 20);
}

/* Nice value of this process's thread named `comm` (INT_MIN: none such). */
static int thread_nice(const char *comm)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    struct dirent *e;
    int nice = INT_MIN;
    while ((e = readdir(d)) && nice == INT_MIN) {
        char p[300], name[64] = "", st[1024];
        snprintf(p, sizeof p, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(p, "r");
        if (!f)
            continue;
        if (!fgets(name, sizeof name, f))
            name[0] = 0;
        fclose(f);
        name[strcspn(name, "\n")] = 0;
        if (strcmp(name, comm) != 0)
            continue;
        snprintf(p, sizeof p, "/proc/self/task/%s/stat", e->d_name);
        f = fopen(p, "r");
        assert_non_null(f);
        assert_non_null(fgets(st, sizeof st, f));
        fclose(f);
        const char *q = strrchr(st, ')'); /* fields after comm: state is field 3, nice 19 */
        for (int field = 2; q && field < 19; field++)
            q = strchr(q + 1, ' ');
        assert_non_null(q);
        nice = atoi(q + 1);
    }
    closedir(d);
    return nice;
}

/* flush_priority_boost: the flusher threads (named mqd-flushN) run that many nice levels
 * above the process when it may raise a priority (root here), else at its own. */
static void test_flush_boost(void **state)
{
    fx_t *f = *state;
    fx_open(f);
    int base = getpriority(PRIO_PROCESS, 0);
    mqd_store_set_flush_boost(f->st, 5);
    assert_int_equal(append_n(f->st, f->log, 10, 5, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 10), 0);
    int want = geteuid() == 0 ? base - 5 : base, got = INT_MIN;
    for (int i = 0; i < 200 && (got = thread_nice("mqd-flush0")) != want; i++)
        usleep(5000);
    assert_int_equal(got, want);
    mqd_store_set_flush_boost(f->st, 0);
    for (int i = 0; i < 200 && (got = thread_nice("mqd-flush0")) != base; i++)
        usleep(5000);
    if (geteuid() == 0)
        assert_int_equal(got, base);
    assert_int_equal(getpriority(PRIO_PROCESS, 0), base); /* this thread is untouched */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sync_eio, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_eio, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sync_eio_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_eio_queued, setup, teardown),
        cmocka_unit_test_setup_teardown(test_async_eio, setup, teardown),
        cmocka_unit_test_setup_teardown(test_short_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_syncfs_shared, setup, teardown),
        cmocka_unit_test_setup_teardown(test_syncfs_error_falls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clean_reopen_is_read_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unclean_reopen_syncs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_periodic_ckpt_is_a_hint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flush_boost, setup, teardown),
    };
    mqd_log_set_level(MQD_LOG_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
