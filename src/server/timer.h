/* server internals: the timer registry (timer.c). Each subsystem registers its own
 * periodic work with mqd_timer_add (server.h) when it starts; the server no longer
 * knows the list. Every timer is one persistent libevent timer on the server's loop, so
 * a timer runs outside any connection's handler, between loop iterations' I/O. */
#ifndef MQD_SERVER_TIMER_H
#define MQD_SERVER_TIMER_H

#include "server/server.h"

#include <stddef.h>
#include <stdint.h>

struct event_base;
typedef struct mqd_timers mqd_timers_t;

int mqd_timers_new(struct event_base *base, mqd_timers_t **out);
/* Deletes every timer's event (none runs after it) and frees the registry. */
void mqd_timers_free(mqd_timers_t *ts);
/* Adds a timer that runs fn(arg) every interval_ms from now on. The name is copied (at
 * most MQD_TIMER_NAME_MAX - 1 characters). MQD_EINVAL for interval 0, an empty or too
 * long name or no fn; MQD_EEXIST if the name is taken; MQD_ENOMEM. */
int mqd_timers_add(mqd_timers_t *ts, const char *name, uint32_t interval_ms, mqd_timer_fn fn,
                   void *arg);
#define MQD_TIMER_NAME_MAX 48
size_t mqd_timers_count(const mqd_timers_t *ts);
/* Timer i (in the order added): its name, interval and how often it ran. */
int mqd_timers_get(const mqd_timers_t *ts, size_t i, const char **name, uint32_t *interval_ms,
                   uint64_t *runs);
/* Writes one debug line per timer ("timer NAME every N ms"). */
void mqd_timers_log(const mqd_timers_t *ts);

#endif
