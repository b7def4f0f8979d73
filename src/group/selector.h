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
#ifndef MQD_SELECTOR_H
#define MQD_SELECTOR_H

#include "mqd.h"
#include "amqp/msg.h"

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
