/* core: the accessors of the opaque structs (core.h, "accessors"). */
#include "core/core_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
mqd_conf_t *mqd_srv_conf(const mqd_server_t *o)
{
    return o->conf;
}
mqd_conf_hooks_t *mqd_srv_conf_hooks(const mqd_server_t *o)
{
    return o->conf_hooks;
}
char *mqd_srv_conf_path(const mqd_server_t *o)
{
    return o->conf_path;
}
mqd_dlist_t *mqd_srv_conns(mqd_server_t *o)
{
    return &o->conns;
}
uint64_t mqd_srv_conns_accepted(const mqd_server_t *o)
{
    return o->conns_accepted;
}
uint64_t mqd_srv_conns_refused(const mqd_server_t *o)
{
    return o->conns_refused;
}
mqd_dlist_t *mqd_srv_dispatch_later(mqd_server_t *o)
{
    return &o->dispatch_later;
}
mqd_dlist_t *mqd_srv_dispatch_q(mqd_server_t *o)
{
    return &o->dispatch_q;
}
struct event *mqd_srv_ev_handover(const mqd_server_t *o)
{
    return o->ev_handover;
}
void mqd_srv_set_ev_handover(mqd_server_t *o, struct event *v)
{
    o->ev_handover = v;
}
struct event *mqd_srv_ev_shutdown(const mqd_server_t *o)
{
    return o->ev_shutdown;
}
void mqd_srv_set_ev_shutdown(mqd_server_t *o, struct event *v)
{
    o->ev_shutdown = v;
}
uint64_t mqd_srv_group_commit_failures(const mqd_server_t *o)
{
    return o->group_commit_failures;
}
void mqd_srv_count_group_commit_failure(mqd_server_t *o)
{
    o->group_commit_failures++;
}

uint64_t mqd_srv_redirects(const mqd_server_t *o, mqd_redirect_kind_t kind)
{
    return (unsigned)kind < MQD_REDIRECT_KINDS ? o->redirects[kind] : 0;
}

void mqd_srv_count_redirect(mqd_server_t *o, mqd_redirect_kind_t kind)
{
    if ((unsigned)kind < MQD_REDIRECT_KINDS)
        o->redirects[kind]++;
}

const char *const mqd_login_mechs[MQD_LOGIN_MECHS] = {"PLAIN", "SCRAM-SHA-256", "EXTERNAL",
                                                       "ANONYMOUS", "other"};
void mqd_srv_count_login_failure(mqd_server_t *o, const char *mech)
{
    size_t i = 0;
    while (i < MQD_LOGIN_MECHS - 1 && (!mech || strcmp(mech, mqd_login_mechs[i]) != 0))
        i++;
    __atomic_fetch_add(&o->login_failures[i], 1, __ATOMIC_RELAXED);
}
uint64_t mqd_srv_login_failures(const mqd_server_t *o, size_t i)
{
    return i < MQD_LOGIN_MECHS ? __atomic_load_n(&o->login_failures[i], __ATOMIC_RELAXED) : 0;
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
mqd_fwd_hooks_t *mqd_srv_fwd(mqd_server_t *o)
{
    return &o->fwd;
}
mqd_buf_t *mqd_srv_scratch(mqd_server_t *o)
{
    return &o->scratch;
}
uint64_t mqd_srv_sends_failed(const mqd_server_t *o)
{
    return o->sends_failed;
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
void *mqd_conn_auth(const mqd_conn_t *o)
{
    return o->auth;
}
void mqd_conn_set_auth(mqd_conn_t *o, void *v)
{
    o->auth = v;
}
uint64_t mqd_conn_bytes_in(const mqd_conn_t *o)
{
    return o->bytes_in;
}
uint64_t mqd_conn_bytes_out(const mqd_conn_t *o)
{
    return o->bytes_out;
}
bool mqd_conn_client(const mqd_conn_t *o)
{
    return o->client;
}
bool mqd_conn_closed(const mqd_conn_t *o)
{
    return o->closed;
}
pn_connection_driver_t *mqd_conn_driver(mqd_conn_t *o)
{
    return &o->driver;
}
int mqd_conn_fd(const mqd_conn_t *o)
{
    return o->fd;
}
size_t mqd_conn_listener(const mqd_conn_t *o)
{
    return o->listener;
}
void mqd_conn_set_listener(mqd_conn_t *o, size_t v)
{
    o->listener = v;
}
int64_t mqd_conn_opened_ms(const mqd_conn_t *o)
{
    return o->opened_ms;
}
uint64_t mqd_conn_out_gen(const mqd_conn_t *o)
{
    return o->out_gen;
}
mqd_fpeek_t *mqd_conn_peek(const mqd_conn_t *o)
{
    return o->peek;
}
const char *mqd_conn_peer(const mqd_conn_t *o)
{
    return o->peer;
}
uint64_t mqd_conn_serial(const mqd_conn_t *o)
{
    return o->serial;
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
mqd_server_t *mqd_conn_srv(const mqd_conn_t *o)
{
    return o->srv;
}
struct ssl_st *mqd_conn_ssl(const mqd_conn_t *o)
{
    return o->ssl;
}
void mqd_conn_set_ssl(mqd_conn_t *o, struct ssl_st *v)
{
    o->ssl = v;
}
const char *mqd_conn_user(const mqd_conn_t *o)
{
    return o->user;
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
mqd_dlist_t *mqd_topic_groups(mqd_topic_t *o)
{
    return &o->groups;
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
uint64_t mqd_topic_owner(const mqd_topic_t *o)
{
    return o->owner;
}
void mqd_topic_set_owner(mqd_topic_t *o, uint64_t v)
{
    o->owner = v;
}
uint32_t mqd_part_id(const mqd_part_t *o)
{
    return o->id;
}
bool mqd_part_led(const mqd_part_t *o)
{
    return o->led;
}
uint32_t mqd_part_led_gen(const mqd_part_t *o)
{
    return o->led_gen;
}
void mqd_part_set_led(mqd_part_t *o, bool v)
{
    if (o->led != v)
        o->led_gen++;
    o->led = v;
}
mqd_plog_t *mqd_part_log(const mqd_part_t *o)
{
    return o->log;
}
mqd_pending_t *mqd_part_pend_tail(const mqd_part_t *o)
{
    return o->pend_tail;
}

void mqd_part_pend_set_acks(mqd_part_t *o, uint8_t acks)
{
    mqd_pending_t *pe = o->pend_tail;
    o->pend_weak -= pe->acks < MQD_ACKS_ALL;
    pe->acks = acks;
    o->pend_weak += pe->acks < MQD_ACKS_ALL;
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
pn_link_t *mqd_ls_link(const mqd_lstate_t *o)
{
    return o->link;
}
bool mqd_ls_manual(const mqd_lstate_t *o)
{
    return o->manual;
}
void mqd_ls_set_manual(mqd_lstate_t *o, bool v)
{
    o->manual = v;
}
bool mqd_ls_local_only(const mqd_lstate_t *o)
{
    return o->local_only;
}
void mqd_ls_set_local_only(mqd_lstate_t *o, bool v)
{
    o->local_only = v;
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
void *mqd_ls_fwd(const mqd_lstate_t *o)
{
    return o->fwd;
}
void mqd_ls_set_fwd(mqd_lstate_t *o, void *v)
{
    o->fwd = v;
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
    return t->parts[i];
}

/* -- link state: allocation, amqp's part, flags and names; topic counters -- */
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

/* -- server: its store and meta, signal events, refusals -- */
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

/* -- references, detaching, const walks, the login name -- */
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

/* -- the console and metrics handles; model functions for management and metrics -- */
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
    case MQD_LS_FWD: return "forwarded consumer";
    default: return "other";
    }
}

