/* Crash-test writer: appends to DIR in flush=sync mode forever and prints one line
 * "OFFSET CRC" for every record the store reported stable (CRC32C of its bytes),
 * flushing stdout, so a SIGKILL at any moment leaves a list of promises to verify.
 * Payloads depend only on the offset, so runs after restarts continue the same stream.
 * A second argument turns pre-zeroed tails on with that window (bytes): the kill then
 * also leaves zeros after the records, in the tail and (mid-roll) in an older segment. */
#include "config.h"
#include "store/store.h"
#include "util/util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t payload(uint64_t off, uint8_t *buf)
{
    uint64_t x = off * 0x9e3779b97f4a7c15ull + 12345;
    uint32_t len = (uint32_t)((x >> 17) % 700);
    for (uint32_t i = 0; i < len; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(x >> 56);
    }
    return len;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DATA_DIR [PREZERO_BYTES]\n", argv[0]);
        return 2;
    }
    mqd_store_t *st;
    mqd_plog_t *log;
    mqd_plog_config_t cfg;
    mqd_plog_config_default(&cfg);
    cfg.segment_bytes = 256 << 10;
    cfg.index_interval_bytes = 1024;
    if (mqd_store_open(argv[1], NULL, NULL, &st) != 0 ||
        mqd_store_log_open(st, "crash", 0, &cfg, &log) != 0)
        return 1;
    if (argc > 2)
        mqd_store_set_prezero(st, strtoull(argv[2], NULL, 10));
    static uint8_t bufs[32][1024];
    mqd_rec_in_t in[32];
    srand((unsigned)mqd_mono_ns());
    for (;;) {
        size_t n = 1 + (size_t)rand() % 32;
        uint64_t base = mqd_plog_end_offset(log), first;
        for (size_t i = 0; i < n; i++)
            in[i] = (mqd_rec_in_t){bufs[i], payload(base + i, bufs[i]), 0, 0, 0};
        if (mqd_plog_append(log, in, n, &first) != 0 || mqd_plog_wait_stable(log, base + n) != 0) {
            fprintf(stderr, "writer: append/sync failed\n");
            return 1;
        }
        for (size_t i = 0; i < n; i++)
            printf("%" PRIu64 " %08x\n", base + i, mqd_crc32c(0, bufs[i], in[i].len));
        fflush(stdout);
    }
}
