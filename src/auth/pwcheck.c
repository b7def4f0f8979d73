/* Password checks and ACL decisions for logins that are not AMQP connections (the web
 * console, src/console/): the same user store, the same PBKDF2 check on the same login
 * pool as SASL PLAIN (pwjob.c), and the same [acl] rules. */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool mqd_auth_user_may(struct mqd_server *s, const char *user, mqd_perm_t perm, const char *address)
{
    const mqd_conf_t *conf = mqd_srv_conf(s);
    const mqd_user_conf_t *u = NULL;
    bool anonymous = !user || !*user;
    if (!anonymous && (u = mqd_conf_user(conf, user)) == NULL)
        return false; /* removed by a reload since the login */
    return mqd_acl_check(conf->acl, conf->n_acl, conf->acl_present, anonymous ? NULL : user,
                         u ? u->groups : NULL, perm, address);
}

bool mqd_auth_user_may_anywhere(struct mqd_server *s, const char *user, mqd_perm_t perm)
{
    const mqd_conf_t *conf = mqd_srv_conf(s);
    const mqd_user_conf_t *u = NULL;
    bool anonymous = !user || !*user;
    if (!anonymous && (u = mqd_conf_user(conf, user)) == NULL)
        return false;
    return mqd_acl_grants_any(conf->acl, conf->n_acl, conf->acl_present, anonymous ? NULL : user,
                              u ? u->groups : NULL, perm);
}

typedef struct pw_job {
    mqd_auth_pw_t pw; /* first: the shared check (pwjob.c) */
    mqd_auth_pw_done_fn done;
    void *arg;
} pw_job_t;

static void pw_done(mqd_auth_pw_t *pw, int rc)
{
    pw_job_t *p = (pw_job_t *)pw;
    /* a wrong password, an unknown user and a hash changed by a reload look the same */
    p->done(p->arg, rc == MQD_ENOENT ? MQD_EFAILED : rc);
}

int mqd_auth_password_check(struct mqd_server *s, const char *user, const char *password,
                            const char *host, mqd_auth_pw_done_fn done, void *arg)
{
    mqd_auth_t *a = mqd_srv_auth(s);
    if (!a || !a->pool || mqd_auth_pool_in_flight(a->pool) >= mqd_srv_conf(s)->auth_queue_max)
        return MQD_EAGAIN;
    if (strlen(password) >= sizeof((mqd_auth_pw_t *)0)->pw)
        return MQD_EINVAL;
    pw_job_t *p = mqd_auth_pw_new(sizeof *p);
    if (!p)
        return MQD_ENOMEM;
    int rc = mqd_auth_pw_user(&p->pw, s, user);
    if (rc != 0) {
        mqd_auth_pw_free(&p->pw);
        return rc;
    }
    snprintf(p->pw.pw, sizeof p->pw.pw, "%s", password);
    p->done = done;
    p->arg = arg;
    mqd_auth_pw_submit(&p->pw, mqd_auth_pool_key(host, strlen(host)), pw_done);
    return 0;
}

int mqd_auth_scram_start(struct mqd_server *s, const char *msg, size_t len, char *out,
                         mqd_auth_scram_t **st)
{
    const mqd_auth_t *a = mqd_srv_auth(s);
    mqd_scram_t *sc = calloc(1, sizeof *sc);
    int rc = MQD_ENOMEM;
    if (!sc || !a)
        goto err;
    rc = mqd_scram_client_first(sc, msg, len);
    if (rc == 0)
        rc = mqd_auth_scram_reply_first(s, sc, out);
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
    /* a reload between start and finish may have removed the user or changed its
     * credentials */
    if (rc == 0 && !mqd_auth_scram_unchanged(s, st->user, stored))
        rc = MQD_EFAILED;
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
