/* conf: /etc/mqd.conf parsing and validation. The keys are rows of one table
 * (conf.c); the sample etc/mqd.conf and man/mqd.conf.5 are checked against it.
 *
 * File format: `key = value` lines, `#` comments, sections `[topic NAME]` (per-topic
 * overrides), `[user NAME]` (users: PLAIN/SCRAM credentials, certificate name, groups) and
 * one `[acl]` section of rule lines `allow|deny WHO PERMS PATTERN`. Topic keys in the
 * global part are the defaults for every topic. Errors read "FILE:LINE: key: reason".
 */
#ifndef MQD_CONF_H
#define MQD_CONF_H

#include "mqd.h"
#include "store/store.h"
#include "util/util.h"
#include <stdio.h>

typedef enum { MQD_OFFSET_RESET_EARLIEST = 0, MQD_OFFSET_RESET_LATEST = 1 } mqd_offset_reset_t;

/* Settings of one topic (or the defaults, name == NULL). */

typedef struct mqd_topic_conf {
    char *name;                  /* owned; NULL for the global defaults */
    uint32_t partitions;         /* partitions = N (sections only; default: default_partitions) */
    mqd_plog_config_t log;       /* flush, flush_interval_ms, flush_messages, segment_bytes,
                                    segment_ms, retention_bytes, retention_ms, index_interval_bytes */
    bool retention_consumed;     /* retention = consumed */
    mqd_offset_reset_t auto_offset_reset;
    uint32_t max_delivery_count; /* 0 = unlimited */
    bool dead_letter;            /* dead_letter = on: rejected/over-delivered go to T/$DeadLetterQueue */
    int64_t dedup_window_ms;     /* 0 = off */
    uint32_t replication_factor; /* 1 = unreplicated (src/repl/) */
    int acks;                    /* mqd_acks_t, default all */
    uint32_t min_insync_replicas; /* 0 = min(2, replication_factor) */
    bool unclean_leader_election;
    uint64_t *set;               /* bit i: table row i was given in this section (one bit a row,
                                    sized from the table: no row limit). Owned by the sections of
                                    an mqd_conf_t; an effective copy (mqd_conf_topic) borrows
                                    its section's, NULL when nothing was given. Query with
                                    mqd_conf_key_is_set. */
} mqd_topic_conf_t;

typedef struct mqd_user_conf {
    char *name;          /* owned */
    char *password_hash; /* owned; "pbkdf2-sha256$ITER$SALT_B64$HASH_B64" */
    char *scram_sha256;  /* owned; "ITER$SALT_B64$STOREDKEY_B64$SERVERKEY_B64" */
    char *cert_cn;       /* owned; EXTERNAL: the client certificate CN that is this user */
    char *groups;        /* owned; "ops, billing": groups the ACL names as @ops */
} mqd_user_conf_t;

/* A [sas_key NAME] section: a shared access key for Event Hubs style SAS tokens ($cbs). */
typedef struct mqd_sas_key_conf {
    char *name;   /* owned; the token's skn */
    char *key;    /* owned; the HMAC-SHA256 key as written (its bytes, not base64-decoded) */
    char *rights; /* owned; "send,listen,manage" (manage implies the other two) */
    char *scope;  /* owned; a hub (topic) name, or NULL / "*" = every hub */
} mqd_sas_key_conf_t;
#define MQD_CONF_SAS_SEND 1u
#define MQD_CONF_SAS_LISTEN 2u
#define MQD_CONF_SAS_MANAGE 4u
/* A new random key (32 bytes from RAND_bytes, base64: 44 characters) into out (>= 45). */
int mqd_conf_sas_key_make(char *out, size_t outlen);
/* Parses a rights list ("send, listen", "manage") into MQD_CONF_SAS_* bits. */
int mqd_conf_parse_sas_rights(const char *s, unsigned *out);
typedef enum { MQD_SAS_REQUIRED_AUTO = 0, MQD_SAS_REQUIRED_OFF = 1, MQD_SAS_REQUIRED_ON = 2 } mqd_sas_required_t;

typedef enum { MQD_TLS_VERIFY_NONE = 0, MQD_TLS_VERIFY_OPTIONAL = 1, MQD_TLS_VERIFY_REQUIRED = 2 } mqd_tls_verify_t;

/* One line of the [acl] section: `allow|deny WHO PERMS PATTERN`. */
typedef struct mqd_acl_rule {
    bool allow;
    char *who;      /* owned; a user name, "@group" or "*" (anyone, anonymous too) */
    unsigned perms; /* mqd_perm_t bits (auth/auth.h); MQD_CONF_PERM_ALL for `all` */
    char *pattern;  /* owned; address glob: `*` matches any run of characters */
} mqd_acl_rule_t;
#define MQD_CONF_PERM_ALL 63u

/* Where a key's value came from: "FILE:LINE", "--set", "--listen", "--data-dir". */
typedef struct mqd_conf_origin {
    char *topic;  /* owned; the [topic NAME] section, NULL for the global part */
    char *key;    /* owned */
    char *source; /* owned */
} mqd_conf_origin_t;

typedef struct mqd_conf {
    char *path;               /* owned; file it was loaded from, NULL if none */
    mqd_conf_origin_t *origins; /* owned; in the order applied (the last of a key counts) */
    size_t n_origins;
    char **listen;            /* owned; "HOST:PORT" each */
    size_t n_listen;
    char *data_dir;           /* default MQD_LOCALSTATEDIR "/lib/mqd" */
    mqd_loglevel_t log_level; /* log_level = info */
    bool auto_create_topics;  /* on */
    uint32_t default_partitions;  /* 1 */
    uint32_t max_topics;          /* topics at once, 10000; 0 = unlimited */
    uint32_t max_topics_per_connection; /* topics one connection may create, 1000; 0 = unlimited */
    uint32_t max_partitions_per_topic; /* 1024: a create or alter asking for more is refused */
    uint64_t max_message_size;    /* 16 MiB */
    uint32_t max_frame_size;      /* 128 KiB */
    uint32_t idle_timeout_ms;     /* 60000; 0 = off */
    bool allow_anonymous;         /* built-in default on (loopback-only listener);
                                     the installed etc/mqd.conf turns it off */
    bool allow_no_users;          /* off: a file that drops every user is refused
                                     (conf_guard.c) */
    uint32_t max_connections;     /* 10000 */
    uint32_t max_sessions;        /* per connection, 64 */
    uint32_t max_links_per_session; /* 1024 */
    uint32_t link_credit;         /* credit granted to producers per link, 1000 */
    uint32_t prefetch_bytes;      /* max bytes read from a log per consumer refill, 1 MiB */
    uint32_t flush_threads;       /* store flusher threads, 4 */
    uint32_t flush_priority_boost; /* nice levels the flushers run above the process, 10 */
    uint64_t heap_prefault;       /* heap faulted in at start and kept, 32 MiB; 0 = off */
    int flush_sync;               /* 0 fdatasync, 1 syncfs */
    uint64_t segment_prezero;     /* zeros kept ahead of a flush=sync log's tail, 0 */
    uint32_t max_open_files;      /* segment descriptors kept open; 0 = from RLIMIT_NOFILE */
    char *metrics_listen;         /* owned; NULL = off */
    char *console_listen;         /* owned; NULL = off (src/console/) */
    uint32_t console_session_idle_ms; /* 30 min */
    uint32_t console_max_connections;        /* HTTP connections at once, 128 */
    uint32_t console_max_connections_per_ip; /* the same per source address, 16; 0 = unlimited */
    uint32_t console_header_timeout_ms;      /* a request's line and headers, 10 s */
    uint32_t console_body_timeout_ms;        /* its body after the headers, 10 s */
    mqd_topic_conf_t topic_defaults;
    mqd_topic_conf_t *topics;     /* owned array of [topic NAME] sections */
    size_t n_topics;
    mqd_user_conf_t *users;       /* owned array of [user NAME] sections */
    size_t n_users;
    char *tls_cert;               /* owned; PEM certificate chain of TLS listeners, or NULL */
    char *tls_key;                /* owned; its PEM private key */
    char *tls_ca;                 /* owned; CA file client certificates must chain to */
    int tls_min_version;          /* 0: TLS 1.2, 1: TLS 1.3 */
    char *tls_ciphers;            /* owned; OpenSSL cipher list (TLS 1.2), NULL = default */
    int tls_verify_client;        /* mqd_tls_verify_t */
    int link_stealing;            /* 0 off, 1 same connection, 2 any connection (linkname.c) */
    bool allow_plain_without_tls; /* built-in on; installed etc/mqd.conf off */
    uint32_t max_connections_per_user; /* 0 = unlimited */
    uint32_t max_connections_per_ip;   /* 0 = unlimited */
    uint32_t max_handshakes_per_ip;    /* connections before their AMQP open, 64; 0 = unlimited */
    uint32_t handshake_fd_percent;     /* of the connections' descriptors, 50; 100 = no reserve */
    uint32_t handshake_timeout_ms;     /* plain listeners, 10 s */
    uint32_t tls_handshake_timeout_ms; /* TLS listeners, 5 s */
    uint32_t shutdown_grace_ms;        /* SIGTERM: clients answer the forced close within, 2 s */
    uint32_t auth_threads;             /* PLAIN password checks off the loop, 1 */
    uint32_t auth_queue_max;           /* PLAIN logins in the check queue, all peers, 32 */
    uint32_t auth_queue_per_ip;        /* the same per source address, 8 */
    uint32_t txn_timeout_ms;           /* open transactions are rolled back after it; 0 = off */
    uint32_t max_unsettled_per_link;   /* deliveries a consumer link may hold; 0 = unlimited */
    uint64_t memory_high_watermark;    /* RSS above which producers get no credit; 0 = off */
    uint64_t disk_free_limit;          /* free bytes on data_dir below which the same; 64 MiB */
    uint32_t partition_resume_ms;      /* a disk-full or EMFILE partition's resume retries; 0 = manual */
    uint64_t max_connection_memory;    /* budget.c: one connection's charge, 64 MiB; 0 = off */
    uint64_t max_memory;               /* budget.c: all connections' charges, 1 GiB; 0 = off */
    mqd_sas_key_conf_t *sas_keys; /* owned array of [sas_key NAME] sections */
    size_t n_sas_keys;
    int sas_required;             /* mqd_sas_required_t (mqd_conf_sas_effective, _lenient) */
    mqd_acl_rule_t *acl;          /* owned array: the [acl] section in order */
    size_t n_acl;
    bool acl_present;             /* an [acl] section exists (even an empty one: deny all) */
    int acl_line;                 /* internal: file line of `[acl]`, 0 if none */
    int file_lines;               /* internal: lines the file had (0: empty or no file); the
                                     guard's messages say where it ends */
    int listen_source;            /* internal: who set `listen` (0 built-in, 1 file, 2 command
                                     line); a new source's first listen replaces the list */
    /* cluster (src/cluster/, issue 19); restart-only */
    int cluster;                  /* mqd_conf_cluster_t: none (single node) or etcd */
    char *etcd_endpoints;         /* owned; "http://H:P,http://H:P", NULL = none */
    char *cluster_name;           /* owned; etcd key prefix, "mqd" */
    uint32_t node_id;             /* 0 = not set (required with cluster = etcd) */
    char *advertised_address;     /* owned; HOST:PORT, NULL = the first listener */
    char *rack;                   /* owned; NULL = none */
    uint32_t lease_ttl_ms;        /* 3000 */
    uint32_t replica_lag_ms;      /* 10000: a follower this far behind leaves the ISR */
    uint32_t default_replication_factor; /* 1: of a topic created in a cluster without one */
    bool auto_leader_rebalance;   /* on: leaders go back to their preferred replica */
    bool fast_failover;           /* on: a node proven dead loses its lease at once (repl) */
    uint32_t leader_rebalance_interval_ms; /* 300000: how often a leader checks */
    uint32_t leader_imbalance_percent;     /* 10: a node's share of its preferred
                                              partitions led elsewhere that moves them */
    uint32_t hw_checkpoint_interval_ms;    /* 1000: high watermarks to the data dir */
    int connection_redirect;               /* mqd_conn_redirect_t: off, idle, always */
    char *replication_user;       /* owned; fetch links' user, NULL = not authenticated */
    char *replication_password;   /* owned */
    bool replication_tls;         /* fetch connections over TLS (amqps://), verified */
    char *replication_ca_file;    /* owned; CA that verifies leaders, NULL = the system's;
                                     with replication_peer_verify also the followers */
    char *replication_cert;       /* owned; fetch connections' client certificate, NULL =
                                     tls_cert */
    char *replication_key;        /* owned; its key, NULL = tls_key */
    bool replication_peer_verify; /* leaders accept fetch links only with a client
                                     certificate naming the node (mqd-node-ID) */
    char *replication_address;    /* owned; HOST:PORT of the TLS listener other nodes fetch
                                     from, NULL = the first amqps:// listener */
    int cluster_line;             /* internal: file line of `cluster = ...`, 0 if not in a file */
    uint64_t *set;                /* owned; bit i: global row i was given (file or --set) */
    char **cli;                   /* owned; the command line's --listen ("lHOST:PORT") and
                                     --set ("sKEY=VALUE") in order: reload applies them over
                                     the file again, as at start */
    size_t n_cli;
} mqd_conf_t;

/* acks of a replicated send (topic key acks, link property mqd:acks) */
typedef enum { MQD_ACKS_LEADER = 0, MQD_ACKS_QUORUM = 1, MQD_ACKS_ALL = 2 } mqd_acks_t;
typedef enum { MQD_CONF_CLUSTER_NONE = 0, MQD_CONF_CLUSTER_ETCD = 1 } mqd_conf_cluster_t;
/* connection_redirect: which client connections get amqp:connection:redirect */
typedef enum {
    MQD_CONN_REDIRECT_OFF = 0,
    MQD_CONN_REDIRECT_IDLE = 1,  /* while this node leads no partition */
    MQD_CONN_REDIRECT_ALWAYS = 2 /* every client connection that names a topic */
} mqd_conn_redirect_t;
/* The next endpoint of an etcd_endpoints list: *s moves past it. MQD_ENOENT at the end,
 * MQD_EINVAL if it is not http://HOST:PORT. */
int mqd_conf_etcd_endpoint_next(const char **s, char *host, size_t hostlen, uint16_t *port);

/* Allocates a config holding the built-in defaults. */
int mqd_conf_new(mqd_conf_t **out);
void mqd_conf_free(mqd_conf_t *c);

/* Reads `path` into `c` (layered over what is there). On error returns MQD_EINVAL
 * (MQD_ENOENT if the file is missing) and writes "FILE:LINE: key: reason" to err.
 * After an error `c` is partly updated: load into a fresh config and discard it on
 * failure (reload keeps the old config that way). The first `listen` in the file
 * replaces the listeners set so far. Values: sizes take k/M/G/T or KiB/MiB/GiB/TiB (all
 * powers of 1024) or plain bytes; durations take ms/s/m/h/d, a bare number is ms;
 * booleans on/off, yes/no, true/false, 1/0. */
int mqd_conf_load_file(mqd_conf_t *c, const char *path, char *err, size_t errlen);
/* Applies one "KEY=VALUE" (from --set); KEY may be "topic.NAME.KEY" for a topic
 * section. Same validation as the file; err reads "--set: key: reason". */
int mqd_conf_set(mqd_conf_t *c, const char *key_eq_value, char *err, size_t errlen);
/* Applies one [topic NAME]-section setting `key` = `val` to tc (management CREATE and
 * UPDATE), with the file's parsers; err reads "key: reason" (e.g. "retention_ms: expected
 * a duration like 500ms, 30s, 5m, 2h or 7d, got '7x'"). MQD_EINVAL on a bad key or value. */
int mqd_conf_topic_setting(mqd_topic_conf_t *tc, const char *key, const char *val, char *err,
                           size_t errlen);
/* mqd_conf_set with the origin config show names for it (`source`, e.g. "--data-dir"). */
int mqd_conf_set_from(mqd_conf_t *c, const char *key_eq_value, const char *source, char *err,
                      size_t errlen);
/* conf_show.c: each global key (the topic defaults too) with its value as the file
 * would spell it and its origin ("FILE:LINE", "--set", "default"), then each key set in a
 * [topic NAME] section (topic = NAME, else NULL). Users and SAS keys are left out (they
 * hold secrets). Stops at the first non-zero return of cb and returns it. */
typedef int (*mqd_conf_show_cb)(const char *topic, const char *key, const char *value,
                                const char *source, void *arg);
int mqd_conf_show(const mqd_conf_t *c, mqd_conf_show_cb cb, void *arg);
/* Adds a listener "HOST:PORT" (from --listen); the first call replaces the default. */
int mqd_conf_add_listen(mqd_conf_t *c, const char *hostport, char *err, size_t errlen);
/* Names the settings that differ between a running config `old` and a reloaded `nw`
 * but take effect only after a restart (all but log_level and the users), as
 * "key, topic.NAME, ..." in buf (truncated to len); returns how many there are. A
 * changed topic default is named by its key, a changed [topic NAME] as topic.NAME. */
size_t mqd_conf_restart_needed(const mqd_conf_t *old, const mqd_conf_t *nw, char *buf, size_t len);

/* ---- reload (conf_swap.c) ----
 * Subsystems register hooks; mqd_conf_reload reads the file into a new config,
 * validates it as at start, refuses it if it drops every user or every [acl] rule of
 * the running one (mqd_conf_guard), runs the check hooks, and only when all pass swaps
 * it in:
 * restart-only keys keep their running values (named in the report), the rest takes
 * the file's, and the apply hooks run. On failure nothing changes. */
typedef struct mqd_conf_hooks mqd_conf_hooks_t;
/* Before the swap: may refuse the new config (0 or MQD_E*, reason in err, e.g. a
 * certificate that does not load). It may prepare state for its apply to install; a
 * prepared state that is never applied (a later check failed) is replaced by the next
 * reload's check. `cur` is the running config, `next` the file's. */
typedef int (*mqd_conf_check_fn)(void *arg, const mqd_conf_t *cur, const mqd_conf_t *next,
                                 char *err, size_t errlen);
/* After the swap: `old` is the config that ran until now (freed after the hooks), `now`
 * the running one. Cannot fail. */
typedef void (*mqd_conf_apply_fn)(void *arg, const mqd_conf_t *old, const mqd_conf_t *now);
int mqd_conf_hooks_new(mqd_conf_hooks_t **out);
void mqd_conf_hooks_free(mqd_conf_hooks_t *h);
/* Registers check and/or apply for `key`: they run when its value changes. key NULL:
 * at every reload (certificates may change in place; users and ACLs are sections).
 * MQD_EINVAL for a key that is unknown, not global or needs a restart. Hooks run in the
 * order they were added. */
int mqd_conf_hook_add(mqd_conf_hooks_t *h, const char *key, mqd_conf_check_fn check,
                      mqd_conf_apply_fn apply, void *arg);
typedef struct mqd_conf_reload_report {
    char err[512];     /* on failure: "FILE:LINE: key: reason" (or a check hook's reason) */
    char restart[512]; /* changed keys that need a restart, not applied: "key, topic.NAME" */
    size_t n_restart;  /* how many */
    size_t n_changed;  /* reloadable global keys whose value changed */
    size_t n_applied;  /* apply hooks run */
} mqd_conf_reload_report_t;
/* Reloads `running` (its address stays: its contents are swapped) from path, with the
 * command line's --listen/--set (running->cli) applied over the file again. 0, or
 * MQD_EINVAL / MQD_ENOENT / MQD_ENOMEM with rep->err and `running` untouched. */
int mqd_conf_reload(mqd_conf_t *running, const char *path, const mqd_conf_hooks_t *h,
                    mqd_conf_reload_report_t *rep);
/* Cross-field checks after everything is loaded. */
int mqd_conf_validate(const mqd_conf_t *c, char *err, size_t errlen);

/* ---- the truncation guard (conf_guard.c) ----
 * A config file cut short (an empty file, or one cut before its [user NAME] sections or
 * its [acl]) parses as a valid config that lets everyone in or nobody. So a config that
 * has no user while the previous one had some (unless allow_no_users = on), or no [acl]
 * rule while the previous one had some (unless the file says `allow * all *` or
 * `deny * all *` itself), is refused: by mqd_conf_reload against the running config, and
 * at start against the census the server keeps in meta.db from its last run. */
typedef struct mqd_conf_census {
    uint32_t users;    /* [user NAME] sections */
    int64_t acl_rules; /* [acl] rules; -1: no [acl] section (every client may do everything) */
} mqd_conf_census_t;
#define MQD_CONF_CENSUS_KEY "conf.access" /* the meta.db key the server keeps it under */
void mqd_conf_census(const mqd_conf_t *c, mqd_conf_census_t *out);
/* "users=N acl=M" (M -1: no [acl] section) into buf (>= 48), and back; MQD_EINVAL when
 * s is not that. */
void mqd_conf_census_format(const mqd_conf_census_t *k, char *buf, size_t len);
int mqd_conf_census_parse(const char *s, mqd_conf_census_t *out);
/* 0, or MQD_EINVAL with "FILE:LINE: key: reason" in err (what was dropped, that the file
 * may be cut short, and how to say it on purpose). prev_what names where prev comes from
 * ("the running config", "the last run on DIR"). */
int mqd_conf_guard(const mqd_conf_census_t *prev, const char *prev_what, const mqd_conf_t *next,
                   char *err, size_t errlen);

/* The effective settings for `topic`: its section over the defaults. Writes into *out
 * (out->name borrowed from the section or NULL; do not free). */
void mqd_conf_topic(const mqd_conf_t *c, const char *topic, mqd_topic_conf_t *out);
/* Whether `key` was given (file, --set) rather than left at its default: in the global
 * part when topic is NULL (a topic key there is the default for every topic), else in
 * [topic TOPIC]. False for an unknown key. */
bool mqd_conf_key_is_set(const mqd_conf_t *c, const char *topic, const char *key);
/* Finds a [sas_key NAME], or NULL. */
const mqd_sas_key_conf_t *mqd_conf_sas_key(const mqd_conf_t *c, const char *name);
/* Whether links need a SAS token ($cbs put-token): sas_required = on. */
bool mqd_conf_sas_effective(const mqd_conf_t *c);
/* Whether $cbs accepts a well-formed token of an unknown key name unchecked (202, the
 * emulator's way): sas_required = off, or auto with every listener on loopback. */
bool mqd_conf_sas_lenient(const mqd_conf_t *c);
/* Finds a user, or NULL. */
const mqd_user_conf_t *mqd_conf_user(const mqd_conf_t *c, const char *name);
/* Checks a password against a stored hash (PBKDF2-HMAC-SHA256, constant-time compare). */
bool mqd_conf_password_ok(const char *password_hash, const char *password);
/* Produces a new "pbkdf2-sha256$..." hash with a random salt into out (>= 160 bytes).
 * iterations 0 means MQD_CONF_PBKDF2_ITERATIONS; at least MQD_CONF_PBKDF2_MIN_ITERATIONS. */
int mqd_conf_password_hash(const char *password, uint32_t iterations, char *out, size_t outlen);
#define MQD_CONF_PBKDF2_ITERATIONS 100000u
#define MQD_CONF_PBKDF2_MIN_ITERATIONS 1000u
#define MQD_CONF_PBKDF2_MAX_ITERATIONS 10000000u /* bounds the work a stored hash can ask for */

/* Writes the commented sample config generated from the table (etc/mqd.conf is its
 * output; a unit test compares them). */
int mqd_conf_write_sample(FILE *f);
/* Writes the key reference of mqd.conf(5) (troff) generated from the table. */
int mqd_conf_write_man_keys(FILE *f);
/* Number of keys in the table and the name of key i (tests, docs). */
size_t mqd_conf_key_count(void);
const char *mqd_conf_key_name(size_t i);
/* Splits "HOST:PORT" / "[V6]:PORT", optionally prefixed "amqp://" or "amqps://" (a
 * listener); host buffer >= 256. */
int mqd_conf_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port);
/* True if a listen value names a TLS listener ("amqps://HOST:PORT"). */
bool mqd_conf_listen_is_tls(const char *listen);

/* SCRAM-SHA-256 credentials (RFC 5802/7677), stored as
 * "ITERATIONS$SALT_B64$STOREDKEY_B64$SERVERKEY_B64": never the password. */
#define MQD_CONF_SCRAM_ITERATIONS 4096u
typedef struct mqd_scram_cred {
    uint32_t iterations;
    unsigned char salt[64];
    size_t salt_len;
    unsigned char stored_key[32];
    unsigned char server_key[32];
} mqd_scram_cred_t;
/* Derives credentials from a password and salt (the salt is copied; <= 64 bytes). */
int mqd_conf_scram_derive(const char *password, const unsigned char *salt, size_t salt_len,
                          uint32_t iterations, mqd_scram_cred_t *out);
/* A new credential string with a random salt into out (>= 200 bytes); iterations 0 means
 * MQD_CONF_SCRAM_ITERATIONS. */
int mqd_conf_scram_make(const char *password, uint32_t iterations, char *out, size_t outlen);
/* Parses a stored credential string; MQD_EINVAL if malformed. */
int mqd_conf_scram_parse(const char *s, mqd_scram_cred_t *out);
/* Parses "send,receive" (or "all") into mqd_perm_t bits; MQD_EINVAL on an unknown word. */
int mqd_conf_parse_perms(const char *s, unsigned *out);
/* The names of the rights in `bits` ("send", ..., "monitor"), at most max, into out
 * (static strings); returns how many. */
size_t mqd_conf_perm_names(unsigned bits, const char **out, size_t max);

#endif
