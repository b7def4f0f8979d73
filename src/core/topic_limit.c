/* Bounds on topic creation. Each topic costs memory, meta.db rows and, while in use,
 * segment descriptors: receivers attached to 65,536 new addresses made 40,960 topics
 * and took every descriptor of the process. max_topics bounds the whole broker (what
 * is already on disk always loads); max_topics_per_connection keeps one client from
 * using all of it. Both refuse with amqp:resource-limit-exceeded at the caller. */
#include "config.h"
#include "core/core.h"
#include "core/core_int.h"

#include <string.h>

/* A refusal storm logs one line a second, with how many it summarises. */
static void note_refusal(mqd_server_t *s, const char *what, const char *name, uint32_t limit)
{
    int64_t now = mqd_now_ms();
    if (now - s->topic_refused_ms < 1000) {
        s->topic_refused_quiet++;
        return;
    }
    MQD_WARN("topic", "not creating topic=%s: %s = %u reached (%zu topics; %llu more refused "
             "since the last report)", name, what, limit, s->n_topics,
             (unsigned long long)s->topic_refused_quiet);
    s->topic_refused_ms = now;
    s->topic_refused_quiet = 0;
}

bool mqd_topic_limit_reached(mqd_server_t *s, const char *name)
{
    uint32_t max = s->conf->max_topics;
    /* Temporary reply nodes count but are never refused: they go with their link (so
     * links bound them), and management (mqctl's reply node) must work at the cap. */
    if (max == 0 || s->n_topics < max || strncmp(name, "$tmp.", 5) == 0)
        return false;
    note_refusal(s, "max_topics", name, max);
    return true;
}

int mqd_topic_get_as(mqd_conn_t *c, const char *name, bool create, mqd_topic_t **out)
{
    mqd_server_t *s = c->srv;
    mqd_topic_t *t = mqd_topic_find(s, name);
    if (t) {
        *out = t;
        return 0;
    }
    if (!create)
        return MQD_ENOENT;
    uint32_t per = s->conf->max_topics_per_connection;
    bool counted = strncmp(name, "$tmp.", 5) != 0;
    if (counted && per && c->topics_created >= per) {
        note_refusal(s, "max_topics_per_connection", name, per);
        return MQD_EAGAIN;
    }
    int rc = mqd_topic_get(s, name, true, 0, out);
    if (rc == 0 && counted)
        c->topics_created++;
    return rc;
}

bool mqd_topic_may_create_now(mqd_conn_t *c, const char *name)
{
    mqd_server_t *s = c->srv;
    uint32_t max = s->conf->max_topics, per = s->conf->max_topics_per_connection;
    if (strncmp(name, "$tmp.", 5) == 0)
        return true;
    return !(max && s->n_topics >= max) && !(per && c->topics_created >= per);
}

void mqd_topic_charge_create(mqd_conn_t *c, const char *name)
{
    if (strncmp(name, "$tmp.", 5) != 0)
        c->topics_created++;
}
