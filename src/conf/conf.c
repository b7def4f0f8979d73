/* conf: reading mqd.conf and --set/--listen into an mqd_conf_t. Every key goes through
 * the table in conf_table.c; this file only knows lines, sections and scopes.
 *
 * A failed load leaves `c` partly updated: callers build a fresh config, load into it
 * and swap it in only on success (that is how SIGHUP reload keeps the old one). */
#include "config.h"
#include "conf/conf_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the list setter relies on `listen` being followed by its count */
_Static_assert(offsetof(mqd_conf_t, n_listen) == offsetof(mqd_conf_t, listen) + sizeof(char **),
               "listen/n_listen layout");

enum { SRC_BUILTIN = 0, SRC_FILE = 1, SRC_CLI = 2 };

/* Where a key line lands: the global part, a topic or user section, or [acl] (rules). */
typedef struct section {
    mqd_conf_scope_t kind; /* MQD_CS_GLOBAL, MQD_CS_TOPIC, MQD_CS_USER or MQD_CS_ACL */
    mqd_topic_conf_t *topic;
    mqd_user_conf_t *user;
    mqd_sas_key_conf_t *sas; /* [sas_key NAME] (conf_sas.c) */
} section_t;

/* Parser state for one file. */
typedef struct parse {
    mqd_conf_t *c;
    const char *file;
    int line;
    section_t sec;
    bool listen_seen; /* first listen of this file replaces the list */
    char **seen;      /* "topic NAME" / "user NAME" sections of this file */
    size_t n_seen;
    char *err;
    size_t errlen;
} parse_t;

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (err != NULL && errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return MQD_EINVAL;
}

/* ---- construction ---- */

static void free_topic(mqd_topic_conf_t *t)
{
    free(t->name);
    free(t->set);
}

static void free_user(mqd_user_conf_t *u)
{
    free(u->name);
    mqd_conf_row_free_fields(MQD_CS_USER, u);
}

static void free_acl(mqd_conf_t *c)
{
    for (size_t i = 0; i < c->n_acl; i++) {
        free(c->acl[i].who);
        free(c->acl[i].pattern);
    }
    free(c->acl);
    c->acl = NULL;
    c->n_acl = 0;
}

void mqd_conf_free(mqd_conf_t *c)
{
    if (c == NULL)
        return;
    free(c->path);
    mqd_conf_origins_free(c);
    free_acl(c);
    mqd_conf_row_free_fields(MQD_CS_GLOBAL, c);
    for (size_t i = 0; i < c->n_topics; i++)
        free_topic(&c->topics[i]);
    free(c->topics);
    free(c->topic_defaults.set);
    free(c->set);
    for (size_t i = 0; i < c->n_cli; i++)
        free(c->cli[i]);
    free(c->cli);
    for (size_t i = 0; i < c->n_users; i++)
        free_user(&c->users[i]);
    free(c->users);
    mqd_conf_sas_free(c);
    free(c);
}

int mqd_conf_new(mqd_conf_t **out)
{
    char why[256];
    int rc = 0;
    mqd_conf_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return MQD_ENOMEM;
    for (size_t i = 0; rc == 0 && i < mqd_conf_nrows; i++) {
        const mqd_conf_row_t *r = &mqd_conf_rows[i];
        if (r->def == NULL || r->scope == MQD_CS_TOPIC || r->scope == MQD_CS_USER ||
            r->scope == MQD_CS_SASKEY)
            continue;
        void *base = r->scope == MQD_CS_GLOBAL ? (void *)c : (void *)&c->topic_defaults;
        rc = mqd_conf_row_apply(r, base, r->def, why, sizeof why);
    }
    if (rc != 0) {
        mqd_conf_free(c);
        return rc == MQD_EINVAL ? MQD_ENOMEM : rc; /* a bad built-in default is a bug */
    }
    c->listen_source = SRC_BUILTIN;
    *out = c;
    return 0;
}

/* ---- sections ---- */

static int valid_name(const char *s)
{
    if (*s == '\0' || strlen(s) > 255)
        return 0;
    for (; *s; s++)
        if (isspace((unsigned char)*s) || *s == '[' || *s == ']' || *s == '#' || *s == '=')
            return 0;
    return 1;
}

static mqd_topic_conf_t *topic_find(const mqd_conf_t *c, const char *name)
{
    for (size_t i = 0; i < c->n_topics; i++)
        if (strcmp(c->topics[i].name, name) == 0)
            return &c->topics[i];
    return NULL;
}

/* Finds or appends a [topic NAME] section (fields zero: only the set bits count). */
static int topic_get(mqd_conf_t *c, const char *name, mqd_topic_conf_t **out)
{
    mqd_topic_conf_t *t = topic_find(c, name);
    if (t == NULL) {
        char *dup = strdup(name);
        mqd_topic_conf_t *grown =
            dup ? realloc(c->topics, (c->n_topics + 1) * sizeof *grown) : NULL;
        if (grown == NULL) {
            free(dup);
            return MQD_ENOMEM;
        }
        c->topics = grown;
        t = &grown[c->n_topics++];
        memset(t, 0, sizeof *t);
        t->name = dup;
    }
    *out = t;
    return 0;
}

static int user_get(mqd_conf_t *c, const char *name, mqd_user_conf_t **out)
{
    for (size_t i = 0; i < c->n_users; i++) {
        if (strcmp(c->users[i].name, name) == 0) {
            *out = &c->users[i];
            return 0;
        }
    }
    char *dup = strdup(name);
    mqd_user_conf_t *grown = dup ? realloc(c->users, (c->n_users + 1) * sizeof *grown) : NULL;
    if (grown == NULL) {
        free(dup);
        return MQD_ENOMEM;
    }
    c->users = grown;
    mqd_user_conf_t *u = &grown[c->n_users++];
    memset(u, 0, sizeof *u);
    u->name = dup;
    *out = u;
    return 0;
}

/* Points sec at the section `kind NAME`; kind is "topic" or "user" (or "acl", no name). */
static int section_open(mqd_conf_t *c, const char *kind, const char *name, section_t *sec,
                        char *why, size_t whylen)
{
    if (strcmp(kind, "acl") == 0 && name[0] == '\0') {
        sec->kind = MQD_CS_ACL;
        sec->topic = NULL;
        sec->user = NULL;
        c->acl_present = true;
        return 0;
    }
    if (!valid_name(name)) {
        snprintf(why, whylen, "invalid name '%s'", name);
        return MQD_EINVAL;
    }
    if (strcmp(kind, "topic") == 0) {
        sec->kind = MQD_CS_TOPIC;
        sec->user = NULL;
        return topic_get(c, name, &sec->topic);
    }
    if (strcmp(kind, "user") == 0) {
        sec->kind = MQD_CS_USER;
        sec->topic = NULL;
        return user_get(c, name, &sec->user);
    }
    if (strcmp(kind, "sas_key") == 0) {
        sec->kind = MQD_CS_SASKEY;
        sec->topic = NULL;
        sec->user = NULL;
        return mqd_conf_sas_get(c, name, &sec->sas);
    }
    snprintf(why, whylen, "unknown section kind '%s' (expected topic, user, sas_key or acl)",
             kind);
    return MQD_EINVAL;
}

/* ---- applying one key ---- */

/* Drops every listener (before a new source's first one). */
static void listen_clear(mqd_conf_t *c)
{
    for (size_t i = 0; i < c->n_listen; i++)
        free(c->listen[i]);
    free(c->listen);
    c->listen = NULL;
    c->n_listen = 0;
}

/* Applies key = val in section sec; *replace_listen says this listen replaces the list. */
static int apply_key(mqd_conf_t *c, const section_t *sec, const char *key, const char *val,
                     bool *replace_listen, char *why, size_t whylen)
{
    const mqd_conf_row_t *r = mqd_conf_row_find(key);
    void *base = NULL;
    if (r == NULL) {
        const char *s = mqd_conf_row_suggest(key);
        if (s != NULL)
            snprintf(why, whylen, "unknown key (did you mean '%s'?)", s);
        else
            snprintf(why, whylen, "unknown key");
        return MQD_EINVAL;
    }
    static const char *const where[] = {
        [MQD_CS_GLOBAL] = "the global part (before any section)",
        [MQD_CS_TOPIC] = "a [topic NAME] section",
        [MQD_CS_USER] = "a [user NAME] section",
        [MQD_CS_ACL] = "the [acl] section",
        [MQD_CS_SASKEY] = "a [sas_key NAME] section",
    };
    if (sec->kind == MQD_CS_GLOBAL && (r->scope == MQD_CS_GLOBAL || r->scope == MQD_CS_BOTH))
        base = r->scope == MQD_CS_GLOBAL ? (void *)c : (void *)&c->topic_defaults;
    else if (sec->kind == MQD_CS_TOPIC && (r->scope == MQD_CS_TOPIC || r->scope == MQD_CS_BOTH))
        base = sec->topic;
    else if (sec->kind == MQD_CS_USER && r->scope == MQD_CS_USER)
        base = sec->user;
    else if (sec->kind == MQD_CS_SASKEY && r->scope == MQD_CS_SASKEY)
        base = sec->sas;
    if (base == NULL) {
        mqd_conf_scope_t only = r->scope == MQD_CS_BOTH ? MQD_CS_GLOBAL : r->scope;
        snprintf(why, whylen, "not allowed in %s; only in %s%s", where[sec->kind], where[only],
                 r->scope == MQD_CS_BOTH ? " or a [topic NAME] section" : "");
        return MQD_EINVAL;
    }
    if (r->type == MQD_CT_LIST && *replace_listen) {
        /* validate before dropping the old list, so a bad value changes nothing */
        if (r->check != NULL && r->check(val, why, whylen) != 0)
            return MQD_EINVAL;
        listen_clear(c);
        *replace_listen = false;
    }
    int rc = mqd_conf_row_apply(r, base, val, why, whylen);
    /* the flags belong to a config's sections; a loose copy (mqd_conf_topic_setting, c
     * NULL) is complete as it is and records none, so it owns nothing to free */
    size_t row = (size_t)(r - mqd_conf_rows);
    if (rc == 0 && c != NULL && base == (void *)c)
        rc = mqd_conf_bits_set(&c->set, row);
    else if (rc == 0 && c != NULL && (sec->kind == MQD_CS_GLOBAL || sec->kind == MQD_CS_TOPIC))
        rc = mqd_conf_bits_set(&((mqd_topic_conf_t *)base)->set, row);
    if (rc == MQD_ENOMEM)
        snprintf(why, whylen, "out of memory");
    return rc;
}

/* ---- the file ---- */

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Cuts a trailing comment: '#' at the start or after whitespace (values such as
 * password hashes may contain '#' inside a word). */
static void cut_comment(char *s)
{
    for (char *p = s; *p; p++) {
        if (*p == '#' && (p == s || p[-1] == ' ' || p[-1] == '\t')) {
            *p = '\0';
            return;
        }
    }
}

static int parse_section(parse_t *ps, char *text)
{
    char why[256], label[300];
    size_t n = strlen(text);
    if (text[n - 1] != ']')
        return fail(ps->err, ps->errlen,
                    "%s:%d: %s: expected [topic NAME], [user NAME], [sas_key NAME] or [acl]",
                    ps->file, ps->line, text);
    text[n - 1] = '\0';
    char *inner = trim(text + 1);
    char *name = inner + strcspn(inner, " \t");
    if (*name != '\0')
        *name++ = '\0';
    name = trim(name);
    if (strcmp(inner, "acl") == 0 && name[0] == '\0')
        snprintf(label, sizeof label, "[acl]");
    else
        snprintf(label, sizeof label, "[%s %s]", inner, name);
    for (size_t i = 0; i < ps->n_seen; i++)
        if (strcmp(ps->seen[i], label) == 0)
            return fail(ps->err, ps->errlen, "%s:%d: %s: duplicate section", ps->file, ps->line,
                        label);
    int rc = section_open(ps->c, inner, name, &ps->sec, why, sizeof why);
    if (rc != 0)
        return rc == MQD_EINVAL
                   ? fail(ps->err, ps->errlen, "%s:%d: %s: %s", ps->file, ps->line, label, why)
                   : rc;
    if (ps->sec.kind == MQD_CS_ACL)
        ps->c->acl_line = ps->line;
    char *dup = strdup(label);
    char **grown = dup ? realloc(ps->seen, (ps->n_seen + 1) * sizeof *grown) : NULL;
    if (grown == NULL) {
        free(dup);
        return MQD_ENOMEM;
    }
    ps->seen = grown;
    ps->seen[ps->n_seen++] = dup;
    return 0;
}

/* Splits off the next blank-separated word of *p (NULL when none is left). */
static char *next_word(char **p)
{
    char *w = *p + strspn(*p, " \t");
    if (*w == '\0')
        return NULL;
    char *end = w + strcspn(w, " \t");
    if (*end != '\0')
        *end++ = '\0';
    *p = end;
    return w;
}

/* The [acl] right names, in the bit order of mqd_perm_t (auth/auth.h). */
static const char *const perm_words[] = {"send",   "receive", "browse",
                                         "manage", "create",  "monitor"};

size_t mqd_conf_perm_names(unsigned bits, const char **out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < MQD_ARRAY_LEN(perm_words) && n < max; i++)
        if (bits & (1u << i))
            out[n++] = perm_words[i];
    return n;
}

int mqd_conf_parse_perms(const char *s, unsigned *out)
{
    const char *const *words = perm_words;
    unsigned bits = 0;
    const char *p = s;
    while (*p != '\0') {
        size_t n = strcspn(p, ",");
        bool known = n == 3 && strncmp(p, "all", 3) == 0;
        if (known)
            bits |= MQD_CONF_PERM_ALL;
        for (size_t i = 0; !known && i < MQD_ARRAY_LEN(perm_words); i++) {
            if (strlen(words[i]) == n && strncmp(p, words[i], n) == 0) {
                bits |= 1u << i; /* the order of mqd_perm_t */
                known = true;
            }
        }
        if (!known)
            return MQD_EINVAL;
        p += n;
        if (*p == ',' && *++p == '\0')
            return MQD_EINVAL;
    }
    if (bits == 0)
        return MQD_EINVAL;
    *out = bits;
    return 0;
}

/* An [acl] line: `allow|deny WHO PERMS PATTERN`, kept in file order (first match wins). */
static int parse_acl_line(parse_t *ps, char *s)
{
    char *p = s;
    char *verb = next_word(&p), *who = next_word(&p), *perms = next_word(&p);
    char *pat = next_word(&p), *extra = next_word(&p);
    unsigned bits = 0;
    if (verb == NULL || pat == NULL || extra != NULL ||
        (strcmp(verb, "allow") != 0 && strcmp(verb, "deny") != 0))
        return fail(ps->err, ps->errlen,
                    "%s:%d: [acl]: expected 'allow|deny USER|@GROUP|* PERMS PATTERN'", ps->file,
                    ps->line);
    if (mqd_conf_parse_perms(perms, &bits) != 0)
        return fail(ps->err, ps->errlen,
                    "%s:%d: [acl]: '%s': expected send, receive, browse, manage, create, monitor or all "
                    "(comma-separated)",
                    ps->file, ps->line, perms);
    if (!valid_name(who[0] == '@' ? who + 1 : who))
        return fail(ps->err, ps->errlen, "%s:%d: [acl]: invalid name '%s'", ps->file, ps->line,
                    who);
    mqd_conf_t *c = ps->c;
    mqd_acl_rule_t *grown = realloc(c->acl, (c->n_acl + 1) * sizeof *grown);
    if (grown == NULL)
        return MQD_ENOMEM;
    c->acl = grown;
    mqd_acl_rule_t *r = &grown[c->n_acl];
    r->allow = verb[0] == 'a';
    r->perms = bits;
    r->who = strdup(who);
    r->pattern = strdup(pat);
    if (r->who == NULL || r->pattern == NULL) {
        free(r->who);
        free(r->pattern);
        return MQD_ENOMEM;
    }
    c->n_acl++;
    return 0;
}

/* For config show: global and [topic NAME] keys (users and SAS keys are not shown). */
static int note_origin(mqd_conf_t *c, const section_t *sec, const char *key, const char *file,
                       int line)
{
    char src[4096 + 16];
    if (sec->kind != MQD_CS_GLOBAL && sec->kind != MQD_CS_TOPIC)
        return 0;
    if (file)
        snprintf(src, sizeof src, "%s:%d", file, line);
    return mqd_conf_origin_note(c, sec->kind == MQD_CS_TOPIC ? sec->topic->name : NULL, key,
                                file ? src : "--set");
}

static int parse_line(parse_t *ps, char *raw)
{
    char why[512];
    cut_comment(raw);
    char *s = trim(raw);
    if (*s == '\0')
        return 0;
    if (*s == '[')
        return parse_section(ps, s);
    if (ps->sec.kind == MQD_CS_ACL)
        return parse_acl_line(ps, s);
    char *eq = strchr(s, '=');
    if (eq == NULL) {
        s[strcspn(s, " \t")] = '\0';
        return fail(ps->err, ps->errlen, "%s:%d: %s: expected 'key = value'", ps->file, ps->line,
                    s);
    }
    *eq = '\0';
    char *key = trim(s), *val = trim(eq + 1);
    bool replace = !ps->listen_seen;
    int rc = apply_key(ps->c, &ps->sec, key, val, &replace, why, sizeof why);
    if (rc != 0)
        return fail(ps->err, ps->errlen, "%s:%d: %s: %s", ps->file, ps->line, key, why);
    rc = note_origin(ps->c, &ps->sec, key, ps->file, ps->line);
    if (rc != 0)
        return fail(ps->err, ps->errlen, "%s:%d: %s: out of memory", ps->file, ps->line, key);
    if (strcmp(key, "listen") == 0)
        ps->listen_seen = true;
    if (strcmp(key, "cluster") == 0) /* validate names this line when node_id is missing */
        ps->c->cluster_line = ps->line;
    return 0;
}

int mqd_conf_load_file(mqd_conf_t *c, const char *path, char *err, size_t errlen)
{
    parse_t ps = {
        .c = c, .file = path, .sec = {MQD_CS_GLOBAL, NULL, NULL}, .err = err, .errlen = errlen};
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fail(err, errlen, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? MQD_ENOENT : MQD_EINVAL;
    }
    while (rc == 0 && getline(&line, &cap, f) >= 0) {
        ps.line++;
        rc = parse_line(&ps, line);
    }
    if (rc == 0 && ferror(f))
        rc = fail(err, errlen, "%s: read error", path);
    if (rc == 0 && ps.listen_seen)
        c->listen_source = SRC_FILE;
    if (rc == 0)
        c->file_lines = ps.line;
    if (rc == 0) {
        char *dup = strdup(path);
        if (dup == NULL)
            rc = MQD_ENOMEM;
        else {
            free(c->path);
            c->path = dup;
        }
    }
    fclose(f);
    free(line);
    for (size_t i = 0; i < ps.n_seen; i++)
        free(ps.seen[i]);
    free(ps.seen);
    return rc;
}

/* ---- command line ---- */

/* Keeps a command-line item for reload to apply again (kind 'l' --listen, 's' --set). */
static int cli_record(mqd_conf_t *c, char kind, const char *item)
{
    size_t n = strlen(item);
    char *dup = malloc(n + 2);
    char **grown = dup ? realloc(c->cli, (c->n_cli + 1) * sizeof *grown) : NULL;
    if (grown == NULL) {
        free(dup);
        return MQD_ENOMEM;
    }
    dup[0] = kind;
    memcpy(dup + 1, item, n + 1);
    c->cli = grown;
    c->cli[c->n_cli++] = dup;
    return 0;
}

int mqd_conf_replay_cli(mqd_conf_t *c, char *const *items, size_t n, char *err, size_t errlen)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = items[i][0] == 'l' ? mqd_conf_add_listen(c, items[i] + 1, err, errlen)
                                : mqd_conf_set(c, items[i] + 1, err, errlen);
    return rc;
}

int mqd_conf_add_listen(mqd_conf_t *c, const char *hostport, char *err, size_t errlen)
{
    char why[256];
    section_t glob = {MQD_CS_GLOBAL, NULL, NULL, NULL};
    bool replace = c->listen_source != SRC_CLI;
    int rc = apply_key(c, &glob, "listen", hostport, &replace, why, sizeof why);
    if (rc != 0)
        return fail(err, errlen, "--listen: %s", why), rc;
    if ((rc = mqd_conf_origin_note(c, NULL, "listen", "--listen")) != 0)
        return fail(err, errlen, "--listen: out of memory"), rc;
    c->listen_source = SRC_CLI;
    return cli_record(c, 'l', hostport);
}

/* Splits "topic.NAME.KEY" / "user.NAME.KEY" (NAME may hold dots: KEY is after the last). */
static int split_section_key(char *k, section_t *sec, mqd_conf_t *c, const char **key, char *why,
                             size_t whylen)
{
    char *dot = strchr(k, '.');
    char *last = strrchr(k, '.');
    if (dot == NULL) {
        *key = k;
        return 0;
    }
    if (dot == last) {
        snprintf(why, whylen, "expected KEY, topic.NAME.KEY or user.NAME.KEY");
        return MQD_EINVAL;
    }
    *dot = '\0';
    *last = '\0';
    *key = last + 1;
    return section_open(c, k, dot + 1, sec, why, whylen);
}

int mqd_conf_set(mqd_conf_t *c, const char *key_eq_value, char *err, size_t errlen)
{
    return mqd_conf_set_from(c, key_eq_value, "--set", err, errlen);
}

int mqd_conf_set_from(mqd_conf_t *c, const char *key_eq_value, const char *source, char *err,
                      size_t errlen)
{
    char why[512];
    char *copy = strdup(key_eq_value);
    int rc = MQD_ENOMEM;
    if (copy == NULL)
        goto out;
    char *eq = strchr(copy, '=');
    if (eq == NULL) {
        rc = fail(err, errlen, "--set: %s: expected KEY=VALUE", trim(copy));
        goto out;
    }
    *eq = '\0';
    char *full = trim(copy), *val = trim(eq + 1);
    char label[300];
    snprintf(label, sizeof label, "%s", full);
    section_t sec = {MQD_CS_GLOBAL, NULL, NULL, NULL};
    const char *key = full;
    rc = split_section_key(full, &sec, c, &key, why, sizeof why);
    bool replace = c->listen_source != SRC_CLI;
    if (rc == 0)
        rc = apply_key(c, &sec, key, val, &replace, why, sizeof why);
    if (rc == 0 && strcmp(key, "listen") == 0)
        c->listen_source = SRC_CLI;
    if (rc == 0)
        rc = cli_record(c, 's', key_eq_value);
    if (rc == 0 && (sec.kind == MQD_CS_GLOBAL || sec.kind == MQD_CS_TOPIC))
        rc = mqd_conf_origin_note(c, sec.kind == MQD_CS_TOPIC ? sec.topic->name : NULL, key,
                                  source);
    if (rc == MQD_ENOMEM)
        fail(err, errlen, "--set: %s: out of memory", label);
    if (rc == MQD_EINVAL)
        fail(err, errlen, "--set: %s: %s", label, why);
out:
    free(copy);
    return rc;
}

int mqd_conf_topic_setting(mqd_topic_conf_t *tc, const char *key, const char *val, char *err,
                           size_t errlen)
{
    char why[512];
    section_t sec = {MQD_CS_TOPIC, tc, NULL, NULL};
    bool replace = false;
    /* the file's own key lookup and value parsers: the same units, bounds and reasons */
    int rc = apply_key(NULL, &sec, key, val, &replace, why, sizeof why);
    if (rc == MQD_EINVAL)
        fail(err, errlen, "%s: %s", key, why);
    return rc;
}

/* ---- queries ---- */

void mqd_conf_topic(const mqd_conf_t *c, const char *topic, mqd_topic_conf_t *out)
{
    const mqd_topic_conf_t *sec = topic ? topic_find(c, topic) : NULL;
    mqd_topic_conf_t t = c->topic_defaults;
    t.name = NULL;
    t.set = NULL;
    t.partitions = c->default_partitions;
    for (size_t i = 0; sec != NULL && i < mqd_conf_nrows; i++) {
        const mqd_conf_row_t *r = &mqd_conf_rows[i];
        if (mqd_conf_bits_get(sec->set, i))
            memcpy((char *)&t + r->off, (const char *)sec + r->off, r->width);
    }
    if (sec != NULL) {
        t.name = sec->name;
        t.set = sec->set; /* borrowed, like the name */
    }
    *out = t;
}

bool mqd_conf_key_is_set(const mqd_conf_t *c, const char *topic, const char *key)
{
    const mqd_conf_row_t *r = mqd_conf_row_find(key);
    if (r == NULL)
        return false;
    size_t row = (size_t)(r - mqd_conf_rows);
    if (topic != NULL) {
        const mqd_topic_conf_t *sec = topic_find(c, topic);
        return sec != NULL && mqd_conf_bits_get(sec->set, row);
    }
    if (r->scope == MQD_CS_GLOBAL)
        return mqd_conf_bits_get(c->set, row);
    return r->scope == MQD_CS_BOTH && mqd_conf_bits_get(c->topic_defaults.set, row);
}

const mqd_user_conf_t *mqd_conf_user(const mqd_conf_t *c, const char *name)
{
    for (size_t i = 0; name != NULL && i < c->n_users; i++)
        if (strcmp(c->users[i].name, name) == 0)
            return &c->users[i];
    return NULL;
}

/* TLS listeners need a certificate and key; client verification needs a CA. */
static int validate_tls(const mqd_conf_t *c, const char *src, char *err, size_t errlen)
{
    bool any_tls = false;
    for (size_t i = 0; i < c->n_listen; i++)
        any_tls = any_tls || mqd_conf_listen_is_tls(c->listen[i]);
    if (any_tls && (c->tls_cert == NULL || c->tls_key == NULL))
        return fail(err, errlen, "%s: listen: an amqps:// listener needs tls_cert and tls_key",
                    src);
    if (c->tls_verify_client != MQD_TLS_VERIFY_NONE && c->tls_ca == NULL)
        return fail(err, errlen, "%s: tls_verify_client: %s needs tls_ca", src,
                    c->tls_verify_client == MQD_TLS_VERIFY_REQUIRED ? "required" : "optional");
    return 0;
}

int mqd_conf_validate(const mqd_conf_t *c, char *err, size_t errlen)
{
    const char *src = c->path ? c->path : "configuration";
    if (c->n_listen == 0)
        return fail(err, errlen, "%s: listen: at least one listener is needed", src);
    if (c->data_dir == NULL || c->data_dir[0] == '\0')
        return fail(err, errlen, "%s: data_dir: must be set", src);
    for (size_t i = 0; i < c->n_users; i++) {
        const mqd_user_conf_t *u = &c->users[i];
        /* a user needs a way to log in: a password, SCRAM credentials or a certificate */
        if (u->password_hash == NULL && u->scram_sha256 == NULL && u->cert_cn == NULL)
            return fail(err, errlen, "%s: [user %s]: password_hash: missing", src, u->name);
    }
    int rc = validate_tls(c, src, err, errlen);
    if (rc == 0)
        rc = mqd_conf_validate_sas(c, src, err, errlen);
    if (rc != 0)
        return rc;
    if (c->metrics_listen != NULL) {
        for (size_t i = 0; i < c->n_listen; i++)
            if (strcmp(c->metrics_listen, c->listen[i]) == 0)
                return fail(err, errlen, "%s: metrics_listen: %s is also an AMQP listener", src,
                            c->metrics_listen);
    }
    if (c->console_listen != NULL && *c->console_listen) {
        for (size_t i = 0; i < c->n_listen; i++)
            if (strcmp(c->console_listen, c->listen[i]) == 0)
                return fail(err, errlen, "%s: console_listen: %s is also an AMQP listener", src,
                            c->console_listen);
        if (c->metrics_listen && strcmp(c->console_listen, c->metrics_listen) == 0)
            return fail(err, errlen, "%s: console_listen: %s is also metrics_listen", src,
                        c->console_listen);
    }
    if ((rc = mqd_conf_validate_cluster(c, src, err, errlen)) != 0)
        return rc;
    if (c->max_connection_memory && c->max_connection_memory < c->max_message_size)
        MQD_WARN("conf",
                 "%s: max_connection_memory (%llu) is below max_message_size (%llu): a "
                 "connection sending a message that large is closed",
                 src, (unsigned long long)c->max_connection_memory,
                 (unsigned long long)c->max_message_size);
    if (!c->allow_anonymous && c->n_users == 0)
        MQD_WARN("conf",
                 "%s: allow_anonymous is off and no [user NAME] section exists: no "
                 "client can log in (add one with mqd-passwd)",
                 src);
    return 0;
}

/* ---- value checks used by the table ---- */

bool mqd_conf_listen_is_tls(const char *listen)
{
    return listen != NULL && strncmp(listen, "amqps://", 8) == 0;
}

int mqd_conf_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port)
{
    if (strncmp(s, "amqps://", 8) == 0)
        s += 8;
    else if (strncmp(s, "amqp://", 7) == 0)
        s += 7;
    const char *colon, *h = s;
    size_t hl;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (close == NULL || close[1] != ':')
            return MQD_EINVAL;
        h = s + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL || memchr(s, ':', (size_t)(colon - s)) != NULL)
            return MQD_EINVAL; /* no port, or an IPv6 address without brackets */
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= hostlen || hl >= 256)
        return MQD_EINVAL;
    char *end = NULL;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (!isdigit((unsigned char)colon[1]) || *end != '\0' || errno != 0 || p > 65535)
        return MQD_EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (uint16_t)p;
    return 0;
}

int mqd_conf_check_hostport(const char *v, char *why, size_t whylen)
{
    char host[256];
    uint16_t port;
    if (mqd_conf_parse_hostport(v, host, sizeof host, &port) == 0)
        return 0;
    snprintf(why, whylen, "expected HOST:PORT or [IPV6]:PORT, got '%s'", v);
    return MQD_EINVAL;
}

int mqd_conf_check_hostport_or_empty(const char *v, char *why, size_t whylen)
{
    return v[0] == '\0' ? 0 : mqd_conf_check_hostport(v, why, whylen);
}

int mqd_conf_check_nonempty(const char *v, char *why, size_t whylen)
{
    if (v[0] != '\0')
        return 0;
    snprintf(why, whylen, "must not be empty");
    return MQD_EINVAL;
}
