/* core/srv: the server struct's life. server/ (the composition root) makes it here,
 * fills in what the subsystems above hold and frees it here last; the loop events core
 * runs on it (the store's wake, the tick, the deferred dispatch) and the timer registry
 * are made here on server/'s event base. */
#include "config.h"
#include "core/core_int.h"

#include <stdlib.h>
#include <string.h>

mqd_server_t *mqd_core_server_alloc(mqd_conf_t *conf, const char *conf_path)
{
    mqd_server_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->conf = conf;
    s->started_ms = mqd_now_ms();
    s->nofile = mqd_fd_nofile_now();
    s->conf_path = conf_path ? strdup(conf_path) : NULL;
    mqd_dlist_init(&s->conns);
    mqd_dlist_init(&s->dirty);
    mqd_dlist_init(&s->dispatch_q);
    mqd_dlist_init(&s->dispatch_later);
    mqd_dlist_init(&s->graveyard);
    mqd_dlist_init(&s->outconns);
    mqd_dlist_init(&s->builds);
    mqd_dlist_init(&s->drains);
    mqd_read_init(&s->browse_rd);
    if (mqd_conf_hooks_new(&s->conf_hooks) != 0) {
        mqd_core_server_free(s);
        return NULL;
    }
    return s;
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    mqd_server_t *s = arg;
    /* cleared before the dispatch, so that a wake during it stays pending */
    __atomic_store_n(&s->wake_pending, 0, __ATOMIC_RELEASE);
    mqd_store_dispatch(s->store);
    mqd_server_tick_soon(s);
}

void mqd_core_server_wake(void *arg)
{
    mqd_server_t *s = arg;
    __atomic_store_n(&s->wake_pending, 1, __ATOMIC_RELEASE);
    event_active(s->ev_wake, 0, 0);
}

int mqd_core_server_loop(mqd_server_t *s, struct event_base *base, event_callback_fn on_tick,
                         event_callback_fn on_later)
{
    s->base = base;
    s->ev_wake = event_new(base, -1, 0, on_wake, s);
    s->ev_tick = event_new(base, -1, 0, on_tick, s);
    s->ev_later = evtimer_new(base, on_later, s);
    event_priority_set(s->ev_wake, MQD_PRIO_IO);
    event_priority_set(s->ev_tick, MQD_PRIO_IO); /* after the iteration's I/O all the same */
    return mqd_timers_new(base, &s->timers);
}

void mqd_core_server_loop_free(mqd_server_t *s)
{
    if (s->ev_wake)
        event_free(s->ev_wake);
    if (s->ev_tick)
        event_free(s->ev_tick);
    if (s->ev_later)
        event_free(s->ev_later);
    mqd_timers_free(s->timers);
}

void mqd_core_server_free(mqd_server_t *s)
{
    mqd_buf_free(&s->scratch);
    mqd_buf_free(&s->mgmt_out);
    mqd_read_free(&s->browse_rd);
    free(s->conf_path);
    mqd_conf_hooks_free(s->conf_hooks);
    free(s);
}
