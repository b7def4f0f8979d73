/* mqd_array_grow: the array stays while there is room, doubles from `first` when full,
 * and stays whole (with its capacity) when the allocation fails.
 * mqd_mkdirs / mqd_fsync_parents: every directory made, and the directory naming it, is
 * fsynced (fsync is wrapped here to record which inodes were synced). */
#include "config.h"
#include "util/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

/* ---- fsync recorder (-Wl,--wrap=fsync) ---- */
int __real_fsync(int fd);
int __wrap_fsync(int fd);
static ino_t synced[64];
static size_t nsynced;

int __wrap_fsync(int fd)
{
    struct stat sb;
    if (fstat(fd, &sb) == 0 && nsynced < sizeof synced / sizeof synced[0])
        synced[nsynced++] = sb.st_ino;
    return __real_fsync(fd);
}

static bool was_synced(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return false;
    for (size_t i = 0; i < nsynced; i++)
        if (synced[i] == sb.st_ino)
            return true;
    return false;
}

static void test_array_grow(void **state)
{
    (void)state;
    int *a = NULL;
    size_t cap = 0, n = 0;
    for (int i = 0; i < 100; i++) {
        int *na = mqd_array_grow(a, &cap, n, sizeof *na, 4);
        assert_non_null(na);
        a = na;
        a[n++] = i;
        assert_true(n <= cap);
    }
    assert_int_equal(cap, 128); /* 4, 8, 16, 32, 64, 128 */
    for (int i = 0; i < 100; i++)
        assert_int_equal(a[i], i);
    /* room left: the same array, the same capacity */
    int *same = mqd_array_grow(a, &cap, n, sizeof *same, 4);
    assert_ptr_equal(same, a);
    assert_int_equal(cap, 128);
    /* a size that would overflow: NULL before any allocation, the array and its
     * capacity unchanged */
    size_t huge = SIZE_MAX / 4;
    assert_null(mqd_array_grow(a, &huge, huge, 8, 4));
    assert_int_equal(huge, SIZE_MAX / 4);
    assert_int_equal(a[99], 99);
    free(a);
}

static void test_mkdirs_durable(void **state)
{
    (void)state;
    char base[] = "/tmp/mqd-mkdirs-XXXXXX", p[256];
    assert_non_null(mkdtemp(base));
    snprintf(p, sizeof p, "%s/topics/T/0", base);
    nsynced = 0;
    assert_int_equal(mqd_mkdirs(p, 0755), 0);
    /* base (names topics), topics (names T), T (names 0) and 0 itself */
    const char *const want[] = {"", "/topics", "/topics/T", "/topics/T/0"};
    for (size_t i = 0; i < 4; i++) {
        char q[256];
        snprintf(q, sizeof q, "%s%s", base, want[i]);
        assert_true(was_synced(q));
    }
    /* nothing new: nothing synced */
    nsynced = 0;
    assert_int_equal(mqd_mkdirs(p, 0755), 0);
    assert_int_equal(nsynced, 0);
    /* one new leaf: it and its parent only */
    snprintf(p, sizeof p, "%s/topics/T/1/", base);
    assert_int_equal(mqd_mkdirs(p, 0755), 0);
    assert_int_equal(nsynced, 2);
    /* an existing chain made durable again from base down */
    nsynced = 0;
    snprintf(p, sizeof p, "%s/topics/T/0", base);
    assert_int_equal(mqd_fsync_parents(p, strlen(base)), 0);
    assert_int_equal(nsynced, 3);
    assert_true(was_synced(base));
    char t[256];
    snprintf(t, sizeof t, "%s/topics/T", base);
    assert_true(was_synced(t));
    assert_int_equal(mqd_mkdirs("", 0755), MQD_EINVAL);
    snprintf(t, sizeof t, "rm -rf '%s'", base);
    assert_int_equal(system(t), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_array_grow),
        cmocka_unit_test(test_mkdirs_durable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
