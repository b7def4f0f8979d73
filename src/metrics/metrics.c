/* Metrics: histograms, and the HTTP endpoint (libevent evhttp on the broker's own loop,
 * so every handler reads broker state on the thread that owns it, without locks):
 *   /metrics  Prometheus text exposition format 0.0.4
 *   /healthz  200 "ok" while the loop runs (liveness)
 *   /readyz   200 when the AMQP listeners are up, the server is not stopping and (in a
 *             cluster) no replica here is catching up, else 503 with the reason
 * The page is built per scrape; its cost grows with topics x partitions x groups. */
#include "config.h"
#include "metrics/metrics_int.h"
#include "group/group.h"
#include "core/core.h"
#include "txn/txn.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <dirent.h>

/* ---------------------------------------------------------------- process */

void mqd_metrics_proc_stats(mqd_proc_stats_t *out)
{
    memset(out, 0, sizeof *out);
    long page = sysconf(_SC_PAGESIZE), hz = sysconf(_SC_CLK_TCK);
    unsigned long long size, rss, start = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &rss) == 2 && page > 0)
            out->rss_bytes = rss * (unsigned long long)page;
        fclose(f);
    }
    /* field 22 of /proc/self/stat is the start time in ticks after boot; the command
     * name (field 2) may hold spaces, so parse after its closing parenthesis */
    char buf[1024];
    f = fopen("/proc/self/stat", "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
        char *p = strrchr(buf, ')');
        for (int field = 2; p && field < 22; field++)
            p = strchr(p + 1, ' ');
        if (p)
            start = strtoull(p + 1, NULL, 10);
    }
    double up = 0;
    f = fopen("/proc/uptime", "r");
    if (f) {
        if (fscanf(f, "%lf", &up) != 1)
            up = 0;
        fclose(f);
    }
    if (hz > 0 && up > 0) {
        out->uptime_s = up - (double)start / (double)hz;
        out->start_time_s = (double)mqd_now_ms() / 1000.0 - out->uptime_s;
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            out->open_fds += e->d_name[0] != '.';
        closedir(d);
        out->open_fds--; /* the one opendir holds */
    }
}

/* ---------------------------------------------------------------- exposition */

typedef struct mqd_metrics {
    mqd_server_t *srv;
    struct evhttp *http;     /* NULL without metrics_listen */
    mqd_history_t *history;  /* history.c, always */
    mqd_dir_size_t data_dir; /* dirsize.c's last walk of data_dir */
} mqd_metrics_t;

/* Label values: backslash, double quote and newline are escaped (format 0.0.4). */
void mqd_metrics_label(struct evbuffer *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            evbuffer_add_printf(b, "\\%c", *v);
        else if (*v == '\n')
            evbuffer_add(b, "\\n", 2);
        else
            evbuffer_add(b, v, 1);
    }
}

void mqd_metrics_head(struct evbuffer *b, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

typedef enum { F_MSGS_IN, F_BYTES_IN, F_MSGS_OUT, F_BYTES_OUT, F_EXPIRED, F_DEAD, F_REJECTED, F_DUP } tfield_t;

static const struct topic_counter {
    const char *name, *help;
    tfield_t f;
} topic_counters[] = {
    {"mqd_topic_messages_in_total", "Messages appended to the topic.", F_MSGS_IN},
    {"mqd_topic_bytes_in_total", "Bytes of messages appended to the topic.", F_BYTES_IN},
    {"mqd_topic_messages_out_total", "Messages delivered from the topic.", F_MSGS_OUT},
    {"mqd_topic_bytes_out_total", "Bytes of messages delivered from the topic.", F_BYTES_OUT},
    {"mqd_topic_messages_expired_total", "Messages dropped at delivery because ttl expired.", F_EXPIRED},
    {"mqd_topic_messages_dead_lettered_total", "Messages moved to T/$DeadLetterQueue.", F_DEAD},
    {"mqd_topic_messages_consumer_rejected_total", "Deliveries rejected by consumers.", F_REJECTED},
    {"mqd_topic_messages_duplicate_total", "Sends dropped as duplicates by message-id.", F_DUP},
};

static uint64_t topic_field(const mqd_topic_t *t, tfield_t f)
{
    mqd_topic_stats_t st;
    mqd_topic_stats(t, &st);
    switch (f) {
    case F_MSGS_IN: return st.msgs_in;
    case F_BYTES_IN: return st.bytes_in;
    case F_MSGS_OUT: return st.msgs_out;
    case F_EXPIRED: return st.msgs_expired;
    case F_DEAD: return st.msgs_dead;
    case F_REJECTED: return st.msgs_rejected;
    case F_DUP: return st.msgs_duplicate;
    default: return st.bytes_out;
    }
}

#define FOR_TOPICS(s, t)                                                                           \
    for (mqd_topic_t *t = mqd_srv_topic_first(s); t; t = mqd_srv_topic_next(t))                    \
        if (!mqd_topic_temporary(t))

static void put_topics(struct evbuffer *b, mqd_server_t *s)
{
    for (size_t k = 0; k < MQD_ARRAY_LEN(topic_counters); k++) {
        mqd_metrics_head(b, topic_counters[k].name, "counter", topic_counters[k].help);
        FOR_TOPICS(s, t) {
            evbuffer_add_printf(b, "%s{topic=\"", topic_counters[k].name);
            mqd_metrics_label(b, mqd_topic_name(t));
            evbuffer_add_printf(b, "\"} %llu\n", (unsigned long long)topic_field(t, topic_counters[k].f));
        }
    }
    static const char *const pm[5][3] = {
        {"mqd_partition_log_start_offset", "First offset still on disk.", "gauge"},
        {"mqd_partition_log_end_offset", "Next offset to be written (stable end).", "gauge"},
        {"mqd_partition_size_bytes", "Bytes of the partition's segments.", "gauge"},
        {"mqd_partition_failed", "1 while the partition's log is failed (disk full, I/O error) "
         "and refuses sends.", "gauge"},
        {"mqd_partition_corrupt_records_total", "Offsets readers skipped because their record "
         "failed its CRC or header check (since start).", "counter"},
    };
    for (int k = 0; k < 5; k++) {
        mqd_metrics_head(b, pm[k][0], pm[k][2], pm[k][1]);
        FOR_TOPICS(s, t) {
            for (uint32_t i = 0; i < mqd_topic_nparts(t); i++) {
                mqd_part_t *p = mqd_topic_part(t, i);
                mqd_plog_t *log = mqd_part_log(p);
                uint64_t v, first;
                if (k == 4)
                    mqd_plog_corrupt(log, &v, &first);
                else
                    v = k == 0   ? mqd_plog_start_offset(log)
                        : k == 1 ? mqd_part_visible_end(p, MQD_READ_UNCOMMITTED)
                        : k == 2 ? mqd_plog_size_bytes(log)
                                 : mqd_plog_failed(log);
                evbuffer_add_printf(b, "%s{topic=\"", pm[k][0]);
                mqd_metrics_label(b, mqd_topic_name(t));
                evbuffer_add_printf(b, "\",partition=\"%u\"} %llu\n", i, (unsigned long long)v);
            }
        }
    }
}

typedef struct lagctx {
    struct evbuffer *b;
    mqd_topic_t *t;
    const char *group;
} lagctx_t;

static int lag_part(const mqd_group_part_info_t *pi, void *arg)
{
    lagctx_t *x = arg;
    evbuffer_add(x->b, "mqd_group_lag{topic=\"", 21);
    mqd_metrics_label(x->b, mqd_topic_name(x->t));
    evbuffer_add(x->b, "\",group=\"", 9);
    mqd_metrics_label(x->b, x->group);
    evbuffer_add_printf(x->b, "\",partition=\"%u\"} %llu\n", pi->partition, (unsigned long long)pi->lag);
    return 0;
}

static void lag_group(mqd_topic_t *t, const char *group, size_t members, void *arg)
{
    MQD_UNUSED(members);
    lagctx_t x = {.b = arg, .t = t, .group = group};
    mqd_group_describe(t, group, lag_part, &x);
}

static void put_groups(struct evbuffer *b, mqd_server_t *s)
{
    mqd_metrics_head(b, "mqd_group_lag", "gauge", "Records between a group's committed offset and the log end.");
    mqd_metrics_each_group(s, lag_group, b); /* $shared once a queue consumer used it */
}

static void put_process(struct evbuffer *b, mqd_metrics_t *m)
{
    const mqd_conf_t *conf = mqd_srv_conf(m->srv);
    mqd_proc_stats_t ps;
    mqd_metrics_proc_stats(&ps);
    mqd_metrics_head(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    evbuffer_add_printf(b, "process_resident_memory_bytes %llu\n", (unsigned long long)ps.rss_bytes);
    mqd_metrics_head(b, "process_start_time_seconds", "gauge", "Start time of the process since the epoch.");
    evbuffer_add_printf(b, "process_start_time_seconds %.3f\n", ps.start_time_s);
    mqd_metrics_head(b, "process_open_fds", "gauge", "Open file descriptors.");
    evbuffer_add_printf(b, "process_open_fds %llu\n", (unsigned long long)ps.open_fds);
    uint64_t used;
    if (mqd_metrics_dir_size(conf->data_dir, mqd_now_ms(), &m->data_dir, &used) == 0) {
        mqd_metrics_head(b, "mqd_data_dir_size_bytes", "gauge",
             "Disk space the files under data_dir take (allocated blocks, as du counts).");
        evbuffer_add_printf(b, "mqd_data_dir_size_bytes %llu\n", (unsigned long long)used);
    }
    struct statvfs sv;
    if (statvfs(conf->data_dir, &sv) == 0) {
        mqd_metrics_head(b, "mqd_data_dir_fs_size_bytes", "gauge", "Size of the file system holding data_dir.");
        evbuffer_add_printf(b, "mqd_data_dir_fs_size_bytes %llu\n",
                            (unsigned long long)sv.f_blocks * sv.f_frsize);
        mqd_metrics_head(b, "mqd_data_dir_free_bytes", "gauge", "Bytes available to mqd on data_dir's file system.");
        evbuffer_add_printf(b, "mqd_data_dir_free_bytes %llu\n",
                            (unsigned long long)sv.f_bavail * sv.f_frsize);
    }
}

/* The store's fdatasync latencies (filled by its flusher thread). */
static void put_fsync(struct evbuffer *b, mqd_server_t *s)
{
    mqd_store_stats_t st;
    mqd_store_stats(mqd_srv_store(s), &st);
    const double *fb = mqd_store_hist_bounds();
    mqd_metrics_head(b, "mqd_fsync_seconds", "histogram", "fdatasync latency of partition segments.");
    uint64_t cum = 0;
    for (size_t i = 0; i < MQD_STORE_HIST_BUCKETS; i++) {
        cum += st.bucket[i];
        evbuffer_add_printf(b, "mqd_fsync_seconds_bucket{le=\"%g\"} %llu\n", fb[i],
                            (unsigned long long)cum);
    }
    cum += st.bucket[MQD_STORE_HIST_BUCKETS];
    evbuffer_add_printf(b, "mqd_fsync_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    evbuffer_add_printf(b, "mqd_fsync_seconds_sum %g\nmqd_fsync_seconds_count %llu\n", st.sum_s,
                        (unsigned long long)st.fsyncs);
    mqd_metrics_head(b, "mqd_fsync_slow_total", "counter", "fdatasync calls slower than 1 s (each logged).");
    evbuffer_add_printf(b, "mqd_fsync_slow_total %llu\n", (unsigned long long)st.slow);
}

static void put_broker(struct evbuffer *b, mqd_server_t *s)
{
    size_t topics = 0;
    FOR_TOPICS(s, t) topics++;
    mqd_metrics_head(b, "mqd_connections", "gauge", "Open AMQP connections.");
    evbuffer_add_printf(b, "mqd_connections %zu\n", mqd_srv_n_conns(s));
    mqd_metrics_head(b, "mqd_connections_accepted_total", "counter", "AMQP connections accepted.");
    evbuffer_add_printf(b, "mqd_connections_accepted_total %llu\n",
                        (unsigned long long)mqd_srv_conns_accepted(s));
    mqd_metrics_head(b, "mqd_connections_refused_total", "counter", "AMQP connections refused (limits, stopping).");
    evbuffer_add_printf(b, "mqd_connections_refused_total %llu\n",
                        (unsigned long long)mqd_srv_conns_refused(s));
    mqd_metrics_head(b, "mqd_connection_memory_bytes", "gauge",
         "Memory charged to all connections (max_memory; sessions, links, partial "
         "deliveries, unread output).");
    evbuffer_add_printf(b, "mqd_connection_memory_bytes %llu\n",
                        (unsigned long long)mqd_srv_budget_bytes(s));
    mqd_metrics_head(b, "mqd_connections_over_budget_total", "counter",
         "Connections closed with amqp:resource-limit-exceeded by max_connection_memory or "
         "max_memory.");
    evbuffer_add_printf(b, "mqd_connections_over_budget_total %llu\n",
                        (unsigned long long)mqd_srv_budget_closes(s));
    mqd_metrics_head(b, "mqd_messages_rejected_total", "counter", "Messages rejected by the broker.");
    evbuffer_add_printf(b, "mqd_messages_rejected_total %llu\n",
                        (unsigned long long)mqd_srv_msgs_rejected(s));
    mqd_metrics_head(b, "mqd_sends_failed_total", "counter", "Sends rejected because their partition failed "
         "before they were durable.");
    evbuffer_add_printf(b, "mqd_sends_failed_total %llu\n",
                        (unsigned long long)mqd_srv_sends_failed(s));
    mqd_metrics_head(b, "mqd_redirects_total", "counter",
         "Clients sent to another node: link_requested (an attach that asked for "
         "amqp:link:redirect), link (one that did not), connection (connection_redirect).");
    static const char *const kinds[MQD_REDIRECT_KINDS] = {"link_requested", "link", "connection"};
    for (int k = 0; k < MQD_REDIRECT_KINDS; k++)
        evbuffer_add_printf(b, "mqd_redirects_total{kind=\"%s\"} %llu\n", kinds[k],
                            (unsigned long long)mqd_srv_redirects(s, (mqd_redirect_kind_t)k));
    mqd_metrics_head(b, "mqd_group_offset_commit_failures_total", "counter",
         "Writes of consumer-group offsets to meta.db that failed (disk full, I/O error), one "
         "per group and attempt; logged with the group and topic.");
    evbuffer_add_printf(b, "mqd_group_offset_commit_failures_total %llu\n",
                        (unsigned long long)mqd_srv_group_commit_failures(s));
    mqd_metrics_head(b, "mqd_topics", "gauge", "Topics (temporary reply nodes excluded).");
    evbuffer_add_printf(b, "mqd_topics %zu\n", topics);
    mqd_hist_put(b, "mqd_append_stable_seconds", "Time from append to stable (settlement) of a send.",
             mqd_srv_h_append_stable(s));
    put_fsync(b, s);
    mqd_txn_stats_t ts;
    mqd_txn_stats(s, &ts);
    mqd_metrics_head(b, "mqd_transactions_open", "gauge", "Open AMQP transactions.");
    evbuffer_add_printf(b, "mqd_transactions_open %zu\n", ts.open);
    mqd_metrics_head(b, "mqd_transactions_total", "counter", "AMQP transactions by outcome.");
    evbuffer_add_printf(b, "mqd_transactions_total{outcome=\"declared\"} %llu\n",
                        (unsigned long long)ts.declared);
    evbuffer_add_printf(b, "mqd_transactions_total{outcome=\"committed\"} %llu\n",
                        (unsigned long long)ts.committed);
    evbuffer_add_printf(b, "mqd_transactions_total{outcome=\"aborted\"} %llu\n",
                        (unsigned long long)ts.aborted);
    evbuffer_add_printf(b, "mqd_transactions_total{outcome=\"timed_out\"} %llu\n",
                        (unsigned long long)ts.timed_out);
}

static void on_metrics(struct evhttp_request *req, void *arg)
{
    mqd_metrics_t *m = arg;
    struct evbuffer *b = evbuffer_new();
    if (!b) {
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    put_broker(b, m->srv);
    put_topics(b, m->srv);
    put_groups(b, m->srv);
    mqd_metrics_put_group_extra(b, m->srv);
    const mqd_repl_hooks_t *repl = mqd_srv_repl(m->srv);
    if (repl->metrics) /* cluster = etcd: src/repl's gauges */
        repl->metrics(repl->arg, b);
    const mqd_fwd_hooks_t *fwd = mqd_srv_fwd(m->srv);
    if (fwd->metrics) /* src/fwd's forwarded sends */
        fwd->metrics(fwd->arg, b);
    put_process(b, m);
    mqd_metrics_put_process_extra(b, m->srv);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, HTTP_OK, "OK", b);
    evbuffer_free(b);
}

static void reply_text(struct evhttp_request *req, int code, const char *reason, const char *text)
{
    struct evbuffer *b = evbuffer_new();
    if (b)
        evbuffer_add_printf(b, "%s\n", text);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain");
    evhttp_send_reply(req, code, reason, b);
    if (b)
        evbuffer_free(b);
}

static void on_healthz(struct evhttp_request *req, void *arg)
{
    MQD_UNUSED(arg);
    reply_text(req, HTTP_OK, "OK", "ok");
}

static void on_readyz(struct evhttp_request *req, void *arg)
{
    mqd_server_t *s = ((mqd_metrics_t *)arg)->srv;
    const mqd_repl_hooks_t *repl = mqd_srv_repl(s);
    bool stopping = mqd_srv_stopping(s);
    size_t n_listeners = mqd_srv_n_listeners(s);
    bool ready = !stopping && n_listeners > 0 && n_listeners == mqd_srv_conf(s)->n_listen;
    char why[MQD_NAME_MAX + 96];
    if (ready && repl->ready && !repl->ready(repl->arg, why, sizeof why))
        reply_text(req, 503, "Service Unavailable", why); /* a replica is catching up */
    else if (ready)
        reply_text(req, HTTP_OK, "OK", "ready");
    else
        reply_text(req, 503, "Service Unavailable", stopping ? "stopping" : "starting");
}

static void history_tick(void *arg)
{
    mqd_metrics_t *m = mqd_srv_metrics(arg);
    if (m && m->history)
        mqd_history_sample(m->history, m->srv, mqd_now_ms());
}

mqd_history_t *mqd_metrics_history(struct mqd_server *s)
{
    mqd_metrics_t *m = mqd_srv_metrics(s);
    return m ? m->history : NULL;
}

static int http_start(mqd_metrics_t *m, const char *hp)
{
    char host[256];
    uint16_t port;
    if (mqd_conf_parse_hostport(hp, host, sizeof host, &port) != 0) {
        MQD_ERR("metrics", "metrics_listen %s: not HOST:PORT", hp);
        return MQD_EINVAL;
    }
    if (!(m->http = evhttp_new(mqd_srv_base(m->srv))))
        return MQD_ENOMEM;
    evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_timeout(m->http, 10);
    evhttp_set_cb(m->http, "/metrics", on_metrics, m);
    evhttp_set_cb(m->http, "/healthz", on_healthz, m);
    evhttp_set_cb(m->http, "/readyz", on_readyz, m);
    if (evhttp_bind_socket(m->http, host, port) != 0) {
        MQD_ERR("metrics", "metrics_listen %s: cannot bind", hp);
        return MQD_EIO;
    }
    MQD_NOTICE("metrics", "serving /metrics on %s", hp);
    return 0;
}

int mqd_metrics_start(struct mqd_server *s)
{
    const char *hp = mqd_srv_conf(s)->metrics_listen;
    mqd_metrics_t *m = calloc(1, sizeof *m);
    if (!m)
        return MQD_ENOMEM;
    m->srv = s;
    mqd_srv_set_metrics(s, m);
    int rc = mqd_history_new(&m->history);
    if (rc == 0) /* the timer's arg is the server: after mqd_metrics_stop it finds nothing */
        rc = mqd_timer_add(s, "metrics.history", mqd_history_interval_ms(false), history_tick, s);
    if (rc == 0 && hp && *hp)
        rc = http_start(m, hp);
    if (rc != 0)
        mqd_metrics_stop(s);
    else
        mqd_history_sample(m->history, s, mqd_now_ms());
    return rc;
}

void mqd_metrics_stop(struct mqd_server *s)
{
    mqd_metrics_t *m = mqd_srv_metrics(s);
    if (!m)
        return;
    if (m->http)
        evhttp_free(m->http);
    mqd_history_free(m->history);
    mqd_metrics_dir_size_free(&m->data_dir);
    free(m);
    mqd_srv_set_metrics(s, NULL);
}
