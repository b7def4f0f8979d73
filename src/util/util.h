/* util: logging, clocks, CRC32C, small helpers shared by all subsystems. */
#ifndef MQD_UTIL_H
#define MQD_UTIL_H

#include "mqd.h"
#include <stdarg.h>

/* ---- logging: one line per event to stderr (journald picks it up) ---- */
typedef enum { MQD_LOG_ERROR = 0, MQD_LOG_WARN, MQD_LOG_NOTICE, MQD_LOG_INFO, MQD_LOG_DEBUG } mqd_loglevel_t;

void mqd_log_set_level(mqd_loglevel_t lvl);
mqd_loglevel_t mqd_log_get_level(void);
/* Parses "error|warn|notice|info|debug"; returns 0 or MQD_EINVAL. */
int mqd_log_level_parse(const char *s, mqd_loglevel_t *out);
/* Writes "LEVEL subsys: message" as one line; safe from any thread. The formatted
 * message is escaped (mqd_log_escape): a client's string inside it (a SASL user name, an
 * address, an audience) cannot start a line that looks like mqd's own. */
void mqd_logf(mqd_loglevel_t lvl, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void mqd_vlogf(mqd_loglevel_t lvl, const char *subsys, const char *fmt, va_list ap);
/* Copies the string `in` to out (outlen > 0), writing each control character (C0, DEL,
 * C1), U+2028/U+2029 and each byte that is not part of valid UTF-8 as an escape: \n, \r,
 * \t, \xHH (a byte), \u2028 (a code point). A backslash is copied as it is. out is
 * always terminated; a full out ends at a whole character or escape, never inside one.
 * Returns the length written. */
size_t mqd_log_escape(const char *in, char *out, size_t outlen);

#define MQD_ERR(sub, ...) mqd_logf(MQD_LOG_ERROR, sub, __VA_ARGS__)
#define MQD_WARN(sub, ...) mqd_logf(MQD_LOG_WARN, sub, __VA_ARGS__)
#define MQD_NOTICE(sub, ...) mqd_logf(MQD_LOG_NOTICE, sub, __VA_ARGS__)
#define MQD_INFO(sub, ...) mqd_logf(MQD_LOG_INFO, sub, __VA_ARGS__)
#define MQD_DEBUG(sub, ...) \
    do { if (mqd_log_get_level() >= MQD_LOG_DEBUG) mqd_logf(MQD_LOG_DEBUG, sub, __VA_ARGS__); } while (0)

/* ---- rate-limited logging ----
 * For a line a peer can repeat at will (per accept, per frame, per message): each call
 * site writes at most `burst` lines per `interval_ms`; the lines it drops are counted,
 * and its next line that is written is preceded by one summary line
 * "N similar lines suppressed over the last S s: \"FORMAT\"". Usage, like MQD_WARN:
 *
 *     MQD_LOG_RATELIMITED(MQD_LOG_WARN, "conn", "accept: %s", strerror(err));
 *     MQD_WARN_RL("link", "append to %s/%u failed: %s", topic, part, why);
 *
 * Each expansion has its own static state (10 lines per 5 s), shared by every thread
 * that runs it; MQD_LOG_RATELIMITED_N(burst, interval_ms, lvl, sub, ...) sets other
 * bounds. A line below the log level neither counts nor is counted. */
typedef struct mqd_log_ratelimit {
    uint32_t burst;        /* lines written per window */
    uint32_t interval_ms;  /* window length */
    bool started;          /* a window is open */
    uint64_t window_start; /* ms (monotonic) */
    uint32_t passed;       /* lines written in this window */
    uint64_t suppressed;   /* lines dropped since the last written one */
    uint64_t supp_since;   /* ms of the first of those */
} mqd_log_ratelimit_t;
#define MQD_LOG_RATELIMIT_INIT(burst, interval_ms) {(burst), (interval_ms), false, 0, 0, 0, 0}
#define MQD_LOG_RL_BURST 10
#define MQD_LOG_RL_INTERVAL_MS 5000
/* The decision for one line at now_ms (pure; the caller serializes): true to write it,
 * with *suppressed the lines dropped before it (0: none) and *since_ms when the first of
 * them was. */
bool mqd_log_ratelimit_pass(mqd_log_ratelimit_t *rl, uint64_t now_ms, uint64_t *suppressed,
                            uint64_t *since_ms);
void mqd_logf_ratelimited(mqd_log_ratelimit_t *rl, mqd_loglevel_t lvl, const char *subsys,
                          const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#define MQD_LOG_RATELIMITED_N(burst, interval_ms, lvl, sub, ...)                                   \
    do {                                                                                           \
        static mqd_log_ratelimit_t mqd_rl_ = MQD_LOG_RATELIMIT_INIT(burst, interval_ms);           \
        mqd_logf_ratelimited(&mqd_rl_, lvl, sub, __VA_ARGS__);                                     \
    } while (0)
#define MQD_LOG_RATELIMITED(lvl, sub, ...)                                                         \
    MQD_LOG_RATELIMITED_N(MQD_LOG_RL_BURST, MQD_LOG_RL_INTERVAL_MS, lvl, sub, __VA_ARGS__)
#define MQD_ERR_RL(sub, ...) MQD_LOG_RATELIMITED(MQD_LOG_ERROR, sub, __VA_ARGS__)
#define MQD_WARN_RL(sub, ...) MQD_LOG_RATELIMITED(MQD_LOG_WARN, sub, __VA_ARGS__)
#define MQD_NOTICE_RL(sub, ...) MQD_LOG_RATELIMITED(MQD_LOG_NOTICE, sub, __VA_ARGS__)
#define MQD_INFO_RL(sub, ...) MQD_LOG_RATELIMITED(MQD_LOG_INFO, sub, __VA_ARGS__)

/* ---- clocks ---- */
int64_t mqd_now_ms(void);   /* wall clock, ms since the epoch */
uint64_t mqd_mono_ns(void); /* monotonic, ns */

/* ---- CRC32C (Castagnoli), hardware-accelerated where the CPU allows ---- */
uint32_t mqd_crc32c(uint32_t crc, const void *data, size_t len);

/* ---- arrays ---- */
/* Room for one more element in array p (*cap elements of `size` bytes, n of them used):
 * p itself while n < *cap, else p realloc'd to twice *cap (`first` elements the first
 * time) and *cap updated. NULL when out of memory (p and *cap unchanged). */
void *mqd_array_grow(void *p, size_t *cap, size_t n, size_t size, size_t first);

/* ---- files ---- */
/* fsync the directory that holds `path` (after create/rename/unlink). */
int mqd_fsync_dir(const char *dirpath);
/* mkdir -p that fsyncs each directory it creates and the directory holding it; 0 or
 * MQD_EIO. */
int mqd_mkdirs(const char *path, unsigned mode);
/* fsyncs every ancestor directory of path whose name is at least base_len bytes long
 * (path's parent first): makes a chain that an earlier run created, then crashed before
 * syncing, durable. */
int mqd_fsync_parents(const char *path, size_t base_len);
/* MQD_ENOSPC for a full file system (ENOSPC, EDQUOT), else MQD_EIO. */
int mqd_errno_rc(int err);

/* ---- systemd notify (no-op without $NOTIFY_SOCKET) ---- */
int mqd_sd_notify(const char *state);
/* $WATCHDOG_USEC when it is meant for this process, else 0. */
uint64_t mqd_sd_watchdog_usec(void);

/* Cumulative histogram with fixed bucket bounds (seconds), Prometheus style. */
#define MQD_HIST_BUCKETS 16
typedef struct mqd_hist {
    uint64_t bucket[MQD_HIST_BUCKETS + 1]; /* last = +Inf */
    uint64_t count;
    double sum;
} mqd_hist_t;

/* Records one observation (seconds). No allocation; event-loop thread only. */
void mqd_hist_observe(mqd_hist_t *h, double seconds);
/* Upper bounds of the buckets, in seconds (MQD_HIST_BUCKETS values). */
const double *mqd_hist_bounds(void);
struct evbuffer;
/* Writes h in the Prometheus text format as histogram `name` (HELP, TYPE, buckets, sum,
 * count). */
void mqd_hist_put(struct evbuffer *b, const char *name, const char *help, const mqd_hist_t *h);

#endif
