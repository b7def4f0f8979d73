/* core/conn: a connection's transport — its non-blocking socket (plain, or TLS that mqd
 * runs in front of Proton), its Proton driver, its read, write and timer events, and its
 * end (deferred teardown, the graveyard the tick empties).
 *
 * server/ makes the connections (accepted ones and its own outbound ones, outconn.c) and
 * sets up their Proton transport for their role; from then on everything about their
 * I/O runs here. What a connection's input means is above core: its Proton events go to
 * amqp/ (or an outbound connection's owner), its input during SASL passes auth/'s gate,
 * its link states are amqp/'s; conn.c reaches those only through the server's
 * mqd_core_ops_t (conn_event, out_event, out_closed, conn_gone, ls_free, rx_gate,
 * rx_hold), which server/ fills in at start.
 */
#include "config.h"
#include "core/core_int.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <proton/sasl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void conn_process(mqd_conn_t *c);
static void tls_write(mqd_conn_t *c);
static void tls_shutdown(mqd_conn_t *c);

/* Frees the link states of pc's links (their contexts) through amqp/'s hook. */
static void ls_free_all(mqd_server_t *s, pn_connection_t *pc)
{
    for (pn_link_t *l = pn_link_head(pc, 0); l; l = pn_link_next(l, 0)) {
        mqd_lstate_t *ls = pn_link_get_context(l);
        if (ls) {
            pn_link_set_context(l, NULL);
            s->ops.ls_free(ls);
        }
    }
}

static void conn_free(mqd_conn_t *c)
{
    pn_connection_t *pc = c->driver.connection;
    /* link states are the links' contexts: free them before Proton frees the links (an
     * outbound connection's link contexts are its owner's) */
    if (pc && !c->client)
        ls_free_all(c->srv, pc);
    mqd_budget_release(c);
    pn_connection_driver_destroy(&c->driver);
    SSL_free(c->ssl); /* drops its reference on the SSL_CTX it started with */
    mqd_fpeek_free(c->peek);
    free(c->rbuf);
    free(c);
}

/* Why an outbound connection ended. A refused login shows in the SASL outcome: Proton
 * names it (amqp:unauthorized-access) only when it writes next, and the peer's EOF right
 * after the outcome often comes first ("connection aborted"). */
static const char *client_close_reason(mqd_conn_t *c, pn_condition_t *why)
{
    static char buf[200];
    pn_sasl_outcome_t so = pn_sasl_outcome(pn_sasl(c->driver.transport));
    if (so != PN_SASL_NONE && so != PN_SASL_OK)
        snprintf(buf, sizeof buf, "amqp:unauthorized-access: SASL outcome %d", (int)so);
    else if (pn_condition_is_set(why))
        snprintf(buf, sizeof buf, "%s: %s", pn_condition_get_name(why),
                 pn_condition_get_description(why) ? pn_condition_get_description(why) : "");
    else
        snprintf(buf, sizeof buf, "closed");
    return buf;
}

/* Deferred teardown (STYLE rule 11): never free a connection inside its own handler. */
static void conn_close_deferred(mqd_conn_t *c)
{
    if (c->closed)
        return;
    c->closed = true;
    mqd_server_t *s = c->srv;
    /* why it ended: our error (transport), the peer's close condition, or a clean close */
    pn_condition_t *why = pn_transport_condition(c->driver.transport);
    if (!pn_condition_is_set(why) && c->driver.connection)
        why = pn_connection_remote_condition(c->driver.connection);
    MQD_INFO("conn", "close peer=%s user=%s reason=%s", c->peer, c->user[0] ? c->user : "-",
             pn_condition_is_set(why) ? pn_condition_get_name(why) : "closed");
    event_free(c->ev_read);
    event_free(c->ev_write);
    event_free(c->ev_timer);
    c->ev_read = c->ev_write = c->ev_timer = NULL;
    if (c->ssl)
        tls_shutdown(c);
    mqd_budget_close_fd(c); /* closes c->fd (lingering after a budget close) */
    c->fd = -1;
    mqd_dlist_del(&c->node);
    mqd_dlist_del(&c->dirty_node);
    if (c->client) {
        mqd_outconn_t *oc = c->out;
        c->out = NULL;
        if (oc)
            s->ops.out_closed(oc, client_close_reason(c, why));
        mqd_dlist_push(&s->graveyard, &c->dirty_node);
        mqd_server_tick_soon(s);
        return;
    }
    s->n_conns--;
    if (s->stopping)
        s->ops.conn_gone(s);
    /* release consumer deliveries and detach link states while the engine is alive */
    ls_free_all(s, c->driver.connection);
    /* the last reference is dropped by the next tick, outside any handler of c */
    mqd_dlist_push(&s->graveyard, &c->dirty_node);
    mqd_server_tick_soon(s);
}

static void conn_write(mqd_conn_t *c)
{
    c->out_gen++; /* Proton writes its flow frames now: see amqp/credit.c */
    if (c->ssl) {
        tls_write(c);
        return;
    }
    for (;;) {
        pn_bytes_t wb = pn_connection_driver_write_buffer(&c->driver);
        if (wb.size == 0)
            break;
        ssize_t n = send(c->fd, wb.start, wb.size, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (!c->want_write) {
                    c->want_write = true;
                    event_add(c->ev_write, NULL);
                }
                return;
            }
            if (errno == EINTR)
                continue;
            pn_connection_driver_write_close(&c->driver);
            return;
        }
        pn_connection_driver_write_done(&c->driver, (size_t)n);
        c->bytes_out += (uint64_t)n;
    }
    if (c->want_write) {
        c->want_write = false;
        event_del(c->ev_write);
    }
}

size_t mqd_conn_write(mqd_conn_t *c)
{
    conn_write(c);
    return pn_connection_driver_write_buffer(&c->driver).size;
}

static void conn_schedule_timer(mqd_conn_t *c)
{
    pn_transport_t *t = c->driver.transport;
    int64_t now = mqd_now_ms();
    int64_t next = pn_transport_tick(t, now);
    int64_t linger = 0;
    if (c->budget.closing_ms) { /* closed by its budget: end the linger on time */
        mqd_budget_linger_over(c, &linger);
        if (next <= 0 || next > now + linger)
            next = now + linger;
    }
    if (next > 0) {
        int64_t d = next - now;
        if (d < 1)
            d = 1;
        struct timeval tv = {.tv_sec = d / 1000, .tv_usec = (d % 1000) * 1000};
        event_add(c->ev_timer, &tv);
    }
}

static void conn_handle_events(mqd_conn_t *c)
{
    pn_event_t *e;
    while ((e = pn_connection_driver_next_event(&c->driver)) != NULL) {
        if (c->client) {
            if (c->out)
                c->srv->ops.out_event(c->out, e);
        } else if (mqd_budget_event(c, e))
            c->srv->ops.conn_event(c, e);
    }
}

/* Processes all Proton events, writes output, notices the end of the connection. */
static void conn_process(mqd_conn_t *c)
{
    if (c->closed)
        return;
    for (int round = 0; round < 8; round++) {
        conn_handle_events(c);
        mqd_budget_output(c, mqd_conn_write(c));
        if (pn_connection_driver_read_closed(&c->driver) &&
            !pn_connection_driver_write_closed(&c->driver) &&
            pn_connection_driver_write_buffer(&c->driver).size == 0) {
            /* the peer sent EOF and our last frames are out: end the connection */
            pn_connection_driver_write_close(&c->driver);
        }
        if (!pn_connection_driver_has_event(&c->driver))
            break;
    }
    if (pn_connection_driver_read_closed(&c->driver) && c->ev_read && !mqd_budget_draining(c))
        event_del(c->ev_read); /* a socket at EOF stays readable: stop polling it */
    if (mqd_budget_linger_over(c, NULL))
        pn_connection_driver_write_close(&c->driver); /* its close frame had its time */
    if (pn_connection_driver_finished(&c->driver)) {
        conn_close_deferred(c);
        return;
    }
    conn_schedule_timer(c);
}

/* Proton's input buffer is 16 KiB, so reading straight into it costs a recv per ~15
 * messages of 1 KiB. One recv into a large stack buffer, then copies into Proton, costs
 * a syscall per 64 KiB; the copy is cheap next to the syscall. */
#define RX_CHUNK (64u << 10)
#define RX_ROUNDS 4 /* at most 256 KiB per readable event: fair to other connections */

/* Input the frame peek refused (framepeek.h): Proton never has the whole refused frame
 * (at most a prefix of it), so it cannot reach one of its asserts on it. The events of
 * the frames before it are handled first, so that a remote open among them cannot undo
 * the close. The close carries the peek's condition (the connection's local one, since
 * Proton's own error path sends nothing while part of a frame is still in its input
 * buffer). */
static void rx_refuse(mqd_conn_t *c)
{
    const char *why = NULL;
    const char *cond = c->peek ? mqd_fpeek_error(c->peek, &why) : "amqp:internal-error";
    if (!cond)
        return;
    if (!pn_connection_driver_read_closed(&c->driver)) {
        MQD_NOTICE_RL("conn", "peer=%s refused: %s: %s", c->peer, cond,
                      why ? why : "no frame peek");
        conn_handle_events(c);
        pn_connection_t *pc = c->driver.connection;
        pn_condition_t *tc = pn_transport_condition(c->driver.transport);
        if (!pn_condition_is_set(tc))
            pn_condition_format(tc, cond, "%s", why ? why : "");
        pn_condition_format(pn_connection_condition(pc), cond, "%s", why ? why : "");
        pn_connection_close(pc);
        pn_connection_driver_read_close(&c->driver);
    }
}

static void rx_feed(mqd_conn_t *c, const char *p, size_t n)
{
    while (n > 0) {
        pn_rwbytes_t rb = pn_connection_driver_read_buffer(&c->driver);
        if (rb.size == 0)
            return; /* input closed after an error: the rest cannot matter */
        size_t k = n < rb.size ? n : rb.size;
        /* during SASL, auth may hold what follows a login under check */
        if ((k = c->srv->ops.rx_gate(c, (const uint8_t *)p, k)) == 0) {
            c->srv->ops.rx_hold(c, (const uint8_t *)p, n);
            return;
        }
        size_t ok = c->peek ? mqd_fpeek_feed(c->peek, (const uint8_t *)p, k) : 0;
        if (ok > 0) {
            memcpy(rb.start, p, ok);
            pn_connection_driver_read_done(&c->driver, ok);
            c->bytes_in += ok;
        }
        if (ok < k) {
            rx_refuse(c);
            return;
        }
        p += k;
        n -= k;
    }
}

/* ---- protocol detection: the first 8 bytes of an accepted plain connection ----
 * An AMQP 0-9-1 protocol header ("AMQP" 0 0 9 1) hands the socket to amqp091/ (the
 * adopt_amqp091 hook) before Proton has seen a byte; c then ends at once, without a
 * frame written. Only a header that arrives whole in the first segment is looked at
 * (clients write it in one send): a shorter first read goes to Proton as before, so a
 * peer that sends a prefix and waits cannot make the loop spin. On a TLS listener the
 * first plaintext chunk is looked at the same way and the SSL goes along (amqp091/ runs
 * it from then on). True when the socket is amqp091/'s now. */
static const uint8_t hdr_091[8] = {'A', 'M', 'Q', 'P', 0, 0, 9, 1};

/* Hands c's socket (and its SSL, on a TLS listener, with the plaintext already read from
 * it: pre[0..n)) to amqp091/ and ends c; false (nothing changed) when it is not taken. */
static bool handover_091(mqd_conn_t *c, const uint8_t *pre, size_t n)
{
    int fd = dup(c->fd);
    if (fd < 0)
        return false;
    if (c->ssl && SSL_set_fd(c->ssl, fd) != 1) { /* the SSL follows the new descriptor */
        ERR_clear_error();
        close(fd);
        return false;
    }
    if (!c->srv->ops.adopt_amqp091(c->srv, fd, c->peer, c->ssl, pre, n)) {
        if (c->ssl && SSL_set_fd(c->ssl, c->fd) != 1)
            ERR_clear_error();
        close(fd);
        return false;
    }
    c->ssl = NULL;          /* amqp091/'s now: no close_notify from here */
    conn_close_deferred(c); /* closes its descriptor; the socket lives on in fd */
    return true;
}

static bool rx_detect_091(mqd_conn_t *c)
{
    c->proto_known = true;
    if (c->client || c->ssl || !c->srv->ops.adopt_amqp091)
        return false;
    uint8_t p[sizeof hdr_091];
    if (recv(c->fd, p, sizeof p, MSG_PEEK) != (ssize_t)sizeof p ||
        memcmp(p, hdr_091, sizeof p) != 0)
        return false;
    return handover_091(c, NULL, 0);
}

/* The same on a TLS listener, on the first plaintext the handshake gave. */
static bool tls_detect_091(mqd_conn_t *c, const char *p, size_t n)
{
    c->proto_known = true;
    if (c->client || !c->srv->ops.adopt_amqp091 || n < sizeof hdr_091 ||
        memcmp(p, hdr_091, sizeof hdr_091) != 0)
        return false;
    return handover_091(c, (const uint8_t *)p, n);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    mqd_conn_t *c = arg;
    char buf[RX_CHUNK];
    if (mqd_budget_draining(c))
        return mqd_budget_drain(c); /* closed by its budget: input is dropped */
    if (!c->proto_known && rx_detect_091(c))
        return;
    for (int i = 0; i < RX_ROUNDS && !pn_connection_driver_read_closed(&c->driver); i++) {
        /* A group commit is done: take no more input now, so that its settlements and
         * deliveries go out after this chunk (~60 messages of 1 KiB) instead of after up
         * to 256 KiB of decoding. At 100k msgs/s the flusher's wake waited for the loop
         * p90 0.5-4 ms, p99 4-8 ms before, p90 < 0.25 ms, p99 0.5-1 ms now. The rest
         * stays readable for the next turn. (One chunk per readable event, always, did
         * almost as well for latency but cost ~25 % of the CPU-bound send rate.) */
        if (i > 0 && __atomic_load_n(&c->srv->wake_pending, __ATOMIC_ACQUIRE))
            break;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n > 0) {
            rx_feed(c, buf, (size_t)n);
            conn_handle_events(c); /* this chunk's appends, before the wake is looked at */
            if ((size_t)n < sizeof buf)
                break;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n < 0 && errno == EINTR)
            continue;
        pn_connection_driver_read_close(&c->driver);
        break;
    }
    conn_process(c);
    /* hand the appends to the flusher now: when it is idle the sync starts at once
     * instead of after the rest of this loop iteration */
    mqd_store_commit(c->srv->store);
    mqd_server_tick_soon(c->srv);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    mqd_conn_t *c = arg;
    conn_write(c);
    conn_process(c);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    mqd_conn_t *c = arg;
    conn_process(c);
}

/* ---- TLS listeners: mqd runs TLS (OpenSSL) in front of Proton ----
 *
 * Proton sees a plain transport: plaintext reaches it through rx_feed, as on a plain
 * listener, and its output leaves through SSL_write. The SSL reads and writes the
 * non-blocking socket itself (SSL_set_fd, accept state): no memory BIOs, so the
 * ciphertext is not copied through buffers of ours and an idle TLS connection holds no
 * more than the SSL (whose record buffers are released while idle). A plain listener's
 * connection has no SSL: it runs on_read and conn_write's send loop, as before. */

#define TLS_HDR_DONE 9 /* c->tls_hdr: past the AMQP TLS header (or there was none) */

enum { RX_MORE, RX_BLOCKED, RX_EOF, RX_FAILED };

/* Registers the write event while SSL_write (want_write) or SSL_read (tls_rd_wants_wr)
 * waits for a writable socket. */
static void tls_poll_write(mqd_conn_t *c)
{
    if (c->ev_write == NULL)
        return;
    bool want = c->want_write || c->tls_rd_wants_wr;
    bool on = event_pending(c->ev_write, EV_WRITE, NULL) != 0;
    if (want && !on)
        event_add(c->ev_write, NULL);
    else if (!want && on)
        event_del(c->ev_write);
}

/* A failed handshake or a bad record: the peer cannot be sent an AMQP close, so the
 * condition is logged (here and by conn_close_deferred) and the connection closed. */
static void tls_fail(mqd_conn_t *c, const char *when, int err)
{
    char why[256];
    unsigned long e = ERR_peek_last_error();
    if (e != 0)
        ERR_error_string_n(e, why, sizeof why);
    else
        snprintf(why, sizeof why, "SSL error %d", err);
    ERR_clear_error();
    c->tls_dead = true;
    MQD_NOTICE_RL("conn", "TLS %s failed peer=%s: %s", when, c->peer, why);
    pn_condition_t *cond = pn_transport_condition(c->driver.transport);
    if (!pn_condition_is_set(cond))
        pn_condition_format(cond, "amqp:connection:framing-error", "TLS %s: %s", when, why);
    pn_connection_driver_close(&c->driver);
}

/* A TLS listener's connection may start with the AMQP TLS protocol header (AMQP 2 1 0 0),
 * and its client may wait for the server's before sending the ClientHello (AMQP 1.0 part
 * 5.2.1): mqd answers with the same header. Only the header's bytes are taken off the
 * socket (looked at with MSG_PEEK first); what follows is the SSL's. True once the
 * handshake can run: the header is answered, or the peer began with something else (a
 * ClientHello, or what the handshake will refuse). */
static bool tls_header_done(mqd_conn_t *c)
{
    static const char hdr[8] = {'A', 'M', 'Q', 'P', 2, 1, 0, 0};
    char p[sizeof hdr];
    ssize_t n = recv(c->fd, p, sizeof hdr - c->tls_hdr, MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return false;
    if (n <= 0) {
        pn_connection_driver_read_close(&c->driver);
        return false;
    }
    size_t k = 0;
    while (k < (size_t)n && p[k] == hdr[c->tls_hdr + k])
        k++;
    if (k == 0 && c->tls_hdr == 0) {
        c->tls_hdr = TLS_HDR_DONE;
        return true;
    }
    if (k < (size_t)n) {
        /* another AMQP header (plain or SASL): name the one spoken here, then close */
        if (c->tls_hdr + k >= 4 && send(c->fd, hdr, sizeof hdr, MSG_NOSIGNAL) < 0)
            MQD_DEBUG("conn", "%s: header answer: %s", c->peer, strerror(errno));
        MQD_NOTICE_RL("conn", "peer=%s on a TLS listener sent neither TLS nor the AMQP TLS header",
                      c->peer);
        pn_condition_format(pn_transport_condition(c->driver.transport),
                            "amqp:connection:framing-error", "not TLS");
        pn_connection_driver_close(&c->driver);
        return false;
    }
    if (recv(c->fd, p, (size_t)n, 0) != n) { /* takes what was peeked: it is there */
        pn_connection_driver_read_close(&c->driver);
        return false;
    }
    c->tls_hdr += (uint8_t)n;
    if (c->tls_hdr < sizeof hdr)
        return false;
    c->tls_hdr = TLS_HDR_DONE;
    /* the first bytes mqd writes: the socket's empty buffer takes them */
    if (send(c->fd, hdr, sizeof hdr, MSG_NOSIGNAL) != (ssize_t)sizeof hdr)
        MQD_WARN_RL("conn", "%s: could not answer the AMQP TLS header: %s", c->peer,
                    strerror(errno));
    return true;
}

/* What an SSL_read that returned no data means. `up`: the handshake was over before that
 * read (a fatal error puts the SSL back "in init"). */
static int tls_rx_status(mqd_conn_t *c, int err, bool up)
{
    if (err == SSL_ERROR_WANT_READ)
        return RX_BLOCKED;
    if (err == SSL_ERROR_WANT_WRITE) { /* a handshake flight or a key update did not fit */
        c->tls_rd_wants_wr = true;
        tls_poll_write(c);
        return RX_BLOCKED;
    }
    if (err == SSL_ERROR_ZERO_RETURN) /* close_notify: the read side is closed */
        return RX_EOF;
    if (err == SSL_ERROR_SYSCALL) { /* EOF or a reset, as on a plain socket */
        c->tls_dead = true;
        ERR_clear_error();
        return RX_EOF;
    }
    tls_fail(c, up ? "record" : "handshake", err);
    return RX_FAILED;
}

/* Decrypts into buf[cap] until it is full (RX_MORE) or the SSL stops; *n: bytes read,
 * to be fed before the status is acted on. Runs the handshake on the way. */
static int tls_recv(mqd_conn_t *c, char *buf, size_t cap, size_t *n)
{
    size_t got = 0;
    int st = RX_MORE;
    while (got < cap && st == RX_MORE) {
        bool up = SSL_is_init_finished(c->ssl);
        ERR_clear_error();
        int k = SSL_read(c->ssl, buf + got, (int)(cap - got));
        if (k > 0)
            got += (size_t)k;
        else
            st = tls_rx_status(c, SSL_get_error(c->ssl, k), up);
    }
    *n = got;
    return st;
}

/* on_read for TLS connections: the same rounds, plaintext from SSL_read. */
static void on_read_tls(evutil_socket_t fd, short what, void *arg)
{
    mqd_conn_t *c = arg;
    char buf[RX_CHUNK];
    if (mqd_budget_draining(c))
        return mqd_budget_drain(c); /* closed by its budget: input is dropped */
    if (c->tls_hdr == TLS_HDR_DONE || tls_header_done(c)) {
        int st = RX_MORE;
        for (int i = 0;
             i < RX_ROUNDS && st == RX_MORE && !pn_connection_driver_read_closed(&c->driver); i++) {
            if (i > 0 && __atomic_load_n(&c->srv->wake_pending, __ATOMIC_ACQUIRE))
                break; /* as in on_read */
            size_t n;
            st = tls_recv(c, buf, sizeof buf, &n);
            if (n > 0 && !c->proto_known && tls_detect_091(c, buf, n))
                return; /* a 0-9-1 client: its connection is amqp091/'s now */
            if (n > 0) {
                rx_feed(c, buf, n);
                conn_handle_events(c);
            }
        }
        if (st == RX_EOF)
            pn_connection_driver_read_close(&c->driver);
        /* records OpenSSL read ahead do not make the socket readable: come back for them */
        if (st == RX_MORE && !pn_connection_driver_read_closed(&c->driver) &&
            SSL_has_pending(c->ssl))
            event_active(c->ev_read, EV_READ, 1);
    }
    conn_process(c);
    mqd_store_commit(c->srv->store);
    mqd_server_tick_soon(c->srv);
}

static void on_write_tls(evutil_socket_t fd, short what, void *arg)
{
    mqd_conn_t *c = arg;
    if (c->tls_rd_wants_wr) {
        c->tls_rd_wants_wr = false;
        on_read_tls(fd, what, c); /* resumes the handshake or the read, then writes */
        return;
    }
    conn_write(c);
    conn_process(c);
}

/* conn_write for TLS connections: Proton's output through SSL_write. */
static void tls_write(mqd_conn_t *c)
{
    c->want_write = false;
    if (!SSL_is_init_finished(c->ssl)) {
        /* nothing can go out before the handshake; a server transport has nothing to
         * say before the peer's first plaintext anyway, unless it is closing */
        if (pn_connection_driver_read_closed(&c->driver))
            pn_connection_driver_write_close(&c->driver);
        tls_poll_write(c);
        return;
    }
    for (;;) {
        pn_bytes_t wb = pn_connection_driver_write_buffer(&c->driver);
        if (wb.size == 0)
            break;
        ERR_clear_error();
        int n = SSL_write(c->ssl, wb.start, wb.size > INT_MAX ? INT_MAX : (int)wb.size);
        if (n > 0) {
            pn_connection_driver_write_done(&c->driver, (size_t)n);
            c->bytes_out += (uint64_t)n;
            continue;
        }
        int err = SSL_get_error(c->ssl, n);
        if (err == SSL_ERROR_WANT_WRITE)
            c->want_write = true;
        else if (err == SSL_ERROR_SYSCALL) {
            c->tls_dead = true;
            ERR_clear_error();
            pn_connection_driver_write_close(&c->driver);
        } else if (err != SSL_ERROR_WANT_READ) /* that one: the next read writes again */
            tls_fail(c, "write", err);
        break;
    }
    tls_poll_write(c);
}

/* Best effort: one close_notify, never waited for; not after a fatal error. */
static void tls_shutdown(mqd_conn_t *c)
{
    if (c->tls_dead || !SSL_is_init_finished(c->ssl))
        return;
    ERR_clear_error();
    if (SSL_shutdown(c->ssl) < 0)
        MQD_DEBUG("conn", "%s: no close_notify sent", c->peer);
    ERR_clear_error();
}

/* The part of a new connection every role shares. */
mqd_conn_t *mqd_conn_new(mqd_server_t *s, int fd, const char *peer)
{
    mqd_conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return NULL;
    }
    c->srv = s;
    c->fd = fd;
    c->refs = 1;
    c->serial = ++s->conn_serial;
    c->opened_ms = mqd_now_ms();
    mqd_dlist_init(&c->node);
    mqd_dlist_init(&c->dirty_node);
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* fails on a socketpair */
    evutil_make_socket_nonblocking(fd);
    /* rx_feed gets plaintext on every connection (mqd runs TLS): the peek reads
     * message-formats and guards Proton (framepeek.h), so no connection runs without it;
     * on an outbound one it guards Proton from the peer we connected to */
    if (!(c->peek = mqd_fpeek_new())) {
        close(fd);
        free(c);
        return NULL;
    }
    return c;
}

/* A connection whose transport setup failed (rc) never started: nothing refers to it. */
int mqd_conn_discard(mqd_conn_t *c, int rc)
{
    close(c->fd);
    pn_connection_driver_destroy(&c->driver);
    SSL_free(c->ssl);
    mqd_fpeek_free(c->peek);
    free(c);
    return rc;
}

/* Its events, and the first round of its protocol work. */
static void conn_start(mqd_conn_t *c)
{
    mqd_server_t *s = c->srv;
    mqd_fpeek_set_max_frame(c->peek, pn_transport_get_max_frame(c->driver.transport));
    /* a TLS connection (c->ssl) has its own I/O */
    c->ev_read = event_new(s->base, c->fd, EV_READ | EV_PERSIST, c->ssl ? on_read_tls : on_read, c);
    c->ev_write =
        event_new(s->base, c->fd, EV_WRITE | EV_PERSIST, c->ssl ? on_write_tls : on_write, c);
    c->ev_timer = evtimer_new(s->base, on_timer, c);
    event_priority_set(c->ev_read, MQD_PRIO_IO);
    event_priority_set(c->ev_write, MQD_PRIO_IO);
    event_add(c->ev_read, NULL);
    conn_process(c);
}

mqd_conn_t *mqd_conn_new_out(mqd_server_t *s, int fd, const char *peer, mqd_outconn_t *oc, SSL *ssl,
                             const char *user)
{
    mqd_conn_t *c = mqd_conn_new(s, fd, peer);
    if (!c) {
        SSL_free(ssl);
        return NULL;
    }
    c->client = true;
    c->out = oc;
    c->listener = SIZE_MAX;
    c->ssl = ssl;
    if (ssl) {
        c->tls_hdr = TLS_HDR_DONE; /* a client speaks TLS at once */
        if (SSL_set_fd(ssl, fd) != 1) {
            ERR_clear_error();
            mqd_conn_discard(c, MQD_EIO);
            return NULL;
        }
        SSL_set_connect_state(ssl);
    }
    snprintf(c->user, sizeof c->user, "%s", user);
    return c;
}

void mqd_conn_accepted(mqd_conn_t *c)
{
    mqd_server_t *s = c->srv;
    mqd_dlist_push(&s->conns, &c->node);
    s->n_conns++;
    s->conns_accepted++;
    MQD_DEBUG("conn", "open peer=%s", c->peer);
    conn_start(c);
}

mqd_conn_t *mqd_conn_start_out(mqd_conn_t *c)
{
    MQD_DEBUG("conn", "outbound open peer=%s", c->peer);
    conn_start(c);
    if (c->ssl && !c->closed)
        event_active(c->ev_read, EV_READ, 1); /* SSL_read sends the ClientHello */
    return c->closed ? NULL : c;
}

void mqd_conn_drop_out(mqd_conn_t *c, bool now)
{
    c->out = NULL;
    if (c->closed)
        return;
    if (now) { /* mqd_server_free: no handler of c runs; the close frame, best effort */
        pn_connection_close(c->driver.connection);
        pn_connection_driver_write_close(&c->driver);
        conn_write(c);
        conn_close_deferred(c);
        return;
    }
    /* maybe inside one of c's own handlers: the tick ends it (STYLE rule 11) */
    pn_connection_driver_close(&c->driver);
    mqd_conn_mark_dirty(c);
}

void mqd_conns_flush(mqd_server_t *s)
{
    while (!mqd_dlist_empty(&s->dirty)) {
        mqd_dlist_t *n = s->dirty.next;
        mqd_dlist_del(n);
        conn_process(MQD_CONTAINER(n, mqd_conn_t, dirty_node));
    }
}

void mqd_conns_reap(mqd_server_t *s)
{
    while (!mqd_dlist_empty(&s->graveyard)) {
        mqd_dlist_t *n = s->graveyard.next;
        mqd_dlist_del(n);
        mqd_conn_unref(MQD_CONTAINER(n, mqd_conn_t, dirty_node));
    }
}

void mqd_conns_close(mqd_server_t *s)
{
    while (!mqd_dlist_empty(&s->conns)) {
        mqd_conn_t *c = MQD_CONTAINER(s->conns.next, mqd_conn_t, node);
        conn_close_deferred(c);
    }
}

void mqd_conn_unref(mqd_conn_t *c)
{
    if (--c->refs == 0)
        conn_free(c);
}

void mqd_conn_rx_feed(mqd_conn_t *c, const char *p, size_t n)
{
    rx_feed(c, p, n);
}
