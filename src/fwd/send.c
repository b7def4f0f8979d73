/* fwd/send: producers' messages forwarded per message to their partition's leader.
 *
 * amqp chooses the partition of each message exactly as on a single node and asks the
 * send hook. The message (copied) goes on an upstream sender link `T/Partitions/N` to the
 * leader, this node too (the loopback leg: a send it appended itself would be rejected
 * to the client if it stepped down before replicating it; a forwarded one is sent
 * again), over the pool
 * connection (one link per leader node, topic, partition, acks level and client user;
 * link properties mqd:fwd-user, mqd:fwd-node and the client's mqd:acks), and the client's
 * delivery is held until the leader settles the copy: then it gets the leader's outcome
 * (accepted, rejected with the leader's condition, released, modified).
 *
 * - No leader known (an election): the message is held, in order, and routed again each
 *   tick; one that waited the lease + 1 s is rejected (amqp:resource-limit-exceeded,
 *   "no leader ..."). A leader whose connection is not up is waited for as long.
 * - The upstream link or connection goes: every unsettled copy is routed again, to the
 *   new leader once known; the leader refuses a copy because it no longer leads: that
 *   copy and the later ones of the link are. The leader's duplicate detection by
 *   message-id (dedup_window_ms) keeps a copy it already stored once.
 * - The leader moved while copies sent to it are unsettled on a link that is up: they
 *   stay, their outcomes awaited (upl_drain): the node that stepped down settles them by
 *   the new leader's watermark, or rejects the ones cut from its log (repl/follower.c),
 *   so that a copy the new leader holds is not stored twice.
 * - A partition's messages keep their arrival order (seq) through all of it: held and
 *   queued lists are in seq order, a message is held behind an earlier held one of its
 *   partition, a refusal by the leader takes everything after it on the link along, and
 *   the partition's copies queued on the link to the leader that was move to the new one,
 *   and the ones sent on it are settled, before anything newer goes there
 *   (move_partition).
 * - A fenced leader here (lease lost) is waited for like an election; past the bound the
 *   message gets what a local send gets: amqp:precondition-failed, lease lost.
 * - Flow control: a client link's forwarded sends in flight keep their credit (amqp's
 *   refill asks `inflight`), so a slow leader slows the client; past FWD_BUDGET bytes
 *   in flight to one node, no producer link of this node gets new credit for it.
 * - Event Hubs batches (message-format 0x80013700, one transfer holding many messages) go
 *   on a link of their own per (leader, topic, partition, ...) whose attach carries
 *   mqd:batch = true: Proton 0.37's C API sets no transfer's message-format, so the leader
 *   (which honours mqd:batch only from a node, and answers with it) reads every transfer
 *   of that link as a batch and stores it as a direct one: one record per inner message,
 *   duplicates dropped by each inner message's id. A leader that does not answer with
 *   mqd:batch gets none (the client's batch is rejected, amqp:not-implemented).
 * - Transactional sends go to fwd/txn.c (the transaction forwarded whole); transactional
 *   batches to a partition led elsewhere are refused (amqp:not-implemented) for now; a
 *   batch to a partition led here is appended here, as on a single node. */
#include "config.h"
#include "fwd/fwd_int.h"

#include <event2/buffer.h>
#include <inttypes.h>
#include <stdarg.h>
#include <proton/condition.h>
#include <proton/disposition.h>
#include <proton/terminus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FWD_BUDGET (64u << 20) /* bytes in flight to one node */
#define FWD_CL_BUCKETS 256
#define FWD_RETRY_MS 100

typedef struct clink clink_t;
typedef struct upl upl_t;

/* A client producer link with forwarded sends in flight. */
struct clink {
    clink_t *hnext;
    mqd_lstate_t *ls; /* NULL once the link went */
    uint32_t inflight;
};

/* One forwarded message: the client's delivery and a copy of its bytes. */
typedef struct fmsg {
    mqd_dlist_t node; /* in its upstream link's queue or sent list, or the held list */
    clink_t *cl;
    mqd_conn_t *conn; /* a reference */
    pn_delivery_t *d; /* held; NULL for a presettled send or a front end's message */
    mqd_pend_notify_fn fn; /* a front end's message (0-9-1): its outcome goes here */
    void *fn_arg;
    uint64_t fn_tag;
    upl_t *upl;       /* while queued or sent on it */
    pn_delivery_t *up;
    uint32_t part, to; /* to: the node its bytes are counted against (0: none) */
    int acks;
    bool batch;       /* an Event Hubs batch: goes on a mqd:batch link */
    int64_t wait_ms;  /* waiting for a leader (or its connection) since; 0: not waiting */
    int64_t retry_ms; /* held: routed again then */
    int64_t sent_ms;  /* sent upstream then (its outcome awaited) */
    uint64_t t_ns;
    uint64_t seq; /* arrival order: a partition's messages go (again) in this order */
    char *topic, *user;
    size_t len;
    uint8_t msg[];
} fmsg_t;

/* An upstream sender link T/Partitions/N to a leader. */
struct upl {
    fwd_link_t fl;
    upl_t *next;
    fwd_t *f;
    uint32_t node, part;
    int acks;
    char *topic, *user;
    bool batch;    /* a mqd:batch link: its transfers are batches */
    bool opened;   /* the leader answered the attach with a target */
    bool no_batch; /* a batch link the leader answered without mqd:batch */
    bool draining; /* its node no longer leads: only its sent copies' outcomes awaited */
    mqd_dlist_t queue, sent;
    uint64_t tag;
};

struct fwd_send {
    upl_t *upls;
    mqd_dlist_t held;
    clink_t *cl[FWD_CL_BUCKETS];
    uint64_t bytes[FWD_MAX_PEERS + 1]; /* in flight per node id (id > FWD_MAX_PEERS: last) */
    uint64_t n_fwd, n_inflight, n_resent, n_rejected, n_expired, added_ns, n_done;
    mqd_hist_t added; /* per accepted send: arrival to the leader's acceptance */
    uint64_t seq, mseq;
};

static const char *const ACKS[] = {"leader", "quorum", "all"};

static uint64_t *node_bytes(fwd_t *f, uint32_t node)
{
    return &f->send->bytes[node < FWD_MAX_PEERS ? node : FWD_MAX_PEERS];
}

static uint32_t hold_ms(fwd_t *f)
{
    return mqd_repl_lease_ms(f->r) + 1000;
}

/* ---- client links ---- */

static size_t cl_bucket(const mqd_lstate_t *ls)
{
    return ((uintptr_t)ls >> 4) % FWD_CL_BUCKETS;
}

static clink_t *cl_find(fwd_send_t *fs, const mqd_lstate_t *ls, bool create)
{
    clink_t **h = &fs->cl[cl_bucket(ls)];
    for (clink_t *c = *h; c; c = c->hnext)
        if (c->ls == ls)
            return c;
    clink_t *c = create ? calloc(1, sizeof *c) : NULL;
    if (c) {
        c->ls = (mqd_lstate_t *)ls;
        c->hnext = *h;
        *h = c;
    }
    return c;
}

static void cl_forget(fwd_send_t *fs, clink_t *c)
{
    for (clink_t **h = &fs->cl[cl_bucket(c->ls)]; *h; h = &(*h)->hnext)
        if (*h == c) {
            *h = c->hnext;
            free(c);
            return;
        }
}

static uint32_t on_inflight(void *arg, const mqd_lstate_t *ls)
{
    fwd_t *f = arg;
    clink_t *c = cl_find(f->send, ls, false);
    if (!c)
        return 0;
    for (size_t i = 0; i <= FWD_MAX_PEERS; i++)
        if (f->send->bytes[i] > FWD_BUDGET)
            return UINT32_MAX / 2; /* a node's budget is spent: no new credit for now */
    return c->inflight;
}

static void on_link_gone(void *arg, mqd_lstate_t *ls)
{
    fwd_t *f = arg;
    clink_t *c = cl_find(f->send, ls, false);
    if (!c)
        return;
    /* its sends in flight still settle their deliveries (held: the link waits for them) */
    for (clink_t **h = &f->send->cl[cl_bucket(ls)]; *h; h = &(*h)->hnext)
        if (*h == c) {
            *h = c->hnext;
            break;
        }
    c->ls = NULL;
    c->hnext = NULL;
    if (c->inflight == 0)
        free(c);
}

/* ---- the client's outcome ---- */

static void fmsg_free(fwd_t *f, fmsg_t *fm)
{
    fwd_send_t *fs = f->send;
    mqd_dlist_del(&fm->node);
    if (fm->up)
        pn_delivery_set_context(fm->up, NULL);
    if (fm->to)
        *node_bytes(f, fm->to) -= fm->len;
    fs->n_inflight--;
    clink_t *c = fm->cl;
    if (c && --c->inflight == 0 && !c->ls)
        free(c);
    else if (c && c->ls)
        mqd_amqp_producer_refill(c->ls);
    if (fm->conn)
        mqd_conn_unref(fm->conn);
    if (fm->fn) /* dropped (stopping): the front end hears of it once all the same */
        fm->fn(fm->fn_arg, fm->fn_tag, PN_RELEASED, NULL, NULL);
    free(fm);
}

/* Settles the client's delivery with outcome (cond and desc for a rejection) and frees
 * fm. */
static void finish(fwd_t *f, fmsg_t *fm, uint64_t outcome, const char *cond, const char *desc)
{
    fwd_send_t *fs = f->send;
    if (fm->d && !mqd_conn_closed(fm->conn)) {
        pn_link_t *l = mqd_delivery_unhold(fm->d);
        if (outcome == PN_REJECTED) {
            mqd_delivery_reject(fm->d, cond ? cond : "amqp:internal-error", desc);
        } else {
            pn_delivery_update(fm->d, outcome);
            pn_delivery_settle(fm->d);
        }
        mqd_link_reap(l);
        mqd_conn_mark_dirty(fm->conn);
    }
    if (fm->fn) {
        mqd_pend_notify_fn fn = fm->fn;
        fm->fn = NULL;
        fn(fm->fn_arg, fm->fn_tag, outcome, cond, desc);
    }
    if (outcome == PN_ACCEPTED) {
        uint64_t ns = mqd_mono_ns() - fm->t_ns;
        fs->n_done++;
        fs->added_ns += ns;
        mqd_hist_observe(&fs->added, (double)ns / 1e9);
    } else if (outcome == PN_REJECTED) {
        fs->n_rejected++;
    }
    fmsg_free(f, fm);
}

static void finish_reject(fwd_t *f, fmsg_t *fm, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void finish_reject(fwd_t *f, fmsg_t *fm, const char *cond, const char *fmt, ...)
{
    char desc[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(desc, sizeof desc, fmt, ap);
    va_end(ap);
    finish(f, fm, PN_REJECTED, cond, desc);
}

/* Puts fm into list in arrival order (nearly always at the end): a partition's messages
 * held or queued again after a leader change keep their order. */
static void push_ordered(mqd_dlist_t *list, fmsg_t *fm)
{
    mqd_dlist_t *at = list->prev;
    while (at != list && MQD_CONTAINER(at, fmsg_t, node)->seq > fm->seq)
        at = at->prev;
    mqd_dlist_push(at->next, &fm->node);
}

/* ---- upstream links ---- */

static void upl_on_event(fwd_link_t *fl, pn_event_t *e);
static void upl_on_down(fwd_link_t *fl, const char *why);
static void route(fwd_t *f, fmsg_t *fm);
static void hold(fwd_t *f, fmsg_t *fm);

static void put_str(pn_data_t *d, const char *k, const char *v)
{
    fwd_put_sym(d, k);
    pn_data_put_string(d, pn_bytes(strlen(v), v));
}

static void sender_props(fwd_t *f, pn_link_t *l, const char *user, int acks, bool batch)
{
    pn_link_set_snd_settle_mode(l, PN_SND_UNSETTLED);
    pn_link_set_rcv_settle_mode(l, PN_RCV_FIRST);
    pn_data_t *d = pn_link_properties(l);
    pn_data_put_map(d);
    pn_data_enter(d);
    put_str(d, "mqd:fwd-user", user);
    fwd_put_sym(d, "mqd:fwd-node");
    pn_data_put_uint(d, f->self);
    if (acks >= 0 && acks < (int)MQD_ARRAY_LEN(ACKS)) {
        fwd_put_sym(d, "mqd:acks");
        pn_data_put_symbol(d, pn_bytes(strlen(ACKS[acks]), ACKS[acks]));
    }
    if (batch) {
        fwd_put_sym(d, "mqd:batch");
        pn_data_put_bool(d, true);
    }
    pn_data_exit(d);
}

bool fwd_sender_open(fwd_t *f, fwd_link_t *fl, uint32_t node, const char *prefix,
                     const char *topic, uint32_t part, const char *user, int acks, bool batch,
                     uint64_t seq)
{
    fwd_peer_t *p = fwd_peer_get(f, node);
    pn_session_t *ss = p ? fwd_peer_session(p) : NULL;
    if (!ss || fl->link)
        return false;
    char addr[MQD_NAME_MAX + 32], name[MQD_NAME_MAX + 96];
    snprintf(addr, sizeof addr, "%s/Partitions/%" PRIu32, topic, part);
    snprintf(name, sizeof name, "%s-%" PRIu32 "-%s-%" PRIu32 "-%" PRIu64, prefix, f->self, topic,
             part, seq);
    pn_link_t *l = pn_sender(ss, name);
    pn_terminus_set_address(pn_link_target(l), addr);
    pn_terminus_set_address(pn_link_source(l), name);
    sender_props(f, l, user, acks, batch);
    fwd_link_bind(p, fl, l);
    pn_link_open(l);
    fwd_peer_flush(p);
    return true;
}

static void upl_attach(upl_t *u)
{
    if (fwd_sender_open(u->f, &u->fl, u->node, u->batch ? "fwd-batch" : "fwd", u->topic,
                        u->part, u->user, u->acks, u->batch,
                        u->fl.link ? 0 : ++u->f->send->seq))
        u->opened = false;
}

static upl_t *upl_get(fwd_t *f, uint32_t node, const fmsg_t *fm)
{
    for (upl_t *u = f->send->upls; u; u = u->next)
        if (u->node == node && u->part == fm->part && u->acks == fm->acks &&
            u->batch == fm->batch && strcmp(u->topic, fm->topic) == 0 && strcmp(u->user, fm->user) == 0)
            return u;
    size_t tl = strlen(fm->topic) + 1, ul = strlen(fm->user) + 1;
    upl_t *u = calloc(1, sizeof *u + tl + ul); /* its topic and user after it */
    if (!u)
        return NULL;
    u->topic = memcpy((char *)(u + 1), fm->topic, tl);
    u->user = memcpy(u->topic + tl, fm->user, ul);
    u->f = f;
    u->node = node;
    u->part = fm->part;
    u->acks = fm->acks;
    u->batch = fm->batch;
    u->fl.on_event = upl_on_event;
    u->fl.on_down = upl_on_down;
    mqd_dlist_init(&u->queue);
    mqd_dlist_init(&u->sent);
    mqd_dlist_init(&u->fl.node);
    u->next = f->send->upls;
    f->send->upls = u;
    upl_attach(u);
    return u;
}

/* Takes u out of the table (routing finds it no more); idempotent. */
static void upl_unlist(fwd_t *f, upl_t *u)
{
    for (upl_t **h = &f->send->upls; *h; h = &(*h)->next)
        if (*h == u) {
            *h = u->next;
            break;
        }
    u->next = NULL;
}

/* Frees u (its link closed); its messages must have left it. */
static void upl_free(fwd_t *f, upl_t *u)
{
    upl_unlist(f, u);
    fwd_link_drop(&u->fl);
    free(u);
}

static void pump(upl_t *u)
{
    pn_link_t *l = u->fl.link;
    bool any = false;
    while (u->opened && u->no_batch && !mqd_dlist_empty(&u->queue))
        finish(u->f, MQD_CONTAINER(u->queue.next, fmsg_t, node), PN_REJECTED,
               "amqp:not-implemented",
               "the partition's leader does not take batches forwarded by another node "
               "(an older version): send the messages one by one, or to the leader");
    while (l && u->opened && pn_link_credit(l) > 0 && !mqd_dlist_empty(&u->queue)) {
        fmsg_t *fm = MQD_CONTAINER(u->queue.next, fmsg_t, node);
        uint64_t tag = ++u->tag;
        pn_delivery_t *ud = pn_delivery(l, pn_dtag((const char *)&tag, sizeof tag));
        pn_delivery_set_context(ud, fm);
        pn_link_send(l, (const char *)fm->msg, fm->len);
        pn_link_advance(l);
        fm->up = ud;
        fm->wait_ms = 0;
        fm->sent_ms = mqd_now_ms();
        mqd_dlist_del(&fm->node);
        mqd_dlist_push(&u->sent, &fm->node);
        any = true;
    }
    if (any)
        fwd_peer_flush(u->fl.peer);
}

static bool upl_link_up(const upl_t *u)
{
    return u->fl.link && fwd_peer_session(u->fl.peer);
}

/* Routes again, in their order, u's sent copies from arrival `seq` on and everything
 * queued on it: at once or (later) at the next tick, when the leader refused the link
 * and this node's view may not have moved yet. The sent copies before `seq` stay on u,
 * their outcomes awaited. */
static void upl_reroute_from(fwd_t *f, upl_t *u, uint64_t seq, bool later)
{
    mqd_dlist_t all;
    mqd_dlist_init(&all);
    mqd_dlist_t *lists[2] = {&u->sent, &u->queue};
    for (int i = 0; i < 2; i++)
        for (mqd_dlist_t *n = lists[i]->next, *next; n != lists[i]; n = next) {
            next = n->next;
            fmsg_t *fm = MQD_CONTAINER(n, fmsg_t, node);
            if (i == 0 && fm->seq < seq)
                continue;
            mqd_dlist_del(&fm->node);
            mqd_dlist_push(&all, &fm->node);
        }
    while (!mqd_dlist_empty(&all)) {
        fmsg_t *fm = MQD_CONTAINER(all.next, fmsg_t, node);
        mqd_dlist_del(&fm->node);
        if (fm->up) {
            pn_delivery_set_context(fm->up, NULL);
            fm->up = NULL;
            f->send->n_resent++;
        }
        fm->upl = NULL;
        if (later)
            hold(f, fm);
        else
            route(f, fm);
    }
}

/* Takes u out of the table and routes every message of it again (sent first, then
 * queued: their order); the caller frees u. */
static void upl_reroute(fwd_t *f, upl_t *u, bool later)
{
    upl_unlist(f, u); /* never routed back onto u */
    upl_reroute_from(f, u, 0, later);
}

/* u's node no longer leads its partition but the link is up and copies sent on it await
 * their outcome: they stay (the node that stepped down settles each as the next leader's
 * watermark passes it, or rejects it when its record was cut: repl/follower.c), so that
 * a copy the new leader already holds is not stored twice; what is queued goes by the
 * route, held behind them (route). Returns false when u is not in that state. */
static bool upl_drain(fwd_t *f, upl_t *u, uint32_t leader)
{
    if (!upl_link_up(u) || mqd_dlist_empty(&u->sent))
        return false;
    if (!u->draining)
        MQD_INFO("fwd", "%s/%u: now led by node %" PRIu32 ": the sends still unsettled on "
                 "node %" PRIu32 " wait for its outcome, later ones for them",
                 u->topic, u->part, leader, u->node);
    u->draining = true;
    if (!mqd_dlist_empty(&u->queue))
        upl_reroute_from(f, u, UINT64_MAX, false);
    return true;
}

/* Conditions under which the leader refused a copy because it does not lead the partition
 * (any more): routed again, never shown to the client. */
static bool not_leader(const char *cond, const char *desc)
{
    if (!cond)
        return false;
    if (!strcmp(cond, "amqp:link:redirect") || !strcmp(cond, "amqp:link:detach-forced"))
        return true;
    return desc && strstr(desc, "lead") &&
           (!strcmp(cond, "amqp:precondition-failed") ||
            !strcmp(cond, "amqp:resource-limit-exceeded"));
}

static void upl_outcome(fwd_t *f, upl_t *u, pn_delivery_t *ud)
{
    fmsg_t *fm = pn_delivery_get_context(ud);
    uint64_t st = pn_delivery_remote_state(ud);
    if (!fm || (!st && !pn_delivery_settled(ud)))
        return;
    char cn[128] = "", cd[400] = "";
    if (st == PN_REJECTED) { /* copied: settling may free the delivery */
        pn_condition_t *c = pn_disposition_condition(pn_delivery_remote(ud));
        snprintf(cn, sizeof cn, "%s", pn_condition_get_name(c) ?: "amqp:internal-error");
        snprintf(cd, sizeof cd, "%s",
                 pn_condition_get_description(c) ?: "rejected by the partition's leader");
    }
    pn_delivery_set_context(ud, NULL);
    fm->up = NULL;
    pn_delivery_settle(ud);
    fwd_peer_flush(u->fl.peer);
    if (st == PN_REJECTED) {
        if (not_leader(cn, cd)) {
            /* again once this node's view moved too, and with it everything sent or queued
             * on the link after it (which that node may still take if it leads again):
             * nothing of the partition may overtake it */
            MQD_INFO("fwd", "%s/%u: node %" PRIu32 " does not lead it (%s): this send and "
                     "the later ones go again", u->topic, u->part, u->node, cd);
            f->send->n_resent++;
            /* the earlier ones still unsettled there stay, their outcomes awaited; this
             * one and the later ones wait behind them (route) */
            upl_reroute_from(f, u, fm->seq, true);
            if (mqd_dlist_empty(&u->sent))
                upl_free(f, u);
            return;
        }
        return finish(f, fm, PN_REJECTED, cn, cd);
    }
    if (st == PN_ACCEPTED || st == PN_RELEASED || st == PN_MODIFIED)
        return finish(f, fm, st, NULL, NULL);
    finish(f, fm, PN_RELEASED, NULL, NULL); /* settled with no outcome */
}

/* The leader closed the link: refused at attach for the client (the ACL, no such
 * partition) rejects its messages with the leader's condition; anything else (not the
 * leader any more, the topic moving) routes them again. */
static void upl_closed(fwd_t *f, upl_t *u, pn_link_t *l)
{
    pn_condition_t *c = pn_link_remote_condition(l);
    const char *cn = pn_condition_get_name(c), *cd = pn_condition_get_description(c);
    MQD_INFO("fwd", "%s/%u: node %" PRIu32 " closed the forwarding link: %s: %s", u->topic,
             u->part, u->node, cn ? cn : "-", cd ? cd : "-");
    if (cn && !u->opened && !not_leader(cn, cd)) {
        while (!mqd_dlist_empty(&u->queue)) {
            fmsg_t *fm = MQD_CONTAINER(u->queue.next, fmsg_t, node);
            finish(f, fm, PN_REJECTED, cn, cd ? cd : "refused by the partition's leader");
        }
    }
    upl_reroute(f, u, true);
    upl_free(f, u);
}

static void upl_on_event(fwd_link_t *fl, pn_event_t *e)
{
    upl_t *u = MQD_CONTAINER(fl, upl_t, fl);
    fwd_t *f = u->f;
    pn_link_t *l = pn_event_link(e);
    switch (pn_event_type(e)) {
    case PN_LINK_REMOTE_OPEN:
        u->opened = pn_terminus_get_address(pn_link_remote_target(l)) != NULL;
        u->no_batch = u->batch && !mqd_link_prop_true(l, "mqd:batch"); /* not echoed */
        pump(u);
        break;
    case PN_LINK_FLOW: pump(u); break;
    case PN_DELIVERY: upl_outcome(f, u, pn_event_delivery(e)); break;
    case PN_LINK_REMOTE_DETACH:
    case PN_LINK_REMOTE_CLOSE: upl_closed(f, u, l); break;
    default: break;
    }
}

/* The connection went: the link and its deliveries with it; route everything again (to
 * the same node once it is back, or to the new leader). */
static void upl_on_down(fwd_link_t *fl, const char *why)
{
    upl_t *u = MQD_CONTAINER(fl, upl_t, fl);
    upl_reroute(u->f, u, false);
    upl_free(u->f, u);
}

static void on_peer_up(fwd_peer_t *p, void *arg)
{
    fwd_t *f = arg;
    for (upl_t *u = f->send->upls; u; u = u->next)
        if (u->node == p->id && !u->fl.link)
            upl_attach(u);
}

/* ---- routing ---- */

/* A held message of the partition that arrived before seq (UINT64_MAX: any). */
static bool held_for(fwd_t *f, const char *topic, uint32_t part, uint64_t seq)
{
    mqd_dlist_t *h = &f->send->held;
    for (mqd_dlist_t *n = h->next; n != h; n = n->next) {
        fmsg_t *fm = MQD_CONTAINER(n, fmsg_t, node);
        if (fm->seq < seq && fm->part == part && strcmp(fm->topic, topic) == 0)
            return true;
    }
    return false;
}

/* The partition's messages still on a link to another node than `node` (the leader that
 * was, whose link the tick has not let go yet) go first, ahead of anything newer: queued
 * ones go again; sent ones stay there, their outcomes awaited (upl_drain), unless the
 * link is gone. A link whose connection is going down right now is left to its own
 * on_down. Returns true while such sent copies are awaited: fm must wait for them. */
static bool move_partition(fwd_t *f, const fmsg_t *fm, uint32_t node)
{
    bool wait = false;
    for (upl_t *u = f->send->upls, *next; u; u = next) {
        next = u->next;
        if (u->node != node && u->part == fm->part && strcmp(u->topic, fm->topic) == 0 &&
            !(u->fl.link && !fwd_peer_session(u->fl.peer)) &&
            !(mqd_dlist_empty(&u->sent) && mqd_dlist_empty(&u->queue))) {
            bool had_queue = !mqd_dlist_empty(&u->queue);
            if (upl_drain(f, u, node)) {
                wait = true;
                if (had_queue)
                    next = f->send->upls; /* routing may have changed the table */
                continue;
            }
            MQD_INFO("fwd", "%s/%u: now led by node %" PRIu32 ": the unsettled sends to node "
                     "%" PRIu32 " go there first", u->topic, u->part, node, u->node);
            upl_reroute(f, u, false);
            upl_free(f, u);
            next = f->send->upls; /* the table changed */
        }
    }
    return wait;
}

static void hold(fwd_t *f, fmsg_t *fm)
{
    int64_t now = mqd_now_ms();
    if (!fm->wait_ms)
        fm->wait_ms = now;
    fm->retry_ms = now + FWD_RETRY_MS;
    push_ordered(&f->send->held, fm);
}

/* An upstream link of partition topic/part to a node other than `node` that still has
 * messages (the leader moved and the tick has not routed them again yet), or NULL. */
static upl_t *stale_upl(fwd_t *f, const char *topic, uint32_t part, uint32_t node)
{
    for (upl_t *u = f->send->upls; u; u = u->next)
        if (u->node != node && u->part == part && strcmp(u->topic, topic) == 0 &&
            !(mqd_dlist_empty(&u->sent) && mqd_dlist_empty(&u->queue)))
            return u;
    return NULL;
}

/* To the leader's upstream link, or held while none is known. A partition's messages go
 * in arrival order: behind any held one of it that came before, and after the ones still
 * on a link to the leader that was. */
static void route(fwd_t *f, fmsg_t *fm)
{
    uint32_t leader = 0;
    if (f->closing)
        return fmsg_free(f, fm); /* stopping: the clients' connections go too */
    mqd_repl_serve_t how = mqd_repl_leader(f->r, fm->topic, fm->part, &leader);
    if (how == MQD_REPL_SERVE_WAIT || held_for(f, fm->topic, fm->part, fm->seq))
        return hold(f, fm);
    uint32_t node = how == MQD_REPL_SERVE_HERE ? f->self : leader; /* here: the loopback leg */
    if (move_partition(f, fm, node))
        return hold(f, fm);
    upl_t *u = upl_get(f, node, fm);
    if (!u)
        return finish_reject(f, fm, "amqp:resource-limit-exceeded", "out of memory");
    if (fm->to != node) {
        if (fm->to)
            *node_bytes(f, fm->to) -= fm->len;
        *node_bytes(f, node) += fm->len;
        fm->to = node;
    }
    if (!fm->wait_ms) /* its connection not up, the link not answered: bounded like a held one */
        fm->wait_ms = mqd_now_ms();
    fm->upl = u;
    push_ordered(&u->queue, fm);
    pump(u);
}

/* A forwarded message: a copy of msg with its topic and user after it; NULL without
 * memory. */
static fmsg_t *fmsg_new(const char *topic, uint32_t part, const uint8_t *msg, size_t len,
                        int acks, const char *user)
{
    size_t tl = strlen(topic) + 1, ul = strlen(user) + 1;
    fmsg_t *fm = malloc(sizeof *fm + len + tl + ul);
    if (!fm)
        return NULL;
    memset(fm, 0, sizeof *fm);
    memcpy(fm->msg, msg, len);
    fm->len = len;
    fm->topic = (char *)fm->msg + len;
    memcpy(fm->topic, topic, tl);
    fm->user = fm->topic + tl;
    memcpy(fm->user, user, ul);
    fm->part = part;
    fm->acks = acks;
    fm->t_ns = mqd_mono_ns();
    mqd_dlist_init(&fm->node);
    return fm;
}

static void fmsg_go(fwd_t *f, fmsg_t *fm)
{
    f->send->n_fwd++;
    f->send->n_inflight++;
    fm->seq = ++f->send->mseq;
    route(f, fm);
}

/* MQD_FWD_LOCAL when this node takes a front end's message of partition part itself: a
 * topic of no cluster, or one it leads with nothing of the partition held before it (held
 * for an election, or still on a link to its previous leader). */
static bool send_here(fwd_t *f, const char *topic, uint32_t part)
{
    uint32_t leader = 0;
    if (mqd_repl_nparts(f->r, topic) == 0)
        return true; /* not a cluster topic: a dead-letter topic, a reply node */
    return mqd_repl_leader(f->r, topic, part, &leader) == MQD_REPL_SERVE_HERE &&
           !held_for(f, topic, part, UINT64_MAX) && !stale_upl(f, topic, part, f->self);
}

/* The send hook (core.h). */
static int on_send(void *arg, mqd_lstate_t *ls, pn_delivery_t *d, const char *topic,
                   uint32_t part, const uint8_t *msg, size_t len, bool presettled, int acks,
                   int flags, const char *user)
{
    fwd_t *f = arg;
    if (mqd_repl_nparts(f->r, topic) == 0)
        return MQD_FWD_LOCAL; /* not a cluster topic: a dead-letter topic, a reply node */
    if (flags & MQD_FWD_F_TXN && !(flags & MQD_FWD_F_BATCH)) /* fwd/txn.c */
        return fwd_txn_send(f, ls, d, topic, part, msg, len, presettled, acks, user);
    uint32_t leader = 0;
    /* A partition led here takes a batch as on a single node. Anything else goes through
     * fwd even then, on the loopback leg: a send this node appended itself would be
     * rejected to the client if the node stepped down before it was replicated (a send
     * forwarded is sent again to the new leader), and it could overtake the partition's
     * sends still in flight to the leader that was. */
    if (flags && mqd_repl_leader(f->r, topic, part, &leader) == MQD_REPL_SERVE_HERE)
        return MQD_FWD_LOCAL;
    if (flags & MQD_FWD_F_TXN) {
        if (!presettled)
            mqd_delivery_reject(d, "amqp:not-implemented",
                                "a transactional batched send to a partition led by another "
                                "node is not forwarded (yet): send it to the leader");
        return MQD_FWD_TAKEN;
    }
    mqd_conn_t *c = mqd_ls_conn(ls);
    fmsg_t *fm = fmsg_new(topic, part, msg, len, acks, user);
    clink_t *cl = fm ? cl_find(f->send, ls, true) : NULL;
    if (!cl) {
        free(fm);
        if (!presettled)
            mqd_delivery_reject(d, "amqp:resource-limit-exceeded", "out of memory");
        return MQD_FWD_TAKEN;
    }
    fm->batch = flags & MQD_FWD_F_BATCH;
    fm->cl = cl;
    cl->inflight++;
    fm->conn = c;
    mqd_conn_ref(c);
    fm->d = presettled ? NULL : d;
    if (fm->d)
        mqd_delivery_hold(d); /* settled with the leader's outcome */
    fmsg_go(f, fm);
    return MQD_FWD_TAKEN;
}

/* The send_notify hook (core.h): a front end's message (0-9-1's basic.publish). */
static int on_send_notify(void *arg, const char *topic, uint32_t part, const uint8_t *msg,
                          size_t len, int acks, const char *user, mqd_pend_notify_fn fn,
                          void *fn_arg, uint64_t tag)
{
    fwd_t *f = arg;
    if (send_here(f, topic, part))
        return MQD_FWD_LOCAL;
    fmsg_t *fm = fmsg_new(topic, part, msg, len, acks, user);
    if (!fm) {
        if (fn)
            fn(fn_arg, tag, PN_REJECTED, "amqp:resource-limit-exceeded", "out of memory");
        return MQD_FWD_TAKEN;
    }
    fm->fn = fn;
    fm->fn_arg = fn_arg;
    fm->fn_tag = tag;
    fmsg_go(f, fm);
    return MQD_FWD_TAKEN;
}

/* Bytes of forwarded messages in flight to the most loaded node (a front end without
 * credit, 0-9-1, stops reading its publishers past the budget). */
static bool on_send_busy(void *arg)
{
    fwd_t *f = arg;
    for (size_t i = 0; i <= FWD_MAX_PEERS; i++)
        if (f->send->bytes[i] > FWD_BUDGET)
            return true;
    return false;
}

/* Held messages: rejected past the bound, else routed again (in order) once due. */
static void held_tick(fwd_t *f, int64_t now_ms, int64_t bound)
{
    fwd_send_t *fs = f->send;
    mqd_dlist_t again;
    mqd_dlist_init(&again);
    while (!mqd_dlist_empty(&fs->held)) {
        fmsg_t *fm = MQD_CONTAINER(fs->held.next, fmsg_t, node);
        mqd_dlist_del(&fm->node);
        if (now_ms - fm->wait_ms >= bound) {
            fs->n_expired++;
            if (mqd_repl_fenced(f->r, fm->topic, fm->part)) { /* what a local send gets */
                finish_reject(f, fm, "amqp:precondition-failed",
                              "this node lost its cluster lease: it may no longer lead "
                              "partition %s/%u (waited %" PRId64 " ms, the cluster lease + "
                              "1 s, for it to be settled); not stored, send it again",
                              fm->topic, fm->part, now_ms - fm->wait_ms);
                continue;
            }
            finish_reject(f, fm, "amqp:resource-limit-exceeded",
                          "partition %s/%u has no reachable leader: waited %" PRId64
                          " ms (the cluster lease + 1 s) for an election; not stored, send "
                          "it again",
                          fm->topic, fm->part, now_ms - fm->wait_ms);
            continue;
        }
        mqd_dlist_push(&again, &fm->node);
    }
    while (!mqd_dlist_empty(&again)) {
        fmsg_t *fm = MQD_CONTAINER(again.next, fmsg_t, node);
        mqd_dlist_del(&fm->node);
        if (now_ms < fm->retry_ms)
            mqd_dlist_push(&fs->held, &fm->node);
        else
            route(f, fm);
    }
}

/* The bound on u's messages: one queued (its connection not up, the leader not answering
 * its attach or giving no credit) or sent and not answered (a leader cut off: the
 * connection looks up until its idle timeout) for the lease + 1 s is rejected, never
 * held for ever; a sent one may have been stored: its client sends it again (its
 * message-id lets the topic's dedup window keep one). */
static void upl_expire(fwd_t *f, upl_t *u, int64_t now_ms, int64_t bound)
{
    fwd_send_t *fs = f->send;
    while (!mqd_dlist_empty(&u->queue)) {
        fmsg_t *fm = MQD_CONTAINER(u->queue.next, fmsg_t, node);
        if (now_ms - fm->wait_ms < bound)
            break;
        fs->n_expired++;
        finish_reject(f, fm, "amqp:resource-limit-exceeded",
                      "partition %s/%u: its leader, node %" PRIu32 ", cannot be reached: waited %" PRId64
                      " ms (the cluster lease + 1 s); not stored, send it again",
                      fm->topic, fm->part, u->node, now_ms - fm->wait_ms);
    }
    for (mqd_dlist_t *n = u->sent.next, *next; n != &u->sent; n = next) {
        next = n->next;
        fmsg_t *fm = MQD_CONTAINER(n, fmsg_t, node);
        if (now_ms - fm->sent_ms < bound)
            continue;
        fs->n_expired++;
        if (fm->up) { /* its outcome, if one ever comes, is not awaited any more */
            pn_delivery_set_context(fm->up, NULL);
            pn_delivery_settle(fm->up);
            fm->up = NULL;
        }
        finish_reject(f, fm, "amqp:resource-limit-exceeded",
                      "partition %s/%u: its leader, node %" PRIu32 ", did not answer within %" PRId64
                      " ms (the cluster lease + 1 s): it may or may not have stored the message; "
                      "send it again (a message-id lets the topic's dedup window keep one)",
                      fm->topic, fm->part, u->node, now_ms - fm->sent_ms);
    }
}

/* Upstream links: a leader that moved or whose node went has its link's sends routed
 * again; messages queued for a connection that is not up wait at most the bound. */
static void upl_tick(fwd_t *f, int64_t now_ms, int64_t bound)
{
    fwd_send_t *fs = f->send;
    for (upl_t *u = fs->upls, *next; u; u = next) {
        next = u->next;
        /* the leader moved, or its node is gone (stopped, cut off): everything of the
         * link goes again by the route (held, bounded, while nobody leads) */
        uint32_t leader = 0;
        mqd_repl_serve_t how = mqd_repl_leader(f->r, u->topic, u->part, &leader);
        uint32_t want = how == MQD_REPL_SERVE_HERE ? f->self
                        : how == MQD_REPL_SERVE_REDIRECT ? leader
                                                          : 0;
        if (want != u->node && want && upl_drain(f, u, want)) {
            upl_expire(f, u, now_ms, bound);
            continue;
        }
        if (want != u->node) {
            MQD_INFO("fwd", "%s/%u: node %" PRIu32 " does not lead it any more (%s): %s",
                     u->topic, u->part, u->node, want ? "moved" : "no leader known",
                     mqd_dlist_empty(&u->sent) && mqd_dlist_empty(&u->queue)
                         ? "link closed"
                         : "its unsettled sends go again");
            upl_reroute(f, u, false);
            upl_free(f, u);
            next = fs->upls; /* routing may have moved (freed) other links too */
            continue;
        }
        u->draining = false; /* its node leads (again) */
        upl_expire(f, u, now_ms, bound);
        if (!u->fl.link && mqd_dlist_empty(&u->queue) && mqd_dlist_empty(&u->sent))
            upl_free(f, u);
    }
}

void fwd_send_tick(fwd_t *f, int64_t now_ms)
{
    int64_t bound = hold_ms(f);
    held_tick(f, now_ms, bound);
    upl_tick(f, now_ms, bound);
}

static void on_metrics(void *arg, struct evbuffer *b)
{
    fwd_send_t *fs = ((fwd_t *)arg)->send;
    evbuffer_add_printf(
        b,
        "# HELP mqd_fwd_sends_total Producer sends forwarded to their partition's leader.\n"
        "# TYPE mqd_fwd_sends_total counter\nmqd_fwd_sends_total %" PRIu64 "\n"
        "# HELP mqd_fwd_sends_inflight Forwarded sends not settled yet.\n"
        "# TYPE mqd_fwd_sends_inflight gauge\nmqd_fwd_sends_inflight %" PRIu64 "\n"
        "# HELP mqd_fwd_sends_resent_total Forwarded sends sent again (leader moved).\n"
        "# TYPE mqd_fwd_sends_resent_total counter\nmqd_fwd_sends_resent_total %" PRIu64 "\n"
        "# HELP mqd_fwd_sends_rejected_total Forwarded sends rejected (by the leader, or "
        "no leader within the lease + 1 s).\n"
        "# TYPE mqd_fwd_sends_rejected_total counter\nmqd_fwd_sends_rejected_total %" PRIu64
        "\n"
        "# HELP mqd_fwd_send_seconds_total Time from a forwarded send's arrival to the "
        "leader's acceptance, summed (divide by mqd_fwd_sends_accepted_total).\n"
        "# TYPE mqd_fwd_send_seconds_total counter\nmqd_fwd_send_seconds_total %.6f\n"
        "# TYPE mqd_fwd_sends_accepted_total counter\nmqd_fwd_sends_accepted_total %" PRIu64
        "\n",
        fs->n_fwd, fs->n_inflight, fs->n_resent, fs->n_rejected, (double)fs->added_ns / 1e9,
        fs->n_done);
    mqd_hist_put(b, "mqd_fwd_send_added_seconds",
                 "Time a forwarded send adds: from its arrival on this node to the leader's "
                 "acceptance (under the topic's acks).",
                 &fs->added);
    fwd_pool_metrics(arg, b);
}

uint64_t fwd_send_node_bytes(fwd_t *f, uint32_t node)
{
    return f->send ? *node_bytes(f, node) : 0;
}

static uint32_t on_nparts(void *arg, const char *topic)
{
    return mqd_repl_nparts(((fwd_t *)arg)->r, topic);
}

int fwd_send_new(fwd_t *f)
{
    fwd_send_t *fs = calloc(1, sizeof *fs);
    if (!fs)
        return MQD_ENOMEM;
    mqd_dlist_init(&fs->held);
    f->send = fs;
    return fwd_on_peer_up(f, on_peer_up, f);
}

/* At the end (the loop stopped): the connections are gone, and with them the clients'
 * deliveries; only memory is left. */
void fwd_send_free(fwd_t *f)
{
    fwd_send_t *fs = f->send;
    if (!fs)
        return;
    while (!mqd_dlist_empty(&fs->held))
        fmsg_free(f, MQD_CONTAINER(fs->held.next, fmsg_t, node));
    while (fs->upls) {
        upl_t *u = fs->upls;
        mqd_dlist_t *lists[2] = {&u->sent, &u->queue};
        for (int i = 0; i < 2; i++)
            while (!mqd_dlist_empty(lists[i])) {
                fmsg_t *fm = MQD_CONTAINER(lists[i]->next, fmsg_t, node);
                fm->up = NULL;
                fmsg_free(f, fm);
            }
        u->fl.link = NULL;
        upl_free(f, u);
    }
    for (size_t i = 0; i < FWD_CL_BUCKETS; i++)
        while (fs->cl[i])
            cl_forget(fs, fs->cl[i]);
    free(fs);
    f->send = NULL;
}

void fwd_send_hooks(fwd_t *f, mqd_fwd_hooks_t *h)
{
    h->send = on_send;
    h->send_notify = on_send_notify;
    h->send_busy = on_send_busy;
    h->link_gone = on_link_gone;
    h->inflight = on_inflight;
    h->metrics = on_metrics;
    h->nparts = on_nparts;
}
