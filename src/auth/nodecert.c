/* Node identity between the nodes of a cluster (replication_peer_verify, mutual TLS): a
 * leader accepts a fetch link only from a connection whose client certificate verified in
 * the TLS handshake (the listener's own verification: the store of tls.c's context also
 * holds replication_ca_file), chains to a certificate of replication_ca_file and names
 * the node the attach claims, subject CN "mqd-node-<id>".
 *
 * Why the subject CN: every CA an operator runs can put one in (openssl req -subj,
 * cfssl, Vault's common_name, step-ca), it is what Kafka's default principal is built
 * from, and it is free: followers verify a leader's host by its subjectAltName
 * (SSL_set1_host), so one certificate per node carries the host names in its SAN and the
 * node id in its CN. The registered address would not do: several nodes may share a host
 * (and do, on loopback), and it is whatever the node wrote into etcd. */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core.h"

#include <inttypes.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODE_CN_MAX 32 /* "mqd-node-4294967295" */

typedef STACK_OF(X509) cert_list_t;

bool mqd_auth_repl_peer_on(const mqd_conf_t *c)
{
    return c->cluster == MQD_CONF_CLUSTER_ETCD && c->replication_tls &&
           c->replication_peer_verify && c->replication_ca_file != NULL;
}

static void node_cn(uint32_t id, char *buf, size_t len)
{
    snprintf(buf, len, "mqd-node-%" PRIu32, id);
}

/* Every certificate of the PEM file at path (MQD_EINVAL if it holds none or does not
 * read). */
static int certs_load(const char *path, cert_list_t **out)
{
    cert_list_t *sk = sk_X509_new_null();
    BIO *b = BIO_new_file(path, "r");
    X509 *x;
    while (sk && b && (x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL)
        if (sk_X509_push(sk, x) == 0) {
            X509_free(x);
            break;
        }
    BIO_free(b);
    ERR_clear_error(); /* the end of the file reads as an error */
    if (sk == NULL || sk_X509_num(sk) == 0) {
        sk_X509_pop_free(sk, X509_free);
        return MQD_EINVAL;
    }
    *out = sk;
    return 0;
}

void mqd_auth_cas_free(mqd_auth_cas_t *cas)
{
    sk_X509_pop_free(cas->repl, X509_free);
    sk_X509_pop_free(cas->client, X509_free);
    cas->repl = cas->client = NULL;
}

/* The names of path's CAs go into the CertificateRequest next to tls_ca's. */
static int add_ca_names(SSL_CTX *x, const char *path)
{
    STACK_OF(X509_NAME) *names = SSL_CTX_get_client_CA_list(x);
    if (names != NULL && sk_X509_NAME_num(names) > 0)
        return SSL_add_file_cert_subjects_to_stack(names, path) == 1 ? 0 : MQD_EINVAL;
    names = SSL_load_client_CA_file(path);
    if (names == NULL)
        return MQD_EINVAL;
    SSL_CTX_set_client_CA_list(x, names); /* takes names */
    return 0;
}

int mqd_auth_cas_setup(SSL_CTX *x, const mqd_conf_t *conf, const mqd_conf_t *repl,
                       mqd_auth_cas_t *out)
{
    mqd_auth_cas_t cas = {0};
    *out = cas;
    if (!mqd_auth_repl_peer_on(repl))
        return 0;
    const char *file = repl->replication_ca_file;
    if (SSL_CTX_load_verify_locations(x, file, NULL) != 1 || add_ca_names(x, file) != 0 ||
        certs_load(file, &cas.repl) != 0 ||
        (conf->tls_ca && certs_load(conf->tls_ca, &cas.client) != 0)) {
        mqd_auth_cas_free(&cas);
        return MQD_EINVAL;
    }
    *out = cas;
    return 0;
}

/* Is a certificate of cas in the chain the handshake verified (the leaf included: a
 * pinned self-signed node certificate)? A resumed session has no verified chain: no. */
static bool chain_has(SSL *ssl, const cert_list_t *cas)
{
    cert_list_t *chain = SSL_get0_verified_chain(ssl);
    for (int i = 0; chain && cas && i < sk_X509_num(chain); i++)
        for (int j = 0; j < sk_X509_num(cas); j++)
            if (X509_cmp(sk_X509_value(chain, i), sk_X509_value(cas, j)) == 0)
                return true;
    return false;
}

bool mqd_auth_tls_peer_is_client(const mqd_conn_t *c)
{
    if (!mqd_auth_tls_peer_verified(c))
        return false;
    const mqd_auth_t *a = mqd_srv_auth(mqd_conn_srv(c));
    /* with node certificates in the store, only tls_ca's make a client's identity */
    return a == NULL || a->cas.repl == NULL || chain_has(mqd_conn_ssl(c), a->cas.client);
}

bool mqd_auth_tls_peer_is_node(const mqd_conn_t *c)
{
    const mqd_auth_t *a = mqd_srv_auth(mqd_conn_srv(c));
    return a != NULL && a->cas.repl != NULL && mqd_auth_tls_peer_verified(c) &&
           chain_has(mqd_conn_ssl(c), a->cas.repl);
}

int mqd_auth_node_cn_id(const char *cn, uint32_t *id)
{
    static const char prefix[] = "mqd-node-";
    char *end, again[NODE_CN_MAX];
    if (strncmp(cn, prefix, sizeof prefix - 1) != 0)
        return MQD_EINVAL;
    const char *num = cn + sizeof prefix - 1;
    if (*num < '0' || *num > '9')
        return MQD_EINVAL;
    unsigned long long v = strtoull(num, &end, 10);
    if (*end != '\0' || v > UINT32_MAX)
        return MQD_EINVAL;
    node_cn((uint32_t)v, again, sizeof again);
    if (strcmp(again, cn) != 0) /* "mqd-node-03": not how any node names itself */
        return MQD_EINVAL;
    *id = (uint32_t)v;
    return 0;
}

int mqd_auth_node_login(const char *cn, const char *authzid, size_t len, uint32_t *id, char *why,
                        size_t whylen)
{
    uint32_t n;
    if (mqd_auth_node_cn_id(cn, &n) != 0) {
        snprintf(why, whylen,
                 "a certificate of replication_ca_file names a node (CN mqd-node-<id>), never "
                 "a user");
        return MQD_EINVAL;
    }
    /* Proton's EXTERNAL client sends the connection's authorization or nothing */
    if (len > 0 && (len != strlen(cn) || memcmp(authzid, cn, len) != 0)) {
        snprintf(why, whylen, "authorization identity differs from the certificate's node %s", cn);
        return MQD_EINVAL;
    }
    *id = n;
    return 0;
}

bool mqd_auth_conn_is_node(const mqd_conn_t *c)
{
    const mqd_auth_conn_t *ac = mqd_conn_auth(c);
    return ac != NULL && ac->node;
}

const char *mqd_auth_node_attach_denied(const mqd_conn_t *c, bool sender, const char *source)
{
    if (!mqd_auth_conn_is_node(c))
        return NULL;
    if (sender && source != NULL && strncmp(source, "$repl/", 6) == 0)
        return NULL;
    return "a node connection (SASL EXTERNAL with a node certificate) carries $repl/ fetch "
           "links only";
}

int mqd_auth_repl_peer_check(mqd_conn_t *c, uint32_t node_id, char *why, size_t len)
{
    mqd_server_t *s = mqd_conn_srv(c);
    const mqd_auth_t *a = mqd_srv_auth(s);
    char want[NODE_CN_MAX], cn[256];
    if (!mqd_auth_repl_peer_on(mqd_srv_conf(s)))
        return 0;
    node_cn(node_id, want, sizeof want);
    if (!mqd_auth_tls_peer_verified(c)) {
        snprintf(why, len, "replication_peer_verify: no verified client certificate (%s needed)",
                 want);
        return MQD_ENOENT;
    }
    if (a == NULL || !chain_has(mqd_conn_ssl(c), a->cas.repl)) {
        snprintf(why, len,
                 "replication_peer_verify: the client certificate does not chain to "
                 "replication_ca_file");
        return MQD_EINVAL;
    }
    int rc = mqd_auth_tls_peer_cn(c, cn, sizeof cn);
    if (rc != 0) {
        snprintf(why, len,
                 "replication_peer_verify: the client certificate has no usable subject CN "
                 "(%s needed)",
                 want);
        return MQD_EINVAL;
    }
    if (strcmp(cn, want) != 0) {
        snprintf(why, len,
                 "replication_peer_verify: the client certificate names CN=%.64s, not %s (the "
                 "attach's mqd:node-id %" PRIu32 ")",
                 cn, want, node_id);
        return MQD_EINVAL;
    }
    return 0;
}

/* Does the certificate of conf's key `key` name this node? A node that checks names
 * itself (replication_peer_verify) must carry its own, or its peers would refuse it on
 * every connection: MQD_EINVAL; a node without the check only warns (its peers may have
 * it on: a rolling change). */
static int names_node(const mqd_conf_t *conf, const char *key, const char *path, const X509 *cert,
                      const char *refused_by)
{
    char want[NODE_CN_MAX], cn[256];
    node_cn(conf->node_id, want, sizeof want);
    if (mqd_auth_cert_cn(cert, cn, sizeof cn) != 0)
        snprintf(cn, sizeof cn, "(none)");
    if (strcmp(cn, want) == 0)
        return 0;
    char why[512];
    snprintf(why, sizeof why, "%s: %s names CN=%.64s, not %s (node_id %" PRIu32 "): %s", key, path,
             cn, want, conf->node_id, refused_by);
    if (conf->replication_peer_verify) {
        MQD_ERR("auth", "%s", why);
        return MQD_EINVAL;
    }
    MQD_WARN("auth", "%s", why);
    return 0;
}

int mqd_auth_repl_server_cert_check(const mqd_conf_t *repl, SSL_CTX *x, const char *path)
{
    if (repl->cluster != MQD_CONF_CLUSTER_ETCD || !repl->replication_tls || x == NULL)
        return 0;
    return names_node(repl, "tls_cert", path, SSL_CTX_get0_certificate(x),
                      "followers with replication_peer_verify = on refuse to fetch from this "
                      "node when it leads");
}

/* The certificate this node fetches with must load, and with the server certificate
 * name this node. */
int mqd_auth_repl_cert_check(const mqd_conf_t *conf, SSL_CTX *server)
{
    if (conf->cluster != MQD_CONF_CLUSTER_ETCD || !conf->replication_tls)
        return 0;
    const char *key = conf->replication_cert ? "replication_cert" : "tls_cert";
    const char *cert = conf->replication_cert ? conf->replication_cert : conf->tls_cert;
    const char *pkey = conf->replication_cert ? conf->replication_key : conf->tls_key;
    if (cert == NULL)
        return 0; /* no amqps:// listener: conf refused that already */
    char why[256];
    int rc = MQD_EINVAL;
    ERR_clear_error();
    SSL_CTX *x = SSL_CTX_new(TLS_client_method());
    if (x == NULL || SSL_CTX_use_certificate_chain_file(x, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(x, pkey ? pkey : cert, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(x) != 1) {
        ERR_error_string_n(ERR_peek_last_error(), why, sizeof why);
        MQD_ERR("auth",
                "%s: the fetch connections' client certificate %s (key %s) does not "
                "load: %s",
                key, cert, pkey ? pkey : cert, why);
        goto out;
    }
    rc = names_node(conf, key, cert, SSL_CTX_get0_certificate(x),
                    conf->replication_cert
                        ? "leaders with replication_peer_verify = on refuse this node's fetch "
                          "links"
                        : "leaders with replication_peer_verify = on refuse this node's fetch "
                          "links, and followers with it refuse to fetch from it");
    if (rc == 0 && conf->replication_cert != NULL)
        rc = mqd_auth_repl_server_cert_check(conf, server, conf->tls_cert);
out:
    SSL_CTX_free(x);
    ERR_clear_error();
    return rc;
}
