/* mqctl's SCRAM-SHA-256 client (RFC 5802, RFC 7677; no channel binding, gs2 header
 * "n,,"). All crypto is OpenSSL's: PBKDF2 (PKCS5_PBKDF2_HMAC), HMAC, SHA-256, base64
 * (EVP). The server's messages are outside input: every attribute is bounded and
 * checked, and the iteration count is capped so a server cannot make us spin. */
#include "config.h"
#include "mqd.h"
#include "tools/scram_client.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int why_fail(char *why, size_t len, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int why_fail(char *why, size_t len, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return rc;
}

int mqd_scramc_first(mqd_scramc_t *s, const char *user, const char *cnonce)
{
    char esc[sizeof s->user * 3], rnd64[48];
    unsigned char rnd[24];
    size_t n = 0;
    memset(s, 0, sizeof *s);
    if (!user || !*user || strlen(user) >= sizeof s->user)
        return MQD_EINVAL;
    snprintf(s->user, sizeof s->user, "%s", user);
    for (const char *p = user; *p; p++) { /* saslname: ',' is =2C and '=' is =3D */
        const char *rep = *p == ',' ? "=2C" : *p == '=' ? "=3D" : NULL;
        if (rep) {
            memcpy(esc + n, rep, 3);
            n += 3;
        } else {
            esc[n++] = *p;
        }
    }
    esc[n] = '\0';
    if (!cnonce) {
        if (RAND_bytes(rnd, sizeof rnd) != 1)
            return MQD_EIO;
        EVP_EncodeBlock((unsigned char *)rnd64, rnd, sizeof rnd); /* no ',' in base64 */
        cnonce = rnd64;
    }
    int w = snprintf(s->first_bare, sizeof s->first_bare, "n=%s,r=%s", esc, cnonce);
    if (w < 0 || (size_t)w >= sizeof s->first_bare)
        return MQD_EINVAL;
    snprintf(s->nonce, sizeof s->nonce, "%s", cnonce);
    snprintf(s->out, sizeof s->out, "n,,%s", s->first_bare);
    s->step = 1;
    return 0;
}

/* Copies attribute `name` of a comma-separated message into out; NULL if absent. */
static const char *find_attr(const char *msg, char name, char *out, size_t outlen)
{
    for (const char *p = msg; p && *p; p = strchr(p, ','), p = p ? p + 1 : NULL) {
        if (p[0] != name || p[1] != '=')
            continue;
        size_t n = strcspn(p + 2, ",");
        if (n == 0 || n >= outlen)
            return NULL;
        memcpy(out, p + 2, n);
        out[n] = '\0';
        return out;
    }
    return NULL;
}

static bool hmac32(const unsigned char *key, size_t klen, const void *msg, size_t mlen,
                   unsigned char out[32])
{
    unsigned int n = 0;
    return HMAC(EVP_sha256(), key, (int)klen, msg, mlen, out, &n) != NULL && n == 32;
}

/* The keys of RFC 5802 section 3 and the proof over auth_msg into s->out. */
static int prove(mqd_scramc_t *s, const char *password, const unsigned char *salt, int salt_len,
                 unsigned iters, const char *auth_msg, const char *without_proof)
{
    unsigned char salted[32], ckey[32], stored[32], csig[32], skey[32], proof[32];
    char p64[48];
    int rc = MQD_EIO;
    if (PKCS5_PBKDF2_HMAC(password, (int)strlen(password), salt, salt_len, (int)iters,
                          EVP_sha256(), sizeof salted, salted) != 1 ||
        !hmac32(salted, 32, "Client Key", 10, ckey) || SHA256(ckey, 32, stored) == NULL ||
        !hmac32(stored, 32, auth_msg, strlen(auth_msg), csig) ||
        !hmac32(salted, 32, "Server Key", 10, skey) ||
        !hmac32(skey, 32, auth_msg, strlen(auth_msg), s->server_sig))
        goto out;
    for (int i = 0; i < 32; i++)
        proof[i] = ckey[i] ^ csig[i];
    EVP_EncodeBlock((unsigned char *)p64, proof, sizeof proof);
    snprintf(s->out, sizeof s->out, "%s,p=%s", without_proof, p64);
    s->step = 2;
    rc = 0;
out:
    OPENSSL_cleanse(salted, sizeof salted);
    OPENSSL_cleanse(ckey, sizeof ckey);
    OPENSSL_cleanse(skey, sizeof skey);
    OPENSSL_cleanse(proof, sizeof proof);
    return rc;
}

int mqd_scramc_final(mqd_scramc_t *s, const char *password, const char *msg, size_t len,
                     char *why, size_t whylen)
{
    char sf[MQD_SCRAMC_MSG_MAX + 1], nonce[MQD_SCRAMC_MSG_MAX + 1], salt64[200], it[16];
    char without_proof[MQD_SCRAMC_MSG_MAX + 64], auth_msg[3 * MQD_SCRAMC_MSG_MAX + 200];
    unsigned char salt[160];
    if (s->step != 1)
        return why_fail(why, whylen, MQD_EINVAL, "SCRAM challenge out of order");
    if (!msg || len == 0 || len > MQD_SCRAMC_MSG_MAX || memchr(msg, '\0', len))
        return why_fail(why, whylen, MQD_EINVAL, "malformed SCRAM server-first-message");
    memcpy(sf, msg, len);
    sf[len] = '\0';
    if (sf[0] == 'm' && sf[1] == '=')
        return why_fail(why, whylen, MQD_EINVAL, "server-first-message has a mandatory extension");
    if (!find_attr(sf, 'r', nonce, sizeof nonce) || !find_attr(sf, 's', salt64, sizeof salt64) ||
        !find_attr(sf, 'i', it, sizeof it))
        return why_fail(why, whylen, MQD_EINVAL, "server-first-message lacks r=, s= or i=");
    size_t cn = strlen(s->nonce);
    if (strncmp(nonce, s->nonce, cn) != 0 || nonce[cn] == '\0')
        return why_fail(why, whylen, MQD_EINVAL, "the server's nonce does not extend ours");
    char *end;
    unsigned long iters = strtoul(it, &end, 10);
    if (*end || it[0] < '1' || it[0] > '9' || iters > MQD_SCRAMC_MAX_ITERATIONS)
        return why_fail(why, whylen, MQD_EINVAL, "SCRAM iteration count '%s' out of range 1..%u",
                        it, MQD_SCRAMC_MAX_ITERATIONS);
    size_t sl = strlen(salt64);
    int n = sl % 4 == 0 ? EVP_DecodeBlock(salt, (const unsigned char *)salt64, (int)sl) : -1;
    if (n <= 0)
        return why_fail(why, whylen, MQD_EINVAL, "SCRAM salt is not base64");
    n -= (int)(sl >= 1 && salt64[sl - 1] == '=') + (int)(sl >= 2 && salt64[sl - 2] == '=');
    /* "biws" is base64("n,,"): the gs2 header we sent */
    snprintf(without_proof, sizeof without_proof, "c=biws,r=%s", nonce);
    snprintf(auth_msg, sizeof auth_msg, "%s,%s,%s", s->first_bare, sf, without_proof);
    if (prove(s, password, salt, n, (unsigned)iters, auth_msg, without_proof) != 0)
        return why_fail(why, whylen, MQD_EIO, "SCRAM key derivation failed");
    return 0;
}

int mqd_scramc_verify(mqd_scramc_t *s, const char *msg, size_t len, char *why, size_t whylen)
{
    char v64[64];
    unsigned char sig[48];
    if (s->step != 2)
        return why_fail(why, whylen, MQD_EINVAL, "SCRAM outcome before our proof");
    if (!msg || len < 2 || len >= sizeof v64 || memchr(msg, '\0', len))
        return why_fail(why, whylen, MQD_EFAILED,
                        "the server sent no SCRAM server-final-message (v=): it did not prove "
                        "it knows the password");
    memcpy(v64, msg, len);
    v64[len] = '\0';
    if (v64[0] == 'e' && v64[1] == '=')
        return why_fail(why, whylen, MQD_EFAILED, "the server refused: %s", v64 + 2);
    if (v64[0] != 'v' || v64[1] != '=' || strlen(v64 + 2) != 44 ||
        EVP_DecodeBlock(sig, (const unsigned char *)v64 + 2, 44) != 33 ||
        CRYPTO_memcmp(sig, s->server_sig, 32) != 0)
        return why_fail(why, whylen, MQD_EFAILED,
                        "the server's SCRAM signature (v=) is wrong: it does not know this "
                        "user's keys (not the broker you meant?)");
    s->step = 3;
    return 0;
}

void mqd_scramc_clear(mqd_scramc_t *s)
{
    OPENSSL_cleanse(s, sizeof *s);
}
