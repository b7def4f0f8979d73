/* amqp091/conn: a 0-9-1 connection — its socket (taken over from core/conn.c after the
 * protocol header), input framing, output queue, the connection class (start, PLAIN
 * login against mqd's users, tune, open, close), heartbeats and the handshake deadline.
 * Everything runs on the loop thread. */
#include "config.h"
#include "amqp091/amqp091_int.h"
#include "auth/auth.h"
#include "conf/conf.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HANDSHAKE_MS 10000 /* from the header to connection.open */
#define CLOSE_WAIT_MS 2000 /* for the peer's close-ok after our connection.close */
#define IN_MAX (A091_FRAME_MAX + 8)

static a091_conn_t *conns; /* every live 0-9-1 connection */

static void handle_input(a091_conn_t *c);

#define OUT_MAX (4u << 20) /* input waits while this much output is unsent */

/* Input is read while the output drains and no login is under check. */
static void rx_pace(a091_conn_t *c)
{
    if (c->dead)
        return;
    bool want = c->state != A091_AUTH && c->out_len - c->out_off < OUT_MAX && !c->blocked;
    if (want && c->rx_paused) {
        c->rx_paused = false;
        event_add(c->ev_read, NULL);
    } else if (!want && !c->rx_paused) {
        c->rx_paused = true;
        event_del(c->ev_read);
    }
}

a091_conn_t *a091_conns_head(void)
{
    return conns;
}

void a091_conn_ref(a091_conn_t *c)
{
    c->refs++;
}

void a091_conn_unref(a091_conn_t *c)
{
    if (--c->refs > 0)
        return;
    free(c->in);
    free(c->out);
    free(c->chans);
    empty_amqp_pool(&c->pool);
    free(c);
}

/* Socket I/O, through the SSL on a TLS listener: the byte count, or -1 with errno
 * (EAGAIN: not now), or 0 at the end of the input. */
static ssize_t io_recv(a091_conn_t *c, uint8_t *p, size_t n)
{
    if (!c->ssl)
        return recv(c->fd, p, n, 0);
    ERR_clear_error();
    int k = SSL_read(c->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n);
    if (k > 0)
        return k;
    int err = SSL_get_error(c->ssl, k);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return -1;
    }
    ERR_clear_error();
    if (err == SSL_ERROR_ZERO_RETURN)
        return 0;
    errno = EIO;
    return -1;
}

static ssize_t io_send(a091_conn_t *c, const uint8_t *p, size_t n)
{
    if (!c->ssl)
        return send(c->fd, p, n, MSG_NOSIGNAL);
    ERR_clear_error();
    int k = SSL_write(c->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n);
    if (k > 0)
        return k;
    int err = SSL_get_error(c->ssl, k);
    ERR_clear_error();
    errno = err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE ? EAGAIN : EIO;
    return -1;
}

/* Ends the connection now: its channels release what they hold, the socket closes. */
static void conn_kill(a091_conn_t *c, const char *why)
{
    if (c->dead)
        return;
    c->dead = true;
    MQD_INFO("amqp091", "close peer=%s user=%s reason=%s", c->peer, c->user[0] ? c->user : "-",
             why);
    for (uint32_t i = 0; i <= c->channel_max; i++)
        if (c->chans[i]) {
            a091_chan_free(c, c->chans[i]);
            c->chans[i] = NULL;
        }
    event_free(c->ev_read);
    event_free(c->ev_write);
    event_free(c->ev_timer);
    c->ev_read = c->ev_write = c->ev_timer = NULL;
    if (c->ssl) {
        ERR_clear_error();
        if (SSL_shutdown(c->ssl) < 0) /* one close_notify, best effort */
            ERR_clear_error();
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    close(c->fd);
    c->fd = -1;
    *c->pprev = c->next;
    if (c->next)
        c->next->pprev = c->pprev;
    a091_conn_unref(c);
}

static int out_reserve(a091_conn_t *c, size_t need)
{
    if (c->out_off > 0 && c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    if (c->out_cap - c->out_len >= need)
        return 0;
    if (c->out_off > 0) {
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
        if (c->out_cap - c->out_len >= need)
            return 0;
    }
    size_t cap = c->out_cap ? c->out_cap : 16384;
    while (cap - c->out_len < need)
        cap *= 2;
    uint8_t *p = realloc(c->out, cap);
    if (!p)
        return MQD_ENOMEM;
    c->out = p;
    c->out_cap = cap;
    return 0;
}

static void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void wr32(uint8_t *p, uint32_t v)
{
    wr16(p, (uint16_t)(v >> 16));
    wr16(p + 2, (uint16_t)v);
}

/* A frame whose payload the caller writes at the returned address (size known). */
static uint8_t *frame_open(a091_conn_t *c, uint8_t type, uint16_t ch, uint32_t size)
{
    if (out_reserve(c, (size_t)size + 8) != 0)
        return NULL;
    uint8_t *p = c->out + c->out_len;
    p[0] = type;
    wr16(p + 1, ch);
    wr32(p + 3, size);
    p[7 + size] = AMQP_FRAME_END;
    c->out_len += (size_t)size + 8;
    return p + 7;
}

int a091_send_method(a091_conn_t *c, uint16_t ch, amqp_method_number_t id, void *m)
{
    if (c->dead)
        return MQD_ESTATE;
    /* encode straight into the output, then fix the frame's size */
    size_t room = c->frame_max > 8 ? c->frame_max - 8 : A091_FRAME_MIN;
    if (out_reserve(c, room + 8) != 0)
        return MQD_ENOMEM;
    uint8_t *p = c->out + c->out_len;
    amqp_bytes_t enc = {.len = room - 4, .bytes = p + 11};
    int n = amqp_encode_method(id, m, enc);
    if (n < 0) {
        MQD_WARN_RL("amqp091", "cannot encode %s: %d", amqp_method_name(id), n);
        return MQD_EINVAL;
    }
    p[0] = AMQP_FRAME_METHOD;
    wr16(p + 1, ch);
    wr32(p + 3, (uint32_t)n + 4);
    wr32(p + 7, id);
    p[11 + n] = AMQP_FRAME_END;
    c->out_len += (size_t)n + 12;
    return 0;
}

int a091_send_content(a091_conn_t *c, uint16_t ch, const amqp_basic_properties_t *props,
                      const uint8_t *body, size_t len)
{
    if (c->dead)
        return MQD_ESTATE;
    size_t room = c->frame_max > 8 ? c->frame_max - 8 : A091_FRAME_MIN;
    if (out_reserve(c, room + 8) != 0)
        return MQD_ENOMEM;
    uint8_t *p = c->out + c->out_len;
    amqp_bytes_t enc = {.len = room - 12, .bytes = p + 19};
    int n = amqp_encode_properties(AMQP_BASIC_CLASS, (void *)props, enc);
    if (n < 0)
        return MQD_EINVAL;
    p[0] = AMQP_FRAME_HEADER;
    wr16(p + 1, ch);
    wr32(p + 3, (uint32_t)n + 12);
    wr16(p + 7, AMQP_BASIC_CLASS);
    wr16(p + 9, 0);
    wr32(p + 11, (uint32_t)((uint64_t)len >> 32));
    wr32(p + 15, (uint32_t)len);
    p[19 + n] = AMQP_FRAME_END;
    c->out_len += (size_t)n + 20;
    while (len > 0) {
        size_t k = len < room ? len : room;
        uint8_t *b = frame_open(c, AMQP_FRAME_BODY, ch, (uint32_t)k);
        if (!b)
            return MQD_ENOMEM;
        memcpy(b, body, k);
        body += k;
        len -= k;
    }
    return 0;
}

void a091_flush(a091_conn_t *c)
{
    while (!c->dead && c->out_off < c->out_len) {
        ssize_t n = io_send(c, c->out + c->out_off, c->out_len - c->out_off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->writing) {
                c->writing = true;
                event_add(c->ev_write, NULL);
            }
            rx_pace(c);
            return;
        }
        if (n < 0) {
            conn_kill(c, strerror(errno));
            return;
        }
        c->out_off += (size_t)n;
        c->last_tx_ms = a091_mono_ms();
    }
    if (c->dead)
        return;
    c->out_off = c->out_len = 0;
    if (c->writing) {
        c->writing = false;
        event_del(c->ev_write);
    }
    rx_pace(c);
}

void a091_conn_error(a091_conn_t *c, int code, const char *text, amqp_method_number_t cause)
{
    if (c->state == A091_CLOSING || c->dead)
        return;
    MQD_NOTICE_RL("amqp091", "peer=%s connection error %d: %s", c->peer, code, text);
    if (c->state == A091_HDR || c->state == A091_START_OK) {
        conn_kill(c, text); /* nothing was negotiated: just close */
        return;
    }
    amqp_connection_close_t m = {.reply_code = (uint16_t)code,
                                 .reply_text = amqp_cstring_bytes(text),
                                 .class_id = (uint16_t)(cause >> 16),
                                 .method_id = (uint16_t)cause};
    a091_send_method(c, 0, AMQP_CONNECTION_CLOSE_METHOD, &m);
    c->state = A091_CLOSING;
    c->in_len = 0;
    struct timeval tv = {CLOSE_WAIT_MS / 1000, (CLOSE_WAIT_MS % 1000) * 1000};
    event_add(c->ev_timer, &tv);
}

void a091_block_check(a091_conn_t *c)
{
    uint64_t reserved = 0;
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(c->srv);
    bool now = c->published && c->state == A091_UP &&
               (mqd_watermark_window(c->srv, 1, 0, 0, &reserved) == 0 ||
                (fh && fh->send_busy && fh->send_busy(fh->arg))); /* forwarding's budget */
    if (now == c->blocked)
        return;
    c->blocked = now;
    MQD_NOTICE_RL("amqp091", "peer=%s %s", c->peer,
                  now ? "blocked: a disk or memory watermark is exceeded" : "unblocked");
    if (c->blocked_cap && now) {
        amqp_connection_blocked_t m = {.reason = amqp_cstring_bytes("low on disk or memory")};
        a091_send_method(c, 0, AMQP_CONNECTION_BLOCKED_METHOD, &m);
    } else if (c->blocked_cap) {
        amqp_connection_unblocked_t m = {0};
        a091_send_method(c, 0, AMQP_CONNECTION_UNBLOCKED_METHOD, &m);
    }
    rx_pace(c);
}

bool a091_may(a091_conn_t *c, int perm, const char *topic)
{
    if (mqd_auth_user_may(c->srv, c->user, (mqd_perm_t)perm, topic))
        return true;
    MQD_NOTICE_RL("amqp091", "peer=%s user=%s refused right %d on %s", c->peer, c->user, perm,
                  topic);
    return false;
}

/* ---- the connection class ---- */

static amqp_table_entry_t *entry(amqp_table_entry_t *e, const char *key)
{
    e->key = amqp_cstring_bytes(key);
    return e;
}

static void send_start(a091_conn_t *c)
{
    static const char *caps[] = {"publisher_confirms",           "basic.nack",
                                 "consumer_cancel_notify",       "per_consumer_qos",
                                 "authentication_failure_close", "connection.blocked"};
    amqp_table_entry_t ce[6], se[3];
    for (size_t i = 0; i < 6; i++) {
        entry(&ce[i], caps[i])->value.kind = AMQP_FIELD_KIND_BOOLEAN;
        ce[i].value.value.boolean = 1;
    }
    entry(&se[0], "product")->value.kind = AMQP_FIELD_KIND_UTF8;
    se[0].value.value.bytes = amqp_cstring_bytes("mqd");
    entry(&se[1], "version")->value.kind = AMQP_FIELD_KIND_UTF8;
    se[1].value.value.bytes = amqp_cstring_bytes(PACKAGE_VERSION);
    entry(&se[2], "capabilities")->value.kind = AMQP_FIELD_KIND_TABLE;
    se[2].value.value.table = (amqp_table_t){.num_entries = 6, .entries = ce};
    amqp_connection_start_t m = {.version_major = 0,
                                 .version_minor = 9,
                                 .server_properties = {.num_entries = 3, .entries = se},
                                 .mechanisms = amqp_cstring_bytes("PLAIN AMQPLAIN"),
                                 .locales = amqp_cstring_bytes("en_US")};
    a091_send_method(c, 0, AMQP_CONNECTION_START_METHOD, &m);
    c->state = A091_START_OK;
}

static void login_done(void *arg, int rc)
{
    a091_conn_t *c = arg;
    if (!c->dead && c->state == A091_AUTH) {
        if (rc == 0) {
            amqp_connection_tune_t m = {.channel_max = A091_CHANNEL_MAX,
                                        .frame_max = A091_FRAME_MAX,
                                        .heartbeat = A091_HEARTBEAT};
            a091_send_method(c, 0, AMQP_CONNECTION_TUNE_METHOD, &m);
            c->state = A091_TUNE_OK;
        } else {
            MQD_NOTICE_RL("amqp091", "peer=%s login refused user=%s", c->peer, c->user);
            a091_conn_error(c, A091_ACCESS_REFUSED,
                            "ACCESS_REFUSED - Login was refused using authentication mechanism "
                            "PLAIN",
                            AMQP_CONNECTION_START_OK_METHOD);
        }
        if (c->state == A091_TUNE_OK && c->in_len > 0)
            handle_input(c); /* what the client pipelined behind its start-ok */
        a091_flush(c);
    }
    a091_conn_unref(c);
}

/* AMQPLAIN: a field table without its length, LOGIN and PASSWORD long strings. */
static bool amqplain(amqp_bytes_t r, amqp_pool_t *pool, amqp_bytes_t *user, amqp_bytes_t *pw)
{
    if (r.len > 4096)
        return false;
    uint8_t buf[4100];
    wr32(buf, (uint32_t)r.len);
    memcpy(buf + 4, r.bytes, r.len);
    amqp_table_t t;
    size_t off = 0;
    if (amqp_decode_table((amqp_bytes_t){.len = r.len + 4, .bytes = buf}, pool, &t, &off) != 0)
        return false;
    *user = *pw = (amqp_bytes_t){0};
    for (int i = 0; i < t.num_entries; i++) {
        amqp_table_entry_t *e = &t.entries[i];
        if (e->value.kind != AMQP_FIELD_KIND_UTF8 && e->value.kind != AMQP_FIELD_KIND_BYTES)
            continue;
        if (e->key.len == 5 && memcmp(e->key.bytes, "LOGIN", 5) == 0)
            *user = e->value.value.bytes;
        else if (e->key.len == 8 && memcmp(e->key.bytes, "PASSWORD", 8) == 0)
            *pw = e->value.value.bytes;
    }
    return user->bytes != NULL;
}

/* PLAIN: [authzid] NUL authcid NUL password */
static bool plain(amqp_bytes_t r, amqp_bytes_t *user, amqp_bytes_t *pw)
{
    const char *p = r.bytes, *end = p + r.len;
    const char *a = memchr(p, 0, r.len);
    if (!a)
        return false;
    const char *b = memchr(a + 1, 0, (size_t)(end - a - 1));
    if (!b)
        return false;
    *user = (amqp_bytes_t){.len = (size_t)(b - a - 1), .bytes = (void *)(a + 1)};
    *pw = (amqp_bytes_t){.len = (size_t)(end - b - 1), .bytes = (void *)(b + 1)};
    return true;
}

/* Does the client's capabilities table say it takes connection.blocked? */
static bool takes_blocked(const amqp_table_t *props)
{
    for (int i = 0; i < props->num_entries; i++) {
        const amqp_table_entry_t *e = &props->entries[i];
        if (e->key.len != 12 || memcmp(e->key.bytes, "capabilities", 12) != 0 ||
            e->value.kind != AMQP_FIELD_KIND_TABLE)
            continue;
        const amqp_table_t *caps = &e->value.value.table;
        for (int j = 0; j < caps->num_entries; j++) {
            const amqp_table_entry_t *k = &caps->entries[j];
            if (k->key.len == 18 && memcmp(k->key.bytes, "connection.blocked", 18) == 0 &&
                k->value.kind == AMQP_FIELD_KIND_BOOLEAN)
                return k->value.value.boolean != 0;
        }
    }
    return false;
}

static void start_ok(a091_conn_t *c, amqp_connection_start_ok_t *m)
{
    c->blocked_cap = takes_blocked(&m->client_properties);
    amqp_bytes_t user, pw;
    bool ok = false;
    if (!c->ssl && !mqd_srv_conf(c->srv)->allow_plain_without_tls) {
        /* as SASL PLAIN on AMQP 1.0: no password in clear on a plain listener */
        c->state = A091_AUTH;
        a091_conn_error(c, A091_ACCESS_REFUSED,
                        "ACCESS_REFUSED - passwords in clear need TLS here "
                        "(allow_plain_without_tls = off): use an amqps:// listener",
                        AMQP_CONNECTION_START_OK_METHOD);
        return;
    }
    if (m->mechanism.len == 5 && memcmp(m->mechanism.bytes, "PLAIN", 5) == 0)
        ok = plain(m->response, &user, &pw);
    else if (m->mechanism.len == 8 && memcmp(m->mechanism.bytes, "AMQPLAIN", 8) == 0)
        ok = amqplain(m->response, &c->pool, &user, &pw);
    if (!ok || user.len == 0 || user.len >= sizeof c->user || pw.len > 1024 ||
        memchr(user.bytes, 0, user.len)) {
        c->state = A091_AUTH; /* refused like a wrong password */
        a091_conn_error(c, A091_ACCESS_REFUSED,
                        "ACCESS_REFUSED - unsupported mechanism or "
                        "malformed response (PLAIN and AMQPLAIN are offered)",
                        AMQP_CONNECTION_START_OK_METHOD);
        return;
    }
    memcpy(c->user, user.bytes, user.len);
    c->user[user.len] = 0;
    char pass[1025];
    memcpy(pass, pw.bytes, pw.len);
    pass[pw.len] = 0;
    char host[64];
    snprintf(host, sizeof host, "%s", c->peer);
    char *colon = strrchr(host, ':');
    if (colon)
        *colon = 0;
    c->state = A091_AUTH;
    a091_conn_ref(c);
    int rc = mqd_auth_password_check(c->srv, c->user, pass, host, login_done, c);
    memset(pass, 0, sizeof pass);
    if (rc != 0) {
        a091_conn_unref(c);
        a091_conn_error(c, A091_CONNECTION_FORCED, "CONNECTION_FORCED - too many logins at once",
                        AMQP_CONNECTION_START_OK_METHOD);
    }
}

static void tune_ok(a091_conn_t *c, amqp_connection_tune_ok_t *m)
{
    c->frame_max =
        m->frame_max == 0 || m->frame_max > A091_FRAME_MAX ? A091_FRAME_MAX : m->frame_max;
    if (c->frame_max < A091_FRAME_MIN)
        c->frame_max = A091_FRAME_MIN;
    c->channel_max = m->channel_max == 0 || m->channel_max > A091_CHANNEL_MAX ? A091_CHANNEL_MAX
                                                                              : m->channel_max;
    c->heartbeat = m->heartbeat;
    c->state = A091_OPEN;
}

static void conn_open(a091_conn_t *c)
{
    amqp_connection_open_ok_t ok = {.known_hosts = amqp_cstring_bytes("")};
    a091_send_method(c, 0, AMQP_CONNECTION_OPEN_OK_METHOD, &ok);
    c->state = A091_UP;
    MQD_INFO("amqp091", "open peer=%s user=%s frame_max=%u heartbeat=%u", c->peer, c->user,
             c->frame_max, c->heartbeat);
    struct timeval tv = {1, 0};
    event_add(c->ev_timer, &tv);
}

/* A method on channel 0. */
static void conn_method(a091_conn_t *c, amqp_method_number_t id, void *m)
{
    if (id == AMQP_CONNECTION_CLOSE_METHOD) {
        amqp_connection_close_ok_t ok = {0};
        a091_send_method(c, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        a091_flush(c);
        conn_kill(c, "connection.close");
        return;
    }
    if (id == AMQP_CONNECTION_CLOSE_OK_METHOD && c->state == A091_CLOSING) {
        conn_kill(c, "closed by mqd");
        return;
    }
    if (c->state == A091_CLOSING)
        return; /* after our close only close and close-ok count */
    if (c->state == A091_START_OK && id == AMQP_CONNECTION_START_OK_METHOD)
        start_ok(c, m);
    else if (c->state == A091_TUNE_OK && id == AMQP_CONNECTION_TUNE_OK_METHOD)
        tune_ok(c, m);
    else if (c->state == A091_OPEN && id == AMQP_CONNECTION_OPEN_METHOD)
        conn_open(c);
    else
        a091_conn_error(c, A091_COMMAND_INVALID, "COMMAND_INVALID - unexpected method on channel 0",
                        id);
}

static void handle_frame(a091_conn_t *c, const a091_frame_t *f)
{
    const char *why = NULL;
    if (f->type == AMQP_FRAME_HEARTBEAT) {
        if (f->channel != 0)
            a091_conn_error(c, A091_COMMAND_INVALID, "COMMAND_INVALID - heartbeat on a channel", 0);
        return;
    }
    if (c->state == A091_CLOSING && (f->type != AMQP_FRAME_METHOD || f->channel != 0))
        return;
    if (f->type == AMQP_FRAME_METHOD) {
        amqp_method_number_t id = 0;
        void *m = NULL;
        int rc = a091_method_decode(f, &c->pool, &id, &m, &why);
        if (rc != 0) {
            char text[128];
            snprintf(text, sizeof text, "%s - %s",
                     rc == A091_SYNTAX_ERROR  ? "SYNTAX_ERROR"
                     : rc == A091_FRAME_ERROR ? "FRAME_ERROR"
                                              : "COMMAND_INVALID",
                     why);
            a091_conn_error(c, rc, text, id);
        } else if (f->channel == 0) {
            conn_method(c, id, m);
        } else if (c->state != A091_UP) {
            a091_conn_error(c, A091_CHANNEL_ERROR, "CHANNEL_ERROR - connection not open", id);
        } else {
            a091_chan_method(c, f->channel, id, m);
        }
        return;
    }
    /* content frames belong to a publish on an open channel */
    a091_chan_t *ch = c->state == A091_UP && f->channel && f->channel <= c->channel_max
                          ? c->chans[f->channel]
                          : NULL;
    if (!ch || !ch->open) {
        a091_conn_error(c, A091_UNEXPECTED_FRAME,
                        "UNEXPECTED_FRAME - content frame on a channel that is not open", 0);
        return;
    }
    if (f->type == AMQP_FRAME_HEADER)
        a091_chan_header(c, ch, f);
    else
        a091_chan_body(c, ch, f);
}

/* The protocol header: 8 bytes, then connection.start. */
static bool take_header(a091_conn_t *c)
{
    static const uint8_t hdr[8] = {'A', 'M', 'Q', 'P', 0, 0, 9, 1};
    if (c->in_len < sizeof hdr)
        return false;
    if (memcmp(c->in, hdr, sizeof hdr) != 0) {
        conn_kill(c, "bad protocol header");
        return false;
    }
    memmove(c->in, c->in + 8, c->in_len - 8);
    c->in_len -= 8;
    send_start(c);
    return true;
}

static void handle_input(a091_conn_t *c)
{
    if (c->state == A091_HDR && !take_header(c))
        return;
    size_t off = 0;
    while (!c->dead && c->state != A091_AUTH) {
        a091_frame_t f;
        size_t used = 0;
        const char *why = NULL;
        uint32_t max = c->state >= A091_OPEN ? c->frame_max : A091_FRAME_MAX;
        int k = a091_frame_next(c->in + off, c->in_len - off, max, &f, &used, &why);
        if (k == 0)
            break;
        if (k != 1) {
            char text[128];
            snprintf(text, sizeof text, "FRAME_ERROR - %s", why);
            a091_conn_error(c, k, text, 0);
            off = c->in_len;
            break;
        }
        handle_frame(c, &f);
        recycle_amqp_pool(&c->pool);
        off += used;
        if (c->state == A091_CLOSING) {
            off = c->in_len;
        }
    }
    if (c->dead)
        return;
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    a091_conn_t *c = arg;
    MQD_UNUSED(what);
    a091_conn_ref(c);
    if (c->state == A091_HDR && c->in_len > 0)
        handle_input(c); /* the plaintext read before the hand-over (TLS) */
    for (int round = 0; round < 4 && !c->dead; round++) {
        if (c->in_cap - c->in_len < 65536 && c->in_cap < IN_MAX + 65536) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 65536;
            uint8_t *p = realloc(c->in, cap);
            if (!p) {
                conn_kill(c, "out of memory");
                break;
            }
            c->in = p;
            c->in_cap = cap;
        }
        if (c->in_len == c->in_cap)
            break; /* a login under check holds it: rx_pace has stopped reading */
        ssize_t n = io_recv(c, c->in + c->in_len, c->in_cap - c->in_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            conn_kill(c, n == 0 ? "peer closed" : strerror(errno));
            break;
        }
        c->last_rx_ms = a091_mono_ms();
        c->in_len += (size_t)n;
        handle_input(c);
        if (c->state == A091_AUTH || c->in_len == c->in_cap)
            break; /* the rest after the login's outcome (rx_pace stops reading) */
    }
    if (!c->dead) {
        a091_pump(c);
        a091_flush(c);
    }
    /* records OpenSSL read ahead do not make the socket readable: come back for them */
    if (!c->dead && c->ssl && !c->rx_paused && SSL_has_pending(c->ssl))
        event_active(c->ev_read, EV_READ, 1);
    mqd_store_commit(mqd_srv_store(c->srv));
    mqd_server_tick_soon(c->srv);
    a091_conn_unref(c);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    a091_conn_t *c = arg;
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
    a091_conn_ref(c);
    a091_flush(c);
    if (!c->dead) {
        a091_pump(c);
        a091_flush(c);
    }
    a091_conn_unref(c);
}

/* Once a second (after open), or the handshake / close deadline. */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    a091_conn_t *c = arg;
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
    if (c->state == A091_CLOSING) {
        conn_kill(c, "no close-ok");
        return;
    }
    if (c->state != A091_UP) {
        conn_kill(c, "handshake deadline");
        return;
    }
    int64_t now = a091_mono_ms();
    a091_block_check(c);
    if (c->blocked)
        c->last_rx_ms = now; /* its heartbeats wait in the socket: not missed */
    if (c->heartbeat) {
        if (now - c->last_rx_ms > 2000 * (int64_t)c->heartbeat) {
            conn_kill(c, "missed heartbeats");
            return;
        }
        if (now - c->last_tx_ms >= 1000 * (int64_t)c->heartbeat / 2)
            frame_open(c, AMQP_FRAME_HEARTBEAT, 0, 0);
    }
    a091_conn_ref(c);
    a091_pump(c); /* redeliveries released by others have no wake of their own */
    a091_flush(c);
    if (!c->dead) {
        struct timeval tv = {1, 0};
        event_add(c->ev_timer, &tv);
    }
    a091_conn_unref(c);
}

/* The host part of "host:port". */
static size_t host_len(const char *peer)
{
    const char *colon = strrchr(peer, ':');
    return colon ? (size_t)(colon - peer) : strlen(peer);
}

/* The connection limits, as for AMQP 1.0 connections: max_connections (with them),
 * max_connections_per_ip and max_handshakes_per_ip (among 0-9-1 connections; a 0-9-1
 * connection is counted as a 1.0 one until its hand-over). NULL, or why not. */
static const char *admit(mqd_server_t *s, const char *peer)
{
    const mqd_conf_t *conf = mqd_srv_conf(s);
    size_t hl = host_len(peer), all = 0, same = 0, shaking = 0;
    for (a091_conn_t *c = conns; c; c = c->next) {
        if (c->srv != s)
            continue;
        all++;
        if (host_len(c->peer) == hl && memcmp(c->peer, peer, hl) == 0) {
            same++;
            shaking += c->state < A091_UP;
        }
    }
    if (conf->max_connections && all + mqd_srv_n_conns(s) > conf->max_connections)
        return "max_connections";
    if (conf->max_connections_per_ip && same >= conf->max_connections_per_ip)
        return "max_connections_per_ip";
    if (conf->max_handshakes_per_ip && shaking >= conf->max_handshakes_per_ip)
        return "max_handshakes_per_ip";
    return NULL;
}

static bool adopt(mqd_server_t *s, int fd, const char *peer, struct ssl_st *ssl, const uint8_t *pre,
                  size_t npre)
{
    const char *limit = admit(s, peer);
    if (limit) { /* refused: core answers it as a 1.0 peer (its header, then closed) */
        MQD_NOTICE_RL("amqp091", "peer=%s refused: %s reached", peer, limit);
        return false;
    }
    a091_conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return false;
    c->chans = calloc(A091_CHANNEL_MAX + 1, sizeof *c->chans);
    if (npre > 0 && (c->in = malloc(npre > 65536 ? npre : 65536)) != NULL) {
        memcpy(c->in, pre, npre);
        c->in_len = npre;
        c->in_cap = npre > 65536 ? npre : 65536;
    }
    struct event_base *base = mqd_srv_base(s);
    c->ev_read = event_new(base, fd, EV_READ | EV_PERSIST, on_read, c);
    c->ev_write = event_new(base, fd, EV_WRITE | EV_PERSIST, on_write, c);
    c->ev_timer = evtimer_new(base, on_timer, c);
    if (!c->chans || !c->ev_read || !c->ev_write || !c->ev_timer || (npre > 0 && !c->in)) {
        if (c->ev_read)
            event_free(c->ev_read);
        if (c->ev_write)
            event_free(c->ev_write);
        if (c->ev_timer)
            event_free(c->ev_timer);
        free(c->chans);
        free(c->in);
        free(c);
        return false;
    }
    c->srv = s;
    c->fd = fd;
    c->refs = 1;
    c->frame_max = A091_FRAME_MAX;
    c->channel_max = A091_CHANNEL_MAX;
    c->opened_ms = c->last_rx_ms = c->last_tx_ms = a091_mono_ms();
    c->ssl = ssl;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    init_amqp_pool(&c->pool, 4096);
    c->next = conns;
    if (conns)
        conns->pprev = &c->next;
    c->pprev = &conns;
    conns = c;
    event_priority_set(c->ev_read, MQD_PRIO_IO);
    event_priority_set(c->ev_write, MQD_PRIO_IO);
    event_add(c->ev_read, NULL);
    if (npre > 0 || (ssl && SSL_has_pending(ssl)))
        event_active(c->ev_read, EV_READ, 1); /* what was read before the hand-over */
    struct timeval tv = {HANDSHAKE_MS / 1000, 0};
    event_add(c->ev_timer, &tv);
    MQD_DEBUG("amqp091", "open peer=%s", peer);
    return true;
}

void mqd_amqp091_close_all(mqd_server_t *s)
{
    a091_conn_t *c = conns;
    while (c) {
        a091_conn_t *next = c->next;
        if (c->srv == s) {
            if (c->state == A091_UP) {
                amqp_connection_close_t m = {
                    .reply_code = A091_CONNECTION_FORCED,
                    .reply_text = amqp_cstring_bytes("CONNECTION_FORCED - broker shutdown")};
                a091_send_method(c, 0, AMQP_CONNECTION_CLOSE_METHOD, &m);
                a091_flush(c);
            }
            conn_kill(c, "shutdown");
        }
        c = next;
    }
    a091_wake_free();
    a091_map_free();
    a091_exch_free();
}

void mqd_amqp091_core_ops(mqd_core_ops_t *ops)
{
    ops->adopt_amqp091 = adopt;
    ops->topic_wake = a091_topic_wake;
}
