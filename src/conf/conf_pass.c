/* Password hashes for [user NAME] sections: PBKDF2-HMAC-SHA256 with a random salt,
 * stored as "pbkdf2-sha256$ITERATIONS$SALT_B64$HASH_B64" (standard base64, padded). */
#include "config.h"
#include "conf/conf_int.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "pbkdf2-sha256$"
#define SALT_LEN 16
#define DK_LEN 32
#define MAX_BIN 64 /* longest salt or hash accepted when verifying */

typedef struct parsed {
    uint32_t iterations;
    unsigned char salt[MAX_BIN];
    size_t salt_len;
    unsigned char hash[MAX_BIN];
    size_t hash_len;
} parsed_t;

/* Decodes `len` chars of padded base64 into out (MAX_BIN); false if malformed. */
static bool b64_decode(const char *s, size_t len, unsigned char *out, size_t *outlen)
{
    unsigned char tmp[MAX_BIN + 3];
    if (len == 0 || len % 4 != 0 || len / 4 * 3 > sizeof tmp)
        return false;
    int n = EVP_DecodeBlock(tmp, (const unsigned char *)s, (int)len);
    if (n < 0)
        return false;
    /* EVP_DecodeBlock counts the padding as zero bytes */
    size_t pad = (s[len - 1] == '=') + (s[len - 2] == '=');
    if ((size_t)n < pad || (size_t)n - pad > MAX_BIN)
        return false;
    *outlen = (size_t)n - pad;
    memcpy(out, tmp, *outlen);
    return true;
}

static bool parse_hash(const char *h, parsed_t *p)
{
    if (h == NULL || strncmp(h, PREFIX, strlen(PREFIX)) != 0)
        return false;
    const char *s = h + strlen(PREFIX);
    char *end = NULL;
    unsigned long it = strtoul(s, &end, 10);
    if (end == s || *end != '$' || it < 1 || it > MQD_CONF_PBKDF2_MAX_ITERATIONS)
        return false;
    const char *salt = end + 1;
    const char *dollar = strchr(salt, '$');
    if (dollar == NULL)
        return false;
    const char *hash = dollar + 1;
    if (!b64_decode(salt, (size_t)(dollar - salt), p->salt, &p->salt_len) ||
        !b64_decode(hash, strlen(hash), p->hash, &p->hash_len) || p->salt_len < 8 ||
        p->hash_len < 16)
        return false;
    p->iterations = (uint32_t)it;
    return true;
}

bool mqd_conf_password_ok(const char *password_hash, const char *password)
{
    parsed_t p;
    unsigned char dk[MAX_BIN];
    if (password == NULL || !parse_hash(password_hash, &p))
        return false;
    if (PKCS5_PBKDF2_HMAC(password, (int)strlen(password), p.salt, (int)p.salt_len,
                          (int)p.iterations, EVP_sha256(), (int)p.hash_len, dk) != 1)
        return false;
    bool ok = CRYPTO_memcmp(dk, p.hash, p.hash_len) == 0;
    OPENSSL_cleanse(dk, sizeof dk);
    return ok;
}

int mqd_conf_password_hash(const char *password, uint32_t iterations, char *out, size_t outlen)
{
    unsigned char salt[SALT_LEN], dk[DK_LEN];
    char salt64[4 * ((SALT_LEN + 2) / 3) + 1], dk64[4 * ((DK_LEN + 2) / 3) + 1];
    int rc = MQD_EINVAL;
    if (iterations == 0)
        iterations = MQD_CONF_PBKDF2_ITERATIONS;
    if (password == NULL || iterations < MQD_CONF_PBKDF2_MIN_ITERATIONS ||
        iterations > MQD_CONF_PBKDF2_MAX_ITERATIONS)
        goto out;
    rc = MQD_EIO; /* no entropy or a broken libcrypto */
    if (RAND_bytes(salt, sizeof salt) != 1 ||
        PKCS5_PBKDF2_HMAC(password, (int)strlen(password), salt, sizeof salt, (int)iterations,
                          EVP_sha256(), sizeof dk, dk) != 1)
        goto out;
    EVP_EncodeBlock((unsigned char *)salt64, salt, sizeof salt);
    EVP_EncodeBlock((unsigned char *)dk64, dk, sizeof dk);
    char buf[160];
    int n = snprintf(buf, sizeof buf, PREFIX "%u$%s$%s", iterations, salt64, dk64);
    rc = MQD_ETOOBIG;
    if (n > 0 && (size_t)n < outlen && (size_t)n < sizeof buf) {
        memcpy(out, buf, (size_t)n + 1);
        rc = 0;
    }
out:
    OPENSSL_cleanse(dk, sizeof dk);
    return rc;
}

int mqd_conf_check_password_hash(const char *v, char *why, size_t whylen)
{
    parsed_t p;
    if (parse_hash(v, &p))
        return 0;
    snprintf(why, whylen, "expected pbkdf2-sha256$ITERATIONS$SALT$HASH (made by mqd-passwd)");
    return MQD_EINVAL;
}
