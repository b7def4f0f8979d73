/* fuzz_scramc: mqctl's SCRAM-SHA-256 client (src/tools/scram_client.c) on what a server
 * sends. Input: server-first-message, then a NUL byte, then server-final-message (either
 * may be empty). The client nonce is fixed so that seeds can extend it
 * ("r=fuzznonce..."); iteration counts over 4096 are cut to keep each run short (the
 * bound check itself is covered by any count). */
#include "config.h"
#include "mqd.h"
#include "fuzz.h"
#include "tools/scram_client.h"

#include <stdlib.h>
#include <string.h>

static bool too_slow(const char *s)
{
    for (const char *p = strstr(s, "i="); p; p = strstr(p + 1, "i="))
        if ((p == s || p[-1] == ',') && strtoul(p + 2, NULL, 10) > 4096)
            return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char first[MQD_SCRAMC_MSG_MAX + 2], why[256];
    const uint8_t *nul = memchr(data, '\0', size);
    size_t n1 = nul ? (size_t)(nul - data) : size;
    if (n1 > MQD_SCRAMC_MSG_MAX + 1)
        n1 = MQD_SCRAMC_MSG_MAX + 1;
    memcpy(first, data, n1);
    first[n1] = '\0';
    if (too_slow(first))
        return 0;
    mqd_scramc_t s;
    if (mqd_scramc_first(&s, "us,er=", "fuzznonce") != 0)
        abort();
    if (mqd_scramc_final(&s, "pencil", (const char *)data, n1, why, sizeof why) == 0) {
        const uint8_t *fin = nul ? nul + 1 : data + size;
        (void)mqd_scramc_verify(&s, (const char *)fin, (size_t)(data + size - fin), why, sizeof why);
    }
    mqd_scramc_clear(&s);
    return 0;
}
