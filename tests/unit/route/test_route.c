/* Tests for the address grammar and Kafka-compatible key hashing. */
#include "config.h"
#include "route/route.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

static int parse(const char *s, mqd_addr_t *a)
{
    memset(a, 0x5a, sizeof(*a));
    return mqd_addr_parse(s, strlen(s), a);
}

static void test_topic(void **state)
{
    mqd_addr_t a;
    assert_int_equal(parse("orders", &a), 0);
    assert_int_equal(a.kind, MQD_ADDR_TOPIC);
    assert_string_equal(a.topic, "orders");
    assert_int_equal(parse("Orders.v2_x~y:z@w$-", &a), 0);
    assert_string_equal(a.topic, "Orders.v2_x~y:z@w$-");
    /* the fixed words are ordinary topic names on their own */
    assert_int_equal(parse("Partitions", &a), 0);
    assert_string_equal(a.topic, "Partitions");
}

static void test_partition(void **state)
{
    mqd_addr_t a;
    assert_int_equal(parse("T/Partitions/3", &a), 0);
    assert_int_equal(a.kind, MQD_ADDR_PARTITION);
    assert_string_equal(a.topic, "T");
    assert_int_equal(a.partition, 3);
    assert_int_equal(parse("T/partitions/0", &a), 0);
    assert_int_equal(a.partition, 0);
    assert_int_equal(parse("T/PARTITIONS/2147483647", &a), 0);
    assert_int_equal(a.partition, 2147483647u);
    assert_int_equal(parse("T/Partitions/007", &a), 0);
    assert_int_equal(a.partition, 7);
    assert_int_equal(parse("T/Partitions/2147483648", &a), MQD_EINVAL);
    assert_int_equal(parse("T/Partitions/99999999999999999999999", &a), MQD_EINVAL);
    assert_int_equal(parse("T/Partitions/-1", &a), MQD_EINVAL);
    assert_int_equal(parse("T/Partitions/+1", &a), MQD_EINVAL);
    assert_int_equal(parse("T/Partitions/ 1", &a), MQD_EINVAL);
    assert_int_equal(parse("T/Partitions/1 ", &a), MQD_EINVAL);
    assert_int_equal(parse("T/Partitions/0x1", &a), MQD_EINVAL);
    assert_int_equal(parse("T/Partitions/", &a), MQD_EINVAL);
    assert_int_equal(parse("T/Partitions", &a), MQD_EINVAL);
    assert_int_equal(parse("T/Partitions/1/2", &a), MQD_EINVAL);
    assert_int_equal(parse("T/Partition/1", &a), MQD_EINVAL);
}

static void test_group(void **state)
{
    mqd_addr_t a;
    assert_int_equal(parse("T/ConsumerGroups/$Default", &a), 0);
    assert_int_equal(a.kind, MQD_ADDR_GROUP);
    assert_string_equal(a.topic, "T");
    assert_string_equal(a.group, "$default");
    assert_int_equal(parse("Tx/consumergroups/MyGroup/partitions/12", &a), 0);
    assert_int_equal(a.kind, MQD_ADDR_GROUP_PARTITION);
    assert_string_equal(a.topic, "Tx");
    assert_string_equal(a.group, "mygroup");
    assert_int_equal(a.partition, 12);
    assert_int_equal(parse("T/ConsumerGroups", &a), MQD_EINVAL);
    assert_int_equal(parse("T/ConsumerGroups/", &a), MQD_EINVAL);
    assert_int_equal(parse("T/ConsumerGroups/g/Partitions", &a), MQD_EINVAL);
    assert_int_equal(parse("T/ConsumerGroups/g/Partitions/x", &a), MQD_EINVAL);
    assert_int_equal(parse("T/ConsumerGroups/g/Other/1", &a), MQD_EINVAL);
    assert_int_equal(parse("T/ConsumerGroups/g h", &a), MQD_EINVAL);
    assert_int_equal(parse("T/ConsumerGroups/..", &a), MQD_EINVAL);
    assert_int_equal(parse("T/ConsumerGroups/g/Partitions/1/x", &a), MQD_EINVAL);
}

static void test_dlq(void **state)
{
    mqd_addr_t a;
    assert_int_equal(parse("T/$DeadLetterQueue", &a), 0);
    assert_int_equal(a.kind, MQD_ADDR_TOPIC);
    assert_string_equal(a.topic, "T/$DeadLetterQueue");
    assert_int_equal(parse("T/$DeadLetterQueue/Partitions/4", &a), 0);
    assert_int_equal(a.kind, MQD_ADDR_PARTITION);
    assert_string_equal(a.topic, "T/$DeadLetterQueue");
    assert_int_equal(a.partition, 4);
    assert_int_equal(parse("T/$DeadLetterQueue/ConsumerGroups/G/Partitions/1", &a), 0);
    assert_int_equal(a.kind, MQD_ADDR_GROUP_PARTITION);
    assert_string_equal(a.topic, "T/$DeadLetterQueue");
    assert_string_equal(a.group, "g");
    /* topic names are case-sensitive, and a DLQ has no DLQ of its own */
    assert_int_equal(parse("T/$deadletterqueue", &a), MQD_EINVAL);
    assert_int_equal(parse("T/$DeadLetterQueue/$DeadLetterQueue", &a), MQD_EINVAL);
    assert_int_equal(parse("$DeadLetterQueue", &a), 0); /* a plain (odd) topic name */
}

static void test_management(void **state)
{
    mqd_addr_t a;
    assert_int_equal(parse("$management", &a), 0);
    assert_int_equal(a.kind, MQD_ADDR_MANAGEMENT);
    assert_int_equal(parse("$Management", &a), 0);
    assert_int_equal(a.kind, MQD_ADDR_MANAGEMENT);
    assert_int_equal(parse("$management/Partitions/0", &a), MQD_EINVAL);
}

static void test_invalid(void **state)
{
    mqd_addr_t a, before;
    static const char *bad[] = {
        "", "/", "T/", "/T", "T//Partitions/1", ".", "..", "a b", "T\\x", "T#",
        "T/Other", "T/Partitions/1/", "é", "T/ConsumerGroups/g/Partitions/1/Partitions/2",
    };
    for (size_t i = 0; i < MQD_ARRAY_LEN(bad); i++) {
        memset(&a, 0x5a, sizeof(a));
        before = a;
        assert_int_equal(mqd_addr_parse(bad[i], strlen(bad[i]), &a), MQD_EINVAL);
        /* out-parameters are written only on success */
        assert_memory_equal(&a, &before, sizeof(a));
    }
    /* an embedded NUL is a bad character, not a terminator */
    assert_int_equal(mqd_addr_parse("T\0x", 3, &a), MQD_EINVAL);
    /* len bounds the parse: the rest of the string is not looked at */
    assert_int_equal(mqd_addr_parse("T/Partitions/12", 14, &a), 0);
    assert_int_equal(a.partition, 1);
    assert_int_equal(mqd_addr_parse(NULL, 0, &a), MQD_EINVAL);
}

static void test_lengths(void **state)
{
    char buf[600];
    mqd_addr_t a;

    memset(buf, 'x', 255);
    buf[255] = '\0';
    assert_int_equal(parse(buf, &a), 0);
    assert_int_equal(strlen(a.topic), 255);
    buf[255] = 'x';
    buf[256] = '\0';
    assert_int_equal(parse(buf, &a), MQD_EINVAL);
    /* 238 + "/$DeadLetterQueue" (17) = 255 fits; one more does not */
    memset(buf, 'x', 238);
    strcpy(buf + 238, "/$DeadLetterQueue");
    assert_int_equal(parse(buf, &a), 0);
    assert_int_equal(strlen(a.topic), 255);
    memset(buf, 'x', 239);
    strcpy(buf + 239, "/$DeadLetterQueue");
    assert_int_equal(parse(buf, &a), MQD_EINVAL);
    /* a 255-byte group fits, a 256-byte one does not */
    strcpy(buf, "T/ConsumerGroups/");
    memset(buf + 17, 'G', 255);
    buf[17 + 255] = '\0';
    assert_int_equal(parse(buf, &a), 0);
    assert_int_equal(strlen(a.group), 255);
    assert_int_equal(a.group[0], 'g');
    buf[17 + 255] = 'G';
    buf[17 + 256] = '\0';
    assert_int_equal(parse(buf, &a), MQD_EINVAL);
}

static void test_topic_name_valid(void **state)
{
    assert_true(mqd_topic_name_valid("a", 1));
    assert_true(mqd_topic_name_valid("T/$DeadLetterQueue", 18));
    assert_true(mqd_topic_name_valid("...", 3));
    assert_false(mqd_topic_name_valid("", 0));
    assert_false(mqd_topic_name_valid(".", 1));
    assert_false(mqd_topic_name_valid("..", 2));
    assert_false(mqd_topic_name_valid("a/b", 3));
    assert_false(mqd_topic_name_valid("/$DeadLetterQueue", 17));
    assert_false(mqd_topic_name_valid("a/$DeadLetterQueue/x", 20));
    assert_false(mqd_topic_name_valid("a/b/$DeadLetterQueue", 20));
    assert_false(mqd_topic_name_valid("a b", 3));
    assert_false(mqd_topic_name_valid(NULL, 0));
}

static void test_murmur2_kafka_vectors(void **state)
{
    /* Kafka's UtilsTest.testMurmur2 (values as signed 32-bit). */
    static const struct {
        const char *key;
        int32_t hash;
    } v[] = {
        {"21", -973932308},
        {"foobar", -790332482},
        {"a-little-bit-long-string", -985981536},
        {"a-little-bit-longer-string", -1486304829},
        {"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
        {"abc", 479470107},
    };
    for (size_t i = 0; i < MQD_ARRAY_LEN(v); i++)
        assert_int_equal((int32_t)mqd_murmur2(v[i].key, strlen(v[i].key)), v[i].hash);
}

static void test_partition_choice(void **state)
{
    assert_int_equal(mqd_route_key_partition("abc", 3, 6), (479470107u & 0x7fffffffu) % 6);
    /* negative hashes are masked, not negated (Kafka's toPositive) */
    assert_int_equal(mqd_route_key_partition("21", 2, 7),
                     ((uint32_t)-973932308 & 0x7fffffffu) % 7);
    assert_int_equal(mqd_route_key_partition("foobar", 6, 1), 0);
    assert_int_equal(mqd_route_key_partition("foobar", 6, 0), 0);
    for (uint32_t n = 1; n < 40; n++)
        assert_true(mqd_route_key_partition("key", 3, n) < n);
    /* every tail length (0..3) is hashed, and the hash is stable */
    assert_int_equal(mqd_murmur2("", 0), mqd_murmur2("", 0));
    assert_int_not_equal(mqd_murmur2("abcd", 4), mqd_murmur2("abcde", 5));
}

/* A reply node is named by its connection and its reply address, is a valid temporary
 * topic name whatever the address holds, and never the topic the address names. */
static void test_reply_node_name(void **state)
{
    (void)state;
    char a[MQD_NAME_MAX + 1], b[MQD_NAME_MAX + 1], c[MQD_NAME_MAX + 1];
    mqd_reply_node_name(1, "secret", 6, a, sizeof a);
    mqd_reply_node_name(2, "secret", 6, b, sizeof b);
    mqd_reply_node_name(1, "secret", 6, c, sizeof c);
    assert_string_equal(a, c);
    assert_string_not_equal(a, b); /* two connections, one reply address: two nodes */
    assert_true(mqd_reply_node_is(a) && mqd_reply_node_is(b));
    assert_true(strncmp(a, "$tmp.r.1.", 9) == 0 && strncmp(b, "$tmp.r.2.", 9) == 0);
    mqd_reply_node_name(1, "secreT", 6, c, sizeof c);
    assert_string_not_equal(a, c);
    assert_true(mqd_topic_name_valid(a, strlen(a)));
    const char *odd = "amqps://host/a b/\n\x01" "$management";
    mqd_reply_node_name(UINT64_MAX, odd, strlen(odd), c, sizeof c);
    assert_true(mqd_topic_name_valid(c, strlen(c)));
    assert_false(mqd_reply_node_is("secret"));
    assert_false(mqd_reply_node_is("$tmp.1.2")); /* a dynamic node */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topic),
        cmocka_unit_test(test_partition),
        cmocka_unit_test(test_group),
        cmocka_unit_test(test_dlq),
        cmocka_unit_test(test_management),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_topic_name_valid),
        cmocka_unit_test(test_murmur2_kafka_vectors),
        cmocka_unit_test(test_partition_choice),
        cmocka_unit_test(test_reply_node_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
