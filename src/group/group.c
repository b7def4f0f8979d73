/* Consumer groups of a topic.
 *
 * `$shared` (plain address T) is a queue: any member takes records of any partition.
 * Every other group is exclusive: each partition is delivered by one member at a time.
 * Manual members (T/ConsumerGroups/G/Partitions/N) own their partition; the others share
 * the remaining partitions round robin in join order. When the assignment changes, a
 * partition moves to its new member only once the old one has nothing in flight from
 * it (settled, released, or its link gone), so two live members never hold the same
 * record and none is lost. `com.microsoft:epoch`: a member with an epoch steals the
 * partitions of overlapping members with a lower or equal one (amqp:link:stolen); a
 * lower epoch is refused. */
#include "config.h"
#include "group/group_int.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static mqd_group_t *group_find(mqd_topic_t *t, const char *name)
{
    mqd_dlist_t *gs = mqd_topic_groups(t);
    for (mqd_dlist_t *n = gs->next; n != gs; n = n->next) {
        mqd_group_t *g = MQD_CONTAINER(n, mqd_group_t, node);
        if (strcasecmp(g->name, name) == 0)
            return g;
    }
    return NULL;
}

int mqd_group_resize(mqd_group_t *g)
{
    mqd_topic_t *t = g->topic;
    uint32_t nparts = mqd_topic_nparts(t);
    if (g->ncur >= nparts)
        return 0;
    mqd_cursor_t *nc = realloc(g->cur, nparts * sizeof *nc);
    if (!nc)
        return MQD_ENOMEM;
    g->cur = nc;
    mqd_lstate_t **no = realloc(g->owner, nparts * sizeof *no);
    if (!no)
        return MQD_ENOMEM;
    g->owner = no;
    mqd_lstate_t **nt = realloc(g->target, nparts * sizeof *nt);
    if (!nt)
        return MQD_ENOMEM;
    g->target = nt;
    for (uint32_t i = g->ncur; i < nparts; i++) {
        g->owner[i] = g->target[i] = NULL;
        /* a partition added later is read from its start by every group */
        int rc = mqd_cursor_init(&g->cur[i], mqd_topic_part(t, i), g->name,
                                 g->ncur ? MQD_OFFSET_RESET_EARLIEST
                                         : mqd_topic_conf(t)->auto_offset_reset);
        if (rc != 0)
            return rc;
        g->ncur = i + 1;
    }
    return 0;
}

int mqd_group_get(mqd_topic_t *t, const char *name, mqd_group_t **out)
{
    mqd_group_t *g = group_find(t, name);
    if (g) {
        *out = g;
        return 0;
    }
    g = calloc(1, sizeof *g);
    if (!g || !(g->name = strdup(name))) {
        free(g);
        return MQD_ENOMEM;
    }
    for (char *c = g->name; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    g->topic = t;
    g->mode = strcmp(g->name, MQD_SHARED_GROUP) == 0 ? MQD_GROUP_SHARED : MQD_GROUP_EXCLUSIVE;
    mqd_dlist_init(&g->members);
    mqd_dlist_push(mqd_topic_groups(t), &g->node);
    int rc = mqd_group_resize(g);
    if (rc != 0) {
        mqd_group_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

void mqd_group_free(mqd_group_t *g)
{
    mqd_dlist_del(&g->node);
    for (uint32_t i = 0; i < g->ncur; i++)
        mqd_cursor_free(&g->cur[i]);
    free(g->cur);
    free(g->owner);
    free(g->target);
    free(g->name);
    free(g);
}

static bool overlaps(const mqd_lstate_t *a, const mqd_lstate_t *b)
{
    return !mqd_ls_manual(a) || !mqd_ls_manual(b) || mqd_ls_part(a) == mqd_ls_part(b);
}

/* Applies the epoch rules for a joining link; MQD_EEXIST if it must be refused. */
static int epoch_check(mqd_group_t *g, mqd_lstate_t *ls)
{
    for (mqd_dlist_t *n = g->members.next; n != &g->members; n = n->next) {
        mqd_lstate_t *m = mqd_ls_of_gnode(n);
        if (!overlaps(m, ls))
            continue;
        if (mqd_ls_has_epoch(m) && (!mqd_ls_has_epoch(ls) || mqd_ls_epoch(m) > mqd_ls_epoch(ls)))
            return MQD_EEXIST;
        if (!mqd_ls_has_epoch(ls) && mqd_ls_manual(ls) && mqd_ls_manual(m))
            return MQD_EAGAIN; /* one manual reader per partition and group */
    }
    if (!mqd_ls_has_epoch(ls))
        return 0;
    for (mqd_dlist_t *n = g->members.next; n != &g->members;) {
        mqd_lstate_t *m = mqd_ls_of_gnode(n);
        n = n->next;
        /* equal epochs too: Azure disconnects e1 when e2 >= e1 attaches, and the SDKs'
         * load balancing (every receiver at owner level 0) relies on the newcomer winning */
        if (overlaps(m, ls) && (!mqd_ls_has_epoch(m) || mqd_ls_epoch(m) <= mqd_ls_epoch(ls)))
            mqd_ls_detach(m, "amqp:link:stolen",
                          "a receiver with an equal or higher epoch took over this partition");
    }
    return 0;
}

/* Moves partition i to its target if the current owner has nothing in flight. */
static void try_handoff(mqd_group_t *g, uint32_t i)
{
    if (g->owner[i] == g->target[i])
        return;
    if (g->owner[i] && g->cur[i].inflight > 0)
        return;
    g->owner[i] = g->target[i];
    if (g->owner[i])
        mqd_topic_dispatch_soon(g->topic);
}

/* ---- local-only members (mqd:fwd-local-only, issue 33) ----
 * In a cluster a member reading the whole group may be served by several leaders at once:
 * the node it is connected to opens one leg (a local-only link) on each node that leads
 * a partition of the topic, and each leader's group assigns only the partitions it leads
 * among the legs attached there, exclusively, as a single node assigns all of them. If
 * every leader put its legs in join order, the members that came first would get the
 * partitions of every leader and later ones none; so legs are ordered by a hash of their
 * name and this node's id, which differs from node to node: with several leaders the
 * members get spread partitions overall. */

typedef struct ranked {
    uint32_t h;
    mqd_lstate_t *ls;
} ranked_t;

static uint32_t leg_hash(const char *name, uint32_t node)
{
    uint32_t h = 2166136261u;
    for (int i = 0; i < 4; i++)
        h = (h ^ ((node >> (8 * i)) & 0xff)) * 16777619u;
    while (*name)
        h = (h ^ (uint8_t)*name++) * 16777619u;
    return h ^ (h >> 15);
}

static int ranked_cmp(const void *a, const void *b)
{
    const ranked_t *x = a, *y = b;
    if (x->h != y->h)
        return x->h < y->h ? -1 : 1;
    return strcmp(mqd_ls_name(x->ls), mqd_ls_name(y->ls));
}

/* The group's automatically assigned members in the order partitions go to them: the
 * hash order when one of them is local-only (then *led_only: only the partitions led
 * here are assigned), else NULL (join order, as on a single node). */
static ranked_t *auto_order(mqd_group_t *g, size_t nauto, bool *led_only)
{
    *led_only = false;
    for (mqd_dlist_t *n = g->members.next; n != &g->members; n = n->next)
        *led_only = *led_only || mqd_ls_local_only(mqd_ls_of_gnode(n));
    ranked_t *v = *led_only ? calloc(nauto, sizeof *v) : NULL;
    if (!v)
        return NULL; /* join order (out of memory: still exclusive) */
    uint32_t self = mqd_srv_conf(mqd_topic_srv(g->topic))->node_id;
    size_t k = 0;
    for (mqd_dlist_t *n = g->members.next; n != &g->members && k < nauto; n = n->next) {
        mqd_lstate_t *m = mqd_ls_of_gnode(n);
        if (!mqd_ls_manual(m))
            v[k++] = (ranked_t){leg_hash(mqd_ls_name(m), self), m};
    }
    qsort(v, k, sizeof *v, ranked_cmp);
    return v;
}

/* The k-th automatically assigned member in join order. */
static mqd_lstate_t *auto_nth(mqd_group_t *g, size_t want)
{
    size_t j = 0;
    for (mqd_dlist_t *n = g->members.next; n != &g->members; n = n->next) {
        mqd_lstate_t *m = mqd_ls_of_gnode(n);
        if (!mqd_ls_manual(m) && j++ == want)
            return m;
    }
    return NULL;
}

static void rebalance(mqd_group_t *g)
{
    if (g->mode != MQD_GROUP_EXCLUSIVE)
        return;
    size_t nauto = 0;
    for (uint32_t i = 0; i < g->ncur; i++)
        g->target[i] = NULL;
    for (mqd_dlist_t *n = g->members.next; n != &g->members; n = n->next) {
        mqd_lstate_t *m = mqd_ls_of_gnode(n);
        if (mqd_ls_manual(m) && mqd_ls_part(m) < g->ncur)
            g->target[mqd_ls_part(m)] = m;
        else if (!mqd_ls_manual(m))
            nauto++;
    }
    bool led_only = false;
    ranked_t *order = nauto ? auto_order(g, nauto, &led_only) : NULL;
    size_t k = 0;
    for (uint32_t i = 0; i < g->ncur && nauto; i++) {
        if (g->target[i] || (led_only && !mqd_part_led(mqd_topic_part(g->topic, i))))
            continue;
        size_t want = k++ % nauto;
        g->target[i] = order ? order[want].ls : auto_nth(g, want);
    }
    free(order);
    for (uint32_t i = 0; i < g->ncur; i++)
        try_handoff(g, i);
}

int mqd_group_join(mqd_group_t *g, mqd_lstate_t *ls)
{
    int rc = epoch_check(g, ls);
    if (rc != 0)
        return rc;
    mqd_ls_set_group(ls, g);
    g->active = true;
    mqd_dlist_push(&g->members, mqd_ls_gnode(ls));
    g->n_members++;
    rebalance(g);
    MQD_INFO("group", "join topic=%s group=%s member=%s members=%zu", mqd_topic_name(g->topic),
             g->name, mqd_ls_name(ls), g->n_members);
    return 0;
}

void mqd_group_leave(mqd_group_t *g, mqd_lstate_t *ls)
{
    if (mqd_ls_group(ls) != g)
        return;
    mqd_dlist_del(mqd_ls_gnode(ls));
    g->n_members--;
    mqd_ls_set_group(ls, NULL);
    for (uint32_t i = 0; i < g->ncur; i++) {
        if (g->owner[i] == ls)
            g->owner[i] = NULL; /* its unsettled records were released by the caller */
        if (g->target[i] == ls)
            g->target[i] = NULL;
    }
    rebalance(g);
    mqd_topic_dispatch_soon(g->topic);
    MQD_INFO("group", "leave topic=%s group=%s member=%s members=%zu", mqd_topic_name(g->topic),
             g->name, mqd_ls_name(ls), g->n_members);
}

bool mqd_group_may_deliver(mqd_group_t *g, mqd_lstate_t *ls, uint32_t i)
{
    if (i >= g->ncur || (mqd_ls_local_only(ls) && !mqd_part_led(mqd_topic_part(g->topic, i))))
        return false;
    if (g->mode == MQD_GROUP_SHARED)
        return true;
    return g->owner[i] == ls && g->target[i] == ls;
}

void mqd_group_settled(mqd_group_t *g, uint32_t i)
{
    if (g->mode == MQD_GROUP_EXCLUSIVE && i < g->ncur)
        try_handoff(g, i);
}

static int load_one(const mqd_meta_offset_t *o, void *arg)
{
    mqd_topic_t *t = arg;
    mqd_group_t *g;
    if (strncmp(o->group, "$tmp", 4) == 0)
        return 0;
    int rc = mqd_group_get(t, o->group, &g);
    if (rc == 0)
        g->active = true;
    return rc;
}

int mqd_groups_load(mqd_topic_t *t)
{
    return mqd_meta_offset_list(mqd_srv_meta(mqd_topic_srv(t)), mqd_topic_name(t), NULL, load_one,
                                t);
}

void mqd_groups_save(mqd_topic_t *t)
{
    mqd_dlist_t *gs = mqd_topic_groups(t);
    for (mqd_dlist_t *n = gs->next; n != gs; n = n->next) {
        mqd_group_t *g = MQD_CONTAINER(n, mqd_group_t, node);
        for (uint32_t i = 0; g->active && i < g->ncur; i++)
            if (g->cur[i].dirty)
                mqd_cursor_save(&g->cur[i], mqd_topic_part(t, i), g->name);
    }
}

/* ---------------------------------------------------------------- management */

int mqd_group_list(mqd_topic_t *t, mqd_group_cb cb, void *arg)
{
    mqd_dlist_t *gs = mqd_topic_groups(t);
    for (mqd_dlist_t *n = gs->next; n != gs; n = n->next) {
        mqd_group_t *g = MQD_CONTAINER(n, mqd_group_t, node);
        int rc = cb(g->name, (mqd_group_mode_t)g->mode, g->n_members, arg);
        if (rc != 0)
            return rc;
    }
    return 0;
}

bool mqd_group_unused_queue(mqd_topic_t *t, const char *group)
{
    mqd_group_t *g = strcmp(group, MQD_SHARED_GROUP) == 0 ? group_find(t, group) : NULL;
    return g && !g->active && g->n_members == 0;
}

int mqd_group_describe(mqd_topic_t *t, const char *group, mqd_group_part_cb cb, void *arg)
{
    mqd_group_t *g = group_find(t, group);
    if (!g)
        return MQD_ENOENT;
    for (uint32_t i = 0; i < g->ncur; i++) {
        mqd_part_t *p = mqd_topic_part(t, i);
        mqd_group_part_info_t pi = {
            .partition = i,
            .committed = g->cur[i].floor,
            .log_start = mqd_plog_start_offset(mqd_part_log(p)),
            .log_end = mqd_part_visible_end(p, MQD_READ_UNCOMMITTED),
            .inflight = g->cur[i].inflight,
            .owner = g->owner[i] ? mqd_ls_name(g->owner[i]) : NULL,
        };
        pi.lag = pi.log_end > pi.committed ? pi.log_end - pi.committed : 0;
        pi.backlog = mqd_part_messages(p, pi.committed, pi.log_end);
        int rc = cb(&pi, arg);
        if (rc != 0)
            return rc;
    }
    return 0;
}

uint64_t mqd_group_reset_target(mqd_topic_t *t, uint32_t i, mqd_reset_t how, int64_t value,
                                uint64_t committed)
{
    mqd_part_t *p = mqd_topic_part(t, i);
    mqd_plog_t *log = mqd_part_log(p);
    uint64_t start = mqd_plog_start_offset(log), end = mqd_part_visible_end(p, MQD_READ_UNCOMMITTED);
    uint64_t to = 0;
    switch (how) {
    case MQD_RESET_EARLIEST: to = start; break;
    case MQD_RESET_LATEST: to = end; break;
    case MQD_RESET_OFFSET: to = value < 0 ? 0 : (uint64_t)value; break;
    case MQD_RESET_TIME:
        if (mqd_plog_offset_for_time(log, value, &to) != 0)
            to = end;
        break;
    case MQD_RESET_SHIFT:
        if (value < 0)
            to = (uint64_t)-value > committed ? 0 : committed - (uint64_t)-value;
        else
            to = committed + (uint64_t)value < committed ? UINT64_MAX - 1 : committed + (uint64_t)value;
        break;
    }
    return to < start ? start : to > end ? end : to; /* as mqd_cursor_seek clamps */
}

int mqd_group_seek(mqd_topic_t *t, const char *group, const uint64_t *to, uint32_t n)
{
    mqd_group_t *g;
    int rc = mqd_group_get(t, group, &g);
    if (rc != 0)
        return rc;
    if (g->n_members > 0)
        return MQD_ESTATE;
    if (n > g->ncur && (rc = mqd_group_resize(g)) != 0)
        return rc;
    g->active = true;
    for (uint32_t i = 0; i < g->ncur && i < n; i++)
        if (to[i] != UINT64_MAX)
            mqd_cursor_seek(&g->cur[i], mqd_topic_part(t, i), to[i]);
    for (uint32_t i = 0; i < g->ncur; i++)
        g->cur[i].dirty = true; /* every partition's position is written */
    rc = mqd_group_save_now(g, "reset");
    MQD_INFO("group", "reset topic=%s group=%s rc=%d", mqd_topic_name(t), g->name, rc);
    return rc;
}

int mqd_group_save_now(mqd_group_t *g, const char *what)
{
    mqd_topic_t *t = g->topic;
    mqd_meta_t *meta = mqd_srv_meta(mqd_topic_srv(t));
    int rc = mqd_meta_begin(meta);
    if (rc != 0)
        return rc;
    for (uint32_t i = 0; i < g->ncur && rc == 0; i++)
        if (g->cur[i].dirty)
            rc = mqd_cursor_save(&g->cur[i], mqd_topic_part(t, i), g->name);
    if (rc == 0)
        rc = mqd_meta_commit(meta);
    else
        mqd_meta_rollback(meta);
    if (rc != 0)
        group_save_failed(g, rc, what);
    return rc;
}

void mqd_groups_sched_tick(mqd_server_t *s)
{
    int64_t now = mqd_now_ms();
    for (mqd_topic_t *t = mqd_srv_topic_first(s); t; t = mqd_srv_topic_next(t)) {
        bool due = false;
        mqd_dlist_t *groups = mqd_topic_groups(t);
        for (mqd_dlist_t *n = groups->next; n != groups; n = n->next) {
            mqd_group_t *g = MQD_CONTAINER(n, mqd_group_t, node);
            for (uint32_t i = 0; i < g->ncur; i++)
                if (mqd_cursor_sched_next(&g->cur[i]) <= now)
                    due |= mqd_cursor_sched_release(&g->cur[i]);
        }
        if (due)
            mqd_topic_wake_consumers(t);
    }
}

int mqd_group_reset(mqd_topic_t *t, const char *group, mqd_reset_t how, int64_t value)
{
    uint32_t n = mqd_topic_nparts(t);
    uint64_t *to = calloc(n ? n : 1, sizeof *to);
    if (!to)
        return MQD_ENOMEM;
    for (uint32_t i = 0; i < n; i++) /* a shift of a group made here: from the log start */
        to[i] = mqd_group_reset_target(t, i, how, value, 0);
    int rc = mqd_group_seek(t, group, to, n);
    free(to);
    return rc;
}

int mqd_group_delete(mqd_topic_t *t, const char *group)
{
    mqd_group_t *g = group_find(t, group);
    if (!g)
        return MQD_ENOENT;
    if (g->n_members > 0)
        return MQD_ESTATE;
    int rc = mqd_meta_group_delete(mqd_srv_meta(mqd_topic_srv(t)), mqd_topic_name(t), g->name);
    mqd_group_free(g);
    return rc;
}

int mqd_group_commit(mqd_topic_t *t, const char *group, uint32_t partition, uint64_t offset)
{
    if (partition >= mqd_topic_nparts(t))
        return MQD_ENOENT;
    bool fresh = group_find(t, group) == NULL;
    mqd_group_t *g;
    int rc = mqd_group_get(t, group, &g);
    if (rc != 0)
        return rc;
    if (g->n_members > 0)
        return MQD_ESTATE;
    if (partition >= g->ncur && (rc = mqd_group_resize(g)) != 0)
        return rc;
    g->active = true;
    /* a group made here starts every other partition at its log start whatever
     * auto_offset_reset says: "nothing committed yet" stays recognisable (offset 0) */
    for (uint32_t i = 0; fresh && i < g->ncur; i++)
        mqd_cursor_seek(&g->cur[i], mqd_topic_part(t, i),
                        mqd_plog_start_offset(mqd_part_log(mqd_topic_part(t, i))));
    mqd_cursor_seek(&g->cur[partition], mqd_topic_part(t, partition), offset);
    rc = mqd_group_save_now(g, "commit");
    MQD_DEBUG("group", "commit topic=%s group=%s partition=%u offset=%llu rc=%d", mqd_topic_name(t),
              g->name, partition, (unsigned long long)g->cur[partition].floor, rc);
    return rc;
}

/* ---- accessors (the structs are group/'s own: group_int.h) ---- */

mqd_cursor_t *mqd_group_cursor(mqd_group_t *g, uint32_t i)
{
    return i < g->ncur ? &g->cur[i] : NULL;
}

uint32_t mqd_group_nparts(const mqd_group_t *g)
{
    return g->ncur;
}

size_t mqd_group_members(const mqd_group_t *g)
{
    return g->n_members;
}

mqd_group_mode_t mqd_group_mode(const mqd_group_t *g)
{
    return (mqd_group_mode_t)g->mode;
}

const char *mqd_group_name(const mqd_group_t *g)
{
    return g->name;
}

mqd_topic_t *mqd_group_topic(const mqd_group_t *g)
{
    return g->topic;
}

uint64_t mqd_cursor_floor(const mqd_cursor_t *cur)
{
    return cur->floor;
}

bool mqd_cursor_dirty(const mqd_cursor_t *cur)
{
    return cur->dirty;
}

const uint64_t *mqd_cursor_redeliver(const mqd_cursor_t *cur, size_t *n, uint64_t *gen)
{
    *n = cur->redeliver.n;
    *gen = cur->redeliver_gen;
    return cur->redeliver.v;
}

bool mqd_group_follow_moves(bool live, uint64_t inflight, uint64_t next_read, uint64_t floor)
{
    if (inflight > 0)
        return false; /* records out on a link: their settlement keeps the bookkeeping */
    return !live || floor >= next_read;
}

/* A link of the group reads partition i here: its owner or the member it goes to next
 * (exclusive groups), any member (the shared group takes any partition) but a
 * local-only one while this node does not lead i (it reads only what is led here). */
static bool live_at(const mqd_group_t *g, uint32_t i)
{
    if (g->mode != MQD_GROUP_SHARED)
        return g->owner[i] != NULL || g->target[i] != NULL;
    bool led = mqd_part_led(mqd_topic_part(g->topic, i));
    for (const mqd_dlist_t *n = g->members.next; n != &g->members; n = n->next)
        if (led || !mqd_ls_local_only(mqd_ls_of_gnode((mqd_dlist_t *)n)))
            return true;
    return false;
}

void mqd_groups_lead_moved(mqd_topic_t *t, uint32_t i)
{
    mqd_dlist_t *gs = mqd_topic_groups(t);
    for (mqd_dlist_t *n = gs->next; n != gs; n = n->next) {
        mqd_group_t *g = MQD_CONTAINER(n, mqd_group_t, node);
        if (i >= g->ncur)
            continue;
        mqd_cursor_reread(&g->cur[i]);
        if (g->mode == MQD_GROUP_EXCLUSIVE) {
            g->owner[i] = NULL; /* nothing of it is in flight here any more */
            rebalance(g);
        }
    }
    mqd_topic_dispatch_soon(t);
}

void mqd_group_follow_floor(mqd_topic_t *t, const char *name, uint32_t i, uint64_t floor)
{
    mqd_group_t *g = group_find(t, name);
    if (!g || i >= g->ncur)
        return;
    mqd_cursor_t *cur = &g->cur[i];
    bool live = live_at(g, i);
    bool moves = mqd_group_follow_moves(live, cur->inflight, cur->next_read, floor);
    if (live) /* a follower serves no link (repl/serve.c): this is a bug */
        MQD_WARN("group",
                 "topic=%s group=%s partition=%u: committed offset %llu from the partition's "
                 "leader while a link reads it here at %llu: %s",
                 mqd_topic_name(t), g->name, i, (unsigned long long)floor,
                 (unsigned long long)cur->next_read, moves ? "moved forward" : "kept");
    if (moves)
        mqd_cursor_seek(cur, mqd_topic_part(t, i), floor);
}
