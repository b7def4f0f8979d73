/* Console login with SCRAM-SHA-256 (RFC 5802, 7677) over two requests: the browser
 * derives the proof with Web Crypto, so the password never crosses the network and no
 * TLS is needed, as for SASL SCRAM on AMQP. The exchange between the two requests is
 * held under a random id for at most XCHG_MS, in one of MQD_CONSOLE_SCRAMS slots; one
 * client address holds at most auth_queue_per_ip of them (issue 32 point 7b: one client
 * with no credentials starting exchanges it never finished held all 64 and locked every
 * admin out). */
#include "config.h"
#include "auth/auth.h"
#include "console/console_int.h"
#include "core/core.h"

#include <event2/http.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

#define XCHG_MS 30000

static void xchg_end(mqd_console_xchg_t *x)
{
    mqd_auth_scram_free(x->st);
    OPENSSL_cleanse(x, sizeof *x);
    x->used = false;
}

/* A free slot for an exchange from host (expired ones are freed on the way), or NULL
 * and *why when all are in use, or host holds auth_queue_per_ip of them. */
static mqd_console_xchg_t *xchg_slot(mqd_console_t *k, const char *host, const char **why)
{
    uint64_t now = mqd_console_now_ms();
    uint32_t per_ip = mqd_srv_conf(k->srv)->auth_queue_per_ip, same = 0;
    mqd_console_xchg_t *free_one = NULL;
    for (size_t i = 0; i < MQD_CONSOLE_SCRAMS; i++) {
        mqd_console_xchg_t *x = &k->xchg[i];
        if (x->used && now - x->started_ms > XCHG_MS)
            xchg_end(x);
        if (!x->used && !free_one)
            free_one = x;
        same += x->used && strcmp(x->host, host) == 0;
    }
    *why = same >= per_ip ? "auth_queue_per_ip reached: too many logins from this address at once"
           : !free_one    ? "too many logins at once"
                          : NULL;
    return *why ? NULL : free_one;
}

static mqd_console_xchg_t *xchg_find(mqd_console_t *k, const char *id)
{
    if (!id || !mqd_console_token_ok(id))
        return NULL;
    uint64_t now = mqd_console_now_ms();
    for (size_t i = 0; i < MQD_CONSOLE_SCRAMS; i++) {
        mqd_console_xchg_t *x = &k->xchg[i];
        if (!x->used || CRYPTO_memcmp(x->id, id, MQD_CONSOLE_TOKEN_HEX) != 0)
            continue;
        if (now - x->started_ms > XCHG_MS) {
            xchg_end(x);
            return NULL;
        }
        return x;
    }
    return NULL;
}

static void first(mqd_console_t *k, struct evhttp_request *req, const char *msg)
{
    char out[MQD_AUTH_SCRAM_MAX + 1];
    char *host = NULL;
    ev_uint16_t port = 0;
    const char *why = NULL;
    evhttp_connection_get_peer(evhttp_request_get_connection(req), &host, &port);
    mqd_console_xchg_t *x = xchg_slot(k, host ? host : "", &why);
    if (!x) {
        if (mqd_console_quiet_due(&k->q_scram)) {
            MQD_NOTICE("console",
                       "SCRAM login refused peer=%s: %s (%llu refused since the last "
                       "report)",
                       host ? host : "?", why, (unsigned long long)k->q_scram.n);
            k->q_scram.n = 0;
        }
        return mqd_console_reply_error(req, 503, why);
    }
    int rc = mqd_auth_scram_start(k->srv, msg, strlen(msg), out, &x->st);
    if (rc != 0)
        return mqd_console_reply_error(req, 400, "malformed SCRAM client-first-message");
    if (mqd_console_random_hex(x->id) != 0) {
        xchg_end(x);
        return mqd_console_reply_error(req, 500, "no random bytes");
    }
    x->used = true;
    x->started_ms = mqd_console_now_ms();
    snprintf(x->host, sizeof x->host, "%s", host ? host : "");
    mqd_console_reply_json(req, 200,
                           json_pack("{s:s, s:s}", "exchange", x->id, "server_first", out));
}

static void final(mqd_console_t *k, struct evhttp_request *req, const char *id, const char *msg)
{
    char out[MQD_AUTH_SCRAM_MAX + 1], user[256];
    mqd_console_xchg_t *x = xchg_find(k, id);
    if (!x)
        return mqd_console_reply_error(req, 401, "no such SCRAM exchange (expired?)");
    int rc = mqd_auth_scram_finish(k->srv, x->st, msg, strlen(msg), out, user, sizeof user);
    xchg_end(x); /* one try per exchange */
    if (rc == MQD_EINVAL)
        return mqd_console_reply_error(req, 400, "malformed SCRAM client-final-message");
    if (rc != 0) {
        MQD_NOTICE("console", "SCRAM login refused: wrong proof or unknown user");
        mqd_srv_count_login_failure(k->srv, "SCRAM-SHA-256");
        return mqd_console_reply_error(req, 401, "wrong user or password");
    }
    mqd_console_login_ok(k, req, user, "SCRAM-SHA-256", json_pack("{s:s}", "server_final", out));
}

void mqd_console_login_scram(mqd_console_t *k, struct evhttp_request *req)
{
    json_t *body = mqd_console_body_json(req, false);
    const char *cf = json_string_value(json_object_get(body, "client_first"));
    const char *fin = json_string_value(json_object_get(body, "client_final"));
    const char *id = json_string_value(json_object_get(body, "exchange"));
    if (cf && !fin && !id)
        first(k, req, cf);
    else if (fin && id && !cf)
        final(k, req, id, fin);
    else
        mqd_console_reply_error(req, 400,
                                "expected {\"client_first\"} or {\"exchange\", \"client_final\"}");
    json_decref(body);
}

void mqd_console_scram_drop(mqd_console_t *k)
{
    for (size_t i = 0; i < MQD_CONSOLE_SCRAMS; i++)
        if (k->xchg[i].used)
            xchg_end(&k->xchg[i]);
}
