/* repl internals: the partition table (repl.c), the controller (ctl.c), the leader's
 * fetch service (leader.c) and the follower's fetcher (follower.c). */
#ifndef MQD_REPL_INT_H
#define MQD_REPL_INT_H

#include "repl/repl.h"
#include "core/core.h"
#include "amqp/amqp.h"

#define REPL_TICK_MS 200     /* ISR checks, link re-attaches */
#define REPL_RUN_BYTES 65536 /* raw bytes per fetch message (one record may be more) */
#define REPL_CREDIT 32       /* a follower's runs in flight */
#define REPL_REATTACH_MS 500

typedef enum { ROLE_NONE = 0, ROLE_LEADER, ROLE_FOLLOWER } role_t;

typedef struct rpart rpart_t;
typedef struct rdead rdead_t; /* probe.c: a node suspected dead */

/* The leader's view of one follower of a partition. */
typedef struct rflw {
    rpart_t *rp;
    uint32_t id;
    uint64_t leo;       /* its log end as its settlements report it */
    int64_t caught_ms;  /* last time its leo reached the leader's log end */
    mqd_lstate_t *ls;   /* its fetch link, NULL while it has none */
    uint64_t next_send; /* next offset to ship on that link */
    uint64_t hw_sent;   /* the watermark the last message told it */
    uint64_t probe_end; /* the leader's log end at the previous tick (isr_check) */
    int64_t probe_ms;
    uint64_t tag;
    bool leaving; /* it closed its link with MQD_REPL_LEAVING (a clean stop): out of the
                     in-sync set at once, until it attaches again */
    bool joining; /* a CAS adding it to the in-sync set is in flight: the watermark counts
                     it already (once etcd has it, it may be elected) */
} rflw_t;

/* The condition a follower closes its fetch link with when its node stops cleanly: the
 * leader takes it out of the in-sync set at once instead of after replica_lag_ms, so
 * that acks = all sends do not wait for a node that is going (Kafka's controlled
 * shutdown does the same through its controller). */
#define MQD_REPL_LEAVING "mqd:repl:leaving"

/* The leader's last logged committed offset of one group (gstate.c). */
typedef struct gfloor {
    char *name;
    uint64_t logged;
    bool known;
} gfloor_t;

typedef struct lead {
    rflw_t f[MQD_REPL_MAX_RF];
    uint32_t n;
    uint64_t hw;
    bool below_min; /* the ISR is below min_insync_replicas (logged once) */
    gfloor_t *g;    /* groups whose offsets it logged, [n_g] */
    size_t n_g;
    uint64_t run_start, run_end; /* the last run of group records appended back to back */
    uint32_t epoch;              /* the epoch its records are stamped with (mqd_plog_set_epoch) */
    uint64_t epoch_start;        /* its log end when it took the lead: a follower rejoins the
                                    in-sync set only past it (and the watermark) */
} lead_t;

typedef struct fol {
    rpart_t *rp;
    uint32_t leader;
    char url[300];
    mqd_outconn_t *oc;
    pn_link_t *link;
    struct {
        pn_delivery_t *d;
        uint64_t end;
    } * wait; /* appended runs waiting to be stable before settling */
    size_t n_wait, cap_wait;
    int64_t attach_at_ms; /* 0: attached or no connection */
    uint32_t link_epoch;  /* the partition epoch `link` was attached under (its mqd:epoch) */
    bool opened;          /* the connection's open was answered (probe.c takes its end as
                             evidence only then) */
    uint64_t runs;
} fol_t;

struct rpart {
    mqd_repl_t *r;
    rpart_t *next;
    rpart_t *hnext; /* repl.c's index by (topic, partition) */
    char *topic;
    uint32_t part;
    char *key;
    mqd_repl_pstate_t ps;
    int64_t mod_rev;
    mqd_part_t *local; /* this node's replica once created */
    role_t role;
    lead_t *lead;
    fol_t *fol;
    bool cas_out;        /* an ISR change in flight */
    bool fail_logged;    /* leader with a failed log and nobody to hand over to: logged */
    bool subscribed;     /* to its commit point */
    bool offline;        /* controller: no leader can be elected (logged once) */
    bool truncating;     /* follower: cutting its log back to the leader's epoch end, or
                            resetting it to the leader's log start (behind.c) */
    bool fenced;         /* leader whose lease was lost: acknowledges nothing until its
                            partition key was read again (repl.c refresh) */
    bool fenced_retry;   /* that read failed: the tick asks again */
    bool seen;           /* in the snapshot being read (repl.c) */
    bool refused_logged; /* a local topic of its name is not a replica: logged (topics.c) */
    bool dropping;       /* its topic's copy is being deleted here: receivers are detached
                            by the deletion ("the topic was deleted"), not as a step-down */
    int64_t handover_ms; /* leader granted to this node's previous run, found at start:
                            not led, handed over (ctl.c) until then; 0: none */
    /* controller, leader gone (cand.c): the in-sync replicas' log ends, read from etcd
       until each live one reported or cand_until_ms passed */
    int64_t cand_until_ms; /* 0: not waiting */
    bool cand_out;         /* a read of the reports in flight */
    bool cand_done;        /* the reports are in (or the wait is over): elect */
    uint32_t cand_pick;    /* the live in-sync replica with the longest log, 0: none */
    bool cand_stale_logged; /* a report of an earlier departure was ignored (logged once) */
    /* leader handing the partition back to its preferred replica (rebal.c): sends are
       refused until that replica holds every record, then the move's CAS is sent */
    uint32_t told_leader;  /* the leader mqd_repl_on_leader's callback last heard of */
    bool told_leading;     /* and whether this node played it then */
    uint32_t xfer_to;      /* 0: no move */
    uint32_t xfer_epoch;   /* the epoch the move writes, once its CAS was sent (else 0) */
    int64_t xfer_until_ms; /* the move is given up when not sent by then */
    int64_t doubt_until_ms; /* stepped down with sends waiting (follower.c): rejected then
                               if the new leader's watermark has not settled them; 0: none */
};

/* A topic's registration as etcd holds it (topics/<T>). */
typedef struct rtopic {
    struct rtopic *next;
    char *name;
    mqd_repl_tdesc_t td;
    int64_t mod_rev; /* of its key: alter and delete compare on it */
    bool seen;       /* in the snapshot being read (topics.c) */
} rtopic_t;

/* A topic name with a job in flight or waiting (topics.c): a registration, a look for
 * its tombstone, a deletion of this node's copy. */
typedef struct tname {
    struct tname *next;
    char *name;
    char why[200]; /* a deletion: the reason it logs; a wait: what it waits for */
    bool logged;   /* a deletion waiting for transactions, a quarantine: said once */
    /* a wait (reg.c): links to the name left unanswered until the cluster decides */
    int64_t until_ms; /* given up then: the links are refused */
    int64_t retry_ms; /* a registration that failed is tried again from then */
    bool woken;       /* their attaches run again at the next ev_wake */
    bool expired;
} tname_t;
tname_t *mqd_repl_tn_find(tname_t *l, const char *name);
tname_t *mqd_repl_tn_add(tname_t **l, const char *name); /* the one there, or a new one */
void mqd_repl_tn_del(tname_t **l, const char *name);
void mqd_repl_tn_free(tname_t **l);

struct mqd_repl {
    mqd_server_t *s;
    mqd_repl_leader_fn leader_fn; /* mqd_repl_on_leader (fwd/recv.c), or NULL */
    void *leader_arg;
    const mqd_conf_t *conf;
    mqd_cluster_t *m;
    mqd_etcd_t *etcd;
    char topics_prefix[192], parts_prefix[192], cand_prefix[192];
    char deleted_prefix[192];
    char dead_prefix[192];   /* probe.c: evidence of dead processes, for the controller */
    mqd_etcd_watch_t *w_dead;
    rdead_t *dead;           /* probe.c: the nodes suspected, one entry each */
    uint64_t dead_probes[3]; /* connects to suspected nodes: accepted, refused, no answer */
    uint64_t dead_revokes;   /* leases this node revoked on proof of a dead process */
    mqd_etcd_watch_t *w_topics, *w_parts;
    rpart_t *parts;
    rpart_t **idx; /* parts by (topic, partition): idx_cap buckets, n_parts entries */
    size_t idx_cap, n_parts;
    rpart_t *doomed; /* out of `parts` (their key went), freed once no truncation runs */
    rtopic_t *topics;
    tname_t *regs, *checks, *dels; /* topics.c */
    tname_t *quars;        /* copies never registered whose name is another topic's: not served */
    tname_t *waits;        /* reg.c: names with attaches waiting for the cluster */
    struct event *ev_wake; /* reg.c: runs the woken waits' attaches again */
    int64_t wake_all_ms;   /* reg.c: the next time every wait is tried again */
    bool topics_loaded;            /* the topics/ snapshot arrived */
    int64_t sweep_ms;              /* topics.c: the next look at this node's copies */
    bool controller, closing;
    bool forwarding; /* src/fwd forwards producers' sends: they stay on a role change */
    /* a clean stop began (mqd_repl_move_handover): this node follows nothing more and
       its followers left their in-sync sets */
    bool stopping;
    bool parts_loaded; /* the partitions/ snapshot arrived (before it: not ready) */
    struct event *ev_tick, *ev_kick;
    struct event *ev_cand; /* cand.c: the next read of the log-end reports */
    uint8_t *buf; /* raw reads, encodes, receives */
    size_t cap;
    struct rebal *rebal; /* rebal.c */
    struct hwck *hwck;   /* hwck.c */
    uint32_t redir_next; /* connredir.c: where the next turn over the nodes starts */
};

/* repl.c */
rpart_t *mqd_repl_part_find(mqd_repl_t *r, const char *topic, uint32_t part);
const mqd_cluster_node_t *mqd_repl_node(mqd_repl_t *r, uint32_t id);
void mqd_repl_kick(mqd_repl_t *r);
/* Where a link to partition part of t (-1: the whole topic; a partition t lacks: HERE,
 * for the caller to refuse) goes, by the serving rule (serve.c) over the partitions it
 * spans: MQD_REPL_SERVE_HERE (this node leads them all), MQD_REPL_SERVE_WAIT (*why: what
 * for) or MQD_REPL_SERVE_REDIRECT (*to: the leader of the first partition led elsewhere). */
int mqd_repl_where(mqd_repl_t *r, mqd_topic_t *t, int64_t part, mqd_redirect_t *to,
                   const char **why);
/* The same for a receiver of the whole topic with mqd:fwd-local-only (serve.c's
 * mqd_repl_serve_led): HERE when this node leads at least one partition of t, WAIT
 * (*why) while one may soon be led here, else MQD_REPL_SERVE_REDIRECT: it leads none. */
int mqd_repl_where_led(mqd_repl_t *r, mqd_topic_t *t, const char **why);
/* The serving rule's verdict for rp alone, as this node stands now. */
mqd_repl_serve_t mqd_repl_part_serve(const rpart_t *rp);
/* "HOST:PORT" / "[V6]:PORT" into to's host and port. */
bool mqd_repl_split_hostport(const char *a, mqd_redirect_t *to);
int mqd_repl_grow(mqd_repl_t *r, size_t need);
uint32_t mqd_repl_min_isr(const mqd_repl_t *r, const rpart_t *rp);
/* May this leader acknowledge now: lease live and not fenced since a lease loss. */
bool mqd_repl_may_ack(const rpart_t *rp);
void mqd_repl_refresh(rpart_t *rp);
/* Writes rp's state ps with a compare on rp->mod_rev (one at a time per partition). */
int mqd_repl_part_cas(rpart_t *rp, const mqd_repl_pstate_t *ps);
/* The same, with done(arg, written) called when etcd answered (or the request failed):
 * written is true only when this state is the one etcd now holds. */
typedef void (*mqd_repl_cas_done_fn)(void *arg, bool written);
int mqd_repl_part_cas_cb(rpart_t *rp, const mqd_repl_pstate_t *ps, mqd_repl_cas_done_fn done,
                         void *done_arg);

/* Stops rp's role and drops every pointer it holds into its local replica (its commit
 * subscription, the replica itself); the partition state stays. */
void mqd_repl_unbind(rpart_t *rp);
/* rp's key went from etcd: unbound and taken out of the table (freed once no truncation
 * of its log runs, which calls back with rp). */
void mqd_repl_part_drop(rpart_t *rp);
void mqd_repl_part_free(rpart_t *rp);

/* topics.c: replicated topics' lifecycle. Every registration carries an identity (a
 * random 128-bit id, Kafka's topic ID of KIP-516) that the node keeps with its copy
 * (mqd_topic_uid); a copy whose identity etcd no longer has is deleted here, never
 * registered again. Delete, alter and add partitions from any node go through etcd. */
rtopic_t *mqd_repl_topic_find(mqd_repl_t *r, const char *name);
void mqd_repl_topic_created(void *arg, mqd_topic_t *t); /* the topic_created hook */
int mqd_repl_topic_delete(void *arg, const char *name, mqd_repl_done_fn done, void *done_arg,
                          char *err, size_t errlen);
int mqd_repl_topic_alter(void *arg, const char *name, uint32_t nparts, const char *overrides_json,
                         mqd_repl_done_fn done, void *done_arg, char *err, size_t errlen);
/* The topics/ watch. */
void mqd_repl_on_topics(void *arg, mqd_etcd_ev_t ev, const mqd_etcd_kv_t *kvs, size_t n,
                        int64_t rev);
/* A registration read (the watch, or an answer that holds it): kept, placed by the
 * controller, applied to this node's copy at once when `now`. */
void mqd_repl_topic_put(mqd_repl_t *r, const mqd_etcd_kv_t *kv, bool now);
/* Brings this node's copy t in line with etcd (the registration's settings and size,
 * deleted as an older topic of the name, registered, or quarantined: see topics.c). */
void mqd_repl_topic_reconcile(mqd_repl_t *r, mqd_topic_t *t);
/* This node's copy of `name` was never registered and the name is another topic's: kept,
 * not served. */
bool mqd_repl_topic_quarantined(mqd_repl_t *r, const char *name);
/* This node's copy of rp's topic for the replica of rp: created from the registration
 * when it has none, grown to it; NULL while it may not be bound (no registration yet, a
 * state placed for another registration of that name, an old copy being deleted). */
mqd_part_t *mqd_repl_topic_replica(mqd_repl_t *r, rpart_t *rp);
/* A partition key of `name` went: the controller places what the registration lacks. */
void mqd_repl_topic_parts_gone(mqd_repl_t *r, const char *name);
/* The tick: deletions waiting, parts waiting to be freed, a periodic look at copies. */
void mqd_repl_topic_tick(mqd_repl_t *r, int64_t now_ms);
void mqd_repl_topics_free(mqd_repl_t *r);

/* reg.c: topics' registrations in etcd, and where a link to a topic goes.
 * In a cluster every topic is registered (Kafka's topics are cluster metadata): a name
 * that is not `$...` (temporary reply nodes, $management) and not a dead-letter topic
 * T/$DeadLetterQueue (kept on the node that dead-letters, as before). */
bool mqd_repl_cluster_name(const char *name);
/* Registers this node's copy t (create if absent, under its identity or a new one; its
 * partitions placed on this node in the same txn when its replication_factor is 1). */
void mqd_repl_topic_register(mqd_repl_t *r, mqd_topic_t *t);
/* The registered settings with replication_factor = the registration's (malloc'd JSON
 * text, NULL for none or no memory): a copy's settings then say what the cluster holds. */
char *mqd_repl_topic_config(const rtopic_t *rt);
/* The hooks route, topic_create, topic_describe and topic_names (core.h). */
int mqd_repl_route(void *arg, const char *name, mqd_topic_t *t, int64_t part, bool may_create,
                   bool may_wait, mqd_redirect_t *to, const char **cond, char *err, size_t errlen,
                   bool *created);
bool mqd_repl_route_send(void *arg, const char *name, mqd_topic_t *t);
int mqd_repl_topic_create(void *arg, const char *name, uint32_t nparts, const char *overrides_json,
                          mqd_repl_done_fn done, void *done_arg, char *err, size_t errlen);
bool mqd_repl_topic_describe(void *arg, const char *name, mqd_topic_t *t, pn_data_t *d);
void mqd_repl_topic_names(void *arg, void (*fn)(void *fn_arg, const char *name), void *fn_arg);
/* status.c: the topic_routes hook (core.h) */
bool mqd_repl_topic_routes(void *arg, const char *name, pn_data_t *d);
/* connredir.c: the conn_redirect hook (core.h); the partitions node `id` leads by this
 * node's view of etcd (this node: also those whose leader role it plays) */
bool mqd_repl_conn_redirect(void *arg, int mode, const char *topic, int64_t part,
                            mqd_redirect_t *to);
uint32_t mqd_repl_led_by(mqd_repl_t *r, uint32_t id);
/* Links waiting for `name` attach again soon (its registration, placement or copy moved). */
void mqd_repl_wake(mqd_repl_t *r, const char *name);
int mqd_repl_waits_new(mqd_repl_t *r);
/* The tick: waits past their time are given up (their links refused), and every wait is
 * tried again once a second (a leader's address learnt, a node back). */
void mqd_repl_waits_tick(mqd_repl_t *r, int64_t now_ms);
void mqd_repl_waits_free(mqd_repl_t *r);

/* repl.c: a partition state read (the watch, or an answer that holds it). */
void mqd_repl_part_put(mqd_repl_t *r, const mqd_etcd_kv_t *kv);

/* behind.c: the leader refused the fetch as below its log start (info mqd:log-start):
 * empties rp's replica and restarts it there, then fetches again. */
void mqd_repl_fol_behind(rpart_t *rp, uint32_t leader, pn_data_t *info);

/* epoch.c: over the stable records of log, the offset where epochs <= e end (the first
 * record of a later epoch, or the stable offset) and the largest epoch <= e found there
 * (that of the record before *end; 0 for none). */
int mqd_repl_epoch_end(mqd_repl_t *r, mqd_plog_t *log, uint32_t e, uint64_t *end,
                       uint32_t *largest);

/* status.c: the cluster status map ($management, mqctl cluster status) */
void mqd_repl_status(mqd_repl_t *r, pn_data_t *d);
/* metrics.c: the /metrics gauges */
struct evbuffer;
void mqd_repl_metrics(mqd_repl_t *r, struct evbuffer *b);

/* ctl.c: the controller places topics that have no partition keys yet */
void mqd_repl_ctl_topic(mqd_repl_t *r, rtopic_t *t);
void mqd_repl_ctl_scan(mqd_repl_t *r);
/* Elects a new leader (from the in-sync set; outside it only with unclean_leader_election)
 * for every partition whose leader's node is gone, with the epoch raised by one. */
void mqd_repl_ctl_failover(mqd_repl_t *r);
/* Hands rp, which names this node leader from before its restart, to the first live other
 * in-sync replica in epoch + 1 (the CAS is sent); MQD_EAGAIN while there is none. */
int mqd_repl_ctl_handover(mqd_repl_t *r, rpart_t *rp);

/* leader.c */
int mqd_repl_lead_start(rpart_t *rp);
void mqd_repl_lead_stop(rpart_t *rp);
void mqd_repl_lead_attach(mqd_repl_t *r, mqd_conn_t *c, pn_link_t *l, const char *addr);
void mqd_repl_lead_event(mqd_repl_t *r, mqd_lstate_t *ls, pn_event_t *e);
void mqd_repl_lead_gone(mqd_repl_t *r, mqd_lstate_t *ls);
void mqd_repl_lead_work(rpart_t *rp, int64_t now_ms); /* HW, pumps; ISR when now_ms */
void mqd_repl_lead_isr_changed(rpart_t *rp);
/* The topic's producer and consumer links bound to rp's partition (or to the whole
 * topic) are detached: with amqp:link:redirect to where an attach would go now, else
 * amqp:link:detach-forced. Called whenever rp's role changed and this node does not serve
 * it any more (mqd_repl_part_serve), and by a leader that stops. */
void mqd_repl_detach_links(rpart_t *rp);
/* rp's state names this node leader in another epoch than it leads in (an operator's
 * write): its records take the new epoch and its followers attach again under it. */
void mqd_repl_lead_epoch(rpart_t *rp);

/* gstate.c: group offsets, transaction decisions and the dedup window on failover: the
 * group_saved hook, a follower's appended run, this node taking the lead, lead_stop. */
void mqd_repl_group_saved(void *arg, mqd_topic_t *t, uint32_t part, const char *group,
                          uint64_t floor);
/* A follower's run (appended) that holds group-offset or COMMIT records
 * (mqd_repl_run_scan's has_state): saves them to meta.db in one transaction. */
void mqd_repl_fol_state(rpart_t *rp, const uint8_t *data, size_t len);
void mqd_repl_lead_state(rpart_t *rp);
void mqd_repl_gstate_free(lead_t *ld);

/* follower.c */
int mqd_repl_fol_start(rpart_t *rp);
void mqd_repl_fol_stop(rpart_t *rp);
void mqd_repl_fol_work(rpart_t *rp, int64_t now_ms);
/* A leader stepping down (lead_stop): its waiting sends wait for the next leader's
 * watermark as this node follows it, unless it will not (closing, stopping, the topic
 * going): then they are rejected "send it again". */
void mqd_repl_fol_doubt(rpart_t *rp);
/* Rejects the sends still in doubt (from offset `from` on): their records are gone, or
 * this node does not follow the partition to learn their fate. */
void mqd_repl_fol_doubt_end(rpart_t *rp, uint64_t from);
/* The node stops cleanly: the fetch link is closed with MQD_REPL_LEAVING (sent at once)
 * and not attached again. */
void mqd_repl_fol_leave(rpart_t *rp);
/* rp's state moved to another epoch under the same leader: a fetch link attached under
 * the old one is closed and attached again with the new mqd:epoch. */
void mqd_repl_fol_epoch(rpart_t *rp);

/* move.c: leadership moved on purpose — `mqctl cluster elect T P NODE` (the repl hook
 * `elect`), a clean SIGTERM's handover (`handover`) — and /readyz (`ready`). */
int mqd_repl_move_elect(void *arg, const char *topic, uint32_t part, uint32_t node,
                        mqd_repl_done_fn done, void *done_arg, char *err, size_t errlen);
size_t mqd_repl_move_handover(void *arg, void (*done)(void *done_arg), void *done_arg);
bool mqd_repl_move_ready(void *arg, char *why, size_t whylen);
/* A leader whose log failed hands the partition to another live in-sync replica (the
 * tick calls it; nothing while healthy); may_resume is the core hook that keeps such a
 * log failed while this node leads it. */
void mqd_repl_move_failed_lead(rpart_t *rp);
bool mqd_repl_move_may_resume(void *arg, mqd_part_t *p);

/* move.c: writes rp's state with `to` leading in epoch + 1, first in the in-sync list
 * (the rest kept), by CAS (mqd_repl_part_cas): the move of `mqctl cluster elect`. *epoch:
 * the epoch written. MQD_EAGAIN while another change of rp is in flight. */
int mqd_repl_move_to(rpart_t *rp, uint32_t to, uint32_t *epoch);

/* rebal.c: automatic preferred-leader rebalancing (auto_leader_rebalance). tick: every
 * REPL_TICK_MS (the periodic check, nodes' up times); xfer: a leader's move in progress,
 * from every work() pass while rp->xfer_to is set; moves: how many this node made. */
int mqd_repl_rebal_new(mqd_repl_t *r);
void mqd_repl_rebal_free(mqd_repl_t *r);
void mqd_repl_rebal_tick(mqd_repl_t *r, int64_t now_ms);
void mqd_repl_rebal_xfer(rpart_t *rp, int64_t now_ms);
uint64_t mqd_repl_rebal_moves(const mqd_repl_t *r);
#define REBAL_REFUSAL                                                                              \
    "this node is handing the partition to its preferred replica (leader rebalance): send "        \
    "again, to the new leader"

/* hwck.c: the high-watermark checkpoint (data_dir/MQD_REPL_HWCK_FILE). start: reads it (a
 * damaged file is ignored with a warning), gives every replicated partition on disk the
 * watermark it may trust from it (mqd_part_set_hw) and starts the writer thread; tick:
 * every hw_checkpoint_interval_ms the watermarks that changed go to the writer; stop (a
 * clean stop, before the roles end): the writer joined, the last values written here. */
int mqd_repl_hwck_start(mqd_repl_t *r);
void mqd_repl_hwck_tick(mqd_repl_t *r, int64_t now_ms);
void mqd_repl_hwck_stop(mqd_repl_t *r);
/* What a checkpoint entry e lets log expose: min(e->hw, the stable offset, where records
 * of epochs <= e->epoch end), so never above what the log holds after recovery or any
 * truncation, nor over records written again in a later epoch; 0 on a read error. */
uint64_t mqd_repl_hwck_trusted(mqd_repl_t *r, mqd_plog_t *log, const mqd_repl_hwck_ent_t *e);

/* cand.c: election by log end. When a leader's node goes, each live in-sync follower of
 * its partitions writes its log end to etcd (report); the controller waits for them
 * (at most CAND_WAIT_MS) and elects the longest log among them (ready: true once it may
 * elect, with *pick the preferred node or 0 for the in-sync order). */
#define CAND_WAIT_MS 1000
void mqd_repl_cand_report(mqd_repl_t *r, uint32_t gone);
bool mqd_repl_cand_ready(rpart_t *rp, int64_t now_ms, uint32_t *pick);
void mqd_repl_cand_reset(rpart_t *rp);
/* Deletes every report of topic/part (the controller, once its election is decided). */
void mqd_repl_cand_clear(mqd_repl_t *r, const char *topic, uint32_t part);
/* The ev_cand callback: reads again (mqd_repl_ctl_failover) sooner than the tick. */
void mqd_repl_cand_again(evutil_socket_t fd, short what, void *arg);

/* probe.c: fast failover for a node whose process died (dead.c decides). closed: a
 * connection of this node to node id ended (a follower's fetch connection); start: the
 * watch of the dead/ reports (the controller confirms them); revoked: this node revoked
 * id's current lease on that proof. */
void mqd_repl_dead_closed(mqd_repl_t *r, uint32_t id);
int mqd_repl_dead_start(mqd_repl_t *r);
void mqd_repl_dead_free(mqd_repl_t *r);
bool mqd_repl_dead_revoked(mqd_repl_t *r, uint32_t id);

#endif
