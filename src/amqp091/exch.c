/* amqp091/exch: exchanges (direct, fanout, topic, headers; the default exchange and the
 * predeclared amq.*), their bindings to queues (topics), and routing: the queues a publish
 * goes to. Durable exchanges and their bindings are kept in meta.db (amqp_exchanges,
 * amqp_bindings), loaded at the first use; the others live as long as the broker. */
#include "config.h"
#include "amqp091/amqp091_int.h"
#include "auth/auth.h"
#include "meta/meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EX_DIRECT, EX_FANOUT, EX_TOPIC, EX_HEADERS, EX__COUNT };
static const char *const ex_types[EX__COUNT] = {"direct", "fanout", "topic", "headers"};

enum { EXF_AUTO_DELETE = 1, EXF_INTERNAL = 2 };

typedef struct a091_bind {
    struct a091_bind *next;
    char *queue, *key;
    char *args;    /* a headers binding's arguments as stored (canonical JSON), "" else */
    a091_hdr_t hdr; /* a headers binding's match */
} a091_bind_t;

typedef struct a091_exch {
    struct a091_exch *next;
    char *name;
    int type;
    bool durable, builtin;
    uint32_t flags;
    a091_bind_t *binds;
} a091_exch_t;

static a091_exch_t *exchanges;
static bool loaded;

static int type_of(const char *s)
{
    for (int i = 0; i < EX__COUNT; i++)
        if (strcmp(s, ex_types[i]) == 0)
            return i;
    return -1;
}

static void bind_free(a091_bind_t *b)
{
    free(b->queue);
    free(b->key);
    free(b->args);
    a091_headers_clear(&b->hdr);
    free(b);
}

static void exch_free(a091_exch_t *e)
{
    while (e->binds) {
        a091_bind_t *b = e->binds;
        e->binds = b->next;
        bind_free(b);
    }
    free(e->name);
    free(e);
}

void a091_exch_free(void)
{
    while (exchanges) {
        a091_exch_t *e = exchanges;
        exchanges = e->next;
        exch_free(e);
    }
    loaded = false;
}

static a091_exch_t *exch_find(const char *name)
{
    for (a091_exch_t *e = exchanges; e; e = e->next)
        if (strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

static a091_exch_t *exch_add(const char *name, int type, bool durable, uint32_t flags)
{
    a091_exch_t *e = calloc(1, sizeof *e);
    if (!e || !(e->name = strdup(name))) {
        free(e);
        return NULL;
    }
    e->type = type;
    e->durable = durable;
    e->flags = flags;
    e->next = exchanges;
    exchanges = e;
    return e;
}

/* ---- loading: the predeclared exchanges, then meta.db's ---- */

static int load_exchange(const char *name, const char *type, uint32_t flags, void *arg)
{
    (void)arg;
    int t = type_of(type);
    if (t < 0 || exch_find(name)) {
        MQD_WARN("amqp091", "meta.db: exchange %s of type %s skipped", name, type);
        return 0;
    }
    return exch_add(name, t, true, flags) ? 0 : MQD_ENOMEM;
}

static a091_bind_t *bind_new(const char *queue, const char *key)
{
    a091_bind_t *b = calloc(1, sizeof *b);
    if (b && (!(b->queue = strdup(queue)) || !(b->key = strdup(key)))) {
        bind_free(b);
        return NULL;
    }
    return b;
}

static int load_binding(const mqd_meta_binding_t *mb, void *arg)
{
    (void)arg;
    a091_exch_t *e = exch_find(mb->exchange);
    a091_bind_t *b = e ? bind_new(mb->queue, mb->key) : NULL;
    int rc = !b ? MQD_ENOENT : e->type == EX_HEADERS ? a091_headers_load(mb->args_json, &b->hdr) : 0;
    if (rc == 0 && !(b->args = strdup(mb->args_json)))
        rc = MQD_ENOMEM;
    if (rc != 0) {
        MQD_WARN("amqp091", "meta.db: binding %s -> %s skipped", mb->exchange, mb->queue);
        if (b)
            bind_free(b);
        return 0;
    }
    b->next = e->binds;
    e->binds = b;
    return 0;
}

static void exch_load(mqd_server_t *s)
{
    static const struct {
        const char *name;
        int type;
    } pre[] = {{"amq.direct", EX_DIRECT},
               {"amq.fanout", EX_FANOUT},
               {"amq.topic", EX_TOPIC},
               {"amq.headers", EX_HEADERS},
               {"amq.match", EX_HEADERS}};
    if (loaded)
        return;
    loaded = true;
    for (size_t i = 0; i < MQD_ARRAY_LEN(pre); i++) {
        a091_exch_t *e = exch_add(pre[i].name, pre[i].type, true, 0);
        if (e)
            e->builtin = true;
    }
    mqd_meta_t *m = mqd_srv_meta(s);
    if (m && (mqd_meta_exchange_list(m, load_exchange, NULL) != 0 ||
              mqd_meta_binding_list(m, load_binding, NULL) != 0))
        MQD_ERR("amqp091", "exchanges and bindings of meta.db not all loaded");
}

/* ---- routing ---- */

static int targets_add(a091_targets_t *t, const char *q)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->q[i], q) == 0)
            return 0; /* a queue gets one copy however many bindings match */
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 8;
        const char **nq = realloc(t->q, cap * sizeof *nq);
        if (!nq)
            return MQD_ENOMEM;
        t->q = nq;
        t->cap = cap;
    }
    t->q[t->n++] = q;
    return 0;
}

void a091_targets_free(a091_targets_t *t)
{
    free(t->q);
    *t = (a091_targets_t){0};
}

int a091_exchange_check(a091_conn_t *c, const char *ex)
{
    if (!ex[0])
        return 0;
    exch_load(c->srv);
    const a091_exch_t *e = exch_find(ex);
    if (!e)
        return A091_NOT_FOUND;
    return e->flags & EXF_INTERNAL ? A091_ACCESS_REFUSED : 0;
}

int a091_route(a091_conn_t *c, const char *ex, const char *rk, const amqp_table_t *headers,
               a091_targets_t *out)
{
    if (!ex[0])
        return rk[0] ? targets_add(out, rk) : 0;
    exch_load(c->srv);
    const a091_exch_t *e = exch_find(ex);
    if (!e)
        return A091_NOT_FOUND;
    for (const a091_bind_t *b = e->binds; b; b = b->next) {
        bool hit = e->type == EX_FANOUT                  ? true
                   : e->type == EX_DIRECT                ? strcmp(b->key, rk) == 0
                   : e->type == EX_TOPIC                 ? a091_topic_match(b->key, rk)
                                                         : a091_headers_match(&b->hdr, headers);
        if (hit && targets_add(out, b->queue) != 0)
            return MQD_ENOMEM;
    }
    return 0;
}

/* ---- exchange.declare / delete ---- */

static bool visible(a091_conn_t *c, const char *name)
{
    return mqd_auth_user_may(c->srv, c->user, MQD_PERM_SEND, name) ||
           mqd_auth_user_may(c->srv, c->user, MQD_PERM_RECEIVE, name) ||
           mqd_auth_user_may(c->srv, c->user, MQD_PERM_MANAGE, name) ||
           mqd_auth_user_may(c->srv, c->user, MQD_PERM_CREATE, name);
}

/* A declared exchange the user may see (the predeclared ones: everyone); NULL after the
 * channel error (404 missing, 403 not visible). */
static a091_exch_t *exch_named(a091_conn_t *c, a091_chan_t *ch, const char *ex,
                               amqp_method_number_t id)
{
    exch_load(c->srv);
    a091_exch_t *e = exch_find(ex);
    bool vis = (e && e->builtin) || visible(c, ex);
    if (e && vis)
        return e;
    if (!vis)
        a091_chan_fail(c, ch, A091_ACCESS_REFUSED, "ACCESS_REFUSED - access to exchange '%s' refused",
                       ex, id);
    else
        a091_chan_fail(c, ch, A091_NOT_FOUND, "NOT_FOUND - no exchange '%s' in vhost '/'", ex, id);
    return NULL;
}

static int declare_new(a091_conn_t *c, a091_chan_t *ch, const char *ex, int type,
                       const amqp_exchange_declare_t *m)
{
    amqp_method_number_t id = AMQP_EXCHANGE_DECLARE_METHOD;
    if (strncmp(ex, "amq.", 4) == 0)
        return a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                              "ACCESS_REFUSED - exchange name '%s' contains reserved prefix 'amq.*'",
                              ex, id);
    if (!a091_may(c, MQD_PERM_CREATE, ex))
        return a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                              "ACCESS_REFUSED - declaring exchange '%s' refused (no 'create' right)",
                              ex, id);
    uint32_t flags = (m->auto_delete ? EXF_AUTO_DELETE : 0) | (m->internal ? EXF_INTERNAL : 0);
    mqd_meta_t *meta = mqd_srv_meta(c->srv);
    if (m->durable && meta && mqd_meta_exchange_put(meta, ex, ex_types[type], flags) != 0)
        return a091_chan_fail(c, ch, A091_INTERNAL_ERROR,
                              "INTERNAL_ERROR - exchange '%s' not stored in meta.db", ex, id);
    if (!exch_add(ex, type, m->durable, flags))
        return a091_chan_fail(c, ch, A091_RESOURCE_ERROR, "RESOURCE_ERROR - %s", "out of memory",
                              id);
    MQD_INFO("amqp091", "peer=%s user=%s declared %s exchange %s%s", c->peer, c->user,
             ex_types[type], ex, m->durable ? " (durable)" : "");
    return 0;
}

static int exchange_declare(a091_conn_t *c, a091_chan_t *ch, amqp_exchange_declare_t *m)
{
    amqp_method_number_t id = AMQP_EXCHANGE_DECLARE_METHOD;
    char ex[256], type[256];
    a091_cstr(m->exchange, ex);
    a091_cstr(m->type, type);
    if (!ex[0] && !m->passive)
        return a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                              "ACCESS_REFUSED - operation not permitted on the default exchange%s",
                              "", id);
    exch_load(c->srv);
    a091_exch_t *e = exch_find(ex);
    if (!ex[0]) {
        /* the default exchange exists (a passive declare of it) */
    } else if (m->passive || e) {
        if (!(e = exch_named(c, ch, ex, id)))
            return A091_NOT_FOUND;
        if (!m->passive && (type_of(type) != e->type || m->durable != e->durable))
            return a091_chan_fail(c, ch, A091_PRECONDITION_FAILED,
                                  "PRECONDITION_FAILED - inequivalent arg 'type' or 'durable' for "
                                  "exchange '%s' in vhost '/'",
                                  ex, id);
    } else {
        int t = type_of(type);
        if (t < 0) { /* a connection error in RabbitMQ too */
            a091_conn_error(c, A091_COMMAND_INVALID, "COMMAND_INVALID - unknown exchange type", id);
            return A091_COMMAND_INVALID;
        }
        int rc = declare_new(c, ch, ex, t, m);
        if (rc != 0)
            return rc;
    }
    if (m->nowait)
        return 0;
    amqp_exchange_declare_ok_t ok = {0};
    return a091_send_method(c, ch->id, AMQP_EXCHANGE_DECLARE_OK_METHOD, &ok);
}

static void exch_remove(mqd_server_t *s, a091_exch_t *e)
{
    mqd_meta_t *meta = mqd_srv_meta(s);
    if (e->durable && meta && mqd_meta_exchange_delete(meta, e->name) != 0)
        MQD_WARN("amqp091", "exchange %s: not deleted from meta.db", e->name);
    for (a091_exch_t **pp = &exchanges; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    exch_free(e);
}

static int exchange_delete(a091_conn_t *c, a091_chan_t *ch, amqp_exchange_delete_t *m)
{
    amqp_method_number_t id = AMQP_EXCHANGE_DELETE_METHOD;
    char ex[256];
    a091_cstr(m->exchange, ex);
    exch_load(c->srv);
    a091_exch_t *e = exch_find(ex);
    if (!ex[0] || (e && e->builtin))
        return a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                              "ACCESS_REFUSED - exchange '%s' is predeclared: not deleted", ex, id);
    if (!a091_may(c, MQD_PERM_MANAGE, ex))
        return a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                              "ACCESS_REFUSED - deleting exchange '%s' refused (needs 'manage')", ex,
                              id);
    if (e && m->if_unused && e->binds)
        return a091_chan_fail(c, ch, A091_PRECONDITION_FAILED,
                              "PRECONDITION_FAILED - exchange '%s' in use", ex, id);
    if (e) { /* a missing one is deleted already (RabbitMQ answers delete-ok too) */
        MQD_INFO("amqp091", "peer=%s user=%s deleted exchange %s", c->peer, c->user, ex);
        exch_remove(c->srv, e);
    }
    if (m->nowait)
        return 0;
    amqp_exchange_delete_ok_t ok = {0};
    return a091_send_method(c, ch->id, AMQP_EXCHANGE_DELETE_OK_METHOD, &ok);
}

/* ---- queue.bind / unbind ---- */

static a091_bind_t **bind_find(a091_exch_t *e, const char *q, const char *key, const char *args)
{
    for (a091_bind_t **pp = &e->binds; *pp; pp = &(*pp)->next) {
        const a091_bind_t *b = *pp;
        if (strcmp(b->queue, q) == 0 && strcmp(b->key, key) == 0 && strcmp(b->args, args) == 0)
            return pp;
    }
    return NULL;
}

static int bind_store(a091_conn_t *c, a091_exch_t *e, a091_bind_t *b, bool unbind)
{
    mqd_meta_t *meta = mqd_srv_meta(c->srv);
    if (!e->durable || !meta)
        return 0; /* a queue is a topic, always durable: the exchange decides */
    mqd_meta_binding_t mb = {e->name, b->queue, b->key, b->args};
    return unbind ? mqd_meta_binding_delete(meta, &mb) : mqd_meta_binding_put(meta, &mb);
}

/* The binding a queue.bind / unbind names, its arguments parsed; 0 or the reply code. */
static int bind_parse(a091_conn_t *c, a091_chan_t *ch, const a091_exch_t *e, const char *q,
                      const char *rk, const amqp_table_t *args, amqp_method_number_t id,
                      a091_bind_t **out)
{
    a091_bind_t *b = bind_new(q, rk);
    if (!b)
        return a091_chan_fail(c, ch, A091_RESOURCE_ERROR, "RESOURCE_ERROR - %s", "out of memory",
                              id);
    const char *why = NULL;
    int rc = e->type == EX_HEADERS ? a091_headers_parse(args, &b->hdr, &why) : 0;
    if (rc == 0 && !(b->args = strdup(e->type == EX_HEADERS ? b->hdr.args : "")))
        rc = A091_INTERNAL_ERROR;
    if (rc != 0) {
        bind_free(b);
        return a091_chan_fail(c, ch, rc == A091_PRECONDITION_FAILED ? rc : A091_INTERNAL_ERROR,
                              "PRECONDITION_FAILED - %s", why ? why : "binding arguments", id);
    }
    *out = b;
    return 0;
}

/* queue.bind and queue.unbind (whose struct has no nowait: bind's nowait is passed) */
static int queue_bind(a091_conn_t *c, a091_chan_t *ch, const amqp_queue_unbind_t *m, bool nowait,
                      bool unbind)
{
    amqp_method_number_t id = unbind ? AMQP_QUEUE_UNBIND_METHOD : AMQP_QUEUE_BIND_METHOD;
    char q[256], ex[256], rk[256];
    a091_cstr(m->queue, q);
    a091_cstr(m->exchange, ex);
    a091_cstr(m->routing_key, rk);
    if (!ex[0])
        return a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                              "ACCESS_REFUSED - operation not permitted on the default exchange%s",
                              "", id);
    a091_exch_t *e = exch_named(c, ch, ex, id);
    if (!e || !a091_queue_topic(c, ch, q, false, id))
        return A091_NOT_FOUND;
    if (!a091_may(c, MQD_PERM_MANAGE, q))
        return a091_chan_fail(c, ch, A091_ACCESS_REFUSED,
                              "ACCESS_REFUSED - binding queue '%s' refused (needs 'manage')", q, id);
    a091_bind_t *b = NULL;
    int rc = bind_parse(c, ch, e, q, rk, &m->arguments, id, &b);
    if (rc != 0)
        return rc;
    a091_bind_t **have = bind_find(e, b->queue, b->key, b->args);
    if (!unbind && !have && bind_store(c, e, b, false) == 0) {
        b->next = e->binds;
        e->binds = b;
        b = NULL;
    } else if (unbind && have && bind_store(c, e, *have, true) == 0) {
        a091_bind_t *gone = *have;
        *have = gone->next;
        bind_free(gone);
    } else if ((!unbind && !have) || (unbind && have)) {
        bind_free(b);
        return a091_chan_fail(c, ch, A091_INTERNAL_ERROR,
                              "INTERNAL_ERROR - binding of queue '%s' not stored in meta.db", q, id);
    }
    if (b)
        bind_free(b);
    if (unbind && !e->binds && (e->flags & EXF_AUTO_DELETE) && !e->builtin)
        exch_remove(c->srv, e); /* an auto-delete exchange goes with its last binding */
    if (unbind) {
        amqp_queue_unbind_ok_t ok = {0};
        return a091_send_method(c, ch->id, AMQP_QUEUE_UNBIND_OK_METHOD, &ok);
    }
    if (nowait)
        return 0;
    amqp_queue_bind_ok_t ok = {0};
    return a091_send_method(c, ch->id, AMQP_QUEUE_BIND_OK_METHOD, &ok);
}

void a091_exch_queue_gone(const char *q)
{
    for (a091_exch_t *e = exchanges; e; e = e->next)
        for (a091_bind_t **pp = &e->binds; *pp;) {
            a091_bind_t *b = *pp;
            if (strcmp(b->queue, q) == 0) {
                *pp = b->next;
                bind_free(b);
            } else {
                pp = &b->next;
            }
        }
}

int a091_exchange_method(a091_conn_t *c, a091_chan_t *ch, amqp_method_number_t id, void *m)
{
    switch (id) {
    case AMQP_EXCHANGE_DECLARE_METHOD: return exchange_declare(c, ch, m);
    case AMQP_EXCHANGE_DELETE_METHOD: return exchange_delete(c, ch, m);
    case AMQP_QUEUE_UNBIND_METHOD: return queue_bind(c, ch, m, false, true);
    case AMQP_QUEUE_BIND_METHOD: {
        const amqp_queue_bind_t *b = m;
        amqp_queue_unbind_t u = {.ticket = b->ticket,
                                 .queue = b->queue,
                                 .exchange = b->exchange,
                                 .routing_key = b->routing_key,
                                 .arguments = b->arguments};
        return queue_bind(c, ch, &u, b->nowait, false);
    }
    default:
        return a091_chan_fail(c, ch, A091_NOT_IMPLEMENTED,
                              "NOT_IMPLEMENTED - %s (exchange-to-exchange bindings)",
                              amqp_method_name(id), id);
    }
}
