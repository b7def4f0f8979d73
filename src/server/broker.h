/* The broker's internal object model, shared by server/ (loop, listeners, connections),
 * amqp/ (Proton event handling, links) and group/ (shared-mode cursors).
 *
 * Ownership: the server owns topics and connections; a topic owns its partitions; a
 * partition owns its shared-group state; a connection owns its link states (freed when
 * the connection is freed, from a deferred callback). Everything runs on the event-loop
 * thread; only the store's flusher thread is elsewhere (it wakes us through ev_wake).
 */
#ifndef MQD_BROKER_H
#define MQD_BROKER_H

#include "mqd.h"
#include "amqp/framepeek.h"
#include "amqp/msg.h"
#include "auth/auth.h"
#include "group/group.h"
#include "group/selector.h"
#include "txn/txn.h"
#include "server/budget.h"
#include "server/watermark.h"
#include "conf/conf.h"
#include "meta/meta.h"
#include "metrics/metrics.h"
#include "route/route.h"
#include "store/store.h"
#include "util/util.h"
#include "server/server.h"

#include <event2/event.h>
#include <event2/listener.h>
#include <proton/connection_driver.h>
#include <proton/engine.h>
#include <proton/logger.h>

typedef struct mqd_server mqd_server_t;
typedef struct mqd_conn mqd_conn_t;
typedef struct mqd_topic mqd_topic_t;
typedef struct mqd_part mqd_part_t;
typedef struct mqd_part_commit mqd_part_commit_t; /* part_commit.c */
typedef struct mqd_lstate mqd_lstate_t;
typedef struct mqd_topic_build mqd_topic_build_t; /* topic.c */
typedef struct mqd_census mqd_census_t;             /* topic_count.c */

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
} mqd_pending_t;

/* ---- offsets waiting to be delivered again (sorted ascending) ---- */
typedef struct mqd_redeliver {
    uint64_t *v;
    size_t n, cap;
} mqd_redeliver_t;

/* A record's delivery state as the cursor hands it out: the number of earlier failed
 * attempts (header delivery-count to add) and whether a link acquired it before. */
#define MQD_DC_SEEN 0x80000000u
#define MQD_DC_COUNT(v) ((v) & ~MQD_DC_SEEN)

/* ---- one group's position in one partition ---- */
typedef struct mqd_cursor {
    uint64_t floor;      /* committed: every offset below is done (accepted/rejected/skipped) */
    uint64_t next_read;  /* next never-delivered offset */
    uint8_t *done;       /* bitmap: bit i = offset (floor & ~7) + i done */
    uint8_t *held;       /* bitmap (same base and size): offset handed out, unsettled */
    size_t done_bits;    /* capacity in bits of both */
    mqd_redeliver_t redeliver;
    uint64_t redeliver_gen; /* bumped when an offset joins the redelivery list */
    /* delivery state of offsets delivered before and not done: failed attempts, and
       MQD_DC_SEEN once any link acquired it (released, link lost, restart) */
    uint64_t *dc_off;
    uint32_t *dc_val;
    size_t dc_n, dc_cap;
    uint64_t inflight;   /* delivered, unsettled */
    bool dirty;          /* changed since last persisted */
    mqd_read_t rd;       /* read-ahead from next_read */
    size_t rd_pos;       /* next record in rd to hand out */
} mqd_cursor_t;

struct mqd_part {
    mqd_topic_t *topic;
    uint32_t id;
    mqd_plog_t *log;
    mqd_pending_t *pend_head, *pend_tail; /* FIFO by offset */
    struct { uint64_t txn, first; } *otx; /* open transactions with records here (txn/) */
    size_t n_otx, cap_otx;
    bool failed;                          /* its log failed and the owner knows (partfail.c) */
    int64_t resume_at_ms;                 /* next automatic resume attempt */
    mqd_part_commit_t *commit;            /* its commit point (part_commit.c): use the accessors */
    struct {                              /* topic_count.c: offsets that are no message */
        uint64_t *off;                    /* ascending (owned) */
        size_t n, cap;
        size_t census_n;                  /* the first census_n came from the census */
        uint64_t census_at, census_end;   /* the census has yet to read [at, end) */
        uint64_t next;                    /* the offset the next append should get */
        bool lost;                        /* out of memory or a failed read: an estimate */
        bool loaded;                      /* the census saved by the last stop was looked at */
    } ctl;
};

/* ---- a consumer group of a topic (group/group.c) ---- */
typedef struct mqd_group {
    mqd_topic_t *topic;
    char *name;                /* lower-cased; "$shared" for plain T */
    int mode;                  /* mqd_group_mode_t */
    mqd_cursor_t *cur;         /* [ncur], one per partition */
    uint32_t ncur;
    mqd_lstate_t **owner;      /* exclusive mode: link delivering partition i, or NULL */
    mqd_lstate_t **target;     /* exclusive mode: link partition i is assigned to */
    mqd_dlist_t members;       /* mqd_lstate_t.gnode */
    size_t n_members;
    bool active;               /* has had members or stored offsets: counts for retention */
    mqd_dlist_t node;          /* in topic->groups */
} mqd_group_t;

struct mqd_topic {
    mqd_server_t *srv;
    char *name;
    uint32_t nparts;
    mqd_part_t *parts;
    mqd_topic_conf_t conf;     /* effective settings (conf.name not owned) */
    bool temporary;            /* dynamic reply-to node: deleted when its link goes */
    mqd_dlist_t consumers;     /* mqd_lstate_t.tnode of consuming links (and browsers) */
    mqd_dlist_t groups;        /* mqd_group_t.node */
    uint32_t rr_part;          /* partition round robin for dispatch */
    struct mqd_topic *hnext;   /* hash chain */
    uint64_t msgs_in, bytes_in, msgs_out, bytes_out;
    uint64_t msgs_expired, msgs_dead, msgs_rejected, msgs_duplicate;
    struct mqd_dedup *dedup;   /* dedup.c: message-ids seen within dedup_window_ms */
    int64_t created_ms;
    struct json_t *overrides;  /* settings changed through management (owned), or NULL */
    mqd_dlist_t dnode;         /* in server->dispatch_q when queued */
    mqd_dlist_t lnode;         /* in server->dispatch_later when queued */
};

/* MQD_LS_REPL: a follower's fetch link ($repl/...), served by src/repl (s->repl). */
typedef enum { MQD_LS_PRODUCER = 1, MQD_LS_CONSUMER, MQD_LS_BROWSER, MQD_LS_REPL } mqd_ls_kind_t;

/* Per-link state, the pn_link's context. */
struct mqd_lstate {
    mqd_ls_kind_t kind;
    mqd_conn_t *conn;
    pn_link_t *link;
    mqd_topic_t *topic;       /* NULL for anonymous relay and temporary-node producers */
    char *tmp_name;           /* producer to a temporary node: its name (owned) */
    bool mgmt;                /* producer to $management (or $cbs) */
    bool cbs;                 /* producer to $cbs: requests go to mqd_auth_cbs_handle */
    bool coord;               /* the transaction coordinator link */
    uint8_t acl_perm;         /* mqd_perm_t checked on the topic (or $management) at
                                 attach, 0 = none (a reload checks it again:
                                 mqd_auth_recheck) */
    bool fixed_part;          /* T/Partitions/N */
    uint32_t part;
    uint32_t sticky_left;     /* round robin: messages left on `part` */
    mqd_dlist_t tnode;        /* in topic->consumers */
    uint64_t *browse_next;    /* browser, selective consumer: next offset per partition */
    uint32_t browse_n;        /* entries in browse_next (partitions when attached) */
    mqd_read_t *brd;          /* browser: records read ahead from partition brd_part */
    uint32_t brd_part;
    size_t brd_i;             /* next record in brd to deliver */
    /* A consumer with a selector on the shared group scans with browse_next/brd too, and
       looks at the group's released records from sel_rdi on; per partition, sel_gen is
       the redelivery list's generation since which sel_looked entries were looked at
       and none selected (consumer.c). */
    size_t sel_rdi;
    uint32_t sel_work;        /* records looked at this loop turn (reset by run_later) */
    uint64_t *sel_gen;
    size_t *sel_looked;
    uint64_t unsettled;       /* consumer: deliveries not yet settled */
    mqd_group_t *group;       /* consumer: its group */
    mqd_dlist_t gnode;        /* in group->members */
    bool manual;              /* T/ConsumerGroups/G/Partitions/N: owns `part` only */
    bool has_epoch;
    int64_t epoch;            /* com.microsoft:epoch */
    mqd_start_t start;        /* start position from the source filter */
    uint8_t *start_done;      /* per partition: start position applied */
    uint32_t start_n;
    struct mqd_selector *sel; /* property selector, or NULL */
    char name[96];            /* "peer/link-name" for management */
    uint8_t *acc;             /* producer: a transfer arriving in several frames */
    size_t acc_len, acc_cap;
    /* producer credit (amqp/credit.c): granted since the connection's output generation
       credit_gen, so not yet shown to the peer; the largest message so far */
    int credit_unposted;
    uint64_t credit_gen;
    uint64_t msg_max;
    void *repl;               /* MQD_LS_REPL: the replication layer's state of it */
    bool acks_set;            /* producer: link property mqd:acks given */
    uint8_t acks;             /* its mqd_acks_t */
    bool credit_shared;       /* counted among the producers sharing the disk budget */
    uint64_t credit_reserved; /* its part of that budget (watermark.c) */
};

struct mqd_conn {
    mqd_server_t *srv;
    int fd;
    char peer[64];
    pn_connection_driver_t driver;
    struct event *ev_read, *ev_write, *ev_timer;
    mqd_dlist_t node;        /* in srv->conns */
    mqd_dlist_t dirty_node;  /* in srv->dirty when queued for a flush */
    uint32_t topics_created; /* topics it auto-created (max_topics_per_connection) */
    int refs;                /* pending sends hold references */
    bool closed;             /* driver finished; freeing deferred */
    bool want_write;
    uint8_t tls_hdr;         /* bytes of the AMQP TLS header matched (TLS listeners) */
    bool tls_rd_wants_wr;    /* SSL_read wants the socket writable (handshake, key update) */
    bool tls_dead;           /* a fatal TLS error: no close_notify at the end */
    struct ssl_st *ssl;      /* TLS listeners only (mqd_auth_conn_setup); freed by conn_free */
    size_t listener;         /* index into conf->listen */
    int64_t opened_ms;       /* wall clock at accept */
    uint64_t bytes_in, bytes_out; /* AMQP bytes (after TLS) into and out of its driver */
    char user[128];
    /* The frame peek that tells the delivery path each transfer's message-format (owned).
       It is the on/off switch: set at accept where rx_feed sees plaintext (plain
       listeners; on TLS listeners Proton decrypts), NULL elsewhere. */
    mqd_fpeek_t *peek;
    uint64_t out_gen;        /* Proton's output produced (conn_write, tls_write): credit
                                granted before the last one has reached the peer */
    size_t rbuf_cap;         /* scratch for incoming transfers */
    uint8_t *rbuf;
    void *auth;              /* auth/: per-connection TLS/SASL state (mqd_auth_conn_t), owned
                                by the transport (freed with it); NULL before setup */
    mqd_budget_t budget;     /* budget.c: what it holds, against max_connection_memory */
    /* Outbound (client role, outconn.c): its owner, NULL once the owner let go or for an
       accepted connection; `client` stays true for the life of the struct. Not in
       srv->conns or n_conns; its events go to the owner, its links are the owner's. */
    struct mqd_outconn *out;
    bool client;
};

struct mqd_server {
    struct event_base *base;
    mqd_conf_t *conf;
    mqd_store_t *store;
    mqd_meta_t *meta;
    struct mqd_listener *listeners;
    size_t n_listeners;
    struct event *ev_wake;   /* flusher -> loop */
    int wake_pending;        /* atomic: set with ev_wake by the flusher, cleared by on_wake */
    struct event *ev_tick;   /* end-of-iteration: flush connections, commit the store */
    struct event *ev_later;  /* zero timeout: dispatch_later, after the loop polled I/O */
    struct event *ev_sig[4];
    struct mqd_timers *timers; /* timer.c: every subsystem's periodic work */
    struct event *ev_shutdown; /* shutdown.c: the end of shutdown_grace_ms */
    void *auth;              /* auth/: TLS contexts, ACLs (owned by auth) */
    void *metrics;           /* metrics/: the HTTP endpoint (owned by metrics) */
    void *console;           /* console/: the web console (owned by console), or NULL */
    struct mqd_watermark *watermark; /* watermark.c: memory/disk limits for producers */
    /* counters for metrics/ (event-loop thread) */
    uint64_t conns_accepted, conns_refused;
    uint64_t msgs_rejected;
    uint64_t budget_bytes;   /* budget.c: charged to all connections, against max_memory */
    uint64_t budget_closes;  /* connections closed by their budget or max_memory */
    uint64_t budget_high;    /* most charged since the last heap trim (mqd_budget_tick) */
    unsigned budget_trims;   /* heap trims still due on the next periodic ticks */
    size_t conns_high;       /* most connections since the last heap trim (mqd_budget_tick) */
    mqd_hist_t h_append_stable; /* append -> stable (seconds) */
    struct mqd_txns *txns;   /* txn/: open transactions, committed set */
    mqd_dlist_t conns;
    mqd_dlist_t dirty;
    mqd_dlist_t dispatch_q;
    mqd_dlist_t dispatch_later; /* mqd_topic_t.lnode: a consumer used its turn's budget */
    mqd_dlist_t graveyard;   /* closed connections awaiting their last unref */
    mqd_dlist_t outconns;    /* outconn.c: connections mqd keeps open to peers */
    mqd_dlist_t builds;      /* topics being created a slice at a time (topic.c) */
    mqd_dlist_t drains;      /* budget.c: sockets of closed connections read until EOF */
    size_t n_conns;
    mqd_topic_t **topics;    /* hash table */
    size_t topics_cap, n_topics;
    int64_t topic_refused_ms;     /* last log line of a topic-limit refusal (topic_limit.c) */
    uint64_t topic_refused_quiet; /* refusals since, not logged */
    mqd_buf_t scratch;       /* annotate output */
    mqd_read_t browse_rd;    /* browsers' reads */
    mqd_buf_t mgmt_out;      /* management replies */
    mqd_pending_t *pend_free; /* free list of settle entries */
    size_t n_pend_free;
    bool stopping;
    bool tick_queued;
    bool persist_due;        /* the 1 s timer asks the tick to persist group state */
    size_t parts_failed;     /* partitions whose log failed (partfail.c) */
    uint64_t sends_failed;   /* sends rejected because their partition failed */
    int64_t started_ms;      /* wall clock at start */
    uint64_t tmp_seq;
    char *conf_path;
    mqd_conf_hooks_t *conf_hooks; /* reload: the subsystems' check/apply hooks (conf_swap.c) */
    struct mqd_accept_guard *accept_guard; /* accept_guard.c: EMFILE on accept */
    struct mqd_census *census; /* topic_count.c: counting markers in logs opened at start */
    mqd_repl_hooks_t repl;   /* src/repl/'s hooks (server.h); all NULL on a single node */
};

/* server.c */
void mqd_conn_mark_dirty(mqd_conn_t *c);
/* Feeds n bytes of plaintext input to c's Proton driver (auth/gate.c, for input it held). */
void mqd_conn_rx_feed(mqd_conn_t *c, const char *p, size_t n);
void mqd_conn_unref(mqd_conn_t *c);
/* Writes what Proton has for c's socket; returns the bytes it could not take. */
size_t mqd_conn_write(mqd_conn_t *c);
void mqd_server_tick_soon(mqd_server_t *s);
/* A connected socket as an outbound connection of `oc` (client role): TLS when ssl is
 * set (the connection owns fd and ssl from here, on failure too: then NULL); `id` gives
 * the open's and SASL's identity (url, ca and backoff ignored). */
mqd_conn_t *mqd_server_adopt_out(mqd_server_t *s, int fd, const char *peer, struct mqd_outconn *oc,
                                 struct ssl_st *ssl, const mqd_outconn_opts_t *id);
/* Ends an outbound connection without calling its owner back: at once (`now`, only
 * outside its handlers) or at the next tick. */
void mqd_server_drop_out(mqd_conn_t *c, bool now);
/* outconn.c, called by server.c */
void mqd_outconn_event(mqd_outconn_t *oc, pn_event_t *e);
void mqd_outconn_closed(mqd_outconn_t *oc, const char *why);
void mqd_outconn_free_all(mqd_server_t *s);
/* Arms ev_later: mqd_server_run_later at the next loop iteration, after I/O. */
void mqd_server_later_soon(mqd_server_t *s);

/* shutdown.c: SIGTERM/SIGINT (mqd_server_stop). begin closes every client connection
 * with amqp:connection:forced ("mqd is shutting down") and exits the loop once all are
 * gone or after shutdown_grace_ms; conn_gone is called as each one goes while stopping. */
void mqd_shutdown_begin(mqd_server_t *s);
void mqd_shutdown_conn_gone(mqd_server_t *s);

/* accept_guard.c: accept() at the descriptor limit. Connections are closed at accept
 * before they eat into the store's headroom (mqd_accept_admit). A reserved descriptor is given up
 * to accept and close the connections waiting (each client sees its connection closed
 * at once instead of a handshake that times out), then taken again; without it the
 * listeners pause for ACCEPT_PAUSE_MS. So the loop never spins on a readable listener
 * it cannot accept from. */
int mqd_accept_guard_init(mqd_server_t *s);
void mqd_accept_guard_free(mqd_server_t *s);
/* The listeners' error callback (evconnlistener_set_error_cb; arg: the mqd_listener_t). */
void mqd_accept_error(struct evconnlistener *l, void *arg);
/* Whether a just-accepted connection (descriptor fd) may stay: false when keeping it
 * would leave fewer descriptors than the store's headroom plus a spare (then the caller
 * closes it; counted and logged here, once a second). */
bool mqd_accept_admit(mqd_server_t *s, int fd);

/* topic_limit.c: max_topics and max_topics_per_connection. */
/* Whether creating `name` now would pass max_topics (logged, at most once a second). */
bool mqd_topic_limit_reached(mqd_server_t *s, const char *name);
/* mqd_topic_get for a link or relayed message of connection c: creating a topic counts
 * against c's max_topics_per_connection. MQD_EAGAIN when a limit refuses the creation
 * (the caller answers amqp:resource-limit-exceeded), MQD_ENOENT when !create and none. */
int mqd_topic_get_as(mqd_conn_t *c, const char *name, bool create, mqd_topic_t **out);

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
/* Appends one record with flags/txn (txn/ control records: data NULL, len 0). */
int mqd_part_append_ex(mqd_part_t *p, const uint8_t *data, size_t len, uint32_t flags, uint64_t txn,
                       mqd_conn_t *c, pn_delivery_t *dlv, uint64_t *offset_out);
/* Appends one message (already scanned) to partition p; queues settlement of dlv. */
int mqd_part_append(mqd_part_t *p, const uint8_t *data, size_t len, mqd_conn_t *c, pn_delivery_t *dlv,
                    uint64_t *offset_out);
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
/* Periodic: resumes disk-full partitions every partition_resume_ms while there is room. */
void mqd_topics_resume_failed(mqd_server_t *s);
void mqd_topic_dispatch_soon(mqd_topic_t *t);
void mqd_server_run_dispatch(mqd_server_t *s);
/* A consumer of t used its work budget for this loop turn (consumer.c, sel_work): t is
 * dispatched again in a later turn, when mqd_server_run_later resets the budgets. */
void mqd_topic_dispatch_later(mqd_topic_t *t);
void mqd_server_run_later(mqd_server_t *s);
void mqd_topics_persist(mqd_server_t *s, bool force);
/* Applies retention to every partition (periodic timer). */
void mqd_topics_retain(mqd_server_t *s);

/* cursor.c: a group's position in a partition */
int mqd_cursor_init(mqd_cursor_t *cur, mqd_part_t *p, const char *group, mqd_offset_reset_t reset);
void mqd_cursor_free(mqd_cursor_t *cur);
/* Next record to deliver (redeliveries first), taken (held) for the caller; *dcount is
 * its delivery state (MQD_DC_*). false if nothing readable now. Skips what other links
 * hold or settled. */
bool mqd_cursor_next(mqd_cursor_t *cur, mqd_part_t *p, mqd_rec_t *rec, uint32_t *dcount);
/* For a link that picks records itself (a selector on a shared group, scanning from its
 * own position and cur->redeliver.v): is `offset` free (not settled, not held by a
 * link)? mqd_cursor_take hands a free one to the caller (held, out of the redelivery
 * list) and returns its delivery state. */
bool mqd_cursor_free_at(const mqd_cursor_t *cur, uint64_t offset);
uint32_t mqd_cursor_take(mqd_cursor_t *cur, uint64_t offset);
/* Marks a record never handed out as consumed (control record, aborted, expired). */
void mqd_cursor_skip(mqd_cursor_t *cur, uint64_t offset);
/* A delivered record was settled for good (accepted, rejected, expired, filtered). */
void mqd_cursor_done(mqd_cursor_t *cur, uint64_t offset);
/* A delivered record comes back (released / modified / link gone). */
void mqd_cursor_release(mqd_cursor_t *cur, uint64_t offset, bool failed);
/* Moves the position: everything below `offset` counts as consumed. */
void mqd_cursor_seek(mqd_cursor_t *cur, mqd_part_t *p, uint64_t offset);
/* Writes the committed offset and the done ranges above it (caller's meta txn). */
int mqd_cursor_save(mqd_cursor_t *cur, mqd_part_t *p, const char *group);

/* group.c */
int mqd_group_get(mqd_topic_t *t, const char *name, mqd_group_t **out);
void mqd_group_free(mqd_group_t *g);
int mqd_group_resize(mqd_group_t *g);            /* after the topic grew */
int mqd_group_join(mqd_group_t *g, mqd_lstate_t *ls);
void mqd_group_leave(mqd_group_t *g, mqd_lstate_t *ls);
/* May `ls` take records of partition i now (exclusive ownership, handoff done)? */
bool mqd_group_may_deliver(mqd_group_t *g, mqd_lstate_t *ls, uint32_t i);
/* After a settlement in partition i: completes a pending handoff. */
void mqd_group_settled(mqd_group_t *g, uint32_t i);
int mqd_groups_load(mqd_topic_t *t);
void mqd_groups_save(mqd_topic_t *t);             /* dirty cursors, in the caller's txn */

/* link.c: Proton events */
void mqd_amqp_handle(mqd_conn_t *c, pn_event_t *e);
/* link.c: a link is freed once closed on both sides and none of its deliveries is held.
 * Whoever keeps a pointer to a delivery past its event holds it (mqd_delivery_hold),
 * lets go before settling it (mqd_delivery_unhold returns its link) and then calls
 * mqd_link_reap(link), which frees the link if that was the last reason to keep it. */
void mqd_delivery_hold(pn_delivery_t *d);
pn_link_t *mqd_delivery_unhold(pn_delivery_t *d);
void mqd_link_reap(pn_link_t *l);
/* consumer.c: sends one record if the link can take it; returns number delivered. */
size_t mqd_consumer_pump(mqd_lstate_t *ls);
void mqd_lstate_free(mqd_lstate_t *ls);
/* Detaches a consumer link with an error (epoch takeover), releasing what it held. */
void mqd_consumer_detach(mqd_lstate_t *ls, const char *cond, const char *desc);


/* link.c: settles a delivery `rejected` with an error condition. */
void mqd_delivery_reject(pn_delivery_t *d, const char *cond, const char *desc);

/* link.c: gives producers their credit back once the watermarks clear (periodic). */
void mqd_producers_refill(mqd_server_t *s);

/* dedup.c: true if msg's message-id was stored within the topic's window (records it if not). */
bool mqd_dedup_seen(mqd_topic_t *t, const uint8_t *msg, const mqd_msg_info_t *mi);
void mqd_dedup_free(mqd_topic_t *t);
/* The window's key for msg's message-id (0: none). */
uint64_t mqd_dedup_key(const uint8_t *msg, const mqd_msg_info_t *mi);
/* Takes a key out of the window: its send was refused or failed and stored nothing, so a
 * retry must be stored, not taken for a duplicate. 0 is a no-op. */
void mqd_dedup_forget(mqd_topic_t *t, uint64_t key);
/* Rebuilds the topic's window from its logs now, if it has dedup and no window yet. */
void mqd_dedup_warm(mqd_topic_t *t);
/* topic.c: mqd_dedup_warm for every topic (start-up, after the transactions load). */
void mqd_topics_dedup_warm(mqd_server_t *s);

/* txn.c internals used by the link handlers */
void mqd_txns_stable_advanced(mqd_server_t *s);
/* Writes the decisions of the commits that became ready, in one SQLite transaction. */
void mqd_txns_decide(mqd_server_t *s);
uint64_t mqd_txn_outcome(pn_delivery_t *d, bool *failed);

#endif
