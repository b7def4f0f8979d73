/* Redirects for clients that can use them (issue 33 point 4).
 *
 * amqp:link:redirect on request. A link asks for it with the link property `mqd:redirect`
 * = true (symbol or string key, a boolean value; "true"/"false" as a string or symbol
 * too, as some clients send every property as text), or with the desired capability
 * `amqp:link:redirect` on the attach (as the Event Hubs SDKs' receiver-redirect option
 * asks the service: Azure/azure-sdk-for-js PR 7782; Proton 0.37 does not expose a link's
 * desired capabilities, so the frame peek reads them: codec/framepeek.c) or on its
 * connection's open (Azure/azure-sdk-for-python PR 9490). mqd_link_route consults
 * mqd_link_wants_redirect when the partition is led elsewhere: such a link is always
 * answered with the redirect; what a link that did not ask gets is the routing default
 * (today also the redirect).
 *
 * amqp:connection:redirect under connection_redirect (idle | always): decided when a
 * client connection's link first names a topic, by repl's conn_redirect hook (which node,
 * and whether this one should keep the client); the connection is closed with the
 * condition and its info map {hostname, network-host, port} (AMQP 1.0 2.8.17; what Qpid
 * JMS's failover reads). Links to $management, $cbs, dynamic or temporary nodes and the
 * transaction coordinator are served here first, so mqctl and the SDKs' CBS and
 * management requests work against such a node; node connections (a node certificate's
 * login, replication_user, a container id mqd-node-N) are never redirected. */
#include "config.h"
#include "amqp/amqp_int.h"

#include <proton/condition.h>
#include <proton/object.h>
#include <proton/terminus.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define PROP_REDIRECT "mqd:redirect"
#define CAP_REDIRECT "amqp:link:redirect"

/* The link's record entry set when its attach desired amqp:link:redirect (the peek saw
 * it): Proton keeps no link field for it. */
PN_HANDLE(MQD_WANTS_REDIRECT)

static bool bytes_eq(pn_bytes_t b, const char *s)
{
    return b.size == strlen(s) && memcmp(b.start, s, b.size) == 0;
}

/* A symbol or string at d's current position, else an empty one. */
static pn_bytes_t text_of(pn_data_t *d)
{
    pn_type_t t = pn_data_type(d);
    return t == PN_SYMBOL   ? pn_data_get_symbol(d)
           : t == PN_STRING ? pn_data_get_string(d)
                            : pn_bytes(0, "");
}

pn_data_t *mqd_link_prop(pn_link_t *l, const char *key)
{
    pn_data_t *d = pn_link_remote_properties(l);
    if (!d || pn_data_size(d) == 0)
        return NULL;
    pn_data_rewind(d);
    if (!pn_data_next(d) || pn_data_type(d) != PN_MAP)
        return NULL;
    pn_data_enter(d);
    while (pn_data_next(d)) {
        bool is_key = bytes_eq(text_of(d), key);
        if (!pn_data_next(d))
            break;
        if (is_key)
            return d;
    }
    pn_data_exit(d);
    return NULL;
}

/* amqp.h */
bool mqd_link_prop_true(pn_link_t *l, const char *key)
{
    pn_data_t *d = mqd_link_prop(l, key);
    if (!d)
        return false;
    bool on = pn_data_type(d) == PN_BOOL && pn_data_get_bool(d);
    pn_data_exit(d);
    return on;
}

/* The link property mqd:redirect: 0 (*want set; false when absent) or MQD_EINVAL when its
 * value is not a boolean. */
static int redirect_prop(pn_link_t *l, bool *want)
{
    pn_data_t *d = mqd_link_prop(l, PROP_REDIRECT);
    int rc = 0;
    *want = false;
    if (!d)
        return 0;
    pn_bytes_t v = text_of(d);
    if (pn_data_type(d) == PN_BOOL)
        *want = pn_data_get_bool(d);
    else if (bytes_eq(v, "true") || bytes_eq(v, "false"))
        *want = bytes_eq(v, "true");
    else
        rc = MQD_EINVAL;
    pn_data_exit(d);
    return rc;
}

/* Does the symbol array (or single symbol) d hold `cap`? A list of symbols counts too
 * (Proton's Python binding encodes a connection's capabilities given as a list so). */
static bool has_symbol(pn_data_t *d, const char *cap)
{
    if (!d || pn_data_size(d) == 0)
        return false;
    pn_data_rewind(d);
    if (!pn_data_next(d))
        return false;
    if (pn_data_type(d) == PN_SYMBOL)
        return bytes_eq(pn_data_get_symbol(d), cap);
    if (pn_data_type(d) != PN_ARRAY && pn_data_type(d) != PN_LIST)
        return false;
    bool found = false;
    pn_data_enter(d);
    while (!found && pn_data_next(d))
        found = pn_data_type(d) == PN_SYMBOL && bytes_eq(pn_data_get_symbol(d), cap);
    pn_data_exit(d);
    return found;
}

bool mqd_link_wants_redirect(pn_link_t *l)
{
    bool want = false;
    if (redirect_prop(l, &want) == 0 && want)
        return true;
    if (pn_record_get(pn_link_attachments(l), MQD_WANTS_REDIRECT))
        return true;
    pn_connection_t *pc = pn_session_connection(pn_link_session(l));
    return has_symbol(pn_connection_remote_desired_capabilities(pc), CAP_REDIRECT);
}

/* ---------------------------------------------------------------- connections */

/* A connection of another node (fetch, forwarding): never sent elsewhere. */
static bool node_connection(mqd_conn_t *c, pn_connection_t *pc)
{
    const mqd_conf_t *conf = mqd_srv_conf(mqd_conn_srv(c));
    const char *container = pn_connection_remote_container(pc);
    return mqd_conn_client(c) || mqd_auth_conn_is_node(c) ||
           (conf->replication_user && *conf->replication_user &&
            strcmp(mqd_conn_user(c), conf->replication_user) == 0) ||
           (container && strncmp(container, "mqd-node-", 9) == 0);
}

/* The topic and partition (-1: all) a client link names; false for what a node serves
 * itself whatever it leads: $management, $cbs, dynamic and temporary nodes, the
 * coordinator, the anonymous relay, and addresses that do not parse (refused as usual). */
static bool link_topic(pn_link_t *l, mqd_addr_t *a, int64_t *part)
{
    pn_terminus_t *tm =
        pn_link_is_receiver(l) ? pn_link_remote_target(l) : pn_link_remote_source(l);
    const char *addr = pn_terminus_get_address(tm);
    if (pn_terminus_get_type(tm) == PN_COORDINATOR || pn_terminus_is_dynamic(tm) || !addr ||
        strncmp(addr, "$tmp.", 5) == 0 || mqd_addr_parse(addr, strlen(addr), a) != 0 ||
        a->kind == MQD_ADDR_MANAGEMENT || a->kind == MQD_ADDR_CBS)
        return false;
    *part = a->kind == MQD_ADDR_PARTITION || a->kind == MQD_ADDR_GROUP_PARTITION
                ? (int64_t)a->partition
                : -1;
    return true;
}

void mqd_redirect_condition(pn_condition_t *cond, const char *name, const char *desc,
                            const mqd_redirect_t *to, bool connection)
{
    pn_condition_set_name(cond, name);
    pn_condition_set_description(cond, desc);
    pn_data_t *info = pn_condition_info(cond);
    pn_data_clear(info);
    pn_data_put_map(info);
    pn_data_enter(info);
    if (connection) { /* the host to name in the new connection's open */
        pn_data_put_symbol(info, pn_bytes(8, "hostname"));
        pn_data_put_string(info, pn_bytes(strlen(to->host), to->host));
    }
    pn_data_put_symbol(info, pn_bytes(12, "network-host"));
    pn_data_put_string(info, pn_bytes(strlen(to->host), to->host));
    pn_data_put_symbol(info, pn_bytes(4, "port"));
    pn_data_put_ushort(info, to->port);
    if (!connection) {
        pn_data_put_symbol(info, pn_bytes(7, "address"));
        pn_data_put_string(info, pn_bytes(strlen(to->address), to->address));
    }
    pn_data_exit(info);
}

static void close_redirected(mqd_conn_t *c, pn_connection_t *pc, const mqd_redirect_t *to)
{
    char desc[400];
    snprintf(desc, sizeof desc, "this node hands its clients to another: connect to %.255s:%u",
             to->host, (unsigned)to->port);
    mqd_redirect_condition(pn_connection_condition(pc), "amqp:connection:redirect", desc, to, true);
    pn_connection_close(pc);
    mqd_conn_mark_dirty(c);
    mqd_srv_count_redirect(mqd_conn_srv(c), MQD_REDIRECT_CONNECTION);
    MQD_INFO("conn", "redirected connection %s to %s:%u (connection_redirect)", mqd_conn_peer(c),
             to->host, (unsigned)to->port);
}

bool mqd_link_attach_redirects(mqd_conn_t *c, pn_link_t *l)
{
    bool want;
    mqd_fpeek_t *peek = mqd_conn_peek(c);
    const char *name = pn_link_name(l);
    if (peek && mqd_fpeek_redirect_take(peek, name, strlen(name), pn_link_is_sender(l))) {
        pn_record_t *rec = pn_link_attachments(l);
        pn_record_def(rec, MQD_WANTS_REDIRECT, PN_VOID);
        pn_record_set(rec, MQD_WANTS_REDIRECT, (void *)1);
    }
    if (redirect_prop(l, &want) != 0) {
        mqd_link_refuse(l, "amqp:invalid-field",
                        "link property mqd:redirect must be a boolean (true: answer a link to "
                        "a partition led elsewhere with amqp:link:redirect)%s",
                        "");
        return true;
    }
    mqd_server_t *s = mqd_conn_srv(c);
    const mqd_repl_hooks_t *rh = mqd_srv_repl(s);
    int mode = mqd_srv_conf(s)->connection_redirect;
    pn_connection_t *pc = pn_session_connection(pn_link_session(l));
    mqd_addr_t a;
    int64_t part;
    mqd_redirect_t to;
    if (mode == MQD_CONN_REDIRECT_OFF || !rh->conn_redirect)
        return false;
    if (pn_connection_state(pc) & PN_LOCAL_CLOSED)
        return true; /* redirected already: its other links' attaches go unanswered */
    if (node_connection(c, pc) || !link_topic(l, &a, &part) ||
        !rh->conn_redirect(rh->arg, mode, a.topic, part, &to))
        return false;
    close_redirected(c, pc, &to);
    return true;
}
