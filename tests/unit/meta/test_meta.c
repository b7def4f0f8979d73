/* meta: schema, reopen, topics, batched offsets, acks, epochs, txns, ids, kv. */
#include "config.h"
#include "meta/meta.h"
#include "meta/meta_int.h"
#include "util/util.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fx {
    char dir[64];
    char path[128];
    mqd_meta_t *m;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    strcpy(f->dir, "/tmp/mqd-meta-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/meta.db", f->dir);
    assert_int_equal(mqd_meta_open(f->path, &f->m), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    static const char *const suffix[] = {"", "-wal", "-shm"};
    char p[160];
    mqd_meta_close(f->m);
    for (size_t i = 0; i < MQD_ARRAY_LEN(suffix); i++) {
        snprintf(p, sizeof p, "%s%s", f->path, suffix[i]);
        unlink(p);
    }
    rmdir(f->dir);
    free(f);
    return 0;
}

static void reopen(fx_t *f)
{
    mqd_meta_close(f->m);
    f->m = NULL;
    assert_int_equal(mqd_meta_open(f->path, &f->m), 0);
}

/* Reads a single integer with a raw sqlite connection (checks what is on disk). */
static int64_t raw_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t v = -1;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static void test_migrations(void **state)
{
    fx_t *f = *state;
    assert_true(mqd_meta_schema_version(f->m) >= 1);
    assert_int_equal(raw_int(f->path, "PRAGMA user_version"), mqd_meta_schema_version(f->m));
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM sqlite_master WHERE type='table' AND "
                                      "name IN ('topics','partitions','group_offsets','group_acks',"
                                      "'leader_epochs','transactions','counters','kv')"),
                     8);
    char mode[16] = "";
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    snprintf(mode, sizeof mode, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    assert_string_equal(mode, "wal");
    /* reopening an up-to-date database applies nothing and keeps the version */
    reopen(f);
    assert_int_equal(raw_int(f->path, "PRAGMA user_version"), mqd_meta_schema_version(f->m));
}

static void test_newer_schema_refused(void **state)
{
    fx_t *f = *state;
    mqd_meta_t *m2 = NULL;
    mqd_meta_close(f->m);
    f->m = NULL;
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 999", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(mqd_meta_open(f->path, &m2), MQD_EDB);
    assert_null(m2);
}

static int count_topic(const mqd_meta_topic_t *t, void *arg)
{
    char *names = arg;
    strcat(names, t->name);
    strcat(names, t->config_json ? "+" : "-");
    strcat(names, ",");
    return 0;
}

static int stop_after_one(const mqd_meta_topic_t *t, void *arg)
{
    (*(int *)arg)++;
    return 42;
}

static void test_topics(void **state)
{
    fx_t *f = *state;
    mqd_meta_topic_t t;
    char names[256] = "";
    int calls = 0;

    assert_int_equal(mqd_meta_topic_get(f->m, "orders", &t), MQD_ENOENT);
    assert_int_equal(mqd_meta_topic_put(f->m, "orders", 3, "{\"flush\":\"sync\"}"), 0);
    assert_int_equal(mqd_meta_topic_put(f->m, "audit", 1, NULL), 0);
    assert_int_equal(mqd_meta_topic_get(f->m, "orders", &t), 0);
    assert_string_equal(t.name, "orders");
    assert_int_equal(t.partitions, 3);
    assert_true(t.created_ms > 0);
    assert_string_equal(t.config_json, "{\"flush\":\"sync\"}");
    free(t.config_json);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM partitions WHERE topic='orders'"), 3);

    /* grow: allowed, NULL config keeps the old one; shrink: refused */
    int64_t created = t.created_ms;
    assert_int_equal(mqd_meta_topic_put(f->m, "orders", 5, NULL), 0);
    assert_int_equal(mqd_meta_topic_put(f->m, "orders", 2, NULL), MQD_EINVAL);
    assert_int_equal(mqd_meta_topic_get(f->m, "orders", &t), 0);
    assert_int_equal(t.partitions, 5);
    assert_int_equal(t.created_ms, created);
    assert_string_equal(t.config_json, "{\"flush\":\"sync\"}");
    free(t.config_json);
    assert_int_equal(raw_int(f->path, "SELECT max(id) FROM partitions WHERE topic='orders'"), 4);
    assert_int_equal(mqd_meta_topic_put(f->m, "", 1, NULL), MQD_EINVAL);

    assert_int_equal(mqd_meta_topic_list(f->m, count_topic, names), 0);
    assert_string_equal(names, "audit-,orders+,");
    assert_int_equal(mqd_meta_topic_list(f->m, stop_after_one, &calls), 42);
    assert_int_equal(calls, 1);

    /* delete removes the topic's offsets, acks, epochs and partitions too */
    mqd_meta_offset_t o = {"orders", "g", 0, 7};
    assert_int_equal(mqd_meta_offsets_commit(f->m, &o, 1), 0);
    assert_int_equal(mqd_meta_acks_put(f->m, "orders", "g", 0, "x", 1), 0);
    assert_int_equal(mqd_meta_epoch_put(f->m, "orders", 0, 1, 0), 0);
    assert_int_equal(mqd_meta_topic_delete(f->m, "orders"), 0);
    assert_int_equal(mqd_meta_topic_get(f->m, "orders", &t), MQD_ENOENT);
    assert_int_equal(mqd_meta_topic_delete(f->m, "orders"), MQD_ENOENT);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM partitions WHERE topic='orders'"), 0);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM group_offsets"), 0);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM group_acks"), 0);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM leader_epochs"), 0);

    reopen(f);
    assert_int_equal(mqd_meta_topic_get(f->m, "audit", &t), 0);
    assert_int_equal(t.partitions, 1);
    assert_null(t.config_json);
}

/* A replicated topic's identity: kept with its row, read back by get and list, gone with
 * the row; a database of schema 1 (made before the column) gets it as '' on open. */
static void test_topic_uid(void **state)
{
    fx_t *f = *state;
    mqd_meta_topic_t t;
    assert_int_equal(mqd_meta_topic_set_uid(f->m, "r3", "0123"), MQD_ENOENT);
    assert_int_equal(mqd_meta_topic_put(f->m, "r3", 2, NULL), 0);
    assert_int_equal(mqd_meta_topic_get(f->m, "r3", &t), 0);
    assert_string_equal(t.uid, "");
    assert_int_equal(mqd_meta_topic_set_uid(f->m, "r3", "0123456789abcdef0123456789abcdef"), 0);
    assert_int_equal(mqd_meta_topic_set_uid(f->m, "r3", "0123456789abcdef0123456789abcdef01234567"),
                     MQD_EINVAL);
    assert_int_equal(mqd_meta_topic_put(f->m, "r3", 3, "{}"), 0); /* a grow keeps it */
    reopen(f);
    assert_int_equal(mqd_meta_topic_get(f->m, "r3", &t), 0);
    assert_string_equal(t.uid, "0123456789abcdef0123456789abcdef");
    assert_int_equal(t.partitions, 3);
    free(t.config_json);
    assert_int_equal(mqd_meta_topic_delete(f->m, "r3"), 0);
    assert_int_equal(mqd_meta_topic_put(f->m, "r3", 1, NULL), 0);
    assert_int_equal(mqd_meta_topic_get(f->m, "r3", &t), 0);
    assert_string_equal(t.uid, ""); /* a new topic of the old name has none */

    /* schema 1 as an older mqd left it: the migration adds the column */
    mqd_meta_close(f->m);
    f->m = NULL;
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "PRAGMA foreign_keys = OFF; CREATE TABLE t2 (name TEXT "
                                  "PRIMARY KEY NOT NULL, partitions INTEGER NOT NULL, "
                                  "created_ms INTEGER NOT NULL, config_json TEXT); "
                                  "INSERT INTO t2 SELECT name, partitions, created_ms, "
                                  "config_json FROM topics; DROP TABLE topics; "
                                  "ALTER TABLE t2 RENAME TO topics; DROP TABLE amqp_bindings; "
                                  "DROP TABLE amqp_exchanges; PRAGMA user_version = 1",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(mqd_meta_open(f->path, &f->m), 0);
    assert_int_equal(raw_int(f->path, "PRAGMA user_version"), mqd_meta_schema_version(f->m));
    assert_true(mqd_meta_schema_version(f->m) >= 2);
    assert_int_equal(mqd_meta_topic_get(f->m, "r3", &t), 0);
    assert_string_equal(t.uid, "");
    assert_int_equal(t.partitions, 1);
}

struct sum {
    size_t n;
    uint64_t total;
};

static int sum_offsets(const mqd_meta_offset_t *o, void *arg)
{
    struct sum *s = arg;
    s->n++;
    s->total += o->offset;
    return 0;
}

static void test_offsets_batched(void **state)
{
    fx_t *f = *state;
    enum { N = 1000 };
    mqd_meta_offset_t *v = calloc(N, sizeof *v);
    char groups[4][8];
    assert_non_null(v);
    for (int g = 0; g < 4; g++)
        snprintf(groups[g], sizeof groups[g], "g%d", g);
    for (int i = 0; i < N; i++)
        v[i] = (mqd_meta_offset_t){"t", groups[i % 4], (uint32_t)(i / 4), (uint64_t)i};

    uint64_t before = mqd_meta_txn_count(f->m);
    assert_int_equal(mqd_meta_offsets_commit(f->m, v, N), 0);
    assert_int_equal(mqd_meta_txn_count(f->m) - before, 1);
    assert_int_equal(raw_int(f->path, "SELECT count(*) FROM group_offsets"), N);

    /* upsert: the same keys again with new offsets, still one transaction */
    for (int i = 0; i < N; i++)
        v[i].offset += 10;
    assert_int_equal(mqd_meta_offsets_commit(f->m, v, N), 0);
    assert_int_equal(mqd_meta_txn_count(f->m) - before, 2);

    uint64_t off = 0;
    assert_int_equal(mqd_meta_offset_get(f->m, "t", "g1", 0, &off), 0);
    assert_int_equal(off, 11);
    /* group names are case-insensitive */
    assert_int_equal(mqd_meta_offset_get(f->m, "t", "G1", 0, &off), 0);
    assert_int_equal(off, 11);
    assert_int_equal(mqd_meta_offset_get(f->m, "t", "nope", 0, &off), MQD_ENOENT);
    assert_int_equal(mqd_meta_offset_get(f->m, "T", "g1", 0, &off), MQD_ENOENT);

    struct sum s = {0, 0};
    assert_int_equal(mqd_meta_offset_list(f->m, NULL, NULL, sum_offsets, &s), 0);
    assert_int_equal(s.n, N);
    assert_int_equal(s.total, (uint64_t)N * (N - 1) / 2 + 10 * N);
    s = (struct sum){0, 0};
    assert_int_equal(mqd_meta_offset_list(f->m, "t", "g2", sum_offsets, &s), 0);
    assert_int_equal(s.n, N / 4);

    /* the caller's transaction is joined: several commits, one SQLite transaction */
    before = mqd_meta_txn_count(f->m);
    assert_int_equal(mqd_meta_begin(f->m), 0);
    assert_int_equal(mqd_meta_begin(f->m), MQD_ESTATE);
    assert_int_equal(mqd_meta_offsets_commit(f->m, v, 10), 0);
    assert_int_equal(mqd_meta_kv_put(f->m, "k", "v"), 0);
    assert_int_equal(mqd_meta_txn_count(f->m), before);
    assert_int_equal(mqd_meta_commit(f->m), 0);
    assert_int_equal(mqd_meta_txn_count(f->m) - before, 1);
    assert_int_equal(mqd_meta_commit(f->m), MQD_ESTATE);

    /* rollback discards */
    mqd_meta_offset_t x = {"t", "g0", 0, 999};
    assert_int_equal(mqd_meta_begin(f->m), 0);
    assert_int_equal(mqd_meta_offsets_commit(f->m, &x, 1), 0);
    assert_int_equal(mqd_meta_rollback(f->m), 0);
    assert_int_equal(mqd_meta_offset_get(f->m, "t", "g0", 0, &off), 0);
    assert_int_equal(off, 10);

    /* a bad entry fails the whole batch */
    mqd_meta_offset_t bad[2] = {{"t", "g0", 0, 555}, {NULL, "g0", 1, 1}};
    assert_int_equal(mqd_meta_offsets_commit(f->m, bad, 2), MQD_EINVAL);
    assert_int_equal(mqd_meta_offset_get(f->m, "t", "g0", 0, &off), 0);
    assert_int_equal(off, 10);

    assert_int_equal(mqd_meta_group_delete(f->m, "t", "G3"), 0);
    s = (struct sum){0, 0};
    assert_int_equal(mqd_meta_offset_list(f->m, "t", "g3", sum_offsets, &s), 0);
    assert_int_equal(s.n, 0);

    reopen(f);
    assert_int_equal(mqd_meta_offset_get(f->m, "t", "g2", 1, &off), 0);
    assert_int_equal(off, 16);
    free(v);
}

static void test_acks(void **state)
{
    fx_t *f = *state;
    unsigned char blob[300];
    void *got = NULL;
    size_t len = 0;
    for (size_t i = 0; i < sizeof blob; i++)
        blob[i] = (unsigned char)(i * 7);
    blob[5] = 0; /* binary, not a string */
    assert_int_equal(mqd_meta_acks_get(f->m, "t", "$shared", 0, &got, &len), MQD_ENOENT);
    assert_int_equal(mqd_meta_acks_put(f->m, "t", "$shared", 0, blob, sizeof blob), 0);
    assert_int_equal(mqd_meta_acks_put(f->m, "t", "$shared", 1, NULL, 0), 0);
    reopen(f);
    assert_int_equal(mqd_meta_acks_get(f->m, "t", "$shared", 0, &got, &len), 0);
    assert_int_equal(len, sizeof blob);
    assert_memory_equal(got, blob, sizeof blob);
    free(got);
    assert_int_equal(mqd_meta_acks_put(f->m, "t", "$shared", 0, "ab", 2), 0);
    assert_int_equal(mqd_meta_acks_get(f->m, "t", "$SHARED", 0, &got, &len), 0);
    assert_int_equal(len, 2);
    assert_memory_equal(got, "ab", 2);
    free(got);
    assert_int_equal(mqd_meta_acks_get(f->m, "t", "$shared", 1, &got, &len), 0);
    assert_int_equal(len, 0);
    free(got);
    assert_int_equal(mqd_meta_group_delete(f->m, "t", "$shared"), 0);
    assert_int_equal(mqd_meta_acks_get(f->m, "t", "$shared", 0, &got, &len), MQD_ENOENT);
}

static int collect_epochs(uint32_t epoch, uint64_t start, void *arg)
{
    char *s = arg;
    char one[32];
    snprintf(one, sizeof one, "%u@%llu,", epoch, (unsigned long long)start);
    strcat(s, one);
    return 0;
}

static void test_epochs(void **state)
{
    fx_t *f = *state;
    char s[128] = "";
    assert_int_equal(mqd_meta_epoch_put(f->m, "t", 0, 1, 0), 0);
    assert_int_equal(mqd_meta_epoch_put(f->m, "t", 0, 3, 250), 0);
    assert_int_equal(mqd_meta_epoch_put(f->m, "t", 0, 2, 100), 0);
    assert_int_equal(mqd_meta_epoch_put(f->m, "t", 1, 9, 5), 0);
    assert_int_equal(mqd_meta_epoch_list(f->m, "t", 0, collect_epochs, s), 0);
    assert_string_equal(s, "1@0,2@100,3@250,");
    assert_int_equal(mqd_meta_epoch_truncate(f->m, "t", 0, 1), 0);
    s[0] = '\0';
    reopen(f);
    assert_int_equal(mqd_meta_epoch_list(f->m, "t", 0, collect_epochs, s), 0);
    assert_string_equal(s, "1@0,");
    s[0] = '\0';
    assert_int_equal(mqd_meta_epoch_list(f->m, "t", 1, collect_epochs, s), 0);
    assert_string_equal(s, "9@5,");
}

static int collect_txns(uint64_t txn, mqd_txn_state_t st, const char *detail, void *arg)
{
    char *s = arg;
    char one[128];
    snprintf(one, sizeof one, "%llu:%d:%s,", (unsigned long long)txn, (int)st,
             detail ? detail : "null");
    strcat(s, one);
    return 0;
}

static void test_txns(void **state)
{
    fx_t *f = *state;
    char s[256] = "";
    assert_int_equal(mqd_meta_txn_put(f->m, 7, MQD_TXN_OPEN, NULL), 0);
    assert_int_equal(mqd_meta_txn_put(f->m, 3, MQD_TXN_OPEN, "{\"a\":1}"), 0);
    assert_int_equal(mqd_meta_txn_put(f->m, 7, MQD_TXN_COMMITTING, "{\"p\":[0,1]}"), 0);
    reopen(f);
    assert_int_equal(mqd_meta_txn_list(f->m, collect_txns, s), 0);
    assert_string_equal(s, "3:0:{\"a\":1},7:1:{\"p\":[0,1]},");
    assert_int_equal(mqd_meta_txn_delete(f->m, 3), 0);
    s[0] = '\0';
    assert_int_equal(mqd_meta_txn_list(f->m, collect_txns, s), 0);
    assert_string_equal(s, "7:1:{\"p\":[0,1]},");
}

static void test_next_id_and_kv(void **state)
{
    fx_t *f = *state;
    uint64_t id = 0, prev = 0;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(mqd_meta_next_id(f->m, "txn", &id), 0);
        assert_int_equal(id, prev + 1);
        prev = id;
    }
    assert_int_equal(mqd_meta_next_id(f->m, "other", &id), 0);
    assert_int_equal(id, 1);
    reopen(f);
    assert_int_equal(mqd_meta_next_id(f->m, "txn", &id), 0);
    assert_int_equal(id, 6);

    char *v = NULL;
    assert_int_equal(mqd_meta_kv_get(f->m, "cluster_id", &v), MQD_ENOENT);
    assert_int_equal(mqd_meta_kv_put(f->m, "cluster_id", "abc"), 0);
    assert_int_equal(mqd_meta_kv_put(f->m, "cluster_id", "def"), 0);
    reopen(f);
    assert_int_equal(mqd_meta_kv_get(f->m, "cluster_id", &v), 0);
    assert_string_equal(v, "def");
    free(v);
}

static void test_close_rolls_back(void **state)
{
    fx_t *f = *state;
    uint64_t off = 0;
    mqd_meta_offset_t o = {"t", "g", 0, 5};
    assert_int_equal(mqd_meta_offsets_commit(f->m, &o, 1), 0);
    assert_int_equal(mqd_meta_begin(f->m), 0);
    o.offset = 9;
    assert_int_equal(mqd_meta_offsets_commit(f->m, &o, 1), 0);
    assert_int_equal(mqd_meta_topic_put(f->m, "half", 1, NULL), 0);
    reopen(f); /* closes with the transaction open: nothing of it survives */
    assert_int_equal(mqd_meta_offset_get(f->m, "t", "g", 0, &off), 0);
    assert_int_equal(off, 5);
    mqd_meta_topic_t t;
    assert_int_equal(mqd_meta_topic_get(f->m, "half", &t), MQD_ENOENT);
    assert_int_equal(mqd_meta_rollback(f->m), MQD_ESTATE);
}

static int first_int(void *arg, int n, char **v, char **cols)
{
    (void)cols;
    *(int *)arg = n > 0 && v[0] ? atoi(v[0]) : -1;
    return 0;
}

static int sync_mode(mqd_meta_t *m) /* 1 NORMAL, 2 FULL */
{
    int v = -1;
    assert_int_equal(sqlite3_exec(m->db, "PRAGMA synchronous", first_int, &v, NULL), SQLITE_OK);
    return v;
}

static void *wal_sync_thread(void *arg)
{
    return (void *)(intptr_t)mqd_meta_wal_sync(arg);
}

/* mqd_meta_begin_nosync: NORMAL for that transaction only (FULL again after commit and
 * after rollback); its changes are kept; mqd_meta_wal_sync works from another thread. */
static void test_nosync_commit(void **state)
{
    fx_t *f = *state;
    char s[256] = "";
    assert_int_equal(sync_mode(f->m), 2);
    assert_int_equal(mqd_meta_begin_nosync(f->m), 0);
    assert_int_equal(sync_mode(f->m), 1);
    assert_int_equal(mqd_meta_begin_nosync(f->m), MQD_ESTATE);
    assert_int_equal(mqd_meta_txn_put(f->m, 9, MQD_TXN_COMMITTED, "{}"), 0);
    assert_int_equal(mqd_meta_commit(f->m), 0);
    assert_int_equal(sync_mode(f->m), 2);
    pthread_t th;
    void *rc = (void *)1;
    assert_int_equal(pthread_create(&th, NULL, wal_sync_thread, f->m), 0);
    assert_int_equal(pthread_join(th, &rc), 0);
    assert_int_equal((intptr_t)rc, 0);
    assert_int_equal(mqd_meta_wal_sync(f->m), 0); /* again, on its open descriptor */

    assert_int_equal(mqd_meta_begin_nosync(f->m), 0);
    assert_int_equal(mqd_meta_txn_put(f->m, 10, MQD_TXN_COMMITTED, "{}"), 0);
    assert_int_equal(mqd_meta_rollback(f->m), 0);
    assert_int_equal(sync_mode(f->m), 2);
    /* an ordinary transaction after it is FULL too */
    assert_int_equal(mqd_meta_begin(f->m), 0);
    assert_int_equal(sync_mode(f->m), 2);
    assert_int_equal(mqd_meta_commit(f->m), 0);

    reopen(f);
    assert_int_equal(mqd_meta_txn_list(f->m, collect_txns, s), 0);
    assert_string_equal(s, "9:2:{},");
}

static int count_row(const char *a, const char *b, uint32_t flags, void *arg)
{
    (void)a;
    (void)b;
    (void)flags;
    (*(int *)arg)++;
    return 0;
}

static int count_binding(const mqd_meta_binding_t *b, void *arg)
{
    (void)b;
    (*(int *)arg)++;
    return 0;
}

/* AMQP 0-9-1 exchanges and bindings: a binding is its whole tuple; deleting the
 * exchange deletes its bindings, deleting a topic (the queue) deletes the queue's. */
static void test_exchanges(void **state)
{
    fx_t *f = *state;
    int n = 0;
    assert_int_equal(mqd_meta_exchange_put(f->m, "ex.f", "fanout", 0), 0);
    assert_int_equal(mqd_meta_exchange_put(f->m, "ex.h", "headers", 1), 0);
    assert_int_equal(mqd_meta_exchange_list(f->m, count_row, &n), 0);
    assert_int_equal(n, 2);
    mqd_meta_binding_t b1 = {"ex.f", "q1", "", NULL}, b2 = {"ex.h", "q1", "", "{\"a\":\"s:1\"}"},
                       b3 = {"amq.topic", "q2", "a.#", NULL};
    assert_int_equal(mqd_meta_binding_put(f->m, &b1), 0);
    assert_int_equal(mqd_meta_binding_put(f->m, &b1), 0); /* again: one row */
    assert_int_equal(mqd_meta_binding_put(f->m, &b2), 0);
    assert_int_equal(mqd_meta_binding_put(f->m, &b3), 0);
    n = 0;
    assert_int_equal(mqd_meta_binding_list(f->m, count_binding, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(mqd_meta_exchange_delete(f->m, "ex.f"), 0);
    assert_int_equal(mqd_meta_exchange_delete(f->m, "ex.f"), MQD_ENOENT);
    assert_int_equal(mqd_meta_topic_put(f->m, "q2", 1, NULL), 0);
    assert_int_equal(mqd_meta_topic_delete(f->m, "q2"), 0);
    n = 0;
    assert_int_equal(mqd_meta_binding_list(f->m, count_binding, &n), 0);
    assert_int_equal(n, 1); /* b2 */
    assert_int_equal(mqd_meta_binding_delete(f->m, &b2), 0);
    n = 0;
    assert_int_equal(mqd_meta_binding_list(f->m, count_binding, &n), 0);
    assert_int_equal(n, 0);
}

static void test_open_bad_path(void **state)
{
    mqd_meta_t *m = NULL;
    MQD_UNUSED(state);
    assert_int_equal(mqd_meta_open("/nonexistent-dir/x/meta.db", &m), MQD_EDB);
    assert_null(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_migrations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_schema_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_topics, setup, teardown),
        cmocka_unit_test_setup_teardown(test_topic_uid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_offsets_batched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_acks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_epochs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_txns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_id_and_kv, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_rolls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nosync_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exchanges, setup, teardown),
        cmocka_unit_test(test_open_bad_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
