/* Fuzz target: the frame peek (src/amqp/framepeek.c) on a client byte stream. The first
 * byte picks where the rest is cut into two chunks; fed whole and fed cut, the peek must
 * agree (same state, same formats recorded, same verdict), and stay bounded on anything. */
#include "config.h"
#include "codec/codec.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"s", "s1", "s2", "batch-link-1", ""};
static const char *const tags[] = {"", "a", "b", "\x00", "\x00\x00\x00\x00\x00\x00\x00\x00", "1"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t cut = data[0] % size;
    data++, size--;
    if (cut > size)
        cut = size;
    mqd_fpeek_t *a = mqd_fpeek_new(), *b = mqd_fpeek_new();
    if (!a || !b)
        abort();
    size_t ka = mqd_fpeek_feed(a, data, size);
    size_t kb = mqd_fpeek_feed(b, data, cut);
    kb += mqd_fpeek_feed(b, data + cut, size - cut);
    if (mqd_fpeek_ok(a) != mqd_fpeek_ok(b) || mqd_fpeek_frames(a) != mqd_fpeek_frames(b) ||
        mqd_fpeek_waiting(a) != mqd_fpeek_waiting(b))
        abort();
    /* the same verdict; Proton gets all of it, or (in pieces, at most a prefix of the
     * refused frame more) the same bytes before it */
    const char *ea = mqd_fpeek_error(a, NULL), *eb = mqd_fpeek_error(b, NULL);
    if ((ea == NULL) != (eb == NULL) || (ea && strcmp(ea, eb) != 0) || ka > size || kb < ka ||
        (!ea && (ka != size || kb != size)))
        abort();
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        for (size_t j = 0; j < sizeof tags / sizeof *tags; j++) {
            size_t tl = j == 3 ? 1 : j == 4 ? 8 : strlen(tags[j]);
            uint32_t fa =
                mqd_fpeek_take(a, names[i], strlen(names[i]), (const uint8_t *)tags[j], tl);
            uint32_t fb =
                mqd_fpeek_take(b, names[i], strlen(names[i]), (const uint8_t *)tags[j], tl);
            if (fa != fb)
                abort();
        }
        for (int role = 0; role < 2; role++)
            if (mqd_fpeek_resume_take(a, names[i], strlen(names[i]), role) !=
                    mqd_fpeek_resume_take(b, names[i], strlen(names[i]), role) ||
                mqd_fpeek_redirect_take(a, names[i], strlen(names[i]), role) !=
                    mqd_fpeek_redirect_take(b, names[i], strlen(names[i]), role))
                abort();
    }
    mqd_fpeek_free(a);
    mqd_fpeek_free(b);
    return 0;
}
