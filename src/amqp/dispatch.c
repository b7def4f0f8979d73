/* amqp/dispatch: hands records to consumers. A topic whose commit point moved or whose
 * consumer got credit is queued (core's mqd_topic_dispatch_soon); the tick runs the
 * queue here, round robin over each topic's consumers. */
#include "config.h"
#include "amqp/amqp_int.h"

/* Round robin over the topic's consumers with credit until none can take more. */
static void topic_dispatch(mqd_topic_t *t)
{
    mqd_dlist_t *consumers = mqd_topic_consumers(t);
    for (int guard = 0; guard < 100000; guard++) {
        size_t sent = 0;
        mqd_dlist_t *n = consumers->next;
        while (n != consumers) {
            mqd_lstate_t *ls = mqd_ls_of_tnode(n);
            n = n->next;
            sent += mqd_consumer_pump(ls);
        }
        if (sent == 0)
            break;
    }
}

void mqd_server_run_later(mqd_server_t *s)
{
    mqd_dlist_t *later = mqd_srv_dispatch_later(s);
    while (!mqd_dlist_empty(later)) {
        mqd_dlist_t *n = later->next;
        mqd_dlist_del(n);
        mqd_topic_t *t = mqd_topic_of_lnode(n);
        mqd_dlist_t *consumers = mqd_topic_consumers(t);
        for (mqd_dlist_t *c = consumers->next; c != consumers; c = c->next) {
            mqd_alink_t *al = mqd_ls_amqp(mqd_ls_of_tnode(c));
            al->sel_work = 0;
        }
        mqd_topic_dispatch_soon(t);
    }
}

void mqd_server_run_dispatch(mqd_server_t *s)
{
    mqd_dlist_t *q = mqd_srv_dispatch_q(s);
    while (!mqd_dlist_empty(q)) {
        mqd_dlist_t *n = q->next;
        mqd_dlist_del(n);
        topic_dispatch(mqd_topic_of_dnode(n));
    }
}
