/* amqp091 internals: connection, channels, consumers (amqp091.h says what it is). */
#ifndef MQD_AMQP091_INT_H
#define MQD_AMQP091_INT_H

#include "amqp091/amqp091.h"

#include <amqp.h>
#include <amqp_framing.h>
#include <event2/event.h>

/* reply codes (0-9-1 spec, section 1.2) */
enum {
    A091_REPLY_SUCCESS = 200,
    A091_CONTENT_TOO_LARGE = 311,
    A091_NO_ROUTE = 312,
    A091_CONNECTION_FORCED = 320,
    A091_ACCESS_REFUSED = 403,
    A091_NOT_FOUND = 404,
    A091_PRECONDITION_FAILED = 406,
    A091_FRAME_ERROR = 501,
    A091_SYNTAX_ERROR = 502,
    A091_COMMAND_INVALID = 503,
    A091_CHANNEL_ERROR = 504,
    A091_UNEXPECTED_FRAME = 505,
    A091_RESOURCE_ERROR = 506,
    A091_NOT_ALLOWED = 530,
    A091_NOT_IMPLEMENTED = 540,
    A091_INTERNAL_ERROR = 541,
};

#define A091_FRAME_MAX 131072u /* offered in connection.tune */
#define A091_FRAME_MIN 4096u   /* the spec's least frame_max; before tune-ok */
#define A091_CHANNEL_MAX 256u
#define A091_HEARTBEAT 60u

static inline int64_t a091_mono_ms(void)
{
    return (int64_t)(mqd_mono_ns() / 1000000u);
}

/* ---- frame.c: framing and the codec (librabbitmq's method/property codec) ---- */
typedef struct a091_frame {
    uint8_t type; /* AMQP_FRAME_METHOD, _HEADER, _BODY, _HEARTBEAT */
    uint16_t channel;
    const uint8_t *payload;
    uint32_t size;
} a091_frame_t;

/* One frame off p[0..n): 1 (*f, *used set), 0 (needs more bytes), or a reply code
 * (*why says what) for a frame that cannot be: bad type, over frame_max, no frame-end. */
int a091_frame_next(const uint8_t *p, size_t n, uint32_t frame_max, a091_frame_t *f, size_t *used,
                    const char **why);
/* A method frame's method; 0 or a reply code (503 unknown method, 502 malformed). */
int a091_method_decode(const a091_frame_t *f, amqp_pool_t *pool, amqp_method_number_t *id,
                       void **decoded, const char **why);
/* A content header of class basic: body size and properties; 0 or a reply code. */
int a091_header_decode(const a091_frame_t *f, amqp_pool_t *pool, uint64_t *body_size,
                       amqp_basic_properties_t **props, const char **why);

/* ---- conn.c ---- */
typedef struct a091_conn a091_conn_t;
typedef struct a091_chan a091_chan_t;

/* A delivery not yet acked: which record of which topic it is. */
typedef struct a091_unacked {
    uint64_t tag;
    uint64_t offset;
    uint32_t part;
    struct a091_consumer *cons; /* NULL: basic.get */
    bool stream;                /* a stream consumer's: an ack only frees a prefetch slot */
    char *topic;                /* the queue's name (owned) */
    void *fx;                   /* read through the leaders (fwd's ext consumer): its id */
    uint64_t fid;
} a091_unacked_t;

typedef struct a091_consumer {
    struct a091_consumer *next;
    char *tag;
    char *topic;
    bool no_ack;
    uint32_t rr; /* next partition to look at */
    void *fx;    /* cluster: read through the partitions' leaders (fwd's ext consumer) */
    /* x-stream-offset (stream.c): its own position per partition, its own reads */
    bool stream;
    uint64_t *pos;
    uint32_t nparts;
    mqd_read_t rd;
    size_t rd_pos;
    uint32_t rd_part;
} a091_consumer_t;

struct a091_chan {
    uint16_t id;
    bool open;
    bool closing;     /* channel.close sent, waiting for close-ok */
    bool confirm;     /* confirm.select */
    uint8_t gen;      /* bumped at every open: a late confirm of an earlier one is dropped */
    uint64_t pub_seq; /* publishes since confirm.select */
    /* a publish being assembled: method, then header, then body frames */
    int pub_state; /* 0 none, 1 header expected, 2 body expected */
    char *pub_exchange, *pub_rkey;
    bool pub_mandatory;
    amqp_pool_t pool; /* the publish's properties */
    amqp_basic_properties_t *pub_props;
    uint8_t *body;
    size_t body_len, body_size;
    uint32_t rr; /* partition round robin of publishes */
    /* consumers and deliveries */
    a091_consumer_t *consumers;
    uint16_t prefetch; /* basic.qos prefetch_count, 0 = none */
    uint64_t next_dtag;
    a091_unacked_t *unacked; /* ascending tags */
    size_t n_unacked, cap_unacked;
    void *get_fx; /* basic.get of a queue read through the leaders: fwd's consumer */
    char *get_q;
    struct a091_tx *tx; /* tx.select: publishes and acks kept until tx.commit (tx.c) */
};

struct a091_conn {
    a091_conn_t *next, **pprev;
    mqd_server_t *srv;
    int fd;
    struct ssl_st *ssl; /* a TLS listener's: its records are run here (SSL_read/SSL_write) */
    char peer[64];
    char user[128];
    int state;
    bool dead;     /* socket closed; freed when nothing refers to it any more */
    bool writing;  /* ev_write pending */
    bool rx_paused; /* ev_read removed: output backlog, a login under check, blocked */
    bool published;   /* has published: blocked with the disk or memory watermark */
    bool blocked;     /* so: its input is not read */
    bool blocked_cap; /* the client takes connection.blocked (its capabilities) */
    unsigned refs; /* pending confirms, a password check, the conn itself */
    struct event *ev_read, *ev_write, *ev_timer;
    uint8_t *in;
    size_t in_len, in_cap;
    uint8_t *out;
    size_t out_len, out_off, out_cap;
    uint32_t frame_max;
    uint16_t channel_max;
    uint16_t heartbeat;
    int64_t last_rx_ms, last_tx_ms, opened_ms;
    a091_chan_t **chans;                /* [A091_CHANNEL_MAX + 1] */
    uint8_t gens[A091_CHANNEL_MAX + 1]; /* opens of each channel number (confirm tags) */
    amqp_pool_t pool;                   /* the frame being handled */
};

enum { A091_HDR, A091_START_OK, A091_AUTH, A091_TUNE_OK, A091_OPEN, A091_UP, A091_CLOSING };

void a091_conn_ref(a091_conn_t *c);
void a091_conn_unref(a091_conn_t *c);
/* Frames out (queued; written at the end of the event) */
int a091_send_method(a091_conn_t *c, uint16_t ch, amqp_method_number_t id, void *m);
int a091_send_content(a091_conn_t *c, uint16_t ch, const amqp_basic_properties_t *props,
                      const uint8_t *body, size_t len);
/* connection.close with a reply code; input is dropped from now on */
void a091_conn_error(a091_conn_t *c, int code, const char *text, amqp_method_number_t cause);
void a091_flush(a091_conn_t *c);
/* A publishing connection stops being read while a watermark is exceeded (and is told
 * connection.blocked when its client takes it), and is read again after. */
void a091_block_check(a091_conn_t *c);
bool a091_may(a091_conn_t *c, int perm, const char *topic);
a091_conn_t *a091_conns_head(void);

/* ---- chan.c: channel class, queue class, basic.publish, confirm ---- */
int a091_chan_method(a091_conn_t *c, uint16_t ch, amqp_method_number_t id, void *m);
int a091_chan_header(a091_conn_t *c, a091_chan_t *ch, const a091_frame_t *f);
int a091_chan_body(a091_conn_t *c, a091_chan_t *ch, const a091_frame_t *f);
void a091_chan_error(a091_conn_t *c, a091_chan_t *ch, int code, const char *text,
                     amqp_method_number_t cause);
void a091_chan_free(a091_conn_t *c, a091_chan_t *ch);
/* a091_chan_error with the text fmt (one %s: arg); returns code */
int a091_chan_fail(a091_conn_t *c, a091_chan_t *ch, int code, const char *fmt, const char *arg,
                   amqp_method_number_t cause);
/* a short string as a C string of at most 255 bytes (a NUL in it ends it early) */
void a091_cstr(amqp_bytes_t b, char out[256]);

/* The queue (topic) a queue method names, created by a declare when allowed (create);
 * NULL after the channel error. Any right on it lets a client see that it exists. */
mqd_topic_t *a091_queue_topic(a091_conn_t *c, a091_chan_t *ch, const char *q, bool create,
                              amqp_method_number_t id);

/* ---- match.c: how a binding matches (no broker state: the fuzz target runs it) ---- */
/* A topic-exchange pattern (`*` one word, `#` zero or more) against a routing key */
bool a091_topic_match(const char *pattern, const char *key);
/* A headers binding: x-match, the headers it compares (name -> canonical value) and its
 * arguments in the canonical JSON kept in meta.db */
struct json_t;
typedef struct a091_hdr {
    int xmatch;
    struct json_t *match;
    char *args;
} a091_hdr_t;
/* From queue.bind's arguments: 0, or 406 (*why: a bad x-match, a value of a type not
 * compared) or 541 */
int a091_headers_parse(const amqp_table_t *args, a091_hdr_t *b, const char **why);
/* From the stored form: 0 or MQD_EINVAL / MQD_ENOMEM */
int a091_headers_load(const char *args_json, a091_hdr_t *b);
bool a091_headers_match(const a091_hdr_t *b, const amqp_table_t *headers);
void a091_headers_clear(a091_hdr_t *b);

/* ---- exch.c: exchanges, bindings, routing ---- */
/* exchange.declare / delete, queue.bind / unbind (exchange.bind: 540) */
int a091_exchange_method(a091_conn_t *c, a091_chan_t *ch, amqp_method_number_t id, void *m);
/* The queues a publish goes to (each once; names borrowed until the next exchange or
 * binding change, i.e. within the event) */
typedef struct a091_targets {
    const char **q;
    size_t n, cap;
} a091_targets_t;
void a091_targets_free(a091_targets_t *t);
/* 0 (the exchange may be published to), 404 (no such exchange), 403 (internal) */
int a091_exchange_check(a091_conn_t *c, const char *ex);
/* Adds to out the queues exchange ex routes rk (and headers) to: 0, 404 or MQD_ENOMEM. */
int a091_route(a091_conn_t *c, const char *ex, const char *rk, const amqp_table_t *headers,
               a091_targets_t *out);
/* queue.delete: the queue's bindings go (meta.db's went with the topic's row) */
void a091_exch_queue_gone(const char *q);
void a091_exch_free(void);

/* ---- chan.c: stores and confirms ---- */
/* One publish's (or one tx.commit's) outcome over its stores: a091_store adds one per
 * store; a091_multi_done gives back the creator's hold. */
typedef struct a091_multi a091_multi_t;
a091_multi_t *a091_multi_new(a091_conn_t *c, a091_chan_t *ch, uint64_t tag, bool commit);
void a091_multi_done(a091_multi_t *mu);
void a091_store(a091_conn_t *c, a091_chan_t *ch, const char *topic, const struct mqd_buf *buf,
                a091_multi_t *mu);

/* ---- tx.c: tx.select / commit / rollback ---- */
typedef struct a091_tx a091_tx_t;
int a091_tx_method(a091_conn_t *c, a091_chan_t *ch, amqp_method_number_t id);
/* A publish (routed to tg's queues) or an acknowledgement kept until the commit. */
int a091_tx_keep_publish(a091_conn_t *c, a091_chan_t *ch, const struct mqd_buf *msg,
                         const a091_targets_t *tg);
int a091_tx_keep_settle(a091_conn_t *c, a091_chan_t *ch, uint64_t tag, bool multiple, bool done,
                        amqp_method_number_t id);
/* chan.c: every store of the commit told (ok: all stored) */
void a091_tx_committed(a091_conn_t *c, a091_chan_t *ch, bool ok);
void a091_tx_free(a091_chan_t *ch);

/* ---- consume.c: basic.consume/cancel/qos/ack/nack/reject/get/recover, delivery ---- */
/* Applies an ack (done) or a requeue to the deliveries tag names: 0, or 406 after the
 * channel error for an unknown tag. */
int a091_settle_tags(a091_conn_t *c, a091_chan_t *ch, uint64_t tag, bool multiple, bool done,
                     amqp_method_number_t id);
int a091_basic_method(a091_conn_t *c, a091_chan_t *ch, amqp_method_number_t id, void *m);
void a091_release_all(a091_conn_t *c, a091_chan_t *ch); /* channel or connection closed */
void a091_pump(a091_conn_t *c);
void a091_topic_wake(mqd_topic_t *t);
void a091_wake_free(void);

/* ---- stream.c: x-stream-offset consumers ---- */
/* Sets k's positions on t from the argument's value: 0, or 406 for a value that is none
 * of first, last, next, an offset, a timestamp. */
int a091_stream_start(a091_consumer_t *k, mqd_topic_t *t, const amqp_field_value_t *spec);
void a091_stream_free(a091_consumer_t *k);
bool a091_stream_next(a091_conn_t *c, a091_consumer_t *k, mqd_rec_t *rec, uint32_t *part,
                      bool *gone);

/* ---- map.c: 0-9-1 properties <-> the stored AMQP 1.0 message ---- */
struct mqd_buf;
void a091_map_free(void);
/* Encodes props + body (and the exchange and routing key as annotations) as an AMQP 1.0
 * message into out. 0 or MQD_ENOMEM / MQD_EINVAL. */
int a091_map_to_amqp10(const amqp_basic_properties_t *props, const char *exchange, const char *rkey,
                       const uint8_t *body, size_t len, struct mqd_buf *out);
/* Decodes a stored AMQP 1.0 message into props (allocated in pool) and its body (a data
 * section's bytes, an amqp-value string or binary as its bytes, otherwise the encoded
 * value); *rt: its x-exchange and x-routing-key annotations (in pool), else NULL;
 * *dcount (when not NULL): its header's delivery-count. 0 or MQD_EINVAL. */
typedef struct a091_routed {
    char *exchange, *rkey;
} a091_routed_t;
int a091_map_from_amqp10(const uint8_t *msg, size_t len, amqp_pool_t *pool,
                         amqp_basic_properties_t *props, amqp_bytes_t *body, a091_routed_t *rt,
                         uint32_t *dcount);

#endif
