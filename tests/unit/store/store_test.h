/* Helpers shared by the store unit tests: temp dirs, deterministic payloads. */
#ifndef MQD_STORE_TEST_H
#define MQD_STORE_TEST_H

#include "store/store.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

static inline void rm_rf(const char *dir)
{
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh directory under `root` ("/tmp" when fsync matters, "/dev/shm" for speed).
 * Caller frees and rm_rf()s it. */
static inline char *tmpdir_in(const char *root)
{
    char *p = malloc(256);
    snprintf(p, 256, "%s/mqd-store-XXXXXX", root);
    if (!mkdtemp(p)) {
        snprintf(p, 256, "/tmp/mqd-store-XXXXXX");
        if (!mkdtemp(p))
            abort();
    }
    return p;
}

/* Payload of record `off` in stream `seed`: length and bytes both derive from them. */
static inline uint32_t pay_len(uint64_t off, uint32_t seed, uint32_t maxlen)
{
    uint64_t x = (off + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    x ^= x >> 29;
    return (uint32_t)(x % (maxlen + 1));
}

static inline void pay_fill(uint8_t *buf, uint32_t len, uint64_t off, uint32_t seed)
{
    uint64_t x = off * 6364136223846793005ull + seed + 1442695040888963407ull;
    for (uint32_t i = 0; i < len; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(x >> 56);
    }
}

static inline int pay_check(const mqd_rec_t *r, uint32_t seed, uint32_t maxlen)
{
    uint8_t tmp[70000];
    uint32_t len = pay_len(r->offset, seed, maxlen);
    if (r->len != len || len > sizeof tmp)
        return 0;
    pay_fill(tmp, len, r->offset, seed);
    return memcmp(tmp, r->data, len) == 0;
}

/* Appends records [log end, log end + n) with payloads of stream `seed`, `per` per
 * commit, timestamps ts0 + offset*ts_step (ts0 == 0: now). */
static inline int append_n(mqd_store_t *st, mqd_plog_t *log, size_t n, size_t per, uint32_t seed,
                           uint32_t maxlen, int64_t ts0, int64_t ts_step)
{
    uint8_t *bufs = malloc((size_t)per * (maxlen + 1));
    mqd_rec_in_t *in = calloc(per, sizeof *in);
    int rc = 0;
    for (size_t done = 0; rc == 0 && done < n;) {
        size_t k = n - done < per ? n - done : per;
        uint64_t base = mqd_plog_end_offset(log);
        for (size_t i = 0; i < k; i++) {
            uint8_t *b = bufs + i * (maxlen + 1);
            in[i].len = pay_len(base + i, seed, maxlen);
            pay_fill(b, in[i].len, base + i, seed);
            in[i].data = b;
            in[i].timestamp_ms = ts0 ? ts0 + (int64_t)(base + i) * ts_step : 0;
            in[i].flags = (uint32_t)(base + i) & 0xff00u;
            in[i].txn = base + i;
        }
        uint64_t first;
        rc = mqd_plog_append(log, in, k, &first);
        if (rc == 0 && first != base)
            rc = -100;
        mqd_store_commit(st);
        done += k;
    }
    free(bufs);
    free(in);
    return rc;
}

/* Reads [from, to) back and checks every record; returns the count read or -1. */
static inline long read_check(mqd_plog_t *log, uint64_t from, uint64_t to, uint32_t seed,
                              uint32_t maxlen, size_t max_recs, size_t max_bytes)
{
    mqd_read_t r;
    mqd_read_init(&r);
    long n = 0;
    uint64_t want = from;
    while (want < to) {
        int rc = mqd_plog_read(log, want, to, max_recs, max_bytes, &r);
        if (rc != 0 || r.n == 0)
            break;
        for (size_t i = 0; i < r.n; i++) {
            if (r.recs[i].offset != want || !pay_check(&r.recs[i], seed, maxlen) ||
                r.recs[i].txn != want) {
                mqd_read_free(&r);
                return -1;
            }
            want++;
            n++;
        }
        if (r.next_offset != want) {
            n = -1;
            break;
        }
    }
    mqd_read_free(&r);
    return n;
}

static inline int count_files(const char *dir, const char *ext)
{
    char cmd[1100]; /* room for any directory the callers pass (char[512] or less) */
    snprintf(cmd, sizeof cmd, "ls %s/*.%s 2>/dev/null | wc -l", dir, ext);
    FILE *f = popen(cmd, "r");
    int n = -1;
    if (f) {
        if (fscanf(f, "%d", &n) != 1)
            n = -1;
        pclose(f);
    }
    return n;
}

#endif
