/* The values repl keeps in etcd, as JSON (jansson): partition states, topic registrations
 * and the candidates' log-end reports. What is read back is outside input:
 * another node, an operator or a corrupted etcd wrote it, so every field is checked. */
#include "config.h"
#include "repl/repl.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

bool mqd_repl_pstate_has(const uint32_t *v, uint32_t n, uint32_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == id)
            return true;
    return false;
}

static json_t *id_array(const uint32_t *v, uint32_t n)
{
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

bool mqd_repl_id_valid(const char *s, size_t n)
{
    if (n != MQD_REPL_ID_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

int mqd_repl_id_new(char *out)
{
    uint8_t b[MQD_REPL_ID_LEN / 2];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        return MQD_EIO;
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    return 0;
}

/* An optional identity field: absent leaves out "" (an older writer), anything else must
 * be one. */
static bool get_id(json_t *o, const char *k, char *out)
{
    json_t *v = json_object_get(o, k);
    out[0] = '\0';
    if (!v)
        return true;
    if (!json_is_string(v) || !mqd_repl_id_valid(json_string_value(v), json_string_length(v)))
        return false;
    memcpy(out, json_string_value(v), MQD_REPL_ID_LEN + 1);
    return true;
}

char *mqd_repl_pstate_json(const mqd_repl_pstate_t *ps)
{
    json_t *o = json_pack("{s:I,s:I,s:o,s:o}", "leader", (json_int_t)ps->leader, "epoch",
                          (json_int_t)ps->epoch, "replicas", id_array(ps->replicas, ps->n_replicas),
                          "isr", id_array(ps->isr, ps->n_isr));
    if (o && ps->topic_id[0] &&
        json_object_set_new(o, "topic_id", json_string(ps->topic_id)) != 0) {
        json_decref(o);
        return NULL;
    }
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static bool get_u32(json_t *o, const char *k, bool positive, uint32_t *out)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v))
        return false;
    json_int_t x = json_integer_value(v);
    if (x < (positive ? 1 : 0) || x > UINT32_MAX)
        return false;
    *out = (uint32_t)x;
    return true;
}

/* An array of 1..16 distinct positive node ids. */
static bool get_ids(json_t *o, const char *k, uint32_t *v, uint32_t *n)
{
    json_t *a = json_object_get(o, k);
    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > MQD_REPL_MAX_RF)
        return false;
    *n = 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *e = json_array_get(a, i);
        json_int_t x = json_is_integer(e) ? json_integer_value(e) : 0;
        if (x < 1 || x > UINT32_MAX || mqd_repl_pstate_has(v, *n, (uint32_t)x))
            return false;
        v[(*n)++] = (uint32_t)x;
    }
    return true;
}

int mqd_repl_pstate_parse(const char *json, size_t n, mqd_repl_pstate_t *out)
{
    json_t *o = json_loadb(json, n, JSON_REJECT_DUPLICATES, NULL);
    mqd_repl_pstate_t ps = {0};
    bool ok = json_is_object(o) && get_u32(o, "leader", true, &ps.leader) &&
              get_u32(o, "epoch", false, &ps.epoch) &&
              get_ids(o, "replicas", ps.replicas, &ps.n_replicas) &&
              get_ids(o, "isr", ps.isr, &ps.n_isr) &&
              mqd_repl_pstate_has(ps.replicas, ps.n_replicas, ps.leader) &&
              mqd_repl_pstate_has(ps.isr, ps.n_isr, ps.leader) &&
              get_id(o, "topic_id", ps.topic_id);
    for (uint32_t i = 0; ok && i < ps.n_isr; i++)
        ok = mqd_repl_pstate_has(ps.replicas, ps.n_replicas, ps.isr[i]);
    json_decref(o);
    if (!ok)
        return MQD_ECORRUPT;
    *out = ps;
    return 0;
}

char *mqd_repl_tdesc_json(const mqd_repl_tdesc_t *td)
{
    json_t *cfg = td->config ? json_loads(td->config, 0, NULL) : json_object();
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return NULL;
    }
    json_t *o = json_pack("{s:I,s:I,s:o}", "partitions", (json_int_t)td->partitions,
                          "replication_factor", (json_int_t)td->rf, "config", cfg);
    if (o && ((td->id[0] && json_object_set_new(o, "id", json_string(td->id)) != 0) ||
              (td->home && json_object_set_new(o, "home", json_integer(td->home)) != 0))) {
        json_decref(o);
        return NULL;
    }
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    return s;
}

int mqd_repl_tdesc_parse(const char *json, size_t n, mqd_repl_tdesc_t *out)
{
    json_t *o = json_loadb(json, n, JSON_REJECT_DUPLICATES, NULL);
    mqd_repl_tdesc_t td = {0};
    json_t *cfg = json_object_get(o, "config");
    bool ok = json_is_object(o) && get_u32(o, "partitions", true, &td.partitions) &&
              td.partitions <= 65536 && get_u32(o, "replication_factor", true, &td.rf) &&
              td.rf <= MQD_REPL_MAX_RF && (cfg == NULL || json_is_object(cfg)) &&
              get_id(o, "id", td.id) &&
              (!json_object_get(o, "home") || (get_u32(o, "home", true, &td.home) && td.rf == 1));
    if (ok && cfg && json_object_size(cfg) > 0 &&
        !(td.config = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS)))
        ok = false;
    json_decref(o);
    if (!ok) {
        free(td.config);
        return MQD_ECORRUPT;
    }
    *out = td;
    return 0;
}

void mqd_repl_tdesc_clear(mqd_repl_tdesc_t *td)
{
    free(td->config);
    td->config = NULL;
}

char *mqd_repl_report_json(const mqd_repl_report_t *rep)
{
    json_t *o =
        json_pack("{s:I,s:I}", "epoch", (json_int_t)rep->epoch, "end", (json_int_t)rep->end);
    if (o && rep->leader_rev > 0 &&
        json_object_set_new(o, "leader_rev", json_integer(rep->leader_rev)) != 0) {
        json_decref(o);
        o = NULL;
    }
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    return s;
}

int mqd_repl_report_parse(const char *json, size_t n, mqd_repl_report_t *out)
{
    json_t *o = json_loadb(json, n, JSON_REJECT_DUPLICATES, NULL);
    json_t *end = json_object_get(o, "end"), *lr = json_object_get(o, "leader_rev");
    mqd_repl_report_t rep = {0};
    bool ok = json_is_object(o) && get_u32(o, "epoch", false, &rep.epoch) && json_is_integer(end) &&
              json_integer_value(end) >= 0 &&
              (lr == NULL || (json_is_integer(lr) && json_integer_value(lr) >= 0));
    if (ok) {
        rep.end = (uint64_t)json_integer_value(end);
        rep.leader_rev = lr ? (int64_t)json_integer_value(lr) : 0;
    }
    json_decref(o);
    if (!ok)
        return MQD_ECORRUPT;
    *out = rep;
    return 0;
}
