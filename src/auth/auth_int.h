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
/* The same for a user that does not exist (or has no SCRAM credentials): `decoy` (from
 * mqd_scram_decoy) is offered as if real, and client-final fails like a wrong password. */
int mqd_scram_server_first_decoy(mqd_scram_t *s, const mqd_scram_cred_t *decoy,
                                 const char *server_nonce, char *out);
/* Credentials for an unknown `user` (at most 255 bytes) derived from the server secret
 * `key`: the same salt for the same name on every try, and `iterations` as real users
 * have, so that server-first does not tell which names exist (RFC 5802 section 9:
 * a server may not want to reveal them). MQD_EIO if HMAC fails. */
int mqd_scram_decoy(const unsigned char key[32], const char *user, uint32_t iterations,
                    mqd_scram_cred_t *out);
/* Checks client-final-message; on a valid proof writes server-final-message ("v=...")
 * into out and returns 0; MQD_EFAILED on a wrong proof or unknown user, MQD_EINVAL if
 * malformed. */
int mqd_scram_client_final(mqd_scram_t *s, const char *msg, size_t len, char *out);
/* Wipes the keys. */
void mqd_scram_clear(mqd_scram_t *s);

/* scramuser.c: server-first-message into out (MQD_SCRAM_MSG_MAX + 1) for s->user after
 * mqd_scram_client_first, from that user's stored credentials, or the decoy's when it
 * has none; 0 or the error of the scram.c call that failed. */
int mqd_auth_scram_reply_first(struct mqd_server *srv, mqd_scram_t *s, char *out);
/* scramuser.c: does `user` still have SCRAM credentials with this StoredKey (after a
 * reload, at the end of an exchange)? */
bool mqd_auth_scram_unchanged(struct mqd_server *srv, const char *user,
                              const unsigned char stored_key[32]);

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
/* Does some rule of rules[0..n) allow `perm` to `user` on some address (a deny before it
 * may still shadow it on every address: this answers "might", for a listing that is
 * then filtered by mqd_acl_check)? True without an ACL. */
bool mqd_acl_grants_any(const mqd_acl_rule_t *rules, size_t n, bool acl_present, const char *user,
                        const char *groups, unsigned perm);

/* ---- gate.c: the SASL-phase framer (pure; tests/fuzz/fuzz_gate.c) ---- */

typedef struct mqd_auth_gate {
    bool open;      /* past SASL (or no SASL header): everything passes */
    uint8_t hdr;    /* protocol header bytes seen, of 8 */
    uint8_t sz[4];  /* the current frame's size field */
    uint8_t sz_got; /* bytes of it seen */
    uint32_t left;  /* bytes of the current frame after its size field */
} mqd_auth_gate_t;

/* Accounts and returns how many of the n bytes at p come before the end of the protocol
 * header or of the current frame (at least 1 when n > 0); n once open. Opens itself on a
 * header other than SASL's and on a frame size below 8 (Proton rejects those). */
size_t mqd_auth_gate_take(mqd_auth_gate_t *g, const uint8_t *p, size_t n);
/* True between frames (after the header), or when open. */
bool mqd_auth_gate_at_boundary(const mqd_auth_gate_t *g);

/* ---- sas.c: SAS tokens (pure; tests/fuzz/fuzz_sas.c) ---- */

#define MQD_SAS_TOKEN_MAX 4096 /* longest token accepted */

typedef struct mqd_sas_token {
    char sr_raw[1024];   /* sr as sent (url-encoded): what the signature covers */
    char se_raw[16];     /* se as sent */
    char sig_raw[128];
    char skn_raw[512];
    char audience[1024]; /* sr decoded: sb://HOST:PORT/HUB[/...] */
    char hub[256];       /* HUB from the audience; "" = namespace-wide (no path) */
    char skn[256];       /* key name, decoded */
    int64_t se;          /* expiry, unix seconds */
    unsigned char sig[32];
} mqd_sas_token_t;

/* Parses a token string s[0..len) (not NUL-terminated); *out only on success, else
 * MQD_EINVAL (no prefix, a field missing or repeated, bad escapes, se not decimal, sig
 * not base64 of 32 bytes, too long). */
int mqd_sas_parse(const char *s, size_t len, mqd_sas_token_t *out);
/* 0 if t's signature is HMAC-SHA256(key, sr + "\n" + se) (constant-time compare);
 * MQD_EFAILED if not; MQD_EIO if HMAC fails. */
int mqd_sas_verify(const mqd_sas_token_t *t, const char *key, size_t keylen);
/* Does a token for `token_hub` ("" = every hub) signed by a key of `scope` (NULL or "*" =
 * every hub) cover `topic` (a topic name; "T/$DeadLetterQueue" counts as T)? */
bool mqd_sas_covers(const char *token_hub, const char *scope, const char *topic);
/* Does a token for `token_hub` signed by a key of `scope` cover every hub, and with them the
 * node as a whole (node-wide management: connections, users, config, reload)? Only a
 * namespace-wide token ("" hub: an audience without a path) of an unscoped key (NULL or
 * "*") does. */
bool mqd_sas_covers_all(const char *token_hub, const char *scope);

/* A $cbs request: application properties operation, type, name; body an amqp-value
 * string (the token). Fields too long for their buffer count as absent. */
#define MQD_CBS_REQUEST_MAX (16 * 1024)
typedef struct mqd_cbs_req {
    char reply_to[512];
    char operation[32];
    char type[64];
    char name[1024];    /* the audience */
    bool has_op, has_type, has_name;
    const char *token;  /* into the message's body (lives as long as the pn_message_t) */
    size_t token_len;
} mqd_cbs_req_t;

struct pn_message_t;
/* Decodes req[0..len) into m (the caller's, reused) and fills *r. MQD_EINVAL if it does
 * not decode, is over MQD_CBS_REQUEST_MAX or has no reply-to (nothing to answer). */
int mqd_cbs_request_parse(struct pn_message_t *m, const uint8_t *req, size_t len, mqd_cbs_req_t *r);

/* ---- pool.c: threads for the slow part of a login ---- */

struct event;
struct event_base;
struct ssl_ctx_st;

typedef struct mqd_auth_job mqd_auth_job_t;
struct mqd_auth_job {
    mqd_auth_job_t *next;                      /* the pool's */
    uint64_t key;                              /* who asks (the peer's address): fairness */
    void (*work)(mqd_auth_job_t *j);           /* on a pool thread: may touch only *j */
    void (*done)(mqd_auth_job_t *j, bool ran); /* on the loop, frees j; ran false: never run
                                                  (the pool is being freed) */
};
typedef struct mqd_auth_pool mqd_auth_pool_t;

/* Starts n_threads threads; finished jobs come back through an event on `base`. */
int mqd_auth_pool_new(struct event_base *base, size_t n_threads, mqd_auth_pool_t **out);
/* Queues j (the pool holds it until done). Loop thread only; the caller bounds how many. */
void mqd_auth_pool_submit(mqd_auth_pool_t *p, mqd_auth_job_t *j);
/* Jobs submitted whose done has not run yet. */
size_t mqd_auth_pool_in_flight(const mqd_auth_pool_t *p);
/* Joins the threads; jobs still queued or finished get done(j, false). */
void mqd_auth_pool_free(mqd_auth_pool_t *p);
/* The fairness key of the address host[0..len) (FNV-1a). */
uint64_t mqd_auth_pool_key(const char *host, size_t len);

/* ---- pwjob.c: one password check against a PBKDF2 hash, on the pool ---- */

#define MQD_AUTH_DECOY_HASH_MAX 160

typedef struct mqd_auth_pw mqd_auth_pw_t;
/* On the loop: the verdict. 0: right password and the user still has that hash;
 * MQD_EFAILED: wrong password or unknown user (p->known says which); MQD_ENOENT: right
 * password, but a reload since removed the user or changed the hash; MQD_ESTATE: never
 * ran (the pool is being freed). p is freed when it returns. */
typedef void (*mqd_auth_pw_fn)(mqd_auth_pw_t *p, int rc);
struct mqd_auth_pw {
    mqd_auth_job_t job; /* first: the pool's view */
    size_t size;        /* of the caller's struct that starts with this one */
    struct mqd_server *s;
    mqd_auth_pw_fn done;
    bool known; /* the user exists with a password hash (else hash is the decoy) */
    bool ok;    /* set by the pool thread */
    char user[256];
    char hash[MQD_AUTH_DECOY_HASH_MAX + 64];
    char pw[1025]; /* the password, NUL-terminated; wiped once checked */
};
/* A zeroed job of `size` bytes: a caller's struct whose first member is an
 * mqd_auth_pw_t, so the verdict can reach the caller's own state. NULL if out of memory
 * (or size too small). */
void *mqd_auth_pw_new(size_t size);
/* Names who logs in: user (MQD_EINVAL if it does not fit), its hash or, for a name
 * without one, the decoy. */
int mqd_auth_pw_user(mqd_auth_pw_t *p, struct mqd_server *s, const char *user);
/* Hands p (user set, p->pw filled) to s's pool; done(p, rc) follows on the loop. The
 * caller has checked the pool's bounds (auth_queue_max, auth_queue_per_ip). */
void mqd_auth_pw_submit(mqd_auth_pw_t *p, uint64_t key, mqd_auth_pw_fn done);
/* Wipes and frees a job never submitted. */
void mqd_auth_pw_free(mqd_auth_pw_t *p);

/* ---- tls.c / sasl.c / decoy.c: state of the server and of each connection ---- */

#define MQD_AUTH_SECRET_FILE "auth.secret" /* in data_dir: 32 random bytes, mode 0600 */

/* nodecert.c: the certificates that make a node's identity (replication_peer_verify) */
struct stack_st_X509;
struct x509_st;
typedef struct mqd_auth_cas {
    struct stack_st_X509 *repl;   /* replication_ca_file's certificates, which a fetch
                                     connection's client certificate must chain to; NULL:
                                     replication_peer_verify is off */
    struct stack_st_X509 *client; /* tls_ca's, loaded when repl is: SASL EXTERNAL takes
                                     only certificates that chain to one of these */
} mqd_auth_cas_t;

typedef struct mqd_auth {
    struct ssl_ctx_st *ctx; /* amqps:// listeners; NULL without tls_cert. An SSL_CTX is
                               reference counted and each connection's SSL holds one
                               (SSL_new takes it, SSL_free drops it): open connections keep
                               theirs across a reload */
    struct ssl_ctx_st *next_ctx; /* built by the reload check, installed by its apply */
    mqd_auth_cas_t cas, next_cas; /* ctx's and next_ctx's node CAs (owned) */
    mqd_auth_pool_t *pool;  /* PLAIN password checks */
    unsigned char secret[32]; /* server secret for SCRAM decoys (decoy.c) */
    /* what an unknown user is checked against, so that it costs what a real one does:
       a PBKDF2 hash with the configured users' iteration count (PLAIN), and the SCRAM
       iteration count real users have (decoy.c, set at init and on reload) */
    char decoy_hash[MQD_AUTH_DECOY_HASH_MAX];
    uint32_t decoy_scram_iterations;
    /* admit.c: refusals at accept, logged once a second per reason */
#define MQD_AUTH_ADMIT_REASONS 4
    int64_t admit_logged_ms[MQD_AUTH_ADMIT_REASONS];
    uint64_t admit_quiet[MQD_AUTH_ADMIT_REASONS];
} mqd_auth_t;

/* hold.c: after a PLAIN check's outcome is set: feeds the input held meanwhile to Proton
 * (feed: the login succeeded) or drops it. */
void mqd_auth_rx_release(struct mqd_conn *c, bool feed);

/* decoy.c: reads data_dir/auth.secret, or creates it (durably) on first start. */
int mqd_auth_secret_load(const char *data_dir, unsigned char secret[32]);
/* decoy.c: sets a->decoy_hash and a->decoy_scram_iterations from conf's users. */
int mqd_auth_decoy_setup(mqd_auth_t *a, const mqd_conf_t *conf);


typedef struct mqd_auth_conn {
    struct mqd_conn *c;
    bool tls;              /* on an amqps:// listener (c->ssl set; its handshake is over
                              before SASL starts: Proton only sees plaintext) */
    bool anonymous;        /* logged in with SASL ANONYMOUS */
    bool node;             /* logged in with SASL EXTERNAL as node node_id by a node
                              certificate (nodecert.c): $repl/ fetch links only, never a
                              user of the config */
    uint32_t node_id;
    struct event *ev_hs;   /* handshake timeout; a no-op once the peer has opened */
    struct event *ev_close; /* recheck.c: cuts off a revoked peer that ignores the close */
    mqd_scram_t *scram;    /* during a SCRAM exchange */
    struct mqd_cbs_conn *cbs; /* cbs.c: SAS tokens put on this connection (owned) */
    bool pending;          /* a PLAIN check is with the pool (holds a connection reference) */
    bool outcome;          /* the SASL outcome is set: a late pool result must not change it */
    mqd_auth_gate_t gate;  /* input reaches Proton frame by frame until the outcome */
    uint8_t *held;         /* input that came behind a sasl-init under check (owned) */
    size_t held_len, held_cap;
    char mechs[96];        /* the mechanism list offered */
    char out[MQD_SCRAM_MSG_MAX + 1]; /* challenge / outcome data: Proton keeps a pointer */
} mqd_auth_conn_t;

/* sasl.c: installs the SASL plugin on c's transport with `ac` as its context (the plugin's
 * free callback frees ac). */
void mqd_auth_sasl_setup(struct mqd_conn *c, mqd_auth_conn_t *ac);
/* reach.c: warns about each user no listener lets log in (start and reload). */
void mqd_auth_warn_unreachable(const struct mqd_server *s);
/* cbs.c: frees ac->cbs (from mqd_auth_conn_free). */
void mqd_auth_cbs_free(mqd_auth_conn_t *ac);
/* cbs.c: why c's SAS tokens do not allow perm on address, or NULL (also when
 * sas_required is off, and for `create`, which only the [acl] governs). address is a
 * topic (covered by a token for its hub within its key's scope), or NULL or
 * "$management": the node as a whole, which only a token covering every hub covers
 * (mqd_sas_covers_all), so that a key scoped to one hub never manages the others. */
const char *mqd_auth_sas_denied(struct mqd_conn *c, mqd_perm_t perm, const char *address);
/* cbs.c: the same for "some address": NULL when c keeps an unexpired token whose key has
 * the right perm needs (or sas_required is off). */
const char *mqd_auth_sas_denied_anywhere(struct mqd_conn *c, mqd_perm_t perm);
/* recheck.c: detaches every link of c whose attach-time check fails now ("why" as its
 * description); returns how many. */
size_t mqd_auth_recheck_links(struct mqd_conn *c, const char *why);
/* tls.c: closes c's transport with the error condition name/why (its end is the tick's). */
void mqd_auth_conn_abort(struct mqd_conn *c, const char *name, const char *why);
/* tls.c: frees per-connection state (from the plugin's free callback). */
void mqd_auth_conn_free(mqd_auth_conn_t *ac);
/* tls.c: the subject CN (UTF-8) of c's verified client certificate into cn[len]. 0;
 * MQD_ENOENT without TLS or without a verified certificate; MQD_EINVAL if the subject
 * has no CN, or it does not fit, or it holds a NUL. */
int mqd_auth_tls_peer_cn(const struct mqd_conn *c, char *cn, size_t len);
/* tls.c: true if c is a TLS connection whose peer presented a certificate that verified. */
bool mqd_auth_tls_peer_verified(const struct mqd_conn *c);
/* tls.c: the first subject CN (UTF-8) of cert into cn[len]; MQD_ENOENT for no cert,
 * MQD_EINVAL as mqd_auth_tls_peer_cn. */
int mqd_auth_cert_cn(const struct x509_st *cert, char *cn, size_t len);

/* nodecert.c: is replication_peer_verify in force for conf (cluster = etcd,
 * replication_tls, replication_ca_file)? */
bool mqd_auth_repl_peer_on(const mqd_conf_t *conf);
/* nodecert.c: with replication_peer_verify in repl (the running config), adds
 * replication_ca_file to x's trust store and to the CA names it sends, and loads the
 * certificates of it and of conf's tls_ca into *out (the caller frees them with
 * mqd_auth_cas_free). *out zeroed when off. MQD_EINVAL when a file does not load. */
int mqd_auth_cas_setup(struct ssl_ctx_st *x, const mqd_conf_t *conf, const mqd_conf_t *repl,
                       mqd_auth_cas_t *out);
void mqd_auth_cas_free(mqd_auth_cas_t *cas);
/* nodecert.c: c's verified client certificate makes a client's identity (SASL
 * EXTERNAL): it verified, and, when node certificates are trusted as well, it chains to
 * tls_ca. */
bool mqd_auth_tls_peer_is_client(const struct mqd_conn *c);
/* nodecert.c: with replication_peer_verify, c's verified client certificate chains to
 * replication_ca_file (it may name a node: SASL EXTERNAL in the node role). */
bool mqd_auth_tls_peer_is_node(const struct mqd_conn *c);
/* nodecert.c: the node id a subject CN names by the naming rule: "mqd-node-" and the
 * decimal id exactly as the node writes it (no sign, no leading zero), else MQD_EINVAL. */
int mqd_auth_node_cn_id(const char *cn, uint32_t *id);
/* nodecert.c: the SASL EXTERNAL login of a node certificate (cn, chaining to
 * replication_ca_file) with the authorization identity authzid[0..len) (empty, or the
 * CN itself). 0 and *id; MQD_EINVAL when cn does not name a node or authzid names
 * someone else, why[whylen] then says so. */
int mqd_auth_node_login(const char *cn, const char *authzid, size_t len, uint32_t *id, char *why,
                        size_t whylen);
/* nodecert.c, at start: with cluster = etcd and replication_tls, the certificate this
 * node fetches with (replication_cert, else tls_cert) loads with its key, and both it and
 * the server certificate its followers check (tls_cert, in `server`, the listeners'
 * context) name the node (CN mqd-node-<node_id>). MQD_EINVAL when the first does not
 * load, or one does not name the node while this node has replication_peer_verify on
 * (otherwise a warning); logged. */
int mqd_auth_repl_cert_check(const mqd_conf_t *conf, struct ssl_ctx_st *server);
/* nodecert.c: the same for the server certificate of x (read from path) alone, with repl's
 * (the running config's) node_id and replication keys: at start, and on every reload
 * (a certificate replaced in place that names another node refuses the reload). */
int mqd_auth_repl_server_cert_check(const mqd_conf_t *repl, struct ssl_ctx_st *x, const char *path);
/* tls.c: connections of `user` other than `self` (max_connections_per_user). */
size_t mqd_auth_user_conns(struct mqd_server *s, const struct mqd_conn *self, const char *user);

#endif
