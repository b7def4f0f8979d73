/* Password checks and ACL decisions for logins that are not AMQP connections (the web
 * console, src/console/): the same user store, the same PBKDF2 verification on the same
 * login pool as SASL PLAIN (sasl.c), and the same [acl] rules. */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool mqd_auth_user_may(struct mqd_server *s, const char *user, mqd_perm_t perm, const char *address)
{
    const mqd_conf_t *conf = s->conf;
    const mqd_user_conf_t *u = NULL;
    bool anonymous = !user || !*user;
    if (!anonymous && (u = mqd_conf_user(conf, user)) == NULL)
        return false; /* removed by a reload since the login */
    return mqd_acl_check(conf->acl, conf->n_acl, conf->acl_present, anonymous ? NULL : user,
                         u ? u->groups : NULL, perm, address);
}

typedef struct pw_job {
    mqd_auth_job_t job; /* first: the pool's view */
    mqd_server_t *s;
    mqd_auth_pw_done_fn done;
    void *arg;
    bool known; /* the user exists with a password hash (else hash is the decoy) */
    bool ok;    /* set by the pool thread */
    char user[256];
    char hash[MQD_AUTH_DECOY_HASH_MAX + 64];
    char pw[1025];
} pw_job_t;

static void pw_work(mqd_auth_job_t *j)
{
    pw_job_t *p = (pw_job_t *)j;
    /* known or not, the same PBKDF2: the answer takes as long either way */
    p->ok = mqd_conf_password_ok(p->hash, p->pw) && p->known;
    OPENSSL_cleanse(p->pw, sizeof p->pw);
}

static void pw_done(mqd_auth_job_t *j, bool ran)
{
    pw_job_t *p = (pw_job_t *)j;
    int rc = MQD_ESTATE;
    if (ran) {
        /* a reload while the check ran may have removed the user or changed the hash */
        const mqd_user_conf_t *u = mqd_conf_user(p->s->conf, p->user);
        bool same = u && u->password_hash && strcmp(u->password_hash, p->hash) == 0;
        rc = p->ok && same ? 0 : MQD_EFAILED;
    }
    p->done(p->arg, rc);
    OPENSSL_cleanse(p, sizeof *p);
    free(p);
}

int mqd_auth_password_check(struct mqd_server *s, const char *user, const char *password,
                            uint64_t key, mqd_auth_pw_done_fn done, void *arg)
{
    mqd_auth_t *a = s->auth;
    if (!a || !a->pool || mqd_auth_pool_in_flight(a->pool) >= s->conf->auth_queue_max)
        return MQD_EAGAIN;
    if (strlen(user) >= sizeof((pw_job_t *)0)->user ||
        strlen(password) >= sizeof((pw_job_t *)0)->pw)
        return MQD_EINVAL;
    pw_job_t *p = calloc(1, sizeof *p);
    if (!p)
        return MQD_ENOMEM;
    const mqd_user_conf_t *u = mqd_conf_user(s->conf, user);
    p->known = u && u->password_hash && strlen(u->password_hash) < sizeof p->hash;
    snprintf(p->hash, sizeof p->hash, "%s", p->known ? u->password_hash : a->decoy_hash);
    snprintf(p->user, sizeof p->user, "%s", user);
    snprintf(p->pw, sizeof p->pw, "%s", password);
    p->s = s;
    p->done = done;
    p->arg = arg;
    p->job.work = pw_work;
    p->job.done = pw_done;
    p->job.key = key;
    mqd_auth_pool_submit(a->pool, &p->job);
    return 0;
}

int mqd_auth_scram_start(struct mqd_server *s, const char *msg, size_t len, char *out,
                         mqd_auth_scram_t **st)
{
    const mqd_auth_t *a = s->auth;
    mqd_scram_t *sc = calloc(1, sizeof *sc);
    int rc = MQD_ENOMEM;
    if (!sc || !a)
        goto err;
    rc = mqd_scram_client_first(sc, msg, len);
    if (rc != 0)
        goto err;
    const mqd_user_conf_t *u = mqd_conf_user(s->conf, sc->user);
    mqd_scram_cred_t cred;
    bool known = u && u->scram_sha256 && mqd_conf_scram_parse(u->scram_sha256, &cred) == 0;
    rc = known ? mqd_scram_server_first(sc, &cred, NULL, out)
               : mqd_scram_decoy(a->secret, sc->user, a->decoy_scram_iterations, &cred);
    if (!known && rc == 0)
        rc = mqd_scram_server_first_decoy(sc, &cred, NULL, out);
    OPENSSL_cleanse(&cred, sizeof cred);
    if (rc != 0)
        goto err;
    *st = sc;
    return 0;
err:
    mqd_auth_scram_free(sc);
    return rc;
}

int mqd_auth_scram_finish(struct mqd_server *s, mqd_auth_scram_t *st, const char *msg, size_t len,
                          char *out, char *user, size_t userlen)
{
    unsigned char stored[32];
    int rc = mqd_scram_client_final(st, msg, len, out);
    memcpy(stored, st->cred.stored_key, sizeof stored);
    if (rc == 0) {
        /* a reload between start and finish may have removed the user or changed its
         * credentials */
        const mqd_user_conf_t *u = mqd_conf_user(s->conf, st->user);
        mqd_scram_cred_t now;
        bool same = u && u->scram_sha256 && mqd_conf_scram_parse(u->scram_sha256, &now) == 0 &&
                    CRYPTO_memcmp(now.stored_key, stored, sizeof stored) == 0;
        OPENSSL_cleanse(&now, sizeof now);
        rc = same ? 0 : MQD_EFAILED;
    }
    if (rc == 0)
        snprintf(user, userlen, "%s", st->user);
    OPENSSL_cleanse(stored, sizeof stored);
    return rc;
}

void mqd_auth_scram_free(mqd_auth_scram_t *st)
{
    if (!st)
        return;
    mqd_scram_clear(st);
    free(st);
}
