/* framepeek: the message-format of incoming transfers, read beside Proton (framepeek.h).
 *
 * A small state machine over the byte stream: 8 header bytes (a protocol header
 * "AMQP" id 1 0 0, or a frame header size/doff/type/channel), the extended header, the
 * performative, the rest of the frame. Only the performative's first bytes are parsed,
 * in place when the chunk holds them (the common case), else from a copy of at most
 * MQD_FPEEK_PERF_MAX bytes; payload bytes are stepped over. Only attach (to name the
 * handle, and to note a resume or a desired amqp:link:redirect) and transfer are read;
 * every other frame costs its header and descriptor.
 */
#include "config.h"
#include "codec/codec.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

#define TAG_MAX 32     /* AMQP 1.0 2.8.7: a delivery-tag is at most 32 octets */
#define DESC_ATTACH 0x12
#define DESC_TRANSFER 0x14

#define NO_PROTO 0xff
#define DESC_SASL_INIT 0x41
#define COND_FRAMING "amqp:connection:framing-error"
#define COND_DECODE "amqp:decode-error"
#define COND_LIMIT "amqp:resource-limit-exceeded"

enum { P_HDR, P_EXT, P_PERF, P_SKIP, P_DEAD };
enum { R_OK, R_NEED, R_BAD };

typedef struct lnk {
    uint64_t serial; /* this attach (a re-attach of the handle gets a new one) */
    uint64_t name_h; /* hash of the link name: a map of attaches never grows by their names */
    size_t name_len;
    uint32_t handle;
    uint16_t ch;
    bool open; /* a multi-frame delivery is in progress */
} lnk_t;

/* The fields of a transfer that the peek reads. */
typedef struct xfer {
    uint32_t handle, fmt;
    bool has_id, more, aborted;
    const uint8_t *tag;
    size_t tag_len;
} xfer_t;

/* An attach that carried a non-empty unsettled map or incomplete-unsettled=true. */
typedef struct rsm {
    uint64_t name_h;
    size_t name_len;
    bool peer_receiver; /* the attach's role */
} rsm_t;

typedef struct fent {
    uint64_t serial;
    uint32_t fmt;
    uint8_t tag_len;
    uint8_t tag[TAG_MAX];
} fent_t;

struct mqd_fpeek {
    uint8_t phase;
    uint8_t hlen;
    uint8_t hbuf[8];
    uint16_t ch;       /* channel of the current frame */
    uint32_t left;     /* bytes of the current frame after its 8-byte header not seen */
    uint32_t ext;      /* extended-header bytes still to step over */
    uint32_t perf_len; /* performative length once its list header was read, else 0 */
    uint32_t plen;     /* bytes in pbuf */
    uint64_t frames;
    uint64_t bytes;
    uint64_t unit_off; /* stream offset of the frame (or protocol header) being read */
    const char *cond;  /* why it stopped: an AMQP error condition and a reason */
    const char *why;
    bool pass_unit;     /* Proton may have the unit that stopped it (a protocol header) */
    uint8_t proto;      /* id of the last protocol header (0 AMQP, 3 SASL), NO_PROTO before */
    uint8_t ftype;      /* type of the current frame */
    bool sasl_init;     /* a sasl-init was seen */
    uint32_t max_frame; /* Proton's local max-frame-size; 0: none */
    lnk_t *links;
    size_t n_links, cap_links, last;
    uint64_t next_serial;
    size_t n_open;
    fent_t *fmt;
    size_t n_fmt, cap_fmt;
    rsm_t rsm[MQD_FPEEK_RESUME_MAX]; /* attaches that asked to resume, not yet taken */
    size_t n_rsm;
    rsm_t rdr[MQD_FPEEK_RESUME_MAX]; /* attaches that desired amqp:link:redirect, likewise */
    size_t n_rdr;
    uint8_t pbuf[MQD_FPEEK_PERF_MAX];
};

mqd_fpeek_t *mqd_fpeek_new(void)
{
    mqd_fpeek_t *fp = calloc(1, sizeof(mqd_fpeek_t));
    if (fp)
        fp->proto = NO_PROTO;
    return fp;
}

void mqd_fpeek_free(mqd_fpeek_t *fp)
{
    if (!fp)
        return;
    free(fp->links);
    free(fp->fmt);
    free(fp);
}

void mqd_fpeek_set_max_frame(mqd_fpeek_t *fp, uint32_t max)
{
    fp->max_frame = max;
}

bool mqd_fpeek_waiting(const mqd_fpeek_t *fp)
{
    return fp->n_fmt != 0;
}
bool mqd_fpeek_ok(const mqd_fpeek_t *fp)
{
    return fp->phase != P_DEAD;
}
uint64_t mqd_fpeek_frames(const mqd_fpeek_t *fp)
{
    return fp->frames;
}

const char *mqd_fpeek_error(const mqd_fpeek_t *fp, const char **why)
{
    if (fp->phase != P_DEAD)
        return NULL;
    if (why)
        *why = fp->why;
    return fp->cond;
}

static void stop(mqd_fpeek_t *fp, const char *cond, const char *why)
{
    if (fp->phase == P_DEAD)
        return;
    MQD_DEBUG("peek", "frame peek stopped after %llu frames (%llu bytes): %s: %s",
              (unsigned long long)fp->frames, (unsigned long long)fp->bytes, cond, why);
    fp->phase = P_DEAD;
    fp->cond = cond;
    fp->why = why;
    fp->n_fmt = 0;
    fp->n_rsm = 0;
}

/* ---------------------------------------------------------------- decoding */

typedef struct rd {
    const uint8_t *p;
    size_t n; /* readable bytes (min of what is here and the performative's end) */
    size_t i;
    int short_rc; /* what running out of bytes means: R_NEED, or R_BAD at the real end */
} rd_t;

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Steps over one encoded value (any type; described values nest up to `depth`). */
static int skip_value(rd_t *r, int depth)
{
    if (r->i >= r->n)
        return r->short_rc;
    uint8_t c = r->p[r->i++];
    if (c == 0x00) {
        if (depth == 0)
            return R_BAD;
        int rc = skip_value(r, depth - 1);
        return rc != R_OK ? rc : skip_value(r, depth - 1);
    }
    size_t w;
    switch (c >> 4) {
    case 0x4: w = 0; break;
    case 0x5: w = 1; break;
    case 0x6: w = 2; break;
    case 0x7: w = 4; break;
    case 0x8: w = 8; break;
    case 0x9: w = 16; break;
    case 0xa:
    case 0xc:
    case 0xe:
        if (r->i >= r->n)
            return r->short_rc;
        w = r->p[r->i++];
        break;
    case 0xb:
    case 0xd:
    case 0xf:
        if (r->n - r->i < 4)
            return r->short_rc;
        w = be32(r->p + r->i);
        r->i += 4;
        break;
    default: return R_BAD;
    }
    if (r->n - r->i < w)
        return r->short_rc;
    r->i += w;
    return R_OK;
}

/* uint (or null = absent). */
static int get_uint(rd_t *r, bool *has, uint32_t *v)
{
    if (r->i >= r->n)
        return r->short_rc;
    uint8_t c = r->p[r->i++];
    *has = c != 0x40;
    switch (c) {
    case 0x40: return R_OK;
    case 0x43: *v = 0; return R_OK;
    case 0x52:
        if (r->i >= r->n)
            return r->short_rc;
        *v = r->p[r->i++];
        return R_OK;
    case 0x70:
        if (r->n - r->i < 4)
            return r->short_rc;
        *v = be32(r->p + r->i);
        r->i += 4;
        return R_OK;
    default: return R_BAD;
    }
}

/* boolean (or null = false). */
static int get_bool(rd_t *r, bool *v)
{
    if (r->i >= r->n)
        return r->short_rc;
    uint8_t c = r->p[r->i++];
    switch (c) {
    case 0x40:
    case 0x42: *v = false; return R_OK;
    case 0x41: *v = true; return R_OK;
    case 0x56:
        if (r->i >= r->n)
            return r->short_rc;
        *v = r->p[r->i++] != 0;
        return R_OK;
    default: return R_BAD;
    }
}

/* binary / string / symbol (or null: len 0, p NULL); `kind` is 0 (binary) or 1 (string,
 * symbol). */
static int get_bytes(rd_t *r, int kind, const uint8_t **p, size_t *len)
{
    if (r->i >= r->n)
        return r->short_rc;
    uint8_t c = r->p[r->i++];
    *p = NULL;
    *len = 0;
    if (c == 0x40)
        return R_OK;
    bool small = (c & 0xf0) == 0xa0;
    uint8_t t = c & 0x0f;
    if ((c & 0xe0) != 0xa0 || (kind == 0 ? t != 0 : t != 1 && t != 3))
        return R_BAD;
    size_t l;
    if (small) {
        if (r->i >= r->n)
            return r->short_rc;
        l = r->p[r->i++];
    } else {
        if (r->n - r->i < 4)
            return r->short_rc;
        l = be32(r->p + r->i);
        r->i += 4;
    }
    if (r->n - r->i < l)
        return r->short_rc;
    *p = r->p + r->i;
    *len = l;
    r->i += l;
    return R_OK;
}

/* ---------------------------------------------------------------- links and formats */

static lnk_t *link_find(mqd_fpeek_t *fp, uint16_t ch, uint32_t handle)
{
    if (fp->last < fp->n_links && fp->links[fp->last].ch == ch &&
        fp->links[fp->last].handle == handle)
        return &fp->links[fp->last];
    for (size_t i = 0; i < fp->n_links; i++) {
        if (fp->links[i].ch == ch && fp->links[i].handle == handle) {
            fp->last = i;
            return &fp->links[i];
        }
    }
    return NULL;
}

/* FNV-1a. Two of one client's link names that collide could only mix up that client's
 * own batches (2^-64 by chance). */
static uint64_t name_hash(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int on_attach(mqd_fpeek_t *fp, const uint8_t *name, size_t name_len, uint32_t handle)
{
    lnk_t *l = link_find(fp, fp->ch, handle);
    if (!l) {
        if (fp->n_links >= MQD_FPEEK_LINKS_MAX) {
            stop(fp, COND_LIMIT, "more sender links (channel, handle) than MQD_FPEEK_LINKS_MAX");
            return MQD_ETOOBIG;
        }
        lnk_t *nl = mqd_array_grow(fp->links, &fp->cap_links, fp->n_links, sizeof *nl, 4);
        if (!nl) {
            stop(fp, COND_LIMIT, "out of memory");
            return MQD_ENOMEM;
        }
        fp->links = nl;
        l = &fp->links[fp->n_links++];
        memset(l, 0, sizeof *l);
        l->ch = fp->ch;
        l->handle = handle;
    }
    l->name_h = name_hash(name, name_len);
    l->name_len = name_len;
    l->serial = ++fp->next_serial;
    if (l->open)
        fp->n_open--;
    l->open = false;
    return 0;
}

static int record(mqd_fpeek_t *fp, uint64_t serial, const uint8_t *tag, size_t tag_len,
                  uint32_t fmt)
{
    if (fp->n_fmt == fp->cap_fmt) {
        if (fp->n_fmt >= MQD_FPEEK_MAX_FMT) {
            /* never taken (a delivery mqd dropped unread): forget the oldest */
            memmove(fp->fmt, fp->fmt + 1, (fp->n_fmt - 1) * sizeof *fp->fmt);
            fp->n_fmt--;
        } else {
            fent_t *nf = mqd_array_grow(fp->fmt, &fp->cap_fmt, fp->n_fmt, sizeof *nf, 8);
            if (!nf) {
                stop(fp, COND_LIMIT, "out of memory");
                return MQD_ENOMEM;
            }
            fp->fmt = nf;
        }
    }
    fent_t *e = &fp->fmt[fp->n_fmt++];
    e->serial = serial;
    e->fmt = fmt;
    e->tag_len = (uint8_t)tag_len;
    memcpy(e->tag, tag, tag_len);
    return 0;
}

/* The link of a transfer; stops the peek when the handle was never attached as a sender. */
static lnk_t *transfer_link(mqd_fpeek_t *fp, uint32_t handle)
{
    lnk_t *l = link_find(fp, fp->ch, handle);
    if (!l)
        stop(fp, COND_FRAMING, "a transfer on a handle not attached by a sender");
    return l;
}

/* Tracks each link's "more pending" state as Proton 0.37 does (pn_do_transfer) and stops
 * on a transfer that starts a delivery without a delivery-id (framepeek.h). */
static int on_transfer(mqd_fpeek_t *fp, const xfer_t *x)
{
    lnk_t *l = NULL;
    bool cont = false;
    if (fp->n_open) {
        if (!(l = transfer_link(fp, x->handle)))
            return MQD_ENOENT;
        cont = l->open;
    }
    if (!cont && !x->has_id) {
        stop(fp, COND_FRAMING, "the first transfer of a delivery has no delivery-id");
        return MQD_EINVAL;
    }
    if (!cont && x->fmt != 0 && x->tag && x->tag_len <= TAG_MAX) {
        if (!l && !(l = transfer_link(fp, x->handle)))
            return MQD_ENOENT;
        int rc = record(fp, l->serial, x->tag, x->tag_len, x->fmt);
        if (rc != 0)
            return rc;
    }
    bool ends = !x->more || x->aborted;
    if (cont && ends) {
        l->open = false;
        fp->n_open--;
    } else if (!cont && !ends) {
        if (!l && !(l = transfer_link(fp, x->handle)))
            return MQD_ENOENT;
        l->open = true;
        fp->n_open++;
    }
    return 0;
}

uint32_t mqd_fpeek_take(mqd_fpeek_t *fp, const char *link, size_t link_len, const uint8_t *tag,
                        size_t tag_len)
{
    if (fp->n_fmt == 0)
        return 0;
    uint64_t h = name_hash(link, link_len);
    for (size_t i = 0; i < fp->n_links; i++) {
        const lnk_t *l = &fp->links[i];
        if (l->name_len != link_len || l->name_h != h)
            continue;
        for (size_t j = 0; j < fp->n_fmt; j++) {
            fent_t *e = &fp->fmt[j];
            if (e->serial == l->serial && e->tag_len == tag_len &&
                memcmp(e->tag, tag, tag_len) == 0) {
                uint32_t fmt = e->fmt;
                memmove(e, e + 1, (fp->n_fmt - j - 1) * sizeof *e);
                fp->n_fmt--;
                return fmt;
            }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- performatives */

static int read_transfer(mqd_fpeek_t *fp, rd_t *r, uint32_t count)
{
    xfer_t x = {0};
    bool has_h = false, has_fmt = false, b;
    uint32_t id;
    int rc = R_OK;
    for (uint32_t f = 0; f < count && f <= 9 && rc == R_OK; f++) {
        switch (f) {
        case 0: rc = get_uint(r, &has_h, &x.handle); break;
        case 1: rc = get_uint(r, &x.has_id, &id); break;
        case 2: rc = get_bytes(r, 0, &x.tag, &x.tag_len); break;
        case 3: rc = get_uint(r, &has_fmt, &x.fmt); break;
        case 5: rc = get_bool(r, &x.more); break;
        case 9: rc = get_bool(r, &x.aborted); break;
        case 4:
        case 8: rc = get_bool(r, &b); break;
        default: rc = skip_value(r, 8); break; /* rcv-settle-mode, state */
        }
    }
    if (rc != R_OK)
        return rc;
    if (!has_h)
        return R_BAD;
    if (!has_fmt)
        x.fmt = 0;
    return on_transfer(fp, &x) == 0 ? R_OK : R_BAD;
}

/* Fields 3-8 of an attach: is it a resume (2.6.13)? Proton 0.37 decodes neither the
 * unsettled map nor incomplete-unsettled, so without this a resume would be accepted as
 * a fresh link and the peer's unsettled state silently dropped. A field the peek cannot
 * read (past MQD_FPEEK_PERF_MAX, or not of its type) means "no resume": Proton is the
 * judge of the attach's validity, not this. */
static int read_resume(rd_t *r, uint32_t count, bool *resume)
{
    *resume = false;
    for (uint32_t i = 3; i < 7 && i < count; i++) {
        int rc = skip_value(r, 8);
        if (rc != R_OK)
            return rc;
    }
    if (count > 7) {
        if (r->i >= r->n)
            return r->short_rc;
        uint8_t c = r->p[r->i];
        size_t w = c == 0xc1 ? 2 : c == 0xd1 ? 8 : 0;
        if (w && r->n - r->i < 1 + w)
            return r->short_rc;
        if (w && (w == 2 ? r->p[r->i + 2] : be32(r->p + r->i + 5)) > 0)
            *resume = true;
        int rc = skip_value(r, 8);
        if (rc != R_OK)
            return rc;
    }
    if (count > 8) {
        bool incomplete = false;
        int rc = get_bool(r, &incomplete);
        if (rc != R_OK)
            return rc;
        *resume = *resume || incomplete;
    }
    return R_OK;
}

static bool sym_is(const uint8_t *p, size_t n, const char *s);

/* Fields 9-12 of an attach (after read_resume): does its desired-capabilities (a symbol,
 * or an array of symbols) hold amqp:link:redirect? As there, a field the peek cannot read
 * means "no". */
static int read_redirect(rd_t *r, uint32_t count, bool *want)
{
    static const char cap[] = "amqp:link:redirect";
    *want = false;
    for (uint32_t i = 9; i < 12 && i < count; i++) {
        int rc = skip_value(r, 8);
        if (rc != R_OK)
            return rc;
    }
    if (count <= 12)
        return R_OK;
    if (r->i >= r->n)
        return r->short_rc;
    uint8_t c = r->p[r->i];
    if (c == 0xa3 || c == 0xb3 || c == 0x40) {
        const uint8_t *sp;
        size_t sl;
        int rc = get_bytes(r, 1, &sp, &sl);
        *want = rc == R_OK && sym_is(sp, sl, cap);
        return rc;
    }
    if (c != 0xe0 && c != 0xf0)
        return R_BAD;
    size_t w = c == 0xe0 ? 1 : 4; /* array8 / array32: size, count, constructor, items */
    if (r->n - r->i < 1 + 2 * w + 1)
        return r->short_rc;
    uint32_t n = w == 1 ? r->p[r->i + 2] : be32(r->p + r->i + 5);
    uint8_t ctor = r->p[r->i + 1 + 2 * w];
    r->i += 2 + 2 * w;
    if (ctor != 0xa3 && ctor != 0xb3)
        return R_BAD;
    size_t lw = ctor == 0xa3 ? 1 : 4;
    for (uint32_t k = 0; k < n; k++) {
        if (r->n - r->i < lw)
            return r->short_rc;
        size_t l = lw == 1 ? r->p[r->i] : be32(r->p + r->i);
        r->i += lw;
        if (r->n - r->i < l)
            return r->short_rc;
        *want = *want || sym_is(r->p + r->i, l, cap);
        r->i += l;
    }
    return R_OK;
}

/* A link name noted in l[0..*n) (the oldest forgotten when full), and taken once. */
static void note_name(rsm_t *l, size_t *n, const uint8_t *name, size_t name_len, bool role)
{
    if (*n == MQD_FPEEK_RESUME_MAX) { /* never taken: forget the oldest */
        memmove(l, l + 1, (*n - 1) * sizeof *l);
        (*n)--;
    }
    rsm_t *e = &l[(*n)++];
    e->name_h = name_hash(name, name_len);
    e->name_len = name_len;
    e->peer_receiver = role;
}

static bool take_name(rsm_t *l, size_t *n, const char *link, size_t link_len, bool peer_receiver)
{
    if (*n == 0)
        return false;
    uint64_t h = name_hash(link, link_len);
    for (size_t i = 0; i < *n; i++) {
        rsm_t *e = &l[i];
        if (e->name_h == h && e->name_len == link_len && e->peer_receiver == peer_receiver) {
            memmove(e, e + 1, (*n - i - 1) * sizeof *e);
            (*n)--;
            return true;
        }
    }
    return false;
}

bool mqd_fpeek_resume_take(mqd_fpeek_t *fp, const char *link, size_t link_len, bool peer_receiver)
{
    return take_name(fp->rsm, &fp->n_rsm, link, link_len, peer_receiver);
}

bool mqd_fpeek_redirect_take(mqd_fpeek_t *fp, const char *link, size_t link_len, bool peer_receiver)
{
    return take_name(fp->rdr, &fp->n_rdr, link, link_len, peer_receiver);
}

static int read_attach(mqd_fpeek_t *fp, rd_t *r, uint32_t count)
{
    const uint8_t *name = NULL;
    size_t name_len = 0;
    bool has_h = false, role = false, resume = false, redirect = false;
    uint32_t handle = 0;
    if (count < 3)
        return R_BAD;
    int rc = get_bytes(r, 1, &name, &name_len);
    if (rc == R_OK)
        rc = get_uint(r, &has_h, &handle);
    if (rc == R_OK)
        rc = get_bool(r, &role);
    if (rc != R_OK)
        return rc;
    if (!name || !has_h)
        return R_BAD;
    rc = read_resume(r, count, &resume);
    resume = resume && rc == R_OK;
    if (rc == R_OK)
        rc = read_redirect(r, count, &redirect);
    if (rc == R_NEED)
        return rc;
    if (resume)
        note_name(fp->rsm, &fp->n_rsm, name, name_len, role);
    if (rc == R_OK && redirect)
        note_name(fp->rdr, &fp->n_rdr, name, name_len, role);
    if (role) /* the peer's receiver: it never sends transfers on it */
        return R_OK;
    return on_attach(fp, name, name_len, handle) == 0 ? R_OK : R_BAD;
}

static bool sym_is(const uint8_t *p, size_t n, const char *s)
{
    return n == strlen(s) && memcmp(p, s, n) == 0;
}

/* Reads the performative in b[0..n). `complete`: no more bytes of it will come. */
static int perf(mqd_fpeek_t *fp, const uint8_t *b, size_t n, bool complete)
{
    rd_t r = {.p = b, .n = n, .i = 0, .short_rc = complete ? R_BAD : R_NEED};
    if (n < 2)
        return r.short_rc;
    if (b[0] != 0x00)
        return R_BAD;
    uint64_t code = UINT64_MAX;
    r.i = 2;
    switch (b[1]) {
    case 0x53:
        if (n < 3)
            return r.short_rc;
        code = b[2];
        r.i = 3;
        break;
    case 0x44: code = 0; break;
    case 0x80:
        if (n < 10)
            return r.short_rc;
        code = (uint64_t)be32(b + 2) << 32 | be32(b + 6);
        r.i = 10;
        break;
    case 0xa3:
    case 0xb3: {
        r.i = 1;
        const uint8_t *s;
        size_t sl;
        int rc = get_bytes(&r, 1, &s, &sl);
        if (rc != R_OK)
            return rc;
        code = sym_is(s, sl, "amqp:transfer:list") ? DESC_TRANSFER
               : sym_is(s, sl, "amqp:attach:list") ? DESC_ATTACH
                                                   : UINT64_MAX;
        break;
    }
    default: return R_BAD;
    }
    if (fp->ftype == 1) {
        if (code != DESC_SASL_INIT)
            return R_OK;
        if (fp->sasl_init) {
            stop(fp, COND_FRAMING, "a second sasl-init");
            return R_BAD;
        }
        fp->sasl_init = true;
        return R_OK;
    }
    if (code != DESC_TRANSFER && code != DESC_ATTACH)
        return R_OK;
    if (r.i >= n)
        return r.short_rc;
    uint8_t lc = b[r.i++];
    uint32_t count, size;
    switch (lc) {
    case 0x45: count = size = 0; break;
    case 0xc0:
        if (n - r.i < 2)
            return r.short_rc;
        size = b[r.i];
        count = b[r.i + 1];
        r.i += 1;
        break;
    case 0xd0:
        if (n - r.i < 8)
            return r.short_rc;
        size = be32(b + r.i);
        count = be32(b + r.i + 4);
        r.i += 4;
        break;
    default: return R_BAD;
    }
    /* size counts the bytes after the size field (count included) */
    uint64_t end = (uint64_t)r.i + size;
    if (lc != 0x45)
        r.i += lc == 0xc0 ? 1 : 4;
    if (end > UINT32_MAX)
        return R_BAD;
    fp->perf_len = (uint32_t)end;
    if (end <= n) {
        r.n = (size_t)end;
        r.short_rc = R_BAD; /* a field past the list's end */
    }
    return code == DESC_TRANSFER ? read_transfer(fp, &r, count) : read_attach(fp, &r, count);
}

/* ---------------------------------------------------------------- the byte stream */

static void header(mqd_fpeek_t *fp, const uint8_t *h)
{
    if (h[0] == 'A' && h[1] == 'M' && h[2] == 'Q' && h[3] == 'P') {
        if (h[4] != 0 && h[4] != 3) { /* 2 = TLS: ciphertext follows */
            /* Proton answers a wrong header with its own (AMQP part 2.2) and closes */
            stop(fp, COND_FRAMING, "not a plain AMQP or SASL protocol header");
            fp->pass_unit = true;
        }
        fp->proto = h[4];
        return;
    }
    if (fp->proto == NO_PROTO) { /* likewise: Proton wants a protocol header first */
        stop(fp, COND_FRAMING, "no protocol header");
        fp->pass_unit = true;
        return;
    }
    uint32_t size = be32(h);
    uint32_t doff = h[4];
    uint8_t type = h[5];
    if (size < 8 || doff < 2 || doff * 4 > size || type > 1)
        return stop(fp, COND_FRAMING, "bad frame header");
    if (fp->max_frame && size > fp->max_frame)
        return stop(fp, COND_FRAMING, "a frame larger than max-frame-size");
    fp->frames++;
    fp->left = size - 8;
    if (fp->left == 0)
        return; /* a heartbeat */
    if (size == doff * 4) {
        fp->phase = P_SKIP; /* an empty frame with an extended header */
        return;
    }
    /* Proton runs the SASL handlers for a SASL frame in the AMQP phase too: a second
     * sasl-init re-ran mqd's SASL callback on an open connection (fuzz_conn) */
    if (type != (fp->proto == 3 ? 1 : 0))
        return stop(fp, COND_FRAMING, type ? "a SASL frame outside the SASL exchange"
                                           : "an AMQP frame before the AMQP protocol header");
    fp->ftype = type;
    fp->ch = (uint16_t)(h[6] << 8 | h[7]);
    fp->ext = doff * 4 - 8;
    fp->plen = 0;
    fp->perf_len = 0;
    fp->phase = fp->ext ? P_EXT : P_PERF;
}

/* The performative phase; returns the bytes of p consumed. */
static size_t perf_step(mqd_fpeek_t *fp, const uint8_t *p, size_t n)
{
    size_t avail = n < fp->left ? n : fp->left;
    int rc;
    size_t k = 0;
    if (fp->plen == 0) {
        /* the same cap as when it straddles chunks, so chunking never changes a result */
        if (avail > sizeof fp->pbuf)
            avail = sizeof fp->pbuf;
        rc = perf(fp, p, avail, avail == fp->left || avail == sizeof fp->pbuf);
        if (rc == R_NEED) {
            /* every byte here is the performative's (the parse wanted the next one) */
            memcpy(fp->pbuf, p, avail);
            fp->plen = (uint32_t)avail;
            fp->left -= (uint32_t)avail;
            return avail;
        }
    } else {
        /* copy no further than the performative's end once it is known */
        size_t room = sizeof fp->pbuf - fp->plen;
        size_t want = fp->perf_len > fp->plen ? fp->perf_len - fp->plen : 32;
        k = avail < room ? avail : room;
        if (k > want)
            k = want;
        memcpy(fp->pbuf + fp->plen, p, k);
        fp->plen += (uint32_t)k;
        fp->left -= (uint32_t)k;
        bool complete = fp->left == 0 || fp->plen == sizeof fp->pbuf ||
                        (fp->perf_len && fp->plen >= fp->perf_len);
        rc = perf(fp, fp->pbuf, fp->plen, complete);
        if (rc == R_NEED)
            return k;
    }
    if (rc == R_BAD) {
        stop(fp, COND_DECODE,
             "a transfer or attach it could not decode (or its fields read take more than "
             "MQD_FPEEK_PERF_MAX bytes)");
        return n;
    }
    fp->plen = 0;
    fp->phase = fp->left ? P_SKIP : P_HDR;
    return k;
}

size_t mqd_fpeek_feed(mqd_fpeek_t *fp, const uint8_t *p, size_t n)
{
    const uint64_t base = fp->bytes;
    const uint8_t *p0 = p;
    fp->bytes += n;
    while (n > 0 && fp->phase != P_DEAD) {
        size_t k;
        switch (fp->phase) {
        case P_HDR:
            if (fp->hlen == 0)
                fp->unit_off = base + (uint64_t)(p - p0);
            if (fp->hlen == 0 && n >= 8) {
                p += 8;
                n -= 8;
                header(fp, p - 8);
                break;
            }
            k = 8u - fp->hlen < n ? 8u - fp->hlen : n;
            memcpy(fp->hbuf + fp->hlen, p, k);
            fp->hlen += (uint8_t)k;
            p += k;
            n -= k;
            if (fp->hlen == 8) {
                fp->hlen = 0;
                header(fp, fp->hbuf);
            }
            break;
        case P_EXT:
            k = fp->ext < n ? fp->ext : n;
            fp->ext -= (uint32_t)k;
            fp->left -= (uint32_t)k;
            p += k;
            n -= k;
            if (fp->ext == 0)
                fp->phase = P_PERF;
            break;
        case P_PERF:
            k = perf_step(fp, p, n);
            p += k;
            n -= k;
            break;
        default: /* P_SKIP */
            k = fp->left < n ? fp->left : n;
            fp->left -= (uint32_t)k;
            p += k;
            n -= k;
            if (fp->left == 0)
                fp->phase = P_HDR;
            break;
        }
    }
    if (fp->phase != P_DEAD)
        return (size_t)(fp->bytes - base);
    /* none of the refused frame: Proton acts on a frame only once it has all of it */
    uint64_t end = fp->unit_off + (fp->pass_unit ? 8 : 0);
    fp->pass_unit = false;
    return end > base ? (size_t)(end - base) : 0;
}
