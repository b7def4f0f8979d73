/* mqd_data_dir_size_bytes: the disk space the data dir's files take (as du counts it:
 * allocated blocks, so preallocated segment tails count), not the size of the file
 * system that holds it. The walk costs a stat per file on the loop thread, so its
 * result is kept for a few seconds between scrapes. */
#include "config.h"
#include "metrics/metrics.h"

#include <dirent.h>
#include <fcntl.h>
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

int mqd_metrics_dir_size(const char *dir, int64_t now_ms, mqd_dir_size_t *cache, uint64_t *out)
{
    if (cache->at_ms && now_ms - cache->at_ms < DIRSIZE_CACHE_MS) {
        *out = cache->bytes;
        return 0;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return MQD_EIO;
    }
    uint64_t sum = (uint64_t)st.st_blocks * 512u;
    int rc = walk(fd, 1, &sum);
    if (rc != 0)
        return rc;
    cache->bytes = sum;
    cache->at_ms = now_ms;
    *out = sum;
    return 0;
}
