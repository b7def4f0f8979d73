/* AMQP values <-> JSON for management bodies (see mgmt_json.h). */
#include "config.h"
#include "mgmt/mgmt_json.h"

#include <string.h>

static json_t *compound_to_json(pn_data_t *d, pn_type_t type, int depth)
{
    bool is_map = type == PN_MAP;
    json_t *out = is_map ? json_object() : json_array();
    if (!out)
        return NULL;
    pn_data_enter(d);
    while (pn_data_next(d)) {
        if (!is_map) {
            json_t *v = mqd_mgmt_data_to_json(d, depth + 1);
            json_array_append_new(out, v ? v : json_null());
            continue;
        }
        pn_type_t kt = pn_data_type(d);
        pn_bytes_t k = kt == PN_STRING ? pn_data_get_string(d)
                       : kt == PN_SYMBOL ? pn_data_get_symbol(d)
                                         : pn_bytes(0, NULL);
        if (!pn_data_next(d))
            break;
        if (!k.start || memchr(k.start, 0, k.size))
            continue; /* keys JSON cannot carry are dropped, not fatal */
        json_t *v = mqd_mgmt_data_to_json(d, depth + 1);
        json_object_setn_new_nocheck(out, k.start, k.size, v ? v : json_null());
    }
    pn_data_exit(d);
    return out;
}

json_t *mqd_mgmt_data_to_json(pn_data_t *d, int depth)
{
    if (depth > MQD_MGMT_JSON_DEPTH)
        return NULL;
    pn_type_t t = pn_data_type(d);
    pn_bytes_t b;
    switch (t) {
    case PN_NULL: return json_null();
    case PN_BOOL: return json_boolean(pn_data_get_bool(d));
    case PN_UBYTE: return json_integer(pn_data_get_ubyte(d));
    case PN_BYTE: return json_integer(pn_data_get_byte(d));
    case PN_USHORT: return json_integer(pn_data_get_ushort(d));
    case PN_SHORT: return json_integer(pn_data_get_short(d));
    case PN_UINT: return json_integer(pn_data_get_uint(d));
    case PN_INT: return json_integer(pn_data_get_int(d));
    case PN_ULONG: return json_integer((json_int_t)pn_data_get_ulong(d));
    case PN_LONG: return json_integer(pn_data_get_long(d));
    case PN_TIMESTAMP: return json_integer(pn_data_get_timestamp(d));
    case PN_FLOAT: return json_real(pn_data_get_float(d));
    case PN_DOUBLE: return json_real(pn_data_get_double(d));
    case PN_CHAR: return json_integer(pn_data_get_char(d));
    case PN_STRING: b = pn_data_get_string(d); return json_stringn(b.start, b.size);
    case PN_SYMBOL: b = pn_data_get_symbol(d); return json_stringn(b.start, b.size);
    case PN_BINARY: b = pn_data_get_binary(d); return json_stringn(b.start, b.size);
    case PN_MAP:
    case PN_LIST:
    case PN_ARRAY: return compound_to_json(d, t, depth);
    case PN_DESCRIBED: {
        pn_data_enter(d);
        json_t *v = pn_data_next(d) && pn_data_next(d) ? mqd_mgmt_data_to_json(d, depth + 1) : NULL;
        pn_data_exit(d);
        return v;
    }
    default: return NULL;
    }
}

json_t *mqd_mgmt_decode_json(const char *bytes, size_t len)
{
    pn_data_t *d = pn_data(16);
    json_t *v = NULL;
    if (d && pn_data_decode(d, bytes, len) > 0) {
        pn_data_rewind(d);
        if (pn_data_next(d))
            v = mqd_mgmt_data_to_json(d, 0);
    }
    pn_data_free(d);
    return v;
}

int mqd_mgmt_json_to_data(pn_data_t *d, json_t *v, int depth)
{
    if (depth > MQD_MGMT_JSON_DEPTH)
        return -1;
    const char *key;
    json_t *e;
    size_t i;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        pn_data_put_map(d);
        pn_data_enter(d);
        json_object_foreach(v, key, e) {
            pn_data_put_string(d, pn_bytes(strlen(key), key));
            if (mqd_mgmt_json_to_data(d, e, depth + 1) != 0)
                return -1;
        }
        pn_data_exit(d);
        return 0;
    case JSON_ARRAY:
        pn_data_put_list(d);
        pn_data_enter(d);
        json_array_foreach(v, i, e) {
            if (mqd_mgmt_json_to_data(d, e, depth + 1) != 0)
                return -1;
        }
        pn_data_exit(d);
        return 0;
    case JSON_STRING:
        return pn_data_put_string(d, pn_bytes(json_string_length(v), json_string_value(v)));
    case JSON_INTEGER: return pn_data_put_long(d, json_integer_value(v));
    case JSON_REAL: return pn_data_put_double(d, json_real_value(v));
    case JSON_TRUE: return pn_data_put_bool(d, true);
    case JSON_FALSE: return pn_data_put_bool(d, false);
    default: return pn_data_put_null(d);
    }
}
