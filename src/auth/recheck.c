/* A reload that revokes: users, credentials and ACLs are checked at login and at attach,
 * so without this a user removed from the config (or a right taken away) kept every
 * connection and link it already had until it chose to leave. After a SIGHUP reload:
 *   - a connection whose user is gone, or whose password hash, SCRAM credentials or
 *     certificate CN changed, is closed with amqp:unauthorized-access (an AMQP close; a
 *     peer that does not answer it is cut off after handshake_timeout_ms);
 *   - a link whose attach-time check (ls->acl_perm on its topic) fails now is detached
 *     with amqp:unauthorized-access; a $management sender whose user had `manage` at
 *     attach is detached when the user has it no more;
 * and nothing else is touched. Anonymous-relay messages and $management requests are
 * checked one by one anyway (Event Hubs READs need only `receive` on the hub, so a
 * $management sender without `manage` stays). */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core.h"

#include <event2/event.h>
#include <string.h>

static bool str_eq(const char *a, const char *b)
{
    return (a == NULL || b == NULL) ? a == b : strcmp(a, b) == 0;
}

/* Why `user` (logged in before the reload) may not stay, or NULL. */
static const char *user_revoked(const mqd_conf_t *conf, const mqd_user_conf_t *old, size_t n_old,
                                const char *user)
{
    const mqd_user_conf_t *u = mqd_conf_user(conf, user);
    if (u == NULL)
        return "user removed by a reload";
    for (size_t i = 0; i < n_old; i++) {
        const mqd_user_conf_t *o = &old[i];
        if (strcmp(o->name, user) != 0)
            continue;
        if (!str_eq(o->password_hash, u->password_hash) ||
            !str_eq(o->scram_sha256, u->scram_sha256) || !str_eq(o->cert_cn, u->cert_cn))
            return "credentials changed by a reload";
        break;
    }
    return NULL;
}

static void on_close_grace(evutil_socket_t fd, short what, void *arg)
{
    MQD_UNUSED(fd);
    MQD_UNUSED(what);
    mqd_auth_conn_t *ac = arg;
    mqd_conn_t *c = ac->c;
    if (mqd_conn_closed(c))
        return;
    MQD_NOTICE("auth", "peer=%s did not answer the close: cutting it off", mqd_conn_peer(c));
    pn_connection_driver_close(mqd_conn_driver(c));
    mqd_conn_mark_dirty(c);
}

static void close_revoked(mqd_conn_t *c, const char *why)
{
    mqd_auth_conn_t *ac = mqd_conn_auth(c);
    pn_connection_t *pc = mqd_conn_driver(c)->connection;
    MQD_NOTICE("auth", "closing peer=%s user=%s: %s", mqd_conn_peer(c), mqd_conn_user(c), why);
    pn_condition_t *cond = pn_connection_condition(pc);
    pn_condition_set_name(cond, "amqp:unauthorized-access");
    pn_condition_set_description(cond, why);
    pn_connection_close(pc);
    mqd_conn_mark_dirty(c);
    if (ac != NULL && ac->ev_close == NULL) {
        mqd_server_t *s = mqd_conn_srv(c);
        uint32_t ms = mqd_srv_conf(s)->handshake_timeout_ms;
        struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (suseconds_t)(ms % 1000) * 1000};
        ac->ev_close = evtimer_new(mqd_srv_base(s), on_close_grace, ac);
        if (ac->ev_close != NULL)
            evtimer_add(ac->ev_close, &tv);
    }
}

/* The name the link's attach check used. */
static const char *checked_name(const mqd_lstate_t *ls)
{
    if (mqd_ls_mgmt(ls))
        return "$management";
    if (mqd_ls_topic(ls) != NULL)
        return mqd_topic_name(mqd_ls_topic(ls));
    return mqd_ls_tmp_name(ls);
}

size_t mqd_auth_recheck_links(mqd_conn_t *c, const char *why)
{
    size_t n = 0;
    pn_connection_t *pc = mqd_conn_driver(c)->connection;
    for (pn_link_t *l = pn_link_head(pc, 0), *next; l; l = next) {
        next = pn_link_next(l, 0);
        mqd_lstate_t *ls = pn_link_get_context(l);
        const char *name = ls && mqd_ls_acl_perm(ls) ? checked_name(ls) : NULL;
        if (name == NULL || mqd_auth_allowed(c, (mqd_perm_t)mqd_ls_acl_perm(ls), name))
            continue;
        const char *user = mqd_conn_user(c);
        MQD_NOTICE("auth", "detaching link %s of peer=%s user=%s: %s", pn_link_name(l),
                   mqd_conn_peer(c), user[0] ? user : "-", why);
        mqd_ls_detach(ls, "amqp:unauthorized-access", why);
        n++;
    }
    return n;
}

void mqd_auth_recheck(mqd_server_t *s, const mqd_user_conf_t *old_users, size_t n_old)
{
    size_t closed = 0, detached = 0;
    mqd_dlist_t *conns = mqd_srv_conns(s);
    for (mqd_dlist_t *p = conns->next; p != conns; p = p->next) {
        mqd_conn_t *c = mqd_conn_of_node(p);
        const mqd_auth_conn_t *ac = mqd_conn_auth(c);
        pn_connection_driver_t *drv = mqd_conn_driver(c);
        if (mqd_conn_closed(c) || (pn_connection_state(drv->connection) & PN_LOCAL_CLOSED))
            continue;
        const char *user = mqd_conn_user(c);
        /* a node connection's name is its certificate's (restart-only CAs), no user's */
        bool named = user[0] != '\0' && !(ac && (ac->anonymous || ac->node)) &&
                     pn_transport_is_authenticated(drv->transport);
        const char *why = named ? user_revoked(mqd_srv_conf(s), old_users, n_old, user) : NULL;
        if (why != NULL) {
            close_revoked(c, why);
            closed++;
            continue;
        }
        detached += mqd_auth_recheck_links(c, "permission revoked by a reload");
    }
    if (closed || detached)
        MQD_NOTICE("auth", "reload: %zu connections closed, %zu links detached", closed, detached);
}
