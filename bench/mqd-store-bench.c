/* mqd-store-bench: storage engine throughput, latency and recovery time.
 *
 *   mqd-store-bench [-d DIR] [-s SECONDS] [-r RECOVERY_MIB]
 *
 * DIR should be on the disk under test (default /tmp). Scenarios: raw sequential
 * write+fdatasync at the batch size (reference); the store in sync mode one batch at a
 * time (256 records per commit); sync mode with a pipelined, concurrent-producer shape
 * (the owner keeps appending while the flusher syncs, up to 64 commits in flight);
 * async mode; and reopen time of a ~1 GiB log after the writer was SIGKILLed. */
#include "config.h"
#include "store/store.h"
#include "util/util.h"

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BATCH 256

static double secs;
static const char *root = "/tmp";

static double now_s(void) { return (double)mqd_mono_ns() / 1e9; }

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static char *mkdir_tmp(void)
{
    char *p = malloc(512);
    snprintf(p, 512, "%s/mqd-bench-XXXXXX", root);
    if (!mkdtemp(p)) {
        perror("mkdtemp");
        exit(1);
    }
    return p;
}

static void rm_rf(const char *p)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", p);
}

static double raw_bench(size_t recsize)
{
    char *d = mkdir_tmp(), p[600];
    snprintf(p, sizeof p, "%s/raw", d);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    size_t n = recsize * BATCH;
    uint8_t *buf = malloc(n);
    memset(buf, 0xab, n);
    uint64_t bytes = 0;
    double t0 = now_s(), t;
    while ((t = now_s()) - t0 < secs) {
        if (write(fd, buf, n) != (ssize_t)n || fdatasync(fd) != 0) {
            perror("raw");
            exit(1);
        }
        bytes += n;
    }
    close(fd);
    free(buf);
    rm_rf(d);
    free(d);
    double mbs = (double)bytes / (t - t0) / 1e6;
    printf("raw write+fdatasync  %5zu B x %d : %9.0f rec/s %8.1f MB/s\n", recsize, BATCH,
           (double)bytes / recsize / (t - t0), mbs);
    return mbs;
}

typedef struct run {
    mqd_store_t *st;
    mqd_plog_t *log;
    char *dir;
    mqd_rec_in_t in[BATCH];
    uint8_t *payload;
} run_t;

static void run_open(run_t *r, size_t recsize, mqd_flush_mode_t mode, uint64_t seg_bytes)
{
    r->dir = mkdir_tmp();
    mqd_plog_config_t c;
    mqd_plog_config_default(&c);
    c.flush = mode;
    if (seg_bytes)
        c.segment_bytes = seg_bytes;
    if (mqd_store_open(r->dir, NULL, NULL, &r->st) != 0 ||
        mqd_store_log_open(r->st, "bench", 0, &c, &r->log) != 0)
        exit(1);
    r->payload = malloc(recsize);
    memset(r->payload, 0x5a, recsize);
    for (int i = 0; i < BATCH; i++)
        r->in[i] = (mqd_rec_in_t){r->payload, (uint32_t)recsize, 0, 0, 0};
}

static void run_close(run_t *r)
{
    mqd_store_close(r->st);
    rm_rf(r->dir);
    free(r->dir);
    free(r->payload);
}

static void report(const char *name, size_t recsize, uint64_t recs, double dt, double *lat,
                   size_t nlat, double raw)
{
    double mbs = (double)recs * (double)recsize / dt / 1e6;
    printf("%-20s %5zu B x %d : %9.0f rec/s %8.1f MB/s", name, recsize, BATCH,
           (double)recs / dt, mbs);
    if (raw > 0)
        printf("  (%3.0f%% of raw)", 100.0 * mbs / raw);
    if (nlat) {
        qsort(lat, nlat, sizeof *lat, cmp_d);
        printf("  p50 %.2f ms p99 %.2f ms", lat[nlat / 2] * 1e3, lat[nlat * 99 / 100] * 1e3);
    }
    printf("\n");
}

static void sync_serial(size_t recsize, double raw)
{
    run_t r;
    run_open(&r, recsize, MQD_FLUSH_SYNC, 0);
    size_t cap = 1 << 20, nlat = 0;
    double *lat = malloc(cap * sizeof *lat), t0 = now_s(), t;
    uint64_t recs = 0, first;
    while ((t = now_s()) - t0 < secs) {
        if (mqd_plog_append(r.log, r.in, BATCH, &first) != 0 ||
            mqd_plog_wait_stable(r.log, first + BATCH) != 0)
            exit(1);
        if (nlat < cap)
            lat[nlat++] = now_s() - t;
        recs += BATCH;
    }
    report("store sync serial", recsize, recs, now_s() - t0, lat, nlat, raw);
    free(lat);
    run_close(&r);
}

/* The broker's shape: producers keep sending while earlier batches sync; the flusher
 * merges whatever commits queued up into one write + one fdatasync. */
static void sync_pipelined(size_t recsize, double raw)
{
    run_t r;
    run_open(&r, recsize, MQD_FLUSH_SYNC, 0);
    enum { INFLIGHT = 64 };
    size_t cap = 1 << 20, nlat = 0, head = 0, tail = 0;
    double *lat = malloc(cap * sizeof *lat), t0 = now_s(), sent[INFLIGHT];
    uint64_t ends[INFLIGHT], recs = 0, first;
    while (now_s() - t0 < secs || tail != head) {
        uint64_t stable = mqd_plog_stable_offset(r.log);
        while (tail != head && ends[tail % INFLIGHT] <= stable) {
            if (nlat < cap)
                lat[nlat++] = now_s() - sent[tail % INFLIGHT];
            tail++;
        }
        if (head - tail < INFLIGHT && now_s() - t0 < secs) {
            if (mqd_plog_append(r.log, r.in, BATCH, &first) != 0)
                exit(1);
            mqd_store_commit(r.st);
            sent[head % INFLIGHT] = now_s();
            ends[head % INFLIGHT] = first + BATCH;
            head++;
            recs += BATCH;
        } else {
            usleep(50);
        }
    }
    report("store sync pipelined", recsize, recs, now_s() - t0, lat, nlat, raw);
    free(lat);
    run_close(&r);
}

static void async_run(size_t recsize)
{
    run_t r;
    run_open(&r, recsize, MQD_FLUSH_ASYNC, 0);
    uint64_t recs = 0, first;
    double t0 = now_s();
    while (now_s() - t0 < secs) {
        for (int k = 0; k < 64; k++) {
            if (mqd_plog_append(r.log, r.in, BATCH, &first) != 0)
                exit(1);
            mqd_store_commit(r.st);
            recs += BATCH;
        }
    }
    if (mqd_plog_wait_stable(r.log, recs) != 0)
        exit(1);
    report("store async", recsize, recs, now_s() - t0, NULL, 0, 0);
    run_close(&r);
}

/* Child writes ~mib MiB in sync mode with big batches, then SIGKILLs itself: no clean
 * close, no final checkpoint. The parent times the reopen (recovery). */
static void recovery_run(uint64_t mib)
{
    char *d = mkdir_tmp();
    pid_t pid = fork();
    if (pid == 0) {
        run_t r;
        r.dir = d;
        mqd_plog_config_t c;
        mqd_plog_config_default(&c);
        c.segment_bytes = 2ull << 30; /* one segment: the worst case for a tail scan */
        uint8_t *payload = calloc(1, 1024);
        if (mqd_store_open(d, NULL, NULL, &r.st) != 0 ||
            mqd_store_log_open(r.st, "bench", 0, &c, &r.log) != 0)
            _exit(1);
        mqd_rec_in_t in[1024];
        for (int i = 0; i < 1024; i++)
            in[i] = (mqd_rec_in_t){payload, 1024, 0, 0, 0};
        uint64_t first = 0;
        for (uint64_t b = 0; b < mib; b++) {
            if (mqd_plog_append(r.log, in, 1024, &first) != 0)
                _exit(1);
            mqd_store_commit(r.st);
            if (b % 16 == 15 && mqd_plog_wait_stable(r.log, first + 1024) != 0)
                _exit(1);
        }
        mqd_plog_wait_stable(r.log, first + 1024);
        kill(getpid(), SIGKILL);
        _exit(1);
    }
    int status;
    waitpid(pid, &status, 0);
    if (!WIFSIGNALED(status)) {
        fprintf(stderr, "recovery child failed\n");
        exit(1);
    }
    mqd_store_t *st;
    mqd_plog_t *log;
    double t0 = now_s();
    if (mqd_store_open(d, NULL, NULL, &st) != 0 ||
        mqd_store_log_open(st, "bench", 0, NULL, &log) != 0)
        exit(1);
    double dt = now_s() - t0;
    printf("recovery: reopen of %.2f GiB log (%" PRIu64 " records) after SIGKILL: %.3f s\n",
           (double)mqd_plog_size_bytes(log) / (1 << 30), mqd_plog_end_offset(log), dt);
    mqd_store_close(st);
    /* Worst case: no usable checkpoint, so the whole last segment is scanned. */
    char ck[600];
    snprintf(ck, sizeof ck, "%s/topics/bench/0/recovery.ckpt", d);
    unlink(ck);
    t0 = now_s();
    if (mqd_store_open(d, NULL, NULL, &st) != 0 ||
        mqd_store_log_open(st, "bench", 0, NULL, &log) != 0)
        exit(1);
    printf("recovery: reopen without checkpoint (full CRC scan of the last segment): %.3f s\n",
           now_s() - t0);
    mqd_store_close(st);
    rm_rf(d);
    free(d);
}

int main(int argc, char **argv)
{
    int opt;
    uint64_t rec_mib = 1024;
    secs = 3;
    while ((opt = getopt(argc, argv, "d:s:r:")) != -1) {
        if (opt == 'd')
            root = optarg;
        else if (opt == 's')
            secs = atof(optarg);
        else if (opt == 'r')
            rec_mib = strtoull(optarg, NULL, 10);
        else {
            fprintf(stderr, "usage: %s [-d DIR] [-s SECONDS] [-r RECOVERY_MIB]\n", argv[0]);
            return 2;
        }
    }
    mqd_log_set_level(MQD_LOG_WARN);
    static const size_t sizes[] = {100, 1024};
    for (size_t i = 0; i < MQD_ARRAY_LEN(sizes); i++) {
        double raw = raw_bench(sizes[i]);
        sync_serial(sizes[i], raw);
        sync_pipelined(sizes[i], raw);
        async_run(sizes[i]);
    }
    if (rec_mib)
        recovery_run(rec_mib);
    return 0;
}
