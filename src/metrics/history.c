/* Server-side history for the web console's charts (issue 38 point 2): every 5 s the
 * loop samples the broker's totals (messages and bytes in and out, connections), each
 * topic's messages in and out and each group's lag; a fine ring keeps the last hour of
 * 5 s samples, a coarse ring one sample a minute for a day. Memory is bounded: at most
 * MAX_SERIES series (the broker's, then topics and groups as they come; later ones are
 * not recorded, logged once), each two rings of fixed size. A series whose topic or group
 * is gone is dropped at the next sample. Counters are kept raw; readers get rates. */
#include "config.h"
#include "metrics/metrics_int.h"
#include "group/group.h"
#include "core/core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FINE_MS 5000
#define FINE_N 720     /* an hour of 5 s samples */
#define COARSE_MS 60000
#define COARSE_N 1440  /* a day of minutes */
#define MAX_SERIES 256
#define MAX_K 5

typedef struct ring {
    int64_t *t;  /* sample times (ms); 0 = empty slot */
    double *v;   /* n * k values */
    size_t head; /* next slot */
} ring_t;

typedef struct series {
    char *name;
    size_t k;
    bool seen; /* in the current sample */
    ring_t fine, coarse;
} series_t;

struct mqd_history {
    series_t *s[MAX_SERIES];
    size_t n;
    int64_t last_coarse_ms;
    int64_t last_ms; /* the previous sample */
    bool full_logged;
};

static const char *const broker_fields[] = {"in_per_s", "out_per_s", "bytes_in_per_s",
                                            "bytes_out_per_s", "connections"};
static const char *const topic_fields[] = {"in_per_s", "out_per_s"};
static const char *const group_fields[] = {"lag"};

static void ring_free(ring_t *r)
{
    free(r->t);
    free(r->v);
}

static void series_free(series_t *s)
{
    if (!s)
        return;
    ring_free(&s->fine);
    ring_free(&s->coarse);
    free(s->name);
    free(s);
}

static int ring_init(ring_t *r, size_t n, size_t k)
{
    r->t = calloc(n, sizeof *r->t);
    r->v = calloc(n * k, sizeof *r->v);
    return r->t && r->v ? 0 : MQD_ENOMEM;
}

static series_t *series_get(mqd_history_t *h, const char *name, size_t k)
{
    for (size_t i = 0; i < h->n; i++)
        if (strcmp(h->s[i]->name, name) == 0)
            return h->s[i];
    if (h->n == MAX_SERIES) {
        if (!h->full_logged)
            MQD_NOTICE("metrics", "history: %d series kept; %s and later ones are not recorded",
                       MAX_SERIES, name);
        h->full_logged = true;
        return NULL;
    }
    series_t *s = calloc(1, sizeof *s);
    if (!s || !(s->name = strdup(name)) || ring_init(&s->fine, FINE_N, k) != 0 ||
        ring_init(&s->coarse, COARSE_N, k) != 0) {
        series_free(s);
        return NULL;
    }
    s->k = k;
    h->s[h->n++] = s;
    return s;
}

static void ring_put(ring_t *r, size_t n, size_t k, int64_t t, const double *v)
{
    r->t[r->head] = t;
    memcpy(r->v + r->head * k, v, k * sizeof *v);
    r->head = (r->head + 1) % n;
}

static void record(mqd_history_t *h, const char *name, int64_t now, const double *v, size_t k,
                   bool coarse)
{
    size_t had = h->n;
    series_t *s = series_get(h, name, k);
    if (!s)
        return;
    if (h->n > had && h->last_ms && k > 1) { /* a topic born since the last sample: its */
        double zero[MAX_K] = {0};             /* counters were 0 then, count its first sends */
        ring_put(&s->fine, FINE_N, k, h->last_ms, zero);
    }
    s->seen = true;
    ring_put(&s->fine, FINE_N, k, now, v);
    if (coarse)
        ring_put(&s->coarse, COARSE_N, k, now, v);
}

typedef struct gsample {
    mqd_history_t *h;
    int64_t now;
    bool coarse;
} gsample_t;

static int add_lag(const mqd_group_part_info_t *pi, void *arg)
{
    *(uint64_t *)arg += pi->lag;
    return 0;
}

static void sample_group(mqd_topic_t *t, const char *group, size_t members, void *arg)
{
    MQD_UNUSED(members);
    gsample_t *x = arg;
    char name[2 * MQD_NAME_MAX + 16];
    snprintf(name, sizeof name, "group/%s/%s", mqd_topic_name(t), group);
    uint64_t lag = 0;
    mqd_group_describe(t, group, add_lag, &lag);
    double v = (double)lag;
    record(x->h, name, x->now, &v, 1, x->coarse);
}

/* Drops the series not seen in this sample (their topic or group is gone). */
static void sweep(mqd_history_t *h)
{
    size_t w = 0;
    for (size_t i = 0; i < h->n; i++) {
        if (h->s[i]->seen || strcmp(h->s[i]->name, "broker") == 0) {
            h->s[i]->seen = false;
            h->s[w++] = h->s[i];
        } else {
            series_free(h->s[i]);
        }
    }
    h->n = w;
    if (w < MAX_SERIES)
        h->full_logged = false;
}

void mqd_history_sample(mqd_history_t *h, mqd_server_t *srv, int64_t now)
{
    bool coarse = now - h->last_coarse_ms >= COARSE_MS;
    if (coarse)
        h->last_coarse_ms = now;
    double b[MAX_K] = {0, 0, 0, 0, (double)mqd_srv_n_conns(srv)};
    for (mqd_topic_t *t = mqd_srv_topic_first(srv); t; t = mqd_srv_topic_next(t)) {
        if (mqd_topic_temporary(t))
            continue;
        mqd_topic_stats_t st;
        mqd_topic_stats(t, &st);
        b[0] += (double)st.msgs_in;
        b[1] += (double)st.msgs_out;
        b[2] += (double)st.bytes_in;
        b[3] += (double)st.bytes_out;
        char name[MQD_NAME_MAX + 8];
        snprintf(name, sizeof name, "topic/%s", mqd_topic_name(t));
        double v[2] = {(double)st.msgs_in, (double)st.msgs_out};
        record(h, name, now, v, 2, coarse);
    }
    gsample_t x = {.h = h, .now = now, .coarse = coarse};
    mqd_metrics_each_group(srv, sample_group, &x);
    record(h, "broker", now, b, 5, coarse);
    sweep(h);
    h->last_ms = now;
}

int mqd_history_new(mqd_history_t **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : MQD_ENOMEM;
}

void mqd_history_free(mqd_history_t *h)
{
    if (!h)
        return;
    for (size_t i = 0; i < h->n; i++)
        series_free(h->s[i]);
    free(h);
}

/* ---- reading ---- */

static const char *const *fields_of(const char *name, size_t *k)
{
    if (strcmp(name, "broker") == 0) {
        *k = MQD_ARRAY_LEN(broker_fields);
        return broker_fields;
    }
    if (strncmp(name, "topic/", 6) == 0) {
        *k = MQD_ARRAY_LEN(topic_fields);
        return topic_fields;
    }
    *k = MQD_ARRAY_LEN(group_fields);
    return group_fields;
}

int mqd_history_read(mqd_history_t *h, const char *name, bool coarse, mqd_history_cb cb, void *arg)
{
    series_t *s = NULL;
    for (size_t i = 0; i < h->n && !s; i++)
        if (strcmp(h->s[i]->name, name) == 0)
            s = h->s[i];
    if (!s)
        return MQD_ENOENT;
    size_t k;
    const char *const *fields = fields_of(name, &k);
    const ring_t *r = coarse ? &s->coarse : &s->fine;
    size_t n = coarse ? COARSE_N : FINE_N;
    bool counters = strncmp(name, "group/", 6) != 0; /* all but the last broker field */
    const double *prev = NULL;
    int64_t prev_t = 0;
    cb(0, NULL, k, fields, arg); /* the field names first */
    for (size_t i = 0; i < n; i++) {
        size_t at = (r->head + i) % n;
        if (!r->t[at])
            continue;
        const double *v = r->v + at * k;
        double out[MAX_K];
        bool ok = !counters || (prev && r->t[at] > prev_t);
        for (size_t j = 0; ok && j < k; j++) {
            bool rate = counters && !(k == 5 && j == 4);
            out[j] = rate ? fmax(0, (v[j] - prev[j]) * 1000.0 / (double)(r->t[at] - prev_t)) : v[j];
        }
        if (ok)
            cb(r->t[at], out, k, fields, arg);
        prev = v;
        prev_t = r->t[at];
    }
    return 0;
}

uint32_t mqd_history_interval_ms(bool coarse)
{
    return coarse ? COARSE_MS : FINE_MS;
}
