/* Link names (AMQP 1.0 2.6.1): a link is named uniquely per pair of containers and
 * direction, so a second attach of a name by the same peer container and role takes the
 * link over; the older one is detached with amqp:link:stolen: with link_stealing =
 * connection on the same connection, with container on another connection of that
 * container too (a client that reconnected). Off by default: each attach scans the
 * connection's links, quadratic for a client with 32,768 of them (54-memory-budget's
 * case went from seconds to 222 s), and cross-connection stealing breaks Proton's
 * Container, whose connections share one container-id and name links by address. A second attach of
 * an active name on the same session never gets here: Proton closes the connection with
 * amqp:invalid-field ("link name already attached"). */
#include "config.h"
#include "amqp/amqp_int.h"

#include <proton/connection.h>
#include <string.h>

/* Detaches every other active link of c's peer container with l's name and role. The
 * cost is one container-id compare per connection and a name compare per link of the
 * connections of the same container (usually one). */
void mqd_link_steal(mqd_conn_t *c, pn_link_t *l)
{
    mqd_server_t *s = mqd_conn_srv(c);
    int mode = mqd_srv_conf(s)->link_stealing;
    if (mode == 0) /* off: the scan below is per attach, O(links of the container) */
        return;
    const char *cid = pn_connection_remote_container(mqd_conn_driver(c)->connection);
    if (!cid || !*cid)
        return;
    const char *name = pn_link_name(l);
    bool sender = pn_link_is_sender(l);
    mqd_dlist_t *conns = mqd_srv_conns(s);
    for (mqd_dlist_t *n = conns->next; n != conns; n = n->next) {
        mqd_conn_t *o = mqd_conn_of_node(n);
        /* other connections only with link_stealing = container: Proton's Container
         * names its links "<container-id>-<address>" and all its connections share the
         * id, so two connections of one process sending to one address would steal
         * each other's link (05-request-response and 11-memory-connections did) */
        if (o != c && mode == 1)
            continue;
        pn_connection_t *opc = mqd_conn_driver(o)->connection;
        const char *ocid = mqd_conn_closed(o) ? NULL : pn_connection_remote_container(opc);
        if (!ocid || strcmp(ocid, cid) != 0)
            continue;
        for (pn_link_t *ol = pn_link_head(opc, PN_LOCAL_ACTIVE), *next; ol; ol = next) {
            next = pn_link_next(ol, PN_LOCAL_ACTIVE);
            mqd_lstate_t *ls = pn_link_get_context(ol);
            if (ol == l || !ls || pn_link_is_sender(ol) != sender || strcmp(pn_link_name(ol), name))
                continue;
            MQD_INFO("link", "link '%s' of container %s attached again: the older one is stolen",
                     name, cid);
            mqd_consumer_detach(
                ls, "amqp:link:stolen",
                "a link of the same name and role was attached by the same container");
        }
    }
}
