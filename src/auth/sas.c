/* SAS tokens as the Event Hubs / Service Bus SDKs make them:
 *   SharedAccessSignature sr=<url-encoded audience>&sig=<url-encoded base64 HMAC>&se=<unix
 *   expiry>&skn=<key name>
 * with sig = HMAC-SHA256(key bytes, sr as sent + "\n" + se as sent). Pure functions, free
 * of server state (tests/fuzz/fuzz_sas.c); the token is outside input: every field is
 * length-bounded and anything malformed is MQD_EINVAL, never a partial result. */
#include "config.h"
#include "auth/auth_int.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <proton/codec.h>
#include <proton/message.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SAS_PREFIX "SharedAccessSignature "

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..n) into out (NUL-terminated, '+' stays '+'); MQD_EINVAL on a bad
 * escape, a NUL or no room. */
static int url_decode(const char *s, size_t n, char *out, size_t outlen, size_t *outn)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '%') {
            int hi = i + 2 < n ? hexval(s[i + 1]) : -1, lo = i + 2 < n ? hexval(s[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return MQD_EINVAL;
            ch = hi * 16 + lo;
            i += 2;
        }
        if (ch == 0 || o + 1 >= outlen)
            return MQD_EINVAL;
        out[o++] = (char)ch;
    }
    out[o] = '\0';
    *outn = o;
    return 0;
}

/* The hub an audience names: "sb://HOST[:PORT]/HUB[/...]" (any scheme) -> HUB; "" for a
 * namespace-wide audience (no path). */
static int audience_hub(const char *aud, char *hub, size_t hublen)
{
    const char *p = strstr(aud, "://");
    p = p ? p + 3 : aud;
    p = strchr(p, '/');
    if (p == NULL || p[1] == '\0') {
        hub[0] = '\0';
        return 0;
    }
    p++;
    size_t n = strcspn(p, "/");
    if (n == 0 || n >= hublen)
        return MQD_EINVAL;
    memcpy(hub, p, n);
    hub[n] = '\0';
    return 0;
}

/* One field value: sets *field to it (copied, NUL-terminated); a repeated field is an error. */
static int take_field(const char *v, size_t n, char *field, size_t len, bool *seen)
{
    if (*seen || n == 0 || n >= len || memchr(v, '\0', n))
        return MQD_EINVAL;
    memcpy(field, v, n);
    field[n] = '\0';
    *seen = true;
    return 0;
}

static int parse_fields(const char *s, size_t len, mqd_sas_token_t *t)
{
    bool seen[4] = {false, false, false, false};
    const char *end = s + len;
    while (s < end) {
        const char *amp = memchr(s, '&', (size_t)(end - s));
        size_t n = amp ? (size_t)(amp - s) : (size_t)(end - s);
        const char *eq = memchr(s, '=', n);
        if (eq == NULL)
            return MQD_EINVAL;
        size_t kl = (size_t)(eq - s), vl = n - kl - 1;
        int rc = MQD_EINVAL;
        if (kl == 2 && memcmp(s, "sr", 2) == 0)
            rc = take_field(eq + 1, vl, t->sr_raw, sizeof t->sr_raw, &seen[0]);
        else if (kl == 3 && memcmp(s, "sig", 3) == 0)
            rc = take_field(eq + 1, vl, t->sig_raw, sizeof t->sig_raw, &seen[1]);
        else if (kl == 2 && memcmp(s, "se", 2) == 0)
            rc = take_field(eq + 1, vl, t->se_raw, sizeof t->se_raw, &seen[2]);
        else if (kl == 3 && memcmp(s, "skn", 3) == 0)
            rc = take_field(eq + 1, vl, t->skn_raw, sizeof t->skn_raw, &seen[3]);
        else
            rc = 0; /* other fields are ignored, as Azure does */
        if (rc != 0)
            return rc;
        s += n + (amp ? 1 : 0);
    }
    return seen[0] && seen[1] && seen[2] && seen[3] ? 0 : MQD_EINVAL;
}

static int parse_se(const char *s, int64_t *out)
{
    int64_t v = 0;
    if (*s == '\0' || strlen(s) > 12) /* up to year 33658: no overflow */
        return MQD_EINVAL;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return MQD_EINVAL;
        v = v * 10 + (*s - '0');
    }
    *out = v;
    return 0;
}

int mqd_sas_parse(const char *s, size_t len, mqd_sas_token_t *out)
{
    mqd_sas_token_t t;
    size_t pl = sizeof SAS_PREFIX - 1, n;
    memset(&t, 0, sizeof t);
    if (s == NULL || len <= pl || len > MQD_SAS_TOKEN_MAX || strncmp(s, SAS_PREFIX, pl) != 0)
        return MQD_EINVAL;
    if (parse_fields(s + pl, len - pl, &t) != 0 || parse_se(t.se_raw, &t.se) != 0)
        return MQD_EINVAL;
    if (url_decode(t.sr_raw, strlen(t.sr_raw), t.audience, sizeof t.audience, &n) != 0 ||
        url_decode(t.skn_raw, strlen(t.skn_raw), t.skn, sizeof t.skn, &n) != 0 ||
        audience_hub(t.audience, t.hub, sizeof t.hub) != 0)
        return MQD_EINVAL;
    char sig_b64[sizeof t.sig_raw];
    if (url_decode(t.sig_raw, strlen(t.sig_raw), sig_b64, sizeof sig_b64, &n) != 0 || n != 44)
        return MQD_EINVAL; /* base64 of 32 bytes */
    unsigned char raw[36];
    if (EVP_DecodeBlock(raw, (const unsigned char *)sig_b64, (int)n) != 33 || sig_b64[43] != '=')
        return MQD_EINVAL; /* 33: the decoder counts the padding byte */
    memcpy(t.sig, raw, sizeof t.sig);
    *out = t;
    return 0;
}

int mqd_sas_verify(const mqd_sas_token_t *t, const char *key, size_t keylen)
{
    char msg[sizeof t->sr_raw + sizeof t->se_raw + 2];
    int n = snprintf(msg, sizeof msg, "%s\n%s", t->sr_raw, t->se_raw);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    if (n < 0 || (size_t)n >= sizeof msg ||
        HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg, (size_t)n, mac, &maclen) ==
            NULL ||
        maclen != sizeof t->sig)
        return MQD_EIO;
    int rc = CRYPTO_memcmp(mac, t->sig, sizeof t->sig) == 0 ? 0 : MQD_EFAILED;
    OPENSSL_cleanse(mac, sizeof mac);
    return rc;
}

bool mqd_sas_covers(const char *token_hub, const char *scope, const char *topic)
{
    size_t n = strcspn(topic, "/"); /* T/$DeadLetterQueue belongs to hub T */
    if (scope != NULL && strcmp(scope, "*") != 0 &&
        (strlen(scope) != n || strncmp(scope, topic, n) != 0))
        return false;
    if (token_hub[0] == '\0')
        return true;
    return strlen(token_hub) == n && strncmp(token_hub, topic, n) == 0;
}

bool mqd_sas_covers_all(const char *token_hub, const char *scope)
{
    return token_hub[0] == '\0' && (scope == NULL || strcmp(scope, "*") == 0);
}

/* ---- the $cbs put-token request ---- */

static bool copy_bytes(pn_bytes_t b, char *out, size_t len)
{
    if (b.size >= len || memchr(b.start, '\0', b.size))
        return false;
    memcpy(out, b.start, b.size);
    out[b.size] = '\0';
    return true;
}

static bool data_str(pn_data_t *d, char *out, size_t len)
{
    switch (pn_data_type(d)) {
    case PN_STRING: return copy_bytes(pn_data_get_string(d), out, len);
    case PN_SYMBOL: return copy_bytes(pn_data_get_symbol(d), out, len);
    default: return false;
    }
}

/* operation, type, name from the application properties (other keys ignored). */
static int read_props(pn_data_t *d, mqd_cbs_req_t *r)
{
    pn_data_rewind(d);
    if (!pn_data_next(d))
        return 0;
    if (pn_data_type(d) != PN_MAP || !pn_data_enter(d))
        return MQD_EINVAL;
    char key[32];
    while (pn_data_next(d)) {
        bool k = data_str(d, key, sizeof key);
        if (!pn_data_next(d))
            return MQD_EINVAL;
        if (!k)
            continue;
        if (strcmp(key, "operation") == 0)
            r->has_op = data_str(d, r->operation, sizeof r->operation);
        else if (strcmp(key, "type") == 0)
            r->has_type = data_str(d, r->type, sizeof r->type);
        else if (strcmp(key, "name") == 0)
            r->has_name = data_str(d, r->name, sizeof r->name);
    }
    pn_data_exit(d);
    return 0;
}

int mqd_cbs_request_parse(pn_message_t *m, const uint8_t *req, size_t len, mqd_cbs_req_t *r)
{
    memset(r, 0, sizeof *r);
    /* Proton asserts on an empty buffer (found by fuzz_sas) */
    if (len == 0 || len > MQD_CBS_REQUEST_MAX || pn_message_decode(m, (const char *)req, len) != 0)
        return MQD_EINVAL;
    const char *rt = pn_message_get_reply_to(m);
    if (rt == NULL || rt[0] == '\0' || strlen(rt) >= sizeof r->reply_to)
        return MQD_EINVAL;
    strcpy(r->reply_to, rt);
    if (read_props(pn_message_properties(m), r) != 0)
        return MQD_EINVAL;
    pn_data_t *b = pn_message_body(m);
    pn_data_rewind(b);
    if (pn_data_next(b) && pn_data_type(b) == PN_STRING) {
        pn_bytes_t tok = pn_data_get_string(b);
        if (tok.size <= MQD_SAS_TOKEN_MAX) {
            r->token = tok.start;
            r->token_len = tok.size;
        }
    }
    return 0;
}
