/* server: the broker process's event loop, listeners and connections. */
#ifndef MQD_SERVER_H
#define MQD_SERVER_H

#include "mqd.h"
#include "conf/conf.h"

#include <proton/codec.h>
#include <proton/event.h>
#include <proton/types.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct mqd_server mqd_server_t;

/* Opens the data directory (meta.db, topics/), recovers every partition, binds the
 * listeners. `conf` stays owned by the caller and must outlive the server; a reload
 * replaces its contents (mqd_server_reload), never the pointer. */
int mqd_server_new(mqd_conf_t *conf, const char *conf_path, mqd_server_t **out);
/* Runs the event loop until mqd_server_stop (or SIGTERM/SIGINT). */
int mqd_server_run(mqd_server_t *s);
/* Stops accepting, flushes in-flight appends, leaves the loop. */
void mqd_server_stop(mqd_server_t *s);
/* Runs a connection over `fd`, a connected stream socket (the server owns it from now
 * on, closed on failure too), as if accepted on listener `listener` (its index in
 * conf->listen; one past them is a plain listener). `peer` names it in logs. The
 * listeners' accept path, and a seam for tests and fuzz_conn (a socketpair). */
int mqd_server_adopt(mqd_server_t *s, int fd, const char *peer, size_t listener);
/* ---- connections mqd opens itself (client role; outconn.c) ----
 * One peer address kept connected: connect, TLS and SASL as a client, the same loop and
 * Proton driver as accepted connections, reconnect after a doubling backoff. The owner
 * gets every Proton event of the connection and makes its sessions and links on
 * PN_CONNECTION_REMOTE_OPEN; a link's context is the owner's (the broker's link handlers
 * never see these connections). After on_down every pn_ object of that connection is
 * gone: forget them; the next connection comes with its own events. */
typedef struct mqd_outconn mqd_outconn_t;

typedef struct mqd_outconn_opts {
    const char *url;        /* amqp://host[:5672] or amqps://host[:5671] ([v6] too) */
    const char *user;       /* SASL PLAIN with password; NULL: ANONYMOUS */
    const char *password;
    const char *ca_file;    /* amqps: the CA that verifies the peer (NULL: the system's) */
    bool no_verify;         /* amqps: do not verify the peer (tests; logged) */
    const char *hostname;   /* open's hostname, SNI and the name verified; NULL: the URL's */
    const char *container;  /* open's container-id; NULL: "mqd" */
    bool plain_over_tcp;    /* allow PLAIN on amqp:// (the password in clear) */
    uint32_t backoff_min_ms, backoff_max_ms; /* 0: 100 ms, 30 s */
} mqd_outconn_opts_t;

typedef struct mqd_outconn_ops {
    void (*on_event)(mqd_outconn_t *oc, pn_event_t *e, void *arg);
    void (*on_down)(mqd_outconn_t *oc, const char *why, void *arg);
} mqd_outconn_ops_t;

typedef struct mqd_outconn_stats {
    uint64_t attempts;  /* connect() calls */
    uint64_t connects;  /* sockets connected (TCP) */
    uint64_t opened;    /* connections the peer opened (AMQP open received) */
    bool connected;
    uint32_t next_backoff_ms;
    char last_error[160];
} mqd_outconn_stats_t;

/* Starts connecting now (the loop must run for anything to happen). 0 or MQD_EINVAL (a
 * bad URL, PLAIN in clear, an unreadable CA), MQD_ENOMEM. */
int mqd_outconn_new(mqd_server_t *s, const mqd_outconn_opts_t *o, const mqd_outconn_ops_t *ops,
                    void *arg, mqd_outconn_t **out);
/* Closes the connection and stops reconnecting; no callback runs after it. The server
 * frees what is left at mqd_server_free. */
void mqd_outconn_free(mqd_outconn_t *oc);
/* The same, its connection ended at once: only outside its handlers, e.g. after the loop
 * has stopped (the deferred end of mqd_outconn_free needs a loop turn that never comes). */
void mqd_outconn_free_now(mqd_outconn_t *oc);
/* The live connection (opened locally, maybe not yet by the peer), NULL while down. */
pn_connection_t *mqd_outconn_connection(mqd_outconn_t *oc);
/* Has the connection's output written and its events run soon: call after making links
 * or sending outside one of its own callbacks (a timer, another connection's event). */
void mqd_outconn_flush(mqd_outconn_t *oc);
void mqd_outconn_get_stats(const mqd_outconn_t *oc, mqd_outconn_stats_t *st);
/* The server's own loop, for owners that need timers of their own. */
struct event_base *mqd_server_base(mqd_server_t *s);

/* ---- replication hooks (src/repl/ registers them; none on a single node) ----
 * The broker calls these at the points where a replicated partition behaves unlike a
 * local one, so that server/ and amqp/ know no replication code by name (the direction
 * of the include graph stays repl -> server). All run on the loop thread; every member
 * is optional. */
struct mqd_topic;
struct mqd_conn;
struct mqd_lstate;
struct evbuffer;
typedef struct mqd_redirect {
    char host[256];
    uint16_t port;
    char address[512];
} mqd_redirect_t;
typedef struct mqd_repl_hooks {
    /* A topic was created on this node (management, auto-create, a replica). */
    void (*topic_created)(void *arg, struct mqd_topic *t);
    /* A link to partition `part` of t (-1: the whole topic) is attaching: true when this
     * node must refuse it with amqp:link:redirect to *to (filled). */
    bool (*redirect)(void *arg, struct mqd_topic *t, int64_t part, mqd_redirect_t *to);
    /* A send with `acks` (mqd_acks_t) to partition part of t: NULL to go on, else the
     * reason to reject it (a static text) and *cond its AMQP error condition. */
    const char *(*send_check)(void *arg, struct mqd_topic *t, uint32_t part, int acks,
                              const char **cond);
    /* A receiver attaching with source address `addr` under "$repl/": repl answers the
     * attach itself (open or refuse) and owns the link's events from then on. */
    void (*attach)(void *arg, struct mqd_conn *c, pn_link_t *l, const char *addr);
    /* PN_LINK_FLOW and PN_DELIVERY of such a link; link_gone before its state goes. */
    void (*link_event)(void *arg, struct mqd_lstate *ls, pn_event_t *e);
    void (*link_gone)(void *arg, struct mqd_lstate *ls);
    /* $management READ of com.mqd:cluster: writes this node's view as one map into out
     * (controller, nodes, partitions; docs/replication.md). */
    void (*status)(void *arg, pn_data_t *out);
    /* /metrics: appends the replication gauges (Prometheus text) to b. */
    void (*metrics)(void *arg, struct evbuffer *b);
    /* Group `group` (lower-cased) saved `floor` as its committed offset of partition
     * part of t (in the caller's SQLite transaction): the leader logs it. */
    void (*group_saved)(void *arg, struct mqd_topic *t, uint32_t part, const char *group,
                        uint64_t floor);
    void *arg;
} mqd_repl_hooks_t;
/* Registers h (copied) on s; before mqd_server_run. */
void mqd_server_set_repl(mqd_server_t *s, const mqd_repl_hooks_t *h);


/* ---- periodic work (timer.c) ----
 * A subsystem registers its own timers when it starts (not the server on its behalf):
 * fn(arg) runs on the loop every interval_ms until mqd_server_free. The name (unique,
 * < 48 characters, "subsystem.what") is listed in the debug log at start. 0, MQD_EINVAL,
 * MQD_EEXIST (name taken) or MQD_ENOMEM. */
typedef void (*mqd_timer_fn)(void *arg);
int mqd_timer_add(mqd_server_t *s, const char *name, uint32_t interval_ms, mqd_timer_fn fn,
                  void *arg);

/* SIGHUP / mqctl reload: builds a new config from the file (and the command line over
 * it), validates it and swaps it in (mqd_conf_reload): on failure nothing changes and the
 * reason (FILE:LINE: key: reason) is logged and, unless err is NULL, written to err;
 * restart-only changes are logged, not applied.
 * The caller's mqd_conf_t keeps its address; its contents are the new config. */
int mqd_server_reload(mqd_server_t *s, char *err, size_t errlen);
/* Closes connections, fsyncs and closes the store and the metadata. */
void mqd_server_free(mqd_server_t *s);

#endif
