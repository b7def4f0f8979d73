/* Leader-epoch lookup (KIP-101 / KIP-279 style) from the log itself: every record carries
 * the epoch it was written under (mqd_plog_set_epoch) and epochs only grow along a log,
 * so "where do epochs <= E end" is a binary search over offsets, with no epoch cache to
 * keep durable beside the log. */
#include "config.h"
#include "repl/repl_int.h"

/* The epoch of the record at `off` (below the stable offset); 0 and MQD_E* on failure. */
static int epoch_at(mqd_repl_t *r, mqd_plog_t *log, uint64_t off, uint32_t *epoch)
{
    size_t len = 0, pos = 0;
    uint64_t next;
    mqd_raw_rec_t rec;
    int rc = mqd_plog_read_raw(log, off, r->buf, r->cap, &len, &next);
    if (rc == MQD_ETOOBIG && (rc = mqd_repl_grow(r, len)) == 0)
        rc = mqd_plog_read_raw(log, off, r->buf, r->cap, &len, &next);
    if (rc == 0 && mqd_store_raw_next(r->buf, len, &pos, &rec) != 1)
        rc = MQD_EIO;
    if (rc == 0)
        *epoch = rec.epoch;
    return rc;
}

int mqd_repl_epoch_end(mqd_repl_t *r, mqd_plog_t *log, uint32_t e, uint64_t *end, uint32_t *largest)
{
    uint64_t lo = mqd_plog_start_offset(log), hi = mqd_plog_stable_offset(log);
    uint32_t ep = 0;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int rc = epoch_at(r, log, mid, &ep);
        if (rc != 0)
            return rc;
        if (ep > e)
            hi = mid;
        else
            lo = mid + 1;
    }
    ep = 0;
    if (lo > mqd_plog_start_offset(log)) {
        int rc = epoch_at(r, log, lo - 1, &ep);
        if (rc != 0)
            return rc;
    }
    *end = lo;
    *largest = ep;
    return 0;
}
