/* The server side of SCRAM-SHA-256 (RFC 5802, RFC 7677) without channel binding: the
 * client proves it knows the password through StoredKey, the server proves it knows
 * ServerKey, and neither the password nor anything that replays as it is stored. */
#include "config.h"
#include "auth/auth_int.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>

/* Copies the value of attribute `name` ("n=...") starting at p up to ',' or end. */
static const char *attr(const char *p, const char *end, char name, char *out, size_t outlen)
{
    if (end - p < 2 || p[0] != name || p[1] != '=')
        return NULL;
    p += 2;
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *stop = comma ? comma : end;
    size_t n = (size_t)(stop - p);
    if (n == 0 || n >= outlen)
        return NULL;
    memcpy(out, p, n);
    out[n] = '\0';
    return comma ? comma + 1 : end;
}

/* saslname: "=2C" is ',', "=3D" is '='; any other '=' is malformed. */
static bool unescape_name(char *s)
{
    char *w = s;
    for (const char *r = s; *r; r++) {
        if (*r != '=') {
            *w++ = *r;
            continue;
        }
        if (strncmp(r, "=2C", 3) == 0)
            *w++ = ',';
        else if (strncmp(r, "=3D", 3) == 0)
            *w++ = '=';
        else
            return false;
        r += 2;
    }
    *w = '\0';
    return w != s;
}

static bool printable_nonce(const char *s)
{
    for (; *s; s++)
        if (*s < 0x21 || *s > 0x7e || *s == ',')
            return false;
    return true;
}

int mqd_scram_client_first(mqd_scram_t *s, const char *msg, size_t len)
{
    char authzid[256], cnonce[MQD_SCRAM_MSG_MAX + 1];
    const char *end = msg + len, *p = msg;
    if (s->step != 0 || len == 0 || len > MQD_SCRAM_MSG_MAX || memchr(msg, '\0', len))
        return MQD_EINVAL;
    /* gs2-cbind-flag: "n" (no binding) or "y" (client could, thinks we cannot); we offer
     * no -PLUS mechanism, so "p=" is a downgrade attempt or a confused client */
    if (len < 3 || (p[0] != 'n' && p[0] != 'y') || p[1] != ',')
        return MQD_EINVAL;
    p += 2;
    if (*p == 'a') {
        p = attr(p, end, 'a', authzid, sizeof authzid);
        if (p == NULL || p[-1] != ',')
            return MQD_EINVAL;
    } else if (*p++ != ',') {
        return MQD_EINVAL;
    }
    size_t gs2_len = (size_t)(p - msg);
    if (gs2_len >= sizeof s->gs2)
        return MQD_EINVAL;
    memcpy(s->gs2, msg, gs2_len);
    s->gs2[gs2_len] = '\0';
    memcpy(s->first_bare, p, (size_t)(end - p));
    s->first_bare[end - p] = '\0';
    /* "m=" is a mandatory extension we do not know: RFC 5802 says fail */
    p = attr(p, end, 'n', s->user, sizeof s->user);
    if (p == NULL || p == end || !unescape_name(s->user))
        return MQD_EINVAL;
    p = attr(p, end, 'r', cnonce, sizeof cnonce);
    if (p == NULL || !printable_nonce(cnonce))
        return MQD_EINVAL;
    if (gs2_len > 3 && strncmp(s->gs2 + 2, "a=", 2) == 0) {
        /* an authorization identity other than the user itself would be impersonation */
        char az[256];
        snprintf(az, sizeof az, "%s", authzid);
        if (!unescape_name(az) || strcmp(az, s->user) != 0)
            return MQD_EINVAL;
    }
    snprintf(s->nonce, sizeof s->nonce, "%s", cnonce);
    s->step = 1;
    return 0;
}

/* known false: cred is a decoy (or NULL: a random one) and the proof fails. */
static int server_first(mqd_scram_t *s, const mqd_scram_cred_t *cred, bool known,
                        const char *server_nonce, char *out)
{
    unsigned char rnd[24];
    char rnd64[40], salt64[100];
    if (s->step != 1)
        return MQD_EINVAL;
    if (server_nonce == NULL) {
        if (RAND_bytes(rnd, sizeof rnd) != 1)
            return MQD_EIO;
        EVP_EncodeBlock((unsigned char *)rnd64, rnd, sizeof rnd); /* no ',' in base64 */
        server_nonce = rnd64;
    }
    s->known = known;
    if (cred != NULL) {
        s->cred = *cred;
    } else {
        memset(&s->cred, 0, sizeof s->cred);
        s->cred.iterations = MQD_CONF_SCRAM_ITERATIONS;
        s->cred.salt_len = 16;
        if (RAND_bytes(s->cred.salt, 16) != 1)
            return MQD_EIO;
    }
    size_t cn = strlen(s->nonce);
    if (cn + strlen(server_nonce) >= sizeof s->nonce)
        return MQD_EINVAL;
    strcat(s->nonce, server_nonce);
    EVP_EncodeBlock((unsigned char *)salt64, s->cred.salt, (int)s->cred.salt_len);
    int n = snprintf(s->server_first, sizeof s->server_first, "r=%s,s=%s,i=%u", s->nonce, salt64,
                     s->cred.iterations);
    if (n < 0 || (size_t)n >= sizeof s->server_first)
        return MQD_EINVAL;
    memcpy(out, s->server_first, (size_t)n + 1);
    return 0;
}

int mqd_scram_server_first(mqd_scram_t *s, const mqd_scram_cred_t *cred, const char *server_nonce,
                           char *out)
{
    return server_first(s, cred, cred != NULL, server_nonce, out);
}

int mqd_scram_server_first_decoy(mqd_scram_t *s, const mqd_scram_cred_t *decoy,
                                 const char *server_nonce, char *out)
{
    return server_first(s, decoy, false, server_nonce, out);
}

/* HMAC-SHA256(key, label NUL user) */
static bool keyed(const unsigned char key[32], const char *label, const char *user,
                  unsigned char out[32])
{
    unsigned char msg[64 + 256];
    unsigned int n = 0;
    size_t ll = strlen(label) + 1, ul = strlen(user);
    if (ll + ul > sizeof msg)
        return false;
    memcpy(msg, label, ll);
    memcpy(msg + ll, user, ul);
    return HMAC(EVP_sha256(), key, 32, msg, ll + ul, out, &n) != NULL && n == 32;
}

int mqd_scram_decoy(const unsigned char key[32], const char *user, uint32_t iterations,
                    mqd_scram_cred_t *out)
{
    unsigned char salt[32];
    mqd_scram_cred_t cr = {.iterations = iterations, .salt_len = 16};
    if (!keyed(key, "mqd scram salt", user, salt) ||
        !keyed(key, "mqd scram stored", user, cr.stored_key) ||
        !keyed(key, "mqd scram server", user, cr.server_key))
        return MQD_EIO;
    memcpy(cr.salt, salt, 16);
    *out = cr;
    return 0;
}

static bool hmac(const unsigned char key[32], const char *a, const char *b, const char *c,
                 unsigned char out[32])
{
    /* AuthMessage = client-first-bare "," server-first "," client-final-without-proof */
    char msg[3 * (MQD_SCRAM_MSG_MAX + 1)];
    unsigned int n = 0;
    int len = snprintf(msg, sizeof msg, "%s,%s,%s", a, b, c);
    if (len < 0 || (size_t)len >= sizeof msg)
        return false;
    return HMAC(EVP_sha256(), key, 32, (const unsigned char *)msg, (size_t)len, out, &n) != NULL &&
           n == 32;
}

/* Parses c=, r= and p= of client-final; `without_proof` gets the part the proof signs. */
static int parse_final(mqd_scram_t *s, const char *msg, size_t len, char *without_proof,
                       unsigned char proof[32])
{
    char cb[400], nonce[MQD_SCRAM_MSG_MAX + 1], p64[64], gs2_64[400];
    const char *end = msg + len;
    if (len == 0 || len > MQD_SCRAM_MSG_MAX || memchr(msg, '\0', len))
        return MQD_EINVAL;
    const char *p = attr(msg, end, 'c', cb, sizeof cb);
    if (p == NULL || p == end)
        return MQD_EINVAL;
    p = attr(p, end, 'r', nonce, sizeof nonce);
    if (p == NULL || p == end)
        return MQD_EINVAL;
    /* the proof is the last attribute; extensions may sit between r= and p= */
    const char *pp = NULL;
    for (const char *q = p - 1; q + 3 <= end; q++)
        if (q[0] == ',' && q[1] == 'p' && q[2] == '=')
            pp = q;
    if (pp == NULL || attr(pp + 1, end, 'p', p64, sizeof p64) != end)
        return MQD_EINVAL;
    memcpy(without_proof, msg, (size_t)(pp - msg));
    without_proof[pp - msg] = '\0';
    EVP_EncodeBlock((unsigned char *)gs2_64, (const unsigned char *)s->gs2, (int)strlen(s->gs2));
    if (strcmp(cb, gs2_64) != 0 || strcmp(nonce, s->nonce) != 0)
        return MQD_EINVAL;
    unsigned char tmp[48];
    size_t pl = strlen(p64);
    if (pl != 44 || EVP_DecodeBlock(tmp, (const unsigned char *)p64, (int)pl) != 33)
        return MQD_EINVAL; /* 32 bytes + one '=' of padding counted as zero */
    memcpy(proof, tmp, 32);
    return 0;
}

int mqd_scram_client_final(mqd_scram_t *s, const char *msg, size_t len, char *out)
{
    char without_proof[MQD_SCRAM_MSG_MAX + 1];
    unsigned char proof[32], sig[32], client_key[32], stored[32], server_sig[32];
    int rc = MQD_EINVAL;
    if (s->step != 1 || s->server_first[0] == '\0')
        goto out;
    s->step = 2;
    if ((rc = parse_final(s, msg, len, without_proof, proof)) != 0)
        goto out;
    rc = MQD_EIO;
    if (!hmac(s->cred.stored_key, s->first_bare, s->server_first, without_proof, sig))
        goto out;
    for (int i = 0; i < 32; i++)
        client_key[i] = proof[i] ^ sig[i];
    if (SHA256(client_key, sizeof client_key, stored) == NULL)
        goto out;
    rc = MQD_EFAILED;
    if (!s->known || CRYPTO_memcmp(stored, s->cred.stored_key, 32) != 0)
        goto out;
    rc = MQD_EIO;
    if (!hmac(s->cred.server_key, s->first_bare, s->server_first, without_proof, server_sig))
        goto out;
    memcpy(out, "v=", 2);
    EVP_EncodeBlock((unsigned char *)out + 2, server_sig, sizeof server_sig);
    rc = 0;
out:
    OPENSSL_cleanse(client_key, sizeof client_key);
    OPENSSL_cleanse(proof, sizeof proof);
    return rc;
}

void mqd_scram_clear(mqd_scram_t *s)
{
    OPENSSL_cleanse(s, sizeof *s);
}
