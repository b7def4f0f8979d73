/* fuzz_console: the web console's own parsers of request text (src/console/parse.c):
 * Cookie headers, request paths (percent-decoding, segment rules) and tokens. The input
 * is split at the first NUL: a cookie name (short) and the text, which goes to all three;
 * the whole input also goes to the request head scanner, at once and byte by byte. */
#include "config.h"
#include "console/console_int.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    const char *name = "mqd_session";
    const char *hdr = text;
    char *nul = memchr(text, 0, size);
    if (nul && nul - text < 64 && (size_t)(nul - text) + 1 < size) {
        name = text;
        hdr = nul + 1;
    }
    char out[MQD_CONSOLE_TOKEN_HEX + 1];
    if (mqd_console_cookie_get(hdr, name, out, sizeof out) == 0 && strlen(out) >= sizeof out)
        abort();
    const char *segs[8];
    char buf[2048];
    int n = mqd_console_path_split(hdr, segs, 8, buf, sizeof buf);
    if (n > 8)
        abort();
    for (int i = 0; i < n; i++)
        if (segs[i] < buf || segs[i] >= buf + sizeof buf || !*segs[i])
            abort(); /* each segment inside buf and never empty */
    (void)mqd_console_token_ok(hdr);
    /* the head scanner: fed whole and byte by byte, it must agree */
    mqd_console_head_t whole, bytes;
    mqd_console_head_reset(&whole);
    mqd_console_head_reset(&bytes);
    bool w = mqd_console_head_scan(&whole, (const char *)data, size), b = false;
    for (size_t i = 0; i < size && !b; i++)
        b = mqd_console_head_scan(&bytes, (const char *)data + i, 1);
    if (w != b)
        abort();
    free(text);
    return 0;
}
