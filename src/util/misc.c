/* Clocks, return-code names and small file helpers. */
#include "config.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int64_t mqd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t mqd_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *mqd_strerror(int rc)
{
    switch (rc) {
    case MQD_OK: return "ok";
    case MQD_ENOMEM: return "out of memory";
    case MQD_EIO: return "I/O error";
    case MQD_EINVAL: return "invalid argument";
    case MQD_ENOENT: return "not found";
    case MQD_ECORRUPT: return "corrupt data";
    case MQD_EEXIST: return "already exists";
    case MQD_EAGAIN: return "try again";
    case MQD_ERANGE: return "out of range";
    case MQD_EFAILED: return "failed (refusing writes)";
    case MQD_ENOSPC: return "disk full";
    case MQD_ETOOBIG: return "too big";
    case MQD_ESTATE: return "wrong state";
    case MQD_EDB: return "database error";
    default: return "unknown error";
    }
}

int mqd_fsync_dir(const char *dirpath)
{
    int fd = open(dirpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return MQD_EIO;
    int rc = fsync(fd) == 0 ? 0 : MQD_EIO;
    close(fd);
    return rc;
}

int mqd_errno_rc(int err)
{
    return err == ENOSPC || err == EDQUOT ? MQD_ENOSPC : MQD_EIO;
}

int mqd_mkdirs(const char *path, unsigned mode)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf)
        return MQD_EINVAL;
    memcpy(buf, path, len + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) != 0 && errno != EEXIST)
            return mqd_errno_rc(errno);
        *p = '/';
    }
    if (mkdir(buf, mode) != 0 && errno != EEXIST)
        return mqd_errno_rc(errno);
    return 0;
}

void *mqd_array_grow(void *p, size_t *cap, size_t n, size_t size, size_t first)
{
    if (n < *cap)
        return p;
    size_t ncap = *cap ? *cap * 2 : first;
    if (ncap < *cap || (size && ncap > SIZE_MAX / size))
        return NULL; /* the size would overflow */
    void *np = realloc(p, ncap * size);
    if (np)
        *cap = ncap;
    return np;
}
