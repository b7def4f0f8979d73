/* sim_rsm: a deterministic simulation of a 3-5 node cluster replicating one partition,
 * every decision taken by the real decision core (src/repl/rsm.c), driven by one seed.
 *
 * Simulated around the core: etcd (the partition key with compare-and-swap on its
 * revision, node keys on leases that expire, log-end reports, watches delivered in order
 * after a delay, requests that fail while a node is cut from etcd), the network between
 * nodes (fetch links as ordered streams with random delays; links that break; partitions
 * between two nodes; attaches duplicated), logs (append, fsync at random moments, a crash
 * drops what was not synced, power cuts of every node, truncation) and clocks (a fixed
 * offset per node; leases measured from the keepalive's send time). Producers send with acks = all
 * or quorum through the core's send check and are acknowledged by its watermark and quorum end; a
 * consumer reads below the watermark.
 *
 * Invariants, checked after every step (some incrementally, at the step that could break
 * them): no acknowledged record is lost (every leader holds every record acknowledged
 * before, at its offset); at most one node acknowledges per epoch; replicas agree below
 * the watermark they were told; what a consumer read never changes and its offset never
 * goes back; no replica out of sync is elected unless unclean election is on (and then
 * the loss checks stop at the first unclean election).
 *
 *   sim_rsm                      the bounded run of make check: 2000 seeds (1000 with
 *                                MQD_TEST_SLOW=2, the ASan build; SIM_RSM_SEEDS=N)
 *   sim_rsm --seeds N --from S   seeds S .. S+N-1
 *   sim_rsm --seed S --trace     one seed, every event and action printed
 *   sim_rsm --bug NAME           a past bug put back (elect-first, skip-divergence,
 *                                ack-unsynced, hw-from-log, unclean, stale-fetch, and
 *                                main's rules it found wrong: same-epoch, state-isr,
 *                                rejoin-at-hw): exits 0 when some seed finds it, printing
 *                                which and where
 */
#include "config.h"
#include "repl/rsm.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXN 5
#define MAXLOG 8192
#define MAXQ 16384
#define RUN_MAX 8
#define MAXPEND 512
#define TICK_MS 100
#define RUN_MS 8000  /* faults happen during this time */
#define HEAL_MS 6000 /* then everything heals, and the cluster must serve again */

/* ---- the seed's PRNG: splitmix64 ---- */
static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static int64_t rnd_in(int64_t lo, int64_t hi) /* [lo, hi] */
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}
static bool chance(unsigned pct)
{
    return rnd() % 1000 < pct; /* per mille */
}

/* ---- the queue of things to happen ---- */
typedef enum {
    Q_TICK,
    Q_FSYNC,
    Q_KEEPALIVE,
    Q_MSG,
    Q_ETCD,
    Q_REPLY,
    Q_WATCH,
    Q_RESTART,
    Q_TRUNC_DONE,
    Q_PRODUCE,
    Q_CONSUME,
    Q_FAULT,
    Q_HEAL_ETCD,
    Q_HEAL_NET,
    Q_HEAL_ALL
} qkind_t;

typedef enum { M_ATTACH, M_RUN, M_SETTLE, M_CLOSE, M_REFUSE } mtype_t;
typedef enum {
    E_KEEPALIVE,
    E_GRANT,
    E_CAS,
    E_REFRESH,
    E_READ,
    E_REPORT,
    E_CLEAR,
    E_SNAPSHOT
} etype_t;

typedef struct item {
    int64_t t;
    uint64_t seq;
    qkind_t kind;
    int node, inc; /* the node it happens at, and the incarnation it was meant for */
    int from;
    int type; /* mtype_t or etype_t */
    uint64_t link, offset, hw, val[RUN_MAX];
    uint32_t epoch, last_epoch, count, ep[RUN_MAX];
    mqd_rsm_cond_t cond;
    bool flag;
    int64_t sent, rev;
    mqd_repl_pstate_t ps;
} item_t;

/* the items live in a pool; the heap orders small keys into it */
static item_t pool[MAXQ];
static uint32_t free_list[MAXQ], n_free;
typedef struct hkey {
    int64_t t;
    uint64_t seq;
    uint32_t idx;
} hkey_t;
static hkey_t heap[MAXQ];
static size_t nq;
static uint64_t qseq;

static bool before(const hkey_t *a, const hkey_t *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void queue_reset(void)
{
    nq = 0;
    qseq = 0;
    n_free = MAXQ;
    for (uint32_t i = 0; i < MAXQ; i++)
        free_list[i] = MAXQ - 1 - i;
}

static void push(item_t it)
{
    if (n_free == 0) {
        fprintf(stderr, "sim_rsm: queue full\n");
        exit(2);
    }
    uint32_t idx = free_list[--n_free];
    pool[idx] = it;
    hkey_t k = {it.t, qseq++, idx};
    size_t i = nq++;
    while (i && before(&k, &heap[(i - 1) / 2])) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = k;
}

static item_t pop(void)
{
    hkey_t top = heap[0], last = heap[--nq];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= nq)
            break;
        if (c + 1 < nq && before(&heap[c + 1], &heap[c]))
            c++;
        if (!before(&heap[c], &last))
            break;
        heap[i] = heap[c];
        i = c;
    }
    if (nq)
        heap[i] = last;
    free_list[n_free++] = top.idx;
    return pool[top.idx];
}

/* ---- the world ---- */
typedef struct lk {
    uint64_t link, next_send, hw_sent;
} lk_t;

typedef struct pend {
    uint64_t off, val;
    uint32_t acks, epoch;
} pend_t;

typedef struct node {
    bool up;
    int inc;
    mqd_rsm_ctx_t ctx;
    mqd_rsm_t s;
    uint32_t lep[MAXLOG];
    uint64_t lval[MAXLOG];
    uint64_t end, synced;
    bool lease_live, registered, snap_out, etcd_cut;
    uint64_t lease;
    int64_t deadline, clock_off, watch_t, snap_rev;
    uint64_t flink; /* follower: its fetch link */
    uint32_t fleader;
    lk_t lk[MAXN + 1]; /* leader: each follower's link */
    pend_t pend[MAXPEND];
    size_t npend;
    uint64_t committed_upto, agreed_upto;
} node_t;

static struct {
    int n;
    int64_t now;
    node_t nodes[MAXN + 1];
    bool cut[MAXN + 1][MAXN + 1];
    int64_t last[MAXN + 1][MAXN + 1]; /* the last delivery time between two nodes */
    /* etcd */
    mqd_repl_pstate_t ps;
    int64_t rev, ps_rev;
    struct {
        bool present;
        uint64_t lease;
        int64_t expiry;
    } key[MAXN + 1];
    struct {
        bool present;
        uint32_t epoch;
        uint64_t end;
    } rep[MAXN + 1];
    bool unclean, unclean_done, quorum;
    uint64_t next_link, next_val, next_lease;
    /* what the invariants remember */
    uint64_t acked[MAXLOG], committed[MAXLOG], cpos;
    uint32_t acked_ep[MAXLOG];
    bool is_acked[MAXLOG], is_committed[MAXLOG];
    int ack_node[4096];
    uint64_t n_acked, n_sends, steps;
    bool failed;
    char why[300];
} W;

static bool tracing, ringing, quorum_sends;
static uint64_t seed_now;
#define TRACE_RING 400
static char ring[TRACE_RING][200];
static size_t ring_n;

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...)
{
    if (!tracing && !ringing)
        return; /* a failing seed is run again with the ring on: it replays exactly */
    char line[200];
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(line, sizeof line, "%7" PRId64 " ", W.now);
    vsnprintf(line + k, sizeof line - (size_t)k, fmt, ap);
    va_end(ap);
    if (tracing)
        puts(line);
    memcpy(ring[ring_n++ % TRACE_RING], line, sizeof line);
}

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...)
{
    if (W.failed)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(W.why, sizeof W.why, fmt, ap);
    va_end(ap);
    W.failed = true;
    trace("VIOLATION: %s", W.why);
}

static int64_t local(const node_t *nd)
{
    return W.now + nd->clock_off;
}

static item_t at(qkind_t k, int node, int64_t delay)
{
    item_t it;
    memset(&it, 0, sizeof it);
    it.t = W.now + delay;
    it.kind = k;
    it.node = node;
    it.inc = W.nodes[node].inc;
    return it;
}

/* ---- etcd ---- */

/* Every change has a revision; a watch delivers them in order after the snapshot's. */
static void watch_all(bool state, int id, bool present)
{
    int64_t rev = state ? W.ps_rev : ++W.rev;
    for (int i = 1; i <= W.n; i++) {
        node_t *nd = &W.nodes[i];
        if (!nd->up)
            continue;
        int64_t t = W.now + rnd_in(1, 15);
        if (t <= nd->watch_t)
            t = nd->watch_t + 1; /* a watch delivers in order */
        nd->watch_t = t;
        item_t it = at(Q_WATCH, i, 0);
        it.t = t;
        it.flag = state;
        it.from = id;
        it.cond = present ? 1 : 0;
        it.ps = W.ps;
        it.rev = rev;
        push(it);
    }
}

static void etcd_expire(void)
{
    for (int i = 1; i <= W.n; i++)
        if (W.key[i].present && W.key[i].expiry <= W.now) {
            W.key[i].present = false;
            trace("etcd: node %d's key expired", i);
            watch_all(false, i, false);
        }
}

static bool in_list(const uint32_t *v, uint32_t n, uint32_t id)
{
    return mqd_repl_pstate_has(v, n, id);
}

static void etcd_cas(item_t *r)
{
    if (r->rev != W.ps_rev) {
        r->flag = false;
        return;
    }
    const mqd_repl_pstate_t *o = &W.ps, *nx = &r->ps;
    if (nx->leader != o->leader) {
        if (nx->epoch <= o->epoch)
            violation("leader changed %u -> %u without a new epoch", o->leader, nx->leader);
        if (!in_list(o->isr, o->n_isr, nx->leader)) {
            if (!W.unclean)
                violation("node %u elected out of sync (isr of epoch %u)", nx->leader, o->epoch);
            W.unclean_done = true;
        }
    }
    if (nx->epoch < o->epoch)
        violation("epoch went back");
    W.ps = *nx;
    W.ps_rev = ++W.rev;
    trace("etcd: state leader=%u epoch=%u isr=%u rev=%" PRId64, nx->leader, nx->epoch, nx->n_isr,
          W.ps_rev);
    r->flag = true;
    r->rev = W.ps_rev;
    watch_all(true, 0, false);
}

static void etcd_request(node_t *nd, int id, item_t it);

/* A request arrives at etcd: apply it, answer after a delay (lost if the node is cut). */
static void etcd_apply(item_t *r)
{
    int id = r->node;
    switch ((etype_t)r->type) {
    case E_KEEPALIVE:
        r->flag = W.key[id].present && W.key[id].lease == r->offset;
        if (r->flag)
            W.key[id].expiry = W.now + W.nodes[id].ctx.lease_ms;
        break;
    case E_GRANT:
        W.key[id].present = true;
        W.key[id].lease = r->offset;
        W.key[id].expiry = W.now + W.nodes[id].ctx.lease_ms;
        r->flag = true;
        trace("etcd: node %d's key created", id);
        watch_all(false, id, true);
        break;
    case E_CAS: etcd_cas(r); break;
    case E_REFRESH:
    case E_SNAPSHOT:
        r->ps = W.ps;
        r->rev = W.ps_rev;
        r->hw = (uint64_t)W.rev; /* the snapshot's revision */
        r->flag = true;
        break;
    case E_READ: r->flag = true; break;
    case E_REPORT:
        W.rep[id].present = true;
        W.rep[id].epoch = r->epoch;
        W.rep[id].end = r->offset;
        return;
    case E_CLEAR: memset(W.rep, 0, sizeof W.rep); return;
    }
    item_t a = *r;
    a.kind = Q_REPLY;
    a.t = W.now + rnd_in(1, 10);
    push(a);
}

static void etcd_request(node_t *nd, int id, item_t it)
{
    it.kind = Q_ETCD;
    it.node = id;
    it.inc = nd->inc;
    it.sent = local(nd);
    if (nd->etcd_cut) { /* not applied: it fails after the client's timeout */
        if (it.type == E_CAS || it.type == E_REFRESH || it.type == E_READ ||
            it.type == E_SNAPSHOT) {
            it.kind = Q_REPLY;
            it.flag = false;
            it.t = W.now + 500;
            push(it);
        }
        return;
    }
    it.t = W.now + rnd_in(1, 10);
    push(it);
}

/* ---- node to node ---- */

static void send_msg(int from, int to, item_t m)
{
    node_t *nd = &W.nodes[from];
    m.kind = Q_MSG;
    m.from = from;
    m.node = to;
    m.inc = W.nodes[to].inc;
    if (!W.nodes[to].up || W.cut[from][to]) {
        /* the connection times out: the sender's link goes */
        item_t c = at(Q_MSG, from, rnd_in(100, 300));
        c.type = M_CLOSE;
        c.from = to;
        c.link = m.link;
        c.inc = nd->inc;
        push(c);
        return;
    }
    m.t = W.now + rnd_in(1, 20);
    /* a link is an ordered stream: never before what was sent on it earlier */
    if (m.t <= W.last[from][to])
        m.t = W.last[from][to] + 1;
    W.last[from][to] = m.t;
    push(m);
    if (m.type == M_ATTACH && chance(20)) { /* a duplicate attach (a retried open) */
        m.t += rnd_in(1, 30);
        push(m);
    }
}

static void break_link(int a, int b, uint64_t link)
{
    for (int k = 0; k < 2; k++) {
        int at_node = k ? b : a, peer = k ? a : b;
        if (!W.nodes[at_node].up)
            continue;
        item_t c = at(Q_MSG, at_node, rnd_in(50, 300));
        c.type = M_CLOSE;
        c.from = peer;
        c.link = link;
        push(c);
    }
}

/* ---- the log ---- */

static uint32_t last_epoch(const node_t *nd)
{
    return nd->end ? nd->lep[nd->end - 1] : 0;
}

/* Where epochs <= e end in nd's log, and the largest such epoch (epoch.c's search). */
static void epoch_end(const node_t *nd, uint32_t e, uint64_t *end, uint32_t *largest)
{
    uint64_t o = 0;
    while (o < nd->synced && nd->lep[o] <= e)
        o++;
    *end = o;
    *largest = o ? nd->lep[o - 1] : 0;
}

/* ---- the core, driven ---- */

static void step(int id, mqd_rsm_ev_t *ev, const item_t *it);

static void stable_ev(int id)
{
    node_t *nd = &W.nodes[id];
    mqd_rsm_ev_t ev = {.type = MQD_RSM_EV_STABLE, .offset = nd->synced, .end = nd->end};
    step(id, &ev, NULL);
}

static void check_agree(node_t *nd, uint64_t upto, int id)
{
    if (W.unclean_done)
        return; /* an unclean election may lose and rewrite what was committed */
    for (uint64_t o = nd->agreed_upto; o < upto; o++)
        if (W.is_committed[o] && W.committed[o] != nd->lval[o])
            violation("node %d holds %" PRIu64 " at %" PRIu64
                      " below its watermark, committed %" PRIu64,
                      id, nd->lval[o], o, W.committed[o]);
    if (upto > nd->agreed_upto)
        nd->agreed_upto = upto;
}

/* A leader of epoch E holds every record acknowledged in an epoch up to E (a state of an
 * older epoch delivered late may make a node lead briefly: it cannot acknowledge, and the
 * records of newer epochs are not its). */
static void check_holds_acked(int id, const char *when)
{
    node_t *nd = &W.nodes[id];
    if (W.unclean_done)
        return;
    for (uint64_t o = 0; o < MAXLOG; o++)
        if (W.is_acked[o] && W.acked_ep[o] <= nd->s.lead_epoch &&
            (o >= nd->end || nd->lval[o] != W.acked[o])) {
            violation("acknowledged record %" PRIu64 " at %" PRIu64 " (epoch %u) lost: node %d %s "
                      "(epoch %u) %s",
                      W.acked[o], o, W.acked_ep[o], id, when, nd->s.ps.epoch,
                      o >= nd->end ? "does not have it" : "holds another");
            return;
        }
}

static void ack(int id, const pend_t *p)
{
    node_t *nd = &W.nodes[id];
    if (p->epoch < 4096) {
        if (W.ack_node[p->epoch] && W.ack_node[p->epoch] != id)
            violation("nodes %d and %d both acknowledge in epoch %u", W.ack_node[p->epoch], id,
                      p->epoch);
        W.ack_node[p->epoch] = id;
    }
    if (W.is_acked[p->off] && W.acked[p->off] != p->val && !W.unclean_done)
        violation("offset %" PRIu64 " acknowledged twice: %" PRIu64 " and %" PRIu64, p->off,
                  W.acked[p->off], p->val);
    if (nd->lval[p->off] != p->val || p->off >= nd->end)
        violation("node %d acknowledges %" PRIu64 " it does not hold", id, p->val);
    W.is_acked[p->off] = true;
    W.acked[p->off] = p->val;
    W.acked_ep[p->off] = p->epoch;
    W.n_acked++;
    trace("ack %" PRIu64 " at %" PRIu64 " by node %d (epoch %u, acks %s)", p->val, p->off, id,
          p->epoch, p->acks == MQD_ACKS_ALL ? "all" : "quorum");
    /* a newer leader elected meanwhile must hold it too */
    for (int j = 1; j <= W.n; j++)
        if (j != id && W.nodes[j].up && W.nodes[j].s.role == MQD_RSM_ROLE_LEADER &&
            W.nodes[j].s.lead_epoch > p->epoch && !W.unclean_done &&
            (p->off >= W.nodes[j].end || W.nodes[j].lval[p->off] != p->val))
            violation("node %d acknowledged %" PRIu64 " in epoch %u after node %d leads epoch %u "
                      "without it",
                      id, p->val, p->epoch, j, W.nodes[j].s.lead_epoch);
}

static void set_ends(int id, uint64_t hw, uint64_t qend)
{
    node_t *nd = &W.nodes[id];
    for (uint64_t o = nd->committed_upto; o < hw && o < nd->end; o++) {
        if (W.is_committed[o] && W.committed[o] != nd->lval[o] && !W.unclean_done)
            violation("offset %" PRIu64 " committed as %" PRIu64
                      ", node %d's watermark passes %" PRIu64,
                      o, W.committed[o], id, nd->lval[o]);
        W.is_committed[o] = true;
        W.committed[o] = nd->lval[o];
    }
    if (hw > nd->committed_upto)
        nd->committed_upto = hw;
    size_t k = 0;
    for (size_t i = 0; i < nd->npend; i++) {
        pend_t *p = &nd->pend[i];
        if (p->off < (p->acks == MQD_ACKS_ALL ? hw : qend))
            ack(id, p);
        else
            nd->pend[k++] = *p;
    }
    nd->npend = k;
}

static void pump(int id)
{
    node_t *nd = &W.nodes[id];
    if (nd->s.role != MQD_RSM_ROLE_LEADER)
        return;
    for (int j = 1; j <= W.n; j++) {
        lk_t *l = &nd->lk[j];
        if (!l->link)
            continue;
        while (l->next_send < nd->end || l->hw_sent != nd->s.hw) {
            item_t m = at(Q_MSG, j, 0);
            m.type = M_RUN;
            m.link = l->link;
            m.offset = l->next_send;
            m.hw = nd->s.hw;
            while (m.count < RUN_MAX && l->next_send + m.count < nd->end) {
                m.ep[m.count] = nd->lep[l->next_send + m.count];
                m.val[m.count] = nd->lval[l->next_send + m.count];
                m.count++;
            }
            l->next_send += m.count;
            l->hw_sent = m.hw;
            send_msg(id, j, m);
            if (!W.nodes[j].up || W.cut[id][j])
                break;
        }
    }
}

static void perform(int id, const mqd_rsm_act_t *a, const mqd_rsm_ev_t *ev, const item_t *it)
{
    node_t *nd = &W.nodes[id];
    item_t m = at(Q_MSG, 0, 0);
    switch (a->type) {
    case MQD_RSM_ACT_LEAD:
        memset(nd->lk, 0, sizeof nd->lk);
        nd->committed_upto = nd->s.hw;
        check_holds_acked(id, "elected");
        break;
    case MQD_RSM_ACT_FOLLOW: nd->fleader = a->node; break;
    case MQD_RSM_ACT_NO_ROLE: break;
    case MQD_RSM_ACT_CAS:
        m.type = E_CAS, m.ps = a->ps, m.rev = a->mod_rev;
        etcd_request(nd, id, m);
        break;
    case MQD_RSM_ACT_REFRESH: m.type = E_REFRESH, etcd_request(nd, id, m); break;
    case MQD_RSM_ACT_READ_REPORTS: m.type = E_READ, etcd_request(nd, id, m); break;
    case MQD_RSM_ACT_REPORT_END:
        m.type = E_REPORT, m.epoch = a->epoch, m.offset = a->offset;
        etcd_request(nd, id, m);
        break;
    case MQD_RSM_ACT_CLEAR_REPORTS: m.type = E_CLEAR, etcd_request(nd, id, m); break;
    case MQD_RSM_ACT_SET_ENDS: set_ends(id, a->hw, a->offset); break;
    case MQD_RSM_ACT_SET_HW: check_agree(nd, a->hw < nd->end ? a->hw : nd->end, id); break;
    case MQD_RSM_ACT_REJECT_WAITING: {
        size_t k = 0;
        for (size_t i = 0; i < nd->npend; i++)
            if (nd->pend[i].acks < a->acks)
                nd->pend[k++] = nd->pend[i];
        nd->npend = k;
        break;
    }
    case MQD_RSM_ACT_REJECT_SEND: break;
    case MQD_RSM_ACT_DROP_LINK:
        for (int j = 1; j <= W.n; j++)
            if (nd->lk[j].link && (!a->node || a->node == (uint32_t)j)) {
                m.type = M_CLOSE, m.link = nd->lk[j].link;
                send_msg(id, j, m);
                nd->lk[j].link = 0;
            }
        break;
    case MQD_RSM_ACT_ACCEPT_LINK:
        nd->lk[a->node] = (lk_t){.link = ev->link, .next_send = a->offset, .hw_sent = UINT64_MAX};
        break;
    case MQD_RSM_ACT_REFUSE_LINK:
        m.type = M_REFUSE, m.link = ev->link, m.cond = a->cond, m.epoch = a->epoch,
        m.offset = a->offset;
        send_msg(id, (int)a->node, m);
        break;
    case MQD_RSM_ACT_ATTACH:
        nd->flink = ++W.next_link;
        m.type = M_ATTACH, m.link = nd->flink, m.offset = a->offset, m.epoch = a->epoch;
        m.last_epoch = last_epoch(nd);
        send_msg(id, (int)a->node, m);
        break;
    case MQD_RSM_ACT_DETACH:
    case MQD_RSM_ACT_RESYNC:
        if (nd->flink) {
            m.type = M_CLOSE, m.link = nd->flink, m.flag = a->flag;
            send_msg(id, (int)nd->fleader, m);
        }
        nd->flink = 0;
        break;
    case MQD_RSM_ACT_APPEND:
        for (uint32_t i = 0; i < it->count && nd->end < MAXLOG; i++) {
            nd->lep[nd->end] = it->ep[i];
            nd->lval[nd->end++] = it->val[i];
        }
        stable_ev(id); /* the log's end moved (its stable offset at the next fsync) */
        break;
    case MQD_RSM_ACT_SETTLE:
        m.type = M_SETTLE, m.link = nd->flink, m.offset = a->offset;
        send_msg(id, (int)nd->fleader, m);
        break;
    case MQD_RSM_ACT_TRUNCATE: {
        nd->end = a->offset < nd->end ? a->offset : nd->end;
        if (nd->synced > nd->end)
            nd->synced = nd->end;
        if (nd->agreed_upto > nd->end)
            nd->agreed_upto = nd->end;
        item_t d = at(Q_TRUNC_DONE, id, rnd_in(1, 20));
        push(d);
        break;
    }
    case MQD_RSM_ACT_RESET: violation("reset without retention"); break;
    case MQD_RSM_ACT_LOG: trace("  node %d: %s", id, a->text); break;
    }
}

static void step(int id, mqd_rsm_ev_t *ev, const item_t *it)
{
    node_t *nd = &W.nodes[id];
    static mqd_rsm_out_t out;
    ev->now_ms = local(nd);
    out.n = 0;
    out.overflow = false;
    mqd_rsm_step(&nd->ctx, &nd->s, ev, &out);
    W.steps++;
    if (out.overflow)
        violation("node %d: too many actions", id);
    if ((tracing || ringing) && (tracing || out.n)) {
        char acts[160] = "";
        size_t len = 0;
        for (size_t i = 0; i < out.n && len < sizeof acts - 20; i++)
            if (out.a[i].type != MQD_RSM_ACT_LOG)
                len += (size_t)snprintf(acts + len, sizeof acts - len, " %s",
                                        mqd_rsm_act_name(out.a[i].type));
        if (len || tracing)
            trace("node %d %s node=%u off=%" PRIu64 " ->%s", id, mqd_rsm_ev_name(ev->type),
                  ev->node, ev->offset, acts);
    }
    mqd_rsm_act_t acts[MQD_RSM_MAX_ACTIONS];
    size_t n = out.n;
    memcpy(acts, out.a, n * sizeof *acts); /* perform may step again */
    for (size_t i = 0; i < n; i++)
        perform(id, &acts[i], ev, it);
    pump(id);
}

/* ---- what happens ---- */

static void start_node(int id)
{
    node_t *nd = &W.nodes[id];
    nd->up = true;
    nd->inc++;
    mqd_rsm_init(&nd->s);
    nd->ctx.n_alive = 0;
    nd->ctx.controller = false;
    nd->registered = false;
    nd->snap_out = false;
    nd->lease_live = false;
    nd->flink = 0;
    nd->npend = 0;
    nd->agreed_upto = 0;
    nd->committed_upto = 0;
    nd->watch_t = 0;
    memset(nd->lk, 0, sizeof nd->lk);
    stable_ev(id); /* the log is open before anything else happens */
    item_t g = at(Q_ETCD, id, 0);
    g.type = E_GRANT;
    g.offset = nd->lease = ++W.next_lease;
    etcd_request(nd, id, g);
    push(at(Q_TICK, id, rnd_in(1, TICK_MS)));
    push(at(Q_FSYNC, id, rnd_in(1, 10)));
    push(at(Q_KEEPALIVE, id, nd->ctx.lease_ms / 3));
}

static void crash(int id, int64_t down_ms)
{
    node_t *nd = &W.nodes[id];
    trace("CRASH node %d (log %" PRIu64 " -> %" PRIu64 "), back in %" PRId64 " ms", id, nd->end,
          nd->synced, down_ms);
    nd->up = false;
    nd->inc++;
    nd->end = nd->synced; /* what was not synced is gone */
    for (int j = 1; j <= W.n; j++) {
        if (nd->lk[j].link)
            break_link(id, j, nd->lk[j].link);
    }
    if (nd->flink)
        break_link(id, (int)nd->fleader, nd->flink);
    nd->flink = 0;
    push(at(Q_RESTART, id, down_ms));
}

static void update_controller(node_t *nd, int id)
{
    uint32_t low = 0;
    for (uint32_t i = 0; i < nd->ctx.n_alive; i++)
        if (!low || nd->ctx.alive[i] < low)
            low = nd->ctx.alive[i];
    nd->ctx.controller = low == (uint32_t)id;
}

/* The snapshot of a start (once its lease is there): the watch's events count after it. */
static void snapshot(node_t *nd, int id)
{
    if (nd->registered || nd->snap_out)
        return;
    item_t s = at(Q_ETCD, id, 0);
    s.type = E_SNAPSHOT;
    nd->snap_out = true;
    etcd_request(nd, id, s);
}

static void on_reply(int id, item_t *r)
{
    node_t *nd = &W.nodes[id];
    mqd_rsm_ev_t ev = {0};
    switch ((etype_t)r->type) {
    case E_KEEPALIVE:
        if (r->offset != nd->lease)
            return;
        if (r->flag) {
            nd->deadline = r->sent + nd->ctx.lease_ms; /* from the send: never later than etcd */
            if (!nd->lease_live && nd->deadline > local(nd)) { /* it had not expired in etcd */
                nd->lease_live = true;
                snapshot(nd, id);
                ev.type = MQD_RSM_EV_LEASE;
                ev.flag = true;
                step(id, &ev, NULL);
            }
        } else { /* the lease is gone: a new one, a new key */
            item_t g = at(Q_ETCD, id, 0);
            g.type = E_GRANT;
            g.offset = nd->lease = ++W.next_lease;
            etcd_request(nd, id, g);
        }
        return;
    case E_GRANT:
        if (r->offset != nd->lease)
            return;
        nd->deadline = r->sent + nd->ctx.lease_ms;
        nd->lease_live = true;
        snapshot(nd, id);
        ev.type = MQD_RSM_EV_LEASE;
        ev.flag = true;
        return step(id, &ev, NULL);
    case E_SNAPSHOT:
        if (nd->registered)
            return;
        nd->snap_out = false;
        if (!r->flag) /* asked again, as a watch that could not start */
            return snapshot(nd, id);
        nd->registered = true;
        nd->snap_rev = (int64_t)r->hw;
        nd->ctx.n_alive = 0;
        for (int j = 1; j <= W.n; j++)
            if (W.key[j].present)
                mqd_rsm_set_alive(&nd->ctx, (uint32_t)j, true);
        update_controller(nd, id);
        stable_ev(id);
        ev.type = MQD_RSM_EV_STATE, ev.flag = true, ev.ps = r->ps, ev.mod_rev = r->rev;
        return step(id, &ev, NULL);
    case E_CAS:
        ev.type = MQD_RSM_EV_CAS, ev.flag = r->flag, ev.mod_rev = r->rev;
        step(id, &ev, NULL);
        if (!r->flag && !nd->etcd_cut) { /* the failed txn's answer carries the key */
            mqd_rsm_ev_t st = {.type = MQD_RSM_EV_STATE, .ps = W.ps, .mod_rev = W.ps_rev};
            step(id, &st, NULL);
        }
        return;
    case E_REFRESH:
        ev.type = MQD_RSM_EV_REFRESHED, ev.flag = r->flag, ev.ps = r->ps, ev.mod_rev = r->rev;
        return step(id, &ev, NULL);
    case E_READ:
        for (int j = 1; r->flag && j <= W.n; j++)
            if (W.rep[j].present) {
                mqd_rsm_ev_t rep = {.type = MQD_RSM_EV_REPORT,
                                    .node = (uint32_t)j,
                                    .epoch = W.rep[j].epoch,
                                    .offset = W.rep[j].end};
                step(id, &rep, NULL);
            }
        ev.type = MQD_RSM_EV_REPORTS_READ;
        return step(id, &ev, NULL);
    default: return;
    }
}

static void on_watch(int id, item_t *w)
{
    node_t *nd = &W.nodes[id];
    if (nd->etcd_cut || !nd->registered) { /* held until etcd is reached, the snapshot read */
        w->t = W.now + 50;
        nd->watch_t = w->t;
        push(*w);
        return;
    }
    if (w->rev <= nd->snap_rev)
        return; /* the snapshot had it */
    mqd_rsm_ev_t ev = {0};
    if (w->flag) {
        ev.type = MQD_RSM_EV_STATE, ev.ps = w->ps, ev.mod_rev = w->rev;
        return step(id, &ev, NULL);
    }
    mqd_rsm_set_alive(&nd->ctx, (uint32_t)w->from, w->cond != 0);
    update_controller(nd, id);
    if (w->cond)
        return;
    ev.type = MQD_RSM_EV_NODE_LEFT, ev.node = (uint32_t)w->from;
    step(id, &ev, NULL);
}

static void on_msg(int id, item_t *m)
{
    node_t *nd = &W.nodes[id];
    mqd_rsm_ev_t ev = {.node = (uint32_t)m->from, .link = m->link};
    switch ((mtype_t)m->type) {
    case M_ATTACH:
        ev.type = MQD_RSM_EV_ATTACH, ev.offset = m->offset, ev.epoch = m->epoch;
        ev.last_epoch = m->last_epoch;
        epoch_end(nd, m->last_epoch, &ev.epoch_end, &ev.largest);
        return step(id, &ev, m);
    case M_RUN:
        if (m->link != nd->flink)
            return;
        ev.type = MQD_RSM_EV_RUN, ev.offset = m->offset, ev.count = m->count, ev.hw = m->hw;
        for (uint32_t i = 0; i < m->count; i++)
            if (m->ep[i] > ev.epoch)
                ev.epoch = m->ep[i];
        return step(id, &ev, m);
    case M_SETTLE: ev.type = MQD_RSM_EV_PROGRESS, ev.offset = m->offset; return step(id, &ev, m);
    case M_CLOSE:
        if (nd->lk[m->from].link == m->link) { /* a follower's link went */
            nd->lk[m->from].link = 0;
            ev.type = MQD_RSM_EV_LEAVE, ev.flag = m->flag;
            step(id, &ev, m);
        }
        if (nd->flink == m->link) {
            nd->flink = 0;
            ev.type = MQD_RSM_EV_LINK_DOWN, ev.cond = MQD_RSM_COND_CLOSED;
            step(id, &ev, m);
        }
        return;
    case M_REFUSE:
        if (nd->flink != m->link)
            return;
        nd->flink = 0;
        ev.type = MQD_RSM_EV_LINK_DOWN, ev.cond = m->cond, ev.epoch = m->epoch;
        ev.epoch_end = m->offset, ev.log_start = m->offset;
        if (m->cond == MQD_RSM_COND_DIVERGED) {
            uint32_t largest;
            epoch_end(nd, m->epoch, &ev.offset, &largest);
        }
        return step(id, &ev, m);
    }
}

static void produce(void)
{
    int cands[MAXN], nc = 0;
    for (int i = 1; i <= W.n; i++)
        if (W.nodes[i].up && W.nodes[i].s.role == MQD_RSM_ROLE_LEADER)
            cands[nc++] = i;
    if (!nc || W.next_val >= MAXLOG - 64)
        return;
    int id = cands[rnd() % (uint64_t)nc];
    node_t *nd = &W.nodes[id];
    uint32_t acks = W.quorum && chance(300) ? MQD_ACKS_QUORUM : MQD_ACKS_ALL;
    mqd_rsm_ev_t ev = {.type = MQD_RSM_EV_SEND, .acks = acks};
    static mqd_rsm_out_t out;
    out.n = 0;
    ev.now_ms = local(nd);
    mqd_rsm_step(&nd->ctx, &nd->s, &ev, &out);
    W.n_sends++;
    if (out.n || nd->end >= MAXLOG || nd->npend >= MAXPEND)
        return; /* refused */
    uint64_t val = ++W.next_val;
    nd->pend[nd->npend++] =
        (pend_t){.off = nd->end, .val = val, .acks = acks, .epoch = nd->s.lead_epoch};
    nd->lep[nd->end] = nd->s.lead_epoch;
    nd->lval[nd->end++] = val;
    trace("send %" PRIu64 " to node %d at %" PRIu64, val, id, nd->end - 1);
    stable_ev(id);
}

static void consume(void)
{
    for (int i = 1; i <= W.n; i++) {
        node_t *nd = &W.nodes[i];
        if (!nd->up || nd->s.role != MQD_RSM_ROLE_LEADER || !mqd_rsm_may_ack(&nd->ctx, &nd->s))
            continue;
        uint64_t upto = nd->s.hw < nd->end ? nd->s.hw : nd->end;
        for (uint64_t o = W.cpos; o < upto; o++) {
            if (W.is_committed[o] && W.committed[o] != nd->lval[o] && !W.unclean_done)
                violation("the consumer reads %" PRIu64 " at %" PRIu64 " from node %d, %" PRIu64
                          " was read or committed there before",
                          nd->lval[o], o, i, W.committed[o]);
            W.is_committed[o] = true; /* what a consumer read must never change */
            W.committed[o] = nd->lval[o];
        }
        if (upto > W.cpos)
            W.cpos = upto; /* its offset only goes forward */
        return;
    }
}

static void fault(void)
{
    int id = (int)rnd_in(1, W.n), other = (int)rnd_in(1, W.n);
    node_t *nd = &W.nodes[id];
    switch (rnd() % 13) {
    case 0:
    case 1:
    case 2:
    case 3:
        if (nd->up)
            crash(id, rnd_in(50, 3000));
        break;
    case 4: /* a power cut: every node at once, each back after its own while */
        trace("POWER CUT");
        for (int i = 1; i <= W.n; i++)
            if (W.nodes[i].up)
                crash(i, rnd_in(100, 2500));
        break;
    case 5:
    case 6:
        if (!nd->etcd_cut) {
            nd->etcd_cut = true;
            trace("CUT node %d from etcd", id);
            push(at(Q_HEAL_ETCD, id, rnd_in(200, 5000)));
        }
        break;
    case 7:
    case 8:
        if (other != id && !W.cut[id][other]) {
            W.cut[id][other] = W.cut[other][id] = true;
            trace("PARTITION %d | %d", id, other);
            if (nd->flink && nd->fleader == (uint32_t)other)
                break_link(id, other, nd->flink);
            if (W.nodes[other].flink && W.nodes[other].fleader == (uint32_t)id)
                break_link(id, other, W.nodes[other].flink);
            item_t h = at(Q_HEAL_NET, id, rnd_in(200, 3000));
            h.from = other;
            push(h);
        }
        break;
    default:
        if (nd->up && nd->flink) {
            trace("BREAK node %d's fetch link", id);
            break_link(id, (int)nd->fleader, nd->flink);
        }
        break;
    }
}

static void heal_all(void)
{
    trace("HEAL everything");
    memset(W.cut, 0, sizeof W.cut);
    for (int i = 1; i <= W.n; i++)
        W.nodes[i].etcd_cut = false;
}

static void happen(item_t *it)
{
    node_t *nd = it->node ? &W.nodes[it->node] : NULL;
    int id = it->node;
    bool node_item = it->kind != Q_PRODUCE && it->kind != Q_CONSUME && it->kind != Q_FAULT &&
                     it->kind != Q_HEAL_ALL && it->kind != Q_ETCD && it->kind != Q_RESTART &&
                     it->kind != Q_HEAL_ETCD && it->kind != Q_HEAL_NET;
    if (node_item && (!nd->up || nd->inc != it->inc))
        return; /* meant for a process that is gone */
    mqd_rsm_ev_t ev = {0};
    switch (it->kind) {
    case Q_TICK:
        if (nd->lease_live && local(nd) >= nd->deadline) {
            nd->lease_live = false;
            ev.type = MQD_RSM_EV_LEASE;
            step(id, &ev, NULL);
        }
        ev.type = MQD_RSM_EV_TICK;
        step(id, &ev, NULL);
        push(at(Q_TICK, id, TICK_MS));
        break;
    case Q_FSYNC:
        if (nd->synced < nd->end) {
            nd->synced = nd->end;
            stable_ev(id);
        }
        push(at(Q_FSYNC, id, rnd_in(2, 40)));
        break;
    case Q_KEEPALIVE: {
        item_t k = at(Q_ETCD, id, 0);
        k.type = E_KEEPALIVE;
        k.offset = nd->lease;
        etcd_request(nd, id, k);
        push(at(Q_KEEPALIVE, id, nd->ctx.lease_ms / 3));
        break;
    }
    case Q_ETCD: etcd_apply(it); break;
    case Q_REPLY:
        if (nd->etcd_cut && it->flag && it->type != E_KEEPALIVE && it->type != E_GRANT) {
            it->flag = false; /* the answer is lost: the client times out */
            it->t = W.now + 500;
            push(*it);
            break;
        }
        if (!nd->etcd_cut || !it->flag)
            on_reply(id, it);
        break;
    case Q_WATCH: on_watch(id, it); break;
    case Q_MSG: on_msg(id, it); break;
    case Q_RESTART:
        if (!nd->up) {
            trace("RESTART node %d (log %" PRIu64 ")", id, nd->end);
            start_node(id);
        }
        break;
    case Q_TRUNC_DONE:
        ev.type = MQD_RSM_EV_TRUNCATED, ev.end = nd->end;
        step(id, &ev, NULL);
        stable_ev(id);
        break;
    case Q_PRODUCE:
        produce();
        push(at(Q_PRODUCE, 0, rnd_in(3, 25)));
        break;
    case Q_CONSUME:
        consume();
        push(at(Q_CONSUME, 0, 50));
        break;
    case Q_FAULT:
        if (W.now < RUN_MS) {
            fault();
            push(at(Q_FAULT, 0, rnd_in(100, 900)));
        }
        break;
    case Q_HEAL_ETCD: nd->etcd_cut = false, trace("HEAL node %d's etcd link", id); break;
    case Q_HEAL_NET:
        W.cut[id][it->from] = W.cut[it->from][id] = false;
        trace("HEAL %d | %d", id, it->from);
        break;
    case Q_HEAL_ALL: heal_all(); break;
    }
}

/* ---- one seed ---- */

static bool run_seed(uint64_t seed, bool quiet)
{
    memset(&W, 0, sizeof W);
    queue_reset();
    ring_n = 0;
    rng_state = seed;
    seed_now = seed;
    W.n = (int)rnd_in(3, MAXN);
    W.unclean = chance(100);
    W.quorum = quorum_sends;
    uint32_t min_isr = (uint32_t)rnd_in(1, 2), lag = (uint32_t)rnd_in(300, 1500);
    uint32_t lease = (uint32_t)rnd_in(1000, 3000);
    W.ps.leader = 1;
    W.ps.epoch = 1;
    W.ps.n_replicas = W.ps.n_isr = (uint32_t)W.n;
    for (int i = 0; i < W.n; i++)
        W.ps.replicas[i] = W.ps.isr[i] = (uint32_t)(i + 1);
    W.ps_rev = W.rev = 1;
    for (int i = 1; i <= W.n; i++) {
        node_t *nd = &W.nodes[i];
        nd->ctx = (mqd_rsm_ctx_t){.self = (uint32_t)i,
                                  .replica_lag_ms = lag,
                                  .lease_ms = lease,
                                  .cand_wait_ms = 1000,
                                  .reattach_ms = 500,
                                  .min_isr = min_isr,
                                  .unclean = W.unclean};
        nd->clock_off = rnd_in(0, 100000);
        start_node(i);
    }
    trace("seed %" PRIu64 ": %d nodes, lag %u, lease %u, min_isr %u, unclean %d", seed, W.n, lag,
          lease, min_isr, W.unclean);
    push(at(Q_PRODUCE, 0, 500));
    push(at(Q_CONSUME, 0, 500));
    push(at(Q_FAULT, 0, rnd_in(300, 1000)));
    push(at(Q_HEAL_ALL, 0, RUN_MS));
    while (nq && !W.failed) {
        item_t it = pop();
        if (it.t > RUN_MS + HEAL_MS)
            break;
        W.now = it.t;
        etcd_expire();
        happen(&it);
    }
    /* everything healed and restarted long ago: the partition is served again */
    if (!W.failed) {
        int leaders = 0;
        for (int i = 1; i <= W.n; i++)
            if (W.nodes[i].up && W.nodes[i].s.role == MQD_RSM_ROLE_LEADER &&
                mqd_rsm_may_ack(&W.nodes[i].ctx, &W.nodes[i].s)) {
                leaders++;
                check_holds_acked(i, "leads at the end");
            }
        if (leaders != 1 && !W.unclean_done && !W.failed)
            violation("%d acknowledging leaders once everything healed", leaders);
    }
    if (W.failed && !quiet && !tracing && !ringing) {
        ringing = true; /* again, remembering its last events */
        run_seed(seed, false);
        ringing = false;
        return false;
    }
    if (W.failed && !quiet) {
        size_t first = ring_n > TRACE_RING ? ring_n - TRACE_RING : 0;
        if (!tracing) {
            printf("--- seed %" PRIu64 ": the last %zu events ---\n", seed, ring_n - first);
            for (size_t i = first; i < ring_n; i++)
                puts(ring[i % TRACE_RING]);
        }
        printf("seed %" PRIu64 " FAILED at step %" PRIu64 " (t=%" PRId64 " ms): %s\n"
               "replay: sim_rsm --seed %" PRIu64 " --trace\n",
               seed, W.steps, W.now, W.why, seed);
    }
    return !W.failed;
}

static const struct {
    const char *name;
    unsigned bit;
} BUGS[] = {
    {"elect-first", MQD_RSM_BUG_ELECT_FIRST},   {"skip-divergence", MQD_RSM_BUG_SKIP_DIVERGENCE},
    {"ack-unsynced", MQD_RSM_BUG_ACK_UNSYNCED}, {"hw-from-log", MQD_RSM_BUG_HW_FROM_LOG},
    {"unclean", MQD_RSM_BUG_UNCLEAN},           {"stale-fetch", MQD_RSM_BUG_STALE_FETCH},
    {"same-epoch", MQD_RSM_BUG_SAME_EPOCH},     {"state-isr", MQD_RSM_BUG_STATE_ISR},
    {"rejoin-at-hw", MQD_RSM_BUG_REJOIN_HW},
};

int main(int argc, char **argv)
{
    uint64_t from = 1, n = 2000, one = 0;
    bool has_one = false, bug = false;
    const char *env = getenv("SIM_RSM_SEEDS"), *slow = getenv("MQD_TEST_SLOW");
    if (slow && atoi(slow) >= 2)
        n = 1000; /* the ASan build: about 12 s of CPU */
    if (env)
        n = strtoull(env, NULL, 10);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--trace"))
            tracing = true;
        else if (!strcmp(a, "--quorum"))
            quorum_sends = true;
        else if (!strcmp(a, "--seed") && v)
            one = strtoull(v, NULL, 10), has_one = true, i++;
        else if (!strcmp(a, "--seeds") && v)
            n = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--from") && v)
            from = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--bug") && v) {
            size_t k;
            for (k = 0; k < sizeof BUGS / sizeof *BUGS && strcmp(BUGS[k].name, v); k++)
                ;
            if (k == sizeof BUGS / sizeof *BUGS) {
                fprintf(stderr, "sim_rsm: no bug %s\n", v);
                return 2;
            }
            mqd_rsm_bugs |= BUGS[k].bit;
            bug = true;
            i++;
        } else {
            fprintf(stderr, "usage: sim_rsm [--seed S [--trace]] [--seeds N] [--from S] [--quorum] "
                            "[--bug NAME]\n");
            return 2;
        }
    }
    if (has_one)
        from = one, n = 1;
    uint64_t bad = 0, acked = 0, sends = 0, steps = 0;
    for (uint64_t s = from; s < from + n; s++) {
        bool ok = run_seed(s, false);
        acked += W.n_acked;
        sends += W.n_sends;
        steps += W.steps;
        if (!ok) {
            bad++;
            if (bug) {
                printf("the bug is found by seed %" PRIu64 " at step %" PRIu64 "\n", s, W.steps);
                return 0;
            }
            if (bad >= 3)
                break;
        }
    }
    printf("sim_rsm: %" PRIu64 " seeds from %" PRIu64 ", %" PRIu64 " core steps, %" PRIu64
           " sends, %" PRIu64 " acknowledged, %" PRIu64 " failed\n",
           n, from, steps, sends, acked, bad);
    if (bug) {
        printf("the bug was not found in these seeds\n");
        return 1;
    }
    return bad ? 1 : 0;
}
