/* fwd internals: the pool of node-to-node connections (pool.c), forwarded sends
 * (send.c), proxied receivers (recv.c). */
#ifndef MQD_FWD_INT_H
#define MQD_FWD_INT_H

#include "fwd/fwd.h"
#include "amqp/amqp.h"

#include <proton/connection.h>
#include <proton/delivery.h>
#include <proton/event.h>
#include <proton/link.h>
#include <proton/session.h>

#define FWD_TICK_MS 100
#define FWD_MAX_PEERS 64
#define FWD_MAX_UP_CBS 4

typedef struct mqd_fwd fwd_t;
typedef struct fwd_peer fwd_peer_t;
typedef struct fwd_send fwd_send_t; /* send.c */
typedef struct fwd_recv fwd_recv_t; /* recv.c */
typedef struct fwd_txn fwd_txn_t;   /* txn.c */

/* The owner of one link on a pool connection (an upstream sender of send.c, a leg of
 * recv.c): the pn_link_t's context while bound. The pool hands it every PN_LINK_* and
 * PN_DELIVERY event of its link and, when the connection goes, on_down (the link and
 * its deliveries are gone then: forget them; the owner is unbound). */
typedef struct fwd_link {
    void (*on_event)(struct fwd_link *fl, pn_event_t *e);
    void (*on_down)(struct fwd_link *fl, const char *why);
    fwd_peer_t *peer;  /* while bound */
    pn_link_t *link;   /* while bound */
    mqd_dlist_t node;  /* in the peer's owners */
} fwd_link_t;

/* One pooled connection to a node (container mqd-fwd-<self>, one session, many links). */
struct fwd_peer {
    fwd_t *f;
    uint32_t id;
    mqd_outconn_t *oc;     /* NULL: not connected yet (the node's address not known) */
    pn_session_t *ss;      /* NULL while down (not opened by the peer yet) */
    mqd_dlist_t owners;    /* fwd_link_t bound to links of this connection */
    int64_t retry_ms;      /* next try of mqd_outconn_new when oc is NULL */
    uint64_t ups, downs;
};

typedef void (*fwd_up_fn)(fwd_peer_t *p, void *arg);

struct mqd_fwd {
    mqd_server_t *s;
    const mqd_conf_t *conf;
    mqd_repl_t *r;
    uint32_t self;
    fwd_peer_t *peers[FWD_MAX_PEERS];
    size_t n_peers;
    struct {
        fwd_up_fn fn;
        void *arg;
    } up[FWD_MAX_UP_CBS];
    size_t n_up;
    struct event *ev_tick;
    bool closing;
    fwd_send_t *send; /* send.c */
    fwd_recv_t *recv; /* recv.c */
    fwd_txn_t *txn;   /* txn.c */
};

/* ---- pool.c ---- */
/* The connection to node_id, created (and started) on first use; NULL only without
 * memory or past FWD_MAX_PEERS. */
fwd_peer_t *fwd_peer_get(fwd_t *f, uint32_t node_id);
/* The pool connection's session, NULL while down. */
pn_session_t *fwd_peer_session(fwd_peer_t *p);
/* Output and events of the connection run soon (after making links or sending outside
 * one of its own events). */
void fwd_peer_flush(fwd_peer_t *p);
/* Binds owner fl to link l of p's connection (l's context = fl). */
void fwd_link_bind(fwd_peer_t *p, fwd_link_t *fl, pn_link_t *l);
/* Unbinds fl (its link's context cleared; the link itself is the caller's to close). */
void fwd_link_unbind(fwd_link_t *fl);
/* Unbinds fl and closes and frees its link (nothing when unbound). */
void fwd_link_drop(fwd_link_t *fl);
/* fn(p, arg) runs whenever a peer's connection was opened by the peer (a new session:
 * owners attach their links again). */
int fwd_on_peer_up(fwd_t *f, fwd_up_fn fn, void *arg);
void fwd_pool_tick(fwd_t *f, int64_t now_ms);
void fwd_pool_free(fwd_t *f);
/* /metrics: per peer node, its connection (up, connects, drops), links, unsettled
 * deliveries, bytes waiting in the session, and forwarded-send bytes in flight. */
struct evbuffer;
void fwd_pool_metrics(fwd_t *f, struct evbuffer *b);
/* Puts a symbol-keyed entry into the map d is inside. */
void fwd_put_sym(pn_data_t *d, const char *k);

/* The distinct nodes that lead partition `part` (-1: every partition) of topic now (this
 * node: f->self) into want[FWD_MAX_PEERS]; *all_known: every partition's leader known. */
size_t fwd_leader_nodes(fwd_t *f, const char *topic, int64_t part, uint32_t *want,
                        bool *all_known);
bool fwd_nodes_has(const uint32_t *nodes, size_t n, uint32_t node);
/* A delivery arriving in several frames, gathered. */
typedef struct fwd_acc {
    uint8_t *p;
    size_t len, cap;
} fwd_acc_t;
/* Appends what arrived of receiver u's current delivery ud: 1 when it is whole (or
 * aborted) and the link advanced past it, 0 when more is to come, -1 without memory. */
int fwd_acc_read(fwd_acc_t *a, pn_link_t *u, pn_delivery_t *ud);

/* ---- send.c ---- */
int fwd_send_new(fwd_t *f);
void fwd_send_free(fwd_t *f);
void fwd_send_tick(fwd_t *f, int64_t now_ms);
void fwd_send_hooks(fwd_t *f, mqd_fwd_hooks_t *h);
/* Bytes of forwarded sends in flight to node (not settled by the leader yet). */
uint64_t fwd_send_node_bytes(fwd_t *f, uint32_t node);
/* Attaches an upstream sender `<prefix>-<self>-<topic>-<part>-<seq>` to topic/Partitions/part
 * on node's pool connection, bound to fl (link properties mqd:fwd-user, mqd:fwd-node,
 * mqd:acks unless acks < 0, mqd:batch when batch); false while that connection is down or fl has a link. */
bool fwd_sender_open(fwd_t *f, fwd_link_t *fl, uint32_t node, const char *prefix,
                     const char *topic, uint32_t part, const char *user, int acks, bool batch,
                     uint64_t seq);

/* ---- recv.c ---- */
int fwd_recv_new(fwd_t *f);
void fwd_recv_free(fwd_t *f);
void fwd_recv_tick(fwd_t *f, int64_t now_ms);
void fwd_recv_hooks(fwd_t *f, mqd_fwd_hooks_t *h);

/* ---- ext.c: a front end's consumers (0-9-1) through legs to the leaders ---- */
int fwd_ext_new(fwd_t *f);
void fwd_ext_free(fwd_t *f);
void fwd_ext_tick(fwd_t *f, int64_t now_ms);
void fwd_ext_hooks(fwd_t *f, mqd_fwd_hooks_t *h);
/* ---- txn.c ---- */
int fwd_txn_new(fwd_t *f);
void fwd_txn_free(fwd_t *f);
void fwd_txn_hooks(fwd_t *f, mqd_fwd_hooks_t *h);
/* A transactional send (send.c's hook hands it over): forwarded with the transaction to
 * the partition's leader, refused when the transaction spans leaders, or MQD_FWD_LOCAL
 * (led here, as before). */
int fwd_txn_send(fwd_t *f, mqd_lstate_t *ls, pn_delivery_t *d, const char *topic, uint32_t part,
                 const uint8_t *msg, size_t len, bool presettled, int acks, const char *user);

#endif
