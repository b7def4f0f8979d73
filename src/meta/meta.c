/* meta: the SQLite metadata database. One connection per handle, every statement
 * prepared at open, every write inside an explicit transaction: the caller's
 * (mqd_meta_begin) or one opened and committed by the function itself. */
#include "config.h"
#include "meta/meta_int.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define META_BUSY_TIMEOUT_MS 5000

static const char *const stmt_sql[ST__COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_TOPIC_PARTS] = "SELECT partitions FROM topics WHERE name = ?1",
    [ST_TOPIC_INSERT] = "INSERT INTO topics (name, partitions, created_ms, config_json)"
                        " VALUES (?1, ?2, ?3, ?4)",
    [ST_TOPIC_UPDATE] = "UPDATE topics SET partitions = ?2,"
                        " config_json = coalesce(?3, config_json) WHERE name = ?1",
    [ST_PART_INSERT] = "INSERT OR IGNORE INTO partitions (topic, id) VALUES (?1, ?2)",
    [ST_TOPIC_GET] = "SELECT name, partitions, created_ms, config_json, uid FROM topics"
                     " WHERE name = ?1",
    [ST_TOPIC_LIST] = "SELECT name, partitions, created_ms, config_json, uid FROM topics"
                      " ORDER BY name",
    [ST_TOPIC_DELETE] = "DELETE FROM topics WHERE name = ?1",
    [ST_TOPIC_UID] = "UPDATE topics SET uid = ?2 WHERE name = ?1",
    [ST_OFFSETS_DEL_TOPIC] = "DELETE FROM group_offsets WHERE topic = ?1",
    [ST_ACKS_DEL_TOPIC] = "DELETE FROM group_acks WHERE topic = ?1",
    [ST_EPOCHS_DEL_TOPIC] = "DELETE FROM leader_epochs WHERE topic = ?1",
    [ST_OFFSET_PUT] = "INSERT INTO group_offsets (topic, grp, partition, next_offset, updated_ms)"
                      " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (topic, grp, partition)"
                      " DO UPDATE SET next_offset = excluded.next_offset,"
                      " updated_ms = excluded.updated_ms",
    [ST_OFFSET_GET] = "SELECT next_offset FROM group_offsets"
                      " WHERE topic = ?1 AND grp = ?2 AND partition = ?3",
    [ST_OFFSET_LIST] = "SELECT topic, grp, partition, next_offset FROM group_offsets"
                       " WHERE (?1 IS NULL OR topic = ?1) AND (?2 IS NULL OR grp = ?2)"
                       " ORDER BY topic, grp, partition",
    [ST_OFFSETS_DEL_GROUP] = "DELETE FROM group_offsets WHERE topic = ?1 AND grp = ?2",
    [ST_ACKS_DEL_GROUP] = "DELETE FROM group_acks WHERE topic = ?1 AND grp = ?2",
    [ST_ACKS_PUT] = "INSERT INTO group_acks (topic, grp, partition, blob, updated_ms)"
                    " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (topic, grp, partition)"
                    " DO UPDATE SET blob = excluded.blob, updated_ms = excluded.updated_ms",
    [ST_ACKS_GET] = "SELECT blob FROM group_acks WHERE topic = ?1 AND grp = ?2 AND partition = ?3",
    [ST_EPOCH_PUT] = "INSERT OR REPLACE INTO leader_epochs (topic, partition, epoch, start_offset)"
                     " VALUES (?1, ?2, ?3, ?4)",
    [ST_EPOCH_LIST] = "SELECT epoch, start_offset FROM leader_epochs"
                      " WHERE topic = ?1 AND partition = ?2 ORDER BY epoch",
    [ST_EPOCH_TRUNC] =
        "DELETE FROM leader_epochs WHERE topic = ?1 AND partition = ?2 AND epoch > ?3",
    [ST_TXN_PUT] = "INSERT INTO transactions (id, state, detail_json, updated_ms)"
                   " VALUES (?1, ?2, ?3, ?4) ON CONFLICT (id) DO UPDATE SET"
                   " state = excluded.state, detail_json = excluded.detail_json,"
                   " updated_ms = excluded.updated_ms",
    [ST_TXN_DELETE] = "DELETE FROM transactions WHERE id = ?1",
    [ST_TXN_LIST] = "SELECT id, state, detail_json FROM transactions ORDER BY id",
    [ST_COUNTER_BUMP] = "INSERT INTO counters (name, value) VALUES (?1, 1)"
                        " ON CONFLICT (name) DO UPDATE SET value = value + 1",
    [ST_COUNTER_GET] = "SELECT value FROM counters WHERE name = ?1",
    [ST_KV_PUT] = "INSERT INTO kv (key, value) VALUES (?1, ?2)"
                  " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    [ST_KV_GET] = "SELECT value FROM kv WHERE key = ?1",
    [ST_EXCH_PUT] = "INSERT INTO amqp_exchanges (name, type, flags, created_ms)"
                    " VALUES (?1, ?2, ?3, ?4) ON CONFLICT (name) DO UPDATE SET"
                    " type = excluded.type, flags = excluded.flags",
    [ST_EXCH_DELETE] = "DELETE FROM amqp_exchanges WHERE name = ?1",
    [ST_EXCH_LIST] = "SELECT name, type, flags FROM amqp_exchanges ORDER BY name",
    [ST_BIND_PUT] = "INSERT OR IGNORE INTO amqp_bindings (exchange, queue, routing_key, args_json)"
                    " VALUES (?1, ?2, ?3, ?4)",
    [ST_BIND_DELETE] = "DELETE FROM amqp_bindings WHERE exchange = ?1 AND queue = ?2"
                       " AND routing_key = ?3 AND args_json = ?4",
    [ST_BIND_LIST] = "SELECT exchange, queue, routing_key, args_json FROM amqp_bindings"
                     " ORDER BY exchange, queue, routing_key, args_json",
    [ST_BINDS_DEL_EXCH] = "DELETE FROM amqp_bindings WHERE exchange = ?1",
    [ST_BINDS_DEL_QUEUE] = "DELETE FROM amqp_bindings WHERE queue = ?1",
};

int meta_dberr(mqd_meta_t *m, const char *what)
{
    MQD_ERR("meta", "%s: %s (sqlite %d)", what, sqlite3_errmsg(m->db),
            sqlite3_extended_errcode(m->db));
    /* a full disk is the operator's to fix, not a broken database: say so */
    return (sqlite3_extended_errcode(m->db) & 0xff) == SQLITE_FULL ? MQD_ENOSPC : MQD_EDB;
}

int meta_exec(mqd_meta_t *m, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(m->db, sql, NULL, NULL, &msg) == SQLITE_OK)
        return 0;
    MQD_ERR("meta", "exec '%.60s': %s", sql, msg ? msg : sqlite3_errmsg(m->db));
    sqlite3_free(msg);
    return MQD_EDB;
}

/* ---- statement helpers: bindings are checked, statements reset after each use so
 * no read transaction stays open (it would pin the WAL and block checkpoints) ---- */

static sqlite3_stmt *stmt(mqd_meta_t *m, enum meta_stmt i)
{
    sqlite3_reset(m->st[i]);
    sqlite3_clear_bindings(m->st[i]);
    return m->st[i];
}

static bool b_text(sqlite3_stmt *s, int i, const char *v)
{
    return (v ? sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(s, i)) ==
           SQLITE_OK;
}

static bool b_int(sqlite3_stmt *s, int i, int64_t v)
{
    return sqlite3_bind_int64(s, i, v) == SQLITE_OK;
}

/* Steps a statement that returns no rows. */
static int step_done(mqd_meta_t *m, sqlite3_stmt *s, const char *what)
{
    int rc = sqlite3_step(s);
    int out = rc == SQLITE_DONE ? 0 : meta_dberr(m, what);
    sqlite3_reset(s);
    return out;
}

/* Steps a query: 1 = row ready, 0 = no more rows (statement reset), MQD_EDB. */
static int step_row(mqd_meta_t *m, sqlite3_stmt *s, const char *what)
{
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        return 1;
    int out = rc == SQLITE_DONE ? 0 : meta_dberr(m, what);
    sqlite3_reset(s);
    return out;
}

static int bind_fail(mqd_meta_t *m, sqlite3_stmt *s, const char *what)
{
    int rc = meta_dberr(m, what);
    sqlite3_reset(s);
    return rc;
}

/* Opens a write transaction unless the caller has one; *own says who commits. */
static int wbegin(mqd_meta_t *m, bool *own)
{
    if (m->in_txn) {
        /* SQLite rolls back by itself after some errors (full disk, I/O); writing on
         * in autocommit mode would break the caller's all-or-nothing batch */
        if (sqlite3_get_autocommit(m->db)) {
            MQD_ERR("meta", "the caller's transaction was rolled back by SQLite");
            return MQD_EDB;
        }
        *own = false;
        return 0;
    }
    int rc = step_done(m, stmt(m, ST_BEGIN), "begin");
    if (rc == 0)
        *own = true;
    return rc;
}

/* ---- the WAL's name ----
 * A commit is in the WAL, and the WAL is a file of its own: after a power cut it is there
 * only if its directory entry was durable, else every commit in it is gone. SQLite syncs
 * the directory only as a side effect of its first sync of a WAL it opened (a build with
 * SQLITE_DISABLE_DIRSYNC never does), and never for the database file itself. So mqd
 * fsyncs the directory itself: at open (meta.db and the WAL SQLite just opened or
 * created), and whenever a commit meets a WAL inode it has not done it for (a WAL made
 * after the open), before that commit counts as durable. */

static int sync_dir(const mqd_meta_t *m)
{
    if (mqd_fsync_dir(m->dir_path) == 0)
        return 0;
    MQD_ERR("meta", "fsync of the directory %s: %s", m->dir_path, strerror(errno));
    return MQD_EIO;
}

/* The WAL that is inode (dev, ino) has a durable name once this returns 0 (*named: the
 * one this thread last made so). */
static int wal_named(const mqd_meta_t *m, meta_wal_name_t *named, dev_t dev, ino_t ino)
{
    if (named->known && named->ino == ino && named->dev == dev)
        return 0;
    int rc = sync_dir(m);
    if (rc == 0)
        *named = (meta_wal_name_t){.known = true, .dev = dev, .ino = ino};
    return rc;
}

/* After a commit with synchronous = FULL (SQLite synced the WAL's data): its name too. */
static int wal_named_path(const mqd_meta_t *m, meta_wal_name_t *named)
{
    struct stat sb;
    if (stat(m->wal_path, &sb) != 0) {
        if (errno == ENOENT)
            return 0; /* not in WAL mode (yet): the commit went to meta.db itself */
        MQD_ERR("meta", "%s: %s", m->wal_path, strerror(errno));
        return MQD_EIO;
    }
    return wal_named(m, named, sb.st_dev, sb.st_ino);
}

static int wend(mqd_meta_t *m, bool own, int rc)
{
    if (!own)
        return rc;
    if (rc == 0) {
        rc = step_done(m, stmt(m, ST_COMMIT), "commit");
        if (rc == 0) {
            m->txn_count++;
            /* a nosync commit is durable only after mqd_meta_wal_sync, which does this */
            return m->nosync ? 0 : wal_named_path(m, &m->named_loop);
        }
    }
    if (!sqlite3_get_autocommit(m->db))
        (void)step_done(m, stmt(m, ST_ROLLBACK), "rollback");
    return rc;
}

/* ---- open / close / transactions ---- */

static int configure(mqd_meta_t *m)
{
    static const char *const pragmas[] = {
        "PRAGMA journal_mode = WAL",
        "PRAGMA synchronous = FULL",
        "PRAGMA foreign_keys = ON",
    };
    if (sqlite3_busy_timeout(m->db, META_BUSY_TIMEOUT_MS) != SQLITE_OK)
        return meta_dberr(m, "busy_timeout");
    for (size_t i = 0; i < MQD_ARRAY_LEN(pragmas); i++) {
        int rc = meta_exec(m, pragmas[i]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int prepare_all(mqd_meta_t *m)
{
    for (int i = 0; i < ST__COUNT; i++) {
        if (sqlite3_prepare_v3(m->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &m->st[i],
                               NULL) != SQLITE_OK) {
            MQD_ERR("meta", "prepare '%s': %s", stmt_sql[i], sqlite3_errmsg(m->db));
            return MQD_EDB;
        }
    }
    return 0;
}

/* The directory holding path (malloc'd): "." for a bare file name, "/" for a file in /. */
static char *dir_of(const char *path)
{
    const char *sl = strrchr(path, '/');
    if (!sl)
        return strdup(".");
    size_t n = sl == path ? 1 : (size_t)(sl - path);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = '\0';
    }
    return d;
}

/* At open, right after the directory's fsync: the WAL there now (if SQLite made one) has
 * a durable name, for the handle's thread and for mqd_meta_wal_sync's (which starts
 * later: the thread that runs it is created after the open returns). */
static int wal_opened(mqd_meta_t *m)
{
    struct stat sb;
    if (stat(m->wal_path, &sb) != 0)
        return errno == ENOENT ? 0 : MQD_EIO;
    m->named_loop = (meta_wal_name_t){.known = true, .dev = sb.st_dev, .ino = sb.st_ino};
    m->named_sync = m->named_loop;
    return 0;
}

int mqd_meta_open(const char *path, mqd_meta_t **out)
{
    mqd_meta_t *m = calloc(1, sizeof *m);
    int rc = MQD_ENOMEM;
    if (m == NULL)
        goto fail;
    m->wal_fd = -1;
    size_t pl = strlen(path) + 5;
    if (!(m->wal_path = malloc(pl)) || !(m->dir_path = dir_of(path)))
        goto fail;
    snprintf(m->wal_path, pl, "%s-wal", path);
    if (sqlite3_open_v2(path, &m->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        rc = m->db ? meta_dberr(m, path) : MQD_ENOMEM;
        goto fail;
    }
    sqlite3_extended_result_codes(m->db, 1);
    rc = configure(m);
    if (rc == 0)
        rc = meta_migrate(m);
    if (rc == 0)
        rc = prepare_all(m);
    /* meta.db may be new, and so may the WAL (SQLite deletes it at a clean close and
     * makes a new one at open): their names, before anything in them is acknowledged */
    if (rc == 0)
        rc = sync_dir(m);
    if (rc == 0)
        rc = wal_opened(m);
    if (rc != 0)
        goto fail;
    *out = m;
    return 0;
fail:
    mqd_meta_close(m);
    return rc;
}

void mqd_meta_close(mqd_meta_t *m)
{
    if (m == NULL)
        return;
    if (m->in_txn && m->st[ST_ROLLBACK] != NULL) {
        MQD_WARN("meta", "closing with an open transaction: rolled back");
        (void)step_done(m, stmt(m, ST_ROLLBACK), "rollback");
    }
    for (int i = 0; i < ST__COUNT; i++)
        sqlite3_finalize(m->st[i]);
    if (m->db != NULL && sqlite3_close(m->db) != SQLITE_OK)
        MQD_ERR("meta", "close: %s", sqlite3_errmsg(m->db));
    if (m->wal_fd >= 0)
        close(m->wal_fd);
    free(m->wal_path);
    free(m->dir_path);
    free(m);
}

int mqd_meta_schema_version(mqd_meta_t *m)
{
    MQD_UNUSED(m);
    return meta_schema_latest(); /* open fails unless every migration applied */
}

uint64_t mqd_meta_txn_count(const mqd_meta_t *m)
{
    return m->txn_count;
}

int mqd_meta_begin(mqd_meta_t *m)
{
    if (m->in_txn)
        return MQD_ESTATE;
    int rc = step_done(m, stmt(m, ST_BEGIN), "begin");
    if (rc == 0)
        m->in_txn = true;
    return rc;
}

/* After a transaction begun by mqd_meta_begin_nosync: every later one syncs again. */
static int restore_sync(mqd_meta_t *m, int rc)
{
    if (!m->nosync)
        return rc;
    m->nosync = false;
    if (meta_exec(m, "PRAGMA synchronous = FULL") != 0) {
        /* later commits would not wait for the disk: nothing may be acknowledged */
        MQD_ERR("meta", "cannot restore synchronous = FULL: stopping");
        abort();
    }
    return rc;
}

int mqd_meta_begin_nosync(mqd_meta_t *m)
{
    if (m->in_txn)
        return MQD_ESTATE;
    int rc = meta_exec(m, "PRAGMA synchronous = NORMAL");
    if (rc != 0)
        return rc;
    m->nosync = true;
    rc = mqd_meta_begin(m);
    return rc == 0 ? 0 : restore_sync(m, rc);
}

int mqd_meta_commit(mqd_meta_t *m)
{
    if (!m->in_txn)
        return MQD_ESTATE;
    m->in_txn = false;
    if (sqlite3_get_autocommit(m->db)) {
        MQD_ERR("meta", "commit: the transaction was already rolled back by SQLite");
        return restore_sync(m, MQD_EDB);
    }
    return restore_sync(m, wend(m, true, 0));
}

int mqd_meta_rollback(mqd_meta_t *m)
{
    if (!m->in_txn)
        return MQD_ESTATE;
    m->in_txn = false;
    if (sqlite3_get_autocommit(m->db))
        return restore_sync(m, 0); /* SQLite already rolled back after an error */
    return restore_sync(m, step_done(m, stmt(m, ST_ROLLBACK), "rollback"));
}

int mqd_meta_wal_sync(mqd_meta_t *m)
{
    struct stat sb;
    /* SQLite keeps its WAL while the database is open; reopen if it was replaced */
    if (m->wal_fd >= 0 && (stat(m->wal_path, &sb) != 0 || sb.st_ino != m->wal_ino ||
                           sb.st_dev != m->wal_dev)) {
        close(m->wal_fd);
        m->wal_fd = -1;
    }
    if (m->wal_fd < 0) {
        m->wal_fd = open(m->wal_path, O_RDONLY | O_CLOEXEC);
        if (m->wal_fd < 0 || fstat(m->wal_fd, &sb) != 0) {
            MQD_ERR("meta", "%s: %s", m->wal_path, strerror(errno));
            return MQD_EIO;
        }
        m->wal_dev = sb.st_dev;
        m->wal_ino = sb.st_ino;
    }
    if (fdatasync(m->wal_fd) != 0) {
        MQD_ERR("meta", "fdatasync %s: %s", m->wal_path, strerror(errno));
        return MQD_EIO;
    }
    /* a WAL new to this handle (made after the open): its name, before its commits count */
    return wal_named(m, &m->named_sync, m->wal_dev, m->wal_ino);
}

/* ---- topics ---- */

static int topic_parts(mqd_meta_t *m, const char *name, int64_t *parts)
{
    sqlite3_stmt *s = stmt(m, ST_TOPIC_PARTS);
    if (!b_text(s, 1, name))
        return bind_fail(m, s, "topic parts bind");
    int rc = step_row(m, s, "topic parts");
    if (rc == 1) {
        *parts = sqlite3_column_int64(s, 0);
        sqlite3_reset(s);
        return 0;
    }
    return rc == 0 ? MQD_ENOENT : rc;
}

static int topic_write(mqd_meta_t *m, const char *name, uint32_t partitions, const char *cfg)
{
    int64_t have = 0;
    int rc = topic_parts(m, name, &have);
    sqlite3_stmt *s;
    if (rc == MQD_ENOENT) {
        s = stmt(m, ST_TOPIC_INSERT);
        if (!b_text(s, 1, name) || !b_int(s, 2, partitions) || !b_int(s, 3, mqd_now_ms()) ||
            !b_text(s, 4, cfg))
            return bind_fail(m, s, "topic insert bind");
        rc = step_done(m, s, "topic insert");
    } else if (rc == 0) {
        if (have > (int64_t)partitions) {
            MQD_WARN("meta", "topic %s: partitions may only grow (%lld -> %u)", name,
                     (long long)have, partitions);
            return MQD_EINVAL;
        }
        s = stmt(m, ST_TOPIC_UPDATE);
        if (!b_text(s, 1, name) || !b_int(s, 2, partitions) || !b_text(s, 3, cfg))
            return bind_fail(m, s, "topic update bind");
        rc = step_done(m, s, "topic update");
    }
    for (uint32_t p = (uint32_t)have; rc == 0 && p < partitions; p++) {
        s = stmt(m, ST_PART_INSERT);
        if (!b_text(s, 1, name) || !b_int(s, 2, p))
            return bind_fail(m, s, "partition insert bind");
        rc = step_done(m, s, "partition insert");
    }
    return rc;
}

int mqd_meta_topic_put(mqd_meta_t *m, const char *name, uint32_t partitions,
                       const char *config_json)
{
    bool own = false;
    if (name == NULL || name[0] == '\0' || strlen(name) >= sizeof(((mqd_meta_topic_t *)0)->name))
        return MQD_EINVAL;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    return wend(m, own, topic_write(m, name, partitions, config_json));
}

/* Fills t from a topics row; config_json is strdup'd. */
static int topic_from_row(sqlite3_stmt *s, mqd_meta_topic_t *t)
{
    const char *name = (const char *)sqlite3_column_text(s, 0);
    const char *cfg = (const char *)sqlite3_column_text(s, 3);
    const char *uid = (const char *)sqlite3_column_text(s, 4);
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name ? name : "");
    snprintf(t->uid, sizeof t->uid, "%s", uid ? uid : "");
    t->partitions = (uint32_t)sqlite3_column_int64(s, 1);
    t->created_ms = sqlite3_column_int64(s, 2);
    if (cfg != NULL && (t->config_json = strdup(cfg)) == NULL)
        return MQD_ENOMEM;
    return 0;
}

int mqd_meta_topic_get(mqd_meta_t *m, const char *name, mqd_meta_topic_t *out)
{
    mqd_meta_topic_t t;
    sqlite3_stmt *s = stmt(m, ST_TOPIC_GET);
    if (!b_text(s, 1, name))
        return bind_fail(m, s, "topic get bind");
    int rc = step_row(m, s, "topic get");
    if (rc != 1)
        return rc == 0 ? MQD_ENOENT : rc;
    rc = topic_from_row(s, &t);
    sqlite3_reset(s);
    if (rc == 0)
        *out = t;
    return rc;
}

int mqd_meta_topic_list(mqd_meta_t *m, mqd_meta_topic_cb cb, void *arg)
{
    sqlite3_stmt *s = stmt(m, ST_TOPIC_LIST);
    int rc;
    while ((rc = step_row(m, s, "topic list")) == 1) {
        mqd_meta_topic_t t;
        rc = topic_from_row(s, &t);
        if (rc == 0)
            rc = cb(&t, arg);
        free(t.config_json);
        if (rc != 0) {
            sqlite3_reset(s);
            return rc;
        }
    }
    return rc;
}

int mqd_meta_topic_set_uid(mqd_meta_t *m, const char *name, const char *uid)
{
    bool own = false;
    if (name == NULL || uid == NULL || strlen(uid) >= sizeof(((mqd_meta_topic_t *)0)->uid))
        return MQD_EINVAL;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    sqlite3_stmt *s = stmt(m, ST_TOPIC_UID);
    if (!b_text(s, 1, name) || !b_text(s, 2, uid))
        rc = bind_fail(m, s, "topic uid bind");
    else
        rc = step_done(m, s, "topic uid");
    bool existed = rc == 0 && sqlite3_changes(m->db) > 0;
    rc = wend(m, own, rc);
    return rc == 0 && !existed ? MQD_ENOENT : rc;
}

/* Runs a DELETE bound to (topic[, group]). */
static int delete_by(mqd_meta_t *m, enum meta_stmt i, const char *topic, const char *group)
{
    sqlite3_stmt *s = stmt(m, i);
    if (!b_text(s, 1, topic) || (group != NULL && !b_text(s, 2, group)))
        return bind_fail(m, s, "delete bind");
    return step_done(m, s, stmt_sql[i]);
}

int mqd_meta_topic_delete(mqd_meta_t *m, const char *name)
{
    static const enum meta_stmt dels[] = {ST_OFFSETS_DEL_TOPIC, ST_ACKS_DEL_TOPIC,
                                          ST_EPOCHS_DEL_TOPIC, ST_BINDS_DEL_QUEUE,
                                          ST_TOPIC_DELETE};
    bool own = false;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < MQD_ARRAY_LEN(dels); i++)
        rc = delete_by(m, dels[i], name, NULL);
    /* the orphan rows are gone either way; report whether the topic itself existed */
    bool existed = rc == 0 && sqlite3_changes(m->db) > 0;
    rc = wend(m, own, rc);
    return rc == 0 && !existed ? MQD_ENOENT : rc;
}

/* ---- group offsets ---- */

static int offset_put(mqd_meta_t *m, const mqd_meta_offset_t *o, int64_t now)
{
    sqlite3_stmt *s = stmt(m, ST_OFFSET_PUT);
    if (o->topic == NULL || o->group == NULL || o->offset > INT64_MAX) {
        MQD_WARN("meta", "offset commit: bad entry");
        return MQD_EINVAL;
    }
    if (!b_text(s, 1, o->topic) || !b_text(s, 2, o->group) || !b_int(s, 3, o->partition) ||
        !b_int(s, 4, (int64_t)o->offset) || !b_int(s, 5, now))
        return bind_fail(m, s, "offset bind");
    return step_done(m, s, "offset put");
}

int mqd_meta_offsets_commit(mqd_meta_t *m, const mqd_meta_offset_t *v, size_t n)
{
    bool own = false;
    if (n == 0)
        return 0;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    int64_t now = mqd_now_ms();
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = offset_put(m, &v[i], now);
    return wend(m, own, rc);
}

int mqd_meta_offset_get(mqd_meta_t *m, const char *topic, const char *group, uint32_t partition,
                        uint64_t *out)
{
    sqlite3_stmt *s = stmt(m, ST_OFFSET_GET);
    if (!b_text(s, 1, topic) || !b_text(s, 2, group) || !b_int(s, 3, partition))
        return bind_fail(m, s, "offset get bind");
    int rc = step_row(m, s, "offset get");
    if (rc != 1)
        return rc == 0 ? MQD_ENOENT : rc;
    *out = (uint64_t)sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    return 0;
}

int mqd_meta_offset_list(mqd_meta_t *m, const char *topic, const char *group, mqd_meta_offset_cb cb,
                         void *arg)
{
    sqlite3_stmt *s = stmt(m, ST_OFFSET_LIST);
    int rc;
    if (!b_text(s, 1, topic) || !b_text(s, 2, group))
        return bind_fail(m, s, "offset list bind");
    while ((rc = step_row(m, s, "offset list")) == 1) {
        mqd_meta_offset_t o = {
            .topic = (const char *)sqlite3_column_text(s, 0),
            .group = (const char *)sqlite3_column_text(s, 1),
            .partition = (uint32_t)sqlite3_column_int64(s, 2),
            .offset = (uint64_t)sqlite3_column_int64(s, 3),
        };
        if (o.topic == NULL || o.group == NULL)
            rc = MQD_ENOMEM;
        else
            rc = cb(&o, arg);
        if (rc != 0) {
            sqlite3_reset(s);
            return rc;
        }
    }
    return rc;
}

int mqd_meta_group_delete(mqd_meta_t *m, const char *topic, const char *group)
{
    bool own = false;
    if (topic == NULL || group == NULL)
        return MQD_EINVAL;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    rc = delete_by(m, ST_OFFSETS_DEL_GROUP, topic, group);
    if (rc == 0)
        rc = delete_by(m, ST_ACKS_DEL_GROUP, topic, group);
    return wend(m, own, rc);
}

/* ---- shared-mode ack blobs ---- */

int mqd_meta_acks_put(mqd_meta_t *m, const char *topic, const char *group, uint32_t partition,
                      const void *blob, size_t len)
{
    bool own = false;
    if (topic == NULL || group == NULL || (blob == NULL && len > 0) || len > INT32_MAX)
        return MQD_EINVAL;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    sqlite3_stmt *s = stmt(m, ST_ACKS_PUT);
    /* a zero-length blob binds as an empty blob, not NULL (the column is NOT NULL) */
    if (!b_text(s, 1, topic) || !b_text(s, 2, group) || !b_int(s, 3, partition) ||
        sqlite3_bind_blob(s, 4, len ? blob : "", (int)len, SQLITE_STATIC) != SQLITE_OK ||
        !b_int(s, 5, mqd_now_ms()))
        rc = bind_fail(m, s, "acks bind");
    else
        rc = step_done(m, s, "acks put");
    return wend(m, own, rc);
}

int mqd_meta_acks_get(mqd_meta_t *m, const char *topic, const char *group, uint32_t partition,
                      void **blob, size_t *len)
{
    sqlite3_stmt *s = stmt(m, ST_ACKS_GET);
    if (!b_text(s, 1, topic) || !b_text(s, 2, group) || !b_int(s, 3, partition))
        return bind_fail(m, s, "acks get bind");
    int rc = step_row(m, s, "acks get");
    if (rc != 1)
        return rc == 0 ? MQD_ENOENT : rc;
    const void *p = sqlite3_column_blob(s, 0);
    size_t n = (size_t)sqlite3_column_bytes(s, 0);
    void *copy = malloc(n ? n : 1);
    if (copy != NULL && n > 0)
        memcpy(copy, p, n);
    sqlite3_reset(s);
    if (copy == NULL)
        return MQD_ENOMEM;
    *blob = copy;
    *len = n;
    return 0;
}

/* ---- leader epochs ---- */

int mqd_meta_epoch_put(mqd_meta_t *m, const char *topic, uint32_t partition, uint32_t epoch,
                       uint64_t start_offset)
{
    bool own = false;
    if (topic == NULL || start_offset > INT64_MAX)
        return MQD_EINVAL;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    sqlite3_stmt *s = stmt(m, ST_EPOCH_PUT);
    if (!b_text(s, 1, topic) || !b_int(s, 2, partition) || !b_int(s, 3, epoch) ||
        !b_int(s, 4, (int64_t)start_offset))
        rc = bind_fail(m, s, "epoch bind");
    else
        rc = step_done(m, s, "epoch put");
    return wend(m, own, rc);
}

int mqd_meta_epoch_list(mqd_meta_t *m, const char *topic, uint32_t partition, mqd_meta_epoch_cb cb,
                        void *arg)
{
    sqlite3_stmt *s = stmt(m, ST_EPOCH_LIST);
    int rc;
    if (!b_text(s, 1, topic) || !b_int(s, 2, partition))
        return bind_fail(m, s, "epoch list bind");
    while ((rc = step_row(m, s, "epoch list")) == 1) {
        rc = cb((uint32_t)sqlite3_column_int64(s, 0), (uint64_t)sqlite3_column_int64(s, 1), arg);
        if (rc != 0) {
            sqlite3_reset(s);
            return rc;
        }
    }
    return rc;
}

int mqd_meta_epoch_truncate(mqd_meta_t *m, const char *topic, uint32_t partition, uint32_t epoch)
{
    bool own = false;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    sqlite3_stmt *s = stmt(m, ST_EPOCH_TRUNC);
    if (!b_text(s, 1, topic) || !b_int(s, 2, partition) || !b_int(s, 3, epoch))
        rc = bind_fail(m, s, "epoch truncate bind");
    else
        rc = step_done(m, s, "epoch truncate");
    return wend(m, own, rc);
}

/* ---- transaction records ---- */

int mqd_meta_txn_put(mqd_meta_t *m, uint64_t txn, mqd_txn_state_t state, const char *detail_json)
{
    bool own = false;
    if (txn > INT64_MAX)
        return MQD_EINVAL;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    sqlite3_stmt *s = stmt(m, ST_TXN_PUT);
    if (!b_int(s, 1, (int64_t)txn) || !b_int(s, 2, state) || !b_text(s, 3, detail_json) ||
        !b_int(s, 4, mqd_now_ms()))
        rc = bind_fail(m, s, "txn bind");
    else
        rc = step_done(m, s, "txn put");
    return wend(m, own, rc);
}

int mqd_meta_txn_delete(mqd_meta_t *m, uint64_t txn)
{
    bool own = false;
    if (txn > INT64_MAX)
        return MQD_EINVAL;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    sqlite3_stmt *s = stmt(m, ST_TXN_DELETE);
    rc = b_int(s, 1, (int64_t)txn) ? step_done(m, s, "txn delete") : bind_fail(m, s, "txn bind");
    return wend(m, own, rc);
}

int mqd_meta_txn_list(mqd_meta_t *m, mqd_meta_txn_cb cb, void *arg)
{
    sqlite3_stmt *s = stmt(m, ST_TXN_LIST);
    int rc;
    while ((rc = step_row(m, s, "txn list")) == 1) {
        rc = cb((uint64_t)sqlite3_column_int64(s, 0), (mqd_txn_state_t)sqlite3_column_int(s, 1),
                (const char *)sqlite3_column_text(s, 2), arg);
        if (rc != 0) {
            sqlite3_reset(s);
            return rc;
        }
    }
    return rc;
}

/* ---- counters and kv ---- */

static int counter_read(mqd_meta_t *m, const char *name, uint64_t *out)
{
    sqlite3_stmt *s = stmt(m, ST_COUNTER_GET);
    if (!b_text(s, 1, name))
        return bind_fail(m, s, "counter bind");
    int rc = step_row(m, s, "counter get");
    if (rc != 1)
        return rc == 0 ? MQD_EDB : rc; /* just written: missing means a broken database */
    *out = (uint64_t)sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    return 0;
}

int mqd_meta_next_id(mqd_meta_t *m, const char *name, uint64_t *out)
{
    bool own = false;
    uint64_t v = 0;
    if (name == NULL)
        return MQD_EINVAL;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    sqlite3_stmt *s = stmt(m, ST_COUNTER_BUMP);
    rc = b_text(s, 1, name) ? step_done(m, s, "counter bump") : bind_fail(m, s, "counter bind");
    if (rc == 0)
        rc = counter_read(m, name, &v);
    rc = wend(m, own, rc);
    if (rc == 0)
        *out = v;
    return rc;
}

int mqd_meta_kv_put(mqd_meta_t *m, const char *key, const char *value)
{
    bool own = false;
    if (key == NULL || value == NULL)
        return MQD_EINVAL;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    sqlite3_stmt *s = stmt(m, ST_KV_PUT);
    if (!b_text(s, 1, key) || !b_text(s, 2, value))
        rc = bind_fail(m, s, "kv bind");
    else
        rc = step_done(m, s, "kv put");
    return wend(m, own, rc);
}

int mqd_meta_kv_get(mqd_meta_t *m, const char *key, char **value)
{
    sqlite3_stmt *s = stmt(m, ST_KV_GET);
    if (!b_text(s, 1, key))
        return bind_fail(m, s, "kv get bind");
    int rc = step_row(m, s, "kv get");
    if (rc != 1)
        return rc == 0 ? MQD_ENOENT : rc;
    const char *v = (const char *)sqlite3_column_text(s, 0);
    char *copy = strdup(v ? v : "");
    sqlite3_reset(s);
    if (copy == NULL)
        return MQD_ENOMEM;
    *value = copy;
    return 0;
}

/* ---- AMQP 0-9-1 exchanges and bindings ---- */

int mqd_meta_exchange_put(mqd_meta_t *m, const char *name, const char *type, uint32_t flags)
{
    bool own = false;
    if (name == NULL || type == NULL)
        return MQD_EINVAL;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    sqlite3_stmt *s = stmt(m, ST_EXCH_PUT);
    if (!b_text(s, 1, name) || !b_text(s, 2, type) || !b_int(s, 3, flags) ||
        !b_int(s, 4, mqd_now_ms()))
        rc = bind_fail(m, s, "exchange bind");
    else
        rc = step_done(m, s, "exchange put");
    return wend(m, own, rc);
}

int mqd_meta_exchange_delete(mqd_meta_t *m, const char *name)
{
    bool own = false;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    rc = delete_by(m, ST_BINDS_DEL_EXCH, name, NULL);
    if (rc == 0)
        rc = delete_by(m, ST_EXCH_DELETE, name, NULL);
    bool existed = rc == 0 && sqlite3_changes(m->db) > 0;
    rc = wend(m, own, rc);
    return rc == 0 && !existed ? MQD_ENOENT : rc;
}

int mqd_meta_exchange_list(mqd_meta_t *m, mqd_meta_exchange_cb cb, void *arg)
{
    sqlite3_stmt *s = stmt(m, ST_EXCH_LIST);
    int rc;
    while ((rc = step_row(m, s, "exchange list")) == 1) {
        rc = cb((const char *)sqlite3_column_text(s, 0), (const char *)sqlite3_column_text(s, 1),
                (uint32_t)sqlite3_column_int64(s, 2), arg);
        if (rc != 0) {
            sqlite3_reset(s);
            return rc;
        }
    }
    return rc;
}

static int binding_write(mqd_meta_t *m, enum meta_stmt i, const mqd_meta_binding_t *b)
{
    bool own = false;
    if (!b->exchange || !b->queue || !b->key)
        return MQD_EINVAL;
    int rc = wbegin(m, &own);
    if (rc != 0)
        return rc;
    sqlite3_stmt *s = stmt(m, i);
    if (!b_text(s, 1, b->exchange) || !b_text(s, 2, b->queue) || !b_text(s, 3, b->key) ||
        !b_text(s, 4, b->args_json ? b->args_json : ""))
        rc = bind_fail(m, s, "binding bind");
    else
        rc = step_done(m, s, stmt_sql[i]);
    return wend(m, own, rc);
}

int mqd_meta_binding_put(mqd_meta_t *m, const mqd_meta_binding_t *b)
{
    return binding_write(m, ST_BIND_PUT, b);
}

int mqd_meta_binding_delete(mqd_meta_t *m, const mqd_meta_binding_t *b)
{
    return binding_write(m, ST_BIND_DELETE, b);
}

int mqd_meta_binding_list(mqd_meta_t *m, mqd_meta_binding_cb cb, void *arg)
{
    sqlite3_stmt *s = stmt(m, ST_BIND_LIST);
    int rc;
    while ((rc = step_row(m, s, "binding list")) == 1) {
        mqd_meta_binding_t b = {.exchange = (const char *)sqlite3_column_text(s, 0),
                                .queue = (const char *)sqlite3_column_text(s, 1),
                                .key = (const char *)sqlite3_column_text(s, 2),
                                .args_json = (const char *)sqlite3_column_text(s, 3)};
        rc = cb(&b, arg);
        if (rc != 0) {
            sqlite3_reset(s);
            return rc;
        }
    }
    return rc;
}
