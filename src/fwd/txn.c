/* fwd/txn: a client's transaction forwarded whole to the one node that leads every
 * partition it touches (issue 33 point 5).
 *
 * The client declares on this node (txn/ gives it a local id L). Its first transactional
 * send to a partition led elsewhere binds L to that leader: a declare goes over the pool
 * connection's coordinator link to the leader (one per peer), which answers with its own
 * id R; L's sends to partitions that node leads go on sender links `T/Partitions/N` (with
 * mqd:fwd-user, so the leader authorizes each as the client's user) with
 * transactional-state(R), and each client delivery is settled with
 * transactional-state(L, the leader's outcome). The client's discharge of L is sent as a
 * discharge of R once every forwarded send is settled, and the leader's outcome settles
 * the client's discharge.
 *
 * A transaction whose partitions turn out to be led by two nodes (two leaders, or a
 * leader and this node) is refused: the send that crossed is rejected with
 * amqp:not-implemented, later sends too, the leader's part is rolled back at once
 * (discharge fail=true) and this node's part at the discharge, which is rejected with
 * amqp:transaction:rollback. A connection to the leader lost (the leader rolls R back
 * when its coordinator link goes) fails the transaction the same way. */
#include "config.h"
#include "fwd/fwd_int.h"
#include "txn/txn.h"

#include <inttypes.h>
#include <proton/condition.h>
#include <proton/disposition.h>
#include <proton/message.h>
#include <proton/terminus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TXN_MAX_SENDS 4096 /* forwarded sends of one transaction not settled yet */

typedef struct ftxn ftxn_t;
typedef struct tlink tlink_t;

enum { FT_NEW, FT_DECLARING, FT_DECLARED, FT_FAILED };

/* A transaction of this node bound to a leader (node 0: only work led here so far). */
struct ftxn {
    ftxn_t *next;
    uint64_t id;   /* this node's */
    uint32_t node; /* the leader it is forwarded to; 0: none yet */
    bool local;    /* sends to partitions led here */
    int state;
    char rid[32]; /* the leader's id */
    size_t rid_len;
    uint32_t pending;        /* forwarded sends not settled */
    pn_delivery_t *up_decl;  /* the declare on the leader */
    pn_delivery_t *up_dis;   /* the discharge on the leader */
    pn_delivery_t *cd;       /* the client's discharge (held) */
    mqd_conn_t *cconn;       /* a reference while cd */
    bool fail;               /* the client's discharge asks for a rollback */
    char why[300];           /* FT_FAILED: why (spans leaders, connection lost) */
    bool spans;
    bool gone; /* txn/ rolled it back: freed once its sends settled */
    bool commit_sent; /* the client's commit went to the leader: its answer decides */
};

/* A forwarded transactional send. */
typedef struct tsend {
    mqd_dlist_t node; /* in its link's queue or sent list */
    ftxn_t *tx;
    pn_delivery_t *d; /* the client's, held; NULL presettled */
    mqd_conn_t *conn;
    pn_delivery_t *up;
    size_t len;
    uint8_t msg[];
} tsend_t;

/* A sender link T/Partitions/N to a leader for transactional sends (kept for later
 * transactions). */
struct tlink {
    fwd_link_t fl;
    tlink_t *next;
    fwd_t *f;
    uint32_t node, part;
    int acks;
    bool opened;
    mqd_dlist_t queue, sent;
    uint64_t tag;
    char *topic, *user;
};

/* The coordinator link to one peer. */
typedef struct tcoord {
    fwd_link_t fl;
    struct tcoord *next;
    fwd_t *f;
    uint32_t node;
    bool opened;
    uint64_t tag;
} tcoord_t;

struct fwd_txn {
    ftxn_t *txns;
    tlink_t *links;
    tcoord_t *coords;
    uint64_t seq, n_fwd, n_spans;
};

static fwd_txn_t *FT(fwd_t *f)
{
    return f->txn;
}

/* ---- transactions ---- */

static ftxn_t *tx_find(fwd_t *f, uint64_t id, bool create)
{
    for (ftxn_t *t = FT(f)->txns; t; t = t->next)
        if (t->id == id)
            return t;
    ftxn_t *t = create ? calloc(1, sizeof *t) : NULL;
    if (t) {
        t->id = id;
        t->next = FT(f)->txns;
        FT(f)->txns = t;
    }
    return t;
}

static void tx_free(fwd_t *f, ftxn_t *t)
{
    for (ftxn_t **h = &FT(f)->txns; *h; h = &(*h)->next)
        if (*h == t) {
            *h = t->next;
            break;
        }
    if (t->up_decl)
        pn_delivery_set_context(t->up_decl, NULL);
    if (t->up_dis)
        pn_delivery_set_context(t->up_dis, NULL);
    if (t->cconn)
        mqd_conn_unref(t->cconn);
    free(t);
}

/* Settles the client's discharge with outcome (cond/desc for a rejection). */
static void client_discharge(ftxn_t *t, bool ok, const char *cond, const char *desc)
{
    if (!t->cd)
        return;
    if (!mqd_conn_closed(t->cconn)) {
        pn_link_t *l = mqd_delivery_unhold(t->cd);
        if (ok) {
            pn_delivery_update(t->cd, PN_ACCEPTED);
            pn_delivery_settle(t->cd);
        } else {
            mqd_delivery_reject(t->cd, cond, desc);
        }
        mqd_link_reap(l);
        mqd_conn_mark_dirty(t->cconn);
    }
    t->cd = NULL;
}

static tcoord_t *coord_get(fwd_t *f, uint32_t node);

/* Sends a coordinator message (declare: no id) on the leader's coordinator link. */
static pn_delivery_t *coord_send(fwd_t *f, ftxn_t *t, bool discharge, bool fail)
{
    tcoord_t *c = coord_get(f, t->node);
    pn_link_t *l = c ? c->fl.link : NULL;
    if (!l || !c->opened || pn_link_credit(l) <= 0)
        return NULL;
    pn_message_t *m = pn_message();
    pn_data_t *b = pn_message_body(m);
    pn_data_put_described(b);
    pn_data_enter(b);
    pn_data_put_ulong(b, discharge ? MQD_TXN_DISCHARGE : MQD_TXN_DECLARE);
    pn_data_put_list(b);
    pn_data_enter(b);
    if (discharge) {
        pn_data_put_binary(b, pn_bytes(t->rid_len, t->rid));
        pn_data_put_bool(b, fail);
    }
    pn_data_exit(b);
    pn_data_exit(b);
    char buf[256];
    size_t n = sizeof buf;
    int rc = pn_message_encode(m, buf, &n);
    pn_message_free(m);
    if (rc != 0)
        return NULL;
    uint64_t tag = ++c->tag;
    pn_delivery_t *ud = pn_delivery(l, pn_dtag((const char *)&tag, sizeof tag));
    pn_delivery_set_context(ud, t);
    pn_link_send(l, buf, n);
    pn_link_advance(l);
    fwd_peer_flush(c->fl.peer);
    return ud;
}

/* Rolls the leader's part back now (nobody waits for the answer). */
static void leader_rollback(fwd_t *f, ftxn_t *t)
{
    if (t->state != FT_DECLARED || t->up_dis)
        return;
    t->up_dis = coord_send(f, t, true, true);
}

static void drop_queued(fwd_t *f, ftxn_t *t);

/* t can no longer commit: the leader's part rolled back, its unsent sends rejected (the
 * caller then runs tx_discharge_go or go_all: t may be freed there). */
static void tx_fail(fwd_t *f, ftxn_t *t, const char *why)
{
    if (t->state == FT_FAILED)
        return;
    leader_rollback(f, t);
    snprintf(t->why, sizeof t->why, "%s", why);
    t->state = FT_FAILED;
    drop_queued(f, t);
}

/* The client's discharge goes to the leader once every forwarded send is settled. */
static void tx_discharge_go(fwd_t *f, ftxn_t *t)
{
    if (!t->cd && t->gone && !t->pending && !t->up_dis)
        return tx_free(f, t);
    if (!t->cd || t->pending || t->up_dis)
        return;
    if (t->state == FT_FAILED) {
        if (t->fail)
            client_discharge(t, true, NULL, NULL);
        else
            client_discharge(t, false, "amqp:transaction:rollback", t->why);
        return tx_free(f, t);
    }
    if (t->state != FT_DECLARED)
        return; /* the declare's answer first */
    t->up_dis = coord_send(f, t, true, t->fail); /* NULL: again at the link's next credit */
    t->commit_sent = t->up_dis && !t->fail;
}

/* ---- transactional sends ---- */

static void send_finish(fwd_t *f, tsend_t *s, uint64_t outcome, const char *cond, const char *desc)
{
    ftxn_t *t = s->tx;
    mqd_dlist_del(&s->node);
    if (s->up)
        pn_delivery_set_context(s->up, NULL);
    if (s->d && !mqd_conn_closed(s->conn)) {
        pn_link_t *l = mqd_delivery_unhold(s->d);
        if (outcome == PN_REJECTED)
            mqd_delivery_reject(s->d, cond, desc);
        else
            mqd_txn_settle(s->d, t->id, outcome);
        mqd_link_reap(l);
        mqd_conn_mark_dirty(s->conn);
    }
    mqd_conn_unref(s->conn);
    free(s);
    t->pending--;
}

static void go_all(fwd_t *f)
{
    for (ftxn_t *t = FT(f)->txns, *next; t; t = next) {
        next = t->next;
        tx_discharge_go(f, t);
    }
}

static void put_txn_state(pn_delivery_t *ud, const ftxn_t *t)
{
    pn_data_t *data = pn_disposition_data(pn_delivery_local(ud));
    pn_data_clear(data);
    pn_data_put_list(data);
    pn_data_enter(data);
    pn_data_put_binary(data, pn_bytes(t->rid_len, t->rid));
    pn_data_exit(data);
    pn_delivery_update(ud, MQD_TXN_STATE);
}

/* Sends what is queued on k whose transaction the leader declared (in order). */
static void link_pump(tlink_t *k)
{
    pn_link_t *l = k->fl.link;
    bool any = false;
    mqd_dlist_t *h = &k->queue;
    for (mqd_dlist_t *n = h->next; l && k->opened && n != h && pn_link_credit(l) > 0;) {
        tsend_t *s = MQD_CONTAINER(n, tsend_t, node);
        n = n->next;
        if (s->tx->state != FT_DECLARED || s->tx->up_dis)
            continue;
        uint64_t tag = ++k->tag;
        pn_delivery_t *ud = pn_delivery(l, pn_dtag((const char *)&tag, sizeof tag));
        pn_delivery_set_context(ud, s);
        put_txn_state(ud, s->tx);
        pn_link_send(l, (const char *)s->msg, s->len);
        pn_link_advance(l);
        s->up = ud;
        mqd_dlist_del(&s->node);
        mqd_dlist_push(&k->sent, &s->node);
        any = true;
    }
    if (any)
        fwd_peer_flush(k->fl.peer);
}

static void drop_queued(fwd_t *f, ftxn_t *t)
{
    for (tlink_t *k = FT(f)->links; k; k = k->next)
        for (mqd_dlist_t *n = k->queue.next; n != &k->queue;) {
            tsend_t *s = MQD_CONTAINER(n, tsend_t, node);
            n = n->next;
            if (s->tx == t)
                send_finish(f, s, PN_REJECTED, t->spans ? "amqp:not-implemented"
                                                        : "amqp:transaction:rollback", t->why);
        }
}

static void pump_all(fwd_t *f)
{
    for (tlink_t *k = FT(f)->links; k; k = k->next)
        link_pump(k);
}

/* Every send of k ends with a rejection, its transaction failed. */
static void link_fail_all(fwd_t *f, tlink_t *k, const char *cond, const char *desc)
{
    mqd_dlist_t *lists[2] = {&k->sent, &k->queue};
    for (int i = 0; i < 2; i++)
        while (!mqd_dlist_empty(lists[i])) {
            tsend_t *s = MQD_CONTAINER(lists[i]->next, tsend_t, node);
            s->up = NULL;
            tx_fail(f, s->tx, desc);
            send_finish(f, s, PN_REJECTED, cond, desc);
        }
    go_all(f);
}

static void link_free(fwd_t *f, tlink_t *k)
{
    for (tlink_t **h = &FT(f)->links; *h; h = &(*h)->next)
        if (*h == k) {
            *h = k->next;
            break;
        }
    fwd_link_drop(&k->fl);
    free(k);
}

static void send_outcome(fwd_t *f, pn_delivery_t *ud)
{
    tsend_t *s = pn_delivery_get_context(ud);
    uint64_t st = pn_delivery_remote_state(ud);
    if (!s || (!st && !pn_delivery_settled(ud)))
        return;
    char cn[128] = "amqp:internal-error", cd[400] = "rejected by the partition's leader";
    uint64_t outcome = st;
    if (st == MQD_TXN_STATE) { /* transactional-state(R, outcome) */
        outcome = mqd_txn_outcome(ud, &(bool){false});
    }
    if (outcome == PN_REJECTED) {
        pn_condition_t *c = pn_disposition_condition(pn_delivery_remote(ud));
        if (pn_condition_get_name(c))
            snprintf(cn, sizeof cn, "%s", pn_condition_get_name(c));
        if (pn_condition_get_description(c))
            snprintf(cd, sizeof cd, "%s", pn_condition_get_description(c));
    }
    pn_delivery_set_context(ud, NULL);
    s->up = NULL;
    pn_delivery_settle(ud);
    if (outcome != PN_ACCEPTED) { /* the transaction cannot commit what the client sent */
        tx_fail(f, s->tx, outcome == PN_REJECTED ? cd : "a transactional send was not accepted "
                                                        "by the partition's leader");
        if (outcome != PN_REJECTED) {
            snprintf(cn, sizeof cn, "amqp:transaction:rollback");
            snprintf(cd, sizeof cd, "%s", s->tx->why);
        }
        send_finish(f, s, PN_REJECTED, cn, cd);
        return go_all(f);
    }
    ftxn_t *t = s->tx;
    send_finish(f, s, PN_ACCEPTED, NULL, NULL);
    tx_discharge_go(f, t);
}

static void link_on_event(fwd_link_t *fl, pn_event_t *e)
{
    tlink_t *k = MQD_CONTAINER(fl, tlink_t, fl);
    pn_link_t *l = pn_event_link(e);
    switch (pn_event_type(e)) {
    case PN_LINK_REMOTE_OPEN:
        k->opened = pn_terminus_get_address(pn_link_remote_target(l)) != NULL;
        link_pump(k);
        break;
    case PN_LINK_FLOW: link_pump(k); break;
    case PN_DELIVERY: send_outcome(k->f, pn_event_delivery(e)); break;
    case PN_LINK_REMOTE_DETACH:
    case PN_LINK_REMOTE_CLOSE: {
        pn_condition_t *c = pn_link_remote_condition(l);
        char cn[128], cd[400];
        snprintf(cn, sizeof cn, "%s", pn_condition_get_name(c) ?: "amqp:transaction:rollback");
        snprintf(cd, sizeof cd, "%s/%" PRIu32 ": node %" PRIu32 " closed the link: %s",
                 k->topic, k->part, k->node,
                 pn_condition_get_description(c) ?: "the transaction was rolled back");
        fwd_t *f = k->f;
        link_fail_all(f, k, cn, cd);
        link_free(f, k);
        break;
    }
    default: break;
    }
}

static void link_on_down(fwd_link_t *fl, const char *why)
{
    tlink_t *k = MQD_CONTAINER(fl, tlink_t, fl);
    fwd_t *f = k->f;
    char cd[400];
    snprintf(cd, sizeof cd, "the connection to node %" PRIu32 ", the leader of %s/%" PRIu32
             ", was lost (%s): the transaction was rolled back", k->node, k->topic, k->part,
             why ? why : "-");
    k->fl.link = NULL; /* gone with the connection */
    link_fail_all(f, k, "amqp:transaction:rollback", cd);
    link_free(f, k);
}

static void link_attach(tlink_t *k)
{
    if (fwd_sender_open(k->f, &k->fl, k->node, "fwd-txn", k->topic, k->part, k->user, k->acks, false,
                        k->fl.link ? 0 : ++FT(k->f)->seq))
        k->opened = false;
}

static tlink_t *link_get(fwd_t *f, uint32_t node, const char *topic, uint32_t part, int acks,
                         const char *user)
{
    for (tlink_t *k = FT(f)->links; k; k = k->next)
        if (k->node == node && k->part == part && k->acks == acks &&
            !strcmp(k->topic, topic) && !strcmp(k->user, user))
            return k;
    size_t tl = strlen(topic) + 1, ul = strlen(user) + 1;
    tlink_t *k = calloc(1, sizeof *k + tl + ul);
    if (!k)
        return NULL;
    k->topic = memcpy((char *)(k + 1), topic, tl);
    k->user = memcpy(k->topic + tl, user, ul);
    k->f = f;
    k->node = node;
    k->part = part;
    k->acks = acks;
    k->fl.on_event = link_on_event;
    k->fl.on_down = link_on_down;
    mqd_dlist_init(&k->queue);
    mqd_dlist_init(&k->sent);
    mqd_dlist_init(&k->fl.node);
    k->next = FT(f)->links;
    FT(f)->links = k;
    link_attach(k);
    return k;
}

/* ---- the coordinator link per peer ---- */

static void declared(fwd_t *f, ftxn_t *t, pn_delivery_t *ud)
{
    uint64_t st = pn_delivery_remote_state(ud);
    bool failed = t->state == FT_FAILED, ok = false;
    t->up_decl = NULL;
    if (st == MQD_TXN_DECLARED) {
        pn_data_t *data = pn_disposition_data(pn_delivery_remote(ud));
        pn_data_rewind(data);
        if (pn_data_next(data) && pn_data_type(data) == PN_LIST) {
            pn_data_enter(data);
            if (pn_data_next(data) && pn_data_type(data) == PN_BINARY) {
                pn_bytes_t b = pn_data_get_binary(data);
                if (b.size <= sizeof t->rid) {
                    memcpy(t->rid, b.start, b.size);
                    t->rid_len = b.size;
                    ok = true;
                }
            }
            pn_data_exit(data);
        }
    }
    if (ok) { /* failed meanwhile (spans leaders): rolled back at once */
        t->state = FT_DECLARED;
        if (failed) {
            leader_rollback(f, t);
            t->state = FT_FAILED;
        }
    } else if (!failed) {
        char why[200];
        snprintf(why, sizeof why, "node %" PRIu32 ", the partitions' leader, refused to "
                 "declare the transaction", t->node);
        tx_fail(f, t, why);
    }
    pump_all(f);
    go_all(f);
}

/* The leader's answer to a discharge: the client's. */
static void discharged(fwd_t *f, ftxn_t *t, pn_delivery_t *ud)
{
    uint64_t st = pn_delivery_remote_state(ud);
    t->up_dis = NULL;
    if (t->state == FT_FAILED) /* its rollback answered: the client's discharge waits */
        return tx_discharge_go(f, t);
    if (t->cd) {
        if (st == PN_ACCEPTED) {
            client_discharge(t, true, NULL, NULL);
        } else {
            pn_condition_t *c = pn_disposition_condition(pn_delivery_remote(ud));
            client_discharge(t, false, pn_condition_get_name(c) ?: "amqp:transaction:rollback",
                             pn_condition_get_description(c) ?: "the leader refused the "
                                                                 "discharge");
        }
        tx_free(f, t);
    }
}

static void coord_on_event(fwd_link_t *fl, pn_event_t *e);
static void coord_on_down(fwd_link_t *fl, const char *why);

static void coord_attach(tcoord_t *c)
{
    fwd_peer_t *p = fwd_peer_get(c->f, c->node);
    pn_session_t *ss = p ? fwd_peer_session(p) : NULL;
    if (!ss || c->fl.link)
        return;
    char name[96];
    snprintf(name, sizeof name, "fwd-txn-coord-%" PRIu32 "-%" PRIu64, c->f->self,
             ++FT(c->f)->seq);
    pn_link_t *l = pn_sender(ss, name);
    pn_terminus_set_type(pn_link_target(l), PN_COORDINATOR);
    pn_terminus_set_address(pn_link_source(l), name);
    pn_link_set_snd_settle_mode(l, PN_SND_UNSETTLED);
    c->opened = false;
    fwd_link_bind(p, &c->fl, l);
    pn_link_open(l);
    fwd_peer_flush(p);
}

static tcoord_t *coord_get(fwd_t *f, uint32_t node)
{
    for (tcoord_t *c = FT(f)->coords; c; c = c->next)
        if (c->node == node) {
            coord_attach(c); /* closed by the leader before: again */
            return c;
        }
    tcoord_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->f = f;
    c->node = node;
    c->fl.on_event = coord_on_event;
    c->fl.on_down = coord_on_down;
    mqd_dlist_init(&c->fl.node);
    c->next = FT(f)->coords;
    FT(f)->coords = c;
    coord_attach(c);
    return c;
}

/* Declares the transactions waiting for node's coordinator. */
static void coord_declare(fwd_t *f, uint32_t node)
{
    for (ftxn_t *t = FT(f)->txns; t; t = t->next)
        if (t->node == node && t->state == FT_NEW && (t->up_decl = coord_send(f, t, false, false)))
            t->state = FT_DECLARING;
}

/* Every transaction bound to node fails: its coordinator link or connection went, and the
 * leader rolled back what the link declared. */
static void coord_lost(fwd_t *f, tcoord_t *c, const char *why)
{
    char desc[300];
    char unknown[300];
    snprintf(desc, sizeof desc, "the coordinator link to node %" PRIu32 ", the partitions' "
             "leader, was lost (%s): the transaction was rolled back", c->node, why);
    snprintf(unknown, sizeof unknown, "the coordinator link to node %" PRIu32 ", the "
             "partitions' leader, was lost (%s) after the discharge was sent: the outcome is "
             "unknown", c->node, why);
    for (ftxn_t *t = FT(f)->txns, *next; t; t = next) {
        next = t->next;
        if (t->node != c->node)
            continue;
        if (t->commit_sent && t->cd) {
            t->up_dis = NULL;
            client_discharge(t, false, "amqp:internal-error", unknown);
            tx_free(f, t);
            continue;
        }
        t->up_decl = t->up_dis = NULL;
        tx_fail(f, t, desc);
    }
    go_all(f);
}

static void coord_on_event(fwd_link_t *fl, pn_event_t *e)
{
    tcoord_t *c = MQD_CONTAINER(fl, tcoord_t, fl);
    fwd_t *f = c->f;
    switch (pn_event_type(e)) {
    case PN_LINK_REMOTE_OPEN:
        c->opened = pn_link_remote_target(pn_event_link(e)) != NULL;
        coord_declare(f, c->node);
        break;
    case PN_LINK_FLOW:
        coord_declare(f, c->node);
        go_all(f); /* discharges that found no credit */
        break;
    case PN_DELIVERY: {
        pn_delivery_t *ud = pn_event_delivery(e);
        ftxn_t *t = pn_delivery_get_context(ud);
        if (!pn_delivery_remote_state(ud) && !pn_delivery_settled(ud))
            break;
        pn_delivery_set_context(ud, NULL);
        pn_delivery_settle(ud);
        if (t && t->up_decl == ud)
            declared(f, t, ud);
        else if (t && t->up_dis == ud)
            discharged(f, t, ud);
        break;
    }
    case PN_LINK_REMOTE_DETACH:
    case PN_LINK_REMOTE_CLOSE: {
        fwd_link_drop(fl);
        coord_lost(f, c, "closed by the leader"); /* attached again at the next use */
        break;
    }
    default: break;
    }
}

static void coord_on_down(fwd_link_t *fl, const char *why)
{
    tcoord_t *c = MQD_CONTAINER(fl, tcoord_t, fl);
    c->fl.link = NULL;
    c->opened = false;
    coord_lost(c->f, c, why ? why : "connection down");
}

static void on_peer_up(fwd_peer_t *p, void *arg)
{
    fwd_t *f = arg;
    for (tcoord_t *c = FT(f)->coords; c; c = c->next)
        if (c->node == p->id)
            coord_attach(c);
    for (tlink_t *k = FT(f)->links; k; k = k->next)
        if (k->node == p->id)
            link_attach(k);
}

/* ---- the hooks ---- */

static void spans(fwd_t *f, ftxn_t *t, uint32_t a, uint32_t b)
{
    char why[300];
    snprintf(why, sizeof why, "transaction spans partitions led by nodes %" PRIu32 " and %" PRIu32
             "; cross-node transactions are not built yet", a < b ? a : b, a < b ? b : a);
    FT(f)->n_spans++;
    t->spans = true; /* before tx_fail: its unsent sends get the same condition */
    tx_fail(f, t, why);
}

static int refuse(pn_delivery_t *d, bool presettled, const char *cond, const char *desc)
{
    if (!presettled)
        mqd_delivery_reject(d, cond, desc);
    return MQD_FWD_TAKEN;
}

int fwd_txn_send(fwd_t *f, mqd_lstate_t *ls, pn_delivery_t *d, const char *topic, uint32_t part,
                 const uint8_t *msg, size_t len, bool presettled, int acks, const char *user)
{
    bool unknown;
    mqd_txn_t *lt = mqd_txn_of_delivery(f->s, d, &unknown);
    uint32_t leader = 0;
    mqd_repl_serve_t how = mqd_repl_leader(f->r, topic, part, &leader);
    if (!lt) /* an id that names no open transaction: the usual path answers */
        return how == MQD_REPL_SERVE_HERE
                   ? MQD_FWD_LOCAL
                   : refuse(d, presettled, mqd_txn_unknown_condition(f->s, d),
                            "no such open transaction");
    ftxn_t *t = tx_find(f, mqd_txn_id(lt), true);
    if (!t)
        return refuse(d, presettled, "amqp:resource-limit-exceeded", "out of memory");
    uint32_t node = how == MQD_REPL_SERVE_HERE ? f->self : leader;
    if (how == MQD_REPL_SERVE_WAIT)
        return refuse(d, presettled, "amqp:resource-limit-exceeded",
                      "no leader known for the partition (an election): send it again");
    if (t->state == FT_FAILED && t->spans)
        return refuse(d, presettled, "amqp:not-implemented", t->why);
    if (node == f->self) {
        if (t->node) {
            spans(f, t, f->self, t->node);
            return refuse(d, presettled, "amqp:not-implemented", t->why);
        }
        t->local = true;
        return MQD_FWD_LOCAL;
    }
    if (t->local || (t->node && t->node != node)) {
        spans(f, t, node, t->node ? t->node : f->self);
        return refuse(d, presettled, "amqp:not-implemented", t->why);
    }
    if (t->state == FT_FAILED)
        return refuse(d, presettled, "amqp:transaction:rollback", t->why);
    if (t->pending >= TXN_MAX_SENDS)
        return refuse(d, presettled, "amqp:resource-limit-exceeded",
                      "too many forwarded sends of the transaction in flight");
    if (!t->node) {
        t->node = node;
        coord_get(f, node);
        coord_declare(f, node);
    }
    tlink_t *k = link_get(f, node, topic, part, acks, user);
    tsend_t *s = k ? malloc(sizeof *s + len) : NULL;
    if (!s)
        return refuse(d, presettled, "amqp:resource-limit-exceeded", "out of memory");
    memset(s, 0, sizeof *s);
    memcpy(s->msg, msg, len);
    s->len = len;
    s->tx = t;
    s->conn = mqd_ls_conn(ls);
    mqd_conn_ref(s->conn);
    s->d = presettled ? NULL : d;
    if (s->d)
        mqd_delivery_hold(d);
    mqd_dlist_init(&s->node);
    mqd_dlist_push(&k->queue, &s->node);
    t->pending++;
    FT(f)->n_fwd++;
    link_pump(k);
    return MQD_FWD_TAKEN;
}

static int on_txn_discharge(void *arg, uint64_t txn, bool fail, bool local_work,
                            pn_delivery_t *d, mqd_conn_t *c)
{
    fwd_t *f = arg;
    ftxn_t *t = tx_find(f, txn, false);
    if (!t)
        return MQD_FWD_LOCAL;
    if (!t->node && !t->spans) { /* only work led here: txn/ as before */
        tx_free(f, t);
        return MQD_FWD_LOCAL;
    }
    if (local_work && !t->spans && t->node)
        spans(f, t, f->self, t->node); /* acknowledged here, sent there */
    t->fail = fail;
    t->cd = d;
    mqd_delivery_hold(d);
    t->cconn = c;
    mqd_conn_ref(c);
    tx_discharge_go(f, t);
    return MQD_FWD_TAKEN;
}

static void on_txn_gone(void *arg, uint64_t txn)
{
    fwd_t *f = arg;
    ftxn_t *t = tx_find(f, txn, false);
    if (!t || t->cd)
        return; /* discharging: that path ends it */
    tx_fail(f, t, "the transaction was rolled back (timeout, or its coordinator link went)");
    t->gone = true;
    tx_discharge_go(f, t); /* freed now, or once its sends settled */
}

int fwd_txn_new(fwd_t *f)
{
    f->txn = calloc(1, sizeof(fwd_txn_t));
    if (!f->txn)
        return MQD_ENOMEM;
    return fwd_on_peer_up(f, on_peer_up, f);
}

void fwd_txn_free(fwd_t *f)
{
    fwd_txn_t *x = f->txn;
    if (!x)
        return;
    while (x->links) {
        tlink_t *k = x->links;
        mqd_dlist_t *lists[2] = {&k->sent, &k->queue};
        for (int i = 0; i < 2; i++)
            while (!mqd_dlist_empty(lists[i])) {
                tsend_t *s = MQD_CONTAINER(lists[i]->next, tsend_t, node);
                mqd_dlist_del(&s->node);
                mqd_conn_unref(s->conn);
                free(s);
            }
        k->fl.link = NULL;
        link_free(f, k);
    }
    while (x->coords) {
        tcoord_t *c = x->coords;
        x->coords = c->next;
        free(c);
    }
    while (x->txns) {
        ftxn_t *t = x->txns;
        t->up_decl = t->up_dis = NULL;
        tx_free(f, t);
    }
    free(x);
    f->txn = NULL;
}

void fwd_txn_hooks(fwd_t *f, mqd_fwd_hooks_t *h)
{
    h->txn_discharge = on_txn_discharge;
    h->txn_gone = on_txn_gone;
}
