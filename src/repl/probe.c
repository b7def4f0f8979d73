/* repl/probe: fast failover for a node whose process died (issue 40 point 4). dead.c
 * decides; this file gathers the evidence and carries the decisions out:
 *  - a follower's fetch connection to its leader ended (follower.c on_down): the node
 *    is suspected and its port probed with a non-blocking TCP connect;
 *  - refused (an RST: nothing listens there): the evidence is written to etcd as the key
 *    /<cluster>/dead/<node>/<its lease>/<reporter> under the reporter's own lease, and
 *    the controller, which watches dead/, probes the node's port itself;
 *  - refused there too, and the node's key still under that lease: the controller
 *    revokes the lease. Its node key and, if it held it, the controller key go at once,
 *    and every node reacts as to an expired lease: log-end reports (cand.c), the
 *    controller's election from the in-sync set by log end, a new epoch (ctl.c).
 * When the suspected node is the controller, or the reporter is, the reporter makes the
 * second connect itself. A connect that completes (a paused process's kernel still
 * accepts) or that nobody answers (a partition) clears the suspicion: the lease and its
 * fencing decide as before. */
#include "config.h"
#include "repl/repl_int.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROBE_TIMEOUT_MS 500 /* a connect unanswered this long: no proof either way */
/* A connect that completed is held this long before it counts as "accepted": a process
 * being killed closes its established connections before its listening socket, so a
 * follower's probe can reach the dying listener, whose close then resets it (RST). A
 * live process, paused or not, keeps it (mqd sends nothing before the client's header);
 * one that accepts and closes it sends a FIN, which still counts as alive. */
#define PROBE_HOLD_MS 100
#define REPORT_WAIT_MS 1000 /* a report the controller has not acted on by then is stale */

struct rdead {
    struct rdead *next;
    mqd_repl_t *r;
    uint32_t id;
    int64_t lease; /* the lease of the node's key the evidence is about */
    uint32_t by;   /* the node whose report is being confirmed, 0: none */
    mqd_repl_dead_t d;
    int fd;              /* the connect in flight, -1: none */
    int err;             /* its result when known at once (connect's own errno, or 0) */
    struct event *ev;    /* the connect finished, timed out, or its result is known */
    int64_t reported_ms; /* when this node reported it (the controller's answer due) */
};

static mqd_repl_dead_ctx_t ctx_of(mqd_repl_t *r, const rdead_t *x)
{
    const mqd_cluster_node_t *n = mqd_repl_node(r, x->id);
    const mqd_cluster_view_t *v = r->m ? mqd_cluster_view(r->m) : NULL;
    return (mqd_repl_dead_ctx_t){.enabled = r->conf->fast_failover && !r->closing,
                                 .same_lease = n && n->alive && n->lease && n->lease == x->lease,
                                 .self_controller = r->controller,
                                 .target_controller = v && v->controller == x->id};
}

static void on_probe(evutil_socket_t fd, short what, void *arg);

/* The node's entry, reset to the lease its key is under now (evidence about an earlier
 * lease never counts for a later one). NULL without memory or a key. */
static rdead_t *entry(mqd_repl_t *r, uint32_t id)
{
    const mqd_cluster_node_t *n = mqd_repl_node(r, id);
    rdead_t *x;
    for (x = r->dead; x && x->id != id; x = x->next)
        ;
    if (!x) {
        if (!n || !n->alive || !(x = calloc(1, sizeof *x)))
            return NULL;
        x->r = r;
        x->id = id;
        x->fd = -1;
        x->ev = event_new(mqd_server_base(r->s), -1, 0, on_probe, x);
        if (!x->ev) {
            free(x);
            return NULL;
        }
        x->next = r->dead;
        r->dead = x;
    }
    if (n && n->alive && n->lease != x->lease) {
        x->lease = n->lease;
        x->d = (mqd_repl_dead_t){0};
        x->by = 0;
    }
    return x;
}

static void feed(mqd_repl_t *r, rdead_t *x, mqd_repl_dead_ev_t ev);

static void probe_done(rdead_t *x, int err)
{
    if (x->fd >= 0)
        close(x->fd);
    x->fd = -1;
    mqd_repl_dead_ev_t ev = err == 0              ? MQD_REPL_DEAD_EV_ACCEPTED
                            : err == ECONNREFUSED ? MQD_REPL_DEAD_EV_REFUSED
                                                  : MQD_REPL_DEAD_EV_NO_ANSWER;
    x->r->dead_probes[ev == MQD_REPL_DEAD_EV_ACCEPTED  ? 0
                      : ev == MQD_REPL_DEAD_EV_REFUSED ? 1
                                                       : 2]++;
    feed(x->r, x, ev);
}

/* The completed connect, held: a reset says the listener that took it is gone. */
static void on_hold(evutil_socket_t fd, short what, void *arg)
{
    rdead_t *x = arg;
    char b;
    if (what & EV_TIMEOUT)
        return probe_done(x, 0);
    ssize_t n = recv(x->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    probe_done(x, n < 0 && errno == ECONNRESET ? ECONNREFUSED : 0);
}

/* (Re)arms the entry's one event; it is never pending here (a probe in flight is ended
 * first, and a non-persistent event is not pending in its own callback). */
static void arm(rdead_t *x, int fd, short what, event_callback_fn cb, uint32_t ms)
{
    struct timeval tv = {ms / 1000, (suseconds_t)(ms % 1000) * 1000};
    event_assign(x->ev, mqd_server_base(x->r->s), fd, what, cb, x);
    event_add(x->ev, &tv);
}

static void on_probe(evutil_socket_t fd, short what, void *arg)
{
    rdead_t *x = arg;
    int err = x->err;
    socklen_t len = sizeof err;
    if (x->fd < 0) /* known when the connect was made (or no connect could be made) */
        return probe_done(x, err);
    if (what & EV_TIMEOUT)
        err = ETIMEDOUT;
    else if (getsockopt(x->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err != 0)
        return probe_done(x, err);
    arm(x, x->fd, EV_READ, on_hold, PROBE_HOLD_MS);
}

/* A non-blocking connect to the node's advertised address; its result comes back to
 * feed() from the loop, never from inside this call. */
static void probe(mqd_repl_t *r, rdead_t *x)
{
    const mqd_cluster_node_t *n = mqd_repl_node(r, x->id);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    mqd_redirect_t a;
    char port[8];
    event_del(x->ev); /* a probe about an earlier lease still in flight: ended */
    if (x->fd >= 0)
        close(x->fd);
    x->fd = -1;
    x->err = EHOSTUNREACH;
    if (n && mqd_repl_split_hostport(n->address, &a)) {
        snprintf(port, sizeof port, "%u", a.port);
        if (getaddrinfo(a.host, port, &hints, &ai) == 0) {
            x->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            int rc = x->fd >= 0 ? connect(x->fd, ai->ai_addr, ai->ai_addrlen) : -1;
            x->err = rc == 0 ? 0 : errno;
            freeaddrinfo(ai);
            if (rc != 0 && x->fd >= 0 && x->err == EINPROGRESS)
                return arm(x, x->fd, EV_WRITE, on_probe, PROBE_TIMEOUT_MS);
        }
    }
    if (x->fd >= 0) /* the answer is known now (or nothing could be tried): later */
        close(x->fd);
    x->fd = -1;
    arm(x, -1, 0, on_probe, 0);
}

static void on_put(void *arg, const mqd_etcd_reply_t *rep)
{
    char *key = arg;
    if (rep->rc != 0)
        MQD_WARN("repl", "%s: not written (%s)", key,
                 rep->error ? rep->error : mqd_strerror(rep->rc));
    free(key);
}

static void report(mqd_repl_t *r, rdead_t *x)
{
    int64_t own = r->m ? mqd_cluster_lease(r->m) : 0;
    size_t kl = strlen(r->dead_prefix) + 64;
    char *key = malloc(kl);
    if (!key || own == 0) {
        free(key);
        return;
    }
    snprintf(key, kl, "%s%" PRIu32 "/%" PRId64 "/%" PRIu32, r->dead_prefix, x->id, x->lease,
             r->conf->node_id);
    x->reported_ms = mqd_now_ms();
    MQD_NOTICE("repl",
               "node %" PRIu32 ": a fetch connection to it ended and its port refuses "
               "connections: asking the controller to confirm that its process is dead",
               x->id);
    if (mqd_etcd_put(r->etcd, key, strlen(key), "{}", 2, own, on_put, key) != 0)
        free(key);
}

static void on_deleted(void *arg, const mqd_etcd_reply_t *rep)
{
    free(arg);
}

/* The reports about node x are spent (acted on or cleared). */
static void forget_reports(mqd_repl_t *r, uint32_t id)
{
    size_t kl = strlen(r->dead_prefix) + 16;
    char *pfx = malloc(kl);
    if (!pfx)
        return;
    snprintf(pfx, kl, "%s%" PRIu32 "/", r->dead_prefix, id);
    if (mqd_etcd_delete(r->etcd, pfx, strlen(pfx), true, on_deleted, pfx) != 0)
        free(pfx);
}

typedef struct revoke_op {
    mqd_repl_t *r;
    uint32_t id;
    int64_t lease;
} revoke_op_t;

static void on_revoked(void *arg, const mqd_etcd_reply_t *rep)
{
    revoke_op_t *o = arg;
    if (rep->rc == 0)
        MQD_NOTICE("repl", "fast failover: node %" PRIu32 "'s lease %" PRIx64 " revoked", o->id,
                   (uint64_t)o->lease);
    else if (rep->rc == MQD_EINVAL && rep->grpc_code == 5) /* NotFound */
        MQD_INFO("repl",
                 "fast failover: node %" PRIu32 "'s lease %" PRIx64 " was gone already "
                 "(another node revoked it)",
                 o->id, (uint64_t)o->lease);
    else if (rep->rc != MQD_ESTATE) /* else the etcd client is being freed: r is gone */
        MQD_WARN("repl",
                 "fast failover: node %" PRIu32 "'s lease %" PRIx64 " not revoked (%s): "
                 "its expiry decides",
                 o->id, (uint64_t)o->lease, rep->error ? rep->error : mqd_strerror(rep->rc));
    free(o);
}

static void revoke_lease(mqd_repl_t *r, rdead_t *x)
{
    char ev[160];
    if (x->by && !x->d.closed)
        snprintf(ev, sizeof ev,
                 "a fetch connection of node %" PRIu32 " to it ended, its port "
                 "refused a connect of node %" PRIu32 " and one of this node",
                 x->by, x->by);
    else
        snprintf(ev, sizeof ev,
                 "a fetch connection to it ended, its port refused two connects "
                 "of this node");
    MQD_NOTICE("repl",
               "fast failover: node %" PRIu32 "'s process is dead (%s; its key is still under "
               "lease %" PRIx64 "): revoking that lease",
               x->id, ev, (uint64_t)x->lease);
    revoke_op_t *o = calloc(1, sizeof *o);
    if (!o)
        return;
    *o = (revoke_op_t){r, x->id, x->lease};
    r->dead_revokes++;
    if (mqd_etcd_lease_revoke(r->etcd, x->lease, on_revoked, o) != 0)
        free(o);
    forget_reports(r, x->id);
}

static void feed(mqd_repl_t *r, rdead_t *x, mqd_repl_dead_ev_t ev)
{
    mqd_repl_dead_ctx_t c = ctx_of(r, x);
    bool reported = x->d.reported;
    switch (mqd_repl_dead_step(&x->d, &c, ev)) {
    case MQD_REPL_DEAD_PROBE: probe(r, x); break;
    case MQD_REPL_DEAD_REPORT: report(r, x); break;
    case MQD_REPL_DEAD_REVOKE: revoke_lease(r, x); break;
    case MQD_REPL_DEAD_CLEAR:
        if (c.enabled && c.same_lease)
            MQD_NOTICE("repl",
                       "node %" PRIu32 ": %s, but %s: not taken as dead (a paused, hung or "
                       "cut-off process is left to its lease)",
                       x->id,
                       reported ? "reported by another node" : "a fetch connection to it ended",
                       mqd_repl_dead_ev_name(ev));
        if (reported)
            forget_reports(r, x->id);
        x->by = 0;
        break;
    case MQD_REPL_DEAD_NONE: break;
    }
}

void mqd_repl_dead_closed(mqd_repl_t *r, uint32_t id)
{
    rdead_t *x;
    if (id == r->conf->node_id || r->closing || !r->conf->fast_failover || !(x = entry(r, id)))
        return;
    if (x->d.st == MQD_REPL_DEAD_REPORTED && mqd_now_ms() - x->reported_ms > REPORT_WAIT_MS)
        feed(r, x, MQD_REPL_DEAD_EV_EXPIRED); /* the controller did not act on it: afresh */
    feed(r, x, MQD_REPL_DEAD_EV_CLOSED);
}

bool mqd_repl_dead_revoked(mqd_repl_t *r, uint32_t id)
{
    for (rdead_t *x = r->dead; x; x = x->next)
        if (x->id == id)
            return x->d.st == MQD_REPL_DEAD_REVOKED;
    return false;
}

/* dead/<node>/<lease>/<reporter>: the numbers, or false. */
static bool report_key(mqd_repl_t *r, const mqd_etcd_kv_t *kv, uint32_t *id, int64_t *lease,
                       uint32_t *by)
{
    size_t pl = strlen(r->dead_prefix);
    char buf[96], *e;
    if (kv->key_len <= pl || kv->key_len - pl >= sizeof buf)
        return false;
    memcpy(buf, kv->key + pl, kv->key_len - pl);
    buf[kv->key_len - pl] = '\0';
    unsigned long a = strtoul(buf, &e, 10);
    if (e == buf || *e != '/')
        return false;
    char *s = e + 1;
    long long l = strtoll(s, &e, 10);
    if (e == s || *e != '/' || l <= 0)
        return false;
    s = e + 1;
    unsigned long b = strtoul(s, &e, 10);
    if (e == s || *e || a == 0 || a > UINT32_MAX || b == 0 || b > UINT32_MAX)
        return false;
    *id = (uint32_t)a;
    *lease = l;
    *by = (uint32_t)b;
    return true;
}

static void on_dead(void *arg, mqd_etcd_ev_t ev, const mqd_etcd_kv_t *kvs, size_t n, int64_t rev)
{
    mqd_repl_t *r = arg;
    for (size_t i = 0; i < n && ev != MQD_ETCD_EV_DELETE && !r->closing; i++) {
        uint32_t id, by;
        int64_t lease;
        rdead_t *x;
        if (!r->controller || !report_key(r, &kvs[i], &id, &lease, &by) || by == r->conf->node_id ||
            id == r->conf->node_id || !(x = entry(r, id)) || x->lease != lease)
            continue; /* not for this node to confirm, or about a lease that is over */
        if (x->d.st == MQD_REPL_DEAD_IDLE)
            x->by = by;
        feed(r, x, MQD_REPL_DEAD_EV_REPORT);
    }
}

int mqd_repl_dead_start(mqd_repl_t *r)
{
    return mqd_etcd_watch_new(r->etcd, r->dead_prefix, strlen(r->dead_prefix), true, 0, on_dead, r,
                              &r->w_dead);
}

void mqd_repl_dead_free(mqd_repl_t *r)
{
    mqd_etcd_watch_free(r->w_dead);
    r->w_dead = NULL;
    for (rdead_t *x = r->dead, *next; x; x = next) {
        next = x->next;
        if (x->ev)
            event_free(x->ev);
        if (x->fd >= 0)
            close(x->fd);
        free(x);
    }
    r->dead = NULL;
}
