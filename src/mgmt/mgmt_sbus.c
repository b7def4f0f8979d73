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
 *                                queue holds (delivered, unsettled) or a deferred message;
 *                                expirations = now + SBUS_LOCK_MS each, else 410
 *                                message-lock-lost
 *   com.microsoft:receive-by-sequence-number  sequence-numbers (long array),
 *                                receiver-settle-mode (0 completes them at once): the
 *                                deferred messages with their lock tokens, else 404
 *                                message-not-found
 *   com.microsoft:update-disposition  lock-tokens of deferred messages, disposition-status
 *                                completed (done), suspended (dead-lettered with
 *                                deadletter-reason and -description), abandoned or defered
 *                                (stay deferred); saved before the answer
 *   com.microsoft:schedule-message  messages (list of {message: binary}): stored at once
 *                                (answered once durable, as a send is settled) with
 *                                MQD_REC_SCHEDULED; sequence-numbers = their offsets
 *   com.microsoft:cancel-scheduled-message  sequence-numbers of scheduled messages not
 *                                yet delivered: done on the queue, saved before the answer
 *
 * A sequence number is the record's offset (x-opt-sequence-number); a lock token is the
 * delivery's tag (partition u32 and offset u64) as the SDK turns it into a uuid. The
 * entity must have one partition: Service Bus sequence numbers are one series per
 * entity. Every operation is authorized against the entity, as a link to it would be:
 * peek needs `browse` (or `receive`); renew-lock, receive-by-sequence-number and
 * update-disposition `receive`; schedule and cancel `send`. */
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
#define COND_NOT_FOUND "com.microsoft:message-not-found"

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

/* The entity's topic when the caller may `perm` (receive or send) on it; NULL after the
 * reply's 401, 404 or 400. */
static mqd_topic_t *allowed_topic(mqd_mgmt_req_t *r, const char *entity, mqd_perm_t perm)
{
    if (!may(r, perm, entity)) {
        mqd_mgmt_fail(r, 401, "not allowed to %s '%.200s'",
                      perm == MQD_PERM_SEND ? "send to" : "receive from", entity);
        return NULL;
    }
    return entity_topic(r, entity);
}

/* Were sequence-numbers given? false after the reply's 400. */
static bool seqs_given(mqd_mgmt_req_t *r, const mqd_sbus_args_t *a)
{
    if (a->has_seqs && !a->seqs_bad && a->n_seqs > 0)
        return true;
    mqd_mgmt_fail(r, 400, "sequence-numbers (an array of at most %d longs) is required",
                  MQD_SBUS_SEQS_MAX);
    return false;
}

static mqd_cursor_t *queue_cursor(mqd_topic_t *t)
{
    mqd_group_t *g;
    return mqd_group_get(t, MQD_SHARED_GROUP, &g) == 0 ? mqd_group_cursor(g, 0) : NULL;
}

/* A lock token for offset `off` of partition 0: the delivery tag's bytes in the order
 * the SDK keeps a management reply's uuid (mgmt_sbus_args.c reads it back). */
static pn_uuid_t lock_token(uint64_t off)
{
    static const uint8_t order[12] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11};
    uint8_t tag[12] = {0};
    pn_uuid_t u;
    memset(&u, 0, sizeof u);
    memcpy(tag + 4, &off, 8);
    for (int i = 0; i < 12; i++)
        u.bytes[order[i]] = (char)tag[i];
    return u;
}

/* Service Bus' message state of a record still on the queue: 1 deferred, 2 scheduled
 * (its time ahead), else 0 (active: no annotation). */
static int32_t message_state(mqd_cursor_t *cur, const mqd_rec_t *rec)
{
    if (cur && mqd_cursor_is_deferred(cur, rec->offset))
        return 1;
    return mqd_rec_scheduled_ms(rec) > mqd_now_ms() ? 2 : 0;
}

/* Appends {message: <the record as a receiver gets it>} to d's open list, with its
 * lock-token when `locked`, and its state (x-opt-message-state) as of cursor `cur`. */
static int put_message(pn_data_t *d, const mqd_rec_t *rec, mqd_buf_t *buf, bool locked,
                       mqd_cursor_t *cur)
{
    mqd_msg_info_t mi;
    if (mqd_msg_scan_stored(rec->data, rec->len, &mi) != 0)
        return MQD_EINVAL;
    mqd_msg_ann_t ann = {.partition_id = 0,
                         .offset = (int64_t)rec->offset,
                         .enqueued_ms = rec->timestamp_ms,
                         .pkey = mi.partition_key.len ? rec->data + mi.partition_key.off : NULL,
                         .pkey_len = mi.partition_key.len,
                         .delivery_count = mi.delivery_count,
                         .message_state = message_state(cur, rec)};
    int rc = mqd_msg_annotate(rec->data, rec->len, &mi, &ann, buf);
    if (rc != 0)
        return rc;
    pn_data_put_map(d);
    pn_data_enter(d);
    pn_data_put_string(d, pn_bytes(7, "message"));
    pn_data_put_binary(d, pn_bytes(buf->len, (const char *)buf->p));
    if (locked) {
        pn_data_put_string(d, pn_bytes(10, "lock-token"));
        pn_data_put_uuid(d, lock_token(rec->offset));
    }
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
            if ((rc = put_message(d, rec, &buf, false, cur)) == 0) {
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
    mqd_topic_t *t = allowed_topic(r, entity, MQD_PERM_RECEIVE);
    if (!t)
        return r->status;
    if (!a->has_tokens || a->n_tokens == 0)
        return mqd_mgmt_fail(r, 400, "lock-tokens (an array of uuids) is required");
    mqd_cursor_t *cur = queue_cursor(t);
    for (size_t i = 0; i < a->n_tokens || a->tokens_bad; i++) {
        uint64_t off = i < a->n_tokens ? a->tokens[i] : 0;
        if (a->tokens_bad || !cur || mqd_cursor_settled(cur, off) ||
            (!mqd_cursor_is_held(cur, off) && !mqd_cursor_is_deferred(cur, off))) {
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

/* 410 message-lock-lost for a token that names no deferred message. */
static int lock_lost(mqd_mgmt_req_t *r, const char *entity)
{
    r->cond = COND_LOCK_LOST;
    return mqd_mgmt_fail(r, 410,
                         "The lock supplied is invalid: the message is not a deferred message "
                         "of '%.200s' (settled, or never deferred)",
                         entity);
}

/* The queue's cursor after its changes are saved (durable); else the reply's 500. */
static int save_queue(mqd_mgmt_req_t *r, mqd_topic_t *t)
{
    mqd_group_t *g;
    if (mqd_group_get(t, MQD_SHARED_GROUP, &g) != 0 || mqd_group_save_now(g, "sbus") != 0)
        return mqd_mgmt_fail(r, 500, "the queue's state could not be saved");
    return 200;
}

/* Reads record `off` of partition 0 into rd; false when there is none. */
static bool read_record(mqd_topic_t *t, uint64_t off, mqd_read_t *rd)
{
    mqd_plog_t *log = mqd_part_log(mqd_topic_part(t, 0));
    return mqd_plog_read(log, off, off + 1, 1, 4u << 20, rd) == 0 && rd->n == 1 &&
           rd->recs[0].offset == off;
}

static int put_deferred(mqd_mgmt_req_t *r, mqd_topic_t *t, const mqd_sbus_args_t *a)
{
    mqd_read_t rd;
    mqd_buf_t buf = {0};
    int rc = 0;
    mqd_read_init(&rd);
    pn_data_put_map(r->out);
    pn_data_enter(r->out);
    mqd_mgmt_kv_enter(r->out, "messages", true);
    for (size_t i = 0; i < a->n_seqs && rc == 0; i++)
        rc = read_record(t, (uint64_t)a->seqs[i], &rd)
                 ? put_message(r->out, &rd.recs[0], &buf, a->settle_mode != 0, queue_cursor(t))
                 : MQD_EIO;
    pn_data_exit(r->out);
    pn_data_exit(r->out);
    mqd_read_free(&rd);
    mqd_buf_free(&buf);
    return rc;
}

static int sbus_receive_seq(mqd_mgmt_req_t *r, const char *entity, const mqd_sbus_args_t *a)
{
    mqd_topic_t *t = allowed_topic(r, entity, MQD_PERM_RECEIVE);
    if (!t)
        return r->status;
    if (!seqs_given(r, a))
        return r->status;
    mqd_cursor_t *cur = queue_cursor(t);
    for (size_t i = 0; i < a->n_seqs; i++) {
        if (!cur || a->seqs[i] < 0 || !mqd_cursor_is_deferred(cur, (uint64_t)a->seqs[i])) {
            r->cond = COND_NOT_FOUND;
            return mqd_mgmt_fail(r, 404, "sequence number %lld is not a deferred message of "
                                         "'%.200s'", (long long)a->seqs[i], entity);
        }
    }
    int rc = put_deferred(r, t, a);
    if (rc != 0)
        return mqd_mgmt_fail(r, 500, "read failed: %s", mqd_strerror(rc));
    if (a->settle_mode != 0)
        return 200;
    for (size_t i = 0; i < a->n_seqs; i++) /* receive-and-delete: done now */
        mqd_cursor_skip(cur, (uint64_t)a->seqs[i]);
    return save_queue(r, t);
}

/* completed and suspended settle a deferred message; abandoned and defered keep it. */
static int disposition_of(const char *s, bool *settles, bool *dead)
{
    *dead = strcmp(s, "suspended") == 0;
    *settles = *dead || strcmp(s, "completed") == 0;
    return *settles || strcmp(s, "abandoned") == 0 || strcmp(s, "defered") == 0 ? 0 : MQD_EINVAL;
}

static int sbus_update_disposition(mqd_mgmt_req_t *r, const char *entity, const mqd_sbus_args_t *a)
{
    bool settles, dead;
    mqd_topic_t *t = allowed_topic(r, entity, MQD_PERM_RECEIVE);
    if (!t)
        return r->status;
    if (!a->has_tokens || a->n_tokens == 0 || disposition_of(a->disposition, &settles, &dead) != 0)
        return mqd_mgmt_fail(r, 400, "lock-tokens (an array of uuids) and disposition-status "
                                     "(completed, abandoned, suspended or defered) are required");
    mqd_cursor_t *cur = queue_cursor(t);
    for (size_t i = 0; i < a->n_tokens || a->tokens_bad; i++)
        if (a->tokens_bad || !cur || !mqd_cursor_is_deferred(cur, a->tokens[i]))
            return lock_lost(r, entity);
    const mqd_core_ops_t *ops = mqd_srv_ops(r->s);
    for (size_t i = 0; i < a->n_tokens && settles; i++) {
        if (dead && ops->dead_letter)
            ops->dead_letter(t, 0, a->tokens[i], a->dl_reason, a->dl_desc);
        mqd_cursor_skip(cur, a->tokens[i]);
    }
    pn_data_put_map(r->out);
    return settles ? save_queue(r, t) : 200;
}

/* A schedule-message request waiting for its records to be durable. */
typedef struct sched_req {
    mqd_mgmt_later_t *later;
    size_t n, left;
    bool failed;
    uint64_t seqs[MQD_SBUS_SEQS_MAX];
} sched_req_t;

static void put_seqs(pn_data_t *body, void *arg)
{
    const sched_req_t *q = arg;
    pn_data_put_map(body);
    pn_data_enter(body);
    pn_data_put_string(body, pn_bytes(16, "sequence-numbers"));
    pn_data_put_array(body, false, PN_LONG);
    pn_data_enter(body);
    for (size_t i = 0; i < q->n; i++)
        pn_data_put_long(body, (int64_t)q->seqs[i]);
    pn_data_exit(body);
    pn_data_exit(body);
}

static void sched_stored(void *arg, uint64_t tag, uint64_t outcome, const char *cond,
                         const char *desc)
{
    sched_req_t *q = arg;
    (void)tag;
    if (outcome != PN_ACCEPTED) {
        q->failed = true;
        MQD_NOTICE_RL("mgmt", "a scheduled message was not stored: %s %s", cond ? cond : "",
                      desc ? desc : "");
    }
    if (--q->left > 0)
        return;
    if (q->failed)
        mqd_mgmt_finish(q->later, 500, "a scheduled message was not stored", NULL, NULL);
    else
        mqd_mgmt_finish(q->later, 200, "", put_seqs, q);
    free(q);
}

/* Every message is well formed and within the broker's limits, and the partition takes
 * sends here (cluster: this node leads it): 0, or the reply's 400, 503. */
static int sched_check(mqd_mgmt_req_t *r, mqd_topic_t *t, const mqd_sbus_args_t *a,
                       uint32_t *flags)
{
    const mqd_repl_hooks_t *rh = mqd_srv_repl(r->s);
    const char *cond = NULL;
    const char *why = rh->send_check ? rh->send_check(rh->arg, t, 0, (int)mqd_topic_conf(t)->acks,
                                                      &cond)
                                     : NULL;
    if (why) {
        r->cond = cond;
        return mqd_mgmt_fail(r, 503, "'%.200s' takes no sends here: %s", mqd_topic_name(t), why);
    }
    uint64_t max = mqd_srv_conf(r->s)->max_message_size, total = 0;
    for (size_t i = 0; i < a->n_msgs; i++) {
        mqd_msg_info_t mi;
        if (mqd_msg_scan(a->msg_buf + a->msgs[i].off, a->msgs[i].len, &mi) != 0 ||
            a->msgs[i].len > max)
            return mqd_mgmt_fail(r, 400, "message %zu is not a well-formed AMQP message within "
                                         "max_message_size", i);
        flags[i] = mqd_rec_data_flags(&mi);
        total += a->msgs[i].len + MQD_WATERMARK_REC_OVERHEAD;
    }
    if (!mqd_watermark_disk_take(r->s, total))
        return mqd_mgmt_fail(r, 503, "free disk space on the broker is at disk_free_limit");
    return 0;
}

static int sbus_schedule(mqd_mgmt_req_t *r, const char *entity, const mqd_sbus_args_t *a)
{
    uint32_t flags[MQD_SBUS_SEQS_MAX];
    mqd_topic_t *t = allowed_topic(r, entity, MQD_PERM_SEND);
    if (!t)
        return r->status;
    if (!a->has_msgs || a->msgs_bad || a->n_msgs == 0)
        return mqd_mgmt_fail(r, 400, "messages (a list of at most %d maps with a binary "
                                     "'message') is required", MQD_SBUS_SEQS_MAX);
    if (sched_check(r, t, a, flags) != 0)
        return r->status;
    sched_req_t *q = calloc(1, sizeof *q);
    if (!q || !(q->later = mqd_mgmt_defer(r))) {
        free(q);
        return mqd_mgmt_fail(r, 500, "out of memory");
    }
    mqd_part_t *p = mqd_topic_part(t, 0);
    q->left = 1; /* this call's own reference: the last notify may not come before the end */
    for (size_t i = 0; i < a->n_msgs; i++) {
        q->left++;
        if (mqd_part_append_notify(p, a->msg_buf + a->msgs[i].off, a->msgs[i].len, flags[i],
                                   sched_stored, q, i, &q->seqs[i]) != 0) {
            q->left--;
            q->failed = true;
            break;
        }
        q->n++;
    }
    sched_stored(q, 0, q->failed ? PN_REJECTED : PN_ACCEPTED, NULL, NULL);
    return 0;
}

/* A scheduled record the queue has not handed out: 0, else the reply's 404. */
static int cancellable(mqd_mgmt_req_t *r, const char *entity, mqd_topic_t *t, mqd_cursor_t *cur,
                       int64_t seq, mqd_read_t *rd)
{
    uint64_t off = (uint64_t)seq;
    if (seq >= 0 && read_record(t, off, rd) && (rd->recs[0].flags & MQD_REC_SCHEDULED) &&
        !mqd_cursor_is_held(cur, off) && !mqd_cursor_is_deferred(cur, off))
        return 0; /* hidden, due and not handed out yet, or cancelled before */
    r->cond = COND_NOT_FOUND;
    return mqd_mgmt_fail(r, 404, "sequence number %lld is not a scheduled message of '%.200s' "
                                 "still waiting for its time", (long long)seq, entity);
}

static int sbus_cancel(mqd_mgmt_req_t *r, const char *entity, const mqd_sbus_args_t *a)
{
    mqd_topic_t *t = allowed_topic(r, entity, MQD_PERM_SEND);
    if (!t)
        return r->status;
    if (!seqs_given(r, a))
        return r->status;
    mqd_cursor_t *cur = queue_cursor(t);
    mqd_read_t rd;
    int st = cur ? 0 : mqd_mgmt_fail(r, 500, "the queue has no cursor");
    mqd_read_init(&rd);
    for (size_t i = 0; i < a->n_seqs && st == 0; i++)
        st = cancellable(r, entity, t, cur, a->seqs[i], &rd);
    mqd_read_free(&rd);
    if (st != 0)
        return st;
    for (size_t i = 0; i < a->n_seqs; i++)
        mqd_cursor_skip(cur, (uint64_t)a->seqs[i]);
    pn_data_put_map(r->out);
    return save_queue(r, t);
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
    else if (strcmp(r->op, "com.microsoft:receive-by-sequence-number") == 0)
        r->status = sbus_receive_seq(r, entity, &a);
    else if (strcmp(r->op, "com.microsoft:update-disposition") == 0)
        r->status = sbus_update_disposition(r, entity, &a);
    else if (strcmp(r->op, "com.microsoft:schedule-message") == 0)
        r->status = sbus_schedule(r, entity, &a);
    else if (strcmp(r->op, "com.microsoft:cancel-scheduled-message") == 0)
        r->status = sbus_cancel(r, entity, &a);
    else
        mqd_mgmt_fail(r, 501, "operation %.100s is not implemented by mqd (docs/servicebus.md)",
                      r->op);
    if (r->status >= 300)
        pn_data_clear(r->out);
    mqd_sbus_args_free(&a);
    MQD_DEBUG("mgmt", "%s on %s -> %d %s", r->op ? r->op : "-", entity, r->status, r->desc);
}
