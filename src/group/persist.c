/* group/persist: group positions to meta.db in batches (the per-message path never
 * touches SQLite), and what core asks of a topic's groups (mqd_core_ops_t). */
#include "config.h"
#include "group/group_int.h"

static bool topic_dirty(const mqd_topic_t *t)
{
    const mqd_dlist_t *gs = mqd_topic_groups_const(t);
    for (const mqd_dlist_t *n = gs->next; n != gs; n = n->next) {
        const mqd_group_t *g = MQD_CONTAINER(n, mqd_group_t, node);
        for (uint32_t i = 0; g->active && i < g->ncur; i++)
            if (g->cur[i].dirty)
                return true;
    }
    return false;
}

/* Writes every group's changed offsets and ack state in one SQLite transaction: the
 * per-message path never touches SQLite. */
void mqd_topics_persist(mqd_server_t *s, bool force)
{
    bool began = false;
    for (mqd_topic_t *t = mqd_srv_topic_first(s); t; t = mqd_srv_topic_next(t)) {
        if (mqd_topic_temporary(t) || !topic_dirty(t))
            continue;
        if (!began) {
            if (mqd_meta_begin(mqd_srv_meta(s)) != 0)
                return;
            began = true;
        }
        mqd_groups_save(t);
    }
    if (began && mqd_meta_commit(mqd_srv_meta(s)) != 0)
        mqd_meta_rollback(mqd_srv_meta(s));
    MQD_UNUSED(force);
}

static bool groups_floor(const mqd_topic_t *t, uint32_t i, uint64_t *floor)
{
    bool any = false;
    const mqd_dlist_t *gs = mqd_topic_groups_const(t);
    for (const mqd_dlist_t *n = gs->next; n != gs; n = n->next) {
        const mqd_group_t *g = MQD_CONTAINER(n, mqd_group_t, node);
        if (g->active && i < g->ncur) {
            any = true;
            if (g->cur[i].floor < *floor)
                *floor = g->cur[i].floor;
        }
    }
    return any;
}

static bool groups_dirty(const mqd_topic_t *t)
{
    return topic_dirty(t);
}

/* A topic opened: an existing one's groups come back from meta.db; every topic has the
 * shared group its plain address's consumers use. */
static int groups_open(mqd_topic_t *t, bool existing)
{
    int rc = existing ? mqd_groups_load(t) : 0;
    mqd_group_t *shared;
    if (rc == 0)
        rc = mqd_group_get(t, MQD_SHARED_GROUP, &shared);
    return rc;
}

static int groups_grow(mqd_topic_t *t)
{
    mqd_dlist_t *gs = mqd_topic_groups(t);
    for (mqd_dlist_t *n = gs->next; n != gs; n = n->next) {
        int rc = mqd_group_resize(MQD_CONTAINER(n, mqd_group_t, node));
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void groups_free(mqd_topic_t *t)
{
    mqd_dlist_t *gs = mqd_topic_groups(t);
    while (!mqd_dlist_empty(gs))
        mqd_group_free(MQD_CONTAINER(gs->next, mqd_group_t, node));
}

void mqd_group_core_ops(mqd_core_ops_t *ops)
{
    ops->groups_open = groups_open;
    ops->groups_grow = groups_grow;
    ops->groups_free = groups_free;
    ops->groups_floor = groups_floor;
    ops->groups_dirty = groups_dirty;
    ops->groups_save = mqd_groups_save;
}
