/* I/O error injection through the store_io seam: an fdatasync or write error fails the
 * partition for good and nothing unsynced is ever reported stable or survives reopen. */
#include "config.h"
#include "store/store.h"
#include "store/store_int.h"
#include "util/util.h"

#include <errno.h>
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
    mqd_store_io_reset();
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
    mqd_store_io_reset();
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
    mqd_store_io.fdatasync = fail_fdatasync;
    assert_int_equal(append_n(f->st, f->log, 50, 50, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 150), MQD_EFAILED);
    assert_int_equal(sync_calls, 1); /* never retried */
    check_failed_then_reopen(f, 100);
}

static void test_write_eio(void **state)
{
    fx_t *f = *state;
    fx_open(f);
    assert_int_equal(append_n(f->st, f->log, 100, 10, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 100), 0);
    mqd_store_io.pwritev = fail_pwritev;
    assert_int_equal(append_n(f->st, f->log, 50, 50, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 150), MQD_EFAILED);
    check_failed_then_reopen(f, 100);
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
    mqd_store_io.fdatasync = fail_fdatasync;
    assert_int_equal(append_n(f->st, f->log, 50, 50, SEED, 100, 0, 0), 0);
    /* Page-cache stable first (async promise), then the interval sync fails. */
    for (int i = 0; i < 300 && !mqd_plog_failed(f->log); i++)
        usleep(10000);
    check_failed_then_reopen(f, 100);
}

static void test_short_writes(void **state)
{
    fx_t *f = *state;
    fx_open(f);
    mqd_store_io.pwritev = short_pwritev;
    assert_int_equal(append_n(f->st, f->log, 300, 30, SEED, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, 300), 0);
    mqd_store_io_reset();
    assert_false(mqd_plog_failed(f->log));
    assert_int_equal(read_check(f->log, 0, UINT64_MAX, SEED, 100, 100, 1 << 20), 300);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sync_eio, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_eio, setup, teardown),
        cmocka_unit_test_setup_teardown(test_async_eio, setup, teardown),
        cmocka_unit_test_setup_teardown(test_short_writes, setup, teardown),
    };
    mqd_log_set_level(MQD_LOG_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
