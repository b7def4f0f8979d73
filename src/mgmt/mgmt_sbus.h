/* mgmt internals: the arguments of a request to a Service Bus entity's management node
 * (mgmt_sbus.c), read from its amqp-value body by mgmt_sbus_args.c, which needs nothing
 * but Proton's codec (the fuzz target tests/fuzz/fuzz_sbus.c links it alone). */
#ifndef MQD_MGMT_SBUS_H
#define MQD_MGMT_SBUS_H

#include "mqd.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MQD_SBUS_TOKENS_MAX 64
#define MQD_SBUS_SEQS_MAX 64 /* sequence numbers, and messages to schedule, per request */

/* One message of schedule-message's `messages`: its encoded bytes in the args' buffer. */
typedef struct mqd_sbus_msg {
    size_t off, len;
} mqd_sbus_msg_t;

typedef struct mqd_sbus_args {
    bool has_from, has_count, has_tokens;
    int64_t from;  /* from-sequence-number (long) */
    int64_t count; /* message-count (int) */
    /* lock-tokens (an array of uuids), each the delivery tag of a message of partition 0
       (its offset here); tokens_bad when one is not, or there are more than the max */
    size_t n_tokens;
    bool tokens_bad;
    uint64_t tokens[MQD_SBUS_TOKENS_MAX];
    /* sequence-numbers (an array of longs); seqs_bad when it is not, or too long */
    bool has_seqs, seqs_bad;
    size_t n_seqs;
    int64_t seqs[MQD_SBUS_SEQS_MAX];
    bool has_settle_mode; /* receiver-settle-mode (uint): 0 receive-and-delete, 1 peek-lock */
    int64_t settle_mode;
    /* disposition-status (string), deadletter-reason, deadletter-description ("" when
       absent; cut at their sizes) */
    char disposition[16];
    char dl_reason[256];
    char dl_desc[512];
    /* messages (a list of maps, each with `message`: binary): msgs_bad when one is not */
    bool has_msgs, msgs_bad;
    size_t n_msgs;
    mqd_sbus_msg_t msgs[MQD_SBUS_SEQS_MAX];
    uint8_t *msg_buf; /* the messages' bytes (malloc'd: mqd_sbus_args_free) */
    size_t msg_len;
} mqd_sbus_args_t;

/* Reads the arguments from the body section body[0..len) (untrusted: decoded by Proton,
 * every type checked). 0, or MQD_EINVAL when it is not an amqp-value map (then *a holds
 * no argument). */
int mqd_sbus_args_parse(const uint8_t *body, size_t len, mqd_sbus_args_t *a);
void mqd_sbus_args_free(mqd_sbus_args_t *a);

#endif
