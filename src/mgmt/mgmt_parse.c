/* Parsers of management request arguments that need nothing of the broker, so that
 * tests/fuzz/fuzz_mgmt.c can feed them on their own: a RESET's `partitions` list
 * (mgmt_reset.c) and a HISTORY `series` name (mgmt_history.c). */
#include "config.h"
#include "mgmt/mgmt_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mqd_mgmt_parse_partitions(const char *list, uint32_t n, bool *sel, long long *bad)
{
    for (const char *p = list;;) {
        char *end;
        if (*p < '0' || *p > '9') /* no sign, no space: strtoll would take them */
            return MQD_EINVAL;
        long long i = strtoll(p, &end, 10);
        if (end == p || i < 0 || (*end && *end != ','))
            return MQD_EINVAL;
        if (i >= n) {
            *bad = i;
            return MQD_ERANGE;
        }
        sel[i] = true;
        if (!*end)
            return 0;
        p = end + 1;
    }
}

const char *mqd_mgmt_series_topic(const char *series, char *buf, size_t len)
{
    if (strcmp(series, "broker") == 0)
        return "";
    if (strncmp(series, "topic/", 6) == 0 && series[6])
        return snprintf(buf, len, "%s", series + 6) < (int)len ? buf : NULL;
    const char *slash = strrchr(series, '/');
    if (strncmp(series, "group/", 6) != 0 || !slash || slash <= series + 6 || !slash[1])
        return NULL;
    int n = snprintf(buf, len, "%.*s", (int)(slash - series - 6), series + 6);
    return n < (int)len ? buf : NULL;
}

