/* Metrics: filled in by the operations work (see metrics.h). */
#include "config.h"
#include "metrics/metrics.h"

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

int mqd_metrics_start(struct mqd_server *s)
{
    MQD_UNUSED(s);
    return 0;
}

void mqd_metrics_stop(struct mqd_server *s) { MQD_UNUSED(s); }
