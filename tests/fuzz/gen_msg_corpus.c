/* Writes the fuzz_msg seed corpus (not built by make; Proton is used to make seeds):
 *   gcc -std=gnu11 tests/fuzz/gen_msg_corpus.c -o /tmp/gen -lqpid-proton
 *   /tmp/gen tests/fuzz/corpus/fuzz_msg
 */
#include <proton/codec.h>
#include <proton/message.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dir;

static void put_file(const char *name, const void *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n)
        exit(1);
    fclose(f);
}

static size_t enc(pn_message_t *m, char *buf, size_t cap)
{
    size_t n = cap;
    if (pn_message_encode(m, buf, &n) != 0)
        exit(2);
    return n;
}

static void emit(const char *name, pn_message_t *m)
{
    static char buf[65536];
    put_file(name, buf, enc(m, buf, sizeof(buf)));
    pn_message_free(m);
}

static void sym(pn_data_t *d, const char *s)
{
    pn_data_put_symbol(d, pn_bytes(strlen(s), s));
}

static void str(pn_data_t *d, const char *s)
{
    pn_data_put_string(d, pn_bytes(strlen(s), s));
}

static pn_message_t *body(int kind)
{
    pn_message_t *m = pn_message();
    pn_data_t *b = pn_message_body(m);
    switch (kind) {
    case 0: pn_message_set_inferred(m, true); pn_data_put_binary(b, pn_bytes(3, "abc")); break;
    case 1: str(b, "hello"); break;
    case 2: pn_data_put_int(b, 7); break;
    case 3:
        pn_data_put_map(b); pn_data_enter(b); str(b, "k"); pn_data_put_uuid(b, (pn_uuid_t){{1}});
        pn_data_exit(b); break;
    case 4: case 5:
        pn_message_set_inferred(m, kind == 5);
        pn_data_put_list(b); pn_data_enter(b); pn_data_put_double(b, 2.5);
        pn_data_put_array(b, true, PN_LONG); pn_data_enter(b); pn_data_put_described(b);
        pn_data_enter(b); sym(b, "d"); pn_data_exit(b);
        pn_data_put_long(b, 1); pn_data_put_long(b, 2); pn_data_exit(b);
        pn_data_exit(b); break;
    }
    return m;
}

static void annotations(pn_message_t *m, const char *pkey)
{
    pn_data_t *a = pn_message_annotations(m);
    pn_data_put_map(a);
    pn_data_enter(a);
    sym(a, "x-other");
    pn_data_put_int(a, 1);
    if (pkey) {
        sym(a, "x-opt-partition-key");
        str(a, pkey);
    }
    sym(a, "x-opt-offset");
    str(a, "5");
    pn_data_exit(a);
}

static void full(pn_message_t *m)
{
    pn_message_set_durable(m, true);
    pn_message_set_priority(m, 8);
    pn_message_set_ttl(m, 1000);
    pn_message_set_delivery_count(m, 3);
    pn_message_set_id(m, (pn_msgid_t){ .type = PN_ULONG, .u.as_ulong = 9 });
    pn_message_set_address(m, "T/Partitions/0");
    pn_message_set_subject(m, "s");
    pn_message_set_reply_to(m, "r");
    pn_message_set_group_id(m, "g");
    pn_message_set_creation_time(m, 1700000000000LL);
    pn_data_t *d = pn_message_instructions(m);
    pn_data_put_map(d); pn_data_enter(d); sym(d, "x-da"); pn_data_put_null(d); pn_data_exit(d);
    d = pn_message_properties(m);
    pn_data_put_map(d); pn_data_enter(d); str(d, "colour"); str(d, "red"); pn_data_exit(d);
}

int main(int argc, char **argv)
{
    char name[64];
    static char buf[65536], outer[65536];

    if (argc != 2)
        return 1;
    dir = argv[1];
    for (int k = 0; k < 6; k++) {
        snprintf(name, sizeof(name), "body-%d", k);
        emit(name, body(k));
        pn_message_t *m = body(k);
        full(m);
        annotations(m, k & 1 ? "key" : NULL);
        snprintf(name, sizeof(name), "full-%d", k);
        emit(name, m);
        m = body(k);
        annotations(m, "pk");
        snprintf(name, sizeof(name), "ann-%d", k);
        emit(name, m);
    }
    /* a batch: outer annotations + data sections each holding a message */
    size_t on = 0;
    pn_message_t *o = pn_message();
    annotations(o, "batch-key");
    on = enc(o, outer, sizeof(outer));
    pn_message_free(o);
    for (int k = 0; k < 3; k++) {
        pn_message_t *m = body(k);
        size_t n = enc(m, buf, sizeof(buf));
        pn_message_free(m);
        outer[on++] = 0x00, outer[on++] = 0x53, outer[on++] = 0x75, outer[on++] = (char)0xa0;
        outer[on++] = (char)n;
        memcpy(outer + on, buf, n);
        on += n;
    }
    put_file("batch", outer, on);
    return 0;
}
