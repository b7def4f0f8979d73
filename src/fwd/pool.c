/* fwd/pool: one pooled node-to-node connection per peer node (mqd_outconn: reconnect
 * with a doubling backoff), with the options a follower uses to reach its leader
 * (mqd_repl_peer_opts: the node's registered address, TLS and node identity,
 * replication_user), container mqd-fwd-<self>, one session and many links. A connection
 * is opened on first use; a connection to this node itself works the same way (a
 * loopback leg of recv.c). Each link on it has an owner (fwd_link_t, the link's context)
 * that gets its events, and that is told when the connection goes. */
#include "config.h"
#include "fwd/fwd_int.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FWD_SESSION_CAPACITY (16u << 20)
#define FWD_RETRY_MS 200
/* as the fetch connections (repl/follower.c): a peer cut off and back (a partition healed)
 * is found again within a fraction of a second, not after TCP's retransmission backoff
 * (seen: 13 s of forwarded sends stuck after a heal, test 166) */
#define FWD_IDLE_MS 1000    /* the AMQP idle timeout: a silent peer's connection goes */
#define FWD_CONNECT_MS 250  /* an unanswered connect is tried again */
#define FWD_BACKOFF_MS 2000 /* refused or failed attempts back off up to this */

void fwd_put_sym(pn_data_t *d, const char *k)
{
    pn_data_put_symbol(d, pn_bytes(strlen(k), k));
}

void fwd_link_bind(fwd_peer_t *p, fwd_link_t *fl, pn_link_t *l)
{
    fl->peer = p;
    fl->link = l;
    pn_link_set_context(l, fl);
    mqd_dlist_push(&p->owners, &fl->node);
}

void fwd_link_unbind(fwd_link_t *fl)
{
    if (!fl->peer)
        return;
    if (fl->link)
        pn_link_set_context(fl->link, NULL);
    mqd_dlist_del(&fl->node);
    fl->peer = NULL;
    fl->link = NULL;
}

void fwd_link_drop(fwd_link_t *fl)
{
    if (!fl->link)
        return;
    pn_link_t *l = fl->link;
    fwd_peer_t *p = fl->peer;
    fwd_link_unbind(fl);
    pn_link_close(l);
    pn_link_free(l);
    fwd_peer_flush(p);
}

pn_session_t *fwd_peer_session(fwd_peer_t *p)
{
    return p ? p->ss : NULL;
}

void fwd_peer_flush(fwd_peer_t *p)
{
    if (p && p->oc)
        mqd_outconn_flush(p->oc);
}

int fwd_on_peer_up(fwd_t *f, fwd_up_fn fn, void *arg)
{
    if (f->n_up == FWD_MAX_UP_CBS)
        return MQD_ENOMEM;
    f->up[f->n_up].fn = fn;
    f->up[f->n_up++].arg = arg;
    return 0;
}

static void peer_opened(fwd_peer_t *p, pn_connection_t *pc)
{
    if (p->ss)
        return;
    p->ss = pn_session(pc);
    pn_session_set_incoming_capacity(p->ss, FWD_SESSION_CAPACITY);
    pn_session_open(p->ss);
    p->ups++;
    MQD_INFO("fwd", "node %" PRIu32 ": forwarding connection up", p->id);
    for (size_t i = 0; i < p->f->n_up; i++)
        p->f->up[i].fn(p, p->f->up[i].arg);
    mqd_outconn_flush(p->oc);
}

/* Every owner is unbound first, then told: an owner may bind again from on_down only
 * once the peer is up again (fwd_on_peer_up). */
static void peer_down(fwd_peer_t *p, const char *why)
{
    mqd_dlist_t gone;
    mqd_dlist_init(&gone);
    bool was_up = p->ss != NULL;
    p->ss = NULL;
    while (!mqd_dlist_empty(&p->owners)) {
        mqd_dlist_t *n = p->owners.next;
        mqd_dlist_del(n);
        mqd_dlist_push(&gone, n);
    }
    while (!mqd_dlist_empty(&gone)) {
        fwd_link_t *fl = MQD_CONTAINER(gone.next, fwd_link_t, node);
        mqd_dlist_del(&fl->node);
        fl->peer = NULL;
        fl->link = NULL; /* gone with the connection */
        fl->on_down(fl, why);
    }
    if (was_up) {
        p->downs++;
        MQD_INFO("fwd", "node %" PRIu32 ": forwarding connection down: %s", p->id, why);
    }
}

static void on_event(mqd_outconn_t *oc, pn_event_t *e, void *arg)
{
    fwd_peer_t *p = arg;
    pn_link_t *l = pn_event_link(e);
    if (pn_event_type(e) == PN_CONNECTION_REMOTE_OPEN)
        return peer_opened(p, pn_event_connection(e));
    if (pn_event_type(e) == PN_CONNECTION_REMOTE_CLOSE) {
        pn_connection_close(pn_event_connection(e));
        return;
    }
    if (!l)
        return;
    fwd_link_t *fl = pn_link_get_context(l);
    if (fl && fl->link == l)
        fl->on_event(fl, e);
}

static void on_down(mqd_outconn_t *oc, const char *why, void *arg)
{
    peer_down(arg, why);
}

static void peer_connect(fwd_peer_t *p)
{
    fwd_t *f = p->f;
    mqd_repl_peer_t peer;
    char container[64];
    snprintf(container, sizeof container, "mqd-fwd-%" PRIu32, f->self);
    if (mqd_repl_peer_opts(f->r, p->id, container, &peer) != 0) {
        p->retry_ms = mqd_now_ms() + FWD_RETRY_MS; /* not alive in this node's view yet */
        return;
    }
    peer.o.idle_timeout_ms = FWD_IDLE_MS;
    peer.o.connect_timeout_ms = FWD_CONNECT_MS;
    peer.o.backoff_max_ms = FWD_BACKOFF_MS;
    mqd_outconn_ops_t ops = {.on_event = on_event, .on_down = on_down};
    if (mqd_outconn_new(f->s, &peer.o, &ops, p, &p->oc) != 0) {
        p->oc = NULL;
        p->retry_ms = mqd_now_ms() + FWD_RETRY_MS;
        MQD_WARN_RL("fwd", "node %" PRIu32 ": cannot open a forwarding connection to %s",
                    p->id, peer.url);
    }
}

fwd_peer_t *fwd_peer_get(fwd_t *f, uint32_t node_id)
{
    for (size_t i = 0; i < f->n_peers; i++)
        if (f->peers[i]->id == node_id)
            return f->peers[i];
    if (f->n_peers == FWD_MAX_PEERS || f->closing)
        return NULL;
    fwd_peer_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->f = f;
    p->id = node_id;
    mqd_dlist_init(&p->owners);
    f->peers[f->n_peers++] = p;
    peer_connect(p);
    return p;
}

void fwd_pool_tick(fwd_t *f, int64_t now_ms)
{
    for (size_t i = 0; i < f->n_peers; i++) {
        fwd_peer_t *p = f->peers[i];
        if (!p->oc && now_ms >= p->retry_ms)
            peer_connect(p);
    }
}

void fwd_pool_free(fwd_t *f)
{
    f->closing = true;
    for (size_t i = 0; i < f->n_peers; i++) {
        fwd_peer_t *p = f->peers[i];
        if (p->oc) {
            peer_down(p, "forwarding stopped");
            mqd_outconn_free_now(p->oc);
        }
        free(p);
    }
    f->n_peers = 0;
}

typedef uint64_t (*peer_fig_fn)(fwd_peer_t *p);

static uint64_t fig_up(fwd_peer_t *p) { return p->ss != NULL; }
static uint64_t fig_ups(fwd_peer_t *p) { return p->ups; }
static uint64_t fig_downs(fwd_peer_t *p) { return p->downs; }
static uint64_t fig_out_bytes(fwd_peer_t *p) { return p->ss ? pn_session_outgoing_bytes(p->ss) : 0; }
static uint64_t fig_in_bytes(fwd_peer_t *p) { return p->ss ? pn_session_incoming_bytes(p->ss) : 0; }
static uint64_t fig_send_bytes(fwd_peer_t *p) { return fwd_send_node_bytes(p->f, p->id); }

static uint64_t fig_links(fwd_peer_t *p)
{
    uint64_t n = 0;
    for (mqd_dlist_t *i = p->owners.next; i != &p->owners; i = i->next)
        n++;
    return n;
}

static uint64_t fig_unsettled(fwd_peer_t *p)
{
    uint64_t n = 0;
    for (mqd_dlist_t *i = p->owners.next; i != &p->owners; i = i->next) {
        fwd_link_t *fl = MQD_CONTAINER(i, fwd_link_t, node);
        n += fl->link ? (uint64_t)pn_link_unsettled(fl->link) : 0;
    }
    return n;
}

void fwd_pool_metrics(fwd_t *f, struct evbuffer *b)
{
    static const struct {
        const char *name, *type, *help;
        peer_fig_fn fig;
    } figs[] = {
        {"mqd_fwd_node_up", "gauge",
         "1 while the pooled forwarding connection to the node is open (the peer answered).",
         fig_up},
        {"mqd_fwd_node_connects_total", "counter",
         "Times the forwarding connection to the node came up.", fig_ups},
        {"mqd_fwd_node_disconnects_total", "counter",
         "Times the forwarding connection to the node went down.", fig_downs},
        {"mqd_fwd_node_links", "gauge",
         "Links on the forwarding connection to the node (forwarded senders and receivers' legs).",
         fig_links},
        {"mqd_fwd_node_unsettled", "gauge",
         "Deliveries on the connection's links not settled yet (both directions).", fig_unsettled},
        {"mqd_fwd_node_outgoing_bytes", "gauge",
         "Bytes waiting in the connection's session to be written to the node.", fig_out_bytes},
        {"mqd_fwd_node_incoming_bytes", "gauge",
         "Bytes received from the node not consumed yet.", fig_in_bytes},
        {"mqd_fwd_node_send_backlog_bytes", "gauge",
         "Bytes of forwarded sends in flight to the node (not settled by the leader yet; each "
         "node's budget is 64 MiB).",
         fig_send_bytes},
    };
    for (size_t k = 0; k < MQD_ARRAY_LEN(figs); k++) {
        evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", figs[k].name, figs[k].help,
                            figs[k].name, figs[k].type);
        for (size_t i = 0; i < f->n_peers; i++)
            evbuffer_add_printf(b, "%s{node=\"%" PRIu32 "\"} %" PRIu64 "\n", figs[k].name,
                                f->peers[i]->id, figs[k].fig(f->peers[i]));
    }
}

/* ---- shared by the receivers (recv.c, ext.c) ---- */

size_t fwd_leader_nodes(fwd_t *f, const char *topic, int64_t part, uint32_t *want,
                        bool *all_known)
{
    uint32_t n = part >= 0 ? 1 : mqd_repl_nparts(f->r, topic);
    size_t n_want = 0;
    *all_known = n > 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t node = 0;
        switch (mqd_repl_leader(f->r, topic, part >= 0 ? (uint32_t)part : i, &node)) {
        case MQD_REPL_SERVE_HERE: node = f->self; break;
        case MQD_REPL_SERVE_REDIRECT: break;
        default: node = 0; break;
        }
        if (!node) {
            *all_known = false;
            continue;
        }
        if (!fwd_nodes_has(want, n_want, node) && n_want < FWD_MAX_PEERS)
            want[n_want++] = node;
    }
    return n_want;
}

bool fwd_nodes_has(const uint32_t *nodes, size_t n, uint32_t node)
{
    for (size_t k = 0; k < n; k++)
        if (nodes[k] == node)
            return true;
    return false;
}

int fwd_acc_read(fwd_acc_t *a, pn_link_t *u, pn_delivery_t *ud)
{
    size_t pending = pn_delivery_pending(ud);
    if (a->len + pending > a->cap) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->len + pending)
            cap *= 2;
        uint8_t *nb = realloc(a->p, cap);
        if (!nb)
            return -1;
        a->p = nb;
        a->cap = cap;
    }
    ssize_t got = pending ? pn_link_recv(u, (char *)a->p + a->len, pending) : 0;
    if (got > 0)
        a->len += (size_t)got;
    if (pn_delivery_partial(ud) && !pn_delivery_aborted(ud))
        return 0;
    pn_link_advance(u);
    return 1;
}
