/* Routing metadata (com.mqd:route): the name service of the design notes (issue 33
 * point 4). A client that can route asks any node which node leads each partition of a
 * topic and where that node takes client connections, and attaches there:
 *
 *   READ  name = T   one map: {topic, partitions, replication_factor, node_id (who
 *                    answers), routes: [{partition, leader, leader_address, leader_alive,
 *                    epoch, replicas, isr, high_watermark, high_watermark_from}], nodes}
 *   QUERY            a list of such maps, one per cluster topic the caller may route
 *
 * The answer is the answering node's view of etcd (the partition states and the nodes'
 * registrations); high_watermark is the leader's own figure only on the leader
 * (high_watermark_from "leader"), a lower bound on a follower ("replica"), -1 on a node
 * that holds no replica ("none"). Authorized per topic like the Event Hubs READs, and
 * `send` counts too: a producer needs the route as much as a consumer (Kafka's metadata
 * request answers whoever may describe the topic, and writing implies describing). */
#include "config.h"
#include "mgmt/mgmt_int.h"
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

static const mqd_repl_hooks_t *routes_hook(mqd_mgmt_req_t *r)
{
    const mqd_repl_hooks_t *repl = mqd_srv_repl(r->s);
    if (!repl->topic_routes) {
        mqd_mgmt_fail(r, 404,
                      "not a cluster node (cluster = none): this node serves every partition");
        return NULL;
    }
    return repl;
}

static int route_read(mqd_mgmt_req_t *r)
{
    const mqd_repl_hooks_t *repl = routes_hook(r);
    if (!repl)
        return r->status;
    if (!repl->topic_routes(repl->arg, r->name, r->out))
        return mqd_mgmt_fail(r, 404, "no topic '%.200s' in the cluster", r->name);
    return 200;
}

typedef struct route_list {
    mqd_mgmt_req_t *r;
    char **names;
    size_t n, cap;
    bool failed;
} route_list_t;

static void add_name(void *arg, const char *name)
{
    route_list_t *a = arg;
    if (a->failed || !mqd_mgmt_may_route(a->r, name))
        return;
    char **nv = mqd_array_grow(a->names, &a->cap, a->n, sizeof *nv, 64);
    char *copy = nv ? strdup(name) : NULL;
    if (!copy) {
        a->failed = true;
        return;
    }
    a->names = nv;
    a->names[a->n++] = copy;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int route_query(mqd_mgmt_req_t *r)
{
    const mqd_repl_hooks_t *repl = routes_hook(r);
    if (!repl)
        return r->status;
    route_list_t a = {.r = r};
    if (repl->topic_names)
        repl->topic_names(repl->arg, add_name, &a);
    if (!a.failed && a.n)
        qsort(a.names, a.n, sizeof *a.names, cmp_names);
    pn_data_put_list(r->out);
    pn_data_enter(r->out);
    for (size_t i = 0; i < a.n; i++) {
        if (!a.failed)
            repl->topic_routes(repl->arg, a.names[i], r->out);
        free(a.names[i]);
    }
    pn_data_exit(r->out);
    free(a.names);
    return a.failed ? mqd_mgmt_fail(r, 500, "out of memory") : 200;
}

const mqd_mgmt_op_t mqd_mgmt_route_ops[] = {
    {MQD_MGMT_T_ROUTE, "READ", route_read, MQD_MGMT_ROUTE_READ},
    {MQD_MGMT_T_ROUTE, "QUERY", route_query, MQD_MGMT_ROUTE_LIST},
};
const size_t mqd_mgmt_n_route_ops = MQD_ARRAY_LEN(mqd_mgmt_route_ops);
