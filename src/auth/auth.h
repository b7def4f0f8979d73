/* auth: TLS on listeners, SASL mechanisms (PLAIN, ANONYMOUS, EXTERNAL, SCRAM-SHA-256),
 * users and per-address ACLs, connection limits. Used by server/ (per connection) and
 * amqp/ (per attach and per anonymous-relay message). */
#ifndef MQD_AUTH_H
#define MQD_AUTH_H

#include "mqd.h"

struct mqd_server;
struct mqd_conn;

typedef enum {
    MQD_PERM_SEND = 1,
    MQD_PERM_RECEIVE = 2,
    MQD_PERM_BROWSE = 4,
    MQD_PERM_MANAGE = 8,
    MQD_PERM_CREATE = 16,
    MQD_PERM_MONITOR = 32, /* read-only management (the web console's pages and /api/ GETs) */
} mqd_perm_t;

/* Loads what the server's config asks for (TLS contexts, ACL rules). Called once from
 * mqd_server_new before the listeners open. */
int mqd_auth_init(struct mqd_server *s);
/* SIGHUP reload: mqd_auth_init registers a config hook (conf_swap.c) that builds the
 * new TLS context before the swap (a certificate that does not load refuses the reload)
 * and, after it, installs it and rechecks live connections (mqd_auth_recheck). */
void mqd_auth_free(struct mqd_server *s);

struct mqd_user_conf;
/* SIGHUP, after the new users and ACLs are in place (the reload hook);
 * `old_users[0..n_old)` are the users before the reload. Closes every live connection
 * whose user is gone or whose credentials changed, and detaches every live link whose
 * attach-time permission check fails now, both with amqp:unauthorized-access; the rest
 * stays untouched. */
void mqd_auth_recheck(struct mqd_server *s, const struct mqd_user_conf *old_users, size_t n_old);

/* Sets up SASL (and TLS, for an amqps:// listener: `listener` is the index into
 * conf->listen) and the handshake timer on a new connection's transport, before it is
 * bound. The per-connection state it allocates (c->auth) is freed with the transport
 * (pn_connection_driver_destroy). MQD_EIO if the TLS layer cannot be set up. */
int mqd_auth_conn_setup(struct mqd_conn *c, size_t listener);

/* To be called at PN_CONNECTION_REMOTE_OPEN: false (and the connection is being closed
 * with amqp:unauthorized-access) if the peer opened without completing SASL while
 * authentication is required. Proton 0.37 accepts an open frame inside the SASL layer;
 * without this call the handshake timer closes such a connection at its deadline. */
bool mqd_auth_conn_opened(struct mqd_conn *c);

/* server.c's input path (plaintext, before Proton): how many of the n bytes at p Proton
 * may take now. Until the SASL outcome, input goes to Proton one SASL frame at a time;
 * 0 means a PLAIN check is running (auth/pool.c): the caller hands the rest (all n) to
 * mqd_auth_rx_hold, and auth feeds it (mqd_conn_rx_feed) once the outcome is set, so a
 * client that pipelines its AMQP header and open behind sasl-init keeps working. After
 * the outcome it returns n. */
size_t mqd_auth_rx_gate(struct mqd_conn *c, const uint8_t *p, size_t n);
/* Keeps n bytes for later; over 64 KiB the connection is closed
 * (amqp:resource-limit-exceeded). */
void mqd_auth_rx_hold(struct mqd_conn *c, const uint8_t *p, size_t n);

/* replication_peer_verify (mutual TLS between nodes): may connection c carry the fetch
 * link of node `node_id`? Its client certificate must have verified in the TLS handshake,
 * chain to a certificate of replication_ca_file and have the subject CN
 * "mqd-node-<node_id>". 0 when it does, and whenever replication_peer_verify is off;
 * MQD_ENOENT without a verified client certificate, MQD_EINVAL for one of another CA or
 * another name; why[len] then says which rule failed (the refusal's description). */
int mqd_auth_repl_peer_check(struct mqd_conn *c, uint32_t node_id, char *why, size_t len);
/* Did c log in as a node (SASL EXTERNAL with a node certificate, replication_peer_verify)?
 * Such a connection is no user's: it may carry $repl/ fetch links and nothing else. */
bool mqd_auth_conn_is_node(const struct mqd_conn *c);
/* At every attach (amqp, before anything else): NULL when c may attach this link, else
 * the refusal's description (amqp:unauthorized-access). A node connection may attach only
 * links on which mqd sends (`sender`) from a source `$repl/...`. */
const char *mqd_auth_node_attach_denied(const struct mqd_conn *c, bool sender, const char *source);

/* on_accept: may one more connection come from `host` (max_connections_per_ip,
 * max_handshakes_per_ip)? With connections in their handshake holding their share of
 * descriptors (handshake_fd_percent), the oldest of them is closed to make room (admit.c).
 * Logs refusals, once a second. */
bool mqd_auth_admit_host(struct mqd_server *s, const char *host);

struct mqd_buf;
/* A request message req[0..len) sent to `$cbs` (AMQP claims-based security, as the
 * Event Hubs SDKs use it): put-token with a SAS token. Writes the encoded reply into out
 * (to = the request's reply-to, correlation-id = its message-id; application properties
 * status-code 200/202/400/401/404/500 and status-description) and returns 0; a valid
 * token is kept on c until it expires (see sas_required). MQD_EINVAL when the request
 * cannot be answered (undecodable, no reply-to). */
int mqd_auth_cbs_handle(struct mqd_conn *c, const uint8_t *req, size_t len, struct mqd_buf *out);

/* May the connection's authenticated user do `perm` on `address` (a topic name or an
 * address as attached)? False unless the connection completed SASL (or, with
 * allow_anonymous, uses none); then the [acl] rules decide. Logs refusals. */
bool mqd_auth_allowed(struct mqd_conn *c, mqd_perm_t perm, const char *address);
/* The same decision without logging a refusal (for a right that is only noted). */
bool mqd_auth_may(struct mqd_conn *c, mqd_perm_t perm, const char *address);
/* May the connection's user do `perm` on some address: an [acl] rule that allows it to
 * this user (or no [acl]) and, with sas_required, an unexpired SAS token whose key has
 * the right? For a listing, whose rows are then filtered by mqd_auth_may (management
 * QUERY: whoever holds `monitor` nowhere is refused rather than shown an empty list).
 * Never logs. */
bool mqd_auth_may_anywhere(struct mqd_conn *c, mqd_perm_t perm);

/* The name the [acl] rules know connection c's login by: its user, or "" for an
 * anonymous login (SASL ANONYMOUS, or none with allow_anonymous). What a node forwarding
 * c's link names as mqd:fwd-user, for the leader's mqd_auth_user_may. */
const char *mqd_auth_principal(struct mqd_conn *c);
/* May the configured user `user` (NULL or "" = anonymous) do `perm` on `address`, by
 * the [acl] rules alone? For a login that is not an AMQP connection (the web console):
 * false for a name the config no longer has. */
bool mqd_auth_user_may(struct mqd_server *s, const char *user, mqd_perm_t perm,
                       const char *address);
/* mqd_auth_may_anywhere for such a login: some [acl] rule allows `perm` to `user`. */
bool mqd_auth_user_may_anywhere(struct mqd_server *s, const char *user, mqd_perm_t perm);

/* SCRAM-SHA-256 for a login that is not an AMQP connection (the web console), with the
 * SASL path's code and credentials (scram.c): the password never leaves the client, so
 * it needs no TLS. An unknown user gets a decoy salt and fails at the end, as on AMQP.
 * start: client-first-message msg[0..len) -> server-first-message (NUL-terminated) in
 * out[MQD_AUTH_SCRAM_MAX + 1]; *st is the exchange (free it with mqd_auth_scram_free).
 * finish: client-final-message -> 0 and server-final-message in out and the user's name
 * in user[userlen]; MQD_EFAILED for a wrong proof, an unknown user or credentials changed
 * by a reload since start; MQD_EINVAL when malformed. MQD_EINVAL / MQD_ENOMEM from start. */
#define MQD_AUTH_SCRAM_MAX 1024
typedef struct mqd_scram mqd_auth_scram_t;
int mqd_auth_scram_start(struct mqd_server *s, const char *msg, size_t len, char *out,
                         mqd_auth_scram_t **st);
int mqd_auth_scram_finish(struct mqd_server *s, mqd_auth_scram_t *st, const char *msg,
                          size_t len, char *out, char *user, size_t userlen);
void mqd_auth_scram_free(mqd_auth_scram_t *st);

/* Checks user's password against its PBKDF2 hash on the login pool (an unknown user
 * costs the same: the decoy hash), then calls done(arg, rc) on the loop thread: 0 (right
 * password, and the user still has that hash), MQD_EFAILED (wrong password or unknown
 * user), MQD_ESTATE (the pool went away: shutdown). `host` is the client's address
 * (the pool's fairness, as for SASL). Returns MQD_EAGAIN without calling done when
 * auth_queue_max checks are already running, MQD_ENOMEM likewise. The password is copied
 * and wiped after use. */
typedef void (*mqd_auth_pw_done_fn)(void *arg, int rc);
int mqd_auth_password_check(struct mqd_server *s, const char *user, const char *password,
                            const char *host, mqd_auth_pw_done_fn done, void *arg);

#endif
