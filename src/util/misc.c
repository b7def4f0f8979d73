/* Clocks, return-code names and small file helpers. */
#include "config.h"
#include "util/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
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

static int fsync_parent(const char *dir)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", dir);
    char *slash = strrchr(buf, '/');
    if (slash == NULL)
        return mqd_fsync_dir(".");
    if (slash == buf)
        slash[1] = '\0';
    else
        *slash = '\0';
    return mqd_fsync_dir(buf);
}

/* A directory's name is durable only once the directory holding it is fsynced (POSIX
 * promises nothing more; ext4's journal usually hides the difference, other file systems
 * do not): every directory created here is fsynced, and so is its parent, before the
 * next component is made, so the whole new chain survives a power cut once this
 * returns. */
int mqd_mkdirs(const char *path, unsigned mode)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf)
        return MQD_EINVAL;
    memcpy(buf, path, len + 1);
    while (len > 1 && buf[len - 1] == '/')
        buf[--len] = '\0';
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, mode) == 0) {
            if (mqd_fsync_dir(buf) != 0 || fsync_parent(buf) != 0)
                return MQD_EIO;
        } else if (errno != EEXIST) {
            return mqd_errno_rc(errno);
        }
        if (c == '\0')
            break;
        *p = c;
    }
    return 0;
}

int mqd_fsync_parents(const char *path, size_t base_len)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf || base_len > len)
        return MQD_EINVAL;
    memcpy(buf, path, len + 1);
    for (;;) {
        char *slash = strrchr(buf, '/');
        if (slash == NULL || (size_t)(slash - buf) < base_len)
            return 0;
        if (slash == buf)
            slash[1] = '\0'; /* the root */
        else
            *slash = '\0';
        if (mqd_fsync_dir(buf) != 0)
            return MQD_EIO;
        if (slash == buf)
            return 0;
    }
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

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[65];
    if (la > 64 || lb > 64)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t sub = diag + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            size_t best = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
            row[j] = sub < best ? sub : best;
            diag = up;
        }
    }
    return row[lb];
}

const char *mqd_closest(const char *word, const char *const *cands, size_t n)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        size_t d = cands[i] ? edit_distance(word, cands[i]) : SIZE_MAX;
        if (d < best_d) {
            best_d = d;
            best = cands[i];
        }
    }
    /* a suggestion must be closer than a rewrite: at most a third of the word wrong */
    size_t limit = strlen(word) / 3 < 2 ? 2 : strlen(word) / 3;
    return best_d <= limit ? best : NULL;
}
