/* fwd: the subsystem's life (hooks registered on the server, the tick). */
#include "config.h"
#include "fwd/fwd_int.h"

#include <event2/event.h>
#include <stdlib.h>

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    fwd_t *f = arg;
    int64_t now = mqd_now_ms();
    fwd_pool_tick(f, now);
    fwd_send_tick(f, now);
    fwd_recv_tick(f, now);
    fwd_ext_tick(f, now);
}

int mqd_fwd_new(mqd_server_t *s, const mqd_conf_t *conf, mqd_repl_t *r, mqd_fwd_t **out)
{
    fwd_t *f = calloc(1, sizeof *f);
    if (!f)
        return MQD_ENOMEM;
    f->s = s;
    f->conf = conf;
    f->r = r;
    f->self = mqd_repl_self(r);
    f->ev_tick = event_new(mqd_server_base(s), -1, EV_PERSIST, on_tick, f);
    if (!f->ev_tick || fwd_send_new(f) != 0 || fwd_recv_new(f) != 0 ||
        fwd_ext_new(f) != 0 ||
        fwd_txn_new(f) != 0) {
        mqd_fwd_free(f);
        return MQD_ENOMEM;
    }
    struct timeval tv = {0, FWD_TICK_MS * 1000};
    event_add(f->ev_tick, &tv);
    mqd_fwd_hooks_t h = {.arg = f};
    fwd_send_hooks(f, &h);
    fwd_recv_hooks(f, &h);
    fwd_ext_hooks(f, &h);
    fwd_txn_hooks(f, &h);
    mqd_server_set_fwd(s, &h);
    mqd_repl_set_forwarding(r, true);
    *out = f;
    return 0;
}

void mqd_fwd_free(mqd_fwd_t *f)
{
    if (!f)
        return;
    mqd_fwd_hooks_t none = {0};
    mqd_server_set_fwd(f->s, &none);
    mqd_repl_set_forwarding(f->r, false);
    if (f->ev_tick)
        event_free(f->ev_tick);
    fwd_recv_free(f);
    fwd_ext_free(f);
    fwd_pool_free(f);
    fwd_send_free(f);
    fwd_txn_free(f);
    free(f);
}
