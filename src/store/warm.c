/* Start-up warm-up: reads the metadata of every partition directory into the page cache
 * from a few threads while the owner opens the partitions one by one.
 *
 * Recovery of a partition touches a directory, a checkpoint, the index files and the
 * tail of the active segment: a handful of small reads, each a disk round trip when the
 * page cache is cold (after a reboot). Done one partition after another that is about
 * 0.8 ms per partition on the development VM (10,000 partitions: 8 s). These threads
 * issue the same reads concurrently, so the disk serves them in parallel and the owner's
 * recovery finds them cached. They only read and advise: nothing here decides anything,
 * and a file they miss or a topic that is never opened costs nothing but the read. */
#include "config.h"
#include "store/store_int.h"
#include "util/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WARM_TAIL (256u << 10) /* bytes at the end of a segment recovery may scan */
#define STOPPING(w) __atomic_load_n(&(w)->stop, __ATOMIC_RELAXED)

struct store_warm {
    char *topics;      /* DATA_DIR/topics */
    pthread_t thr[STORE_WARM_THREADS];
    int started[STORE_WARM_THREADS];
    unsigned next;     /* next topic directory index to take (atomic) */
    int stop;          /* store closing: finish early (atomic) */
};

static void warm_file(const char *path, const char *name)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOATIME);
    if (fd < 0)
        fd = open(path, O_RDONLY | O_CLOEXEC); /* O_NOATIME needs ownership */
    if (fd < 0)
        return;
    struct stat st;
    size_t l = strlen(name);
    if (fstat(fd, &st) == 0) {
        if (l > 4 && strcmp(name + l - 4, ".log") == 0) {
            /* the first header (segment time) and the tail recovery scans */
            uint8_t h[64];
            if (pread(fd, h, sizeof h, 0) < 0) { /* the page is what matters */ }
            off_t from = st.st_size > (off_t)WARM_TAIL ? st.st_size - (off_t)WARM_TAIL : 0;
            posix_fadvise(fd, from, st.st_size - from, POSIX_FADV_WILLNEED);
        } else {
            posix_fadvise(fd, 0, st.st_size, POSIX_FADV_WILLNEED);
        }
    }
    close(fd);
}

static void warm_partition(struct store_warm *w, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[PATH_MAX];
    while (!STOPPING(w) && (e = readdir(d)) != NULL) {
        if (store_is_dots(e->d_name))
            continue;
        if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < sizeof p)
            warm_file(p, e->d_name);
    }
    closedir(d);
}

static void *warm_main(void *arg)
{
    struct store_warm *w = arg;
    DIR *top = opendir(w->topics);
    if (!top)
        return NULL;
    /* Each thread reads the topic list itself and takes topics by a shared counter. */
    unsigned i = 0, mine = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED);
    struct dirent *e;
    char t[PATH_MAX], p[PATH_MAX];
    while (!STOPPING(w) && (e = readdir(top)) != NULL) {
        if (store_is_dots(e->d_name))
            continue;
        if (i++ != mine)
            continue;
        mine = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED);
        if ((size_t)snprintf(t, sizeof t, "%s/%s", w->topics, e->d_name) >= sizeof t)
            continue;
        DIR *td = opendir(t);
        if (!td)
            continue;
        struct dirent *pe;
        while (!STOPPING(w) && (pe = readdir(td)) != NULL) {
            if (store_is_dots(pe->d_name))
                continue;
            if ((size_t)snprintf(p, sizeof p, "%s/%s", t, pe->d_name) < sizeof p)
                warm_partition(w, p);
        }
        closedir(td);
    }
    closedir(top);
    return NULL;
}

struct store_warm *store_warm_start(const char *root)
{
    struct store_warm *w = calloc(1, sizeof *w);
    size_t n = strlen(root) + 8;
    if (!w || !(w->topics = malloc(n))) {
        free(w);
        return NULL;
    }
    snprintf(w->topics, n, "%s/topics", root);
    for (unsigned i = 0; i < STORE_WARM_THREADS; i++) {
        w->started[i] = pthread_create(&w->thr[i], NULL, warm_main, w) == 0;
        if (w->started[i])
            pthread_setname_np(w->thr[i], "mqd-warm");
    }
    return w;
}

void store_warm_stop(struct store_warm *w)
{
    if (!w)
        return;
    __atomic_store_n(&w->stop, 1, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < STORE_WARM_THREADS; i++)
        if (w->started[i])
            pthread_join(w->thr[i], NULL);
    free(w->topics);
    free(w);
}
