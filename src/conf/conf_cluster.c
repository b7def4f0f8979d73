/* conf: the cluster keys' checks (issue 19: cluster = etcd). Kept apart from conf.c so the
 * cluster rows of the table and their rules read in one place. */
#include "config.h"
#include "conf/conf_int.h"

#include <stdio.h>
#include <string.h>

int mqd_conf_etcd_endpoint_next(const char **s, char *host, size_t hostlen, uint16_t *port)
{
    const char *p = *s;
    while (*p == ' ' || *p == ',')
        p++;
    if (*p == '\0')
        return MQD_ENOENT;
    size_t n = strcspn(p, ",");
    char item[300];
    if (n >= sizeof item || strncmp(p, "http://", 7) != 0)
        return MQD_EINVAL;
    size_t len = n - 7;
    memcpy(item, p + 7, len);
    while (len > 0 && item[len - 1] == ' ')
        len--;
    if (len > 0 && item[len - 1] == '/') /* http://h:p/ is how etcd prints its own URLs */
        len--;
    item[len] = '\0';
    if (strchr(item, '/') != NULL || mqd_conf_parse_hostport(item, host, hostlen, port) != 0 ||
        *port == 0)
        return MQD_EINVAL;
    *s = p + n;
    return 0;
}

int mqd_conf_check_etcd_endpoints(const char *v, char *why, size_t whylen)
{
    char host[256];
    uint16_t port;
    const char *s = v;
    int rc, n = 0;
    while ((rc = mqd_conf_etcd_endpoint_next(&s, host, sizeof host, &port)) == 0)
        n++;
    if (rc == MQD_ENOENT && (n > 0 || v[0] == '\0'))
        return 0;
    snprintf(why, whylen,
             "expected http://HOST:PORT[,http://HOST:PORT...] (plain HTTP: etcd's "
             "v3 JSON gateway)");
    return MQD_EINVAL;
}

/* The name is the first element of every etcd key: no '/' and nothing that needs quoting. */
int mqd_conf_check_cluster_name(const char *v, char *why, size_t whylen)
{
    size_t n = strlen(v);
    if (n > 0 && n <= 64 &&
        strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                  "0123456789_.-") == n)
        return 0;
    snprintf(why, whylen, "1 to 64 characters of A-Z a-z 0-9 _ . -");
    return MQD_EINVAL;
}

static int fail_at(char *err, size_t errlen, const mqd_conf_t *c, const char *src, const char *key,
                   const char *why)
{
    if (c->cluster_line > 0)
        snprintf(err, errlen, "%s:%d: %s: %s", src, c->cluster_line, key, why);
    else
        snprintf(err, errlen, "%s: %s: %s", src, key, why);
    return MQD_EINVAL;
}

/* The leader refuses fetch links without TLS: a node with replication_tls must have a
 * TLS listener for its followers to reach. */
static int validate_repl_tls(const mqd_conf_t *c, const char *src, char *err, size_t errlen)
{
    if (!c->replication_tls)
        return 0;
    for (size_t i = 0; i < c->n_listen; i++)
        if (mqd_conf_listen_is_tls(c->listen[i]))
            return 0;
    return fail_at(err, errlen, c, src, "replication_tls",
                   "on, but no amqps:// listener to advertise as replication_address (add "
                   "listen = amqps://HOST:PORT with tls_cert and tls_key)");
}

/* Mutual TLS between nodes: the leader checks the follower's certificate against
 * replication_ca_file (never the system store: any public CA would do), and a follower
 * presents replication_cert or, without it, tls_cert. */
static int validate_repl_peer(const mqd_conf_t *c, const char *src, char *err, size_t errlen)
{
    if ((c->replication_cert == NULL) != (c->replication_key == NULL))
        return fail_at(err, errlen, c, src,
                       c->replication_cert ? "replication_key" : "replication_cert",
                       "replication_cert and replication_key go together (unset both to "
                       "present tls_cert and tls_key)");
    if (!c->replication_peer_verify)
        return 0;
    if (!c->replication_tls)
        return fail_at(err, errlen, c, src, "replication_peer_verify",
                       "on needs replication_tls = on (client certificates are a TLS matter)");
    if (c->replication_ca_file == NULL)
        return fail_at(err, errlen, c, src, "replication_peer_verify",
                       "on needs replication_ca_file: the CA that signs the nodes' "
                       "certificates (the system trust store never vouches for a node id)");
    return 0;
}

int mqd_conf_validate_cluster(const mqd_conf_t *c, const char *src, char *err, size_t errlen)
{
    if (c->cluster != MQD_CONF_CLUSTER_ETCD)
        return c->connection_redirect == MQD_CONN_REDIRECT_OFF
                   ? 0
                   : fail_at(err, errlen, c, src, "connection_redirect",
                             "idle and always need cluster = etcd (a single node has no "
                             "other node to send clients to)");
    if (c->node_id == 0)
        return fail_at(err, errlen, c, src, "node_id",
                       "missing: cluster = etcd needs a positive integer node_id, unique in "
                       "the cluster");
    if (c->etcd_endpoints == NULL)
        return fail_at(err, errlen, c, src, "etcd_endpoints",
                       "missing: cluster = etcd needs at least one http://HOST:PORT");
    if (c->advertised_address == NULL && c->n_listen == 0)
        return fail_at(err, errlen, c, src, "advertised_address",
                       "missing and no listener to take it from");
    int rc = validate_repl_tls(c, src, err, errlen);
    return rc ? rc : validate_repl_peer(c, src, err, errlen);
}
