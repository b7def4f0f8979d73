/* Raw records for replication (raw.c) and the asynchronous truncation (truncate.c):
 * a leader log read raw in chunks of several sizes and appended raw to a follower log in
 * a second store gives the same offsets, timestamps, epochs and bodies byte for byte;
 * damaged or out-of-sequence chunks are refused whole; a truncation on the flusher is
 * durable (cut, unlinks, directory fsync) before its callback runs. Real files, fsync. */
#include "config.h"
#include "store/store.h"
#include "store/store_int.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "store_test.h"

#define SEED 0x5eedu
#define MAXLEN 2000u /* payloads of 0..2000 bytes: many records per 16 KiB segment */
#define NREC 600u
#define TS0 1700000000000ll

typedef struct fx {
    char *ldir, *fdir;
    mqd_store_t *lst, *fst; /* leader and follower stores, one process */
    mqd_plog_t *lead;
    mqd_plog_config_t cfg;
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    f->ldir = tmpdir_in("/tmp");
    f->fdir = tmpdir_in("/tmp");
    mqd_plog_config_default(&f->cfg);
    f->cfg.segment_bytes = 16 << 10;
    f->cfg.index_interval_bytes = 512;
    assert_int_equal(mqd_store_open(f->ldir, NULL, NULL, &f->lst), 0);
    assert_int_equal(mqd_store_open(f->fdir, NULL, NULL, &f->fst), 0);
    assert_int_equal(mqd_store_log_open(f->lst, "t", 0, &f->cfg, &f->lead), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    mqd_store_close(f->lst);
    mqd_store_close(f->fst);
    rm_rf(f->ldir);
    rm_rf(f->fdir);
    free(f->ldir);
    free(f->fdir);
    free(f);
    return 0;
}

/* NREC records: epoch 3 for the first half, 5 after; timestamps TS0 + 7 * offset. */
static void fill_leader(fx_t *f)
{
    mqd_plog_set_epoch(f->lead, 3);
    assert_int_equal(append_n(f->lst, f->lead, NREC / 2, 25, SEED, MAXLEN, TS0, 7), 0);
    mqd_plog_set_epoch(f->lead, 5);
    assert_int_equal(append_n(f->lst, f->lead, NREC / 2, 25, SEED, MAXLEN, TS0, 7), 0);
    assert_int_equal(mqd_plog_wait_stable(f->lead, NREC), 0);
}

/* The record at `off` read the ordinary way (one record). */
static void read_one(mqd_plog_t *log, uint64_t off, mqd_read_t *r)
{
    assert_int_equal(mqd_plog_read(log, off, off + 1, 1, 1, r), 0);
    assert_int_equal(r->n, 1);
    assert_int_equal(r->recs[0].offset, off);
}

/* Checks that buf[0..len) holds exactly the whole records [from, next) of log, each equal
 * field by field to its ordinary read. Returns how many. */
static uint64_t check_chunk(mqd_plog_t *log, const uint8_t *buf, size_t len, uint64_t from,
                            uint64_t next)
{
    mqd_read_t r;
    mqd_read_init(&r);
    size_t pos = 0;
    uint64_t want = from;
    mqd_raw_rec_t rr;
    int rc;
    while ((rc = mqd_store_raw_next(buf, len, &pos, &rr)) == 1) {
        assert_int_equal(rr.offset, want);
        assert_int_equal(rr.size, MQD_STORE_RAW_HDR + rr.len);
        assert_int_equal(rr.crc, mqd_crc32c(0, rr.data - MQD_STORE_RAW_HDR + 8, rr.size - 8));
        read_one(log, want, &r);
        const mqd_rec_t *o = &r.recs[0];
        assert_int_equal(rr.timestamp_ms, o->timestamp_ms);
        assert_int_equal(rr.timestamp_ms, TS0 + 7 * (int64_t)want);
        assert_int_equal(rr.epoch, o->epoch);
        assert_int_equal(rr.epoch, want < NREC / 2 ? 3 : 5);
        assert_int_equal(rr.flags, o->flags);
        assert_int_equal(rr.txn, o->txn);
        assert_int_equal(rr.len, o->len);
        assert_memory_equal(rr.data, o->data, rr.len);
        want++;
    }
    assert_int_equal(rc, 0); /* ended exactly at len: no partial record */
    assert_int_equal(pos, len);
    assert_int_equal(want, next);
    mqd_read_free(&r);
    return want - from;
}

/* Base offsets of log's segments, ascending (at most cap). */
static size_t seg_bases(mqd_plog_t *log, uint64_t *out, size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&log->mu);
    for (seg_t *s = log->head; s && n < cap; s = s->next)
        out[n++] = s->base;
    pthread_mutex_unlock(&log->mu);
    return n;
}

/* Whether [from, next) spans more than one of the segments starting at bases[0..n). */
static int spans(const uint64_t *bases, size_t n, uint64_t from, uint64_t next)
{
    for (size_t i = 1; i < n; i++)
        if (from < bases[i] && next > bases[i])
            return 1;
    return 0;
}

/* Every record of `a` equals the one at the same offset of `b` (offset, timestamp,
 * epoch, flags, txn, body). */
static void compare_logs(mqd_plog_t *a, mqd_plog_t *b, uint64_t n)
{
    assert_int_equal(mqd_plog_end_offset(a), n);
    assert_int_equal(mqd_plog_end_offset(b), n);
    mqd_read_t ra, rb;
    mqd_read_init(&ra);
    mqd_read_init(&rb);
    for (uint64_t off = 0; off < n; off++) {
        read_one(a, off, &ra);
        read_one(b, off, &rb);
        const mqd_rec_t *x = &ra.recs[0], *y = &rb.recs[0];
        assert_int_equal(x->timestamp_ms, y->timestamp_ms);
        assert_int_equal(x->epoch, y->epoch);
        assert_int_equal(x->flags, y->flags);
        assert_int_equal(x->txn, y->txn);
        assert_int_equal(x->len, y->len);
        assert_memory_equal(x->data, y->data, x->len);
        assert_true(pay_check(y, SEED, MAXLEN));
    }
    mqd_read_free(&ra);
    mqd_read_free(&rb);
}

/* Reads all of log raw with buffers of `cap` bytes into one malloc'd copy (*len). */
static uint8_t *read_all_raw(mqd_plog_t *log, size_t cap, size_t *len)
{
    size_t total = 0, room = 1 << 20;
    uint8_t *all = malloc(room), *buf = malloc(cap);
    uint64_t from = 0, next;
    for (int guard = 0; guard < 100000; guard++) {
        size_t n;
        assert_int_equal(mqd_plog_read_raw(log, from, buf, cap, &n, &next), 0);
        if (n == 0)
            break;
        while (total + n > room)
            all = realloc(all, room *= 2);
        memcpy(all + total, buf, n);
        total += n;
        from = next;
    }
    free(buf);
    *len = total;
    return all;
}

/* Chunks of 64 B (smaller than nearly every record), 1000 B, 4 KiB, 64 KiB and 1 MiB:
 * each returns whole records only, a record too big for the buffer is MQD_ETOOBIG with
 * its size (then exactly it, alone), chunks cross segment boundaries, and each follower
 * fed by raw appends equals the leader. */
static void test_raw_chunks_to_follower(void **state)
{
    fx_t *f = *state;
    fill_leader(f);
    uint64_t bases[256] = {0};
    size_t nseg = seg_bases(f->lead, bases, 256);
    assert_true(nseg >= 20); /* ~600 KB in 16 KiB segments */
    static const size_t caps[] = {64, 1000, 4096, 64 << 10, 1 << 20};
    size_t whole_len;
    uint8_t *whole = read_all_raw(f->lead, 1 << 20, &whole_len);
    assert_int_equal(whole_len, mqd_plog_size_bytes(f->lead));
    for (size_t ci = 0; ci < MQD_ARRAY_LEN(caps); ci++) {
        size_t cap = caps[ci];
        mqd_plog_t *fol;
        assert_int_equal(mqd_store_log_open(f->fst, "t", (uint32_t)ci, &f->cfg, &fol), 0);
        uint8_t *buf = malloc(cap), *big = malloc(MQD_STORE_RAW_HDR + MAXLEN);
        uint64_t from = 0, chunks = 0, toobig = 0, crossing = 0, maxrecs = 0;
        while (from < NREC) {
            size_t len;
            uint64_t next;
            int rc = mqd_plog_read_raw(f->lead, from, buf, cap, &len, &next);
            const uint8_t *got = buf;
            if (rc == MQD_ETOOBIG) {
                /* the record at `from` alone: its whole size, more than cap */
                assert_true(len > cap);
                assert_int_equal(len, MQD_STORE_RAW_HDR + pay_len(from, SEED, MAXLEN));
                size_t need = len;
                toobig++;
                assert_int_equal(mqd_plog_read_raw(f->lead, from, big, need, &len, &next), 0);
                assert_int_equal(len, need);
                assert_int_equal(next, from + 1);
                got = big;
            } else {
                assert_int_equal(rc, 0);
                assert_true(len > 0 && len <= cap);
            }
            uint64_t k = check_chunk(f->lead, got, len, from, next);
            maxrecs = k > maxrecs ? k : maxrecs;
            crossing += spans(bases, nseg, from, next);
            uint64_t first;
            assert_int_equal(mqd_plog_append_raw(fol, got, len, &first), 0);
            assert_int_equal(first, from);
            assert_int_equal(mqd_plog_end_offset(fol), next);
            if (++chunks % 16 == 0)
                mqd_store_commit(f->fst);
            from = next;
        }
        assert_int_equal(mqd_plog_wait_stable(fol, NREC), 0);
        if (cap == 64) {
            uint64_t over = 0; /* records of more than 64 bytes (header 40 + data) */
            for (uint64_t o = 0; o < NREC; o++)
                over += MQD_STORE_RAW_HDR + pay_len(o, SEED, MAXLEN) > 64;
            assert_true(over > NREC * 9 / 10);
            assert_int_equal(toobig, over); /* each alone, once; the rest fit */
        }
        if (cap >= 64 << 10) {
            assert_true(crossing > 0); /* one read reaches into the next segment */
            assert_true(maxrecs > 30);
        }
        if (cap == 1 << 20)
            assert_true(chunks <= 2);
        print_message("cap %zu: %" PRIu64 " chunks, %" PRIu64 " too big, %" PRIu64
                      " across segments, max %" PRIu64 " records\n",
                      cap, chunks, toobig, crossing, maxrecs);
        compare_logs(f->lead, fol, NREC);
        size_t flen;
        uint8_t *fwhole = read_all_raw(fol, 1 << 20, &flen);
        assert_int_equal(flen, whole_len);
        assert_memory_equal(fwhole, whole, whole_len); /* byte for byte the leader's */
        free(fwhole);
        free(buf);
        free(big);
    }
    free(whole);
}

/* Never past the stable offset: appended but uncommitted records are not returned. */
static void test_raw_stops_at_stable(void **state)
{
    fx_t *f = *state;
    assert_int_equal(append_n(f->lst, f->lead, 5, 5, SEED, 100, TS0, 7), 0);
    assert_int_equal(mqd_plog_wait_stable(f->lead, 5), 0);
    mqd_rec_in_t in[5];
    uint8_t body[5][100];
    for (unsigned i = 0; i < 5; i++) {
        in[i] = (mqd_rec_in_t){body[i], pay_len(5 + i, SEED, 100), TS0 + 7 * (5 + i), 0, 5 + i};
        pay_fill(body[i], in[i].len, 5 + i, SEED);
    }
    uint64_t first;
    assert_int_equal(mqd_plog_append(f->lead, in, 5, &first), 0); /* not committed */
    assert_int_equal(mqd_plog_stable_offset(f->lead), 5);
    uint8_t buf[8192];
    size_t len;
    uint64_t next;
    assert_int_equal(mqd_plog_read_raw(f->lead, 0, buf, sizeof buf, &len, &next), 0);
    assert_int_equal(next, 5);
    size_t pos = 0, n = 0;
    mqd_raw_rec_t r;
    while (mqd_store_raw_next(buf, len, &pos, &r) == 1)
        n++;
    assert_int_equal(n, 5);
    assert_int_equal(mqd_plog_read_raw(f->lead, 5, buf, sizeof buf, &len, &next), 0);
    assert_int_equal(len, 0);
    assert_int_equal(next, 5);
    assert_int_equal(mqd_plog_wait_stable(f->lead, 10), 0);
    assert_int_equal(mqd_plog_read_raw(f->lead, 5, buf, sizeof buf, &len, &next), 0);
    assert_int_equal(next, 10);
    assert_int_equal(mqd_plog_read_raw(f->lead, 10, buf, sizeof buf, &len, &next), 0);
    assert_int_equal(len, 0);
    assert_int_equal(mqd_plog_read_raw(f->lead, 3, buf, 0, &len, &next), MQD_ETOOBIG);
    assert_int_equal(len, MQD_STORE_RAW_HDR + pay_len(3, SEED, 100)); /* what would fit it */
}

/* The follower refuses, whole, a chunk with one flipped byte (payload, CRC, offset,
 * length), a partial record, a chunk that does not start at its end offset, and one
 * with a gap; then takes the intact chunk. */
static void test_append_raw_refuses_bad(void **state)
{
    fx_t *f = *state;
    assert_int_equal(append_n(f->lst, f->lead, 8, 8, SEED, 300, TS0, 7), 0);
    assert_int_equal(mqd_plog_wait_stable(f->lead, 8), 0);
    uint8_t buf[8192], bad[8192];
    size_t len;
    uint64_t next;
    assert_int_equal(mqd_plog_read_raw(f->lead, 0, buf, sizeof buf, &len, &next), 0);
    assert_int_equal(next, 8);
    /* the start of each record */
    size_t at[9], pos = 0;
    mqd_raw_rec_t r;
    for (int i = 0; i < 8; i++) {
        at[i] = pos;
        assert_int_equal(mqd_store_raw_next(buf, len, &pos, &r), 1);
    }
    at[8] = pos;
    mqd_plog_t *fol;
    assert_int_equal(mqd_store_log_open(f->fst, "t", 0, &f->cfg, &fol), 0);
    uint64_t first = 777;
    const size_t flips[] = {at[2] + MQD_STORE_RAW_HDR, /* payload of record 2 */
                            at[3] + 4,                 /* its CRC */
                            at[4] + 8,                 /* its offset */
                            at[5] + 24,                /* its epoch */
                            at[7] + 0};                /* the last one's length */
    for (size_t i = 0; i < MQD_ARRAY_LEN(flips); i++) {
        memcpy(bad, buf, len);
        bad[flips[i]] ^= 0x01;
        assert_int_equal(mqd_plog_append_raw(fol, bad, len, &first), MQD_ECORRUPT);
        pos = 0;
        int rc;
        while ((rc = mqd_store_raw_next(bad, len, &pos, &r)) == 1)
            ;
        assert_int_equal(rc, MQD_ECORRUPT); /* the parser says so as well */
    }
    assert_int_equal(mqd_plog_append_raw(fol, buf, len - 1, &first), MQD_ECORRUPT);
    assert_int_equal(mqd_plog_append_raw(fol, buf, MQD_STORE_RAW_HDR - 1, &first),
                     MQD_ECORRUPT);
    /* records 3.. into an empty log: not the next offset */
    assert_int_equal(mqd_plog_append_raw(fol, buf + at[3], len - at[3], &first), MQD_ERANGE);
    /* records 0, 1, 3: a gap */
    memcpy(bad, buf, at[2]);
    memcpy(bad + at[2], buf + at[3], at[4] - at[3]);
    assert_int_equal(mqd_plog_append_raw(fol, bad, at[2] + at[4] - at[3], &first), MQD_ERANGE);
    assert_int_equal(first, 777); /* out-parameter untouched on failure */
    assert_int_equal(mqd_plog_end_offset(fol), 0);
    mqd_store_commit(f->fst);
    assert_int_equal(mqd_plog_read_raw(fol, 0, bad, sizeof bad, &pos, &next), 0);
    assert_int_equal(pos, 0); /* nothing of the refused chunks was written */
    /* empty input: nothing, no error */
    assert_int_equal(mqd_plog_append_raw(fol, buf, 0, &first), 0);
    assert_int_equal(first, 0);
    /* the intact chunk in two pieces */
    assert_int_equal(mqd_plog_append_raw(fol, buf, at[5], &first), 0);
    assert_int_equal(first, 0);
    assert_int_equal(mqd_plog_append_raw(fol, buf + at[5], len - at[5], &first), 0);
    assert_int_equal(first, 5);
    assert_int_equal(mqd_plog_wait_stable(fol, 8), 0);
    assert_int_equal(read_check(fol, 0, UINT64_MAX, SEED, 300, 100, 1 << 20), 8);
    /* a repeat of what it has is out of sequence too */
    assert_int_equal(mqd_plog_append_raw(fol, buf, at[1], &first), MQD_ERANGE);
    assert_int_equal(mqd_plog_end_offset(fol), 8);
}

/* After a cold reopen (recovery from the files), raw reads give the same bytes, and
 * from an offset inside a segment (not an index entry) they start exactly there. */
static void test_raw_after_reopen(void **state)
{
    fx_t *f = *state;
    fill_leader(f);
    size_t len0;
    uint8_t *before = read_all_raw(f->lead, 4096, &len0);
    mqd_store_close(f->lst);
    assert_int_equal(mqd_store_open(f->ldir, NULL, NULL, &f->lst), 0);
    assert_int_equal(mqd_store_log_open(f->lst, "t", 0, &f->cfg, &f->lead), 0);
    assert_int_equal(mqd_plog_end_offset(f->lead), NREC);
    size_t len1;
    uint8_t *after = read_all_raw(f->lead, 64 << 10, &len1);
    assert_int_equal(len1, len0);
    assert_memory_equal(after, before, len0);
    uint8_t buf[16384];
    for (uint64_t from = 1; from < NREC; from += 37) {
        size_t len;
        uint64_t next;
        assert_int_equal(mqd_plog_read_raw(f->lead, from, buf, sizeof buf, &len, &next), 0);
        assert_true(next > from);
        check_chunk(f->lead, buf, len, from, next);
    }
    size_t len;
    uint64_t next;
    assert_int_equal(mqd_plog_read_raw(f->lead, NREC, buf, sizeof buf, &len, &next), 0);
    assert_int_equal(len, 0);
    assert_int_equal(next, NREC);
    free(before);
    free(after);
}

/* A record damaged on the leader's disk is never shipped: a read returns the intact
 * records before it, a read from it is MQD_ECORRUPT. */
static void test_raw_refuses_damage_on_disk(void **state)
{
    fx_t *f = *state;
    mqd_plog_set_epoch(f->lead, 3); /* what check_chunk expects below NREC / 2 */
    assert_int_equal(append_n(f->lst, f->lead, 10, 10, SEED, 300, TS0, 7), 0);
    assert_int_equal(mqd_plog_wait_stable(f->lead, 10), 0);
    uint8_t buf[8192];
    size_t len, pos = 0, at5 = 0;
    uint64_t next;
    assert_int_equal(mqd_plog_read_raw(f->lead, 0, buf, sizeof buf, &len, &next), 0);
    assert_int_equal(next, 10);
    mqd_raw_rec_t r;
    for (int i = 0; i < 5; i++)
        assert_int_equal(mqd_store_raw_next(buf, len, &pos, &r), 1);
    at5 = pos;
    assert_int_equal(mqd_store_raw_next(buf, len, &pos, &r), 1);
    assert_true(r.len > 0);
    mqd_store_close(f->lst);
    char p[700];
    snprintf(p, sizeof p, "%s/topics/t/0/%020d.log", f->ldir, 0);
    int fd = open(p, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    off_t where = (off_t)(at5 + MQD_STORE_RAW_HDR); /* record 5's first payload byte */
    assert_int_equal(pread(fd, &b, 1, where), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, where), 1);
    assert_int_equal(fsync(fd), 0);
    close(fd);
    assert_int_equal(mqd_store_open(f->ldir, NULL, NULL, &f->lst), 0);
    assert_int_equal(mqd_store_log_open(f->lst, "t", 0, &f->cfg, &f->lead), 0);
    assert_int_equal(mqd_plog_end_offset(f->lead), 10); /* a clean close: no rescan */
    assert_int_equal(mqd_plog_read_raw(f->lead, 0, buf, sizeof buf, &len, &next), 0);
    assert_int_equal(next, 5);
    assert_int_equal(len, at5);
    check_chunk(f->lead, buf, len, 0, 5);
    assert_int_equal(mqd_plog_read_raw(f->lead, 5, buf, sizeof buf, &len, &next), MQD_ECORRUPT);
    assert_int_equal(mqd_plog_read_raw(f->lead, 6, buf, sizeof buf, &len, &next), 0);
    assert_int_equal(next, 10); /* after the damage, intact again */
}

/* ---- asynchronous truncation ---- */

static struct {
    char dir[600];          /* the partition directory */
    uint64_t later[256];    /* bases of the segments the truncation deletes */
    size_t nlater;
    int armed;
    int fsyncs, ftruncs, datasyncs;
    int fsync_saw_files;    /* a directory fsync ran while a deleted segment still existed */
    int fsync_after_unlink; /* a directory fsync ran after every deleted segment was gone */
} tio;

static int later_exist(void)
{
    int n = 0;
    for (size_t i = 0; i < tio.nlater; i++) {
        char p[700];
        snprintf(p, sizeof p, "%s/%020" PRIu64 ".log", tio.dir, tio.later[i]);
        n += access(p, F_OK) == 0;
    }
    return n;
}

static int t_fsync(int fd)
{
    if (__atomic_load_n(&tio.armed, __ATOMIC_ACQUIRE)) {
        __atomic_add_fetch(&tio.fsyncs, 1, __ATOMIC_RELAXED);
        if (later_exist())
            __atomic_store_n(&tio.fsync_saw_files, 1, __ATOMIC_RELAXED);
        else
            __atomic_store_n(&tio.fsync_after_unlink, 1, __ATOMIC_RELAXED);
    }
    return fsync(fd);
}

static int t_ftruncate(int fd, off_t len)
{
    if (__atomic_load_n(&tio.armed, __ATOMIC_ACQUIRE))
        __atomic_add_fetch(&tio.ftruncs, 1, __ATOMIC_RELAXED);
    return ftruncate(fd, len);
}

static int t_fdatasync(int fd)
{
    if (__atomic_load_n(&tio.armed, __ATOMIC_ACQUIRE))
        __atomic_add_fetch(&tio.datasyncs, 1, __ATOMIC_RELAXED);
    return fdatasync(fd);
}

typedef struct tres {
    int calls, rc;
    uint64_t end;
    int fsyncs_then; /* directory fsyncs counted when the callback ran */
    int later_then;  /* deleted segments' files still there when it ran */
} tres_t;

static void on_truncated(mqd_plog_t *log, uint64_t end, int rc, void *arg)
{
    tres_t *t = arg;
    assert_false(mqd_plog_truncating(log));
    t->calls++;
    t->rc = rc;
    t->end = end;
    t->fsyncs_then = __atomic_load_n(&tio.fsyncs, __ATOMIC_RELAXED);
    t->later_then = later_exist();
}

static int slow_factor(void)
{
    const char *s = getenv("MQD_TEST_SLOW");
    int k = s ? atoi(s) : 1;
    return k < 1 ? 1 : k;
}

/* Truncates a multi-segment log to an offset inside an earlier segment on the flusher:
 * the call returns at once, the log refuses appends and reads meanwhile, the callback
 * comes through mqd_store_dispatch after the cut, the unlinks and a directory fsync
 * (seen by the store's I/O table), reads end at the offset, appends continue from it and
 * a reopen sees the same. */
static void test_truncate_async(void **state)
{
    fx_t *f = *state;
    f->cfg.segment_bytes = 8 << 10;
    mqd_plog_set_config(f->lead, &f->cfg);
    assert_int_equal(append_n(f->lst, f->lead, 300, 10, SEED, 600, TS0, 7), 0);
    assert_int_equal(mqd_plog_wait_stable(f->lead, 300), 0);
    uint64_t bases[256] = {0};
    size_t nseg = seg_bases(f->lead, bases, 256);
    assert_true(nseg >= 8);
    size_t k = nseg / 3; /* cut inside segment k: every later one goes */
    uint64_t cut = bases[k] + (bases[k + 1] - bases[k]) / 2;
    assert_true(cut > bases[k] && cut < bases[k + 1]);
    snprintf(tio.dir, sizeof tio.dir, "%s/topics/t/0", f->ldir);
    tio.nlater = 0;
    for (size_t i = k + 1; i < nseg; i++)
        tio.later[tio.nlater++] = bases[i];
    assert_int_equal(later_exist(), (int)tio.nlater);
    assert_int_equal(count_files(tio.dir, "log"), (int)nseg);

    mqd_store_io_t io;
    mqd_store_io_default(&io);
    io.fsync = t_fsync;
    io.ftruncate = t_ftruncate;
    io.fdatasync = t_fdatasync;
    mqd_store_set_io(f->lst, &io); /* the flusher is idle: all 300 are stable */
    __atomic_store_n(&tio.armed, 1, __ATOMIC_RELEASE);
    tres_t res = {0};
    assert_int_equal(mqd_plog_truncate_start(f->lead, 300 + 1, on_truncated, &res), MQD_ERANGE);
    assert_int_equal(mqd_plog_truncate_start(f->lead, cut, on_truncated, &res), 0);
    /* meanwhile: refused, not blocked */
    assert_true(mqd_plog_truncating(f->lead));
    assert_int_equal(mqd_plog_truncate_start(f->lead, cut, on_truncated, &res), MQD_EAGAIN);
    assert_int_equal(mqd_plog_truncate_to(f->lead, cut), MQD_EAGAIN);
    mqd_rec_in_t in = {"y", 1, 0, 0, 0};
    uint64_t off;
    assert_int_equal(mqd_plog_append(f->lead, &in, 1, &off), MQD_EAGAIN);
    mqd_read_t r;
    mqd_read_init(&r);
    assert_int_equal(mqd_plog_read(f->lead, 0, UINT64_MAX, 10, 1 << 20, &r), MQD_EAGAIN);
    uint8_t buf[4096];
    size_t len;
    uint64_t next;
    assert_int_equal(mqd_plog_read_raw(f->lead, 0, buf, sizeof buf, &len, &next), MQD_EAGAIN);
    assert_int_equal(mqd_plog_retain(f->lead, UINT64_MAX, mqd_now_ms()), 0);
    mqd_read_free(&r);

    int64_t deadline = mqd_now_ms() + 30000 * slow_factor();
    while (res.calls == 0 && mqd_now_ms() < deadline) {
        mqd_store_dispatch(f->lst);
        if (res.calls == 0)
            usleep(1000);
    }
    __atomic_store_n(&tio.armed, 0, __ATOMIC_RELEASE);
    print_message("cut at %" PRIu64 " (segment %zu of %zu): %d fsync, %d ftruncate, "
                  "%d fdatasync before the callback\n", cut, k, nseg, res.fsyncs_then,
                  tio.ftruncs, tio.datasyncs);
    assert_int_equal(res.calls, 1);
    assert_int_equal(res.rc, 0);
    assert_int_equal(res.end, cut);
    assert_int_equal(res.later_then, 0);      /* later segments gone before it ran */
    assert_true(res.fsyncs_then >= 1);        /* a directory fsync before it ran */
    assert_int_equal(tio.fsync_after_unlink, 1); /* ... after the unlinks */
    assert_true(tio.ftruncs >= 1);            /* segment k cut */
    assert_true(tio.datasyncs >= 1);          /* and synced */
    assert_false(mqd_plog_truncating(f->lead));
    assert_false(mqd_plog_failed(f->lead));
    assert_int_equal(count_files(tio.dir, "log"), (int)k + 1);
    assert_int_equal(count_files(tio.dir, "idx"), (int)k + 1);
    assert_int_equal(later_exist(), 0);
    assert_int_equal(mqd_plog_end_offset(f->lead), cut);
    assert_int_equal(mqd_plog_stable_offset(f->lead), cut);
    assert_int_equal(mqd_plog_durable_offset(f->lead), cut);
    assert_int_equal(read_check(f->lead, 0, UINT64_MAX, SEED, 600, 100, 1 << 20), (long)cut);
    assert_int_equal(mqd_plog_read_raw(f->lead, cut, buf, sizeof buf, &len, &next), 0);
    assert_int_equal(len, 0);
    mqd_store_dispatch(f->lst);
    assert_int_equal(res.calls, 1); /* exactly once */

    /* appends continue at the cut, across new segments */
    assert_int_equal(append_n(f->lst, f->lead, 40, 10, SEED, 600, TS0, 7), 0);
    assert_int_equal(mqd_plog_wait_stable(f->lead, cut + 40), 0);
    assert_int_equal(read_check(f->lead, 0, UINT64_MAX, SEED, 600, 100, 1 << 20),
                     (long)(cut + 40));
    mqd_store_close(f->lst);
    assert_int_equal(mqd_store_open(f->ldir, NULL, NULL, &f->lst), 0);
    assert_int_equal(mqd_store_log_open(f->lst, "t", 0, &f->cfg, &f->lead), 0);
    assert_false(mqd_plog_unhealthy(f->lead));
    assert_int_equal(mqd_plog_end_offset(f->lead), cut + 40);
    assert_int_equal(read_check(f->lead, 0, UINT64_MAX, SEED, 600, 100, 1 << 20),
                     (long)(cut + 40));
    mqd_read_init(&r);
    assert_int_equal(mqd_plog_read(f->lead, cut, cut + 1, 1, 1 << 20, &r), 0);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.recs[0].offset, cut);
    assert_int_equal(r.recs[0].timestamp_ms, TS0 + 7 * (int64_t)cut); /* the new record */
    mqd_read_free(&r);
}

/* Truncating everything (to the first offset) and truncating to the end offset also
 * complete through the callback; the synchronous truncate_to still works after one. */
static void test_truncate_async_edges(void **state)
{
    fx_t *f = *state;
    f->cfg.segment_bytes = 8 << 10;
    mqd_plog_set_config(f->lead, &f->cfg);
    assert_int_equal(append_n(f->lst, f->lead, 100, 10, SEED, 600, TS0, 7), 0);
    assert_int_equal(mqd_plog_wait_stable(f->lead, 100), 0);
    tres_t res = {0};
    assert_int_equal(mqd_plog_truncate_start(f->lead, 100, on_truncated, &res), 0);
    int64_t deadline = mqd_now_ms() + 30000 * slow_factor();
    while (res.calls == 0 && mqd_now_ms() < deadline) {
        mqd_store_dispatch(f->lst);
        usleep(1000);
    }
    assert_int_equal(res.calls, 1);
    assert_int_equal(res.end, 100);
    assert_int_equal(read_check(f->lead, 0, UINT64_MAX, SEED, 600, 100, 1 << 20), 100);
    res = (tres_t){0};
    assert_int_equal(mqd_plog_truncate_start(f->lead, 0, on_truncated, &res), 0);
    deadline = mqd_now_ms() + 30000 * slow_factor();
    while (res.calls == 0 && mqd_now_ms() < deadline) {
        mqd_store_dispatch(f->lst);
        usleep(1000);
    }
    assert_int_equal(res.calls, 1);
    assert_int_equal(res.rc, 0);
    assert_int_equal(res.end, 0);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/topics/t/0", f->ldir);
    assert_int_equal(count_files(dir, "log"), 1);
    assert_int_equal(mqd_plog_end_offset(f->lead), 0);
    assert_int_equal(append_n(f->lst, f->lead, 30, 10, SEED, 600, TS0, 7), 0);
    assert_int_equal(mqd_plog_wait_stable(f->lead, 30), 0);
    assert_int_equal(mqd_plog_truncate_to(f->lead, 12), 0);
    assert_int_equal(mqd_plog_end_offset(f->lead), 12);
    assert_int_equal(read_check(f->lead, 0, UINT64_MAX, SEED, 600, 100, 1 << 20), 12);
}

/* The flusher's first cut of a gated truncation waits here until the test opens it. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int armed, entered, open;
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};

static int gated_ftruncate(int fd, off_t len)
{
    pthread_mutex_lock(&gate.mu);
    if (gate.armed && !gate.entered) {
        gate.entered = 1;
        pthread_cond_broadcast(&gate.cv);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 60 * slow_factor(); /* never hangs the suite */
        while (!gate.open && pthread_cond_timedwait(&gate.cv, &gate.mu, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&gate.mu);
    return ftruncate(fd, len);
}

/* Opens the gate 300 ms from now (a thread of its own). */
static void *open_gate_later(void *arg)
{
    (void)arg;
    usleep(300 * 1000);
    pthread_mutex_lock(&gate.mu);
    gate.open = 1;
    gate.armed = 0;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    return NULL;
}

/* The owner does not wait for the disk: with the flusher held inside the truncation's
 * cut, truncate_start has returned, another log (another flusher) takes appends and makes
 * them stable, and no callback runs; once the cut goes on, the callback comes. */
static void test_truncate_async_does_not_block(void **state)
{
    fx_t *f = *state;
    f->cfg.segment_bytes = 8 << 10;
    mqd_plog_set_config(f->lead, &f->cfg);
    mqd_plog_t *other;
    assert_int_equal(mqd_store_log_open(f->lst, "o", 0, &f->cfg, &other), 0);
    assert_ptr_not_equal(other->fl, f->lead->fl); /* round robin: its own flusher */
    assert_int_equal(append_n(f->lst, f->lead, 100, 10, SEED, 600, TS0, 7), 0);
    assert_int_equal(mqd_plog_wait_stable(f->lead, 100), 0);
    mqd_store_io_t io;
    mqd_store_io_default(&io);
    io.ftruncate = gated_ftruncate;
    mqd_store_set_io(f->lst, &io);
    pthread_mutex_lock(&gate.mu);
    gate.armed = 1;
    gate.entered = gate.open = 0;
    pthread_mutex_unlock(&gate.mu);

    tres_t res = {0};
    int64_t t0 = mqd_now_ms();
    assert_int_equal(mqd_plog_truncate_start(f->lead, 50, on_truncated, &res), 0);
    int64_t took = mqd_now_ms() - t0;
    pthread_mutex_lock(&gate.mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30 * slow_factor();
    while (!gate.entered && pthread_cond_timedwait(&gate.cv, &gate.mu, &until) == 0)
        ;
    int entered = gate.entered;
    pthread_mutex_unlock(&gate.mu);
    assert_int_equal(entered, 1); /* the flusher is inside the cut, held */
    assert_int_equal(append_n(f->lst, other, 20, 5, SEED, 600, TS0, 7), 0);
    assert_int_equal(mqd_plog_wait_stable(other, 20), 0);
    mqd_store_dispatch(f->lst);
    assert_int_equal(res.calls, 0);
    assert_true(mqd_plog_truncating(f->lead));
    assert_int_equal(mqd_plog_end_offset(f->lead), 100);
    int64_t held = mqd_now_ms() - t0;
    print_message("truncate_start returned in %" PRId64 " ms; another log committed 20 "
                  "records while the cut was held (%" PRId64 " ms)\n", took, held);
    assert_true(took < 1000 * slow_factor());

    pthread_mutex_lock(&gate.mu);
    gate.open = 1;
    gate.armed = 0;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    int64_t deadline = mqd_now_ms() + 30000 * slow_factor();
    while (res.calls == 0 && mqd_now_ms() < deadline) {
        mqd_store_dispatch(f->lst);
        usleep(1000);
    }
    assert_int_equal(res.calls, 1);
    assert_int_equal(res.rc, 0);
    assert_int_equal(res.end, 50);
    assert_int_equal(read_check(f->lead, 0, UINT64_MAX, SEED, 600, 100, 1 << 20), 50);
    assert_int_equal(read_check(other, 0, UINT64_MAX, SEED, 600, 100, 1 << 20), 20);

    /* The synchronous one, by contrast, holds its caller for as long as the cut takes. */
    pthread_mutex_lock(&gate.mu);
    gate.armed = 1;
    gate.entered = gate.open = 0;
    pthread_mutex_unlock(&gate.mu);
    pthread_t opener;
    assert_int_equal(pthread_create(&opener, NULL, open_gate_later, NULL), 0);
    t0 = mqd_now_ms();
    assert_int_equal(mqd_plog_truncate_to(f->lead, 30), 0);
    took = mqd_now_ms() - t0;
    pthread_join(opener, NULL);
    print_message("truncate_to held its caller %" PRId64 " ms\n", took);
    assert_true(took >= 250);
    assert_int_equal(mqd_plog_end_offset(f->lead), 30);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_raw_chunks_to_follower, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_stops_at_stable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_raw_refuses_bad, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_after_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_refuses_damage_on_disk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncate_async, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncate_async_edges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncate_async_does_not_block, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
