/* fwd/ext: a front end's consumers of a queue through the partitions' leaders (0-9-1's
 * basic.consume and basic.get on a node that does not lead every partition of the queue).
 *
 * A front end with no AMQP 1.0 link of its own (src/amqp091) consumes topic T's `$shared`
 * group here: one leg per node that leads at least one partition of T, this node
 * included (the pool's connection to itself), each an upstream receiver on `T` with
 * mqd:fwd-local-only = true and mqd:fwd-user = the front end's user (so each leader
 * authorizes the read as that user, and serves it over the partitions it leads now).
 * Each leg keeps at most EXT_WINDOW messages ready here (its credit is what is left of
 * it); the front end takes ready messages (ext_next), in the order they came, and settles
 * each later by its id (ack: accepted, nack/reject with requeue: modified with
 * delivery-failed, without: rejected), which is applied to the leader's delivery. Legs
 * follow the leaders at every tick (a new leader node gets a leg, a node that leads
 * nothing of T loses its own); a leg whose connection or link goes drops what it had
 * ready, and what the front end still holds of it cannot be settled any more: the
 * leader's group redelivers it, as after a consumer's reconnect. */
#include "config.h"
#include "fwd/fwd_int.h"

#include <inttypes.h>
#include <proton/disposition.h>
#include <proton/terminus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXT_WINDOW 32     /* ready messages per leg at most */
#define EXT_RETRY_MS 500  /* a leg that went is attached again after this */

typedef struct xcons xcons_t;
typedef struct xleg xleg_t;

/* One message of a leg: ready (in the consumer's queue), then taken by the front end
 * until settled. */
typedef struct xmsg {
    struct xmsg *next;
    xleg_t *leg;       /* NULL once its leg went */
    pn_delivery_t *ud; /* the leader's, NULL once its link went */
    uint64_t id;
    size_t len;
    uint8_t bytes[];
} xmsg_t;

struct xleg {
    fwd_link_t fl;
    xleg_t *next;
    xcons_t *x;
    uint32_t node;
    bool opened, closing;
    uint32_t ready; /* its messages in the ready queue */
    int64_t retry_ms;
    fwd_acc_t acc;
};

struct xcons {
    xcons_t *next;
    fwd_t *f;
    char *topic, *user;
    xleg_t *legs;
    xmsg_t *qhead, *qtail; /* ready */
    xmsg_t *taken;         /* taken by the front end, not settled */
    size_t n_taken;
    uint64_t next_id, serial;
    bool closing; /* the front end closed it: freed once nothing taken is left */
    void (*wake)(void *arg);
    void *wake_arg;
};

static xcons_t *all; /* every consumer of this process's fwd (one fwd per process) */
static uint64_t serials;

/* ---- legs ---- */

static void xleg_event(fwd_link_t *fl, pn_event_t *e);
static void xleg_down(fwd_link_t *fl, const char *why);

static void xleg_credit(xleg_t *g)
{
    pn_link_t *u = g->fl.link;
    if (!u || !g->opened || g->x->closing)
        return;
    int want = EXT_WINDOW - (int)g->ready - pn_link_credit(u);
    if (want > 0) {
        pn_link_flow(u, want);
        fwd_peer_flush(g->fl.peer);
    }
}

static void xleg_attach(xleg_t *g)
{
    xcons_t *x = g->x;
    fwd_peer_t *p = fwd_peer_get(x->f, g->node);
    pn_session_t *ss = p ? fwd_peer_session(p) : NULL;
    if (!ss || g->fl.link || g->closing)
        return;
    char name[200];
    snprintf(name, sizeof name, "fwd-ext-%" PRIu32 "-%" PRIu64 "-%.120s", x->f->self, x->serial,
             x->topic);
    pn_link_t *u = pn_receiver(ss, name);
    pn_terminus_set_address(pn_link_source(u), x->topic);
    pn_terminus_set_address(pn_link_target(u), name);
    pn_link_set_snd_settle_mode(u, PN_SND_UNSETTLED);
    pn_link_set_rcv_settle_mode(u, PN_RCV_FIRST);
    pn_data_t *d = pn_link_properties(u);
    pn_data_put_map(d);
    pn_data_enter(d);
    fwd_put_sym(d, "mqd:fwd-user");
    pn_data_put_string(d, pn_bytes(strlen(x->user), x->user));
    fwd_put_sym(d, "mqd:fwd-node");
    pn_data_put_uint(d, x->f->self);
    fwd_put_sym(d, "mqd:fwd-local-only");
    pn_data_put_bool(d, true);
    pn_data_exit(d);
    g->fl.on_event = xleg_event;
    g->fl.on_down = xleg_down;
    g->opened = false;
    fwd_link_bind(p, &g->fl, u);
    pn_link_open(u);
    fwd_peer_flush(p);
}

/* The leg's link went (or goes): its ready messages are dropped, the taken ones lose
 * their leader's delivery (the leader redelivers them). */
static void xleg_forget(xleg_t *g)
{
    xcons_t *x = g->x;
    for (xmsg_t **pp = &x->qhead; *pp;) {
        xmsg_t *m = *pp;
        if (m->leg == g) {
            *pp = m->next;
            free(m);
        } else {
            pp = &m->next;
        }
    }
    x->qtail = NULL;
    for (xmsg_t *m = x->qhead; m; m = m->next)
        x->qtail = m;
    for (xmsg_t *m = x->taken; m; m = m->next)
        if (m->leg == g) {
            m->leg = NULL;
            m->ud = NULL;
        }
    g->ready = 0;
    g->acc.len = 0;
    g->opened = false;
}

/* Closes and unbinds the leg's link (it stays in the list when !drop, to be attached
 * again later). */
static void xleg_let_go(xleg_t *g)
{
    xleg_forget(g);
    if (g->fl.link) {
        pn_link_t *u = g->fl.link;
        fwd_peer_t *p = g->fl.peer;
        fwd_link_unbind(&g->fl);
        pn_link_close(u);
        pn_link_free(u);
        fwd_peer_flush(p);
    }
    g->retry_ms = mqd_now_ms() + EXT_RETRY_MS;
}

static void xleg_free(xleg_t *g)
{
    xcons_t *x = g->x;
    xleg_let_go(g);
    for (xleg_t **pp = &x->legs; *pp; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    free(g->acc.p);
    free(g);
}

/* One whole delivery off the leg into the ready queue: true when one was taken. */
static bool xleg_take(xleg_t *g)
{
    pn_link_t *u = g->fl.link;
    pn_delivery_t *ud = u ? pn_link_current(u) : NULL;
    if (!ud || !pn_delivery_readable(ud))
        return false;
    int got = fwd_acc_read(&g->acc, u, ud);
    if (got <= 0)
        return false; /* more to come (or no memory: it waits for the next frame) */
    xcons_t *x = g->x;
    xmsg_t *m = pn_delivery_aborted(ud) || x->closing ? NULL : malloc(sizeof *m + g->acc.len);
    if (!m) { /* aborted, out of memory, or nobody takes it any more: the group keeps it */
        pn_delivery_update(ud, PN_RELEASED);
        pn_delivery_settle(ud);
        g->acc.len = 0;
        return true;
    }
    memcpy(m->bytes, g->acc.p, g->acc.len);
    m->len = g->acc.len;
    g->acc.len = 0;
    m->next = NULL;
    m->leg = g;
    m->id = ++x->next_id;
    m->ud = pn_delivery_settled(ud) ? (pn_delivery_settle(ud), NULL) : ud;
    if (x->qtail)
        x->qtail->next = m;
    else
        x->qhead = m;
    x->qtail = m;
    g->ready++;
    return true;
}

static void xleg_event(fwd_link_t *fl, pn_event_t *e)
{
    xleg_t *g = (xleg_t *)fl;
    xcons_t *x = g->x;
    pn_link_t *u = pn_event_link(e);
    switch (pn_event_type(e)) {
    case PN_LINK_REMOTE_OPEN:
        g->opened = pn_terminus_get_address(pn_link_remote_source(u)) != NULL;
        xleg_credit(g);
        break;
    case PN_LINK_FLOW: xleg_credit(g); break;
    case PN_DELIVERY: {
        bool any = false;
        while (xleg_take(g))
            any = true;
        if (any && x->wake)
            x->wake(x->wake_arg);
        break;
    }
    case PN_LINK_REMOTE_DETACH:
    case PN_LINK_REMOTE_CLOSE: {
        pn_condition_t *c = pn_link_remote_condition(u);
        MQD_INFO("fwd", "0-9-1 consumer of %s: node %" PRIu32 " closed its leg: %s: %s",
                 x->topic, g->node, pn_condition_get_name(c) ?: "-",
                 pn_condition_get_description(c) ?: "-");
        xleg_let_go(g); /* attached again at a tick while the node leads a partition */
        break;
    }
    default: break;
    }
}

static void xleg_down(fwd_link_t *fl, const char *why)
{
    xleg_t *g = (xleg_t *)fl;
    MQD_INFO("fwd", "0-9-1 consumer of %s: leg to node %" PRIu32 " down: %s", g->x->topic,
             g->node, why ? why : "-");
    xleg_forget(g);
    g->retry_ms = mqd_now_ms() + EXT_RETRY_MS;
}

/* One leg per node that leads a partition of the topic now; a leg whose node leads
 * nothing of it goes (only when every leader is known); a leg that went is attached
 * again. */
static void xcons_reconcile(xcons_t *x, int64_t now)
{
    uint32_t want[FWD_MAX_PEERS];
    bool all_known;
    size_t n_want = fwd_leader_nodes(x->f, x->topic, -1, want, &all_known);
    for (xleg_t *g = x->legs, *next; g; g = next) {
        next = g->next;
        if (!fwd_nodes_has(want, n_want, g->node) && all_known)
            xleg_free(g);
    }
    for (size_t k = 0; k < n_want; k++) {
        bool have = false;
        for (xleg_t *g = x->legs; g; g = g->next)
            have |= g->node == want[k];
        xleg_t *g = have ? NULL : calloc(1, sizeof *g);
        if (g) {
            g->x = x;
            g->node = want[k];
            mqd_dlist_init(&g->fl.node);
            g->next = x->legs;
            x->legs = g;
        }
    }
    for (xleg_t *g = x->legs; g; g = g->next) {
        if (!g->fl.link && now >= g->retry_ms)
            xleg_attach(g);
        xleg_credit(g);
    }
}

/* ---- the front end's side (core.h's ext_* hooks) ---- */

static void xcons_free(xcons_t *x)
{
    while (x->legs)
        xleg_free(x->legs);
    while (x->taken) {
        xmsg_t *m = x->taken;
        x->taken = m->next;
        free(m);
    }
    for (xcons_t **pp = &all; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            break;
        }
    free(x->topic);
    free(x->user);
    free(x);
}

static bool on_ext_wanted(void *arg, const char *topic)
{
    fwd_t *f = arg;
    uint32_t n = mqd_repl_nparts(f->r, topic);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t node = 0;
        if (mqd_repl_leader(f->r, topic, i, &node) != MQD_REPL_SERVE_HERE)
            return true;
    }
    return false;
}

static void *on_ext_open(void *arg, const char *topic, const char *user, void (*wake)(void *),
                         void *wake_arg)
{
    fwd_t *f = arg;
    xcons_t *x = calloc(1, sizeof *x);
    if (!x || !(x->topic = strdup(topic)) || !(x->user = strdup(user))) {
        if (x)
            free(x->topic);
        free(x);
        return NULL;
    }
    x->f = f;
    x->serial = ++serials;
    x->wake = wake;
    x->wake_arg = wake_arg;
    x->next = all;
    all = x;
    MQD_INFO("fwd", "0-9-1 consumer of %s (user %s): read through the partitions' leaders",
             topic, user);
    xcons_reconcile(x, mqd_now_ms());
    return x;
}

static bool on_ext_next(void *arg, void *h, uint64_t *id, const uint8_t **p, size_t *len)
{
    MQD_UNUSED(arg);
    xcons_t *x = h;
    xmsg_t *m = x->qhead;
    if (!m || x->closing)
        return false;
    x->qhead = m->next;
    if (!x->qhead)
        x->qtail = NULL;
    m->next = x->taken;
    x->taken = m;
    x->n_taken++;
    if (m->leg) {
        m->leg->ready--;
        xleg_credit(m->leg);
    }
    *id = m->id;
    *p = m->bytes;
    *len = m->len;
    return true;
}

static void on_ext_settle(void *arg, void *h, uint64_t id, uint64_t outcome)
{
    MQD_UNUSED(arg);
    xcons_t *x = h;
    for (xmsg_t **pp = &x->taken; *pp; pp = &(*pp)->next) {
        xmsg_t *m = *pp;
        if (m->id != id)
            continue;
        *pp = m->next;
        x->n_taken--;
        if (m->ud) {
            if (outcome == PN_MODIFIED)
                pn_disposition_set_failed(pn_delivery_local(m->ud), true);
            pn_delivery_update(m->ud, outcome);
            pn_delivery_settle(m->ud);
            if (m->leg && m->leg->fl.peer)
                fwd_peer_flush(m->leg->fl.peer);
        }
        free(m);
        break;
    }
    if (x->closing && !x->n_taken)
        xcons_free(x);
}

static void on_ext_close(void *arg, void *h)
{
    MQD_UNUSED(arg);
    xcons_t *x = h;
    x->closing = true;
    x->wake = NULL;
    while (x->qhead) { /* ready, never taken: the leaders' groups keep them */
        xmsg_t *m = x->qhead;
        x->qhead = m->next;
        if (m->ud) {
            pn_delivery_update(m->ud, PN_RELEASED);
            pn_delivery_settle(m->ud);
        }
        free(m);
    }
    x->qtail = NULL;
    for (xleg_t *g = x->legs; g; g = g->next)
        g->ready = 0;
    if (!x->n_taken)
        xcons_free(x);
}

void fwd_ext_tick(fwd_t *f, int64_t now_ms)
{
    for (xcons_t *x = all; x; x = x->next)
        if (x->f == f && !x->closing)
            xcons_reconcile(x, now_ms);
}

static void on_peer_up(fwd_peer_t *p, void *arg)
{
    fwd_t *f = arg;
    for (xcons_t *x = all; x; x = x->next)
        for (xleg_t *g = x->legs; g; g = g->next)
            if (x->f == f && g->node == p->id && !g->fl.link)
                g->retry_ms = 0;
}

int fwd_ext_new(fwd_t *f)
{
    return fwd_on_peer_up(f, on_peer_up, f);
}

/* At the end (the loop stopped): the front end's connections are gone first. */
void fwd_ext_free(fwd_t *f)
{
    for (xcons_t *x = all, *next; x; x = next) {
        next = x->next;
        if (x->f == f)
            xcons_free(x);
    }
}

void fwd_ext_hooks(fwd_t *f, mqd_fwd_hooks_t *h)
{
    MQD_UNUSED(f);
    h->ext_wanted = on_ext_wanted;
    h->ext_open = on_ext_open;
    h->ext_next = on_ext_next;
    h->ext_settle = on_ext_settle;
    h->ext_close = on_ext_close;
}
