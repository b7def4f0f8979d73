/* amqp091/stream: consumers with the `x-stream-offset` argument read the topic by offset,
 * as RabbitMQ's stream consumers do: each from its own position (first, last, next, an
 * offset, a timestamp), every record to every such consumer, acks only free prefetch
 * slots (nothing is redelivered, the `$shared` group is not touched). With several
 * partitions the position applies to each; offsets are per partition. */
#include "config.h"
#include "amqp091/amqp091_int.h"
#include "store/store.h"

#include <stdlib.h>
#include <string.h>

enum { POS_FIRST, POS_LAST, POS_NEXT, POS_OFFSET, POS_TIME };

static bool spec_parse(const amqp_field_value_t *v, int *how, int64_t *value)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES: {
        static const char *const words[] = {"first", "last", "next"};
        for (int i = 0; i < 3; i++)
            if (v->value.bytes.len == strlen(words[i]) &&
                memcmp(v->value.bytes.bytes, words[i], v->value.bytes.len) == 0) {
                *how = i;
                return true;
            }
        return false;
    }
    case AMQP_FIELD_KIND_TIMESTAMP:
        *how = POS_TIME;
        *value = (int64_t)v->value.u64 * 1000;
        return true;
    case AMQP_FIELD_KIND_I8: *value = v->value.i8; break;
    case AMQP_FIELD_KIND_U8: *value = v->value.u8; break;
    case AMQP_FIELD_KIND_I16: *value = v->value.i16; break;
    case AMQP_FIELD_KIND_U16: *value = v->value.u16; break;
    case AMQP_FIELD_KIND_I32: *value = v->value.i32; break;
    case AMQP_FIELD_KIND_U32: *value = v->value.u32; break;
    case AMQP_FIELD_KIND_I64: *value = v->value.i64; break;
    case AMQP_FIELD_KIND_U64: *value = (int64_t)v->value.u64; break;
    default: return false;
    }
    *how = POS_OFFSET;
    return *value >= 0;
}

static uint64_t start_pos(mqd_part_t *p, int how, int64_t value)
{
    mqd_plog_t *log = mqd_part_log(p);
    uint64_t start = mqd_plog_start_offset(log);
    uint64_t end = mqd_part_visible_end(p, MQD_READ_UNCOMMITTED);
    uint64_t o = end;
    switch (how) {
    case POS_FIRST: o = start; break;
    case POS_LAST: o = end > start ? end - 1 : end; break;
    case POS_NEXT: o = end; break;
    case POS_OFFSET: o = (uint64_t)value; break;
    case POS_TIME:
        if (mqd_plog_offset_for_time(log, value, &o) != 0)
            o = end;
        break;
    default: break;
    }
    return o < start ? start : o > end ? end : o;
}

int a091_stream_start(a091_consumer_t *k, mqd_topic_t *t, const amqp_field_value_t *spec)
{
    int how;
    int64_t value = 0;
    if (!spec_parse(spec, &how, &value))
        return A091_PRECONDITION_FAILED;
    uint32_t n = mqd_topic_nparts(t);
    if (!(k->pos = calloc(n, sizeof *k->pos)))
        return A091_RESOURCE_ERROR;
    k->nparts = n;
    for (uint32_t i = 0; i < n; i++)
        k->pos[i] = start_pos(mqd_topic_part(t, i), how, value);
    mqd_read_init(&k->rd);
    k->stream = true;
    return 0;
}

void a091_stream_free(a091_consumer_t *k)
{
    if (!k->stream)
        return;
    mqd_read_free(&k->rd);
    free(k->pos);
    k->pos = NULL;
    k->stream = false;
}

/* Reads the next batch of a partition that has records past its position. */
static bool refill(a091_consumer_t *k, mqd_topic_t *t)
{
    uint32_t n = k->nparts < mqd_topic_nparts(t) ? k->nparts : mqd_topic_nparts(t);
    for (uint32_t j = 0; j < n; j++) {
        uint32_t i = (k->rr + j) % n;
        mqd_part_t *p = mqd_topic_part(t, i);
        mqd_plog_t *log = mqd_part_log(p);
        uint64_t end = mqd_part_visible_end(p, MQD_READ_COMMITTED);
        if (k->pos[i] < mqd_plog_start_offset(log))
            k->pos[i] = mqd_plog_start_offset(log); /* retention passed it */
        if (k->pos[i] >= end)
            continue;
        if (mqd_plog_read(log, k->pos[i], end, 64, 1u << 20, &k->rd) != 0 || k->rd.n == 0)
            continue;
        k->rd_pos = 0;
        k->rd_part = i;
        k->rr = i + 1;
        return true;
    }
    return false;
}

bool a091_stream_next(a091_conn_t *c, a091_consumer_t *k, mqd_rec_t *rec, uint32_t *part,
                      bool *gone)
{
    mqd_topic_t *t = mqd_topic_find(c->srv, k->topic);
    *gone = !t;
    if (!t)
        return false;
    for (int guard = 0; guard < 64; guard++) {
        while (k->rd_pos < k->rd.n) {
            const mqd_rec_t *r = &k->rd.recs[k->rd_pos++];
            if (k->rd_part >= k->nparts || r->offset < k->pos[k->rd_part])
                continue;
            k->pos[k->rd_part] = r->offset + 1;
            if ((r->flags & MQD_REC_KIND_MASK) != MQD_REC_DATA ||
                ((r->flags & MQD_REC_TXN) && !mqd_core_txn_committed(c->srv, r->txn)))
                continue; /* control records and aborted sends are never delivered */
            *rec = *r;
            *part = k->rd_part;
            return true;
        }
        k->rd.n = 0;
        if (!refill(k, t))
            return false;
    }
    return false;
}
