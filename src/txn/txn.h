/* txn: AMQP 1.0 local transactions (the coordinator) over the partition logs.
 *
 * Design (Kafka-like, with the decision in SQLite):
 *  - A transactional send is appended to its partition at once, flagged MQD_REC_TXN with
 *    the txn id, and settled with transactional-state(accepted) when stable.
 *  - Readers of a partition stop at its last stable offset (LSO): the first offset of any
 *    transaction still open there. Below the LSO a transactional record is delivered only
 *    if its transaction is in the committed set.
 *  - A transactional disposition on a consumer delivery is staged; the delivery is
 *    settled and owned by the transaction.
 *  - Commit: once every record of the transaction is stable, ONE SQLite transaction
 *    writes the COMMITTED decision and the group offsets the staged acks produce; that
 *    write is the commit point (crash before: aborted; after: committed). Then control
 *    records (COMMIT) go to each partition and the discharge is accepted.
 *  - Rollback (discharge fail=true, coordinator link or connection gone, txn timeout):
 *    nothing is written to SQLite; ABORT control records are appended; staged acks are
 *    released so the messages are delivered again.
 *  - Restart: a transactional record whose id has no COMMITTED row is aborted.
 * Event-loop thread only. */
#ifndef MQD_TXN_H
#define MQD_TXN_H

#include "mqd.h"
#include "core/core.h"

#include <proton/engine.h>

struct mqd_server;
struct mqd_topic;
struct mqd_conn;
struct mqd_lstate;
struct mqd_part;
struct mqd_group;

#define MQD_TXN_DECLARE 0x31u   /* amqp:declare:list */
#define MQD_TXN_DISCHARGE 0x32u /* amqp:discharge:list */
#define MQD_TXN_DECLARED 0x33u  /* amqp:declared:list */
#define MQD_TXN_STATE 0x34u     /* amqp:transactional-state:list */

typedef struct mqd_txn mqd_txn_t;
typedef struct mqd_txns mqd_txns_t; /* the server's transaction table */

/* Loads the committed set from meta.db and picks a fresh id range. */
int mqd_txns_init(struct mqd_server *s);
void mqd_txns_free(struct mqd_server *s);
/* Rolls back transactions older than txn_timeout (periodic timer); every 10 s also
 * runs mqd_txns_prune. */
void mqd_txns_expire(struct mqd_server *s);
/* Forgets committed transactions that can no longer matter (every partition they wrote
 * to starts past their last record there, or is gone; see txn.c done_prunable): their
 * meta.db rows are deleted in one SQLite transaction and their ids leave the committed
 * set. A transaction must be found prunable by two passes in a row. Rows that are not
 * COMMITTED (never trusted at load) are deleted too. Returns the rows deleted. */
size_t mqd_txns_prune(struct mqd_server *s);
/* Transactions not yet finished (open, deciding, or waiting for their decision's sync)
 * that wrote to or acknowledged from topic t: while any, t must not be deleted. */
size_t mqd_txns_topic_refs(struct mqd_server *s, const struct mqd_topic *t);

/* The coordinator link's messages (declare / discharge); `msg` is the encoded message. */
void mqd_txn_coordinator_transfer(struct mqd_lstate *ls, pn_delivery_t *d, const uint8_t *msg,
                                  size_t len);
/* The coordinator link or its connection went away: roll back what it declared. */
void mqd_txn_coordinator_gone(struct mqd_lstate *ls);

/* Reads the txn id out of a delivery's remote transactional-state; NULL if none.
 * *unknown is set when the state names an id that is not an open transaction. */
mqd_txn_t *mqd_txn_of_delivery(struct mqd_server *s, pn_delivery_t *d, bool *unknown);
/* The error condition for a delivery whose txn id is not open: amqp:transaction:timeout
 * when the timeout rolled that transaction back (the client's next use after it),
 * else amqp:transaction:unknown-id. A static string. */
const char *mqd_txn_unknown_condition(struct mqd_server *s, pn_delivery_t *d);
uint64_t mqd_txn_id(const mqd_txn_t *t);

/* A transactional send appended at `offset` of partition p (settled later with
 * transactional-state when stable). */
int mqd_txn_add_send(mqd_txn_t *t, struct mqd_part *p, uint64_t offset);
/* A stable transactional send: counts down what a commit waits for. */
void mqd_txn_send_stable(struct mqd_server *s, uint64_t txn);
/* Stages a disposition of a delivered record (outcome PN_ACCEPTED etc.). */
int mqd_txn_add_ack(mqd_txn_t *t, struct mqd_group *g, uint32_t part, uint64_t offset,
                    uint64_t outcome, bool failed);

/* Settles a delivery with transactional-state(txn, outcome). */
void mqd_txn_settle(pn_delivery_t *d, uint64_t txn, uint64_t outcome);

/* Read-committed helpers for partition readers. */
bool mqd_txn_committed(struct mqd_server *s, uint64_t txn);
/* A follower appended the COMMIT control record of `txn` (the leader's decision, now in
 * this node's log): writes its COMMITTED row (in the caller's SQLite transaction) and
 * adds it to the committed set, so its records stay visible once this node leads. */
int mqd_txn_adopt_commit(struct mqd_server *s, uint64_t txn);

/* Counters for metrics. */
typedef struct mqd_txn_stats {
    uint64_t declared, committed, aborted, timed_out, pruned;
    size_t open;
} mqd_txn_stats_t;
void mqd_txn_stats(struct mqd_server *s, mqd_txn_stats_t *out);

/* txn.c internals used by the link handlers */
void mqd_txns_stable_advanced(mqd_server_t *s);
/* Writes the decisions of the commits that became ready, in one SQLite transaction. */
void mqd_txns_decide(mqd_server_t *s);
uint64_t mqd_txn_outcome(pn_delivery_t *d, bool *failed);

/* The hooks core calls for transactions (mqd_core_ops_t: txn_*), set by server/. */
void mqd_txn_core_ops(mqd_core_ops_t *ops);

#endif
