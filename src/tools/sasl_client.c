/* mqctl's SASL client, a Proton SASL plugin (proton/sasl_plugin.h). Debian's Proton has
 * no Cyrus SASL, so its own client speaks only PLAIN, ANONYMOUS and EXTERNAL, and the
 * installed mqd.conf (allow_plain_without_tls = off) offers SCRAM-SHA-256 alone on
 * plain TCP. A plugin rather than our own exchange before handing the socket over:
 * Proton keeps doing the SASL framing, the layering under TLS and the proactor I/O, and
 * we only choose the mechanism and compute the messages. Preference: SCRAM-SHA-256, then
 * PLAIN (over TLS, or where the operator's URL put a password on plain TCP), with a
 * user; ANONYMOUS without one. */
#include "config.h"
#include "mqd.h"
#include "tools/scram_client.h"

#include <openssl/crypto.h>
#include <proton/sasl.h>
#include <proton/sasl_plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool offered(const char *mechs, const char *m)
{
    size_t n = strlen(m);
    for (const char *p = strstr(mechs, m); p; p = strstr(p + 1, m))
        if ((p == mechs || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' '))
            return true;
    return false;
}

static void c_free(pn_transport_t *t) { MQD_UNUSED(t); } /* the caller owns the state */

static const char *c_list(pn_transport_t *t)
{
    MQD_UNUSED(t);
    return "SCRAM-SHA-256 PLAIN ANONYMOUS";
}

static bool c_init_server(pn_transport_t *t)
{
    MQD_UNUSED(t);
    return false;
}

static bool c_init_client(pn_transport_t *t)
{
    MQD_UNUSED(t);
    return true;
}

static void c_nothing(pn_transport_t *t) { MQD_UNUSED(t); }

static void c_server_only(pn_transport_t *t, const char *mech, const pn_bytes_t *recv)
{
    MQD_UNUSED(mech);
    MQD_UNUSED(recv);
    pnx_sasl_error(t, "not a SASL server", "amqp:internal-error");
}

static void c_server_resp(pn_transport_t *t, const pn_bytes_t *recv)
{
    c_server_only(t, NULL, recv);
}

static void send_init(pn_transport_t *t, mqd_sasl_client_t *sc, const char *mech, pn_bytes_t b)
{
    sc->mech = mech;
    pnx_sasl_set_selected_mechanism(t, mech);
    pnx_sasl_set_bytes_out(t, b);
    pnx_sasl_set_desired_state(t, SASL_POSTED_INIT);
}

static bool plain_init(pn_transport_t *t, mqd_sasl_client_t *sc, const char *user, const char *pw)
{
    size_t ul = strlen(user), pl = strlen(pw);
    sc->plain_len = ul + pl + 2;
    sc->plain = malloc(sc->plain_len);
    if (!sc->plain)
        return false;
    sc->plain[0] = '\0'; /* no authzid */
    memcpy(sc->plain + 1, user, ul + 1);
    memcpy(sc->plain + ul + 2, pw, pl);
    pnx_sasl_clear_password(t);
    send_init(t, sc, "PLAIN", pn_bytes(sc->plain_len, sc->plain));
    return true;
}

static bool c_mechanisms(pn_transport_t *t, const char *mechs)
{
    mqd_sasl_client_t *sc = pnx_sasl_get_context(t);
    const char *user = pnx_sasl_get_username(t), *pw = pnx_sasl_get_password(t);
    bool creds = user && *user && pw && *pw;
    snprintf(sc->offered, sizeof sc->offered, "%s", mechs && *mechs ? mechs : "(none)");
    if (creds && offered(mechs, "SCRAM-SHA-256")) {
        if (mqd_scramc_first(&sc->scram, user, NULL) != 0) {
            snprintf(sc->error, sizeof sc->error, "cannot start SCRAM-SHA-256 for user '%s'", user);
            return false;
        }
        send_init(t, sc, "SCRAM-SHA-256", pn_bytes(strlen(sc->scram.out), sc->scram.out));
        return true;
    }
    if (creds && offered(mechs, "PLAIN") &&
        (pnx_sasl_is_transport_encrypted(t) || pnx_sasl_get_allow_insecure_mechanisms(t)))
        return plain_init(t, sc, user, pw);
    if (!creds && offered(mechs, "ANONYMOUS")) {
        send_init(t, sc, "ANONYMOUS", pn_bytes(9, "anonymous"));
        return true;
    }
    snprintf(sc->error, sizeof sc->error,
             "no SASL mechanism in common: the broker offers %s; mqctl does SCRAM-SHA-256 or "
             "PLAIN with a user and password (in the URL or MQCTL_PASSWORD), ANONYMOUS without",
             sc->offered);
    return false;
}

static void c_challenge(pn_transport_t *t, const pn_bytes_t *recv)
{
    mqd_sasl_client_t *sc = pnx_sasl_get_context(t);
    char why[256];
    const char *pw = pnx_sasl_get_password(t);
    if (!sc->mech || strcmp(sc->mech, "SCRAM-SHA-256") != 0 || !pw ||
        mqd_scramc_final(&sc->scram, pw, recv ? recv->start : NULL, recv ? recv->size : 0, why,
                         sizeof why) != 0) {
        if (!sc->mech || strcmp(sc->mech, "SCRAM-SHA-256") != 0 || !pw)
            snprintf(why, sizeof why, "unexpected SASL challenge");
        snprintf(sc->error, sizeof sc->error, "%s", why);
        pnx_sasl_error(t, sc->error, "amqp:unauthorized-access");
        return;
    }
    pnx_sasl_clear_password(t);
    pnx_sasl_set_bytes_out(t, pn_bytes(strlen(sc->scram.out), sc->scram.out));
    pnx_sasl_set_desired_state(t, SASL_POSTED_RESPONSE);
}

/* A success from the server counts only once it proved it knows our ServerKey. */
static void c_outcome(pn_transport_t *t, const pn_bytes_t *recv)
{
    mqd_sasl_client_t *sc = pnx_sasl_get_context(t);
    if (!sc->mech || strcmp(sc->mech, "SCRAM-SHA-256") != 0 ||
        pn_sasl_outcome(pn_sasl(t)) != PN_SASL_OK)
        return;
    char why[256];
    if (mqd_scramc_verify(&sc->scram, recv ? recv->start : NULL, recv ? recv->size : 0, why,
                          sizeof why) != 0) {
        snprintf(sc->error, sizeof sc->error, "%s", why);
        pnx_sasl_set_failed(t);
    }
}

static bool c_can_encrypt(pn_transport_t *t)
{
    MQD_UNUSED(t);
    return false;
}

static ssize_t c_max_encrypt(pn_transport_t *t)
{
    MQD_UNUSED(t);
    return 0;
}

static const pnx_sasl_implementation impl = {
    .free = c_free,
    .list_mechanisms = c_list,
    .init_server = c_init_server,
    .init_client = c_init_client,
    .prepare_write = c_nothing,
    .process_init = c_server_only,
    .process_response = c_server_resp,
    .process_mechanisms = c_mechanisms,
    .process_challenge = c_challenge,
    .process_outcome = c_outcome,
    .can_encrypt = c_can_encrypt,
    .max_encrypt_size = c_max_encrypt,
};

void mqd_sasl_client_setup(pn_transport_t *t, mqd_sasl_client_t *sc)
{
    memset(sc, 0, sizeof *sc);
    pnx_sasl_set_implementation(t, &impl, sc);
}

void mqd_sasl_client_clear(mqd_sasl_client_t *sc)
{
    if (sc->plain)
        OPENSSL_cleanse(sc->plain, sc->plain_len);
    free(sc->plain);
    mqd_scramc_clear(&sc->scram);
    OPENSSL_cleanse(sc, sizeof *sc);
}
