/* The commit point of a partition (issue 18, point 2): how far a reader may read and
 * when a send is settled are decided here and nowhere else.
 *
 *   visible end (read-uncommitted) = min(store's stable offset, high watermark)
 *   visible end (read-committed)   = min(that, last stable offset of open transactions)
 *
 * Single node, the high watermark follows the stable offset (it is set to it on every
 * stable callback); replication calls mqd_part_set_hw() and from then on the watermark
 * is what followers confirmed. When the visible end moves, the sends waiting for it are
 * settled (one walk of the partition's FIFO per advance, not per subscriber) and then
 * the subscribers (consumers, transactions; later replication) are told once.
 */
#include "config.h"
#include "core/core.h"
#include "core/core_int.h"

#include <proton/disposition.h>
#include <stdlib.h>

/* A partition has a fixed few subscribers (consumers, transactions, replication). */
#define MAX_SUBS 4

struct mqd_part_commit {
    uint64_t hw;     /* high watermark; = stable while not replicated */
    uint64_t quorum_end; /* replicated: a majority of the replicas hold what is below */
    bool replicated; /* mqd_part_set_hw was called: hw no longer follows stable */
    uint64_t lso;    /* last stable offset, UINT64_MAX when none (txn/ sets it) */
    struct {
        mqd_part_commit_fn fn;
        void *arg;
    } subs[MAX_SUBS];
    size_t n_subs;
};

int mqd_part_commit_init(mqd_part_t *p)
{
    p->commit = calloc(1, sizeof *p->commit);
    if (!p->commit)
        return MQD_ENOMEM;
    p->commit->lso = UINT64_MAX;
    return 0;
}

void mqd_part_commit_free(mqd_part_t *p)
{
    free(p->commit);
    p->commit = NULL;
}

uint64_t mqd_part_hw(const mqd_part_t *p)
{
    /* Not replicated, the watermark is the live stable offset: the flusher raises it
     * between two dispatches, and readers have always seen records as soon as the store
     * calls them stable (a copy taken at the last callback would hold them back). */
    if (!p->commit || !p->commit->replicated)
        return mqd_plog_stable_offset(p->log);
    return p->commit->hw;
}

bool mqd_part_hw_set(const mqd_part_t *p)
{
    return p->commit && p->commit->replicated;
}

uint64_t mqd_part_visible_end(const mqd_part_t *p, mqd_isolation_t iso)
{
    uint64_t stable = mqd_plog_stable_offset(p->log); /* a failed log: its durable offset */
    uint64_t hw = p->commit && p->commit->replicated ? p->commit->hw : stable;
    uint64_t end = hw < stable ? hw : stable;
    if (iso == MQD_READ_COMMITTED) {
        uint64_t lso = mqd_part_lso(p);
        if (lso < end)
            end = lso;
    }
    return end;
}

int mqd_part_commit_subscribe(mqd_part_t *p, mqd_part_commit_fn fn, void *arg)
{
    mqd_part_commit_t *c = p->commit;
    if (!c)
        return MQD_ESTATE;
    if (c->n_subs == MAX_SUBS)
        return MQD_ENOMEM;
    c->subs[c->n_subs].fn = fn;
    c->subs[c->n_subs++].arg = arg;
    return 0;
}

void mqd_part_commit_unsubscribe(mqd_part_t *p, mqd_part_commit_fn fn, void *arg)
{
    mqd_part_commit_t *c = p->commit;
    for (size_t i = 0; c && i < c->n_subs; i++) {
        if (c->subs[i].fn == fn && c->subs[i].arg == arg) {
            for (size_t k = i + 1; k < c->n_subs; k++) /* keeps the order of the others */
                c->subs[k - 1] = c->subs[k];
            c->n_subs--;
            return;
        }
    }
}

/* The offset below which a send with `acks` may be settled: acks = all waits for the
 * visible end (the high watermark), quorum for a majority of the replicas, leader for
 * the local log only. Unreplicated, all three are the stable offset. */
static uint64_t acks_end(const mqd_part_t *p, int acks, uint64_t visible, uint64_t stable)
{
    const mqd_part_commit_t *c = p->commit;
    if (acks == MQD_ACKS_LEADER || !c || !c->replicated)
        return acks == MQD_ACKS_ALL ? visible : stable;
    if (acks == MQD_ACKS_QUORUM)
        return c->quorum_end < stable ? c->quorum_end : stable;
    return visible;
}

static void settle_one(mqd_part_t *p, mqd_pending_t *pe, uint64_t outcome, const char *cond,
                       const char *desc)
{
    mqd_server_t *s = p->topic->srv;
    p->pend_weak -= pe->acks < MQD_ACKS_ALL;
    mqd_hist_observe(&s->h_append_stable, (double)(mqd_mono_ns() - pe->t_ns) / 1e9);
    if (pe->notify) { /* a 0-9-1 publish (amqp091/): its confirm */
        pe->notify(pe->notify_arg, pe->notify_tag, outcome, cond, desc);
        mqd_pending_release(s, pe);
        return;
    }
    if (!pe->conn->closed) {
        pn_link_t *l = mqd_delivery_unhold(pe->dlv);
        if (outcome != PN_ACCEPTED) {
            mqd_delivery_reject(pe->dlv, cond, desc);
        } else if (pe->txn) {
            s->ops.txn_settle(pe->dlv, pe->txn, PN_ACCEPTED);
        } else {
            pn_delivery_update(pe->dlv, PN_ACCEPTED);
            pn_delivery_settle(pe->dlv);
        }
        mqd_link_reap(l); /* a detached producer link goes with its last send */
        mqd_conn_mark_dirty(pe->conn);
    }
    mqd_conn_unref(pe->conn);
    mqd_pending_release(s, pe);
}

/* Settles every send whose commit point (by its acks) passed its last record. The list
 * is in offset order and nothing at or past the stable offset can settle, so the walk
 * stops there; sends of one link with one acks level settle in their order. When every
 * waiting send has acks = all it stops at the visible end: a replicated leader's stable
 * offset runs ahead of its watermark, and walking the sends between the two on every
 * store and follower report cost a leader about a tenth of its replication overhead. */
static void settle_sends(mqd_part_t *p, uint64_t visible)
{
    uint64_t stable = mqd_plog_stable_offset(p->log);
    uint64_t lim = p->pend_weak || visible > stable ? stable : visible;
    mqd_pending_t **pp = &p->pend_head, *prev = NULL;
    while (*pp && (*pp)->last_offset < lim) {
        mqd_pending_t *pe = *pp;
        if (pe->last_offset >= acks_end(p, pe->acks, visible, stable)) {
            prev = pe;
            pp = &pe->next;
            continue;
        }
        *pp = pe->next;
        if (p->pend_tail == pe)
            p->pend_tail = prev;
        settle_one(p, pe, PN_ACCEPTED, NULL, NULL);
    }
}

size_t mqd_part_reject_waiting_from(mqd_part_t *p, uint64_t from, int min_acks, const char *cond,
                                    const char *desc)
{
    mqd_pending_t **pp = &p->pend_head, *prev = NULL;
    size_t n = 0;
    while (*pp) {
        mqd_pending_t *pe = *pp;
        /* a transaction fails at its discharge */
        if (pe->acks < min_acks || pe->txn || pe->last_offset < from) {
            prev = pe;
            pp = &pe->next;
            continue;
        }
        *pp = pe->next;
        if (p->pend_tail == pe)
            p->pend_tail = prev;
        /* refused: its message-ids leave the topic's dedup window, or the client's retry
         * (through any partition of the topic) would be taken for a duplicate of a send
         * that a step-down may cut from the log (acknowledged and lost; test 165) */
        mqd_dedup_forget_pending(p->topic, pe);
        settle_one(p, pe, PN_REJECTED, cond, desc);
        n++;
    }
    return n;
}

size_t mqd_part_reject_waiting(mqd_part_t *p, int min_acks, const char *cond, const char *desc)
{
    return mqd_part_reject_waiting_from(p, 0, min_acks, cond, desc);
}

size_t mqd_part_waiting_in_doubt(mqd_part_t *p)
{
    size_t n = 0;
    for (mqd_pending_t *pe = p->pend_head; pe; pe = pe->next) {
        if (pe->txn)
            continue;
        p->pend_weak -= pe->acks < MQD_ACKS_ALL;
        pe->acks = MQD_ACKS_ALL;
        n++;
    }
    return n;
}

/* Settlement, then (after a store event) the log's failure or resume, then the
 * subscribers. The order matters on a failure: sends below the durable offset are
 * accepted before partfail.c rejects the rest, and transactions judge what is left. */
static void advance(mqd_part_t *p, bool store_event)
{
    uint64_t visible = mqd_part_visible_end(p, MQD_READ_UNCOMMITTED);
    settle_sends(p, visible);
    if (store_event)
        mqd_part_log_event(p);
    mqd_part_commit_t *c = p->commit;
    if (!c)
        return;
    /* a subscriber must not subscribe or unsubscribe from inside its callback */
    for (size_t i = 0; i < c->n_subs; i++)
        c->subs[i].fn(p, visible, c->subs[i].arg);
}

void mqd_part_stable_advanced(mqd_part_t *p, uint64_t stable)
{
    if (p->commit && !p->commit->replicated)
        p->commit->hw = stable;
    /* Every store callback is passed on, also one that did not move the visible end: a
     * failed or resumed log reports through it too. */
    advance(p, true);
}

void mqd_part_set_repl_ends(mqd_part_t *p, uint64_t hw, uint64_t quorum_end)
{
    mqd_part_commit_t *c = p->commit;
    if (!c)
        return;
    uint64_t stable = mqd_plog_stable_offset(p->log);
    uint64_t before = mqd_part_visible_end(p, MQD_READ_UNCOMMITTED);
    uint64_t qbefore = c->replicated && c->quorum_end < stable ? c->quorum_end : stable;
    c->replicated = true;
    c->hw = hw;
    c->quorum_end = quorum_end > hw ? quorum_end : hw;
    uint64_t qafter = c->quorum_end < stable ? c->quorum_end : stable;
    /* only a rise: a fall (a new leader's lower watermark) settles nothing and wakes
     * nobody, and the next rise is measured from where it fell to */
    if (mqd_part_visible_end(p, MQD_READ_UNCOMMITTED) > before)
        advance(p, false);
    else if (qafter > qbefore)
        settle_sends(p, mqd_part_visible_end(p, MQD_READ_UNCOMMITTED));
}

void mqd_part_set_hw(mqd_part_t *p, uint64_t hw)
{
    mqd_part_set_repl_ends(p, hw, hw);
}

uint64_t mqd_part_lso(const mqd_part_t *p)
{
    return p->commit ? p->commit->lso : UINT64_MAX;
}

void mqd_part_set_lso(mqd_part_t *p, uint64_t lso)
{
    if (p->commit)
        p->commit->lso = lso;
}
