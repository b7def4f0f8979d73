/* mqctl send / receive: a console producer and consumer (Kafka's kafka-console-producer
 * and -consumer, rabbitmqadmin publish / get). One connection, one link, bounded in
 * time: send waits until the broker settled every message; receive stops after --count
 * messages or once none arrived for --idle seconds. */
#include "config.h"
#include "mqd.h"
#include "mgmt/mgmt_json.h"
#include "tools/mqctl.h"

#include <jansson.h>
#include <proton/condition.h>
#include <proton/delivery.h>
#include <proton/link.h>
#include <proton/message.h>
#include <proton/proactor.h>
#include <proton/session.h>
#include <proton/terminus.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SELECTOR "apache.org:selector-filter:string"
#define CREDIT_WINDOW 100

typedef struct io {
    const mqctl_opts_t *o;
    pn_proactor_t *px;
    pn_connection_t *conn;
    pn_link_t *link;
    mqd_sasl_client_t sasl;
    bool opened, done;
    bool idle_stop; /* --idle passed without a message: close at the next wake */
    int err;
    char errmsg[512];
    pn_rwbytes_t buf;
    /* send */
    char **bodies;
    size_t n_bodies, next, settled, accepted;
    const char *key;
    json_t *props;   /* application properties (owned) or NULL */
    bool body_json;  /* each body is JSON, sent as the AMQP value it maps to */
    json_t *refused; /* [{index, state, condition, description}] (owned) */
    /* receive */
    long count; /* stop after this many (0: no limit) */
    double idle_s;
    bool consume; /* a group's: accepted = consumed; else browsed */
    json_t *msgs; /* what --json prints (owned) */
} io_t;

static void io_fail(io_t *io, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void io_fail(io_t *io, int code, const char *fmt, ...)
{
    if (!io->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(io->errmsg, sizeof io->errmsg, fmt, ap);
        va_end(ap);
        io->err = code;
    }
    pn_connection_close(io->conn);
}

static void fail_cond(io_t *io, pn_condition_t *c, int dflt)
{
    const char *name = c && pn_condition_is_set(c) ? pn_condition_get_name(c) : NULL;
    const char *desc = name ? pn_condition_get_description(c) : NULL;
    if (!name)
        return io_fail(io, dflt, "closed by the broker");
    /* the link's conditions come with EX_OTHER, the connection's with EX_CONN */
    io_fail(io, mqctl_exit_of_cond(name, dflt != EX_CONN, EX_OTHER), "%s%s%s", name,
            desc ? ": " : "", desc ? desc : "");
}

/* ---------------------------------------------------------------- send */

static int build_message(io_t *io, const char *text, pn_message_t *m)
{
    pn_message_set_durable(m, true);
    pn_data_t *body = pn_message_body(m);
    if (io->body_json) {
        json_error_t je;
        json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
        int rc = v ? mqd_mgmt_json_to_data(body, v, 0) : -1;
        json_decref(v);
        if (rc != 0)
            return MQD_EINVAL;
    } else {
        pn_data_put_string(body, pn_bytes(strlen(text), text));
    }
    if (io->key) {
        pn_data_t *ma = pn_message_annotations(m);
        pn_data_put_map(ma);
        pn_data_enter(ma);
        pn_data_put_symbol(ma, pn_bytes(strlen("x-opt-partition-key"), "x-opt-partition-key"));
        pn_data_put_string(ma, pn_bytes(strlen(io->key), io->key));
        pn_data_exit(ma);
    }
    if (io->props)
        mqd_mgmt_json_to_data(pn_message_properties(m), io->props, 0);
    return mqctl_msg_encode(m, &io->buf, 1u << 28);
}

static void send_more(io_t *io)
{
    while (io->next < io->n_bodies && pn_link_credit(io->link) > 0) {
        pn_message_t *m = pn_message();
        int rc = build_message(io, io->bodies[io->next], m);
        pn_message_free(m);
        if (rc != 0)
            return io_fail(io, rc == MQD_EINVAL && io->body_json ? EX_USAGE : EX_OTHER,
                           "message %zu: %s", io->next + 1,
                           io->body_json ? "not JSON (--body-json)" : "cannot encode it");
        char tag[24];
        int tl = snprintf(tag, sizeof tag, "%zu", io->next);
        pn_delivery_t *d = pn_delivery(io->link, pn_dtag(tag, (size_t)tl));
        pn_delivery_set_context(d, (void *)(uintptr_t)io->next);
        pn_link_send(io->link, io->buf.start, io->buf.size);
        pn_link_advance(io->link);
        io->next++;
    }
}

static const char *state_name(uint64_t st)
{
    switch (st) {
    case PN_ACCEPTED: return "accepted";
    case PN_REJECTED: return "rejected";
    case PN_RELEASED: return "released";
    case PN_MODIFIED: return "modified";
    default: return "unknown";
    }
}

static void send_settled(io_t *io, pn_delivery_t *d)
{
    uint64_t st = pn_delivery_remote_state(d);
    if (!st || !pn_delivery_settled(d))
        return;
    size_t idx = (size_t)(uintptr_t)pn_delivery_get_context(d);
    if (st == PN_ACCEPTED) {
        io->accepted++;
    } else {
        pn_condition_t *c = pn_disposition_condition(pn_delivery_remote(d));
        const char *cn = pn_condition_is_set(c) ? pn_condition_get_name(c) : NULL;
        const char *cd = cn ? pn_condition_get_description(c) : NULL;
        json_array_append_new(io->refused,
                              json_pack("{s:I, s:s, s:s?, s:s?}", "index", (json_int_t)idx, "state",
                                        state_name(st), "condition", cn, "description", cd));
    }
    pn_delivery_settle(d);
    /* --timeout bounds a wait without progress, not the whole of a long stdin */
    pn_proactor_set_timeout(io->px, (pn_millis_t)(io->o->timeout_s * 1000));
    if (++io->settled == io->n_bodies) {
        io->done = true;
        pn_connection_close(io->conn);
    }
}

/* ---------------------------------------------------------------- receive */

static json_t *ann_get(json_t *ann, const char *k)
{
    return ann ? json_object_get(ann, k) : NULL;
}

static json_t *section(pn_data_t *d)
{
    pn_data_rewind(d);
    return pn_data_next(d) ? mqd_mgmt_data_to_json(d, 0) : NULL;
}

/* One message as {partition, offset, enqueued_time, key, body, properties, subject}. */
static json_t *message_json(pn_message_t *m)
{
    json_t *ann = section(pn_message_annotations(m));
    json_t *props = section(pn_message_properties(m));
    json_t *body = section(pn_message_body(m));
    json_t *off = ann_get(ann, "x-opt-offset");
    json_t *o = json_pack(
        "{s:O?, s:I, s:O?, s:O?, s:o?, s:o?, s:s?}", "partition",
        ann_get(ann, "x-opt-partition-id"), "offset",
        (json_int_t)(json_is_string(off) ? strtoll(json_string_value(off), NULL, 10) : -1),
        "enqueued_time", ann_get(ann, "x-opt-enqueued-time"), "key",
        ann_get(ann, "x-opt-partition-key"), "body", body ? body : json_null(), "properties",
        props ? props : json_object(), "subject", pn_message_get_subject(m));
    json_decref(ann);
    return o;
}

static void print_message(json_t *o)
{
    json_t *key = json_object_get(o, "key"), *body = json_object_get(o, "body");
    printf("%lld/%lld", (long long)json_integer_value(json_object_get(o, "partition")),
           (long long)json_integer_value(json_object_get(o, "offset")));
    if (json_is_string(key))
        printf(" key=%s", json_string_value(key));
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(o, "properties"), k, v)
    {
        char *t = json_is_string(v) ? NULL : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        printf(" %s=%s", k, t ? t : json_string_value(v));
        free(t);
    }
    char *t = json_is_string(body) ? NULL : json_dumps(body, JSON_ENCODE_ANY | JSON_COMPACT);
    printf("  %s\n", t ? t : json_string_value(body));
    free(t);
    fflush(stdout);
}

static void grant(io_t *io)
{
    long want = CREDIT_WINDOW;
    if (io->count)
        want = io->count - (long)json_array_size(io->msgs) - pn_link_credit(io->link);
    if (want > CREDIT_WINDOW)
        want = CREDIT_WINDOW;
    if (want > 0 && pn_link_credit(io->link) < CREDIT_WINDOW / 2)
        pn_link_flow(io->link, (int)want);
}

static void on_message(io_t *io, pn_delivery_t *d)
{
    pn_message_t *m = NULL;
    int rc = mqctl_msg_recv(io->link, d, &io->buf, &m);
    if (rc != 0)
        return io_fail(io, EX_OTHER, rc == MQD_ENOMEM ? "out of memory" : "undecodable message");
    json_t *o = message_json(m);
    pn_message_free(m);
    pn_delivery_update(d, PN_ACCEPTED); /* a group's: consumed; a browser's: just settled */
    pn_delivery_settle(d);
    if (!io->o->json)
        print_message(o);
    json_array_append_new(io->msgs, o);
    pn_proactor_set_timeout(io->px, (pn_millis_t)(io->idle_s * 1000));
    if (io->count && (long)json_array_size(io->msgs) >= io->count) {
        io->done = true;
        pn_connection_close(io->conn);
        return;
    }
    grant(io);
}

/* ---------------------------------------------------------------- the loop */

static bool handle(void *arg, pn_event_t *e)
{
    io_t *io = arg;
    pn_delivery_t *d;
    switch (pn_event_type(e)) {
    case PN_LINK_REMOTE_OPEN:
        io->opened = pn_link_remote_source(io->link) || pn_link_remote_target(io->link);
        if (pn_link_is_sender(io->link))
            send_more(io);
        else
            pn_proactor_set_timeout(io->px, (pn_millis_t)(io->idle_s * 1000));
        break;
    case PN_LINK_FLOW:
        if (pn_link_is_sender(io->link))
            send_more(io);
        break;
    case PN_DELIVERY:
        d = pn_event_delivery(e);
        if (pn_link_is_sender(io->link))
            send_settled(io, d);
        else if (pn_delivery_readable(d) && !pn_delivery_partial(d))
            on_message(io, d);
        break;
    case PN_LINK_REMOTE_CLOSE:
        if (!io->done)
            fail_cond(io, pn_link_remote_condition(io->link), EX_OTHER);
        break;
    case PN_CONNECTION_REMOTE_CLOSE:
        if (!io->done)
            fail_cond(io, pn_connection_remote_condition(io->conn), EX_CONN);
        pn_connection_close(io->conn);
        break;
    case PN_TRANSPORT_CLOSED:
        pn_proactor_cancel_timeout(io->px);
        if (!io->done && io->sasl.error[0])
            io_fail(io, EX_AUTH, "authentication failed: %s", io->sasl.error);
        else if (!io->done)
            fail_cond(io, pn_transport_condition(pn_event_transport(e)), EX_CONN);
        break;
    case PN_CONNECTION_WAKE:
        if (io->idle_stop && !io->done) {
            io->done = true; /* idle: everything there was has arrived */
            pn_connection_close(io->conn);
        }
        break;
    case PN_PROACTOR_TIMEOUT:
        /* not the connection's batch: it closes in its own (PN_CONNECTION_WAKE) */
        if (!io->done && !pn_link_is_sender(io->link) && io->opened) {
            io->idle_stop = true;
            pn_connection_wake(io->conn);
        } else if (!io->done) {
            io_fail(io, EX_CONN, "%s within the timeout",
                    io->opened ? "not every message was settled" : "no answer");
            pn_proactor_disconnect(io->px, NULL);
        }
        break;
    case PN_PROACTOR_INACTIVE: return false;
    default: break;
    }
    return true;
}

/* Connects, attaches io->link (made by `attach`), runs until done; the exit code. */
static int run(io_t *io, void (*attach)(io_t *, pn_session_t *, void *), void *arg)
{
    mqctl_url_t u;
    if (mqctl_parse_url(io->o->url, &u) != 0)
        mqctl_die_usage("bad URL '%s'", io->o->url);
    io->px = pn_proactor();
    io->conn = pn_connection();
    pn_transport_t *t = pn_transport();
    mqctl_conn_setup(io->conn, t, &u, io->o, &io->sasl);
    pn_session_t *ss = pn_session(io->conn);
    pn_session_open(ss);
    attach(io, ss, arg);
    pn_connection_open(io->conn);
    mqctl_run(io->px, io->conn, t, &u, io->o->timeout_s, handle, io);
    mqd_sasl_client_clear(&io->sasl);
    free(io->buf.start);
    if (!io->done && !io->err)
        io_fail(io, EX_CONN, "connection closed early");
    if (io->err)
        fprintf(stderr, "mqctl: %s:%s: %s\n", u.host, u.port, io->errmsg);
    return io->err;
}

/* ---------------------------------------------------------------- commands */

static const char *opt_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc)
        mqctl_die_usage("%s needs a value", argv[*i]);
    return argv[++*i];
}

static void add_prop(io_t *io, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        mqctl_die_usage("--property needs KEY=VALUE");
    if (!io->props)
        io->props = json_object();
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
    json_object_set_new(io->props, key, json_string(eq + 1));
}

/* Bodies from stdin: one message per line (the newline is not part of it). */
static void read_lines(io_t *io)
{
    char *line = NULL;
    size_t cap = 0, n = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        if (len > 0 && line[len - 1] == '\n')
            line[--len] = '\0';
        char **nb = realloc(io->bodies, (n + 1) * sizeof *nb);
        if (!nb || !(nb[n] = strdup(line))) {
            fprintf(stderr, "mqctl: out of memory reading stdin\n");
            exit(EX_OTHER);
        }
        io->bodies = nb;
        n++;
    }
    free(line);
    io->n_bodies = n;
}

static void attach_sender(io_t *io, pn_session_t *ss, void *arg)
{
    io->link = pn_sender(ss, "mqctl-send");
    pn_terminus_set_address(pn_link_target(io->link), arg);
    pn_link_set_snd_settle_mode(io->link, PN_SND_UNSETTLED);
    pn_link_open(io->link);
}

int mqctl_send(const mqctl_opts_t *o, int argc, char **argv)
{
    io_t io = {.o = o, .refused = json_array()};
    const char *topic = NULL, *part = NULL;
    char **args = calloc((size_t)argc + 1, sizeof *args);
    size_t nargs = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--key") == 0)
            io.key = opt_value(argc, argv, &i);
        else if (strcmp(argv[i], "--partition") == 0)
            part = opt_value(argc, argv, &i);
        else if (strcmp(argv[i], "--property") == 0)
            add_prop(&io, opt_value(argc, argv, &i));
        else if (strcmp(argv[i], "--body-json") == 0)
            io.body_json = true;
        else if (argv[i][0] == '-' && argv[i][1])
            mqctl_die_usage("send: unknown option '%s'", argv[i]);
        else if (!topic)
            topic = argv[i];
        else
            args[nargs++] = argv[i];
    }
    if (!topic)
        mqctl_die_usage("send needs a TOPIC");
    if (part && strspn(part, "0123456789") != strlen(part))
        mqctl_die_usage("--partition needs a number, not '%s'", part);
    if (nargs) {
        io.bodies = args;
        io.n_bodies = nargs;
    } else {
        free(args);
        args = NULL;
        read_lines(&io);
    }
    char addr[1024];
    snprintf(addr, sizeof addr, part ? "%s/Partitions/%s" : "%s", topic, part ? part : "");
    int ex = 0;
    if (io.n_bodies == 0)
        io.done = true;
    else
        ex = run(&io, attach_sender, addr);
    if (ex == EX_OK && io.accepted < io.n_bodies)
        ex = EX_OTHER;
    if (o->json) {
        json_t *r = json_pack("{s:s, s:I, s:I, s:O}", "topic", topic, "sent", (json_int_t)io.next,
                              "accepted", (json_int_t)io.accepted, "refused", io.refused);
        char *s = json_dumps(r, JSON_INDENT(2) | JSON_SORT_KEYS);
        printf("%s\n", s ? s : "null");
        free(s);
        json_decref(r);
    } else if (io.done) {
        printf("sent %zu message%s to %s: %zu accepted\n", io.next, io.next == 1 ? "" : "s", addr,
               io.accepted);
    }
    size_t i;
    json_t *v;
    json_array_foreach(io.refused, i, v)
        fprintf(stderr, "mqctl: message %lld %s: %s %s\n",
                (long long)json_integer_value(json_object_get(v, "index")) + 1,
                json_string_value(json_object_get(v, "state")),
                json_string_value(json_object_get(v, "condition")) ?: "",
                json_string_value(json_object_get(v, "description")) ?: "");
    if (!args)
        for (size_t k = 0; k < io.n_bodies; k++)
            free(io.bodies[k]);
    free(io.bodies);
    json_decref(io.refused);
    json_decref(io.props);
    return ex;
}

typedef struct rcv_args {
    const char *address;
    const char *expr; /* selector filter, or NULL */
    bool browse;
} rcv_args_t;

static void attach_receiver(io_t *io, pn_session_t *ss, void *arg)
{
    rcv_args_t *ra = arg;
    io->link = pn_receiver(ss, "mqctl-receive");
    pn_terminus_t *src = pn_link_source(io->link);
    pn_terminus_set_address(src, ra->address);
    if (ra->browse)
        pn_terminus_set_distribution_mode(src, PN_DIST_MODE_COPY);
    if (ra->expr) {
        pn_data_t *f = pn_terminus_filter(src);
        pn_data_put_map(f);
        pn_data_enter(f);
        pn_data_put_symbol(f, pn_bytes(strlen(SELECTOR), SELECTOR));
        pn_data_put_described(f);
        pn_data_enter(f);
        pn_data_put_symbol(f, pn_bytes(strlen(SELECTOR), SELECTOR));
        pn_data_put_string(f, pn_bytes(strlen(ra->expr), ra->expr));
        pn_data_exit(f);
        pn_data_exit(f);
    }
    pn_link_open(io->link);
    grant(io);
}

/* --from earliest|latest|OFFSET as the Event Hubs selector on x-opt-offset. */
static const char *from_expr(const char *from, char *buf, size_t len)
{
    if (!from)
        return NULL;
    if (strcasecmp(from, "earliest") == 0)
        return "amqp.annotation.x-opt-offset > '-1'";
    if (strcasecmp(from, "latest") == 0)
        return "amqp.annotation.x-opt-offset > '@latest'";
    if (!*from || strspn(from, "0123456789") != strlen(from))
        mqctl_die_usage("--from needs earliest, latest or an offset, not '%s'", from);
    snprintf(buf, len, "amqp.annotation.x-opt-offset >= '%s'", from);
    return buf;
}

int mqctl_receive(const mqctl_opts_t *o, int argc, char **argv)
{
    io_t io = {.o = o, .idle_s = 2, .msgs = json_array()};
    const char *topic = NULL, *group = NULL, *from = NULL;
    for (int i = 0; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--group") == 0) {
            group = opt_value(argc, argv, &i);
        } else if (strcmp(argv[i], "--from") == 0) {
            from = opt_value(argc, argv, &i);
        } else if (strcmp(argv[i], "--count") == 0) {
            const char *v = opt_value(argc, argv, &i);
            if ((io.count = strtol(v, &end, 10)) <= 0 || *end)
                mqctl_die_usage("--count needs a positive number, not '%s'", v);
        } else if (strcmp(argv[i], "--idle") == 0) {
            const char *v = opt_value(argc, argv, &i);
            if ((io.idle_s = strtod(v, &end)) <= 0 || *end)
                mqctl_die_usage("--idle needs a positive number of seconds, not '%s'", v);
        } else if (argv[i][0] == '-' && argv[i][1]) {
            mqctl_die_usage("receive: unknown option '%s'", argv[i]);
        } else if (!topic) {
            topic = argv[i];
        } else {
            mqctl_die_usage("unexpected argument '%s'", argv[i]);
        }
    }
    if (!topic)
        mqctl_die_usage("receive needs a TOPIC");
    char addr[1024], eb[128];
    /* without a group nothing is consumed: a browse from the start */
    snprintf(addr, sizeof addr, group ? "%s/ConsumerGroups/%s" : "%s", topic, group ? group : "");
    rcv_args_t ra = {.address = addr,
                     .expr = from_expr(from    ? from
                                       : group ? NULL
                                               : "earliest",
                                       eb, sizeof eb),
                     .browse = !group};
    io.consume = group != NULL;
    int ex = run(&io, attach_receiver, &ra);
    if (o->json && ex == EX_OK) {
        char *s = json_dumps(io.msgs, JSON_INDENT(2) | JSON_SORT_KEYS);
        printf("%s\n", s ? s : "null");
        free(s);
    } else if (ex == EX_OK && json_array_size(io.msgs) == 0) {
        fprintf(stderr, "mqctl: no message in %s\n", addr);
    }
    json_decref(io.msgs);
    return ex;
}
