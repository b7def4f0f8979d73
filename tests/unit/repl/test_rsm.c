/* test_rsm: the replication decision core (src/repl/rsm.c) played against scenario
 * scripts, one behaviour per script (tests/unit/repl/rsm/ *.txt; a path argument runs
 * only that script).
 *
 * The script syntax: one command per line; '#' starts a comment; words are key=value.
 *   ctx self=1 lag=1000 lease=3000 wait=1000 reattach=500 min_isr=1 unclean=0 controller=0
 *       stopping=0          the context (the defaults are these; only the keys given change)
 *   alive 1 2 3           the liveness set (replaces it); "alive" alone: nobody
 *   time 1500             now_ms for the events that follow (never goes back)
 *   EVENT k=v ...         one event (mqd_rsm_ev_name): state, refreshed, lease, tick,
 *       stable, progress, attach, leave, node-left, report, reports-read, cas-result, run,
 *       link-down, truncated, send, move. Keys: node, epoch, last_epoch, largest, count,
 *       offset, end, hw, epoch_end, log_start, link, rev (mod_revision), leader,
 *       replicas=1,2,3, isr=1,2, acks=all|quorum|leader, cond=diverged|below-start|...
 *       (mqd_rsm_cond_name), and the flag as start=1 (state), ok=1 (refreshed,
 *       cas-result), live=1 (lease), stopping=1 (leave)
 *   expect ACTION k=v ...   the last event emitted that action with those fields
 *       (mqd_rsm_act_name; for a cas the keys leader, epoch, isr, replicas are those of
 *       the state it writes; text~WORDS: a log line containing WORDS, to the line's end)
 *   expect-none ACTION k=v ...   it emitted no such action
 *   expect-actions a,b,c    the last event's actions, log lines left out, in order ("-": none)
 *   check k=v ...         the state: role=leader|follower|none, leader, epoch, isr, hw,
 *       fenced, may_ack, offline, cas_out, end, stable, handover (0/1)
 * Every script must expect or check something. */
#include "config.h"
#include "repl/rsm.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXW 24

typedef struct script {
    const char *name;
    int line;
    mqd_rsm_ctx_t ctx;
    mqd_rsm_t s;
    mqd_rsm_out_t out;
    int64_t now;
    int checks;
    int failed;
} script_t;

typedef struct words {
    int n;
    char *k[MAXW], *v[MAXW];
    const char *rest; /* text~: the rest of the line */
} words_t;

static void fail(script_t *sc, const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "%s:%d: ", sc->name, sc->line);
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    sc->failed++;
}

static int lookup(const char *const *names, int n, const char *v)
{
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], v) == 0)
            return i;
    return -1;
}

static int ev_type(const char *w)
{
    for (int t = MQD_RSM_EV_STATE; t <= MQD_RSM_EV_MOVE; t++)
        if (strcmp(mqd_rsm_ev_name(t), w) == 0)
            return t;
    return -1;
}

static int act_type(const char *w)
{
    for (int t = MQD_RSM_ACT_LEAD; t <= MQD_RSM_ACT_LOG; t++)
        if (strcmp(mqd_rsm_act_name(t), w) == 0)
            return t;
    return -1;
}

static int cond_of(const char *w)
{
    for (int c = MQD_RSM_COND_CLOSED; c <= MQD_RSM_COND_RESOURCE_LIMIT; c++)
        if (strcmp(mqd_rsm_cond_name(c), w) == 0)
            return c;
    return -1;
}

static int acks_of(const char *w)
{
    static const char *const names[] = {"leader", "quorum", "all"};
    return lookup(names, 3, w);
}

static uint32_t ids(const char *v, uint32_t *out)
{
    uint32_t n = 0;
    while (*v && n < MQD_REPL_MAX_RF) {
        char *e;
        out[n++] = (uint32_t)strtoul(v, &e, 10);
        v = *e == ',' ? e + 1 : e;
        if (e == v && *e)
            break;
    }
    return n;
}

static void split(char *line, words_t *w)
{
    char *t = strstr(line, "text~");
    w->n = 0;
    w->rest = NULL;
    if (t) {
        *t = '\0';
        w->rest = t + 5;
        char *e = (char *)w->rest + strlen(w->rest);
        while (e > w->rest && (e[-1] == '\n' || e[-1] == ' '))
            *--e = '\0';
    }
    for (char *tok = strtok(line, " \t\n"); tok && w->n < MAXW; tok = strtok(NULL, " \t\n")) {
        char *eq = strchr(tok, '=');
        w->k[w->n] = tok;
        w->v[w->n] = eq ? (*eq = '\0', eq + 1) : (char *)"";
        w->n++;
    }
}

static uint64_t num(const char *v)
{
    return strtoull(v, NULL, 10);
}

static void set_ctx(script_t *sc, const words_t *w)
{
    mqd_rsm_ctx_t *c = &sc->ctx;
    for (int i = 1; i < w->n; i++) {
        const char *k = w->k[i];
        uint32_t v = (uint32_t)num(w->v[i]);
        if (!strcmp(k, "self"))
            c->self = v;
        else if (!strcmp(k, "lag"))
            c->replica_lag_ms = v;
        else if (!strcmp(k, "lease"))
            c->lease_ms = v;
        else if (!strcmp(k, "wait"))
            c->cand_wait_ms = v;
        else if (!strcmp(k, "reattach"))
            c->reattach_ms = v;
        else if (!strcmp(k, "min_isr"))
            c->min_isr = v;
        else if (!strcmp(k, "unclean"))
            c->unclean = v != 0;
        else if (!strcmp(k, "controller"))
            c->controller = v != 0;
        else if (!strcmp(k, "stopping"))
            c->stopping = v != 0;
        else
            fail(sc, "unknown ctx key %s%s", k, "");
    }
}

static void event(script_t *sc, int type, const words_t *w)
{
    mqd_rsm_ev_t ev = {.type = type, .now_ms = sc->now};
    for (int i = 1; i < w->n; i++) {
        const char *k = w->k[i], *v = w->v[i];
        if (!strcmp(k, "node"))
            ev.node = (uint32_t)num(v);
        else if (!strcmp(k, "epoch"))
            ev.epoch = ev.ps.epoch = (uint32_t)num(v);
        else if (!strcmp(k, "last_epoch"))
            ev.last_epoch = (uint32_t)num(v);
        else if (!strcmp(k, "largest"))
            ev.largest = (uint32_t)num(v);
        else if (!strcmp(k, "count"))
            ev.count = (uint32_t)num(v);
        else if (!strcmp(k, "offset"))
            ev.offset = num(v);
        else if (!strcmp(k, "end"))
            ev.end = num(v);
        else if (!strcmp(k, "hw"))
            ev.hw = num(v);
        else if (!strcmp(k, "epoch_end"))
            ev.epoch_end = num(v);
        else if (!strcmp(k, "log_start"))
            ev.log_start = num(v);
        else if (!strcmp(k, "link"))
            ev.link = num(v);
        else if (!strcmp(k, "rev"))
            ev.mod_rev = (int64_t)num(v);
        else if (!strcmp(k, "leader"))
            ev.ps.leader = (uint32_t)num(v);
        else if (!strcmp(k, "replicas"))
            ev.ps.n_replicas = ids(v, ev.ps.replicas);
        else if (!strcmp(k, "isr"))
            ev.ps.n_isr = ids(v, ev.ps.isr);
        else if (!strcmp(k, "acks"))
            ev.acks = (uint32_t)acks_of(v);
        else if (!strcmp(k, "cond"))
            ev.cond = (mqd_rsm_cond_t)cond_of(v);
        else if (!strcmp(k, "start") || !strcmp(k, "ok") || !strcmp(k, "live") ||
                 !strcmp(k, "stopping"))
            ev.flag = num(v) != 0;
        else
            fail(sc, "unknown event key %s%s", k, "");
    }
    sc->out.n = 0;
    sc->out.overflow = false;
    mqd_rsm_step(&sc->ctx, &sc->s, &ev, &sc->out);
    if (sc->out.overflow)
        fail(sc, "more than MQD_RSM_MAX_ACTIONS actions%s%s", "", "");
}

static bool same_ids(const uint32_t *a, uint32_t na, const char *v)
{
    uint32_t b[MQD_REPL_MAX_RF], nb = ids(v, b);
    return na == nb && memcmp(a, b, na * sizeof *a) == 0;
}

static bool matches(const mqd_rsm_act_t *a, const words_t *w, script_t *sc)
{
    if (w->rest && !strstr(a->text, w->rest))
        return false;
    for (int i = 2; i < w->n; i++) {
        const char *k = w->k[i], *v = w->v[i];
        bool cas = a->type == MQD_RSM_ACT_CAS;
        if (!strcmp(k, "node")) {
            if (a->node != num(v))
                return false;
        } else if (!strcmp(k, "epoch")) {
            if ((cas ? a->ps.epoch : a->epoch) != num(v))
                return false;
        } else if (!strcmp(k, "offset")) {
            if (a->offset != num(v))
                return false;
        } else if (!strcmp(k, "hw")) {
            if (a->hw != num(v))
                return false;
        } else if (!strcmp(k, "rev")) {
            if ((uint64_t)a->mod_rev != num(v))
                return false;
        } else if (!strcmp(k, "leader")) {
            if (a->ps.leader != num(v))
                return false;
        } else if (!strcmp(k, "isr")) {
            if (!same_ids(a->ps.isr, a->ps.n_isr, v))
                return false;
        } else if (!strcmp(k, "replicas")) {
            if (!same_ids(a->ps.replicas, a->ps.n_replicas, v))
                return false;
        } else if (!strcmp(k, "acks")) {
            if ((int)a->acks != acks_of(v))
                return false;
        } else if (!strcmp(k, "cond")) {
            if ((int)a->cond != cond_of(v))
                return false;
        } else if (!strcmp(k, "stopping")) {
            if (a->flag != (num(v) != 0))
                return false;
        } else {
            fail(sc, "unknown action key %s%s", k, "");
            return false;
        }
    }
    return true;
}

static void dump(script_t *sc)
{
    for (size_t i = 0; i < sc->out.n; i++) {
        const mqd_rsm_act_t *a = &sc->out.a[i];
        fprintf(stderr,
                "    %s node=%" PRIu32 " epoch=%" PRIu32 " offset=%" PRIu64 " hw=%" PRIu64
                " cond=%s%s%s\n",
                mqd_rsm_act_name(a->type), a->node,
                a->type == MQD_RSM_ACT_CAS ? a->ps.epoch : a->epoch, a->offset, a->hw,
                mqd_rsm_cond_name(a->cond), a->text[0] ? " text: " : "", a->text);
    }
}

static void expect(script_t *sc, const words_t *w, bool want)
{
    int t = w->n > 1 ? act_type(w->k[1]) : -1;
    if (t < 0)
        return fail(sc, "unknown action %s%s", w->n > 1 ? w->k[1] : "", "");
    bool found = false;
    for (size_t i = 0; i < sc->out.n && !found; i++)
        found = (int)sc->out.a[i].type == t && matches(&sc->out.a[i], w, sc);
    sc->checks++;
    if (found != want) {
        fail(sc, "%s %s: not so; the actions were:", want ? "expected" : "did not expect", w->k[1]);
        dump(sc);
    }
}

static void expect_actions(script_t *sc, const words_t *w)
{
    char got[512] = "";
    size_t len = 0;
    for (size_t i = 0; i < sc->out.n; i++)
        if (sc->out.a[i].type != MQD_RSM_ACT_LOG)
            len += (size_t)snprintf(got + len, sizeof got - len, "%s%s", len ? "," : "",
                                    mqd_rsm_act_name(sc->out.a[i].type));
    if (!len)
        snprintf(got, sizeof got, "-");
    sc->checks++;
    if (w->n < 2 || strcmp(got, w->k[1]) != 0)
        fail(sc, "expected actions %s, got %s", w->n > 1 ? w->k[1] : "?", got);
}

static const char *role_name(mqd_rsm_role_t r)
{
    return r == MQD_RSM_ROLE_LEADER ? "leader" : r == MQD_RSM_ROLE_FOLLOWER ? "follower" : "none";
}

static void check(script_t *sc, const words_t *w)
{
    const mqd_rsm_t *s = &sc->s;
    for (int i = 1; i < w->n; i++) {
        const char *k = w->k[i], *v = w->v[i];
        uint64_t got;
        char buf[32];
        sc->checks++;
        if (!strcmp(k, "role")) {
            if (strcmp(role_name(s->role), v) != 0)
                fail(sc, "role is %s, not %s", role_name(s->role), v);
            continue;
        }
        if (!strcmp(k, "isr")) {
            if (!same_ids(s->ps.isr, s->ps.n_isr, v))
                fail(sc, "the in-sync set is not %s%s", v, "");
            continue;
        }
        if (!strcmp(k, "leader"))
            got = s->ps.leader;
        else if (!strcmp(k, "epoch"))
            got = s->ps.epoch;
        else if (!strcmp(k, "hw"))
            got = s->hw;
        else if (!strcmp(k, "end"))
            got = s->end;
        else if (!strcmp(k, "stable"))
            got = s->stable;
        else if (!strcmp(k, "fenced"))
            got = s->fenced;
        else if (!strcmp(k, "may_ack"))
            got = mqd_rsm_may_ack(&sc->ctx, s);
        else if (!strcmp(k, "offline"))
            got = s->offline;
        else if (!strcmp(k, "cas_out"))
            got = s->cas_out;
        else if (!strcmp(k, "handover"))
            got = s->handover_ms != 0;
        else {
            fail(sc, "unknown check %s%s", k, "");
            continue;
        }
        snprintf(buf, sizeof buf, "%" PRIu64, got);
        if (got != num(v))
            fail(sc, "%s is %s", k, buf);
    }
}

static void set_alive(script_t *sc, const words_t *w)
{
    sc->ctx.n_alive = 0;
    for (int i = 1; i < w->n; i++)
        mqd_rsm_set_alive(&sc->ctx, (uint32_t)num(w->k[i]), true);
}

static void command(script_t *sc, char *line)
{
    words_t w;
    char *hash = strchr(line, '#');
    if (hash && !strstr(line, "text~"))
        *hash = '\0';
    split(line, &w);
    if (w.n == 0)
        return;
    const char *c = w.k[0];
    int t;
    if (!strcmp(c, "ctx"))
        set_ctx(sc, &w);
    else if (!strcmp(c, "alive"))
        set_alive(sc, &w);
    else if (!strcmp(c, "time")) {
        int64_t now = w.n > 1 ? (int64_t)num(w.k[1]) : 0;
        if (now < sc->now)
            fail(sc, "time goes back%s%s", "", "");
        sc->now = now;
    } else if (!strcmp(c, "expect"))
        expect(sc, &w, true);
    else if (!strcmp(c, "expect-none"))
        expect(sc, &w, false);
    else if (!strcmp(c, "expect-actions"))
        expect_actions(sc, &w);
    else if (!strcmp(c, "check"))
        check(sc, &w);
    else if ((t = ev_type(c)) > 0)
        event(sc, t, &w);
    else
        fail(sc, "unknown command %s%s", c, "");
}

static int run_script(const char *path, const char *name)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return 1;
    }
    static script_t sc; /* big: not on the stack */
    memset(&sc, 0, sizeof sc);
    sc.name = name;
    sc.ctx = (mqd_rsm_ctx_t){.self = 1,
                             .replica_lag_ms = 1000,
                             .lease_ms = 3000,
                             .cand_wait_ms = 1000,
                             .reattach_ms = 500,
                             .min_isr = 1};
    mqd_rsm_init(&sc.s);
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        sc.line++;
        command(&sc, line);
    }
    fclose(f);
    if (sc.checks == 0) {
        fprintf(stderr, "%s: expects and checks nothing\n", name);
        sc.failed++;
    }
    printf("%s %s (%d checks)\n", sc.failed ? "FAIL" : "ok  ", name, sc.checks);
    return sc.failed ? 1 : 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        int bad = 0;
        for (int i = 1; i < argc; i++)
            bad += run_script(argv[i], argv[i]);
        return bad ? 1 : 0;
    }
    const char *dir = getenv("RSM_SCRIPTS") ? getenv("RSM_SCRIPTS") : RSM_SCRIPTS;
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "%s: cannot open the scripts' directory\n", dir);
        return 1;
    }
    char *names[256];
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < 256;) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".txt") == 0)
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        bad += run_script(path, names[i]);
        free(names[i]);
    }
    printf("%zu scripts, %d failed\n", n, bad);
    if (n < 25) {
        fprintf(stderr, "fewer than 25 scenario scripts in %s\n", dir);
        return 1;
    }
    return bad ? 1 : 0;
}
