/* Who may ask what of the management node. Every request is authorized against the
 * entity it names, by the same rules as a link to it (auth/: the [acl] and, with
 * sas_required, the SAS tokens the connection put to $cbs), before its handler runs:
 *
 *   a topic (READ, CREATE, UPDATE, DELETE, RESUME, PEEK,   its name
 *     the routes' READ)
 *   a consumer group (READ, RESET, DELETE, COMMIT)          its topic
 *   a listing (topic QUERY, group QUERY of every topic)     each row, filtered
 *   the node (broker, connections, links, cluster, config,  `$management`, which a SAS
 *     users, ACL)                                           token covers only when it
 *                                                           covers every hub
 *
 * Reads need `monitor` or `manage`, changes `manage`; the Event Hubs READs also take
 * `receive` (Event Hubs gives runtime information to listeners), a PEEK `browse` as
 * well; a topic's routes (com.mqd:route) take any of send, receive, monitor and manage.
 * A right on one topic or on `$management` gives nothing on another topic, so a key
 * scoped to one hub, or a user whose rules name some topics, manages just those.
 * The decision depends on the name alone, never on whether the entity exists: a refusal
 * (401) does not tell a caller which topics outside its rights exist. */
#include "config.h"
#include "mgmt/mgmt_int.h"
#include "mgmt/mgmt_json.h"
#include "core/core.h"

#include <stdio.h>
#include <string.h>

#define NODE "$management"

/* One check, logged when it refuses and `quiet` is false. The console's calls
 * (mqd_mgmt_call) have no connection: its user's [acl] rules decide (no SAS there). */
static bool may(mqd_mgmt_req_t *r, mqd_perm_t perm, const char *address, bool quiet)
{
    if (!r->c)
        return mqd_auth_user_may(r->s, r->actor, perm, address);
    return quiet ? mqd_auth_may(r->c, perm, address) : mqd_auth_allowed(r->c, perm, address);
}

static bool may_read(mqd_mgmt_req_t *r, const char *address, bool quiet)
{
    return may(r, MQD_PERM_MONITOR, address, true) || may(r, MQD_PERM_MANAGE, address, quiet);
}

bool mqd_mgmt_may_read(mqd_mgmt_req_t *r, const char *topic)
{
    return may_read(r, topic, true);
}

/* Routing metadata: whoever may send to or receive from the topic needs it to find the
 * leader; monitor and manage read it as any topic state. */
bool mqd_mgmt_may_route(mqd_mgmt_req_t *r, const char *topic)
{
    return may(r, MQD_PERM_SEND, topic, true) || may(r, MQD_PERM_RECEIVE, topic, true) ||
           may_read(r, topic, true);
}

static bool may_route_anywhere(mqd_mgmt_req_t *r)
{
    static const mqd_perm_t perms[] = {MQD_PERM_SEND, MQD_PERM_RECEIVE, MQD_PERM_MONITOR,
                                       MQD_PERM_MANAGE};
    for (size_t i = 0; i < MQD_ARRAY_LEN(perms); i++)
        if (r->c ? mqd_auth_may_anywhere(r->c, perms[i])
                 : mqd_auth_user_may_anywhere(r->s, r->actor, perms[i]))
            return true;
    return false;
}

/* A listing is refused (rather than shown empty) to whoever holds `monitor` and
 * `manage` nowhere: a producer asking for the topic list learns it has no right. */
static int check_list(mqd_mgmt_req_t *r, const char *what)
{
    bool ok;
    if (!r->c)
        ok = mqd_auth_user_may_anywhere(r->s, r->actor, MQD_PERM_MONITOR) ||
             mqd_auth_user_may_anywhere(r->s, r->actor, MQD_PERM_MANAGE);
    else
        ok = mqd_auth_may_anywhere(r->c, MQD_PERM_MONITOR) ||
             mqd_auth_may_anywhere(r->c, MQD_PERM_MANAGE);
    return ok ? 0
              : mqd_mgmt_fail(r, 401, "not allowed to list %s: needs the monitor right", what);
}

/* "not allowed to WHAT 'TOPIC': needs the RIGHT right" (RIGHT as the [acl] spells it). */
static int refuse(mqd_mgmt_req_t *r, const char *what, const char *topic, const char *right)
{
    if (topic)
        return mqd_mgmt_fail(r, 401, "not allowed to %s '%.200s': needs the %s right on it", what,
                             topic, right);
    return mqd_mgmt_fail(r, 401,
                         "not allowed to %s: a node-wide operation needs the %s right on "
                         "$management (with SAS: a token of an unscoped key for every "
                         "hub)",
                         what, right);
}

/* The topic a topic operation names; NULL after a 400. */
static const char *topic_named(mqd_mgmt_req_t *r)
{
    if (!r->name || !*r->name) {
        mqd_mgmt_fail(r, 400, "application property 'name' is required");
        return NULL;
    }
    return r->name;
}

const char *mqd_mgmt_bad_topic_name(const char *name)
{
    if (strncmp(name, "$tmp.", 5) == 0)
        return "names starting with $tmp. are the broker's temporary nodes";
    if (strlen(name) > MQD_NAME_MAX)
        return "longer than 255 bytes";
    if (!mqd_topic_name_valid(name, strlen(name)))
        return "a topic name is 1..255 of letters, digits and . _ ~ : @ $ - (not . or ..), "
               "or T/$DeadLetterQueue; $management and $cbs are reserved";
    return NULL;
}

static int check_topic(mqd_mgmt_req_t *r, mqd_mgmt_need_t need, const char *t)
{
    const char *why;
    switch (need) {
    case MQD_MGMT_TOPIC_CREATE:
        /* a name no address can reach is refused as such, whoever asks ("$management"
         * would otherwise be checked as the node) */
        if ((why = mqd_mgmt_bad_topic_name(t)))
            return mqd_mgmt_fail(r, 400, "invalid topic name '%.100s': %s", t, why);
        return may(r, MQD_PERM_MANAGE, t, false) ? 0 : refuse(r, "create", t, "manage");
    case MQD_MGMT_TOPIC_READ: return may_read(r, t, false) ? 0 : refuse(r, "read", t, "monitor");
    case MQD_MGMT_TOPIC_MANAGE:
        return may(r, MQD_PERM_MANAGE, t, false) ? 0 : refuse(r, "manage", t, "manage");
    case MQD_MGMT_TOPIC_PEEK:
        return may_read(r, t, false) && may(r, MQD_PERM_BROWSE, t, false) ? 0
                                                                          : refuse(r, "peek at", t,
                                                                                   "monitor and browse");
    case MQD_MGMT_HUB_READ:
        return may(r, MQD_PERM_RECEIVE, t, true) || may_read(r, t, false) ? 0
                                                                          : refuse(r, "read", t,
                                                                                   "receive or monitor");
    case MQD_MGMT_ROUTE_READ:
        /* the last check logs the refusal, as the others do */
        return mqd_mgmt_may_route(r, t) || may(r, MQD_PERM_MANAGE, t, false)
                   ? 0
                   : refuse(r, "read the routes of", t, "send, receive, monitor or manage");
    default: return refuse(r, "do this on", t, "manage");
    }
}

/* A consumer group's topic, as the group handlers parse it (mgmt_group.c). */
static int check_group(mqd_mgmt_req_t *r, mqd_mgmt_need_t need)
{
    char topic[MQD_NAME_MAX + 1];
    bool listing = need == MQD_MGMT_GROUP_LIST;
    json_t *all = json_object_get(r->props, "all_groups"); /* RESET of every group */
    bool any_group = listing || json_is_true(all) ||
                     (json_is_string(all) && strcmp(json_string_value(all), "true") == 0);
    if (mqd_mgmt_group_topic(r, !any_group, topic, sizeof topic) != 0)
        return r->status;
    if (listing && !topic[0]) /* every topic's groups: filtered by the handler */
        return check_list(r, "consumer groups");
    if (need == MQD_MGMT_GROUP_MANAGE)
        return check_topic(r, MQD_MGMT_TOPIC_MANAGE, topic);
    return check_topic(r, MQD_MGMT_TOPIC_READ, topic);
}

int mqd_mgmt_authorize(mqd_mgmt_req_t *r, const mqd_mgmt_op_t *op)
{
    const char *t;
    switch (op->need) {
    case MQD_MGMT_SELF: return 0; /* its handler checks the right on the topic it names */
    case MQD_MGMT_NODE_READ:
        return may_read(r, NODE, false) ? 0 : refuse(r, "read this", NULL, "monitor");
    case MQD_MGMT_NODE_MANAGE:
        return may(r, MQD_PERM_MANAGE, NODE, false) ? 0 : refuse(r, "manage", NULL, "manage");
    case MQD_MGMT_LIST: return check_list(r, "topics");
    case MQD_MGMT_ROUTE_LIST:
        return may_route_anywhere(r) ? 0
                                     : mqd_mgmt_fail(r, 401,
                                                     "not allowed to list routes: no send, "
                                                     "receive, monitor or manage right");
    case MQD_MGMT_GROUP_READ:
    case MQD_MGMT_GROUP_MANAGE:
    case MQD_MGMT_GROUP_LIST: return check_group(r, op->need);
    default:
        if (!(t = topic_named(r)))
            return r->status;
        return check_topic(r, op->need, t);
    }
}

/* The first string in v (to depth MQD_MGMT_JSON_DEPTH) that holds a NUL byte, or NULL;
 * *key names where. Names are C strings past this point: "a\0b" would be "a". */
static const json_t *nul_string(const json_t *v, const char **key, int depth)
{
    const char *k;
    json_t *e;
    size_t i;
    if (depth > MQD_MGMT_JSON_DEPTH)
        return NULL;
    if (json_is_string(v))
        return memchr(json_string_value(v), '\0', json_string_length(v)) ? v : NULL;
    if (json_is_object(v))
        json_object_foreach((json_t *)v, k, e)
        {
            const char *inner = k;
            if (nul_string(e, &inner, depth + 1)) {
                *key = inner;
                return e;
            }
        }
    if (json_is_array(v))
        json_array_foreach(v, i, e)
        {
            if (nul_string(e, key, depth + 1))
                return e;
        }
    return NULL;
}

int mqd_mgmt_check_strings(mqd_mgmt_req_t *r)
{
    const char *key = "?";
    if (nul_string(r->props, &key, 0) || (r->body && nul_string(r->body, &key, 0)))
        return mqd_mgmt_fail(r, 400,
                             "'%.100s' holds a NUL byte: names and values are text "
                             "without NUL",
                             key);
    return 0;
}
