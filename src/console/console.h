/* console: the web console (/ui/) and its JSON API (/api/), served with libevent's evhttp
 * on the broker's own event loop when console_listen is set (docs/console.md). Logins use
 * the broker's users and password hashes (auth/), rights come from the [acl] (`monitor`
 * to look, `manage` to change), and every answer comes from the `$management` handlers
 * (mgmt/, mqd_mgmt_call), so the API's fields are mqctl --json's. */
#ifndef MQD_CONSOLE_H
#define MQD_CONSOLE_H

#include "mqd.h"

struct mqd_server;

/* Starts the console when conf->console_listen is set (0 and nothing listens when it is
 * not). MQD_EINVAL for a bad HOST:PORT, MQD_EIO when it cannot bind. */
int mqd_console_start(struct mqd_server *s);
/* Stops it and frees its sessions (s->console); safe when it never started. Logins whose
 * password check is still on the pool are answered by nobody (their connections close). */
void mqd_console_stop(struct mqd_server *s);

#endif
