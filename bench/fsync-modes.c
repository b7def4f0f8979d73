/* fsync-modes: what one group commit costs the disk, by the way the file is written.
 *
 *   fsync-modes [-n N] [-b BYTES] [-d DIR] [-m MODE]
 *
 * Each mode writes N batches of BYTES (default 5000 x 14336: 14 messages of 1 KiB, the
 * batch of a 10k msgs/s stream) and makes each durable before the next, with 50 us
 * between batches, then prints p50/p90/p99/p99.9/max of write + sync in ms:
 *   append   pwrite at EOF + fdatasync (what mqd does: the size changes every batch, so
 *            every sync also commits the file system journal)
 *   zeroed   the file was filled with zeros and synced first; pwrite over them +
 *            fdatasync (no size or extent change: data and a device flush only)
 *   falloc   fallocate'd (unwritten extents) + pwrite + fdatasync (extent conversion is
 *            journalled: no better than append)
 *   direct   zeroed, O_DIRECT|O_DSYNC writes of whole 4 KiB blocks (a device without
 *            FUA still gets a flush per write)
 * DIR must be on the disk under test (default /tmp). docs/performance.md section 6 has the
 * figures and what they mean for the p99 target at 10k msgs/s.
 *
 *   fsync-modes -r RATE [-n N] [-s SIZE] [-d DIR] [-m MODE]
 *
 * The floor of a group commit at a message rate: N messages of SIZE bytes (default 1024)
 * fall due every 1/RATE s; one writer takes every message due, writes them with one
 * pwrite and makes them durable with one fdatasync (what mqd's flusher does, without a
 * broker, a network or a client), and the time from a message's due time to the end of
 * the sync that covered it is its latency. Modes as above; `direct` writes whole 4 KiB
 * blocks, the partial last block again with the next batch (a write-ahead log's way with
 * O_DIRECT). No broker can settle a durable message at a lower p99 on this disk at that
 * rate (docs/performance.md sections 12 and 13). -m runs one mode only (default: all
 * four). Not a test. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static void fill_zero(const char *path, size_t total, const void *zero)
{
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        die("open");
    for (size_t o = 0; o < total; o += 1 << 20)
        if (pwrite(fd, zero, 1 << 20, (off_t)o) != 1 << 20)
            die("pwrite zeros");
    if (fdatasync(fd) != 0)
        die("fdatasync");
    close(fd);
}

static void run(const char *mode, const char *dir, int n, size_t bs, const void *buf, const void *zero)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/fsync-modes.%d", dir, (int)getpid());
    bool direct = strcmp(mode, "direct") == 0;
    size_t step = direct ? (bs + 4095) & ~(size_t)4095 : bs;
    size_t total = (size_t)n * step + (8u << 20);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        die("open");
    if (direct || strcmp(mode, "zeroed") == 0)
        fill_zero(path, total, zero);
    else if (strcmp(mode, "falloc") == 0 && (fallocate(fd, 0, 0, (off_t)total) != 0 || fdatasync(fd) != 0))
        die("fallocate");
    if (direct) {
        close(fd);
        if ((fd = open(path, O_RDWR | O_DIRECT | O_DSYNC)) < 0)
            die("open O_DIRECT");
    }
    double *lat = malloc((size_t)n * sizeof *lat), sum = 0;
    if (!lat)
        die("malloc");
    for (int i = 0; i < n; i++) {
        double t = now_ms();
        if (pwrite(fd, buf, step, (off_t)((size_t)i * step)) != (ssize_t)step)
            die("pwrite");
        if (!direct && fdatasync(fd) != 0)
            die("fdatasync");
        lat[i] = now_ms() - t;
        sum += lat[i];
        usleep(50);
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp);
    printf("%-7s batch %zu B x %d: mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f ms\n",
           mode, bs, n, sum / n, lat[n / 2], lat[n * 9 / 10], lat[n * 99 / 100], lat[n * 999 / 1000],
           lat[n - 1]);
    free(lat);
    close(fd);
    unlink(path);
}

/* -r: messages fall due at a fixed rate; group commit by one writer (see the header). */
static void run_paced(const char *mode, const char *dir, int n, size_t msg, int rate,
                      const void *zero)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/fsync-modes.%d", dir, (int)getpid());
    size_t total = (size_t)n * msg;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        die("open");
    bool direct = strcmp(mode, "direct") == 0;
    if (direct || strcmp(mode, "zeroed") == 0)
        fill_zero(path, (total + (2u << 20)) & ~(size_t)((1u << 20) - 1), zero);
    else if (strcmp(mode, "falloc") == 0 &&
             (fallocate(fd, 0, 0, (off_t)total + (1 << 20)) != 0 || fdatasync(fd) != 0))
        die("fallocate");
    if (direct) {
        close(fd);
        if ((fd = open(path, O_RDWR | O_DIRECT | O_DSYNC)) < 0)
            die("open O_DIRECT");
    }
    size_t cap = 4u << 20;
    char *buf = NULL;
    if (posix_memalign((void **)&buf, 4096, cap + 8192))
        buf = NULL;
    double *lat = malloc((size_t)n * sizeof *lat);
    if (!buf || !lat)
        die("malloc");
    memset(buf, 'x', cap + 8192);
    double gap = 1000.0 / rate, t0 = now_ms() + 10, sum = 0;
    int done = 0;
    off_t pos = 0;
    while (done < n) {
        double now = now_ms();
        int due = now < t0 ? 0 : (int)((now - t0) / gap) + 1;
        if (due > n)
            due = n;
        if (due <= done)
            continue; /* spin to the next due time: the floor, not a sleep's wake-up */
        if ((size_t)(due - done) * msg > cap)
            due = done + (int)(cap / msg);
        size_t len = (size_t)(due - done) * msg;
        if (direct) {
            /* whole blocks from the one holding pos */
            off_t from = pos & ~(off_t)4095;
            size_t wlen = ((size_t)(pos - from) + len + 4095) & ~(size_t)4095;
            if (pwrite(fd, buf, wlen, from) != (ssize_t)wlen)
                die("pwrite");
        } else {
            if (pwrite(fd, buf, len, pos) != (ssize_t)len)
                die("pwrite");
            if (fdatasync(fd) != 0)
                die("fdatasync");
        }
        pos += (off_t)len;
        double end = now_ms();
        for (; done < due; done++) {
            lat[done] = end - (t0 + done * gap);
            sum += lat[done];
        }
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp);
    printf("%-7s %d msgs/s x %zu B, %d msgs: mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  "
           "max %.3f ms\n", mode, rate, msg, n, sum / n, lat[n / 2], lat[n * 9 / 10],
           lat[n * 99 / 100], lat[n * 999 / 1000], lat[n - 1]);
    free(lat);
    free(buf);
    close(fd);
    unlink(path);
}

int main(int argc, char **argv)
{
    int n = 5000, c, rate = 0;
    size_t bs = 14336, msg = 1024;
    const char *dir = "/tmp", *only = NULL;
    while ((c = getopt(argc, argv, "n:b:d:r:s:m:")) != -1) {
        switch (c) {
        case 'n': n = atoi(optarg); break;
        case 'b': bs = (size_t)atol(optarg); break;
        case 'd': dir = optarg; break;
        case 'r': rate = atoi(optarg); break;
        case 's': msg = (size_t)atol(optarg); break;
        case 'm': only = optarg; break;
        default:
            fprintf(stderr, "usage: fsync-modes [-n N] [-b BYTES] [-d DIR] [-m MODE]\n"
                            "       fsync-modes -r RATE [-n N] [-s SIZE] [-d DIR] [-m MODE]\n"
                            "MODE: append, zeroed, falloc or direct (default: each)\n");
            return 2;
        }
    }
    if (n < 10 || bs < 1 || bs > (1u << 20) || rate < 0 || rate > 10000000 || msg < 1 ||
        msg > (1u << 20)) {
        fprintf(stderr, "fsync-modes: -n >= 10, 1 <= -b <= 1048576, 0 <= -r <= 10000000, "
                        "1 <= -s <= 1048576\n");
        return 2;
    }
    void *buf, *zero;
    if (posix_memalign(&buf, 4096, 1 << 20) || posix_memalign(&zero, 4096, 1 << 20))
        die("posix_memalign");
    memset(buf, 'x', 1 << 20);
    memset(zero, 0, 1 << 20);
    const char *modes[] = {"append", "zeroed", "falloc", "direct"};
    size_t nrun = 0;
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        if (only && strcmp(only, modes[i]) != 0)
            continue;
        nrun++;
        if (rate > 0)
            run_paced(modes[i], dir, n, msg, rate, zero);
        else if (rate == 0)
            run(modes[i], dir, n, bs, buf, zero);
    }
    free(buf);
    free(zero);
    if (nrun == 0) {
        fprintf(stderr, "fsync-modes: -m %s: not a mode (append, zeroed, falloc, direct)\n", only);
        return 2;
    }
    return 0;
}
