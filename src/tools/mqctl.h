/* mqctl internals shared by its command files: options, the broker URL, connection
 * set-up (SASL, TLS) and usage errors. mqctl.c: management requests; mqctl_io.c: the
 * console producer and consumer (send, receive). */
#ifndef MQD_MQCTL_H
#define MQD_MQCTL_H

#include <proton/connection.h>
#include <proton/event.h>
#include <proton/message.h>
#include <proton/proactor.h>
#include <proton/transport.h>
#include <proton/types.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "tools/scram_client.h"

/* Exit codes (mqctl(1), EXIT STATUS): connection (no broker, TLS, timeout), refused login
 * and refused permission are told apart. */
enum {
    EX_OK = 0,
    EX_USAGE = 1,
    EX_CONN = 2,
    EX_NOTFOUND = 3,
    EX_CONFLICT = 4,
    EX_OTHER = 5,
    EX_AUTH = 6,    /* the broker refused the login (SASL) */
    EX_REFUSED = 7, /* logged in, but the user lacks the right (401, amqp:unauthorized-access on a link) */
};

/* The exit code of an AMQP error condition: amqp:not-found 3, amqp:unauthorized-access 6
 * on a connection (the login) and 7 on a link; else dflt. */
int mqctl_exit_of_cond(const char *cond, bool on_link, int dflt);

#define T_TOPIC "com.mqd:topic"
#define T_GROUP "com.mqd:consumergroup"
#define T_CONN "com.mqd:connection"
#define T_BROKER "com.mqd:broker"
#define T_CONFIG "com.mqd:config"

typedef struct mqctl_opts {
    const char *url;
    bool json;
    bool insecure;
    const char *ca;
    double timeout_s;
} mqctl_opts_t;

/* One management request and its reply. */
typedef struct request {
    const char *op, *type, *name;
    json_t *props; /* extra application properties (strings), owned */
    json_t *body;  /* amqp-value map, owned, or NULL */
    /* reply */
    int status;
    char desc[512];
    json_t *reply; /* owned, or NULL */
} request_t;

typedef struct mqctl_url {
    bool tls;
    char user[256], pass[256], host[256], port[16];
} mqctl_url_t;

/* Parses amqp[s]://[USER[:PASS]@]HOST[:PORT] (password else from MQCTL_PASSWORD); a URL
 * with another scheme (http://...) is a usage error (exit 1), not a host name. */
int mqctl_parse_url(const char *s, mqctl_url_t *u);
/* Container id, host name, SASL (sc: SCRAM-SHA-256, PLAIN, ANONYMOUS; the caller clears
 * it after the run) and TLS of a new client connection; the caller opens it. */
void mqctl_conn_setup(pn_connection_t *conn, pn_transport_t *t, const mqctl_url_t *u,
                      const mqctl_opts_t *o, mqd_sasl_client_t *sc);
/* Connects conn (its transport t set up by mqctl_conn_setup) to u's host and port and
 * hands every event of px to on_event(arg, e) until one returns false (at
 * PN_PROACTOR_INACTIVE); px, made by the caller because its handlers use it, times out
 * after timeout_s and is freed on return. */
void mqctl_run(pn_proactor_t *px, pn_connection_t *conn, pn_transport_t *t, const mqctl_url_t *u,
               double timeout_s, bool (*on_event)(void *arg, pn_event_t *e), void *arg);
/* "mqctl: ... (see mqctl --help)" on stderr, exit 1. */
void mqctl_die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* mqctl.c: one request to o->url (connect, send, wait for the reply): 0, or the exit
 * code of a failed connection (told on stderr); rq's status, desc and reply are set. */
int mqctl_transact(const mqctl_opts_t *o, request_t *rq);
/* mqctl_cluster.c: mqctl_transact, and in a cluster the cluster's truth from any node:
 * topic describe and group describe take each partition's figures from its leader,
 * group reset goes to each partition's leader (mqctl(1), "In a cluster"). */
int mqctl_cluster_transact(const mqctl_opts_t *o, request_t *rq);

/* mqctl_msg.c: reads delivery d's message from link l into buf (reused, grown as
 * needed) and decodes it into *out (new; the caller frees it): 0, MQD_ENOMEM, or
 * MQD_EINVAL when it does not decode. */
int mqctl_msg_recv(pn_link_t *l, pn_delivery_t *d, pn_rwbytes_t *buf, pn_message_t **out);
/* mqctl_msg.c: encodes m into buf (grown fourfold from its last size or 4 KiB while
 * under max bytes): 0 with buf->size set, MQD_ENOMEM, or MQD_EINVAL (too big, or
 * Proton refused). */
int mqctl_msg_encode(pn_message_t *m, pn_rwbytes_t *buf, size_t max);

/* mqctl_io.c: `send TOPIC [BODY...]` and `receive TOPIC [...]`; argv holds the words
 * after the verb (global options taken out); returns the exit code. */
int mqctl_send(const mqctl_opts_t *o, int argc, char **argv);
int mqctl_receive(const mqctl_opts_t *o, int argc, char **argv);

/* mqctl_reset.c: group reset's options into props (to, value, shift, partitions, dry_run,
 * all_groups, create); *all for --all-groups; usage errors exit. */
void mqctl_build_reset(json_t *props, int argc, char **argv, bool *all);
/* ISO 8601 date and time (no zone: UTC) / duration (PT1H or 90m) into ms; 0 or -1. */
int mqctl_parse_datetime(const char *s, int64_t *ms);
int mqctl_parse_duration(const char *s, int64_t *ms);

#endif
