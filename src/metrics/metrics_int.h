/* metrics/ private: the exposition helpers its files share. */
#ifndef MQD_METRICS_INT_H
#define MQD_METRICS_INT_H

#include "metrics/metrics.h"

struct evbuffer;

/* A label value, escaped as format 0.0.4 asks (backslash, double quote, newline). */
void mqd_metrics_label(struct evbuffer *b, const char *v);
/* The # HELP and # TYPE lines of a metric family. */
void mqd_metrics_head(struct evbuffer *b, const char *name, const char *type, const char *help);

/* process.c: fn(topic, group, members, arg) for every group of every topic but the
 * temporary ones, the queue $shared left out until a queue consumer used it
 * (mqd_group_unused_queue): what /metrics and the history show of groups. */
struct mqd_topic;
typedef void (*mqd_metrics_group_fn)(struct mqd_topic *t, const char *group, size_t members,
                                     void *arg);
void mqd_metrics_each_group(struct mqd_server *s, mqd_metrics_group_fn fn, void *arg);

/* process.c: CPU seconds, the descriptor limit, build info, refused logins by
 * mechanism, certificate expiry */
void mqd_metrics_put_process_extra(struct evbuffer *b, struct mqd_server *s);
/* process.c: mqd_group_members and mqd_group_inflight per topic and group */
void mqd_metrics_put_group_extra(struct evbuffer *b, struct mqd_server *s);

/* history.c */
int mqd_history_new(mqd_history_t **out);
void mqd_history_free(mqd_history_t *h);
void mqd_history_sample(mqd_history_t *h, struct mqd_server *srv, int64_t now_ms);

#endif
