/* meta internals shared by meta.c and meta_migrate.c. */
#ifndef MQD_META_INT_H
#define MQD_META_INT_H

#include "meta/meta.h"

#include <sqlite3.h>
#include <sys/types.h>

/* A WAL file by identity: its name was made durable while it was this inode. */
typedef struct meta_wal_name {
    bool known;
    dev_t dev;
    ino_t ino;
} meta_wal_name_t;

/* Every statement the handle uses, prepared once at open (SQL text in meta.c). */
enum meta_stmt {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_TOPIC_PARTS,
    ST_TOPIC_INSERT,
    ST_TOPIC_UPDATE,
    ST_PART_INSERT,
    ST_TOPIC_GET,
    ST_TOPIC_LIST,
    ST_TOPIC_DELETE,
    ST_TOPIC_UID,
    ST_OFFSETS_DEL_TOPIC,
    ST_ACKS_DEL_TOPIC,
    ST_EPOCHS_DEL_TOPIC,
    ST_OFFSET_PUT,
    ST_OFFSET_GET,
    ST_OFFSET_LIST,
    ST_OFFSETS_DEL_GROUP,
    ST_ACKS_DEL_GROUP,
    ST_ACKS_PUT,
    ST_ACKS_GET,
    ST_EPOCH_PUT,
    ST_EPOCH_LIST,
    ST_EPOCH_TRUNC,
    ST_TXN_PUT,
    ST_TXN_DELETE,
    ST_TXN_LIST,
    ST_COUNTER_BUMP,
    ST_COUNTER_GET,
    ST_KV_PUT,
    ST_KV_GET,
    ST_EXCH_PUT,
    ST_EXCH_DELETE,
    ST_EXCH_LIST,
    ST_BIND_PUT,
    ST_BIND_DELETE,
    ST_BIND_LIST,
    ST_BINDS_DEL_EXCH,
    ST_BINDS_DEL_QUEUE,
    ST__COUNT
};

struct mqd_meta {
    sqlite3 *db;
    sqlite3_stmt *st[ST__COUNT];
    bool in_txn;        /* inside mqd_meta_begin .. commit/rollback */
    bool nosync;        /* ... begun by mqd_meta_begin_nosync (synchronous = NORMAL) */
    uint64_t txn_count; /* committed write transactions (migrations not counted) */
    /* mqd_meta_wal_sync (its caller's thread only): the WAL, opened on first use */
    char *wal_path;
    int wal_fd;
    dev_t wal_dev;
    ino_t wal_ino;
    char *dir_path; /* the directory holding meta.db and its WAL */
    /* The WAL whose name (directory entry) this handle made durable by an fsync of
     * dir_path: one for the handle's thread (commits with synchronous = FULL), one for
     * mqd_meta_wal_sync's, so that neither reads what the other writes. */
    meta_wal_name_t named_loop, named_sync;
};

/* Logs sqlite3_errmsg with `what` and returns MQD_EDB. */
int meta_dberr(mqd_meta_t *m, const char *what);
/* Runs plain SQL (no results), MQD_EDB on failure. */
int meta_exec(mqd_meta_t *m, const char *sql);
/* Applies every pending numbered migration, each in its own transaction. */
int meta_migrate(mqd_meta_t *m);
/* Number of migrations this build knows (= the schema version after open). */
int meta_schema_latest(void);

#endif
