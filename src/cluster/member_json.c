/* cluster: the JSON values of the membership keys (read back from etcd: outside input). */
#include "config.h"
#include "cluster/cluster_int.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

char *mqd_cluster_node_json(const mqd_cluster_node_t *n)
{
    json_t *o = json_pack("{s:I,s:s,s:s,s:I}", "id", (json_int_t)n->id, "address", n->address,
                          "rack", n->rack, "started", (json_int_t)n->started_ms);
    /* only when it has one: older nodes read the key without it (and ignore it) */
    if (o && n->repl_address[0] &&
        json_object_set_new(o, "repl_address", json_string(n->repl_address)) != 0) {
        json_decref(o);
        o = NULL;
    }
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static int id_of(const json_t *o, uint32_t *id)
{
    const json_t *v = json_object_get(o, "id");
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > UINT32_MAX)
        return MQD_ECORRUPT;
    *id = (uint32_t)json_integer_value(v);
    return 0;
}

/* A string field copied into buf (empty when absent, MQD_ECORRUPT when not a string). */
static int str_of(const json_t *o, const char *name, char *buf, size_t len)
{
    const json_t *v = json_object_get(o, name);
    buf[0] = '\0';
    if (v == NULL)
        return 0;
    if (!json_is_string(v) || json_string_length(v) >= len ||
        strlen(json_string_value(v)) != json_string_length(v))
        return MQD_ECORRUPT;
    memcpy(buf, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

int mqd_cluster_node_parse(const char *json, size_t n, mqd_cluster_node_t *out)
{
    json_error_t err;
    json_t *o = json_loadb(json, n, JSON_REJECT_DUPLICATES, &err);
    mqd_cluster_node_t nd;
    memset(&nd, 0, sizeof nd);
    int rc = json_is_object(o) ? id_of(o, &nd.id) : MQD_ECORRUPT;
    if (rc == 0)
        rc = str_of(o, "address", nd.address, sizeof nd.address);
    if (rc == 0)
        rc = str_of(o, "rack", nd.rack, sizeof nd.rack);
    if (rc == 0)
        rc = str_of(o, "repl_address", nd.repl_address, sizeof nd.repl_address);
    const json_t *st = json_object_get(o, "started");
    if (rc == 0 && st != NULL) {
        if (json_is_integer(st))
            nd.started_ms = (int64_t)json_integer_value(st);
        else
            rc = MQD_ECORRUPT;
    }
    json_decref(o);
    if (rc == 0) {
        nd.alive = true;
        *out = nd;
    }
    return rc;
}

char *mqd_cluster_ctl_json(uint32_t id)
{
    json_t *o = json_pack("{s:I}", "id", (json_int_t)id);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

int mqd_cluster_ctl_parse(const char *json, size_t n, uint32_t *id)
{
    json_error_t err;
    json_t *o = json_loadb(json, n, JSON_REJECT_DUPLICATES, &err);
    uint32_t v = 0;
    int rc = json_is_object(o) ? id_of(o, &v) : MQD_ECORRUPT;
    json_decref(o);
    if (rc == 0)
        *id = v;
    return rc;
}
