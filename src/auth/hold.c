/* Input behind a sasl-init under check. A PLAIN login's outcome waits for the login pool
 * (pool.c); Proton, meanwhile, would go on parsing what the client sent behind its
 * sasl-init as SASL frames, and a client that pipelines its AMQP header and open (legal:
 * the outcome decides whether they count) got amqp:connection:framing-error. So until
 * the outcome is set, input reaches Proton one SASL frame at a time (gate.c), and what
 * follows a frame that started a check is held here: fed once the login succeeded,
 * dropped when it failed. After the outcome the gate is open and costs one test per
 * read. */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

#define HOLD_MAX (64u << 10) /* pipelined input kept during a check; more closes */

size_t mqd_auth_rx_gate(mqd_conn_t *c, const uint8_t *p, size_t n)
{
    mqd_auth_conn_t *ac = mqd_conn_auth(c);
    if (ac == NULL || ac->gate.open)
        return n;
    if (ac->outcome) {
        ac->gate.open = true;
        return n;
    }
    /* at a frame boundary behind a check, or behind what is held already: keep order */
    if ((ac->pending || ac->held_len > 0) && mqd_auth_gate_at_boundary(&ac->gate))
        return 0;
    return mqd_auth_gate_take(&ac->gate, p, n);
}

static void close_conn(mqd_conn_t *c, const char *name, const char *why)
{
    pn_connection_driver_t *drv = mqd_conn_driver(c);
    pn_condition_t *cond = pn_transport_condition(drv->transport);
    pn_condition_set_name(cond, name);
    pn_condition_set_description(cond, why);
    pn_connection_driver_close(drv);
    mqd_conn_mark_dirty(c);
}

void mqd_auth_rx_hold(mqd_conn_t *c, const uint8_t *p, size_t n)
{
    mqd_auth_conn_t *ac = mqd_conn_auth(c);
    if (ac->held_len + n > HOLD_MAX) {
        MQD_NOTICE_RL("auth", "peer=%s sent more than %u bytes during a login check: closing",
                      mqd_conn_peer(c), HOLD_MAX);
        return close_conn(c, "amqp:resource-limit-exceeded",
                          "too much input before the SASL outcome");
    }
    if (ac->held_len + n > ac->held_cap) {
        size_t cap = ac->held_cap ? ac->held_cap : 512;
        while (cap < ac->held_len + n)
            cap *= 2;
        uint8_t *nb = realloc(ac->held, cap);
        if (nb == NULL)
            return close_conn(c, "amqp:resource-limit-exceeded", "out of memory");
        ac->held = nb;
        ac->held_cap = cap;
    }
    memcpy(ac->held + ac->held_len, p, n);
    ac->held_len += n;
}

void mqd_auth_rx_release(mqd_conn_t *c, bool feed)
{
    mqd_auth_conn_t *ac = mqd_conn_auth(c);
    if (ac == NULL || ac->held_len == 0)
        return;
    uint8_t *b = ac->held;
    size_t n = ac->held_len;
    ac->held = NULL;
    ac->held_len = ac->held_cap = 0;
    if (feed && !mqd_conn_closed(c))
        mqd_conn_rx_feed(c, (const char *)b, n); /* the gate is open: ac->outcome is set */
    free(b);
}
