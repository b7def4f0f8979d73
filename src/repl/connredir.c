/* repl/connredir: where connection_redirect sends a client connection (issue 33 point 4:
 * amqp:connection:redirect for clients that can follow it, as Qpid JMS does with a
 * failover URI and Artemis' broker balancers send it). amqp/ asks through the
 * conn_redirect hook when a client connection's link first names a topic; this file
 * decides by the node's view of etcd:
 *
 *   idle    redirect while this node leads no partition: named leader of none in etcd and
 *           leading none (a node that just joined, holds only followers, or handed its
 *           partitions over on a clean stop)
 *   always  redirect every such connection (a node being drained, or kept for management)
 *
 * The target is a live node other than this one: the leader of the partition the link
 * names (for a whole topic, of its first partition led elsewhere), so the client lands
 * where its link is served; else the next live node, in turn, that leads partitions.
 * No other live node: the connection is served here (never a redirect to nowhere). */
#include "config.h"
#include "repl/repl_int.h"

#include <string.h>

/* Node id's client address into *to when it is live and not this node. */
static bool target(mqd_repl_t *r, uint32_t id, mqd_redirect_t *to)
{
    const mqd_cluster_node_t *n = id ? mqd_repl_node(r, id) : NULL;
    if (!n || !n->alive || id == r->conf->node_id)
        return false;
    return mqd_repl_split_hostport(n->address, to);
}

uint32_t mqd_repl_led_by(mqd_repl_t *r, uint32_t id)
{
    uint32_t n = 0;
    for (const rpart_t *rp = r->parts; rp; rp = rp->next)
        n += id == r->conf->node_id ? rp->role == ROLE_LEADER || rp->ps.leader == id
                                    : rp->ps.leader == id;
    return n;
}

/* The leader of the partition the link names, or of the topic's first one led elsewhere. */
static bool topic_target(mqd_repl_t *r, const char *topic, int64_t part, mqd_redirect_t *to)
{
    const rtopic_t *rt = topic ? mqd_repl_topic_find(r, topic) : NULL;
    if (!rt)
        return false;
    uint32_t from = part >= 0 ? (uint32_t)part : 0;
    uint32_t end = part >= 0 ? (uint32_t)part + 1 : rt->td.partitions;
    for (uint32_t p = from; p < end && p < rt->td.partitions; p++) {
        const rpart_t *rp = mqd_repl_part_find(r, topic, p);
        if (rp && target(r, rp->ps.leader, to))
            return true;
    }
    return false;
}

/* The next live node after the last one chosen that leads at least one partition. */
static bool any_target(mqd_repl_t *r, mqd_redirect_t *to)
{
    const mqd_cluster_view_t *v = mqd_cluster_view(r->m);
    for (size_t k = 0; k < v->n_nodes; k++) {
        const mqd_cluster_node_t *n = &v->nodes[(r->redir_next + k) % v->n_nodes];
        if (mqd_repl_led_by(r, n->id) > 0 && target(r, n->id, to)) {
            r->redir_next = (uint32_t)((r->redir_next + k + 1) % v->n_nodes);
            return true;
        }
    }
    return false;
}

bool mqd_repl_conn_redirect(void *arg, int mode, const char *topic, int64_t part,
                            mqd_redirect_t *to)
{
    mqd_repl_t *r = arg;
    if (mode == MQD_CONN_REDIRECT_OFF || !r->m)
        return false;
    if (mode == MQD_CONN_REDIRECT_IDLE && !r->stopping && mqd_repl_led_by(r, r->conf->node_id))
        return false;
    memset(to, 0, sizeof *to);
    if (!topic_target(r, topic, part, to) && !any_target(r, to))
        return false;
    if (topic)
        snprintf(to->address, sizeof to->address, "%s", topic);
    return true;
}
