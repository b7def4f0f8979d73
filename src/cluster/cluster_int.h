/* cluster internals: the etcd gateway's JSON codec (etcd_json.c), the watch-stream line
 * splitter, shared by the transport (etcd.c), the member (member.c), the unit tests and
 * the fuzz target. Nothing here touches the network. */
#ifndef MQD_CLUSTER_INT_H
#define MQD_CLUSTER_INT_H

#include "cluster/cluster.h"

/* base64 (OpenSSL EVP). Encode: *out is a NUL-terminated malloc'd string. Decode: *out is
 * malloc'd with a NUL after *outlen bytes; MQD_EINVAL on anything that is not base64. */
int mqd_etcd_b64_encode(const void *in, size_t n, char **out);
int mqd_etcd_b64_decode(const char *in, size_t n, char **out, size_t *outlen);

/* Request bodies (malloc'd JSON text, or NULL when out of memory). prefix: range_end is
 * the key with its last byte raised by one (every key under it). */
char *mqd_etcd_json_put(const char *key, size_t klen, const char *val, size_t vlen, int64_t lease);
char *mqd_etcd_json_range(const char *key, size_t klen, bool prefix);
char *mqd_etcd_json_delete(const char *key, size_t klen, bool prefix);
char *mqd_etcd_json_txn(const mqd_etcd_txn_t *t);
char *mqd_etcd_json_lease_grant(int64_t ttl_s);
char *mqd_etcd_json_lease_id(int64_t id); /* keepalive and revoke */
char *mqd_etcd_json_watch(const char *key, size_t klen, bool prefix, int64_t start_rev);

/* What a reply is the answer to: decides which fields are read. */
typedef enum {
    MQD_ETCD_K_PUT,
    MQD_ETCD_K_RANGE,
    MQD_ETCD_K_DELETE,
    MQD_ETCD_K_TXN,
    MQD_ETCD_K_GRANT,
    MQD_ETCD_K_KEEPALIVE,
    MQD_ETCD_K_REVOKE,
} mqd_etcd_kind_t;

/* Parses an HTTP answer (status, body) into out (zeroed first; free its contents with
 * mqd_etcd_reply_clear). Sets and returns out->rc. Numbers are 64-bit whether etcd wrote
 * them as strings or as numbers; fields etcd left out read as 0 / false. */
int mqd_etcd_reply_parse(mqd_etcd_kind_t kind, int http_status, const char *body, size_t n,
                         mqd_etcd_reply_t *out);
void mqd_etcd_reply_clear(mqd_etcd_reply_t *r);
void mqd_etcd_kvs_free(mqd_etcd_kv_t *kvs, size_t n);

/* One message of a watch stream. */
typedef struct mqd_etcd_watch_msg {
    int64_t revision; /* header.revision */
    int64_t watch_id;
    bool created, canceled;
    int64_t compact_revision; /* canceled because start_revision was compacted */
    char *error;              /* a stream error's or cancel_reason's message, or NULL */
    mqd_etcd_kv_t *kvs;       /* one per event, in order */
    mqd_etcd_ev_t *types;     /* MQD_ETCD_EV_PUT or _DELETE per event */
    size_t n_events;
} mqd_etcd_watch_msg_t;
int mqd_etcd_watch_parse(const char *line, size_t n, mqd_etcd_watch_msg_t *out);
void mqd_etcd_watch_msg_clear(mqd_etcd_watch_msg_t *m);

/* A watch stream arrives in chunks that split or join its newline-separated messages. */
#define MQD_ETCD_LINE_MAX (16u << 20)
typedef struct mqd_etcd_lines {
    char *buf;
    size_t len, cap;
} mqd_etcd_lines_t;
/* Appends data and calls cb for every complete line (without its "\n" or "\r\n"; empty
 * lines skipped); keeps the rest. MQD_ETOOBIG when a line passes MQD_ETCD_LINE_MAX, or
 * cb's own negative return, stops it. */
int mqd_etcd_lines_feed(mqd_etcd_lines_t *l, const char *data, size_t n,
                        int (*cb)(void *arg, const char *line, size_t len), void *arg);
void mqd_etcd_lines_free(mqd_etcd_lines_t *l);

/* The values under /<cluster_name>/ (member_json.c). A node: {"id","address","rack",
 * "started"}; the controller key: {"id"}. Parsing is of outside input: anything but an
 * object with a positive id that fits uint32 is MQD_ECORRUPT. */
char *mqd_cluster_node_json(const mqd_cluster_node_t *n);
int mqd_cluster_node_parse(const char *json, size_t n, mqd_cluster_node_t *out);
char *mqd_cluster_ctl_json(uint32_t id);
int mqd_cluster_ctl_parse(const char *json, size_t n, uint32_t *id);

/* transport internals shared by etcd.c and etcd_watch.c */
struct evhttp_connection;
struct evhttp_request;
void mqd_etcd_reap(mqd_etcd_t *e, struct evhttp_connection *conn, void *also);
struct evhttp_connection *mqd_etcd_post(mqd_etcd_t *e, const char *path, const char *body,
                                        uint32_t timeout_ms,
                                        void (*done)(struct evhttp_request *, void *),
                                        void (*chunk)(struct evhttp_request *, void *), void *arg);
void mqd_etcd_next_endpoint(mqd_etcd_t *e, size_t failed);
size_t mqd_etcd_cur(const mqd_etcd_t *e);
struct event_base *mqd_etcd_base(const mqd_etcd_t *e);

#endif
