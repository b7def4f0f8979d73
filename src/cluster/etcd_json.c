/* cluster: the JSON of etcd 3.4's v3 gateway. Keys and values travel as base64, 64-bit
 * numbers as JSON strings (proto3's JSON form; plain numbers are read too), and fields
 * equal to zero or false are left out, so every getter defaults to 0. Every reply is
 * outside input: tests/fuzz/fuzz_etcd.c drives these parsers. */
#include "config.h"
#include "cluster/cluster_int.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mqd_etcd_b64_encode(const void *in, size_t n, char **out)
{
    if (n > (1u << 28))
        return MQD_ETOOBIG;
    char *s = malloc(4 * ((n + 2) / 3) + 1);
    if (s == NULL)
        return MQD_ENOMEM;
    EVP_EncodeBlock((unsigned char *)s, in, (int)n); /* no newlines, NUL-terminated */
    *out = s;
    return 0;
}

int mqd_etcd_b64_decode(const char *in, size_t n, char **out, size_t *outlen)
{
    if (n > (1u << 28))
        return MQD_ETOOBIG;
    /* EVP_DecodeUpdate skips whitespace and stops at '-': JSON strings have neither (and
     * in[] need not end in a NUL: no str* functions) */
    for (size_t i = 0; i < n; i++)
        if (in[i] == '-' || in[i] == ' ' || in[i] == '\t' || in[i] == '\r' || in[i] == '\n' ||
            in[i] == '\0')
            return MQD_EINVAL;
    int rc = MQD_ENOMEM;
    unsigned char *d = malloc(3 * (n / 4) + 4);
    EVP_ENCODE_CTX *ctx = EVP_ENCODE_CTX_new();
    if (d == NULL || ctx == NULL)
        goto out;
    int a = 0, b = 0;
    EVP_DecodeInit(ctx);
    rc = MQD_EINVAL;
    if (n % 4 != 0 || EVP_DecodeUpdate(ctx, d, &a, (const unsigned char *)in, (int)n) < 0 ||
        EVP_DecodeFinal(ctx, d + a, &b) != 1)
        goto out;
    d[a + b] = '\0';
    *out = (char *)d;
    *outlen = (size_t)(a + b);
    d = NULL;
    rc = 0;
out:
    EVP_ENCODE_CTX_free(ctx);
    free(d);
    return rc;
}

/* ---- building requests ---- */

static int set_b64(json_t *o, const char *name, const char *s, size_t n)
{
    char *b;
    if (mqd_etcd_b64_encode(s, n, &b) != 0)
        return -1;
    int rc = json_object_set_new(o, name, json_string(b));
    free(b);
    return rc;
}

static int set_i64(json_t *o, const char *name, int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return json_object_set_new(o, name, json_string(buf));
}

/* The end of "every key starting with key": the key with its last byte below 0xff raised
 * by one, shorter if it ends in 0xff bytes; "\0" (the whole key space) if all are. */
static int set_prefix_end(json_t *o, const char *key, size_t klen)
{
    char end[1024];
    size_t n = klen < sizeof end ? klen : sizeof end;
    memcpy(end, key, n);
    while (n > 0 && (unsigned char)end[n - 1] == 0xff)
        n--;
    if (n == 0)
        return set_b64(o, "range_end", "", 1);
    end[n - 1] = (char)((unsigned char)end[n - 1] + 1);
    return set_b64(o, "range_end", end, n);
}

static json_t *key_obj(const char *key, size_t klen, bool prefix)
{
    json_t *o = json_object();
    if (o == NULL || set_b64(o, "key", key, klen) != 0 ||
        (prefix && set_prefix_end(o, key, klen) != 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static char *dump(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static json_t *put_obj(const char *key, size_t klen, const char *val, size_t vlen, int64_t lease)
{
    json_t *o = key_obj(key, klen, false);
    if (o != NULL &&
        (set_b64(o, "value", val, vlen) != 0 || (lease != 0 && set_i64(o, "lease", lease) != 0))) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

char *mqd_etcd_json_put(const char *key, size_t klen, const char *val, size_t vlen, int64_t lease)
{
    return dump(put_obj(key, klen, val, vlen, lease));
}

char *mqd_etcd_json_range(const char *key, size_t klen, bool prefix)
{
    return dump(key_obj(key, klen, prefix));
}

char *mqd_etcd_json_delete(const char *key, size_t klen, bool prefix)
{
    return dump(key_obj(key, klen, prefix));
}

static json_t *cmp_obj(const mqd_etcd_cmp_t *c)
{
    static const char *const targets[] = {"CREATE", "MOD", "VERSION"};
    static const char *const fields[] = {"create_revision", "mod_revision", "version"};
    json_t *o = key_obj(c->key, c->key_len, false);
    if (o == NULL || json_object_set_new(o, "target", json_string(targets[c->target])) != 0 ||
        json_object_set_new(o, "result", json_string("EQUAL")) != 0 ||
        set_i64(o, fields[c->target], c->value) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *ops_arr(const mqd_etcd_op_t *ops, size_t n)
{
    static const char *const names[] = {"request_put", "request_range", "request_delete_range"};
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++) {
        const mqd_etcd_op_t *op = &ops[i];
        json_t *inner = op->type == MQD_ETCD_OP_PUT
                            ? put_obj(op->key, op->key_len, op->value, op->value_len, op->lease)
                            : key_obj(op->key, op->key_len, op->prefix);
        json_t *w = json_object();
        if (inner == NULL || w == NULL || json_object_set_new(w, names[op->type], inner) != 0 ||
            json_array_append_new(a, w) != 0) {
            json_decref(w);
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

char *mqd_etcd_json_txn(const mqd_etcd_txn_t *t)
{
    json_t *o = json_object(), *cmp = json_array();
    for (size_t i = 0; cmp != NULL && i < t->n_cmp; i++) {
        json_t *c = cmp_obj(&t->cmp[i]);
        if (c == NULL || json_array_append_new(cmp, c) != 0) {
            json_decref(cmp);
            cmp = NULL;
        }
    }
    json_t *s = ops_arr(t->success, t->n_success), *f = ops_arr(t->failure, t->n_failure);
    if (o == NULL || cmp == NULL || s == NULL || f == NULL) {
        json_decref(cmp);
        json_decref(s);
        json_decref(f);
        json_decref(o);
        return NULL;
    }
    json_object_set_new(o, "compare", cmp);
    json_object_set_new(o, "success", s);
    json_object_set_new(o, "failure", f);
    return dump(o);
}

char *mqd_etcd_json_lease_grant(int64_t ttl_s)
{
    json_t *o = json_object();
    if (o != NULL && set_i64(o, "TTL", ttl_s) != 0) {
        json_decref(o);
        o = NULL;
    }
    return dump(o);
}

char *mqd_etcd_json_lease_id(int64_t id)
{
    json_t *o = json_object();
    if (o != NULL && set_i64(o, "ID", id) != 0) {
        json_decref(o);
        o = NULL;
    }
    return dump(o);
}

char *mqd_etcd_json_watch(const char *key, size_t klen, bool prefix, int64_t start_rev)
{
    json_t *w = json_object(), *cr = key_obj(key, klen, prefix);
    if (w == NULL || cr == NULL || (start_rev > 0 && set_i64(cr, "start_revision", start_rev)) ||
        json_object_set_new(cr, "progress_notify", json_true()) != 0) {
        json_decref(cr);
        json_decref(w);
        return NULL;
    }
    if (json_object_set_new(w, "create_request", cr) != 0) { /* cr is w's (or gone) now */
        json_decref(w);
        return NULL;
    }
    return dump(w);
}
