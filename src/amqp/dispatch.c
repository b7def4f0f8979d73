/* amqp/dispatch: hands records to consumers. A topic whose commit point moved or whose
 * consumer got credit is queued (core's mqd_topic_dispatch_soon); the tick runs the
 * queue here, round robin over each topic's consumers. */
#include "config.h"
#include "amqp/amqp_int.h"

/* Round robin over the topic's consumers with credit until none can take more. */
static void topic_dispatch(mqd_topic_t *t)
{
    for (int guard = 0; guard < 100000; guard++) {
        size_t sent = 0;
        mqd_dlist_t *n = t->consumers.next;
        while (n != &t->consumers) {
            mqd_lstate_t *ls = MQD_CONTAINER(n, mqd_lstate_t, tnode);
            n = n->next;
            sent += mqd_consumer_pump(ls);
        }
        if (sent == 0)
            break;
    }
}

void mqd_server_run_later(mqd_server_t *s)
{
    while (!mqd_dlist_empty(&s->dispatch_later)) {
        mqd_dlist_t *n = s->dispatch_later.next;
        mqd_dlist_del(n);
        mqd_topic_t *t = MQD_CONTAINER(n, mqd_topic_t, lnode);
        for (mqd_dlist_t *c = t->consumers.next; c != &t->consumers; c = c->next)
            MQD_CONTAINER(c, mqd_lstate_t, tnode)->sel_work = 0;
        mqd_topic_dispatch_soon(t);
    }
}

void mqd_server_run_dispatch(mqd_server_t *s)
{
    while (!mqd_dlist_empty(&s->dispatch_q)) {
        mqd_dlist_t *n = s->dispatch_q.next;
        mqd_dlist_del(n);
        topic_dispatch(MQD_CONTAINER(n, mqd_topic_t, dnode));
    }
}
