/* repl/move: leadership moved on purpose, not by a failure.
 *
 * - `mqctl cluster elect T P NODE` (a preferred-leader move): any node may ask; it writes
 *   the partition state with NODE as leader and the epoch raised by one, by compare-and-
 *   swap on the state it holds, so a concurrent controller decision wins or loses whole.
 *   NODE must be a live member of the in-sync set: it holds every record the old leader
 *   acknowledged (acks = all settles below the high watermark, which every in-sync
 *   replica has reached), so the move loses nothing that was acknowledged; the old
 *   leader sees the newer epoch, steps down and truncates by epoch like after a failover.
 * - A clean stop (SIGTERM) of a leader hands each partition it leads to another live
 *   in-sync replica the same way, and leaves the in-sync set in the same write (as
 *   Kafka's controlled shutdown does), so the new leader's high watermark does not wait
 *   for replica_lag_ms to drop the stopping node. Failover after a SIGTERM is then the
 *   time of one etcd write, not of a lease expiry. The partitions it follows it leaves
 *   too: it closes each fetch link with MQD_REPL_LEAVING, whose leader takes it out of
 *   the in-sync set at once, and from then on it follows nothing (a partition it handed
 *   over would otherwise make it a follower that rejoins the set just before it exits).
 * - Automatic rebalancing (rebal.c) writes the same state through mqd_repl_move_to, from
 *   the leader itself once its preferred replica holds every record it has.
 * - /readyz: a node is not ready while one of its replicas is out of the in-sync set
 *   (restarted and catching up) or cutting its log back to the leader's epoch. */
#include "config.h"
#include "repl/repl_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static bool alive(mqd_repl_t *r, uint32_t id)
{
    const mqd_cluster_node_t *n = mqd_repl_node(r, id);
    return n && n->alive;
}

/* ps with `leader` leading in the next epoch, first in the in-sync list; without `drop`
 * in that list when drop != 0. */
static void next_state(const mqd_repl_pstate_t *ps, uint32_t leader, uint32_t drop,
                       mqd_repl_pstate_t *next)
{
    *next = *ps;
    next->n_isr = 0;
    next->isr[next->n_isr++] = leader;
    for (uint32_t i = 0; i < ps->n_isr; i++)
        if (ps->isr[i] != leader && ps->isr[i] != drop)
            next->isr[next->n_isr++] = ps->isr[i];
    next->leader = leader;
    next->epoch = ps->epoch + 1;
}

int mqd_repl_move_to(rpart_t *rp, uint32_t to, uint32_t *epoch)
{
    mqd_repl_pstate_t next;
    next_state(&rp->ps, to, 0, &next);
    int rc = mqd_repl_part_cas(rp, &next);
    if (rc == 0)
        *epoch = next.epoch;
    return rc;
}

typedef struct elect_op {
    mqd_repl_done_fn done;
    void *arg;
    char what[MQD_NAME_MAX + 64];
    uint32_t node, epoch;
} elect_op_t;

static void elect_done(void *arg, bool written)
{
    elect_op_t *o = arg;
    char desc[MQD_NAME_MAX + 256];
    if (written) {
        snprintf(desc, sizeof desc, "node %" PRIu32 " leads %s in epoch %" PRIu32, o->node,
                 o->what, o->epoch);
        MQD_NOTICE("repl", "elect: %s", desc);
        o->done(o->arg, 200, desc);
    } else {
        snprintf(desc, sizeof desc, "%s: the partition state changed meanwhile (or etcd did "
                 "not answer): not moved", o->what);
        o->done(o->arg, 409, desc);
    }
    free(o);
}

int mqd_repl_move_elect(void *arg, const char *topic, uint32_t part, uint32_t node,
                        mqd_repl_done_fn done, void *done_arg, char *err, size_t errlen)
{
    mqd_repl_t *r = arg;
    rpart_t *rp = mqd_repl_part_find(r, topic, part);
    if (!rp || rp->mod_rev == 0) {
        snprintf(err, errlen, "%s/%" PRIu32 " is not a replicated partition", topic, part);
        return 404;
    }
    if (!mqd_repl_pstate_has(rp->ps.replicas, rp->ps.n_replicas, node)) {
        snprintf(err, errlen, "node %" PRIu32 " holds no replica of %s/%" PRIu32, node, topic, part);
        return 409;
    }
    if (node == rp->ps.leader) {
        snprintf(err, errlen, "node %" PRIu32 " already leads %s/%" PRIu32 " (epoch %" PRIu32 ")",
                 node, topic, part, rp->ps.epoch);
        return 200;
    }
    if (!mqd_repl_pstate_has(rp->ps.isr, rp->ps.n_isr, node) || !alive(r, node)) {
        snprintf(err, errlen, "node %" PRIu32 " is not a live in-sync replica of %s/%" PRIu32
                 ": electing it could lose acknowledged records", node, topic, part);
        return 409;
    }
    elect_op_t *o = calloc(1, sizeof *o);
    if (!o) {
        snprintf(err, errlen, "out of memory");
        return 503;
    }
    mqd_repl_pstate_t next;
    next_state(&rp->ps, node, 0, &next);
    o->done = done;
    o->arg = done_arg;
    o->node = node;
    o->epoch = next.epoch;
    snprintf(o->what, sizeof o->what, "%s/%" PRIu32, topic, part);
    int rc = mqd_repl_part_cas_cb(rp, &next, elect_done, o);
    if (rc != 0) {
        free(o);
        snprintf(err, errlen, rc == MQD_EAGAIN ? "%s/%" PRIu32 ": a change of its state is in "
                 "flight: try again" : "%s/%" PRIu32 ": etcd request failed", topic, part);
        return rc == MQD_EAGAIN ? 409 : 503;
    }
    return 0;
}

/* ---- handover at a clean stop ---- */

typedef struct handover {
    void (*done)(void *arg);
    void *arg;
    size_t left;
} handover_t;

static void handover_one(void *arg, bool written)
{
    handover_t *h = arg;
    MQD_UNUSED(written); /* not written: the state moved on without us, nothing to wait for */
    if (--h->left == 0) {
        h->done(h->arg);
        free(h);
    }
}

/* The first live in-sync replica other than this node, or 0: whom a leader that is
 * leaving (a clean shutdown, a failed log) hands its partition to. */
static uint32_t pick_other(const rpart_t *rp)
{
    uint32_t self = rp->r->conf->node_id;
    for (uint32_t i = 0; i < rp->ps.n_isr; i++)
        if (rp->ps.isr[i] != self && alive(rp->r, rp->ps.isr[i]))
            return rp->ps.isr[i];
    return 0;
}

size_t mqd_repl_move_handover(void *arg, void (*done)(void *done_arg), void *done_arg)
{
    mqd_repl_t *r = arg;
    uint32_t self = r->conf->node_id;
    handover_t *h = calloc(1, sizeof *h);
    if (!h)
        return 0;
    h->done = done;
    h->arg = done_arg;
    h->left = 1; /* held while starting, so that no answer ends it early */
    size_t started = 0;
    r->stopping = true;
    for (rpart_t *rp = r->parts; rp; rp = rp->next)
        if (rp->role == ROLE_FOLLOWER)
            mqd_repl_fol_leave(rp);
    for (rpart_t *rp = r->parts; rp; rp = rp->next) {
        if (rp->role != ROLE_LEADER || rp->ps.leader != self)
            continue;
        uint32_t pick = pick_other(rp);
        if (!pick) {
            MQD_NOTICE("repl", "shutdown: %s/%u: no other live in-sync replica to hand over to "
                       "(it fails over when the lease ends)", rp->topic, rp->part);
            continue;
        }
        mqd_repl_pstate_t next;
        next_state(&rp->ps, pick, self, &next);
        h->left++;
        if (mqd_repl_part_cas_cb(rp, &next, handover_one, h) != 0) {
            h->left--;
            continue;
        }
        MQD_NOTICE("repl", "shutdown: %s/%u: handing over to node %" PRIu32 " (epoch %" PRIu32 ")",
                   rp->topic, rp->part, pick, next.epoch);
        started++;
    }
    if (--h->left == 0) { /* nothing started, or every answer came already */
        if (started)
            h->done(h->arg);
        free(h);
    }
    return started;
}

/* ---- a leader whose log failed ----
 * The commit tap ships each batch before this node's own write and sync, so a log that
 * fails (an I/O error, a full disk) may have lost records its followers already hold.
 * Its resume cuts the log back to the durable offset, and appends after that would reuse
 * those offsets in the same epoch with other records: two different messages at one
 * offset, and a watermark over followers that hold the others. So a failed leader does
 * not resume while it leads (mqd_repl_move_may_resume) and hands the partition to another
 * live in-sync replica, epoch + 1, leaving the in-sync set in the same write; as a
 * follower it then resumes, truncates by epoch and catches up like any restarted node.
 * With no other live in-sync replica it keeps the partition failed (nothing is
 * acknowledged) and tries again every tick. */
void mqd_repl_move_failed_lead(rpart_t *rp)
{
    mqd_repl_t *r = rp->r;
    uint32_t self = r->conf->node_id;
    if (rp->role != ROLE_LEADER || rp->cas_out || !mqd_plog_failed(mqd_part_log(rp->local)))
        return;
    uint32_t pick = pick_other(rp);
    if (!pick) {
        if (!rp->fail_logged)
            MQD_WARN("repl",
                     "%s/%u: this leader's log failed and no other in-sync replica is "
                     "live: the partition stays failed until one is",
                     rp->topic, rp->part);
        rp->fail_logged = true;
        return;
    }
    mqd_repl_pstate_t next;
    next_state(&rp->ps, pick, self, &next);
    if (mqd_repl_part_cas(rp, &next) != 0)
        return;
    rp->fail_logged = false;
    MQD_WARN("repl",
             "%s/%u: this leader's log failed: handing over to node %" PRIu32 " (epoch %" PRIu32
             ")",
             rp->topic, rp->part, pick, next.epoch);
}

bool mqd_repl_move_may_resume(void *arg, mqd_part_t *p)
{
    mqd_repl_t *r = arg;
    mqd_topic_t *t = mqd_part_topic(p);
    rpart_t *rp = mqd_repl_part_find(r, mqd_topic_name(t), mqd_part_id(p));
    if (!rp || rp->role != ROLE_LEADER)
        return true;
    mqd_repl_move_failed_lead(rp);
    return false;
}

/* ---- readiness ---- */

bool mqd_repl_move_ready(void *arg, char *why, size_t whylen)
{
    mqd_repl_t *r = arg;
    uint32_t self = r->conf->node_id;
    if (!r->parts_loaded) {
        /* a restarted node answered 200 before it knew it was out of the in-sync set */
        snprintf(why, whylen, "the partitions' state has not been read from etcd yet");
        return false;
    }
    for (rpart_t *rp = r->parts; rp; rp = rp->next) {
        if (rp->mod_rev == 0 || !mqd_repl_pstate_has(rp->ps.replicas, rp->ps.n_replicas, self))
            continue;
        if (rp->truncating) {
            snprintf(why, whylen, "replica %s/%u is truncating to its leader's epoch", rp->topic,
                     rp->part);
            return false;
        }
        if (!mqd_repl_pstate_has(rp->ps.isr, rp->ps.n_isr, self)) {
            snprintf(why, whylen, "replica %s/%u is catching up (not in its in-sync set)",
                     rp->topic, rp->part);
            return false;
        }
    }
    return true;
}
