/* repl/topics: the lifecycle of replicated topics across the cluster.
 *
 * Identity (Kafka's topic IDs, KIP-516). The node that registers a topic writes a random
 * 128-bit id in its registration (/<cluster>/topics/<T> = {..., "id"}); the controller
 * copies it into every partition state it places for it ("topic_id"), and each node
 * keeps it with its copy of the topic (mqd_topic_uid, meta.db). A copy whose identity
 * etcd no longer has is an older topic of that name: it is deleted here (logged), never
 * registered again, and a replica of the registered one is made afresh. A partition
 * state placed for another registration of the name is not bound to this node's copy.
 *
 * Delete (`mqctl topic delete T`, any node): one etcd txn, compared on the
 * registration's mod_revision, removes topics/<T>, every partitions/<T>/<P> and the
 * election reports under candidates/<T>/<P>/, and writes the tombstone
 * /<cluster>/deleted/<T> = {"id", "partitions", "deleted_ms", "by"}. Each node sees the
 * registration go (the watch, or the txn's answer), drops every pointer the replication
 * layer holds into its copy (mqd_repl_unbind: role, fetch links, outbound connection,
 * commit subscription) and then deletes the copy (mqd_topic_delete: links detached, files
 * removed, the directory synced), once no truncation of its logs runs and no transaction
 * holds the topic. A node that was down finds the registration gone at start: the
 * tombstone says it was deleted, so its copy goes too; with neither registration nor
 * tombstone etcd lost the topic and the copy registers it again, under its own identity.
 * Registering a name removes its tombstone in the same txn.
 *
 * Alter (`mqctl topic alter T --config K=V` / `--partitions N`, any node): the settings
 * are merged into the registration's config and the partition count raised, by
 * compare-and-swap on its mod_revision (a lost race reads the new value and merges
 * again, at most ALTER_TRIES times: two concurrent alters both land); every node with a
 * copy replaces its settings with the registered ones and grows it from the watch, and
 * the controller places only the partitions that have no state yet. */
#include "config.h"
#include "repl/repl_int.h"
#include "txn/txn.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SWEEP_MS 5000
#define ALTER_TRIES 5
#define ETCD_MAX_OPS 128 /* etcd's --max-txn-ops default */

/* ---- names with a job ---- */

tname_t *mqd_repl_tn_find(tname_t *l, const char *name)
{
    for (; l; l = l->next)
        if (strcmp(l->name, name) == 0)
            return l;
    return NULL;
}

tname_t *mqd_repl_tn_add(tname_t **l, const char *name)
{
    tname_t *n = mqd_repl_tn_find(*l, name);
    if (n)
        return n;
    if (!(n = calloc(1, sizeof *n)) || !(n->name = strdup(name))) {
        free(n);
        return NULL;
    }
    n->next = *l;
    *l = n;
    return n;
}

void mqd_repl_tn_del(tname_t **l, const char *name)
{
    for (tname_t **pp = l; *pp; pp = &(*pp)->next) {
        tname_t *n = *pp;
        if (strcmp(n->name, name) == 0) {
            *pp = n->next;
            free(n->name);
            free(n);
            return;
        }
    }
}

void mqd_repl_tn_free(tname_t **l)
{
    while (*l) {
        tname_t *n = *l;
        *l = n->next;
        free(n->name);
        free(n);
    }
}

rtopic_t *mqd_repl_topic_find(mqd_repl_t *r, const char *name)
{
    for (rtopic_t *t = r->topics; t; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

static void rtopic_free(rtopic_t *t)
{
    mqd_repl_tdesc_clear(&t->td);
    free(t->name);
    free(t);
}

static char *key_of(const char *prefix, const char *name, const char *tail)
{
    size_t n = strlen(prefix) + strlen(name) + strlen(tail) + 1;
    char *k = malloc(n);
    if (k)
        snprintf(k, n, "%s%s%s", prefix, name, tail);
    return k;
}

/* A topic whose identity the cluster decides: in a cluster every topic but temporary
 * reply nodes, `$` names and dead-letter topics (mqd_repl_cluster_name), whatever its
 * replication_factor. */
static bool clustered(const mqd_topic_t *t)
{
    return !mqd_topic_temporary(t) && mqd_repl_cluster_name(mqd_topic_name(t));
}

/* ---- deleting this node's copy ---- */

static bool truncating(mqd_repl_t *r, const char *name, mqd_topic_t *t)
{
    for (rpart_t *rp = r->parts; rp; rp = rp->next)
        if (rp->truncating && strcmp(rp->topic, name) == 0)
            return true;
    for (rpart_t *rp = r->doomed; rp; rp = rp->next)
        if (rp->truncating && strcmp(rp->topic, name) == 0)
            return true;
    for (uint32_t i = 0; i < mqd_topic_nparts(t); i++)
        if (mqd_plog_truncating(mqd_part_log(mqd_topic_part(t, i))))
            return true;
    return false;
}

/* The copies waiting to be deleted: each goes once nothing points into it any more. */
static void dels_run(mqd_repl_t *r)
{
    for (tname_t **pp = &r->dels; *pp;) {
        tname_t *d = *pp;
        mqd_topic_t *t = mqd_topic_find(r->s, d->name);
        if (t) {
            for (rpart_t *rp = r->parts; rp; rp = rp->next)
                if (rp->local && strcmp(rp->topic, d->name) == 0)
                    mqd_repl_unbind(rp);
            size_t n = mqd_txns_topic_refs(r->s, t);
            if (n && !d->logged)
                MQD_WARN("repl",
                         "topic %s: %zu unfinished transactions hold this node's copy: it is "
                         "deleted once they end (txn_timeout_ms)",
                         d->name, n);
            d->logged = d->logged || n;
            if (n || truncating(r, d->name, t)) {
                pp = &d->next;
                continue;
            }
            int rc = mqd_topic_delete(r->s, t);
            MQD_NOTICE("repl", "topic %s: this node's copy deleted (%s)%s%s", d->name, d->why,
                       rc ? ": " : "", rc ? mqd_strerror(rc) : "");
        }
        *pp = d->next;
        free(d->name);
        free(d);
        mqd_repl_kick(r); /* a replica of a newer registration of the name may bind now */
    }
}

static void doom(mqd_repl_t *r, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* This node's copy of `name` goes: the replication layer lets go of it now, the copy
 * once nothing points into it (dels_run). */
static void doom(mqd_repl_t *r, const char *name, const char *fmt, ...)
{
    if (mqd_repl_tn_find(r->dels, name))
        return;
    tname_t *d = mqd_repl_tn_add(&r->dels, name);
    if (!d)
        return; /* out of memory: the sweep tries again */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->why, sizeof d->why, fmt, ap);
    va_end(ap);
    MQD_WARN("repl", "topic %s: %s: deleting this node's copy", name, d->why);
    for (rpart_t *rp = r->parts; rp; rp = rp->next) {
        if (!rp->local || strcmp(rp->topic, name) != 0)
            continue;
        rp->dropping = true;
        mqd_repl_unbind(rp);
        rp->dropping = false;
    }
    /* the copy itself goes in dels_run, never here: callers may be walking the topics */
}

/* ---- registration (reg.c registers; this is the hook) ---- */

void mqd_repl_topic_created(void *arg, mqd_topic_t *t)
{
    mqd_repl_t *r = arg;
    const char *name = mqd_topic_name(t);
    if (!r->etcd || !clustered(t))
        return;
    mqd_repl_wake(r, name); /* links waiting for a copy here */
    if (mqd_repl_topic_find(r, name))
        return;           /* a replica made from the registration: its maker keeps the identity */
    if (r->topics_loaded) /* before the topics/ snapshot the reconciliation does it */
        mqd_repl_topic_register(r, t);
}

/* ---- this node's copies against etcd ---- */

/* The registration's settings and partition count on t, whose identity it is. */
static void apply_registration(mqd_repl_t *r, const rtopic_t *rt, mqd_topic_t *t)
{
    json_t *ov = mqd_topic_overrides(t);
    char *have = ov && json_object_size(ov) ? json_dumps(ov, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    char *want = mqd_repl_topic_config(rt);
    bool same = have ? want && strcmp(have, want) == 0 : want == NULL;
    free(have);
    if (!same) {
        int rc = mqd_topic_set_overrides(r->s, t, want);
        MQD_NOTICE("repl", "topic %s: settings of the cluster applied: %s%s%s", rt->name,
                   want ? want : "{}", rc ? ": " : "", rc ? mqd_strerror(rc) : "");
        for (rpart_t *rp = r->parts; rp; rp = rp->next)
            if (rp->role == ROLE_LEADER && strcmp(rp->topic, rt->name) == 0)
                mqd_repl_lead_isr_changed(rp); /* min_insync_replicas may have moved */
    }
    free(want);
    uint32_t had = mqd_topic_nparts(t);
    if (rt->td.partitions > had) {
        int rc = mqd_topic_grow(r->s, t, rt->td.partitions);
        MQD_NOTICE("repl", "topic %s: grown from %u to %u partitions as registered%s%s", rt->name,
                   had, mqd_topic_nparts(t), rc ? ": " : "", rc ? mqd_strerror(rc) : "");
        mqd_repl_kick(r);
    }
}

typedef struct chk_op {
    mqd_repl_t *r;
    char *name;
} chk_op_t;

/* Whether the tombstone kv says that copy t was deleted: a copy with an identity was
 * registered, so any tombstone of the name (its own or a later topic's, which could only
 * be registered once t's was gone) means it went. A copy without one was never
 * registered, unless an mqd from before identities registered it (only topics with a
 * replication_factor above 1, whose tombstones have no id): a tombstone of another topic
 * of that name says nothing about it. */
static bool tomb_is_of(mqd_repl_t *r, mqd_topic_t *t, const mqd_etcd_kv_t *kv)
{
    if (mqd_topic_uid(t)[0])
        return true;
    json_t *o = json_loadb(kv->value, kv->value_len, 0, NULL);
    json_t *id = json_object_get(o, "id");
    bool legacy = !json_is_string(id) || json_string_length(id) == 0;
    json_decref(o);
    return legacy && mqd_topic_conf(t)->replication_factor > 1;
}

/* The tombstone look of a copy etcd has no registration of. */
static void on_tomb(void *arg, const mqd_etcd_reply_t *rep)
{
    chk_op_t *o = arg;
    mqd_repl_t *r = o->r;
    if (rep->rc == MQD_ESTATE || r->closing)
        goto out;
    mqd_repl_tn_del(&r->checks, o->name);
    mqd_topic_t *t = mqd_topic_find(r->s, o->name);
    if (rep->rc != 0 || !t || !clustered(t) || mqd_repl_topic_find(r, o->name) ||
        mqd_repl_tn_find(r->dels, o->name) || mqd_repl_tn_find(r->regs, o->name))
        goto out; /* etcd did not answer (the sweep asks again), or things moved on */
    if (rep->n_kvs > 0 && tomb_is_of(r, t, &rep->kvs[0])) {
        doom(r, o->name, "deleted in the cluster while this node was away (tombstone %.*s)",
             (int)(rep->kvs[0].value_len > 120 ? 120 : rep->kvs[0].value_len), rep->kvs[0].value);
    } else if (mqd_topic_uid(t)[0]) {
        MQD_WARN("repl",
                 "topic %s: held here, registered nowhere and never deleted (etcd lost "
                 "it?): registering it again",
                 o->name);
        mqd_repl_topic_register(r, t);
    } else {
        /* a topic of this node's own from before it was a cluster topic: single-node
         * data, replication_factor 1 of an older mqd, a [topic] section */
        MQD_NOTICE("repl",
                   "topic %s: held here and not registered in the cluster: registering it "
                   "with this node as its only replica%s",
                   o->name,
                   rep->n_kvs > 0 ? " (the tombstone of the name is another topic's)" : "");
        mqd_repl_topic_register(r, t);
    }
out:
    free(o->name);
    free(o);
}

static void tomb_check(mqd_repl_t *r, const char *name)
{
    if (mqd_repl_tn_find(r->checks, name) || !r->etcd)
        return;
    chk_op_t *o = calloc(1, sizeof *o);
    char *key = key_of(r->deleted_prefix, name, "");
    if (o)
        o->r = r;
    if (o && key && (o->name = strdup(name)) &&
        mqd_etcd_range(r->etcd, key, strlen(key), false, on_tomb, o) == 0) {
        mqd_repl_tn_add(&r->checks, name);
        o = NULL;
    }
    if (o)
        free(o->name);
    free(o);
    free(key);
}

/* Every partition of rt placed (for this registration) with this node as its only
 * replica: a topic of replication_factor 1 made here. */
static bool placed_only_here(mqd_repl_t *r, const rtopic_t *rt)
{
    uint32_t self = r->conf->node_id;
    if (rt->td.rf != 1)
        return false;
    if (rt->td.home)
        return rt->td.home == self;
    for (uint32_t p = 0; p < rt->td.partitions; p++) {
        const rpart_t *rp = mqd_repl_part_find(r, rt->name, p);
        if (!rp || (rp->ps.topic_id[0] && strcmp(rp->ps.topic_id, rt->td.id) != 0) ||
            rp->ps.n_replicas != 1 || rp->ps.replicas[0] != self)
            return false;
    }
    return true;
}

/* A replica of some partition of rt is placed on this node. */
static bool replica_here(mqd_repl_t *r, const rtopic_t *rt)
{
    for (uint32_t p = 0; p < rt->td.partitions; p++) {
        const rpart_t *rp = mqd_repl_part_find(r, rt->name, p);
        if (rp && mqd_repl_pstate_has(rp->ps.replicas, rp->ps.n_replicas, r->conf->node_id))
            return true;
    }
    return false;
}

static uint64_t records_ever(mqd_topic_t *t)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < mqd_topic_nparts(t); i++)
        n += mqd_plog_end_offset(mqd_part_log(mqd_topic_part(t, i)));
    return n;
}

/* A copy that was never registered (no identity: single-node data, a topic of
 * replication_factor 1 from an mqd before cluster topics, a [topic] section) whose name
 * the cluster has registered as another topic. Its records are never deleted here: an
 * empty copy gives way, one of this node's own replication_factor 1 topic whose identity
 * meta.db lost takes it back, and any other is kept but not served (quarantined, logged
 * with what the operator can do). */
static void unregistered_copy(mqd_repl_t *r, const rtopic_t *rt, mqd_topic_t *t)
{
    const char *name = rt->name;
    uint64_t n = records_ever(t);
    if (mqd_topic_conf(t)->replication_factor > 1 && replica_here(r, rt))
        return doom(r, name,
                    "it has no identity and this node is a replica of the registered "
                    "%s: fetched afresh from its leader",
                    rt->td.id);
    if (n == 0)
        return doom(r, name,
                    "an empty copy that was never registered: the cluster's topic of "
                    "that name (id %s) is used",
                    rt->td.id);
    if (placed_only_here(r, rt)) {
        if (mqd_topic_set_uid(t, rt->td.id) == 0) {
            MQD_NOTICE("repl",
                       "topic %s: this node is the only replica of the registered %s and "
                       "its copy had lost its identity: taken back",
                       name, rt->td.id);
            apply_registration(r, rt, t);
        }
        return;
    }
    /* not a replica of anything: a watermark the checkpoint seeded at start (its
       settings may say replication_factor > 1) would only hide its records from describe */
    for (uint32_t i = 0; i < mqd_topic_nparts(t); i++) {
        mqd_part_t *p = mqd_topic_part(t, i);
        if (mqd_part_hw_set(p))
            mqd_part_set_hw(p, mqd_plog_stable_offset(mqd_part_log(p)));
    }
    tname_t *q = mqd_repl_tn_add(&r->quars, name);
    if (!q || q->logged)
        return;
    q->logged = true;
    MQD_ERR("repl",
            "topic %s: this node holds %" PRIu64 " records of a topic %s that was never "
            "registered in the cluster, and the cluster's topic of that name (id %s, "
            "replication_factor %u) is another one: this copy is KEPT BUT NOT SERVED (links to "
            "%s here go to the cluster's topic). To keep its records, either delete the "
            "cluster's topic (`mqctl topic delete %s` on any node: this copy is then "
            "registered in its place), or start this node once with cluster = none, where it "
            "is served as before, read the records out and delete it there",
            name, n, name, rt->td.id, rt->td.rf, name, name);
}

/* Brings this node's copy t in line with etcd: the registration's settings and size when
 * it is the registered topic, deleted when it is an older one, and looked up in the
 * tombstones when etcd has no registration of the name. */
void mqd_repl_topic_reconcile(mqd_repl_t *r, mqd_topic_t *t)
{
    const char *name = mqd_topic_name(t);
    if (!clustered(t) || mqd_repl_tn_find(r->dels, name) || mqd_repl_tn_find(r->regs, name))
        return;
    rtopic_t *rt = mqd_repl_topic_find(r, name);
    if (!rt || strcmp(mqd_topic_uid(t), rt->td.id) == 0)
        mqd_repl_tn_del(&r->quars, name);
    if (!rt)
        return tomb_check(r, name);
    if (strcmp(mqd_topic_uid(t), rt->td.id) == 0)
        return apply_registration(r, rt, t);
    if (!mqd_topic_uid(t)[0] && r->parts_loaded) /* else: the partitions' snapshot runs it */
        return unregistered_copy(r, rt, t);
    if (!mqd_topic_uid(t)[0])
        return;
    doom(r, name,
         "its identity %s is not the registered %s: an older topic of that name, deleted "
         "in the cluster",
         mqd_topic_uid(t), rt->td.id[0] ? rt->td.id : "(none)");
}

bool mqd_repl_topic_quarantined(mqd_repl_t *r, const char *name)
{
    return mqd_repl_tn_find(r->quars, name) != NULL;
}

mqd_part_t *mqd_repl_topic_replica(mqd_repl_t *r, rpart_t *rp)
{
    rtopic_t *rt = mqd_repl_topic_find(r, rp->topic);
    if (!rt || mqd_repl_tn_find(r->dels, rp->topic))
        return NULL; /* its registration has not arrived, or the old copy is on its way out */
    if (rp->ps.topic_id[0] && strcmp(rp->ps.topic_id, rt->td.id) != 0)
        return NULL; /* placed for another registration of the name: its key goes soon */
    mqd_topic_t *t = mqd_topic_find(r->s, rp->topic);
    if (t && strcmp(mqd_topic_uid(t), rt->td.id) != 0) {
        if (!rp->refused_logged)
            MQD_INFO("repl",
                     "%s/%u: this node's copy of %s is not the registered topic (identity %s): "
                     "not a replica of it",
                     rp->topic, rp->part, rp->topic,
                     mqd_topic_uid(t)[0] ? mqd_topic_uid(t) : "(none)");
        rp->refused_logged = true;
        if (r->topics_loaded)
            mqd_repl_topic_reconcile(r, t);
        return NULL;
    }
    if (!t) {
        char *cfg = mqd_repl_topic_config(rt);
        int rc = mqd_topic_create(r->s, rp->topic, rt->td.partitions, cfg, &t);
        free(cfg);
        if (rc != 0) {
            MQD_WARN("repl", "cannot create the replica of %s: %s", rp->topic, mqd_strerror(rc));
            return NULL;
        }
        if (strcmp(mqd_topic_uid(t), rt->td.id) != 0 && mqd_topic_set_uid(t, rt->td.id) != 0)
            MQD_WARN("repl", "topic %s: its identity could not be kept", rp->topic);
        MQD_NOTICE("repl", "created replica topic %s (%u partitions, id %s)", rp->topic,
                   mqd_topic_nparts(t), rt->td.id[0] ? rt->td.id : "(none)");
    } else if (rp->part >= mqd_topic_nparts(t)) {
        apply_registration(r, rt, t); /* its partitions/ key came before its topics/ one */
    }
    return rp->part < mqd_topic_nparts(t) ? mqd_topic_part(t, rp->part) : NULL;
}

/* ---- the topics/ watch ---- */

void mqd_repl_topic_put(mqd_repl_t *r, const mqd_etcd_kv_t *kv, bool now)
{
    const char *name = kv->key + strlen(r->topics_prefix);
    mqd_repl_tdesc_t td;
    if (kv->key_len <= strlen(r->topics_prefix) || strlen(name) > MQD_NAME_MAX ||
        mqd_repl_tdesc_parse(kv->value, kv->value_len, &td) != 0) {
        MQD_WARN("repl", "%s: not a topic registration: ignored", kv->key);
        return;
    }
    rtopic_t *t = mqd_repl_topic_find(r, name);
    if (t && kv->mod_revision < t->mod_rev) {
        mqd_repl_tdesc_clear(&td); /* older than what an answer told us */
        return;
    }
    if (!t) {
        if (!(t = calloc(1, sizeof *t)) || !(t->name = strdup(name))) {
            free(t);
            mqd_repl_tdesc_clear(&td);
            return;
        }
        t->next = r->topics;
        r->topics = t;
    }
    mqd_repl_tdesc_clear(&t->td);
    t->td = td;
    t->mod_rev = kv->mod_revision;
    t->seen = true;
    if (r->controller)
        mqd_repl_ctl_topic(r, t);
    mqd_topic_t *lt = mqd_topic_find(r->s, name);
    if (now && lt)
        mqd_repl_topic_reconcile(r, lt);
    mqd_repl_kick(r); /* partitions waiting for this registration bind */
    mqd_repl_wake(r, name); /* links waiting for it */
}

/* The registration of `name` (identity id) is gone from etcd. */
static void topic_gone(mqd_repl_t *r, const char *name, const char *id)
{
    for (rtopic_t **pp = &r->topics; *pp; pp = &(*pp)->next) {
        rtopic_t *rt = *pp;
        if (strcmp(rt->name, name) == 0) {
            *pp = rt->next;
            rtopic_free(rt);
            break;
        }
    }
    mqd_topic_t *t = mqd_topic_find(r->s, name);
    if (t && clustered(t) && strcmp(mqd_topic_uid(t), id) == 0)
        doom(r, name, "deleted in the cluster");
    else if (t && r->topics_loaded)
        mqd_repl_topic_reconcile(r, t);
    dels_run(r);
}

void mqd_repl_on_topics(void *arg, mqd_etcd_ev_t ev, const mqd_etcd_kv_t *kvs, size_t n,
                        int64_t rev)
{
    mqd_repl_t *r = arg;
    if (ev == MQD_ETCD_EV_SNAPSHOT)
        for (rtopic_t *t = r->topics; t; t = t->next)
            t->seen = false;
    for (size_t i = 0; i < n; i++) {
        if (ev != MQD_ETCD_EV_DELETE) {
            mqd_repl_topic_put(r, &kvs[i], ev == MQD_ETCD_EV_PUT && r->topics_loaded);
            continue;
        }
        const char *name = kvs[i].key + strlen(r->topics_prefix);
        rtopic_t *rt =
            kvs[i].key_len > strlen(r->topics_prefix) ? mqd_repl_topic_find(r, name) : NULL;
        if (rt) {
            char id[MQD_REPL_ID_LEN + 1];
            memcpy(id, rt->td.id, sizeof id);
            topic_gone(r, name, id);
        }
    }
    if (ev != MQD_ETCD_EV_SNAPSHOT)
        return dels_run(r);
    /* a snapshot (the first, or a re-read after a compaction): what it lacks is gone, and
     * every copy here is compared with what it holds */
    for (rtopic_t **pp = &r->topics; *pp;) {
        rtopic_t *t = *pp;
        if (t->seen) {
            pp = &t->next;
            continue;
        }
        *pp = t->next;
        rtopic_free(t);
    }
    r->topics_loaded = true;
    for (mqd_topic_t *t = mqd_srv_topic_first(r->s); t; t = mqd_srv_topic_next(t))
        mqd_repl_topic_reconcile(r, t);
    dels_run(r);
}

void mqd_repl_topic_parts_gone(mqd_repl_t *r, const char *name)
{
    rtopic_t *rt = mqd_repl_topic_find(r, name);
    if (rt && r->controller)
        mqd_repl_ctl_topic(r, rt); /* a newer registration of the name waited for these */
}

/* ---- delete from any node ---- */

typedef struct del_op {
    mqd_repl_t *r;
    char *name;
    char id[MQD_REPL_ID_LEN + 1];
    mqd_repl_done_fn done;
    void *done_arg;
} del_op_t;

static void on_deleted(void *arg, const mqd_etcd_reply_t *rep)
{
    del_op_t *o = arg;
    char desc[MQD_NAME_MAX + 200];
    int status = 503;
    if (rep->rc == MQD_ESTATE || o->r->closing) {
        snprintf(desc, sizeof desc, "the node is stopping: topic %s may or may not be deleted",
                 o->name);
    } else if (rep->rc != 0) {
        snprintf(desc, sizeof desc, "etcd did not delete topic %s: %s", o->name,
                 rep->error ? rep->error : mqd_strerror(rep->rc));
    } else if (!rep->succeeded) {
        status = 409;
        snprintf(desc, sizeof desc,
                 "topic %s changed meanwhile (altered, grown, deleted or "
                 "created again by another request): not deleted, try again",
                 o->name);
    } else {
        status = 204;
        snprintf(desc, sizeof desc, "deleted topic %s in the cluster", o->name);
        MQD_NOTICE("repl", "topic %s (id %s) deleted in etcd", o->name,
                   o->id[0] ? o->id : "(none)");
        topic_gone(o->r, o->name, o->id);
    }
    o->done(o->done_arg, status, desc);
    free(o->name);
    free(o);
}

/* The keys of the partitions of `name` (below n) and of their election reports, one op
 * each while they fit in a txn; else the prefixes, unless a topic "name/..." (a
 * dead-letter topic) is registered, whose keys the prefixes would take too. */
static int delete_ops(mqd_repl_t *r, const char *name, uint32_t n, mqd_etcd_op_t *ops,
                      size_t *n_ops, char **keys, size_t *n_keys)
{
    size_t nl = strlen(name);
    bool one_by_one = 2 * (size_t)n + 2 <= ETCD_MAX_OPS;
    for (rtopic_t *t = r->topics; !one_by_one && t; t = t->next)
        if (strncmp(t->name, name, nl) == 0 && t->name[nl] == '/')
            return MQD_EEXIST;
    for (uint32_t p = 0; p < (one_by_one ? n : 1); p++) {
        char tail[24];
        snprintf(tail, sizeof tail, one_by_one ? "/%" PRIu32 : "/", p);
        keys[(*n_keys)++] = key_of(r->parts_prefix, name, tail);
        snprintf(tail, sizeof tail, one_by_one ? "/%" PRIu32 "/" : "/", p);
        keys[(*n_keys)++] = key_of(r->cand_prefix, name, tail);
        if (!keys[*n_keys - 1] || !keys[*n_keys - 2])
            return MQD_ENOMEM;
        ops[(*n_ops)++] = (mqd_etcd_op_t){
            MQD_ETCD_OP_DELETE, keys[*n_keys - 2], NULL, strlen(keys[*n_keys - 2]), 0, 0,
            !one_by_one};
        ops[(*n_ops)++] = (mqd_etcd_op_t){
            MQD_ETCD_OP_DELETE, keys[*n_keys - 1], NULL, strlen(keys[*n_keys - 1]), 0, 0, true};
    }
    return 0;
}

/* Sends the delete txn of rt (see the top of the file). */
static int delete_send(mqd_repl_t *r, const rtopic_t *rt, del_op_t *o)
{
    uint32_t n = rt->td.partitions;
    for (rpart_t *rp = r->parts; rp; rp = rp->next)
        if (strcmp(rp->topic, rt->name) == 0 && rp->part >= n)
            n = rp->part + 1;
    size_t cap = 2 * (size_t)n + 4, n_ops = 0, n_keys = 0;
    mqd_etcd_op_t *ops = calloc(cap, sizeof *ops);
    char **keys = calloc(cap, sizeof *keys), *tomb = NULL;
    int rc = ops && keys ? 0 : MQD_ENOMEM;
    if (rc == 0 && (!(keys[n_keys++] = key_of(r->topics_prefix, rt->name, "")) ||
                    !(keys[n_keys++] = key_of(r->deleted_prefix, rt->name, ""))))
        rc = MQD_ENOMEM;
    if (rc == 0) {
        ops[n_ops++] =
            (mqd_etcd_op_t){MQD_ETCD_OP_DELETE, keys[0], NULL, strlen(keys[0]), 0, 0, false};
        json_t *v =
            json_pack("{s:s,s:I,s:I,s:I}", "id", rt->td.id, "partitions", (json_int_t)n,
                      "deleted_ms", (json_int_t)mqd_now_ms(), "by", (json_int_t)r->conf->node_id);
        tomb = v ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        json_decref(v);
        rc = tomb ? delete_ops(r, rt->name, n, ops, &n_ops, keys, &n_keys) : MQD_ENOMEM;
    }
    if (rc == 0) {
        ops[n_ops++] = (mqd_etcd_op_t){MQD_ETCD_OP_PUT, keys[1], tomb, strlen(keys[1]),
                                       strlen(tomb),    0,       false};
        mqd_etcd_cmp_t cmp = {keys[0], strlen(keys[0]), MQD_ETCD_CMP_MOD, rt->mod_rev};
        mqd_etcd_txn_t txn = {&cmp, 1, ops, NULL, n_ops, 0};
        rc = mqd_etcd_txn(r->etcd, &txn, on_deleted, o);
    }
    for (size_t i = 0; keys && i < n_keys; i++)
        free(keys[i]);
    free(keys);
    free(ops);
    free(tomb);
    return rc;
}

int mqd_repl_topic_delete(void *arg, const char *name, mqd_repl_done_fn done, void *done_arg,
                          char *err, size_t errlen)
{
    mqd_repl_t *r = arg;
    rtopic_t *rt = mqd_repl_topic_find(r, name);
    mqd_topic_t *t = mqd_topic_find(r->s, name);
    if (mqd_repl_tn_find(r->dels, name)) {
        snprintf(err, errlen, "topic %s is being deleted on this node", name);
        return 204;
    }
    if (!rt) {
        if (!t || !clustered(t)) {
            snprintf(err, errlen, "topic %s is not a replicated topic", name);
            return 404;
        }
        doom(r, name, "deleted through management (it was not registered in the cluster)");
        dels_run(r);
        snprintf(err, errlen, "deleted topic %s (this node's copy: it is registered nowhere)",
                 name);
        return 204;
    }
    del_op_t *o = calloc(1, sizeof *o);
    if (!o || !(o->name = strdup(name))) {
        free(o);
        snprintf(err, errlen, "out of memory");
        return 503;
    }
    o->r = r;
    o->done = done;
    o->done_arg = done_arg;
    memcpy(o->id, rt->td.id, sizeof o->id);
    int rc = r->etcd ? delete_send(r, rt, o) : MQD_ESTATE;
    if (rc == 0)
        return 0;
    free(o->name);
    free(o);
    if (rc == MQD_EEXIST) {
        snprintf(err, errlen,
                 "topic %s has more than %d partitions and a registered topic "
                 "%s/...: delete that one first",
                 name, (ETCD_MAX_OPS - 2) / 2, name);
        return 409;
    }
    snprintf(err, errlen, "etcd request failed: %s", mqd_strerror(rc));
    return 503;
}

/* ---- alter and add partitions from any node ---- */

typedef struct alter_op {
    mqd_repl_t *r;
    char *name;
    char id[MQD_REPL_ID_LEN + 1];
    uint32_t nparts;
    json_t *ov; /* the settings asked (owned), or NULL */
    char *val;  /* the registration last sent */
    int tries;
    mqd_repl_done_fn done;
    void *done_arg;
} alter_op_t;

static void alter_free(alter_op_t *o)
{
    json_decref(o->ov);
    free(o->val);
    free(o->name);
    free(o);
}

static void on_altered(void *arg, const mqd_etcd_reply_t *rep);

/* CAS of rt's registration with the asked settings merged in and at least nparts. */
static int alter_send(alter_op_t *o, const rtopic_t *rt)
{
    mqd_repl_t *r = o->r;
    mqd_repl_tdesc_t td = rt->td;
    if (o->nparts > td.partitions)
        td.partitions = o->nparts;
    json_t *cfg = rt->td.config ? json_loads(rt->td.config, 0, NULL) : json_object();
    if (!json_is_object(cfg) || (o->ov && json_object_update(cfg, o->ov) != 0)) {
        json_decref(cfg);
        return MQD_ENOMEM;
    }
    td.config = json_object_size(cfg) ? json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(cfg);
    free(o->val);
    o->val = mqd_repl_tdesc_json(&td);
    free(td.config);
    char *key = key_of(r->topics_prefix, rt->name, "");
    int rc = MQD_ENOMEM;
    if (o->val && key) {
        mqd_etcd_cmp_t cmp = {key, strlen(key), MQD_ETCD_CMP_MOD, rt->mod_rev};
        mqd_etcd_op_t put = {MQD_ETCD_OP_PUT, key, o->val, strlen(key), strlen(o->val), 0, false};
        mqd_etcd_op_t get = {MQD_ETCD_OP_RANGE, key, NULL, strlen(key), 0, 0, false};
        mqd_etcd_txn_t txn = {&cmp, 1, &put, &get, 1, 1};
        rc = mqd_etcd_txn(r->etcd, &txn, on_altered, o);
    }
    free(key);
    return rc;
}

static void on_altered(void *arg, const mqd_etcd_reply_t *rep)
{
    alter_op_t *o = arg;
    mqd_repl_t *r = o->r;
    char desc[MQD_NAME_MAX + 400];
    int status = 503;
    mqd_repl_tdesc_t td;
    if (rep->rc == MQD_ESTATE || r->closing) {
        snprintf(desc, sizeof desc, "the node is stopping: topic %s may or may not be altered",
                 o->name);
    } else if (rep->rc != 0) {
        snprintf(desc, sizeof desc, "etcd did not alter topic %s: %s", o->name,
                 rep->error ? rep->error : mqd_strerror(rep->rc));
    } else if (rep->succeeded) {
        mqd_etcd_kv_t kv = {.key = NULL,
                            .value = o->val,
                            .value_len = strlen(o->val),
                            .mod_revision = rep->revision};
        char *key = key_of(r->topics_prefix, o->name, "");
        if (key) {
            kv.key = key;
            kv.key_len = strlen(key);
            mqd_repl_topic_put(r, &kv,
                               true); /* this node applies it now; the watch brings the same */
        }
        free(key);
        status = 200;
        snprintf(desc, sizeof desc, "altered topic %s in the cluster: %s", o->name, o->val);
        MQD_NOTICE("repl", "topic %s altered in etcd: %s", o->name, o->val);
    } else if (rep->n_kvs == 0) {
        status = 404;
        snprintf(desc, sizeof desc, "topic %s was deleted meanwhile: not altered", o->name);
    } else if (mqd_repl_tdesc_parse(rep->kvs[0].value, rep->kvs[0].value_len, &td) != 0) {
        status = 409;
        snprintf(desc, sizeof desc,
                 "topic %s: etcd holds an unreadable registration: not "
                 "altered",
                 o->name);
    } else if (strcmp(td.id, o->id) != 0) {
        mqd_repl_tdesc_clear(&td);
        status = 409;
        snprintf(desc, sizeof desc,
                 "topic %s was deleted and created again meanwhile: not "
                 "altered",
                 o->name);
    } else {
        mqd_repl_tdesc_clear(&td);
        mqd_repl_topic_put(r, &rep->kvs[0], true); /* another alter won: merge into its result */
        rtopic_t *rt = mqd_repl_topic_find(r, o->name);
        status = 409;
        snprintf(desc, sizeof desc,
                 "topic %s changed concurrently %d times: not altered, try "
                 "again",
                 o->name, o->tries + 1);
        if (rt && ++o->tries < ALTER_TRIES && alter_send(o, rt) == 0)
            return;
    }
    o->done(o->done_arg, status, desc);
    alter_free(o);
}

int mqd_repl_topic_alter(void *arg, const char *name, uint32_t nparts, const char *overrides_json,
                         mqd_repl_done_fn done, void *done_arg, char *err, size_t errlen)
{
    mqd_repl_t *r = arg;
    rtopic_t *rt = mqd_repl_topic_find(r, name);
    if (!rt) {
        snprintf(err, errlen, "topic %s is not a replicated topic", name);
        return 404;
    }
    if (mqd_repl_tn_find(r->dels, name)) {
        snprintf(err, errlen, "topic %s is being deleted on this node", name);
        return 409;
    }
    if (nparts && nparts < rt->td.partitions) {
        snprintf(err, errlen, "partitions can only grow (now %u)", rt->td.partitions);
        return 400;
    }
    json_t *ov = overrides_json && *overrides_json ? json_loads(overrides_json, 0, NULL) : NULL;
    if (overrides_json && *overrides_json && !json_is_object(ov)) {
        json_decref(ov);
        snprintf(err, errlen, "invalid setting");
        return 400;
    }
    json_t *rf = json_object_get(ov, "replication_factor");
    if (rf && !(json_is_integer(rf) && json_integer_value(rf) == (json_int_t)rt->td.rf)) {
        json_decref(ov);
        snprintf(err, errlen,
                 "replication_factor of a replicated topic cannot change: "
                 "reassigning its partitions' replicas is not built (topic %s keeps %u)",
                 name, rt->td.rf);
        return 409;
    }
    alter_op_t *o = calloc(1, sizeof *o);
    if (!o || !(o->name = strdup(name))) {
        free(o);
        json_decref(ov);
        snprintf(err, errlen, "out of memory");
        return 503;
    }
    *o = (alter_op_t){
        .r = r, .name = o->name, .nparts = nparts, .ov = ov, .done = done, .done_arg = done_arg};
    memcpy(o->id, rt->td.id, sizeof o->id);
    int rc = r->etcd ? alter_send(o, rt) : MQD_ESTATE;
    if (rc == 0)
        return 0;
    alter_free(o);
    snprintf(err, errlen, "etcd request failed: %s", mqd_strerror(rc));
    return 503;
}

/* ---- the tick ---- */

void mqd_repl_topic_tick(mqd_repl_t *r, int64_t now_ms)
{
    dels_run(r);
    for (rpart_t **pp = &r->doomed; *pp;) {
        rpart_t *rp = *pp;
        if (rp->truncating) {
            pp = &rp->next;
            continue;
        }
        *pp = rp->next;
        mqd_repl_part_free(rp);
    }
    if (!r->topics_loaded || now_ms < r->sweep_ms)
        return;
    r->sweep_ms = now_ms + SWEEP_MS; /* registrations that failed, copies left behind */
    for (mqd_topic_t *t = mqd_srv_topic_first(r->s); t; t = mqd_srv_topic_next(t))
        mqd_repl_topic_reconcile(r, t);
}

void mqd_repl_topics_free(mqd_repl_t *r)
{
    while (r->topics) {
        rtopic_t *t = r->topics;
        r->topics = t->next;
        rtopic_free(t);
    }
    while (r->doomed) {
        rpart_t *rp = r->doomed;
        r->doomed = rp->next;
        mqd_repl_part_free(rp);
    }
    mqd_repl_tn_free(&r->regs);
    mqd_repl_tn_free(&r->checks);
    mqd_repl_tn_free(&r->dels);
    mqd_repl_tn_free(&r->quars);
}
