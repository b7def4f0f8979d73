/* Admission at accept (issue 32 point 7c): the per-address limits and the share of
 * descriptors that connections still in their handshake may hold.
 *
 * A connection is "in its handshake" until its AMQP open arrives (TLS, then SASL, then
 * the open; handshake_timeout_ms closes it otherwise). Before this, at a 1,024-descriptor
 * limit 1,000 unfinished TLS or SCRAM handshakes took every descriptor connections may
 * use, and every real client was shut out until their timeouts. Now:
 *   - one address holds at most max_handshakes_per_ip of them (on by default): a newer
 *     one from it is closed at once;
 *   - all addresses together hold at most handshake_fd_percent of the connections'
 *     descriptors (core/fdroom.c); at that bound a new connection closes the oldest
 *     unfinished handshake of the address that has the most of them, so that a client
 *     from anywhere still gets its turn (many addresses stalling many handshakes each
 *     lose theirs first; a real client has one, for milliseconds), while the rest of
 *     the descriptors stay with connections that logged in. A closed handshake keeps
 *     its descriptor until the tick: with a quarter of the share closing, only an
 *     address with no handshake yet gets a place, the others are closed at accept.
 * One pass over the server's connections per accept (they are in accept order, oldest
 * first), a second one with a table of addresses when a handshake must go. Refusals
 * are logged once a second with a count. */
#include "config.h"
#include "auth/auth_int.h"
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

enum { R_CONNS, R_HANDSHAKES, R_EVICTED, R_SHARE, R_N };
_Static_assert(R_N == MQD_AUTH_ADMIT_REASONS, "a log slot per reason");

static const char *const why_text[R_N] = {
    [R_CONNS] = "max_connections_per_ip",
    [R_HANDSHAKES] = "max_handshakes_per_ip",
    [R_EVICTED] = "handshake_fd_percent",
    [R_SHARE] = "handshake_fd_percent",
};

typedef struct census {
    size_t conns;       /* from the host */
    size_t hs_host;     /* of those, in their handshake */
    size_t hs_all;      /* in their handshake, every host */
    size_t closing;     /* closed by mqd, not yet gone: they hold descriptors until the tick */
    mqd_conn_t *oldest; /* the oldest in its handshake */
} census_t;

/* Live (not closed, nor closing since this iteration: an eviction closes its tail). */
static bool live(mqd_conn_t *c)
{
    return !mqd_conn_closed(c) && !pn_transport_tail_closed(mqd_conn_driver(c)->transport);
}

static bool in_handshake(mqd_conn_t *c)
{
    return (pn_connection_state(mqd_conn_driver(c)->connection) & PN_REMOTE_UNINIT) != 0;
}

/* The length of the host part of a peer "HOST:PORT". */
static size_t host_len(const char *peer)
{
    const char *colon = strrchr(peer, ':');
    return colon ? (size_t)(colon - peer) : strlen(peer);
}

static void count(mqd_server_t *s, const char *host, census_t *n)
{
    size_t hl = strlen(host);
    mqd_dlist_t *conns = mqd_srv_conns(s);
    *n = (census_t){0};
    for (mqd_dlist_t *p = conns->next; p != conns; p = p->next) {
        mqd_conn_t *o = mqd_conn_of_node(p);
        if (!live(o)) {
            n->closing += !mqd_conn_closed(o);
            continue;
        }
        const char *peer = mqd_conn_peer(o); /* "HOST:PORT" */
        bool same = strncmp(peer, host, hl) == 0 && peer[hl] == ':';
        bool hs = in_handshake(o);
        n->conns += same;
        n->hs_host += same && hs;
        n->hs_all += hs;
        if (hs && !n->oldest)
            n->oldest = o;
    }
}

typedef struct host_slot {
    const char *host; /* into a connection's peer; NULL: empty */
    size_t len, n;
    mqd_conn_t *oldest;
} host_slot_t;

/* The oldest unfinished handshake of the address with the most of them (n_hs in all);
 * `fallback` (the oldest of all) when out of memory. */
static mqd_conn_t *victim(mqd_server_t *s, size_t n_hs, mqd_conn_t *fallback)
{
    size_t cap = 16;
    while (cap < 2 * n_hs)
        cap <<= 1;
    host_slot_t *t = calloc(cap, sizeof *t), *best = NULL;
    if (!t)
        return fallback;
    mqd_dlist_t *conns = mqd_srv_conns(s);
    for (mqd_dlist_t *p = conns->next; p != conns; p = p->next) {
        mqd_conn_t *o = mqd_conn_of_node(p);
        if (!live(o) || !in_handshake(o))
            continue;
        const char *peer = mqd_conn_peer(o);
        size_t len = host_len(peer);
        size_t i = (size_t)mqd_auth_pool_key(peer, len) & (cap - 1);
        while (t[i].host && (t[i].len != len || memcmp(t[i].host, peer, len) != 0))
            i = (i + 1) & (cap - 1);
        if (!t[i].host) {
            t[i] = (host_slot_t){.host = peer, .len = len, .oldest = o};
        }
        t[i].n++;
        if (!best || t[i].n > best->n)
            best = &t[i];
    }
    mqd_conn_t *v = best ? best->oldest : fallback;
    free(t);
    return v;
}

/* Logs refusals of kind `why` at most once a second, with how many were not logged. */
static void note(mqd_auth_t *a, int why, const char *host, uint64_t limit)
{
    a->admit_quiet[why]++;
    int64_t now = mqd_now_ms();
    if (now - a->admit_logged_ms[why] < 1000)
        return;
    if (why == R_EVICTED)
        MQD_WARN("conn",
                 "%s: %llu connections in their handshake hold their share of "
                 "descriptors: closed the oldest of %s's (%llu closed since the last report)",
                 why_text[why], (unsigned long long)limit, host,
                 (unsigned long long)a->admit_quiet[why]);
    else if (why == R_SHARE)
        MQD_WARN("conn",
                 "refused %s: %s: %llu connections in their handshake and more being "
                 "closed (%llu refused since the last report)",
                 host, why_text[why], (unsigned long long)limit,
                 (unsigned long long)a->admit_quiet[why]);
    else
        MQD_WARN("conn", "refused %s: %s (%llu) reached (%llu refused since the last report)", host,
                 why_text[why], (unsigned long long)limit, (unsigned long long)a->admit_quiet[why]);
    a->admit_logged_ms[why] = now;
    a->admit_quiet[why] = 0;
}

bool mqd_auth_admit_host(mqd_server_t *s, const char *host)
{
    const mqd_conf_t *conf = mqd_srv_conf(s);
    mqd_auth_t *a = mqd_srv_auth(s);
    census_t n;
    count(s, host, &n);
    if (conf->max_connections_per_ip && n.conns >= conf->max_connections_per_ip) {
        if (a)
            note(a, R_CONNS, host, conf->max_connections_per_ip);
        return false;
    }
    if (conf->max_handshakes_per_ip && n.hs_host >= conf->max_handshakes_per_ip) {
        if (a)
            note(a, R_HANDSHAKES, host, conf->max_handshakes_per_ip);
        return false;
    }
    mqd_fd_budget_t b;
    mqd_fd_budget(s, &b);
    if (!b.nofile || n.hs_all + n.closing < b.handshakes)
        return true;
    /* At the share. Those closed to make room keep their descriptors until the tick,
     * and one loop iteration may accept a whole backlog: past a quarter of the share
     * closing, only a first handshake from an address still takes a place. */
    if (n.oldest && (n.hs_host == 0 || n.closing < b.handshakes / 4 + 1)) {
        mqd_conn_t *v = victim(s, n.hs_all, n.oldest);
        if (a)
            note(a, R_EVICTED, mqd_conn_peer(v), b.handshakes);
        mqd_auth_conn_abort(v, "amqp:resource-limit-exceeded",
                            "too many connections in their handshake");
        return true;
    }
    if (a)
        note(a, R_SHARE, host, b.handshakes);
    return false;
}
