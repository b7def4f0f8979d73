/* repl/rsm_change: the one builder of partition-state transitions (issue 34), in the
 * manner of Kafka's PartitionChangeBuilder. Failover, hand-over, moves and in-sync set
 * changes all come out of mqd_rsm_change, so the rules "a new leader is a live in-sync
 * replica unless unclean election is on", "a leader change raises the epoch by one" and
 * "the leader is first in the in-sync list" are written once. */
#include "config.h"
#include "repl/rsm.h"

#include <string.h>

/* Puts `leader` first in next's in-sync list (as the controller writes it at placement). */
static void leader_first(mqd_repl_pstate_t *next, uint32_t leader)
{
    for (uint32_t i = 0; i < next->n_isr; i++)
        if (next->isr[i] == leader) {
            next->isr[i] = next->isr[0];
            next->isr[0] = leader;
            return;
        }
}

/* The replica that leads after a failover of cur (0: nobody); next's in-sync set without
 * the gone leader (reset to the one elected by an unclean election). */
static uint32_t elect(const mqd_rsm_ctx_t *ctx, const mqd_repl_pstate_t *cur, uint32_t prefer,
                      bool unclean, mqd_repl_pstate_t *next, bool *was_unclean)
{
    uint32_t pick = 0;
    if (prefer && prefer != cur->leader && mqd_rsm_alive(ctx, prefer) &&
        mqd_repl_pstate_has(cur->isr, cur->n_isr, prefer))
        pick = prefer; /* the longest log among the live in-sync replicas */
    next->n_isr = 0;
    for (uint32_t i = 0; i < cur->n_isr; i++) {
        uint32_t id = cur->isr[i];
        if (id == cur->leader)
            continue;
        next->isr[next->n_isr++] = id;
        if (!pick && mqd_rsm_alive(ctx, id))
            pick = id;
    }
    if (!pick && unclean) {
        for (uint32_t i = 0; !pick && i < cur->n_replicas; i++)
            if (cur->replicas[i] != cur->leader && mqd_rsm_alive(ctx, cur->replicas[i]))
                pick = cur->replicas[i];
        if (pick) {
            next->n_isr = 0;
            *was_unclean = true;
        }
    }
    if (pick && !mqd_repl_pstate_has(next->isr, next->n_isr, pick))
        next->isr[next->n_isr++] = pick;
    return pick;
}

static int isr_change(const mqd_repl_pstate_t *cur, const mqd_rsm_chg_t *c, mqd_repl_pstate_t *next)
{
    if (c->n_isr == 0 || c->n_isr > cur->n_replicas || c->isr[0] != cur->leader)
        return MQD_EINVAL;
    for (uint32_t i = 0; i < c->n_isr; i++)
        if (!mqd_repl_pstate_has(cur->replicas, cur->n_replicas, c->isr[i]) ||
            mqd_repl_pstate_has(c->isr, i, c->isr[i]))
            return MQD_EINVAL;
    memcpy(next->isr, c->isr, c->n_isr * sizeof *c->isr);
    next->n_isr = c->n_isr;
    return 0;
}

int mqd_rsm_change(const mqd_rsm_ctx_t *ctx, const mqd_repl_pstate_t *cur, const mqd_rsm_chg_t *c,
                   mqd_repl_pstate_t *next, bool *unclean)
{
    bool was_unclean = false;
    uint32_t pick = 0;
    *next = *cur;
    switch (c->kind) {
    case MQD_RSM_CHG_ISR: return isr_change(cur, c, next);
    case MQD_RSM_CHG_FAILOVER:
    case MQD_RSM_CHG_HANDOVER:
        pick = elect(ctx, cur, c->kind == MQD_RSM_CHG_FAILOVER ? c->to : 0,
                     c->kind == MQD_RSM_CHG_FAILOVER && c->unclean, next, &was_unclean);
        if (!pick)
            return MQD_EAGAIN;
        leader_first(next, pick);
        /* a restarted leader stays in sync, after the new one: it truncates by epoch
           and catches up like any follower (ctl.c mqd_repl_ctl_handover) */
        if (c->kind == MQD_RSM_CHG_HANDOVER &&
            !mqd_repl_pstate_has(next->isr, next->n_isr, cur->leader))
            next->isr[next->n_isr++] = cur->leader;
        break;
    case MQD_RSM_CHG_MOVE:
        pick = c->to;
        if (!mqd_repl_pstate_has(cur->isr, cur->n_isr, pick) || !mqd_rsm_alive(ctx, pick) ||
            pick == c->drop)
            return MQD_EINVAL;
        next->n_isr = 0;
        next->isr[next->n_isr++] = pick;
        for (uint32_t i = 0; i < cur->n_isr; i++)
            if (cur->isr[i] != pick && cur->isr[i] != c->drop)
                next->isr[next->n_isr++] = cur->isr[i];
        break;
    default: return MQD_EINVAL;
    }
    next->leader = pick;
    next->epoch = cur->epoch + 1;
    if (unclean)
        *unclean = was_unclean;
    return 0;
}
