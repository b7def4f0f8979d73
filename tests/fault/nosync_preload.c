/* A deliberately broken store, for the power-cut tests only: preloaded into mqd
 * (LD_PRELOAD), it turns fdatasync and fsync of segment files (*.log) into no-ops that
 * report success, so mqd acknowledges sends that were never synced. A SIGKILL cannot tell
 * (the page cache survives it); powercutfs's cut must. Everything else (SQLite, indexes,
 * directories) still syncs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int is_segment(int fd)
{
    char p[64], target[4096];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(p, target, sizeof target - 1);
    if (n < 4)
        return 0;
    target[n] = '\0';
    return strcmp(target + n - 4, ".log") == 0;
}

int fdatasync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return is_segment(fd) ? 0 : real(fd);
}

int fsync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return is_segment(fd) ? 0 : real(fd);
}
