/* Fuzz target: scan, annotate (and re-scan the result), batch split; the stored-record
 * scan must agree with the full scan on what that accepts and stay bounded on the rest. */
#include "config.h"
#include "codec/codec.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

static int inner_scan(const uint8_t *inner, size_t len, void *arg)
{
    mqd_msg_info_t mi;
    (void)mqd_msg_scan(inner, len, &mi);
    (*(int *)arg)++;
    return 0;
}

/* Annotating a well-formed message must give a well-formed message that carries the
 * key we asked for and the delivery-count we set. */
static void check_annotate(const uint8_t *data, size_t size, const mqd_msg_info_t *mi)
{
    static const uint8_t key[] = "fuzz-key";
    mqd_msg_ann_t ann = {
        .partition_id = (int32_t)size, .offset = (int64_t)size * 1000003,
        .enqueued_ms = 1700000000000LL, .delivery_count = (uint32_t)(size % 3),
    };
    mqd_buf_t out = { 0 };
    mqd_msg_info_t o;

    if (size & 1) {
        ann.pkey = key;
        ann.pkey_len = sizeof(key) - 1;
        ann.dlq_reason = "fuzz";
    }
    if (mqd_msg_annotate(data, size, mi, &ann, &out) != 0)
        abort();
    if (mqd_msg_scan(out.p, out.len, &o) != 0 || o.message_ann.len == 0)
        abort();
    if (o.delivery_count != ann.delivery_count && ann.delivery_count != mi->delivery_count)
        abort();
    if (ann.pkey && (o.partition_key.len != ann.pkey_len ||
                     memcmp(out.p + o.partition_key.off, key, ann.pkey_len) != 0))
        abort();
    /* a batch's inner message stored with the outer key: the key alone */
    mqd_msg_ann_t only = { .pkey = key, .pkey_len = sizeof(key) - 1,
                           .delivery_count = mi->delivery_count, .pkey_only = true };
    if (mqd_msg_annotate(data, size, mi, &only, &out) != 0 ||
        mqd_msg_scan(out.p, out.len, &o) != 0 || o.partition_key.len != only.pkey_len ||
        memcmp(out.p + o.partition_key.off, key, only.pkey_len) != 0)
        abort();
    mqd_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mqd_msg_info_t mi;
    int parts = 0;

    mqd_msg_info_t st;
    int rs = mqd_msg_scan_stored(data, size, &st);
    if (mqd_msg_scan(data, size, &mi) == 0) {
        if (rs != 0 || memcmp(&mi, &st, sizeof(mi)) != 0)
            abort();
        check_annotate(data, size, &mi);
    } else if (rs == 0) {
        mqd_msg_ann_t ann = { .offset = 1, .delivery_count = 1 };
        mqd_buf_t out = { 0 };
        (void)mqd_msg_annotate(data, size, &st, &ann, &out); /* any result, but bounded */
        mqd_buf_free(&out);
    }
    (void)mqd_msg_batch_split(data, size, inner_scan, &parts);
    return 0;
}
