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
    a091_tx_free(ch);
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

/* Channel id of generation gen, if it is still open and not closing (an outcome that
 * arrives late belongs to a channel closed, or closed and opened again, meanwhile). */
static a091_chan_t *live_chan(a091_conn_t *c, uint16_t id, uint8_t gen)
{
    a091_chan_t *ch = !c->dead && id <= c->channel_max ? c->chans[id] : NULL;
    return ch && ch->open && !ch->closing && ch->gen == gen ? ch : NULL;
}

/* The commit point settled a publish (core's notify, part_commit.c / partfail.c). */
static void on_confirm(void *arg, uint64_t tag, uint64_t outcome, const char *cond,
                       const char *desc)
{
    a091_conn_t *c = arg;
    uint16_t id = (uint16_t)(tag >> 48);
    if (live_chan(c, id, (uint8_t)(tag >> 40))) {
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

/* One publish's confirm over its appends, one per queue it was routed to: the ack when
 * every append is durable (each under its topic's flush and acks, or its leader's),
 * the nack when any failed. `left` counts the appends not told yet plus one held by
 * publish_complete until every append was started. */
struct a091_multi {
    a091_conn_t *c; /* one reference, given back by on_confirm */
    uint64_t tag;
    uint32_t left;
    bool nack;
    bool commit;  /* a tx.commit's stores (tx.c): its end is the commit-ok */
    uint16_t chan; /* the commit's channel, of generation gen */
    uint8_t gen;
};

a091_multi_t *a091_multi_new(a091_conn_t *c, a091_chan_t *ch, uint64_t tag, bool commit)
{
    a091_multi_t *mu = calloc(1, sizeof *mu);
    if (!mu)
        return NULL;
    a091_conn_ref(c);
    *mu = (a091_multi_t){.c = c, .tag = tag, .left = 1, .commit = commit, .chan = ch->id,
                         .gen = ch->gen};
    return mu;
}

static void commit_done(a091_multi_t *mu)
{
    a091_conn_t *c = mu->c;
    a091_chan_t *ch = live_chan(c, mu->chan, mu->gen);
    if (ch) {
        a091_tx_committed(c, ch, !mu->nack);
        a091_flush(c);
    }
    a091_conn_unref(c);
}

static void on_multi(void *arg, uint64_t tag, uint64_t outcome, const char *cond,
                     const char *desc)
{
    a091_multi_t *mu = arg;
    (void)tag;
    if (outcome != PN_ACCEPTED) {
        if (!mu->nack && (cond || desc))
            MQD_NOTICE_RL("amqp091", "peer=%s publish not stored in every queue: %s %s",
                          mu->c->peer, cond ? cond : "", desc ? desc : "");
        mu->nack = true;
    }
    if (--mu->left > 0)
        return;
    if (mu->commit)
        commit_done(mu);
    else
        on_confirm(mu->c, mu->tag, mu->nack ? PN_REJECTED : PN_ACCEPTED, NULL, NULL);
    free(mu);
}

void a091_multi_done(a091_multi_t *mu)
{
    on_multi(mu, mu->tag, PN_ACCEPTED, NULL, NULL);
}

/* In a cluster, a partition led by another node: the message goes to its leader through
 * fwd (src/fwd, as a 1.0 producer's), and the confirm carries the leader's outcome. true:
 * fwd took it (forwarded, held for an election, or nacked: mu is told). */
static bool publish_forward(a091_conn_t *c, const char *topic, uint32_t part, int acks,
                            const mqd_buf_t *buf, a091_multi_t *mu)
{
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(c->srv);
    if (!fh || !fh->send_notify)
        return false;
    int rc = fh->send_notify(fh->arg, topic, part, buf->p, buf->len, acks, c->user,
                             mu ? on_multi : NULL, mu, mu ? mu->tag : 0);
    return rc == MQD_FWD_TAKEN;
}

static uint32_t queue_nparts(a091_conn_t *c, const char *q, mqd_topic_t **t);

/* Stores the record buf in queue `topic` (this node's copy, or through fwd when it holds
 * none but the cluster has the topic, or the partition is led elsewhere); in confirm or
 * commit mode (mu) its outcome goes to mu: from the commit point, from the leader when
 * the partition is led elsewhere, or from here when it is not stored. */
void a091_store(a091_conn_t *c, a091_chan_t *ch, const char *topic, const mqd_buf_t *buf,
                a091_multi_t *mu)
{
    mqd_server_t *s = c->srv;
    mqd_topic_t *t;
    uint32_t nparts = queue_nparts(c, topic, &t);
    const char *why = nparts ? NULL : "the queue was deleted";
    uint32_t part = nparts ? ch->rr++ % nparts : 0;
    int acks = t ? (int)mqd_topic_conf(t)->acks : -1;
    if (mu)
        mu->left++; /* told exactly once from here on */
    if (!why && publish_forward(c, topic, part, acks, buf, mu))
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
    if (!why && mu)
        rc = mqd_part_append_notify(mqd_topic_part(t, part), buf->p, buf->len, MQD_REC_DATA,
                                    on_multi, mu, mu->tag, NULL);
    else if (!why)
        rc = mqd_part_append_ex(mqd_topic_part(t, part), buf->p, buf->len, MQD_REC_DATA, 0, NULL,
                                NULL, NULL);
    if (rc != 0)
        why = mqd_strerror(rc);
    if (why) {
        MQD_WARN_RL("amqp091", "publish to %s/%u not stored: %s", topic, part, why);
        if (mu)
            on_multi(mu, mu->tag, PN_REJECTED, NULL, NULL); /* no outcome will come */
        a091_block_check(c); /* a watermark: take no more input until it clears */
    }
}

/* The publish being assembled as an AMQP 1.0 message in the server's scratch buffer;
 * NULL when it cannot be encoded. */
static const mqd_buf_t *publish_encode(a091_conn_t *c, a091_chan_t *ch)
{
    mqd_buf_t *buf = mqd_srv_scratch(c->srv);
    buf->len = 0;
    if (a091_map_to_amqp10(ch->pub_props, ch->pub_exchange, ch->pub_rkey, ch->body, ch->body_len,
                           buf) != 0) {
        MQD_WARN_RL("amqp091", "peer=%s publish to exchange '%s' not stored: message could not "
                    "be encoded", c->peer, ch->pub_exchange);
        return NULL;
    }
    return buf;
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

/* The queues that exist among the routed ones (a binding may name a topic deleted by
 * other means); 0, or 403 after the channel error when the user may not send to one
 * of them (then nothing is stored anywhere). */
static int publish_targets(a091_conn_t *c, a091_chan_t *ch, a091_targets_t *tg)
{
    size_t n = 0;
    for (size_t i = 0; i < tg->n; i++) {
        mqd_topic_t *t;
        if (queue_nparts(c, tg->q[i], &t))
            tg->q[n++] = tg->q[i];
    }
    tg->n = n;
    for (size_t i = 0; i < n; i++)
        if (!a091_may(c, MQD_PERM_SEND, tg->q[i]))
            return a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                                  "ACCESS_REFUSED - write access to queue '%s' refused", tg->q[i],
                                  AMQP_BASIC_PUBLISH_METHOD);
    return 0;
}

static void publish_complete(a091_conn_t *c, a091_chan_t *ch)
{
    c->published = true;
    uint64_t seq = ch->confirm ? ++ch->pub_seq : 0;
    a091_targets_t tg = {0};
    const amqp_table_t *hdrs = ch->pub_props && (ch->pub_props->_flags & AMQP_BASIC_HEADERS_FLAG)
                                   ? &ch->pub_props->headers
                                   : NULL;
    int rc = a091_route(c, ch->pub_exchange, ch->pub_rkey, hdrs, &tg);
    if (rc == 0)
        rc = publish_targets(c, ch, &tg);
    if (rc == A091_ACCESS_REFUSED) {
        a091_targets_free(&tg);
        return;
    }
    if (rc != 0 || tg.n == 0) {
        if (ch->pub_mandatory)
            publish_return(c, ch);
        if (seq)
            send_confirm(c, ch->id, seq, rc == 0); /* RabbitMQ acks an unroutable publish */
    } else if (ch->tx) { /* kept until tx.commit (tx.c) */
        const mqd_buf_t *buf = publish_encode(c, ch);
        if (buf)
            a091_tx_keep_publish(c, ch, buf, &tg);
    } else {
        a091_multi_t *mu = seq ? a091_multi_new(c, ch, confirm_tag(ch, seq), false) : NULL;
        const mqd_buf_t *buf = publish_encode(c, ch);
        if (seq && !mu) {
            send_confirm(c, ch->id, seq, false);
        } else if (buf) {
            /* the scratch buffer is reused by nothing a store calls */
            for (size_t i = 0; i < tg.n; i++)
                a091_store(c, ch, tg.q[i], buf, mu);
        } else if (mu) {
            mu->nack = true;
        }
        if (mu)
            a091_multi_done(mu); /* publish_complete's hold */
    }
    a091_targets_free(&tg);
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
    int rc = a091_exchange_check(c, ex);
    if (rc != 0)
        return a091_chan_fail(c, ch, rc,
                              rc == A091_NOT_FOUND
                                  ? "NOT_FOUND - no exchange '%s' in vhost '/'"
                                  : "ACCESS_REFUSED - cannot publish to internal exchange '%s'",
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

mqd_topic_t *a091_queue_topic(a091_conn_t *c, a091_chan_t *ch, const char *q, bool create,
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
    mqd_topic_t *t = a091_queue_topic(c, ch, q, !m->passive, AMQP_QUEUE_DECLARE_METHOD);
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

/* queue.purge and queue.delete: a log is not emptied by one reader; purge moves the
 * `$shared` group past everything (RabbitMQ's purge for this queue's consumers), delete
 * deletes the topic (needs 'manage'). */
static int queue_drop(a091_conn_t *c, a091_chan_t *ch, amqp_bytes_t queue, bool nowait, bool delete)
{
    amqp_method_number_t id = delete ? AMQP_QUEUE_DELETE_METHOD : AMQP_QUEUE_PURGE_METHOD;
    char q[256];
    a091_cstr(queue, q);
    mqd_topic_t *t = a091_queue_topic(c, ch, q, false, id);
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
    if (delete)
        a091_exch_queue_gone(q);
    if (nowait)
        return 0;
    /* purge-ok and delete-ok have the same one field */
    amqp_queue_delete_ok_t ok = {.message_count = n};
    return a091_send_method(c, ch->id,
                            delete ? AMQP_QUEUE_DELETE_OK_METHOD : AMQP_QUEUE_PURGE_OK_METHOD, &ok);
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
        if (ch->tx)
            return a091_chan_fail(c, ch, A091_PRECONDITION_FAILED,
                                  "PRECONDITION_FAILED - cannot switch from tx to confirm mode%s",
                                  "", mid);
        ch->confirm = true;
        if (((amqp_confirm_select_t *)m)->nowait)
            return 0;
        amqp_confirm_select_ok_t ok = {0};
        return a091_send_method(c, id, AMQP_CONFIRM_SELECT_OK_METHOD, &ok);
    }
    case AMQP_QUEUE_DECLARE_METHOD: return queue_declare(c, ch, m);
    case AMQP_QUEUE_BIND_METHOD:
    case AMQP_QUEUE_UNBIND_METHOD: return a091_exchange_method(c, ch, mid, m);
    case AMQP_QUEUE_PURGE_METHOD: {
        amqp_queue_purge_t *p = m;
        return queue_drop(c, ch, p->queue, p->nowait, false);
    }
    case AMQP_QUEUE_DELETE_METHOD: {
        amqp_queue_delete_t *d = m;
        return queue_drop(c, ch, d->queue, d->nowait, true);
    }
    default: break;
    }
    if ((mid >> 16) == AMQP_EXCHANGE_CLASS)
        return a091_exchange_method(c, ch, mid, m);
    if ((mid >> 16) == AMQP_BASIC_CLASS)
        return a091_basic_method(c, ch, mid, m);
    if ((mid >> 16) == AMQP_TX_CLASS)
        return a091_tx_method(c, ch, mid);
    return a091_chan_fail(c, ch, A091_NOT_IMPLEMENTED, "NOT_IMPLEMENTED - %s",
                          amqp_method_name(mid), mid);
}
