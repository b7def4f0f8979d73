/* conf: value types and bounds, error messages with line numbers, sections and their
 * layering, --set/--listen, passwords, and the committed sample and man page against
 * the key table. */
#include "config.h"
#include "conf/conf.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MQD_TEST_SRCDIR
#define MQD_TEST_SRCDIR "."
#endif

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

typedef struct fx {
    mqd_conf_t *c;
    char dir[64];
    char path[128];
    char err[512];
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(mqd_conf_new(&f->c), 0);
    strcpy(f->dir, "/tmp/mqd-conf-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/mqd.conf", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    mqd_conf_free(f->c);
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* Writes text to the fixture's file and loads it; returns the load's result. */
static int load(fx_t *f, const char *text)
{
    FILE *fp = fopen(f->path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
    f->err[0] = '\0';
    return mqd_conf_load_file(f->c, f->path, f->err, sizeof f->err);
}

/* Loads text and expects failure with err == "PATH:<rest>". */
static void load_fails(fx_t *f, const char *text, const char *rest)
{
    char want[512];
    assert_int_equal(load(f, text), MQD_EINVAL);
    snprintf(want, sizeof want, "%s:%s", f->path, rest);
    assert_string_equal(f->err, want);
}

static int set(fx_t *f, const char *kv)
{
    f->err[0] = '\0';
    return mqd_conf_set(f->c, kv, f->err, sizeof f->err);
}

static void set_fails(fx_t *f, const char *kv, const char *want)
{
    assert_int_equal(set(f, kv), MQD_EINVAL);
    assert_string_equal(f->err, want);
}

static void test_defaults(void **state)
{
    fx_t *f = *state;
    mqd_conf_t *c = f->c;
    assert_int_equal(c->n_listen, 1);
    assert_string_equal(c->listen[0], "127.0.0.1:5672");
    assert_non_null(c->data_dir);
    assert_non_null(strstr(c->data_dir, "/lib/mqd"));
    assert_int_equal(c->log_level, MQD_LOG_INFO);
    assert_true(c->auto_create_topics);
    assert_int_equal(c->default_partitions, 1);
    assert_int_equal(c->max_message_size, 16 * MiB);
    assert_int_equal(c->max_frame_size, 128 * KiB);
    assert_int_equal(c->idle_timeout_ms, 60000);
    /* an idle transaction must not hold read-committed readers back forever */
    assert_int_equal(c->txn_timeout_ms, 60000);
    assert_true(c->allow_anonymous);
    assert_int_equal(c->max_connections, 10000);
    assert_int_equal(c->max_sessions, 64);
    assert_int_equal(c->max_links_per_session, 1024);
    assert_int_equal(c->link_credit, 1000);
    assert_int_equal(c->prefetch_bytes, 1 * MiB);
    assert_null(c->metrics_listen);
    assert_null(c->path);
    /* the log defaults match mqd_plog_config_default (store.h) */
    const mqd_plog_config_t *l = &c->topic_defaults.log;
    assert_int_equal(l->segment_bytes, 1 * GiB);
    assert_int_equal(l->segment_ms, 7 * 24 * 3600 * 1000LL);
    assert_int_equal(l->flush, MQD_FLUSH_SYNC);
    assert_int_equal(l->flush_interval_ms, 1000);
    assert_int_equal(l->flush_messages, 0);
    assert_int_equal(l->retention_bytes, 0);
    assert_int_equal(l->retention_ms, 0);
    assert_int_equal(l->index_interval_bytes, 4096);
    assert_false(c->topic_defaults.retention_consumed);
    assert_int_equal(c->topic_defaults.auto_offset_reset, MQD_OFFSET_RESET_EARLIEST);
    assert_int_equal(c->topic_defaults.max_delivery_count, 0);
    assert_false(c->topic_defaults.dead_letter);
    assert_int_equal(c->topic_defaults.dedup_window_ms, 0);
    assert_null(c->topic_defaults.set); /* nothing given yet: no flags */
    assert_null(c->set);
    assert_int_equal(mqd_conf_validate(c, f->err, sizeof f->err), 0);
}

static void test_bool(void **state)
{
    fx_t *f = *state;
    static const char *const on[] = {"on", "yes", "true", "1", "ON", "True"};
    static const char *const off[] = {"off", "no", "false", "0", "OFF", "No"};
    char kv[64];
    for (size_t i = 0; i < MQD_ARRAY_LEN(on); i++) {
        snprintf(kv, sizeof kv, "auto_create_topics=%s", off[i]);
        assert_int_equal(set(f, kv), 0);
        assert_false(f->c->auto_create_topics);
        snprintf(kv, sizeof kv, "auto_create_topics=%s", on[i]);
        assert_int_equal(set(f, kv), 0);
        assert_true(f->c->auto_create_topics);
    }
    set_fails(f, "dead_letter=maybe",
              "--set: dead_letter: expected on or off (or yes/no, true/false, 1/0), got 'maybe'");
    set_fails(f, "dead_letter=",
              "--set: dead_letter: expected on or off (or yes/no, true/false, "
              "1/0), got ''");
    assert_int_equal(set(f, "dead_letter=yes"), 0);
    assert_true(f->c->topic_defaults.dead_letter);
}

static void test_uint(void **state)
{
    fx_t *f = *state;
    assert_int_equal(set(f, "default_partitions=65536"), 0);
    assert_int_equal(f->c->default_partitions, 65536);
    assert_int_equal(set(f, "default_partitions = 1"), 0);
    assert_int_equal(f->c->default_partitions, 1);
    set_fails(f, "default_partitions=0", "--set: default_partitions: '0' is out of range 1..65536");
    set_fails(f, "default_partitions=65537",
              "--set: default_partitions: '65537' is out of range 1..65536");
    set_fails(f, "default_partitions=-1",
              "--set: default_partitions: expected a whole number, got '-1'");
    set_fails(f, "default_partitions=1.5",
              "--set: default_partitions: expected a whole number, got '1.5'");
    set_fails(f, "default_partitions=4k",
              "--set: default_partitions: expected a whole number, got '4k'");
    set_fails(f, "max_connections=99999999999999999999999",
              "--set: max_connections: expected a whole number, got '99999999999999999999999'");
    assert_int_equal(f->c->default_partitions, 1); /* failures change nothing */
    assert_int_equal(set(f, "flush_messages=1000000000"), 0);
    assert_int_equal(f->c->topic_defaults.log.flush_messages, 1000000000);
    assert_int_equal(set(f, "max_delivery_count=0"), 0);
}

static void test_size(void **state)
{
    fx_t *f = *state;
    static const struct {
        const char *v;
        uint64_t want;
    } ok[] = {
        {"4096", 4096},      {"4096b", 4096},      {"64k", 64 * KiB},  {"64K", 64 * KiB},
        {"64KiB", 64 * KiB}, {"64 KiB", 64 * KiB}, {"64kb", 64 * KiB}, {"2M", 2 * MiB},
        {"2MiB", 2 * MiB},   {"1G", 1 * GiB},      {"1gib", 1 * GiB},  {"2GiB", 2 * GiB},
    };
    char kv[64];
    for (size_t i = 0; i < MQD_ARRAY_LEN(ok); i++) {
        snprintf(kv, sizeof kv, "segment_bytes=%s", ok[i].v);
        assert_int_equal(set(f, kv), 0);
        assert_int_equal(f->c->topic_defaults.log.segment_bytes, ok[i].want);
    }
    set_fails(f, "segment_bytes=1.5M",
              "--set: segment_bytes: expected a size like 4096, 64KiB, 16MiB or 1GiB, got '1.5M'");
    set_fails(f, "segment_bytes=10X",
              "--set: segment_bytes: expected a size like 4096, 64KiB, 16MiB or 1GiB, got '10X'");
    set_fails(f, "segment_bytes=3G", "--set: segment_bytes: '3G' is out of range 4KiB..2GiB");
    set_fails(f, "segment_bytes=100", "--set: segment_bytes: '100' is out of range 4KiB..2GiB");
    set_fails(f, "segment_bytes=99999999999T",
              "--set: segment_bytes: expected a size like 4096, 64KiB, 16MiB or 1GiB, got "
              "'99999999999T'");
    assert_int_equal(set(f, "max_frame_size=512"), 0);
    assert_int_equal(f->c->max_frame_size, 512);
    assert_int_equal(set(f, "prefetch_bytes=64MiB"), 0);
    assert_int_equal(f->c->prefetch_bytes, 64 * MiB);
    assert_int_equal(set(f, "retention_bytes=10T"), 0);
    assert_int_equal(f->c->topic_defaults.log.retention_bytes, 10 * GiB * KiB);
}

static void test_duration(void **state)
{
    fx_t *f = *state;
    static const struct {
        const char *v;
        int64_t want;
    } ok[] = {
        {"0", 0},          {"500", 500},   {"500ms", 500},
        {"30s", 30000},    {"5m", 300000}, {"2h", 7200000},
        {"7d", 604800000}, {"1 s", 1000},  {"3650d", 3650LL * 86400000},
    };
    char kv[64];
    for (size_t i = 0; i < MQD_ARRAY_LEN(ok); i++) {
        snprintf(kv, sizeof kv, "segment_ms=%s", ok[i].v);
        assert_int_equal(set(f, kv), 0);
        assert_int_equal(f->c->topic_defaults.log.segment_ms, ok[i].want);
    }
    set_fails(f, "segment_ms=1w",
              "--set: segment_ms: expected a duration like 500ms, 30s, 5m, 2h or 7d, got '1w'");
    set_fails(f, "flush_interval_ms=0", "--set: flush_interval_ms: '0' is out of range 1ms..1h");
    set_fails(f, "flush_interval_ms=2h", "--set: flush_interval_ms: '2h' is out of range 1ms..1h");
    assert_int_equal(set(f, "flush_interval_ms=250"), 0);
    assert_int_equal(f->c->topic_defaults.log.flush_interval_ms, 250);
    assert_int_equal(set(f, "idle_timeout_ms=0"), 0);
    assert_int_equal(f->c->idle_timeout_ms, 0);
    assert_int_equal(set(f, "dedup_window_ms=10m"), 0);
    assert_int_equal(f->c->topic_defaults.dedup_window_ms, 600000);
}

static void test_enum_and_string(void **state)
{
    fx_t *f = *state;
    assert_int_equal(set(f, "flush=ASYNC"), 0);
    assert_int_equal(f->c->topic_defaults.log.flush, MQD_FLUSH_ASYNC);
    set_fails(f, "flush=snyc", "--set: flush: expected sync or async, got 'snyc'");
    set_fails(f, "log_level=loud",
              "--set: log_level: expected error, warn, notice, info or debug, got 'loud'");
    assert_int_equal(set(f, "log_level=debug"), 0);
    assert_int_equal(f->c->log_level, MQD_LOG_DEBUG);
    assert_int_equal(set(f, "retention=consumed"), 0);
    assert_true(f->c->topic_defaults.retention_consumed);
    assert_int_equal(set(f, "auto_offset_reset=latest"), 0);
    assert_int_equal(f->c->topic_defaults.auto_offset_reset, MQD_OFFSET_RESET_LATEST);
    assert_int_equal(set(f, "data_dir=/srv/mqd"), 0);
    assert_string_equal(f->c->data_dir, "/srv/mqd");
    set_fails(f, "data_dir=", "--set: data_dir: must not be empty");
    assert_int_equal(set(f, "metrics_listen=127.0.0.1:9090"), 0);
    assert_string_equal(f->c->metrics_listen, "127.0.0.1:9090");
    assert_int_equal(set(f, "metrics_listen="), 0);
    assert_null(f->c->metrics_listen);
    set_fails(f, "metrics_listen=9090",
              "--set: metrics_listen: expected HOST:PORT or [IPV6]:PORT, got '9090'");
}

static void test_file_errors(void **state)
{
    fx_t *f = *state;
    load_fails(f, "# comment\n\nlisten = 127.0.0.1:5672\nflush = snyc\n",
               "4: flush: expected sync or async, got 'snyc'");
    load_fails(f, "flsh = sync\n", "1: flsh: unknown key (did you mean 'flush'?)");
    load_fails(f, "a = 1\n\n\nmax_conections = 5\n",
               "1: a: unknown key"); /* stops at the first error */
    load_fails(f, "\n\nmax_conections = 5\n",
               "3: max_conections: unknown key (did you mean 'max_connections'?)");
    load_fails(f, "zzzzzzzzzz = 1\n", "1: zzzzzzzzzz: unknown key");
    load_fails(f, "default_partitions = 0\n",
               "1: default_partitions: '0' is out of range 1..65536");
    load_fails(f, "[topic a]\nflush = sync\n[topic b]\n[topic a]\n",
               "4: [topic a]: duplicate section");
    load_fails(f, "[user bob]\n[user bob]\n", "2: [user bob]: duplicate section");
    load_fails(f, "partitions = 3\n",
               "1: partitions: not allowed in the global part (before any section); only in "
               "a [topic NAME] section");
    load_fails(f, "[topic t]\nlisten = 0.0.0.0:5672\n",
               "2: listen: not allowed in a [topic NAME] section; only in the global part "
               "(before any section)");
    load_fails(f, "[user u]\nflush = sync\n",
               "2: flush: not allowed in a [user NAME] section; only in the global part (before "
               "any section) or a [topic NAME] section");
    load_fails(f, "password_hash = x\n",
               "1: password_hash: not allowed in the global part (before any section); only in "
               "a [user NAME] section");
    load_fails(f, "flush sync\n", "1: flush: expected 'key = value'");
    load_fails(f, "[topic a\n", "1: [topic a: expected [topic NAME], [user NAME], [sas_key NAME] or [acl]");
    load_fails(f, "[queue a]\n",
               "1: [queue a]: unknown section kind 'queue' (expected topic, user, sas_key or acl)");
    load_fails(f, "[topic]\n", "1: [topic ]: invalid name ''");
    load_fails(f, "[user u]\npassword_hash = plain\n",
               "2: password_hash: expected pbkdf2-sha256$ITERATIONS$SALT$HASH (made by "
               "mqd-passwd)");
    load_fails(f, "listen = localhost\n",
               "1: listen: expected HOST:PORT or [IPV6]:PORT, got 'localhost'");

    f->err[0] = '\0';
    assert_int_equal(mqd_conf_load_file(f->c, "/nonexistent/mqd.conf", f->err, sizeof f->err),
                     MQD_ENOENT);
    assert_non_null(strstr(f->err, "/nonexistent/mqd.conf"));
}

static void test_comments_and_whitespace(void **state)
{
    fx_t *f = *state;
    assert_int_equal(load(f, "# whole line\n"
                             "   # indented comment\n"
                             "\t\n"
                             "log_level=debug# no space: part of the value? no: enum fails\n"),
                     MQD_EINVAL);
    assert_int_equal(load(f, "# whole line\n"
                             "   # indented comment\n"
                             "max_connections = 42   # trailing comment\n"
                             "\tlink_credit\t=\t7\t\n"
                             "data_dir = /tmp/a#b # the first '#' is part of the word\n"),
                     0);
    assert_int_equal(f->c->max_connections, 42);
    assert_int_equal(f->c->link_credit, 7);
    assert_string_equal(f->c->data_dir, "/tmp/a#b");
    assert_string_equal(f->c->path, f->path);
}

static void test_topic_layering(void **state)
{
    fx_t *f = *state;
    mqd_topic_conf_t t;
    assert_int_equal(load(f, "default_partitions = 3\n"
                             "flush = async\n"
                             "segment_bytes = 64MiB\n"
                             "[topic orders]\n"
                             "partitions = 8\n"
                             "flush = sync\n"
                             "dead_letter = on\n"
                             "[topic audit]\n"
                             "retention_ms = 1h\n"),
                     0);
    assert_int_equal(f->c->n_topics, 2);

    mqd_conf_topic(f->c, "orders", &t);
    assert_string_equal(t.name, "orders");
    assert_int_equal(t.partitions, 8);
    assert_int_equal(t.log.flush, MQD_FLUSH_SYNC);
    assert_int_equal(t.log.segment_bytes, 64 * MiB); /* inherited */
    assert_true(t.dead_letter);
    assert_int_equal(t.log.retention_ms, 0);

    mqd_conf_topic(f->c, "audit", &t);
    assert_string_equal(t.name, "audit");
    assert_int_equal(t.partitions, 3); /* default_partitions */
    assert_int_equal(t.log.flush, MQD_FLUSH_ASYNC);
    assert_int_equal(t.log.retention_ms, 3600000);
    assert_false(t.dead_letter);

    mqd_conf_topic(f->c, "other", &t);
    assert_null(t.name);
    assert_int_equal(t.partitions, 3);
    assert_int_equal(t.log.flush, MQD_FLUSH_ASYNC);
    assert_int_equal(t.log.segment_bytes, 64 * MiB);
    assert_null(t.set); /* no section: nothing was given for it */

    /* defaults changed later (--set) show through where a section is silent */
    assert_int_equal(set(f, "segment_bytes=128MiB"), 0);
    assert_int_equal(set(f, "topic.audit.segment_bytes=1MiB"), 0);
    mqd_conf_topic(f->c, "orders", &t);
    assert_int_equal(t.log.segment_bytes, 128 * MiB);
    mqd_conf_topic(f->c, "audit", &t);
    assert_int_equal(t.log.segment_bytes, 1 * MiB);
    assert_int_equal(f->c->n_topics, 2);
}

static void test_set_forms(void **state)
{
    fx_t *f = *state;
    mqd_topic_conf_t t;
    assert_int_equal(set(f, " max_connections = 5 "), 0);
    assert_int_equal(f->c->max_connections, 5);
    assert_int_equal(set(f, "topic.orders.flush=async"), 0);
    assert_int_equal(set(f, "topic.orders.partitions=4"), 0);
    assert_int_equal(set(f, "topic.my.dotted.name.flush=async"), 0);
    assert_int_equal(f->c->n_topics, 2);
    mqd_conf_topic(f->c, "my.dotted.name", &t);
    assert_string_equal(t.name, "my.dotted.name");
    assert_int_equal(t.log.flush, MQD_FLUSH_ASYNC);
    mqd_conf_topic(f->c, "orders", &t);
    assert_int_equal(t.partitions, 4);
    set_fails(f, "max_connections", "--set: max_connections: expected KEY=VALUE");
    set_fails(f, "topic.orders.flush=x",
              "--set: topic.orders.flush: expected sync or async, got 'x'");
    set_fails(f, "topic.orders.listen=1.2.3.4:5",
              "--set: topic.orders.listen: not allowed in a [topic NAME] section; only in the "
              "global part (before any section)");
    set_fails(f, "topic.flush=sync",
              "--set: topic.flush: expected KEY, topic.NAME.KEY or user.NAME.KEY");
    set_fails(f, "queue.x.flush=sync",
              "--set: queue.x.flush: unknown section kind 'queue' (expected topic, user, sas_key or acl)");
    set_fails(f, "partitions=2",
              "--set: partitions: not allowed in the global part (before any section); only in "
              "a [topic NAME] section");
    set_fails(f, "nosuch=1", "--set: nosuch: unknown key");

    char hash[160], kv[220];
    assert_int_equal(mqd_conf_password_hash("pw", 1000, hash, sizeof hash), 0);
    snprintf(kv, sizeof kv, "user.carol.password_hash=%s", hash);
    assert_int_equal(set(f, kv), 0);
    assert_non_null(mqd_conf_user(f->c, "carol"));
    assert_true(mqd_conf_password_ok(mqd_conf_user(f->c, "carol")->password_hash, "pw"));
}

static void test_listen(void **state)
{
    fx_t *f = *state;
    /* a file without listen keeps the built-in default */
    assert_int_equal(load(f, "max_sessions = 2\n"), 0);
    assert_int_equal(f->c->n_listen, 1);
    assert_string_equal(f->c->listen[0], "127.0.0.1:5672");
    /* the first listen in a file replaces it; later ones add */
    assert_int_equal(load(f, "listen = 0.0.0.0:5672\nlisten = [::1]:5673\n"), 0);
    assert_int_equal(f->c->n_listen, 2);
    assert_string_equal(f->c->listen[0], "0.0.0.0:5672");
    assert_string_equal(f->c->listen[1], "[::1]:5673");
    /* --listen replaces what the file said, then adds */
    assert_int_equal(mqd_conf_add_listen(f->c, "127.0.0.2:1", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_add_listen(f->c, "127.0.0.3:0", f->err, sizeof f->err), 0);
    assert_int_equal(f->c->n_listen, 2);
    assert_string_equal(f->c->listen[0], "127.0.0.2:1");
    assert_string_equal(f->c->listen[1], "127.0.0.3:0");
    assert_int_equal(set(f, "listen=127.0.0.4:4"), 0); /* --set listen is command line too */
    assert_int_equal(f->c->n_listen, 3);
    assert_int_equal(mqd_conf_add_listen(f->c, "::1:5672", f->err, sizeof f->err), MQD_EINVAL);
    assert_string_equal(f->err, "--listen: expected HOST:PORT or [IPV6]:PORT, got '::1:5672'");
    assert_int_equal(f->c->n_listen, 3);

    /* a bad first listen leaves the old list alone */
    mqd_conf_t *c2;
    assert_int_equal(mqd_conf_new(&c2), 0);
    assert_int_equal(mqd_conf_add_listen(c2, "host:99999", f->err, sizeof f->err), MQD_EINVAL);
    assert_int_equal(c2->n_listen, 1);
    assert_string_equal(c2->listen[0], "127.0.0.1:5672");
    mqd_conf_free(c2);

    char host[256];
    uint16_t port = 0;
    assert_int_equal(mqd_conf_parse_hostport("[fe80::1]:5671", host, sizeof host, &port), 0);
    assert_string_equal(host, "fe80::1");
    assert_int_equal(port, 5671);
    assert_int_equal(mqd_conf_parse_hostport("example.org:65535", host, sizeof host, &port), 0);
    assert_string_equal(host, "example.org");
    assert_int_equal(port, 65535);
    assert_int_equal(mqd_conf_parse_hostport(":5672", host, sizeof host, &port), MQD_EINVAL);
    assert_int_equal(mqd_conf_parse_hostport("h:", host, sizeof host, &port), MQD_EINVAL);
    assert_int_equal(mqd_conf_parse_hostport("h:-1", host, sizeof host, &port), MQD_EINVAL);
    assert_int_equal(mqd_conf_parse_hostport("h:65536", host, sizeof host, &port), MQD_EINVAL);
    assert_int_equal(mqd_conf_parse_hostport("[::1]5672", host, sizeof host, &port), MQD_EINVAL);
}

static void test_passwords(void **state)
{
    fx_t *f = *state;
    char h1[160], h2[160], text[400];
    assert_int_equal(mqd_conf_password_hash("s3cret", 1000, h1, sizeof h1), 0);
    assert_int_equal(mqd_conf_password_hash("s3cret", 1000, h2, sizeof h2), 0);
    assert_int_equal(strncmp(h1, "pbkdf2-sha256$1000$", 19), 0);
    assert_string_not_equal(h1, h2); /* random salt */
    assert_true(mqd_conf_password_ok(h1, "s3cret"));
    assert_true(mqd_conf_password_ok(h2, "s3cret"));
    assert_false(mqd_conf_password_ok(h1, "s3cret "));
    assert_false(mqd_conf_password_ok(h1, ""));
    assert_false(mqd_conf_password_ok(h1, NULL));
    assert_false(mqd_conf_password_ok("garbage", "s3cret"));
    assert_false(mqd_conf_password_ok(NULL, "s3cret"));
    /* a changed iteration count or hash byte fails */
    char bad[160];
    strcpy(bad, h1);
    bad[15] = '2'; /* 1000 -> 2000 */
    assert_false(mqd_conf_password_ok(bad, "s3cret"));
    strcpy(bad, h1);
    char *last = strrchr(bad, '$') + 1;
    last[0] = last[0] == 'A' ? 'B' : 'A';
    assert_false(mqd_conf_password_ok(bad, "s3cret"));
    /* interoperability: a hash computed independently with Python's
     * hashlib.pbkdf2_hmac('sha256', b'password', b'saltsaltsaltsalt', 1000) */
    assert_true(mqd_conf_password_ok("pbkdf2-sha256$1000$c2FsdHNhbHRzYWx0c2FsdA==$"
                                     "8nX7hwFEzIB8aPajJTYK8weHQc5Ngz0pFVAKvSu4jQA=",
                                     "password"));

    assert_int_equal(mqd_conf_password_hash("x", 10, h2, sizeof h2), MQD_EINVAL);
    assert_int_equal(mqd_conf_password_hash("x", 1000, h2, 20), MQD_ETOOBIG);
    assert_int_equal(mqd_conf_password_hash("x", 0, h2, sizeof h2), 0); /* default count */
    assert_int_equal(strncmp(h2, "pbkdf2-sha256$100000$", 21), 0);

    snprintf(text, sizeof text, "allow_anonymous = off\n[user alice]\npassword_hash = %s\n", h1);
    assert_int_equal(load(f, text), 0);
    const mqd_user_conf_t *u = mqd_conf_user(f->c, "alice");
    assert_non_null(u);
    assert_true(mqd_conf_password_ok(u->password_hash, "s3cret"));
    assert_null(mqd_conf_user(f->c, "bob"));
    assert_int_equal(mqd_conf_validate(f->c, f->err, sizeof f->err), 0);
}

static void test_validate(void **state)
{
    fx_t *f = *state;
    assert_int_equal(load(f, "[user dave]\n"), 0);
    assert_int_equal(mqd_conf_validate(f->c, f->err, sizeof f->err), MQD_EINVAL);
    char want[300];
    snprintf(want, sizeof want, "%s: [user dave]: password_hash: missing", f->path);
    assert_string_equal(f->err, want);

    mqd_conf_t *c;
    assert_int_equal(mqd_conf_new(&c), 0);
    assert_int_equal(mqd_conf_set(c, "metrics_listen=127.0.0.1:5672", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_validate(c, f->err, sizeof f->err), MQD_EINVAL);
    assert_string_equal(f->err, "configuration: metrics_listen: 127.0.0.1:5672 is also an AMQP "
                                "listener");
    mqd_conf_free(c);
}

/* Node identity (replication_peer_verify): the keys it needs, checked before start. */
static void test_validate_repl_peer(void **state)
{
    fx_t *f = *state;
    static const char *const base[] = {"cluster=etcd",
                                       "node_id=3",
                                       "etcd_endpoints=http://127.0.0.1:2379",
                                       "listen=amqps://127.0.0.1:5671",
                                       "tls_cert=/n3.crt",
                                       "tls_key=/n3.key",
                                       "replication_peer_verify=on"};
    static const struct {
        const char *kv[2];
        const char *err; /* NULL: valid */
    } cases[] = {
        {{NULL},
         "configuration: replication_peer_verify: on needs replication_tls = on (client "
         "certificates are a TLS matter)"},
        {{"replication_tls=on"},
         "configuration: replication_peer_verify: on needs replication_ca_file: the CA that signs "
         "the nodes' certificates (the system trust store never vouches for a node id)"},
        {{"replication_tls=on", "replication_ca_file=/ca.crt"}, NULL},
        {{"replication_tls=on", "replication_cert=/c3.crt"},
         "configuration: replication_key: replication_cert and replication_key go together "
         "(unset both to present tls_cert and tls_key)"},
        {{"replication_tls=on", "replication_key=/c3.key"},
         "configuration: replication_cert: replication_cert and replication_key go together "
         "(unset both to present tls_cert and tls_key)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mqd_conf_t *c;
        assert_int_equal(mqd_conf_new(&c), 0);
        for (size_t k = 0; k < sizeof base / sizeof base[0]; k++)
            assert_int_equal(mqd_conf_set(c, base[k], f->err, sizeof f->err), 0);
        for (size_t k = 0; k < 2 && cases[i].kv[k]; k++)
            assert_int_equal(mqd_conf_set(c, cases[i].kv[k], f->err, sizeof f->err), 0);
        f->err[0] = '\0';
        int rc = mqd_conf_validate(c, f->err, sizeof f->err);
        if (cases[i].err == NULL) {
            assert_int_equal(rc, 0);
        } else {
            assert_int_equal(rc, MQD_EINVAL);
            assert_string_equal(f->err, cases[i].err);
        }
        mqd_conf_free(c);
    }
}

static void test_restart_needed(void **state)
{
    fx_t *f = *state;
    mqd_conf_t *nw;
    char names[256], hash[160], kv[220];
    assert_int_equal(set(f, "topic.orders.partitions=2"), 0);
    assert_int_equal(set(f, "topic.audit.flush=async"), 0);
    assert_int_equal(mqd_conf_new(&nw), 0);
    assert_int_equal(mqd_conf_set(nw, "topic.orders.partitions=2", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_set(nw, "topic.audit.flush=async", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_restart_needed(f->c, nw, names, sizeof names), 0);
    assert_string_equal(names, "");

    /* log level and users are applied by a reload */
    assert_int_equal(mqd_conf_set(nw, "log_level=debug", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_password_hash("pw", 1000, hash, sizeof hash), 0);
    snprintf(kv, sizeof kv, "user.erin.password_hash=%s", hash);
    assert_int_equal(mqd_conf_set(nw, kv, f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_restart_needed(f->c, nw, names, sizeof names), 0);

    /* everything else needs a restart */
    assert_int_equal(mqd_conf_set(nw, "max_connections=7", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_set(nw, "segment_ms=1h", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_set(nw, "topic.orders.partitions=4", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_set(nw, "topic.new.dead_letter=on", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_add_listen(nw, "127.0.0.1:5673", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_restart_needed(f->c, nw, names, sizeof names), 6);
    /* segment_ms is a default of every topic, so each section shows it too */
    assert_string_equal(names, "listen, max_connections, segment_ms, topic.orders, topic.audit, "
                               "topic.new");
    assert_int_equal(mqd_conf_restart_needed(f->c, nw, names, 12), 6);
    assert_string_equal(names, "listen, max"); /* 11 chars + NUL */
    mqd_conf_free(nw);
}

/* [sas_key NAME] sections, rights, sas_required and what a reload cannot change */
static void test_sas_keys(void **state)
{
    fx_t *f = *state;
    unsigned bits = 0;
    char names[256];
    mqd_conf_t *nw;
    assert_int_equal(mqd_conf_parse_sas_rights("send, listen", &bits), 0);
    assert_int_equal(bits, MQD_CONF_SAS_SEND | MQD_CONF_SAS_LISTEN);
    assert_int_equal(mqd_conf_parse_sas_rights("manage", &bits), 0);
    assert_int_equal(bits, 7); /* manage includes send and listen */
    assert_int_equal(mqd_conf_parse_sas_rights("send,frob", &bits), MQD_EINVAL);
    assert_int_equal(set(f, "sas_key.root.rights=frob"), MQD_EINVAL);
    assert_string_equal(f->err, "--set: sas_key.root.rights: expected a list of send, listen, "
                                "manage; got 'frob'");
    assert_int_equal(set(f, "sas_key.root.rights=listen"), 0);
    assert_int_equal(mqd_conf_validate(f->c, f->err, sizeof f->err), MQD_EINVAL);
    assert_non_null(strstr(f->err, "[sas_key root]: key: missing"));
    assert_int_equal(set(f, "sas_key.root.key=k1"), 0);
    assert_int_equal(mqd_conf_validate(f->c, f->err, sizeof f->err), 0);
    const mqd_sas_key_conf_t *k = mqd_conf_sas_key(f->c, "root");
    assert_non_null(k);
    assert_string_equal(k->key, "k1");
    assert_null(k->scope);
    assert_null(mqd_conf_sas_key(f->c, "nobody"));
    assert_int_equal(set(f, "key=k1"), MQD_EINVAL); /* not in the global part */
    assert_int_equal(set(f, "topic.t.rights=send"), MQD_EINVAL);

    /* auto: lenient (unknown key names accepted unchecked) on loopback only, never
     * requiring tokens for links (the first --listen replaces the built-in 127.0.0.1:5672) */
    assert_false(mqd_conf_sas_effective(f->c));
    assert_true(mqd_conf_sas_lenient(f->c));
    assert_int_equal(mqd_conf_add_listen(f->c, "[::1]:5673", f->err, sizeof f->err), 0);
    assert_true(mqd_conf_sas_lenient(f->c));
    assert_int_equal(mqd_conf_add_listen(f->c, "0.0.0.0:5674", f->err, sizeof f->err), 0);
    assert_false(mqd_conf_sas_lenient(f->c));
    assert_false(mqd_conf_sas_effective(f->c));
    assert_int_equal(set(f, "sas_required=off"), 0);
    assert_true(mqd_conf_sas_lenient(f->c));
    assert_false(mqd_conf_sas_effective(f->c));
    assert_int_equal(set(f, "sas_required=on"), 0);
    assert_true(mqd_conf_sas_effective(f->c));
    assert_false(mqd_conf_sas_lenient(f->c));
    assert_int_equal(set(f, "sas_required=maybe"), MQD_EINVAL);

    /* keys are read at start: a changed or added key is named by a reload */
    assert_int_equal(mqd_conf_new(&nw), 0);
    assert_int_equal(mqd_conf_set(nw, "sas_required=on", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_add_listen(nw, "[::1]:5673", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_add_listen(nw, "0.0.0.0:5674", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_set(nw, "sas_key.root.rights=listen", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_set(nw, "sas_key.root.key=k2", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_set(nw, "sas_key.new.key=k3", f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_restart_needed(f->c, nw, names, sizeof names), 2);
    assert_string_equal(names, "sas_key.root, sas_key.new");
    mqd_conf_free(nw);
}

/* ---- the committed sample and man page against the table ---- */

static const char *srcdir(void)
{
    const char *s = getenv("MQD_SRCDIR");
    return s != NULL && *s != '\0' ? s : MQD_TEST_SRCDIR;
}

static char *slurp(const char *rel)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", srcdir(), rel);
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        fail_msg("cannot open %s (set MQD_SRCDIR)", path);
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    assert_non_null(mem);
    int ch;
    while ((ch = fgetc(fp)) != EOF)
        fputc(ch, mem);
    fclose(fp);
    fclose(mem);
    return buf;
}

/* True if `word` occurs in text not as part of a longer identifier. */
static bool mentions(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p != NULL; p = strstr(p + 1, word)) {
        bool left = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        bool right = !(isalnum((unsigned char)p[n]) || p[n] == '_');
        if (left && right)
            return true;
    }
    return false;
}

static char *generated(int (*gen)(FILE *))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    assert_non_null(mem);
    assert_int_equal(gen(mem), 0);
    fclose(mem);
    return buf;
}

static void test_sample_matches_table(void **state)
{
    fx_t *f = *state;
    char path[1024];
    char *text = slurp("etc/mqd.conf");
    for (size_t i = 0; i < mqd_conf_key_count(); i++) {
        if (!mentions(text, mqd_conf_key_name(i)))
            fail_msg("etc/mqd.conf does not mention %s", mqd_conf_key_name(i));
    }
    char *gen = generated(mqd_conf_write_sample);
    if (strcmp(text, gen) != 0)
        fail_msg("etc/mqd.conf differs from the table's sample: run `make regen-conf`");
    free(gen);
    free(text);

    snprintf(path, sizeof path, "%s/etc/mqd.conf", srcdir());
    assert_int_equal(mqd_conf_load_file(f->c, path, f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_validate(f->c, f->err, sizeof f->err), 0);
    assert_false(f->c->allow_anonymous);
    assert_string_equal(f->c->data_dir, "/var/lib/mqd");
    assert_int_equal(f->c->n_listen, 1);
    assert_string_equal(f->c->listen[0], "127.0.0.1:5672");

    mqd_conf_t *dev;
    assert_int_equal(mqd_conf_new(&dev), 0);
    snprintf(path, sizeof path, "%s/etc/mqd-dev.conf", srcdir());
    assert_int_equal(mqd_conf_load_file(dev, path, f->err, sizeof f->err), 0);
    assert_int_equal(mqd_conf_validate(dev, f->err, sizeof f->err), 0);
    assert_true(dev->allow_anonymous);
    assert_string_equal(dev->data_dir, "./data");
    assert_int_equal(dev->log_level, MQD_LOG_INFO);
    mqd_conf_free(dev);
}

static void test_man_matches_table(void **state)
{
    MQD_UNUSED(state);
    char *text = slurp("man/mqd.conf.5");
    for (size_t i = 0; i < mqd_conf_key_count(); i++) {
        if (!mentions(text, mqd_conf_key_name(i)))
            fail_msg("man/mqd.conf.5 does not mention %s", mqd_conf_key_name(i));
    }
    char *gen = generated(mqd_conf_write_man_keys);
    if (strstr(text, gen) == NULL)
        fail_msg("man/mqd.conf.5 key reference differs from the table: run `make regen-conf`");
    free(gen);
    free(text);
}

/* mqd_conf_show: value as the file spells it, and where it came from. */
typedef struct shown {
    char rows[256][3][160]; /* "topic/key", value, source */
    size_t n;
} shown_t;

static int collect(const char *topic, const char *key, const char *value, const char *source,
                   void *arg)
{
    shown_t *sh = arg;
    if (sh->n < 256) {
        snprintf(sh->rows[sh->n][0], 160, "%s/%s", topic ? topic : "", key);
        snprintf(sh->rows[sh->n][1], 160, "%s", value);
        snprintf(sh->rows[sh->n][2], 160, "%s", source);
    }
    sh->n++;
    return 0;
}

static void expect_shown(const shown_t *sh, const char *tk, const char *value, const char *source)
{
    for (size_t i = 0; i < sh->n && i < 256; i++) {
        if (strcmp(sh->rows[i][0], tk) != 0)
            continue;
        assert_string_equal(sh->rows[i][1], value);
        assert_string_equal(sh->rows[i][2], source);
        return;
    }
    fail_msg("%s not shown", tk);
}

static void test_show_origins(void **state)
{
    fx_t *f = *state;
    char hash[256], text[1024];
    assert_int_equal(mqd_conf_password_hash("pw", MQD_CONF_PBKDF2_MIN_ITERATIONS, hash, sizeof hash),
                     0);
    snprintf(text, sizeof text,
             "max_topics = 500\n"
             "segment_bytes = 64MiB\n"
             "max_topics = 600\n"
             "[topic orders]\n"
             "partitions = 8\n"
             "retention_ms = 604800000\n"
             "[user alice]\n"
             "password_hash = %s\n",
             hash);
    assert_int_equal(load(f, text), 0);
    assert_int_equal(set(f, "idle_timeout_ms=30s"), 0);
    assert_int_equal(set(f, "topic.orders.dead_letter=on"), 0);
    assert_int_equal(mqd_conf_add_listen(f->c, "127.0.0.1:5999", f->err, sizeof f->err), 0);
    shown_t *sh = calloc(1, sizeof *sh);
    assert_non_null(sh);
    assert_int_equal(mqd_conf_show(f->c, collect, sh), 0);
    char src[256];
    snprintf(src, sizeof src, "%s:3", f->path); /* the last line of a key counts */
    expect_shown(sh, "/max_topics", "600", src);
    snprintf(src, sizeof src, "%s:2", f->path);
    expect_shown(sh, "/segment_bytes", "64MiB", src);
    expect_shown(sh, "/idle_timeout_ms", "30s", "--set");
    expect_shown(sh, "/listen", "127.0.0.1:5999", "--listen");
    expect_shown(sh, "/max_sessions", "64", "default");
    expect_shown(sh, "/flush", "sync", "default");
    snprintf(src, sizeof src, "%s:5", f->path);
    expect_shown(sh, "orders/partitions", "8", src);
    snprintf(src, sizeof src, "%s:6", f->path);
    expect_shown(sh, "orders/retention_ms", "7d", src);
    expect_shown(sh, "orders/dead_letter", "on", "--set");
    for (size_t i = 0; i < sh->n && i < 256; i++) /* users hold secrets: never shown */
        assert_null(strstr(sh->rows[i][1], "pbkdf2"));
    free(sh);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_defaults),
        T(test_bool),
        T(test_uint),
        T(test_size),
        T(test_duration),
        T(test_enum_and_string),
        T(test_file_errors),
        T(test_comments_and_whitespace),
        T(test_topic_layering),
        T(test_set_forms),
        T(test_listen),
        T(test_passwords),
        T(test_validate),
        T(test_validate_repl_peer),
        T(test_restart_needed),
        T(test_sas_keys),
        T(test_sample_matches_table),
        T(test_man_matches_table),
        T(test_show_origins),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
