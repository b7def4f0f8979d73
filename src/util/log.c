/* Levelled logging: one line per event on stderr. journald adds its own timestamps,
 * so a line is "LEVEL subsys: message"; a terminal gets an ISO time prefix too.
 *
 * Every message is escaped after formatting, here and not at the call sites: a string a
 * client chose (a SASL user name, a link address, a $cbs audience, a console login) is
 * printed with %s in many places, and one forgotten call site would let a newline in it
 * write a line that looks like mqd's own. mqd's own formats hold no control character
 * (checked when this was written: no log format in src/ has one), so escaping the whole
 * message changes nothing of theirs. */
#include "config.h"
#include "util/util.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>

static mqd_loglevel_t cur_level = MQD_LOG_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *const level_names[] = {"error", "warn", "notice", "info", "debug"};

void mqd_log_set_level(mqd_loglevel_t lvl) { cur_level = lvl; }
mqd_loglevel_t mqd_log_get_level(void) { return cur_level; }

int mqd_log_level_parse(const char *s, mqd_loglevel_t *out)
{
    for (size_t i = 0; i < MQD_ARRAY_LEN(level_names); i++) {
        if (strcasecmp(s, level_names[i]) == 0) {
            *out = (mqd_loglevel_t)i;
            return 0;
        }
    }
    if (strcasecmp(s, "warning") == 0) {
        *out = MQD_LOG_WARN;
        return 0;
    }
    return MQD_EINVAL;
}

/* Length (1..4) of the well-formed UTF-8 sequence at s, its code point in *cp; 0 when s
 * starts no such sequence (a stray continuation byte, an overlong form, a surrogate, a
 * sequence cut by the terminator). */
static size_t utf8_seq(const unsigned char *s, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t n;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, v = c & 0x1fu, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, v = c & 0x0fu, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, v = c & 0x07u, min = 0x10000;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3fu);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return n;
}

/* The escape for code point cp into esc (>= 8), or 0 when it is printed as it is. */
static size_t escape_of(uint32_t cp, char *esc)
{
    if (cp == '\n' || cp == '\r' || cp == '\t') {
        esc[0] = '\\';
        esc[1] = cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't';
        return 2;
    }
    if (cp < 0x20 || cp == 0x7f)
        return (size_t)snprintf(esc, 8, "\\x%02x", (unsigned)cp);
    if ((cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029)
        return (size_t)snprintf(esc, 8, "\\u%04x", (unsigned)cp);
    return 0;
}

size_t mqd_log_escape(const char *in, char *out, size_t outlen)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t o = 0;
    while (*p != '\0') {
        if (*p >= 0x20 && *p < 0x7f) { /* the common case: printable ASCII */
            if (o + 1 >= outlen)
                break;
            out[o++] = (char)*p++;
            continue;
        }
        char esc[8];
        uint32_t cp = 0;
        size_t n = utf8_seq(p, &cp), w;
        const char *src = esc;
        if (n == 0) { /* not UTF-8: the byte itself */
            w = (size_t)snprintf(esc, sizeof esc, "\\x%02x", (unsigned)*p);
            n = 1;
        } else if ((w = escape_of(cp, esc)) == 0) {
            src = (const char *)p;
            w = n;
        }
        if (o + w >= outlen)
            break;
        memcpy(out + o, src, w);
        o += w;
        p += n;
    }
    out[o] = '\0';
    return o;
}

void mqd_vlogf(mqd_loglevel_t lvl, const char *subsys, const char *fmt, va_list ap)
{
    if (lvl > cur_level)
        return;
    char raw[2048], msg[4 * sizeof raw]; /* an escape is at most 4 bytes a byte */
    vsnprintf(raw, sizeof raw, fmt, ap);
    mqd_log_escape(raw, msg, sizeof msg);
    /* sd-daemon style priority prefix when stderr is the journal, a timestamp otherwise */
    static const int prio[] = {3, 4, 5, 6, 7};
    pthread_mutex_lock(&log_lock);
    if (getenv("JOURNAL_STREAM") != NULL) {
        fprintf(stderr, "<%d>%s: %s\n", prio[lvl], subsys, msg);
    } else {
        struct timespec ts;
        struct tm tm;
        char tbuf[32];
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        strftime(tbuf, sizeof tbuf, "%Y-%m-%dT%H:%M:%S", &tm);
        fprintf(stderr, "%s.%03ldZ %s %s: %s\n", tbuf, ts.tv_nsec / 1000000L, level_names[lvl],
                subsys, msg);
    }
    pthread_mutex_unlock(&log_lock);
}

void mqd_logf(mqd_loglevel_t lvl, const char *subsys, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mqd_vlogf(lvl, subsys, fmt, ap);
    va_end(ap);
}

/* ---- rate limiting (util.h: MQD_LOG_RATELIMITED) ---- */

static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;

bool mqd_log_ratelimit_pass(mqd_log_ratelimit_t *rl, uint64_t now_ms, uint64_t *suppressed,
                            uint64_t *since_ms)
{
    if (!rl->started || now_ms - rl->window_start >= rl->interval_ms) {
        rl->started = true;
        rl->window_start = now_ms;
        rl->passed = 0;
    }
    if (rl->passed >= rl->burst) {
        if (rl->suppressed++ == 0)
            rl->supp_since = now_ms;
        return false;
    }
    rl->passed++;
    *suppressed = rl->suppressed;
    *since_ms = rl->supp_since;
    rl->suppressed = 0;
    return true;
}

void mqd_logf_ratelimited(mqd_log_ratelimit_t *rl, mqd_loglevel_t lvl, const char *subsys,
                          const char *fmt, ...)
{
    if (lvl > cur_level)
        return;
    uint64_t now = mqd_mono_ns() / 1000000, dropped = 0, since = 0;
    pthread_mutex_lock(&rl_lock);
    bool pass = mqd_log_ratelimit_pass(rl, now, &dropped, &since);
    pthread_mutex_unlock(&rl_lock);
    if (!pass)
        return;
    if (dropped > 0)
        mqd_logf(lvl, subsys, "%" PRIu64 " similar lines suppressed over the last %.1f s: \"%s\"",
                 dropped, (double)(now - since) / 1000.0, fmt);
    va_list ap;
    va_start(ap, fmt);
    mqd_vlogf(lvl, subsys, fmt, ap);
    va_end(ap);
}
