/* A server without sockets for cmocka tests that drive topics and partitions directly:
 * included after cmocka.h by tests that link the whole broker (MQD_ALL_LIBS). */
#ifndef MQD_TEST_SERVER_FIXTURE_H
#define MQD_TEST_SERVER_FIXTURE_H

#include "server/server_int.h"
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>

/* A server on data_dir `dir` with the NULL-terminated "key=value" settings `kvs`. */
static inline mqd_server_t *fx_server_open(const char *dir, const char *const *kvs)
{
    mqd_conf_t *c;
    char err[256], kv[256];
    assert_int_equal(mqd_conf_new(&c), 0);
    snprintf(kv, sizeof kv, "data_dir=%s", dir);
    assert_int_equal(mqd_conf_set(c, kv, err, sizeof err), 0);
    for (; kvs && *kvs; kvs++)
        assert_int_equal(mqd_conf_set(c, *kvs, err, sizeof err), 0);
    for (size_t i = 0; i < c->n_listen; i++)
        free(c->listen[i]);
    c->n_listen = 0; /* no sockets: the test drives the objects directly */
    mqd_server_t *s = NULL;
    assert_int_equal(mqd_server_new(c, NULL, &s), 0);
    return s;
}

/* Frees the server and the config it was opened with. */
static inline void fx_server_close(mqd_server_t *s)
{
    mqd_conf_t *c = mqd_srv_conf(s);
    mqd_server_free(s);
    mqd_conf_free(c);
}

/* Removes a test's temporary directory tree. */
static inline void fx_rmtree(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

#endif
