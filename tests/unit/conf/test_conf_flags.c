/* conf: the "was this key given" flags. They were a fixed 64-bit mask (later four words)
 * that capped the table's rows; now a bitmap sized from the table. The table already
 * has more than 64 rows, so these checks reach rows past 64 with real keys. */
#include "config.h"
#include "conf/conf_int.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t row_of(const char *key)
{
    const mqd_conf_row_t *r = mqd_conf_row_find(key);
    assert_non_null(r);
    return (size_t)(r - mqd_conf_rows);
}

static void set_ok(mqd_conf_t *c, const char *kv)
{
    char err[512];
    int rc = mqd_conf_set(c, kv, err, sizeof err);
    if (rc != 0)
        fail_msg("%s: %s", kv, err);
}

/* Global keys at rows past 64: given ones read as set, the others not, and the
 * neighbours of a given row are not disturbed. */
static void test_global_rows_past_64(void **state)
{
    mqd_conf_t *c;
    (void)state;
    assert_true(mqd_conf_key_count() > 64);
    assert_int_equal(mqd_conf_bits_words(), (mqd_conf_key_count() + 63) / 64);
    assert_int_equal(mqd_conf_new(&c), 0);
    static const char *const given[] = {"rack=r1", "lease_ttl_ms=5s", "sas_required=on"};
    static const char *const keys[] = {"rack", "lease_ttl_ms", "sas_required"};
    static const char *const silent[] = {"advertised_address", "cluster_name", "node_id"};
    for (size_t i = 0; i < 3; i++) {
        assert_false(mqd_conf_key_is_set(c, NULL, keys[i]));
        set_ok(c, given[i]);
    }
    for (size_t i = 0; i < 3; i++) {
        assert_true(row_of(keys[i]) >= 64); /* what the old single word could not hold */
        assert_true(mqd_conf_key_is_set(c, NULL, keys[i]));
        assert_false(mqd_conf_key_is_set(c, NULL, silent[i]));
    }
    assert_true(row_of("advertised_address") >= 64);
    assert_string_equal(c->rack, "r1");
    assert_int_equal(c->lease_ttl_ms, 5000);
    /* a row below 64 and an unknown key */
    assert_false(mqd_conf_key_is_set(c, NULL, "log_level"));
    set_ok(c, "log_level=debug");
    assert_true(mqd_conf_key_is_set(c, NULL, "log_level"));
    assert_false(mqd_conf_key_is_set(c, NULL, "no_such_key"));
    mqd_conf_free(c);
}

/* Topic sections keep their own flags; the layering (section over defaults) reads them. */
static void test_topic_flags(void **state)
{
    mqd_conf_t *c;
    mqd_topic_conf_t t;
    (void)state;
    assert_int_equal(mqd_conf_new(&c), 0);
    set_ok(c, "retention_ms=1d");
    set_ok(c, "topic.orders.dedup_window_ms=5s");
    assert_true(mqd_conf_key_is_set(c, NULL, "retention_ms")); /* the default for all */
    assert_false(mqd_conf_key_is_set(c, NULL, "dedup_window_ms"));
    assert_true(mqd_conf_key_is_set(c, "orders", "dedup_window_ms"));
    assert_false(mqd_conf_key_is_set(c, "orders", "retention_ms")); /* inherited, not given */
    assert_false(mqd_conf_key_is_set(c, "missing", "dedup_window_ms"));
    mqd_conf_topic(c, "orders", &t);
    assert_int_equal(t.dedup_window_ms, 5000);
    assert_int_equal(t.log.retention_ms, 86400000);
    assert_true(mqd_conf_bits_get(t.set, row_of("dedup_window_ms"))); /* borrowed */
    /* a loose copy takes settings and records no flags: it owns nothing */
    char err[256];
    mqd_topic_conf_t copy = t;
    copy.set = NULL;
    assert_int_equal(mqd_conf_topic_setting(&copy, "retention_ms", "2h", err, sizeof err), 0);
    assert_int_equal(copy.log.retention_ms, 7200000);
    assert_null(copy.set);
    mqd_conf_free(c);
}

/* The bitmap itself: every row of the table, the last included; out of range refused. */
static void test_bits(void **state)
{
    uint64_t *a = NULL, *b = NULL;
    size_t n = mqd_conf_key_count();
    (void)state;
    assert_false(mqd_conf_bits_get(NULL, 0));
    assert_int_equal(mqd_conf_bits_set(&a, n), MQD_EINVAL);
    assert_null(a);
    for (size_t i = 0; i < n; i += 3)
        assert_int_equal(mqd_conf_bits_set(&a, i), 0);
    assert_int_equal(mqd_conf_bits_set(&a, n - 1), 0);
    size_t on = 0;
    for (size_t i = 0; i < n; i++)
        on += mqd_conf_bits_get(a, i);
    assert_int_equal(on, (n + 2) / 3 + ((n - 1) % 3 != 0));
    assert_false(mqd_conf_bits_get(a, n)); /* past the table: never set */
    /* swap carries one row's flag each way and leaves the rest */
    assert_int_equal(mqd_conf_bits_swap(&a, &b, 0), 0);
    assert_false(mqd_conf_bits_get(a, 0));
    assert_true(mqd_conf_bits_get(b, 0));
    assert_true(mqd_conf_bits_get(a, 3));
    assert_false(mqd_conf_bits_get(b, 3));
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_global_rows_past_64),
        cmocka_unit_test(test_topic_flags),
        cmocka_unit_test(test_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
