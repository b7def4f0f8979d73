/* auth internals: the SCRAM-SHA-256 server exchange (scram.c) and ACL matching (acl.c),
 * both free of server state so unit tests link them alone, and the per-server and
 * per-connection state of tls.c and sasl.c. */
#ifndef MQD_AUTH_INT_H
#define MQD_AUTH_INT_H

#include "auth/auth.h"
#include "conf/conf.h"

#include <stddef.h>

/* ---- scram.c ---- */

#define MQD_SCRAM_MSG_MAX 1024 /* longest client message accepted, and server message made */

typedef struct mqd_scram {
    int step;            /* 0: expects client-first; 1: client-final; 2: finished */
    bool known;          /* false: the user does not exist, the exchange fails at the end */
    char user[256];      /* authcid from n=, unescaped */
    char gs2[300];       /* the GS2 header as sent ("n,,"), for the c= check */
    char first_bare[MQD_SCRAM_MSG_MAX + 1];
    char server_first[MQD_SCRAM_MSG_MAX + 1];
    char nonce[MQD_SCRAM_MSG_MAX + 1]; /* client nonce followed by ours */
    mqd_scram_cred_t cred;
} mqd_scram_t;

/* Parses client-first-message; on success s->user names who logs in. MQD_EINVAL if
 * malformed or asking for channel binding or a mandatory extension. */
int mqd_scram_client_first(mqd_scram_t *s, const char *msg, size_t len);
/* Writes server-first-message (NUL-terminated) into out (MQD_SCRAM_MSG_MAX + 1).
 * cred: the user's stored credentials, NULL for an unknown user (a made-up salt is
 * sent so the exchange looks the same). server_nonce: NULL = 24 random bytes (tests
 * pass the RFC's). */
int mqd_scram_server_first(mqd_scram_t *s, const mqd_scram_cred_t *cred, const char *server_nonce,
                           char *out);
/* Checks client-final-message; on a valid proof writes server-final-message ("v=...")
 * into out and returns 0; MQD_EFAILED on a wrong proof or unknown user, MQD_EINVAL if
 * malformed. */
int mqd_scram_client_final(mqd_scram_t *s, const char *msg, size_t len, char *out);
/* Wipes the keys. */
void mqd_scram_clear(mqd_scram_t *s);

/* ---- acl.c ---- */

/* Glob match: `*` matches any run of characters (also '/' and '.'), everything else
 * itself (case-sensitive, as topic names are). */
bool mqd_acl_match(const char *pattern, const char *s);
/* True if the comma-separated list `groups` ("a, b") holds `group`. */
bool mqd_acl_in_groups(const char *groups, const char *group);
/* The decision of rules[0..n) for `user` (NULL or "" = anonymous) with `groups` (NULL =
 * none): first matching rule wins; no rule matches = deny. Without an ACL at all
 * (acl_present false) everything is allowed. */
bool mqd_acl_check(const mqd_acl_rule_t *rules, size_t n, bool acl_present, const char *user,
                   const char *groups, unsigned perm, const char *address);

/* ---- tls.c / sasl.c: state of the server and of each connection ---- */

struct event;
struct ssl_ctx_st;

typedef struct mqd_auth {
    struct ssl_ctx_st *ctx; /* amqps:// listeners; NULL without tls_cert. An SSL_CTX is
                               reference counted and each connection's SSL holds one
                               (SSL_new takes it, SSL_free drops it): open connections keep
                               theirs across a reload */
} mqd_auth_t;

typedef struct mqd_auth_conn {
    struct mqd_conn *c;
    bool tls;              /* on an amqps:// listener (c->ssl set; its handshake is over
                              before SASL starts: Proton only sees plaintext) */
    bool anonymous;        /* logged in with SASL ANONYMOUS */
    struct event *ev_hs;   /* handshake timeout; a no-op once the peer has opened */
    mqd_scram_t *scram;    /* during a SCRAM exchange */
    char mechs[96];        /* the mechanism list offered */
    char out[MQD_SCRAM_MSG_MAX + 1]; /* challenge / outcome data: Proton keeps a pointer */
} mqd_auth_conn_t;

/* sasl.c: installs the SASL plugin on c's transport with `ac` as its context (the plugin's
 * free callback frees ac). */
void mqd_auth_sasl_setup(struct mqd_conn *c, mqd_auth_conn_t *ac);
/* tls.c: frees per-connection state (from the plugin's free callback). */
void mqd_auth_conn_free(mqd_auth_conn_t *ac);
/* tls.c: the subject CN (UTF-8) of c's verified client certificate into cn[len]. 0;
 * MQD_ENOENT without TLS or without a verified certificate; MQD_EINVAL if the subject
 * has no CN, or it does not fit, or it holds a NUL. */
int mqd_auth_tls_peer_cn(const struct mqd_conn *c, char *cn, size_t len);
/* tls.c: true if c is a TLS connection whose peer presented a certificate that verified. */
bool mqd_auth_tls_peer_verified(const struct mqd_conn *c);
/* tls.c: connections of `user` other than `self` (max_connections_per_user). */
size_t mqd_auth_user_conns(struct mqd_server *s, const struct mqd_conn *self, const char *user);

#endif
