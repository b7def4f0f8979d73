/* Fuzz target: everything mqd reads from etcd's v3 JSON gateway (src/cluster): replies of
 * every kind, watch-stream chunks split into messages, the membership values, base64.
 * The first byte picks the parser and (for the stream) where the chunks are cut. */
#include "config.h"
#include "cluster/cluster_int.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

static int on_line(void *arg, const char *line, size_t len)
{
    mqd_etcd_watch_msg_t m;
    size_t *n = arg;
    if (mqd_etcd_watch_parse(line, len, &m) == 0) {
        for (size_t i = 0; i < m.n_events; i++)
            if (m.kvs[i].key == NULL || m.kvs[i].value == NULL ||
                m.kvs[i].key[m.kvs[i].key_len] != '\0')
                abort();
        mqd_etcd_watch_msg_clear(&m);
    }
    (*n)++;
    return 0;
}

static void stream(const char *d, size_t size, size_t step)
{
    mqd_etcd_lines_t l = {0};
    size_t n = 0;
    for (size_t off = 0; off < size; off += step)
        if (mqd_etcd_lines_feed(&l, d + off, size - off < step ? size - off : step, on_line, &n) !=
            0)
            break;
    mqd_etcd_lines_free(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned sel = data[0];
    const char *d = (const char *)data + 1;
    size--;
    mqd_etcd_reply_t r;
    mqd_cluster_node_t nd;
    uint32_t id;
    char *out;
    size_t n;
    switch (sel % 10) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4:
    case 5:
    case 6:
        if (mqd_etcd_reply_parse((mqd_etcd_kind_t)(sel % 10), sel & 0x80 ? 404 : 200, d, size,
                                 &r) == 0)
            for (size_t i = 0; i < r.n_kvs; i++)
                if (r.kvs[i].key[r.kvs[i].key_len] != '\0' ||
                    r.kvs[i].value[r.kvs[i].value_len] != '\0')
                    abort();
        mqd_etcd_reply_clear(&r);
        break;
    case 7: stream(d, size, 1 + (sel >> 4)); break;
    case 8:
        if (mqd_cluster_node_parse(d, size, &nd) == 0 && nd.id == 0)
            abort();
        if (mqd_cluster_ctl_parse(d, size, &id) == 0 && id == 0)
            abort();
        break;
    case 9:
        if (mqd_etcd_b64_decode(d, size, &out, &n) == 0) {
            /* what decodes encodes to as many characters and decodes back the same (the
             * text itself may differ: unused low bits of the last character are ignored) */
            char *again, *back;
            size_t n2;
            if (mqd_etcd_b64_encode(out, n, &again) != 0 || strlen(again) != size ||
                mqd_etcd_b64_decode(again, size, &back, &n2) != 0 || n2 != n ||
                memcmp(back, out, n) != 0)
                abort();
            free(back);
            free(again);
            free(out);
        }
        break;
    }
    return 0;
}
