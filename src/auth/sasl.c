/* Server-side SASL through Proton's plugin interface: Debian's Proton has no Cyrus, and
 * its built-in server mechanisms do not check PLAIN passwords. We offer PLAIN (checked
 * against the users of the config, PBKDF2 hashes) and ANONYMOUS when allow_anonymous. */
#include "config.h"
#include "auth/auth.h"
#include "server/broker.h"

#include <proton/sasl.h>
#include <proton/sasl_plugin.h>
#include <string.h>

static const char *mechs_anon = "PLAIN ANONYMOUS";
static const char *mechs_plain = "PLAIN";

static void s_free(pn_transport_t *t) { MQD_UNUSED(t); }

static const char *s_list(pn_transport_t *t)
{
    mqd_conn_t *c = pnx_sasl_get_context(t);
    return c->srv->conf->allow_anonymous ? mechs_anon : mechs_plain;
}

static bool s_init_server(pn_transport_t *t)
{
    pnx_sasl_set_desired_state(t, SASL_POSTED_MECHANISMS);
    return true;
}

static bool s_init_client(pn_transport_t *t) { return false; }
static void s_prepare_write(pn_transport_t *t) { MQD_UNUSED(t); }

static void fail(pn_transport_t *t, mqd_conn_t *c, const char *why, const char *who)
{
    MQD_NOTICE("auth", "SASL failed peer=%s user=%s reason=%s", c->peer, who, why);
    pnx_sasl_set_failed(t);
    pnx_sasl_set_desired_state(t, SASL_POSTED_OUTCOME);
}

/* PLAIN: [authzid] NUL authcid NUL passwd */
static void plain(pn_transport_t *t, mqd_conn_t *c, const pn_bytes_t *recv)
{
    if (!recv || recv->size == 0 || recv->size > 1024)
        return fail(t, c, "malformed PLAIN response", "-");
    char buf[1025];
    memcpy(buf, recv->start, recv->size);
    buf[recv->size] = '\0';
    const char *end = buf + recv->size;
    const char *authcid = memchr(buf, '\0', recv->size);
    if (!authcid)
        return fail(t, c, "malformed PLAIN response", "-");
    authcid++;
    const char *pw = authcid < end ? memchr(authcid, '\0', (size_t)(end - authcid)) : NULL;
    if (!pw)
        return fail(t, c, "malformed PLAIN response", "-");
    pw++;
    const mqd_user_conf_t *u = mqd_conf_user(c->srv->conf, authcid);
    if (!u || !u->password_hash || !mqd_conf_password_ok(u->password_hash, pw)) {
        memset(buf, 0, sizeof buf);
        return fail(t, c, u ? "wrong password" : "unknown user", authcid);
    }
    snprintf(c->user, sizeof c->user, "%s", authcid);
    memset(buf, 0, sizeof buf);
    pnx_sasl_set_succeeded(t, c->user, NULL);
    pnx_sasl_set_desired_state(t, SASL_POSTED_OUTCOME);
}

static void s_process_init(pn_transport_t *t, const char *mech, const pn_bytes_t *recv)
{
    mqd_conn_t *c = pnx_sasl_get_context(t);
    if (strcmp(mech, "ANONYMOUS") == 0 && c->srv->conf->allow_anonymous) {
        snprintf(c->user, sizeof c->user, "anonymous");
        pnx_sasl_set_succeeded(t, "anonymous", NULL);
        pnx_sasl_set_desired_state(t, SASL_POSTED_OUTCOME);
        return;
    }
    if (strcmp(mech, "PLAIN") == 0)
        return plain(t, c, recv);
    fail(t, c, "mechanism not offered", "-");
}

static void s_process_response(pn_transport_t *t, const pn_bytes_t *recv)
{
    fail(t, pnx_sasl_get_context(t), "unexpected SASL response", "-");
}

static bool s_can_encrypt(pn_transport_t *t) { return false; }
static ssize_t s_max_encrypt(pn_transport_t *t) { return 0; }

static const pnx_sasl_implementation impl = {
    .free = s_free,
    .list_mechanisms = s_list,
    .init_server = s_init_server,
    .init_client = s_init_client,
    .prepare_write = s_prepare_write,
    .process_init = s_process_init,
    .process_response = s_process_response,
    .can_encrypt = s_can_encrypt,
    .max_encrypt_size = s_max_encrypt,
};

void mqd_auth_conn_setup(mqd_conn_t *c, size_t listener)
{
    MQD_UNUSED(listener);
    pn_transport_t *t = c->driver.transport;
    pn_sasl_t *sasl = pn_sasl(t);
    pn_sasl_set_allow_insecure_mechs(sasl, true);
    pn_transport_require_auth(t, !c->srv->conf->allow_anonymous);
    pnx_sasl_set_implementation(t, &impl, c);
}

int mqd_auth_init(mqd_server_t *s)
{
    MQD_UNUSED(s);
    return 0;
}

int mqd_auth_reload(mqd_server_t *s)
{
    MQD_UNUSED(s);
    return 0;
}

void mqd_auth_free(mqd_server_t *s) { MQD_UNUSED(s); }

bool mqd_auth_allowed(mqd_conn_t *c, mqd_perm_t perm, const char *address)
{
    MQD_UNUSED(c);
    MQD_UNUSED(perm);
    MQD_UNUSED(address);
    return true;
}
