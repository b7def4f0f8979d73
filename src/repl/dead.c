/* repl/dead: is a node's process dead? The decision of fast failover (issue 40 point 4),
 * pure: probe.c feeds it the evidence as it arrives and carries out what it answers.
 *
 * A leader's etcd lease is what tells the cluster it is gone, and waiting for it costs
 * the lease TTL (etcd 3.4 may stretch it) even for a process that died at once: a
 * SIGKILL, a crash, the OOM killer. But the kernel of a dead process closes its sockets
 * at once (its followers' fetch connections end) and its port then refuses connections
 * (RST). Neither happens to a process that is paused (SIGSTOP, a long GC-like stall, a
 * hung disk: its kernel still completes TCP handshakes on the listening socket) or cut
 * off by the network (nothing answers). Those keep the lease path and its fencing.
 *
 * No one signal is trusted: a connection can end for many reasons, a connect can be
 * refused by a restart in progress. The node is taken as dead only when a connection to
 * it ended AND two connects to its port were refused, the second begun after the first
 * was answered, AND its key in etcd is still under the lease that evidence is about (a
 * restarted process registers under a new lease and is never revoked by evidence about
 * its predecessor). The second connect is the controller's, from another node, when a
 * follower reported the first; the reporter confirms it itself when there is no other
 * node to ask (it is the controller, or the dead node held the controller key). Any
 * completed connect or unanswered one clears the suspicion: the lease decides then. */
#include "config.h"
#include "repl/repl.h"

static mqd_repl_dead_act_t clear(mqd_repl_dead_t *d)
{
    *d = (mqd_repl_dead_t){0};
    return MQD_REPL_DEAD_CLEAR;
}

/* A connect was refused while one was in flight. */
static mqd_repl_dead_act_t refused(mqd_repl_dead_t *d, const mqd_repl_dead_ctx_t *c)
{
    d->refused++;
    if (d->st == MQD_REPL_DEAD_CONFIRMING) {
        if (d->refused < 2 || !(d->closed || d->reported))
            return clear(d); /* not reachable by the rules above; never revoke on less */
        d->st = MQD_REPL_DEAD_REVOKED;
        return MQD_REPL_DEAD_REVOKE;
    }
    /* the first refusal, after a close seen here */
    if (c->self_controller || c->target_controller) {
        d->st = MQD_REPL_DEAD_CONFIRMING; /* nobody else to ask: a second connect of its own */
        return MQD_REPL_DEAD_PROBE;
    }
    d->st = MQD_REPL_DEAD_REPORTED;
    return MQD_REPL_DEAD_REPORT;
}

mqd_repl_dead_act_t mqd_repl_dead_step(mqd_repl_dead_t *d, const mqd_repl_dead_ctx_t *c,
                                       mqd_repl_dead_ev_t ev)
{
    bool probing = d->st == MQD_REPL_DEAD_PROBING || d->st == MQD_REPL_DEAD_CONFIRMING;
    if (!c->enabled || !c->same_lease) /* off, or about a lease that is over */
        return d->st == MQD_REPL_DEAD_IDLE ? MQD_REPL_DEAD_NONE : clear(d);
    switch (ev) {
    case MQD_REPL_DEAD_EV_CLOSED:
        if (d->st != MQD_REPL_DEAD_IDLE) {
            d->closed = true; /* one probe at a time per node */
            return MQD_REPL_DEAD_NONE;
        }
        d->closed = true;
        d->st = MQD_REPL_DEAD_PROBING;
        return MQD_REPL_DEAD_PROBE;
    case MQD_REPL_DEAD_EV_REPORT:
        if (!c->self_controller || d->st != MQD_REPL_DEAD_IDLE)
            return MQD_REPL_DEAD_NONE; /* the controller confirms; one probe at a time */
        d->reported = true;
        d->refused = 1; /* the reporter's */
        d->st = MQD_REPL_DEAD_CONFIRMING;
        return MQD_REPL_DEAD_PROBE;
    case MQD_REPL_DEAD_EV_REFUSED:
        return probing ? refused(d, c) : MQD_REPL_DEAD_NONE; /* no connect in flight: stale */
    case MQD_REPL_DEAD_EV_ACCEPTED:
    case MQD_REPL_DEAD_EV_NO_ANSWER: return probing ? clear(d) : MQD_REPL_DEAD_NONE;
    case MQD_REPL_DEAD_EV_EXPIRED: /* the controller found it alive, or is gone too */
        return d->st == MQD_REPL_DEAD_REPORTED ? clear(d) : MQD_REPL_DEAD_NONE;
    }
    return MQD_REPL_DEAD_NONE;
}

const char *mqd_repl_dead_ev_name(mqd_repl_dead_ev_t ev)
{
    switch (ev) {
    case MQD_REPL_DEAD_EV_CLOSED: return "a connection to it ended";
    case MQD_REPL_DEAD_EV_REPORT: return "another node reported it";
    case MQD_REPL_DEAD_EV_REFUSED: return "its port refused a connection";
    case MQD_REPL_DEAD_EV_ACCEPTED: return "its port accepted a connection";
    case MQD_REPL_DEAD_EV_NO_ANSWER: return "its port did not answer";
    case MQD_REPL_DEAD_EV_EXPIRED: return "the controller did not confirm it";
    }
    return "?";
}
