/* The truncation guard: a config file cut short is still a valid file. Emptied, it is the
 * built-in defaults (no user; no [acl], so every client may do everything); cut before
 * its [user NAME] sections, nobody can log in; cut before its [acl], every user may do
 * everything. None of these says anything the parser could refuse, so the guard compares
 * what the new config grants with what the previous one did, and refuses the two drops
 * a cut file makes (every user, every [acl] rule) unless the file says them itself:
 * `allow_no_users = on`, and an [acl] rule such as `allow * all *`.
 *
 * "Previous" is the running config at a reload (conf_swap.c) and, at start, the census
 * the server keeps in meta.db from its last start or reload on that data dir: a new data
 * dir (a new development broker, a test) has none, so any config starts there. */
#include "config.h"
#include "conf/conf_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void mqd_conf_census(const mqd_conf_t *c, mqd_conf_census_t *out)
{
    out->users = (uint32_t)c->n_users;
    out->acl_rules = c->acl_present ? (int64_t)c->n_acl : -1;
}

void mqd_conf_census_format(const mqd_conf_census_t *k, char *buf, size_t len)
{
    snprintf(buf, len, "users=%" PRIu32 " acl=%" PRId64, k->users, k->acl_rules);
}

int mqd_conf_census_parse(const char *s, mqd_conf_census_t *out)
{
    uint32_t users;
    int64_t acl;
    int end = 0;
    if (s == NULL || sscanf(s, "users=%" SCNu32 " acl=%" SCNd64 "%n", &users, &acl, &end) != 2 ||
        s[end] != '\0' || acl < -1)
        return MQD_EINVAL;
    out->users = users;
    out->acl_rules = acl;
    return 0;
}

/* "FILE:LINE" of the file's end (or "FILE" when it is empty, "configuration" without a
 * file) and the clause saying where it ends. */
static void file_end(const mqd_conf_t *c, char *loc, size_t loclen, char *ends, size_t endslen)
{
    const char *src = c->path ? c->path : "configuration";
    if (c->path == NULL) {
        snprintf(loc, loclen, "%s", src);
        snprintf(ends, endslen, "no file was read");
    } else if (c->file_lines == 0) {
        snprintf(loc, loclen, "%s", src);
        snprintf(ends, endslen, "the file is empty");
    } else {
        snprintf(loc, loclen, "%s:%d", src, c->file_lines);
        snprintf(ends, endslen, "the file ends at line %d", c->file_lines);
    }
}

static int refuse(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int refuse(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (err != NULL && errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return MQD_EINVAL;
}

static int guard_users(const mqd_conf_census_t *prev, const char *prev_what, const mqd_conf_t *next,
                       char *err, size_t errlen)
{
    char loc[4200], ends[64];
    if (next->n_users > 0 || prev->users == 0 || next->allow_no_users)
        return 0;
    file_end(next, loc, sizeof loc, ends, sizeof ends);
    return refuse(err, errlen,
                  "%s: allow_no_users: no [user NAME] section (%s), but %s had %" PRIu32
                  " user(s): is the file cut short? To run without users on purpose, set "
                  "allow_no_users = on",
                  loc, ends, prev_what, prev->users);
}

static int guard_acl(const mqd_conf_census_t *prev, const char *prev_what, const mqd_conf_t *next,
                     char *err, size_t errlen)
{
    char loc[4200], ends[64];
    if (next->n_acl > 0 || prev->acl_rules <= 0)
        return 0;
    file_end(next, loc, sizeof loc, ends, sizeof ends);
    if (!next->acl_present)
        return refuse(err, errlen,
                      "%s: [acl]: no [acl] section (%s), but %s had %" PRId64
                      " rule(s): is the file cut short? Without one every client may do "
                      "everything; to allow that on purpose, write [acl] with the rule "
                      "`allow * all *`",
                      loc, ends, prev_what, prev->acl_rules);
    /* an [acl] that ends before its first rule denies everything: fail-closed, but what a
     * file cut just after `[acl]` looks like, and it shuts every client out */
    if (next->path != NULL && next->acl_line > 0)
        snprintf(loc, sizeof loc, "%s:%d", next->path, next->acl_line);
    return refuse(err, errlen,
                  "%s: [acl]: the section has no rule (%s), but %s had %" PRId64
                  ": is the file cut short? Every request would be denied; to deny everything "
                  "on purpose, write the rule `deny * all *`",
                  loc, ends, prev_what, prev->acl_rules);
}

int mqd_conf_guard(const mqd_conf_census_t *prev, const char *prev_what, const mqd_conf_t *next,
                   char *err, size_t errlen)
{
    int rc = guard_users(prev, prev_what, next, err, errlen);
    return rc != 0 ? rc : guard_acl(prev, prev_what, next, err, errlen);
}
