/* The one PBKDF2 password check on the login pool (pool.c), for SASL PLAIN (sasl.c) and
 * for logins that are not AMQP connections (pwcheck.c: the web console), so that both
 * cost the same, treat an unknown name the same (the decoy hash) and notice a reload
 * that changed the hash while the check ran. */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *mqd_auth_pw_new(size_t size)
{
    mqd_auth_pw_t *p = size >= sizeof *p ? calloc(1, size) : NULL;
    if (p)
        p->size = size;
    return p;
}

int mqd_auth_pw_user(mqd_auth_pw_t *p, struct mqd_server *s, const char *user)
{
    if (strlen(user) >= sizeof p->user)
        return MQD_EINVAL;
    const mqd_auth_t *a = mqd_srv_auth(s);
    const mqd_user_conf_t *u = mqd_conf_user(mqd_srv_conf(s), user);
    p->s = s;
    p->known = u && u->password_hash && strlen(u->password_hash) < sizeof p->hash;
    snprintf(p->hash, sizeof p->hash, "%s", p->known ? u->password_hash : a->decoy_hash);
    snprintf(p->user, sizeof p->user, "%s", user);
    return 0;
}

static void pw_work(mqd_auth_job_t *j)
{
    mqd_auth_pw_t *p = (mqd_auth_pw_t *)j;
    /* known or not, the same PBKDF2: the answer takes as long either way */
    p->ok = mqd_conf_password_ok(p->hash, p->pw) && p->known;
    OPENSSL_cleanse(p->pw, sizeof p->pw);
}

static void pw_done(mqd_auth_job_t *j, bool ran)
{
    mqd_auth_pw_t *p = (mqd_auth_pw_t *)j;
    int rc = MQD_ESTATE;
    if (ran) {
        /* a reload while the check ran may have removed the user or changed the hash */
        const mqd_user_conf_t *u = mqd_conf_user(mqd_srv_conf(p->s), p->user);
        bool same = u && u->password_hash && strcmp(u->password_hash, p->hash) == 0;
        rc = !p->ok ? MQD_EFAILED : !same ? MQD_ENOENT : 0;
    }
    p->done(p, rc);
    mqd_auth_pw_free(p);
}

void mqd_auth_pw_submit(mqd_auth_pw_t *p, uint64_t key, mqd_auth_pw_fn done)
{
    p->done = done;
    p->job.work = pw_work;
    p->job.done = pw_done;
    p->job.key = key;
    mqd_auth_t *a = mqd_srv_auth(p->s);
    mqd_auth_pool_submit(a->pool, &p->job);
}

void mqd_auth_pw_free(mqd_auth_pw_t *p)
{
    if (!p)
        return;
    size_t size = p->size;
    OPENSSL_cleanse(p, size);
    free(p);
}

uint64_t mqd_auth_pool_key(const char *host, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)host[i]) * 1099511628211ull;
    return h;
}
