/* The arguments of a Service Bus entity request (mgmt_sbus.h): an amqp-value map with
 * string keys whose values carry Service Bus' AMQP types. */
#include "config.h"
#include "mgmt/mgmt_sbus.h"

#include <proton/codec.h>
#include <stdlib.h>
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

static void read_seqs(pn_data_t *d, mqd_sbus_args_t *a)
{
    a->has_seqs = true;
    if (pn_data_type(d) != PN_ARRAY || pn_data_get_array_type(d) != PN_LONG) {
        a->seqs_bad = true;
        return;
    }
    size_t n = pn_data_get_array(d);
    pn_data_enter(d);
    for (size_t i = 0; i < n && pn_data_next(d); i++) {
        if (a->n_seqs == MQD_SBUS_SEQS_MAX) {
            a->seqs_bad = true;
            break;
        }
        a->seqs[a->n_seqs++] = pn_data_get_long(d);
    }
    pn_data_exit(d);
}

static void read_str(pn_data_t *d, char *out, size_t size)
{
    pn_type_t t = pn_data_type(d);
    pn_bytes_t v = t == PN_STRING   ? pn_data_get_string(d)
                   : t == PN_SYMBOL ? pn_data_get_symbol(d)
                                    : pn_bytes(0, NULL);
    size_t n = v.size < size - 1 ? v.size : size - 1;
    if (n)
        memcpy(out, v.start, n);
    out[n] = '\0';
}

/* One entry of `messages`: a map whose `message` is the encoded message (binary). */
static bool read_msg(pn_data_t *d, mqd_sbus_args_t *a)
{
    if (pn_data_type(d) != PN_MAP || a->n_msgs == MQD_SBUS_SEQS_MAX)
        return false;
    size_t n = pn_data_get_map(d);
    bool found = false;
    pn_data_enter(d);
    for (size_t i = 0; i + 1 < n && pn_data_next(d); i += 2) {
        bool is_msg = key_is(d, "message");
        if (!pn_data_next(d))
            break;
        if (!is_msg || found || pn_data_type(d) != PN_BINARY)
            continue;
        pn_bytes_t b = pn_data_get_binary(d);
        uint8_t *nb = b.size ? realloc(a->msg_buf, a->msg_len + b.size) : NULL;
        if (!nb)
            break;
        memcpy(nb + a->msg_len, b.start, b.size);
        a->msg_buf = nb;
        a->msgs[a->n_msgs++] = (mqd_sbus_msg_t){.off = a->msg_len, .len = b.size};
        a->msg_len += b.size;
        found = true;
    }
    pn_data_exit(d);
    return found;
}

static void read_msgs(pn_data_t *d, mqd_sbus_args_t *a)
{
    a->has_msgs = true;
    size_t n = pn_data_type(d) == PN_LIST    ? pn_data_get_list(d)
               : pn_data_type(d) == PN_ARRAY ? pn_data_get_array(d)
                                             : 0;
    if (n == 0 || !pn_data_enter(d)) {
        a->msgs_bad = true;
        return;
    }
    for (size_t i = 0; i < n && pn_data_next(d) && !a->msgs_bad; i++)
        a->msgs_bad = !read_msg(d, a);
    pn_data_exit(d);
}

enum { K_NONE, K_FROM, K_COUNT, K_TOKENS, K_SEQS, K_MODE, K_DISP, K_REASON, K_DESC, K_MSGS };

static int key_of(pn_data_t *d)
{
    static const char *const names[] = {"",
                                        "from-sequence-number",
                                        "message-count",
                                        "lock-tokens",
                                        "sequence-numbers",
                                        "receiver-settle-mode",
                                        "disposition-status",
                                        "deadletter-reason",
                                        "deadletter-description",
                                        "messages"};
    for (int k = K_FROM; k <= K_MSGS; k++)
        if (key_is(d, names[k]))
            return k;
    return K_NONE;
}

static void read_entry(pn_data_t *d, mqd_sbus_args_t *a, int key)
{
    switch (key) {
    case K_FROM: a->has_from = int_value(d, &a->from); break;
    case K_COUNT: a->has_count = int_value(d, &a->count); break;
    case K_TOKENS: read_tokens(d, a); break;
    case K_SEQS: read_seqs(d, a); break;
    case K_MODE: a->has_settle_mode = int_value(d, &a->settle_mode); break;
    case K_DISP: read_str(d, a->disposition, sizeof a->disposition); break;
    case K_REASON: read_str(d, a->dl_reason, sizeof a->dl_reason); break;
    case K_DESC: read_str(d, a->dl_desc, sizeof a->dl_desc); break;
    case K_MSGS: read_msgs(d, a); break;
    default: break;
    }
}

void mqd_sbus_args_free(mqd_sbus_args_t *a)
{
    free(a->msg_buf);
    a->msg_buf = NULL;
    a->n_msgs = a->msg_len = 0;
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
                int key = key_of(d);
                if (!pn_data_next(d))
                    break;
                read_entry(d, a, key);
            }
            rc = 0;
        }
    }
    pn_data_free(d);
    return rc;
}
