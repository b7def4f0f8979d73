/* The effective configuration (com.mqd:config READ; mqctl config show): every global key
 * and every [topic NAME] key with its value and where it came from, then the topic
 * settings made through management (which win over the file's). */
#include "config.h"
#include "mgmt/mgmt_int.h"
#include "mgmt/mgmt_json.h"
#include "core/core.h"

#include <stdio.h>
#include <string.h>

static void put_setting(pn_data_t *d, const char *topic, const char *key, const char *value,
                        const char *source)
{
    pn_data_put_map(d);
    pn_data_enter(d);
    mqd_mgmt_kv_str(d, "topic", topic);
    mqd_mgmt_kv_str(d, "key", key);
    mqd_mgmt_kv_str(d, "value", value);
    mqd_mgmt_kv_str(d, "source", source);
    pn_data_exit(d);
}

static int put_conf_row(const char *topic, const char *key, const char *value, const char *source,
                        void *arg)
{
    put_setting(arg, topic, key, value, source);
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(mqd_topic_name(*(mqd_topic_t *const *)a),
                  mqd_topic_name(*(mqd_topic_t *const *)b));
}

/* Management overrides, topic by topic in name order (a stable listing). */
static int put_overrides(mqd_mgmt_req_t *r)
{
    mqd_server_t *s = r->s;
    size_t n_topics = mqd_srv_n_topics(s);
    mqd_topic_t **v = calloc(n_topics + 1, sizeof *v);
    if (!v)
        return MQD_ENOMEM;
    size_t n = 0;
    for (mqd_topic_t *t = mqd_srv_topic_first(s); t && n < n_topics; t = mqd_srv_topic_next(t))
        if (!mqd_topic_temporary(t) && mqd_topic_overrides(t))
            v[n++] = t;
    qsort(v, n, sizeof *v, cmp_name);
    for (size_t i = 0; i < n; i++) {
        const char *k;
        json_t *val;
        json_object_foreach(mqd_topic_overrides(v[i]), k, val)
        {
            char text[256];
            if (json_is_string(val))
                snprintf(text, sizeof text, "%s", json_string_value(val));
            else if (json_is_boolean(val))
                snprintf(text, sizeof text, "%s", json_is_true(val) ? "on" : "off");
            else
                snprintf(text, sizeof text, "%lld", (long long)json_integer_value(val));
            put_setting(r->out, mqd_topic_name(v[i]), k, text, "management");
        }
    }
    free(v);
    return 0;
}

static int config_read(mqd_mgmt_req_t *r)
{
    pn_data_t *d = r->out;
    pn_data_put_map(d);
    pn_data_enter(d);
    mqd_mgmt_kv_str(d, "file", mqd_srv_conf_path(r->s));
    mqd_mgmt_kv_enter(d, "settings", true);
    mqd_conf_show(mqd_srv_conf(r->s), put_conf_row, d);
    int rc = put_overrides(r);
    pn_data_exit(d);
    pn_data_exit(d);
    if (rc != 0)
        return mqd_mgmt_fail(r, 500, "out of memory");
    return 200;
}

const mqd_mgmt_op_t mqd_mgmt_config_ops[] = {
    {MQD_MGMT_T_CONFIG, "READ", config_read, MQD_MGMT_NODE_READ},
    {MQD_MGMT_T_BROKER, "HISTORY", mqd_mgmt_history, MQD_MGMT_SELF}, /* mgmt_history.c */
};
const size_t mqd_mgmt_n_config_ops = MQD_ARRAY_LEN(mqd_mgmt_config_ops);
