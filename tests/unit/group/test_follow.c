/* A group's committed offset replicated from the partition's leader (group.c's
 * mqd_group_follow_moves, issue 32 point 4): what it does to this node's cursor. */
#include "config.h"
#include "group/group.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* No link reads the partition here (a follower: it serves none): the cursor takes the
 * leader's offset either way, as meta.db does. */
static void test_no_link_follows_the_leader(void **state)
{
    assert_true(mqd_group_follow_moves(false, 0, 2112, 2200)); /* forward */
    assert_true(mqd_group_follow_moves(false, 0, 2112, 2109)); /* back: the leader's word */
    assert_true(mqd_group_follow_moves(false, 0, 2112, 2112));
    (void)state;
}

/* A live link never gets an offset again: the 2109-2111 delivered, then the
 * leader's 2109 arrives; the cursor stays. A floor at or past what it delivered moves it. */
static void test_live_link_only_forward(void **state)
{
    assert_false(mqd_group_follow_moves(true, 0, 2112, 2109));
    assert_false(mqd_group_follow_moves(true, 0, 2112, 2111));
    assert_true(mqd_group_follow_moves(true, 0, 2112, 2112));
    assert_true(mqd_group_follow_moves(true, 0, 2112, 3000));
    (void)state;
}

/* Records out on a link: nothing moves, whatever the offset. */
static void test_in_flight_stays(void **state)
{
    assert_false(mqd_group_follow_moves(true, 3, 2112, 3000));
    assert_false(mqd_group_follow_moves(false, 1, 2112, 2109));
    assert_false(mqd_group_follow_moves(false, 1, 2112, 3000));
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_link_follows_the_leader),
        cmocka_unit_test(test_live_link_only_forward),
        cmocka_unit_test(test_in_flight_stays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
