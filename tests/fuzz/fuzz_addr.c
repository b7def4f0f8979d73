/* Fuzz target: the address grammar (mqd_addr_parse) and the key hash. */
#include "config.h"
#include "route/route.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mqd_addr_t a;
    const char *s = (const char *)data;

    if (mqd_addr_parse(s, size, &a) == 0) {
        /* what we accept must be self-consistent */
        if (a.kind != MQD_ADDR_MANAGEMENT && a.kind != MQD_ADDR_CBS && !mqd_topic_name_valid(a.topic, strlen(a.topic)))
            abort();
        if ((a.kind == MQD_ADDR_PARTITION || a.kind == MQD_ADDR_GROUP_PARTITION) &&
            a.partition > INT32_MAX)
            abort();
        for (const char *g = a.group; *g; g++) {
            if (*g >= 'A' && *g <= 'Z')
                abort();
        }
    }
    (void)mqd_topic_name_valid(s, size);
    if (mqd_route_key_partition(data, size, 7) >= 7)
        abort();
    return 0;
}
