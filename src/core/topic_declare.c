/* Topics declared by [topic NAME] sections exist once the broker has started (like
 * RabbitMQ's definitions), whatever auto_create_topics says. A section's settings are
 * not copied into meta.db: the topic reads them from the config at every start (under
 * any management overrides), so editing the section changes the topic; removing it
 * brings back the defaults and deletes nothing. */
#include "config.h"
#include "core/core.h"
#include "core/core_int.h"

#include <inttypes.h>

/* An existing topic whose section asks for more partitions grows (keys would move if
 * it shrank, so fewer is only reported). */
static int declare_existing(mqd_server_t *s, mqd_topic_t *t, uint32_t want)
{
    if (want == 0 || want == t->nparts)
        return 0;
    if (want < t->nparts) {
        MQD_WARN("topic",
                 "[topic %s] partitions = %u: the topic has %u and partitions only "
                 "grow; keeping %u",
                 t->name, want, t->nparts, t->nparts);
        return 0;
    }
    uint32_t had = t->nparts;
    int rc = mqd_topic_alter(s, t, want, NULL);
    if (rc == 0)
        MQD_NOTICE("topic", "[topic %s]: grown from %u to %u partitions", t->name, had, t->nparts);
    return rc;
}

static int declare_one(mqd_server_t *s, const mqd_topic_conf_t *sec)
{
    mqd_topic_t *t = mqd_topic_find(s, sec->name);
    int rc;
    if (t)
        rc = declare_existing(s, t, sec->partitions);
    else if ((rc = mqd_topic_create(s, sec->name, 0, NULL, &t)) == 0)
        MQD_NOTICE("topic", "created topic=%s partitions=%u (declared by [topic %s])", t->name,
                   t->nparts, t->name);
    if (rc == 0)
        return 0;
    MQD_ERR("topic", "[topic %s]: cannot %s the declared topic: %s%s", sec->name,
            t ? "grow" : "create", mqd_strerror(rc),
            rc == MQD_ETOOBIG  ? " (partitions is over max_partitions_per_topic)"
            : rc == MQD_EAGAIN ? " (max_topics reached)"
                               : "");
    return rc;
}

int mqd_topics_declare(mqd_server_t *s)
{
    int first = 0;
    for (size_t i = 0; i < s->conf->n_topics; i++) {
        int rc = declare_one(s, &s->conf->topics[i]);
        /* a full disk must not keep the broker (and its other topics) down */
        if (rc != 0 && rc != MQD_ENOSPC && first == 0)
            first = rc;
    }
    return first;
}
