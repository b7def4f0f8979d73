/* fwd/send: producers' messages forwarded per message to their partition's leader. */
#include "config.h"
#include "fwd/fwd_int.h"

int fwd_send_new(fwd_t *f)
{
    return 0;
}

void fwd_send_free(fwd_t *f)
{
}

void fwd_send_tick(fwd_t *f, int64_t now_ms)
{
}

void fwd_send_hooks(fwd_t *f, mqd_fwd_hooks_t *h)
{
}
