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
/* Re-reads the config file; applies what can change at run time. */
int mqd_server_reload(mqd_server_t *s);
/* Closes connections, fsyncs and closes the store and the metadata. */
void mqd_server_free(mqd_server_t *s);

#endif
