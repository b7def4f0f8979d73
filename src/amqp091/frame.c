/* amqp091/frame: the client's bytes -> frames, methods and content headers. Framing is
 * mqd's (bounded by the negotiated frame_max, checked frame-end); the method arguments,
 * properties and field tables are decoded by librabbitmq's codec (amqp_decode_method,
 * amqp_decode_properties), whose decoders check every length against the frame. */
#include "config.h"
#include "amqp091/amqp091_int.h"

#include <string.h>

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int a091_frame_next(const uint8_t *p, size_t n, uint32_t frame_max, a091_frame_t *f, size_t *used,
                    const char **why)
{
    if (n < 7)
        return 0;
    uint8_t type = p[0];
    if (type != AMQP_FRAME_METHOD && type != AMQP_FRAME_HEADER && type != AMQP_FRAME_BODY &&
        type != AMQP_FRAME_HEARTBEAT) {
        *why = "unknown frame type";
        return A091_FRAME_ERROR;
    }
    uint32_t size = rd32(p + 3);
    if ((uint64_t)size + 8 > frame_max) {
        *why = "frame larger than frame_max";
        return A091_FRAME_ERROR;
    }
    if (n < (size_t)size + 8)
        return 0;
    if (p[7 + size] != AMQP_FRAME_END) {
        *why = "frame-end octet missing";
        return A091_FRAME_ERROR;
    }
    f->type = type;
    f->channel = (uint16_t)(p[1] << 8 | p[2]);
    f->payload = p + 7;
    f->size = size;
    *used = (size_t)size + 8;
    return 1;
}

int a091_method_decode(const a091_frame_t *f, amqp_pool_t *pool, amqp_method_number_t *id,
                       void **decoded, const char **why)
{
    if (f->size < 4) {
        *why = "method frame shorter than its class and method ids";
        return A091_FRAME_ERROR;
    }
    *id = rd32(f->payload);
    if (!amqp_method_name(*id)) {
        *why = "unknown method";
        return A091_COMMAND_INVALID;
    }
    amqp_bytes_t enc = {.len = f->size - 4, .bytes = (void *)(f->payload + 4)};
    int rc = amqp_decode_method(*id, pool, enc, decoded);
    if (rc == AMQP_STATUS_UNKNOWN_METHOD) {
        *why = "unknown method";
        return A091_COMMAND_INVALID;
    }
    if (rc != 0) {
        *why = "malformed method arguments";
        return A091_SYNTAX_ERROR;
    }
    return 0;
}

int a091_header_decode(const a091_frame_t *f, amqp_pool_t *pool, uint64_t *body_size,
                       amqp_basic_properties_t **props, const char **why)
{
    if (f->size < 14) {
        *why = "content header too short";
        return A091_FRAME_ERROR;
    }
    uint16_t cls = (uint16_t)(f->payload[0] << 8 | f->payload[1]);
    if (cls != AMQP_BASIC_CLASS) {
        *why = "content header of a class other than basic";
        return A091_UNEXPECTED_FRAME;
    }
    *body_size = (uint64_t)rd32(f->payload + 4) << 32 | rd32(f->payload + 8);
    amqp_bytes_t enc = {.len = f->size - 12, .bytes = (void *)(f->payload + 12)};
    void *d = NULL;
    if (amqp_decode_properties(cls, pool, enc, &d) != 0 || !d) {
        *why = "malformed content properties";
        return A091_SYNTAX_ERROR;
    }
    *props = d;
    return 0;
}

/* The parser alone, as the connection runs it (fuzz target). */
/* What the connection does with a decoded queue.bind or content header that needs no
 * broker state: a headers binding's arguments (parsed, stored form loaded back), a
 * topic pattern against the last routing key, a message's headers against the binding. */
static void parse_route(amqp_method_number_t id, const void *m, a091_hdr_t *hdr, char rk[256])
{
    if (id == AMQP_QUEUE_BIND_METHOD) {
        const amqp_queue_bind_t *b = m;
        char pat[256];
        const char *why = NULL;
        a091_cstr(b->routing_key, pat);
        (void)a091_topic_match(pat, rk);
        a091_hdr_t h = {0}, back = {0};
        if (a091_headers_parse(&b->arguments, &h, &why) == 0 && h.args &&
            a091_headers_load(h.args, &back) == 0) {
            a091_headers_clear(hdr);
            *hdr = back;
            back = (a091_hdr_t){0};
        }
        a091_headers_clear(&h);
        a091_headers_clear(&back);
    } else if (id == AMQP_BASIC_PUBLISH_METHOD) {
        a091_cstr(((const amqp_basic_publish_t *)m)->routing_key, rk);
    } else if (id == 0 && hdr->match) {
        const amqp_basic_properties_t *props = m;
        if (props->_flags & AMQP_BASIC_HEADERS_FLAG)
            (void)a091_headers_match(hdr, &props->headers);
    }
}

int mqd_amqp091_parse(const uint8_t *p, size_t n, uint32_t frame_max)
{
    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    a091_hdr_t hdr = {0};
    char rk[256] = "";
    int rc = 0;
    for (size_t guard = 0; guard < 100000 && rc == 0; guard++) {
        a091_frame_t f;
        size_t used = 0;
        const char *why = NULL;
        int k = a091_frame_next(p, n, frame_max, &f, &used, &why);
        if (k != 1) {
            rc = k;
            break;
        }
        if (f.type == AMQP_FRAME_METHOD) {
            amqp_method_number_t id;
            void *m;
            rc = a091_method_decode(&f, &pool, &id, &m, &why);
            if (rc == 0)
                parse_route(id, m, &hdr, rk);
        } else if (f.type == AMQP_FRAME_HEADER) {
            uint64_t size;
            amqp_basic_properties_t *props;
            rc = a091_header_decode(&f, &pool, &size, &props, &why);
            if (rc == 0)
                parse_route(0, props, &hdr, rk);
        }
        recycle_amqp_pool(&pool);
        p += used;
        n -= used;
    }
    empty_amqp_pool(&pool);
    a091_headers_clear(&hdr);
    return rc;
}
