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

/* A group whose saves keep failing is retried after 1, 2, 4 ... 32 s, then every 32 s:
 * a disk that stays full costs a log line (SQLite's error) per retry, not one a second. */
#define RETRY_MAX_SHIFT 5

/* Is g to be saved now? Not while a failing one waits for its retry, unless `force` (a
 * detach, the stop). */
static bool group_due(const mqd_group_t *g, bool force, int64_t now)
{
    return !g->save_failures || force || now >= g->save_retry_ms;
}

static bool topic_due(const mqd_topic_t *t, bool force, int64_t now)
{
    const mqd_dlist_t *gs = mqd_topic_groups_const(t);
    for (const mqd_dlist_t *n = gs->next; n != gs; n = n->next) {
        const mqd_group_t *g = MQD_CONTAINER(n, mqd_group_t, node);
        for (uint32_t i = 0; g->active && i < g->ncur; i++)
            if (g->cur[i].dirty && group_due(g, force, now))
                return true;
    }
    return false;
}

/* Saves t's due group positions in the caller's SQLite transaction, marking each group
 * that had some (g->persisting). Stops at the first error (the batch is rolled back). */
static int save_topic(mqd_topic_t *t, bool force, int64_t now)
{
    mqd_dlist_t *gs = mqd_topic_groups(t);
    for (mqd_dlist_t *n = gs->next; n != gs; n = n->next) {
        mqd_group_t *g = MQD_CONTAINER(n, mqd_group_t, node);
        if (!group_due(g, force, now))
            continue;
        for (uint32_t i = 0; g->active && i < g->ncur; i++) {
            if (!g->cur[i].dirty)
                continue;
            g->persisting = true;
            int rc = mqd_cursor_save(&g->cur[i], mqd_topic_part(t, i), g->name);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

void group_save_failed(mqd_group_t *g, int rc, const char *what)
{
    mqd_srv_count_group_commit_failure(mqd_topic_srv(g->topic));
    MQD_ERR("group",
            "%s of group=%s topic=%s: offsets not saved to meta.db: %s; they are kept in "
            "memory only until a save succeeds (a restart before that starts the group from "
            "its last saved offsets, or anew if it never had any)",
            what, g->name, mqd_topic_name(g->topic), mqd_strerror(rc));
}

/* After the batch's commit (rc: its outcome). A group whose state did not reach meta.db
 * is dirty again, so that a later persist retries it; each failure is counted, the first
 * of a run logged, and the save that ends the run too. */
static void batch_done(mqd_server_t *s, int rc, int64_t now)
{
    for (mqd_topic_t *t = mqd_srv_topic_first(s); t; t = mqd_srv_topic_next(t)) {
        mqd_dlist_t *gs = mqd_topic_groups(t);
        for (mqd_dlist_t *n = gs->next; n != gs; n = n->next) {
            mqd_group_t *g = MQD_CONTAINER(n, mqd_group_t, node);
            if (!g->persisting)
                continue;
            g->persisting = false;
            if (rc == 0 && g->save_failures) {
                MQD_NOTICE("group",
                           "group=%s topic=%s: offsets saved again after %u failed attempts",
                           g->name, mqd_topic_name(t), g->save_failures);
                g->save_failures = 0;
            }
            if (rc == 0)
                continue;
            for (uint32_t i = 0; i < g->ncur; i++)
                g->cur[i].dirty = true; /* the rolled-back batch saved none of them */
            uint32_t shift =
                g->save_failures < RETRY_MAX_SHIFT ? g->save_failures : RETRY_MAX_SHIFT;
            g->save_retry_ms = now + (1000 << shift);
            if (g->save_failures++ == 0)
                group_save_failed(g, rc, "persist");
            else
                mqd_srv_count_group_commit_failure(s);
        }
    }
}

/* Writes every group's changed offsets and ack state in one SQLite transaction: the
 * per-message path never touches SQLite. */
void mqd_topics_persist(mqd_server_t *s, bool force)
{
    mqd_meta_t *meta = mqd_srv_meta(s);
    int64_t now = mqd_now_ms();
    bool began = false;
    int rc = 0;
    for (mqd_topic_t *t = mqd_srv_topic_first(s); t; t = mqd_srv_topic_next(t)) {
        if (mqd_topic_temporary(t) || !topic_due(t, force, now))
            continue;
        if (!began) {
            if (mqd_meta_begin(meta) != 0)
                return;
            began = true;
        }
        if ((rc = save_topic(t, force, now)) != 0)
            break;
    }
    if (!began)
        return;
    if (rc == 0)
        rc = mqd_meta_commit(meta); /* rolled back when it fails */
    else
        mqd_meta_rollback(meta);
    batch_done(s, rc, now);
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
