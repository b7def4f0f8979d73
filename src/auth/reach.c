/* At start and reload: says which users cannot log in on any listener as configured.
 * The installed mqd.conf has allow_plain_without_tls = off, so a user with only a PLAIN
 * password_hash cannot log in on its plain-TCP listener, and before this check the only
 * trace was a client-side "Authentication failed" and a framing-error in our log. */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core.h"

#include <string.h>

void mqd_auth_warn_unreachable(const mqd_server_t *s)
{
    const mqd_conf_t *c = mqd_srv_conf(s);
    const char *tcp = NULL, *tls = NULL;
    for (size_t i = 0; i < c->n_listen; i++) {
        if (mqd_conf_listen_is_tls(c->listen[i]))
            tls = tls ? tls : c->listen[i];
        else
            tcp = tcp ? tcp : c->listen[i];
    }
    bool certs = tls && c->tls_verify_client != MQD_TLS_VERIFY_NONE;
    if (c->n_users == 0 && !c->allow_anonymous && !certs)
        MQD_WARN("auth", "no client can log in: no [user] sections and allow_anonymous = off "
                         "(`mqd-passwd USER >> mqd.conf` adds a user)");
    for (size_t i = 0; i < c->n_users; i++) {
        const mqd_user_conf_t *u = &c->users[i];
        bool scram = u->scram_sha256 != NULL, plain = u->password_hash != NULL;
        bool on_tcp = scram || (plain && c->allow_plain_without_tls);
        bool on_tls = scram || plain || certs;
        if (tcp && !on_tcp && !(tls && on_tls))
            MQD_WARN("auth",
                     "user %s cannot log in: the plain-TCP listener %s offers "
                     "SCRAM-SHA-256 only (allow_plain_without_tls = off) and the user has %s, no "
                     "scram_sha256; `mqd-passwd --both %s` makes both",
                     u->name, tcp, plain ? "only password_hash (SASL PLAIN)" : "no password",
                     u->name);
        else if (tcp && !on_tcp)
            MQD_WARN("auth",
                     "user %s can log in only over TLS (%s): plain-TCP %s offers "
                     "SCRAM-SHA-256 only (allow_plain_without_tls = off) and the user has no "
                     "scram_sha256; `mqd-passwd --both %s` makes both",
                     u->name, tls, tcp, u->name);
        else if (!tcp && tls && !on_tls)
            MQD_WARN("auth",
                     "user %s cannot log in: no password_hash, scram_sha256 or client "
                     "certificate",
                     u->name);
    }
}
