/* The controller's part of replication: a registered topic whose partitions have no
 * state in etcd yet is placed over the live nodes and each partition's key is created
 * with "create if absent" (create_revision 0), so two controllers of overlapping terms
 * cannot both place it: the second txn fails and its author reads the winner's key
 * through the watch. Later changes are compare-and-swap on mod_revision (repl.c). */
#include "config.h"
#include "repl/repl_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_created(void *arg, const mqd_etcd_reply_t *rep)
{
    char *key = arg;
    if (rep->rc != 0)
        MQD_WARN("repl", "controller: %s not created (%s)", key,
                 rep->error ? rep->error : mqd_strerror(rep->rc));
    else if (rep->succeeded)
        MQD_NOTICE("repl", "controller: placed %s", key);
    free(key); /* lost the race: the watch brings the other one */
}

static int create_part(mqd_repl_t *r, const rtopic_t *t, uint32_t p, const uint32_t *replicas)
{
    const char *topic = t->name;
    uint32_t rf = t->td.rf;
    mqd_repl_pstate_t ps = {.leader = replicas[0], .epoch = 1, .n_replicas = rf, .n_isr = rf};
    memcpy(ps.topic_id, t->td.id, sizeof ps.topic_id); /* placed for this registration */
    memcpy(ps.replicas, replicas, rf * sizeof *replicas);
    memcpy(ps.isr, replicas, rf * sizeof *replicas);
    size_t kl = strlen(r->parts_prefix) + strlen(topic) + 16;
    char *key = malloc(kl), *val = mqd_repl_pstate_json(&ps);
    if (!key || !val) {
        free(key);
        free(val);
        return MQD_ENOMEM;
    }
    snprintf(key, kl, "%s%s/%" PRIu32, r->parts_prefix, topic, p);
    char *tkey = malloc(strlen(r->topics_prefix) + strlen(topic) + 1);
    if (!tkey) {
        free(key);
        free(val);
        return MQD_ENOMEM;
    }
    sprintf(tkey, "%s%s", r->topics_prefix, topic);
    /* and only while the registration is the one placed: a topic deleted (or altered)
     * meanwhile gets no partition key from a controller that had not seen it yet */
    mqd_etcd_cmp_t cmp[] = {{key, strlen(key), MQD_ETCD_CMP_CREATE, 0},
                            {tkey, strlen(tkey), MQD_ETCD_CMP_MOD, t->mod_rev}};
    mqd_etcd_op_t put = {MQD_ETCD_OP_PUT, key, val, strlen(key), strlen(val), 0, false};
    mqd_etcd_txn_t txn = {cmp, 2, &put, NULL, 1, 0};
    int rc = mqd_etcd_txn(r->etcd, &txn, on_created, key);
    if (rc != 0)
        free(key);
    free(tkey);
    free(val);
    return rc;
}

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a: spreads topics' first leaders over the nodes */
    while (*s)
        h = (h ^ (uint8_t)*s++) * 16777619u;
    return h;
}

/* A partition of t without a state of this registration: a new topic's, one added by
 * `topic alter --partitions`, or one whose state of an older registration of the name has
 * not left yet (its create then fails, and the key's delete brings it here again). */
static bool unplaced(mqd_repl_t *r, const rtopic_t *t, uint32_t p)
{
    const rpart_t *rp = mqd_repl_part_find(r, t->name, p);
    return !rp || (rp->ps.topic_id[0] && strcmp(rp->ps.topic_id, t->td.id) != 0);
}

static bool node_alive(mqd_repl_t *r, uint32_t id);

/* Places the partitions of t that have no state: only those, so that existing partitions
 * keep their replicas and leaders when a topic grows. A topic of replication_factor 1 with
 * a home (reg.c) has every partition there, the ones a grow adds too; while its home is
 * down they wait for it (its records are there). */
void mqd_repl_ctl_topic(mqd_repl_t *r, rtopic_t *t)
{
    uint32_t missing = 0;
    for (uint32_t p = 0; p < t->td.partitions; p++)
        missing += unplaced(r, t, p);
    if (missing == 0)
        return;
    if (t->td.rf == 1 && t->td.home) {
        if (!node_alive(r, t->td.home)) {
            MQD_INFO("repl",
                     "controller: topic %s: %u partitions wait for its node %" PRIu32
                     " (not up in this node's view)",
                     t->name, missing, t->td.home);
            return;
        }
        for (uint32_t p = 0; p < t->td.partitions; p++)
            if (unplaced(r, t, p) && create_part(r, t, p, &t->td.home) != 0)
                break;
        return;
    }
    const mqd_cluster_view_t *v = mqd_cluster_view(r->m);
    mqd_repl_cand_t *c = calloc(v->n_nodes ? v->n_nodes : 1, sizeof *c);
    uint32_t *out = calloc((size_t)t->td.partitions * t->td.rf, sizeof *out);
    size_t n = 0;
    for (size_t i = 0; c && i < v->n_nodes; i++)
        if (v->nodes[i].alive)
            c[n++] = (mqd_repl_cand_t){v->nodes[i].id, v->nodes[i].rack};
    int rc = c && out ? mqd_repl_place(c, n, t->td.partitions, t->td.rf,
                                       n ? name_hash(t->name) % (uint32_t)n : 0, out)
                      : MQD_ENOMEM;
    if (rc == MQD_EINVAL)
        MQD_WARN("repl",
                 "controller: topic %s wants %u replicas, %zu nodes are up: placed "
                 "when enough join",
                 t->name, t->td.rf, n);
    for (uint32_t p = 0; rc == 0 && p < t->td.partitions; p++)
        if (unplaced(r, t, p))
            rc = create_part(r, t, p, out + (size_t)p * t->td.rf);
    free(c);
    free(out);
}

void mqd_repl_ctl_scan(mqd_repl_t *r)
{
    for (rtopic_t *t = r->topics; t; t = t->next)
        mqd_repl_ctl_topic(r, t);
}

static bool node_alive(mqd_repl_t *r, uint32_t id)
{
    const mqd_cluster_node_t *n = mqd_repl_node(r, id);
    return n && n->alive;
}

static bool unclean_allowed(mqd_repl_t *r, const char *topic)
{
    mqd_topic_t *t = mqd_topic_find(r->s, topic);
    if (t)
        return mqd_topic_conf(t)->unclean_leader_election;
    mqd_topic_conf_t tc;
    mqd_conf_topic(r->conf, topic, &tc);
    return tc.unclean_leader_election;
}

/* The next state of a partition whose leader is gone: `prefer` (the live in-sync replica
 * that reported the longest log) or else the first live member of the in-sync set leads, the dead leader leaves the set, the epoch goes up by one. With no
 * live in-sync replica the partition stays offline unless unclean election is on. */
static bool elect(mqd_repl_t *r, const rpart_t *rp, mqd_repl_pstate_t *next, bool unclean,
                  uint32_t prefer)
{
    uint32_t pick = 0;
    if (prefer && prefer != rp->ps.leader && node_alive(r, prefer) &&
        mqd_repl_pstate_has(rp->ps.isr, rp->ps.n_isr, prefer))
        pick = prefer; /* the longest log among the live in-sync replicas (cand.c) */
    *next = rp->ps;
    next->n_isr = 0;
    for (uint32_t i = 0; i < rp->ps.n_isr; i++) {
        uint32_t id = rp->ps.isr[i];
        if (id == rp->ps.leader)
            continue;
        next->isr[next->n_isr++] = id;
        if (!pick && node_alive(r, id))
            pick = id;
    }
    if (!pick && unclean && unclean_allowed(r, rp->topic)) {
        for (uint32_t i = 0; !pick && i < rp->ps.n_replicas; i++)
            if (rp->ps.replicas[i] != rp->ps.leader && node_alive(r, rp->ps.replicas[i]))
                pick = rp->ps.replicas[i];
        if (pick) {
            MQD_WARN("repl",
                     "controller: %s/%u: unclean election of node %" PRIu32 " (not in "
                     "sync: acknowledged records may be lost)",
                     rp->topic, rp->part, pick);
            next->n_isr = 0;
        }
    }
    if (!pick)
        return false;
    if (!mqd_repl_pstate_has(next->isr, next->n_isr, pick)) {
        next->isr[next->n_isr++] = pick;
    }
    /* the leader first in the isr list, as the controller writes it at placement */
    for (uint32_t i = 0; i < next->n_isr; i++)
        if (next->isr[i] == pick) {
            next->isr[i] = next->isr[0];
            next->isr[0] = pick;
        }
    next->leader = pick;
    next->epoch = rp->ps.epoch + 1;
    return true;
}

typedef struct elected {
    mqd_repl_t *r;
    char *topic;
    uint32_t part;
} elected_t;

/* The election's CAS was answered: once it holds, the log-end reports it read are spent. */
static void on_elected(void *arg, bool written)
{
    elected_t *o = arg;
    if (written) /* else r may be gone (the etcd client is being freed) or lost the race */
        mqd_repl_cand_clear(o->r, o->topic, o->part);
    free(o->topic);
    free(o);
}

static int elect_cas(mqd_repl_t *r, rpart_t *rp, const mqd_repl_pstate_t *next)
{
    elected_t *o = calloc(1, sizeof *o);
    if (!o || !(o->topic = strdup(rp->topic))) {
        free(o);
        return mqd_repl_part_cas(rp, next);
    }
    o->r = r;
    o->part = rp->part;
    int rc = mqd_repl_part_cas_cb(rp, next, on_elected, o);
    if (rc != 0) {
        free(o->topic);
        free(o);
    }
    return rc;
}

void mqd_repl_ctl_failover(mqd_repl_t *r)
{
    /* a view without this node alive is not loaded yet: every leader would look gone */
    if (!r->controller || !node_alive(r, r->conf->node_id))
        return;
    for (rpart_t *rp = r->parts; rp; rp = rp->next) {
        mqd_repl_pstate_t next;
        if (rp->cas_out || rp->mod_rev == 0 || node_alive(r, rp->ps.leader)) {
            if (rp->cand_until_ms && !rp->cas_out && rp->mod_rev) /* its leader came back */
                mqd_repl_cand_clear(r, rp->topic, rp->part);
            rp->offline = false;
            mqd_repl_cand_reset(rp);
            continue;
        }
        if (rp->ps.n_replicas == 1) {
            /* its only replica is down: nobody to elect, nothing to ask etcd; it leads
               again, in the same epoch, when it returns */
            if (!rp->offline)
                MQD_INFO("repl",
                         "controller: %s/%u: its only replica, node %" PRIu32
                         ", is gone: offline until it returns",
                         rp->topic, rp->part, rp->ps.leader);
            rp->offline = true;
            continue;
        }
        uint32_t prefer;
        if (!mqd_repl_cand_ready(rp, mqd_now_ms(), &prefer))
            continue; /* the in-sync replicas' log ends are not all in yet */
        if (!elect(r, rp, &next, true, prefer)) {
            if (!rp->offline) {
                MQD_WARN("repl",
                         "controller: %s/%u: leader %" PRIu32 " gone and no live "
                         "in-sync replica: offline",
                         rp->topic, rp->part, rp->ps.leader);
                mqd_repl_cand_clear(r, rp->topic, rp->part); /* decided: nobody */
            }
            rp->offline = true;
            mqd_repl_cand_reset(rp); /* a replica that comes back reports again */
            continue;
        }
        MQD_NOTICE("repl",
                   "controller: %s/%u: leader %" PRIu32 " gone%s: node %" PRIu32
                   " leads in epoch %" PRIu32,
                   rp->topic, rp->part, rp->ps.leader,
                   mqd_repl_dead_revoked(r, rp->ps.leader)
                       ? " (fast failover: its process died, this node revoked its lease)"
                       : "",
                   next.leader, next.epoch);
        mqd_repl_cand_reset(rp);
        elect_cas(r, rp, &next);
    }
}

/* A node that finds itself leader in the state it reads at start was granted that by its
 * previous run: with flush = async a power cut may have taken an unsynced tail that the
 * followers hold and acknowledged, and leading again in the same epoch would make them
 * truncate it away (test 96 (b)). So it hands over as if it had gone: never uncleanly.
 * Unlike a leader that went, it stays in the in-sync set, after the new leader: right
 * after a crash of every node the others' keys still look alive until their leases end,
 * and the one it hands over to may be dead; when that key expires the controller then
 * elects this node again instead of leaving the partition offline, with the only live
 * copy of its records, until that dead node returns (test 37 (a)). Staying is safe: as
 * a follower it truncates by epoch and catches up like any other, and a leader drops it
 * after replica_lag_ms if it does not. */
int mqd_repl_ctl_handover(mqd_repl_t *r, rpart_t *rp)
{
    mqd_repl_pstate_t next;
    uint32_t self = r->conf->node_id;
    if (rp->cas_out)
        return 0;
    if (!node_alive(r, self) || !elect(r, rp, &next, false, 0))
        return MQD_EAGAIN;
    if (!mqd_repl_pstate_has(next.isr, next.n_isr, self))
        next.isr[next.n_isr++] = self;
    MQD_NOTICE("repl",
               "%s/%u: led by this node before its restart: node %" PRIu32
               " leads in epoch %" PRIu32 " while it catches up",
               rp->topic, rp->part, next.leader, next.epoch);
    return mqd_repl_part_cas(rp, &next);
}
