/* Replays fuzz corpora without libFuzzer: every file of every directory (or file) named
 * on argv is fed to LLVMFuzzerTestOneInput once. A crash or abort fails the test. */
#include "config.h"
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long len;
    int rc = -1;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0)
        goto out;
    /* an exact-size copy, so the sanitizer build sees any read past the end */
    buf = malloc(len ? (size_t)len : 1);
    if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len)
        goto out;
    LLVMFuzzerTestOneInput(buf, (size_t)len);
    rc = 0;
out:
    if (rc != 0)
        fprintf(stderr, "replay: cannot read %s\n", path);
    free(buf);
    if (f)
        fclose(f);
    return rc;
}

static int run_dir(const char *dir, int *count)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[4096];
    int rc = 0;

    if (d == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", dir);
        return -1;
    }
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        rc = run_file(path);
        (*count)++;
    }
    closedir(d);
    return rc;
}

int main(int argc, char **argv)
{
    int count = 0;

    for (int i = 1; i < argc; i++) {
        struct stat st;
        int rc;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
            return 1;
        }
        if (S_ISDIR(st.st_mode)) {
            rc = run_dir(argv[i], &count);
        } else {
            rc = run_file(argv[i]);
            count++;
        }
        if (rc != 0)
            return 1;
    }
    printf("replayed %d inputs\n", count);
    return count > 0 ? 0 : 1;
}
