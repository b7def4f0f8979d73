/* Duplicate detection by message-id within a topic's dedup_window_ms: a producer that
 * resends after a lost disposition is accepted without a second copy being stored.
 * The window is kept in memory (a hash of message-id bytes, expired in arrival order),
 * so it starts empty after a restart. */
#include "config.h"
#include "server/broker.h"

#include <stdlib.h>
#include <string.h>

typedef struct dedup_ent {
    uint64_t h;  /* 0 = empty slot */
    int64_t ts;
} dedup_ent_t;

struct mqd_dedup {
    dedup_ent_t *tab;  /* open addressing */
    size_t cap, n;
    uint64_t *fifo;    /* hashes in arrival order (ring) */
    int64_t *fifo_ts;
    size_t head, len, fcap;
};

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h ? h : 1;
}

static dedup_ent_t *find(struct mqd_dedup *d, uint64_t h)
{
    size_t i = (size_t)(h * 0x9E3779B97F4A7C15ull >> 11) & (d->cap - 1);
    while (d->tab[i].h && d->tab[i].h != h)
        i = (i + 1) & (d->cap - 1);
    return &d->tab[i];
}

/* Removes a key, keeping the probe chains of open addressing intact. */
static void erase(struct mqd_dedup *d, uint64_t h)
{
    dedup_ent_t *e = find(d, h);
    if (!e->h)
        return;
    size_t i = (size_t)(e - d->tab);
    d->tab[i].h = 0;
    d->n--;
    for (size_t j = (i + 1) & (d->cap - 1); d->tab[j].h; j = (j + 1) & (d->cap - 1)) {
        dedup_ent_t moved = d->tab[j];
        d->tab[j].h = 0;
        *find(d, moved.h) = moved;
    }
}

static int grow(struct mqd_dedup *d)
{
    size_t ncap = d->cap ? d->cap * 2 : 1024;
    dedup_ent_t *old = d->tab;
    size_t ocap = d->cap;
    d->tab = calloc(ncap, sizeof *d->tab);
    if (!d->tab) {
        d->tab = old;
        return MQD_ENOMEM;
    }
    d->cap = ncap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].h)
            *find(d, old[i].h) = old[i];
    free(old);
    uint64_t *nf = malloc(ncap * sizeof *nf);
    int64_t *nt = malloc(ncap * sizeof *nt);
    if (!nf || !nt) {
        free(nf);
        free(nt);
        return MQD_ENOMEM;
    }
    for (size_t i = 0; i < d->len; i++) {
        nf[i] = d->fifo[(d->head + i) % d->fcap];
        nt[i] = d->fifo_ts[(d->head + i) % d->fcap];
    }
    free(d->fifo);
    free(d->fifo_ts);
    d->fifo = nf;
    d->fifo_ts = nt;
    d->head = 0;
    d->fcap = ncap;
    return 0;
}

static void expire(struct mqd_dedup *d, int64_t now, int64_t window)
{
    while (d->len && now - d->fifo_ts[d->head] > window) {
        uint64_t h = d->fifo[d->head];
        dedup_ent_t *e = find(d, h);
        if (e->h && e->ts == d->fifo_ts[d->head])
            erase(d, h);
        d->head = (d->head + 1) % d->fcap;
        d->len--;
    }
}

bool mqd_dedup_seen(mqd_topic_t *t, const uint8_t *msg, const mqd_msg_info_t *mi)
{
    if (mi->message_id.len == 0)
        return false;
    if (!t->dedup && !(t->dedup = calloc(1, sizeof *t->dedup)))
        return false;
    struct mqd_dedup *d = t->dedup;
    int64_t now = mqd_now_ms();
    if (d->cap)
        expire(d, now, t->conf.dedup_window_ms);
    if ((d->n + 1) * 2 > d->cap && grow(d) != 0)
        return false;
    uint64_t h = hash_bytes(msg + mi->message_id.off, mi->message_id.len);
    dedup_ent_t *e = find(d, h);
    if (e->h) {
        t->msgs_duplicate++;
        return true;
    }
    e->h = h;
    e->ts = now;
    d->n++;
    d->fifo[(d->head + d->len) % d->fcap] = h;
    d->fifo_ts[(d->head + d->len) % d->fcap] = now;
    d->len++;
    return false;
}

void mqd_dedup_free(mqd_topic_t *t)
{
    if (!t->dedup)
        return;
    free(t->dedup->tab);
    free(t->dedup->fifo);
    free(t->dedup->fifo_ts);
    free(t->dedup);
    t->dedup = NULL;
}
