/* The SASL-phase framer: splits a client's input stream at the end of the protocol
 * header and of each SASL frame. Free of server state (tests/fuzz/fuzz_gate.c runs it on
 * arbitrary input); hold.c decides what to do at each boundary. */
#include "config.h"
#include "auth/auth_int.h"

#include <string.h>

static size_t take(size_t want, size_t n)
{
    return want < n ? want : n;
}

size_t mqd_auth_gate_take(mqd_auth_gate_t *g, const uint8_t *p, size_t n)
{
    size_t k;
    if (g->open || n == 0)
        return n;
    if (g->hdr < 8) {
        /* "AMQP" 3 1 0 0 starts SASL; any other header is not this gate's business */
        k = take(8u - g->hdr, n);
        if (g->hdr <= 4 && g->hdr + k > 4 && p[4 - g->hdr] != 3)
            g->open = true;
        g->hdr = (uint8_t)(g->hdr + k);
        return k;
    }
    if (g->sz_got < 4) {
        k = take(4u - g->sz_got, n);
        memcpy(g->sz + g->sz_got, p, k);
        g->sz_got = (uint8_t)(g->sz_got + k);
        if (g->sz_got == 4) {
            uint32_t size = (uint32_t)g->sz[0] << 24 | (uint32_t)g->sz[1] << 16 |
                            (uint32_t)g->sz[2] << 8 | g->sz[3];
            if (size < 8)
                g->open = true; /* malformed: Proton answers it with a framing error */
            else
                g->left = size - 4;
        }
        return k;
    }
    k = take(g->left, n);
    g->left -= (uint32_t)k;
    if (g->left == 0)
        g->sz_got = 0; /* the next frame starts here */
    return k;
}

bool mqd_auth_gate_at_boundary(const mqd_auth_gate_t *g)
{
    return g->open || (g->hdr == 8 && g->sz_got == 0);
}
