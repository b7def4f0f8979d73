/* The event loop, listeners and the connection lifecycle.
 *
 * Each connection is a non-blocking socket driven through pn_connection_driver. Protocol
 * work on one connection often makes work for another (a send becomes stable, a consumer
 * gets data), so connections touched outside their own I/O callback are put on a dirty
 * list; one "tick" event, run after all ready I/O of the loop iteration,
 * processes their Proton events, writes their output, and hands the iteration's appends
 * to the store (group commit: one write + one fdatasync per partition per batch).
 */
#include "config.h"
#include "server/server_int.h"

#include <errno.h>
#include <event2/thread.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <proton/sasl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

/* Three levels, so that I/O shares libevent's default (middle) priority with the
 * listeners' accept events. The tick has that priority too: libevent runs a lower
 * priority only in an iteration with no higher one active, so under steady input (a
 * producer that never pauses) a low-priority tick starved, and with it settlements and
 * deliveries. At equal priority it still runs after the iteration's ready I/O: epoll
 * activates those events before any callback runs, and the callback that queues the
 * tick puts it behind them. */
#define PRIO_IO 1
#define PRIO_TICK PRIO_IO

static void conn_process(mqd_conn_t *c);
static void tls_write(mqd_conn_t *c);
static void tls_shutdown(mqd_conn_t *c);

/* A zero timeout fires after the loop's next poll: work deferred to it cannot hold up
 * I/O, as re-activating the tick from inside the tick would. */
static void on_later(evutil_socket_t fd, short what, void *arg)
{
    mqd_server_run_later(arg);
}

static void conn_free(mqd_conn_t *c)
{
    pn_connection_t *pc = c->driver.connection;
    /* link states are the links' contexts: free them before Proton frees the links (an
     * outbound connection's link contexts are its owner's) */
    if (pc && !c->client) {
        for (pn_link_t *l = pn_link_head(pc, 0); l; l = pn_link_next(l, 0)) {
            mqd_lstate_t *ls = pn_link_get_context(l);
            if (ls) {
                pn_link_set_context(l, NULL);
                mqd_lstate_free(ls);
            }
        }
    }
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
            mqd_outconn_closed(oc, client_close_reason(c, why));
        mqd_dlist_push(&s->graveyard, &c->dirty_node);
        mqd_server_tick_soon(s);
        return;
    }
    s->n_conns--;
    if (s->stopping)
        mqd_shutdown_conn_gone(s);
    /* release consumer deliveries and detach link states while the engine is alive */
    pn_connection_t *pc = c->driver.connection;
    for (pn_link_t *l = pn_link_head(pc, 0); l; l = pn_link_next(l, 0)) {
        mqd_lstate_t *ls = pn_link_get_context(l);
        if (ls) {
            pn_link_set_context(l, NULL);
            mqd_lstate_free(ls);
        }
    }
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

static size_t conn_write_rest(mqd_conn_t *c)
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
                mqd_outconn_event(c->out, e);
        } else if (mqd_budget_event(c, e))
            mqd_amqp_handle(c, e);
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
 * (at most a prefix of it), so it cannot reach one of its asserts on it. The events of the frames before it are handled
 * first, so that a remote open among them cannot undo the close. The close carries the
 * peek's condition (the connection's local one, since Proton's own error path sends
 * nothing while part of a frame is still in its input buffer). */
static void rx_refuse(mqd_conn_t *c)
{
    const char *why = NULL;
    const char *cond = c->peek ? mqd_fpeek_error(c->peek, &why) : "amqp:internal-error";
    if (!cond)
        return;
    if (!pn_connection_driver_read_closed(&c->driver)) {
        MQD_NOTICE("conn", "peer=%s refused: %s: %s", c->peer, cond, why ? why : "no frame peek");
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
        if ((k = mqd_auth_rx_gate(c, (const uint8_t *)p, k)) == 0) {
            mqd_auth_rx_hold(c, (const uint8_t *)p, n);
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

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    mqd_conn_t *c = arg;
    char buf[RX_CHUNK];
    if (mqd_budget_draining(c))
        return mqd_budget_drain(c); /* closed by its budget: input is dropped */
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
    MQD_NOTICE("conn", "TLS %s failed peer=%s: %s", when, c->peer, why);
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
        MQD_NOTICE("conn", "peer=%s on a TLS listener sent neither TLS nor the AMQP TLS header",
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
        MQD_WARN("conn", "%s: could not answer the AMQP TLS header: %s", c->peer, strerror(errno));
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

static int conn_setup_transport(mqd_conn_t *c)
{
    mqd_server_t *s = c->srv;
    if (pn_connection_driver_init(&c->driver, NULL, NULL) != 0)
        return MQD_ENOMEM;
    pn_transport_t *t = c->driver.transport;
    pn_transport_set_server(t);
    pn_transport_set_max_frame(t, s->conf->max_frame_size);
    pn_transport_set_idle_timeout(t, s->conf->idle_timeout_ms);
    pn_transport_set_channel_max(t, (uint16_t)(s->conf->max_sessions > 0 ? s->conf->max_sessions - 1 : 0));
    /* SASL, TLS on amqps:// listeners, and the handshake timer */
    int rc = mqd_auth_conn_setup(c, c->listener);
    if (rc != 0)
        return rc;
    pn_connection_set_context(c->driver.connection, c);
    /* server-side containers identify themselves */
    pn_connection_set_container(c->driver.connection, "mqd");
    return pn_connection_driver_bind(&c->driver) == 0 ? 0 : MQD_EINVAL;
}

/* The part of a new connection every role shares; NULL (fd closed) when out of memory. */
static mqd_conn_t *conn_alloc(mqd_server_t *s, int fd, const char *peer)
{
    mqd_conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return NULL;
    }
    c->srv = s;
    c->fd = fd;
    c->refs = 1;
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
static int conn_discard(mqd_conn_t *c, int rc)
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
    event_priority_set(c->ev_read, PRIO_IO);
    event_priority_set(c->ev_write, PRIO_IO);
    event_add(c->ev_read, NULL);
    conn_process(c);
}

int mqd_server_adopt(mqd_server_t *s, int fd, const char *peer, size_t listener)
{
    mqd_conn_t *c = conn_alloc(s, fd, peer);
    if (!c)
        return MQD_ENOMEM;
    c->listener = listener;
    int rc = conn_setup_transport(c);
    if (rc != 0)
        return conn_discard(c, rc);
    mqd_dlist_push(&s->conns, &c->node);
    s->n_conns++;
    s->conns_accepted++;
    MQD_DEBUG("conn", "open peer=%s", c->peer);
    conn_start(c);
    return 0;
}

/* A client transport: SASL PLAIN or ANONYMOUS (Proton's own client side; mqd's SASL
 * plugin is the server's), the open sent at once. Proton cannot see the TLS mqd runs in
 * front of it, so it would refuse PLAIN as insecure: allowed when TLS is on, or when the
 * owner said so for a plain socket (plain_over_tcp, checked by mqd_outconn_new). */
static int conn_setup_client(mqd_conn_t *c, const mqd_outconn_opts_t *id)
{
    mqd_server_t *s = c->srv;
    if (pn_connection_driver_init(&c->driver, NULL, NULL) != 0)
        return MQD_ENOMEM;
    pn_transport_t *t = c->driver.transport;
    pn_transport_set_max_frame(t, s->conf->max_frame_size);
    pn_transport_set_idle_timeout(t, s->conf->idle_timeout_ms);
    pn_transport_set_channel_max(t, (uint16_t)(s->conf->max_sessions > 0 ? s->conf->max_sessions - 1 : 0));
    pn_sasl_t *sasl = pn_sasl(t);
    pn_sasl_allowed_mechs(sasl, id->user ? "PLAIN" : "ANONYMOUS");
    pn_sasl_set_allow_insecure_mechs(sasl, c->ssl != NULL || id->plain_over_tcp);
    pn_connection_t *pc = c->driver.connection;
    pn_connection_set_context(pc, c);
    pn_connection_set_container(pc, id->container);
    pn_connection_set_hostname(pc, id->hostname);
    if (id->user) {
        pn_connection_set_user(pc, id->user);
        pn_connection_set_password(pc, id->password ? id->password : "");
    }
    if (pn_connection_driver_bind(&c->driver) != 0)
        return MQD_EINVAL;
    pn_connection_open(pc);
    return 0;
}

mqd_conn_t *mqd_server_adopt_out(mqd_server_t *s, int fd, const char *peer, mqd_outconn_t *oc,
                                 SSL *ssl, const mqd_outconn_opts_t *id)
{
    mqd_conn_t *c = conn_alloc(s, fd, peer);
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
            conn_discard(c, MQD_EIO);
            return NULL;
        }
        SSL_set_connect_state(ssl);
    }
    int rc = conn_setup_client(c, id);
    if (rc != 0) {
        conn_discard(c, rc);
        return NULL;
    }
    snprintf(c->user, sizeof c->user, "%s", id->user ? id->user : "anonymous");
    MQD_DEBUG("conn", "outbound open peer=%s", c->peer);
    conn_start(c);
    if (ssl && !c->closed)
        event_active(c->ev_read, EV_READ, 1); /* SSL_read sends the ClientHello */
    return c->closed ? NULL : c;
}

void mqd_server_drop_out(mqd_conn_t *c, bool now)
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

struct event_base *mqd_server_base(mqd_server_t *s)
{
    return s->base;
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
    mqd_listener_t *li = arg;
    mqd_server_t *s = li->srv;
    if (s->stopping || s->n_conns >= s->conf->max_connections || mqd_budget_broker_full(s)) {
        s->conns_refused++;
        MQD_WARN("conn", "refused: %s", s->stopping ? "stopping"
                 : s->n_conns >= s->conf->max_connections ? "max_connections reached"
                                                          : "max_memory reached");
        close(fd);
        return;
    }
    if (!mqd_accept_admit(s, fd)) {
        s->conns_refused++;
        close(fd);
        return;
    }
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, host, sizeof host);
        port = ntohs(((struct sockaddr_in *)sa)->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, host, sizeof host);
        port = ntohs(((struct sockaddr_in6 *)sa)->sin6_port);
    }
    if (!mqd_auth_admit_host(s, host)) {
        s->conns_refused++;
        close(fd);
        return;
    }
    char peer[64];
    snprintf(peer, sizeof peer, "%s:%d", host, port);
    mqd_server_adopt(s, fd, peer, li->index);
}

/* End of a loop iteration: dispatch consumers, flush touched connections, commit. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    mqd_server_t *s = arg;
    s->tick_queued = false;
    mqd_txns_decide(s); /* one SQLite commit for every transaction ready this iteration */
    mqd_store_commit(s->store);
    mqd_server_run_dispatch(s);
    while (!mqd_dlist_empty(&s->dirty)) {
        mqd_dlist_t *n = s->dirty.next;
        mqd_dlist_del(n);
        conn_process(MQD_CONTAINER(n, mqd_conn_t, dirty_node));
    }
    mqd_store_commit(s->store);
    while (!mqd_dlist_empty(&s->graveyard)) {
        mqd_dlist_t *n = s->graveyard.next;
        mqd_dlist_del(n);
        mqd_conn_unref(MQD_CONTAINER(n, mqd_conn_t, dirty_node));
    }
    /* The periodic persist of group state (mqd_topics_persist) is one SQLite commit with
     * synchronous = FULL: an fdatasync of the WAL on this thread, 0.5 ms on an idle disk
     * and 5+ ms on a busy one. Run straight from the 1 s timer it came before the
     * iteration's tick (timers are activated after I/O, the tick is queued behind them),
     * so the settlements and deliveries of a stable callback waited for that sync. The
     * timer only marks it due; it runs here, last, after every dirty connection's output
     * is on its socket and the iteration's appends are with the flusher. */
    if (s->persist_due) {
        s->persist_due = false;
        mqd_topics_persist(s, false);
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    mqd_server_t *s = arg;
    /* cleared before the dispatch, so that a wake during it stays pending */
    __atomic_store_n(&s->wake_pending, 0, __ATOMIC_RELEASE);
    mqd_store_dispatch(s->store);
    mqd_server_tick_soon(s);
}

static void wake_from_flusher(void *arg)
{
    mqd_server_t *s = arg;
    __atomic_store_n(&s->wake_pending, 1, __ATOMIC_RELEASE);
    event_active(s->ev_wake, 0, 0);
}

static void budget_timer(void *arg)
{
    mqd_budget_tick(arg);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    mqd_server_t *s = arg;
    if (sig == SIGHUP) {
        mqd_server_reload(s, NULL, 0); /* the log has the reason */
        return;
    }
    if (s->stopping) { /* a second signal: no more grace */
        MQD_NOTICE("server", "signal %d: stopping now", (int)sig);
        event_base_loopexit(s->base, NULL);
        return;
    }
    MQD_NOTICE("server", "signal %d: stopping", (int)sig);
    mqd_server_stop(s);
}

static int listen_one(mqd_server_t *s, const char *hostport)
{
    char host[256];
    uint16_t port;
    if (mqd_conf_parse_hostport(hostport, host, sizeof host, &port) != 0)
        return MQD_EINVAL;
    struct sockaddr_storage ss;
    int sslen = sizeof ss;
    char spec[300];
    snprintf(spec, sizeof spec, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
    if (evutil_parse_sockaddr_port(spec, (struct sockaddr *)&ss, &sslen) != 0) {
        MQD_ERR("server", "listen %s: not an IP address and port", hostport);
        return MQD_EINVAL;
    }
    mqd_listener_t *li = &s->listeners[s->n_listeners];
    li->srv = s;
    li->index = s->n_listeners;
    li->l = evconnlistener_new_bind(s->base, on_accept, li,
                                    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
                                    512, (struct sockaddr *)&ss, sslen);
    if (!li->l) {
        MQD_ERR("server", "listen %s: %s", hostport, strerror(errno));
        return MQD_EIO;
    }
    evconnlistener_set_error_cb(li->l, mqd_accept_error);
    s->n_listeners++;
    MQD_NOTICE("server", "listening on %s", hostport);
    return 0;
}

static void libevent_log(int severity, const char *msg)
{
    mqd_logf(severity >= EVENT_LOG_ERR ? MQD_LOG_ERROR
             : severity == EVENT_LOG_WARN ? MQD_LOG_WARN
                                          : MQD_LOG_DEBUG,
             "libevent", "%s", msg);
}

static void proton_log_sink(intptr_t ctx, pn_log_subsystem_t sub, pn_log_level_t sev, const char *msg)
{
    MQD_DEBUG("proton", "%s", msg);
}

/* The log level is the util log's own global: the one reloadable key with a cache. */
static void apply_log_level(void *arg, const mqd_conf_t *old, const mqd_conf_t *now)
{
    static const char *const names[] = {"error", "warn", "notice", "info", "debug"};
    mqd_log_set_level(now->log_level);
    MQD_NOTICE("server", "reload: log_level %s -> %s", names[old->log_level % 5],
               names[now->log_level % 5]);
}

int mqd_server_new(mqd_conf_t *conf, const char *conf_path, mqd_server_t **out)
{
    int rc = MQD_ENOMEM;
    mqd_server_t *s = calloc(1, sizeof *s);
    if (!s)
        return MQD_ENOMEM;
    s->conf = conf;
    s->started_ms = mqd_now_ms();
    s->conf_path = conf_path ? strdup(conf_path) : NULL;
    /* core reaches the subsystems above it only through these (core/core.h) */
    s->ops.conn_free = conn_free;
    s->ops.conn_write = conn_write_rest;
    s->ops.conn_rx_feed = rx_feed;
    s->ops.reload = mqd_server_reload;
    mqd_txn_core_ops(&s->ops);
    mqd_group_core_ops(&s->ops);
    mqd_amqp_core_ops(&s->ops);
    mqd_dlist_init(&s->conns);
    mqd_dlist_init(&s->dirty);
    mqd_dlist_init(&s->dispatch_q);
    mqd_dlist_init(&s->dispatch_later);
    mqd_dlist_init(&s->graveyard);
    mqd_dlist_init(&s->outconns);
    mqd_dlist_init(&s->builds);
    mqd_dlist_init(&s->drains);
    mqd_read_init(&s->browse_rd);
    if (mqd_conf_hooks_new(&s->conf_hooks) != 0 ||
        mqd_conf_hook_add(s->conf_hooks, "log_level", NULL, apply_log_level, s) != 0)
        goto err;
    evthread_use_pthreads();
    event_set_log_callback(libevent_log);
    s->base = event_base_new();
    if (!s->base)
        goto err;
    event_base_priority_init(s->base, 3);
    pn_logger_t *pl = pn_default_logger();
    pn_logger_set_log_sink(pl, proton_log_sink, 0);
    s->ev_wake = event_new(s->base, -1, 0, on_wake, s);
    s->ev_tick = event_new(s->base, -1, 0, on_tick, s);
    s->ev_later = evtimer_new(s->base, on_later, s);
    event_priority_set(s->ev_wake, PRIO_IO);
    event_priority_set(s->ev_tick, PRIO_TICK);
    if ((rc = mqd_timers_new(s->base, &s->timers)) != 0)
        goto err;

    if ((rc = mqd_mkdirs(conf->data_dir, 0750)) != 0) {
        MQD_ERR("server", "data_dir %s: cannot create", conf->data_dir);
        goto err;
    }
    /* An operator's mkdir (or an installer's) was never synced: make the data dir's name
     * durable before anything in it is acknowledged. */
    if (mqd_fsync_parents(conf->data_dir, 1) != 0)
        MQD_WARN("server", "data_dir %s: cannot fsync the directories above it", conf->data_dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/meta.db", conf->data_dir);
    if ((rc = mqd_meta_open(path, &s->meta)) != 0)
        goto err;
    if ((rc = mqd_store_open_ex(conf->data_dir, conf->flush_threads, wake_from_flusher, s,
                                 &s->store)) != 0)
        goto err;
    mqd_store_set_syncfs(s->store, conf->flush_sync == 1);
    mqd_store_set_prezero(s->store, conf->segment_prezero);
    mqd_store_set_flush_boost(s->store, conf->flush_priority_boost);
    mqd_store_set_max_open_files(s->store, conf->max_open_files);
    mqd_store_warm(s->store); /* reads partition metadata in parallel while topics open */
    if ((rc = mqd_topics_load(s)) != 0)
        goto err;
    if ((rc = mqd_topics_declare(s)) != 0)
        goto err;
    if ((rc = mqd_txns_init(s)) != 0)
        goto err;
    mqd_topics_dedup_warm(s); /* needs the committed transactions; before any client */
    if ((rc = mqd_auth_init(s)) != 0)
        goto err;
    if ((rc = mqd_watermark_init(s)) != 0)
        goto err;
    if ((rc = mqd_amqp_start(s)) != 0)
        goto err;
    /* budget.c is the server's own: heap trims after connections' charges fell */
    if ((rc = mqd_timer_add(s, "budget.trim", 1000, budget_timer, s)) != 0)
        goto err;
    if ((rc = mqd_metrics_start(s)) != 0)
        goto err;
    s->listeners = calloc(conf->n_listen ? conf->n_listen : 1, sizeof *s->listeners);
    rc = s->listeners ? mqd_accept_guard_init(s) : MQD_ENOMEM;
    if (rc != 0)
        goto err;
    for (size_t i = 0; i < conf->n_listen; i++)
        if ((rc = listen_one(s, conf->listen[i])) != 0)
            goto err;
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < MQD_ARRAY_LEN(sigs); i++) {
        s->ev_sig[i] = evsignal_new(s->base, sigs[i], on_signal, s);
        event_add(s->ev_sig[i], NULL);
    }
    signal(SIGPIPE, SIG_IGN);
    *out = s;
    return 0;
err:
    mqd_server_free(s);
    return rc;
}

static void on_watchdog(void *arg)
{
    mqd_sd_notify("WATCHDOG=1");
}

int mqd_server_run(mqd_server_t *s)
{
    MQD_NOTICE("server", "ready");
    /* recovery is done and the listeners are bound: tell systemd (Type=notify) */
    char status[128];
    snprintf(status, sizeof status, "READY=1\nSTATUS=serving %zu topics", s->n_topics);
    mqd_sd_notify(status);
    uint64_t wd = mqd_sd_watchdog_usec();
    if (wd > 0) { /* pinged at half the watchdog's period */
        uint64_t ms = wd / 2000 ? wd / 2000 : 1;
        if (mqd_timer_add(s, "systemd.watchdog", ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms,
                          on_watchdog, s) != 0)
            MQD_WARN("server", "systemd watchdog: cannot add its timer");
    }
    mqd_timers_log(s->timers);
    return event_base_dispatch(s->base) < 0 ? MQD_EIO : 0;
}

void mqd_server_stop(mqd_server_t *s)
{
    if (s->stopping)
        return;
    s->stopping = true;
    mqd_sd_notify("STOPPING=1");
    for (size_t i = 0; i < s->n_listeners; i++)
        evconnlistener_disable(s->listeners[i].l);
    /* let in-flight appends reach the disk, then close connections */
    mqd_store_commit(s->store);
    mqd_topics_persist(s, true);
    mqd_shutdown_begin(s); /* forced close to every client; loop exits when done (shutdown.c) */
}

/* Reload swaps in a whole validated config (conf_swap.c); the reloadable keys the
 * subsystems read from s->conf at each use need no hook, the rest register one. */
int mqd_server_reload(mqd_server_t *s, char *err, size_t errlen)
{
    mqd_conf_reload_report_t rep;
    if (!s->conf_path) {
        MQD_NOTICE("server", "SIGHUP: no config file to reload");
        return 0;
    }
    int rc = mqd_conf_reload(s->conf, s->conf_path, s->conf_hooks, &rep);
    if (rc != 0) {
        MQD_ERR("server", "reload failed, keeping the running config: %s", rep.err);
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s", rep.err);
        return rc;
    }
    if (rep.n_restart > 0)
        MQD_WARN("server", "reload: %s: needs restart, not applied", rep.restart);
    MQD_NOTICE("server", "reloaded %s: %zu reloadable keys changed, %zu apply hooks run",
               s->conf_path, rep.n_changed, rep.n_applied);
    return 0;
}

void mqd_server_free(mqd_server_t *s)
{
    if (!s)
        return;
    mqd_outconn_free_all(s);
    while (!mqd_dlist_empty(&s->conns)) {
        mqd_conn_t *c = MQD_CONTAINER(s->conns.next, mqd_conn_t, node);
        conn_close_deferred(c);
    }
    while (!mqd_dlist_empty(&s->graveyard)) {
        mqd_dlist_t *n = s->graveyard.next;
        mqd_dlist_del(n);
        mqd_conn_unref(MQD_CONTAINER(n, mqd_conn_t, dirty_node));
    }
    for (size_t i = 0; i < s->n_listeners; i++)
        evconnlistener_free(s->listeners[i].l);
    mqd_accept_guard_free(s);
    mqd_metrics_stop(s);
    mqd_auth_free(s);
    mqd_watermark_free(s);
    free(s->listeners);
    if (s->store)
        mqd_topics_persist(s, true);
    mqd_txns_free(s); /* open transactions die with the process: aborted at restart */
    mqd_topics_census_save(s);
    mqd_topics_free(s);
    mqd_pending_pool_free(s);
    if (s->meta)
        MQD_NOTICE("meta", "%llu SQLite write transactions since start",
                   (unsigned long long)mqd_meta_txn_count(s->meta));
    mqd_store_close(s->store); /* fsyncs what is left: appended sends end durable */
    mqd_meta_close(s->meta);
    for (size_t i = 0; i < MQD_ARRAY_LEN(s->ev_sig); i++)
        if (s->ev_sig[i])
            event_free(s->ev_sig[i]);
    if (s->ev_wake)
        event_free(s->ev_wake);
    if (s->ev_tick)
        event_free(s->ev_tick);
    if (s->ev_later)
        event_free(s->ev_later);
    mqd_timers_free(s->timers);
    if (s->ev_handover)
        event_free(s->ev_handover);
    if (s->ev_shutdown)
        event_free(s->ev_shutdown);
    mqd_budget_drains_free(s);
    if (s->base)
        event_base_free(s->base);
    mqd_buf_free(&s->scratch);
    mqd_buf_free(&s->mgmt_out);
    mqd_read_free(&s->browse_rd);
    free(s->conf_path);
    mqd_conf_hooks_free(s->conf_hooks);
    free(s);
}

void mqd_server_set_repl(mqd_server_t *s, const mqd_repl_hooks_t *h)
{
    s->repl = *h;
}
