/* accept() at EMFILE (accept_guard.c): a real libevent listener on 127.0.0.1 with real
 * client sockets, in a process whose descriptor table is then filled to the limit. The
 * waiting clients must be accepted and closed (they read EOF), the loop must not spin,
 * and once descriptors are free again new connections are accepted. */
#include "config.h"
#include "server/server_int.h"
#include "core/core_int.h" /* a server struct of its own, on the stack */

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#define CLIENTS 40
#define FILLERS_MAX 4096

/* The listener's argument, as server.c passes its mqd_listener_t (the error callback
 * gets the same one). */
typedef struct tl {
    mqd_listener_t li;
    int accepted;
} tl_t;

static void on_conn(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
                    void *arg)
{
    (void)l;
    (void)sa;
    (void)len;
    ((tl_t *)arg)->accepted++;
    close(fd);
}

static double cpu_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Runs the loop for about ms milliseconds. */
static void run_for(struct event_base *base, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
}

static int connect_to(uint16_t port)
{
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(c >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(c, (struct sockaddr *)&sin, sizeof sin), 0);
    return c;
}

static void test_emfile_storm(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    assert_non_null(base);
    static mqd_server_t s; /* only what accept_guard.c touches is set */
    memset(&s, 0, sizeof s);
    s.base = base;
    static tl_t t;
    memset(&t, 0, sizeof t);
    mqd_listener_t *lp = &t.li;
    lp->srv = &s;
    s.listeners = lp;
    s.n_listeners = 1;
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    lp->l = evconnlistener_new_bind(base, on_conn, &t, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE,
                                    512, (struct sockaddr *)&sin, sizeof sin);
    assert_non_null(lp->l);
    evconnlistener_set_error_cb(lp->l, mqd_accept_error);
    assert_int_equal(mqd_accept_guard_init(&s), 0);
    socklen_t sl = sizeof sin;
    assert_int_equal(getsockname(evconnlistener_get_fd(lp->l), (struct sockaddr *)&sin, &sl), 0);
    uint16_t port = ntohs(sin.sin_port);

    int cl[CLIENTS];
    for (int i = 0; i < CLIENTS; i++)
        cl[i] = connect_to(port); /* complete in the backlog, not yet accepted */
    /* fill the table: every descriptor below the limit in use */
    static int fill[FILLERS_MAX];
    int nfill = 0;
    struct rlimit rl0, rl;
    getrlimit(RLIMIT_NOFILE, &rl0);
    rl = rl0;
    rl.rlim_cur = (rlim_t)cl[CLIENTS - 1] + 64;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    while (nfill < FILLERS_MAX && (fill[nfill] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        nfill++;
    assert_int_equal(errno, EMFILE);

    double cpu0 = cpu_now();
    run_for(base, 600);
    double cpu = cpu_now() - cpu0;
    int eof = 0;
    for (int i = 0; i < CLIENTS; i++) {
        char b;
        struct timeval tv = {2, 0};
        setsockopt(cl[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        if (recv(cl[i], &b, 1, 0) == 0)
            eof++;
    }
    print_message("EMFILE: %d of %d waiting clients closed at accept, %.3f s CPU in 0.6 s\n", eof,
                  CLIENTS, cpu);
    assert_int_equal(t.accepted, 0);
    assert_int_equal(eof, CLIENTS);
    assert_int_equal(s.conns_refused, CLIENTS);
    assert_true(cpu < 0.3); /* the spin it replaces used the whole 0.6 s */

    /* descriptors free again: accepting resumes (after a pause of at most 100 ms) */
    for (int i = 0; i < nfill; i++)
        close(fill[i]);
    for (int i = 0; i < CLIENTS; i++)
        close(cl[i]);
    setrlimit(RLIMIT_NOFILE, &rl0);
    int c = connect_to(port);
    run_for(base, 300);
    assert_int_equal(t.accepted, 1);
    close(c);
    mqd_accept_guard_free(&s);
    evconnlistener_free(lp->l);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emfile_storm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
