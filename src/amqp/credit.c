/* Producer link credit: what mqd grants a sending client, what that client has been
 * shown of it, and the transfer that goes beyond it (AMQP 1.0 §2.6.7: a sender may not
 * send with no link credit).
 *
 * Proton 0.37 counts an incoming transfer against the credit it advertised
 * (pn_do_transfer: link_credit--) without checking it, and pn_link_credit is mqd's own
 * local count, which already includes credit granted (pn_link_flow) and not yet sent. So
 * mqd checks each delivery once, at its first frame, against the credit the peer had
 * been shown: Proton sends the flow frame of a grant when it next produces output
 * (conn_write bumps c->out_gen then); input decoded before that was sent without it. A
 * delivery is the link's current one when first seen (the ones before it are advanced),
 * so it is within credit iff pn_link_credit - (credit granted since the last output)
 * >= 1. A flow Proton could not write at once (output buffer full) counts as shown:
 * lenient by at most one grant, never a false detach.
 *
 * Beyond the credit: the link is detached with amqp:link:transfer-limit-exceeded and
 * the delivery, and anything after it on the link, is dropped unstored. Every receiving
 * link goes through here: producers (topic, partition, anonymous relay, reply node),
 * $management and the transaction coordinator. */
#include "config.h"
#include "amqp/amqp_int.h"

#include <proton/condition.h>
#include <proton/object.h>
#include <stdio.h>

/* While a watermark is exceeded, $management and the coordinator (which store no
 * messages of a producer) keep this small window: the operator frees disk through
 * management (topic delete), and a transaction can still be discharged. */
#define BLOCKED_WINDOW 8

/* A delivery already counted against its link's credit (set at its first frame; Proton
 * clears a delivery's attachments when it reuses one). */
PN_HANDLE(MQD_CREDIT_COUNTED)
static char counted;

/* Credit granted to ls since its connection last produced output: not yet shown. */
static int unposted(mqd_lstate_t *ls)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    if (al->credit_gen != mqd_conn_out_gen(mqd_ls_conn(ls)))
        al->credit_unposted = 0;
    return al->credit_unposted;
}

void mqd_credit_grant(mqd_lstate_t *ls, int n)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    if (n <= 0)
        return;
    (void)unposted(ls);
    pn_link_flow(mqd_ls_link(ls), n);
    al->credit_unposted += n;
    al->credit_gen = mqd_conn_out_gen(mqd_ls_conn(ls));
}

bool mqd_credit_arrived(mqd_lstate_t *ls, pn_delivery_t *d)
{
    pn_record_t *r = pn_delivery_attachments(d);
    if (pn_record_get(r, MQD_CREDIT_COUNTED) == &counted)
        return true; /* a later frame of a delivery already counted */
    pn_record_def(r, MQD_CREDIT_COUNTED, PN_VOID);
    pn_record_set(r, MQD_CREDIT_COUNTED, &counted);
    return pn_link_credit(mqd_ls_link(ls)) - unposted(ls) >= 1;
}

void mqd_credit_exceeded(mqd_lstate_t *ls)
{
    pn_link_t *l = mqd_ls_link(ls);
    char why[160];
    snprintf(why, sizeof why,
             "transfer sent with no link credit (AMQP 1.0 2.6.7); credit shown: %d",
             pn_link_credit(l) - unposted(ls));
    pn_condition_t *lc = pn_link_condition(l);
    pn_condition_set_name(lc, "amqp:link:transfer-limit-exceeded");
    pn_condition_set_description(lc, why);
    pn_link_close(l);
    MQD_INFO("link", "detached producer peer=%s link=%s: %s", mqd_conn_peer(mqd_ls_conn(ls)),
             pn_link_name(l), why);
}

int mqd_credit_refill(mqd_lstate_t *ls)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    pn_link_t *l = mqd_ls_link(ls);
    mqd_server_t *s = mqd_conn_srv(mqd_ls_conn(ls));
    int window = (int)mqd_srv_conf(s)->link_credit;
    int credit = pn_link_credit(l);
    int n;

    if (pn_link_state(l) & PN_LOCAL_CLOSED)
        return 0;
    if (mqd_ls_mgmt(ls) || mqd_ls_coord(ls)) {
        if (window > BLOCKED_WINDOW && mqd_watermark_blocked(s))
            window = BLOCKED_WINDOW;
        n = 2 * credit < window ? window - credit : 0;
    } else {
        if (!al->credit_shared) {
            al->credit_shared = true;
            mqd_watermark_producers(s, 1, 0);
        }
        /* each credit may bring a message as large as the link's largest so far; asked
         * for nothing, the budget still learns what the link holds now */
        uint64_t est = al->msg_max ? al->msg_max + MQD_WATERMARK_REC_OVERHEAD : 0;
        /* forwarded sends in flight (src/fwd) hold their credit until the leader settles
         * them: a slow leader slows the client (end-to-end flow control) */
        const mqd_fwd_hooks_t *fh = mqd_srv_fwd(s);
        int held = fh->inflight ? (int)fh->inflight(fh->arg, ls) : 0;
        if (held > window)
            held = window;
        uint32_t want = 2 * (credit + held) < window ? (uint32_t)(window - credit - held) : 0;
        n = (int)mqd_watermark_window(s, want, credit, est, &al->credit_reserved);
    }
    mqd_credit_grant(ls, n);
    return n;
}

/* (no amqp part: a link state of another subsystem, which never shared the budget) */
void mqd_credit_free(mqd_lstate_t *ls)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    if (!al)
        return;
    if (al->credit_shared)
        mqd_watermark_producers(mqd_conn_srv(mqd_ls_conn(ls)), -1, al->credit_reserved);
    al->credit_shared = false;
    al->credit_reserved = 0;
}

void mqd_amqp_producer_refill(mqd_lstate_t *ls)
{
    if (mqd_credit_refill(ls) > 0)
        mqd_conn_mark_dirty(mqd_ls_conn(ls));
}
