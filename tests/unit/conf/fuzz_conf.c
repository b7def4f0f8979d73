/* Fuzz target for the config parser (STYLE rule 10). Built with -DMQD_LIBFUZZER and
 * -fsanitize=fuzzer it is a libFuzzer target; otherwise main() replays the corpus in
 * tests/unit/conf/corpus (or the files/dirs given) plus deterministic mutations of each
 * file, so `make check` runs it under the sanitizers. */
#include "config.h"
#include "conf/conf.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char tmp_path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mqd_conf_t *c = NULL;
    mqd_topic_conf_t t;
    char err[512];
    if (tmp_path[0] == '\0') {
        strcpy(tmp_path, "/tmp/mqd-fuzz-conf-XXXXXX");
        int fd = mkstemp(tmp_path);
        if (fd < 0)
            abort();
        close(fd);
    }
    FILE *f = fopen(tmp_path, "w");
    if (f == NULL || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
    if (mqd_conf_new(&c) != 0)
        abort();
    if (mqd_conf_load_file(c, tmp_path, err, sizeof err) == 0) {
        (void)mqd_conf_validate(c, err, sizeof err);
        /* the truncation guard against a previous config with users and rules (the
         * mutations cut files short) */
        mqd_conf_census_t prev = {3, 5};
        (void)mqd_conf_guard(&prev, "the previous config", c, err, sizeof err);
        for (size_t i = 0; i < c->n_topics; i++)
            mqd_conf_topic(c, c->topics[i].name, &t);
    }
    /* the same bytes as one --set argument */
    char *kv = malloc(size + 1);
    if (kv == NULL)
        abort();
    memcpy(kv, data, size);
    kv[size] = '\0';
    (void)mqd_conf_set(c, kv, err, sizeof err);
    free(kv);
    mqd_conf_free(c);
    return 0;
}

#ifndef MQD_LIBFUZZER
/* xorshift: the mutations are the same on every run */
static uint32_t next_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void mutate_and_run(const uint8_t *data, size_t size, uint32_t seed)
{
    static const char *const tokens[] = {"=", "#", "[", "]", "\n", " ", "topic ", "user ",
                                         "listen", "KiB", "99999999999999999999", "\0", "$"};
    uint8_t *buf = malloc(size + 64);
    if (buf == NULL)
        abort();
    for (int round = 0; round < 200; round++) {
        size_t n = size;
        memcpy(buf, data, size);
        for (int k = 0; k < 4 && n > 0; k++) {
            uint32_t r = next_rand(&seed);
            size_t pos = r % n;
            const char *tok = tokens[(r >> 8) % MQD_ARRAY_LEN(tokens)];
            size_t tl = strlen(tok) ? strlen(tok) : 1;
            switch ((r >> 16) % 3) {
            case 0: buf[pos] ^= (uint8_t)(1u << ((r >> 20) % 8)); break;
            case 1: n = pos; break; /* truncate */
            default:
                if (n + tl <= size + 64) {
                    memmove(buf + pos + tl, buf + pos, n - pos);
                    memcpy(buf + pos, tok, tl);
                    n += tl;
                }
            }
        }
        LLVMFuzzerTestOneInput(buf, n);
    }
    free(buf);
}

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    uint8_t buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    uint32_t seed = 2463534242u ^ (uint32_t)n;
    mutate_and_run(buf, n, seed ? seed : 1);
    printf("ok %s\n", path);
    return 0;
}

static int run_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode))
        return run_file(path);
    struct dirent **ents = NULL;
    int n = scandir(path, &ents, NULL, alphasort), bad = 0;
    for (int i = 0; i < n; i++) {
        char p[4096];
        if (ents[i]->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", path, ents[i]->d_name);
            bad |= run_file(p);
        }
        free(ents[i]);
    }
    free(ents);
    return n < 0 ? 1 : bad;
}

int main(int argc, char **argv)
{
    int bad = 0;
    mqd_log_set_level(MQD_LOG_ERROR); /* validate() warns on most inputs */
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            bad |= run_path(argv[i]);
    } else {
        const char *src = getenv("MQD_SRCDIR");
        char p[4096];
        snprintf(p, sizeof p, "%s/tests/unit/conf/corpus", src && *src ? src : MQD_TEST_SRCDIR);
        bad |= run_path(p);
    }
    if (tmp_path[0] != '\0')
        unlink(tmp_path);
    return bad;
}
#endif
