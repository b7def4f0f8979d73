/* Partition ownership records (com.mqd:ownership): what an Event Hubs checkpoint store
 * (examples/eventhubs/mqd-checkpoint-store.js) needs to balance a hub's partitions
 * across processes. One record per (topic, group, partition): owner id, etag, time of
 * the last claim. CLAIM is a compare-and-set on the etag, so of two processes claiming
 * with the same etag exactly one wins (the event loop runs one request at a time); the
 * record is in meta.db (synchronous=FULL) before the reply goes out.
 *
 * A group is named "TOPIC/GROUP" (split at the last '/') or by the properties `topic`
 * and `group`; group names compare case-insensitively, as everywhere. The operations need
 * `receive` on the topic (a consumer claims for its group), not `manage`. */
#include "config.h"
#include "mgmt/mgmt_int.h"
#include "core/core.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OWNER_MAX 256

typedef struct oref {
    char topic[MQD_NAME_MAX + 1];
    char group[MQD_NAME_MAX + 1]; /* lower-cased */
    mqd_topic_t *t;
} oref_t;

typedef struct orec {
    char owner[OWNER_MAX + 1];
    char etag[32];
    int64_t modified_ms;
} orec_t;

/* Fills o from topic/group properties or the name, finds the topic and checks the
 * caller may receive from it; 0, or a status already set. */
static int owner_ref(mqd_mgmt_req_t *r, oref_t *o)
{
    const char *tp = mqd_mgmt_arg_str(r, "topic"), *gp = mqd_mgmt_arg_str(r, "group");
    const char *slash = r->name ? strrchr(r->name, '/') : NULL;
    /* a cut name could be another topic's */
    if ((tp && strlen(tp) > MQD_NAME_MAX) || (gp && strlen(gp) > MQD_NAME_MAX) ||
        (!(tp && gp) && r->name && strlen(r->name) > 2 * MQD_NAME_MAX))
        return mqd_mgmt_fail(r, 400, "topic or group name longer than %d bytes", MQD_NAME_MAX);
    if (tp && gp) {
        snprintf(o->topic, sizeof o->topic, "%s", tp);
        snprintf(o->group, sizeof o->group, "%s", gp);
    } else if (slash && slash != r->name && slash[1] && slash - r->name <= MQD_NAME_MAX &&
               strlen(slash + 1) <= MQD_NAME_MAX) {
        snprintf(o->topic, sizeof o->topic, "%.*s", (int)(slash - r->name), r->name);
        snprintf(o->group, sizeof o->group, "%s", slash + 1);
    } else {
        return mqd_mgmt_fail(r, 400, "name \"TOPIC/GROUP\" (or properties topic and group) required");
    }
    for (char *c = o->group; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    if (!mqd_auth_allowed(r->c, MQD_PERM_RECEIVE, o->topic))
        return mqd_mgmt_fail(r, 401, "not allowed to receive from '%s'", o->topic);
    o->t = mqd_topic_find(r->s, o->topic);
    if (!o->t || mqd_topic_temporary(o->t))
        return mqd_mgmt_fail(r, 404, "The messaging entity '%s' could not be found.", o->topic);
    return 0;
}

/* The kv key: the topic length-prefixed, so no topic or group spelling can collide. */
static void rec_key(const oref_t *o, uint32_t part, char *key, size_t n)
{
    snprintf(key, n, "ownership:%zu:%s:%s:%" PRIu32, strlen(o->topic), o->topic, o->group, part);
}

/* 0 and *rec, MQD_ENOENT when the partition was never claimed, or another error. */
static int rec_get(mqd_mgmt_req_t *r, const oref_t *o, uint32_t part, orec_t *rec)
{
    char key[2 * MQD_NAME_MAX + 64], *v = NULL;
    rec_key(o, part, key, sizeof key);
    int rc = mqd_meta_kv_get(mqd_srv_meta(r->s), key, &v);
    if (rc != 0)
        return rc;
    json_t *j = json_loads(v, 0, NULL);
    free(v);
    const char *owner = json_string_value(json_object_get(j, "owner"));
    const char *etag = json_string_value(json_object_get(j, "etag"));
    json_t *mod = json_object_get(j, "modified");
    rc = owner && etag && json_is_integer(mod) ? 0 : MQD_ECORRUPT;
    if (rc == 0) {
        snprintf(rec->owner, sizeof rec->owner, "%s", owner);
        snprintf(rec->etag, sizeof rec->etag, "%s", etag);
        rec->modified_ms = json_integer_value(mod);
    }
    json_decref(j);
    return rc;
}

/* Writes rec under a fresh etag (a durable counter: never reused, even after a restart). */
static int rec_put(mqd_mgmt_req_t *r, const oref_t *o, uint32_t part, orec_t *rec)
{
    char key[2 * MQD_NAME_MAX + 64];
    uint64_t id = 0;
    mqd_meta_t *meta = mqd_srv_meta(r->s);
    rec_key(o, part, key, sizeof key);
    int rc = mqd_meta_begin(meta);
    if (rc != 0)
        return rc;
    char *v = NULL;
    if ((rc = mqd_meta_next_id(meta, "ownership_etag", &id)) == 0) {
        snprintf(rec->etag, sizeof rec->etag, "%" PRIu64, id);
        rec->modified_ms = mqd_now_ms();
        json_t *j = json_pack("{s:s, s:s, s:I}", "owner", rec->owner, "etag", rec->etag,
                              "modified", (json_int_t)rec->modified_ms);
        v = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        rc = v ? mqd_meta_kv_put(meta, key, v) : MQD_ENOMEM;
    }
    free(v);
    if (rc == 0)
        return mqd_meta_commit(meta);
    mqd_meta_rollback(meta);
    return rc;
}

static void put_rec(pn_data_t *d, uint32_t part, const orec_t *rec)
{
    pn_data_put_map(d);
    pn_data_enter(d);
    mqd_mgmt_kv_long(d, "partition", part);
    mqd_mgmt_kv_str(d, "owner", rec->owner);
    mqd_mgmt_kv_str(d, "etag", rec->etag);
    mqd_mgmt_kv_ts(d, "modified", rec->modified_ms);
    pn_data_exit(d);
}

/* QUERY: the claimed partitions (never-claimed ones are left out), in partition order. */
static int owner_query(mqd_mgmt_req_t *r)
{
    oref_t o;
    if (owner_ref(r, &o) != 0)
        return r->status;
    pn_data_put_list(r->out);
    pn_data_enter(r->out);
    for (uint32_t i = 0; i < mqd_topic_nparts(o.t); i++) {
        orec_t rec;
        int rc = rec_get(r, &o, i, &rec);
        if (rc == MQD_ENOENT)
            continue;
        if (rc != 0)
            return mqd_mgmt_fail(r, 500, "partition %" PRIu32 ": %s", i, mqd_strerror(rc));
        put_rec(r->out, i, &rec);
    }
    pn_data_exit(r->out);
    return 200;
}

/* CLAIM: `partition`, `owner` ("" abandons), `etag` (absent: only if never claimed).
 * 412 when the etag is not the record's current one; 200 and the new record else. */
static int owner_claim(mqd_mgmt_req_t *r)
{
    oref_t o;
    int64_t part;
    if (owner_ref(r, &o) != 0)
        return r->status;
    const char *owner = mqd_mgmt_arg_str(r, "owner"), *etag = mqd_mgmt_arg_str(r, "etag");
    if (!mqd_mgmt_arg_int(r, "partition", &part) || part < 0 || !owner)
        return mqd_mgmt_fail(r, 400, "'partition' (an integer) and 'owner' (a string) are required");
    if (strlen(owner) > OWNER_MAX)
        return mqd_mgmt_fail(r, 400, "owner longer than %d bytes", OWNER_MAX);
    if (part >= mqd_topic_nparts(o.t))
        return mqd_mgmt_fail(r, 404, "topic '%s' has no partition %lld", o.topic, (long long)part);
    orec_t rec;
    memset(&rec, 0, sizeof rec);
    int rc = rec_get(r, &o, (uint32_t)part, &rec);
    if (rc != 0 && rc != MQD_ENOENT)
        return mqd_mgmt_fail(r, 500, "reading the claim failed: %s", mqd_strerror(rc));
    bool exists = rc == 0;
    if (exists ? !etag || strcmp(etag, rec.etag) != 0 : etag != NULL)
        return mqd_mgmt_fail(r, 412, "etag mismatch: partition %lld of %s/%s is at etag %s (owner '%s')",
                             (long long)part, o.topic, o.group, exists ? rec.etag : "none",
                             exists ? rec.owner : "");
    snprintf(rec.owner, sizeof rec.owner, "%s", owner);
    if ((rc = rec_put(r, &o, (uint32_t)part, &rec)) != 0)
        return mqd_mgmt_fail(r, mqd_mgmt_status_of(rc), "storing the claim failed: %s", mqd_strerror(rc));
    MQD_INFO("mgmt", "ownership %s/%s partition %lld -> '%s' etag %s", o.topic, o.group,
             (long long)part, rec.owner, rec.etag);
    put_rec(r->out, (uint32_t)part, &rec);
    return 200;
}

const mqd_mgmt_op_t mqd_mgmt_owner_ops[] = {
    {MQD_MGMT_T_OWNERSHIP, "QUERY", owner_query, MQD_MGMT_SELF},
    {MQD_MGMT_T_OWNERSHIP, "CLAIM", owner_claim, MQD_MGMT_SELF},
};
const size_t mqd_mgmt_n_owner_ops = MQD_ARRAY_LEN(mqd_mgmt_owner_ops);
