/* A queue cursor's Service Bus states (cursor.c, docs/servicebus.md) against a real server
 * object (meta.db and a partition log in a temp dir, flush = sync, no listeners):
 *   - deferral: of records 0..4 handed out, 1 is deferred, 0 and 4 done: 1 is neither free
 *     nor settled and is not handed out again; saved with the group (mqd_group_save_now),
 *     a restart (the server closed and opened again) keeps it deferred and still not
 *     handed out, and the committed offset stays below it; completing it (skip) settles it;
 *   - scheduled records (MQD_REC_SCHEDULED with x-opt-scheduled-enqueue-time): one an
 *     hour ahead and one 300 ms ahead are passed over by the scan (not free), the near one
 *     is handed out once its time came (mqd_cursor_sched_next names it), the far one
 *     stays hidden after the restart as well; a record flagged but without the annotation
 *     is delivered at once. */
#include "config.h"
#include "group/group.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <proton/codec.h>
#include <proton/message.h>

#include "../server_fixture.h"

static const char *const SETTINGS[] = {"flush=sync", NULL};

typedef struct fx {
    char dir[64];
    mqd_server_t *s;
    mqd_topic_t *t;
    mqd_group_t *g;
    mqd_cursor_t *cur;
} fx_t;

/* Appends a message with body "m<i>" (scheduled at `at` ms when at != 0) and syncs it. */
static void append(fx_t *f, int i, int64_t at, uint32_t flags)
{
    pn_message_t *m = pn_message();
    char body[16];
    int n = snprintf(body, sizeof body, "m%d", i);
    pn_data_put_string(pn_message_body(m), pn_bytes((size_t)n, body));
    if (at) {
        pn_data_t *ann = pn_message_annotations(m);
        pn_data_put_map(ann);
        pn_data_enter(ann);
        pn_data_put_symbol(ann, pn_bytes(28, "x-opt-scheduled-enqueue-time"));
        pn_data_put_timestamp(ann, at);
        pn_data_exit(ann);
    }
    mqd_buf_t out = {0};
    assert_int_equal(mqd_message_encode(m, &out, 0), 0);
    pn_message_free(m);
    mqd_part_t *p = mqd_topic_part(f->t, 0);
    assert_int_equal(mqd_part_append_ex(p, out.p, out.len, flags, 0, NULL, NULL, NULL), 0);
    mqd_buf_free(&out);
    mqd_store_commit(mqd_srv_store(f->s));
    assert_int_equal(mqd_plog_wait_stable(mqd_part_log(p), mqd_plog_end_offset(mqd_part_log(p))),
                     0);
    mqd_store_dispatch(mqd_srv_store(f->s));
}

static void open_queue(fx_t *f)
{
    f->s = fx_server_open(f->dir, SETTINGS);
    assert_int_equal(mqd_topic_get(f->s, "q", true, 1, &f->t), 0);
    assert_int_equal(mqd_group_get(f->t, MQD_SHARED_GROUP, &f->g), 0);
    f->cur = mqd_group_cursor(f->g, 0);
    assert_non_null(f->cur);
}

/* The offset the cursor hands out next, or -1 for none. */
static int64_t next(fx_t *f)
{
    mqd_rec_t rec;
    uint32_t dc;
    return mqd_cursor_next(f->cur, mqd_topic_part(f->t, 0), &rec, &dc) ? (int64_t)rec.offset
                                                                       : -1;
}

static void test_defer_and_schedule(void **state)
{
    fx_t *f = *state;
    int64_t now = mqd_now_ms();
    append(f, 0, 0, MQD_REC_DATA);
    append(f, 1, 0, MQD_REC_DATA);
    append(f, 2, now + 3600 * 1000, MQD_REC_DATA | MQD_REC_SCHEDULED);
    append(f, 3, now + 300, MQD_REC_DATA | MQD_REC_SCHEDULED);
    append(f, 4, 0, MQD_REC_DATA | MQD_REC_SCHEDULED); /* flagged, no time: at once */
    assert_int_equal(next(f), 0);
    assert_int_equal(next(f), 1);
    assert_int_equal(next(f), 4);
    assert_int_equal(next(f), -1);
    assert_false(mqd_cursor_free_at(f->cur, 2));
    assert_false(mqd_cursor_free_at(f->cur, 3));
    assert_true(mqd_cursor_sched_next(f->cur) <= now + 300);

    assert_int_equal(mqd_cursor_defer(f->cur, 1), 0);
    mqd_cursor_done(f->cur, 0);
    mqd_cursor_done(f->cur, 4);
    assert_true(mqd_cursor_is_deferred(f->cur, 1));
    assert_false(mqd_cursor_free_at(f->cur, 1));
    assert_false(mqd_cursor_settled(f->cur, 1));
    assert_false(mqd_cursor_is_held(f->cur, 1));
    assert_int_equal(next(f), -1);
    assert_int_equal(mqd_cursor_floor(f->cur), 1);

    usleep(400 * 1000);
    assert_int_equal(next(f), 3); /* its time came */
    mqd_cursor_done(f->cur, 3);
    assert_int_equal(next(f), -1);
    assert_int_equal(mqd_group_save_now(f->g, "test"), 0);

    fx_server_close(f->s);
    open_queue(f); /* a restart */
    assert_true(mqd_cursor_is_deferred(f->cur, 1));
    assert_true(mqd_cursor_settled(f->cur, 3));
    assert_int_equal(next(f), -1); /* 1 deferred, 2 still ahead of its time */
    assert_int_equal(mqd_cursor_floor(f->cur), 1);
    assert_true(mqd_cursor_sched_next(f->cur) > now + 3000 * 1000);

    mqd_cursor_skip(f->cur, 1); /* completed through the management node */
    assert_false(mqd_cursor_is_deferred(f->cur, 1));
    assert_true(mqd_cursor_settled(f->cur, 1));
    assert_int_equal(mqd_cursor_floor(f->cur), 2);
    mqd_cursor_skip(f->cur, 2); /* cancelled */
    assert_int_equal(mqd_cursor_floor(f->cur), 5);
    assert_true(mqd_cursor_sched_next(f->cur) == INT64_MAX);
    assert_int_equal(mqd_group_save_now(f->g, "test"), 0);
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    strcpy(f->dir, "/tmp/mqd-defer-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    open_queue(f);
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
        cmocka_unit_test_setup_teardown(test_defer_and_schedule, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
