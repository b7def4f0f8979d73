/* core/loop: what the model asks of the event loop — a connection's output wanted at the
 * end of the iteration (the dirty list and the tick), deferred work after the next poll,
 * timers. The connections' own I/O is conn.c's. */
#include "config.h"
#include "core/core.h"
#include "core/core_int.h"

void mqd_server_tick_soon(mqd_server_t *s)
{
    if (!s->tick_queued) {
        s->tick_queued = true;
        event_active(s->ev_tick, 0, 0);
    }
}

/* A zero timeout fires after the loop's next poll: work deferred to it cannot hold up
 * I/O, as re-activating the tick from inside the tick would. */
void mqd_server_later_soon(mqd_server_t *s)
{
    static const struct timeval zero = {0, 0};
    if (!evtimer_pending(s->ev_later, NULL))
        evtimer_add(s->ev_later, &zero);
}

void mqd_conn_mark_dirty(mqd_conn_t *c)
{
    if (c->closed)
        return;
    if (mqd_dlist_empty(&c->dirty_node))
        mqd_dlist_push(&c->srv->dirty, &c->dirty_node);
    mqd_server_tick_soon(c->srv);
}

int mqd_timer_add(mqd_server_t *s, const char *name, uint32_t interval_ms, mqd_timer_fn fn,
                  void *arg)
{
    return mqd_timers_add(s->timers, name, interval_ms, fn, arg);
}
