/* server: the broker process's event loop, listeners and connections. */
#ifndef MQD_SERVER_H
#define MQD_SERVER_H

#include "mqd.h"
#include "conf/conf.h"
#include "core/core.h"

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
    const char *user;       /* SASL PLAIN with password; NULL: ANONYMOUS (or EXTERNAL) */
    const char *password;
    bool sasl_external;     /* amqps with cert_file, no user: SASL EXTERNAL (the client
                               certificate is the identity; a leader with
                               replication_peer_verify takes a node certificate so), or
                               ANONYMOUS when the peer does not offer EXTERNAL */
    const char *authzid;    /* EXTERNAL's authorization identity; NULL: none (empty) */
    const char *ca_file;    /* amqps: the CA that verifies the peer (NULL: the system's) */
    bool no_verify;         /* amqps: do not verify the peer (tests; logged) */
    const char *cert_file;  /* amqps: PEM client certificate (and chain) presented when the
                               peer asks for one; NULL: none */
    const char *key_file;   /* its PEM private key; NULL: in cert_file */
    const char *peer_cn;    /* amqps, verified: the subject CN the peer's certificate must
                               have besides the host name (a follower's check of its leader,
                               mqd-node-<id>); a mismatch fails the handshake, is logged and
                               retried with the backoff; NULL: not checked */
    const char *hostname;   /* open's hostname, SNI and the name verified; NULL: the URL's */
    const char *container;  /* open's container-id; NULL: "mqd" */
    bool plain_over_tcp;    /* allow PLAIN on amqp:// (the password in clear) */
    uint32_t backoff_min_ms, backoff_max_ms; /* 0: 100 ms, 30 s */
    uint32_t connect_timeout_ms; /* a TCP connect unanswered this long is given up and
                                    tried again after backoff_min_ms (no doubling: it
                                    waited already); 0: 10 s, then the backoff */
    uint32_t idle_timeout_ms;    /* the connection's AMQP idle timeout (the peer sends
                                    empty frames at half of it; silence this long ends
                                    the connection); 0: idle_timeout_ms of the config */
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
 * bad URL, PLAIN in clear, an unreadable CA, a client certificate or key that does not
 * load or does not match, EXTERNAL without TLS and a certificate or with a user, peer_cn
 * without verified TLS), MQD_ENOMEM. */
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

/* Registers h (copied) on s; before mqd_server_run. */
void mqd_server_set_repl(mqd_server_t *s, const mqd_repl_hooks_t *h);
void mqd_server_set_fwd(mqd_server_t *s, const mqd_fwd_hooks_t *h);


/* SIGHUP / mqctl reload: builds a new config from the file (and the command line over
 * it), validates it and swaps it in (mqd_conf_reload): on failure nothing changes and the
 * reason (FILE:LINE: key: reason) is logged and, unless err is NULL, written to err;
 * restart-only changes are logged, not applied.
 * The caller's mqd_conf_t keeps its address; its contents are the new config. */
int mqd_server_reload(mqd_server_t *s, char *err, size_t errlen);
/* Closes connections, fsyncs and closes the store and the metadata. */
void mqd_server_free(mqd_server_t *s);

#endif
