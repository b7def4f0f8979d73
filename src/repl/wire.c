/* The fetch stream's message: hand-encoded AMQP sections (a message-annotations map of
 * three entries and one data section), so the leader sends the stored bytes without a
 * copy through Proton's codec and the follower reads them with a small, bounded parser
 * (fuzz_repl). */
#include "config.h"
#include "repl/repl.h"

#include <stdlib.h>
#include <string.h>

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static size_t put_key(uint8_t *p, const char *k)
{
    size_t n = strlen(k);
    p[0] = 0xa3; /* sym8 */
    p[1] = (uint8_t)n;
    memcpy(p + 2, k, n);
    return n + 2;
}

size_t mqd_repl_run_head(const mqd_repl_run_t *run, uint8_t *p)
{
    uint8_t *map;
    size_t o = 0;
    p[o++] = 0x00, p[o++] = 0x53, p[o++] = 0x72; /* message-annotations */
    p[o++] = 0xd1;                               /* map32: size, count */
    map = p + o;
    o += 8;
    o += put_key(p + o, "x-repl-base");
    p[o++] = 0x80;
    put64(p + o, run->base), o += 8;
    o += put_key(p + o, "x-repl-count");
    p[o++] = 0x70;
    put32(p + o, run->count), o += 4;
    o += put_key(p + o, "x-repl-hw");
    p[o++] = 0x80;
    put64(p + o, run->hw), o += 8;
    put32(map, (uint32_t)(p + o - map - 4));
    put32(map + 4, 6);
    p[o++] = 0x00, p[o++] = 0x53, p[o++] = 0x75; /* data */
    p[o++] = 0xb0;
    put32(p + o, (uint32_t)run->len), o += 4;
    return o;
}

int mqd_repl_run_encode(const mqd_repl_run_t *run, uint8_t **buf, size_t *cap, size_t *len)
{
    size_t need = MQD_REPL_HEAD_MAX + run->len;
    if (run->len > UINT32_MAX)
        return MQD_ETOOBIG;
    if (*cap < need) {
        uint8_t *nb = realloc(*buf, need);
        if (!nb)
            return MQD_ENOMEM;
        *buf = nb;
        *cap = need;
    }
    size_t o = mqd_repl_run_head(run, *buf);
    if (run->len)
        memcpy(*buf + o, run->data, run->len);
    *len = o + run->len;
    return 0;
}

/* One unsigned integer value at m[*o]: ulong, smallulong, ulong0, uint, smalluint, uint0. */
static int get_uint(const uint8_t *m, size_t end, size_t *o, uint64_t *v)
{
    if (*o >= end)
        return MQD_ECORRUPT;
    uint8_t c = m[(*o)++];
    size_t w = c == 0x80 ? 8 : c == 0x70 ? 4 : c == 0x53 || c == 0x52 ? 1 : 0;
    if (w == 0 && c != 0x44 && c != 0x43)
        return MQD_ECORRUPT;
    if (end - *o < w)
        return MQD_ECORRUPT;
    uint64_t x = 0;
    for (size_t i = 0; i < w; i++)
        x = x << 8 | m[*o + i];
    *o += w;
    *v = x;
    return 0;
}

static int parse_annotations(const uint8_t *m, size_t len, size_t *o, mqd_repl_run_t *out)
{
    if (len - *o < 12 || m[*o] != 0x00 || m[*o + 1] != 0x53 || m[*o + 2] != 0x72 ||
        m[*o + 3] != 0xd1)
        return MQD_ECORRUPT;
    size_t size = get32(m + *o + 4), count = get32(m + *o + 8);
    *o += 8; /* now at the count field: size counts from here */
    if (size < 4 || size > len - *o || count % 2 || count > 64)
        return MQD_ECORRUPT;
    size_t end = *o + size;
    *o += 4;
    unsigned seen = 0;
    for (size_t i = 0; i < count / 2; i++) {
        if (end - *o < 2 || m[*o] != 0xa3 || m[*o + 1] > end - *o - 2)
            return MQD_ECORRUPT;
        const char *k = (const char *)m + *o + 2;
        size_t kl = m[*o + 1];
        *o += 2 + kl;
        uint64_t v;
        if (get_uint(m, end, o, &v) != 0)
            return MQD_ECORRUPT;
        if (kl == 11 && memcmp(k, "x-repl-base", 11) == 0)
            out->base = v, seen |= 1;
        else if (kl == 12 && memcmp(k, "x-repl-count", 12) == 0 && v <= UINT32_MAX)
            out->count = (uint32_t)v, seen |= 2;
        else if (kl == 9 && memcmp(k, "x-repl-hw", 9) == 0)
            out->hw = v, seen |= 4;
    }
    return *o == end && seen == 7 ? 0 : MQD_ECORRUPT;
}

int mqd_repl_run_parse(const uint8_t *m, size_t len, mqd_repl_run_t *out)
{
    mqd_repl_run_t r = {0};
    size_t o = 0;
    if (parse_annotations(m, len, &o, &r) != 0)
        return MQD_ECORRUPT;
    r.data = m + o;
    if (o < len) {
        if (len - o < 5 || m[o] != 0x00 || m[o + 1] != 0x53 || m[o + 2] != 0x75)
            return MQD_ECORRUPT;
        size_t n, h;
        if (m[o + 3] == 0xa0) {
            n = m[o + 4], h = 5;
        } else if (m[o + 3] == 0xb0 && len - o >= 8) {
            n = get32(m + o + 4), h = 8;
        } else {
            return MQD_ECORRUPT;
        }
        if (n != len - o - h)
            return MQD_ECORRUPT;
        r.data = m + o + h;
        r.len = n;
    }
    if ((r.len == 0) != (r.count == 0))
        return MQD_ECORRUPT;
    *out = r;
    return 0;
}

/* The body of a group-offset control record (gstate.c writes and applies it). */
#define GREC_MIN 9u            /* floor and at least one byte of name */
#define MQD_REPL_GROUP_MAX 255 /* = MQD_NAME_MAX (route.h) */

int mqd_repl_grec_encode(const char *group, uint64_t floor, uint8_t *out, size_t cap, size_t *len)
{
    size_t n = strlen(group);
    if (n == 0 || n > MQD_REPL_GROUP_MAX)
        return MQD_EINVAL;
    if (cap < 8 + n)
        return MQD_ETOOBIG;
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(floor >> (8 * i));
    memcpy(out + 8, group, n);
    *len = 8 + n;
    return 0;
}

int mqd_repl_grec_parse(const uint8_t *b, size_t len, uint64_t *floor, const char **name,
                        size_t *nlen)
{
    if (len < GREC_MIN || len - 8 > MQD_REPL_GROUP_MAX || memchr(b + 8, 0, len - 8))
        return MQD_ECORRUPT;
    uint64_t f = 0;
    for (int i = 0; i < 8; i++)
        f |= (uint64_t)b[i] << (8 * i);
    *floor = f;
    *name = (const char *)b + 8;
    *nlen = len - 8;
    return 0;
}

/* The record header is little-endian (store.h), unlike the AMQP encoding above. */
static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int mqd_repl_run_scan(const uint8_t *data, size_t len, uint32_t *max_epoch, bool *has_state)
{
    return mqd_repl_run_walk(data, len, max_epoch, has_state, NULL, NULL);
}

int mqd_repl_run_walk(const uint8_t *data, size_t len, uint32_t *max_epoch, bool *has_state,
                      void (*fn)(void *arg, uint64_t offset, uint32_t flags), void *arg)
{
    /* MQD_STORE_RAW_HDR; the offset, epoch and flags words after len, crc (, offset, ts) */
    enum { HDR = MQD_STORE_RAW_HDR, OFFSET_AT = 8, EPOCH_AT = 24, FLAGS_AT = 28 };
    uint32_t max = 0;
    bool state = false;
    size_t pos = 0;
    while (pos < len) {
        if (len - pos < HDR)
            return MQD_ECORRUPT;
        size_t n = (size_t)le32(data + pos) + 4;
        if (n < HDR || n > len - pos)
            return MQD_ECORRUPT;
        uint32_t e = le32(data + pos + EPOCH_AT),
                 kind = le32(data + pos + FLAGS_AT) & MQD_REC_KIND_MASK;
        max = e > max ? e : max;
        state |= kind == MQD_REC_CTRL_GROUP || kind == MQD_REC_CTRL_COMMIT;
        if (fn)
            fn(arg, (uint64_t)le32(data + pos + OFFSET_AT) | (uint64_t)le32(data + pos + OFFSET_AT + 4) << 32,
               le32(data + pos + FLAGS_AT));
        pos += n;
    }
    *max_epoch = max;
    *has_state = state;
    return 0;
}
