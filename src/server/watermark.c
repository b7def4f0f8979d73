/* Memory and disk watermarks (see watermark.h). */
#include "config.h"
#include "server/watermark.h"
#include "server/broker.h"
#include "util/util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>

struct mqd_watermark {
    uint64_t next_check_ns; /* monotonic; measure again at or after this */
    uint64_t rss, disk_free;
    bool mem_high, disk_low;
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
