/* mgmt: the `$management` node (AMQP Management draft + Event Hubs READ operations).
 * The broker hands it each request message sent to `$management`; it returns the reply,
 * which the broker routes to the request's reply-to address. */
#ifndef MQD_MGMT_H
#define MQD_MGMT_H

#include "mqd.h"
#include "codec/codec.h"

#include <jansson.h>

struct mqd_server;
struct mqd_conn;

/* Handles one encoded request `req[0..len)` from connection `c`, authorized against the
 * entity it names with c's rights (mgmt_access.c: the [acl] and c's SAS tokens; a
 * refusal is status 401). Writes the complete encoded
 * reply message into `out` (properties: to = request reply-to, correlation-id = request
 * message-id or its correlation-id; application-properties: statusCode and status-code,
 * statusDescription and status-description). Returns 0 when `out` holds a reply to send
 * (out->len 0: the reply comes later), or a negative MQD_E* when the request cannot be
 * answered at all (no reply-to). `reply_node` (borrowed, copied for a later reply) is the
 * temporary node the caller puts the reply into (amqp/reply.c): a reply that comes later
 * goes there, if it still exists. */
int mqd_mgmt_handle(struct mqd_server *s, struct mqd_conn *c, const uint8_t *req, size_t len,
                    const char *reply_node, mqd_buf_t *out);

/* The same for a request to a Service Bus entity's own management node
 * `<entity>/$management` (mgmt_sbus.c; docs/servicebus.md): `entity` is the topic. */
int mqd_mgmt_entity_handle(struct mqd_server *s, struct mqd_conn *c, const char *entity,
                           const uint8_t *req, size_t len, const char *reply_node,
                           mqd_buf_t *out);

/* Runs one operation for a caller that is not an AMQP connection (the web console,
 * src/console/): the same handlers as mqd_mgmt_handle, authorized the same way with the
 * [acl] rules of the configured user `actor` (NULL or "" = anonymous), whose reply body is converted with mqd_mgmt_data_to_json, as mqctl
 * --json does. `args` (borrowed; a JSON object) are the request's application
 * properties (`name`, `to`, `partition`, ...), but for `$body`, an object that becomes the
 * request's body (an UPDATE's settings; taken out of args); `actor` also names the caller
 * in the log.
 * *reply gets the reply body (new reference; NULL when the reply has none) and desc its
 * status description. Returns the status code (200, 204, 404, ...); 501 for operations
 * that answer later (topic CREATE) or do not exist. */
int mqd_mgmt_call(struct mqd_server *s, const char *actor, const char *type, const char *op,
                  json_t *args, json_t **reply, char *desc, size_t desclen);

#endif
