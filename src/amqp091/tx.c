/* amqp091/tx: tx.select / tx.commit / tx.rollback (0-9-1's transaction class).
 *
 * As RabbitMQ does: on a transactional channel, publishes and acknowledgements (ack,
 * nack, reject) are kept on the channel, not applied, until tx.commit; tx.rollback drops
 * them. A publish is routed, and checked against the ACL, when it arrives (a refused one
 * closes the channel then, as outside a transaction; an unroutable mandatory one is
 * returned then); an acknowledgement's delivery tag is checked when it arrives. At the
 * commit each kept publish is stored in every queue it was routed to and each kept
 * acknowledgement is applied, in arrival order, and tx.commit-ok is sent once every
 * store is durable under its topic's flush and acks (or its leader's, forwarded), as a
 * publisher confirm would be; a store that fails closes the channel with 541
 * INTERNAL_ERROR instead. Like RabbitMQ's, the commit is not atomic across queues (a
 * failure can leave some queues with the message); mqd's own transactions (AMQP 1.0
 * coordinator) are. A channel is transactional or in confirm mode, never both (406). */
#include "config.h"
#include "amqp091/amqp091_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct a091_txop {
    struct a091_txop *next;
    /* a publish: its encoded AMQP 1.0 message and the queues it goes to */
    uint8_t *msg;
    size_t len;
    char **q;
    size_t nq;
    /* else an acknowledgement */
    uint64_t tag;
    bool multiple, done;
    amqp_method_number_t id;
} a091_txop_t;

struct a091_tx {
    a091_txop_t *head, *tail; /* kept since the last commit or rollback */
    bool busy;                /* a commit's stores are not all durable yet */
    bool again;               /* a commit came meanwhile: runs when the busy one is done */
    a091_txop_t *next_head;   /* its operations */
};

static void ops_free(a091_txop_t *op)
{
    while (op) {
        a091_txop_t *next = op->next;
        for (size_t i = 0; i < op->nq; i++)
            free(op->q[i]);
        free(op->q);
        free(op->msg);
        free(op);
        op = next;
    }
}

void a091_tx_free(a091_chan_t *ch)
{
    if (!ch->tx)
        return;
    ops_free(ch->tx->head);
    ops_free(ch->tx->next_head);
    free(ch->tx);
    ch->tx = NULL;
}

static void push(a091_tx_t *tx, a091_txop_t *op)
{
    if (tx->tail)
        tx->tail->next = op;
    else
        tx->head = op;
    tx->tail = op;
}

int a091_tx_keep_publish(a091_conn_t *c, a091_chan_t *ch, const mqd_buf_t *msg,
                         const a091_targets_t *tg)
{
    a091_txop_t *op = calloc(1, sizeof *op);
    bool ok = op && (op->msg = malloc(msg->len ? msg->len : 1)) &&
              (op->q = calloc(tg->n ? tg->n : 1, sizeof *op->q));
    for (size_t i = 0; ok && i < tg->n; i++)
        ok = (op->q[op->nq++] = strdup(tg->q[i])) != NULL;
    if (!ok) {
        ops_free(op);
        a091_conn_error(c, A091_RESOURCE_ERROR, "RESOURCE_ERROR - out of memory", 0);
        return A091_RESOURCE_ERROR;
    }
    memcpy(op->msg, msg->p, msg->len);
    op->len = msg->len;
    push(ch->tx, op);
    return 0;
}

int a091_tx_keep_settle(a091_conn_t *c, a091_chan_t *ch, uint64_t tag, bool multiple, bool done,
                        amqp_method_number_t id)
{
    a091_txop_t *op = calloc(1, sizeof *op);
    if (!op) {
        a091_conn_error(c, A091_RESOURCE_ERROR, "RESOURCE_ERROR - out of memory", 0);
        return A091_RESOURCE_ERROR;
    }
    *op = (a091_txop_t){.tag = tag, .multiple = multiple, .done = done, .id = id};
    push(ch->tx, op);
    return 0;
}

static void commit_run(a091_conn_t *c, a091_chan_t *ch, a091_txop_t *ops);

/* Every store of the commit told its outcome (a091_multi's end): commit-ok, or the
 * channel closed when one failed; then the commit that waited, if any. */
void a091_tx_committed(a091_conn_t *c, a091_chan_t *ch, bool ok)
{
    a091_tx_t *tx = ch->tx;
    if (!tx)
        return;
    tx->busy = false;
    if (!ok) {
        a091_chan_error(c, ch, A091_INTERNAL_ERROR,
                        "INTERNAL_ERROR - tx.commit: a publish was not stored in every queue "
                        "it was routed to",
                        AMQP_TX_COMMIT_METHOD);
        return;
    }
    amqp_tx_commit_ok_t okm = {0};
    a091_send_method(c, ch->id, AMQP_TX_COMMIT_OK_METHOD, &okm);
    if (tx->again) {
        a091_txop_t *ops = tx->next_head;
        tx->again = false;
        tx->next_head = NULL;
        commit_run(c, ch, ops);
    }
}

static void commit_run(a091_conn_t *c, a091_chan_t *ch, a091_txop_t *ops)
{
    a091_multi_t *mu = a091_multi_new(c, ch, 0, true);
    if (!mu) {
        ops_free(ops);
        a091_conn_error(c, A091_RESOURCE_ERROR, "RESOURCE_ERROR - out of memory", 0);
        return;
    }
    ch->tx->busy = true;
    for (a091_txop_t *op = ops; op && !ch->closing; op = op->next) {
        if (op->msg) {
            mqd_buf_t b = {.p = op->msg, .len = op->len, .cap = op->len};
            for (size_t i = 0; i < op->nq; i++)
                a091_store(c, ch, op->q[i], &b, mu);
        } else {
            a091_settle_tags(c, ch, op->tag, op->multiple, op->done, op->id);
        }
    }
    ops_free(ops);
    a091_multi_done(mu); /* commit_run's hold: the commit-ok once every store is told */
}

static int tx_commit(a091_conn_t *c, a091_chan_t *ch)
{
    a091_tx_t *tx = ch->tx;
    a091_txop_t *ops = tx->head;
    tx->head = tx->tail = NULL;
    if (tx->busy) { /* in order: after the commit before it */
        a091_txop_t **t = &tx->next_head;
        while (*t)
            t = &(*t)->next;
        *t = ops;
        tx->again = true;
        return 0;
    }
    commit_run(c, ch, ops);
    return 0;
}

int a091_tx_method(a091_conn_t *c, a091_chan_t *ch, amqp_method_number_t id)
{
    if (id == AMQP_TX_SELECT_METHOD) {
        if (ch->confirm)
            return a091_chan_fail(c, ch, A091_PRECONDITION_FAILED,
                                  "PRECONDITION_FAILED - cannot switch from confirm to tx mode%s",
                                  "", id);
        if (!ch->tx && !(ch->tx = calloc(1, sizeof *ch->tx))) {
            a091_conn_error(c, A091_RESOURCE_ERROR, "RESOURCE_ERROR - out of memory", 0);
            return A091_RESOURCE_ERROR;
        }
        amqp_tx_select_ok_t ok = {0};
        return a091_send_method(c, ch->id, AMQP_TX_SELECT_OK_METHOD, &ok);
    }
    if (id != AMQP_TX_COMMIT_METHOD && id != AMQP_TX_ROLLBACK_METHOD)
        return a091_chan_fail(c, ch, A091_NOT_IMPLEMENTED, "NOT_IMPLEMENTED - %s",
                              amqp_method_name(id), id);
    if (!ch->tx)
        return a091_chan_fail(c, ch, A091_PRECONDITION_FAILED,
                              "PRECONDITION_FAILED - channel is not transactional%s", "", id);
    if (id == AMQP_TX_COMMIT_METHOD)
        return tx_commit(c, ch);
    ops_free(ch->tx->head);
    ch->tx->head = ch->tx->tail = NULL;
    amqp_tx_rollback_ok_t ok = {0};
    return a091_send_method(c, ch->id, AMQP_TX_ROLLBACK_OK_METHOD, &ok);
}
