/* amqp091/consume: basic.consume / cancel / qos / get / ack / nack / reject / recover
 * on a queue = the topic's `$shared` group: each record goes to one consumer of the
 * group (0-9-1 channels and 1.0 links alike); unacked deliveries go back to the group
 * (redelivered) when their channel or connection closes, or on nack/reject with
 * requeue. Deliveries are taken from the group's cursors as 1.0 consumers take them
 * (group/cursor.c); the topic's commit point wakes the connections (core's topic_wake). */
#include "config.h"
#include "amqp091/amqp091_int.h"
#include "auth/auth.h"
#include "group/group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUT_HIGH (1u << 20) /* no more deliveries while this much output waits */

static struct event *wake_ev; /* deferred: a commit-point callback only marks */

/* The `$shared` group of queue q, or NULL when the topic is gone. */
static mqd_group_t *queue_group(mqd_server_t *s, const char *q, mqd_topic_t **tp)
{
    mqd_topic_t *t = mqd_topic_find(s, q);
    mqd_group_t *g = NULL;
    if (t && mqd_group_get(t, MQD_SHARED_GROUP, &g) != 0)
        g = NULL;
    *tp = t;
    return g;
}

/* Gives an unacked delivery back (requeue) or marks it done. */
static void settle(a091_conn_t *c, a091_unacked_t *u, bool done)
{
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(c->srv);
    if (u->fx && fh->ext_settle) { /* read through the leaders: settled there */
        fh->ext_settle(fh->arg, u->fx, u->fid, done ? PN_ACCEPTED : PN_MODIFIED);
        free(u->topic);
        u->topic = NULL;
        return;
    }
    if (u->stream) { /* read by offset: nothing to give back */
        free(u->topic);
        u->topic = NULL;
        return;
    }
    mqd_topic_t *t;
    mqd_group_t *g = queue_group(c->srv, u->topic, &t);
    mqd_cursor_t *cur = g ? mqd_group_cursor(g, u->part) : NULL;
    if (cur) {
        if (done)
            mqd_cursor_done(cur, u->offset);
        else
            mqd_cursor_release(cur, u->offset, false);
        mqd_group_settled(g, u->part);
        if (!done)
            mqd_topic_dispatch_soon(t); /* the group's other consumers may take it */
    }
    free(u->topic);
    u->topic = NULL;
}

static void consumer_free(a091_conn_t *c, a091_consumer_t *k)
{
    mqd_topic_t *t = mqd_topic_find(c->srv, k->topic);
    if (t)
        mqd_topic_ext_consumers(t, -1);
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(c->srv);
    if (k->fx && fh->ext_close)
        fh->ext_close(fh->arg, k->fx);
    a091_stream_free(k);
    free(k->tag);
    free(k->topic);
    free(k);
}

void a091_release_all(a091_conn_t *c, a091_chan_t *ch)
{
    for (size_t i = 0; i < ch->n_unacked; i++)
        settle(c, &ch->unacked[i], false);
    ch->n_unacked = 0;
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(c->srv);
    if (ch->get_fx && fh->ext_close)
        fh->ext_close(fh->arg, ch->get_fx);
    ch->get_fx = NULL;
    free(ch->get_q);
    ch->get_q = NULL;
    while (ch->consumers) {
        a091_consumer_t *k = ch->consumers;
        ch->consumers = k->next;
        consumer_free(c, k);
    }
}

/* ---- delivery ---- */

/* A stream consumer's delivery carries its offset as the header x-stream-offset. */
static void add_offset_header(amqp_pool_t *pool, amqp_basic_properties_t *props, uint64_t off)
{
    int n = (props->_flags & AMQP_BASIC_HEADERS_FLAG) ? props->headers.num_entries : 0;
    amqp_table_entry_t *e = amqp_pool_alloc(pool, (size_t)(n + 1) * sizeof *e);
    if (!e)
        return;
    if (n)
        memcpy(e, props->headers.entries, (size_t)n * sizeof *e);
    e[n].key = amqp_cstring_bytes("x-stream-offset");
    e[n].value.kind = AMQP_FIELD_KIND_I64;
    e[n].value.value.i64 = (int64_t)off;
    props->headers = (amqp_table_t){.num_entries = n + 1, .entries = e};
    props->_flags |= AMQP_BASIC_HEADERS_FLAG;
}

/* Sends record rec of q (partition part) as basic.deliver (k) or basic.get-ok (k NULL);
 * fx: read through the leaders, as fwd's message fid. */
static void deliver(a091_conn_t *c, a091_chan_t *ch, a091_consumer_t *k, const char *q,
                    uint32_t part, const mqd_rec_t *rec, uint32_t dc, bool no_ack, void *fx,
                    uint64_t fid)
{
    bool stream = k && k->stream;
    amqp_basic_properties_t props = {0};
    amqp_bytes_t body = {.len = rec->len, .bytes = (void *)rec->data};
    a091_routed_t rt = {0};
    uint32_t count = 0; /* the header's: the leader's count of earlier deliveries */
    if (a091_map_from_amqp10(rec->data, rec->len, &c->pool, &props, &body, &rt,
                             fx ? &count : NULL) != 0) {
        memset(&props, 0, sizeof props); /* not a 1.0 message: its bytes as they are */
        body = (amqp_bytes_t){.len = rec->len, .bytes = (void *)rec->data};
        rt = (a091_routed_t){0};
    }
    if (stream)
        add_offset_header(&c->pool, &props, rec->offset);
    uint64_t tag = ch->next_dtag++;
    bool redelivered = (dc & MQD_DC_SEEN) || MQD_DC_COUNT(dc) > 0 || count > 0;
    amqp_bytes_t rk = amqp_cstring_bytes(rt.rkey ? rt.rkey : q);
    amqp_bytes_t ex = amqp_cstring_bytes(rt.exchange ? rt.exchange : ""); /* as published */
    if (k) {
        amqp_basic_deliver_t m = {.consumer_tag = amqp_cstring_bytes(k->tag),
                                  .delivery_tag = tag,
                                  .redelivered = redelivered,
                                  .exchange = ex,
                                  .routing_key = rk};
        a091_send_method(c, ch->id, AMQP_BASIC_DELIVER_METHOD, &m);
    } else {
        amqp_basic_get_ok_t m = {.delivery_tag = tag,
                                 .redelivered = redelivered,
                                 .exchange = ex,
                                 .routing_key = rk,
                                 .message_count = 0};
        a091_send_method(c, ch->id, AMQP_BASIC_GET_OK_METHOD, &m);
    }
    a091_send_content(c, ch->id, &props, body.bytes, body.len);
    recycle_amqp_pool(&c->pool);
    a091_unacked_t u = {
        .tag = tag, .offset = rec->offset, .part = part, .stream = stream, .topic = strdup(q),
        .fx = fx, .fid = fid};
    if (no_ack || !u.topic) {
        settle(c, &u, true);
        return;
    }
    if (ch->n_unacked == ch->cap_unacked) {
        size_t cap = ch->cap_unacked ? ch->cap_unacked * 2 : 64;
        a091_unacked_t *v = realloc(ch->unacked, cap * sizeof *v);
        if (!v) {
            settle(c, &u, false);
            return;
        }
        ch->unacked = v;
        ch->cap_unacked = cap;
    }
    ch->unacked[ch->n_unacked++] = u;
}

/* The next message of a queue read through the leaders (fwd's consumer fx) as a record
 * (offset 0: the leader's offsets are not shown); false: none now. */
static bool take_fx(a091_conn_t *c, void *fx, mqd_rec_t *rec, uint64_t *fid)
{
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(c->srv);
    const uint8_t *p;
    size_t len;
    if (!fh->ext_next || !fh->ext_next(fh->arg, fx, fid, &p, &len))
        return false;
    memset(rec, 0, sizeof *rec);
    rec->data = p;
    rec->len = (uint32_t)len;
    return true;
}

/* Takes the next record of q's `$shared` group, from partition *rr on; false: none now. */
static bool take(a091_conn_t *c, const char *q, uint32_t *rr, mqd_rec_t *rec, uint32_t *dc,
                 uint32_t *part, bool *gone)
{
    mqd_topic_t *t;
    mqd_group_t *g = queue_group(c->srv, q, &t);
    *gone = !t;
    if (!g)
        return false;
    uint32_t n = mqd_group_nparts(g);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = (*rr + k) % n;
        mqd_cursor_t *cur = mqd_group_cursor(g, i);
        if (cur && mqd_cursor_next(cur, mqd_topic_part(t, i), rec, dc)) {
            *rr = i + 1;
            *part = i;
            return true;
        }
    }
    return false;
}

static void cancel_notify(a091_conn_t *c, a091_chan_t *ch, a091_consumer_t *k)
{
    amqp_basic_cancel_t m = {.consumer_tag = amqp_cstring_bytes(k->tag), .nowait = 1};
    a091_send_method(c, ch->id, AMQP_BASIC_CANCEL_METHOD, &m);
}

/* One channel's consumers, round robin, within prefetch and the output bound. */
static size_t pump_chan(a091_conn_t *c, a091_chan_t *ch)
{
    size_t sent = 0;
    for (a091_consumer_t **kp = &ch->consumers; *kp;) {
        a091_consumer_t *k = *kp;
        if (c->out_len - c->out_off >= OUT_HIGH || c->dead || ch->closing)
            return sent;
        /* every delivery is authorized: a reload that took the right ends the consumer */
        bool denied = !mqd_auth_user_may(c->srv, c->user, MQD_PERM_RECEIVE, k->topic);
        bool full = !k->no_ack && ch->prefetch && ch->n_unacked >= ch->prefetch;
        mqd_rec_t rec;
        uint32_t dc = 0, part = 0;
        uint64_t fid = 0;
        bool gone = false;
        if (!denied && !full &&
            (k->fx       ? take_fx(c, k->fx, &rec, &fid)
             : k->stream ? a091_stream_next(c, k, &rec, &part, &gone)
                         : take(c, k->topic, &k->rr, &rec, &dc, &part, &gone))) {
            deliver(c, ch, k, k->topic, part, &rec, dc, k->no_ack, k->fx, fid);
            sent++;
        } else if (gone || denied) { /* RabbitMQ's consumer cancel notification */
            MQD_NOTICE_RL("amqp091", "peer=%s consumer %s on %s cancelled: %s", c->peer, k->tag,
                          k->topic, denied ? "no 'receive' right any more" : "topic deleted");
            cancel_notify(c, ch, k);
            *kp = k->next;
            consumer_free(c, k);
            continue;
        }
        kp = &k->next;
    }
    return sent;
}

void a091_pump(a091_conn_t *c)
{
    if (c->state != A091_UP)
        return;
    for (int guard = 0; guard < 100000 && !c->dead; guard++) {
        size_t sent = 0;
        for (uint32_t i = 1; i <= c->channel_max; i++) {
            a091_chan_t *ch = c->chans[i];
            if (ch && ch->open && !ch->closing && ch->consumers)
                sent += pump_chan(c, ch);
        }
        if (sent == 0)
            break;
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
    MQD_UNUSED(arg);
    for (a091_conn_t *c = a091_conns_head(); c;) {
        a091_conn_t *next = c->next;
        a091_conn_ref(c);
        a091_pump(c);
        a091_flush(c);
        a091_conn_unref(c);
        c = next;
    }
}

/* Every connection's consumers look again, soon (s: the server). */
static void wake_srv(void *s)
{
    if (!wake_ev) {
        wake_ev = event_new(mqd_srv_base(s), -1, 0, on_wake, NULL);
        if (!wake_ev)
            return;
    }
    event_active(wake_ev, EV_TIMEOUT, 1);
}

void a091_topic_wake(mqd_topic_t *t)
{
    wake_srv(mqd_topic_srv(t));
}

/* In a cluster, a queue whose partitions this node does not all lead is read through
 * the leaders (fwd's consumer, as `c`'s user): its handle, or NULL to read it here. *err:
 * true when it should have been but could not (out of memory). */
static void *open_fx(a091_conn_t *c, const char *q, bool *err)
{
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(c->srv);
    *err = false;
    if (!fh->ext_wanted || !fh->ext_open || !fh->ext_wanted(fh->arg, q))
        return NULL;
    void *fx = fh->ext_open(fh->arg, q, c->user, wake_srv, c->srv);
    *err = !fx;
    return fx;
}

void a091_wake_free(void)
{
    if (wake_ev)
        event_free(wake_ev);
    wake_ev = NULL;
}

/* ---- methods ---- */

static int consume(a091_conn_t *c, a091_chan_t *ch, amqp_basic_consume_t *m)
{
    char q[256], tag[256];
    a091_cstr(m->queue, q);
    a091_cstr(m->consumer_tag, tag);
    mqd_topic_t *t = q[0] ? mqd_topic_find(c->srv, q) : NULL;
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(c->srv);
    bool remote = !t && q[0] && fh->nparts && fh->nparts(fh->arg, q) > 0; /* no copy here */
    if (!t && !mqd_auth_user_may(c->srv, c->user, MQD_PERM_RECEIVE, q))
        return a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                              "ACCESS_REFUSED - read access to queue '%s' "
                              "refused",
                              q, AMQP_BASIC_CONSUME_METHOD);
    if (!t && !remote)
        return a091_chan_fail(c, ch, A091_NOT_FOUND, "NOT_FOUND - no queue '%s' in vhost '/'", q,
                              AMQP_BASIC_CONSUME_METHOD);
    if (!a091_may(c, MQD_PERM_RECEIVE, q))
        return a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                              "ACCESS_REFUSED - read access to queue '%s' "
                              "refused",
                              q, AMQP_BASIC_CONSUME_METHOD);
    if (!tag[0])
        snprintf(tag, sizeof tag, "amq.ctag-mqd-%u-%llu", ch->id,
                 (unsigned long long)ch->next_dtag + (unsigned long long)(uintptr_t)ch % 100000);
    for (a091_consumer_t *k = ch->consumers; k; k = k->next)
        if (strcmp(k->tag, tag) == 0) {
            a091_conn_error(c, A091_NOT_ALLOWED, "NOT_ALLOWED - attempt to reuse consumer tag",
                            AMQP_BASIC_CONSUME_METHOD);
            return A091_NOT_ALLOWED;
        }
    a091_consumer_t *k = calloc(1, sizeof *k);
    if (!k || !(k->tag = strdup(tag)) || !(k->topic = strdup(q))) {
        if (k)
            free(k->tag);
        free(k);
        a091_conn_error(c, A091_RESOURCE_ERROR, "RESOURCE_ERROR - out of memory", 0);
        return A091_RESOURCE_ERROR;
    }
    k->no_ack = m->no_ack;
    bool err = false;
    for (int i = 0; i < m->arguments.num_entries; i++) {
        amqp_table_entry_t *e = &m->arguments.entries[i];
        if (e->key.len != 15 || memcmp(e->key.bytes, "x-stream-offset", 15) != 0)
            continue;
        int rc = t ? a091_stream_start(k, t, &e->value) : A091_NOT_IMPLEMENTED;
        if (rc != 0) {
            free(k->tag);
            free(k->topic);
            free(k);
            return a091_chan_fail(c, ch, rc,
                                  "PRECONDITION_FAILED - x-stream-offset: want first, "
                                  "last, next, an offset or a timestamp%s",
                                  t ? "" : " (and a copy of the queue on this node)",
                                  AMQP_BASIC_CONSUME_METHOD);
        }
    }
    if (!k->stream && !(k->fx = open_fx(c, q, &err)) && (err || !t)) {
        free(k->tag);
        free(k->topic);
        free(k);
        a091_conn_error(c, A091_RESOURCE_ERROR, "RESOURCE_ERROR - out of memory", 0);
        return A091_RESOURCE_ERROR;
    }
    a091_consumer_t **tail = &ch->consumers;
    while (*tail)
        tail = &(*tail)->next;
    *tail = k;
    if (t)
        mqd_topic_ext_consumers(t, 1);
    if (m->nowait)
        return 0;
    amqp_basic_consume_ok_t ok = {.consumer_tag = amqp_cstring_bytes(tag)};
    return a091_send_method(c, ch->id, AMQP_BASIC_CONSUME_OK_METHOD, &ok);
}

static int cancel(a091_conn_t *c, a091_chan_t *ch, amqp_basic_cancel_t *m)
{
    char tag[256];
    a091_cstr(m->consumer_tag, tag);
    for (a091_consumer_t **kp = &ch->consumers; *kp; kp = &(*kp)->next) {
        a091_consumer_t *k = *kp;
        if (strcmp(k->tag, tag) != 0)
            continue;
        *kp = k->next;
        for (size_t i = 0; i < ch->n_unacked; i++)
            if (ch->unacked[i].cons == k)
                ch->unacked[i].cons = NULL; /* stays ackable, as RabbitMQ's */
        consumer_free(c, k);
        break;
    }
    if (m->nowait)
        return 0;
    amqp_basic_cancel_ok_t ok = {.consumer_tag = amqp_cstring_bytes(tag)};
    return a091_send_method(c, ch->id, AMQP_BASIC_CANCEL_OK_METHOD, &ok);
}

/* ack / nack / reject: tag, or every tag up to it (multiple; 0 with multiple = all). */
/* A transactional channel's ack, nack or reject: its tag checked now, kept until the
 * commit (tx.c). */
static int settle_or_keep(a091_conn_t *c, a091_chan_t *ch, uint64_t tag, bool multiple,
                          bool done, amqp_method_number_t id);

int a091_settle_tags(a091_conn_t *c, a091_chan_t *ch, uint64_t tag, bool multiple, bool done,
                     amqp_method_number_t id)
{
    size_t w = 0, hit = 0;
    for (size_t i = 0; i < ch->n_unacked; i++) {
        a091_unacked_t *u = &ch->unacked[i];
        bool mine = multiple ? (tag == 0 || u->tag <= tag) : u->tag == tag;
        if (mine) {
            settle(c, u, done);
            hit++;
        } else {
            ch->unacked[w++] = *u;
        }
    }
    ch->n_unacked = w;
    if (hit == 0 && !(multiple && tag == 0)) {
        char num[32];
        snprintf(num, sizeof num, "%llu", (unsigned long long)tag);
        return a091_chan_fail(c, ch, A091_PRECONDITION_FAILED,
                              "PRECONDITION_FAILED - unknown delivery tag %s", num, id);
    }
    return 0;
}

static int settle_or_keep(a091_conn_t *c, a091_chan_t *ch, uint64_t tag, bool multiple,
                          bool done, amqp_method_number_t id)
{
    if (!ch->tx)
        return a091_settle_tags(c, ch, tag, multiple, done, id);
    bool known = multiple && tag == 0;
    for (size_t i = 0; i < ch->n_unacked && !known; i++)
        known = multiple ? ch->unacked[i].tag <= tag : ch->unacked[i].tag == tag;
    if (!known) {
        char num[32];
        snprintf(num, sizeof num, "%llu", (unsigned long long)tag);
        return a091_chan_fail(c, ch, A091_PRECONDITION_FAILED,
                              "PRECONDITION_FAILED - unknown delivery tag %s", num, id);
    }
    return a091_tx_keep_settle(c, ch, tag, multiple, done, id);
}

/* basic.get of a queue read through the leaders: the channel's consumer of it (one
 * queue at a time; its legs stay until the channel closes or gets another queue, so that
 * the next get finds messages ready); NULL: read it here. */
static void *get_fx(a091_conn_t *c, a091_chan_t *ch, const char *q)
{
    if (ch->get_fx && strcmp(ch->get_q, q) == 0)
        return ch->get_fx;
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(c->srv);
    if (ch->get_fx && fh->ext_close)
        fh->ext_close(fh->arg, ch->get_fx);
    free(ch->get_q);
    ch->get_fx = NULL;
    ch->get_q = NULL;
    bool err;
    void *fx = open_fx(c, q, &err);
    if (fx && !(ch->get_q = strdup(q))) {
        fh->ext_close(fh->arg, fx);
        fx = NULL;
    }
    return ch->get_fx = fx;
}

static int get(a091_conn_t *c, a091_chan_t *ch, amqp_basic_get_t *m)
{
    char q[256];
    a091_cstr(m->queue, q);
    mqd_topic_t *t = mqd_topic_find(c->srv, q);
    if (!a091_may(c, MQD_PERM_RECEIVE, q))
        return a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                              "ACCESS_REFUSED - read access to queue '%s' "
                              "refused",
                              q, AMQP_BASIC_GET_METHOD);
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(c->srv);
    if (!t && !(fh->nparts && fh->nparts(fh->arg, q) > 0))
        return a091_chan_fail(c, ch, A091_NOT_FOUND, "NOT_FOUND - no queue '%s' in vhost '/'", q,
                              AMQP_BASIC_GET_METHOD);
    mqd_rec_t rec;
    uint32_t dc, part, rr = 0;
    bool gone;
    if (get_fx(c, ch, q)) { /* read through the leaders */
        uint64_t fid;
        if (take_fx(c, ch->get_fx, &rec, &fid)) {
            deliver(c, ch, NULL, q, 0, &rec, 0, m->no_ack, ch->get_fx, fid);
            return 0;
        }
    } else if (take(c, q, &rr, &rec, &dc, &part, &gone)) {
        deliver(c, ch, NULL, q, part, &rec, dc, m->no_ack, NULL, 0);
        return 0;
    }
    amqp_basic_get_empty_t e = {.cluster_id = amqp_cstring_bytes("")};
    return a091_send_method(c, ch->id, AMQP_BASIC_GET_EMPTY_METHOD, &e);
}

int a091_basic_method(a091_conn_t *c, a091_chan_t *ch, amqp_method_number_t id, void *m)
{
    switch (id) {
    case AMQP_BASIC_QOS_METHOD: {
        ch->prefetch = ((amqp_basic_qos_t *)m)->prefetch_count;
        amqp_basic_qos_ok_t ok = {0};
        return a091_send_method(c, ch->id, AMQP_BASIC_QOS_OK_METHOD, &ok);
    }
    case AMQP_BASIC_CONSUME_METHOD: return consume(c, ch, m);
    case AMQP_BASIC_CANCEL_METHOD: return cancel(c, ch, m);
    case AMQP_BASIC_GET_METHOD: return get(c, ch, m);
    case AMQP_BASIC_ACK_METHOD: {
        amqp_basic_ack_t *a = m;
        return settle_or_keep(c, ch, a->delivery_tag, a->multiple, true, id);
    }
    case AMQP_BASIC_NACK_METHOD: {
        amqp_basic_nack_t *a = m;
        return settle_or_keep(c, ch, a->delivery_tag, a->multiple, !a->requeue, id);
    }
    case AMQP_BASIC_REJECT_METHOD: {
        amqp_basic_reject_t *a = m;
        return settle_or_keep(c, ch, a->delivery_tag, false, !a->requeue, id);
    }
    case AMQP_BASIC_RECOVER_METHOD:
    case AMQP_BASIC_RECOVER_ASYNC_METHOD:
        a091_settle_tags(c, ch, 0, true, false, id);
        if (id == AMQP_BASIC_RECOVER_METHOD) {
            amqp_basic_recover_ok_t ok = {0};
            return a091_send_method(c, ch->id, AMQP_BASIC_RECOVER_OK_METHOD, &ok);
        }
        return 0;
    default:
        return a091_chan_fail(c, ch, A091_NOT_IMPLEMENTED, "NOT_IMPLEMENTED - %s",
                              amqp_method_name(id), id);
    }
}
