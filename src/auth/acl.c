/* ACL matching: the [acl] rules of the config, first match wins. Pure functions of the
 * rules, so the unit tests need no server. */
#include "config.h"
#include "auth/auth_int.h"

#include <string.h>

bool mqd_acl_match(const char *pattern, const char *s)
{
    /* iterative glob with one backtrack point: linear enough for short topic names and
     * no recursion an attacker-chosen address could deepen */
    const char *star = NULL, *resume = NULL;
    while (*s) {
        if (*pattern == '*') {
            star = pattern++;
            resume = s;
        } else if (*pattern == *s) {
            pattern++;
            s++;
        } else if (star) {
            pattern = star + 1;
            s = ++resume;
        } else {
            return false;
        }
    }
    while (*pattern == '*')
        pattern++;
    return *pattern == '\0';
}

bool mqd_acl_in_groups(const char *groups, const char *group)
{
    size_t gl = strlen(group);
    const char *p = groups;
    while (p && *p) {
        p += strspn(p, " \t,");
        size_t n = strcspn(p, ",");
        size_t t = n;
        while (t > 0 && (p[t - 1] == ' ' || p[t - 1] == '\t'))
            t--;
        if (t == gl && gl > 0 && strncmp(p, group, gl) == 0)
            return true;
        p += n;
    }
    return false;
}

static bool who_matches(const char *who, const char *user, const char *groups)
{
    if (strcmp(who, "*") == 0)
        return true;
    if (user == NULL || user[0] == '\0')
        return false; /* a named rule never covers an anonymous client */
    if (who[0] == '@')
        return groups != NULL && mqd_acl_in_groups(groups, who + 1);
    return strcmp(who, user) == 0;
}

bool mqd_acl_check(const mqd_acl_rule_t *rules, size_t n, bool acl_present, const char *user,
                   const char *groups, unsigned perm, const char *address)
{
    if (!acl_present)
        return true;
    if (address == NULL)
        address = "";
    for (size_t i = 0; i < n; i++) {
        const mqd_acl_rule_t *r = &rules[i];
        if ((r->perms & perm) == perm && who_matches(r->who, user, groups) &&
            mqd_acl_match(r->pattern, address))
            return r->allow;
    }
    return false;
}

bool mqd_acl_grants_any(const mqd_acl_rule_t *rules, size_t n, bool acl_present, const char *user,
                        const char *groups, unsigned perm)
{
    if (!acl_present)
        return true;
    for (size_t i = 0; i < n; i++) {
        const mqd_acl_rule_t *r = &rules[i];
        if (r->allow && (r->perms & perm) == perm && who_matches(r->who, user, groups))
            return true;
    }
    return false;
}
