/* The login checks SASL and the web console share (pwjob.c, scramuser.c), on a real
 * server (no sockets) with its real login pool thread and real PBKDF2:
 * - a password job's verdict: 0 for the right password, MQD_EFAILED for a wrong one
 *   (known) and for an unknown user (not known, checked against the decoy hash),
 *   MQD_ENOENT when a reload changed the user's hash while the check ran, MQD_EINVAL for
 *   a name too long; the password is wiped in the job once checked;
 * - SCRAM server-first: a user's own salt and iteration count; an unknown name gets the
 *   same decoy salt on every try, another name another one, and the real users'
 *   iteration count; mqd_auth_scram_unchanged is false once a reload changed or removed
 *   the credentials. */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core_int.h" /* reads core's structs by field */

#include <event2/event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "../server_fixture.h"

typedef struct fx {
    char dir[64];
    mqd_server_t *s;
    char hash_alice[160], hash_other[160];
    char scram_bob[400], scram_other[400];
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/mqd-pwjob-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    assert_int_equal(mqd_conf_password_hash("right", 1000, f->hash_alice, sizeof f->hash_alice), 0);
    assert_int_equal(mqd_conf_password_hash("newer", 1000, f->hash_other, sizeof f->hash_other), 0);
    assert_int_equal(mqd_conf_scram_make("bobpw", 4096, f->scram_bob, sizeof f->scram_bob), 0);
    assert_int_equal(mqd_conf_scram_make("bobpw", 4096, f->scram_other, sizeof f->scram_other), 0);
    char kv[3][480];
    snprintf(kv[0], sizeof kv[0], "user.alice.password_hash=%s", f->hash_alice);
    snprintf(kv[1], sizeof kv[1], "user.bob.scram_sha256=%s", f->scram_bob);
    snprintf(kv[2], sizeof kv[2], "user.carol.scram_sha256=%s", f->scram_bob);
    const char *kvs[] = {kv[0], kv[1], kv[2], NULL};
    f->s = fx_server_open(f->dir, kvs);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    fx_server_close(f->s);
    fx_rmtree(f->dir);
    free(f);
    return 0;
}

/* ---- password jobs ---- */

typedef struct job {
    mqd_auth_pw_t pw; /* first */
    int *rc;
    bool *known;
    char *pw_after; /* what the job's password buffer held when the verdict came */
} job_t;

static void on_verdict(mqd_auth_pw_t *pw, int rc)
{
    job_t *j = (job_t *)pw;
    *j->rc = rc;
    *j->known = pw->known;
    memcpy(j->pw_after, pw->pw, 8);
}

/* Submits user/password and runs the loop until the verdict (10 s at most); before the
 * loop runs, `reload` (if set) replaces the user's hash with f->hash_other. */
static int check_pw(fx_t *f, const char *user, const char *password, bool reload, bool *known)
{
    int rc = 1;
    char pw_after[8] = "unset";
    job_t *j = mqd_auth_pw_new(sizeof *j);
    assert_non_null(j);
    assert_int_equal(mqd_auth_pw_user(&j->pw, f->s, user), 0);
    snprintf(j->pw.pw, sizeof j->pw.pw, "%s", password);
    j->rc = &rc;
    j->known = known;
    j->pw_after = pw_after;
    mqd_auth_pw_submit(&j->pw, 1, on_verdict);
    if (reload) {
        mqd_user_conf_t *u = (mqd_user_conf_t *)mqd_conf_user(f->s->conf, user);
        free(u->password_hash);
        u->password_hash = strdup(f->hash_other);
    }
    for (int i = 0; i < 10000 && rc == 1; i++) {
        event_base_loop(f->s->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        if (rc == 1)
            usleep(1000);
    }
    assert_int_not_equal(rc, 1);
    assert_memory_equal(pw_after, "\0\0\0\0\0\0\0\0", 8); /* wiped once checked */
    return rc;
}

static void test_pw_verdicts(void **state)
{
    fx_t *f = *state;
    bool known = false;
    assert_int_equal(check_pw(f, "alice", "right", false, &known), 0);
    assert_true(known);
    assert_int_equal(check_pw(f, "alice", "wrong", false, &known), MQD_EFAILED);
    assert_true(known);
    assert_int_equal(check_pw(f, "nobody", "right", false, &known), MQD_EFAILED);
    assert_false(known); /* checked against the decoy hash */
    assert_int_equal(check_pw(f, "bob", "bobpw", false, &known), MQD_EFAILED);
    assert_false(known); /* SCRAM credentials only: no password hash */
    /* the right password, but a reload changed the hash while it was checked */
    assert_int_equal(check_pw(f, "alice", "right", true, &known), MQD_ENOENT);
    assert_true(known);
    /* and against the new hash, the new password */
    assert_int_equal(check_pw(f, "alice", "newer", false, &known), 0);
    assert_int_equal(mqd_auth_pool_in_flight(((mqd_auth_t *)f->s->auth)->pool), 0);
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    job_t *j = mqd_auth_pw_new(sizeof *j);
    assert_int_equal(mqd_auth_pw_user(&j->pw, f->s, longname), MQD_EINVAL);
    mqd_auth_pw_free(&j->pw);
    assert_null(mqd_auth_pw_new(sizeof(mqd_auth_pw_t) - 1));
}

/* ---- SCRAM ---- */

/* The value of attribute `a` ("s", "i") of server-first msg into out. */
static void attr(const char *msg, const char *a, char *out, size_t len)
{
    char key[8];
    snprintf(key, sizeof key, ",%s=", a);
    const char *p = strstr(msg, key);
    assert_non_null(p);
    p += strlen(key);
    size_t n = strcspn(p, ",");
    assert_true(n < len);
    memcpy(out, p, n);
    out[n] = '\0';
}

static void first_of(fx_t *f, const char *user, char *salt, char *iter)
{
    char msg[300], out[MQD_SCRAM_MSG_MAX + 1];
    int n = snprintf(msg, sizeof msg, "n,,n=%s,r=fyko+d2lbbFgONRv9qkxdawL", user);
    mqd_scram_t sc;
    memset(&sc, 0, sizeof sc);
    assert_int_equal(mqd_scram_client_first(&sc, msg, (size_t)n), 0);
    assert_int_equal(mqd_auth_scram_reply_first(f->s, &sc, out), 0);
    assert_int_equal(sc.known, strcmp(user, "bob") == 0 || strcmp(user, "carol") == 0);
    attr(out, "s", salt, 128);
    attr(out, "i", iter, 16);
    mqd_scram_clear(&sc);
}

static void test_scram_first(void **state)
{
    fx_t *f = *state;
    char salt[128], iter[16], salt2[128], iter2[16], salt3[128], iter3[16];
    first_of(f, "bob", salt, iter);
    char want_salt[128];
    /* "ITER$SALT_B64$STOREDKEY_B64$SERVERKEY_B64" */
    const char *d1 = strchr(f->scram_bob, '$');
    const char *d2 = strchr(d1 + 1, '$');
    snprintf(want_salt, sizeof want_salt, "%.*s", (int)(d2 - d1 - 1), d1 + 1);
    assert_string_equal(salt, want_salt);
    assert_string_equal(iter, "4096");
    first_of(f, "mallory", salt2, iter2);
    first_of(f, "mallory", salt3, iter3);
    assert_string_equal(salt2, salt3);  /* the same made-up salt on every try */
    assert_string_equal(iter2, "4096"); /* as real users have */
    assert_string_not_equal(salt2, want_salt);
    first_of(f, "trudy", salt3, iter3);
    assert_string_not_equal(salt3, salt2);
}

static void test_scram_unchanged(void **state)
{
    fx_t *f = *state;
    mqd_scram_cred_t cred;
    assert_int_equal(mqd_conf_scram_parse(f->scram_bob, &cred), 0);
    assert_true(mqd_auth_scram_unchanged(f->s, "bob", cred.stored_key));
    assert_true(mqd_auth_scram_unchanged(f->s, "carol", cred.stored_key));
    assert_false(mqd_auth_scram_unchanged(f->s, "alice", cred.stored_key)); /* no SCRAM */
    assert_false(mqd_auth_scram_unchanged(f->s, "nobody", cred.stored_key));
    /* a reload gives bob new credentials (the same password, a new salt) */
    mqd_user_conf_t *u = (mqd_user_conf_t *)mqd_conf_user(f->s->conf, "bob");
    free(u->scram_sha256);
    u->scram_sha256 = strdup(f->scram_other);
    assert_false(mqd_auth_scram_unchanged(f->s, "bob", cred.stored_key));
    mqd_scram_cred_t now;
    assert_int_equal(mqd_conf_scram_parse(f->scram_other, &now), 0);
    assert_true(mqd_auth_scram_unchanged(f->s, "bob", now.stored_key));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pw_verdicts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scram_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scram_unchanged, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
