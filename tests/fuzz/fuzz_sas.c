/* fuzz_sas: the SAS token parser and the $cbs request decoder (src/auth/sas.c) on
 * arbitrary input. The first byte picks the target (even: a token string, odd: an encoded
 * request message); the rest is the input. Checked: a parsed token's fields are
 * NUL-terminated and within their buffers, the hub has no '/', se is not negative, its
 * signature check answers 0 or MQD_EFAILED, and a token the parser accepted with a
 * signature made here from its own sr and se verifies; a parsed request has a reply-to
 * and a token that lies inside the decoded body. */
#include "config.h"
#include "auth/auth_int.h"
#include "fuzz.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <proton/message.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_token(const uint8_t *p, size_t n)
{
    mqd_sas_token_t t;
    if (mqd_sas_parse((const char *)p, n, &t) != 0)
        return;
    if (strchr(t.hub, '/') || t.se < 0 || memchr(t.audience, '\0', sizeof t.audience) == NULL ||
        memchr(t.skn, '\0', sizeof t.skn) == NULL)
        abort();
    int rc = mqd_sas_verify(&t, "fuzz-key", 8);
    if (rc != 0 && rc != MQD_EFAILED)
        abort();
    if (!mqd_sas_covers(t.hub, NULL, t.hub[0] ? t.hub : "x"))
        abort();
    /* the same token signed right must verify */
    char msg[sizeof t.sr_raw + sizeof t.se_raw + 2];
    int ml = snprintf(msg, sizeof msg, "%s\n%s", t.sr_raw, t.se_raw);
    unsigned int maclen = 0;
    if (ml < 0 || HMAC(EVP_sha256(), "fuzz-key", 8, (const unsigned char *)msg, (size_t)ml, t.sig,
                       &maclen) == NULL)
        abort();
    if (mqd_sas_verify(&t, "fuzz-key", 8) != 0)
        abort();
}

static void check_request(const uint8_t *p, size_t n)
{
    pn_message_t *m = pn_message();
    if (m == NULL)
        return;
    mqd_cbs_req_t r;
    if (mqd_cbs_request_parse(m, p, n, &r) == 0) {
        if (r.reply_to[0] == '\0' || (r.token != NULL && r.token_len > MQD_SAS_TOKEN_MAX))
            abort();
        if (r.token != NULL)
            check_token((const uint8_t *)r.token, r.token_len);
    }
    pn_message_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] % 2 == 0)
        check_token(data + 1, size - 1);
    else
        check_request(data + 1, size - 1);
    return 0;
}
