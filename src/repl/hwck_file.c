/* The high-watermark checkpoint file (Kafka's replication-offset-checkpoint): the table
 * of (topic, partition) -> watermark and epoch, its text form and its durable
 * replacement. Only util is used here, so the fuzz target and the unit test link it
 * alone. What is read back is outside input: a torn or damaged file, or one an operator
 * edited, must be refused whole (MQD_ECORRUPT), never half trusted. */
#include "config.h"
#include "repl/repl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER "mqd replication-offset-checkpoint 1\n"
#define MAX_FILE (64u << 20) /* some 200,000 replicas; larger is not ours */

static bool topic_ok(const char *t, size_t n)
{
    if (n == 0 || n > MQD_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
            return false;
    return true;
}

static int cmp(const char *ta, uint32_t pa, const char *tb, uint32_t pb)
{
    int c = strcmp(ta, tb);
    return c ? c : pa < pb ? -1 : pa > pb;
}

/* The index of (topic, part) in ck, or where it would go (*found false). */
static size_t find(const mqd_repl_hwck_t *ck, const char *topic, uint32_t part, bool *found)
{
    size_t lo = 0, hi = ck->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp(ck->e[mid].topic, ck->e[mid].part, topic, part);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

int mqd_repl_hwck_set(mqd_repl_hwck_t *ck, const char *topic, uint32_t part, uint64_t hw,
                      uint32_t epoch)
{
    if (!topic || !topic_ok(topic, strlen(topic)))
        return MQD_EINVAL;
    bool found;
    size_t i = find(ck, topic, part, &found);
    if (found) {
        if (ck->e[i].hw == hw && ck->e[i].epoch == epoch)
            return 0;
        ck->e[i].hw = hw;
        ck->e[i].epoch = epoch;
        return 1;
    }
    mqd_repl_hwck_ent_t *ne = mqd_array_grow(ck->e, &ck->cap, ck->n, sizeof *ck->e, 16);
    char *t = strdup(topic);
    if (!ne || !t) {
        free(t);
        return MQD_ENOMEM;
    }
    ck->e = ne;
    memmove(ck->e + i + 1, ck->e + i, (ck->n - i) * sizeof *ck->e);
    ck->e[i] = (mqd_repl_hwck_ent_t){.topic = t, .part = part, .epoch = epoch, .hw = hw};
    ck->n++;
    return 1;
}

const mqd_repl_hwck_ent_t *mqd_repl_hwck_get(const mqd_repl_hwck_t *ck, const char *topic,
                                             uint32_t part)
{
    bool found;
    size_t i = find(ck, topic, part, &found);
    return found ? &ck->e[i] : NULL;
}

void mqd_repl_hwck_clear(mqd_repl_hwck_t *ck)
{
    for (size_t i = 0; i < ck->n; i++)
        free(ck->e[i].topic);
    free(ck->e);
    *ck = (mqd_repl_hwck_t){0};
}

int mqd_repl_hwck_format(const mqd_repl_hwck_t *ck, char **out, size_t *len)
{
    size_t cap = sizeof HEADER + 64, n = 0;
    for (size_t i = 0; i < ck->n; i++)
        cap += strlen(ck->e[i].topic) + 3 * 21 + 4;
    char *b = malloc(cap);
    if (!b)
        return MQD_ENOMEM;
    n += (size_t)snprintf(b + n, cap - n, "%s", HEADER);
    for (size_t i = 0; i < ck->n; i++)
        n += (size_t)snprintf(b + n, cap - n, "%s %" PRIu32 " %" PRIu64 " %" PRIu32 "\n",
                              ck->e[i].topic, ck->e[i].part, ck->e[i].hw, ck->e[i].epoch);
    uint32_t crc = mqd_crc32c(0, b, n);
    n += (size_t)snprintf(b + n, cap - n, "end %zu %08" PRIx32 "\n", ck->n, crc);
    *out = b;
    *len = n;
    return 0;
}

/* ---- parsing ---- */

/* The next space- or newline-ended token of [*p, end): *p moves past it (and one separator
 * `sep`, which must follow). */
static bool token(const char **p, const char *end, char sep, const char **tok, size_t *n)
{
    const char *s = *p, *q = s;
    while (q < end && *q != ' ' && *q != '\n')
        q++;
    if (q == end || *q != sep || q == s)
        return false;
    *tok = s;
    *n = (size_t)(q - s);
    *p = q + 1;
    return true;
}

/* Plain decimal (no sign, no leading zero but "0", no overflow of max). */
static bool number(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 20 || (n > 1 && s[0] == '0'))
        return false;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (max - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static bool parse_line(const char **p, const char *end, mqd_repl_hwck_ent_t *e, char *topic)
{
    const char *tok[4];
    size_t len[4];
    uint64_t part, hw, epoch;
    if (!token(p, end, ' ', &tok[0], &len[0]) || !token(p, end, ' ', &tok[1], &len[1]) ||
        !token(p, end, ' ', &tok[2], &len[2]) || !token(p, end, '\n', &tok[3], &len[3]))
        return false;
    if (!topic_ok(tok[0], len[0]) || !number(tok[1], len[1], 65535, &part) ||
        !number(tok[2], len[2], UINT64_MAX, &hw) || !number(tok[3], len[3], UINT32_MAX, &epoch))
        return false;
    memcpy(topic, tok[0], len[0]);
    topic[len[0]] = '\0';
    e->part = (uint32_t)part;
    e->hw = hw;
    e->epoch = (uint32_t)epoch;
    return true;
}

/* "end COUNT CRC\n" at p, the last bytes of the file. */
static bool parse_end(const char *p, const char *end, size_t count, uint32_t crc)
{
    const char *tok[3];
    size_t len[3];
    uint64_t n, want = 0;
    if (!token(&p, end, ' ', &tok[0], &len[0]) || len[0] != 3 || memcmp(tok[0], "end", 3) != 0 ||
        !token(&p, end, ' ', &tok[1], &len[1]) || !token(&p, end, '\n', &tok[2], &len[2]) ||
        p != end || !number(tok[1], len[1], SIZE_MAX, &n) || n != count || len[2] != 8)
        return false;
    for (size_t i = 0; i < 8; i++) {
        char c = tok[2][i];
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                                            : 16;
        if (d == 16)
            return false;
        want = want << 4 | d;
    }
    return want == crc;
}

int mqd_repl_hwck_parse(const char *b, size_t n, mqd_repl_hwck_t *out)
{
    const size_t hl = sizeof HEADER - 1;
    mqd_repl_hwck_t ck = {0};
    char topic[MQD_NAME_MAX + 1];
    if (n < hl || n > MAX_FILE || memcmp(b, HEADER, hl) != 0)
        return MQD_ECORRUPT;
    const char *p = b + hl, *end = b + n;
    int rc = 0;
    while (rc == 0 && p < end && !(end - p >= 4 && memcmp(p, "end ", 4) == 0)) {
        mqd_repl_hwck_ent_t e;
        if (!parse_line(&p, end, &e, topic)) {
            rc = MQD_ECORRUPT;
            break;
        }
        /* sorted as written: a line out of order or repeated is damage, not ours */
        if (ck.n && cmp(ck.e[ck.n - 1].topic, ck.e[ck.n - 1].part, topic, e.part) >= 0) {
            rc = MQD_ECORRUPT;
            break;
        }
        rc = mqd_repl_hwck_set(&ck, topic, e.part, e.hw, e.epoch) < 0 ? MQD_ENOMEM : 0;
    }
    if (rc == 0 && (p >= end || !parse_end(p, end, ck.n, mqd_crc32c(0, b, (size_t)(p - b)))))
        rc = MQD_ECORRUPT;
    if (rc != 0) {
        mqd_repl_hwck_clear(&ck);
        return rc;
    }
    *out = ck;
    return 0;
}

/* ---- the file ---- */

int mqd_repl_hwck_write(const char *dir, const char *buf, size_t len)
{
    char path[PATH_MAX], tmp[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, MQD_REPL_HWCK_FILE) >= sizeof path ||
        (size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return MQD_EINVAL;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0)
        return mqd_errno_rc(errno);
    int rc = 0;
    for (size_t off = 0; rc == 0 && off < len;) {
        ssize_t w = write(fd, buf + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            rc = mqd_errno_rc(w < 0 ? errno : ENOSPC);
        else
            off += (size_t)w;
    }
    if (rc == 0 && fdatasync(fd) != 0)
        rc = mqd_errno_rc(errno);
    if (close(fd) != 0 && rc == 0)
        rc = MQD_EIO;
    /* the rename is what replaces the old file: before it, the old one is whole */
    if (rc == 0 && rename(tmp, path) != 0)
        rc = mqd_errno_rc(errno);
    if (rc == 0)
        rc = mqd_fsync_dir(dir);
    if (rc != 0)
        unlink(tmp);
    return rc;
}

int mqd_repl_hwck_read(const char *dir, mqd_repl_hwck_t *out)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, MQD_REPL_HWCK_FILE) >= sizeof path)
        return MQD_EINVAL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? MQD_ENOENT : MQD_EIO;
    struct stat st;
    char *b = NULL;
    int rc = fstat(fd, &st) != 0 ? MQD_EIO : st.st_size > MAX_FILE ? MQD_ECORRUPT : 0;
    size_t n = rc == 0 ? (size_t)st.st_size : 0, got = 0;
    if (rc == 0 && !(b = malloc(n ? n : 1)))
        rc = MQD_ENOMEM;
    while (rc == 0 && got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            rc = r < 0 ? MQD_EIO : MQD_ECORRUPT; /* shorter than fstat said */
        else
            got += (size_t)r;
    }
    close(fd);
    if (rc == 0)
        rc = mqd_repl_hwck_parse(b, n, out);
    free(b);
    return rc;
}
