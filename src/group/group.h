/* group: consumer groups of a topic. The shared group `$shared` (plain address T) hands
 * any partition's records to any of its links (queue semantics); other groups
 * (T/ConsumerGroups/G) assign each partition to one link at a time. Committed offsets
 * (next offset to consume, per partition) are kept on the server in meta.db, in batches.
 * Event-loop thread only. */
#ifndef MQD_GROUP_H
#define MQD_GROUP_H

#include "mqd.h"
#include "core/core.h"

#define MQD_SHARED_GROUP "$shared"

typedef enum { MQD_GROUP_SHARED = 1, MQD_GROUP_EXCLUSIVE = 2 } mqd_group_mode_t;

typedef struct mqd_group_part_info {
    uint32_t partition;
    uint64_t committed;   /* next offset the group consumes */
    uint64_t log_start;   /* first offset on disk */
    uint64_t log_end;     /* visible end (mqd_part_visible_end, read-uncommitted) */
    uint64_t lag;         /* log_end - committed (0 if committed is ahead) */
    uint64_t backlog;     /* messages in [committed, log_end): lag less transaction markers */
    uint64_t inflight;    /* delivered, not settled */
    const char *owner;    /* "peer/link-name" of the owning link (exclusive mode), or NULL */
} mqd_group_part_info_t;

/* Each group of `t` known in memory or in meta.db: name (lower-cased), mode, live links. */
typedef int (*mqd_group_cb)(const char *group, mqd_group_mode_t mode, size_t members, void *arg);
int mqd_group_list(struct mqd_topic *t, mqd_group_cb cb, void *arg);

/* One callback per partition; MQD_ENOENT for an unknown group. */
typedef int (*mqd_group_part_cb)(const mqd_group_part_info_t *pi, void *arg);
int mqd_group_describe(struct mqd_topic *t, const char *group, mqd_group_part_cb cb, void *arg);
/* The topic's queue ($shared) before any queue consumer used it (no member ever, no
 * stored offset): lists, lag metrics and alerts leave it out, since its "lag" is the
 * whole topic while nobody reads it as a queue (issue 38 point 3). */
bool mqd_group_unused_queue(struct mqd_topic *t, const char *group);

typedef enum {
    MQD_RESET_EARLIEST = 0, /* every partition to its start offset */
    MQD_RESET_LATEST,       /* to its end */
    MQD_RESET_OFFSET,       /* to `value` (clamped to [start, end]) */
    MQD_RESET_TIME,         /* to the first offset with timestamp >= value (ms) */
    MQD_RESET_SHIFT,        /* by `value` (may be negative) from the committed offset */
} mqd_reset_t;

/* Where partition i of t would move to by how/value (MQD_RESET_SHIFT: from `committed`),
 * clamped to the partition's start and visible end as the seek clamps. */
uint64_t mqd_group_reset_target(struct mqd_topic *t, uint32_t i, mqd_reset_t how, int64_t value,
                                uint64_t committed);
/* Moves partition i of the group to to[i] for each i < n whose to[i] is not UINT64_MAX
 * (the others keep their offsets), persisted in one transaction before returning.
 * MQD_ESTATE while the group has live links. Creates the group if it does not exist. */
int mqd_group_seek(struct mqd_topic *t, const char *group, const uint64_t *to, uint32_t n);

/* Moves a group's committed offsets; only while it has no live links (MQD_ESTATE),
 * persisted before returning. Creates the group if it does not exist. */
int mqd_group_reset(struct mqd_topic *t, const char *group, mqd_reset_t how, int64_t value);
/* Sets one partition's committed offset (clamped to the log's start and visible end),
 * persisted before returning; the other partitions keep theirs (a group this creates
 * starts them at their log start). MQD_ESTATE while the group has live links,
 * MQD_ENOENT for a partition the topic does not have. */
int mqd_group_commit(struct mqd_topic *t, const char *group, uint32_t partition, uint64_t offset);
/* Forgets a group and its offsets; MQD_ESTATE while it has links, MQD_ENOENT. */
int mqd_group_delete(struct mqd_topic *t, const char *group);

/* A record's delivery state as the cursor hands it out: the number of earlier failed
 * attempts (header delivery-count to add) and whether a link acquired it before. */
#define MQD_DC_SEEN 0x80000000u
#define MQD_DC_COUNT(v) ((v) & ~MQD_DC_SEEN)

/* A group's position in one partition, and a consumer group of a topic: opaque outside
 * group/ (group_int.h); the accessors below are what the others read. */
typedef struct mqd_cursor mqd_cursor_t;
typedef struct mqd_group mqd_group_t;

/* The group's cursor of partition i (NULL when the group has fewer partitions: it grows
 * with the topic, mqd_group_resize); its partitions; its live links; its mode, name and
 * topic. */
mqd_cursor_t *mqd_group_cursor(mqd_group_t *g, uint32_t i);
uint32_t mqd_group_nparts(const mqd_group_t *g);
size_t mqd_group_members(const mqd_group_t *g);
mqd_group_mode_t mqd_group_mode(const mqd_group_t *g);
const char *mqd_group_name(const mqd_group_t *g);
mqd_topic_t *mqd_group_topic(const mqd_group_t *g);
/* The cursor's committed offset (every offset below it is done); whether it changed
 * since it was last saved; its redelivery list (ascending offsets, *n of them) and that
 * list's generation (bumped when an offset joins it). */
uint64_t mqd_cursor_floor(const mqd_cursor_t *cur);
bool mqd_cursor_dirty(const mqd_cursor_t *cur);
const uint64_t *mqd_cursor_redeliver(const mqd_cursor_t *cur, size_t *n, uint64_t *gen);

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
/* Has the group settled `offset` for good (below the committed offset, or done above
 * it)? What a queue browser leaves out (amqp/consumer.c). */
bool mqd_cursor_settled(const mqd_cursor_t *cur, uint64_t offset);
uint32_t mqd_cursor_take(mqd_cursor_t *cur, uint64_t offset);
/* Service Bus deferral (docs/servicebus.md). A delivered record is deferred: out of the
 * delivery of every link, not done, kept until settled through the queue's management
 * node (mqd_cursor_skip completes it); saved with the group's state (0, or MQD_ENOMEM:
 * then it went back to the queue). */
int mqd_cursor_defer(mqd_cursor_t *cur, uint64_t offset);
bool mqd_cursor_is_deferred(const mqd_cursor_t *cur, uint64_t offset);
/* Is `offset` delivered to a link and not settled? */
bool mqd_cursor_is_held(const mqd_cursor_t *cur, uint64_t offset);
/* The earliest time (ms) a scheduled record the cursor hides is due, INT64_MAX if none
 * (scheduled messages: records flagged MQD_REC_SCHEDULED are not handed out before the
 * time in their x-opt-scheduled-enqueue-time; mqd_cursor_next hands them out after). */
int64_t mqd_cursor_sched_next(const mqd_cursor_t *cur);
/* A scheduled record (MQD_REC_SCHEDULED) a scan reached: true when its time is ahead,
 * then it is hidden (not free) until mqd_cursor_sched_release frees it (the plain scan
 * calls it; a link with a selector does, amqp/consumer.c). */
bool mqd_cursor_sched_hide(mqd_cursor_t *cur, const mqd_rec_t *rec);
/* Hidden scheduled records whose time came join the redelivery list; true if any did. */
bool mqd_cursor_sched_release(mqd_cursor_t *cur);
/* Forgets what is in flight (held offsets, the redelivery list, the read-ahead) and
 * reads again from the committed offset, skipping what is done: the partition's lead
 * moved to or from this node (mqd_groups_lead_moved). */
void mqd_cursor_reread(mqd_cursor_t *cur);
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
/* A replica's leader logged `floor` as group `name`'s committed offset of partition i
 * (src/repl): the group's cursor here, if it has one, moves there when
 * mqd_group_follow_moves says so (a node that stepped down keeps its groups; their
 * members were detached). A link reading it here is logged as a warning: only the leader
 * serves a partition's links (repl/serve.c). */
void mqd_group_follow_floor(mqd_topic_t *t, const char *name, uint32_t i, uint64_t floor);
/* The rule (pure): does a cursor with `inflight` records out, that has delivered every
 * offset below next_read, move to the leader's committed offset `floor`? With no link
 * reading it here (!live) it does, either way: the leader's offset is the group's
 * position for a partition this node follows (the cursor then agrees with meta.db, which
 * the follower wrote it to, and with what a restart loads). A live link must never get an
 * offset again that it had (offsets backwards on one link): forward only, to at least
 * next_read. Never while records are in flight: their settlements keep the bookkeeping. */
bool mqd_group_follow_moves(bool live, uint64_t inflight, uint64_t next_read, uint64_t floor);
/* This node took or left the lead of partition i of t (mqd_part_led changed; repl/, after
 * it detached the links that no longer go here). Every group's cursor of i reads again
 * from its committed offset (mqd_cursor_reread: what was in flight belongs to the lead
 * before; a local-only link's late settlement of it is ignored, amqp/consumer.c), an
 * exclusive group assigns its partitions again (local-only members get only the
 * partitions led here), and the topic is dispatched. */
void mqd_groups_lead_moved(mqd_topic_t *t, uint32_t i);
/* Writes g's changed cursors to meta.db now, in one transaction (synchronous = FULL:
 * durable when it returns); a failure is counted and logged as `what`. */
int mqd_group_save_now(mqd_group_t *g, const char *what);
/* Frees the scheduled records that came due in every cursor (mqd_cursor_sched_release)
 * and wakes their topics' consumers (the server's groups.scheduled timer). */
void mqd_groups_sched_tick(mqd_server_t *s);
/* persist.c: writes every dirty group position of every topic in one SQLite
 * transaction (force: even when the last persist was recent). */
void mqd_topics_persist(mqd_server_t *s, bool force);
/* The hooks core calls for a topic's groups (mqd_core_ops_t: groups_*), set by server/. */
void mqd_group_core_ops(mqd_core_ops_t *ops);

#endif
