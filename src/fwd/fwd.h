/* fwd: one broker from any node (issue 33). A client connected to any node of a cluster
 * gets every link served: producers' messages are forwarded per message to their
 * partition's leader over pooled node-to-node connections (send.c), receivers are proxied
 * (recv.c). The broker reaches fwd only through mqd_fwd_hooks_t (core/core.h), which
 * mqd_fwd_new registers; a single node registers none. */
#ifndef MQD_FWD_H
#define MQD_FWD_H

#include "mqd.h"
#include "repl/repl.h"
#include "server/server.h"

typedef struct mqd_fwd mqd_fwd_t;

/* Creates forwarding for server s of a cluster whose replication layer is r (both outlive
 * it) and registers its hooks on s. */
int mqd_fwd_new(mqd_server_t *s, const mqd_conf_t *conf, mqd_repl_t *r, mqd_fwd_t **out);
/* Unregisters the hooks and closes the node connections (after the loop stopped too). */
void mqd_fwd_free(mqd_fwd_t *f);

#endif
