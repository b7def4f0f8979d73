/* cluster: this node's membership. Under one lease it registers /<name>/nodes/<id> and
 * campaigns for /<name>/controller with "create if absent"; two watches keep the view.
 * The node is controller exactly while the controller key names it *under its current
 * lease*: a key left by an earlier life of the same node id does not count. Losing the
 * lease (etcd answers a keepalive without TTL, or no answer within the TTL) drops the
 * role at once; the node then grants a new lease and registers again. */
#include "config.h"
#include "cluster/cluster_int.h"
#include "util/util.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REVOKE_TIMEOUT_MS 1500 /* a clean stop waits this long for etcd at most */

struct mqd_cluster {
    struct event_base *base;
    const mqd_conf_t *conf;
    mqd_cluster_cbs_t cbs;
    mqd_etcd_t *etcd;
    char nodes_prefix[160], node_key[192], ctl_key[160];
    char *node_value, *ctl_value;
    int64_t ttl_s;
    int64_t lease;        /* 0: none */
    uint64_t deadline_ns; /* the lease ends by then unless a keepalive answers */
    uint64_t gen;         /* bumped per lease: answers about an older one are ignored */
    bool registered, grant_out, put_out, ka_out, campaign_out, closing;
    bool is_controller, ctl_known;
    int64_t ctl_lease; /* lease of the controller key in the view */
    mqd_cluster_view_t view;
    size_t cap_nodes;
    char last_log[512];
    mqd_etcd_watch_t *w_nodes, *w_ctl;
    struct event *ev_tick, *ev_kick;
};

typedef struct op {
    mqd_cluster_t *m;
    uint64_t gen, sent_ns;
} op_t;

static void kick(mqd_cluster_t *m)
{
    event_active(m->ev_kick, EV_TIMEOUT, 0);
}

/* After a failed grant or registration: sooner than the next keepalive tick, so a node
 * is back within a fraction of a second of etcd's return. */
static void kick_later(mqd_cluster_t *m)
{
    struct timeval tv = {0, 250000};
    event_add(m->ev_kick, &tv);
}

static op_t *op_new(mqd_cluster_t *m)
{
    op_t *o = malloc(sizeof *o);
    if (o != NULL)
        *o = (op_t){m, m->gen, mqd_mono_ns()};
    return o;
}

/* Answers that no longer matter: the member is closing or the lease they were for is gone. */
static mqd_cluster_t *op_end(op_t *o, bool *stale)
{
    mqd_cluster_t *m = o->m;
    *stale = m->closing || o->gen != m->gen;
    free(o);
    return m;
}

static void log_view(mqd_cluster_t *m)
{
    char buf[512];
    size_t off =
        (size_t)snprintf(buf, sizeof buf, "controller=%" PRIu32 " nodes=[", m->view.controller);
    bool first = true;
    for (size_t i = 0; i < m->view.n_nodes && off < sizeof buf - 16; i++) {
        if (!m->view.nodes[i].alive)
            continue;
        off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%" PRIu32, first ? "" : ",",
                                m->view.nodes[i].id);
        first = false;
    }
    snprintf(buf + off, sizeof buf - off, "]");
    if (strcmp(buf, m->last_log) == 0)
        return;
    memcpy(m->last_log, buf, sizeof buf);
    MQD_NOTICE("cluster", "view: %s", buf);
}

/* The one place the controller role changes. */
static void update_role(mqd_cluster_t *m)
{
    bool should = m->lease != 0 && !m->closing && m->view.controller == m->conf->node_id &&
                  m->ctl_lease == m->lease;
    if (should == m->is_controller)
        return;
    m->is_controller = should;
    if (should) {
        MQD_NOTICE("cluster", "controller: this node (%" PRIu32 ") since revision %" PRId64,
                   m->conf->node_id, m->view.controller_create_rev);
        if (m->cbs.controller_gained)
            m->cbs.controller_gained(m->cbs.arg, m->view.controller_create_rev);
    } else {
        MQD_WARN("cluster", "controller: this node (%" PRIu32 ") lost the role", m->conf->node_id);
        if (m->cbs.controller_lost)
            m->cbs.controller_lost(m->cbs.arg);
    }
}

static void lease_lost(mqd_cluster_t *m, const char *why)
{
    MQD_WARN("cluster", "lease %" PRIx64 " lost (%s): registering again", (uint64_t)m->lease, why);
    m->gen++;
    m->lease = 0;
    m->registered = m->grant_out = m->put_out = m->ka_out = m->campaign_out = false;
    update_role(m);
    if (m->cbs.lease_lost)
        m->cbs.lease_lost(m->cbs.arg);
    kick(m);
}

static void set_controller(mqd_cluster_t *m, const mqd_etcd_kv_t *kv)
{
    uint32_t id = 0;
    if (kv != NULL && mqd_cluster_ctl_parse(kv->value, kv->value_len, &id) != 0)
        MQD_WARN("cluster", "%s: unreadable value: taken as no controller", m->ctl_key);
    m->view.controller = id;
    m->ctl_lease = id ? kv->lease : 0;
    m->view.controller_create_rev = id ? kv->create_revision : 0;
    m->view.controller_mod_rev = id ? kv->mod_revision : 0;
    m->ctl_known = true;
    update_role(m);
    log_view(m);
}

static void on_campaign(void *arg, const mqd_etcd_reply_t *r)
{
    bool stale;
    mqd_cluster_t *m = op_end(arg, &stale);
    if (stale)
        return;
    m->campaign_out = false;
    if (r->rc != 0)
        return; /* the next tick tries again */
    if (r->succeeded) {
        mqd_etcd_kv_t kv = {.value = m->ctl_value,
                            .value_len = strlen(m->ctl_value),
                            .create_revision = r->revision,
                            .mod_revision = r->revision,
                            .lease = m->lease};
        set_controller(m, &kv);
    } else {
        set_controller(m, r->n_kvs ? &r->kvs[0] : NULL);
    }
}

static void on_resign(void *arg, const mqd_etcd_reply_t *r)
{
    bool stale;
    mqd_cluster_t *m = op_end(arg, &stale);
    if (stale)
        return;
    m->campaign_out = false;
    if (r->rc != 0)
        return;
    set_controller(m, r->succeeded ? NULL : r->n_kvs ? &r->kvs[0] : NULL);
    kick(m); /* campaign */
}

static void campaign(mqd_cluster_t *m)
{
    mqd_etcd_cmp_t cmp = {m->ctl_key, strlen(m->ctl_key), MQD_ETCD_CMP_CREATE, 0};
    mqd_etcd_op_t put = {MQD_ETCD_OP_PUT,      m->ctl_key, m->ctl_value, strlen(m->ctl_key),
                         strlen(m->ctl_value), m->lease,   false};
    mqd_etcd_op_t get = {MQD_ETCD_OP_RANGE, m->ctl_key, NULL, strlen(m->ctl_key), 0, 0, false};
    mqd_etcd_txn_t t = {&cmp, 1, &put, &get, 1, 1};
    op_t *o = op_new(m);
    if (o != NULL && mqd_etcd_txn(m->etcd, &t, on_campaign, o) == 0)
        m->campaign_out = true;
    else
        free(o);
}

/* The controller key names this node under a lease it no longer holds (an earlier lease
 * or an earlier life of this node id): that term is over, since this node already acts as
 * non-controller. Deleting it, if nobody changed it meanwhile (mod_revision compare),
 * starts the next election now instead of after that lease's TTL. */
static void resign_stale(mqd_cluster_t *m)
{
    mqd_etcd_cmp_t cmp = {m->ctl_key, strlen(m->ctl_key), MQD_ETCD_CMP_MOD,
                          m->view.controller_mod_rev};
    mqd_etcd_op_t del = {MQD_ETCD_OP_DELETE, m->ctl_key, NULL, strlen(m->ctl_key), 0, 0, false};
    mqd_etcd_op_t get = {MQD_ETCD_OP_RANGE, m->ctl_key, NULL, strlen(m->ctl_key), 0, 0, false};
    mqd_etcd_txn_t t = {&cmp, 1, &del, &get, 1, 1};
    op_t *o = op_new(m);
    MQD_NOTICE("cluster", "%s names this node under old lease %" PRIx64 ": deleting it", m->ctl_key,
               (uint64_t)m->ctl_lease);
    if (o != NULL && mqd_etcd_txn(m->etcd, &t, on_resign, o) == 0)
        m->campaign_out = true;
    else
        free(o);
}

static void on_put(void *arg, const mqd_etcd_reply_t *r)
{
    bool stale;
    mqd_cluster_t *m = op_end(arg, &stale);
    if (stale)
        return;
    m->put_out = false;
    if (r->rc == 0) {
        m->registered = true;
        MQD_NOTICE("cluster", "registered %s under lease %" PRIx64 " via etcd %s", m->node_key,
                   (uint64_t)m->lease, mqd_etcd_endpoint(m->etcd));
        kick(m);
    } else if (r->rc == MQD_EINVAL && r->grpc_code == 5) { /* NotFound: the lease is gone */
        lease_lost(m, r->error ? r->error : "lease not found");
    } else {
        kick_later(m);
    }
}

static void on_grant(void *arg, const mqd_etcd_reply_t *r)
{
    op_t *o = arg;
    uint64_t sent = o->sent_ns;
    bool stale;
    mqd_cluster_t *m = op_end(o, &stale);
    if (stale)
        return;
    m->grant_out = false;
    if (r->rc != 0 || r->lease_id == 0 || !r->has_ttl) {
        MQD_WARN("cluster", "etcd lease grant failed (%s): retrying",
                 r->error ? r->error : mqd_strerror(r->rc ? r->rc : MQD_ECORRUPT));
        kick_later(m);
        return;
    }
    m->lease = r->lease_id;
    m->deadline_ns = sent + (uint64_t)r->ttl * 1000000000u;
    kick(m);
}

static void on_keepalive(void *arg, const mqd_etcd_reply_t *r)
{
    op_t *o = arg;
    uint64_t sent = o->sent_ns;
    bool stale;
    mqd_cluster_t *m = op_end(o, &stale);
    if (stale)
        return;
    m->ka_out = false;
    if (r->rc != 0)
        return; /* the deadline decides */
    if (!r->has_ttl) {
        lease_lost(m, "etcd answered the keepalive without a TTL: expired");
        return;
    }
    uint64_t d = sent + (uint64_t)r->ttl * 1000000000u;
    if (d > m->deadline_ns)
        m->deadline_ns = d;
}

static int send_grant(mqd_cluster_t *m, op_t *o)
{
    return mqd_etcd_lease_grant(m->etcd, m->ttl_s, on_grant, o);
}

static int send_put(mqd_cluster_t *m, op_t *o)
{
    return mqd_etcd_put(m->etcd, m->node_key, strlen(m->node_key), m->node_value,
                        strlen(m->node_value), m->lease, on_put, o);
}

/* One call of a kind in flight at a time: *out says one is. A call that could not be sent
 * is tried again by the next kick or tick. */
static void send_once(mqd_cluster_t *m, bool *out, int (*send)(mqd_cluster_t *, op_t *))
{
    op_t *o;
    if (*out || (o = op_new(m)) == NULL)
        return;
    if (send(m, o) == 0)
        *out = true;
    else
        free(o);
}

/* Does what the state calls for next; safe to call any time. */
static void step(mqd_cluster_t *m)
{
    if (m->closing)
        return;
    if (m->lease != 0 && mqd_mono_ns() >= m->deadline_ns) {
        lease_lost(m, "no keepalive answer within the TTL");
        return;
    }
    if (m->lease == 0) {
        send_once(m, &m->grant_out, send_grant);
        return;
    }
    if (!m->registered) {
        send_once(m, &m->put_out, send_put);
        return;
    }
    if (!m->ctl_known || m->campaign_out)
        return;
    if (m->view.controller == 0)
        campaign(m);
    else if (m->view.controller == m->conf->node_id && m->ctl_lease != m->lease)
        resign_stale(m);
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
    step(arg);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    mqd_cluster_t *m = arg;
    op_t *o = NULL;
    if (m->lease != 0 && !m->ka_out && (o = op_new(m)) != NULL &&
        mqd_etcd_lease_keepalive(m->etcd, m->lease, on_keepalive, o) == 0)
        m->ka_out = true;
    else
        free(o);
    step(m);
}

static mqd_cluster_node_t *node_slot(mqd_cluster_t *m, uint32_t id)
{
    size_t i = 0;
    while (i < m->view.n_nodes && m->view.nodes[i].id < id)
        i++;
    if (i < m->view.n_nodes && m->view.nodes[i].id == id)
        return &m->view.nodes[i];
    if (m->view.n_nodes == m->cap_nodes) {
        size_t cap = m->cap_nodes ? 2 * m->cap_nodes : 8;
        mqd_cluster_node_t *n = realloc(m->view.nodes, cap * sizeof *n);
        if (n == NULL)
            return NULL;
        m->view.nodes = n;
        m->cap_nodes = cap;
    }
    memmove(&m->view.nodes[i + 1], &m->view.nodes[i],
            (m->view.n_nodes - i) * sizeof m->view.nodes[0]);
    m->view.n_nodes++;
    memset(&m->view.nodes[i], 0, sizeof m->view.nodes[i]);
    m->view.nodes[i].id = id;
    return &m->view.nodes[i];
}

/* The node id a key under nodes/ names, 0 if it names none. */
static uint32_t key_id(const mqd_cluster_t *m, const mqd_etcd_kv_t *kv)
{
    size_t pl = strlen(m->nodes_prefix);
    if (kv->key_len <= pl || kv->key_len > pl + 10 || memcmp(kv->key, m->nodes_prefix, pl) != 0)
        return 0;
    uint64_t id = 0;
    for (size_t i = pl; i < kv->key_len; i++) {
        if (kv->key[i] < '0' || kv->key[i] > '9')
            return 0;
        id = id * 10 + (uint64_t)(kv->key[i] - '0');
    }
    return id <= UINT32_MAX ? (uint32_t)id : 0;
}

static void node_up(mqd_cluster_t *m, const mqd_etcd_kv_t *kv)
{
    mqd_cluster_node_t nd;
    uint32_t id = key_id(m, kv);
    if (id == 0 || mqd_cluster_node_parse(kv->value, kv->value_len, &nd) != 0 || nd.id != id) {
        MQD_WARN("cluster", "%.*s: not a node registration: ignored", (int)kv->key_len, kv->key);
        return;
    }
    mqd_cluster_node_t *slot = node_slot(m, id);
    if (slot == NULL)
        return;
    bool was = slot->alive;
    nd.create_rev = kv->create_revision;
    nd.lease = kv->lease;
    *slot = nd;
    if (!was && m->cbs.node_joined)
        m->cbs.node_joined(m->cbs.arg, slot);
}

static void node_down(mqd_cluster_t *m, uint32_t id)
{
    for (size_t i = 0; i < m->view.n_nodes; i++) {
        if (m->view.nodes[i].id != id || !m->view.nodes[i].alive)
            continue;
        m->view.nodes[i].alive = false;
        if (m->cbs.node_left)
            m->cbs.node_left(m->cbs.arg, id);
    }
}

static void on_nodes(void *arg, mqd_etcd_ev_t ev, const mqd_etcd_kv_t *kvs, size_t n, int64_t rev)
{
    mqd_cluster_t *m = arg;
    if (ev == MQD_ETCD_EV_SNAPSHOT) { /* whoever is not in it has left */
        for (size_t i = 0; i < m->view.n_nodes; i++) {
            bool present = false;
            for (size_t j = 0; j < n && !present; j++)
                present = key_id(m, &kvs[j]) == m->view.nodes[i].id;
            if (!present)
                node_down(m, m->view.nodes[i].id);
        }
    }
    for (size_t j = 0; j < n; j++) {
        if (ev == MQD_ETCD_EV_DELETE)
            node_down(m, key_id(m, &kvs[j]));
        else
            node_up(m, &kvs[j]);
    }
    log_view(m);
}

static void on_ctl(void *arg, mqd_etcd_ev_t ev, const mqd_etcd_kv_t *kvs, size_t n, int64_t rev)
{
    mqd_cluster_t *m = arg;
    set_controller(m, ev != MQD_ETCD_EV_DELETE && n > 0 ? &kvs[0] : NULL);
    kick(m); /* a vacant key: campaign now */
}

static void strip_scheme(const char *a, char *buf, size_t len)
{
    if (strncmp(a, "amqps://", 8) == 0)
        a += 8;
    else if (strncmp(a, "amqp://", 7) == 0)
        a += 7;
    snprintf(buf, len, "%s", a);
}

/* HOST:PORT others reach this node at: advertised_address, else the first listener. */
static void own_address(const mqd_conf_t *c, char *buf, size_t len)
{
    const char *a = c->advertised_address ? c->advertised_address : c->n_listen ? c->listen[0] : "";
    strip_scheme(a, buf, len);
}

/* HOST:PORT followers fetch from over TLS: replication_address, else the first amqps://
 * listener; "" when this node has no TLS listener (followers then use its address). */
static void own_repl_address(const mqd_conf_t *c, char *buf, size_t len)
{
    const char *a = c->replication_address;
    for (size_t i = 0; !a && i < c->n_listen; i++)
        if (mqd_conf_listen_is_tls(c->listen[i]))
            a = c->listen[i];
    strip_scheme(a ? a : "", buf, len);
}

static int member_keys(mqd_cluster_t *m)
{
    const mqd_conf_t *c = m->conf;
    const char *name = c->cluster_name ? c->cluster_name : "mqd";
    snprintf(m->nodes_prefix, sizeof m->nodes_prefix, "/%s/nodes/", name);
    snprintf(m->node_key, sizeof m->node_key, "/%s/nodes/%" PRIu32, name, c->node_id);
    snprintf(m->ctl_key, sizeof m->ctl_key, "/%s/controller", name);
    mqd_cluster_node_t self = {.id = c->node_id, .started_ms = mqd_now_ms()};
    own_address(c, self.address, sizeof self.address);
    own_repl_address(c, self.repl_address, sizeof self.repl_address);
    snprintf(self.rack, sizeof self.rack, "%s", c->rack ? c->rack : "");
    m->node_value = mqd_cluster_node_json(&self);
    m->ctl_value = mqd_cluster_ctl_json(c->node_id);
    return m->node_value && m->ctl_value ? 0 : MQD_ENOMEM;
}

int mqd_cluster_new(struct event_base *base, const mqd_conf_t *conf, const mqd_cluster_cbs_t *cbs,
                    mqd_cluster_t **out)
{
    if (conf->cluster != MQD_CONF_CLUSTER_ETCD || conf->node_id == 0)
        return MQD_EINVAL;
    mqd_cluster_t *m = calloc(1, sizeof *m);
    if (m == NULL)
        return MQD_ENOMEM;
    m->base = base;
    m->conf = conf;
    if (cbs)
        m->cbs = *cbs;
    m->ttl_s = (conf->lease_ttl_ms + 999) / 1000;
    uint32_t third = conf->lease_ttl_ms / 3, timeout = third > 500 ? third : 500;
    int rc = member_keys(m);
    if (rc == 0)
        rc = mqd_etcd_new(base, conf->etcd_endpoints, timeout, &m->etcd);
    m->ev_tick = rc == 0 ? event_new(base, -1, EV_PERSIST, on_tick, m) : NULL;
    m->ev_kick = m->ev_tick ? event_new(base, -1, 0, on_kick, m) : NULL;
    if (rc == 0 && m->ev_kick == NULL)
        rc = MQD_ENOMEM;
    if (rc == 0)
        rc = mqd_etcd_watch_new(m->etcd, m->nodes_prefix, strlen(m->nodes_prefix), true, 0,
                                on_nodes, m, &m->w_nodes);
    if (rc == 0)
        rc = mqd_etcd_watch_new(m->etcd, m->ctl_key, strlen(m->ctl_key), false, 0, on_ctl, m,
                                &m->w_ctl);
    if (rc != 0) {
        mqd_cluster_free(m);
        return rc;
    }
    struct timeval tv = {third / 1000, (third % 1000) * 1000};
    event_add(m->ev_tick, &tv);
    MQD_NOTICE("cluster", "node %" PRIu32 " joining cluster %s via etcd %s (lease %" PRId64 " s)",
               conf->node_id, conf->cluster_name ? conf->cluster_name : "mqd",
               mqd_etcd_endpoint(m->etcd), m->ttl_s);
    kick(m);
    *out = m;
    return 0;
}

void mqd_cluster_free(mqd_cluster_t *m)
{
    if (m == NULL)
        return;
    m->closing = true;
    update_role(m); /* a stopping controller says so before its key goes */
    if (m->lease != 0 && m->etcd != NULL) {
        /* the keys go with the lease at once: another node takes over without the TTL */
        int rc = mqd_etcd_lease_revoke_sync(m->etcd, m->lease, REVOKE_TIMEOUT_MS);
        if (rc == 0)
            MQD_NOTICE("cluster", "lease %" PRIx64 " revoked", (uint64_t)m->lease);
        else
            MQD_WARN("cluster", "lease %" PRIx64 " not revoked (%s): it ends after its TTL",
                     (uint64_t)m->lease, mqd_strerror(rc));
    }
    mqd_etcd_watch_free(m->w_nodes);
    mqd_etcd_watch_free(m->w_ctl);
    mqd_etcd_free(m->etcd); /* answers what is in flight: op_end sees closing */
    if (m->ev_tick)
        event_free(m->ev_tick);
    if (m->ev_kick)
        event_free(m->ev_kick);
    free(m->view.nodes);
    free(m->node_value);
    free(m->ctl_value);
    free(m);
}

const mqd_cluster_view_t *mqd_cluster_view(const mqd_cluster_t *m)
{
    return &m->view;
}

void mqd_cluster_set_cbs(mqd_cluster_t *m, const mqd_cluster_cbs_t *cbs)
{
    m->cbs = cbs ? *cbs : (mqd_cluster_cbs_t){0};
}

/* A third of the TTL short of the deadline: the deadline counts from when the last
 * answered keepalive was sent, while etcd may have expired the lease a little earlier
 * (test 83 measured a cut-off leader still inside its deadline 0.1 s after etcd had
 * elected its successor). Keepalives go out every third of the TTL, so a healthy node
 * never gets this close. */
bool mqd_cluster_lease_live(const mqd_cluster_t *m)
{
    uint64_t margin = (uint64_t)m->ttl_s * 1000000000u / 3;
    return m->lease != 0 && m->registered && mqd_mono_ns() + margin < m->deadline_ns;
}

int64_t mqd_cluster_lease(const mqd_cluster_t *m)
{
    return m->registered ? m->lease : 0;
}

mqd_etcd_t *mqd_cluster_etcd(mqd_cluster_t *m)
{
    return m->etcd;
}

bool mqd_cluster_is_controller(const mqd_cluster_t *m)
{
    return m->is_controller;
}
