/* mqd: command line, configuration, start and stop. The only globals live here. */
#include "config.h"
#include "cluster/cluster.h"
#include "fwd/fwd.h"
#include "repl/repl.h"
#include "conf/conf.h"
#include "console/console.h"
#include "server/server.h"
#include "util/util.h"

#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define DEFAULT_CONF MQD_SYSCONFDIR "/mqd.conf"

/* Every partition keeps its active segment open (one fd each) and every connection is a
 * socket: take the hard limit of open files (systemd's LimitNOFILE, or ulimit -Hn). */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t was = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            rl.rlim_cur = was;
    }
    MQD_INFO("server", "open files limit %llu (was %llu)", (unsigned long long)rl.rlim_cur,
             (unsigned long long)was);
}

/* Page faults are dear on a VM: 12 us per new 4 KiB page on the 2-vCPU test machine
 * (docs/performance.md section 10). A fresh connection at 100k msgs/s touched ~2,000 new
 * heap pages in its first 30 ms (Proton's deliveries, batch and read buffers, transport
 * buffers as they grow) and fell 10-30 ms behind, which was most of that benchmark's p99;
 * and glibc maps buffers of 128 KiB and more with mmap and unmaps them when freed, so a
 * buffer that is freed and allocated again faults again. With heap_prefault, buffers up
 * to 4 MiB come from the heap, the heap is not given back below that size, and that much
 * of it is touched now, before any other thread starts. */
static void heap_prefault(uint64_t bytes)
{
    enum { CHUNK = 1 << 20, PAGE = 4096 };
    if (bytes == 0)
        return;
    size_t n = (size_t)((bytes + CHUNK - 1) / CHUNK);
    void **v = calloc(n, sizeof *v);
    if (!v)
        return;
    mallopt(M_MMAP_THRESHOLD, 4 << 20);
    mallopt(M_TRIM_THRESHOLD, (int)(n * CHUNK + (4u << 20))); /* n <= 1024 (conf bound) */
    for (size_t i = 0; i < n; i++) {
        volatile char *p = v[i] = malloc(CHUNK);
        for (size_t off = 0; p && off < CHUNK; off += PAGE)
            p[off] = 0;
    }
    for (size_t i = n; i-- > 0;)
        free(v[i]);
    free(v);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mqd [-c FILE] [-f] [-t] [-V] [-l HOST:PORT]... [-d DIR] [-s KEY=VALUE]...\n"
               "\n"
               "  -c, --config FILE     configuration file (default " DEFAULT_CONF ")\n"
               "  -f, --foreground      accepted for scripts and units; mqd never forks and always\n"
               "                        logs to standard error (systemd Type=notify)\n"
               "  -t, --check-config    validate the configuration and exit\n"
               "  -l, --listen H:P      listen on HOST:PORT (repeatable; replaces `listen`)\n"
               "  -d, --data-dir DIR    data directory (replaces `data_dir`)\n"
               "  -s, --set KEY=VALUE   override any config key (topic.NAME.KEY for a topic)\n"
               "  -V, --version         print the version and exit\n"
               "  -h, --help            this text\n");
}

typedef struct opts {
    const char *conf_path;
    bool conf_given;
    bool check;
    const char *data_dir;
    const char **listen;
    size_t n_listen;
    const char **sets;
    size_t n_sets;
} opts_t;

static int parse_args(int argc, char **argv, opts_t *o)
{
    static const struct option lo[] = {
        {"config", required_argument, 0, 'c'},  {"foreground", no_argument, 0, 'f'},
        {"check-config", no_argument, 0, 't'},  {"listen", required_argument, 0, 'l'},
        {"data-dir", required_argument, 0, 'd'}, {"set", required_argument, 0, 's'},
        {"version", no_argument, 0, 'V'},       {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    o->listen = calloc((size_t)argc, sizeof *o->listen);
    o->sets = calloc((size_t)argc, sizeof *o->sets);
    if (!o->listen || !o->sets)
        return 1;
    int ch;
    while ((ch = getopt_long(argc, argv, "c:ftl:d:s:Vh", lo, NULL)) != -1) {
        switch (ch) {
        case 'c': o->conf_path = optarg; o->conf_given = true; break;
        case 'f': break;
        case 't': o->check = true; break;
        case 'l': o->listen[o->n_listen++] = optarg; break;
        case 'd': o->data_dir = optarg; break;
        case 's': o->sets[o->n_sets++] = optarg; break;
        case 'V': printf("mqd %s\n", PACKAGE_VERSION); exit(0);
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mqd: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

/* Built-in defaults, then the file, then --listen/--data-dir/--set. With no -c and no
 * /etc/mqd.conf, --data-dir alone is enough to run. */
static int build_conf(opts_t *o, mqd_conf_t **out)
{
    mqd_conf_t *c;
    char err[1024] = "";
    if (mqd_conf_new(&c) != 0)
        return 1;
    const char *path = o->conf_given ? o->conf_path : DEFAULT_CONF;
    int rc = mqd_conf_load_file(c, path, err, sizeof err);
    if (rc == MQD_ENOENT && !o->conf_given && o->data_dir) {
        rc = 0;
        o->conf_path = NULL;
    } else {
        o->conf_path = path;
    }
    for (size_t i = 0; rc == 0 && i < o->n_listen; i++)
        rc = mqd_conf_add_listen(c, o->listen[i], err, sizeof err);
    if (rc == 0 && o->data_dir) {
        char kv[4200];
        snprintf(kv, sizeof kv, "data_dir=%s", o->data_dir);
        rc = mqd_conf_set_from(c, kv, "--data-dir", err, sizeof err);
    }
    for (size_t i = 0; rc == 0 && i < o->n_sets; i++)
        rc = mqd_conf_set(c, o->sets[i], err, sizeof err);
    if (rc == 0)
        rc = mqd_conf_validate(c, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "mqd: %s\n", err[0] ? err : mqd_strerror(rc));
        mqd_conf_free(c);
        return 1;
    }
    *out = c;
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o = {0};
    int rc = parse_args(argc, argv, &o);
    mqd_conf_t *conf = NULL;
    mqd_server_t *srv = NULL;
    mqd_cluster_t *cluster = NULL;
    mqd_repl_t *repl = NULL;
    mqd_fwd_t *fwd = NULL;
    if (rc != 0)
        goto out;
    if ((rc = build_conf(&o, &conf)) != 0)
        goto out;
    if (o.check) {
        printf("mqd: configuration %s is valid\n", o.conf_path ? o.conf_path : "(built-in)");
        goto out;
    }
    mqd_log_set_level(conf->log_level);
    mqd_crc32c(0, "", 0); /* pick the CRC implementation before threads start */
    raise_nofile();
    heap_prefault(conf->heap_prefault);
    MQD_NOTICE("server", "mqd %s starting, data_dir=%s", PACKAGE_VERSION, conf->data_dir);
    if (mqd_server_new(conf, o.conf_path, &srv) != 0) {
        MQD_ERR("server", "start failed");
        rc = 1;
        goto out;
    }
    /* cluster = etcd: membership and replication on the server's loop; cluster = none
     * creates nothing */
    if (conf->cluster == MQD_CONF_CLUSTER_ETCD) {
        mqd_cluster_cbs_t cbs;
        if (mqd_repl_new(srv, conf, &repl) != 0 ||
            (mqd_repl_cluster_cbs(repl, &cbs), mqd_cluster_new(mqd_server_base(srv), conf, &cbs,
                                                                &cluster)) != 0 ||
            mqd_repl_start(repl, cluster) != 0 || mqd_fwd_new(srv, conf, repl, &fwd) != 0) {
            MQD_ERR("server", "start failed: cluster membership, replication or forwarding");
            rc = 1;
            goto out;
        }
    }
    /* the console is started here, not by server/: it calls into server (mgmt, auth),
     * and server calling back into it would be a new include cycle */
    if (mqd_console_start(srv) != 0) {
        MQD_ERR("server", "start failed: console_listen");
        rc = 1;
        goto out;
    }
    rc = mqd_server_run(srv) == 0 ? 0 : 1;
    MQD_NOTICE("server", "stopped");
out:
    if (srv)
        mqd_console_stop(srv); /* before the server: its pending logins are on auth's pool */
    mqd_fwd_free(fwd);   /* its node connections, before the replication it asks */
    mqd_repl_free(repl); /* its watches before the member's etcd client */
    mqd_cluster_free(cluster); /* revokes the lease: the controller key goes now */
    mqd_server_free(srv);
    mqd_conf_free(conf);
    free(o.listen);
    free(o.sets);
    return rc;
}
