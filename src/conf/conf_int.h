/* conf internals: the key table and its value parsers (conf_table.c), shared by the
 * file parser (conf.c) and the sample/man generators (conf_sample.c). */
#ifndef MQD_CONF_INT_H
#define MQD_CONF_INT_H

#include "conf/conf.h"

typedef enum {
    MQD_CT_BOOL,     /* on/off, yes/no, true/false, 1/0 */
    MQD_CT_UINT,     /* plain whole number */
    MQD_CT_SIZE,     /* bytes, with optional k/M/G/T or KiB/MiB/GiB/TiB (all powers of 1024) */
    MQD_CT_DURATION, /* milliseconds, with optional ms/s/m/h/d */
    MQD_CT_ENUM,     /* one of row->names; stored as its index */
    MQD_CT_STRING,   /* char *, owned by the struct */
    MQD_CT_LIST,     /* char ** + count (listen only): the key repeats */
} mqd_conf_type_t;

typedef enum {
    MQD_CS_GLOBAL, /* global part only; field in mqd_conf_t */
    MQD_CS_TOPIC,  /* [topic NAME] sections only; field in mqd_topic_conf_t */
    MQD_CS_BOTH,   /* global part (default for every topic) and [topic NAME]; mqd_topic_conf_t */
    MQD_CS_USER,   /* [user NAME] sections only; field in mqd_user_conf_t */
    MQD_CS_ACL,    /* the [acl] section: rule lines, no keys (never a row's scope) */
    MQD_CS_SASKEY, /* [sas_key NAME] sections only; field in mqd_sas_key_conf_t */
} mqd_conf_scope_t;

typedef struct mqd_conf_row {
    const char *name;
    mqd_conf_type_t type;
    mqd_conf_scope_t scope;
    uint64_t min, max;        /* bounds for UINT/SIZE/DURATION, in bytes/ms */
    const char *def;          /* built-in default as text (parsed like the file); NULL: none */
    const char *def_doc;      /* how the docs state the default when `def` is not literal */
    const char *sample;       /* value set (uncommented) in the installed sample, or NULL */
    size_t off;               /* offsetof the field in the struct `scope` names */
    size_t width;             /* sizeof that field (1, 4 or 8 for numbers) */
    const char *const *names; /* ENUM: NULL-terminated value names, index = stored value */
    /* STRING/LIST: extra validation; writes a reason into why on failure. */
    int (*check)(const char *v, char *why, size_t whylen);
    const char *help;
    bool reloadable; /* SIGHUP applies it to the running broker; others need a restart.
                        Topic and sas_key rows: never, user rows: always (conf_swap.c
                        takes those sections whole; test_conf_swap checks it) */
} mqd_conf_row_t;

/* The table (conf_table.c). Row index i is bit i % 64 of word i / 64 of a `set` bitmap
 * (mqd_conf_t.set, mqd_topic_conf_t.set), allocated with mqd_conf_bits_words() words. */
extern const mqd_conf_row_t mqd_conf_rows[];
extern const size_t mqd_conf_nrows;

/* Set flags, one bit per row (conf_bits.c): the bitmap is allocated at the first set
 * and grows with the table, so adding rows needs no limit raised. */
size_t mqd_conf_bits_words(void);
int mqd_conf_bits_set(uint64_t **bits, size_t row);
bool mqd_conf_bits_get(const uint64_t *bits, size_t row);
/* Exchanges bit `row` of *a and *b (reload carries a restart-only row's flag over). */
int mqd_conf_bits_swap(uint64_t **a, uint64_t **b, size_t row);

/* Applies command-line items (mqd_conf_t.cli) to c, recording them in c->cli again. */
int mqd_conf_replay_cli(mqd_conf_t *c, char *const *items, size_t n, char *err, size_t errlen);
/* True if row r's field is equal in the structs a and b (of r's scope; conf_reload.c). */
bool mqd_conf_row_equal(const mqd_conf_row_t *r, const void *a, const void *b);

/* The row named `name` (exact), or NULL. */
const mqd_conf_row_t *mqd_conf_row_find(const char *name);
/* The known key closest to `name` by edit distance, or NULL if none is close. */
const char *mqd_conf_row_suggest(const char *name);
/* Parses `val` for `r` and stores it in the struct at `base` (a list appends). On
 * failure returns MQD_EINVAL and writes the reason (no key, no location) to why. */
int mqd_conf_row_apply(const mqd_conf_row_t *r, void *base, const char *val, char *why,
                       size_t whylen);
/* Frees the owned string/list fields of table rows of `scope` in `base`. */
void mqd_conf_row_free_fields(mqd_conf_scope_t scope, void *base);
/* Formats a number of row r's type as config text ("16MiB", "7d", "1000"). */
void mqd_conf_row_fmt(const mqd_conf_row_t *r, uint64_t v, char *buf, size_t len);
/* Describes r's type and values: "on | off", "sync | async", "size 4KiB..2GiB". */
void mqd_conf_row_describe(const mqd_conf_row_t *r, char *buf, size_t len);
/* The default as the docs state it. */
const char *mqd_conf_row_default_doc(const mqd_conf_row_t *r);

/* conf_show.c: notes that `key` (in section `topic`, NULL: global) came from `source`
 * (copied); c NULL notes nothing. Frees the notes. */
int mqd_conf_origin_note(mqd_conf_t *c, const char *topic, const char *key, const char *source);
void mqd_conf_origins_free(mqd_conf_t *c);

/* Validation hooks used by the table (conf.c / conf_pass.c). */
int mqd_conf_check_hostport(const char *v, char *why, size_t whylen);
int mqd_conf_check_hostport_or_empty(const char *v, char *why, size_t whylen);
int mqd_conf_check_nonempty(const char *v, char *why, size_t whylen);
int mqd_conf_check_password_hash(const char *v, char *why, size_t whylen);
int mqd_conf_check_scram(const char *v, char *why, size_t whylen);
/* cluster keys (conf_cluster.c) */
int mqd_conf_check_etcd_endpoints(const char *v, char *why, size_t whylen);
int mqd_conf_check_cluster_name(const char *v, char *why, size_t whylen);
int mqd_conf_validate_cluster(const mqd_conf_t *c, const char *src, char *err, size_t errlen);
/* [sas_key NAME] sections (conf_sas.c): find or add one; free them all; cross-checks
 * (a key is required, rights must parse, sas_required = off on a non-loopback listener
 * is logged: see mqd_conf_sas_lenient). */
int mqd_conf_sas_get(mqd_conf_t *c, const char *name, mqd_sas_key_conf_t **out);
void mqd_conf_sas_free(mqd_conf_t *c);
int mqd_conf_validate_sas(const mqd_conf_t *c, const char *src, char *err, size_t errlen);
int mqd_conf_check_sas_rights(const char *v, char *why, size_t whylen);

#endif
