/* SQLite without its directory syncs, for the power-cut tests only: preloaded into mqd
 * (LD_PRELOAD), it turns every fsync or fdatasync that libsqlite3 itself makes of a
 * directory into a no-op that reports success, as a build with SQLITE_DISABLE_DIRSYNC
 * (or a file system where SQLite's directory open fails, which it ignores) would. SQLite
 * then never makes the name of a WAL or database file it created durable; mqd must
 * (src/meta/meta.c, "the WAL's name"). Calls from anywhere else, mqd's own included, go
 * through. Each dropped sync is reported on stderr (so in the broker's log), for the
 * test to check that the shim was in effect. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int from_sqlite(const void *caller)
{
    Dl_info di;
    return dladdr(caller, &di) != 0 && di.dli_fname && strstr(di.dli_fname, "libsqlite3");
}

static int is_dir(int fd)
{
    struct stat sb;
    return fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int dropped(int fd, const char *call)
{
    char p[64], target[4096];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(p, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    fprintf(stderr, "nodirsync: dropped SQLite's %s of the directory %s\n", call, target);
    return 0;
}

int fdatasync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    if (is_dir(fd) && from_sqlite(__builtin_return_address(0)))
        return dropped(fd, "fdatasync");
    return real(fd);
}

int fsync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (is_dir(fd) && from_sqlite(__builtin_return_address(0)))
        return dropped(fd, "fsync");
    return real(fd);
}
