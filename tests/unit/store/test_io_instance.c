/* Each store has its own I/O table (mqd_store_set_io) and cold-read table: two stores in
 * one process (a leader and a follower, in replication tests) run with different faults,
 * and a fault injected into one leaves the other untouched. Real files, real fsync. */
#include "config.h"
#include "store/store.h"
#include "store/store_int.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "store_test.h"

#define SEED_A 0xa11ceu
#define SEED_B 0xb0bu

static int fail_calls, b_syncs, b_writes, short_calls;

static int fail_fdatasync(int fd)
{
    (void)fd;
    __atomic_add_fetch(&fail_calls, 1, __ATOMIC_RELAXED);
    errno = EIO;
    return -1;
}

static int count_fdatasync(int fd)
{
    __atomic_add_fetch(&b_syncs, 1, __ATOMIC_RELAXED);
    return fdatasync(fd);
}

static ssize_t count_pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
    __atomic_add_fetch(&b_writes, 1, __ATOMIC_RELAXED);
    return pwritev(fd, iov, n, off);
}

/* At most 7 bytes per call: the flusher must loop. */
static ssize_t short_pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
    (void)n;
    __atomic_add_fetch(&short_calls, 1, __ATOMIC_RELAXED);
    size_t len = iov[0].iov_len < 7 ? iov[0].iov_len : 7;
    return pwrite(fd, iov[0].iov_base, len, off);
}

typedef struct side { char *dir; mqd_store_t *st; mqd_plog_t *log; } side_t;
typedef struct fx { side_t a, b; mqd_plog_config_t cfg; } fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    f->a.dir = tmpdir_in("/tmp");
    f->b.dir = tmpdir_in("/tmp");
    mqd_plog_config_default(&f->cfg);
    fail_calls = b_syncs = b_writes = short_calls = 0;
    *state = f;
    return 0;
}

static void side_close(side_t *s)
{
    mqd_store_close(s->st);
    s->st = NULL;
    s->log = NULL;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    side_t *sides[] = {&f->a, &f->b};
    for (size_t i = 0; i < 2; i++) {
        side_close(sides[i]);
        rm_rf(sides[i]->dir);
        free(sides[i]->dir);
    }
    free(f);
    return 0;
}

static void side_open(fx_t *f, side_t *s, const mqd_store_io_t *io)
{
    assert_int_equal(mqd_store_open(s->dir, NULL, NULL, &s->st), 0);
    mqd_store_set_io(s->st, io);
    assert_int_equal(mqd_store_log_open(s->st, "t", 0, &f->cfg, &s->log), 0);
}

/* A's fdatasync fails: A fails and fences at 100 as a lone store would; B, open in the
 * same process with its own (counting) table, takes the same appends, makes all of them
 * stable, and never calls A's failing sync. */
static void test_fsync_fault_stays_in_its_store(void **state)
{
    fx_t *f = *state;
    mqd_store_io_t bio;
    mqd_store_io_default(&bio);
    bio.fdatasync = count_fdatasync;
    bio.pwritev = count_pwritev;
    side_open(f, &f->a, NULL);
    side_open(f, &f->b, &bio);
    assert_int_equal(append_n(f->a.st, f->a.log, 100, 10, SEED_A, 100, 0, 0), 0);
    assert_int_equal(append_n(f->b.st, f->b.log, 100, 10, SEED_B, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->a.log, 100), 0);
    assert_int_equal(mqd_plog_wait_stable(f->b.log, 100), 0);
    int b_syncs0 = __atomic_load_n(&b_syncs, __ATOMIC_RELAXED);
    assert_true(b_syncs0 >= 1);
    assert_true(__atomic_load_n(&b_writes, __ATOMIC_RELAXED) >= 1);

    mqd_store_io_t aio;
    mqd_store_io_default(&aio);
    aio.fdatasync = fail_fdatasync;
    mqd_store_set_io(f->a.st, &aio); /* A's flusher is idle: everything is stable */
    assert_int_equal(append_n(f->a.st, f->a.log, 50, 50, SEED_A, 100, 0, 0), 0);
    assert_int_equal(append_n(f->b.st, f->b.log, 50, 50, SEED_B, 100, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->a.log, 150), MQD_EFAILED);
    assert_int_equal(mqd_plog_wait_stable(f->b.log, 150), 0);

    assert_int_equal(fail_calls, 1); /* A's one sync, never retried; none of B's */
    assert_true(__atomic_load_n(&b_syncs, __ATOMIC_RELAXED) > b_syncs0);
    assert_true(mqd_plog_failed(f->a.log));
    assert_int_equal(mqd_plog_fail_errno(f->a.log), EIO);
    assert_int_equal(mqd_plog_stable_offset(f->a.log), 100);
    assert_int_equal(mqd_plog_durable_offset(f->a.log), 100);
    mqd_rec_in_t in = {"y", 1, 0, 0, 0};
    uint64_t off;
    assert_int_equal(mqd_plog_append(f->a.log, &in, 1, &off), MQD_EFAILED);
    assert_int_equal(read_check(f->a.log, 0, UINT64_MAX, SEED_A, 100, 100, 1 << 20), 100);

    assert_false(mqd_plog_failed(f->b.log));
    assert_int_equal(mqd_plog_fail_errno(f->b.log), 0);
    assert_int_equal(mqd_plog_stable_offset(f->b.log), 150);
    assert_int_equal(mqd_plog_durable_offset(f->b.log), 150);
    assert_int_equal(mqd_plog_append(f->b.log, &in, 1, &off), 0);
    assert_int_equal(off, 150);
    assert_int_equal(mqd_plog_wait_stable(f->b.log, 151), 0);
    assert_int_equal(read_check(f->b.log, 0, 150, SEED_B, 100, 100, 1 << 20), 150);

    /* Reopened with the real calls, A has exactly its synced 100, B all 151. */
    side_close(&f->a);
    side_close(&f->b);
    side_open(f, &f->a, NULL);
    side_open(f, &f->b, NULL);
    assert_false(mqd_plog_failed(f->a.log));
    assert_int_equal(mqd_plog_end_offset(f->a.log), 100);
    assert_int_equal(read_check(f->a.log, 0, UINT64_MAX, SEED_A, 100, 100, 1 << 20), 100);
    assert_int_equal(mqd_plog_end_offset(f->b.log), 151);
    assert_int_equal(read_check(f->b.log, 0, 150, SEED_B, 100, 100, 1 << 20), 150);
}

/* A writes 7 bytes per pwritev; B writes with the real call. Both end with every record,
 * and only A's writes went through the short writer. */
static void test_short_write_in_one_store(void **state)
{
    fx_t *f = *state;
    mqd_store_io_t aio;
    mqd_store_io_default(&aio);
    aio.pwritev = short_pwritev;
    side_open(f, &f->a, &aio);
    side_open(f, &f->b, NULL);
    assert_int_equal(append_n(f->b.st, f->b.log, 200, 20, SEED_B, 300, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->b.log, 200), 0);
    assert_int_equal(short_calls, 0); /* B never used A's table */
    assert_int_equal(append_n(f->a.st, f->a.log, 200, 20, SEED_A, 300, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->a.log, 200), 0);
    uint64_t a_bytes = mqd_plog_size_bytes(f->a.log);
    assert_true(a_bytes > 200 * 40);
    /* every byte of A's records came in pieces of at most 7 */
    assert_true((uint64_t)short_calls >= a_bytes / 7);
    assert_int_equal(read_check(f->a.log, 0, UINT64_MAX, SEED_A, 300, 300, 1 << 20), 200);
    assert_int_equal(read_check(f->b.log, 0, UINT64_MAX, SEED_B, 300, 300, 1 << 20), 200);
    side_close(&f->a);
    side_open(f, &f->a, NULL);
    assert_int_equal(mqd_plog_end_offset(f->a.log), 200);
    assert_int_equal(read_check(f->a.log, 0, UINT64_MAX, SEED_A, 300, 300, 1 << 20), 200);
}

static ssize_t count_pread(int fd, void *buf, size_t n, off_t off)
{
    return pread(fd, buf, n, off);
}

/* The cold-read table is per store too: setting A's leaves B's the default. */
static void test_cold_table_per_store(void **state)
{
    fx_t *f = *state;
    side_open(f, &f->a, NULL);
    side_open(f, &f->b, NULL);
    store_cold_io_t def, cio, a, b;
    store_cold_get_io(f->a.st, &def);
    assert_ptr_equal(def.pread, pread);
    cio = def;
    cio.pread = count_pread;
    store_cold_set_io(f->a.st, &cio);
    store_cold_get_io(f->a.st, &a);
    store_cold_get_io(f->b.st, &b);
    assert_ptr_equal(a.pread, count_pread);
    assert_ptr_equal(b.pread, pread);
    assert_ptr_equal(b.preadv2, def.preadv2);
    assert_ptr_equal(b.cached, def.cached);
    store_cold_set_io(f->a.st, NULL);
    store_cold_get_io(f->a.st, &a);
    assert_ptr_equal(a.pread, pread);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fsync_fault_stays_in_its_store, setup, teardown),
        cmocka_unit_test_setup_teardown(test_short_write_in_one_store, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cold_table_per_store, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
