/* mqctl: administers a running mqd through its `$management` node (see mqctl(1)).
 *
 * One request per run: connect (Proton proactor), attach a sender to `$management` and a
 * receiver with a dynamic source for the reply, send, wait (bounded), print. Human tables
 * by default, JSON with --json. Exit codes: 0 ok, 1 usage, 2 connection, 3 not found,
 * 4 conflict, 5 any other error, 6 login refused, 7 right refused (mqctl.h). */
#include "config.h"
#include "mqd.h"
#include "mgmt/mgmt_json.h"
#include "tools/mqctl.h"
#include "tools/scram_client.h"

#include <jansson.h>
#include <proton/condition.h>
#include <proton/connection.h>
#include <proton/delivery.h>
#include <proton/link.h>
#include <proton/message.h>
#include <proton/proactor.h>
#include <proton/sasl.h>
#include <proton/session.h>
#include <proton/ssl.h>
#include <proton/transport.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define T_LINK "com.mqd:link"
#define T_CLUSTER "com.mqd:cluster"
#define T_ROUTE "com.mqd:route"



static void usage(FILE *f)
{
    fputs("usage: mqctl [--url amqp[s]://[USER[:PASS]@]HOST[:PORT]] [--json] [--timeout SEC]\n"
          "             [--ca FILE] [--insecure] COMMAND\n"
          "(the options in brackets may also come after the command)\n"
          "commands:\n"
          "  topic create NAME [--partitions N] [--config KEY=VALUE]...\n"
          "  topic list | describe NAME | show NAME | delete NAME\n"
          "  topic alter NAME [--partitions N] [--config KEY=VALUE]...\n"
          "  topic resume NAME[/PARTITION]   (a partition failed by a full disk or an I/O error)\n"
          "  topic routes [NAME]   each partition's leader and its address, replicas, ISR\n"
          "  group list [TOPIC] | describe TOPIC GROUP | delete TOPIC GROUP\n"
          "  group reset TOPIC GROUP|--all-groups  (one of:) --to earliest|latest|OFFSET|@TIME_MS\n"
          "       --to-datetime ISO | --by-duration DUR | --shift-by N\n"
          "       [--partitions 0,2] [--dry-run] [--create]  (a missing group is an error)\n"
          "  send TOPIC [BODY...] [--key K] [--partition N] [--property K=V]... [--body-json]\n"
          "       (no BODY: one message per line of stdin)\n"
          "  receive TOPIC [--group G] [--from earliest|latest|OFFSET] [--count N] [--idle SEC]\n"
          "       (no --group: browses, consumes nothing)\n"
          "  topic peek NAME[/PARTITION] [--from OFFSET] [--count N]   (nothing is consumed)\n"
          "       (peek NAME... is the same)\n"
          "  connection list | close ID\n"
          "  link list | user list | acl list\n"
          "  config show   (the effective config and where each value came from)\n"
          "  cluster status\n"
          "  cluster elect TOPIC PARTITION NODE   make NODE (an in-sync replica) the leader\n"
          "  status | reload\n",
          f);
}

void mqctl_die_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("mqctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (see mqctl --help)\n", stderr);
    va_end(ap);
    exit(EX_USAGE);
}

/* ---------------------------------------------------------------- URL */

int mqctl_parse_url(const char *s, mqctl_url_t *u)
{
    memset(u, 0, sizeof *u);
    if (strncmp(s, "amqps://", 8) == 0) {
        u->tls = true;
        s += 8;
    } else if (strncmp(s, "amqp://", 7) == 0) {
        s += 7;
    } else if (strstr(s, "://")) {
        mqctl_die_usage("URL '%s': the scheme is not amqp:// or amqps://", s);
    }
    const char *at = strrchr(s, '@');
    if (at) {
        const char *colon = memchr(s, ':', (size_t)(at - s));
        size_t ulen = (size_t)((colon ? colon : at) - s);
        if (ulen >= sizeof u->user)
            return -1;
        memcpy(u->user, s, ulen);
        if (colon && (size_t)(at - colon - 1) < sizeof u->pass)
            memcpy(u->pass, colon + 1, (size_t)(at - colon - 1));
        s = at + 1;
    }
    const char *end = s + strcspn(s, "/");
    const char *pc = NULL;
    if (*s == '[') { /* [v6]:port */
        const char *rb = memchr(s, ']', (size_t)(end - s));
        if (!rb)
            return -1;
        snprintf(u->host, sizeof u->host, "%.*s", (int)(rb - s - 1), s + 1);
        pc = rb[1] == ':' ? rb + 1 : NULL;
    } else {
        pc = memchr(s, ':', (size_t)(end - s));
        snprintf(u->host, sizeof u->host, "%.*s", (int)((pc ? pc : end) - s), s);
    }
    snprintf(u->port, sizeof u->port, "%.*s", pc ? (int)(end - pc - 1) : 0, pc ? pc + 1 : "");
    if (!u->host[0])
        snprintf(u->host, sizeof u->host, "127.0.0.1");
    if (!u->port[0])
        snprintf(u->port, sizeof u->port, "%s", u->tls ? "5671" : "5672");
    if (!u->pass[0] && getenv("MQCTL_PASSWORD"))
        snprintf(u->pass, sizeof u->pass, "%s", getenv("MQCTL_PASSWORD"));
    return 0;
}

/* ---------------------------------------------------------------- AMQP client */

typedef struct client {
    pn_proactor_t *px;
    pn_connection_t *conn;
    pn_link_t *snd, *rcv;
    char reply_to[512];
    request_t *rq;
    bool sent, done;
    int err;           /* exit code of a failure, 0 if none */
    char errmsg[512];
    pn_rwbytes_t buf;
    mqd_sasl_client_t sasl; /* sasl_client.c: SCRAM-SHA-256, PLAIN, ANONYMOUS */
} client_t;

static void client_fail(client_t *cl, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void client_fail(client_t *cl, int code, const char *fmt, ...)
{
    if (!cl->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cl->errmsg, sizeof cl->errmsg, fmt, ap);
        va_end(ap);
        cl->err = code;
    }
    if (cl->conn)
        pn_connection_close(cl->conn);
}

int mqctl_exit_of_cond(const char *cond, bool on_link, int dflt)
{
    if (cond && strcmp(cond, "amqp:not-found") == 0)
        return EX_NOTFOUND;
    if (cond && strcmp(cond, "amqp:unauthorized-access") == 0)
        return on_link ? EX_REFUSED : EX_AUTH;
    return dflt;
}

static const char *cond_name(pn_condition_t *c)
{
    return c && pn_condition_is_set(c) ? pn_condition_get_name(c) : NULL;
}

static const char *cond_text(pn_condition_t *c, char *buf, size_t len)
{
    if (!c || !pn_condition_is_set(c))
        return "closed by the broker";
    const char *d = pn_condition_get_description(c);
    snprintf(buf, len, "%s%s%s", pn_condition_get_name(c), d ? ": " : "", d ? d : "");
    return buf;
}

static int encode_request(client_t *cl, pn_message_t *m)
{
    request_t *rq = cl->rq;
    pn_message_set_address(m, "$management");
    pn_message_set_reply_to(m, cl->reply_to);
    pn_data_put_ulong(pn_message_id(m), (uint64_t)getpid());
    pn_data_t *ap = pn_message_properties(m);
    json_t *props = json_pack("{s:s, s:s}", "operation", rq->op, "type", rq->type);
    if (rq->name)
        json_object_set_new(props, "name", json_string(rq->name));
    if (rq->props)
        json_object_update(props, rq->props);
    mqd_mgmt_json_to_data(ap, props, 0);
    json_decref(props);
    if (rq->body)
        mqd_mgmt_json_to_data(pn_message_body(m), rq->body, 0);
    return mqctl_msg_encode(m, &cl->buf, 1u << 24);
}

static void try_send(client_t *cl)
{
    if (cl->sent || !cl->reply_to[0] || pn_link_credit(cl->snd) <= 0)
        return;
    pn_message_t *m = pn_message();
    int rc = encode_request(cl, m);
    pn_message_free(m);
    if (rc != 0)
        return client_fail(cl, EX_OTHER, "cannot encode the request");
    pn_delivery(cl->snd, pn_dtag("1", 1));
    pn_link_send(cl->snd, cl->buf.start, cl->buf.size);
    pn_link_advance(cl->snd);
    cl->sent = true;
}

static void decode_reply(client_t *cl, pn_delivery_t *d)
{
    request_t *rq = cl->rq;
    pn_message_t *m = NULL;
    int rc = mqctl_msg_recv(cl->rcv, d, &cl->buf, &m);
    if (rc != 0)
        return client_fail(cl, EX_OTHER, rc == MQD_ENOMEM ? "out of memory" : "undecodable reply");
    pn_data_t *ap = pn_message_properties(m);
    pn_data_rewind(ap);
    json_t *props = pn_data_next(ap) ? mqd_mgmt_data_to_json(ap, 0) : NULL;
    json_t *sc = json_object_get(props, "statusCode");
    json_t *sd = json_object_get(props, "statusDescription");
    rq->status = json_is_integer(sc) ? (int)json_integer_value(sc) : 0;
    snprintf(rq->desc, sizeof rq->desc, "%s", json_is_string(sd) ? json_string_value(sd) : "");
    json_decref(props);
    pn_data_t *body = pn_message_body(m);
    pn_data_rewind(body);
    rq->reply = pn_data_next(body) ? mqd_mgmt_data_to_json(body, 0) : NULL;
    pn_message_free(m);
    pn_delivery_update(d, PN_ACCEPTED);
    pn_delivery_settle(d);
    cl->done = true;
    pn_connection_close(cl->conn);
}

static void on_link_open(client_t *cl, pn_link_t *l)
{
    if (l != cl->rcv)
        return try_send(cl);
    const char *a = pn_terminus_get_address(pn_link_remote_source(l));
    if (!a || !*a)
        return client_fail(cl, EX_OTHER, "the broker assigned no reply address");
    snprintf(cl->reply_to, sizeof cl->reply_to, "%s", a);
    try_send(cl);
}

static void on_delivery(client_t *cl, pn_delivery_t *d)
{
    pn_link_t *l = pn_delivery_link(d);
    if (l == cl->rcv && pn_delivery_readable(d) && !pn_delivery_partial(d))
        return decode_reply(cl, d);
    if (l == cl->snd && pn_delivery_remote_state(d) && pn_delivery_remote_state(d) != PN_ACCEPTED) {
        char b[512];
        client_fail(cl, EX_OTHER, "request refused: %s",
                    cond_text(pn_disposition_condition(pn_delivery_remote(d)), b, sizeof b));
    }
}

static void on_remote_close(client_t *cl, pn_condition_t *cond, bool on_link)
{
    char b[512];
    if (!cl->done)
        client_fail(cl, mqctl_exit_of_cond(cond_name(cond), on_link, EX_CONN), "%s",
                    cond_text(cond, b, sizeof b));
}

/* Returns false once the proactor has nothing left to do. */
static bool handle(void *arg, pn_event_t *e)
{
    client_t *cl = arg;
    switch (pn_event_type(e)) {
    case PN_LINK_REMOTE_OPEN: on_link_open(cl, pn_event_link(e)); break;
    case PN_LINK_FLOW: try_send(cl); break;
    case PN_DELIVERY: on_delivery(cl, pn_event_delivery(e)); break;
    case PN_LINK_REMOTE_CLOSE:
        on_remote_close(cl, pn_link_remote_condition(pn_event_link(e)), true);
        break;
    case PN_CONNECTION_REMOTE_CLOSE:
        on_remote_close(cl, pn_connection_remote_condition(cl->conn), false);
        pn_connection_close(cl->conn);
        break;
    case PN_TRANSPORT_CLOSED:
        pn_proactor_cancel_timeout(cl->px); /* a pending timeout keeps the proactor active */
        if (!cl->done && cl->sasl.error[0]) {
            client_fail(cl, EX_AUTH, "authentication failed: %s", cl->sasl.error);
        } else if (!cl->done) {
            char b[512];
            pn_condition_t *tc = pn_transport_condition(pn_event_transport(e));
            client_fail(cl, mqctl_exit_of_cond(cond_name(tc), false, EX_CONN), "%s",
                        cond_text(tc, b, sizeof b));
        }
        break;
    case PN_PROACTOR_TIMEOUT:
        if (!cl->done) {
            client_fail(cl, EX_CONN, "no reply within the timeout");
            pn_proactor_disconnect(cl->px, NULL);
        }
        break;
    case PN_PROACTOR_INACTIVE: return false;
    default: break;
    }
    return true;
}

void mqctl_conn_setup(pn_connection_t *conn, pn_transport_t *t, const mqctl_url_t *u,
                      const mqctl_opts_t *o, mqd_sasl_client_t *sc)
{
    char container[64];
    snprintf(container, sizeof container, "mqctl-%ld", (long)getpid());
    pn_connection_set_container(conn, container);
    pn_connection_set_hostname(conn, u->host);
    pn_sasl_t *sasl = pn_sasl(t);
    mqd_sasl_client_setup(t, sc);
    if (u->user[0]) {
        pn_connection_set_user(conn, u->user);
        pn_connection_set_password(conn, u->pass);
        /* PLAIN over plain TCP when the broker offers no SCRAM: the operator chose the
         * URL; loopback is the usual case */
        pn_sasl_set_allow_insecure_mechs(sasl, true);
    }
    if (u->tls) {
        pn_ssl_domain_t *dom = pn_ssl_domain(PN_SSL_MODE_CLIENT);
        if (o->ca)
            pn_ssl_domain_set_trusted_ca_db(dom, o->ca);
        pn_ssl_domain_set_peer_authentication(dom, o->insecure ? PN_SSL_ANONYMOUS_PEER
                                                               : PN_SSL_VERIFY_PEER_NAME, NULL);
        pn_ssl_init(pn_ssl(t), dom, NULL);
        pn_ssl_set_peer_hostname(pn_ssl(t), u->host);
        pn_ssl_domain_free(dom);
    }
}

void mqctl_run(pn_proactor_t *px, pn_connection_t *conn, pn_transport_t *t, const mqctl_url_t *u,
               double timeout_s, bool (*on_event)(void *arg, pn_event_t *e), void *arg)
{
    char addr[PN_MAX_ADDR];
    pn_proactor_addr(addr, sizeof addr, u->host, u->port);
    pn_proactor_connect2(px, conn, t, addr);
    pn_proactor_set_timeout(px, (pn_millis_t)(timeout_s * 1000));
    bool more = true;
    while (more) {
        pn_event_batch_t *b = pn_proactor_wait(px);
        for (pn_event_t *e; (e = pn_event_batch_next(b));)
            more = on_event(arg, e) && more;
        pn_proactor_done(px, b);
    }
    pn_proactor_free(px);
}

static void setup_connection(client_t *cl, const mqctl_url_t *u, const mqctl_opts_t *o,
                             pn_transport_t *t)
{
    char container[64];
    snprintf(container, sizeof container, "mqctl-%ld", (long)getpid());
    mqctl_conn_setup(cl->conn, t, u, o, &cl->sasl);
    pn_session_t *ss = pn_session(cl->conn);
    pn_session_open(ss);
    cl->snd = pn_sender(ss, "mqctl-request");
    pn_terminus_set_address(pn_link_target(cl->snd), "$management");
    pn_terminus_set_address(pn_link_source(cl->snd), container);
    pn_link_open(cl->snd);
    cl->rcv = pn_receiver(ss, "mqctl-reply");
    pn_terminus_set_address(pn_link_source(cl->rcv), NULL);
    pn_terminus_set_dynamic(pn_link_source(cl->rcv), true);
    pn_link_open(cl->rcv);
    pn_link_flow(cl->rcv, 1);
    pn_connection_open(cl->conn);
}

/* Sends rq and fills its reply; returns 0 or an exit code (message printed). */
int mqctl_transact(const mqctl_opts_t *o, request_t *rq)
{
    mqctl_url_t u;
    if (mqctl_parse_url(o->url, &u) != 0)
        mqctl_die_usage("bad URL '%s'", o->url);
    client_t cl = {.rq = rq};
    cl.px = pn_proactor();
    cl.conn = pn_connection();
    pn_transport_t *t = pn_transport();
    setup_connection(&cl, &u, o, t);
    mqctl_run(cl.px, cl.conn, t, &u, o->timeout_s, handle, &cl);
    mqd_sasl_client_clear(&cl.sasl);
    free(cl.buf.start);
    if (!cl.done && !cl.err)
        client_fail(&cl, EX_CONN, "connection closed before the reply");
    if (cl.err) {
        fprintf(stderr, "mqctl: %s:%s: %s\n", u.host, u.port, cl.errmsg);
        return cl.err;
    }
    return 0;
}

/* ---------------------------------------------------------------- output */

typedef struct table {
    size_t ncols, nrows;
    const char **head;
    char **cells; /* nrows * ncols, owned */
} table_t;

static void table_add(table_t *t, ...)
{
    char **nc = realloc(t->cells, (t->nrows + 1) * t->ncols * sizeof *nc);
    if (!nc)
        return;
    t->cells = nc;
    va_list ap;
    va_start(ap, t);
    for (size_t i = 0; i < t->ncols; i++) {
        const char *v = va_arg(ap, const char *);
        nc[t->nrows * t->ncols + i] = strdup(v ? v : "-");
    }
    va_end(ap);
    t->nrows++;
}

/* Left-aligned columns, two spaces apart, no trailing blanks: every row's columns start
 * at the same positions (scripts may cut by position). */
static void table_print(table_t *t)
{
    size_t w[16] = {0};
    for (size_t c = 0; c < t->ncols && c < 16; c++) {
        w[c] = strlen(t->head[c]);
        for (size_t r = 0; r < t->nrows; r++) {
            size_t l = strlen(t->cells[r * t->ncols + c]);
            w[c] = l > w[c] ? l : w[c];
        }
    }
    for (size_t r = 0; r <= t->nrows; r++) {
        for (size_t c = 0; c < t->ncols; c++) {
            const char *v = r == 0 ? t->head[c] : t->cells[(r - 1) * t->ncols + c];
            if (c + 1 == t->ncols)
                printf("%s\n", v);
            else
                printf("%-*s  ", (int)w[c], v);
        }
    }
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
}

/* A reply field as text ("-" when absent). */
static const char *fld(json_t *o, const char *k, char *buf, size_t len)
{
    json_t *v = json_object_get(o, k);
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_boolean(v))
        snprintf(buf, len, "%s", json_is_true(v) ? "yes" : "no");
    else
        snprintf(buf, len, "-");
    return buf;
}

#define F(o, k, i) fld(o, k, b[i], sizeof b[i])

/* A cluster topic's leaders, partition by partition ("1,1,2"; 0: not placed yet). */
static void leaders_of(json_t *o, char *buf, size_t len)
{
    size_t i, at = 0;
    json_t *p;
    buf[0] = '\0';
    json_array_foreach(json_object_get(o, "placement"), i, p)
    {
        int n = snprintf(buf + at, len - at, "%s%lld", i ? "," : "",
                         (long long)json_integer_value(json_object_get(p, "leader")));
        if (n < 0 || (size_t)n >= len - at) {
            snprintf(buf + (len > 4 ? len - 4 : 0), len > 4 ? 4 : len, "...");
            return;
        }
        at += (size_t)n;
    }
}

static void show_topics(json_t *v)
{
    const char *head[] = {"NAME", "PARTITIONS", "MESSAGES", "GROUPS", "SIZE_BYTES", "LEADERS"};
    size_t i;
    json_t *o;
    bool cluster = false; /* the LEADERS column only in a cluster */
    json_array_foreach(v, i, o) cluster = cluster || json_object_get(o, "placement");
    table_t t = {.ncols = cluster ? 6 : 5, .head = head};
    char b[6][64];
    json_array_foreach(v, i, o) {
        snprintf(b[3], sizeof b[3], "%zu", json_array_size(json_object_get(o, "groups")));
        leaders_of(o, b[5], sizeof b[5]);
        table_add(&t, F(o, "name", 0), F(o, "partitions", 1), F(o, "messages", 2), b[3],
                  F(o, "size_bytes", 4), b[5][0] ? b[5] : "-");
    }
    table_print(&t);
}

static void ids_of(json_t *a, char *buf, size_t len)
{
    size_t i, at = 0;
    json_t *e;
    buf[0] = '\0';
    json_array_foreach(a, i, e)
    {
        int n =
            snprintf(buf + at, len - at, "%s%lld", i ? "," : "", (long long)json_integer_value(e));
        if (n < 0 || (size_t)n >= len - at)
            return;
        at += (size_t)n;
    }
}

/* A cluster topic's partitions as etcd places them, and whether this node holds it. */
static void show_placement(json_t *o)
{
    json_t *pl = json_object_get(o, "placement"), *v;
    if (json_is_true(json_object_get(o, "quarantined")))
        printf("this node's copy is not the cluster's topic of that name: kept, not served\n");
    if (!pl)
        return;
    if (json_is_false(json_object_get(o, "local")))
        printf("not held on this node (served by the leaders below)\n");
    const char *head[] = {"PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR"};
    table_t t = {.ncols = 5, .head = head};
    size_t i;
    char c[5][96];
    json_array_foreach(pl, i, v)
    {
        ids_of(json_object_get(v, "replicas"), c[3], sizeof c[3]);
        ids_of(json_object_get(v, "isr"), c[4], sizeof c[4]);
        table_add(&t, fld(v, "partition", c[0], 32), fld(v, "leader", c[1], 32),
                  fld(v, "epoch", c[2], 32), c[3][0] ? c[3] : "-", c[4][0] ? c[4] : "-");
    }
    printf("replication_factor %s  id %s\n", fld(o, "replication_factor", c[0], 32),
           fld(o, "id", c[1], 96));
    table_print(&t);
}

/* Queue-style: what each group has yet to consume. */
static void show_topic_groups(json_t *o)
{
    const char *head[] = {"GROUP", "MEMBERS", "BACKLOG"};
    table_t t = {.ncols = 3, .head = head};
    size_t i;
    json_t *g;
    char b[3][64];
    json_array_foreach(json_object_get(o, "groups"), i, g)
        table_add(&t, F(g, "group", 0), F(g, "members", 1), F(g, "backlog", 2));
    if (t.nrows)
        table_print(&t);
}

static void show_kv(json_t *o, const char *const *keys, size_t n)
{
    char b[1][64];
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        w = strlen(keys[i]) > w ? strlen(keys[i]) : w;
    for (size_t i = 0; i < n; i++)
        printf("%-*s  %s\n", (int)w + 1, keys[i], F(o, keys[i], 0));
}

static void show_topic(json_t *o)
{
    static const char *const keys[] = {"name",        "partitions",  "messages",
                                       "size_bytes",  "messages_in", "messages_out"};
    show_kv(o, keys, MQD_ARRAY_LEN(keys));
    json_t *cfg = json_object_get(o, "config"), *ov = json_object_get(o, "overrides");
    const char *k;
    json_t *v;
    char b[1][64];
    printf("config:\n");
    json_object_foreach(cfg, k, v)
        printf("  %-20s %s%s\n", k, fld(cfg, k, b[0], sizeof b[0]),
               json_object_get(ov, k) ? "  (set by management)" : "");
    const char *head[] = {"PARTITION",  "START",  "END",    "MESSAGES",
                          "SIZE_BYTES", "FAILED", "CORRUPT"};
    table_t t = {.ncols = 7, .head = head};
    size_t i;
    char c[7][32];
    json_array_foreach(json_object_get(o, "partition_info"), i, v)
        table_add(&t, fld(v, "partition", c[0], 32), fld(v, "start", c[1], 32),
                  fld(v, "end", c[2], 32), fld(v, "messages", c[3], 32),
                  fld(v, "size_bytes", c[4], 32), fld(v, "failed", c[5], 32),
                  fld(v, "corrupt_records", c[6], 32));
    table_print(&t);
    show_topic_groups(o);
    json_array_foreach(json_object_get(o, "partition_info"), i, v) {
        const char *why = json_string_value(json_object_get(v, "failed_reason"));
        if (why && *why)
            printf("partition %s: %s\n", fld(v, "partition", c[0], 32), why);
    }
    show_placement(o);
}

static void show_groups(json_t *v)
{
    const char *head[] = {"TOPIC", "GROUP", "MODE", "MEMBERS", "LAG", "BACKLOG"};
    table_t t = {.ncols = 6, .head = head};
    size_t i;
    json_t *o;
    char b[6][32];
    json_array_foreach(v, i, o)
        table_add(&t, F(o, "topic", 0), F(o, "group", 1), F(o, "mode", 2), F(o, "members", 3),
                  F(o, "lag", 4), F(o, "backlog", 5));
    table_print(&t);
}

static void show_group(json_t *o)
{
    static const char *const keys[] = {"topic", "group", "mode", "members", "lag"};
    show_kv(o, keys, MQD_ARRAY_LEN(keys));
    const char *head[] = {"PARTITION", "COMMITTED", "LOG_START", "LOG_END",
                          "LAG",       "BACKLOG",   "INFLIGHT",  "OWNER"};
    table_t t = {.ncols = 8, .head = head};
    size_t i;
    json_t *p;
    char b[8][64];
    json_array_foreach(json_object_get(o, "partitions"), i, p)
        table_add(&t, F(p, "partition", 0), F(p, "committed", 1), F(p, "log_start", 2),
                  F(p, "log_end", 3), F(p, "lag", 4), F(p, "backlog", 5), F(p, "inflight", 6),
                  F(p, "owner", 7));
    table_print(&t);
}

/* A reset's result: per partition the offset before and after (a list: --all-groups). */
static void show_reset_one(json_t *o)
{
    char b[7][64];
    bool dry = json_is_true(json_object_get(o, "dry_run"));
    printf("%s %s of topic %s%s\n", dry ? "would reset group" : "reset group",
           F(o, "group", 0), F(o, "topic", 1), dry ? " (dry run: nothing changed)" : "");
    const char *head[] = {"PARTITION", "PREVIOUS", "NEW", "LOG_START", "LOG_END", "LAG", "CHANGED"};
    table_t t = {.ncols = 7, .head = head};
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(o, "partitions"), i, p)
        table_add(&t, F(p, "partition", 0), F(p, "previous", 1), F(p, "committed", 2),
                  F(p, "log_start", 3), F(p, "log_end", 4), F(p, "lag", 5), F(p, "changed", 6));
    table_print(&t);
}

static void show_reset(json_t *v)
{
    size_t i;
    json_t *o;
    if (!json_is_array(v))
        return show_reset_one(v);
    json_array_foreach(v, i, o)
    {
        if (i)
            putchar('\n');
        show_reset_one(o);
    }
}

static void show_conns(json_t *v)
{
    const char *head[] = {"ID",       "USER",     "SASL",      "TLS",   "CONNECTED_SINCE",
                          "BYTES_IN", "BYTES_OUT", "CONTAINER", "LINKS"};
    table_t t = {.ncols = 9, .head = head};
    size_t i;
    json_t *o;
    char b[9][64];
    json_array_foreach(v, i, o) {
        time_t since = (time_t)(json_integer_value(json_object_get(o, "connected_since")) / 1000);
        struct tm tm;
        gmtime_r(&since, &tm);
        strftime(b[4], sizeof b[4], "%Y-%m-%dT%H:%M:%SZ", &tm);
        table_add(&t, F(o, "id", 0), F(o, "user", 1), F(o, "sasl_mechanism", 2),
                  F(o, "tls_version", 3), b[4], F(o, "bytes_in", 5), F(o, "bytes_out", 6),
                  F(o, "container", 7), F(o, "links", 8));
    }
    table_print(&t);
}

/* KEY (topic.NAME.KEY for a [topic NAME] section, as --set spells it), VALUE, SOURCE. */
static void show_config(json_t *o)
{
    const char *head[] = {"KEY", "VALUE", "SOURCE"};
    table_t t = {.ncols = 3, .head = head};
    size_t i;
    json_t *v;
    char key[512], b[3][512];
    json_array_foreach(json_object_get(o, "settings"), i, v) {
        const char *topic = json_string_value(json_object_get(v, "topic"));
        snprintf(key, sizeof key, "%s%s%s%s", topic ? "topic." : "", topic ? topic : "",
                 topic ? "." : "", F(v, "key", 0));
        table_add(&t, key, F(v, "value", 1), F(v, "source", 2));
    }
    table_print(&t);
}

static void show_links(json_t *v)
{
    const char *head[] = {"CONNECTION", "NAME",  "ROLE",   "KIND",     "ADDRESS",
                          "TOPIC",      "GROUP", "CREDIT", "UNSETTLED"};
    table_t t = {.ncols = 9, .head = head};
    size_t i;
    json_t *o;
    char b[9][32];
    json_array_foreach(v, i, o)
        table_add(&t, F(o, "connection", 0), F(o, "name", 1), F(o, "role", 2), F(o, "kind", 3),
                  F(o, "address", 4), F(o, "topic", 5), F(o, "group", 6), F(o, "credit", 7),
                  F(o, "unsettled", 8));
    table_print(&t);
}

static void show_users(json_t *v)
{
    const char *head[] = {"USER", "GROUPS", "PASSWORD", "SCRAM", "CERT_CN"};
    table_t t = {.ncols = 5, .head = head};
    size_t i;
    json_t *o;
    char b[5][32];
    json_array_foreach(v, i, o)
        table_add(&t, F(o, "name", 0), F(o, "groups", 1), F(o, "password", 2),
                  F(o, "scram_sha256", 3), F(o, "cert_cn", 4));
    table_print(&t);
}

static void show_acl(json_t *o)
{
    size_t i, k;
    json_t *r, *w;
    if (!json_is_true(json_object_get(o, "present")))
        printf("no [acl] section: everyone may do everything\n");
    json_array_foreach(json_object_get(o, "rules"), i, r) {
        printf("%s %s ", json_string_value(json_object_get(r, "action")),
               json_string_value(json_object_get(r, "who")));
        json_array_foreach(json_object_get(r, "rights"), k, w)
            printf("%s%s", k ? "," : "", json_string_value(w));
        printf(" %s\n", json_string_value(json_object_get(r, "pattern")));
    }
}

/* One line per message: offset, time, and the body as text when it is printable. */
static void show_peek(json_t *o)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(o, "messages"), i, m) {
        const char *hex = json_string_value(json_object_get(m, "body_hex"));
        size_t n = hex ? strlen(hex) / 2 : 0;
        printf("%lld\t%lld\t", (long long)json_integer_value(json_object_get(m, "offset")),
               (long long)json_integer_value(json_object_get(m, "timestamp")));
        for (size_t k = 0; k < n; k++) {
            unsigned ch;
            sscanf(hex + 2 * k, "%2x", &ch);
            putchar(ch >= 0x20 && ch < 0x7f ? (int)ch : '.');
        }
        putchar('\n');
    }
}

/* A list of ids as "1,2,3" (isr, replicas). */
static const char *ids(json_t *a, char *b, size_t n)
{
    size_t i, off = 0;
    json_t *v;
    b[0] = '\0';
    json_array_foreach(a, i, v)
        off += (size_t)snprintf(b + off, off < n ? n - off : 0, "%s%" JSON_INTEGER_FORMAT,
                                i ? "," : "", json_integer_value(v));
    return b;
}

static void show_cluster(json_t *o)
{
    static const char *const keys[] = {"controller", "node_id"};
    show_kv(o, keys, MQD_ARRAY_LEN(keys));
    const char *nh[] = {"NODE", "ADDRESS", "RACK", "ALIVE"};
    table_t t = {.ncols = 4, .head = nh};
    size_t i;
    json_t *p;
    char b[8][64];
    json_array_foreach(json_object_get(o, "nodes"), i, p)
        table_add(&t, F(p, "id", 0), F(p, "address", 1), F(p, "rack", 2), F(p, "alive", 3));
    table_print(&t);
    const char *ph[] = {"TOPIC", "PARTITION", "LEADER", "PREFERRED",
                        "EPOCH", "REPLICAS",  "ISR",    "HIGH_WATERMARK"};
    table_t u = {.ncols = 8, .head = ph};
    json_array_foreach(json_object_get(o, "partitions"), i, p)
    {
        table_add(&u, F(p, "topic", 0), F(p, "partition", 1), F(p, "leader", 2),
                  F(p, "preferred_leader", 3), F(p, "epoch", 4),
                  ids(json_object_get(p, "replicas"), b[5], sizeof b[5]),
                  ids(json_object_get(p, "isr"), b[6], sizeof b[6]), F(p, "high_watermark", 7));
    }
    table_print(&u);
}

/* Routing metadata (topic routes): one row per partition of each topic, with where its
 * leader takes client connections; the reply is one topic's map or a list of them. */
static void route_rows(table_t *t, json_t *o)
{
    size_t i;
    json_t *p;
    char b[9][96];
    json_array_foreach(json_object_get(o, "routes"), i, p)
    {
        ids_of(json_object_get(p, "replicas"), b[5], sizeof b[5]);
        ids_of(json_object_get(p, "isr"), b[6], sizeof b[6]);
        const char *addr = json_string_value(json_object_get(p, "leader_address"));
        table_add(t, F(o, "topic", 0), F(p, "partition", 1), F(p, "leader", 2),
                  addr && *addr ? addr : "-", F(p, "epoch", 4), b[5][0] ? b[5] : "-",
                  b[6][0] ? b[6] : "-", F(p, "high_watermark", 7), F(p, "high_watermark_from", 8));
    }
}

static void show_routes(json_t *v)
{
    const char *head[] = {"TOPIC",    "PARTITION", "LEADER",         "LEADER_ADDRESS", "EPOCH",
                          "REPLICAS", "ISR",       "HIGH_WATERMARK", "HW_FROM"};
    table_t t = {.ncols = 9, .head = head};
    size_t i;
    json_t *o;
    if (json_is_array(v))
        json_array_foreach(v, i, o) route_rows(&t, o);
    else
        route_rows(&t, v);
    table_print(&t);
}

static void show_status(json_t *o)
{
    static const char *const keys[] = {"version", "uptime_s", "topics", "connections",
                                       "connections_accepted", "rss_bytes", "data_dir",
                                       "data_dir_size_bytes"};
    show_kv(o, keys, MQD_ARRAY_LEN(keys));
}

#undef F

/* ---------------------------------------------------------------- commands */

typedef struct cmd cmd_t;
struct cmd {
    const char *noun, *verb;
    int min_args, max_args;      /* positional arguments after the verb */
    const char *op, *type;
    void (*build)(request_t *rq, char **args, int nargs, int argc, char **argv);
    void (*show)(json_t *reply);
    const char *done;            /* printed for a reply without a body ("%s" = name) */
};

/* --partitions N and --config K=V... (topic create/alter) into the request body. */
static void build_topic_opts(request_t *rq, char **args, int nargs, int argc, char **argv)
{
    rq->name = args[0];
    (void)nargs;
    rq->body = json_object();
    for (int i = 0; i < argc; i++) {
        if ((strcmp(argv[i], "--partitions") == 0 || strcmp(argv[i], "--config") == 0) &&
            i + 1 >= argc)
            mqctl_die_usage("%s needs a value", argv[i]);
        if (strcmp(argv[i], "--partitions") == 0) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n <= 0)
                mqctl_die_usage("--partitions needs a positive number");
            json_object_set_new(rq->body, "partitions", json_integer(n));
        } else if (strcmp(argv[i], "--config") == 0) {
            char *kv = argv[++i], *eq = strchr(kv, '='), *end;
            if (!eq || eq == kv)
                mqctl_die_usage("--config needs KEY=VALUE");
            *eq = '\0';
            long long n = strtoll(eq + 1, &end, 10);
            json_object_set_new(rq->body, kv, eq[1] && !*end ? json_integer(n) : json_string(eq + 1));
        } else {
            mqctl_die_usage("unexpected argument '%s'", argv[i]);
        }
    }
}

static void no_opts(int argc, char **argv)
{
    if (argc > 0)
        mqctl_die_usage("unexpected argument '%s'", argv[0]);
}

static void build_name(request_t *rq, char **args, int nargs, int argc, char **argv)
{
    no_opts(argc, argv);
    rq->name = nargs > 0 ? args[0] : NULL;
}

/* topic routes [NAME]: one topic's routes (READ), or every topic's (QUERY). */
static void build_routes(request_t *rq, char **args, int nargs, int argc, char **argv)
{
    build_name(rq, args, nargs, argc, argv);
    if (!rq->name)
        rq->op = "QUERY";
}

/* NAME or NAME/N: the partition goes as property `partition`. */
static void build_resume(request_t *rq, char **args, int nargs, int argc, char **argv)
{
    no_opts(argc, argv);
    char *slash = nargs > 0 ? strrchr(args[0], '/') : NULL;
    rq->name = args[0];
    if (!slash || !slash[1] || strspn(slash + 1, "0123456789") != strlen(slash + 1))
        return;
    *slash = '\0';
    rq->props = json_object();
    json_object_set_new(rq->props, "partition", json_integer(strtoll(slash + 1, NULL, 10)));
}

static void build_group(request_t *rq, char **args, int nargs, int argc, char **argv)
{
    rq->props = json_object();
    json_object_set_new(rq->props, "topic", json_string(args[0]));
    if (nargs > 1)
        json_object_set_new(rq->props, "group", json_string(args[1]));
    if (strcmp(rq->op, "RESET") != 0)
        return no_opts(argc, argv);
    bool all;
    mqctl_build_reset(rq->props, argc, argv, &all);
    if (all && nargs > 1)
        mqctl_die_usage("group reset --all-groups names no GROUP");
    if (!all && nargs < 2)
        mqctl_die_usage("group reset needs TOPIC GROUP (or TOPIC --all-groups)");
}

/* NAME[/PARTITION] [--from OFFSET] [--count N] (`topic peek` and `peek`) */
static void build_peek(request_t *rq, char **args, int nargs, int argc, char **argv)
{
    (void)nargs;
    build_resume(rq, args, 1, 0, NULL); /* the same NAME/N split */
    if (!rq->props)
        rq->props = json_object();
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--group") == 0)
            mqctl_die_usage("peek consumes nothing: no --group (use receive --group)");
        bool from = strcmp(argv[i], "--from") == 0;
        if (!from && strcmp(argv[i], "--count") != 0)
            mqctl_die_usage("unexpected argument '%s'", argv[i]);
        if (i + 1 >= argc)
            mqctl_die_usage("%s needs a value", argv[i]);
        char *end;
        long long n = strtoll(argv[++i], &end, 10);
        if (*end || n < 0)
            mqctl_die_usage("%s needs a non-negative number", argv[i - 1]);
        json_object_set_new(rq->props, from ? "from" : "count", json_integer(n));
    }
}

static void build_group_list(request_t *rq, char **args, int nargs, int argc, char **argv)
{
    no_opts(argc, argv);
    if (nargs > 0) {
        rq->props = json_object();
        json_object_set_new(rq->props, "topic", json_string(args[0]));
    }
}

/* cluster elect TOPIC PARTITION NODE */
static void build_elect(request_t *rq, char **args, int nargs, int argc, char **argv)
{
    (void)nargs;
    no_opts(argc, argv);
    char *end;
    long long part = strtoll(args[1], &end, 10);
    if (*end || end == args[1] || part < 0 || part > UINT32_MAX)
        mqctl_die_usage("PARTITION must be a partition number");
    long long node = strtoll(args[2], &end, 10);
    if (*end || end == args[2] || node <= 0 || node > UINT32_MAX)
        mqctl_die_usage("NODE must be a node id (a positive number)");
    rq->props = json_pack("{s:s,s:I,s:I}", "topic", args[0], "partition", part, "node", node);
}

static const cmd_t cmds[] = {
    {"topic", "create", 1, 1, "CREATE", T_TOPIC, build_topic_opts, show_topic, NULL},
    {"topic", "list", 0, 0, "QUERY", T_TOPIC, build_name, show_topics, NULL},
    {"topic", "describe", 1, 1, "READ", T_TOPIC, build_name, show_topic, NULL},
    {"topic", "show", 1, 1, "READ", T_TOPIC, build_name, show_topic, NULL}, /* the same */
    {"topic", "alter", 1, 1, "UPDATE", T_TOPIC, build_topic_opts, show_topic, NULL},
    {"topic", "delete", 1, 1, "DELETE", T_TOPIC, build_name, NULL, "deleted topic %s"},
    {"topic", "resume", 1, 1, "RESUME", T_TOPIC, build_resume, show_topic, NULL},
    {"topic", "routes", 0, 1, "READ", T_ROUTE, build_routes, show_routes, NULL},
    {"group", "list", 0, 1, "QUERY", T_GROUP, build_group_list, show_groups, NULL},
    {"group", "describe", 2, 2, "READ", T_GROUP, build_group, show_group, NULL},
    {"group", "reset", 1, 2, "RESET", T_GROUP, build_group, show_reset, NULL},
    {"group", "delete", 2, 2, "DELETE", T_GROUP, build_group, NULL, "deleted group"},
    {"topic", "peek", 1, 1, "PEEK", T_TOPIC, build_peek, show_peek, NULL},
    {"peek", NULL, 1, 1, "PEEK", T_TOPIC, build_peek, show_peek, NULL}, /* the same */
    {"connection", "list", 0, 0, "QUERY", T_CONN, build_name, show_conns, NULL},
    {"link", "list", 0, 0, "QUERY", T_LINK, build_name, show_links, NULL},
    {"user", "list", 0, 0, "QUERY", "com.mqd:user", build_name, show_users, NULL},
    {"acl", "list", 0, 0, "QUERY", "com.mqd:acl", build_name, show_acl, NULL},
    {"connection", "close", 1, 1, "DELETE", T_CONN, build_name, NULL, "closed connection %s"},
    {"config", "show", 0, 0, "READ", T_CONFIG, build_name, show_config, NULL},
    {"status", NULL, 0, 0, "READ", T_BROKER, build_name, show_status, NULL},
    {"cluster", "status", 0, 0, "READ", T_CLUSTER, build_name, show_cluster, NULL},
    {"cluster", "elect", 3, 3, "ELECT", T_CLUSTER, build_elect, NULL, NULL},
    {"reload", NULL, 0, 0, "RELOAD", T_BROKER, build_name, NULL, "configuration reloaded"},
};

static int exit_code_of(int status)
{
    if (status >= 200 && status < 300)
        return EX_OK;
    switch (status) {
    case 401:
    case 403: return EX_REFUSED;
    case 404: return EX_NOTFOUND;
    case 409: return EX_CONFLICT;
    default: return EX_OTHER;
    }
}

/* A 404's name in mqd's words ("no topic 'ordrs'", not the Azure wording Event Hubs
 * clients need), and the closest existing name: one more request, a QUERY. */
static void explain_not_found(const mqctl_opts_t *o, request_t *rq)
{
    char name[256], topic[256]; /* %255[ below */
    if (sscanf(rq->desc, "The messaging entity '%255[^']' could not be found.", name) == 1)
        snprintf(rq->desc, sizeof rq->desc, "no topic '%s'", name);
    request_t q = {.op = "QUERY", .type = T_TOPIC};
    const char *key = "name";
    if (sscanf(rq->desc, "no group '%255[^']' on topic '%255[^']'", name, topic) == 2) {
        q.type = T_GROUP;
        q.props = json_pack("{s:s}", "topic", topic);
        key = "group";
    } else if (sscanf(rq->desc, "no topic '%255[^']'", name) != 1) {
        return;
    }
    if (mqctl_transact(o, &q) == EX_OK && json_is_array(q.reply)) {
        size_t n = json_array_size(q.reply), i;
        const char **names = calloc(n ? n : 1, sizeof *names);
        json_t *e;
        json_array_foreach(q.reply, i, e) if (names) names[i] = json_string_value(json_object_get(e, key));
        const char *best = names ? mqd_closest(name, names, n) : NULL;
        size_t l = strlen(rq->desc);
        if (best && strcmp(best, name) != 0)
            snprintf(rq->desc + l, sizeof rq->desc - l, " (did you mean '%s'?)", best);
        free(names);
    }
    json_decref(q.props);
    json_decref(q.reply);
}

static int output(const mqctl_opts_t *o, const cmd_t *c, request_t *rq)
{
    int ex = exit_code_of(rq->status);
    if (ex == EX_NOTFOUND)
        explain_not_found(o, rq);
    if (ex != EX_OK) {
        fprintf(stderr, "mqctl: %s (%d)\n", rq->desc[0] ? rq->desc : "request failed", rq->status);
        return ex;
    }
    if (o->json) {
        json_t *v = rq->reply ? json_incref(rq->reply) : json_pack("{s:i}", "status", rq->status);
        if (!rq->reply && rq->desc[0] && !c->show && !c->done) /* cluster elect's answer */
            json_object_set_new(v, "description", json_string(rq->desc));
        char *s = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        printf("%s\n", s ? s : "null");
        free(s);
        json_decref(v);
    } else if (c->show && rq->reply) {
        c->show(rq->reply);
    } else if (c->done) {
        printf(c->done, rq->name ? rq->name : "");
        printf("\n");
    } else if (rq->desc[0]) {
        printf("%s\n", rq->desc);
    }
    return EX_OK;
}

/* One global option at argv[i] (it may come before or after the command, as
 * `mqctl topic list --json` does); returns how many words it took, 0 if argv[i] is not
 * one. */
static int global_opt(int argc, char **argv, int i, mqctl_opts_t *o)
{
    static const char *const with_value[] = {"--url", "--ca", "--timeout"};
    const char *a = argv[i];
    if (strcmp(a, "--json") == 0 || strcmp(a, "--insecure") == 0) {
        *(a[2] == 'j' ? &o->json : &o->insecure) = true;
        return 1;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
        usage(stdout);
        exit(EX_OK);
    }
    if (strcmp(a, "--version") == 0) {
        printf("mqctl %s\n", PACKAGE_VERSION);
        exit(EX_OK);
    }
    for (size_t k = 0; k < MQD_ARRAY_LEN(with_value); k++) {
        if (strcmp(a, with_value[k]) != 0)
            continue;
        if (i + 1 >= argc)
            mqctl_die_usage("%s needs a value", a);
        const char *v = argv[i + 1];
        if (k == 0)
            o->url = v;
        else if (k == 1)
            o->ca = v;
        else if ((o->timeout_s = atof(v)) <= 0)
            mqctl_die_usage("--timeout needs a positive number of seconds, not '%s'", v);
        return 2;
    }
    return 0;
}

/* Takes the global options out of argv (wherever they are); returns the new argc. A
 * word after "--" is never an option. */
static int parse_globals(int argc, char **argv, mqctl_opts_t *o)
{
    int w = 1;
    bool rest = false;
    for (int i = 1; i < argc;) {
        int n = rest ? 0 : global_opt(argc, argv, i, o);
        if (!rest && strcmp(argv[i], "--") == 0) {
            rest = true;
            i++;
            continue;
        }
        if (n == 0) {
            if (w == 1 && argv[i][0] == '-')
                mqctl_die_usage("unknown option '%s'", argv[i]);
            argv[w++] = argv[i++];
        }
        i += n;
    }
    argv[w] = NULL;
    return w;
}

static const cmd_t *find_cmd(const char *noun, const char *verb)
{
    for (size_t i = 0; i < MQD_ARRAY_LEN(cmds); i++)
        if (strcmp(cmds[i].noun, noun) == 0 &&
            (cmds[i].verb == NULL || (verb && strcmp(cmds[i].verb, verb) == 0)))
            return &cmds[i];
    return NULL;
}

/* "unknown command 'topic lst' (did you mean 'topic list'?)" */
static void __attribute__((noreturn)) unknown_command(const char *noun, const char *verb)
{
    static const char *const io_cmds[] = {"send", "receive"};
    const char *cands[MQD_ARRAY_LEN(cmds) + MQD_ARRAY_LEN(io_cmds)];
    char full[MQD_ARRAY_LEN(cmds)][64], word[128];
    size_t n = 0;
    for (size_t i = 0; i < MQD_ARRAY_LEN(cmds); i++) {
        snprintf(full[i], sizeof full[i], "%s%s%s", cmds[i].noun, cmds[i].verb ? " " : "",
                 cmds[i].verb ? cmds[i].verb : "");
        cands[n++] = full[i];
    }
    for (size_t i = 0; i < MQD_ARRAY_LEN(io_cmds); i++)
        cands[n++] = io_cmds[i];
    bool noun_known = false; /* a known noun with a wrong verb: compare "noun verb" */
    for (size_t i = 0; i < MQD_ARRAY_LEN(cmds); i++)
        noun_known = noun_known || strcmp(cmds[i].noun, noun) == 0;
    snprintf(word, sizeof word, "%s%s%s", noun, verb && noun_known ? " " : "",
             verb && noun_known ? verb : "");
    const char *best = mqd_closest(word, cands, n);
    if (!best && verb && !noun_known) { /* "topc list" */
        snprintf(word, sizeof word, "%s %s", noun, verb);
        best = mqd_closest(word, cands, n);
    }
    if (best)
        mqctl_die_usage("unknown command '%s' (did you mean '%s'?)", word, best);
    mqctl_die_usage("unknown command '%s%s%s'", noun, verb ? " " : "", verb ? verb : "");
}

int main(int argc, char **argv)
{
    mqctl_opts_t o = {.url = getenv("MQCTL_URL"), .timeout_s = 10};
    if (!o.url)
        o.url = "amqp://127.0.0.1:5672";
    argc = parse_globals(argc, argv, &o);
    int i = 1;
    if (i >= argc) {
        usage(stderr);
        return EX_USAGE;
    }
    /* the console producer and consumer: not a management request */
    if (strcmp(argv[i], "send") == 0)
        return mqctl_send(&o, argc - i - 1, argv + i + 1);
    if (strcmp(argv[i], "receive") == 0)
        return mqctl_receive(&o, argc - i - 1, argv + i + 1);
    const cmd_t *c = find_cmd(argv[i], i + 1 < argc ? argv[i + 1] : NULL);
    if (!c)
        unknown_command(argv[i], i + 1 < argc ? argv[i + 1] : NULL);
    i += c->verb ? 2 : 1;
    int nargs = 0;
    while (i + nargs < argc && argv[i + nargs][0] != '-' && nargs < c->max_args)
        nargs++;
    if (nargs < c->min_args)
        mqctl_die_usage("%s%s%s needs %d argument%s", c->noun, c->verb ? " " : "",
                        c->verb ? c->verb : "", c->min_args, c->min_args == 1 ? "" : "s");
    request_t rq = {.op = c->op, .type = c->type};
    c->build(&rq, argv + i, nargs, argc - i - nargs, argv + i + nargs);
    int ex = mqctl_cluster_transact(&o, &rq);
    if (ex == EX_OK)
        ex = output(&o, c, &rq);
    json_decref(rq.props);
    json_decref(rq.body);
    json_decref(rq.reply);
    return ex;
}
