/* Fuzz target: segment files, index files, the recovery checkpoint and the record
 * reader (src/store). The input builds one partition directory in a tmpfs, which is then
 * recovered, read from start to end, searched by time, closed and recovered again.
 *
 * Input: byte 0 picks the base offset of a second segment (B = byte + 1); then chunks
 * `kind u8 | len u16 le | len bytes` up to the end:
 *   0 1 2   raw bytes of segment A (base 0): .log .idx .tix
 *   3 4 5   raw bytes of segment B: .log .idx .tix
 *   6 7     records appended to A's / B's .log with valid CRCs, so recovery gets past the
 *           CRC check: each `dlen u8 | off_delta i8 | ts u8 | flags u8 | dlen bytes`
 *           (flags bit 7 stands for MQD_REC_TXN)
 *   8       recovery checkpoint `base u64 | pos u64 | off u64` (magic and CRC added)
 *   9       reset marker (reset.c): `start u64` (magic and CRC added); a chunk shorter
 *           than 8 bytes is written raw, as a torn marker
 * Every partition must open (or fail cleanly), read back only whole CRC-valid records in
 * offset order, and recover to the same offsets a second time. A whole reset marker
 * must leave the empty log at its start and be gone once the open succeeded. */
#include "config.h"
#include "store/store.h"
#include "store/store_int.h"
#include "util/util.h"
#include "fuzz.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REC_HDR 40u
#define MAX_CHUNKS 64

static char root[256];
static char part[320];

static void clear_part(void);

/* The replay driver runs this in make check: leave no directory behind. */
static void remove_dirs(void)
{
    char p[600];

    clear_part();
    rmdir(part);
    snprintf(p, sizeof p, "%s/topics/t", root);
    rmdir(p);
    snprintf(p, sizeof p, "%s/topics", root);
    rmdir(p);
    rmdir(root);
}

static void setup_dirs(void)
{
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";

    snprintf(root, sizeof root, "%s/mqd-fuzz-store-%ld", base, (long)getpid());
    snprintf(part, sizeof part, "%s/topics/t/0", root);
    if (mqd_mkdirs(part, 0755) != 0)
        abort();
    mqd_log_set_level(MQD_LOG_ERROR);
    atexit(remove_dirs);
}

static void clear_part(void)
{
    DIR *d = opendir(part);
    struct dirent *e;
    char p[600];

    if (d == NULL)
        abort();
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", part, e->d_name);
        unlink(p);
    }
    closedir(d);
}

static void append_file(uint64_t base, const char *ext, const void *p, size_t n)
{
    char path[600];
    int fd;

    if (strcmp(ext, "ckpt") == 0)
        snprintf(path, sizeof path, "%s/recovery.ckpt", part);
    else
        snprintf(path, sizeof path, "%s/%020" PRIu64 ".%s", part, base, ext);
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, p, n) != (ssize_t)n)
        abort();
    close(fd);
}

/* Encodes records as the store does: len | crc | offset | ts | epoch | flags | txn | data. */
static void gen_records(uint64_t base, uint64_t *next, const uint8_t *p, size_t n)
{
    uint8_t rec[REC_HDR + 255];

    while (n >= 4) {
        size_t dlen = p[0] <= n - 4 ? p[0] : n - 4;
        uint64_t off = *next + (uint64_t)(int64_t)(int8_t)p[1];
        int64_t ts = 1700000000000LL + p[2];
        uint32_t flags = (p[3] & 0x7fu) | (p[3] & 0x80u ? 0x100u : 0), epoch = 1,
                 len = (uint32_t)(REC_HDR - 4 + dlen), crc;
        uint64_t txn = flags & 0x100u ? 7 : 0;

        memcpy(rec, &len, 4);
        memcpy(rec + 8, &off, 8);
        memcpy(rec + 16, &ts, 8);
        memcpy(rec + 24, &epoch, 4);
        memcpy(rec + 28, &flags, 4);
        memcpy(rec + 32, &txn, 8);
        memcpy(rec + REC_HDR, p + 4, dlen);
        crc = mqd_crc32c(0, rec + 8, len - 4);
        memcpy(rec + 4, &crc, 4);
        append_file(base, "log", rec, REC_HDR + dlen);
        *next = off + 1;
        p += 4 + dlen;
        n -= 4 + dlen;
    }
}

static void gen_ckpt(const uint8_t *p, size_t n)
{
    uint8_t b[36] = {0};
    uint32_t magic = 0x4b43514du, ver = 1, crc;

    memcpy(b, &magic, 4);
    memcpy(b + 4, &ver, 4);
    memcpy(b + 8, p, n < 24 ? n : 24);
    crc = mqd_crc32c(0, b, 32);
    memcpy(b + 32, &crc, 4);
    append_file(0, "ckpt", b, sizeof b);
}

static bool mark_valid;
static uint64_t mark_start;

static void gen_mark(const uint8_t *p, size_t n)
{
    char path[600];
    uint8_t b[16];
    uint32_t magic = 0x5453524du, crc;
    int fd;

    snprintf(path, sizeof path, "%s/reset.mark", part);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        abort();
    if (n < 8) {
        if (write(fd, p, n) != (ssize_t)n)
            abort();
    } else {
        memcpy(b, &magic, 4);
        memcpy(b + 4, p, 8);
        crc = mqd_crc32c(0, b, 12);
        memcpy(b + 12, &crc, 4);
        if (write(fd, b, sizeof b) != (ssize_t)sizeof b)
            abort();
        memcpy(&mark_start, p, 8);
    }
    mark_valid = n >= 8;
    close(fd);
}

static void build_dir(const uint8_t *data, size_t size)
{
    static const char *const ext[] = {"log", "idx", "tix"};
    uint64_t base_b = (uint64_t)data[0] + 1, next_a = 0, next_b = base_b;
    size_t i = 1;

    for (int c = 0; c < MAX_CHUNKS && i + 3 <= size; c++) {
        unsigned kind = data[i] % 10;
        size_t len = (size_t)data[i + 1] | (size_t)data[i + 2] << 8;
        const uint8_t *p = data + i + 3;

        i += 3;
        len = len < size - i ? len : size - i;
        i += len;
        if (kind < 6)
            append_file(kind < 3 ? 0 : base_b, ext[kind % 3], p, len);
        else if (kind == 6)
            gen_records(0, &next_a, p, len);
        else if (kind == 7)
            gen_records(base_b, &next_b, p, len);
        else if (kind == 8)
            gen_ckpt(p, len);
        else
            gen_mark(p, len);
    }
}

/* Reads [start, end) in pages; every record must be the next offset and lie in r's
 * buffer (or in the cold-read chunk r pins: tmpfs has no RWF_NOWAIT, so there every
 * read goes through the O_DIRECT chain). A corrupt stretch (an unhealthy old segment, or offsets an index claims but no
 * record holds) is stepped over one offset at a time, a bounded number of times. */
static void read_all(mqd_plog_t *log)
{
    uint64_t from = mqd_plog_start_offset(log), end = mqd_plog_end_offset(log);
    unsigned skips = 0;
    mqd_read_t r;

    if (mqd_plog_stable_offset(log) > end || from > end)
        abort();
    mqd_read_init(&r);
    while (from < end && skips < 1024) {
        int rc = mqd_plog_read(log, from, UINT64_MAX, 16, 4096, &r);
        if (rc != 0 || r.n == 0) {
            from++;
            skips++;
            continue;
        }
        const uint8_t *pin;
        size_t pin_len;
        store_cold_pin_span(r.pin, &pin, &pin_len);
        for (size_t k = 0; k < r.n; k++) {
            const mqd_rec_t *o = &r.recs[k];
            bool in_buf = r.buf && o->data >= r.buf && o->data + o->len <= r.buf + r.cap_buf;
            bool in_pin = pin && o->data >= pin && o->data + o->len <= pin + pin_len;
            if (o->offset < from || (k && o->offset != r.recs[k - 1].offset + 1) ||
                !(in_buf || in_pin))
                abort();
        }
        if (r.next_offset <= from)
            abort();
        from = r.next_offset;
    }
    mqd_read_free(&r);
}

static void search_times(mqd_plog_t *log)
{
    static const int64_t ts[] = {0, 1700000000000LL, 1700000000100LL, 1700000000255LL, INT64_MAX};
    for (size_t i = 0; i < MQD_ARRAY_LEN(ts); i++) {
        uint64_t o;
        if (mqd_plog_offset_for_time(log, ts[i], &o) == 0 &&
            (o < mqd_plog_start_offset(log) || o > mqd_plog_end_offset(log)))
            abort();
    }
}

/* Opens the partition; on success reports its offsets in out[0..1]. */
static int open_read_close(uint64_t out[2], bool full)
{
    mqd_store_t *st = NULL;
    mqd_plog_t *log = NULL;
    mqd_plog_config_t cfg;
    int rc;

    mqd_plog_config_default(&cfg);
    cfg.index_interval_bytes = 64;
    if (mqd_store_open_ex(root, 1, NULL, NULL, &st) != 0)
        abort();
    rc = mqd_store_log_open(st, "t", 0, &cfg, &log);
    if (rc == 0) {
        out[0] = mqd_plog_start_offset(log);
        out[1] = mqd_plog_end_offset(log);
        if (full) {
            read_all(log);
            search_times(log);
        }
    }
    mqd_store_close(st);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t a[2], b[2];

    if (root[0] == '\0')
        setup_dirs();
    if (size < 1 || size > 65536)
        return 0;
    clear_part();
    mark_valid = false;
    build_dir(data, size);
    if (open_read_close(a, true) != 0)
        return 0;
    if (mark_valid) {
        char path[600];
        snprintf(path, sizeof path, "%s/reset.mark", part);
        if (access(path, F_OK) == 0 || a[0] != mark_start || a[1] != mark_start)
            abort(); /* the open finished the reset: the empty log at its start */
    }
    /* recovery already cut what it had to: a second open agrees */
    if (open_read_close(b, false) != 0 || a[0] != b[0] || a[1] != b[1])
        abort();
    return 0;
}
