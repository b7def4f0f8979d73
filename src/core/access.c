/* core: the accessors of the opaque structs (core.h, "accessors"). */
#include "core/core_int.h"

#include <stdio.h>
#include <stdlib.h>

bool mqd_core_txn_committed(mqd_server_t *s, uint64_t txn)
{
    return s->ops.txn_committed && s->ops.txn_committed(s, txn);
}

struct mqd_accept_guard *mqd_srv_accept_guard(const mqd_server_t *o)
{
    return o->accept_guard;
}
void mqd_srv_set_accept_guard(mqd_server_t *o, struct mqd_accept_guard *v)
{
    o->accept_guard = v;
}
void *mqd_srv_auth(const mqd_server_t *o)
{
    return o->auth;
}
void mqd_srv_set_auth(mqd_server_t *o, void *v)
{
    o->auth = v;
}
struct event_base *mqd_srv_base(const mqd_server_t *o)
{
    return o->base;
}
void mqd_srv_set_base(mqd_server_t *o, struct event_base *v)
{
    o->base = v;
}
mqd_read_t *mqd_srv_browse_rd(mqd_server_t *o)
{
    return &o->browse_rd;
}
uint64_t mqd_srv_budget_bytes(const mqd_server_t *o)
{
    return o->budget_bytes;
}
uint64_t mqd_srv_budget_closes(const mqd_server_t *o)
{
    return o->budget_closes;
}
mqd_dlist_t *mqd_srv_builds(mqd_server_t *o)
{
    return &o->builds;
}
mqd_conf_t *mqd_srv_conf(const mqd_server_t *o)
{
    return o->conf;
}
void mqd_srv_set_conf(mqd_server_t *o, mqd_conf_t *v)
{
    o->conf = v;
}
mqd_conf_hooks_t *mqd_srv_conf_hooks(const mqd_server_t *o)
{
    return o->conf_hooks;
}
char *mqd_srv_conf_path(const mqd_server_t *o)
{
    return o->conf_path;
}
void mqd_srv_set_conf_path(mqd_server_t *o, char *v)
{
    o->conf_path = v;
}
mqd_dlist_t *mqd_srv_conns(mqd_server_t *o)
{
    return &o->conns;
}
uint64_t mqd_srv_conns_accepted(const mqd_server_t *o)
{
    return o->conns_accepted;
}
void mqd_srv_set_conns_accepted(mqd_server_t *o, uint64_t v)
{
    o->conns_accepted = v;
}
uint64_t mqd_srv_conns_refused(const mqd_server_t *o)
{
    return o->conns_refused;
}
void mqd_srv_set_conns_refused(mqd_server_t *o, uint64_t v)
{
    o->conns_refused = v;
}
mqd_dlist_t *mqd_srv_dirty(mqd_server_t *o)
{
    return &o->dirty;
}
mqd_dlist_t *mqd_srv_dispatch_later(mqd_server_t *o)
{
    return &o->dispatch_later;
}
mqd_dlist_t *mqd_srv_dispatch_q(mqd_server_t *o)
{
    return &o->dispatch_q;
}
mqd_dlist_t *mqd_srv_drains(mqd_server_t *o)
{
    return &o->drains;
}
struct event *mqd_srv_ev_handover(const mqd_server_t *o)
{
    return o->ev_handover;
}
void mqd_srv_set_ev_handover(mqd_server_t *o, struct event *v)
{
    o->ev_handover = v;
}
struct event *mqd_srv_ev_later(const mqd_server_t *o)
{
    return o->ev_later;
}
void mqd_srv_set_ev_later(mqd_server_t *o, struct event *v)
{
    o->ev_later = v;
}
struct event *mqd_srv_ev_shutdown(const mqd_server_t *o)
{
    return o->ev_shutdown;
}
void mqd_srv_set_ev_shutdown(mqd_server_t *o, struct event *v)
{
    o->ev_shutdown = v;
}
struct event *mqd_srv_ev_tick(const mqd_server_t *o)
{
    return o->ev_tick;
}
void mqd_srv_set_ev_tick(mqd_server_t *o, struct event *v)
{
    o->ev_tick = v;
}
struct event *mqd_srv_ev_wake(const mqd_server_t *o)
{
    return o->ev_wake;
}
void mqd_srv_set_ev_wake(mqd_server_t *o, struct event *v)
{
    o->ev_wake = v;
}
mqd_dlist_t *mqd_srv_graveyard(mqd_server_t *o)
{
    return &o->graveyard;
}
mqd_hist_t *mqd_srv_h_append_stable(mqd_server_t *o)
{
    return &o->h_append_stable;
}
bool mqd_srv_handover_wait(const mqd_server_t *o)
{
    return o->handover_wait;
}
void mqd_srv_set_handover_wait(mqd_server_t *o, bool v)
{
    o->handover_wait = v;
}
struct mqd_listener *mqd_srv_listeners(const mqd_server_t *o)
{
    return o->listeners;
}
void mqd_srv_set_listeners(mqd_server_t *o, struct mqd_listener *v)
{
    o->listeners = v;
}
mqd_meta_t *mqd_srv_meta(const mqd_server_t *o)
{
    return o->meta;
}
mqd_buf_t *mqd_srv_mgmt_out(mqd_server_t *o)
{
    return &o->mgmt_out;
}
uint64_t mqd_srv_msgs_rejected(const mqd_server_t *o)
{
    return o->msgs_rejected;
}
size_t mqd_srv_n_conns(const mqd_server_t *o)
{
    return o->n_conns;
}
void mqd_srv_set_n_conns(mqd_server_t *o, size_t v)
{
    o->n_conns = v;
}
size_t mqd_srv_n_listeners(const mqd_server_t *o)
{
    return o->n_listeners;
}
void mqd_srv_set_n_listeners(mqd_server_t *o, size_t v)
{
    o->n_listeners = v;
}
size_t mqd_srv_n_topics(const mqd_server_t *o)
{
    return o->n_topics;
}
mqd_core_ops_t *mqd_srv_ops(mqd_server_t *o)
{
    return &o->ops;
}
mqd_dlist_t *mqd_srv_outconns(mqd_server_t *o)
{
    return &o->outconns;
}
bool mqd_srv_persist_due(const mqd_server_t *o)
{
    return o->persist_due;
}
void mqd_srv_set_persist_due(mqd_server_t *o, bool v)
{
    o->persist_due = v;
}
mqd_repl_hooks_t *mqd_srv_repl(mqd_server_t *o)
{
    return &o->repl;
}
mqd_buf_t *mqd_srv_scratch(mqd_server_t *o)
{
    return &o->scratch;
}
uint64_t mqd_srv_sends_failed(const mqd_server_t *o)
{
    return o->sends_failed;
}
int64_t mqd_srv_started_ms(const mqd_server_t *o)
{
    return o->started_ms;
}
void mqd_srv_set_started_ms(mqd_server_t *o, int64_t v)
{
    o->started_ms = v;
}
bool mqd_srv_stopping(const mqd_server_t *o)
{
    return o->stopping;
}
void mqd_srv_set_stopping(mqd_server_t *o, bool v)
{
    o->stopping = v;
}
mqd_store_t *mqd_srv_store(const mqd_server_t *o)
{
    return o->store;
}
bool mqd_srv_tick_queued(const mqd_server_t *o)
{
    return o->tick_queued;
}
void mqd_srv_set_tick_queued(mqd_server_t *o, bool v)
{
    o->tick_queued = v;
}
struct mqd_timers *mqd_srv_timers(const mqd_server_t *o)
{
    return o->timers;
}
uint64_t mqd_srv_tmp_seq(const mqd_server_t *o)
{
    return o->tmp_seq;
}
void mqd_srv_set_tmp_seq(mqd_server_t *o, uint64_t v)
{
    o->tmp_seq = v;
}
struct mqd_txns *mqd_srv_txns(const mqd_server_t *o)
{
    return o->txns;
}
void mqd_srv_set_txns(mqd_server_t *o, struct mqd_txns *v)
{
    o->txns = v;
}
int mqd_srv_wake_pending(const mqd_server_t *o)
{
    return o->wake_pending;
}
void *mqd_conn_auth(const mqd_conn_t *o)
{
    return o->auth;
}
void mqd_conn_set_auth(mqd_conn_t *o, void *v)
{
    o->auth = v;
}
mqd_budget_t *mqd_conn_budget(mqd_conn_t *o)
{
    return &o->budget;
}
uint64_t mqd_conn_bytes_in(const mqd_conn_t *o)
{
    return o->bytes_in;
}
void mqd_conn_set_bytes_in(mqd_conn_t *o, uint64_t v)
{
    o->bytes_in = v;
}
uint64_t mqd_conn_bytes_out(const mqd_conn_t *o)
{
    return o->bytes_out;
}
void mqd_conn_set_bytes_out(mqd_conn_t *o, uint64_t v)
{
    o->bytes_out = v;
}
bool mqd_conn_client(const mqd_conn_t *o)
{
    return o->client;
}
void mqd_conn_set_client(mqd_conn_t *o, bool v)
{
    o->client = v;
}
bool mqd_conn_closed(const mqd_conn_t *o)
{
    return o->closed;
}
void mqd_conn_set_closed(mqd_conn_t *o, bool v)
{
    o->closed = v;
}
mqd_dlist_t *mqd_conn_dirty_node(mqd_conn_t *o)
{
    return &o->dirty_node;
}
pn_connection_driver_t *mqd_conn_driver(mqd_conn_t *o)
{
    return &o->driver;
}
struct event *mqd_conn_ev_read(const mqd_conn_t *o)
{
    return o->ev_read;
}
void mqd_conn_set_ev_read(mqd_conn_t *o, struct event *v)
{
    o->ev_read = v;
}
struct event *mqd_conn_ev_timer(const mqd_conn_t *o)
{
    return o->ev_timer;
}
void mqd_conn_set_ev_timer(mqd_conn_t *o, struct event *v)
{
    o->ev_timer = v;
}
struct event *mqd_conn_ev_write(const mqd_conn_t *o)
{
    return o->ev_write;
}
void mqd_conn_set_ev_write(mqd_conn_t *o, struct event *v)
{
    o->ev_write = v;
}
int mqd_conn_fd(const mqd_conn_t *o)
{
    return o->fd;
}
void mqd_conn_set_fd(mqd_conn_t *o, int v)
{
    o->fd = v;
}
size_t mqd_conn_listener(const mqd_conn_t *o)
{
    return o->listener;
}
void mqd_conn_set_listener(mqd_conn_t *o, size_t v)
{
    o->listener = v;
}
mqd_dlist_t *mqd_conn_node(mqd_conn_t *o)
{
    return &o->node;
}
int64_t mqd_conn_opened_ms(const mqd_conn_t *o)
{
    return o->opened_ms;
}
void mqd_conn_set_opened_ms(mqd_conn_t *o, int64_t v)
{
    o->opened_ms = v;
}
struct mqd_outconn *mqd_conn_out(const mqd_conn_t *o)
{
    return o->out;
}
void mqd_conn_set_out(mqd_conn_t *o, struct mqd_outconn *v)
{
    o->out = v;
}
uint64_t mqd_conn_out_gen(const mqd_conn_t *o)
{
    return o->out_gen;
}
void mqd_conn_set_out_gen(mqd_conn_t *o, uint64_t v)
{
    o->out_gen = v;
}
mqd_fpeek_t *mqd_conn_peek(const mqd_conn_t *o)
{
    return o->peek;
}
void mqd_conn_set_peek(mqd_conn_t *o, mqd_fpeek_t *v)
{
    o->peek = v;
}
const char *mqd_conn_peer(const mqd_conn_t *o)
{
    return o->peer;
}
uint8_t *mqd_conn_rbuf(const mqd_conn_t *o)
{
    return o->rbuf;
}
void mqd_conn_set_rbuf(mqd_conn_t *o, uint8_t *v)
{
    o->rbuf = v;
}
size_t mqd_conn_rbuf_cap(const mqd_conn_t *o)
{
    return o->rbuf_cap;
}
void mqd_conn_set_rbuf_cap(mqd_conn_t *o, size_t v)
{
    o->rbuf_cap = v;
}
int mqd_conn_refs(const mqd_conn_t *o)
{
    return o->refs;
}
void mqd_conn_set_refs(mqd_conn_t *o, int v)
{
    o->refs = v;
}
mqd_server_t *mqd_conn_srv(const mqd_conn_t *o)
{
    return o->srv;
}
void mqd_conn_set_srv(mqd_conn_t *o, mqd_server_t *v)
{
    o->srv = v;
}
struct ssl_st *mqd_conn_ssl(const mqd_conn_t *o)
{
    return o->ssl;
}
void mqd_conn_set_ssl(mqd_conn_t *o, struct ssl_st *v)
{
    o->ssl = v;
}
bool mqd_conn_tls_dead(const mqd_conn_t *o)
{
    return o->tls_dead;
}
void mqd_conn_set_tls_dead(mqd_conn_t *o, bool v)
{
    o->tls_dead = v;
}
uint8_t mqd_conn_tls_hdr(const mqd_conn_t *o)
{
    return o->tls_hdr;
}
void mqd_conn_set_tls_hdr(mqd_conn_t *o, uint8_t v)
{
    o->tls_hdr = v;
}
bool mqd_conn_tls_rd_wants_wr(const mqd_conn_t *o)
{
    return o->tls_rd_wants_wr;
}
void mqd_conn_set_tls_rd_wants_wr(mqd_conn_t *o, bool v)
{
    o->tls_rd_wants_wr = v;
}
const char *mqd_conn_user(const mqd_conn_t *o)
{
    return o->user;
}
bool mqd_conn_want_write(const mqd_conn_t *o)
{
    return o->want_write;
}
void mqd_conn_set_want_write(mqd_conn_t *o, bool v)
{
    o->want_write = v;
}
uint64_t mqd_topic_bytes_in(const mqd_topic_t *o)
{
    return o->bytes_in;
}
uint64_t mqd_topic_bytes_out(const mqd_topic_t *o)
{
    return o->bytes_out;
}
mqd_topic_conf_t *mqd_topic_conf(mqd_topic_t *o)
{
    return &o->conf;
}
mqd_dlist_t *mqd_topic_consumers(mqd_topic_t *o)
{
    return &o->consumers;
}
int64_t mqd_topic_created_ms(const mqd_topic_t *o)
{
    return o->created_ms;
}
mqd_dlist_t *mqd_topic_dnode(mqd_topic_t *o)
{
    return &o->dnode;
}
mqd_dlist_t *mqd_topic_groups(mqd_topic_t *o)
{
    return &o->groups;
}
mqd_dlist_t *mqd_topic_lnode(mqd_topic_t *o)
{
    return &o->lnode;
}
uint64_t mqd_topic_msgs_dead(const mqd_topic_t *o)
{
    return o->msgs_dead;
}
void mqd_topic_set_msgs_dead(mqd_topic_t *o, uint64_t v)
{
    o->msgs_dead = v;
}
uint64_t mqd_topic_msgs_expired(const mqd_topic_t *o)
{
    return o->msgs_expired;
}
void mqd_topic_set_msgs_expired(mqd_topic_t *o, uint64_t v)
{
    o->msgs_expired = v;
}
uint64_t mqd_topic_msgs_in(const mqd_topic_t *o)
{
    return o->msgs_in;
}
uint64_t mqd_topic_msgs_out(const mqd_topic_t *o)
{
    return o->msgs_out;
}
uint64_t mqd_topic_msgs_rejected(const mqd_topic_t *o)
{
    return o->msgs_rejected;
}
void mqd_topic_set_msgs_rejected(mqd_topic_t *o, uint64_t v)
{
    o->msgs_rejected = v;
}
char *mqd_topic_name(const mqd_topic_t *o)
{
    return o->name;
}
uint32_t mqd_topic_nparts(const mqd_topic_t *o)
{
    return o->nparts;
}
struct json_t *mqd_topic_overrides(const mqd_topic_t *o)
{
    return o->overrides;
}
mqd_part_t *mqd_topic_parts(const mqd_topic_t *o)
{
    return o->parts;
}
uint32_t mqd_topic_rr_part(const mqd_topic_t *o)
{
    return o->rr_part;
}
void mqd_topic_set_rr_part(mqd_topic_t *o, uint32_t v)
{
    o->rr_part = v;
}
mqd_server_t *mqd_topic_srv(const mqd_topic_t *o)
{
    return o->srv;
}
bool mqd_topic_temporary(const mqd_topic_t *o)
{
    return o->temporary;
}
void mqd_topic_set_temporary(mqd_topic_t *o, bool v)
{
    o->temporary = v;
}
uint32_t mqd_part_id(const mqd_part_t *o)
{
    return o->id;
}
mqd_plog_t *mqd_part_log(const mqd_part_t *o)
{
    return o->log;
}
mqd_pending_t *mqd_part_pend_tail(const mqd_part_t *o)
{
    return o->pend_tail;
}
mqd_topic_t *mqd_part_topic(const mqd_part_t *o)
{
    return o->topic;
}
uint8_t mqd_ls_acl_perm(const mqd_lstate_t *o)
{
    return o->acl_perm;
}
void mqd_ls_set_acl_perm(mqd_lstate_t *o, uint8_t v)
{
    o->acl_perm = v;
}
mqd_conn_t *mqd_ls_conn(const mqd_lstate_t *o)
{
    return o->conn;
}
void mqd_ls_set_conn(mqd_lstate_t *o, mqd_conn_t *v)
{
    o->conn = v;
}
int64_t mqd_ls_epoch(const mqd_lstate_t *o)
{
    return o->epoch;
}
void mqd_ls_set_epoch(mqd_lstate_t *o, int64_t v)
{
    o->epoch = v;
}
mqd_dlist_t *mqd_ls_gnode(mqd_lstate_t *o)
{
    return &o->gnode;
}
struct mqd_group *mqd_ls_group(const mqd_lstate_t *o)
{
    return o->group;
}
void mqd_ls_set_group(mqd_lstate_t *o, struct mqd_group *v)
{
    o->group = v;
}
bool mqd_ls_has_epoch(const mqd_lstate_t *o)
{
    return o->has_epoch;
}
void mqd_ls_set_has_epoch(mqd_lstate_t *o, bool v)
{
    o->has_epoch = v;
}
mqd_ls_kind_t mqd_ls_kind(const mqd_lstate_t *o)
{
    return o->kind;
}
void mqd_ls_set_kind(mqd_lstate_t *o, mqd_ls_kind_t v)
{
    o->kind = v;
}
pn_link_t *mqd_ls_link(const mqd_lstate_t *o)
{
    return o->link;
}
void mqd_ls_set_link(mqd_lstate_t *o, pn_link_t *v)
{
    o->link = v;
}
bool mqd_ls_manual(const mqd_lstate_t *o)
{
    return o->manual;
}
void mqd_ls_set_manual(mqd_lstate_t *o, bool v)
{
    o->manual = v;
}
const char *mqd_ls_name(const mqd_lstate_t *o)
{
    return o->name;
}
uint32_t mqd_ls_part(const mqd_lstate_t *o)
{
    return o->part;
}
void mqd_ls_set_part(mqd_lstate_t *o, uint32_t v)
{
    o->part = v;
}
void *mqd_ls_repl(const mqd_lstate_t *o)
{
    return o->repl;
}
void mqd_ls_set_repl(mqd_lstate_t *o, void *v)
{
    o->repl = v;
}
mqd_dlist_t *mqd_ls_tnode(mqd_lstate_t *o)
{
    return &o->tnode;
}
mqd_topic_t *mqd_ls_topic(const mqd_lstate_t *o)
{
    return o->topic;
}
void mqd_ls_set_topic(mqd_lstate_t *o, mqd_topic_t *v)
{
    o->topic = v;
}

mqd_topic_t *mqd_srv_topic_first(mqd_server_t *s)
{
    for (size_t i = 0; i < s->topics_cap; i++)
        if (s->topics[i])
            return s->topics[i];
    return NULL;
}

mqd_topic_t *mqd_srv_topic_next(mqd_topic_t *t)
{
    if (t->hnext)
        return t->hnext;
    mqd_server_t *s = t->srv;
    /* the bucket t sits in, then the next non-empty one */
    size_t i = mqd_topic_bucket(s, t->name) + 1;
    for (; i < s->topics_cap; i++)
        if (s->topics[i])
            return s->topics[i];
    return NULL;
}

mqd_conn_t *mqd_conn_of_node(mqd_dlist_t *n)
{
    return MQD_CONTAINER(n, mqd_conn_t, node);
}
mqd_conn_t *mqd_conn_of_dirty_node(mqd_dlist_t *n)
{
    return MQD_CONTAINER(n, mqd_conn_t, dirty_node);
}
mqd_lstate_t *mqd_ls_of_tnode(mqd_dlist_t *n)
{
    return MQD_CONTAINER(n, mqd_lstate_t, tnode);
}
mqd_lstate_t *mqd_ls_of_gnode(mqd_dlist_t *n)
{
    return MQD_CONTAINER(n, mqd_lstate_t, gnode);
}
mqd_topic_t *mqd_topic_of_dnode(mqd_dlist_t *n)
{
    return MQD_CONTAINER(n, mqd_topic_t, dnode);
}
mqd_topic_t *mqd_topic_of_lnode(mqd_dlist_t *n)
{
    return MQD_CONTAINER(n, mqd_topic_t, lnode);
}
mqd_part_t *mqd_topic_part(mqd_topic_t *t, uint32_t i)
{
    return &t->parts[i];
}

/* -- for amqp/ -- */
mqd_lstate_t *mqd_ls_alloc(mqd_ls_kind_t kind, mqd_conn_t *c, pn_link_t *l)
{
    mqd_lstate_t *ls = calloc(1, sizeof *ls);
    if (!ls)
        return NULL;
    ls->kind = kind;
    ls->conn = c;
    ls->link = l;
    mqd_dlist_init(&ls->tnode);
    return ls;
}
void mqd_ls_dealloc(mqd_lstate_t *ls)
{
    free(ls);
}
void *mqd_ls_amqp(const mqd_lstate_t *o)
{
    return o->amqp;
}
void mqd_ls_set_amqp(mqd_lstate_t *o, void *v)
{
    o->amqp = v;
}
bool mqd_ls_cbs(const mqd_lstate_t *o)
{
    return o->cbs;
}
void mqd_ls_set_cbs(mqd_lstate_t *o, bool v)
{
    o->cbs = v;
}
bool mqd_ls_coord(const mqd_lstate_t *o)
{
    return o->coord;
}
void mqd_ls_set_coord(mqd_lstate_t *o, bool v)
{
    o->coord = v;
}
bool mqd_ls_mgmt(const mqd_lstate_t *o)
{
    return o->mgmt;
}
void mqd_ls_set_mgmt(mqd_lstate_t *o, bool v)
{
    o->mgmt = v;
}
void mqd_ls_set_name(mqd_lstate_t *o, const char *v)
{
    snprintf(o->name, sizeof o->name, "%s", v);
}
char *mqd_ls_tmp_name(const mqd_lstate_t *o)
{
    return o->tmp_name;
}
void mqd_ls_set_tmp_name(mqd_lstate_t *o, char *v)
{
    o->tmp_name = v;
}
void mqd_topic_count_out(mqd_topic_t *t, size_t bytes)
{
    t->msgs_out++;
    t->bytes_out += bytes;
}
void mqd_topic_count_expired(mqd_topic_t *t)
{
    t->msgs_expired++;
}
void mqd_topic_count_dead(mqd_topic_t *t)
{
    t->msgs_dead++;
}
void mqd_topic_count_rejected(mqd_topic_t *t)
{
    t->msgs_rejected++;
}

/* -- for server/ -- */
void mqd_srv_set_meta(mqd_server_t *o, mqd_meta_t *v)
{
    o->meta = v;
}
void mqd_srv_set_store(mqd_server_t *o, mqd_store_t *v)
{
    o->store = v;
}
_Static_assert(sizeof(((mqd_server_t *)0)->ev_sig) / sizeof(struct event *) == MQD_SRV_EV_SIG,
               "MQD_SRV_EV_SIG: the size of mqd_server_t.ev_sig");
struct event **mqd_srv_ev_sig(mqd_server_t *o)
{
    return o->ev_sig;
}
void mqd_srv_count_refused(mqd_server_t *o, uint64_t n)
{
    o->conns_refused += n;
}

/* -- for txn/, group/, auth/ -- */
void mqd_conn_ref(mqd_conn_t *c)
{
    c->refs++;
}
void mqd_ls_detach(mqd_lstate_t *ls, const char *cond, const char *desc)
{
    mqd_server_t *s = ls->conn->srv;
    if (s->ops.link_detach)
        s->ops.link_detach(ls, cond, desc);
}
const mqd_dlist_t *mqd_topic_groups_const(const mqd_topic_t *o)
{
    return &o->groups;
}
void mqd_conn_set_user(mqd_conn_t *o, const char *v)
{
    snprintf(o->user, sizeof o->user, "%s", v);
}

/* -- for mgmt/, metrics/, console/ -- */
void *mqd_srv_console(const mqd_server_t *o)
{
    return o->console;
}
void mqd_srv_set_console(mqd_server_t *o, void *v)
{
    o->console = v;
}
void *mqd_srv_metrics(const mqd_server_t *o)
{
    return o->metrics;
}
void mqd_srv_set_metrics(mqd_server_t *o, void *v)
{
    o->metrics = v;
}
void mqd_topic_stats(const mqd_topic_t *t, mqd_topic_stats_t *out)
{
    *out = (mqd_topic_stats_t){
        .msgs_in = t->msgs_in,
        .bytes_in = t->bytes_in,
        .msgs_out = t->msgs_out,
        .bytes_out = t->bytes_out,
        .msgs_expired = t->msgs_expired,
        .msgs_dead = t->msgs_dead,
        .msgs_rejected = t->msgs_rejected,
        .msgs_duplicate = t->msgs_duplicate,
    };
}
const char *mqd_ls_kind_name(const mqd_lstate_t *ls)
{
    if (!ls)
        return "other";
    if (ls->coord)
        return "coordinator";
    if (ls->mgmt)
        return ls->cbs ? "cbs" : "management";
    switch (ls->kind) {
    case MQD_LS_PRODUCER: return "producer";
    case MQD_LS_CONSUMER: return "consumer";
    case MQD_LS_BROWSER: return "browser";
    default: return "other";
    }
}

/* -- for repl/ -- */
