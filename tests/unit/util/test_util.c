/* mqd_array_grow: the array stays while there is room, doubles from `first` when full,
 * and stays whole (with its capacity) when the allocation fails. */
#include "config.h"
#include "util/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_array_grow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
