/* Management of consumer groups (com.mqd:consumergroup): a group is named "TOPIC/GROUP"
 * (split at the last '/', topics may hold '/'), or by the properties `topic` and `group`. */
#include "config.h"
#include "group/group.h"
#include "mgmt/mgmt_int.h"
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct gref {
    char topic[MQD_NAME_MAX + 1];
    char group[MQD_NAME_MAX + 1];
} gref_t;

/* Fills g from topic/group properties or the name; 0, or a status already set. */
static int group_ref(mqd_mgmt_req_t *r, gref_t *g, bool need_group)
{
    const char *tp = mqd_mgmt_arg_str(r, "topic"), *gp = mqd_mgmt_arg_str(r, "group");
    const char *slash = r->name ? strrchr(r->name, '/') : NULL;
    const char *topic = tp, *group = gp;
    size_t tl = tp ? strlen(tp) : 0, gl = gp ? strlen(gp) : 0;
    if (!tp && r->name) {
        topic = r->name;
        tl = slash && need_group ? (size_t)(slash - r->name) : strlen(r->name);
    }
    if (!gp && slash && !tp) {
        group = slash + 1;
        gl = strlen(group);
    }
    if (tl > MQD_NAME_MAX || gl > MQD_NAME_MAX) /* a cut name could be another topic's */
        return mqd_mgmt_fail(r, 400, "topic or group name longer than %d bytes", MQD_NAME_MAX);
    snprintf(g->topic, sizeof g->topic, "%.*s", (int)tl, topic ? topic : "");
    snprintf(g->group, sizeof g->group, "%.*s", (int)gl, group ? group : "");
    if (need_group && (!g->topic[0] || !g->group[0]))
        return mqd_mgmt_fail(r, 400, "name \"TOPIC/GROUP\" (or properties topic and group) required");
    return 0;
}

int mqd_mgmt_group_topic(mqd_mgmt_req_t *r, bool need_group, char *topic, size_t len)
{
    gref_t g;
    if (group_ref(r, &g, need_group) != 0)
        return r->status;
    snprintf(topic, len, "%s", g.topic);
    return 0;
}

int mqd_mgmt_group_ref(mqd_mgmt_req_t *r, bool need_group, char topic[MQD_NAME_MAX + 1],
                       char group[MQD_NAME_MAX + 1])
{
    gref_t g;
    if (group_ref(r, &g, need_group) != 0)
        return r->status;
    memcpy(topic, g.topic, sizeof g.topic);
    memcpy(group, g.group, sizeof g.group);
    return 0;
}

static mqd_topic_t *find_topic(mqd_mgmt_req_t *r, const char *name)
{
    mqd_topic_t *t = mqd_topic_find(r->s, name);
    if (!t || mqd_topic_temporary(t)) {
        mqd_mgmt_fail(r, 404, "no topic '%s'", name);
        return NULL;
    }
    return t;
}

/* "queue" for the topic's own $shared group, which plain T consumers share */
static const char *mode_name(const char *group, mqd_group_mode_t m)
{
    if (strcmp(group, MQD_SHARED_GROUP) == 0)
        return "queue";
    return m == MQD_GROUP_SHARED ? "shared" : "exclusive";
}

/* ---- QUERY: one row per group ---- */

typedef struct qctx {
    mqd_topic_t *t;
    pn_data_t *d;
} qctx_t;

static int sum_lag(const mqd_group_part_info_t *pi, void *arg)
{
    uint64_t *sums = arg;
    sums[0] += pi->lag;
    sums[1] += pi->backlog;
    return 0;
}

static int query_one(const char *group, mqd_group_mode_t mode, size_t members, void *arg)
{
    qctx_t *q = arg;
    uint64_t sums[2] = {0, 0};
    if (mqd_group_unused_queue(q->t, group))
        return 0;
    mqd_group_describe(q->t, group, sum_lag, sums);
    pn_data_put_map(q->d);
    pn_data_enter(q->d);
    mqd_mgmt_kv_str(q->d, "topic", mqd_topic_name(q->t));
    mqd_mgmt_kv_str(q->d, "group", group);
    mqd_mgmt_kv_str(q->d, "mode", mode_name(group, mode));
    mqd_mgmt_kv_long(q->d, "members", (int64_t)members);
    mqd_mgmt_kv_long(q->d, "lag", (int64_t)sums[0]);
    mqd_mgmt_kv_long(q->d, "backlog", (int64_t)sums[1]);
    pn_data_exit(q->d);
    return 0;
}

static int group_query(mqd_mgmt_req_t *r)
{
    gref_t g;
    if (group_ref(r, &g, false) != 0)
        return r->status;
    qctx_t q = {.d = r->out};
    if (g.topic[0] && !(q.t = find_topic(r, g.topic)))
        return r->status;
    pn_data_put_list(r->out);
    pn_data_enter(r->out);
    if (q.t) {
        mqd_group_list(q.t, query_one, &q);
    } else {
        for (mqd_topic_t *t = mqd_srv_topic_first(r->s); t; t = mqd_srv_topic_next(t))
            if (!mqd_topic_temporary(t) && mqd_mgmt_may_read(r, mqd_topic_name(t))) {
                q.t = t;
                mqd_group_list(t, query_one, &q);
            }
    }
    pn_data_exit(r->out);
    return 200;
}

/* ---- READ: per-partition offsets ---- */

typedef struct rctx {
    pn_data_t *d;
    uint64_t lag, backlog;
} rctx_t;

static int read_part(const mqd_group_part_info_t *pi, void *arg)
{
    rctx_t *x = arg;
    pn_data_put_map(x->d);
    pn_data_enter(x->d);
    mqd_mgmt_kv_long(x->d, "partition", pi->partition);
    mqd_mgmt_kv_long(x->d, "committed", (int64_t)pi->committed);
    mqd_mgmt_kv_long(x->d, "log_start", (int64_t)pi->log_start);
    mqd_mgmt_kv_long(x->d, "log_end", (int64_t)pi->log_end);
    mqd_mgmt_kv_long(x->d, "lag", (int64_t)pi->lag);
    mqd_mgmt_kv_long(x->d, "backlog", (int64_t)pi->backlog);
    mqd_mgmt_kv_long(x->d, "inflight", (int64_t)pi->inflight);
    mqd_mgmt_kv_str(x->d, "owner", pi->owner);
    pn_data_exit(x->d);
    x->lag += pi->lag;
    x->backlog += pi->backlog;
    return 0;
}

typedef struct mctx {
    const char *group;
    size_t members;
    mqd_group_mode_t mode;
    bool found;
} mctx_t;

static int find_members(const char *group, mqd_group_mode_t mode, size_t members, void *arg)
{
    mctx_t *m = arg;
    if (strcasecmp(group, m->group) == 0) {
        m->members = members;
        m->mode = mode;
        m->found = true;
    }
    return 0;
}

static int describe(mqd_mgmt_req_t *r, mqd_topic_t *t, const char *group, int ok_status)
{
    mctx_t m = {.group = group};
    mqd_group_list(t, find_members, &m);
    pn_data_t *d = r->out;
    pn_data_put_map(d);
    pn_data_enter(d);
    mqd_mgmt_kv_str(d, "topic", mqd_topic_name(t));
    mqd_mgmt_kv_str(d, "group", group);
    mqd_mgmt_kv_str(d, "mode", m.found ? mode_name(group, m.mode) : NULL);
    mqd_mgmt_kv_long(d, "members", (int64_t)m.members);
    mqd_mgmt_kv_enter(d, "partitions", true);
    rctx_t x = {.d = d};
    int rc = mqd_group_describe(t, group, read_part, &x);
    pn_data_exit(d);
    mqd_mgmt_kv_long(d, "lag", (int64_t)x.lag);
    mqd_mgmt_kv_long(d, "backlog", (int64_t)x.backlog);
    pn_data_exit(d);
    if (rc == MQD_ENOENT)
        return mqd_mgmt_fail(r, 404, "no group '%s' on topic '%s'", group, mqd_topic_name(t));
    if (rc != 0)
        return mqd_mgmt_fail(r, mqd_mgmt_status_of(rc), "%s", mqd_strerror(rc));
    return ok_status;
}

static int group_read(mqd_mgmt_req_t *r)
{
    gref_t g;
    if (group_ref(r, &g, true) != 0)
        return r->status;
    mqd_topic_t *t = find_topic(r, g.topic);
    return t ? describe(r, t, g.group, 200) : r->status;
}

static int group_delete(mqd_mgmt_req_t *r)
{
    gref_t g;
    if (group_ref(r, &g, true) != 0)
        return r->status;
    mqd_topic_t *t = find_topic(r, g.topic);
    if (!t)
        return r->status;
    int rc = mqd_group_delete(t, g.group);
    if (rc == MQD_ESTATE)
        return mqd_mgmt_fail(r, 409, "group has live members");
    if (rc == MQD_ENOENT)
        return mqd_mgmt_fail(r, 404, "no group '%s' on topic '%s'", g.group, g.topic);
    if (rc != 0)
        return mqd_mgmt_fail(r, mqd_mgmt_status_of(rc), "delete failed: %s", mqd_strerror(rc));
    return 204;
}

/* ---- COMMIT: one partition's committed offset (`partition`, `offset` = next to consume) ----
 * What a checkpoint store writes (examples/eventhubs): into a group nobody attaches to. */
static int group_commit(mqd_mgmt_req_t *r)
{
    gref_t g;
    int64_t part, off;
    if (group_ref(r, &g, true) != 0)
        return r->status;
    if (!mqd_mgmt_arg_int(r, "partition", &part) || part < 0 || part > UINT32_MAX ||
        !mqd_mgmt_arg_int(r, "offset", &off) || off < 0)
        return mqd_mgmt_fail(r, 400, "'partition' and 'offset' (non-negative integers) are required");
    mqd_topic_t *t = find_topic(r, g.topic);
    if (!t)
        return r->status;
    int rc = mqd_group_commit(t, g.group, (uint32_t)part, (uint64_t)off);
    if (rc == MQD_ESTATE)
        return mqd_mgmt_fail(r, 409, "group has live members");
    if (rc == MQD_ENOENT)
        return mqd_mgmt_fail(r, 404, "topic '%s' has no partition %lld", mqd_topic_name(t),
                             (long long)part);
    if (rc != 0)
        return mqd_mgmt_fail(r, mqd_mgmt_status_of(rc), "commit failed: %s", mqd_strerror(rc));
    return describe(r, t, g.group, 200);
}

const mqd_mgmt_op_t mqd_mgmt_group_ops[] = {
    {MQD_MGMT_T_GROUP, "COMMIT", group_commit, MQD_MGMT_GROUP_MANAGE},
    {MQD_MGMT_T_GROUP, "QUERY", group_query, MQD_MGMT_GROUP_LIST},
    {MQD_MGMT_T_GROUP, "READ", group_read, MQD_MGMT_GROUP_READ},
    {MQD_MGMT_T_GROUP, "RESET", mqd_mgmt_group_reset, MQD_MGMT_GROUP_MANAGE}, /* mgmt_reset.c */
    {MQD_MGMT_T_GROUP, "DELETE", group_delete, MQD_MGMT_GROUP_MANAGE},
};
const size_t mqd_mgmt_n_group_ops = MQD_ARRAY_LEN(mqd_mgmt_group_ops);
