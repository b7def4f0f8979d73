/* Management of topics (com.mqd:topic) and the Event Hubs runtime-information READs
 * (com.microsoft:eventhub, com.microsoft:partition). */
#include "config.h"
#include "mgmt/mgmt_int.h"
#include "mgmt/mgmt_json.h"
#include "core/core.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Request keys that are not topic settings. */
static const char *const not_config[] = {"partitions", "name", "operation", "type", "config"};

static bool is_config_key(const char *k)
{
    for (size_t i = 0; i < MQD_ARRAY_LEN(not_config); i++)
        if (strcmp(k, not_config[i]) == 0)
            return false;
    return true;
}

/* Settings as the topic code wants them: numbers as integers even when a client sent
 * them as strings of digits. */
static int add_setting(json_t *ov, const char *k, json_t *v)
{
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        long long n = strtoll(s, &end, 10);
        if (*s && !*end)
            return json_object_set_new(ov, k, json_integer(n));
    }
    return json_object_set(ov, k, v);
}

/* Each setting through the config file's parser, so a bad one is refused with the
 * file's reason ("retention_ms: expected a duration ..."); false: r holds the 400. */
static bool settings_ok(mqd_mgmt_req_t *r, json_t *ov)
{
    mqd_topic_conf_t probe;
    mqd_conf_topic(mqd_srv_conf(r->s), r->name, &probe);
    const char *k;
    json_t *v;
    char err[512];
    json_object_foreach(ov, k, v) {
        if (mqd_topic_setting_apply(&probe, k, v, err, sizeof err) == 0)
            continue;
        /* the config parser's reasons read "invalid setting KEY: ..."; a count or a
         * value of the wrong JSON type is refused before it gets there */
        bool parsed = strcmp(k, "partitions") != 0 &&
                      (json_is_string(v) || json_is_integer(v) || json_is_boolean(v));
        return mqd_mgmt_fail(r, 400, "%s%s", parsed ? "invalid setting " : "", err), false;
    }
    return true;
}

/* The settings of a CREATE/UPDATE body (top-level keys and a nested `config` map) as
 * a JSON text for mqd_topic_create/alter in *out (NULL when there are none); false
 * (r holds the 400) when one does not parse. */
static bool overrides_of(mqd_mgmt_req_t *r, char **out)
{
    *out = NULL;
    if (!r->body)
        return true;
    json_t *ov = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(r->body, k, v) {
        if (is_config_key(k))
            add_setting(ov, k, v);
    }
    json_t *cfg = json_object_get(r->body, "config");
    if (json_is_object(cfg))
        json_object_foreach(cfg, k, v) add_setting(ov, k, v);
    bool ok = settings_ok(r, ov);
    if (ok && json_object_size(ov))
        *out = json_dumps(ov, JSON_COMPACT);
    json_decref(ov);
    return ok;
}

static void put_effective_config(pn_data_t *d, mqd_topic_t *t)
{
    const mqd_topic_conf_t *c = mqd_topic_conf(t);
    mqd_mgmt_kv_enter(d, "config", false);
    mqd_mgmt_kv_str(d, "flush", c->log.flush == MQD_FLUSH_SYNC ? "sync" : "async");
    mqd_mgmt_kv_long(d, "flush_interval_ms", c->log.flush_interval_ms);
    mqd_mgmt_kv_long(d, "flush_messages", (int64_t)c->log.flush_messages);
    mqd_mgmt_kv_long(d, "segment_bytes", (int64_t)c->log.segment_bytes);
    mqd_mgmt_kv_long(d, "segment_ms", c->log.segment_ms);
    mqd_mgmt_kv_long(d, "retention_bytes", (int64_t)c->log.retention_bytes);
    mqd_mgmt_kv_long(d, "retention_ms", c->log.retention_ms);
    mqd_mgmt_kv_str(d, "retention", c->retention_consumed ? "consumed" : "default");
    mqd_mgmt_kv_str(d, "auto_offset_reset",
                    c->auto_offset_reset == MQD_OFFSET_RESET_LATEST ? "latest" : "earliest");
    mqd_mgmt_kv_long(d, "max_delivery_count", c->max_delivery_count);
    mqd_mgmt_kv_long(d, "dedup_window_ms", c->dedup_window_ms);
    mqd_mgmt_kv_long(d, "index_interval_bytes", (int64_t)c->log.index_interval_bytes);
    mqd_mgmt_kv_bool(d, "dead_letter", c->dead_letter);
    static const char *const acks[] = {"leader", "quorum", "all"}; /* mqd_acks_t */
    mqd_mgmt_kv_str(d, "acks", (size_t)c->acks < MQD_ARRAY_LEN(acks) ? acks[c->acks] : "?");
    mqd_mgmt_kv_long(d, "replication_factor", c->replication_factor);
    mqd_mgmt_kv_long(d, "min_insync_replicas", c->min_insync_replicas);
    mqd_mgmt_kv_bool(d, "unclean_leader_election", c->unclean_leader_election);
    pn_data_exit(d);
}

/* Why a partition failed and what readers skipped (issue 16: points 5 and 8). */
static void put_health(pn_data_t *d, const mqd_part_t *p)
{
    char desc[512];
    uint64_t n, first;
    mqd_plog_t *log = mqd_part_log(p);
    bool failed = mqd_plog_failed(log);
    if (failed)
        mqd_part_fail_condition(p, desc, sizeof desc);
    mqd_mgmt_kv_str(d, "failed_reason", failed ? desc : "");
    mqd_mgmt_kv_bool(d, "resuming", mqd_plog_resuming(log));
    mqd_plog_corrupt(log, &n, &first);
    mqd_mgmt_kv_long(d, "corrupt_records", (int64_t)n);
    mqd_mgmt_kv_long(d, "first_corrupt_offset", n ? (int64_t)first : -1);
}

typedef struct backlog_ctx {
    pn_data_t *d;
    mqd_topic_t *t;
    uint64_t backlog;
} backlog_ctx_t;

static int add_backlog(const mqd_group_part_info_t *pi, void *arg)
{
    ((backlog_ctx_t *)arg)->backlog += pi->backlog;
    return 0;
}

/* Queue-style: per group the messages it has yet to consume ($shared is plain T's). */
static int put_group_backlog(const char *group, mqd_group_mode_t mode, size_t members,
                             void *arg)
{
    backlog_ctx_t *x = arg;
    MQD_UNUSED(mode);
    x->backlog = 0;
    mqd_group_describe(x->t, group, add_backlog, x);
    pn_data_put_map(x->d);
    pn_data_enter(x->d);
    mqd_mgmt_kv_str(x->d, "group", group);
    mqd_mgmt_kv_long(x->d, "members", (int64_t)members);
    mqd_mgmt_kv_long(x->d, "backlog", (int64_t)x->backlog);
    pn_data_exit(x->d);
    return 0;
}

static void put_topic(pn_data_t *d, mqd_topic_t *t)
{
    uint64_t size = 0, messages = 0;
    bool exact = true;
    uint32_t nparts = mqd_topic_nparts(t);
    json_t *overrides = mqd_topic_overrides(t);
    pn_data_put_map(d);
    pn_data_enter(d);
    mqd_mgmt_kv_str(d, "name", mqd_topic_name(t));
    mqd_mgmt_kv_long(d, "partitions", nparts);
    mqd_mgmt_kv_ts(d, "created_at", mqd_topic_created_ms(t));
    put_effective_config(d, t);
    mqd_mgmt_kv_enter(d, "overrides", false);
    const char *k;
    json_t *v;
    if (overrides)
        json_object_foreach(overrides, k, v)
        {
            pn_data_put_string(d, pn_bytes(strlen(k), k));
            mqd_mgmt_json_to_data(d, v, 1);
        }
    pn_data_exit(d);
    mqd_mgmt_kv_enter(d, "partition_info", true);
    for (uint32_t i = 0; i < nparts; i++) {
        mqd_part_t *p = mqd_topic_part(t, i);
        mqd_plog_t *log = mqd_part_log(p);
        size += mqd_plog_size_bytes(log);
        pn_data_put_map(d);
        pn_data_enter(d);
        mqd_mgmt_kv_long(d, "partition", i);
        mqd_mgmt_kv_long(d, "start", (int64_t)mqd_plog_start_offset(log));
        uint64_t end = mqd_part_visible_end(p, MQD_READ_UNCOMMITTED);
        uint64_t n = mqd_part_messages(p, 0, end);
        messages += n;
        exact = exact && mqd_part_count_exact(p);
        mqd_mgmt_kv_long(d, "end", (int64_t)end);
        mqd_mgmt_kv_long(d, "messages", (int64_t)n);
        mqd_mgmt_kv_long(d, "size_bytes", (int64_t)mqd_plog_size_bytes(log));
        mqd_mgmt_kv_bool(d, "failed", mqd_plog_failed(log));
        put_health(d, p);
        pn_data_exit(d);
    }
    pn_data_exit(d);
    mqd_mgmt_kv_long(d, "size_bytes", (int64_t)size);
    mqd_mgmt_kv_long(d, "messages", (int64_t)messages);
    mqd_mgmt_kv_bool(d, "messages_exact", exact);
    mqd_mgmt_kv_enter(d, "groups", true);
    backlog_ctx_t bx = {.d = d, .t = t};
    mqd_group_list(t, put_group_backlog, &bx);
    pn_data_exit(d);
    mqd_topic_stats_t st;
    mqd_topic_stats(t, &st);
    mqd_mgmt_kv_long(d, "messages_in", (int64_t)st.msgs_in);
    mqd_mgmt_kv_long(d, "bytes_in", (int64_t)st.bytes_in);
    mqd_mgmt_kv_long(d, "messages_out", (int64_t)st.msgs_out);
    mqd_mgmt_kv_long(d, "bytes_out", (int64_t)st.bytes_out);
    const mqd_repl_hooks_t *repl = mqd_srv_repl(mqd_topic_srv(t));
    if (repl->topic_describe) /* a cluster: its placement */
        repl->topic_describe(repl->arg, mqd_topic_name(t), t, d);
    pn_data_exit(d);
}

/* A topic the cluster registered that this node holds no copy of: what etcd says (its
 * partitions' leaders, replicas and in-sync sets); false (nothing written) when there is
 * none of that name. */
static bool put_registered(mqd_server_t *s, pn_data_t *d, const char *name)
{
    const mqd_repl_hooks_t *repl = mqd_srv_repl(s);
    pn_data_t *m = repl->topic_describe ? pn_data(16) : NULL;
    if (!m)
        return false;
    pn_data_put_map(m);
    pn_data_enter(m);
    bool ok = repl->topic_describe(repl->arg, name, NULL, m);
    pn_data_exit(m);
    if (ok)
        ok = pn_data_append(d, m) == 0;
    pn_data_free(m);
    return ok;
}

/* The named, non-temporary topic, or NULL after setting a 400/404 status. */
static mqd_topic_t *named_topic(mqd_mgmt_req_t *r)
{
    if (!r->name || !*r->name) {
        mqd_mgmt_fail(r, 400, "application property 'name' is required");
        return NULL;
    }
    mqd_topic_t *t = mqd_topic_find(r->s, r->name);
    if (!t || mqd_topic_temporary(t)) {
        /* Azure's wording: the Event Hubs SDKs raise MessagingEntityNotFoundError on it */
        mqd_mgmt_fail(r, 404, "The messaging entity '%s' could not be found.", r->name);
        return NULL;
    }
    return t;
}

/* The request's partition count (0: none given), or false after setting a 400 status:
 * a count given must be 1..max_partitions_per_topic (0 used to mean the default, and
 * more is refused before any work: creating partitions blocks the loop). */
static bool partitions_arg(mqd_mgmt_req_t *r, uint32_t *out)
{
    int64_t n = 0;
    uint32_t max = mqd_srv_conf(r->s)->max_partitions_per_topic;
    json_t *v = r->body ? json_object_get(r->body, "partitions") : NULL;
    if (!v)
        v = json_object_get(r->props, "partitions");
    if (!v) {
        *out = 0;
        return true;
    }
    if (!mqd_mgmt_arg_int(r, "partitions", &n) || n < 1) {
        mqd_mgmt_fail(r, 400, "partitions must be an integer in 1..%u (max_partitions_per_topic)",
                      max);
        return false;
    }
    if (n > (int64_t)max) {
        mqd_mgmt_fail(r, 400,
                      "partitions %" PRId64 " is over the limit max_partitions_per_topic = %u", n,
                      max);
        return false;
    }
    *out = (uint32_t)n;
    return true;
}

/* Creates with more partitions than this open a slice at a time between other events
 * (mqd_topic_create_async); the reply goes out when the topic is complete. */
#define SYNC_PARTITIONS 16

static void put_created(pn_data_t *d, void *t)
{
    put_topic(d, t);
}

static void on_built(void *arg, int rc, mqd_topic_t *t)
{
    mqd_mgmt_later_t *l = arg;
    char desc[160];
    if (rc == MQD_ESTATE && !t) {
        mqd_mgmt_later_free(l); /* shutdown */
        return;
    }
    if (rc == 0)
        return mqd_mgmt_finish(l, 201, NULL, put_created, t);
    snprintf(desc, sizeof desc, "cannot create topic: %s", mqd_strerror(rc));
    mqd_mgmt_finish(l, mqd_mgmt_status_of(rc), desc, NULL, NULL);
}

typedef int (*cluster_call_fn)(mqd_mgmt_req_t *r, mqd_repl_done_fn done, void *arg, char *err,
                               size_t errlen, const void *how);
static bool via_cluster(mqd_mgmt_req_t *r, cluster_call_fn call, const void *how);

typedef struct alter_args {
    uint32_t nparts;
    const char *ov;
} alter_args_t;

static int call_create(mqd_mgmt_req_t *r, mqd_repl_done_fn done, void *arg, char *err,
                       size_t errlen, const void *how)
{
    const mqd_repl_hooks_t *repl = mqd_srv_repl(r->s);
    const alter_args_t *a = how;
    return repl->topic_create(repl->arg, r->name, a->nparts, a->ov, done, arg, err, errlen);
}

static int topic_create(mqd_mgmt_req_t *r)
{
    uint32_t nparts;
    const char *why;
    if (!r->name || !*r->name)
        return mqd_mgmt_fail(r, 400, "application property 'name' is required");
    if ((why = mqd_mgmt_bad_topic_name(r->name)))
        return mqd_mgmt_fail(r, 400, "invalid topic name '%.100s': %s", r->name, why);
    if (!partitions_arg(r, &nparts))
        return r->status;
    char *ov;
    if (!overrides_of(r, &ov))
        return r->status;
    /* in a cluster the name is registered in etcd first: any node then answers for it */
    alter_args_t ca = {nparts, ov};
    if (mqd_srv_repl(r->s)->topic_create && via_cluster(r, call_create, &ca)) {
        free(ov);
        return r->deferred ? 0 : r->status;
    }
    mqd_topic_t *t = NULL;
    int rc;
    mqd_mgmt_later_t *l = nparts > SYNC_PARTITIONS ? mqd_mgmt_defer(r) : NULL;
    if (l) {
        rc = mqd_topic_create_async(r->s, r->name, nparts, ov, on_built, l);
        if (rc != 0) {
            mqd_mgmt_later_free(l);
            r->deferred = false;
        }
    } else {
        rc = mqd_topic_create(r->s, r->name, nparts, ov, &t);
    }
    free(ov);
    if (rc == 0 && r->deferred)
        return 0;
    if (rc == MQD_EEXIST)
        return mqd_mgmt_fail(r, 409, "topic '%s' already exists", r->name);
    if (rc == MQD_EINVAL)
        return mqd_mgmt_fail(r, 400, "invalid topic name '%s'", r->name);
    if (rc == MQD_EAGAIN)
        return mqd_mgmt_fail(r, 503, "topic limit reached (max_topics = %u)",
                             mqd_srv_conf(r->s)->max_topics);
    if (rc == MQD_ENOSPC)
        return mqd_mgmt_fail(r, 507, "cannot create topic '%s': disk full", r->name);
    if (rc == MQD_ETOOBIG)
        return mqd_mgmt_fail(
            r, 400, "the topic's partitions are over the limit max_partitions_per_topic = %u",
            mqd_srv_conf(r->s)->max_partitions_per_topic);
    if (rc != 0)
        return mqd_mgmt_fail(r, mqd_mgmt_status_of(rc), "cannot create topic: %s", mqd_strerror(rc));
    put_topic(r->out, t);
    return 201;
}

static int topic_read(mqd_mgmt_req_t *r)
{
    mqd_topic_t *t = r->name && *r->name ? mqd_topic_find(r->s, r->name) : NULL;
    if (!t && r->name && *r->name && put_registered(r->s, r->out, r->name))
        return 200; /* the cluster's, held by other nodes */
    if (!(t = named_topic(r)))
        return r->status;
    put_topic(r->out, t);
    return 200;
}

/* A replicated topic's UPDATE or DELETE went through etcd (repl/topics.c): answered once
 * etcd has it, with the topic as this node now holds it when it has a copy. */
typedef struct cluster_req {
    mqd_mgmt_later_t *l;
    mqd_server_t *s;
    char name[MQD_NAME_MAX + 1];
} cluster_req_t;

static void put_registered_of(pn_data_t *d, void *arg)
{
    cluster_req_t *q = arg;
    put_registered(q->s, d, q->name);
}

static void cluster_done(void *arg, int status, const char *desc)
{
    cluster_req_t *q = arg;
    bool ok = status == 200 || status == 201;
    mqd_topic_t *t = ok ? mqd_topic_find(q->s, q->name) : NULL;
    if (t || !ok)
        mqd_mgmt_finish(q->l, status, desc, t ? put_created : NULL, t);
    else /* registered, placed on other nodes: what etcd holds */
        mqd_mgmt_finish(q->l, status, desc, put_registered_of, q);
    free(q);
}

/* The request goes to the replication layer's hook (topic_create, topic_alter or
 * topic_delete, called by `call`): true when it took it (r holds the answer, or it is
 * deferred); false (r untouched) when the topic is not the cluster's and the caller
 * handles it locally. */
static bool via_cluster(mqd_mgmt_req_t *r, cluster_call_fn call, const void *how)
{
    if (!r->req) { /* mqd_mgmt_call (the console): no AMQP request to answer later */
        mqd_mgmt_fail(r, 501, "a replicated topic is changed through $management (AMQP) only");
        return true;
    }
    cluster_req_t *q = calloc(1, sizeof *q);
    char err[512] = "";
    if (!q) {
        mqd_mgmt_fail(r, 500, "out of memory");
        return true;
    }
    q->s = r->s;
    snprintf(q->name, sizeof q->name, "%s", r->name);
    if (!(q->l = mqd_mgmt_defer(r))) {
        free(q);
        mqd_mgmt_fail(r, 500, "out of memory");
        return true;
    }
    int st = call(r, cluster_done, q, err, sizeof err, how);
    if (st == 0)
        return true;
    mqd_mgmt_later_free(q->l);
    free(q);
    r->deferred = false;
    if (st == 404)
        return false;
    if (st < 300) {
        snprintf(r->desc, sizeof r->desc, "%s", err);
        r->status = st;
        if (st == 200 && mqd_topic_find(r->s, r->name))
            put_topic(r->out, mqd_topic_find(r->s, r->name));
        return true;
    }
    mqd_mgmt_fail(r, st, "%s", err);
    return true;
}

static int call_alter(mqd_mgmt_req_t *r, mqd_repl_done_fn done, void *arg, char *err, size_t errlen,
                      const void *how)
{
    const mqd_repl_hooks_t *repl = mqd_srv_repl(r->s);
    const alter_args_t *a = how;
    return repl->topic_alter(repl->arg, r->name, a->nparts, a->ov, done, arg, err, errlen);
}

static int call_delete(mqd_mgmt_req_t *r, mqd_repl_done_fn done, void *arg, char *err,
                       size_t errlen, const void *how)
{
    const mqd_repl_hooks_t *repl = mqd_srv_repl(r->s);
    MQD_UNUSED(how);
    return repl->topic_delete(repl->arg, r->name, done, arg, err, errlen);
}

/* In a cluster a topic is the cluster's: a request about it goes through etcd and
 * reaches every replica (the hook answers 404 for a node's own, e.g. a dead-letter topic,
 * which the caller then handles here). */
static bool cluster_topic(mqd_mgmt_req_t *r, mqd_topic_t *t)
{
    MQD_UNUSED(r);
    return !t || !mqd_topic_temporary(t);
}

static int topic_update(mqd_mgmt_req_t *r)
{
    uint32_t nparts;
    if (!r->name || !*r->name)
        return mqd_mgmt_fail(r, 400, "application property 'name' is required");
    mqd_topic_t *t = mqd_topic_find(r->s, r->name);
    if (!partitions_arg(r, &nparts))
        return r->status;
    uint32_t now = t ? mqd_topic_nparts(t) : 0;
    if (nparts && nparts < now)
        return mqd_mgmt_fail(r, 400, "partitions can only grow (now %u)", now);
    char *ov;
    if (!overrides_of(r, &ov))
        return r->status;
    alter_args_t a = {nparts, ov};
    if (mqd_srv_repl(r->s)->topic_alter && cluster_topic(r, t) && via_cluster(r, call_alter, &a)) {
        free(ov);
        return r->deferred ? 0 : r->status;
    }
    if (!(t = named_topic(r))) {
        free(ov);
        return r->status;
    }
    int rc = mqd_topic_alter(r->s, t, nparts, ov);
    free(ov);
    if (rc == MQD_EINVAL)
        return mqd_mgmt_fail(r, 400, "invalid setting");
    if (rc != 0)
        return mqd_mgmt_fail(r, mqd_mgmt_status_of(rc), "cannot alter topic: %s", mqd_strerror(rc));
    put_topic(r->out, t);
    return 200;
}

/* Links hold plain pointers to their topic: deleting under them would leave them
 * dangling, so a topic in use is refused. */
static size_t topic_links(mqd_server_t *s, const mqd_topic_t *t)
{
    size_t n = 0;
    mqd_dlist_t *conns = mqd_srv_conns(s);
    for (mqd_dlist_t *cn = conns->next; cn != conns; cn = cn->next) {
        mqd_conn_t *c = mqd_conn_of_node(cn);
        for (pn_link_t *l = pn_link_head(mqd_conn_driver(c)->connection, 0); l;
             l = pn_link_next(l, 0)) {
            mqd_lstate_t *ls = pn_link_get_context(l);
            n += ls && mqd_ls_topic(ls) == t;
        }
    }
    return n;
}

static int topic_delete(mqd_mgmt_req_t *r)
{
    if (!r->name || !*r->name)
        return mqd_mgmt_fail(r, 400, "application property 'name' is required");
    mqd_topic_t *t = mqd_topic_find(r->s, r->name);
    /* a transaction keeps pointers to the topics it touched until it is decided (one on
     * another node's copy holds only that copy back: repl/topics.c) */
    size_t n = t ? mqd_txns_topic_refs(r->s, t) : 0;
    if (n)
        return mqd_mgmt_fail(r, 409, "topic '%s' has %zu unfinished transactions", r->name, n);
    /* a replicated topic goes from etcd and then from every replica, whose replication
     * layer lets go of the partitions before they are freed */
    if (mqd_srv_repl(r->s)->topic_delete && cluster_topic(r, t) &&
        via_cluster(r, call_delete, NULL))
        return r->deferred ? 0 : r->status;
    if (!(t = named_topic(r)))
        return r->status;
    /* live links are detached with amqp:link:detach-forced (topic.c), as RabbitMQ and
     * Artemis do for a queue deleted under its consumers */
    n = topic_links(r->s, t);
    int rc = mqd_topic_delete(r->s, t);
    if (rc != 0)
        return mqd_mgmt_fail(r, mqd_mgmt_status_of(rc), "delete failed: %s", mqd_strerror(rc));
    MQD_NOTICE("mgmt", "deleted topic %s (%zu attached links detached)", r->name, n);
    return 204;
}

/* RESUME: failed partitions of the topic (all, or property `partition`) are truncated
 * to their last durable record and take sends again once a probe write succeeds
 * (store/resume.c); the reply is the topic as it is now (`resuming` per partition). */
static int topic_resume(mqd_mgmt_req_t *r)
{
    mqd_topic_t *t = named_topic(r);
    if (!t)
        return r->status;
    int64_t only = -1;
    uint32_t nparts = mqd_topic_nparts(t);
    if (mqd_mgmt_arg_int(r, "partition", &only) && (only < 0 || only >= (int64_t)nparts))
        return mqd_mgmt_fail(r, 404, "no partition %lld in '%s'", (long long)only,
                             mqd_topic_name(t));
    for (uint32_t i = 0; i < nparts; i++) {
        if (only >= 0 && i != (uint64_t)only)
            continue;
        int rc = mqd_part_resume(mqd_topic_part(t, i));
        if (rc != 0 && rc != MQD_EAGAIN)
            return mqd_mgmt_fail(r, mqd_mgmt_status_of(rc), "resume failed: %s", mqd_strerror(rc));
    }
    MQD_NOTICE("mgmt", "resume of topic %s asked", mqd_topic_name(t));
    put_topic(r->out, t);
    return 202;
}

/* A topic to list: this node's copy, or (t NULL) a name the cluster registered. */
typedef struct listed {
    const char *name;
    mqd_topic_t *t;
} listed_t;

typedef struct list_acc {
    mqd_server_t *s;
    mqd_mgmt_req_t *r; /* who asks: only the topics it may read are listed */
    listed_t *v;
    size_t n, cap;
    bool failed;
} list_acc_t;

static void list_add(list_acc_t *a, const char *name, mqd_topic_t *t)
{
    listed_t *nv = mqd_array_grow(a->v, &a->cap, a->n, sizeof *nv, 64);
    if (!nv) {
        a->failed = true;
        return;
    }
    a->v = nv;
    a->v[a->n++] = (listed_t){name, t};
}

static void list_registered(void *arg, const char *name)
{
    list_acc_t *a = arg;
    /* copies here are listed as this node's */
    if (!mqd_topic_find(a->s, name) && mqd_mgmt_may_read(a->r, name))
        list_add(a, name, NULL);
}

static int cmp_listed(const void *a, const void *b)
{
    return strcmp(((const listed_t *)a)->name, ((const listed_t *)b)->name);
}

static int topic_query(mqd_mgmt_req_t *r)
{
    mqd_server_t *s = r->s;
    list_acc_t a = {.s = s, .r = r};
    for (mqd_topic_t *t = mqd_srv_topic_first(s); t; t = mqd_srv_topic_next(t))
        if (!mqd_topic_temporary(t) && mqd_mgmt_may_read(r, mqd_topic_name(t)))
            list_add(&a, mqd_topic_name(t), t);
    const mqd_repl_hooks_t *repl = mqd_srv_repl(s);
    if (repl->topic_names)
        repl->topic_names(repl->arg, list_registered, &a);
    if (a.failed) {
        free(a.v);
        return mqd_mgmt_fail(r, 500, "out of memory");
    }
    if (a.n)
        qsort(a.v, a.n, sizeof *a.v, cmp_listed);
    pn_data_put_list(r->out);
    pn_data_enter(r->out);
    for (size_t i = 0; i < a.n; i++)
        if (a.v[i].t)
            put_topic(r->out, a.v[i].t);
        else
            put_registered(s, r->out, a.v[i].name);
    pn_data_exit(r->out);
    free(a.v);
    return 200;
}

/* ---------------------------------------------------------------- Event Hubs */

static int eventhub_read(mqd_mgmt_req_t *r)
{
    mqd_topic_t *t = named_topic(r);
    if (!t)
        return r->status;
    pn_data_t *d = r->out;
    pn_data_put_map(d);
    pn_data_enter(d);
    uint32_t nparts = mqd_topic_nparts(t);
    mqd_mgmt_kv_str(d, "name", mqd_topic_name(t));
    mqd_mgmt_kv_ts(d, "created_at", mqd_topic_created_ms(t));
    mqd_mgmt_kv_int(d, "partition_count", (int32_t)nparts);
    pn_data_put_string(d, pn_bytes(strlen("partition_ids"), "partition_ids"));
    pn_data_put_array(d, false, PN_STRING); /* the SDKs expect an AMQP array of strings */
    pn_data_enter(d);
    for (uint32_t i = 0; i < nparts; i++) {
        char id[16];
        int len = snprintf(id, sizeof id, "%u", i);
        pn_data_put_string(d, pn_bytes((size_t)len, id));
    }
    pn_data_exit(d);
    pn_data_exit(d);
    return 200;
}

static int partition_read(mqd_mgmt_req_t *r)
{
    mqd_topic_t *t = named_topic(r);
    if (!t)
        return r->status;
    int64_t p;
    if (!mqd_mgmt_arg_int(r, "partition", &p))
        return mqd_mgmt_fail(r, 400, "application property 'partition' is required");
    if (p < 0 || p >= (int64_t)mqd_topic_nparts(t))
        return mqd_mgmt_fail(r, 404, "no partition %lld in '%s'", (long long)p, mqd_topic_name(t));
    mqd_part_t *part = mqd_topic_part(t, (uint32_t)p);
    mqd_plog_t *log = mqd_part_log(part);
    uint64_t start = mqd_plog_start_offset(log);
    uint64_t end = mqd_part_visible_end(part, MQD_READ_UNCOMMITTED);
    bool empty = end <= start;
    int64_t last = end > 0 ? (int64_t)end - 1 : -1;
    char pid[16], off[24];
    snprintf(pid, sizeof pid, "%lld", (long long)p);
    snprintf(off, sizeof off, "%lld", (long long)last);
    pn_data_t *d = r->out;
    pn_data_put_map(d);
    pn_data_enter(d);
    mqd_mgmt_kv_str(d, "name", mqd_topic_name(t));
    mqd_mgmt_kv_str(d, "partition", pid);
    mqd_mgmt_kv_long(d, "begin_sequence_number", (int64_t)start);
    mqd_mgmt_kv_long(d, "last_enqueued_sequence_number", last);
    mqd_mgmt_kv_str(d, "last_enqueued_offset", off);
    mqd_mgmt_kv_ts(d, "last_enqueued_time_utc", mqd_plog_last_timestamp(log));
    mqd_mgmt_kv_bool(d, "is_partition_empty", empty);
    pn_data_exit(d);
    return 200;
}

const mqd_mgmt_op_t mqd_mgmt_topic_ops[] = {
    {MQD_MGMT_T_TOPIC, "CREATE", topic_create, MQD_MGMT_TOPIC_CREATE},
    {MQD_MGMT_T_TOPIC, "READ", topic_read, MQD_MGMT_TOPIC_READ},
    {MQD_MGMT_T_TOPIC, "UPDATE", topic_update, MQD_MGMT_TOPIC_MANAGE},
    {MQD_MGMT_T_TOPIC, "DELETE", topic_delete, MQD_MGMT_TOPIC_MANAGE},
    {MQD_MGMT_T_TOPIC, "QUERY", topic_query, MQD_MGMT_LIST},
    {MQD_MGMT_T_TOPIC, "RESUME", topic_resume, MQD_MGMT_TOPIC_MANAGE},
    {MQD_MGMT_T_EVENTHUB, "READ", eventhub_read, MQD_MGMT_HUB_READ},
    {MQD_MGMT_T_PARTITION, "READ", partition_read, MQD_MGMT_HUB_READ},
};
const size_t mqd_mgmt_n_topic_ops = MQD_ARRAY_LEN(mqd_mgmt_topic_ops);
