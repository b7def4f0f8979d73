/* msg: a bounded scanner for encoded AMQP 1.0 messages and the annotation rewrite.
 *
 * Input is untrusted, so nothing here recurses: one value is walked with an explicit
 * stack of at most MQD_MSG_MAX_DEPTH frames, every length is checked against the end of
 * its enclosing value before it is used, and arrays of fixed-width elements are skipped
 * by arithmetic so a huge element count costs nothing.
 */
#include "config.h"
#include "codec/codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- constructors ---- */

enum { C_FIXED, C_VAR, C_COMPOUND, C_ARRAY };

#define CODE_DESCRIBED 0x00
#define CODE_NULL 0x40
#define CODE_LIST0 0x45
#define CODE_FALSE 0x42

/* Classifies a (non-described) constructor: its class and the width of its fixed data or
 * of its size field. Unknown codes are errors: we cannot know how far to skip them. */
static int ctor_info(uint8_t code, int *cls, size_t *w)
{
    switch (code) {
    case 0x40: case 0x41: case 0x42: case 0x43: case 0x44: case 0x45:
        *cls = C_FIXED, *w = 0;
        return 0;
    case 0x50: case 0x51: case 0x52: case 0x53: case 0x54: case 0x55: case 0x56:
        *cls = C_FIXED, *w = 1;
        return 0;
    case 0x60: case 0x61:
        *cls = C_FIXED, *w = 2;
        return 0;
    case 0x70: case 0x71: case 0x72: case 0x73: case 0x74:
        *cls = C_FIXED, *w = 4;
        return 0;
    case 0x80: case 0x81: case 0x82: case 0x83: case 0x84:
        *cls = C_FIXED, *w = 8;
        return 0;
    case 0x94: case 0x98:
        *cls = C_FIXED, *w = 16;
        return 0;
    case 0xa0: case 0xa1: case 0xa3:
        *cls = C_VAR, *w = 1;
        return 0;
    case 0xb0: case 0xb1: case 0xb3:
        *cls = C_VAR, *w = 4;
        return 0;
    case 0xc0: case 0xc1:
        *cls = C_COMPOUND, *w = 1;
        return 0;
    case 0xd0: case 0xd1:
        *cls = C_COMPOUND, *w = 4;
        return 0;
    case 0xe0:
        *cls = C_ARRAY, *w = 1;
        return 0;
    case 0xf0:
        *cls = C_ARRAY, *w = 4;
        return 0;
    default:
        return MQD_EINVAL;
    }
}

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t be64(const uint8_t *p)
{
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

/* Reads a 1- or 4-byte size/count field at *pos, bounded by end. */
static int get_n(const uint8_t *p, size_t *pos, size_t end, size_t w, uint32_t *v)
{
    if (end - *pos < w)
        return MQD_EINVAL;
    *v = (w == 1) ? p[*pos] : be32(p + *pos);
    *pos += w;
    return 0;
}

/* ---- the walker ---- */

enum { K_ITEMS, K_ELEMS, K_ELEM_CTOR };

typedef struct frame {
    size_t end;     /* no item of this frame may pass this */
    uint32_t left;  /* items still to read */
    uint8_t kind;   /* K_ITEMS: full values; K_ELEMS: bodies of `elem`; K_ELEM_CTOR: next
                       byte is the array's element constructor */
    uint8_t elem;
    bool exact;     /* a sized compound: the items must fill it exactly */
    bool described; /* array element constructor already had its descriptor */
} frame_t;

typedef struct walk {
    frame_t st[MQD_MSG_MAX_DEPTH + 1]; /* [0] is the root, never a nesting level */
    size_t depth;
} walk_t;

static int push(walk_t *w, size_t end, uint32_t left, uint8_t kind, bool exact)
{
    if (w->depth >= MQD_ARRAY_LEN(w->st))
        return MQD_EINVAL;
    w->st[w->depth++] = (frame_t){ .end = end, .left = left, .kind = kind, .exact = exact };
    return 0;
}

/* Consumes the data of a value whose constructor `code` was just read; compounds and
 * arrays push a frame for their items instead of recursing, or (shallow) are stepped
 * over whole by their size field: their contents are not checked. */
static int open_body(walk_t *w, const uint8_t *p, size_t *pos, size_t end, uint8_t code, bool deep)
{
    size_t width, fend;
    uint32_t size, count;
    int cls;

    if (ctor_info(code, &cls, &width) != 0)
        return MQD_EINVAL;
    if (cls == C_FIXED) {
        if (end - *pos < width)
            return MQD_EINVAL;
        *pos += width;
        return 0;
    }
    if (get_n(p, pos, end, width, &size) != 0 || end - *pos < size)
        return MQD_EINVAL;
    fend = *pos + size;
    if (cls == C_VAR) {
        *pos = fend;
        return 0;
    }
    if (get_n(p, pos, fend, width, &count) != 0)
        return MQD_EINVAL;
    if (!deep) {
        *pos = fend;
        return 0;
    }
    if (cls == C_COMPOUND) {
        if ((code & 0x0f) == 0x01 && (count & 1))
            return MQD_EINVAL; /* a map holds key/value pairs */
        return push(w, fend, count, K_ITEMS, true);
    }
    return push(w, fend, count, K_ELEM_CTOR, true);
}

/* Reads an array's element constructor (after its descriptor, if any). Fixed-width
 * elements are skipped at once: a count of 2^32 nulls must not cost 2^32 steps. */
static int elem_ctor(walk_t *w, frame_t *f, const uint8_t *p, size_t *pos)
{
    size_t width;
    int cls;
    uint8_t code;

    if (*pos >= f->end)
        return MQD_EINVAL;
    code = p[(*pos)++];
    if (code == CODE_DESCRIBED) {
        if (f->described)
            return MQD_EINVAL;
        f->described = true;
        return push(w, f->end, 1, K_ITEMS, false);
    }
    if (ctor_info(code, &cls, &width) != 0)
        return MQD_EINVAL;
    f->kind = K_ELEMS;
    f->elem = code;
    if (cls == C_FIXED) {
        if ((uint64_t)f->left * width > f->end - *pos)
            return MQD_EINVAL;
        *pos += (size_t)f->left * width;
        f->left = 0;
    }
    return 0;
}

/* Steps over exactly one encoded value starting at *pos, never reading at or past end.
 * deep: every nested value is checked; shallow: compounds and arrays are stepped over by
 * their size (for bytes already checked once, such as a stored record or an item of a
 * section that was walked deep). */
static int skip_value(const uint8_t *p, size_t *pos, size_t end, bool deep)
{
    walk_t w;
    size_t at = *pos;
    int rc = 0;

    /* One value with no items to walk (a primitive, or any value when shallow): no
     * frame machinery. Most values of most messages take this path. */
    if (at < end && p[at] != CODE_DESCRIBED) {
        int cls;
        size_t width;
        if (ctor_info(p[at], &cls, &width) != 0)
            return MQD_EINVAL;
        if (cls == C_FIXED || cls == C_VAR || !deep) {
            w.depth = 0;
            at++;
            rc = open_body(&w, p, &at, end, p[at - 1], false);
            if (rc == 0)
                *pos = at;
            return rc;
        }
    }
    w.depth = 0;
    push(&w, end, 1, K_ITEMS, false);
    while (w.depth > 0 && rc == 0) {
        frame_t *f = &w.st[w.depth - 1];
        uint8_t code;

        if (f->kind == K_ELEM_CTOR) {
            rc = elem_ctor(&w, f, p, &at);
            continue;
        }
        if (f->left == 0) {
            if (f->exact && at != f->end)
                rc = MQD_EINVAL;
            w.depth--;
            continue;
        }
        f->left--;
        if (f->kind == K_ELEMS) {
            code = f->elem;
        } else {
            if (at >= f->end) {
                rc = MQD_EINVAL;
                break;
            }
            code = p[at++];
            if (code == CODE_DESCRIBED) {
                rc = push(&w, f->end, 2, K_ITEMS, false); /* descriptor, then value */
                continue;
            }
        }
        rc = open_body(&w, p, &at, f->end, code, deep);
    }
    if (rc != 0)
        return rc;
    *pos = at;
    return 0;
}

/* ---- typed access to one value ---- */

typedef struct val {
    size_t off, end; /* the whole encoded value */
    size_t data;     /* after constructor and size/count fields */
    uint32_t count;  /* items of a list or map */
    uint8_t code;    /* constructor; CODE_DESCRIBED for described values */
} val_t;

static int next_value_ex(const uint8_t *p, size_t *pos, size_t end, val_t *v, bool deep)
{
    val_t r = { .off = *pos };
    size_t width, at = *pos;
    int cls;

    if (skip_value(p, &at, end, deep) != 0)
        return MQD_EINVAL;
    r.end = at;
    r.code = p[r.off];
    r.data = r.off + 1;
    if (r.code != CODE_DESCRIBED && ctor_info(r.code, &cls, &width) == 0 && cls != C_FIXED) {
        r.data += width;
        if (cls != C_VAR) {
            r.count = (width == 1) ? p[r.data] : be32(p + r.data);
            r.data += width;
        }
    }
    *v = r;
    *pos = at;
    return 0;
}

/* An item of a value already walked (deep, or as a checked stored record). */
static int next_value(const uint8_t *p, size_t *pos, size_t end, val_t *v)
{
    return next_value_ex(p, pos, end, v, false);
}

static bool is_list(const val_t *v)
{
    return v->code == CODE_LIST0 || v->code == 0xc0 || v->code == 0xd0;
}

static bool is_map(const val_t *v)
{
    return v->code == 0xc1 || v->code == 0xd1;
}

static bool is_strsym(const val_t *v)
{
    return v->code == 0xa1 || v->code == 0xb1 || v->code == 0xa3 || v->code == 0xb3;
}

static mqd_span_t raw_span(const val_t *v)
{
    return (mqd_span_t){ .off = v->data, .len = v->end - v->data };
}

static bool str_eq(const uint8_t *p, const val_t *v, const char *s)
{
    size_t sl = strlen(s);
    return is_strsym(v) && v->end - v->data == sl && memcmp(p + v->data, s, sl) == 0;
}

static bool get_bool(const uint8_t *p, const val_t *v, bool *out)
{
    if (v->code == 0x41 || v->code == 0x42)
        *out = (v->code == 0x41);
    else if (v->code == 0x56)
        *out = p[v->data] != 0;
    else
        return false;
    return true;
}

static bool get_uint(const uint8_t *p, const val_t *v, uint32_t *out)
{
    if (v->code == 0x43)
        *out = 0;
    else if (v->code == 0x52)
        *out = p[v->data];
    else if (v->code == 0x70)
        *out = be32(p + v->data);
    else
        return false;
    return true;
}

/* ---- sections ---- */

enum {
    S_HEADER, S_DELIVERY_ANN, S_MESSAGE_ANN, S_PROPERTIES, S_APP_PROPS,
    S_DATA, S_SEQUENCE, S_VALUE, S_FOOTER, S_COUNT
};

static const char *const section_names[S_COUNT] = {
    "amqp:header:list", "amqp:delivery-annotations:map", "amqp:message-annotations:map",
    "amqp:properties:list", "amqp:application-properties:map", "amqp:data:binary",
    "amqp:amqp-sequence:list", "amqp:amqp-value:*", "amqp:footer:map",
};

typedef struct section {
    int id;
    size_t off, end; /* the whole section, descriptor included */
    val_t value;     /* the described value */
} section_t;

static int section_id(const uint8_t *p, const val_t *d)
{
    uint64_t code;

    if (d->code == 0x44)
        code = 0;
    else if (d->code == 0x53)
        code = p[d->data];
    else if (d->code == 0x80)
        code = be64(p + d->data);
    else if (d->code == 0xa3 || d->code == 0xb3) {
        for (int i = 0; i < S_COUNT; i++) {
            if (str_eq(p, d, section_names[i]))
                return i;
        }
        return -1;
    } else
        return -1;
    return (code >= 0x70 && code <= 0x78) ? (int)(code - 0x70) : -1;
}

static bool section_type_ok(int id, const val_t *v)
{
    switch (id) {
    case S_HEADER: case S_PROPERTIES: case S_SEQUENCE:
        return is_list(v);
    case S_DELIVERY_ANN: case S_MESSAGE_ANN: case S_APP_PROPS: case S_FOOTER:
        return is_map(v);
    case S_DATA:
        return v->code == 0xa0 || v->code == 0xb0;
    default:
        return true;
    }
}

/* The usual encoding of a section: descriptor smallulong 0x70..0x78, and a value whose
 * extent its size field gives (any value when shallow; when deep, one with no items to
 * walk). 1: read into *s; 0: another shape (the general walk decides); MQD_EINVAL: out
 * of bounds. */
static int fast_section(const uint8_t *p, size_t at, size_t end, bool deep, section_t *s)
{
    if (end - at < 4 || p[at] != CODE_DESCRIBED || p[at + 1] != 0x53 || p[at + 2] < 0x70 ||
        p[at + 2] > 0x78)
        return 0;
    val_t v = { .off = at + 3, .code = p[at + 3], .data = at + 4 };
    size_t width;
    int cls;
    if (v.code == CODE_DESCRIBED || ctor_info(v.code, &cls, &width) != 0 ||
        (deep && (cls == C_COMPOUND || cls == C_ARRAY)))
        return 0;
    if (cls == C_FIXED) {
        if (end - v.data < width)
            return MQD_EINVAL;
        v.end = v.data + width;
    } else {
        uint32_t size;
        if (get_n(p, &v.data, end, width, &size) != 0 || end - v.data < size)
            return MQD_EINVAL;
        v.end = v.data + size;
        if (cls != C_VAR && get_n(p, &v.data, v.end, width, &v.count) != 0)
            return MQD_EINVAL;
    }
    s->id = p[at + 2] - 0x70;
    s->value = v;
    s->off = at;
    s->end = v.end;
    return 1;
}

/* Reads the section at *pos: a described value with a known section descriptor. */
static int next_section(const uint8_t *p, size_t *pos, size_t end, section_t *s, bool deep)
{
    size_t at = *pos;
    val_t d;

    int fast = fast_section(p, at, end, deep, s);
    if (fast != 0) {
        if (fast < 0 || !section_type_ok(s->id, &s->value))
            return MQD_EINVAL;
        *pos = s->end;
        return 0;
    }

    if (at >= end || p[at] != CODE_DESCRIBED)
        return MQD_EINVAL;
    at++;
    if (next_value_ex(p, &at, end, &d, deep) != 0)
        return MQD_EINVAL;
    s->id = section_id(p, &d);
    if (s->id < 0 || next_value_ex(p, &at, end, &s->value, deep) != 0)
        return MQD_EINVAL;
    if (!section_type_ok(s->id, &s->value))
        return MQD_EINVAL;
    s->off = *pos;
    s->end = at;
    *pos = at;
    return 0;
}

static bool is_body(int id)
{
    return id == S_DATA || id == S_SEQUENCE || id == S_VALUE;
}

/* The spec's order: each section once, except one or more data or amqp-sequence
 * sections (never mixed) or exactly one amqp-value. */
static bool order_ok(int last, int id)
{
    if (id > last)
        return !(is_body(last) && is_body(id));
    return id == last && (id == S_DATA || id == S_SEQUENCE);
}

static void scan_header(const uint8_t *p, const val_t *list, mqd_msg_info_t *mi)
{
    size_t at = list->data;
    val_t v;

    for (uint32_t i = 0; i < list->count && i < 5; i++) {
        if (next_value(p, &at, list->end, &v) != 0)
            return; /* cannot happen: the list was walked whole already */
        switch (i) {
        case 0: get_bool(p, &v, &mi->durable); break;
        case 1: if (v.code == 0x50) mi->priority = p[v.data]; break;
        case 2: mi->has_ttl = get_uint(p, &v, &mi->ttl_ms); break;
        case 3: get_bool(p, &v, &mi->first_acquirer); break;
        case 4: get_uint(p, &v, &mi->delivery_count); break;
        }
    }
}

static void prop_field(const uint8_t *p, uint32_t i, const val_t *v, mqd_msg_info_t *mi)
{
    mqd_span_t enc = { .off = v->off, .len = v->end - v->off };

    if (v->code == CODE_NULL)
        return;
    switch (i) {
    case 0: mi->message_id = enc; break;
    case 2: if (is_strsym(v)) mi->to = raw_span(v); break;
    case 3: if (is_strsym(v)) mi->subject = raw_span(v); break;
    case 4: if (is_strsym(v)) mi->reply_to = raw_span(v); break;
    case 5: mi->correlation_id = enc; break;
    case 8: if (v->code == 0x83) mi->absolute_expiry_time = (int64_t)be64(p + v->data); break;
    case 9: if (v->code == 0x83) mi->creation_time = (int64_t)be64(p + v->data); break;
    case 10: if (is_strsym(v)) mi->group_id = raw_span(v); break;
    }
}

static void scan_properties(const uint8_t *p, const val_t *list, mqd_msg_info_t *mi)
{
    size_t at = list->data;
    val_t v;

    for (uint32_t i = 0; i < list->count && i < 11; i++) {
        if (next_value(p, &at, list->end, &v) != 0)
            return;
        prop_field(p, i, &v, mi);
    }
}

static void scan_message_ann(const uint8_t *p, const val_t *map, mqd_msg_info_t *mi)
{
    size_t at = map->data;
    val_t k, v;

    for (uint32_t i = 0; i + 1 < map->count; i += 2) {
        if (next_value(p, &at, map->end, &k) != 0 || next_value(p, &at, map->end, &v) != 0)
            return;
        if (k.code == 0xa3 || k.code == 0xb3) {
            if (str_eq(p, &k, "x-opt-partition-key") && is_strsym(&v))
                mi->partition_key = raw_span(&v);
            else if (v.code == 0x83 && str_eq(p, &k, "x-opt-scheduled-enqueue-time"))
                mi->scheduled_ms = (int64_t)be64(p + v.data);
        }
    }
}

static void note_section(const uint8_t *p, const section_t *s, mqd_msg_info_t *mi)
{
    mqd_span_t sp = { .off = s->off, .len = s->end - s->off };

    switch (s->id) {
    case S_HEADER: mi->header = sp; scan_header(p, &s->value, mi); break;
    case S_DELIVERY_ANN: mi->delivery_ann = sp; break;
    case S_MESSAGE_ANN: mi->message_ann = sp; scan_message_ann(p, &s->value, mi); break;
    case S_PROPERTIES: mi->properties = sp; scan_properties(p, &s->value, mi); break;
    case S_APP_PROPS: mi->app_props = sp; break;
    case S_FOOTER: mi->footer = sp; break;
    default:
        if (mi->body_off == SIZE_MAX)
            mi->body_off = s->off;
        break;
    }
}

static int scan(const uint8_t *p, size_t n, mqd_msg_info_t *out, bool deep)
{
    mqd_msg_info_t mi;
    size_t at = 0;
    int last = -1;

    if (p == NULL || n == 0 || out == NULL)
        return MQD_EINVAL;
    memset(&mi, 0, sizeof(mi));
    mi.priority = 4;
    mi.body_off = SIZE_MAX;
    while (at < n) {
        section_t s;
        if (next_section(p, &at, n, &s, deep) != 0 || !order_ok(last, s.id))
            return MQD_EINVAL;
        note_section(p, &s, &mi);
        last = s.id;
    }
    if (mi.body_off == SIZE_MAX)
        mi.body_off = n;
    *out = mi;
    return 0;
}

int mqd_msg_scan(const uint8_t *p, size_t n, mqd_msg_info_t *out)
{
    return scan(p, n, out, true);
}

int mqd_msg_scan_stored(const uint8_t *p, size_t n, mqd_msg_info_t *out)
{
    return scan(p, n, out, false);
}

/* ---- output buffer ---- */

void mqd_buf_free(mqd_buf_t *b)
{
    if (b == NULL)
        return;
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

int mqd_buf_reserve(mqd_buf_t *b, size_t need)
{
    size_t cap;
    uint8_t *np;

    if (need <= b->cap - b->len)
        return 0;
    if (need > SIZE_MAX / 2 - b->len)
        return MQD_ENOMEM;
    cap = b->cap ? b->cap : 256;
    while (cap - b->len < need)
        cap *= 2;
    np = realloc(b->p, cap);
    if (np == NULL)
        return MQD_ENOMEM;
    b->p = np;
    b->cap = cap;
    return 0;
}

static int put(mqd_buf_t *b, const void *d, size_t len)
{
    if (mqd_buf_reserve(b, len) != 0)
        return MQD_ENOMEM;
    if (len > 0)
        memcpy(b->p + b->len, d, len);
    b->len += len;
    return 0;
}

static int put_u8(mqd_buf_t *b, uint8_t v)
{
    return put(b, &v, 1);
}

static void store_be32(uint8_t *d, uint32_t v)
{
    d[0] = (uint8_t)(v >> 24), d[1] = (uint8_t)(v >> 16), d[2] = (uint8_t)(v >> 8);
    d[3] = (uint8_t)v;
}

static int put_be32(mqd_buf_t *b, uint32_t v)
{
    uint8_t d[4];
    store_be32(d, v);
    return put(b, d, 4);
}

/* str8/str32 (or sym8/sym32 with base 0xa3) of len bytes. */
static int put_str(mqd_buf_t *b, uint8_t code8, const void *s, size_t len)
{
    int rc;

    if (len > UINT32_MAX)
        return MQD_EINVAL;
    if (len <= 0xff)
        rc = put_u8(b, code8) || put_u8(b, (uint8_t)len);
    else
        rc = put_u8(b, (uint8_t)(code8 + 0x10)) || put_be32(b, (uint32_t)len);
    if (rc != 0)
        return MQD_ENOMEM;
    return put(b, s, len);
}

static int put_uint(mqd_buf_t *b, uint32_t v)
{
    if (v == 0)
        return put_u8(b, 0x43);
    if (v <= 0xff)
        return put_u8(b, 0x52) || put_u8(b, (uint8_t)v) ? MQD_ENOMEM : 0;
    return put_u8(b, 0x70) || put_be32(b, v) ? MQD_ENOMEM : 0;
}

/* Compounds are written with a 9-byte placeholder for the widest (list32/map32) head,
 * then closed: the narrow form is used when it fits and the items are moved down. */
#define HEAD32 9

static int open_compound(mqd_buf_t *b, size_t *head)
{
    static const uint8_t zero[HEAD32];
    *head = b->len;
    return put(b, zero, HEAD32);
}

static int close_compound(mqd_buf_t *b, size_t head, uint8_t code8, uint64_t count)
{
    size_t body = b->len - head - HEAD32;
    uint8_t *h = b->p + head;

    if (body + 1 <= 0xff && count <= 0xff) {
        h[0] = code8, h[1] = (uint8_t)(body + 1), h[2] = (uint8_t)count;
        memmove(h + 3, h + HEAD32, body);
        b->len -= HEAD32 - 3;
        return 0;
    }
    if (body + 4 > UINT32_MAX || count > UINT32_MAX)
        return MQD_EINVAL;
    h[0] = (uint8_t)(code8 + 0x10);
    store_be32(h + 1, (uint32_t)(body + 4));
    store_be32(h + 5, (uint32_t)count);
    return 0;
}

/* ---- annotate ---- */

#define K_PARTITION_ID "x-opt-partition-id"
#define K_OFFSET "x-opt-offset"
#define K_SEQUENCE "x-opt-sequence-number"
#define K_ENQUEUED "x-opt-enqueued-time"
#define K_PKEY "x-opt-partition-key"
#define K_DLQ_REASON "x-opt-deadletter-reason"
#define K_DLQ_SOURCE "x-opt-deadletter-source"
#define K_STATE "x-opt-message-state"

/* Whether an existing annotation with this key is replaced by one we write. String keys
 * are matched too: a client that (wrongly) used one would otherwise see two entries. */
static bool key_replaced(const uint8_t *p, const val_t *k, const mqd_msg_ann_t *ann)
{
    /* every key we write is "x-opt-" and at least 12 bytes (x-opt-offset) */
    if (!is_strsym(k) || k->end - k->data < 12 || memcmp(p + k->data, "x-opt-", 6) != 0)
        return false;
    if (ann->pkey_only)
        return ann->pkey != NULL && str_eq(p, k, K_PKEY);
    return str_eq(p, k, K_PARTITION_ID) || str_eq(p, k, K_OFFSET) ||
           str_eq(p, k, K_SEQUENCE) || str_eq(p, k, K_ENQUEUED) ||
           (ann->pkey != NULL && str_eq(p, k, K_PKEY)) ||
           (ann->dlq_reason != NULL && str_eq(p, k, K_DLQ_REASON)) ||
           (ann->dlq_origin != NULL && str_eq(p, k, K_DLQ_SOURCE)) ||
           (ann->message_state != 0 && str_eq(p, k, K_STATE));
}

static int put_key(mqd_buf_t *b, const char *k)
{
    return put_str(b, 0xa3, k, strlen(k));
}

/* sym8 key + value written into space the caller reserved (the fixed entries). */
static uint8_t *w_key(uint8_t *d, const char *k, size_t len)
{
    d[0] = 0xa3, d[1] = (uint8_t)len;
    memcpy(d + 2, k, len);
    return d + 2 + len;
}

static uint8_t *w_u64(uint8_t *d, uint8_t code, uint64_t v)
{
    *d++ = code;
    store_be32(d, (uint32_t)(v >> 32));
    store_be32(d + 4, (uint32_t)v);
    return d + 8;
}

/* The decimal digits of v (no sign), into d; returns their count (at most 20). */
static size_t dec_u64(char *d, uint64_t v)
{
    char r[20];
    size_t n = 0;
    do {
        r[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        d[i] = r[n - 1 - i];
    return n;
}

#define KEY_ARGS(k) k, sizeof(k) - 1
/* The four entries every delivery gets: keys, partition-id uint, offset str8 (at most
 * 20 digits and a sign), sequence-number long, enqueued-time timestamp. */
#define FIXED_ENTRIES_MAX (4 * 2 + sizeof(K_PARTITION_ID) + sizeof(K_OFFSET) + sizeof(K_SEQUENCE) + \
                           sizeof(K_ENQUEUED) + 5 + 2 + 21 + 9 + 9)

/* The fixed four: one reserve and direct stores (this runs for every message delivered). */
static void put_fixed_entries(mqd_buf_t *b, const mqd_msg_ann_t *ann, uint64_t *count)
{
    uint8_t *d = b->p + b->len;
    d = w_key(d, KEY_ARGS(K_PARTITION_ID));
    *d++ = 0x71;
    store_be32(d, (uint32_t)ann->partition_id);
    d += 4;
    d = w_key(d, KEY_ARGS(K_OFFSET));
    uint64_t mag = ann->offset < 0 ? (uint64_t)0 - (uint64_t)ann->offset : (uint64_t)ann->offset;
    size_t sign = ann->offset < 0;
    d[2] = '-';
    size_t nd = sign + dec_u64((char *)d + 2 + sign, mag);
    d[0] = 0xa1, d[1] = (uint8_t)nd;
    d += 2 + nd;
    d = w_u64(w_key(d, KEY_ARGS(K_SEQUENCE)), 0x81, (uint64_t)ann->offset);
    d = w_u64(w_key(d, KEY_ARGS(K_ENQUEUED)), 0x83, (uint64_t)ann->enqueued_ms);
    b->len = (size_t)(d - b->p);
    *count += 4;
}

/* Appends our entries; returns how many pairs were written through *count. */
static int put_our_entries(mqd_buf_t *b, const mqd_msg_ann_t *ann, uint64_t *count)
{
    int rc = 0;

    if (!ann->pkey_only) {
        if (mqd_buf_reserve(b, FIXED_ENTRIES_MAX) != 0)
            return MQD_ENOMEM;
        put_fixed_entries(b, ann, count);
    }
    if (ann->pkey != NULL) {
        rc |= put_key(b, K_PKEY) | put_str(b, 0xa1, ann->pkey, ann->pkey_len);
        *count += 1;
    }
    if (ann->dlq_reason != NULL) {
        rc |= put_key(b, K_DLQ_REASON) | put_str(b, 0xa1, ann->dlq_reason,
                                                  strlen(ann->dlq_reason));
        *count += 1;
    }
    if (ann->dlq_origin != NULL) {
        rc |= put_key(b, K_DLQ_SOURCE) | put_str(b, 0xa1, ann->dlq_origin,
                                                  strlen(ann->dlq_origin));
        *count += 1;
    }
    if (ann->message_state != 0) {
        rc |= put_key(b, K_STATE) | put_u8(b, 0x71) | put_be32(b, (uint32_t)ann->message_state);
        *count += 1;
    }
    return rc ? MQD_ENOMEM : 0;
}

/* Reads the section a span of `info` names, checking it is what the span claims. */
static int reread(const uint8_t *p, size_t n, mqd_span_t sp, int id, section_t *s)
{
    size_t at = sp.off;

    if (sp.off > n || sp.len > n - sp.off)
        return MQD_EINVAL;
    if (next_section(p, &at, sp.off + sp.len, s, false) != 0 || s->id != id || at != sp.off + sp.len)
        return MQD_EINVAL;
    return 0;
}

/* Writes the message-annotations section: the old one's descriptor and kept entries
 * (byte for byte), then ours. */
static int write_message_ann(const uint8_t *p, size_t n, const mqd_msg_info_t *info,
                             const mqd_msg_ann_t *ann, mqd_buf_t *out)
{
    static const uint8_t desc[] = { CODE_DESCRIBED, 0x53, 0x72 };
    uint64_t count = 0;
    size_t head, at;
    section_t s;
    val_t k, v;
    int rc;

    if (info->message_ann.len == 0) {
        rc = put(out, desc, sizeof(desc));
        rc = rc ? rc : open_compound(out, &head);
        rc = rc ? rc : put_our_entries(out, ann, &count);
        return rc ? rc : close_compound(out, head, 0xc1, count * 2);
    }
    rc = reread(p, n, info->message_ann, S_MESSAGE_ANN, &s);
    rc = rc ? rc : put(out, p + s.off, s.value.off - s.off);
    rc = rc ? rc : open_compound(out, &head);
    at = s.value.data;
    for (uint32_t i = 0; rc == 0 && i + 1 < s.value.count; i += 2) {
        if (next_value(p, &at, s.value.end, &k) != 0 || next_value(p, &at, s.value.end, &v) != 0)
            return MQD_EINVAL;
        if (key_replaced(p, &k, ann))
            continue;
        rc = put(out, p + k.off, v.end - k.off);
        count++;
    }
    rc = rc ? rc : put_our_entries(out, ann, &count);
    return rc ? rc : close_compound(out, head, 0xc1, count * 2);
}

/* Writes a header with ann's delivery-count (and first-acquirer false on a redelivery):
 * the old header's other fields are kept byte for byte (nulls pad a short list); with no
 * old header, all other fields are null. */
static int write_header(const uint8_t *p, size_t n, const mqd_msg_info_t *info,
                        const mqd_msg_ann_t *ann, mqd_buf_t *out)
{
    static const uint8_t desc[] = { CODE_DESCRIBED, 0x53, 0x70 };
    uint32_t i = 0, count = 0;
    size_t head, at = 0;
    section_t s = { 0 };
    val_t v;
    int rc;

    if (info->header.len == 0) {
        rc = put(out, desc, sizeof(desc));
    } else {
        rc = reread(p, n, info->header, S_HEADER, &s);
        rc = rc ? rc : put(out, p + s.off, s.value.off - s.off);
        count = s.value.count;
        at = s.value.data;
    }
    rc = rc ? rc : open_compound(out, &head);
    for (i = 0; rc == 0 && (i < count || i <= 4); i++) {
        if (i < count && next_value(p, &at, s.value.end, &v) != 0)
            return MQD_EINVAL;
        if (i == 4)
            rc = put_uint(out, ann->delivery_count);
        else if (i == 3 && ann->redelivered)
            rc = put_u8(out, CODE_FALSE);
        else if (i < count)
            rc = put(out, p + v.off, v.end - v.off);
        else
            rc = put_u8(out, CODE_NULL);
    }
    return rc ? rc : close_compound(out, head, 0xc0, i);
}

static bool span_ok(mqd_span_t sp, size_t n)
{
    return sp.off <= n && sp.len <= n - sp.off;
}

int mqd_msg_annotate(const uint8_t *p, size_t n, const mqd_msg_info_t *info,
                     const mqd_msg_ann_t *ann, mqd_buf_t *out)
{
    size_t pos = 0, ins;
    int rc = 0;

    if (p == NULL || info == NULL || ann == NULL || out == NULL)
        return MQD_EINVAL;
    out->len = 0;
    if (!span_ok(info->header, n) || !span_ok(info->delivery_ann, n) ||
        !span_ok(info->message_ann, n) || (ann->pkey == NULL && ann->pkey_len != 0))
        return MQD_EINVAL;
    /* A redelivery states first-acquirer false even where absence would mean it: some
     * clients show an absent header field as "unknown". */
    if (ann->delivery_count != info->delivery_count ||
        (ann->redelivered && (info->first_acquirer || info->header.len == 0))) {
        pos = info->header.len ? info->header.off + info->header.len : 0;
        rc = put(out, p, info->header.len ? info->header.off : 0);
        rc = rc ? rc : write_header(p, n, info, ann, out);
    }
    if (info->message_ann.len) {
        ins = info->message_ann.off;
    } else {
        ins = info->header.len ? info->header.off + info->header.len : 0;
        if (info->delivery_ann.len)
            ins = info->delivery_ann.off + info->delivery_ann.len;
    }
    if (rc == 0 && ins < pos)
        rc = MQD_EINVAL; /* info does not describe a message in section order */
    rc = rc ? rc : put(out, p + pos, ins - pos);
    rc = rc ? rc : write_message_ann(p, n, info, ann, out);
    pos = info->message_ann.len ? info->message_ann.off + info->message_ann.len : ins;
    rc = rc ? rc : put(out, p + pos, n - pos);
    if (rc != 0)
        out->len = 0;
    return rc;
}

/* ---- batches ---- */

int mqd_msg_batch_split(const uint8_t *p, size_t n, mqd_msg_batch_cb cb, void *arg)
{
    mqd_msg_info_t mi;
    size_t at;
    int ndata = 0, rc;

    if (cb == NULL)
        return MQD_EINVAL;
    rc = mqd_msg_scan(p, n, &mi);
    if (rc != 0)
        return rc;
    /* Check the whole body first, so a bad batch is refused before any record is made. */
    for (int pass = 0; pass < 2; pass++) {
        at = mi.body_off;
        while (at < n) {
            section_t s;
            if (next_section(p, &at, n, &s, false) != 0) /* walked deep by the scan */
                return MQD_EINVAL;
            if (s.id == S_FOOTER)
                break;
            if (s.id != S_DATA)
                return MQD_EINVAL;
            if (pass == 0) {
                ndata++;
                continue;
            }
            rc = cb(p + s.value.data, s.value.end - s.value.data, arg);
            if (rc != 0)
                return rc;
        }
        if (ndata == 0)
            return MQD_EINVAL;
    }
    return 0;
}
