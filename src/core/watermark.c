/* Memory and disk watermarks (see watermark.h). */
#include "config.h"
#include "core/core.h"
#include "core/core_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>

struct mqd_watermark {
    uint64_t next_check_ns; /* monotonic; measure again at or after this */
    uint64_t rss, disk_free;
    bool mem_high, disk_low;
    uint64_t taken_cur;  /* bytes let into the store since the last measurement */
    uint64_t taken_prev; /* and in the interval before (maybe not written by then) */
    uint64_t producers;  /* producer links sharing the credit budget */
    uint64_t reserved;   /* their credit x message size, as of each one's last window */
};

/* Resident set size from /proc/self/statm (second field, in pages); UINT64_MAX if the
 * file cannot be read. A short read of a small procfs file: no allocation. */
static uint64_t read_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "re");
    unsigned long long size, resident;
    long page = sysconf(_SC_PAGESIZE);
    int n;

    if (f == NULL)
        return UINT64_MAX;
    n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    if (n != 2 || page <= 0)
        return UINT64_MAX;
    return (uint64_t)resident * (uint64_t)page;
}

static uint64_t read_disk_free(const char *dir)
{
    struct statvfs v;

    if (dir == NULL || statvfs(dir, &v) != 0)
        return UINT64_MAX;
    /* f_bavail: what an unprivileged writer may still use */
    return (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
}

static void set_state(bool *flag, bool now, const char *what, uint64_t value, uint64_t limit)
{
    if (*flag == now)
        return;
    *flag = now;
    if (now)
        MQD_WARN("watermark",
                 "%s %" PRIu64 " bytes crosses the limit of %" PRIu64
                 ": producers get no credit until it clears",
                 what, value, limit);
    else
        MQD_NOTICE("watermark",
                   "%s %" PRIu64 " bytes is back within %" PRIu64 ": producers get credit again",
                   what, value, limit);
}

static void measure(struct mqd_server *s, struct mqd_watermark *w)
{
    uint64_t mem_high = s->conf->memory_high_watermark;
    uint64_t disk_min = s->conf->disk_free_limit;

    /* what was let in during the interval before this measurement may still be on its
     * way to the file (a group commit's write); what is older is in disk_free */
    w->taken_prev = w->taken_cur;
    w->taken_cur = 0;
    w->rss = mem_high ? read_rss() : UINT64_MAX;
    w->disk_free = disk_min ? read_disk_free(s->conf->data_dir) : UINT64_MAX;
    /* an unreadable value never blocks: it is not evidence of pressure */
    set_state(&w->mem_high, mem_high && w->rss != UINT64_MAX && w->rss > mem_high,
              "resident memory", w->rss, mem_high);
    set_state(&w->disk_low, disk_min && w->disk_free < disk_min, "free disk on data_dir",
              w->disk_free, disk_min);
}

int mqd_watermark_init(struct mqd_server *s)
{
    struct mqd_watermark *w = calloc(1, sizeof *w);

    if (w == NULL)
        return MQD_ENOMEM;
    measure(s, w);
    w->next_check_ns = mqd_mono_ns() + MQD_WATERMARK_INTERVAL_MS * UINT64_C(1000000);
    s->watermark = w;
    return 0;
}

void mqd_watermark_free(struct mqd_server *s)
{
    free(s->watermark);
    s->watermark = NULL;
}

bool mqd_watermark_blocked(struct mqd_server *s)
{
    struct mqd_watermark *w = s->watermark;
    uint64_t now;

    if (w == NULL)
        return false;
    now = mqd_mono_ns();
    if (now >= w->next_check_ns) {
        measure(s, w);
        w->next_check_ns = now + MQD_WATERMARK_INTERVAL_MS * UINT64_C(1000000);
    }
    return w->mem_high || w->disk_low;
}

void mqd_watermark_usage(struct mqd_server *s, uint64_t *rss, uint64_t *disk_free)
{
    struct mqd_watermark *w = s->watermark;

    if (rss)
        *rss = w ? w->rss : UINT64_MAX;
    if (disk_free)
        *disk_free = w ? w->disk_free : UINT64_MAX;
}

/* ---------------------------------------------------------------- the disk budget
 *
 * Credit cannot be taken back (transfers may be on the wire), so what a watermark that
 * only stops new credit leaves open is every credit already granted times the largest
 * message: 1,000 credit of 512 KiB messages filled a disk far past the limit. Two rules
 * close it (docs/security.md, Limits):
 *   - the store: a message is let in only if the free space last measured, less what
 *     was let in since, less the message, stays at or above disk_free_limit; else it is
 *     refused (amqp:resource-limit-exceeded), not stored. What a flusher had not written
 *     yet at the measurement is the only thing this misses (the bound stated there);
 *   - the credit: a producer link is granted credit only while its outstanding credit
 *     times its largest message so far (max_message_size before its first) is within
 *     its share of half the headroom above the limit (half / the producer links open)
 *     and, with what the other links hold (`reserved`), within that half, counted
 *     cautiously (what was let in during the interval before the measurement
 *     too, in case it was not written by then). Near the limit credit comes in ever
 *     smaller windows, and producers wait instead of meeting the first rule (a link
 *     with no credit gets one while its share holds one message, or 64 KiB if it has
 *     sent none yet, so a share smaller than max_message_size stalls no one, not
 *     even next to an idle link holding much credit). So what producers hold stays
 *     within the headroom (half in windows, at most half in those single credits), and
 *     the first rule only catches what a measurement missed. */
static uint64_t headroom(struct mqd_server *s, struct mqd_watermark *w, bool cautious)
{
    uint64_t limit = s->conf->disk_free_limit;
    uint64_t taken = w->taken_cur + (cautious ? w->taken_prev : 0);

    if (w->disk_free == UINT64_MAX)
        return UINT64_MAX;
    if (w->disk_free <= limit || w->disk_free - limit <= taken)
        return 0;
    return w->disk_free - limit - taken;
}

bool mqd_watermark_disk_take(struct mqd_server *s, uint64_t bytes)
{
    struct mqd_watermark *w = s->watermark;

    if (w == NULL || s->conf->disk_free_limit == 0)
        return true;
    (void)mqd_watermark_blocked(s); /* a fresh measurement if one is due */
    uint64_t room = headroom(s, w, false);
    if (room != UINT64_MAX && room < bytes)
        return false;
    w->taken_cur += bytes;
    return true;
}

static uint32_t window(struct mqd_server *s, struct mqd_watermark *w, uint32_t want, uint64_t held,
                       uint64_t est, uint64_t first)
{
    if (want == 0 || mqd_watermark_blocked(s))
        return 0;
    uint64_t room = s->conf->disk_free_limit ? headroom(s, w, true) : UINT64_MAX;
    if (room == UINT64_MAX)
        return want;
    uint64_t share = room / 2 / (w->producers ? w->producers : 1);
    uint64_t pool = room / 2 > w->reserved ? room / 2 - w->reserved : 0;
    uint64_t allowed = (share < pool ? share : pool) / est;
    if (allowed <= held) /* one at a time while it fits the share: no one starves */
        return held == 0 && share >= first;
    return allowed - held < want ? (uint32_t)(allowed - held) : want;
}

uint32_t mqd_watermark_window(struct mqd_server *s, uint32_t want, int have, uint64_t msg_bytes,
                              uint64_t *reserved)
{
    struct mqd_watermark *w = s->watermark;
    uint64_t held = have > 0 ? (uint64_t)have : 0;
    /* a link that has sent nothing yet: its messages may be as large as allowed */
    uint64_t est = msg_bytes ? msg_bytes : s->conf->max_message_size + MQD_WATERMARK_REC_OVERHEAD;

    if (w == NULL)
        return want;
    w->reserved -= *reserved < w->reserved ? *reserved : w->reserved; /* the others' only */
    uint64_t first = msg_bytes ? msg_bytes : MQD_WATERMARK_FIRST_BYTES;
    uint32_t n = window(s, w, want, held, est, first);
    uint64_t units = held + n;
    if (units == 1 && msg_bytes == 0)
        est = first; /* the single credit of a link still unknown: sized as granted */
    *reserved = units > UINT64_MAX / est ? UINT64_MAX / 2 : units * est;
    w->reserved += *reserved;
    return n;
}

void mqd_watermark_producers(struct mqd_server *s, int delta, uint64_t reserved)
{
    struct mqd_watermark *w = s->watermark;

    if (w == NULL)
        return;
    w->reserved -= reserved < w->reserved ? reserved : w->reserved;
    if (delta < 0 && w->producers < (uint64_t)-delta)
        w->producers = 0;
    else
        w->producers = (uint64_t)((int64_t)w->producers + delta);
}
