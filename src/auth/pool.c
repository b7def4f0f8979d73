/* The login pool: threads that run the slow part of a SASL step (PBKDF2 for PLAIN)
 * away from the event loop. A PBKDF2 of 100,000 iterations costs ~50 ms of CPU; on the
 * loop, four clients that kept logging in made every other connection wait that long
 * per login (another login went from 4 ms to 277 ms).
 *
 * Jobs travel loop -> queue -> thread -> done list -> loop: the threads touch nothing
 * but the job; the loop takes finished jobs in on_done (woken with event_active, as the
 * store's flusher wakes it) and runs each job's `done` callback there. The number of
 * jobs in flight is bounded by the caller (auth_queue_max, auth_queue_per_ip), so an
 * unauthenticated client cannot queue unbounded work.
 *
 * A thread takes the queued job whose key (the peer's address) it served least often in
 * its last RECENT picks, the oldest among equals: with one address keeping its 8 logins
 * queued, a login from another address waits for about one check, not eight. */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdlib.h>

#define RECENT 64

struct mqd_auth_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mqd_auth_job_t *q_head, *q_tail; /* waiting for a thread (FIFO) */
    mqd_auth_job_t *done;            /* finished, for the loop (any order) */
    bool stop;
    uint64_t recent[RECENT]; /* keys of the last picks (ring) */
    size_t recent_i;
    pthread_t *threads;
    size_t n_threads;
    struct event *ev_done;
    size_t in_flight; /* loop thread only: submitted, not yet taken back */
};

/* Unlinks and returns the fairest queued job (see the top). Called with p->mu held. */
static mqd_auth_job_t *pick(mqd_auth_pool_t *p)
{
    mqd_auth_job_t **best = NULL, *prev = NULL, *best_prev = NULL;
    size_t best_n = SIZE_MAX;
    for (mqd_auth_job_t **jp = &p->q_head; *jp; prev = *jp, jp = &(*jp)->next) {
        size_t n = 0;
        for (size_t i = 0; i < RECENT; i++)
            n += p->recent[i] == (*jp)->key;
        if (n < best_n) {
            best_n = n;
            best = jp;
            best_prev = prev;
        }
    }
    mqd_auth_job_t *j = *best;
    *best = j->next;
    if (p->q_tail == j)
        p->q_tail = best_prev;
    p->recent[p->recent_i++ % RECENT] = j->key;
    return j;
}

static void *run(void *arg)
{
    mqd_auth_pool_t *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->q_head == NULL)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop)
            break;
        mqd_auth_job_t *j = pick(p);
        pthread_mutex_unlock(&p->mu);
        j->work(j);
        pthread_mutex_lock(&p->mu);
        j->next = p->done;
        p->done = j;
        event_active(p->ev_done, 0, 0); /* libevent runs with pthreads locking */
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
    mqd_auth_pool_t *p = arg;
    pthread_mutex_lock(&p->mu);
    mqd_auth_job_t *j = p->done;
    p->done = NULL;
    pthread_mutex_unlock(&p->mu);
    while (j != NULL) {
        mqd_auth_job_t *next = j->next;
        p->in_flight--;
        j->done(j, true);
        j = next;
    }
}

int mqd_auth_pool_new(struct event_base *base, size_t n_threads, mqd_auth_pool_t **out)
{
    mqd_auth_pool_t *p = calloc(1, sizeof *p);
    if (p == NULL)
        return MQD_ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->ev_done = event_new(base, -1, 0, on_done, p);
    p->threads = calloc(n_threads, sizeof *p->threads);
    if (p->ev_done == NULL || p->threads == NULL)
        goto err;
    for (; p->n_threads < n_threads; p->n_threads++)
        if (pthread_create(&p->threads[p->n_threads], NULL, run, p) != 0)
            goto err;
    *out = p;
    return 0;
err:
    mqd_auth_pool_free(p);
    return MQD_ENOMEM;
}

size_t mqd_auth_pool_in_flight(const mqd_auth_pool_t *p)
{
    return p->in_flight;
}

void mqd_auth_pool_submit(mqd_auth_pool_t *p, mqd_auth_job_t *j)
{
    j->next = NULL;
    p->in_flight++;
    pthread_mutex_lock(&p->mu);
    if (p->q_tail)
        p->q_tail->next = j;
    else
        p->q_head = j;
    p->q_tail = j;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Jobs not run or not taken back get done(j, false): their connections are released. */
static void drop_all(mqd_auth_job_t *j)
{
    while (j != NULL) {
        mqd_auth_job_t *next = j->next;
        j->done(j, false);
        j = next;
    }
}

void mqd_auth_pool_free(mqd_auth_pool_t *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    drop_all(p->q_head);
    drop_all(p->done);
    if (p->ev_done)
        event_free(p->ev_done);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}
