/* conf: the truncation guard (conf_guard.c). A reload of a file cut short — emptied,
 * cut before its [user NAME] sections, cut before or just after its [acl] — is refused
 * with "FILE:LINE: key: reason" and the running config stays as it was; the explicit
 * forms (allow_no_users = on, an [acl] rule of one's own) are accepted; configs that
 * never had users or rules (the development config) reload and start as before. The
 * census the server keeps in meta.db between runs formats and parses back, and the
 * start check refuses what a reload refuses. */
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
} fx_t;

static const char global_part[] = "listen = 127.0.0.1:5999\n"
                                  "data_dir = /tmp/mqd-guard-data\n"
                                  "allow_anonymous = off\n";
static const char users_part[] = "[user alice]\n"
                                 "cert_cn = alice\n"
                                 "[user admin]\n"
                                 "cert_cn = admin\n"
                                 "groups = ops\n";
static const char acl_part[] = "[acl]\n"
                               "allow @ops all *\n"
                               "allow alice send,receive orders.*\n";

static void write_text(fx_t *f, const char *a, const char *b, const char *c)
{
    FILE *fp = fopen(f->path, "w");
    assert_non_null(fp);
    fputs(a, fp);
    fputs(b, fp);
    fputs(c, fp);
    assert_int_equal(fclose(fp), 0);
}

static int setup(void **state)
{
    char err[512];
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    strcpy(f->dir, "/tmp/mqd-guard-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/mqd.conf", f->dir);
    write_text(f, global_part, users_part, acl_part);
    assert_int_equal(mqd_conf_new(&f->run), 0);
    assert_int_equal(mqd_conf_load_file(f->run, f->path, err, sizeof err), 0);
    assert_int_equal(mqd_conf_validate(f->run, err, sizeof err), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    mqd_conf_free(f->run);
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* The running config is still the one of setup: two users, two rules. */
static void assert_intact(const fx_t *f)
{
    assert_int_equal(f->run->n_users, 2);
    assert_non_null(mqd_conf_user(f->run, "alice"));
    assert_non_null(mqd_conf_user(f->run, "admin"));
    assert_true(f->run->acl_present);
    assert_int_equal(f->run->n_acl, 2);
    assert_string_equal(f->run->acl[1].pattern, "orders.*");
}

static void expect_refused(fx_t *f, const char *want_prefix, const char *want_part)
{
    mqd_conf_reload_report_t rep;
    char want[512];
    assert_int_equal(mqd_conf_reload(f->run, f->path, NULL, &rep), MQD_EINVAL);
    snprintf(want, sizeof want, "%s%s", f->path, want_prefix);
    if (strncmp(rep.err, want, strlen(want)) != 0)
        fail_msg("err '%s' does not start with '%s'", rep.err, want);
    if (strstr(rep.err, want_part) == NULL)
        fail_msg("err '%s' lacks '%s'", rep.err, want_part);
    assert_intact(f);
}

static void test_empty_file_refused(void **state)
{
    fx_t *f = *state;
    write_text(f, "", "", "");
    expect_refused(f, ": allow_no_users: no [user NAME] section (the file is empty), ",
                   "but the running config had 2 user(s): is the file cut short? To run "
                   "without users on purpose, set allow_no_users = on");
    /* only comments: the file ends at line 2 */
    write_text(f, "# mqd.conf\n", "\n", "");
    expect_refused(f, ":2: allow_no_users: no [user NAME] section (the file ends at line 2)",
                   "set allow_no_users = on");
}

static void test_cut_before_users_refused(void **state)
{
    fx_t *f = *state;
    write_text(f, global_part, "", "");
    expect_refused(f, ":3: allow_no_users: ", "the running config had 2 user(s)");
}

static void test_cut_before_acl_refused(void **state)
{
    fx_t *f = *state;
    write_text(f, global_part, users_part, "");
    expect_refused(f, ":8: [acl]: no [acl] section (the file ends at line 8), ",
                   "the running config had 2 rule(s): is the file cut short? Without one every "
                   "client may do everything; to allow that on purpose, write [acl] with the "
                   "rule `allow * all *`");
    /* cut just after the section line: an [acl] that denies all, refused too */
    write_text(f, global_part, users_part, "[acl]\n");
    expect_refused(f, ":9: [acl]: the section has no rule (the file ends at line 9), ",
                   "write the rule `deny * all *`");
    /* a user removed and the ACL kept: fine (only the last user counts) */
    mqd_conf_reload_report_t rep;
    write_text(f, global_part, "[user admin]\ncert_cn = admin\ngroups = ops\n", acl_part);
    assert_int_equal(mqd_conf_reload(f->run, f->path, NULL, &rep), 0);
    assert_int_equal(f->run->n_users, 1);
    assert_int_equal(f->run->n_acl, 2);
}

static void test_explicit_forms_accepted(void **state)
{
    fx_t *f = *state;
    mqd_conf_reload_report_t rep;
    /* no users on purpose (the ACL kept) */
    write_text(f, global_part, "allow_no_users = on\n", acl_part);
    assert_int_equal(mqd_conf_reload(f->run, f->path, NULL, &rep), 0);
    assert_int_equal(f->run->n_users, 0);
    assert_true(f->run->allow_no_users);
    assert_int_equal(f->run->n_acl, 2);
    /* from there, users come back without a word */
    write_text(f, global_part, users_part, acl_part);
    assert_int_equal(mqd_conf_reload(f->run, f->path, NULL, &rep), 0);
    assert_int_equal(f->run->n_users, 2);
    assert_false(f->run->allow_no_users);
    /* everything allowed on purpose: an [acl] of its own */
    write_text(f, global_part, users_part, "[acl]\nallow * all *\n");
    assert_int_equal(mqd_conf_reload(f->run, f->path, NULL, &rep), 0);
    assert_int_equal(f->run->n_acl, 1);
    /* and from a running config of one rule, dropping the section is refused again */
    write_text(f, global_part, users_part, "");
    assert_int_equal(mqd_conf_reload(f->run, f->path, NULL, &rep), MQD_EINVAL);
    assert_non_null(strstr(rep.err, "had 1 rule(s)"));
    assert_int_equal(f->run->n_acl, 1);
}

/* The development config (no users, no [acl]) reloads as before: nothing is dropped. */
static void test_dev_config_unaffected(void **state)
{
    fx_t *f = *state;
    mqd_conf_reload_report_t rep;
    char err[512];
    mqd_conf_t *dev = NULL;
    char dev_path[512];
    snprintf(dev_path, sizeof dev_path, "%s/etc/mqd-dev.conf", MQD_TEST_SRCDIR);
    assert_int_equal(mqd_conf_new(&dev), 0);
    assert_int_equal(mqd_conf_load_file(dev, dev_path, err, sizeof err), 0);
    assert_int_equal(mqd_conf_validate(dev, err, sizeof err), 0);
    assert_int_equal(mqd_conf_reload(dev, dev_path, NULL, &rep), 0);
    /* a start of it on a data dir whose last run had users is refused, though */
    mqd_conf_census_t had = {2, -1}, none = {0, -1};
    assert_int_equal(mqd_conf_guard(&none, "the last run", dev, err, sizeof err), 0);
    assert_int_equal(
        mqd_conf_guard(&had, "the config of the last start or reload on /d", dev, err, sizeof err),
        MQD_EINVAL);
    char want[1200];
    snprintf(want, sizeof want,
             "%s:%d: allow_no_users: no [user NAME] section (the file ends at "
             "line %d), but the config of the last start or reload on /d had 2 user(s)",
             dev_path, dev->file_lines, dev->file_lines);
    if (strncmp(err, want, strlen(want)) != 0)
        fail_msg("err '%s' does not start with '%s'", err, want);
    mqd_conf_free(dev);
    /* an empty running config and an empty file: nothing to drop */
    write_text(f, "", "", "");
    mqd_conf_t *empty = NULL;
    assert_int_equal(mqd_conf_new(&empty), 0);
    assert_int_equal(mqd_conf_reload(empty, f->path, NULL, &rep), 0);
    mqd_conf_free(empty);
}

static void test_census(void **state)
{
    fx_t *f = *state;
    mqd_conf_census_t k, back;
    char buf[64];
    mqd_conf_census(f->run, &k);
    assert_int_equal(k.users, 2);
    assert_int_equal(k.acl_rules, 2);
    mqd_conf_census_format(&k, buf, sizeof buf);
    assert_string_equal(buf, "users=2 acl=2");
    assert_int_equal(mqd_conf_census_parse(buf, &back), 0);
    assert_int_equal(back.users, 2);
    assert_int_equal(back.acl_rules, 2);
    /* no [acl] section is -1, an empty one 0 */
    mqd_conf_t *c = NULL;
    assert_int_equal(mqd_conf_new(&c), 0);
    mqd_conf_census(c, &k);
    assert_int_equal(k.users, 0);
    assert_int_equal(k.acl_rules, -1);
    mqd_conf_census_format(&k, buf, sizeof buf);
    assert_string_equal(buf, "users=0 acl=-1");
    assert_int_equal(mqd_conf_census_parse(buf, &back), 0);
    assert_int_equal(back.acl_rules, -1);
    mqd_conf_free(c);
    static const char *const bad[] = {
        "", "users=1", "users=x acl=1", "users=1 acl=-2", "users=1 acl=1 more", "acl=1 users=1"};
    for (size_t i = 0; i < MQD_ARRAY_LEN(bad); i++)
        assert_int_equal(mqd_conf_census_parse(bad[i], &back), MQD_EINVAL);
    assert_int_equal(mqd_conf_census_parse(NULL, &back), MQD_EINVAL);
}

/* The start check is the same function with the census of the last run. */
static void test_start_guard(void **state)
{
    fx_t *f = *state;
    char err[1024];
    mqd_conf_census_t last = {2, 2};
    mqd_conf_t *c = NULL;
    write_text(f, global_part, users_part, "");
    assert_int_equal(mqd_conf_new(&c), 0);
    assert_int_equal(mqd_conf_load_file(c, f->path, err, sizeof err), 0);
    assert_int_equal(mqd_conf_guard(&last, "the config of the last start or reload on /var/lib/mqd",
                                    c, err, sizeof err),
                     MQD_EINVAL);
    assert_non_null(strstr(err, ":8: [acl]: no [acl] section (the file ends at line 8), but the "
                                "config of the last start or reload on /var/lib/mqd had 2 "
                                "rule(s)"));
    mqd_conf_free(c);
    /* users given on the command line count like the file's */
    write_text(f, global_part, "", acl_part);
    assert_int_equal(mqd_conf_new(&c), 0);
    assert_int_equal(mqd_conf_load_file(c, f->path, err, sizeof err), 0);
    assert_int_equal(mqd_conf_guard(&last, "x", c, err, sizeof err), MQD_EINVAL);
    assert_int_equal(mqd_conf_set(c, "user.alice.cert_cn=alice", err, sizeof err), 0);
    assert_int_equal(mqd_conf_guard(&last, "x", c, err, sizeof err), 0);
    mqd_conf_free(c);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_empty_file_refused),
        T(test_cut_before_users_refused),
        T(test_cut_before_acl_refused),
        T(test_explicit_forms_accepted),
        T(test_dev_config_unaffected),
        T(test_census),
        T(test_start_guard),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
