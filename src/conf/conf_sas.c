/* [sas_key NAME] sections and sas_required: the shared access keys that sign Event Hubs
 * style SAS tokens (checked by auth/sas.c when a client sends put-token to $cbs). */
#include "config.h"
#include "conf/conf_int.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int mqd_conf_sas_get(mqd_conf_t *c, const char *name, mqd_sas_key_conf_t **out)
{
    for (size_t i = 0; i < c->n_sas_keys; i++) {
        if (strcmp(c->sas_keys[i].name, name) == 0) {
            *out = &c->sas_keys[i];
            return 0;
        }
    }
    char *dup = strdup(name);
    mqd_sas_key_conf_t *grown =
        dup ? realloc(c->sas_keys, (c->n_sas_keys + 1) * sizeof *grown) : NULL;
    if (grown == NULL) {
        free(dup);
        return MQD_ENOMEM;
    }
    c->sas_keys = grown;
    mqd_sas_key_conf_t *k = &grown[c->n_sas_keys++];
    memset(k, 0, sizeof *k);
    k->name = dup;
    *out = k;
    return 0;
}

void mqd_conf_sas_free(mqd_conf_t *c)
{
    for (size_t i = 0; i < c->n_sas_keys; i++) {
        free(c->sas_keys[i].name);
        mqd_conf_row_free_fields(MQD_CS_SASKEY, &c->sas_keys[i]);
    }
    free(c->sas_keys);
    c->sas_keys = NULL;
    c->n_sas_keys = 0;
}

const mqd_sas_key_conf_t *mqd_conf_sas_key(const mqd_conf_t *c, const char *name)
{
    for (size_t i = 0; name != NULL && i < c->n_sas_keys; i++)
        if (strcmp(c->sas_keys[i].name, name) == 0)
            return &c->sas_keys[i];
    return NULL;
}

int mqd_conf_parse_sas_rights(const char *s, unsigned *out)
{
    static const char *const words[] = {"send", "listen", "manage"};
    unsigned bits = 0;
    while (*s) {
        s += strspn(s, " \t,");
        size_t n = strcspn(s, " \t,");
        if (n == 0)
            break;
        size_t i = 0;
        while (i < MQD_ARRAY_LEN(words) &&
               !(strlen(words[i]) == n && strncasecmp(s, words[i], n) == 0))
            i++;
        if (i == MQD_ARRAY_LEN(words))
            return MQD_EINVAL;
        bits |= 1u << i;
        s += n;
    }
    if (bits == 0)
        return MQD_EINVAL;
    if (bits & MQD_CONF_SAS_MANAGE) /* as in Azure: Manage includes Send and Listen */
        bits |= MQD_CONF_SAS_SEND | MQD_CONF_SAS_LISTEN;
    *out = bits;
    return 0;
}

int mqd_conf_check_sas_rights(const char *v, char *why, size_t whylen)
{
    unsigned bits;
    if (mqd_conf_parse_sas_rights(v, &bits) == 0)
        return 0;
    snprintf(why, whylen, "expected a list of send, listen, manage; got '%s'", v);
    return MQD_EINVAL;
}

static bool listener_loopback(const char *listen)
{
    char host[256];
    uint16_t port;
    if (mqd_conf_parse_hostport(listen, host, sizeof host, &port) != 0)
        return false;
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0 ||
           strcasecmp(host, "localhost") == 0;
}

static bool all_loopback(const mqd_conf_t *c)
{
    for (size_t i = 0; i < c->n_listen; i++)
        if (!listener_loopback(c->listen[i]))
            return false;
    return true;
}

bool mqd_conf_sas_effective(const mqd_conf_t *c)
{
    return c->sas_required == MQD_SAS_REQUIRED_ON;
}

bool mqd_conf_sas_lenient(const mqd_conf_t *c)
{
    if (c->sas_required == MQD_SAS_REQUIRED_AUTO)
        return all_loopback(c);
    return c->sas_required == MQD_SAS_REQUIRED_OFF;
}

int mqd_conf_validate_sas(const mqd_conf_t *c, const char *src, char *err, size_t errlen)
{
    for (size_t i = 0; i < c->n_sas_keys; i++) {
        const mqd_sas_key_conf_t *k = &c->sas_keys[i];
        if (k->key == NULL || k->key[0] == '\0') {
            snprintf(err, errlen, "%s: [sas_key %s]: key: missing (mqd-passwd --sas %s makes one)",
                     src, k->name, k->name);
            return MQD_EINVAL;
        }
        if (k->rights == NULL) {
            snprintf(err, errlen, "%s: [sas_key %s]: rights: missing (send, listen, manage)", src,
                     k->name);
            return MQD_EINVAL;
        }
    }
    if (c->sas_required == MQD_SAS_REQUIRED_OFF && !all_loopback(c))
        MQD_WARN("conf",
                 "%s: sas_required = off on a listener that is not loopback: $cbs accepts "
                 "tokens of unknown key names unchecked",
                 src);
    return 0;
}

int mqd_conf_sas_key_make(char *out, size_t outlen)
{
    unsigned char raw[32];
    if (outlen < 45)
        return MQD_ERANGE;
    if (RAND_bytes(raw, sizeof raw) != 1)
        return MQD_EIO;
    EVP_EncodeBlock((unsigned char *)out, raw, sizeof raw); /* 44 characters and a NUL */
    OPENSSL_cleanse(raw, sizeof raw);
    return 0;
}
