/* Tests for the frame peek: a client's byte stream (SASL, AMQP header, open, begin,
 * attach, transfers in list8/list32 with every descriptor form, multi-frame and aborted
 * deliveries on several links and sessions, heartbeats, extended headers), fed whole,
 * byte by byte and split at every byte boundary (and every pair of boundaries). */
#include "config.h"
#include "codec/codec.h"
#include "util/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#define BATCH 0x80013700u

typedef struct out {
    uint8_t p[16384];
    size_t n;
} out_t;

static void put(out_t *o, const void *p, size_t n)
{
    assert_true(o->n + n <= sizeof o->p);
    memcpy(o->p + o->n, p, n);
    o->n += n;
}
static void put1(out_t *o, uint8_t b)
{
    put(o, &b, 1);
}
static void put32(out_t *o, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    put(o, b, 4);
}

/* A frame: size, doff (2 + ext words), type, channel, ext header, body. */
static void frame(out_t *o, uint8_t type, uint16_t ch, unsigned ext_words, const out_t *body)
{
    size_t size = 8 + ext_words * 4 + (body ? body->n : 0);
    put32(o, (uint32_t)size);
    put1(o, (uint8_t)(2 + ext_words));
    put1(o, type);
    put1(o, (uint8_t)(ch >> 8));
    put1(o, (uint8_t)ch);
    for (unsigned i = 0; i < ext_words * 4; i++)
        put1(o, 0xee);
    if (body)
        put(o, body->p, body->n);
}

enum { L8, L32 };
enum { D_SMALL, D_ULONG, D_SYM };

/* A described list: descriptor `code` (or its symbol), fields already encoded in f. */
static void perf(out_t *o, int dform, uint8_t code, const char *sym, int lenc, unsigned count,
                 const out_t *f)
{
    put1(o, 0x00);
    if (dform == D_SMALL) {
        put1(o, 0x53);
        put1(o, code);
    } else if (dform == D_ULONG) {
        put1(o, 0x80);
        put32(o, 0);
        put32(o, code);
    } else {
        put1(o, 0xa3);
        put1(o, (uint8_t)strlen(sym));
        put(o, sym, strlen(sym));
    }
    if (lenc == L8) {
        put1(o, 0xc0);
        put1(o, (uint8_t)(f->n + 1));
        put1(o, (uint8_t)count);
    } else {
        put1(o, 0xd0);
        put32(o, (uint32_t)(f->n + 4));
        put32(o, count);
    }
    put(o, f->p, f->n);
}

static void f_uint(out_t *f, uint32_t v)
{
    if (v == 0) {
        put1(f, 0x43);
    } else if (v < 256) {
        put1(f, 0x52);
        put1(f, (uint8_t)v);
    } else {
        put1(f, 0x70);
        put32(f, v);
    }
}
static void f_bool(out_t *f, bool v)
{
    put1(f, v ? 0x41 : 0x42);
}
static void f_null(out_t *f)
{
    put1(f, 0x40);
}
static void f_str(out_t *f, const char *s)
{
    put1(f, 0xa1);
    put1(f, (uint8_t)strlen(s));
    put(f, s, strlen(s));
}

static void attach(out_t *o, uint16_t ch, const char *name, uint32_t handle, bool role, size_t pad)
{
    out_t f = {.n = 0}, b = {.n = 0};
    f_str(&f, name);
    f_uint(&f, handle);
    f_bool(&f, role);
    put1(&f, 0x50); /* snd-settle-mode */
    put1(&f, 0);
    put1(&f, 0x50);
    put1(&f, 0);
    /* a big source: binary padding (filters in real life) */
    put1(&f, 0xb0);
    put32(&f, (uint32_t)pad);
    for (size_t i = 0; i < pad; i++)
        put1(&f, (uint8_t)i);
    perf(&b, D_SMALL, 0x12, NULL, pad > 200 ? L32 : L8, 6, &f);
    frame(o, 0, ch, 0, &b);
}

typedef struct xfer {
    uint16_t ch;
    uint32_t handle;
    const char *tag; /* NULL: field null */
    bool has_fmt;
    uint32_t fmt;
    bool more, aborted;
    int lenc, dform;
    bool state; /* a described state (transactional-state with an outcome) */
    unsigned ext_words;
    size_t payload;
    bool absent_tail; /* stop the list after `more` (fields 6.. absent) */
} xfer_t;

static void transfer(out_t *o, const xfer_t *x)
{
    out_t f = {.n = 0}, b = {.n = 0};
    unsigned count = 0;
    f_uint(&f, x->handle), count++;
    if (x->tag) {
        f_uint(&f, 7), count++;
        put1(&f, 0xa0);
        put1(&f, (uint8_t)strlen(x->tag));
        put(&f, x->tag, strlen(x->tag));
        count++;
    } else {
        f_null(&f), f_null(&f), count += 2;
    }
    if (x->has_fmt)
        f_uint(&f, x->fmt);
    else
        f_null(&f);
    count++;
    f_bool(&f, false), count++; /* settled */
    f_bool(&f, x->more), count++;
    if (!x->absent_tail || x->aborted) {
        f_null(&f), count++; /* rcv-settle-mode */
        if (x->state) {      /* transactional-state: txn-id, accepted */
            put(&f, "\x00\x53\x34\xc0\x0b\x02\xa0\x04txn1\x00\x53\x24\x45", 16);
        } else {
            f_null(&f);
        }
        count++;
        f_null(&f), count++; /* resume */
        f_bool(&f, x->aborted), count++;
        f_bool(&f, false), count++; /* batchable */
    }
    perf(&b, x->dform, 0x14, "amqp:transfer:list", x->lenc, count, &f);
    for (size_t i = 0; i < x->payload; i++)
        put1(&b, (uint8_t)(0x40 + i)); /* looks like AMQP values, on purpose */
    frame(o, 0, x->ch, x->ext_words, &b);
}

static void simple(out_t *o, uint16_t ch, uint8_t code)
{
    out_t f = {.n = 0}, b = {.n = 0};
    f_str(&f, "container");
    perf(&b, D_SMALL, code, NULL, L8, 1, &f);
    frame(o, 0, ch, 0, &b);
}

/* The whole client stream. */
static void stream(out_t *o)
{
    o->n = 0;
    put(o, "AMQP\x03\x01\x00\x00", 8);
    out_t sasl = {.n = 0};
    put(&sasl,
        "\x00\x53\x41\xc0\x0c\x01\xa3\x09"
        "ANONYMOUS",
        17);
    frame(o, 1, 0, 0, &sasl);
    put(o, "AMQP\x00\x01\x00\x00", 8);
    simple(o, 0, 0x10); /* open */
    simple(o, 0, 0x11); /* begin */
    simple(o, 1, 0x11);
    attach(o, 0, "s1", 0, false, 0);
    attach(o, 0, "r1", 1, true, 300);
    attach(o, 1, "s2", 0, false, 40);
    attach(o, 1, "s3", 1, false, 400); /* list32, longer than a small chunk */
    frame(o, 0, 0, 0, NULL);           /* heartbeat */
    xfer_t x;
    /* a single-frame batch */
    x = (xfer_t){.ch = 0, .handle = 0, .tag = "a", .has_fmt = true, .fmt = BATCH, .payload = 50};
    transfer(o, &x);
    /* a multi-frame format-0 delivery (list32, ulong descriptor) with continuations */
    x = (xfer_t){.ch = 0,
                 .handle = 0,
                 .tag = "b",
                 .has_fmt = true,
                 .more = true,
                 .lenc = L32,
                 .dform = D_ULONG,
                 .payload = 30};
    transfer(o, &x);
    x = (xfer_t){.ch = 0, .handle = 0, .more = true, .payload = 20, .absent_tail = true};
    transfer(o, &x);
    /* meanwhile a multi-frame batch on session 1, symbol descriptor, list32 */
    x = (xfer_t){.ch = 1,
                 .handle = 0,
                 .tag = "a",
                 .has_fmt = true,
                 .fmt = BATCH,
                 .more = true,
                 .lenc = L32,
                 .dform = D_SYM,
                 .payload = 10};
    transfer(o, &x);
    x = (xfer_t){.ch = 0, .handle = 0, .payload = 5}; /* ends "b" */
    transfer(o, &x);
    /* a continuation of s2's batch whose (omitted-format) fields must not count */
    x = (xfer_t){.ch = 1, .handle = 0, .more = true, .payload = 7};
    transfer(o, &x);
    frame(o, 0, 1, 0, NULL);
    x = (xfer_t){.ch = 1, .handle = 0, .has_fmt = true, .fmt = 0, .payload = 9};
    transfer(o, &x);
    /* format 0 with the same tag on s1: nothing recorded */
    x = (xfer_t){.ch = 0, .handle = 0, .tag = "c", .has_fmt = true, .payload = 3};
    transfer(o, &x);
    /* an extended header, a transactional state, another format */
    x = (xfer_t){.ch = 0,
                 .handle = 0,
                 .tag = "d",
                 .has_fmt = true,
                 .fmt = 5,
                 .state = true,
                 .lenc = L32,
                 .ext_words = 2,
                 .payload = 4};
    transfer(o, &x);
    /* an aborted batch, then a new one with the next tag */
    x = (xfer_t){.ch = 0, .handle = 0, .tag = "e", .has_fmt = true, .fmt = BATCH, .more = true};
    transfer(o, &x);
    x = (xfer_t){.ch = 0, .handle = 0, .more = true, .aborted = true};
    transfer(o, &x);
    x = (xfer_t){.ch = 0, .handle = 0, .tag = "f", .has_fmt = true, .fmt = BATCH, .payload = 1};
    transfer(o, &x);
    /* s3 (handle 1 on session 1): a batch with no payload bytes in this frame */
    x = (xfer_t){.ch = 1, .handle = 1, .tag = "zz", .has_fmt = true, .fmt = BATCH};
    transfer(o, &x);
    /* a flow and a close in list0 */
    out_t b = {.n = 0};
    put(&b, "\x00\x53\x18\x45", 4);
    frame(o, 0, 0, 0, &b);
}

static void check(mqd_fpeek_t *fp)
{
    assert_true(mqd_fpeek_ok(fp));
    assert_int_equal(mqd_fpeek_frames(fp), 24);
    assert_int_equal(mqd_fpeek_take(fp, "s1", 2, (const uint8_t *)"b", 1), 0);
    assert_int_equal(mqd_fpeek_take(fp, "s1", 2, (const uint8_t *)"c", 1), 0);
    assert_int_equal(mqd_fpeek_take(fp, "s2", 2, (const uint8_t *)"a", 1), BATCH);
    assert_int_equal(mqd_fpeek_take(fp, "s2", 2, (const uint8_t *)"a", 1), 0);
    assert_int_equal(mqd_fpeek_take(fp, "s1", 2, (const uint8_t *)"a", 1), BATCH);
    assert_int_equal(mqd_fpeek_take(fp, "s1", 2, (const uint8_t *)"d", 1), 5);
    assert_int_equal(mqd_fpeek_take(fp, "s1", 2, (const uint8_t *)"e", 1), BATCH);
    assert_int_equal(mqd_fpeek_take(fp, "s1", 2, (const uint8_t *)"f", 1), BATCH);
    assert_int_equal(mqd_fpeek_take(fp, "r1", 2, (const uint8_t *)"zz", 2), 0);
    assert_int_equal(mqd_fpeek_take(fp, "s3", 2, (const uint8_t *)"z", 1), 0);
    assert_int_equal(mqd_fpeek_take(fp, "s3", 2, (const uint8_t *)"zz", 2), BATCH);
    assert_int_equal(mqd_fpeek_take(fp, "s1", 2, (const uint8_t *)"a", 1), 0);
}

/* Feeds through exact-size heap copies, so ASan catches any read past a chunk. */
static void feed(mqd_fpeek_t *fp, const uint8_t *p, size_t n)
{
    uint8_t *c = malloc(n ? n : 1);
    assert_non_null(c);
    memcpy(c, p, n);
    mqd_fpeek_feed(fp, c, n);
    free(c);
}

static void test_whole(void **state)
{
    (void)state;
    static out_t o;
    stream(&o);
    mqd_fpeek_t *fp = mqd_fpeek_new();
    feed(fp, o.p, o.n);
    check(fp);
    mqd_fpeek_free(fp);
}

static void test_byte_by_byte(void **state)
{
    (void)state;
    static out_t o;
    stream(&o);
    mqd_fpeek_t *fp = mqd_fpeek_new();
    for (size_t i = 0; i < o.n; i++)
        feed(fp, o.p + i, 1);
    check(fp);
    mqd_fpeek_free(fp);
}

static void test_every_split(void **state)
{
    (void)state;
    static out_t o;
    stream(&o);
    for (size_t i = 0; i <= o.n; i++) {
        mqd_fpeek_t *fp = mqd_fpeek_new();
        feed(fp, o.p, i);
        feed(fp, o.p + i, o.n - i);
        check(fp);
        mqd_fpeek_free(fp);
    }
}

static void test_every_two_splits(void **state)
{
    (void)state;
    static out_t o;
    stream(&o);
    for (size_t i = 0; i <= o.n; i += 1) {
        for (size_t j = i; j <= o.n; j += 3) {
            mqd_fpeek_t *fp = mqd_fpeek_new();
            mqd_fpeek_feed(fp, o.p, i);
            mqd_fpeek_feed(fp, o.p + i, j - i);
            mqd_fpeek_feed(fp, o.p + j, o.n - j);
            check(fp);
            mqd_fpeek_free(fp);
        }
    }
}

/* What the peek cannot follow stops it: it then reports nothing, and never crashes. */
static void test_stops(void **state)
{
    (void)state;
    mqd_fpeek_t *fp = mqd_fpeek_new();
    mqd_fpeek_feed(fp, (const uint8_t *)"AMQP\x02\x01\x00\x00", 8); /* TLS */
    assert_false(mqd_fpeek_ok(fp));
    mqd_fpeek_feed(fp, (const uint8_t *)"\x16\x03\x01garbage", 10);
    mqd_fpeek_free(fp);

    fp = mqd_fpeek_new();
    mqd_fpeek_feed(fp, (const uint8_t *)"AMQP\x00\x01\x00\x00\x00\x00\x00\x08\x01\x00\x00\x00", 16);
    assert_false(mqd_fpeek_ok(fp)); /* doff 1 */
    mqd_fpeek_free(fp);

    /* a transfer on a handle never attached */
    out_t o = {.n = 0};
    put(&o, "AMQP\x00\x01\x00\x00", 8);
    xfer_t x = {.ch = 0, .handle = 3, .tag = "t", .has_fmt = true, .fmt = BATCH};
    transfer(&o, &x);
    fp = mqd_fpeek_new();
    mqd_fpeek_feed(fp, o.p, o.n);
    assert_false(mqd_fpeek_ok(fp));
    assert_int_equal(mqd_fpeek_take(fp, "s", 1, (const uint8_t *)"t", 1), 0);
    mqd_fpeek_free(fp);

    /* a format-0 transfer on such a handle costs no lookup and is no error */
    o.n = 0;
    put(&o, "AMQP\x00\x01\x00\x00", 8);
    x = (xfer_t){.ch = 0, .handle = 3, .tag = "t", .has_fmt = true};
    transfer(&o, &x);
    fp = mqd_fpeek_new();
    mqd_fpeek_feed(fp, o.p, o.n);
    assert_true(mqd_fpeek_ok(fp));
    mqd_fpeek_free(fp);

    /* a list whose size lies: fields run past it */
    o.n = 0;
    put(&o, "AMQP\x00\x01\x00\x00", 8);
    out_t b = {.n = 0};
    put(&b, "\x00\x53\x14\xc0\x02\x04\x43\x43\x43\x43", 10);
    frame(&o, 0, 0, 0, &b);
    fp = mqd_fpeek_new();
    mqd_fpeek_feed(fp, o.p, o.n);
    assert_false(mqd_fpeek_ok(fp));
    mqd_fpeek_free(fp);

    /* random bytes after a good header never crash it */
    srand(7);
    for (int k = 0; k < 2000; k++) {
        uint8_t buf[300];
        memcpy(buf, "AMQP\x00\x01\x00\x00", 8);
        for (size_t i = 8; i < sizeof buf; i++)
            buf[i] = (uint8_t)rand();
        if (k & 1) { /* a plausible frame header */
            buf[8] = buf[9] = 0;
            buf[10] = 0;
            buf[11] = (uint8_t)(20 + k % 200);
            buf[12] = 2;
            buf[13] = 0;
            buf[16] = 0;
            buf[17] = 0x53;
            buf[18] = (k & 2) ? 0x14 : 0x12;
        }
        fp = mqd_fpeek_new();
        size_t cut = (size_t)k % sizeof buf;
        feed(fp, buf, cut);
        feed(fp, buf + cut, sizeof buf - cut);
        mqd_fpeek_take(fp, "x", 1, (const uint8_t *)"t", 1);
        mqd_fpeek_free(fp);
    }
}

/* Bytes Proton may have of o[0..n) fed in pieces of `step` (0: whole), summed. */
static size_t guarded(mqd_fpeek_t *fp, const out_t *o, size_t step)
{
    size_t ok = 0;
    for (size_t off = 0; off < o->n;) {
        size_t k = step && o->n - off > step ? step : o->n - off;
        ok += mqd_fpeek_feed(fp, o->p + off, k);
        off += k;
    }
    return ok;
}

/* The guard in front of Proton (framepeek.h): a delivery started without a delivery-id
 * is refused with framing-error, and Proton gets no byte of that frame, in any
 * chunking; a continuation may omit it. */
static void test_guard(void **state)
{
    (void)state;
    static const size_t steps[] = {0, 1, 3, 7, 64};
    out_t o = {.n = 0};
    put(&o, "AMQP\x00\x01\x00\x00", 8);
    attach(&o, 0, "s", 0, false, 0);
    xfer_t first = {.handle = 0, .tag = "a", .has_fmt = true, .more = true, .payload = 3};
    xfer_t cont = {.handle = 0, .tag = NULL, .more = true, .payload = 3}; /* no delivery-id */
    xfer_t last = cont, abort_ = cont;
    last.more = false;
    abort_.more = false, abort_.aborted = true;
    transfer(&o, &first);
    transfer(&o, &cont);
    transfer(&o, &last);  /* delivery 1 ends: the next transfer starts one */
    transfer(&o, &first); /* delivery 2 */
    transfer(&o, &abort_);
    size_t good = o.n;
    for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
        mqd_fpeek_t *fp = mqd_fpeek_new();
        assert_int_equal(guarded(fp, &o, steps[i]), good);
        assert_null(mqd_fpeek_error(fp, NULL));
        mqd_fpeek_free(fp);
    }
    /* after the abort: a transfer without delivery-id starts a delivery (Proton asserts);
     * and one with more=false, which the spec forbids as well */
    for (int more = 0; more < 2; more++) {
        out_t bad = o;
        xfer_t x = cont;
        x.more = more;
        transfer(&bad, &x);
        size_t x_end = bad.n;
        transfer(&bad, &first); /* never reaches Proton either */
        for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
            mqd_fpeek_t *fp = mqd_fpeek_new();
            /* whole: none of the refused frame; in pieces, at most the part of it fed
             * before the one that decided (Proton acts on a frame only when whole) */
            size_t got = guarded(fp, &bad, steps[i]);
            assert_true(steps[i] ? got >= good && got < x_end : got == good);
            const char *why = NULL;
            assert_string_equal(mqd_fpeek_error(fp, &why), "amqp:connection:framing-error");
            assert_non_null(strstr(why, "delivery-id"));
            assert_int_equal(mqd_fpeek_feed(fp, bad.p, 8), 0); /* and nothing later */
            mqd_fpeek_free(fp);
        }
    }
    /* a frame over max-frame-size stops at its header */
    out_t big = {.n = 0};
    put(&big, "AMQP\x00\x01\x00\x00", 8);
    xfer_t x = first;
    x.payload = 600;
    transfer(&big, &x);
    mqd_fpeek_t *fp = mqd_fpeek_new();
    mqd_fpeek_set_max_frame(fp, 512);
    assert_int_equal(guarded(fp, &big, 0), 8);
    assert_string_equal(mqd_fpeek_error(fp, NULL), "amqp:connection:framing-error");
    mqd_fpeek_free(fp);
    /* a wrong protocol header goes to Proton (it answers with its own), nothing after */
    fp = mqd_fpeek_new();
    assert_int_equal(mqd_fpeek_feed(fp, (const uint8_t *)"AMQP\x02\x01\x00\x00\x16\x03", 10), 8);
    assert_string_equal(mqd_fpeek_error(fp, NULL), "amqp:connection:framing-error");
    mqd_fpeek_free(fp);
    /* SASL frames belong between the SASL and the AMQP header, one sasl-init at most */
    static const char init[] = "\x00\x53\x41\xc0\x0c\x01\xa3\x09ANONYMOUS";
    for (int k = 0; k < 2; k++) {
        out_t sa = {.n = 0}, ib = {.n = 0};
        put(&ib, init, sizeof init - 1);
        put(&sa, k ? "AMQP\x03\x01\x00\x00" : "AMQP\x00\x01\x00\x00", 8);
        frame(&sa, 1, 0, 0, &ib);
        size_t one = sa.n;
        frame(&sa, 1, 0, 0, &ib);
        fp = mqd_fpeek_new();
        assert_int_equal(guarded(fp, &sa, 0), k ? one : 8);
        const char *why = NULL;
        assert_string_equal(mqd_fpeek_error(fp, &why), "amqp:connection:framing-error");
        assert_string_equal(why, k ? "a second sasl-init" : "a SASL frame outside the SASL exchange");
        mqd_fpeek_free(fp);
    }
    /* an attach that does not decode */
    out_t dec = {.n = 0};
    put(&dec, "AMQP\x00\x01\x00\x00", 8);
    out_t b = {.n = 0};
    put(&b, "\x00\x53\x12\xc0\x03\x03\x43\x43\x43", 9); /* name is not a string */
    frame(&dec, 0, 0, 0, &b);
    fp = mqd_fpeek_new();
    assert_int_equal(guarded(fp, &dec, 0), 8);
    assert_string_equal(mqd_fpeek_error(fp, NULL), "amqp:decode-error");
    mqd_fpeek_free(fp);
}

/* Batches mqd never takes (dropped deliveries) do not grow the peek without bound. */
static void test_bounded(void **state)
{
    (void)state;
    mqd_fpeek_t *fp = mqd_fpeek_new();
    out_t o = {.n = 0};
    put(&o, "AMQP\x00\x01\x00\x00", 8);
    attach(&o, 0, "s", 0, false, 0);
    mqd_fpeek_feed(fp, o.p, o.n);
    char tag[16];
    for (unsigned i = 0; i < MQD_FPEEK_MAX_FMT + 10; i++) {
        o.n = 0;
        snprintf(tag, sizeof tag, "%u", i);
        xfer_t x = {.ch = 0, .handle = 0, .tag = tag, .has_fmt = true, .fmt = BATCH};
        transfer(&o, &x);
        mqd_fpeek_feed(fp, o.p, o.n);
    }
    assert_int_equal(mqd_fpeek_take(fp, "s", 1, (const uint8_t *)"0", 1), 0);
    snprintf(tag, sizeof tag, "%u", MQD_FPEEK_MAX_FMT + 9);
    assert_int_equal(mqd_fpeek_take(fp, "s", 1, (const uint8_t *)tag, strlen(tag)), BATCH);
    assert_true(mqd_fpeek_ok(fp));
    mqd_fpeek_free(fp);
}

/* An attach with fields up to unsettled (7) and incomplete-unsettled (8): `map` is the
 * encoded unsettled field, `inc` 0/1 or -1 for absent; a source of `pad` bytes. */
static void resume_attach(out_t *o, const char *name, bool role, const char *map, size_t maplen,
                          int inc, size_t pad)
{
    out_t f = {.n = 0}, b = {.n = 0};
    f_str(&f, name);
    f_uint(&f, 3);
    f_bool(&f, role);
    f_null(&f);
    f_null(&f);
    put1(&f, 0xb0); /* source: binary padding (filters in real life) */
    put32(&f, (uint32_t)pad);
    for (size_t i = 0; i < pad; i++)
        put1(&f, (uint8_t)i);
    put(&f, "\x00\x53\x29\x45", 4); /* target: an empty list */
    put(&f, map, maplen);
    if (inc >= 0)
        f_bool(&f, inc != 0);
    perf(&b, D_SMALL, 0x12, NULL, pad > 200 ? L32 : L8, inc >= 0 ? 9 : 8, &f);
    frame(o, 0, 0, 0, &b);
}

/* 2.6.13: an attach with a non-empty unsettled map or incomplete-unsettled=true is noted
 * once per (name, role), fed whole and byte by byte; an empty or null map is not; a map
 * past MQD_FPEEK_PERF_MAX bytes is not seen and does not stop the peek. */
static void test_resume(void **state)
{
    (void)state;
    static const char one[] = "\xc1\x05\x02\xa0\x01t\x40", empty[] = "\xc1\x01\x00",
                      one32[] = "\xd1\x00\x00\x00\x08\x00\x00\x00\x02\xa0\x01t\x40";
    for (int step = 0; step < 2; step++) {
        static out_t o;
        o.n = 0;
        put(&o, "AMQP\x00\x01\x00\x00", 8);
        resume_attach(&o, "rs", false, one, sizeof one - 1, -1, 0);
        resume_attach(&o, "rr", true, one32, sizeof one32 - 1, 0, 40);
        resume_attach(&o, "ri", false, "\x40", 1, 1, 0);
        resume_attach(&o, "re", false, empty, sizeof empty - 1, 0, 0);
        resume_attach(&o, "rn", true, "\x40", 1, -1, 0);
        resume_attach(&o, "big", false, one, sizeof one - 1, -1, 1200);
        mqd_fpeek_t *fp = mqd_fpeek_new();
        if (step == 0) {
            feed(fp, o.p, o.n);
        } else {
            for (size_t i = 0; i < o.n; i++)
                feed(fp, o.p + i, 1);
        }
        assert_true(mqd_fpeek_ok(fp));
        assert_false(mqd_fpeek_resume_take(fp, "rs", 2, true)); /* the other role */
        assert_true(mqd_fpeek_resume_take(fp, "rs", 2, false));
        assert_false(mqd_fpeek_resume_take(fp, "rs", 2, false)); /* taken */
        assert_true(mqd_fpeek_resume_take(fp, "rr", 2, true));
        assert_true(mqd_fpeek_resume_take(fp, "ri", 2, false));
        assert_false(mqd_fpeek_resume_take(fp, "re", 2, false));
        assert_false(mqd_fpeek_resume_take(fp, "rn", 2, true));
        assert_false(mqd_fpeek_resume_take(fp, "big", 3, false));
        mqd_fpeek_free(fp);
    }
}

/* An attach with every field up to desired-capabilities (12), encoded in `caps`; a
 * source of `pad` bytes. */
static void caps_attach(out_t *o, const char *name, bool role, const char *caps, size_t capslen,
                        size_t pad)
{
    out_t f = {.n = 0}, b = {.n = 0};
    f_str(&f, name);
    f_uint(&f, 4);
    f_bool(&f, role);
    f_null(&f);
    f_null(&f);
    put1(&f, 0xb0);
    put32(&f, (uint32_t)pad);
    for (size_t i = 0; i < pad; i++)
        put1(&f, (uint8_t)i);
    put(&f, "\x00\x53\x29\x45", 4);
    f_null(&f);                            /* unsettled */
    f_bool(&f, false);                     /* incomplete-unsettled */
    f_null(&f);                            /* initial-delivery-count */
    put(&f, "\x80\x00\x00\x00\x00\x00\x01\x00\x00", 9); /* max-message-size */
    put(&f, "\xa3\x03" "abc", 5);             /* offered-capabilities */
    put(&f, caps, capslen);
    perf(&b, D_SMALL, 0x12, NULL, pad > 200 ? L32 : L8, 13, &f);
    frame(o, 0, 0, 0, &b);
}

/* Issue 33 point 4: an attach whose desired-capabilities holds amqp:link:redirect (one
 * symbol, in an array8 of sym8 or an array32 of sym32) is noted once per (name, role),
 * fed whole and byte by byte; other symbols, null, or capabilities past
 * MQD_FPEEK_PERF_MAX bytes are not, and none of them stops the peek. */
static void test_redirect_caps(void **state)
{
    (void)state;
    static const char one[] = "\xa3\x12" "amqp:link:redirect",
                      arr[] = "\xe0\x17\x02\xa3\x01" "x\x12" "amqp:link:redirect",
                      other[] = "\xe0\x06\x02\xa3\x01" "x\x01" "y",
                      arr32[] = "\xf0\x00\x00\x00\x1b\x00\x00\x00\x01\xb3"
                                "\x00\x00\x00\x12" "amqp:link:redirect";
    for (int step = 0; step < 2; step++) {
        static out_t o;
        o.n = 0;
        put(&o, "AMQP\x00\x01\x00\x00", 8);
        caps_attach(&o, "ds", false, one, sizeof one - 1, 0);
        caps_attach(&o, "da", true, arr, sizeof arr - 1, 30);
        caps_attach(&o, "dn", false, other, sizeof other - 1, 0);
        caps_attach(&o, "dx", false, "\x40", 1, 0);
        caps_attach(&o, "d32", true, arr32, sizeof arr32 - 1, 0);
        caps_attach(&o, "big", false, one, sizeof one - 1, 1200);
        mqd_fpeek_t *fp = mqd_fpeek_new();
        if (step == 0) {
            feed(fp, o.p, o.n);
        } else {
            for (size_t i = 0; i < o.n; i++)
                feed(fp, o.p + i, 1);
        }
        assert_true(mqd_fpeek_ok(fp));
        assert_false(mqd_fpeek_redirect_take(fp, "ds", 2, true)); /* the other role */
        assert_true(mqd_fpeek_redirect_take(fp, "ds", 2, false));
        assert_false(mqd_fpeek_redirect_take(fp, "ds", 2, false)); /* taken */
        assert_true(mqd_fpeek_redirect_take(fp, "da", 2, true));
        assert_false(mqd_fpeek_redirect_take(fp, "dn", 2, false));
        assert_false(mqd_fpeek_redirect_take(fp, "dx", 2, false));
        assert_true(mqd_fpeek_redirect_take(fp, "d32", 3, true));
        assert_false(mqd_fpeek_redirect_take(fp, "big", 3, false));
        assert_false(mqd_fpeek_resume_take(fp, "ds", 2, false)); /* not a resume */
        mqd_fpeek_free(fp);
    }
}

/* Not a benchmark gate: prints the cost per frame of a stream of small format-0
 * transfers fed in 64 KiB chunks (what rx_feed does). */
static void test_cost(void **state)
{
    (void)state;
    static uint8_t big[1 << 20];
    size_t n = 0;
    out_t o = {.n = 0};
    put(&o, "AMQP\x00\x01\x00\x00", 8);
    attach(&o, 0, "s", 0, false, 0);
    memcpy(big, o.p, o.n);
    n = o.n;
    size_t frames = 0;
    while (n + 1200 < sizeof big) {
        o.n = 0;
        xfer_t x = {.ch = 0,
                    .handle = 0,
                    .tag = "12345678",
                    .has_fmt = true,
                    .payload = 1000,
                    .absent_tail = true};
        transfer(&o, &x);
        memcpy(big + n, o.p, o.n);
        n += o.n;
        frames++;
    }
    mqd_fpeek_t *fp = mqd_fpeek_new();
    struct timespec t0, t1;
    int rounds = 20;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < rounds; r++) {
        mqd_fpeek_t *f2 = r ? mqd_fpeek_new() : fp;
        for (size_t off = 0; off < n; off += 65536)
            mqd_fpeek_feed(f2, big + off, n - off < 65536 ? n - off : 65536);
        assert_true(mqd_fpeek_ok(f2));
        if (r)
            mqd_fpeek_free(f2);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    printf("framepeek: %.1f ns per 1 KiB transfer frame (%zu frames x %d)\n",
           ns / (double)(frames * (size_t)rounds), frames, rounds);
    mqd_fpeek_free(fp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole),       cmocka_unit_test(test_byte_by_byte),
        cmocka_unit_test(test_every_split), cmocka_unit_test(test_every_two_splits),
        cmocka_unit_test(test_stops),       cmocka_unit_test(test_bounded),
        cmocka_unit_test(test_cost),        cmocka_unit_test(test_guard),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_redirect_caps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
