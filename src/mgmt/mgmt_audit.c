/* The audit trail: one log line (subsystem "audit", level notice) for every management
 * request that changes something, answered or refused, with who asked (user and peer),
 * what (operation, type), on what (the target) and how it ended (status and reason).
 * Reads (READ, QUERY) are not audited: they change nothing. */
#include "config.h"
#include "mgmt/mgmt_int.h"
#include "core/core.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Request text in a log line: control characters and quotes become '?', so a name
 * cannot forge a line or a field. */
static void clean(const char *in, char *out, size_t len)
{
    size_t o = 0;
    for (; in && *in && o + 1 < len; in++)
        out[o++] = ((unsigned char)*in < 0x20 || *in == 0x7f || *in == '"') ? '?' : *in;
    out[o] = '\0';
}

/* name, else topic[/group] from the properties; [/partition] when one is given. */
static void target_of(mqd_mgmt_req_t *r, char *out, size_t len)
{
    char raw[3 * MQD_NAME_MAX + 64];
    const char *topic = mqd_mgmt_arg_str(r, "topic");
    const char *group = mqd_mgmt_arg_str(r, "group");
    int64_t part;
    int n;
    if (r->name)
        n = snprintf(raw, sizeof raw, "%s", r->name);
    else
        n = snprintf(raw, sizeof raw, "%s%s%s", topic ? topic : "-", group ? "/" : "",
                     group ? group : "");
    if (n >= 0 && (size_t)n < sizeof raw && mqd_mgmt_arg_int(r, "partition", &part))
        snprintf(raw + n, sizeof raw - (size_t)n, "/%lld", (long long)part);
    clean(raw, out, len);
}

bool mqd_mgmt_audited(const char *op)
{
    return op && strcasecmp(op, "READ") != 0 && strcasecmp(op, "QUERY") != 0 &&
           strcasecmp(op, "HISTORY") != 0; /* reads, like READ */
}

void mqd_mgmt_audit(mqd_mgmt_req_t *r)
{
    char op[64], type[128], target[3 * MQD_NAME_MAX + 64], desc[sizeof r->desc];
    clean(r->op, op, sizeof op);
    clean(r->type, type, sizeof type);
    target_of(r, target, sizeof target);
    clean(r->desc, desc, sizeof desc);
    char user[MQD_NAME_MAX + 1];
    clean(mqd_mgmt_actor(r), user, sizeof user);
    /* the console calls the same operations with no AMQP connection (mqd_mgmt_call) */
    const char *peer = r->c ? mqd_conn_peer(r->c) : "console";
    if (r->deferred)
        MQD_NOTICE("audit",
                   "user=%s peer=%s op=%s type=%s target=\"%s\" status=accepted "
                   "(answered when done)",
                   user, peer, op, type, target);
    else
        MQD_NOTICE("audit", "user=%s peer=%s op=%s type=%s target=\"%s\" status=%d%s%s%s", user,
                   peer, op, type, target, r->status, desc[0] ? " reason=\"" : "", desc,
                   desc[0] ? "\"" : "");
}
