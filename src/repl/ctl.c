/* The controller's part of replication: a registered topic whose partitions have no
 * state in etcd yet is placed over the live nodes and each partition's key is created
 * with "create if absent" (create_revision 0), so two controllers of overlapping terms
 * cannot both place it: the second txn fails and its author reads the winner's key
 * through the watch. Later changes are compare-and-swap on mod_revision (repl.c). */
#include "config.h"
#include "repl/repl_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_created(void *arg, const mqd_etcd_reply_t *rep)
{
    char *key = arg;
    if (rep->rc != 0)
        MQD_WARN("repl", "controller: %s not created (%s)", key,
                 rep->error ? rep->error : mqd_strerror(rep->rc));
    else if (rep->succeeded)
        MQD_NOTICE("repl", "controller: placed %s", key);
    free(key); /* lost the race: the watch brings the other one */
}

static int create_part(mqd_repl_t *r, const char *topic, uint32_t p, const uint32_t *replicas,
                       uint32_t rf)
{
    mqd_repl_pstate_t ps = {.leader = replicas[0], .epoch = 1, .n_replicas = rf, .n_isr = rf};
    memcpy(ps.replicas, replicas, rf * sizeof *replicas);
    memcpy(ps.isr, replicas, rf * sizeof *replicas);
    size_t kl = strlen(r->parts_prefix) + strlen(topic) + 16;
    char *key = malloc(kl), *val = mqd_repl_pstate_json(&ps);
    if (!key || !val) {
        free(key);
        free(val);
        return MQD_ENOMEM;
    }
    snprintf(key, kl, "%s%s/%" PRIu32, r->parts_prefix, topic, p);
    mqd_etcd_cmp_t cmp = {key, strlen(key), MQD_ETCD_CMP_CREATE, 0};
    mqd_etcd_op_t put = {MQD_ETCD_OP_PUT, key, val, strlen(key), strlen(val), 0, false};
    mqd_etcd_txn_t txn = {&cmp, 1, &put, NULL, 1, 0};
    int rc = mqd_etcd_txn(r->etcd, &txn, on_created, key);
    if (rc != 0)
        free(key);
    free(val);
    return rc;
}

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a: spreads topics' first leaders over the nodes */
    while (*s)
        h = (h ^ (uint8_t)*s++) * 16777619u;
    return h;
}

void mqd_repl_ctl_topic(mqd_repl_t *r, rtopic_t *t)
{
    uint32_t missing = 0;
    for (uint32_t p = 0; p < t->td.partitions; p++)
        missing += mqd_repl_part_find(r, t->name, p) == NULL;
    if (missing == 0)
        return;
    const mqd_cluster_view_t *v = mqd_cluster_view(r->m);
    mqd_repl_cand_t *c = calloc(v->n_nodes ? v->n_nodes : 1, sizeof *c);
    uint32_t *out = calloc((size_t)t->td.partitions * t->td.rf, sizeof *out);
    size_t n = 0;
    for (size_t i = 0; c && i < v->n_nodes; i++)
        if (v->nodes[i].alive)
            c[n++] = (mqd_repl_cand_t){v->nodes[i].id, v->nodes[i].rack};
    int rc = c && out ? mqd_repl_place(c, n, t->td.partitions, t->td.rf,
                                       n ? name_hash(t->name) % (uint32_t)n : 0, out)
                      : MQD_ENOMEM;
    if (rc == MQD_EINVAL)
        MQD_WARN("repl", "controller: topic %s wants %u replicas, %zu nodes are up: placed "
                 "when enough join", t->name, t->td.rf, n);
    for (uint32_t p = 0; rc == 0 && p < t->td.partitions; p++)
        if (!mqd_repl_part_find(r, t->name, p))
            rc = create_part(r, t->name, p, out + (size_t)p * t->td.rf, t->td.rf);
    free(c);
    free(out);
}

void mqd_repl_ctl_scan(mqd_repl_t *r)
{
    for (rtopic_t *t = r->topics; t; t = t->next)
        mqd_repl_ctl_topic(r, t);
}
