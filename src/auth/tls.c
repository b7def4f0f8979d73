/* The auth subsystem's server side: TLS domains for amqps:// listeners (Proton's SSL
 * layer over OpenSSL), per-connection setup (TLS, SASL, handshake timer), connection
 * limits, SIGHUP reload of certificates and ACLs, and the permission check. */
#include "config.h"
#include "auth/auth_int.h"
#include "server/broker.h"

#include <event2/event.h>
#include <proton/ssl.h>
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

/* A server TLS domain from conf; *out = NULL when no certificate is configured. */
static int domain_build(const mqd_conf_t *conf, pn_ssl_domain_t **out)
{
    *out = NULL;
    if (conf->tls_cert == NULL)
        return 0;
    pn_ssl_domain_t *d = pn_ssl_domain(PN_SSL_MODE_SERVER);
    if (d == NULL) {
        MQD_ERR("auth", "TLS: this Proton library has no SSL support");
        return MQD_EIO;
    }
    const char *what = "tls_cert/tls_key";
    int rc = pn_ssl_domain_set_credentials(d, conf->tls_cert, conf->tls_key, NULL);
    if (rc == 0) {
        what = "tls_min_version";
        rc = pn_ssl_domain_set_protocols(d, conf->tls_min_version ? "TLSv1.3" : "TLSv1.2 TLSv1.3");
    }
    if (rc == 0 && conf->tls_ciphers) {
        what = "tls_ciphers";
        rc = pn_ssl_domain_set_ciphers(d, conf->tls_ciphers);
    }
    if (rc == 0 && conf->tls_ca) {
        what = "tls_ca";
        rc = pn_ssl_domain_set_trusted_ca_db(d, conf->tls_ca);
    }
    if (rc == 0) {
        what = "tls_verify_client";
        /* with a CA set, that CA alone is trusted: Proton's domain starts without the
         * system store, and we never add it */
        rc = conf->tls_verify_client == MQD_TLS_VERIFY_REQUIRED
                 ? pn_ssl_domain_set_peer_authentication(d, PN_SSL_VERIFY_PEER, conf->tls_ca)
                 : pn_ssl_domain_set_peer_authentication(d, PN_SSL_ANONYMOUS_PEER, NULL);
    }
    if (rc != 0) {
        MQD_ERR("auth", "TLS: %s rejected (cert %s, key %s, ca %s)", what, conf->tls_cert,
                conf->tls_key ? conf->tls_key : "-", conf->tls_ca ? conf->tls_ca : "-");
        pn_ssl_domain_free(d);
        return MQD_EINVAL;
    }
    *out = d;
    return 0;
}

int mqd_auth_init(mqd_server_t *s)
{
    mqd_auth_t *a = calloc(1, sizeof *a);
    if (a == NULL)
        return MQD_ENOMEM;
    int rc = domain_build(s->conf, &a->domain);
    if (rc != 0) {
        free(a);
        return rc;
    }
    s->auth = a;
    if (s->conf->acl_present)
        MQD_INFO("auth", "%zu ACL rules", s->conf->n_acl);
    return 0;
}

/* Moves the reloadable security settings of nc into the running config (nc gets the
 * old ones and frees them). */
static void take_settings(mqd_conf_t *cur, mqd_conf_t *nc)
{
#define SWAP(f)                                                                                    \
    do {                                                                                           \
        __typeof__(cur->f) tmp_ = cur->f;                                                          \
        cur->f = nc->f;                                                                            \
        nc->f = tmp_;                                                                              \
    } while (0)
    SWAP(tls_cert);
    SWAP(tls_key);
    SWAP(tls_ca);
    SWAP(tls_ciphers);
    SWAP(tls_min_version);
    SWAP(tls_verify_client);
    SWAP(allow_plain_without_tls);
    SWAP(max_connections_per_user);
    SWAP(max_connections_per_ip);
    SWAP(handshake_timeout_ms);
    SWAP(tls_handshake_timeout_ms);
    SWAP(acl);
    SWAP(n_acl);
    SWAP(acl_present);
#undef SWAP
}

int mqd_auth_reload(mqd_server_t *s)
{
    mqd_auth_t *a = s->auth;
    mqd_conf_t *nc = NULL;
    pn_ssl_domain_t *d = NULL;
    char err[512];
    int rc = 0;
    if (a == NULL)
        return MQD_ESTATE;
    if (s->conf_path) {
        /* server.c has swapped in the users; the rest of ours comes from a fresh load */
        if ((rc = mqd_conf_new(&nc)) != 0)
            goto out;
        rc = mqd_conf_load_file(nc, s->conf_path, err, sizeof err);
        if (rc == 0)
            rc = mqd_conf_validate(nc, err, sizeof err);
        if (rc != 0) {
            MQD_ERR("auth", "reload: keeping certificates and ACLs: %s", err);
            goto out;
        }
    }
    /* certificate files may have been replaced in place: always build a new domain */
    if ((rc = domain_build(nc ? nc : s->conf, &d)) != 0) {
        MQD_ERR("auth", "reload: keeping the running TLS certificates and ACLs");
        goto out;
    }
    if (a->domain)
        pn_ssl_domain_free(a->domain); /* connections using it hold their own reference */
    a->domain = d;
    if (nc)
        take_settings(s->conf, nc);
    MQD_NOTICE("auth", "reloaded: TLS %s, %zu ACL rules%s", d ? "on" : "off", s->conf->n_acl,
               s->conf->acl_present ? "" : " (no [acl]: all allowed)");
out:
    mqd_conf_free(nc);
    return rc;
}

void mqd_auth_free(mqd_server_t *s)
{
    mqd_auth_t *a = s->auth;
    if (a == NULL)
        return;
    if (a->domain)
        pn_ssl_domain_free(a->domain);
    free(a);
    s->auth = NULL;
}

/* ---- per connection ---- */

static void conn_abort(mqd_conn_t *c, const char *name, const char *why)
{
    pn_condition_t *cond = pn_transport_condition(c->driver.transport);
    pn_condition_set_name(cond, name);
    pn_condition_set_description(cond, why);
    pn_connection_driver_close(&c->driver);
    mqd_conn_mark_dirty(c);
}

/* Proton 0.37 dispatches an AMQP open that arrives inside the SASL layer, before any
 * outcome: such a peer is "open" without having authenticated. */
static bool opened_unauthenticated(const mqd_conn_t *c)
{
    return !c->srv->conf->allow_anonymous && !pn_transport_is_authenticated(c->driver.transport);
}

bool mqd_auth_conn_opened(mqd_conn_t *c)
{
    if (c->closed || !opened_unauthenticated(c))
        return true;
    MQD_NOTICE("auth", "peer=%s sent AMQP open before completing SASL: closing", c->peer);
    conn_abort(c, "amqp:unauthorized-access", "open before SASL completed");
    return false;
}

static void on_handshake_timeout(evutil_socket_t fd, short what, void *arg)
{
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
    mqd_auth_conn_t *ac = arg;
    mqd_conn_t *c = ac->c;
    if (c->closed)
        return;
    if (!(pn_connection_state(c->driver.connection) & PN_REMOTE_UNINIT)) {
        /* opened: the handshake is over, unless the open skipped SASL (the backstop
         * for mqd_auth_conn_opened) */
        mqd_auth_conn_opened(c);
        return;
    }
    MQD_NOTICE("auth", "handshake timeout peer=%s (no AMQP open within %ums)", c->peer,
               ac->tls ? c->srv->conf->tls_handshake_timeout_ms
                       : c->srv->conf->handshake_timeout_ms);
    conn_abort(c, "amqp:resource-limit-exceeded", "handshake timeout");
}

int mqd_auth_conn_setup(mqd_conn_t *c, size_t listener)
{
    const mqd_conf_t *conf = c->srv->conf;
    mqd_auth_t *a = c->srv->auth;
    mqd_auth_conn_t *ac = calloc(1, sizeof *ac);
    if (ac == NULL)
        return MQD_ENOMEM;
    ac->c = c;
    ac->tls = listener < conf->n_listen && mqd_conf_listen_is_tls(conf->listen[listener]);
    c->auth = ac;
    /* from here on the transport owns ac: its SASL free callback frees it */
    mqd_auth_sasl_setup(c, ac);
    if (ac->tls) {
        if (a == NULL || a->domain == NULL ||
            pn_ssl_init(pn_ssl(c->driver.transport), a->domain, NULL) != 0) {
            MQD_ERR("auth", "TLS setup failed peer=%s", c->peer);
            return MQD_EIO;
        }
    }
    uint32_t ms = ac->tls ? conf->tls_handshake_timeout_ms : conf->handshake_timeout_ms;
    ac->ev_hs = evtimer_new(c->srv->base, on_handshake_timeout, ac);
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
    if (ac->scram) {
        mqd_scram_clear(ac->scram);
        free(ac->scram);
    }
    if (ac->c && ac->c->auth == ac)
        ac->c->auth = NULL;
    free(ac);
}

size_t mqd_auth_user_conns(mqd_server_t *s, const mqd_conn_t *self, const char *user)
{
    size_t n = 0;
    for (mqd_dlist_t *p = s->conns.next; p != &s->conns; p = p->next) {
        const mqd_conn_t *o = MQD_CONTAINER(p, mqd_conn_t, node);
        if (o != self && !o->closed && strcmp(o->user, user) == 0)
            n++;
    }
    return n;
}

bool mqd_auth_admit_host(mqd_server_t *s, const char *host)
{
    uint32_t max = s->conf->max_connections_per_ip;
    if (max == 0)
        return true;
    size_t hl = strlen(host), n = 0;
    for (mqd_dlist_t *p = s->conns.next; p != &s->conns; p = p->next) {
        const mqd_conn_t *o = MQD_CONTAINER(p, mqd_conn_t, node);
        /* peer is "HOST:PORT" */
        if (!o->closed && strncmp(o->peer, host, hl) == 0 && o->peer[hl] == ':')
            n++;
    }
    if (n < max)
        return true;
    MQD_WARN("conn", "refused %s: max_connections_per_ip (%u) reached", host, max);
    return false;
}

bool mqd_auth_allowed(mqd_conn_t *c, mqd_perm_t perm, const char *address)
{
    const mqd_conf_t *conf = c->srv->conf;
    mqd_auth_conn_t *ac = c->auth;
    const char *why = NULL;
    bool anonymous = c->user[0] == '\0' || (ac && ac->anonymous);
    const mqd_user_conf_t *u = NULL;
    if (c->user[0] == '\0' && !conf->allow_anonymous)
        why = "not authenticated";
    else if (!anonymous && !pn_transport_is_authenticated(c->driver.transport))
        why = "not authenticated";
    else if (!anonymous && (u = mqd_conf_user(conf, c->user)) == NULL)
        why = "user no longer configured";
    else if (!mqd_acl_check(conf->acl, conf->n_acl, conf->acl_present, anonymous ? NULL : c->user,
                            u ? u->groups : NULL, perm, address))
        why = "ACL";
    if (why == NULL)
        return true;
    MQD_NOTICE("auth", "denied peer=%s user=%s %s %s: %s", c->peer,
               c->user[0] ? c->user : "-", perm_name(perm), address ? address : "-", why);
    return false;
}
