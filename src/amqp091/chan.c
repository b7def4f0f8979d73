/* amqp091/chan: channels, the queue class (a queue is a topic), basic.publish onto the
 * topic's log with publisher confirms at its commit point, mandatory returns. */
#include "config.h"
#include "amqp091/amqp091_int.h"
#include "auth/auth.h"
#include "conf/conf.h"
#include "group/group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void a091_cstr(amqp_bytes_t b, char out[256])
{
    size_t n = b.len < 255 ? b.len : 255;
    memcpy(out, b.bytes, n);
    out[n] = 0;
}

static void pub_reset(a091_chan_t *ch)
{
    free(ch->pub_exchange);
    free(ch->pub_rkey);
    free(ch->body);
    ch->pub_exchange = ch->pub_rkey = NULL;
    ch->body = NULL;
    ch->body_len = ch->body_size = 0;
    ch->pub_state = 0;
    ch->pub_props = NULL;
    recycle_amqp_pool(&ch->pool);
}

void a091_chan_free(a091_conn_t *c, a091_chan_t *ch)
{
    a091_release_all(c, ch);
    pub_reset(ch);
    empty_amqp_pool(&ch->pool);
    free(ch->unacked);
    free(ch);
}

void a091_chan_error(a091_conn_t *c, a091_chan_t *ch, int code, const char *text,
                     amqp_method_number_t cause)
{
    if (ch->closing)
        return;
    MQD_NOTICE_RL("amqp091", "peer=%s channel %u error %d: %s", c->peer, ch->id, code, text);
    amqp_channel_close_t m = {.reply_code = (uint16_t)code,
                              .reply_text = amqp_cstring_bytes(text),
                              .class_id = (uint16_t)(cause >> 16),
                              .method_id = (uint16_t)cause};
    a091_send_method(c, ch->id, AMQP_CHANNEL_CLOSE_METHOD, &m);
    ch->closing = true;
    a091_release_all(c, ch);
    pub_reset(ch);
}

/* ---- publisher confirms ---- */

static uint64_t confirm_tag(const a091_chan_t *ch, uint64_t seq)
{
    return (uint64_t)ch->id << 48 | (uint64_t)ch->gen << 40 | (seq & 0xffffffffffull);
}

static void send_confirm(a091_conn_t *c, uint16_t chan, uint64_t seq, bool ack)
{
    if (ack) {
        amqp_basic_ack_t m = {.delivery_tag = seq};
        a091_send_method(c, chan, AMQP_BASIC_ACK_METHOD, &m);
    } else {
        amqp_basic_nack_t m = {.delivery_tag = seq, .requeue = 0};
        a091_send_method(c, chan, AMQP_BASIC_NACK_METHOD, &m);
    }
}

/* The commit point settled a publish (core's notify, part_commit.c / partfail.c). */
static void on_confirm(void *arg, uint64_t tag, uint64_t outcome, const char *cond,
                       const char *desc)
{
    a091_conn_t *c = arg;
    uint16_t id = (uint16_t)(tag >> 48);
    uint8_t gen = (uint8_t)(tag >> 40);
    a091_chan_t *ch = !c->dead && id <= c->channel_max ? c->chans[id] : NULL;
    if (ch && ch->open && !ch->closing && ch->gen == gen) {
        if (outcome != PN_ACCEPTED)
            MQD_NOTICE_RL("amqp091", "peer=%s publish nacked: %s %s", c->peer, cond ? cond : "",
                          desc ? desc : "");
        send_confirm(c, id, tag & 0xffffffffffull, outcome == PN_ACCEPTED);
        a091_flush(c);
    }
    a091_conn_unref(c);
}

/* ---- basic.publish ---- */

int a091_chan_fail(a091_conn_t *c, a091_chan_t *ch, int code, const char *fmt, const char *arg,
                   amqp_method_number_t cause)
{
    char text[512];
    snprintf(text, sizeof text, fmt, arg);
    a091_chan_error(c, ch, code, text, cause);
    return code;
}

static void publish_return(a091_conn_t *c, a091_chan_t *ch)
{
    amqp_basic_return_t r = {.reply_code = A091_NO_ROUTE,
                             .reply_text = amqp_cstring_bytes("NO_ROUTE"),
                             .exchange = amqp_cstring_bytes(ch->pub_exchange),
                             .routing_key = amqp_cstring_bytes(ch->pub_rkey)};
    a091_send_method(c, ch->id, AMQP_BASIC_RETURN_METHOD, &r);
    a091_send_content(c, ch->id, ch->pub_props, ch->body, ch->body_len);
}

/* In a cluster, a partition led by another node: the message goes to its leader through
 * fwd (src/fwd, as a 1.0 producer's), and the confirm carries the leader's outcome. true:
 * fwd took it (forwarded, held for an election, or nacked). */
static bool publish_forward(a091_conn_t *c, a091_chan_t *ch, const char *topic, uint32_t part,
                            int acks, const mqd_buf_t *buf, uint64_t seq)
{
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(c->srv);
    if (!fh || !fh->send_notify)
        return false;
    if (seq)
        a091_conn_ref(c); /* until the outcome */
    int rc = fh->send_notify(fh->arg, topic, part, buf->p, buf->len, acks, c->user,
                             seq ? on_confirm : NULL, c, confirm_tag(ch, seq));
    if (rc == MQD_FWD_LOCAL && seq)
        a091_conn_unref(c);
    return rc == MQD_FWD_TAKEN;
}

/* Stores the record of queue `topic` (t: this node's copy, NULL when it holds none but
 * the cluster has the topic: nparts partitions); in confirm mode the ack (or nack) comes
 * from the commit point, or from the leader when the partition is led elsewhere. */
static void publish_store(a091_conn_t *c, a091_chan_t *ch, const char *topic, mqd_topic_t *t,
                          uint32_t nparts, uint64_t seq)
{
    mqd_server_t *s = c->srv;
    mqd_buf_t *buf = mqd_srv_scratch(s);
    buf->len = 0;
    const char *why = NULL;
    if (a091_map_to_amqp10(ch->pub_props, ch->pub_exchange, ch->pub_rkey, ch->body, ch->body_len,
                           buf) != 0)
        why = "message could not be encoded";
    uint32_t part = ch->rr++ % nparts;
    int acks = t ? (int)mqd_topic_conf(t)->acks : -1;
    if (!why && publish_forward(c, ch, topic, part, acks, buf, seq))
        return;
    if (!why && !t)
        why = "no copy of the queue on this node and no forwarding";
    mqd_repl_hooks_t *rh = mqd_srv_repl(s);
    const char *cond = NULL;
    if (!why && rh->send_check)
        why = rh->send_check(rh->arg, t, part, acks, &cond);
    if (!why && !mqd_watermark_disk_take(s, buf->len + MQD_WATERMARK_REC_OVERHEAD))
        why = "free disk space on the broker is at disk_free_limit";
    int rc = 0;
    if (!why && seq) {
        a091_conn_ref(c);
        rc = mqd_part_append_notify(mqd_topic_part(t, part), buf->p, buf->len, MQD_REC_DATA,
                                    on_confirm, c, confirm_tag(ch, seq), NULL);
        if (rc != 0 && rc != MQD_ENOMEM)
            a091_conn_unref(c); /* nothing pends: no confirm will come */
    } else if (!why) {
        rc = mqd_part_append_ex(mqd_topic_part(t, part), buf->p, buf->len, MQD_REC_DATA, 0, NULL,
                                NULL, NULL);
    }
    if (rc != 0)
        why = mqd_strerror(rc);
    if (why) {
        MQD_WARN_RL("amqp091", "publish to %s/%u not stored: %s", topic, part, why);
        if (seq)
            send_confirm(c, ch->id, seq, false);
        a091_block_check(c); /* a watermark: take no more input until it clears */
    }
}

/* The partition count of queue q: this node's copy's, else the cluster's registration
 * (a topic this node holds no replica of); 0: no such queue. */
static uint32_t queue_nparts(a091_conn_t *c, const char *q, mqd_topic_t **t)
{
    *t = q[0] ? mqd_topic_find(c->srv, q) : NULL;
    if (*t)
        return mqd_topic_nparts(*t);
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(c->srv);
    return q[0] && fh && fh->nparts ? fh->nparts(fh->arg, q) : 0;
}

static void publish_complete(a091_conn_t *c, a091_chan_t *ch)
{
    c->published = true;
    uint64_t seq = ch->confirm ? ++ch->pub_seq : 0;
    mqd_topic_t *t = NULL;
    uint32_t nparts = queue_nparts(c, ch->pub_rkey, &t);
    if (!nparts) {
        if (ch->pub_mandatory)
            publish_return(c, ch);
        if (seq)
            send_confirm(c, ch->id, seq, true); /* RabbitMQ acks an unroutable publish */
    } else if (!a091_may(c, MQD_PERM_SEND, ch->pub_rkey)) {
        a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                       "ACCESS_REFUSED - write access to queue '%s' refused", ch->pub_rkey,
                       AMQP_BASIC_PUBLISH_METHOD);
        return;
    } else {
        publish_store(c, ch, ch->pub_rkey, t, nparts, seq);
    }
    pub_reset(ch);
}

static int publish_begin(a091_conn_t *c, a091_chan_t *ch, amqp_basic_publish_t *m)
{
    char ex[256], rk[256];
    a091_cstr(m->exchange, ex);
    a091_cstr(m->routing_key, rk);
    if (m->immediate)
        return a091_chan_fail(c, ch, A091_NOT_IMPLEMENTED, "NOT_IMPLEMENTED - %s", "immediate=true",
                              AMQP_BASIC_PUBLISH_METHOD);
    if (ex[0] && strcmp(ex, "amq.direct") != 0)
        return a091_chan_fail(c, ch, A091_NOT_FOUND,
                              "NOT_FOUND - no exchange '%s' in vhost '/' (mqd routes the default "
                              "exchange and amq.direct)",
                              ex, AMQP_BASIC_PUBLISH_METHOD);
    pub_reset(ch);
    ch->pub_exchange = strdup(ex);
    ch->pub_rkey = strdup(rk);
    ch->pub_mandatory = m->mandatory;
    ch->pub_state = 1;
    return 0;
}

int a091_chan_header(a091_conn_t *c, a091_chan_t *ch, const a091_frame_t *f)
{
    if (ch->closing)
        return 0;
    if (ch->pub_state != 1) {
        a091_conn_error(c, A091_UNEXPECTED_FRAME,
                        "UNEXPECTED_FRAME - content header without a "
                        "basic.publish",
                        0);
        return A091_UNEXPECTED_FRAME;
    }
    const char *why = NULL;
    uint64_t size = 0;
    int rc = a091_header_decode(f, &ch->pool, &size, &ch->pub_props, &why);
    if (rc != 0) {
        char text[128];
        snprintf(text, sizeof text, "%s - %s",
                 rc == A091_SYNTAX_ERROR ? "SYNTAX_ERROR" : "UNEXPECTED_FRAME", why);
        a091_conn_error(c, rc, text, 0);
        return rc;
    }
    uint64_t max = mqd_srv_conf(c->srv)->max_message_size;
    if (size > max) {
        char num[32];
        snprintf(num, sizeof num, "%llu", (unsigned long long)max);
        return a091_chan_fail(c, ch, A091_PRECONDITION_FAILED,
                              "PRECONDITION_FAILED - message larger than max_message_size (%s)",
                              num, AMQP_BASIC_PUBLISH_METHOD);
    }
    ch->body_size = (size_t)size;
    ch->body_len = 0;
    if (size == 0) {
        publish_complete(c, ch);
        return 0;
    }
    if (!(ch->body = malloc(ch->body_size))) {
        a091_conn_error(c, A091_RESOURCE_ERROR, "RESOURCE_ERROR - out of memory", 0);
        return A091_RESOURCE_ERROR;
    }
    ch->pub_state = 2;
    return 0;
}

int a091_chan_body(a091_conn_t *c, a091_chan_t *ch, const a091_frame_t *f)
{
    if (ch->closing)
        return 0;
    if (ch->pub_state != 2 || f->size > ch->body_size - ch->body_len) {
        a091_conn_error(c, A091_UNEXPECTED_FRAME,
                        ch->pub_state != 2 ? "UNEXPECTED_FRAME - body frame without a header"
                                           : "UNEXPECTED_FRAME - body longer than its header said",
                        0);
        return A091_UNEXPECTED_FRAME;
    }
    memcpy(ch->body + ch->body_len, f->payload, f->size);
    ch->body_len += f->size;
    if (ch->body_len == ch->body_size)
        publish_complete(c, ch);
    return 0;
}

/* ---- the queue class: a queue is a topic; its messages are the `$shared` group's ---- */

static int backlog_sum(const mqd_group_part_info_t *pi, void *arg)
{
    *(uint64_t *)arg += pi->backlog;
    return 0;
}

static uint32_t queue_backlog(mqd_topic_t *t)
{
    uint64_t n = 0;
    mqd_group_t *g;
    if (mqd_group_get(t, MQD_SHARED_GROUP, &g) == 0)
        mqd_group_describe(t, MQD_SHARED_GROUP, backlog_sum, &n);
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* 0-9-1 consumers and the `$shared` group's 1.0 links */
static uint32_t queue_consumers(mqd_topic_t *t)
{
    mqd_group_t *g;
    size_t n = mqd_topic_ext_consumers(t, 0);
    if (mqd_group_get(t, MQD_SHARED_GROUP, &g) == 0)
        n += mqd_group_members(g);
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* The topic a queue method names, created by a declare when allowed; NULL after the
 * channel error. Any right on it lets a client see that it exists. */
static mqd_topic_t *queue_topic(a091_conn_t *c, a091_chan_t *ch, const char *q, bool create,
                                amqp_method_number_t id)
{
    if (!q[0]) {
        a091_chan_fail(c, ch, A091_NOT_IMPLEMENTED,
                       "NOT_IMPLEMENTED - server-named queues%s are not supported: name the queue",
                       "", id);
        return NULL;
    }
    mqd_topic_t *t = mqd_topic_find(c->srv, q);
    bool visible = mqd_auth_user_may(c->srv, c->user, MQD_PERM_SEND, q) ||
                   mqd_auth_user_may(c->srv, c->user, MQD_PERM_RECEIVE, q) ||
                   mqd_auth_user_may(c->srv, c->user, MQD_PERM_MANAGE, q);
    if (t && visible)
        return t;
    if (t || !create) {
        if (!t && !visible)
            a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                           "ACCESS_REFUSED - access to queue '%s' refused", q, id);
        else if (!t)
            a091_chan_fail(c, ch, A091_NOT_FOUND, "NOT_FOUND - no queue '%s' in vhost '/'", q, id);
        else
            a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                           "ACCESS_REFUSED - access to queue '%s' refused", q, id);
        return NULL;
    }
    if (!mqd_srv_conf(c->srv)->auto_create_topics || strncmp(q, "$", 1) == 0) {
        a091_chan_fail(c, ch, A091_NOT_FOUND,
                       "NOT_FOUND - no queue '%s' (auto_create_topics is off: create the topic)", q,
                       id);
        return NULL;
    }
    if (!a091_may(c, MQD_PERM_CREATE, q)) {
        a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                       "ACCESS_REFUSED - creating queue '%s' refused (no 'create' right)", q, id);
        return NULL;
    }
    int rc = mqd_topic_create(c->srv, q, 0, NULL, &t);
    if (rc != 0 && rc != MQD_EEXIST) {
        a091_chan_fail(c, ch, rc == MQD_EINVAL ? A091_PRECONDITION_FAILED : A091_RESOURCE_ERROR,
                       "cannot create queue: %s", mqd_strerror(rc), id);
        return NULL;
    }
    if (rc == MQD_EEXIST)
        t = mqd_topic_find(c->srv, q);
    if (t)
        MQD_INFO("amqp091", "peer=%s user=%s declared queue %s (topic created)", c->peer, c->user,
                 q);
    return t;
}

static int queue_declare(a091_conn_t *c, a091_chan_t *ch, amqp_queue_declare_t *m)
{
    char q[256];
    a091_cstr(m->queue, q);
    if (m->exclusive || m->auto_delete)
        return a091_chan_fail(
            c, ch, A091_NOT_IMPLEMENTED, "NOT_IMPLEMENTED - %s queues are not supported yet",
            m->exclusive ? "exclusive" : "auto-delete", AMQP_QUEUE_DECLARE_METHOD);
    mqd_topic_t *t = queue_topic(c, ch, q, !m->passive, AMQP_QUEUE_DECLARE_METHOD);
    if (!t)
        return A091_NOT_FOUND;
    if (m->nowait)
        return 0;
    uint32_t consumers = queue_consumers(t);
    amqp_queue_declare_ok_t ok = {.queue = amqp_cstring_bytes(q),
                                  .message_count = queue_backlog(t),
                                  .consumer_count = consumers};
    return a091_send_method(c, ch->id, AMQP_QUEUE_DECLARE_OK_METHOD, &ok);
}

static int queue_bind(a091_conn_t *c, a091_chan_t *ch, amqp_queue_bind_t *m, bool unbind)
{
    char q[256], ex[256], rk[256];
    amqp_method_number_t id = unbind ? AMQP_QUEUE_UNBIND_METHOD : AMQP_QUEUE_BIND_METHOD;
    a091_cstr(m->queue, q);
    a091_cstr(m->exchange, ex);
    a091_cstr(m->routing_key, rk);
    /* amq.direct routes by queue name, as the default exchange: that binding exists */
    if (strcmp(ex, "amq.direct") != 0 || strcmp(q, rk) != 0)
        return a091_chan_fail(c, ch, A091_NOT_IMPLEMENTED,
                              "NOT_IMPLEMENTED - bindings other than amq.direct with the queue's "
                              "name are not supported yet (queue '%s')",
                              q, id);
    if (!queue_topic(c, ch, q, false, id))
        return A091_NOT_FOUND;
    if (unbind) {
        amqp_queue_unbind_ok_t ok = {0};
        return a091_send_method(c, ch->id, AMQP_QUEUE_UNBIND_OK_METHOD, &ok);
    }
    if (m->nowait)
        return 0;
    amqp_queue_bind_ok_t ok = {0};
    return a091_send_method(c, ch->id, AMQP_QUEUE_BIND_OK_METHOD, &ok);
}

/* queue.purge and queue.delete: a log is not emptied by one reader; purge moves the
 * `$shared` group past everything (RabbitMQ's purge for this queue's consumers), delete
 * deletes the topic (needs 'manage'). */
static int queue_drop(a091_conn_t *c, a091_chan_t *ch, amqp_bytes_t queue, bool nowait, bool delete)
{
    amqp_method_number_t id = delete ? AMQP_QUEUE_DELETE_METHOD : AMQP_QUEUE_PURGE_METHOD;
    char q[256];
    a091_cstr(queue, q);
    mqd_topic_t *t = queue_topic(c, ch, q, false, id);
    if (!t)
        return A091_NOT_FOUND;
    if (!a091_may(c, delete ? MQD_PERM_MANAGE : MQD_PERM_RECEIVE, q))
        return a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                              delete ? "ACCESS_REFUSED - deleting queue '%s' refused (needs "
                                       "'manage')"
                                     : "ACCESS_REFUSED - read access to queue '%s' refused",
                              q, id);
    uint32_t n = queue_backlog(t);
    if (queue_consumers(t) > 0)
        return a091_chan_fail(c, ch, A091_PRECONDITION_FAILED,
                              "PRECONDITION_FAILED - queue '%s' in use (mqd purges or deletes a "
                              "queue only while nobody consumes it)",
                              q, id);
    int rc = delete ? mqd_topic_delete(c->srv, t)
                    : mqd_group_reset(t, MQD_SHARED_GROUP, MQD_RESET_LATEST, 0);
    if (rc != 0)
        return a091_chan_fail(c, ch, A091_INTERNAL_ERROR, "INTERNAL_ERROR - %s", mqd_strerror(rc),
                              id);
    if (nowait)
        return 0;
    /* purge-ok and delete-ok have the same one field */
    amqp_queue_delete_ok_t ok = {.message_count = n};
    return a091_send_method(c, ch->id,
                            delete ? AMQP_QUEUE_DELETE_OK_METHOD : AMQP_QUEUE_PURGE_OK_METHOD, &ok);
}

static int exchange_declare(a091_conn_t *c, a091_chan_t *ch, amqp_exchange_declare_t *m)
{
    char ex[256];
    a091_cstr(m->exchange, ex);
    if (strcmp(ex, "amq.direct") != 0 && ex[0])
        return a091_chan_fail(c, ch, A091_NOT_IMPLEMENTED,
                              "NOT_IMPLEMENTED - exchange '%s': mqd routes only the default "
                              "exchange and amq.direct so far",
                              ex, AMQP_EXCHANGE_DECLARE_METHOD);
    if (m->nowait)
        return 0;
    amqp_exchange_declare_ok_t ok = {0};
    return a091_send_method(c, ch->id, AMQP_EXCHANGE_DECLARE_OK_METHOD, &ok);
}

/* ---- the channel class ---- */

static int chan_open(a091_conn_t *c, uint16_t id)
{
    if (id > c->channel_max) {
        a091_conn_error(c, A091_CHANNEL_ERROR, "CHANNEL_ERROR - channel number over channel_max",
                        AMQP_CHANNEL_OPEN_METHOD);
        return A091_CHANNEL_ERROR;
    }
    a091_chan_t *ch = c->chans[id];
    if (ch && ch->open) {
        a091_conn_error(c, A091_CHANNEL_ERROR, "CHANNEL_ERROR - channel already open",
                        AMQP_CHANNEL_OPEN_METHOD);
        return A091_CHANNEL_ERROR;
    }
    if (ch)
        a091_chan_free(c, ch);
    if (!(ch = calloc(1, sizeof *ch))) {
        a091_conn_error(c, A091_RESOURCE_ERROR, "RESOURCE_ERROR - out of memory", 0);
        return A091_RESOURCE_ERROR;
    }
    ch->id = id;
    ch->open = true;
    ch->gen = ++c->gens[id]; /* a late confirm of an earlier open is dropped */
    ch->next_dtag = 1;
    init_amqp_pool(&ch->pool, 4096);
    c->chans[id] = ch;
    amqp_channel_open_ok_t ok = {.channel_id = amqp_cstring_bytes("")};
    return a091_send_method(c, id, AMQP_CHANNEL_OPEN_OK_METHOD, &ok);
}

static int chan_closed(a091_conn_t *c, a091_chan_t *ch, bool answer)
{
    if (answer) {
        amqp_channel_close_ok_t ok = {0};
        a091_send_method(c, ch->id, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
    }
    c->chans[ch->id] = NULL;
    a091_chan_free(c, ch);
    return 0;
}

int a091_chan_method(a091_conn_t *c, uint16_t id, amqp_method_number_t mid, void *m)
{
    if (mid == AMQP_CHANNEL_OPEN_METHOD)
        return chan_open(c, id);
    a091_chan_t *ch = id <= c->channel_max ? c->chans[id] : NULL;
    if (!ch || !ch->open) {
        a091_conn_error(c, A091_CHANNEL_ERROR, "CHANNEL_ERROR - channel not open", mid);
        return A091_CHANNEL_ERROR;
    }
    if (mid == AMQP_CHANNEL_CLOSE_METHOD)
        return chan_closed(c, ch, true);
    if (mid == AMQP_CHANNEL_CLOSE_OK_METHOD)
        return ch->closing ? chan_closed(c, ch, false) : 0;
    if (ch->closing)
        return 0; /* after our channel.close only close and close-ok count */
    if (ch->pub_state != 0) {
        a091_conn_error(c, A091_UNEXPECTED_FRAME,
                        "UNEXPECTED_FRAME - a method where a publish's content was expected", mid);
        return A091_UNEXPECTED_FRAME;
    }
    switch (mid) {
    case AMQP_CHANNEL_FLOW_METHOD: {
        amqp_channel_flow_ok_t ok = {.active = ((amqp_channel_flow_t *)m)->active};
        return a091_send_method(c, id, AMQP_CHANNEL_FLOW_OK_METHOD, &ok);
    }
    case AMQP_BASIC_PUBLISH_METHOD: return publish_begin(c, ch, m);
    case AMQP_CONFIRM_SELECT_METHOD: {
        ch->confirm = true;
        if (((amqp_confirm_select_t *)m)->nowait)
            return 0;
        amqp_confirm_select_ok_t ok = {0};
        return a091_send_method(c, id, AMQP_CONFIRM_SELECT_OK_METHOD, &ok);
    }
    case AMQP_QUEUE_DECLARE_METHOD: return queue_declare(c, ch, m);
    case AMQP_QUEUE_BIND_METHOD: return queue_bind(c, ch, m, false);
    case AMQP_QUEUE_UNBIND_METHOD: return queue_bind(c, ch, m, true);
    case AMQP_QUEUE_PURGE_METHOD: {
        amqp_queue_purge_t *p = m;
        return queue_drop(c, ch, p->queue, p->nowait, false);
    }
    case AMQP_QUEUE_DELETE_METHOD: {
        amqp_queue_delete_t *d = m;
        return queue_drop(c, ch, d->queue, d->nowait, true);
    }
    case AMQP_EXCHANGE_DECLARE_METHOD: return exchange_declare(c, ch, m);
    default: break;
    }
    if ((mid >> 16) == AMQP_BASIC_CLASS)
        return a091_basic_method(c, ch, mid, m);
    return a091_chan_fail(c, ch, A091_NOT_IMPLEMENTED, "NOT_IMPLEMENTED - %s",
                          amqp_method_name(mid), mid);
}
