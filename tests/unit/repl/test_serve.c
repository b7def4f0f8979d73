/* Who serves a partition's links (repl/serve.c, issue 32 point 4): only its leader in the
 * current epoch. Each test is one rule of the spec. */
#include "config.h"
#include "repl/repl.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define SELF 1
#define OTHER 2

static mqd_repl_serve_t verdict(bool known, uint32_t leader, bool leading, bool leader_known,
                                const char **why)
{
    mqd_repl_pview_t v = {known, leader, leading, leader_known};
    *why = NULL;
    return mqd_repl_serve(SELF, &v, why);
}

/* The leader in its epoch serves the link. */
static void test_leader_serves(void **state)
{
    const char *why;
    assert_int_equal(verdict(true, SELF, true, true, &why), MQD_REPL_SERVE_HERE);
    assert_int_equal(verdict(true, SELF, true, false, &why), MQD_REPL_SERVE_HERE);
    (void)state;
}

/* Another node leads and its address is known: the link goes there. */
static void test_follower_redirects(void **state)
{
    const char *why;
    assert_int_equal(verdict(true, OTHER, false, true, &why), MQD_REPL_SERVE_REDIRECT);
    (void)state;
}

/* A node that does not know who leads waits, with the reason: no state read yet, the
 * leader's key not in its view (after every node was killed), or named leader but not
 * leading yet (a restarted leader before its hand-over; its replica not open). */
static void test_unknown_waits(void **state)
{
    const char *why;
    assert_int_equal(verdict(false, 0, false, false, &why), MQD_REPL_SERVE_WAIT);
    assert_non_null(why);
    assert_non_null(strstr(why, "not read"));
    assert_int_equal(verdict(true, OTHER, false, false, &why), MQD_REPL_SERVE_WAIT);
    assert_non_null(strstr(why, "address is not known"));
    assert_int_equal(verdict(true, SELF, false, true, &why), MQD_REPL_SERVE_WAIT);
    assert_non_null(strstr(why, "does not lead it yet"));
    (void)state;
}

/* Whatever else holds, a node serves only while it leads: every view that is not
 * (known, leader = self, leading) gives anything but HERE. */
static void test_only_the_leader(void **state)
{
    for (int k = 0; k < 2; k++)
        for (uint32_t leader = 0; leader <= 2; leader++)
            for (int l = 0; l < 2; l++)
                for (int a = 0; a < 2; a++) {
                    const char *why;
                    mqd_repl_serve_t v = verdict(k, leader, l, a, &why);
                    bool leads = k && leader == SELF && l;
                    assert_int_equal(v == MQD_REPL_SERVE_HERE, leads);
                    if (v == MQD_REPL_SERVE_WAIT)
                        assert_non_null(why);
                }
    (void)state;
}

/* A link to a whole topic: served only if every partition is led here; a redirect wins
 * (the link is not served here whatever the rest says); a wait beats serving. */
static void test_join(void **state)
{
    const mqd_repl_serve_t H = MQD_REPL_SERVE_HERE, W = MQD_REPL_SERVE_WAIT,
                           R = MQD_REPL_SERVE_REDIRECT;
    assert_int_equal(mqd_repl_serve_join(H, H), H);
    assert_int_equal(mqd_repl_serve_join(H, W), W);
    assert_int_equal(mqd_repl_serve_join(W, H), W);
    assert_int_equal(mqd_repl_serve_join(W, R), R);
    assert_int_equal(mqd_repl_serve_join(R, W), R);
    assert_int_equal(mqd_repl_serve_join(R, H), R);
    /* the first of equals stays: the caller keeps its address or reason */
    assert_int_equal(mqd_repl_serve_join(W, W), W);
    assert_int_equal(mqd_repl_serve_join(R, R), R);
    (void)state;
}

/* A local-only link (mqd:fwd-local-only): per partition, served while led here, waits
 * while it may be led here soon (state not read, named leader but not leading yet), "not
 * here" when another node leads it, whether its address is known or not. */
static void test_led_per_partition(void **state)
{
    const char *why = NULL;
    mqd_repl_pview_t v = {true, SELF, true, true};
    assert_int_equal(mqd_repl_serve_led(SELF, &v, &why), MQD_REPL_SERVE_HERE);
    v = (mqd_repl_pview_t){true, SELF, false, true};
    assert_int_equal(mqd_repl_serve_led(SELF, &v, &why), MQD_REPL_SERVE_WAIT);
    assert_non_null(strstr(why, "does not lead it yet"));
    v = (mqd_repl_pview_t){false, 0, false, false};
    assert_int_equal(mqd_repl_serve_led(SELF, &v, &why), MQD_REPL_SERVE_WAIT);
    assert_non_null(strstr(why, "not read"));
    v = (mqd_repl_pview_t){true, OTHER, false, true};
    assert_int_equal(mqd_repl_serve_led(SELF, &v, &why), MQD_REPL_SERVE_REDIRECT);
    v = (mqd_repl_pview_t){true, OTHER, false, false};
    assert_int_equal(mqd_repl_serve_led(SELF, &v, &why), MQD_REPL_SERVE_REDIRECT);
    (void)state;
}

/* Over the topic: one partition led here serves it, whatever the others say; a wait
 * beats "not here"; all led elsewhere: not here (refused by the caller). */
static void test_led_join(void **state)
{
    const mqd_repl_serve_t H = MQD_REPL_SERVE_HERE, W = MQD_REPL_SERVE_WAIT,
                           R = MQD_REPL_SERVE_REDIRECT;
    const mqd_repl_serve_t cases[][4] = {
        /* three partitions' verdicts, then the fold */
        {R, R, R, R}, {R, H, R, H}, {H, R, R, H}, {R, R, W, W},
        {W, H, R, H}, {W, W, R, W}, {H, H, H, H}, {R, W, H, H},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mqd_repl_serve_t acc = R;
        for (int p = 0; p < 3; p++)
            acc = mqd_repl_serve_led_join(acc, cases[i][p]);
        assert_int_equal(acc, cases[i][3]);
    }
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leader_serves), cmocka_unit_test(test_follower_redirects),
        cmocka_unit_test(test_unknown_waits), cmocka_unit_test(test_only_the_leader),
        cmocka_unit_test(test_join), cmocka_unit_test(test_led_per_partition),
        cmocka_unit_test(test_led_join),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
