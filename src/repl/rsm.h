/* repl/rsm: the replication decisions of one partition as a pure state machine (issue 34).
 *
 * Events in, actions out: mqd_rsm_step(ctx, state, event, out) reads nothing but its
 * arguments and writes nothing but the state and the action list. No etcd, no Proton, no
 * store, no clock (every event carries now_ms), no logger (a log line is an action), no
 * allocation. The driver (today repl.c and the files around it; the next step of issue
 * 34 rewires them onto this core) turns etcd's watch, the lease, the tick, the log's
 * stable offset and the fetch links into events, and performs the actions.
 *
 * The rules are the ones of ctl.c (election), cand.c (the log-end wait), leader.c
 * (isr_check, watermark, the fetch attach checks), mqd_repl_may_ack (fencing),
 * follower.c (runs, truncate_to_leader), move.c (hand-over, moves) as they are on main;
 * docs/replication.md "Decision core and simulation" says how they are tested:
 * tests/unit/repl/test_rsm (scripted scenarios, tests/unit/repl/rsm/ *.txt) and
 * tests/unit/repl/sim_rsm (a seeded simulation of a whole cluster on this core).
 *
 * Every partition-state change is built by mqd_rsm_change (rsm_change.c): failover,
 * hand-over of a restarted leader, a leader's move (rebalance, operator, shutdown), an
 * in-sync set change.
 */
#ifndef MQD_REPL_RSM_H
#define MQD_REPL_RSM_H

#include "repl/repl.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MQD_RSM_MAX_NODES 64   /* the liveness set's capacity */
#define MQD_RSM_MAX_ACTIONS 24 /* one step never emits more */
#define MQD_RSM_TEXT 200       /* a log action's text */

/* ---- the context: what the node knows beside the partition ---- */
typedef struct mqd_rsm_ctx {
    uint32_t self;
    uint32_t replica_lag_ms; /* a follower not caught up for this long leaves the in-sync set */
    uint32_t lease_ms;       /* lease_ttl_ms */
    uint32_t cand_wait_ms;   /* the longest wait for the candidates' log-end reports */
    uint32_t reattach_ms;    /* a follower's pause before it fetches again */
    uint32_t min_isr;        /* min_insync_replicas (acks = all) */
    bool unclean;            /* unclean_leader_election of the partition's topic */
    bool controller;         /* this node runs failovers */
    bool stopping;           /* a clean shutdown: followers leave, leaders hand over */
    uint32_t n_alive;
    uint32_t alive[MQD_RSM_MAX_NODES]; /* nodes whose key is in etcd (this node's view) */
} mqd_rsm_ctx_t;

bool mqd_rsm_alive(const mqd_rsm_ctx_t *ctx, uint32_t id);
void mqd_rsm_set_alive(mqd_rsm_ctx_t *ctx, uint32_t id, bool alive);

/* ---- the partition's replication state on this node ---- */
typedef enum { MQD_RSM_ROLE_NONE = 0, MQD_RSM_ROLE_LEADER, MQD_RSM_ROLE_FOLLOWER } mqd_rsm_role_t;

typedef enum {
    MQD_RSM_CAS_NONE = 0,
    MQD_RSM_CAS_ISR,      /* the leader's in-sync set */
    MQD_RSM_CAS_ELECT,    /* the controller's failover: reports cleared once it holds */
    MQD_RSM_CAS_HANDOVER, /* a restarted leader's */
    MQD_RSM_CAS_MOVE,     /* a move: rebalance, operator, shutdown */
    MQD_RSM_CAS_BUMP      /* a restarted leader that nobody could take it from: a new epoch */
} mqd_rsm_cas_kind_t;

/* The leader's view of one follower. */
typedef struct mqd_rsm_flw {
    uint32_t id;
    uint64_t link;      /* the current fetch link's id (the driver's), 0: none */
    bool leaving;       /* its node said it is stopping */
    uint64_t leo;       /* it holds everything below this (its settlements) */
    uint64_t probe_end; /* the leader's end at the previous tick */
    int64_t probe_ms, caught_ms;
} mqd_rsm_flw_t;

typedef struct mqd_rsm {
    mqd_repl_pstate_t ps; /* as last read from etcd or written by this node's CAS */
    int64_t mod_rev;      /* its mod_revision, 0: never read */
    mqd_rsm_role_t role;
    int64_t now_ms; /* of the last event */
    /* this replica's log */
    uint64_t stable, end;
    uint64_t hw; /* leader: the watermark; follower: the last one the leader sent */
    bool hw_known;
    /* fencing */
    bool lease_live, fenced, refresh_out;
    /* a CAS in flight */
    bool cas_out;
    mqd_rsm_cas_kind_t cas_kind;
    mqd_repl_pstate_t cas_ps;
    /* leader */
    uint32_t lead_epoch;  /* the epoch its appends carry */
    uint64_t epoch_start; /* its log end when it began to lead in lead_epoch */
    uint32_t n_flw;
    mqd_rsm_flw_t flw[MQD_REPL_MAX_RF];
    uint64_t ends_hw, ends_q; /* the visible ends last set */
    bool below_min;
    /* follower */
    uint32_t fol_leader;
    bool fol_linked, truncating;
    uint32_t link_epoch;
    uint64_t settled;
    int64_t attach_at_ms; /* 0: no attach waiting */
    /* a restarted leader: hand over, or lead after all (in a new epoch) at this time (0:
       not one) */
    int64_t handover_ms;
    /* the controller's election wait (cand.c) */
    int64_t cand_until_ms;
    bool cand_done, cand_out, offline;
    uint32_t cand_pick;
    bool cand_got[MQD_REPL_MAX_RF]; /* by position in ps.isr */
    uint64_t cand_end[MQD_REPL_MAX_RF];
} mqd_rsm_t;

/* A fresh state (a process start): nothing known, the lease live. */
void mqd_rsm_init(mqd_rsm_t *s);
/* May this node acknowledge as the partition's leader (mqd_repl_may_ack's rule)? */
bool mqd_rsm_may_ack(const mqd_rsm_ctx_t *ctx, const mqd_rsm_t *s);

/* ---- events ---- */
typedef enum {
    MQD_RSM_EV_STATE = 1,    /* ps, mod_rev; flag: read with the snapshot at start */
    MQD_RSM_EV_REFRESHED,    /* the state read again (flag: read; ps, mod_rev): lifts the fence */
    MQD_RSM_EV_LEASE,        /* flag: the lease is live */
    MQD_RSM_EV_TICK,         /* time passed */
    MQD_RSM_EV_STABLE,       /* offset: this log's stable offset, end: its end */
    MQD_RSM_EV_PROGRESS,     /* leader: node settled up to offset on link */
    MQD_RSM_EV_ATTACH,       /* leader: node attaches link: offset (its end), last_epoch (its
                                last record's), epoch (the leader epoch it expects, 0: none);
                                epoch_end, largest: where epochs <= last_epoch end in this log
                                and the largest such epoch; log_start */
    MQD_RSM_EV_LEAVE,        /* leader: node's link went (flag: its node said it stops) */
    MQD_RSM_EV_NODE_LEFT,    /* node's key went (ctx already without it) */
    MQD_RSM_EV_REPORT,       /* controller: node reported end in epoch */
    MQD_RSM_EV_REPORTS_READ, /* controller: every report of one read was delivered */
    MQD_RSM_EV_CAS,          /* flag: the CAS held; mod_rev: its revision */
    MQD_RSM_EV_RUN,          /* follower: a run at offset of count records, newest record's
                                epoch, the leader's hw */
    MQD_RSM_EV_LINK_DOWN,    /* follower: the fetch link closed: cond (mqd_rsm_cond_t); for
                                DIVERGED epoch, epoch_end (the leader's) and offset (where that
                                epoch ends here); for BELOW_START log_start */
    MQD_RSM_EV_TRUNCATED,    /* follower: the truncation is done (end: the new end) */
    MQD_RSM_EV_SEND,         /* leader: a send of acks level (mqd_acks_t) asks to be taken */
    MQD_RSM_EV_MOVE,         /* move the lead to node (rebalance, operator) */
} mqd_rsm_ev_type_t;

typedef enum {
    MQD_RSM_COND_CLOSED = 0, /* no condition: the connection or link went */
    MQD_RSM_COND_DIVERGED,
    MQD_RSM_COND_BELOW_START,
    MQD_RSM_COND_STALE_EPOCH,
    MQD_RSM_COND_NOT_FOUND,      /* the node does not lead that partition */
    MQD_RSM_COND_UNAUTHORIZED,   /* not a replica */
    MQD_RSM_COND_PRECONDITION,   /* this leader's epoch is older than the follower's */
    MQD_RSM_COND_RESOURCE_LIMIT, /* sends: below min_insync_replicas; leadership changed */
} mqd_rsm_cond_t;

typedef struct mqd_rsm_ev {
    mqd_rsm_ev_type_t type;
    int64_t now_ms;
    bool flag;
    uint32_t node, epoch, last_epoch, largest, count, acks;
    mqd_rsm_cond_t cond;
    uint64_t offset, end, hw, epoch_end, log_start, link;
    int64_t mod_rev;
    mqd_repl_pstate_t ps;
} mqd_rsm_ev_t;

/* ---- actions ---- */
typedef enum {
    MQD_RSM_ACT_LEAD = 1,       /* become the leader (epoch) */
    MQD_RSM_ACT_FOLLOW,         /* become a follower of node (epoch) */
    MQD_RSM_ACT_NO_ROLE,        /* stop leading or following */
    MQD_RSM_ACT_CAS,            /* write ps if the key's mod_revision is still mod_rev */
    MQD_RSM_ACT_SET_ENDS,       /* leader: the visible ends: hw (acks = all), offset (quorum) */
    MQD_RSM_ACT_SET_HW,         /* follower: the watermark the leader sent */
    MQD_RSM_ACT_REJECT_WAITING, /* sends waiting for acks level or above: rejected (cond) */
    MQD_RSM_ACT_REJECT_SEND,    /* this send: refused (cond) */
    MQD_RSM_ACT_DROP_LINK,      /* leader: node's fetch link (0: every follower's) */
    MQD_RSM_ACT_ACCEPT_LINK,    /* leader: serve node's link from offset */
    MQD_RSM_ACT_REFUSE_LINK,    /* leader: refuse node's attach (cond; DIVERGED: epoch and
                                   offset = its end here; BELOW_START: offset = log start) */
    MQD_RSM_ACT_ATTACH,         /* follower: attach to node, fetching from offset, epoch */
    MQD_RSM_ACT_DETACH,         /* follower: close the fetch link (flag: as a stopping node) */
    MQD_RSM_ACT_APPEND,         /* follower: append the run of the event */
    MQD_RSM_ACT_RESYNC,         /* follower: reject the run, close the link, fetch again later */
    MQD_RSM_ACT_SETTLE,         /* follower: settle the runs below offset (stable) */
    MQD_RSM_ACT_TRUNCATE,       /* follower: cut the log back to offset */
    MQD_RSM_ACT_RESET,          /* follower: empty the replica, restart it at offset */
    MQD_RSM_ACT_REFRESH,        /* read the partition's key again (linearizable) */
    MQD_RSM_ACT_READ_REPORTS,   /* controller: read the candidates' log-end reports */
    MQD_RSM_ACT_REPORT_END,     /* write this replica's log end (offset) in epoch */
    MQD_RSM_ACT_CLEAR_REPORTS,  /* controller: delete the partition's reports */
    MQD_RSM_ACT_LOG,            /* level (MQD_RSM_LOG_*), text */
} mqd_rsm_act_type_t;

typedef enum { MQD_RSM_LOG_INFO = 0, MQD_RSM_LOG_NOTICE, MQD_RSM_LOG_WARN } mqd_rsm_log_t;

typedef struct mqd_rsm_act {
    mqd_rsm_act_type_t type;
    uint32_t node, epoch, acks;
    bool flag;
    mqd_rsm_cond_t cond;
    mqd_rsm_log_t level;
    uint64_t offset, hw;
    int64_t mod_rev;
    mqd_repl_pstate_t ps;
    char text[MQD_RSM_TEXT];
} mqd_rsm_act_t;

typedef struct mqd_rsm_out {
    size_t n;
    bool overflow; /* more actions than MQD_RSM_MAX_ACTIONS: a bug */
    mqd_rsm_act_t a[MQD_RSM_MAX_ACTIONS];
} mqd_rsm_out_t;

/* One event: updates s and appends its actions to out (out->n is not reset). */
void mqd_rsm_step(const mqd_rsm_ctx_t *ctx, mqd_rsm_t *s, const mqd_rsm_ev_t *ev,
                  mqd_rsm_out_t *out);

const char *mqd_rsm_act_name(mqd_rsm_act_type_t t);
const char *mqd_rsm_ev_name(mqd_rsm_ev_type_t t);
const char *mqd_rsm_cond_name(mqd_rsm_cond_t c);

/* ---- the one builder of partition-state changes (rsm_change.c) ---- */
typedef enum {
    MQD_RSM_CHG_FAILOVER, /* the leader is gone: prefer (0: none) or the first live in-sync
                             replica leads; the old leader leaves the in-sync set; with no
                             live in-sync replica, the first live replica if unclean */
    MQD_RSM_CHG_HANDOVER, /* a restarted leader: as a failover, never unclean, and it stays
                             in the in-sync set, last */
    MQD_RSM_CHG_MOVE,     /* to leads (it must be a live in-sync replica); drop (0: none)
                             leaves the in-sync set (a stopping or failed leader) */
    MQD_RSM_CHG_ISR       /* the in-sync set becomes isr[0..n_isr) (the leader first); the
                             leader and the epoch stay */
} mqd_rsm_chg_kind_t;

typedef struct mqd_rsm_chg {
    mqd_rsm_chg_kind_t kind;
    uint32_t to;   /* FAILOVER: preferred; MOVE: the new leader */
    uint32_t drop; /* MOVE */
    bool unclean;  /* FAILOVER: may elect a replica out of sync */
    const uint32_t *isr;
    uint32_t n_isr; /* ISR */
} mqd_rsm_chg_t;

/* The next state of cur after change c, the liveness of ctx: 0, MQD_EAGAIN when nobody
 * may lead (no live in-sync replica), MQD_EINVAL for a move to a node not in sync or not
 * alive, or an in-sync set without the leader. *unclean (may be NULL) tells whether an
 * out-of-sync replica was elected. The epoch goes up by one whenever the leader may
 * change (every kind but ISR). */
int mqd_rsm_change(const mqd_rsm_ctx_t *ctx, const mqd_repl_pstate_t *cur, const mqd_rsm_chg_t *c,
                   mqd_repl_pstate_t *next, bool *unclean);

#ifdef MQD_RSM_BUGS
/* sim_rsm only (tests/unit/repl/sim_rsm.c, --bug): past bugs put back, to show that the
 * simulation finds them. The library is built without. */
enum {
    MQD_RSM_BUG_ELECT_FIRST = 1u << 0,     /* the log-end reports ignored: first in-sync */
    MQD_RSM_BUG_SKIP_DIVERGENCE = 1u << 1, /* an attach accepted without the epoch check */
    MQD_RSM_BUG_ACK_UNSYNCED = 1u << 2,    /* a follower settles what it has not synced */
    MQD_RSM_BUG_HW_FROM_LOG = 1u << 3,     /* a new leader's watermark is its stable offset */
    MQD_RSM_BUG_UNCLEAN = 1u << 4,         /* unclean election whatever the topic says */
    MQD_RSM_BUG_STALE_FETCH = 1u << 5,     /* progress taken from any link of the follower */
    /* main's rules the simulation found wrong (docs/replication.md) */
    MQD_RSM_BUG_SAME_EPOCH = 1u << 6, /* a restarted leader leads again in its old epoch */
    MQD_RSM_BUG_STATE_ISR = 1u << 7,  /* the watermark ignores a rejoin CAS in flight */
    MQD_RSM_BUG_REJOIN_HW = 1u << 8,  /* a follower rejoins at the watermark alone */
};
extern unsigned mqd_rsm_bugs;
#define MQD_RSM_BUG(b) ((mqd_rsm_bugs & MQD_RSM_BUG_##b) != 0)
#else
#define MQD_RSM_BUG(b) 0
#endif

#endif
