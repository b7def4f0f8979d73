/* PEEK of com.mqd:topic: the records of one partition as they are stored, without
 * consuming, acquiring or moving any group's offset (a browse for operators: the web
 * console's message browser, docs/console.md). Properties of the request:
 *   name       the topic
 *   partition  the partition (0 when absent)
 *   from       first offset to show; absent = the last `count` records
 *   count      how many (1..PEEK_MAX, default 10)
 * The reply is a map: topic, partition, start, end, messages (a list of maps: offset,
 * timestamp, size, header, properties, application_properties, message_annotations
 * (each null when the message has none), body_type (data, value, sequence, none),
 * body_size, body_hex (at most PEEK_BODY_MAX bytes, hex), body_truncated, and for an
 * amqp-value that is neither binary nor string, body (its JSON form)). */
#include "config.h"
#include "codec/codec.h"
#include "mgmt/mgmt_int.h"
#include "mgmt/mgmt_json.h"
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

#define PEEK_MAX 100
#define PEEK_BODY_MAX 4096

static void kv_json(pn_data_t *d, const char *k, const uint8_t *p, mqd_span_t sp)
{
    json_t *v = sp.len ? mqd_mgmt_decode_json((const char *)p + sp.off, sp.len) : NULL;
    pn_data_put_string(d, pn_bytes(strlen(k), k));
    if (!v || mqd_mgmt_json_to_data(d, v, 2) != 0)
        pn_data_put_null(d);
    json_decref(v);
}

static void kv_hex(pn_data_t *d, const char *k, const uint8_t *b, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    char *hex = malloc(n * 2 + 1);
    if (!hex)
        return mqd_mgmt_kv_str(d, k, NULL);
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[b[i] >> 4];
        hex[2 * i + 1] = digits[b[i] & 15];
    }
    hex[2 * n] = '\0';
    mqd_mgmt_kv_str(d, k, hex);
    free(hex);
}

/* The body's first section: its kind and payload (binary/string bytes, or the encoded
 * section for other values), decoded with Proton's codec. */
static void put_body(pn_data_t *d, const uint8_t *p, size_t n, const mqd_msg_info_t *mi)
{
    const char *kind = "none";
    pn_bytes_t raw = pn_bytes(0, NULL);
    json_t *value = NULL;
    pn_data_t *b = mi->body_off < n ? pn_data(4) : NULL;
    if (b && pn_data_decode(b, (const char *)p + mi->body_off, n - mi->body_off) > 0) {
        pn_data_rewind(b);
        if (pn_data_next(b) && pn_data_type(b) == PN_DESCRIBED) {
            pn_data_enter(b);
            pn_data_next(b);
            uint64_t code = pn_data_type(b) == PN_ULONG ? pn_data_get_ulong(b) : 0;
            kind = code == 0x75 ? "data" : code == 0x76 ? "sequence" : "value";
            if (pn_data_next(b)) {
                pn_type_t t = pn_data_type(b);
                if (t == PN_BINARY)
                    raw = pn_data_get_binary(b);
                else if (t == PN_STRING)
                    raw = pn_data_get_string(b);
                else
                    value = mqd_mgmt_data_to_json(b, 2);
            }
            pn_data_exit(b);
        }
    }
    if (!raw.start && mi->body_off < n)
        raw = pn_bytes(n - mi->body_off, (const char *)p + mi->body_off);
    mqd_mgmt_kv_str(d, "body_type", kind);
    mqd_mgmt_kv_long(d, "body_size", (int64_t)raw.size);
    kv_hex(d, "body_hex", (const uint8_t *)raw.start,
           raw.size > PEEK_BODY_MAX ? PEEK_BODY_MAX : raw.size);
    mqd_mgmt_kv_bool(d, "body_truncated", raw.size > PEEK_BODY_MAX);
    if (value) {
        pn_data_put_string(d, pn_bytes(4, "body"));
        if (mqd_mgmt_json_to_data(d, value, 2) != 0)
            pn_data_put_null(d);
        json_decref(value);
    }
    if (b)
        pn_data_free(b);
}

static void put_record(pn_data_t *d, const mqd_rec_t *rec)
{
    mqd_msg_info_t mi;
    pn_data_put_map(d);
    pn_data_enter(d);
    mqd_mgmt_kv_long(d, "offset", (int64_t)rec->offset);
    mqd_mgmt_kv_ts(d, "timestamp", rec->timestamp_ms);
    mqd_mgmt_kv_long(d, "size", rec->len);
    if (mqd_msg_scan_stored(rec->data, rec->len, &mi) == 0) {
        kv_json(d, "header", rec->data, mi.header);
        kv_json(d, "properties", rec->data, mi.properties);
        kv_json(d, "application_properties", rec->data, mi.app_props);
        kv_json(d, "message_annotations", rec->data, mi.message_ann);
        put_body(d, rec->data, rec->len, &mi);
    } else {
        mqd_mgmt_kv_str(d, "body_type", "unreadable");
        kv_hex(d, "body_hex", rec->data, rec->len > PEEK_BODY_MAX ? PEEK_BODY_MAX : rec->len);
    }
    pn_data_exit(d);
}

/* Appends up to `count` data records of [from, end) to d's open list. */
static int put_records(pn_data_t *d, mqd_plog_t *log, uint64_t from, uint64_t end, int64_t count)
{
    mqd_read_t rd;
    int rc = 0;
    mqd_read_init(&rd);
    /* each read returns at least one record or ends the loop: bounded by count + 2 */
    for (int rounds = 0; from < end && count > 0 && rounds < PEEK_MAX + 2; rounds++) {
        rc = mqd_plog_read(log, from, end, (size_t)count, 4u << 20, &rd);
        if (rc != 0 || rd.n == 0)
            break;
        for (size_t i = 0; i < rd.n && count > 0; i++) {
            if ((rd.recs[i].flags & MQD_REC_KIND_MASK) != MQD_REC_DATA)
                continue; /* control and corrupt records hold no message */
            put_record(d, &rd.recs[i]);
            count--;
        }
        from = rd.next_offset;
    }
    mqd_read_free(&rd);
    return rc;
}

int mqd_mgmt_topic_peek(mqd_mgmt_req_t *r)
{
    int64_t part = 0, count = 10, from = -1;
    mqd_topic_t *t = r->name ? mqd_topic_find(r->s, r->name) : NULL;
    if (!t || mqd_topic_temporary(t))
        return mqd_mgmt_fail(r, 404, "no topic '%s'", r->name ? r->name : "");
    if (json_object_get(r->props, "partition") && !mqd_mgmt_arg_int(r, "partition", &part))
        return mqd_mgmt_fail(r, 400, "partition must be an integer");
    if (part < 0 || part >= (int64_t)mqd_topic_nparts(t))
        return mqd_mgmt_fail(r, 404, "no partition %lld in '%s'", (long long)part,
                             mqd_topic_name(t));
    if (json_object_get(r->props, "count") &&
        (!mqd_mgmt_arg_int(r, "count", &count) || count < 1 || count > PEEK_MAX))
        return mqd_mgmt_fail(r, 400, "count must be an integer in 1..%d", PEEK_MAX);
    if (json_object_get(r->props, "from") && (!mqd_mgmt_arg_int(r, "from", &from) || from < 0))
        return mqd_mgmt_fail(r, 400, "from must be a non-negative offset");
    mqd_part_t *p = mqd_topic_part(t, (uint32_t)part);
    mqd_plog_t *log = mqd_part_log(p);
    uint64_t start = mqd_plog_start_offset(log);
    uint64_t end = mqd_part_visible_end(p, MQD_READ_COMMITTED);
    if (end < start)
        end = start; /* retention ahead of a reader's view: nothing to show */
    uint64_t first = from >= 0                       ? (uint64_t)from
                     : end - start > (uint64_t)count ? end - (uint64_t)count
                                                     : start;
    if (first < start)
        first = start;
    pn_data_t *d = r->out;
    pn_data_put_map(d);
    pn_data_enter(d);
    mqd_mgmt_kv_str(d, "topic", mqd_topic_name(t));
    mqd_mgmt_kv_long(d, "partition", part);
    mqd_mgmt_kv_long(d, "start", (int64_t)start);
    mqd_mgmt_kv_long(d, "end", (int64_t)end);
    mqd_mgmt_kv_enter(d, "messages", true);
    int rc = put_records(d, log, first, end, count);
    pn_data_exit(d);
    pn_data_exit(d);
    if (rc != 0 && rc != MQD_ERANGE)
        return mqd_mgmt_fail(r, rc == MQD_EAGAIN ? 503 : 500, "read failed: %s", mqd_strerror(rc));
    return 200;
}
