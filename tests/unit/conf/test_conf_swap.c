/* conf: reload as a swap (conf_swap.c). A bad file or a refusing check hook changes
 * nothing; a good one applies the reloadable keys in one step, runs the apply hooks of
 * what changed (and only those), and keeps restart-only keys at their running values
 * (named in the report). */
#include "config.h"
#include "conf/conf_int.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fx {
    char dir[64];
    char path[128];
    mqd_conf_t *run;
    mqd_conf_hooks_t *hooks;
    /* what the hooks saw */
    int checks, refuse;
    int level_applies, topics_applies, txn_applies, every_applies;
    int old_level, new_level;
    uint32_t old_max_topics, new_max_topics;
} fx_t;

static void write_file(fx_t *f, const char *text)
{
    FILE *fp = fopen(f->path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    assert_int_equal(fclose(fp), 0);
}

static const char base_text[] = "listen = 127.0.0.1:5999\n"
                                "data_dir = /tmp/mqd-swap-data\n"
                                "log_level = info\n"
                                "max_topics = 100\n"
                                "max_connections = 50\n"
                                "[topic orders]\n"
                                "retention_ms = 1h\n";

static int check_hook(void *arg, const mqd_conf_t *cur, const mqd_conf_t *next, char *err,
                      size_t errlen)
{
    fx_t *f = arg;
    f->checks++;
    if (f->refuse) {
        snprintf(err, errlen, "%s: tls_cert: refused by the test", next->path);
        return MQD_EINVAL;
    }
    return 0;
}

static void apply_level(void *arg, const mqd_conf_t *old, const mqd_conf_t *now)
{
    fx_t *f = arg;
    f->level_applies++;
    f->old_level = (int)old->log_level;
    f->new_level = (int)now->log_level;
}

static void apply_topics(void *arg, const mqd_conf_t *old, const mqd_conf_t *now)
{
    fx_t *f = arg;
    f->topics_applies++;
    f->old_max_topics = old->max_topics;
    f->new_max_topics = now->max_topics;
}

static void apply_txn(void *arg, const mqd_conf_t *old, const mqd_conf_t *now)
{
    ((fx_t *)arg)->txn_applies++;
}

static void apply_every(void *arg, const mqd_conf_t *old, const mqd_conf_t *now)
{
    ((fx_t *)arg)->every_applies++;
}

static int setup(void **state)
{
    char err[512];
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    strcpy(f->dir, "/tmp/mqd-swap-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/mqd.conf", f->dir);
    write_file(f, base_text);
    assert_int_equal(mqd_conf_new(&f->run), 0);
    assert_int_equal(mqd_conf_load_file(f->run, f->path, err, sizeof err), 0);
    assert_int_equal(mqd_conf_validate(f->run, err, sizeof err), 0);
    assert_int_equal(mqd_conf_hooks_new(&f->hooks), 0);
    assert_int_equal(mqd_conf_hook_add(f->hooks, NULL, check_hook, apply_every, f), 0);
    assert_int_equal(mqd_conf_hook_add(f->hooks, "log_level", NULL, apply_level, f), 0);
    assert_int_equal(mqd_conf_hook_add(f->hooks, "max_topics", NULL, apply_topics, f), 0);
    assert_int_equal(mqd_conf_hook_add(f->hooks, "txn_timeout_ms", NULL, apply_txn, f), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    mqd_conf_free(f->run);
    mqd_conf_hooks_free(f->hooks);
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* The running config as it was loaded from base_text. */
static void assert_base(const fx_t *f)
{
    mqd_topic_conf_t t;
    assert_int_equal(f->run->log_level, MQD_LOG_INFO);
    assert_int_equal(f->run->max_topics, 100);
    assert_int_equal(f->run->max_connections, 50);
    assert_int_equal(f->run->n_listen, 1);
    assert_string_equal(f->run->listen[0], "127.0.0.1:5999");
    mqd_conf_topic(f->run, "orders", &t);
    assert_int_equal(t.log.retention_ms, 3600000);
}

static void test_bad_line_changes_nothing(void **state)
{
    fx_t *f = *state;
    mqd_conf_reload_report_t rep;
    char want[256];
    write_file(f, "log_level = debug\n"
                  "listen = 127.0.0.1:5999\n"
                  "max_topics = lots\n" /* line 3 */
                  "data_dir = /tmp/mqd-swap-data\n");
    assert_int_equal(mqd_conf_reload(f->run, f->path, f->hooks, &rep), MQD_EINVAL);
    snprintf(want, sizeof want, "%s:3: max_topics: ", f->path);
    if (strncmp(rep.err, want, strlen(want)) != 0)
        fail_msg("err '%s' does not start with '%s'", rep.err, want);
    assert_base(f); /* log_level = debug on line 1 was not applied either */
    assert_int_equal(f->checks + f->level_applies + f->topics_applies + f->every_applies, 0);

    /* a cross-field error (validation, as at start) is refused the same way */
    write_file(f, "listen = 127.0.0.1:5999\ndata_dir = /tmp/x\nlog_level = debug\n"
                  "tls_verify_client = required\n");
    assert_int_equal(mqd_conf_reload(f->run, f->path, f->hooks, &rep), MQD_EINVAL);
    assert_non_null(strstr(rep.err, "tls_verify_client: required needs tls_ca"));
    assert_base(f);
    /* a missing file too */
    unlink(f->path);
    assert_int_equal(mqd_conf_reload(f->run, f->path, f->hooks, &rep), MQD_ENOENT);
    assert_base(f);
    assert_int_equal(f->checks + f->every_applies, 0);
}

static void test_check_hook_refuses(void **state)
{
    fx_t *f = *state;
    mqd_conf_reload_report_t rep;
    f->refuse = 1;
    write_file(f, "listen = 127.0.0.1:5999\ndata_dir = /tmp/mqd-swap-data\n"
                  "log_level = debug\nmax_topics = 7\n");
    assert_int_equal(mqd_conf_reload(f->run, f->path, f->hooks, &rep), MQD_EINVAL);
    assert_non_null(strstr(rep.err, "tls_cert: refused by the test"));
    assert_int_equal(f->checks, 1);
    assert_int_equal(f->level_applies + f->topics_applies + f->every_applies, 0);
    assert_base(f);
}

static void test_good_reload_swaps(void **state)
{
    fx_t *f = *state;
    mqd_conf_reload_report_t rep;
    const char *data_dir = f->run->data_dir; /* restart-only: must keep its storage */
    const mqd_topic_conf_t *orders = &f->run->topics[0];
    write_file(f, "listen = 127.0.0.1:6000\n" /* restart-only */
                  "data_dir = /tmp/mqd-swap-data\n"
                  "log_level = debug\n"             /* reloadable, hooked */
                  "max_topics = 7\n"                /* reloadable, hooked */
                  "max_topics_per_connection = 3\n" /* reloadable, no hook: read at use */
                  "max_connections = 60\n"          /* restart-only */
                  "[topic orders]\n"
                  "retention_ms = 2h\n"); /* restart-only (topics take theirs at open) */
    assert_int_equal(mqd_conf_reload(f->run, f->path, f->hooks, &rep), 0);
    /* applied, in one step */
    assert_int_equal(f->run->log_level, MQD_LOG_DEBUG);
    assert_int_equal(f->run->max_topics, 7);
    assert_int_equal(f->run->max_topics_per_connection, 3);
    assert_int_equal(rep.n_changed, 3);
    /* the hooks of what changed ran once each, with both configs; the unchanged key's not */
    assert_int_equal(f->checks, 1);
    assert_int_equal(f->every_applies, 1);
    assert_int_equal(f->level_applies, 1);
    assert_int_equal(f->old_level, MQD_LOG_INFO);
    assert_int_equal(f->new_level, MQD_LOG_DEBUG);
    assert_int_equal(f->topics_applies, 1);
    assert_int_equal(f->old_max_topics, 100);
    assert_int_equal(f->new_max_topics, 7);
    assert_int_equal(f->txn_applies, 0);
    assert_int_equal(rep.n_applied, 3);
    /* restart-only keys: named, not applied, their storage kept */
    assert_int_equal(rep.n_restart, 3);
    assert_non_null(strstr(rep.restart, "listen"));
    assert_non_null(strstr(rep.restart, "max_connections"));
    assert_non_null(strstr(rep.restart, "topic.orders"));
    assert_int_equal(f->run->max_connections, 50);
    assert_string_equal(f->run->listen[0], "127.0.0.1:5999");
    assert_ptr_equal(f->run->data_dir, data_dir);
    assert_ptr_equal(&f->run->topics[0], orders);
    mqd_topic_conf_t t;
    mqd_conf_topic(f->run, "orders", &t);
    assert_int_equal(t.log.retention_ms, 3600000);
    assert_true(mqd_conf_key_is_set(f->run, NULL, "max_connections"));
    assert_true(mqd_conf_key_is_set(f->run, NULL, "max_topics_per_connection"));

    /* the same file again: nothing changed, so only the every-reload hook runs */
    assert_int_equal(mqd_conf_reload(f->run, f->path, f->hooks, &rep), 0);
    assert_int_equal(rep.n_changed, 0);
    assert_int_equal(rep.n_applied, 1);
    assert_int_equal(f->level_applies + f->topics_applies, 2);
    assert_int_equal(f->every_applies, 2);
}

/* The command line applies over the file at reload as at start: --listen and --set
 * values stay, and a --listen that differs from the file's is not a "needs restart". */
static void test_command_line_again(void **state)
{
    fx_t *f = *state;
    mqd_conf_reload_report_t rep;
    char err[512];
    assert_int_equal(mqd_conf_add_listen(f->run, "127.0.0.1:7000", err, sizeof err), 0);
    assert_int_equal(mqd_conf_set(f->run, "max_topics_per_connection=9", err, sizeof err), 0);
    assert_int_equal(f->run->n_cli, 2);
    write_file(f, "listen = 127.0.0.1:5999\ndata_dir = /tmp/mqd-swap-data\nlog_level = info\n"
                  "max_topics = 100\nmax_connections = 50\nmax_topics_per_connection = 4\n"
                  "[topic orders]\nretention_ms = 1h\n");
    assert_int_equal(mqd_conf_reload(f->run, f->path, f->hooks, &rep), 0);
    assert_int_equal(rep.n_restart, 0); /* the listener is still the command line's */
    assert_string_equal(rep.restart, "");
    assert_int_equal(f->run->n_listen, 1);
    assert_string_equal(f->run->listen[0], "127.0.0.1:7000");
    assert_int_equal(f->run->max_topics_per_connection, 9); /* --set beats the file */
    assert_int_equal(rep.n_changed, 0);
    assert_int_equal(f->run->n_cli, 2); /* kept for the next reload */
    /* and again: the same */
    assert_int_equal(mqd_conf_reload(f->run, f->path, f->hooks, &rep), 0);
    assert_int_equal(rep.n_restart, 0);
    assert_string_equal(f->run->listen[0], "127.0.0.1:7000");
    assert_int_equal(f->run->max_topics_per_connection, 9);
}

/* What the swap assumes of the table: topic settings and [sas_key] keys are restart-only
 * (sections are carried over whole), users are reloadable (taken whole from the file).
 * A row marked otherwise would be neither applied nor named: fix the swap first. */
static void test_table_matches_swap(void **state)
{
    (void)state;
    for (size_t i = 0; i < mqd_conf_nrows; i++) {
        const mqd_conf_row_t *r = &mqd_conf_rows[i];
        if (r->scope == MQD_CS_TOPIC || r->scope == MQD_CS_BOTH || r->scope == MQD_CS_SASKEY) {
            if (r->reloadable)
                fail_msg("%s: a topic or sas_key row marked reloadable", r->name);
        } else if (r->scope == MQD_CS_USER && !r->reloadable) {
            fail_msg("%s: a user row marked restart-only", r->name);
        }
    }
}

static void test_hook_add_refuses(void **state)
{
    fx_t *f = *state;
    assert_int_equal(mqd_conf_hook_add(f->hooks, "max_connections", NULL, apply_txn, f),
                     MQD_EINVAL); /* needs a restart: the hook would never run */
    assert_int_equal(mqd_conf_hook_add(f->hooks, "no_such_key", NULL, apply_txn, f), MQD_EINVAL);
    assert_int_equal(mqd_conf_hook_add(f->hooks, "retention_ms", NULL, apply_txn, f), MQD_EINVAL);
    assert_int_equal(mqd_conf_hook_add(f->hooks, "log_level", NULL, NULL, f), MQD_EINVAL);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_bad_line_changes_nothing),
        T(test_check_hook_refuses),
        T(test_good_reload_swaps),
        T(test_command_line_again),
        T(test_hook_add_refuses),
        T(test_table_matches_swap),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
