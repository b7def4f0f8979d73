/* mqd_plog_reset (reset.c): a log emptied and restarted at a later offset, as a follower
 * that fell behind its leader's retention does. Real files and fsync under /tmp; the
 * crash cases put the directory in the states a power cut can leave and reopen it. */
#include "config.h"
#include "store/store.h"
#include "store/store_int.h"
#include "util/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "store_test.h"

#define SEED 0x7e5e7001u

typedef struct fx {
    char *dir;
    char pdir[512];
    mqd_store_t *st;
    mqd_plog_t *log;
    mqd_plog_config_t cfg;
} fx_t;

static int wakes;

static void on_wake(void *arg)
{
    (void)arg;
    __atomic_add_fetch(&wakes, 1, __ATOMIC_RELAXED);
}

static void fx_open(fx_t *f)
{
    assert_int_equal(mqd_store_open(f->dir, on_wake, NULL, &f->st), 0);
    assert_int_equal(mqd_store_log_open(f->st, "t", 0, &f->cfg, &f->log), 0);
    snprintf(f->pdir, sizeof f->pdir, "%s/topics/t/0", f->dir);
}

static void fx_reopen(fx_t *f)
{
    mqd_store_close(f->st);
    fx_open(f);
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    f->dir = tmpdir_in("/tmp");
    mqd_plog_config_default(&f->cfg);
    f->cfg.segment_bytes = 4096;
    f->cfg.index_interval_bytes = 256;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    mqd_store_close(f->st);
    rm_rf(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static int cb_calls, cb_rc;
static uint64_t cb_end;

static void on_reset(mqd_plog_t *log, uint64_t end, int rc, void *arg)
{
    assert_ptr_equal(arg, log);
    cb_calls++;
    cb_end = end;
    cb_rc = rc;
}

static int file_exists(const char *dir, const char *name)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* Fills the log with 600 records over several segments. */
static void fill(fx_t *f)
{
    assert_int_equal(append_n(f->st, f->log, 600, 10, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 600), 0);
    assert_true(count_files(f->pdir, "log") > 3);
}

static void test_reset_forward(void **state)
{
    fx_t *f = *state;
    fx_open(f);
    fill(f);
    assert_int_equal(mqd_plog_reset(f->log, 599, on_reset, f->log), MQD_ERANGE);
    cb_calls = 0;
    assert_int_equal(mqd_plog_reset(f->log, 5000, on_reset, f->log), 0);
    assert_true(mqd_plog_truncating(f->log));
    assert_int_equal(mqd_plog_reset(f->log, 6000, on_reset, f->log), MQD_EAGAIN);
    uint64_t first;
    assert_int_equal(append_n(f->st, f->log, 1, 1, SEED, 100, 0, 0), MQD_EAGAIN);
    for (int i = 0; i < 1000 && cb_calls == 0; i++) {
        usleep(5000);
        mqd_store_dispatch(f->st);
    }
    assert_int_equal(cb_calls, 1);
    assert_int_equal(cb_rc, 0);
    assert_int_equal(cb_end, 5000);
    assert_false(mqd_plog_truncating(f->log));
    assert_int_equal(mqd_plog_start_offset(f->log), 5000);
    assert_int_equal(mqd_plog_end_offset(f->log), 5000);
    assert_int_equal(mqd_plog_stable_offset(f->log), 5000);
    assert_int_equal(mqd_plog_durable_offset(f->log), 5000);
    assert_int_equal(count_files(f->pdir, "log"), 1);
    assert_int_equal(count_files(f->pdir, "idx"), 1);
    assert_true(file_exists(f->pdir, "00000000000000005000.log"));
    assert_false(file_exists(f->pdir, "reset.mark"));
    assert_int_equal(mqd_plog_size_bytes(f->log), 0);
    /* records continue at 5000, raw ones with their continuity check too */
    assert_int_equal(append_n(f->st, f->log, 40, 10, SEED + 1, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 5040), 0);
    assert_int_equal(read_check(f->log, 5000, UINT64_MAX, SEED + 1, 100, 100, 1 << 20), 40);
    uint8_t buf[1 << 16];
    size_t len = 0;
    uint64_t next;
    assert_int_equal(mqd_plog_read_raw(f->log, 5000, buf, sizeof buf, &len, &next), 0);
    assert_true(next > 5000);
    assert_int_equal(mqd_plog_append_raw(f->log, buf, len, &first), MQD_ERANGE);
    /* reopen: the reset and what followed it survive */
    fx_reopen(f);
    assert_int_equal(mqd_plog_start_offset(f->log), 5000);
    assert_int_equal(mqd_plog_end_offset(f->log), 5040);
    assert_int_equal(read_check(f->log, 5000, UINT64_MAX, SEED + 1, 100, 100, 1 << 20), 40);
    assert_int_equal(count_files(f->pdir, "log"), 1);
}

/* An empty log reset to its own end, then one a follower takes at offset 0: both no-ops
 * in content, the second still a fresh segment. */
static void test_reset_at_end(void **state)
{
    fx_t *f = *state;
    fx_open(f);
    fill(f);
    cb_calls = 0;
    assert_int_equal(mqd_plog_reset(f->log, 600, on_reset, f->log), 0);
    for (int i = 0; i < 1000 && cb_calls == 0; i++) {
        usleep(5000);
        mqd_store_dispatch(f->st);
    }
    assert_int_equal(cb_calls, 1);
    assert_int_equal(mqd_plog_start_offset(f->log), 600);
    assert_int_equal(mqd_plog_end_offset(f->log), 600);
    assert_int_equal(count_files(f->pdir, "log"), 1);
    assert_true(file_exists(f->pdir, "00000000000000000600.log"));
}

static void put_mark(const char *pdir, uint64_t start, int torn)
{
    uint8_t b[16];
    uint32_t magic = 0x5453524du;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &start, 8);
    uint32_t crc = mqd_crc32c(0, b, 12) ^ (uint32_t)torn;
    memcpy(b + 12, &crc, 4);
    char p[700];
    snprintf(p, sizeof p, "%s/reset.mark", pdir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b, sizeof b), (ssize_t)sizeof b);
    close(fd);
}

/* A power cut after the marker was durable, before (or while) the old segments went:
 * the next open finishes the reset, so no old segment stays beside the new start. */
static void test_crash_after_mark(void **state)
{
    fx_t *f = *state;
    fx_open(f);
    fill(f);
    mqd_store_close(f->st);
    f->st = NULL;
    put_mark(f->pdir, 9000, 0);
    char p[700];
    snprintf(p, sizeof p, "%s/00000000000000009000.log", f->pdir); /* half made */
    close(open(p, O_WRONLY | O_CREAT, 0644));
    fx_open(f);
    assert_int_equal(mqd_plog_start_offset(f->log), 9000);
    assert_int_equal(mqd_plog_end_offset(f->log), 9000);
    assert_false(mqd_plog_unhealthy(f->log));
    assert_int_equal(count_files(f->pdir, "log"), 1);
    assert_false(file_exists(f->pdir, "reset.mark"));
    assert_int_equal(append_n(f->st, f->log, 10, 10, SEED + 2, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 9010), 0);
    fx_reopen(f);
    assert_int_equal(read_check(f->log, 9000, UINT64_MAX, SEED + 2, 100, 100, 1 << 20), 10);
}

/* A torn marker (its rename is what makes it count, so a bad CRC means the reset never
 * began): the old log is kept whole. */
static void test_torn_mark(void **state)
{
    fx_t *f = *state;
    fx_open(f);
    fill(f);
    int segs = count_files(f->pdir, "log");
    mqd_store_close(f->st);
    f->st = NULL;
    put_mark(f->pdir, 9000, 1);
    fx_open(f);
    assert_int_equal(mqd_plog_start_offset(f->log), 0);
    assert_int_equal(mqd_plog_end_offset(f->log), 600);
    assert_int_equal(count_files(f->pdir, "log"), segs);
    assert_int_equal(read_check(f->log, 0, UINT64_MAX, SEED, 100, 100, 1 << 20), 600);
}

/* I/O error at each write or sync the reset makes, one at a time (through the store's
 * I/O table): every such point is also where a power cut could stop it, and the files
 * are what that point left. The reset reports the error and the log fails; a reopen
 * with working I/O then shows the old log whole or the new empty one, nothing else. */
static int io_calls, io_fail_at;

static int step(void)
{
    return __atomic_add_fetch(&io_calls, 1, __ATOMIC_RELAXED) == io_fail_at;
}

static ssize_t step_pwrite(int fd, const void *b, size_t n, off_t off)
{
    if (step()) {
        errno = EIO;
        return -1;
    }
    return pwrite(fd, b, n, off);
}

static int step_fdatasync(int fd)
{
    if (step()) {
        errno = EIO;
        return -1;
    }
    return fdatasync(fd);
}

static int step_fsync(int fd)
{
    if (step()) {
        errno = EIO;
        return -1;
    }
    return fsync(fd);
}

static void test_fail_each_step(void **state)
{
    fx_t *f = *state;
    int old_logs = 0, new_logs = 0, k;
    for (k = 1; k < 40; k++) {
        fx_open(f);
        fill(f);
        mqd_store_io_t io;
        mqd_store_io_default(&io);
        io.pwrite = step_pwrite;
        io.fdatasync = step_fdatasync;
        io.fsync = step_fsync;
        __atomic_store_n(&io_calls, 0, __ATOMIC_RELAXED);
        io_fail_at = k;
        mqd_store_set_io(f->st, &io);
        cb_calls = 0;
        assert_int_equal(mqd_plog_reset(f->log, 5000, on_reset, f->log), 0);
        for (int i = 0; i < 1000 && cb_calls == 0; i++) {
            usleep(5000);
            mqd_store_dispatch(f->st);
        }
        assert_int_equal(cb_calls, 1);
        int done = cb_rc == 0;
        assert_true(done || mqd_plog_failed(f->log));
        io_fail_at = 0;
        mqd_store_close(f->st);
        f->st = NULL;
        fx_open(f);
        assert_false(mqd_plog_unhealthy(f->log));
        if (mqd_plog_start_offset(f->log) == 0) {
            assert_int_equal(mqd_plog_end_offset(f->log), 600);
            assert_int_equal(read_check(f->log, 0, UINT64_MAX, SEED, 100, 100, 1 << 20), 600);
            old_logs++;
        } else {
            assert_int_equal(mqd_plog_start_offset(f->log), 5000);
            assert_int_equal(mqd_plog_end_offset(f->log), 5000);
            assert_int_equal(count_files(f->pdir, "log"), 1);
            assert_false(file_exists(f->pdir, "reset.mark"));
            new_logs++;
        }
        mqd_store_close(f->st);
        f->st = NULL;
        rm_rf(f->dir);
        assert_int_equal(mkdir(f->dir, 0700), 0);
        if (done)
            break;
    }
    print_message("reset: %d I/O steps; failed at each: %d reopened old, %d new\n", k - 1, old_logs,
                  new_logs - 1);
    assert_true(k > 3 && k < 40);
    assert_true(old_logs >= 2 && new_logs >= 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reset_forward, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reset_at_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_after_mark, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_mark, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fail_each_step, setup, teardown),
    };
    mqd_log_set_level(MQD_LOG_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
