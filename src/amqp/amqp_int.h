/* amqp internals shared by the link handlers: link.c (events, producers, management) and
 * consumer.c (consumers, browsers). */
#ifndef MQD_AMQP_INT_H
#define MQD_AMQP_INT_H

#include "amqp/amqp.h"
#include "auth/auth.h"
#include "group/group.h"
#include "txn/txn.h"

/* amqp's part of a link state (core's mqd_lstate_t holds what other subsystems read too
 * and reaches this through mqd_ls_amqp): what only the link handlers use. mqd_lstate_new
 * allocates it with the link state and mqd_lstate_free frees both; a link state another
 * subsystem makes (repl/'s MQD_LS_REPL fetch links) has none (NULL). */
typedef struct mqd_alink {
    /* producer */
    bool fixed_part;      /* T/Partitions/N (the link state's `part`) */
    uint32_t sticky_left; /* round robin: messages left on the link state's `part` */
    uint8_t *acc;         /* a transfer arriving in several frames */
    size_t acc_len, acc_cap;
    bool acks_set; /* link property mqd:acks given */
    uint8_t acks;  /* its mqd_acks_t */
    bool fwd_in;   /* attached by another node for its client (mqd:fwd-user): never
                      forwarded again */
    bool batch_in; /* such a link with mqd:batch = true: every transfer on it is a batch
                      (message-format 0x80013700), which Proton's C API cannot set */
    char *fwd_name; /* a cluster topic this node holds no copy of: every message is
                       forwarded (src/fwd), the topic looked up again per message */
    /* producer credit (credit.c): granted since the connection's output generation
       credit_gen, so not yet shown to the peer; the largest message so far */
    int credit_unposted;
    uint64_t credit_gen;
    uint64_t msg_max;
    bool credit_shared;       /* counted among the producers sharing the disk budget */
    uint64_t credit_reserved; /* its part of that budget (watermark.c) */
    /* consumer, browser */
    uint64_t *browse_next; /* browser, selective consumer: next offset per partition */
    uint32_t browse_n;     /* entries in browse_next (partitions when attached) */
    mqd_read_t *brd;       /* browser: records read ahead from partition brd_part */
    uint32_t brd_part;
    size_t brd_i; /* next record in brd to deliver */
    bool queue_view; /* browser of a queue: shows what $shared has not settled (consumer.c) */
    /* A consumer with a selector on the shared group scans with browse_next/brd too, and
       looks at the group's released records from sel_rdi on; per partition, sel_gen is
       the redelivery list's generation since which sel_looked entries were looked at
       and none selected (consumer.c). */
    size_t sel_rdi;
    uint32_t sel_work; /* records looked at this loop turn (reset by run_later) */
    uint64_t *sel_gen;
    size_t *sel_looked;
    uint64_t unsettled;       /* deliveries not yet settled */
    mqd_start_t start;        /* start position from the source filter */
    struct mqd_selector *sel; /* property selector, or NULL */
} mqd_alink_t;

/* Refuses the attach with amqp:link:redirect naming `to` (AMQP 1.0 2.8.17). */
void mqd_link_redirect(pn_link_t *l, const mqd_redirect_t *to);
/* In a cluster, where a link to partition part (-1: the whole topic) of `topic` belongs
 * (the repl hook `route`; t: this node's copy or NULL): MQD_ROUTE_HERE to go on; after
 * MQD_ROUTE_REDIRECT or _REFUSE l was answered; after MQD_ROUTE_WAIT it is left unanswered,
 * with no link state, until mqd_amqp_attach_again runs its attach again. */
int mqd_link_route(mqd_conn_t *c, pn_link_t *l, const char *topic, int64_t part, mqd_topic_t *t);
/* redirect.c: the value of the link's property `key` (a symbol or string key in the
 * attach's properties map): the link's remote properties positioned on it, inside the
 * map (pn_data_exit once it is read); NULL when absent. */
pn_data_t *mqd_link_prop(pn_link_t *l, const char *key);
/* redirect.c: sets cond to `name` with `desc` and the redirect's info map (AMQP 1.0
 * 2.8.17): network-host and port of `to`, then for a connection also hostname, for a
 * link the address to attach to. */
void mqd_redirect_condition(pn_condition_t *cond, const char *name, const char *desc,
                            const mqd_redirect_t *to, bool connection);
/* redirect.c: did the attach ask for amqp:link:redirect (link property mqd:redirect =
 * true, or the desired capability amqp:link:redirect on the attach, as the frame peek saw
 * it, or on its connection's open)? mqd_link_route answers such a link with the redirect
 * whenever its partition is led elsewhere. */
bool mqd_link_wants_redirect(pn_link_t *l);
/* redirect.c, at every client attach: true when the attach was answered here: refused for
 * a link property mqd:redirect that is not a boolean, or its connection closed with
 * amqp:connection:redirect (connection_redirect; repl's conn_redirect hook chose where). */
bool mqd_link_attach_redirects(mqd_conn_t *c, pn_link_t *l);
/* The same in two steps: the verdict alone (nothing answered yet; ans holds where or
 * why), then answering l as mqd_link_route does (a receiver whose partitions are led
 * elsewhere is forwarded instead: consumer.c). */
typedef struct mqd_route_ans {
    mqd_redirect_t to;
    const char *cond;
    char err[512];
} mqd_route_ans_t;
int mqd_link_route_ask(mqd_conn_t *c, const char *topic, int64_t part, mqd_topic_t *t,
                       mqd_route_ans_t *ans);
void mqd_link_route_act(mqd_conn_t *c, pn_link_t *l, const char *topic, int how,
                        const mqd_route_ans_t *ans);
/* The client's user a node forwarding a link for it names (link property mqd:fwd-user),
 * copied into buf: honoured only on a connection of another node (a node certificate's
 * login, or replication_user when that is set); NULL on any other connection, where the
 * connection's own user counts. *present: the link carries the property (a forwarded
 * link, whichever connection it came on). */
const char *mqd_link_fwd_user(mqd_conn_t *c, pn_link_t *l, char *buf, size_t cap, bool *present);
/* Allocates a link state and makes it the link's context. */
mqd_lstate_t *mqd_lstate_new(mqd_conn_t *c, pn_link_t *l, mqd_ls_kind_t kind);

/* May c auto-create `topic` (config + the `create` permission)? */
bool mqd_may_create(mqd_conn_t *c, const char *topic);
/* The topic does not exist and would be created on first use but for the ACL, which
 * gives c no `create` right on it: the link is refused with amqp:unauthorized-access
 * and MQD_CREATE_FORBIDDEN (one %s: the topic), not amqp:not-found. */
bool mqd_create_forbidden(mqd_conn_t *c, const char *topic);
#define MQD_CREATE_FORBIDDEN                                                                       \
    "not allowed to create topic '%s': the ACL grants no 'create' right on it"

/* credit.c: producer link credit (AMQP 1.0 2.6.7), the disk budget's windows.
 * mqd_credit_grant: pn_link_flow(n), remembered as not yet shown to the peer.
 * mqd_credit_arrived: first sight of d (the link's current delivery) counts it; false
 * when it was sent beyond the credit the peer had been shown. Later frames: true.
 * mqd_credit_exceeded: detaches the link with amqp:link:transfer-limit-exceeded.
 * mqd_credit_refill: tops the link's credit up as link_credit, the watermarks and the
 * disk budget allow; returns the credit granted. */
void mqd_credit_grant(mqd_lstate_t *ls, int n);
bool mqd_credit_arrived(mqd_lstate_t *ls, pn_delivery_t *d);
void mqd_credit_exceeded(mqd_lstate_t *ls);
int mqd_credit_refill(mqd_lstate_t *ls);
/* The link state goes: it no longer shares the disk budget. */
void mqd_credit_free(mqd_lstate_t *ls);

/* linkname.c: a second attach of l's name and role by the same peer container detaches
 * the older link with amqp:link:stolen (AMQP 1.0 2.6.1). */
void mqd_link_steal(mqd_conn_t *c, pn_link_t *l);

/* reply.c: reply nodes, the temporary nodes of `$management` and `$cbs` replies (see
 * there and docs/security.md, "Reply nodes").
 * mqd_reply_attach: the node a receiver from `$management` or `$cbs` reads (made if
 * needed): its connection's node for its target address (for `$cbs` with none: its
 * link name). 0, or l is refused.
 * mqd_reply_resolve: the node a reply to `to[0..len)` goes to, into name[namelen]: c's
 * node for that reply address, else c's dynamic node of that address. MQD_ENOENT when
 * c has neither: the request is refused, not run.
 * mqd_reply_may_read: false for another connection's temporary node (`$tmp.`). */
int mqd_reply_attach(mqd_conn_t *c, pn_link_t *l, bool cbs, mqd_topic_t **out);
int mqd_reply_resolve(mqd_conn_t *c, const char *to, size_t len, char *name, size_t namelen);
bool mqd_reply_may_read(mqd_conn_t *c, const char *topic);
/* Is addr a Service Bus entity's management node, `<entity>/$management` (the
 * @azure/service-bus SDK's request/response links; docs/servicebus.md)? The entity (a
 * valid topic name) into entity[len] unless entity is NULL. Its receivers read a reply node as `$management`'s
 * do; its requests go to mqd_mgmt_entity_handle. */
bool mqd_reply_entity_node(const char *addr, char *entity, size_t len);

/* sbus.c: Service Bus dead-lettering (docs/servicebus.md). mqd_sbus_dead_letter_of: was
 * d rejected with com.microsoft:dead-letter (the SDK's deadLetterMessage)? Then its
 * DeadLetterReason and DeadLetterErrorDescription into dl. mqd_sbus_dead_letter_props:
 * the message in[] with those as application properties, into out; 0 or MQD_E*. */
typedef struct mqd_sbus_dl {
    char reason[256];
    char desc[512];
} mqd_sbus_dl_t;
bool mqd_sbus_dead_letter_of(pn_delivery_t *d, mqd_sbus_dl_t *dl);
int mqd_sbus_dead_letter_props(const mqd_buf_t *in, const mqd_sbus_dl_t *dl, mqd_buf_t *out);
/* consumer.c: mqd_core_ops_t's dead_letter (mgmt's update-disposition "suspended"). */
void mqd_consumer_dead_letter(mqd_topic_t *t, uint32_t part, uint64_t off, const char *reason,
                              const char *desc);

/* consumer.c */
void mqd_consumer_attach(mqd_conn_t *c, pn_link_t *l);
void mqd_consumer_disposition(mqd_lstate_t *ls, pn_delivery_t *d);
/* Releases what a consumer/browser link holds and leaves its group (lstate freed by the caller). */
void mqd_consumer_free(mqd_lstate_t *ls);

#endif
