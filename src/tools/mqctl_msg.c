/* The message bytes of mqctl's links: a delivery's message read and decoded (a
 * management reply in mqctl.c, a consumed or browsed message in mqctl_io.c), and a
 * message encoded into a reused buffer (a request, a produced message). */
#include "config.h"
#include "mqd.h"
#include "tools/mqctl.h"

#include <proton/delivery.h>
#include <proton/link.h>
#include <proton/message.h>
#include <stdlib.h>

int mqctl_msg_recv(pn_link_t *l, pn_delivery_t *d, pn_rwbytes_t *buf, pn_message_t **out)
{
    size_t size = pn_delivery_pending(d);
    char *nb = realloc(buf->start, size ? size : 1);
    if (!nb)
        return MQD_ENOMEM;
    buf->start = nb;
    ssize_t n = pn_link_recv(l, nb, size);
    pn_message_t *m = pn_message();
    if (n < 0 || pn_message_decode(m, nb, (size_t)n) != 0) {
        pn_message_free(m);
        return MQD_EINVAL;
    }
    *out = m;
    return 0;
}

int mqctl_msg_encode(pn_message_t *m, pn_rwbytes_t *buf, size_t max)
{
    size_t cap = buf->size > 4096 ? buf->size : 4096;
    for (;;) {
        char *nb = realloc(buf->start, cap);
        if (!nb)
            return MQD_ENOMEM;
        buf->start = nb;
        size_t n = cap;
        int rc = pn_message_encode(m, nb, &n);
        if (rc == 0) {
            buf->size = n;
            return 0;
        }
        if (rc != PN_OVERFLOW || cap > max)
            return MQD_EINVAL;
        cap *= 4;
    }
}
