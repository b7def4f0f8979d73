/* repl/serve: which node serves a partition's links (issue 32 point 4). Pure: the
 * callers (repl.c's mqd_repl_where, reg.c's route, leader.c's step-down) read the state
 * and carry the verdict out.
 *
 * Only the partition's leader in the current epoch serves its links: consumers of every
 * form (T, T/ConsumerGroups/G, T/ConsumerGroups/G/Partitions/N, browsers) and producers.
 * A follower's log is the leader's with a lag and may be cut back by epoch, its
 * watermark is the leader's word, and a group's committed offsets are the leader's: a
 * link served there reads what the leader may never expose, and the group records the
 * leader logs move its cursor under it (offsets delivered twice on one link). Kafka's
 * brokers answer NOT_LEADER_OR_FOLLOWER for the same reason.
 *
 * A node that does not know who leads (no state read yet, or it is named leader but has
 * not taken the role: a restarted leader before its hand-over, ctl.c; its replica not
 * open) cannot redirect either: the link waits (route's MQD_ROUTE_WAIT) until the state
 * settles, and is refused with the reason if it does not within reg.c's WAIT_MS. The
 * same verdict decides which links a node drops when its role changes: every link an
 * attach would not be served for now is detached (leader.c). */
#include "config.h"
#include "repl/repl.h"

mqd_repl_serve_t mqd_repl_serve(uint32_t self, const mqd_repl_pview_t *v, const char **why)
{
    if (!v->known) {
        *why = "its partition's state is not read from etcd yet";
        return MQD_REPL_SERVE_WAIT;
    }
    if (v->leader == self) {
        if (v->leading)
            return MQD_REPL_SERVE_HERE;
        *why = "this node is named its leader but does not lead it yet (a hand-over after a "
               "restart, or its replica is not open)";
        return MQD_REPL_SERVE_WAIT;
    }
    if (!v->leader_known) {
        *why = "its leader's address is not known here";
        return MQD_REPL_SERVE_WAIT;
    }
    return MQD_REPL_SERVE_REDIRECT;
}

/* A redirect is final (the link is not served here whatever the other partitions say);
 * a wait beats serving; the first of equals is kept (its address, its reason). */
mqd_repl_serve_t mqd_repl_serve_join(mqd_repl_serve_t acc, mqd_repl_serve_t next)
{
    return next > acc ? next : acc;
}

/* A receiver of the whole topic attached with mqd:fwd-local-only (issue 33: one leg of a
 * receiver that another node merges over the partitions' leaders) reads only the
 * partitions this node leads, so one led partition is enough to serve it. Per
 * partition: HERE while this node leads it; WAIT while it may soon (its state not read
 * yet, or this node is named its leader and has not taken the role); REDIRECT (meaning
 * "not here": the caller refuses, it never redirects such a link) when another node
 * leads it. */
mqd_repl_serve_t mqd_repl_serve_led(uint32_t self, const mqd_repl_pview_t *v, const char **why)
{
    if (!v->known) {
        *why = "its partitions' state is not read from etcd yet";
        return MQD_REPL_SERVE_WAIT;
    }
    if (v->leader != self)
        return MQD_REPL_SERVE_REDIRECT;
    if (v->leading)
        return MQD_REPL_SERVE_HERE;
    *why = "this node is named the leader of a partition but does not lead it yet (a "
           "hand-over after a restart, or its replica is not open)";
    return MQD_REPL_SERVE_WAIT;
}

/* The fold for such a link: one partition served here serves it; a wait beats "not
 * here"; start with MQD_REPL_SERVE_REDIRECT. */
mqd_repl_serve_t mqd_repl_serve_led_join(mqd_repl_serve_t acc, mqd_repl_serve_t next)
{
    return next < acc ? next : acc;
}
