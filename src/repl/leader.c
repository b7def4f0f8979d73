/* The leader's side of a replicated partition: it serves each follower's fetch link
 * ($repl/<T>/<P>, a receiver on the follower), ships the stable records as raw runs,
 * learns each follower's log end from its settlements, moves the high watermark and
 * keeps the in-sync set in etcd.
 *
 * Why settlement is the log-end report: a follower settles a run only once the run is in
 * its log and stable under its own flush policy, and it appends and flushes in offset
 * order, so the settlement of the run ending at E says "I hold everything below E, as
 * durably as my topic promises". No extra message is needed and the report can never get
 * ahead of the data. */
#include "config.h"
#include "repl/repl_int.h"
#include "auth/auth.h"
#include "group/group.h"

#include <inttypes.h>
#include <proton/delivery.h>
#include <proton/terminus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char ISR_SMALL[] = "the in-sync set is too small: fewer in-sync replicas than "
                                "min_insync_replicas (acks = all)";

static void tap(mqd_plog_t *log, uint64_t first, const uint8_t *data, size_t len, uint32_t count,
                void *arg);

/* This node took (led) or left the partition's lead: local-only links (mqd:fwd-local-only)
 * stay attached and start or stop reading it, the groups assign it again. */
static void lead_moved(rpart_t *rp, bool led)
{
    mqd_part_set_led(rp->local, led);
    if (!rp->r->closing && !rp->dropping)
        mqd_groups_lead_moved(mqd_part_topic(rp->local), rp->part);
}

int mqd_repl_lead_start(rpart_t *rp)
{
    lead_t *ld = calloc(1, sizeof *ld);
    if (!ld)
        return MQD_ENOMEM;
    int64_t now = mqd_now_ms();
    for (uint32_t i = 0; i < rp->ps.n_replicas; i++) {
        if (rp->ps.replicas[i] == rp->r->conf->node_id)
            continue;
        rflw_t *f = &ld->f[ld->n++];
        *f = (rflw_t){.rp = rp, .id = rp->ps.replicas[i], .caught_ms = now, .probe_ms = now};
    }
    ld->epoch = rp->ps.epoch;
    ld->epoch_start = mqd_plog_end_offset(mqd_part_log(rp->local));
    mqd_plog_set_epoch(mqd_part_log(rp->local), ld->epoch);
    mqd_plog_set_commit_tap(mqd_part_log(rp->local), tap, rp);
    /* what it knew as a follower (never goes back); after a restart nothing is known:
     * records only this node has must not become visible before the followers report */
    ld->hw = mqd_part_hw_set(rp->local) ? mqd_part_hw(rp->local) : 0;
    if (ld->hw > mqd_plog_stable_offset(mqd_part_log(rp->local)))
        ld->hw = mqd_plog_stable_offset(mqd_part_log(rp->local));
    rp->lead = ld;
    mqd_repl_lead_state(rp);
    mqd_repl_lead_isr_changed(rp);
    lead_moved(rp, true);
    return 0;
}

static void drop_link(rflw_t *f)
{
    if (!f->ls)
        return;
    mqd_lstate_t *ls = f->ls;
    mqd_ls_set_repl(ls, NULL);
    f->ls = NULL;
    if (!(pn_link_state(mqd_ls_link(ls)) & PN_LOCAL_CLOSED)) {
        pn_condition_set_name(pn_link_condition(mqd_ls_link(ls)), "amqp:link:detach-forced");
        pn_link_close(mqd_ls_link(ls));
        mqd_conn_mark_dirty(mqd_ls_conn(ls));
    }
}

/* The partition a producer or consumer link of the topic is bound to, -1 for the whole
 * topic (a consumer of a group, a sender to the topic's address). */
static int64_t link_part(mqd_lstate_t *ls)
{
    if (mqd_ls_kind(ls) != MQD_LS_PRODUCER) /* manual: T/ConsumerGroups/G/Partitions/P */
        return mqd_ls_manual(ls) ? (int64_t)mqd_ls_part(ls) : -1;
    const char *addr = pn_terminus_get_address(pn_link_target(mqd_ls_link(ls)));
    mqd_addr_t a;
    if (addr && mqd_addr_parse(addr, strlen(addr), &a) == 0 && a.kind == MQD_ADDR_PARTITION)
        return (int64_t)a.partition;
    return -1;
}

/* Moves a link of rp's topic that rp's move concerns (bound to rp or to the whole
 * topic): a group member's, queue consumer's or browser's link is served through fwd from the new
 * leader, attached all along (mqd_consumer_forward); any other is detached with
 * amqp:link:redirect to where an attach would now be sent (the same answer as the
 * attach-time redirect: mqd_repl_where), else detach-forced. Returns 2 when forwarded,
 * 1 when redirected, 0 when forced, -1 when the link stays (bound to another
 * partition). */
static int move_link(rpart_t *rp, mqd_lstate_t *ls)
{
    int64_t part = link_part(ls);
    mqd_redirect_t to;
    const char *why = NULL;
    if ((part >= 0 && part != (int64_t)rp->part) || mqd_ls_local_only(ls))
        return -1; /* a local-only link stays: its partitions change (lead_moved) */
    if (mqd_ls_kind(ls) != MQD_LS_PRODUCER && mqd_consumer_forward(ls))
        return 2;
    if (mqd_repl_where(rp->r, mqd_part_topic(rp->local), part, &to, &why) ==
        MQD_REPL_SERVE_REDIRECT) {
        mqd_link_detach_redirect(ls, &to);
        return 1;
    }
    mqd_consumer_detach(ls, "amqp:link:detach-forced",
                        "this node does not lead the partition (its leader moved, or is not "
                        "known here yet): attach again to be redirected");
    return 0;
}

/* A leader that stepped down settles no more sends, and its receivers read up to a
 * watermark it no longer moves from a log that may be cut back by epoch. Kafka clients
 * get NOT_LEADER and refresh their metadata at once; here the topic's producer and
 * consumer links bound to this partition (or to the whole topic) are detached with
 * amqp:link:redirect naming the new leader, so a client moves without asking every node;
 * with forwarding (issue 33 point 3), a consumer's link stays attached instead and is
 * served from the new leader through this node (fwd/recv.c), unless it asked for
 * redirects; producers' links stay anyway (their sends are forwarded).
 * While the new leader is not known here (no address yet) they are detached with
 * amqp:link:detach-forced: they attach again and are redirected or wait then. A link
 * bound to a partition still led here stays. The same holds for a node that never led
 * (serve.c: no link is served there; this catches any that was). */
void mqd_repl_detach_links(rpart_t *rp)
{
    mqd_topic_t *t = mqd_part_topic(rp->local);
    mqd_server_t *s = rp->r->s;
    size_t moved[3] = {0, 0, 0};
    mqd_dlist_t *head = mqd_topic_consumers(t);
    for (mqd_dlist_t *it = head->next, *next; it != head; it = next) {
        next = it->next; /* the detach unlinks it */
        int rc = move_link(rp, mqd_ls_of_tnode(it));
        if (rc >= 0)
            moved[rc]++;
    }
    head = mqd_srv_conns(s);
    for (mqd_dlist_t *it = head->next; it != head && !rp->r->forwarding; it = it->next) {
        pn_connection_t *pc = mqd_conn_driver(mqd_conn_of_node(it))->connection;
        for (pn_link_t *l = pn_link_head(pc, 0); l; l = pn_link_next(l, 0)) {
            mqd_lstate_t *ls = pn_link_get_context(l);
            if (ls && mqd_ls_kind(ls) == MQD_LS_PRODUCER && mqd_ls_topic(ls) == t) {
                int rc = move_link(rp, ls);
                if (rc >= 0)
                    moved[rc]++;
            }
        }
    }
    if (moved[0] + moved[1] + moved[2])
        MQD_NOTICE("repl",
                   "%s/%u: %s: %zu consumer links now served from node %" PRIu32
                   " through this one, %zu links detached with a redirect, %zu forced (the "
                   "new leader's address is not known here)",
                   rp->topic, rp->part, rp->role == ROLE_LEADER ? "stepped down" : "not its leader",
                   moved[2], rp->ps.leader, moved[1], moved[0]);
}

void mqd_repl_lead_stop(rpart_t *rp)
{
    lead_t *ld = rp->lead;
    mqd_plog_set_commit_tap(mqd_part_log(rp->local), NULL, NULL);
    for (uint32_t i = 0; ld && i < ld->n; i++)
        drop_link(&ld->f[i]);
    mqd_repl_fol_doubt(rp); /* its waiting sends: settled by the next leader's watermark */
    if (!rp->r->closing && !rp->dropping)
        mqd_repl_detach_links(rp);
    lead_moved(rp, false);
    if (ld)
        mqd_repl_gstate_free(ld);
    free(ld);
    rp->lead = NULL;
}

static void send_run(rflw_t *f, const mqd_repl_run_t *run, uint64_t next);

/* One run (or, with nothing to ship, the watermark alone) on f's link. */
static int ship(rflw_t *f, uint64_t stable)
{
    rpart_t *rp = f->rp;
    mqd_repl_t *r = rp->r;
    mqd_repl_run_t run = {.base = f->next_send, .hw = rp->lead->hw};
    size_t len = 0;
    uint64_t next = f->next_send;
    if (f->next_send < stable) {
        int rc = mqd_plog_read_raw(mqd_part_log(rp->local), f->next_send, r->buf, r->cap, &len, &next);
        if (rc == MQD_ETOOBIG && mqd_repl_grow(r, len) == 0)
            rc = mqd_plog_read_raw(mqd_part_log(rp->local), f->next_send, r->buf, r->cap, &len, &next);
        if (rc != 0)
            return rc;
    }
    run.count = (uint32_t)(next - f->next_send);
    run.data = r->buf;
    run.len = len;
    send_run(f, &run, next);
    return 0;
}

/* The commit tap (mqd_plog_set_commit_tap): a batch handed to the flusher goes at once,
 * from memory, to each follower that has credit and has everything before it, so the
 * followers write and sync while this node does. A follower behind (no credit, a
 * reconnect, catching up) is left to pump(), which reads what is stable. Nothing here
 * settles anything: the watermark still counts this node only once its own log made the
 * records stable (watermark()). */
static void tap(mqd_plog_t *log, uint64_t first, const uint8_t *data, size_t len, uint32_t count,
                void *arg)
{
    (void)log;
    rpart_t *rp = arg;
    lead_t *ld = rp->lead;
    if (!ld || !mqd_repl_may_ack(rp) || mqd_plog_failed(log))
        return;
    /* runs of at most REPL_RUN_BYTES (or one bigger record), cut at record boundaries by
     * the records' own length fields: this node wrote them, a follower checks the CRCs */
    size_t pos = 0;
    uint64_t off = first;
    while (pos < len) {
        size_t end = pos;
        uint32_t n = 0;
        while (end < len && (n == 0 || end - pos + 4 <= REPL_RUN_BYTES)) {
            uint32_t rl;
            memcpy(&rl, data + end, 4);
            if (n && end - pos + 4 + rl > REPL_RUN_BYTES)
                break;
            end += 4 + (size_t)rl;
            n++;
        }
        if (end > len || off + n > first + count)
            return; /* not what the store promised: leave it to pump()'s reads */
        mqd_repl_run_t run = {
            .base = off, .hw = ld->hw, .count = n, .data = data + pos, .len = end - pos};
        for (uint32_t i = 0; i < ld->n; i++) {
            rflw_t *f = &ld->f[i];
            if (!f->ls || f->next_send != off ||
                (pn_link_state(mqd_ls_link(f->ls)) & PN_LOCAL_CLOSED) ||
                pn_link_credit(mqd_ls_link(f->ls)) <= 0)
                continue;
            send_run(f, &run, off + n);
            mqd_conn_mark_dirty(mqd_ls_conn(f->ls));
        }
        pos = end;
        off += n;
    }
}

/* Puts one run on f's link: the run's head, then its records. */
static void send_run(rflw_t *f, const mqd_repl_run_t *run, uint64_t next)
{
    uint8_t head[MQD_REPL_HEAD_MAX];
    size_t hl = mqd_repl_run_head(run, head);
    pn_link_t *l = mqd_ls_link(f->ls);
    uint64_t tag = f->tag++;
    pn_delivery_t *d = pn_delivery(l, pn_dtag((const char *)&tag, sizeof tag));
    pn_delivery_set_context(d, (void *)(uintptr_t)next);
    pn_link_send(l, (const char *)head, hl);
    if (run->len)
        pn_link_send(l, (const char *)run->data, run->len);
    pn_link_advance(l);
    f->next_send = next;
    f->hw_sent = run->hw;
}

static void pump(rflw_t *f)
{
    if (!f->ls || (pn_link_state(mqd_ls_link(f->ls)) & PN_LOCAL_CLOSED))
        return;
    uint64_t stable = mqd_plog_stable_offset(mqd_part_log(f->rp->local));
    bool sent = false;
    while (pn_link_credit(mqd_ls_link(f->ls)) > 0 &&
           (f->next_send < stable || f->hw_sent != f->rp->lead->hw)) {
        int rc = ship(f, stable);
        if (rc != 0) {
            MQD_WARN("repl", "%s/%u: raw read at %" PRIu64 " for node %" PRIu32 ": %s",
                     f->rp->topic, f->rp->part, f->next_send, f->id, mqd_strerror(rc));
            break;
        }
        sent = true;
    }
    if (sent)
        mqd_conn_mark_dirty(mqd_ls_conn(f->ls));
}

/* The high watermark over the in-sync set, the quorum end over all replicas. While the
 * in-sync set is below min_insync_replicas the watermark stays where it is (Kafka's
 * KIP-966): what only the leader holds is not committed. */
static void watermark(rpart_t *rp)
{
    lead_t *ld = rp->lead;
    if (!mqd_repl_may_ack(rp))
        return; /* fenced: settles nothing, whatever followers report */
    uint64_t stable = mqd_plog_stable_offset(mqd_part_log(rp->local));
    if (rp->ps.n_replicas == 1 && !mqd_part_hw_set(rp->local)) {
        ld->hw = stable; /* the only replica: its commit point follows the stable offset, as a
                            single node's does (settled at once, no kick per commit) */
        return;
    }
    uint64_t isr_leo[MQD_REPL_MAX_RF], all_leo[MQD_REPL_MAX_RF];
    size_t n_isr = 0;
    for (uint32_t i = 0; i < ld->n; i++) {
        all_leo[i] = ld->f[i].leo;
        /* "maximal ISR" (Kafka's KIP-497 rule, found by sim_rsm): a follower whose rejoin
         * is being written counts already, or it could be elected holding less than the
         * watermark settled meanwhile */
        if (mqd_repl_pstate_has(rp->ps.isr, rp->ps.n_isr, ld->f[i].id) ||
            (ld->f[i].joining && rp->cas_out))
            isr_leo[n_isr++] = ld->f[i].leo;
    }
    uint64_t hw = mqd_repl_hw(stable, isr_leo, n_isr);
    if (rp->ps.n_isr < mqd_repl_min_isr(rp->r, rp) && hw > ld->hw)
        hw = ld->hw;
    if (hw < ld->hw)
        hw = ld->hw; /* the watermark never goes back under one leader */
    uint64_t q = mqd_repl_quorum_end(stable, all_leo, ld->n, rp->ps.n_replicas);
    ld->hw = hw;
    mqd_part_set_repl_ends(rp->local, hw, q);
}

/* The in-sync set the leader wants: a follower stays while it caught up within
 * replica_lag_ms (caught up = it reached the log end the leader had at the previous
 * tick: under steady load a follower is always a little behind the very end) and
 * rejoins once it is connected, reached the watermark and the leader's log end at the
 * start of its epoch (a new leader's watermark can lag what the old one settled:
 * KAFKA-7128, found by sim_rsm) and caught up within the lag. */
static uint64_t rejoin_floor(const lead_t *ld)
{
    return ld->hw > ld->epoch_start ? ld->hw : ld->epoch_start;
}

static void isr_check(rpart_t *rp, int64_t now)
{
    lead_t *ld = rp->lead;
    uint64_t end = mqd_plog_end_offset(mqd_part_log(rp->local));
    int64_t lag = (int64_t)rp->r->conf->replica_lag_ms;
    mqd_repl_pstate_t ps = rp->ps;
    bool change = false;
    ps.n_isr = 0;
    ps.isr[ps.n_isr++] = rp->r->conf->node_id;
    for (uint32_t i = 0; i < ld->n; i++) {
        rflw_t *f = &ld->f[i];
        if (f->ls && f->leo >= f->probe_end)
            f->caught_ms = f->probe_ms;
        f->probe_end = end;
        f->probe_ms = now;
        bool in = mqd_repl_pstate_has(rp->ps.isr, rp->ps.n_isr, f->id);
        bool fresh = now - f->caught_ms <= lag;
        /* a follower whose node left the cluster (its lease expired) is out at once, as
         * one that left cleanly: acks = all sends wait the lease, not replica_lag_ms;
         * unless it still fetches and caught up within half a lease: its process lives,
         * only its link to etcd is cut (test 95 (c)), while a dead one's fetch link went
         * or it stopped catching up a lease ago */
        const mqd_cluster_node_t *node = mqd_repl_node(rp->r, f->id);
        bool fetching = f->ls && now - f->caught_ms <= (int64_t)rp->r->conf->lease_ttl_ms / 2;
        bool gone = node && !node->alive && !fetching;
        bool want = f->leaving || gone ? false
                    : in               ? fresh
                                       : f->ls && fresh && f->leo >= rejoin_floor(ld);
        if (want)
            ps.isr[ps.n_isr++] = f->id;
        if (!rp->cas_out)
            f->joining = want && !in;
        if (want != in) {
            change = true;
            MQD_NOTICE("repl",
                       "%s/%u: node %" PRIu32 " %s the in-sync set (its end %" PRIu64
                       ", leader's %" PRIu64 ")",
                       rp->topic, rp->part, f->id, want ? "rejoins" : "leaves", f->leo, end);
        }
    }
    if (change && !rp->cas_out && mqd_repl_part_cas(rp, &ps) != 0)
        for (uint32_t i = 0; i < ld->n; i++)
            ld->f[i].joining = false; /* not sent */
}

/* A follower out of the in-sync set whose settlement just reached the watermark and the
 * log end of the last tick: isr_check's own rule for a rejoin, applied when the report
 * arrives instead of at the next tick (a follower back from a partition rejoins within
 * milliseconds of catching up). */
static void rejoin_now(rflw_t *f)
{
    rpart_t *rp = f->rp;
    lead_t *ld = rp->lead;
    if (!ld || !f->ls || f->leaving || rp->cas_out || f->leo < f->probe_end ||
        f->leo < rejoin_floor(ld) ||
        mqd_repl_pstate_has(rp->ps.isr, rp->ps.n_isr, f->id) || rp->ps.n_isr >= MQD_REPL_MAX_RF)
        return;
    mqd_repl_pstate_t ps = rp->ps;
    f->caught_ms = f->probe_ms;
    ps.isr[ps.n_isr++] = f->id;
    MQD_NOTICE("repl",
               "%s/%u: node %" PRIu32 " rejoins the in-sync set (its end %" PRIu64
               ", leader's %" PRIu64 "): caught up",
               rp->topic, rp->part, f->id, f->leo, mqd_plog_end_offset(mqd_part_log(rp->local)));
    f->joining = mqd_repl_part_cas(rp, &ps) == 0;
}

void mqd_repl_lead_work(rpart_t *rp, int64_t now_ms)
{
    if (!rp->lead)
        return;
    if (now_ms) {
        mqd_repl_move_failed_lead(rp);
        if (!rp->lead)
            return;
        isr_check(rp, now_ms);
    }
    watermark(rp);
    for (uint32_t i = 0; i < rp->lead->n; i++)
        pump(&rp->lead->f[i]);
}

/* The state names this node leader again, in another epoch (the controller never writes
 * that; an operator may): the records appended from now on carry the new epoch, and
 * the followers' links, attached under the old one, are dropped: they attach again with
 * the new mqd:epoch (a follower also closes them itself, follower.c). */
void mqd_repl_lead_epoch(rpart_t *rp)
{
    lead_t *ld = rp->lead;
    if (!ld || ld->epoch == rp->ps.epoch)
        return;
    MQD_NOTICE("repl", "%s/%u: still the leader, now in epoch %" PRIu32 " (was %" PRIu32 ")",
               rp->topic, rp->part, rp->ps.epoch, ld->epoch);
    ld->epoch = rp->ps.epoch;
    ld->epoch_start = mqd_plog_end_offset(mqd_part_log(rp->local));
    mqd_plog_set_epoch(mqd_part_log(rp->local), ld->epoch);
    for (uint32_t i = 0; i < ld->n; i++)
        drop_link(&ld->f[i]);
}

void mqd_repl_lead_isr_changed(rpart_t *rp)
{
    lead_t *ld = rp->lead;
    if (!ld)
        return;
    bool below = rp->ps.n_isr < mqd_repl_min_isr(rp->r, rp);
    if (below) {
        size_t n = mqd_part_reject_waiting(rp->local, MQD_ACKS_ALL, "amqp:resource-limit-exceeded",
                                           ISR_SMALL);
        if (!ld->below_min || n)
            MQD_WARN("repl",
                     "%s/%u: %" PRIu32 " in sync, below min_insync_replicas: acks = "
                     "all sends are refused (%zu waiting rejected)",
                     rp->topic, rp->part, rp->ps.n_isr, n);
    }
    ld->below_min = below;
    mqd_repl_lead_work(rp, 0);
}

/* ---- the fetch link ---- */

typedef struct fetch_req {
    uint32_t node;
    uint64_t offset;
    uint32_t last_epoch;
    uint32_t epoch; /* mqd:epoch: the leader epoch the follower expects (seen & 8) */
    unsigned seen;
} fetch_req_t;

/* The attach's properties: mqd:node-id (uint), mqd:fetch-offset (ulong), mqd:last-epoch
 * (uint, the epoch of the follower's last record; kept for the truncation a failover
 * needs). */
static int read_props(pn_link_t *l, fetch_req_t *q)
{
    pn_data_t *d = pn_link_remote_properties(l);
    *q = (fetch_req_t){0};
    if (!d)
        return MQD_EINVAL;
    pn_data_rewind(d);
    if (!pn_data_next(d) || pn_data_type(d) != PN_MAP)
        return MQD_EINVAL;
    pn_data_enter(d);
    while (pn_data_next(d)) {
        pn_bytes_t k = pn_data_type(d) == PN_SYMBOL ? pn_data_get_symbol(d) : pn_bytes(0, "");
        if (!pn_data_next(d))
            break;
        pn_type_t t = pn_data_type(d);
        uint64_t v = t == PN_ULONG ? pn_data_get_ulong(d) : t == PN_UINT ? pn_data_get_uint(d) : 0;
        if (t != PN_ULONG && t != PN_UINT)
            continue;
        if (k.size == 11 && memcmp(k.start, "mqd:node-id", 11) == 0 && v <= UINT32_MAX)
            q->node = (uint32_t)v, q->seen |= 1;
        else if (k.size == 16 && memcmp(k.start, "mqd:fetch-offset", 16) == 0)
            q->offset = v, q->seen |= 2;
        else if (k.size == 14 && memcmp(k.start, "mqd:last-epoch", 14) == 0 && v <= UINT32_MAX)
            q->last_epoch = (uint32_t)v, q->seen |= 4;
        else if (k.size == 9 && memcmp(k.start, "mqd:epoch", 9) == 0 && v <= UINT32_MAX)
            q->epoch = (uint32_t)v, q->seen |= 8;
    }
    pn_data_exit(d);
    return (q->seen & 3) == 3 ? 0 : MQD_EINVAL;
}

static void refuse(pn_link_t *l, const char *cond, const char *desc, const char *addr)
{
    pn_condition_t *c = pn_link_condition(l);
    pn_condition_set_name(c, cond);
    pn_condition_set_description(c, desc);
    pn_link_open(l);
    pn_link_close(l);
    MQD_INFO("repl", "refused fetch link %s: %s", addr, desc);
}

/* KIP-279: the follower's log goes past where the leader's epochs <= its last epoch end,
 * or the leader never had that epoch: the follower must cut back. The answer is the
 * largest epoch <= the follower's and where it ends on the leader; the follower truncates
 * to the lower of that and where the same epoch ends in its own log, and asks again. */
static void diverged(pn_link_t *l, const char *addr, uint64_t end, uint32_t epoch)
{
    pn_condition_t *c = pn_link_condition(l);
    pn_condition_set_name(c, "mqd:repl:diverged");
    pn_condition_set_description(c, "the follower's log diverges from the leader's: truncate "
                                    "to mqd:epoch-end and fetch again");
    pn_data_t *info = pn_condition_info(c);
    pn_data_clear(info);
    pn_data_put_map(info);
    pn_data_enter(info);
    pn_data_put_symbol(info, pn_bytes(13, "mqd:epoch-end"));
    pn_data_put_ulong(info, end);
    pn_data_put_symbol(info, pn_bytes(9, "mqd:epoch"));
    pn_data_put_uint(info, epoch);
    pn_data_exit(info);
    pn_link_open(l);
    pn_link_close(l);
    MQD_NOTICE("repl", "fetch link %s: follower diverges: epoch %" PRIu32 " ends at %" PRIu64, addr,
               epoch, end);
}

/* The follower's fetch offset is below this log's start: retention deleted what it
 * needs next. It holds nothing this leader still has (or only a prefix below the start),
 * so the answer names the start (info mqd:log-start) and the follower empties its
 * replica, restarts it there (mqd_plog_reset) and fetches again, as Kafka's do. */
static void behind_start(rpart_t *rp, pn_link_t *l, const char *addr, uint64_t offset,
                         uint64_t start)
{
    pn_condition_t *c = pn_link_condition(l);
    pn_condition_set_name(c, "mqd:repl:below-log-start");
    pn_condition_set_description(c, "fetch offset below the leader's log start: reset the "
                                    "replica to mqd:log-start and fetch again");
    pn_data_t *info = pn_condition_info(c);
    pn_data_clear(info);
    pn_data_put_map(info);
    pn_data_enter(info);
    pn_data_put_symbol(info, pn_bytes(13, "mqd:log-start"));
    pn_data_put_ulong(info, start);
    pn_data_exit(info);
    pn_link_open(l);
    pn_link_close(l);
    MQD_NOTICE("repl", "%s/%u: fetch link %s: offset %" PRIu64 " is below the log start %" PRIu64,
               rp->topic, rp->part, addr, offset, start);
}

/* "$repl/<T>/<P>" -> its partition, if this node leads it. */
static rpart_t *fetch_part(mqd_repl_t *r, const char *addr)
{
    const char *name = addr + 6, *slash = strrchr(name, '/');
    char topic[MQD_NAME_MAX + 1], *end;
    if (!slash || slash == name || (size_t)(slash - name) > MQD_NAME_MAX)
        return NULL;
    unsigned long p = strtoul(slash + 1, &end, 10);
    if (*end || end == slash + 1 || p > 65535)
        return NULL;
    memcpy(topic, name, (size_t)(slash - name));
    topic[slash - name] = '\0';
    return mqd_repl_part_find(r, topic, (uint32_t)p);
}

static rflw_t *follower_of(rpart_t *rp, uint32_t id)
{
    for (uint32_t i = 0; rp->lead && i < rp->lead->n; i++)
        if (rp->lead->f[i].id == id)
            return &rp->lead->f[i];
    return NULL;
}

/* Only a replica of the partition may fetch it: the connection's user must be
 * replication_user when that is set, and the attach must name a node of the replica set. */
/* The follower expects another leader epoch (mqd:epoch) than this leader holds. Newer:
 * this node missed a state change (a zombie): it acknowledges nothing until it has read
 * its partition key again, which steps it down if it no longer leads. Older: the
 * follower is the one behind; mqd:repl:stale-epoch makes it read etcd before it
 * attaches again. */
static void epoch_mismatch(rpart_t *rp, pn_link_t *l, const char *addr, uint32_t theirs)
{
    char why[160];
    if (theirs > rp->ps.epoch) {
        snprintf(why, sizeof why,
                 "this leader's epoch %" PRIu32 " is older than the follower's %" PRIu32
                 ": reading the partition's state again",
                 rp->ps.epoch, theirs);
        MQD_WARN("repl", "%s/%u: %s", rp->topic, rp->part, why);
        rp->fenced = true; /* mqd_repl_refresh lifts it once etcd answered */
        mqd_repl_refresh(rp);
        return refuse(l, "amqp:precondition-failed", why, addr);
    }
    snprintf(why, sizeof why, "stale epoch: the follower's %" PRIu32 ", the leader's %" PRIu32,
             theirs, rp->ps.epoch);
    refuse(l, "mqd:repl:stale-epoch", why, addr);
}

void mqd_repl_lead_attach(mqd_repl_t *r, mqd_conn_t *c, pn_link_t *l, const char *addr)
{
    fetch_req_t q;
    rpart_t *rp = fetch_part(r, addr);
    pn_terminus_copy(pn_link_source(l), pn_link_remote_source(l));
    pn_terminus_copy(pn_link_target(l), pn_link_remote_target(l));
    const char *ru = r->conf->replication_user;
    if (r->conf->replication_tls && !mqd_conn_ssl(c)) /* the password and the records in clear */
        return refuse(l, "amqp:unauthorized-access", "replication requires TLS", addr);
    /* a node login (SASL EXTERNAL) is no user's, whatever its name */
    if (ru && ru[0] && (mqd_auth_conn_is_node(c) || strcmp(mqd_conn_user(c), ru) != 0))
        return refuse(l, "amqp:unauthorized-access", "fetch links are for replication_user only",
                      addr);
    if (read_props(l, &q) != 0)
        return refuse(l, "amqp:invalid-field",
                      "a fetch link needs the properties "
                      "mqd:node-id and mqd:fetch-offset",
                      addr);
    char why[200]; /* replication_peer_verify: the certificate must name the node claimed */
    if (mqd_auth_repl_peer_check(c, q.node, why, sizeof why) != 0)
        return refuse(l, "amqp:unauthorized-access", why, addr);
    if (!rp || rp->role != ROLE_LEADER)
        return refuse(l, "amqp:not-found", "this node does not lead that partition", addr);
    rflw_t *f = follower_of(rp, q.node);
    if (!f)
        return refuse(l, "amqp:unauthorized-access", "that node is not a replica", addr);
    if ((q.seen & 8) && q.epoch != rp->ps.epoch)
        return epoch_mismatch(rp, l, addr, q.epoch);
    uint64_t start = mqd_plog_start_offset(mqd_part_log(rp->local)), epoch_end;
    uint32_t largest;
    if (q.offset < start)
        return behind_start(rp, l, addr, q.offset, start);
    if (mqd_repl_epoch_end(r, mqd_part_log(rp->local), q.last_epoch, &epoch_end, &largest) != 0)
        return refuse(l, "amqp:internal-error", "epoch lookup failed", addr);
    if (q.offset > epoch_end || largest != q.last_epoch)
        return diverged(l, addr, epoch_end, largest);
    drop_link(f); /* an older link of the same follower (a reconnect) */
    mqd_lstate_t *ls = mqd_ls_alloc(MQD_LS_REPL, c, l);
    if (!ls)
        return refuse(l, "amqp:resource-limit-exceeded", "out of memory", addr);
    mqd_ls_set_repl(ls, f);
    pn_link_set_context(l, ls); /* mqd_ls_alloc leaves that to its caller */
    char name[160];
    snprintf(name, sizeof name, "%s/%s", mqd_conn_peer(c), pn_link_name(l));
    mqd_ls_set_name(ls, name);
    f->ls = ls;
    f->leaving = false;
    f->leo = q.offset; /* what it holds now: after a restart it may hold less */
    f->next_send = q.offset;
    f->hw_sent = UINT64_MAX; /* tell it the watermark at once */
    pn_link_set_snd_settle_mode(l, PN_SND_UNSETTLED);
    pn_link_open(l);
    MQD_NOTICE("repl",
               "%s/%u: node %" PRIu32 " fetches from %" PRIu64 " (its last epoch %" PRIu32 ")",
               rp->topic, rp->part, f->id, q.offset, q.last_epoch);
    mqd_repl_lead_work(rp, 0);
}

void mqd_repl_lead_event(mqd_repl_t *r, mqd_lstate_t *ls, pn_event_t *e)
{
    rflw_t *f = mqd_ls_repl(ls);
    if (!f)
        return;
    if (pn_event_type(e) == PN_DELIVERY) {
        pn_delivery_t *d = pn_event_delivery(e);
        if (!pn_delivery_settled(d) && !pn_delivery_updated(d))
            return;
        uint64_t end = (uint64_t)(uintptr_t)pn_delivery_get_context(d);
        if (pn_delivery_remote_state(d) == PN_ACCEPTED && end > f->leo) {
            f->leo = end;
            rejoin_now(f);
        } else if (pn_delivery_remote_state(d) != PN_ACCEPTED) {
            MQD_WARN("repl", "%s/%u: node %" PRIu32 " did not take the run ending at %" PRIu64,
                     f->rp->topic, f->rp->part, f->id, end);
        }
        pn_delivery_settle(d);
    }
    mqd_repl_lead_work(f->rp, 0);
}

void mqd_repl_lead_gone(mqd_repl_t *r, mqd_lstate_t *ls)
{
    rflw_t *f = mqd_ls_repl(ls);
    mqd_ls_set_repl(ls, NULL);
    if (!f || f->ls != ls)
        return;
    f->ls = NULL; /* it stays in sync until replica_lag_ms says otherwise, */
    const char *cn = pn_condition_get_name(pn_link_remote_condition(mqd_ls_link(ls)));
    if (!cn || strcmp(cn, MQD_REPL_LEAVING) != 0 || !f->rp->lead)
        return;
    f->leaving = true; /* unless its node said it is stopping */
    MQD_NOTICE("repl", "%s/%u: node %" PRIu32 " is stopping: it leaves the in-sync set now",
               f->rp->topic, f->rp->part, f->id);
    mqd_repl_lead_work(f->rp, mqd_now_ms());
}
