/* Server-side SASL through Proton's plugin interface: Debian's Proton has no Cyrus, and
 * its built-in server mechanisms do not check passwords. We offer
 *   EXTERNAL       over TLS with a verified client certificate (CN -> [user] cert_cn/name)
 *   SCRAM-SHA-256  against stored SCRAM credentials (scram_sha256), any listener
 *   PLAIN          against PBKDF2 hashes (password_hash); on plain TCP only with
 *                  allow_plain_without_tls
 *   ANONYMOUS      with allow_anonymous
 * A success also checks max_connections_per_user. Secrets are never logged. An unknown
 * name costs and looks like a known one with a wrong password (decoy.c). */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core.h"

#include <openssl/crypto.h>
#include <proton/sasl.h>
#include <proton/sasl_plugin.h>
#include <stdlib.h>
#include <string.h>

/* A client that goes after our offer without an outcome: most often one that had no
 * mechanism in common with us (Proton's client then just drops the connection), which
 * would otherwise be logged only as a framing-error. */
static void log_abandoned(pn_transport_t *t, const mqd_auth_conn_t *ac)
{
    if (ac->c == NULL || ac->mechs[0] == '\0' || ac->outcome || ac->pending)
        return;
    const char *mech = pnx_sasl_get_selected_mechanism(t);
    if (ac->scram)
        MQD_NOTICE("auth",
                   "SASL refused peer=%s mech=SCRAM-SHA-256 user=%s reason=the "
                   "connection ended during the exchange (the client gave up, or a handshake "
                   "timeout)",
                   mqd_conn_peer(ac->c), ac->scram->user[0] ? ac->scram->user : "-");
    else if (mech == NULL)
        MQD_NOTICE("auth",
                   "SASL refused peer=%s mech=none user=- reason=the connection ended "
                   "before the client chose one of the mechanisms offered (%s): none in "
                   "common, or a handshake timeout",
                   mqd_conn_peer(ac->c), ac->mechs);
}

static void s_free(pn_transport_t *t)
{
    mqd_auth_conn_t *ac = pnx_sasl_get_context(t);
    if (ac != NULL) {
        log_abandoned(t, ac);
        pnx_sasl_set_context(t, NULL);
        mqd_auth_conn_free(ac);
    }
}

static const char *s_list(pn_transport_t *t)
{
    mqd_auth_conn_t *ac = pnx_sasl_get_context(t);
    const mqd_conf_t *conf = mqd_srv_conf(mqd_conn_srv(ac->c));
    /* the order is the server's preference: clients such as Proton's take the first
     * they can do */
    bool cert = ac->tls && (mqd_auth_tls_peer_is_client(ac->c) || mqd_auth_tls_peer_is_node(ac->c));
    snprintf(ac->mechs, sizeof ac->mechs, "%s%s%s", cert ? "EXTERNAL " : "", "SCRAM-SHA-256",
             ac->tls || conf->allow_plain_without_tls ? " PLAIN" : "");
    if (conf->allow_anonymous)
        strcat(ac->mechs, " ANONYMOUS");
    return ac->mechs;
}

static bool s_init_server(pn_transport_t *t)
{
    pnx_sasl_set_desired_state(t, SASL_POSTED_MECHANISMS);
    return true;
}

static bool s_init_client(pn_transport_t *t)
{
    MQD_UNUSED(t);
    return false;
}

static void s_prepare_write(pn_transport_t *t)
{
    MQD_UNUSED(t);
}

static void fail(pn_transport_t *t, mqd_auth_conn_t *ac, const char *why, const char *who)
{
    const char *mech = pnx_sasl_get_selected_mechanism(t);
    MQD_NOTICE("auth", "SASL refused peer=%s mech=%s user=%s reason=%s", mqd_conn_peer(ac->c),
               mech ? mech : "none", who, why);
    mqd_srv_count_login_failure(mqd_conn_srv(ac->c), mech);
    if (ac->scram) {
        mqd_scram_clear(ac->scram);
        free(ac->scram);
        ac->scram = NULL;
    }
    ac->outcome = true;
    pnx_sasl_set_bytes_out(t, pn_bytes(0, NULL));
    pnx_sasl_set_failed(t);
    pnx_sasl_set_desired_state(t, SASL_POSTED_OUTCOME);
}

/* Logs `user` in, unless max_connections_per_user says no. */
static void succeed(pn_transport_t *t, mqd_auth_conn_t *ac, const char *user, bool anonymous)
{
    mqd_conn_t *c = ac->c;
    mqd_server_t *s = mqd_conn_srv(c);
    uint32_t max = mqd_srv_conf(s)->max_connections_per_user;
    if (!anonymous && max > 0 && mqd_auth_user_conns(s, c, user) >= max)
        return fail(t, ac, "max_connections_per_user reached", user);
    mqd_conn_set_user(c, user);
    ac->anonymous = anonymous;
    ac->outcome = true;
    pnx_sasl_set_succeeded(t, mqd_conn_user(c), NULL);
    pnx_sasl_set_desired_state(t, SASL_POSTED_OUTCOME);
    MQD_INFO("auth", "SASL %s peer=%s user=%s", pnx_sasl_get_selected_mechanism(t),
             mqd_conn_peer(c), mqd_conn_user(c));
}

/* ---- PLAIN: the PBKDF2 runs on the login pool (pwjob.c); the outcome waits for it ---- */

typedef struct plain_job {
    mqd_auth_pw_t pw; /* first: the shared check */
    mqd_conn_t *c;    /* holds a reference until done */
    bool authz_ok;
} plain_job_t;

/* On the loop: the outcome, unless the connection went away or already has one. */
static void plain_done(mqd_auth_pw_t *pw, int rc)
{
    plain_job_t *p = (plain_job_t *)pw;
    mqd_conn_t *c = p->c;
    mqd_auth_conn_t *ac = mqd_conn_auth(c);
    if (ac != NULL)
        ac->pending = false;
    if (rc != MQD_ESTATE && ac != NULL && !mqd_conn_closed(c) && !ac->outcome &&
        !pn_connection_driver_write_closed(mqd_conn_driver(c))) {
        pn_transport_t *t = mqd_conn_driver(c)->transport;
        if (rc == MQD_EFAILED)
            fail(t, ac, pw->known ? "wrong password" : "unknown user", pw->user);
        else if (rc != 0)
            fail(t, ac, "credentials changed by a reload during the login", pw->user);
        else if (!p->authz_ok)
            fail(t, ac, "authorization identity differs from the user", pw->user);
        else
            succeed(t, ac, pw->user, false);
        /* what the client pipelined behind its sasl-init: for Proton after a success,
         * dropped after a failure (the connection ends with the outcome) */
        mqd_auth_rx_release(c, mqd_conn_user(c)[0] != '\0');
        mqd_conn_mark_dirty(c); /* the outcome goes out with the next tick */
    }
    mqd_conn_unref(c);
}

/* The fairness key of the address part of "HOST:PORT". */
static uint64_t host_key(const char *peer)
{
    const char *colon = strrchr(peer, ':');
    return mqd_auth_pool_key(peer, colon ? (size_t)(colon - peer) : strlen(peer));
}

/* PLAIN logins from c's address now with the pool. */
static size_t pending_from(mqd_server_t *s, const mqd_conn_t *c)
{
    const char *peer = mqd_conn_peer(c);
    const char *colon = strrchr(peer, ':');
    size_t hl = colon ? (size_t)(colon - peer) : strlen(peer), n = 0;
    mqd_dlist_t *conns = mqd_srv_conns(s);
    for (mqd_dlist_t *p = conns->next; p != conns; p = p->next) {
        const mqd_conn_t *o = mqd_conn_of_node(p);
        const mqd_auth_conn_t *oa = mqd_conn_auth(o);
        const char *op = mqd_conn_peer(o);
        if (oa && oa->pending && strncmp(op, peer, hl) == 0 && op[hl] == ':')
            n++;
    }
    return n;
}

/* Hands the check to the pool, or fails with sys-temp when the queue is full. */
static void plain_submit(pn_transport_t *t, mqd_auth_conn_t *ac, plain_job_t *p)
{
    mqd_conn_t *c = ac->c;
    mqd_server_t *s = mqd_conn_srv(c);
    const mqd_conf_t *conf = mqd_srv_conf(s);
    mqd_auth_t *a = mqd_srv_auth(s);
    const char *full = NULL;
    if (mqd_auth_pool_in_flight(a->pool) >= conf->auth_queue_max)
        full = "auth_queue_max reached";
    else if (pending_from(s, c) >= conf->auth_queue_per_ip)
        full = "auth_queue_per_ip reached";
    if (full) {
        fail(t, ac, full, p->pw.user);
        pn_sasl_done(pn_sasl(t), PN_SASL_TEMP); /* sys-temp: worth a retry later */
        mqd_auth_pw_free(&p->pw);
        return;
    }
    p->c = c;
    mqd_conn_ref(c);
    ac->pending = true;
    mqd_auth_pw_submit(&p->pw, host_key(mqd_conn_peer(c)), plain_done);
}

/* PLAIN: [authzid] NUL authcid NUL passwd */
static void plain(pn_transport_t *t, mqd_auth_conn_t *ac, const pn_bytes_t *recv)
{
    const mqd_conf_t *conf = mqd_srv_conf(mqd_conn_srv(ac->c));
    if (!ac->tls && !conf->allow_plain_without_tls)
        return fail(t, ac, "PLAIN needs TLS (allow_plain_without_tls = off)", "-");
    if (!recv || recv->size == 0 || recv->size > 1024)
        return fail(t, ac, "malformed PLAIN response", "-");
    plain_job_t *p = mqd_auth_pw_new(sizeof *p);
    if (p == NULL)
        return fail(t, ac, "out of memory", "-");
    char *buf = p->pw.pw; /* parsed in place: the password is where it has to be */
    memcpy(buf, recv->start, recv->size);
    const char *end = buf + recv->size;
    const char *authcid = memchr(buf, '\0', recv->size);
    const char *pw = authcid ? memchr(authcid + 1, '\0', (size_t)(end - authcid - 1)) : NULL;
    if (!pw || mqd_auth_pw_user(&p->pw, mqd_conn_srv(ac->c), authcid + 1) != 0) {
        mqd_auth_pw_free(&p->pw);
        return fail(t, ac, "malformed PLAIN response", "-");
    }
    authcid++;
    pw++;
    /* an authzid other than the user itself would be impersonation */
    p->authz_ok = buf[0] == '\0' || strcmp(buf, authcid) == 0;
    memmove(buf, pw, (size_t)(end - pw) + 1);
    OPENSSL_cleanse(buf + (end - pw) + 1, sizeof p->pw.pw - (size_t)(end - pw) - 1);
    plain_submit(t, ac, p);
}

/* EXTERNAL in the node role: a certificate of replication_ca_file named mqd-node-<id>
 * logs in as that node, never as a user (no [user], no connection limit of one): the
 * connection may carry that node's $repl/ fetch links and nothing else
 * (mqd_auth_node_attach_denied; the leader checks the id the attach claims). */
static void node_login(pn_transport_t *t, mqd_auth_conn_t *ac, const char *cn,
                       const pn_bytes_t *recv)
{
    char why[200];
    uint32_t id;
    if (mqd_auth_node_login(cn, recv ? recv->start : NULL, recv ? recv->size : 0, &id, why,
                            sizeof why) != 0)
        return fail(t, ac, why, cn);
    mqd_conn_t *c = ac->c;
    mqd_conn_set_user(c, cn);
    ac->node = true;
    ac->node_id = id;
    ac->outcome = true;
    pnx_sasl_set_succeeded(t, mqd_conn_user(c), NULL);
    pnx_sasl_set_desired_state(t, SASL_POSTED_OUTCOME);
    MQD_INFO("auth", "SASL EXTERNAL peer=%s node=%s: a node connection ($repl/ fetch links only)",
             mqd_conn_peer(c), cn);
}

/* EXTERNAL: the verified client certificate's subject CN names the user, or, for a
 * certificate of replication_ca_file, the node. */
static void external(pn_transport_t *t, mqd_auth_conn_t *ac, const pn_bytes_t *recv)
{
    const mqd_conf_t *conf = mqd_srv_conf(mqd_conn_srv(ac->c));
    char cn[256];
    bool client = ac->tls && mqd_auth_tls_peer_is_client(ac->c);
    bool node = ac->tls && mqd_auth_tls_peer_is_node(ac->c);
    int rc = client || node ? mqd_auth_tls_peer_cn(ac->c, cn, sizeof cn) : MQD_ENOENT;
    uint32_t id;
    if (rc == MQD_ENOENT)
        return fail(t, ac, "EXTERNAL without a client certificate", "-");
    if (rc != 0 || cn[0] == '\0')
        return fail(t, ac, "client certificate has no subject CN", "-");
    /* the naming rule first: a node certificate names a node, never a user, even from a
     * CA that tls_ca trusts as well */
    if (node && (mqd_auth_node_cn_id(cn, &id) == 0 || !client))
        return node_login(t, ac, cn, recv);
    const mqd_user_conf_t *u = NULL;
    for (size_t i = 0; i < conf->n_users && !u; i++)
        if (conf->users[i].cert_cn && strcmp(conf->users[i].cert_cn, cn) == 0)
            u = &conf->users[i];
    if (!u) {
        u = mqd_conf_user(conf, cn);
        if (u && u->cert_cn)
            u = NULL; /* that user names another certificate */
    }
    if (!u)
        return fail(t, ac, "no user for the certificate CN", cn);
    if (recv && recv->size > 0 &&
        (recv->size != strlen(u->name) || memcmp(recv->start, u->name, recv->size) != 0))
        return fail(t, ac, "authorization identity differs from the certificate's user", u->name);
    succeed(t, ac, u->name, false);
}

static void scram_first(pn_transport_t *t, mqd_auth_conn_t *ac, const pn_bytes_t *recv)
{
    ac->scram = calloc(1, sizeof *ac->scram);
    if (!ac->scram)
        return fail(t, ac, "out of memory", "-");
    if (!recv || mqd_scram_client_first(ac->scram, recv->start, recv->size) != 0)
        return fail(t, ac, "malformed SCRAM client-first-message", "-");
    if (mqd_auth_scram_reply_first(mqd_conn_srv(ac->c), ac->scram, ac->out) != 0)
        return fail(t, ac, "SCRAM server-first failed", "-");
    pnx_sasl_set_bytes_out(t, pn_bytes(strlen(ac->out), ac->out));
    pnx_sasl_set_desired_state(t, SASL_POSTED_CHALLENGE);
}

static void s_process_init(pn_transport_t *t, const char *mech, const pn_bytes_t *recv)
{
    mqd_auth_conn_t *ac = pnx_sasl_get_context(t);
    if (!mech) /* Proton passes NULL for a mechanism that is not a symbol (fuzz_conn) */
        return fail(t, ac, "mechanism not a symbol", "-");
    if (ac->pending || ac->outcome)
        return fail(t, ac, "SASL init after the first", "-");
    if (strcmp(mech, "ANONYMOUS") == 0 && mqd_srv_conf(mqd_conn_srv(ac->c))->allow_anonymous)
        return succeed(t, ac, "anonymous", true);
    if (strcmp(mech, "ANONYMOUS") == 0)
        return fail(t, ac, "ANONYMOUS not allowed (allow_anonymous = off)", "anonymous");
    if (strcmp(mech, "PLAIN") == 0)
        return plain(t, ac, recv);
    if (strcmp(mech, "EXTERNAL") == 0)
        return external(t, ac, recv);
    if (strcmp(mech, "SCRAM-SHA-256") == 0)
        return scram_first(t, ac, recv);
    fail(t, ac, "mechanism not offered", "-");
}

static void s_process_response(pn_transport_t *t, const pn_bytes_t *recv)
{
    mqd_auth_conn_t *ac = pnx_sasl_get_context(t);
    if (!ac->scram || !recv || ac->pending || ac->outcome)
        return fail(t, ac, "unexpected SASL response", "-");
    char user[256];
    snprintf(user, sizeof user, "%s", ac->scram->user);
    int rc = mqd_scram_client_final(ac->scram, recv->start, recv->size, ac->out);
    bool known = ac->scram->known;
    unsigned char stored[32];
    memcpy(stored, ac->scram->cred.stored_key, sizeof stored);
    mqd_scram_clear(ac->scram);
    free(ac->scram);
    ac->scram = NULL;
    if (rc == MQD_EFAILED)
        return fail(t, ac, known ? "wrong password" : "unknown user", user);
    if (rc != 0)
        return fail(t, ac, "malformed SCRAM client-final-message", user);
    /* a reload between client-first and client-final may have removed the user or
     * changed its credentials */
    bool same = mqd_auth_scram_unchanged(mqd_conn_srv(ac->c), user, stored);
    OPENSSL_cleanse(stored, sizeof stored);
    if (!same)
        return fail(t, ac, "credentials changed by a reload during the login", user);
    /* the outcome's additional-data carries server-final ("v=..."): the client checks
     * that we know its ServerKey */
    pnx_sasl_set_bytes_out(t, pn_bytes(strlen(ac->out), ac->out));
    succeed(t, ac, user, false);
}

static bool s_can_encrypt(pn_transport_t *t)
{
    MQD_UNUSED(t);
    return false;
}

static ssize_t s_max_encrypt(pn_transport_t *t)
{
    MQD_UNUSED(t);
    return 0;
}

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

void mqd_auth_sasl_setup(mqd_conn_t *c, mqd_auth_conn_t *ac)
{
    pn_transport_t *t = mqd_conn_driver(c)->transport;
    pn_sasl_t *sasl = pn_sasl(t);
    /* the policy (PLAIN only over TLS unless allowed) is ours, in s_list and plain() */
    pn_sasl_set_allow_insecure_mechs(sasl, true);
    pn_transport_require_auth(t, !mqd_srv_conf(mqd_conn_srv(c))->allow_anonymous);
    pnx_sasl_set_implementation(t, &impl, ac);
}
