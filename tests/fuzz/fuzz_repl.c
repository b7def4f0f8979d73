/* Fuzz target: what a node reads from others for replication (src/repl): the fetch
 * stream's messages (a follower parses what its leader sent), the partition states and
 * topic registrations under /<cluster>/ in etcd, the body of a group-offset control
 * record (gstate.c: a follower reads it from its leader's log), the log-end reports
 * of an election (cand.c: the controller reads them from etcd) and the high-watermark
 * checkpoint file (hwck_file.c: read back from the data dir, maybe torn). The first byte
 * picks the parser. A run that parses must describe bytes inside the input. */
#include "config.h"
#include "repl/repl.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *d = data + 1;
    size_t n = size - 1;
    switch (data[0] % 6) {
    case 5: {
        mqd_repl_hwck_t ck = {0}, back = {0};
        if (mqd_repl_hwck_parse((const char *)d, n, &ck) == 0) {
            char *b;
            size_t len;
            if (mqd_repl_hwck_format(&ck, &b, &len) != 0)
                abort();
            if (len != n || memcmp(b, d, n) != 0 || mqd_repl_hwck_parse(b, len, &back) != 0 ||
                back.n != ck.n)
                abort(); /* what parses is exactly what mqd writes */
            free(b);
            mqd_repl_hwck_clear(&back);
        } else if (ck.n != 0) {
            abort(); /* refused whole */
        }
        mqd_repl_hwck_clear(&ck);
        break;
    }
    case 0: {
        mqd_repl_run_t run;
        if (mqd_repl_run_parse(d, n, &run) == 0) {
            if (run.data < d || run.data + run.len > d + n || (run.len == 0) != (run.count == 0))
                abort();
            uint8_t *buf = NULL;
            size_t cap = 0, len = 0;
            mqd_repl_run_t back;
            if (mqd_repl_run_encode(&run, &buf, &cap, &len) != 0 ||
                mqd_repl_run_parse(buf, len, &back) != 0 || back.base != run.base ||
                back.count != run.count || back.hw != run.hw || back.len != run.len)
                abort(); /* what parses re-encodes to the same run */
            free(buf);
            uint32_t e = 0; /* the follower's epoch check walks the records: in bounds */
            bool st = false;
            (void)mqd_repl_run_scan(run.data, run.len, &e, &st);
        }
        break;
    }
    case 1: {
        mqd_repl_pstate_t ps;
        if (mqd_repl_pstate_parse((const char *)d, n, &ps) == 0) {
            if (!mqd_repl_pstate_has(ps.replicas, ps.n_replicas, ps.leader) ||
                ps.n_replicas > MQD_REPL_MAX_RF || ps.n_isr > ps.n_replicas)
                abort();
            char *j = mqd_repl_pstate_json(&ps);
            mqd_repl_pstate_t back;
            if (!j || mqd_repl_pstate_parse(j, strlen(j), &back) != 0 ||
                memcmp(&back, &ps, sizeof ps) != 0)
                abort();
            free(j);
        }
        break;
    }
    case 3: {
        uint64_t floor;
        const char *name;
        size_t nlen, len;
        uint8_t back[8 + 255];
        if (mqd_repl_grec_parse(d, n, &floor, &name, &nlen) == 0) {
            char s[256];
            if (name != (const char *)d + 8 || nlen == 0 || nlen >= sizeof s || nlen + 8 != n)
                abort();
            memcpy(s, name, nlen);
            s[nlen] = '\0';
            if (mqd_repl_grec_encode(s, floor, back, sizeof back, &len) != 0 || len != n ||
                memcmp(back, d, n) != 0)
                abort(); /* what parses re-encodes to the same bytes */
        }
        break;
    }
    case 4: {
        mqd_repl_report_t rep, back;
        if (mqd_repl_report_parse((const char *)d, n, &rep) == 0) {
            char *j = mqd_repl_report_json(&rep);
            if (rep.leader_rev < 0 || !j || mqd_repl_report_parse(j, strlen(j), &back) != 0 ||
                back.epoch != rep.epoch || back.end != rep.end || back.leader_rev != rep.leader_rev)
                abort(); /* what parses writes back to the same report */
            free(j);
        }
        break;
    }
    default: {
        mqd_repl_tdesc_t td;
        if (mqd_repl_tdesc_parse((const char *)d, n, &td) == 0) {
            if (td.partitions == 0 || td.rf == 0 || td.rf > MQD_REPL_MAX_RF ||
                (td.id[0] && !mqd_repl_id_valid(td.id, strlen(td.id))) || (td.home && td.rf != 1))
                abort();
            char *j = mqd_repl_tdesc_json(&td);
            mqd_repl_tdesc_t back;
            if (!j || mqd_repl_tdesc_parse(j, strlen(j), &back) != 0 ||
                back.partitions != td.partitions || back.rf != td.rf ||
                strcmp(back.id, td.id) != 0 || back.home != td.home ||
                (back.config == NULL) != (td.config == NULL))
                abort(); /* what parses writes back to the same registration */
            mqd_repl_tdesc_clear(&back);
            free(j);
            mqd_repl_tdesc_clear(&td);
        }
        break;
    }
    }
    return 0;
}
