/* Replication gauges for /metrics (Prometheus text), per replicated partition this node
 * holds: its role, the high watermark, the in-sync set's size, whether it is
 * under-replicated (leaders only: fewer in sync than replicas) and, on the leader, each
 * follower's lag in records behind the leader's log end; whether the preferred replica
 * leads, and the count of this node's preferred-leader moves (rebal.c); the partitions
 * each node leads (connredir.c's count). */
#include "config.h"
#include "repl/repl_int.h"

#include <event2/buffer.h>
#include <stdio.h>

static void label(struct evbuffer *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '"' || *v == '\\')
            evbuffer_add_printf(b, "\\%c", *v);
        else if (*v == '\n')
            evbuffer_add(b, "\\n", 2);
        else
            evbuffer_add(b, v, 1);
    }
}

static void gauge(struct evbuffer *b, const char *name, const rpart_t *rp, const char *extra,
                  uint64_t v)
{
    evbuffer_add_printf(b, "%s{topic=\"", name);
    label(b, rp->topic);
    evbuffer_add_printf(b, "\",partition=\"%u\"%s} %llu\n", rp->part, extra ? extra : "",
                        (unsigned long long)v);
}

static void head(struct evbuffer *b, const char *name, const char *help)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

void mqd_repl_metrics(mqd_repl_t *r, struct evbuffer *b)
{
    evbuffer_add_printf(b,
                        "# HELP mqd_repl_preferred_leader_moves_total Partitions this node "
                        "handed back to their preferred replica (auto_leader_rebalance).\n"
                        "# TYPE mqd_repl_preferred_leader_moves_total counter\n"
                        "mqd_repl_preferred_leader_moves_total %llu\n",
                        (unsigned long long)mqd_repl_rebal_moves(r));
    head(b, "mqd_repl_partitions_led",
         "Partitions each node of the cluster leads, by this node's view of etcd (routing: "
         "where links and connection redirects go).");
    const mqd_cluster_view_t *v = r->m ? mqd_cluster_view(r->m) : NULL;
    for (size_t i = 0; v && i < v->n_nodes; i++)
        evbuffer_add_printf(b, "mqd_repl_partitions_led{node=\"%u\"} %u\n", v->nodes[i].id,
                            mqd_repl_led_by(r, v->nodes[i].id));
    evbuffer_add_printf(b,
                        "# HELP mqd_repl_dead_node_probes_total TCP connects to a node "
                        "suspected dead (fast_failover), by result.\n"
                        "# TYPE mqd_repl_dead_node_probes_total counter\n"
                        "mqd_repl_dead_node_probes_total{result=\"accepted\"} %llu\n"
                        "mqd_repl_dead_node_probes_total{result=\"refused\"} %llu\n"
                        "mqd_repl_dead_node_probes_total{result=\"no_answer\"} %llu\n"
                        "# HELP mqd_repl_fast_failover_revokes_total Leases of nodes whose process "
                        "was proven dead that this node revoked (fast_failover).\n"
                        "# TYPE mqd_repl_fast_failover_revokes_total counter\n"
                        "mqd_repl_fast_failover_revokes_total %llu\n",
                        (unsigned long long)r->dead_probes[0],
                        (unsigned long long)r->dead_probes[1],
                        (unsigned long long)r->dead_probes[2],
                        (unsigned long long)r->dead_revokes);
    head(b, "mqd_repl_preferred_leader",
         "1 if the partition's preferred replica (its first, as placed) leads it, else 0.");
    for (rpart_t *rp = r->parts; rp; rp = rp->next)
        if (rp->local && rp->ps.n_replicas)
            gauge(b, "mqd_repl_preferred_leader", rp, NULL, rp->ps.leader == rp->ps.replicas[0]);
    head(b, "mqd_repl_leader", "1 if this node leads the replicated partition, else 0.");
    for (rpart_t *rp = r->parts; rp; rp = rp->next)
        if (rp->local)
            gauge(b, "mqd_repl_leader", rp, NULL, rp->role == ROLE_LEADER);
    head(b, "mqd_repl_high_watermark", "High watermark as this replica knows it.");
    for (rpart_t *rp = r->parts; rp; rp = rp->next)
        if (rp->local)
            gauge(b, "mqd_repl_high_watermark", rp, NULL,
                  rp->lead ? rp->lead->hw : mqd_part_hw(rp->local));
    head(b, "mqd_repl_isr_size", "Replicas in the in-sync set (etcd's partition state).");
    for (rpart_t *rp = r->parts; rp; rp = rp->next)
        if (rp->local)
            gauge(b, "mqd_repl_isr_size", rp, NULL, rp->ps.n_isr);
    head(b, "mqd_repl_under_replicated",
         "Leader only: 1 while fewer replicas are in sync "
         "than the partition has.");
    for (rpart_t *rp = r->parts; rp; rp = rp->next)
        if (rp->lead)
            gauge(b, "mqd_repl_under_replicated", rp, NULL, rp->ps.n_isr < rp->ps.n_replicas);
    head(b, "mqd_repl_follower_lag_records",
         "Leader only: records a follower is behind the "
         "leader's log end (its last settled run).");
    for (rpart_t *rp = r->parts; rp; rp = rp->next) {
        uint64_t end = rp->lead ? mqd_plog_end_offset(mqd_part_log(rp->local)) : 0;
        for (uint32_t i = 0; rp->lead && i < rp->lead->n; i++) {
            char extra[40];
            snprintf(extra, sizeof extra, ",follower=\"%u\"", rp->lead->f[i].id);
            uint64_t leo = rp->lead->f[i].leo;
            gauge(b, "mqd_repl_follower_lag_records", rp, extra, end > leo ? end - leo : 0);
        }
    }
}
