/* amqp091/match: how a binding matches a publish, without broker state (so the fuzz
 * target runs it on decoded methods): topic patterns, and headers bindings' arguments
 * (x-match all / any / all-with-x / any-with-x) as a canonical JSON object kept in
 * meta.db and compared with a message's headers. */
#include "config.h"
#include "amqp091/amqp091_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { XM_ALL, XM_ANY, XM_ALL_X, XM_ANY_X };

void a091_cstr(amqp_bytes_t b, char out[256])
{
    size_t n = b.len < 255 ? b.len : 255;
    memcpy(out, b.bytes, n);
    out[n] = 0;
}

void a091_headers_clear(a091_hdr_t *b)
{
    json_decref(b->match);
    free(b->args);
    *b = (a091_hdr_t){0};
}

/* ---- headers: a field value as a canonical string (RabbitMQ compares values, not the
 * width of an integer) ---- */

static bool canon(const amqp_field_value_t *v, char *out, size_t cap)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_BOOLEAN: snprintf(out, cap, "b:%d", v->value.boolean ? 1 : 0); break;
    case AMQP_FIELD_KIND_I8: snprintf(out, cap, "i:%d", v->value.i8); break;
    case AMQP_FIELD_KIND_U8: snprintf(out, cap, "i:%u", v->value.u8); break;
    case AMQP_FIELD_KIND_I16: snprintf(out, cap, "i:%d", v->value.i16); break;
    case AMQP_FIELD_KIND_U16: snprintf(out, cap, "i:%u", v->value.u16); break;
    case AMQP_FIELD_KIND_I32: snprintf(out, cap, "i:%d", v->value.i32); break;
    case AMQP_FIELD_KIND_U32: snprintf(out, cap, "i:%u", v->value.u32); break;
    case AMQP_FIELD_KIND_I64: snprintf(out, cap, "i:%lld", (long long)v->value.i64); break;
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP:
        snprintf(out, cap, "i:%llu", (unsigned long long)v->value.u64);
        break;
    case AMQP_FIELD_KIND_F32: snprintf(out, cap, "f:%.9g", (double)v->value.f32); break;
    case AMQP_FIELD_KIND_F64: snprintf(out, cap, "f:%.17g", v->value.f64); break;
    case AMQP_FIELD_KIND_VOID: snprintf(out, cap, "v"); break;
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES: {
        size_t n = v->value.bytes.len;
        if (n + 3 > cap || memchr(v->value.bytes.bytes, 0, n))
            return false;
        memcpy(out, "s:", 2);
        memcpy(out + 2, v->value.bytes.bytes, n);
        out[n + 2] = 0;
        break;
    }
    default: return false; /* tables, arrays, decimals: not compared */
    }
    return true;
}

static const char *const xmatch_names[] = {"all", "any", "all-with-x", "any-with-x"};

int a091_headers_parse(const amqp_table_t *args, a091_hdr_t *b, const char **why)
{
    json_t *all = json_object(), *match = json_object();
    char val[512], key[256];
    b->xmatch = XM_ALL;
    for (int i = 0; args && i < args->num_entries; i++) {
        const amqp_table_entry_t *e = &args->entries[i];
        a091_cstr(e->key, key);
        if (strcmp(key, "x-match") == 0) {
            int x = -1;
            if (e->value.kind == AMQP_FIELD_KIND_UTF8 || e->value.kind == AMQP_FIELD_KIND_BYTES) {
                a091_cstr(e->value.value.bytes, val);
                for (int k = 0; k < 4; k++)
                    if (strcmp(val, xmatch_names[k]) == 0)
                        x = k;
            }
            if (x < 0) {
                *why = "x-match must be all, any, all-with-x or any-with-x";
                goto bad;
            }
            b->xmatch = x;
            continue;
        }
        json_t *js = canon(&e->value, val, sizeof val) ? json_string(val) : NULL;
        if (!js) { /* json_string: NULL for a value that is not UTF-8 */
            *why = "a header value of a type mqd does not compare (tables, arrays, decimals)";
            goto bad;
        }
        json_object_set_new(all, key, js);
    }
    const char *k;
    json_t *v;
    json_object_foreach(all, k, v)
    {
        if (strncmp(k, "x-", 2) != 0 || b->xmatch >= XM_ALL_X)
            json_object_set(match, k, v);
    }
    json_object_set_new(all, "x-match", json_string(xmatch_names[b->xmatch]));
    b->args = json_dumps(all, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(all);
    b->match = match;
    return b->args ? 0 : A091_INTERNAL_ERROR;
bad:
    json_decref(all);
    json_decref(match);
    return A091_PRECONDITION_FAILED;
}

int a091_headers_load(const char *args_json, a091_hdr_t *b)
{
    json_t *all = json_loads(args_json, 0, NULL);
    if (!json_is_object(all)) {
        json_decref(all);
        return MQD_EINVAL;
    }
    const char *xm = json_string_value(json_object_get(all, "x-match"));
    b->xmatch = XM_ALL;
    for (int k = 0; xm && k < 4; k++)
        if (strcmp(xm, xmatch_names[k]) == 0)
            b->xmatch = k;
    json_object_del(all, "x-match");
    const char *k;
    json_t *v, *tmp;
    json_object_foreach_safe(all, tmp, k, v)
    {
        if (strncmp(k, "x-", 2) == 0 && b->xmatch < XM_ALL_X)
            json_object_del(all, k);
    }
    b->match = all;
    return (b->args = strdup(args_json)) ? 0 : MQD_ENOMEM;
}

static bool header_has(const amqp_table_t *h, const char *name, const char *want)
{
    char key[256], val[512];
    for (int i = 0; h && i < h->num_entries; i++) {
        a091_cstr(h->entries[i].key, key);
        if (strcmp(key, name) != 0)
            continue;
        if (strcmp(want, "v") == 0)
            return true; /* a void binding value asks only that the header be there */
        return canon(&h->entries[i].value, val, sizeof val) && strcmp(val, want) == 0;
    }
    return false;
}

bool a091_headers_match(const a091_hdr_t *b, const amqp_table_t *h)
{
    bool any = b->xmatch == XM_ANY || b->xmatch == XM_ANY_X;
    const char *k;
    json_t *v;
    json_object_foreach(b->match, k, v)
    {
        bool has = header_has(h, k, json_string_value(v));
        if (any && has)
            return true;
        if (!any && !has)
            return false;
    }
    return !any;
}

/* ---- topic patterns: words between dots, `*` one word, `#` zero or more ---- */

typedef struct word {
    const char *p;
    size_t n;
} word_t;

static size_t split_words(const char *s, word_t *w, size_t max)
{
    size_t n = 0;
    if (!*s)
        return 0;
    for (const char *p = s;; p++) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (n < max)
            w[n++] = (word_t){p, len};
        if (!dot)
            break;
        p = dot;
    }
    return n;
}

static bool word_is(word_t w, const char *s)
{
    return w.n == strlen(s) && memcmp(w.p, s, w.n) == 0;
}

bool a091_topic_match(const char *pattern, const char *key)
{
    word_t pw[256], kw[256];
    size_t np = split_words(pattern, pw, 256), nk = split_words(key, kw, 256);
    bool next[257], cur[257]; /* dp over the key's suffixes for pattern suffix i+1, i */
    for (size_t j = 0; j <= nk; j++)
        next[j] = j == nk;
    for (size_t i = np; i-- > 0;) {
        bool hash = word_is(pw[i], "#"), star = word_is(pw[i], "*");
        for (size_t j = nk + 1; j-- > 0;) {
            if (hash)
                cur[j] = next[j] || (j < nk && cur[j + 1]);
            else
                cur[j] = j < nk && (star || (pw[i].n == kw[j].n &&
                                             memcmp(pw[i].p, kw[j].p, kw[j].n) == 0)) &&
                         next[j + 1];
        }
        memcpy(next, cur, sizeof(bool) * (nk + 1));
    }
    return next[0];
}

