/* The etcd v3 gateway codec (src/cluster/etcd_json.c, etcd_parse.c, member_json.c):
 * - base64 both ways, binary safe, and refusal of what is not base64;
 * - request bodies: keys and values base64, prefix range_end, 64-bit numbers as strings,
 *   txn compares (CREATE == 0, MOD == rev) with success and failure ops;
 * - replies as etcd 3.4 writes them: numbers as strings (2^61-sized lease ids exact),
 *   zero fields left out (no kvs, no succeeded, a PUT event without type), an expired
 *   keepalive without TTL, errors with their gRPC code; malformed ones refused;
 * - watch messages (created, events, progress, compaction cancel) and the chunk splitter:
 *   half a message per chunk, two in one, CRLF, one byte at a time, the size limit. */
#include "config.h"
#include "cluster/cluster_int.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static void test_b64(void **state)
{
    const char bin[] = {'/', 'm', 'q', 'd', 0, (char)0xff, '\n'};
    char *e, *d;
    size_t n;
    assert_int_equal(mqd_etcd_b64_encode(bin, sizeof bin, &e), 0);
    assert_string_equal(e, "L21xZAD/Cg==");
    assert_int_equal(mqd_etcd_b64_decode(e, strlen(e), &d, &n), 0);
    assert_int_equal(n, sizeof bin);
    assert_memory_equal(d, bin, sizeof bin);
    assert_int_equal(d[n], '\0');
    free(e);
    free(d);
    assert_int_equal(mqd_etcd_b64_encode("", 0, &e), 0);
    assert_string_equal(e, "");
    assert_int_equal(mqd_etcd_b64_decode(e, 0, &d, &n), 0);
    assert_int_equal(n, 0);
    free(e);
    free(d);
    static const char *const bad[] = {
        "L21xZ", "L21x*A==", "L2 1xZA==", "L21x-A==", "=AAA", "L21xZA==L21x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(mqd_etcd_b64_decode(bad[i], strlen(bad[i]), &d, &n), MQD_EINVAL);
}

static json_t *load(char *s)
{
    assert_non_null(s);
    json_t *o = json_loads(s, 0, NULL);
    free(s);
    assert_non_null(o);
    return o;
}

static const char *str(const json_t *o, const char *path)
{
    const json_t *v = json_object_get(o, path);
    assert_true(json_is_string(v));
    return json_string_value(v);
}

static void test_requests(void **state)
{
    json_t *o = load(mqd_etcd_json_put("/mqd/nodes/1", 12, "{}", 2, INT64_C(7587869426012341000)));
    assert_string_equal(str(o, "key"), "L21xZC9ub2Rlcy8x");
    assert_string_equal(str(o, "value"), "e30=");
    assert_string_equal(str(o, "lease"), "7587869426012341000");
    json_decref(o);
    o = load(mqd_etcd_json_put("k", 1, "v", 1, 0));
    assert_null(json_object_get(o, "lease")); /* no lease: left out, as etcd does */
    json_decref(o);
    /* prefix: the last byte raised by one ("/mqd/" -> "/mqd0") */
    o = load(mqd_etcd_json_range("/mqd/", 5, true));
    assert_string_equal(str(o, "key"), "L21xZC8=");
    assert_string_equal(str(o, "range_end"), "L21xZDA=");
    json_decref(o);
    o = load(mqd_etcd_json_range("a\xff\xff", 3, true)); /* trailing 0xff: "b" */
    assert_string_equal(str(o, "range_end"), "Yg==");
    json_decref(o);
    o = load(mqd_etcd_json_delete("k", 1, false));
    assert_null(json_object_get(o, "range_end"));
    json_decref(o);
    o = load(mqd_etcd_json_lease_grant(3));
    assert_string_equal(str(o, "TTL"), "3");
    json_decref(o);
    o = load(mqd_etcd_json_lease_id(INT64_C(0x694d870a6b834c0a)));
    assert_string_equal(str(o, "ID"), "7587869426012343306");
    json_decref(o);
    o = load(mqd_etcd_json_watch("/mqd/nodes/", 11, true, 42));
    json_t *cr = json_object_get(o, "create_request");
    assert_string_equal(str(cr, "start_revision"), "42");
    assert_string_equal(str(cr, "range_end"), "L21xZC9ub2RlczA=");
    assert_true(json_is_true(json_object_get(cr, "progress_notify")));
    json_decref(o);
}

static void test_txn(void **state)
{
    mqd_etcd_cmp_t cmp[2] = {{"/c", 2, MQD_ETCD_CMP_CREATE, 0}, {"/p", 2, MQD_ETCD_CMP_MOD, 99}};
    mqd_etcd_op_t ok[2] = {{MQD_ETCD_OP_PUT, "/c", "{\"id\":1}", 2, 8, 5, false},
                           {MQD_ETCD_OP_DELETE, "/d/", NULL, 3, 0, 0, true}};
    mqd_etcd_op_t ko = {MQD_ETCD_OP_RANGE, "/c", NULL, 2, 0, 0, false};
    mqd_etcd_txn_t t = {cmp, 2, ok, &ko, 2, 1};
    json_t *o = load(mqd_etcd_json_txn(&t));
    json_t *c0 = json_array_get(json_object_get(o, "compare"), 0);
    json_t *c1 = json_array_get(json_object_get(o, "compare"), 1);
    assert_string_equal(str(c0, "target"), "CREATE");
    assert_string_equal(str(c0, "result"), "EQUAL");
    assert_string_equal(str(c0, "create_revision"), "0");
    assert_string_equal(str(c1, "target"), "MOD");
    assert_string_equal(str(c1, "mod_revision"), "99");
    json_t *s = json_object_get(o, "success");
    assert_int_equal(json_array_size(s), 2);
    json_t *put = json_object_get(json_array_get(s, 0), "request_put");
    assert_string_equal(str(put, "value"), "eyJpZCI6MX0=");
    assert_string_equal(str(put, "lease"), "5");
    json_t *del = json_object_get(json_array_get(s, 1), "request_delete_range");
    assert_string_equal(str(del, "range_end"), "L2Qw");
    json_t *f = json_object_get(o, "failure");
    assert_non_null(json_object_get(json_array_get(f, 0), "request_range"));
    json_decref(o);
}

static int parse(mqd_etcd_kind_t k, int status, const char *body, mqd_etcd_reply_t *r)
{
    return mqd_etcd_reply_parse(k, status, body, strlen(body), r);
}

static void test_replies(void **state)
{
    mqd_etcd_reply_t r;
    /* a range as etcd writes it: strings for numbers, the lease near 2^63 exact */
    assert_int_equal(parse(MQD_ETCD_K_RANGE, 200,
                           "{\"header\":{\"cluster_id\":\"14841639068965178418\",\"revision\":"
                           "\"9007199254740993\"},\"kvs\":[{\"key\":\"L21xZC9ub2Rlcy8x\","
                           "\"create_revision\":\"5\",\"mod_revision\":\"6\",\"version\":\"2\","
                           "\"value\":\"e30=\",\"lease\":\"7587869426012343306\"},{\"key\":"
                           "\"YQ==\",\"create_revision\":7}],\"count\":\"2\"}",
                           &r),
                     0);
    assert_int_equal(r.revision, INT64_C(9007199254740993)); /* 2^53 + 1: not via double */
    assert_int_equal(r.n_kvs, 2);
    assert_int_equal(r.count, 2);
    assert_string_equal(r.kvs[0].key, "/mqd/nodes/1");
    assert_int_equal(r.kvs[0].value_len, 2);
    assert_int_equal(r.kvs[0].lease, INT64_C(7587869426012343306));
    assert_int_equal(r.kvs[0].create_revision, 5);
    assert_int_equal(r.kvs[0].mod_revision, 6);
    assert_int_equal(r.kvs[1].value_len, 0); /* empty value: left out */
    assert_int_equal(r.kvs[1].create_revision, 7);
    mqd_etcd_reply_clear(&r);
    /* an empty range has no kvs and no count */
    assert_int_equal(parse(MQD_ETCD_K_RANGE, 200, "{\"header\":{\"revision\":\"3\"}}", &r), 0);
    assert_int_equal(r.n_kvs, 0);
    assert_null(r.kvs);
    mqd_etcd_reply_clear(&r);
    /* a failed txn has no "succeeded"; its failure range answers */
    assert_int_equal(parse(MQD_ETCD_K_TXN, 200,
                           "{\"header\":{\"revision\":\"12\"},\"responses\":[{\"response_range\":"
                           "{\"header\":{},\"kvs\":[{\"key\":\"L2M=\",\"value\":\"eyJpZCI6Mn0=\","
                           "\"create_revision\":\"8\",\"lease\":\"77\"}],\"count\":\"1\"}}]}",
                           &r),
                     0);
    assert_false(r.succeeded);
    assert_int_equal(r.n_kvs, 1);
    assert_string_equal(r.kvs[0].value, "{\"id\":2}");
    assert_int_equal(r.kvs[0].lease, 77);
    mqd_etcd_reply_clear(&r);
    assert_int_equal(parse(MQD_ETCD_K_TXN, 200,
                           "{\"header\":{\"revision\":\"13\"},\"succeeded\":true,\"responses\":"
                           "[{\"response_put\":{\"header\":{\"revision\":\"13\"}}}]}",
                           &r),
                     0);
    assert_true(r.succeeded);
    assert_int_equal(r.revision, 13);
    mqd_etcd_reply_clear(&r);
    /* grant; keepalive alive (wrapped in result) and expired (no TTL) */
    assert_int_equal(parse(MQD_ETCD_K_GRANT, 200,
                           "{\"header\":{},\"ID\":\"7587869426012343306\","
                           "\"TTL\":\"3\"}",
                           &r),
                     0);
    assert_int_equal(r.lease_id, INT64_C(7587869426012343306));
    assert_true(r.has_ttl);
    assert_int_equal(r.ttl, 3);
    mqd_etcd_reply_clear(&r);
    assert_int_equal(
        parse(MQD_ETCD_K_KEEPALIVE, 200,
              "{\"result\":{\"header\":{\"revision\":\"4\"},\"ID\":\"11\",\"TTL\":\"3\"}}", &r),
        0);
    assert_true(r.has_ttl);
    assert_int_equal(r.lease_id, 11);
    mqd_etcd_reply_clear(&r);
    assert_int_equal(parse(MQD_ETCD_K_KEEPALIVE, 200,
                           "{\"result\":{\"header\":{\"revision\":\"4\"},\"ID\":\"11\"}}", &r),
                     0);
    assert_false(r.has_ttl);
    mqd_etcd_reply_clear(&r);
    /* an error: HTTP 400/404 with the gRPC code */
    assert_int_equal(parse(MQD_ETCD_K_PUT, 404,
                           "{\"error\":\"etcdserver: requested lease not "
                           "found\",\"message\":\"etcdserver: requested lease"
                           " not found\",\"code\":5}",
                           &r),
                     MQD_EINVAL);
    assert_int_equal(r.grpc_code, 5);
    assert_string_equal(r.error, "etcdserver: requested lease not found");
    mqd_etcd_reply_clear(&r);
    /* malformed: not JSON, wrong types, a number that is not a whole 64-bit one, bad base64 */
    static const char *const bad[] = {"",
                                      "[]",
                                      "{\"header\":{\"revision\":\"12x\"}}",
                                      "{\"header\":{\"revision\":1.5}}",
                                      "{\"header\":{\"revision\":\"99999999999999999999\"}}",
                                      "{\"kvs\":{}}",
                                      "{\"kvs\":[{\"key\":\"not base64!\"}]}",
                                      "{\"kvs\":[{\"key\":7}]}",
                                      "{\"header\":[]}",
                                      "{\"count\":\" 1\"}",
                                      "{\"a\":1,\"a\":2}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(parse(MQD_ETCD_K_RANGE, 200, bad[i], &r), MQD_ECORRUPT);
        assert_null(r.kvs);
        mqd_etcd_reply_clear(&r);
    }
}

static void test_watch_msgs(void **state)
{
    mqd_etcd_watch_msg_t m;
    const char *created = "{\"result\":{\"header\":{\"revision\":\"20\"},\"created\":true}}";
    assert_int_equal(mqd_etcd_watch_parse(created, strlen(created), &m), 0);
    assert_true(m.created);
    assert_int_equal(m.revision, 20);
    assert_int_equal(m.n_events, 0);
    mqd_etcd_watch_msg_clear(&m);
    /* a PUT event has no "type" (PUT is 0) */
    const char *ev = "{\"result\":{\"header\":{\"revision\":\"22\"},\"events\":[{\"kv\":{\"key\":"
                     "\"L21xZC9ub2Rlcy8y\",\"create_revision\":\"21\",\"mod_revision\":\"21\","
                     "\"version\":\"1\",\"value\":\"e30=\",\"lease\":\"9\"}},{\"type\":\"DELETE\","
                     "\"kv\":{\"key\":\"L21xZC9ub2Rlcy8x\",\"mod_revision\":\"22\"}}]}}";
    assert_int_equal(mqd_etcd_watch_parse(ev, strlen(ev), &m), 0);
    assert_int_equal(m.n_events, 2);
    assert_int_equal(m.types[0], MQD_ETCD_EV_PUT);
    assert_string_equal(m.kvs[0].key, "/mqd/nodes/2");
    assert_int_equal(m.kvs[0].lease, 9);
    assert_int_equal(m.types[1], MQD_ETCD_EV_DELETE);
    assert_string_equal(m.kvs[1].key, "/mqd/nodes/1");
    assert_int_equal(m.kvs[1].mod_revision, 22);
    mqd_etcd_watch_msg_clear(&m);
    const char *prog = "{\"result\":{\"header\":{\"revision\":\"30\"}}}";
    assert_int_equal(mqd_etcd_watch_parse(prog, strlen(prog), &m), 0);
    assert_false(m.created || m.canceled);
    assert_int_equal(m.revision, 30);
    mqd_etcd_watch_msg_clear(&m);
    const char *cmp = "{\"result\":{\"header\":{\"revision\":\"40\"},\"canceled\":true,"
                      "\"compact_revision\":\"35\",\"cancel_reason\":\"mvcc: required revision "
                      "has been compacted\"}}";
    assert_int_equal(mqd_etcd_watch_parse(cmp, strlen(cmp), &m), 0);
    assert_true(m.canceled);
    assert_int_equal(m.compact_revision, 35);
    assert_string_equal(m.error, "mvcc: required revision has been compacted");
    mqd_etcd_watch_msg_clear(&m);
    const char *err = "{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":\"etcdserver: "
                      "no leader\"}}";
    assert_int_equal(mqd_etcd_watch_parse(err, strlen(err), &m), 0);
    assert_true(m.canceled);
    assert_string_equal(m.error, "etcdserver: no leader");
    mqd_etcd_watch_msg_clear(&m);
    static const char *const bad[] = {"{",
                                      "{}",
                                      "{\"result\":[]}",
                                      "{\"result\":{\"events\":[{\"type\":\"PATCH\"}]}}",
                                      "{\"result\":{\"events\":[{\"type\":1,\"kv\":{}}]}}",
                                      "{\"result\":{\"events\":[{\"kv\":{\"key\":\"@@\"}}]}}",
                                      "{\"result\":{\"events\":[7]}}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(mqd_etcd_watch_parse(bad[i], strlen(bad[i]), &m), MQD_ECORRUPT);
        assert_int_equal(m.n_events, 0);
    }
}

typedef struct lines_seen {
    char got[8][128];
    size_t n;
} lines_seen_t;

static int collect(void *arg, const char *line, size_t len)
{
    lines_seen_t *s = arg;
    assert_true(s->n < 8 && len < 128);
    memcpy(s->got[s->n], line, len);
    s->got[s->n++][len] = '\0';
    return 0;
}

static void test_lines(void **state)
{
    const char *stream = "{\"a\":1}\n{\"b\":2}\r\n\n{\"c\":3}\n{\"d\"";
    /* the same stream cut at every point into two chunks, and one byte at a time */
    for (size_t cut = 0; cut <= strlen(stream); cut++) {
        mqd_etcd_lines_t l = {0};
        lines_seen_t s = {.n = 0};
        assert_int_equal(mqd_etcd_lines_feed(&l, stream, cut, collect, &s), 0);
        assert_int_equal(mqd_etcd_lines_feed(&l, stream + cut, strlen(stream) - cut, collect, &s),
                         0);
        assert_int_equal(s.n, 3);
        assert_string_equal(s.got[0], "{\"a\":1}");
        assert_string_equal(s.got[1], "{\"b\":2}");
        assert_string_equal(s.got[2], "{\"c\":3}");
        assert_int_equal(l.len, 4); /* the half message waits for its end */
        assert_int_equal(mqd_etcd_lines_feed(&l, ":4}\n", 4, collect, &s), 0);
        assert_int_equal(s.n, 4);
        assert_string_equal(s.got[3], "{\"d\":4}");
        assert_int_equal(l.len, 0);
        mqd_etcd_lines_free(&l);
    }
    mqd_etcd_lines_t l = {0};
    lines_seen_t s = {.n = 0};
    for (size_t i = 0; i < strlen(stream); i++)
        assert_int_equal(mqd_etcd_lines_feed(&l, stream + i, 1, collect, &s), 0);
    assert_int_equal(s.n, 3);
    mqd_etcd_lines_free(&l);
    /* a line that never ends stops at the limit instead of growing without bound */
    char *big = malloc(1 << 20);
    memset(big, 'x', 1 << 20);
    int rc = 0;
    for (int i = 0; i < 40 && rc == 0; i++)
        rc = mqd_etcd_lines_feed(&l, big, 1 << 20, collect, &s);
    assert_int_equal(rc, MQD_ETOOBIG);
    assert_true(l.cap <= 2 * (MQD_ETCD_LINE_MAX + 2));
    free(big);
    mqd_etcd_lines_free(&l);
}

static void test_member_json(void **state)
{
    mqd_cluster_node_t n = {
        .id = 3, .address = "10.0.0.3:5672", .rack = "c", .started_ms = INT64_C(1796162668987)};
    char *s = mqd_cluster_node_json(&n);
    assert_non_null(s);
    mqd_cluster_node_t back;
    assert_int_equal(mqd_cluster_node_parse(s, strlen(s), &back), 0);
    assert_int_equal(back.id, 3);
    assert_string_equal(back.address, "10.0.0.3:5672");
    assert_string_equal(back.rack, "c");
    assert_int_equal(back.started_ms, INT64_C(1796162668987));
    assert_true(back.alive);
    assert_string_equal(back.repl_address, ""); /* none registered: the key has none */
    assert_null(strstr(s, "repl_address"));
    free(s);
    /* a TLS listener for fetches goes next to the address; older keys lack it */
    snprintf(n.repl_address, sizeof n.repl_address, "10.0.0.3:5671");
    s = mqd_cluster_node_json(&n);
    assert_non_null(s);
    assert_int_equal(mqd_cluster_node_parse(s, strlen(s), &back), 0);
    assert_string_equal(back.address, "10.0.0.3:5672");
    assert_string_equal(back.repl_address, "10.0.0.3:5671");
    free(s);
    uint32_t id = 0;
    s = mqd_cluster_ctl_json(2);
    assert_string_equal(s, "{\"id\":2}");
    assert_int_equal(mqd_cluster_ctl_parse(s, strlen(s), &id), 0);
    assert_int_equal(id, 2);
    free(s);
    static const char *const bad[] = {"",
                                      "{}",
                                      "{\"id\":0}",
                                      "{\"id\":-1}",
                                      "{\"id\":\"1\"}",
                                      "{\"id\":4294967296}",
                                      "{\"id\":1,\"rack\":5}",
                                      "{\"id\":1,\"started\":\"x\"}",
                                      "{\"id\":1,\"repl_address\":7}",
                                      "{\"id\":1,\"rack\":\"a\\u0000b\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(mqd_cluster_node_parse(bad[i], strlen(bad[i]), &back), MQD_ECORRUPT);
    assert_int_equal(mqd_cluster_ctl_parse("{\"id\":0}", 8, &id), MQD_ECORRUPT);
    assert_int_equal(id, 2); /* untouched on failure */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b64),         cmocka_unit_test(test_requests),
        cmocka_unit_test(test_txn),         cmocka_unit_test(test_replies),
        cmocka_unit_test(test_watch_msgs),  cmocka_unit_test(test_lines),
        cmocka_unit_test(test_member_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
