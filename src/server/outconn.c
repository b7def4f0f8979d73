/* Connections mqd opens itself (client role): a follower fetching from its leader, a
 * node forwarding a link. Each mqd_outconn is one peer address that is kept connected:
 * a non-blocking connect, then the connection runs on the same loop and Proton driver as
 * an accepted one (server.c mqd_server_adopt_out), as an AMQP client with TLS and SASL of
 * its own; when it ends, the next attempt follows after a backoff that doubles from
 * backoff_min_ms to backoff_max_ms (with jitter, so that many followers of one lost
 * leader do not come back in step) and falls back to the minimum once a connection was
 * opened by the peer. Proton's events go to the owner's callbacks, never to the broker's
 * link handlers: an outbound connection's links are the owner's.
 *
 * Name resolution is getaddrinfo on the loop: numeric addresses (or /etc/hosts) do not
 * block; a cluster's node addresses are such. */
#include "config.h"
#include "server/server_int.h"

#include <errno.h>
#include <event2/event.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <proton/connection.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct mqd_outconn {
    mqd_server_t *srv;
    mqd_dlist_t node; /* in srv->outconns */
    char host[256], port[16];
    bool tls;
    char *user, *password, *container, *hostname;
    char *authzid; /* EXTERNAL (sasl_external) */
    char *peer_cn; /* the CN the peer's certificate must have, or NULL */
    bool plain_over_tcp, sasl_external;
    char refused[200]; /* why verify_peer refused the last handshake, until it ends */
    SSL_CTX *ctx; /* amqps: the client context (CA, verification) */
    mqd_outconn_ops_t ops;
    void *arg;
    int fd;                   /* the socket being connected, -1 otherwise */
    struct event *ev_connect; /* that socket writable: connect() finished */
    struct event *ev_retry;   /* the backoff */
    mqd_conn_t *conn;         /* the live connection, NULL while down */
    uint32_t backoff_min, backoff_max, backoff;
    uint32_t connect_timeout, idle_timeout; /* ms; 0: the defaults */
    mqd_outconn_stats_t st;
};

static void try_connect(mqd_outconn_t *oc);
static void outconn_free(mqd_outconn_t *oc, bool now);

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* The next attempt in oc->backoff ms (+-20 %), then doubles it up to the maximum. */
static void schedule_retry(mqd_outconn_t *oc, const char *why)
{
    uint32_t d = oc->backoff;
    uint32_t j = d / 5;
    if (j > 0)
        d = d - j + (uint32_t)(random() % (2 * j + 1));
    snprintf(oc->st.last_error, sizeof oc->st.last_error, "%s", why);
    MQD_INFO("outconn", "%s:%s: %s; next attempt in %u ms", oc->host, oc->port, why, d);
    struct timeval tv = {.tv_sec = d / 1000, .tv_usec = (suseconds_t)(d % 1000) * 1000};
    evtimer_add(oc->ev_retry, &tv);
    oc->backoff = oc->backoff >= oc->backoff_max / 2 ? oc->backoff_max : oc->backoff * 2;
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    try_connect(arg);
}

static void connect_failed(mqd_outconn_t *oc, int err)
{
    char why[160];
    /* a connect nobody answered within the owner's connect_timeout_ms has waited that
     * long already: the next one follows after the minimum, so a peer behind a healed
     * partition is reached within about connect_timeout_ms + backoff_min_ms */
    if (err == ETIMEDOUT && oc->connect_timeout)
        oc->backoff = oc->backoff_min;
    snprintf(why, sizeof why, "connect: %s", strerror(err));
    if (oc->ev_connect) {
        event_free(oc->ev_connect);
        oc->ev_connect = NULL;
    }
    if (oc->fd >= 0)
        close(oc->fd);
    oc->fd = -1;
    schedule_retry(oc, why);
}

static void connected(mqd_outconn_t *oc)
{
    int fd = oc->fd;
    event_free(oc->ev_connect);
    oc->ev_connect = NULL;
    oc->fd = -1;
    SSL *ssl = NULL;
    if (oc->tls) {
        ssl = SSL_new(oc->ctx);
        if (ssl == NULL || SSL_set_tlsext_host_name(ssl, oc->hostname) != 1 ||
            SSL_set1_host(ssl, oc->hostname) != 1) {
            ERR_clear_error();
            SSL_free(ssl);
            close(fd);
            schedule_retry(oc, "TLS setup failed");
            return;
        }
    }
    char peer[300];
    snprintf(peer, sizeof peer, "%s:%s (outbound)", oc->host, oc->port);
    mqd_outconn_opts_t id = {.user = oc->user,
                             .password = oc->password,
                             .sasl_external = oc->sasl_external,
                             .authzid = oc->authzid,
                             .container = oc->container,
                             .hostname = oc->hostname,
                             .plain_over_tcp = oc->plain_over_tcp,
                             .idle_timeout_ms = oc->idle_timeout};
    oc->st.connects++;
    /* the connection owns fd and ssl from here, failure included */
    oc->conn = mqd_server_adopt_out(oc->srv, fd, peer, oc, ssl, &id);
    if (oc->conn == NULL)
        schedule_retry(oc, "connection setup failed");
}

static void on_connect(evutil_socket_t fd, short what, void *arg)
{
    mqd_outconn_t *oc = arg;
    if (what & EV_TIMEOUT) /* still connecting: SO_ERROR would say 0 */
        return connect_failed(oc, ETIMEDOUT);
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err != 0)
        return connect_failed(oc, err);
    connected(oc);
}

static void try_connect(mqd_outconn_t *oc)
{
    if (mqd_srv_stopping(oc->srv))
        return;
    oc->st.attempts++;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(oc->host, oc->port, &hints, &ai);
    if (g != 0) {
        char why[160];
        snprintf(why, sizeof why, "resolve: %s", gai_strerror(g));
        schedule_retry(oc, why);
        return;
    }
    oc->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (oc->fd < 0) {
        freeaddrinfo(ai);
        return connect_failed(oc, errno);
    }
    int rc = connect(oc->fd, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    if (rc != 0 && errno != EINPROGRESS)
        return connect_failed(oc, errno);
    oc->ev_connect = event_new(mqd_srv_base(oc->srv), oc->fd, EV_WRITE, on_connect, oc);
    if (oc->ev_connect == NULL)
        return connect_failed(oc, ENOMEM);
    uint32_t ms = oc->connect_timeout ? oc->connect_timeout : 10000; /* an unanswered SYN */
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    event_add(oc->ev_connect, &tv);
}

/* amqps: the client certificate the peer may ask for (mutual TLS: a leader with
 * replication_peer_verify names the follower by it). */
static int tls_client_cert(mqd_outconn_t *oc, const mqd_outconn_opts_t *o)
{
    const char *key = o->key_file ? o->key_file : o->cert_file;
    if (SSL_CTX_use_certificate_chain_file(oc->ctx, o->cert_file) == 1 &&
        SSL_CTX_use_PrivateKey_file(oc->ctx, key, SSL_FILETYPE_PEM) == 1 &&
        SSL_CTX_check_private_key(oc->ctx) == 1)
        return 0;
    char why[256];
    ERR_error_string_n(ERR_peek_last_error(), why, sizeof why);
    MQD_ERR("outconn", "%s: client certificate %s (key %s) does not load: %s", o->url, o->cert_file,
            key, why);
    ERR_clear_error();
    return MQD_EINVAL;
}

/* The first subject CN of cert into cn[len]: false if there is none, it does not fit or
 * it holds a NUL. */
static bool cert_cn(X509 *cert, char *cn, size_t len)
{
    int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, (int)len);
    ERR_clear_error();
    return n >= 0 && (size_t)n < len - 1 && strlen(cn) == (size_t)n;
}

/* The handshake's verification of the peer (SSL_CTX_set_cert_verify_callback): OpenSSL's
 * own (chain, dates, purpose, the host name) and then peer_cn, the name of the node
 * expected there. A refusal fails the handshake before anything of ours is sent (no SASL
 * response, no attach), and names the CN found. */
static int verify_peer(X509_STORE_CTX *x, void *arg)
{
    mqd_outconn_t *oc = arg;
    int ok = X509_verify_cert(x);
    if (ok <= 0 || oc->peer_cn == NULL)
        return ok;
    char cn[256];
    if (!cert_cn(X509_STORE_CTX_get0_cert(x), cn, sizeof cn))
        snprintf(cn, sizeof cn, "(none)");
    if (strcmp(cn, oc->peer_cn) == 0)
        return ok;
    snprintf(oc->refused, sizeof oc->refused, "the peer's certificate names CN=%.64s, not %s", cn,
             oc->peer_cn);
    MQD_WARN("outconn", "%s:%s: %s: not the peer expected there, handshake refused", oc->host,
             oc->port, oc->refused);
    X509_STORE_CTX_set_error(x, X509_V_ERR_APPLICATION_VERIFICATION);
    return 0;
}

/* amqps: verify the peer against ca_file (the system's store when NULL) unless told not
 * to, and its CN against peer_cn; TLS 1.2 at least, as on mqd's listeners. */
static int tls_ctx(mqd_outconn_t *oc, const mqd_outconn_opts_t *o)
{
    oc->ctx = SSL_CTX_new(TLS_client_method());
    if (oc->ctx == NULL)
        return MQD_ENOMEM;
    SSL_CTX_set_min_proto_version(oc->ctx, TLS1_2_VERSION);
    int ok = o->ca_file ? SSL_CTX_load_verify_locations(oc->ctx, o->ca_file, NULL)
                        : SSL_CTX_set_default_verify_paths(oc->ctx);
    if (ok != 1) {
        MQD_ERR("outconn", "%s: cannot load CA %s", o->url, o->ca_file ? o->ca_file : "(system)");
        ERR_clear_error();
        return MQD_EINVAL;
    }
    if (o->no_verify)
        MQD_WARN("outconn", "%s: TLS peer not verified (no_verify)", o->url);
    SSL_CTX_set_verify(oc->ctx, o->no_verify ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    if (o->peer_cn)
        SSL_CTX_set_cert_verify_callback(oc->ctx, verify_peer, oc);
    return o->cert_file ? tls_client_cert(oc, o) : 0;
}

static int parse_url(mqd_outconn_t *oc, const char *url)
{
    const char *p = url;
    if (strncmp(p, "amqps://", 8) == 0) {
        oc->tls = true;
        p += 8;
    } else if (strncmp(p, "amqp://", 7) == 0)
        p += 7;
    const char *host = p, *colon;
    size_t hl;
    if (*p == '[') { /* [v6]:port */
        const char *e = strchr(p, ']');
        if (e == NULL)
            return MQD_EINVAL;
        host = p + 1;
        hl = (size_t)(e - host);
        colon = e[1] == ':' ? e + 1 : NULL;
    } else {
        colon = strrchr(p, ':');
        hl = colon ? (size_t)(colon - p) : strlen(p);
    }
    if (hl == 0 || hl >= sizeof oc->host)
        return MQD_EINVAL;
    memcpy(oc->host, host, hl);
    oc->host[hl] = '\0';
    const char *port = colon ? colon + 1 : oc->tls ? "5671" : "5672";
    char *end;
    long n = strtol(port, &end, 10);
    if (*end != '\0' || n < 1 || n > 65535)
        return MQD_EINVAL;
    snprintf(oc->port, sizeof oc->port, "%ld", n);
    return 0;
}

int mqd_outconn_new(mqd_server_t *s, const mqd_outconn_opts_t *o, const mqd_outconn_ops_t *ops,
                    void *arg, mqd_outconn_t **out)
{
    mqd_outconn_t *oc = calloc(1, sizeof *oc);
    if (oc == NULL)
        return MQD_ENOMEM;
    oc->srv = s;
    oc->fd = -1;
    oc->ops = *ops;
    oc->arg = arg;
    mqd_dlist_init(&oc->node);
    int rc = parse_url(oc, o->url);
    if (rc != 0) {
        MQD_ERR("outconn", "not an amqp:// or amqps:// host:port URL: %s", o->url);
        goto fail;
    }
    oc->user = dup_or_null(o->user);
    oc->password = dup_or_null(o->password);
    oc->container = strdup(o->container ? o->container : "mqd");
    oc->hostname = strdup(o->hostname ? o->hostname : oc->host);
    oc->plain_over_tcp = o->plain_over_tcp;
    oc->sasl_external = o->sasl_external;
    oc->authzid = dup_or_null(o->authzid);
    oc->peer_cn = dup_or_null(o->peer_cn);
    oc->backoff_min = o->backoff_min_ms ? o->backoff_min_ms : 100;
    oc->backoff_max = o->backoff_max_ms > oc->backoff_min ? o->backoff_max_ms : 30000;
    if (oc->backoff_max < oc->backoff_min)
        oc->backoff_max = oc->backoff_min;
    oc->backoff = oc->backoff_min;
    oc->connect_timeout = o->connect_timeout_ms;
    oc->idle_timeout = o->idle_timeout_ms;
    rc = MQD_ENOMEM;
    if (!oc->container || !oc->hostname || (o->user && !oc->user) ||
        (o->password && !oc->password) || (o->authzid && !oc->authzid) ||
        (o->peer_cn && !oc->peer_cn))
        goto fail;
    if (oc->sasl_external && (!oc->tls || !o->cert_file || oc->user)) {
        MQD_ERR("outconn", "%s: SASL EXTERNAL needs amqps://, a client certificate and no user",
                o->url);
        rc = MQD_EINVAL;
        goto fail;
    }
    if (oc->peer_cn && (!oc->tls || o->no_verify)) {
        MQD_ERR("outconn", "%s: peer_cn is checked on verified amqps:// only", o->url);
        rc = MQD_EINVAL;
        goto fail;
    }
    if (oc->user && !oc->tls && !oc->plain_over_tcp) {
        MQD_ERR("outconn", "%s: PLAIN would send the password in clear (use amqps:// or "
                "plain_over_tcp)", o->url);
        rc = MQD_EINVAL;
        goto fail;
    }
    if (oc->tls && (rc = tls_ctx(oc, o)) != 0)
        goto fail;
    rc = MQD_ENOMEM;
    if ((oc->ev_retry = evtimer_new(mqd_srv_base(s), on_retry, oc)) == NULL)
        goto fail;
    mqd_dlist_push(mqd_srv_outconns(s), &oc->node);
    try_connect(oc);
    *out = oc;
    return 0;
fail:
    outconn_free(oc, true);
    return rc;
}

static void outconn_free(mqd_outconn_t *oc, bool now)
{
    if (oc == NULL)
        return;
    if (oc->conn) {
        mqd_conn_t *c = oc->conn;
        oc->conn = NULL;
        mqd_conn_drop_out(c, now); /* no callback reaches oc after this */
    }
    if (oc->ev_connect)
        event_free(oc->ev_connect);
    if (oc->fd >= 0)
        close(oc->fd);
    if (oc->ev_retry)
        event_free(oc->ev_retry);
    mqd_dlist_del(&oc->node);
    SSL_CTX_free(oc->ctx);
    free(oc->user);
    if (oc->password) {
        OPENSSL_cleanse(oc->password, strlen(oc->password));
        free(oc->password);
    }
    free(oc->container);
    free(oc->hostname);
    free(oc->authzid);
    free(oc->peer_cn);
    free(oc);
}

void mqd_outconn_free(mqd_outconn_t *oc)
{
    outconn_free(oc, false);
}

void mqd_outconn_free_now(mqd_outconn_t *oc)
{
    outconn_free(oc, true);
}

void mqd_outconn_free_all(mqd_server_t *s)
{
    mqd_dlist_t *all = mqd_srv_outconns(s);
    while (!mqd_dlist_empty(all))
        outconn_free(MQD_CONTAINER(all->next, mqd_outconn_t, node), true);
}

/* core (conn.c, ops.out_event): every Proton event of the live connection. */
void mqd_outconn_event(mqd_outconn_t *oc, pn_event_t *e)
{
    if (pn_event_type(e) == PN_CONNECTION_REMOTE_OPEN) {
        oc->st.opened++;
        oc->backoff = oc->backoff_min; /* the peer answered: the next loss retries soon */
        MQD_INFO("outconn", "%s:%s: open", oc->host, oc->port);
    }
    if (oc->ops.on_event)
        oc->ops.on_event(oc, e, oc->arg);
    /* the peer closed (its shutdown, a forced close): answer, so that the connection
     * ends and the next attempt follows, whatever the owner did */
    if (pn_event_type(e) == PN_CONNECTION_REMOTE_CLOSE) {
        pn_connection_t *pc = pn_event_connection(e);
        if (!(pn_connection_state(pc) & PN_LOCAL_CLOSED))
            pn_connection_close(pc);
    }
}

/* core (conn.c, ops.out_closed): the live connection ended (its events are over; it is
 * freed later). */
void mqd_outconn_closed(mqd_outconn_t *oc, const char *why)
{
    char buf[400];
    if (oc->refused[0]) { /* the handshake's "certificate verify failed": say which check */
        snprintf(buf, sizeof buf, "%s (%s)", why, oc->refused);
        oc->refused[0] = '\0';
        why = buf;
    }
    oc->conn = NULL;
    if (!mqd_srv_stopping(oc->srv) && !evtimer_pending(oc->ev_retry, NULL))
        schedule_retry(oc, why);
    if (oc->ops.on_down) /* last: it may free oc */
        oc->ops.on_down(oc, why, oc->arg);
}

pn_connection_t *mqd_outconn_connection(mqd_outconn_t *oc)
{
    return oc->conn ? mqd_conn_driver(oc->conn)->connection : NULL;
}

void mqd_outconn_flush(mqd_outconn_t *oc)
{
    if (oc->conn)
        mqd_conn_mark_dirty(oc->conn);
}

void mqd_outconn_get_stats(const mqd_outconn_t *oc, mqd_outconn_stats_t *st)
{
    *st = oc->st;
    st->connected = oc->conn != NULL;
    st->next_backoff_ms = oc->backoff;
}
