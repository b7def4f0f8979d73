/* Topics on disk that meta.db does not know (meta.db deleted, or restored from an older
 * copy): the partition count comes from the directory, with a warning, so that no
 * partition's messages hide behind a topic re-created later with the default count. */
#include "config.h"
#include "core/core.h"
#include "core/core_int.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIR_PARTITIONS 65536u /* the partitions key's bound: larger names are not ours */

/* 0..MAX_DIR_PARTITIONS-1 for a partition directory's name, else -1. */
static long partition_of(const char *name)
{
    long v = 0;
    if (!*name || strlen(name) > 5)
        return -1;
    for (const char *p = name; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v < (long)MAX_DIR_PARTITIONS ? v : -1;
}

/* The partition count a topic directory implies: its highest partition directory + 1
 * (0 when it has none). */
static uint32_t dir_partitions(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    uint32_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long v = partition_of(e->d_name);
        if (v >= 0 && (uint32_t)v + 1 > n)
            n = (uint32_t)v + 1;
    }
    closedir(d);
    return n;
}

/* The topic name a store directory stands for ("%2F" back to '/'); false if none. */
static bool topic_name_of(const char *sname, char *out, size_t len)
{
    size_t o = 0;
    for (const char *p = sname; *p; o++) {
        if (o + 1 >= len)
            return false;
        if (strncmp(p, "%2F", 3) == 0) {
            out[o] = '/';
            p += 3;
        } else {
            out[o] = *p++;
        }
    }
    out[o] = '\0';
    return o > 0 && sname[0] != '.' && strncmp(sname, "$tmp.", 5) != 0;
}

int mqd_topics_recover_dirs(mqd_server_t *s)
{
    char path[4096], sub[4096], name[MQD_NAME_MAX + 1];
    snprintf(path, sizeof path, "%s/topics", s->conf->data_dir);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (!topic_name_of(e->d_name, name, sizeof name))
            continue;
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= sizeof sub)
            continue;
        uint32_t n = dir_partitions(sub);
        if (n > 0)
            rc = mqd_topic_adopt(s, name, n);
    }
    closedir(d);
    return rc;
}
