/* amqp091: the AMQP 0-9-1 front end (RabbitMQ's protocol) on mqd's topics and groups.
 * core/conn.c hands it an accepted plain socket whose first bytes are the 0-9-1
 * protocol header (core's adopt_amqp091 hook); from then on the connection is this
 * subsystem's: its framing, connection and channel state, heartbeats, the mapping of a
 * publish onto a topic's log (confirms at the commit point, as a 1.0 send is settled)
 * and of basic.consume/get onto the topic's `$shared` group. docs/amqp091.md. */
#ifndef MQD_AMQP091_H
#define MQD_AMQP091_H

#include "mqd.h"
#include "core/core.h"

/* Fills the core hooks this subsystem provides (adopt_amqp091, topic_wake). */
void mqd_amqp091_core_ops(mqd_core_ops_t *ops);
/* Shutdown: closes every 0-9-1 connection of s (connection.close 320, then the socket). */
void mqd_amqp091_close_all(mqd_server_t *s);

/* The parser of client bytes, alone (the fuzz target, tests/fuzz/fuzz_amqp091.c): reads
 * p[0..n) as a client's stream after its protocol header: frames (at most frame_max
 * bytes each), methods, content headers and their field tables, as the connection does,
 * and runs queue.bind's topic patterns and headers arguments against the publishes.
 * 0 when everything parsed (a cut frame at the end is fine), else the 0-9-1 reply code
 * the connection would close with (501 frame error, 502 syntax error, 503 command
 * invalid, 505 unexpected frame). */
int mqd_amqp091_parse(const uint8_t *p, size_t n, uint32_t frame_max);

#endif
