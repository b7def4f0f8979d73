/* Reply nodes (docs/security.md, "Reply nodes"): the temporary nodes that hold mqd's
 * answers to `$management` and `$cbs` requests, and who may read them.
 *
 * A receiver from `$management` or `$cbs` reads the node mqd_reply_node_name gives for
 * its connection and its target address (a `$cbs` receiver with none: its link name,
 * as the Event Hubs SDKs attach it). A request's reply goes to that node of the
 * requesting connection, or to a dynamic node of that connection whose address the
 * reply-to is, and nowhere else. Both are the connection's own: the target or reply-to
 * may name a topic, but no topic is read, written or created through them (before,
 * a receiver with target `secret` read and took `secret`'s records and every reply was
 * appended to it), and two connections that use the same reply address have a node each.
 * No other connection reads a temporary node (mqd_reply_may_read) or sends into a
 * `$tmp.r.` node (link.c). */
#include "config.h"
#include "amqp/amqp_int.h"

#include <proton/terminus.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool owned(const mqd_topic_t *t, uint64_t me)
{
    return mqd_topic_temporary(t) && mqd_topic_owner(t) == me;
}

int mqd_reply_attach(mqd_conn_t *c, pn_link_t *l, bool cbs, mqd_topic_t **out)
{
    mqd_server_t *s = mqd_conn_srv(c);
    uint64_t me = mqd_conn_serial(c);
    const char *taddr = pn_terminus_get_address(pn_link_remote_target(l));
    char name[MQD_NAME_MAX + 1];
    if (cbs && (!taddr || !*taddr))
        taddr = pn_link_name(l);
    if (!taddr || !*taddr) {
        mqd_link_refuse(l, "amqp:invalid-field", "a $management receiver needs a target address%s",
                        "");
        return MQD_EINVAL;
    }
    mqd_reply_node_name(me, taddr, strlen(taddr), name, sizeof name);
    mqd_topic_t *t = mqd_topic_find(s, name);
    if (t && !owned(t, me)) { /* the serial is in the name: never another connection's */
        mqd_link_refuse(l, "amqp:internal-error", "reply node of '%s' in use", taddr);
        return MQD_EEXIST;
    }
    if (!t && mqd_topic_get(s, name, true, 1, &t) != 0) {
        mqd_link_refuse(l, "amqp:internal-error", "cannot create the reply node for '%s'", taddr);
        return MQD_EIO;
    }
    mqd_topic_set_temporary(t, true);
    mqd_topic_set_owner(t, me);
    *out = t;
    return 0;
}

int mqd_reply_resolve(mqd_conn_t *c, const char *to, size_t len, char *name, size_t namelen)
{
    mqd_server_t *s = mqd_conn_srv(c);
    uint64_t me = mqd_conn_serial(c);
    mqd_topic_t *t;
    mqd_addr_t a;
    mqd_reply_node_name(me, to, len, name, namelen);
    if ((t = mqd_topic_find(s, name)) != NULL && owned(t, me))
        return 0;
    /* mqctl's way: a dynamic receiver, its address as reply-to */
    if (mqd_addr_parse(to, len, &a) == 0 && a.kind == MQD_ADDR_TOPIC &&
        (t = mqd_topic_find(s, a.topic)) != NULL && owned(t, me)) {
        snprintf(name, namelen, "%s", a.topic);
        return 0;
    }
    return MQD_ENOENT;
}

bool mqd_reply_may_read(mqd_conn_t *c, const char *topic)
{
    if (strncmp(topic, "$tmp.", 5) != 0)
        return true;
    const mqd_topic_t *t = mqd_topic_find(mqd_conn_srv(c), topic);
    return t == NULL || owned(t, mqd_conn_serial(c));
}

bool mqd_reply_entity_node(const char *addr, char *entity, size_t len)
{
    static const char suffix[] = "/$management";
    size_t n = addr ? strlen(addr) : 0, k = sizeof suffix - 1;
    if (n <= k || strcasecmp(addr + n - k, suffix) != 0 || n - k > MQD_NAME_MAX ||
        !mqd_topic_name_valid(addr, n - k))
        return false;
    if (!entity)
        return true;
    if (n - k >= len)
        return false;
    memcpy(entity, addr, n - k);
    entity[n - k] = '\0';
    return true;
}
