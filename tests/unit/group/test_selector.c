/* Tests for JMS message selectors and start-position expressions. Messages are built
 * with Proton (test-only) and scanned with mqd_msg_scan, as the broker does. */
#include "config.h"
#include "codec/codec.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <proton/codec.h>
#include <proton/message.h>

/* ---- messages ---- */

typedef struct tmsg {
    uint8_t *p; /* exactly n bytes, so ASan sees any read past the end */
    size_t n;
    mqd_msg_info_t mi;
} tmsg_t;

static tmsg_t g_full, g_bare, g_uuid, g_bin;

static void put_key(pn_data_t *d, const char *k)
{
    pn_data_put_string(d, pn_bytes(strlen(k), k));
}

static void put_str(pn_data_t *d, const char *k, const char *v)
{
    put_key(d, k);
    pn_data_put_string(d, pn_bytes(strlen(v), v));
}

static void encode(pn_message_t *m, tmsg_t *out)
{
    size_t cap = 4096, sz = cap;
    char *buf = malloc(cap);

    assert_non_null(buf);
    assert_int_equal(pn_message_encode(m, buf, &sz), 0);
    out->p = malloc(sz);
    assert_non_null(out->p);
    memcpy(out->p, buf, sz);
    out->n = sz;
    free(buf);
    assert_int_equal(mqd_msg_scan(out->p, out->n, &out->mi), 0);
    pn_message_free(m);
}

static void app_props(pn_message_t *m)
{
    pn_data_t *d = pn_message_properties(m);

    pn_data_put_map(d);
    pn_data_enter(d);
    put_str(d, "s", "red");
    put_key(d, "sym"), pn_data_put_symbol(d, pn_bytes(4, "blue"));
    put_key(d, "n"), pn_data_put_int(d, 10);
    put_key(d, "l"), pn_data_put_long(d, 5000000000LL);
    put_key(d, "d"), pn_data_put_double(d, 2.5);
    put_key(d, "f"), pn_data_put_float(d, 1.5f);
    put_key(d, "b"), pn_data_put_bool(d, true);
    put_key(d, "bf"), pn_data_put_bool(d, false);
    put_key(d, "by"), pn_data_put_byte(d, -3);
    put_key(d, "ub"), pn_data_put_ubyte(d, 200);
    put_key(d, "sh"), pn_data_put_short(d, -300);
    put_key(d, "us"), pn_data_put_ushort(d, 60000);
    put_key(d, "ui"), pn_data_put_uint(d, 4000000000u);
    put_key(d, "ul"), pn_data_put_ulong(d, UINT64_MAX);
    put_key(d, "ul2"), pn_data_put_ulong(d, 7);
    put_key(d, "ts"), pn_data_put_timestamp(d, 1700000000000LL);
    put_key(d, "c"), pn_data_put_char(d, 0xe9); /* é: two bytes in UTF-8 */
    put_key(d, "nul"), pn_data_put_null(d);
    put_key(d, "lst"), pn_data_put_list(d);
    pn_data_enter(d), pn_data_put_int(d, 1), pn_data_exit(d);
    put_str(d, "x-key", "hyphen");
    put_str(d, "pct", "50%");
    put_str(d, "und", "a_b");
    put_str(d, "und2", "axb");
    put_str(d, "empty", "");
    put_str(d, "abc", "abcabcabd");
    put_str(d, "utf", "h\xc3\xa9llo");
    put_str(d, "num", "10");
    put_str(d, "s", "second"); /* a duplicate key: the first one wins */
    pn_data_exit(d);
}

static void setup_messages(void)
{
    pn_message_t *m = pn_message();
    pn_atom_t id = { .type = PN_STRING, .u.as_bytes = pn_bytes(5, "msg-1") };
    pn_atom_t corr = { .type = PN_ULONG, .u.as_ulong = 42 };

    pn_message_set_durable(m, true);
    pn_message_set_priority(m, 7);
    pn_message_set_delivery_count(m, 2);
    pn_message_set_id(m, id);
    pn_message_set_correlation_id(m, corr);
    pn_message_set_subject(m, "subj");
    pn_message_set_address(m, "queue/a");
    pn_message_set_reply_to(m, "rq");
    pn_message_set_content_type(m, "text/plain");
    pn_message_set_content_encoding(m, "gzip");
    pn_message_set_group_id(m, "g1");
    pn_message_set_creation_time(m, 1700000000001LL);
    pn_message_set_expiry_time(m, 1700000060000LL);
    app_props(m);
    pn_data_put_string(pn_message_body(m), pn_bytes(4, "body"));
    encode(m, &g_full);

    m = pn_message();
    pn_data_put_string(pn_message_body(m), pn_bytes(4, "body"));
    encode(m, &g_bare);

    m = pn_message();
    pn_atom_t u = { .type = PN_UUID };
    for (int i = 0; i < 16; i++)
        u.u.as_uuid.bytes[i] = (char)(i * 17);
    pn_message_set_id(m, u);
    pn_atom_t b = { .type = PN_BINARY, .u.as_bytes = pn_bytes(3, "\x01\xab\xff") };
    pn_message_set_correlation_id(m, b);
    pn_data_put_string(pn_message_body(m), pn_bytes(4, "body"));
    encode(m, &g_uuid);

    m = pn_message();
    pn_atom_t big = { .type = PN_BINARY, .u.as_bytes = pn_bytes(40, "0123456789012345678901234567890123456789") };
    pn_message_set_id(m, big);
    encode(m, &g_bin);
}

static int group_setup(void **state)
{
    (void)state;
    setup_messages();
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    free(g_full.p), free(g_bare.p), free(g_uuid.p), free(g_bin.p);
    return 0;
}

/* ---- helpers ---- */

static bool match_on(const tmsg_t *m, const char *expr)
{
    mqd_selector_t *sel = NULL;
    char err[128];
    int rc = mqd_selector_compile(expr, strlen(expr), &sel, err, sizeof(err));
    bool r;

    if (rc != 0)
        fail_msg("compile '%s': %d %s", expr, rc, err);
    r = mqd_selector_match(sel, m->p, m->n, &m->mi);
    mqd_selector_free(sel);
    return r;
}

#define YES(e) assert_true(match_on(&g_full, e))
#define NO(e) assert_false(match_on(&g_full, e))

/* The truth value of e: 'T', 'F' or 'U' (neither e nor NOT (e) matches). */
static char tv(const tmsg_t *m, const char *e)
{
    size_t nl = strlen(e) + 8;
    char *neg = malloc(nl);
    char r;

    assert_non_null(neg);
    snprintf(neg, nl, "NOT (%s)", e);
    if (match_on(m, e)) {
        assert_false(match_on(m, neg));
        r = 'T';
    } else {
        r = match_on(m, neg) ? 'F' : 'U';
    }
    free(neg);
    return r;
}

#define TV(e, want) assert_int_equal(tv(&g_full, e), want)

/* Compile must fail with exactly this message. */
static void bad(const char *expr, const char *want)
{
    mqd_selector_t *sel = (mqd_selector_t *)0x1;
    char err[160];
    int rc = mqd_selector_compile(expr, strlen(expr), &sel, err, sizeof(err));

    if (rc != MQD_EINVAL)
        fail_msg("'%s' compiled (rc %d)", expr, rc);
    assert_ptr_equal(sel, (mqd_selector_t *)0x1); /* untouched on error */
    if (want != NULL && strcmp(err, want) != 0)
        fail_msg("'%s': got \"%s\", want \"%s\"", expr, err, want);
}

/* ---- tests ---- */

static void test_comparisons(void **state)
{
    (void)state;
    YES("n = 10"), YES("n <> 11"), YES("n < 11"), YES("n > 9"), YES("n <= 10"), YES("n >= 10");
    NO("n = 11"), NO("n <> 10"), NO("n < 10"), NO("n > 10"), NO("n <= 9"), NO("n >= 11");
    YES("10 = n"), YES("s = 'red'"), YES("s <> 'blue'"), NO("s = 'RED'"), YES("sym = 'blue'");
    YES("empty = ''"), YES("utf = 'h\xc3\xa9llo'"), YES("b = TRUE"), YES("bf = FALSE");
    YES("b <> bf"), YES("'it''s' = 'it''s'"), NO("'it''s' = 'its'");
}

static void test_arithmetic(void **state)
{
    (void)state;
    YES("n + 1 = 11"), YES("n - 1 = 9"), YES("n * 2 = 20"), YES("n / 3 = 3");
    YES("-n = -10"), YES("- -n = 10"), YES("+n = 10"), YES("d * 2 = 5.0"), YES("7 / 2.0 = 3.5");
    YES("1 + 2 * 3 = 7"), YES("(1 + 2) * 3 = 9"), YES("10 - 2 - 3 = 5"), YES("12 / 2 / 3 = 2");
    YES("-n * -2 = 20"), YES("n / -3 = -3");
    YES("l * l > 9.2e18"); /* overflow continues in double */
    YES("-9223372036854775808 < 0"), YES("-9223372036854775808 - 1 < 0");
    TV("n / 0 = 1", 'U'), TV("d / 0 = 1", 'U');
    TV("s + 1 = 1", 'U'), TV("missing + 1 = 1", 'U'), TV("-s = 1", 'U');
    YES("0x1F = 31"), YES("10L = n"), YES("1.5e1 = 15"), YES(".5 = 0.5"), YES("2.5D = d");
    YES("1.5F = f"), YES("7. = 7");
}

static void test_three_valued(void **state)
{
    static const struct {
        const char *e;
        char want;
    } cases[] = {
        /* AND */
        { "T AND T", 'T' }, { "T AND F", 'F' }, { "T AND U", 'U' },
        { "F AND T", 'F' }, { "F AND F", 'F' }, { "F AND U", 'F' },
        { "U AND T", 'U' }, { "U AND F", 'F' }, { "U AND U", 'U' },
        /* OR */
        { "T OR T", 'T' }, { "T OR F", 'T' }, { "T OR U", 'T' },
        { "F OR T", 'T' }, { "F OR F", 'F' }, { "F OR U", 'U' },
        { "U OR T", 'T' }, { "U OR F", 'U' }, { "U OR U", 'U' },
        /* NOT */
        { "NOT T", 'F' }, { "NOT F", 'T' }, { "NOT U", 'U' },
    };
    char e[300];

    (void)state;
    for (size_t i = 0; i < MQD_ARRAY_LEN(cases); i++) {
        size_t o = 0;
        for (const char *c = cases[i].e; *c; c++) {
            const char *rep = *c == 'T' && c[1] != 'R' && (c == cases[i].e || c[-1] == ' ') ? "(n = 10)"
                : *c == 'F' && (c == cases[i].e || c[-1] == ' ') ? "(n = 11)"
                : *c == 'U' && (c == cases[i].e || c[-1] == ' ') ? "(missing = 1)" : NULL;
            if (rep) {
                o += (size_t)snprintf(e + o, sizeof(e) - o, "%s", rep);
            } else {
                e[o++] = *c;
                e[o] = '\0';
            }
        }
        if (tv(&g_full, e) != cases[i].want)
            fail_msg("%s (%s): got %c want %c", cases[i].e, e, tv(&g_full, e), cases[i].want);
    }
    /* comparisons with NULL are UNKNOWN, whatever the operator */
    TV("missing = 1", 'U'), TV("missing <> 1", 'U'), TV("missing < 1", 'U');
    TV("missing = missing", 'U'), TV("nul = 1", 'U'), TV("missing = 'a'", 'U');
    TV("missing", 'U'), TV("b", 'T'), TV("bf", 'F'), TV("s", 'U'), TV("lst = 1", 'U');
    TV("TRUE", 'T'), TV("FALSE", 'F');
}

static void test_is_null(void **state)
{
    (void)state;
    TV("missing IS NULL", 'T'), TV("nul IS NULL", 'T'), TV("n IS NULL", 'F');
    TV("n IS NOT NULL", 'T'), TV("missing IS NOT NULL", 'F'), TV("lst IS NULL", 'T');
    TV("n / 0 IS NULL", 'T'), TV("empty IS NULL", 'F');
}

static void test_like(void **state)
{
    (void)state;
    TV("s LIKE 're%'", 'T'), TV("s LIKE '_ed'", 'T'), TV("s LIKE 'r_'", 'F');
    TV("s LIKE 'red'", 'T'), TV("s LIKE '%'", 'T'), TV("empty LIKE '%'", 'T');
    TV("empty LIKE '_'", 'F'), TV("s LIKE '%e%'", 'T'), TV("s LIKE '%x%'", 'F');
    TV("s NOT LIKE 'b%'", 'T'), TV("s NOT LIKE 'r%'", 'F');
    TV("pct LIKE '50\\%' ESCAPE '\\'", 'T'), TV("pct LIKE '5_!%' ESCAPE '!'", 'T');
    TV("s LIKE 're!%' ESCAPE '!'", 'F');
    TV("und LIKE 'a!_b' ESCAPE '!'", 'T'), TV("und2 LIKE 'a!_b' ESCAPE '!'", 'F');
    TV("und2 LIKE 'a_b'", 'T'), TV("und LIKE 'a!!b' ESCAPE '!'", 'F');
    TV("abc LIKE '%abd'", 'T'), TV("abc LIKE '%a%b%c%'", 'T'), TV("abc LIKE 'a%c%d'", 'T');
    TV("abc LIKE '%abc'", 'F'), TV("abc LIKE '%b_d'", 'F'), TV("abc LIKE '%a_d'", 'T');
    TV("c LIKE '_'", 'T'), TV("utf LIKE 'h_llo'", 'T'), TV("utf LIKE 'h__llo'", 'F');
    TV("missing LIKE 'x'", 'U'), TV("missing NOT LIKE 'x'", 'U'), TV("n LIKE '1%'", 'F');
    TV("JMSType LIKE 'su%'", 'T'), TV("s like 'R%'", 'F');
}

static void test_in(void **state)
{
    char *big;
    size_t o;

    (void)state;
    TV("s IN ('blue', 'red')", 'T'), TV("s IN ('x')", 'F'), TV("s NOT IN ('x')", 'T');
    TV("s NOT IN ('red', 'x')", 'F'), TV("missing IN ('a')", 'U'), TV("missing NOT IN ('a')", 'U');
    TV("n IN (9, 10)", 'T'), TV("n IN (10.0)", 'T'), TV("sym IN ('blue')", 'T');
    TV("num IN (10)", 'F'), TV("n IN ('10')", 'F');
    /* 1,000 items compile; 1,001 do not */
    big = malloc(MQD_SELECTOR_MAX_LEN * 2);
    assert_non_null(big);
    o = (size_t)sprintf(big, "n IN (");
    for (int i = 0; i < 1000; i++)
        o += (size_t)sprintf(big + o, "%s%d", i ? "," : "", i % 9 + 1);
    /* the text would pass 4 KiB with distinct numbers; 1000 one-digit items fit */
    strcpy(big + o, ")");
    assert_true(strlen(big) <= MQD_SELECTOR_MAX_LEN);
    TV(big, 'F');
    big[o] = '\0';
    strcat(big, ",10)");
    bad(big, "col 2007: IN list longer than 1000");
    free(big);
}

static void test_between(void **state)
{
    (void)state;
    TV("n BETWEEN 5 AND 10", 'T'), TV("n BETWEEN 10 AND 10", 'T'), TV("n BETWEEN 11 AND 20", 'F');
    TV("n NOT BETWEEN 11 AND 20", 'T'), TV("n NOT BETWEEN 5 AND 15", 'F');
    TV("d BETWEEN 2 AND 3", 'T'), TV("n BETWEEN 9.5 AND 10.5", 'T');
    TV("n BETWEEN 1 + 1 AND n * 2", 'T'), TV("missing BETWEEN 1 AND 2", 'U');
    TV("n BETWEEN missing AND 5", 'F'), /* 10 <= 5 is FALSE, so FALSE AND UNKNOWN */
    TV("n BETWEEN missing AND 50", 'U'), TV("s BETWEEN 1 AND 2", 'F');
    TV("n BETWEEN 1 AND 20 AND s = 'red'", 'T');
}

static void test_numeric_types(void **state)
{
    (void)state;
    YES("n = 10.0"), YES("d > 2"), YES("d < 3"), YES("f = 1.5"), YES("f < d"), YES("l > n");
    YES("l = 5000000000"), YES("ui = 4000000000"), YES("ul > 1e19"), YES("ul2 = 7");
    YES("us = 60000"), YES("sh = -300"), YES("by = -3"), YES("ub = 200");
    YES("ts = 1700000000000"), YES("c = '\xc3\xa9'"), YES("n + d = 12.5");
}

static void test_type_mismatch(void **state)
{
    (void)state;
    /* JMS 3.8.1.2: comparing unlike types is FALSE (not UNKNOWN) */
    TV("s = 1", 'F'), TV("s <> 1", 'F'), TV("num = 10", 'F'), TV("n = '10'", 'F');
    TV("b = 1", 'F'), TV("b = 'true'", 'F'), TV("s > n", 'F'), TV("s < n", 'F');
    TV("s = b", 'F'), TV("s < n + 0", 'F'), TV("s + 0 < n", 'U');
    TV("NOT (s = 1)", 'T');
}

static void test_fields(void **state)
{
    (void)state;
    YES("JMSPriority = 7"), YES("amqp.priority = 7"), YES("JMSDeliveryMode = 'PERSISTENT'");
    YES("amqp.durable"), YES("amqp.durable = TRUE"), YES("JMSMessageID = 'msg-1'");
    YES("amqp.message_id = 'msg-1'"), YES("JMSCorrelationID = '42'"), YES("amqp.correlation_id = '42'");
    YES("JMSType = 'subj'"), YES("amqp.subject = 'subj'"), YES("amqp.to = 'queue/a'");
    YES("amqp.reply_to = 'rq'"), YES("amqp.content_type = 'text/plain'");
    YES("amqp.content_encoding = 'gzip'"), YES("amqp.group_id = 'g1'"), YES("JMSXGroupID = 'g1'");
    YES("JMSTimestamp = 1700000000001"), YES("amqp.creation_time = 1700000000001");
    YES("JMSExpiration = 1700000060000"), YES("amqp.absolute_expiry_time = 1700000060000");
    YES("JMSXDeliveryCount = 3"), YES("amqp.delivery_count = 2");
    YES("\"x-key\" = 'hyphen'"), YES("\"s\" = 'red'"), NO("jmspriority = 7");
    /* defaults on a message with no header or properties */
    assert_true(match_on(&g_bare, "JMSPriority = 4"));
    assert_true(match_on(&g_bare, "JMSDeliveryMode = 'NON_PERSISTENT'"));
    assert_true(match_on(&g_bare, "NOT amqp.durable"));
    assert_true(match_on(&g_bare, "JMSTimestamp = 0 AND JMSExpiration = 0"));
    assert_true(match_on(&g_bare, "amqp.creation_time IS NULL AND amqp.subject IS NULL"));
    assert_true(match_on(&g_bare, "JMSMessageID IS NULL AND amqp.content_type IS NULL"));
    assert_true(match_on(&g_bare, "s IS NULL"));
    assert_int_equal(tv(&g_bare, "s = 'red'"), 'U');
    /* id forms */
    assert_true(match_on(&g_uuid, "JMSMessageID = '00112233-4455-6677-8899-aabbccddeeff'"));
    assert_true(match_on(&g_uuid, "JMSCorrelationID = '01abff'"));
    assert_true(match_on(&g_bin, "JMSMessageID IS NULL")); /* binary over 32 bytes */
}

static void test_keywords_case(void **state)
{
    (void)state;
    YES("s like 'r%' and n between 1 And 20 or not true");
    YES("missing is null"), YES("n iS nOt NuLl"), YES("True"), YES("NOT false");
    YES("s In ('red')"), YES("s not in ('x')"), YES("pct LIKE '50!%' escape '!'");
}

static void test_long_chains(void **state)
{
    char *e = malloc(MQD_SELECTOR_MAX_LEN + 1);
    size_t o;

    (void)state;
    assert_non_null(e);
    /* left-deep trees of any length: evaluated without recursion */
    o = (size_t)sprintf(e, "n");
    while (o + 8 < MQD_SELECTOR_MAX_LEN - 10)
        o += (size_t)sprintf(e + o, "+n-n");
    sprintf(e + o, " = 10");
    YES(e);
    o = (size_t)sprintf(e, "TRUE");
    while (o + 10 < MQD_SELECTOR_MAX_LEN)
        o += (size_t)sprintf(e + o, " AND b");
    YES(e);
    /* exactly 64 levels of parentheses are fine */
    o = 0;
    for (int i = 0; i < 64; i++)
        e[o++] = '(';
    o += (size_t)sprintf(e + o, "n = 10");
    for (int i = 0; i < 64; i++)
        e[o++] = ')';
    e[o] = '\0';
    YES(e);
    free(e);
}

static void test_errors(void **state)
{
    char *e = malloc(200000);

    (void)state;
    assert_non_null(e);
    bad("s = 'abc", "col 5: unterminated string");
    bad("\"abc = 1", "col 1: unterminated quoted name");
    bad("(n = 1", "col 7: missing ')' for '(' at col 1");
    bad("((n = 1) AND (s = 'x')", "col 23: missing ')' for '(' at col 1");
    bad("n = 1)", "col 6: ')' without '('");
    bad("n ~ 1", "col 3: unexpected character '~'");
    bad("n == 1", "col 4: expected a value, found an operator");
    bad("n != 1", "col 3: unexpected character '!'");
    bad("", "col 1: empty selector");
    bad("   ", "col 4: empty selector");
    bad("n =", "col 4: expected a value, found end of input");
    bad("n = 1 2", "col 7: expected an operator, found a number");
    bad("1 + 2", "col 1: a selector must be a boolean expression");
    bad("'a'", "col 1: a selector must be a boolean expression");
    bad("'a' > 'b'", "col 5: only numbers can be ordered");
    bad("n AND 1", "col 3: AND needs boolean expressions");
    bad("1 OR b", "col 3: OR needs boolean expressions");
    bad("NOT 1", "col 1: NOT needs a boolean expression");
    bad("'a' + 1 = 2", "col 5: arithmetic on a non-number");
    bad("-'a' = 1", "col 1: sign before a non-number");
    bad("n IN ()", "col 7: expected a string or number in the IN list, found ')'");
    bad("n IN ('a' 'b')", "col 11: expected ',' or ')' in the IN list, found a string");
    bad("n IN 'a'", "col 6: expected '(' after IN, found a string");
    bad("s LIKE x", "col 8: expected a pattern string after LIKE, found an identifier");
    bad("s LIKE 'a' ESCAPE 'ab'", "col 19: ESCAPE needs one ASCII character");
    bad("s LIKE 'a!' ESCAPE '!'", "col 8: escape character not followed by %, _ or itself");
    bad("s LIKE 'a!b' ESCAPE '!'", "col 8: escape character not followed by %, _ or itself");
    bad("n BETWEEN 1 OR 2", "col 13: expected AND, found OR");
    bad("'a' BETWEEN 1 AND 2", "col 5: BETWEEN needs numbers");
    bad("n IS 1", "col 6: expected NULL, found a number");
    bad("n NOT 1", "col 7: expected BETWEEN, IN or LIKE after NOT, found a number");
    bad("n = 9223372036854775808", "col 5: integer out of range");
    bad("n = 99999999999999999999", "col 5: integer out of range");
    bad("n = 1x", "col 5: bad number");
    bad("n = 0x", "col 5: bad number");
    bad("n = NULL", "col 5: expected a value, found NULL");
    bad("\"\" = 1", "col 1: empty quoted name");
    bad("n = \x01", "col 5: unexpected byte 0x01");
    bad("n = 1 AND", "col 10: expected a value, found end of input");
    /* depth bombs: errors, not crashes */
    memset(e, '(', 65);
    strcpy(e + 65, "n = 1");
    bad(e, "col 65: nesting deeper than 64");
    memset(e, '(', 4000);
    strcpy(e + 4000, "n = 1");
    bad(e, "col 65: nesting deeper than 64");
    e[0] = '\0';
    for (int i = 0; i < 65; i++)
        strcat(e, "NOT ");
    strcat(e, "b");
    bad(e, "col 257: nesting deeper than 64");
    memset(e, '-', 65);
    strcpy(e + 65, "n = 1");
    bad(e, "col 65: nesting deeper than 64");
    /* too long */
    memset(e, ' ', MQD_SELECTOR_MAX_LEN + 1);
    memcpy(e, "n = 1", 5);
    e[MQD_SELECTOR_MAX_LEN + 1] = '\0';
    bad(e, "col 4097: selector longer than 4096 bytes");
    memset(e, '(', 199999);
    e[199999] = '\0';
    bad(e, NULL);
    /* a short error buffer is never overrun, and errlen 0 is fine */
    {
        mqd_selector_t *sel;
        char small[8];
        assert_int_equal(mqd_selector_compile("n ~", 3, &sel, small, sizeof(small)), MQD_EINVAL);
        assert_string_equal(small, "col 3: ");
        assert_int_equal(mqd_selector_compile("n ~", 3, &sel, NULL, 0), MQD_EINVAL);
        /* not NUL-terminated: only len bytes are read */
        assert_int_equal(mqd_selector_compile("n = 1 garbage", 5, &sel, small, sizeof(small)), 0);
        mqd_selector_free(sel);
    }
    free(e);
}

static void test_bad_info(void **state)
{
    mqd_selector_t *sel;
    mqd_msg_info_t mi = g_full.mi;

    (void)state;
    assert_int_equal(mqd_selector_compile("s = 'red'", 9, &sel, NULL, 0), 0);
    assert_true(mqd_selector_match(sel, g_full.p, g_full.n, &mi));
    /* spans pointing outside the buffer read as absent, never past the end */
    mi.app_props.off = g_full.n - 2;
    assert_false(mqd_selector_match(sel, g_full.p, g_full.n, &mi));
    mi.app_props.off = SIZE_MAX - 1;
    assert_false(mqd_selector_match(sel, g_full.p, g_full.n, &mi));
    mi = g_full.mi;
    assert_false(mqd_selector_match(sel, g_full.p, mi.app_props.off + 10, &mi));
    assert_false(mqd_selector_match(NULL, g_full.p, g_full.n, &mi));
    mqd_selector_free(sel);
    mqd_selector_free(NULL);
}

/* ---- start positions ---- */

static void start_ok(const char *e, mqd_start_kind_t kind, bool incl, int64_t value)
{
    mqd_start_t s;
    int rc = mqd_selector_start_parse(e, strlen(e), &s);

    if (rc != 0)
        fail_msg("'%s': rc %d", e, rc);
    if (s.kind != kind || s.inclusive != incl || (kind != MQD_START_FIRST && kind != MQD_START_LAST && s.value != value))
        fail_msg("'%s': kind %d incl %d value %lld", e, s.kind, s.inclusive, (long long)s.value);
}

static void start_rc(const char *e, int want)
{
    mqd_start_t s = { .kind = 99 };

    assert_int_equal(mqd_selector_start_parse(e, strlen(e), &s), want);
    assert_int_equal(s.kind, 99); /* untouched */
}

static void test_start(void **state)
{
    (void)state;
    start_ok("amqp.annotation.x-opt-offset > '1234'", MQD_START_OFFSET, false, 1234);
    start_ok("amqp.annotation.x-opt-offset >= '1234'", MQD_START_OFFSET, true, 1234);
    start_ok("amqp.annotation.x-opt-offset > 1234", MQD_START_OFFSET, false, 1234);
    start_ok("  amqp.annotation.x-opt-offset>='0'  ", MQD_START_OFFSET, true, 0);
    start_ok("amqp.annotation.x-opt-sequence-number > 55", MQD_START_OFFSET, false, 55);
    start_ok("amqp.annotation.x-opt-sequence-number >= '55'", MQD_START_OFFSET, true, 55);
    start_ok("amqp.annotation.x-opt-enqueued-time > 1700000000000", MQD_START_TIME, false,
             1700000000000LL);
    start_ok("amqp.annotation.x-opt-enqueued-time >= '1700000000000'", MQD_START_TIME, true,
             1700000000000LL);
    start_ok("amqp.annotation.x-opt-offset > '-1'", MQD_START_FIRST, false, 0);
    start_ok("amqp.annotation.x-opt-offset >= -1", MQD_START_FIRST, true, 0);
    start_ok("amqp.annotation.x-opt-offset > '@latest'", MQD_START_LAST, false, 0);
    start_ok("amqp.annotation.x-opt-sequence-number > '@latest'", MQD_START_LAST, false, 0);
    start_ok("AMQP.ANNOTATION.X-OPT-OFFSET > '7'", MQD_START_OFFSET, false, 7);
    start_ok("amqp.annotation.x-opt-offset > '9223372036854775807'", MQD_START_OFFSET, false,
             INT64_MAX);
    /* malformed */
    start_rc("amqp.annotation.x-opt-offset = '5'", MQD_EINVAL);
    start_rc("amqp.annotation.x-opt-offset < '5'", MQD_EINVAL);
    start_rc("amqp.annotation.x-opt-offset > '5", MQD_EINVAL);
    start_rc("amqp.annotation.x-opt-offset > ''", MQD_EINVAL);
    start_rc("amqp.annotation.x-opt-offset >", MQD_EINVAL);
    start_rc("amqp.annotation.x-opt-offset", MQD_EINVAL);
    start_rc("amqp.annotation.x-opt-offset > '5' AND x = 1", MQD_EINVAL);
    start_rc("amqp.annotation.x-opt-offset > 'abc'", MQD_EINVAL);
    start_rc("amqp.annotation.x-opt-offset > '-2'", MQD_EINVAL);
    start_rc("amqp.annotation.x-opt-offset > '9223372036854775808'", MQD_EINVAL);
    start_rc("amqp.annotation.x-opt-offset > '1.5'", MQD_EINVAL);
    start_rc("amqp.annotation.x-opt-enqueued-time > '@latest'", MQD_EINVAL);
    start_rc("amqp.annotation.x-opt-enqueued-time > -1", MQD_EINVAL);
    start_rc("amqp.annotation.x-opt-offset > @lates", MQD_EINVAL);
    /* ordinary selectors */
    start_rc("colour = 'red'", MQD_ENOENT);
    start_rc("", MQD_ENOENT);
    start_rc("amqp.annotation.x-opt-partition-key = 'k'", MQD_ENOENT);
    start_rc("amqp.annotation.x-opt-offsets > 5", MQD_ENOENT);
    start_rc("amqp.annotation.x-opt-offset-x > 5", MQD_ENOENT);
    start_rc("x = 1 AND amqp.annotation.x-opt-offset > 5", MQD_ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comparisons),   cmocka_unit_test(test_arithmetic),
        cmocka_unit_test(test_three_valued),  cmocka_unit_test(test_is_null),
        cmocka_unit_test(test_like),          cmocka_unit_test(test_in),
        cmocka_unit_test(test_between),       cmocka_unit_test(test_numeric_types),
        cmocka_unit_test(test_type_mismatch), cmocka_unit_test(test_fields),
        cmocka_unit_test(test_keywords_case), cmocka_unit_test(test_long_chains),
        cmocka_unit_test(test_errors),        cmocka_unit_test(test_bad_info),
        cmocka_unit_test(test_start),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
