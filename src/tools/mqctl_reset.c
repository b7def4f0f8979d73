/* mqctl group reset's options (issue 38 point 5), Kafka's kafka-consumer-groups
 * --reset-offsets in mqd's words: --to, --to-datetime ISO, --by-duration DUR, --shift-by N,
 * --partitions LIST, --dry-run, --all-groups, --create. They become the properties of
 * one com.mqd:consumergroup RESET (src/mgmt/mgmt_reset.c). */
#include "config.h"
#include "mqd.h"
#include "tools/mqctl.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* YYYY-MM-DDTHH:MM[:SS[.fff]][Z|+HH:MM|-HH:MM|+HHMM] (a space for the T; no zone: UTC)
 * into ms since the epoch; -1 when it is not one. */
int mqctl_parse_datetime(const char *s, int64_t *ms)
{
    struct tm tm = {0};
    int n = 0, sec = 0, frac_ms = 0;
    char sep;
    if (sscanf(s, "%4d-%2d-%2d%c%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &sep,
               &tm.tm_hour, &tm.tm_min, &n) != 6 || (sep != 'T' && sep != 't' && sep != ' '))
        return -1;
    const char *p = s + n;
    if (*p == ':') {
        if (!isdigit((unsigned char)p[1]) || !isdigit((unsigned char)p[2]))
            return -1;
        sec = (p[1] - '0') * 10 + (p[2] - '0');
        p += 3;
        if (*p == '.') {
            int digits = 0;
            for (p++; isdigit((unsigned char)*p); p++, digits++)
                if (digits < 3)
                    frac_ms = frac_ms * 10 + (*p - '0');
            if (!digits)
                return -1;
            for (; digits < 3; digits++)
                frac_ms *= 10;
        }
    }
    long off_s = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int hh, mm, k = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &hh, &mm, &k) != 2 && sscanf(p + 1, "%2d%2d%n", &hh, &mm, &k) != 2)
            return -1;
        off_s = (hh * 3600L + mm * 60L) * (*p == '-' ? -1 : 1);
        p += 1 + k;
    }
    if (*p || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
        tm.tm_hour > 23 || tm.tm_min > 59 || sec > 60)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_sec = sec;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -1;
    *ms = ((int64_t)t - off_s) * 1000 + frac_ms;
    return 0;
}

/* ISO 8601 PnDTnHnMnS (Kafka's --by-duration: PT1H, P1DT12H) or mqd's units (90s, 15m,
 * 2h, 7d, 1h30m, 500ms) into ms; -1 when it is neither. */
int mqctl_parse_duration(const char *s, int64_t *ms)
{
    int64_t total = 0;
    bool iso = *s == 'P' || *s == 'p', in_time = false, any = false;
    const char *p = s + iso;
    while (*p) {
        if (iso && (*p == 'T' || *p == 't')) {
            in_time = true;
            p++;
            continue;
        }
        char *end;
        double v = strtod(p, &end);
        if (end == p || v < 0)
            return -1;
        p = end;
        int64_t unit;
        if (!iso && strncmp(p, "ms", 2) == 0) {
            unit = 1;
            p++;
        } else {
            switch (tolower((unsigned char)*p)) {
            case 'w': unit = 7 * 86400000LL; break;
            case 'd': unit = 86400000LL; break;
            case 'h': unit = 3600000LL; break;
            case 'm': unit = (iso && !in_time) ? -1 : 60000LL; break; /* P1M: months, no */
            case 's': unit = 1000; break;
            default: return -1;
            }
        }
        if (unit < 0 || (iso && in_time != (unit < 86400000LL)))
            return -1;
        total += (int64_t)(v * (double)unit);
        any = true;
        p++;
    }
    if (!any)
        return -1;
    *ms = total;
    return 0;
}

static const char *value_of(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc)
        mqctl_die_usage("%s needs a value", argv[*i]);
    return argv[++*i];
}

/* Sets props' to/shift/partitions/dry_run/all_groups/create from the options; *all for
 * --all-groups. */
void mqctl_build_reset(json_t *props, int argc, char **argv, bool *all)
{
    int targets = 0;
    bool create = false;
    *all = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int64_t ms;
        char *end;
        if (strcmp(a, "--to") == 0) {
            json_object_set_new(props, "to", json_string(value_of(argc, argv, &i)));
            targets++;
        } else if (strcmp(a, "--to-datetime") == 0) {
            const char *v = value_of(argc, argv, &i);
            if (mqctl_parse_datetime(v, &ms) != 0 || ms < 0)
                mqctl_die_usage("--to-datetime needs an ISO 8601 time such as "
                                "2026-12-07T13:00:00Z, not '%s'", v);
            json_object_set_new(props, "to", json_string("time"));
            json_object_set_new(props, "value", json_integer(ms));
            targets++;
        } else if (strcmp(a, "--by-duration") == 0) {
            const char *v = value_of(argc, argv, &i);
            if (mqctl_parse_duration(v, &ms) != 0)
                mqctl_die_usage("--by-duration needs a duration such as PT1H, P1DT12H, 90m or 2d, "
                                "not '%s'", v);
            int64_t at = (int64_t)time(NULL) * 1000 - ms;
            json_object_set_new(props, "to", json_string("time"));
            json_object_set_new(props, "value", json_integer(at < 0 ? 0 : at));
            targets++;
        } else if (strcmp(a, "--shift-by") == 0) {
            const char *v = value_of(argc, argv, &i);
            long long n = strtoll(v, &end, 10);
            if (!*v || *end)
                mqctl_die_usage("--shift-by needs a number of offsets (negative: back), not '%s'", v);
            json_object_set_new(props, "shift", json_integer(n));
            targets++;
        } else if (strcmp(a, "--partitions") == 0) {
            const char *v = value_of(argc, argv, &i);
            if (!*v || strspn(v, "0123456789,") != strlen(v) || strstr(v, ",,") || *v == ',' ||
                v[strlen(v) - 1] == ',')
                mqctl_die_usage("--partitions needs partition numbers such as 0,2,5, not '%s'", v);
            json_object_set_new(props, "partitions", json_string(v));
        } else if (strcmp(a, "--dry-run") == 0) {
            json_object_set_new(props, "dry_run", json_true());
        } else if (strcmp(a, "--all-groups") == 0) {
            *all = true;
            json_object_set_new(props, "all_groups", json_true());
        } else if (strcmp(a, "--create") == 0) {
            create = true;
        } else {
            mqctl_die_usage("unexpected argument '%s'", a);
        }
    }
    if (targets != 1)
        mqctl_die_usage("group reset needs one of --to earliest|latest|OFFSET|@TIME_MS, "
                        "--to-datetime ISO, --by-duration DUR, --shift-by N");
    json_object_set_new(props, "create", json_boolean(create));
}
