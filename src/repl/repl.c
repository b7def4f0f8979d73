/* repl: the partition table kept from etcd's partitions/ and topics/ keys, the roles it
 * gives this node, and the hooks the broker calls (server.h mqd_repl_hooks_t). */
#include "config.h"
#include "repl/repl_int.h"

#include <event2/event.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The partitions by (topic, partition): every send asks (send_check), and in a cluster
 * every topic's partitions are here. */
static size_t part_hash(const mqd_repl_t *r, const char *topic, uint32_t part)
{
    uint32_t h = 2166136261u ^ part;
    while (*topic)
        h = (h ^ (uint8_t)*topic++) * 16777619u;
    return h & (r->idx_cap - 1);
}

static int idx_grow(mqd_repl_t *r)
{
    size_t cap = r->idx_cap ? r->idx_cap * 2 : 256;
    rpart_t **nb = calloc(cap, sizeof *nb);
    if (!nb)
        return MQD_ENOMEM;
    free(r->idx);
    r->idx = nb;
    r->idx_cap = cap;
    for (rpart_t *rp = r->parts; rp; rp = rp->next) {
        size_t b = part_hash(r, rp->topic, rp->part);
        rp->hnext = r->idx[b];
        r->idx[b] = rp;
    }
    return 0;
}

static void idx_del(mqd_repl_t *r, rpart_t *rp)
{
    if (!r->idx_cap)
        return;
    for (rpart_t **pp = &r->idx[part_hash(r, rp->topic, rp->part)]; *pp; pp = &(*pp)->hnext)
        if (*pp == rp) {
            *pp = rp->hnext;
            return;
        }
}

rpart_t *mqd_repl_part_find(mqd_repl_t *r, const char *topic, uint32_t part)
{
    if (!r->idx_cap)
        return NULL;
    for (rpart_t *rp = r->idx[part_hash(r, topic, part)]; rp; rp = rp->hnext)
        if (rp->part == part && strcmp(rp->topic, topic) == 0)
            return rp;
    return NULL;
}

const mqd_cluster_node_t *mqd_repl_node(mqd_repl_t *r, uint32_t id)
{
    const mqd_cluster_view_t *v = r->m ? mqd_cluster_view(r->m) : NULL;
    for (size_t i = 0; v && i < v->n_nodes; i++)
        if (v->nodes[i].id == id)
            return &v->nodes[i];
    return NULL;
}

void mqd_repl_kick(mqd_repl_t *r)
{
    if (r->ev_kick)
        event_active(r->ev_kick, EV_TIMEOUT, 0);
}

int mqd_repl_grow(mqd_repl_t *r, size_t need)
{
    if (need <= r->cap)
        return 0;
    uint8_t *nb = realloc(r->buf, need);
    if (!nb)
        return MQD_ENOMEM;
    r->buf = nb;
    r->cap = need;
    return 0;
}

uint32_t mqd_repl_min_isr(const mqd_repl_t *r, const rpart_t *rp)
{
    const mqd_topic_conf_t *tc = rp->local ? mqd_topic_conf(mqd_part_topic(rp->local)) : NULL;
    uint32_t rf = rp->ps.n_replicas, min = tc ? tc->min_insync_replicas : 0;
    if (min == 0)
        min = rf < 2 ? rf : 2;
    return min;
}

/* ---- the broker's hooks ---- */

bool mqd_repl_split_hostport(const char *a, mqd_redirect_t *to)
{
    const char *colon = strrchr(a, ':');
    if (!colon || colon == a)
        return false;
    size_t hl = (size_t)(colon - a);
    if (a[0] == '[' && hl >= 2 && a[hl - 1] == ']')
        a++, hl -= 2;
    long port = strtol(colon + 1, NULL, 10);
    if (hl >= sizeof to->host || port <= 0 || port > 65535)
        return false;
    memcpy(to->host, a, hl);
    to->host[hl] = '\0';
    to->port = (uint16_t)port;
    return true;
}

/* What this node knows of rp for the serving rule (serve.c); *lead the leader's node when
 * its address is known. */
static mqd_repl_pview_t pview(mqd_repl_t *r, const rpart_t *rp, mqd_redirect_t *lead)
{
    mqd_repl_pview_t v = {0};
    if (!rp)
        return v;
    const mqd_cluster_node_t *n = mqd_repl_node(r, rp->ps.leader);
    v.known = true;
    v.leader = rp->ps.leader;
    v.leading = rp->role == ROLE_LEADER && rp->lead && rp->lead->epoch == rp->ps.epoch;
    v.leader_known = n && mqd_repl_split_hostport(n->address, lead);
    return v;
}

mqd_repl_serve_t mqd_repl_part_serve(const rpart_t *rp)
{
    mqd_redirect_t to;
    const char *why;
    mqd_repl_pview_t v = pview(rp->r, rp, &to);
    return mqd_repl_serve(rp->r->conf->node_id, &v, &why);
}

/* How a link spanning partitions is decided (serve.c): the verdict per partition, their
 * fold, where the fold starts and the verdict that ends it at once. */
typedef struct serve_rule {
    mqd_repl_serve_t (*one)(uint32_t self, const mqd_repl_pview_t *v, const char **why);
    mqd_repl_serve_t (*join)(mqd_repl_serve_t acc, mqd_repl_serve_t next);
    mqd_repl_serve_t start, last;
} serve_rule_t;

/* Every partition led here (a plain link); one is enough (mqd:fwd-local-only). */
static const serve_rule_t ALL_LED = {mqd_repl_serve, mqd_repl_serve_join, MQD_REPL_SERVE_HERE,
                                     MQD_REPL_SERVE_REDIRECT};
static const serve_rule_t ONE_LED = {mqd_repl_serve_led, mqd_repl_serve_led_join,
                                     MQD_REPL_SERVE_REDIRECT, MQD_REPL_SERVE_HERE};

/* The rule over partitions [from, end) of t: *why is the reason of the wait that
 * decided, *to (when to is not NULL) the leader of the redirect that did. */
static mqd_repl_serve_t fold(mqd_repl_t *r, mqd_topic_t *t, uint32_t from, uint32_t end,
                             const serve_rule_t *rule, mqd_redirect_t *to, const char **why)
{
    const char *name = mqd_topic_name(t);
    mqd_repl_serve_t acc = rule->start;
    for (uint32_t p = from; p < end && acc != rule->last; p++) {
        mqd_redirect_t lead;
        const char *w = NULL;
        mqd_repl_pview_t v = pview(r, mqd_repl_part_find(r, name, p), &lead);
        mqd_repl_serve_t one = rule->one(r->conf->node_id, &v, &w);
        if (rule->join(acc, one) == acc)
            continue;
        acc = one;
        if (one == MQD_REPL_SERVE_WAIT)
            *why = w;
        else if (one == MQD_REPL_SERVE_REDIRECT && to)
            *to = lead;
    }
    return acc;
}

int mqd_repl_where(mqd_repl_t *r, mqd_topic_t *t, int64_t part, mqd_redirect_t *to,
                   const char **why)
{
    const char *name = mqd_topic_name(t);
    uint32_t n = mqd_topic_nparts(t);
    if (part >= (int64_t)n)
        return MQD_REPL_SERVE_HERE; /* the caller refuses it: no such partition */
    uint32_t from = part >= 0 ? (uint32_t)part : 0, end = part >= 0 ? (uint32_t)part + 1 : n;
    mqd_repl_serve_t acc = fold(r, t, from, end, &ALL_LED, to, why);
    if (acc != MQD_REPL_SERVE_REDIRECT)
        return acc;
    /* a link to the whole topic goes to the leader of the first partition led elsewhere
     * (a link spanning partitions of several leaders needs client routing, a later issue) */
    if (part >= 0)
        snprintf(to->address, sizeof to->address, "%s/Partitions/%" PRId64, name, part);
    else
        snprintf(to->address, sizeof to->address, "%s", name);
    return acc;
}

mqd_repl_serve_t mqd_repl_leader(mqd_repl_t *r, const char *topic, uint32_t part,
                                 uint32_t *leader)
{
    mqd_redirect_t lead;
    const char *why = NULL;
    rtopic_t *rt = mqd_repl_topic_find(r, topic);
    const rpart_t *rp = rt ? mqd_repl_part_find(r, topic, part) : NULL;
    if (rp && rp->ps.topic_id[0] && strcmp(rp->ps.topic_id, rt->td.id) != 0)
        rp = NULL; /* placed for another registration of the name */
    mqd_repl_pview_t v = pview(r, rp, &lead);
    mqd_repl_serve_t how = mqd_repl_serve(r->conf->node_id, &v, &why);
    if (how == MQD_REPL_SERVE_HERE && !mqd_repl_may_ack(rp))
        return MQD_REPL_SERVE_WAIT; /* lease lost: not this node's to take */
    if (how == MQD_REPL_SERVE_REDIRECT) {
        const mqd_cluster_node_t *n = mqd_repl_node(r, v.leader);
        if (!n || !n->alive)
            return MQD_REPL_SERVE_WAIT; /* its node is gone: an election comes */
    }
    *leader = v.leader;
    return how;
}

bool mqd_repl_fenced(mqd_repl_t *r, const char *topic, uint32_t part)
{
    const rpart_t *rp = mqd_repl_part_find(r, topic, part);
    return rp && rp->role == ROLE_LEADER && rp->local && !mqd_repl_may_ack(rp);
}

uint32_t mqd_repl_nparts(mqd_repl_t *r, const char *topic)
{
    rtopic_t *rt = mqd_repl_topic_find(r, topic);
    return rt ? rt->td.partitions : 0;
}

void mqd_repl_set_forwarding(mqd_repl_t *r, bool on)
{
    r->forwarding = on;
}

uint32_t mqd_repl_self(const mqd_repl_t *r)
{
    return r->conf->node_id;
}

uint32_t mqd_repl_lease_ms(const mqd_repl_t *r)
{
    return r->conf->lease_ttl_ms;
}

int mqd_repl_where_led(mqd_repl_t *r, mqd_topic_t *t, const char **why)
{
    return fold(r, t, 0, mqd_topic_nparts(t), &ONE_LED, NULL, why);
}

static const char *on_send_check(void *arg, mqd_topic_t *t, uint32_t part, int acks,
                                 const char **cond)
{
    mqd_repl_t *r = arg;
    rpart_t *rp = mqd_repl_part_find(r, mqd_topic_name(t), part);
    if (!rp && (mqd_topic_temporary(t) || !mqd_repl_cluster_name(mqd_topic_name(t))))
        return NULL; /* a node's own topic: a reply node, a dead-letter topic */
    *cond = "amqp:precondition-failed";
    if (!rp || rp->role != ROLE_LEADER || !rp->local)
        return "this node is not the partition's leader (no replication state yet, or it "
               "moved): attach again to be redirected";
    if (!mqd_repl_may_ack(rp))
        return "this node lost its cluster lease: it may no longer lead the partition "
               "(attach again once it is settled)";
    if (rp->xfer_to)
        return REBAL_REFUSAL; /* nothing appended while the preferred replica catches up */
    *cond = "amqp:resource-limit-exceeded";
    if (acks == MQD_ACKS_ALL && rp->ps.n_isr < mqd_repl_min_isr(r, rp))
        return "the in-sync set is too small: fewer in-sync replicas than "
               "min_insync_replicas (acks = all)";
    return NULL;
}

static void on_attach(void *arg, mqd_conn_t *c, pn_link_t *l, const char *addr)
{
    mqd_repl_lead_attach(arg, c, l, addr);
}

static void on_link_event(void *arg, mqd_lstate_t *ls, pn_event_t *e)
{
    mqd_repl_lead_event(arg, ls, e);
}

static void on_link_gone(void *arg, mqd_lstate_t *ls)
{
    mqd_repl_lead_gone(arg, ls);
}

static void on_status(void *arg, pn_data_t *out)
{
    mqd_repl_status(arg, out);
}

static void on_metrics(void *arg, struct evbuffer *b)
{
    mqd_repl_metrics(arg, b);
}

/* ---- roles ---- */

static void on_commit(mqd_part_t *p, uint64_t visible_end, void *arg)
{
    rpart_t *rp = arg;
    mqd_repl_kick(rp->r); /* not from inside the commit point's walk */
}

static void set_role(rpart_t *rp, role_t role)
{
    if (rp->role == ROLE_LEADER)
        mqd_repl_lead_stop(rp);
    else if (rp->role == ROLE_FOLLOWER)
        mqd_repl_fol_stop(rp);
    rp->role = ROLE_NONE;
    int rc = 0;
    if (role == ROLE_FOLLOWER && rp->r->stopping)
        role = ROLE_NONE; /* a stopping node that handed the lead over does not rejoin */
    if (role == ROLE_LEADER)
        rc = mqd_repl_lead_start(rp);
    else if (role == ROLE_FOLLOWER)
        rc = mqd_repl_fol_start(rp);
    if (rc == 0)
        rp->role = role;
    if (rp->role == ROLE_NONE && rp->doubt_until_ms)
        mqd_repl_fol_doubt_end(rp, 0); /* no follower here to learn their fate */
    /* from any role (a leader's links went in lead_stop already): no link stays that an
     * attach would not be served for now (serve.c) */
    if (rp->local && !rp->r->closing && !rp->dropping &&
        mqd_repl_part_serve(rp) != MQD_REPL_SERVE_HERE)
        mqd_repl_detach_links(rp);
    mqd_repl_wake(rp->r, rp->topic); /* attaches waiting for it to settle (reg.c) */
    MQD_NOTICE("repl", "%s/%u: %s (leader %" PRIu32 ", epoch %" PRIu32 ")%s", rp->topic, rp->part,
               rp->role == ROLE_LEADER     ? "leader"
               : rp->role == ROLE_FOLLOWER ? "follower"
                                           : "no role",
               rp->ps.leader, rp->ps.epoch, rc ? " (start failed)" : "");
}

void mqd_repl_on_leader(mqd_repl_t *r, mqd_repl_leader_fn fn, void *arg)
{
    r->leader_fn = fn;
    r->leader_arg = arg;
}

/* Tells mqd_repl_on_leader's callback when rp's leader, or this node's playing it, changed. */
static void tell_leader(mqd_repl_t *r, rpart_t *rp)
{
    bool leading = rp->role == ROLE_LEADER;
    if (rp->told_leader == rp->ps.leader && rp->told_leading == leading)
        return;
    rp->told_leader = rp->ps.leader;
    rp->told_leading = leading;
    if (r->leader_fn && !r->closing)
        r->leader_fn(r->leader_arg, rp->topic, rp->part, rp->ps.leader);
}

/* Brings this node's role for rp in line with its state in etcd. */
static void apply(mqd_repl_t *r, rpart_t *rp)
{
    uint32_t self = r->conf->node_id;
    bool member = mqd_repl_pstate_has(rp->ps.replicas, rp->ps.n_replicas, self);
    if (rp->ps.leader != self)
        rp->handover_ms = 0;
    /* a partition with one replica needs no word of its commits: no follower to ship
       them to, no watermark to move (leader.c) */
    if (member && !rp->local && (rp->local = mqd_repl_topic_replica(r, rp)) != NULL &&
        !rp->subscribed && rp->ps.n_replicas > 1)
        rp->subscribed = mqd_part_commit_subscribe(rp->local, on_commit, rp) == 0;
    role_t want = !member || !rp->local   ? ROLE_NONE
                  : rp->handover_ms       ? ROLE_NONE
                  : rp->ps.leader == self ? ROLE_LEADER
                                          : ROLE_FOLLOWER;
    if (want != rp->role || (want == ROLE_FOLLOWER && rp->fol && rp->fol->leader != rp->ps.leader))
        set_role(rp, want); /* a new leader: a new connection, attached in the new epoch */
    else if (want == ROLE_LEADER) {
        mqd_repl_lead_epoch(rp);
        mqd_repl_lead_isr_changed(rp);
    } else if (want == ROLE_FOLLOWER) {
        mqd_repl_fol_epoch(rp); /* the same leader in a new epoch: attach again */
    }
    tell_leader(r, rp);
}

/* ---- etcd: partitions/<T>/<P> and topics/<T> ---- */

static rpart_t *part_get(mqd_repl_t *r, const char *topic, uint32_t part, const char *key)
{
    rpart_t *rp = mqd_repl_part_find(r, topic, part);
    if (rp)
        return rp;
    if ((r->n_parts + 1) * 2 > r->idx_cap && idx_grow(r) != 0)
        return NULL;
    if (!(rp = calloc(1, sizeof *rp)) || !(rp->topic = strdup(topic)) || !(rp->key = strdup(key))) {
        if (rp)
            free(rp->topic);
        free(rp);
        return NULL;
    }
    rp->r = r;
    rp->part = part;
    rp->next = r->parts;
    r->parts = rp;
    size_t b = part_hash(r, topic, part);
    rp->hnext = r->idx[b];
    r->idx[b] = rp;
    r->n_parts++;
    return rp;
}

static void part_kv(mqd_repl_t *r, const mqd_etcd_kv_t *kv, bool at_start)
{
    size_t pl = strlen(r->parts_prefix);
    const char *name = kv->key + pl, *slash = strrchr(name, '/');
    char topic[MQD_NAME_MAX + 1], *end;
    mqd_repl_pstate_t ps;
    if (kv->key_len <= pl || !slash || slash == name || (size_t)(slash - name) > MQD_NAME_MAX)
        return;
    unsigned long p = strtoul(slash + 1, &end, 10);
    if (*end || end == slash + 1 || p > 65535 ||
        mqd_repl_pstate_parse(kv->value, kv->value_len, &ps) != 0) {
        MQD_WARN("repl", "%s: not a partition state: ignored", kv->key);
        return;
    }
    memcpy(topic, name, (size_t)(slash - name));
    topic[slash - name] = '\0';
    rpart_t *rp = part_get(r, topic, (uint32_t)p, kv->key);
    if (!rp || kv->mod_revision < rp->mod_rev)
        return; /* older than what a CAS answer told us */
    rp->ps = ps;
    rp->mod_rev = kv->mod_revision;
    rp->seen = true;
    if (at_start && rp->role == ROLE_NONE && ps.leader == r->conf->node_id && ps.n_isr > 1)
        rp->handover_ms = mqd_now_ms() + (int64_t)r->conf->lease_ttl_ms; /* ctl.c */
    apply(r, rp);
    mqd_repl_wake(r, rp->topic); /* links waiting for its placement (reg.c) */
}

void mqd_repl_part_put(mqd_repl_t *r, const mqd_etcd_kv_t *kv)
{
    part_kv(r, kv, false);
}

void mqd_repl_unbind(rpart_t *rp)
{
    if (rp->role != ROLE_NONE)
        set_role(rp, ROLE_NONE); /* fetch links, the outbound connection, the commit tap */
    if (rp->subscribed && rp->local)
        mqd_part_commit_unsubscribe(rp->local, on_commit, rp);
    rp->subscribed = false;
    rp->local = NULL;
    rp->handover_ms = 0;
}

void mqd_repl_part_free(rpart_t *rp)
{
    free(rp->topic);
    free(rp->key);
    free(rp);
}

void mqd_repl_part_drop(rpart_t *rp)
{
    mqd_repl_t *r = rp->r;
    rp->dropping = true; /* its topic goes too (topics.c), detaching its receivers */
    mqd_repl_unbind(rp);
    idx_del(r, rp);
    r->n_parts--;
    for (rpart_t **pp = &r->parts; *pp; pp = &(*pp)->next)
        if (*pp == rp) {
            *pp = rp->next;
            break;
        }
    if (rp->truncating) { /* its callback comes with rp: freed by the tick after it */
        rp->next = r->doomed;
        r->doomed = rp;
    } else {
        mqd_repl_part_free(rp);
    }
}

/* The partition key `key` went (its topic was deleted). */
static void part_gone(mqd_repl_t *r, const mqd_etcd_kv_t *kv)
{
    for (rpart_t *rp = r->parts; rp; rp = rp->next) {
        if (strcmp(rp->key, kv->key) != 0)
            continue;
        char *topic = strdup(rp->topic);
        MQD_INFO("repl", "%s/%u: its state left etcd (epoch %" PRIu32 ")", rp->topic, rp->part,
                 rp->ps.epoch);
        mqd_repl_part_drop(rp);
        if (topic)
            mqd_repl_topic_parts_gone(r, topic);
        free(topic);
        return;
    }
}

static void on_parts(void *arg, mqd_etcd_ev_t ev, const mqd_etcd_kv_t *kvs, size_t n, int64_t rev)
{
    mqd_repl_t *r = arg;
    if (ev == MQD_ETCD_EV_SNAPSHOT)
        for (rpart_t *rp = r->parts; rp; rp = rp->next)
            rp->seen = false;
    for (size_t i = 0; i < n; i++) {
        if (ev == MQD_ETCD_EV_DELETE)
            part_gone(r, &kvs[i]);
        else
            part_kv(r, &kvs[i], ev == MQD_ETCD_EV_SNAPSHOT);
    }
    if (ev != MQD_ETCD_EV_SNAPSHOT)
        return;
    /* a snapshot read again after a compaction: a key it lacks went meanwhile */
    for (rpart_t *rp = r->parts, *next; rp; rp = next) {
        next = rp->next;
        if (!rp->seen) {
            MQD_INFO("repl", "%s/%u: its state left etcd", rp->topic, rp->part);
            mqd_repl_part_drop(rp);
        }
    }
    bool first = !r->parts_loaded;
    r->parts_loaded = true;
    /* copies never registered are judged against the placements (topics.c) */
    for (mqd_topic_t *t = mqd_srv_topic_first(r->s); first && r->topics_loaded && t;
         t = mqd_srv_topic_next(t))
        if (!mqd_topic_uid(t)[0])
            mqd_repl_topic_reconcile(r, t);
}

typedef struct cas_op {
    mqd_repl_t *r;
    char *topic;
    uint32_t part;
    mqd_repl_pstate_t ps;
    mqd_repl_cas_done_fn done; /* or NULL */
    void *done_arg;
} cas_op_t;

static void on_cas(void *arg, const mqd_etcd_reply_t *rep)
{
    cas_op_t *o = arg;
    mqd_repl_t *r = o->r;
    /* MQD_ESTATE: the etcd client is being freed (main.c frees repl first): r is gone */
    rpart_t *rp = rep->rc == MQD_ESTATE || r->closing ? NULL
                                                      : mqd_repl_part_find(r, o->topic, o->part);
    if (rp) {
        rp->cas_out = false;
        if (rep->rc == 0 && rep->succeeded && rep->revision > rp->mod_rev) {
            rp->ps = o->ps;
            rp->mod_rev = rep->revision;
            apply(r, rp);
        } else if (rep->rc == 0 && !rep->succeeded && rep->n_kvs) {
            part_kv(r, &rep->kvs[0], false); /* someone else's newer state */
        }
    }
    if (o->done)
        o->done(o->done_arg, rep->rc == 0 && rep->succeeded);
    free(o->topic);
    free(o);
}

int mqd_repl_part_cas(rpart_t *rp, const mqd_repl_pstate_t *ps)
{
    return mqd_repl_part_cas_cb(rp, ps, NULL, NULL);
}

int mqd_repl_part_cas_cb(rpart_t *rp, const mqd_repl_pstate_t *ps, mqd_repl_cas_done_fn done,
                         void *done_arg)
{
    mqd_repl_t *r = rp->r;
    if (rp->cas_out)
        return MQD_EAGAIN;
    cas_op_t *o = calloc(1, sizeof *o);
    char *val = mqd_repl_pstate_json(ps);
    if (!o || !val || !(o->topic = strdup(rp->topic))) {
        free(o);
        free(val);
        return MQD_ENOMEM;
    }
    o->r = r;
    o->part = rp->part;
    o->ps = *ps;
    o->done = done;
    o->done_arg = done_arg;
    mqd_etcd_cmp_t cmp = {rp->key, strlen(rp->key), MQD_ETCD_CMP_MOD, rp->mod_rev};
    mqd_etcd_op_t put = {MQD_ETCD_OP_PUT, rp->key, val, strlen(rp->key), strlen(val), 0, false};
    mqd_etcd_op_t get = {MQD_ETCD_OP_RANGE, rp->key, NULL, strlen(rp->key), 0, 0, false};
    mqd_etcd_txn_t txn = {&cmp, 1, &put, &get, 1, 1};
    int rc = mqd_etcd_txn(r->etcd, &txn, on_cas, o);
    free(val);
    if (rc != 0) {
        free(o->topic);
        free(o);
        return rc;
    }
    rp->cas_out = true;
    return 0;
}

/* ---- the loop: a kick after commit-point moves, a tick for timers ---- */

/* A leader from before this node's restart: handed over (ctl.c), or led after all once
 * no other in-sync replica showed up within a lease TTL. */
static void handover_tick(mqd_repl_t *r, rpart_t *rp, int64_t now_ms)
{
    if (mqd_repl_ctl_handover(r, rp) == 0 || now_ms < rp->handover_ms)
        return;
    MQD_WARN("repl", "%s/%u: no live in-sync replica to hand over to: this node leads", rp->topic,
             rp->part);
    rp->handover_ms = 0;
    apply(r, rp);
}

static void work(mqd_repl_t *r, int64_t now_ms)
{
    for (rpart_t *rp = r->parts; rp; rp = rp->next) {
        if (rp->role == ROLE_NONE &&
            mqd_repl_pstate_has(rp->ps.replicas, rp->ps.n_replicas, r->conf->node_id))
            apply(r, rp); /* its replica could not be made before */
        if (rp->fenced && rp->fenced_retry && now_ms)
            mqd_repl_refresh(rp);
        if (rp->handover_ms && now_ms)
            handover_tick(r, rp, now_ms);
        if (rp->role == ROLE_LEADER)
            mqd_repl_lead_work(rp, now_ms);
        else if (rp->role == ROLE_FOLLOWER)
            mqd_repl_fol_work(rp, now_ms);
        if (rp->xfer_to)
            mqd_repl_rebal_xfer(rp, now_ms); /* rebal.c: a hand-back in progress */
    }
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    work(arg, 0);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    mqd_repl_t *r = arg;
    int64_t now = mqd_now_ms();
    work(r, now);
    mqd_repl_topic_tick(r, now); /* topics.c: copies waiting to be deleted, a sweep */
    mqd_repl_waits_tick(r, now); /* reg.c: links waiting for the cluster */
    mqd_repl_ctl_failover(r); /* again after a lost race or an offline partition */
    mqd_repl_rebal_tick(r, now);
    mqd_repl_hwck_tick(r, now);
}

static void ctl_gained(void *arg, int64_t create_rev)
{
    mqd_repl_t *r = arg;
    r->controller = true;
    mqd_repl_ctl_scan(r);
    mqd_repl_ctl_failover(r); /* leaders that went with the previous controller */
}

static void node_left(void *arg, uint32_t id)
{
    mqd_repl_cand_report(arg, id); /* this node's log end, for the election (cand.c) */
    mqd_repl_ctl_failover(arg);
}

/* A partition whose only replica is this node needs no fence: no other node can be
 * elected for it, so it goes on acknowledging while etcd is away, as a node's own topic
 * did before every topic was the cluster's. */
bool mqd_repl_may_ack(const rpart_t *rp)
{
    if (rp->ps.n_replicas == 1 && rp->ps.replicas[0] == rp->r->conf->node_id)
        return true;
    return !rp->fenced && (!rp->r->m || mqd_cluster_lease_live(rp->r->m));
}

typedef struct refresh_op {
    mqd_repl_t *r;
    char *topic;
    uint32_t part;
} refresh_op_t;

static void on_refresh(void *arg, const mqd_etcd_reply_t *rep)
{
    refresh_op_t *o = arg;
    rpart_t *rp = rep->rc == MQD_ESTATE || o->r->closing
                      ? NULL
                      : mqd_repl_part_find(o->r, o->topic, o->part);
    if (rp && rep->rc == 0 && rep->n_kvs == 1) {
        part_kv(o->r, &rep->kvs[0], false); /* a newer leader: steps down here */
        rp->fenced = false;
        MQD_NOTICE("repl", "%s/%u: state read again: leader %" PRIu32 ", epoch %" PRIu32, rp->topic,
                   rp->part, rp->ps.leader, rp->ps.epoch);
    } else if (rp) {
        rp->fenced_retry = true; /* the tick asks again */
    }
    free(o->topic);
    free(o);
}

/* Reads rp's key again (a linearizable range): only what etcd says now lets a leader
 * that lost its lease acknowledge again. */
void mqd_repl_refresh(rpart_t *rp)
{
    refresh_op_t *o = calloc(1, sizeof *o);
    rp->fenced_retry = false;
    if (!o || !(o->topic = strdup(rp->topic))) {
        free(o);
        rp->fenced_retry = true;
        return;
    }
    o->r = rp->r;
    o->part = rp->part;
    if (mqd_etcd_range(rp->r->etcd, rp->key, strlen(rp->key), false, on_refresh, o) != 0) {
        free(o->topic);
        free(o);
        rp->fenced_retry = true;
    }
}

/* Everything this node leads is fenced: the controller may have moved it meanwhile. */
static void lease_lost(void *arg)
{
    mqd_repl_t *r = arg;
    for (rpart_t *rp = r->parts; rp; rp = rp->next) {
        if (rp->role != ROLE_LEADER || rp->ps.n_replicas == 1)
            continue; /* one replica: nobody else can have been elected (mqd_repl_may_ack) */
        rp->fenced = true;
        MQD_WARN("repl",
                 "%s/%u: lease lost: acknowledging nothing until the partition's "
                 "state is read again",
                 rp->topic, rp->part);
        mqd_repl_refresh(rp);
    }
}

static void ctl_lost(void *arg)
{
    ((mqd_repl_t *)arg)->controller = false;
}

static void node_joined(void *arg, const mqd_cluster_node_t *n)
{
    mqd_repl_t *r = arg;
    if (r->controller)
        mqd_repl_ctl_scan(r); /* a topic waiting for enough nodes */
}

void mqd_repl_cluster_cbs(mqd_repl_t *r, mqd_cluster_cbs_t *out)
{
    *out = (mqd_cluster_cbs_t){.controller_gained = ctl_gained,
                               .controller_lost = ctl_lost,
                               .node_joined = node_joined,
                               .node_left = node_left,
                               .lease_lost = lease_lost,
                               .arg = r};
}

int mqd_repl_new(mqd_server_t *s, const mqd_conf_t *conf, mqd_repl_t **out)
{
    mqd_repl_t *r = calloc(1, sizeof *r);
    if (!r)
        return MQD_ENOMEM;
    r->s = s;
    r->conf = conf;
    const char *name = conf->cluster_name ? conf->cluster_name : "mqd";
    snprintf(r->topics_prefix, sizeof r->topics_prefix, "/%s/topics/", name);
    snprintf(r->parts_prefix, sizeof r->parts_prefix, "/%s/partitions/", name);
    snprintf(r->cand_prefix, sizeof r->cand_prefix, "/%s/candidates/", name);
    snprintf(r->deleted_prefix, sizeof r->deleted_prefix, "/%s/deleted/", name);
    snprintf(r->dead_prefix, sizeof r->dead_prefix, "/%s/dead/", name);
    r->ev_tick = event_new(mqd_server_base(s), -1, EV_PERSIST, on_tick, r);
    r->ev_kick = event_new(mqd_server_base(s), -1, 0, on_kick, r);
    r->ev_cand = evtimer_new(mqd_server_base(s), mqd_repl_cand_again, r);
    if (!r->ev_tick || !r->ev_kick || !r->ev_cand || mqd_repl_grow(r, REPL_RUN_BYTES + 256) != 0 ||
        mqd_repl_rebal_new(r) != 0 || mqd_repl_waits_new(r) != 0 || idx_grow(r) != 0) {
        mqd_repl_free(r);
        return MQD_ENOMEM;
    }
    mqd_repl_hooks_t h = {.topic_created = mqd_repl_topic_created,
                          .topic_delete = mqd_repl_topic_delete,
                          .topic_alter = mqd_repl_topic_alter,
                          .route = mqd_repl_route,
                          .route_send = mqd_repl_route_send,
                          .topic_create = mqd_repl_topic_create,
                          .topic_describe = mqd_repl_topic_describe,
                          .topic_names = mqd_repl_topic_names,
                          .topic_routes = mqd_repl_topic_routes,
                          .conn_redirect = mqd_repl_conn_redirect,
                          .send_check = on_send_check,
                          .attach = on_attach,
                          .link_event = on_link_event,
                          .link_gone = on_link_gone,
                          .status = on_status,
                          .metrics = on_metrics,
                          .elect = mqd_repl_move_elect,
                          .handover = mqd_repl_move_handover,
                          .ready = mqd_repl_move_ready,
                          .may_resume = mqd_repl_move_may_resume,
                          .group_saved = mqd_repl_group_saved,
                          .arg = r};
    mqd_server_set_repl(s, &h);
    *out = r;
    return 0;
}

int mqd_repl_start(mqd_repl_t *r, mqd_cluster_t *m)
{
    r->m = m;
    r->etcd = mqd_cluster_etcd(m);
    int rc = mqd_etcd_watch_new(r->etcd, r->topics_prefix, strlen(r->topics_prefix), true, 0,
                                mqd_repl_on_topics, r, &r->w_topics);
    if (rc == 0)
        rc = mqd_etcd_watch_new(r->etcd, r->parts_prefix, strlen(r->parts_prefix), true, 0,
                                on_parts, r, &r->w_parts);
    if (rc == 0)
        rc = mqd_repl_dead_start(r); /* probe.c: reports of dead processes */
    if (rc != 0)
        return rc;
    /* the topics here from before (a restart) are compared with etcd's registrations once
     * the topics/ snapshot is in (topics.c): registered again only if never deleted */
    if ((rc = mqd_repl_hwck_start(r)) != 0) /* the watermarks before anything reads */
        return rc;
    struct timeval tv = {0, REPL_TICK_MS * 1000};
    event_add(r->ev_tick, &tv);
    return 0;
}

void mqd_repl_free(mqd_repl_t *r)
{
    if (!r)
        return;
    r->closing = true;
    if (r->m)
        mqd_cluster_set_cbs(r->m, NULL); /* its stop calls controller_lost */
    mqd_repl_hooks_t none = {0};
    if (r->s)
        mqd_server_set_repl(r->s, &none);
    mqd_repl_hwck_stop(r); /* the last watermarks, while the roles still hold them */
    mqd_repl_rebal_free(r);
    for (rpart_t *rp = r->parts, *next; rp; rp = next) {
        next = rp->next;
        if (rp->role == ROLE_LEADER)
            mqd_repl_lead_stop(rp);
        else if (rp->role == ROLE_FOLLOWER)
            mqd_repl_fol_stop(rp);
        if (rp->subscribed)
            mqd_part_commit_unsubscribe(rp->local, on_commit, rp);
        mqd_repl_part_free(rp);
    }
    mqd_repl_topics_free(r);
    mqd_repl_waits_free(r);
    free(r->idx);
    mqd_etcd_watch_free(r->w_topics);
    mqd_etcd_watch_free(r->w_parts);
    mqd_repl_dead_free(r);
    if (r->ev_tick)
        event_free(r->ev_tick);
    if (r->ev_cand)
        event_free(r->ev_cand);
    if (r->ev_kick)
        event_free(r->ev_kick);
    free(r->buf);
    free(r);
}
