/* The `$management` node: AMQP Management (draft) requests for topics, consumer groups,
 * connections and the broker, plus the two Event Hubs READ operations the Azure SDKs use
 * for runtime information. One table row per (type, operation); each handler fills the
 * reply body and a status code. See docs/operations.md for the request/reply formats.
 *
 * Input is untrusted: a request larger than MGMT_MAX_REQUEST is refused before anything
 * is decoded, the sections are located by mqd_msg_scan (bounded), and only the
 * application-properties and an amqp-value body are decoded (Proton's codec, then
 * mgmt_json's depth-bounded conversion). */
#include "config.h"
#include "mgmt/mgmt.h"
#include "mgmt/mgmt_int.h"
#include "mgmt/mgmt_json.h"
#include "group/group.h"
#include "core/core.h"

#include <jansson.h>
#include <openssl/ssl.h>
#include <proton/message.h>
#include <proton/sasl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MGMT_MAX_REQUEST (64 * 1024)

/* ---------------------------------------------------------------- helpers */

int mqd_mgmt_fail(mqd_mgmt_req_t *r, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->desc, sizeof r->desc, fmt, ap);
    va_end(ap);
    r->status = status;
    return status;
}

int mqd_mgmt_status_of(int rc)
{
    switch (rc) {
    case 0: return 200;
    case MQD_ENOENT: return 404;
    case MQD_EEXIST:
    case MQD_ESTATE: return 409;
    case MQD_EINVAL:
    case MQD_ERANGE:
    case MQD_ETOOBIG: return 400;
    case MQD_ENOSPC: return 507; /* Insufficient Storage */
    default: return 500;
    }
}

/* A string property or body key (the request's application-properties first). */
const char *mqd_mgmt_arg_str(mqd_mgmt_req_t *r, const char *key)
{
    json_t *v = json_object_get(r->props, key);
    if (!json_is_string(v) && r->body)
        v = json_object_get(r->body, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* An integer property or body key; a string of digits counts (some clients send every
 * application property as a string). false when absent or not a number. */
bool mqd_mgmt_arg_int(mqd_mgmt_req_t *r, const char *key, int64_t *out)
{
    json_t *v = json_object_get(r->props, key);
    if (!v && r->body)
        v = json_object_get(r->body, key);
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        long long n = strtoll(s, &end, 10);
        if (*s && !*end) {
            *out = n;
            return true;
        }
    }
    return false;
}

void mqd_mgmt_kv_str(pn_data_t *d, const char *k, const char *v)
{
    pn_data_put_string(d, pn_bytes(strlen(k), k));
    if (v)
        pn_data_put_string(d, pn_bytes(strlen(v), v));
    else
        pn_data_put_null(d);
}

void mqd_mgmt_kv_long(pn_data_t *d, const char *k, int64_t v)
{
    pn_data_put_string(d, pn_bytes(strlen(k), k));
    pn_data_put_long(d, v);
}

void mqd_mgmt_kv_int(pn_data_t *d, const char *k, int32_t v)
{
    pn_data_put_string(d, pn_bytes(strlen(k), k));
    pn_data_put_int(d, v);
}

void mqd_mgmt_kv_bool(pn_data_t *d, const char *k, bool v)
{
    pn_data_put_string(d, pn_bytes(strlen(k), k));
    pn_data_put_bool(d, v);
}

void mqd_mgmt_kv_ts(pn_data_t *d, const char *k, int64_t ms)
{
    pn_data_put_string(d, pn_bytes(strlen(k), k));
    pn_data_put_timestamp(d, ms);
}

/* Opens a nested map/list value under key k (close with pn_data_exit). */
void mqd_mgmt_kv_enter(pn_data_t *d, const char *k, bool list)
{
    pn_data_put_string(d, pn_bytes(strlen(k), k));
    if (list)
        pn_data_put_list(d);
    else
        pn_data_put_map(d);
    pn_data_enter(d);
}

const char *mqd_mgmt_actor(const mqd_mgmt_req_t *r)
{
    if (r->c && mqd_conn_user(r->c)[0])
        return mqd_conn_user(r->c);
    return r->actor && *r->actor ? r->actor : "anonymous";
}

/* ---------------------------------------------------------------- broker */

static int broker_read(mqd_mgmt_req_t *r)
{
    mqd_server_t *s = r->s;
    const mqd_conf_t *conf = mqd_srv_conf(s);
    size_t topics = 0;
    for (mqd_topic_t *t = mqd_srv_topic_first(s); t; t = mqd_srv_topic_next(t))
        topics += !mqd_topic_temporary(t);
    mqd_proc_stats_t ps;
    mqd_metrics_proc_stats(&ps);
    pn_data_put_map(r->out);
    pn_data_enter(r->out);
    mqd_mgmt_kv_str(r->out, "version", PACKAGE_VERSION);
    mqd_mgmt_kv_long(r->out, "uptime_s", (int64_t)ps.uptime_s);
    mqd_mgmt_kv_long(r->out, "topics", (int64_t)topics);
    mqd_mgmt_kv_long(r->out, "connections", (int64_t)mqd_srv_n_conns(s));
    mqd_mgmt_kv_long(r->out, "connections_accepted", (int64_t)mqd_srv_conns_accepted(s));
    mqd_mgmt_kv_long(r->out, "rss_bytes", (int64_t)ps.rss_bytes);
    mqd_mgmt_kv_str(r->out, "data_dir", conf->data_dir);
    /* the disk the data dir's files take, as mqd_data_dir_size_bytes (du), measured at
     * most every few seconds (a READ from the console polls) */
    static mqd_dir_size_t dir_cache;
    uint64_t used = 0;
    if (mqd_metrics_dir_size(conf->data_dir, mqd_now_ms(), &dir_cache, &used) == 0)
        mqd_mgmt_kv_long(r->out, "data_dir_size_bytes", (int64_t)used);
    mqd_mgmt_kv_enter(r->out, "listen", true);
    for (size_t i = 0; i < conf->n_listen; i++)
        pn_data_put_string(r->out, pn_bytes(strlen(conf->listen[i]), conf->listen[i]));
    pn_data_exit(r->out);
    mqd_mgmt_kv_bool(r->out, "stopping", mqd_srv_stopping(s));
    pn_data_exit(r->out);
    return 200;
}

static int broker_reload(mqd_mgmt_req_t *r)
{
    char err[512];
    int rc = mqd_srv_ops(r->s)->reload(r->s, err, sizeof err);
    if (rc != 0) /* err names FILE:LINE: key: reason, as the log does */
        return mqd_mgmt_fail(r, 400, "reload failed (%s); the running configuration is kept",
                             err);
    return 200;
}

/* ---------------------------------------------------------------- connections */

static void conn_counts(mqd_conn_t *c, size_t *sessions, size_t *links)
{
    pn_connection_t *pc = mqd_conn_driver(c)->connection;
    *sessions = *links = 0;
    for (pn_session_t *ss = pn_session_head(pc, PN_LOCAL_ACTIVE); ss;
         ss = pn_session_next(ss, PN_LOCAL_ACTIVE))
        (*sessions)++;
    for (pn_link_t *l = pn_link_head(pc, PN_LOCAL_ACTIVE); l; l = pn_link_next(l, PN_LOCAL_ACTIVE))
        (*links)++;
}

/* What rabbitmqctl list_connections shows: since when, bytes, TLS, SASL, the client's open
 * properties (the console shows the same row). */
static void put_conn_details(pn_data_t *d, mqd_conn_t *c)
{
    pn_connection_driver_t *drv = mqd_conn_driver(c);
    pn_transport_t *t = drv->transport;
    SSL *ssl = mqd_conn_ssl(c);
    const char *mech = t ? pn_sasl_get_mech(pn_sasl(t)) : NULL;
    mqd_mgmt_kv_ts(d, "connected_since", mqd_conn_opened_ms(c));
    mqd_mgmt_kv_bool(d, "tls", ssl != NULL);
    mqd_mgmt_kv_long(d, "bytes_in", (int64_t)mqd_conn_bytes_in(c));
    mqd_mgmt_kv_long(d, "bytes_out", (int64_t)mqd_conn_bytes_out(c));
    mqd_mgmt_kv_str(d, "tls_version", ssl ? SSL_get_version(ssl) : NULL);
    mqd_mgmt_kv_str(d, "tls_cipher", ssl ? SSL_get_cipher_name(ssl) : NULL);
    mqd_mgmt_kv_str(d, "sasl_mechanism", mech);
    /* the peer's open properties (product, version, platform...), as its client sent */
    pn_data_t *props = pn_connection_remote_properties(drv->connection);
    pn_data_rewind(props);
    json_t *pj = pn_data_next(props) ? mqd_mgmt_data_to_json(props, 0) : NULL;
    mqd_mgmt_kv_enter(d, "client_properties", false);
    const char *k;
    json_t *v;
    if (json_is_object(pj))
        json_object_foreach(pj, k, v) {
            pn_data_put_string(d, pn_bytes(strlen(k), k));
            mqd_mgmt_json_to_data(d, v, 1);
        }
    pn_data_exit(d);
    json_decref(pj);
}

static int conn_query(mqd_mgmt_req_t *r)
{
    pn_data_put_list(r->out);
    pn_data_enter(r->out);
    mqd_dlist_t *conns = mqd_srv_conns(r->s);
    for (mqd_dlist_t *n = conns->next; n != conns; n = n->next) {
        mqd_conn_t *c = mqd_conn_of_node(n);
        if (mqd_conn_closed(c))
            continue;
        size_t sessions, links;
        conn_counts(c, &sessions, &links);
        const char *cont = pn_connection_remote_container(mqd_conn_driver(c)->connection);
        const char *user = mqd_conn_user(c);
        pn_data_put_map(r->out);
        pn_data_enter(r->out);
        /* the peer address is unique among open connections: it is the id */
        mqd_mgmt_kv_str(r->out, "id", mqd_conn_peer(c));
        mqd_mgmt_kv_str(r->out, "peer", mqd_conn_peer(c));
        mqd_mgmt_kv_str(r->out, "user", user[0] ? user : "anonymous");
        mqd_mgmt_kv_str(r->out, "container", cont ? cont : "");
        mqd_mgmt_kv_long(r->out, "sessions", (int64_t)sessions);
        mqd_mgmt_kv_long(r->out, "links", (int64_t)links);
        mqd_mgmt_kv_bool(r->out, "self", c == r->c);
        put_conn_details(r->out, c);
        pn_data_exit(r->out);
    }
    pn_data_exit(r->out);
    return 200;
}

static int conn_close(mqd_mgmt_req_t *r)
{
    if (!r->name)
        return mqd_mgmt_fail(r, 400, "name (the connection id) is required");
    mqd_dlist_t *conns = mqd_srv_conns(r->s);
    for (mqd_dlist_t *n = conns->next; n != conns; n = n->next) {
        mqd_conn_t *c = mqd_conn_of_node(n);
        if (mqd_conn_closed(c) || strcmp(mqd_conn_peer(c), r->name) != 0)
            continue;
        pn_connection_t *pc = mqd_conn_driver(c)->connection;
        pn_condition_t *cond = pn_connection_condition(pc);
        pn_condition_set_name(cond, "amqp:connection:forced");
        pn_condition_set_description(cond, "closed by management");
        pn_connection_close(pc);
        mqd_conn_mark_dirty(c); /* the server flushes the close and frees it later */
        MQD_NOTICE("mgmt", "connection %s closed by management (user %s)", mqd_conn_peer(c),
                   mqd_mgmt_actor(r));
        return 204;
    }
    return mqd_mgmt_fail(r, 404, "no connection '%s'", r->name);
}

/* ---------------------------------------------------------------- links */

static void put_link(pn_data_t *d, const mqd_conn_t *c, pn_link_t *l)
{
    mqd_lstate_t *ls = pn_link_get_context(l);
    /* the broker's sender is the client's receiver: name the address it reads from */
    pn_terminus_t *term = pn_link_is_sender(l) ? pn_link_remote_source(l) : pn_link_remote_target(l);
    const char *addr = pn_terminus_get_address(term);
    pn_data_put_map(d);
    pn_data_enter(d);
    mqd_topic_t *topic = ls ? mqd_ls_topic(ls) : NULL;
    struct mqd_group *group = ls ? mqd_ls_group(ls) : NULL;
    mqd_mgmt_kv_str(d, "connection", mqd_conn_peer(c));
    mqd_mgmt_kv_str(d, "name", pn_link_name(l));
    mqd_mgmt_kv_str(d, "role", pn_link_is_sender(l) ? "receiver" : "sender");
    mqd_mgmt_kv_str(d, "kind", mqd_ls_kind_name(ls));
    mqd_mgmt_kv_str(d, "address", addr ? addr : "");
    mqd_mgmt_kv_str(d, "topic", topic ? mqd_topic_name(topic) : NULL);
    mqd_mgmt_kv_str(d, "group", group ? mqd_group_name(group) : NULL);
    mqd_mgmt_kv_long(d, "credit", pn_link_credit(l));
    mqd_mgmt_kv_long(d, "unsettled", pn_link_unsettled(l));
    pn_data_exit(d);
}

/* One row per open link of every open connection (the client's view of its role). */
static int link_query(mqd_mgmt_req_t *r)
{
    pn_data_put_list(r->out);
    pn_data_enter(r->out);
    mqd_dlist_t *conns = mqd_srv_conns(r->s);
    for (mqd_dlist_t *n = conns->next; n != conns; n = n->next) {
        mqd_conn_t *c = mqd_conn_of_node(n);
        if (mqd_conn_closed(c))
            continue;
        for (pn_link_t *l = pn_link_head(mqd_conn_driver(c)->connection, PN_LOCAL_ACTIVE); l;
             l = pn_link_next(l, PN_LOCAL_ACTIVE))
            put_link(r->out, c, l);
    }
    pn_data_exit(r->out);
    return 200;
}

/* ---------------------------------------------------------------- cluster */

/* `mqctl cluster status`: the replication layer's view (src/repl), on any node. */
static int cluster_read(mqd_mgmt_req_t *r)
{
    const mqd_repl_hooks_t *repl = mqd_srv_repl(r->s);
    if (!repl->status)
        return mqd_mgmt_fail(r, 404, "not a cluster node (cluster = none)");
    repl->status(repl->arg, r->out);
    return 200;
}

/* `mqctl cluster elect T P NODE`: a preferred-leader move (src/repl/move.c), answered
 * once etcd holds the new state. */
static void elect_done(void *arg, int status, const char *desc)
{
    mqd_mgmt_finish(arg, status, desc, NULL, NULL);
}

static int cluster_elect(mqd_mgmt_req_t *r)
{
    const char *topic = mqd_mgmt_arg_str(r, "topic");
    int64_t part, node;
    const mqd_repl_hooks_t *repl = mqd_srv_repl(r->s);
    if (!repl->elect)
        return mqd_mgmt_fail(r, 404, "not a cluster node (cluster = none)");
    if (!topic || !mqd_mgmt_arg_int(r, "partition", &part) || part < 0 || part > UINT32_MAX ||
        !mqd_mgmt_arg_int(r, "node", &node) || node <= 0 || node > UINT32_MAX)
        return mqd_mgmt_fail(r, 400, "application properties 'topic', 'partition' and 'node' "
                                     "are required");
    mqd_mgmt_later_t *l = mqd_mgmt_defer(r);
    if (!l)
        return mqd_mgmt_fail(r, 500, "out of memory");
    char err[256];
    int st = repl->elect(repl->arg, topic, (uint32_t)part, (uint32_t)node, elect_done, l, err,
                         sizeof err);
    if (st == 0)
        return 0;
    mqd_mgmt_later_free(l);
    r->deferred = false;
    if (st == 200) {
        snprintf(r->desc, sizeof r->desc, "%s", err);
        return 200;
    }
    return mqd_mgmt_fail(r, st, "%s", err);
}

/* ---------------------------------------------------------------- dispatch */

static const mqd_mgmt_op_t broker_ops[] = {
    {MQD_MGMT_T_BROKER, "READ", broker_read, MQD_MGMT_NODE_READ},
    {MQD_MGMT_T_BROKER, "RELOAD", broker_reload, MQD_MGMT_NODE_MANAGE},
    {MQD_MGMT_T_CONN, "QUERY", conn_query, MQD_MGMT_NODE_READ},
    {MQD_MGMT_T_CONN, "DELETE", conn_close, MQD_MGMT_NODE_MANAGE},
    {MQD_MGMT_T_CONN, "CLOSE", conn_close, MQD_MGMT_NODE_MANAGE},
    {MQD_MGMT_T_TOPIC, "PEEK", mqd_mgmt_topic_peek, MQD_MGMT_TOPIC_PEEK},
    {MQD_MGMT_T_LINK, "QUERY", link_query, MQD_MGMT_NODE_READ},
    {MQD_MGMT_T_CLUSTER, "READ", cluster_read, MQD_MGMT_NODE_READ},
    {MQD_MGMT_T_CLUSTER, "ELECT", cluster_elect, MQD_MGMT_NODE_MANAGE},
};

static const mqd_mgmt_op_t *const op_tables[] = {broker_ops, mqd_mgmt_topic_ops, mqd_mgmt_group_ops,
                                                  mqd_mgmt_owner_ops, mqd_mgmt_config_ops,
                                                  mqd_mgmt_user_ops, mqd_mgmt_route_ops};
static const size_t *const op_counts[] = {NULL, &mqd_mgmt_n_topic_ops, &mqd_mgmt_n_group_ops,
                                          &mqd_mgmt_n_owner_ops, &mqd_mgmt_n_config_ops,
                                          &mqd_mgmt_n_user_ops, &mqd_mgmt_n_route_ops};

static const mqd_mgmt_op_t *op_find(const char *type, const char *op)
{
    for (size_t t = 0; t < MQD_ARRAY_LEN(op_tables); t++) {
        size_t n = op_counts[t] ? *op_counts[t] : MQD_ARRAY_LEN(broker_ops);
        for (size_t i = 0; i < n; i++)
            if (strcmp(op_tables[t][i].type, type) == 0 && strcmp(op_tables[t][i].op, op) == 0)
                return &op_tables[t][i];
    }
    return NULL;
}

static void call_op(mqd_mgmt_req_t *r, const mqd_mgmt_op_t *op)
{
    r->status = op->fn(r);
    if (r->status >= 300)
        pn_data_clear(r->out); /* a partly built body must not go out with an error */
    if (mqd_mgmt_audited(r->op)) /* over AMQP and from the console alike */
        mqd_mgmt_audit(r);
}

static const char *default_desc(int status);

static void run_request(mqd_mgmt_req_t *r)
{
    r->op = mqd_mgmt_arg_str(r, "operation");
    r->type = mqd_mgmt_arg_str(r, "type");
    r->name = json_is_string(json_object_get(r->props, "name"))
                  ? json_string_value(json_object_get(r->props, "name"))
                  : NULL;
    if (!r->op || !r->type) {
        mqd_mgmt_fail(r, 400, "application properties 'operation' and 'type' are required");
        return;
    }
    const mqd_mgmt_op_t *op = op_find(r->type, r->op);
    if (!op) {
        mqd_mgmt_fail(r, 501, "operation %s is not implemented for type %s", r->op, r->type);
        return;
    }
    /* every check below reads names as C strings */
    if (mqd_mgmt_check_strings(r) != 0 || mqd_mgmt_authorize(r, op) != 0) {
        if (mqd_mgmt_audited(r->op))
            mqd_mgmt_audit(r); /* refused attempts belong in the trail too */
        return;
    }
    call_op(r, op);
    MQD_DEBUG("mgmt", "%s %s name=%s -> %d %s", r->op, r->type, r->name ? r->name : "-",
              r->status, r->desc);
}

int mqd_mgmt_call(struct mqd_server *s, const char *actor, const char *type, const char *op,
                  json_t *args, json_t **reply, char *desc, size_t desclen)
{
    mqd_mgmt_req_t r = {.s = s, .actor = actor, .op = op, .type = type};
    const mqd_mgmt_op_t *o = op_find(type, op);
    *reply = NULL;
    r.props = json_is_object(args) ? json_incref(args) : json_object();
    json_t *body = json_object_get(r.props, "$body"); /* the request body (UPDATE's settings) */
    if (json_is_object(body)) {
        r.body = json_incref(body);
        json_object_del(r.props, "$body");
    }
    r.out = pn_data(16);
    json_t *nm = json_object_get(r.props, "name");
    r.name = json_is_string(nm) ? json_string_value(nm) : NULL;
    if (!r.props || !r.out)
        mqd_mgmt_fail(&r, 500, "out of memory");
    else if (!o || strcmp(op, "CREATE") == 0) /* CREATE may answer later: AMQP only */
        mqd_mgmt_fail(&r, 501, "operation %s is not implemented for type %s", op, type);
    else if (mqd_mgmt_check_strings(&r) == 0 && mqd_mgmt_authorize(&r, o) == 0)
        call_op(&r, o);
    else if (mqd_mgmt_audited(op))
        mqd_mgmt_audit(&r); /* a refusal: the trail has it, as on AMQP */
    if (r.out && r.status < 300) {
        pn_data_rewind(r.out);
        if (pn_data_next(r.out))
            *reply = mqd_mgmt_data_to_json(r.out, 0);
    }
    snprintf(desc, desclen, "%s", r.desc[0] ? r.desc : default_desc(r.status));
    MQD_DEBUG("mgmt", "%s %s name=%s by %s -> %d %s", op, type, r.name ? r.name : "-",
              mqd_mgmt_actor(&r), r.status, desc);
    json_decref(r.props);
    json_decref(r.body);
    if (r.out)
        pn_data_free(r.out);
    return r.status;
}

/* ---------------------------------------------------------------- request / reply */

/* Decodes application-properties (as a JSON object) and an amqp-value body. */
static int decode_request(const uint8_t *req, size_t len, const mqd_msg_info_t *mi, json_t **props,
                          json_t **body)
{
    *props = NULL;
    *body = NULL;
    if (mi->app_props.len)
        *props = mqd_mgmt_decode_json((const char *)req + mi->app_props.off, mi->app_props.len);
    if (!*props)
        *props = json_object();
    if (!json_is_object(*props)) {
        json_decref(*props);
        *props = json_object();
    }
    if (mi->body_off < len) {
        json_t *b = mqd_mgmt_decode_json((const char *)req + mi->body_off, len - mi->body_off);
        if (json_is_object(b))
            *body = b;
        else
            json_decref(b);
    }
    return *props ? 0 : MQD_ENOMEM;
}

static void set_status_props(pn_message_t *m, int status, const char *desc, const char *cond)
{
    pn_data_t *ap = pn_message_properties(m);
    pn_data_put_map(ap);
    pn_data_enter(ap);
    /* both spellings: the draft's statusCode and the one Azure/Qpid tools also read */
    mqd_mgmt_kv_int(ap, "statusCode", status);
    mqd_mgmt_kv_int(ap, "status-code", status);
    mqd_mgmt_kv_str(ap, "statusDescription", desc);
    mqd_mgmt_kv_str(ap, "status-description", desc);
    if (cond) { /* the condition the Azure SDKs turn a refusal into */
        pn_data_put_string(ap, pn_bytes(15, "error-condition"));
        pn_data_put_symbol(ap, pn_bytes(strlen(cond), cond));
    }
    pn_data_exit(ap);
}

static const char *default_desc(int status)
{
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 409: return "Conflict";
    case 501: return "Not Implemented";
    default: return "Internal Server Error";
    }
}

static int build_reply(mqd_mgmt_req_t *r, const uint8_t *req, const mqd_msg_info_t *mi,
                       pn_message_t *m, mqd_buf_t *out)
{
    char to[MQD_NAME_MAX * 2 + 2];
    if (mi->reply_to.len == 0 || mi->reply_to.len >= sizeof to)
        return MQD_EINVAL;
    memcpy(to, req + mi->reply_to.off, mi->reply_to.len);
    to[mi->reply_to.len] = '\0';
    pn_message_set_address(m, to);
    mqd_span_t id = mi->message_id.len ? mi->message_id : mi->correlation_id;
    if (id.len && pn_data_decode(pn_message_correlation_id(m), (const char *)req + id.off, id.len) < 0)
        pn_data_clear(pn_message_correlation_id(m));
    set_status_props(m, r->status, r->desc[0] ? r->desc : default_desc(r->status), r->cond);
    out->len = 0;
    return mqd_message_encode(m, out, 1024);
}

struct mqd_mgmt_later {
    struct mqd_server *s;
    char node[MQD_NAME_MAX + 1]; /* the reply node the request's connection had */
    size_t len;
    uint8_t req[]; /* the request message */
};

mqd_mgmt_later_t *mqd_mgmt_defer(mqd_mgmt_req_t *r)
{
    mqd_mgmt_later_t *l = malloc(sizeof *l + r->req_len);
    if (!l)
        return NULL;
    l->s = r->s;
    snprintf(l->node, sizeof l->node, "%s", r->reply_node ? r->reply_node : "");
    l->len = r->req_len;
    memcpy(l->req, r->req, r->req_len);
    r->deferred = true;
    return l;
}

void mqd_mgmt_later_free(mqd_mgmt_later_t *l)
{
    free(l);
}

/* Appends a late reply to the reply node its request was accepted for, if it is still
 * there: a temporary node of the requesting connection (its name is never reused). */
static void deliver_reply(struct mqd_server *s, const char *node, const mqd_buf_t *out)
{
    mqd_topic_t *t = mqd_topic_find(s, node);
    if (!t || !mqd_topic_temporary(t) ||
        mqd_part_append(mqd_topic_part(t, 0), out->p, out->len, NULL, NULL, NULL) != 0)
        MQD_INFO_RL("mgmt", "a late reply found no reply node %s", node);
}

void mqd_mgmt_finish(mqd_mgmt_later_t *l, int status, const char *desc,
                     void (*fill)(pn_data_t *body, void *arg), void *arg)
{
    mqd_msg_info_t mi;
    mqd_buf_t out = {0};
    pn_message_t *m = pn_message();
    if (m && mqd_msg_scan(l->req, l->len, &mi) == 0) {
        mqd_mgmt_req_t r = {.s = l->s, .out = pn_message_body(m), .status = status};
        snprintf(r.desc, sizeof r.desc, "%s", desc ? desc : "");
        if (fill && status < 300)
            fill(r.out, arg);
        if (build_reply(&r, l->req, &mi, m, &out) == 0)
            deliver_reply(l->s, l->node, &out);
    }
    if (m)
        pn_message_free(m);
    mqd_buf_free(&out);
    free(l);
}

/* A request to the node (entity NULL) or to a Service Bus entity's node. */
static int handle(struct mqd_server *s, struct mqd_conn *c, const char *entity, const uint8_t *req,
                  size_t len, const char *reply_node, mqd_buf_t *out)
{
    mqd_msg_info_t mi;
    if (mqd_msg_scan(req, len, &mi) != 0 || mi.reply_to.len == 0)
        return MQD_EINVAL; /* nowhere to send an answer */
    pn_message_t *m = pn_message();
    if (!m)
        return MQD_ENOMEM;
    mqd_mgmt_req_t r = {.s = s,
                        .c = c,
                        .out = pn_message_body(m),
                        .req = req,
                        .req_len = len,
                        .reply_node = reply_node};
    if (len > MGMT_MAX_REQUEST)
        mqd_mgmt_fail(&r, 400, "request larger than %d bytes", MGMT_MAX_REQUEST);
    else if (decode_request(req, len, &mi, &r.props, &r.body) != 0)
        mqd_mgmt_fail(&r, 500, "out of memory");
    else if (entity)
        mqd_mgmt_sbus_run(&r, entity, req, len, &mi);
    else
        run_request(&r);
    out->len = 0;
    int rc = r.deferred ? 0 : build_reply(&r, req, &mi, m, out);
    json_decref(r.props);
    json_decref(r.body);
    pn_message_free(m);
    return rc;
}

int mqd_mgmt_handle(struct mqd_server *s, struct mqd_conn *c, const uint8_t *req, size_t len,
                    const char *reply_node, mqd_buf_t *out)
{
    return handle(s, c, NULL, req, len, reply_node, out);
}

int mqd_mgmt_entity_handle(struct mqd_server *s, struct mqd_conn *c, const char *entity,
                           const uint8_t *req, size_t len, const char *reply_node,
                           mqd_buf_t *out)
{
    return handle(s, c, entity, req, len, reply_node, out);
}
