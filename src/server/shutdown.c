/* Stopping with an AMQP close: mqd(8) promises that SIGTERM closes connections, and a
 * client that only sees its socket drop reports framing-error and cannot tell a broker
 * that stops from one that crashed. Every client connection gets close with
 * amqp:connection:forced; the loop runs on until each client has answered (its
 * transport ends and conn_close_deferred counts it out) or shutdown_grace_ms has
 * passed, whichever is first. Appended sends are made durable by mqd_store_close after
 * the loop, whether or not their settlement went out before the close: a send is either
 * settled and durable, or never settled (the client resends it). */
#include "config.h"
#include "server/server_int.h"

#include <proton/condition.h>
#include <proton/connection.h>

static void on_grace_over(evutil_socket_t fd, short what, void *arg)
{
    mqd_server_t *s = arg;
    size_t n = mqd_srv_n_conns(s);
    MQD_NOTICE("server", "shutdown_grace_ms over: %zu connection%s did not answer the close", n,
               n == 1 ? "" : "s");
    event_base_loopexit(mqd_srv_base(s), NULL);
}

/* Closes every client connection; the loop ends when they are gone or the grace is over. */
static void close_clients(mqd_server_t *s)
{
    size_t n = 0;
    mqd_amqp091_close_all(s); /* 0-9-1 connections: connection.close 320 at once */
    mqd_dlist_t *conns = mqd_srv_conns(s);
    for (mqd_dlist_t *p = conns->next; p != conns; p = p->next) {
        mqd_conn_t *c = mqd_conn_of_node(p);
        if (mqd_conn_closed(c) || mqd_conn_client(c))
            continue;
        pn_connection_t *pc = mqd_conn_driver(c)->connection;
        pn_condition_t *cond = pn_connection_condition(pc);
        if (!pn_condition_is_set(cond)) {
            pn_condition_set_name(cond, "amqp:connection:forced");
            pn_condition_set_description(cond, "mqd is shutting down");
        }
        pn_connection_close(pc);
        mqd_conn_mark_dirty(c); /* the tick writes the close */
        n++;
    }
    uint32_t grace = mqd_srv_conf(s)->shutdown_grace_ms;
    MQD_NOTICE("server", "closing %zu connection%s (grace %u ms)", n, n == 1 ? "" : "s", grace);
    struct event_base *base = mqd_srv_base(s);
    struct event *ev = NULL;
    if (mqd_srv_n_conns(s) > 0 && grace > 0) {
        ev = evtimer_new(base, on_grace_over, s);
        mqd_srv_set_ev_shutdown(s, ev);
    }
    if (!ev) {
        event_base_loopexit(base, NULL);
        return;
    }
    struct timeval tv = {.tv_sec = (time_t)(grace / 1000), .tv_usec = (suseconds_t)(grace % 1000) * 1000};
    evtimer_add(ev, &tv);
}

/* A leader's partitions first go to other in-sync replicas (src/repl), so that clients
 * redirected by the other nodes find a leader at once; at most HANDOVER_MAX_MS (and
 * never longer than the grace), then the connections close as they would without. */
#define HANDOVER_MAX_MS 3000u

static void handover_end(mqd_server_t *s, const char *how)
{
    if (!mqd_srv_handover_wait(s))
        return;
    mqd_srv_set_handover_wait(s, false);
    if (mqd_srv_ev_handover(s))
        evtimer_del(mqd_srv_ev_handover(s));
    MQD_NOTICE("server", "leadership handover %s", how);
    close_clients(s);
}

static void on_handover_done(void *arg)
{
    handover_end(arg, "done");
}

static void on_handover_timeout(evutil_socket_t fd, short what, void *arg)
{
    handover_end(arg, "not answered in time: closing anyway");
}

void mqd_shutdown_begin(mqd_server_t *s)
{
    uint32_t grace = mqd_srv_conf(s)->shutdown_grace_ms;
    mqd_repl_hooks_t *repl = mqd_srv_repl(s);
    if (repl->handover && grace > 0) {
        mqd_srv_set_handover_wait(s, true);
        size_t n = repl->handover(repl->arg, on_handover_done, s);
        if (!mqd_srv_handover_wait(s))
            return; /* answered already: close_clients ran */
        struct event *ev = NULL;
        if (n > 0) {
            ev = evtimer_new(mqd_srv_base(s), on_handover_timeout, s);
            mqd_srv_set_ev_handover(s, ev);
        }
        if (ev) {
            uint32_t ms = grace < HANDOVER_MAX_MS ? grace : HANDOVER_MAX_MS;
            struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
            evtimer_add(ev, &tv);
            return;
        }
        mqd_srv_set_handover_wait(s, false);
    }
    close_clients(s);
}

void mqd_shutdown_conn_gone(mqd_server_t *s)
{
    if (mqd_srv_n_conns(s) == 0)
        event_base_loopexit(mqd_srv_base(s), NULL);
}
