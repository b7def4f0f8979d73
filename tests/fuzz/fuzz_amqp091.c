/* Fuzz target: the AMQP 0-9-1 front end's parser of client bytes (src/amqp091/frame.c:
 * framing bounded by frame_max, then librabbitmq's method, property and field-table
 * decoders) on a client stream after its protocol header. The first byte picks the
 * frame_max (as negotiated, or the pre-tune bound); the parse must end with 0 or one of
 * the connection-level reply codes, never crash or read out of bounds. Cut at any point,
 * a stream that parsed whole must parse in its prefix too (a cut frame waits). */
#include "config.h"
#include "amqp091/amqp091.h"
#include "fuzz.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const uint32_t maxes[] = {4096, 8192, 131072, 16};
    uint32_t frame_max = maxes[data[0] % 4];
    data++, size--;
    int rc = mqd_amqp091_parse(data, size, frame_max);
    if (rc != 0 && rc != 501 && rc != 502 && rc != 503 && rc != 505)
        abort();
    if (rc == 0 && size > 0 && mqd_amqp091_parse(data, size / 2, frame_max) != 0)
        abort();
    return 0;
}
