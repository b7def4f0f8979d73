/* Raw records (replication): a leader reads whole records as they are on disk (header,
 * CRC and payload, byte for byte) and ships them; a follower checks each one and appends
 * the same bytes, so neither side decodes or re-encodes a record, and the follower's log
 * is a byte copy of the leader's up to where it fetched. */
#include "config.h"
#include "store/store_int.h"
#include "util/util.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

int mqd_store_raw_next(const void *buf, size_t len, size_t *pos, mqd_raw_rec_t *out)
{
    size_t at = *pos;
    if (at == len)
        return 0;
    if (at > len)
        return MQD_EINVAL;
    const uint8_t *h = (const uint8_t *)buf + at;
    if (len - at < REC_HDR)
        return MQD_ECORRUPT;
    uint32_t rl = rd32(h);
    /* rl counts the bytes after itself; the CRC covers all of them but the CRC */
    if (rl < REC_LEN_MIN || rl - REC_LEN_MIN > REC_MAX_DATA || (size_t)rl + 4 > len - at)
        return MQD_ECORRUPT;
    uint32_t crc = rd32(h + 4);
    if (mqd_crc32c(0, h + 8, rl - 4) != crc)
        return MQD_ECORRUPT;
    *out = (mqd_raw_rec_t){
        .offset = rd64(h + 8),
        .timestamp_ms = (int64_t)rd64(h + 16),
        .epoch = rd32(h + 24),
        .flags = rd32(h + 28),
        .txn = rd64(h + 32),
        .crc = crc,
        .size = rl + 4,
        .data = h + REC_HDR,
        .len = rl - REC_LEN_MIN,
    };
    *pos = at + 4 + rl;
    return 1;
}

/* Where a raw read stands in one segment. */
typedef struct raw_pos {
    int fd;
    uint64_t pos;     /* file position of the record at_off */
    uint64_t at_off;
    uint64_t seg_end; /* bytes of whole records in the segment */
    bool has_next;    /* a later segment exists */
} raw_pos_t;

/* Finds the segment holding `from` (the last one whose base is not above it: a segment
 * that ends at `from` is followed by one based there) and the index entry at or before
 * it, under the log mutex. */
static int raw_locate(mqd_plog_t *log, uint64_t from, raw_pos_t *p)
{
    pthread_mutex_lock(&log->mu);
    seg_t *s;
    int rc = plog_locate_seg(log, from, &s, &p->fd);
    if (rc == 0) {
        p->pos = seg_lookup_pos(s, from, &p->at_off);
        p->seg_end = s->size;
        p->has_next = s->next != NULL;
    }
    pthread_mutex_unlock(&log->mu);
    return rc;
}

/* Walks record headers from the index entry up to offset `to` (at most an index
 * interval of bytes). */
static int raw_skip(raw_pos_t *p, uint64_t to)
{
    while (p->at_off < to) {
        uint8_t h[4];
        if (p->pos + REC_HDR > p->seg_end || pread(p->fd, h, 4, (off_t)p->pos) != 4)
            return MQD_ECORRUPT;
        uint32_t rl = rd32(h);
        if (rl < REC_LEN_MIN || p->pos + 4 + rl > p->seg_end)
            return MQD_ECORRUPT;
        p->pos += 4 + (uint64_t)rl;
        p->at_off++;
    }
    return 0;
}

/* Takes the whole, intact records at the front of b[0..got) whose offsets run from
 * *next up to `bound`. Returns the bytes taken; *need: the size of a whole record that
 * did not fit (0: none); *bad: the first record failed its checks. */
static size_t raw_take(const uint8_t *b, size_t got, uint64_t *next, uint64_t bound,
                       uint64_t *need, bool *bad)
{
    size_t c = 0;
    *need = 0;
    *bad = false;
    while (*next < bound && got - c >= REC_HDR) {
        uint32_t rl = rd32(b + c);
        if (rl < REC_LEN_MIN) {
            *bad = true;
            break;
        }
        if ((size_t)rl + 4 > got - c) {
            *need = 4 + (uint64_t)rl;
            break;
        }
        size_t at = c;
        mqd_raw_rec_t r;
        if (mqd_store_raw_next(b, c + 4 + rl, &at, &r) != 1 || r.offset != *next) {
            *bad = true;
            break;
        }
        c = at;
        (*next)++;
    }
    if (c == 0 && !*bad && !*need && *next < bound && got < REC_HDR)
        *need = REC_HDR; /* not even a header fits */
    return c;
}

int mqd_plog_read_raw(mqd_plog_t *log, uint64_t from, void *buf, size_t cap, size_t *len,
                      uint64_t *next_offset)
{
    if (log->truncating)
        return MQD_EAGAIN;
    if (from < log->start)
        return MQD_ERANGE;
    uint64_t bound = mqd_plog_stable_offset(log), next = from;
    size_t used = 0;
    int rc = 0;
    raw_pos_t p = {.fd = -1};
    if (from < bound) {
        store_fd_touch(log);
        rc = raw_locate(log, from, &p);
        if (rc == 0)
            rc = raw_skip(&p, from);
        if (rc == 0 && cap < REC_HDR && p.pos + REC_HDR <= p.seg_end) {
            uint8_t h[4]; /* not even a header fits: say how much would */
            if (pread(p.fd, h, 4, (off_t)p.pos) != 4)
                return MQD_EIO;
            *len = 4 + (size_t)rd32(h);
            return MQD_ETOOBIG;
        }
    }
    while (rc == 0 && next < bound && used < cap) {
        if (p.pos >= p.seg_end) {
            if (!p.has_next)
                break;
            rc = raw_locate(log, next, &p);
            if (rc == 0 && p.pos >= p.seg_end)
                rc = MQD_ECORRUPT; /* the offsets it claims are not in it */
            if (rc == 0)
                rc = raw_skip(&p, next);
            continue;
        }
        size_t n = cap - used;
        if (n > p.seg_end - p.pos)
            n = (size_t)(p.seg_end - p.pos);
        ssize_t got = pread(p.fd, (uint8_t *)buf + used, n, (off_t)p.pos);
        if (got <= 0) {
            rc = got == 0 ? 0 : MQD_EIO; /* 0: a failed log cut its unsynced tail */
            break;
        }
        uint64_t need;
        bool bad;
        size_t c = raw_take((uint8_t *)buf + used, (size_t)got, &next, bound, &need, &bad);
        used += c;
        p.pos += c;
        if (c == 0 && used == 0 && (bad || (need && (size_t)got == n))) {
            /* a record larger than the whole buffer, or one that runs past the end of
             * its segment (damage kept in an unhealthy segment: never whole) */
            rc = !bad && n == cap ? MQD_ETOOBIG : MQD_ECORRUPT;
            if (rc == MQD_ETOOBIG)
                *len = (size_t)need; /* the caller grows its buffer to this */
        }
        if (c < (size_t)got || c == 0)
            break; /* the buffer is full, a bound, damage, or a short read */
    }
    if (rc != 0 && used == 0)
        return rc; /* else what came before the error first: the next call gets it */
    *len = used;
    *next_offset = next;
    return 0;
}

int mqd_plog_append_raw(mqd_plog_t *log, const void *buf, size_t len, uint64_t *first_offset)
{
    if (__atomic_load_n(&log->failed, __ATOMIC_ACQUIRE))
        return MQD_EFAILED;
    if (log->truncating)
        return MQD_EAGAIN;
    /* All or nothing: every record is checked before a byte goes into the batch. */
    size_t pos = 0;
    uint64_t next = log->end;
    uint32_t nrec = 0;
    mqd_raw_rec_t r;
    int rc;
    while ((rc = mqd_store_raw_next(buf, len, &pos, &r)) == 1) {
        if (r.offset != next)
            return MQD_ERANGE;
        next++;
        nrec++;
    }
    if (rc < 0)
        return rc;
    if (nrec > 0) {
        store_fd_touch(log); /* the flusher writes through the tail's descriptor */
        pthread_mutex_lock(&log->mu);
        rc = seg_fd_get(log, log->tail);
        pthread_mutex_unlock(&log->mu);
        if (rc < 0)
            return rc;
        rc = plog_batch_reserve(log, len);
        if (rc != 0)
            return rc;
        batch_t *b = log->pending;
        memcpy(b->buf + b->len, buf, len);
        b->len += len;
        b->nrec += nrec;
        b->end_off = next;
    }
    *first_offset = log->end;
    log->end = next;
    return 0;
}
