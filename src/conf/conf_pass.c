/* Password hashes for [user NAME] sections: PBKDF2-HMAC-SHA256 with a random salt,
 * stored as "pbkdf2-sha256$ITERATIONS$SALT_B64$HASH_B64" (standard base64, padded). */
#include "config.h"
#include "conf/conf_int.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
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

/* ---- SCRAM-SHA-256 credentials (RFC 5802 section 3, RFC 7677) ---- */

static bool hmac256(const unsigned char *key, size_t keylen, const char *msg, unsigned char *out)
{
    unsigned int n = 0;
    return HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg, strlen(msg), out,
                &n) != NULL &&
           n == 32;
}

int mqd_conf_scram_derive(const char *password, const unsigned char *salt, size_t salt_len,
                          uint32_t iterations, mqd_scram_cred_t *out)
{
    unsigned char salted[32], client_key[32];
    int rc = MQD_EINVAL;
    if (password == NULL || salt_len == 0 || salt_len > sizeof out->salt || iterations == 0 ||
        iterations > MQD_CONF_PBKDF2_MAX_ITERATIONS)
        goto out;
    rc = MQD_EIO;
    /* SaltedPassword := Hi(Normalize(password), salt, i); SASLprep is the identity for
     * ASCII passwords, and mqd-passwd refuses others rather than guess */
    if (PKCS5_PBKDF2_HMAC(password, (int)strlen(password), salt, (int)salt_len, (int)iterations,
                          EVP_sha256(), sizeof salted, salted) != 1 ||
        !hmac256(salted, sizeof salted, "Client Key", client_key) ||
        SHA256(client_key, sizeof client_key, out->stored_key) == NULL ||
        !hmac256(salted, sizeof salted, "Server Key", out->server_key))
        goto out;
    memcpy(out->salt, salt, salt_len);
    out->salt_len = salt_len;
    out->iterations = iterations;
    rc = 0;
out:
    OPENSSL_cleanse(salted, sizeof salted);
    OPENSSL_cleanse(client_key, sizeof client_key);
    return rc;
}

int mqd_conf_scram_make(const char *password, uint32_t iterations, char *out, size_t outlen)
{
    unsigned char salt[SALT_LEN];
    mqd_scram_cred_t cr;
    char salt64[32], sk64[48], svk64[48];
    if (iterations == 0)
        iterations = MQD_CONF_SCRAM_ITERATIONS;
    if (iterations < MQD_CONF_PBKDF2_MIN_ITERATIONS)
        return MQD_EINVAL;
    if (RAND_bytes(salt, sizeof salt) != 1)
        return MQD_EIO;
    int rc = mqd_conf_scram_derive(password, salt, sizeof salt, iterations, &cr);
    if (rc != 0)
        return rc;
    EVP_EncodeBlock((unsigned char *)salt64, salt, sizeof salt);
    EVP_EncodeBlock((unsigned char *)sk64, cr.stored_key, sizeof cr.stored_key);
    EVP_EncodeBlock((unsigned char *)svk64, cr.server_key, sizeof cr.server_key);
    OPENSSL_cleanse(&cr, sizeof cr);
    int n = snprintf(out, outlen, "%u$%s$%s$%s", iterations, salt64, sk64, svk64);
    return n > 0 && (size_t)n < outlen ? 0 : MQD_ETOOBIG;
}

int mqd_conf_scram_parse(const char *s, mqd_scram_cred_t *out)
{
    mqd_scram_cred_t cr;
    const char *part[4];
    size_t len[4];
    if (s == NULL)
        return MQD_EINVAL;
    for (int i = 0; i < 4; i++) {
        part[i] = s;
        len[i] = strcspn(s, "$");
        s += len[i];
        if ((i < 3 && *s != '$') || (i == 3 && *s != '\0'))
            return MQD_EINVAL;
        s += i < 3;
    }
    char *end = NULL;
    unsigned long it = strtoul(part[0], &end, 10);
    size_t klen;
    unsigned char key[MAX_BIN];
    if (end != part[0] + len[0] || len[0] == 0 || part[0][0] == '-' || it < 1 ||
        it > MQD_CONF_PBKDF2_MAX_ITERATIONS)
        return MQD_EINVAL;
    cr.iterations = (uint32_t)it;
    if (!b64_decode(part[1], len[1], cr.salt, &cr.salt_len) || cr.salt_len < 8)
        return MQD_EINVAL;
    if (!b64_decode(part[2], len[2], key, &klen) || klen != 32)
        return MQD_EINVAL;
    memcpy(cr.stored_key, key, 32);
    if (!b64_decode(part[3], len[3], key, &klen) || klen != 32)
        return MQD_EINVAL;
    memcpy(cr.server_key, key, 32);
    *out = cr;
    return 0;
}

int mqd_conf_check_scram(const char *v, char *why, size_t whylen)
{
    mqd_scram_cred_t cr;
    if (mqd_conf_scram_parse(v, &cr) == 0)
        return 0;
    snprintf(why, whylen,
             "expected ITERATIONS$SALT$STOREDKEY$SERVERKEY (made by mqd-passwd --scram)");
    return MQD_EINVAL;
}
