/* repl: partition replication in a cluster (issue 19, ARCHITECTURE §4).
 *
 * On every node, on the server's loop, with cluster membership (src/cluster) running:
 *  - a topic created here with replication_factor > 1 is registered in etcd as
 *    /<cluster>/topics/<T> = {"partitions","replication_factor","config"};
 *  - the controller places each partition's replicas (distinct racks where possible,
 *    leaders spread) and creates /<cluster>/partitions/<T>/<P> =
 *    {"leader","epoch","replicas","isr"} with a create-if-absent txn; later changes (the
 *    in-sync set) are compare-and-swap on the key's mod_revision;
 *  - every node watches partitions/, creates its local replica of each partition it is
 *    in, and plays its role: the leader serves "$repl/<T>/<P>" fetch links and moves the
 *    high watermark; a follower fetches over an outbound AMQP connection (mqd_outconn)
 *    and appends the leader's records byte for byte.
 * The broker knows none of this by name: it calls repl through mqd_repl_hooks_t
 * (server.h). Pure logic (placement, watermark, the etcd values and the wire format) is
 * public here for the unit tests and the fuzz target.
 */
#ifndef MQD_REPL_H
#define MQD_REPL_H

#include "mqd.h"
#include "cluster/cluster.h"
#include "server/server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MQD_REPL_MAX_RF 16

typedef struct mqd_repl mqd_repl_t;

/* Creates the replication layer of s (conf outlives it) and registers its hooks on s. */
int mqd_repl_new(mqd_server_t *s, const mqd_conf_t *conf, mqd_repl_t **out);
/* The membership callbacks repl needs (controller gained/lost, nodes joined/left): pass
 * them to mqd_cluster_new, then mqd_repl_start with that member. */
void mqd_repl_cluster_cbs(mqd_repl_t *r, mqd_cluster_cbs_t *out);
int mqd_repl_start(mqd_repl_t *r, mqd_cluster_t *m);
/* Stops fetching and serving, frees its watches (before mqd_cluster_free). */
void mqd_repl_free(mqd_repl_t *r);

/* ---- placement (place.c, pure) ---- */
typedef struct mqd_repl_cand {
    uint32_t id;
    const char *rack; /* "" or NULL: none */
} mqd_repl_cand_t;
/* Replicas of partitions [0, nparts) over the n candidates: out[p * rf + j] is the j-th
 * replica of partition p, the leader first. Candidates are taken round robin across
 * racks, so a partition's replicas are on rf distinct racks when there are that many,
 * and the leaders rotate from `start` (e.g. a hash of the topic name) so that topics do
 * not all lead on one node. MQD_EINVAL when rf is 0, above MQD_REPL_MAX_RF or above n. */
int mqd_repl_place(const mqd_repl_cand_t *c, size_t n, uint32_t nparts, uint32_t rf, uint32_t start,
                   uint32_t *out);
/* The high watermark: the least log end among the leader's (its stable offset) and the
 * in-sync followers' (leo[0..n)). */
uint64_t mqd_repl_hw(uint64_t leader_end, const uint64_t *leo, size_t n);
/* The offset a majority of rf replicas hold: the leader's end and the followers'
 * (leo[0..n), n <= rf - 1; replicas without a report count as 0). */
uint64_t mqd_repl_quorum_end(uint64_t leader_end, const uint64_t *leo, size_t n, uint32_t rf);

/* ---- who serves a partition's links (serve.c, pure) ----
 * Only its leader in the current epoch: see serve.c. Ordered by strength
 * (mqd_repl_serve_join). */
typedef enum {
    MQD_REPL_SERVE_HERE = 0, /* this node leads it: attach here */
    MQD_REPL_SERVE_WAIT,     /* nobody known to lead it yet: leave the attach waiting */
    MQD_REPL_SERVE_REDIRECT, /* another node leads it and its address is known: go there */
} mqd_repl_serve_t;
/* What this node knows of one partition. */
typedef struct mqd_repl_pview {
    bool known;        /* its state was read from etcd */
    uint32_t leader;   /* the leader that state names */
    bool leading;      /* this node plays the leader's role, in that state's epoch */
    bool leader_known; /* the leader's address is in this node's view of the nodes */
} mqd_repl_pview_t;
/* The verdict for a link to that partition on node self; with MQD_REPL_SERVE_WAIT, *why
 * says what it waits for (a static text). */
mqd_repl_serve_t mqd_repl_serve(uint32_t self, const mqd_repl_pview_t *v, const char **why);
/* A link that spans partitions (a whole topic): the verdicts of its partitions folded in
 * order, acc the ones so far (start with MQD_REPL_SERVE_HERE). */
mqd_repl_serve_t mqd_repl_serve_join(mqd_repl_serve_t acc, mqd_repl_serve_t next);
/* The same for a receiver of the whole topic with mqd:fwd-local-only, which reads only
 * the partitions led here: per partition HERE (led here), WAIT (may be soon: state not
 * read, or named leader here and not leading yet) or REDIRECT (led elsewhere: for such a
 * link "not here", which the caller refuses); folded with mqd_repl_serve_led_join from
 * MQD_REPL_SERVE_REDIRECT: one HERE serves it, a WAIT beats the rest. */
mqd_repl_serve_t mqd_repl_serve_led(uint32_t self, const mqd_repl_pview_t *v, const char **why);
mqd_repl_serve_t mqd_repl_serve_led_join(mqd_repl_serve_t acc, mqd_repl_serve_t next);

/* ---- a node whose process died (dead.c, pure): fast failover (issue 40 point 4) ----
 * The state one node keeps about one other node X it suspects, and the step that takes
 * one piece of evidence and says what to do next. X is taken as dead, and its lease
 * revoked, only on: a connection to X that ended (seen here or reported by another node)
 * AND two TCP connects to X's port refused, the second begun after the first was
 * answered (by the controller when the report came from another node) AND X's key still
 * under the lease the evidence is about. A paused (SIGSTOP) or hung process still
 * completes TCP handshakes in its kernel, a partition answers nothing: either clears it. */
typedef enum {
    MQD_REPL_DEAD_IDLE = 0, /* nothing suspected */
    MQD_REPL_DEAD_PROBING,  /* first connect to X's port in flight (after a close here) */
    MQD_REPL_DEAD_CONFIRMING, /* the second, confirming connect in flight */
    MQD_REPL_DEAD_REPORTED, /* first connect refused: reported, the controller confirms */
    MQD_REPL_DEAD_REVOKED,  /* lease revoked: done until X's key changes */
} mqd_repl_dead_state_t;
typedef enum {
    MQD_REPL_DEAD_EV_CLOSED,    /* a connection of this node to X ended */
    MQD_REPL_DEAD_EV_REPORT,    /* another node reported a close and a refused connect */
    MQD_REPL_DEAD_EV_REFUSED,   /* the connect in flight was refused (nothing listens) */
    MQD_REPL_DEAD_EV_ACCEPTED,  /* the connect in flight completed (a kernel listens) */
    MQD_REPL_DEAD_EV_NO_ANSWER, /* the connect in flight timed out or failed otherwise */
    MQD_REPL_DEAD_EV_EXPIRED,   /* this node's report went unanswered for too long */
} mqd_repl_dead_ev_t;
typedef enum {
    MQD_REPL_DEAD_NONE = 0,
    MQD_REPL_DEAD_PROBE,  /* start a connect to X's port */
    MQD_REPL_DEAD_REPORT, /* write the evidence to etcd for the controller */
    MQD_REPL_DEAD_REVOKE, /* revoke X's lease: its keys go, the usual election follows */
    MQD_REPL_DEAD_CLEAR,  /* not dead (or not provable): forget it, left to its lease */
} mqd_repl_dead_act_t;
typedef struct mqd_repl_dead {
    mqd_repl_dead_state_t st;
    bool closed;      /* this node saw a connection to X end */
    bool reported;    /* another node's report */
    unsigned refused; /* refused connects so far (this node's and the report's) */
} mqd_repl_dead_t;
/* What the step needs to know of the cluster, read when the event arrives. */
typedef struct mqd_repl_dead_ctx {
    bool enabled;           /* fast_failover = on */
    bool same_lease;        /* X's key is present, under the lease the state is about */
    bool self_controller;   /* this node is the controller */
    bool target_controller; /* X holds the controller key (nobody else would confirm) */
} mqd_repl_dead_ctx_t;
mqd_repl_dead_act_t mqd_repl_dead_step(mqd_repl_dead_t *d, const mqd_repl_dead_ctx_t *c,
                                       mqd_repl_dead_ev_t ev);
const char *mqd_repl_dead_ev_name(mqd_repl_dead_ev_t ev);

/* ---- the etcd values (pstate.c; parsing is of outside input) ---- */
/* A topic's identity: 32 lower-case hex digits (128 random bits) written by the node that
 * registers it; "" for a registration of an mqd that wrote none. */
#define MQD_REPL_ID_LEN 32
typedef struct mqd_repl_pstate {
    uint32_t leader;
    uint32_t epoch;
    uint32_t replicas[MQD_REPL_MAX_RF];
    uint32_t isr[MQD_REPL_MAX_RF];
    uint32_t n_replicas, n_isr;
    char topic_id[MQD_REPL_ID_LEN + 1]; /* the registration it was placed for, or "" */
} mqd_repl_pstate_t;
char *mqd_repl_pstate_json(const mqd_repl_pstate_t *ps); /* malloc'd, NULL: no memory */
/* MQD_ECORRUPT unless: an object with leader (a replica), epoch, 1..16 distinct
 * replicas, an isr of replicas that holds the leader, and topic_id, when present, an
 * identity (mqd_repl_id_valid). */
int mqd_repl_pstate_parse(const char *json, size_t n, mqd_repl_pstate_t *out);
bool mqd_repl_pstate_has(const uint32_t *v, uint32_t n, uint32_t id);

typedef struct mqd_repl_tdesc {
    uint32_t partitions, rf;
    char *config;                 /* the topic's overrides as JSON text (malloc'd), or NULL */
    char id[MQD_REPL_ID_LEN + 1]; /* its identity, or "" (written by an older mqd) */
    uint32_t home; /* replication_factor 1: the node every partition is placed on (the one
                      that created the topic), 0: none (the controller spreads them) */
} mqd_repl_tdesc_t;
char *mqd_repl_tdesc_json(const mqd_repl_tdesc_t *td);
/* MQD_ECORRUPT unless: an object with partitions 1..65536, replication_factor 1..16, a
 * config object if any, id, when present, an identity, and home, when present, a node id
 * (> 0) of a topic with replication_factor 1. */
int mqd_repl_tdesc_parse(const char *json, size_t n, mqd_repl_tdesc_t *out);
void mqd_repl_tdesc_clear(mqd_repl_tdesc_t *td);
/* 32 lower-case hex digits. */
bool mqd_repl_id_valid(const char *s, size_t n);
/* A new identity from the system's random source into out (MQD_REPL_ID_LEN + 1). */
int mqd_repl_id_new(char *out);

/* A replica's log end for an election by log end (candidates/<T>/<P>/<node>, cand.c),
 * written when the partition's leader went: the partition epoch it followed, its log end
 * and leader_rev, the create_revision of the gone leader's node key (each registration
 * of a node makes a new one; 0: not given, as by older nodes). A report counts only for
 * that epoch and that key's departure, so one left from an earlier failure of the same
 * leader in the same epoch (it came back before anyone was elected) is not read again. */
typedef struct mqd_repl_report {
    uint32_t epoch;
    uint64_t end;
    int64_t leader_rev;
} mqd_repl_report_t;
char *mqd_repl_report_json(const mqd_repl_report_t *rep);
int mqd_repl_report_parse(const char *json, size_t n, mqd_repl_report_t *out);

/* ---- the fetch stream (wire.c) ----
 * One AMQP message per run of records: message annotations x-repl-base (ulong, the first
 * record's offset), x-repl-count (uint, records), x-repl-hw (ulong, the leader's high
 * watermark when sent); one data section holding the records exactly as stored (empty:
 * only the watermark moved). */
typedef struct mqd_repl_run {
    uint64_t base, hw;
    uint32_t count;
    const uint8_t *data; /* into the parsed buffer */
    size_t len;
} mqd_repl_run_t;
/* The sections before the records' bytes (annotations, the data section's header) into
 * out (>= MQD_REPL_HEAD_MAX bytes); returns their length. The records follow as they are. */
#define MQD_REPL_HEAD_MAX 96
size_t mqd_repl_run_head(const mqd_repl_run_t *run, uint8_t *out);
/* Encodes into *buf (grown with realloc, *cap its size); *len the bytes. */
int mqd_repl_run_encode(const mqd_repl_run_t *run, uint8_t **buf, size_t *cap, size_t *len);
/* MQD_ECORRUPT unless the message is exactly those annotations (any order, others
 * ignored) and at most one data section. */
int mqd_repl_run_parse(const uint8_t *msg, size_t len, mqd_repl_run_t *out);
/* One walk over a run's records by their length fields only (the CRCs are
 * mqd_plog_append_raw's to check): *max_epoch the largest leader epoch among them (0 for
 * none), *has_state whether one is a control record a follower acts on (a group's
 * committed offset or a transaction's COMMIT: gstate.c; most runs hold none, and then
 * the follower need not walk them again). MQD_ECORRUPT, outputs untouched, when a record
 * is shorter than its header or runs past len. */
int mqd_repl_run_scan(const uint8_t *data, size_t len, uint32_t *max_epoch, bool *has_state);
/* The same, calling fn(arg, offset, flags) for each record (fn NULL: none). */
int mqd_repl_run_walk(const uint8_t *data, size_t len, uint32_t *max_epoch, bool *has_state,
                      void (*fn)(void *arg, uint64_t offset, uint32_t flags), void *arg);

/* ---- the group-offset control record (gstate.c; parsing is of replicated input) ----
 * Body of a MQD_REC_CTRL_GROUP record: committed offset u64 (little-endian), then the
 * group's name (1..255 bytes, no NUL, not terminated). */
int mqd_repl_grec_encode(const char *group, uint64_t floor, uint8_t *out, size_t cap,
                         size_t *len);
/* MQD_ECORRUPT unless b is such a body; *name points into b (*nlen bytes). */
int mqd_repl_grec_parse(const uint8_t *b, size_t len, uint64_t *floor, const char **name,
                        size_t *nlen);

/* ---- the high-watermark checkpoint file (hwck_file.c; parsing is of a file that may be
 * torn or damaged) ----
 * data_dir/replication-offset-checkpoint, text:
 *   mqd replication-offset-checkpoint 1
 *   TOPIC PARTITION HW EPOCH        one line per replica, sorted by topic then partition
 *   end COUNT CRC32C                COUNT lines above; CRC32C (8 hex digits) of every
 *                                   byte before this line
 * EPOCH is the leader epoch of the record at HW - 1 when the line was written (0: none). */
#define MQD_REPL_HWCK_FILE "replication-offset-checkpoint"
typedef struct mqd_repl_hwck_ent {
    char *topic; /* owned by the table */
    uint32_t part;
    uint32_t epoch;
    uint64_t hw;
} mqd_repl_hwck_ent_t;
typedef struct mqd_repl_hwck {
    mqd_repl_hwck_ent_t *e; /* sorted by topic, then partition */
    size_t n, cap;
} mqd_repl_hwck_t;
/* Inserts or updates (topic, part): 1 when that changed the table, 0 when it held the
 * same, MQD_EINVAL (a topic of 0 or > 255 bytes, or not printable ASCII without spaces),
 * MQD_ENOMEM. */
int mqd_repl_hwck_set(mqd_repl_hwck_t *ck, const char *topic, uint32_t part, uint64_t hw,
                      uint32_t epoch);
const mqd_repl_hwck_ent_t *mqd_repl_hwck_get(const mqd_repl_hwck_t *ck, const char *topic,
                                             uint32_t part);
void mqd_repl_hwck_clear(mqd_repl_hwck_t *ck);
/* The file's bytes (*out malloc'd, *len bytes). */
int mqd_repl_hwck_format(const mqd_repl_hwck_t *ck, char **out, size_t *len);
/* MQD_ECORRUPT unless b[0..n) is exactly such a file (header, well-formed lines with no
 * repeated replica, the end line's count and CRC); *out (empty before) then holds it. */
int mqd_repl_hwck_parse(const char *b, size_t n, mqd_repl_hwck_t *out);
/* Replaces dir/MQD_REPL_HWCK_FILE with buf: a temp file written and fdatasync'ed, renamed
 * over it, the directory fsync'ed. MQD_EIO / MQD_ENOSPC (the old file stays). */
int mqd_repl_hwck_write(const char *dir, const char *buf, size_t len);
/* Reads and parses dir/MQD_REPL_HWCK_FILE: MQD_ENOENT when there is none, MQD_ECORRUPT,
 * MQD_EIO. */
int mqd_repl_hwck_read(const char *dir, mqd_repl_hwck_t *out);

/* ---- what node-to-node forwarding (src/fwd) asks of repl ----
 * Outbound connection options to node `node` exactly as a follower connects to its
 * leader (URL from its etcd key, TLS and node identity, replication_user): out->o points
 * into out. MQD_ENOENT while the node is not alive in this node's view. */
typedef struct mqd_repl_peer {
    mqd_outconn_opts_t o;
    char url[300], container[64], peer_cn[64], self_cn[64];
} mqd_repl_peer_t;
int mqd_repl_peer_opts(mqd_repl_t *r, uint32_t node, const char *container, mqd_repl_peer_t *out);
/* Who leads partition part of registered topic `topic` now: MQD_REPL_SERVE_HERE (this
 * node, in the current epoch), MQD_REPL_SERVE_REDIRECT (*leader, another node whose
 * address is known) or MQD_REPL_SERVE_WAIT (not known: no state read, an election). */
mqd_repl_serve_t mqd_repl_leader(mqd_repl_t *r, const char *topic, uint32_t part,
                                 uint32_t *leader);
/* This node leads partition part of `topic` in its view but may not acknowledge sends:
 * its cluster lease is lost or about to be (Fencing), so mqd_repl_leader says WAIT. */
bool mqd_repl_fenced(mqd_repl_t *r, const char *topic, uint32_t part);
/* The registered partition count of `topic`, 0 when the cluster has no such topic. */
uint32_t mqd_repl_nparts(mqd_repl_t *r, const char *topic);
/* Producer links are forwarded (src/fwd): a leader change no longer detaches them. */
void mqd_repl_set_forwarding(mqd_repl_t *r, bool on);
/* The node's own id and the cluster lease (ms). */
uint32_t mqd_repl_self(const mqd_repl_t *r);
uint32_t mqd_repl_lease_ms(const mqd_repl_t *r);
/* ---- leader changes, for forwarded receivers (src/fwd/recv.c) ----
 * fn(arg, topic, part, leader) runs on the loop whenever the leader this node knows for
 * a partition changes, or this node starts or stops playing that leader's role (leader
 * is then its own id, and the partition is served here only once it does). Not from
 * inside a link's event of the broker: fn may attach and close links of the node
 * connections. One callback (fn NULL: none). */
typedef void (*mqd_repl_leader_fn)(void *arg, const char *topic, uint32_t part, uint32_t leader);
void mqd_repl_on_leader(mqd_repl_t *r, mqd_repl_leader_fn fn, void *arg);

#endif
