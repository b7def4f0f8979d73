/* util/hist: cumulative histograms with fixed bucket bounds (Prometheus style). */
#include "config.h"

#include "util/util.h"

#include <event2/buffer.h>

static const double bounds[MQD_HIST_BUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                1,      2.5,     5,      10};

const double *mqd_hist_bounds(void) { return bounds; }

void mqd_hist_observe(mqd_hist_t *h, double seconds)
{
    size_t i = 0;
    while (i < MQD_HIST_BUCKETS && seconds > bounds[i])
        i++;
    h->bucket[i]++;
    h->count++;
    h->sum += seconds;
}

void mqd_hist_put(struct evbuffer *b, const char *name, const char *help, const mqd_hist_t *h)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < MQD_HIST_BUCKETS; i++) {
        cum += h->bucket[i];
        evbuffer_add_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    evbuffer_add_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9f\n%s_count %llu\n", name,
                        (unsigned long long)h->count, name, h->sum, name,
                        (unsigned long long)h->count);
}
