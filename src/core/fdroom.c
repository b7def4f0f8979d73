/* The descriptor budget connections live in (issue 16 point 4, issue 32 points 5, 7c).
 *
 * Under RLIMIT_NOFILE the store keeps a share for partition files (its open segments, up
 * to max_open_files, at most half of the limit) and MQD_FD_SPARE more for what mqd opens
 * for a moment (SQLite, index and checkpoint files, directory fsyncs, cold-read
 * duplicates). Connections, AMQP (server/accept_guard.c) and the web console's HTTP ones
 * (console/conn.c) alike, get the rest: without that, connections took every descriptor
 * and the next segment roll failed its partition. Of the connections' share, those that
 * have not finished their handshake get handshake_fd_percent (auth's admission at
 * accept), so the rest stays for clients that logged in. */
#include "config.h"
#include "core/core_int.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

uint64_t mqd_fd_nofile_now(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    return (uint64_t)rl.rlim_cur;
}

void mqd_fd_budget(mqd_server_t *s, mqd_fd_budget_t *out)
{
    *out = (mqd_fd_budget_t){0};
    if (!s->nofile)
        return;
    out->nofile = s->nofile;
    mqd_store_fd_stats_t fs = {0};
    if (s->store)
        mqd_store_fd_stats(s->store, &fs);
    uint64_t half = s->nofile > 64 ? (s->nofile - 64) / 2 : 0;
    uint64_t room = fs.cap < half ? fs.cap : half;
    out->head = room > fs.open ? room - fs.open : 0;
    uint64_t kept = room + MQD_FD_SPARE + s->fd_base;
    out->conns = s->nofile > kept ? s->nofile - kept : 0;
    uint32_t pct = s->conf ? s->conf->handshake_fd_percent : 100;
    out->handshakes = pct >= 100 || pct == 0 ? out->conns : out->conns * pct / 100;
    if (out->handshakes == 0 && out->conns > 0)
        out->handshakes = 1;
}

void mqd_fd_note_base(mqd_server_t *s)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    s->fd_base = (uint64_t)fd; /* descriptors are handed out lowest first */
    close(fd);
}

/* Descriptors are handed out lowest first, so an accepted fd numbered k means k are in
 * use: keeping it must leave the store its headroom plus the spare. */
bool mqd_fd_admit(mqd_server_t *s, int fd, mqd_fd_budget_t *b)
{
    mqd_fd_budget(s, b);
    return !b->nofile || (uint64_t)fd + b->head + MQD_FD_SPARE < b->nofile;
}
