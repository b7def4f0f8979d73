/* Console login: the broker's users and PBKDF2 password hashes, checked on the SASL
 * login pool (mqd_auth_password_check), so a login costs and behaves as a SASL PLAIN one
 * does, and is allowed where PLAIN is: the console is plain HTTP, so only with
 * allow_plain_without_tls = on. The user needs `monitor` or `manage` on $management. */
#include "config.h"
#include "auth/auth.h"
#include "console/console_int.h"
#include "core/core.h"

#include <event2/http.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mqd_console_login {
    mqd_console_login_t *next;
    mqd_console_t *k;                /* NULL once the console stopped */
    struct evhttp_request *req;      /* NULL once its connection closed */
    struct evhttp_connection *evcon; /* its connection (compared only, never used after close) */
    mqd_console_conn_t *kc;          /* its record (conn.c); NULL once the connection closed */
    char host[48];                   /* the client's address, for auth_queue_per_ip */
    char user[256];
    char peer[64];
};

static void unlink_login(mqd_console_login_t *l)
{
    if (!l->k)
        return;
    for (mqd_console_login_t **pp = &l->k->logins; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
}

void mqd_console_login_conn_gone(mqd_console_login_t *l)
{
    l->req = NULL;
    l->evcon = NULL;
    l->kc = NULL;
}

/* Why a new login from evcon/host must wait, or NULL: one at a time per connection (the
 * close callback names one login), auth_queue_per_ip per address, as for SASL PLAIN. */
static const char *busy(mqd_console_t *k, struct evhttp_connection *evcon, const char *host)
{
    uint32_t same_host = 0;
    for (mqd_console_login_t *l = k->logins; l; l = l->next) {
        if (l->evcon == evcon)
            return "a login is already under way on this connection";
        same_host += strcmp(l->host, host) == 0;
    }
    return same_host >= mqd_srv_conf(k->srv)->auth_queue_per_ip ? "auth_queue_per_ip reached"
                                                                : NULL;
}

static json_t *session_json(mqd_console_t *k, const mqd_console_sess_t *ss)
{
    bool manage = mqd_auth_user_may(k->srv, ss->user, MQD_PERM_MANAGE, "$management");
    bool monitor = manage || mqd_auth_user_may(k->srv, ss->user, MQD_PERM_MONITOR, "$management");
    return json_pack("{s:s, s:s, s:b, s:b}", "user", ss->user, "csrf", ss->csrf, "monitor", monitor,
                     "manage", manage);
}

void mqd_console_login_ok(mqd_console_t *k, struct evhttp_request *req, const char *user,
                          const char *mechanism, json_t *extra)
{
    mqd_server_t *s = k->srv;
    char peer[64];
    char *host = NULL;
    ev_uint16_t port = 0;
    evhttp_connection_get_peer(evhttp_request_get_connection(req), &host, &port);
    snprintf(peer, sizeof peer, "%s:%u", host ? host : "?", port);
    if (!mqd_auth_user_may(s, user, MQD_PERM_MONITOR, "$management") &&
        !mqd_auth_user_may(s, user, MQD_PERM_MANAGE, "$management")) {
        MQD_NOTICE("console", "login refused peer=%s user=%s: no monitor or manage right", peer,
                   user);
        json_decref(extra);
        return mqd_console_reply_error(req, 403,
                                       "the [acl] gives this user neither monitor nor manage");
    }
    mqd_console_sess_t *ss = mqd_console_sess_new(k, user);
    if (!ss) {
        json_decref(extra);
        return mqd_console_reply_error(req, 500, "no random bytes for a session");
    }
    MQD_INFO("console", "login peer=%s user=%s mech=%s", peer, user, mechanism);
    json_t *out = session_json(k, ss);
    json_object_set_new(out, "mechanism", json_string(mechanism));
    if (extra)
        json_object_update(out, extra);
    json_decref(extra);
    mqd_console_set_cookie(req, ss);
    mqd_console_reply_json(req, 200, out);
}

static void on_checked(void *arg, int rc)
{
    mqd_console_login_t *l = arg;
    struct evhttp_request *req = l->req;
    mqd_console_t *k = l->k;
    unlink_login(l);
    if (l->kc)
        mqd_console_conn_set_login(l->kc, NULL);
    if (!req || !k)
        goto out;
    if (rc != 0) {
        MQD_NOTICE("console", "login refused peer=%s user=%s: %s", l->peer, l->user,
                   rc == MQD_EFAILED ? "wrong password or unknown user" : mqd_strerror(rc));
        if (rc == MQD_EFAILED)
            mqd_srv_count_login_failure(k->srv, "PLAIN");
        mqd_console_reply_error(req, rc == MQD_EFAILED ? 401 : 503,
                                rc == MQD_EFAILED ? "wrong user or password" : "try again");
        goto out;
    }
    mqd_console_login_ok(k, req, l->user, "PASSWORD", NULL);
out:
    free(l);
}

void mqd_console_login(mqd_console_t *k, struct evhttp_request *req)
{
    json_t *body = mqd_console_body_json(req, true);
    const char *user = json_string_value(json_object_get(body, "user"));
    const char *pw = json_string_value(json_object_get(body, "password"));
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    mqd_console_login_t *l = NULL;
    char *host = NULL;
    ev_uint16_t port = 0;
    if (!user || !pw || !*user || strlen(user) > 255 || strlen(pw) > 1024) {
        mqd_console_reply_error(req, 400, "expected a JSON object {\"user\", \"password\"}");
        goto out;
    }
    if (!mqd_srv_conf(k->srv)->allow_plain_without_tls) {
        mqd_console_reply_error(req, 403,
                                "a password over plain HTTP needs "
                                "allow_plain_without_tls = on (docs/console.md)");
        goto out;
    }
    evhttp_connection_get_peer(evcon, &host, &port);
    const char *why = busy(k, evcon, host ? host : "");
    mqd_console_conn_t *kc = mqd_console_conn_of(k, req);
    if (why || !kc) { /* no record: one the console could not track (out of memory) */
        mqd_console_reply_error(req, 503, why ? why : "try again");
        goto out;
    }
    if (!(l = calloc(1, sizeof *l))) {
        mqd_console_reply_error(req, 500, "out of memory");
        goto out;
    }
    snprintf(l->peer, sizeof l->peer, "%s:%u", host ? host : "?", port);
    snprintf(l->host, sizeof l->host, "%s", host ? host : "");
    l->evcon = evcon;
    snprintf(l->user, sizeof l->user, "%s", user);
    l->k = k;
    l->req = req;
    int rc = mqd_auth_password_check(k->srv, user, pw, host ? host : "", on_checked, l);
    if (rc != 0) {
        free(l);
        mqd_console_reply_error(req, rc == MQD_EAGAIN ? 503 : 400,
                                rc == MQD_EAGAIN ? "too many logins at once" : "bad login");
        goto out;
    }
    l->next = k->logins;
    k->logins = l;
    l->kc = kc;
    mqd_console_conn_set_login(kc, l); /* its close tells l (conn.c) */
out:
    if (pw)
        OPENSSL_cleanse((char *)pw, strlen(pw));
    json_decref(body);
}

void mqd_console_logout(mqd_console_t *k, struct evhttp_request *req, mqd_console_sess_t *ss)
{
    MQD_UNUSED(k);
    MQD_INFO("console", "logout user=%s", ss->user);
    mqd_console_sess_end(ss);
    mqd_console_set_cookie(req, NULL);
    mqd_console_reply_json(req, 200, json_pack("{s:b}", "logged_out", 1));
}

void mqd_console_session_info(mqd_console_t *k, struct evhttp_request *req, mqd_console_sess_t *ss)
{
    mqd_console_reply_json(req, 200, session_json(k, ss));
}

void mqd_console_logins_drop(mqd_console_t *k)
{
    for (mqd_console_login_t *l = k->logins; l; l = l->next) {
        l->k = NULL;
        l->req = NULL;
        l->evcon = NULL;
        l->kc = NULL;
    }
    k->logins = NULL;
}
