/* repl/rebal: automatic preferred-leader rebalancing (auto_leader_rebalance; Kafka's
 * auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds and
 * leader.imbalance.per.broker.percentage).
 *
 * A partition's preferred replica is the first of its replicas as placed (place.c spreads
 * those over the nodes). Failover does not keep that spread: the first live in-sync
 * replica takes over and keeps leading, so after a node's restart its partitions stay on
 * the survivors. Every leader_rebalance_interval_ms each node counts, over the partition
 * states in etcd that every node watches, the partitions each node N is preferred for and
 * how many of them another node leads. For every N above leader_imbalance_percent, each
 * such partition this node leads is handed back to N when N is
 *  - alive, and up for one interval at least: its node key's start time and the time this
 *    node has seen it alive without a break (a node that keeps restarting gets nothing);
 *  - in the partition's in-sync set, fetching (its link attached) and at or past the high
 *    watermark;
 * and nothing else about the partition is in flight (one move at a time per partition).
 *
 * Why the leader moves it, not the controller (Kafka's choice): only the leader knows how
 * far a follower's log reached, and only it can stop taking sends. The hand-over is Raft's
 * leadership transfer. The leader refuses new sends before they are appended
 * (amqp:precondition-failed: nothing stored, the client sends again), waits until N's log
 * holds every record it has and the high watermark covers them (every send that was
 * waiting got its `accepted`), then writes the state with N leading in epoch + 1 by
 * compare-and-swap (move.c, the write of `mqctl cluster elect`), steps down on the answer
 * and follows. So a move loses nothing acknowledged at any acks level (a move to an
 * in-sync replica that lags would lose what acks = quorum or leader settled) and rejects
 * no send that was stored. The pause is one follower round trip (its append and sync); a
 * replica that has not caught up within REBAL_DRAIN_MS keeps the move for the next
 * interval.
 */
#include "config.h"
#include "repl/repl_int.h"

#include <inttypes.h>
#include <stdlib.h>

#define REBAL_DRAIN_MS 1000

typedef struct up {
    uint32_t id;
    int64_t since_ms; /* alive in this node's view without a break since; 0: not alive */
} up_t;

typedef struct tally {
    uint32_t id;
    uint32_t preferred, elsewhere; /* partitions it is preferred for; of those led by others */
} tally_t;

struct rebal {
    int64_t last_ms; /* the last check (or the start, or auto_leader_rebalance off) */
    uint64_t moves;  /* partitions this node handed back (/metrics) */
    up_t *up;
    size_t n_up, cap_up;
};

int mqd_repl_rebal_new(mqd_repl_t *r)
{
    r->rebal = calloc(1, sizeof *r->rebal);
    if (!r->rebal)
        return MQD_ENOMEM;
    r->rebal->last_ms = mqd_now_ms();
    return 0;
}

void mqd_repl_rebal_free(mqd_repl_t *r)
{
    if (!r->rebal)
        return;
    free(r->rebal->up);
    free(r->rebal);
    r->rebal = NULL;
}

uint64_t mqd_repl_rebal_moves(const mqd_repl_t *r)
{
    return r->rebal ? r->rebal->moves : 0;
}

static up_t *up_find(struct rebal *b, uint32_t id)
{
    for (size_t i = 0; i < b->n_up; i++)
        if (b->up[i].id == id)
            return &b->up[i];
    return NULL;
}

/* When each node came up in this node's view (its own start counts as that): a node
 * whose key went and came back between two ticks is missed, its start time is not. */
static void track_up(mqd_repl_t *r, int64_t now)
{
    struct rebal *b = r->rebal;
    const mqd_cluster_view_t *v = mqd_cluster_view(r->m);
    for (size_t i = 0; i < v->n_nodes; i++) {
        up_t *u = up_find(b, v->nodes[i].id);
        if (!u) {
            up_t *nu = mqd_array_grow(b->up, &b->cap_up, b->n_up, sizeof *b->up, 8);
            if (!nu)
                return;
            b->up = nu;
            u = &b->up[b->n_up++];
            *u = (up_t){.id = v->nodes[i].id};
        }
        if (!v->nodes[i].alive)
            u->since_ms = 0;
        else if (u->since_ms == 0)
            u->since_ms = now;
    }
}

static rflw_t *follower(rpart_t *rp, uint32_t id)
{
    for (uint32_t i = 0; rp->lead && i < rp->lead->n; i++)
        if (rp->lead->f[i].id == id)
            return &rp->lead->f[i];
    return NULL;
}

/* Why rp cannot go to `to` now (NULL: it can). up: also check that `to` has been up for
 * one interval (when the move starts; not again while it drains). */
static const char *unready(rpart_t *rp, uint32_t to, int64_t now, bool up)
{
    mqd_repl_t *r = rp->r;
    const mqd_cluster_node_t *n = mqd_repl_node(r, to);
    int64_t iv = (int64_t)r->conf->leader_rebalance_interval_ms;
    if (!n || !n->alive)
        return "not alive";
    const up_t *u = up_find(r->rebal, to);
    if (up && (!u || !u->since_ms || now - u->since_ms < iv || now - n->started_ms < iv))
        return "up for less than leader_rebalance_interval_ms";
    if (!mqd_repl_pstate_has(rp->ps.isr, rp->ps.n_isr, to))
        return "not in the in-sync set";
    const rflw_t *f = follower(rp, to);
    if (!f || !f->ls)
        return "not fetching";
    if (f->leo < rp->lead->hw)
        return "behind the high watermark";
    if (!mqd_repl_may_ack(rp))
        return "this leader is fenced (lease)";
    if (mqd_plog_failed(mqd_part_log(rp->local)))
        return "this leader's log failed";
    return NULL;
}

static void xfer_end(rpart_t *rp)
{
    rp->xfer_to = 0;
    rp->xfer_epoch = 0;
    rp->xfer_until_ms = 0;
}

void mqd_repl_rebal_xfer(rpart_t *rp, int64_t now_ms)
{
    mqd_repl_t *r = rp->r;
    uint32_t to = rp->xfer_to;
    if (rp->xfer_epoch) { /* the CAS was sent */
        if (rp->cas_out)
            return;
        if (rp->ps.leader == to && rp->ps.epoch == rp->xfer_epoch) {
            r->rebal->moves++;
            MQD_NOTICE("repl",
                       "rebalance: %s/%u: its preferred replica node %" PRIu32
                       " leads again, in epoch %" PRIu32,
                       rp->topic, rp->part, to, rp->ps.epoch);
        } else {
            MQD_NOTICE("repl",
                       "rebalance: %s/%u: not moved to node %" PRIu32
                       ": the state changed meanwhile (leader %" PRIu32 ", epoch %" PRIu32 ")",
                       rp->topic, rp->part, to, rp->ps.leader, rp->ps.epoch);
        }
        return xfer_end(rp);
    }
    if (rp->role != ROLE_LEADER || !rp->lead || rp->ps.leader != r->conf->node_id) {
        MQD_NOTICE("repl",
                   "rebalance: %s/%u: move to node %" PRIu32 " given up: no longer led here",
                   rp->topic, rp->part, to);
        return xfer_end(rp);
    }
    mqd_plog_t *log = mqd_part_log(rp->local);
    uint64_t end = mqd_plog_end_offset(log);
    const char *why = unready(rp, to, now_ms, false);
    const rflw_t *f = follower(rp, to);
    if (!why && !rp->cas_out && f->leo >= end && mqd_plog_stable_offset(log) >= end &&
        rp->lead->hw >= end) {
        uint32_t epoch;
        int rc = mqd_repl_move_to(rp, to, &epoch);
        if (rc == 0) {
            rp->xfer_epoch = epoch;
            MQD_INFO("repl",
                     "rebalance: %s/%u: node %" PRIu32 " holds all %" PRIu64
                     " records %" PRId64 " ms after sends stopped: writing epoch %" PRIu32,
                     rp->topic, rp->part, to, end,
                     mqd_now_ms() - (rp->xfer_until_ms - REBAL_DRAIN_MS), epoch);
            return;
        }
        if (rc != MQD_EAGAIN)
            why = "etcd request failed";
    }
    if (!why && now_ms && now_ms >= rp->xfer_until_ms)
        why = "it did not catch up in time";
    if (why) {
        MQD_NOTICE("repl",
                   "rebalance: %s/%u: move to node %" PRIu32 " given up until the next check: "
                   "%s (its end %" PRIu64 ", this log's end %" PRIu64 ", watermark %" PRIu64 ")",
                   rp->topic, rp->part, to, why, f ? f->leo : 0, end, rp->lead->hw);
        xfer_end(rp);
    }
}

static tally_t *tally_of(tally_t **t, size_t *n, size_t *cap, uint32_t id)
{
    for (size_t i = 0; i < *n; i++)
        if ((*t)[i].id == id)
            return &(*t)[i];
    tally_t *nt = mqd_array_grow(*t, cap, *n, sizeof **t, 8);
    if (!nt)
        return NULL;
    *t = nt;
    nt[*n] = (tally_t){.id = id};
    return &nt[(*n)++];
}

/* Per node: the partitions it is the preferred replica of, and how many others lead. */
static tally_t *count(mqd_repl_t *r, size_t *n)
{
    tally_t *t = NULL;
    size_t cap = 0;
    *n = 0;
    for (rpart_t *rp = r->parts; rp; rp = rp->next) {
        if (rp->mod_rev == 0 || rp->ps.n_replicas == 0)
            continue;
        tally_t *c = tally_of(&t, n, &cap, rp->ps.replicas[0]);
        if (!c)
            break;
        c->preferred++;
        c->elsewhere += rp->ps.leader != rp->ps.replicas[0];
    }
    return t;
}

static void check(mqd_repl_t *r, int64_t now)
{
    uint32_t self = r->conf->node_id, pct = r->conf->leader_imbalance_percent;
    size_t n;
    tally_t *t = count(r, &n);
    for (rpart_t *rp = r->parts; t && rp; rp = rp->next) {
        if (rp->role != ROLE_LEADER || !rp->lead || rp->ps.leader != self || rp->xfer_to ||
            rp->ps.replicas[0] == self)
            continue;
        uint32_t to = rp->ps.replicas[0];
        const tally_t *c = NULL;
        for (size_t i = 0; i < n && !c; i++)
            c = t[i].id == to ? &t[i] : NULL;
        if (!c || (uint64_t)c->elsewhere * 100 <= (uint64_t)pct * c->preferred)
            continue; /* that node's share is within leader_imbalance_percent */
        const char *why = rp->cas_out ? "another change of the partition is in flight"
                                      : unready(rp, to, now, true);
        if (why) {
            MQD_INFO("repl", "rebalance: %s/%u stays here, not handed back to node %" PRIu32 ": %s",
                     rp->topic, rp->part, to, why);
            continue;
        }
        MQD_NOTICE("repl",
                   "rebalance: %s/%u: handing it back to its preferred replica node %" PRIu32
                   " (%" PRIu32 " of its %" PRIu32 " preferred partitions led elsewhere, above "
                   "%" PRIu32 "%%): sends refused until it holds every record",
                   rp->topic, rp->part, to, c->elsewhere, c->preferred, pct);
        rp->xfer_to = to;
        rp->xfer_epoch = 0;
        rp->xfer_until_ms = now + REBAL_DRAIN_MS;
        mqd_repl_rebal_xfer(rp, now);
    }
    free(t);
}

void mqd_repl_rebal_tick(mqd_repl_t *r, int64_t now_ms)
{
    struct rebal *b = r->rebal;
    if (!b || !r->m)
        return;
    track_up(r, now_ms);
    if (!r->conf->auto_leader_rebalance) {
        b->last_ms = now_ms; /* turned on by a reload: the first check one interval later */
        return;
    }
    if (now_ms - b->last_ms < (int64_t)r->conf->leader_rebalance_interval_ms)
        return;
    b->last_ms = now_ms;
    const mqd_cluster_node_t *me = mqd_repl_node(r, r->conf->node_id);
    if (r->parts_loaded && me && me->alive)
        check(r, now_ms);
}
