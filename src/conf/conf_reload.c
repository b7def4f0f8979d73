/* What a SIGHUP reload cannot apply: compares two configs row by row (the table's
 * `reloadable` column says which keys the running broker takes over). */
#include "config.h"
#include "conf/conf_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool str_eq(const char *a, const char *b)
{
    return (a == NULL || b == NULL) ? a == b : strcmp(a, b) == 0;
}

bool mqd_conf_row_equal(const mqd_conf_row_t *r, const void *a, const void *b)
{
    const char *fa = (const char *)a + r->off, *fb = (const char *)b + r->off;
    if (r->type == MQD_CT_STRING)
        return str_eq(*(char *const *)fa, *(char *const *)fb);
    if (r->type == MQD_CT_LIST) {
        size_t na = *(const size_t *)(fa + sizeof(char **));
        size_t nb = *(const size_t *)(fb + sizeof(char **));
        char *const *la = *(char **const *)fa, *const *lb = *(char **const *)fb;
        for (size_t i = 0; na == nb && i < na; i++)
            if (!str_eq(la[i], lb[i]))
                return false;
        return na == nb;
    }
    return memcmp(fa, fb, r->width) == 0;
}

typedef struct names {
    char *buf;
    size_t len, used;
    size_t n;
} names_t;

static void add_name(names_t *nm, const char *prefix, const char *name)
{
    if (nm->len > 0 && nm->used < nm->len) {
        int w = snprintf(nm->buf + nm->used, nm->len - nm->used, "%s%s%s", nm->n ? ", " : "",
                         prefix, name);
        nm->used += w > 0 ? (size_t)w : 0;
        if (nm->used >= nm->len)
            nm->used = nm->len; /* truncated; later names are dropped */
    }
    nm->n++;
}

/* True if the effective settings of topic `name` differ between a and b. */
static bool topic_differs(const mqd_conf_t *a, const mqd_conf_t *b, const char *name)
{
    mqd_topic_conf_t ta, tb;
    mqd_conf_topic(a, name, &ta);
    mqd_conf_topic(b, name, &tb);
    for (size_t i = 0; i < mqd_conf_nrows; i++) {
        const mqd_conf_row_t *r = &mqd_conf_rows[i];
        if ((r->scope == MQD_CS_TOPIC || r->scope == MQD_CS_BOTH) &&
            !mqd_conf_row_equal(r, &ta, &tb))
            return true;
    }
    return false;
}

static void topics_of(const mqd_conf_t *a, const mqd_conf_t *b, bool skip_common, names_t *nm)
{
    for (size_t i = 0; i < a->n_topics; i++) {
        const char *name = a->topics[i].name;
        bool in_b = false;
        for (size_t j = 0; j < b->n_topics && !in_b; j++)
            in_b = strcmp(b->topics[j].name, name) == 0;
        if ((!skip_common || !in_b) && topic_differs(a, b, name))
            add_name(nm, "topic.", name);
    }
}

/* [sas_key NAME] sections of a that b lacks or holds with other fields (read at start). */
static void sas_keys_of(const mqd_conf_t *a, const mqd_conf_t *b, bool skip_common, names_t *nm)
{
    for (size_t i = 0; i < a->n_sas_keys; i++) {
        const mqd_sas_key_conf_t *ka = &a->sas_keys[i], *kb = mqd_conf_sas_key(b, ka->name);
        bool differs = kb == NULL;
        for (size_t j = 0; kb != NULL && j < mqd_conf_nrows; j++)
            differs = differs || (mqd_conf_rows[j].scope == MQD_CS_SASKEY &&
                                  !mqd_conf_row_equal(&mqd_conf_rows[j], ka, kb));
        if ((!skip_common || kb == NULL) && differs)
            add_name(nm, "sas_key.", ka->name);
    }
}

size_t mqd_conf_restart_needed(const mqd_conf_t *old, const mqd_conf_t *nw, char *buf, size_t len)
{
    names_t nm = {buf, len, 0, 0};
    if (len > 0)
        buf[0] = '\0';
    for (size_t i = 0; i < mqd_conf_nrows; i++) {
        const mqd_conf_row_t *r = &mqd_conf_rows[i];
        if (r->reloadable)
            continue;
        if (r->scope == MQD_CS_GLOBAL && !mqd_conf_row_equal(r, old, nw))
            add_name(&nm, "", r->name);
        else if (r->scope == MQD_CS_BOTH &&
                 !mqd_conf_row_equal(r, &old->topic_defaults, &nw->topic_defaults))
            add_name(&nm, "", r->name);
    }
    /* sections in the old config (changed or removed), then sections only in the new */
    topics_of(old, nw, false, &nm);
    topics_of(nw, old, true, &nm);
    sas_keys_of(old, nw, false, &nm);
    sas_keys_of(nw, old, true, &nm);
    return nm.n;
}
