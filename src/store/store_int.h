/* store internals: shared by the files of src/store only. */
#ifndef MQD_STORE_INT_H
#define MQD_STORE_INT_H

#include "store/store.h"

#include <pthread.h>
#include <sys/types.h>
#include <sys/uio.h>

/* On-disk record: len u32 | crc32c u32 | offset u64 | ts i64 | epoch u32 | flags u32 |
 * txn u64 | data. `len` counts the bytes after itself; the CRC covers everything after
 * the crc field. All little-endian (the build refuses big-endian hosts). */
#define REC_HDR 40u
#define REC_LEN_MIN (REC_HDR - 4u)
#define REC_MAX_DATA 0x7fffffffu
_Static_assert(REC_HDR == MQD_STORE_RAW_HDR, "store.h documents the record header");
#define IDX_ENTRY 8u  /* rel_offset u32, position u32 */
#define TIX_ENTRY 12u /* timestamp i64, rel_offset u32 */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "mqd store writes little-endian records with memcpy; port the encoders first"
#endif

typedef struct idx_ent { uint32_t rel; uint32_t pos; } idx_ent_t;
typedef struct tix_ent { int64_t ts; uint32_t rel; } tix_ent_t;

/* One segment: files BASE.log/.idx/.tix. The in-memory indexes are the truth while
 * open; the files are a cache rebuilt at open when they disagree with the log. The index
 * files are opened only while loaded or written (checkpoints, rolls, close); the .log
 * only while the segment is in use (fdlru.c): fd is -1 while it is closed. */
typedef struct seg {
    struct seg *next, *prev;
    mqd_store_t *st;      /* counts the segment's descriptors (fdlru.c) */
    uint64_t base;
    int fd;               /* the .log, or -1 while closed (fdlru.c says when) */
    int dfd;              /* O_DIRECT descriptor for cold reads (plog.c): -1 not yet, -2 none */
    uint64_t size;        /* bytes of whole records in the file (written by the flusher) */
    uint64_t synced;      /* bytes known fdatasync'd (flusher; atomic) */
    uint64_t next_off;    /* offset after the last record in the file */
    int64_t max_ts;       /* newest record timestamp (0 if empty) */
    uint64_t max_ts_off;  /* offset of the record that set max_ts */
    int64_t created_ms;   /* first record's timestamp or creation time, for segment_ms */
    uint64_t last_idx_pos;/* file position of the last index entry (for the interval) */
    idx_ent_t *idx;
    size_t n_idx, cap_idx;
    tix_ent_t *tix;
    size_t n_tix, cap_tix;
    size_t idx_on_disk, tix_on_disk; /* entries already in the index files */
} seg_t;

/* Cold reads (coldread.c). A reader far behind the tail reads an older segment in
 * DC_CHUNK pieces with O_DIRECT: chunk k serves the owner's reads while a reader thread
 * reads chunk k + 1 (the chunk at cur->pos + DC_CHUNK) into the log's second buffer. */
#define DC_CHUNK (2u << 20)
#define DC_ALIGN 4096u
#define DC_MAX_LOGS 64 /* logs holding cold-read buffers at once (2 x DC_CHUNK each) */

typedef struct cold_chunk cold_chunk_t;

/* A log's chain of sequential chunks of one older segment. Owner thread only; the
 * chunks' states are guarded by the store's cold-read mutex. */
typedef struct cold_chain {
    cold_chunk_t *cur; /* chunk k, read and serving (NULL: no chain) */
    cold_chunk_t *nxt; /* chunk k + 1: queued, being read or read (NULL: not asked yet) */
    uint64_t base;     /* the segment's base offset */
    unsigned served;   /* reads served since the chain started */
    bool cached_next;  /* the page cache holds chunk k + 1: no read-ahead, reads past
                        * cur go there */
} cold_chain_t;

/* A group-commit batch: encoded records between two mqd_store_commit calls. */
typedef struct batch {
    struct batch *next;
    uint8_t *buf;
    size_t len, cap;
    uint64_t first_off, end_off;
    uint32_t nrec;
} batch_t;

struct mqd_plog {
    struct mqd_plog *next;
    mqd_store_t *st;
    char *topic;
    uint32_t partition;
    char *dir;
    mqd_plog_config_t cfg;
    mqd_plog_stable_cb cb;
    mqd_plog_tap_fn tap; /* owner thread: mqd_plog_set_commit_tap */
    void *tap_arg;
    void *cb_arg;
    uint32_t epoch;

    /* owner-thread state */
    uint64_t end;
    int truncating; /* an asynchronous truncation is under way (truncate.c) */
    struct mqd_plog *lru_prev, *lru_next; /* st's LRU of logs with open segments (fdlru.c) */
    int on_lru;
    cold_chain_t cold; /* cold reads of older segments (coldread.c) */
    batch_t *pending;
    struct mqd_plog *pend_next; /* in st->pend_logs while `pending` holds records */
    int on_pend;

    /* guarded by mu (short sections: list and index changes, handoff) */
    pthread_mutex_t mu;
    seg_t *head, *tail;
    batch_t *queue, *queue_tail;
    uint64_t start;

    /* written by the flusher, read anywhere (atomics) */
    uint64_t stable, durable;
    int failed, unhealthy;
    int fail_err;             /* errno that failed the log (0 while healthy) */
    int resume_req;           /* mqd_plog_resume asks the flusher (atomic; resume.c) */
    int resume_rc;            /* how the last resume ended (0, MQD_ENOSPC, MQD_EIO) */
    struct corrupt_set *corrupt; /* corrupt records readers skipped (corrupt.c; owner) */

    /* flusher-only state */
    uint64_t unsynced_recs;   /* async: records written but not synced */
    int64_t last_sync_ms;
    int64_t last_ckpt_ms;
    uint64_t ckpt_durable;    /* durable offset the checkpoint on disk records */
    int ckpt_hint;            /* ... in an unsynced periodic write (a clean close redoes it) */
    int ckpt_clean;           /* recovery found the checkpoint exactly at the log's end */
    int dir_dirty;            /* retention deleted files: fsync the directory (atomic) */
    uint64_t trunc_req;       /* truncate_to(offset) asks the flusher: offset + 1 (atomic) */
    int trunc_rc;
    int trunc_reset;          /* the request is a reset (reset.c), set with trunc_req */
    uint64_t trunc_end;       /* the end offset the truncation left (the owner takes it) */
    mqd_plog_truncated_cb trunc_cb; /* an asynchronous truncation's callback (owner) */
    void *trunc_cb_arg;

    /* guarded by st->mu */
    struct flusher *fl;         /* the flusher thread this log belongs to (fixed at open) */
    int flushing;
    struct mqd_plog *work_next; /* in fl->work while the flusher has something to do */
    int on_work;
    struct mqd_plog *timed_next; /* in fl->timed while a timed sync or checkpoint is due */
    int on_timed;
    struct mqd_plog *adv_next;   /* in st->adv while its stable callback is due */
    int on_adv;
    struct mqd_plog *tdone_next; /* in st->tdone while its truncation callback is due */
    int on_tdone;
    struct mqd_plog *hnext;      /* hash chain (st->htab) */

    /* pre-zeroed tail (prezero.c), guarded by the store's zero mutex */
    seg_t *zseg;            /* the segment being zeroed ahead (NULL: none) */
    uint64_t zend;          /* zeros written and synced up to here in zseg */
    uint64_t zwpos;         /* the flusher's writes reach up to here */
    uint64_t zfrom;         /* while zwriting: the zeroer's piece starts here */
    uint64_t zlimit;        /* segment_bytes: no zeros past it */
    int zwriting, zbusy;    /* the zeroer writes a piece / writes or syncs it */
    int zqueued, zoff;      /* queued for the zeroer / zeroing failed: never again */
    int zdirty;             /* the file may hold zeros past its records */
    struct mqd_plog *znext; /* in the zeroer's queue */
};

/* One flusher thread and its share of the logs (assigned round robin at open), so
 * fdatasyncs of different partitions run in parallel: the disk completes concurrent
 * syncs of different files together. Lists and flags guarded by st->mu. */
typedef struct flusher {
    mqd_store_t *st;
    pthread_t thr;
    int started, kick;
    int boost;              /* the nice boost this thread runs at (its own field) */
    pthread_cond_t work_cv; /* waits for work */
    /* Logs to visit before the next timed pass (queued batches, truncation, a
     * directory to sync), so a kick costs O(busy logs), not O(partitions). */
    mqd_plog_t *work, *work_tail;
    /* Logs the timed pass (every TICK_MS) must visit: an unsynced tail (async) or a
     * checkpoint behind `durable`. Idle logs are on no list and cost nothing.
     * timed_cur: the rest of the pass in progress. */
    mqd_plog_t *timed, *timed_cur;
} flusher_t;

struct mqd_store {
    mqd_store_io_t io; /* every write, sync and truncate of this store (mqd_store_set_io) */
    char *root;
    mqd_store_wake_fn wake;
    void *wake_arg;
    flusher_t *fl;
    unsigned nfl, next_fl;
    pthread_mutex_t mu;
    pthread_cond_t done_cv; /* owner waits for progress (stable, idle logs) */
    mqd_plog_t *logs;
    mqd_plog_t **htab; /* (topic, partition) -> log; owner thread only */
    size_t hcap, hcount;
    int stop;
    batch_t *free_batches; /* recycled batch buffers, guarded by mu */
    /* Logs whose stable offset advanced since the owner last dispatched. Guarded by mu. */
    mqd_plog_t *adv;
    /* Logs whose asynchronous truncation ended (truncate.c). Guarded by mu. */
    mqd_plog_t *tdone;
    /* Logs with appended but uncommitted records (owner thread only): a commit costs
     * O(logs appended to since the last one). */
    mqd_plog_t *pend_logs;
    mqd_store_stats_t stats; /* fdatasync latencies, guarded by mu */
    /* flush_sync = syncfs (store.c group_sync): flushers share whole-file-system syncs.
     * Tickets are taken after a log's write completed; a syncfs started after ticket t
     * was taken makes t durable. Guarded by gs_mu. */
    int use_syncfs;
    int flush_boost;       /* nice levels above the process for flushers (atomic) */
    int flush_boost_warned; /* raising it was refused once (atomic) */
    pthread_mutex_t gs_mu;
    pthread_cond_t gs_cv;
    uint64_t gs_asked;   /* tickets handed out */
    uint64_t gs_done;    /* tickets made durable by a syncfs that succeeded */
    uint64_t gs_failed;  /* tickets covered by a syncfs that failed: fdatasync decides */
    int gs_running;
    struct store_warm *warm; /* start-up warm-up threads (warm.c), or NULL */
    size_t dc_logs;          /* logs with a cold-read chain (owner thread) */
    struct store_cold *cold; /* cold-read threads (coldread.c) */
    struct store_zero *zero; /* the zeroer thread (prezero.c) */
    /* Segment descriptors (fdlru.c). fd_open: open now (atomic: flushers open new
     * segments at rolls); fd_cap: the most the owner keeps open (0 until the first use
     * derives it from RLIMIT_NOFILE); the LRU of logs holding some: owner thread only. */
    size_t fd_open, fd_cap;
    uint64_t fd_reopens, fd_evictions; /* counters for tests and metrics (owner) */
    mqd_plog_t *lru_head, *lru_tail;
};

/* ---- segment.c ---- */
void seg_path(const mqd_plog_t *log, uint64_t base, const char *ext, char *buf, size_t n);
int seg_create(mqd_plog_t *log, uint64_t base, seg_t **out);
void seg_free(seg_t *s);
void seg_unlink(const mqd_plog_t *log, const seg_t *s);
int seg_index_add(seg_t *s, const mqd_plog_config_t *cfg, uint64_t off, uint64_t pos,
                  int64_t ts);
/* Writes the index entries not yet in the files (all of them, after truncating the
 * files, when `rewrite`); fdatasyncs both files when `sync`. */
int seg_index_write(const mqd_plog_t *log, seg_t *s, int rewrite, int sync);
uint64_t seg_lookup_pos(const seg_t *s, uint64_t off, uint64_t *at_off);
uint64_t seg_lookup_time(const seg_t *s, int64_t ts);
int seg_truncate_at(mqd_plog_t *log, seg_t *s, uint64_t off, bool locked);
int log_recover(mqd_plog_t *log);
/* Records that [0, pos) of segment `base` holds whole, fdatasync'd records up to offset
 * `off`, so recovery scans from there. `sync`: durably (tmp file, fdatasync, rename,
 * directory fsync), at rolls, truncations and a clean close; else a hint overwritten in
 * place with no sync, for the periodic checkpoints of a busy log (a lost or torn hint
 * only makes the next recovery scan more). */
int ckpt_write(mqd_plog_t *log, uint64_t base, uint64_t pos, uint64_t off, int sync);
/* fsync of a directory through st's I/O table. 0 or MQD_EIO. */
int store_fsync_dir(mqd_store_t *st, const char *dir);

/* "." or "..", skipped when walking a directory. */
static inline int store_is_dots(const char *n)
{
    return n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]));
}

/* Decodes the header at p (REC_HDR bytes). */
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; __builtin_memcpy(&v, p, 4); return v; }
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; __builtin_memcpy(&v, p, 8); return v; }

/* ---- store.c ---- */
/* Flusher: fails log for good after `what` failed with errno err on segment s (cuts its
 * unsynced bytes, stable falls to durable, the owner is told). */
void store_log_fail(mqd_plog_t *log, seg_t *s, const char *what, int err);
/* Files log on the store's advanced list and wakes the owner, so the log's stable
 * callback runs (flusher thread, st->mu not held): stable rose, or the log failed or
 * resumed. */
void store_announce(mqd_plog_t *log);
batch_t *store_batch_get(mqd_store_t *st);
void store_batch_put(mqd_store_t *st, batch_t *b);
/* Puts log on the flusher's work list and wakes the flusher. */
void store_kick_log(mqd_store_t *st, mqd_plog_t *log);
/* Takes log off the work list (st->mu held; the log is being freed). */
void store_work_del(mqd_store_t *st, mqd_plog_t *log);
/* Takes log off the work, timed and advanced lists (st->mu held; it is being freed). */
void store_lists_del(mqd_store_t *st, mqd_plog_t *log);

/* ---- warm.c ---- */
#define STORE_WARM_THREADS 8
/* Starts threads that read every partition directory's files into the page cache. */
struct store_warm *store_warm_start(const char *root);
/* Stops (early, if still running) and joins them. NULL is a no-op. */
void store_warm_stop(struct store_warm *w);

/* ---- prezero.c ---- */
struct store_zero *store_zero_start(void);
/* Joins the zeroer; the state stays for the flushers' last cuts. NULL is a no-op. */
void store_zero_stop(struct store_zero *z);
void store_zero_free(struct store_zero *z);
/* Flusher, before it writes its tail s up to file position `end`: keeps the zeroer off
 * those bytes and asks it to zero ahead. */
void store_zero_before_write(mqd_plog_t *log, seg_t *s, uint64_t end, const mqd_plog_config_t *c);
/* Flusher: stops zeroing s and cuts its zeros (ftruncate to s->size + fdatasync): before
 * a roll and at a clean close. 0 or MQD_EIO. */
int store_zero_cut(mqd_plog_t *log, seg_t *s);
/* Stops zeroing for log without cutting (truncation cuts the file itself; a dropped log's
 * files go). */
void store_zero_detach(mqd_plog_t *log);
typedef struct store_zero_stats {
    uint64_t bytes;  /* zeros written and synced */
    uint64_t pieces; /* their writes (ZCHUNK at most) */
    uint64_t waits;  /* flusher writes that waited for a piece in progress */
    size_t logs;     /* logs holding zeros now */
} store_zero_stats_t;
void store_zero_stats(mqd_store_t *st, store_zero_stats_t *out);

/* ---- coldread.c ---- */
#define STORE_COLD_THREADS 2
/* Starts the cold-read threads; NULL when out of memory or threads. */
struct store_cold *store_cold_start(void);
/* Joins them after the reads still running finish. Every log must have ended its chain
 * (plog_free does). NULL is a no-op. */
void store_cold_stop(struct store_cold *c);

/* One read of a segment for mqd_plog_read (owner thread). */
typedef struct cold_req {
    int fd, dfd;      /* the segment's buffered and O_DIRECT descriptors (dfd < 0: none) */
    uint64_t base;    /* the segment's base offset */
    uint64_t pos;     /* file position of the bytes wanted */
    size_t n;         /* how many */
    uint64_t seg_end; /* bytes of whole records in the segment */
    uint64_t dio_end; /* O_DIRECT reads stay below this (the tail: its synced bytes
                       * rounded down to DC_ALIGN; older segments: UINT64_MAX) */
} cold_req_t;
/* Gets the bytes q asks for from the page cache (into dst, if all there: RWF_NOWAIT) or
 * from the log's chain, starting one on a page-cache miss. *src is where they are: dst,
 * or for a read within one chunk the chunk itself, which *pin then holds (never freed
 * or reused until store_cold_unpin). Returns q->n, or 0 when the caller must pread
 * itself (past q->dio_end, no O_DIRECT or RWF_NOWAIT, too many logs, a read error; then
 * the chain is ended where it cannot serve). */
size_t store_cold_read(mqd_plog_t *log, const cold_req_t *q, uint8_t *dst, const uint8_t **src,
                       void **pin);
/* Lets go of a chunk store_cold_read handed out (owner thread; also after the
 * store closed: the chunk no longer belongs to it then). */
void store_cold_unpin(void *pin);
/* The bytes a pinned chunk holds (tests and fuzzing check that records lie in them). */
void store_cold_pin_span(const void *pin, const uint8_t **p, size_t *n);
/* Ends the log's chain: frees its buffers, drops a queued read and leaves a running one
 * to its thread, which frees the buffer when the read returns. Owner thread; also
 * before a truncation (the chunks may hold bytes about to be cut) and at log close. */
void store_cold_end(mqd_plog_t *log);

/* Counters of a store's cold reads (tests, diagnostics). */
typedef struct store_cold_stats {
    uint64_t sync_reads;  /* chunks the owner read itself (a chain start, a stolen read) */
    uint64_t ahead_reads; /* chunks a reader thread read ahead */
    uint64_t bytes;       /* bytes read with O_DIRECT by both */
    uint64_t waits;       /* times the owner waited for a read in flight */
    uint64_t chains;      /* chains started */
    uint64_t orphans;     /* reads that finished after their chain had ended */
} store_cold_stats_t;
void store_cold_stats(mqd_store_t *st, store_cold_stats_t *out);

/* The cold path's reads, for tests to count, fail or delay them (defaults: libc pread
 * and preadv2, a mincore probe). One table per store (its cold-read threads hold it),
 * so two stores in one process read with different faults. */
typedef struct store_cold_io {
    ssize_t (*pread)(int fd, void *buf, size_t n, off_t off); /* O_DIRECT chunks */
    ssize_t (*preadv2)(int fd, const struct iovec *iov, int cnt, off_t off, int flags);
    /* whether the page cache holds every page of [pos, pos + len) (mincore) */
    bool (*cached)(int fd, uint64_t pos, size_t len);
} store_cold_io_t;
/* Replaces st's table (NULL: the defaults). Before the store's first read or between
 * reads: the reader threads use it without a lock. */
void store_cold_set_io(mqd_store_t *st, const store_cold_io_t *io);
/* Copies st's table into *out (tests). */
void store_cold_get_io(mqd_store_t *st, store_cold_io_t *out);

/* ---- fdlru.c: a cap on open segment descriptors ----
 * Rules that make closing safe without a lock on every use of s->fd:
 *   - only the owner thread closes a descriptor of an open log, and reopens one (but a
 *     truncation: its flusher opens what it cuts, under log->mu);
 *   - a segment other than the tail: the flusher never touches it (rolls link the new
 *     tail under log->mu after their last use of the old one; while a truncation is
 *     asked, trunc_req, the owner closes none of the log's descriptors), so the owner
 *     closes it at will under log->mu;
 *   - the tail: only while the flusher has nothing of it to write or sync (st->mu held:
 *     not flushing, no queued or pending batch, no truncation, synced == size, no
 *     pre-zeroing), so every byte in it was fdatasync'd through that descriptor (or was
 *     covered by the recovery sync) and closing loses no durability; the owner reopens
 *     it before it hands the flusher a batch (mqd_plog_append).
 * Opening an existing file needs no directory fsync: it was made durable at creation. */
/* open(2) counted in st->fd_open (any thread). */
int store_fd_open(mqd_store_t *st, const char *path, int flags);
/* close(2) of a counted descriptor; fd < 0 is a no-op (any thread). */
void store_fd_close(mqd_store_t *st, int fd);
/* Owner, log->mu held: s->fd, opened first if closed (making room in the LRU).
 * A descriptor or MQD_EIO. */
int seg_fd_get(mqd_plog_t *log, seg_t *s);
/* Owner: log is in use now (to the head of the LRU); closes the least recently used
 * logs' descriptors while more than the cap are open (never log's own). */
void store_fd_touch(mqd_plog_t *log);
/* Owner, log->mu not held: closes the descriptors of log's segments other than the
 * tail and `keep`, and the tail's too when the flusher has nothing of it (rules above).
 * Returns how many it closed. */
size_t store_fd_release(mqd_plog_t *log, const seg_t *keep);
/* Owner: takes log off the LRU (it is being freed). */
void store_fd_forget(mqd_plog_t *log);
/* The cap: n, or 0 for the default (fdlru.c: from RLIMIT_NOFILE). */
size_t store_fd_default_cap(void);

/* ---- truncate.c ---- */
/* Flusher: serves a truncation request (log->trunc_req): cuts, syncs, checkpoints, and
 * for an asynchronous one files the log on st->tdone and wakes the owner. */
void store_do_truncate(mqd_plog_t *log);
/* Owner, from mqd_store_dispatch: ends log's asynchronous truncation (its end offset,
 * then the callback). */
void store_truncate_done(mqd_plog_t *log);

/* ---- truncate.c, reset.c ---- */
/* Owner: asks the flusher for a truncation to `offset` or (reset) a restart of the
 * emptied log at `offset`; async: the callback reports its end (truncate.c). */
int store_truncate_ask(mqd_plog_t *log, uint64_t offset, int async, int reset);
/* Flusher: replaces every segment by an empty one based at `start`, durably. */
int store_reset_segments(mqd_plog_t *log, uint64_t start);
/* Open: finishes a reset a crash cut short (its marker is there). 0 or MQD_E*. */
int store_reset_recover(mqd_plog_t *log);

/* ---- resume.c ---- */
/* Flusher: serves a resume request of a failed log (truncate to the durable offset, a
 * probe write + fdatasync, then the log takes appends again). */
void store_do_resume(mqd_plog_t *log);

/* ---- corrupt.c ---- */
/* Owner, from mqd_plog_read: the record at file position `pos` (offset `off`) of the
 * segment read through fd (whole records up to seg_end, offsets up to seg_next_off) failed
 * its checks. Finds the next intact record after it (*next_pos, *next_off; seg_end and
 * seg_next_off when none) and counts offsets [off, *next_off) as skipped, once each. */
int store_corrupt_skip(mqd_plog_t *log, int fd, uint64_t base, uint64_t pos, uint64_t off,
                       uint64_t seg_end, uint64_t seg_next_off, uint64_t *next_pos,
                       uint64_t *next_off);
void store_corrupt_free(mqd_plog_t *log);

/* ---- plog.c ---- */
int plog_open(mqd_store_t *st, const char *topic, uint32_t partition,
              const mqd_plog_config_t *cfg, mqd_plog_t **out);
void plog_free(mqd_plog_t *log);
/* Owner: makes room for `more` bytes in log's pending batch (started at log->end, put
 * on the store's pending list). 0 or MQD_ENOMEM. */
int plog_batch_reserve(mqd_plog_t *log, size_t more);
/* Owner, log->mu held: s's descriptor for a read; opening an older segment closes the
 * log's other older ones. A descriptor or MQD_EIO. */
int plog_read_fd(mqd_plog_t *log, seg_t *s);
/* The segment holding `from` (the last one whose base is not above it) with a read
 * descriptor in *fd (log->mu held): MQD_ERANGE before the first segment, MQD_EIO. Both
 * the decoding read and the raw read start here. */
int plog_locate_seg(mqd_plog_t *log, uint64_t from, seg_t **sp, int *fd);

#endif
