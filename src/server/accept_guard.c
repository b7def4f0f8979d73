/* accept() at the descriptor limit (EMFILE/ENFILE).
 *
 * libevent's listener calls its error callback and stays enabled, so a listener whose
 * backlog cannot be accepted is readable forever: the loop spun on it, logging
 * "accept(): Too many open files" at full speed, while each waiting client timed out
 * in its handshake. Here the first failure gives up a descriptor held in reserve for
 * this (the libevent/nginx trick), accepts and closes what waits, and takes the
 * reserve again. If the reserve cannot be had (some other thread took the slot), the
 * listeners pause for ACCEPT_PAUSE_MS instead. */
#include "config.h"
#include "server/server_int.h"

#include <errno.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ACCEPT_PAUSE_MS 100
#define SHED_MAX 256 /* connections closed per callback: the backlog is 512 */

struct mqd_accept_guard {
    mqd_server_t *s;
    int reserve;            /* /dev/null, or -1 while given up */
    struct event *resume;   /* re-enables paused listeners */
    bool paused;
    uint64_t shed;          /* connections closed at accept */
    int64_t logged_ms;      /* last log line */
    uint64_t quiet;         /* failures since it */
};

static int take_reserve(void)
{
    return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct mqd_accept_guard *g = arg;
    g->paused = false;
    if (g->reserve < 0)
        g->reserve = take_reserve();
    mqd_listener_t *li = mqd_srv_listeners(g->s);
    for (size_t i = 0; !mqd_srv_stopping(g->s) && i < mqd_srv_n_listeners(g->s); i++)
        evconnlistener_enable(li[i].l);
}

int mqd_accept_guard_init(mqd_server_t *s)
{
    struct mqd_accept_guard *g = calloc(1, sizeof *g);
    if (!g)
        return MQD_ENOMEM;
    g->s = s;
    g->reserve = take_reserve();
    g->resume = evtimer_new(mqd_srv_base(s), on_resume, g);
    if (g->reserve < 0 || !g->resume) {
        if (g->reserve >= 0)
            close(g->reserve);
        if (g->resume)
            event_free(g->resume);
        free(g);
        return MQD_EIO;
    }
    mqd_srv_set_accept_guard(s, g);
    return 0;
}

void mqd_accept_guard_free(mqd_server_t *s)
{
    struct mqd_accept_guard *g = mqd_srv_accept_guard(s);
    if (!g)
        return;
    if (g->reserve >= 0)
        close(g->reserve);
    event_free(g->resume);
    free(g);
    mqd_srv_set_accept_guard(s, NULL);
}

/* The budget is core's (fdroom.c): connections never take the store's headroom. */
bool mqd_accept_admit(mqd_server_t *s, int fd)
{
    struct mqd_accept_guard *g = mqd_srv_accept_guard(s);
    mqd_fd_budget_t b;
    if (!g || mqd_fd_admit(s, fd, &b))
        return true;
    g->shed++;
    int64_t now = mqd_now_ms();
    g->quiet++;
    if (now - g->logged_ms >= 1000) {
        MQD_WARN("conn",
                 "refused: descriptor %d of %llu, %llu kept for partition files and "
                 "%d spare (%llu refused since the last report; see max_open_files and "
                 "RLIMIT_NOFILE)",
                 fd, (unsigned long long)b.nofile, (unsigned long long)b.head, MQD_FD_SPARE,
                 (unsigned long long)g->quiet);
        g->logged_ms = now;
        g->quiet = 0;
    }
    return false;
}

/* Accepts and closes what waits on fd, up to SHED_MAX; how many. */
static unsigned shed(int fd)
{
    unsigned n = 0;
    while (n < SHED_MAX) {
        int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0)
            break;
        close(c);
        n++;
    }
    return n;
}

static void pause_listeners(struct mqd_accept_guard *g)
{
    if (g->paused)
        return;
    mqd_listener_t *li = mqd_srv_listeners(g->s);
    for (size_t i = 0; i < mqd_srv_n_listeners(g->s); i++)
        evconnlistener_disable(li[i].l);
    struct timeval tv = {0, ACCEPT_PAUSE_MS * 1000};
    evtimer_add(g->resume, &tv);
    g->paused = true;
}

void mqd_accept_error(struct evconnlistener *l, void *arg)
{
    mqd_listener_t *li = arg;
    struct mqd_accept_guard *g = mqd_srv_accept_guard(li->srv);
    int err = EVUTIL_SOCKET_ERROR();
    if (!g || (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM)) {
        MQD_WARN("conn", "accept: %s", strerror(err));
        return;
    }
    unsigned n = 0;
    if (g->reserve >= 0) {
        close(g->reserve);
        n = shed(evconnlistener_get_fd(l));
        g->reserve = take_reserve();
    }
    g->shed += n;
    mqd_srv_count_refused(li->srv, n);
    if (g->reserve < 0 || n == 0)
        pause_listeners(g);
    int64_t now = mqd_now_ms();
    g->quiet += n ? n : 1;
    if (now - g->logged_ms >= 1000) {
        MQD_WARN("conn", "accept: %s: %llu connections closed at accept since the last report "
                 "(descriptors: max_connections, max_open_files and RLIMIT_NOFILE)",
                 strerror(err), (unsigned long long)g->quiet);
        g->logged_ms = now;
        g->quiet = 0;
    }
}
