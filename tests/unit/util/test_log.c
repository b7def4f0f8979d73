/* The log (util/log.c): an outside string inside a message cannot forge a line (control
 * characters, C1 controls, line separators and bytes that are not UTF-8 come out
 * escaped; valid UTF-8 and printable ASCII as they are), and a rate-limited call site
 * writes at most its burst per window, then one summary of what it dropped. The lines
 * are read back from stderr, redirected to a file. */
#include "config.h"
#include "util/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

/* ---- stderr to a file and back ---- */

typedef struct capture {
    FILE *f;
    int saved;
} capture_t;

static void capture_start(capture_t *c)
{
    fflush(stderr);
    c->f = tmpfile();
    assert_non_null(c->f);
    c->saved = dup(STDERR_FILENO);
    assert_true(c->saved >= 0);
    assert_true(dup2(fileno(c->f), STDERR_FILENO) >= 0);
}

/* Restores stderr; returns what was written (malloc'd). */
static char *capture_end(capture_t *c)
{
    fflush(stderr);
    assert_true(dup2(c->saved, STDERR_FILENO) >= 0);
    close(c->saved);
    long n = ftell(c->f);
    assert_true(n >= 0);
    char *buf = calloc(1, (size_t)n + 1);
    assert_non_null(buf);
    rewind(c->f);
    assert_int_equal(fread(buf, 1, (size_t)n, c->f), (size_t)n);
    fclose(c->f);
    return buf;
}

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static size_t count_of(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = strstr(s, what); p != NULL; p = strstr(p + 1, what))
        n++;
    return n;
}

/* ---- escaping ---- */

static void expect_escape(const char *in, const char *want)
{
    char out[256];
    size_t n = mqd_log_escape(in, out, sizeof out);
    assert_string_equal(out, want);
    assert_int_equal(n, strlen(want));
}

static void test_escape(void **state)
{
    (void)state;
    expect_escape("plain ASCII: user=alice peer=127.0.0.1:5672",
                  "plain ASCII: user=alice peer=127.0.0.1:5672");
    expect_escape("a\nb\rc\td", "a\\nb\\rc\\td");
    expect_escape("\x01\x1b[31m\x7f", "\\x01\\x1b[31m\\x7f");
    /* valid UTF-8 stays: é, €, an emoji (4 bytes) */
    expect_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                  "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    /* C1 controls (NEL, CSI) and the Unicode line and paragraph separators */
    expect_escape("a\xc2\x85"
                  "b\xc2\x9b"
                  "c",
                  "a\\u0085b\\u009bc");
    expect_escape("x\xe2\x80\xa8y\xe2\x80\xa9z", "x\\u2028y\\u2029z");
    /* not UTF-8: a lone lead byte, a stray continuation, an overlong '/', a surrogate,
     * past U+10FFFF, a sequence cut by the end */
    expect_escape("\xc3(", "\\xc3(");
    expect_escape("\x80", "\\x80");
    expect_escape("\xc0\xaf", "\\xc0\\xaf");
    expect_escape("\xed\xa0\x80", "\\xed\\xa0\\x80");
    expect_escape("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80");
    expect_escape("end\xe2\x82", "end\\xe2\\x82");
    expect_escape("back\\slash", "back\\slash");
    expect_escape("", "");
}

static void test_escape_full_buffer(void **state)
{
    (void)state;
    char out[8];
    /* "ab\n" -> "ab\\n" (4) then "\x01" (4 more) does not fit in 7: cut before it */
    assert_int_equal(mqd_log_escape("ab\n\x01", out, sizeof out), 4);
    assert_string_equal(out, "ab\\n");
    /* a multi-byte character is never split */
    assert_int_equal(mqd_log_escape("abcde\xe2\x82\xac", out, 8), 5);
    assert_string_equal(out, "abcde");
    assert_int_equal(mqd_log_escape("abcdefghij", out, 8), 7);
    assert_string_equal(out, "abcdefg");
    assert_int_equal(mqd_log_escape("x", out, 1), 0);
    assert_string_equal(out, "");
}

/* A forged line inside a SASL user name: one line comes out, the injection escaped. */
static void test_log_line_not_forged(void **state)
{
    (void)state;
    capture_t c;
    unsetenv("JOURNAL_STREAM");
    mqd_log_set_level(MQD_LOG_INFO);
    const char *user = "x\n2026-01-01T00:00:00.000Z notice auth: SASL PLAIN peer=10.0.0.1:1 "
                       "user=admin\r\n";
    capture_start(&c);
    MQD_NOTICE("auth", "SASL refused peer=%s mech=PLAIN user=%s reason=%s", "127.0.0.1:4000", user,
               "wrong password");
    MQD_INFO("auth", "%s", "second\x1b[2Kline\xff");
    char *out = capture_end(&c);
    assert_int_equal(count_lines(out), 2);
    assert_non_null(strstr(out,
                           " notice auth: SASL refused peer=127.0.0.1:4000 mech=PLAIN user=x\\n"
                           "2026-01-01T00:00:00.000Z notice auth: SASL PLAIN peer=10.0.0.1:1 "
                           "user=admin\\r\\n reason=wrong password\n"));
    assert_non_null(strstr(out, " info auth: second\\x1b[2Kline\\xff\n"));
    /* the journal's form: one line too */
    setenv("JOURNAL_STREAM", "8:1", 1);
    capture_start(&c);
    MQD_NOTICE("auth", "user=%s", "a\n<3>auth: forged");
    char *jout = capture_end(&c);
    unsetenv("JOURNAL_STREAM");
    assert_string_equal(jout, "<5>auth: user=a\\n<3>auth: forged\n");
    free(out);
    free(jout);
}

/* ---- rate limiting ---- */

static void test_ratelimit_decisions(void **state)
{
    (void)state;
    mqd_log_ratelimit_t rl = MQD_LOG_RATELIMIT_INIT(3, 1000);
    uint64_t dropped = 99, since = 99;
    int passed = 0;
    for (uint64_t t = 5000; t < 5010; t++) {
        if (mqd_log_ratelimit_pass(&rl, t, &dropped, &since)) {
            passed++;
            assert_int_equal(dropped, 0);
        }
    }
    assert_int_equal(passed, 3);
    assert_int_equal(rl.suppressed, 7);
    assert_int_equal(rl.supp_since, 5003); /* the first one dropped */
    /* still inside the window: dropped and counted */
    assert_false(mqd_log_ratelimit_pass(&rl, 5999, &dropped, &since));
    /* the next window: written, with the 8 dropped since 5003 */
    assert_true(mqd_log_ratelimit_pass(&rl, 6000, &dropped, &since));
    assert_int_equal(dropped, 8);
    assert_int_equal(since, 5003);
    assert_true(mqd_log_ratelimit_pass(&rl, 6001, &dropped, &since));
    assert_int_equal(dropped, 0); /* reported once */
    /* a quiet site: every line passes */
    mqd_log_ratelimit_t quiet = MQD_LOG_RATELIMIT_INIT(3, 1000);
    for (uint64_t t = 0; t < 10; t++)
        assert_true(mqd_log_ratelimit_pass(&quiet, t * 1000, &dropped, &since));
}

static void spin_site(int n)
{
    for (int i = 0; i < n; i++)
        MQD_WARN_RL("conn", "accept: %s (%d)", "Too many open files", i);
}

static void test_ratelimit_site(void **state)
{
    (void)state;
    capture_t c;
    unsetenv("JOURNAL_STREAM");
    mqd_log_set_level(MQD_LOG_INFO);
    /* one call site (its own static state), 1000 times in a row */
    capture_start(&c);
    spin_site(1000);
    char *out = capture_end(&c);
    assert_int_equal(count_of(out, " warn conn: accept: Too many open files ("), MQD_LOG_RL_BURST);
    assert_non_null(strstr(out, "accept: Too many open files (0)\n"));
    assert_null(strstr(out, "suppressed"));
    free(out);

    /* a state of our own: the window ends, and the next line brings the summary */
    mqd_log_ratelimit_t rl = MQD_LOG_RATELIMIT_INIT(2, 60000);
    capture_start(&c);
    for (int i = 0; i < 20; i++)
        mqd_logf_ratelimited(&rl, MQD_LOG_WARN, "link", "append to t/%d failed", i);
    assert_int_equal(rl.suppressed, 18);
    rl.window_start -= 60000; /* as if a minute had passed */
    mqd_logf_ratelimited(&rl, MQD_LOG_WARN, "link", "append to t/%d failed", 20);
    out = capture_end(&c);
    assert_int_equal(count_lines(out), 4);
    assert_int_equal(count_of(out, "append to t/"), 3 + 1); /* 0, 1, 20 and the summary's format */
    assert_non_null(strstr(out, " warn link: 18 similar lines suppressed over the last "));
    assert_non_null(strstr(out, " s: \"append to t/%d failed\"\n"));
    const char *sum = strstr(out, "18 similar"), *last = strstr(out, "append to t/20 failed");
    assert_non_null(last);
    assert_true(sum < last); /* the summary comes first */
    free(out);

    /* below the log level: neither written nor counted */
    mqd_log_ratelimit_t low = MQD_LOG_RATELIMIT_INIT(1, 60000);
    capture_start(&c);
    for (int i = 0; i < 5; i++)
        mqd_logf_ratelimited(&low, MQD_LOG_DEBUG, "link", "debug %d", i);
    out = capture_end(&c);
    assert_string_equal(out, "");
    assert_int_equal(low.suppressed, 0);
    assert_int_equal(low.passed, 0);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_escape_full_buffer),
        cmocka_unit_test(test_log_line_not_forged),
        cmocka_unit_test(test_ratelimit_decisions),
        cmocka_unit_test(test_ratelimit_site),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
