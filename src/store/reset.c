/* Reset: empties a log and restarts it at a later offset (a follower that fell behind
 * its leader's retention takes the leader's log start, as Kafka's followers do; no
 * snapshot is sent because a partition log has no state beyond its records). It runs
 * on the flusher thread like an asynchronous truncation (truncate.c shares the
 * request, the owner's refusals and the callback), and is made atomic for a power cut
 * by a marker file: once "reset.mark" (new start, CRC) is durable the old segments are
 * as good as gone, and a recovery that finds the marker finishes the job before it
 * reads the directory. A crash before the marker leaves the old log; after it, the new
 * empty one; never old segments beside a new one (recovery would see a gap). */
#include "config.h"
#include "store/store_int.h"
#include "util/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MARK_NAME "reset.mark"
#define MARK_MAGIC 0x5453524du /* "MRST" */

static int mark_write(mqd_plog_t *log, uint64_t start)
{
    char tmp[4096], p[4096];
    uint8_t b[16];
    uint32_t magic = MARK_MAGIC;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &start, 8);
    uint32_t crc = mqd_crc32c(0, b, 12);
    memcpy(b + 12, &crc, 4);
    snprintf(tmp, sizeof tmp, "%s/" MARK_NAME ".tmp", log->dir);
    snprintf(p, sizeof p, "%s/" MARK_NAME, log->dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return MQD_EIO;
    int rc = log->st->io.pwrite(fd, b, sizeof b, 0) == (ssize_t)sizeof b &&
                     log->st->io.fdatasync(fd) == 0
                 ? 0
                 : MQD_EIO;
    close(fd);
    if (rc == 0 && rename(tmp, p) != 0)
        rc = MQD_EIO;
    if (rc == 0)
        rc = store_fsync_dir(log->st, log->dir);
    return rc;
}

/* 0 and *start when a whole marker is there; 1 when none (or a torn one: its rename
 * never happened, so the reset had not begun). */
static int mark_read(const mqd_plog_t *log, uint64_t *start)
{
    char p[4096];
    uint8_t b[16];
    snprintf(p, sizeof p, "%s/" MARK_NAME, log->dir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    ssize_t n = pread(fd, b, sizeof b, 0);
    close(fd);
    if (n != (ssize_t)sizeof b || rd32(b) != MARK_MAGIC || rd32(b + 12) != mqd_crc32c(0, b, 12))
        return 1;
    *start = rd64(b + 4);
    return 0;
}

/* Unlinks every segment file and the recovery checkpoint (it names an old segment). */
static int unlink_all(const mqd_plog_t *log)
{
    DIR *d = opendir(log->dir);
    if (!d)
        return MQD_EIO;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        const char *x = l == 24 ? e->d_name + 20 : "";
        if (strcmp(x, ".log") && strcmp(x, ".idx") && strcmp(x, ".tix") &&
            strcmp(e->d_name, "recovery.ckpt"))
            continue;
        snprintf(p, sizeof p, "%s/%s", log->dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    return 0;
}

/* After the marker: the new empty segment made durable (seg_create fsyncs the
 * directory), then the marker goes. */
static int finish(mqd_plog_t *log, uint64_t start, seg_t **out)
{
    char p[4096];
    seg_t *s;
    int rc = seg_create(log, start, &s);
    if (rc != 0)
        return rc;
    snprintf(p, sizeof p, "%s/" MARK_NAME, log->dir);
    if (unlink(p) != 0 || store_fsync_dir(log->st, log->dir) != 0) {
        seg_free(s);
        return MQD_EIO;
    }
    *out = s;
    return 0;
}

int store_reset_segments(mqd_plog_t *log, uint64_t start)
{
    int rc = mark_write(log, start);
    seg_t *s = NULL;
    if (rc == 0)
        rc = unlink_all(log);
    if (rc == 0)
        rc = finish(log, start, &s);
    if (rc != 0)
        return rc; /* the old list stays (the log fails); the next open finishes it */
    pthread_mutex_lock(&log->mu);
    seg_t *dead = log->head;
    log->head = log->tail = s;
    pthread_mutex_unlock(&log->mu);
    while (dead) {
        seg_t *d = dead;
        dead = d->next;
        seg_free(d);
    }
    return 0;
}

int store_reset_recover(mqd_plog_t *log)
{
    uint64_t start;
    if (mark_read(log, &start) != 0)
        return 0;
    MQD_NOTICE("store", "%s: finishing a reset to offset %" PRIu64 " cut short", log->dir, start);
    seg_t *s = NULL;
    int rc = unlink_all(log);
    if (rc == 0)
        rc = finish(log, start, &s);
    if (rc == 0)
        seg_free(s); /* log_recover opens it like any other */
    return rc;
}

int mqd_plog_reset(mqd_plog_t *log, uint64_t start, mqd_plog_truncated_cb cb, void *arg)
{
    int rc = store_truncate_ask(log, start, 1, 1);
    if (rc == 0) {
        log->trunc_cb = cb;
        log->trunc_cb_arg = arg;
    }
    return rc;
}
