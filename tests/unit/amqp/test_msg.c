/* Tests for the bounded AMQP message scanner, the annotation rewrite and batch split.
 * Messages are built and checked with Proton (test-only: mqd never decodes with it). */
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

/* ---- helpers ---- */

typedef struct enc {
    uint8_t *p;
    size_t n;
} enc_t;

static enc_t encode(pn_message_t *m)
{
    size_t cap = 256;
    enc_t e = { 0 };

    for (;;) {
        size_t sz = cap;
        e.p = realloc(e.p, cap);
        assert_non_null(e.p);
        int rc = pn_message_encode(m, (char *)e.p, &sz);
        if (rc == 0) {
            e.n = sz;
            return e;
        }
        assert_int_equal(rc, PN_OVERFLOW);
        cap *= 2;
    }
}

/* A copy of exactly n bytes, so ASan sees any read past the end. */
static uint8_t *exact(const uint8_t *p, size_t n)
{
    uint8_t *c = malloc(n ? n : 1);
    assert_non_null(c);
    if (n)
        memcpy(c, p, n);
    return c;
}

static bool span_eq(const uint8_t *p, mqd_span_t sp, const char *s)
{
    return sp.len == strlen(s) && memcmp(p + sp.off, s, sp.len) == 0;
}

static void put_sym_key(pn_data_t *d, const char *k)
{
    pn_data_put_symbol(d, pn_bytes(strlen(k), k));
}

static void put_string(pn_data_t *d, const char *s)
{
    pn_data_put_string(d, pn_bytes(strlen(s), s));
}

/* Finds `key` in a decoded annotations map; returns its atom (type PN_NULL if absent)
 * and how many times the key occurs. */
static pn_atom_t ann_get(pn_data_t *d, const char *key, int *times)
{
    pn_atom_t found = { .type = PN_NULL };
    *times = 0;
    pn_data_rewind(d);
    if (!pn_data_next(d) || pn_data_type(d) != PN_MAP)
        return found;
    pn_data_enter(d);
    while (pn_data_next(d)) {
        pn_bytes_t k = pn_data_get_symbol(d);
        bool match = pn_data_type(d) == PN_SYMBOL && k.size == strlen(key) &&
                     memcmp(k.start, key, k.size) == 0;
        assert_true(pn_data_next(d));
        if (match) {
            found = pn_data_get_atom(d);
            (*times)++;
        }
    }
    pn_data_exit(d);
    return found;
}

static size_t map_entries(pn_data_t *d)
{
    pn_data_rewind(d);
    if (!pn_data_next(d) || pn_data_type(d) != PN_MAP)
        return 0;
    return pn_data_get_map(d) / 2;
}

static bool atom_str_eq(pn_atom_t a, pn_type_t t, const char *s)
{
    return a.type == t && a.u.as_bytes.size == strlen(s) &&
           memcmp(a.u.as_bytes.start, s, a.u.as_bytes.size) == 0;
}

/* Counts top-level sections with the given descriptor code, decoding with Proton
 * (independent of the scanner under test). */
static int count_sections(const uint8_t *p, size_t n, uint8_t code)
{
    pn_data_t *d = pn_data(0);
    size_t at = 0;
    int c = 0;

    while (at < n) {
        pn_data_clear(d);
        ssize_t r = pn_data_decode(d, (const char *)p + at, n - at);
        assert_true(r > 0);
        at += (size_t)r;
        pn_data_rewind(d);
        assert_true(pn_data_next(d));
        assert_int_equal(pn_data_type(d), PN_DESCRIBED);
        pn_data_enter(d);
        assert_true(pn_data_next(d));
        if (pn_data_type(d) == PN_ULONG && pn_data_get_ulong(d) == code)
            c++;
    }
    pn_data_free(d);
    return c;
}

static mqd_msg_ann_t std_ann(void)
{
    mqd_msg_ann_t a = { .partition_id = 3, .offset = 1234567890123LL,
                        .enqueued_ms = 1700000000123LL };
    return a;
}

/* Annotates e, decodes the result into a new message (caller frees), and checks the
 * annotations mqd adds; the result bytes are returned in *res. */
static pn_message_t *annotate_decode(enc_t e, const mqd_msg_ann_t *a, mqd_buf_t *res)
{
    mqd_msg_info_t mi;
    pn_message_t *m = pn_message();
    int times;
    pn_atom_t v;
    char num[32];

    assert_int_equal(mqd_msg_scan(e.p, e.n, &mi), 0);
    assert_int_equal(mqd_msg_annotate(e.p, e.n, &mi, a, res), 0);
    assert_int_equal(pn_message_decode(m, (const char *)res->p, res->len), 0);
    pn_data_t *ann = pn_message_annotations(m);
    v = ann_get(ann, "x-opt-partition-id", &times);
    assert_int_equal(times, 1);
    assert_int_equal(v.type, PN_INT);
    assert_int_equal(v.u.as_int, a->partition_id);
    v = ann_get(ann, "x-opt-offset", &times);
    assert_int_equal(times, 1);
    snprintf(num, sizeof(num), "%lld", (long long)a->offset);
    assert_true(atom_str_eq(v, PN_STRING, num));
    v = ann_get(ann, "x-opt-sequence-number", &times);
    assert_int_equal(times, 1);
    assert_int_equal(v.type, PN_LONG);
    assert_int_equal(v.u.as_long, a->offset);
    v = ann_get(ann, "x-opt-enqueued-time", &times);
    assert_int_equal(times, 1);
    assert_int_equal(v.type, PN_TIMESTAMP);
    assert_int_equal(v.u.as_timestamp, a->enqueued_ms);
    /* exactly one message-annotations section, and the result scans cleanly */
    assert_int_equal(count_sections(res->p, res->len, 0x72), 1);
    return m;
}

/* The result keeps everything after message-annotations byte for byte. */
static void assert_tail_same(enc_t e, const mqd_buf_t *res)
{
    mqd_msg_info_t a, b;
    size_t ta, tb;

    assert_int_equal(mqd_msg_scan(e.p, e.n, &a), 0);
    assert_int_equal(mqd_msg_scan(res->p, res->len, &b), 0);
    ta = a.message_ann.len ? a.message_ann.off + a.message_ann.len
                           : (a.properties.len ? a.properties.off : a.body_off);
    tb = b.message_ann.off + b.message_ann.len;
    assert_int_equal(e.n - ta, res->len - tb);
    assert_memory_equal(e.p + ta, res->p + tb, e.n - ta);
    assert_int_equal(a.body_off - ta, b.body_off - tb);
}

/* ---- scan ---- */

static void test_scan_full(void **state)
{
    pn_message_t *m = pn_message();
    mqd_msg_info_t mi;

    pn_message_set_durable(m, true);
    pn_message_set_priority(m, 7);
    pn_message_set_ttl(m, 60000);
    pn_message_set_first_acquirer(m, true);
    pn_message_set_delivery_count(m, 5);
    pn_data_put_map(pn_message_instructions(m));
    pn_data_enter(pn_message_instructions(m));
    put_sym_key(pn_message_instructions(m), "x-da");
    pn_data_put_int(pn_message_instructions(m), 1);
    pn_data_exit(pn_message_instructions(m));
    pn_data_t *ma = pn_message_annotations(m);
    pn_data_put_map(ma);
    pn_data_enter(ma);
    put_sym_key(ma, "x-other");
    pn_data_put_int(ma, 9);
    put_sym_key(ma, "x-opt-partition-key");
    put_string(ma, "user-42");
    pn_data_exit(ma);
    pn_message_set_id(m, (pn_msgid_t){ .type = PN_ULONG, .u.as_ulong = 77 });
    pn_message_set_address(m, "orders/Partitions/1");
    pn_message_set_subject(m, "subj");
    pn_message_set_reply_to(m, "replies");
    pn_message_set_correlation_id(m, (pn_msgid_t){ .type = PN_STRING,
                                                  .u.as_bytes = pn_bytes(3, "cid") });
    pn_message_set_content_type(m, "text/plain");
    pn_message_set_expiry_time(m, 1700000001000LL);
    pn_message_set_creation_time(m, 1700000000000LL);
    pn_message_set_group_id(m, "grp");
    pn_data_t *ap = pn_message_properties(m);
    pn_data_put_map(ap);
    pn_data_enter(ap);
    put_string(ap, "colour");
    put_string(ap, "red");
    pn_data_exit(ap);
    pn_message_set_inferred(m, true);
    pn_data_put_binary(pn_message_body(m), pn_bytes(5, "hello"));
    enc_t e = encode(m);

    memset(&mi, 0, sizeof(mi));
    assert_int_equal(mqd_msg_scan(e.p, e.n, &mi), 0);
    assert_true(mi.durable);
    assert_int_equal(mi.priority, 7);
    assert_true(mi.has_ttl);
    assert_int_equal(mi.ttl_ms, 60000);
    assert_true(mi.first_acquirer);
    assert_int_equal(mi.delivery_count, 5);
    assert_int_equal(mi.header.off, 0);
    assert_int_equal(mi.delivery_ann.off, mi.header.off + mi.header.len);
    assert_int_equal(mi.message_ann.off, mi.delivery_ann.off + mi.delivery_ann.len);
    assert_int_equal(mi.properties.off, mi.message_ann.off + mi.message_ann.len);
    assert_int_equal(mi.app_props.off, mi.properties.off + mi.properties.len);
    assert_int_equal(mi.body_off, mi.app_props.off + mi.app_props.len);
    assert_int_equal(mi.footer.len, 0);
    assert_int_equal(e.p[mi.body_off + 2], 0x75);
    /* message-id is the encoded value: a ulong 77 in any ulong encoding */
    assert_true(mi.message_id.len == 2 || mi.message_id.len == 9);
    assert_int_equal(e.p[mi.message_id.off + mi.message_id.len - 1], 77);
    assert_true(span_eq(e.p, mi.to, "orders/Partitions/1"));
    assert_true(span_eq(e.p, mi.subject, "subj"));
    assert_true(span_eq(e.p, mi.reply_to, "replies"));
    assert_int_equal(mi.correlation_id.len, 5);
    assert_int_equal(e.p[mi.correlation_id.off], 0xa1);
    assert_memory_equal(e.p + mi.correlation_id.off + 2, "cid", 3);
    assert_true(span_eq(e.p, mi.group_id, "grp"));
    assert_int_equal(mi.absolute_expiry_time, 1700000001000LL);
    assert_int_equal(mi.creation_time, 1700000000000LL);
    assert_true(span_eq(e.p, mi.partition_key, "user-42"));
    free(e.p);
    pn_message_free(m);
}

static void test_scan_defaults(void **state)
{
    pn_message_t *m = pn_message();
    mqd_msg_info_t mi;

    put_string(pn_message_body(m), "just a body");
    enc_t e = encode(m);
    assert_int_equal(mqd_msg_scan(e.p, e.n, &mi), 0);
    assert_false(mi.durable);
    assert_int_equal(mi.priority, 4);
    assert_false(mi.has_ttl);
    assert_false(mi.first_acquirer);
    assert_int_equal(mi.delivery_count, 0);
    /* Proton always writes an empty header and properties (list0) */
    assert_int_equal(mi.header.len, 4);
    assert_int_equal(mi.message_ann.len, 0);
    assert_int_equal(mi.properties.len, 4);
    assert_int_equal(mi.message_id.len, 0);
    assert_int_equal(mi.to.len, 0);
    assert_int_equal(mi.partition_key.len, 0);
    assert_int_equal(mi.absolute_expiry_time, 0);
    assert_int_equal(mi.creation_time, 0);
    assert_int_equal(mi.body_off, 8);
    free(e.p);
    pn_message_free(m);
}

/* Symbolic section descriptors, a symbol partition key and a footer, by hand. */
static void test_scan_symbolic(void **state)
{
    static const uint8_t msg[] = {
        0x00, 0xa3, 16, 'a', 'm', 'q', 'p', ':', 'h', 'e', 'a', 'd', 'e', 'r', ':', 'l', 'i',
        's', 't', 0xc0, 0x03, 0x02, 0x41, 0x40,
        0x00, 0x53, 0x72, 0xc1, 0x1a, 0x02, 0xa3, 19, 'x', '-', 'o', 'p', 't', '-', 'p', 'a',
        'r', 't', 'i', 't', 'i', 'o', 'n', '-', 'k', 'e', 'y', 0xa3, 0x02, 'k', '1',
        0x00, 0xa3, 17, 'a', 'm', 'q', 'p', ':', 'a', 'm', 'q', 'p', '-', 'v', 'a', 'l', 'u',
        'e', ':', '*', 0x54, 0x05,
        0x00, 0x53, 0x78, 0xc1, 0x01, 0x00,
    };
    mqd_msg_info_t mi;
    uint8_t *c = exact(msg, sizeof(msg));

    assert_int_equal(mqd_msg_scan(c, sizeof(msg), &mi), 0);
    assert_true(mi.durable);
    assert_int_equal(mi.header.off, 0);
    assert_int_equal(mi.header.len, 24);
    assert_true(span_eq(c, mi.partition_key, "k1"));
    assert_int_equal(mi.body_off, 24 + 31);
    assert_int_equal(mi.footer.len, 6);
    assert_int_equal(mi.footer.off, sizeof(msg) - 6);
    free(c);
}

/* ---- bodies and annotate ---- */

enum { B_DATA, B_STRING, B_INT, B_MAP, B_LIST, B_SEQUENCE, B_COUNT };

static void set_body(pn_message_t *m, int kind)
{
    pn_data_t *b = pn_message_body(m);
    switch (kind) {
    case B_DATA:
        pn_message_set_inferred(m, true);
        pn_data_put_binary(b, pn_bytes(4, "\x00\x01\x02\x03"));
        break;
    case B_STRING: put_string(b, "a string body"); break;
    case B_INT: pn_data_put_int(b, -42); break;
    case B_MAP:
        pn_data_put_map(b);
        pn_data_enter(b);
        put_string(b, "k");
        pn_data_put_list(b);
        pn_data_enter(b);
        pn_data_put_int(b, 1);
        pn_data_exit(b);
        pn_data_exit(b);
        break;
    case B_LIST:
    case B_SEQUENCE:
        pn_message_set_inferred(m, kind == B_SEQUENCE);
        pn_data_put_list(b);
        pn_data_enter(b);
        put_string(b, "x");
        pn_data_put_double(b, 1.5);
        pn_data_exit(b);
        break;
    }
}

static void check_body_kind(const uint8_t *p, size_t n, int kind)
{
    mqd_msg_info_t mi;
    static const uint8_t code[B_COUNT] = { 0x75, 0x77, 0x77, 0x77, 0x77, 0x76 };
    assert_int_equal(mqd_msg_scan(p, n, &mi), 0);
    assert_true(mi.body_off < n);
    assert_int_equal(p[mi.body_off + 2], code[kind]);
}

/* Every body type x {with, without} header/properties/app-props/annotations. */
static void test_annotate_bodies(void **state)
{
    for (int kind = 0; kind < B_COUNT; kind++) {
        for (int extras = 0; extras < 16; extras++) {
            pn_message_t *m = pn_message();
            mqd_buf_t res = { 0 };
            mqd_msg_ann_t a = std_ann();
            int times;

            if (extras & 1) {
                pn_message_set_durable(m, true);
                pn_message_set_priority(m, 9);
            }
            if (extras & 2)
                pn_message_set_subject(m, "s");
            if (extras & 4) {
                pn_data_put_map(pn_message_properties(m));
                pn_data_enter(pn_message_properties(m));
                put_string(pn_message_properties(m), "p");
                pn_data_put_long(pn_message_properties(m), 5);
                pn_data_exit(pn_message_properties(m));
            }
            if (extras & 8) {
                pn_data_t *ma = pn_message_annotations(m);
                pn_data_put_map(ma);
                pn_data_enter(ma);
                put_sym_key(ma, "x-keep");
                put_string(ma, "kept");
                pn_data_exit(ma);
            }
            set_body(m, kind);
            enc_t e = encode(m);
            check_body_kind(e.p, e.n, kind);
            pn_message_t *d = annotate_decode(e, &a, &res);
            check_body_kind(res.p, res.len, kind);
            assert_tail_same(e, &res);
            assert_int_equal(pn_message_is_durable(d), (extras & 1) != 0);
            if (extras & 1)
                assert_int_equal(pn_message_get_priority(d), 9);
            if (extras & 2)
                assert_string_equal(pn_message_get_subject(d), "s");
            if (extras & 8) {
                pn_atom_t v = ann_get(pn_message_annotations(d), "x-keep", &times);
                assert_true(atom_str_eq(v, PN_STRING, "kept"));
                assert_int_equal(map_entries(pn_message_annotations(d)), 5);
            } else {
                assert_int_equal(map_entries(pn_message_annotations(d)), 4);
            }
            ann_get(pn_message_annotations(d), "x-opt-partition-key", &times);
            assert_int_equal(times, 0);
            pn_message_free(d);
            pn_message_free(m);
            mqd_buf_free(&res);
            free(e.p);
        }
    }
}

static pn_message_t *msg_with_key(const char *key)
{
    pn_message_t *m = pn_message();
    pn_data_t *ma = pn_message_annotations(m);

    pn_data_put_map(ma);
    pn_data_enter(ma);
    put_sym_key(ma, "x-first");
    pn_data_put_int(ma, 7);
    if (key) {
        put_sym_key(ma, "x-opt-partition-key");
        put_string(ma, key);
    }
    /* a stale broker annotation (a re-delivered or re-published copy) */
    put_sym_key(ma, "x-opt-offset");
    put_string(ma, "999");
    put_sym_key(ma, "x-last");
    pn_data_put_bool(ma, true);
    pn_data_exit(ma);
    pn_message_set_group_id(m, "gid");
    put_string(pn_message_body(m), "body");
    return m;
}

static void test_annotate_partition_key(void **state)
{
    int times;
    pn_atom_t v;

    for (int have = 0; have < 2; have++) {
        for (int give = 0; give < 2; give++) {
            pn_message_t *m = msg_with_key(have ? "old-key" : NULL);
            mqd_buf_t res = { 0 };
            mqd_msg_ann_t a = std_ann();
            enc_t e = encode(m);
            if (give) {
                a.pkey = (const uint8_t *)"new-key";
                a.pkey_len = 7;
            }
            pn_message_t *d = annotate_decode(e, &a, &res);
            pn_data_t *ma = pn_message_annotations(d);
            v = ann_get(ma, "x-opt-partition-key", &times);
            if (give)
                assert_true(atom_str_eq(v, PN_STRING, "new-key"));
            else if (have)
                assert_true(atom_str_eq(v, PN_STRING, "old-key"));
            assert_int_equal(times, (give || have) ? 1 : 0);
            v = ann_get(ma, "x-first", &times);
            assert_int_equal(v.type, PN_INT);
            assert_int_equal(v.u.as_int, 7);
            v = ann_get(ma, "x-last", &times);
            assert_int_equal(v.type, PN_BOOL);
            assert_true(v.u.as_bool);
            assert_int_equal(map_entries(ma), 6 + ((give || have) ? 1 : 0));
            assert_string_equal(pn_message_get_group_id(d), "gid");
            assert_tail_same(e, &res);
            pn_message_free(d);
            pn_message_free(m);
            mqd_buf_free(&res);
            free(e.p);
        }
    }
}

/* pkey_only (a batch's inner message stored with the outer key): only the key is
 * written or replaced; the fixed x-opt entries are not added, other entries stay, and a
 * message without annotations gets a section holding the key alone. */
static void test_annotate_pkey_only(void **state)
{
    int times;
    pn_atom_t v;

    for (int have = 0; have < 3; have++) {
        pn_message_t *m = have == 2 ? pn_message() : msg_with_key(have ? "inner-key" : NULL);
        if (have == 2)
            put_string(pn_message_body(m), "plain");
        enc_t e = encode(m);
        mqd_msg_info_t mi, o;
        mqd_buf_t res = { 0 };
        assert_int_equal(mqd_msg_scan(e.p, e.n, &mi), 0);
        mqd_msg_ann_t a = { .pkey = (const uint8_t *)"outer", .pkey_len = 5,
                            .delivery_count = mi.delivery_count, .pkey_only = true };
        assert_int_equal(mqd_msg_annotate(e.p, e.n, &mi, &a, &res), 0);
        assert_int_equal(mqd_msg_scan(res.p, res.len, &o), 0);
        assert_true(span_eq(res.p, o.partition_key, "outer"));
        pn_message_t *d = pn_message();
        assert_int_equal(pn_message_decode(d, (const char *)res.p, res.len), 0);
        pn_data_t *ma = pn_message_annotations(d);
        v = ann_get(ma, "x-opt-partition-key", &times);
        assert_int_equal(times, 1);
        assert_true(atom_str_eq(v, PN_STRING, "outer"));
        v = ann_get(ma, "x-opt-offset", &times); /* the stale one stays (replaced on delivery) */
        assert_int_equal(times, have == 2 ? 0 : 1);
        if (have != 2)
            assert_true(atom_str_eq(v, PN_STRING, "999"));
        ann_get(ma, "x-opt-partition-id", &times);
        assert_int_equal(times, 0);
        assert_int_equal(map_entries(ma), have == 2 ? 1 : 4);
        pn_message_free(d);
        pn_message_free(m);
        mqd_buf_free(&res);
        free(e.p);
    }
}

static void test_annotate_dlq_and_negative(void **state)
{
    pn_message_t *m = msg_with_key("k");
    mqd_buf_t res = { 0 };
    mqd_msg_ann_t a = std_ann();
    int times;
    enc_t e = encode(m);

    a.partition_id = -1;
    a.offset = -5;
    a.enqueued_ms = 0;
    a.dlq_reason = "rejected";
    a.dlq_origin = "T/Partitions/2@17";
    pn_message_t *d = annotate_decode(e, &a, &res);
    pn_atom_t v = ann_get(pn_message_annotations(d), "x-opt-deadletter-reason", &times);
    assert_true(atom_str_eq(v, PN_STRING, "rejected"));
    v = ann_get(pn_message_annotations(d), "x-opt-deadletter-source", &times);
    assert_true(atom_str_eq(v, PN_STRING, "T/Partitions/2@17"));
    pn_message_free(d);

    /* annotating the annotated copy again replaces, never duplicates */
    enc_t e2 = { .p = exact(res.p, res.len), .n = res.len };
    a.dlq_reason = "again";
    d = annotate_decode(e2, &a, &res);
    v = ann_get(pn_message_annotations(d), "x-opt-deadletter-reason", &times);
    assert_int_equal(times, 1);
    assert_true(atom_str_eq(v, PN_STRING, "again"));
    v = ann_get(pn_message_annotations(d), "x-opt-deadletter-source", &times);
    assert_int_equal(times, 1);
    assert_int_equal(map_entries(pn_message_annotations(d)), 9);
    pn_message_free(d);
    pn_message_free(m);
    mqd_buf_free(&res);
    free(e.p);
    free(e2.p);
}

/* Service Bus' x-opt-message-state (an int) and the scheduled time the scanner reads:
 * written when given, replaced (not duplicated) when the message already has one. */
static void test_annotate_message_state(void **state)
{
    pn_message_t *m = pn_message();
    pn_data_t *ma = pn_message_annotations(m);
    pn_data_put_map(ma);
    pn_data_enter(ma);
    put_sym_key(ma, "x-opt-scheduled-enqueue-time");
    pn_data_put_timestamp(ma, 1800000000123LL);
    put_sym_key(ma, "x-opt-message-state");
    pn_data_put_int(ma, 0);
    pn_data_exit(ma);
    put_string(pn_message_body(m), "later");
    enc_t e = encode(m);
    mqd_msg_info_t mi;
    assert_int_equal(mqd_msg_scan(e.p, e.n, &mi), 0);
    assert_int_equal(mi.scheduled_ms, 1800000000123LL);
    assert_int_equal(mqd_msg_scan_stored(e.p, e.n, &mi), 0);
    assert_int_equal(mi.scheduled_ms, 1800000000123LL);
    mqd_buf_t res = { 0 };
    mqd_msg_ann_t a = std_ann();
    a.message_state = 2;
    int times;
    pn_message_t *d = annotate_decode(e, &a, &res);
    pn_atom_t v = ann_get(pn_message_annotations(d), "x-opt-message-state", &times);
    assert_int_equal(times, 1);
    assert_int_equal(v.type, PN_INT);
    assert_int_equal(v.u.as_int, 2);
    assert_int_equal(map_entries(pn_message_annotations(d)), 6);
    pn_message_free(d);
    pn_message_free(m);
    mqd_buf_free(&res);
    free(e.p);
}

/* Placement: created right after header and delivery-annotations, before properties. */
static void test_annotate_placement(void **state)
{
    pn_message_t *m = pn_message();
    mqd_msg_info_t mi, out;
    mqd_buf_t res = { 0 };
    mqd_msg_ann_t a = std_ann();

    pn_message_set_durable(m, true);
    pn_data_put_map(pn_message_instructions(m));
    pn_data_enter(pn_message_instructions(m));
    put_sym_key(pn_message_instructions(m), "x-da");
    pn_data_put_int(pn_message_instructions(m), 1);
    pn_data_exit(pn_message_instructions(m));
    pn_message_set_subject(m, "s");
    put_string(pn_message_body(m), "b");
    enc_t e = encode(m);
    assert_int_equal(mqd_msg_scan(e.p, e.n, &mi), 0);
    assert_int_equal(mi.message_ann.len, 0);
    assert_int_equal(mqd_msg_annotate(e.p, e.n, &mi, &a, &res), 0);
    assert_int_equal(mqd_msg_scan(res.p, res.len, &out), 0);
    size_t before = mi.delivery_ann.off + mi.delivery_ann.len;
    assert_memory_equal(res.p, e.p, before);
    assert_int_equal(out.message_ann.off, before);
    assert_int_equal(out.properties.off, out.message_ann.off + out.message_ann.len);
    assert_memory_equal(res.p + out.properties.off, e.p + mi.properties.off,
                        e.n - mi.properties.off);
    assert_true(out.durable);
    mqd_buf_free(&res);
    pn_message_free(m);
    free(e.p);
}

/* Large existing annotations need map32; small ones map8. */
static void test_annotate_map32(void **state)
{
    char big[400];
    pn_message_t *m = pn_message();
    mqd_buf_t res = { 0 };
    mqd_msg_ann_t a = std_ann();
    mqd_msg_info_t out;
    int times;

    memset(big, 'z', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    pn_data_t *ma = pn_message_annotations(m);
    pn_data_put_map(ma);
    pn_data_enter(ma);
    put_sym_key(ma, "x-big");
    put_string(ma, big);
    pn_data_exit(ma);
    put_string(pn_message_body(m), "b");
    enc_t e = encode(m);
    pn_message_t *d = annotate_decode(e, &a, &res);
    pn_atom_t v = ann_get(pn_message_annotations(d), "x-big", &times);
    assert_true(atom_str_eq(v, PN_STRING, big));
    assert_int_equal(mqd_msg_scan(res.p, res.len, &out), 0);
    assert_int_equal(res.p[out.message_ann.off + 3], 0xd1);
    pn_message_free(d);

    /* a long partition key alone also pushes past map8 */
    mqd_msg_ann_t a2 = std_ann();
    a2.pkey = (const uint8_t *)big;
    a2.pkey_len = strlen(big);
    pn_message_t *m2 = pn_message();
    put_string(pn_message_body(m2), "b");
    enc_t e2 = encode(m2);
    d = annotate_decode(e2, &a2, &res);
    v = ann_get(pn_message_annotations(d), "x-opt-partition-key", &times);
    assert_true(atom_str_eq(v, PN_STRING, big));
    assert_int_equal(mqd_msg_scan(res.p, res.len, &out), 0);
    assert_int_equal(res.p[out.message_ann.off + 3], 0xd1);
    pn_message_free(d);

    /* and small stays map8 */
    a2.pkey_len = 3;
    d = annotate_decode(e2, &a2, &res);
    assert_int_equal(mqd_msg_scan(res.p, res.len, &out), 0);
    assert_int_equal(res.p[out.message_ann.off + 3], 0xc1);
    pn_message_free(d);
    pn_message_free(m);
    pn_message_free(m2);
    mqd_buf_free(&res);
    free(e.p);
    free(e2.p);
}

static void test_delivery_count(void **state)
{
    mqd_msg_ann_t a = std_ann();
    mqd_buf_t res = { 0 };

    /* existing header: other fields kept */
    pn_message_t *m = pn_message();
    pn_message_set_durable(m, true);
    pn_message_set_priority(m, 6);
    pn_message_set_ttl(m, 5000);
    pn_message_set_delivery_count(m, 1);
    pn_message_set_subject(m, "s");
    put_string(pn_message_body(m), "b");
    enc_t e = encode(m);
    a.delivery_count = 300;
    pn_message_t *d = annotate_decode(e, &a, &res);
    assert_int_equal(pn_message_get_delivery_count(d), 300);
    assert_true(pn_message_is_durable(d));
    assert_int_equal(pn_message_get_priority(d), 6);
    assert_int_equal(pn_message_get_ttl(d), 5000);
    assert_string_equal(pn_message_get_subject(d), "s");
    assert_int_equal(count_sections(res.p, res.len, 0x70), 1);
    pn_message_free(d);

    /* same count: the header is copied as is */
    mqd_msg_info_t mi;
    assert_int_equal(mqd_msg_scan(e.p, e.n, &mi), 0);
    a.delivery_count = 1;
    assert_int_equal(mqd_msg_annotate(e.p, e.n, &mi, &a, &res), 0);
    assert_memory_equal(res.p, e.p, mi.header.len);

    /* no header (Proton always writes one, so by hand): one is created first */
    static const uint8_t nohdr[] = { 0x00, 0x53, 0x73, 0x45, 0x00, 0x53, 0x77, 0xa1, 0x01, 'b' };
    enc_t e2 = { .p = exact(nohdr, sizeof(nohdr)), .n = sizeof(nohdr) };
    a.delivery_count = 2;
    d = annotate_decode(e2, &a, &res);
    assert_int_equal(pn_message_get_delivery_count(d), 2);
    assert_false(pn_message_is_durable(d));
    assert_int_equal(pn_message_get_priority(d), 4);
    assert_int_equal(res.p[2], 0x70);
    pn_message_free(d);
    a.delivery_count = 0;
    assert_int_equal(mqd_msg_scan(e2.p, e2.n, &mi), 0);
    assert_int_equal(mqd_msg_annotate(e2.p, e2.n, &mi, &a, &res), 0);
    assert_int_equal(res.p[2], 0x72); /* no header added for an unchanged count */

    pn_message_free(m);
    mqd_buf_free(&res);
    free(e.p);
    free(e2.p);
}

/* A redelivery says first-acquirer false; the other header fields stay as they were. */
static void test_first_acquirer(void **state)
{
    mqd_msg_ann_t a = std_ann();
    mqd_buf_t res = { 0 };
    mqd_msg_info_t mi;

    pn_message_t *m = pn_message();
    pn_message_set_durable(m, true);
    pn_message_set_priority(m, 7);
    pn_message_set_first_acquirer(m, true);
    put_string(pn_message_body(m), "b");
    enc_t e = encode(m);
    assert_int_equal(mqd_msg_scan(e.p, e.n, &mi), 0);
    assert_true(mi.first_acquirer);
    a.delivery_count = 0; /* released before: the count stays, first-acquirer goes false */
    a.redelivered = true;
    pn_message_t *d = annotate_decode(e, &a, &res);
    assert_false(pn_message_is_first_acquirer(d));
    assert_int_equal(pn_message_get_delivery_count(d), 0);
    assert_true(pn_message_is_durable(d));
    assert_int_equal(pn_message_get_priority(d), 7);
    assert_int_equal(count_sections(res.p, res.len, 0x70), 1);
    pn_message_free(d);
    /* not a redelivery: first-acquirer true is delivered as stored */
    a.redelivered = false;
    assert_int_equal(mqd_msg_annotate(e.p, e.n, &mi, &a, &res), 0);
    assert_memory_equal(res.p, e.p, mi.header.len);

    /* no header and released before: one is created, first-acquirer false, count 0 */
    static const uint8_t nohdr[] = { 0x00, 0x53, 0x77, 0xa1, 0x01, 'b' };
    enc_t e2 = { .p = exact(nohdr, sizeof(nohdr)), .n = sizeof(nohdr) };
    a.redelivered = true;
    d = annotate_decode(e2, &a, &res);
    assert_int_equal(res.p[2], 0x70);
    assert_int_equal(res.p[3], 0xc0);
    assert_int_equal(res.p[6 + 3], 0x42); /* list8 code size count, null x3, false */
    assert_false(pn_message_is_first_acquirer(d));
    assert_int_equal(pn_message_get_delivery_count(d), 0);
    pn_message_free(d);
    free(e2.p);

    pn_message_free(m);
    mqd_buf_free(&res);
    free(e.p);
}

/* A short header list (only `durable`) is padded with nulls up to delivery-count. */
static void test_delivery_count_short_header(void **state)
{
    static const uint8_t msg[] = {
        0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0x41,
        0x00, 0x53, 0x77, 0xa1, 0x01, 'b',
    };
    mqd_msg_ann_t a = std_ann();
    mqd_buf_t res = { 0 };
    mqd_msg_info_t mi;
    enc_t e = { .p = exact(msg, sizeof(msg)), .n = sizeof(msg) };

    assert_int_equal(mqd_msg_scan(e.p, e.n, &mi), 0);
    assert_true(mi.durable);
    a.delivery_count = 70000;
    pn_message_t *d = annotate_decode(e, &a, &res);
    assert_int_equal(pn_message_get_delivery_count(d), 70000);
    assert_true(pn_message_is_durable(d));
    assert_int_equal(mqd_msg_scan(res.p, res.len, &mi), 0);
    assert_int_equal(mi.delivery_count, 70000);
    pn_message_free(d);
    mqd_buf_free(&res);
    free(e.p);
}

/* ---- malformed input ---- */

static enc_t full_message(void)
{
    pn_message_t *m = msg_with_key("key");
    pn_message_set_durable(m, true);
    pn_message_set_delivery_count(m, 2);
    pn_message_set_id(m, (pn_msgid_t){ .type = PN_STRING, .u.as_bytes = pn_bytes(2, "id") });
    pn_data_put_map(pn_message_properties(m));
    pn_data_enter(pn_message_properties(m));
    put_string(pn_message_properties(m), "a");
    pn_data_put_array(pn_message_properties(m), false, PN_INT);
    pn_data_enter(pn_message_properties(m));
    pn_data_put_int(pn_message_properties(m), 1);
    pn_data_put_int(pn_message_properties(m), 2);
    pn_data_exit(pn_message_properties(m));
    pn_data_exit(pn_message_properties(m));
    enc_t e = encode(m);
    pn_message_free(m);
    return e;
}

static void test_truncated_everywhere(void **state)
{
    enc_t e = full_message();
    mqd_msg_info_t mi, before;
    mqd_buf_t res = { 0 };
    mqd_msg_ann_t a = std_ann();
    int ok = 0;

    a.delivery_count = 9;
    for (size_t len = 0; len < e.n; len++) {
        uint8_t *c = exact(e.p, len);
        memset(&mi, 0xa5, sizeof(mi));
        before = mi;
        int rc = mqd_msg_scan(c, len, &mi);
        assert_true(rc == 0 || rc == MQD_EINVAL);
        if (rc == 0) {
            ok++; /* cut at a section boundary */
            assert_int_equal(mqd_msg_annotate(c, len, &mi, &a, &res), 0);
        } else {
            assert_memory_equal(&mi, &before, sizeof(mi));
        }
        free(c);
    }
    /* boundaries: after header, message-annotations, properties, app-properties */
    assert_int_equal(ok, 4);
    assert_int_equal(mqd_msg_scan(e.p, e.n, &mi), 0);
    mqd_buf_free(&res);
    free(e.p);
}

static uint8_t *list_bomb(int depth, size_t *n)
{
    /* amqp-value: depth levels of list8 [ ... [null] ... ] */
    size_t total = 3 + (size_t)depth * 3 + 1;
    uint8_t *p = malloc(total);
    size_t at = 0;
    assert_non_null(p);
    p[at++] = 0x00, p[at++] = 0x53, p[at++] = 0x77;
    for (int i = 0; i < depth; i++) {
        size_t rest = (size_t)(depth - i - 1) * 3 + 1;
        p[at++] = 0xc0;
        p[at++] = (uint8_t)(rest + 1);
        p[at++] = 1;
    }
    p[at++] = 0x40;
    *n = at;
    return p;
}

static uint8_t *described_bomb(int depth, size_t *n)
{
    /* amqp-value: described(described(...(null) null) ...) */
    size_t total = 3 + (size_t)depth * 2 + 1;
    uint8_t *p = malloc(total);
    size_t at = 0;
    p[at++] = 0x00, p[at++] = 0x53, p[at++] = 0x77;
    for (int i = 0; i < depth; i++)
        p[at++] = 0x00, p[at++] = 0x40; /* descriptor null, value: the next level */
    p[at++] = 0x40;
    *n = at;
    return p;
}

static void test_bombs(void **state)
{
    mqd_msg_info_t mi;
    size_t n;
    uint8_t *p;

    p = list_bomb(MQD_MSG_MAX_DEPTH, &n);
    assert_int_equal(mqd_msg_scan(p, n, &mi), 0);
    free(p);
    p = list_bomb(MQD_MSG_MAX_DEPTH + 1, &n);
    assert_int_equal(mqd_msg_scan(p, n, &mi), MQD_EINVAL);
    free(p);
    p = list_bomb(80, &n);
    assert_int_equal(mqd_msg_scan(p, n, &mi), MQD_EINVAL);
    free(p);
    p = described_bomb(MQD_MSG_MAX_DEPTH, &n);
    assert_int_equal(mqd_msg_scan(p, n, &mi), 0);
    free(p);
    p = described_bomb(10000, &n);
    assert_int_equal(mqd_msg_scan(p, n, &mi), MQD_EINVAL);
    free(p);
}

/* mqd_msg_scan_stored reads what mqd_msg_scan reads from a checked message, stays
 * bounded on bytes it does not check, and steps over nesting by size. */
static void test_scan_stored(void **state)
{
    enc_t e = full_message();
    mqd_msg_info_t deep, shallow;
    mqd_buf_t r1 = { 0 }, r2 = { 0 };
    mqd_msg_ann_t a = std_ann();
    size_t n;

    memset(&deep, 0, sizeof(deep));
    memset(&shallow, 0xa5, sizeof(shallow));
    assert_int_equal(mqd_msg_scan(e.p, e.n, &deep), 0);
    assert_int_equal(mqd_msg_scan_stored(e.p, e.n, &shallow), 0);
    assert_memory_equal(&deep, &shallow, sizeof(deep));
    /* the same annotated output from either scan */
    a.delivery_count = 3;
    assert_int_equal(mqd_msg_annotate(e.p, e.n, &deep, &a, &r1), 0);
    assert_int_equal(mqd_msg_annotate(e.p, e.n, &shallow, &a, &r2), 0);
    assert_int_equal(r1.len, r2.len);
    assert_memory_equal(r1.p, r2.p, r1.len);
    /* cut anywhere: accepted exactly at the same section boundaries, else refused */
    int ok = 0;
    for (size_t len = 0; len < e.n; len++) {
        uint8_t *c = exact(e.p, len);
        int rd = mqd_msg_scan(c, len, &deep), rs = mqd_msg_scan_stored(c, len, &shallow);
        assert_int_equal(rd, rs);
        ok += rs == 0;
        free(c);
    }
    assert_int_equal(ok, 4);
    /* nesting too deep for the network scan is stepped over by its size */
    uint8_t *p = list_bomb(80, &n);
    assert_int_equal(mqd_msg_scan(p, n, &deep), MQD_EINVAL);
    assert_int_equal(mqd_msg_scan_stored(p, n, &shallow), 0);
    assert_int_equal(shallow.body_off, 0);
    free(p);
    /* a header list claiming 5 items but holding 1: refused by the full scan; the stored
     * scan reads the one item and stops at the list's end */
    static const uint8_t lie[] = { 0x00, 0x53, 0x70, 0xc0, 0x02, 0x05, 0x41,
                                   0x00, 0x53, 0x77, 0x40 };
    uint8_t *c = exact(lie, sizeof(lie));
    assert_int_equal(mqd_msg_scan(c, sizeof(lie), &deep), MQD_EINVAL);
    assert_int_equal(mqd_msg_scan_stored(c, sizeof(lie), &shallow), 0);
    assert_true(shallow.durable);
    assert_int_equal(shallow.delivery_count, 0);
    assert_int_equal(shallow.body_off, 7);
    free(c);
    mqd_buf_free(&r1);
    mqd_buf_free(&r2);
    free(e.p);
}

static void expect_scan(const uint8_t *msg, size_t n, int want)
{
    mqd_msg_info_t mi;
    uint8_t *c = exact(msg, n);
    assert_int_equal(mqd_msg_scan(c, n, &mi), want);
    free(c);
}

#define EXPECT(want, ...)                                      \
    do {                                                       \
        static const uint8_t m_[] = { __VA_ARGS__ };           \
        expect_scan(m_, sizeof(m_), want);                     \
    } while (0)

static void test_lengths_and_types(void **state)
{
    /* well-formed references */
    EXPECT(0, 0x00, 0x53, 0x77, 0x40);
    EXPECT(0, 0x00, 0x53, 0x77, 0xb1, 0, 0, 0, 2, 'h', 'i');
    EXPECT(0, 0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x77, 0x45);
    /* an array of 2^32-1 nulls in 6 bytes: valid and skipped at once */
    EXPECT(0, 0x00, 0x53, 0x77, 0xf0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x40);
    /* array with a described element constructor */
    EXPECT(0, 0x00, 0x53, 0x77, 0xe0, 0x07, 0x02, 0x00, 0x53, 0x01, 0x50, 0x01, 0x02);
    /* array of arrays */
    EXPECT(0, 0x00, 0x53, 0x77, 0xe0, 0x08, 0x02, 0xe0, 0x02, 0x01, 0x43, 0x02, 0x01, 0x43);
    /* lengths past the end */
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77, 0xb1, 0xff, 0xff, 0xff, 0xff, 'h');
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77, 0xa1, 0x05, 'h');
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77, 0xd0, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0x40);
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77, 0xc0, 0x05, 0x01, 0x40);
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77, 0x70, 0x01);
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77, 0xf0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x70);
    /* count larger than the items present, and items beyond the size */
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77, 0xc0, 0x02, 0x02, 0x40);
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77, 0xc0, 0x03, 0x01, 0x40, 0x40);
    /* odd map count, unknown constructor, descriptor-only, empty */
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77, 0xc1, 0x02, 0x01, 0x40);
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77, 0x99);
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77);
    EXPECT(MQD_EINVAL, 0x00);
    EXPECT(MQD_EINVAL, 0x40);
    /* unknown section descriptors */
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x79, 0x40);
    EXPECT(MQD_EINVAL, 0x00, 0x80, 0, 0, 0, 1, 0, 0, 0, 0x77, 0x40);
    EXPECT(MQD_EINVAL, 0x00, 0xa3, 0x03, 'f', 'o', 'o', 0x40);
    /* section value of the wrong type */
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x70, 0xc1, 0x01, 0x00);
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x72, 0xc0, 0x01, 0x00);
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x75, 0xa1, 0x00);
    /* trailing garbage after a valid message */
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77, 0x40, 0x40);
}

static void test_order(void **state)
{
    /* properties before header */
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x73, 0x45, 0x00, 0x53, 0x70, 0x45, 0x00, 0x53, 0x77, 0x40);
    /* two headers, two message-annotations */
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x70, 0x45, 0x00, 0x53, 0x70, 0x45);
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x72, 0xc1, 0x01, 0x00, 0x00, 0x53, 0x72, 0xc1, 0x01, 0x00);
    /* mixed bodies; two amqp-values; annotations after the body */
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x75, 0xa0, 0x00, 0x00, 0x53, 0x77, 0x40);
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x76, 0x45, 0x00, 0x53, 0x75, 0xa0, 0x00);
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77, 0x40, 0x00, 0x53, 0x77, 0x40);
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x77, 0x40, 0x00, 0x53, 0x72, 0xc1, 0x01, 0x00);
    /* footer then body */
    EXPECT(MQD_EINVAL, 0x00, 0x53, 0x78, 0xc1, 0x01, 0x00, 0x00, 0x53, 0x77, 0x40);
    /* several data / sequence sections are fine */
    EXPECT(0, 0x00, 0x53, 0x75, 0xa0, 0x00, 0x00, 0x53, 0x75, 0xa0, 0x01, 0x07);
    EXPECT(0, 0x00, 0x53, 0x76, 0x45, 0x00, 0x53, 0x76, 0x45, 0x00, 0x53, 0x78, 0xc1, 0x01, 0x00);
    /* header only (no body) is accepted: body_off == n */
    EXPECT(0, 0x00, 0x53, 0x70, 0x45);
}

static void test_annotate_rejects_bad_info(void **state)
{
    enc_t e = full_message();
    mqd_msg_info_t mi;
    mqd_buf_t res = { 0 };
    mqd_msg_ann_t a = std_ann();

    assert_int_equal(mqd_msg_scan(e.p, e.n, &mi), 0);
    mqd_msg_info_t bad = mi;
    bad.message_ann.len += 1000;
    assert_int_equal(mqd_msg_annotate(e.p, e.n, &bad, &a, &res), MQD_EINVAL);
    bad = mi;
    bad.message_ann.off += 1;
    assert_int_equal(mqd_msg_annotate(e.p, e.n, &bad, &a, &res), MQD_EINVAL);
    assert_int_equal(res.len, 0);
    mqd_buf_free(&res);
    free(e.p);
}

/* ---- batches ---- */

typedef struct collected {
    enc_t parts[8];
    int n;
    int stop_at;
} collected_t;

static int collect(const uint8_t *inner, size_t len, void *arg)
{
    collected_t *c = arg;
    if (c->n == c->stop_at)
        return -77;
    c->parts[c->n].p = exact(inner, len);
    c->parts[c->n].n = len;
    c->n++;
    return 0;
}

static void test_batch_split(void **state)
{
    enc_t inner[3];
    mqd_buf_t outer = { 0 };
    static const uint8_t ma[] = {
        0x00, 0x53, 0x72, 0xc1, 0x1a, 0x02, 0xa3, 19, 'x', '-', 'o', 'p', 't', '-', 'p', 'a',
        'r', 't', 'i', 't', 'i', 'o', 'n', '-', 'k', 'e', 'y', 0xa1, 0x02, 'p', 'k',
    };

    assert_int_equal(mqd_buf_reserve(&outer, sizeof(ma)), 0);
    memcpy(outer.p, ma, sizeof(ma));
    outer.len = sizeof(ma);
    for (int i = 0; i < 3; i++) {
        pn_message_t *m = pn_message();
        char body[16];
        snprintf(body, sizeof(body), "event-%d", i);
        put_string(pn_message_body(m), body);
        if (i == 1)
            pn_message_set_subject(m, "second");
        inner[i] = encode(m);
        pn_message_free(m);
        /* data section: vbin32 to exercise the wide form too */
        uint8_t hdr[8] = { 0x00, 0x53, 0x75, 0xb0 };
        hdr[4] = 0, hdr[5] = 0, hdr[6] = (uint8_t)(inner[i].n >> 8), hdr[7] = (uint8_t)inner[i].n;
        assert_int_equal(mqd_buf_reserve(&outer, sizeof(hdr) + inner[i].n), 0);
        memcpy(outer.p + outer.len, hdr, sizeof(hdr));
        memcpy(outer.p + outer.len + sizeof(hdr), inner[i].p, inner[i].n);
        outer.len += sizeof(hdr) + inner[i].n;
    }
    mqd_msg_info_t mi;
    assert_int_equal(mqd_msg_scan(outer.p, outer.len, &mi), 0);
    assert_true(span_eq(outer.p, mi.partition_key, "pk"));

    collected_t c = { .stop_at = -1 };
    assert_int_equal(mqd_msg_batch_split(outer.p, outer.len, collect, &c), 0);
    assert_int_equal(c.n, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(c.parts[i].n, inner[i].n);
        assert_memory_equal(c.parts[i].p, inner[i].p, inner[i].n);
        pn_message_t *d = pn_message();
        assert_int_equal(pn_message_decode(d, (const char *)c.parts[i].p, c.parts[i].n), 0);
        if (i == 1)
            assert_string_equal(pn_message_get_subject(d), "second");
        pn_message_free(d);
        free(c.parts[i].p);
        free(inner[i].p);
    }
    /* a callback error stops the split and is returned */
    collected_t c2 = { .stop_at = 1 };
    assert_int_equal(mqd_msg_batch_split(outer.p, outer.len, collect, &c2), -77);
    assert_int_equal(c2.n, 1);
    free(c2.parts[0].p);
    mqd_buf_free(&outer);

    /* a batch whose body is not data, or that has no body, is refused before any cb */
    collected_t c3 = { .stop_at = -1 };
    static const uint8_t val[] = { 0x00, 0x53, 0x77, 0x40 };
    static const uint8_t none[] = { 0x00, 0x53, 0x70, 0x45 };
    assert_int_equal(mqd_msg_batch_split(val, sizeof(val), collect, &c3), MQD_EINVAL);
    assert_int_equal(mqd_msg_batch_split(none, sizeof(none), collect, &c3), MQD_EINVAL);
    assert_int_equal(c3.n, 0);
}

static void test_buf(void **state)
{
    mqd_buf_t b = { 0 };
    assert_int_equal(mqd_buf_reserve(&b, 0), 0);
    assert_int_equal(mqd_buf_reserve(&b, 10), 0);
    assert_true(b.cap >= 10);
    b.len = 10;
    assert_int_equal(mqd_buf_reserve(&b, 5000), 0);
    assert_true(b.cap - b.len >= 5000);
    assert_int_equal(mqd_buf_reserve(&b, SIZE_MAX - 4), MQD_ENOMEM);
    mqd_buf_free(&b);
    assert_null(b.p);
    assert_int_equal(b.cap, 0);
    mqd_buf_free(&b);
    mqd_buf_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scan_full),
        cmocka_unit_test(test_scan_defaults),
        cmocka_unit_test(test_scan_symbolic),
        cmocka_unit_test(test_annotate_bodies),
        cmocka_unit_test(test_annotate_partition_key),
        cmocka_unit_test(test_annotate_dlq_and_negative),
        cmocka_unit_test(test_annotate_message_state),
        cmocka_unit_test(test_annotate_placement),
        cmocka_unit_test(test_annotate_map32),
        cmocka_unit_test(test_delivery_count),
        cmocka_unit_test(test_first_acquirer),
        cmocka_unit_test(test_delivery_count_short_header),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_bombs),
        cmocka_unit_test(test_scan_stored),
        cmocka_unit_test(test_lengths_and_types),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_annotate_rejects_bad_info),
        cmocka_unit_test(test_batch_split),
        cmocka_unit_test(test_annotate_pkey_only),
        cmocka_unit_test(test_buf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
