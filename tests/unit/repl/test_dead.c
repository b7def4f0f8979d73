/* Fast failover's decision (repl/dead.c, issue 40 point 4): is a node's process dead? Each
 * test is one scenario fed event by event to mqd_repl_dead_step, as the nodes would see
 * it, with the action expected after each: only a closed connection plus two refused
 * connects (the second begun after the first answered) under the same lease revokes. */
#include "config.h"
#include "repl/repl.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define CLOSED MQD_REPL_DEAD_EV_CLOSED
#define REPORTED MQD_REPL_DEAD_EV_REPORT
#define REFUSED MQD_REPL_DEAD_EV_REFUSED
#define ACCEPTED MQD_REPL_DEAD_EV_ACCEPTED
#define SILENT MQD_REPL_DEAD_EV_NO_ANSWER
#define NONE MQD_REPL_DEAD_NONE
#define PROBE MQD_REPL_DEAD_PROBE
#define REPORT MQD_REPL_DEAD_REPORT
#define REVOKE MQD_REPL_DEAD_REVOKE
#define CLEAR MQD_REPL_DEAD_CLEAR

/* the cluster as a node sees it */
static const mqd_repl_dead_ctx_t FOLLOWER = {.enabled = true, .same_lease = true};
static const mqd_repl_dead_ctx_t CONTROLLER = {.enabled = true, .same_lease = true,
                                               .self_controller = true};
static const mqd_repl_dead_ctx_t OF_CONTROLLER = {.enabled = true, .same_lease = true,
                                                  .target_controller = true};
static const mqd_repl_dead_ctx_t OFF = {.enabled = false, .same_lease = true};
static const mqd_repl_dead_ctx_t NEW_LEASE = {.enabled = true, .same_lease = false};

typedef struct step {
    const mqd_repl_dead_ctx_t *c;
    mqd_repl_dead_ev_t ev;
    mqd_repl_dead_act_t want;
} step_t;

static int revokes;

static void run(mqd_repl_dead_t *d, const step_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        mqd_repl_dead_act_t a = mqd_repl_dead_step(d, s[i].c, s[i].ev);
        if (a != s[i].want)
            fail_msg("step %zu (%s): action %d, want %d", i, mqd_repl_dead_ev_name(s[i].ev), a,
                     s[i].want);
        revokes += a == REVOKE;
    }
}
#define RUN(d, ...)                                                                                \
    do {                                                                                           \
        const step_t s_[] = {__VA_ARGS__};                                                         \
        run(d, s_, sizeof s_ / sizeof s_[0]);                                                      \
    } while (0)

/* SIGKILL of a leader, the follower not the controller: it probes, is refused and
 * reports; the controller probes too, is refused, and revokes. Nothing more after. */
static void test_kill_confirmed_by_controller(void **state)
{
    mqd_repl_dead_t fol = {0}, ctl = {0};
    revokes = 0;
    RUN(&fol, {&FOLLOWER, CLOSED, PROBE}, {&FOLLOWER, CLOSED, NONE}, {&FOLLOWER, REFUSED, REPORT},
        {&FOLLOWER, CLOSED, NONE});
    RUN(&ctl, {&CONTROLLER, REPORTED, PROBE}, {&CONTROLLER, REPORTED, NONE},
        {&CONTROLLER, REFUSED, REVOKE}, {&CONTROLLER, REFUSED, NONE}, {&CONTROLLER, REPORTED, NONE});
    assert_int_equal(revokes, 1);
    assert_int_equal(ctl.st, MQD_REPL_DEAD_REVOKED);
    (void)state;
}

/* The follower is the controller, or the dead node held the controller key: nobody else
 * to ask, so a second connect of its own confirms. */
static void test_kill_confirmed_locally(void **state)
{
    mqd_repl_dead_t a = {0}, b = {0};
    revokes = 0;
    RUN(&a, {&CONTROLLER, CLOSED, PROBE}, {&CONTROLLER, REFUSED, PROBE}, {&CONTROLLER, REFUSED, REVOKE});
    RUN(&b, {&OF_CONTROLLER, CLOSED, PROBE}, {&OF_CONTROLLER, REFUSED, PROBE},
        {&OF_CONTROLLER, REFUSED, REVOKE});
    assert_int_equal(revokes, 2);
    (void)state;
}

/* SIGSTOP: the kernel of a paused process completes the handshake. Its connection ended
 * (an idle timeout) but the connect is accepted: cleared, never revoked, whoever asks. */
static void test_paused_not_dead(void **state)
{
    mqd_repl_dead_t fol = {0}, ctl = {0}, own = {0};
    revokes = 0;
    RUN(&fol, {&FOLLOWER, CLOSED, PROBE}, {&FOLLOWER, ACCEPTED, CLEAR}, {&FOLLOWER, REFUSED, NONE});
    assert_int_equal(fol.st, MQD_REPL_DEAD_IDLE);
    RUN(&own, {&CONTROLLER, CLOSED, PROBE}, {&CONTROLLER, REFUSED, PROBE},
        {&CONTROLLER, ACCEPTED, CLEAR});
    /* a report the controller cannot confirm: restarted meanwhile, or only paused */
    RUN(&ctl, {&CONTROLLER, REPORTED, PROBE}, {&CONTROLLER, ACCEPTED, CLEAR});
    assert_int_equal(revokes, 0);
    (void)state;
}

/* A partition (or a hung host): nothing answers the connect. */
static void test_partition_no_answer(void **state)
{
    mqd_repl_dead_t fol = {0}, ctl = {0};
    revokes = 0;
    RUN(&fol, {&FOLLOWER, CLOSED, PROBE}, {&FOLLOWER, SILENT, CLEAR});
    RUN(&ctl, {&CONTROLLER, REPORTED, PROBE}, {&CONTROLLER, SILENT, CLEAR});
    RUN(&fol, {&CONTROLLER, CLOSED, PROBE}, {&CONTROLLER, REFUSED, PROBE}, {&CONTROLLER, SILENT, CLEAR});
    assert_int_equal(revokes, 0);
    (void)state;
}

/* No single signal is enough: a refusal without a probe in flight, a report at a node
 * that is not the controller, a close alone. */
static void test_one_signal_is_not_enough(void **state)
{
    mqd_repl_dead_t d = {0};
    revokes = 0;
    RUN(&d, {&FOLLOWER, REFUSED, NONE}, {&FOLLOWER, REPORTED, NONE}, {&CONTROLLER, REFUSED, NONE},
        {&OF_CONTROLLER, REFUSED, NONE});
    assert_int_equal(d.st, MQD_REPL_DEAD_IDLE);
    RUN(&d, {&FOLLOWER, CLOSED, PROBE});
    assert_int_equal(d.st, MQD_REPL_DEAD_PROBING);
    assert_int_equal(revokes, 0);
    (void)state;
}

/* Evidence about a lease that is over (the node's key gone or registered again by a
 * restart) clears; fast_failover = off does nothing. */
static void test_lease_and_switch(void **state)
{
    mqd_repl_dead_t d = {0}, off = {0};
    revokes = 0;
    RUN(&d, {&CONTROLLER, CLOSED, PROBE}, {&CONTROLLER, REFUSED, PROBE}, {&NEW_LEASE, REFUSED, CLEAR},
        {&NEW_LEASE, CLOSED, NONE});
    RUN(&d, {&CONTROLLER, REPORTED, PROBE}, {&NEW_LEASE, REFUSED, CLEAR});
    RUN(&off, {&OFF, CLOSED, NONE}, {&OFF, REPORTED, NONE}, {&OFF, REFUSED, NONE});
    /* switched off while a probe was in flight */
    RUN(&d, {&CONTROLLER, CLOSED, PROBE}, {&OFF, REFUSED, CLEAR});
    assert_int_equal(revokes, 0);
    (void)state;
}

/* After a revoke the node stays done for that lease (one revoke per lease); a clear lets
 * the next close start afresh. */
static void test_after_revoke_and_clear(void **state)
{
    mqd_repl_dead_t d = {0};
    revokes = 0;
    RUN(&d, {&CONTROLLER, CLOSED, PROBE}, {&CONTROLLER, REFUSED, PROBE}, {&CONTROLLER, REFUSED, REVOKE},
        {&CONTROLLER, CLOSED, NONE}, {&CONTROLLER, REPORTED, NONE}, {&CONTROLLER, ACCEPTED, NONE});
    assert_int_equal(revokes, 1);
    mqd_repl_dead_t e = {0};
    RUN(&e, {&FOLLOWER, CLOSED, PROBE}, {&FOLLOWER, ACCEPTED, CLEAR}, {&FOLLOWER, CLOSED, PROBE},
        {&FOLLOWER, REFUSED, REPORT});
    assert_int_equal(revokes, 1);
    (void)state;
}

/* A report the controller never answered (it found the node alive, or died too) goes
 * stale: the next close starts afresh instead of waiting forever. */
static void test_report_expires(void **state)
{
    mqd_repl_dead_t d = {0};
    revokes = 0;
    RUN(&d, {&FOLLOWER, CLOSED, PROBE}, {&FOLLOWER, REFUSED, REPORT}, {&FOLLOWER, CLOSED, NONE},
        {&FOLLOWER, MQD_REPL_DEAD_EV_EXPIRED, CLEAR}, {&FOLLOWER, CLOSED, PROBE},
        {&FOLLOWER, MQD_REPL_DEAD_EV_EXPIRED, NONE}, {&FOLLOWER, REFUSED, REPORT});
    assert_int_equal(revokes, 0);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_confirmed_by_controller),
        cmocka_unit_test(test_kill_confirmed_locally),
        cmocka_unit_test(test_paused_not_dead),
        cmocka_unit_test(test_partition_no_answer),
        cmocka_unit_test(test_one_signal_is_not_enough),
        cmocka_unit_test(test_lease_and_switch),
        cmocka_unit_test(test_after_revoke_and_clear),
        cmocka_unit_test(test_report_expires),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
