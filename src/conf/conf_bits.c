/* Which rows a section was given: one bit per table row, in a bitmap allocated at the
 * first set with as many words as the table needs (the table once had a 64-row limit;
 * now a new row costs nothing here). */
#include "config.h"
#include "conf/conf_int.h"

#include <stdlib.h>

size_t mqd_conf_bits_words(void)
{
    return (mqd_conf_nrows + 63) / 64;
}

int mqd_conf_bits_set(uint64_t **bits, size_t row)
{
    if (row >= mqd_conf_nrows)
        return MQD_EINVAL;
    if (*bits == NULL && (*bits = calloc(mqd_conf_bits_words(), sizeof **bits)) == NULL)
        return MQD_ENOMEM;
    (*bits)[row / 64] |= UINT64_C(1) << (row % 64);
    return 0;
}

bool mqd_conf_bits_get(const uint64_t *bits, size_t row)
{
    return bits != NULL && row < mqd_conf_nrows && (bits[row / 64] >> (row % 64) & 1) != 0;
}

static int bit_put(uint64_t **bits, size_t row, bool on)
{
    if (on)
        return mqd_conf_bits_set(bits, row);
    if (*bits != NULL)
        (*bits)[row / 64] &= ~(UINT64_C(1) << (row % 64));
    return 0;
}

int mqd_conf_bits_swap(uint64_t **a, uint64_t **b, size_t row)
{
    bool in_a = mqd_conf_bits_get(*a, row), in_b = mqd_conf_bits_get(*b, row);
    if (row >= mqd_conf_nrows)
        return MQD_EINVAL;
    /* allocate before changing either, so a failure leaves both as they were */
    if ((in_b && *a == NULL && mqd_conf_bits_set(a, row) != 0) ||
        (in_a && *b == NULL && mqd_conf_bits_set(b, row) != 0))
        return MQD_ENOMEM;
    bit_put(a, row, in_b);
    bit_put(b, row, in_a);
    return 0;
}
