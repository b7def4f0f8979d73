/* group internals: the cursor and group structs, shared by cursor.c, group.c and
 * persist.c; every other subsystem sees them through group.h's accessors. */
#ifndef MQD_GROUP_INT_H
#define MQD_GROUP_INT_H

#include "group/group.h"

/* ---- offsets waiting to be delivered again (sorted ascending) ---- */
typedef struct mqd_redeliver {
    uint64_t *v;
    size_t n, cap;
} mqd_redeliver_t;


/* ---- one group's position in one partition ---- */
struct mqd_cursor {
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
    /* deferred offsets (Service Bus' deferMessage, sorted): out of delivery, not done,
       settled through <queue>/$management (mgmt_sbus.c); saved with the done ranges */
    mqd_redeliver_t deferred;
    /* scheduled records the scan reached before their time: offset, due (ms), unordered;
       not saved (the time is in the record: a restart's scan hides them again) */
    struct mqd_sched { uint64_t off; int64_t due; } *sched;
    size_t sched_n, sched_cap;
    uint64_t inflight;   /* delivered, unsettled */
    bool dirty;          /* changed since last persisted */
    mqd_read_t rd;       /* read-ahead from next_read */
    size_t rd_pos;       /* next record in rd to hand out */
};

/* ---- a consumer group of a topic (group/group.c) ---- */
struct mqd_group {
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
    bool persisting;           /* persist.c: has state in the batch being committed */
    uint32_t save_failures;    /* persist.c: batches in a row that failed to save it */
    int64_t save_retry_ms;     /* persist.c: ... and when the next may try (backoff) */
    mqd_dlist_t node;          /* in topic->groups */
};

/* persist.c: a write of g's offsets to meta.db failed (rc) in `what` ("persist",
 * "commit", "reset"): counted (mqd_group_offset_commit_failures_total) and logged with the
 * group and topic. */
void group_save_failed(mqd_group_t *g, int rc, const char *what);

#endif
