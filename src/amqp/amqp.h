/* amqp: the broker's AMQP 1.0 node — Proton events of accepted connections: sessions,
 * producer links (append, settle when the commit point passes), consumer and browser
 * links (delivery from groups), the transaction coordinator and $management/$cbs
 * requests. Internals in amqp_int.h. Event-loop thread only. */
#ifndef MQD_AMQP_H
#define MQD_AMQP_H

#include "mqd.h"
#include "core/core.h"

/* link.c: one Proton event of connection c */
void mqd_amqp_handle(mqd_conn_t *c, pn_event_t *e);
/* consumer.c: sends one record if the link can take it; returns number delivered. */
size_t mqd_consumer_pump(mqd_lstate_t *ls);
void mqd_lstate_free(mqd_lstate_t *ls);
/* Detaches a consumer link with an error (epoch takeover), releasing what it held. */
void mqd_consumer_detach(mqd_lstate_t *ls, const char *cond, const char *desc);
/* The leader here of a consumer's partition stepped down: the client's link stays
 * attached and fwd serves it from the new leader (issue 33 point 3), its position the
 * group's committed offset there. False (ls untouched): not such a link (a browser, a
 * local-only or forwarded leg, one that asked for a redirect, no fwd here). */
bool mqd_consumer_forward(mqd_lstate_t *ls);
/* link.c: detaches an attached producer or consumer link with amqp:link:redirect naming
 * `to` (its info as an attach refused by mqd_link_redirect has it), releasing what it
 * held: a leader that stepped down sends its clients to the new one. */
void mqd_link_detach_redirect(mqd_lstate_t *ls, const mqd_redirect_t *to);
/* link.c: runs again the attach of every link that waits for the cluster to decide
 * where topic `topic` is (mqd_repl_hooks_t route answered MQD_ROUTE_WAIT: unanswered, no
 * link state); each is answered now or waits again. Returns how many it found. */
size_t mqd_amqp_attach_again(mqd_server_t *s, const char *topic);
/* credit.c: a producer link's credit refilled now (a forwarded send of it settled). */
void mqd_amqp_producer_refill(mqd_lstate_t *ls);
/* link.c: gives producers their credit back once the watermarks clear (periodic). */
void mqd_producers_refill(mqd_server_t *s);
/* dispatch.c: delivers to the consumers of every topic queued by mqd_topic_dispatch_soon
 * (the tick), and of those a consumer's work budget deferred (mqd_topic_dispatch_later;
 * run at the next loop iteration, after I/O). */
void mqd_server_run_dispatch(mqd_server_t *s);
void mqd_server_run_later(mqd_server_t *s);
/* redirect.c: whether the peer's attach of l carries link property `key` (a symbol or
 * string key) with the boolean value true (mqd:batch between nodes). */
bool mqd_link_prop_true(pn_link_t *l, const char *key);
/* The hooks core calls for links (mqd_core_ops_t: link_detach), set by server/. */
void mqd_amqp_core_ops(mqd_core_ops_t *ops);
/* Registers amqp's periodic work (the producers' credit refill) on s. */
int mqd_amqp_start(mqd_server_t *s);

#endif
