/* `mqctl cluster status` ($management READ com.mqd:cluster): this node's view of the
 * cluster as one AMQP map: controller, nodes[] {id, address, rack, alive}, partitions[]
 * {topic, partition, leader, preferred_leader (the first replica as placed, to which
 * auto_leader_rebalance hands it back), epoch, replicas, isr, high_watermark}. The
 * watermark is the leader's when this node leads the partition, else this replica's own
 * (a lower bound, learned from the fetch stream), -1 when this node holds no replica. */
#include "config.h"
#include "repl/repl_int.h"

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
        int64_t hw = rp->lead    ? (int64_t)rp->lead->hw
                     : rp->local ? (int64_t)mqd_part_hw(rp->local)
                                 : -1;
        kv_long(d, "high_watermark", hw);
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
