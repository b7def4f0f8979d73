/* framepeek: reads the message-format of incoming transfers from the plaintext bytes of
 * one connection, beside Proton (whose C API does not expose it; see ARCHITECTURE §1
 * "Batched sends"). It is fed exactly the bytes Proton gets, in any chunking, and never
 * changes them. It skips protocol headers, SASL frames and heartbeats, notes each
 * sender attach's (channel, handle) -> link name (kept as a 64-bit hash and length, so
 * the map costs 40 bytes a link whatever the names), and for each transfer that starts a
 * delivery with a message-format other than 0 records (link, delivery tag, format) until
 * the delivery path takes it. Pure C, no Proton; no payload byte is copied (at most a
 * performative that straddles two chunks, up to MQD_FPEEK_PERF_MAX bytes).
 *
 * Input it cannot make sense of (a bad frame header, a transfer or attach whose fields it
 * reads take more than MQD_FPEEK_PERF_MAX bytes, a transfer on a handle never attached)
 * stops the peek for good: it then records nothing more, and the connection behaves as
 * if it never had one (Proton judges the bytes).
 */
#ifndef MQD_FRAMEPEEK_H
#define MQD_FRAMEPEEK_H

#include "mqd.h"

#define MQD_FPEEK_PERF_MAX 1024 /* longest performative prefix buffered across chunks */
#define MQD_FPEEK_MAX_FMT 4096  /* recorded deliveries kept per connection (oldest dropped) */

typedef struct mqd_fpeek mqd_fpeek_t;

/* A new peek (caller owns it; mqd_fpeek_free). NULL when out of memory. */
mqd_fpeek_t *mqd_fpeek_new(void);
void mqd_fpeek_free(mqd_fpeek_t *fp);

/* Feeds the next n bytes of the connection's input (the caller keeps p; nothing is kept
 * past the call except a straddling performative's prefix). */
void mqd_fpeek_feed(mqd_fpeek_t *fp, const uint8_t *p, size_t n);

/* The message-format recorded for the delivery with tag `tag` on the link named `link`
 * (the sender's link name as in its attach), and forgets it; 0 when none was recorded
 * (format 0, or the peek stopped). A connection that never sent another format pays one
 * branch here. */
uint32_t mqd_fpeek_take(mqd_fpeek_t *fp, const char *link, size_t link_len, const uint8_t *tag,
                        size_t tag_len);

/* True when some delivery's format is recorded and not yet taken: the one branch a
 * connection of format-0 sends pays per delivery. */
bool mqd_fpeek_waiting(const mqd_fpeek_t *fp);

/* False once the peek stopped on input it could not follow. */
bool mqd_fpeek_ok(const mqd_fpeek_t *fp);
/* Frames seen so far (tests, debug). */
uint64_t mqd_fpeek_frames(const mqd_fpeek_t *fp);

#endif
