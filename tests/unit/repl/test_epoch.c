/* Leader-epoch lookup over real logs (src/repl/epoch.c, real files and fsync): where the
 * epochs <= E end and the largest epoch <= E present, and the KIP-279 truncation point a
 * follower computes from the leader's answer and its own log. */
#include "config.h"
#include "repl/repl_int.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../store/store_test.h"

typedef struct fx {
    char *dir;
    mqd_store_t *st;
    mqd_plog_config_t cfg;
    mqd_repl_t r; /* only its scratch buffer is used */
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    f->dir = tmpdir_in("/tmp");
    mqd_plog_config_default(&f->cfg);
    f->cfg.segment_bytes = 4 << 10; /* several segments: the search crosses them */
    assert_int_equal(mqd_store_open(f->dir, NULL, NULL, &f->st), 0);
    assert_int_equal(mqd_repl_grow(&f->r, 4096), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    mqd_store_close(f->st);
    rm_rf(f->dir);
    free(f->dir);
    free(f->r.buf);
    free(f);
    return 0;
}

/* A log of the given runs: epochs[i] for counts[i] records each. */
static mqd_plog_t *make_log(fx_t *f, uint32_t part, const uint32_t *epochs, const size_t *counts,
                            size_t n)
{
    mqd_plog_t *log;
    size_t total = 0;
    assert_int_equal(mqd_store_log_open(f->st, "e", part, &f->cfg, &log), 0);
    for (size_t i = 0; i < n; i++) {
        mqd_plog_set_epoch(log, epochs[i]);
        assert_int_equal(append_n(f->st, log, counts[i], 4, 7 + (uint32_t)i, 300, 1000, 1), 0);
        total += counts[i];
    }
    assert_int_equal(mqd_plog_wait_stable(log, total), 0);
    return log;
}

static void expect(fx_t *f, mqd_plog_t *log, uint32_t e, uint64_t end, uint32_t largest)
{
    uint64_t got_end = 99999;
    uint32_t got_largest = 99999;
    assert_int_equal(mqd_repl_epoch_end(&f->r, log, e, &got_end, &got_largest), 0);
    assert_int_equal(got_end, end);
    assert_int_equal(got_largest, largest);
}

static void test_lookup(void **state)
{
    fx_t *f = *state;
    const uint32_t ep[] = {1, 3, 4};
    const size_t n[] = {10, 10, 5};
    mqd_plog_t *log = make_log(f, 0, ep, n, 3);
    expect(f, log, 0, 0, 0); /* nothing of epoch 0 */
    expect(f, log, 1, 10, 1);
    expect(f, log, 2, 10, 1); /* never had 2: the largest below is 1 */
    expect(f, log, 3, 20, 3);
    expect(f, log, 4, 25, 4);
    expect(f, log, 9, 25, 4);
    mqd_plog_t *empty;
    assert_int_equal(mqd_store_log_open(f->st, "e", 1, &f->cfg, &empty), 0);
    expect(f, empty, 5, 0, 0);
}

/* Follower 1,1..(10) 3..(5); leader 1..(10) 2..(10) 4..(5). The follower asks with its
 * last epoch 3: the leader's largest <= 3 is 2, ending at 20; the follower's own epochs
 * <= 2 end at 10: it truncates to min(20, 10) = 10 (not to 15 or 20: its 10..14 of epoch
 * 3 were never the leader's). Asked again with epoch 1 at 10, the leader says 1 ends at
 * 10: no further cut. */
static void test_divergence(void **state)
{
    fx_t *f = *state;
    const uint32_t lep[] = {1, 2, 4}, fep[] = {1, 3};
    const size_t ln[] = {10, 10, 5}, fn[] = {10, 5};
    mqd_plog_t *leader = make_log(f, 2, lep, ln, 3), *follower = make_log(f, 3, fep, fn, 2);
    uint64_t lend, fend;
    uint32_t lgst, fgst;
    assert_int_equal(mqd_repl_epoch_end(&f->r, leader, 3, &lend, &lgst), 0);
    assert_int_equal(lend, 20);
    assert_int_equal(lgst, 2);
    assert_int_equal(mqd_repl_epoch_end(&f->r, follower, lgst, &fend, &fgst), 0);
    assert_int_equal(fend, 10);
    uint64_t to = lend < fend ? lend : fend;
    assert_int_equal(to, 10);
    assert_int_equal(mqd_plog_truncate_to(follower, to), 0);
    assert_int_equal(mqd_plog_end_offset(follower), 10);
    expect(f, follower, 9, 10, 1); /* its last epoch is now 1 */
    assert_int_equal(mqd_repl_epoch_end(&f->r, leader, 1, &lend, &lgst), 0);
    assert_true(lend == 10 && lgst == 1); /* 10 <= 10 and the same epoch: fetch on */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lookup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_divergence, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
