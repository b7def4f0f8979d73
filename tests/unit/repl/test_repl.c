/* repl's pure logic: rack-aware placement, the high watermark and the quorum end, the
 * etcd values (partition state, topic registration) and the fetch stream's wire format. */
#include "config.h"
#include "repl/repl.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *rack_of(const mqd_repl_cand_t *c, size_t n, uint32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (c[i].id == id)
            return c[i].rack;
    return NULL;
}

/* 3 racks, 6 nodes (2 per rack), 6 partitions of RF 3: every partition on 3 racks, 3
 * distinct nodes; each node leads exactly one partition. */
static void test_place_racks(void **state)
{
    mqd_repl_cand_t c[] = {{1, "a"}, {2, "a"}, {3, "b"}, {4, "b"}, {5, "c"}, {6, "c"}};
    uint32_t out[6 * 3];
    assert_int_equal(mqd_repl_place(c, 6, 6, 3, 0, out), 0);
    unsigned leads[7] = {0};
    for (uint32_t p = 0; p < 6; p++) {
        const uint32_t *r = out + p * 3;
        assert_true(r[0] != r[1] && r[1] != r[2] && r[0] != r[2]);
        assert_string_not_equal(rack_of(c, 6, r[0]), rack_of(c, 6, r[1]));
        assert_string_not_equal(rack_of(c, 6, r[1]), rack_of(c, 6, r[2]));
        assert_string_not_equal(rack_of(c, 6, r[0]), rack_of(c, 6, r[2]));
        leads[r[0]]++;
    }
    for (int id = 1; id <= 6; id++)
        assert_int_equal(leads[id], 1);
    /* the order is rack-alternating whatever order the candidates come in */
    mqd_repl_cand_t rev[] = {{6, "c"}, {5, "c"}, {4, "b"}, {3, "b"}, {2, "a"}, {1, "a"}};
    uint32_t out2[6 * 3];
    assert_int_equal(mqd_repl_place(rev, 6, 6, 3, 0, out2), 0);
    assert_memory_equal(out, out2, sizeof out);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 3);
    assert_int_equal(out[2], 5);
}

/* start rotates leaders; fewer racks than RF still gives distinct nodes; bad RF refused. */
static void test_place_edges(void **state)
{
    mqd_repl_cand_t c[] = {{7, ""}, {8, NULL}, {9, "x"}};
    uint32_t out[3 * 3];
    assert_int_equal(mqd_repl_place(c, 3, 3, 3, 1, out), 0);
    for (int p = 0; p < 3; p++) {
        const uint32_t *r = out + p * 3;
        assert_true(r[0] != r[1] && r[1] != r[2] && r[0] != r[2]);
    }
    assert_true(out[0] != out[3] && out[3] != out[6] && out[0] != out[6]); /* leaders spread */
    assert_int_equal(mqd_repl_place(c, 3, 1, 4, 0, out), MQD_EINVAL);
    assert_int_equal(mqd_repl_place(c, 3, 1, 0, 0, out), MQD_EINVAL);
    mqd_repl_cand_t dup[] = {{1, "a"}, {1, "b"}};
    assert_int_equal(mqd_repl_place(dup, 2, 1, 2, 0, out), MQD_EINVAL);
}

static void test_watermarks(void **state)
{
    uint64_t leo[] = {120, 90};
    assert_int_equal(mqd_repl_hw(100, leo, 2), 90);
    assert_int_equal(mqd_repl_hw(80, leo, 2), 80); /* never past the leader's own stable */
    assert_int_equal(mqd_repl_hw(100, NULL, 0), 100);
    /* RF 3: a majority is 2: the leader (100) and the better follower (min(120, 100)) */
    assert_int_equal(mqd_repl_quorum_end(100, leo, 2, 3), 100);
    uint64_t slow[] = {10, 40};
    assert_int_equal(mqd_repl_quorum_end(100, slow, 2, 3), 40);
    /* RF 3 with one follower never heard of: it counts as 0 */
    assert_int_equal(mqd_repl_quorum_end(100, slow, 1, 3), 10);
    /* RF 5: 3 of 5 */
    uint64_t five[] = {50, 70, 20, 0};
    assert_int_equal(mqd_repl_quorum_end(100, five, 4, 5), 50);
}

static void test_pstate(void **state)
{
    mqd_repl_pstate_t ps = {
        .leader = 2, .epoch = 7, .n_replicas = 3, .n_isr = 2, .replicas = {2, 3, 1}, .isr = {2, 1}};
    char *j = mqd_repl_pstate_json(&ps);
    assert_non_null(j);
    assert_string_equal(j, "{\"leader\":2,\"epoch\":7,\"replicas\":[2,3,1],\"isr\":[2,1]}");
    mqd_repl_pstate_t back;
    assert_int_equal(mqd_repl_pstate_parse(j, strlen(j), &back), 0);
    assert_memory_equal(&ps, &back, sizeof ps);
    free(j);
    static const char *const bad[] = {
        "{\"leader\":4,\"epoch\":1,\"replicas\":[1,2],\"isr\":[1]}",   /* leader no replica */
        "{\"leader\":1,\"epoch\":1,\"replicas\":[1,2],\"isr\":[2]}",   /* leader not in isr */
        "{\"leader\":1,\"epoch\":1,\"replicas\":[1,1],\"isr\":[1]}",   /* duplicate */
        "{\"leader\":1,\"epoch\":1,\"replicas\":[1,2],\"isr\":[1,3]}", /* isr outside */
        "{\"leader\":1,\"epoch\":-1,\"replicas\":[1],\"isr\":[1]}",    /* negative epoch */
        "{\"leader\":1,\"epoch\":1,\"replicas\":[],\"isr\":[1]}",      /* no replicas */
        "{\"leader\":1,\"leader\":2,\"epoch\":1,\"replicas\":[1],\"isr\":[1]}",
        "[1]",
        "",
        "{\"leader\":\"1\",\"epoch\":1,\"replicas\":[1],\"isr\":[1]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(mqd_repl_pstate_parse(bad[i], strlen(bad[i]), &back), MQD_ECORRUPT);
    mqd_repl_tdesc_t td = {4, 3, "{\"acks\":\"quorum\"}", "", 0}, tb;
    j = mqd_repl_tdesc_json(&td);
    assert_string_equal(
        j, "{\"config\":{\"acks\":\"quorum\"},\"partitions\":4,\"replication_factor\":3}");
    assert_int_equal(mqd_repl_tdesc_parse(j, strlen(j), &tb), 0);
    assert_int_equal(tb.partitions, 4);
    assert_int_equal(tb.rf, 3);
    assert_string_equal(tb.config, "{\"acks\":\"quorum\"}");
    mqd_repl_tdesc_clear(&tb);
    free(j);
    const char *t0 = "{\"partitions\":0,\"replication_factor\":3}";
    assert_int_equal(mqd_repl_tdesc_parse(t0, strlen(t0), &tb), MQD_ECORRUPT);
}

/* The identities (KIP-516's topic IDs): a registration's id and the topic_id of the
 * partition states placed for it round trip, are left out when empty (an older mqd's
 * values parse as ""), and anything but 32 lower-case hex digits is refused. */
static void test_identity(void **state)
{
    char id[MQD_REPL_ID_LEN + 1], id2[MQD_REPL_ID_LEN + 1];
    assert_int_equal(mqd_repl_id_new(id), 0);
    assert_int_equal(mqd_repl_id_new(id2), 0);
    assert_true(mqd_repl_id_valid(id, strlen(id)));
    assert_string_not_equal(id, id2);
    assert_false(mqd_repl_id_valid("0123456789ABCDEF0123456789abcdef", 32));
    assert_false(mqd_repl_id_valid("0123456789abcdef0123456789abcde", 31));
    mqd_repl_tdesc_t td = {2, 3, NULL, "", 0}, tb;
    memcpy(td.id, id, sizeof td.id);
    char *j = mqd_repl_tdesc_json(&td);
    assert_non_null(strstr(j, id));
    assert_int_equal(mqd_repl_tdesc_parse(j, strlen(j), &tb), 0);
    assert_string_equal(tb.id, id);
    assert_null(tb.config);
    free(j);
    const char *old = "{\"config\":{},\"partitions\":1,\"replication_factor\":3}";
    assert_int_equal(mqd_repl_tdesc_parse(old, strlen(old), &tb), 0);
    assert_string_equal(tb.id, "");
    static const char *const bad_td[] = {
        "{\"id\":\"x\",\"partitions\":1,\"replication_factor\":3}",
        "{\"id\":7,\"partitions\":1,\"replication_factor\":3}",
        "{\"id\":\"\",\"partitions\":1,\"replication_factor\":3}",
        "{\"id\":\"0123456789abcdef0123456789abcdeg\",\"partitions\":1,\"replication_factor\":3}",
    };
    for (size_t i = 0; i < sizeof bad_td / sizeof bad_td[0]; i++)
        assert_int_equal(mqd_repl_tdesc_parse(bad_td[i], strlen(bad_td[i]), &tb), MQD_ECORRUPT);

    mqd_repl_pstate_t ps = {.leader = 1,
                            .epoch = 1,
                            .n_replicas = 1,
                            .n_isr = 1,
                            .replicas = {1},
                            .isr = {1}},
                      back;
    memcpy(ps.topic_id, id, sizeof ps.topic_id);
    j = mqd_repl_pstate_json(&ps);
    assert_non_null(strstr(j, "\"topic_id\""));
    assert_int_equal(mqd_repl_pstate_parse(j, strlen(j), &back), 0);
    assert_memory_equal(&ps, &back, sizeof ps);
    free(j);
    const char *bad_ps = "{\"leader\":1,\"epoch\":1,\"replicas\":[1],\"isr\":[1],\"topic_id\":1}";
    assert_int_equal(mqd_repl_pstate_parse(bad_ps, strlen(bad_ps), &back), MQD_ECORRUPT);
}

/* A topic of replication_factor 1 registered with the node that created it as its home
 * (every partition placed there): the field round trips, is left out when 0 (values of
 * an older mqd, and topics the controller spreads, parse as 0), and is refused unless a
 * positive node id of a topic of replication_factor 1. */
static void test_home(void **state)
{
    mqd_repl_tdesc_t td = {3, 1, "{\"replication_factor\":1}", "", 2}, tb;
    char *j = mqd_repl_tdesc_json(&td);
    assert_string_equal(j, "{\"config\":{\"replication_factor\":1},\"home\":2,\"partitions\":3,"
                           "\"replication_factor\":1}");
    assert_int_equal(mqd_repl_tdesc_parse(j, strlen(j), &tb), 0);
    assert_int_equal(tb.home, 2);
    assert_int_equal(tb.partitions, 3);
    mqd_repl_tdesc_clear(&tb);
    free(j);
    td.home = 0;
    j = mqd_repl_tdesc_json(&td);
    assert_null(strstr(j, "home"));
    assert_int_equal(mqd_repl_tdesc_parse(j, strlen(j), &tb), 0);
    assert_int_equal(tb.home, 0);
    mqd_repl_tdesc_clear(&tb);
    free(j);
    static const char *const bad[] = {
        "{\"home\":0,\"partitions\":1,\"replication_factor\":1}",
        "{\"home\":-1,\"partitions\":1,\"replication_factor\":1}",
        "{\"home\":\"2\",\"partitions\":1,\"replication_factor\":1}",
        "{\"home\":2,\"partitions\":1,\"replication_factor\":3}",
        "{\"home\":4294967296,\"partitions\":1,\"replication_factor\":1}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(mqd_repl_tdesc_parse(bad[i], strlen(bad[i]), &tb), MQD_ECORRUPT);
}

static void test_wire(void **state)
{
    uint8_t recs[300];
    for (size_t i = 0; i < sizeof recs; i++)
        recs[i] = (uint8_t)(i * 7);
    mqd_repl_run_t run = {.base = 1ull << 40,
                          .hw = 12345,
                          .count = 3,
                          .data = recs,
                          .len = sizeof recs},
                   back;
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    assert_int_equal(mqd_repl_run_encode(&run, &buf, &cap, &len), 0);
    assert_int_equal(mqd_repl_run_parse(buf, len, &back), 0);
    assert_true(back.base == run.base && back.hw == run.hw && back.count == 3);
    assert_int_equal(back.len, sizeof recs);
    assert_memory_equal(back.data, recs, sizeof recs);
    /* every truncation of it is refused, never read past its end */
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *t = malloc(cut ? cut : 1);
        memcpy(t, buf, cut);
        assert_int_equal(mqd_repl_run_parse(t, cut, &back), MQD_ECORRUPT);
        free(t);
    }
    /* a watermark-only run: no records, an empty data section */
    mqd_repl_run_t hw = {.base = 9, .hw = 9};
    assert_int_equal(mqd_repl_run_encode(&hw, &buf, &cap, &len), 0);
    assert_int_equal(mqd_repl_run_parse(buf, len, &back), 0);
    assert_true(back.count == 0 && back.len == 0 && back.hw == 9);
    /* count and bytes must agree: records without a count are refused */
    mqd_repl_run_t odd = {.base = 1, .hw = 1, .count = 0, .data = recs, .len = 5};
    assert_int_equal(mqd_repl_run_encode(&odd, &buf, &cap, &len), 0);
    assert_int_equal(mqd_repl_run_parse(buf, len, &back), MQD_ECORRUPT);
    free(buf);
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* The follower's one walk over a run: the largest record epoch and whether a control
 * record it acts on is there, records as stored (len u32 LE counting the bytes after
 * itself, the epoch at byte 24, the flags word, kind in its low byte, at byte 28). */
typedef struct walked {
    uint64_t off[4];
    uint32_t flags[4];
    size_t n;
} walked_t;

static void walk_rec(void *arg, uint64_t offset, uint32_t flags)
{
    walked_t *w = arg;
    if (w->n < 4) {
        w->off[w->n] = offset;
        w->flags[w->n++] = flags;
    }
}

/* mqd_repl_run_walk: every record's offset (u64 LE at byte 8) and flags, in order (the
 * follower counts control records out of a replica's messages with them). */
static void test_run_walk(void **state)
{
    (void)state;
    uint8_t recs[3 * 40 + 5] = {0};
    size_t pos = 0;
    for (int i = 0; i < 3; i++) {
        uint32_t extra = i == 1 ? 5 : 0;
        put_le32(recs + pos, 36 + extra);
        put_le32(recs + pos + 8, (uint32_t)(0x100000000ull + 7 + (uint64_t)i));
        put_le32(recs + pos + 12, 1); /* offset 2^32 + 7 + i: the high word counts */
        put_le32(recs + pos + 28, i == 1 ? MQD_REC_CTRL_GROUP : 0);
        pos += 40 + extra;
    }
    assert_int_equal(pos, sizeof recs);
    walked_t w = {0};
    uint32_t e;
    bool st;
    assert_int_equal(mqd_repl_run_walk(recs, sizeof recs, &e, &st, walk_rec, &w), 0);
    assert_int_equal(w.n, 3);
    for (size_t i = 0; i < 3; i++)
        assert_true(w.off[i] == 0x100000000ull + 7 + i);
    assert_true(w.flags[0] == 0 && w.flags[1] == MQD_REC_CTRL_GROUP && w.flags[2] == 0);
    assert_true(st);
}

static void test_run_scan(void **state)
{
    static const uint32_t epochs[] = {1, 3, 2};
    static const uint32_t payload[] = {0, 17, 5};
    uint8_t recs[3 * 40 + 22] = {0};
    size_t pos = 0;
    for (int i = 0; i < 3; i++) {
        put_le32(recs + pos, 36 + payload[i]);
        put_le32(recs + pos + 24, epochs[i]);
        pos += 40 + payload[i];
    }
    assert_int_equal(pos, sizeof recs);
    uint32_t e = 99;
    bool st = true;
    assert_int_equal(mqd_repl_run_scan(recs, sizeof recs, &e, &st), 0);
    assert_int_equal(e, 3);
    assert_false(st);                                          /* data records only */
    assert_int_equal(mqd_repl_run_scan(recs, 40, &e, &st), 0); /* the first alone */
    assert_int_equal(e, 1);
    assert_int_equal(mqd_repl_run_scan(recs, 0, &e, &st), 0);
    assert_int_equal(e, 0);
    /* a group-offset record (kind 4) in the middle, then a COMMIT marker (kind 1, with
     * MQD_REC_TXN's bit above the kind byte) alone; an abort marker (kind 2) is not state */
    put_le32(recs + 40 + 28, MQD_REC_CTRL_GROUP);
    assert_int_equal(mqd_repl_run_scan(recs, sizeof recs, &e, &st), 0);
    assert_true(st);
    put_le32(recs + 40 + 28, 0);
    put_le32(recs + 28, MQD_REC_CTRL_COMMIT | 0x100u);
    assert_int_equal(mqd_repl_run_scan(recs, 40, &e, &st), 0);
    assert_true(st);
    put_le32(recs + 28, MQD_REC_CTRL_ABORT);
    assert_int_equal(mqd_repl_run_scan(recs, sizeof recs, &e, &st), 0);
    assert_false(st);
    put_le32(recs + 28, 0);
    /* every cut inside a record is refused and leaves the outputs alone */
    for (size_t cut = 1; cut < sizeof recs; cut++) {
        if (cut == 40 || cut == 97)
            continue; /* record boundaries */
        e = 7;
        st = true;
        assert_int_equal(mqd_repl_run_scan(recs, cut, &e, &st), MQD_ECORRUPT);
        assert_int_equal(e, 7);
        assert_true(st);
    }
    put_le32(recs, 35); /* shorter than a header */
    assert_int_equal(mqd_repl_run_scan(recs, sizeof recs, &e, &st), MQD_ECORRUPT);
    put_le32(recs, UINT32_MAX); /* past the end, and no overflow on the way */
    assert_int_equal(mqd_repl_run_scan(recs, sizeof recs, &e, &st), MQD_ECORRUPT);
}

/* The group-offset control record's body: floor LE, then the name. */
static void test_grec(void **state)
{
    uint8_t b[8 + 255], big[300];
    size_t len, nlen;
    uint64_t floor;
    const char *name;
    assert_int_equal(mqd_repl_grec_encode("g1", 0x0102030405060708ull, b, sizeof b, &len), 0);
    assert_int_equal(len, 10);
    assert_int_equal(b[0], 0x08); /* little-endian */
    assert_int_equal(mqd_repl_grec_parse(b, len, &floor, &name, &nlen), 0);
    assert_true(floor == 0x0102030405060708ull && nlen == 2 && memcmp(name, "g1", 2) == 0);
    /* a body without a name (any cut below 9 bytes) and one with a NUL are refused */
    for (size_t cut = 0; cut < 9; cut++)
        assert_int_equal(mqd_repl_grec_parse(b, cut, &floor, &name, &nlen), MQD_ECORRUPT);
    b[9] = 0;
    assert_int_equal(mqd_repl_grec_parse(b, len, &floor, &name, &nlen), MQD_ECORRUPT);
    /* names of 1..255 bytes; 256 neither encodes nor parses; too small a buffer */
    char n256[257];
    memset(n256, 'x', 256);
    n256[256] = '\0';
    assert_int_equal(mqd_repl_grec_encode(n256, 1, big, sizeof big, &len), MQD_EINVAL);
    memset(big, 'x', sizeof big);
    assert_int_equal(mqd_repl_grec_parse(big, 8 + 256, &floor, &name, &nlen), MQD_ECORRUPT);
    assert_int_equal(mqd_repl_grec_parse(big, 8 + 255, &floor, &name, &nlen), 0);
    assert_int_equal(nlen, 255);
    assert_int_equal(mqd_repl_grec_encode("", 1, b, sizeof b, &len), MQD_EINVAL);
    assert_int_equal(mqd_repl_grec_encode("abc", 1, b, 10, &len), MQD_ETOOBIG);
    (void)state;
}

/* The log-end report of an election (cand.c): round trip, an older node's report without
 * leader_rev, and malformed ones refused. */
static void test_report(void **state)
{
    mqd_repl_report_t rep = {.epoch = 4, .end = 1050, .leader_rev = 17}, back;
    char *j = mqd_repl_report_json(&rep);
    assert_non_null(j);
    assert_string_equal(j, "{\"end\":1050,\"epoch\":4,\"leader_rev\":17}");
    assert_int_equal(mqd_repl_report_parse(j, strlen(j), &back), 0);
    assert_true(back.epoch == 4 && back.end == 1050 && back.leader_rev == 17);
    free(j);
    const char *old = "{\"epoch\":2,\"end\":300}";
    assert_int_equal(mqd_repl_report_parse(old, strlen(old), &back), 0);
    assert_true(back.epoch == 2 && back.end == 300 && back.leader_rev == 0);
    rep.leader_rev = 0; /* not known: left out */
    j = mqd_repl_report_json(&rep);
    assert_string_equal(j, "{\"end\":1050,\"epoch\":4}");
    free(j);
    static const char *const bad[] = {
        "{\"epoch\":1}",                                /* no end */
        "{\"end\":5}",                                  /* no epoch */
        "{\"epoch\":-1,\"end\":5}",                     /* negative epoch */
        "{\"epoch\":1,\"end\":-5}",                     /* negative end */
        "{\"epoch\":1,\"end\":5,\"leader_rev\":\"9\"}", /* a string */
        "{\"epoch\":1,\"end\":5,\"leader_rev\":-9}",    /* negative */
        "{\"epoch\":1,\"epoch\":2,\"end\":5}",          /* duplicate key */
        "{\"epoch\":4294967296,\"end\":5}",             /* epoch past 32 bits */
        "[]",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(mqd_repl_report_parse(bad[i], strlen(bad[i]), &back), MQD_ECORRUPT);
    (void)state;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_place_racks), cmocka_unit_test(test_place_edges),
        cmocka_unit_test(test_watermarks),  cmocka_unit_test(test_pstate),
        cmocka_unit_test(test_identity),    cmocka_unit_test(test_home),
        cmocka_unit_test(test_wire),        cmocka_unit_test(test_grec),
        cmocka_unit_test(test_run_scan),    cmocka_unit_test(test_run_walk),    cmocka_unit_test(test_report),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
