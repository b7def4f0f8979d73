/* The user's side of a server SCRAM-SHA-256 exchange, for SASL (sasl.c) and for the web
 * console (pwcheck.c): server-first from the user's stored credentials or, for a name
 * without them, from the decoy's (decoy.c), so that both look and cost the same; and at
 * the end, whether a reload changed the credentials the exchange was checked against. */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core.h"

#include <openssl/crypto.h>

int mqd_auth_scram_reply_first(struct mqd_server *s, mqd_scram_t *sc, char *out)
{
    const mqd_auth_t *a = mqd_srv_auth(s);
    const mqd_user_conf_t *u = mqd_conf_user(mqd_srv_conf(s), sc->user);
    mqd_scram_cred_t cred;
    bool known = u && u->scram_sha256 && mqd_conf_scram_parse(u->scram_sha256, &cred) == 0;
    int rc = known ? mqd_scram_server_first(sc, &cred, NULL, out)
                   : mqd_scram_decoy(a->secret, sc->user, a->decoy_scram_iterations, &cred);
    if (!known && rc == 0)
        rc = mqd_scram_server_first_decoy(sc, &cred, NULL, out);
    OPENSSL_cleanse(&cred, sizeof cred);
    return rc;
}

bool mqd_auth_scram_unchanged(struct mqd_server *s, const char *user,
                              const unsigned char stored_key[32])
{
    const mqd_user_conf_t *u = mqd_conf_user(mqd_srv_conf(s), user);
    mqd_scram_cred_t now;
    bool same = u && u->scram_sha256 && mqd_conf_scram_parse(u->scram_sha256, &now) == 0 &&
                CRYPTO_memcmp(now.stored_key, stored_key, 32) == 0;
    OPENSSL_cleanse(&now, sizeof now);
    return same;
}
