/* The `$cbs` node (AMQP claims-based security, draft 1.0, as the Azure SDKs use it): a
 * put-token request carries a SAS token (auth/sas.c); a valid one is kept on the
 * connection until its expiry. With sas_required, links need such a token (checked in
 * tls.c's denied() beside SASL users and the [acl]); at a token's expiry the links it
 * covered are checked again and detached with amqp:unauthorized-access unless a newer
 * token (the SDKs renew before expiry) covers them. */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core.h"

#include <event2/event.h>
#include <proton/codec.h>
#include <proton/message.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define CBS_MAX_TOKENS 64 /* per connection: one per audience, the oldest-expiring goes */

typedef struct cbs_tok {
    char audience[1024];
    char hub[256];     /* "" = every hub */
    const char *scope; /* the key's, borrowed from the running config; NULL = every hub */
    unsigned rights;   /* MQD_CONF_SAS_* */
    int64_t se;
} cbs_tok_t;

typedef struct mqd_cbs_conn {
    cbs_tok_t tok[CBS_MAX_TOKENS];
    size_t n;
    struct event *ev; /* the earliest expiry */
    mqd_conn_t *c;
} mqd_cbs_conn_t;

void mqd_auth_cbs_free(mqd_auth_conn_t *ac)
{
    if (ac->cbs == NULL)
        return;
    if (ac->cbs->ev)
        event_free(ac->cbs->ev);
    free(ac->cbs);
    ac->cbs = NULL;
}

static void drop_expired(mqd_cbs_conn_t *cc, int64_t now)
{
    for (size_t i = 0; i < cc->n;)
        if (cc->tok[i].se <= now)
            cc->tok[i] = cc->tok[--cc->n];
        else
            i++;
}

static void arm(mqd_cbs_conn_t *cc);

static void on_expiry(evutil_socket_t fd, short what, void *arg)
{
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
    mqd_cbs_conn_t *cc = arg;
    drop_expired(cc, (int64_t)time(NULL));
    if (mqd_conn_closed(cc->c))
        return;
    if (mqd_auth_recheck_links(cc->c, "SAS token expired") > 0)
        mqd_conn_mark_dirty(cc->c); /* the detaches go out now */
    arm(cc);
}

static void arm(mqd_cbs_conn_t *cc)
{
    if (cc->n == 0 || !mqd_conf_sas_effective(mqd_srv_conf(mqd_conn_srv(cc->c))))
        return;
    int64_t first = cc->tok[0].se;
    for (size_t i = 1; i < cc->n; i++)
        if (cc->tok[i].se < first)
            first = cc->tok[i].se;
    int64_t wait = first - (int64_t)time(NULL);
    struct timeval tv = {.tv_sec = wait > 0 ? wait : 0, .tv_usec = 0};
    if (cc->ev == NULL)
        cc->ev = evtimer_new(mqd_srv_base(mqd_conn_srv(cc->c)), on_expiry, cc);
    if (cc->ev != NULL)
        evtimer_add(cc->ev, &tv);
}

/* Keeps t (replacing an older token for the same audience). */
static int keep(mqd_conn_t *c, const mqd_sas_token_t *t, const mqd_sas_key_conf_t *k)
{
    mqd_auth_conn_t *ac = mqd_conn_auth(c);
    if (ac == NULL)
        return MQD_ESTATE;
    if (ac->cbs == NULL && (ac->cbs = calloc(1, sizeof *ac->cbs)) == NULL)
        return MQD_ENOMEM;
    mqd_cbs_conn_t *cc = ac->cbs;
    cc->c = c;
    drop_expired(cc, (int64_t)time(NULL));
    size_t i = 0;
    while (i < cc->n && strcmp(cc->tok[i].audience, t->audience) != 0)
        i++;
    if (i == CBS_MAX_TOKENS) {
        i = 0;
        for (size_t j = 1; j < cc->n; j++)
            if (cc->tok[j].se < cc->tok[i].se)
                i = j;
    } else if (i == cc->n) {
        cc->n++;
    }
    cbs_tok_t *o = &cc->tok[i];
    snprintf(o->audience, sizeof o->audience, "%s", t->audience);
    snprintf(o->hub, sizeof o->hub, "%s", t->hub);
    o->scope = k ? k->scope : NULL;
    o->rights = MQD_CONF_SAS_SEND | MQD_CONF_SAS_LISTEN | MQD_CONF_SAS_MANAGE;
    if (k != NULL && mqd_conf_parse_sas_rights(k->rights, &o->rights) != 0)
        o->rights = 0;
    o->se = t->se;
    arm(cc);
    return 0;
}

/* A token's sr covers the audience it is put for when equal to it or a path prefix of
 * it (sb://H/HUB covers sb://H/HUB/$management and sb://H/HUB/Partitions/0), as in Azure;
 * URIs compare case-insensitively there. */
static bool sr_covers(const char *sr, const char *name)
{
    size_t n = strlen(sr);
    while (n > 0 && sr[n - 1] == '/')
        n--;
    return strncasecmp(sr, name, n) == 0 && (name[n] == '\0' || name[n] == '/');
}

/* The status of a put-token: 200 (verified), 202 (unknown key, lenient), else
 * 400/401/404/500 with `desc`. */
static int put_token(mqd_conn_t *c, const mqd_cbs_req_t *r, char *desc, size_t len)
{
    const mqd_conf_t *conf = mqd_srv_conf(mqd_conn_srv(c));
    mqd_sas_token_t t;
#define FAIL(st, ...) return (snprintf(desc, len, __VA_ARGS__), (st))
    if (!r->has_op || strcmp(r->operation, "put-token") != 0)
        FAIL(400, "unsupported operation '%s' (only put-token)", r->has_op ? r->operation : "");
    if (r->has_type && strcmp(r->type, "jwt") == 0)
        FAIL(400, "jwt tokens are not supported: use servicebus.windows.net:sastoken");
    if (!r->has_type || strcmp(r->type, "servicebus.windows.net:sastoken") != 0)
        FAIL(400, "unsupported token type (expected servicebus.windows.net:sastoken)");
    if (!r->has_name || r->token == NULL)
        FAIL(400, "put-token needs a name (the audience) and a string body (the token)");
    if (mqd_sas_parse(r->token, r->token_len, &t) != 0)
        FAIL(401, "malformed SAS token");
    if (!sr_covers(t.audience, r->name))
        FAIL(401, "the token's sr does not cover the request's name");
    if (t.se <= (int64_t)time(NULL))
        FAIL(401, "the token has expired (se=%lld)", (long long)t.se);
    const mqd_sas_key_conf_t *k = mqd_conf_sas_key(conf, t.skn);
    if (k == NULL && !mqd_conf_sas_lenient(conf))
        FAIL(401, "unknown key name '%s'", t.skn);
    if (k != NULL && mqd_sas_verify(&t, k->key, strlen(k->key)) != 0)
        FAIL(401, "invalid signature for key '%s'", t.skn);
    if (k != NULL && !mqd_sas_covers(t.hub, k->scope, t.hub[0] ? t.hub : "*"))
        FAIL(401, "audience outside the scope of key '%s'", t.skn);
    if (t.hub[0] && !conf->auto_create_topics && !mqd_topic_find(mqd_conn_srv(c), t.hub))
        FAIL(404, "The messaging entity '%.200s' could not be found.", t.hub);
    if (keep(c, &t, k) != 0)
        FAIL(500, "cannot keep the token");
    FAIL(k ? 200 : 202, k ? "OK" : "Accepted (sas_required = off: not verified)");
#undef FAIL
}

static int encode(pn_message_t *m, mqd_buf_t *out)
{
    out->len = 0;
    for (size_t want = 512; want <= 64 * 1024; want *= 2) {
        if (mqd_buf_reserve(out, want) != 0)
            return MQD_ENOMEM;
        size_t n = out->cap;
        int rc = pn_message_encode(m, (char *)out->p, &n);
        if (rc == 0) {
            out->len = n;
            return 0;
        }
        if (rc != PN_OVERFLOW)
            return MQD_EIO;
    }
    return MQD_ETOOBIG;
}

static int reply(pn_message_t *req, const mqd_cbs_req_t *r, int status, const char *desc,
                 mqd_buf_t *out)
{
    pn_message_t *m = pn_message();
    if (m == NULL)
        return MQD_ENOMEM;
    pn_message_set_address(m, r->reply_to);
    pn_message_set_correlation_id(m, pn_message_get_id(req));
    pn_data_t *p = pn_message_properties(m);
    pn_data_put_map(p);
    pn_data_enter(p);
    pn_data_put_string(p, pn_bytes(11, "status-code"));
    pn_data_put_int(p, status);
    pn_data_put_string(p, pn_bytes(18, "status-description"));
    pn_data_put_string(p, pn_bytes(strlen(desc), desc));
    pn_data_exit(p);
    int rc = encode(m, out);
    pn_message_free(m);
    return rc;
}

int mqd_auth_cbs_handle(mqd_conn_t *c, const uint8_t *req, size_t len, mqd_buf_t *out)
{
    mqd_cbs_req_t r;
    char desc[300];
    pn_message_t *m = pn_message();
    int rc = MQD_ENOMEM;
    if (m == NULL)
        goto out;
    rc = mqd_cbs_request_parse(m, req, len, &r);
    if (rc != 0)
        goto out;
    int status = put_token(c, &r, desc, sizeof desc);
    if (status >= 300)
        MQD_NOTICE_RL("auth", "$cbs put-token refused peer=%s audience=%s: %d %s", mqd_conn_peer(c),
                      r.has_name ? r.name : "-", status, desc);
    else
        MQD_INFO("auth", "$cbs put-token peer=%s audience=%s: %d", mqd_conn_peer(c), r.name,
                 status);
    rc = reply(m, &r, status, desc, out);
out:
    if (m)
        pn_message_free(m);
    return rc;
}

/* The right a permission needs, 0 for none. */
static unsigned right_for(mqd_perm_t perm)
{
    switch (perm) {
    case MQD_PERM_SEND: return MQD_CONF_SAS_SEND;
    case MQD_PERM_RECEIVE:
    case MQD_PERM_BROWSE: return MQD_CONF_SAS_LISTEN;
    case MQD_PERM_MANAGE:
    case MQD_PERM_MONITOR: return MQD_CONF_SAS_MANAGE; /* SAS rights have no read-only one */
    default: return 0;
    }
}

/* What a token must cover: an address (a topic; NULL or "$management" = the node as a
 * whole), or anywhere. */
static bool tok_covers(const cbs_tok_t *t, const char *address, bool anywhere)
{
    if (anywhere)
        return true;
    if (address == NULL || strcmp(address, "$management") == 0)
        return mqd_sas_covers_all(t->hub, t->scope);
    return mqd_sas_covers(t->hub, t->scope, address);
}

static const char *sas_denied(mqd_conn_t *c, mqd_perm_t perm, const char *address, bool anywhere)
{
    unsigned need = right_for(perm);
    if (need == 0 || !mqd_conf_sas_effective(mqd_srv_conf(mqd_conn_srv(c))))
        return NULL;
    const mqd_auth_conn_t *ac = mqd_conn_auth(c);
    const mqd_cbs_conn_t *cc = ac ? ac->cbs : NULL;
    int64_t now = (int64_t)time(NULL);
    for (size_t i = 0; cc != NULL && i < cc->n; i++) {
        const cbs_tok_t *t = &cc->tok[i];
        if (t->se > now && (t->rights & need) && tok_covers(t, address, anywhere))
            return NULL;
    }
    if (!anywhere && (address == NULL || strcmp(address, "$management") == 0))
        return "no valid SAS token covering every hub (a namespace-wide token of an "
               "unscoped key) with this right";
    return "no valid SAS token ($cbs put-token) for this address and right";
}

const char *mqd_auth_sas_denied(mqd_conn_t *c, mqd_perm_t perm, const char *address)
{
    return sas_denied(c, perm, address, false);
}

const char *mqd_auth_sas_denied_anywhere(mqd_conn_t *c, mqd_perm_t perm)
{
    return sas_denied(c, perm, NULL, true);
}
