/* group/persist: group positions to meta.db in batches (the per-message path never
 * touches SQLite), and what core asks of a topic's groups (mqd_core_ops_t). */
#include "config.h"
#include "group/group_int.h"

static bool topic_dirty(const mqd_topic_t *t)
{
    for (mqd_dlist_t *n = t->groups.next; n != &t->groups; n = n->next) {
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
    for (size_t i = 0; i < s->topics_cap; i++) {
        for (mqd_topic_t *t = s->topics[i]; t; t = t->hnext) {
            if (t->temporary || !topic_dirty(t))
                continue;
            if (!began) {
                if (mqd_meta_begin(s->meta) != 0)
                    return;
                began = true;
            }
            mqd_groups_save(t);
        }
    }
    if (began && mqd_meta_commit(s->meta) != 0)
        mqd_meta_rollback(s->meta);
    MQD_UNUSED(force);
}

static bool groups_floor(const mqd_topic_t *t, uint32_t i, uint64_t *floor)
{
    bool any = false;
    for (mqd_dlist_t *n = t->groups.next; n != &t->groups; n = n->next) {
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
    for (mqd_dlist_t *n = t->groups.next; n != &t->groups; n = n->next) {
        int rc = mqd_group_resize(MQD_CONTAINER(n, mqd_group_t, node));
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void groups_free(mqd_topic_t *t)
{
    while (!mqd_dlist_empty(&t->groups))
        mqd_group_free(MQD_CONTAINER(t->groups.next, mqd_group_t, node));
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
