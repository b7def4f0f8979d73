/* Segments: files, sparse indexes, record scanning, crash recovery and checkpoints.
 *
 * Recovery trusts nothing it can cheaply check. The last segment is scanned record by
 * record from the recovery checkpoint (a position the flusher knew durable) to EOF and
 * cut at the first short / bad-CRC / out-of-sequence record. Older segments were
 * fdatasync'd (with their indexes) when they rolled, so only their index tail is
 * verified; a bad index means a full scan, and damage found there marks the log
 * unhealthy instead of being cut, because data after it was acknowledged.
 */
#include "config.h"
#include "store/store_int.h"
#include "util/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SCAN_BUF (1u << 20)
#define CKPT_NAME "recovery.ckpt"
#define CKPT_MAGIC 0x4b43514du /* "MQCK" */

void seg_path(const mqd_plog_t *log, uint64_t base, const char *ext, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%020" PRIu64 ".%s", log->dir, base, ext);
}

int store_fsync_dir(mqd_store_t *st, const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return MQD_EIO;
    int rc = st->io.fsync(fd) == 0 ? 0 : MQD_EIO;
    close(fd);
    return rc;
}

static int open_file(const mqd_plog_t *log, uint64_t base, const char *ext, int flags)
{
    char p[4096];
    seg_path(log, base, ext, p, sizeof p);
    return open(p, O_RDWR | O_CLOEXEC | flags, 0644);
}

void seg_free(seg_t *s)
{
    if (!s)
        return;
    store_fd_close(s->st, s->fd);
    if (s->dfd >= 0)
        store_fd_close(s->st, s->dfd);
    free(s->idx);
    free(s->tix);
    free(s);
}

static seg_t *seg_new(mqd_store_t *st, uint64_t base)
{
    seg_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->st = st;
    s->base = base;
    s->next_off = base;
    s->fd = s->dfd = -1;
    return s;
}

/* Opens (creating when `create`) the .log of segment `base`. Index files are opened
 * only while they are read or written; a missing one is simply rebuilt. */
static int seg_open_files(mqd_plog_t *log, seg_t *s, int create)
{
    char p[4096];
    seg_path(log, s->base, "log", p, sizeof p);
    s->fd = store_fd_open(log->st, p, O_RDWR | (create ? O_CREAT | O_EXCL : 0));
    return s->fd < 0 ? mqd_errno_rc(errno) : 0;
}

int seg_create(mqd_plog_t *log, uint64_t base, seg_t **out)
{
    seg_t *s = seg_new(log->st, base);
    if (!s)
        return MQD_ENOMEM;
    int rc = seg_open_files(log, s, 1);
    bool made = rc == 0; /* the .log is ours (O_EXCL) */
    /* Empty index files from the start, so every segment always has its three files. */
    if (rc == 0)
        rc = seg_index_write(log, s, 1, 0);
    if (rc == 0)
        rc = store_fsync_dir(log->st, log->dir);
    if (rc != 0) {
        int err = errno;
        MQD_ERR("store", "%s: cannot create segment %" PRIu64 ": %s", log->dir, base,
                strerror(err));
        /* A roll that failed for want of a descriptor (EMFILE at the index files or the
         * directory fsync) is tried again with the same base after a resume: the empty
         * files it left would fail that O_EXCL for good. Nothing in them was ever
         * acknowledged. */
        if (made)
            seg_unlink(log, s);
        seg_free(s);
        errno = err;
        return rc;
    }
    s->created_ms = mqd_now_ms();
    *out = s;
    return 0;
}

void seg_unlink(const mqd_plog_t *log, const seg_t *s)
{
    static const char *const ext[] = {"log", "idx", "tix"};
    char p[4096];
    for (size_t i = 0; i < MQD_ARRAY_LEN(ext); i++) {
        seg_path(log, s->base, ext[i], p, sizeof p);
        unlink(p);
    }
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 64;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * elem);
    if (!p)
        return MQD_ENOMEM;
    *arr = p;
    *cap = n;
    return 0;
}

/* Called for every record in file order (append, scan). Adds an offset entry each
 * index_interval_bytes and a time entry whenever that interval also saw a newer max. */
int seg_index_add(seg_t *s, const mqd_plog_config_t *cfg, uint64_t off, uint64_t pos,
                  int64_t ts)
{
    if (pos == 0)
        s->created_ms = ts;
    if (ts > s->max_ts || s->next_off == s->base) {
        s->max_ts = ts;
        s->max_ts_off = off;
    }
    s->next_off = off + 1;
    uint32_t iv = cfg->index_interval_bytes ? cfg->index_interval_bytes : 4096;
    if (pos == 0 || pos - s->last_idx_pos < iv)
        return 0;
    if (grow((void **)&s->idx, &s->cap_idx, s->n_idx + 1, sizeof *s->idx) != 0 ||
        grow((void **)&s->tix, &s->cap_tix, s->n_tix + 1, sizeof *s->tix) != 0)
        return MQD_ENOMEM;
    s->idx[s->n_idx++] = (idx_ent_t){(uint32_t)(off - s->base), (uint32_t)pos};
    s->last_idx_pos = pos;
    if (s->n_tix == 0 || s->max_ts > s->tix[s->n_tix - 1].ts)
        s->tix[s->n_tix++] = (tix_ent_t){s->max_ts, (uint32_t)(s->max_ts_off - s->base)};
    return 0;
}

/* Appends entries [*on_disk, n) of one index file (all of them after truncating it when
 * `rewrite`), then fdatasyncs it when `sync`. `enc` encodes entry i into out. */
static int index_file_write(const mqd_plog_t *log, const seg_t *s, const char *ext,
                            size_t *on_disk, size_t n, size_t esz, int rewrite, int sync,
                            void (*enc)(const seg_t *, size_t, uint8_t *))
{
    if (!rewrite && !sync && *on_disk >= n)
        return 0;
    int fd = open_file(log, s->base, ext, O_CREAT);
    if (fd < 0)
        return MQD_EIO;
    int rc = 0;
    if (rewrite) {
        if (log->st->io.ftruncate(fd, 0) != 0)
            rc = MQD_EIO;
        *on_disk = 0;
    }
    uint8_t buf[32768]; /* a few large writes: 4 KiB ones cost a flusher ~4 ms per MiB */
    while (rc == 0 && *on_disk < n) {
        size_t len = 0, first = *on_disk;
        for (; *on_disk < n && len + esz <= sizeof buf; (*on_disk)++, len += esz)
            enc(s, *on_disk, buf + len);
        if (log->st->io.pwrite(fd, buf, len, (off_t)(first * esz)) != (ssize_t)len)
            rc = MQD_EIO;
    }
    if (rc == 0 && sync && log->st->io.fdatasync(fd) != 0)
        rc = MQD_EIO;
    close(fd);
    return rc;
}

static void enc_idx(const seg_t *s, size_t i, uint8_t *out)
{
    memcpy(out, &s->idx[i].rel, 4);
    memcpy(out + 4, &s->idx[i].pos, 4);
}

static void enc_tix(const seg_t *s, size_t i, uint8_t *out)
{
    memcpy(out, &s->tix[i].ts, 8);
    memcpy(out + 8, &s->tix[i].rel, 4);
}

int seg_index_write(const mqd_plog_t *log, seg_t *s, int rewrite, int sync)
{
    int rc = index_file_write(log, s, "idx", &s->idx_on_disk, s->n_idx, IDX_ENTRY, rewrite,
                              sync, enc_idx);
    if (rc == 0)
        rc = index_file_write(log, s, "tix", &s->tix_on_disk, s->n_tix, TIX_ENTRY, rewrite,
                              sync, enc_tix);
    return rc;
}

uint64_t seg_lookup_pos(const seg_t *s, uint64_t off, uint64_t *at_off)
{
    size_t lo = 0, hi = s->n_idx; /* first entry with rel > target */
    uint64_t rel = off - s->base;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->idx[mid].rel <= rel)
            lo = mid + 1;
        else
            hi = mid;
    }
    *at_off = lo ? s->base + s->idx[lo - 1].rel : s->base;
    return lo ? s->idx[lo - 1].pos : 0;
}

uint64_t seg_lookup_time(const seg_t *s, int64_t ts)
{
    size_t lo = 0, hi = s->n_tix; /* first entry with ts >= target */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->tix[mid].ts < ts)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* Records up to that entry's offset are all older than ts (running max). */
    return lo ? s->base + s->tix[lo - 1].rel + 1 : s->base;
}

/* ---- scanning ---- */

typedef struct scan {
    uint8_t *buf;
    size_t cap;
    uint64_t buf_pos; /* file position of buf[0] */
    size_t buf_len;
} scan_t;

/* A scan buffer no larger than the bytes to scan (small segments are common). */
static int scan_init(scan_t *sc, uint64_t bytes)
{
    sc->cap = bytes < 4096 ? 4096 : bytes > SCAN_BUF ? SCAN_BUF : (size_t)bytes;
    sc->buf = malloc(sc->cap);
    sc->buf_pos = 0;
    sc->buf_len = 0;
    return sc->buf ? 0 : MQD_ENOMEM;
}

/* Makes [pos, pos+len) available in sc->buf (len <= sc->cap). 0, or 1 at EOF. */
static int scan_fill(int fd, scan_t *sc, uint64_t pos, size_t len, uint64_t fsize)
{
    if (pos + len > fsize)
        return 1;
    if (pos >= sc->buf_pos && pos + len <= sc->buf_pos + sc->buf_len)
        return 0;
    size_t want = (size_t)(fsize - pos < sc->cap ? fsize - pos : sc->cap);
    ssize_t got = pread(fd, sc->buf, want, (off_t)pos);
    if (got < (ssize_t)len)
        return 1;
    sc->buf_pos = pos;
    sc->buf_len = (size_t)got;
    return 0;
}

/* CRC of a record too large for the scan buffer, streamed. */
static int crc_stream(int fd, scan_t *sc, uint64_t pos, uint64_t len, uint32_t *out)
{
    uint32_t crc = 0;
    while (len > 0) {
        size_t n = len < sc->cap ? (size_t)len : sc->cap;
        if (pread(fd, sc->buf, n, (off_t)pos) != (ssize_t)n)
            return 1;
        crc = mqd_crc32c(crc, sc->buf, n);
        pos += n;
        len -= n;
    }
    sc->buf_len = 0;
    *out = crc;
    return 0;
}

/* Validates one record at pos. 0 and *rec_len/ts set, or 1 if it is damaged. */
static int scan_one(int fd, scan_t *sc, uint64_t pos, uint64_t fsize, uint64_t want_off,
                    uint64_t *rec_len, int64_t *ts)
{
    if (scan_fill(fd, sc, pos, REC_HDR, fsize))
        return 1;
    const uint8_t *h = sc->buf + (pos - sc->buf_pos);
    uint32_t len = rd32(h), crc = rd32(h + 4);
    if (len < REC_LEN_MIN || len > REC_MAX_DATA + REC_LEN_MIN || pos + 4 + len > fsize)
        return 1;
    if (rd64(h + 8) != want_off)
        return 1;
    int64_t t = (int64_t)rd64(h + 16);
    uint32_t got;
    if (4 + (uint64_t)len <= sc->cap) {
        if (scan_fill(fd, sc, pos, 4 + (size_t)len, fsize))
            return 1;
        got = mqd_crc32c(0, sc->buf + (pos - sc->buf_pos) + 8, len - 4);
    } else if (crc_stream(fd, sc, pos + 8, len - 4, &got)) {
        return 1;
    }
    if (got != crc)
        return 1;
    *rec_len = 4 + (uint64_t)len;
    *ts = t;
    return 0;
}

/* Scans s from pos (expecting offset `off`) to EOF, indexing each record. Sets s->size
 * to the end of the last good record. Returns 0 if clean to EOF, 1 if damage stopped
 * it, or a negative error. */
static int scan_seg(mqd_plog_t *log, seg_t *s, uint64_t pos, uint64_t off, uint64_t fsize)
{
    scan_t sc;
    if (scan_init(&sc, fsize - pos) != 0)
        return MQD_ENOMEM;
    int rc = 0;
    s->next_off = off;
    while (pos < fsize) {
        uint64_t rl;
        int64_t ts;
        if (scan_one(s->fd, &sc, pos, fsize, off, &rl, &ts)) {
            rc = 1;
            break;
        }
        rc = seg_index_add(s, &log->cfg, off, pos, ts);
        if (rc != 0)
            break;
        pos += rl;
        off++;
    }
    s->size = pos;
    free(sc.buf);
    return rc;
}

static void seg_index_clear(seg_t *s)
{
    s->n_idx = s->n_tix = 0;
    s->last_idx_pos = 0;
    s->max_ts = 0;
    s->max_ts_off = s->base;
    s->next_off = s->base;
}

/* Reads the index files into memory. Returns 0 if they look consistent (monotonic,
 * within the file), 1 if they must be rebuilt. */
static int index_load(const mqd_plog_t *log, seg_t *s, uint64_t fsize)
{
    struct stat a, b;
    s->n_idx = s->n_tix = s->idx_on_disk = s->tix_on_disk = 0;
    int ifd = open_file(log, s->base, "idx", 0), tfd = open_file(log, s->base, "tix", 0);
    int bad = ifd < 0 || tfd < 0 || fstat(ifd, &a) != 0 || fstat(tfd, &b) != 0;
    if (bad) {
        if (ifd >= 0)
            close(ifd);
        if (tfd >= 0)
            close(tfd);
        return 1;
    }
    size_t ni = (size_t)a.st_size / IDX_ENTRY, nt = (size_t)b.st_size / TIX_ENTRY;
    uint8_t *raw = NULL;
    if (grow((void **)&s->idx, &s->cap_idx, ni + 1, sizeof *s->idx) != 0 ||
        grow((void **)&s->tix, &s->cap_tix, nt + 1, sizeof *s->tix) != 0 ||
        !(raw = malloc(ni * IDX_ENTRY + nt * TIX_ENTRY + 1))) {
        close(ifd);
        close(tfd);
        return 1;
    }
    bad = pread(ifd, raw, ni * IDX_ENTRY, 0) != (ssize_t)(ni * IDX_ENTRY) ||
          pread(tfd, raw + ni * IDX_ENTRY, nt * TIX_ENTRY, 0) != (ssize_t)(nt * TIX_ENTRY);
    close(ifd);
    close(tfd);
    for (size_t i = 0; !bad && i < ni; i++) {
        s->idx[i].rel = rd32(raw + i * IDX_ENTRY);
        s->idx[i].pos = rd32(raw + i * IDX_ENTRY + 4);
        bad = s->idx[i].pos == 0 || s->idx[i].pos >= fsize ||
              (i && (s->idx[i].rel <= s->idx[i - 1].rel || s->idx[i].pos <= s->idx[i - 1].pos));
    }
    const uint8_t *t = raw + ni * IDX_ENTRY;
    for (size_t i = 0; !bad && i < nt; i++) {
        s->tix[i].ts = (int64_t)rd64(t + i * TIX_ENTRY);
        s->tix[i].rel = rd32(t + i * TIX_ENTRY + 8);
        bad = i && (s->tix[i].ts <= s->tix[i - 1].ts || s->tix[i].rel < s->tix[i - 1].rel);
    }
    free(raw);
    s->n_idx = bad ? 0 : ni;
    s->n_tix = bad ? 0 : nt;
    s->idx_on_disk = s->n_idx;
    s->tix_on_disk = s->n_tix;
    return bad;
}

/* Drops index entries at or past file position `pos` / offset `off`. */
static void index_trim(seg_t *s, uint64_t pos, uint64_t off)
{
    while (s->n_idx && s->idx[s->n_idx - 1].pos >= pos)
        s->n_idx--;
    while (s->n_tix && s->base + s->tix[s->n_tix - 1].rel >= off)
        s->n_tix--;
    s->last_idx_pos = s->n_idx ? s->idx[s->n_idx - 1].pos : 0;
    s->max_ts = s->n_tix ? s->tix[s->n_tix - 1].ts : 0;
    s->max_ts_off = s->n_tix ? s->base + s->tix[s->n_tix - 1].rel : s->base;
    s->idx_on_disk = s->idx_on_disk < s->n_idx ? s->idx_on_disk : s->n_idx;
    s->tix_on_disk = s->tix_on_disk < s->n_tix ? s->tix_on_disk : s->n_tix;
}

/* Reads the header at pos and checks it is a whole, CRC-valid record with offset off. */
static int check_record(seg_t *s, uint64_t pos, uint64_t off, uint64_t fsize)
{
    scan_t sc;
    uint64_t rl;
    int64_t ts;
    uint8_t h[8];
    /* Size the buffer to the record so a big segment does not cost a big allocation. */
    uint64_t want = pread(s->fd, h, 4, (off_t)pos) == 4 ? 4 + (uint64_t)rd32(h) : REC_HDR;
    int bad = scan_init(&sc, want) != 0 || scan_one(s->fd, &sc, pos, fsize, off, &rl, &ts);
    free(sc.buf);
    return bad;
}

/* Whether [pos, end) of s's file holds only zero bytes (the pre-zeroed tail prezero.c
 * writes ahead of the records). 1 yes, 0 no, negative on a read error. */
static int zeros_to(const seg_t *s, uint64_t pos, uint64_t end)
{
    uint8_t buf[8192];
    while (pos < end) {
        size_t n = end - pos < sizeof buf ? (size_t)(end - pos) : sizeof buf;
        ssize_t got = pread(s->fd, buf, n, (off_t)pos);
        if (got <= 0)
            return got == 0 ? 0 : MQD_EIO;
        for (ssize_t i = 0; i < got; i++)
            if (buf[i])
                return 0;
        pos += (uint64_t)got;
    }
    return 1;
}

/* The scan of s stopped at s->size < *fsize: if only zeros follow (a pre-zeroed tail
 * left by a crash or a kill), cuts them (ftruncate + fdatasync) and sets *fsize to the
 * records' end. 1 cut, 0 not zeros, negative on an I/O error. */
static int cut_zero_tail(const mqd_plog_t *log, seg_t *s, uint64_t *fsize)
{
    int z = s->size < *fsize ? zeros_to(s, s->size, *fsize) : 0;
    if (z != 1)
        return z;
    if (log->st->io.ftruncate(s->fd, (off_t)s->size) != 0 || log->st->io.fdatasync(s->fd) != 0)
        return MQD_EIO;
    MQD_INFO("store", "%s/%020" PRIu64 ".log: cut %" PRIu64 " pre-zeroed bytes after offset %" PRIu64,
             log->dir, s->base, *fsize - s->size, s->next_off);
    *fsize = s->size;
    return 1;
}

static void read_first_ts(seg_t *s)
{
    uint8_t h[REC_HDR];
    if (s->size >= REC_HDR && pread(s->fd, h, REC_HDR, 0) == REC_HDR)
        s->created_ms = (int64_t)rd64(h + 16);
    else
        s->created_ms = mqd_now_ms();
}

/* An older segment: trust its index if its tail checks out, else full scan. */
static int recover_old(mqd_plog_t *log, seg_t *s, uint64_t fsize, uint64_t next_base)
{
    int bad = index_load(log, s, fsize);
    uint64_t pos = 0, off = s->base;
    if (!bad && s->n_idx) {
        pos = s->idx[s->n_idx - 1].pos;
        off = s->base + s->idx[s->n_idx - 1].rel;
        bad = check_record(s, pos, off, fsize);
    }
    if (!bad) {
        index_trim(s, pos, off);
        int rc = scan_seg(log, s, pos, off, fsize);
        if (rc == 1 && s->next_off == next_base)
            rc = cut_zero_tail(log, s, &fsize) == 1 ? 0 : 1; /* a crash during a roll */
        if (rc < 0)
            return rc;
        bad = rc || s->next_off != next_base;
    }
    if (bad) {
        seg_index_clear(s);
        int rc = scan_seg(log, s, 0, s->base, fsize);
        if (rc == 1 && s->next_off == next_base)
            rc = cut_zero_tail(log, s, &fsize) == 1 ? 0 : 1;
        if (rc < 0)
            return rc;
        if (rc || s->next_off != next_base || s->size != fsize) {
            MQD_ERR("store", "%s/%020" PRIu64 ".log: corrupt record at position %" PRIu64
                    " (offset %" PRIu64 "); partition marked unhealthy",
                    log->dir, s->base, s->size, s->next_off);
            __atomic_store_n(&log->unhealthy, 1, __ATOMIC_RELEASE);
            s->next_off = next_base;
        }
        if (seg_index_write(log, s, 1, 0) != 0)
            return MQD_EIO;
    }
    s->size = s->synced = fsize;
    read_first_ts(s);
    return 0;
}

typedef struct ckpt { uint64_t base, pos, off; } ckpt_t;

static int ckpt_read(const mqd_plog_t *log, ckpt_t *c)
{
    char p[4096];
    uint8_t b[36];
    snprintf(p, sizeof p, "%s/" CKPT_NAME, log->dir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    ssize_t n = pread(fd, b, sizeof b, 0);
    close(fd);
    if (n != (ssize_t)sizeof b || rd32(b) != CKPT_MAGIC || rd32(b + 32) != mqd_crc32c(0, b, 32))
        return 1;
    c->base = rd64(b + 8);
    c->pos = rd64(b + 16);
    c->off = rd64(b + 24);
    return 0;
}

int ckpt_write(mqd_plog_t *log, uint64_t base, uint64_t pos, uint64_t off, int sync)
{
    char tmp[4096], p[4096];
    uint8_t b[36];
    uint32_t magic = CKPT_MAGIC, ver = 1;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &ver, 4);
    memcpy(b + 8, &base, 8);
    memcpy(b + 16, &pos, 8);
    memcpy(b + 24, &off, 8);
    uint32_t crc = mqd_crc32c(0, b, 32);
    memcpy(b + 32, &crc, 4);
    snprintf(p, sizeof p, "%s/" CKPT_NAME, log->dir);
    if (!sync) {
        /* A hint, overwritten in place: whatever of it reaches the disk (this one, an
         * older one, or a torn one that fails its CRC) only moves where the recovery
         * scan starts, and it names bytes already fdatasync'd. The first one of a log
         * is written the synced way below: a file mqd creates gets a durable name. */
        int fd = open(p, O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            int rc = log->st->io.pwrite(fd, b, sizeof b, 0) == (ssize_t)sizeof b ? 0 : MQD_EIO;
            close(fd);
            return rc;
        }
        if (errno != ENOENT)
            return MQD_EIO;
    }
    snprintf(tmp, sizeof tmp, "%s/" CKPT_NAME ".tmp", log->dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return MQD_EIO;
    int rc = log->st->io.pwrite(fd, b, sizeof b, 0) == (ssize_t)sizeof b &&
                     log->st->io.fdatasync(fd) == 0
                 ? 0
                 : MQD_EIO;
    close(fd);
    if (rc == 0 && rename(tmp, p) != 0)
        rc = MQD_EIO;
    if (rc == 0)
        rc = store_fsync_dir(log->st, log->dir);
    return rc;
}

/* The last segment: validate from the checkpoint (or 0) to EOF and cut a torn tail. */
/* Index entries as loaded from the files, to tell after recovery whether the files
 * still hold a prefix of the in-memory index (then nothing is rewritten). */
typedef struct idx_copy {
    idx_ent_t *idx;
    tix_ent_t *tix;
    size_t n_idx, n_tix;
} idx_copy_t;

static void idx_copy_take(idx_copy_t *c, const seg_t *s)
{
    c->n_idx = s->n_idx;
    c->n_tix = s->n_tix;
    c->idx = c->n_idx ? malloc(c->n_idx * sizeof *c->idx) : NULL;
    c->tix = c->n_tix ? malloc(c->n_tix * sizeof *c->tix) : NULL;
    if ((c->n_idx && !c->idx) || (c->n_tix && !c->tix)) {
        free(c->idx);
        free(c->tix);
        c->idx = NULL;
        c->tix = NULL;
        c->n_idx = c->n_tix = SIZE_MAX; /* unknown: never a prefix */
        return;
    }
    if (c->n_idx)
        memcpy(c->idx, s->idx, c->n_idx * sizeof *c->idx);
    for (size_t i = 0; i < c->n_tix; i++)
        c->tix[i] = s->tix[i];
}

static int idx_copy_is_prefix(const idx_copy_t *c, const seg_t *s)
{
    if (c->n_idx > s->n_idx || c->n_tix > s->n_tix)
        return 0;
    for (size_t i = 0; i < c->n_idx; i++)
        if (c->idx[i].rel != s->idx[i].rel || c->idx[i].pos != s->idx[i].pos)
            return 0;
    for (size_t i = 0; i < c->n_tix; i++)
        if (c->tix[i].ts != s->tix[i].ts || c->tix[i].rel != s->tix[i].rel)
            return 0;
    return 1;
}

/* The last segment: validate from the checkpoint (or 0) to EOF and cut a torn tail.
 *
 * Clean restart (the common case, and what makes 10,000 partitions open in seconds):
 * the checkpoint names this segment, its position is the file's size, the scan from the
 * last index entry reaches EOF intact and the index files hold a prefix of the rebuilt
 * index. Then nothing is written or synced: the checkpoint was written after an
 * fdatasync that covered every byte of the file. Any other case syncs the file (bytes
 * that survived a crash may sit only in the page cache) and rewrites the indexes. */
static int recover_last(mqd_plog_t *log, seg_t *s, uint64_t fsize)
{
    ckpt_t c;
    uint64_t pos = 0, off = s->base;
    int bad = index_load(log, s, fsize);
    idx_copy_t disk = {0};
    if (!bad)
        idx_copy_take(&disk, s);
    /* The checkpoint's position is the end of the file, a record, or (a pre-zeroed
     * tail) zeros. */
    int have_ckpt = ckpt_read(log, &c) == 0 && c.base == s->base && c.pos <= fsize &&
                    c.off >= s->base &&
                    (c.pos == fsize || !check_record(s, c.pos, c.off, fsize) ||
                     zeros_to(s, c.pos, c.pos + 4 <= fsize ? c.pos + 4 : fsize) == 1);
    if (have_ckpt) {
        pos = c.pos;
        off = c.off;
    }
    /* Resume from the last index entry before the checkpoint: the scan then also
     * recomputes max_ts exactly (the time index keeps only interval maxima). */
    index_trim(s, pos, off);
    if (!bad && s->n_idx) {
        pos = s->idx[s->n_idx - 1].pos;
        off = s->base + s->idx[s->n_idx - 1].rel;
        bad = check_record(s, pos, off, fsize);
        index_trim(s, pos, off);
    }
    if (bad || s->n_idx == 0) {
        seg_index_clear(s);
        pos = 0;
        off = s->base;
    }
    int rc = scan_seg(log, s, pos, off, fsize);
    if (rc < 0) {
        free(disk.idx);
        free(disk.tix);
        return rc;
    }
    if (rc == 1) {
        int z = cut_zero_tail(log, s, &fsize); /* zeros only: cut quietly */
        if (z < 0) {
            free(disk.idx);
            free(disk.tix);
            return z;
        }
        rc = z ? 2 : 1;
    }
    if (rc == 1) {
        MQD_WARN("store", "%s/%020" PRIu64 ".log: torn tail at offset %" PRIu64
                 ", position %" PRIu64 ": cutting %" PRIu64 " bytes",
                 log->dir, s->base, s->next_off, s->size, fsize - s->size);
        if (log->st->io.ftruncate(s->fd, (off_t)s->size) != 0) {
            free(disk.idx);
            free(disk.tix);
            return MQD_EIO;
        }
    }
    int clean = have_ckpt && rc == 0 && c.pos == fsize && s->size == fsize &&
                s->next_off == c.off;
    int keep_idx = !bad && clean && idx_copy_is_prefix(&disk, s);
    free(disk.idx);
    free(disk.tix);
    if (keep_idx) {
        s->idx_on_disk = disk.n_idx;
        s->tix_on_disk = disk.n_tix;
    } else if (seg_index_write(log, s, 1, 0) != 0) {
        return MQD_EIO;
    }
    if (!clean && log->st->io.fdatasync(s->fd) != 0)
        return MQD_EIO;
    log->ckpt_clean = clean;
    s->synced = s->size;
    read_first_ts(s);
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Lists segment base offsets in log->dir, sorted. */
static int list_bases(const mqd_plog_t *log, uint64_t **out, size_t *n_out)
{
    DIR *d = opendir(log->dir);
    if (!d)
        return MQD_EIO;
    uint64_t *v = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l != 24 || strcmp(e->d_name + 20, ".log") != 0)
            continue;
        if (grow((void **)&v, &cap, n + 1, sizeof *v) != 0) {
            rc = MQD_ENOMEM;
            break;
        }
        v[n++] = strtoull(e->d_name, NULL, 10);
    }
    closedir(d);
    if (rc != 0) {
        free(v);
        return rc;
    }
    if (n)
        qsort(v, n, sizeof *v, cmp_u64);
    *out = v;
    *n_out = n;
    return 0;
}

static int recover_one(mqd_plog_t *log, uint64_t base, uint64_t next_base, int last)
{
    seg_t *s = seg_new(log->st, base);
    if (!s)
        return MQD_ENOMEM;
    struct stat st;
    int rc = seg_open_files(log, s, 0);
    if (rc == 0 && fstat(s->fd, &st) != 0)
        rc = MQD_EIO;
    if (rc == 0)
        rc = last ? recover_last(log, s, (uint64_t)st.st_size)
                  : recover_old(log, s, (uint64_t)st.st_size, next_base);
    if (rc != 0) {
        seg_free(s);
        return rc;
    }
    if (!last) {
        /* Recovered and fdatasync'd at its roll: reopened when read (fdlru.c), so a
         * partition with many segments does not hold them all open. */
        store_fd_close(log->st, s->fd);
        s->fd = -1;
    }
    s->prev = log->tail;
    if (log->tail)
        log->tail->next = s;
    else
        log->head = s;
    log->tail = s;
    return 0;
}

int log_recover(mqd_plog_t *log)
{
    uint64_t *bases = NULL;
    size_t n = 0;
    int rc = store_reset_recover(log);
    if (rc == 0)
        rc = list_bases(log, &bases, &n);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = recover_one(log, bases[i], i + 1 < n ? bases[i + 1] : 0, i + 1 == n);
    free(bases);
    if (rc == 0 && !log->head) {
        seg_t *s;
        rc = seg_create(log, 0, &s);
        if (rc == 0)
            log->head = log->tail = s;
    }
    if (rc != 0)
        return rc;
    log->start = log->head->base;
    log->end = log->tail->next_off;
    log->stable = log->durable = log->end;
    return 0;
}

/* Cuts s at offset off (off within [base, next_off]); rebuilds its indexes. An idle
 * segment's descriptor may be closed (fdlru.c): `locked` says whether the caller holds
 * log->mu already (resume.c does), else it is taken to open it. The owner waits for a
 * synchronous truncation and for a resume, and refuses reads of a log under an
 * asynchronous truncation (truncate.c), so opening it here races with no read. */
int seg_truncate_at(mqd_plog_t *log, seg_t *s, uint64_t off, bool locked)
{
    uint64_t o;
    uint64_t pos = seg_lookup_pos(s, off, &o);
    if (!locked)
        pthread_mutex_lock(&log->mu);
    int fd = seg_fd_get(log, s);
    if (!locked)
        pthread_mutex_unlock(&log->mu);
    if (fd < 0)
        return fd;
    while (o < off) {
        uint8_t h[8];
        if (pread(s->fd, h, 8, (off_t)pos) != 8)
            return MQD_EIO;
        pos += 4 + (uint64_t)rd32(h);
        o++;
    }
    if (log->st->io.ftruncate(s->fd, (off_t)pos) != 0 || log->st->io.fdatasync(s->fd) != 0)
        return MQD_EIO;
    /* Rare (replication): rescan rather than patch max_ts and the time index. */
    seg_index_clear(s);
    int rc = scan_seg(log, s, 0, s->base, pos);
    if (rc != 0)
        return rc < 0 ? rc : MQD_ECORRUPT;
    s->synced = s->size;
    return seg_index_write(log, s, 1, 0);
}
