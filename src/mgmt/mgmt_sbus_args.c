/* The arguments of a Service Bus entity request (mgmt_sbus.h): an amqp-value map with
 * string keys whose values carry Service Bus' AMQP types. */
#include "config.h"
#include "mgmt/mgmt_sbus.h"

#include <proton/codec.h>
#include <string.h>

static bool key_is(pn_data_t *d, const char *key)
{
    pn_type_t t = pn_data_type(d);
    pn_bytes_t k = t == PN_STRING   ? pn_data_get_string(d)
                   : t == PN_SYMBOL ? pn_data_get_symbol(d)
                                    : pn_bytes(0, NULL);
    return k.size == strlen(key) && memcmp(k.start, key, k.size) == 0;
}

static bool int_value(pn_data_t *d, int64_t *out)
{
    switch (pn_data_type(d)) {
    case PN_LONG: *out = pn_data_get_long(d); return true;
    case PN_INT: *out = pn_data_get_int(d); return true;
    case PN_UINT: *out = pn_data_get_uint(d); return true;
    case PN_ULONG: {
        uint64_t u = pn_data_get_ulong(d);
        *out = u > INT64_MAX ? INT64_MAX : (int64_t)u;
        return true;
    }
    default: return false;
    }
}

/* A lock token: the delivery tag (partition u32, offset u64, as amqp/consumer.c writes
 * it) in the byte order the SDK gives a uuid (its first three groups reversed), zero
 * padded. false unless it names partition 0. */
static bool token_offset(pn_uuid_t u, uint64_t *off)
{
    static const uint8_t order[12] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11};
    uint8_t tag[12];
    uint32_t part;
    for (int i = 0; i < 12; i++)
        tag[i] = (uint8_t)u.bytes[order[i]];
    memcpy(&part, tag, 4);
    memcpy(off, tag + 4, 8);
    return part == 0 && !u.bytes[12] && !u.bytes[13] && !u.bytes[14] && !u.bytes[15];
}

static void read_tokens(pn_data_t *d, mqd_sbus_args_t *a)
{
    a->has_tokens = true;
    if (pn_data_type(d) != PN_ARRAY || pn_data_get_array_type(d) != PN_UUID) {
        a->tokens_bad = true;
        return;
    }
    size_t n = pn_data_get_array(d);
    pn_data_enter(d);
    for (size_t i = 0; i < n && pn_data_next(d); i++) {
        if (a->n_tokens == MQD_SBUS_TOKENS_MAX ||
            !token_offset(pn_data_get_uuid(d), &a->tokens[a->n_tokens])) {
            a->tokens_bad = true;
            break;
        }
        a->n_tokens++;
    }
    pn_data_exit(d);
}

static void read_entry(pn_data_t *d, mqd_sbus_args_t *a, bool is_from, bool is_count,
                       bool is_tokens)
{
    if (is_from)
        a->has_from = int_value(d, &a->from);
    else if (is_count)
        a->has_count = int_value(d, &a->count);
    else if (is_tokens)
        read_tokens(d, a);
}

int mqd_sbus_args_parse(const uint8_t *body, size_t len, mqd_sbus_args_t *a)
{
    memset(a, 0, sizeof *a);
    pn_data_t *d = pn_data(16);
    int rc = MQD_EINVAL;
    if (!d)
        return MQD_ENOMEM;
    if (len && pn_data_decode(d, (const char *)body, len) > 0) {
        pn_data_rewind(d);
        if (pn_data_next(d) && pn_data_type(d) == PN_DESCRIBED && pn_data_enter(d) &&
            pn_data_next(d) && pn_data_type(d) == PN_ULONG && pn_data_get_ulong(d) == 0x77 &&
            pn_data_next(d) && pn_data_type(d) == PN_MAP) {
            size_t n = pn_data_get_map(d);
            pn_data_enter(d);
            for (size_t i = 0; i + 1 < n && pn_data_next(d); i += 2) {
                bool f = key_is(d, "from-sequence-number"), c = key_is(d, "message-count"),
                     t = key_is(d, "lock-tokens");
                if (!pn_data_next(d))
                    break;
                read_entry(d, a, f, c, t);
            }
            rc = 0;
        }
    }
    pn_data_free(d);
    return rc;
}
