/* The effective configuration with where each value came from (mqctl config show):
 * the file and line, --set (or the option that stands for one), or the built-in
 * default. The parser notes an origin for every key it applies; the last note of a key
 * is the one that counts, as the last line does. */
#include "config.h"
#include "conf/conf_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mqd_conf_origin_note(mqd_conf_t *c, const char *topic, const char *key, const char *source)
{
    if (c == NULL) /* a management setting checked against a scratch section */
        return 0;
    mqd_conf_origin_t *grown = realloc(c->origins, (c->n_origins + 1) * sizeof *grown);
    if (grown == NULL)
        return MQD_ENOMEM;
    c->origins = grown;
    mqd_conf_origin_t *o = &grown[c->n_origins];
    o->topic = topic ? strdup(topic) : NULL;
    o->key = strdup(key);
    o->source = strdup(source);
    if (!o->key || !o->source || (topic && !o->topic)) {
        free(o->topic);
        free(o->key);
        free(o->source);
        return MQD_ENOMEM;
    }
    c->n_origins++;
    return 0;
}

void mqd_conf_origins_free(mqd_conf_t *c)
{
    for (size_t i = 0; i < c->n_origins; i++) {
        free(c->origins[i].topic);
        free(c->origins[i].key);
        free(c->origins[i].source);
    }
    free(c->origins);
    c->origins = NULL;
    c->n_origins = 0;
}

static const char *origin_of(const mqd_conf_t *c, const char *topic, const char *key)
{
    for (size_t i = c->n_origins; i-- > 0;) {
        const mqd_conf_origin_t *o = &c->origins[i];
        if (strcmp(o->key, key) == 0 &&
            (topic ? o->topic && strcmp(o->topic, topic) == 0 : o->topic == NULL))
            return o->source;
    }
    return "default";
}

static uint64_t load_uint(const mqd_conf_row_t *r, const void *base)
{
    const char *f = (const char *)base + r->off;
    if (r->width == sizeof(uint64_t)) {
        uint64_t v;
        memcpy(&v, f, sizeof v);
        return v;
    }
    if (r->width == sizeof(uint32_t)) {
        uint32_t v;
        memcpy(&v, f, sizeof v);
        return v;
    }
    bool b;
    memcpy(&b, f, sizeof b);
    return b;
}

/* Row r's value in the struct at base, as the file would spell it. */
static void value_text(const mqd_conf_row_t *r, const void *base, char *buf, size_t len)
{
    const char *f = (const char *)base + r->off;
    uint64_t v = r->type == MQD_CT_STRING || r->type == MQD_CT_LIST ? 0 : load_uint(r, base);
    size_t n = 0, used = 0;
    buf[0] = '\0';
    switch (r->type) {
    case MQD_CT_BOOL: snprintf(buf, len, "%s", v ? "on" : "off"); break;
    case MQD_CT_UINT: snprintf(buf, len, "%" PRIu64, v); break;
    case MQD_CT_SIZE:
    case MQD_CT_DURATION: mqd_conf_row_fmt(r, v, buf, len); break;
    case MQD_CT_ENUM:
        while (r->names[n] != NULL)
            n++;
        snprintf(buf, len, "%s", v < n ? r->names[v] : "?");
        break;
    case MQD_CT_STRING: snprintf(buf, len, "%s", *(char *const *)f ? *(char *const *)f : ""); break;
    case MQD_CT_LIST:
        n = *(const size_t *)(f + sizeof(char **));
        for (size_t i = 0; i < n && used < len; i++) {
            int w =
                snprintf(buf + used, len - used, "%s%s", i ? ", " : "", (*(char **const *)f)[i]);
            used += w > 0 ? (size_t)w : 0;
        }
        break;
    }
}

int mqd_conf_show(const mqd_conf_t *c, mqd_conf_show_cb cb, void *arg)
{
    char val[1024];
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < mqd_conf_nrows; i++) {
        const mqd_conf_row_t *r = &mqd_conf_rows[i];
        if (r->scope != MQD_CS_GLOBAL && r->scope != MQD_CS_BOTH)
            continue; /* users and SAS keys hold secrets; sections come below */
        if (strstr(r->name, "password") != NULL)
            continue; /* replication_password: a secret too, left out like the users */
        value_text(r, r->scope == MQD_CS_GLOBAL ? (const void *)c : &c->topic_defaults, val,
                   sizeof val);
        rc = cb(NULL, r->name, val, origin_of(c, NULL, r->name), arg);
    }
    for (size_t t = 0; rc == 0 && t < c->n_topics; t++) {
        const mqd_topic_conf_t *sec = &c->topics[t];
        for (size_t i = 0; rc == 0 && i < mqd_conf_nrows; i++) {
            const mqd_conf_row_t *r = &mqd_conf_rows[i];
            if (!mqd_conf_bits_get(sec->set, i))
                continue;
            value_text(r, sec, val, sizeof val);
            rc = cb(sec->name, r->name, val, origin_of(c, sec->name, r->name), arg);
        }
    }
    return rc;
}
