/* Proton event handling: connection, session and link lifecycle, producer transfers
 * (append, settle when stable) and management requests. Consumers are in consumer.c. */
#include "config.h"
#include "amqp/amqp_int.h"
#include "mgmt/mgmt.h"

#include <proton/condition.h>
#include <proton/disposition.h>
#include <proton/object.h>
#include <proton/sasl.h>
#include <proton/terminus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STICKY_BURST 64

/* AMQP 1.0 2.8.17: amqp:link:redirect with the leader in the info map (network-host,
 * port, address), as Artemis and Service Bus send it: the condition l is closed with. */
static void redirect_condition(pn_link_t *l, const mqd_redirect_t *to)
{
    char desc[400];
    snprintf(desc, sizeof desc, "not the leader: attach to %.255s:%u", to->host,
             (unsigned)to->port);
    mqd_redirect_condition(pn_link_condition(l), "amqp:link:redirect", desc, to, false);
}

void mqd_link_redirect(pn_link_t *l, const mqd_redirect_t *to)
{
    redirect_condition(l, to);
    pn_link_open(l);
    pn_link_close(l);
    MQD_INFO("link", "redirected attach to %s:%u", to->host, (unsigned)to->port);
}

void mqd_link_detach_redirect(mqd_lstate_t *ls, const mqd_redirect_t *to)
{
    char desc[400];
    redirect_condition(mqd_ls_link(ls), to); /* the info; name and text again below */
    snprintf(desc, sizeof desc, "%s",
             pn_condition_get_description(pn_link_condition(mqd_ls_link(ls))));
    mqd_consumer_detach(ls, "amqp:link:redirect", desc);
}

/* The peer's link property `key` when its value is a symbol or a string: true with *v
 * (into the link's properties); false when absent or another type (*v then empty,
 * *present whether the key was there). */
static bool link_prop(pn_link_t *l, const char *key, pn_bytes_t *v, bool *present)
{
    pn_data_t *d = mqd_link_prop(l, key);
    *v = pn_bytes(0, "");
    *present = d != NULL;
    if (!d)
        return false;
    pn_type_t vt = pn_data_type(d);
    bool found = vt == PN_SYMBOL || vt == PN_STRING;
    *v = vt == PN_SYMBOL ? pn_data_get_symbol(d) : vt == PN_STRING ? pn_data_get_string(d) : *v;
    pn_data_exit(d);
    return found;
}

/* The sender's link property mqd:acks (leader | quorum | all), if it gave one. */
static int link_acks(pn_link_t *l, bool *set, uint8_t *acks)
{
    static const char *const names[] = {"leader", "quorum", "all"};
    pn_bytes_t v;
    bool present;
    *set = false;
    link_prop(l, "mqd:acks", &v, &present);
    if (!present)
        return 0;
    for (uint8_t i = 0; i < MQD_ARRAY_LEN(names); i++)
        if (v.size == strlen(names[i]) && memcmp(v.start, names[i], v.size) == 0) {
            *acks = i;
            *set = true;
            return 0;
        }
    return MQD_EINVAL;
}

/* Answers a link taken with mqd:batch with the same property: the entry node forwards
 * batches on it only when the leader says it reads them so. */
static void echo_batch(pn_link_t *l)
{
    pn_data_t *d = pn_link_properties(l);
    pn_data_clear(d);
    pn_data_put_map(d);
    pn_data_enter(d);
    pn_data_put_symbol(d, pn_bytes(strlen("mqd:batch"), "mqd:batch"));
    pn_data_put_bool(d, true);
    pn_data_exit(d);
}

/* amqp_int.h */
const char *mqd_link_fwd_user(mqd_conn_t *c, pn_link_t *l, char *buf, size_t cap, bool *present)
{
    const char *ru = mqd_srv_conf(mqd_conn_srv(c))->replication_user;
    pn_bytes_t v;
    if (!link_prop(l, "mqd:fwd-user", &v, present) || v.size >= cap)
        return NULL;
    if (!mqd_auth_conn_is_node(c) && !(ru && ru[0] && strcmp(mqd_conn_user(c), ru) == 0))
        return NULL;
    memcpy(buf, v.start, v.size);
    buf[v.size] = '\0';
    return buf;
}

mqd_lstate_t *mqd_lstate_new(mqd_conn_t *c, pn_link_t *l, mqd_ls_kind_t kind)
{
    mqd_lstate_t *ls = mqd_ls_alloc(kind, c, l);
    mqd_alink_t *al = ls ? calloc(1, sizeof *al) : NULL;
    if (!al) {
        if (ls)
            mqd_ls_dealloc(ls);
        return NULL;
    }
    mqd_ls_set_amqp(ls, al);
    pn_link_set_context(l, ls);
    return ls;
}

/* Also a link state repl/ made (MQD_LS_REPL, with no amqp part). */
void mqd_lstate_free(mqd_lstate_t *ls)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_conn_t *c = mqd_ls_conn(ls);
    mqd_topic_t *t = mqd_ls_topic(ls);
    mqd_ls_kind_t kind = mqd_ls_kind(ls);
    bool consumer = kind == MQD_LS_CONSUMER || kind == MQD_LS_BROWSER;
    if (consumer)
        mqd_consumer_free(ls);
    if (mqd_ls_coord(ls))
        mqd_txn_coordinator_gone(ls); /* rolls back what it declared */
    mqd_repl_hooks_t *rh = mqd_srv_repl(mqd_conn_srv(c));
    if (kind == MQD_LS_REPL && rh->link_gone)
        rh->link_gone(rh->arg, ls);
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(mqd_conn_srv(c));
    if (kind == MQD_LS_PRODUCER && fh->link_gone)
        fh->link_gone(fh->arg, ls);
    if (kind == MQD_LS_FWD && fh->recv_gone)
        fh->recv_gone(fh->arg, ls);
    mqd_credit_free(ls);
    mqd_dlist_del(mqd_ls_tnode(ls));
    mqd_budget_partial(c, -(int64_t)(al ? al->acc_cap : 0));
    if (al)
        free(al->acc);
    free(mqd_ls_tmp_name(ls));
    if (al)
        free(al->fwd_name);
    if (consumer && t && mqd_topic_temporary(t) && mqd_dlist_empty(mqd_topic_consumers(t)))
        mqd_topic_delete(mqd_topic_srv(t), t);
    free(al);
    mqd_ls_dealloc(ls);
}

/* ---------------------------------------------------------------- producers */

/* Auto-creation of a missing topic: on in the config and the `create` permission. */
bool mqd_may_create(mqd_conn_t *c, const char *topic)
{
    mqd_server_t *s = mqd_conn_srv(c);
    if (!mqd_srv_conf(s)->auto_create_topics || strncmp(topic, "$tmp.", 5) == 0)
        return false;
    return mqd_topic_find(s, topic) || mqd_auth_allowed(c, MQD_PERM_CREATE, topic);
}

/* mqd_may_create for a topic this node has no copy of, without logging a refusal (the
 * cluster's route hook asks before the create itself is tried). */
static bool may_create_quiet(mqd_conn_t *c, const char *topic)
{
    mqd_server_t *s = mqd_conn_srv(c);
    return mqd_srv_conf(s)->auto_create_topics && strncmp(topic, "$tmp.", 5) != 0 &&
           mqd_auth_may(c, MQD_PERM_CREATE, topic) && mqd_topic_may_create_now(c, topic);
}

bool mqd_create_forbidden(mqd_conn_t *c, const char *topic)
{
    mqd_server_t *s = mqd_conn_srv(c);
    if (!mqd_srv_conf(s)->auto_create_topics || strncmp(topic, "$tmp.", 5) == 0)
        return false;
    return !mqd_topic_find(s, topic) && !mqd_auth_may(c, MQD_PERM_CREATE, topic);
}

static void put_symbols(pn_data_t *d, const char *const *syms, size_t n)
{
    pn_data_clear(d);
    pn_data_put_array(d, false, PN_SYMBOL);
    pn_data_enter(d);
    for (size_t i = 0; i < n; i++)
        pn_data_put_symbol(d, pn_bytes(strlen(syms[i]), syms[i]));
    pn_data_exit(d);
}

/* The transaction coordinator: a target of type coordinator. */
static void coordinator_attach(mqd_conn_t *c, pn_link_t *l)
{
    static const char *const caps[] = {"amqp:local-transactions", "amqp:multi-txns-per-ssn",
                                       "amqp:multi-ssns-per-txn"};
    mqd_lstate_t *ls = mqd_lstate_new(c, l, MQD_LS_PRODUCER);
    if (!ls)
        return mqd_link_refuse(l, "amqp:resource-limit-exceeded", "out of memory%s", "");
    mqd_ls_set_coord(ls, true);
    pn_terminus_t *lt = pn_link_target(l);
    pn_terminus_set_type(lt, PN_COORDINATOR);
    put_symbols(pn_terminus_capabilities(lt), caps, MQD_ARRAY_LEN(caps));
    pn_terminus_copy(pn_link_source(l), pn_link_remote_source(l));
    pn_link_set_rcv_settle_mode(l, PN_RCV_FIRST);
    pn_link_open(l);
    mqd_credit_grant(ls, 100);
}

/* A forwarded link (mqd:fwd-user) is authorized as the client's user, by the same
 * rules as the client's own attach on its node (least privilege on both). */
static bool fwd_user_may(mqd_conn_t *c, const char *user, const char *topic)
{
    mqd_server_t *s = mqd_conn_srv(c);
    if ((user[0] || mqd_srv_conf(s)->allow_anonymous) &&
        mqd_auth_user_may(s, user, MQD_PERM_SEND, topic))
        return true;
    MQD_INFO("auth", "denied send on %s to user %s (forwarded by peer %s)", topic,
             user[0] ? user : "anonymous", mqd_conn_peer(c));
    return false;
}

/* Where a producer link goes in a cluster: with forwarding (src/fwd) it is served on any
 * node that holds the topic, each message forwarded to its partition's leader; a link
 * another node forwarded (fwd_in) only on the partition's leader (never forwarded again:
 * the entry node resolves the leader again when refused). A link that asks for a
 * redirect (redirect.c) gets one instead when its partition is led elsewhere. */
static int producer_route(mqd_conn_t *c, pn_link_t *l, const char *topic, int64_t part,
                          mqd_topic_t *t, bool fwd_in)
{
    mqd_repl_hooks_t *rh = mqd_srv_repl(mqd_conn_srv(c));
    if (!fwd_in && !mqd_link_wants_redirect(l) && rh->route_send &&
        mqd_srv_fwd(mqd_conn_srv(c))->send && rh->route_send(rh->arg, topic, t))
        return MQD_ROUTE_HERE;
    return mqd_link_route(c, l, topic, part, t);
}

/* A producer link to cluster topic `topic` that this node holds no copy of (its
 * replication_factor is below the node count): served here, every message forwarded.
 * True when the link was answered (opened by the caller, or refused here). */
static bool producer_nocopy(mqd_conn_t *c, mqd_lstate_t *ls, const mqd_addr_t *a,
                            const char *addr)
{
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(mqd_conn_srv(c));
    mqd_alink_t *al = mqd_ls_amqp(ls);
    pn_link_t *l = mqd_ls_link(ls);
    uint32_t n = fh->nparts ? fh->nparts(fh->arg, a->topic) : 0;
    if (mqd_topic_find(mqd_conn_srv(c), a->topic) || n == 0 || al->fwd_in)
        return false;
    if (a->kind == MQD_ADDR_PARTITION && a->partition >= n) {
        mqd_link_refuse(l, "amqp:not-found", "no such partition: '%s'", addr);
        return true;
    }
    if (link_acks(l, &al->acks_set, &al->acks) != 0) {
        mqd_link_refuse(l, "amqp:invalid-field",
                        "link property mqd:acks must be leader, quorum or all%s", "");
        return true;
    }
    if (!(al->fwd_name = strdup(a->topic))) {
        mqd_link_refuse(l, "amqp:resource-limit-exceeded", "out of memory%s", "");
        return true;
    }
    al->fixed_part = a->kind == MQD_ADDR_PARTITION;
    mqd_ls_set_part(ls, a->partition);
    return false;
}

static void producer_attach(mqd_conn_t *c, pn_link_t *l)
{
    mqd_server_t *s = mqd_conn_srv(c);
    pn_terminus_t *rt = pn_link_remote_target(l);
    if (pn_terminus_get_type(rt) == PN_COORDINATOR)
        return coordinator_attach(c, l);
    const char *addr = pn_terminus_get_address(rt);
    mqd_lstate_t *ls = mqd_lstate_new(c, l, MQD_LS_PRODUCER);
    if (!ls)
        return mqd_link_refuse(l, "amqp:resource-limit-exceeded", "out of memory%s", "");
    mqd_alink_t *al = mqd_ls_amqp(ls);
    char entity[MQD_NAME_MAX + 1];
    if (addr && mqd_reply_entity_node(addr, entity, sizeof entity)) {
        /* a Service Bus entity's node: requests authorized per operation on the entity */
        char *e = strdup(entity);
        if (!e)
            return mqd_link_refuse(l, "amqp:resource-limit-exceeded", "out of memory%s", "");
        mqd_ls_set_mgmt(ls, true);
        mqd_ls_set_tmp_name(ls, e); /* on a management link: the entity */
        goto open;
    }
    if (addr) {
        mqd_addr_t a;
        if (mqd_addr_parse(addr, strlen(addr), &a) != 0 ||
            (a.kind != MQD_ADDR_TOPIC && a.kind != MQD_ADDR_PARTITION &&
             a.kind != MQD_ADDR_MANAGEMENT && a.kind != MQD_ADDR_CBS))
            return mqd_link_refuse(l, "amqp:not-found", "cannot send to address '%s'", addr);
        if (a.kind == MQD_ADDR_CBS) {
            mqd_ls_set_mgmt(ls, true); /* served like $management, by auth/cbs.c */
            mqd_ls_set_cbs(ls, true);
            goto open;
        }
        if (a.kind == MQD_ADDR_MANAGEMENT) {
            mqd_ls_set_mgmt(ls, true);
            if (mqd_auth_may(c, MQD_PERM_MANAGE, "$management"))
                mqd_ls_set_acl_perm(ls, MQD_PERM_MANAGE); /* a reload that takes it detaches */
            goto open;
        }
        if (mqd_reply_node_is(a.topic)) /* mqd's replies only (reply.c) */
            return mqd_link_refuse(l, "amqp:unauthorized-access",
                                   "'%s' is a reply node: only mqd writes into it", addr);
        char fu_buf[MQD_NAME_MAX + 1];
        const char *fu = mqd_link_fwd_user(c, l, fu_buf, sizeof fu_buf, &al->fwd_in);
        if (fu ? !fwd_user_may(c, fu, a.topic) : !mqd_auth_allowed(c, MQD_PERM_SEND, a.topic))
            return mqd_link_refuse(l, "amqp:unauthorized-access", "not allowed to send to '%s'",
                                   addr);
        if (!fu) /* a forwarded link's user is not the connection's: an ACL reload does not
                    judge it by the connection's */
            mqd_ls_set_acl_perm(ls, MQD_PERM_SEND);
        else if ((al->batch_in = mqd_link_prop_true(l, "mqd:batch")))
            echo_batch(l); /* a batch forwarded per transfer: Proton 0.37's C API sets no
                              transfer's message-format (fwd/send.c) */
        mqd_topic_t *t = mqd_topic_find(s, a.topic);
        int how = producer_route(c, l, a.topic,
                                 a.kind == MQD_ADDR_PARTITION ? (int64_t)a.partition : -1, t,
                                 al->fwd_in);
        if (how == MQD_ROUTE_WAIT) { /* attached again (mqd_amqp_attach_again) */
            pn_link_set_context(l, NULL);
            return mqd_lstate_free(ls);
        }
        if (how != MQD_ROUTE_HERE)
            return; /* refused or redirected */
        if (!t && producer_nocopy(c, ls, &a, addr))
            return; /* refused */
        if (al->fwd_name)
            goto open;
        bool create = mqd_may_create(c, a.topic);
        int trc = mqd_topic_get_as(c, a.topic, create, &t);
        if (trc == MQD_ENOENT && mqd_create_forbidden(c, a.topic))
            return mqd_link_refuse(l, "amqp:unauthorized-access", MQD_CREATE_FORBIDDEN, a.topic);
        if (trc != 0)
            return mqd_link_refuse(l, mqd_topic_get_condition(trc), mqd_topic_get_desc(trc),
                                   a.topic);
        if (a.kind == MQD_ADDR_PARTITION && a.partition >= mqd_topic_nparts(t))
            return mqd_link_refuse(l, "amqp:not-found", "no such partition: '%s'", addr);
        if (link_acks(l, &al->acks_set, &al->acks) != 0)
            return mqd_link_refuse(l, "amqp:invalid-field",
                                   "link property mqd:acks must be leader, quorum or all%s", "");
        al->fixed_part = a.kind == MQD_ADDR_PARTITION;
        mqd_ls_set_part(ls, a.partition);
        if (mqd_topic_temporary(t)) {
            /* a reply node goes away with its receiver: look it up per message */
            char *tmp = strdup(mqd_topic_name(t));
            if (!tmp)
                return mqd_link_refuse(l, "amqp:resource-limit-exceeded", "out of memory%s", "");
            mqd_ls_set_tmp_name(ls, tmp);
        } else {
            mqd_ls_set_topic(ls, t);
        }
    }
open:
    pn_terminus_copy(pn_link_target(l), rt);
    pn_terminus_copy(pn_link_source(l), pn_link_remote_source(l));
    pn_link_set_max_message_size(l, mqd_srv_conf(s)->max_message_size);
    pn_link_set_rcv_settle_mode(l, PN_RCV_FIRST);
    pn_link_open(l);
    mqd_credit_refill(ls);
}

/* The partition of a message among nparts: the link's own (T/Partitions/N, fixed), its
 * key's, its group-id's, else the link's sticky round robin. */
static uint32_t choose_partition_n(mqd_lstate_t *ls, uint32_t nparts, bool fixed,
                                   const uint8_t *p, const mqd_msg_info_t *mi)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    if (fixed)
        return mqd_ls_part(ls);
    if (mi->partition_key.len)
        return mqd_route_key_partition(p + mi->partition_key.off, mi->partition_key.len, nparts);
    if (mi->group_id.len)
        return mqd_route_key_partition(p + mi->group_id.off, mi->group_id.len, nparts);
    if (al->sticky_left == 0) {
        mqd_ls_set_part(ls, (mqd_ls_part(ls) + 1) % nparts);
        al->sticky_left = STICKY_BURST;
    }
    al->sticky_left--;
    return mqd_ls_part(ls) % nparts;
}

static uint32_t choose_partition(mqd_lstate_t *ls, mqd_topic_t *t, const uint8_t *p,
                                 const mqd_msg_info_t *mi)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    bool fixed = al->fixed_part &&
                 (mqd_ls_topic(ls) == t || mqd_ls_tmp_name(ls) || al->fwd_name);
    return choose_partition_n(ls, mqd_topic_nparts(t), fixed, p, mi);
}

/* A relayed message to a topic this node has no copy of, in a cluster: where it is (or
 * that it is being registered) in *desc, with its condition; false: go on here. */
static bool relay_route(mqd_conn_t *c, const char *topic, int64_t part, mqd_topic_t *t,
                        const char **cond, char *desc, size_t desclen)
{
    mqd_repl_hooks_t *rh = mqd_srv_repl(mqd_conn_srv(c));
    mqd_redirect_t to;
    if (!rh->route)
        return false;
    *cond = "amqp:not-found";
    bool created = false;
    int how = rh->route(rh->arg, topic, t, part, !t && may_create_quiet(c, topic), false, &to, cond,
                        desc, desclen, &created);
    if (created)
        mqd_topic_charge_create(c, topic);
    if (how == MQD_ROUTE_REDIRECT) {
        *cond = "amqp:precondition-failed";
        snprintf(desc, desclen, "topic '%.200s' is served by %.200s:%u: send it there", topic,
                 to.host, (unsigned)to.port);
    }
    return how != MQD_ROUTE_HERE;
}

/* Anonymous relay: the topic named by the message's `to`. */
static mqd_topic_t *relay_topic(mqd_conn_t *c, const uint8_t *p, const mqd_msg_info_t *mi,
                                uint32_t *fixed, bool *has_fixed, int *why, const char **cond,
                                char *desc, size_t desclen)
{
    mqd_addr_t a;
    *has_fixed = false;
    *why = MQD_ENOENT;
    if (mi->to.len == 0 || mqd_addr_parse((const char *)p + mi->to.off, mi->to.len, &a) != 0)
        return NULL;
    if (a.kind != MQD_ADDR_TOPIC && a.kind != MQD_ADDR_PARTITION)
        return NULL;
    if (mqd_reply_node_is(a.topic)) { /* mqd's replies only (reply.c) */
        *why = MQD_ESTATE;
        *cond = "amqp:unauthorized-access";
        snprintf(desc, desclen, "the address in `to` is a reply node: only mqd writes into it");
        return NULL;
    }
    mqd_topic_t *t = mqd_topic_find(mqd_conn_srv(c), a.topic);
    if (!t && relay_route(c, a.topic, a.kind == MQD_ADDR_PARTITION ? (int64_t)a.partition : -1, t,
                          cond, desc, desclen)) {
        *why = MQD_ESTATE; /* desc says why */
        return NULL;
    }
    bool create = mqd_may_create(c, a.topic);
    int rc = mqd_topic_get_as(c, a.topic, create, &t);
    if (rc == MQD_ENOENT && mqd_create_forbidden(c, a.topic)) {
        *why = MQD_EFAILED; /* not a missing topic: a missing right */
        return NULL;
    }
    if (rc != 0) {
        *why = rc;
        return NULL;
    }
    if (a.kind == MQD_ADDR_PARTITION) {
        if (a.partition >= mqd_topic_nparts(t))
            return NULL;
        *fixed = a.partition;
        *has_fixed = true;
    }
    return t;
}

/* Pulls what Proton has buffered for the current transfer into the link's buffer, so
 * that Proton's session window reopens while a large message is still arriving. */
static int transfer_accumulate(mqd_conn_t *c, mqd_lstate_t *ls, pn_delivery_t *d)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    size_t pending = pn_delivery_pending(d);
    if (al->acc_len + pending > mqd_srv_conf(mqd_conn_srv(c))->max_message_size)
        return MQD_ETOOBIG;
    if (al->acc_len + pending > al->acc_cap) {
        size_t ncap = al->acc_cap ? al->acc_cap : 4096;
        while (ncap < al->acc_len + pending)
            ncap *= 2;
        if (mqd_budget_partial(c, (int64_t)(ncap - al->acc_cap)) != 0)
            return MQD_EAGAIN; /* over budget: the connection is being closed */
        uint8_t *nb = realloc(al->acc, ncap);
        if (!nb) {
            mqd_budget_partial(c, -(int64_t)(ncap - al->acc_cap));
            return MQD_ENOMEM;
        }
        al->acc = nb;
        al->acc_cap = ncap;
    }
    while (pending > 0) {
        ssize_t got = pn_link_recv(mqd_ls_link(ls), (char *)al->acc + al->acc_len, pending);
        if (got <= 0)
            break;
        al->acc_len += (size_t)got;
        pending = pn_delivery_pending(d);
    }
    return 0;
}

static void message_too_big(mqd_conn_t *c, mqd_lstate_t *ls, pn_delivery_t *d)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    char why[160];
    snprintf(why, sizeof why, "message exceeds max_message_size %llu",
             (unsigned long long)mqd_srv_conf(mqd_conn_srv(c))->max_message_size);
    pn_link_t *l = mqd_ls_link(ls);
    pn_condition_t *lc = pn_link_condition(l);
    pn_condition_set_name(lc, "amqp:link:message-size-exceeded");
    pn_condition_set_description(lc, why);
    mqd_delivery_reject(d, "amqp:link:message-size-exceeded", why);
    pn_link_close(l);
    al->acc_len = 0;
    MQD_INFO("link", "detached producer peer=%s: %s", mqd_conn_peer(c), why);
}

/* A request to $management or $cbs: run only when its reply-to names a reply node of this
 * connection (reply.c), the reply then appended to that node. */
static void management_request(mqd_conn_t *c, mqd_lstate_t *ls, pn_delivery_t *d,
                               const uint8_t *msg, size_t size, bool presettled)
{
    mqd_server_t *s = mqd_conn_srv(c);
    mqd_buf_t *out = mqd_srv_mgmt_out(s);
    mqd_msg_info_t mi;
    char node[MQD_NAME_MAX + 1], why[320] = "management request needs a reply-to with a receiver";
    bool cbs = mqd_ls_cbs(ls);
    int rc = MQD_EINVAL;
    if (mqd_msg_scan(msg, size, &mi) == 0 && mi.reply_to.len > 0) {
        const char *to = (const char *)msg + mi.reply_to.off;
        rc = mqd_reply_resolve(c, to, mi.reply_to.len, node, sizeof node);
        if (rc != 0)
            snprintf(why, sizeof why,
                     "no receiver of this connection reads reply-to '%.*s': attach one from "
                     "$management with that target, or a dynamic one",
                     (int)(mi.reply_to.len > 200 ? 200 : mi.reply_to.len), to);
    }
    if (rc == 0)
        rc = cbs                    ? mqd_auth_cbs_handle(c, msg, size, out)
             : mqd_ls_tmp_name(ls) ? mqd_mgmt_entity_handle(s, c, mqd_ls_tmp_name(ls), msg, size,
                                                            node, out)
                                   : mqd_mgmt_handle(s, c, msg, size, node, out);
    if (rc == 0 && out->len > 0) {
        mqd_topic_t *t = mqd_topic_find(s, node);
        rc =
            t ? mqd_part_append(mqd_topic_part(t, 0), out->p, out->len, c, NULL, NULL) : MQD_ENOENT;
    }
    if (presettled)
        return;
    if (rc != 0)
        return mqd_delivery_reject(d, "amqp:not-found", why);
    pn_delivery_update(d, PN_ACCEPTED);
    pn_delivery_settle(d);
}

/* The topic a send goes to (its link's, its reply node's or its `to`'s), with the ACL
 * check of a relayed send; NULL after rejecting d (unless presettled). */
static mqd_topic_t *send_topic(mqd_conn_t *c, mqd_lstate_t *ls, pn_delivery_t *d,
                               const uint8_t *msg, const mqd_msg_info_t *mi, bool presettled,
                               uint32_t *fixed, bool *has_fixed)
{
    mqd_topic_t *t = mqd_ls_topic(ls);
    const char *tmp_name = mqd_ls_tmp_name(ls);
    *has_fixed = false;
    int why = MQD_ENOENT;
    const char *cond = "amqp:not-found";
    char desc[512] = "";
    const mqd_alink_t *al = mqd_ls_amqp(ls);
    if (tmp_name || al->fwd_name)
        t = mqd_topic_find(mqd_conn_srv(c), tmp_name ? tmp_name : al->fwd_name);
    else if (!t)
        t = relay_topic(c, msg, mi, fixed, has_fixed, &why, &cond, desc, sizeof desc);
    if (!t) {
        if (!presettled && why == MQD_ESTATE)
            mqd_delivery_reject(d, cond, desc);
        else if (!presettled && why == MQD_EAGAIN)
            mqd_delivery_reject(d, "amqp:resource-limit-exceeded",
                                "topic limit reached (max_topics, max_topics_per_connection): "
                                "the address in `to` is not created");
        else if (!presettled && why == MQD_EFAILED)
            mqd_delivery_reject(d, "amqp:unauthorized-access",
                                "not allowed to create the topic in `to`: the ACL grants no "
                                "'create' right on it");
        else if (!presettled)
            mqd_delivery_reject(d, "amqp:not-found", "no such address in `to`");
        return NULL;
    }
    if (!mqd_ls_topic(ls) && !tmp_name && !mqd_auth_allowed(c, MQD_PERM_SEND, mqd_topic_name(t))) {
        if (!presettled)
            mqd_delivery_reject(d, "amqp:unauthorized-access",
                                "not allowed to send to this address");
        return NULL;
    }
    return t;
}

static void append_failed(mqd_topic_t *t, uint32_t part, pn_delivery_t *d, bool presettled, int rc)
{
    MQD_WARN_RL("link", "append to %s/%u failed: %s", mqd_topic_name(t), part, mqd_strerror(rc));
    char desc[512];
    if (!presettled && rc == MQD_EFAILED) /* the partition failed: say why (partfail.c) */
        mqd_delivery_reject(d, mqd_part_fail_condition(mqd_topic_part(t, part), desc, sizeof desc),
                            desc);
    else if (!presettled)
        mqd_delivery_reject(d, "amqp:resource-limit-exceeded", mqd_strerror(rc));
}

/* The disk budget refuses a message (watermark.c): it is not stored. */
static void disk_full(pn_delivery_t *d, bool presettled)
{
    if (!presettled)
        mqd_delivery_reject(d, "amqp:resource-limit-exceeded",
                            "not stored: free disk space on the broker is at disk_free_limit");
}

/* ---------------------------------------------------------------- batched sends
 *
 * A transfer with message-format MQD_MSG_FORMAT_BATCH (ARCHITECTURE §1, read by the frame
 * peek, framepeek.h) holds one encoded message per data section. Each is stored as its
 * own record, all in the partition the outer message routes to (its x-opt-partition-key,
 * else its group-id, else the link's round robin), and the transfer is held until the
 * last record is stable, like any send. The whole batch is checked before anything is
 * stored: an outer or inner message that does not scan rejects it (amqp:decode-error).
 * Each inner message is deduplicated on its own message-id, as if sent alone (what
 * Artemis does per message; an SDK that resends a batch after a lost disposition gets
 * only the missing messages stored, and the batch accepted). The outer key is stored in
 * each inner message's annotations (x-opt-partition-key), so consumers see it. */
typedef struct batch {
    const uint8_t *base;
    struct inner {
        mqd_span_t at;     /* inside base; len 0 = a duplicate, not stored */
        mqd_msg_info_t mi; /* its scan, made once by batch_collect */
    } * v;
    size_t n, cap;
} batch_t;

static int batch_collect(const uint8_t *inner, size_t len, void *arg)
{
    batch_t *b = arg;
    struct inner *nv = mqd_array_grow(b->v, &b->cap, b->n, sizeof *nv, 16);
    if (!nv)
        return MQD_ENOMEM;
    b->v = nv;
    struct inner *e = &b->v[b->n];
    if (mqd_msg_scan(inner, len, &e->mi) != 0)
        return MQD_EINVAL;
    e->at = (mqd_span_t){.off = (size_t)(inner - b->base), .len = len};
    b->n++;
    return 0;
}

/* Appends the batch's inner messages to partition `part`; d waits for the last (held
 * only if that append succeeded). */
static int batch_append(mqd_conn_t *c, mqd_topic_t *t, uint32_t part, const batch_t *b,
                        const uint8_t *msg, const mqd_msg_info_t *omi, pn_delivery_t *d,
                        bool presettled)
{
    mqd_buf_t *out = mqd_srv_scratch(mqd_conn_srv(c));
    mqd_part_t *pp = mqd_topic_part(t, part);
    size_t last = b->n;
    for (size_t i = 0; i < b->n; i++)
        if (b->v[i].at.len)
            last = i;
    for (size_t i = 0; i < b->n; i++) {
        if (!b->v[i].at.len)
            continue;
        const uint8_t *p = msg + b->v[i].at.off;
        size_t n = b->v[i].at.len;
        const mqd_msg_info_t *mi = &b->v[i].mi;
        if (omi->partition_key.len &&
            (mi->partition_key.len != omi->partition_key.len ||
             memcmp(p + mi->partition_key.off, msg + omi->partition_key.off,
                    mi->partition_key.len))) {
            mqd_msg_ann_t ann = {.pkey = msg + omi->partition_key.off,
                                 .pkey_len = omi->partition_key.len,
                                 .delivery_count = mi->delivery_count,
                                 .pkey_only = true};
            int rc = mqd_msg_annotate(p, n, mi, &ann, out);
            if (rc != 0)
                return rc;
            p = out->p;
            n = out->len;
        }
        pn_delivery_t *dlv = i == last && !presettled ? d : NULL;
        int rc = mqd_part_append_ex(pp, p, n, mqd_rec_data_flags(mi), 0, c, dlv, NULL);
        if (rc != 0)
            return rc;
        if (dlv)
            mqd_delivery_hold(d); /* the partition's pending list settles it when stable */
    }
    return 0;
}

/* The dedup keys of a batch's inner messages: forgotten at once when its partition had
 * failed (waiting == NULL; whatever of it was appended is cut at the resume), else kept
 * with its pending send, which forgets them if the partition fails before they are
 * durable (partfail.c). Without memory for that they stay: a retry would then be taken
 * for a duplicate, as before issue 16. */
static void batch_keys(mqd_topic_t *t, mqd_part_t *p, const batch_t *b, const uint8_t *msg,
                       pn_delivery_t *waiting)
{
    mqd_pending_t *pe = waiting ? mqd_part_pend_tail(p) : NULL;
    if (pe && !(pe->batch_keys = calloc(b->n, sizeof *pe->batch_keys)))
        return;
    for (size_t i = 0; i < b->n; i++) {
        if (!b->v[i].at.len)
            continue; /* a duplicate: its key belongs to the copy stored before */
        uint64_t k = mqd_dedup_key(msg + b->v[i].at.off, &b->v[i].mi);
        if (pe)
            pe->batch_keys[pe->n_batch_keys++] = k;
        else
            mqd_dedup_forget(t, k);
    }
}

/* Replication's word on a send before anything of it is stored: not the leader (any
 * more), or too few replicas in sync for acks = all. A presettled send is dropped. */
static bool send_allowed(mqd_conn_t *c, mqd_lstate_t *ls, mqd_topic_t *t, uint32_t part,
                         pn_delivery_t *d, bool presettled)
{
    mqd_repl_hooks_t *rh = mqd_srv_repl(mqd_conn_srv(c));
    if (!rh->send_check)
        return true;
    mqd_alink_t *al = mqd_ls_amqp(ls);
    const char *cond = NULL;
    const char *why =
        rh->send_check(rh->arg, t, part, al->acks_set ? al->acks : mqd_topic_conf(t)->acks, &cond);
    if (!why)
        return true;
    mqd_topic_count_rejected(t);
    if (!presettled)
        mqd_delivery_reject(d, cond, why);
    return false;
}

/* In a cluster, a message for a partition another node leads goes there (src/fwd):
 * true when fwd took it (forwarded, held for an election, or rejected). A link another
 * node forwarded is never forwarded again: on a node that does not lead its partition
 * (any more) send_allowed refuses its sends, and that node resolves the leader again. */
static bool forwarded(mqd_conn_t *c, mqd_lstate_t *ls, pn_delivery_t *d, mqd_topic_t *t,
                      uint32_t part, const uint8_t *msg, size_t size, bool presettled, int flags)
{
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(mqd_conn_srv(c));
    mqd_alink_t *al = mqd_ls_amqp(ls);
    if (!fh->send || al->fwd_in || mqd_topic_temporary(t))
        return false;
    return fh->send(fh->arg, ls, d, mqd_topic_name(t), part, msg, size, presettled,
                    al->acks_set ? al->acks : -1, flags, mqd_auth_principal(c)) == MQD_FWD_TAKEN;
}

static void store_batch(mqd_conn_t *c, mqd_lstate_t *ls, pn_delivery_t *d, const uint8_t *msg,
                        size_t size, bool presettled)
{
    mqd_server_t *s = mqd_conn_srv(c);
    mqd_alink_t *al = mqd_ls_amqp(ls);
    batch_t b = {.base = msg};
    mqd_msg_info_t omi;
    int rc = mqd_msg_scan(msg, size, &omi);
    if (rc == 0)
        rc = mqd_msg_batch_split(msg, size, batch_collect, &b);
    if (rc != 0) {
        if (!presettled)
            mqd_delivery_reject(
                d, rc == MQD_ENOMEM ? "amqp:resource-limit-exceeded" : "amqp:decode-error",
                rc == MQD_ENOMEM ? "out of memory"
                                 : "malformed batch: the body must be data sections that each "
                                   "hold one encoded AMQP message");
        goto out;
    }
    uint32_t fixed = 0;
    bool has_fixed, unknown;
    mqd_topic_t *t = send_topic(c, ls, d, msg, &omi, presettled, &fixed, &has_fixed);
    if (!t)
        goto out;
    if (mqd_txn_of_delivery(s, d, &unknown) || unknown) {
        if (!presettled)
            mqd_delivery_reject(d, "amqp:not-implemented",
                                "transactional batched sends (message-format 0x80013700) are not "
                                "supported: send the messages one by one in the transaction");
        goto out;
    }
    uint32_t part = has_fixed ? fixed : choose_partition(ls, t, msg, &omi);
    if (forwarded(c, ls, d, t, part, msg, size, presettled, MQD_FWD_F_BATCH))
        goto out;
    mqd_part_t *pp = mqd_topic_part(t, part);
    const mqd_topic_conf_t *tc = mqd_topic_conf(t);
    bool any = false;
    uint64_t bytes = 0;
    for (size_t i = 0; i < b.n; i++) {
        if (tc->dedup_window_ms && mqd_dedup_seen(t, msg + b.v[i].at.off, &b.v[i].mi))
            b.v[i].at.len = 0; /* stored within the window: exactly once */
        any |= b.v[i].at.len != 0;
        if (b.v[i].at.len) /* the outer key may grow an inner message's annotations */
            bytes += b.v[i].at.len + omi.partition_key.len + 32 + MQD_WATERMARK_REC_OVERHEAD;
    }
    if (any && !send_allowed(c, ls, t, part, d, presettled)) {
        if (tc->dedup_window_ms) /* refused before the append: its ids go */
            batch_keys(t, pp, &b, msg, NULL);
        goto out;
    }
    if (any && !mqd_watermark_disk_take(s, bytes)) {
        if (tc->dedup_window_ms) /* refused before the append: its ids go */
            batch_keys(t, pp, &b, msg, NULL);
        disk_full(d, presettled);
        goto out;
    }
    if (!any) {
        if (!presettled) {
            pn_delivery_update(d, PN_ACCEPTED);
            pn_delivery_settle(d);
        }
        goto out;
    }
    /* d is held only once the last record is appended: a failure before rejects it
     * (records appended before a failing one stay, as a partition that fails mid-way
     * keeps what it wrote) */
    rc = batch_append(c, t, part, &b, msg, &omi, d, presettled);
    if (rc == 0 && !presettled && al->acks_set)
        mqd_part_pend_set_acks(pp, al->acks);
    if (tc->dedup_window_ms && ((rc == 0 && !presettled) || rc == MQD_EFAILED))
        batch_keys(t, pp, &b, msg, rc == 0 ? d : NULL);
    if (rc != 0)
        append_failed(t, part, d, presettled, rc);
out:
    free(b.v);
}

/* The cluster topic a message goes to when this node holds no copy of it: its link's
 * (fwd_name) or, on the anonymous relay, its `to`'s when the cluster registered it and
 * the user may send there; NULL otherwise. *fixed: the partition the address names. */
static const char *nocopy_target(mqd_conn_t *c, mqd_lstate_t *ls, const uint8_t *msg,
                                 const mqd_msg_info_t *mi, mqd_addr_t *a, bool *fixed)
{
    mqd_server_t *s = mqd_conn_srv(c);
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(s);
    *fixed = false;
    if (!fh->nparts || al->fwd_in)
        return NULL;
    if (al->fwd_name) {
        *fixed = al->fixed_part;
        return mqd_topic_find(s, al->fwd_name) ? NULL : al->fwd_name;
    }
    if (mqd_ls_topic(ls) || mqd_ls_tmp_name(ls) || mi->to.len == 0 ||
        mqd_addr_parse((const char *)msg + mi->to.off, mi->to.len, a) != 0 ||
        (a->kind != MQD_ADDR_TOPIC && a->kind != MQD_ADDR_PARTITION) ||
        mqd_topic_find(s, a->topic) || fh->nparts(fh->arg, a->topic) == 0 ||
        !mqd_auth_may(c, MQD_PERM_SEND, a->topic))
        return NULL;
    *fixed = a->kind == MQD_ADDR_PARTITION;
    mqd_ls_set_part(ls, *fixed ? a->partition : mqd_ls_part(ls));
    return a->topic;
}

/* A message for a cluster topic this node holds no copy of goes to its partition's
 * leader (src/fwd), the partition chosen by the registered count; true when handled. */
static bool forward_nocopy(mqd_conn_t *c, mqd_lstate_t *ls, pn_delivery_t *d, const uint8_t *msg,
                           size_t size, bool presettled, uint32_t format)
{
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(mqd_conn_srv(c));
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_msg_info_t mi;
    mqd_addr_t a;
    bool fixed;
    if (!fh->send || mqd_msg_scan(msg, size, &mi) != 0)
        return false; /* a scan failure is answered by the usual path */
    const char *topic = nocopy_target(c, ls, msg, &mi, &a, &fixed);
    if (!topic)
        return false;
    uint32_t n = fh->nparts(fh->arg, topic);
    uint32_t fixed_part = mqd_ls_part(ls);
    if (n == 0 || (fixed && fixed_part >= n)) {
        if (!presettled)
            mqd_delivery_reject(d, "amqp:not-found", "no such topic or partition in the cluster");
        return true;
    }
    uint32_t part = choose_partition_n(ls, n, fixed, msg, &mi);
    bool unknown;
    int flags = format == MQD_MSG_FORMAT_BATCH ? MQD_FWD_F_BATCH : 0;
    if (mqd_txn_of_delivery(mqd_conn_srv(c), d, &unknown) || unknown)
        flags |= MQD_FWD_F_TXN;
    if (fh->send(fh->arg, ls, d, topic, part, msg, size, presettled,
                 al->acks_set ? al->acks : -1, flags, mqd_auth_principal(c)) == MQD_FWD_LOCAL && !presettled)
        mqd_delivery_reject(d, "amqp:resource-limit-exceeded",
                            "this node's copy of the topic is being made: send it again");
    return true;
}

/* Stores one complete message; returns after queuing its settlement. */
static void store_message(mqd_conn_t *c, mqd_lstate_t *ls, pn_delivery_t *d, const uint8_t *msg,
                          size_t size, bool presettled, uint32_t format)
{
    if (mqd_ls_mgmt(ls))
        return management_request(c, ls, d, msg, size, presettled);
    if (mqd_ls_coord(ls))
        return mqd_txn_coordinator_transfer(ls, d, msg, size);
    if (forward_nocopy(c, ls, d, msg, size, presettled, format))
        return;
    if (format == MQD_MSG_FORMAT_BATCH)
        return store_batch(c, ls, d, msg, size, presettled);
    mqd_msg_info_t mi;
    if (mqd_msg_scan(msg, size, &mi) != 0) {
        if (!presettled)
            mqd_delivery_reject(d, "amqp:decode-error", "malformed message sections");
        return;
    }
    uint32_t fixed = 0;
    bool has_fixed;
    mqd_topic_t *t = send_topic(c, ls, d, msg, &mi, presettled, &fixed, &has_fixed);
    if (!t)
        return;
    uint32_t part = has_fixed ? fixed : choose_partition(ls, t, msg, &mi);
    mqd_part_t *pp = mqd_topic_part(t, part);
    const mqd_topic_conf_t *tc = mqd_topic_conf(t);
    mqd_server_t *s = mqd_conn_srv(c);
    bool unknown;
    mqd_txn_t *txn = mqd_txn_of_delivery(s, d, &unknown);
    if (forwarded(c, ls, d, t, part, msg, size, presettled, txn || unknown ? MQD_FWD_F_TXN : 0))
        return;
    if (tc->dedup_window_ms && mqd_dedup_seen(t, msg, &mi)) {
        if (!presettled) { /* already stored within the window: exactly once */
            pn_delivery_update(d, PN_ACCEPTED);
            pn_delivery_settle(d);
        }
        return;
    }
    /* refused before the append: the id the check entered goes, or a retry of this send
     * would be taken for a duplicate of a message never stored (acknowledged and lost) */
    uint64_t dkey = tc->dedup_window_ms ? mqd_dedup_key(msg, &mi) : 0;
    if (unknown) {
        mqd_dedup_forget(t, dkey);
        if (!presettled)
            mqd_delivery_reject(d, mqd_txn_unknown_condition(s, d), "no such open transaction");
        return;
    }
    if (!send_allowed(c, ls, t, part, d, presettled))
        return mqd_dedup_forget(t, dkey);
    if (!mqd_watermark_disk_take(s, size + MQD_WATERMARK_REC_OVERHEAD)) {
        mqd_dedup_forget(t, dkey);
        return disk_full(d, presettled);
    }
    uint64_t off;
    int rc = mqd_part_append_ex(pp, msg, size, (txn ? MQD_REC_TXN : 0) | mqd_rec_data_flags(&mi),
                                txn ? mqd_txn_id(txn) : 0, c, presettled ? NULL : d, &off);
    if (rc == 0 && !presettled) {
        mqd_alink_t *al = mqd_ls_amqp(ls);
        if (al->acks_set)
            mqd_part_pend_set_acks(pp, al->acks);
        mqd_delivery_hold(d);    /* the partition's pending list settles it when stable */
        if (tc->dedup_window_ms) /* forgotten if the partition fails first (partfail.c) */
            mqd_part_pend_tail(pp)->dedup_key = mqd_dedup_key(msg, &mi);
    }
    if (rc == 0 && txn && (rc = mqd_txn_add_send(txn, pp, off)) != 0) {
        /* the pending send owns d now: the transaction fails at its discharge instead */
        MQD_WARN_RL("link", "transactional send to %s/%u not staged: %s", mqd_topic_name(t), part,
                    mqd_strerror(rc));
        return;
    }
    if (rc == MQD_EFAILED)
        mqd_dedup_forget(t, dkey); /* not stored: a retry must be */
    if (rc != 0)
        append_failed(t, part, d, presettled, rc);
}

/* The message-format the frame peek read for d (0 without a peek or when none was
 * recorded); forgets it. */
static uint32_t transfer_format(mqd_conn_t *c, pn_link_t *l, pn_delivery_t *d)
{
    mqd_fpeek_t *peek = mqd_conn_peek(c);
    if (!peek || !mqd_fpeek_waiting(peek))
        return 0;
    pn_delivery_tag_t tag = pn_delivery_tag(d);
    const char *name = pn_link_name(l);
    return mqd_fpeek_take(peek, name, strlen(name), (const uint8_t *)tag.start, tag.size);
}

/* Drops what arrives on a link mqd closed: bytes left in Proton would hold session
 * capacity for good. */
static void transfer_drop(mqd_conn_t *c, pn_link_t *l, pn_delivery_t *d)
{
    char sink[4096];
    while (pn_link_recv(l, sink, sizeof sink) > 0)
        ;
    if (!pn_delivery_partial(d)) {
        transfer_format(c, l, d);
        pn_link_advance(l);
        pn_delivery_settle(d);
    }
}

static void producer_transfer(mqd_conn_t *c, mqd_lstate_t *ls, pn_delivery_t *d)
{
    mqd_server_t *s = mqd_conn_srv(c);
    mqd_alink_t *al = mqd_ls_amqp(ls);
    pn_link_t *l = mqd_ls_link(ls);
    /* An event for a delivery already taken: Proton folds only consecutive events of one
     * delivery, so frames of deliveries interleaved across a session's links (2.6.12,
     * a1 b1 a2 b2) leave a stale event behind, and a peer's disposition for a send
     * waiting to be stable lands here too. Read as a new, empty message, it rejected and
     * settled a held send: on_stable then used the freed delivery (SIGSEGV). */
    if (d != pn_link_current(l))
        return;
    if (pn_link_state(l) & PN_LOCAL_CLOSED)
        return transfer_drop(c, l, d);
    if (!mqd_credit_arrived(ls, d)) {
        mqd_credit_exceeded(ls); /* nothing of it, or after it, is stored */
        return transfer_drop(c, l, d);
    }
    if (pn_delivery_aborted(d)) {
        /* nothing stored, no outcome (2.7.5: an aborted delivery is settled), but it took
         * credit: give it back, or a few aborts in a row stall the link for good */
        transfer_format(c, l, d);
        al->acc_len = 0;
        pn_delivery_settle(d);
        mqd_credit_refill(ls);
        return;
    }
    const uint8_t *msg;
    size_t size;
    if (al->acc_len == 0 && !pn_delivery_partial(d)) {
        /* the whole message arrived in this event: no copy into the link buffer */
        size = pn_delivery_pending(d);
        if (size > mqd_srv_conf(s)->max_message_size)
            return message_too_big(c, ls, d);
        uint8_t *rbuf = mqd_conn_rbuf(c);
        if (size > mqd_conn_rbuf_cap(c)) {
            uint8_t *nb = realloc(rbuf, size);
            if (!nb)
                return mqd_delivery_reject(d, "amqp:resource-limit-exceeded", "out of memory");
            mqd_conn_set_rbuf(c, rbuf = nb);
            mqd_conn_set_rbuf_cap(c, size);
        }
        ssize_t got = size ? pn_link_recv(l, (char *)rbuf, size) : 0;
        if (got < 0 || (size_t)got != size)
            size = 0;
        msg = rbuf;
    } else {
        int rc = transfer_accumulate(c, ls, d);
        if (rc == MQD_ETOOBIG)
            return message_too_big(c, ls, d);
        if (rc != 0 || pn_delivery_partial(d))
            return;
        msg = al->acc;
        size = al->acc_len;
        al->acc_len = 0;
    }
    uint32_t format = transfer_format(c, l, d);
    if (al->batch_in)
        format = MQD_MSG_FORMAT_BATCH; /* a batch forwarded by another node (mqd:batch) */
    pn_link_advance(l);
    if (size > al->msg_max)
        al->msg_max = size; /* sizes its next credit windows near disk_free_limit */
    bool presettled = pn_delivery_settled(d);
    store_message(c, ls, d, msg, size, presettled, format);
    if (presettled)
        pn_delivery_settle(d);
    if (al->acc_cap > (1u << 20) && al->acc_len == 0) {
        mqd_budget_partial(c, -(int64_t)al->acc_cap);
        free(al->acc); /* don't keep a large buffer per idle link */
        al->acc = NULL;
        al->acc_cap = 0;
    }
    mqd_credit_refill(ls);
}

/* Producer links get no new credit while memory or disk is above its watermark (nor,
 * near disk_free_limit, more than the disk budget allows: credit.c); consumers keep
 * flowing, and this periodic refill gives the credit back once it clears. */
void mqd_producers_refill(mqd_server_t *s)
{
    if (mqd_watermark_blocked(s))
        return;
    mqd_dlist_t *conns = mqd_srv_conns(s);
    for (mqd_dlist_t *n = conns->next; n != conns; n = n->next) {
        mqd_conn_t *c = mqd_conn_of_node(n);
        bool touched = false;
        for (pn_link_t *l = pn_link_head(mqd_conn_driver(c)->connection, PN_LOCAL_ACTIVE); l;
             l = pn_link_next(l, PN_LOCAL_ACTIVE)) {
            mqd_lstate_t *ls = pn_link_get_context(l);
            if (ls && mqd_ls_kind(ls) == MQD_LS_PRODUCER && !mqd_ls_coord(ls) &&
                mqd_credit_refill(ls) > 0)
                touched = true;
        }
        if (touched)
            mqd_conn_mark_dirty(c);
    }
}

/* ---------------------------------------------------------------- events */

static void connection_open(mqd_conn_t *c, pn_connection_t *pc)
{
    pn_data_t *caps = pn_connection_offered_capabilities(pc);
    pn_data_put_array(caps, false, PN_SYMBOL);
    pn_data_enter(caps);
    pn_data_put_symbol(caps, pn_bytes(strlen("ANONYMOUS-RELAY"), "ANONYMOUS-RELAY"));
    pn_data_exit(caps);
    pn_connection_open(pc);
    const char *user = mqd_conn_user(c);
    MQD_INFO("conn", "open peer=%s user=%s container=%s", mqd_conn_peer(c),
             user[0] ? user : "anonymous", pn_connection_remote_container(pc) ?: "-");
}

/* The address a redirect names: the one the link attached with (the leader serves every
 * form: T/ConsumerGroups/G/Partitions/N must not become T/Partitions/N). */
static void link_own_address(pn_link_t *l, mqd_redirect_t *to)
{
    pn_terminus_t *tm =
        pn_link_is_receiver(l) ? pn_link_remote_target(l) : pn_link_remote_source(l);
    const char *addr = pn_terminus_get_address(tm);
    if (addr && strlen(addr) < sizeof to->address)
        snprintf(to->address, sizeof to->address, "%s", addr);
}

int mqd_link_route_ask(mqd_conn_t *c, const char *topic, int64_t part, mqd_topic_t *t,
                       mqd_route_ans_t *ans)
{
    mqd_repl_hooks_t *rh = mqd_srv_repl(mqd_conn_srv(c));
    ans->cond = "amqp:not-found";
    ans->err[0] = '\0';
    if (!rh->route)
        return MQD_ROUTE_HERE;
    bool created = false;
    int how = rh->route(rh->arg, topic, t, part, !t && may_create_quiet(c, topic), true, &ans->to,
                        &ans->cond, ans->err, sizeof ans->err, &created);
    if (created)
        mqd_topic_charge_create(c, topic);
    return how;
}

void mqd_link_route_act(mqd_conn_t *c, pn_link_t *l, const char *topic, int how,
                        const mqd_route_ans_t *ans)
{
    if (how == MQD_ROUTE_REDIRECT) {
        /* led elsewhere and not forwarded (a link that asked for a redirect, redirect.c;
         * a receiver while fwd does not take it; a forwarded link, never forwarded again) */
        bool asked = mqd_link_wants_redirect(l);
        mqd_redirect_t to = ans->to;
        link_own_address(l, &to);
        mqd_link_redirect(l, &to);
        mqd_srv_count_redirect(mqd_conn_srv(c),
                               asked ? MQD_REDIRECT_LINK_ASKED : MQD_REDIRECT_LINK_UNASKED);
    } else if (how == MQD_ROUTE_REFUSE)
        mqd_link_refuse(l, ans->cond, "%s", ans->err);
    else if (how == MQD_ROUTE_WAIT)
        MQD_DEBUG("link", "attach of %s to %s waits for the cluster", pn_link_name(l), topic);
}

int mqd_link_route(mqd_conn_t *c, pn_link_t *l, const char *topic, int64_t part, mqd_topic_t *t)
{
    mqd_route_ans_t ans;
    int how = mqd_link_route_ask(c, topic, part, t, &ans);
    mqd_link_route_act(c, l, topic, how, &ans);
    return how;
}

size_t mqd_amqp_attach_again(mqd_server_t *s, const char *topic)
{
    size_t n = 0;
    const pn_state_t parked = PN_LOCAL_UNINIT | PN_REMOTE_ACTIVE;
    mqd_dlist_t *conns = mqd_srv_conns(s);
    for (mqd_dlist_t *cn = conns->next; cn != conns; cn = cn->next) {
        mqd_conn_t *c = mqd_conn_of_node(cn);
        bool touched = false;
        if (mqd_conn_client(c) || mqd_conn_closed(c))
            continue; /* outbound connections' links are their owner's */
        pn_connection_t *pc = mqd_conn_driver(c)->connection;
        for (pn_link_t *l = pn_link_head(pc, parked), *next; l; l = next) {
            next = pn_link_next(l, parked);
            pn_terminus_t *tm =
                pn_link_is_receiver(l) ? pn_link_remote_target(l) : pn_link_remote_source(l);
            const char *addr = pn_terminus_get_address(tm);
            mqd_addr_t a;
            if (pn_link_get_context(l) || !addr || mqd_addr_parse(addr, strlen(addr), &a) != 0 ||
                strcmp(a.topic, topic) != 0)
                continue;
            if (pn_link_is_receiver(l))
                producer_attach(c, l);
            else
                mqd_consumer_attach(c, l);
            touched = true;
            n++;
        }
        if (touched)
            mqd_conn_mark_dirty(c);
    }
    return n;
}

static void link_remote_open(mqd_conn_t *c, pn_link_t *l)
{
    if (pn_link_state(l) & PN_LOCAL_ACTIVE)
        return;
    /* a peer ignoring handle-max gets refused here (l itself is counted) */
    if ((size_t)mqd_session_links(pn_link_session(l), 0) >
        mqd_srv_conf(mqd_conn_srv(c))->max_links_per_session)
        return mqd_link_refuse(l, "amqp:resource-limit-exceeded",
                               "too many links on this session (max_links_per_session)%s", "");
    /* Proton 0.37 ignores an attach's unsettled map: accepting a resume as a fresh link
     * would drop the peer's unsettled state unseen (docs/conformance.md, 2.6.13) */
    const char *name = pn_link_name(l);
    mqd_fpeek_t *peek = mqd_conn_peek(c);
    if (peek && mqd_fpeek_resume_take(peek, name, strlen(name), pn_link_is_sender(l)))
        return mqd_link_refuse(
            l, "amqp:not-implemented",
            "resuming link '%.200s' (an attach with unsettled state) is not supported", name);
    char fu_buf[MQD_NAME_MAX + 1];
    bool fwd_in;
    const char *node = mqd_auth_node_attach_denied(
        c, pn_link_is_sender(l), pn_terminus_get_address(pn_link_remote_source(l)));
    if (node && mqd_link_fwd_user(c, l, fu_buf, sizeof fu_buf, &fwd_in))
        node = NULL; /* another node forwarding its client's sends or receiver */
    if (node)
        return mqd_link_refuse(l, "amqp:unauthorized-access", "%s", node);
    if (mqd_link_attach_redirects(c, l))
        return; /* a bad mqd:redirect refused, or the connection redirected (redirect.c) */
    mqd_link_steal(c, l);
    if (pn_link_is_receiver(l))
        producer_attach(c, l);
    else
        mqd_consumer_attach(c, l);
}

static void link_remote_close(pn_link_t *l)
{
    mqd_lstate_t *ls = pn_link_get_context(l);
    if (ls) {
        pn_link_set_context(l, NULL);
        mqd_lstate_free(ls);
    }
    if (!(pn_link_state(l) & PN_LOCAL_CLOSED))
        pn_link_close(l);
    mqd_link_reap(l); /* l may be freed: the caller must not touch it again */
}

/* A forwarded receiver's credit and its client's dispositions: fwd/recv.c's. */
static void fwd_event(mqd_conn_t *c, mqd_lstate_t *ls, pn_event_t *e)
{
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(mqd_conn_srv(c));
    if (fh->recv_event)
        fh->recv_event(fh->arg, ls, e);
}

/* Proton advertises capacity / max-frame-size as the session's incoming window, in
 * transfer frames, whatever their size: 8 MiB / 128 KiB allowed 64 transfers in flight,
 * so a sender of small messages stalled every 64 messages until the next flow frame.
 * Room for twice the link credit in frames keeps a full credit window moving. The bytes
 * actually buffered stay small: transfers are drained into the link buffer as they come
 * (producer_transfer), and what arrives on a link we closed is dropped. */
static size_t session_capacity(const mqd_conf_t *conf)
{
    size_t cap = (size_t)conf->max_frame_size * 2 * conf->link_credit;
    return cap < (8u << 20) ? (8u << 20) : cap;
}

void mqd_amqp_handle(mqd_conn_t *c, pn_event_t *e)
{
    switch (pn_event_type(e)) {
    case PN_CONNECTION_REMOTE_OPEN:
        if (!mqd_auth_conn_opened(c))
            break; /* an open before SASL completed: auth closes the connection */
        connection_open(c, pn_event_connection(e));
        break;
    case PN_CONNECTION_REMOTE_CLOSE: pn_connection_close(pn_event_connection(e)); break;
    case PN_SESSION_REMOTE_OPEN: {
        pn_session_t *ss = pn_event_session(e);
        pn_session_set_incoming_capacity(ss, session_capacity(mqd_srv_conf(mqd_conn_srv(c))));
        pn_session_open(ss);
        break;
    }
    case PN_SESSION_REMOTE_CLOSE: {
        pn_session_t *ss = pn_event_session(e);
        for (pn_link_t *l = pn_link_head(mqd_conn_driver(c)->connection, 0), *next; l; l = next) {
            next = pn_link_next(l, 0); /* link_remote_close may free l */
            if (pn_link_session(l) == ss)
                link_remote_close(l);
        }
        pn_session_close(ss);
        mqd_session_reap(ss);
        break;
    }
    case PN_LINK_INIT: mqd_session_links(pn_link_session(pn_event_link(e)), 1); break;
    case PN_LINK_REMOTE_OPEN: link_remote_open(c, pn_event_link(e)); break;
    case PN_LINK_REMOTE_DETACH:
        mqd_link_mark_remote_detached(pn_event_link(e));
        link_remote_close(pn_event_link(e));
        break;
    case PN_LINK_REMOTE_CLOSE: link_remote_close(pn_event_link(e)); break;
    case PN_LINK_FLOW: {
        mqd_lstate_t *ls = pn_link_get_context(pn_event_link(e));
        mqd_ls_kind_t kind = ls ? mqd_ls_kind(ls) : 0;
        if (kind == MQD_LS_REPL) {
            mqd_repl_hooks_t *rh = mqd_srv_repl(mqd_conn_srv(c));
            if (rh->link_event)
                rh->link_event(rh->arg, ls, e);
        } else if (kind == MQD_LS_FWD) {
            fwd_event(c, ls, e);
        } else if (kind == MQD_LS_CONSUMER || kind == MQD_LS_BROWSER)
            mqd_topic_dispatch_soon(mqd_ls_topic(ls));
        break;
    }
    case PN_DELIVERY: {
        pn_delivery_t *d = pn_event_delivery(e);
        pn_link_t *l = pn_delivery_link(d);
        mqd_lstate_t *ls = pn_link_get_context(l);
        if (!ls) {
            /* A send waiting for its records (or a discharge for its decision) is its
             * holder's to settle, even once the link is detached: a disposition from the
             * peer for it lands here, and settling it freed what on_stable still held
             * (fuzz_conn: transfer, detach, disposition, then stable: SIGSEGV). */
            if (mqd_delivery_held(d) || d != pn_link_current(l))
                break;
            char sink[4096]; /* refused or detached: what Proton holds must not pile up */
            while (pn_link_is_receiver(l) && pn_link_recv(l, sink, sizeof sink) > 0)
                ;
            if (pn_link_is_receiver(l) && !pn_delivery_partial(d)) {
                transfer_format(c, l, d); /* forget it */
                pn_link_advance(l);
                pn_delivery_settle(d);
            }
            break;
        }
        mqd_ls_kind_t kind = mqd_ls_kind(ls);
        if (kind == MQD_LS_REPL) {
            mqd_repl_hooks_t *rh = mqd_srv_repl(mqd_conn_srv(c));
            if (rh->link_event)
                rh->link_event(rh->arg, ls, e);
        } else if (kind == MQD_LS_FWD)
            fwd_event(c, ls, e);
        else if (kind == MQD_LS_PRODUCER)
            producer_transfer(c, ls, d);
        else if (pn_delivery_updated(d) || pn_delivery_settled(d))
            mqd_consumer_disposition(ls, d);
        break;
    }
    case PN_TRANSPORT_ERROR: {
        pn_condition_t *tc = pn_transport_condition(pn_event_transport(e));
        MQD_INFO("conn", "transport error peer=%s: %s: %s", mqd_conn_peer(c),
                 pn_condition_get_name(tc) ?: "-", pn_condition_get_description(tc) ?: "-");
        break;
    }
    default: break;
    }
}

/* Producers held back by a watermark get their credit once it clears. */
static void refill_timer(void *arg)
{
    mqd_producers_refill(arg);
}

int mqd_amqp_start(mqd_server_t *s)
{
    return mqd_timer_add(s, "watermark.refill", 1000, refill_timer, s);
}

void mqd_amqp_core_ops(mqd_core_ops_t *ops)
{
    ops->link_detach = mqd_consumer_detach;
    ops->dead_letter = mqd_consumer_dead_letter;
}
