/* Messages stored in a partition, not offsets: transaction markers (and the records
 * mqd_plog_read makes up for damage) hold an offset but are no message. Their offsets
 * are kept per partition, ascending: appends add theirs, and a census reads the log as
 * it was opened, a slice at a time between other events, so the counts are the same
 * after a restart. Markers are rare (one per transaction and partition), so a sorted
 * array is small. A clean stop saves each exact census in meta.db (kv "census/T/N"),
 * so the next start reads only what was appended after it; after a crash the census
 * also starts from the last save (everything after it is read again). */
#include "config.h"
#include "core/core.h"
#include "core/core_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest one census slice keeps the loop (as topic creation does). */
#define CENSUS_SLICE_MS 20
#define CENSUS_RECORDS 4096

struct mqd_census {
    struct event *ev;
    mqd_read_t rd;
};

static bool is_message(uint32_t flags)
{
    return (flags & MQD_REC_KIND_MASK) == MQD_REC_DATA;
}

/* Index of the first kept offset >= off. */
static size_t lower_bound(const mqd_part_t *p, uint64_t off)
{
    size_t lo = 0, hi = p->ctl.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->ctl.off[mid] < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Inserts off at index at; MQD_ENOMEM leaves the count an estimate (logged once). */
static int insert_at(mqd_part_t *p, size_t at, uint64_t off)
{
    if (p->ctl.n == p->ctl.cap) {
        size_t ncap = p->ctl.cap ? p->ctl.cap * 2 : 16;
        uint64_t *no = realloc(p->ctl.off, ncap * sizeof *no);
        if (!no)
            return MQD_ENOMEM;
        p->ctl.off = no;
        p->ctl.cap = ncap;
    }
    memmove(&p->ctl.off[at + 1], &p->ctl.off[at], (p->ctl.n - at) * sizeof *p->ctl.off);
    p->ctl.off[at] = off;
    p->ctl.n++;
    return 0;
}

/* Offsets below the log's start went with retention: dropped once they are most. */
static void prune(mqd_part_t *p)
{
    size_t below = lower_bound(p, mqd_plog_start_offset(p->log));
    if (below == 0 || below * 2 < p->ctl.n)
        return;
    memmove(p->ctl.off, &p->ctl.off[below], (p->ctl.n - below) * sizeof *p->ctl.off);
    p->ctl.n -= below;
    p->ctl.census_n = p->ctl.census_n > below ? p->ctl.census_n - below : 0;
}

static void census_key(const mqd_part_t *p, char *buf, size_t len);
static void census_forget_part(mqd_server_t *s, const mqd_part_t *p);

void mqd_part_count_append(mqd_part_t *p, uint64_t off, uint32_t flags)
{
    /* a truncated tail (a follower, a resume) is written again from off: what it held,
     * in memory and in the count saved by the last stop, is no longer there */
    if (off < p->ctl.next) {
        while (p->ctl.n > 0 && p->ctl.off[p->ctl.n - 1] >= off)
            p->ctl.n--;
        if (p->ctl.census_n > p->ctl.n)
            p->ctl.census_n = p->ctl.n;
        if (p->ctl.census_end > off)
            p->ctl.census_end = off;
        census_forget_part(p->topic->srv, p);
    }
    p->ctl.next = off + 1;
    if (is_message(flags))
        return;
    prune(p);
    if (insert_at(p, p->ctl.n, off) != 0)
        p->ctl.lost = true;
}

uint64_t mqd_part_messages(const mqd_part_t *p, uint64_t from, uint64_t to)
{
    uint64_t start = mqd_plog_start_offset(p->log);
    if (from < start)
        from = start;
    if (to <= from)
        return 0;
    size_t ctl = lower_bound(p, to) - lower_bound(p, from);
    return to - from - ctl;
}

bool mqd_part_count_exact(const mqd_part_t *p)
{
    return p->ctl.census_at >= p->ctl.census_end && !p->ctl.lost;
}

static void census_key(const mqd_part_t *p, char *buf, size_t len)
{
    snprintf(buf, len, "census/%s/%u", p->topic->name, p->id);
}

/* The saved census "1 END N OFF..." replaces reading [start, END). A deleted topic's are
 * blanked (mqd_topic_census_forget), so a topic made again under its name reads its log. */
static void census_load(mqd_part_t *p)
{
    char key[MQD_NAME_MAX + 32], *v = NULL;
    census_key(p, key, sizeof key);
    if (mqd_meta_kv_get(p->topic->srv->meta, key, &v) != 0)
        return;
    size_t at = p->ctl.census_n;
    uint64_t saved_end, n;
    int used = 0;
    bool ok = sscanf(v, "1 %" SCNu64 " %" SCNu64 "%n", &saved_end, &n, &used) == 2;
    const char *q = v + used;
    uint64_t upto = ok && saved_end < p->ctl.census_end ? saved_end : p->ctl.census_end;
    for (uint64_t i = 0; ok && i < n; i++) {
        char *end;
        uint64_t off = strtoull(q, &end, 10);
        ok = end != q;
        q = end;
        if (!ok || off < p->ctl.census_at || off >= upto)
            continue;
        ok = insert_at(p, p->ctl.census_n, off) == 0;
        p->ctl.census_n += ok;
    }
    if (ok && upto > p->ctl.census_at)
        p->ctl.census_at = upto;
    if (ok)
        MQD_DEBUG("topic", "%s/%u: counted up to offset %" PRIu64 " by the last stop",
                  p->topic->name, p->id, upto);
    if (!ok && p->ctl.census_n > at) { /* damaged (or no memory): the log is read instead */
        memmove(&p->ctl.off[at], &p->ctl.off[p->ctl.census_n],
                (p->ctl.n - p->ctl.census_n) * sizeof *p->ctl.off);
        p->ctl.n -= p->ctl.census_n - at;
        p->ctl.census_n = at;
    }
    free(v);
}

/* Reads part of p's census range; false when time ran out first. */
static bool census_part(mqd_census_t *cs, mqd_part_t *p, int64_t until)
{
    if (!p->ctl.loaded && p->ctl.census_at < p->ctl.census_end) {
        p->ctl.loaded = true;
        census_load(p);
    }
    while (p->ctl.census_at < p->ctl.census_end) {
        if (mqd_now_ms() >= until)
            return false;
        uint64_t start = mqd_plog_start_offset(p->log);
        if (p->ctl.census_at < start)
            p->ctl.census_at = start;
        int rc = mqd_plog_read(p->log, p->ctl.census_at, p->ctl.census_end, CENSUS_RECORDS,
                               1u << 20, &cs->rd);
        if (rc == MQD_ERANGE)
            continue; /* retention moved the start */
        if (rc != 0 || cs->rd.n == 0) {
            if (rc != MQD_EAGAIN) { /* failed log: counts from what was read */
                p->ctl.lost = true;
                p->ctl.census_at = p->ctl.census_end;
            }
            return rc != MQD_EAGAIN;
        }
        for (size_t i = 0; i < cs->rd.n; i++) {
            if (is_message(cs->rd.recs[i].flags))
                continue;
            if (insert_at(p, p->ctl.census_n, cs->rd.recs[i].offset) != 0)
                p->ctl.lost = true;
            else
                p->ctl.census_n++;
        }
        p->ctl.census_at = cs->rd.next_offset;
    }
    return true;
}

static void census_step(evutil_socket_t fd, short what, void *arg)
{
    mqd_server_t *s = arg;
    mqd_census_t *cs = s->census;
    int64_t until = mqd_now_ms() + CENSUS_SLICE_MS;
    bool more = false;
    for (size_t i = 0; i < s->topics_cap && !more; i++)
        for (mqd_topic_t *t = s->topics[i]; t && !more; t = t->hnext)
            for (uint32_t k = 0; k < t->nparts && !more; k++)
                more = !census_part(cs, t->parts[k], until);
    if (more) {
        struct timeval next = {0, 1000}; /* a poll for I/O between slices */
        event_add(cs->ev, &next);
    } else {
        mqd_read_free(&cs->rd);
        mqd_read_init(&cs->rd);
    }
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
}

int mqd_part_count_open(mqd_part_t *p)
{
    mqd_server_t *s = p->topic->srv;
    memset(&p->ctl, 0, sizeof p->ctl);
    p->ctl.census_at = mqd_plog_start_offset(p->log);
    p->ctl.census_end = p->ctl.next = mqd_plog_end_offset(p->log);
    if (p->ctl.census_at >= p->ctl.census_end)
        return 0;
    if (!s->census) {
        mqd_census_t *cs = calloc(1, sizeof *cs);
        if (!cs || !(cs->ev = evtimer_new(s->base, census_step, s))) {
            free(cs);
            p->ctl.lost = true;
            return MQD_ENOMEM;
        }
        mqd_read_init(&cs->rd);
        s->census = cs;
    }
    if (!evtimer_pending(s->census->ev, NULL)) {
        struct timeval now = {0, 0};
        event_add(s->census->ev, &now);
    }
    return 0;
}

void mqd_part_count_free(mqd_part_t *p)
{
    free(p->ctl.off);
    memset(&p->ctl, 0, sizeof p->ctl);
}

void mqd_census_free(mqd_server_t *s)
{
    if (!s->census)
        return;
    event_free(s->census->ev);
    mqd_read_free(&s->census->rd);
    free(s->census);
    s->census = NULL;
}

/* One partition's census as census_load reads it; MQD_ENOMEM. */
static int census_save_one(mqd_server_t *s, const mqd_part_t *p)
{
    size_t cap = 64 + p->ctl.n * 21, len;
    char *v = malloc(cap), key[MQD_NAME_MAX + 32];
    if (!v)
        return MQD_ENOMEM;
    uint64_t end = mqd_plog_end_offset(p->log);
    size_t from = lower_bound(p, mqd_plog_start_offset(p->log)), to = lower_bound(p, end);
    len = (size_t)snprintf(v, cap, "1 %" PRIu64 " %zu", end, to - from);
    for (size_t i = from; i < to && len < cap; i++)
        len += (size_t)snprintf(v + len, cap - len, " %" PRIu64, p->ctl.off[i]);
    census_key(p, key, sizeof key);
    int rc = mqd_meta_kv_put(s->meta, key, v);
    free(v);
    return rc;
}

void mqd_topics_census_save(mqd_server_t *s)
{
    if (!s->meta || mqd_meta_begin(s->meta) != 0)
        return;
    size_t saved = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < s->topics_cap; i++)
        for (mqd_topic_t *t = s->topics[i]; rc == 0 && t; t = t->hnext)
            for (uint32_t k = 0; rc == 0 && !t->temporary && k < t->nparts; k++)
                if (mqd_part_count_exact(t->parts[k])) {
                    rc = census_save_one(s, t->parts[k]);
                    saved += rc == 0;
                }
    if (rc != 0 || mqd_meta_commit(s->meta) != 0) {
        mqd_meta_rollback(s->meta); /* the next start reads the logs whole: slower, exact */
        MQD_WARN("topic", "cannot save the message counts: %s", mqd_strerror(rc ? rc : MQD_EDB));
        return;
    }
    MQD_DEBUG("topic", "saved the message counts of %zu partitions", saved);
}

static void census_forget_part(mqd_server_t *s, const mqd_part_t *p)
{
    char key[MQD_NAME_MAX + 32], *v = NULL;
    census_key(p, key, sizeof key);
    if (s->meta && mqd_meta_kv_get(s->meta, key, &v) == 0 && *v)
        mqd_meta_kv_put(s->meta, key, ""); /* meta.db has no kv delete; "" reads as none */
    free(v);
}

void mqd_topic_census_forget(mqd_server_t *s, const mqd_topic_t *t)
{
    for (uint32_t k = 0; k < t->nparts; k++)
        census_forget_part(s, t->parts[k]);
}
