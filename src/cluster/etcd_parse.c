/* cluster: reading etcd's answers and watch streams (outside input: every field is
 * checked for its JSON type, numbers must be whole 64-bit values, base64 must decode). */
#include "config.h"
#include "cluster/cluster_int.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A 64-bit field: etcd writes them as strings; absent (left out as zero) reads as 0. */
static int get_i64(const json_t *o, const char *name, int64_t *out)
{
    const json_t *v = json_object_get(o, name);
    *out = 0;
    if (v == NULL)
        return 0;
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 0;
    }
    if (!json_is_string(v))
        return MQD_ECORRUPT;
    const char *s = json_string_value(v);
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (s[0] == '\0' || *end != '\0' || errno != 0 || (s[0] != '-' && (s[0] < '0' || s[0] > '9')))
        return MQD_ECORRUPT;
    *out = (int64_t)x;
    return 0;
}

static bool get_bool(const json_t *o, const char *name)
{
    return json_is_true(json_object_get(o, name));
}

static int get_b64(const json_t *o, const char *name, char **out, size_t *len)
{
    const json_t *v = json_object_get(o, name);
    if (v == NULL) { /* an empty value is left out */
        *out = calloc(1, 1);
        *len = 0;
        return *out ? 0 : MQD_ENOMEM;
    }
    if (!json_is_string(v))
        return MQD_ECORRUPT;
    int rc = mqd_etcd_b64_decode(json_string_value(v), json_string_length(v), out, len);
    return rc == MQD_EINVAL ? MQD_ECORRUPT : rc;
}

void mqd_etcd_kvs_free(mqd_etcd_kv_t *kvs, size_t n)
{
    for (size_t i = 0; kvs != NULL && i < n; i++) {
        free(kvs[i].key);
        free(kvs[i].value);
    }
    free(kvs);
}

static int kv_parse(const json_t *o, mqd_etcd_kv_t *kv)
{
    memset(kv, 0, sizeof *kv);
    if (!json_is_object(o))
        return MQD_ECORRUPT;
    int rc = get_b64(o, "key", &kv->key, &kv->key_len);
    if (rc == 0)
        rc = get_b64(o, "value", &kv->value, &kv->value_len);
    if (rc == 0)
        rc = get_i64(o, "create_revision", &kv->create_revision);
    if (rc == 0)
        rc = get_i64(o, "mod_revision", &kv->mod_revision);
    if (rc == 0)
        rc = get_i64(o, "version", &kv->version);
    if (rc == 0)
        rc = get_i64(o, "lease", &kv->lease);
    return rc;
}

/* An array of kvs; absent means none. */
static int kvs_parse(const json_t *a, mqd_etcd_kv_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (a == NULL)
        return 0;
    if (!json_is_array(a))
        return MQD_ECORRUPT;
    size_t len = json_array_size(a);
    if (len == 0)
        return 0;
    mqd_etcd_kv_t *kvs = calloc(len, sizeof *kvs);
    if (kvs == NULL)
        return MQD_ENOMEM;
    for (size_t i = 0; i < len; i++) {
        int rc = kv_parse(json_array_get(a, i), &kvs[i]);
        if (rc != 0) {
            mqd_etcd_kvs_free(kvs, i + 1);
            return rc;
        }
    }
    *out = kvs;
    *n = len;
    return 0;
}

static int header_rev(const json_t *o, int64_t *rev)
{
    const json_t *h = json_object_get(o, "header");
    *rev = 0;
    if (h == NULL)
        return 0;
    return json_is_object(h) ? get_i64(h, "revision", rev) : MQD_ECORRUPT;
}

/* txn: the first range and delete answers among responses[] */
static int txn_parse(const json_t *o, mqd_etcd_reply_t *r)
{
    r->succeeded = get_bool(o, "succeeded");
    const json_t *resp = json_object_get(o, "responses");
    if (resp == NULL)
        return 0;
    if (!json_is_array(resp))
        return MQD_ECORRUPT;
    bool have_range = false, have_del = false;
    for (size_t i = 0; i < json_array_size(resp); i++) {
        const json_t *w = json_array_get(resp, i), *x;
        if (!json_is_object(w))
            return MQD_ECORRUPT;
        if (!have_range && (x = json_object_get(w, "response_range")) != NULL) {
            have_range = true;
            int rc = json_is_object(x) ? kvs_parse(json_object_get(x, "kvs"), &r->kvs, &r->n_kvs)
                                       : MQD_ECORRUPT;
            if (rc == 0)
                rc = get_i64(x, "count", &r->count);
            if (rc != 0)
                return rc;
        }
        if (!have_del && (x = json_object_get(w, "response_delete_range")) != NULL) {
            have_del = true;
            int rc = json_is_object(x) ? get_i64(x, "deleted", &r->deleted) : MQD_ECORRUPT;
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

static int body_parse(mqd_etcd_kind_t kind, const json_t *o, mqd_etcd_reply_t *r)
{
    /* keepalive is a streaming call: the gateway wraps its answer in "result" */
    const json_t *res = json_object_get(o, "result");
    if (kind == MQD_ETCD_K_KEEPALIVE && json_is_object(res))
        o = res;
    int rc = header_rev(o, &r->revision);
    if (rc != 0)
        return rc;
    switch (kind) {
    case MQD_ETCD_K_RANGE:
        rc = kvs_parse(json_object_get(o, "kvs"), &r->kvs, &r->n_kvs);
        return rc ? rc : get_i64(o, "count", &r->count);
    case MQD_ETCD_K_DELETE: return get_i64(o, "deleted", &r->deleted);
    case MQD_ETCD_K_TXN: return txn_parse(o, r);
    case MQD_ETCD_K_GRANT:
    case MQD_ETCD_K_KEEPALIVE:
        r->has_ttl = json_object_get(o, "TTL") != NULL;
        rc = get_i64(o, "ID", &r->lease_id);
        if (rc == 0)
            rc = get_i64(o, "TTL", &r->ttl);
        if (rc == 0 && r->ttl <= 0) /* "-1" or 0: the lease is gone */
            r->has_ttl = false;
        return rc;
    case MQD_ETCD_K_PUT:
    case MQD_ETCD_K_REVOKE: return 0;
    }
    return 0;
}

static int error_parse(const json_t *o, mqd_etcd_reply_t *r)
{
    const json_t *m = json_object_get(o, "message");
    if (!json_is_string(m))
        m = json_object_get(o, "error");
    if (json_is_string(m) && (r->error = strdup(json_string_value(m))) == NULL)
        return MQD_ENOMEM;
    int64_t code;
    if (get_i64(o, "code", &code) == 0 && code >= 0 && code < 100)
        r->grpc_code = (int)code;
    return MQD_EINVAL;
}

int mqd_etcd_reply_parse(mqd_etcd_kind_t kind, int http_status, const char *body, size_t n,
                         mqd_etcd_reply_t *out)
{
    memset(out, 0, sizeof *out);
    out->http_status = http_status;
    json_error_t jerr;
    json_t *o = json_loadb(body, n, JSON_REJECT_DUPLICATES, &jerr);
    int rc;
    if (!json_is_object(o))
        rc = MQD_ECORRUPT;
    else if (http_status != 200 || json_object_get(o, "error") != NULL)
        rc = error_parse(o, out);
    else
        rc = body_parse(kind, o, out);
    json_decref(o);
    if (rc == MQD_ECORRUPT || rc == MQD_ENOMEM) { /* nothing half-read is handed on */
        mqd_etcd_reply_clear(out);
        out->http_status = http_status;
    }
    out->rc = rc;
    return rc;
}

void mqd_etcd_reply_clear(mqd_etcd_reply_t *r)
{
    mqd_etcd_kvs_free(r->kvs, r->n_kvs);
    free(r->error);
    memset(r, 0, sizeof *r);
}

static int events_parse(const json_t *a, mqd_etcd_watch_msg_t *m)
{
    if (a == NULL)
        return 0;
    size_t len = json_array_size(a);
    if (!json_is_array(a))
        return MQD_ECORRUPT;
    if (len == 0)
        return 0;
    m->kvs = calloc(len, sizeof *m->kvs);
    m->types = calloc(len, sizeof *m->types);
    if (m->kvs == NULL || m->types == NULL)
        return MQD_ENOMEM;
    for (size_t i = 0; i < len; i++) {
        const json_t *ev = json_array_get(a, i);
        if (!json_is_object(ev))
            return MQD_ECORRUPT;
        const json_t *t = json_object_get(ev, "type"); /* PUT is 0: left out */
        if (t != NULL && !json_is_string(t))
            return MQD_ECORRUPT;
        const char *ts = t ? json_string_value(t) : "PUT";
        if (strcmp(ts, "PUT") != 0 && strcmp(ts, "DELETE") != 0)
            return MQD_ECORRUPT;
        m->types[i] = ts[0] == 'P' ? MQD_ETCD_EV_PUT : MQD_ETCD_EV_DELETE;
        m->n_events = i + 1; /* kvs[i] is freed by clear even when it fails half-way */
        int rc = kv_parse(json_object_get(ev, "kv"), &m->kvs[i]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int watch_result(const json_t *o, mqd_etcd_watch_msg_t *m)
{
    int rc = header_rev(o, &m->revision);
    if (rc == 0)
        rc = get_i64(o, "watch_id", &m->watch_id);
    if (rc == 0)
        rc = get_i64(o, "compact_revision", &m->compact_revision);
    if (rc != 0)
        return rc;
    m->created = get_bool(o, "created");
    m->canceled = get_bool(o, "canceled");
    const json_t *why = json_object_get(o, "cancel_reason");
    if (json_is_string(why) && json_string_length(why) > 0 &&
        (m->error = strdup(json_string_value(why))) == NULL)
        return MQD_ENOMEM;
    return events_parse(json_object_get(o, "events"), m);
}

int mqd_etcd_watch_parse(const char *line, size_t n, mqd_etcd_watch_msg_t *out)
{
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *o = json_loadb(line, n, JSON_REJECT_DUPLICATES, &jerr);
    const json_t *res = json_object_get(o, "result"), *err = json_object_get(o, "error");
    int rc = MQD_ECORRUPT;
    if (json_is_object(res)) {
        rc = watch_result(res, out);
    } else if (err != NULL) { /* the stream failed: {"error":{"grpc_code":..,"message":..}} */
        const json_t *msg = json_is_object(err) ? json_object_get(err, "message") : err;
        out->canceled = true;
        out->error = strdup(json_is_string(msg) ? json_string_value(msg) : "watch error");
        rc = out->error ? 0 : MQD_ENOMEM;
    }
    json_decref(o);
    if (rc != 0)
        mqd_etcd_watch_msg_clear(out);
    return rc;
}

void mqd_etcd_watch_msg_clear(mqd_etcd_watch_msg_t *m)
{
    mqd_etcd_kvs_free(m->kvs, m->n_events);
    free(m->types);
    free(m->error);
    memset(m, 0, sizeof *m);
}

int mqd_etcd_lines_feed(mqd_etcd_lines_t *l, const char *data, size_t n,
                        int (*cb)(void *arg, const char *line, size_t len), void *arg)
{
    if (l->len + n > MQD_ETCD_LINE_MAX + 2)
        return MQD_ETOOBIG;
    if (n == 0)
        return 0; /* nothing new: every complete line went out already */
    if (l->len + n > l->cap) {
        size_t cap = l->cap ? l->cap : 4096;
        while (cap < l->len + n)
            cap *= 2;
        char *b = realloc(l->buf, cap);
        if (b == NULL)
            return MQD_ENOMEM;
        l->buf = b;
        l->cap = cap;
    }
    memcpy(l->buf + l->len, data, n);
    l->len += n;
    size_t start = 0;
    int rc = 0;
    char *nl;
    while (rc == 0 && (nl = memchr(l->buf + start, '\n', l->len - start)) != NULL) {
        size_t end = (size_t)(nl - l->buf), len = end - start;
        if (len > 0 && l->buf[end - 1] == '\r')
            len--;
        if (len > 0)
            rc = cb(arg, l->buf + start, len);
        start = end + 1;
    }
    memmove(l->buf, l->buf + start, l->len - start);
    l->len -= start;
    if (rc == 0 && l->len > MQD_ETCD_LINE_MAX)
        return MQD_ETOOBIG;
    return rc;
}

void mqd_etcd_lines_free(mqd_etcd_lines_t *l)
{
    free(l->buf);
    memset(l, 0, sizeof *l);
}
