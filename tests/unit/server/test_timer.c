/* server: the timer registry (timer.c) on a real libevent loop: timers run at their own
 * intervals with their own argument, names are unique, bad registrations are refused,
 * and nothing runs after the registry is freed. Timing is judged by order and counts,
 * not by wall-clock bounds, so a loaded machine only makes it slower. */
#include "config.h"
#include "core/core.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

typedef struct probe {
    struct event_base *base;
    int runs;
    int stop_at; /* break the loop at this many runs (0: never) */
} probe_t;

static void tick(void *arg)
{
    probe_t *p = arg;
    if (++p->runs == p->stop_at)
        event_base_loopbreak(p->base);
}

static void test_intervals_and_counts(void **state)
{
    struct event_base *base = event_base_new();
    mqd_timers_t *ts;
    (void)state;
    assert_non_null(base);
    assert_int_equal(mqd_timers_new(base, &ts), 0);
    probe_t fast = {base, 0, 0}, slow = {base, 0, 3};
    assert_int_equal(mqd_timers_add(ts, "test.fast", 20, tick, &fast), 0);
    assert_int_equal(mqd_timers_add(ts, "test.slow", 50, tick, &slow), 0);
    assert_int_equal(mqd_timers_count(ts), 2);
    /* a hard bound in case the timers never run: the loop ends after 30 s anyway */
    struct timeval bound = {30, 0};
    event_base_loopexit(base, &bound);
    assert_int_equal(event_base_dispatch(base), 0);
    assert_int_equal(slow.runs, 3);     /* the loop broke at slow's third run */
    assert_true(fast.runs > slow.runs); /* 2.5 times as often: at least one more */
    const char *name;
    uint32_t ms;
    uint64_t runs;
    assert_int_equal(mqd_timers_get(ts, 0, &name, &ms, &runs), 0);
    assert_string_equal(name, "test.fast");
    assert_int_equal(ms, 20);
    assert_int_equal(runs, (uint64_t)fast.runs);
    assert_int_equal(mqd_timers_get(ts, 1, &name, &ms, &runs), 0);
    assert_string_equal(name, "test.slow");
    assert_int_equal(ms, 50);
    assert_int_equal(runs, 3);
    assert_int_equal(mqd_timers_get(ts, 2, &name, &ms, &runs), MQD_ENOENT);
    mqd_log_set_level(MQD_LOG_DEBUG);
    mqd_timers_log(ts); /* two debug lines; must not crash */
    mqd_log_set_level(MQD_LOG_INFO);
    /* freed: its events are gone from the loop, so nothing is left to run */
    int before = fast.runs + slow.runs;
    mqd_timers_free(ts);
    struct timeval later = {0, 200000}; /* 10 of fast's intervals */
    event_base_loopexit(base, &later);
    assert_int_equal(event_base_dispatch(base), 0);
    assert_int_equal(fast.runs + slow.runs, before);
    event_base_free(base);
}

static void test_refusals(void **state)
{
    struct event_base *base = event_base_new();
    mqd_timers_t *ts;
    probe_t p = {base, 0, 0};
    char long_name[MQD_TIMER_NAME_MAX + 1];
    (void)state;
    assert_int_equal(mqd_timers_new(base, &ts), 0);
    assert_int_equal(mqd_timers_add(ts, "a.b", 1000, tick, &p), 0);
    assert_int_equal(mqd_timers_add(ts, "a.b", 500, tick, &p), MQD_EEXIST);
    assert_int_equal(mqd_timers_add(ts, "a.zero", 0, tick, &p), MQD_EINVAL);
    assert_int_equal(mqd_timers_add(ts, "", 1000, tick, &p), MQD_EINVAL);
    assert_int_equal(mqd_timers_add(ts, NULL, 1000, tick, &p), MQD_EINVAL);
    assert_int_equal(mqd_timers_add(ts, "a.nofn", 1000, NULL, &p), MQD_EINVAL);
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    assert_int_equal(mqd_timers_add(ts, long_name, 1000, tick, &p), MQD_EINVAL);
    long_name[MQD_TIMER_NAME_MAX - 1] = '\0'; /* 47 characters: the longest allowed */
    assert_int_equal(mqd_timers_add(ts, long_name, 1000, tick, &p), 0);
    assert_int_equal(mqd_timers_count(ts), 2);
    assert_int_equal(p.runs, 0);
    mqd_timers_free(ts);
    mqd_timers_free(NULL);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_intervals_and_counts),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
