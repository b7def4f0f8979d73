/* mqctl against any node of a cluster (issue 33 point 6). A node holds a replica's
 * figures of the partitions it does not lead (its own log end, its replicated copy of a
 * group's committed offset, its own message count) and a group reset there would move
 * only that copy. So for
 *   topic describe T, group describe T G   each partition's row is asked of its leader
 *                                          (the node com.mqd:route names) and marked
 *                                          `from_node` (who answered) and `from`
 *                                          ("leader", or "replica" when the leader could
 *                                          not be asked: this node's figures); the totals
 *                                          are summed again from the rows;
 *   group reset T G                        the reset is sent to each leader, for the
 *                                          partitions it leads (of those asked for), and
 *                                          the answers' rows are joined;
 * on a node without a cluster (route READ answers 404) nothing changes. The leader is
 * reached at the client address it registered in etcd (leader_address), with the same
 * URL scheme, user and password as the one given. */
#include "config.h"
#include "mqd.h"
#include "tools/mqctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T_ROUTE "com.mqd:route"
#define MAX_PARTS 4096

typedef struct routes {
    json_t *doc; /* the route READ's answer, owned */
    int64_t self;
} routes_t;

/* The route READ of topic on o's node: false when there is none (no cluster, no right,
 * no such topic; the request itself then tells). */
static bool routes_of(const mqctl_opts_t *o, const char *topic, routes_t *rt)
{
    request_t r = {.op = "READ", .type = T_ROUTE, .name = topic};
    if (!topic || mqctl_transact(o, &r) != 0 || r.status != 200 || !json_is_object(r.reply)) {
        json_decref(r.reply);
        return false;
    }
    rt->doc = r.reply;
    rt->self = json_integer_value(json_object_get(r.reply, "node_id"));
    return true;
}

static json_t *route_rows(const routes_t *rt)
{
    return json_object_get(rt->doc, "routes");
}

/* o's URL with its HOST:PORT replaced by addr (scheme, user and password kept). */
static char *url_at(const char *url, const char *addr)
{
    const char *scheme = strstr(url, "://");
    const char *host = scheme ? scheme + 3 : url;
    const char *at = strrchr(host, '@');
    if (at)
        host = at + 1;
    size_t head = (size_t)(host - url);
    char *out = malloc(head + strlen(addr) + 1);
    if (out) {
        memcpy(out, url, head);
        strcpy(out + head, addr);
    }
    return out;
}

/* Runs a copy of rq (props plus extra, which is stolen) against node's address. */
static int ask_node(const mqctl_opts_t *o, const request_t *rq, const char *addr, json_t *extra,
                    request_t *out)
{
    mqctl_opts_t oo = *o;
    char *url = url_at(o->url, addr);
    *out = (request_t){.op = rq->op, .type = rq->type, .name = rq->name};
    out->props = rq->props ? json_deep_copy(rq->props) : json_object();
    out->body = rq->body ? json_deep_copy(rq->body) : NULL;
    if (extra)
        json_object_update(out->props, extra);
    json_decref(extra);
    if (!url)
        return EX_OTHER;
    oo.url = url;
    int ex = mqctl_transact(&oo, out);
    free(url);
    return ex;
}

static void request_clear(request_t *r)
{
    json_decref(r->props);
    json_decref(r->body);
    json_decref(r->reply);
}

static json_t *row_of(json_t *rows, int64_t part)
{
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) if (json_integer_value(json_object_get(row, "partition")) == part)
        return row;
    return NULL;
}

static void mark(json_t *row, int64_t node, const char *from)
{
    json_object_set_new(row, "from_node", json_integer(node));
    json_object_set_new(row, "from", json_string(from));
}

/* doc[key] = the sum of the rows' field (when doc has key: a total it reports). */
static void resum(json_t *doc, json_t *rows, const char *field, const char *key)
{
    if (!json_object_get(doc, key))
        return;
    json_int_t sum = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) sum += json_integer_value(json_object_get(row, field));
    json_object_set_new(doc, key, json_integer(sum));
}

static void resum_all(const request_t *rq, json_t *rows)
{
    if (strcmp(rq->type, T_TOPIC) == 0) {
        resum(rq->reply, rows, "messages", "messages");
        resum(rq->reply, rows, "size_bytes", "size_bytes");
    } else {
        resum(rq->reply, rows, "lag", "lag");
        resum(rq->reply, rows, "backlog", "backlog");
    }
}

/* READ: each row the leader's own (asked once per leader node). */
static void describe_from_leaders(const mqctl_opts_t *o, request_t *rq, const routes_t *rt)
{
    const char *key = strcmp(rq->type, T_TOPIC) == 0 ? "partition_info" : "partitions";
    json_t *rows = json_object_get(rq->reply, key);
    json_t *routes = route_rows(rt);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) mark(row, rt->self, "replica");
    json_t *asked = json_object(); /* node id -> its rows, or null when it failed */
    json_array_foreach(routes, i, row)
    {
        int64_t leader = json_integer_value(json_object_get(row, "leader"));
        int64_t part = json_integer_value(json_object_get(row, "partition"));
        const char *addr = json_string_value(json_object_get(row, "leader_address"));
        json_t *mine = row_of(rows, part);
        if (!mine || leader <= 0)
            continue;
        if (leader == rt->self) {
            mark(mine, leader, "leader");
            continue;
        }
        char id[24];
        snprintf(id, sizeof id, "%lld", (long long)leader);
        if (!json_object_get(asked, id)) {
            request_t r = {0};
            json_t *got = NULL;
            if (addr && *addr && json_is_true(json_object_get(row, "leader_alive")) &&
                ask_node(o, rq, addr, NULL, &r) == 0 && r.status == 200)
                got = json_incref(json_object_get(r.reply, key));
            else if (addr && *addr)
                fprintf(stderr, "mqctl: node %s (%s), which leads partition %lld, did not "
                                "answer: its partitions show this node's replica figures\n",
                        id, addr, (long long)part);
            request_clear(&r);
            json_object_set_new(asked, id, got ? got : json_null());
        }
        json_t *theirs = row_of(json_object_get(asked, id), part);
        if (theirs) {
            json_object_update(mine, theirs);
            mark(mine, leader, "leader");
        }
    }
    json_decref(asked);
    resum_all(rq, rows);
}

/* "0,2" of the RESET (NULL: every partition) into sel[]. */
static void selected(const request_t *rq, bool *sel, size_t n)
{
    const char *s = json_string_value(json_object_get(rq->props, "partitions"));
    for (size_t i = 0; i < n; i++)
        sel[i] = !s;
    for (const char *p = s; p && *p;) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p)
            break;
        if (v < n)
            sel[v] = true;
        p = *end == ',' ? end + 1 : end;
    }
}

static bool led_by(json_t *routes, int64_t part, const char *id)
{
    json_t *row = row_of(routes, part);
    return row && json_integer_value(json_object_get(row, "leader")) == strtoll(id, NULL, 10);
}

/* RESET: one request per leader, for the selected partitions it leads; the answers'
 * rows joined in partition order (the first answer's other fields kept). */
static int reset_at_leaders(const mqctl_opts_t *o, request_t *rq, const routes_t *rt)
{
    json_t *routes = route_rows(rt);
    size_t n = json_array_size(routes) < MAX_PARTS ? json_array_size(routes) : MAX_PARTS;
    bool sel[MAX_PARTS];
    selected(rq, sel, n);
    json_t *by_leader = json_object(); /* node id -> "0,3" */
    json_t *addr_of = json_object();
    for (size_t i = 0; i < n; i++) {
        json_t *row = json_array_get(routes, i);
        int64_t part = json_integer_value(json_object_get(row, "partition"));
        if (part < 0 || (size_t)part >= n || !sel[part])
            continue;
        char id[24], list[8192];
        snprintf(id, sizeof id, "%lld", (long long)json_integer_value(json_object_get(row, "leader")));
        const char *have = json_string_value(json_object_get(by_leader, id));
        snprintf(list, sizeof list, "%s%s%lld", have ? have : "", have ? "," : "", (long long)part);
        json_object_set_new(by_leader, id, json_string(list));
        json_object_set(addr_of, id, json_object_get(row, "leader_address"));
    }
    if (json_object_size(by_leader) == 0) { /* nothing selected: the node answers */
        json_decref(by_leader);
        json_decref(addr_of);
        return mqctl_transact(o, rq);
    }
    const char *id;
    json_t *parts, *rows = json_array();
    int ex = 0;
    json_object_foreach(by_leader, id, parts)
    {
        const char *addr = json_string_value(json_object_get(addr_of, id));
        if (strcmp(id, "0") == 0 || !addr || !*addr) { /* checked before anything changes */
            snprintf(rq->desc, sizeof rq->desc, "partitions %.400s of the topic have no leader "
                     "now: nothing reset", json_string_value(parts));
            rq->status = 503;
        }
    }
    json_object_foreach(by_leader, id, parts)
    {
        request_t r = {0};
        const char *addr = json_string_value(json_object_get(addr_of, id));
        if (rq->status >= 300)
            break;
        ex = ask_node(o, rq, addr, json_pack("{s:O}", "partitions", parts), &r);
        if (ex == 0 && r.status >= 300) {
            rq->status = r.status;
            snprintf(rq->desc, sizeof rq->desc, "node %.20s: %.480s", id, r.desc);
        } else if (ex == 0) {
            if (!rq->reply || rq->status >= 300) {
                json_decref(rq->reply);
                rq->reply = json_incref(r.reply);
                rq->status = r.status;
                snprintf(rq->desc, sizeof rq->desc, "%s", r.desc);
            }
            size_t i;
            json_t *row;
            json_array_foreach(json_object_get(r.reply, "partitions"), i, row)
            {
                int64_t part = json_integer_value(json_object_get(row, "partition"));
                if (part < 0 || (size_t)part >= n || !sel[part] || !led_by(routes, part, id))
                    continue; /* not reset there: that node's rows of others' partitions */
                mark(row, strtoll(id, NULL, 10), "leader");
                json_array_append(rows, row);
            }
        }
        request_clear(&r);
        if (ex != 0 || rq->status >= 300)
            break;
    }
    json_decref(by_leader);
    json_decref(addr_of);
    if (ex == 0 && rq->status < 300 && json_is_object(rq->reply)) {
        json_object_set(rq->reply, "partitions", rows);
        resum_all(rq, rows);
    }
    json_decref(rows);
    return ex;
}

int mqctl_cluster_transact(const mqctl_opts_t *o, request_t *rq)
{
    bool topic_read = strcmp(rq->type, T_TOPIC) == 0 && strcmp(rq->op, "READ") == 0;
    bool group = strcmp(rq->type, T_GROUP) == 0;
    bool group_read = group && strcmp(rq->op, "READ") == 0;
    bool reset = group && strcmp(rq->op, "RESET") == 0 &&
                 json_object_get(rq->props, "group") != NULL; /* not --all-groups */
    if (!topic_read && !group_read && !reset)
        return mqctl_transact(o, rq);
    const char *topic = topic_read ? rq->name : json_string_value(json_object_get(rq->props, "topic"));
    routes_t rt = {0};
    if (!routes_of(o, topic, &rt))
        return mqctl_transact(o, rq);
    int ex;
    if (reset) {
        ex = reset_at_leaders(o, rq, &rt);
    } else {
        ex = mqctl_transact(o, rq);
        if (ex == 0 && rq->status == 200 && json_is_object(rq->reply))
            describe_from_leaders(o, rq, &rt);
    }
    json_decref(rt.doc);
    return ex;
}
