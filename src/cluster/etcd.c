/* cluster: the etcd client's transport. One short-lived evhttp connection per unary call
 * (evhttp queues calls on a connection one after another: a slow range must not hold up a
 * keepalive) and one per watch stream. A connection error (or 503: that member has no
 * leader) moves the client to the next endpoint and resends there; the call fails with
 * MQD_EIO when every endpoint failed once. Connections are freed from a deferred event,
 * never inside their own callback. */
#include "config.h"
#include "cluster/cluster_int.h"
#include "util/util.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ENDPOINTS 16

typedef struct endpoint {
    char host[256];
    uint16_t port;
    char name[280]; /* "host:port" */
} endpoint_t;

typedef struct reap {
    struct evhttp_connection *conn;
    void *also; /* freed after conn */
} reap_t;

typedef struct call call_t;
struct call {
    mqd_etcd_t *e;
    struct call *prev, *next;
    mqd_etcd_kind_t kind;
    const char *path;
    char *body;
    mqd_etcd_cb cb;
    void *arg;
    struct evhttp_connection *conn;
    size_t ep; /* the endpoint it went to */
    size_t tries;
};

struct mqd_etcd {
    struct event_base *base;
    endpoint_t ep[MAX_ENDPOINTS];
    size_t n_ep, cur;
    uint32_t timeout_ms;
    call_t *calls; /* in flight */
    reap_t *reap;
    size_t n_reap, cap_reap;
    struct event *ev_reap;
};

static void call_finish(call_t *c, const mqd_etcd_reply_t *rep);

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    mqd_etcd_t *e = arg;
    for (size_t i = 0; i < e->n_reap; i++) {
        if (e->reap[i].conn)
            evhttp_connection_free(e->reap[i].conn);
        free(e->reap[i].also);
    }
    e->n_reap = 0;
}

/* Frees conn (and also) on the next turn of the loop. */
void mqd_etcd_reap(mqd_etcd_t *e, struct evhttp_connection *conn, void *also)
{
    if (e->n_reap == e->cap_reap) {
        size_t cap = e->cap_reap ? 2 * e->cap_reap : 8;
        reap_t *r = realloc(e->reap, cap * sizeof *r);
        if (r == NULL) { /* leak rather than free a connection inside its own callback */
            MQD_WARN("cluster", "out of memory: an etcd connection is not freed");
            return;
        }
        e->reap = r;
        e->cap_reap = cap;
    }
    e->reap[e->n_reap++] = (reap_t){conn, also};
    struct timeval zero = {0, 0};
    event_add(e->ev_reap, &zero);
}

int mqd_etcd_new(struct event_base *base, const char *endpoints, uint32_t timeout_ms,
                 mqd_etcd_t **out)
{
    mqd_etcd_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return MQD_ENOMEM;
    e->base = base;
    e->timeout_ms = timeout_ms ? timeout_ms : 1000;
    const char *s = endpoints ? endpoints : "";
    int rc;
    while (e->n_ep < MAX_ENDPOINTS &&
           (rc = mqd_conf_etcd_endpoint_next(&s, e->ep[e->n_ep].host, sizeof e->ep[0].host,
                                             &e->ep[e->n_ep].port)) == 0) {
        endpoint_t *p = &e->ep[e->n_ep++];
        snprintf(p->name, sizeof p->name, strchr(p->host, ':') ? "[%s]:%u" : "%s:%u", p->host,
                 p->port);
    }
    e->ev_reap = evtimer_new(base, on_reap, e);
    if (e->n_ep == 0 || e->ev_reap == NULL) {
        rc = e->n_ep == 0 ? MQD_EINVAL : MQD_ENOMEM;
        mqd_etcd_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void mqd_etcd_free(mqd_etcd_t *e)
{
    if (e == NULL)
        return;
    while (e->calls) { /* every call answers once: these with MQD_ESTATE */
        call_t *c = e->calls;
        if (c->conn)
            evhttp_connection_free(c->conn); /* drops its request without calling back */
        c->conn = NULL;
        mqd_etcd_reply_t rep = {.rc = MQD_ESTATE};
        call_finish(c, &rep);
    }
    if (e->ev_reap) {
        on_reap(-1, 0, e);
        event_free(e->ev_reap);
    }
    free(e->reap);
    free(e);
}

const char *mqd_etcd_endpoint(const mqd_etcd_t *e)
{
    return e->ep[e->cur].name;
}

struct event_base *mqd_etcd_base(const mqd_etcd_t *e)
{
    return e->base;
}

/* The next endpoint, after `failed` failed (unless another call moved on already). */
void mqd_etcd_next_endpoint(mqd_etcd_t *e, size_t failed)
{
    if (e->cur != failed || e->n_ep < 2)
        return;
    e->cur = (e->cur + 1) % e->n_ep;
    MQD_WARN("cluster", "etcd %s failed: trying %s", e->ep[failed].name, e->ep[e->cur].name);
}

size_t mqd_etcd_cur(const mqd_etcd_t *e)
{
    return e->cur;
}

/* A POST of body to path on the current endpoint; conn and request are set up here. */
struct evhttp_connection *mqd_etcd_post(mqd_etcd_t *e, const char *path, const char *body,
                                        uint32_t timeout_ms,
                                        void (*done)(struct evhttp_request *, void *),
                                        void (*chunk)(struct evhttp_request *, void *), void *arg)
{
    const endpoint_t *p = &e->ep[e->cur];
    struct evhttp_connection *conn = evhttp_connection_base_new(e->base, NULL, p->host, p->port);
    struct evhttp_request *r = conn ? evhttp_request_new(done, arg) : NULL;
    if (r == NULL)
        goto err;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    evhttp_connection_set_timeout_tv(conn, &tv);
    if (chunk)
        evhttp_request_set_chunked_cb(r, chunk);
    struct evkeyvalq *h = evhttp_request_get_output_headers(r);
    evhttp_add_header(h, "Host", p->name);
    evhttp_add_header(h, "Content-Type", "application/json");
    if (evbuffer_add(evhttp_request_get_output_buffer(r), body, strlen(body)) != 0 ||
        evhttp_make_request(conn, r, EVHTTP_REQ_POST, path) != 0) {
        evhttp_request_free(r); /* make_request keeps nothing of a request it refused */
        goto err;
    }
    return conn;
err:
    if (conn)
        evhttp_connection_free(conn);
    return NULL;
}

static void call_done(struct evhttp_request *r, void *arg);

static int call_send(call_t *c)
{
    c->ep = c->e->cur;
    c->conn = mqd_etcd_post(c->e, c->path, c->body, c->e->timeout_ms, call_done, NULL, c);
    return c->conn ? 0 : MQD_EIO;
}

static void call_unlink(call_t *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        c->e->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
}

static void call_finish(call_t *c, const mqd_etcd_reply_t *rep)
{
    call_unlink(c);
    c->cb(c->arg, rep);
    free(c->body);
    free(c);
}

static void call_done(struct evhttp_request *r, void *arg)
{
    call_t *c = arg;
    mqd_etcd_t *e = c->e;
    int code = r ? evhttp_request_get_response_code(r) : 0;
    size_t failed = c->ep;
    mqd_etcd_reap(e, c->conn, NULL);
    c->conn = NULL;
    if (code == 0 || code == 503) { /* not reached, or that member cannot serve */
        mqd_etcd_next_endpoint(e, failed);
        if (++c->tries < e->n_ep && call_send(c) == 0)
            return;
        mqd_etcd_reply_t rep = {.rc = MQD_EIO, .http_status = code};
        call_finish(c, &rep);
        return;
    }
    struct evbuffer *in = evhttp_request_get_input_buffer(r);
    size_t n = evbuffer_get_length(in);
    const char *body = (const char *)evbuffer_pullup(in, -1);
    mqd_etcd_reply_t rep;
    mqd_etcd_reply_parse(c->kind, code, body ? body : "", body ? n : 0, &rep);
    if (rep.rc == MQD_ECORRUPT)
        MQD_WARN("cluster", "etcd %s %s: unreadable answer (HTTP %d, %zu bytes)",
                 e->ep[failed].name, c->path, code, n);
    call_finish(c, &rep);
    mqd_etcd_reply_clear(&rep);
}

static int call_start(mqd_etcd_t *e, mqd_etcd_kind_t kind, const char *path, char *body,
                      mqd_etcd_cb cb, void *arg)
{
    call_t *c = body ? calloc(1, sizeof *c) : NULL;
    if (c == NULL) {
        free(body);
        return MQD_ENOMEM;
    }
    *c = (call_t){.e = e, .kind = kind, .path = path, .body = body, .cb = cb, .arg = arg};
    c->next = e->calls;
    if (e->calls)
        e->calls->prev = c;
    e->calls = c;
    /* a connection that cannot even be set up counts as that endpoint failing */
    while (call_send(c) != 0) {
        mqd_etcd_next_endpoint(e, c->ep);
        if (++c->tries >= e->n_ep) {
            call_unlink(c);
            free(c->body);
            free(c);
            return MQD_EIO;
        }
    }
    return 0;
}

int mqd_etcd_put(mqd_etcd_t *e, const char *key, size_t klen, const char *val, size_t vlen,
                 int64_t lease, mqd_etcd_cb cb, void *arg)
{
    return call_start(e, MQD_ETCD_K_PUT, "/v3/kv/put",
                      mqd_etcd_json_put(key, klen, val, vlen, lease), cb, arg);
}

int mqd_etcd_range(mqd_etcd_t *e, const char *key, size_t klen, bool prefix, mqd_etcd_cb cb,
                   void *arg)
{
    return call_start(e, MQD_ETCD_K_RANGE, "/v3/kv/range", mqd_etcd_json_range(key, klen, prefix),
                      cb, arg);
}

int mqd_etcd_delete(mqd_etcd_t *e, const char *key, size_t klen, bool prefix, mqd_etcd_cb cb,
                    void *arg)
{
    return call_start(e, MQD_ETCD_K_DELETE, "/v3/kv/deleterange",
                      mqd_etcd_json_delete(key, klen, prefix), cb, arg);
}

int mqd_etcd_txn(mqd_etcd_t *e, const mqd_etcd_txn_t *t, mqd_etcd_cb cb, void *arg)
{
    return call_start(e, MQD_ETCD_K_TXN, "/v3/kv/txn", mqd_etcd_json_txn(t), cb, arg);
}

int mqd_etcd_lease_grant(mqd_etcd_t *e, int64_t ttl_s, mqd_etcd_cb cb, void *arg)
{
    return call_start(e, MQD_ETCD_K_GRANT, "/v3/lease/grant", mqd_etcd_json_lease_grant(ttl_s), cb,
                      arg);
}

int mqd_etcd_lease_keepalive(mqd_etcd_t *e, int64_t id, mqd_etcd_cb cb, void *arg)
{
    return call_start(e, MQD_ETCD_K_KEEPALIVE, "/v3/lease/keepalive", mqd_etcd_json_lease_id(id),
                      cb, arg);
}

int mqd_etcd_lease_revoke(mqd_etcd_t *e, int64_t id, mqd_etcd_cb cb, void *arg)
{
    return call_start(e, MQD_ETCD_K_REVOKE, "/v3/lease/revoke", mqd_etcd_json_lease_id(id), cb,
                      arg);
}

typedef struct sync_revoke {
    struct event_base *base;
    int rc;
} sync_revoke_t;

static void revoke_done(void *arg, const mqd_etcd_reply_t *r)
{
    sync_revoke_t *s = arg;
    s->rc = r->rc;
    event_base_loopbreak(s->base);
}

int mqd_etcd_lease_revoke_sync(mqd_etcd_t *e, int64_t id, uint32_t timeout_ms)
{
    sync_revoke_t s = {event_base_new(), MQD_EIO};
    if (s.base == NULL)
        return MQD_ENOMEM;
    /* a private loop and client: nothing else of the stopped server runs meanwhile */
    mqd_etcd_t *tmp = calloc(1, sizeof *tmp);
    if (tmp == NULL)
        goto out;
    memcpy(tmp->ep, e->ep, sizeof e->ep);
    tmp->n_ep = e->n_ep;
    tmp->cur = e->cur;
    tmp->base = s.base;
    tmp->timeout_ms = timeout_ms / (uint32_t)e->n_ep;
    tmp->ev_reap = evtimer_new(s.base, on_reap, tmp);
    if (tmp->ev_reap == NULL || mqd_etcd_lease_revoke(tmp, id, revoke_done, &s) != 0)
        goto out;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    event_base_loopexit(s.base, &tv);
    event_base_dispatch(s.base);
out:
    mqd_etcd_free(tmp);
    event_base_free(s.base);
    return s.rc;
}
