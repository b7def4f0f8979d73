/* SIGHUP reload as one swap: the file is read into a new config and validated as at
 * start; one that drops every user or every [acl] rule is refused as a file cut short
 * (conf_guard.c); the subsystems' check hooks see it; only then do the keys that need a
 * restart get their running values back (carried over, not applied), the contents of the
 * two configs change places, and the apply hooks of what changed run. Any failure before
 * the swap leaves the running config untouched, byte for byte.
 *
 * The swap exchanges contents, not pointers: the running mqd_conf_t keeps its address
 * (the server, the cluster module and main hold it), and a carried-over field keeps its
 * storage, so a pointer taken into a restart-only string or topic section stays valid. */
#include "config.h"
#include "conf/conf_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct hook {
    const mqd_conf_row_t *row; /* NULL: every reload */
    mqd_conf_check_fn check;
    mqd_conf_apply_fn apply;
    void *arg;
} hook_t;

struct mqd_conf_hooks {
    hook_t *v;
    size_t n;
};

int mqd_conf_hooks_new(mqd_conf_hooks_t **out)
{
    mqd_conf_hooks_t *h = calloc(1, sizeof *h);
    if (h == NULL)
        return MQD_ENOMEM;
    *out = h;
    return 0;
}

void mqd_conf_hooks_free(mqd_conf_hooks_t *h)
{
    if (h == NULL)
        return;
    free(h->v);
    free(h);
}

int mqd_conf_hook_add(mqd_conf_hooks_t *h, const char *key, mqd_conf_check_fn check,
                      mqd_conf_apply_fn apply, void *arg)
{
    const mqd_conf_row_t *r = key ? mqd_conf_row_find(key) : NULL;
    /* a hook for a key that needs a restart would never run: refuse it at start */
    if (key != NULL && (r == NULL || !r->reloadable || r->scope != MQD_CS_GLOBAL))
        return MQD_EINVAL;
    if (check == NULL && apply == NULL)
        return MQD_EINVAL;
    hook_t *grown = realloc(h->v, (h->n + 1) * sizeof *grown);
    if (grown == NULL)
        return MQD_ENOMEM;
    h->v = grown;
    h->v[h->n++] = (hook_t){r, check, apply, arg};
    return 0;
}

static void swap_bytes(void *a, void *b, size_t n)
{
    unsigned char tmp[64], *pa = a, *pb = b;
    while (n > 0) {
        size_t k = n < sizeof tmp ? n : sizeof tmp;
        memcpy(tmp, pa, k);
        memcpy(pa, pb, k);
        memcpy(pb, tmp, k);
        pa += k;
        pb += k;
        n -= k;
    }
}

/* Exchanges row r's field (and its set flag) between the structs a and b. */
static void swap_row(const mqd_conf_row_t *r, void *a, void *b, uint64_t **fa, uint64_t **fb)
{
    swap_bytes((char *)a + r->off, (char *)b + r->off, r->width);
    if (r->type == MQD_CT_LIST) /* the count follows the list (conf.c asserts it) */
        swap_bytes((char *)a + r->off + sizeof(char **), (char *)b + r->off + sizeof(char **),
                   sizeof(size_t));
    mqd_conf_bits_swap(fa, fb, (size_t)(r - mqd_conf_rows)); /* allocated: cannot fail */
}

#define SWAP_FIELD(a, b, f) swap_bytes(&(a)->f, &(b)->f, sizeof(a)->f)

/* Gives nw the running values of everything a restart is needed for (and running the
 * file's, to be freed with the old config). Restart-only: the global rows not marked
 * reloadable, every topic setting (topics take theirs at open), [sas_key] sections. */
static void carry_restart_only(mqd_conf_t *nw, mqd_conf_t *running)
{
    for (size_t i = 0; i < mqd_conf_nrows; i++) {
        const mqd_conf_row_t *r = &mqd_conf_rows[i];
        if (r->scope == MQD_CS_GLOBAL && !r->reloadable)
            swap_row(r, nw, running, &nw->set, &running->set);
    }
    SWAP_FIELD(nw, running, topic_defaults);
    SWAP_FIELD(nw, running, topics);
    SWAP_FIELD(nw, running, n_topics);
    SWAP_FIELD(nw, running, sas_keys);
    SWAP_FIELD(nw, running, n_sas_keys);
    SWAP_FIELD(nw, running, listen_source);
    SWAP_FIELD(nw, running, cluster_line);
}

/* True if row r's field differs between the global parts of a and b. */
static bool row_changed(const mqd_conf_row_t *r, const mqd_conf_t *a, const mqd_conf_t *b)
{
    return !mqd_conf_row_equal(r, a, b);
}

static int flags_ready(mqd_conf_t *c)
{
    if (c->set == NULL && (c->set = calloc(mqd_conf_bits_words(), sizeof *c->set)) == NULL)
        return MQD_ENOMEM;
    return 0;
}

/* Reads path, applies the running config's command line over it (as main did at start)
 * and validates the result into a new config; *out on success. */
static int build(const mqd_conf_t *running, const char *path, mqd_conf_t **out, char *err,
                 size_t errlen)
{
    mqd_conf_t *nc = NULL;
    int rc = mqd_conf_new(&nc);
    if (rc == 0)
        rc = mqd_conf_load_file(nc, path, err, errlen);
    if (rc == 0)
        rc = mqd_conf_replay_cli(nc, running->cli, running->n_cli, err, errlen);
    if (rc == 0)
        rc = mqd_conf_validate(nc, err, errlen);
    if (rc != 0) {
        if (rc == MQD_ENOMEM)
            snprintf(err, errlen, "%s: out of memory", path);
        mqd_conf_free(nc);
        return rc;
    }
    *out = nc;
    return 0;
}

static int run_checks(const mqd_conf_hooks_t *h, const mqd_conf_t *running, const mqd_conf_t *nc,
                      char *err, size_t errlen)
{
    for (size_t i = 0; h != NULL && i < h->n; i++) {
        const hook_t *k = &h->v[i];
        if (k->check == NULL || (k->row != NULL && !row_changed(k->row, running, nc)))
            continue;
        int rc = k->check(k->arg, running, nc, err, errlen);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int mqd_conf_reload(mqd_conf_t *running, const char *path, const mqd_conf_hooks_t *h,
                    mqd_conf_reload_report_t *rep)
{
    mqd_conf_t *nc = NULL;
    memset(rep, 0, sizeof *rep);
    int rc = build(running, path, &nc, rep->err, sizeof rep->err);
    if (rc != 0)
        return rc;
    /* a file cut short drops every user or every [acl] rule (conf_guard.c) */
    mqd_conf_census_t was;
    mqd_conf_census(running, &was);
    if ((rc = mqd_conf_guard(&was, "the running config", nc, rep->err, sizeof rep->err)) != 0)
        goto out;
    rep->n_restart = mqd_conf_restart_needed(running, nc, rep->restart, sizeof rep->restart);
    for (size_t i = 0; i < mqd_conf_nrows; i++) {
        const mqd_conf_row_t *r = &mqd_conf_rows[i];
        rep->n_changed += r->reloadable && r->scope == MQD_CS_GLOBAL && row_changed(r, running, nc);
    }
    if ((rc = run_checks(h, running, nc, rep->err, sizeof rep->err)) != 0)
        goto out;
    if ((rc = flags_ready(nc)) != 0 || (rc = flags_ready(running)) != 0) {
        snprintf(rep->err, sizeof rep->err, "%s: out of memory", path);
        goto out;
    }
    /* nothing can fail from here on */
    carry_restart_only(nc, running);
    swap_bytes(running, nc, sizeof *running); /* nc now holds the old config */
    for (size_t i = 0; h != NULL && i < h->n; i++) {
        const hook_t *k = &h->v[i];
        if (k->apply != NULL && (k->row == NULL || row_changed(k->row, nc, running))) {
            k->apply(k->arg, nc, running);
            rep->n_applied++;
        }
    }
out:
    mqd_conf_free(nc);
    return rc;
}
