/* Console sessions: a fixed table of MQD_CONSOLE_SESSIONS; the cookie carries a random id
 * (never the password, never in a URL), each session has its own CSRF token that every
 * state-changing request must echo in X-CSRF-Token. */
#include "config.h"
#include "console/console_int.h"
#include "core/core.h"

#include <event2/http.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

uint64_t mqd_console_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int mqd_console_random_hex(char *out)
{
    unsigned char rnd[MQD_CONSOLE_TOKEN_HEX / 2];
    if (RAND_bytes(rnd, sizeof rnd) != 1)
        return MQD_EIO;
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(out + 2 * i, 3, "%02x", rnd[i]);
    OPENSSL_cleanse(rnd, sizeof rnd);
    return 0;
}

mqd_console_sess_t *mqd_console_sess_new(mqd_console_t *k, const char *user)
{
    mqd_console_sess_t *pick = &k->sess[0];
    for (size_t i = 0; i < MQD_CONSOLE_SESSIONS; i++) {
        mqd_console_sess_t *ss = &k->sess[i];
        if (!ss->used) {
            pick = ss;
            break;
        }
        if (ss->last_ms < pick->last_ms)
            pick = ss;
    }
    if (pick->used)
        MQD_INFO("console", "session table full: the least recently used (user %s) ends",
                 pick->user);
    mqd_console_sess_end(pick);
    if (mqd_console_random_hex(pick->id) != 0 || mqd_console_random_hex(pick->csrf) != 0) {
        mqd_console_sess_end(pick);
        return NULL;
    }
    snprintf(pick->user, sizeof pick->user, "%s", user);
    pick->last_ms = mqd_console_now_ms();
    pick->used = true;
    return pick;
}

mqd_console_sess_t *mqd_console_sess_of(mqd_console_t *k, struct evhttp_request *req)
{
    const char *hdr = evhttp_find_header(evhttp_request_get_input_headers(req), "Cookie");
    char id[MQD_CONSOLE_TOKEN_HEX + 1];
    if (!hdr || mqd_console_cookie_get(hdr, "mqd_session", id, sizeof id) != 0 ||
        !mqd_console_token_ok(id))
        return NULL;
    uint64_t now = mqd_console_now_ms(), idle = mqd_srv_conf(k->srv)->console_session_idle_ms;
    for (size_t i = 0; i < MQD_CONSOLE_SESSIONS; i++) {
        mqd_console_sess_t *ss = &k->sess[i];
        if (!ss->used || CRYPTO_memcmp(ss->id, id, MQD_CONSOLE_TOKEN_HEX) != 0)
            continue;
        if (now - ss->last_ms > idle) {
            mqd_console_sess_end(ss);
            return NULL;
        }
        ss->last_ms = now;
        return ss;
    }
    return NULL;
}

void mqd_console_sess_end(mqd_console_sess_t *ss)
{
    OPENSSL_cleanse(ss, sizeof *ss);
    ss->used = false;
}
