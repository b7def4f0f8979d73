/* The client side of SCRAM-SHA-256 (RFC 5802, RFC 7677) for mqctl, without channel
 * binding, and a Proton SASL plugin that runs it (with PLAIN and ANONYMOUS as Proton's
 * own client does them) on a client transport. */
#ifndef MQD_SCRAM_CLIENT_H
#define MQD_SCRAM_CLIENT_H

#include <proton/transport.h>
#include <stdbool.h>
#include <stddef.h>

#define MQD_SCRAMC_MSG_MAX 1024
#define MQD_SCRAMC_MAX_ITERATIONS 10000000u /* a server cannot make us spin longer */

typedef struct mqd_scramc {
    char user[256];
    char first_bare[MQD_SCRAMC_MSG_MAX + 1]; /* n=USER,r=CNONCE */
    char nonce[MQD_SCRAMC_MSG_MAX + 1];      /* ours, then the combined one */
    unsigned char server_sig[32];            /* what v= must carry */
    int step;                                /* 0 new, 1 first sent, 2 final sent, 3 verified */
    char out[2 * MQD_SCRAMC_MSG_MAX + 200];  /* the message to send (Proton keeps a pointer) */
} mqd_scramc_t;

/* client-first-message into s->out. `cnonce`: NULL for a random one (tests pass theirs).
 * MQD_EINVAL for an unusable user name. */
int mqd_scramc_first(mqd_scramc_t *s, const char *user, const char *cnonce);
/* Takes server-first-message, writes client-final-message into s->out. MQD_EINVAL with
 * a reason in why when the message is malformed, its nonce is not ours, or its
 * iteration count is out of bounds. */
int mqd_scramc_final(mqd_scramc_t *s, const char *password, const char *msg, size_t len,
                     char *why, size_t whylen);
/* Checks server-final-message ("v=..." or "e=..."): 0 when the server proved it knows
 * the ServerKey, else MQD_EFAILED (or MQD_EINVAL) with a reason in why. */
int mqd_scramc_verify(mqd_scramc_t *s, const char *msg, size_t len, char *why, size_t whylen);
void mqd_scramc_clear(mqd_scramc_t *s);

/* The per-transport state of the plugin; the caller owns it and keeps it alive as long
 * as the transport. */
typedef struct mqd_sasl_client {
    mqd_scramc_t scram;
    const char *mech;  /* the mechanism chosen, or NULL */
    char offered[256]; /* what the server offered (for the error text) */
    char error[512];   /* why the exchange failed on our side, or "" */
    char *plain;       /* PLAIN's initial response (owned) */
    size_t plain_len;
} mqd_sasl_client_t;

/* Installs the plugin on a client transport (after pn_sasl(t)). */
void mqd_sasl_client_setup(pn_transport_t *t, mqd_sasl_client_t *sc);
void mqd_sasl_client_clear(mqd_sasl_client_t *sc);

#endif
