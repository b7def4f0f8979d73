/* `mqctl cluster status` ($management READ com.mqd:cluster): this node's view of the
 * cluster as one AMQP map: controller, nodes[] {id, address, rack, alive}, partitions[]
 * {topic, partition, leader, preferred_leader (the first replica as placed, to which
 * auto_leader_rebalance hands it back), epoch, replicas, isr, high_watermark}. The
 * watermark is the leader's when this node leads the partition, else this replica's own
 * (a lower bound, learned from the fetch stream), -1 when this node holds no replica.
 *
 * Also the routing metadata of topics (the design notes' name service, issue 33 point 4):
 * the placement rows of a topic READ and the com.mqd:route answers, per partition its
 * leader, the leader's client address as the leader registered it in etcd (the address
 * amqp:link:redirect names), epoch, replicas, in-sync set and high watermark. */
#include "config.h"
#include "repl/repl_int.h"

#include <jansson.h>
#include <string.h>

static void key(pn_data_t *d, const char *k)
{
    pn_data_put_string(d, pn_bytes(strlen(k), k));
}

static void kv_str(pn_data_t *d, const char *k, const char *v)
{
    key(d, k);
    pn_data_put_string(d, pn_bytes(strlen(v), v));
}

static void kv_long(pn_data_t *d, const char *k, int64_t v)
{
    key(d, k);
    pn_data_put_long(d, v);
}

static void kv_ids(pn_data_t *d, const char *k, const uint32_t *v, uint32_t n)
{
    key(d, k);
    pn_data_put_list(d);
    pn_data_enter(d);
    for (uint32_t i = 0; i < n; i++)
        pn_data_put_long(d, v[i]);
    pn_data_exit(d);
}

static void nodes(mqd_repl_t *r, pn_data_t *d)
{
    const mqd_cluster_view_t *v = mqd_cluster_view(r->m);
    key(d, "nodes");
    pn_data_put_list(d);
    pn_data_enter(d);
    for (size_t i = 0; i < v->n_nodes; i++) {
        pn_data_put_map(d);
        pn_data_enter(d);
        kv_long(d, "id", v->nodes[i].id);
        kv_str(d, "address", v->nodes[i].address);
        kv_str(d, "rack", v->nodes[i].rack);
        key(d, "alive");
        pn_data_put_bool(d, v->nodes[i].alive);
        pn_data_exit(d);
    }
    pn_data_exit(d);
}

/* The watermark as this node knows it (see the top), and where that comes from. */
static int64_t hw_of(const rpart_t *rp, const char **from)
{
    *from = rp && rp->lead ? "leader" : rp && rp->local ? "replica" : "none";
    return rp && rp->lead    ? (int64_t)rp->lead->hw
           : rp && rp->local ? (int64_t)mqd_part_hw(rp->local)
                             : -1;
}

static void partitions(mqd_repl_t *r, pn_data_t *d)
{
    key(d, "partitions");
    pn_data_put_list(d);
    pn_data_enter(d);
    for (rpart_t *rp = r->parts; rp; rp = rp->next) {
        pn_data_put_map(d);
        pn_data_enter(d);
        kv_str(d, "topic", rp->topic);
        kv_long(d, "partition", rp->part);
        kv_long(d, "leader", rp->ps.leader);
        kv_long(d, "preferred_leader", rp->ps.n_replicas ? rp->ps.replicas[0] : 0);
        kv_long(d, "epoch", rp->ps.epoch);
        kv_ids(d, "replicas", rp->ps.replicas, rp->ps.n_replicas);
        kv_ids(d, "isr", rp->ps.isr, rp->ps.n_isr);
        const char *from;
        kv_long(d, "high_watermark", hw_of(rp, &from));
        pn_data_exit(d);
    }
    pn_data_exit(d);
}

void mqd_repl_status(mqd_repl_t *r, pn_data_t *d)
{
    pn_data_put_map(d);
    pn_data_enter(d);
    kv_long(d, "controller", r->m ? mqd_cluster_view(r->m)->controller : 0);
    kv_long(d, "node_id", r->conf->node_id);
    if (r->m)
        nodes(r, d);
    partitions(r, d);
    pn_data_exit(d);
}

/* ---- topics as the cluster holds them ($management READ / QUERY of topics) ---- */

/* One partition's route (rp NULL: not placed yet, leader 0): leader, the leader's client
 * address ("" while its node key is not in this node's view), epoch, replicas, isr and
 * the high watermark as this node knows it, with where that figure comes from. */
static void route_row(mqd_repl_t *r, const rpart_t *rp, uint32_t p, pn_data_t *d)
{
    const mqd_cluster_node_t *n = rp && rp->ps.leader ? mqd_repl_node(r, rp->ps.leader) : NULL;
    const char *from;
    pn_data_put_map(d);
    pn_data_enter(d);
    kv_long(d, "partition", p);
    kv_long(d, "leader", rp ? rp->ps.leader : 0); /* 0: not placed yet */
    kv_str(d, "leader_address", n ? n->address : "");
    key(d, "leader_alive");
    pn_data_put_bool(d, n && n->alive);
    kv_long(d, "epoch", rp ? rp->ps.epoch : 0);
    kv_ids(d, "replicas", rp ? rp->ps.replicas : NULL, rp ? rp->ps.n_replicas : 0);
    kv_ids(d, "isr", rp ? rp->ps.isr : NULL, rp ? rp->ps.n_isr : 0);
    kv_long(d, "high_watermark", hw_of(rp, &from));
    kv_str(d, "high_watermark_from", from);
    pn_data_exit(d);
}

static void placement(mqd_repl_t *r, const rtopic_t *rt, pn_data_t *d, const char *k)
{
    key(d, k);
    pn_data_put_list(d);
    pn_data_enter(d);
    for (uint32_t p = 0; p < rt->td.partitions; p++) {
        const rpart_t *rp = mqd_repl_part_find(r, rt->name, p);
        if (rp && rp->ps.topic_id[0] && strcmp(rp->ps.topic_id, rt->td.id) != 0)
            rp = NULL; /* another registration's: this one is not placed yet */
        route_row(r, rp, p, d);
    }
    pn_data_exit(d);
}

bool mqd_repl_topic_describe(void *arg, const char *name, mqd_topic_t *t, pn_data_t *d)
{
    mqd_repl_t *r = arg;
    const rtopic_t *rt = mqd_repl_topic_find(r, name);
    if (t && mqd_repl_topic_quarantined(r, name)) {
        key(d, "quarantined");
        pn_data_put_bool(d, true); /* never registered, the name is another topic's */
    }
    if (!rt || (t && strcmp(mqd_topic_uid(t), rt->td.id) != 0))
        return false;
    if (!t) {
        kv_str(d, "name", rt->name);
        kv_long(d, "partitions", rt->td.partitions);
        key(d, "local");
        pn_data_put_bool(d, false);
        key(d, "overrides");
        pn_data_put_map(d);
        pn_data_enter(d);
        json_t *cfg = rt->td.config ? json_loads(rt->td.config, 0, NULL) : NULL;
        const char *k;
        json_t *v;
        json_object_foreach(cfg, k, v)
        {
            key(d, k);
            if (json_is_integer(v))
                pn_data_put_long(d, json_integer_value(v));
            else if (json_is_boolean(v))
                pn_data_put_bool(d, json_is_true(v));
            else if (json_is_string(v))
                pn_data_put_string(d, pn_bytes(json_string_length(v), json_string_value(v)));
            else
                pn_data_put_null(d);
        }
        json_decref(cfg);
        pn_data_exit(d);
    }
    kv_long(d, "replication_factor", rt->td.rf);
    kv_str(d, "id", rt->td.id);
    kv_long(d, "home", rt->td.home);
    placement(r, rt, d, "placement");
    return true;
}

void mqd_repl_topic_names(void *arg, void (*fn)(void *fn_arg, const char *name), void *fn_arg)
{
    mqd_repl_t *r = arg;
    for (const rtopic_t *rt = r->topics; rt; rt = rt->next)
        fn(fn_arg, rt->name);
}

bool mqd_repl_topic_routes(void *arg, const char *name, pn_data_t *d)
{
    mqd_repl_t *r = arg;
    const rtopic_t *rt = mqd_repl_topic_find(r, name);
    if (!rt)
        return false;
    pn_data_put_map(d);
    pn_data_enter(d);
    kv_str(d, "topic", rt->name);
    kv_long(d, "partitions", rt->td.partitions);
    kv_long(d, "replication_factor", rt->td.rf);
    kv_long(d, "node_id", r->conf->node_id); /* who answers: its view of etcd */
    placement(r, rt, d, "routes");
    if (r->m)
        nodes(r, d);
    pn_data_exit(d);
    return true;
}
