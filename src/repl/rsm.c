/* repl/rsm: the replication decisions of one partition, events in, actions out (rsm.h).
 *
 * The rules, as repl/ applies them today:
 *  - roles: the state's leader leads, the other replicas follow; a node that finds
 *    itself leader in the state it reads at start hands over first (handover_ms);
 *  - the leader: the high watermark is the least log end over itself (its stable
 *    offset) and the in-sync followers, never goes back, and does not move while the
 *    in-sync set is below min_insync_replicas; a follower leaves the in-sync set when it
 *    has not caught up (reached the leader's end of the previous tick) within
 *    replica_lag_ms, or its node is gone and it no longer fetches, and rejoins once
 *    linked, caught up and at the watermark;
 *  - fencing: a leader that lost its lease acknowledges nothing until the state was
 *    read again (a partition of one replica excepted);
 *  - the fetch attach: the follower's expected epoch must be the leader's, its fetch
 *    offset at or above the log start, and its log must not go past where the leader's
 *    epochs <= its last epoch end (KIP-279), else it truncates to the lower of the two
 *    epoch ends;
 *  - the controller: a partition whose leader's key went is given to the live in-sync
 *    replica with the longest reported log, after every live in-sync replica reported or
 *    cand_wait_ms passed, else the first live one in in-sync order; unclean only when
 *    allowed. */
#include "config.h"
#include "repl/rsm.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#ifdef MQD_RSM_BUGS
unsigned mqd_rsm_bugs;
#endif

bool mqd_rsm_alive(const mqd_rsm_ctx_t *ctx, uint32_t id)
{
    return mqd_repl_pstate_has(ctx->alive, ctx->n_alive, id);
}

void mqd_rsm_set_alive(mqd_rsm_ctx_t *ctx, uint32_t id, bool alive)
{
    for (uint32_t i = 0; i < ctx->n_alive; i++)
        if (ctx->alive[i] == id) {
            if (!alive)
                ctx->alive[i] = ctx->alive[--ctx->n_alive];
            return;
        }
    if (alive && ctx->n_alive < MQD_RSM_MAX_NODES)
        ctx->alive[ctx->n_alive++] = id;
}

void mqd_rsm_init(mqd_rsm_t *s)
{
    memset(s, 0, sizeof *s);
    s->lease_live = true;
}

bool mqd_rsm_may_ack(const mqd_rsm_ctx_t *ctx, const mqd_rsm_t *s)
{
    if (s->ps.n_replicas == 1 && s->ps.replicas[0] == ctx->self)
        return true; /* nobody else can have been elected */
    return !s->fenced && s->lease_live;
}

/* ---- actions ---- */

static mqd_rsm_act_t *emit(mqd_rsm_out_t *out, mqd_rsm_act_type_t t)
{
    size_t i = out->n;
    if (i < MQD_RSM_MAX_ACTIONS)
        out->n++;
    else
        out->overflow = true, i = MQD_RSM_MAX_ACTIONS - 1;
    mqd_rsm_act_t *a = &out->a[i];
    memset(a, 0, offsetof(mqd_rsm_act_t, ps));
    a->text[0] = '\0';
    a->type = t;
    return a;
}

static void say(mqd_rsm_out_t *out, mqd_rsm_log_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(mqd_rsm_out_t *out, mqd_rsm_log_t level, const char *fmt, ...)
{
    mqd_rsm_act_t *a = emit(out, MQD_RSM_ACT_LOG);
    va_list ap;
    a->level = level;
    va_start(ap, fmt);
    vsnprintf(a->text, sizeof a->text, fmt, ap);
    va_end(ap);
}

static void refuse(mqd_rsm_out_t *out, mqd_rsm_act_type_t t, mqd_rsm_cond_t cond, uint32_t node,
                   uint32_t acks)
{
    mqd_rsm_act_t *a = emit(out, t);
    a->cond = cond;
    a->node = node;
    a->acks = acks;
}

static void refresh(mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    if (s->refresh_out)
        return;
    emit(out, MQD_RSM_ACT_REFRESH);
    s->refresh_out = true;
}

static bool cas(mqd_rsm_t *s, const mqd_repl_pstate_t *next, mqd_rsm_cas_kind_t kind,
                mqd_rsm_out_t *out)
{
    if (s->cas_out)
        return false;
    mqd_rsm_act_t *a = emit(out, MQD_RSM_ACT_CAS);
    a->ps = *next;
    a->mod_rev = s->mod_rev;
    s->cas_out = true;
    s->cas_kind = kind;
    s->cas_ps = *next;
    return true;
}

static bool in_isr(const mqd_rsm_t *s, uint32_t id)
{
    return mqd_repl_pstate_has(s->ps.isr, s->ps.n_isr, id);
}

/* ---- the leader ---- */

static mqd_rsm_flw_t *flw_of(mqd_rsm_t *s, uint32_t id)
{
    for (uint32_t i = 0; i < s->n_flw; i++)
        if (s->flw[i].id == id)
            return &s->flw[i];
    return NULL;
}

/* In the in-sync set as the watermark counts it: the state's, and a member that the CAS
 * in flight adds (Kafka's "maximal ISR"). Once etcd holds the larger set, any of its
 * members may be elected; main's watermark() counts the state's set alone until the
 * CAS's answer, and may settle, in that window, a record the joining follower lacks
 * (sim_rsm found it: docs/replication.md "Decision core and simulation"). */
static bool in_max_isr(const mqd_rsm_t *s, uint32_t id)
{
    bool joining = s->cas_out && s->cas_kind == MQD_RSM_CAS_ISR &&
                   mqd_repl_pstate_has(s->cas_ps.isr, s->cas_ps.n_isr, id);
    return in_isr(s, id) || (joining && !MQD_RSM_BUG(STATE_ISR));
}

static void watermark(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    uint64_t hw, q;
    if (!mqd_rsm_may_ack(ctx, s))
        return; /* fenced: settles nothing, whatever followers report */
    if (s->ps.n_replicas == 1 && !s->hw_known) {
        hw = q = s->stable; /* the only replica: the stable offset, as a single node's */
    } else {
        uint64_t isr_leo[MQD_REPL_MAX_RF], all_leo[MQD_REPL_MAX_RF];
        size_t n_isr = 0;
        for (uint32_t i = 0; i < s->n_flw; i++) {
            all_leo[i] = s->flw[i].leo;
            if (in_max_isr(s, s->flw[i].id))
                isr_leo[n_isr++] = s->flw[i].leo;
        }
        hw = mqd_repl_hw(s->stable, isr_leo, n_isr);
        if (s->ps.n_isr < ctx->min_isr && hw > s->hw)
            hw = s->hw; /* KIP-966: what only the leader holds is not committed */
        if (hw < s->hw)
            hw = s->hw; /* never back under one leader */
        q = mqd_repl_quorum_end(s->stable, all_leo, s->n_flw, s->ps.n_replicas);
    }
    s->hw = hw;
    if (hw == s->ends_hw && q == s->ends_q)
        return;
    s->ends_hw = hw;
    s->ends_q = q;
    s->hw_known = true;
    mqd_rsm_act_t *a = emit(out, MQD_RSM_ACT_SET_ENDS);
    a->hw = hw;
    a->offset = q;
}

static void isr_cas(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const uint32_t *isr, uint32_t n,
                    mqd_rsm_out_t *out)
{
    mqd_repl_pstate_t next;
    mqd_rsm_chg_t c = {.kind = MQD_RSM_CHG_ISR, .isr = isr, .n_isr = n};
    if (mqd_rsm_change(ctx, &s->ps, &c, &next, NULL) == 0)
        cas(s, &next, MQD_RSM_CAS_ISR, out);
}

/* Whether f may rejoin the in-sync set: at the watermark, and at the start of this
 * leader's epoch. A new leader's watermark is the one it was told as a follower and may
 * lag what the previous leader settled; a follower let in below the epoch's start may
 * lack a settled record and be elected (main checks the watermark alone; sim_rsm found it,
 * as Kafka did in KAFKA-7128: docs/replication.md "Decision core and simulation"). */
static bool caught_up(const mqd_rsm_t *s, const mqd_rsm_flw_t *f)
{
    return f->leo >= s->hw && (f->leo >= s->epoch_start || MQD_RSM_BUG(REJOIN_HW));
}

/* The in-sync set the leader wants (leader.c isr_check). */
static void isr_check(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    int64_t now = s->now_ms, lag = (int64_t)ctx->replica_lag_ms;
    uint32_t isr[MQD_REPL_MAX_RF], n = 0;
    bool change = false;
    isr[n++] = ctx->self;
    for (uint32_t i = 0; i < s->n_flw; i++) {
        mqd_rsm_flw_t *f = &s->flw[i];
        if (f->link && f->leo >= f->probe_end)
            f->caught_ms = f->probe_ms;
        f->probe_end = s->end;
        f->probe_ms = now;
        bool in = in_isr(s, f->id), fresh = now - f->caught_ms <= lag;
        /* a node whose key went waits the lease, unless it still fetches and caught up
           within half a lease: only its link to etcd is cut */
        bool fetching = f->link && now - f->caught_ms <= (int64_t)ctx->lease_ms / 2;
        bool gone = !mqd_rsm_alive(ctx, f->id) && !fetching;
        bool want = f->leaving || gone ? false : in ? fresh : f->link && fresh && caught_up(s, f);
        if (want)
            isr[n++] = f->id;
        if (want != in) {
            change = true;
            say(out, MQD_RSM_LOG_NOTICE,
                "node %" PRIu32 " %s the in-sync set (its end %" PRIu64 ", leader's %" PRIu64 ")",
                f->id, want ? "rejoins" : "leaves", f->leo, s->end);
        }
    }
    if (change)
        isr_cas(ctx, s, isr, n, out);
}

/* A follower out of the in-sync set whose settlement reached the watermark and the end
 * of the last tick rejoins at once rather than at the next tick. */
static void rejoin_now(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_flw_t *f, mqd_rsm_out_t *out)
{
    if (!f->link || f->leaving || s->cas_out || f->leo < f->probe_end || !caught_up(s, f) ||
        in_isr(s, f->id) || s->ps.n_isr >= MQD_REPL_MAX_RF)
        return;
    uint32_t isr[MQD_REPL_MAX_RF];
    memcpy(isr, s->ps.isr, s->ps.n_isr * sizeof *isr);
    isr[s->ps.n_isr] = f->id;
    f->caught_ms = f->probe_ms;
    say(out, MQD_RSM_LOG_NOTICE,
        "node %" PRIu32 " rejoins the in-sync set (its end %" PRIu64 "): caught up", f->id, f->leo);
    isr_cas(ctx, s, isr, s->ps.n_isr + 1, out);
}

static void isr_changed(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    bool below = s->ps.n_isr < ctx->min_isr;
    if (below) {
        refuse(out, MQD_RSM_ACT_REJECT_WAITING, MQD_RSM_COND_RESOURCE_LIMIT, 0, MQD_ACKS_ALL);
        if (!s->below_min)
            say(out, MQD_RSM_LOG_WARN,
                "%" PRIu32 " in sync, below min_insync_replicas: acks = all sends are refused",
                s->ps.n_isr);
    }
    s->below_min = below;
    watermark(ctx, s, out);
}

static void lead_start(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    s->n_flw = 0;
    for (uint32_t i = 0; i < s->ps.n_replicas; i++)
        if (s->ps.replicas[i] != ctx->self)
            s->flw[s->n_flw++] = (mqd_rsm_flw_t){
                .id = s->ps.replicas[i], .caught_ms = s->now_ms, .probe_ms = s->now_ms};
    s->lead_epoch = s->ps.epoch;
    s->epoch_start = s->end;
    /* what it knew as a follower; after a restart nothing: records only this node has
       must not become visible before the followers report */
    if (MQD_RSM_BUG(HW_FROM_LOG))
        s->hw = s->stable;
    else
        s->hw = !s->hw_known ? 0 : s->hw < s->stable ? s->hw : s->stable;
    s->ends_hw = s->ends_q = UINT64_MAX;
    s->below_min = false;
    mqd_rsm_act_t *a = emit(out, MQD_RSM_ACT_LEAD);
    a->epoch = s->ps.epoch;
    isr_changed(ctx, s, out);
}

static void lead_stop(mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    /* settles nothing more, acks = leader included: the new leader may not have these */
    refuse(out, MQD_RSM_ACT_REJECT_WAITING, MQD_RSM_COND_RESOURCE_LIMIT, 0, MQD_ACKS_LEADER);
    emit(out, MQD_RSM_ACT_DROP_LINK);
    s->n_flw = 0;
}

/* The state names this node leader in another epoch: the followers' links, attached
 * under the old one, go. */
static void lead_epoch(mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    if (s->lead_epoch == s->ps.epoch)
        return;
    say(out, MQD_RSM_LOG_NOTICE, "still the leader, now in epoch %" PRIu32 " (was %" PRIu32 ")",
        s->ps.epoch, s->lead_epoch);
    s->lead_epoch = s->ps.epoch;
    s->epoch_start = s->end;
    emit(out, MQD_RSM_ACT_DROP_LINK);
    for (uint32_t i = 0; i < s->n_flw; i++)
        s->flw[i].link = 0;
}

static void attach(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev,
                   mqd_rsm_out_t *out)
{
    mqd_rsm_flw_t *f = s->role == MQD_RSM_ROLE_LEADER ? flw_of(s, ev->node) : NULL;
    if (s->role != MQD_RSM_ROLE_LEADER)
        return refuse(out, MQD_RSM_ACT_REFUSE_LINK, MQD_RSM_COND_NOT_FOUND, ev->node, 0);
    if (!f)
        return refuse(out, MQD_RSM_ACT_REFUSE_LINK, MQD_RSM_COND_UNAUTHORIZED, ev->node, 0);
    if (ev->epoch && ev->epoch != s->ps.epoch) {
        if (ev->epoch > s->ps.epoch) { /* this node missed a change: a zombie */
            say(out, MQD_RSM_LOG_WARN,
                "this leader's epoch %" PRIu32 " is older than the follower's %" PRIu32
                ": reading the partition's state again",
                s->ps.epoch, ev->epoch);
            s->fenced = true;
            refresh(s, out);
            return refuse(out, MQD_RSM_ACT_REFUSE_LINK, MQD_RSM_COND_PRECONDITION, ev->node, 0);
        }
        return refuse(out, MQD_RSM_ACT_REFUSE_LINK, MQD_RSM_COND_STALE_EPOCH, ev->node, 0);
    }
    if (ev->offset < ev->log_start) {
        refuse(out, MQD_RSM_ACT_REFUSE_LINK, MQD_RSM_COND_BELOW_START, ev->node, 0);
        out->a[out->n - 1].offset = ev->log_start;
        return;
    }
    if (!MQD_RSM_BUG(SKIP_DIVERGENCE) &&
        (ev->offset > ev->epoch_end || ev->largest != ev->last_epoch)) {
        refuse(out, MQD_RSM_ACT_REFUSE_LINK, MQD_RSM_COND_DIVERGED, ev->node, 0);
        out->a[out->n - 1].epoch = ev->largest;
        out->a[out->n - 1].offset = ev->epoch_end;
        return;
    }
    if (f->link) /* an older link of the same follower (a reconnect) */
        emit(out, MQD_RSM_ACT_DROP_LINK)->node = f->id;
    mqd_rsm_act_t *a = emit(out, MQD_RSM_ACT_ACCEPT_LINK);
    a->node = f->id;
    a->offset = ev->offset;
    f->link = ev->link;
    f->leaving = false;
    f->leo = ev->offset; /* what it holds now: after a restart it may hold less */
    watermark(ctx, s, out);
}

static void progress(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev,
                     mqd_rsm_out_t *out)
{
    mqd_rsm_flw_t *f = s->role == MQD_RSM_ROLE_LEADER ? flw_of(s, ev->node) : NULL;
    if (!f || (f->link != ev->link && !MQD_RSM_BUG(STALE_FETCH)))
        return; /* a settlement on a link that is no longer its */
    if (ev->offset > f->leo) {
        f->leo = ev->offset;
        rejoin_now(ctx, s, f, out);
    }
    watermark(ctx, s, out);
}

static void leave(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev,
                  mqd_rsm_out_t *out)
{
    mqd_rsm_flw_t *f = s->role == MQD_RSM_ROLE_LEADER ? flw_of(s, ev->node) : NULL;
    if (!f || f->link != ev->link)
        return;
    f->link = 0; /* it stays in sync until replica_lag_ms says otherwise, */
    if (!ev->flag)
        return;
    f->leaving = true; /* unless its node said it is stopping */
    say(out, MQD_RSM_LOG_NOTICE, "node %" PRIu32 " is stopping: it leaves the in-sync set now",
        f->id);
    isr_check(ctx, s, out);
}

static void send_check(const mqd_rsm_ctx_t *ctx, const mqd_rsm_t *s, const mqd_rsm_ev_t *ev,
                       mqd_rsm_out_t *out)
{
    if (s->role != MQD_RSM_ROLE_LEADER)
        refuse(out, MQD_RSM_ACT_REJECT_SEND, MQD_RSM_COND_NOT_FOUND, 0, ev->acks);
    else if (!mqd_rsm_may_ack(ctx, s))
        refuse(out, MQD_RSM_ACT_REJECT_SEND, MQD_RSM_COND_PRECONDITION, 0, ev->acks);
    else if (ev->acks == MQD_ACKS_ALL && s->ps.n_isr < ctx->min_isr)
        refuse(out, MQD_RSM_ACT_REJECT_SEND, MQD_RSM_COND_RESOURCE_LIMIT, 0, ev->acks);
}

/* ---- the follower ---- */

static void try_attach(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    if (s->role != MQD_RSM_ROLE_FOLLOWER || s->fol_linked || !s->attach_at_ms ||
        s->now_ms < s->attach_at_ms || s->truncating || s->stable < s->end || ctx->stopping)
        return; /* it reports only what is stable */
    mqd_rsm_act_t *a = emit(out, MQD_RSM_ACT_ATTACH);
    a->node = s->fol_leader;
    a->offset = s->end;
    a->epoch = s->ps.epoch;
    s->fol_linked = true;
    s->link_epoch = s->ps.epoch;
    s->settled = s->end;
    s->attach_at_ms = 0;
}

/* The fetch link is gone (or never was): attach again after again_ms. */
static void unlink_fol(mqd_rsm_t *s, int64_t again_ms)
{
    s->fol_linked = false;
    s->attach_at_ms = s->now_ms + again_ms;
    if (!s->attach_at_ms) /* 0 means "none" */
        s->attach_at_ms = 1;
}

static void fol_start(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    s->fol_leader = s->ps.leader;
    s->truncating = false;
    mqd_rsm_act_t *a = emit(out, MQD_RSM_ACT_FOLLOW);
    a->node = s->ps.leader;
    a->epoch = s->ps.epoch;
    unlink_fol(s, 0);
    try_attach(ctx, s, out);
}

static void fol_stop(mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    if (s->fol_linked)
        emit(out, MQD_RSM_ACT_DETACH);
    s->fol_linked = false;
    s->attach_at_ms = 0;
}

/* The same leader in a new epoch: attach again with the new mqd:epoch. */
static void fol_epoch(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    if (!s->fol_linked || s->link_epoch == s->ps.epoch)
        return;
    emit(out, MQD_RSM_ACT_DETACH);
    unlink_fol(s, 0);
    try_attach(ctx, s, out);
}

static void resync(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out, const char *why)
{
    say(out, MQD_RSM_LOG_WARN, "run from node %" PRIu32 " not appended (%s): fetching again",
        s->fol_leader, why);
    emit(out, MQD_RSM_ACT_RESYNC);
    unlink_fol(s, ctx->reattach_ms);
}

static void run(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev, mqd_rsm_out_t *out)
{
    if (s->role != MQD_RSM_ROLE_FOLLOWER || !s->fol_linked)
        return;
    if (s->link_epoch != s->ps.epoch)
        return resync(ctx, s, out, "link attached in an older epoch");
    if (ev->epoch > s->ps.epoch) { /* a leader of an epoch this node has not seen */
        refresh(s, out);
        return resync(ctx, s, out, "records of a newer epoch");
    }
    if (ev->count && ev->offset != s->end)
        return resync(ctx, s, out, "not at this log's end");
    if (ev->count) {
        emit(out, MQD_RSM_ACT_APPEND)->offset = ev->offset;
        s->end += ev->count;
    }
    s->hw = ev->hw;
    s->hw_known = true;
    emit(out, MQD_RSM_ACT_SET_HW)->hw = ev->hw;
}

static void fol_stable(mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    uint64_t to = MQD_RSM_BUG(ACK_UNSYNCED) ? s->end : s->stable;
    if (!s->fol_linked || to <= s->settled)
        return;
    s->settled = to;
    emit(out, MQD_RSM_ACT_SETTLE)->offset = to;
}

static void link_down(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev,
                      mqd_rsm_out_t *out)
{
    if (s->role != MQD_RSM_ROLE_FOLLOWER)
        return;
    unlink_fol(s, ctx->reattach_ms);
    if (ev->cond == MQD_RSM_COND_DIVERGED) {
        /* KIP-279: the lower of where the leader's epoch ends and where it ends here */
        uint64_t to = ev->epoch_end < ev->offset ? ev->epoch_end : ev->offset;
        if (to >= s->end)
            return;
        say(out, MQD_RSM_LOG_NOTICE,
            "diverged from leader %" PRIu32 ": truncating %" PRIu64 " -> %" PRIu64
            " (leader's epoch %" PRIu32 " ends at %" PRIu64 ")",
            s->fol_leader, s->end, to, ev->epoch, ev->epoch_end);
        emit(out, MQD_RSM_ACT_TRUNCATE)->offset = to;
        s->truncating = true;
    } else if (ev->cond == MQD_RSM_COND_BELOW_START) {
        emit(out, MQD_RSM_ACT_RESET)->offset = ev->log_start;
        s->end = s->stable = ev->log_start;
    } else if (ev->cond == MQD_RSM_COND_STALE_EPOCH) {
        refresh(s, out); /* the leader knows a newer state: read it first */
    }
}

static void truncated(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev,
                      mqd_rsm_out_t *out)
{
    s->truncating = false;
    s->end = ev->end;
    if (s->stable > s->end)
        s->stable = s->end;
    if (s->settled > s->end)
        s->settled = s->end;
    if (s->role == MQD_RSM_ROLE_FOLLOWER && !s->fol_linked)
        s->attach_at_ms = s->now_ms ? s->now_ms : 1;
    try_attach(ctx, s, out);
}

/* ---- roles ---- */

static void set_role(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_role_t role,
                     mqd_rsm_out_t *out)
{
    mqd_rsm_role_t was = s->role;
    if (was == MQD_RSM_ROLE_LEADER)
        lead_stop(s, out);
    else if (was == MQD_RSM_ROLE_FOLLOWER)
        fol_stop(s, out);
    s->role = role;
    if (role == MQD_RSM_ROLE_LEADER)
        lead_start(ctx, s, out);
    else if (role == MQD_RSM_ROLE_FOLLOWER)
        fol_start(ctx, s, out);
    else if (was != MQD_RSM_ROLE_NONE)
        emit(out, MQD_RSM_ACT_NO_ROLE);
}

/* Brings this node's role in line with the state (repl.c apply). */
static void apply(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    bool member = mqd_repl_pstate_has(s->ps.replicas, s->ps.n_replicas, ctx->self);
    if (s->ps.leader != ctx->self)
        s->handover_ms = 0;
    mqd_rsm_role_t want = !member || s->handover_ms   ? MQD_RSM_ROLE_NONE
                          : s->ps.leader == ctx->self ? MQD_RSM_ROLE_LEADER
                          : ctx->stopping             ? MQD_RSM_ROLE_NONE
                                                      : MQD_RSM_ROLE_FOLLOWER;
    if (want != s->role || (want == MQD_RSM_ROLE_FOLLOWER && s->fol_leader != s->ps.leader)) {
        set_role(ctx, s, want, out);
    } else if (want == MQD_RSM_ROLE_LEADER) {
        lead_epoch(s, out);
        isr_changed(ctx, s, out);
    } else if (want == MQD_RSM_ROLE_FOLLOWER) {
        fol_epoch(ctx, s, out);
    }
}

/* ---- the controller: failover (ctl.c, cand.c) ---- */

static void cand_reset(mqd_rsm_t *s)
{
    s->cand_until_ms = 0;
    s->cand_done = false;
    s->cand_pick = 0;
    memset(s->cand_got, 0, sizeof s->cand_got);
}

/* Whether the election may go ahead: every live in-sync replica reported, or the wait is
 * over; *pick: the longest reported log (0: none). */
static bool cand_ready(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, uint32_t *pick, mqd_rsm_out_t *out)
{
    *pick = 0;
    if (s->cand_done) {
        *pick = s->cand_pick;
        return true;
    }
    if (s->cand_until_ms == 0) {
        s->cand_until_ms = s->now_ms + ctx->cand_wait_ms;
        s->cand_pick = 0;
    } else if (s->now_ms >= s->cand_until_ms) {
        say(out, MQD_RSM_LOG_NOTICE,
            "not every in-sync replica reported its log end in %" PRIu32 " ms: electing %s",
            ctx->cand_wait_ms, s->cand_pick ? "the longest reported log" : "in in-sync order");
        s->cand_done = true;
        *pick = s->cand_pick;
        return true;
    }
    if (!s->cand_out) {
        emit(out, MQD_RSM_ACT_READ_REPORTS);
        s->cand_out = true;
    }
    return false;
}

static void failover(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    /* a view without this node alive is not loaded yet: every leader would look gone */
    if (!ctx->controller || !mqd_rsm_alive(ctx, ctx->self))
        return;
    if (s->cas_out || s->mod_rev == 0 || mqd_rsm_alive(ctx, s->ps.leader)) {
        if (s->cand_until_ms && !s->cas_out && s->mod_rev) /* its leader came back */
            emit(out, MQD_RSM_ACT_CLEAR_REPORTS);
        s->offline = false;
        cand_reset(s);
        return;
    }
    if (s->ps.n_replicas == 1) { /* leads again, in the same epoch, when it returns */
        if (!s->offline)
            say(out, MQD_RSM_LOG_NOTICE, "its only replica, node %" PRIu32 ", is gone: offline",
                s->ps.leader);
        s->offline = true;
        return;
    }
    uint32_t prefer;
    if (!cand_ready(ctx, s, &prefer, out))
        return;
    if (MQD_RSM_BUG(ELECT_FIRST))
        prefer = 0;
    mqd_repl_pstate_t next;
    bool unclean = false;
    mqd_rsm_chg_t c = {.kind = MQD_RSM_CHG_FAILOVER,
                       .to = prefer,
                       .unclean = ctx->unclean || MQD_RSM_BUG(UNCLEAN)};
    if (mqd_rsm_change(ctx, &s->ps, &c, &next, &unclean) != 0) {
        if (!s->offline) {
            say(out, MQD_RSM_LOG_WARN,
                "leader %" PRIu32 " gone and no live in-sync replica: offline", s->ps.leader);
            emit(out, MQD_RSM_ACT_CLEAR_REPORTS);
        }
        s->offline = true;
        cand_reset(s); /* a replica that comes back reports again */
        return;
    }
    if (unclean)
        say(out, MQD_RSM_LOG_WARN,
            "unclean election of node %" PRIu32 " (not in sync: acknowledged records may be lost)",
            next.leader);
    say(out, MQD_RSM_LOG_NOTICE,
        "leader %" PRIu32 " gone: node %" PRIu32 " leads in epoch %" PRIu32, s->ps.leader,
        next.leader, next.epoch);
    cand_reset(s);
    cas(s, &next, MQD_RSM_CAS_ELECT, out);
}

static void report(mqd_rsm_t *s, const mqd_rsm_ev_t *ev)
{
    if (!s->cand_until_ms || s->cand_done || ev->epoch != s->ps.epoch)
        return; /* not about this failover */
    for (uint32_t i = 0; i < s->ps.n_isr && i < MQD_REPL_MAX_RF; i++)
        if (s->ps.isr[i] == ev->node) {
            s->cand_got[i] = true;
            s->cand_end[i] = ev->offset;
        }
}

static void reports_read(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    s->cand_out = false;
    if (!s->cand_until_ms || s->cand_done)
        return;
    bool all = true;
    uint32_t pick = 0;
    uint64_t best = 0;
    for (uint32_t i = 0; i < s->ps.n_isr; i++) {
        uint32_t id = s->ps.isr[i];
        if (id == s->ps.leader || !mqd_rsm_alive(ctx, id))
            continue;
        if (!s->cand_got[i]) {
            all = false;
            continue;
        }
        if (!pick || s->cand_end[i] > best) {
            pick = id;
            best = s->cand_end[i];
        }
    }
    s->cand_pick = pick;
    if (!all)
        return;
    s->cand_done = true;
    if (pick)
        say(out, MQD_RSM_LOG_INFO,
            "every live in-sync replica reported; the longest log is node %" PRIu32
            "'s (end %" PRIu64 ")",
            pick, best);
    failover(ctx, s, out);
}

static void node_left(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev,
                      mqd_rsm_out_t *out)
{
    if (s->role == MQD_RSM_ROLE_FOLLOWER && s->ps.leader == ev->node && in_isr(s, ctx->self)) {
        mqd_rsm_act_t *a = emit(out, MQD_RSM_ACT_REPORT_END);
        a->epoch = s->ps.epoch;
        a->offset = s->end;
    }
    failover(ctx, s, out);
}

/* ---- the state, the CAS, the lease ---- */

static void state(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev,
                  mqd_rsm_out_t *out)
{
    if (ev->mod_rev < s->mod_rev)
        return; /* older than what a CAS answer told us */
    s->ps = ev->ps;
    s->mod_rev = ev->mod_rev;
    /* led before this start: hand over, or lead again in a new epoch (handover_tick) */
    if (ev->flag && s->role == MQD_RSM_ROLE_NONE && s->ps.leader == ctx->self &&
        s->ps.n_replicas > 1)
        s->handover_ms = s->now_ms + (s->ps.n_isr > 1 ? (int64_t)ctx->lease_ms : 0);
    apply(ctx, s, out);
}

static void refreshed(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev,
                      mqd_rsm_out_t *out)
{
    s->refresh_out = false;
    if (!ev->flag)
        return; /* not read: the tick asks again */
    mqd_rsm_ev_t st = *ev;
    st.flag = false;
    state(ctx, s, &st, out); /* a newer leader: steps down here */
    if (s->fenced)
        say(out, MQD_RSM_LOG_NOTICE, "state read again: leader %" PRIu32 ", epoch %" PRIu32,
            s->ps.leader, s->ps.epoch);
    s->fenced = false;
    if (s->role == MQD_RSM_ROLE_LEADER)
        watermark(ctx, s, out);
}

static void cas_done(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev,
                     mqd_rsm_out_t *out)
{
    mqd_rsm_cas_kind_t kind = s->cas_kind;
    s->cas_out = false;
    s->cas_kind = MQD_RSM_CAS_NONE;
    if (!ev->flag || ev->mod_rev <= s->mod_rev)
        return; /* lost the race: the newer state comes as a STATE event */
    s->ps = s->cas_ps;
    s->mod_rev = ev->mod_rev;
    if (kind == MQD_RSM_CAS_ELECT)
        emit(out, MQD_RSM_ACT_CLEAR_REPORTS); /* the reports it read are spent */
    if (kind == MQD_RSM_CAS_BUMP && s->ps.leader == ctx->self)
        s->handover_ms = 0; /* leads, in its new epoch */
    apply(ctx, s, out);
}

static void lease(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev,
                  mqd_rsm_out_t *out)
{
    bool was = s->lease_live;
    s->lease_live = ev->flag;
    if (ev->flag) {
        if (s->role == MQD_RSM_ROLE_LEADER)
            watermark(ctx, s, out);
        return;
    }
    if (!was || s->role != MQD_RSM_ROLE_LEADER || s->ps.n_replicas == 1)
        return;
    s->fenced = true; /* the controller may have moved it meanwhile */
    say(out, MQD_RSM_LOG_WARN,
        "lease lost: acknowledging nothing until the partition's state is read again");
    refresh(s, out);
}

/* A restarted leader hands over, or leads after all once nobody took it in a lease: in
 * a new epoch. Main leads again in the same epoch there (and at once when it was alone in
 * sync); but its followers may hold a tail of that epoch it shipped before its own fsync
 * and lost in the crash: appending other records at those offsets in the same epoch, the
 * epoch check of their attach cannot tell, and the replicas disagree below the watermark
 * (sim_rsm found it: docs/replication.md "Decision core and simulation"). A new epoch
 * makes them truncate to where the old one ends here. */
static void handover_tick(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    mqd_repl_pstate_t next;
    mqd_rsm_chg_t c = {.kind = MQD_RSM_CHG_HANDOVER};
    if (s->cas_out)
        return;
    if (mqd_rsm_alive(ctx, ctx->self) && mqd_rsm_change(ctx, &s->ps, &c, &next, NULL) == 0) {
        say(out, MQD_RSM_LOG_NOTICE,
            "led by this node before its restart: node %" PRIu32 " leads in epoch %" PRIu32
            " while it catches up",
            next.leader, next.epoch);
        cas(s, &next, MQD_RSM_CAS_HANDOVER, out);
        return;
    }
    if (s->now_ms < s->handover_ms)
        return;
    c = (mqd_rsm_chg_t){.kind = MQD_RSM_CHG_MOVE, .to = ctx->self};
    if (MQD_RSM_BUG(SAME_EPOCH)) {
        s->handover_ms = 0;
        return apply(ctx, s, out);
    }
    if (mqd_rsm_change(ctx, &s->ps, &c, &next, NULL) != 0)
        return; /* this node's own key is not in its view yet */
    say(out, MQD_RSM_LOG_WARN,
        "no live in-sync replica to hand over to: this node leads, in epoch %" PRIu32, next.epoch);
    cas(s, &next, MQD_RSM_CAS_BUMP, out);
}

/* A clean shutdown: a follower leaves the fetch stream, a leader hands over to the first
 * other live in-sync replica, leaving the in-sync set in the same write (move.c). */
static void stopping(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    if (s->role == MQD_RSM_ROLE_FOLLOWER && s->fol_linked) {
        emit(out, MQD_RSM_ACT_DETACH)->flag = true;
        s->fol_linked = false;
        s->attach_at_ms = 0;
    }
    if (s->role != MQD_RSM_ROLE_LEADER || s->cas_out)
        return;
    for (uint32_t i = 0; i < s->ps.n_isr; i++) {
        uint32_t id = s->ps.isr[i];
        mqd_repl_pstate_t next;
        mqd_rsm_chg_t c = {.kind = MQD_RSM_CHG_MOVE, .to = id, .drop = ctx->self};
        if (id != ctx->self && mqd_rsm_change(ctx, &s->ps, &c, &next, NULL) == 0) {
            say(out, MQD_RSM_LOG_NOTICE,
                "shutdown: handing over to node %" PRIu32 " (epoch %" PRIu32 ")", id, next.epoch);
            cas(s, &next, MQD_RSM_CAS_MOVE, out);
            return;
        }
    }
}

static void tick(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, mqd_rsm_out_t *out)
{
    if (s->fenced)
        refresh(s, out);
    if (ctx->stopping)
        stopping(ctx, s, out);
    if (s->handover_ms)
        handover_tick(ctx, s, out);
    if (s->role == MQD_RSM_ROLE_LEADER) {
        isr_check(ctx, s, out);
        watermark(ctx, s, out);
    } else {
        try_attach(ctx, s, out);
    }
    failover(ctx, s, out); /* again after a lost race or an offline partition */
}

static void move(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev, mqd_rsm_out_t *out)
{
    mqd_repl_pstate_t next;
    mqd_rsm_chg_t c = {.kind = MQD_RSM_CHG_MOVE, .to = ev->node};
    if (ev->node == s->ps.leader)
        return say(out, MQD_RSM_LOG_INFO, "node %" PRIu32 " already leads", ev->node);
    if (mqd_rsm_change(ctx, &s->ps, &c, &next, NULL) != 0)
        return say(out, MQD_RSM_LOG_WARN,
                   "node %" PRIu32 " is not a live in-sync replica: not moved", ev->node);
    if (cas(s, &next, MQD_RSM_CAS_MOVE, out))
        say(out, MQD_RSM_LOG_NOTICE, "moving the lead to node %" PRIu32 " (epoch %" PRIu32 ")",
            ev->node, next.epoch);
}

void mqd_rsm_step(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev,
                  mqd_rsm_out_t *out)
{
    if (ev->now_ms > s->now_ms)
        s->now_ms = ev->now_ms; /* time never goes back inside the core */
    switch (ev->type) {
    case MQD_RSM_EV_STATE: return state(ctx, s, ev, out);
    case MQD_RSM_EV_REFRESHED: return refreshed(ctx, s, ev, out);
    case MQD_RSM_EV_LEASE: return lease(ctx, s, ev, out);
    case MQD_RSM_EV_TICK: return tick(ctx, s, out);
    case MQD_RSM_EV_STABLE:
        s->stable = ev->offset;
        s->end = ev->end;
        if (s->role == MQD_RSM_ROLE_LEADER)
            return watermark(ctx, s, out);
        fol_stable(s, out);
        return try_attach(ctx, s, out);
    case MQD_RSM_EV_PROGRESS: return progress(ctx, s, ev, out);
    case MQD_RSM_EV_ATTACH: return attach(ctx, s, ev, out);
    case MQD_RSM_EV_LEAVE: return leave(ctx, s, ev, out);
    case MQD_RSM_EV_NODE_LEFT: return node_left(ctx, s, ev, out);
    case MQD_RSM_EV_REPORT: return report(s, ev);
    case MQD_RSM_EV_REPORTS_READ: return reports_read(ctx, s, out);
    case MQD_RSM_EV_CAS: return cas_done(ctx, s, ev, out);
    case MQD_RSM_EV_RUN: return run(ctx, s, ev, out);
    case MQD_RSM_EV_LINK_DOWN: return link_down(ctx, s, ev, out);
    case MQD_RSM_EV_TRUNCATED: return truncated(ctx, s, ev, out);
    case MQD_RSM_EV_SEND: return send_check(ctx, s, ev, out);
    case MQD_RSM_EV_MOVE: return move(ctx, s, ev, out);
    }
}

/* ---- names (the scenario scripts and the simulation's traces use them) ---- */

static const char *const EV_NAMES[] = {
    [MQD_RSM_EV_STATE] = "state",
    [MQD_RSM_EV_REFRESHED] = "refreshed",
    [MQD_RSM_EV_LEASE] = "lease",
    [MQD_RSM_EV_TICK] = "tick",
    [MQD_RSM_EV_STABLE] = "stable",
    [MQD_RSM_EV_PROGRESS] = "progress",
    [MQD_RSM_EV_ATTACH] = "attach",
    [MQD_RSM_EV_LEAVE] = "leave",
    [MQD_RSM_EV_NODE_LEFT] = "node-left",
    [MQD_RSM_EV_REPORT] = "report",
    [MQD_RSM_EV_REPORTS_READ] = "reports-read",
    [MQD_RSM_EV_CAS] = "cas-result",
    [MQD_RSM_EV_RUN] = "run",
    [MQD_RSM_EV_LINK_DOWN] = "link-down",
    [MQD_RSM_EV_TRUNCATED] = "truncated",
    [MQD_RSM_EV_SEND] = "send",
    [MQD_RSM_EV_MOVE] = "move",
};

static const char *const ACT_NAMES[] = {
    [MQD_RSM_ACT_LEAD] = "lead",
    [MQD_RSM_ACT_FOLLOW] = "follow",
    [MQD_RSM_ACT_NO_ROLE] = "no-role",
    [MQD_RSM_ACT_CAS] = "cas",
    [MQD_RSM_ACT_SET_ENDS] = "set-ends",
    [MQD_RSM_ACT_SET_HW] = "set-hw",
    [MQD_RSM_ACT_REJECT_WAITING] = "reject-waiting",
    [MQD_RSM_ACT_REJECT_SEND] = "reject-send",
    [MQD_RSM_ACT_DROP_LINK] = "drop-link",
    [MQD_RSM_ACT_ACCEPT_LINK] = "accept-link",
    [MQD_RSM_ACT_REFUSE_LINK] = "refuse-link",
    [MQD_RSM_ACT_ATTACH] = "attach",
    [MQD_RSM_ACT_DETACH] = "detach",
    [MQD_RSM_ACT_APPEND] = "append",
    [MQD_RSM_ACT_RESYNC] = "resync",
    [MQD_RSM_ACT_SETTLE] = "settle",
    [MQD_RSM_ACT_TRUNCATE] = "truncate",
    [MQD_RSM_ACT_RESET] = "reset",
    [MQD_RSM_ACT_REFRESH] = "refresh",
    [MQD_RSM_ACT_READ_REPORTS] = "read-reports",
    [MQD_RSM_ACT_REPORT_END] = "report-end",
    [MQD_RSM_ACT_CLEAR_REPORTS] = "clear-reports",
    [MQD_RSM_ACT_LOG] = "log",
};

static const char *const COND_NAMES[] = {
    [MQD_RSM_COND_CLOSED] = "closed",
    [MQD_RSM_COND_DIVERGED] = "diverged",
    [MQD_RSM_COND_BELOW_START] = "below-start",
    [MQD_RSM_COND_STALE_EPOCH] = "stale-epoch",
    [MQD_RSM_COND_NOT_FOUND] = "not-found",
    [MQD_RSM_COND_UNAUTHORIZED] = "unauthorized",
    [MQD_RSM_COND_PRECONDITION] = "precondition",
    [MQD_RSM_COND_RESOURCE_LIMIT] = "resource-limit",
};

#define NAME_OF(tab, i) ((size_t)(i) < sizeof tab / sizeof *tab && tab[i] ? tab[i] : "?")

const char *mqd_rsm_ev_name(mqd_rsm_ev_type_t t)
{
    return NAME_OF(EV_NAMES, t);
}

const char *mqd_rsm_act_name(mqd_rsm_act_type_t t)
{
    return NAME_OF(ACT_NAMES, t);
}

const char *mqd_rsm_cond_name(mqd_rsm_cond_t c)
{
    return NAME_OF(COND_NAMES, c);
}
