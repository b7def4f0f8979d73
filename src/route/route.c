/* route: the address grammar of ARCHITECTURE §1 and Kafka's key -> partition hash. */
#include "config.h"
#include "route/route.h"

#include <string.h>
#include <stdio.h>
#include <strings.h>

#define DLQ_WORD "$DeadLetterQueue"
#define MGMT_WORD "$management"
#define CBS_WORD "$cbs"

/* One '/'-separated piece of an address; never NUL-terminated. */
typedef struct seg {
    const char *p;
    size_t len;
} seg_t;

/* Enough for T/$DeadLetterQueue/ConsumerGroups/G/Partitions/N plus one to detect excess. */
#define MAX_SEGS 7

static bool name_char(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c == '.' || c == '_' || c == '~' || c == ':' || c == '@' || c == '$' || c == '-';
}

/* A single name (topic or group): 1..255 of the charset, not "." or "..". */
static bool simple_name_valid(const char *s, size_t len)
{
    if (len == 0 || len > MQD_NAME_MAX)
        return false;
    if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    for (size_t i = 0; i < len; i++) {
        if (!name_char((unsigned char)s[i]))
            return false;
    }
    return true;
}

static char ascii_lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

/* ASCII-only folding: the fixed words must not depend on the process locale. */
static bool word_eq(const seg_t *sg, const char *word, bool nocase)
{
    size_t wl = strlen(word);

    if (sg->len != wl)
        return false;
    if (!nocase)
        return memcmp(sg->p, word, wl) == 0;
    for (size_t i = 0; i < wl; i++) {
        if (ascii_lower(sg->p[i]) != ascii_lower(word[i]))
            return false;
    }
    return true;
}

bool mqd_topic_name_valid(const char *s, size_t len)
{
    static const char suffix[] = "/" DLQ_WORD;
    size_t sl = sizeof(suffix) - 1;

    if (s == NULL || len > MQD_NAME_MAX)
        return false;
    /* The dead-letter topic of T is the only name with a '/': "T/$DeadLetterQueue". */
    if (len > sl && memcmp(s + len - sl, suffix, sl) == 0)
        len -= sl;
    /* the nodes mqd serves itself: no topic (auto-created or by management) shadows them */
    if ((len == sizeof MGMT_WORD - 1 && strncasecmp(s, MGMT_WORD, len) == 0) ||
        (len == sizeof CBS_WORD - 1 && strncasecmp(s, CBS_WORD, len) == 0))
        return false;
    return simple_name_valid(s, len);
}

/* Partition numbers: plain decimal digits (leading zeros tolerated), value < 2^31. */
static int parse_partition(const seg_t *sg, uint32_t *out)
{
    uint64_t v = 0;

    if (sg->len == 0 || sg->len > 20)
        return MQD_EINVAL;
    for (size_t i = 0; i < sg->len; i++) {
        unsigned char c = (unsigned char)sg->p[i];
        if (c < '0' || c > '9')
            return MQD_EINVAL;
        v = v * 10 + (uint64_t)(c - '0');
        if (v > INT32_MAX)
            return MQD_EINVAL;
    }
    *out = (uint32_t)v;
    return 0;
}

/* Splits on '/'; MQD_EINVAL on an empty piece or more than MAX_SEGS pieces. */
static int split(const char *s, size_t len, seg_t *segs, size_t *nsegs)
{
    size_t n = 0, start = 0;

    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != '/')
            continue;
        if (i == start || n == MAX_SEGS)
            return MQD_EINVAL;
        segs[n].p = s + start;
        segs[n].len = i - start;
        n++;
        start = i + 1;
    }
    *nsegs = n;
    return 0;
}

/* Parses the part after the topic: "", "Partitions/N", "ConsumerGroups/G[/Partitions/N]". */
static int parse_tail(const seg_t *sg, size_t n, mqd_addr_t *a)
{
    if (n == 0) {
        a->kind = MQD_ADDR_TOPIC;
        return 0;
    }
    if (n == 2 && word_eq(&sg[0], "Partitions", true)) {
        a->kind = MQD_ADDR_PARTITION;
        return parse_partition(&sg[1], &a->partition);
    }
    if ((n != 2 && n != 4) || !word_eq(&sg[0], "ConsumerGroups", true))
        return MQD_EINVAL;
    if (!simple_name_valid(sg[1].p, sg[1].len))
        return MQD_EINVAL;
    for (size_t i = 0; i < sg[1].len; i++)
        a->group[i] = ascii_lower(sg[1].p[i]);
    a->group[sg[1].len] = '\0';
    if (n == 2) {
        a->kind = MQD_ADDR_GROUP;
        return 0;
    }
    if (!word_eq(&sg[2], "Partitions", true))
        return MQD_EINVAL;
    a->kind = MQD_ADDR_GROUP_PARTITION;
    return parse_partition(&sg[3], &a->partition);
}

/* Event Hubs SDKs and uamqp name the node with a full URL ("amqps://host/T"): the
 * address is the path after the authority. */
static void strip_url(const char **s, size_t *len)
{
    static const char *const schemes[] = {"amqp://", "amqps://"};
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        size_t sl = strlen(schemes[i]);
        if (*len > sl && strncasecmp(*s, schemes[i], sl) == 0) {
            const char *p = memchr(*s + sl, '/', *len - sl);
            size_t rest = p ? (size_t)(*s + *len - p) - 1 : 0;
            *s = p ? p + 1 : *s + *len;
            *len = rest;
            return;
        }
    }
}

int mqd_addr_parse(const char *s, size_t len, mqd_addr_t *out)
{
    seg_t sg[MAX_SEGS];
    size_t n = 0, ntopic = 1;
    mqd_addr_t a;
    int rc;

    if (s == NULL || out == NULL || len == 0)
        return MQD_EINVAL;
    strip_url(&s, &len);
    if (len == 0)
        return MQD_EINVAL;
    memset(&a, 0, sizeof(a));
    rc = split(s, len, sg, &n);
    if (rc != 0)
        return rc;
    if (word_eq(&sg[0], MGMT_WORD, true)) {
        /* The management node has no sub-addresses, and no topic may shadow it. */
        if (n != 1)
            return MQD_EINVAL;
        a.kind = MQD_ADDR_MANAGEMENT;
        *out = a;
        return 0;
    }
    if (word_eq(&sg[0], CBS_WORD, true)) {
        if (n != 1)
            return MQD_EINVAL;
        a.kind = MQD_ADDR_CBS;
        *out = a;
        return 0;
    }
    if (!simple_name_valid(sg[0].p, sg[0].len))
        return MQD_EINVAL;
    if (n >= 2 && word_eq(&sg[1], DLQ_WORD, false))
        ntopic = 2;
    {
        size_t tlen = (size_t)(sg[ntopic - 1].p + sg[ntopic - 1].len - s);
        if (tlen > MQD_NAME_MAX)
            return MQD_EINVAL;
        memcpy(a.topic, s, tlen);
        a.topic[tlen] = '\0';
    }
    rc = parse_tail(sg + ntopic, n - ntopic, &a);
    if (rc != 0)
        return rc;
    *out = a;
    return 0;
}

uint32_t mqd_murmur2(const void *data, size_t len)
{
    const uint8_t *d = data;
    const uint32_t m = 0x5bd1e995u;
    const int r = 24;
    /* Kafka takes the length as a Java int; keep the same truncation. */
    uint32_t h = 0x9747b28cu ^ (uint32_t)len;
    size_t nblocks = len / 4;

    for (size_t i = 0; i < nblocks; i++) {
        const uint8_t *b = d + i * 4;
        uint32_t k = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
                     ((uint32_t)b[3] << 24);
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *tail = d + (len & ~(size_t)3);
    switch (len & 3) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

uint32_t mqd_route_key_partition(const void *key, size_t len, uint32_t nparts)
{
    /* Kafka's toPositive() masks the sign bit rather than taking abs(). */
    if (nparts == 0)
        return 0;
    return (mqd_murmur2(key, len) & 0x7fffffffu) % nparts;
}

/* FNV-1a of the reply address: the node's name must be a topic name whatever the address
 * holds (a URL, a '/', a long name); a collision can only join two reply addresses of the
 * same connection. */
void mqd_reply_node_name(uint64_t conn, const char *addr, size_t len, char *out, size_t outlen)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)addr[i]) * 1099511628211ull;
    snprintf(out, outlen, MQD_REPLY_NODE_PREFIX "%llx.%016llx", (unsigned long long)conn,
             (unsigned long long)h);
}

bool mqd_reply_node_is(const char *name)
{
    return strncmp(name, MQD_REPLY_NODE_PREFIX, sizeof MQD_REPLY_NODE_PREFIX - 1) == 0;
}
