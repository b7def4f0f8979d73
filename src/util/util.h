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
/* Writes "LEVEL subsys: message" as one line; safe from any thread. */
void mqd_logf(mqd_loglevel_t lvl, const char *subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void mqd_vlogf(mqd_loglevel_t lvl, const char *subsys, const char *fmt, va_list ap);

#define MQD_ERR(sub, ...) mqd_logf(MQD_LOG_ERROR, sub, __VA_ARGS__)
#define MQD_WARN(sub, ...) mqd_logf(MQD_LOG_WARN, sub, __VA_ARGS__)
#define MQD_NOTICE(sub, ...) mqd_logf(MQD_LOG_NOTICE, sub, __VA_ARGS__)
#define MQD_INFO(sub, ...) mqd_logf(MQD_LOG_INFO, sub, __VA_ARGS__)
#define MQD_DEBUG(sub, ...) \
    do { if (mqd_log_get_level() >= MQD_LOG_DEBUG) mqd_logf(MQD_LOG_DEBUG, sub, __VA_ARGS__); } while (0)

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

#endif
