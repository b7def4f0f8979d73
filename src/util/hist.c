/* util/hist: cumulative histograms with fixed bucket bounds (Prometheus style). */
#include "config.h"

#include "util/util.h"

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
