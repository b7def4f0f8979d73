/* mqd_data_dir_size_bytes: the disk space the data dir's files take (as du counts it:
 * allocated blocks, so preallocated segment tails count), not the size of the file
 * system that holds it. The walk costs a stat per file: 12-20 ms for a data dir of
 * 1,000 partitions with a warm cache (tests/unit/metrics/test_dirsize), far more cold, so
 * only the first one runs on the caller's thread (the event loop); after that, a result
 * older than a few seconds starts a walk on a thread of its own and the caller is given
 * the last result until that walk is done. */
#include "config.h"
#include "metrics/metrics.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIRSIZE_CACHE_MS 5000
#define DIRSIZE_DEPTH 8 /* data_dir/topics/T/N/file is 4 deep: deeper is not mqd's */

/* Adds the blocks of everything in the open directory fd (closed here) to *sum. */
static int walk(int fd, int depth, uint64_t *sum)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return MQD_EIO;
    }
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        /* a file removed under the walk (retention, a deleted topic) is simply gone */
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        *sum += (uint64_t)st.st_blocks * 512u;
        if (S_ISDIR(st.st_mode) && depth < DIRSIZE_DEPTH) {
            int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                walk(sub, depth + 1, sum);
        }
    }
    closedir(d);
    return rc;
}

/* Walks dir (itself included) into *out. */
static int walk_all(const char *dir, uint64_t *out)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return MQD_EIO;
    }
    uint64_t sum = (uint64_t)st.st_blocks * 512u;
    int rc = walk(fd, 1, &sum);
    if (rc == 0)
        *out = sum;
    return rc;
}

/* A walk on its own thread: the thread touches only this; the caller takes the result
 * once `done` is set. */
struct mqd_dir_walk {
    pthread_t thread;
    int64_t started_ms;
    int done; /* __atomic: set by the thread when rc and sum are final */
    int rc;
    uint64_t sum;
    char dir[PATH_MAX];
};

static void *walk_thread(void *arg)
{
    struct mqd_dir_walk *w = arg;
    w->rc = walk_all(w->dir, &w->sum);
    __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Joins a walk and, when it worked, makes its result the cache's. */
static void take(mqd_dir_size_t *cache)
{
    struct mqd_dir_walk *w = cache->walk;
    pthread_join(w->thread, NULL);
    if (w->rc == 0) {
        cache->bytes = w->sum;
        cache->at_ms = w->started_ms;
    }
    free(w);
    cache->walk = NULL;
}

/* Starts a walk of dir on a thread; false when none could be started. */
static bool start(const char *dir, int64_t now_ms, mqd_dir_size_t *cache)
{
    struct mqd_dir_walk *w = calloc(1, sizeof *w);
    if (!w || strlen(dir) >= sizeof w->dir) {
        free(w);
        return false;
    }
    memcpy(w->dir, dir, strlen(dir) + 1);
    w->started_ms = now_ms;
    if (pthread_create(&w->thread, NULL, walk_thread, w) != 0) {
        free(w);
        return false;
    }
    cache->walk = w;
    return true;
}

int mqd_metrics_dir_size(const char *dir, int64_t now_ms, mqd_dir_size_t *cache, uint64_t *out)
{
    if (cache->walk && __atomic_load_n(&cache->walk->done, __ATOMIC_ACQUIRE))
        take(cache);
    bool fresh = cache->at_ms && now_ms - cache->at_ms < DIRSIZE_CACHE_MS;
    /* the first walk, or one no thread could be started for, runs here */
    if (!cache->at_ms || (!fresh && !cache->walk && !start(dir, now_ms, cache))) {
        uint64_t sum = 0;
        int rc = walk_all(dir, &sum);
        if (rc != 0)
            return rc;
        cache->bytes = sum;
        cache->at_ms = now_ms;
    }
    *out = cache->bytes;
    return 0;
}

void mqd_metrics_dir_size_free(mqd_dir_size_t *cache)
{
    if (cache->walk)
        take(cache);
}
