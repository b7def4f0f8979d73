/* txn: pruning of decided transactions (mqd_txns_prune) against a real server object
 * (meta.db + partition logs, no listeners).
 *
 * Partition 0 of `tp` gets transactional records of 40 committed transactions (5 records
 * each, in 4 KiB segments), one aborted transaction (no row) and plain records; one more
 * committed transaction also writes to partition 1, which retention never touches, and
 * one commits acks only. Retention then deletes the old segments of partition 0. The
 * test asserts: the first pass deletes only the stale (non-COMMITTED) row, the second
 * deletes exactly the committed rows whose records all lie below the log start, the
 * other rows and committed ids stay, and the visible data (data records whose txn is
 * committed, or no txn) is the same after pruning and after a restart as before. */
#include "config.h"
#include "server/server_int.h"
#include "server/server.h"
#include "core/core_int.h" /* reads core's structs by field */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "../server_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NTXN 40
#define PER_TXN 5
#define TXN0 0x7700000001ull /* ids of the committed transactions: TXN0 + k */
#define TXN_ABORTED 0x7800000001ull
#define TXN_WIDE 0x7900000001ull   /* also writes to partition 1 */
#define TXN_ACKS 0x7900000002ull   /* acks only: no records */
#define TXN_STALE 0x7900000003ull  /* a row left OPEN */

typedef struct fx {
    char dir[64];
} fx_t;

static const char *const FX_SETTINGS[] = {"segment_bytes=4096", "retention_bytes=8192", NULL};

static uint64_t append(mqd_part_t *p, uint32_t flags, uint64_t txn, const char *body)
{
    uint64_t off;
    assert_int_equal(mqd_part_append_ex(p, (const uint8_t *)body, strlen(body), flags, txn, NULL, NULL,
                                        &off),
                     0);
    return off;
}

static void put_committed(mqd_server_t *s, uint64_t id, const char *parts_json)
{
    char detail[512];
    snprintf(detail, sizeof detail, "{\"partitions\":[%s],\"acks\":0}", parts_json);
    assert_int_equal(mqd_meta_txn_put(s->meta, id, MQD_TXN_COMMITTED, detail), 0);
}

/* Writes the logs and rows (as a crash-free previous run would have left them). */
static void populate(const char *dir)
{
    mqd_server_t *s = fx_server_open(dir, FX_SETTINGS);
    mqd_topic_t *t;
    assert_int_equal(mqd_topic_create(s, "tp", 2, NULL, &t), 0);
    char body[160], pj[160];
    uint64_t last = 0;
    for (int k = 0; k < NTXN; k++) {
        for (int j = 0; j < PER_TXN; j++) {
            snprintf(body, sizeof body, "txn %d record %d %0100d", k, j, 0);
            last = append(t->parts[0], MQD_REC_DATA | MQD_REC_TXN, TXN0 + k, body);
        }
        snprintf(body, sizeof body, "plain after txn %d", k);
        append(t->parts[0], MQD_REC_DATA, 0, body);
        if (k == 3) {
            append(t->parts[0], MQD_REC_DATA | MQD_REC_TXN, TXN_ABORTED, "aborted, never visible");
            append(t->parts[0], MQD_REC_CTRL_ABORT, TXN_ABORTED, "");
        }
        uint64_t mark = append(t->parts[0], MQD_REC_CTRL_COMMIT, TXN0 + k, "");
        /* one flush batch per transaction: segments roll between batches */
        assert_int_equal(mqd_plog_wait_stable(t->parts[0]->log, mark + 1), 0);
        snprintf(pj, sizeof pj, "{\"topic\":\"tp\",\"partition\":0,\"last\":%llu}", (unsigned long long)last);
        put_committed(s, TXN0 + k, pj);
    }
    uint64_t l0 = append(t->parts[0], MQD_REC_DATA | MQD_REC_TXN, TXN_WIDE, "wide p0");
    uint64_t l1 = append(t->parts[1], MQD_REC_DATA | MQD_REC_TXN, TXN_WIDE, "wide p1");
    snprintf(pj, sizeof pj, "{\"topic\":\"tp\",\"partition\":0,\"last\":%llu},"
             "{\"topic\":\"tp\",\"partition\":1,\"last\":%llu}", (unsigned long long)l0, (unsigned long long)l1);
    put_committed(s, TXN_WIDE, pj);
    put_committed(s, TXN_ACKS, "");
    assert_int_equal(mqd_meta_txn_put(s->meta, TXN_STALE, MQD_TXN_OPEN, "{}"), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(
            mqd_plog_wait_stable(t->parts[i]->log, mqd_plog_end_offset(t->parts[i]->log)), 0);
    fx_server_close(s);
}

/* The visible records of tp as "partition:offset:bytes" lines (read-committed). */
static char *visible(mqd_server_t *s)
{
    mqd_topic_t *t = mqd_topic_find(s, "tp");
    assert_non_null(t);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    out[0] = '\0';
    mqd_read_t rd;
    mqd_read_init(&rd);
    for (uint32_t i = 0; i < t->nparts; i++) {
        uint64_t from = mqd_plog_start_offset(t->parts[i]->log);
        for (;;) {
            assert_int_equal(mqd_plog_read(t->parts[i]->log, from, UINT64_MAX, 1000, 1 << 20, &rd),
                             0);
            if (rd.n == 0)
                break;
            for (size_t k = 0; k < rd.n; k++) {
                const mqd_rec_t *r = &rd.recs[k];
                if ((r->flags & MQD_REC_KIND_MASK) != MQD_REC_DATA ||
                    ((r->flags & MQD_REC_TXN) && !mqd_txn_committed(s, r->txn)))
                    continue;
                if (len + r->len + 64 > cap) {
                    cap = (cap + r->len + 64) * 2;
                    out = realloc(out, cap);
                    assert_non_null(out);
                }
                len += (size_t)snprintf(out + len, cap - len, "%u:%llu:%.*s\n", i, (unsigned long long)r->offset,
                                        (int)r->len, (const char *)r->data);
            }
            from = rd.next_offset;
        }
    }
    mqd_read_free(&rd);
    return out;
}

static int count_row(uint64_t id, mqd_txn_state_t st, const char *detail, void *arg)
{
    (*(size_t *)arg)++;
    return 0;
}

static size_t rows(mqd_server_t *s)
{
    size_t n = 0;
    assert_int_equal(mqd_meta_txn_list(s->meta, count_row, &n), 0);
    return n;
}

static void test_prune_after_retention(void **state)
{
    fx_t *f = *state;
    populate(f->dir);

    mqd_server_t *s = fx_server_open(f->dir, FX_SETTINGS);
    mqd_topic_t *t = mqd_topic_find(s, "tp");
    assert_non_null(t);
    assert_int_equal(rows(s), NTXN + 3);
    char *before = visible(s);
    assert_non_null(strstr(before, "txn 0 record 0"));
    assert_null(strstr(before, "aborted"));

    mqd_topics_retain(s); /* retention_bytes = 8 KiB: the old segments of partition 0 go */
    uint64_t start = mqd_plog_start_offset(t->parts[0]->log);
    assert_true(start > 0);
    char *retained = visible(s);
    assert_null(strstr(retained, "txn 0 record 0"));

    /* which committed transactions lie wholly below the new start? (6 records + marker
     * per transaction, 2 more for the aborted one after txn 3) */
    size_t gone = 0;
    for (int k = 0; k < NTXN; k++) {
        uint64_t last = (uint64_t)k * (PER_TXN + 2) + PER_TXN - 1 + (k > 3 ? 2 : 0);
        gone += last < start;
    }
    assert_true(gone > 0 && gone < NTXN);
    print_message("log start %llu: %zu of %d committed transactions wholly below it\n",
                  (unsigned long long)start, gone, NTXN);

    /* pass 1: only the stale row; pass 2: the committed ones found prunable twice */
    assert_int_equal(mqd_txns_prune(s), 1);
    assert_int_equal(rows(s), NTXN + 2);
    assert_int_equal(mqd_txns_prune(s), gone + 1); /* + the acks-only transaction */
    assert_int_equal(rows(s), NTXN + 2 - gone - 1);
    assert_int_equal(mqd_txns_prune(s), 0);
    for (int k = 0; k < NTXN; k++)
        assert_int_equal(mqd_txn_committed(s, TXN0 + k), (size_t)k >= gone);
    assert_true(mqd_txn_committed(s, TXN_WIDE)); /* partition 1 still holds its record */
    assert_false(mqd_txn_committed(s, TXN_ACKS));

    char *pruned = visible(s);
    assert_string_equal(pruned, retained);
    fx_server_close(s);

    /* recovery: the same rows, the same committed set, the same visible data */
    s = fx_server_open(f->dir, FX_SETTINGS);
    assert_int_equal(rows(s), NTXN + 2 - gone - 1);
    char *after = visible(s);
    assert_string_equal(after, retained);
    assert_int_equal(mqd_txns_prune(s), 0);
    assert_int_equal(mqd_txns_prune(s), 0);
    fx_server_close(s);
    free(before);
    free(retained);
    free(pruned);
    free(after);
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    strcpy(f->dir, "/tmp/mqd-txn-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    fx_rmtree(f->dir);
    free(f);
    return 0;
}

int main(void)
{
    mqd_log_set_level(MQD_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_prune_after_retention, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
