/* The console's HTTP connections, bounded and timed (issue 32 point 5).
 *
 * Before this, a connection sending one header byte every 4 s was never closed (evhttp's
 * timeout is an idle timeout: each byte restarted it) and counted against no limit: at a
 * 1,024-descriptor limit 1,100 of them took every descriptor, new AMQP clients failed at
 * accept, the console's listener spun on accept() = EMFILE, and partitions that rolled a
 * segment meanwhile failed.
 *
 * evhttp (libevent 2.1) has no hook at accept, so the console makes each connection's
 * bufferevent itself (evhttp_set_bevcb) and keeps a record of it:
 *   - admission, in a pass deferred to right after the accept (the record learns its
 *     evhttp_connection, the bufferevent's callback argument, and its peer there): past
 *     console_max_connections, console_max_connections_per_ip, a quarter of the
 *     descriptors connections may use (so AMQP clients keep the rest), or when its
 *     descriptor would eat into what is kept for partition files (core's mqd_fd_admit),
 *     it is closed at once;
 *   - deadlines: a request's head must arrive within console_header_timeout_ms of the
 *     accept, or of the first byte of the next request on a kept-alive connection, and
 *     its body within console_body_timeout_ms of the head, however steadily bytes come.
 *     The input buffer's callback sees the bytes as they are read, before evhttp parses
 *     them, and finds the end of the head (mqd_console_head_scan); the handler's call of
 *     mqd_console_conn_request ends the request's deadlines. evhttp stops reading while
 *     the console holds a request (a password check), so a held request has none;
 *   - the close: evhttp's close callback drops the record (and tells a pending login).
 * The console closes a connection itself (refused, or past a deadline) only outside
 * evhttp's callbacks, with no request of it in the console's hands.
 *
 * accept() failing (EMFILE, ENFILE, ...) used to leave the listener readable, so the loop
 * spun on it and libevent logged every try: now the listener is disabled and turned on
 * again by the watch timer every CONSOLE_WATCH_MS, with one log line when the pauses
 * begin and one when accepting works again. */
#include "config.h"
#include "console/console_int.h"
#include "core/core.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONSOLE_WATCH_MS 500
#define CONSOLE_FD_SHARE 4 /* the console's connections hold at most a quarter of theirs */
#define CONSOLE_FD_SHARE_NAME "quarter"

typedef enum {
    KC_HEAD, /* reading a request's line and headers */
    KC_BODY, /* reading its body */
    KC_BUSY, /* the request is with the console, or answered: waiting for the next */
} kc_phase_t;

struct mqd_console_conn {
    mqd_console_conn_t *next;
    mqd_console_t *k;
    struct bufferevent *bev;         /* the connection's (evhttp frees it) */
    struct evbuffer_cb_entry *watch; /* on bev's input: on_input */
    struct evhttp_connection *evcon; /* NULL until admitted */
    struct event *deadline;          /* owned */
    kc_phase_t phase;
    mqd_console_head_t head;
    char host[MQD_CONSOLE_HOST_MAX];
    mqd_console_login_t *login; /* login.c: a password check for this connection */
};

bool mqd_console_quiet_due(mqd_console_quiet_t *q)
{
    q->n++;
    int64_t now = mqd_now_ms();
    if (q->logged_ms && now - q->logged_ms < 1000)
        return false;
    q->logged_ms = now;
    return true;
}

static void arm(mqd_console_conn_t *kc, uint32_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(kc->deadline, &tv);
}

static void unlink_from(mqd_console_conn_t **head, mqd_console_conn_t *kc)
{
    for (mqd_console_conn_t **pp = head; *pp; pp = &(*pp)->next)
        if (*pp == kc) {
            *pp = kc->next;
            return;
        }
}

/* Frees kc (bev_alive: its bufferevent still exists, so the input callback is taken off
 * it) and tells its pending login. */
static void forget(mqd_console_conn_t *kc, bool bev_alive)
{
    mqd_console_t *k = kc->k;
    if (kc->evcon) {
        unlink_from(&k->conns, kc);
        k->n_conns--;
    } else {
        unlink_from(&k->fresh, kc);
    }
    if (bev_alive && kc->watch)
        evbuffer_remove_cb_entry(bufferevent_get_input(kc->bev), kc->watch);
    if (kc->login)
        mqd_console_login_conn_gone(kc->login);
    event_free(kc->deadline);
    free(kc);
}

/* Closes an admitted connection the console no longer wants (never inside evhttp's own
 * callbacks, never with a request in the console's hands). */
static void drop(mqd_console_conn_t *kc)
{
    struct evhttp_connection *evcon = kc->evcon;
    evhttp_connection_set_closecb(evcon, NULL, NULL);
    forget(kc, true);
    evhttp_connection_free(evcon);
}

static void on_close(struct evhttp_connection *evcon, void *arg)
{
    MQD_UNUSED(evcon);
    forget(arg, true); /* evhttp frees the bufferevent after this */
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
    mqd_console_conn_t *kc = arg;
    mqd_console_t *k = kc->k;
    if (!kc->evcon || kc->phase == KC_BUSY)
        return; /* not admitted yet (the pass is due), or nothing to wait for */
    if (mqd_console_quiet_due(&k->q_deadline)) {
        const mqd_conf_t *c = mqd_srv_conf(k->srv);
        MQD_NOTICE("console",
                   "peer=%s: request %s not complete within %u ms: closed (%llu "
                   "such connections closed since the last report)",
                   kc->host, kc->phase == KC_HEAD ? "line and headers" : "body",
                   kc->phase == KC_HEAD ? c->console_header_timeout_ms : c->console_body_timeout_ms,
                   (unsigned long long)k->q_deadline.n);
        k->q_deadline.n = 0;
    }
    drop(kc);
}

/* The input buffer grew: a request starts, or its head ends (see the top). */
static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    mqd_console_conn_t *kc = arg;
    if (info->n_added == 0 || kc->phase == KC_BODY)
        return;
    const mqd_conf_t *c = mqd_srv_conf(kc->k->srv);
    if (kc->phase == KC_BUSY) { /* the first bytes of the next request */
        kc->phase = KC_HEAD;
        mqd_console_head_reset(&kc->head);
        arm(kc, c->console_header_timeout_ms);
    }
    size_t len = evbuffer_get_length(buf);
    size_t at = len > info->n_added ? len - info->n_added : 0;
    struct evbuffer_ptr pos;
    if (evbuffer_ptr_set(buf, &pos, at, EVBUFFER_PTR_SET) != 0)
        return;
    char chunk[512];
    while (at < len) {
        size_t want = len - at < sizeof chunk ? len - at : sizeof chunk;
        ev_ssize_t got = evbuffer_copyout_from(buf, &pos, chunk, want);
        if (got <= 0)
            return;
        if (mqd_console_head_scan(&kc->head, chunk, (size_t)got)) {
            kc->phase = KC_BODY;
            arm(kc, c->console_body_timeout_ms);
            return;
        }
        at += (size_t)got;
        evbuffer_ptr_set(buf, &pos, (size_t)got, EVBUFFER_PTR_ADD);
    }
}

/* evhttp_set_bevcb: the bufferevent of a connection evhttp just accepted (it sets its
 * descriptor and callbacks next). A reference is held until the admission pass, so the
 * record can tell whether evhttp let go of it meanwhile. NULL (evhttp makes its own, an
 * untracked connection) only when out of memory. */
static struct bufferevent *on_new_bev(struct event_base *base, void *arg)
{
    mqd_console_t *k = arg;
    mqd_console_conn_t *kc = calloc(1, sizeof *kc);
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (kc)
        kc->deadline = evtimer_new(base, on_deadline, kc);
    if (kc && bev && kc->deadline)
        kc->watch = evbuffer_add_cb(bufferevent_get_input(bev), on_input, kc);
    if (!kc || !bev || !kc->deadline || !kc->watch) {
        if (kc && kc->deadline)
            event_free(kc->deadline);
        free(kc);
        if (bev)
            bufferevent_free(bev);
        return NULL;
    }
    kc->k = k;
    kc->bev = bev;
    kc->phase = KC_HEAD;
    mqd_console_head_reset(&kc->head);
    arm(kc, mqd_srv_conf(k->srv)->console_header_timeout_ms);
    bufferevent_incref(bev);
    kc->next = k->fresh;
    k->fresh = kc;
    event_active(k->ev_admit, 0, 0);
    if (k->pause_since_ms) {
        MQD_NOTICE("console", "accepting again after %lld ms (%llu pauses)",
                   (long long)(mqd_now_ms() - k->pause_since_ms), (unsigned long long)k->pauses);
        k->pause_since_ms = 0;
        k->pauses = 0;
    }
    return bev;
}

/* Why kc may not stay (written into why), or NULL. */
static const char *over(mqd_console_t *k, const mqd_console_conn_t *kc, char *why, size_t n)
{
    const mqd_conf_t *c = mqd_srv_conf(k->srv);
    mqd_fd_budget_t b;
    int fd = (int)bufferevent_getfd(kc->bev);
    bool fd_ok = mqd_fd_admit(k->srv, fd < 0 ? 0 : fd, &b); /* fills b either way */
    if (!fd_ok) {
        snprintf(why, n, "descriptor %d of %llu, %llu kept for partition files and %d spare", fd,
                 (unsigned long long)b.nofile, (unsigned long long)b.head, MQD_FD_SPARE);
        return why;
    }
    if (k->n_conns >= c->console_max_connections) {
        snprintf(why, n, "console_max_connections (%u) reached", c->console_max_connections);
        return why;
    }
    /* the console is for the operator: AMQP clients keep most of the descriptors */
    if (b.nofile && k->n_conns >= b.conns / CONSOLE_FD_SHARE) {
        snprintf(why, n, "%llu connections, a %s of the descriptors connections may use",
                 (unsigned long long)k->n_conns, CONSOLE_FD_SHARE_NAME);
        return why;
    }
    if (c->console_max_connections_per_ip == 0)
        return NULL;
    uint32_t same = 0;
    for (const mqd_console_conn_t *o = k->conns; o; o = o->next)
        same += strcmp(o->host, kc->host) == 0;
    if (same < c->console_max_connections_per_ip)
        return NULL;
    snprintf(why, n, "console_max_connections_per_ip (%u) reached",
             c->console_max_connections_per_ip);
    return why;
}

static void admit(mqd_console_t *k, mqd_console_conn_t *kc)
{
    bufferevent_data_cb rd = NULL;
    void *cbarg = NULL;
    bufferevent_getcb(kc->bev, &rd, NULL, NULL, &cbarg);
    if (!rd || !cbarg) {
        forget(kc, true); /* evhttp freed the connection already (its setup failed) */
        return;
    }
    unlink_from(&k->fresh, kc);
    kc->evcon = cbarg;
    char *addr = NULL;
    ev_uint16_t port = 0;
    evhttp_connection_get_peer(kc->evcon, &addr, &port);
    snprintf(kc->host, sizeof kc->host, "%s", addr ? addr : "?");
    char why[160];
    const char *no = over(k, kc, why, sizeof why); /* before it counts itself */
    kc->next = k->conns;
    k->conns = kc;
    k->n_conns++;
    if (no) {
        if (mqd_console_quiet_due(&k->q_refused)) {
            MQD_WARN("console", "refused %s: %s (%llu refused since the last report)", kc->host, no,
                     (unsigned long long)k->q_refused.n);
            k->q_refused.n = 0;
        }
        drop(kc);
        return;
    }
    evhttp_connection_set_closecb(kc->evcon, on_close, kc);
}

static void on_admit(evutil_socket_t fd, short what, void *arg)
{
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
    mqd_console_t *k = arg;
    mqd_console_conn_t *kc;
    while ((kc = k->fresh) != NULL) {
        struct bufferevent *bev = kc->bev;
        admit(k, kc); /* unlinks kc from fresh, whatever becomes of it */
        bufferevent_decref(bev);
    }
}

static void on_watch(evutil_socket_t fd, short what, void *arg)
{
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
    mqd_console_t *k = arg;
    if (k->paused && !mqd_srv_stopping(k->srv)) {
        k->paused = false;
        evconnlistener_enable(k->listener);
    }
}

struct finder {
    const struct evconnlistener *l;
    mqd_console_t *k;
};

static int find_console(const struct event_base *base, const struct event *ev, void *arg)
{
    MQD_UNUSED(base);
    struct finder *f = arg;
    if (event_get_callback(ev) != on_watch)
        return 0;
    mqd_console_t *k = event_get_callback_arg(ev);
    if (k->listener != f->l)
        return 0;
    f->k = k;
    return 1;
}

/* The listener's error callback. Its argument is the evhttp (evhttp_bind_listener made
 * it the listener's user data), so the console is found by its watch timer, which is
 * always pending. accept() failed with something other than EAGAIN, EINTR or
 * ECONNABORTED: the listener stays off until the next watch. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    MQD_UNUSED(arg);
    int err = EVUTIL_SOCKET_ERROR();
    evconnlistener_disable(l);
    struct finder f = {l, NULL};
    event_base_foreach_event(evconnlistener_get_base(l), find_console, &f);
    mqd_console_t *k = f.k;
    if (!k) {
        MQD_ERR("console", "accept: %s (listener not found: it stays off)", strerror(err));
        return;
    }
    k->paused = true;
    k->pauses++;
    if (!k->pause_since_ms) {
        k->pause_since_ms = mqd_now_ms();
        k->pause_errno = err;
        MQD_WARN("console",
                 "accept: %s: not accepting console connections for %d ms at a "
                 "time until it works again (descriptors: RLIMIT_NOFILE, max_open_files, "
                 "console_max_connections)",
                 strerror(err), CONSOLE_WATCH_MS);
    }
}

int mqd_console_conns_start(mqd_console_t *k, const char *host, uint16_t port)
{
    struct event_base *base = mqd_srv_base(k->srv);
    k->ev_admit = event_new(base, -1, 0, on_admit, k);
    k->ev_watch = event_new(base, -1, EV_PERSIST, on_watch, k);
    if (!k->ev_admit || !k->ev_watch)
        return MQD_ENOMEM;
    /* before the connections' I/O: a new connection's record knows its peer before
     * its first request is read */
    event_priority_set(k->ev_admit, 0);
    struct evhttp_bound_socket *bound = evhttp_bind_socket_with_handle(k->http, host, port);
    if (!bound)
        return MQD_EIO;
    k->listener = evhttp_bound_socket_get_listener(bound);
    evconnlistener_set_error_cb(k->listener, on_accept_error);
    evhttp_set_bevcb(k->http, on_new_bev, k);
    struct timeval tv = {0, CONSOLE_WATCH_MS * 1000};
    evtimer_add(k->ev_watch, &tv);
    return 0;
}

void mqd_console_conns_free(mqd_console_t *k)
{
    mqd_console_conn_t *kc;
    while ((kc = k->fresh) != NULL) { /* evhttp_free freed their connections */
        struct bufferevent *bev = kc->bev;
        forget(kc, true);
        bufferevent_decref(bev);
    }
    while ((kc = k->conns) != NULL) /* none, unless evhttp closed one without telling */
        forget(kc, false);
    if (k->ev_admit)
        event_free(k->ev_admit);
    if (k->ev_watch)
        event_free(k->ev_watch);
    k->ev_admit = k->ev_watch = NULL;
}

mqd_console_conn_t *mqd_console_conn_of(mqd_console_t *k, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    for (mqd_console_conn_t *kc = k->conns; evcon && kc; kc = kc->next)
        if (kc->evcon == evcon)
            return kc;
    return NULL;
}

void mqd_console_conn_request(mqd_console_t *k, struct evhttp_request *req)
{
    mqd_console_conn_t *kc = mqd_console_conn_of(k, req);
    if (!kc)
        return;
    kc->phase = KC_BUSY;
    evtimer_del(kc->deadline);
}

const char *mqd_console_conn_host(const mqd_console_conn_t *kc)
{
    return kc->host;
}

void mqd_console_conn_set_login(mqd_console_conn_t *kc, mqd_console_login_t *l)
{
    kc->login = l;
}
