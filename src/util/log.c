/* Levelled logging: one line per event on stderr. journald adds its own timestamps,
 * so a line is "LEVEL subsys: message"; a terminal gets an ISO time prefix too. */
#include "config.h"
#include "util/util.h"

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

void mqd_vlogf(mqd_loglevel_t lvl, const char *subsys, const char *fmt, va_list ap)
{
    if (lvl > cur_level)
        return;
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
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
