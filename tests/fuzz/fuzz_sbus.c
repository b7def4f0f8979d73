/* Fuzz target: the arguments of a request to a Service Bus entity's management node
 * (src/mgmt/mgmt_sbus_args.c), fed as mgmt_sbus.c feeds it: the input is scanned as a
 * message and its body section parsed; the raw input is also parsed as a body. The
 * parse never reads more lock tokens, sequence numbers or messages than it holds, and
 * every message it keeps lies inside its buffer. */
#include "config.h"
#include "codec/codec.h"
#include "mgmt/mgmt_sbus.h"
#include "fuzz.h"

#include <stdlib.h>

#define MAX_REQUEST (64 * 1024) /* mgmt.c refuses larger requests before decoding */

static void parse(const uint8_t *p, size_t len)
{
    mqd_sbus_args_t a;
    int rc = mqd_sbus_args_parse(p, len, &a);
    if (rc == 0 && (a.n_tokens > MQD_SBUS_TOKENS_MAX || a.n_seqs > MQD_SBUS_SEQS_MAX ||
                    a.n_msgs > MQD_SBUS_SEQS_MAX))
        abort();
    for (size_t i = 0; i < a.n_msgs; i++)
        if (a.msgs[i].off + a.msgs[i].len > a.msg_len)
            abort();
    mqd_sbus_args_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mqd_msg_info_t mi;

    if (size > MAX_REQUEST)
        return 0;
    if (mqd_msg_scan(data, size, &mi) == 0 && mi.body_off < size)
        parse(data + mi.body_off, size - mi.body_off);
    parse(data, size);
    return 0;
}
