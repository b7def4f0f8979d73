/* Corrupt records inside a segment (issue 16, point 8): skip and count.
 *
 * Policy. A record that fails its header or CRC check where whole records are known to
 * be (a sealed segment, or the tail below what recovery checked) is lost: nothing in a
 * single-node log can repair it. Readers skip it instead of stopping there (every
 * consumer of the partition stopped at it before, with no error, and the intact records
 * after it were unreachable): mqd_plog_read hands out one MQD_REC_CORRUPT record per
 * offset the damage covers, which cursors mark done like control records, and reads on
 * from the next intact record. Each damaged span is logged once and counted once per
 * offset, for `topic describe` and the metrics.
 *
 * Finding the next intact record: the damaged record's own length first (damage in the
 * payload), else a byte-by-byte scan of the rest of the segment for a header whose
 * offset lies after the damage and inside the segment, whose length fits and whose CRC
 * holds. The result is cached per span, so readers passing the damage later do not
 * scan again. Owner thread only, like mqd_plog_read.
 */
#include "config.h"
#include "store/store_int.h"
#include "util/util.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SCAN_CHUNK (256u << 10)
#define MAX_SPANS 1024 /* spans remembered; past it each pass over one counts again */

typedef struct span {
    uint64_t base, pos; /* segment and file position of the damaged record */
    uint64_t off;       /* first offset it covers */
    uint64_t next_pos, next_off;
} span_t;

struct corrupt_set {
    span_t *v;
    size_t n, cap;
    uint64_t count, first;
};

/* Is there an intact record with an offset in (after, limit) at file position q? */
static int intact_at(int fd, uint64_t q, const uint8_t *h, uint64_t seg_end, uint64_t after,
                     uint64_t limit)
{
    uint32_t len = rd32(h);
    uint64_t off = rd64(h + 8);
    if (len < REC_LEN_MIN || len > REC_MAX_DATA + REC_LEN_MIN || q + 4 + len > seg_end ||
        off <= after || off >= limit)
        return 0;
    uint8_t *b = malloc(len);
    if (!b)
        return 0;
    int ok =
        pread(fd, b, len, (off_t)q + 4) == (ssize_t)len && mqd_crc32c(0, b + 4, len - 4) == rd32(b);
    free(b);
    return ok;
}

/* The first intact record after the damage at pos (offset off), or seg_end. */
static uint64_t find_next(int fd, uint64_t pos, uint64_t off, uint64_t seg_end, uint64_t limit)
{
    uint8_t h[REC_HDR];
    if (pos + REC_HDR <= seg_end && pread(fd, h, REC_HDR, (off_t)pos) == REC_HDR) {
        uint64_t q = pos + 4 + (uint64_t)rd32(h);
        uint8_t h2[REC_HDR];
        if (q + REC_HDR <= seg_end && pread(fd, h2, REC_HDR, (off_t)q) == REC_HDR &&
            intact_at(fd, q, h2, seg_end, off, limit))
            return q;
    }
    uint8_t *buf = malloc(SCAN_CHUNK);
    if (!buf)
        return seg_end;
    uint64_t found = seg_end;
    for (uint64_t at = pos + 1; found == seg_end && at + REC_HDR <= seg_end;) {
        uint64_t n = seg_end - at < SCAN_CHUNK ? seg_end - at : SCAN_CHUNK;
        ssize_t got = pread(fd, buf, (size_t)n, (off_t)at);
        if (got < (ssize_t)REC_HDR)
            break;
        size_t last = (size_t)got - REC_HDR;
        for (size_t i = 0; i <= last && found == seg_end; i++)
            if (intact_at(fd, at + i, buf + i, seg_end, off, limit))
                found = at + i;
        at += last + 1; /* the next chunk starts at the first header not yet tried */
    }
    free(buf);
    return found;
}

static span_t *span_find(struct corrupt_set *cs, uint64_t base, uint64_t pos)
{
    for (size_t i = 0; cs && i < cs->n; i++)
        if (cs->v[i].base == base && cs->v[i].pos == pos)
            return &cs->v[i];
    return NULL;
}

static struct corrupt_set *set_of(mqd_plog_t *log)
{
    if (!log->corrupt) {
        log->corrupt = calloc(1, sizeof *log->corrupt);
        if (log->corrupt)
            log->corrupt->first = UINT64_MAX;
    }
    return log->corrupt;
}

int store_corrupt_skip(mqd_plog_t *log, int fd, uint64_t base, uint64_t pos, uint64_t off,
                       uint64_t seg_end, uint64_t seg_next_off, uint64_t *next_pos,
                       uint64_t *next_off)
{
    span_t *sp = span_find(log->corrupt, base, pos);
    if (sp) {
        *next_pos = sp->next_pos;
        *next_off = sp->next_off;
        return 0;
    }
    struct corrupt_set *cs = set_of(log);
    if (!cs)
        return MQD_ENOMEM;
    uint64_t np = find_next(fd, pos, off, seg_end, seg_next_off);
    uint64_t no = seg_next_off;
    uint8_t h[16];
    if (np < seg_end && pread(fd, h, sizeof h, (off_t)np) == (ssize_t)sizeof h)
        no = rd64(h + 8);
    if (no <= off) /* a segment whose next_off is not past the damage: skip one offset */
        no = off + 1;
    span_t s = {base, pos, off, np, no};
    span_t *nv = cs->n < MAX_SPANS ? mqd_array_grow(cs->v, &cs->cap, cs->n, sizeof *nv, 8) : NULL;
    if (nv) {
        cs->v = nv;
        cs->v[cs->n++] = s;
    }
    cs->count += no - off;
    if (off < cs->first)
        cs->first = off;
    MQD_ERR("store",
            "%s/%020" PRIu64 ".log: corrupt record at position %" PRIu64 " (offsets %" PRIu64
            "..%" PRIu64 "): %" PRIu64 " record(s) lost, readers skip "
            "them and go on at offset %" PRIu64,
            log->dir, base, pos, off, no - 1, no - off, no);
    *next_pos = np;
    *next_off = no;
    return 0;
}

void mqd_plog_corrupt(const mqd_plog_t *log, uint64_t *count, uint64_t *first)
{
    const struct corrupt_set *cs = log->corrupt;
    *count = cs ? cs->count : 0;
    *first = cs ? cs->first : UINT64_MAX;
}

void store_corrupt_free(mqd_plog_t *log)
{
    if (log->corrupt)
        free(log->corrupt->v);
    free(log->corrupt);
    log->corrupt = NULL;
}
