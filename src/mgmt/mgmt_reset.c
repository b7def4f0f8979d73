/* com.mqd:consumergroup RESET: moves a group's committed offsets (issue 38 point 5).
 *   to        earliest | latest | offset | time (with `value`), or "N" / "@MS"
 *   shift     N (may be negative): from each partition's committed offset, instead of `to`
 *   partitions "0,2,5": only these (default every partition)
 *   dry_run   true: answer what would change, change nothing
 *   create    false: a group that does not exist is 404 (mqctl sends this; the default,
 *             true, makes it, as before)
 *   all_groups true: every group of the topic but the queue's $shared (no group name)
 * The reply, per group: {topic, group, members, dry_run, lag, partitions: [{partition,
 * previous (absent for a new group), committed, log_start, log_end, lag, changed}]}; a
 * list of those with all_groups. */
#include "config.h"
#include "group/group.h"
#include "mgmt/mgmt_int.h"
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct how {
    mqd_reset_t how;
    int64_t value;
    bool dry_run, create;
    bool *sel; /* per partition, owned */
} how_t;

static bool arg_bool(mqd_mgmt_req_t *r, const char *key, bool dflt)
{
    json_t *v = json_object_get(r->props, key);
    if (!v && r->body)
        v = json_object_get(r->body, key);
    if (json_is_boolean(v))
        return json_is_true(v);
    if (json_is_string(v))
        return strcmp(json_string_value(v), "true") == 0;
    return dflt;
}

/* to = earliest | latest | offset | time (value), or "N" / "@MS"; or shift = N */
static int reset_how(mqd_mgmt_req_t *r, how_t *h)
{
    const char *to = mqd_mgmt_arg_str(r, "to");
    bool has_value = mqd_mgmt_arg_int(r, "value", &h->value);
    char *end;
    if (mqd_mgmt_arg_int(r, "shift", &h->value)) {
        if (to)
            return mqd_mgmt_fail(r, 400, "give 'to' or 'shift', not both");
        h->how = MQD_RESET_SHIFT;
    } else if (!to) {
        return mqd_mgmt_fail(r, 400, "'to' (earliest|latest|offset|time) or 'shift' is required");
    } else if (strcmp(to, "earliest") == 0) {
        h->how = MQD_RESET_EARLIEST;
    } else if (strcmp(to, "latest") == 0) {
        h->how = MQD_RESET_LATEST;
    } else if (strcmp(to, "offset") == 0 || strcmp(to, "time") == 0) {
        if (!has_value || h->value < 0)
            return mqd_mgmt_fail(r, 400, "reset to %s needs a non-negative 'value'", to);
        h->how = to[0] == 'o' ? MQD_RESET_OFFSET : MQD_RESET_TIME;
    } else if (to[0] == '@' && to[1] && (h->value = strtoll(to + 1, &end, 10)) >= 0 && !*end) {
        h->how = MQD_RESET_TIME;
    } else if (to[0] && (h->value = strtoll(to, &end, 10)) >= 0 && !*end) {
        h->how = MQD_RESET_OFFSET;
    } else {
        return mqd_mgmt_fail(r, 400, "bad reset target '%s'", to);
    }
    return 0;
}

/* `partitions`: "0,2,5" (or one integer); absent = all */
static int reset_parts(mqd_mgmt_req_t *r, mqd_topic_t *t, how_t *h)
{
    uint32_t n = mqd_topic_nparts(t);
    int64_t one;
    const char *list = mqd_mgmt_arg_str(r, "partitions");
    bool single = !list && mqd_mgmt_arg_int(r, "partitions", &one);
    if (!(h->sel = calloc(n ? n : 1, sizeof *h->sel)))
        return mqd_mgmt_fail(r, 500, "out of memory");
    if (!list && !single) {
        memset(h->sel, 1, n * sizeof *h->sel);
        return 0;
    }
    char buf[24];
    if (single) {
        snprintf(buf, sizeof buf, "%lld", (long long)one);
        list = buf;
    }
    long long bad = 0;
    int rc = mqd_mgmt_parse_partitions(list, n, h->sel, &bad);
    if (rc == MQD_EINVAL)
        return mqd_mgmt_fail(r, 400, "'partitions' is a list of partition numbers: \"0,2\"");
    if (rc != 0)
        return mqd_mgmt_fail(r, 404, "topic '%s' has no partition %lld (it has %u)",
                             mqd_topic_name(t), bad, n);
    return 0;
}

static int committed_of(const mqd_group_part_info_t *pi, void *arg)
{
    ((uint64_t *)arg)[pi->partition] = pi->committed;
    return 0;
}

typedef struct members {
    const char *group;
    size_t n;
} members_t;

static int members_of(const char *group, mqd_group_mode_t mode, size_t members, void *arg)
{
    MQD_UNUSED(mode);
    members_t *m = arg;
    if (strcmp(group, m->group) == 0)
        m->n = members;
    return 0;
}

static void put_result(pn_data_t *d, mqd_topic_t *t, const char *group, const how_t *h,
                       const uint64_t *before, const uint64_t *to)
{
    members_t m = {.group = group};
    mqd_group_list(t, members_of, &m);
    pn_data_put_map(d);
    pn_data_enter(d);
    mqd_mgmt_kv_str(d, "topic", mqd_topic_name(t));
    mqd_mgmt_kv_str(d, "group", group);
    mqd_mgmt_kv_long(d, "members", (int64_t)m.n);
    mqd_mgmt_kv_bool(d, "dry_run", h->dry_run);
    mqd_mgmt_kv_enter(d, "partitions", true);
    uint64_t lag = 0;
    for (uint32_t i = 0; i < mqd_topic_nparts(t); i++) {
        mqd_part_t *p = mqd_topic_part(t, i);
        uint64_t start = mqd_plog_start_offset(mqd_part_log(p));
        uint64_t end = mqd_part_visible_end(p, MQD_READ_UNCOMMITTED);
        uint64_t now = to[i] != UINT64_MAX ? to[i] : before[i] != UINT64_MAX ? before[i] : start;
        pn_data_put_map(d);
        pn_data_enter(d);
        mqd_mgmt_kv_long(d, "partition", i);
        if (before[i] != UINT64_MAX)
            mqd_mgmt_kv_long(d, "previous", (int64_t)before[i]);
        mqd_mgmt_kv_long(d, "committed", (int64_t)now);
        mqd_mgmt_kv_long(d, "log_start", (int64_t)start);
        mqd_mgmt_kv_long(d, "log_end", (int64_t)end);
        mqd_mgmt_kv_long(d, "lag", (int64_t)(end > now ? end - now : 0));
        mqd_mgmt_kv_bool(d, "changed", to[i] != UINT64_MAX && to[i] != before[i]);
        pn_data_exit(d);
        lag += end > now ? end - now : 0;
    }
    pn_data_exit(d);
    mqd_mgmt_kv_long(d, "lag", (int64_t)lag);
    pn_data_exit(d);
}

/* One group: 0 with its result written to r->out, or a status already set. */
static int reset_one(mqd_mgmt_req_t *r, mqd_topic_t *t, const char *group, const how_t *h)
{
    uint32_t n = mqd_topic_nparts(t);
    uint64_t *before = malloc((n ? n : 1) * sizeof *before), *to = malloc((n ? n : 1) * sizeof *to);
    int st = 0;
    if (!before || !to) {
        st = mqd_mgmt_fail(r, 500, "out of memory");
        goto out;
    }
    memset(before, 0xff, n * sizeof *before); /* UINT64_MAX: none yet */
    bool exists = mqd_group_describe(t, group, committed_of, before) != MQD_ENOENT;
    if (!exists && !h->create) {
        st = mqd_mgmt_fail(r, 404, "no group '%s' on topic '%s'", group, mqd_topic_name(t));
        goto out;
    }
    for (uint32_t i = 0; i < n; i++)
        to[i] = h->sel[i] ? mqd_group_reset_target(t, i, h->how, h->value,
                                                   before[i] != UINT64_MAX ? before[i] : 0)
                          : UINT64_MAX;
    int rc = h->dry_run ? 0 : mqd_group_seek(t, group, to, n);
    if (rc == MQD_ESTATE)
        st = mqd_mgmt_fail(r, 409, "group '%s' has live members: stop its consumers first", group);
    else if (rc != 0)
        st = mqd_mgmt_fail(r, mqd_mgmt_status_of(rc), "reset failed: %s", mqd_strerror(rc));
    else
        put_result(r->out, t, group, h, before, to);
out:
    free(before);
    free(to);
    return st;
}

typedef struct names {
    char **v;
    size_t n;
} names_t;

static int collect(const char *group, mqd_group_mode_t mode, size_t members, void *arg)
{
    MQD_UNUSED(mode);
    MQD_UNUSED(members);
    names_t *x = arg;
    char **nv = strcmp(group, "$shared") != 0 ? realloc(x->v, (x->n + 1) * sizeof *nv) : NULL;
    if (nv && (nv[x->n] = strdup(group))) {
        x->v = nv;
        x->n++;
    } else if (nv) {
        x->v = nv;
    }
    return 0;
}

/* Every group but $shared: refused as a whole (409) when one has live members, so that
 * none moves. */
static int reset_all(mqd_mgmt_req_t *r, mqd_topic_t *t, how_t *h)
{
    names_t x = {0};
    mqd_group_list(t, collect, &x);
    int st = 0;
    for (size_t i = 0; i < x.n && !st; i++) {
        members_t m = {.group = x.v[i]};
        mqd_group_list(t, members_of, &m);
        if (m.n)
            st = mqd_mgmt_fail(r, 409, "group '%s' has live members: nothing reset", x.v[i]);
    }
    if (!st && x.n == 0)
        st = mqd_mgmt_fail(r, 404, "topic '%s' has no consumer groups", mqd_topic_name(t));
    if (!st) {
        pn_data_put_list(r->out);
        pn_data_enter(r->out);
        for (size_t i = 0; i < x.n && !st; i++)
            st = reset_one(r, t, x.v[i], h);
        pn_data_exit(r->out);
    }
    for (size_t i = 0; i < x.n; i++)
        free(x.v[i]);
    free(x.v);
    return st;
}

int mqd_mgmt_group_reset(mqd_mgmt_req_t *r)
{
    how_t h = {.dry_run = arg_bool(r, "dry_run", false), .create = arg_bool(r, "create", true)};
    bool all = arg_bool(r, "all_groups", false);
    char topic[MQD_NAME_MAX + 1], group[MQD_NAME_MAX + 1];
    if (mqd_mgmt_group_ref(r, !all, topic, group) != 0 || reset_how(r, &h) != 0)
        return r->status;
    if (all && group[0])
        return mqd_mgmt_fail(r, 400, "all_groups names no group");
    mqd_topic_t *t = mqd_topic_find(r->s, topic);
    if (!t || mqd_topic_temporary(t))
        return mqd_mgmt_fail(r, 404, "no topic '%s'", topic);
    int st = reset_parts(r, t, &h);
    if (!st)
        st = all ? reset_all(r, t, &h) : reset_one(r, t, group, &h);
    free(h.sel);
    if (st)
        return st;
    MQD_NOTICE("mgmt", "reset %s of topic %s%s", all ? "every group" : group, topic,
               h.dry_run ? " (dry run: nothing changed)" : "");
    return 200;
}
