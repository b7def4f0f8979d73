/* msg: a bounded scanner for encoded AMQP 1.0 messages, and the rewrite that adds
 * mqd's delivery annotations. Bodies are never decoded; only the sections the broker
 * needs are read, with a fixed maximum nesting depth (untrusted input).
 */
#ifndef MQD_MSG_H
#define MQD_MSG_H

#include "mqd.h"

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
 * x-opt-partition-key and the dead-letter keys only when ann gives them (otherwise the
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

#endif
