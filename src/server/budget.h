/* budget: what a connection may hold in memory (issue 16, point 3), and the whole
 * broker's share of it.
 *
 * A connection is charged for its sessions and links (a fixed cost per Proton object,
 * from when Proton creates it until it is final), the bytes of deliveries still
 * arriving in several transfers (the link buffers that collect them) and the bytes
 * Proton has ready to write that the socket has not taken. Past max_connection_memory
 * the connection is closed with amqp:resource-limit-exceeded: its input is no longer
 * read, its close frame gets BUDGET_LINGER_MS to leave, then the socket is closed. While
 * the sum over all connections is above max_memory, new connections and new links are
 * refused, and a connection whose partial deliveries or output grow is closed.
 *
 * Sessions are also bounded by the channels Proton can give them: a session holds a
 * local channel from its begin until its end is written, and Proton stops producing
 * output for good once it cannot map one (only 64 begins were answered, the rest piled
 * up: 1 GB for 300,000 begin+end pipelined on channel 0). mqd_budget_event has the
 * ended sessions' ends written before a new session would need a channel too many.
 *
 * All of it runs on the event-loop thread. The state is a member of mqd_conn_t. */
#ifndef MQD_BUDGET_H
#define MQD_BUDGET_H

#include "mqd.h"

#include <proton/event.h>
#include <proton/session.h>

struct mqd_conn;
struct mqd_server;

typedef struct mqd_budget {
    uint64_t bytes;      /* charged now (sum of the parts below) */
    uint64_t peak;       /* most charged at once */
    uint64_t partial;    /* link buffers of deliveries still arriving */
    uint64_t output;     /* Proton output the socket has not taken, and unframed deliveries */
    uint64_t pending;    /* of which in Proton's output buffer (the last write's rest) */
    bool send_blocked;   /* consumers wait for the output to drain */
    uint64_t blocked_at; /* `output` when they began to wait (0: not measured yet) */
    uint32_t sessions;   /* Proton sessions not yet final */
    uint32_t links;      /* Proton links not yet final */
    uint32_t ssn_open;   /* sessions mqd began and has not ended */
    uint32_t ssn_ending; /* sessions mqd ended whose end may not be written yet */
    int64_t closing_ms;  /* closed by the budget at (monotonic ms), else 0 */
    bool peer_eof;       /* after closing_ms: the peer's EOF (or an error) was read */
} mqd_budget_t;

/* Fixed charges (measured: Proton's session ~3.5 KiB with its delivery maps, a link
 * with its termini and mqd's link state ~2 KiB). */
#define MQD_BUDGET_SESSION_COST 4096u
#define MQD_BUDGET_LINK_COST 2048u
/* How long a connection closed by the budget may take to write its close frame. */
#define MQD_BUDGET_LINGER_MS 10000

/* Looks at e before mqd_amqp_handle does: counts sessions and links, keeps channels
 * free, closes the connection when over budget. False: skip the event (the connection
 * is closing and e would open something on it). */
bool mqd_budget_event(struct mqd_conn *c, pn_event_t *e);

/* Charges (delta > 0) or releases (delta < 0) bytes of partial-delivery buffers.
 * MQD_ETOOBIG when a charge does not fit: the connection is being closed and the
 * caller must not grow the buffer. Releases always succeed. */
int mqd_budget_partial(struct mqd_conn *c, int64_t delta);

/* Records the output Proton holds after a write (`pending`: bytes not taken by the
 * socket, plus what its deliveries hold unframed); closes the connection if that puts
 * it over budget, and lets blocked consumers send again once it has drained. */
void mqd_budget_output(struct mqd_conn *c, size_t pending);

/* A consumer may not send on session ss while the connection's unread output and the
 * session's queued delivery bytes are MQD_BUDGET_SEND_HIGH or more: a peer that grants
 * credit but does not read stops getting deliveries (they stay in the log) instead of
 * having them all copied into Proton. The connection's consumers are dispatched again
 * once its backlog is below half of it, or has fallen by half of it. */
bool mqd_budget_send_blocked(struct mqd_conn *c, pn_session_t *ss);
#define MQD_BUDGET_SEND_HIGH (4u << 20)

/* True once a connection closed by the budget has had its linger: close the socket.
 * *wait_ms (if not NULL) gets the time left, for the connection's timer. */
bool mqd_budget_linger_over(struct mqd_conn *c, int64_t *wait_ms);

/* A connection closed by its budget whose peer has not sent EOF yet: its input is read
 * and dropped (mqd_budget_drain, from the read event) until then, so that a peer still
 * sending does not get a reset, which would make its kernel drop the close frame. */
bool mqd_budget_draining(const struct mqd_conn *c);
void mqd_budget_drain(struct mqd_conn *c);

/* Closes c's socket: at once, or, after a close by the budget, once the peer has sent
 * EOF (its input read and dropped meanwhile) or MQD_BUDGET_DRAIN_MS has passed. */
void mqd_budget_close_fd(struct mqd_conn *c);
#define MQD_BUDGET_DRAIN_MS 5000
/* Closes the sockets still draining (server shutdown, before the event base goes). */
void mqd_budget_drains_free(struct mqd_server *s);

/* Periodic (1 s): gives freed heap back to the system once the charges fell by
 * MQD_BUDGET_TRIM_BYTES since the last time. */
void mqd_budget_tick(struct mqd_server *s);
#define MQD_BUDGET_TRIM_BYTES (1u << 20)
#define MQD_BUDGET_TRIM_CONNS 256 /* ... or the connections fell by this many */

/* A connection is being freed: its charges leave the broker's total. */
void mqd_budget_release(struct mqd_conn *c);

/* The broker is over max_memory: refuse new connections and links. */
bool mqd_budget_broker_full(const struct mqd_server *s);

#endif
