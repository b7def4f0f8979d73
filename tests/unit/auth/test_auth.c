/* auth unit tests: SCRAM-SHA-256 against RFC 7677's example exchange, SCRAM failure
 * cases, ACL glob/group/first-match logic, the security config keys ([acl] lines,
 * scram_sha256, TLS validation), unknown-user decoys, the login pool and the node naming
 * rule of SASL EXTERNAL. */
#include "config.h"
#include "auth/auth_int.h"
#include "conf/conf_int.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <openssl/evp.h>

/* RFC 7677 section 3 */
#define RFC_C1 "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
#define RFC_SNONCE "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
#define RFC_S1 "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
#define RFC_C2                                                                                     \
    "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsq" \
    "mmiz7AndVQ="
#define RFC_S2 "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

static void rfc_cred(mqd_scram_cred_t *cr)
{
    unsigned char salt[32];
    int n = EVP_DecodeBlock(salt, (const unsigned char *)"W22ZaJ0SNY7soEsUEjb6gQ==", 24);
    assert_int_equal(n, 18);
    assert_int_equal(mqd_conf_scram_derive("pencil", salt, 16, 4096, cr), 0);
}

static void test_scram_rfc7677(void **state)
{
    (void)state;
    mqd_scram_cred_t cr;
    mqd_scram_t s = {0};
    char out[MQD_SCRAM_MSG_MAX + 1];
    rfc_cred(&cr);
    assert_int_equal(mqd_scram_client_first(&s, RFC_C1, strlen(RFC_C1)), 0);
    assert_string_equal(s.user, "user");
    assert_int_equal(mqd_scram_server_first(&s, &cr, RFC_SNONCE, out), 0);
    assert_string_equal(out, RFC_S1);
    assert_int_equal(mqd_scram_client_final(&s, RFC_C2, strlen(RFC_C2), out), 0);
    assert_string_equal(out, RFC_S2);
    mqd_scram_clear(&s);
}

/* The stored string round-trips and gives the same keys as deriving directly. */
static void test_scram_stored_form(void **state)
{
    (void)state;
    char str[256];
    mqd_scram_cred_t a, b;
    assert_int_equal(mqd_conf_scram_make("pencil", 4096, str, sizeof str), 0);
    assert_int_equal(mqd_conf_scram_parse(str, &a), 0);
    assert_int_equal(a.iterations, 4096);
    assert_int_equal(mqd_conf_scram_derive("pencil", a.salt, a.salt_len, 4096, &b), 0);
    assert_memory_equal(a.stored_key, b.stored_key, 32);
    assert_memory_equal(a.server_key, b.server_key, 32);
    assert_null(strstr(str, "pencil"));
    char why[200];
    assert_int_equal(mqd_conf_check_scram(str, why, sizeof why), 0);
    static const char *const bad[] = {"", "4096", "4096$abc$def$ghi", "x$AAAAAAAAAAA=$$",
                                      "0$W22ZaJ0SNY7soEsUEjb6gQ==$" /* no keys */};
    for (size_t i = 0; i < MQD_ARRAY_LEN(bad); i++)
        assert_int_not_equal(mqd_conf_scram_parse(bad[i], &a), 0);
}

static int run_final(const char *c1, const char *c2, const mqd_scram_cred_t *cr)
{
    mqd_scram_t s = {0};
    char out[MQD_SCRAM_MSG_MAX + 1];
    int rc = mqd_scram_client_first(&s, c1, strlen(c1));
    if (rc == 0)
        rc = mqd_scram_server_first(&s, cr, RFC_SNONCE, out);
    if (rc == 0)
        rc = mqd_scram_client_final(&s, c2, strlen(c2), out);
    mqd_scram_clear(&s);
    return rc;
}

static void test_scram_failures(void **state)
{
    (void)state;
    mqd_scram_cred_t cr, other;
    rfc_cred(&cr);
    unsigned char salt[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    assert_int_equal(mqd_conf_scram_derive("not pencil", salt, 16, 4096, &other), 0);
    memcpy(other.salt, cr.salt, cr.salt_len); /* same salt, other password */
    other.salt_len = cr.salt_len;
    assert_int_equal(mqd_conf_scram_derive("not pencil", cr.salt, cr.salt_len, 4096, &other), 0);
    /* wrong password: the proof made with "pencil" does not match */
    assert_int_equal(run_final(RFC_C1, RFC_C2, &other), MQD_EFAILED);
    /* unknown user: a made-up salt, then failure */
    assert_int_equal(run_final(RFC_C1, RFC_C2, NULL), MQD_EFAILED);
    /* tampered nonce, channel binding data, proof */
    assert_int_equal(run_final(RFC_C1,
                               "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k1,p="
                               "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
                               &cr),
                     MQD_EINVAL);
    assert_int_equal(run_final(RFC_C1,
                               "c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p="
                               "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
                               &cr),
                     MQD_EINVAL);
    assert_int_equal(run_final(RFC_C1,
                               "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p="
                               "eHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
                               &cr),
                     MQD_EFAILED);
    /* malformed client-first messages */
    static const char *const bad1[] = {"", "n", "p=tls-unique,,n=user,r=abc", "n,,r=abc,n=user",
                                       "n,,m=ext,n=user,r=abc", "n,,n=us=er,r=abc", "n,,n=user",
                                       "n,a=other,n=user,r=abc", "x,,n=user,r=abc"};
    for (size_t i = 0; i < MQD_ARRAY_LEN(bad1); i++) {
        mqd_scram_t s = {0};
        assert_int_equal(mqd_scram_client_first(&s, bad1[i], strlen(bad1[i])), MQD_EINVAL);
    }
    /* escapes and a matching authzid are fine */
    mqd_scram_t s = {0};
    const char *ok = "y,a=a=3Db,n=a=3Db,r=abc";
    assert_int_equal(mqd_scram_client_first(&s, ok, strlen(ok)), 0);
    assert_string_equal(s.user, "a=b");
    /* replaying client-final after the exchange ended */
    char out[MQD_SCRAM_MSG_MAX + 1];
    mqd_scram_t r = {0};
    assert_int_equal(mqd_scram_client_first(&r, RFC_C1, strlen(RFC_C1)), 0);
    assert_int_equal(mqd_scram_server_first(&r, &cr, RFC_SNONCE, out), 0);
    assert_int_equal(mqd_scram_client_final(&r, RFC_C2, strlen(RFC_C2), out), 0);
    assert_int_not_equal(mqd_scram_client_final(&r, RFC_C2, strlen(RFC_C2), out), 0);
}

static void test_acl_match(void **state)
{
    (void)state;
    assert_true(mqd_acl_match("*", "anything/at.all"));
    assert_true(mqd_acl_match("*", ""));
    assert_true(mqd_acl_match("T", "T"));
    assert_false(mqd_acl_match("T", "t"));
    assert_false(mqd_acl_match("T", "T2"));
    assert_true(mqd_acl_match("T/*", "T/Partitions/0"));
    assert_false(mqd_acl_match("T/*", "T"));
    assert_true(mqd_acl_match("orders.*", "orders.eu"));
    assert_false(mqd_acl_match("orders.*", "orders"));
    assert_false(mqd_acl_match("orders.*", "ordersXeu"));
    assert_true(mqd_acl_match("a*b*c", "aXXbYYc"));
    assert_false(mqd_acl_match("a*b*c", "aXXbYY"));
    assert_true(mqd_acl_match("*.log", "x.y.log"));
    assert_true(mqd_acl_in_groups("ops, billing", "billing"));
    assert_true(mqd_acl_in_groups("ops,billing ", "billing"));
    assert_false(mqd_acl_in_groups("ops, billing", "bill"));
    assert_false(mqd_acl_in_groups("", "ops"));
}

static char *write_tmp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/mqd-auth-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static int load_text(const char *text, mqd_conf_t **out, char *err, size_t errlen)
{
    mqd_conf_t *c;
    assert_int_equal(mqd_conf_new(&c), 0);
    char *p = write_tmp(text);
    int rc = mqd_conf_load_file(c, p, err, errlen);
    if (rc == 0)
        rc = mqd_conf_validate(c, err, errlen);
    unlink(p);
    if (rc != 0) {
        mqd_conf_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* What a SAS token covers (issue 32 point 2): its hub under its key's scope; the node
 * as a whole only a namespace-wide token of an unscoped key. */
static void test_sas_covers(void **state)
{
    (void)state;
    assert_true(mqd_sas_covers("hubA", "hubA", "hubA"));
    assert_true(mqd_sas_covers("hubA", "hubA", "hubA/$DeadLetterQueue"));
    assert_false(mqd_sas_covers("hubA", "hubA", "hubB"));
    assert_false(mqd_sas_covers("hubA", "hubA", "hubAB"));
    assert_false(mqd_sas_covers("", "hubA", "hubB"));
    assert_true(mqd_sas_covers("", "*", "hubB"));
    assert_true(mqd_sas_covers("", NULL, "hubB"));
    assert_false(mqd_sas_covers("hubA", "*", "hubB"));
    assert_true(mqd_sas_covers_all("", NULL));
    assert_true(mqd_sas_covers_all("", "*"));
    assert_false(mqd_sas_covers_all("", "hubA"));
    assert_false(mqd_sas_covers_all("hubA", "*"));
    assert_false(mqd_sas_covers_all("*", "*"));
}

static void test_acl_rules(void **state)
{
    (void)state;
    char err[512];
    mqd_conf_t *c;
    const char *text = "[user alice]\npassword_hash = pbkdf2-sha256$1000$c2FsdHNhbHRzYWx0c2FsdA==$"
                       "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\ngroups = ops\n"
                       "[acl]\n"
                       "deny  bob   send        orders.secret\n"
                       "allow bob   send,receive orders.*\n"
                       "allow @ops  all         *\n"
                       "allow *     browse      public\n";
    assert_int_equal(load_text(text, &c, err, sizeof err), 0);
    assert_true(c->acl_present);
    assert_int_equal(c->n_acl, 4);
    const mqd_acl_rule_t *r = c->acl;
    size_t n = c->n_acl;
    assert_false(mqd_acl_check(r, n, true, "bob", NULL, MQD_PERM_SEND, "orders.secret"));
    assert_true(mqd_acl_check(r, n, true, "bob", NULL, MQD_PERM_RECEIVE, "orders.secret"));
    assert_true(mqd_acl_check(r, n, true, "bob", NULL, MQD_PERM_SEND, "orders.eu"));
    assert_false(mqd_acl_check(r, n, true, "bob", NULL, MQD_PERM_BROWSE, "orders.eu"));
    assert_false(mqd_acl_check(r, n, true, "bob", NULL, MQD_PERM_SEND, "other"));
    assert_true(mqd_acl_check(r, n, true, "alice", "ops", MQD_PERM_MANAGE, "anything"));
    assert_true(mqd_acl_check(r, n, true, "carol", NULL, MQD_PERM_BROWSE, "public"));
    assert_true(mqd_acl_check(r, n, true, NULL, NULL, MQD_PERM_BROWSE, "public"));
    assert_false(mqd_acl_check(r, n, true, NULL, NULL, MQD_PERM_RECEIVE, "public"));
    /* no [acl] at all: allowed; an empty [acl]: denied */
    assert_true(mqd_acl_check(NULL, 0, false, "x", NULL, MQD_PERM_SEND, "t"));
    assert_false(mqd_acl_check(NULL, 0, true, "x", NULL, MQD_PERM_SEND, "t"));
    /* "somewhere" (a listing's gate): an allow rule with the right for that user */
    assert_true(mqd_acl_grants_any(r, n, true, "bob", NULL, MQD_PERM_SEND));
    assert_false(mqd_acl_grants_any(r, n, true, "bob", NULL, MQD_PERM_MANAGE));
    assert_true(mqd_acl_grants_any(r, n, true, "alice", "ops", MQD_PERM_MONITOR));
    assert_true(mqd_acl_grants_any(r, n, true, NULL, NULL, MQD_PERM_BROWSE));
    assert_false(mqd_acl_grants_any(r, n, true, NULL, NULL, MQD_PERM_MONITOR));
    assert_true(mqd_acl_grants_any(NULL, 0, false, "x", NULL, MQD_PERM_MANAGE));
    assert_false(mqd_acl_grants_any(NULL, 0, true, "x", NULL, MQD_PERM_MANAGE));
    mqd_conf_free(c);

    static const struct {
        const char *text, *want;
    } bad[] = {
        {"[acl]\npermit bob send x\n", "expected 'allow|deny"},
        {"[acl]\nallow bob send\n", "expected 'allow|deny"},
        {"[acl]\nallow bob send x y\n", "expected 'allow|deny"},
        {"[acl]\nallow bob write x\n", "'write': expected send, receive"},
        {"[acl]\nallow bob send, x\n", "expected send, receive"},
        {"[acl]\n[acl]\n", "duplicate section"},
    };
    for (size_t i = 0; i < MQD_ARRAY_LEN(bad); i++) {
        err[0] = '\0';
        assert_int_equal(load_text(bad[i].text, &c, err, sizeof err), MQD_EINVAL);
        if (strstr(err, bad[i].want) == NULL)
            fail_msg("case %zu: error '%s' lacks '%s'", i, err, bad[i].want);
    }
}

static void test_security_keys(void **state)
{
    (void)state;
    char err[512];
    mqd_conf_t *c;
    assert_int_equal(mqd_conf_new(&c), 0);
    /* built-in defaults */
    assert_true(c->allow_plain_without_tls);
    assert_int_equal(c->tls_min_version, 0);
    assert_int_equal(c->tls_verify_client, MQD_TLS_VERIFY_NONE);
    assert_int_equal(c->handshake_timeout_ms, 10000);
    assert_int_equal(c->tls_handshake_timeout_ms, 5000);
    assert_int_equal(c->max_connections_per_user, 0);
    assert_false(c->acl_present);
    mqd_conf_free(c);

    assert_int_equal(load_text("listen = amqps://127.0.0.1:5671\n", &c, err, sizeof err),
                     MQD_EINVAL);
    assert_non_null(strstr(err, "needs tls_cert and tls_key"));
    assert_int_equal(load_text("listen = amqps://127.0.0.1:5671\ntls_cert = /c\ntls_key = /k\n"
                               "listen = 127.0.0.1:5672\ntls_min_version = 1.3\n"
                               "max_connections_per_ip = 3\nhandshake_timeout_ms = 2s\n",
                               &c, err, sizeof err),
                     0);
    assert_int_equal(c->n_listen, 2);
    assert_true(mqd_conf_listen_is_tls(c->listen[0]));
    assert_false(mqd_conf_listen_is_tls(c->listen[1]));
    assert_int_equal(c->tls_min_version, 1);
    assert_int_equal(c->max_connections_per_ip, 3);
    assert_int_equal(c->handshake_timeout_ms, 2000);
    char host[256];
    uint16_t port;
    assert_int_equal(mqd_conf_parse_hostport(c->listen[0], host, sizeof host, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 5671);
    mqd_conf_free(c);

    assert_int_equal(load_text("tls_verify_client = required\n", &c, err, sizeof err), MQD_EINVAL);
    assert_non_null(strstr(err, "needs tls_ca"));
    assert_int_equal(load_text("tls_verify_client = optional\n", &c, err, sizeof err), MQD_EINVAL);
    assert_non_null(strstr(err, "optional needs tls_ca"));
    assert_int_equal(load_text("tls_verify_client = optional\ntls_ca = /ca\n", &c, err, sizeof err),
                     0);
    assert_int_equal(c->tls_verify_client, MQD_TLS_VERIFY_OPTIONAL);
    mqd_conf_free(c);
    assert_int_equal(load_text("tls_min_version = 1.1\n", &c, err, sizeof err), MQD_EINVAL);
    assert_int_equal(load_text("[user x]\nscram_sha256 = nope\n", &c, err, sizeof err), MQD_EINVAL);
    assert_non_null(strstr(err, "mqd-passwd --scram"));
    /* a certificate-only user is a valid user */
    assert_int_equal(load_text("[user dev1]\ncert_cn = device-1\n", &c, err, sizeof err), 0);
    assert_string_equal(mqd_conf_user(c, "dev1")->cert_cn, "device-1");
    mqd_conf_free(c);
}

/* Unknown users: decoy credentials are stable per name and key, differ between names,
 * look like real ones, and an exchange against them never succeeds. */
static void test_scram_decoy(void **state)
{
    (void)state;
    unsigned char k1[32] = {1}, k2[32] = {2};
    mqd_scram_cred_t a, b, c, d, cr;
    assert_int_equal(mqd_scram_decoy(k1, "mallory", 8192, &a), 0);
    assert_int_equal(mqd_scram_decoy(k1, "mallory", 8192, &b), 0);
    assert_int_equal(mqd_scram_decoy(k1, "trudy", 8192, &c), 0);
    assert_int_equal(mqd_scram_decoy(k2, "mallory", 8192, &d), 0);
    assert_int_equal(a.iterations, 8192);
    assert_int_equal(a.salt_len, 16);
    assert_memory_equal(&a, &b, sizeof a);
    assert_memory_not_equal(a.salt, c.salt, 16);
    assert_memory_not_equal(a.salt, d.salt, 16);
    /* even the user's real keys offered as a decoy do not let the right proof pass */
    rfc_cred(&cr);
    mqd_scram_t s = {0};
    char out[MQD_SCRAM_MSG_MAX + 1];
    assert_int_equal(mqd_scram_client_first(&s, RFC_C1, strlen(RFC_C1)), 0);
    assert_int_equal(mqd_scram_server_first_decoy(&s, &cr, RFC_SNONCE, out), 0);
    assert_string_equal(out, RFC_S1); /* indistinguishable from the real server-first */
    assert_int_equal(mqd_scram_client_final(&s, RFC_C2, strlen(RFC_C2), out), MQD_EFAILED);
    mqd_scram_clear(&s);
}

/* The PLAIN decoy hash has the configured users' iteration count and matches nothing;
 * the server secret is created once (0600, 32 bytes) and read back the same. */
static void test_decoy_setup(void **state)
{
    (void)state;
    char err[512], dir[] = "/tmp/mqd-test-auth-XXXXXX", path[600];
    mqd_conf_t *c;
    mqd_auth_t a;
    memset(&a, 0, sizeof a);
    char hash[160];
    assert_int_equal(mqd_conf_password_hash("pw", 2000, hash, sizeof hash), 0);
    char text[400];
    snprintf(text, sizeof text, "[user alice]\npassword_hash = %s\n", hash);
    assert_int_equal(load_text(text, &c, err, sizeof err), 0);
    assert_int_equal(mqd_auth_decoy_setup(&a, c), 0);
    assert_int_equal(strncmp(a.decoy_hash, "pbkdf2-sha256$2000$", 19), 0);
    assert_int_equal(mqd_conf_check_password_hash(a.decoy_hash, err, sizeof err), 0);
    assert_false(mqd_conf_password_ok(a.decoy_hash, "pw"));
    assert_false(mqd_conf_password_ok(a.decoy_hash, ""));
    assert_int_equal(a.decoy_scram_iterations, MQD_CONF_SCRAM_ITERATIONS); /* no SCRAM user */
    mqd_conf_free(c);

    unsigned char s1[32], s2[32];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(mqd_auth_secret_load(dir, s1), 0);
    assert_int_equal(mqd_auth_secret_load(dir, s2), 0);
    assert_memory_equal(s1, s2, 32);
    snprintf(path, sizeof path, "%s/%s", dir, MQD_AUTH_SECRET_FILE);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 32);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* a torn file is replaced */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("short", f);
    fclose(f);
    assert_int_equal(mqd_auth_secret_load(dir, s2), 0);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 32);
    unlink(path);
    rmdir(dir);
}

/* ---- the login pool (pool.c) with a real libevent loop ---- */

typedef struct tjob {
    mqd_auth_job_t job;
    int v, out;
    bool slow;
} tjob_t;

static int pool_done, pool_ran, pool_wrong;
static int work_order[16], n_work; /* v of each job run (one thread: no race) */

static void tjob_work(mqd_auth_job_t *j)
{
    tjob_t *t = (tjob_t *)j;
    if (t->slow)
        usleep(20000);
    t->out = t->v * 2;
    if (n_work < 16)
        work_order[n_work++] = t->v;
}

static void tjob_done(mqd_auth_job_t *j, bool ran)
{
    tjob_t *t = (tjob_t *)j;
    pool_done++;
    pool_ran += ran;
    pool_wrong += ran && t->out != t->v * 2;
    free(t);
}

static void submit(mqd_auth_pool_t *p, int v, bool slow)
{
    tjob_t *t = calloc(1, sizeof *t);
    assert_non_null(t);
    t->job.key = (uint64_t)(v >= 100) + 1; /* v >= 100: another peer */
    t->job.work = tjob_work;
    t->job.done = tjob_done;
    t->v = v;
    t->slow = slow;
    mqd_auth_pool_submit(p, &t->job);
}

/* Every job's done runs once, on the loop, after its work; freeing the pool with jobs
 * queued or finished hands them back with ran = false (ASan: nothing leaks). */
static void test_pool(void **state)
{
    (void)state;
    evthread_use_pthreads();
    struct event_base *base = event_base_new();
    mqd_auth_pool_t *p;
    assert_non_null(base);
    assert_int_equal(mqd_auth_pool_new(base, 2, &p), 0);
    for (int i = 0; i < 50; i++)
        submit(p, i, false);
    assert_int_equal(mqd_auth_pool_in_flight(p), 50);
    for (int i = 0; i < 5000 && pool_done < 50; i++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        usleep(1000);
    }
    assert_int_equal(pool_done, 50);
    assert_int_equal(pool_ran, 50);
    assert_int_equal(pool_wrong, 0);
    assert_int_equal(mqd_auth_pool_in_flight(p), 0);
    for (int i = 0; i < 6; i++)
        submit(p, i, true);
    mqd_auth_pool_free(p); /* two are running: they finish, then all six come back */
    assert_int_equal(pool_done, 56);
    assert_int_equal(pool_ran, 50);
    event_base_free(base);
}

/* One thread busy with peer 1's job, four more of peer 1 queued, then one of peer 2:
 * peer 2's runs next, not after the four. */
static void test_pool_fair(void **state)
{
    (void)state;
    evthread_use_pthreads();
    struct event_base *base = event_base_new();
    mqd_auth_pool_t *p;
    assert_int_equal(mqd_auth_pool_new(base, 1, &p), 0);
    pool_done = pool_ran = n_work = 0;
    submit(p, 1, true);
    usleep(5000); /* the thread has taken it */
    for (int i = 2; i <= 5; i++)
        submit(p, i, true);
    submit(p, 100, true);
    for (int i = 0; i < 5000 && pool_done < 6; i++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        usleep(1000);
    }
    assert_int_equal(pool_done, 6);
    assert_int_equal(n_work, 6);
    assert_int_equal(work_order[0], 1);
    assert_int_equal(work_order[1], 100);
    for (int i = 2; i < 6; i++)
        assert_int_equal(work_order[i], i); /* peer 1's in their order */
    mqd_auth_pool_free(p);
    event_base_free(base);
}

/* The node naming rule as SASL EXTERNAL reads it (nodecert.c): "mqd-node-" and the id as
 * a node writes it, nothing else; the authzid empty or the CN itself. */
static void test_node_cn(void **state)
{
    (void)state;
    uint32_t id = 7;
    assert_int_equal(mqd_auth_node_cn_id("mqd-node-3", &id), 0);
    assert_int_equal(id, 3);
    assert_int_equal(mqd_auth_node_cn_id("mqd-node-0", &id), 0);
    assert_int_equal(id, 0);
    assert_int_equal(mqd_auth_node_cn_id("mqd-node-4294967295", &id), 0);
    assert_int_equal(id, 4294967295u);
    static const char *const bad[] = {
        "mqd-node-",
        "mqd-node-03",
        "mqd-node-+3",
        "mqd-node- 3",
        "mqd-node-3 ",
        "mqd-node-3x",
        "MQD-NODE-3",
        "mqd-node--3",
        "xmqd-node-3",
        "mqd-node",
        "alice",
        "mqd-node-0x10",
        "",
        "mqd-node-4294967296",
        "mqd-node-99999999999999999999",
    };
    for (size_t i = 0; i < MQD_ARRAY_LEN(bad); i++) {
        id = 7;
        assert_int_equal(mqd_auth_node_cn_id(bad[i], &id), MQD_EINVAL);
        assert_int_equal(id, 7); /* written only on success */
    }
    char why[200] = "";
    assert_int_equal(mqd_auth_node_login("mqd-node-12", NULL, 0, &id, why, sizeof why), 0);
    assert_int_equal(id, 12);
    assert_int_equal(mqd_auth_node_login("mqd-node-12", "mqd-node-12", 11, &id, why, sizeof why),
                     0);
    assert_int_equal(mqd_auth_node_login("mqd-node-12", "mqd-node-1", 10, &id, why, sizeof why),
                     MQD_EINVAL);
    assert_non_null(strstr(why, "authorization identity"));
    assert_int_equal(mqd_auth_node_login("mqd-node-12", "mqd-node-123", 12, &id, why, sizeof why),
                     MQD_EINVAL);
    assert_int_equal(mqd_auth_node_login("peer", NULL, 0, &id, why, sizeof why), MQD_EINVAL);
    assert_non_null(strstr(why, "never a user"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scram_rfc7677),  cmocka_unit_test(test_scram_stored_form),
        cmocka_unit_test(test_scram_failures), cmocka_unit_test(test_acl_match),
        cmocka_unit_test(test_acl_rules),      cmocka_unit_test(test_security_keys),
        cmocka_unit_test(test_scram_decoy),    cmocka_unit_test(test_decoy_setup),
        cmocka_unit_test(test_pool),           cmocka_unit_test(test_pool_fair),
        cmocka_unit_test(test_node_cn),        cmocka_unit_test(test_sas_covers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
