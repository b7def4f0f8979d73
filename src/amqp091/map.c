/* amqp091/map: a 0-9-1 publish <-> the AMQP 1.0 message mqd stores (Proton's codec).
 * The mapping (docs/amqp091.md, after RabbitMQ's): delivery-mode 2 <-> header durable,
 * priority <-> priority, expiration (ms) <-> ttl, message-id, correlation-id, reply-to,
 * content-type, content-encoding, user-id <-> properties, timestamp (s) <-> creation-time
 * (ms), headers <-> application-properties, type and app-id <-> message annotations
 * x-basic-type / x-basic-app-id, exchange and routing key -> x-exchange /
 * x-routing-key, the body <-> one data section (an amqp-value string or binary is read
 * as its bytes). */
#include "config.h"
#include "amqp091/amqp091_int.h"
#include "codec/codec.h"

#include <inttypes.h>
#include <proton/codec.h>
#include <proton/message.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pn_message_t *msg_obj; /* reused: the loop thread only */

static pn_message_t *msg_get(void)
{
    if (!msg_obj)
        msg_obj = pn_message();
    else
        pn_message_clear(msg_obj);
    return msg_obj;
}

void a091_map_free(void)
{
    if (msg_obj)
        pn_message_free(msg_obj);
    msg_obj = NULL;
}

static pn_bytes_t pb(amqp_bytes_t b)
{
    return pn_bytes(b.len, b.bytes);
}

/* a NUL-terminated copy for Proton's setters that take C strings */
static char *cs(amqp_bytes_t b, char *buf, size_t cap)
{
    size_t n = b.len < cap - 1 ? b.len : cap - 1;
    memcpy(buf, b.bytes, n);
    buf[n] = 0;
    return buf;
}

static void put_field(pn_data_t *d, const amqp_field_value_t *v)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_BOOLEAN: pn_data_put_bool(d, v->value.boolean != 0); break;
    case AMQP_FIELD_KIND_I8: pn_data_put_byte(d, v->value.i8); break;
    case AMQP_FIELD_KIND_U8: pn_data_put_ubyte(d, v->value.u8); break;
    case AMQP_FIELD_KIND_I16: pn_data_put_short(d, v->value.i16); break;
    case AMQP_FIELD_KIND_U16: pn_data_put_ushort(d, v->value.u16); break;
    case AMQP_FIELD_KIND_I32: pn_data_put_int(d, v->value.i32); break;
    case AMQP_FIELD_KIND_U32: pn_data_put_uint(d, v->value.u32); break;
    case AMQP_FIELD_KIND_I64: pn_data_put_long(d, v->value.i64); break;
    case AMQP_FIELD_KIND_U64: pn_data_put_ulong(d, v->value.u64); break;
    case AMQP_FIELD_KIND_F32: pn_data_put_float(d, v->value.f32); break;
    case AMQP_FIELD_KIND_F64: pn_data_put_double(d, v->value.f64); break;
    case AMQP_FIELD_KIND_TIMESTAMP:
        pn_data_put_timestamp(d, (pn_timestamp_t)v->value.u64 * 1000);
        break;
    case AMQP_FIELD_KIND_UTF8: pn_data_put_string(d, pb(v->value.bytes)); break;
    case AMQP_FIELD_KIND_BYTES: pn_data_put_binary(d, pb(v->value.bytes)); break;
    case AMQP_FIELD_KIND_VOID: pn_data_put_null(d); break;
    default: pn_data_put_null(d); break; /* nested tables, arrays, decimals: not mapped */
    }
}

static void put_ann(pn_data_t *d, const char *key, amqp_bytes_t v)
{
    pn_data_put_symbol(d, pn_bytes(strlen(key), key));
    pn_data_put_string(d, pb(v));
}

int a091_map_to_amqp10(const amqp_basic_properties_t *p, const char *exchange, const char *rkey,
                       const uint8_t *body, size_t len, mqd_buf_t *out)
{
    pn_message_t *m = msg_get();
    if (!m)
        return MQD_ENOMEM;
    amqp_flags_t f = p ? p->_flags : 0;
    char tmp[512];
    pn_message_set_durable(m, (f & AMQP_BASIC_DELIVERY_MODE_FLAG) && p->delivery_mode == 2);
    if (f & AMQP_BASIC_PRIORITY_FLAG)
        pn_message_set_priority(m, p->priority);
    if (f & AMQP_BASIC_EXPIRATION_FLAG)
        pn_message_set_ttl(m, (pn_millis_t)strtoul(cs(p->expiration, tmp, sizeof tmp), NULL, 10));
    if (f & AMQP_BASIC_MESSAGE_ID_FLAG)
        pn_data_put_string(pn_message_id(m), pb(p->message_id));
    if (f & AMQP_BASIC_CORRELATION_ID_FLAG)
        pn_data_put_string(pn_message_correlation_id(m), pb(p->correlation_id));
    if (f & AMQP_BASIC_REPLY_TO_FLAG)
        pn_message_set_reply_to(m, cs(p->reply_to, tmp, sizeof tmp));
    if (f & AMQP_BASIC_CONTENT_TYPE_FLAG)
        pn_message_set_content_type(m, cs(p->content_type, tmp, sizeof tmp));
    if (f & AMQP_BASIC_CONTENT_ENCODING_FLAG)
        pn_message_set_content_encoding(m, cs(p->content_encoding, tmp, sizeof tmp));
    if (f & AMQP_BASIC_USER_ID_FLAG)
        pn_message_set_user_id(m, pb(p->user_id));
    if (f & AMQP_BASIC_TIMESTAMP_FLAG)
        pn_message_set_creation_time(m, (pn_timestamp_t)p->timestamp * 1000);
    if ((f & AMQP_BASIC_HEADERS_FLAG) && p->headers.num_entries > 0) {
        pn_data_t *ap = pn_message_properties(m);
        pn_data_put_map(ap);
        pn_data_enter(ap);
        for (int i = 0; i < p->headers.num_entries; i++) {
            pn_data_put_string(ap, pb(p->headers.entries[i].key));
            put_field(ap, &p->headers.entries[i].value);
        }
        pn_data_exit(ap);
    }
    pn_data_t *ma = pn_message_annotations(m);
    pn_data_put_map(ma);
    pn_data_enter(ma);
    put_ann(ma, "x-exchange", amqp_cstring_bytes(exchange ? exchange : ""));
    put_ann(ma, "x-routing-key", amqp_cstring_bytes(rkey ? rkey : ""));
    if (f & AMQP_BASIC_TYPE_FLAG)
        put_ann(ma, "x-basic-type", p->type);
    if (f & AMQP_BASIC_APP_ID_FLAG)
        put_ann(ma, "x-basic-app-id", p->app_id);
    pn_data_exit(ma);
    pn_message_set_inferred(m, true); /* binary body -> a data section */
    pn_data_put_binary(pn_message_body(m), pn_bytes(len, (const char *)body));
    return mqd_message_encode(m, out, len + 1024);
}

/* ---- 1.0 -> 0-9-1 ---- */

static amqp_bytes_t dup_bytes(amqp_pool_t *pool, const void *p, size_t n)
{
    amqp_bytes_t b = {0};
    amqp_pool_alloc_bytes(pool, n ? n : 1, &b);
    if (!b.bytes)
        return (amqp_bytes_t){0};
    memcpy(b.bytes, p, n);
    b.len = n;
    return b;
}

static amqp_bytes_t dup_str(amqp_pool_t *pool, const char *s)
{
    return dup_bytes(pool, s, strlen(s));
}

/* An atom as a short string (message-id, correlation-id); false for none. */
static bool atom_str(amqp_pool_t *pool, pn_atom_t a, amqp_bytes_t *out)
{
    char buf[64];
    switch (a.type) {
    case PN_STRING:
    case PN_SYMBOL:
    case PN_BINARY:
        *out =
            dup_bytes(pool, a.u.as_bytes.start, a.u.as_bytes.size > 255 ? 255 : a.u.as_bytes.size);
        return true;
    case PN_ULONG: snprintf(buf, sizeof buf, "%" PRIu64, a.u.as_ulong); break;
    case PN_UUID: {
        const uint8_t *u = (const uint8_t *)a.u.as_uuid.bytes;
        snprintf(buf, sizeof buf,
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                 u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
                 u[15]);
        break;
    }
    default: return false;
    }
    *out = dup_str(pool, buf);
    return true;
}

/* One application property's value as a field value; false: not mapped. */
static bool get_field(pn_data_t *d, amqp_pool_t *pool, amqp_field_value_t *v)
{
    switch (pn_data_type(d)) {
    case PN_BOOL:
        v->kind = AMQP_FIELD_KIND_BOOLEAN;
        v->value.boolean = pn_data_get_bool(d);
        return true;
    case PN_BYTE:
        v->kind = AMQP_FIELD_KIND_I8;
        v->value.i8 = pn_data_get_byte(d);
        return true;
    case PN_UBYTE:
        v->kind = AMQP_FIELD_KIND_U8;
        v->value.u8 = pn_data_get_ubyte(d);
        return true;
    case PN_SHORT:
        v->kind = AMQP_FIELD_KIND_I16;
        v->value.i16 = pn_data_get_short(d);
        return true;
    case PN_USHORT:
        v->kind = AMQP_FIELD_KIND_U16;
        v->value.u16 = pn_data_get_ushort(d);
        return true;
    case PN_INT:
        v->kind = AMQP_FIELD_KIND_I32;
        v->value.i32 = pn_data_get_int(d);
        return true;
    case PN_UINT:
        v->kind = AMQP_FIELD_KIND_I64;
        v->value.i64 = pn_data_get_uint(d);
        return true;
    case PN_LONG:
        v->kind = AMQP_FIELD_KIND_I64;
        v->value.i64 = pn_data_get_long(d);
        return true;
    case PN_ULONG:
        v->kind = AMQP_FIELD_KIND_I64;
        v->value.i64 = (int64_t)pn_data_get_ulong(d);
        return true;
    case PN_FLOAT:
        v->kind = AMQP_FIELD_KIND_F32;
        v->value.f32 = pn_data_get_float(d);
        return true;
    case PN_DOUBLE:
        v->kind = AMQP_FIELD_KIND_F64;
        v->value.f64 = pn_data_get_double(d);
        return true;
    case PN_TIMESTAMP:
        v->kind = AMQP_FIELD_KIND_TIMESTAMP;
        v->value.u64 = (uint64_t)pn_data_get_timestamp(d) / 1000;
        return true;
    case PN_STRING:
    case PN_SYMBOL: {
        pn_bytes_t b = pn_data_type(d) == PN_STRING ? pn_data_get_string(d) : pn_data_get_symbol(d);
        v->kind = AMQP_FIELD_KIND_UTF8;
        v->value.bytes = dup_bytes(pool, b.start, b.size);
        return true;
    }
    case PN_BINARY: {
        pn_bytes_t b = pn_data_get_binary(d);
        v->kind = AMQP_FIELD_KIND_BYTES;
        v->value.bytes = dup_bytes(pool, b.start, b.size);
        return true;
    }
    default: return false;
    }
}

static void get_headers(pn_data_t *ap, amqp_pool_t *pool, amqp_basic_properties_t *p)
{
    pn_data_rewind(ap);
    if (!pn_data_next(ap) || pn_data_type(ap) != PN_MAP)
        return;
    size_t n = pn_data_get_map(ap) / 2;
    if (n == 0 || n > 4096)
        return;
    amqp_table_entry_t *e = amqp_pool_alloc(pool, n * sizeof *e);
    if (!e)
        return;
    int k = 0;
    pn_data_enter(ap);
    for (size_t i = 0; i < n; i++) {
        if (!pn_data_next(ap))
            break;
        pn_bytes_t key = pn_data_type(ap) == PN_STRING   ? pn_data_get_string(ap)
                         : pn_data_type(ap) == PN_SYMBOL ? pn_data_get_symbol(ap)
                                                         : pn_bytes(0, NULL);
        if (!pn_data_next(ap))
            break;
        if (key.size == 0 || key.size > 255 || !get_field(ap, pool, &e[k].value))
            continue;
        e[k].key = dup_bytes(pool, key.start, key.size);
        k++;
    }
    pn_data_exit(ap);
    if (k > 0) {
        p->headers = (amqp_table_t){.num_entries = k, .entries = e};
        p->_flags |= AMQP_BASIC_HEADERS_FLAG;
    }
}

static char *pool_cstr(amqp_pool_t *pool, pn_bytes_t v)
{
    char *s = amqp_pool_alloc(pool, v.size + 1);
    if (s) {
        memcpy(s, v.start, v.size);
        s[v.size] = 0;
    }
    return s;
}

static void get_annotations(pn_data_t *ma, amqp_pool_t *pool, amqp_basic_properties_t *p,
                            a091_routed_t *rt)
{
    pn_data_rewind(ma);
    if (!pn_data_next(ma) || pn_data_type(ma) != PN_MAP)
        return;
    size_t n = pn_data_get_map(ma) / 2;
    pn_data_enter(ma);
    for (size_t i = 0; i < n && pn_data_next(ma); i++) {
        pn_bytes_t key = pn_data_type(ma) == PN_SYMBOL ? pn_data_get_symbol(ma) : pn_bytes(0, NULL);
        if (!pn_data_next(ma))
            break;
        if (pn_data_type(ma) != PN_STRING)
            continue;
        pn_bytes_t v = pn_data_get_string(ma);
        if (v.size > 255)
            continue;
        amqp_bytes_t b = dup_bytes(pool, v.start, v.size);
        if (key.size == 13 && memcmp(key.start, "x-routing-key", 13) == 0) {
            rt->rkey = pool_cstr(pool, v);
        } else if (key.size == 10 && memcmp(key.start, "x-exchange", 10) == 0) {
            rt->exchange = pool_cstr(pool, v);
        } else if (key.size == 12 && memcmp(key.start, "x-basic-type", 12) == 0) {
            p->type = b;
            p->_flags |= AMQP_BASIC_TYPE_FLAG;
        } else if (key.size == 14 && memcmp(key.start, "x-basic-app-id", 14) == 0) {
            p->app_id = b;
            p->_flags |= AMQP_BASIC_APP_ID_FLAG;
        }
    }
    pn_data_exit(ma);
}

static void get_body(pn_message_t *m, amqp_pool_t *pool, amqp_bytes_t *body)
{
    pn_data_t *d = pn_message_body(m);
    pn_data_rewind(d);
    *body = (amqp_bytes_t){0};
    if (!pn_data_next(d))
        return;
    if (pn_data_type(d) == PN_BINARY || pn_data_type(d) == PN_STRING) {
        pn_bytes_t b = pn_data_type(d) == PN_BINARY ? pn_data_get_binary(d) : pn_data_get_string(d);
        *body = dup_bytes(pool, b.start, b.size);
    }
}

static void str_prop(amqp_pool_t *pool, const char *s, amqp_bytes_t *out, amqp_flags_t *f,
                     amqp_flags_t flag)
{
    if (s && *s) {
        *out = dup_str(pool, s);
        *f |= flag;
    }
}

int a091_map_from_amqp10(const uint8_t *msg, size_t len, amqp_pool_t *pool,
                         amqp_basic_properties_t *p, amqp_bytes_t *body, a091_routed_t *rt,
                         uint32_t *dcount)
{
    pn_message_t *m = msg_get();
    if (!m || pn_message_decode(m, (const char *)msg, len) != 0)
        return MQD_EINVAL;
    if (dcount)
        *dcount = pn_message_get_delivery_count(m);
    memset(p, 0, sizeof *p);
    *rt = (a091_routed_t){0};
    amqp_flags_t f = AMQP_BASIC_DELIVERY_MODE_FLAG;
    p->delivery_mode = pn_message_is_durable(m) ? 2 : 1;
    if (pn_message_get_priority(m) != PN_DEFAULT_PRIORITY) {
        p->priority = pn_message_get_priority(m);
        f |= AMQP_BASIC_PRIORITY_FLAG;
    }
    if (pn_message_get_ttl(m)) {
        char buf[32];
        snprintf(buf, sizeof buf, "%u", (unsigned)pn_message_get_ttl(m));
        p->expiration = dup_str(pool, buf);
        f |= AMQP_BASIC_EXPIRATION_FLAG;
    }
    if (atom_str(pool, pn_message_get_id(m), &p->message_id))
        f |= AMQP_BASIC_MESSAGE_ID_FLAG;
    if (atom_str(pool, pn_message_get_correlation_id(m), &p->correlation_id))
        f |= AMQP_BASIC_CORRELATION_ID_FLAG;
    str_prop(pool, pn_message_get_reply_to(m), &p->reply_to, &f, AMQP_BASIC_REPLY_TO_FLAG);
    str_prop(pool, pn_message_get_content_type(m), &p->content_type, &f,
             AMQP_BASIC_CONTENT_TYPE_FLAG);
    str_prop(pool, pn_message_get_content_encoding(m), &p->content_encoding, &f,
             AMQP_BASIC_CONTENT_ENCODING_FLAG);
    pn_bytes_t uid = pn_message_get_user_id(m);
    if (uid.size > 0 && uid.size < 256) {
        p->user_id = dup_bytes(pool, uid.start, uid.size);
        f |= AMQP_BASIC_USER_ID_FLAG;
    }
    if (pn_message_get_creation_time(m) > 0) {
        p->timestamp = (uint64_t)pn_message_get_creation_time(m) / 1000;
        f |= AMQP_BASIC_TIMESTAMP_FLAG;
    }
    p->_flags = f;
    get_headers(pn_message_properties(m), pool, p);
    get_annotations(pn_message_annotations(m), pool, p, rt);
    get_body(m, pool, body);
    return 0;
}
