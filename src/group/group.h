/* group: consumer groups of a topic. The shared group `$shared` (plain address T) hands
 * any partition's records to any of its links (queue semantics); other groups
 * (T/ConsumerGroups/G) assign each partition to one link at a time. Committed offsets
 * (next offset to consume, per partition) are kept on the server in meta.db, in batches.
 * Event-loop thread only. */
#ifndef MQD_GROUP_H
#define MQD_GROUP_H

#include "mqd.h"

struct mqd_topic;

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

typedef enum {
    MQD_RESET_EARLIEST = 0, /* every partition to its start offset */
    MQD_RESET_LATEST,       /* to its end */
    MQD_RESET_OFFSET,       /* to `value` (clamped to [start, end]) */
    MQD_RESET_TIME,         /* to the first offset with timestamp >= value (ms) */
} mqd_reset_t;

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

#endif
