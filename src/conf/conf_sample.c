/* The sample config (etc/mqd.conf) and the key reference of mqd.conf(5), both written
 * from the table so neither can drift from what the parser accepts. */
#include "config.h"
#include "conf/conf_int.h"

#include <stdio.h>
#include <string.h>

#define WRAP 88

static const char *const scope_doc[] = {
    [MQD_CS_GLOBAL] = "global part only",
    [MQD_CS_TOPIC] = "[topic NAME] sections only",
    [MQD_CS_BOTH] = "global part (default for every topic) or [topic NAME]",
    [MQD_CS_USER] = "[user NAME] sections only",
    [MQD_CS_ACL] = "the [acl] section",
    [MQD_CS_SASKEY] = "[sas_key NAME] sections only",
};

/* Writes text word-wrapped, each line starting with prefix. */
static void wrap(FILE *f, const char *prefix, const char *text)
{
    size_t col = 0;
    const char *p = text;
    while (*p != '\0') {
        size_t w = strcspn(p, " ");
        if (col > 0 && col + 1 + w > WRAP) {
            fputc('\n', f);
            col = 0;
        }
        if (col == 0) {
            fputs(prefix, f);
            col = strlen(prefix);
        } else {
            fputc(' ', f);
            col++;
        }
        fwrite(p, 1, w, f);
        col += w;
        p += w;
        while (*p == ' ')
            p++;
    }
    if (col > 0)
        fputc('\n', f);
}

static void sample_row(FILE *f, const mqd_conf_row_t *r)
{
    char desc[128];
    mqd_conf_row_describe(r, desc, sizeof desc);
    fprintf(f, "\n# %s: %s; default %s\n", r->name, desc, mqd_conf_row_default_doc(r));
    wrap(f, "#   ", r->help);
    if (r->sample != NULL)
        fprintf(f, "%s = %s\n", r->name, r->sample);
    else if (r->def != NULL && r->scope != MQD_CS_USER && r->scope != MQD_CS_SASKEY)
        fprintf(f, "#%s =%s%s\n", r->name, r->def[0] ? " " : "", r->def);
}

/* intro is wrapped; example is printed as it is (commented-out config lines). */
static void sample_part(FILE *f, mqd_conf_scope_t scope, const char *title, const char *intro,
                        const char *example)
{
    fprintf(f, "\n# ======== %s ========\n", title);
    if (intro != NULL)
        wrap(f, "# ", intro);
    if (example != NULL)
        fputs(example, f);
    for (size_t i = 0; i < mqd_conf_nrows; i++)
        if (mqd_conf_rows[i].scope == scope)
            sample_row(f, &mqd_conf_rows[i]);
}

int mqd_conf_write_sample(FILE *f)
{
    fputs("# mqd.conf: configuration of the mqd AMQP 1.0 broker. See mqd.conf(5).\n"
          "#\n"
          "# Generated from the key table (src/conf/conf_table.c) by `make regen-conf`;\n"
          "# a unit test fails if this file and the table differ.\n"
          "#\n"
          "# Format: `key = value`; `#` starts a comment. Sizes take KiB, MiB, GiB (or k, M, G);\n"
          "# durations take ms, s, m, h, d (a bare number is milliseconds); booleans take\n"
          "# on/off. A commented-out key (`#key = value`) shows its built-in default; the\n"
          "# section templates (`# key = value`, with a blank) are examples.\n",
          f);
    sample_part(f, MQD_CS_GLOBAL, "server", NULL, NULL);
    sample_part(f, MQD_CS_BOTH, "topic defaults",
                "These apply to every topic; a [topic NAME] section overrides them for one "
                "topic.",
                NULL);
    sample_part(f, MQD_CS_TOPIC, "per-topic sections",
                "A [topic NAME] section takes the keys below and any topic default above, "
                "for example:",
                "#\n# [topic orders]\n# partitions = 8\n# flush = async\n# retention_ms = 3d\n");
    sample_part(f, MQD_CS_USER, "users",
                "With allow_anonymous = off, clients log in as a user listed here: SASL "
                "SCRAM-SHA-256 (scram_sha256), PLAIN (password_hash; on plain TCP only with "
                "allow_plain_without_tls = on) or EXTERNAL with a client certificate over TLS "
                "(cert_cn). Sections go after the global part. To add a user, run",
                "#\n#   mqd-passwd alice >> /etc/mqd.conf\n#\n# which reads a password and "
                "appends\n#\n# [user alice]\n# password_hash = pbkdf2-sha256$100000$...$...\n"
                "# scram_sha256 = 4096$...$...$...\n");
    sample_part(f, MQD_CS_SASKEY, "SAS keys",
                "Event Hubs clients (SharedAccessKeyName / SharedAccessKey in the connection "
                "string) sign SAS tokens with one of these keys and send them to $cbs; see "
                "sas_required. To add a key, run",
                "#\n#   mqd-passwd --sas RootManageSharedAccessKey >> /etc/mqd.conf\n#\n# which "
                "appends\n#\n# [sas_key RootManageSharedAccessKey]\n# key = ...\n"
                "# rights = send,listen,manage\n# scope = *\n");
    fputs("\n# ======== access control ========\n", f);
    wrap(f, "# ",
         "Without an [acl] section every authenticated client may do everything. With one, "
         "its rules are tried in order and the first whose WHO, PERMS and PATTERN match "
         "decides; when none matches, the request is denied. A rule is `allow|deny WHO PERMS "
         "PATTERN`: WHO is a user, @GROUP (a user's groups key) or * (anyone, anonymous "
         "included); PERMS is all or a comma-separated list of send, receive, browse, manage, "
         "create and monitor (read-only web console and API: docs/console.md); PATTERN is a topic name where * matches any run of characters (orders, "
         "orders.*, logs/*, *). Reloadable (SIGHUP). A config that drops every rule while the "
         "previous one had some is refused as a file cut short (see allow_no_users): to allow "
         "everything on purpose, keep the section with the rule `allow * all *`. For "
         "example:");
    fputs("#\n# [acl]\n# allow @ops all *\n# allow alice send,receive orders.*\n"
          "# deny * all *\n",
          f);
    return ferror(f) ? MQD_EIO : 0;
}

/* troff: escape backslashes; a line must not start with '.' or '\''. */
static void man_text(FILE *f, const char *s)
{
    if (*s == '.' || *s == '\'')
        fputs("\\&", f);
    for (; *s; s++) {
        if (*s == '\\')
            fputs("\\e", f);
        else if (*s == '-')
            fputs("\\-", f);
        else
            fputc(*s, f);
    }
    fputc('\n', f);
}

int mqd_conf_write_man_keys(FILE *f)
{
    static const mqd_conf_scope_t order[] = {MQD_CS_GLOBAL, MQD_CS_BOTH, MQD_CS_TOPIC, MQD_CS_USER,
                                             MQD_CS_SASKEY};
    static const char *const titles[] = {"Server keys", "Topic keys", "Topic section keys",
                                         "User section keys", "SAS key section keys"};
    char desc[128], line[512];
    for (size_t s = 0; s < MQD_ARRAY_LEN(order); s++) {
        fprintf(f, ".SS %s\n", titles[s]);
        for (size_t i = 0; i < mqd_conf_nrows; i++) {
            const mqd_conf_row_t *r = &mqd_conf_rows[i];
            if (r->scope != order[s])
                continue;
            mqd_conf_row_describe(r, desc, sizeof desc);
            fprintf(f, ".TP\n.B %s\n", r->name);
            snprintf(line, sizeof line, "%s; default %s; %s.", desc, mqd_conf_row_default_doc(r),
                     scope_doc[r->scope]);
            man_text(f, line);
            fputs(".br\n", f);
            man_text(f, r->help);
        }
    }
    return ferror(f) ? MQD_EIO : 0;
}

size_t mqd_conf_key_count(void)
{
    return mqd_conf_nrows;
}

const char *mqd_conf_key_name(size_t i)
{
    return i < mqd_conf_nrows ? mqd_conf_rows[i].name : NULL;
}
