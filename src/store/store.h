/* store: partition logs (segment files + sparse indexes) and the flusher thread.
 *
 * Threading contract. One thread (the broker's event loop, "the owner") calls every
 * function here except where noted. fdatasync runs on the store's own flusher thread;
 * when a log's stable offset advances, the flusher calls the `wake` function given to
 * mqd_store_open (from the flusher thread); the owner then calls mqd_store_dispatch(),
 * which invokes each log's `on_stable` callback on the owner thread (and the callback of
 * each asynchronous truncation that ended, mqd_plog_truncate_start).
 *
 * Offsets. Every record gets the next offset of its partition (0, 1, 2, ...).
 *   end offset     next offset to be assigned (everything below was appended)
 *   stable offset  every record below it meets the topic's flush promise:
 *                    flush=sync   -> fdatasync'd
 *                    flush=async  -> written to the page cache (fsync on an interval)
 *                  The broker settles sends `accepted` exactly when their offset < stable,
 *                  and consumers read only below it (replication will lower the bound to
 *                  the high watermark; transactions to the last stable offset).
 *   durable offset every record below it has been fdatasync'd (<= stable in async mode)
 *   start offset   the first offset still on disk (retention moves it up)
 */
#ifndef MQD_STORE_H
#define MQD_STORE_H

#include "mqd.h"
#include <sys/types.h>
#include <sys/uio.h>

typedef struct mqd_store mqd_store_t; /* all partition logs + the flusher thread */
typedef struct mqd_plog mqd_plog_t;   /* one partition's log, owned by the store */

typedef enum { MQD_FLUSH_SYNC = 0, MQD_FLUSH_ASYNC = 1 } mqd_flush_mode_t;

typedef struct mqd_plog_config {
    uint64_t segment_bytes;       /* roll when the active segment reaches this (default 1 GiB) */
    int64_t segment_ms;           /* roll when the active segment is older (default 7 days; 0 off) */
    mqd_flush_mode_t flush;       /* default MQD_FLUSH_SYNC */
    uint32_t flush_interval_ms;   /* async: fsync at least this often (default 1000) */
    uint64_t flush_messages;      /* async: also fsync after this many records (0 = off) */
    uint64_t retention_bytes;     /* delete old segments while the log is bigger (0 = off) */
    int64_t retention_ms;         /* delete segments whose newest record is older (0 = off) */
    uint32_t index_interval_bytes;/* one offset-index entry per this many log bytes (default 4096) */
    bool retention_consumed;      /* retention = consumed: mqd_plog_retain also deletes every
                                   * segment wholly below keep_from (default false) */
} mqd_plog_config_t;

/* Fills `c` with the defaults above. */
void mqd_plog_config_default(mqd_plog_config_t *c);

/* Record flags (32 bits). Low byte: kind; the rest: attributes. */
#define MQD_REC_DATA 0x00u        /* an ordinary message */
#define MQD_REC_CTRL_COMMIT 0x01u /* control record: transaction `txn` committed */
#define MQD_REC_CTRL_ABORT 0x02u  /* control record: transaction `txn` aborted */
#define MQD_REC_CTRL_GROUP 0x04u  /* control record: a consumer group's committed offset
                                   * (repl/gstate.c: replicated with the partition) */
#define MQD_REC_KIND_MASK 0xffu
#define MQD_REC_TXN 0x100u        /* data record written inside transaction `txn` */
#define MQD_REC_SCHEDULED 0x200u  /* data record whose message annotations carry
                                   * x-opt-scheduled-enqueue-time: cursors hide it until
                                   * then (a hint only: the payload is unchanged, and a
                                   * reader that does not know the bit delivers it at once) */

/* A record to append. `data` is copied before the call returns. */
typedef struct mqd_rec_in {
    const void *data;
    uint32_t len;
    int64_t timestamp_ms; /* 0 -> now */
    uint32_t flags;
    uint64_t txn;         /* transaction id, 0 if none */
} mqd_rec_in_t;

/* A record read back. `data` points into the mqd_read_t that returned it (its buffer, or
 * a cold-read chunk it holds): valid until the next read with that mqd_read_t or its
 * mqd_read_free. */
typedef struct mqd_rec {
    uint64_t offset;
    int64_t timestamp_ms;
    uint32_t epoch;       /* leader epoch it was written under */
    uint32_t flags;
    uint64_t txn;
    const uint8_t *data;
    uint32_t len;
} mqd_rec_t;

/* A reusable read buffer: init once, pass to mqd_plog_read many times, free once. */
typedef struct mqd_read {
    mqd_rec_t *recs;
    size_t n;            /* records returned by the last read */
    size_t cap_recs;
    uint8_t *buf;
    size_t cap_buf;
    uint64_t next_offset;/* offset after the last record returned (where to read next) */
    void *pin;           /* the cold-read chunk the records point into, or NULL (coldread.c) */
} mqd_read_t;

void mqd_read_init(mqd_read_t *r);
void mqd_read_free(mqd_read_t *r);

/* Called on the owner thread from mqd_store_dispatch() when `log`'s stable offset rose. */
typedef void (*mqd_plog_stable_cb)(mqd_plog_t *log, uint64_t stable_offset, void *arg);
/* Called from the flusher thread; must only wake the owner (e.g. event_active). */
typedef void (*mqd_store_wake_fn)(void *arg);

/* Opens the store rooted at `data_dir` (creates `data_dir/topics`). Starts `flushers`
 * flusher threads (0: MQD_STORE_FLUSHERS_DEFAULT; at most MQD_STORE_FLUSHERS_MAX); each
 * partition log belongs to one of them, assigned round robin as logs open, so syncs of
 * different partitions overlap. `wake` may be NULL (then the owner must poll
 * mqd_store_dispatch); it is called from any flusher thread. */
#define MQD_STORE_FLUSHERS_DEFAULT 4
#define MQD_STORE_FLUSHERS_MAX 64
int mqd_store_open_ex(const char *data_dir, unsigned flushers, mqd_store_wake_fn wake,
                      void *wake_arg, mqd_store_t **out);
/* Starts background threads that read every partition's directory, checkpoint, index
 * files and segment tails into the page cache, and returns at once: call it before
 * opening many logs at start, so their recovery finds its reads cached instead of making
 * one disk round trip after another. Once per store; a no-op afterwards. */
void mqd_store_warm(mqd_store_t *st);
/* flush_sync = syncfs: the flushers make group commits durable with syncfs(2) on the
 * data directory's file system, shared by every flusher whose writes completed before it
 * started, instead of one fdatasync per partition (a syncfs that fails falls back to the
 * partition's own fdatasync). For a data directory on its own file system with many
 * partitions written at once; it also syncs whatever else is dirty on that file system.
 * Call before logs are opened. */
void mqd_store_set_syncfs(mqd_store_t *st, int on);
/* prezero = BYTES: keep this many bytes of zeros written and synced ahead of each
 * written flush=sync log's tail (a group commit's fdatasync then overwrites blocks
 * instead of growing the file: about half the time). 0 (the default) turns it off.
 * Any time after open. */
void mqd_store_set_prezero(mqd_store_t *st, uint64_t bytes);
/* Runs the flusher threads `boost` nice levels above the process (0: at its priority;
 * applied by each flusher at its next wake). Raising a priority needs CAP_SYS_NICE or a
 * permissive RLIMIT_NICE: without, it is logged once and left. */
void mqd_store_set_flush_boost(mqd_store_t *st, unsigned boost);
/* max_open_files = N: segment (.log) descriptors the store keeps open at once. Segments
 * of logs not used lately are closed (least recently used first) and reopened on the
 * next append or read, so idle partitions hold none; a log the flusher is writing or
 * syncing keeps its tail open, so the cap is exceeded only while more logs than N are
 * busy at once. 0: the default, (RLIMIT_NOFILE soft limit - MQD_STORE_FD_RESERVE) / 2,
 * at most MQD_STORE_FD_MAX_DEFAULT, at least MQD_STORE_FD_MIN. Owner thread, any time. */
#define MQD_STORE_FD_RESERVE 64
#define MQD_STORE_FD_MIN 16
#define MQD_STORE_FD_MAX_DEFAULT 4096
void mqd_store_set_max_open_files(mqd_store_t *st, size_t n);
/* Segment descriptors open now, and the cap in force (owner thread). */
typedef struct mqd_store_fd_stats {
    size_t open, cap;
    uint64_t reopens;   /* closed segments opened again on demand */
    uint64_t evictions; /* logs whose descriptors were closed to stay under the cap */
} mqd_store_fd_stats_t;
void mqd_store_fd_stats(mqd_store_t *st, mqd_store_fd_stats_t *out);

/* The store's I/O table: every syscall that can lose data (write, sync, truncate) goes
 * through it, so tests can inject errors (EIO from fdatasync, short writes) or count
 * calls. Each store has its own (a leader and a follower store in one test process can
 * fail differently); the appending path pays one pointer load for it. fsync is used for
 * directories only, fdatasync for files. */
typedef struct mqd_store_io {
    ssize_t (*pwritev)(int fd, const struct iovec *iov, int iovcnt, off_t off);
    ssize_t (*pwrite)(int fd, const void *buf, size_t len, off_t off);
    int (*fdatasync)(int fd);
    int (*fsync)(int fd);
    int (*ftruncate)(int fd, off_t len);
    int (*syncfs)(int fd);
} mqd_store_io_t;
/* Fills `io` with the libc calls (what a store starts with). */
void mqd_store_io_default(mqd_store_io_t *io);
/* Copies `io` into st's table (NULL: the libc calls). Call it right after open, or
 * between operations while the flushers are idle: they read the table without a lock. */
void mqd_store_set_io(mqd_store_t *st, const mqd_store_io_t *io);

/* mqd_store_open_ex with the default number of flushers. */
int mqd_store_open(const char *data_dir, mqd_store_wake_fn wake, void *wake_arg, mqd_store_t **out);
/* Flushes and fsyncs everything, writes recovery checkpoints, stops the flusher,
 * closes every log. NULL is a no-op. */
void mqd_store_close(mqd_store_t *st);
/* Runs stable callbacks for every log whose stable offset advanced. Owner thread. */
void mqd_store_dispatch(mqd_store_t *st);
/* Hands every log's appends made since the last call to the flusher (one write +
 * one fdatasync per log per batch: group commit). The broker calls this once per
 * event-loop iteration after handling input; tests call it after appending. */
void mqd_store_commit(mqd_store_t *st);

/* Opens (creating if needed) partition `partition` of `topic`: recovers the tail,
 * rebuilds bad indexes. Returns the store-owned log; valid until mqd_store_close or
 * mqd_store_drop_topic. Opening an open log returns the same pointer and applies `cfg`. */
int mqd_store_log_open(mqd_store_t *st, const char *topic, uint32_t partition,
                       const mqd_plog_config_t *cfg, mqd_plog_t **out);
/* Finds an open log, or NULL. */
mqd_plog_t *mqd_store_log_find(mqd_store_t *st, const char *topic, uint32_t partition);
/* Closes and deletes every partition of `topic` from disk. */
int mqd_store_drop_topic(mqd_store_t *st, const char *topic);

void mqd_plog_set_config(mqd_plog_t *log, const mqd_plog_config_t *cfg);
void mqd_plog_set_stable_cb(mqd_plog_t *log, mqd_plog_stable_cb cb, void *arg);

/* The commit tap (replication): fn(log, first, data, len, count, arg) runs on the owner
 * thread inside mqd_store_commit for each batch of records handed to the flusher, with
 * the batch's bytes exactly as they will be on disk (whole raw records, offsets
 * [first, first + count)), before its write and sync. A leader ships them to followers
 * from there, so its own fsync and the followers' overlap and nothing is read back; the
 * bytes are valid only during the call. What the tap shipped is not yet stable here: a
 * log that fails after it may lose those records (see repl/leader.c: the leader then
 * steps down). NULL turns it off. */
typedef void (*mqd_plog_tap_fn)(mqd_plog_t *log, uint64_t first, const uint8_t *data, size_t len,
                                uint32_t count, void *arg);
void mqd_plog_set_commit_tap(mqd_plog_t *log, mqd_plog_tap_fn fn, void *arg);

/* Appends n records; assigns consecutive offsets starting at *first_offset (out).
 * The bytes are in the log's pending batch until mqd_store_commit; reads see them
 * only once stable. Returns MQD_EFAILED if the partition failed (fsync EIO,
 * corruption), MQD_ETOOBIG if a record exceeds 2 GiB, MQD_EAGAIN while an asynchronous
 * truncation is under way. */
int mqd_plog_append(mqd_plog_t *log, const mqd_rec_in_t *recs, size_t n, uint64_t *first_offset);

/* Reads records with offset in [from, min(upper, stable)) into `r`, at most
 * max_records and about max_bytes (always at least one record if any is readable).
 * May return fewer (it stops at a segment end or after 8192 records); read on from
 * r->next_offset. Safe while the flusher writes.
 * from < start offset -> MQD_ERANGE. Nothing readable -> 0 with r->n == 0. An
 * asynchronous truncation under way -> MQD_EAGAIN. */
int mqd_plog_read(mqd_plog_t *log, uint64_t from, uint64_t upper, size_t max_records,
                  size_t max_bytes, mqd_read_t *r);

/* First offset whose timestamp >= ts_ms (end offset if none). */
int mqd_plog_offset_for_time(mqd_plog_t *log, int64_t ts_ms, uint64_t *out);

uint64_t mqd_plog_start_offset(const mqd_plog_t *log);
uint64_t mqd_plog_end_offset(const mqd_plog_t *log);
uint64_t mqd_plog_stable_offset(const mqd_plog_t *log);
uint64_t mqd_plog_durable_offset(const mqd_plog_t *log);
uint64_t mqd_plog_size_bytes(const mqd_plog_t *log);
int64_t mqd_plog_last_timestamp(const mqd_plog_t *log); /* 0 if empty */
bool mqd_plog_failed(const mqd_plog_t *log);
bool mqd_plog_unhealthy(const mqd_plog_t *log); /* mid-log corruption found at open */
const char *mqd_plog_topic(const mqd_plog_t *log);
uint32_t mqd_plog_partition(const mqd_plog_t *log);

/* Failed logs (a write or sync error; the stable callback runs once when a log fails,
 * with stable = durable, so the owner can fail the sends past it). The errno that
 * failed it (ENOSPC / EDQUOT: the disk is full), 0 while healthy. */
int mqd_plog_fail_errno(const mqd_plog_t *log);
/* Asks the flusher to make a failed log take appends again: it truncates the log to its
 * durable offset (every record appended after it is gone: their sends must already have
 * been failed), writes and fdatasyncs a probe block, and clears the failure only if that
 * worked. Returns at once: 0 (asked, or the log is healthy), MQD_EAGAIN (a resume is
 * under way). The stable callback runs when it ended; mqd_plog_failed then tells how.
 * Owner thread. */
int mqd_plog_resume(mqd_plog_t *log);
bool mqd_plog_resuming(const mqd_plog_t *log);

/* Corrupt records (a CRC or header mismatch inside the whole records of a segment: bit
 * rot, a damaged sealed segment). Readers skip them: mqd_plog_read returns, for each
 * offset the damage covers, a record with kind MQD_REC_CORRUPT and no data, and goes on
 * with the next intact record, so no consumer ever stops at one. Counted once per
 * offset per process run (and logged once): `count` offsets, the lowest in *first
 * (UINT64_MAX if none). */
#define MQD_REC_CORRUPT 0x03u /* kind of a record mqd_plog_read made up for damage */
void mqd_plog_corrupt(const mqd_plog_t *log, uint64_t *count, uint64_t *first);

/* Leader epoch stamped on records appended from now on (replication). */
void mqd_plog_set_epoch(mqd_plog_t *log, uint32_t epoch);

/* ---- Replication: raw records and truncation ----
 * A leader ships records as they are on disk and a follower appends those bytes, so
 * neither decodes or re-encodes them:
 *   leader    mqd_plog_read_raw(log, from, buf, cap, &len, &next): whole records, never
 *             a partial one, never at or past the stable offset;
 *   wire      the bytes as they are (a fetch response carries buf[0..len));
 *   follower  mqd_plog_append_raw(log, buf, len, &first): checks every CRC and that the
 *             offsets run on from its end offset, then appends the same bytes (their
 *             timestamps and epochs kept); mqd_store_commit / the stable callback as for
 *             mqd_plog_append. mqd_store_raw_next walks such a buffer record by record.
 *   divergence after a leader change: mqd_plog_truncate_start(log, offset, cb, arg) cuts
 *             the follower back to the leader's offset on the flusher thread (the event
 *             loop does not block); cb runs from mqd_store_dispatch once it is durable.
 * Record format (little-endian), MQD_STORE_RAW_HDR bytes of header then the payload:
 *   len u32 | crc32c u32 | offset u64 | timestamp_ms i64 | epoch u32 | flags u32 |
 *   txn u64 | payload
 * `len` counts the bytes after itself; the CRC covers everything after the crc field.
 * The leader epoch a record was written under is already a field (mqd_plog_set_epoch
 * stamps it; 0 on a single node), so a follower finds where its log diverges from the
 * leader's by epoch with no format change. Records carry no version number: the flags
 * word is where a later format marks what it adds (kind in the low byte, MQD_REC_TXN =
 * 0x100, bits 9-31 unused), e.g. a bit for a header extension after txn counted in
 * `len`. Today's readers take every byte after txn as payload and readers of data
 * records test only the kind and MQD_REC_TXN, so such a bit must come with readers that
 * know it before any store writes it. */
#define MQD_STORE_RAW_HDR 40u

/* One record of a raw buffer, as mqd_store_raw_next parsed it. `data` points into that
 * buffer (valid while it is). */
typedef struct mqd_raw_rec {
    uint64_t offset;
    int64_t timestamp_ms;
    uint32_t epoch;       /* leader epoch it was written under */
    uint32_t flags;
    uint64_t txn;
    uint32_t crc;         /* CRC32C as stored (verified) */
    uint32_t size;        /* bytes of the whole record: MQD_STORE_RAW_HDR + len */
    const uint8_t *data;  /* payload */
    uint32_t len;         /* payload bytes */
} mqd_raw_rec_t;

/* Parses the record at buf[*pos] and checks its length and CRC. 1: *out is it and *pos
 * moved past it; 0: *pos == len (nothing left); MQD_ECORRUPT: the bytes at *pos are not
 * one whole intact record (short, bad length or CRC), *pos unchanged. Any thread. */
int mqd_store_raw_next(const void *buf, size_t len, size_t *pos, mqd_raw_rec_t *out);

/* Copies the whole records with offsets from `from` on, below the stable offset, into
 * buf (at most cap bytes), exactly as stored; *len: bytes written, *next_offset: the
 * offset after the last one (from when none). Reads across segments. Returns 0 (len 0:
 * nothing stable at `from` yet); MQD_ETOOBIG: the record at `from` alone is larger than
 * cap (then, unlike other out-parameters, *len is its size: grow buf and call again);
 * MQD_ERANGE: from < start offset; MQD_ECORRUPT: the record at `from` fails its checks
 * (records before the damage are returned by the call that reaches it); MQD_EAGAIN: an
 * asynchronous truncation is under way; MQD_EIO. Owner thread. */
int mqd_plog_read_raw(mqd_plog_t *log, uint64_t from, void *buf, size_t cap, size_t *len,
                      uint64_t *next_offset);

/* Follower side: appends the raw records in buf[0..len) (a whole number of them, as
 * mqd_plog_read_raw returned) if every one is intact and the first offset is the log's
 * end offset and each next one follows; else appends nothing and returns MQD_ECORRUPT (a
 * damaged or partial record) or MQD_ERANGE (an offset out of sequence). *first_offset:
 * the first record's offset (the old end offset). The bytes are copied before it
 * returns and kept as they are (timestamps, epochs, flags, txn). MQD_EFAILED, MQD_EAGAIN
 * (truncation under way), MQD_ENOMEM as for mqd_plog_append. Owner thread. */
int mqd_plog_append_raw(mqd_plog_t *log, const void *buf, size_t len, uint64_t *first_offset);

/* Deletes every record at offset >= `offset` (replication: follower truncation after
 * a leader change). Blocks the caller until the flusher did it (for tools, tests and
 * recovery paths without a loop; the event loop uses mqd_plog_truncate_start). */
int mqd_plog_truncate_to(mqd_plog_t *log, uint64_t offset);

/* Called from mqd_store_dispatch (owner thread) when an asynchronous truncation ended:
 * rc 0 and end_offset == the offset asked for, or an error (the log then failed). */
typedef void (*mqd_plog_truncated_cb)(mqd_plog_t *log, uint64_t end_offset, int rc, void *arg);
/* Asks the flusher to delete every record at offset >= `offset` and returns at once.
 * The flusher cuts the segment holding `offset` (ftruncate + fdatasync), unlinks later
 * segments and fsyncs the directory, and writes the recovery checkpoint, all before `cb`
 * runs: what cb reports survives a crash. Until then appends, raw appends, reads and raw
 * reads of the log return MQD_EAGAIN and its end offset is the old one; stable and
 * durable drop to `offset` when it is done (the stable callback may run with the lower
 * value). Returns 0 (asked: cb runs exactly once, unless the store is closed first),
 * MQD_ERANGE (offset > end offset), MQD_EAGAIN (a truncation or resume is under way).
 * Pending appends are committed first and cut with the rest. Owner thread. */
int mqd_plog_truncate_start(mqd_plog_t *log, uint64_t offset, mqd_plog_truncated_cb cb,
                            void *arg);
bool mqd_plog_truncating(const mqd_plog_t *log);

/* Empties the log and restarts it at `start` (>= its end offset): a follower whose
 * fetch offset is below its leader's log start holds nothing the leader still has and
 * takes the leader's start (reset.c). Asynchronous like mqd_plog_truncate_start, with
 * the same refusals while it runs and the same callback (end_offset == start). Durable
 * before cb runs; a power cut leaves the old log or the new empty one. A write or sync
 * error reports rc != 0 and fails the log (its segment list in memory may then name
 * unlinked files): the next open shows the old log or the new one (test_reset).
 * MQD_ERANGE when start is below the end offset. Owner thread. */
int mqd_plog_reset(mqd_plog_t *log, uint64_t start, mqd_plog_truncated_cb cb, void *arg);

/* Deletes whole old segments, oldest first, by the log's retention_bytes/retention_ms
 * (and, with retention_consumed, every segment wholly below keep_from). `keep_from` is
 * the lowest offset some reader, group or open transaction still needs (for retention =
 * consumed: the min committed offset of all groups, lowered by those): nothing at or
 * after it is ever deleted; UINT64_MAX for no such limit. Never deletes the active
 * segment. Returns the number of segments deleted (>= 0) or an error. The directory
 * fsync after the unlinks runs on the flusher thread. */
int mqd_plog_retain(mqd_plog_t *log, uint64_t keep_from, int64_t now_ms);

/* fdatasync latencies of data segments, for metrics (bounds in seconds, cumulative
 * buckets in Prometheus style; the last bucket is +Inf). */
#define MQD_STORE_HIST_BUCKETS 12
typedef struct mqd_store_stats {
    uint64_t fsyncs;
    uint64_t slow;                                  /* over MQD_STORE_SLOW_FSYNC_MS */
    uint64_t bucket[MQD_STORE_HIST_BUCKETS + 1];    /* non-cumulative counts */
    double sum_s;
} mqd_store_stats_t;
#define MQD_STORE_SLOW_FSYNC_MS 1000
const double *mqd_store_hist_bounds(void);
/* Copies the counters (any thread). */
void mqd_store_stats(mqd_store_t *st, mqd_store_stats_t *out);

/* Blocks the calling (owner) thread until stable >= offset or the log failed; for
 * tools and tests that have no event loop. Runs mqd_store_commit first. */
int mqd_plog_wait_stable(mqd_plog_t *log, uint64_t offset);

#endif
