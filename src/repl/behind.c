/* A follower that fell behind its leader's retention (Kafka's OFFSET_OUT_OF_RANGE on a
 * replica fetch): its fetch offset is below the leader's log start, so the leader no
 * longer has the next record it needs. What it holds is either nothing the leader still
 * has or a prefix below the leader's start, so there is nothing to keep: it empties its
 * replica, restarts it at the leader's log start (mqd_plog_reset, on the flusher thread,
 * durable before the callback) and fetches from there. No snapshot: a partition's state
 * is its records (group offsets and transaction decisions travel as records too). */
#include "config.h"
#include "repl/repl_int.h"

#include <inttypes.h>
#include <string.h>

static void on_reset(mqd_plog_t *log, uint64_t end, int rc, void *arg)
{
    rpart_t *rp = arg;
    rp->truncating = false;
    MQD_NOTICE("repl", "%s/%u: replica reset to the leader's log start %" PRIu64 " (%s)", rp->topic,
               rp->part, end, rc ? mqd_strerror(rc) : "ok");
    if (rp->fol)
        rp->fol->attach_at_ms = mqd_now_ms(); /* and fetch from there */
}

/* info: the refusal's map, mqd:log-start (ulong). 0 or MQD_EINVAL. */
static int log_start_of(pn_data_t *info, uint64_t *start)
{
    int rc = MQD_EINVAL;
    pn_data_rewind(info);
    if (!pn_data_next(info) || pn_data_type(info) != PN_MAP)
        return rc;
    pn_data_enter(info);
    while (pn_data_next(info)) {
        pn_bytes_t k = pn_data_type(info) == PN_SYMBOL ? pn_data_get_symbol(info) : pn_bytes(0, "");
        if (!pn_data_next(info))
            break;
        if (k.size == 13 && !memcmp(k.start, "mqd:log-start", 13) &&
            pn_data_type(info) == PN_ULONG) {
            *start = pn_data_get_ulong(info);
            rc = 0;
        }
    }
    pn_data_exit(info);
    return rc;
}

void mqd_repl_fol_behind(rpart_t *rp, uint32_t leader, pn_data_t *info)
{
    uint64_t start = 0;
    mqd_plog_t *log = mqd_part_log(rp->local);
    uint64_t end = mqd_plog_end_offset(log);
    if (log_start_of(info, &start) != 0) {
        MQD_WARN("repl", "%s/%u: below-log-start answer without mqd:log-start: fetching again",
                 rp->topic, rp->part);
        return;
    }
    if (start <= end)
        return; /* it no longer is behind (the answer crossed an append): fetch again */
    MQD_NOTICE("repl",
               "%s/%u: log end %" PRIu64 " is below leader %" PRIu32 "'s log start %" PRIu64
               ": resetting the replica to it",
               rp->topic, rp->part, end, leader, start);
    int rc = mqd_plog_reset(log, start, on_reset, rp);
    if (rc == 0)
        rp->truncating = true;
    else
        MQD_WARN("repl", "%s/%u: replica reset not started: %s", rp->topic, rp->part,
                 mqd_strerror(rc));
}
