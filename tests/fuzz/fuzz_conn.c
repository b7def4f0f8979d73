/* Fuzz target: a whole mqd connection, bytes in -> frame peek + Proton + the broker's own
 * handlers (SASL, open, begin, attach, transfer, flow, disposition, $management, the
 * relay, transactions) + the store -> bytes out. A real server (data dir under /tmp,
 * fresh every RESTART_EVERY inputs so the disk stays small) adopts one end of a
 * socketpair (mqd_server_adopt, as its listeners do with an accepted socket); the input
 * is written to the other end in chunks whose size the first byte picks, the loop runs
 * between chunks, and what mqd writes is read and checked: whatever mqd sends starts with
 * an AMQP or SASL protocol header. After the input, EOF; the connection must be gone
 * within HANG_MS (a connection that outlives its peer's EOF is a bug too). */
#include "config.h"
#include "conf/conf.h"
#include "fuzz.h"
#include "server/server_int.h"
#include "server/server.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RESTART_EVERY 500
#define HANG_MS 10000
#define SETTLE_ROUNDS 16

static mqd_conf_t *conf;
static mqd_server_t *srv;
static char dir[64];
static unsigned runs;

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

static void stop_server(void)
{
    if (srv)
        mqd_server_free(srv);
    if (conf)
        mqd_conf_free(conf);
    srv = NULL;
    conf = NULL;
    if (dir[0])
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    dir[0] = '\0';
}

static void start_server(void)
{
    static const char *const sets[] = {
        "log_level=error",   "flush=async",       "flush_threads=1", "segment_bytes=65536",
        "max_message_size=1MiB", "handshake_timeout_ms=60s", "idle_timeout_ms=0",
    };
    char err[512], kv[128];
    snprintf(dir, sizeof dir, "/tmp/mqd-fuzz-conn.XXXXXX");
    if (!mkdtemp(dir) || mqd_conf_new(&conf) != 0)
        abort();
    snprintf(kv, sizeof kv, "data_dir=%s", dir);
    if (mqd_conf_set(conf, kv, err, sizeof err) != 0)
        abort();
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++)
        if (mqd_conf_set(conf, sets[i], err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_conn: %s: %s\n", sets[i], err);
            abort();
        }
    if (mqd_conf_validate(conf, err, sizeof err) != 0)
        abort();
    size_t n_listen = conf->n_listen;
    conf->n_listen = 0; /* no socket of its own: the connection comes from adopt */
    mqd_log_set_level(conf->log_level);
    if (mqd_server_new(conf, NULL, &srv) != 0)
        abort();
    conf->n_listen = n_listen; /* for mqd_conf_free; listener SIZE_MAX is past them all */
    static bool registered;
    if (!registered)
        atexit(stop_server);
    registered = true;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct out {
    size_t n;
    uint8_t head[8];
} out_t;

/* Reads what mqd wrote; false at EOF (mqd closed its end). */
static bool drain(int fd, out_t *o)
{
    uint8_t buf[65536];
    for (;;) {
        ssize_t k = read(fd, buf, sizeof buf);
        if (k > 0) {
            for (ssize_t i = 0; i < k && o->n + (size_t)i < sizeof o->head; i++)
                o->head[o->n + (size_t)i] = buf[i];
            o->n += (size_t)k;
            continue;
        }
        return k < 0 && (errno == EAGAIN || errno == EINTR);
    }
}

static void spin(void)
{
    event_base_loop(mqd_srv_base(srv), EVLOOP_NONBLOCK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!srv || ++runs % RESTART_EVERY == 0) {
        stop_server();
        start_server();
    }
    size_t chunk = data[0] ? data[0] : size; /* 0: all at once */
    data++, size--;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0)
        abort();
    size_t before = mqd_srv_n_conns(srv);
    if (mqd_server_adopt(srv, sv[0], "fuzz", SIZE_MAX) != 0)
        abort();
    out_t o = {0};
    bool open = true;
    for (size_t off = 0; off < size && open;) {
        size_t k = size - off < chunk ? size - off : chunk;
        ssize_t w = write(sv[1], data + off, k);
        if (w > 0)
            off += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EINTR)
            break; /* mqd closed: the rest cannot be read */
        spin();
        open = drain(sv[1], &o);
    }
    /* let mqd answer (SASL, attaches, settlements) before EOF, as a client would wait */
    for (int i = 0; i < SETTLE_ROUNDS && open; i++) {
        size_t had = o.n;
        spin();
        open = drain(sv[1], &o);
        if (o.n == had && i > 2)
            break;
    }
    shutdown(sv[1], SHUT_WR);
    int64_t t0 = now_ms();
    while (mqd_srv_n_conns(srv) > before) {
        spin();
        drain(sv[1], &o);
        if (now_ms() - t0 > HANG_MS) {
            fprintf(stderr, "fuzz_conn: connection still open %d ms after EOF\n", HANG_MS);
            abort();
        }
        if (mqd_srv_n_conns(srv) > before)
            usleep(100);
    }
    spin(); /* the graveyard: the connection is freed by the next tick */
    drain(sv[1], &o);
    close(sv[1]);
    if (getenv("MQD_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_conn: %zu bytes in (chunks of %zu), %zu bytes out\n", size, chunk,
                o.n);
    if (o.n >= 4 && memcmp(o.head, "AMQP", 4) != 0) {
        fprintf(stderr, "fuzz_conn: mqd wrote %zu bytes not starting with a protocol header\n",
                o.n);
        abort();
    }
    return 0;
}
