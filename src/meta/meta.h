/* meta: the SQLite metadata database (WAL, synchronous=FULL): topics, partitions,
 * consumer groups and committed offsets, shared-mode ack ranges, leader epochs,
 * transaction records, small key/value state. Numbered migrations.
 *
 * One thread (the broker's event loop) uses a handle. Statements are prepared once.
 * Batching: callers wrap many writes in mqd_meta_begin/commit; nothing here opens a
 * transaction per message.
 */
#ifndef MQD_META_H
#define MQD_META_H

#include "mqd.h"

typedef struct mqd_meta mqd_meta_t;

/* Opens or creates `path`, applies pending migrations. */
int mqd_meta_open(const char *path, mqd_meta_t **out);
void mqd_meta_close(mqd_meta_t *m); /* NULL is a no-op */
int mqd_meta_schema_version(mqd_meta_t *m);
/* SQLite write transactions committed through this handle (for reports and tests). */
uint64_t mqd_meta_txn_count(const mqd_meta_t *m);

/* Explicit transaction around several writes (nesting is an error: MQD_ESTATE).
 * A write outside begin/commit runs in its own transaction. A failed write inside
 * begin/commit leaves the transaction open: the caller decides (usually rollback).
 * If COMMIT itself fails the transaction is rolled back and MQD_EDB returned. */
int mqd_meta_begin(mqd_meta_t *m);
int mqd_meta_commit(mqd_meta_t *m);
int mqd_meta_rollback(mqd_meta_t *m);
/* A transaction whose COMMIT writes the WAL without waiting for the disk (synchronous =
 * NORMAL for it alone): its changes are durable once a later mqd_meta_wal_sync returns
 * 0, or a later ordinary commit or checkpoint synced them, and only then may anyone be
 * told. Until then a crash may or may not keep them. */
int mqd_meta_begin_nosync(mqd_meta_t *m);
/* fdatasync of the WAL through a descriptor of its own: safe on another thread than the
 * handle's (but one thread at a time, and not after mqd_meta_close). Makes every commit
 * that returned before it was called durable. 0 or MQD_EIO. */
int mqd_meta_wal_sync(mqd_meta_t *m);

/* ---- topics ---- */
typedef struct mqd_meta_topic {
    char name[256];
    uint32_t partitions;
    int64_t created_ms;
    char *config_json; /* may be NULL. After mqd_meta_topic_get the caller owns it (free());
                          in a mqd_meta_topic_list callback it is borrowed until cb returns */
    char uid[40];      /* a replicated topic's identity (mqd_meta_topic_set_uid), or "" */
} mqd_meta_topic_t;

/* Inserts or updates (partition count may only grow: MQD_EINVAL otherwise). Adds the
 * partitions rows for new partition ids. config_json NULL on an update keeps the stored
 * config; created_ms is set on insert only. */
int mqd_meta_topic_put(mqd_meta_t *m, const char *name, uint32_t partitions, const char *config_json);
int mqd_meta_topic_get(mqd_meta_t *m, const char *name, mqd_meta_topic_t *out); /* MQD_ENOENT */
/* Sets the identity of a topic's row (at most 39 characters; "" for none): MQD_ENOENT
 * when there is no row. */
int mqd_meta_topic_set_uid(mqd_meta_t *m, const char *name, const char *uid);
/* Deletes the topic and its partitions, groups' offsets, ack ranges and epochs, in one
 * transaction. MQD_ENOENT if the topic row did not exist (orphan rows are still removed). */
int mqd_meta_topic_delete(mqd_meta_t *m, const char *name);
/* cb gets each topic in name order; t->config_json is freed after cb returns. A
 * non-zero cb return stops the walk and is returned. */
typedef int (*mqd_meta_topic_cb)(const mqd_meta_topic_t *t, void *arg);
int mqd_meta_topic_list(mqd_meta_t *m, mqd_meta_topic_cb cb, void *arg);

/* ---- consumer-group offsets (next offset to consume) ----
 * Group names compare case-insensitively ("$Default" == "$default"); topics do not.
 * Offsets and positions must be <= INT64_MAX (SQLite integers), else MQD_EINVAL. */
typedef struct mqd_meta_offset {
    const char *topic;
    const char *group;
    uint32_t partition;
    uint64_t offset;
} mqd_meta_offset_t;

/* Upserts n offsets in one SQLite transaction (or in the caller's). */
int mqd_meta_offsets_commit(mqd_meta_t *m, const mqd_meta_offset_t *v, size_t n);
int mqd_meta_offset_get(mqd_meta_t *m, const char *topic, const char *group, uint32_t partition,
                        uint64_t *out); /* MQD_ENOENT if never committed */
typedef int (*mqd_meta_offset_cb)(const mqd_meta_offset_t *o, void *arg);
/* topic NULL = every topic; group NULL = every group. */
int mqd_meta_offset_list(mqd_meta_t *m, const char *topic, const char *group, mqd_meta_offset_cb cb,
                         void *arg);
int mqd_meta_group_delete(mqd_meta_t *m, const char *topic, const char *group);

/* ---- shared-mode ack state: an opaque blob per (topic, group, partition) ---- */
int mqd_meta_acks_put(mqd_meta_t *m, const char *topic, const char *group, uint32_t partition,
                      const void *blob, size_t len);
/* *blob is malloc'd (caller frees); MQD_ENOENT if none. */
int mqd_meta_acks_get(mqd_meta_t *m, const char *topic, const char *group, uint32_t partition,
                      void **blob, size_t *len);

/* ---- leader epochs: (epoch, first offset written under it) per partition ---- */
int mqd_meta_epoch_put(mqd_meta_t *m, const char *topic, uint32_t partition, uint32_t epoch,
                       uint64_t start_offset);
typedef int (*mqd_meta_epoch_cb)(uint32_t epoch, uint64_t start_offset, void *arg);
int mqd_meta_epoch_list(mqd_meta_t *m, const char *topic, uint32_t partition, mqd_meta_epoch_cb cb,
                        void *arg);
/* Drops entries with epoch > `epoch` (truncation after a leader change). */
int mqd_meta_epoch_truncate(mqd_meta_t *m, const char *topic, uint32_t partition, uint32_t epoch);

/* ---- transactions ---- */
typedef enum { MQD_TXN_OPEN = 0, MQD_TXN_COMMITTING = 1, MQD_TXN_COMMITTED = 2, MQD_TXN_ABORTED = 3 } mqd_txn_state_t;
int mqd_meta_txn_put(mqd_meta_t *m, uint64_t txn, mqd_txn_state_t state, const char *detail_json);
int mqd_meta_txn_delete(mqd_meta_t *m, uint64_t txn);
typedef int (*mqd_meta_txn_cb)(uint64_t txn, mqd_txn_state_t state, const char *detail_json, void *arg);
int mqd_meta_txn_list(mqd_meta_t *m, mqd_meta_txn_cb cb, void *arg);

/* ---- counters and key/value ---- */
/* Atomically increments the named counter and returns the new value (ids). */
int mqd_meta_next_id(mqd_meta_t *m, const char *name, uint64_t *out);
int mqd_meta_kv_put(mqd_meta_t *m, const char *key, const char *value);
int mqd_meta_kv_get(mqd_meta_t *m, const char *key, char **value); /* malloc'd; MQD_ENOENT */

/* ---- AMQP 0-9-1 durable exchanges and their bindings (amqp091) ----
 * The predeclared amq.* exchanges have no row; their durable bindings do. */
int mqd_meta_exchange_put(mqd_meta_t *m, const char *name, const char *type, uint32_t flags);
/* Deletes the exchange and its bindings in one transaction; MQD_ENOENT: no such row. */
int mqd_meta_exchange_delete(mqd_meta_t *m, const char *name);
typedef int (*mqd_meta_exchange_cb)(const char *name, const char *type, uint32_t flags, void *arg);
int mqd_meta_exchange_list(mqd_meta_t *m, mqd_meta_exchange_cb cb, void *arg);
/* A binding is the whole of (exchange, queue, key, args_json); args_json NULL = "".
 * mqd_meta_topic_delete deletes the bindings of the queue it names. */
typedef struct mqd_meta_binding {
    const char *exchange, *queue, *key, *args_json;
} mqd_meta_binding_t;
int mqd_meta_binding_put(mqd_meta_t *m, const mqd_meta_binding_t *b);
int mqd_meta_binding_delete(mqd_meta_t *m, const mqd_meta_binding_t *b);
typedef int (*mqd_meta_binding_cb)(const mqd_meta_binding_t *b, void *arg);
int mqd_meta_binding_list(mqd_meta_t *m, mqd_meta_binding_cb cb, void *arg);

#endif
