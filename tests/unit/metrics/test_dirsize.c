/* mqd_metrics_dir_size (mqd_data_dir_size_bytes) on a data dir shaped as mqd's with
 * 1,000 partitions (100 topics x 10, three files each, real files under /tmp): the sum is
 * what an independent walk (nftw, FTW_PHYS) adds up from the same st_blocks; a result
 * younger than 5 s is given again; an older one starts a walk on a thread and is given
 * once more at once, the walk's result (a file added meanwhile counted) by a later call;
 * a walk under way is waited for by mqd_metrics_dir_size_free; a symlink is not
 * followed; a missing dir is MQD_EIO. The time a walk takes is logged (what it would
 * cost the event loop), and how soon the stale call returned. */
#define _XOPEN_SOURCE 700
#include "config.h"
#include "metrics/metrics.h"

#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#define TOPICS 100
#define PARTS 10

static char root[256];
static uint64_t nftw_sum;

static int add_blocks(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)path;
    (void)flag;
    (void)f;
    nftw_sum += (uint64_t)st->st_blocks * 512u;
    return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void put_file(const char *path, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    static char buf[65536];
    memset(buf, 'x', sizeof buf);
    while (len > 0) {
        size_t n = len < sizeof buf ? len : sizeof buf;
        assert_int_equal(write(fd, buf, n), (ssize_t)n);
        len -= n;
    }
    close(fd);
}

static uint64_t independent_sum(void)
{
    nftw_sum = 0;
    assert_int_equal(nftw(root, add_blocks, 32, FTW_PHYS), 0);
    return nftw_sum;
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/mqd-dirsize-XXXXXX");
    assert_non_null(mkdtemp(root));
    char p[512];
    snprintf(p, sizeof p, "%s/topics", root);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/meta.db", root);
    put_file(p, 20000);
    for (int t = 0; t < TOPICS; t++) {
        snprintf(p, sizeof p, "%s/topics/t%02d", root, t);
        assert_int_equal(mkdir(p, 0755), 0);
        for (int n = 0; n < PARTS; n++) {
            snprintf(p, sizeof p, "%s/topics/t%02d/%d", root, t, n);
            assert_int_equal(mkdir(p, 0755), 0);
            const char *ext[] = {"log", "idx", "tix"};
            const size_t len[] = {8192, 4096, 0};
            for (int i = 0; i < 3; i++) {
                snprintf(p, sizeof p, "%s/topics/t%02d/%d/00000000000000000000.%s", root, t, n,
                         ext[i]);
                put_file(p, len[i]);
            }
        }
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    nftw(root, rm_one, 32, FTW_DEPTH | FTW_PHYS);
    return 0;
}

static void test_sum_and_time(void **state)
{
    (void)state;
    uint64_t want = independent_sum();
    double best = 1e9, worst = 0;
    for (int i = 0; i < 5; i++) {
        mqd_dir_size_t cache = {0};
        uint64_t got = 0;
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        assert_int_equal(mqd_metrics_dir_size(root, 1000, &cache, &got), 0);
        double ms = ms_since(&t0);
        best = ms < best ? ms : best;
        worst = ms > worst ? ms : worst;
        assert_int_equal(got, want);
        assert_int_equal(cache.bytes, want);
        assert_int_equal(cache.at_ms, 1000);
    }
    /* the files hold 1,000 x 12 KiB and meta.db: their blocks, at least */
    assert_true(want >= (uint64_t)TOPICS * PARTS * (8192 + 4096) + 20000);
    fprintf(stderr,
            "dir size of %d partitions (%d files, %d dirs): %llu bytes; a walk took "
            "%.2f ms at best, %.2f ms at worst of 5\n",
            TOPICS * PARTS, TOPICS * PARTS * 3 + 1, TOPICS * PARTS + TOPICS + 1,
            (unsigned long long)want, best, worst);
}

/* Calls at now_ms until the result differs from `old` (a walk on its thread finished),
 * for 10 s at most. */
static uint64_t until_changed(mqd_dir_size_t *cache, int64_t now_ms, uint64_t old)
{
    uint64_t got = old;
    for (int i = 0; i < 10000 && got == old; i++) {
        usleep(1000);
        assert_int_equal(mqd_metrics_dir_size(root, now_ms, cache, &got), 0);
    }
    return got;
}

static void test_cache(void **state)
{
    (void)state;
    mqd_dir_size_t cache = {0};
    uint64_t first = 0, again = 0, stale = 0;
    assert_int_equal(mqd_metrics_dir_size(root, 1000, &cache, &first), 0);
    assert_int_equal(first, independent_sum()); /* the first call walks before it returns */
    assert_null(cache.walk);
    char p[512];
    snprintf(p, sizeof p, "%s/topics/t00/0/00000000000000065536.log", root);
    put_file(p, 65536);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(mqd_metrics_dir_size(root, 1000 + 4999, &cache, &again), 0);
    assert_int_equal(again, first); /* younger than 5 s: not walked again */
    assert_null(cache.walk);
    /* 5 s old: a walk starts on its thread and the call gives the last result at once */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(mqd_metrics_dir_size(root, 1000 + 5000, &cache, &stale), 0);
    double ms = ms_since(&t0);
    assert_int_equal(stale, first);
    assert_non_null(cache.walk);
    uint64_t later = until_changed(&cache, 1000 + 5001, first);
    fprintf(stderr,
            "the stale call returned in %.3f ms with the last result; the walk's came "
            "%.1f ms after it\n",
            ms, ms_since(&t0));
    assert_int_equal(later, first + (uint64_t)st.st_blocks * 512u);
    assert_true(later >= first + 65536);
    assert_int_equal(later, independent_sum());
    assert_null(cache.walk);
    assert_int_equal(cache.at_ms, 1000 + 5000); /* when the walk started */
    /* its result is fresh for 5 s from then: no new walk at 9999 */
    assert_int_equal(mqd_metrics_dir_size(root, 1000 + 9999, &cache, &again), 0);
    assert_null(cache.walk);
    unlink(p);
    /* a walk under way when the owner stops is waited for */
    assert_int_equal(mqd_metrics_dir_size(root, 1000 + 10000, &cache, &again), 0);
    assert_non_null(cache.walk);
    mqd_metrics_dir_size_free(&cache);
    assert_null(cache.walk);
    assert_int_equal(cache.bytes, independent_sum()); /* without the file removed */
    assert_int_equal(cache.at_ms, 1000 + 10000);
}

static void test_symlink_not_followed(void **state)
{
    (void)state;
    char big[512], link[512];
    snprintf(big, sizeof big, "%s.big", root); /* outside the data dir */
    put_file(big, 1 << 20);
    mqd_dir_size_t cache = {0};
    uint64_t before = 0, after = 0;
    assert_int_equal(mqd_metrics_dir_size(root, 1000, &cache, &before), 0);
    snprintf(link, sizeof link, "%s/topics/t01/big", root);
    assert_int_equal(symlink(big, link), 0);
    struct stat lst;
    assert_int_equal(lstat(link, &lst), 0);
    mqd_dir_size_t fresh = {0};
    assert_int_equal(mqd_metrics_dir_size(root, 9000, &fresh, &after), 0);
    assert_int_equal(after, before + (uint64_t)lst.st_blocks * 512u);
    assert_true(after < before + (1 << 20));
    unlink(link);
    unlink(big);
}

static void test_missing_dir(void **state)
{
    (void)state;
    char p[512];
    snprintf(p, sizeof p, "%s/not-there", root);
    mqd_dir_size_t cache = {0};
    uint64_t out = 42;
    assert_int_equal(mqd_metrics_dir_size(p, 1000, &cache, &out), MQD_EIO);
    assert_int_equal(out, 42);
    assert_int_equal(cache.at_ms, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sum_and_time),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_symlink_not_followed),
        cmocka_unit_test(test_missing_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
