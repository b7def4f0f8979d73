/* systemd's notify protocol without libsystemd: one datagram to $NOTIFY_SOCKET
 * ("READY=1", "STOPPING=1", "STATUS=...", "WATCHDOG=1"). A no-op outside systemd. */
#include "config.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int mqd_sd_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || (path[0] != '/' && path[0] != '@'))
        return 0;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t plen = strlen(path);
    if (plen >= sizeof sa.sun_path)
        return MQD_EINVAL;
    memcpy(sa.sun_path, path, plen);
    if (sa.sun_path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract namespace */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return MQD_EIO;
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen);
    ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
    close(fd);
    return n < 0 ? MQD_EIO : 0;
}

uint64_t mqd_sd_watchdog_usec(void)
{
    const char *v = getenv("WATCHDOG_USEC");
    const char *pid = getenv("WATCHDOG_PID");
    if (!v)
        return 0;
    if (pid && strtol(pid, NULL, 10) != (long)getpid())
        return 0;
    return strtoull(v, NULL, 10);
}
