/* Password checks and ACL decisions for logins that are not AMQP connections (the web
 * console, src/console/): the same user store, the same PBKDF2 verification on the same
 * login pool as SASL PLAIN (sasl.c), and the same [acl] rules. */
#include "config.h"
#include "auth/auth_int.h"
#include "server/broker.h"

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
