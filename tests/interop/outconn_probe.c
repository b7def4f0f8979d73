/* outconn_probe: an mqd (mqd_server_new, no listener, its own data dir) that connects to
 * another broker through mqd_outconn and sends COUNT durable messages to ADDRESS, at
 * least once: whatever was not accepted when a connection ended is sent again on the
 * next one. Driven by tests/interop/69-outconn.py, which checks the other broker.
 *
 *   outconn_probe --url U --address A --count N [--user U --password P] [--ca FILE]
 *                 [--cert FILE --key FILE] [--external] [--authzid Z] [--peer-cn CN]
 *                 [--hostname H] [--backoff-min MS] [--backoff-max MS] [--seconds S]
 *                 [--rate MSGS_PER_S] [--expect-down]
 *
 * Prints one line: key=value of what it saw; exits 0 when every message was accepted
 * (--expect-down: when the time ran out without any connection being opened by the
 * peer), 1 otherwise, 2 on bad arguments. */
#include "config.h"
#include "server/server.h"
#include "conf/conf.h"

#include <event2/event.h>
#include <ftw.h>
#include <proton/codec.h>
#include <proton/connection.h>
#include <proton/delivery.h>
#include <proton/disposition.h>
#include <proton/link.h>
#include <proton/message.h>
#include <proton/session.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct probe {
    mqd_server_t *srv;
    mqd_outconn_t *oc;
    const char *address;
    size_t count;
    bool *accepted;      /* per message */
    size_t n_accepted;
    size_t sent;         /* transfers, resends included */
    size_t rejected;     /* any outcome but accepted (sent again) */
    size_t downs;
    size_t next;         /* next index this connection sends */
    pn_link_t *snd;      /* of the live connection, NULL while down */
    size_t tag;
    char last_down[160];
    pn_message_t *msg;
    char *buf;
    size_t buf_cap;
    size_t rate;         /* --rate: messages a second, 0 = as fast as credit allows */
    size_t allowed;      /* sends the pacing timer allows so far */
} probe_t;

static void send_some(probe_t *p)
{
    while (p->snd && pn_link_credit(p->snd) > 0 && p->next < p->count &&
           (p->rate == 0 || p->sent < p->allowed)) {
        size_t i = p->next++;
        if (p->accepted[i])
            continue;
        char body[64], tag[24];
        snprintf(body, sizeof body, "%s-%zu", p->address, i);
        pn_message_clear(p->msg);
        pn_message_set_durable(p->msg, true);
        pn_data_t *b = pn_message_body(p->msg);
        pn_data_put_string(b, pn_bytes(strlen(body), body));
        size_t len = p->buf_cap;
        if (pn_message_encode(p->msg, p->buf, &len) != 0)
            abort();
        int n = snprintf(tag, sizeof tag, "%zu", p->tag++);
        pn_delivery_t *d = pn_delivery(p->snd, pn_dtag(tag, (size_t)n));
        pn_delivery_set_context(d, (void *)(uintptr_t)(i + 1));
        pn_link_send(p->snd, p->buf, len);
        pn_link_advance(p->snd);
        p->sent++;
    }
}

static void done_check(probe_t *p)
{
    if (p->n_accepted == p->count)
        mqd_server_stop(p->srv);
}

static void on_event(mqd_outconn_t *oc, pn_event_t *e, void *arg)
{
    probe_t *p = arg;
    switch (pn_event_type(e)) {
    case PN_CONNECTION_REMOTE_OPEN: {
        pn_session_t *ss = pn_session(pn_event_connection(e));
        pn_session_open(ss);
        p->snd = pn_sender(ss, "outconn-probe");
        pn_terminus_set_address(pn_link_target(p->snd), p->address);
        pn_link_open(p->snd);
        p->next = 0; /* everything not accepted yet goes again */
        break;
    }
    case PN_LINK_FLOW:
        send_some(p);
        break;
    case PN_DELIVERY: {
        pn_delivery_t *d = pn_event_delivery(e);
        if (!pn_delivery_updated(d) || !pn_delivery_remote_state(d))
            break;
        size_t i = (size_t)(uintptr_t)pn_delivery_get_context(d) - 1;
        if (pn_delivery_remote_state(d) == PN_ACCEPTED) {
            if (!p->accepted[i]) {
                p->accepted[i] = true;
                p->n_accepted++;
            }
        } else {
            p->rejected++;
            if (p->next > i)
                p->next = i; /* again, on this connection */
        }
        pn_delivery_settle(d);
        send_some(p);
        done_check(p);
        break;
    }
    default:
        break;
    }
}

static void on_down(mqd_outconn_t *oc, const char *why, void *arg)
{
    probe_t *p = arg;
    p->snd = NULL; /* freed with its connection */
    p->downs++;
    snprintf(p->last_down, sizeof p->last_down, "%s", why);
}

static void on_pace(evutil_socket_t fd, short what, void *arg)
{
    probe_t *p = arg;
    p->allowed += p->rate / 100 ? p->rate / 100 : 1;
    send_some(p);
    mqd_outconn_flush(p->oc);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    mqd_server_stop(arg);
}

static char dir[64];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int usage(void)
{
    fprintf(stderr, "usage: outconn_probe --url U --address A --count N [--user U --password P] "
                    "[--ca FILE] [--cert FILE --key FILE] [--external] [--authzid Z] "
                    "[--peer-cn CN] [--hostname H] [--backoff-min MS] "
                    "[--backoff-max MS] "
                    "[--seconds S] [--rate N] [--expect-down]\n");
    return 2;
}

static mqd_server_t *start_server(mqd_conf_t **confp)
{
    char err[512], kv[128];
    mqd_conf_t *conf;
    snprintf(dir, sizeof dir, "/tmp/mqd-outconn-probe.XXXXXX");
    if (!mkdtemp(dir) || mqd_conf_new(&conf) != 0)
        return NULL;
    snprintf(kv, sizeof kv, "data_dir=%s", dir);
    if (mqd_conf_set(conf, kv, err, sizeof err) != 0 || mqd_conf_set(conf, "log_level=info", err, sizeof err) != 0 ||
        mqd_conf_validate(conf, err, sizeof err) != 0) {
        fprintf(stderr, "outconn_probe: %s\n", err);
        return NULL;
    }
    size_t n_listen = conf->n_listen;
    conf->n_listen = 0; /* it only connects out */
    mqd_log_set_level(conf->log_level);
    mqd_server_t *s = NULL;
    if (mqd_server_new(conf, NULL, &s) != 0)
        s = NULL;
    conf->n_listen = n_listen;
    *confp = conf;
    return s;
}

int main(int argc, char **argv)
{
    mqd_outconn_opts_t o = {0};
    probe_t p = {0};
    double seconds = 60;
    bool expect_down = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--expect-down") == 0) {
            expect_down = true;
            continue;
        }
        if (strcmp(a, "--external") == 0) {
            o.sasl_external = true;
            continue;
        }
        if (!v)
            return usage();
        i++;
        /* clang-format off */
        if (strcmp(a, "--url") == 0) o.url = v;
        else if (strcmp(a, "--address") == 0) p.address = v;
        else if (strcmp(a, "--count") == 0) p.count = strtoul(v, NULL, 10);
        else if (strcmp(a, "--user") == 0) o.user = v;
        else if (strcmp(a, "--password") == 0) o.password = v;
        else if (strcmp(a, "--ca") == 0) o.ca_file = v;
        else if (strcmp(a, "--cert") == 0) o.cert_file = v;
        else if (strcmp(a, "--key") == 0) o.key_file = v;
        else if (strcmp(a, "--authzid") == 0) o.authzid = v;
        else if (strcmp(a, "--peer-cn") == 0) o.peer_cn = v;
        else if (strcmp(a, "--hostname") == 0) o.hostname = v;
        else if (strcmp(a, "--backoff-min") == 0) o.backoff_min_ms = (uint32_t)atoi(v);
        else if (strcmp(a, "--backoff-max") == 0) o.backoff_max_ms = (uint32_t)atoi(v);
        else if (strcmp(a, "--seconds") == 0) seconds = atof(v);
        else if (strcmp(a, "--rate") == 0) p.rate = strtoul(v, NULL, 10);
        else return usage();
        /* clang-format on */
    }
    if (!o.url || !p.address || (p.count == 0 && !expect_down))
        return usage();
    o.container = "outconn-probe";
    mqd_conf_t *conf = NULL;
    p.srv = start_server(&conf);
    if (!p.srv)
        return 1;
    p.accepted = calloc(p.count + 1, sizeof *p.accepted);
    p.msg = pn_message();
    p.buf_cap = 4096;
    p.buf = malloc(p.buf_cap);
    mqd_outconn_ops_t ops = {.on_event = on_event, .on_down = on_down};
    int rc = mqd_outconn_new(p.srv, &o, &ops, &p, &p.oc);
    if (rc != 0) {
        printf("setup_error=%d\n", rc);
        fflush(stdout);
        mqd_server_free(p.srv); /* and the rest: nothing left for LeakSanitizer */
        mqd_conf_free(conf);
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        pn_message_free(p.msg);
        free(p.buf);
        free(p.accepted);
        return 1;
    }
    struct event *deadline = evtimer_new(mqd_server_base(p.srv), on_deadline, p.srv);
    struct timeval tv = {.tv_sec = (time_t)seconds, .tv_usec = (suseconds_t)((seconds - (time_t)seconds) * 1e6)};
    evtimer_add(deadline, &tv);
    struct event *pace = event_new(mqd_server_base(p.srv), -1, EV_PERSIST, on_pace, &p);
    struct timeval ten = {.tv_sec = 0, .tv_usec = 10000};
    if (p.rate)
        evtimer_add(pace, &ten);
    mqd_server_run(p.srv);
    event_free(pace);
    mqd_outconn_stats_t st;
    mqd_outconn_get_stats(p.oc, &st);
    printf("count=%zu accepted=%zu sent=%zu rejected=%zu downs=%zu attempts=%llu connects=%llu "
           "opened=%llu last_down=%s last_error=\"%s\"\n",
           p.count, p.n_accepted, p.sent, p.rejected, p.downs, (unsigned long long)st.attempts,
           (unsigned long long)st.connects, (unsigned long long)st.opened,
           p.last_down[0] ? p.last_down : "-", st.last_error);
    fflush(stdout);
    bool ok = expect_down ? st.opened == 0 : p.n_accepted == p.count;
    event_free(deadline);
    mqd_server_free(p.srv);
    mqd_conf_free(conf);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    pn_message_free(p.msg);
    free(p.buf);
    free(p.accepted);
    return ok ? 0 : 1;
}
