/* Failed partitions (issue 16, point 5): the sends a failed log will never make stable
 * get an outcome, and a partition failed by a full disk resumes once there is room.
 *
 * Outcome: `rejected` with an error condition, not `released`. The records were cut from
 * the log (store: truncated back to the last durable offset), so a resend can never
 * duplicate anything; but `released` carries no condition, and a client told only
 * "released" retries at once into the same full disk without knowing why. The condition
 * says what happened and that nothing was stored: amqp:resource-limit-exceeded "disk
 * full ..." (ENOSPC / EDQUOT), else amqp:internal-error naming the I/O error.
 *
 * Resume: automatically every partition_resume_ms for disk-full failures once the free
 * space is above disk_free_limit + max_message_size, and for failures by a transient
 * lack of resources (issue 32 point 5: EMFILE, ENFILE or ENOMEM from the open of an
 * index or segment file at a roll) once a descriptor can be had; `mqctl topic resume T`
 * at any time and for any failure (mgmt_topic.c). Any other error (EIO above all: after
 * a failed write-back the kernel may have dropped the data) waits for an operator. The
 * store does the truncation to the last durable record and the probe (store/resume.c),
 * so a resume never makes anything durable that was not, whatever failed.
 */
#include "config.h"
#include "core/core.h"
#include "core/core_int.h"

#include <errno.h>
#include <fcntl.h>
#include <proton/disposition.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

static bool disk_full(int err)
{
    return err == ENOSPC || err == EDQUOT;
}

/* Out of descriptors or kernel memory: nothing was written wrong, the same call works
 * once the resource is back. Never EIO. */
static bool transient(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOMEM;
}

mqd_part_retry_t mqd_part_fail_retry(int err)
{
    return disk_full(err)   ? MQD_PART_RETRY_ROOM
           : transient(err) ? MQD_PART_RETRY_RESOURCE
                            : MQD_PART_RETRY_NEVER;
}

const char *mqd_part_fail_condition(const mqd_part_t *p, char *desc, size_t n)
{
    int err = mqd_plog_fail_errno(p->log);
    if (p->topic->conf.replication_factor > 1 && p->topic->srv->repl.arg) {
        /* the leader shipped its batches before writing them (repl/leader.c's commit
         * tap): a replica may hold this message and keep it after the move */
        snprintf(desc, n,
                 "%s on partition %s/%u (this node's copy): the message may or may not be "
                 "stored; the partition moves to another replica: send it again (with its "
                 "message-id, deduplicated)",
                 disk_full(err) ? "disk full" : (err ? strerror(err) : "I/O error"), p->topic->name,
                 p->id);
        return disk_full(err) || transient(err) ? "amqp:resource-limit-exceeded"
                                                : "amqp:internal-error";
    }
    if (disk_full(err)) {
        snprintf(desc, n,
                 "disk full: partition %s/%u stored nothing of this message and refuses "
                 "sends until it resumes (free space; it retries by itself, or: mqctl topic "
                 "resume %s)",
                 p->topic->name, p->id, p->topic->name);
        return "amqp:resource-limit-exceeded";
    }
    if (transient(err)) {
        snprintf(desc, n,
                 "%s on partition %s/%u: this message was not stored; the partition "
                 "refuses sends until it resumes by itself, once the resource is back "
                 "(or: mqctl topic resume %s); send it again",
                 strerror(err), p->topic->name, p->id, p->topic->name);
        return "amqp:resource-limit-exceeded";
    }
    snprintf(desc, n,
             "I/O error on partition %s/%u (%s): this message was not stored; the "
             "partition refuses sends until an operator runs mqctl topic resume %s",
             p->topic->name, p->id, err ? strerror(err) : "unknown", p->topic->name);
    return "amqp:internal-error";
}

/* Settles every send still waiting for p's log: none of them will become stable.
 * Returns how many. */
static size_t fail_pending(mqd_part_t *p)
{
    size_t n = 0;
    mqd_server_t *s = p->topic->srv;
    char desc[512];
    const char *cond = p->pend_head ? mqd_part_fail_condition(p, desc, sizeof desc) : NULL;
    while (p->pend_head) {
        mqd_pending_t *pe = p->pend_head;
        p->pend_head = pe->next;
        if (pe->notify) /* a 0-9-1 publish (amqp091/): nacked */
            pe->notify(pe->notify_arg, pe->notify_tag, PN_REJECTED, cond, desc);
        else if (!pe->conn->closed) {
            pn_link_t *l = mqd_delivery_unhold(pe->dlv);
            if (pe->txn) {
                s->ops.txn_settle(pe->dlv, pe->txn, PN_REJECTED);
            } else {
                mqd_delivery_reject(pe->dlv, cond, desc);
            }
            mqd_link_reap(l);
            mqd_conn_mark_dirty(pe->conn);
        }
        mqd_dedup_forget_pending(p->topic, pe); /* nothing stored: a retry must be */
        if (!pe->notify)
            mqd_conn_unref(pe->conn);
        s->sends_failed++;
        n++;
        mqd_pending_release(s, pe);
    }
    p->pend_tail = NULL;
    p->pend_weak = 0;
    return n;
}

void mqd_part_log_event(mqd_part_t *p)
{
    mqd_server_t *s = p->topic->srv;
    bool failed = mqd_plog_failed(p->log);
    if (failed) {
        size_t n = fail_pending(p);
        if (!p->failed) {
            p->failed = true;
            s->parts_failed++;
            p->resume_at_ms = mqd_now_ms() + s->conf->partition_resume_ms;
            MQD_ERR("topic", "partition %s/%u failed (%s): %zu waiting send(s) rejected",
                    p->topic->name, p->id, strerror(mqd_plog_fail_errno(p->log)), n);
        }
    } else if (p->failed) {
        p->failed = false;
        s->parts_failed--;
        MQD_NOTICE("topic", "partition %s/%u resumed at offset %llu", p->topic->name, p->id,
                   (unsigned long long)mqd_plog_end_offset(p->log));
    }
}

int mqd_part_resume(mqd_part_t *p)
{
    if (!mqd_plog_failed(p->log))
        return 0;
    mqd_server_t *s = p->topic->srv;
    if (s->repl.may_resume && !s->repl.may_resume(s->repl.arg, p))
        return MQD_EAGAIN; /* a replicated leader hands the partition over first */
    fail_pending(p);       /* before the log reuses their offsets */
    if (s->ops.txns_wake)
        s->ops.txns_wake(s); /* transactions with records here are doomed */
    return mqd_plog_resume(p->log);
}

/* Is there room for a disk-full partition to try again: disk_free_limit plus one
 * largest message? (The probe proves only one block: a partition resumed into a few
 * KiB would fail again at the next batch and reject its sends once more.) */
static bool room(mqd_server_t *s)
{
    struct statvfs v; /* measured here: the watermark does not when its limit is 0 */
    if (statvfs(s->conf->data_dir, &v) != 0)
        return true; /* unknown: the probe decides */
    uint64_t free_b = (uint64_t)v.f_bavail * v.f_frsize;
    return free_b >= s->conf->disk_free_limit + s->conf->max_message_size;
}

int mqd_topic_room(mqd_server_t *s)
{
    struct statvfs v;
    if (statvfs(s->conf->data_dir, &v) != 0)
        return 0; /* unknown: creating the files decides */
    uint64_t free_b = (uint64_t)v.f_bavail * v.f_frsize;
    uint64_t need = s->conf->disk_free_limit > MQD_TOPIC_MIN_FREE ? s->conf->disk_free_limit
                                                                  : MQD_TOPIC_MIN_FREE;
    if (free_b >= need)
        return 0;
    MQD_WARN("topic", "no topic is created while %s has %llu bytes free (below %llu): disk full",
             s->conf->data_dir, (unsigned long long)free_b, (unsigned long long)need);
    return MQD_ENOSPC;
}

/* Can a partition failed for lack of descriptors try again: is one to be had? (A resume
 * opens a checkpoint file and its directory; without a descriptor it would only fail
 * again and log it, every partition_resume_ms for every such partition.) */
static bool descriptor_free(void)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

/* Whether p's failure is one to retry now (its kind's condition, checked once a pass:
 * *room and *fds are -1 until then). */
static bool retry_now(mqd_server_t *s, const mqd_part_t *p, int *room_ok, int *fds_ok)
{
    switch (mqd_part_fail_retry(mqd_plog_fail_errno(p->log))) {
    case MQD_PART_RETRY_ROOM:
        if (*room_ok < 0)
            *room_ok = room(s);
        return *room_ok;
    case MQD_PART_RETRY_RESOURCE:
        if (*fds_ok < 0)
            *fds_ok = descriptor_free();
        return *fds_ok;
    default: return false;
    }
}

void mqd_topics_resume_failed(mqd_server_t *s)
{
    uint32_t every = s->conf->partition_resume_ms;
    if (s->parts_failed == 0 || every == 0)
        return;
    int64_t now = mqd_now_ms();
    int room_ok = -1, fds_ok = -1;
    for (size_t i = 0; i < s->topics_cap; i++) {
        for (mqd_topic_t *t = s->topics[i]; t; t = t->hnext) {
            for (uint32_t k = 0; k < t->nparts; k++) {
                mqd_part_t *p = t->parts[k];
                if (!p->failed || now < p->resume_at_ms || mqd_plog_resuming(p->log) ||
                    !retry_now(s, p, &room_ok, &fds_ok))
                    continue;
                p->resume_at_ms = now + every;
                mqd_part_resume(p);
            }
        }
    }
}

const char *mqd_topic_get_condition(int rc)
{
    return rc == MQD_ENOENT                      ? "amqp:not-found"
           : rc == MQD_ENOSPC || rc == MQD_EAGAIN || rc == MQD_ETOOBIG ? "amqp:resource-limit-exceeded"
                                                 : "amqp:internal-error";
}

const char *mqd_topic_get_desc(int rc)
{
    return rc == MQD_ENOENT   ? "The messaging entity '%s' could not be found." /* Azure's words */
           : rc == MQD_ENOSPC ? "cannot create topic '%s': disk full"
           : rc == MQD_EAGAIN ? "topic limit reached (max_topics, max_topics_per_connection): "
                                "cannot create '%s'"
           : rc == MQD_ETOOBIG ? "creating '%s' needs more partitions than max_partitions_per_topic"
                              : "cannot create topic '%s' (see the broker's log)";
}
