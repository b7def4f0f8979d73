/* Fuzz target: the management request decoder (src/mgmt/mgmt_json.c), fed the way
 * mqd_mgmt_handle feeds it: the input is scanned as a message and its
 * application-properties and body are decoded to JSON; the raw input is also decoded as
 * one AMQP value. Every JSON value produced must encode back to AMQP (within the depth
 * bound), decode again, and print. The input as text also goes to the argument parsers
 * of mgmt_parse.c (a RESET's partitions list, a HISTORY series name). */
#include "config.h"
#include "codec/codec.h"
#include "mgmt/mgmt_int.h"
#include "mgmt/mgmt_json.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

#define MAX_REQUEST (64 * 1024) /* mgmt.c refuses larger requests before decoding */

/* JSON -> AMQP -> bytes -> JSON: what the broker does to a reply body and mqctl to it. */
static void round_trip(json_t *v)
{
    pn_data_t *d = pn_data(16);
    char buf[1 << 16];
    ssize_t n;

    if (d == NULL)
        abort();
    if (mqd_mgmt_json_to_data(d, v, 0) == 0 && (n = pn_data_encode(d, buf, sizeof buf)) > 0) {
        json_t *back = mqd_mgmt_decode_json(buf, (size_t)n);
        /* Integers and strings come back as they went; an object stays an object. */
        if (back == NULL || json_typeof(back) != json_typeof(v))
            abort();
        json_decref(back);
    }
    pn_data_free(d);
    free(json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY));
}

static void decode_span(const uint8_t *p, size_t len)
{
    json_t *v = mqd_mgmt_decode_json((const char *)p, len);

    if (v != NULL) {
        round_trip(v);
        json_decref(v);
    }
}

/* The input as a C string (to its first NUL, at most 4 KiB) through the argument parsers:
 * every partition marked lies below n; a series' topic is a prefix-free copy. */
static void args_text(const uint8_t *data, size_t size)
{
    char text[4097], topic[256];
    bool sel[64] = {false};
    long long bad = -1;
    size_t n = size < sizeof text - 1 ? size : sizeof text - 1;
    memcpy(text, data, n);
    text[n] = '\0';
    int rc = mqd_mgmt_parse_partitions(text, 64, sel, &bad);
    if (rc == MQD_ERANGE && bad < 64)
        abort();
    const char *t = mqd_mgmt_series_topic(text, topic, sizeof topic);
    if (t && strlen(t) >= sizeof topic)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mqd_msg_info_t mi;

    if (size > MAX_REQUEST)
        return 0;
    if (mqd_msg_scan(data, size, &mi) == 0) {
        if (mi.app_props.len)
            decode_span(data + mi.app_props.off, mi.app_props.len);
        if (mi.body_off < size)
            decode_span(data + mi.body_off, size - mi.body_off);
    }
    decode_span(data, size);
    args_text(data, size);
    return 0;
}
