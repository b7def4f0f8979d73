/* Consumer groups: listing, description and offset resets (see group.h). */
#include "config.h"
#include "group/group.h"
#include "server/broker.h"

#include <string.h>
#include <strings.h>

int mqd_group_list(mqd_topic_t *t, mqd_group_cb cb, void *arg)
{
    size_t members = 0;
    for (mqd_dlist_t *n = t->consumers.next; n != &t->consumers; n = n->next)
        if (MQD_CONTAINER(n, mqd_lstate_t, tnode)->kind == MQD_LS_CONSUMER)
            members++;
    return cb(MQD_SHARED_GROUP, MQD_GROUP_SHARED, members, arg);
}

int mqd_group_describe(mqd_topic_t *t, const char *group, mqd_group_part_cb cb, void *arg)
{
    if (strcasecmp(group, MQD_SHARED_GROUP) != 0)
        return MQD_ENOENT;
    for (uint32_t i = 0; i < t->nparts; i++) {
        mqd_part_t *p = &t->parts[i];
        mqd_group_part_info_t pi = {
            .partition = i,
            .committed = p->shared.floor,
            .log_start = mqd_plog_start_offset(p->log),
            .log_end = mqd_plog_stable_offset(p->log),
            .inflight = p->shared.inflight,
        };
        pi.lag = pi.log_end > pi.committed ? pi.log_end - pi.committed : 0;
        int rc = cb(&pi, arg);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int mqd_group_reset(mqd_topic_t *t, const char *group, mqd_reset_t how, int64_t value)
{
    MQD_UNUSED(t);
    MQD_UNUSED(group);
    MQD_UNUSED(how);
    MQD_UNUSED(value);
    return MQD_ESTATE;
}

int mqd_group_delete(mqd_topic_t *t, const char *group)
{
    MQD_UNUSED(t);
    MQD_UNUSED(group);
    return MQD_ESTATE;
}
