/* The console's parsers of request text (cookies, paths): pure functions, fuzzed by
 * tests/fuzz/fuzz_console.c. Everything else (query strings, JSON bodies) goes through
 * evhttp_parse_query_str and jansson. */
#include "config.h"
#include "console/console_int.h"

#include <string.h>

/* RFC 6265 cookie-octet: what a value may hold unquoted. */
static bool cookie_octet(unsigned char ch)
{
    return ch == 0x21 || (ch >= 0x23 && ch <= 0x2b) || (ch >= 0x2d && ch <= 0x3a) ||
           (ch >= 0x3c && ch <= 0x5b) || (ch >= 0x5d && ch <= 0x7e);
}

int mqd_console_cookie_get(const char *header, const char *name, char *out, size_t outlen)
{
    size_t nl = strlen(name);
    const char *p = header;
    while (p && *p) {
        p += strspn(p, " \t;");
        size_t pair = strcspn(p, ";");
        const char *eq = memchr(p, '=', pair);
        if (eq && (size_t)(eq - p) == nl && strncmp(p, name, nl) == 0) {
            const char *v = eq + 1;
            size_t vl = pair - (size_t)(v - p);
            while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
                vl--;
            if (vl + 1 > outlen)
                return MQD_EINVAL;
            for (size_t i = 0; i < vl; i++)
                if (!cookie_octet((unsigned char)v[i]))
                    return MQD_EINVAL;
            memcpy(out, v, vl);
            out[vl] = '\0';
            return 0;
        }
        p += pair;
    }
    return MQD_ENOENT;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Decodes one segment p[0..n) into out (room `room`); its length, or -1. */
static int decode_seg(const char *p, size_t n, char *out, size_t room)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)p[i];
        if (ch == '%') {
            int hi = i + 2 < n ? hexval(p[i + 1]) : -1;
            int lo = i + 2 < n ? hexval(p[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return -1; /* short, not hex, or %00 */
            ch = hi * 16 + lo;
            i += 2;
        }
        if (o + 1 >= room)
            return -1;
        out[o++] = (char)ch;
    }
    out[o] = '\0';
    return (int)o;
}

int mqd_console_path_split(const char *path, const char **segs, int max, char *buf, size_t buflen)
{
    if (path[0] != '/')
        return MQD_EINVAL;
    size_t end = strcspn(path, "?#");
    size_t used = 0;
    int n = 0;
    const char *p = path + 1;
    while ((size_t)(p - path) < end) {
        size_t len = strcspn(p, "/?#");
        if (n == max || used >= buflen)
            return MQD_EINVAL;
        int dl = decode_seg(p, len, buf + used, buflen - used);
        if (dl <= 0 || strcmp(buf + used, ".") == 0 || strcmp(buf + used, "..") == 0)
            return MQD_EINVAL;
        segs[n++] = buf + used;
        used += (size_t)dl + 1;
        p += len;
        if (*p == '/') {
            p++;
            if ((size_t)(p - path) == end) /* a trailing '/' is allowed: "/ui/" */
                break;
        }
    }
    return n;
}

bool mqd_console_token_ok(const char *s)
{
    size_t i = 0;
    for (; s[i]; i++)
        if (i >= MQD_CONSOLE_TOKEN_HEX ||
            !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return i == MQD_CONSOLE_TOKEN_HEX;
}

bool mqd_console_head_scan(mqd_console_head_t *h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (ch == '\n') {
            if (h->bol && h->seen_line)
                return true; /* an empty line ends the head */
            h->bol = true;
            h->cr = false;
        } else if (ch == '\r' && h->bol && !h->cr) {
            h->cr = true; /* maybe "\r\n": still an empty line */
        } else {
            h->bol = h->cr = false;
            h->seen_line = true;
        }
    }
    return false;
}

void mqd_console_head_reset(mqd_console_head_t *h)
{
    *h = (mqd_console_head_t){.bol = true};
}
