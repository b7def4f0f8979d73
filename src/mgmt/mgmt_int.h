/* mgmt internals: one request being answered, and the per-type operation tables. */
#ifndef MQD_MGMT_INT_H
#define MQD_MGMT_INT_H

#include "mqd.h"
#include "core/core.h"
#include "auth/auth.h"
#include "group/group.h"
#include "metrics/metrics.h"
#include "txn/txn.h"

#include <jansson.h>
#include <proton/codec.h>

struct mqd_server;
struct mqd_conn;

/* Type names (application property `type`). */
#define MQD_MGMT_T_TOPIC "com.mqd:topic"
#define MQD_MGMT_T_GROUP "com.mqd:consumergroup"
#define MQD_MGMT_T_CONN "com.mqd:connection"
#define MQD_MGMT_T_LINK "com.mqd:link"
#define MQD_MGMT_T_USER "com.mqd:user"
#define MQD_MGMT_T_ACL "com.mqd:acl"
#define MQD_MGMT_T_BROKER "com.mqd:broker"
#define MQD_MGMT_T_OWNERSHIP "com.mqd:ownership"
#define MQD_MGMT_T_CONFIG "com.mqd:config"
#define MQD_MGMT_T_CLUSTER "com.mqd:cluster"
#define MQD_MGMT_T_ROUTE "com.mqd:route"
#define MQD_MGMT_T_EVENTHUB "com.microsoft:eventhub"
#define MQD_MGMT_T_PARTITION "com.microsoft:partition"

typedef struct mqd_mgmt_req {
    struct mqd_server *s;
    struct mqd_conn *c;
    json_t *props;     /* application-properties as an object (owned; never NULL) */
    json_t *body;      /* amqp-value body when it is a map (owned), else NULL */
    const char *op;    /* borrowed from props */
    const char *type;
    const char *name;  /* may be NULL */
    pn_data_t *out;    /* reply body (the reply message's; borrowed) */
    int status;
    char desc[640];    /* statusDescription; empty = the status's standard text (a
                          reload's refusal quotes a 512-byte reason) */
    const uint8_t *req; /* the request message (borrowed; for mqd_mgmt_defer) */
    const char *reply_node; /* where its reply goes (borrowed; for mqd_mgmt_defer) */
    size_t req_len;
    bool deferred; /* the handler answers later (mqd_mgmt_finish): no reply now */
    const char *actor; /* who asks, for the log, when c is NULL (mqd_mgmt_call) */
    const char *cond;  /* a refusal's error-condition property (Service Bus), or NULL */
} mqd_mgmt_req_t;

/* An answer to send later: a copy of the request (its reply-to and ids). */
typedef struct mqd_mgmt_later mqd_mgmt_later_t;
/* Copies r's request and marks r deferred; NULL when out of memory (r unchanged). */
mqd_mgmt_later_t *mqd_mgmt_defer(mqd_mgmt_req_t *r);
/* Sends the reply (status, desc, and for a status < 300 the body `fill` writes) to the
 * request's reply-to node if it still exists, and frees l. */
void mqd_mgmt_finish(mqd_mgmt_later_t *l, int status, const char *desc,
                     void (*fill)(pn_data_t *body, void *arg), void *arg);
/* Frees l without an answer (shutdown). */
void mqd_mgmt_later_free(mqd_mgmt_later_t *l);

/* What an operation needs of its caller, by the entity it names (mgmt_access.c). */
typedef enum mqd_mgmt_need {
    MQD_MGMT_NODE_READ,    /* the node as a whole: monitor or manage on $management */
    MQD_MGMT_NODE_MANAGE,  /* manage on $management */
    MQD_MGMT_TOPIC_READ,   /* name = a topic: monitor or manage on it */
    MQD_MGMT_TOPIC_MANAGE, /* manage on it */
    MQD_MGMT_TOPIC_CREATE, /* a valid topic name (else 400, whoever asks) and manage on it */
    MQD_MGMT_TOPIC_PEEK,   /* monitor or manage, and browse, on it */
    MQD_MGMT_HUB_READ,     /* the Event Hubs READs: receive, monitor or manage on it */
    MQD_MGMT_GROUP_READ,   /* a group: monitor or manage on its topic */
    MQD_MGMT_GROUP_MANAGE, /* manage on its topic */
    MQD_MGMT_GROUP_LIST,   /* one topic's groups as GROUP_READ, every topic's as LIST */
    MQD_MGMT_LIST,         /* a listing: its handler shows only rows mqd_mgmt_may_read */
    MQD_MGMT_ROUTE_READ,   /* a topic's routes: send, receive, monitor or manage on it */
    MQD_MGMT_ROUTE_LIST,   /* every topic's routes: rows filtered by mqd_mgmt_may_route */
    MQD_MGMT_SELF,         /* its handler checks (ownership: receive on the topic) */
} mqd_mgmt_need_t;

/* A handler fills r->out and returns the status code (or calls mqd_mgmt_fail). It runs
 * only once mqd_mgmt_authorize allowed `need`. */
typedef struct mqd_mgmt_op {
    const char *type;
    const char *op;
    int (*fn)(mqd_mgmt_req_t *r);
    mqd_mgmt_need_t need;
} mqd_mgmt_op_t;

/* mgmt_access.c: 0 when r's caller may run op on what r names, else the status set in r
 * (401 not allowed, 400 when r does not name what op needs). Decided on the names alone,
 * before anything is looked up. */
int mqd_mgmt_authorize(mqd_mgmt_req_t *r, const mqd_mgmt_op_t *op);
/* mgmt_access.c: may r's caller see topic (monitor or manage on it)? For the rows of a
 * listing; never logs. */
bool mqd_mgmt_may_read(mqd_mgmt_req_t *r, const char *topic);
/* mgmt_access.c: may r's caller see topic's routes (send, receive, monitor or manage on
 * it)? For the rows of a listing; never logs. */
bool mqd_mgmt_may_route(mqd_mgmt_req_t *r, const char *topic);
/* mgmt_access.c: why `name` cannot be a topic that management creates (the address
 * grammar's topic name, src/route; not $tmp.*), or NULL. A NUL byte never gets this far
 * (mqd_mgmt_check_strings). */
const char *mqd_mgmt_bad_topic_name(const char *name);
/* mgmt_access.c: 0, or 400 when a string of r's properties or body holds a NUL byte. */
int mqd_mgmt_check_strings(mqd_mgmt_req_t *r);
/* mgmt_group.c: the topic a consumer-group request names (name "TOPIC/GROUP", or the
 * properties topic and group; with need_group false, as QUERY reads it, "" when none)
 * into topic[len]; 0, or the 400 set in r. */
int mqd_mgmt_group_topic(mqd_mgmt_req_t *r, bool need_group, char *topic, size_t len);
/* The same with the group's name too ("" when absent and not needed). */
int mqd_mgmt_group_ref(mqd_mgmt_req_t *r, bool need_group, char topic[MQD_NAME_MAX + 1],
                       char group[MQD_NAME_MAX + 1]);
/* mgmt_history.c: com.mqd:broker HISTORY (the console's charts) */
int mqd_mgmt_history(mqd_mgmt_req_t *r);
/* The topic a history series names into buf ("" for "broker"), or NULL when the series
 * is none of broker, topic/T, group/T/G (fuzzed: tests/fuzz/fuzz_mgmt.c). */
const char *mqd_mgmt_series_topic(const char *series, char *buf, size_t len);
/* mgmt_reset.c: a RESET's `partitions` ("0,2,5") into sel[0..n): 0, MQD_EINVAL (not such
 * a list), MQD_ERANGE (*bad: a partition >= n). Fuzzed (tests/fuzz/fuzz_mgmt.c). */
int mqd_mgmt_parse_partitions(const char *list, uint32_t n, bool *sel, long long *bad);
/* mgmt_reset.c: com.mqd:consumergroup RESET */
int mqd_mgmt_group_reset(mqd_mgmt_req_t *r);

extern const mqd_mgmt_op_t mqd_mgmt_topic_ops[];
extern const size_t mqd_mgmt_n_topic_ops;
extern const mqd_mgmt_op_t mqd_mgmt_group_ops[];
extern const size_t mqd_mgmt_n_group_ops;
extern const mqd_mgmt_op_t mqd_mgmt_owner_ops[];
extern const size_t mqd_mgmt_n_owner_ops;
extern const mqd_mgmt_op_t mqd_mgmt_config_ops[];
extern const size_t mqd_mgmt_n_config_ops;
extern const mqd_mgmt_op_t mqd_mgmt_route_ops[]; /* mgmt_route.c */
extern const size_t mqd_mgmt_n_route_ops;

/* mgmt_audit.c: whether operation op changes something (all but READ and QUERY), and
 * the audit log line of an answered (or refused, or deferred) request r. */
bool mqd_mgmt_audited(const char *op);
void mqd_mgmt_audit(mqd_mgmt_req_t *r);
extern const mqd_mgmt_op_t mqd_mgmt_user_ops[]; /* mgmt_users.c */
extern const size_t mqd_mgmt_n_user_ops;
/* mgmt_peek.c: PEEK of com.mqd:topic (records of one partition, never consumed) */
int mqd_mgmt_topic_peek(mqd_mgmt_req_t *r);
/* mgmt_sbus.c: runs a request to the Service Bus entity node `<entity>/$management`
 * (req[0..len), scanned into mi) into r. */
void mqd_mgmt_sbus_run(mqd_mgmt_req_t *r, const char *entity, const uint8_t *req, size_t len,
                       const mqd_msg_info_t *mi);
/* Who asked: the connection's user, mqd_mgmt_call's actor, or "anonymous". */
const char *mqd_mgmt_actor(const mqd_mgmt_req_t *r);

int mqd_mgmt_fail(mqd_mgmt_req_t *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int mqd_mgmt_status_of(int rc);
const char *mqd_mgmt_arg_str(mqd_mgmt_req_t *r, const char *key);
bool mqd_mgmt_arg_int(mqd_mgmt_req_t *r, const char *key, int64_t *out);

/* Map entries with string keys; v NULL -> null. */
void mqd_mgmt_kv_str(pn_data_t *d, const char *k, const char *v);
void mqd_mgmt_kv_long(pn_data_t *d, const char *k, int64_t v);
void mqd_mgmt_kv_int(pn_data_t *d, const char *k, int32_t v);
void mqd_mgmt_kv_bool(pn_data_t *d, const char *k, bool v);
void mqd_mgmt_kv_ts(pn_data_t *d, const char *k, int64_t ms);
void mqd_mgmt_kv_enter(pn_data_t *d, const char *k, bool list);

#endif
