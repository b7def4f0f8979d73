/* Service Bus dead-lettering (docs/servicebus.md): the @azure/service-bus SDK's
 * `deadLetterMessage(m, {deadLetterReason, deadLetterErrorDescription})` rejects the
 * delivery with condition `com.microsoft:dead-letter` and the two in the error's info
 * map. The dead-lettered copy (T/$DeadLetterQueue) carries them as the application
 * properties DeadLetterReason and DeadLetterErrorDescription, where the SDK's
 * ServiceBusReceivedMessage reads them, as Azure keeps them. */
#include "config.h"
#include "amqp/amqp_int.h"

#include <proton/condition.h>
#include <proton/disposition.h>
#include <proton/message.h>
#include <stdio.h>
#include <string.h>

#define DEAD_LETTER_COND "com.microsoft:dead-letter"
#define REASON_KEY "DeadLetterReason"
#define DESC_KEY "DeadLetterErrorDescription"

/* A string entry of the condition's info map into out[len] ("" when absent). */
static void info_str(pn_data_t *info, const char *key, char *out, size_t len)
{
    size_t klen = strlen(key);
    out[0] = '\0';
    pn_data_rewind(info);
    if (!pn_data_next(info) || pn_data_type(info) != PN_MAP)
        return;
    size_t n = pn_data_get_map(info);
    pn_data_enter(info);
    for (size_t i = 0; i + 1 < n && pn_data_next(info); i += 2) {
        pn_type_t t = pn_data_type(info);
        pn_bytes_t k = t == PN_STRING   ? pn_data_get_string(info)
                       : t == PN_SYMBOL ? pn_data_get_symbol(info)
                                        : pn_bytes(0, NULL);
        if (!pn_data_next(info))
            break;
        if (k.size == klen && memcmp(k.start, key, klen) == 0 && pn_data_type(info) == PN_STRING) {
            pn_bytes_t v = pn_data_get_string(info);
            snprintf(out, len, "%.*s", (int)v.size, v.start);
            break;
        }
    }
    pn_data_exit(info);
}

bool mqd_sbus_dead_letter_of(pn_delivery_t *d, mqd_sbus_dl_t *dl)
{
    pn_condition_t *c = pn_disposition_condition(pn_delivery_remote(d));
    const char *name = c ? pn_condition_get_name(c) : NULL;
    if (!name || strcmp(name, DEAD_LETTER_COND) != 0)
        return false;
    pn_data_t *info = pn_condition_info(c);
    info_str(info, REASON_KEY, dl->reason, sizeof dl->reason);
    info_str(info, DESC_KEY, dl->desc, sizeof dl->desc);
    return true;
}

static void put_prop(pn_data_t *ap, const char *k, const char *v)
{
    pn_data_put_string(ap, pn_bytes(strlen(k), k));
    pn_data_put_string(ap, pn_bytes(strlen(v), v));
}

/* Copies the application properties but the two keys, then adds them. Application
 * properties are simple values (AMQP 1.0 3.2.5), each one atom; keys are strings. */
static void merge_props(pn_data_t *old, pn_data_t *ap, const mqd_sbus_dl_t *dl)
{
    pn_data_put_map(ap);
    pn_data_enter(ap);
    pn_data_rewind(old);
    if (pn_data_next(old) && pn_data_type(old) == PN_MAP) {
        size_t n = pn_data_get_map(old);
        pn_data_enter(old);
        for (size_t i = 0; i + 1 < n && pn_data_next(old); i += 2) {
            pn_atom_t k = pn_data_get_atom(old);
            bool ours = k.type == PN_STRING &&
                        ((k.u.as_bytes.size == strlen(REASON_KEY) &&
                          !memcmp(k.u.as_bytes.start, REASON_KEY, k.u.as_bytes.size)) ||
                         (k.u.as_bytes.size == strlen(DESC_KEY) &&
                          !memcmp(k.u.as_bytes.start, DESC_KEY, k.u.as_bytes.size)));
            if (!pn_data_next(old))
                break;
            pn_atom_t v = pn_data_get_atom(old);
            if (ours || k.type == PN_INVALID || v.type == PN_INVALID)
                continue; /* not a simple value: not an application property */
            pn_data_put_atom(ap, k);
            pn_data_put_atom(ap, v);
        }
        pn_data_exit(old);
    }
    if (dl->reason[0])
        put_prop(ap, REASON_KEY, dl->reason);
    if (dl->desc[0])
        put_prop(ap, DESC_KEY, dl->desc);
    pn_data_exit(ap);
}

int mqd_sbus_dead_letter_props(const mqd_buf_t *in, const mqd_sbus_dl_t *dl, mqd_buf_t *out)
{
    pn_message_t *m = pn_message();
    pn_data_t *old = pn_data(8);
    int rc = MQD_ENOMEM;
    if (!m || !old)
        goto done;
    rc = MQD_EINVAL;
    if (pn_message_decode(m, (const char *)in->p, in->len) != 0)
        goto done;
    pn_data_copy(old, pn_message_properties(m));
    pn_data_clear(pn_message_properties(m));
    merge_props(old, pn_message_properties(m), dl);
    out->len = 0;
    for (size_t want = in->len + 1024; want < ((size_t)64 << 20); want *= 2) {
        if ((rc = mqd_buf_reserve(out, want)) != 0)
            break;
        size_t n = out->cap;
        int erc = pn_message_encode(m, (char *)out->p, &n);
        if (erc == 0) {
            out->len = n;
            rc = 0;
            break;
        }
        rc = erc == PN_OVERFLOW ? MQD_ETOOBIG : MQD_EINVAL;
        if (erc != PN_OVERFLOW)
            break;
    }
done:
    if (old)
        pn_data_free(old);
    if (m)
        pn_message_free(m);
    return rc;
}
