/* com.mqd:broker HISTORY (issue 38 point 2): one series of metrics/history.c for the web
 * console's charts. Properties: `series` ("broker", "topic/T" or "group/T/G"; default
 * broker), `resolution` ("5s": the last hour, default; "1m": the last day). Reply:
 * {series, interval_ms, fields: [...], points: [[t_ms, v...], ...]}, counters as rates
 * per second. The broker's series needs monitor on $management, a topic's or a group's
 * monitor on the topic. */
#include "config.h"
#include "metrics/metrics.h"
#include "mgmt/mgmt_int.h"

#include <stdio.h>
#include <string.h>

static void put_point(int64_t t_ms, const double *v, size_t k, const char *const *fields, void *arg)
{
    pn_data_t *d = arg;
    if (!v) { /* the field names, then the points */
        mqd_mgmt_kv_enter(d, "fields", true);
        for (size_t i = 0; i < k; i++)
            pn_data_put_string(d, pn_bytes(strlen(fields[i]), fields[i]));
        pn_data_exit(d);
        mqd_mgmt_kv_enter(d, "points", true);
        return;
    }
    pn_data_put_list(d);
    pn_data_enter(d);
    pn_data_put_long(d, t_ms);
    for (size_t i = 0; i < k; i++)
        pn_data_put_double(d, v[i]);
    pn_data_exit(d);
}

int mqd_mgmt_history(mqd_mgmt_req_t *r)
{
    const char *series = mqd_mgmt_arg_str(r, "series"), *res = mqd_mgmt_arg_str(r, "resolution");
    char topic[MQD_NAME_MAX + 1];
    series = series ? series : "broker";
    const char *t = mqd_mgmt_series_topic(series, topic, sizeof topic);
    if (!t)
        return mqd_mgmt_fail(r, 400, "series is broker, topic/T or group/T/G, not '%.100s'", series);
    if (res && strcmp(res, "5s") != 0 && strcmp(res, "1m") != 0)
        return mqd_mgmt_fail(r, 400, "resolution is 5s or 1m");
    if (!mqd_mgmt_may_read(r, *t ? t : "$management"))
        return mqd_mgmt_fail(r, 401, "not allowed to read the history of '%.200s': needs the "
                                     "monitor right on %s", series, *t ? "the topic" : "$management");
    mqd_history_t *h = mqd_metrics_history(r->s);
    bool coarse = res && strcmp(res, "1m") == 0;
    pn_data_t *d = r->out;
    pn_data_put_map(d);
    pn_data_enter(d);
    mqd_mgmt_kv_str(d, "series", series);
    mqd_mgmt_kv_long(d, "interval_ms", mqd_history_interval_ms(coarse));
    int rc = h ? mqd_history_read(h, series, coarse, put_point, d) : MQD_ENOENT;
    if (rc == 0)
        pn_data_exit(d); /* points */
    pn_data_exit(d);
    if (rc != 0)
        return mqd_mgmt_fail(r, 404, "no history of '%.200s' (yet)", series);
    return 200;
}
