/* Crash-test checker: opens DATA_DIR (running recovery) and verifies that every
 * "OFFSET CRC" line in PROMISES is readable with the same bytes. Exit 0 if all are. */
#include "config.h"
#include "store/store.h"
#include "util/util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_one(mqd_plog_t *log, mqd_read_t *r, uint64_t off, uint32_t crc)
{
    int rc = mqd_plog_read(log, off, off + 1, 1, 1, r);
    if (rc != 0 || r->n != 1 || r->recs[0].offset != off) {
        fprintf(stderr, "check: offset %" PRIu64 " was reported stable but is not readable "
                        "(rc %d, end %" PRIu64 ")\n", off, rc, mqd_plog_end_offset(log));
        return 1;
    }
    uint32_t got = mqd_crc32c(0, r->recs[0].data, r->recs[0].len);
    if (got != crc) {
        fprintf(stderr, "check: offset %" PRIu64 " bytes differ (crc %08x, want %08x)\n", off,
                got, crc);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s DATA_DIR PROMISES\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[2], "r");
    mqd_store_t *st;
    mqd_plog_t *log;
    if (!f || mqd_store_open(argv[1], NULL, NULL, &st) != 0 ||
        mqd_store_log_open(st, "crash", 0, NULL, &log) != 0) {
        fprintf(stderr, "check: cannot open %s or %s\n", argv[1], argv[2]);
        return 1;
    }
    mqd_read_t r;
    mqd_read_init(&r);
    char line[128];
    unsigned long n = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        uint64_t off;
        uint32_t crc;
        if (!strchr(line, '\n') || sscanf(line, "%" SCNu64 " %x", &off, &crc) != 2)
            continue; /* the writer died mid-line */
        n++;
        bad += (unsigned long)check_one(log, &r, off, crc);
        if (bad > 10)
            break;
    }
    int unhealthy = mqd_plog_unhealthy(log);
    printf("check: %lu promises, %lu bad, end offset %" PRIu64 "%s\n", n, bad,
           mqd_plog_end_offset(log), unhealthy ? ", UNHEALTHY" : "");
    mqd_read_free(&r);
    mqd_store_close(st);
    fclose(f);
    return bad || unhealthy ? 1 : 0;
}
