/* The input gate of the SASL phase. A PLAIN login's outcome waits for the login pool
 * (pool.c); Proton, meanwhile, would go on parsing what the client sent behind its
 * sasl-init as SASL frames, and a client that pipelines its AMQP header and open (legal:
 * the outcome decides whether they count) got amqp:connection:framing-error. So until
 * the outcome is set, input reaches Proton one SASL frame at a time, and what follows a
 * frame that started a check is held here and fed once the outcome is out. After the
 * outcome (or without a SASL header) the gate is open and costs one test per read. */
#include "config.h"
#include "auth/auth_int.h"
#include "server/broker.h"

#include <stdlib.h>
#include <string.h>

#define HOLD_MAX (64u << 10) /* pipelined input kept during a check; more closes */

static size_t take(size_t want, size_t n)
{
    return want < n ? want : n;
}

size_t mqd_auth_rx_gate(mqd_conn_t *c, const uint8_t *p, size_t n)
{
    mqd_auth_conn_t *ac = c->auth;
    if (ac == NULL || ac->gate_open)
        return n;
    if (ac->outcome) {
        ac->gate_open = true;
        return n;
    }
    if (ac->pending || ac->held_len > 0)
        return 0; /* behind a check, or behind what is already held: keep the order */
    size_t k;
    if (ac->gate_hdr < 8) {
        /* the protocol header: "AMQP" 3 1 0 0 for SASL; anything else is not ours */
        k = take(8u - ac->gate_hdr, n);
        if (ac->gate_hdr <= 4 && ac->gate_hdr + k > 4 && p[4 - ac->gate_hdr] != 3)
            ac->gate_open = true;
        ac->gate_hdr = (uint8_t)(ac->gate_hdr + k);
        return k;
    }
    if (ac->gate_sz_got < 4) {
        k = take(4u - ac->gate_sz_got, n);
        memcpy(ac->gate_sz + ac->gate_sz_got, p, k);
        ac->gate_sz_got = (uint8_t)(ac->gate_sz_got + k);
        if (ac->gate_sz_got == 4) {
            uint32_t size = (uint32_t)ac->gate_sz[0] << 24 | (uint32_t)ac->gate_sz[1] << 16 |
                            (uint32_t)ac->gate_sz[2] << 8 | ac->gate_sz[3];
            if (size < 8)
                ac->gate_open = true; /* malformed: Proton says so */
            ac->gate_left = size - 4;
        }
        return k;
    }
    k = take(ac->gate_left, n);
    ac->gate_left -= (uint32_t)k;
    if (ac->gate_left == 0)
        ac->gate_sz_got = 0; /* the next frame starts after this one */
    return k;
}

void mqd_auth_rx_hold(mqd_conn_t *c, const uint8_t *p, size_t n)
{
    mqd_auth_conn_t *ac = c->auth;
    if (ac->held_len + n > HOLD_MAX) {
        MQD_NOTICE("auth", "peer=%s sent more than %u bytes during a login check: closing",
                   c->peer, HOLD_MAX);
        pn_condition_t *cond = pn_transport_condition(c->driver.transport);
        pn_condition_set_name(cond, "amqp:resource-limit-exceeded");
        pn_condition_set_description(cond, "too much input before the SASL outcome");
        pn_connection_driver_close(&c->driver);
        mqd_conn_mark_dirty(c);
        return;
    }
    if (ac->held_len + n > ac->held_cap) {
        size_t cap = ac->held_cap ? ac->held_cap : 512;
        while (cap < ac->held_len + n)
            cap *= 2;
        uint8_t *nb = realloc(ac->held, cap);
        if (nb == NULL) {
            pn_connection_driver_close(&c->driver);
            mqd_conn_mark_dirty(c);
            return;
        }
        ac->held = nb;
        ac->held_cap = cap;
    }
    memcpy(ac->held + ac->held_len, p, n);
    ac->held_len += n;
}

void mqd_auth_rx_release(mqd_conn_t *c, bool feed)
{
    mqd_auth_conn_t *ac = c->auth;
    if (ac == NULL || ac->held_len == 0)
        return;
    uint8_t *b = ac->held;
    size_t n = ac->held_len;
    ac->held = NULL;
    ac->held_len = ac->held_cap = 0;
    if (feed && !c->closed)
        mqd_conn_rx_feed(c, (const char *)b, n); /* the gate is open: ac->outcome is set */
    free(b);
}
