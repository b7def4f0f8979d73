/* The event loop, listeners and the connection lifecycle.
 *
 * Each connection is a non-blocking socket driven through pn_connection_driver (its
 * transport is core's, core/conn.c; here it is made, for an accepted socket or an
 * outbound one, and its Proton transport set up for its role). Protocol work on one
 * connection often makes work for another (a send becomes stable, a consumer gets
 * data), so connections touched outside their own I/O callback are put on a dirty list;
 * one "tick" event, run after all ready I/O of the loop iteration, processes their
 * Proton events, writes their output, and hands the iteration's appends to the store
 * (group commit: one write + one fdatasync per partition per batch).
 */
#include "config.h"
#include "server/server_int.h"

#include <errno.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <proton/sasl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

/* A zero timeout fires after the loop's next poll: work deferred to it cannot hold up
 * I/O, as re-activating the tick from inside the tick would. */
static void on_later(evutil_socket_t fd, short what, void *arg)
{
    mqd_server_run_later(arg);
}

/* The Proton limits every role shares (max_frame_size, idle_timeout_ms, max_sessions). */
static void transport_limits(pn_transport_t *t, const mqd_conf_t *conf)
{
    pn_transport_set_max_frame(t, conf->max_frame_size);
    pn_transport_set_idle_timeout(t, conf->idle_timeout_ms);
    pn_transport_set_channel_max(t,
                                 (uint16_t)(conf->max_sessions > 0 ? conf->max_sessions - 1 : 0));
}

static int conn_setup_transport(mqd_conn_t *c)
{
    pn_connection_driver_t *d = mqd_conn_driver(c);
    if (pn_connection_driver_init(d, NULL, NULL) != 0)
        return MQD_ENOMEM;
    pn_transport_t *t = d->transport;
    pn_transport_set_server(t);
    transport_limits(t, mqd_srv_conf(mqd_conn_srv(c)));
    /* SASL, TLS on amqps:// listeners, and the handshake timer */
    int rc = mqd_auth_conn_setup(c, mqd_conn_listener(c));
    if (rc != 0)
        return rc;
    pn_connection_set_context(d->connection, c);
    /* server-side containers identify themselves */
    pn_connection_set_container(d->connection, "mqd");
    return pn_connection_driver_bind(d) == 0 ? 0 : MQD_EINVAL;
}

int mqd_server_adopt(mqd_server_t *s, int fd, const char *peer, size_t listener)
{
    mqd_conn_t *c = mqd_conn_new(s, fd, peer);
    if (!c)
        return MQD_ENOMEM;
    mqd_conn_set_listener(c, listener);
    int rc = conn_setup_transport(c);
    if (rc != 0)
        return mqd_conn_discard(c, rc);
    mqd_conn_accepted(c);
    return 0;
}

/* A client transport: SASL PLAIN, EXTERNAL (ANONYMOUS when not offered) or ANONYMOUS
 * (Proton's own client side, which prefers EXTERNAL; mqd's SASL plugin is the server's),
 * the open sent at once. Proton cannot see the TLS mqd runs
 * in front of it, so it would refuse PLAIN as insecure: allowed when TLS is on, or when the
 * owner said so for a plain socket (plain_over_tcp, checked by mqd_outconn_new). Proton's
 * EXTERNAL client sends the connection's authorization as its authzid (none: empty). */
static int conn_setup_client(mqd_conn_t *c, const mqd_outconn_opts_t *id)
{
    pn_connection_driver_t *d = mqd_conn_driver(c);
    if (pn_connection_driver_init(d, NULL, NULL) != 0)
        return MQD_ENOMEM;
    pn_transport_t *t = d->transport;
    transport_limits(t, mqd_srv_conf(mqd_conn_srv(c)));
    if (id->idle_timeout_ms) /* the owner's: a fetch connection notices a silent leader */
        pn_transport_set_idle_timeout(t, id->idle_timeout_ms);
    pn_sasl_t *sasl = pn_sasl(t);
    /* EXTERNAL when the peer offers it (it asked for and verified our certificate), else
     * ANONYMOUS as before: a leader without replication_peer_verify, a rolling change */
    pn_sasl_allowed_mechs(sasl, id->user            ? "PLAIN"
                                : id->sasl_external ? "EXTERNAL ANONYMOUS"
                                                    : "ANONYMOUS");
    pn_sasl_set_allow_insecure_mechs(sasl, mqd_conn_ssl(c) != NULL || id->plain_over_tcp);
    pn_connection_t *pc = d->connection;
    pn_connection_set_context(pc, c);
    pn_connection_set_container(pc, id->container);
    pn_connection_set_hostname(pc, id->hostname);
    if (id->user) {
        pn_connection_set_user(pc, id->user);
        pn_connection_set_password(pc, id->password ? id->password : "");
    }
    if (id->sasl_external && id->authzid)
        pn_connection_set_authorization(pc, id->authzid);
    if (pn_connection_driver_bind(d) != 0)
        return MQD_EINVAL;
    pn_connection_open(pc);
    return 0;
}

mqd_conn_t *mqd_server_adopt_out(mqd_server_t *s, int fd, const char *peer, mqd_outconn_t *oc,
                                 SSL *ssl, const mqd_outconn_opts_t *id)
{
    const char *who = id->user ? id->user : id->sasl_external ? "external" : "anonymous";
    mqd_conn_t *c = mqd_conn_new_out(s, fd, peer, oc, ssl, who);
    if (!c)
        return NULL;
    int rc = conn_setup_client(c, id);
    if (rc != 0) {
        mqd_conn_discard(c, rc);
        return NULL;
    }
    return mqd_conn_start_out(c);
}

struct event_base *mqd_server_base(mqd_server_t *s)
{
    return mqd_srv_base(s);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
    mqd_listener_t *li = arg;
    mqd_server_t *s = li->srv;
    bool stopping = mqd_srv_stopping(s);
    bool at_max = mqd_srv_n_conns(s) >= mqd_srv_conf(s)->max_connections;
    if (stopping || at_max || mqd_budget_broker_full(s)) {
        mqd_srv_count_refused(s, 1);
        MQD_WARN("conn", "refused: %s",
                 stopping ? "stopping"
                 : at_max ? "max_connections reached"
                          : "max_memory reached");
        close(fd);
        return;
    }
    if (!mqd_accept_admit(s, fd)) {
        mqd_srv_count_refused(s, 1);
        close(fd);
        return;
    }
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, host, sizeof host);
        port = ntohs(((struct sockaddr_in *)sa)->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, host, sizeof host);
        port = ntohs(((struct sockaddr_in6 *)sa)->sin6_port);
    }
    if (!mqd_auth_admit_host(s, host)) {
        mqd_srv_count_refused(s, 1);
        close(fd);
        return;
    }
    char peer[64];
    snprintf(peer, sizeof peer, "%s:%d", host, port);
    mqd_server_adopt(s, fd, peer, li->index);
}

/* End of a loop iteration: dispatch consumers, flush touched connections, commit. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    mqd_server_t *s = arg;
    mqd_srv_set_tick_queued(s, false);
    mqd_txns_decide(s); /* one SQLite commit for every transaction ready this iteration */
    mqd_store_commit(mqd_srv_store(s));
    mqd_server_run_dispatch(s);
    mqd_conns_flush(s);
    mqd_store_commit(mqd_srv_store(s));
    mqd_conns_reap(s);
    /* The periodic persist of group state (mqd_topics_persist) is one SQLite commit with
     * synchronous = FULL: an fdatasync of the WAL on this thread, 0.5 ms on an idle disk
     * and 5+ ms on a busy one. Run straight from the 1 s timer it came before the
     * iteration's tick (timers are activated after I/O, the tick is queued behind them),
     * so the settlements and deliveries of a stable callback waited for that sync. The
     * timer only marks it due; it runs here, last, after every dirty connection's output
     * is on its socket and the iteration's appends are with the flusher. */
    if (mqd_srv_persist_due(s)) {
        mqd_srv_set_persist_due(s, false);
        mqd_topics_persist(s, false);
    }
}

static void budget_timer(void *arg)
{
    mqd_budget_tick(arg);
}

static void sched_timer(void *arg)
{
    mqd_groups_sched_tick(arg);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    mqd_server_t *s = arg;
    if (sig == SIGHUP) {
        mqd_server_reload(s, NULL, 0); /* the log has the reason */
        return;
    }
    if (mqd_srv_stopping(s)) { /* a second signal: no more grace */
        MQD_NOTICE("server", "signal %d: stopping now", (int)sig);
        event_base_loopexit(mqd_srv_base(s), NULL);
        return;
    }
    MQD_NOTICE("server", "signal %d: stopping", (int)sig);
    mqd_server_stop(s);
}

static int listen_one(mqd_server_t *s, const char *hostport)
{
    char host[256];
    uint16_t port;
    if (mqd_conf_parse_hostport(hostport, host, sizeof host, &port) != 0)
        return MQD_EINVAL;
    struct sockaddr_storage ss;
    int sslen = sizeof ss;
    char spec[300];
    snprintf(spec, sizeof spec, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
    if (evutil_parse_sockaddr_port(spec, (struct sockaddr *)&ss, &sslen) != 0) {
        MQD_ERR("server", "listen %s: not an IP address and port", hostport);
        return MQD_EINVAL;
    }
    size_t n = mqd_srv_n_listeners(s);
    mqd_listener_t *li = &mqd_srv_listeners(s)[n];
    li->srv = s;
    li->index = n;
    li->l =
        evconnlistener_new_bind(mqd_srv_base(s), on_accept, li,
                                LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
                                512, (struct sockaddr *)&ss, sslen);
    if (!li->l) {
        MQD_ERR("server", "listen %s: %s", hostport, strerror(errno));
        return MQD_EIO;
    }
    evconnlistener_set_error_cb(li->l, mqd_accept_error);
    mqd_srv_set_n_listeners(s, n + 1);
    MQD_NOTICE("server", "listening on %s", hostport);
    return 0;
}

static void libevent_log(int severity, const char *msg)
{
    mqd_logf(severity >= EVENT_LOG_ERR ? MQD_LOG_ERROR
             : severity == EVENT_LOG_WARN ? MQD_LOG_WARN
                                          : MQD_LOG_DEBUG,
             "libevent", "%s", msg);
}

static void proton_log_sink(intptr_t ctx, pn_log_subsystem_t sub, pn_log_level_t sev, const char *msg)
{
    MQD_DEBUG("proton", "%s", msg);
}

/* The log level is the util log's own global: the one reloadable key with a cache. */
static void apply_log_level(void *arg, const mqd_conf_t *old, const mqd_conf_t *now)
{
    static const char *const names[] = {"error", "warn", "notice", "info", "debug"};
    mqd_log_set_level(now->log_level);
    MQD_NOTICE("server", "reload: log_level %s -> %s", names[old->log_level % 5],
               names[now->log_level % 5]);
}

/* Keeps what the running config grants (users, [acl] rules) in meta.db, for the next
 * start's truncation guard. */
static void census_save(mqd_server_t *s, const mqd_conf_t *conf)
{
    char v[64];
    mqd_conf_census_t k;
    mqd_conf_census(conf, &k);
    mqd_conf_census_format(&k, v, sizeof v);
    if (mqd_meta_kv_put(mqd_srv_meta(s), MQD_CONF_CENSUS_KEY, v) != 0)
        MQD_WARN("server", "cannot keep the config's census (%s) in meta.db: the next start "
                           "cannot tell a config file cut short", v);
}

/* The truncation guard at start (conf/conf_guard.c): a config that drops every user or
 * every [acl] rule of the last start or reload on this data dir is refused, as a reload
 * would refuse it. A data dir without a census (new, or older than the guard) starts. */
static int census_check(mqd_server_t *s, const mqd_conf_t *conf)
{
    char *v = NULL, err[1024], what[4200];
    mqd_conf_census_t prev;
    int rc = mqd_meta_kv_get(mqd_srv_meta(s), MQD_CONF_CENSUS_KEY, &v);
    if (rc == 0 && mqd_conf_census_parse(v, &prev) == 0) {
        snprintf(what, sizeof what, "the config of the last start or reload on %s",
                 conf->data_dir);
        if ((rc = mqd_conf_guard(&prev, what, conf, err, sizeof err)) != 0)
            MQD_ERR("server", "refusing to start: %s", err);
    } else if (rc != MQD_ENOENT) {
        MQD_WARN("server", "meta.db %s: unreadable (%s): the config is not compared with the "
                           "last run's", MQD_CONF_CENSUS_KEY, rc ? mqd_strerror(rc) : v);
        rc = 0;
    } else {
        rc = 0;
    }
    free(v);
    if (rc == 0)
        census_save(s, conf);
    return rc;
}

/* core reaches the subsystems above it only through these (core/core.h) */
static void fill_core_ops(mqd_core_ops_t *ops)
{
    ops->conn_event = mqd_amqp_handle;
    ops->out_event = mqd_outconn_event;
    ops->out_closed = mqd_outconn_closed;
    ops->conn_gone = mqd_shutdown_conn_gone;
    ops->ls_free = mqd_lstate_free;
    ops->rx_gate = mqd_auth_rx_gate;
    ops->rx_hold = mqd_auth_rx_hold;
    ops->reload = mqd_server_reload;
    mqd_txn_core_ops(ops);
    mqd_group_core_ops(ops);
    mqd_amqp_core_ops(ops);
    mqd_amqp091_core_ops(ops);
}

int mqd_server_new(mqd_conf_t *conf, const char *conf_path, mqd_server_t **out)
{
    int rc = MQD_ENOMEM;
    mqd_server_t *s = mqd_core_server_alloc(conf, conf_path);
    if (!s)
        return MQD_ENOMEM;
    fill_core_ops(mqd_srv_ops(s));
    if (mqd_conf_hook_add(mqd_srv_conf_hooks(s), "log_level", NULL, apply_log_level, s) != 0)
        goto err;
    evthread_use_pthreads();
    event_set_log_callback(libevent_log);
    struct event_base *base = event_base_new();
    if (!base)
        goto err;
    event_base_priority_init(base, MQD_PRIO_LEVELS);
    pn_logger_t *pl = pn_default_logger();
    pn_logger_set_log_sink(pl, proton_log_sink, 0);
    if ((rc = mqd_core_server_loop(s, base, on_tick, on_later)) != 0)
        goto err;

    if ((rc = mqd_mkdirs(conf->data_dir, 0750)) != 0) {
        MQD_ERR("server", "data_dir %s: cannot create", conf->data_dir);
        goto err;
    }
    /* An operator's mkdir (or an installer's) was never synced: make the data dir's name
     * durable before anything in it is acknowledged. */
    if (mqd_fsync_parents(conf->data_dir, 1) != 0)
        MQD_WARN("server", "data_dir %s: cannot fsync the directories above it", conf->data_dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/meta.db", conf->data_dir);
    mqd_meta_t *meta = NULL;
    rc = mqd_meta_open(path, &meta);
    mqd_srv_set_meta(s, meta);
    if (rc != 0 || (rc = census_check(s, conf)) != 0)
        goto err;
    mqd_store_t *store = NULL;
    rc = mqd_store_open_ex(conf->data_dir, conf->flush_threads, mqd_core_server_wake, s, &store);
    mqd_srv_set_store(s, store);
    if (rc != 0)
        goto err;
    mqd_store_set_syncfs(store, conf->flush_sync == 1);
    mqd_store_set_prezero(store, conf->segment_prezero);
    mqd_store_set_flush_boost(store, conf->flush_priority_boost);
    mqd_store_set_max_open_files(store, conf->max_open_files);
    mqd_store_warm(store); /* reads partition metadata in parallel while topics open */
    if ((rc = mqd_topics_load(s)) != 0)
        goto err;
    if ((rc = mqd_topics_declare(s)) != 0)
        goto err;
    if ((rc = mqd_txns_init(s)) != 0)
        goto err;
    mqd_topics_dedup_warm(s); /* needs the committed transactions; before any client */
    if ((rc = mqd_auth_init(s)) != 0)
        goto err;
    if ((rc = mqd_watermark_init(s)) != 0)
        goto err;
    if ((rc = mqd_amqp_start(s)) != 0)
        goto err;
    /* budget.c is the server's own: heap trims after connections' charges fell */
    if ((rc = mqd_timer_add(s, "budget.trim", 1000, budget_timer, s)) != 0)
        goto err;
    /* scheduled messages hidden by a cursor are handed out within this of their time */
    if ((rc = mqd_timer_add(s, "groups.scheduled", 200, sched_timer, s)) != 0)
        goto err;
    if ((rc = mqd_metrics_start(s)) != 0)
        goto err;
    /* before the listeners: whoever sees the port open may signal (a SIGHUP that came
     * earlier was lost when the process had it ignored, as under nohup: test 68) */
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    _Static_assert(MQD_ARRAY_LEN(sigs) <= MQD_SRV_EV_SIG, "a signal event each");
    struct event **ev_sig = mqd_srv_ev_sig(s);
    for (size_t i = 0; i < MQD_ARRAY_LEN(sigs); i++) {
        ev_sig[i] = evsignal_new(base, sigs[i], on_signal, s);
        event_add(ev_sig[i], NULL);
    }
    mqd_listener_t *listeners = calloc(conf->n_listen ? conf->n_listen : 1, sizeof *listeners);
    mqd_srv_set_listeners(s, listeners);
    rc = listeners ? mqd_accept_guard_init(s) : MQD_ENOMEM;
    if (rc != 0)
        goto err;
    for (size_t i = 0; i < conf->n_listen; i++)
        if ((rc = listen_one(s, conf->listen[i])) != 0)
            goto err;
    mqd_fd_note_base(s); /* what connections may use is what is left (core/fdroom.c) */
    signal(SIGPIPE, SIG_IGN);
    *out = s;
    return 0;
err:
    mqd_server_free(s);
    return rc;
}

static void on_watchdog(void *arg)
{
    mqd_sd_notify("WATCHDOG=1");
}

int mqd_server_run(mqd_server_t *s)
{
    MQD_NOTICE("server", "ready");
    /* recovery is done and the listeners are bound: tell systemd (Type=notify) */
    char status[128];
    snprintf(status, sizeof status, "READY=1\nSTATUS=serving %zu topics", mqd_srv_n_topics(s));
    mqd_sd_notify(status);
    uint64_t wd = mqd_sd_watchdog_usec();
    if (wd > 0) { /* pinged at half the watchdog's period */
        uint64_t ms = wd / 2000 ? wd / 2000 : 1;
        if (mqd_timer_add(s, "systemd.watchdog", ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms,
                          on_watchdog, s) != 0)
            MQD_WARN("server", "systemd watchdog: cannot add its timer");
    }
    mqd_timers_log(mqd_srv_timers(s));
    return event_base_dispatch(mqd_srv_base(s)) < 0 ? MQD_EIO : 0;
}

void mqd_server_stop(mqd_server_t *s)
{
    if (mqd_srv_stopping(s))
        return;
    mqd_srv_set_stopping(s, true);
    mqd_sd_notify("STOPPING=1");
    mqd_listener_t *listeners = mqd_srv_listeners(s);
    for (size_t i = 0; i < mqd_srv_n_listeners(s); i++)
        evconnlistener_disable(listeners[i].l);
    /* let in-flight appends reach the disk, then close connections */
    mqd_store_commit(mqd_srv_store(s));
    mqd_topics_persist(s, true);
    mqd_shutdown_begin(s); /* forced close to every client; loop exits when done (shutdown.c) */
}

/* Reload swaps in a whole validated config (conf_swap.c); the reloadable keys the
 * subsystems read from s->conf at each use need no hook, the rest register one. */
int mqd_server_reload(mqd_server_t *s, char *err, size_t errlen)
{
    mqd_conf_reload_report_t rep;
    const char *conf_path = mqd_srv_conf_path(s);
    if (!conf_path) {
        MQD_NOTICE("server", "SIGHUP: no config file to reload");
        return 0;
    }
    int rc = mqd_conf_reload(mqd_srv_conf(s), conf_path, mqd_srv_conf_hooks(s), &rep);
    if (rc != 0) {
        MQD_ERR("server", "reload failed, keeping the running config: %s", rep.err);
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s", rep.err);
        return rc;
    }
    census_save(s, mqd_srv_conf(s));
    if (rep.n_restart > 0)
        MQD_WARN("server", "reload: %s: needs restart, not applied", rep.restart);
    MQD_NOTICE("server", "reloaded %s: %zu reloadable keys changed, %zu apply hooks run", conf_path,
               rep.n_changed, rep.n_applied);
    return 0;
}

void mqd_server_free(mqd_server_t *s)
{
    if (!s)
        return;
    mqd_outconn_free_all(s);
    mqd_conns_close(s);
    mqd_conns_reap(s);
    mqd_listener_t *listeners = mqd_srv_listeners(s);
    for (size_t i = 0; i < mqd_srv_n_listeners(s); i++)
        evconnlistener_free(listeners[i].l);
    mqd_accept_guard_free(s);
    mqd_metrics_stop(s);
    mqd_auth_free(s);
    mqd_watermark_free(s);
    free(listeners);
    if (mqd_srv_store(s))
        mqd_topics_persist(s, true);
    mqd_txns_free(s); /* open transactions die with the process: aborted at restart */
    mqd_topics_census_save(s);
    mqd_topics_free(s);
    mqd_pending_pool_free(s);
    mqd_meta_t *meta = mqd_srv_meta(s);
    if (meta)
        MQD_NOTICE("meta", "%llu SQLite write transactions since start",
                   (unsigned long long)mqd_meta_txn_count(meta));
    mqd_store_close(mqd_srv_store(s)); /* fsyncs what is left: appended sends end durable */
    mqd_meta_close(meta);
    struct event **ev_sig = mqd_srv_ev_sig(s);
    for (size_t i = 0; i < MQD_SRV_EV_SIG; i++)
        if (ev_sig[i])
            event_free(ev_sig[i]);
    mqd_core_server_loop_free(s); /* ev_wake, ev_tick, ev_later, the timers */
    if (mqd_srv_ev_handover(s))
        event_free(mqd_srv_ev_handover(s));
    if (mqd_srv_ev_shutdown(s))
        event_free(mqd_srv_ev_shutdown(s));
    mqd_budget_drains_free(s);
    if (mqd_srv_base(s))
        event_base_free(mqd_srv_base(s));
    mqd_core_server_free(s);
}

void mqd_server_set_repl(mqd_server_t *s, const mqd_repl_hooks_t *h)
{
    *mqd_srv_repl(s) = *h;
}

void mqd_server_set_fwd(mqd_server_t *s, const mqd_fwd_hooks_t *h)
{
    *mqd_srv_fwd(s) = *h;
}
