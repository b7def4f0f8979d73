/* The follower's side: one outbound AMQP connection (mqd_outconn: reconnect, backoff) to
 * the leader's advertised address, one receiver link on $repl/<T>/<P> with its node id,
 * its log end (the fetch offset) and its last record's epoch in the attach properties.
 * Each run is appended byte for byte (mqd_plog_append_raw keeps offsets, epochs,
 * timestamps and CRCs and checks continuity) and settled only once this node's log made
 * it stable under the topic's flush policy: the settlement is the log-end report. */
#include "config.h"
#include "repl/repl_int.h"

#include <inttypes.h>
#include <proton/connection.h>
#include <proton/delivery.h>
#include <proton/session.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FETCH_IDLE_MS 1000     /* the fetch connection's AMQP idle timeout, at most */
#define FETCH_IDLE_MIN_MS 250  /* and at least (replica_lag_ms / 2 in between) */
#define FETCH_CONNECT_MS 250   /* an unanswered connect to the leader is tried again */
#define FETCH_BACKOFF_MS 2000  /* refused or failed attempts back off up to this (an
                                  unanswered connect retries after the minimum) */

static void put_prop(pn_data_t *d, const char *k, uint64_t v, bool wide)
{
    pn_data_put_symbol(d, pn_bytes(strlen(k), k));
    if (wide)
        pn_data_put_ulong(d, v);
    else
        pn_data_put_uint(d, (uint32_t)v);
}

/* The epoch of the last record in the log (0 when empty or unreadable). */
static uint32_t last_epoch(mqd_repl_t *r, mqd_plog_t *log)
{
    uint64_t end = mqd_plog_end_offset(log), next;
    size_t len = 0, pos = 0;
    mqd_raw_rec_t rec;
    if (end == 0 || end <= mqd_plog_start_offset(log))
        return 0;
    int rc = mqd_plog_read_raw(log, end - 1, r->buf, r->cap, &len, &next);
    if (rc == MQD_ETOOBIG && mqd_repl_grow(r, len) == 0)
        rc = mqd_plog_read_raw(log, end - 1, r->buf, r->cap, &len, &next);
    return rc == 0 && mqd_store_raw_next(r->buf, len, &pos, &rec) == 1 ? rec.epoch : 0;
}

static void attach(fol_t *f)
{
    rpart_t *rp = f->rp;
    mqd_plog_t *log = mqd_part_log(rp->local);
    pn_connection_t *pc = f->oc ? mqd_outconn_connection(f->oc) : NULL;
    if (!pc || f->link || rp->r->stopping)
        return;
    uint64_t end = mqd_plog_end_offset(log);
    if (mqd_plog_stable_offset(log) < end || mqd_plog_truncating(log) || rp->truncating) {
        f->attach_at_ms = mqd_now_ms() + REPL_TICK_MS; /* report only what is stable */
        return;
    }
    char addr[MQD_NAME_MAX + 32], name[MQD_NAME_MAX + 64];
    snprintf(addr, sizeof addr, "$repl/%s/%" PRIu32, rp->topic, rp->part);
    snprintf(name, sizeof name, "repl-%s-%" PRIu32 "-node-%" PRIu32, rp->topic, rp->part,
             rp->r->conf->node_id);
    pn_session_t *ss = pn_session(pc);
    pn_session_set_incoming_capacity(ss, 16u << 20);
    pn_session_open(ss);
    f->link = pn_receiver(ss, name);
    pn_terminus_set_address(pn_link_source(f->link), addr);
    pn_terminus_set_address(pn_link_target(f->link), name);
    pn_link_set_rcv_settle_mode(f->link, PN_RCV_FIRST);
    pn_data_t *p = pn_link_properties(f->link);
    pn_data_put_map(p);
    pn_data_enter(p);
    put_prop(p, "mqd:node-id", rp->r->conf->node_id, false);
    put_prop(p, "mqd:fetch-offset", end, true);
    put_prop(p, "mqd:last-epoch", last_epoch(rp->r, log), false);
    put_prop(p, "mqd:epoch", rp->ps.epoch, false); /* the epoch it believes f->leader leads */
    pn_data_exit(p);
    pn_link_open(f->link);
    pn_link_flow(f->link, REPL_CREDIT);
    f->link_epoch = rp->ps.epoch;
    f->attach_at_ms = 0;
    mqd_outconn_flush(f->oc);
    MQD_INFO("repl", "%s/%u: fetching from node %" PRIu32 " at %" PRIu64, rp->topic, rp->part,
             f->leader, end);
}

static void settle(fol_t *f, pn_delivery_t *d, uint64_t outcome)
{
    pn_delivery_update(d, outcome);
    pn_delivery_settle(d);
    if (f->link)
        pn_link_flow(f->link, 1);
}

/* Closes the fetch link and its session. The runs it appended and has not settled yet
 * are never settled on it: the next attach reports this log's end instead. */
static void close_link(fol_t *f)
{
    pn_link_close(f->link);
    pn_session_close(pn_link_session(f->link));
    f->link = NULL;
    f->n_wait = 0;
}

/* A run that cannot be appended (a gap, a damaged record, a failed log, a link of another
 * epoch): detach and fetch again from this node's end after a pause. */
static void resync(fol_t *f, pn_delivery_t *d, const char *why)
{
    MQD_WARN("repl", "%s/%u: run from node %" PRIu32 " not appended (%s): fetching again",
             f->rp->topic, f->rp->part, f->leader, why);
    settle(f, d, PN_REJECTED);
    close_link(f);
    f->attach_at_ms = mqd_now_ms() + REPL_REATTACH_MS;
}

/* Runs are taken only on a link attached under the epoch this node follows now: one
 * attached under an older state (the same leader in a newer epoch) is closed and attached
 * again with the new mqd:epoch, so the leader's attach check decides whether it may
 * still ship (leader.c epoch_mismatch). A newer leader never reuses the old link: its
 * node id changes the connection (set_role). */
void mqd_repl_fol_leave(rpart_t *rp)
{
    fol_t *f = rp->fol;
    if (!f || !f->link)
        return;
    pn_condition_t *c = pn_link_condition(f->link);
    pn_condition_set_name(c, MQD_REPL_LEAVING);
    pn_condition_set_description(c, "the node is stopping");
    close_link(f);
    f->attach_at_ms = 0;
    mqd_outconn_flush(f->oc);
    MQD_NOTICE("repl", "%s/%u: stopping: left node %" PRIu32 "'s fetch stream", rp->topic, rp->part,
               f->leader);
}

void mqd_repl_fol_epoch(rpart_t *rp)
{
    fol_t *f = rp->fol;
    if (!f || !f->link || f->link_epoch == rp->ps.epoch)
        return;
    MQD_NOTICE("repl",
               "%s/%u: the partition is in epoch %" PRIu32 " now: closing the fetch link "
               "attached in epoch %" PRIu32 " and attaching again",
               rp->topic, rp->part, rp->ps.epoch, f->link_epoch);
    close_link(f);
    attach(f);
    mqd_outconn_flush(f->oc);
}

static void count_rec(void *arg, uint64_t offset, uint32_t flags)
{
    mqd_part_count_append(arg, offset, flags);
}

static void receive(fol_t *f, pn_delivery_t *d)
{
    mqd_repl_t *r = f->rp->r;
    if (pn_delivery_partial(d) || d != pn_link_current(f->link))
        return;
    size_t size = pn_delivery_pending(d);
    mqd_repl_run_t run;
    if (mqd_repl_grow(r, size) != 0)
        return resync(f, d, "out of memory");
    ssize_t got = size ? pn_link_recv(f->link, (char *)r->buf, size) : 0;
    pn_link_advance(f->link);
    uint32_t newest = 0;
    bool state = false;
    if (got != (ssize_t)size || mqd_repl_run_parse(r->buf, size, &run) != 0 ||
        mqd_repl_run_scan(run.data, run.len, &newest, &state) != 0)
        return resync(f, d, "not a replication run");
    if (f->link_epoch != f->rp->ps.epoch) {
        char why[96];
        snprintf(why, sizeof why,
                 "link attached in epoch %" PRIu32 ", the partition is in %" PRIu32, f->link_epoch,
                 f->rp->ps.epoch);
        return resync(f, d, why);
    }
    if (newest > f->rp->ps.epoch) {
        /* a leader of an epoch this node has not seen: not appended before etcd says so */
        MQD_WARN("repl",
                 "%s/%u: run with records of epoch %" PRIu32 ", newer than %" PRIu32
                 ": reading the partition's state again",
                 f->rp->topic, f->rp->part, newest, f->rp->ps.epoch);
        mqd_repl_refresh(f->rp);
        return resync(f, d, "records of a newer epoch");
    }
    mqd_plog_t *log = mqd_part_log(f->rp->local);
    if (run.count) {
        uint64_t first;
        int rc = mqd_plog_append_raw(log, run.data, run.len, &first);
        if (rc == 0 && (first != run.base || mqd_plog_end_offset(log) != run.base + run.count))
            rc = MQD_ECORRUPT; /* the annotations disagree with the records */
        if (rc != 0)
            return resync(f, d, mqd_strerror(rc));
        uint32_t e;
        bool st;
        /* each record into the partition's message count, as a leader's append does:
         * control records (group offsets, transaction markers) hold an offset, no message */
        mqd_repl_run_walk(run.data, run.len, &e, &st, count_rec, f->rp->local);
        mqd_server_tick_soon(r->s); /* commit: the flusher makes it stable */
        f->runs++;
    }
    mqd_part_set_hw(f->rp->local, run.hw);
    if (run.count && state)
        mqd_repl_fol_state(f->rp, run.data, run.len);
    if (!run.count && f->n_wait == 0)
        return settle(f, d, PN_ACCEPTED);
    if (f->n_wait == f->cap_wait) {
        size_t cap = f->cap_wait ? 2 * f->cap_wait : REPL_CREDIT;
        void *nw = realloc(f->wait, cap * sizeof *f->wait);
        if (!nw)
            return resync(f, d, "out of memory");
        f->wait = nw;
        f->cap_wait = cap;
    }
    f->wait[f->n_wait].d = d;
    f->wait[f->n_wait++].end = run.base + run.count;
}

static void on_truncated(mqd_plog_t *log, uint64_t end, int rc, void *arg)
{
    rpart_t *rp = arg;
    rp->truncating = false;
    MQD_NOTICE("repl", "%s/%u: log truncated to %" PRIu64 " (%s)", rp->topic, rp->part, end,
               rc ? mqd_strerror(rc) : "ok");
    if (rp->fol)
        rp->fol->attach_at_ms = mqd_now_ms(); /* and fetch again with the new last epoch */
}

/* The leader said where the largest epoch <= ours ends (info mqd:epoch-end, mqd:epoch):
 * cut to the lower of that and where that epoch ends here (KIP-279). */
static void truncate_to_leader(fol_t *f, pn_data_t *info)
{
    uint64_t end = UINT64_MAX, own;
    uint32_t epoch = 0, own_largest;
    unsigned seen = 0;
    pn_data_rewind(info);
    if (pn_data_next(info) && pn_data_type(info) == PN_MAP) {
        pn_data_enter(info);
        while (pn_data_next(info)) {
            pn_bytes_t k =
                pn_data_type(info) == PN_SYMBOL ? pn_data_get_symbol(info) : pn_bytes(0, "");
            if (!pn_data_next(info))
                break;
            if (k.size == 13 && !memcmp(k.start, "mqd:epoch-end", 13) &&
                pn_data_type(info) == PN_ULONG)
                end = pn_data_get_ulong(info), seen |= 1;
            else if (k.size == 9 && !memcmp(k.start, "mqd:epoch", 9) &&
                     pn_data_type(info) == PN_UINT)
                epoch = pn_data_get_uint(info), seen |= 2;
        }
        pn_data_exit(info);
    }
    mqd_plog_t *log = mqd_part_log(f->rp->local);
    if (seen != 3 || mqd_repl_epoch_end(f->rp->r, log, epoch, &own, &own_largest) != 0) {
        MQD_WARN("repl", "%s/%u: unreadable divergence answer: fetching again", f->rp->topic,
                 f->rp->part);
        return;
    }
    uint64_t to = end < own ? end : own;
    if (to >= mqd_plog_end_offset(log))
        return;
    MQD_NOTICE("repl",
               "%s/%u: diverged from leader %" PRIu32 ": truncating %" PRIu64 " -> %" PRIu64
               " (leader's epoch %" PRIu32 " ends at %" PRIu64 ")",
               f->rp->topic, f->rp->part, f->leader, mqd_plog_end_offset(log), to, epoch, end);
    mqd_repl_fol_doubt_end(f->rp, to); /* what this node took as leader above `to` is gone */
    if (mqd_plog_truncate_start(log, to, on_truncated, f->rp) == 0)
        f->rp->truncating = true;
}

static void on_event(mqd_outconn_t *oc, pn_event_t *e, void *arg)
{
    fol_t *f = arg;
    switch (pn_event_type(e)) {
    case PN_CONNECTION_REMOTE_OPEN:
        f->opened = true;
        attach(f);
        break;
    case PN_LINK_REMOTE_CLOSE: {
        pn_link_t *l = pn_event_link(e);
        if (l != f->link)
            break;
        pn_condition_t *c = pn_link_remote_condition(l);
        MQD_INFO("repl", "%s/%u: node %" PRIu32 " closed the fetch link: %s: %s", f->rp->topic,
                 f->rp->part, f->leader, pn_condition_get_name(c) ?: "-",
                 pn_condition_get_description(c) ?: "-");
        const char *cn = pn_condition_get_name(c);
        close_link(f);
        f->attach_at_ms = mqd_now_ms() + REPL_REATTACH_MS;
        if (cn && strcmp(cn, "mqd:repl:diverged") == 0)
            truncate_to_leader(f, pn_condition_info(c));
        else if (cn && strcmp(cn, "mqd:repl:below-log-start") == 0)
            mqd_repl_fol_behind(f->rp, f->leader, pn_condition_info(c));
        else if (cn && strcmp(cn, "mqd:repl:stale-epoch") == 0)
            mqd_repl_refresh(f->rp); /* the leader knows a newer state: read it first */
        break;
    }
    case PN_DELIVERY:
        if (pn_delivery_link(pn_event_delivery(e)) == f->link)
            receive(f, pn_event_delivery(e));
        break;
    default: break;
    }
}

static void on_down(mqd_outconn_t *oc, const char *why, void *arg)
{
    fol_t *f = arg;
    f->link = NULL; /* gone with its connection, and the deliveries with it */
    f->n_wait = 0;
    f->attach_at_ms = 0;
    /* an open connection that ended is evidence (probe.c: did its process die?); one
     * that never opened (a TLS or login failure, a paused leader's backlog) is not */
    if (f->opened)
        mqd_repl_dead_closed(f->rp->r, f->leader);
    f->opened = false;
}

static int connect_leader(fol_t *f)
{
    mqd_repl_peer_t peer;
    char container[64];
    snprintf(container, sizeof container, "mqd-node-%" PRIu32, f->rp->r->conf->node_id);
    if (mqd_repl_peer_opts(f->rp->r, f->leader, container, &peer) != 0)
        return MQD_ENOENT; /* not known yet: the tick tries again */
    snprintf(f->url, sizeof f->url, "%s", peer.url);
    peer.o.url = f->url;
    /* a leader cut off and back (a partition healed) is found again within a fraction of
     * a second: the link notices a silent leader after idle ms, a connect nobody answers
     * is given up after FETCH_CONNECT_MS and tried again 100 ms later (TCP's own SYN
     * retransmissions would wait seconds after a heal) */
    uint32_t idle = f->rp->r->conf->replica_lag_ms / 2;
    idle = idle < FETCH_IDLE_MIN_MS ? FETCH_IDLE_MIN_MS : idle > FETCH_IDLE_MS ? FETCH_IDLE_MS : idle;
    peer.o.backoff_max_ms = FETCH_BACKOFF_MS;
    peer.o.connect_timeout_ms = FETCH_CONNECT_MS;
    peer.o.idle_timeout_ms = idle;
    mqd_outconn_ops_t ops = {.on_event = on_event, .on_down = on_down};
    return mqd_outconn_new(f->rp->r->s, &peer.o, &ops, f, &f->oc);
}

int mqd_repl_peer_opts(mqd_repl_t *r, uint32_t node, const char *container, mqd_repl_peer_t *out)
{
    const mqd_cluster_node_t *n = mqd_repl_node(r, node);
    if (!n || !n->alive || !n->address[0])
        return MQD_ENOENT;
    const mqd_conf_t *conf = r->conf;
    bool tls = conf->replication_tls;
    memset(out, 0, sizeof *out);
    /* with TLS, the name verified is the host of the address the peer registered */
    snprintf(out->url, sizeof out->url, "%s://%s", tls ? "amqps" : "amqp",
             tls && n->repl_address[0] ? n->repl_address : n->address);
    snprintf(out->container, sizeof out->container, "%s", container);
    bool auth = conf->replication_user && conf->replication_user[0];
    /* node identity both ways: the certificate alone logs this node in (SASL EXTERNAL, no
     * password), and the server there must be the node etcd names, not just a host of
     * the right name (another node, or a stranger with a certificate for that address) */
    bool peer = tls && conf->replication_peer_verify && conf->replication_ca_file;
    snprintf(out->peer_cn, sizeof out->peer_cn, "mqd-node-%" PRIu32, node);
    snprintf(out->self_cn, sizeof out->self_cn, "mqd-node-%" PRIu32, conf->node_id);
    /* the certificate that names this node (mqd-node-<id>) to a peer that asks */
    const char *cert = conf->replication_cert ? conf->replication_cert : conf->tls_cert;
    const char *key = conf->replication_cert ? conf->replication_key : conf->tls_key;
    out->o = (mqd_outconn_opts_t){.url = out->url,
                                  .container = out->container,
                                  .backoff_min_ms = 100,
                                  .backoff_max_ms = 2000,
                                  .user = auth ? conf->replication_user : NULL,
                                  .password = auth ? conf->replication_password : NULL,
                                  .sasl_external = peer && !auth,
                                  .authzid = peer && !auth ? out->self_cn : NULL,
                                  .ca_file = tls ? conf->replication_ca_file : NULL,
                                  .cert_file = tls ? cert : NULL,
                                  .key_file = tls ? key : NULL,
                                  .peer_cn = peer ? out->peer_cn : NULL,
                                  .plain_over_tcp = auth && !tls};
    return 0;
}

int mqd_repl_fol_start(rpart_t *rp)
{
    fol_t *f = calloc(1, sizeof *f);
    if (!f)
        return MQD_ENOMEM;
    f->rp = rp;
    f->leader = rp->ps.leader;
    rp->fol = f;
    connect_leader(f);
    return 0;
}

void mqd_repl_fol_stop(rpart_t *rp)
{
    fol_t *f = rp->fol;
    if (!f)
        return;
    if (rp->r->closing)
        mqd_outconn_free_now(f->oc); /* the loop has stopped */
    else
        mqd_outconn_free(f->oc); /* its links and deliveries go with it */
    free(f->wait);
    free(f);
    rp->fol = NULL;
}

#define DOUBT_WHY                                                                           \
    "the partition's leader changed before the send was replicated: send it again to the new " \
    "leader"

/* A leader that steps down does not know yet whether the next one holds what it appended
 * and has not settled: a hand-over (mqctl cluster elect, rebalancing) names an in-sync
 * replica that may have fetched all of it, some or none. Rejecting those sends ("send it
 * again") made the node that forwarded them send them again, and the copies the new
 * leader had were stored twice (test 98). So they wait, as acks = all sends, while this
 * node follows the new leader: its fetch first cuts this log back to where the two agree
 * (truncate_to_leader rejects the sends above that point: their records are gone), then
 * the new leader's watermark settles the rest as it passes them (accepted: that leader
 * holds them). If neither happens within the lease + 1 s (the new leader out of reach)
 * they are rejected as before; so are they when this node will not follow. */
void mqd_repl_fol_doubt(rpart_t *rp)
{
    mqd_repl_t *r = rp->r;
    if (!rp->local)
        return;
    if (r->closing || r->stopping || rp->dropping) {
        mqd_repl_fol_doubt_end(rp, 0);
        return;
    }
    size_t n = mqd_part_waiting_in_doubt(rp->local);
    rp->doubt_until_ms = 0;
    if (!n)
        return;
    rp->doubt_until_ms = mqd_now_ms() + (int64_t)r->conf->lease_ttl_ms + 1000;
    MQD_NOTICE("repl",
               "%s/%u: stepped down with %zu sends waiting: each is accepted once the next "
               "leader's watermark passes it, rejected if its record is cut from this log",
               rp->topic, rp->part, n);
}

void mqd_repl_fol_doubt_end(rpart_t *rp, uint64_t from)
{
    if (!rp->local)
        return;
    size_t n = mqd_part_reject_waiting_from(
        rp->local, from, MQD_ACKS_LEADER, "amqp:resource-limit-exceeded",
        rp->dropping ? "the topic was deleted before the send was replicated" : DOUBT_WHY);
    if (from == 0)
        rp->doubt_until_ms = 0;
    if (n)
        MQD_WARN("repl", "%s/%u: %zu waiting sends rejected (%s)", rp->topic, rp->part, n,
                 from ? "their records were cut from the log" : "stepped down");
}

void mqd_repl_fol_work(rpart_t *rp, int64_t now_ms)
{
    fol_t *f = rp->fol;
    if (rp->doubt_until_ms && now_ms >= rp->doubt_until_ms)
        mqd_repl_fol_doubt_end(rp, 0); /* the new leader's watermark did not come */
    if (!f)
        return;
    if (!f->oc) {
        if (now_ms)
            connect_leader(f);
        return;
    }
    uint64_t stable = mqd_plog_stable_offset(mqd_part_log(rp->local));
    size_t k = 0;
    while (k < f->n_wait && f->wait[k].end <= stable)
        settle(f, f->wait[k++].d, PN_ACCEPTED);
    if (k) {
        memmove(f->wait, f->wait + k, (f->n_wait - k) * sizeof *f->wait);
        f->n_wait -= k;
        mqd_outconn_flush(f->oc);
    }
    if (now_ms && f->attach_at_ms && now_ms >= f->attach_at_ms)
        attach(f);
}
