/* A Service Bus entity's own management node, `<queue>/$management`, as the
 * @azure/service-bus SDK uses it (docs/servicebus.md). The request names its operation
 * in the application property `operation` and carries its arguments in an amqp-value map
 * with Service Bus' typed values (longs, uuids, arrays), which this file reads with
 * Proton's codec; the reply is the mgmt node's (statusCode, statusDescription, and for a
 * refusal error-condition) with an amqp-value map body.
 *
 *   com.microsoft:peek-message   from-sequence-number (long), message-count (int): the
 *                                messages still on the queue from there (what the
 *                                `$shared` group has not settled, as a queue browser
 *                                shows them), never acquired; 204 when none
 *   com.microsoft:renew-lock     lock-tokens (uuid array): each must name a delivery the
 *                                queue holds (delivered, unsettled); expirations = now +
 *                                SBUS_LOCK_MS each, else 410 message-lock-lost
 *
 * A sequence number is the record's offset (x-opt-sequence-number); a lock token is the
 * delivery's tag (partition u32 and offset u64) as the SDK turns it into a uuid. The
 * entity must have one partition: Service Bus sequence numbers are one series per
 * entity. Every operation is authorized against the entity, as a link to it would be:
 * peek needs `browse` (or `receive`), renew-lock `receive`. */
#include "config.h"
#include "codec/codec.h"
#include "mgmt/mgmt_int.h"
#include "mgmt/mgmt_sbus.h"
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SBUS_PEEK_MAX 256
#define SBUS_LOCK_MS 60000 /* what a renewal answers: mqd's locks last while the link holds them */
#define COND_LOCK_LOST "com.microsoft:message-lock-lost"

static bool may(mqd_mgmt_req_t *r, mqd_perm_t perm, const char *entity)
{
    return r->c && mqd_auth_allowed(r->c, perm, entity);
}

/* The entity's topic; NULL after the reply's 404 or 400. */
static mqd_topic_t *entity_topic(mqd_mgmt_req_t *r, const char *entity)
{
    mqd_topic_t *t = mqd_topic_find(r->s, entity);
    if (!t || mqd_topic_temporary(t)) {
        r->cond = "amqp:not-found";
        mqd_mgmt_fail(r, 404, "The messaging entity '%.200s' could not be found.", entity);
        return NULL;
    }
    if (mqd_topic_nparts(t) != 1) {
        mqd_mgmt_fail(r, 400,
                      "'%.200s' has %u partitions: Service Bus management operations need a "
                      "single-partition topic (one series of sequence numbers)",
                      entity, mqd_topic_nparts(t));
        return NULL;
    }
    return t;
}

static mqd_cursor_t *queue_cursor(mqd_topic_t *t)
{
    mqd_group_t *g;
    return mqd_group_get(t, MQD_SHARED_GROUP, &g) == 0 ? mqd_group_cursor(g, 0) : NULL;
}

/* Appends {message: <the record as a receiver gets it>} to d's open list. */
static int put_message(pn_data_t *d, const mqd_rec_t *rec, mqd_buf_t *buf)
{
    mqd_msg_info_t mi;
    if (mqd_msg_scan_stored(rec->data, rec->len, &mi) != 0)
        return MQD_EINVAL;
    mqd_msg_ann_t ann = {.partition_id = 0,
                         .offset = (int64_t)rec->offset,
                         .enqueued_ms = rec->timestamp_ms,
                         .pkey = mi.partition_key.len ? rec->data + mi.partition_key.off : NULL,
                         .pkey_len = mi.partition_key.len,
                         .delivery_count = mi.delivery_count};
    int rc = mqd_msg_annotate(rec->data, rec->len, &mi, &ann, buf);
    if (rc != 0)
        return rc;
    pn_data_put_map(d);
    pn_data_enter(d);
    pn_data_put_string(d, pn_bytes(7, "message"));
    pn_data_put_binary(d, pn_bytes(buf->len, (const char *)buf->p));
    pn_data_exit(d);
    return 0;
}

/* Up to `count` messages on the queue from offset `from`: data records of committed
 * sends that the queue has not settled. */
static int peek_records(pn_data_t *d, mqd_topic_t *t, uint64_t from, int64_t count, size_t *n)
{
    mqd_part_t *p = mqd_topic_part(t, 0);
    mqd_plog_t *log = mqd_part_log(p);
    mqd_cursor_t *cur = queue_cursor(t);
    uint64_t end = mqd_part_visible_end(p, MQD_READ_COMMITTED);
    mqd_read_t rd;
    mqd_buf_t buf = {0};
    int rc = 0;
    if (from < mqd_plog_start_offset(log))
        from = mqd_plog_start_offset(log);
    if (cur && from < mqd_cursor_floor(cur))
        from = mqd_cursor_floor(cur);
    mqd_read_init(&rd);
    for (int rounds = 0; rc == 0 && from < end && count > 0 && rounds < SBUS_PEEK_MAX; rounds++) {
        if ((rc = mqd_plog_read(log, from, end, 128, 4u << 20, &rd)) != 0 || rd.n == 0)
            break;
        for (size_t i = 0; i < rd.n && count > 0 && rc == 0; i++) {
            const mqd_rec_t *rec = &rd.recs[i];
            if ((rec->flags & MQD_REC_KIND_MASK) != MQD_REC_DATA ||
                ((rec->flags & MQD_REC_TXN) && !mqd_txn_committed(mqd_topic_srv(t), rec->txn)) ||
                (cur && mqd_cursor_settled(cur, rec->offset)))
                continue;
            if ((rc = put_message(d, rec, &buf)) == 0) {
                count--;
                (*n)++;
            }
        }
        from = rd.next_offset;
    }
    mqd_read_free(&rd);
    mqd_buf_free(&buf);
    return rc;
}

static int sbus_peek(mqd_mgmt_req_t *r, const char *entity, const mqd_sbus_args_t *a)
{
    if (!may(r, MQD_PERM_BROWSE, entity) && !may(r, MQD_PERM_RECEIVE, entity))
        return mqd_mgmt_fail(r, 401, "not allowed to peek at '%.200s'", entity);
    if (!a->has_from || a->from < 0 || !a->has_count || a->count < 1)
        return mqd_mgmt_fail(r, 400, "from-sequence-number (long >= 0) and message-count "
                                     "(int >= 1) are required");
    int64_t from = a->from, count = a->count;
    mqd_topic_t *t = entity_topic(r, entity);
    if (!t)
        return r->status;
    size_t n = 0;
    pn_data_put_map(r->out);
    pn_data_enter(r->out);
    mqd_mgmt_kv_enter(r->out, "messages", true);
    int rc = peek_records(r->out, t, (uint64_t)from, count > SBUS_PEEK_MAX ? SBUS_PEEK_MAX : count,
                          &n);
    pn_data_exit(r->out);
    pn_data_exit(r->out);
    if (rc != 0 && rc != MQD_ERANGE)
        return mqd_mgmt_fail(r, 500, "read failed: %s", mqd_strerror(rc));
    if (n == 0) {
        pn_data_clear(r->out); /* the SDK reads 204 as "no more messages" */
        return mqd_mgmt_fail(r, 204, "No messages to peek");
    }
    return 200;
}

static int sbus_renew(mqd_mgmt_req_t *r, const char *entity, const mqd_sbus_args_t *a)
{
    if (!may(r, MQD_PERM_RECEIVE, entity))
        return mqd_mgmt_fail(r, 401, "not allowed to receive from '%.200s'", entity);
    mqd_topic_t *t = entity_topic(r, entity);
    if (!t)
        return r->status;
    if (!a->has_tokens || a->n_tokens == 0)
        return mqd_mgmt_fail(r, 400, "lock-tokens (an array of uuids) is required");
    mqd_cursor_t *cur = queue_cursor(t);
    for (size_t i = 0; i < a->n_tokens || a->tokens_bad; i++) {
        uint64_t off = i < a->n_tokens ? a->tokens[i] : 0;
        if (a->tokens_bad || !cur || mqd_cursor_free_at(cur, off) || mqd_cursor_settled(cur, off)) {
            r->cond = COND_LOCK_LOST;
            return mqd_mgmt_fail(r, 410,
                                 "The lock supplied is invalid: the message is not held by a "
                                 "receiver of '%.200s' (settled, released, or never delivered)",
                                 entity);
        }
    }
    int64_t until = mqd_now_ms() + SBUS_LOCK_MS;
    pn_data_put_map(r->out);
    pn_data_enter(r->out);
    pn_data_put_string(r->out, pn_bytes(11, "expirations"));
    pn_data_put_array(r->out, false, PN_TIMESTAMP);
    pn_data_enter(r->out);
    for (size_t i = 0; i < a->n_tokens; i++)
        pn_data_put_timestamp(r->out, until);
    pn_data_exit(r->out);
    pn_data_exit(r->out);
    return 200;
}

void mqd_mgmt_sbus_run(mqd_mgmt_req_t *r, const char *entity, const uint8_t *req, size_t len,
                       const mqd_msg_info_t *mi)
{
    mqd_sbus_args_t a;
    r->op = mqd_mgmt_arg_str(r, "operation");
    r->type = "com.microsoft:entity";
    r->name = entity;
    if (mi->body_off >= len || mqd_sbus_args_parse(req + mi->body_off, len - mi->body_off, &a) != 0)
        memset(&a, 0, sizeof a); /* no map body: every operation here needs one (400) */
    if (!r->op)
        mqd_mgmt_fail(r, 400, "application property 'operation' is required");
    else if (strcmp(r->op, "com.microsoft:peek-message") == 0)
        r->status = sbus_peek(r, entity, &a);
    else if (strcmp(r->op, "com.microsoft:renew-lock") == 0)
        r->status = sbus_renew(r, entity, &a);
    else
        mqd_mgmt_fail(r, 501, "operation %.100s is not implemented by mqd (docs/servicebus.md)",
                      r->op);
    if (r->status >= 300)
        pn_data_clear(r->out);
    MQD_DEBUG("mgmt", "%s on %s -> %d %s", r->op ? r->op : "-", entity, r->status, r->desc);
}
