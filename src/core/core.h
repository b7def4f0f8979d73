/* core: the broker's object model and the commit point — topics, partitions, their
 * waiting sends and commit points, link and connection state, the server struct that
 * holds them — and the loop primitives the model needs (dirty connections, the tick,
 * timers). It sits below every broker subsystem: group/, txn/, auth/, amqp/, mgmt/,
 * metrics/, repl/ and server/ include it, and it includes none of them. Where the model
 * must reach up (settle a send, ask a transaction's last stable offset, open a topic's
 * groups, detach a link), it calls the hooks in mqd_core_ops_t that server/ (the
 * composition root) fills in from the subsystems above at start.
 *
 * Ownership: the server owns topics and connections; a topic owns its partitions; a
 * partition owns its waiting sends and commit point; a connection owns its link states
 * (freed when the connection is freed, from a deferred callback). Everything runs on
 * the event-loop thread; only the store's flusher thread is elsewhere (it wakes us
 * through ev_wake).
 */
#ifndef MQD_CORE_H
#define MQD_CORE_H

#include "mqd.h"
#include "codec/codec.h"
#include "conf/conf.h"
#include "meta/meta.h"
#include "route/route.h"
#include "store/store.h"
#include "util/util.h"

#include <event2/event.h>
#include <event2/listener.h>
#include <proton/codec.h>
#include <proton/connection_driver.h>
#include <proton/engine.h>
#include <proton/event.h>
#include <proton/logger.h>
#include <proton/session.h>
#include <proton/types.h>

typedef struct mqd_server mqd_server_t;
typedef struct mqd_conn mqd_conn_t;
typedef struct mqd_topic mqd_topic_t;
typedef struct mqd_part mqd_part_t;
typedef struct mqd_part_commit mqd_part_commit_t; /* part_commit.c */
typedef struct mqd_lstate mqd_lstate_t;
typedef struct mqd_topic_build mqd_topic_build_t; /* topic.c */
typedef struct mqd_census mqd_census_t;             /* topic_count.c */
typedef struct mqd_outconn mqd_outconn_t;   /* server/outconn.c */
struct mqd_group;                            /* group/ */
struct mqd_txns;                             /* txn/ */
struct evbuffer;
struct json_t;

/* One listening socket; `index` is its position in conf->listen. */
typedef struct mqd_listener {
    mqd_server_t *srv;
    size_t index;
    struct evconnlistener *l;
} mqd_listener_t;

/* ---- intrusive doubly linked list ---- */
typedef struct mqd_dlist {
    struct mqd_dlist *prev, *next;
} mqd_dlist_t;

static inline void mqd_dlist_init(mqd_dlist_t *l) { l->prev = l->next = l; }
static inline bool mqd_dlist_empty(const mqd_dlist_t *l) { return l->next == l; }
static inline void mqd_dlist_push(mqd_dlist_t *head, mqd_dlist_t *n)
{
    n->prev = head->prev;
    n->next = head;
    head->prev->next = n;
    head->prev = n;
}
static inline void mqd_dlist_del(mqd_dlist_t *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}
#define MQD_CONTAINER(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- a send waiting for its records to become stable ---- */
typedef struct mqd_pending {
    struct mqd_pending *next;
    mqd_conn_t *conn;     /* holds a reference */
    pn_delivery_t *dlv;   /* valid while conn is alive */
    uint64_t last_offset; /* settle when stable > last_offset */
    uint64_t txn;         /* transactional send: settle with transactional-state */
    uint64_t t_ns;        /* when appended (metrics) */
    uint64_t dedup_key;   /* its message-id in the topic's dedup window, 0 if none */
    uint64_t *batch_keys; /* a batched send: its inner messages' keys (owned), or NULL */
    size_t n_batch_keys;
    uint8_t acks;         /* mqd_acks_t: which commit point settles it (part_commit.c) */
    /* A send of a front end without Proton deliveries (amqp091/): conn and dlv are NULL
     * and notify(notify_arg, notify_tag, outcome, cond, desc) is told the outcome
     * (PN_ACCEPTED, or PN_REJECTED with a condition; the partition or its topic went
     * away: PN_RELEASED) exactly once, at the point a 1.0 send would be settled. */
    void (*notify)(void *arg, uint64_t tag, uint64_t outcome, const char *cond, const char *desc);
    void *notify_arg;
    uint64_t notify_tag;
} mqd_pending_t;
typedef void (*mqd_pend_notify_fn)(void *arg, uint64_t tag, uint64_t outcome, const char *cond,
                                   const char *desc);



/* budget: what a connection may hold in memory (issue 16, point 3), and the whole
 * broker's share of it.
 *
 * A connection is charged for its sessions and links (a fixed cost per Proton object,
 * from when Proton creates it until it is final), the bytes of deliveries still
 * arriving in several transfers (the link buffers that collect them) and the bytes
 * Proton has ready to write that the socket has not taken. Past max_connection_memory
 * the connection is closed with amqp:resource-limit-exceeded: its input is no longer
 * read, its close frame gets BUDGET_LINGER_MS to leave, then the socket is closed. While
 * the sum over all connections is above max_memory, new connections and new links are
 * refused, and a connection whose partial deliveries or output grow is closed.
 *
 * Sessions are also bounded by the channels Proton can give them: a session holds a
 * local channel from its begin until its end is written, and Proton stops producing
 * output for good once it cannot map one (only 64 begins were answered, the rest piled
 * up: 1 GB for 300,000 begin+end pipelined on channel 0). mqd_budget_event has the
 * ended sessions' ends written before a new session would need a channel too many.
 *
 * All of it runs on the event-loop thread. The state is a member of mqd_conn_t. */
struct mqd_conn;
struct mqd_server;

typedef struct mqd_budget {
    uint64_t bytes;      /* charged now (sum of the parts below) */
    uint64_t peak;       /* most charged at once */
    uint64_t partial;    /* link buffers of deliveries still arriving */
    uint64_t output;     /* Proton output the socket has not taken, and unframed deliveries */
    uint64_t pending;    /* of which in Proton's output buffer (the last write's rest) */
    bool send_blocked;   /* consumers wait for the output to drain */
    uint64_t blocked_at; /* `output` when they began to wait (0: not measured yet) */
    uint32_t sessions;   /* Proton sessions not yet final */
    uint32_t links;      /* Proton links not yet final */
    uint32_t ssn_open;   /* sessions mqd began and has not ended */
    uint32_t ssn_ending; /* sessions mqd ended whose end may not be written yet */
    int64_t closing_ms;  /* closed by the budget at (monotonic ms), else 0 */
    bool peer_eof;       /* after closing_ms: the peer's EOF (or an error) was read */
} mqd_budget_t;

/* Fixed charges (measured: Proton's session ~3.5 KiB with its delivery maps, a link
 * with its termini and mqd's link state ~2 KiB). */
#define MQD_BUDGET_SESSION_COST 4096u
#define MQD_BUDGET_LINK_COST 2048u
/* How long a connection closed by the budget may take to write its close frame. */
#define MQD_BUDGET_LINGER_MS 10000

/* Looks at e before mqd_amqp_handle does: counts sessions and links, keeps channels
 * free, closes the connection when over budget. False: skip the event (the connection
 * is closing and e would open something on it). */
bool mqd_budget_event(struct mqd_conn *c, pn_event_t *e);

/* Charges (delta > 0) or releases (delta < 0) bytes of partial-delivery buffers.
 * MQD_ETOOBIG when a charge does not fit: the connection is being closed and the
 * caller must not grow the buffer. Releases always succeed. */
int mqd_budget_partial(struct mqd_conn *c, int64_t delta);

/* Records the output Proton holds after a write (`pending`: bytes not taken by the
 * socket, plus what its deliveries hold unframed); closes the connection if that puts
 * it over budget, and lets blocked consumers send again once it has drained. */
void mqd_budget_output(struct mqd_conn *c, size_t pending);

/* A consumer may not send on session ss while the connection's unread output and the
 * session's queued delivery bytes are MQD_BUDGET_SEND_HIGH or more: a peer that grants
 * credit but does not read stops getting deliveries (they stay in the log) instead of
 * having them all copied into Proton. The connection's consumers are dispatched again
 * once its backlog is below half of it, or has fallen by half of it. */
bool mqd_budget_send_blocked(struct mqd_conn *c, pn_session_t *ss);
#define MQD_BUDGET_SEND_HIGH (4u << 20)

/* True once a connection closed by the budget has had its linger: close the socket.
 * *wait_ms (if not NULL) gets the time left, for the connection's timer. */
bool mqd_budget_linger_over(struct mqd_conn *c, int64_t *wait_ms);

/* A connection closed by its budget whose peer has not sent EOF yet: its input is read
 * and dropped (mqd_budget_drain, from the read event) until then, so that a peer still
 * sending does not get a reset, which would make its kernel drop the close frame. */
bool mqd_budget_draining(const struct mqd_conn *c);
void mqd_budget_drain(struct mqd_conn *c);

/* Closes c's socket: at once, or, after a close by the budget, once the peer has sent
 * EOF (its input read and dropped meanwhile) or MQD_BUDGET_DRAIN_MS has passed. */
void mqd_budget_close_fd(struct mqd_conn *c);
#define MQD_BUDGET_DRAIN_MS 5000
/* Closes the sockets still draining (server shutdown, before the event base goes). */
void mqd_budget_drains_free(struct mqd_server *s);

/* Periodic (1 s): gives freed heap back to the system once the charges fell by
 * MQD_BUDGET_TRIM_BYTES since the last time. */
void mqd_budget_tick(struct mqd_server *s);
#define MQD_BUDGET_TRIM_BYTES (1u << 20)
#define MQD_BUDGET_TRIM_CONNS 256 /* ... or the connections fell by this many */

/* A connection is being freed: its charges leave the broker's total. */
void mqd_budget_release(struct mqd_conn *c);

/* The broker is over max_memory: refuse new connections and links. */
bool mqd_budget_broker_full(const struct mqd_server *s);

/* watermark: memory and disk watermarks (issue 6, limits). While the broker's resident
 * memory is above memory_high_watermark, or the file system holding data_dir has less
 * than disk_free_limit bytes free, producers get no new link credit; consumers keep
 * flowing, so memory drains and retention can free disk. Credit resumes once both clear.
 *
 * The state hangs off the server (`s->watermark`, owned by it between init and free).
 * The limits are read from s->conf at every check, so a SIGHUP reload applies them. */
struct mqd_server;

/* Allocates s->watermark and takes a first measurement. 0 or MQD_ENOMEM. */
int mqd_watermark_init(struct mqd_server *s);
/* Frees s->watermark (NULL is fine) and sets it to NULL. */
void mqd_watermark_free(struct mqd_server *s);

/* True while a watermark is exceeded. Cheap: measures (/proc/self/statm, statvfs) at
 * most once per MQD_WATERMARK_INTERVAL_MS and returns the cached answer in between.
 * Logs once when it starts blocking and once when it clears. Event-loop thread only. */
bool mqd_watermark_blocked(struct mqd_server *s);
#define MQD_WATERMARK_INTERVAL_MS 100

/* The last measurement, for metrics and management: resident bytes and free bytes on
 * data_dir (UINT64_MAX when unknown). Either pointer may be NULL. */
void mqd_watermark_usage(struct mqd_server *s, uint64_t *rss, uint64_t *disk_free);

/* The disk budget (rules in watermark.c; docs/security.md, Limits). Event-loop thread.
 *
 * mqd_watermark_disk_take: may `bytes` more be stored (a producer's message, with
 * MQD_WATERMARK_REC_OVERHEAD)? true counts them against the free space measured; false
 * (the free space would fall below disk_free_limit) means refuse the message.
 * mqd_watermark_window: how many of `want` credit units a producer link holding `have`
 * may be granted now, if each may carry `msg_bytes` (0: unknown, the link has sent
 * nothing yet): 0 while a watermark is exceeded, fewer than `want` near
 * disk_free_limit (its share of the budget). *reserved is the link's part of the
 * budget (0 at first), replaced by (have + the answer) x msg_bytes. */
bool mqd_watermark_disk_take(struct mqd_server *s, uint64_t bytes);
/* A producer link starts (+1) or stops (-1, with its last *reserved) sharing the
 * credit budget. */
void mqd_watermark_producers(struct mqd_server *s, int delta, uint64_t reserved);
uint32_t mqd_watermark_window(struct mqd_server *s, uint32_t want, int have, uint64_t msg_bytes,
                              uint64_t *reserved);
/* Disk bytes a stored message costs besides its own: the record header (40) and its
 * share of the offset and time indexes, rounded up. */
#define MQD_WATERMARK_REC_OVERHEAD 64
/* A link with no credit near the limit gets one while this fits in its share of the
 * headroom, before it has sent a message (then: its largest message). */
#define MQD_WATERMARK_FIRST_BYTES (64u << 10)

/* ---- replication hooks (src/repl/ registers them; none on a single node) ----
 * The broker calls these at the points where a replicated partition behaves unlike a
 * local one, so that server/ and amqp/ know no replication code by name (the direction
 * of the include graph stays repl -> server). All run on the loop thread; every member
 * is optional. */
struct mqd_topic;
struct mqd_conn;
struct mqd_lstate;
struct evbuffer;
struct json_t;
typedef struct mqd_redirect {
    char host[256];
    uint16_t port;
    char address[512];
} mqd_redirect_t;
typedef void (*mqd_repl_done_fn)(void *arg, int status, const char *desc);
enum { MQD_ROUTE_HERE = 0, MQD_ROUTE_REDIRECT, MQD_ROUTE_WAIT, MQD_ROUTE_REFUSE };
/* route's `part` for a receiver of the whole topic attached with mqd:fwd-local-only: it
 * is served by a node that leads at least one partition, over the partitions it leads
 * (never redirected: refused when this node leads none; docs/replication.md). */
#define MQD_ROUTE_PART_LED (-2)
typedef struct mqd_repl_hooks {
    /* A topic was created on this node (management, auto-create, a replica). */
    void (*topic_created)(void *arg, struct mqd_topic *t);
    /* A link to partition `part` (-1: the whole topic; MQD_ROUTE_PART_LED: the partitions
     * this node leads) of topic `name` is attaching, or a
     * message of the anonymous relay names it (may_wait false); t is this node's copy,
     * NULL when it has none; may_create: the link could create it (auto_create_topics and
     * the `create` right). Returns MQD_ROUTE_HERE to go on (with t NULL: create it, or
     * refuse it as not found, as on a single node), MQD_ROUTE_REDIRECT (*to filled: refuse
     * with amqp:link:redirect), MQD_ROUTE_WAIT (leave the attach unanswered: repl calls
     * mqd_amqp_attach_again for the name once it knows more, e.g. when its registration
     * in etcd was answered; never when !may_wait) or MQD_ROUTE_REFUSE (*cond and the
     * reason in err). *created: this call started the name's registration (the caller
     * counts the create against the link's connection). */
    int (*route)(void *arg, const char *name, struct mqd_topic *t, int64_t part, bool may_create,
                 bool may_wait, mqd_redirect_t *to, const char **cond, char *err, size_t errlen,
                 bool *created);
    /* A producer link (T, T/Partitions/N) to cluster topic `name` with node-to-node
     * forwarding on (src/fwd), t this node's copy or NULL: true when the cluster
     * registered the name and t (if any) is its topic, so the link is served here
     * whoever leads its partitions (each message goes to its leader); false: route
     * decides as for any link. */
    bool (*route_send)(void *arg, const char *name, struct mqd_topic *t);
    /* A send with `acks` (mqd_acks_t) to partition part of t: NULL to go on, else the
     * reason to reject it (a static text) and *cond its AMQP error condition. */
    const char *(*send_check)(void *arg, struct mqd_topic *t, uint32_t part, int acks,
                              const char **cond);
    /* A receiver attaching with source address `addr` under "$repl/": repl answers the
     * attach itself (open or refuse) and owns the link's events from then on. */
    void (*attach)(void *arg, struct mqd_conn *c, pn_link_t *l, const char *addr);
    /* PN_LINK_FLOW and PN_DELIVERY of such a link; link_gone before its state goes. */
    void (*link_event)(void *arg, struct mqd_lstate *ls, pn_event_t *e);
    void (*link_gone)(void *arg, struct mqd_lstate *ls);
    /* $management READ of com.mqd:cluster: writes this node's view as one map into out
     * (controller, nodes, partitions; docs/replication.md). */
    void (*status)(void *arg, pn_data_t *out);
    /* /metrics: appends the replication gauges (Prometheus text) to b. */
    void (*metrics)(void *arg, struct evbuffer *b);
    /* $management ELECT of com.mqd:cluster (mqctl cluster elect T P NODE): makes `node`
     * (an in-sync replica) lead partition part of topic, epoch + 1. 0: started, and
     * done(done_arg, status, desc) runs once etcd answered (200 moved, 409 lost a race);
     * else an HTTP-style status with the reason in err (404, 409, 503). */
    int (*elect)(void *arg, const char *topic, uint32_t part, uint32_t node,
                 mqd_repl_done_fn done, void *done_arg, char *err, size_t errlen);
    /* A clean stop (SIGTERM): hands every partition this node leads to another live
     * in-sync replica. Returns how many moves it started; done(done_arg) runs once all
     * were answered (never when it returns 0; maybe before it returns). */
    size_t (*handover)(void *arg, void (*done)(void *done_arg), void *done_arg);
    /* Group `group` (lower-cased) saved `floor` as its committed offset of partition
     * part of t (in the caller's SQLite transaction): the leader logs it. */
    void (*group_saved)(void *arg, struct mqd_topic *t, uint32_t part, const char *group,
                        uint64_t floor);
    /* /readyz: false (with the reason) while a replica here is out of its in-sync set
     * (catching up) or its partition state is not loaded yet. */
    bool (*ready)(void *arg, char *why, size_t whylen);
    /* A failed partition is about to resume (truncate to its durable offset and take
     * appends): false keeps it failed for now (a leader that shipped records past that
     * offset hands the partition over first; repl/move.c). */
    bool (*may_resume)(void *arg, struct mqd_part *p);
    /* $management DELETE of a topic (mqctl topic delete, any node): a replicated one goes
     * from etcd in one txn and then from every replica (repl/topics.c). 0: started, and
     * done(done_arg, status, desc) runs once etcd answered (204 deleted, 409 it changed
     * meanwhile, 503 etcd); else an HTTP-style status with the reason in err: 204 done
     * here at once (a copy the cluster never registered), 404 not a replicated topic (the
     * caller deletes it as a local one), 409. */
    int (*topic_delete)(void *arg, const char *name, mqd_repl_done_fn done, void *done_arg,
                        char *err, size_t errlen);
    /* $management UPDATE of a replicated topic: overrides_json (a JSON object's text, NULL
     * for none) merged into its registered settings and its partitions raised to nparts
     * (0: unchanged), by compare-and-swap in etcd; every replica applies them. 0:
     * started, done(done_arg, 200 or 404/409/503, desc) once etcd holds them; else a
     * status with err: 404 not a replicated topic (the caller alters it locally), 400,
     * 409 (replication_factor cannot change), 503. */
    int (*topic_alter)(void *arg, const char *name, uint32_t nparts, const char *overrides_json,
                       mqd_repl_done_fn done, void *done_arg, char *err, size_t errlen);
    /* $management CREATE (mqctl topic create) in a cluster: the name is registered in etcd
     * (create if absent) before any node holds it; this node makes its copy when it is a
     * replica (always with replication_factor 1: the creating node holds those). 0:
     * started, done(done_arg, 201 or 409/503, desc) once etcd answered; else a status
     * with err: 404 not a cluster topic (the caller creates it locally), 400, 409 (the
     * name is registered, or being registered), 503. */
    int (*topic_create)(void *arg, const char *name, uint32_t nparts, const char *overrides_json,
                        mqd_repl_done_fn done, void *done_arg, char *err, size_t errlen);
    /* $management READ and QUERY of topics: writes what the cluster holds of topic `name`
     * into the map d is inside (keys "replication_factor", "id", "home" and "placement": a
     * list of maps {partition, leader, epoch, replicas, isr}) and, when this node has no
     * copy (t NULL), also "name", "partitions", "overrides" and "local" false; false
     * (nothing more written) when the name is not registered. A copy here that is not the
     * cluster's topic of its name (never registered: kept, not served) gets "quarantined"
     * true. */
    bool (*topic_describe)(void *arg, const char *name, struct mqd_topic *t, pn_data_t *d);
    /* Calls fn(fn_arg, name) for every topic registered in the cluster. */
    void (*topic_names)(void *arg, void (*fn)(void *fn_arg, const char *name), void *fn_arg);
    /* $management READ of com.mqd:route (routing metadata, mqctl topic routes): writes one
     * map {topic, partitions, replication_factor, node_id, routes: [{partition, leader,
     * leader_address, leader_alive, epoch, replicas, isr, high_watermark,
     * high_watermark_from}], nodes} into d; false (nothing written) when `name` is not
     * registered in the cluster. */
    bool (*topic_routes)(void *arg, const char *name, pn_data_t *d);
    /* connection_redirect (amqp:connection:redirect): a client connection attaching a link
     * to partition `part` (-1: the whole topic) of `topic` should go to another node under
     * `mode` (mqd_conn_redirect_t): true with *to (host, port) filled, then the caller
     * closes the connection with the redirect; false: serve it here. */
    bool (*conn_redirect)(void *arg, int mode, const char *topic, int64_t part,
                          mqd_redirect_t *to);
    void *arg;
} mqd_repl_hooks_t;

/* ---- node-to-node forwarding hooks (src/fwd/ registers them; all NULL on a single node
 * or before fwd is set up) ----
 * amqp reaches fwd only through these (the include graph stays fwd -> amqp). All run on
 * the loop thread. */
enum { MQD_FWD_LOCAL = 0, MQD_FWD_TAKEN };
enum { MQD_FWD_F_TXN = 1, MQD_FWD_F_BATCH = 2 };
typedef struct mqd_fwd_hooks {
    /* A producer's complete message for partition part of topic `topic` (this node's copy
     * or none), after the entry node's own checks (ACL, partition choice). MQD_FWD_LOCAL:
     * this node leads the partition, the caller appends it as before. MQD_FWD_TAKEN: fwd
     * owns the outcome: forwarded to the leader (d held until the leader settles it),
     * held while no leader is known (at most the lease + 1 s), or rejected. acks: the
     * link's mqd:acks (mqd_acks_t) or -1; flags: MQD_FWD_F_TXN (a transactional send:
     * refused when the partition is led elsewhere, not forwarded yet), MQD_FWD_F_BATCH (a
     * batched transfer, message-format 0x80013700: forwarded on a mqd:batch link); user: the client's login as the [acl] knows it
     * ("" anonymous), named to the leader as mqd:fwd-user. */
    int (*send)(void *arg, struct mqd_lstate *ls, pn_delivery_t *d, const char *topic,
                uint32_t part, const uint8_t *msg, size_t len, bool presettled, int acks,
                int flags, const char *user);
    /* A front end's message without a Proton delivery (0-9-1's basic.publish), after its
     * own checks: as send, but with MQD_FWD_TAKEN the outcome goes to fn(fn_arg, tag,
     * outcome, cond, desc) exactly once (PN_ACCEPTED when the leader stored it,
     * PN_REJECTED with the leader's condition or after the lease + 1 s without a leader,
     * PN_RELEASED / PN_MODIFIED as the leader said), maybe before this returns; fn NULL:
     * nobody waits (no confirm). */
    int (*send_notify)(void *arg, const char *topic, uint32_t part, const uint8_t *msg,
                       size_t len, int acks, const char *user, mqd_pend_notify_fn fn,
                       void *fn_arg, uint64_t tag);
    /* True while forwarded bytes in flight to some node are over fwd's budget: a front end
     * without credit stops reading its publishers meanwhile. */
    bool (*send_busy)(void *arg);
    /* The client link ls is going (its state is freed after): its forwarded sends are
     * no longer its own (their outcome is dropped if the connection is gone). */
    void (*link_gone)(void *arg, struct mqd_lstate *ls);
    /* Forwarded sends of ls not settled yet (the link's credit leaves room for them). */
    uint32_t (*inflight)(void *arg, const struct mqd_lstate *ls);
    /* The registered partition count of a cluster topic this node may hold no copy of
     * (0: not registered). */
    uint32_t (*nparts)(void *arg, const char *topic);
    /* /metrics: appends the forwarding counters (Prometheus text). */
    void (*metrics)(void *arg, struct evbuffer *b);
    /* Receivers (fwd/recv.c): a client's receiver on partition part (-1: the whole
     * source, T or T/ConsumerGroups/G, spanning partitions) of cluster topic `topic` that
     * this node does not lead (all of), after the entry node's own checks (ACL): ls
     * (MQD_LS_FWD, unanswered) is fwd's now, which answers the attach (opens it with the
     * leader's source, or refuses it) and serves it through links to the leaders; user:
     * the client's principal ("" anonymous), named to the leaders as mqd:fwd-user.
     * recv_event: PN_LINK_FLOW and PN_DELIVERY of such a link; recv_gone: before its
     * state goes. */
    void (*recv_attach)(void *arg, struct mqd_lstate *ls, const char *topic, int64_t part,
                        const char *user);
    void (*recv_event)(void *arg, struct mqd_lstate *ls, pn_event_t *e);
    void (*recv_gone)(void *arg, struct mqd_lstate *ls);
    /* A local consumer whose leader here stepped down (issue 33 point 3): ls (MQD_LS_FWD)
     * is a new state on the client's link, attached and answered already, that fwd
     * serves from now on like recv_attach's. The link's unsettled deliveries (no context)
     * are the client's still: the new leader's redelivery of one is bound to it; floor[i]
     * (n of them): the group's committed offset of partition i here when it stepped
     * down (a redelivery below it was settled by the client: accepted upstream, kept
     * from the client). */
    void (*recv_adopt)(void *arg, struct mqd_lstate *ls, const char *topic, int64_t part,
                       const char *user, const uint64_t *floor, uint32_t n);
    /* A front end's consumer (0-9-1's basic.consume / get) of topic's `$shared` group
     * through the partitions' leaders (fwd/ext.c). ext_wanted: true when this node does
     * not lead every partition of cluster topic `topic` (read through the leaders).
     * ext_open: a consumer reading as `user` (mqd:fwd-user; the front end authorized it
     * first), NULL without memory; wake(wake_arg) when messages became ready. ext_next:
     * the next ready message (bytes valid until it is settled) and its id; false: none
     * now. ext_settle: the front end's outcome for message id (PN_ACCEPTED, PN_MODIFIED
     * to requeue, PN_REJECTED), applied on the leader. ext_close: no more messages; the
     * taken ones may still be settled, the handle goes with the last. */
    bool (*ext_wanted)(void *arg, const char *topic);
    void *(*ext_open)(void *arg, const char *topic, const char *user, void (*wake)(void *),
                      void *wake_arg);
    bool (*ext_next)(void *arg, void *h, uint64_t *id, const uint8_t **p, size_t *len);
    void (*ext_settle)(void *arg, void *h, uint64_t id, uint64_t outcome);
    void (*ext_close)(void *arg, void *h);
    /* Transactions (fwd/txn.c; `txn` is this node's id of a client's transaction): the
     * client discharges it with its delivery d on connection c (fail: roll back);
     * local_work: it wrote to or acknowledged on partitions this node leads. MQD_FWD_TAKEN:
     * the transaction was forwarded to a leader, fwd settles d with the outcome (and txn/
     * drops its own part: rolled back when local_work); MQD_FWD_LOCAL: txn/ discharges it
     * as before. txn_gone: txn/ rolled it back on its own (timeout, coordinator gone): fwd
     * rolls back what it forwarded. */
    int (*txn_discharge)(void *arg, uint64_t txn, bool fail, bool local_work, pn_delivery_t *d,
                         mqd_conn_t *c);
    void (*txn_gone)(void *arg, uint64_t txn);
    void *arg;
} mqd_fwd_hooks_t;

/* ---- hooks into the subsystems above core (filled by server/ at start) ----
 * The model calls up only through these; each names the subsystem that provides it.
 * server/ sets every member before the first topic opens; a unit test that builds a
 * server without server/ leaves them NULL and core skips what they would do. */
struct ssl_st;
typedef struct mqd_core_ops {
    /* the connection transport (conn.c) reaches up through these: a Proton event of an
       accepted connection that mqd_budget_event let through (amqp/'s handler); an
       outbound connection's events, and its end with the reason, go to its owner
       (server/outconn.c); an accepted connection was closed while the server stops
       (server/shutdown.c); frees a link state of a closing connection (amqp/); during
       SASL, how many of n plaintext bytes Proton may take now, and the input held back
       when that is 0 (auth/) */
    void (*conn_event)(mqd_conn_t *c, pn_event_t *e);
    void (*out_event)(mqd_outconn_t *oc, pn_event_t *e);
    void (*out_closed)(mqd_outconn_t *oc, const char *why);
    void (*conn_gone)(mqd_server_t *s);
    void (*ls_free)(mqd_lstate_t *ls);
    size_t (*rx_gate)(mqd_conn_t *c, const uint8_t *p, size_t n);
    void (*rx_hold)(mqd_conn_t *c, const uint8_t *p, size_t n);
    /* server/: SIGHUP-style reload (mgmt's reload operation) */
    int (*reload)(mqd_server_t *s, char *err, size_t errlen);
    /* txn/: settles a transactional send with transactional-state; whether transaction
       `txn` committed; commit points moved (transactions waiting for their records go on) */
    void (*txn_settle)(pn_delivery_t *d, uint64_t txn, uint64_t outcome);
    bool (*txn_committed)(mqd_server_t *s, uint64_t txn);
    void (*txns_wake)(mqd_server_t *s);
    /* group/: a topic's groups — opened with it (existing: from meta.db; also the shared
       group of plain T), grown with its partitions, freed with it; the lowest committed
       offset of partition i over its groups (false: no group) for retention; whether any
       group state is unsaved */
    int (*groups_open)(mqd_topic_t *t, bool existing);
    int (*groups_grow)(mqd_topic_t *t);
    void (*groups_free)(mqd_topic_t *t);
    bool (*groups_floor)(const mqd_topic_t *t, uint32_t i, uint64_t *floor);
    bool (*groups_dirty)(const mqd_topic_t *t);
    void (*groups_save)(mqd_topic_t *t);
    /* amqp/: detaches a link with an error (topic deleted, epoch takeover, ACL reload),
       releasing what it held */
    void (*link_detach)(mqd_lstate_t *ls, const char *cond, const char *desc);
    /* amqp/: copies record `off` of partition `part` of t to T/$DeadLetterQueue, with the
       Service Bus reason and description (either may be "") as a rejection with
       com.microsoft:dead-letter would (mgmt's update-disposition "suspended") */
    void (*dead_letter)(mqd_topic_t *t, uint32_t part, uint64_t off, const char *reason,
                        const char *desc);
    /* amqp091/: takes over an accepted socket whose first bytes are the AMQP 0-9-1
       protocol header: plain (ssl NULL; the header still unread) or TLS (ssl set to fd,
       handshake done, its first plaintext pre[0..n) already read); false: not taken
       (fd and ssl are the caller's still) */
    bool (*adopt_amqp091)(mqd_server_t *s, int fd, const char *peer, struct ssl_st *ssl,
                          const uint8_t *pre, size_t n);
    /* amqp091/: the commit point of a topic with 0-9-1 consumers moved
       (mqd_topic_ext_consumers) */
    void (*topic_wake)(mqd_topic_t *t);
} mqd_core_ops_t;



/* MQD_LS_REPL: a follower's fetch link ($repl/...), served by src/repl (s->repl).
 * MQD_LS_FWD: a client's receiver whose partitions are led elsewhere, served by src/fwd
 * (recv.c) through upstream links to their leaders (s->fwd). */
typedef enum {
    MQD_LS_PRODUCER = 1,
    MQD_LS_CONSUMER,
    MQD_LS_BROWSER,
    MQD_LS_REPL,
    MQD_LS_FWD
} mqd_ls_kind_t;

/* Per-link state, the pn_link's context. */



/* ---- periodic work (timer.c) ----
 * A subsystem registers its own timers when it starts (not the server on its behalf):
 * fn(arg) runs on the loop every interval_ms until mqd_server_free. The name (unique,
 * < 48 characters, "subsystem.what") is listed in the debug log at start. 0, MQD_EINVAL,
 * MQD_EEXIST (name taken) or MQD_ENOMEM. */
typedef void (*mqd_timer_fn)(void *arg);
int mqd_timer_add(mqd_server_t *s, const char *name, uint32_t interval_ms, mqd_timer_fn fn,
                  void *arg);

/* server internals: the timer registry (timer.c). Each subsystem registers its own
 * periodic work with mqd_timer_add (server.h) when it starts; the server no longer
 * knows the list. Every timer is one persistent libevent timer on the server's loop, so
 * a timer runs outside any connection's handler, between loop iterations' I/O. */
struct event_base;
typedef struct mqd_timers mqd_timers_t;

int mqd_timers_new(struct event_base *base, mqd_timers_t **out);
/* Deletes every timer's event (none runs after it) and frees the registry. */
void mqd_timers_free(mqd_timers_t *ts);
/* Adds a timer that runs fn(arg) every interval_ms from now on. The name is copied (at
 * most MQD_TIMER_NAME_MAX - 1 characters). MQD_EINVAL for interval 0, an empty or too
 * long name or no fn; MQD_EEXIST if the name is taken; MQD_ENOMEM. */
int mqd_timers_add(mqd_timers_t *ts, const char *name, uint32_t interval_ms, mqd_timer_fn fn,
                   void *arg);
#define MQD_TIMER_NAME_MAX 48
size_t mqd_timers_count(const mqd_timers_t *ts);
/* Timer i (in the order added): its name, interval and how often it ran. */
int mqd_timers_get(const mqd_timers_t *ts, size_t i, const char **name, uint32_t *interval_ms,
                   uint64_t *runs);
/* Writes one debug line per timer ("timer NAME every N ms"). */
void mqd_timers_log(const mqd_timers_t *ts);

/* ---- loop primitives (loop.c) ---- */
void mqd_conn_mark_dirty(mqd_conn_t *c);
/* Feeds n bytes of plaintext input to c's Proton driver (auth/gate.c, for input it held). */
void mqd_conn_rx_feed(mqd_conn_t *c, const char *p, size_t n);
void mqd_conn_unref(mqd_conn_t *c);
/* Writes what Proton has for c's socket; returns the bytes it could not take. */
size_t mqd_conn_write(mqd_conn_t *c);
void mqd_server_tick_soon(mqd_server_t *s);
/* Arms ev_later: the deferred dispatch (amqp's mqd_server_run_later) at the next loop
 * iteration, after I/O. */
void mqd_server_later_soon(mqd_server_t *s);

/* ---- held deliveries and link ends (pnlink.c) ----
 * A link is freed once closed on both sides and none of its deliveries is held.
 * Whoever keeps a pointer to a delivery past its event holds it (mqd_delivery_hold),
 * lets go before settling it (mqd_delivery_unhold returns its link) and then calls
 * mqd_link_reap(link), which frees the link if that was the last reason to keep it. */
void mqd_delivery_hold(pn_delivery_t *d);
pn_link_t *mqd_delivery_unhold(pn_delivery_t *d);
bool mqd_delivery_held(pn_delivery_t *d);
void mqd_link_reap(pn_link_t *l);
/* The peer detached l (its session may live on). */
void mqd_link_mark_remote_detached(pn_link_t *l);
/* Links counted on session ss (delta added first); a session closed on both ends with
 * no link left is freed by mqd_session_reap. */
intptr_t mqd_session_links(pn_session_t *ss, intptr_t delta);
void mqd_session_reap(pn_session_t *ss);
/* Settles a delivery `rejected` with an error condition. */
void mqd_delivery_reject(pn_delivery_t *d, const char *cond, const char *desc);
/* Opens the link and closes it at once with `cond` and a description (fmt with one %s). */
void mqd_link_refuse(pn_link_t *l, const char *cond, const char *fmt, const char *arg);

/* topic_limit.c: max_topics and max_topics_per_connection. */
/* Whether creating `name` now would pass max_topics (logged, at most once a second). */
bool mqd_topic_limit_reached(mqd_server_t *s, const char *name);
/* mqd_topic_get for a link or relayed message of connection c: creating a topic counts
 * against c's max_topics_per_connection. MQD_EAGAIN when a limit refuses the creation
 * (the caller answers amqp:resource-limit-exceeded), MQD_ENOENT when !create and none. */
int mqd_topic_get_as(mqd_conn_t *c, const char *name, bool create, mqd_topic_t **out);
/* In a cluster a link's create is a registration in etcd first (repl): whether c may
 * create `name` now under both limits (nothing logged, nothing counted), and the create
 * counted against c once repl started it. */
bool mqd_topic_may_create_now(mqd_conn_t *c, const char *name);
void mqd_topic_charge_create(mqd_conn_t *c, const char *name);

/* topic.c */
int mqd_topic_get(mqd_server_t *s, const char *name, bool create, uint32_t create_parts, mqd_topic_t **out);
mqd_topic_t *mqd_topic_find(mqd_server_t *s, const char *name);
int mqd_topics_load(mqd_server_t *s);
/* topic_count.c: messages stored, not offsets (transaction markers excluded).
 * count_open: after p's log opened, starts the census of what the log holds (read in
 * slices between events); count_append: every record appended at off; messages: the
 * messages with offsets in [from, to) (from clamped to the log start); count_exact:
 * false while the census runs or after it lost track (then messages over-counts). */
int mqd_part_count_open(mqd_part_t *p);
void mqd_part_count_append(mqd_part_t *p, uint64_t off, uint32_t flags);
uint64_t mqd_part_messages(const mqd_part_t *p, uint64_t from, uint64_t to);
bool mqd_part_count_exact(const mqd_part_t *p);
void mqd_part_count_free(mqd_part_t *p);
void mqd_census_free(mqd_server_t *s);
/* Saves every exact count in meta.db for the next start (a clean stop, before the
 * topics are freed); on failure the next start reads the logs whole. */
void mqd_topics_census_save(mqd_server_t *s);
/* Blanks t's saved counts (t is being deleted: a topic made again reads its own log). */
void mqd_topic_census_forget(mqd_server_t *s, const mqd_topic_t *t);
/* topic_declare.c: every [topic NAME] section's topic exists (created, or grown to the
 * section's partitions), auto_create_topics or not; after mqd_topics_load. The first
 * error other than a full disk (which is logged, and the broker starts). */
int mqd_topics_declare(mqd_server_t *s);
/* topic_recover.c: every topic directory under data_dir/topics goes to mqd_topic_adopt
 * with the partition count its directory implies (after meta.db's topics are open). */
int mqd_topics_recover_dirs(mqd_server_t *s);
/* A topic found on disk with `ndir` partitions: created (and written to meta.db) if
 * meta.db does not know it, grown if meta.db knows fewer partitions; warns either way. */
int mqd_topic_adopt(mqd_server_t *s, const char *name, uint32_t ndir);
void mqd_topics_free(mqd_server_t *s);
void mqd_pending_pool_free(mqd_server_t *s);
int mqd_topic_delete(mqd_server_t *s, mqd_topic_t *t);
/* One per-topic setting `key` = v (a JSON string, integer or boolean) into tc through the
 * config file's parser: 0, or MQD_EINVAL with the reason ("KEY: ...") in err. */
int mqd_topic_setting_apply(mqd_topic_conf_t *tc, const char *key, const struct json_t *v,
                            char *err, size_t errlen);
/* Management: creates a topic with `overrides_json` (an object of per-topic keys such as
 * {"flush":"async","retention_ms":3600000}); MQD_EEXIST, MQD_EINVAL. nparts 0 = default. */
int mqd_topic_create(mqd_server_t *s, const char *name, uint32_t nparts, const char *overrides_json,
                     mqd_topic_t **out);
/* The same for a create that may take long (many partitions): the partitions open a
 * slice of BUILD_SLICE_MS at a time between other events, the topic invisible (its name
 * taken: creates of it get MQD_EEXIST, links MQD_EAGAIN) until complete. Then
 * cb(arg, 0, topic), or cb(arg, rc, NULL) when it failed (nothing of it is left); at
 * shutdown before completion cb(arg, MQD_ESTATE, NULL), where cb must only free arg.
 * Returns 0 (cb will run, never from inside this call) or an error (cb never runs). */
typedef void (*mqd_topic_built_cb)(void *arg, int rc, mqd_topic_t *t);
int mqd_topic_create_async(mqd_server_t *s, const char *name, uint32_t nparts,
                           const char *overrides_json, mqd_topic_built_cb cb, void *arg);
/* Ends every unfinished asynchronous create (shutdown; mqd_topics_free calls it). */
void mqd_topic_builds_cancel(mqd_server_t *s);
/* Management: grows the partition count (0 = keep; fewer = MQD_EINVAL) and merges
 * `overrides_json` (NULL = none) into the topic's overrides; persists both. */
int mqd_topic_alter(mqd_server_t *s, mqd_topic_t *t, uint32_t nparts, const char *overrides_json);
/* Replaces t's management overrides with overrides_json (a JSON object's text; NULL or
 * "{}": none) and persists them: the cluster's registration is the truth for a
 * replicated topic (repl/). Each setting goes through the config parser on its own: one
 * this node refuses is logged and skipped, the others apply at once (no restart).
 * MQD_EINVAL (nothing changed) when the text is not an object. */
int mqd_topic_set_overrides(mqd_server_t *s, mqd_topic_t *t, const char *overrides_json);
/* Grows t to nparts partitions (nothing when it has as many), persisted; its settings are
 * not looked at again (mqd_topic_alter's are). MQD_ETOOBIG over max_partitions_per_topic. */
int mqd_topic_grow(mqd_server_t *s, mqd_topic_t *t, uint32_t nparts);
/* A replicated topic's identity: the id of its registration in etcd (repl/; Kafka's
 * topic ID, KIP-516), kept in meta.db with the topic's row; "" for none. */
const char *mqd_topic_uid(const mqd_topic_t *t);
int mqd_topic_set_uid(mqd_topic_t *t, const char *uid); /* at most 39 characters */
/* Appends one record with flags/txn (txn/ control records: data NULL, len 0). */
int mqd_part_append_ex(mqd_part_t *p, const uint8_t *data, size_t len, uint32_t flags, uint64_t txn,
                       mqd_conn_t *c, pn_delivery_t *dlv, uint64_t *offset_out);
/* Appends one message (already scanned) to partition p; queues settlement of dlv. */
int mqd_part_append(mqd_part_t *p, const uint8_t *data, size_t len, mqd_conn_t *c, pn_delivery_t *dlv,
                    uint64_t *offset_out);
/* pnmsg.c: appends Proton message m, encoded, to out (first trying `hint` bytes of room,
 * 0 = 1 KiB). 0, MQD_ENOMEM, MQD_EINVAL (Proton's error), MQD_ETOOBIG. */
struct pn_message_t;
/* pnmsg.c: the x-opt-scheduled-enqueue-time (ms) of a stored record flagged
 * MQD_REC_SCHEDULED, else 0 (docs/servicebus.md, scheduled messages). */
int64_t mqd_rec_scheduled_ms(const mqd_rec_t *rec);
/* The flags of a data record for a message scanned as *mi (MQD_REC_SCHEDULED when it has
 * a scheduled enqueue time). */
static inline uint32_t mqd_rec_data_flags(const mqd_msg_info_t *mi)
{
    return mi->scheduled_ms ? MQD_REC_DATA | MQD_REC_SCHEDULED : MQD_REC_DATA;
}
int mqd_message_encode(struct pn_message_t *m, mqd_buf_t *out, size_t hint);
/* Consumers of a front end without link states (amqp091/) on t: while there are any
 * (delta +1 / -1 per consumer), every move of t's commit point calls ops.topic_wake.
 * Returns the count after the change. */
uint32_t mqd_topic_ext_consumers(mqd_topic_t *t, int delta);
/* Lets every consumer of t look for records again: its links (dispatch) and a front
 * end's (ops.topic_wake); what a move of the commit point does, and a scheduled record
 * that came due (group/). */
void mqd_topic_wake_consumers(mqd_topic_t *t);
/* Appends one data record (flags: MQD_REC_DATA, and MQD_REC_SCHEDULED for a scheduled
 * message) for a sender without Proton deliveries (amqp091/, mgmt's schedule-message):
 * fn(arg, tag, ...) is told its outcome later (mqd_pending_t's notify), never from inside
 * this call; without an error from here it is always told. */
int mqd_part_append_notify(mqd_part_t *p, const uint8_t *data, size_t len, uint32_t flags,
                           mqd_pend_notify_fn fn, void *arg, uint64_t tag, uint64_t *offset_out);
/* topic.c: a settled send back to the free list. */
void mqd_pending_release(mqd_server_t *s, mqd_pending_t *pe);

/* part_commit.c: the partition's commit point, the one answer to "how far may a reader
 * read" and "is this send settled". Every reader, settlement, metric and management
 * reply asks mqd_part_visible_end; nothing else reads the store's stable offset for it.
 * Read-committed readers (consumers, browsers) stop also at the first offset of an open
 * transaction; positions, lags and reported ends use read-uncommitted. */
typedef enum { MQD_READ_UNCOMMITTED = 0, MQD_READ_COMMITTED = 1 } mqd_isolation_t;
/* Called on the loop thread after the visible end moved (or the store reported an
 * event on the log), once per advance, after the sends below it were settled. */
typedef void (*mqd_part_commit_fn)(mqd_part_t *p, uint64_t visible_end, void *arg);
/* The commit point of a new partition (topic.c, before its log is used); freed with it. */
int mqd_part_commit_init(mqd_part_t *p);
void mqd_part_commit_free(mqd_part_t *p);
/* Offsets below it may be read: min(stable, high watermark[, LSO when read-committed]). */
uint64_t mqd_part_visible_end(const mqd_part_t *p, mqd_isolation_t iso);
/* The last stable offset: the first offset of a transaction still open in p,
 * UINT64_MAX when none is. txn/ keeps which transactions are open where and sets it
 * whenever that lowest first offset changes; core only stores it. */
uint64_t mqd_part_lso(const mqd_part_t *p);
void mqd_part_set_lso(mqd_part_t *p, uint64_t lso);
/* The high watermark: the stable offset until replication sets one. */
uint64_t mqd_part_hw(const mqd_part_t *p);
/* mqd_part_set_hw (or _set_repl_ends) was called since the partition was opened. */
bool mqd_part_hw_set(const mqd_part_t *p);
/* Replication: the offset below which the in-sync replicas hold every record. From the
 * first call the watermark no longer follows the local stable offset; a rise of the
 * visible end settles sends and notifies as a stable advance does. */
void mqd_part_set_hw(mqd_part_t *p, uint64_t hw);
/* Replication: the high watermark and the quorum end (the offset a majority of the
 * replicas hold, >= hw) at once; sends with acks = quorum settle below the latter. */
void mqd_part_set_repl_ends(mqd_part_t *p, uint64_t hw, uint64_t quorum_end);
/* Rejects, with cond/desc, every waiting send with acks >= min_acks: the in-sync set fell
 * below min_insync_replicas, so the watermark will not reach them in time. Returns the
 * number rejected. Their records stay in the log (docs/replication.md). */
size_t mqd_part_reject_waiting(mqd_part_t *p, int min_acks, const char *cond, const char *desc);
/* The same for the waiting sends whose last record is at or past `from` (a follower's
 * log cut back to `from`: those records are gone). */
size_t mqd_part_reject_waiting_from(mqd_part_t *p, uint64_t from, int min_acks, const char *cond,
                                    const char *desc);
/* A leader that stepped down: its waiting sends (transactions' aside) are in doubt; each
 * from now on waits for the high watermark whatever its acks (the new leader's, as this
 * node follows it), or a cut of the log below it (mqd_part_reject_waiting_from). Returns
 * how many. */
size_t mqd_part_waiting_in_doubt(mqd_part_t *p);
/* At most 4 per partition (MQD_ENOMEM past that); `arg` is the caller's and must outlive
 * the subscription. Subscribers run in the order they subscribed. */
int mqd_part_commit_subscribe(mqd_part_t *p, mqd_part_commit_fn fn, void *arg);
void mqd_part_commit_unsubscribe(mqd_part_t *p, mqd_part_commit_fn fn, void *arg);
/* The store's stable callback for p (topic.c): moves the watermark when not replicated,
 * settles, lets partfail.c see a failure or resume, then notifies. */
void mqd_part_stable_advanced(mqd_part_t *p, uint64_t stable);

/* partfail.c: failed partitions. After a stable callback: if p's log failed, every send
 * waiting for it is rejected with a condition (the first time counted and logged); if it
 * resumed, that is noted. */
void mqd_part_log_event(mqd_part_t *p);
/* The condition for a send p's failed log refused, and its description in desc. */
const char *mqd_part_fail_condition(const mqd_part_t *p, char *desc, size_t n);
/* Rejects p's waiting sends and asks the store to resume its failed log (0: asked or
 * not failed; MQD_EAGAIN: a resume is under way). */
int mqd_part_resume(mqd_part_t *p);
/* The link error for a failed mqd_topic_get (rc): condition, and a format with one %s
 * for the topic name ("disk full" when creating it found no space). */
const char *mqd_topic_get_condition(int rc);
const char *mqd_topic_get_desc(int rc);
/* 0 if data_dir has room for a new topic (max(disk_free_limit, MQD_TOPIC_MIN_FREE)
 * free), else MQD_ENOSPC: a topic created into a full disk could take no sends. */
#define MQD_TOPIC_MIN_FREE (1u << 20)
int mqd_topic_room(mqd_server_t *s);
/* Which failures of a partition log resume by themselves (partition_resume_ms), by the
 * errno that failed it: ROOM (ENOSPC, EDQUOT) once the disk has room, RESOURCE (EMFILE,
 * ENFILE, ENOMEM: a transient lack of descriptors or kernel memory) once a descriptor
 * can be had, NEVER for the rest (EIO and every other error wait for mqctl). */
typedef enum { MQD_PART_RETRY_NEVER, MQD_PART_RETRY_ROOM, MQD_PART_RETRY_RESOURCE } mqd_part_retry_t;
mqd_part_retry_t mqd_part_fail_retry(int err);
/* Periodic: resumes, every partition_resume_ms, the failed partitions whose failure
 * retries (mqd_part_fail_retry) while its condition holds. */
void mqd_topics_resume_failed(mqd_server_t *s);
void mqd_topic_dispatch_soon(mqd_topic_t *t);
/* A consumer of t used its work budget for this loop turn (consumer.c, sel_work): t is
 * dispatched again in a later turn, when mqd_server_run_later resets the budgets. */
void mqd_topic_dispatch_later(mqd_topic_t *t);
/* Applies retention to every partition (periodic timer). */
void mqd_topics_retain(mqd_server_t *s);


/* dedup.c: true if msg's message-id was stored within the topic's window (records it if not). */
bool mqd_dedup_seen(mqd_topic_t *t, const uint8_t *msg, const mqd_msg_info_t *mi);
void mqd_dedup_free(mqd_topic_t *t);
/* The window's key for msg's message-id (0: none). */
uint64_t mqd_dedup_key(const uint8_t *msg, const mqd_msg_info_t *mi);
/* Takes a key out of the window: its send was refused or failed and stored nothing, so a
 * retry must be stored, not taken for a duplicate. 0 is a no-op. */
void mqd_dedup_forget(mqd_topic_t *t, uint64_t key);
/* Forgets the message-ids of a pending send that is refused (nothing of it counts as
 * stored): the client's retry must be stored, not taken for a duplicate. */
void mqd_dedup_forget_pending(mqd_topic_t *t, const mqd_pending_t *pe);
/* Rebuilds the topic's window from its logs now, if it has dedup and no window yet. */
void mqd_dedup_warm(mqd_topic_t *t);
/* topic.c: mqd_dedup_warm for every topic (start-up, after the transactions load). */
void mqd_topics_dedup_warm(mqd_server_t *s);


/* Whether transaction `txn` committed (false without txn/: an unknown one aborted). */
bool mqd_core_txn_committed(mqd_server_t *s, uint64_t txn);

/* ---- accessors (access.c) ----
 * The structs below are opaque outside src/core (their bodies are in core_int.h): the
 * subsystems above read and change them through these. Getters are named
 * mqd_<obj>_<field>, setters mqd_<obj>_set_<field>; an embedded member (a list head or
 * node, a settings block, Proton's driver) is returned by address. <obj> is srv
 * (mqd_server_t), conn, topic, part and ls (mqd_lstate_t). */

/* mqd_server_t */
struct mqd_accept_guard *mqd_srv_accept_guard(const mqd_server_t *o);
void mqd_srv_set_accept_guard(mqd_server_t *o, struct mqd_accept_guard *v);
void *mqd_srv_auth(const mqd_server_t *o);
void mqd_srv_set_auth(mqd_server_t *o, void *v);
struct event_base *mqd_srv_base(const mqd_server_t *o);
mqd_read_t *mqd_srv_browse_rd(mqd_server_t *o);
uint64_t mqd_srv_budget_bytes(const mqd_server_t *o);
uint64_t mqd_srv_budget_closes(const mqd_server_t *o);
mqd_conf_t *mqd_srv_conf(const mqd_server_t *o);
mqd_conf_hooks_t *mqd_srv_conf_hooks(const mqd_server_t *o);
char *mqd_srv_conf_path(const mqd_server_t *o);
mqd_dlist_t *mqd_srv_conns(mqd_server_t *o);
uint64_t mqd_srv_conns_accepted(const mqd_server_t *o);
uint64_t mqd_srv_conns_refused(const mqd_server_t *o);
mqd_dlist_t *mqd_srv_dispatch_later(mqd_server_t *o);
mqd_dlist_t *mqd_srv_dispatch_q(mqd_server_t *o);
struct event *mqd_srv_ev_handover(const mqd_server_t *o);
void mqd_srv_set_ev_handover(mqd_server_t *o, struct event *v);
struct event *mqd_srv_ev_shutdown(const mqd_server_t *o);
void mqd_srv_set_ev_shutdown(mqd_server_t *o, struct event *v);
uint64_t mqd_srv_group_commit_failures(const mqd_server_t *o);
void mqd_srv_count_group_commit_failure(mqd_server_t *o);
/* Redirects sent to clients (/metrics mqd_redirects_total): a link's attach refused with
 * amqp:link:redirect that asked for it (mqd:redirect, the amqp:link:redirect capability) or
 * did not, a connection closed with amqp:connection:redirect (connection_redirect). */
typedef enum {
    MQD_REDIRECT_LINK_ASKED = 0,
    MQD_REDIRECT_LINK_UNASKED,
    MQD_REDIRECT_CONNECTION,
    MQD_REDIRECT_KINDS
} mqd_redirect_kind_t;
uint64_t mqd_srv_redirects(const mqd_server_t *o, mqd_redirect_kind_t kind);
void mqd_srv_count_redirect(mqd_server_t *o, mqd_redirect_kind_t kind);
/* Refused logins (SASL on AMQP, the console's password and SCRAM logins) by mechanism,
 * for mqd_auth_failures_total: index i of mqd_login_mechs (the last: any other). */
#define MQD_LOGIN_MECHS 5
extern const char *const mqd_login_mechs[MQD_LOGIN_MECHS];
void mqd_srv_count_login_failure(mqd_server_t *o, const char *mech);
uint64_t mqd_srv_login_failures(const mqd_server_t *o, size_t i);
mqd_hist_t *mqd_srv_h_append_stable(mqd_server_t *o);
bool mqd_srv_handover_wait(const mqd_server_t *o);
void mqd_srv_set_handover_wait(mqd_server_t *o, bool v);
struct mqd_listener *mqd_srv_listeners(const mqd_server_t *o);
void mqd_srv_set_listeners(mqd_server_t *o, struct mqd_listener *v);
mqd_meta_t *mqd_srv_meta(const mqd_server_t *o);
mqd_buf_t *mqd_srv_mgmt_out(mqd_server_t *o);
uint64_t mqd_srv_msgs_rejected(const mqd_server_t *o);
size_t mqd_srv_n_conns(const mqd_server_t *o);
size_t mqd_srv_n_listeners(const mqd_server_t *o);
void mqd_srv_set_n_listeners(mqd_server_t *o, size_t v);
size_t mqd_srv_n_topics(const mqd_server_t *o);
mqd_core_ops_t *mqd_srv_ops(mqd_server_t *o);
mqd_dlist_t *mqd_srv_outconns(mqd_server_t *o);
bool mqd_srv_persist_due(const mqd_server_t *o);
void mqd_srv_set_persist_due(mqd_server_t *o, bool v);
mqd_repl_hooks_t *mqd_srv_repl(mqd_server_t *o);
mqd_fwd_hooks_t *mqd_srv_fwd(mqd_server_t *o);
mqd_buf_t *mqd_srv_scratch(mqd_server_t *o);
uint64_t mqd_srv_sends_failed(const mqd_server_t *o);
bool mqd_srv_stopping(const mqd_server_t *o);
void mqd_srv_set_stopping(mqd_server_t *o, bool v);
mqd_store_t *mqd_srv_store(const mqd_server_t *o);
void mqd_srv_set_tick_queued(mqd_server_t *o, bool v);
struct mqd_timers *mqd_srv_timers(const mqd_server_t *o);
uint64_t mqd_srv_tmp_seq(const mqd_server_t *o);
void mqd_srv_set_tmp_seq(mqd_server_t *o, uint64_t v);
struct mqd_txns *mqd_srv_txns(const mqd_server_t *o);
void mqd_srv_set_txns(mqd_server_t *o, struct mqd_txns *v);
void mqd_srv_set_meta(mqd_server_t *o, mqd_meta_t *v);
void mqd_srv_set_store(mqd_server_t *o, mqd_store_t *v);
#define MQD_SRV_EV_SIG 4
struct event **mqd_srv_ev_sig(mqd_server_t *o); /* its signal events: ev_sig[MQD_SRV_EV_SIG] */
void mqd_srv_count_refused(mqd_server_t *o, uint64_t n); /* n connections more refused */
void *mqd_srv_console(const mqd_server_t *o);
void mqd_srv_set_console(mqd_server_t *o, void *v);
void *mqd_srv_metrics(const mqd_server_t *o);
void mqd_srv_set_metrics(mqd_server_t *o, void *v);

/* mqd_conn_t */
void *mqd_conn_auth(const mqd_conn_t *o);
void mqd_conn_set_auth(mqd_conn_t *o, void *v);
uint64_t mqd_conn_bytes_in(const mqd_conn_t *o);
uint64_t mqd_conn_bytes_out(const mqd_conn_t *o);
bool mqd_conn_client(const mqd_conn_t *o);
bool mqd_conn_closed(const mqd_conn_t *o);
pn_connection_driver_t *mqd_conn_driver(mqd_conn_t *o);
int mqd_conn_fd(const mqd_conn_t *o);
size_t mqd_conn_listener(const mqd_conn_t *o);
void mqd_conn_set_listener(mqd_conn_t *o, size_t v);
int64_t mqd_conn_opened_ms(const mqd_conn_t *o);
uint64_t mqd_conn_out_gen(const mqd_conn_t *o);
mqd_fpeek_t *mqd_conn_peek(const mqd_conn_t *o);
const char *mqd_conn_peer(const mqd_conn_t *o);
/* Unique among the process's connections, never 0 (amqp/reply.c: its temporary nodes). */
uint64_t mqd_conn_serial(const mqd_conn_t *o);
uint8_t *mqd_conn_rbuf(const mqd_conn_t *o);
void mqd_conn_set_rbuf(mqd_conn_t *o, uint8_t *v);
size_t mqd_conn_rbuf_cap(const mqd_conn_t *o);
void mqd_conn_set_rbuf_cap(mqd_conn_t *o, size_t v);
mqd_server_t *mqd_conn_srv(const mqd_conn_t *o);
struct ssl_st *mqd_conn_ssl(const mqd_conn_t *o);
void mqd_conn_set_ssl(mqd_conn_t *o, struct ssl_st *v);
const char *mqd_conn_user(const mqd_conn_t *o);
void mqd_conn_ref(mqd_conn_t *c); /* takes a reference: mqd_conn_unref lets it go */
void mqd_conn_set_user(mqd_conn_t *o, const char *v); /* copied, cut to fit */

/* mqd_topic_t */
mqd_topic_conf_t *mqd_topic_conf(mqd_topic_t *o);
mqd_dlist_t *mqd_topic_consumers(mqd_topic_t *o);
int64_t mqd_topic_created_ms(const mqd_topic_t *o);
mqd_dlist_t *mqd_topic_groups(mqd_topic_t *o);
char *mqd_topic_name(const mqd_topic_t *o);
uint32_t mqd_topic_nparts(const mqd_topic_t *o);
struct json_t *mqd_topic_overrides(const mqd_topic_t *o);
uint32_t mqd_topic_rr_part(const mqd_topic_t *o);
void mqd_topic_set_rr_part(mqd_topic_t *o, uint32_t v);
mqd_server_t *mqd_topic_srv(const mqd_topic_t *o);
bool mqd_topic_temporary(const mqd_topic_t *o);
void mqd_topic_set_temporary(mqd_topic_t *o, bool v);
/* A temporary node's owner: the mqd_conn_serial of the connection whose node it is. */
uint64_t mqd_topic_owner(const mqd_topic_t *o);
void mqd_topic_set_owner(mqd_topic_t *o, uint64_t v);
/* mqd_topic_groups for read-only walks (group/'s hooks that get a const topic) */
const mqd_dlist_t *mqd_topic_groups_const(const mqd_topic_t *o);
/* A topic's statistics: a delivery of `bytes` to a consumer; a record consumed without
 * delivery because it expired, was dead-lettered, or a disposition rejected it (or a
 * send that replication refused). */
void mqd_topic_count_out(mqd_topic_t *t, size_t bytes);
void mqd_topic_count_expired(mqd_topic_t *t);
void mqd_topic_count_dead(mqd_topic_t *t);
void mqd_topic_count_rejected(mqd_topic_t *t);
/* A topic's traffic counters, all at once (metrics, management replies). */
typedef struct mqd_topic_stats {
    uint64_t msgs_in, bytes_in, msgs_out, bytes_out;
    uint64_t msgs_expired, msgs_dead, msgs_rejected, msgs_duplicate;
} mqd_topic_stats_t;
void mqd_topic_stats(const mqd_topic_t *t, mqd_topic_stats_t *out);

/* mqd_part_t */
uint32_t mqd_part_id(const mqd_part_t *o);
mqd_plog_t *mqd_part_log(const mqd_part_t *o);
mqd_pending_t *mqd_part_pend_tail(const mqd_part_t *o);
/* The acks level (mqd_acks_t) of the send appended last: a sender's mqd:acks. */
void mqd_part_pend_set_acks(mqd_part_t *o, uint8_t acks);
mqd_topic_t *mqd_part_topic(const mqd_part_t *o);
/* Whether this node leads the partition now (set by repl/ when it takes or leaves the
 * leader's role; false on a node without replication, where nothing reads it: only
 * local-only links, mqd_ls_local_only, look at it), and a generation bumped at each
 * change (a delivery made under an older one belongs to a lead this node left). */
bool mqd_part_led(const mqd_part_t *o);
uint32_t mqd_part_led_gen(const mqd_part_t *o);
void mqd_part_set_led(mqd_part_t *o, bool v);

/* mqd_lstate_t */
uint8_t mqd_ls_acl_perm(const mqd_lstate_t *o);
void mqd_ls_set_acl_perm(mqd_lstate_t *o, uint8_t v);
mqd_conn_t *mqd_ls_conn(const mqd_lstate_t *o);
int64_t mqd_ls_epoch(const mqd_lstate_t *o);
void mqd_ls_set_epoch(mqd_lstate_t *o, int64_t v);
mqd_dlist_t *mqd_ls_gnode(mqd_lstate_t *o);
struct mqd_group *mqd_ls_group(const mqd_lstate_t *o);
void mqd_ls_set_group(mqd_lstate_t *o, struct mqd_group *v);
bool mqd_ls_has_epoch(const mqd_lstate_t *o);
void mqd_ls_set_has_epoch(mqd_lstate_t *o, bool v);
mqd_ls_kind_t mqd_ls_kind(const mqd_lstate_t *o);
pn_link_t *mqd_ls_link(const mqd_lstate_t *o);
bool mqd_ls_manual(const mqd_lstate_t *o);
void mqd_ls_set_manual(mqd_lstate_t *o, bool v);
/* A consumer or browser attached with mqd:fwd-local-only = true to a replicated topic:
 * it reads only the partitions this node leads at the time (mqd_part_led). */
bool mqd_ls_local_only(const mqd_lstate_t *o);
void mqd_ls_set_local_only(mqd_lstate_t *o, bool v);
const char *mqd_ls_name(const mqd_lstate_t *o);
uint32_t mqd_ls_part(const mqd_lstate_t *o);
void mqd_ls_set_part(mqd_lstate_t *o, uint32_t v);
void *mqd_ls_repl(const mqd_lstate_t *o);
void mqd_ls_set_repl(mqd_lstate_t *o, void *v);
void *mqd_ls_fwd(const mqd_lstate_t *o); /* MQD_LS_FWD: src/fwd's state of it */
void mqd_ls_set_fwd(mqd_lstate_t *o, void *v);
mqd_dlist_t *mqd_ls_tnode(mqd_lstate_t *o);
mqd_topic_t *mqd_ls_topic(const mqd_lstate_t *o);
void mqd_ls_set_topic(mqd_lstate_t *o, mqd_topic_t *v);
/* A zeroed link state of `kind` for link l of c (tnode an empty list; not yet l's
 * context), or NULL without memory. mqd_ls_dealloc frees it once what it owns is freed
 * (amqp's mqd_lstate_free). */
mqd_lstate_t *mqd_ls_alloc(mqd_ls_kind_t kind, mqd_conn_t *c, pn_link_t *l);
void mqd_ls_dealloc(mqd_lstate_t *ls);
void *mqd_ls_amqp(const mqd_lstate_t *o);
void mqd_ls_set_amqp(mqd_lstate_t *o, void *v);
bool mqd_ls_cbs(const mqd_lstate_t *o);
void mqd_ls_set_cbs(mqd_lstate_t *o, bool v);
bool mqd_ls_coord(const mqd_lstate_t *o);
void mqd_ls_set_coord(mqd_lstate_t *o, bool v);
bool mqd_ls_mgmt(const mqd_lstate_t *o);
void mqd_ls_set_mgmt(mqd_lstate_t *o, bool v);
void mqd_ls_set_name(mqd_lstate_t *o, const char *v); /* copied, cut to the name's room */
char *mqd_ls_tmp_name(const mqd_lstate_t *o);
void mqd_ls_set_tmp_name(mqd_lstate_t *o, char *v);
/* Detaches ls with an error through the link_detach hook (amqp/), releasing what it held
 * (an epoch takeover, an ACL reload); nothing without the hook. */
void mqd_ls_detach(mqd_lstate_t *ls, const char *cond, const char *desc);
/* What a link is, as management lists it: "coordinator", "cbs", "management",
 * "producer", "consumer", "browser" or "other" (also for ls NULL). */
const char *mqd_ls_kind_name(const mqd_lstate_t *ls);

/* iteration and container-of for the opaque structs */
mqd_topic_t *mqd_srv_topic_first(mqd_server_t *s);   /* every topic, hash order */
mqd_topic_t *mqd_srv_topic_next(mqd_topic_t *t);     /* NULL after the last */
mqd_conn_t *mqd_conn_of_node(mqd_dlist_t *n);        /* n: mqd_srv_conns()'s entries */
mqd_lstate_t *mqd_ls_of_tnode(mqd_dlist_t *n);       /* n: mqd_topic_consumers()'s entries */
mqd_lstate_t *mqd_ls_of_gnode(mqd_dlist_t *n);       /* n: a group's members */
mqd_topic_t *mqd_topic_of_dnode(mqd_dlist_t *n);     /* n: mqd_srv_dispatch_q()'s entries */
mqd_topic_t *mqd_topic_of_lnode(mqd_dlist_t *n);     /* n: mqd_srv_dispatch_later()'s entries */
mqd_part_t *mqd_topic_part(mqd_topic_t *t, uint32_t i); /* i < nparts; never moves */

/* The loop's priorities: three levels, so that I/O shares libevent's default (middle)
 * priority with the listeners' accept events. The tick has that priority too: libevent
 * runs a lower priority only in an iteration with no higher one active, so under steady
 * input (a producer that never pauses) a low-priority tick starved, and with it
 * settlements and deliveries. At equal priority it still runs after the iteration's
 * ready I/O: epoll activates those events before any callback runs, and the callback
 * that queues the tick puts it behind them. */
#define MQD_PRIO_LEVELS 3
#define MQD_PRIO_IO 1

/* srv.c: the server struct. server/ (the composition root) allocates it (zeroed, its
 * lists empty, started_ms now, conf and a copy of conf_path set, its conf hooks
 * registry; NULL when out of memory), sets up its loop on `base` (the store's wake
 * ev_wake, the tick ev_tick running on_tick, the deferred dispatch ev_later running
 * on_later, each with the server as argument, and the timer registry; 0 or the
 * registry's error), fills in the rest, and at the end frees the loop's events (before
 * the base) and last the struct with what alloc made. */
mqd_server_t *mqd_core_server_alloc(mqd_conf_t *conf, const char *conf_path);
int mqd_core_server_loop(mqd_server_t *s, struct event_base *base, event_callback_fn on_tick,
                         event_callback_fn on_later);
void mqd_core_server_loop_free(mqd_server_t *s);
void mqd_core_server_free(mqd_server_t *s);
/* The store's wake callback (its flusher thread; arg: the server): ev_wake runs the
 * store's completions on the loop and queues the tick. */
void mqd_core_server_wake(void *arg);

/* fdroom.c: the descriptors connections may take under RLIMIT_NOFILE (its soft limit
 * when the server was made: s->nofile). The store keeps its share for partition files
 * (max_open_files, at most half of the limit) and MQD_FD_SPARE more for files mqd opens
 * for a moment; connections, AMQP and the web console's alike, get the rest, and those
 * that have not finished their handshake handshake_fd_percent of that. Without a limit
 * every field is 0 and every descriptor is admitted. */
#define MQD_FD_SPARE 32
typedef struct mqd_fd_budget {
    uint64_t nofile;     /* the limit; 0: none */
    uint64_t head;       /* partition files the store may still open (its share less its open ones) */
    uint64_t conns;      /* descriptors connections may hold: nofile less the store's share,
                            the spare and mqd's own (mqd_fd_note_base) */
    uint64_t handshakes; /* of those, connections still in their handshake (at least 1) */
} mqd_fd_budget_t;
/* RLIMIT_NOFILE's soft limit now (0: unlimited). */
uint64_t mqd_fd_nofile_now(void);
/* Notes how many descriptors mqd holds itself (log, SQLite, the loop's, listeners):
 * server/ calls it once its listeners are open. */
void mqd_fd_note_base(mqd_server_t *s);
void mqd_fd_budget(mqd_server_t *s, mqd_fd_budget_t *out);
/* May a just-accepted connection keep descriptor fd? False when keeping it would leave
 * fewer than the store's headroom plus MQD_FD_SPARE (the caller closes it). *b: the
 * budget it was judged by, for the caller's log line. */
bool mqd_fd_admit(mqd_server_t *s, int fd, mqd_fd_budget_t *b);

/* conn.c: a connection's transport (socket, TLS, Proton driver, events, teardown).
 * mqd_conn_new: a connection over fd, which it owns from now on (closed on failure too:
 * then NULL), named `peer` in logs; non-blocking, with its frame peek; its Proton
 * transport is the caller's to set up (mqd_conn_driver), then mqd_conn_accepted counts
 * it among the server's connections and starts it (events, the first round of protocol
 * work), or on a failed setup mqd_conn_discard frees it (returns rc).
 * mqd_conn_new_out: the same for an outbound connection of oc (client role, not in the
 * server's connections): TLS when ssl is set (owned from here, on failure too), `user`
 * its login; mqd_conn_start_out starts it (with TLS, the ClientHello) and returns it,
 * or NULL if it ended already. mqd_conn_drop_out ends one without calling its owner
 * back: at once (`now`, only outside its handlers) or at the next tick. */
mqd_conn_t *mqd_conn_new(mqd_server_t *s, int fd, const char *peer);
mqd_conn_t *mqd_conn_new_out(mqd_server_t *s, int fd, const char *peer, mqd_outconn_t *oc,
                             struct ssl_st *ssl, const char *user);
int mqd_conn_discard(mqd_conn_t *c, int rc);
void mqd_conn_accepted(mqd_conn_t *c);
mqd_conn_t *mqd_conn_start_out(mqd_conn_t *c);
void mqd_conn_drop_out(mqd_conn_t *c, bool now);
/* The tick: processes every connection marked dirty (events, output, its end). */
void mqd_conns_flush(mqd_server_t *s);
/* The tick: drops the last reference of every closed connection (freed outside its
 * handlers). */
void mqd_conns_reap(mqd_server_t *s);
/* mqd_server_free: closes every accepted connection (then mqd_conns_reap frees them). */
void mqd_conns_close(mqd_server_t *s);


#endif
