/* fwd/recv: receivers served from the partitions' leaders (issue 33, docs/replication.md
 * "Forwarded receivers").
 *
 * A client's receiver whose partitions this node does not all lead (amqp/consumer.c
 * hands it over as an MQD_LS_FWD link) is served through upstream receivers ("legs") on
 * the pooled node connections (pool.c):
 * - one partition (T/ConsumerGroups/G/Partitions/N): one leg to its leader with the
 *   client's source (address, filters, distribution mode, outcomes), its link properties
 *   plus mqd:fwd-user and mqd:fwd-node; the leg's credit follows the client's (drain
 *   too), each delivery's bytes go to the client unchanged (the leader annotated them),
 *   the client's disposition goes back to the leader's delivery, pre-settled stays so;
 * - a source spanning partitions (T, T/ConsumerGroups/G, a browser of T): one leg per
 *   node that leads at least one partition of T, this node included (through the
 *   pool's connection to itself), each with mqd:fwd-local-only = true (the leader serves
 *   it over the partitions it leads now); their deliveries merge into the client link,
 *   the client's credit is split over them (at most the client's credit plus one per leg
 *   outstanding: what arrives beyond the client's credit waits here), dispositions go
 *   back to the leg a delivery came from. Legs follow the leaders (repl's
 *   mqd_repl_on_leader, and the tick): a new leader node gets a leg, a node that leads
 *   nothing of T loses its leg.
 * The client's attach is answered when the first leg is (its source as the leader
 * echoed it, or the leader's refusal), or refused after the lease + 1 s without any. A
 * leg that goes (the connection, a leader change: detach-forced, redirect) is attached
 * again to whoever leads then; the client's link stays. The leader redelivers what was
 * unsettled on the gone leg, as after a consumer's reconnect. */
#include "config.h"
#include "fwd/fwd_int.h"

#include <event2/buffer.h>
#include <inttypes.h>
#include <proton/condition.h>
#include <proton/disposition.h>
#include <proton/terminus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEG_RETRY_MS 200  /* a leg that went is attached again after this */
#define SEEN_MAX 2048     /* the client's last outcomes kept per link (redeliveries) */
#define TXN_STATE 0x34u   /* transactional-state: not forwarded */

typedef struct rlink rlink_t;
typedef struct rleg rleg_t;

/* One delivery from a leg: waiting for the client's credit (bytes held), then out on the
 * client's link until the client settles it (its context). */
typedef struct rdel {
    struct rdel *next, *prev; /* in the leg's list (leg NULL: the leg went) */
    struct rdel *qnext;       /* in the client link's queue while waiting */
    rleg_t *leg;
    pn_delivery_t *ud; /* the leader's delivery, NULL once its link went */
    pn_delivery_t *cd; /* the client's, once sent */
    uint8_t *bytes;
    size_t len;
    char tag[32];
    size_t tag_len;
    bool settled; /* came pre-settled */
    bool dropped; /* waiting, and its leg went: never sent */
    uint64_t t_ns; /* arrival from the leader (mqd_mono_ns) */
    bool is_twin; /* a redelivery of a copy the client still holds: waits for its outcome */
    struct rdel *twin; /* that copy's twin (or, for a twin, the copy) */
} rdel_t;

struct rleg {
    fwd_link_t fl; /* the pool's owner (the upstream link's context) */
    rlink_t *rl;
    rleg_t *next;
    uint32_t node;
    bool opened;  /* the leader answered its attach */
    bool closing; /* closed: gone once unbound */
    bool drain_asked; /* the client's drain was passed on: no more credit until it ends */
    int64_t retry_ms;
    rdel_t dels; /* its deliveries not settled by the client (list head) */
    fwd_acc_t acc; /* a delivery arriving in several frames */
    uint64_t serial;
};

struct rlink {
    fwd_t *f;
    rlink_t *next;
    mqd_lstate_t *ls;
    mqd_conn_t *c;
    pn_link_t *l;
    char *topic;
    char *user;   /* the client's principal, "" anonymous (mqd:fwd-user) */
    int64_t part; /* -1: the source spans partitions (legs to every leader) */
    bool browser; /* distribution mode copy: a position goes out once, whatever the client did */
    bool answered;
    bool draining;
    int64_t deadline_ms; /* the attach is refused when not answered by then */
    rleg_t *legs;
    rdel_t *qhead, *qtail; /* deliveries waiting for the client's credit */
    rdel_t orphans;        /* sent, the client holds them, their leg went (list head) */
    uint64_t *max_sent;    /* per partition: 1 + the highest offset sent on the link */
    uint32_t n_max;
    uint64_t *floor;       /* adopted (recv_adopt): per partition, settled below it */
    uint32_t n_floor;
    struct seen {
        uint32_t part;
        uint64_t off;
        uint64_t outcome;
    } *seen;               /* the client's last SEEN_MAX outcomes (a ring) */
    uint32_t seen_at, seen_n;
    uint64_t dups_settled, dups_rebound; /* redeliveries kept from the client */
    uint32_t n_queued;
    uint64_t serial;
    char why[256]; /* the last leg refusal's description (to refuse the client with) */
    char cond[64];
};

typedef struct fwd_recv {
    rlink_t *links;
    uint64_t serial;
    uint64_t forwarded, relayed, legs_opened, legs_lost, dups_kept;
    mqd_hist_t relay; /* arrival from the leader to the write on the client's link */
    void (*send_metrics)(void *arg, struct evbuffer *b); /* send.c's, chained */
} recv_t;

static recv_t *rs_of(fwd_t *f)
{
    return f->recv;
}

/* ---------------------------------------------------------------- deliveries */

static void del_unlink(rdel_t *d)
{
    if (d->prev) {
        d->prev->next = d->next;
        if (d->next)
            d->next->prev = d->prev;
    }
    d->next = d->prev = NULL;
}

/* A twin whose copy went without an outcome from the client: released to its leader. */
static void twin_drop(rdel_t *t)
{
    if (t->ud) {
        pn_delivery_update(t->ud, PN_RELEASED);
        pn_delivery_settle(t->ud);
    }
    del_unlink(t);
    free(t);
}

static void del_free(rdel_t *d)
{
    del_unlink(d);
    if (d->cd)
        pn_delivery_set_context(d->cd, NULL);
    if (d->twin && d->is_twin)
        d->twin->twin = NULL;
    else if (d->twin)
        twin_drop(d->twin);
    free(d->bytes);
    free(d);
}

static void leg_push(rleg_t *g, rdel_t *d)
{
    d->leg = g;
    d->prev = &g->dels;
    d->next = g->dels.next;
    if (d->next)
        d->next->prev = d;
    g->dels.next = d;
}

/* The leg's link and deliveries are gone: what the client still holds is settled here
 * only (the leader redelivers it); what waits for the client's credit is dropped. */
static void leg_forget(rleg_t *g)
{
    rlink_t *rl = g->rl;
    while (g->dels.next) {
        rdel_t *d = g->dels.next;
        del_unlink(d);
        if (d->is_twin) { /* its link went with it: the copy is settled alone */
            if (d->twin)
                d->twin->twin = NULL;
            free(d);
            continue;
        }
        d->ud = NULL;
        d->leg = NULL;
        d->dropped = !d->cd; /* waiting: dropped from the client's queue below */
        if (d->cd && rl) { /* the client holds it: a redelivery is bound to it again */
            d->prev = &rl->orphans;
            d->next = rl->orphans.next;
            if (d->next)
                d->next->prev = d;
            rl->orphans.next = d;
        }
    }
    if (rl) {
        rdel_t **pp = &rl->qhead;
        rl->qtail = NULL;
        while (*pp) {
            rdel_t *d = *pp;
            if (d->dropped) {
                *pp = d->qnext;
                rl->n_queued--;
                free(d->bytes);
                free(d);
            } else {
                rl->qtail = d;
                pp = &d->qnext;
            }
        }
    }
    g->acc.len = 0;
}

/* ---------------------------------------------------------------- credit */

static bool leg_live(const rleg_t *g)
{
    return g->fl.link && g->opened && !g->closing;
}

static size_t live_legs(const rlink_t *rl)
{
    size_t n = 0;
    for (const rleg_t *g = rl->legs; g; g = g->next)
        n += leg_live(g);
    return n;
}

static void rl_flush(rlink_t *rl)
{
    for (rleg_t *g = rl->legs; g; g = g->next)
        if (g->fl.peer)
            fwd_peer_flush(g->fl.peer);
    mqd_conn_mark_dirty(rl->c);
}

/* The client's drain is answered once no leg has credit left and nothing waits here
 * (a leg still attaching may bring messages: it is waited for; one whose node is down
 * is not). */
static void drain_check(rlink_t *rl)
{
    if (!rl->draining || rl->n_queued || !rl->answered)
        return;
    for (rleg_t *g = rl->legs; g; g = g->next)
        if (g->fl.link && !g->closing && (!g->opened || pn_link_credit(g->fl.link) > 0))
            return;
    for (rleg_t *g = rl->legs; g; g = g->next) {
        if (leg_live(g))
            pn_link_set_drain(g->fl.link, false);
        g->drain_asked = false;
    }
    rl->draining = false;
    pn_link_drained(rl->l);
    mqd_conn_mark_dirty(rl->c);
}

/* Each live leg gets its share of the client's credit (minus what waits here), at least
 * one while there is any: never more outstanding than that plus one per leg. A drain of
 * the client's goes to each leg once, with its share: a leg that drained gets no new
 * credit until every leg did (else they would take turns for ever). */
static void credit(rlink_t *rl)
{
    int want = pn_link_credit(rl->l) - (int)rl->n_queued;
    size_t n = live_legs(rl);
    if (pn_link_get_drain(rl->l) && !rl->draining && want > 0)
        rl->draining = true;
    for (rleg_t *g = rl->legs; n && g; g = g->next) {
        if (!leg_live(g) || g->drain_asked)
            continue;
        int share = want <= 0 ? 0 : (int)((want + (int)n - 1) / (int)n);
        int have = pn_link_credit(g->fl.link);
        if (rl->draining) {
            pn_link_drain(g->fl.link, share > have ? share - have : 0);
            g->drain_asked = true;
        } else if (share > have) {
            pn_link_flow(g->fl.link, share - have);
        }
    }
    rl_flush(rl);
    drain_check(rl);
}

/* A leader's delivery tag: partition (u32) and offset (u64), as amqp/consumer.c makes
 * it; false for another form. */
static bool tag_pos(const rdel_t *d, uint32_t *part, uint64_t *off)
{
    if (d->tag_len != 12)
        return false;
    memcpy(part, d->tag, 4);
    memcpy(off, d->tag + 4, 8);
    return *part < 65536;
}

static void note_pos(rlink_t *rl, uint32_t part, uint64_t off)
{
    if (part >= rl->n_max) {
        uint64_t *nm = realloc(rl->max_sent, (part + 1) * sizeof *nm);
        if (!nm)
            return;
        memset(nm + rl->n_max, 0, (part + 1 - rl->n_max) * sizeof *nm);
        rl->max_sent = nm;
        rl->n_max = part + 1;
    }
    if (off + 1 > rl->max_sent[part])
        rl->max_sent[part] = off + 1;
}

static void note_sent(rlink_t *rl, const rdel_t *d)
{
    uint32_t part;
    uint64_t off;
    if (tag_pos(d, &part, &off))
        note_pos(rl, part, off);
}

/* A redelivery the client settled already: the leader's copy gets its outcome, the
 * client nothing. */
static bool keep_settled(rlink_t *rl, rdel_t *d, pn_delivery_t *ud, uint64_t outcome)
{
    pn_delivery_update(ud, outcome);
    pn_delivery_settle(ud);
    rl->dups_settled++;
    rs_of(rl->f)->dups_kept++;
    free(d->bytes);
    free(d);
    return true;
}

/* The client's outcome of a delivery it settled, kept for a redelivery of it. */
static void note_outcome(rlink_t *rl, const rdel_t *d, uint64_t outcome)
{
    uint32_t part;
    uint64_t off;
    if (!tag_pos(d, &part, &off))
        return;
    if (!rl->seen && !(rl->seen = calloc(SEEN_MAX, sizeof *rl->seen)))
        return;
    rl->seen[rl->seen_at] = (struct seen){part, off, outcome};
    rl->seen_at = (rl->seen_at + 1) % SEEN_MAX;
    if (rl->seen_n < SEEN_MAX)
        rl->seen_n++;
}

/* The copy of d's position (its tag) that the client holds, sent from a leg that is still
 * there, with no twin yet: a leader that took a partition's lead again re-reads its group
 * from the committed offset while its leg stays attached (local-only legs), and another
 * leader redelivers from the floor it was told, so a position can come again while the
 * client has not settled the first copy yet. NULL when there is none. */
static rdel_t *held_copy(rlink_t *rl, const rdel_t *d)
{
    for (rleg_t *g = rl->legs; g; g = g->next)
        for (rdel_t *o = g->dels.next; o; o = o->next)
            if (o->cd && !o->is_twin && !o->twin && o->tag_len == d->tag_len &&
                memcmp(o->tag, d->tag, d->tag_len) == 0)
                return o;
    return NULL;
}

/* A delivery of a position this link sent already (the leader lost with a leg, or a
 * group's committed offset not yet on the new leader, redelivers it): the client's copy
 * is bound to it when the client still holds it, and the client's acceptance (or
 * rejection) is applied to it when it gave one; the client never gets it twice. A
 * released or modified one goes to the client again (a redelivery after a release).
 * True when d was kept from the client (and freed). */
static bool redelivered(rlink_t *rl, rleg_t *g, rdel_t *d, pn_delivery_t *ud)
{
    uint32_t part;
    uint64_t off;
    if (!tag_pos(d, &part, &off) || part >= rl->n_max || off >= rl->max_sent[part])
        return false;
    if (rl->browser) /* a leg attached again browses from its start position again */
        return keep_settled(rl, d, ud, PN_ACCEPTED);
    for (rdel_t *o = rl->orphans.next; o; o = o->next)
        if (o->tag_len == d->tag_len && memcmp(o->tag, d->tag, d->tag_len) == 0) {
            del_unlink(o);
            o->ud = ud;
            leg_push(g, o);
            rl->dups_rebound++;
            rs_of(rl->f)->dups_kept++;
            free(d->bytes);
            free(d);
            return true;
        }
    rdel_t *h = held_copy(rl, d);
    if (h) { /* the client's outcome of its copy settles this one too */
        free(d->bytes);
        d->bytes = NULL;
        d->ud = ud;
        d->is_twin = true;
        d->twin = h;
        h->twin = d;
        leg_push(g, d);
        rl->dups_rebound++;
        rs_of(rl->f)->dups_kept++;
        return true;
    }
    for (uint32_t k = 0; k < rl->seen_n; k++) {
        const struct seen *e = &rl->seen[(rl->seen_at + SEEN_MAX - 1 - k) % SEEN_MAX];
        if (e->part != part || e->off != off)
            continue;
        if (e->outcome != PN_ACCEPTED && e->outcome != PN_REJECTED)
            return false;
        return keep_settled(rl, d, ud, e->outcome);
    }
    /* below the group's committed offset on the node this link was a consumer of before
       its lead moved (recv_adopt): settled there, maybe not logged to the new leader */
    if (part < rl->n_floor && off < rl->floor[part])
        return keep_settled(rl, d, ud, PN_ACCEPTED);
    return false;
}

/* Sends what waits while the client has credit. */
static void pump(rlink_t *rl)
{
    pn_link_t *l = rl->l;
    recv_t *rs = rs_of(rl->f);
    while (rl->qhead && pn_link_credit(l) > 0 &&
           pn_link_state(l) == (PN_LOCAL_ACTIVE | PN_REMOTE_ACTIVE)) {
        rdel_t *d = rl->qhead;
        rl->qhead = d->qnext;
        if (!rl->qhead)
            rl->qtail = NULL;
        rl->n_queued--;
        d->qnext = NULL;
        pn_delivery_t *cd = pn_delivery(l, pn_dtag(d->tag, d->tag_len));
        note_sent(rl, d);
        pn_link_send(l, (const char *)d->bytes, d->len);
        pn_link_advance(l);
        rs->relayed++;
        mqd_hist_observe(&rs->relay, (double)(mqd_mono_ns() - d->t_ns) / 1e9);
        free(d->bytes);
        d->bytes = NULL;
        if (d->settled) {
            pn_delivery_settle(cd);
            del_free(d);
            continue;
        }
        d->cd = cd;
        pn_delivery_set_context(cd, d);
    }
    mqd_conn_mark_dirty(rl->c);
}

/* ---------------------------------------------------------------- legs */

static void put_str(pn_data_t *d, const char *k, const char *v)
{
    fwd_put_sym(d, k);
    pn_data_put_string(d, pn_bytes(strlen(v), v));
}

/* The client's link properties, without any mqd:fwd-* it sent, then ours. */
static void leg_props(rlink_t *rl, pn_link_t *u)
{
    pn_data_t *out = pn_link_properties(u), *in = pn_link_remote_properties(rl->l);
    pn_data_clear(out);
    pn_data_put_map(out);
    pn_data_enter(out);
    if (in) {
        pn_data_rewind(in);
        if (pn_data_next(in) && pn_data_type(in) == PN_MAP) {
            size_t n = pn_data_get_map(in);
            pn_data_enter(in);
            for (size_t i = 0; i + 1 < n && pn_data_next(in); i += 2) {
                bool sym = pn_data_type(in) == PN_SYMBOL;
                pn_bytes_t k = sym ? pn_data_get_symbol(in) : pn_bytes(0, "");
                bool ours = sym && k.size >= 8 && memcmp(k.start, "mqd:fwd-", 8) == 0;
                if (!ours)
                    pn_data_appendn(out, in, 1);
                if (!pn_data_next(in))
                    break;
                if (!ours)
                    pn_data_appendn(out, in, 1);
            }
            pn_data_exit(in);
        }
    }
    put_str(out, "mqd:fwd-user", rl->user);
    fwd_put_sym(out, "mqd:fwd-node");
    pn_data_put_uint(out, rl->f->self);
    if (rl->part < 0) {
        fwd_put_sym(out, "mqd:fwd-local-only");
        pn_data_put_bool(out, true);
    }
    pn_data_exit(out);
}

static void leg_event(fwd_link_t *fl, pn_event_t *e);
static void leg_down(fwd_link_t *fl, const char *why);

/* Attaches leg g on its node's pool connection, when that is up. */
static void leg_attach(rleg_t *g)
{
    rlink_t *rl = g->rl;
    fwd_peer_t *p = fwd_peer_get(rl->f, g->node);
    pn_session_t *ss = p ? fwd_peer_session(p) : NULL;
    if (!ss || g->fl.link || g->closing)
        return;
    char name[200];
    snprintf(name, sizeof name, "fwd-%" PRIu32 "-%" PRIu64 "-%" PRIu64 "-%.120s", rl->f->self,
             rl->serial, g->serial, pn_link_name(rl->l));
    pn_link_t *u = pn_receiver(ss, name);
    pn_terminus_copy(pn_link_source(u), pn_link_remote_source(rl->l));
    pn_terminus_copy(pn_link_target(u), pn_link_remote_target(rl->l));
    pn_link_set_snd_settle_mode(u, pn_link_remote_snd_settle_mode(rl->l));
    pn_link_set_rcv_settle_mode(u, PN_RCV_FIRST);
    leg_props(rl, u);
    g->fl.on_event = leg_event;
    g->fl.on_down = leg_down;
    fwd_link_bind(p, &g->fl, u);
    g->opened = false;
    pn_link_open(u);
    fwd_peer_flush(p);
    MQD_DEBUG("fwd", "receiver %s: leg to node %" PRIu32 " attaching", mqd_ls_name(rl->ls),
              g->node);
}

static rleg_t *leg_add(rlink_t *rl, uint32_t node)
{
    rleg_t *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->rl = rl;
    g->node = node;
    g->serial = ++rs_of(rl->f)->serial;
    g->next = rl->legs;
    rl->legs = g;
    leg_attach(g);
    return g;
}

static void leg_free(rleg_t *g)
{
    leg_forget(g);
    free(g->acc.p);
    free(g);
}

/* Lets the leg's upstream link go: detached and freed once Proton is done with it.
 * Every delivery still unsettled there is released first: pn_link_free settles them, and
 * a delivery settled without an outcome counts as accepted at the leader (a group's
 * offset committed past records the client never got). */
static void leg_let_go(rleg_t *g)
{
    pn_link_t *u = g->fl.link;
    fwd_peer_t *p = g->fl.peer;
    if (!u)
        return;
    fwd_link_unbind(&g->fl);
    for (pn_delivery_t *ud = pn_unsettled_head(u); ud; ud = pn_unsettled_next(ud))
        if (!pn_delivery_local_state(ud))
            pn_delivery_update(ud, PN_RELEASED);
    if (!(pn_link_state(u) & PN_LOCAL_CLOSED))
        pn_link_close(u);
    pn_link_free(u);
    fwd_peer_flush(p);
}

static void leg_close(rleg_t *g)
{
    rlink_t *rl = g->rl;
    for (rleg_t **pp = &rl->legs; *pp; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    leg_let_go(g);
    leg_free(g);
}

/* The leg's link went (detached by the leader, or its connection): attached again soon. */
static void leg_lost(rleg_t *g, const char *why)
{
    recv_t *rs = rs_of(g->rl->f);
    leg_let_go(g); /* when given up here */
    if (g->opened)
        rs->legs_lost++;
    MQD_INFO("fwd", "receiver %s: leg to node %" PRIu32 " lost (%s): attaching again",
             mqd_ls_name(g->rl->ls), g->node, why);
    leg_forget(g);
    g->opened = false;
    g->drain_asked = false;
    g->retry_ms = mqd_now_ms() + LEG_RETRY_MS;
}

/* ---------------------------------------------------------------- the client link */

static void rl_unlist(rlink_t *rl)
{
    recv_t *rs = rs_of(rl->f);
    for (rlink_t **pp = &rs->links; *pp; pp = &(*pp)->next)
        if (*pp == rl) {
            *pp = rl->next;
            return;
        }
}

static void rl_free(rlink_t *rl)
{
    while (rl->legs)
        leg_close(rl->legs);
    while (rl->qhead) {
        rdel_t *d = rl->qhead;
        rl->qhead = d->qnext;
        free(d->bytes);
        free(d);
    }
    while (rl->orphans.next)
        del_free(rl->orphans.next);
    rl_unlist(rl);
    free(rl->max_sent);
    free(rl->floor);
    free(rl->seen);
    free(rl->topic);
    free(rl->user);
    free(rl);
}

/* Detaches (or refuses) the client's link: its state goes (recv_gone frees rl). */
static void rl_detach(rlink_t *rl, const char *cond, const char *desc)
{
    pn_link_t *l = rl->l;
    if (!rl->answered) {
        pn_terminus_set_type(pn_link_source(l), PN_UNSPECIFIED); /* refused: no source */
        pn_link_open(l);
    }
    MQD_INFO("fwd", "receiver %s: %s: %s", mqd_ls_name(rl->ls), cond, desc);
    mqd_ls_detach(rl->ls, cond, desc);
}

/* A leader's refusal or detach that is the client's too (not a leader change). A leg of
 * a source spanning partitions refused with amqp:not-found met a node that leads none of
 * them any more (its leg goes, the others serve). */
static bool fatal(const rlink_t *rl, const char *cond)
{
    static const char *const keep[] = {"amqp:link:detach-forced", "amqp:link:redirect",
                                       "amqp:internal-error", "amqp:resource-limit-exceeded",
                                       "amqp:connection:forced"};
    if (!cond || !*cond)
        return false;
    if (rl->part < 0 && strcmp(cond, "amqp:not-found") == 0)
        return false;
    for (size_t i = 0; i < MQD_ARRAY_LEN(keep); i++)
        if (strcmp(cond, keep[i]) == 0)
            return false;
    return true;
}

/* The node that leads partition p of the topic now (this node: self), 0 when unknown. */
static uint32_t leader_of(rlink_t *rl, uint32_t p)
{
    uint32_t node = 0;
    switch (mqd_repl_leader(rl->f->r, rl->topic, p, &node)) {
    case MQD_REPL_SERVE_HERE: return rl->f->self;
    case MQD_REPL_SERVE_REDIRECT: return node;
    default: return 0;
    }
}

static rleg_t *leg_find(rlink_t *rl, uint32_t node)
{
    for (rleg_t *g = rl->legs; g; g = g->next)
        if (g->node == node)
            return g;
    return NULL;
}

/* Brings the legs in line with who leads now: one per leader node; a leg whose node
 * leads nothing of it is closed (only when every leader is known: an election keeps the
 * legs it has); a leg that went is attached again. */
static void reconcile(rlink_t *rl)
{
    uint32_t want[FWD_MAX_PEERS];
    bool all_known;
    size_t n_want = fwd_leader_nodes(rl->f, rl->topic, rl->part, want, &all_known);
    for (rleg_t *g = rl->legs, *next; g; g = next) {
        next = g->next;
        if (!fwd_nodes_has(want, n_want, g->node) && all_known)
            leg_close(g);
    }
    for (size_t k = 0; k < n_want; k++)
        if (!leg_find(rl, want[k]))
            leg_add(rl, want[k]);
    int64_t now = mqd_now_ms();
    for (rleg_t *g = rl->legs; g; g = g->next)
        if (!g->fl.link && now >= g->retry_ms)
            leg_attach(g);
    credit(rl);
}

/* The first leg the leader opened answers the client's attach with the leader's source
 * (the filters it applied). */
static void answer(rlink_t *rl, pn_link_t *u)
{
    if (rl->answered)
        return;
    pn_link_t *l = rl->l;
    pn_terminus_copy(pn_link_source(l), pn_link_remote_source(u));
    pn_terminus_copy(pn_link_target(l), pn_link_remote_target(l));
    pn_link_set_snd_settle_mode(l, pn_link_remote_snd_settle_mode(u));
    pn_link_set_max_message_size(l, mqd_srv_conf(mqd_conn_srv(rl->c))->max_message_size);
    pn_link_open(l);
    rl->answered = true;
    mqd_conn_mark_dirty(rl->c);
}

/* ---------------------------------------------------------------- leg events */

static void leg_remote_open(rleg_t *g, pn_link_t *u)
{
    rlink_t *rl = g->rl;
    if ((pn_link_state(u) & PN_REMOTE_CLOSED) ||
        (!pn_terminus_get_address(pn_link_remote_source(u)) &&
         pn_terminus_get_type(pn_link_remote_source(u)) != PN_SOURCE))
        return; /* a refusal: its detach follows */
    g->opened = true;
    rs_of(rl->f)->legs_opened++;
    answer(rl, u);
    credit(rl);
}

static void leg_remote_close(rleg_t *g, pn_link_t *u)
{
    rlink_t *rl = g->rl;
    pn_condition_t *c = pn_link_remote_condition(u);
    char cbuf[64] = "", dbuf[256] = "", why[340];
    if (pn_condition_is_set(c)) { /* copied: the link goes below */
        snprintf(cbuf, sizeof cbuf, "%s", pn_condition_get_name(c) ?: "");
        snprintf(dbuf, sizeof dbuf, "%s", pn_condition_get_description(c) ?: "");
    }
    const char *cond = cbuf[0] ? cbuf : NULL, *desc = dbuf[0] ? dbuf : NULL;
    snprintf(why, sizeof why, "%s%s%s", cond ? cond : "detached", desc ? ": " : "",
             desc ? desc : "");
    leg_let_go(g);
    if (fatal(rl, cond) && (!rl->answered || rl->part >= 0 || !live_legs(rl))) {
        leg_forget(g);
        rl_detach(rl, cond, desc ? desc : "refused by the partition's leader");
        return; /* rl is gone */
    }
    if (cond) {
        snprintf(rl->cond, sizeof rl->cond, "%s", cond);
        snprintf(rl->why, sizeof rl->why, "%s", desc ? desc : cond);
    }
    leg_lost(g, why);
    if (fatal(rl, cond)) /* one leg of several refused: the others serve; tried again later */
        g->retry_ms = mqd_now_ms() + 1000;
    credit(rl);
}

/* Takes the leg's current delivery once it arrived whole: 1 when taken (the next one may
 * be whole already), 0 when there is nothing (more) to take now. */
static int leg_take(rleg_t *g)
{
    rlink_t *rl = g->rl;
    pn_link_t *u = g->fl.link;
    pn_delivery_t *ud = u ? pn_link_current(u) : NULL;
    if (!ud || !pn_delivery_readable(ud))
        return 0;
    int got = fwd_acc_read(&g->acc, u, ud);
    if (got < 0) {
        leg_lost(g, "out of memory");
        return 0;
    }
    if (got == 0)
        return 0;
    if (pn_delivery_aborted(ud)) {
        g->acc.len = 0;
        pn_delivery_settle(ud);
        return 1;
    }
    rdel_t *d = calloc(1, sizeof *d);
    uint8_t *bytes = d ? malloc(g->acc.len ? g->acc.len : 1) : NULL;
    if (!bytes) {
        free(d);
        g->acc.len = 0;
        pn_delivery_update(ud, PN_RELEASED);
        pn_delivery_settle(ud);
        return 1;
    }
    memcpy(bytes, g->acc.p, g->acc.len);
    d->bytes = bytes;
    d->len = g->acc.len;
    d->t_ns = mqd_mono_ns();
    g->acc.len = 0;
    pn_delivery_tag_t tag = pn_delivery_tag(ud);
    d->tag_len = tag.size < sizeof d->tag ? tag.size : sizeof d->tag;
    memcpy(d->tag, tag.start, d->tag_len);
    d->settled = pn_delivery_settled(ud);
    if (!d->settled && redelivered(rl, g, d, ud))
        return 1;
    if (d->settled) {
        pn_delivery_settle(ud);
    } else {
        d->ud = ud;
        leg_push(g, d);
    }
    if (rl->qtail)
        rl->qtail->qnext = d;
    else
        rl->qhead = d;
    rl->qtail = d;
    rl->n_queued++;
    return 1;
}

/* Deliveries from the leader: taken in order (an event may stand for several), queued,
 * sent as the client's credit allows. A disposition of the leader for one it sent
 * already needs nothing. */
static void leg_delivery(rleg_t *g)
{
    while (leg_take(g))
        ;
    pump(g->rl);
}


static void leg_event(fwd_link_t *fl, pn_event_t *e)
{
    rleg_t *g = (rleg_t *)fl;
    pn_link_t *u = pn_event_link(e);
    if (!g->rl || g->closing)
        return;
    switch (pn_event_type(e)) {
    case PN_LINK_REMOTE_OPEN: leg_remote_open(g, u); break;
    case PN_LINK_REMOTE_DETACH:
    case PN_LINK_REMOTE_CLOSE: leg_remote_close(g, u); break;
    case PN_LINK_FLOW:
        drain_check(g->rl);
        credit(g->rl);
        break;
    case PN_DELIVERY: leg_delivery(g); break;
    default: break;
    }
}

static void leg_down(fwd_link_t *fl, const char *why)
{
    rleg_t *g = (rleg_t *)fl;
    if (!g->rl)
        return;
    leg_lost(g, why);
    credit(g->rl);
}

/* ---------------------------------------------------------------- client events */

/* The client's outcome for a delivery goes to the leader's (both settled). */
/* The client's outcome of cd applied to d's upstream delivery, settled. */
static void settle_upstream(rdel_t *d, pn_delivery_t *cd, uint64_t state)
{
    pn_disposition_t *rd = pn_delivery_remote(cd), *ld = pn_delivery_local(d->ud);
    if (state == PN_MODIFIED) {
        pn_disposition_set_failed(ld, pn_disposition_is_failed(rd));
        pn_disposition_set_undeliverable(ld, pn_disposition_is_undeliverable(rd));
        pn_data_copy(pn_disposition_annotations(ld), pn_disposition_annotations(rd));
    } else if (state == PN_REJECTED) {
        pn_condition_copy(pn_disposition_condition(ld), pn_disposition_condition(rd));
    }
    if (state)
        pn_delivery_update(d->ud, state);
    pn_delivery_settle(d->ud);
    if (d->leg && d->leg->fl.peer)
        fwd_peer_flush(d->leg->fl.peer);
}

static void client_disposition(rlink_t *rl, pn_delivery_t *cd)
{
    uint64_t state = pn_delivery_remote_state(cd);
    if (!pn_delivery_settled(cd) && state == 0)
        return;
    rdel_t *d = pn_delivery_get_context(cd);
    if (state == TXN_STATE) {
        rl_detach(rl, "amqp:not-implemented",
                  "a transactional acknowledgement of a forwarded receiver (its partition is "
                  "led by another node)");
        return;
    }
    if (d && d->ud)
        settle_upstream(d, cd, state);
    if (d && d->twin) {
        rdel_t *t = d->twin;
        d->twin = NULL;
        if (t->ud)
            settle_upstream(t, cd, state);
        del_unlink(t);
        free(t);
    }
    if (d) {
        note_outcome(rl, d, state ? state : PN_ACCEPTED);
        d->cd = NULL;
        pn_delivery_set_context(cd, NULL);
        del_free(d);
    }
    if (!pn_delivery_settled(cd) && state)
        pn_delivery_update(cd, state);
    pn_delivery_settle(cd);
    mqd_conn_mark_dirty(rl->c);
}

static void on_event(void *arg, mqd_lstate_t *ls, pn_event_t *e)
{
    rlink_t *rl = mqd_ls_fwd(ls);
    if (!rl)
        return;
    switch (pn_event_type(e)) {
    case PN_LINK_FLOW:
        pump(rl);
        credit(rl);
        break;
    case PN_DELIVERY: client_disposition(rl, pn_event_delivery(e)); break;
    default: break;
    }
}

static void on_gone(void *arg, mqd_lstate_t *ls)
{
    rlink_t *rl = mqd_ls_fwd(ls);
    if (!rl)
        return;
    /* the client's deliveries go with its link: forget them (the leader releases its
       own when the legs close) */
    for (pn_delivery_t *cd = pn_unsettled_head(rl->l); cd; cd = pn_unsettled_next(cd)) {
        rdel_t *d = pn_delivery_get_context(cd);
        if (d) {
            d->cd = NULL;
            pn_delivery_set_context(cd, NULL);
            del_free(d);
        }
    }
    mqd_ls_set_fwd(ls, NULL);
    rl_free(rl);
}

/* The forwarding state of client link ls (listed, bound to ls), NULL without memory. */
static rlink_t *rl_new(fwd_t *f, mqd_lstate_t *ls, const char *topic, int64_t part,
                       const char *user)
{
    recv_t *rs = rs_of(f);
    rlink_t *rl = calloc(1, sizeof *rl);
    if (!rl || !(rl->topic = strdup(topic)) || !(rl->user = strdup(user))) {
        if (rl)
            free(rl->topic);
        free(rl);
        return NULL;
    }
    rl->f = f;
    rl->ls = ls;
    rl->c = mqd_ls_conn(ls);
    rl->l = mqd_ls_link(ls);
    rl->part = part;
    rl->browser = pn_terminus_get_distribution_mode(pn_link_remote_source(rl->l)) ==
                  PN_DIST_MODE_COPY;
    rl->serial = ++rs->serial;
    rl->deadline_ms = mqd_now_ms() + mqd_repl_lease_ms(f->r) + 1000;
    rl->next = rs->links;
    rs->links = rl;
    rs->forwarded++;
    mqd_ls_set_fwd(ls, rl);
    return rl;
}

static void on_attach(void *arg, mqd_lstate_t *ls, const char *topic, int64_t part,
                      const char *user)
{
    rlink_t *rl = rl_new(arg, ls, topic, part, user);
    if (!rl) {
        pn_link_t *l = mqd_ls_link(ls);
        pn_link_set_context(l, NULL);
        mqd_lstate_free(ls);
        mqd_link_refuse(l, "amqp:resource-limit-exceeded", "out of memory%s", "");
        return;
    }
    MQD_INFO("fwd", "receiver %s on %s%s: forwarded to the leaders", mqd_ls_name(ls), topic,
             part >= 0 ? " (one partition)" : "");
    reconcile(rl);
}

/* The client's unsettled delivery cd (a local consumer's) as an orphan of rl: the new
 * leader's redelivery of its position is bound to it (redelivered). */
static bool adopt_delivery(rlink_t *rl, pn_delivery_t *cd)
{
    pn_delivery_tag_t t = pn_delivery_tag(cd);
    rdel_t *d = calloc(1, sizeof *d);
    if (!d)
        return false;
    d->tag_len = t.size < sizeof d->tag ? t.size : sizeof d->tag;
    memcpy(d->tag, t.start, d->tag_len);
    d->cd = cd;
    pn_delivery_set_context(cd, d);
    d->prev = &rl->orphans;
    d->next = rl->orphans.next;
    if (d->next)
        d->next->prev = d;
    rl->orphans.next = d;
    note_sent(rl, d);
    return true;
}

/* A local consumer whose lead here stepped down (issue 33 point 3): served from the new
 * leader(s) from now on, the client's link attached all along. */
static void on_adopt(void *arg, mqd_lstate_t *ls, const char *topic, int64_t part,
                     const char *user, const uint64_t *floor, uint32_t n)
{
    rlink_t *rl = rl_new(arg, ls, topic, part, user);
    bool ok = rl && (!n || (rl->floor = malloc(n * sizeof *floor)));
    for (pn_delivery_t *cd = pn_unsettled_head(mqd_ls_link(ls)); ok && cd;
         cd = pn_unsettled_next(cd))
        ok = pn_delivery_settled(cd) || adopt_delivery(rl, cd);
    if (!ok) {
        mqd_ls_detach(ls, "amqp:resource-limit-exceeded",
                      "out of memory while moving the link to the partition's new leader");
        return; /* recv_gone freed rl */
    }
    rl->answered = true;
    rl->n_floor = n;
    for (uint32_t i = 0; i < n; i++) {
        rl->floor[i] = floor[i];
        if (floor[i])
            note_pos(rl, i, floor[i] - 1);
    }
    MQD_NOTICE("fwd", "receiver %s on %s%s: its leader here stepped down: served from the "
               "new leader, the link stays attached", mqd_ls_name(ls), topic,
               part >= 0 ? " (one partition)" : "");
    reconcile(rl);
}

/* ---------------------------------------------------------------- repl and the tick */

static void on_leader(void *arg, const char *topic, uint32_t part, uint32_t leader)
{
    fwd_t *f = arg;
    for (rlink_t *rl = rs_of(f)->links, *next; rl; rl = next) {
        next = rl->next;
        if (strcmp(rl->topic, topic) != 0 || (rl->part >= 0 && (uint32_t)rl->part != part))
            continue;
        if (rl->part >= 0) { /* a single leg moves to the new leader at once */
            uint32_t now = leader_of(rl, part);
            for (rleg_t *g = rl->legs, *gn; g; g = gn) {
                gn = g->next;
                if (now && g->node != now)
                    leg_close(g);
            }
        }
        reconcile(rl);
    }
}

static void on_peer_up(fwd_peer_t *p, void *arg)
{
    fwd_t *f = arg;
    for (rlink_t *rl = rs_of(f)->links; rl; rl = rl->next)
        for (rleg_t *g = rl->legs; g; g = g->next)
            if (g->node == p->id && !g->fl.link)
                g->retry_ms = 0;
    fwd_recv_tick(f, mqd_now_ms());
}

void fwd_recv_tick(fwd_t *f, int64_t now_ms)
{
    recv_t *rs = rs_of(f);
    if (!rs)
        return;
    for (rlink_t *rl = rs->links, *next; rl; rl = next) {
        next = rl->next;
        if (!rl->answered && now_ms >= rl->deadline_ms) {
            char desc[700];
            snprintf(desc, sizeof desc,
                     "the leader of '%.200s' could not be reached within the lease + 1 s%s%.150s",
                     rl->topic, rl->why[0] ? ": " : "", rl->why);
            rl_detach(rl, "amqp:resource-limit-exceeded", desc);
            continue;
        }
        reconcile(rl);
    }
}

int fwd_recv_new(fwd_t *f)
{
    recv_t *rs = calloc(1, sizeof *rs);
    if (!rs)
        return MQD_ENOMEM;
    f->recv = rs;
    mqd_repl_on_leader(f->r, on_leader, f);
    return fwd_on_peer_up(f, on_peer_up, f);
}

void fwd_recv_free(fwd_t *f)
{
    recv_t *rs = rs_of(f);
    if (!rs)
        return;
    mqd_repl_on_leader(f->r, NULL, NULL);
    while (rs->links) {
        rlink_t *rl = rs->links;
        mqd_ls_set_fwd(rl->ls, NULL);
        rl_free(rl);
    }
    free(rs);
    f->recv = NULL;
}

/* /metrics: send.c's counters, then the forwarded receivers'. */
static void on_metrics(void *arg, struct evbuffer *b)
{
    fwd_t *f = arg;
    recv_t *rs = rs_of(f);
    uint64_t links = 0, legs = 0;
    if (rs->send_metrics)
        rs->send_metrics(arg, b);
    for (const rlink_t *rl = rs->links; rl; rl = rl->next) {
        links++;
        legs += live_legs(rl);
    }
    evbuffer_add_printf(
        b,
        "# HELP mqd_fwd_receivers Client receivers served through the partitions' leaders.\n"
        "# TYPE mqd_fwd_receivers gauge\nmqd_fwd_receivers %" PRIu64 "\n"
        "# HELP mqd_fwd_receivers_total Client receivers forwarded since start.\n"
        "# TYPE mqd_fwd_receivers_total counter\nmqd_fwd_receivers_total %" PRIu64 "\n"
        "# HELP mqd_fwd_recv_legs Upstream receivers (legs) attached to leaders now.\n"
        "# TYPE mqd_fwd_recv_legs gauge\nmqd_fwd_recv_legs %" PRIu64 "\n"
        "# HELP mqd_fwd_recv_legs_lost_total Legs lost (connection, leader change).\n"
        "# TYPE mqd_fwd_recv_legs_lost_total counter\nmqd_fwd_recv_legs_lost_total %" PRIu64 "\n"
        "# HELP mqd_fwd_recv_deliveries_total Deliveries relayed from leaders to clients.\n"
        "# TYPE mqd_fwd_recv_deliveries_total counter\nmqd_fwd_recv_deliveries_total %" PRIu64
        "\n"
        "# HELP mqd_fwd_recv_redeliveries_kept_total Redeliveries after a failover of a "
        "position the client had, not sent to it again.\n"
        "# TYPE mqd_fwd_recv_redeliveries_kept_total counter\n"
        "mqd_fwd_recv_redeliveries_kept_total %" PRIu64 "\n",
        links, rs->forwarded, legs, rs->legs_lost, rs->relayed, rs->dups_kept);
    mqd_hist_put(b, "mqd_fwd_recv_relay_seconds",
                 "Time a forwarded delivery spends on this node: from its arrival from the "
                 "leader to its write on the client's link (waiting for the client's credit "
                 "included).",
                 &rs->relay);
}

void fwd_recv_hooks(fwd_t *f, mqd_fwd_hooks_t *h)
{
    rs_of(f)->send_metrics = h->metrics;
    h->metrics = on_metrics;
    h->recv_attach = on_attach;
    h->recv_event = on_event;
    h->recv_gone = on_gone;
    h->recv_adopt = on_adopt;
}
