/* State that moves with a partition's leader (issue 19 point 4), carried by the
 * partition's own log so that it replicates byte for byte with the data it is about:
 *  - consumer-group offsets: when a leader saves a group's committed offset of a
 *    partition (the 1 s persist, a detach, a transaction's decision) and it changed, it
 *    appends a MQD_REC_CTRL_GROUP record (body: floor u64 LE, then the group's name);
 *    a follower that appends one writes that floor to its own meta.db (offset and an ack
 *    blob with no ranges) and moves its in-memory cursor of the group, if it has one
 *    (with no link reading it: a follower serves none, serve.c);
 *  - transactions: a follower that appends a COMMIT marker adopts the decision
 *    (mqd_txn_adopt_commit); records of a transaction with no marker stay invisible on
 *    a new leader (the committed set decides, and nothing here is open): rolled back;
 *  - duplicate detection: a node that takes the lead drops its topic's window, so the
 *    next check rebuilds it from the log it now leads (dedup.c).
 * Every reader that is not a cursor skips records whose kind is not MQD_REC_DATA (counts,
 * browsing, peeks, dedup), so the group record needs no reader changes. */
#include "config.h"
#include "repl/repl_int.h"
#include "group/group.h"
#include "txn/txn.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- leader */

static gfloor_t *gfloor_get(lead_t *ld, const char *group)
{
    for (size_t i = 0; i < ld->n_g; i++)
        if (strcmp(ld->g[i].name, group) == 0)
            return &ld->g[i];
    gfloor_t *ng = realloc(ld->g, (ld->n_g + 1) * sizeof *ng);
    if (!ng)
        return NULL;
    ld->g = ng;
    gfloor_t *g = &ld->g[ld->n_g];
    if (!(g->name = strdup(group)))
        return NULL;
    g->logged = 0;
    g->known = false;
    ld->n_g++;
    return g;
}

void mqd_repl_gstate_free(lead_t *ld)
{
    for (size_t i = 0; i < ld->n_g; i++)
        free(ld->g[i].name);
    free(ld->g);
}

/* Is the move from g->logged to floor only over group records this leader appended back
 * to back (a run nothing else came between)? Then it is no progress: logging it would
 * make the other groups pass that record in turn, one record a second for ever. */
static bool only_own_records(const lead_t *ld, const gfloor_t *g, uint64_t floor)
{
    return g->known && floor > g->logged && g->logged >= ld->run_start && floor <= ld->run_end;
}

void mqd_repl_group_saved(void *arg, mqd_topic_t *t, uint32_t part, const char *group,
                          uint64_t floor)
{
    mqd_repl_t *r = arg;
    rpart_t *rp = mqd_repl_part_find(r, mqd_topic_name(t), part);
    if (!rp || rp->role != ROLE_LEADER || !rp->lead || !rp->local || !mqd_repl_may_ack(rp))
        return;
    if (rp->ps.n_replicas == 1)
        return; /* no other replica will ever lead it: meta.db's floor is the only one */
    lead_t *ld = rp->lead;
    gfloor_t *g = gfloor_get(ld, group);
    if (!g || (g->known && g->logged == floor) || only_own_records(ld, g, floor))
        return;
    uint8_t body[8 + MQD_NAME_MAX];
    size_t len;
    uint64_t off;
    if (mqd_repl_grec_encode(group, floor, body, sizeof body, &len) != 0 ||
        mqd_part_append_ex(rp->local, body, len, MQD_REC_CTRL_GROUP, 0, NULL, NULL, &off) != 0)
        return; /* the next save tries again: the floor still differs */
    if (off != ld->run_end)
        ld->run_start = off;
    ld->run_end = off + 1;
    g->logged = floor;
    g->known = true;
}

/* ---------------------------------------------------------------- follower */

/* The leader's floor for group of this partition, into meta.db (caller's transaction)
 * and the group's cursor here if it has one (mqd_group_follow_floor: never behind what a
 * link reading it got, though a follower serves none: serve.c). */
static int apply_group(rpart_t *rp, const mqd_raw_rec_t *rec)
{
    mqd_part_t *p = rp->local;
    mqd_server_t *s = rp->r->s;
    uint64_t floor;
    const char *nm;
    size_t nlen;
    char name[MQD_NAME_MAX + 1];
    if (mqd_repl_grec_parse(rec->data, rec->len, &floor, &nm, &nlen) != 0) {
        MQD_WARN("repl", "%s/%u: unreadable group record at %" PRIu64 ": skipped", rp->topic,
                 rp->part, rec->offset);
        return 0;
    }
    memcpy(name, nm, nlen);
    name[nlen] = '\0';
    uint8_t blob[12] = {0}; /* cursor.c's blob: floor, 0 done ranges */
    memcpy(blob, &floor, 8);
    mqd_meta_offset_t o = {.topic = mqd_topic_name(mqd_part_topic(p)),
                           .group = name,
                           .partition = mqd_part_id(p),
                           .offset = floor};
    int rc = mqd_meta_offsets_commit(mqd_srv_meta(s), &o, 1);
    if (rc == 0)
        rc = mqd_meta_acks_put(mqd_srv_meta(s), mqd_topic_name(mqd_part_topic(p)), name,
                               mqd_part_id(p), blob, sizeof blob);
    if (rc == 0)
        mqd_group_follow_floor(mqd_part_topic(p), name, mqd_part_id(p), floor);
    return rc;
}

void mqd_repl_fol_state(rpart_t *rp, const uint8_t *data, size_t len)
{
    mqd_server_t *s = rp->r->s;
    int rc = mqd_meta_begin(mqd_srv_meta(s));
    if (rc != 0) {
        MQD_WARN("repl", "%s/%u: group offsets or decisions of a run not saved: %s", rp->topic,
                 rp->part, mqd_strerror(rc));
        return;
    }
    size_t pos = 0;
    mqd_raw_rec_t rec;
    while (rc == 0 && mqd_store_raw_next(data, len, &pos, &rec) == 1) {
        uint32_t kind = rec.flags & MQD_REC_KIND_MASK;
        if (kind == MQD_REC_CTRL_GROUP)
            rc = apply_group(rp, &rec);
        else if (kind == MQD_REC_CTRL_COMMIT)
            rc = mqd_txn_adopt_commit(s, rec.txn);
    }
    if (rc == 0)
        rc = mqd_meta_commit(mqd_srv_meta(s));
    else
        mqd_meta_rollback(mqd_srv_meta(s));
    if (rc != 0)
        MQD_WARN("repl", "%s/%u: group offsets or decisions of a run not saved: %s", rp->topic,
                 rp->part, mqd_strerror(rc));
}

/* ---------------------------------------------------------------- taking the lead */

void mqd_repl_lead_state(rpart_t *rp)
{
    /* the window this node built (at its start, or when it led before) lacks what it
     * fetched since: the next check rebuilds it from this log */
    mqd_dedup_free(mqd_part_topic(rp->local));
}
