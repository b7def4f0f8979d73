/* repl/reg: in a cluster every topic is the cluster's. Its name is registered in etcd
 * (/<cluster>/topics/<T>, create if absent) before any node serves it, and any node
 * answers for it: a link to a partition this node does not hold is redirected to its
 * leader (Kafka: topics are cluster metadata, any broker answers for any topic).
 *
 * - replication_factor: the creator's setting, else the node's config for the name (a
 *   [topic] section or the global key), else default_replication_factor.
 * - With replication_factor 1 the topic's partitions are placed on the node that creates
 *   it (`home` in the registration), in the same txn as the registration: its one replica
 *   leads (ISR of one), the records a link sends at once are on the node that took them,
 *   a link to the whole topic has one leader (no client routing yet) and a copy from
 *   before (single-node data) is registered the same way. More replicas: the controller
 *   places them (ctl.c), as before.
 * - A link to a topic this node has a copy of is served here only while this node leads
 *   the partitions it names (serve.c): else amqp:link:redirect to their leader, or, while
 *   no leader is known here (state not read, its address not in the view, a restarted
 *   leader before its hand-over), the attach waits as below.
 * - A link naming a topic this node has no copy of (sender, receiver): registered
 *   elsewhere -> amqp:link:redirect to the partition's leader; registered and being placed,
 *   or being registered -> the attach is left unanswered (route answers MQD_ROUTE_WAIT)
 *   and run again (mqd_amqp_attach_again) when the registration, the placement or the
 *   copy arrives, at most WAIT_MS; not registered and the link may create it ->
 *   registered first (two nodes creating one name at once end with one topic: the loser
 *   redirects), then taken.
 * - `mqctl topic create` goes the same way (the topic_create hook): 409 for a name the
 *   cluster holds. */
#include "config.h"
#include "repl/repl_int.h"
#include "amqp/amqp.h"

#include <event2/event.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_MS 10000    /* a link waits this long for the cluster, then is refused */
#define RETRY_MS 1000    /* a registration etcd refused is tried again after */
#define WAKE_ALL_MS 1000 /* every wait runs again this often (an address learnt...) */
/* Partition states written with the registration (etcd takes 128 ops a txn); more: the
 * controller places them on the topic's home. */
#define INLINE_PARTS 120

bool mqd_repl_cluster_name(const char *name)
{
    return name[0] != '$' && !strchr(name, '/');
}

static char *key_of(const char *prefix, const char *name, const char *tail)
{
    size_t n = strlen(prefix) + strlen(name) + strlen(tail) + 1;
    char *k = malloc(n);
    if (k)
        snprintf(k, n, "%s%s%s", prefix, name, tail);
    return k;
}

/* The replication factor of a topic created now without an explicit one in ov. */
static uint32_t rf_for(const mqd_repl_t *r, const char *name, json_t *ov)
{
    json_t *v = json_object_get(ov, "replication_factor");
    if (json_is_integer(v) && json_integer_value(v) >= 1 &&
        json_integer_value(v) <= MQD_REPL_MAX_RF)
        return (uint32_t)json_integer_value(v);
    if (mqd_conf_key_is_set(r->conf, name, "replication_factor") ||
        mqd_conf_key_is_set(r->conf, NULL, "replication_factor")) {
        mqd_topic_conf_t tc;
        mqd_conf_topic(r->conf, name, &tc);
        return tc.replication_factor;
    }
    return r->conf->default_replication_factor ? r->conf->default_replication_factor : 1;
}

/* ov (an object or NULL) with replication_factor rf, as registered config text. */
static char *config_with_rf(const json_t *ov, uint32_t rf)
{
    json_t *cfg = ov ? json_deep_copy(ov) : json_object();
    char *s = NULL;
    if (json_is_object(cfg) &&
        json_object_set_new(cfg, "replication_factor", json_integer(rf)) == 0)
        s = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(cfg);
    return s;
}

char *mqd_repl_topic_config(const rtopic_t *rt)
{
    json_t *cfg = rt->td.config ? json_loads(rt->td.config, 0, NULL) : NULL;
    char *s = config_with_rf(cfg, rt->td.rf);
    json_decref(cfg);
    return s;
}

/* ---- waits: attaches left unanswered until the cluster decides ---- */

static tname_t *wait_add(mqd_repl_t *r, const char *name, const char *why)
{
    tname_t *w = mqd_repl_tn_find(r->waits, name);
    if (!w && (w = mqd_repl_tn_add(&r->waits, name)) != NULL)
        w->until_ms = mqd_now_ms() + WAIT_MS;
    if (w && why)
        snprintf(w->why, sizeof w->why, "%s", why);
    return w;
}

void mqd_repl_wake(mqd_repl_t *r, const char *name)
{
    tname_t *w = mqd_repl_tn_find(r->waits, name);
    if (!w || w->woken)
        return;
    w->woken = true;
    if (r->ev_wake)
        event_active(r->ev_wake, EV_TIMEOUT, 0);
}

/* Not from inside a watch's or an answer's walk: the attaches run the broker's link code,
 * which may create a copy and call back into repl. */
static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    mqd_repl_t *r = arg;
    size_t n = 0;
    for (tname_t *w = r->waits; w; w = w->next)
        n += w->woken;
    char **names = n ? calloc(n, sizeof *names) : NULL;
    size_t k = 0;
    for (tname_t *w = r->waits; names && w; w = w->next)
        if (w->woken) {
            w->woken = false;
            names[k++] = strdup(w->name);
        }
    for (size_t i = 0; i < k; i++) {
        if (!names[i])
            continue;
        tname_t *w = mqd_repl_tn_find(r->waits, names[i]);
        bool expired = w && w->expired;
        if (mqd_amqp_attach_again(r->s, names[i]) == 0 || expired)
            mqd_repl_tn_del(&r->waits, names[i]); /* none left waiting, or all refused */
        free(names[i]);
    }
    free(names);
}

int mqd_repl_waits_new(mqd_repl_t *r)
{
    r->ev_wake = event_new(mqd_server_base(r->s), -1, 0, on_wake, r);
    return r->ev_wake ? 0 : MQD_ENOMEM;
}

void mqd_repl_waits_tick(mqd_repl_t *r, int64_t now_ms)
{
    bool all = now_ms >= r->wake_all_ms;
    if (all)
        r->wake_all_ms = now_ms + WAKE_ALL_MS;
    for (tname_t *w = r->waits; w; w = w->next) {
        if (!w->expired && now_ms >= w->until_ms) {
            w->expired = true;
            MQD_WARN("repl", "topic %s: links waited %d ms for the cluster (%s): refused", w->name,
                     WAIT_MS, w->why);
        }
        if (all || w->expired)
            mqd_repl_wake(r, w->name);
    }
}

void mqd_repl_waits_free(mqd_repl_t *r)
{
    mqd_repl_tn_free(&r->waits);
    if (r->ev_wake)
        event_free(r->ev_wake);
    r->ev_wake = NULL;
}

/* ---- registration ---- */

typedef struct reg_op {
    mqd_repl_t *r;
    char *name;
    char id[MQD_REPL_ID_LEN + 1];
    char *val;  /* the registration sent */
    char *pval; /* the partition state written with it, or NULL */
    uint32_t n_inline;
    bool copy;    /* this node's copy is registered (else a new topic) */
    bool had_uid; /* that copy had the identity before (etcd lost its registration) */
    mqd_repl_done_fn done;
    void *done_arg;
} reg_op_t;

static void reg_free(reg_op_t *o)
{
    free(o->val);
    free(o->pval);
    free(o->name);
    free(o);
}

/* Registered: the registration and the partition states it wrote are this node's view at
 * once (the watch brings the same later), so its copy is made or bound now. */
static void reg_won(mqd_repl_t *r, reg_op_t *o, int64_t rev)
{
    char *key = key_of(r->topics_prefix, o->name, "");
    if (!key)
        return;
    mqd_etcd_kv_t kv = {key, o->val, strlen(key), strlen(o->val), rev, rev, 1, 0};
    mqd_repl_topic_put(r, &kv, true);
    free(key);
    for (uint32_t p = 0; p < o->n_inline; p++) {
        char tail[24];
        snprintf(tail, sizeof tail, "/%" PRIu32, p);
        if (!(key = key_of(r->parts_prefix, o->name, tail)))
            return;
        kv = (mqd_etcd_kv_t){key, o->pval, strlen(key), strlen(o->pval), rev, rev, 1, 0};
        mqd_repl_part_put(r, &kv);
        free(key);
    }
}

/* Another node registered the name first. */
static void reg_lost(mqd_repl_t *r, reg_op_t *o, const mqd_etcd_kv_t *kv)
{
    mqd_repl_topic_put(r, kv, false);
    mqd_topic_t *t = o->copy ? mqd_topic_find(r->s, o->name) : NULL;
    if (t && !o->had_uid && strcmp(mqd_topic_uid(t), o->id) == 0)
        mqd_topic_set_uid(t, ""); /* never registered: reconcile decides what it is */
    MQD_NOTICE("repl", "topic %s: registered by another node first (%.*s)%s", o->name,
               (int)(kv->value_len > 200 ? 200 : kv->value_len), kv->value,
               t ? ": this node's copy is compared with it" : "");
    if (t && r->topics_loaded)
        mqd_repl_topic_reconcile(r, t);
}

static void on_registered(void *arg, const mqd_etcd_reply_t *rep)
{
    reg_op_t *o = arg;
    mqd_repl_t *r = o->r;
    char desc[MQD_NAME_MAX + 300];
    int status = 503;
    if (rep->rc == MQD_ESTATE || r->closing) {
        if (o->done)
            o->done(o->done_arg, 503, "the node is stopping: the topic may or may not be created");
        return reg_free(o); /* r is being freed */
    }
    mqd_repl_tn_del(&r->regs, o->name);
    if (rep->rc != 0) {
        snprintf(desc, sizeof desc, "etcd did not register topic %s: %s", o->name,
                 rep->error ? rep->error : mqd_strerror(rep->rc));
        MQD_WARN("repl", "%s%s", desc, o->copy ? ": tried again" : "");
        tname_t *w = mqd_repl_tn_find(r->waits, o->name);
        if (w) {
            w->retry_ms = mqd_now_ms() + RETRY_MS;
            snprintf(w->why, sizeof w->why, "etcd did not register it: %s",
                     rep->error ? rep->error : mqd_strerror(rep->rc));
        }
    } else if (rep->succeeded) {
        status = 201;
        snprintf(desc, sizeof desc, "created topic %s in the cluster: %s", o->name, o->val);
        MQD_NOTICE("repl", "topic %s registered (id %s%s)", o->name, o->id,
                   o->n_inline ? ", its partitions on this node" : "");
        reg_won(r, o, rep->revision);
    } else if (rep->n_kvs == 1) {
        status = 409;
        snprintf(desc, sizeof desc, "topic '%s' already exists (created meanwhile on another node)",
                 o->name);
        reg_lost(r, o, &rep->kvs[0]);
    } else {
        snprintf(desc, sizeof desc, "etcd did not register topic %s: try again", o->name);
    }
    if (o->done)
        o->done(o->done_arg, status, desc);
    mqd_repl_wake(r, o->name);
    reg_free(o);
}

/* Sends the create-if-absent txn of registration td of `name` (see the top of the file);
 * o is the callback's, taken on success. */
static int reg_send(mqd_repl_t *r, const char *name, const mqd_repl_tdesc_t *td, reg_op_t *o)
{
    uint32_t self = r->conf->node_id;
    bool here = td->rf == 1 && td->home == self && td->partitions <= INLINE_PARTS;
    mqd_repl_pstate_t ps = {.leader = self, .epoch = 1, .n_replicas = 1, .n_isr = 1};
    ps.replicas[0] = ps.isr[0] = self;
    memcpy(ps.topic_id, td->id, sizeof ps.topic_id);
    size_t n_ops = 2 + (here ? td->partitions : 0);
    mqd_etcd_op_t *ops = calloc(n_ops, sizeof *ops);
    char **pkeys = here ? calloc(td->partitions, sizeof *pkeys) : NULL;
    char *key = key_of(r->topics_prefix, name, ""), *dkey = key_of(r->deleted_prefix, name, "");
    int rc = ops && key && dkey && (!here || pkeys) ? 0 : MQD_ENOMEM;
    o->val = mqd_repl_tdesc_json(td);
    o->pval = here ? mqd_repl_pstate_json(&ps) : NULL;
    if (!o->val || (here && !o->pval))
        rc = MQD_ENOMEM;
    if (rc == 0) {
        ops[0] =
            (mqd_etcd_op_t){MQD_ETCD_OP_PUT, key, o->val, strlen(key), strlen(o->val), 0, false};
        ops[1] = (mqd_etcd_op_t){MQD_ETCD_OP_DELETE, dkey, NULL, strlen(dkey), 0, 0, false};
    }
    for (uint32_t p = 0; rc == 0 && here && p < td->partitions; p++) {
        char tail[24];
        snprintf(tail, sizeof tail, "/%" PRIu32, p);
        if (!(pkeys[p] = key_of(r->parts_prefix, name, tail))) {
            rc = MQD_ENOMEM;
            break;
        }
        ops[2 + p] = (mqd_etcd_op_t){MQD_ETCD_OP_PUT, pkeys[p], o->pval, strlen(pkeys[p]),
                                     strlen(o->pval), 0,        false};
    }
    if (rc == 0) {
        o->n_inline = here ? td->partitions : 0;
        memcpy(o->id, td->id, sizeof o->id);
        mqd_etcd_cmp_t cmp = {key, strlen(key), MQD_ETCD_CMP_CREATE, 0};
        mqd_etcd_op_t get = {MQD_ETCD_OP_RANGE, key, NULL, strlen(key), 0, 0, false};
        mqd_etcd_txn_t txn = {&cmp, 1, ops, &get, n_ops, 1};
        rc = r->etcd ? mqd_etcd_txn(r->etcd, &txn, on_registered, o) : MQD_ESTATE;
    }
    if (rc == 0)
        mqd_repl_tn_add(&r->regs, name);
    for (uint32_t p = 0; pkeys && p < td->partitions; p++)
        free(pkeys[p]);
    free(pkeys);
    free(ops);
    free(key);
    free(dkey);
    return rc;
}

/* A copy with an identity was registered before (etcd lost it): it keeps its
 * replication_factor. One without was never registered (single-node data, an older RF-1
 * topic): it becomes a topic of replication_factor 1 on this node whatever the node's
 * config says now, since a controller's placement could make another, empty, replica its
 * leader and this one truncate its records to that. */
void mqd_repl_topic_register(mqd_repl_t *r, mqd_topic_t *t)
{
    const char *name = mqd_topic_name(t);
    uint32_t rf = mqd_topic_uid(t)[0] ? mqd_topic_conf(t)->replication_factor : 1;
    mqd_repl_tdesc_t td = {mqd_topic_nparts(t), rf, NULL, "", rf == 1 ? r->conf->node_id : 0};
    if (mqd_repl_tn_find(r->regs, name) || !r->etcd)
        return;
    reg_op_t *o = calloc(1, sizeof *o);
    if (!o || !(o->name = strdup(name))) {
        free(o);
        return;
    }
    o->r = r;
    o->copy = true;
    o->had_uid = mqd_topic_uid(t)[0] != '\0';
    if (o->had_uid) {
        snprintf(td.id, sizeof td.id, "%s", mqd_topic_uid(t));
    } else if (mqd_repl_id_new(td.id) != 0 || mqd_topic_set_uid(t, td.id) != 0) {
        MQD_WARN("repl", "topic %s: no identity could be kept for it: not registered", name);
        return reg_free(o);
    }
    td.config = config_with_rf(mqd_topic_overrides(t), rf);
    int rc = td.config ? reg_send(r, name, &td, o) : MQD_ENOMEM;
    free(td.config);
    if (rc != 0) {
        MQD_WARN("repl", "topic %s: not registered (%s): tried again", name, mqd_strerror(rc));
        reg_free(o);
    }
}

/* Registers a topic no node holds yet (a link's auto-create, `mqctl topic create`):
 * nparts 0 for its configured count, ov its settings (borrowed, or NULL). */
static int reg_new(mqd_repl_t *r, const char *name, uint32_t nparts, json_t *ov,
                   mqd_repl_done_fn done, void *done_arg)
{
    mqd_topic_conf_t tc;
    mqd_conf_topic(r->conf, name, &tc);
    mqd_repl_tdesc_t td = {nparts ? nparts : tc.partitions, rf_for(r, name, ov), NULL, "", 0};
    if (td.partitions == 0)
        td.partitions = r->conf->default_partitions ? r->conf->default_partitions : 1;
    if (td.partitions > r->conf->max_partitions_per_topic)
        return MQD_ETOOBIG;
    td.home = td.rf == 1 ? r->conf->node_id : 0;
    reg_op_t *o = calloc(1, sizeof *o);
    if (!o || !(o->name = strdup(name)) || mqd_repl_id_new(td.id) != 0 ||
        !(td.config = config_with_rf(ov, td.rf))) {
        if (o)
            free(o->name);
        free(o);
        return MQD_ENOMEM;
    }
    o->r = r;
    o->done = done;
    o->done_arg = done_arg;
    int rc = reg_send(r, name, &td, o);
    free(td.config);
    if (rc != 0)
        reg_free(o);
    else
        MQD_INFO("repl", "topic %s: registering it in the cluster (replication_factor %u%s)", name,
                 td.rf, td.home ? ", its partitions on this node" : "");
    return rc;
}

/* ---- the topic_create hook ($management CREATE) ---- */

int mqd_repl_topic_create(void *arg, const char *name, uint32_t nparts, const char *overrides_json,
                          mqd_repl_done_fn done, void *done_arg, char *err, size_t errlen)
{
    mqd_repl_t *r = arg;
    if (!mqd_repl_cluster_name(name))
        return 404; /* a node's own: created here as on a single node */
    if (!mqd_topic_name_valid(name, strlen(name))) {
        snprintf(err, errlen, "invalid topic name '%s'", name);
        return 400;
    }
    if (!r->etcd || !r->topics_loaded) {
        snprintf(err, errlen, "the cluster's topics are not read from etcd yet: try again");
        return 503;
    }
    if (mqd_repl_topic_find(r, name) || mqd_topic_find(r->s, name)) {
        snprintf(err, errlen, "topic '%s' already exists", name);
        return 409;
    }
    if (mqd_repl_tn_find(r->regs, name)) {
        snprintf(err, errlen, "topic '%s' is being created", name);
        return 409;
    }
    if (mqd_topic_limit_reached(r->s, name)) {
        snprintf(err, errlen, "topic limit reached (max_topics = %u)", r->conf->max_topics);
        return 503;
    }
    json_t *ov = overrides_json && *overrides_json ? json_loads(overrides_json, 0, NULL) : NULL;
    if (overrides_json && *overrides_json && !json_is_object(ov)) {
        json_decref(ov);
        snprintf(err, errlen, "invalid setting");
        return 400;
    }
    int rc = reg_new(r, name, nparts, ov, done, done_arg);
    json_decref(ov);
    if (rc == 0)
        return 0;
    if (rc == MQD_ETOOBIG) {
        snprintf(err, errlen,
                 "the topic's partitions are over the limit max_partitions_per_topic = %u",
                 r->conf->max_partitions_per_topic);
        return 400;
    }
    snprintf(err, errlen, "etcd request failed: %s", mqd_strerror(rc));
    return 503;
}

/* ---- the route hook: where a link to a topic goes ---- */

/* The state of partition p of rt as placed for this registration, or NULL. */
static const rpart_t *placed(mqd_repl_t *r, const rtopic_t *rt, uint32_t p)
{
    const rpart_t *rp = mqd_repl_part_find(r, rt->name, p);
    if (rp && rp->ps.topic_id[0] && strcmp(rp->ps.topic_id, rt->td.id) != 0)
        return NULL;
    return rp;
}

typedef struct verdict {
    int how;
    const char *why; /* MQD_ROUTE_WAIT: what for */
} verdict_t;

/* A link to partition part (-1: all) of registered topic rt, on a node without the
 * registered copy: to the leader of the first partition asked for that is placed and
 * not led here; waits while one is not placed, or this node is to hold a replica. */
static verdict_t registered(mqd_repl_t *r, const rtopic_t *rt, int64_t part, mqd_redirect_t *to,
                            const char **cond, char *err, size_t errlen)
{
    uint32_t self = r->conf->node_id;
    uint32_t from = part >= 0 ? (uint32_t)part : 0,
             to_p = part >= 0 ? (uint32_t)part + 1 : rt->td.partitions;
    if (part >= 0 && (uint64_t)part >= rt->td.partitions) {
        *cond = "amqp:not-found";
        snprintf(err, errlen, "no such partition: topic '%s' has %u", rt->name, rt->td.partitions);
        return (verdict_t){MQD_ROUTE_REFUSE, NULL};
    }
    const rpart_t *lead = NULL;
    for (uint32_t p = from; p < to_p; p++) {
        const rpart_t *rp = placed(r, rt, p);
        if (!rp)
            return (verdict_t){MQD_ROUTE_WAIT, "its partitions are not placed yet (fewer live "
                                               "nodes than its replication_factor?)"};
        if (mqd_repl_pstate_has(rp->ps.replicas, rp->ps.n_replicas, self))
            return (verdict_t){MQD_ROUTE_WAIT, "this node's replica of it is being made"};
        if (!lead && rp->ps.leader != self)
            lead = rp;
    }
    const mqd_cluster_node_t *n = lead ? mqd_repl_node(r, lead->ps.leader) : NULL;
    if (!n || !mqd_repl_split_hostport(n->address, to))
        return (verdict_t){MQD_ROUTE_WAIT, "its leader's address is not known here"};
    if (!n->alive && lead->ps.n_replicas == 1) {
        *cond = "amqp:resource-limit-exceeded";
        snprintf(err, errlen,
                 "topic '%s' partition %u is offline: its only replica, node %" PRIu32 ", is down",
                 rt->name, lead->part, lead->ps.leader);
        return (verdict_t){MQD_ROUTE_REFUSE, NULL};
    }
    if (part >= 0)
        snprintf(to->address, sizeof to->address, "%s/Partitions/%" PRId64, rt->name, part);
    else
        snprintf(to->address, sizeof to->address, "%s", rt->name);
    return (verdict_t){MQD_ROUTE_REDIRECT, NULL};
}

/* Where a link to `name` goes when this node holds a copy t of it. */
static verdict_t with_copy(mqd_repl_t *r, const rtopic_t *rt, mqd_topic_t *t, int64_t part,
                           mqd_redirect_t *to, const char **cond, char *err, size_t errlen)
{
    const char *name = mqd_topic_name(t);
    if (rt && strcmp(mqd_topic_uid(t), rt->td.id) == 0) {
        const char *why = NULL; /* served only by the partitions' leader (serve.c) */
        switch (part == MQD_ROUTE_PART_LED ? mqd_repl_where_led(r, t, &why)
                                           : mqd_repl_where(r, t, part, to, &why)) {
        case MQD_REPL_SERVE_REDIRECT: return (verdict_t){MQD_ROUTE_REDIRECT, NULL};
        case MQD_REPL_SERVE_WAIT: return (verdict_t){MQD_ROUTE_WAIT, why};
        default: return (verdict_t){MQD_ROUTE_HERE, NULL};
        }
    }
    if (mqd_repl_tn_find(r->regs, name) || !rt)
        return (verdict_t){MQD_ROUTE_WAIT, "this node's copy is being registered"};
    if (!mqd_topic_uid(t)[0] && !r->parts_loaded)
        return (verdict_t){MQD_ROUTE_WAIT, "the cluster's partitions are not read yet"};
    verdict_t v = registered(r, rt, part, to, cond, err, errlen);
    if (v.how != MQD_ROUTE_WAIT || !mqd_repl_topic_quarantined(r, name))
        return v;
    *cond = "amqp:precondition-failed";
    snprintf(err, errlen,
             "this node's topic '%s' is not the cluster's topic of that name (never registered: "
             "kept, not served; see the broker's log)",
             name);
    return (verdict_t){MQD_ROUTE_REFUSE, NULL};
}

/* A receiver with mqd:fwd-local-only on a node that leads no partition of the topic:
 * refused, never redirected (it asked for this node's partitions only; the node that
 * opened it picks the leaders from etcd and opens its legs there). */
static int led_none(mqd_repl_t *r, const char *name, const char **cond, char *err, size_t errlen)
{
    *cond = "amqp:not-found";
    snprintf(err, errlen,
             "node %" PRIu32 " leads no partition of topic '%s' (a link with "
             "mqd:fwd-local-only is served only by a leader of at least one of them)",
             r->conf->node_id, name);
    return MQD_ROUTE_REFUSE;
}

int mqd_repl_route(void *arg, const char *name, mqd_topic_t *t, int64_t part, bool may_create,
                   bool may_wait, mqd_redirect_t *to, const char **cond, char *err, size_t errlen,
                   bool *created)
{
    mqd_repl_t *r = arg;
    if (!r->etcd || !mqd_repl_cluster_name(name) || (t && mqd_topic_temporary(t)))
        return MQD_ROUTE_HERE;
    rtopic_t *rt = mqd_repl_topic_find(r, name);
    tname_t *w = mqd_repl_tn_find(r->waits, name);
    verdict_t v = {MQD_ROUTE_WAIT, NULL};
    if (!r->topics_loaded)
        v.why = "the cluster's topics are not read from etcd yet";
    else if (t)
        v = with_copy(r, rt, t, part, to, cond, err, errlen);
    else if (rt)
        v = registered(r, rt, part, to, cond, err, errlen);
    else if (mqd_repl_tn_find(r->regs, name))
        v.why = "it is being registered in the cluster";
    else if (!may_create)
        return MQD_ROUTE_HERE; /* not found, or not allowed: the caller says which */
    else if (w && w->retry_ms > mqd_now_ms())
        v.why = w->why;
    else if (reg_new(r, name, 0, NULL, NULL, NULL) == 0)
        v.why = "it is being registered in the cluster", *created = true;
    else
        v.why = "etcd could not be asked to register it";
    if (v.how == MQD_ROUTE_REDIRECT && part == MQD_ROUTE_PART_LED)
        return led_none(r, name, cond, err, errlen);
    if (v.how != MQD_ROUTE_WAIT)
        return v.how;
    *cond = "amqp:resource-limit-exceeded";
    if (!may_wait) {
        snprintf(err, errlen, "topic '%s': %s: send it again", name, v.why);
        return MQD_ROUTE_REFUSE;
    }
    w = wait_add(r, name, v.why);
    if (!w || w->expired) {
        snprintf(err, errlen, "topic '%s': waited %d ms for the cluster: %s", name, WAIT_MS,
                 w ? w->why : v.why);
        return MQD_ROUTE_REFUSE;
    }
    return MQD_ROUTE_WAIT;
}

bool mqd_repl_route_send(void *arg, const char *name, mqd_topic_t *t)
{
    mqd_repl_t *r = arg;
    if (!r->etcd || !r->topics_loaded || !mqd_repl_cluster_name(name) ||
        (t && mqd_topic_temporary(t)))
        return false;
    rtopic_t *rt = mqd_repl_topic_find(r, name);
    if (!rt)
        return false;
    if (!t) /* no copy here: served only while none is being made (the copy's id decides) */
        return !mqd_repl_tn_find(r->regs, name);
    return strcmp(mqd_topic_uid(t), rt->td.id) == 0;
}
