/* cluster: membership and controller election through etcd (issue 19, ARCHITECTURE §4).
 *
 * Two layers, both on the caller's libevent loop (one thread):
 *  - mqd_etcd_*: an asynchronous client of etcd 3.4's v3 JSON gateway (kv put / range /
 *    deleterange / txn, lease grant / keepalive / revoke, watch streams), over several
 *    endpoints: a connection error moves to the next one.
 *  - mqd_cluster_*: the node's membership. Under a lease of lease_ttl_ms it registers
 *    /<cluster_name>/nodes/<node_id> and campaigns for /<cluster_name>/controller (create
 *    if absent); it watches both and keeps the view (nodes, controller) that the
 *    replication controller and $management read.
 * Single-node mode (cluster = none) creates none of this.
 */
#ifndef MQD_CLUSTER_H
#define MQD_CLUSTER_H

#include "conf/conf.h"
#include "mqd.h"

struct event_base;

/* ---- etcd client ---- */

typedef struct mqd_etcd mqd_etcd_t;
typedef struct mqd_etcd_watch mqd_etcd_watch_t;

/* One key-value as etcd reports it; key/value are NUL-terminated copies (binary safe with
 * the lengths). Revisions and the lease id are etcd's 64-bit numbers. */
typedef struct mqd_etcd_kv {
    char *key, *value;
    size_t key_len, value_len;
    int64_t create_revision, mod_revision, version, lease;
} mqd_etcd_kv_t;

/* An answer. rc is 0, MQD_EIO (no endpoint answered), MQD_EINVAL (etcd refused the call:
 * error holds its message, grpc_code its code) or MQD_ECORRUPT (unreadable answer). The
 * reply and everything in it live only during the callback. */
typedef struct mqd_etcd_reply {
    int rc;
    int http_status;
    int grpc_code;
    char *error;        /* etcd's message, or NULL */
    int64_t revision;   /* header.revision */
    mqd_etcd_kv_t *kvs; /* range; txn: the first range op's result */
    size_t n_kvs;
    int64_t count;    /* range: keys in range */
    int64_t deleted;  /* deleterange: keys deleted; txn: of the first delete op */
    bool succeeded;   /* txn: the compares held */
    int64_t lease_id; /* lease grant / keepalive */
    int64_t ttl;      /* seconds; keepalive of an expired lease: has_ttl false */
    bool has_ttl;
} mqd_etcd_reply_t;

typedef void (*mqd_etcd_cb)(void *arg, const mqd_etcd_reply_t *r);

/* A txn: compares, then ops on success or failure. */
typedef enum { MQD_ETCD_CMP_CREATE, MQD_ETCD_CMP_MOD, MQD_ETCD_CMP_VERSION } mqd_etcd_target_t;
typedef struct mqd_etcd_cmp {
    const char *key;
    size_t key_len;
    mqd_etcd_target_t target;
    int64_t value; /* compared EQUAL: create_revision 0 = absent */
} mqd_etcd_cmp_t;
typedef enum { MQD_ETCD_OP_PUT, MQD_ETCD_OP_RANGE, MQD_ETCD_OP_DELETE } mqd_etcd_op_type_t;
typedef struct mqd_etcd_op {
    mqd_etcd_op_type_t type;
    const char *key, *value;
    size_t key_len, value_len;
    int64_t lease; /* put: 0 = none */
    bool prefix;   /* range/delete: every key starting with key */
} mqd_etcd_op_t;
typedef struct mqd_etcd_txn {
    const mqd_etcd_cmp_t *cmp;
    size_t n_cmp;
    const mqd_etcd_op_t *success, *failure;
    size_t n_success, n_failure;
} mqd_etcd_txn_t;

/* endpoints: "http://H:P[,...]" (conf's etcd_endpoints); timeout_ms bounds each unary
 * call per endpoint. The client lives until mqd_etcd_free, which answers the calls still
 * in flight with rc MQD_ESTATE (free watches first). */
int mqd_etcd_new(struct event_base *base, const char *endpoints, uint32_t timeout_ms,
                 mqd_etcd_t **out);
void mqd_etcd_free(mqd_etcd_t *e);
/* The endpoint in use now ("127.0.0.1:2379"), for logs and tests. */
const char *mqd_etcd_endpoint(const mqd_etcd_t *e);

/* Each call answers exactly once through cb (unless the client is freed first); 0 if it
 * was sent, or a negative MQD_E* without calling back. */
int mqd_etcd_put(mqd_etcd_t *e, const char *key, size_t klen, const char *val, size_t vlen,
                 int64_t lease, mqd_etcd_cb cb, void *arg);
int mqd_etcd_range(mqd_etcd_t *e, const char *key, size_t klen, bool prefix, mqd_etcd_cb cb,
                   void *arg);
int mqd_etcd_delete(mqd_etcd_t *e, const char *key, size_t klen, bool prefix, mqd_etcd_cb cb,
                    void *arg);
int mqd_etcd_txn(mqd_etcd_t *e, const mqd_etcd_txn_t *t, mqd_etcd_cb cb, void *arg);
int mqd_etcd_lease_grant(mqd_etcd_t *e, int64_t ttl_s, mqd_etcd_cb cb, void *arg);
int mqd_etcd_lease_keepalive(mqd_etcd_t *e, int64_t id, mqd_etcd_cb cb, void *arg);
int mqd_etcd_lease_revoke(mqd_etcd_t *e, int64_t id, mqd_etcd_cb cb, void *arg);
/* Revokes now, blocking up to timeout_ms over the endpoints on a private loop: for a
 * clean shutdown after the main loop has stopped. 0 when etcd confirmed it. */
int mqd_etcd_lease_revoke_sync(mqd_etcd_t *e, int64_t id, uint32_t timeout_ms);

/* A watch of key (or every key under it): with start_rev 0 first a SNAPSHOT of the range,
 * then PUT and DELETE events in revision order; with start_rev > 0 the events from that
 * revision on. After a broken stream it resumes at the next revision; when the revision it
 * needs was compacted it re-reads the range (a new SNAPSHOT) and watches on from there. */
typedef enum { MQD_ETCD_EV_SNAPSHOT, MQD_ETCD_EV_PUT, MQD_ETCD_EV_DELETE } mqd_etcd_ev_t;
typedef void (*mqd_etcd_watch_cb)(void *arg, mqd_etcd_ev_t ev, const mqd_etcd_kv_t *kvs, size_t n,
                                  int64_t revision);
int mqd_etcd_watch_new(mqd_etcd_t *e, const char *key, size_t klen, bool prefix, int64_t start_rev,
                       mqd_etcd_watch_cb cb, void *arg, mqd_etcd_watch_t **out);
void mqd_etcd_watch_free(mqd_etcd_watch_t *w);

/* ---- membership ---- */

typedef struct mqd_cluster mqd_cluster_t;

typedef struct mqd_cluster_node {
    uint32_t id;
    char address[256];      /* advertised HOST:PORT */
    char repl_address[256]; /* HOST:PORT of its TLS listener for fetches; "" = address */
    char rack[64];
    int64_t started_ms; /* wall clock of the node's start */
    int64_t create_rev; /* its key's create_revision: new at each registration (etcd) */
    int64_t lease;      /* the lease its key is under (a new one at each registration) */
    bool alive;         /* its key is present (its lease lives) */
} mqd_cluster_node_t;

/* The view every node keeps; nodes sorted by id (left nodes stay, alive false). */
typedef struct mqd_cluster_view {
    uint32_t controller; /* node id holding the controller key, 0 = none */
    int64_t controller_create_rev, controller_mod_rev;
    mqd_cluster_node_t *nodes;
    size_t n_nodes;
} mqd_cluster_view_t;

/* Callbacks for the replication controller (all optional, on the loop thread). gained:
 * this node holds the controller key since revision create_rev (the election's epoch
 * source); lost: it no longer may act as controller (lease lost or shutdown). */
typedef struct mqd_cluster_cbs {
    void (*controller_gained)(void *arg, int64_t create_rev);
    void (*controller_lost)(void *arg);
    void (*node_joined)(void *arg, const mqd_cluster_node_t *n);
    void (*node_left)(void *arg, uint32_t id);
    /* the node's lease is gone (expired, or no keepalive answer within the TTL): whatever
     * it decided under it may have been decided again by others */
    void (*lease_lost)(void *arg);
    void *arg;
} mqd_cluster_cbs_t;

/* Starts membership on base with conf's cluster keys (cluster must be etcd; conf must
 * outlive the member). cbs is copied; NULL for none. */
int mqd_cluster_new(struct event_base *base, const mqd_conf_t *conf, const mqd_cluster_cbs_t *cbs,
                    mqd_cluster_t **out);
/* Revokes the lease (bounded, blocking: the controller key goes at once) and frees. */
void mqd_cluster_free(mqd_cluster_t *m);
/* The current view; valid until the next turn of the loop. */
const mqd_cluster_view_t *mqd_cluster_view(const mqd_cluster_t *m);
bool mqd_cluster_is_controller(const mqd_cluster_t *m);
/* This node holds a registered lease with more than a third of its TTL left by the
 * monotonic clock (a process paused past its lease sees false at once, before any
 * keepalive answers; the margin covers etcd expiring it slightly earlier). */
bool mqd_cluster_lease_live(const mqd_cluster_t *m);
/* The lease this node's keys are under now, 0 while it has none. */
int64_t mqd_cluster_lease(const mqd_cluster_t *m);
/* The member's etcd client, for the replication layer's own keys and watches (lives as
 * long as the member; free those watches before mqd_cluster_free). */
mqd_etcd_t *mqd_cluster_etcd(mqd_cluster_t *m);
/* Replaces the callbacks (copied; NULL: none), e.g. before their owner goes. */
void mqd_cluster_set_cbs(mqd_cluster_t *m, const mqd_cluster_cbs_t *cbs);

#endif
