/* server: the broker process's event loop, listeners and connections. */
#ifndef MQD_SERVER_H
#define MQD_SERVER_H

#include "mqd.h"
#include "conf/conf.h"

typedef struct mqd_server mqd_server_t;

/* Opens the data directory (meta.db, topics/), recovers every partition, binds the
 * listeners. `conf` stays owned by the caller and must outlive the server. */
int mqd_server_new(mqd_conf_t *conf, const char *conf_path, mqd_server_t **out);
/* Runs the event loop until mqd_server_stop (or SIGTERM/SIGINT). */
int mqd_server_run(mqd_server_t *s);
/* Stops accepting, flushes in-flight appends, leaves the loop. */
void mqd_server_stop(mqd_server_t *s);
/* Runs a connection over `fd`, a connected stream socket (the server owns it from now
 * on, closed on failure too), as if accepted on listener `listener` (its index in
 * conf->listen; one past them is a plain listener). `peer` names it in logs. The
 * listeners' accept path, and a seam for tests and fuzz_conn (a socketpair). */
int mqd_server_adopt(mqd_server_t *s, int fd, const char *peer, size_t listener);
/* Re-reads the config file; applies what can change at run time. */
int mqd_server_reload(mqd_server_t *s);
/* Closes connections, fsyncs and closes the store and the metadata. */
void mqd_server_free(mqd_server_t *s);

#endif
