/* core/pnlink: what the model keeps of Proton's links and deliveries past their events
 * (held deliveries, link and session reaping), and the two ways a link or delivery is
 * refused. Used by amqp/ (link handlers), txn/ (discharges) and the settlement of
 * waiting sends (part_commit.c). */
#include "config.h"
#include "core/core.h"
#include "core/core_int.h"

#include <proton/condition.h>
#include <proton/disposition.h>
#include <proton/object.h>
#include <stdio.h>

void mqd_link_refuse(pn_link_t *l, const char *cond, const char *fmt, const char *arg)
{
    char desc[512];
    snprintf(desc, sizeof desc, fmt, arg);
    pn_condition_t *c = pn_link_condition(l);
    pn_condition_set_name(c, cond);
    pn_condition_set_description(c, desc);
    pn_link_open(l);
    pn_link_close(l);
    MQD_INFO_RL("link", "refused attach: %s: %s", cond, desc);
}

void mqd_delivery_reject(pn_delivery_t *d, const char *cond, const char *desc)
{
    pn_condition_t *pc = pn_disposition_condition(pn_delivery_local(d));
    pn_condition_set_name(pc, cond);
    pn_condition_set_description(pc, desc);
    pn_delivery_update(d, PN_REJECTED);
    pn_delivery_settle(d);
}

/* ---------------------------------------------------------------- freeing links
 *
 * A link is freed (pn_link_free, which also lets Proton drop its deliveries) once it is
 * closed on both sides, its mqd_lstate_t is gone (freed at the remote detach: group
 * membership, handoff, browse state and unsettled consumer deliveries are released
 * there) and mqd keeps no pointer to any of its deliveries. The only such pointers are
 * a producer's sends waiting for their records to become stable (the partition's
 * pending list, settled in topic.c on_stable) and a discharge waiting for its decision
 * (txn.c); they carry `held` as their context from the moment the pointer is kept until
 * mqd_delivery_unhold, and their holder calls mqd_link_reap after settling them. A
 * transactional disposition on a consumer delivery is settled at once and staged by
 * (group, partition, offset), so it holds nothing. Closing a connection frees its links
 * with it (conn.c), so pointers held by a closed connection's sends never meet a
 * freed link either. */
static char held;
/* A detach without closed=true leaves no trace in pn_link_state: remember it on the link. */
PN_HANDLE(MQD_REMOTE_DETACHED)
/* Links of a session not yet freed (Proton has no public count): a session is freed
 * (pn_session_free) once it is ended on both sides and its last link is gone, so clients
 * that open and end sessions on one long-lived connection (a JMS session per request)
 * do not grow the broker by ~5 KiB per session. */
PN_HANDLE(MQD_SESSION_LINKS)

intptr_t mqd_session_links(pn_session_t *ss, intptr_t delta)
{
    pn_record_t *r = pn_session_attachments(ss);
    intptr_t n = (intptr_t)pn_record_get(r, MQD_SESSION_LINKS) + delta;
    if (delta) {
        pn_record_def(r, MQD_SESSION_LINKS, PN_VOID);
        pn_record_set(r, MQD_SESSION_LINKS, (void *)n);
    }
    return n;
}

void mqd_session_reap(pn_session_t *ss)
{
    pn_state_t st = pn_session_state(ss);
    if ((st & PN_LOCAL_CLOSED) && (st & PN_REMOTE_CLOSED) && mqd_session_links(ss, 0) == 0)
        pn_session_free(ss); /* Proton sends the end first */
}

void mqd_link_mark_remote_detached(pn_link_t *l)
{
    pn_record_t *r = pn_link_attachments(l);
    pn_record_def(r, MQD_REMOTE_DETACHED, PN_VOID);
    pn_record_set(r, MQD_REMOTE_DETACHED, &held);
}

void mqd_delivery_hold(pn_delivery_t *d)
{
    pn_delivery_set_context(d, &held);
}

pn_link_t *mqd_delivery_unhold(pn_delivery_t *d)
{
    pn_delivery_set_context(d, NULL);
    return pn_delivery_link(d);
}

void mqd_link_reap(pn_link_t *l)
{
    pn_state_t st = pn_link_state(l);
    if (pn_link_get_context(l) || !(st & PN_LOCAL_CLOSED))
        return;
    /* the peer may still use a link it has not detached (an ended session detaches all) */
    if (!(st & PN_REMOTE_CLOSED) && !(pn_session_state(pn_link_session(l)) & PN_REMOTE_CLOSED) &&
        !pn_record_get(pn_link_attachments(l), MQD_REMOTE_DETACHED))
        return;
    for (pn_delivery_t *d = pn_unsettled_head(l); d; d = pn_unsettled_next(d))
        if (pn_delivery_get_context(d) == &held)
            return;  /* its holder reaps the link once it lets go */
    pn_session_t *ss = pn_link_session(l);
    pn_link_free(l); /* settles what is left; Proton sends the detach first */
    mqd_session_links(ss, -1);
    mqd_session_reap(ss);
}

bool mqd_delivery_held(pn_delivery_t *d)
{
    return pn_delivery_get_context(d) == &held;
}
