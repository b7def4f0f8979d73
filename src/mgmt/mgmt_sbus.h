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

typedef struct mqd_sbus_args {
    bool has_from, has_count, has_tokens;
    int64_t from;  /* from-sequence-number (long) */
    int64_t count; /* message-count (int) */
    /* lock-tokens (an array of uuids), each the delivery tag of a message of partition 0
       (its offset here); tokens_bad when one is not, or there are more than the max */
    size_t n_tokens;
    bool tokens_bad;
    uint64_t tokens[MQD_SBUS_TOKENS_MAX];
} mqd_sbus_args_t;

/* Reads the arguments from the body section body[0..len) (untrusted: decoded by Proton,
 * every type checked). 0, or MQD_EINVAL when it is not an amqp-value map (then *a holds
 * no argument). */
int mqd_sbus_args_parse(const uint8_t *body, size_t len, mqd_sbus_args_t *a);

#endif
