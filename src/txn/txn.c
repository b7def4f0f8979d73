/* AMQP transactions: the coordinator, staged work, commit and rollback (see txn.h). */
#include "config.h"
#include "txn/txn.h"
#include "group/group.h"

#include <event2/event.h>
#include <jansson.h>
#include <proton/codec.h>
#include <proton/condition.h>
#include <proton/disposition.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define TIMED_OUT_RING 64
#define PRUNE_INTERVAL_MS 10000 /* how often decided transactions are looked at */
#define PRUNE_SCAN_MAX 65536    /* decided transactions examined per pass (bounds the pause) */
#define PRUNE_BATCH_MAX 8192    /* rows deleted per pass, in one SQLite transaction */

/* (topic, partition) rather than a partition pointer: a topic's partition array moves
 * when management adds partitions. */
typedef struct txn_part {
    mqd_topic_t *t;
    uint32_t id;
    uint64_t first, last;
    uint64_t marker; /* its COMMIT / ABORT control record */
} txn_part_t;

static mqd_part_t *tp(const txn_part_t *x)
{
    return mqd_topic_part(x->t, x->id);
}

typedef struct txn_ack {
    mqd_group_t *g;
    uint32_t part;
    uint64_t off;
    uint64_t outcome;
    bool failed;
} txn_ack_t;

struct mqd_txn {
    uint64_t id;
    mqd_lstate_t *coord; /* the coordinator link that declared it */
    int64_t started_ms;
    txn_part_t *parts;
    size_t n_parts, cap_parts;
    txn_ack_t *acks;
    size_t n_acks, cap_acks;
    pn_delivery_t *discharge; /* a commit waiting for its records to be stable (held) */
    mqd_conn_t *discharge_conn;
    bool doomed;         /* a send could not be staged: the commit must fail */
    uint64_t sync_gen;   /* while its decision waits for the WAL sync (x->syncing) */
    int64_t announce_ms; /* committed, waiting for its markers to replicate */
    mqd_dlist_t node;
};

/* A committed transaction as far as pruning is concerned: where its records are. The
 * topic is kept by name: a topic can be deleted while its transactions are remembered. */
typedef struct done_part {
    char *topic;
    uint32_t id;
    uint64_t last;
} done_part_t;

typedef struct done_txn {
    uint64_t id;
    done_part_t *parts; /* NULL with n_parts 0: acks only (or detail unknown: keep) */
    size_t n_parts;
    bool keep; /* detail unreadable: never pruned */
    bool seen; /* found prunable by the previous pass */
} done_txn_t;

/* The decisions' sync, off the event loop: mqd_txns_decide commits a batch of decisions
 * to SQLite without waiting for the disk (mqd_meta_begin_nosync) and asks this thread for
 * an fdatasync of the WAL; the loop tells the clients when it is done (on_synced). Each
 * sync covers every batch committed before it started (asked -> covered), so batches
 * that arrive meanwhile share the next one: a group commit for decisions. Before, the
 * loop itself waited for SQLite's fsync of every batch: 43-48 % of its time under 8
 * connections of one-send transactions (docs/performance.md section 12). */
typedef struct decision_sync {
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool started, stop;
    uint64_t asked, done; /* generations of committed batches; done: durable */
    int err;              /* a failed sync (sticky) */
    struct event *ev;     /* activated by the thread: on_synced on the loop */
    mqd_meta_t *meta;
} decision_sync_t;

struct mqd_txns {
    mqd_dlist_t open;
    mqd_dlist_t ready;      /* commits whose records are stable: decided at the next tick */
    mqd_dlist_t syncing;    /* decided (in SQLite), waiting for the WAL's sync */
    mqd_dlist_t announcing; /* committed, markers not yet below a replicated watermark */
    decision_sync_t ds;
    uint64_t next_id;
    uint64_t *committed; /* open-addressing hash set of committed ids (0 = empty) */
    size_t cap, n;
    uint64_t timed_out[TIMED_OUT_RING];
    size_t to_pos;
    mqd_txn_stats_t st;
    done_txn_t *done; /* committed transactions, oldest first (pruning) */
    size_t n_done, cap_done, prune_pos;
    uint64_t *stale; /* rows that are not COMMITTED: deleted by the next pass */
    size_t n_stale;
    int64_t next_prune_ms;
};

/* ---------------------------------------------------------------- committed set */

static size_t slot(uint64_t id, size_t cap)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 7) & (cap - 1);
}

static int set_add(mqd_txns_t *x, uint64_t id)
{
    if ((x->n + 1) * 2 > x->cap) {
        size_t ncap = x->cap ? x->cap * 2 : 64;
        uint64_t *nv = calloc(ncap, sizeof *nv);
        if (!nv)
            return MQD_ENOMEM;
        for (size_t i = 0; i < x->cap; i++) {
            if (!x->committed[i])
                continue;
            size_t j = slot(x->committed[i], ncap);
            while (nv[j])
                j = (j + 1) & (ncap - 1);
            nv[j] = x->committed[i];
        }
        free(x->committed);
        x->committed = nv;
        x->cap = ncap;
    }
    size_t j = slot(id, x->cap);
    while (x->committed[j] && x->committed[j] != id)
        j = (j + 1) & (x->cap - 1);
    if (!x->committed[j])
        x->n++;
    x->committed[j] = id;
    return 0;
}

bool mqd_txn_committed(mqd_server_t *s, uint64_t id)
{
    mqd_txns_t *x = mqd_srv_txns(s);
    if (!x || x->cap == 0)
        return false;
    for (size_t j = slot(id, x->cap); x->committed[j]; j = (j + 1) & (x->cap - 1))
        if (x->committed[j] == id)
            return true;
    return false;
}

/* The row's detail has no partition list, so it is never pruned: a follower sees one
 * partition's marker at a time and cannot know every partition the transaction wrote. */
int mqd_txn_adopt_commit(mqd_server_t *s, uint64_t id)
{
    if (!mqd_srv_txns(s) || mqd_txn_committed(s, id))
        return 0;
    int rc = mqd_meta_txn_put(mqd_srv_meta(s), id, MQD_TXN_COMMITTED, "{\"adopted\":true}");
    return rc == 0 ? set_add(mqd_srv_txns(s), id) : rc;
}

/* Removes id, re-placing the rest of its probe run (linear probing, no tombstones). */
static void set_del(mqd_txns_t *x, uint64_t id)
{
    if (x->cap == 0)
        return;
    size_t j = slot(id, x->cap);
    while (x->committed[j] && x->committed[j] != id)
        j = (j + 1) & (x->cap - 1);
    if (!x->committed[j])
        return;
    x->committed[j] = 0;
    x->n--;
    for (size_t k = (j + 1) & (x->cap - 1); x->committed[k]; k = (k + 1) & (x->cap - 1)) {
        uint64_t v = x->committed[k];
        x->committed[k] = 0;
        size_t h = slot(v, x->cap);
        while (x->committed[h])
            h = (h + 1) & (x->cap - 1);
        x->committed[h] = v;
    }
}

/* ---------------------------------------------------------------- decided transactions */

static void done_free(done_txn_t *d)
{
    for (size_t i = 0; i < d->n_parts; i++)
        free(d->parts[i].topic);
    free(d->parts);
}

/* Takes d (its parts) into the list; frees them on failure. */
static int done_push(mqd_txns_t *x, done_txn_t *d)
{
    if (x->n_done == x->cap_done) {
        size_t ncap = x->cap_done ? x->cap_done * 2 : 64;
        done_txn_t *nv = realloc(x->done, ncap * sizeof *nv);
        if (!nv) {
            done_free(d);
            return MQD_ENOMEM;
        }
        x->done = nv;
        x->cap_done = ncap;
    }
    x->done[x->n_done++] = *d;
    return 0;
}

/* A committed row's detail_json ({"partitions":[{"topic","partition","last"}...]}) as a
 * done_txn_t; an unreadable detail keeps the row for good. */
static int done_from_json(uint64_t id, const char *detail, done_txn_t *out)
{
    *out = (done_txn_t){.id = id};
    json_t *o = detail ? json_loads(detail, 0, NULL) : NULL;
    json_t *arr = o ? json_object_get(o, "partitions") : NULL;
    if (!json_is_array(arr)) {
        out->keep = true;
        json_decref(o);
        return 0;
    }
    size_t n = json_array_size(arr);
    if (n && !(out->parts = calloc(n, sizeof *out->parts))) {
        json_decref(o);
        return MQD_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i);
        json_t *tn = json_object_get(e, "topic"), *pn = json_object_get(e, "partition"),
               *ln = json_object_get(e, "last");
        if (!json_is_string(tn) || !json_is_integer(pn) || !json_is_integer(ln) ||
            json_integer_value(pn) < 0 || json_integer_value(ln) < 0) {
            out->keep = true;
            continue;
        }
        done_part_t *dp = &out->parts[out->n_parts];
        if (!(dp->topic = strdup(json_string_value(tn)))) {
            done_free(out);
            json_decref(o);
            return MQD_ENOMEM;
        }
        dp->id = (uint32_t)json_integer_value(pn);
        dp->last = (uint64_t)json_integer_value(ln);
        out->n_parts++;
    }
    json_decref(o);
    return 0;
}

/* Remembers a transaction that just committed (best effort: without memory it is only
 * never pruned). */
static void done_add(mqd_txns_t *x, const mqd_txn_t *t)
{
    done_txn_t d = {.id = t->id};
    if (t->n_parts && !(d.parts = calloc(t->n_parts, sizeof *d.parts)))
        return;
    for (size_t i = 0; i < t->n_parts; i++) {
        if (!(d.parts[i].topic = strdup(mqd_topic_name(t->parts[i].t)))) {
            done_free(&d);
            return;
        }
        d.parts[i].id = t->parts[i].id;
        d.parts[i].last = t->parts[i].last;
        d.n_parts++;
    }
    done_push(x, &d);
}

/* Can the decision no longer matter? A committed row exists for one reason: a record
 * flagged MQD_REC_TXN with this id is visible only if the id is in the committed set
 * (read-committed readers: cursor.c, consumer.c browse, dedup.c rebuild; the set is
 * reloaded from these rows at every start). Control records and the LSO do not need it:
 * the LSO only counts open transactions, and a restart aborts every open one. So once
 * every partition the transaction wrote to starts (retention) past its last record
 * there, or is gone with its topic, no reader can meet one of its records again: a
 * reader whose read-ahead still holds one is behind retention, and what retention
 * deleted counts as consumed (cursor.c). A transaction with no records (acks only)
 * needs its row not even once committed: the offsets were written with the decision. */
static bool done_prunable(mqd_server_t *s, const done_txn_t *d)
{
    if (d->keep)
        return false;
    for (size_t i = 0; i < d->n_parts; i++) {
        mqd_topic_t *t = mqd_topic_find(s, d->parts[i].topic);
        if (t && d->parts[i].id < mqd_topic_nparts(t) &&
            mqd_plog_start_offset(mqd_part_log(mqd_topic_part(t, d->parts[i].id))) <=
                d->parts[i].last)
            return false;
    }
    return true;
}

/* Deletes the rows of `ids` in one SQLite transaction. */
static int delete_rows(mqd_server_t *s, const uint64_t *ids, size_t n)
{
    if (n == 0)
        return 0;
    mqd_meta_t *meta = mqd_srv_meta(s);
    int rc = mqd_meta_begin(meta);
    if (rc != 0)
        return rc; /* e.g. inside someone else's transaction: try at the next pass */
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = mqd_meta_txn_delete(meta, ids[i]);
        if (rc == MQD_ENOENT)
            rc = 0;
    }
    if (rc == 0)
        return mqd_meta_commit(meta);
    mqd_meta_rollback(meta);
    return rc;
}

/* One pass over (at most PRUNE_SCAN_MAX of) the decided transactions. A transaction is
 * deleted only when found prunable by two passes in a row: the directory fsync after
 * retention's unlinks runs on the flusher thread, and a segment that came back after a
 * crash must not find its transaction forgotten. */
size_t mqd_txns_prune(mqd_server_t *s)
{
    mqd_txns_t *x = mqd_srv_txns(s);
    if (!x)
        return 0;
    size_t pruned = 0;
    if (x->n_stale && delete_rows(s, x->stale, x->n_stale) == 0) {
        pruned += x->n_stale;
        free(x->stale);
        x->stale = NULL;
        x->n_stale = 0;
    }
    if (x->prune_pos >= x->n_done)
        x->prune_pos = 0;
    size_t from = x->prune_pos,
           to = from + PRUNE_SCAN_MAX < x->n_done ? from + PRUNE_SCAN_MAX : x->n_done;
    uint64_t *ids = malloc(PRUNE_BATCH_MAX * sizeof *ids);
    size_t n = 0;
    for (size_t i = from; ids && i < to && n < PRUNE_BATCH_MAX; i++) {
        done_txn_t *d = &x->done[i];
        bool now = done_prunable(s, d);
        if (now && d->seen)
            ids[n++] = d->id;
        d->seen = now;
    }
    if (n && delete_rows(s, ids, n) == 0) {
        size_t w = from, k = 0;
        for (size_t i = from; i < to; i++) {
            if (k < n && x->done[i].id == ids[k]) {
                set_del(x, ids[k++]);
                done_free(&x->done[i]);
                continue;
            }
            x->done[w++] = x->done[i];
        }
        memmove(&x->done[w], &x->done[to], (x->n_done - to) * sizeof *x->done);
        x->n_done -= to - w;
        to = w;
        pruned += n;
        x->st.pruned += n;
    }
    free(ids);
    x->prune_pos = to;
    if (pruned)
        MQD_INFO("txn", "pruned %zu decided transaction(s); %zu committed remembered", pruned,
                 x->n);
    return pruned;
}

/* ---------------------------------------------------------------- decision sync */

static void *ds_main(void *arg)
{
    decision_sync_t *ds = arg;
    pthread_mutex_lock(&ds->mu);
    while (!ds->stop) {
        if (ds->done >= ds->asked || ds->err) {
            pthread_cond_wait(&ds->cv, &ds->mu);
            continue;
        }
        uint64_t covers = ds->asked;
        pthread_mutex_unlock(&ds->mu);
        int rc = mqd_meta_wal_sync(ds->meta);
        pthread_mutex_lock(&ds->mu);
        if (rc == 0)
            ds->done = covers;
        else
            ds->err = rc;
        pthread_mutex_unlock(&ds->mu);
        event_active(ds->ev, EV_READ, 0); /* thread-safe: evthread_use_pthreads */
        pthread_mutex_lock(&ds->mu);
    }
    pthread_mutex_unlock(&ds->mu);
    return NULL;
}

static void committed(mqd_server_t *s, mqd_txn_t *t);

/* Decisions SQLite holds may or may not be on disk, and nobody can be told either way:
 * stop, as SQLite itself cannot go on after an fsync error of its WAL. A restart finds
 * each of them committed or never decided (then aborted). */
static void ds_failed(mqd_txns_t *x, int err)
{
    size_t n = 0;
    for (mqd_dlist_t *i = x->syncing.next; i != &x->syncing; i = i->next)
        n++;
    MQD_ERR("txn",
            "fdatasync of the metadata WAL failed (%s): decided transactions (%zu "
            "and this batch) cannot be confirmed; stopping",
            mqd_strerror(err), n);
    abort();
}

/* The loop: decisions up to ds->done are durable; tell their clients. */
static void on_synced(evutil_socket_t fd, short what, void *arg)
{
    mqd_server_t *s = arg;
    mqd_txns_t *x = mqd_srv_txns(s);
    (void)fd;
    (void)what;
    pthread_mutex_lock(&x->ds.mu);
    uint64_t done = x->ds.done;
    int err = x->ds.err;
    pthread_mutex_unlock(&x->ds.mu);
    if (err)
        ds_failed(x, err);
    while (!mqd_dlist_empty(&x->syncing)) {
        mqd_txn_t *t = MQD_CONTAINER(x->syncing.next, mqd_txn_t, node);
        if (t->sync_gen > done)
            break; /* generations rise along the list */
        committed(s, t);
    }
    mqd_server_tick_soon(s);
}

static int ds_start(mqd_server_t *s)
{
    decision_sync_t *ds = &mqd_srv_txns(s)->ds;
    ds->meta = mqd_srv_meta(s);
    pthread_mutex_init(&ds->mu, NULL);
    pthread_cond_init(&ds->cv, NULL);
    if (!(ds->ev = event_new(mqd_srv_base(s), -1, 0, on_synced, s)))
        return MQD_ENOMEM;
    if (pthread_create(&ds->thr, NULL, ds_main, ds) != 0)
        return MQD_ENOMEM;
    pthread_setname_np(ds->thr, "mqd-txnsync");
    ds->started = true;
    return 0;
}

static void ds_stop(decision_sync_t *ds)
{
    if (ds->started) {
        pthread_mutex_lock(&ds->mu);
        ds->stop = true;
        pthread_cond_signal(&ds->cv);
        pthread_mutex_unlock(&ds->mu);
        pthread_join(ds->thr, NULL);
        ds->started = false;
    }
    if (ds->ev) {
        event_free(ds->ev);
        ds->ev = NULL;
    }
    if (ds->meta) { /* ds_start initialised the lock */
        pthread_cond_destroy(&ds->cv);
        pthread_mutex_destroy(&ds->mu);
        ds->meta = NULL;
    }
}

/* ---------------------------------------------------------------- table */

static int load_row(uint64_t id, mqd_txn_state_t state, const char *detail, void *arg)
{
    mqd_txns_t *x = arg;
    if (state != MQD_TXN_COMMITTED) {
        /* never trusted at load (an open transaction is aborted by a restart): the row
         * only takes space */
        uint64_t *nv = realloc(x->stale, (x->n_stale + 1) * sizeof *nv);
        if (!nv)
            return MQD_ENOMEM;
        x->stale = nv;
        x->stale[x->n_stale++] = id;
        return 0;
    }
    done_txn_t d;
    int rc = set_add(x, id);
    if (rc == 0)
        rc = done_from_json(id, detail, &d);
    return rc == 0 ? done_push(x, &d) : rc;
}

static void expire_timer(void *arg)
{
    mqd_txns_expire(arg);
}

int mqd_txns_init(mqd_server_t *s)
{
    mqd_txns_t *x = calloc(1, sizeof *x);
    if (!x)
        return MQD_ENOMEM;
    mqd_dlist_init(&x->open);
    mqd_dlist_init(&x->ready);
    mqd_dlist_init(&x->syncing);
    mqd_dlist_init(&x->announcing);
    uint64_t epoch;
    int rc = mqd_meta_next_id(mqd_srv_meta(s), "txn_epoch", &epoch);
    if (rc == 0)
        rc = mqd_meta_txn_list(mqd_srv_meta(s), load_row, x);
    if (rc != 0) {
        mqd_srv_set_txns(s, x);
        mqd_txns_free(s);
        return rc;
    }
    /* ids never repeat across restarts: a record's txn id must not meet a new txn; nor
     * across the nodes of a cluster (a follower adopts its leader's decisions by id):
     * the node id (1..255) takes the top byte there */
    x->next_id =
        ((uint64_t)(mqd_srv_conf(s)->node_id & 0xff) << 56) | ((epoch & 0xffffffu) << 32) | 1;
    mqd_srv_set_txns(s, x);
    if ((rc = ds_start(s)) != 0 ||
        (rc = mqd_timer_add(s, "txn.expire", 1000, expire_timer, s)) != 0) {
        mqd_txns_free(s);
        return rc;
    }
    MQD_INFO("txn", "%zu committed transactions known", x->n);
    return 0;
}

static void txn_free(mqd_txn_t *t)
{
    mqd_dlist_del(&t->node);
    if (t->discharge_conn)
        mqd_conn_unref(t->discharge_conn);
    free(t->parts);
    free(t->acks);
    free(t);
}

static void rollback(mqd_server_t *s, mqd_txn_t *t, const char *why);

void mqd_txns_free(mqd_server_t *s)
{
    mqd_txns_t *x = mqd_srv_txns(s);
    if (!x)
        return;
    ds_stop(&x->ds);
    while (!mqd_dlist_empty(&x->open))
        txn_free(MQD_CONTAINER(x->open.next, mqd_txn_t, node));
    while (!mqd_dlist_empty(&x->ready))
        txn_free(MQD_CONTAINER(x->ready.next, mqd_txn_t, node));
    /* decided, not yet known durable: SQLite's close checkpoints (and syncs) them, a
     * restart then finds them committed; their discharges go unanswered, as in a crash */
    while (!mqd_dlist_empty(&x->syncing))
        txn_free(MQD_CONTAINER(x->syncing.next, mqd_txn_t, node));
    while (!mqd_dlist_empty(&x->announcing))
        txn_free(MQD_CONTAINER(x->announcing.next, mqd_txn_t, node));
    for (size_t i = 0; i < x->n_done; i++)
        done_free(&x->done[i]);
    free(x->done);
    free(x->stale);
    free(x->committed);
    free(x);
    mqd_srv_set_txns(s, NULL);
}

static mqd_txn_t *txn_find(mqd_txns_t *x, uint64_t id)
{
    for (mqd_dlist_t *n = x->open.next; n != &x->open; n = n->next) {
        mqd_txn_t *t = MQD_CONTAINER(n, mqd_txn_t, node);
        if (t->id == id)
            return t;
    }
    return NULL;
}

uint64_t mqd_txn_id(const mqd_txn_t *t)
{
    return t->id;
}

void mqd_txn_stats(mqd_server_t *s, mqd_txn_stats_t *out)
{
    mqd_txns_t *x = mqd_srv_txns(s);
    *out = x ? x->st : (mqd_txn_stats_t){0};
    out->open = 0;
    for (mqd_dlist_t *n = x ? x->open.next : NULL; n && n != &x->open; n = n->next)
        out->open++;
}

/* ---------------------------------------------------------------- LSO */

/* A partition's LSO is the lowest first offset there of the transactions whose marker
 * is not written yet: those on the open, ready and syncing lists (committed() moves a
 * transaction to `announcing` only after its markers). Core keeps the value
 * (mqd_part_set_lso) for its readers; txn/ keeps what it is made of, in each
 * transaction's parts. A transaction's first record there can only lower it; the marker
 * of the transaction holding it raises it to the next lowest, looked up in the other
 * transactions' parts (a walk of the unfinished transactions, once per marker). */
static void lso_add(mqd_part_t *p, uint64_t first)
{
    if (first < mqd_part_lso(p))
        mqd_part_set_lso(p, first);
}

/* The lowest first offset in partition (topic, id) among l's transactions but `self`. */
static uint64_t lso_low(const mqd_dlist_t *l, const mqd_txn_t *self, const mqd_topic_t *topic,
                        uint32_t id, uint64_t low)
{
    for (const mqd_dlist_t *n = l->next; n != l; n = n->next) {
        const mqd_txn_t *o = MQD_CONTAINER(n, mqd_txn_t, node);
        for (size_t k = 0; o != self && k < o->n_parts; k++)
            if (o->parts[k].t == topic && o->parts[k].id == id && o->parts[k].first < low)
                low = o->parts[k].first;
    }
    return low;
}

/* t's marker goes to its partition x: t no longer holds that partition's LSO back. */
static void lso_drop(mqd_txns_t *x, const mqd_txn_t *t, const txn_part_t *tpp)
{
    mqd_part_t *p = tp(tpp);
    if (tpp->first != mqd_part_lso(p))
        return; /* an older transaction is open there: it stays the LSO */
    uint64_t low = lso_low(&x->open, t, tpp->t, tpp->id, UINT64_MAX);
    low = lso_low(&x->ready, t, tpp->t, tpp->id, low);
    low = lso_low(&x->syncing, t, tpp->t, tpp->id, low);
    mqd_part_set_lso(p, low);
}

/* ---------------------------------------------------------------- staging */

int mqd_txn_add_send(mqd_txn_t *t, mqd_part_t *p, uint64_t offset)
{
    for (size_t i = 0; i < t->n_parts; i++) {
        if (t->parts[i].t == mqd_part_topic(p) && t->parts[i].id == mqd_part_id(p)) {
            t->parts[i].last = offset;
            return 0;
        }
    }
    if (t->n_parts == t->cap_parts) {
        size_t ncap = t->cap_parts ? t->cap_parts * 2 : 4;
        txn_part_t *nv = realloc(t->parts, ncap * sizeof *nv);
        if (!nv) {
            t->doomed = true;
            return MQD_ENOMEM;
        }
        t->parts = nv;
        t->cap_parts = ncap;
    }
    lso_add(p, offset);
    t->parts[t->n_parts++] =
        (txn_part_t){.t = mqd_part_topic(p), .id = mqd_part_id(p), .first = offset, .last = offset};
    return 0;
}

int mqd_txn_add_ack(mqd_txn_t *t, mqd_group_t *g, uint32_t part, uint64_t offset, uint64_t outcome,
                    bool failed)
{
    if (t->n_acks == t->cap_acks) {
        size_t ncap = t->cap_acks ? t->cap_acks * 2 : 16;
        txn_ack_t *nv = realloc(t->acks, ncap * sizeof *nv);
        if (!nv)
            return MQD_ENOMEM;
        t->acks = nv;
        t->cap_acks = ncap;
    }
    t->acks[t->n_acks++] = (txn_ack_t){g, part, offset, outcome, failed};
    return 0;
}

/* ---------------------------------------------------------------- outcomes */

static void put_txn_id(pn_data_t *d, uint64_t id)
{
    char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (char)(id >> (56 - 8 * i));
    pn_data_put_binary(d, pn_bytes(8, b));
}

/* Our ids are 8 bytes; any other binary is a well-formed id that names nothing (0). */
static bool get_txn_id(pn_data_t *d, uint64_t *id)
{
    if (pn_data_type(d) != PN_BINARY)
        return false;
    pn_bytes_t b = pn_data_get_binary(d);
    if (b.size != 8) {
        *id = 0;
        return true;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < b.size; i++)
        v = (v << 8) | (uint8_t)b.start[i];
    *id = v;
    return true;
}

void mqd_txn_settle(pn_delivery_t *d, uint64_t txn, uint64_t outcome)
{
    pn_data_t *data = pn_disposition_data(pn_delivery_local(d));
    pn_data_clear(data);
    pn_data_put_list(data);
    pn_data_enter(data);
    put_txn_id(data, txn);
    pn_data_put_described(data);
    pn_data_enter(data);
    pn_data_put_ulong(data, outcome);
    pn_data_put_list(data);
    pn_data_exit(data);
    pn_data_exit(data);
    pn_delivery_update(d, MQD_TXN_STATE);
    pn_delivery_settle(d);
}

/* A transaction the timeout rolled back (the last TIMED_OUT_RING of them). */
static bool timed_out(const mqd_txns_t *x, uint64_t id)
{
    for (size_t i = 0; id != 0 && i < TIMED_OUT_RING; i++)
        if (x->timed_out[i] == id)
            return true;
    return false;
}

/* The txn id in d's remote transactional-state (0 if it names none). */
static uint64_t delivery_txn_id(pn_delivery_t *d)
{
    pn_data_t *data = pn_disposition_data(pn_delivery_remote(d));
    uint64_t id = 0;
    pn_data_rewind(data);
    if (pn_data_next(data) && pn_data_type(data) == PN_LIST) {
        pn_data_enter(data);
        if (!pn_data_next(data) || !get_txn_id(data, &id))
            id = 0;
        pn_data_exit(data);
    }
    return id;
}

mqd_txn_t *mqd_txn_of_delivery(mqd_server_t *s, pn_delivery_t *d, bool *unknown)
{
    *unknown = false;
    if (pn_disposition_type(pn_delivery_remote(d)) != MQD_TXN_STATE)
        return NULL;
    mqd_txns_t *x = mqd_srv_txns(s);
    mqd_txn_t *t = x ? txn_find(x, delivery_txn_id(d)) : NULL;
    *unknown = t == NULL;
    return t;
}

const char *mqd_txn_unknown_condition(mqd_server_t *s, pn_delivery_t *d)
{
    const mqd_txns_t *x = mqd_srv_txns(s);
    if (x && timed_out(x, delivery_txn_id(d)))
        return "amqp:transaction:timeout";
    return "amqp:transaction:unknown-id";
}

/* The outcome inside a transactional-state disposition (accepted if absent). */
uint64_t mqd_txn_outcome(pn_delivery_t *d, bool *failed)
{
    pn_data_t *data = pn_disposition_data(pn_delivery_remote(d));
    uint64_t outcome = PN_ACCEPTED;
    *failed = false;
    pn_data_rewind(data);
    if (!pn_data_next(data) || pn_data_type(data) != PN_LIST)
        return outcome;
    pn_data_enter(data);
    if (pn_data_next(data) && pn_data_next(data) && pn_data_type(data) == PN_DESCRIBED) {
        pn_data_enter(data);
        if (pn_data_next(data) && pn_data_type(data) == PN_ULONG)
            outcome = pn_data_get_ulong(data);
        if (outcome == PN_MODIFIED && pn_data_next(data) && pn_data_type(data) == PN_LIST) {
            pn_data_enter(data);
            if (pn_data_next(data) && pn_data_type(data) == PN_BOOL)
                *failed = pn_data_get_bool(data);
            pn_data_exit(data);
        }
        pn_data_exit(data);
    }
    pn_data_exit(data);
    return outcome;
}

/* ---------------------------------------------------------------- decide */

static void markers(mqd_txns_t *x, mqd_txn_t *t, uint32_t kind)
{
    for (size_t i = 0; i < t->n_parts; i++) {
        mqd_part_t *p = tp(&t->parts[i]);
        lso_drop(x, t, &t->parts[i]);
        int rc = mqd_part_append_ex(p, NULL, 0, kind, t->id, NULL, NULL, &t->parts[i].marker);
        if (rc != 0) {
            /* the decision stays in meta.db; a replicated partition's followers never see
               it, so markers_replicated() never announces it (UINT64_MAX is never below a
               visible end) and the discharge ends "outcome unknown" at txn_timeout */
            t->parts[i].marker = UINT64_MAX;
            MQD_WARN("txn", "txn=%llx: %s marker not appended to %s/%u: %s",
                     (unsigned long long)t->id, kind == MQD_REC_CTRL_COMMIT ? "COMMIT" : "ABORT",
                     mqd_topic_name(mqd_part_topic(p)), mqd_part_id(p), mqd_strerror(rc));
        }
        mqd_topic_dispatch_soon(mqd_part_topic(p));
    }
}

static void release_acks(mqd_txn_t *t)
{
    for (size_t i = 0; i < t->n_acks; i++) {
        txn_ack_t *a = &t->acks[i];
        if (a->part < mqd_group_nparts(a->g)) {
            mqd_cursor_release(mqd_group_cursor(a->g, a->part), a->off, false);
            mqd_group_settled(a->g, a->part);
            mqd_topic_dispatch_soon(mqd_group_topic(a->g));
        }
    }
}

static void rollback(mqd_server_t *s, mqd_txn_t *t, const char *why)
{
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(s);
    if (fh->txn_gone) /* what it forwarded to a leader goes too */
        fh->txn_gone(fh->arg, t->id);
    markers(mqd_srv_txns(s), t, MQD_REC_CTRL_ABORT);
    release_acks(t);
    mqd_srv_txns(s)->st.aborted++;
    MQD_INFO("txn", "rolled back txn=%llx (%s): %zu partitions, %zu acks",
             (unsigned long long)t->id, why, t->n_parts, t->n_acks);
    txn_free(t);
}

static void apply_acks(mqd_txn_t *t)
{
    for (size_t i = 0; i < t->n_acks; i++) {
        txn_ack_t *a = &t->acks[i];
        if (a->part >= mqd_group_nparts(a->g))
            continue;
        mqd_cursor_t *cur = mqd_group_cursor(a->g, a->part);
        if (a->outcome == PN_RELEASED || a->outcome == PN_MODIFIED)
            mqd_cursor_release(cur, a->off, a->outcome == PN_MODIFIED && a->failed);
        else
            mqd_cursor_done(cur, a->off);
        mqd_group_settled(a->g, a->part);
        mqd_topic_dispatch_soon(mqd_group_topic(a->g));
    }
}

static char *detail_json(const mqd_txn_t *t)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < t->n_parts; i++)
        json_array_append_new(
            arr, json_pack("{s:s, s:i, s:I}", "topic", mqd_topic_name(t->parts[i].t), "partition",
                           (int)t->parts[i].id, "last", (json_int_t)t->parts[i].last));
    json_t *o =
        json_pack("{s:o, s:i}", "partitions", arr ? arr : json_array(), "acks", (int)t->n_acks);
    char *sj = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return sj;
}

/* Writes one transaction's decision and the offsets its acks produce (caller's SQLite txn). */
static int write_decision(mqd_server_t *s, mqd_txn_t *t)
{
    char *dj = detail_json(t);
    int rc = mqd_meta_txn_put(mqd_srv_meta(s), t->id, MQD_TXN_COMMITTED, dj ? dj : "{}");
    free(dj);
    if (rc != 0)
        return rc;
    apply_acks(t);
    for (size_t i = 0; i < t->n_acks && rc == 0; i++) {
        txn_ack_t *a = &t->acks[i];
        if (a->part < mqd_group_nparts(a->g) && mqd_cursor_dirty(mqd_group_cursor(a->g, a->part)))
            rc = mqd_cursor_save(mqd_group_cursor(a->g, a->part),
                                 mqd_topic_part(mqd_group_topic(a->g), a->part),
                                 mqd_group_name(a->g));
    }
    return rc;
}

/* Is every record of t below its partition's visible end (not only on the local disk)? */
static bool records_stable(const mqd_txn_t *t)
{
    for (size_t i = 0; i < t->n_parts; i++)
        if (mqd_part_visible_end(tp(&t->parts[i]), MQD_READ_UNCOMMITTED) <= t->parts[i].last)
            return false;
    return true;
}

static void finish_discharge(mqd_txn_t *t, int rc)
{
    pn_delivery_t *d = t->discharge;
    mqd_conn_t *c = t->discharge_conn;
    if (!d || !c || mqd_conn_closed(c))
        return;
    pn_link_t *l = mqd_delivery_unhold(d);
    if (rc == 0) {
        pn_delivery_update(d, PN_ACCEPTED);
    } else {
        pn_condition_t *pc = pn_disposition_condition(pn_delivery_local(d));
        pn_condition_set_name(pc, "amqp:internal-error");
        pn_condition_set_description(pc, rc == MQD_ESTATE
                                             ? "committed on this node but not replicated in "
                                               "txn_timeout: the outcome is unknown"
                                             : "the commit could not be made durable");
        pn_delivery_update(d, PN_REJECTED);
    }
    pn_delivery_settle(d);
    t->discharge = NULL;
    mqd_link_reap(l); /* a detached coordinator link goes with its last discharge */
    mqd_conn_mark_dirty(c);
}

/* Would a new leader of every replicated partition of t find its marker? Followers adopt
 * a decision from the marker (repl/gstate.c), and what is below the watermark survives a
 * failover; a partition that is not replicated has nothing to wait for. */
static bool markers_replicated(const mqd_txn_t *t)
{
    for (size_t i = 0; i < t->n_parts; i++) {
        mqd_part_t *p = tp(&t->parts[i]);
        if (mqd_part_hw_set(p) &&
            mqd_part_visible_end(p, MQD_READ_UNCOMMITTED) <= t->parts[i].marker)
            return false;
    }
    return true;
}

/* After the decision is durable: visible to readers, discharge accepted (in a cluster
 * once the markers replicated: the decision must not be announced before a failover
 * would keep it). */
static void committed(mqd_server_t *s, mqd_txn_t *t)
{
    mqd_txns_t *x = mqd_srv_txns(s);
    set_add(x, t->id);
    done_add(x, t);
    markers(x, t, MQD_REC_CTRL_COMMIT);
    x->st.committed++;
    if (!markers_replicated(t)) {
        t->announce_ms = mqd_now_ms();
        mqd_dlist_del(&t->node);
        mqd_dlist_push(&x->announcing, &t->node);
        return;
    }
    finish_discharge(t, 0);
    MQD_DEBUG("txn", "committed txn=%llx", (unsigned long long)t->id);
    txn_free(t);
}

/* Queues a commit whose records are stable; the decisions of every transaction ready in
 * one loop iteration share one SQLite commit (group commit for transactions). */
static void commit_soon(mqd_server_t *s, mqd_txn_t *t)
{
    mqd_dlist_del(&t->node);
    mqd_dlist_push(&mqd_srv_txns(s)->ready, &t->node);
    mqd_server_tick_soon(s);
}

void mqd_txns_decide(mqd_server_t *s)
{
    mqd_txns_t *x = mqd_srv_txns(s);
    if (!x || mqd_dlist_empty(&x->ready))
        return;
    mqd_meta_t *meta = mqd_srv_meta(s);
    int rc = mqd_meta_begin_nosync(meta);
    for (mqd_dlist_t *n = x->ready.next; rc == 0 && n != &x->ready; n = n->next)
        rc = write_decision(s, MQD_CONTAINER(n, mqd_txn_t, node));
    if (rc == 0)
        rc = mqd_meta_commit(meta);
    else
        mqd_meta_rollback(meta);
    /* In SQLite, not yet on disk. With one client connection the loop has nobody else
     * to serve during the fdatasync: it syncs the WAL itself and answers at once (a hop
     * to the thread and back cost a sequential one-send transaction ~0.25 ms, 20 %).
     * Otherwise the sync thread's next fdatasync covers it and the loop goes on. */
    bool inline_sync = rc == 0 && mqd_srv_n_conns(s) <= 1 && mqd_dlist_empty(&x->syncing);
    uint64_t gen = 0;
    if (inline_sync) {
        pthread_mutex_lock(&x->ds.mu); /* the thread is idle: nothing is syncing */
        int err = mqd_meta_wal_sync(meta);
        if (err)
            x->ds.err = err;
        pthread_mutex_unlock(&x->ds.mu);
        if (err)
            ds_failed(x, err);
    } else if (rc == 0) {
        pthread_mutex_lock(&x->ds.mu);
        gen = ++x->ds.asked;
        pthread_cond_signal(&x->ds.cv);
        pthread_mutex_unlock(&x->ds.mu);
    }
    while (!mqd_dlist_empty(&x->ready)) {
        mqd_txn_t *t = MQD_CONTAINER(x->ready.next, mqd_txn_t, node);
        if (inline_sync) {
            committed(s, t);
            continue;
        }
        if (rc == 0) {
            t->sync_gen = gen;
            mqd_dlist_del(&t->node);
            mqd_dlist_push(&x->syncing, &t->node);
            continue;
        }
        MQD_ERR("txn", "commit of txn=%llx failed: %s; rolling back", (unsigned long long)t->id,
                mqd_strerror(rc));
        finish_discharge(t, rc);
        rollback(s, t, "decision not durable");
    }
}

/* Did a partition the transaction wrote to fail before its records were stable? They
 * are gone (a resume truncates them and reuses their offsets): it can never commit. */
static bool records_lost(const mqd_txn_t *t)
{
    for (size_t i = 0; i < t->n_parts; i++) {
        mqd_plog_t *log = mqd_part_log(tp(&t->parts[i]));
        /* the log's own stable (= durable once failed), not the commit point: this asks
         * what the failure destroyed, not what readers may see */
        if (mqd_plog_failed(log) && mqd_plog_stable_offset(log) <= t->parts[i].last)
            return true;
    }
    return false;
}

/* Commits whose records have become stable (a subscriber of every partition's commit
 * point: called when a visible end moved or a log failed). */
void mqd_txns_stable_advanced(mqd_server_t *s)
{
    mqd_txns_t *x = mqd_srv_txns(s);
    if (!x)
        return;
    for (mqd_dlist_t *n = x->announcing.next; n != &x->announcing;) {
        mqd_txn_t *t = MQD_CONTAINER(n, mqd_txn_t, node);
        n = n->next;
        if (markers_replicated(t)) {
            finish_discharge(t, 0);
            txn_free(t);
        }
    }
    for (mqd_dlist_t *n = x->open.next; n != &x->open;) {
        mqd_txn_t *t = MQD_CONTAINER(n, mqd_txn_t, node);
        n = n->next;
        if (records_lost(t)) {
            t->doomed = true; /* a discharge later rolls it back */
            if (t->discharge) {
                finish_discharge(t, MQD_EFAILED);
                rollback(s, t, "a partition failed before its records were durable");
            }
        } else if (t->discharge && records_stable(t)) {
            commit_soon(s, t);
        }
    }
}

/* ---------------------------------------------------------------- coordinator */

static void declare(mqd_lstate_t *ls, pn_delivery_t *d)
{
    mqd_txns_t *x = mqd_srv_txns(mqd_conn_srv(mqd_ls_conn(ls)));
    mqd_txn_t *t = calloc(1, sizeof *t);
    if (!t)
        return mqd_delivery_reject(d, "amqp:resource-limit-exceeded", "out of memory");
    t->id = x->next_id++;
    t->coord = ls;
    t->started_ms = mqd_now_ms();
    mqd_dlist_push(&x->open, &t->node);
    x->st.declared++;
    pn_data_t *data = pn_disposition_data(pn_delivery_local(d));
    pn_data_clear(data);
    pn_data_put_list(data);
    pn_data_enter(data);
    put_txn_id(data, t->id);
    pn_data_exit(data);
    pn_delivery_update(d, MQD_TXN_DECLARED);
    pn_delivery_settle(d);
}

static void discharge(mqd_lstate_t *ls, pn_delivery_t *d, uint64_t id, bool fail)
{
    mqd_conn_t *c = mqd_ls_conn(ls);
    mqd_server_t *s = mqd_conn_srv(c);
    mqd_txn_t *t = txn_find(mqd_srv_txns(s), id);
    if (!t) {
        if (timed_out(mqd_srv_txns(s), id))
            return mqd_delivery_reject(d, "amqp:transaction:timeout",
                                       "the transaction timed out and was rolled back");
        return mqd_delivery_reject(d, "amqp:transaction:unknown-id", "no such transaction");
    }
    if (t->discharge)
        return mqd_delivery_reject(d, "amqp:illegal-state",
                                   "the transaction is already being discharged");
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(s);
    bool local_work = t->n_parts || t->n_acks;
    if (fh->txn_discharge &&
        fh->txn_discharge(fh->arg, id, fail, local_work, d, c) == MQD_FWD_TAKEN) {
        /* forwarded whole to a leader, which decides: what is left here (nothing, or
           the part of a transaction that spanned leaders) is rolled back */
        if (local_work)
            return rollback(s, t, "forwarded transaction discharged");
        mqd_srv_txns(s)->st.aborted += fail;
        return txn_free(t);
    }
    if (t->doomed && !fail) {
        rollback(s, t, "a send could not be staged");
        return mqd_delivery_reject(d, "amqp:transaction:rollback",
                                   "a transactional send could not be staged; rolled back");
    }
    if (fail) {
        rollback(s, t, "discharge fail=true");
        pn_delivery_update(d, PN_ACCEPTED);
        pn_delivery_settle(d);
        return;
    }
    t->discharge = d;
    mqd_delivery_hold(d); /* the coordinator link stays until the decision settles d */
    t->discharge_conn = c;
    mqd_conn_ref(c);
    if (records_stable(t))
        commit_soon(s, t);
    /* else: mqd_txns_stable_advanced queues it once the partitions caught up */
}

/* A descriptor as its numeric code: clients send either the code or the symbol. */
static uint64_t descriptor_code(pn_data_t *d)
{
    if (pn_data_type(d) == PN_ULONG)
        return pn_data_get_ulong(d);
    if (pn_data_type(d) != PN_SYMBOL)
        return 0;
    pn_bytes_t b = pn_data_get_symbol(d);
    if (b.size == 17 && memcmp(b.start, "amqp:declare:list", 17) == 0)
        return MQD_TXN_DECLARE;
    if (b.size == 19 && memcmp(b.start, "amqp:discharge:list", 19) == 0)
        return MQD_TXN_DISCHARGE;
    return 0;
}

static bool section_is_value(pn_data_t *d)
{
    if (pn_data_type(d) == PN_ULONG)
        return pn_data_get_ulong(d) == 0x77;
    if (pn_data_type(d) != PN_SYMBOL)
        return false;
    pn_bytes_t b = pn_data_get_symbol(d);
    return b.size == 12 && memcmp(b.start, "amqp:value:*", 12) == 0;
}

/* Decodes the coordinator message body: amqp-value(described(0x31|0x32, list)). */
void mqd_txn_coordinator_transfer(mqd_lstate_t *ls, pn_delivery_t *d, const uint8_t *msg,
                                  size_t len)
{
    mqd_msg_info_t mi;
    if (len > 4096 || mqd_msg_scan(msg, len, &mi) != 0 || mi.body_off + 3 >= len)
        return mqd_delivery_reject(d, "amqp:decode-error", "not a coordinator message");
    pn_data_t *data = pn_data(8);
    uint64_t code = 0, id = 0;
    bool fail = false, have_id = false;
    ssize_t n = pn_data_decode(data, (const char *)msg + mi.body_off, len - mi.body_off);
    pn_data_rewind(data);
    /* section descriptor 0x77, then the described coordinator list */
    if (n > 0 && pn_data_next(data) && pn_data_type(data) == PN_DESCRIBED) {
        pn_data_enter(data);
        if (pn_data_next(data) && section_is_value(data) && pn_data_next(data) &&
            pn_data_type(data) == PN_DESCRIBED) {
            pn_data_enter(data);
            if (pn_data_next(data))
                code = descriptor_code(data);
            if (pn_data_next(data) && pn_data_type(data) == PN_LIST) {
                pn_data_enter(data);
                if (code == MQD_TXN_DISCHARGE && pn_data_next(data) && get_txn_id(data, &id)) {
                    have_id = true;
                    if (pn_data_next(data) && pn_data_type(data) == PN_BOOL)
                        fail = pn_data_get_bool(data);
                }
                pn_data_exit(data);
            }
        }
    }
    pn_data_free(data);
    if (code == MQD_TXN_DECLARE)
        declare(ls, d);
    else if (code == MQD_TXN_DISCHARGE && have_id)
        discharge(ls, d, id, fail);
    else
        mqd_delivery_reject(d, "amqp:decode-error", "expected declare or discharge");
    mqd_conn_mark_dirty(mqd_ls_conn(ls));
}

void mqd_txn_coordinator_gone(mqd_lstate_t *ls)
{
    mqd_server_t *s = mqd_conn_srv(mqd_ls_conn(ls));
    mqd_txns_t *x = mqd_srv_txns(s);
    if (!x)
        return;
    for (mqd_dlist_t *n = x->open.next; n != &x->open;) {
        mqd_txn_t *t = MQD_CONTAINER(n, mqd_txn_t, node);
        n = n->next;
        if (t->coord != ls)
            continue;
        if (t->discharge) {
            t->coord = NULL; /* a commit in progress completes; nobody hears about it */
            continue;
        }
        rollback(s, t, "coordinator link closed");
    }
}

static size_t list_refs(const mqd_dlist_t *l, const mqd_topic_t *topic)
{
    size_t n = 0;
    for (const mqd_dlist_t *i = l->next; i != l; i = i->next) {
        const mqd_txn_t *t = MQD_CONTAINER(i, mqd_txn_t, node);
        bool uses = false;
        for (size_t k = 0; k < t->n_parts && !uses; k++)
            uses = t->parts[k].t == topic;
        for (size_t k = 0; k < t->n_acks && !uses; k++)
            uses = mqd_group_topic(t->acks[k].g) == topic;
        n += uses;
    }
    return n;
}

size_t mqd_txns_topic_refs(mqd_server_t *s, const mqd_topic_t *t)
{
    mqd_txns_t *x = mqd_srv_txns(s);
    return x ? list_refs(&x->open, t) + list_refs(&x->ready, t) + list_refs(&x->syncing, t) +
                   list_refs(&x->announcing, t)
             : 0;
}

void mqd_txns_expire(mqd_server_t *s)
{
    mqd_txns_t *x = mqd_srv_txns(s);
    int64_t now = mqd_now_ms();
    uint64_t limit = mqd_srv_conf(s)->txn_timeout_ms;
    if (x && now >= x->next_prune_ms) {
        x->next_prune_ms = now + PRUNE_INTERVAL_MS;
        mqd_txns_prune(s);
    }
    if (!x || limit == 0)
        return;
    for (mqd_dlist_t *n = x->announcing.next; n != &x->announcing;) {
        mqd_txn_t *t = MQD_CONTAINER(n, mqd_txn_t, node);
        n = n->next;
        if (now - t->announce_ms < (int64_t)limit)
            continue;
        /* committed here, its markers not replicated (this node stepped down or lost its
         * followers): a new leader may not have it, so the outcome is unknown, not "accepted" */
        finish_discharge(t, MQD_ESTATE);
        txn_free(t);
    }
    for (mqd_dlist_t *n = x->open.next; n != &x->open;) {
        mqd_txn_t *t = MQD_CONTAINER(n, mqd_txn_t, node);
        n = n->next;
        if (t->discharge || now - t->started_ms < (int64_t)limit)
            continue;
        x->timed_out[x->to_pos++ % TIMED_OUT_RING] = t->id;
        x->st.timed_out++;
        rollback(s, t, "txn_timeout");
    }
}

void mqd_txn_core_ops(mqd_core_ops_t *ops)
{
    ops->txn_settle = mqd_txn_settle;
    ops->txn_committed = mqd_txn_committed;
    ops->txns_wake = mqd_txns_stable_advanced;
}
