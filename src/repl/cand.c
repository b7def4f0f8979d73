/* repl/cand: election by log end.
 *
 * Every in-sync replica holds the records below the high watermark, so any of them may
 * lead without losing an `acks = all` send; but an `acks = quorum` send is settled once a
 * majority holds it, which may leave an in-sync replica without it. Picking the first live
 * in-sync replica could elect exactly that one, and the others would then truncate the
 * settled record away. So the controller elects the live in-sync replica with the longest
 * log, as Raft's vote rule does.
 *
 * Log ends live on the replicas, not in etcd, and a leader's death is when they matter:
 * each node that sees a leader's node key go (the membership watch, node_left) writes,
 * for every partition it follows from that leader while in its in-sync set, the key
 * /<cluster>/candidates/<T>/<P>/<node id> = {"epoch": E, "end": log end}. The controller
 * reads the partition's reports (once a tick) until every live in-sync replica reported
 * for the current epoch or CAND_WAIT_MS passed, and prefers the longest log (ties: the
 * in-sync order). Without reports it elects as before.
 *
 * The controller deletes a partition's reports once the election they served is decided:
 * after the CAS of the new state succeeded, when it finds no live in-sync replica
 * (offline), or when the leader's key came back before anyone was elected. A report that
 * outlives that (written late, or a delete that failed) cannot count in another election:
 * it names the epoch it was made in (every election raises it) and the create_revision
 * of the gone leader's node key (a leader that comes back in the same epoch registers a
 * new key), and the controller takes only reports that match both. */
#include "config.h"
#include "repl/repl_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAND_AGAIN_MS 20

static void on_put(void *arg, const mqd_etcd_reply_t *rep)
{
    char *key = arg;
    if (rep->rc != 0)
        MQD_WARN("repl", "%s: log end not reported (%s)", key,
                 rep->error ? rep->error : mqd_strerror(rep->rc));
    free(key);
}

/* The create_revision of node id's key as this node last saw it (0: unknown). */
static int64_t key_rev(mqd_repl_t *r, uint32_t id)
{
    const mqd_cluster_node_t *n = mqd_repl_node(r, id);
    return n ? n->create_rev : 0;
}

void mqd_repl_cand_report(mqd_repl_t *r, uint32_t gone)
{
    uint32_t self = r->conf->node_id;
    for (rpart_t *rp = r->parts; rp; rp = rp->next) {
        if (rp->role != ROLE_FOLLOWER || rp->ps.leader != gone || !rp->local ||
            !mqd_repl_pstate_has(rp->ps.isr, rp->ps.n_isr, self))
            continue;
        mqd_repl_report_t rep = {.epoch = rp->ps.epoch,
                                 .end = mqd_plog_end_offset(mqd_part_log(rp->local)),
                                 .leader_rev = key_rev(r, gone)};
        size_t kl = strlen(r->cand_prefix) + strlen(rp->topic) + 32;
        char *key = malloc(kl), *val = mqd_repl_report_json(&rep);
        if (!key || !val) {
            free(key);
            free(val);
            continue;
        }
        snprintf(key, kl, "%s%s/%u/%" PRIu32, r->cand_prefix, rp->topic, rp->part, self);
        MQD_INFO("repl",
                 "%s/%u: leader %" PRIu32 " gone: reporting log end %" PRIu64 " (epoch %" PRIu32
                 ")",
                 rp->topic, rp->part, gone, rep.end, rp->ps.epoch);
        if (mqd_etcd_put(r->etcd, key, strlen(key), val, strlen(val), 0, on_put, key) != 0)
            free(key);
        free(val);
    }
}

static void on_cleared(void *arg, const mqd_etcd_reply_t *rep)
{
    char *pfx = arg;
    if (rep->rc != 0)
        MQD_WARN("repl", "controller: %s*: log-end reports not deleted (%s)", pfx,
                 rep->error ? rep->error : mqd_strerror(rep->rc));
    else if (rep->deleted > 0)
        MQD_INFO("repl", "controller: %s*: %" PRId64 " log-end reports deleted", pfx, rep->deleted);
    free(pfx);
}

void mqd_repl_cand_clear(mqd_repl_t *r, const char *topic, uint32_t part)
{
    size_t kl = strlen(r->cand_prefix) + strlen(topic) + 16;
    char *pfx = malloc(kl);
    if (!pfx)
        return;
    snprintf(pfx, kl, "%s%s/%u/", r->cand_prefix, topic, part);
    if (mqd_etcd_delete(r->etcd, pfx, strlen(pfx), true, on_cleared, pfx) != 0)
        free(pfx);
}

typedef struct cand_read {
    mqd_repl_t *r;
    char *topic;
    uint32_t part;
} cand_read_t;

static bool alive(mqd_repl_t *r, uint32_t id)
{
    const mqd_cluster_node_t *n = mqd_repl_node(r, id);
    return n && n->alive;
}

/* A report's node id (from its key) and log end, if it is one of this failover: made in
 * epoch `epoch` about the departure of the leader key `lrev` (0: this node never saw
 * that key, as a controller started after it went; the epoch alone then). */
static bool report_of(rpart_t *rp, const mqd_etcd_kv_t *kv, size_t plen, int64_t lrev,
                      uint32_t *node, uint64_t *end)
{
    char *e;
    mqd_repl_report_t rep;
    unsigned long id = strtoul(kv->key + plen, &e, 10);
    if (e == kv->key + plen || *e || id == 0 || id > UINT32_MAX ||
        mqd_repl_report_parse(kv->value, kv->value_len, &rep) != 0 || rep.epoch != rp->ps.epoch)
        return false;
    if (lrev && rep.leader_rev && rep.leader_rev != lrev) {
        if (!rp->cand_stale_logged) /* once per wait, not at every read */
            MQD_INFO("repl", "%.*s: a report about an earlier departure of the leader: ignored",
                     (int)kv->key_len, kv->key);
        rp->cand_stale_logged = true;
        return false;
    }
    *node = (uint32_t)id;
    *end = rep.end;
    return true;
}

static void on_read(void *arg, const mqd_etcd_reply_t *rep)
{
    cand_read_t *q = arg;
    mqd_repl_t *r = q->r;
    rpart_t *rp = NULL;
    if (rep->rc == MQD_ESTATE) /* the etcd client is being freed, after repl: r is gone */
        goto out;
    rp = r->closing ? NULL : mqd_repl_part_find(r, q->topic, q->part);
    if (rp)
        rp->cand_out = false;
    if (!rp || rp->cand_until_ms == 0 || rp->cand_done || rep->rc != 0)
        goto out;
    char pfx[MQD_NAME_MAX + 256];
    int plen = snprintf(pfx, sizeof pfx, "%s%s/%u/", r->cand_prefix, rp->topic, rp->part);
    uint64_t ends[MQD_REPL_MAX_RF] = {0};
    bool got[MQD_REPL_MAX_RF] = {false};
    int64_t lrev = key_rev(r, rp->ps.leader);
    for (size_t k = 0; k < rep->n_kvs; k++) {
        uint32_t node;
        uint64_t end;
        if (!report_of(rp, &rep->kvs[k], (size_t)plen, lrev, &node, &end))
            continue;
        for (uint32_t i = 0; i < rp->ps.n_isr && i < MQD_REPL_MAX_RF; i++)
            if (rp->ps.isr[i] == node) {
                got[i] = true;
                ends[i] = end;
            }
    }
    bool all = true;
    uint32_t pick = 0;
    uint64_t best = 0;
    for (uint32_t i = 0; i < rp->ps.n_isr && i < MQD_REPL_MAX_RF; i++) {
        uint32_t id = rp->ps.isr[i];
        if (id == rp->ps.leader || !alive(r, id))
            continue;
        if (!got[i]) {
            all = false;
            continue;
        }
        if (!pick || ends[i] > best) {
            pick = id;
            best = ends[i];
        }
    }
    rp->cand_pick = pick;
    if (!all && !evtimer_pending(r->ev_cand, NULL)) {
        /* reports still on their way (written as the leader's key went, like this read):
           look again soon rather than at the next tick */
        static const struct timeval again = {0, CAND_AGAIN_MS * 1000};
        evtimer_add(r->ev_cand, &again);
    }
    if (all) {
        rp->cand_done = true;
        if (pick)
            MQD_INFO("repl", "controller: %s/%u: every live in-sync replica reported; the "
                     "longest log is node %" PRIu32 "'s (end %" PRIu64 ")", rp->topic, rp->part,
                     pick, best);
        mqd_repl_ctl_failover(r);
    }
out:
    free(q->topic);
    free(q);
}

void mqd_repl_cand_again(evutil_socket_t fd, short what, void *arg)
{
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
    mqd_repl_ctl_failover(arg);
}

static void read_reports(rpart_t *rp)
{
    mqd_repl_t *r = rp->r;
    cand_read_t *q = calloc(1, sizeof *q);
    char key[MQD_NAME_MAX + 256];
    if (!q || !(q->topic = strdup(rp->topic))) {
        free(q);
        return;
    }
    q->r = r;
    q->part = rp->part;
    snprintf(key, sizeof key, "%s%s/%u/", r->cand_prefix, rp->topic, rp->part);
    if (mqd_etcd_range(r->etcd, key, strlen(key), true, on_read, q) != 0) {
        free(q->topic);
        free(q);
        return;
    }
    rp->cand_out = true;
}

bool mqd_repl_cand_ready(rpart_t *rp, int64_t now_ms, uint32_t *pick)
{
    *pick = 0;
    if (rp->cand_done) {
        *pick = rp->cand_pick;
        return true;
    }
    if (rp->cand_until_ms == 0) {
        rp->cand_until_ms = now_ms + CAND_WAIT_MS;
        rp->cand_pick = 0;
    } else if (now_ms >= rp->cand_until_ms) {
        MQD_NOTICE("repl", "controller: %s/%u: not every in-sync replica reported its log end "
                   "in %d ms: electing %s", rp->topic, rp->part, CAND_WAIT_MS,
                   rp->cand_pick ? "the longest reported log" : "in in-sync order");
        rp->cand_done = true;
        *pick = rp->cand_pick;
        return true;
    }
    if (!rp->cand_out)
        read_reports(rp);
    return false;
}

void mqd_repl_cand_reset(rpart_t *rp)
{
    rp->cand_until_ms = 0;
    rp->cand_done = false;
    rp->cand_pick = 0;
    rp->cand_stale_logged = false;
}
