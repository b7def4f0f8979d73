/* The console's parsers: the session cookie is found among others and only when its
 * value is cookie-octets that fit; paths split at '/', percent-decoded per segment
 * (so %2F stays inside a topic name), with %00, "." and ".." and empty segments refused;
 * tokens are exactly 64 lowercase hex digits; a request's head ends at its first empty
 * line, fed in any pieces. */
#include "config.h"
#include "console/console_int.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

static void test_cookie(void **state)
{
    (void)state;
    char v[65];
    assert_int_equal(
        mqd_console_cookie_get("a=1; mqd_session=abc; b=2", "mqd_session", v, sizeof v), 0);
    assert_string_equal(v, "abc");
    assert_int_equal(
        mqd_console_cookie_get("xmqd_session=1; mqd_session=2", "mqd_session", v, sizeof v), 0);
    assert_string_equal(v, "2");
    assert_int_equal(
        mqd_console_cookie_get("mqd_session=first;mqd_session=second", "mqd_session", v, sizeof v),
        0);
    assert_string_equal(v, "first");
    assert_int_equal(mqd_console_cookie_get("a=1", "mqd_session", v, sizeof v), MQD_ENOENT);
    assert_int_equal(mqd_console_cookie_get("", "mqd_session", v, sizeof v), MQD_ENOENT);
    assert_int_equal(mqd_console_cookie_get("mqd_session=a\"b", "mqd_session", v, sizeof v),
                     MQD_EINVAL);
    assert_int_equal(mqd_console_cookie_get("mqd_session=a,b", "mqd_session", v, sizeof v),
                     MQD_EINVAL);
    char longv[200];
    memset(longv, 0, sizeof longv);
    strcpy(longv, "mqd_session=");
    memset(longv + 12, 'a', 65);
    assert_int_equal(mqd_console_cookie_get(longv, "mqd_session", v, sizeof v), MQD_EINVAL);
    assert_int_equal(mqd_console_cookie_get("mqd_session=", "mqd_session", v, sizeof v), 0);
    assert_string_equal(v, "");
}

static void test_path(void **state)
{
    (void)state;
    const char *segs[8];
    char buf[256];
    int n =
        mqd_console_path_split("/api/topics/a%2Fb/partitions/0/messages", segs, 8, buf, sizeof buf);
    assert_int_equal(n, 6);
    assert_string_equal(segs[0], "api");
    assert_string_equal(segs[2], "a/b");
    assert_string_equal(segs[5], "messages");
    assert_int_equal(mqd_console_path_split("/", segs, 8, buf, sizeof buf), 0);
    assert_int_equal(mqd_console_path_split("/ui/", segs, 8, buf, sizeof buf), 1);
    assert_int_equal(mqd_console_path_split("/ui/app.js?x=1", segs, 8, buf, sizeof buf), 2);
    assert_string_equal(segs[1], "app.js");
    assert_int_equal(mqd_console_path_split("/g/%24Default", segs, 8, buf, sizeof buf), 2);
    assert_string_equal(segs[1], "$Default");
    static const char *const bad[] = {"api",       "/a//b",  "/a/%00",
                                      "/a/%4",     "/a/%zz", "/a/..",
                                      "/a/%2e%2e", "/./a",   "/1/2/3/4/5/6/7/8/9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(mqd_console_path_split(bad[i], segs, 8, buf, sizeof buf), MQD_EINVAL);
    char small[8];
    assert_int_equal(mqd_console_path_split("/abcdefgh", segs, 8, small, sizeof small), MQD_EINVAL);
}

static void test_token(void **state)
{
    (void)state;
    char t[70];
    memset(t, 'a', 64);
    t[64] = '\0';
    assert_true(mqd_console_token_ok(t));
    t[10] = 'A';
    assert_false(mqd_console_token_ok(t));
    t[10] = '0';
    t[63] = '\0';
    assert_false(mqd_console_token_ok(t));
    memset(t, 'f', 65);
    t[65] = '\0';
    assert_false(mqd_console_token_ok(t));
    assert_false(mqd_console_token_ok(""));
}

/* Feeds s one byte at a time (the way a slow client sends it); the index of the byte
 * that ended the head, or -1. */
static int head_end_bytewise(const char *s)
{
    mqd_console_head_t h;
    mqd_console_head_reset(&h);
    for (size_t i = 0; s[i]; i++)
        if (mqd_console_head_scan(&h, s + i, 1))
            return (int)i;
    return -1;
}

static bool head_ends(const char *s)
{
    mqd_console_head_t h;
    mqd_console_head_reset(&h);
    return mqd_console_head_scan(&h, s, strlen(s));
}

static void test_head(void **state)
{
    (void)state;
    /* CRLF and bare LF lines, as evhttp reads them */
    assert_true(head_ends("GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
    assert_true(head_ends("GET / HTTP/1.1\nHost: a\n\n"));
    assert_true(head_ends("GET / HTTP/1.0\r\n\r\n"));
    assert_true(head_ends("GET / HTTP/1.1\r\nHost: a\n\r\n"));
    /* not yet: a line still open, a lone CR, an empty start (skipped) */
    assert_false(head_ends("GET / HTTP/1.1\r\nHost: a\r\n"));
    assert_false(head_ends("GET / HTTP/1.1\r\nHost: a\r\n\r"));
    assert_false(head_ends("\r\n\r\n\n"));
    assert_false(head_ends("GET / HTTP/1.1\r\nX: \r\r\n"));
    /* the byte that ends it, fed one at a time as a slow client sends */
    assert_int_equal(head_end_bytewise("GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY"), 26);
    assert_int_equal(head_end_bytewise("\r\nGET / HTTP/1.1\n\n"), 17);
    assert_int_equal(head_end_bytewise("POST / HTTP/1.1\r\nContent-Length: 2\r\n"), -1);
    /* in two pieces split inside the CRLF CRLF */
    mqd_console_head_t h;
    mqd_console_head_reset(&h);
    assert_false(mqd_console_head_scan(&h, "GET / HTTP/1.1\r\n\r", 17));
    assert_true(mqd_console_head_scan(&h, "\n", 1));
    /* a reset starts the next request's head */
    mqd_console_head_reset(&h);
    assert_false(mqd_console_head_scan(&h, "\r\n", 2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cookie),
        cmocka_unit_test(test_path),
        cmocka_unit_test(test_token),
        cmocka_unit_test(test_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
