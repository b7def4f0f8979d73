/* server internals: the composition root's own parts — listeners and connections' setup
 * (server.c; their I/O is core's, core/conn.c), connections mqd opens (outconn.c),
 * shutdown and the accept guard. server/ is the one subsystem that knows every other: it
 * fills core's hooks (mqd_core_ops_t) from amqp/, auth/, group/, txn/ and its own parts
 * and starts auth/ and metrics/. */
#ifndef MQD_SERVER_INT_H
#define MQD_SERVER_INT_H

#include "server/server.h"
#include "core/core.h"
#include "amqp/amqp.h"
#include "amqp091/amqp091.h"
#include "auth/auth.h"
#include "group/group.h"
#include "metrics/metrics.h"
#include "txn/txn.h"

/* A connected socket as an outbound connection of `oc` (client role): TLS when ssl is
 * set (the connection owns fd and ssl from here, on failure too: then NULL); `id` gives
 * the open's and SASL's identity (url, ca and backoff ignored). */
mqd_conn_t *mqd_server_adopt_out(mqd_server_t *s, int fd, const char *peer, struct mqd_outconn *oc,
                                 struct ssl_st *ssl, const mqd_outconn_opts_t *id);
/* outconn.c, called by core's conn.c (mqd_core_ops_t out_event, out_closed) */
void mqd_outconn_event(mqd_outconn_t *oc, pn_event_t *e);
void mqd_outconn_closed(mqd_outconn_t *oc, const char *why);
void mqd_outconn_free_all(mqd_server_t *s);

/* shutdown.c: SIGTERM/SIGINT (mqd_server_stop). begin closes every client connection
 * with amqp:connection:forced ("mqd is shutting down") and exits the loop once all are
 * gone or after shutdown_grace_ms; conn_gone is called as each one goes while stopping
 * (by core's conn.c: mqd_core_ops_t conn_gone). */
void mqd_shutdown_begin(mqd_server_t *s);
void mqd_shutdown_conn_gone(mqd_server_t *s);

/* accept_guard.c: accept() at the descriptor limit. Connections are closed at accept
 * before they eat into the store's headroom (mqd_accept_admit). A reserved descriptor is given up
 * to accept and close the connections waiting (each client sees its connection closed
 * at once instead of a handshake that times out), then taken again; without it the
 * listeners pause for ACCEPT_PAUSE_MS. So the loop never spins on a readable listener
 * it cannot accept from. */
int mqd_accept_guard_init(mqd_server_t *s);
void mqd_accept_guard_free(mqd_server_t *s);
/* The listeners' error callback (evconnlistener_set_error_cb; arg: the mqd_listener_t). */
void mqd_accept_error(struct evconnlistener *l, void *arg);
/* Whether a just-accepted connection (descriptor fd) may stay: false when keeping it
 * would leave fewer descriptors than the store's headroom plus a spare (then the caller
 * closes it; counted and logged here, once a second). */
bool mqd_accept_admit(mqd_server_t *s, int fd);


#endif
