/* Fuzz target: raw records as a follower receives them from a leader (src/store/raw.c).
 * The input is the bytes of one fetch response: mqd_store_raw_next walks them, then
 * mqd_plog_append_raw offers them to an empty follower log. Whatever the bytes, the
 * walk stays inside the buffer and ends at its end or at a damaged record; the append
 * takes all of them or none; what it took reads back raw byte for byte. */
#include "config.h"
#include "store/store.h"
#include "util/util.h"
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char root[256];
static mqd_store_t *st;
static mqd_plog_t *log_;
static uint8_t *back;

static void done(void)
{
    if (st) {
        mqd_store_drop_topic(st, "t");
        mqd_store_close(st);
    }
    char p[300];
    snprintf(p, sizeof p, "%s/topics", root);
    rmdir(p);
    rmdir(root);
    free(back);
}

static void setup(void)
{
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(root, sizeof root, "%s/mqd-fuzz-raw-%ld", base, (long)getpid());
    mqd_log_set_level(MQD_LOG_ERROR);
    mqd_plog_config_t cfg;
    mqd_plog_config_default(&cfg);
    cfg.segment_bytes = 16 << 10; /* the append may roll */
    if (mqd_store_open_ex(root, 1, NULL, NULL, &st) != 0 ||
        mqd_store_log_open(st, "t", 0, &cfg, &log_) != 0)
        abort();
    back = malloc(1 << 20);
    atexit(done);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!st)
        setup();
    if (size > 65536)
        return 0;
    size_t pos = 0, n = 0, prev = 0;
    mqd_raw_rec_t r;
    int rc;
    while ((rc = mqd_store_raw_next(data, size, &pos, &r)) == 1) {
        if (pos <= prev || pos > size || r.size != pos - prev || r.size < MQD_STORE_RAW_HDR ||
            r.data != data + prev + MQD_STORE_RAW_HDR || r.len != r.size - MQD_STORE_RAW_HDR)
            abort();
        prev = pos;
        n++;
    }
    if ((rc != 0 && rc != MQD_ECORRUPT) || pos != prev || (rc == 0 && pos != size))
        abort();
    uint64_t first = 99;
    rc = mqd_plog_append_raw(log_, data, size, &first);
    if (rc != 0) {
        if (mqd_plog_end_offset(log_) != 0 || first != 99)
            abort();
        return 0;
    }
    if (first != 0 || mqd_plog_end_offset(log_) != n)
        abort();
    if (n > 0 && mqd_plog_wait_stable(log_, n) != 0)
        abort();
    size_t got = 0, len;
    uint64_t from = 0, next;
    while (from < n) {
        if (mqd_plog_read_raw(log_, from, back + got, (1 << 20) - got, &len, &next) != 0 ||
            len == 0 || next <= from)
            abort();
        got += len;
        from = next;
    }
    if (got != size || memcmp(back, data, size) != 0)
        abort();
    if (n > 0 && mqd_plog_truncate_to(log_, 0) != 0)
        abort();
    return 0;
}
