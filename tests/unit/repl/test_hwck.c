/* The high-watermark checkpoint (src/repl/hwck_file.c, hwck.c) with real files and fsync:
 * the table, its text form and its durable replacement; a torn or damaged file (every
 * shorter prefix, every single-bit flip, malformed lines) is refused whole; the value a
 * line lets a log expose is never above that log's stable offset, nor over records of a
 * later epoch written where the checkpointed ones were. */
#include "config.h"
#include "repl/repl_int.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../store/store_test.h"

typedef struct fx {
    char *dir;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    f->dir = tmpdir_in("/tmp");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    rm_rf(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static void fill(mqd_repl_hwck_t *ck)
{
    assert_int_equal(mqd_repl_hwck_set(ck, "orders", 3, 1200, 7), 1);
    assert_int_equal(mqd_repl_hwck_set(ck, "orders", 0, 5, 1), 1);
    assert_int_equal(mqd_repl_hwck_set(ck, "a.b_c~d:e@f$g-h", 65535, UINT64_MAX, UINT32_MAX), 1);
    assert_int_equal(mqd_repl_hwck_set(ck, "orders", 1, 0, 0), 1);
}

static void test_table(void **state)
{
    (void)state;
    mqd_repl_hwck_t ck = {0};
    fill(&ck);
    assert_int_equal(ck.n, 4);
    /* sorted by topic, then partition */
    assert_string_equal(ck.e[0].topic, "a.b_c~d:e@f$g-h");
    assert_int_equal(ck.e[1].part, 0);
    assert_int_equal(ck.e[2].part, 1);
    assert_int_equal(ck.e[3].part, 3);
    assert_int_equal(mqd_repl_hwck_set(&ck, "orders", 3, 1200, 7), 0); /* the same */
    assert_int_equal(mqd_repl_hwck_set(&ck, "orders", 3, 1300, 7), 1);
    assert_int_equal(mqd_repl_hwck_get(&ck, "orders", 3)->hw, 1300);
    assert_null(mqd_repl_hwck_get(&ck, "orders", 2));
    assert_int_equal(mqd_repl_hwck_set(&ck, "has space", 0, 1, 1), MQD_EINVAL);
    assert_int_equal(mqd_repl_hwck_set(&ck, "", 0, 1, 1), MQD_EINVAL);
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(mqd_repl_hwck_set(&ck, longname, 0, 1, 1), MQD_EINVAL);
    longname[255] = '\0';
    assert_int_equal(mqd_repl_hwck_set(&ck, longname, 0, 1, 1), 1);
    mqd_repl_hwck_clear(&ck);
}

static void test_roundtrip(void **state)
{
    fx_t *f = *state;
    mqd_repl_hwck_t ck = {0}, back = {0};
    char *b;
    size_t n;
    assert_int_equal(mqd_repl_hwck_read(f->dir, &back), MQD_ENOENT);
    fill(&ck);
    assert_int_equal(mqd_repl_hwck_format(&ck, &b, &n), 0);
    assert_int_equal(mqd_repl_hwck_write(f->dir, b, n), 0);
    assert_int_equal(mqd_repl_hwck_read(f->dir, &back), 0);
    assert_int_equal(back.n, ck.n);
    for (size_t i = 0; i < ck.n; i++) {
        assert_string_equal(back.e[i].topic, ck.e[i].topic);
        assert_int_equal(back.e[i].part, ck.e[i].part);
        assert_true(back.e[i].hw == ck.e[i].hw);
        assert_int_equal(back.e[i].epoch, ck.e[i].epoch);
    }
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", f->dir, MQD_REPL_HWCK_FILE);
    assert_int_not_equal(access(tmp, F_OK), 0); /* renamed away */
    /* an empty table is a valid file too */
    mqd_repl_hwck_t none = {0};
    char *eb;
    size_t en;
    assert_int_equal(mqd_repl_hwck_format(&none, &eb, &en), 0);
    assert_int_equal(mqd_repl_hwck_parse(eb, en, &none), 0);
    assert_int_equal(none.n, 0);
    free(eb);
    free(b);
    mqd_repl_hwck_clear(&ck);
    mqd_repl_hwck_clear(&back);
}

/* Every prefix of a good file (a torn write) and every single-bit flip is refused, and
 * refused whole: the table stays empty. */
static void test_torn_and_flipped(void **state)
{
    fx_t *f = *state;
    mqd_repl_hwck_t ck = {0}, back = {0};
    char *b;
    size_t n;
    fill(&ck);
    assert_int_equal(mqd_repl_hwck_format(&ck, &b, &n), 0);
    for (size_t cut = 0; cut < n; cut++) {
        assert_int_equal(mqd_repl_hwck_write(f->dir, b, cut), 0);
        assert_int_equal(mqd_repl_hwck_read(f->dir, &back), MQD_ECORRUPT);
        assert_int_equal(back.n, 0);
    }
    for (size_t i = 0; i < n; i++)
        for (int bit = 0; bit < 8; bit++) {
            b[i] ^= (char)(1 << bit);
            assert_int_equal(mqd_repl_hwck_parse(b, n, &back), MQD_ECORRUPT);
            assert_int_equal(back.n, 0);
            b[i] ^= (char)(1 << bit);
        }
    assert_int_equal(mqd_repl_hwck_parse(b, n, &back), 0); /* unchanged: still good */
    mqd_repl_hwck_clear(&back);
    free(b);
    mqd_repl_hwck_clear(&ck);
}

/* A file whose CRC matches but whose lines are not what mqd writes is refused too. */
static void expect_bad(const char *body)
{
    char buf[1024];
    mqd_repl_hwck_t back = {0};
    size_t lines = 0;
    for (const char *p = body; *p; p++)
        lines += *p == '\n';
    int n = snprintf(buf, sizeof buf, "mqd replication-offset-checkpoint 1\n%s", body);
    n += snprintf(buf + n, sizeof buf - (size_t)n, "end %zu %08x\n", lines,
                  (unsigned)mqd_crc32c(0, buf, (size_t)n));
    assert_int_equal(mqd_repl_hwck_parse(buf, (size_t)n, &back), MQD_ECORRUPT);
    assert_int_equal(back.n, 0);
}

static void test_malformed(void **state)
{
    (void)state;
    expect_bad("t 0 5 1\nt 0 6 1\n");          /* a replica twice */
    expect_bad("t 1 5 1\nt 0 6 1\n");          /* out of order */
    expect_bad("t 65536 5 1\n");               /* partition too large */
    expect_bad("t 0 18446744073709551616 1\n"); /* hw overflows */
    expect_bad("t 0 5 4294967296\n");          /* epoch overflows */
    expect_bad("t 01 5 1\n");                  /* leading zero */
    expect_bad("t 0 -5 1\n");
    expect_bad("t 0 5\n");                     /* a field missing */
    expect_bad("t 0 5 1 9\n");                 /* one too many */
    expect_bad("t  0 5 1\n");                  /* empty field */
    expect_bad("t\t0 5 1\n");
    expect_bad("t 0 5 1");                     /* no newline: runs into "end" */
    /* the good case of the same shape parses */
    char buf[256];
    mqd_repl_hwck_t back = {0};
    int n = snprintf(buf, sizeof buf, "mqd replication-offset-checkpoint 1\nt 0 5 1\nt 1 0 0\n");
    n += snprintf(buf + n, sizeof buf - (size_t)n, "end 2 %08x\n",
                  (unsigned)mqd_crc32c(0, buf, (size_t)n));
    assert_int_equal(mqd_repl_hwck_parse(buf, (size_t)n, &back), 0);
    assert_int_equal(back.n, 2);
    mqd_repl_hwck_clear(&back);
    /* a wrong count, a wrong version, bytes after the end line */
    n = snprintf(buf, sizeof buf, "mqd replication-offset-checkpoint 1\nt 0 5 1\n");
    snprintf(buf + n, sizeof buf - (size_t)n, "end 2 %08x\n", (unsigned)mqd_crc32c(0, buf, (size_t)n));
    assert_int_equal(mqd_repl_hwck_parse(buf, strlen(buf), &back), MQD_ECORRUPT);
    n = snprintf(buf, sizeof buf, "mqd replication-offset-checkpoint 2\nt 0 5 1\n");
    snprintf(buf + n, sizeof buf - (size_t)n, "end 1 %08x\n", (unsigned)mqd_crc32c(0, buf, (size_t)n));
    assert_int_equal(mqd_repl_hwck_parse(buf, strlen(buf), &back), MQD_ECORRUPT);
    n = snprintf(buf, sizeof buf, "mqd replication-offset-checkpoint 1\nt 0 5 1\n");
    snprintf(buf + n, sizeof buf - (size_t)n, "end 1 %08x\nx", (unsigned)mqd_crc32c(0, buf, (size_t)n));
    assert_int_equal(mqd_repl_hwck_parse(buf, strlen(buf), &back), MQD_ECORRUPT);
    assert_int_equal(back.n, 0);
}

/* The value a line lets a log expose (mqd_repl_hwck_trusted) over a real log: never above
 * its stable offset (a power cut took the tail), never over records of a later epoch
 * written where the checkpointed ones were (truncated by epoch and fetched again). */
static void test_trusted(void **state)
{
    fx_t *f = *state;
    mqd_store_t *st;
    mqd_plog_config_t cfg;
    mqd_plog_t *log;
    mqd_repl_t r = {0}; /* only its scratch buffer is used */
    mqd_plog_config_default(&cfg);
    cfg.segment_bytes = 4 << 10;
    assert_int_equal(mqd_store_open(f->dir, NULL, NULL, &st), 0);
    assert_int_equal(mqd_repl_grow(&r, 4096), 0);
    assert_int_equal(mqd_store_log_open(st, "h", 0, &cfg, &log), 0);
    mqd_plog_set_epoch(log, 1);
    assert_int_equal(append_n(st, log, 10, 4, 7, 300, 1000, 1), 0);
    mqd_plog_set_epoch(log, 3);
    assert_int_equal(append_n(st, log, 10, 4, 8, 300, 1000, 1), 0);
    assert_int_equal(mqd_plog_wait_stable(log, 20), 0);
    mqd_repl_hwck_ent_t e = {.topic = "h", .part = 0};
#define TRUST(hw_, ep_, want)                                                                      \
    do {                                                                                           \
        e.hw = (hw_);                                                                              \
        e.epoch = (ep_);                                                                           \
        assert_int_equal(mqd_repl_hwck_trusted(&r, log, &e), (want));                              \
    } while (0)
    TRUST(15, 3, 15);  /* as written */
    TRUST(20, 3, 20);
    TRUST(100, 3, 20); /* above the log's end: only what it holds */
    TRUST(0, 0, 0);
    TRUST(8, 1, 8);
    TRUST(15, 1, 10); /* written in epoch 1: offsets 10.. now hold epoch 3's records */
    TRUST(15, 2, 10);
    TRUST(15, 0, 0);
    assert_int_equal(mqd_plog_truncate_to(log, 12), 0); /* a follower cut back by epoch */
    TRUST(15, 3, 12);
    TRUST(11, 3, 11);
    mqd_plog_set_epoch(log, 5); /* and fetched other records, of a later epoch, there */
    assert_int_equal(append_n(st, log, 8, 4, 9, 300, 1000, 1), 0);
    assert_int_equal(mqd_plog_wait_stable(log, 20), 0);
    TRUST(15, 3, 12);
    TRUST(20, 5, 20);
#undef TRUST
    mqd_store_close(st);
    free(r.buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_and_flipped, setup, teardown),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test_setup_teardown(test_trusted, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
