/* metrics: counters and histograms, and the Prometheus text endpoint (/metrics, /healthz,
 * /readyz) served with libevent's evhttp on the broker's own event loop. */
#ifndef MQD_METRICS_H
#define MQD_METRICS_H

#include "mqd.h"

struct mqd_server;

/* What the process itself costs: resident memory and time since it started. */
typedef struct mqd_proc_stats {
    uint64_t rss_bytes;
    double uptime_s;
    double start_time_s; /* since the epoch */
    uint64_t open_fds;
} mqd_proc_stats_t;

/* Reads /proc/self (Linux); fields it cannot read stay 0. */
void mqd_metrics_proc_stats(mqd_proc_stats_t *out);

/* dirsize.c: bytes the files under dir take on disk (allocated blocks of files and
 * directories, symlinks not followed) into *out; a result in `cache` younger than a
 * few seconds is given instead. MQD_EIO when dir cannot be opened. */
typedef struct mqd_dir_size {
    int64_t at_ms; /* when bytes was measured (0: never) */
    uint64_t bytes;
} mqd_dir_size_t;
int mqd_metrics_dir_size(const char *dir, int64_t now_ms, mqd_dir_size_t *cache, uint64_t *out);

/* Starts the HTTP endpoint when conf->metrics_listen is set (0 when it is not). */
int mqd_metrics_start(struct mqd_server *s);
/* Stops and frees the endpoint (s->metrics); safe when it never started. */
void mqd_metrics_stop(struct mqd_server *s);

#endif
