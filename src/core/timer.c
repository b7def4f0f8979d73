/* The timer registry: a name, an interval and a callback per timer, each on its own
 * persistent libevent timer. Replaces the server's one 1 s callback that called a
 * hard-coded list of subsystems (and counted ticks for the 10 s ones). */
#include "config.h"
#include "core/core.h"
#include "core/core_int.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

typedef struct timer {
    char name[MQD_TIMER_NAME_MAX];
    uint32_t interval_ms;
    mqd_timer_fn fn;
    void *arg;
    uint64_t runs;
    struct event *ev;
} tmr_t;

struct mqd_timers {
    struct event_base *base;
    tmr_t **v; /* pointers: an event's argument must not move when the array grows */
    size_t n;
};

int mqd_timers_new(struct event_base *base, mqd_timers_t **out)
{
    mqd_timers_t *ts = calloc(1, sizeof *ts);
    if (ts == NULL)
        return MQD_ENOMEM;
    ts->base = base;
    *out = ts;
    return 0;
}

void mqd_timers_free(mqd_timers_t *ts)
{
    if (ts == NULL)
        return;
    for (size_t i = 0; i < ts->n; i++) {
        event_free(ts->v[i]->ev);
        free(ts->v[i]);
    }
    free(ts->v);
    free(ts);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    tmr_t *t = arg;
    t->runs++;
    t->fn(t->arg);
}

static bool name_taken(const mqd_timers_t *ts, const char *name)
{
    for (size_t i = 0; i < ts->n; i++)
        if (strcmp(ts->v[i]->name, name) == 0)
            return true;
    return false;
}

int mqd_timers_add(mqd_timers_t *ts, const char *name, uint32_t interval_ms, mqd_timer_fn fn,
                   void *arg)
{
    int rc = MQD_ENOMEM;
    if (name == NULL || name[0] == '\0' || strlen(name) >= MQD_TIMER_NAME_MAX || fn == NULL ||
        interval_ms == 0)
        return MQD_EINVAL;
    if (name_taken(ts, name))
        return MQD_EEXIST;
    tmr_t *t = calloc(1, sizeof *t);
    tmr_t **grown = t ? realloc(ts->v, (ts->n + 1) * sizeof *grown) : NULL;
    if (grown == NULL)
        goto err;
    ts->v = grown;
    strcpy(t->name, name);
    t->interval_ms = interval_ms;
    t->fn = fn;
    t->arg = arg;
    struct timeval tv = {.tv_sec = interval_ms / 1000, .tv_usec = (interval_ms % 1000) * 1000};
    t->ev = event_new(ts->base, -1, EV_PERSIST, on_timer, t);
    if (t->ev == NULL || event_add(t->ev, &tv) != 0)
        goto err;
    ts->v[ts->n++] = t;
    return 0;
err:
    if (t != NULL && t->ev != NULL)
        event_free(t->ev);
    free(t);
    return rc;
}

size_t mqd_timers_count(const mqd_timers_t *ts)
{
    return ts ? ts->n : 0;
}

int mqd_timers_get(const mqd_timers_t *ts, size_t i, const char **name, uint32_t *interval_ms,
                   uint64_t *runs)
{
    if (ts == NULL || i >= ts->n)
        return MQD_ENOENT;
    if (name)
        *name = ts->v[i]->name;
    if (interval_ms)
        *interval_ms = ts->v[i]->interval_ms;
    if (runs)
        *runs = ts->v[i]->runs;
    return 0;
}

void mqd_timers_log(const mqd_timers_t *ts)
{
    for (size_t i = 0; ts != NULL && i < ts->n; i++)
        MQD_DEBUG("server", "timer %s every %u ms", ts->v[i]->name,
                  (unsigned)ts->v[i]->interval_ms);
}
