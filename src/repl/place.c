/* Replica placement and the commit points' arithmetic: pure functions (unit-tested). */
#include "config.h"
#include "repl/repl.h"

#include <stdlib.h>
#include <string.h>

static const char *rack_of(const mqd_repl_cand_t *c)
{
    return c->rack ? c->rack : "";
}

static int by_rack_id(const void *a, const void *b)
{
    const mqd_repl_cand_t *x = a, *y = b;
    int r = strcmp(rack_of(x), rack_of(y));
    return r ? r : x->id < y->id ? -1 : x->id > y->id;
}

/* The candidates in rack-alternating order: the first node of each rack (racks by name),
 * then the second of each, ... (as Kafka's rack-aware assignment does), so any rf
 * consecutive entries span min(rf, racks) racks when the racks are about even. */
static int rack_order(const mqd_repl_cand_t *c, size_t n, uint32_t *order)
{
    mqd_repl_cand_t *s = malloc(n * sizeof *s);
    size_t *first = malloc((n + 1) * sizeof *first), racks = 0;
    if (!s || !first) {
        free(s);
        free(first);
        return MQD_ENOMEM;
    }
    memcpy(s, c, n * sizeof *s);
    qsort(s, n, sizeof *s, by_rack_id);
    for (size_t i = 0; i < n; i++)
        if (i == 0 || strcmp(rack_of(&s[i]), rack_of(&s[i - 1])) != 0)
            first[racks++] = i;
    first[racks] = n;
    size_t k = 0;
    for (size_t round = 0; k < n; round++)
        for (size_t r = 0; r < racks; r++)
            if (first[r] + round < first[r + 1])
                order[k++] = s[first[r] + round].id;
    free(s);
    free(first);
    return 0;
}

int mqd_repl_place(const mqd_repl_cand_t *c, size_t n, uint32_t nparts, uint32_t rf, uint32_t start,
                   uint32_t *out)
{
    if (rf == 0 || rf > MQD_REPL_MAX_RF || rf > n)
        return MQD_EINVAL;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (c[i].id == c[j].id)
                return MQD_EINVAL;
    uint32_t *order = malloc(n * sizeof *order);
    if (!order)
        return MQD_ENOMEM;
    int rc = rack_order(c, n, order);
    for (uint32_t p = 0; rc == 0 && p < nparts; p++)
        for (uint32_t j = 0; j < rf; j++)
            out[(size_t)p * rf + j] = order[((size_t)start + p + j) % n];
    free(order);
    return rc;
}

uint64_t mqd_repl_hw(uint64_t leader_end, const uint64_t *leo, size_t n)
{
    uint64_t hw = leader_end;
    for (size_t i = 0; i < n; i++)
        if (leo[i] < hw)
            hw = leo[i];
    return hw;
}

static int desc_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x > y ? -1 : x < y;
}

uint64_t mqd_repl_quorum_end(uint64_t leader_end, const uint64_t *leo, size_t n, uint32_t rf)
{
    uint64_t v[MQD_REPL_MAX_RF] = {0};
    if (rf == 0 || rf > MQD_REPL_MAX_RF)
        return leader_end;
    v[0] = leader_end;
    for (size_t i = 0; i < n && i + 1 < rf; i++)
        v[i + 1] = leo[i] < leader_end ? leo[i] : leader_end;
    qsort(v, rf, sizeof v[0], desc_u64);
    return v[rf / 2]; /* rf / 2 + 1 replicas hold at least this much */
}
