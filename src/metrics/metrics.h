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
 * directories, symlinks not followed) into *out. The first call (a zeroed `cache`)
 * walks dir before it returns; later ones give the result in `cache`, and when that is
 * a few seconds old start a new walk on a thread of its own, whose result a later call
 * gives. MQD_EIO when dir cannot be opened on the first walk (a later walk that fails
 * keeps the last result). mqd_metrics_dir_size_free waits for a walk under way. */
struct mqd_dir_walk;
typedef struct mqd_dir_size {
    int64_t at_ms; /* when the walk that measured bytes started (0: never) */
    uint64_t bytes;
    struct mqd_dir_walk *walk; /* under way (owned), or NULL */
} mqd_dir_size_t;
int mqd_metrics_dir_size(const char *dir, int64_t now_ms, mqd_dir_size_t *cache, uint64_t *out);
void mqd_metrics_dir_size_free(mqd_dir_size_t *cache);

/* history.c: the console's chart history, sampled every 5 s on the loop (an hour of 5 s
 * samples, a day of minutes; bounded). Series: "broker" (in_per_s, out_per_s,
 * bytes_in_per_s, bytes_out_per_s, connections), "topic/T" (in_per_s, out_per_s),
 * "group/T/G" (lag). */
typedef struct mqd_history mqd_history_t;
/* Called first with t_ms 0 and v NULL (the field names), then once per sample, oldest
 * first: counters as rates per second between samples, gauges as they were. */
typedef void (*mqd_history_cb)(int64_t t_ms, const double *v, size_t k,
                               const char *const *fields, void *arg);
/* The server's history, or NULL when metrics did not start. */
mqd_history_t *mqd_metrics_history(struct mqd_server *s);
/* Reads one series (`coarse`: the minutes of the day, else the 5 s of the hour): 0, or
 * MQD_ENOENT for a series never sampled. */
int mqd_history_read(mqd_history_t *h, const char *name, bool coarse, mqd_history_cb cb, void *arg);
uint32_t mqd_history_interval_ms(bool coarse);

/* Starts the history sampler, and the HTTP endpoint when conf->metrics_listen is set. */
int mqd_metrics_start(struct mqd_server *s);
/* Stops and frees the endpoint (s->metrics); safe when it never started. */
void mqd_metrics_stop(struct mqd_server *s);

#endif
