/* The console's JSON API: one route per page need, each answered by the `$management`
 * handlers through mqd_mgmt_call, whose reply bodies go through the same AMQP-to-JSON
 * conversion as mqctl --json (mgmt_json.c): the same fields, from the same code.
 *   GET  overview                            com.mqd:broker READ (+ totals of the topics)
 *   GET  topics | topics/T                   com.mqd:topic QUERY | READ
 *   GET  topics/T/partitions                 READ's partition_info
 *   GET  topics/T/groups                     com.mqd:consumergroup QUERY (topic T)
 *   GET  topics/T/partitions/N/messages      com.mqd:topic PEEK (?from=O&count=C)
 *   GET  groups | groups/T/G                 com.mqd:consumergroup QUERY | READ
 *   POST groups/T/G/reset {"to","value"} or {"shift"}, "partitions", "dry_run"
 *                                            com.mqd:consumergroup RESET
 *   GET  connections | links                 com.mqd:connection QUERY | com.mqd:link QUERY
 *   POST connections/ID/close                com.mqd:connection CLOSE (amqp:connection:forced)
 *   POST topics/T/alter {"partitions","config"} | topics/T/delete   com.mqd:topic UPDATE | DELETE
 *   GET  users | acl                         com.mqd:user QUERY | com.mqd:acl QUERY
 *   GET  history?series=S&resolution=R       com.mqd:broker HISTORY (the charts' past)
 *   GET  cluster                             com.mqd:cluster READ (nodes, controller, every
 *                                            partition's leader, replicas, ISR; 404 if none)
 * GET needs `monitor` (or `manage`) on $management, PEEK also `browse` on the topic, a
 * POST `manage`. */
#include "config.h"
#include "auth/auth.h"
#include "console/console_int.h"
#include "mgmt/mgmt.h"
#include "core/core.h"

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <sys/queue.h>
#include <string.h>

#define T_BROKER "com.mqd:broker"
#define T_TOPIC "com.mqd:topic"
#define T_GROUP "com.mqd:consumergroup"
#define T_CONN "com.mqd:connection"
#define T_LINK "com.mqd:link"

typedef struct call {
    mqd_console_t *k;
    struct evhttp_request *req;
    mqd_console_sess_t *ss;
    const char **segs;
    int n;
} call_t;

/* Runs type/op with args (stolen); *out the reply body on success (else replied). */
static int mgmt(call_t *c, const char *type, const char *op, json_t *args, json_t **out)
{
    char desc[256];
    json_t *reply = NULL;
    int st = mqd_mgmt_call(c->k->srv, c->ss->user, type, op, args, &reply, desc, sizeof desc);
    json_decref(args);
    if (st == 401) /* a right this user lacks on that topic: 401 would mean "log in" here */
        st = 403;
    if (st >= 300) {
        json_decref(reply);
        mqd_console_reply_error(c->req, st, desc);
        return st;
    }
    *out = reply ? reply : json_pack("{s:i, s:s}", "status", st, "description", desc);
    return 0;
}

static void answer(call_t *c, const char *type, const char *op, json_t *args)
{
    json_t *out;
    if (mgmt(c, type, op, args, &out) == 0)
        mqd_console_reply_json(c->req, 200, out);
}

static json_t *named(const char *name)
{
    return json_pack("{s:s}", "name", name);
}

/* The broker's READ and, for the overview's rate chart, the sums of the topic counters
 * (QUERY's messages_in, ... summed: no count of its own). */
static void overview(call_t *c)
{
    json_t *b, *topics;
    if (mgmt(c, T_BROKER, "READ", NULL, &b) != 0)
        return;
    if (mgmt(c, T_TOPIC, "QUERY", NULL, &topics) != 0) {
        json_decref(b);
        return;
    }
    static const char *const sums[] = {"messages_in", "messages_out", "bytes_in", "bytes_out",
                                       "size_bytes"};
    for (size_t i = 0; i < MQD_ARRAY_LEN(sums); i++) {
        json_int_t total = 0;
        size_t j;
        json_t *t;
        json_array_foreach(topics, j, t) total += json_integer_value(json_object_get(t, sums[i]));
        json_object_set_new(b, sums[i], json_integer(total));
    }
    json_decref(topics);
    mqd_console_reply_json(c->req, 200, b);
}

static void partitions(call_t *c, const char *topic)
{
    json_t *t;
    if (mgmt(c, T_TOPIC, "READ", named(topic), &t) != 0)
        return;
    json_t *p = json_incref(json_object_get(t, "partition_info"));
    json_decref(t);
    mqd_console_reply_json(c->req, 200, p ? p : json_array());
}

/* The query string's keys[] (those present, non-empty) into args as strings, then runs
 * type/op; a query string that does not parse is 400. */
static void answer_query(call_t *c, const char *type, const char *op, json_t *args,
                         const char *const *keys, size_t n)
{
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(c->req));
    struct evkeyvalq q;
    TAILQ_INIT(&q);
    if (query && evhttp_parse_query_str(query, &q) != 0) {
        json_decref(args);
        return mqd_console_reply_error(c->req, 400, "bad query string");
    }
    for (size_t i = 0; i < n; i++) {
        const char *v = evhttp_find_header(&q, keys[i]);
        if (v && *v)
            json_object_set_new(args, keys[i], json_string(v));
    }
    evhttp_clear_headers(&q);
    answer(c, type, op, args);
}

static void peek(call_t *c, const char *topic, const char *part)
{
    if (!mqd_auth_user_may(c->k->srv, c->ss->user, MQD_PERM_BROWSE, topic))
        return mqd_console_reply_error(c->req, 403, "peek needs the browse right on the topic");
    static const char *const keys[] = {"from", "count"};
    answer_query(c, T_TOPIC, "PEEK", json_pack("{s:s, s:s}", "name", topic, "partition", part), keys,
                 MQD_ARRAY_LEN(keys));
}

/* GET history?series=broker|topic/T|group/T/G&resolution=5s|1m */
static void history(call_t *c)
{
    static const char *const keys[] = {"series", "resolution"};
    answer_query(c, T_BROKER, "HISTORY", json_object(), keys, MQD_ARRAY_LEN(keys));
}

static void get_route(call_t *c)
{
    const char **s = c->segs;
    int n = c->n;
    if (n == 2 && strcmp(s[1], "overview") == 0)
        return overview(c);
    if (strcmp(s[1], "topics") == 0) {
        if (n == 2)
            return answer(c, T_TOPIC, "QUERY", NULL);
        if (n == 3)
            return answer(c, T_TOPIC, "READ", named(s[2]));
        if (n == 4 && strcmp(s[3], "partitions") == 0)
            return partitions(c, s[2]);
        if (n == 4 && strcmp(s[3], "groups") == 0)
            return answer(c, T_GROUP, "QUERY", named(s[2]));
        if (n == 6 && strcmp(s[3], "partitions") == 0 && strcmp(s[5], "messages") == 0)
            return peek(c, s[2], s[4]);
    }
    if (strcmp(s[1], "groups") == 0) {
        if (n == 2)
            return answer(c, T_GROUP, "QUERY", NULL);
        if (n == 4)
            return answer(c, T_GROUP, "READ",
                          json_pack("{s:s, s:s}", "topic", s[2], "group", s[3]));
    }
    if (n == 2 && strcmp(s[1], "connections") == 0)
        return answer(c, T_CONN, "QUERY", NULL);
    if (n == 2 && strcmp(s[1], "links") == 0)
        return answer(c, T_LINK, "QUERY", NULL);
    if (n == 2 && strcmp(s[1], "users") == 0)
        return answer(c, "com.mqd:user", "QUERY", NULL);
    if (n == 2 && strcmp(s[1], "acl") == 0)
        return answer(c, "com.mqd:acl", "QUERY", NULL);
    if (n == 2 && strcmp(s[1], "history") == 0)
        return history(c);
    if (n == 2 && strcmp(s[1], "cluster") == 0)
        return answer(c, "com.mqd:cluster", "READ", NULL);
    mqd_console_reply_error(c->req, 404, "no such API route");
}

/* {"to": "earliest|latest|offset|time", "value": N} or {"shift": N}, and optionally
 * "partitions": "0,2" and "dry_run": true (the page's preview) */
static void reset(call_t *c, const char *topic, const char *group)
{
    json_t *body = mqd_console_body_json(c->req, false);
    json_t *to = json_object_get(body, "to"), *value = json_object_get(body, "value");
    json_t *shift = json_object_get(body, "shift"), *parts = json_object_get(body, "partitions");
    json_t *dry = json_object_get(body, "dry_run");
    if (!json_is_string(to) == !shift || (value && !json_is_integer(value)) ||
        (shift && !json_is_integer(shift)) || (parts && !json_is_string(parts)) ||
        (dry && !json_is_boolean(dry))) {
        json_decref(body);
        return mqd_console_reply_error(c->req, 400,
                                       "expected {\"to\": \"earliest|latest|offset|time\", "
                                       "\"value\": N} or {\"shift\": N}, with \"partitions\": "
                                       "\"0,2\" and \"dry_run\": true optional");
    }
    /* the page resets groups it shows: one that does not exist is not made */
    json_t *args = json_pack("{s:s, s:s, s:b}", "topic", topic, "group", group, "create", 0);
    static const char *const keys[] = {"to", "value", "shift", "partitions", "dry_run"};
    for (size_t i = 0; i < MQD_ARRAY_LEN(keys); i++)
        if (json_object_get(body, keys[i]))
            json_object_set(args, keys[i], json_object_get(body, keys[i]));
    json_decref(body);
    if (!json_is_true(dry))
        MQD_NOTICE("console", "user %s resets group %s of topic %s", c->ss->user, group, topic);
    answer(c, T_GROUP, "RESET", args);
}

/* POST topics/T/alter {"partitions": N, "config": {"KEY": VALUE...}} (UPDATE) and
 * topics/T/delete (DELETE). In a cluster these answer only once etcd holds the change,
 * later than the console's synchronous mqd_mgmt_call can wait: mqctl does them there,
 * against any node (501 naming the command). */
static void topic_change(call_t *c, const char *topic, bool del)
{
    if (mqd_srv_repl(c->k->srv)->topic_alter)
        return mqd_console_reply_error(
            c->req, 501,
            del ? "in a cluster, delete topics with mqctl against any node: mqctl topic delete TOPIC"
                : "in a cluster, alter topics with mqctl against any node: mqctl topic alter "
                  "TOPIC --partitions N | --config KEY=VALUE");
    json_t *body = del ? NULL : mqd_console_body_json(c->req, false);
    json_t *parts = json_object_get(body, "partitions"), *cfg = json_object_get(body, "config");
    if (!del && ((parts && !json_is_integer(parts)) || (cfg && !json_is_object(cfg)) ||
                 (!parts && !cfg))) {
        json_decref(body);
        return mqd_console_reply_error(c->req, 400, "expected {\"partitions\": N, \"config\": "
                                                    "{\"KEY\": VALUE}}");
    }
    json_t *args = named(topic);
    if (body) /* UPDATE reads partitions and the config map from the request's body */
        json_object_set_new(args, "$body", body);
    MQD_NOTICE("console", "user %s %s topic %s", c->ss->user, del ? "deletes" : "alters", topic);
    answer(c, T_TOPIC, del ? "DELETE" : "UPDATE", args);
}

static void post_route(call_t *c)
{
    const char **s = c->segs;
    if (!mqd_auth_user_may(c->k->srv, c->ss->user, MQD_PERM_MANAGE, "$management"))
        return mqd_console_reply_error(c->req, 403, "this needs the manage right");
    if (c->n == 5 && strcmp(s[1], "groups") == 0 && strcmp(s[4], "reset") == 0)
        return reset(c, s[2], s[3]);
    if (c->n == 4 && strcmp(s[1], "topics") == 0 &&
        (strcmp(s[3], "alter") == 0 || strcmp(s[3], "delete") == 0))
        return topic_change(c, s[2], s[3][0] == 'd');
    if (c->n == 4 && strcmp(s[1], "connections") == 0 && strcmp(s[3], "close") == 0) {
        MQD_NOTICE("console", "user %s closes connection %s", c->ss->user, s[2]);
        return answer(c, T_CONN, "CLOSE", named(s[2]));
    }
    mqd_console_reply_error(c->req, 404, "no such API route");
}

void mqd_console_api(mqd_console_t *k, struct evhttp_request *req, mqd_console_sess_t *ss,
                     const char **segs, int n)
{
    call_t c = {.k = k, .req = req, .ss = ss, .segs = segs, .n = n};
    if (evhttp_request_get_command(req) == EVHTTP_REQ_POST)
        return post_route(&c);
    if (!mqd_auth_user_may(k->srv, ss->user, MQD_PERM_MONITOR, "$management") &&
        !mqd_auth_user_may(k->srv, ss->user, MQD_PERM_MANAGE, "$management"))
        return mqd_console_reply_error(req, 403, "this needs the monitor right");
    get_route(&c);
}
