/* The auth subsystem's server side: the OpenSSL context of amqps:// listeners (mqd runs
 * TLS itself, in front of Proton: server.c moves the records), per-connection setup
 * (TLS, SASL, handshake timer), the verified client certificate for SASL EXTERNAL,
 * connection limits, SIGHUP reload of certificates and ACLs, and the permission check. */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core.h"

#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdlib.h>
#include <string.h>

static const char *const perm_names[] = {"send", "receive", "browse", "manage", "create"};

static const char *perm_name(mqd_perm_t p)
{
    for (size_t i = 0; i < MQD_ARRAY_LEN(perm_names); i++)
        if (p == (1u << i))
            return perm_names[i];
    return "?";
}

/* The newest OpenSSL error as text, for logs ("no error" when the queue is empty). */
static const char *ssl_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();
    if (e == 0)
        snprintf(buf, len, "no error");
    else
        ERR_error_string_n(e, buf, len);
    return buf;
}

/* Client certificates: the CA file is the only trust (no system store is ever loaded),
 * and its names go in the CertificateRequest. */
static int ctx_set_client_ca(SSL_CTX *x, const mqd_conf_t *conf)
{
    if (SSL_CTX_load_verify_locations(x, conf->tls_ca, NULL) != 1)
        return MQD_EINVAL;
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(conf->tls_ca);
    if (names == NULL)
        return MQD_EINVAL;
    SSL_CTX_set_client_CA_list(x, names); /* takes names */
    return 0;
}

static const int verify_modes[] = {
    [MQD_TLS_VERIFY_NONE] = SSL_VERIFY_NONE,
    /* asks for a certificate; one that does not verify fails the handshake */
    [MQD_TLS_VERIFY_OPTIONAL] = SSL_VERIFY_PEER,
    [MQD_TLS_VERIFY_REQUIRED] = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
};

/* Settings that are not in the config. Partial writes and a moving buffer: Proton's
 * output buffer is written as it is and may move between a WANT_WRITE and the retry.
 * Released buffers: an idle TLS connection does not keep ~34 KiB of record buffers.
 * Read-ahead: one read(2) per buffer, not two per record. Renegotiation (TLS 1.2) is
 * refused; an EOF without close_notify is a plain EOF (AMQP frames carry their length,
 * so a truncation cannot pass for a whole frame). */
static void ctx_defaults(SSL_CTX *x)
{
    SSL_CTX_set_mode(x, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
    uint64_t opts = SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE;
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    opts |= SSL_OP_IGNORE_UNEXPECTED_EOF;
#endif
    SSL_CTX_set_options(x, opts);
    SSL_CTX_set_read_ahead(x, 1);
    SSL_CTX_set_dh_auto(x, 1);
    /* resumption by stateless tickets only: no server-side session cache to grow with
     * the number of clients (a context id, which resuming with a client certificate
     * needs, all the same) */
    SSL_CTX_set_session_cache_mode(x, SSL_SESS_CACHE_OFF);
    static const unsigned char sid[] = "mqd";
    SSL_CTX_set_session_id_context(x, sid, sizeof sid - 1);
}

/* A server SSL_CTX from conf, and with replication_peer_verify the node CAs of repl (the
 * running config: those keys are restart-only) in its store and in *cas; *out = NULL
 * when no certificate is configured. */
static int ctx_build(const mqd_conf_t *conf, const mqd_conf_t *repl, SSL_CTX **out,
                     mqd_auth_cas_t *cas)
{
    char why[256];
    *out = NULL;
    *cas = (mqd_auth_cas_t){0};
    if (conf->tls_cert == NULL)
        return 0;
    ERR_clear_error();
    SSL_CTX *x = SSL_CTX_new(TLS_server_method());
    const char *what = "SSL_CTX_new";
    bool ok = x != NULL;
    if (ok) {
        ctx_defaults(x);
        what = "tls_min_version";
        ok = SSL_CTX_set_min_proto_version(x, conf->tls_min_version ? TLS1_3_VERSION
                                                                    : TLS1_2_VERSION) == 1;
    }
    if (ok) {
        what = "tls_cert";
        ok = SSL_CTX_use_certificate_chain_file(x, conf->tls_cert) == 1;
    }
    if (ok) {
        what = "tls_key";
        ok = SSL_CTX_use_PrivateKey_file(x, conf->tls_key ? conf->tls_key : conf->tls_cert,
                                         SSL_FILETYPE_PEM) == 1 &&
             SSL_CTX_check_private_key(x) == 1;
    }
    if (ok && conf->tls_ciphers) {
        what = "tls_ciphers";
        ok = SSL_CTX_set_cipher_list(x, conf->tls_ciphers) == 1;
    }
    if (ok && conf->tls_ca) {
        what = "tls_ca";
        ok = ctx_set_client_ca(x, conf) == 0;
    }
    if (ok) {
        what = "replication_ca_file";
        ok = mqd_auth_cas_setup(x, conf, repl, cas) == 0;
    }
    if (!ok) {
        MQD_ERR("auth", "TLS: %s rejected (cert %s, key %s, ca %s, replication_ca_file %s): %s",
                what, conf->tls_cert, conf->tls_key ? conf->tls_key : "-",
                conf->tls_ca ? conf->tls_ca : "-",
                repl->replication_ca_file ? repl->replication_ca_file : "-",
                ssl_reason(why, sizeof why));
        SSL_CTX_free(x);
        ERR_clear_error();
        return MQD_EINVAL;
    }
    /* node certificates: asked of every TLS client, as tls_verify_client = optional does */
    int mode = conf->tls_verify_client;
    if (cas->repl && mode == MQD_TLS_VERIFY_NONE)
        mode = MQD_TLS_VERIFY_OPTIONAL;
    SSL_CTX_set_verify(x, verify_modes[mode], NULL);
    *out = x;
    return 0;
}

/* Reload check: certificate files may have been replaced in place, so a new context is
 * built at every reload; one that does not load refuses the whole reload. */
static int reload_check(void *arg, const mqd_conf_t *cur, const mqd_conf_t *next, char *err,
                        size_t errlen)
{
    mqd_server_t *s = arg;
    mqd_auth_t *a = mqd_srv_auth(s);
    SSL_CTX_free(a->next_ctx); /* prepared by a reload that failed later */
    a->next_ctx = NULL;
    mqd_auth_cas_free(&a->next_cas);
    if (ctx_build(next, cur, &a->next_ctx, &a->next_cas) != 0) {
        snprintf(err, errlen,
                 "%s: tls_cert: the TLS certificate, key or CA does not load "
                 "(see the TLS line above)",
                 next->path ? next->path : "configuration");
        return MQD_EINVAL;
    }
    /* followers with replication_peer_verify check the leader's name in it */
    if (mqd_auth_repl_server_cert_check(cur, a->next_ctx, next->tls_cert) != 0) {
        snprintf(err, errlen, "%s: tls_cert: %s does not name this node (see the auth line above)",
                 next->path ? next->path : "configuration", next->tls_cert);
        return MQD_EINVAL;
    }
    return 0;
}

/* Reload apply: the new users, ACLs and TLS settings are in s->conf now. */
static void reload_apply(void *arg, const mqd_conf_t *old, const mqd_conf_t *now)
{
    mqd_server_t *s = arg;
    mqd_auth_t *a = mqd_srv_auth(s);
    SSL_CTX_free(a->ctx); /* connections using it hold their own reference */
    a->ctx = a->next_ctx;
    a->next_ctx = NULL;
    mqd_auth_cas_free(&a->cas);
    a->cas = a->next_cas;
    a->next_cas = (mqd_auth_cas_t){0};
    /* unknown names now cost what the new users do */
    if (mqd_auth_decoy_setup(a, now) != 0)
        MQD_WARN("auth", "reload: keeping the previous decoy iteration count");
    MQD_NOTICE("auth", "reloaded: TLS %s, %zu ACL rules%s", a->ctx ? "on" : "off", now->n_acl,
               now->acl_present ? "" : " (no [acl]: all allowed)");
    mqd_auth_warn_unreachable(s);
    mqd_auth_recheck(s, old->users, old->n_users); /* revoked users and rights leave now */
}

int mqd_auth_init(mqd_server_t *s)
{
    mqd_auth_t *a = calloc(1, sizeof *a);
    if (a == NULL)
        return MQD_ENOMEM;
    mqd_srv_set_auth(s, a);
    const mqd_conf_t *conf = mqd_srv_conf(s);
    int rc = ctx_build(conf, conf, &a->ctx, &a->cas);
    if (rc == 0)
        rc = mqd_auth_repl_cert_check(conf, a->ctx);
    if (rc == 0)
        rc = mqd_auth_secret_load(conf->data_dir, a->secret);
    if (rc == 0)
        rc = mqd_auth_decoy_setup(a, conf);
    if (rc == 0)
        rc = mqd_auth_pool_new(mqd_srv_base(s), conf->auth_threads, &a->pool);
    if (rc == 0)
        rc = mqd_conf_hook_add(mqd_srv_conf_hooks(s), NULL, reload_check, reload_apply, s);
    if (rc != 0) {
        mqd_auth_free(s);
        return rc;
    }
    if (conf->acl_present)
        MQD_INFO("auth", "%zu ACL rules", conf->n_acl);
    mqd_auth_warn_unreachable(s);
    return 0;
}

void mqd_auth_free(mqd_server_t *s)
{
    mqd_auth_t *a = mqd_srv_auth(s);
    if (a == NULL)
        return;
    mqd_auth_pool_free(a->pool); /* releases the connections its jobs hold */
    SSL_CTX_free(a->ctx);
    SSL_CTX_free(a->next_ctx);
    mqd_auth_cas_free(&a->cas);
    mqd_auth_cas_free(&a->next_cas);
    free(a);
    mqd_srv_set_auth(s, NULL);
}

/* ---- per connection ---- */

void mqd_auth_conn_abort(mqd_conn_t *c, const char *name, const char *why)
{
    pn_connection_driver_t *drv = mqd_conn_driver(c);
    pn_condition_t *cond = pn_transport_condition(drv->transport);
    pn_condition_set_name(cond, name);
    pn_condition_set_description(cond, why);
    pn_connection_driver_close(drv);
    mqd_conn_mark_dirty(c);
}

/* Proton 0.37 dispatches an AMQP open that arrives inside the SASL layer, before any
 * outcome: such a peer is "open" without having authenticated. */
static bool opened_unauthenticated(mqd_conn_t *c)
{
    return !mqd_srv_conf(mqd_conn_srv(c))->allow_anonymous &&
           !pn_transport_is_authenticated(mqd_conn_driver(c)->transport);
}

bool mqd_auth_conn_opened(mqd_conn_t *c)
{
    if (mqd_conn_closed(c) || !opened_unauthenticated(c))
        return true;
    MQD_NOTICE("auth", "peer=%s sent AMQP open before completing SASL: closing", mqd_conn_peer(c));
    mqd_auth_conn_abort(c, "amqp:unauthorized-access", "open before SASL completed");
    return false;
}

static void on_handshake_timeout(evutil_socket_t fd, short what, void *arg)
{
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
    mqd_auth_conn_t *ac = arg;
    mqd_conn_t *c = ac->c;
    if (mqd_conn_closed(c))
        return;
    if (!(pn_connection_state(mqd_conn_driver(c)->connection) & PN_REMOTE_UNINIT)) {
        /* opened: the handshake is over, unless the open skipped SASL (the backstop
         * for mqd_auth_conn_opened) */
        mqd_auth_conn_opened(c);
        return;
    }
    const mqd_conf_t *conf = mqd_srv_conf(mqd_conn_srv(c));
    MQD_NOTICE_RL("auth", "handshake timeout peer=%s (no AMQP open within %ums)", mqd_conn_peer(c),
                  ac->tls ? conf->tls_handshake_timeout_ms : conf->handshake_timeout_ms);
    mqd_auth_conn_abort(c, "amqp:resource-limit-exceeded", "handshake timeout");
}

int mqd_auth_conn_setup(mqd_conn_t *c, size_t listener)
{
    mqd_server_t *s = mqd_conn_srv(c);
    const mqd_conf_t *conf = mqd_srv_conf(s);
    mqd_auth_t *a = mqd_srv_auth(s);
    mqd_auth_conn_t *ac = calloc(1, sizeof *ac);
    if (ac == NULL)
        return MQD_ENOMEM;
    ac->c = c;
    ac->tls = listener < conf->n_listen && mqd_conf_listen_is_tls(conf->listen[listener]);
    mqd_conn_set_auth(c, ac);
    /* from here on the transport owns ac: its SASL free callback frees it */
    mqd_auth_sasl_setup(c, ac);
    if (ac->tls) {
        /* the SSL takes a reference on the listener's current context */
        SSL *ssl = a && a->ctx ? SSL_new(a->ctx) : NULL;
        mqd_conn_set_ssl(c, ssl);
        if (ssl == NULL || SSL_set_fd(ssl, mqd_conn_fd(c)) != 1) {
            MQD_ERR("auth", "TLS setup failed peer=%s", mqd_conn_peer(c));
            ERR_clear_error();
            return MQD_EIO;
        }
        SSL_set_accept_state(ssl);
    }
    uint32_t ms = ac->tls ? conf->tls_handshake_timeout_ms : conf->handshake_timeout_ms;
    ac->ev_hs = evtimer_new(mqd_srv_base(s), on_handshake_timeout, ac);
    if (ac->ev_hs == NULL)
        return MQD_ENOMEM;
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(ac->ev_hs, &tv);
    return 0;
}

void mqd_auth_conn_free(mqd_auth_conn_t *ac)
{
    if (ac->ev_hs)
        event_free(ac->ev_hs);
    if (ac->ev_close)
        event_free(ac->ev_close);
    free(ac->held);
    if (ac->scram) {
        mqd_scram_clear(ac->scram);
        free(ac->scram);
    }
    mqd_auth_cbs_free(ac);
    if (ac->c && mqd_conn_auth(ac->c) == ac)
        mqd_conn_set_auth(ac->c, NULL);
    free(ac);
}

bool mqd_auth_tls_peer_verified(const mqd_conn_t *c)
{
    SSL *ssl = mqd_conn_ssl(c);
    if (ssl == NULL || !SSL_is_init_finished(ssl) || SSL_get_verify_result(ssl) != X509_V_OK)
        return false;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    return SSL_get0_peer_certificate(ssl) != NULL;
#else
    X509 *cert = SSL_get_peer_certificate(ssl);
    X509_free(cert);
    return cert != NULL;
#endif
}

int mqd_auth_tls_peer_cn(const mqd_conn_t *c, char *cn, size_t len)
{
    if (!mqd_auth_tls_peer_verified(c))
        return MQD_ENOENT;
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    const X509 *cert = SSL_get0_peer_certificate(mqd_conn_ssl(c));
#else
    X509 *cert = SSL_get_peer_certificate(mqd_conn_ssl(c));
    X509_free(cert); /* the session keeps its own reference */
#endif
    return mqd_auth_cert_cn(cert, cn, len);
}

int mqd_auth_cert_cn(const X509 *cert, char *cn, size_t len)
{
    if (cert == NULL)
        return MQD_ENOENT;
    /* the first CN, as Proton's pn_ssl_get_remote_subject_subfield took it */
    const X509_NAME *subj = X509_get_subject_name(cert);
    int i = X509_NAME_get_index_by_NID(subj, NID_commonName, -1);
    const X509_NAME_ENTRY *e = i >= 0 ? X509_NAME_get_entry(subj, i) : NULL;
    unsigned char *utf8 = NULL;
    int n = e ? ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(e)) : -1;
    int rc = MQD_EINVAL;
    if (n >= 0 && (size_t)n < len && memchr(utf8, '\0', (size_t)n) == NULL) {
        memcpy(cn, utf8, (size_t)n);
        cn[n] = '\0';
        rc = 0;
    }
    OPENSSL_free(utf8);
    ERR_clear_error();
    return rc;
}

size_t mqd_auth_user_conns(mqd_server_t *s, const mqd_conn_t *self, const char *user)
{
    size_t n = 0;
    mqd_dlist_t *conns = mqd_srv_conns(s);
    for (mqd_dlist_t *p = conns->next; p != conns; p = p->next) {
        const mqd_conn_t *o = mqd_conn_of_node(p);
        if (o != self && !mqd_conn_closed(o) && !mqd_auth_conn_is_node(o) &&
            strcmp(mqd_conn_user(o), user) == 0)
            n++;
    }
    return n;
}

/* Why c's login cannot have any right at all, or NULL; *user and *groups are what the
 * [acl] rules match (NULL: anonymous, no groups). */
static const char *login_denied(mqd_conn_t *c, const char **user, const char **groups)
{
    const mqd_conf_t *conf = mqd_srv_conf(mqd_conn_srv(c));
    mqd_auth_conn_t *ac = mqd_conn_auth(c);
    const char *name = mqd_conn_user(c);
    bool anonymous = name[0] == '\0' || (ac && ac->anonymous);
    const mqd_user_conf_t *u = NULL;
    if (ac && ac->node) /* its name is the node's, whatever [user] has that name */
        return "a node connection: $repl/ fetch links only";
    if (name[0] == '\0' && !conf->allow_anonymous)
        return "not authenticated";
    if (!anonymous && !pn_transport_is_authenticated(mqd_conn_driver(c)->transport))
        return "not authenticated";
    if (!anonymous && (u = mqd_conf_user(conf, name)) == NULL)
        return "user no longer configured";
    *user = anonymous ? NULL : name;
    *groups = u ? u->groups : NULL;
    return NULL;
}

const char *mqd_auth_principal(mqd_conn_t *c)
{
    const char *user = NULL, *groups;
    return login_denied(c, &user, &groups) == NULL && user ? user : "";
}

/* Why c may not do perm on address, or NULL. */
static const char *denied(mqd_conn_t *c, mqd_perm_t perm, const char *address)
{
    const mqd_conf_t *conf = mqd_srv_conf(mqd_conn_srv(c));
    const char *user, *groups, *why = login_denied(c, &user, &groups);
    if (why)
        return why;
    if (!mqd_acl_check(conf->acl, conf->n_acl, conf->acl_present, user, groups, perm, address))
        return "ACL";
    return mqd_auth_sas_denied(c, perm, address); /* both must allow (docs/security.md) */
}

bool mqd_auth_may_anywhere(mqd_conn_t *c, mqd_perm_t perm)
{
    const mqd_conf_t *conf = mqd_srv_conf(mqd_conn_srv(c));
    const char *user, *groups;
    return login_denied(c, &user, &groups) == NULL &&
           mqd_acl_grants_any(conf->acl, conf->n_acl, conf->acl_present, user, groups, perm) &&
           mqd_auth_sas_denied_anywhere(c, perm) == NULL;
}

bool mqd_auth_may(mqd_conn_t *c, mqd_perm_t perm, const char *address)
{
    return denied(c, perm, address) == NULL;
}

bool mqd_auth_allowed(mqd_conn_t *c, mqd_perm_t perm, const char *address)
{
    const char *why = denied(c, perm, address);
    if (why == NULL)
        return true;
    const char *user = mqd_conn_user(c);
    MQD_NOTICE_RL("auth", "denied peer=%s user=%s %s %s: %s", mqd_conn_peer(c),
                  user[0] ? user : "-", perm_name(perm), address ? address : "-", why);
    return false;
}
