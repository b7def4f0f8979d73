/* cluster: etcd watch streams. A watch reads the range first (a SNAPSHOT), then opens a
 * chunked POST /v3/watch from the next revision; chunks are split into messages on
 * newlines. A broken stream resumes from the revision after the last one seen (events or
 * progress notifications), on the next endpoint, with a doubling delay; a compacted start
 * revision re-reads the range. */
#include "config.h"
#include "cluster/cluster_int.h"
#include "util/util.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdlib.h>
#include <string.h>

#define WATCH_IDLE_MS 30000 /* evhttp's timeout is an idle one: progress_notify feeds it */
#define RETRY_FIRST_MS 100
#define RETRY_MAX_MS 2000

typedef struct stream {
    mqd_etcd_watch_t *w; /* NULL once closed: its late callbacks do nothing */
    struct evhttp_connection *conn;
    size_t endpoint;
    mqd_etcd_lines_t lines;
} stream_t;

struct mqd_etcd_watch {
    mqd_etcd_t *e;
    char *key;
    size_t klen;
    bool prefix;
    mqd_etcd_watch_cb cb;
    void *arg;
    int64_t next_rev;   /* 0: a snapshot is needed first */
    bool range_pending; /* a range call is out (it holds a pointer to this watch) */
    bool freed;         /* freed while the range was out: its answer frees the memory */
    stream_t *st;
    struct event *ev_retry;
    uint32_t retry_ms;
};

static void watch_step(mqd_etcd_watch_t *w);

static void retry_later(mqd_etcd_watch_t *w)
{
    struct timeval tv = {w->retry_ms / 1000, (w->retry_ms % 1000) * 1000};
    event_add(w->ev_retry, &tv);
    w->retry_ms = w->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : w->retry_ms * 2;
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    watch_step(arg);
}

static void stream_close(mqd_etcd_watch_t *w)
{
    stream_t *s = w->st;
    if (s == NULL)
        return;
    w->st = NULL;
    s->w = NULL;
    mqd_etcd_lines_free(&s->lines);
    mqd_etcd_reap(w->e, s->conn, s);
}

static void deliver(mqd_etcd_watch_t *w, const mqd_etcd_watch_msg_t *m)
{
    for (size_t i = 0; i < m->n_events; i++) {
        const mqd_etcd_kv_t *kv = &m->kvs[i];
        if (kv->mod_revision < w->next_rev) /* a resumed stream repeats nothing seen */
            continue;
        w->next_rev = kv->mod_revision + 1;
        w->cb(w->arg, m->types[i], kv, 1, kv->mod_revision);
    }
}

/* One message of the stream; a negative return closes the stream. */
static int on_line(void *arg, const char *line, size_t len)
{
    stream_t *s = arg;
    mqd_etcd_watch_t *w = s->w;
    mqd_etcd_watch_msg_t m;
    if (w == NULL)
        return MQD_ESTATE;
    if (mqd_etcd_watch_parse(line, len, &m) != 0) {
        MQD_WARN("cluster", "etcd watch %.*s: unreadable message (%zu bytes): re-watching",
                 (int)w->klen, w->key, len);
        return MQD_ECORRUPT;
    }
    int rc = 0;
    if (m.canceled) {
        if (m.compact_revision > 0) { /* history gone: read the range again */
            MQD_NOTICE("cluster", "etcd watch %.*s: revision %lld compacted: re-reading",
                       (int)w->klen, w->key, (long long)w->next_rev);
            w->next_rev = 0;
        } else {
            MQD_WARN("cluster", "etcd watch %.*s canceled: %s", (int)w->klen, w->key,
                     m.error ? m.error : "no reason given");
        }
        rc = MQD_ESTATE;
    } else {
        if (m.created)
            w->retry_ms = RETRY_FIRST_MS;
        deliver(w, &m);
        /* a progress notification: nothing up to its revision is still to come */
        if (!m.created && m.n_events == 0 && m.revision >= w->next_rev && w->next_rev > 0)
            w->next_rev = m.revision + 1;
    }
    mqd_etcd_watch_msg_clear(&m);
    return rc;
}

static void on_chunk(struct evhttp_request *r, void *arg)
{
    stream_t *s = arg;
    struct evbuffer *in = evhttp_request_get_input_buffer(r);
    if (s->w == NULL) {
        evbuffer_drain(in, evbuffer_get_length(in));
        return;
    }
    size_t n = evbuffer_get_length(in);
    const char *p = (const char *)evbuffer_pullup(in, -1);
    int rc = mqd_etcd_lines_feed(&s->lines, p ? p : "", p ? n : 0, on_line, s);
    evbuffer_drain(in, n);
    if (rc != 0 && s->w != NULL) {
        mqd_etcd_watch_t *w = s->w;
        stream_close(w);
        if (w->next_rev == 0) /* compaction: at once */
            watch_step(w);
        else
            retry_later(w);
    }
}

static void on_stream_done(struct evhttp_request *r, void *arg)
{
    stream_t *s = arg;
    mqd_etcd_watch_t *w = s->w;
    if (w == NULL)
        return; /* closed already; the reaper frees it */
    int code = r ? evhttp_request_get_response_code(r) : 0;
    MQD_NOTICE("cluster", "etcd watch %.*s on %s ended (HTTP %d): resuming at revision %lld",
               (int)w->klen, w->key, mqd_etcd_endpoint(w->e), code, (long long)w->next_rev);
    if (code == 0 || code == 503)
        mqd_etcd_next_endpoint(w->e, s->endpoint);
    stream_close(w);
    retry_later(w);
}

static void stream_open(mqd_etcd_watch_t *w)
{
    char *body = mqd_etcd_json_watch(w->key, w->klen, w->prefix, w->next_rev);
    stream_t *s = body ? calloc(1, sizeof *s) : NULL;
    if (s != NULL) {
        s->w = w;
        s->endpoint = mqd_etcd_cur(w->e);
        s->conn =
            mqd_etcd_post(w->e, "/v3/watch", body, WATCH_IDLE_MS, on_stream_done, on_chunk, s);
    }
    free(body);
    if (s == NULL || s->conn == NULL) {
        if (s != NULL)
            mqd_etcd_next_endpoint(w->e, s->endpoint);
        free(s);
        retry_later(w);
        return;
    }
    w->st = s;
}

static void on_range(void *arg, const mqd_etcd_reply_t *r)
{
    mqd_etcd_watch_t *w = arg;
    w->range_pending = false;
    if (w->freed) {
        mqd_etcd_watch_free(w);
        return;
    }
    if (r->rc != 0) {
        retry_later(w);
        return;
    }
    w->next_rev = r->revision + 1;
    w->cb(w->arg, MQD_ETCD_EV_SNAPSHOT, r->kvs, r->n_kvs, r->revision);
    stream_open(w);
}

static void watch_step(mqd_etcd_watch_t *w)
{
    if (w->st != NULL || w->range_pending)
        return;
    if (w->next_rev > 0) {
        stream_open(w);
        return;
    }
    if (mqd_etcd_range(w->e, w->key, w->klen, w->prefix, on_range, w) == 0)
        w->range_pending = true;
    else
        retry_later(w);
}

int mqd_etcd_watch_new(mqd_etcd_t *e, const char *key, size_t klen, bool prefix, int64_t start_rev,
                       mqd_etcd_watch_cb cb, void *arg, mqd_etcd_watch_t **out)
{
    mqd_etcd_watch_t *w = calloc(1, sizeof *w);
    if (w == NULL)
        return MQD_ENOMEM;
    *w = (mqd_etcd_watch_t){.e = e,
                            .klen = klen,
                            .prefix = prefix,
                            .cb = cb,
                            .arg = arg,
                            .retry_ms = RETRY_FIRST_MS,
                            .next_rev = start_rev > 0 ? start_rev : 0};
    w->key = malloc(klen + 1);
    w->ev_retry = evtimer_new(mqd_etcd_base(e), on_retry, w);
    if (w->key == NULL || w->ev_retry == NULL) {
        mqd_etcd_watch_free(w);
        return MQD_ENOMEM;
    }
    memcpy(w->key, key, klen);
    w->key[klen] = '\0';
    watch_step(w);
    *out = w;
    return 0;
}

void mqd_etcd_watch_free(mqd_etcd_watch_t *w)
{
    if (w == NULL)
        return;
    stream_close(w);
    if (w->ev_retry) {
        event_free(w->ev_retry);
        w->ev_retry = NULL;
    }
    if (w->range_pending) { /* the range call points here: let its answer free it */
        w->freed = true;
        return;
    }
    free(w->key);
    free(w);
}
