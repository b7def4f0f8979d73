/* codec: the broker's parsers of client bytes that need no broker state: the bounded
 * AMQP message scanner (msg.c), the frame peek in front of Proton (framepeek.c) and
 * message selectors with start positions (selector.c). Pure functions over buffers;
 * every one has a fuzz target (tests/fuzz). */
#ifndef MQD_CODEC_H
#define MQD_CODEC_H

#include "mqd.h"

/* ==== msg ==== */
/* msg: a bounded scanner for encoded AMQP 1.0 messages, and the rewrite that adds
 * mqd's delivery annotations. Bodies are never decoded; only the sections the broker
 * needs are read, with a fixed maximum nesting depth (untrusted input).
 */

#define MQD_MSG_MAX_DEPTH 32 /* deepest compound nesting accepted anywhere */

/* A byte range inside the scanned buffer; len 0 = absent. */
typedef struct mqd_span {
    size_t off;
    size_t len;
} mqd_span_t;

typedef struct mqd_msg_info {
    /* whole sections (descriptor included) */
    mqd_span_t header, delivery_ann, message_ann, properties, app_props, footer;
    size_t body_off;              /* first body section (== n if no body) */
    /* header fields (defaults when absent) */
    bool durable;
    uint8_t priority;             /* 4 */
    bool has_ttl;
    uint32_t ttl_ms;
    bool first_acquirer;
    uint32_t delivery_count;
    /* properties fields: spans of the *encoded value* (constructor included) inside the
       buffer, or of the raw string bytes where noted */
    mqd_span_t message_id;        /* encoded value (for duplicate detection) */
    mqd_span_t to;                /* raw UTF-8 bytes of `to` (string or symbol) */
    mqd_span_t subject;           /* raw bytes */
    mqd_span_t reply_to;          /* raw bytes */
    mqd_span_t correlation_id;    /* encoded value */
    mqd_span_t group_id;          /* raw bytes */
    int64_t absolute_expiry_time; /* 0 = none */
    int64_t creation_time;        /* 0 = none */
    /* message-annotations */
    mqd_span_t partition_key;     /* raw bytes of x-opt-partition-key (string or symbol) */
    int64_t scheduled_ms;         /* x-opt-scheduled-enqueue-time (timestamp), 0 = none:
                                     Service Bus' scheduled message (docs/servicebus.md) */
} mqd_msg_info_t;

/* Scans an encoded message. 0, or MQD_EINVAL if it is not a well-formed sequence of
 * message sections (bad constructor, length past the end, sections out of order,
 * nesting deeper than MQD_MSG_MAX_DEPTH). Section descriptors may be the ulong codes or
 * the symbolic names. A message with no body section is accepted (body_off == n); an
 * empty buffer is not. Header/properties fields of an unexpected type read as absent.
 * *out is written only on success; its spans point into p. */
int mqd_msg_scan(const uint8_t *p, size_t n, mqd_msg_info_t *out);
/* The same scan for bytes that were checked by mqd_msg_scan before they were stored (a
 * record read back from a partition, CRC-checked by the store): sections and the fields
 * above are read the same way, bounded by n, but nested compounds are stepped over by
 * their size instead of being walked (a third of the cost per delivery). Never use it
 * on bytes from the network. */
int mqd_msg_scan_stored(const uint8_t *p, size_t n, mqd_msg_info_t *out);

/* What mqd adds when delivering a stored record. */
typedef struct mqd_msg_ann {
    int32_t partition_id;
    int64_t offset;          /* x-opt-offset (as a string) and x-opt-sequence-number */
    int64_t enqueued_ms;     /* x-opt-enqueued-time (timestamp) */
    const uint8_t *pkey;     /* x-opt-partition-key (string) or NULL */
    size_t pkey_len;
    uint32_t delivery_count; /* if != info->delivery_count, the header is rewritten/created */
    bool redelivered;        /* acquired before: header first-acquirer false (the header
                                is rewritten if it says true, created if there is none) */
    /* extra annotations for dead-lettered copies; NULL when unused */
    const char *dlq_reason;  /* x-opt-deadletter-reason */
    const char *dlq_origin;  /* x-opt-deadletter-source (origin "T/Partitions/N@offset") */
    /* x-opt-message-state (int) when not 0: Service Bus' 1 deferred, 2 scheduled (peek and
       receive-by-sequence-number answers, docs/servicebus.md) */
    int32_t message_state;
    /* only pkey is written (and replaces the message's own): what a batch's inner message
       is stored with when the outer message had a partition key; the fixed x-opt entries
       are neither written nor replaced */
    bool pkey_only;
} mqd_msg_ann_t;

/* A growable output buffer owned by the caller (reuse it across calls). */
typedef struct mqd_buf {
    uint8_t *p;
    size_t len;
    size_t cap;
} mqd_buf_t;

/* Frees b->p and zeroes the buffer (safe on a zeroed buffer or NULL). */
void mqd_buf_free(mqd_buf_t *b);
/* Ensures at least `need` free bytes after b->len (b->cap - b->len >= need); b->len is
 * unchanged. Start from a zeroed mqd_buf_t. 0 or MQD_ENOMEM (b unchanged). */
int mqd_buf_reserve(mqd_buf_t *b, size_t need);

/* Writes into `out` (replacing its content) the message `p[0..n)` (scanned into `info`)
 * with the annotations of `ann` merged into its message-annotations section: existing
 * keys of the same name are replaced, other entries kept byte-for-byte; a section is
 * created after header/delivery-annotations when there is none. Everything else is
 * copied unchanged. 0 or MQD_ENOMEM / MQD_EINVAL (out->len is then 0).
 * Replaced keys: x-opt-partition-id/-offset/-sequence-number/-enqueued-time always;
 * x-opt-partition-key, the dead-letter keys and the message state only when ann gives
 * them (otherwise the
 * message's own entries stay). Keys are written as symbols. `info` must come from
 * mqd_msg_scan of the same bytes; its spans are re-checked, never trusted blindly. */
int mqd_msg_annotate(const uint8_t *p, size_t n, const mqd_msg_info_t *info,
                     const mqd_msg_ann_t *ann, mqd_buf_t *out);

/* The message-format used by Azure Event Hubs SDKs for batched sends. */
#define MQD_MSG_FORMAT_BATCH 0x80013700u

/* Splits a batch message: calls cb for each data section's bytes (one inner encoded
 * message each; the pointer is into p, valid as long as p). Returns 0, the first non-zero
 * cb return, or MQD_EINVAL. The whole outer message is checked before the first cb, and a
 * body that is not one or more data sections is MQD_EINVAL; inner messages are not
 * scanned here (cb does that). */
typedef int (*mqd_msg_batch_cb)(const uint8_t *inner, size_t len, void *arg);
int mqd_msg_batch_split(const uint8_t *p, size_t n, mqd_msg_batch_cb cb, void *arg);

/* ==== framepeek ==== */
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
 * connection is then closed (core/conn.c rx_feed) with the condition mqd_fpeek_error names,
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

/* The same for an attach whose desired-capabilities held the symbol amqp:link:redirect
 * (the Event Hubs SDKs' way to ask for a link redirect; Proton 0.37 does not expose a
 * link's desired capabilities), within the attach's first MQD_FPEEK_PERF_MAX bytes. */
bool mqd_fpeek_redirect_take(mqd_fpeek_t *fp, const char *link, size_t link_len,
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

/* ==== selector ==== */
/* selector: JMS-style message selectors (`apache.org:selector-filter:string`) compiled
 * once per link and matched against encoded messages without decoding them, and the
 * Event Hubs start-position expressions that travel in the same filter.
 *
 * Bounds (the text comes from a client): at most MQD_SELECTOR_MAX_LEN bytes, nesting
 * (parentheses, NOT, unary signs) at most MQD_SELECTOR_MAX_DEPTH, IN lists at most
 * MQD_SELECTOR_MAX_IN items. A compiled selector is a flat postfix program evaluated
 * with a fixed-size stack: matching never recurses and never allocates.
 *
 * Semantics (JMS 2.0 3.8.1): SQL three-valued logic; a missing property is NULL and a
 * comparison with NULL is UNKNOWN; only TRUE matches. Comparing values of unlike types
 * (a string with a number, a boolean with a string) is FALSE, as the JMS spec says;
 * exact and approximate numbers compare with each other. Ordering operators (< > <= >=,
 * BETWEEN) apply to numbers only. Integer arithmetic that overflows continues in double;
 * division by zero is UNKNOWN.
 *
 * Identifiers: an application-property name (case-sensitive; "double-quoted" for names
 * that are not identifiers, e.g. "x-key"), or one of the header/properties names:
 *   JMSMessageID JMSCorrelationID  string form of message-id / correlation-id (string
 *                                  or symbol as is, ulong in decimal, uuid 8-4-4-4-12,
 *                                  binary up to 32 bytes in lower-case hex)
 *   JMSPriority (header priority, 4 by default), JMSDeliveryMode ('PERSISTENT' |
 *   'NON_PERSISTENT'), JMSTimestamp (creation-time), JMSExpiration (absolute-expiry-
 *   time) -- both 0 when absent, as in JMS --, JMSType (subject), JMSXGroupID,
 *   JMSXDeliveryCount (delivery-count + 1), and amqp.message_id amqp.correlation_id
 *   amqp.subject amqp.to amqp.reply_to amqp.content_type amqp.content_encoding
 *   amqp.group_id amqp.priority amqp.durable amqp.creation_time
 *   amqp.absolute_expiry_time amqp.delivery_count (NULL when absent).
 */

#define MQD_SELECTOR_MAX_LEN 4096
#define MQD_SELECTOR_MAX_DEPTH 64
#define MQD_SELECTOR_MAX_IN 1000

typedef struct mqd_selector mqd_selector_t;

/* Compiles expr[0..len) (need not be NUL-terminated). 0 and *out (owned by the caller,
 * free with mqd_selector_free; it keeps no pointer into expr), or MQD_EINVAL with
 * "col N: reason" (N counts bytes from 1) written to err when errlen > 0, or
 * MQD_ENOMEM. *out is written only on success. */
int mqd_selector_compile(const char *expr, size_t len, mqd_selector_t **out, char *err,
                         size_t errlen);

/* TRUE only: UNKNOWN and FALSE are no match. msg[0..len) is an encoded message and mi
 * its mqd_msg_scan result; spans in mi are re-checked against len, never trusted.
 * Reads only; a compiled selector may be shared by threads. */
bool mqd_selector_match(const mqd_selector_t *sel, const uint8_t *msg, size_t len,
                        const mqd_msg_info_t *mi);

/* Frees a compiled selector (NULL is fine). */
void mqd_selector_free(mqd_selector_t *sel);

/* ---- start position (ARCHITECTURE "Start position for a consumer") ---- */

typedef enum {
    MQD_START_NONE = 0,
    MQD_START_OFFSET, /* value = offset (x-opt-offset or x-opt-sequence-number) */
    MQD_START_TIME,   /* value = ms since the epoch (x-opt-enqueued-time) */
    MQD_START_FIRST,  /* '-1': the earliest record */
    MQD_START_LAST,   /* '@latest': only records written from now on */
} mqd_start_kind_t;

typedef struct mqd_start {
    mqd_start_kind_t kind;
    bool inclusive; /* `>=` rather than `>` */
    int64_t value;
} mqd_start_t;

/* Recognises `amqp.annotation.x-opt-offset|x-opt-sequence-number|x-opt-enqueued-time`
 * followed by `>` or `>=` and a value, quoted ('1234') or not (1234); the annotation
 * name is matched case-insensitively. 0 and *out; MQD_ENOENT if expr is an ordinary
 * selector; MQD_EINVAL if it names one of these annotations but is malformed (other
 * operator, trailing text, negative or out-of-range value, '-1'/'@latest' with the
 * enqueued time). *out is written only on success. */
int mqd_selector_start_parse(const char *expr, size_t len, mqd_start_t *out);

#endif
