/* Numbered schema migrations. PRAGMA user_version holds the number applied; each
 * migration and its version bump commit together, so a crash leaves the schema at a
 * whole version. Never edit a released migration: append a new one. */
#include "config.h"
#include "meta/meta_int.h"
#include "util/util.h"

#include <stdio.h>

static const char *const migrations[] = {
    /* 1: initial schema. Group names compare case-insensitively (Event Hubs SDKs send
     * `$default` where users write `$Default`). Offsets, acks and epochs carry no foreign
     * key to topics: the broker may record them while a topic is being created, and
     * mqd_meta_topic_delete removes them explicitly. */
    "CREATE TABLE topics ("
    "  name TEXT PRIMARY KEY NOT NULL,"
    "  partitions INTEGER NOT NULL CHECK (partitions >= 0),"
    "  created_ms INTEGER NOT NULL,"
    "  config_json TEXT);"
    "CREATE TABLE partitions ("
    "  topic TEXT NOT NULL REFERENCES topics(name) ON DELETE CASCADE,"
    "  id INTEGER NOT NULL,"
    "  PRIMARY KEY (topic, id)) WITHOUT ROWID;"
    "CREATE TABLE group_offsets ("
    "  topic TEXT NOT NULL,"
    "  grp TEXT NOT NULL COLLATE NOCASE,"
    "  partition INTEGER NOT NULL,"
    "  next_offset INTEGER NOT NULL,"
    "  updated_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (topic, grp, partition)) WITHOUT ROWID;"
    "CREATE TABLE group_acks ("
    "  topic TEXT NOT NULL,"
    "  grp TEXT NOT NULL COLLATE NOCASE,"
    "  partition INTEGER NOT NULL,"
    "  blob BLOB NOT NULL,"
    "  updated_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (topic, grp, partition)) WITHOUT ROWID;"
    "CREATE TABLE leader_epochs ("
    "  topic TEXT NOT NULL,"
    "  partition INTEGER NOT NULL,"
    "  epoch INTEGER NOT NULL,"
    "  start_offset INTEGER NOT NULL,"
    "  PRIMARY KEY (topic, partition, epoch)) WITHOUT ROWID;"
    "CREATE TABLE transactions ("
    "  id INTEGER PRIMARY KEY NOT NULL,"
    "  state INTEGER NOT NULL,"
    "  detail_json TEXT,"
    "  updated_ms INTEGER NOT NULL);"
    "CREATE TABLE counters ("
    "  name TEXT PRIMARY KEY NOT NULL,"
    "  value INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE kv ("
    "  key TEXT PRIMARY KEY NOT NULL,"
    "  value TEXT NOT NULL) WITHOUT ROWID;",
    /* 2: a replicated topic's identity (the id of its registration in etcd, as Kafka's
     * topic IDs of KIP-516): '' for a topic never registered, or registered by an mqd
     * that wrote none. It goes with the row, so a deleted topic's id goes too. */
    "ALTER TABLE topics ADD COLUMN uid TEXT NOT NULL DEFAULT '';",
    /* 3: AMQP 0-9-1 durable exchanges and their bindings (amqp091/exch.c). The predeclared
     * amq.* exchanges have no row, so a binding carries no foreign key to its exchange:
     * mqd_meta_exchange_delete removes an exchange's bindings, mqd_meta_topic_delete a
     * queue's (a queue is a topic). args_json: a headers binding's arguments, '' else. */
    "CREATE TABLE amqp_exchanges ("
    "  name TEXT PRIMARY KEY NOT NULL,"
    "  type TEXT NOT NULL,"
    "  flags INTEGER NOT NULL,"
    "  created_ms INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE amqp_bindings ("
    "  exchange TEXT NOT NULL,"
    "  queue TEXT NOT NULL,"
    "  routing_key TEXT NOT NULL,"
    "  args_json TEXT NOT NULL,"
    "  PRIMARY KEY (exchange, queue, routing_key, args_json)) WITHOUT ROWID;"
    "CREATE INDEX amqp_bindings_queue ON amqp_bindings (queue);",
};

int meta_schema_latest(void)
{
    return (int)MQD_ARRAY_LEN(migrations);
}

static int user_version(mqd_meta_t *m, int *out)
{
    sqlite3_stmt *st = NULL;
    int rc = MQD_EDB;
    if (sqlite3_prepare_v2(m->db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK) {
        meta_dberr(m, "prepare user_version");
        goto out;
    }
    if (sqlite3_step(st) != SQLITE_ROW) {
        meta_dberr(m, "read user_version");
        goto out;
    }
    *out = sqlite3_column_int(st, 0);
    rc = 0;
out:
    sqlite3_finalize(st);
    return rc;
}

static int apply_one(mqd_meta_t *m, int idx)
{
    char bump[64];
    int rc = meta_exec(m, "BEGIN IMMEDIATE");
    if (rc != 0)
        return rc;
    snprintf(bump, sizeof bump, "PRAGMA user_version = %d", idx + 1);
    rc = meta_exec(m, migrations[idx]);
    if (rc == 0)
        rc = meta_exec(m, bump);
    if (rc == 0)
        rc = meta_exec(m, "COMMIT");
    if (rc != 0) {
        /* the failure is already logged; leave the database at the previous version */
        (void)sqlite3_exec(m->db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    MQD_INFO("meta", "applied schema migration %d", idx + 1);
    return 0;
}

int meta_migrate(mqd_meta_t *m)
{
    int have = 0;
    int rc = user_version(m, &have);
    if (rc != 0)
        return rc;
    if (have > meta_schema_latest()) {
        MQD_ERR("meta", "%s: schema version %d is newer than this mqd knows (%d)",
                sqlite3_db_filename(m->db, "main"), have, meta_schema_latest());
        return MQD_EDB;
    }
    for (int i = have; i < meta_schema_latest(); i++) {
        rc = apply_one(m, i);
        if (rc != 0)
            return rc;
    }
    return 0;
}
