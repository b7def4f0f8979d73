/* Per-connection and broker-wide memory accounting (budget.h). */
#include "config.h"
#include "core/core.h"
#include "core/core_int.h"

#include <proton/condition.h>
#include <proton/object.h>
#include <proton/transport.h>
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define LIMIT_COND "amqp:resource-limit-exceeded"
/* Proton's first output buffer: with less than this pending after a write, the write
 * ran Proton's output processing, so every ended session has had its end written. */
#define PN_OUT_MIN 8192u

/* Set on a session or link while it is charged: Proton posts FINAL each time the
 * endpoint's references drop to zero, and a session freed before its end is written
 * gets a second one once it is. */
PN_HANDLE(MQD_BUDGET_CHARGED)

/* Marks (on) or unmarks a record; returns whether the mark changed. */
static bool mark(pn_record_t *r, bool on)
{
    bool was = pn_record_get(r, MQD_BUDGET_CHARGED) != NULL;
    if (was == on)
        return false;
    pn_record_def(r, MQD_BUDGET_CHARGED, PN_VOID);
    pn_record_set(r, MQD_BUDGET_CHARGED, on ? (void *)r : NULL);
    return true;
}

static int64_t mono_ms(void)
{
    return (int64_t)(mqd_mono_ns() / 1000000u);
}

/* Closes c with amqp:resource-limit-exceeded: no more input is read; the close frame
 * goes out with what Proton has queued before it (mqd_budget_linger_over). */
static void budget_close(mqd_conn_t *c, const char *why)
{
    mqd_budget_t *b = &c->budget;
    if (b->closing_ms || c->closed)
        return;
    b->closing_ms = mono_ms();
    if (b->closing_ms == 0)
        b->closing_ms = 1;
    c->srv->budget_closes++;
    /* the connection's close carries it; the transport's names it in the log (and in a
     * close Proton sends itself, as after an input error) */
    pn_condition_t *conds[] = {pn_connection_condition(c->driver.connection),
                               pn_transport_condition(c->driver.transport)};
    for (size_t i = 0; i < MQD_ARRAY_LEN(conds); i++) {
        if (!pn_condition_is_set(conds[i])) {
            pn_condition_set_name(conds[i], LIMIT_COND);
            pn_condition_set_description(conds[i], why);
        }
    }
    pn_connection_close(c->driver.connection);
    MQD_NOTICE_RL("conn",
                  "closing peer=%s: %s (%llu bytes charged: %u sessions, %u links, %llu "
                  "partial, %llu output)",
                  c->peer, why, (unsigned long long)b->bytes, b->sessions, b->links,
                  (unsigned long long)b->partial, (unsigned long long)b->output);
    pn_connection_driver_read_close(&c->driver);
    mqd_conn_mark_dirty(c);
}

/* Adds delta to c's charge and the broker's; closes c if it no longer fits. */
static bool charge(mqd_conn_t *c, int64_t delta)
{
    mqd_budget_t *b = &c->budget;
    mqd_server_t *s = c->srv;
    b->bytes += (uint64_t)delta;
    s->budget_bytes += (uint64_t)delta;
    if (s->budget_bytes > s->budget_high)
        s->budget_high = s->budget_bytes;
    if (b->bytes > b->peak)
        b->peak = b->bytes;
    if (delta <= 0 || b->closing_ms)
        return delta <= 0;
    uint64_t limit = s->conf->max_connection_memory;
    if (limit && b->bytes > limit) {
        char why[160];
        snprintf(why, sizeof why, "connection over max_connection_memory (%llu bytes)",
                 (unsigned long long)limit);
        budget_close(c, why);
        return false;
    }
    return true;
}

bool mqd_budget_broker_full(const mqd_server_t *s)
{
    return s->conf->max_memory && s->budget_bytes > s->conf->max_memory;
}

/* Charges growth past the broker's limit to the connection that grows. */
static bool charge_growth(mqd_conn_t *c, int64_t delta)
{
    if (!charge(c, delta))
        return false;
    if (delta > 0 && mqd_budget_broker_full(c->srv)) {
        budget_close(c, "broker over max_memory");
        return false;
    }
    return true;
}

/* A new session needs a local channel: sessions mqd began and has not ended, plus the
 * ended ones whose end may still be unwritten, must stay within channel-max + 1. */
static bool session_fits(mqd_conn_t *c)
{
    mqd_budget_t *b = &c->budget;
    uint32_t limit = (uint32_t)pn_transport_get_channel_max(c->driver.transport) + 1;
    if (b->ssn_open + b->ssn_ending + 1 > limit && b->ssn_ending > 0) {
        /* write the ends out now, so their channels are free again */
        if (mqd_conn_write(c) < PN_OUT_MIN)
            b->ssn_ending = 0;
    }
    if (b->ssn_open + 1 > limit) {
        budget_close(c, "more sessions at once than channel-max allows (max_sessions)");
        return false;
    }
    if (b->ssn_open + b->ssn_ending + 1 > limit) {
        budget_close(c, "sessions begun faster than the peer reads their replies");
        return false;
    }
    return true;
}

static bool session_event(mqd_conn_t *c, pn_event_t *e)
{
    mqd_budget_t *b = &c->budget;
    pn_session_t *ss = pn_event_session(e);
    switch (pn_event_type(e)) {
    case PN_SESSION_INIT:
        if (mark(pn_session_attachments(ss), true)) {
            b->sessions++;
            charge(c, MQD_BUDGET_SESSION_COST);
        }
        return true;
    case PN_SESSION_FINAL:
        if (mark(pn_session_attachments(ss), false)) {
            b->sessions--;
            charge(c, -(int64_t)MQD_BUDGET_SESSION_COST);
        }
        return true;
    case PN_SESSION_REMOTE_OPEN:
        if (b->closing_ms || !session_fits(c))
            return false;
        b->ssn_open++; /* link.c begins it */
        return true;
    case PN_SESSION_REMOTE_CLOSE:
        if (pn_session_state(ss) & PN_LOCAL_UNINIT)
            return false; /* never begun: closing it would make Proton begin it */
        if (pn_session_state(ss) & PN_LOCAL_ACTIVE) {
            b->ssn_open--; /* link.c ends it */
            b->ssn_ending++;
        }
        return true;
    default: return true;
    }
}

static bool link_event(mqd_conn_t *c, pn_event_t *e)
{
    mqd_budget_t *b = &c->budget;
    pn_link_t *l = pn_event_link(e);
    switch (pn_event_type(e)) {
    case PN_LINK_INIT:
        if (mark(pn_link_attachments(l), true)) {
            b->links++;
            charge(c, MQD_BUDGET_LINK_COST);
        }
        return true;
    case PN_LINK_FINAL:
        if (mark(pn_link_attachments(l), false)) {
            b->links--;
            charge(c, -(int64_t)MQD_BUDGET_LINK_COST);
        }
        return true;
    case PN_LINK_REMOTE_OPEN:
        if (b->closing_ms)
            return false;
        if (mqd_budget_broker_full(c->srv)) {
            mqd_link_refuse(l, LIMIT_COND, "broker over max_memory%s", "");
            return false;
        }
        return true;
    default: return true;
    }
}

bool mqd_budget_event(mqd_conn_t *c, pn_event_t *e)
{
    switch (pn_event_type(e)) {
    case PN_SESSION_INIT:
    case PN_SESSION_FINAL:
    case PN_SESSION_REMOTE_OPEN:
    case PN_SESSION_REMOTE_CLOSE: return session_event(c, e);
    case PN_LINK_INIT:
    case PN_LINK_FINAL:
    case PN_LINK_REMOTE_OPEN: return link_event(c, e);
    case PN_DELIVERY: return c->budget.closing_ms == 0;
    default: return true;
    }
}

int mqd_budget_partial(mqd_conn_t *c, int64_t delta)
{
    if (delta < 0 && (uint64_t)-delta > c->budget.partial)
        delta = -(int64_t)c->budget.partial; /* never below zero */
    c->budget.partial += (uint64_t)delta;
    if (!charge_growth(c, delta)) {
        c->budget.partial -= (uint64_t)delta;
        charge(c, -delta);
        return MQD_ETOOBIG;
    }
    return 0;
}

bool mqd_budget_send_blocked(mqd_conn_t *c, pn_session_t *ss)
{
    mqd_budget_t *b = &c->budget;
    if (b->pending + pn_session_outgoing_bytes(ss) < MQD_BUDGET_SEND_HIGH)
        return false;
    /* per session: one whose peer never opens its window does not stop the others */
    if (!b->send_blocked) {
        b->send_blocked = true; /* mqd_budget_output dispatches again once it drains */
        b->blocked_at = 0;
    }
    return true;
}

/* The backlog fell: the connection's consumers may send again. */
static void send_unblock(mqd_conn_t *c)
{
    c->budget.send_blocked = false;
    for (pn_link_t *l = pn_link_head(c->driver.connection, PN_LOCAL_ACTIVE); l;
         l = pn_link_next(l, PN_LOCAL_ACTIVE)) {
        mqd_lstate_t *ls = pn_link_get_context(l);
        if (ls && ls->topic && (ls->kind == MQD_LS_CONSUMER || ls->kind == MQD_LS_BROWSER))
            mqd_topic_dispatch_soon(ls->topic);
    }
}

void mqd_budget_output(mqd_conn_t *c, size_t pending)
{
    mqd_budget_t *b = &c->budget;
    if (pending < PN_OUT_MIN)
        b->ssn_ending = 0; /* the write ran Proton's output: ends are written */
    b->pending = pending;
    /* plus what deliveries hold that Proton has not framed yet (the peer's window) */
    uint64_t out = pending;
    for (pn_session_t *ss = pn_session_head(c->driver.connection, 0); ss;
         ss = pn_session_next(ss, 0))
        out += pn_session_outgoing_bytes(ss);
    int64_t delta = (int64_t)out - (int64_t)b->output;
    b->output = out;
    if (b->send_blocked && b->blocked_at == 0)
        b->blocked_at = out ? out : 1; /* the backlog when consumers began to wait */
    if (b->send_blocked &&
        (out < MQD_BUDGET_SEND_HIGH / 2 || out + MQD_BUDGET_SEND_HIGH / 2 <= b->blocked_at))
        send_unblock(c);
    charge_growth(c, delta);
}

bool mqd_budget_linger_over(mqd_conn_t *c, int64_t *wait_ms)
{
    if (!c->budget.closing_ms)
        return false;
    int64_t left = c->budget.closing_ms + MQD_BUDGET_LINGER_MS - mono_ms();
    if (wait_ms)
        *wait_ms = left > 0 ? left : 0;
    return left <= 0;
}

void mqd_budget_tick(mqd_server_t *s)
{
    if (s->budget_high - s->budget_bytes >= MQD_BUDGET_TRIM_BYTES) {
        s->budget_high = s->budget_bytes;
        s->budget_trims = 3; /* objects are freed after their charge: trim again later */
    }
    /* Connections that never opened a session are charged nothing, but each held ~19 KiB
     * of transport: 10,000 half-open ones closed by the handshake timeout left RSS at
     * +170 MiB. A drop of MQD_BUDGET_TRIM_CONNS connections trims too. */
    if (s->n_conns > s->conns_high)
        s->conns_high = s->n_conns;
    if (s->conns_high - s->n_conns >= MQD_BUDGET_TRIM_CONNS) {
        s->conns_high = s->n_conns;
        s->budget_trims = 3;
    }
    if (s->budget_trims == 0)
        return;
    s->budget_trims--;
    /* Proton's sessions and links are small allocations spread over the heap: once
     * freed, glibc keeps their pages (RSS stayed +160 MiB after 65,536 links were
     * detached). Keep what heap_prefault asked for at the top of the heap. */
    malloc_trim((size_t)s->conf->heap_prefault);
}

void mqd_budget_release(mqd_conn_t *c)
{
    c->srv->budget_bytes -= c->budget.bytes;
    c->budget.bytes = 0;
}

bool mqd_budget_draining(const mqd_conn_t *c)
{
    return c->budget.closing_ms && !c->budget.peer_eof;
}

/* Reads and drops input; true at EOF or on an error. */
static bool drop_input(int fd)
{
    char buf[16384];
    for (int i = 0; i < 64; i++) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n > 0)
            continue;
        return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
    }
    return false;
}

void mqd_budget_drain(mqd_conn_t *c)
{
    if (drop_input(c->fd)) {
        c->budget.peer_eof = true;
        event_del(c->ev_read); /* a socket at EOF stays readable */
    }
}

/* ---- lingering close ----
 * A peer that is still sending when its connection is closed would get a reset the
 * moment mqd closes a socket with unread input, and a reset makes its kernel drop what
 * it had not read yet: the close frame with the reason. So the socket's write side is
 * shut (the peer reads the close frame, then EOF) and its input is read and dropped
 * until the peer's EOF or MQD_BUDGET_DRAIN_MS, then it is closed. */
typedef struct drain {
    mqd_dlist_t node; /* in srv->drains */
    struct event *ev;
    int fd;
} drain_t;

static void drain_end(drain_t *d)
{
    mqd_dlist_del(&d->node);
    event_free(d->ev);
    close(d->fd);
    free(d);
}

static void on_drain(evutil_socket_t fd, short what, void *arg)
{
    drain_t *d = arg;
    if ((what & EV_TIMEOUT) || drop_input(fd))
        drain_end(d);
}

void mqd_budget_close_fd(mqd_conn_t *c)
{
    int fd = c->fd;
    drain_t *d = mqd_budget_draining(c) ? calloc(1, sizeof *d) : NULL;
    if (d) {
        mqd_dlist_init(&d->node);
        d->fd = fd;
        d->ev = event_new(c->srv->base, fd, EV_READ | EV_PERSIST, on_drain, d);
    }
    struct timeval tv = {MQD_BUDGET_DRAIN_MS / 1000, (MQD_BUDGET_DRAIN_MS % 1000) * 1000};
    if (!d || !d->ev || shutdown(fd, SHUT_WR) != 0 || event_add(d->ev, &tv) != 0) {
        if (d && d->ev)
            event_free(d->ev);
        free(d);
        close(fd);
        return;
    }
    mqd_dlist_push(&c->srv->drains, &d->node);
}

void mqd_budget_drains_free(mqd_server_t *s)
{
    while (!mqd_dlist_empty(&s->drains))
        drain_end(MQD_CONTAINER(s->drains.next, drain_t, node));
}
