/* fuzz_gate: the SASL-phase framer (src/auth/gate.c) on arbitrary client input, fed in
 * arbitrary chunks. The first input byte seeds the chunk sizes; the rest is the stream.
 * Checked against a one-shot reference parse: every call takes at least one byte and at
 * most what it was given, never steps over the end of the header or of a frame, is
 * between frames exactly at those ends, and takes everything once open. */
#include "config.h"
#include "auth/auth_int.h"
#include "fuzz.h"

#include <stdlib.h>

#define MAXB 4096

/* Ends of the header and of each whole frame (ascending); *open_at: where the reference
 * stops framing (SIZE_MAX: never). */
static size_t reference(const uint8_t *s, size_t len, size_t *b, size_t *open_at)
{
    size_t n = 0, pos = 8;
    *open_at = SIZE_MAX;
    if (len >= 5 && s[4] != 3) {
        *open_at = 5; /* the gate opens while taking the fifth byte */
        return 0;
    }
    b[n++] = 8;
    while (pos + 4 <= len && n < MAXB) {
        uint32_t size = (uint32_t)s[pos] << 24 | (uint32_t)s[pos + 1] << 16 |
                        (uint32_t)s[pos + 2] << 8 | s[pos + 3];
        if (size < 8) {
            *open_at = pos + 4;
            break;
        }
        if (pos + size > len)
            break;
        pos += size;
        b[n++] = pos;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static size_t b[MAXB];
    if (size < 1)
        return 0;
    uint32_t seed = data[0] * 2654435761u + 1;
    const uint8_t *s = data + 1;
    size_t len = size - 1, open_at, nb = reference(s, len, b, &open_at), bi = 0, pos = 0;
    mqd_auth_gate_t g = {0};
    while (pos < len) {
        seed = seed * 1103515245u + 12345u;
        size_t n = 1 + (seed >> 16) % 300;
        if (n > len - pos)
            n = len - pos;
        bool was_open = g.open;
        size_t k = mqd_auth_gate_take(&g, s + pos, n);
        if (k == 0 || k > n || (was_open && k != n))
            abort();
        if (!was_open) {
            while (bi < nb && b[bi] <= pos)
                bi++;
            if (bi < nb && pos + k > b[bi])
                abort(); /* stepped over the end of a frame */
        }
        pos += k;
        if (!g.open && mqd_auth_gate_at_boundary(&g) && !(bi < nb && b[bi] == pos))
            abort(); /* between frames where the reference has no frame end */
        /* it opens exactly where the reference stops framing */
        if (g.open && !was_open &&
            (open_at == SIZE_MAX || (open_at == 5 ? pos < 5 || pos > 8 : pos != open_at)))
            abort();
        if (!g.open && open_at != SIZE_MAX && pos >= (open_at == 5 ? 8 : open_at))
            abort();
    }
    return 0;
}
