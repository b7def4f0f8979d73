/* server: a partition's commit point (part_commit.c) against a real server object
 * (meta.db + partition logs in a temp dir, flush = sync, no listeners).
 *
 * Records appended but not yet handed to the flusher (mqd_store_commit) are past the
 * store's stable offset: the test uses that to hold a partition with end > stable.
 *   - visible end: 0 of 3 appended before the sync, 3 after; the high watermark follows
 *     the stable offset while not replicated;
 *   - a group reset to an offset past the end (1000) lands on the visible end (3) with 2
 *     more records appended and unsynced: the cursor used to clamp to the log's end (5),
 *     which skips records whose sends were not settled yet;
 *   - read-committed stops at an open transaction's first offset, read-uncommitted not;
 *   - a replicated high watermark bounds the visible end and what a cursor delivers
 *     (exactly hw - floor records), a rise notifies the subscribers once, in the order
 *     they subscribed, a repeat or a fall does not, and a stable advance no longer moves
 *     the watermark;
 *   - a grow moves no partition; replaced overrides and the identity persist;
 *   - a leader that stepped down: its waiting sends are in doubt (acks = leader ones
 *     too): none settles at the local stable offset, those at or past a cut are
 *     rejected, the rest accepted as the next leader's watermark passes them. */
#include "config.h"
#include "server/server_int.h"
#include "server/server.h"
#include "core/core_int.h" /* reads partitions' and the server's fields */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "../server_fixture.h"

#include <proton/disposition.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fx {
    char dir[64];
    mqd_server_t *s;
    mqd_topic_t *t;
} fx_t;

static const char *const FX_SETTINGS[] = {"flush=sync", NULL};

/* Appends n records ("rec <offset>") without handing them to the flusher. */
static void append_unsynced(mqd_part_t *p, int n)
{
    for (int i = 0; i < n; i++) {
        char body[32];
        int len = snprintf(body, sizeof body, "rec %llu",
                           (unsigned long long)mqd_plog_end_offset(p->log));
        assert_int_equal(mqd_part_append_ex(p, (const uint8_t *)body, (size_t)len, MQD_REC_DATA, 0,
                                            NULL, NULL, NULL),
                         0);
    }
}

/* Syncs everything appended and runs the stable callbacks on this thread. */
static void sync_all(fx_t *f, mqd_part_t *p)
{
    mqd_store_commit(f->s->store);
    assert_int_equal(mqd_plog_wait_stable(p->log, mqd_plog_end_offset(p->log)), 0);
    mqd_store_dispatch(f->s->store);
}

static int committed_cb(const mqd_group_part_info_t *pi, void *arg)
{
    ((uint64_t *)arg)[0] = pi->committed;
    ((uint64_t *)arg)[1] = pi->log_end;
    return 0;
}

static void group_position(mqd_topic_t *t, const char *g, uint64_t *committed, uint64_t *log_end)
{
    uint64_t v[2] = {UINT64_MAX, UINT64_MAX};
    assert_int_equal(mqd_group_describe(t, g, committed_cb, v), 0);
    *committed = v[0];
    *log_end = v[1];
}

static void test_visible_end_and_seek(void **state)
{
    fx_t *f = *state;
    mqd_part_t *p = f->t->parts[0];
    append_unsynced(p, 3);
    assert_int_equal(mqd_plog_end_offset(p->log), 3);
    assert_int_equal(mqd_part_visible_end(p, MQD_READ_UNCOMMITTED), 0);
    assert_int_equal(mqd_part_hw(p), 0);
    sync_all(f, p);
    assert_int_equal(mqd_part_visible_end(p, MQD_READ_UNCOMMITTED), 3);
    assert_int_equal(mqd_part_visible_end(p, MQD_READ_COMMITTED), 3);
    assert_int_equal(mqd_part_hw(p), 3);

    append_unsynced(p, 2); /* end 5, stable 3 */
    assert_int_equal(mqd_plog_end_offset(p->log), 5);
    uint64_t committed, log_end;
    assert_int_equal(mqd_group_reset(f->t, "g", MQD_RESET_OFFSET, 1000), 0);
    group_position(f->t, "g", &committed, &log_end);
    print_message("reset to 1000 with end 5, stable 3: committed %llu, reported end %llu\n",
                  (unsigned long long)committed, (unsigned long long)log_end);
    assert_int_equal(log_end, 3);
    assert_int_equal(committed, 3);
    assert_int_equal(mqd_group_reset(f->t, "g", MQD_RESET_LATEST, 0), 0);
    group_position(f->t, "g", &committed, &log_end);
    assert_int_equal(committed, 3);

    /* once synced, the group reads both records it would have skipped */
    sync_all(f, p);
    mqd_group_t *g;
    assert_int_equal(mqd_group_get(f->t, "g", &g), 0);
    mqd_rec_t rec;
    uint32_t dc;
    uint64_t got[4];
    size_t n = 0;
    while (n < 4 && mqd_cursor_next(mqd_group_cursor(g, 0), p, &rec, &dc))
        got[n++] = rec.offset;
    assert_int_equal(n, 2);
    assert_int_equal(got[0], 3);
    assert_int_equal(got[1], 4);
}

static void test_read_committed_lso(void **state)
{
    fx_t *f = *state;
    mqd_part_t *p = f->t->parts[0];
    append_unsynced(p, 6);
    sync_all(f, p);
    /* an open transaction whose first record here is offset 4 (as txn.c sets it) */
    mqd_part_set_lso(p, 4);
    assert_int_equal(mqd_part_visible_end(p, MQD_READ_UNCOMMITTED), 6);
    assert_int_equal(mqd_part_visible_end(p, MQD_READ_COMMITTED), 4);
    mqd_group_t *g;
    assert_int_equal(mqd_group_reset(f->t, "rc", MQD_RESET_EARLIEST, 0), 0);
    assert_int_equal(mqd_group_get(f->t, "rc", &g), 0);
    mqd_rec_t rec;
    uint32_t dc;
    size_t n = 0;
    while (n < 10 && mqd_cursor_next(mqd_group_cursor(g, 0), p, &rec, &dc))
        n++;
    assert_int_equal(n, 4); /* offsets 0..3 */
    mqd_part_set_lso(p, UINT64_MAX); /* it was decided */
    assert_int_equal(mqd_part_visible_end(p, MQD_READ_COMMITTED), 6);
}

typedef struct seen {
    int n;
    uint64_t last;
    char order[16];
} seen_t;

static void sub_a(mqd_part_t *p, uint64_t visible_end, void *arg)
{
    seen_t *s = arg;
    MQD_UNUSED(p);
    s->n++;
    s->last = visible_end;
    strncat(s->order, "a", sizeof s->order - strlen(s->order) - 1);
}

static void sub_b(mqd_part_t *p, uint64_t visible_end, void *arg)
{
    seen_t *s = arg;
    MQD_UNUSED(p);
    MQD_UNUSED(visible_end);
    strncat(s->order, "b", sizeof s->order - strlen(s->order) - 1);
}

static void test_high_watermark(void **state)
{
    fx_t *f = *state;
    mqd_part_t *p = f->t->parts[0];
    seen_t seen = {0};
    assert_int_equal(mqd_part_commit_subscribe(p, sub_a, &seen), 0);
    assert_int_equal(mqd_part_commit_subscribe(p, sub_b, &seen), 0);
    assert_int_equal(mqd_part_commit_subscribe(p, sub_b, NULL), MQD_ENOMEM); /* 2 + 2 = 4 */
    append_unsynced(p, 5);
    sync_all(f, p);
    assert_int_equal(seen.n, 1); /* the stable callback, hw following it */
    assert_int_equal(seen.last, 5);

    mqd_part_set_hw(p, 2); /* replicated: followers hold 0..1 */
    assert_int_equal(mqd_part_hw(p), 2);
    assert_int_equal(mqd_part_visible_end(p, MQD_READ_UNCOMMITTED), 2);
    assert_int_equal(seen.n, 1); /* a fall is no advance */
    mqd_group_t *g;
    assert_int_equal(mqd_group_reset(f->t, "h", MQD_RESET_EARLIEST, 0), 0);
    assert_int_equal(mqd_group_get(f->t, "h", &g), 0);
    mqd_rec_t rec;
    uint32_t dc;
    size_t n = 0;
    while (n < 10 && mqd_cursor_next(mqd_group_cursor(g, 0), p, &rec, &dc))
        n++;
    assert_int_equal(n, 2);

    mqd_part_set_hw(p, 4);
    assert_int_equal(seen.n, 2);
    assert_int_equal(seen.last, 4);
    assert_string_equal(seen.order, "abab");
    mqd_part_set_hw(p, 4);
    assert_int_equal(seen.n, 2); /* a repeat is no advance */
    while (n < 10 && mqd_cursor_next(mqd_group_cursor(g, 0), p, &rec, &dc))
        n++;
    assert_int_equal(n, 4);

    append_unsynced(p, 3); /* stable 8: the watermark stays at 4 */
    sync_all(f, p);
    assert_int_equal(mqd_part_hw(p), 4);
    assert_int_equal(mqd_part_visible_end(p, MQD_READ_UNCOMMITTED), 4);
    assert_int_equal(seen.n, 3); /* store callbacks are passed on */
    assert_int_equal(seen.last, 4);

    mqd_part_set_hw(p, UINT64_MAX); /* past stable: stable bounds it */
    assert_int_equal(mqd_part_visible_end(p, MQD_READ_UNCOMMITTED), 8);
    assert_int_equal(seen.n, 4);
    assert_int_equal(seen.last, 8);
    mqd_part_commit_unsubscribe(p, sub_a, &seen);
    mqd_part_set_hw(p, 3);
    mqd_part_set_hw(p, 8);
    assert_int_equal(seen.n, 4);
    assert_string_equal(seen.order, "ababababb"); /* after a left, b alone */
    mqd_part_commit_unsubscribe(p, sub_b, &seen);
}

typedef struct outcomes {
    uint64_t accepted, rejected; /* bit per tag */
    char cond[64];
} outcomes_t;

static void note_outcome(void *arg, uint64_t tag, uint64_t outcome, const char *cond,
                         const char *desc)
{
    outcomes_t *o = arg;
    (void)desc;
    if (outcome == PN_ACCEPTED)
        o->accepted |= 1ull << tag;
    else if (outcome == PN_REJECTED) {
        o->rejected |= 1ull << tag;
        snprintf(o->cond, sizeof o->cond, "%s", cond ? cond : "");
    }
}

static void test_in_doubt(void **state)
{
    fx_t *f = *state;
    mqd_part_t *p = f->t->parts[0];
    outcomes_t o = {0};
    mqd_part_set_hw(p, 0); /* replicated */
    for (uint64_t i = 0; i < 5; i++) {
        char body[16];
        int len = snprintf(body, sizeof body, "rec %llu", (unsigned long long)i);
        assert_int_equal(mqd_part_append_notify(p, (const uint8_t *)body, (size_t)len, MQD_REC_DATA,
                                                note_outcome, &o, i, NULL), 0);
        p->pend_tail->acks = i < 2 ? MQD_ACKS_LEADER : MQD_ACKS_ALL;
        p->pend_weak += i < 2;
    }
    assert_int_equal(mqd_part_waiting_in_doubt(p), 5);
    assert_int_equal(p->pend_weak, 0);
    sync_all(f, p); /* stable 5, watermark 0: an acks = leader send no longer settles */
    assert_int_equal(o.accepted | o.rejected, 0);
    assert_int_equal(mqd_part_reject_waiting_from(p, 3, MQD_ACKS_LEADER, "amqp:x", "cut"), 2);
    assert_int_equal(o.rejected, 0x18); /* offsets 3 and 4 */
    assert_string_equal(o.cond, "amqp:x");
    mqd_part_set_hw(p, 2);
    assert_int_equal(o.accepted, 0x3);
    mqd_part_set_hw(p, 5);
    assert_int_equal(o.accepted, 0x7);
    assert_null(p->pend_head);
}

/* Growing a topic moves none of its partitions (the replication layer keeps pointers to
 * them across `mqctl topic alter --partitions`): the same addresses after 1 -> 64, the
 * old partition's subscriber and stable callback still fire, the new ones take appends.
 * Replaced overrides apply at once (a refused value is skipped, the rest kept) and, with
 * the topic's identity, are in meta.db after a reopen. */
static void test_grow_keeps_partitions(void **state)
{
    fx_t *f = *state;
    mqd_part_t *p0 = mqd_topic_part(f->t, 0);
    seen_t seen = {0};
    assert_int_equal(mqd_part_commit_subscribe(p0, sub_a, &seen), 0);
    assert_int_equal(mqd_topic_alter(f->s, f->t, 64, NULL), 0);
    assert_int_equal(mqd_topic_nparts(f->t), 64);
    assert_ptr_equal(mqd_topic_part(f->t, 0), p0);
    mqd_part_t *p63 = mqd_topic_part(f->t, 63);
    assert_int_equal(mqd_topic_alter(f->s, f->t, 65, NULL), 0);
    assert_ptr_equal(mqd_topic_part(f->t, 0), p0);
    assert_ptr_equal(mqd_topic_part(f->t, 63), p63);
    append_unsynced(p0, 3);
    sync_all(f, p0);
    assert_int_equal(seen.n, 1);
    assert_int_equal(seen.last, 3);
    append_unsynced(p63, 2);
    sync_all(f, p63);
    assert_int_equal(mqd_part_visible_end(p63, MQD_READ_UNCOMMITTED), 2);
    mqd_part_commit_unsubscribe(p0, sub_a, &seen);

    assert_int_equal(mqd_topic_set_overrides(f->s, f->t, "[1]"), MQD_EINVAL);
    assert_int_equal(
        mqd_topic_set_overrides(f->s, f->t, "{\"acks\":\"quorum\",\"retention_bytes\":\"lots\"}"),
        0);
    assert_int_equal(f->t->conf.acks, MQD_ACKS_QUORUM);
    assert_int_equal(f->t->conf.log.retention_bytes, 0); /* refused here: the default */
    assert_int_equal(mqd_topic_set_overrides(f->s, f->t, "{\"retention_bytes\":65536}"), 0);
    assert_int_equal(f->t->conf.acks, MQD_ACKS_ALL); /* replaced, not merged */
    assert_int_equal(f->t->conf.log.retention_bytes, 65536);
    assert_string_equal(mqd_topic_uid(f->t), "");
    assert_int_equal(mqd_topic_set_uid(f->t, "00112233445566778899aabbccddeeff"), 0);

    fx_server_close(f->s);
    f->s = fx_server_open(f->dir, FX_SETTINGS);
    f->t = mqd_topic_find(f->s, "vc");
    assert_non_null(f->t);
    assert_int_equal(mqd_topic_nparts(f->t), 65);
    assert_string_equal(mqd_topic_uid(f->t), "00112233445566778899aabbccddeeff");
    assert_int_equal(f->t->conf.log.retention_bytes, 65536);
    assert_int_equal(mqd_plog_end_offset(mqd_topic_part(f->t, 0)->log), 3);
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    strcpy(f->dir, "/tmp/mqd-commit-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    f->s = fx_server_open(f->dir, FX_SETTINGS);
    assert_int_equal(mqd_topic_create(f->s, "vc", 1, NULL, &f->t), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    fx_server_close(f->s);
    fx_rmtree(f->dir);
    free(f);
    return 0;
}

int main(void)
{
    mqd_log_set_level(MQD_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_visible_end_and_seek, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_committed_lso, setup, teardown),
        cmocka_unit_test_setup_teardown(test_high_watermark, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grow_keeps_partitions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_doubt, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
