/* etcd_probe: drives mqd's etcd client (src/cluster) against the real etcd that
 * 70-etcd-membership.py started, one call at a time on a libevent loop, and prints what
 * etcd answered as `name key=value ...` lines for the test to check.
 *   etcd_probe ENDPOINTS COMPACTED_REV
 * ENDPOINTS lists a dead endpoint first (the client must move on). COMPACTED_REV is a
 * revision of /probe/c/ the test has compacted away: a watch from it must fall back to a
 * fresh range (a SNAPSHOT) and then deliver the next put. Exit 0 when every step answered
 * within its bound, 1 otherwise; the figures are judged by the test. */
#include "config.h"
#include "cluster/cluster.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct event_base *base;
static int pending;
static mqd_etcd_reply_t last; /* the scalar fields of the last answer */
static char last_val[256];    /* its first kv's value */
static int64_t last_mod, last_create;
static size_t last_n;
static int snapshots, events;
static char ev_log[1024];

static void on_reply(void *arg, const mqd_etcd_reply_t *r)
{
    last = *r;
    last.kvs = NULL;
    last.error = NULL;
    last_n = r->n_kvs;
    snprintf(last_val, sizeof last_val, "%s", r->n_kvs ? r->kvs[0].value : "-");
    last_mod = r->n_kvs ? r->kvs[0].mod_revision : 0;
    last_create = r->n_kvs ? r->kvs[0].create_revision : 0;
    pending--;
}

static void on_watch(void *arg, mqd_etcd_ev_t ev, const mqd_etcd_kv_t *kvs, size_t n, int64_t rev)
{
    size_t off = strlen(ev_log);
    if (ev == MQD_ETCD_EV_SNAPSHOT) {
        snapshots++;
        off += (size_t)snprintf(ev_log + off, sizeof ev_log - off, " snapshot@%" PRId64 ":%zu", rev,
                                n);
        for (size_t i = 0; i < n && off < sizeof ev_log; i++)
            off += (size_t)snprintf(ev_log + off, sizeof ev_log - off, ",%s=%s", kvs[i].key,
                                    kvs[i].value);
    } else {
        events++;
        snprintf(ev_log + off, sizeof ev_log - off, " %s@%" PRId64 ":%s=%s",
                 ev == MQD_ETCD_EV_PUT ? "put" : "delete", rev, kvs[0].key, kvs[0].value);
    }
    pending--;
}

static int wait_for(int n, double secs)
{
    pending = n;
    uint64_t end = (uint64_t)(secs * 1000);
    struct timeval tv = {0, 20000};
    for (uint64_t waited = 0; pending > 0 && waited < end; waited += 20) {
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    if (pending > 0)
        fprintf(stderr, "etcd_probe: %d answers missing after %.1f s\n", pending, secs);
    return pending > 0 ? 1 : 0;
}

#define K(s) s, strlen(s)

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    double slow = getenv("MQD_TEST_SLOW") ? atof(getenv("MQD_TEST_SLOW")) : 1;
    double t = 10 * (slow > 1 ? slow : 1);
    int64_t compacted = strtoll(argv[2], NULL, 10);
    mqd_etcd_t *e;
    base = event_base_new();
    if (mqd_etcd_new(base, argv[1], 1000, &e) != 0)
        return 1;
    int bad = 0;
    bad |= mqd_etcd_put(e, K("/probe/a"), K("1"), 0, on_reply, NULL) || wait_for(1, t);
    printf("put rc=%d rev=%" PRId64 " endpoint=%s\n", last.rc, last.revision, mqd_etcd_endpoint(e));
    int64_t rev_a = last.revision;
    bad |= mqd_etcd_put(e, K("/probe/b"), K("x"), 0, on_reply, NULL) || wait_for(1, t);
    bad |= mqd_etcd_range(e, K("/probe/"), true, on_reply, NULL) || wait_for(1, t);
    printf("range rc=%d n=%zu count=%" PRId64 " first=%s\n", last.rc, last_n, last.count, last_val);
    /* create if absent on a key that exists: fails, the failure branch reads it */
    mqd_etcd_cmp_t cmp = {K("/probe/a"), MQD_ETCD_CMP_CREATE, 0};
    mqd_etcd_op_t put2 = {MQD_ETCD_OP_PUT, "/probe/a", "2", 8, 1, 0, false};
    mqd_etcd_op_t get = {MQD_ETCD_OP_RANGE, "/probe/a", NULL, 8, 0, 0, false};
    mqd_etcd_txn_t txn = {&cmp, 1, &put2, &get, 1, 1};
    bad |= mqd_etcd_txn(e, &txn, on_reply, NULL) || wait_for(1, t);
    printf("create-if-absent rc=%d succeeded=%d value=%s mod=%" PRId64 "\n", last.rc,
           last.succeeded, last_val, last_mod);
    int64_t mod = last_mod;
    /* compare-and-swap on mod_revision: the current one wins, a stale one loses */
    cmp = (mqd_etcd_cmp_t){K("/probe/a"), MQD_ETCD_CMP_MOD, mod};
    bad |= mqd_etcd_txn(e, &txn, on_reply, NULL) || wait_for(1, t);
    printf("cas-current rc=%d succeeded=%d\n", last.rc, last.succeeded);
    bad |= mqd_etcd_txn(e, &txn, on_reply, NULL) || wait_for(1, t);
    printf("cas-stale rc=%d succeeded=%d value=%s mod=%" PRId64 "\n", last.rc, last.succeeded,
           last_val, last_mod);
    /* create if absent on a new key: succeeds */
    cmp = (mqd_etcd_cmp_t){K("/probe/new"), MQD_ETCD_CMP_CREATE, 0};
    mqd_etcd_op_t putn = {MQD_ETCD_OP_PUT, "/probe/new", "n", 10, 1, 0, false};
    txn = (mqd_etcd_txn_t){&cmp, 1, &putn, NULL, 1, 0};
    bad |= mqd_etcd_txn(e, &txn, on_reply, NULL) || wait_for(1, t);
    printf("create-new rc=%d succeeded=%d\n", last.rc, last.succeeded);
    /* leases: grant, keepalive, a key under it, revoke (the key goes), keepalive again */
    bad |= mqd_etcd_lease_grant(e, 5, on_reply, NULL) || wait_for(1, t);
    int64_t lease = last.lease_id;
    printf("grant rc=%d ttl=%" PRId64 " id_nonzero=%d\n", last.rc, last.ttl, lease != 0);
    bad |= mqd_etcd_put(e, K("/probe/leased"), K("l"), lease, on_reply, NULL) || wait_for(1, t);
    bad |= mqd_etcd_lease_keepalive(e, lease, on_reply, NULL) || wait_for(1, t);
    printf("keepalive rc=%d has_ttl=%d ttl=%" PRId64 " id_same=%d\n", last.rc, last.has_ttl,
           last.ttl, last.lease_id == lease);
    bad |= mqd_etcd_lease_revoke(e, lease, on_reply, NULL) || wait_for(1, t);
    printf("revoke rc=%d\n", last.rc);
    bad |= mqd_etcd_range(e, K("/probe/leased"), false, on_reply, NULL) || wait_for(1, t);
    printf("leased-after-revoke n=%zu\n", last_n);
    bad |= mqd_etcd_lease_keepalive(e, lease, on_reply, NULL) || wait_for(1, t);
    printf("keepalive-revoked rc=%d has_ttl=%d\n", last.rc, last.has_ttl);
    bad |= mqd_etcd_put(e, K("/probe/x"), K("x"), lease, on_reply, NULL) || wait_for(1, t);
    printf("put-revoked-lease rc=%d grpc=%d\n", last.rc, last.grpc_code);
    /* a watch: snapshot, then a put and a delete in order */
    mqd_etcd_watch_t *w;
    bad |= mqd_etcd_watch_new(e, K("/probe/"), true, 0, on_watch, NULL, &w) || wait_for(1, t);
    bad |= mqd_etcd_put(e, K("/probe/w"), K("w1"), 0, on_reply, NULL) || wait_for(2, t);
    bad |= mqd_etcd_delete(e, K("/probe/b"), false, on_reply, NULL) || wait_for(2, t);
    printf("watch snapshots=%d events=%d log=%s\n", snapshots, events, ev_log);
    mqd_etcd_watch_free(w);
    /* from a compacted revision: a fresh snapshot, then the next put */
    snapshots = events = 0;
    ev_log[0] = '\0';
    bad |= mqd_etcd_watch_new(e, K("/probe/c/"), true, compacted, on_watch, NULL, &w) ||
           wait_for(1, t);
    bad |= mqd_etcd_put(e, K("/probe/c/k"), K("v6"), 0, on_reply, NULL) || wait_for(2, t);
    printf("compacted-watch snapshots=%d events=%d log=%s\n", snapshots, events, ev_log);
    mqd_etcd_watch_free(w);
    bad |= mqd_etcd_delete(e, K("/probe/"), true, on_reply, NULL) || wait_for(1, t);
    printf("delete-prefix rc=%d deleted=%" PRId64 " first_rev=%" PRId64 "\n", last.rc, last.deleted,
           rev_a);
    mqd_etcd_free(e);
    event_base_free(base);
    return bad ? 1 : 0;
}
