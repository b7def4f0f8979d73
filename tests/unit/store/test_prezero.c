/* Pre-zeroed segment tails (prezero.c): zeros are written and synced ahead of a written
 * flush=sync log's tail, never over its records; a roll, a clean close and a truncation
 * cut them; a crash image (files copied while zeros lie ahead) recovers every record
 * with the zeros cut quietly, never as damage. Real files and fsync under /tmp. */
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
#include <sys/stat.h>
#include <time.h>
#include <cmocka.h>

#include "store_test.h"

#define SEED 0x2e705u
#define MAXLEN 2048u

typedef struct fx {
    char *dir, *copy;
    mqd_store_t *st;
    mqd_plog_t *log;
    mqd_plog_config_t cfg;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    f->dir = tmpdir_in("/tmp");
    f->copy = tmpdir_in("/tmp");
    mqd_plog_config_default(&f->cfg);
    *state = f;
    return 0;
}

/* The I/O table every store a test opens gets (NULL: the libc calls). */
static const mqd_store_io_t *test_io;

static int teardown(void **state)
{
    fx_t *f = *state;
    mqd_store_close(f->st);
    test_io = NULL;
    rm_rf(f->dir);
    rm_rf(f->copy);
    free(f->dir);
    free(f->copy);
    free(f);
    return 0;
}

static void open_at(fx_t *f, const char *dir, uint64_t window)
{
    assert_int_equal(mqd_store_open(dir, NULL, NULL, &f->st), 0);
    mqd_store_set_io(f->st, test_io);
    mqd_store_set_prezero(f->st, window);
    assert_int_equal(mqd_store_log_open(f->st, "t", 0, &f->cfg, &f->log), 0);
    assert_false(mqd_plog_unhealthy(f->log));
}

static void reopen_at(fx_t *f, const char *dir, uint64_t window)
{
    mqd_store_close(f->st);
    f->st = NULL;
    open_at(f, dir, window);
}

/* Appends n records, `per` a commit, and waits until they are stable. */
static void put(fx_t *f, size_t n, size_t per)
{
    uint64_t end = mqd_plog_end_offset(f->log) + n;
    assert_int_equal(append_n(f->st, f->log, n, per, SEED, MAXLEN, 0, 0), 0);
    assert_int_equal(mqd_plog_wait_stable(f->log, end), 0);
}

/* By path: a segment not in use has no descriptor open (fdlru.c). */
static off_t seg_file_size(const mqd_plog_t *log, const seg_t *s)
{
    char p[700];
    struct stat sb;
    seg_path(log, s->base, "log", p, sizeof p);
    assert_int_equal(stat(p, &sb), 0);
    return sb.st_size;
}

/* Whether [from, to) of fd reads as zeros. */
static bool zeros(int fd, uint64_t from, uint64_t to)
{
    static uint8_t buf[1 << 16];
    while (from < to) {
        size_t n = to - from < sizeof buf ? (size_t)(to - from) : sizeof buf;
        ssize_t got = pread(fd, buf, n, (off_t)from);
        if (got <= 0)
            return false;
        for (ssize_t i = 0; i < got; i++)
            if (buf[i])
                return false;
        from += (uint64_t)got;
    }
    return true;
}

/* Waits (5 s at most) until the zeroer has nothing queued or in progress for log. */
/* Idle: no new piece for 200 ms in a row. The zeroer rests between pieces as long as the
 * last one took, so a 1 ms quiet spell (the old check) passed between two pieces on a
 * loaded machine, with less than the window zeroed. */
static void zero_idle(fx_t *f)
{
    int quiet = 0;
    store_zero_stats_t a;
    store_zero_stats(f->st, &a);
    for (int i = 0; i < 20000; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        store_zero_stats_t b;
        store_zero_stats(f->st, &b);
        if (a.pieces == b.pieces && !f->log->zqueued && !f->log->zbusy) {
            if (++quiet >= 200)
                return;
        } else {
            quiet = 0;
        }
        a = b;
    }
    fail_msg("the zeroer never went idle");
}

/* zero_idle, once the zeroer has written something: right after the appends it may not
 * have been woken yet, and an idle check then passes before any zero is written (seen on
 * a loaded machine). */
static void zeroed_then_idle(fx_t *f)
{
    for (int i = 0; i < 5000; i++) {
        store_zero_stats_t a;
        store_zero_stats(f->st, &a);
        if (a.pieces > 0)
            break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    zero_idle(f);
}

/* Copies every regular file of the partition directory of `from` into the same place
 * under `to`: what a crash at this moment leaves (the records are synced). */
static void copy_partition(const char *from, const char *to)
{
    char src[600], dst[600], p[1300], q[1300];
    snprintf(src, sizeof src, "%s/topics/t/0", from);
    snprintf(dst, sizeof dst, "%s/topics/t/0", to);
    assert_int_equal(mqd_mkdirs(dst, 0755), 0);
    DIR *d = opendir(src);
    assert_non_null(d);
    struct dirent *e;
    static uint8_t buf[1 << 16];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", src, e->d_name);
        snprintf(q, sizeof q, "%s/%s", dst, e->d_name);
        int a = open(p, O_RDONLY), b = open(q, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        assert_true(a >= 0 && b >= 0);
        ssize_t n;
        while ((n = read(a, buf, sizeof buf)) > 0)
            assert_int_equal(write(b, buf, (size_t)n), n);
        close(a);
        close(b);
    }
    closedir(d);
}

/* Every segment: the file holds its records and nothing else (no zeros left). */
static void no_zeros_left(mqd_plog_t *log, bool tail_too)
{
    for (seg_t *s = log->head; s; s = s->next)
        if (s != log->tail || tail_too)
            assert_int_equal((uint64_t)seg_file_size(log, s), s->size);
}

/* ---- tests ---- */

/* Zeros lie ahead of the records while the log is written, about one window; every
 * record reads back; a clean close cuts them, and the restart is clean (no rescan). */
static void test_ahead_then_cut_at_close(void **state)
{
    fx_t *f = *state;
    open_at(f, f->dir, 1 << 20);
    put(f, 3000, 10);
    zeroed_then_idle(f);
    store_zero_stats_t zs;
    store_zero_stats(f->st, &zs);
    assert_true(zs.bytes >= 1 << 20);
    assert_int_equal(zs.logs, 1);
    seg_t *t = f->log->tail;
    uint64_t fsz = (uint64_t)seg_file_size(f->log, t);
    assert_true(fsz >= t->size + (1 << 19));
    assert_true(fsz <= t->size + (1 << 20) + (1 << 20));
    assert_true(zeros(t->fd, t->size, fsz));
    assert_int_equal(read_check(f->log, 0, 3000, SEED, MAXLEN, 256, 1 << 20), 3000);

    reopen_at(f, f->dir, 0);
    assert_int_equal(mqd_plog_end_offset(f->log), 3000);
    assert_int_equal(f->log->ckpt_clean, 1);
    no_zeros_left(f->log, true);
    assert_int_equal(read_check(f->log, 0, 3000, SEED, MAXLEN, 256, 1 << 20), 3000);
    store_zero_stats(f->st, &zs);
    assert_int_equal(zs.bytes, 0); /* prezero = 0: off */
}

/* A crash image taken while zeros lie ahead: every record stable at the copy is there,
 * the partition is healthy, the zeros are cut; appends go on from the records' end. */
static void test_crash_image_recovers(void **state)
{
    fx_t *f = *state;
    open_at(f, f->dir, 1 << 20);
    put(f, 2500, 7);
    zeroed_then_idle(f);
    seg_t *t = f->log->tail;
    assert_true((uint64_t)seg_file_size(f->log, t) > t->size);
    copy_partition(f->dir, f->copy);

    reopen_at(f, f->copy, 1 << 20);
    assert_false(mqd_plog_unhealthy(f->log));
    assert_int_equal(mqd_plog_end_offset(f->log), 2500);
    assert_int_equal(f->log->ckpt_clean, 0);
    no_zeros_left(f->log, true);
    assert_int_equal(read_check(f->log, 0, 2500, SEED, MAXLEN, 256, 1 << 20), 2500);
    put(f, 500, 5);
    reopen_at(f, f->copy, 0);
    assert_int_equal(read_check(f->log, 0, 3000, SEED, MAXLEN, 256, 1 << 20), 3000);
}

/* Segments roll often: each one rolled holds exactly its records; zeros only ever ahead
 * of the tail; the store restarts clean with every record. */
static void test_rolls_cut_zeros(void **state)
{
    fx_t *f = *state;
    f->cfg.segment_bytes = 1 << 20;
    open_at(f, f->dir, 256 << 10);
    for (int i = 0; i < 60; i++) { /* at a pace the zeroer (one piece, then a rest) keeps */
        put(f, 100, 9);
        usleep(3000);
    }
    int nseg = 0;
    for (seg_t *s = f->log->head; s; s = s->next)
        nseg++;
    assert_true(nseg >= 5);
    no_zeros_left(f->log, false);
    store_zero_stats_t zs;
    store_zero_stats(f->st, &zs);
    assert_true(zs.bytes >= (uint64_t)(nseg - 1) * (128 << 10));
    assert_int_equal(read_check(f->log, 0, 6000, SEED, MAXLEN, 256, 1 << 20), 6000);
    reopen_at(f, f->dir, 0);
    assert_int_equal(f->log->ckpt_clean, 1);
    assert_int_equal(read_check(f->log, 0, 6000, SEED, MAXLEN, 256, 1 << 20), 6000);
}

/* A crash between the zeroer's write and the roll's cut leaves an older segment with
 * zeros after its records: recovered healthy, cut, every record there. */
static void test_older_segment_zero_tail(void **state)
{
    fx_t *f = *state;
    f->cfg.segment_bytes = 1 << 20;
    open_at(f, f->dir, 0);
    put(f, 3000, 9);
    char p[700];
    seg_path(f->log, f->log->head->base, "log", p, sizeof p);
    uint64_t rec_end = f->log->head->size;
    mqd_store_close(f->st);
    f->st = NULL;
    int fd = open(p, O_WRONLY);
    assert_true(fd >= 0);
    static uint8_t z[96 << 10];
    assert_int_equal(pwrite(fd, z, sizeof z, (off_t)rec_end), (ssize_t)sizeof z);
    close(fd);

    open_at(f, f->dir, 0);
    assert_false(mqd_plog_unhealthy(f->log));
    assert_int_equal((uint64_t)seg_file_size(f->log, f->log->head), rec_end);
    assert_int_equal(read_check(f->log, 0, 3000, SEED, MAXLEN, 256, 1 << 20), 3000);
}

/* Zeros followed by anything but zeros are damage (a torn tail): still cut at the last
 * whole record, and the records before it kept. */
static void test_zeros_then_garbage_is_torn(void **state)
{
    fx_t *f = *state;
    open_at(f, f->dir, 0);
    put(f, 1000, 10);
    uint64_t rec_end = f->log->tail->size;
    char p[700];
    seg_path(f->log, f->log->tail->base, "log", p, sizeof p);
    mqd_store_close(f->st);
    f->st = NULL;
    int fd = open(p, O_WRONLY);
    static uint8_t z[64 << 10];
    assert_int_equal(pwrite(fd, z, sizeof z, (off_t)rec_end), (ssize_t)sizeof z);
    assert_int_equal(pwrite(fd, "x", 1, (off_t)(rec_end + sizeof z)), 1);
    close(fd);
    open_at(f, f->dir, 0);
    assert_int_equal(mqd_plog_end_offset(f->log), 1000);
    assert_int_equal((uint64_t)seg_file_size(f->log, f->log->tail), rec_end);
    assert_int_equal(read_check(f->log, 0, 1000, SEED, MAXLEN, 256, 1 << 20), 1000);
}

/* The zeroer slowed down (every zero write sleeps) with a tiny window and small group
 * commits: flushers catch up with it and wait, yet no record is ever zeroed. A crash image
 * then recovers every record with its CRC checked from the start of the log. */
static int slow_zeros;
static ssize_t hook_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (n >= 4096 && ((const uint8_t *)buf)[0] == 0 && ((const uint8_t *)buf)[n - 1] == 0 &&
        __atomic_load_n(&slow_zeros, __ATOMIC_RELAXED)) {
        struct timespec ts = {0, 3000000};
        nanosleep(&ts, NULL);
    }
    return pwrite(fd, buf, n, off);
}

static void test_never_over_records(void **state)
{
    fx_t *f = *state;
    static mqd_store_io_t hooked;
    mqd_store_io_default(&hooked);
    hooked.pwrite = hook_pwrite;
    test_io = &hooked;
    __atomic_store_n(&slow_zeros, 1, __ATOMIC_RELAXED);
    open_at(f, f->dir, 16 << 10);
    for (int i = 0; i < 1500; i++)
        put(f, 1, 1); /* one record per group commit */
    put(f, 2500, 1);
    store_zero_stats_t zs;
    store_zero_stats(f->st, &zs);
    assert_true(zs.pieces > 50);
    assert_true(zs.waits > 0);
    assert_int_equal(read_check(f->log, 0, 4000, SEED, MAXLEN, 256, 1 << 20), 4000);
    zero_idle(f);
    copy_partition(f->dir, f->copy);
    char ck[700];
    snprintf(ck, sizeof ck, "%s/topics/t/0/recovery.ckpt", f->copy);
    unlink(ck); /* full scan */
    __atomic_store_n(&slow_zeros, 0, __ATOMIC_RELAXED);
    reopen_at(f, f->copy, 0);
    assert_false(mqd_plog_unhealthy(f->log));
    assert_int_equal(mqd_plog_end_offset(f->log), 4000);
    assert_int_equal(read_check(f->log, 0, 4000, SEED, MAXLEN, 256, 1 << 20), 4000);
}

/* Truncation with zeros ahead: the zeros go with the cut part; appends after it, a
 * restart and a read see exactly the kept records and the new ones. */
static void test_truncate_with_zeros(void **state)
{
    fx_t *f = *state;
    open_at(f, f->dir, 1 << 20);
    put(f, 2000, 10);
    zero_idle(f);
    assert_int_equal(mqd_plog_truncate_to(f->log, 1200), 0);
    assert_int_equal(mqd_plog_end_offset(f->log), 1200);
    no_zeros_left(f->log, true);
    put(f, 800, 10); /* the same payloads: append_n derives them from the offset */
    reopen_at(f, f->dir, 0);
    assert_int_equal(mqd_plog_end_offset(f->log), 2000);
    assert_int_equal(read_check(f->log, 0, 2000, SEED, MAXLEN, 256, 1 << 20), 2000);
}

/* flush=async logs are never zeroed ahead (their syncs are not on a message's path). */
static void test_async_not_zeroed(void **state)
{
    fx_t *f = *state;
    f->cfg.flush = MQD_FLUSH_ASYNC;
    open_at(f, f->dir, 1 << 20);
    put(f, 1000, 10);
    store_zero_stats_t zs;
    store_zero_stats(f->st, &zs);
    assert_int_equal(zs.bytes, 0);
    assert_int_equal(zs.logs, 0);
    assert_int_equal((uint64_t)seg_file_size(f->log, f->log->tail), f->log->tail->size);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ahead_then_cut_at_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_image_recovers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rolls_cut_zeros, setup, teardown),
        cmocka_unit_test_setup_teardown(test_older_segment_zero_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zeros_then_garbage_is_torn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_never_over_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncate_with_zeros, setup, teardown),
        cmocka_unit_test_setup_teardown(test_async_not_zeroed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
