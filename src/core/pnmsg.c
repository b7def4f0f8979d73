/* core/pnmsg: a Proton message encoded into a growable buffer (management replies,
 * 0-9-1 publishes stored as AMQP 1.0 messages); a stored record's scheduled time. */
#include "config.h"
#include "core/core.h"

#include <proton/message.h>

int64_t mqd_rec_scheduled_ms(const mqd_rec_t *rec)
{
    mqd_msg_info_t mi;
    if (!(rec->flags & MQD_REC_SCHEDULED) || mqd_msg_scan_stored(rec->data, rec->len, &mi) != 0)
        return 0;
    return mi.scheduled_ms;
}

int mqd_message_encode(pn_message_t *m, mqd_buf_t *out, size_t hint)
{
    size_t want = hint ? hint : 1024;
    for (int tries = 0; tries < 16; tries++) {
        if (mqd_buf_reserve(out, want) != 0)
            return MQD_ENOMEM;
        size_t n = out->cap - out->len;
        int rc = pn_message_encode(m, (char *)out->p + out->len, &n);
        if (rc == 0) {
            out->len += n;
            return 0;
        }
        if (rc != PN_OVERFLOW)
            return MQD_EINVAL;
        want *= 4;
    }
    return MQD_ETOOBIG;
}
