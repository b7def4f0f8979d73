/* Topics and partitions: the registry (hash by name, persisted in meta.db), appends
 * (settled by the partition's commit point, part_commit.c) and consumer dispatch. */
#include "config.h"
#include "core/core.h"
#include "core/core_int.h"

#include <dirent.h>
#include <inttypes.h>
#include <jansson.h>
#include <proton/disposition.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t hash_name(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

size_t mqd_topic_bucket(const mqd_server_t *s, const char *name)
{
    return hash_name(name) & (s->topics_cap - 1);
}

mqd_topic_t *mqd_topic_find(mqd_server_t *s, const char *name)
{
    if (s->topics_cap == 0)
        return NULL;
    for (mqd_topic_t *t = s->topics[hash_name(name) & (s->topics_cap - 1)]; t; t = t->hnext)
        if (strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

static int table_grow(mqd_server_t *s)
{
    size_t ncap = s->topics_cap ? s->topics_cap * 2 : 64;
    mqd_topic_t **nt = calloc(ncap, sizeof *nt);
    if (!nt)
        return MQD_ENOMEM;
    for (size_t i = 0; i < s->topics_cap; i++) {
        mqd_topic_t *t = s->topics[i];
        while (t) {
            mqd_topic_t *next = t->hnext;
            size_t b = hash_name(t->name) & (ncap - 1);
            t->hnext = nt[b];
            nt[b] = t;
            t = next;
        }
    }
    free(s->topics);
    s->topics = nt;
    s->topics_cap = ncap;
    return 0;
}

/* Settled sends go to a free list: no malloc per message in the steady state. */
void mqd_pending_release(mqd_server_t *s, mqd_pending_t *pe)
{
    free(pe->batch_keys);
    pe->batch_keys = NULL;
    if (s->n_pend_free >= 65536) {
        free(pe);
        return;
    }
    pe->next = s->pend_free;
    s->pend_free = pe;
    s->n_pend_free++;
}

void mqd_pending_pool_free(mqd_server_t *s)
{
    while (s->pend_free) {
        mqd_pending_t *pe = s->pend_free;
        s->pend_free = pe->next;
        free(pe);
    }
    s->n_pend_free = 0;
}

/* The store's stable callback: everything it implies goes through the commit point. */
static void on_stable(mqd_plog_t *log, uint64_t stable, void *arg)
{
    MQD_UNUSED(log);
    mqd_part_stable_advanced(arg, stable);
}

void mqd_topic_wake_consumers(mqd_topic_t *t)
{
    if (!mqd_dlist_empty(&t->consumers))
        mqd_topic_dispatch_soon(t);
    if (t->ext_consumers && t->srv->ops.topic_wake)
        t->srv->ops.topic_wake(t);
}

/* Commit point subscribers: consumers waiting for data, commits waiting for records. */
static void wake_consumers(mqd_part_t *p, uint64_t visible_end, void *arg)
{
    MQD_UNUSED(p);
    MQD_UNUSED(visible_end);
    mqd_topic_wake_consumers(arg);
}

uint32_t mqd_topic_ext_consumers(mqd_topic_t *t, int delta)
{
    if (delta < 0 && t->ext_consumers < (uint32_t)-delta)
        t->ext_consumers = 0;
    else
        t->ext_consumers += (uint32_t)delta;
    return t->ext_consumers;
}

static void wake_txns(mqd_part_t *p, uint64_t visible_end, void *arg)
{
    MQD_UNUSED(p);
    MQD_UNUSED(visible_end);
    mqd_server_t *s = arg;
    if (s->ops.txns_wake)
        s->ops.txns_wake(s);
}

/* The store's name for a topic: '/' (only in "T/$DeadLetterQueue") becomes "%2F", which
 * no topic name can contain, so every topic keeps one flat directory. */
static void store_name(const char *name, char *out, size_t outlen)
{
    size_t o = 0;
    for (const char *p = name; *p && o + 4 < outlen; p++) {
        if (*p == '/') {
            memcpy(out + o, "%2F", 3);
            o += 3;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

static mqd_topic_build_t *build_find(mqd_server_t *s, const char *name);

static int part_open(mqd_topic_t *t, mqd_part_t *p, uint32_t id)
{
    char sname[3 * MQD_NAME_MAX + 1];
    store_name(t->name, sname, sizeof sname);
    p->topic = t;
    p->id = id;
    /* the commit point first: a partition whose log is open counts (topic_grow) and is
     * freed with part_free, but one that failed here is not */
    int rc = mqd_part_commit_init(p);
    if (rc == 0 && (rc = mqd_part_commit_subscribe(p, wake_consumers, t)) == 0)
        rc = mqd_part_commit_subscribe(p, wake_txns, t->srv);
    if (rc == 0)
        rc = mqd_store_log_open(t->srv->store, sname, id, &t->conf.log, &p->log);
    if (rc != 0) {
        MQD_ERR("topic", "open %s/%u: %s", t->name, id, mqd_strerror(rc));
        mqd_part_commit_free(p);
        return rc;
    }
    mqd_plog_set_stable_cb(p->log, on_stable, p);
    mqd_part_count_open(p); /* out of memory: counts are estimates, the topic works */
    return 0;
}

/* The partitions are allocated one by one and t->parts holds pointers to them: growing
 * a topic moves no partition, so what others hold (the replication layer's replica, the
 * store's stable callback) stays valid across `mqctl topic alter --partitions`. */
static int topic_grow(mqd_topic_t *t, uint32_t nparts)
{
    if (nparts <= t->nparts)
        return 0;
    mqd_part_t **np = realloc(t->parts, nparts * sizeof *np);
    if (!np)
        return MQD_ENOMEM;
    t->parts = np;
    for (uint32_t i = t->nparts; i < nparts; i++) {
        mqd_part_t *p = calloc(1, sizeof *p);
        int rc = p ? part_open(t, p, i) : MQD_ENOMEM;
        if (rc != 0) {
            free(p);
            return rc;
        }
        np[i] = p;
        t->nparts = i + 1;
    }
    return t->srv->ops.groups_grow ? t->srv->ops.groups_grow(t) : 0;
}

/* Per-topic settings changed through management are kept as JSON overrides in meta.db
 * and applied over the config file's settings at every start; a topic without
 * overrides follows the config file. */
int mqd_topic_setting_apply(mqd_topic_conf_t *tc, const char *key, const struct json_t *v,
                            char *err, size_t errlen)
{
    /* the config file's parser (units, bounds, every [topic] key): management takes what
     * the file takes; numbers stored by older versions are plain ms/bytes */
    char text[64];
    const char *val = text;
    if (strcmp(key, "partitions") == 0) {
        /* a count, not a setting: create/alter take it apart */
        snprintf(err, errlen, "partitions: a count, not a setting (the 'partitions' "
                              "property; mqctl --partitions N)");
        return MQD_EINVAL;
    }
    if (json_is_string(v))
        val = json_string_value(v);
    else if (json_is_integer(v))
        snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
    else if (json_is_boolean(v))
        snprintf(text, sizeof text, "%s", json_is_true(v) ? "on" : "off");
    else {
        snprintf(err, errlen, "%s: expected a string, number or boolean", key);
        return MQD_EINVAL;
    }
    return mqd_conf_topic_setting(tc, key, val, err, errlen);
}

static int apply_one(mqd_topic_conf_t *tc, const char *key, json_t *v)
{
    char err[256];
    return mqd_topic_setting_apply(tc, key, v, err, sizeof err);
}

/* Applies `overrides` (a JSON object) to tc; MQD_EINVAL names nothing but fails whole. */
static int apply_overrides(mqd_topic_conf_t *tc, json_t *overrides)
{
    const char *key;
    json_t *v;
    mqd_topic_conf_t tmp = *tc;
    json_object_foreach(overrides, key, v) {
        if (apply_one(&tmp, key, v) != 0)
            return MQD_EINVAL;
    }
    *tc = tmp;
    return 0;
}

static void topic_set_conf(mqd_topic_t *t)
{
    mqd_conf_topic(t->srv->conf, t->name, &t->conf);
    t->conf.name = NULL;
    const char *key;
    json_t *v;
    /* one by one: a value stored by an older version that the config parser now refuses
     * (tighter bounds) costs that setting, not all of the topic's */
    char err[256];
    json_object_foreach(t->overrides, key, v) {
        if (mqd_topic_setting_apply(&t->conf, key, v, err, sizeof err) != 0)
            MQD_WARN("topic", "%s: setting %s ignored: not a valid value for it here (%s)", t->name,
                     key, err);
    }
    t->conf.log.retention_consumed = t->conf.retention_consumed;
    for (uint32_t i = 0; i < t->nparts; i++)
        mqd_plog_set_config(t->parts[i]->log, &t->conf.log);
}

static char *topic_config_json(const mqd_topic_t *t)
{
    return t->overrides ? json_dumps(t->overrides, JSON_COMPACT | JSON_SORT_KEYS) : strdup("{}");
}

static mqd_topic_t *topic_alloc(mqd_server_t *s, const char *name, json_t *overrides)
{
    mqd_topic_t *t = calloc(1, sizeof *t);
    if (!t || !(t->name = strdup(name))) {
        free(t);
        return NULL;
    }
    t->srv = s;
    t->created_ms = mqd_now_ms();
    t->overrides = overrides; /* taken */
    topic_set_conf(t);
    mqd_dlist_init(&t->consumers);
    mqd_dlist_init(&t->groups);
    mqd_dlist_init(&t->dnode);
    mqd_dlist_init(&t->lnode);
    return t;
}

/* Groups, meta.db and the topic table for t, whose partitions are open (rc says how
 * that went; the table has room for one more); on failure t is deleted. */
static int topic_publish(mqd_server_t *s, mqd_topic_t *t, bool persist, int rc)
{
    if (rc == 0 && s->ops.groups_open) /* an existing topic: its groups' offsets */
        rc = s->ops.groups_open(t, !persist);
    if (rc == 0 && persist) {
        char *cj = topic_config_json(t);
        rc = mqd_meta_topic_put(s->meta, t->name, t->nparts, cj ? cj : "{}");
        free(cj);
    }
    size_t b = hash_name(t->name) & (s->topics_cap - 1);
    t->hnext = s->topics[b];
    s->topics[b] = t;
    s->n_topics++;
    if (rc != 0)
        mqd_topic_delete(s, t);
    else if (s->repl.topic_created)
        s->repl.topic_created(s->repl.arg, t); /* cluster: registered in etcd (src/repl) */
    return rc;
}

static int topic_create(mqd_server_t *s, const char *name, uint32_t nparts, bool persist,
                        json_t *overrides, mqd_topic_t **out)
{
    if (s->n_topics + 1 > s->topics_cap / 2 && table_grow(s) != 0)
        return MQD_ENOMEM;
    mqd_topic_t *t = topic_alloc(s, name, overrides);
    if (!t)
        return MQD_ENOMEM;
    int rc = topic_publish(s, t, persist, topic_grow(t, nparts));
    if (rc == 0)
        *out = t;
    return rc;
}

int mqd_topic_get(mqd_server_t *s, const char *name, bool create, uint32_t create_parts,
                  mqd_topic_t **out)
{
    mqd_topic_t *t = mqd_topic_find(s, name);
    if (t) {
        *out = t;
        return 0;
    }
    if (!create)
        return MQD_ENOENT;
    if (mqd_topic_limit_reached(s, name))
        return MQD_EAGAIN;
    if (build_find(s, name))
        return MQD_ENOENT; /* being created by management, not visible yet */
    mqd_topic_conf_t tc;
    mqd_conf_topic(s->conf, name, &tc);
    uint32_t n = create_parts ? create_parts : tc.partitions;
    if (n == 0)
        n = s->conf->default_partitions ? s->conf->default_partitions : 1;
    if (n > s->conf->max_partitions_per_topic) {
        MQD_WARN("topic", "not creating topic=%s: %u partitions > max_partitions_per_topic (%u)",
                 name, n, s->conf->max_partitions_per_topic);
        return MQD_ETOOBIG;
    }
    /* temporary reply nodes live only as long as their receiver: not in meta.db */
    bool persist = strncmp(name, "$tmp.", 5) != 0;
    int rc = persist ? mqd_topic_room(s) : 0; /* management replies still work on a full disk */
    if (rc == 0)
        rc = topic_create(s, name, n, persist, NULL, &t);
    if (rc == 0) {
        MQD_INFO("topic", "created topic=%s partitions=%u", name, n);
        *out = t;
    }
    return rc;
}

static int load_one(const mqd_meta_topic_t *mt, void *arg)
{
    mqd_server_t *s = arg;
    mqd_topic_t *t;
    json_t *ov = NULL;
    if (mt->config_json && strcmp(mt->config_json, "{}") != 0) {
        ov = json_loads(mt->config_json, 0, NULL);
        if (ov && !json_is_object(ov)) {
            json_decref(ov);
            ov = NULL;
        }
    }
    int rc = topic_create(s, mt->name, mt->partitions ? mt->partitions : 1, false, ov, &t);
    if (rc != 0) {
        MQD_ERR("topic", "cannot open topic %s: %s", mt->name, mqd_strerror(rc));
        return rc;
    }
    if (mt->created_ms)
        t->created_ms = mt->created_ms;
    snprintf(t->uid, sizeof t->uid, "%s", mt->uid);
    return 0;
}

/* Temporary reply nodes are not in meta.db: the ones a crash left on disk go now. */
static void drop_stale_temporaries(mqd_server_t *s)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/topics", s->conf->data_dir);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    char names[64][MQD_NAME_MAX + 1];
    size_t n = 0;
    while ((e = readdir(d)) != NULL && n < MQD_ARRAY_LEN(names))
        if (strncmp(e->d_name, "$tmp.", 5) == 0)
            snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    closedir(d);
    for (size_t i = 0; i < n; i++)
        mqd_store_drop_topic(s->store, names[i]);
    if (n)
        MQD_INFO("topic", "removed %zu temporary node(s) left by the previous run", n);
}

static uint64_t topic_messages(const mqd_topic_t *t)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < t->nparts; i++) {
        uint64_t end = mqd_part_visible_end(t->parts[i], MQD_READ_UNCOMMITTED);
        uint64_t start = mqd_plog_start_offset(t->parts[i]->log);
        n += end > start ? end - start : 0; /* a replicated watermark may lag the start */
    }
    return n;
}

int mqd_topic_adopt(mqd_server_t *s, const char *name, uint32_t ndir)
{
    mqd_topic_t *t = mqd_topic_find(s, name);
    uint32_t had = t ? t->nparts : 0;
    if (had >= ndir)
        return 0;
    /* not persisted by topic_create: that would also skip loading the groups' offsets,
     * which meta.db may still hold when only the topic row is missing */
    int rc = t ? topic_grow(t, ndir) : topic_create(s, name, ndir, false, NULL, &t);
    if (rc == 0) {
        char *cj = topic_config_json(t);
        rc = mqd_meta_topic_put(s->meta, name, t->nparts, cj ? cj : "{}");
        free(cj);
    }
    if (rc != 0) {
        MQD_ERR("topic", "cannot recover topic %s from its directory: %s", name, mqd_strerror(rc));
        return rc;
    }
    if (had == 0)
        MQD_WARN("topic",
                 "topic %s: %u partition directories on disk but the topic is not in "
                 "meta.db: recovered with %u partitions and %" PRIu64 " messages (settings made "
                 "through management and group offsets not in meta.db are lost)",
                 name, ndir, t->nparts, topic_messages(t));
    else
        MQD_WARN("topic",
                 "topic %s: %u partition directories on disk but meta.db says %u "
                 "partitions: grown to %u (%" PRIu64 " messages)",
                 name, ndir, had, t->nparts, topic_messages(t));
    return 0;
}

/* The periodic persist of group state (mqd_topics_persist) is one SQLite commit with an
 * fdatasync: the timer only marks it due, the tick runs it after the iteration's output
 * (server.c on_tick). */
static void persist_timer(void *arg)
{
    mqd_server_t *s = arg;
    s->persist_due = true;
    mqd_server_tick_soon(s);
}

static void resume_timer(void *arg)
{
    mqd_topics_resume_failed(arg);
}

static void retain_timer(void *arg)
{
    mqd_topics_retain(arg);
}

static int topics_timers(mqd_server_t *s)
{
    int rc = mqd_timer_add(s, "topics.persist", 1000, persist_timer, s);
    if (rc == 0) /* partitions failed on disk full, retried every partition_resume_ms */
        rc = mqd_timer_add(s, "topics.resume_failed", 1000, resume_timer, s);
    if (rc == 0)
        rc = mqd_timer_add(s, "topics.retention", 10000, retain_timer, s);
    return rc;
}

int mqd_topics_load(mqd_server_t *s)
{
    drop_stale_temporaries(s);
    int rc = topics_timers(s);
    if (rc == 0)
        rc = mqd_meta_topic_list(s->meta, load_one, s);
    if (rc == 0)
        rc = mqd_topics_recover_dirs(s);
    if (rc == 0)
        MQD_NOTICE("topic", "recovered %zu topics", s->n_topics);
    return rc;
}

void mqd_topics_dedup_warm(mqd_server_t *s)
{
    for (size_t i = 0; i < s->topics_cap; i++)
        for (mqd_topic_t *t = s->topics[i]; t; t = t->hnext)
            mqd_dedup_warm(t);
}

static void part_free(mqd_part_t *p)
{
    while (p->pend_head) {
        mqd_pending_t *pe = p->pend_head;
        p->pend_head = pe->next;
        if (pe->notify)
            pe->notify(pe->notify_arg, pe->notify_tag, PN_RELEASED, NULL, NULL);
        else
            mqd_conn_unref(pe->conn);
        free(pe->batch_keys);
        free(pe);
    }
    p->pend_tail = NULL;
    p->pend_weak = 0;
    if (p->failed && p->topic)
        p->topic->srv->parts_failed--; /* a deleted topic's failed partitions go with it */
    p->failed = false;
    mqd_part_commit_free(p);
    mqd_part_count_free(p);
    if (p->log)
        mqd_plog_set_stable_cb(p->log, NULL, NULL);
}

static void topic_unlink(mqd_server_t *s, mqd_topic_t *t)
{
    mqd_topic_t **pp = &s->topics[hash_name(t->name) & (s->topics_cap - 1)];
    while (*pp && *pp != t)
        pp = &(*pp)->hnext;
    if (*pp) {
        *pp = t->hnext;
        s->n_topics--;
    }
    mqd_dlist_del(&t->dnode);
    mqd_dlist_del(&t->lnode);
}

static void topic_free(mqd_topic_t *t)
{
    if (t->srv->ops.groups_free)
        t->srv->ops.groups_free(t);
    for (uint32_t i = 0; i < t->nparts; i++) {
        part_free(t->parts[i]);
        free(t->parts[i]);
    }
    free(t->parts);
    free(t->name);
    mqd_dedup_free(t);
    json_decref(t->overrides);
    free(t);
}

/* Detaches every link that points at t (management deletes a topic under live links)
 * with amqp:link:detach-forced, the link error for an operator's intervention (2.8.15). */
static void detach_links(mqd_server_t *s, mqd_topic_t *t)
{
    if (!s->ops.link_detach)
        return;
    while (!mqd_dlist_empty(&t->consumers)) {
        mqd_lstate_t *ls = MQD_CONTAINER(t->consumers.next, mqd_lstate_t, tnode);
        s->ops.link_detach(ls, "amqp:link:detach-forced", "the topic was deleted");
    }
    for (mqd_dlist_t *n = s->conns.next; n != &s->conns; n = n->next) {
        mqd_conn_t *c = MQD_CONTAINER(n, mqd_conn_t, node);
        for (pn_link_t *l = pn_link_head(c->driver.connection, 0); l; l = pn_link_next(l, 0)) {
            mqd_lstate_t *ls = pn_link_get_context(l);
            if (ls && ls->kind == MQD_LS_PRODUCER && ls->topic == t)
                s->ops.link_detach(ls, "amqp:link:detach-forced", "the topic was deleted");
        }
    }
}

int mqd_topic_delete(mqd_server_t *s, mqd_topic_t *t)
{
    if (!t->temporary) {
        detach_links(s, t);
        mqd_topic_census_forget(s, t);
    }
    topic_unlink(s, t);
    char *name = strdup(t->name);
    topic_free(t);
    if (!name)
        return MQD_ENOMEM;
    char sname[3 * MQD_NAME_MAX + 1];
    store_name(name, sname, sizeof sname);
    int rc = mqd_store_drop_topic(s->store, sname);
    int rc2 = strncmp(name, "$tmp.", 5) ? mqd_meta_topic_delete(s->meta, name) : 0;
    if (rc2 != 0 && rc2 != MQD_ENOENT && rc == 0)
        rc = rc2;
    free(name);
    return rc;
}

void mqd_topics_free(mqd_server_t *s)
{
    mqd_topic_builds_cancel(s);
    mqd_census_free(s);
    for (size_t i = 0; i < s->topics_cap; i++) {
        mqd_topic_t *t = s->topics[i];
        while (t) {
            mqd_topic_t *next = t->hnext;
            topic_free(t);
            t = next;
        }
    }
    free(s->topics);
    s->topics = NULL;
    s->topics_cap = s->n_topics = 0;
}

/* A new entry at the tail of p's waiting sends, for the record at `off`. */
static mqd_pending_t *pend_push(mqd_part_t *p, uint64_t off)
{
    mqd_server_t *s = p->topic->srv;
    mqd_pending_t *pe = s->pend_free;
    if (pe) {
        s->pend_free = pe->next;
        s->n_pend_free--;
    } else if (!(pe = malloc(sizeof *pe))) {
        return NULL;
    }
    pe->next = NULL;
    pe->conn = NULL;
    pe->dlv = NULL;
    pe->notify = NULL;
    pe->notify_arg = NULL;
    pe->notify_tag = 0;
    pe->txn = 0;
    pe->last_offset = off;
    pe->t_ns = mqd_mono_ns();
    pe->dedup_key = 0;
    pe->batch_keys = NULL;
    pe->n_batch_keys = 0;
    pe->acks = (uint8_t)p->topic->conf.acks; /* a sender's mqd:acks overrides it (link.c) */
    p->pend_weak += pe->acks < MQD_ACKS_ALL;
    if (p->pend_tail)
        p->pend_tail->next = pe;
    else
        p->pend_head = pe;
    p->pend_tail = pe;
    return pe;
}

int mqd_part_append_ex(mqd_part_t *p, const uint8_t *data, size_t len, uint32_t flags, uint64_t txn,
                       mqd_conn_t *c, pn_delivery_t *dlv, uint64_t *offset_out)
{
    mqd_rec_in_t rec = {.data = data, .len = (uint32_t)len, .timestamp_ms = mqd_now_ms(),
                        .flags = flags, .txn = txn};
    uint64_t off;
    int rc = mqd_plog_append(p->log, &rec, 1, &off);
    if (rc != 0)
        return rc;
    if (offset_out)
        *offset_out = off;
    mqd_part_count_append(p, off, flags);
    p->topic->msgs_in++;
    p->topic->bytes_in += len;
    mqd_server_tick_soon(p->topic->srv);
    if (!dlv)
        return 0;
    mqd_pending_t *pe = pend_push(p, off);
    if (!pe)
        return MQD_ENOMEM; /* appended but unacknowledged: the client will resend */
    pe->conn = c;
    pe->dlv = dlv;
    c->refs++;
    pe->txn = (flags & MQD_REC_TXN) ? txn : 0;
    return 0;
}

int mqd_part_append_notify(mqd_part_t *p, const uint8_t *data, size_t len, uint32_t flags,
                           mqd_pend_notify_fn fn, void *arg, uint64_t tag, uint64_t *offset_out)
{
    uint64_t off;
    int rc = mqd_part_append_ex(p, data, len, flags, 0, NULL, NULL, &off);
    if (rc != 0)
        return rc;
    if (offset_out)
        *offset_out = off;
    mqd_pending_t *pe = pend_push(p, off);
    if (!pe)
        return MQD_ENOMEM;
    pe->notify = fn;
    pe->notify_arg = arg;
    pe->notify_tag = tag;
    return 0;
}

int mqd_part_append(mqd_part_t *p, const uint8_t *data, size_t len, mqd_conn_t *c,
                    pn_delivery_t *dlv, uint64_t *offset_out)
{
    return mqd_part_append_ex(p, data, len, MQD_REC_DATA, 0, c, dlv, offset_out);
}

void mqd_topic_dispatch_soon(mqd_topic_t *t)
{
    if (mqd_dlist_empty(&t->dnode))
        mqd_dlist_push(&t->srv->dispatch_q, &t->dnode);
    mqd_server_tick_soon(t->srv);
}

void mqd_topic_dispatch_later(mqd_topic_t *t)
{
    if (mqd_dlist_empty(&t->lnode))
        mqd_dlist_push(&t->srv->dispatch_later, &t->lnode);
    mqd_server_later_soon(t->srv);
}

/* The lowest offset of partition i that retention must keep (UINT64_MAX: no limit).
 * An open transaction's records stay until it is decided, in every mode (the timeout
 * bounds how long). Only retention = consumed waits for groups: everything below every
 * group's committed offset goes, and with no group yet nothing goes. In the default
 * mode a group's position never holds data back (as in Kafka): a consumer that falls
 * behind retention_bytes/retention_ms resumes at the new start. */
static uint64_t keep_from(const mqd_topic_t *t, uint32_t i)
{
    uint64_t low = mqd_part_lso(t->parts[i]);
    if (!t->conf.retention_consumed)
        return low;
    uint64_t floor = UINT64_MAX;
    const mqd_core_ops_t *ops = &t->srv->ops;
    if (!ops->groups_floor || !ops->groups_floor(t, i, &floor))
        return 0;
    return floor < low ? floor : low;
}

void mqd_topics_retain(mqd_server_t *s)
{
    int64_t now = mqd_now_ms();
    for (size_t i = 0; i < s->topics_cap; i++) {
        for (mqd_topic_t *t = s->topics[i]; t; t = t->hnext) {
            for (uint32_t k = 0; k < t->nparts; k++) {
                int n = mqd_plog_retain(t->parts[k]->log, keep_from(t, k), now);
                if (n > 0)
                    MQD_INFO("topic", "retention removed %d segment(s) of %s/%u", n, t->name, k);
            }
        }
    }
}

/* Checks a management create: the name is free and valid, the overrides parse
 * (*ov: NULL or an object, owned by the caller), *nparts is resolved and within the
 * limit. */
static int create_args(mqd_server_t *s, const char *name, uint32_t *nparts,
                       const char *overrides_json, json_t **ov_out)
{
    if (mqd_topic_find(s, name) || build_find(s, name))
        return MQD_EEXIST;
    if (!mqd_topic_name_valid(name, strlen(name)) || strncmp(name, "$tmp.", 5) == 0)
        return MQD_EINVAL;
    if (mqd_topic_limit_reached(s, name))
        return MQD_EAGAIN;
    int rc = mqd_topic_room(s); /* MQD_ENOSPC: "disk full", not "not found" */
    if (rc != 0)
        return rc;
    json_t *ov = NULL;
    if (overrides_json && *overrides_json) {
        ov = json_loads(overrides_json, 0, NULL);
        mqd_topic_conf_t probe;
        mqd_conf_topic(s->conf, name, &probe);
        if (!ov || !json_is_object(ov) || apply_overrides(&probe, ov) != 0) {
            json_decref(ov);
            return MQD_EINVAL;
        }
        if (json_object_size(ov) == 0) {
            json_decref(ov);
            ov = NULL;
        }
    }
    uint32_t n = *nparts;
    if (n == 0) {
        mqd_topic_conf_t tc;
        mqd_conf_topic(s->conf, name, &tc);
        n = tc.partitions ? tc.partitions : s->conf->default_partitions;
    }
    if (n == 0 || n > s->conf->max_partitions_per_topic) {
        json_decref(ov);
        return n ? MQD_ETOOBIG : MQD_EINVAL;
    }
    *nparts = n;
    *ov_out = ov;
    return 0;
}

int mqd_topic_create(mqd_server_t *s, const char *name, uint32_t nparts, const char *overrides_json,
                     mqd_topic_t **out)
{
    json_t *ov;
    int rc = create_args(s, name, &nparts, overrides_json, &ov);
    if (rc == 0)
        rc = topic_create(s, name, nparts, true, ov, out);
    if (rc == 0)
        MQD_INFO("topic", "created topic=%s partitions=%u (management)", name, nparts);
    return rc;
}

/* ---- creating a topic a slice at a time ---- */

/* The longest the loop spends opening one topic's partitions before it serves other
 * events again (each takes a few ms on a busy disk: 1,024 at once stalled it 14 s). */
#define BUILD_SLICE_MS 20

struct mqd_topic_build {
    mqd_dlist_t node; /* s->builds */
    mqd_server_t *s;
    mqd_topic_t *t; /* not in the topic table until every partition is open */
    uint32_t want;
    struct event *ev;
    mqd_topic_built_cb cb;
    void *arg;
};

static mqd_topic_build_t *build_find(mqd_server_t *s, const char *name)
{
    for (mqd_dlist_t *n = s->builds.next; n != &s->builds; n = n->next) {
        mqd_topic_build_t *b = MQD_CONTAINER(n, mqd_topic_build_t, node);
        if (b->t && strcmp(b->t->name, name) == 0)
            return b;
    }
    return NULL;
}

/* Ends b: a topic still in b->t is unfinished and goes with its directories (meta.db
 * never had it). */
static void build_end(mqd_topic_build_t *b, int rc, mqd_topic_t *done)
{
    mqd_dlist_del(&b->node);
    event_free(b->ev);
    if (b->t) {
        char sname[3 * MQD_NAME_MAX + 1];
        store_name(b->t->name, sname, sizeof sname);
        topic_free(b->t);
        mqd_store_drop_topic(b->s->store, sname);
    }
    b->cb(b->arg, rc, done);
    free(b);
}

static void build_step(evutil_socket_t fd, short what, void *arg)
{
    mqd_topic_build_t *b = arg;
    mqd_topic_t *t = b->t;
    mqd_server_t *s = b->s;
    int64_t until = mqd_now_ms() + BUILD_SLICE_MS;
    int rc = 0;
    while (rc == 0 && t->nparts < b->want && mqd_now_ms() < until)
        rc = topic_grow(t, t->nparts + 1);
    if (rc == 0 && t->nparts < b->want) {
        struct timeval next = {0, 1000}; /* a poll for I/O between slices */
        event_add(b->ev, &next);
        return;
    }
    if (rc == 0 && s->n_topics + 1 > s->topics_cap / 2 && table_grow(s) != 0)
        rc = MQD_ENOMEM;
    if (rc == 0) {
        b->t = NULL; /* published or, on failure, deleted by topic_publish */
        rc = topic_publish(s, t, true, 0);
    }
    if (rc == 0)
        MQD_INFO("topic", "created topic=%s partitions=%u (management, in slices)", t->name,
                 t->nparts);
    else
        MQD_WARN("topic", "creating a topic with %u partitions failed: %s", b->want,
                 mqd_strerror(rc));
    build_end(b, rc, rc == 0 ? t : NULL);
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
}

int mqd_topic_create_async(mqd_server_t *s, const char *name, uint32_t nparts,
                           const char *overrides_json, mqd_topic_built_cb cb, void *arg)
{
    json_t *ov;
    int rc = create_args(s, name, &nparts, overrides_json, &ov);
    if (rc != 0)
        return rc;
    mqd_topic_build_t *b = calloc(1, sizeof *b);
    mqd_topic_t *t = b ? topic_alloc(s, name, ov) : NULL;
    if (t)
        b->ev = evtimer_new(s->base, build_step, b);
    if (!t || !b->ev) {
        if (t)
            topic_free(t); /* frees ov too */
        else
            json_decref(ov);
        free(b);
        return MQD_ENOMEM;
    }
    *b = (mqd_topic_build_t){.s = s, .t = t, .want = nparts, .ev = b->ev, .cb = cb, .arg = arg};
    mqd_dlist_push(&s->builds, &b->node);
    struct timeval now = {0, 0};
    event_add(b->ev, &now);
    return 0;
}

void mqd_topic_builds_cancel(mqd_server_t *s)
{
    while (!mqd_dlist_empty(&s->builds))
        build_end(MQD_CONTAINER(s->builds.next, mqd_topic_build_t, node), MQD_ESTATE, NULL);
}

int mqd_topic_alter(mqd_server_t *s, mqd_topic_t *t, uint32_t nparts, const char *overrides_json)
{
    if (nparts && nparts < t->nparts)
        return MQD_EINVAL; /* partitions only grow: keys would move otherwise */
    if (nparts > t->nparts && nparts > s->conf->max_partitions_per_topic)
        return MQD_ETOOBIG;
    json_t *merged = t->overrides ? json_deep_copy(t->overrides) : json_object();
    if (!merged)
        return MQD_ENOMEM;
    if (overrides_json && *overrides_json) {
        json_t *ov = json_loads(overrides_json, 0, NULL);
        if (!ov || !json_is_object(ov) || json_object_update(merged, ov) != 0) {
            json_decref(ov);
            json_decref(merged);
            return MQD_EINVAL;
        }
        json_decref(ov);
    }
    mqd_topic_conf_t probe;
    mqd_conf_topic(s->conf, t->name, &probe);
    if (apply_overrides(&probe, merged) != 0) {
        json_decref(merged);
        return MQD_EINVAL;
    }
    json_decref(t->overrides);
    t->overrides = json_object_size(merged) ? merged : NULL;
    if (!t->overrides)
        json_decref(merged);
    topic_set_conf(t);
    int rc = nparts ? topic_grow(t, nparts) : 0;
    char *cj = topic_config_json(t);
    int rc2 = mqd_meta_topic_put(s->meta, t->name, t->nparts, cj ? cj : "{}");
    free(cj);
    if (rc == 0)
        rc = rc2;
    MQD_INFO("topic", "altered topic=%s partitions=%u", t->name, t->nparts);
    return rc;
}

int mqd_topic_grow(mqd_server_t *s, mqd_topic_t *t, uint32_t nparts)
{
    if (nparts <= t->nparts)
        return 0;
    if (nparts > s->conf->max_partitions_per_topic)
        return MQD_ETOOBIG;
    int rc = topic_grow(t, nparts);
    char *cj = topic_config_json(t);
    int rc2 = mqd_meta_topic_put(s->meta, t->name, t->nparts, cj ? cj : "{}");
    free(cj);
    MQD_INFO("topic", "grew topic=%s to partitions=%u", t->name, t->nparts);
    return rc ? rc : rc2;
}

const char *mqd_topic_uid(const mqd_topic_t *t)
{
    return t->uid;
}

int mqd_topic_set_uid(mqd_topic_t *t, const char *uid)
{
    if (strlen(uid) >= sizeof t->uid)
        return MQD_EINVAL;
    int rc = mqd_meta_topic_set_uid(t->srv->meta, t->name, uid);
    if (rc == 0)
        snprintf(t->uid, sizeof t->uid, "%s", uid);
    return rc;
}

int mqd_topic_set_overrides(mqd_server_t *s, mqd_topic_t *t, const char *overrides_json)
{
    json_t *ov = overrides_json && *overrides_json ? json_loads(overrides_json, 0, NULL) : NULL;
    if (overrides_json && *overrides_json && !json_is_object(ov)) {
        json_decref(ov);
        return MQD_EINVAL;
    }
    if (ov && json_object_size(ov) == 0) {
        json_decref(ov);
        ov = NULL;
    }
    json_decref(t->overrides);
    t->overrides = ov;
    topic_set_conf(t); /* one by one: what this node refuses is logged and skipped */
    char *cj = topic_config_json(t);
    int rc = mqd_meta_topic_put(s->meta, t->name, t->nparts, cj ? cj : "{}");
    free(cj);
    MQD_INFO("topic", "topic=%s: settings replaced (%s)", t->name,
             overrides_json && *overrides_json ? overrides_json : "{}");
    return rc;
}
