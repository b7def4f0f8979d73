/* Crash recovery fuzz: for many seeded random logs, damage the tail written after the
 * last recovery checkpoint (torn cut, bit flip, zeroed page, trailing garbage, broken
 * index) and check that recovery keeps exactly the records before the damaged one,
 * including every record that was stable before the damage. Runs on /dev/shm: the
 * damage is done to files directly, so the real fsync is not what is under test here. */
#include "config.h"
#include "store/store.h"
#include "util/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "store_test.h"

#define TRIALS 1200
#define MAXLEN 200

typedef struct rng { uint64_t s; } rng_t;

static uint64_t rnd(rng_t *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

static uint64_t rnd_in(rng_t *r, uint64_t n) { return n ? rnd(r) % n : 0; }

static void write_n(const char *dir, const mqd_plog_config_t *cfg, size_t n, rng_t *r,
                    uint32_t seed)
{
    mqd_store_t *st;
    mqd_plog_t *log;
    assert_int_equal(mqd_store_open(dir, NULL, NULL, &st), 0);
    assert_int_equal(mqd_store_log_open(st, "t", 0, cfg, &log), 0);
    assert_false(mqd_plog_unhealthy(log));
    uint64_t end = mqd_plog_end_offset(log) + n;
    while (mqd_plog_end_offset(log) < end) {
        size_t k = 1 + rnd_in(r, 10);
        if (mqd_plog_end_offset(log) + k > end)
            k = end - mqd_plog_end_offset(log);
        assert_int_equal(append_n(st, log, k, k, seed, MAXLEN, 0, 0), 0);
    }
    assert_int_equal(mqd_plog_wait_stable(log, end), 0);
    mqd_store_close(st);
}

static size_t slurp(const char *path, uint8_t *buf, size_t cap)
{
    int fd = open(path, O_RDONLY);
    ssize_t n = fd < 0 ? 0 : read(fd, buf, cap);
    if (fd >= 0)
        close(fd);
    return n > 0 ? (size_t)n : 0;
}

static void spit(const char *path, const uint8_t *buf, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, n), (ssize_t)n);
    close(fd);
}

static uint64_t last_base(const char *pdir)
{
    DIR *d = opendir(pdir);
    struct dirent *e;
    uint64_t best = 0;
    while ((e = readdir(d)) != NULL)
        if (strlen(e->d_name) == 24 && strcmp(e->d_name + 20, ".log") == 0) {
            uint64_t b = strtoull(e->d_name, NULL, 10);
            best = b > best ? b : best;
        }
    closedir(d);
    return best;
}

/* Damages record k (0-based within the file, at pos, rl bytes long). */
static void damage(const char *path, int how, uint64_t pos, uint64_t rl, rng_t *r)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    if (how == 0) { /* torn write: cut inside (or right at) the record */
        assert_int_equal(ftruncate(fd, (off_t)(pos + rnd_in(r, rl))), 0);
    } else if (how == 1) { /* one flipped bit anywhere in the record */
        uint64_t at = pos + rnd_in(r, rl);
        uint8_t b;
        assert_int_equal(pread(fd, &b, 1, (off_t)at), 1);
        b ^= (uint8_t)(1u << rnd_in(r, 8));
        assert_int_equal(pwrite(fd, &b, 1, (off_t)at), 1);
    } else if (how == 2) { /* a zeroed page from inside the record to past EOF */
        /* starting at or before the record's last non-zero byte, or the record would
         * survive intact (its payload may end in zeros) */
        uint8_t rec[4096], z[4096] = {0};
        assert_true(rl <= sizeof rec);
        assert_int_equal(pread(fd, rec, rl, (off_t)pos), (ssize_t)rl);
        uint64_t last = rl - 1;
        while (last > 0 && rec[last] == 0)
            last--;
        assert_int_equal(pwrite(fd, z, sizeof z, (off_t)(pos + rnd_in(r, last + 1))), (ssize_t)sizeof z);
    } else { /* the record never made it, but junk did */
        uint8_t g[512];
        for (size_t i = 0; i < sizeof g; i++)
            g[i] = (uint8_t)rnd(r);
        size_t n = 1 + rnd_in(r, sizeof g);
        assert_int_equal(ftruncate(fd, (off_t)pos), 0);
        assert_int_equal(pwrite(fd, g, n, (off_t)pos), (ssize_t)n);
    }
    close(fd);
}

static void damage_idx(const char *pdir, uint64_t base, rng_t *r)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%020" PRIu64 ".%s", pdir, base, rnd_in(r, 2) ? "idx" : "tix");
    int fd = open(p, O_RDWR);
    if (fd < 0)
        return;
    struct stat sb;
    fstat(fd, &sb);
    if (rnd_in(r, 2)) {
        assert_int_equal(ftruncate(fd, (off_t)rnd_in(r, (uint64_t)sb.st_size + 1)), 0);
    } else {
        uint32_t junk[3] = {(uint32_t)rnd(r), (uint32_t)rnd(r), (uint32_t)rnd(r)};
        assert_int_equal(pwrite(fd, junk, sizeof junk, (off_t)rnd_in(r, (uint64_t)sb.st_size + 1)),
                         (ssize_t)sizeof junk);
    }
    close(fd);
}

/* Finds the first record at or after offset `from` in the file: sets pos/len/offset. */
static void pick_record(const char *path, uint64_t base, uint64_t from, rng_t *r, uint64_t *pos,
                        uint64_t *rl, uint64_t *off)
{
    static uint8_t buf[4 << 20];
    size_t n = slurp(path, buf, sizeof buf);
    uint64_t p = 0, o = base, cands = 0;
    uint64_t cp[4096], co[4096], cl[4096];
    while (p + 4 <= n && cands < 4096) {
        uint32_t len;
        memcpy(&len, buf + p, 4);
        if (o >= from) {
            cp[cands] = p;
            cl[cands] = 4 + len;
            co[cands++] = o;
        }
        p += 4 + len;
        o++;
    }
    assert_true(cands > 0);
    uint64_t k = rnd_in(r, cands);
    *pos = cp[k];
    *rl = cl[k];
    *off = co[k];
}

static void verify(const char *dir, const mqd_plog_config_t *cfg, uint64_t want_end,
                   uint32_t seed, int append)
{
    mqd_store_t *st;
    mqd_plog_t *log;
    assert_int_equal(mqd_store_open(dir, NULL, NULL, &st), 0);
    assert_int_equal(mqd_store_log_open(st, "t", 0, cfg, &log), 0);
    assert_false(mqd_plog_unhealthy(log));
    assert_int_equal(mqd_plog_end_offset(log), want_end);
    assert_int_equal(mqd_plog_stable_offset(log), want_end);
    assert_int_equal(read_check(log, 0, UINT64_MAX, seed, MAXLEN, 1 + want_end % 17, 1 << 20),
                     (long)want_end);
    if (append) {
        mqd_rec_in_t in = {"z", 1, 0, 0, 0};
        uint64_t off;
        assert_int_equal(mqd_plog_append(log, &in, 1, &off), 0);
        assert_int_equal(off, want_end);
        assert_int_equal(mqd_plog_wait_stable(log, want_end + 1), 0);
        assert_int_equal(mqd_plog_truncate_to(log, want_end), 0);
    }
    mqd_store_close(st);
}

static void one_trial(uint32_t t)
{
    rng_t r = {0x9e3779b97f4a7c15ull ^ ((uint64_t)t * 0x100000001b3ull) ^ 88172645463325252ull};
    uint32_t seed = t * 7919u;
    char *dir = tmpdir_in("/dev/shm");
    char pdir[600], ck[700], logp[700];
    _Static_assert(sizeof logp > sizeof pdir + 30, "path room");
    snprintf(pdir, sizeof pdir, "%s/topics/t/0", dir);
    snprintf(ck, sizeof ck, "%s/recovery.ckpt", pdir);
    mqd_plog_config_t cfg;
    mqd_plog_config_default(&cfg);
    cfg.segment_bytes = rnd_in(&r, 2) ? 2048 : 1 << 20;
    cfg.index_interval_bytes = 64 + (uint32_t)rnd_in(&r, 512);
    uint64_t s1 = rnd_in(&r, 60), m = 1 + rnd_in(&r, 60);
    write_n(dir, &cfg, s1, &r, seed);
    uint8_t saved[64];
    size_t saved_n = slurp(ck, saved, sizeof saved);
    write_n(dir, &cfg, m, &r, seed);
    /* Crash before the flusher wrote a newer checkpoint: the old one is on disk, or (a
     * periodic checkpoint is written in place without a sync) a torn one. */
    if (saved_n > 0 && rnd_in(&r, 4) == 0)
        saved[rnd_in(&r, saved_n)] ^= (uint8_t)(1 + rnd_in(&r, 255));
    spit(ck, saved, saved_n);
    uint64_t base = last_base(pdir), pos, rl, off;
    snprintf(logp, sizeof logp, "%s/%020" PRIu64 ".log", pdir, base);
    pick_record(logp, base, s1, &r, &pos, &rl, &off);
    damage(logp, (int)rnd_in(&r, 4), pos, rl, &r);
    if (rnd_in(&r, 4) == 0)
        damage_idx(pdir, base, &r);
    assert_true(off >= s1); /* everything stable before the damage must survive */
    verify(dir, &cfg, off, seed, 1);
    verify(dir, &cfg, off, seed, 0); /* recovery is idempotent */
    rm_rf(dir);
    free(dir);
}

static void test_recovery_fuzz(void **state)
{
    (void)state;
    uint32_t n = TRIALS;
    const char *e = getenv("MQD_RECOVERY_TRIALS");
    if (e)
        n = (uint32_t)strtoul(e, NULL, 10);
    for (uint32_t t = 0; t < n; t++)
        one_trial(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recovery_fuzz),
    };
    mqd_log_set_level(MQD_LOG_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
