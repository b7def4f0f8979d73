/* framepeek: reads the message-format of incoming transfers from the plaintext bytes of
 * one connection, beside Proton (whose C API does not expose it; see ARCHITECTURE §1
 * "Batched sends"). It is fed every byte before Proton gets it, in any chunking, and
 * never changes them. It notes protocol headers and sasl-init, skips heartbeats, notes each
 * sender attach's (channel, handle) -> link name (kept as a 64-bit hash and length, so
 * the map costs 40 bytes a link whatever the names), notes each attach that asks to
 * resume (a non-empty unsettled map or incomplete-unsettled), and for each transfer that starts a
 * delivery with a message-format other than 0 records (link, delivery tag, format) until
 * the delivery path takes it. Pure C, no Proton; no payload byte is copied (at most a
 * performative that straddles two chunks, up to MQD_FPEEK_PERF_MAX bytes).
 *
 * It is also the guard in front of Proton: every plaintext byte passes it before Proton
 * sees it, on every listener. Input it cannot follow stops the peek for good, and the
 * connection is then closed (server.c rx_feed) with the condition mqd_fpeek_error names,
 * before Proton has the whole frame that stopped it (it may have a prefix from earlier
 * chunks; Proton acts on a frame only once it has all of it):
 *   amqp:connection:framing-error  a bad frame header, or one over max-frame-size; a
 *                                  protocol header other than AMQP (id 0) or SASL (id 3)
 *                                  (this one Proton is given, to answer with its own
 *                                  header as the spec asks, and it closes); a
 *                                  transfer on a handle no sender attached; the first
 *                                  transfer of a delivery without a delivery-id; a SASL
 *                                  frame after the AMQP header or an AMQP frame before
 *                                  it, and a second sasl-init (Proton dispatches SASL
 *                                  frames in any phase: it re-ran mqd's SASL callback on
 *                                  an open connection); bytes before any protocol
 *                                  header (given to Proton, which answers and closes)
 *   amqp:decode-error              a transfer or attach whose fields it reads do not
 *                                  decode, or take more than MQD_FPEEK_PERF_MAX bytes
 *   amqp:resource-limit-exceeded   more than MQD_FPEEK_LINKS_MAX sender (channel, handle)
 *                                  pairs, or out of memory
 *
 * Proton 0.37's asserts reachable from input (transport.c, engine.c, framing.c,
 * dispatcher.c, decoder and the generated consumers were read for them), and how mqd
 * prevents each:
 *   transport.c pn_do_transfer `assert(id_present)`: a transfer with more=true that
 *     starts a delivery (the link has no multi-frame delivery in progress: its first,
 *     the one after a delivery that ended, or after one aborted; also with aborted=true,
 *     which Proton looks at only after the assert) and has no delivery-id. The peek keeps
 *     each sender link's "more pending" state (set by a first transfer with more=true
 *     and not aborted, cleared by a continuation with more=false or aborted=true, and
 *     reset by a new attach of the handle) and refuses every first transfer without a
 *     delivery-id, with more=false too (the spec requires the id there; Proton would give
 *     such a delivery the next id, or an unset one as a session's first). Where Proton
 *     keeps "more pending" longer (it does not clear it when a delivery ends with
 *     more=false) the peek is the stricter; a continuation may omit the id, as the spec
 *     allows. `resume` changes nothing in either; a settled-to-unsettled transition in a
 *     continuation is Proton's own invalid-field error, not an assert.
 *   transport_consume `assert(n == PN_EOS)`: the AMQP and SASL layers map every
 *     dispatcher error to PN_EOS, so no input reaches it.
 *   The other asserts (pointer arguments, pn_full_settle's `!delivery->work`,
 *   pni_post_disp's `state->init`, output sizes, engine.c's endpoint-type switches,
 *   object/ list and map internals) check the broker's own API use and Proton's
 *   bookkeeping, not values read from the peer; fuzz_conn drives real connections to
 *   keep that claim honest.
 * After any error of its own Proton stops reading (pn_do_error closes the tail), so the
 * peek's view cannot fall behind Proton's on a connection that is still read.
 */
#ifndef MQD_FRAMEPEEK_H
#define MQD_FRAMEPEEK_H

#include "mqd.h"

#define MQD_FPEEK_PERF_MAX 1024 /* longest performative prefix buffered across chunks */
#define MQD_FPEEK_MAX_FMT 4096  /* recorded deliveries kept per connection (oldest dropped) */
/* sender (channel, handle) pairs tracked per connection: max_sessions x
 * max_links_per_session at their defaults (40 bytes each) */
#define MQD_FPEEK_LINKS_MAX 65536
/* attaches asking to resume kept until the link handler takes them (oldest dropped) */
#define MQD_FPEEK_RESUME_MAX 64

typedef struct mqd_fpeek mqd_fpeek_t;

/* A new peek (caller owns it; mqd_fpeek_free). NULL when out of memory. */
mqd_fpeek_t *mqd_fpeek_new(void);
void mqd_fpeek_free(mqd_fpeek_t *fp);

/* Frames larger than `max` (Proton's local max-frame-size; 0 = no limit, the default)
 * stop the peek at their header. */
void mqd_fpeek_set_max_frame(mqd_fpeek_t *fp, uint32_t max);

/* Feeds the next n bytes of the connection's input (the caller keeps p; nothing is kept
 * past the call except a straddling performative's prefix). Returns how many of them
 * Proton may be given: n, or once the peek stopped, the bytes before the frame that
 * stopped it (0 for every later call). */
size_t mqd_fpeek_feed(mqd_fpeek_t *fp, const uint8_t *p, size_t n);

/* The message-format recorded for the delivery with tag `tag` on the link named `link`
 * (the sender's link name as in its attach), and forgets it; 0 when none was recorded
 * (format 0, or the peek stopped). A connection that never sent another format pays one
 * branch here. */
uint32_t mqd_fpeek_take(mqd_fpeek_t *fp, const char *link, size_t link_len, const uint8_t *tag,
                        size_t tag_len);

/* True once, when the last attach of the link named `link` with the peer's role
 * `peer_receiver` carried a non-empty unsettled map or incomplete-unsettled=true (a
 * resume, AMQP 1.0 2.6.13, which Proton 0.37 ignores); false otherwise (also when the map
 * lay past the first MQD_FPEEK_PERF_MAX bytes of the attach). Forgets it. */
bool mqd_fpeek_resume_take(mqd_fpeek_t *fp, const char *link, size_t link_len,
                           bool peer_receiver);

/* True when some delivery's format is recorded and not yet taken: the one branch a
 * connection of format-0 sends pays per delivery. */
bool mqd_fpeek_waiting(const mqd_fpeek_t *fp);

/* False once the peek stopped on input it could not follow. */
bool mqd_fpeek_ok(const mqd_fpeek_t *fp);
/* NULL while the peek follows the input; once it stopped, the AMQP error condition to
 * close the connection with, and in *why (when not NULL) a reason (static strings). */
const char *mqd_fpeek_error(const mqd_fpeek_t *fp, const char **why);
/* Frames seen so far (tests, debug). */
uint64_t mqd_fpeek_frames(const mqd_fpeek_t *fp);

#endif
