/* The operator's metrics beyond the broker's counters (issue 38): the process's CPU time
 * and descriptor limit, a build-info gauge, refused logins by mechanism, the expiry of
 * the configured certificates, and per group its members and deliveries in flight. */
#include "config.h"
#include "metrics/metrics_int.h"
#include "group/group.h"
#include "core/core.h"

#include <event2/buffer.h>
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* utime + stime (fields 14 and 15 of /proc/self/stat) in seconds; -1 if unreadable */
static double cpu_seconds(void)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    for (int field = 2; p && field < 14; field++)
        p = strchr(p + 1, ' ');
    long hz = sysconf(_SC_CLK_TCK);
    if (!p || hz <= 0)
        return -1;
    char *end;
    unsigned long long ut = strtoull(p + 1, &end, 10);
    unsigned long long st = strtoull(end, NULL, 10);
    return (double)(ut + st) / (double)hz;
}

/* notAfter of the first certificate of a PEM file, in seconds since the epoch */
static int cert_not_after(const char *path, double *out)
{
    BIO *bio = BIO_new_file(path, "r");
    if (!bio)
        return MQD_EIO;
    X509 *x = PEM_read_bio_X509(bio, NULL, NULL, NULL);
    BIO_free(bio);
    if (!x)
        return MQD_EINVAL;
    struct tm tm;
    int ok = ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm);
    X509_free(x);
    if (!ok)
        return MQD_EINVAL;
    *out = (double)timegm(&tm);
    return 0;
}

static void put_certs(struct evbuffer *b, const mqd_conf_t *conf)
{
    const char *const keys[] = {"tls_cert", "replication_cert"};
    const char *paths[] = {conf->tls_cert, conf->replication_cert};
    mqd_metrics_head(b, "mqd_tls_cert_expiry_timestamp_seconds", "gauge",
                     "notAfter of the first certificate in each configured certificate file "
                     "(seconds since the epoch).");
    for (size_t i = 0; i < MQD_ARRAY_LEN(keys); i++) {
        double t;
        if (!paths[i] || !*paths[i] || cert_not_after(paths[i], &t) != 0)
            continue;
        evbuffer_add_printf(b, "mqd_tls_cert_expiry_timestamp_seconds{key=\"%s\",file=\"", keys[i]);
        mqd_metrics_label(b, paths[i]);
        evbuffer_add_printf(b, "\"} %.0f\n", t);
    }
}

void mqd_metrics_put_process_extra(struct evbuffer *b, struct mqd_server *s)
{
    double cpu = cpu_seconds();
    if (cpu >= 0) {
        mqd_metrics_head(b, "process_cpu_seconds_total", "counter",
                         "Total user and system CPU time spent in seconds.");
        evbuffer_add_printf(b, "process_cpu_seconds_total %.2f\n", cpu);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        mqd_metrics_head(b, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        evbuffer_add_printf(b, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
    }
    mqd_metrics_head(b, "mqd_build_info", "gauge", "Always 1; the version mqd was built as.");
    evbuffer_add_printf(b, "mqd_build_info{version=\"%s\"} 1\n", PACKAGE_VERSION);
    mqd_metrics_head(b, "mqd_auth_failures_total", "counter",
                     "Refused logins (AMQP SASL and the web console) by mechanism.");
    for (size_t i = 0; i < MQD_LOGIN_MECHS; i++)
        evbuffer_add_printf(b, "mqd_auth_failures_total{mechanism=\"%s\"} %llu\n", mqd_login_mechs[i],
                            (unsigned long long)mqd_srv_login_failures(s, i));
    const mqd_conf_t *conf = mqd_srv_conf(s);
    mqd_metrics_head(b, "mqd_disk_free_limit_bytes", "gauge",
                     "disk_free_limit: free bytes on data_dir below which producers get no credit.");
    evbuffer_add_printf(b, "mqd_disk_free_limit_bytes %llu\n", (unsigned long long)conf->disk_free_limit);
    mqd_metrics_head(b, "mqd_memory_high_watermark_bytes", "gauge",
                     "memory_high_watermark: resident memory above which producers get no credit "
                     "(0: off).");
    evbuffer_add_printf(b, "mqd_memory_high_watermark_bytes %llu\n",
                        (unsigned long long)conf->memory_high_watermark);
    put_certs(b, conf);
}

/* ---- per group: members and deliveries in flight ---- */

typedef struct each {
    mqd_topic_t *t;
    mqd_metrics_group_fn fn;
    void *arg;
} each_t;

static int each_one(const char *group, mqd_group_mode_t mode, size_t members, void *arg)
{
    MQD_UNUSED(mode);
    each_t *e = arg;
    if (!mqd_group_unused_queue(e->t, group))
        e->fn(e->t, group, members, e->arg);
    return 0;
}

void mqd_metrics_each_group(struct mqd_server *s, mqd_metrics_group_fn fn, void *arg)
{
    for (mqd_topic_t *t = mqd_srv_topic_first(s); t; t = mqd_srv_topic_next(t)) {
        each_t e = {.t = t, .fn = fn, .arg = arg};
        if (!mqd_topic_temporary(t))
            mqd_group_list(t, each_one, &e);
    }
}

typedef struct gctx {
    struct evbuffer *b;
    bool inflight; /* this pass writes mqd_group_inflight, else mqd_group_members */
} gctx_t;

static int sum_inflight(const mqd_group_part_info_t *pi, void *arg)
{
    *(uint64_t *)arg += pi->inflight;
    return 0;
}

static void group_row(mqd_topic_t *t, const char *group, size_t members, void *arg)
{
    gctx_t *x = arg;
    uint64_t v = members;
    if (x->inflight) {
        v = 0;
        mqd_group_describe(t, group, sum_inflight, &v);
    }
    evbuffer_add_printf(x->b, "%s{topic=\"", x->inflight ? "mqd_group_inflight" : "mqd_group_members");
    mqd_metrics_label(x->b, mqd_topic_name(t));
    evbuffer_add(x->b, "\",group=\"", 9);
    mqd_metrics_label(x->b, group);
    evbuffer_add_printf(x->b, "\"} %llu\n", (unsigned long long)v);
}

void mqd_metrics_put_group_extra(struct evbuffer *b, struct mqd_server *s)
{
    mqd_metrics_head(b, "mqd_group_members", "gauge", "Links attached as the group's consumers.");
    gctx_t x = {.b = b};
    mqd_metrics_each_group(s, group_row, &x);
    mqd_metrics_head(b, "mqd_group_inflight", "gauge",
                     "Deliveries of the group sent and not yet settled.");
    x.inflight = true;
    mqd_metrics_each_group(s, group_row, &x);
}
