/* selector: compiles a JMS message selector into a postfix program and runs it against
 * encoded messages.
 *
 * The text is untrusted: the parser is recursive descent with an explicit depth counter,
 * and emits postfix ops as it goes, recording the deepest value stack the program can
 * need; matching is then one loop over the ops with a fixed stack, so a long chain like
 * `a+a+a+...` costs neither C stack nor recursion at match time. The message is read in
 * place: application properties are found by walking the map's entries, each skipped by
 * its constructor and size field (compound values carry their byte size, so no walk
 * needs recursion).
 */
#include "config.h"
#include "codec/codec.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Worst case of pending operands per nesting level is small (a OR b AND c = d + e * (..)),
 * so this bounds any program the depth limit allows; checked at compile time anyway. */
#define MAX_STACK 512

/* ---- values ---- */

enum { V_NULL, V_BOOL, V_LONG, V_DOUBLE, V_STR };

typedef struct sval {
    uint8_t t;
    uint8_t ilen;   /* string held inline (u.s.p == NULL): a decoded AMQP char */
    uint8_t inl[4];
    union {
        bool b;
        int64_t i;
        double d;
        struct {
            const uint8_t *p;
            size_t n;
        } s;
    } u;
} sval_t;

static const uint8_t *str_ptr(const sval_t *v)
{
    return v->u.s.p ? v->u.s.p : v->inl;
}

static size_t str_len(const sval_t *v)
{
    return v->u.s.p ? v->u.s.n : v->ilen;
}

static sval_t v_null(void)
{
    return (sval_t){ .t = V_NULL };
}

static sval_t v_bool(bool b)
{
    return (sval_t){ .t = V_BOOL, .u.b = b };
}

static sval_t v_long(int64_t i)
{
    return (sval_t){ .t = V_LONG, .u.i = i };
}

static sval_t v_double(double d)
{
    return (sval_t){ .t = V_DOUBLE, .u.d = d };
}

static sval_t v_str(const void *p, size_t n)
{
    /* never NULL: a NULL pointer means "inline" */
    return (sval_t){ .t = V_STR, .u.s = { .p = p ? p : (const uint8_t *)"", .n = n } };
}

/* ---- the program ---- */

enum {
    OP_CONST, OP_FIELD, OP_NEG, OP_ADD, OP_SUB, OP_MUL, OP_DIV,
    OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_AND, OP_OR, OP_NOT,
    OP_BETWEEN, OP_NBETWEEN, OP_IN, OP_NIN, OP_LIKE, OP_NLIKE, OP_ISNULL, OP_NOTNULL,
};

typedef struct op {
    uint8_t code;
    uint32_t a, b; /* operands: const index; field index; IN list / LIKE pattern range */
} op_t;

/* Header and properties fields an identifier can name; F_APP is an application property. */
enum {
    F_APP, F_JMS_MSGID, F_JMS_CORRID, F_JMS_PRIORITY, F_JMS_MODE, F_JMS_TIMESTAMP,
    F_JMS_EXPIRATION, F_JMS_TYPE, F_JMSX_GROUP, F_JMSX_COUNT, F_MSGID, F_CORRID,
    F_SUBJECT, F_TO, F_REPLY_TO, F_CTYPE, F_CENCODING, F_GROUP, F_PRIORITY, F_DURABLE,
    F_CTIME, F_EXPIRY, F_DCOUNT,
};

static const struct {
    const char *name;
    uint8_t field;
} field_names[] = {
    { "JMSMessageID", F_JMS_MSGID }, { "JMSCorrelationID", F_JMS_CORRID },
    { "JMSPriority", F_JMS_PRIORITY }, { "JMSDeliveryMode", F_JMS_MODE },
    { "JMSTimestamp", F_JMS_TIMESTAMP }, { "JMSExpiration", F_JMS_EXPIRATION },
    { "JMSType", F_JMS_TYPE }, { "JMSXGroupID", F_JMSX_GROUP },
    { "JMSXDeliveryCount", F_JMSX_COUNT }, { "amqp.message_id", F_MSGID },
    { "amqp.correlation_id", F_CORRID }, { "amqp.subject", F_SUBJECT }, { "amqp.to", F_TO },
    { "amqp.reply_to", F_REPLY_TO }, { "amqp.content_type", F_CTYPE },
    { "amqp.content_encoding", F_CENCODING }, { "amqp.group_id", F_GROUP },
    { "amqp.priority", F_PRIORITY }, { "amqp.durable", F_DURABLE },
    { "amqp.creation_time", F_CTIME }, { "amqp.absolute_expiry_time", F_EXPIRY },
    { "amqp.delivery_count", F_DCOUNT },
};

typedef struct field {
    uint8_t kind;
    uint32_t off, len; /* application-property name in the pool */
} field_t;

/* Pattern elements: a literal byte, or one of these. */
#define PAT_ANY 0x100 /* % */
#define PAT_ONE 0x101 /* _ : one UTF-8 character */

struct mqd_selector {
    op_t *ops;
    size_t nops, capops;
    sval_t *consts; /* literals and IN-list items; strings point into pool */
    size_t nconsts, capconsts;
    field_t *fields;
    size_t nfields, capfields;
    uint16_t *pat;
    size_t npat, cappat;
    uint8_t *pool; /* unescaped string literals and names; sized for the whole text */
    size_t npool;
};

static int grow(void **p, size_t *cap, size_t need, size_t elsz)
{
    size_t ncap;
    void *np;

    if (need <= *cap)
        return 0;
    ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    np = realloc(*p, ncap * elsz);
    if (np == NULL)
        return MQD_ENOMEM;
    *p = np;
    *cap = ncap;
    return 0;
}

void mqd_selector_free(mqd_selector_t *sel)
{
    if (sel == NULL)
        return;
    free(sel->ops);
    free(sel->consts);
    free(sel->fields);
    free(sel->pat);
    free(sel->pool);
    free(sel);
}

/* ---- lexer ---- */

enum {
    T_END, T_INT, T_DEC, T_STR, T_ID, T_LP, T_RP, T_COMMA,
    T_EQ, T_NE, T_LT, T_GT, T_LE, T_GE, T_PLUS, T_MINUS, T_STAR, T_SLASH,
    /* keywords */
    T_AND, T_OR, T_NOT, T_IN, T_LIKE, T_ESCAPE, T_IS, T_NULL, T_BETWEEN, T_TRUE, T_FALSE,
};

static const char *const keywords[] = {
    "AND", "OR", "NOT", "IN", "LIKE", "ESCAPE", "IS", "NULL", "BETWEEN", "TRUE", "FALSE",
};

typedef struct tok {
    int t;
    size_t col;     /* offset of the first byte */
    size_t len;     /* source length */
    uint64_t ival;  /* T_INT magnitude */
    double dval;    /* T_DEC */
    size_t soff;    /* T_STR / T_ID: unescaped bytes in the pool */
    size_t slen;
} tok_t;

/* Static types, for the checks JMS wants at compile time. */
enum { S_ANY, S_BOOL, S_NUM, S_STR };

typedef struct parser {
    const char *s;
    size_t n, pos;
    tok_t tok;
    mqd_selector_t *sel;
    unsigned depth;
    size_t height, max_height; /* value stack of the program so far */
    char *err;
    size_t errlen;
    int rc; /* first error */
} parser_t;

static int fail(parser_t *p, size_t col, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(parser_t *p, size_t col, const char *fmt, ...)
{
    va_list ap;
    int k;

    if (p->rc != 0)
        return p->rc;
    p->rc = MQD_EINVAL;
    if (p->errlen > 0) {
        k = snprintf(p->err, p->errlen, "col %zu: ", col + 1);
        if (k >= 0 && (size_t)k < p->errlen) {
            va_start(ap, fmt);
            vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return p->rc;
}

static int oom(parser_t *p)
{
    if (p->rc == 0) {
        p->rc = MQD_ENOMEM;
        if (p->errlen > 0)
            snprintf(p->err, p->errlen, "out of memory");
    }
    return p->rc;
}

static bool is_id_start(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' ||
           c >= 0x80;
}

static bool is_id_part(unsigned char c)
{
    return is_id_start(c) || (c >= '0' && c <= '9') || c == '.';
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static bool is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Copies a quoted literal (q = ' or ") into the pool, '' standing for one quote. */
static int lex_quoted(parser_t *p, char q)
{
    size_t at = p->pos + 1;
    mqd_selector_t *sel = p->sel;

    p->tok.soff = sel->npool;
    for (;;) {
        if (at >= p->n)
            return fail(p, p->pos, "unterminated %s", q == '\'' ? "string" : "quoted name");
        if (p->s[at] == q) {
            if (at + 1 < p->n && p->s[at + 1] == q) {
                sel->pool[sel->npool++] = (uint8_t)q;
                at += 2;
                continue;
            }
            break;
        }
        sel->pool[sel->npool++] = (uint8_t)p->s[at++];
    }
    p->tok.slen = sel->npool - p->tok.soff;
    p->tok.t = (q == '\'') ? T_STR : T_ID;
    if (q == '"' && p->tok.slen == 0)
        return fail(p, p->pos, "empty quoted name");
    p->tok.len = at + 1 - p->pos;
    return 0;
}

static int lex_hex(parser_t *p, size_t at)
{
    uint64_t v = 0;
    size_t start = at;

    while (at < p->n && isxdigit((unsigned char)p->s[at])) {
        unsigned char c = (unsigned char)p->s[at++];
        unsigned d = is_digit(c) ? (unsigned)(c - '0') : (unsigned)((c | 0x20) - 'a' + 10);
        if (v > (UINT64_MAX >> 4))
            return fail(p, p->pos, "integer out of range");
        v = (v << 4) | d;
    }
    if (at == start)
        return fail(p, p->pos, "bad number");
    if (at < p->n && (p->s[at] == 'L' || p->s[at] == 'l'))
        at++;
    p->tok.t = T_INT;
    p->tok.ival = v;
    p->tok.len = at - p->pos;
    return 0;
}

/* Decimal integers (optional L suffix), 0x hex, and approximate numbers: 1.5 .5 7. 1e3
 * with an optional F/D suffix. A letter right after a number is an error. */
static int lex_number(parser_t *p)
{
    size_t at = p->pos, dstart;
    bool dec = false;
    char buf[128];

    if (p->s[at] == '0' && at + 1 < p->n && (p->s[at + 1] == 'x' || p->s[at + 1] == 'X'))
        return lex_hex(p, at + 2);
    while (at < p->n && is_digit((unsigned char)p->s[at]))
        at++;
    if (at < p->n && p->s[at] == '.') {
        dec = true;
        at++;
        while (at < p->n && is_digit((unsigned char)p->s[at]))
            at++;
    }
    if (at < p->n && (p->s[at] == 'e' || p->s[at] == 'E')) {
        size_t e = at + 1;
        if (e < p->n && (p->s[e] == '+' || p->s[e] == '-'))
            e++;
        if (e < p->n && is_digit((unsigned char)p->s[e])) {
            dec = true;
            at = e;
            while (at < p->n && is_digit((unsigned char)p->s[at]))
                at++;
        }
    }
    dstart = at;
    if (at < p->n && strchr(dec ? "fFdD" : "lLfFdD", p->s[at]) != NULL && p->s[at] != '\0') {
        if (p->s[at] != 'l' && p->s[at] != 'L')
            dec = true;
        at++;
    }
    if (at < p->n && is_id_part((unsigned char)p->s[at]))
        return fail(p, p->pos, "bad number");
    if (dstart - p->pos >= sizeof(buf))
        return fail(p, p->pos, "number too long");
    memcpy(buf, p->s + p->pos, dstart - p->pos);
    buf[dstart - p->pos] = '\0';
    p->tok.len = at - p->pos;
    if (dec) {
        p->tok.t = T_DEC;
        p->tok.dval = strtod(buf, NULL);
        return 0;
    }
    errno = 0;
    p->tok.t = T_INT;
    p->tok.ival = strtoull(buf, NULL, 10);
    if (errno != 0 || p->tok.ival > (uint64_t)INT64_MAX + 1)
        return fail(p, p->pos, "integer out of range");
    return 0;
}

static int lex_word(parser_t *p)
{
    size_t at = p->pos, wl;

    while (at < p->n && is_id_part((unsigned char)p->s[at]))
        at++;
    wl = at - p->pos;
    p->tok.len = wl;
    for (size_t k = 0; k < MQD_ARRAY_LEN(keywords); k++) {
        if (strlen(keywords[k]) == wl && strncasecmp(keywords[k], p->s + p->pos, wl) == 0) {
            p->tok.t = T_AND + (int)k;
            return 0;
        }
    }
    p->tok.t = T_ID;
    p->tok.soff = p->sel->npool;
    p->tok.slen = wl;
    memcpy(p->sel->pool + p->sel->npool, p->s + p->pos, wl);
    p->sel->npool += wl;
    return 0;
}

static int lex_op(parser_t *p)
{
    static const struct {
        const char *s;
        int t;
    } ops[] = {
        { "<>", T_NE }, { "<=", T_LE }, { ">=", T_GE }, { "=", T_EQ }, { "<", T_LT },
        { ">", T_GT }, { "+", T_PLUS }, { "-", T_MINUS }, { "*", T_STAR }, { "/", T_SLASH },
        { "(", T_LP }, { ")", T_RP }, { ",", T_COMMA },
    };
    unsigned char c = (unsigned char)p->s[p->pos];

    for (size_t k = 0; k < MQD_ARRAY_LEN(ops); k++) {
        size_t ol = strlen(ops[k].s);
        if (p->n - p->pos >= ol && memcmp(p->s + p->pos, ops[k].s, ol) == 0) {
            p->tok.t = ops[k].t;
            p->tok.len = ol;
            return 0;
        }
    }
    if (c >= 0x20 && c < 0x7f)
        return fail(p, p->pos, "unexpected character '%c'", c);
    return fail(p, p->pos, "unexpected byte 0x%02x", c);
}

/* Reads the next token into p->tok. */
static int next(parser_t *p)
{
    unsigned char c;

    p->pos += p->tok.len;
    while (p->pos < p->n && is_space((unsigned char)p->s[p->pos]))
        p->pos++;
    memset(&p->tok, 0, sizeof(p->tok));
    p->tok.col = p->pos;
    if (p->pos >= p->n) {
        p->tok.t = T_END;
        return 0;
    }
    c = (unsigned char)p->s[p->pos];
    if (c == '\'' || c == '"')
        return lex_quoted(p, (char)c);
    if (is_digit(c) || (c == '.' && p->pos + 1 < p->n && is_digit((unsigned char)p->s[p->pos + 1])))
        return lex_number(p);
    if (is_id_start(c))
        return lex_word(p);
    return lex_op(p);
}

static const char *tok_name(const tok_t *t)
{
    switch (t->t) {
    case T_END: return "end of input";
    case T_INT: case T_DEC: return "a number";
    case T_STR: return "a string";
    case T_ID: return "an identifier";
    case T_LP: return "'('";
    case T_RP: return "')'";
    case T_COMMA: return "','";
    default: return t->t >= T_AND ? keywords[t->t - T_AND] : "an operator";
    }
}

static int unexpected(parser_t *p, const char *want)
{
    return fail(p, p->tok.col, "expected %s, found %s", want, tok_name(&p->tok));
}

/* ---- emission ---- */

/* Appends an op that pops `pop` values and pushes one. */
static int emit(parser_t *p, uint8_t code, uint32_t a, uint32_t b, size_t pop)
{
    mqd_selector_t *sel = p->sel;

    if (grow((void **)&sel->ops, &sel->capops, sel->nops + 1, sizeof(op_t)) != 0)
        return oom(p);
    sel->ops[sel->nops++] = (op_t){ .code = code, .a = a, .b = b };
    p->height = p->height - pop + 1;
    if (p->height > p->max_height)
        p->max_height = p->height;
    if (p->max_height > MAX_STACK)
        return fail(p, p->tok.col, "expression too complex");
    return 0;
}

static int add_const(parser_t *p, sval_t v, uint32_t *idx)
{
    mqd_selector_t *sel = p->sel;

    if (grow((void **)&sel->consts, &sel->capconsts, sel->nconsts + 1, sizeof(sval_t)) != 0)
        return oom(p);
    *idx = (uint32_t)sel->nconsts;
    sel->consts[sel->nconsts++] = v;
    return 0;
}

static int emit_const(parser_t *p, sval_t v)
{
    uint32_t idx;

    if (add_const(p, v, &idx) != 0)
        return p->rc;
    return emit(p, OP_CONST, idx, 0, 0);
}

static int emit_field(parser_t *p, const tok_t *t)
{
    mqd_selector_t *sel = p->sel;
    field_t f = { .kind = F_APP, .off = (uint32_t)t->soff, .len = (uint32_t)t->slen };
    const char *q = p->s + t->col;

    /* a "quoted" name is always an application property */
    for (size_t k = 0; *q != '"' && k < MQD_ARRAY_LEN(field_names); k++) {
        if (strlen(field_names[k].name) == t->slen &&
            memcmp(field_names[k].name, sel->pool + t->soff, t->slen) == 0)
            f.kind = field_names[k].field;
    }
    if (grow((void **)&sel->fields, &sel->capfields, sel->nfields + 1, sizeof(field_t)) != 0)
        return oom(p);
    sel->fields[sel->nfields++] = f;
    return emit(p, OP_FIELD, (uint32_t)(sel->nfields - 1), 0, 0);
}

static sval_t pool_str(parser_t *p, const tok_t *t)
{
    return v_str(p->sel->pool + t->soff, t->slen);
}

/* ---- parser ---- */

static int parse_or(parser_t *p);

static int enter(parser_t *p)
{
    if (++p->depth > MQD_SELECTOR_MAX_DEPTH)
        return fail(p, p->tok.col, "nesting deeper than %d", MQD_SELECTOR_MAX_DEPTH);
    return 0;
}

/* Returns the static type (>= 0) or a negative error. */
static int parse_primary(parser_t *p)
{
    tok_t t = p->tok;
    int ty;

    switch (t.t) {
    case T_LP:
        if (enter(p) != 0 || next(p) != 0 || (ty = parse_or(p)) < 0)
            return p->rc;
        if (p->tok.t != T_RP)
            return fail(p, p->tok.col, "missing ')' for '(' at col %zu", t.col + 1);
        p->depth--;
        return next(p) != 0 ? p->rc : ty;
    case T_INT:
        if (t.ival > INT64_MAX)
            return fail(p, t.col, "integer out of range");
        return (emit_const(p, v_long((int64_t)t.ival)) || next(p)) ? p->rc : S_NUM;
    case T_DEC:
        return (emit_const(p, v_double(t.dval)) || next(p)) ? p->rc : S_NUM;
    case T_STR:
        return (emit_const(p, pool_str(p, &t)) || next(p)) ? p->rc : S_STR;
    case T_TRUE: case T_FALSE:
        return (emit_const(p, v_bool(t.t == T_TRUE)) || next(p)) ? p->rc : S_BOOL;
    case T_ID:
        return (emit_field(p, &t) || next(p)) ? p->rc : S_ANY;
    default:
        return unexpected(p, "a value");
    }
}

static int parse_unary(parser_t *p)
{
    tok_t t = p->tok;
    int ty;

    if (t.t != T_MINUS && t.t != T_PLUS)
        return parse_primary(p);
    if (enter(p) != 0 || next(p) != 0)
        return p->rc;
    /* -9223372036854775808 is a literal, not the negation of one that overflows */
    if (t.t == T_MINUS && p->tok.t == T_INT) {
        tok_t n = p->tok;
        int64_t v = n.ival > INT64_MAX ? INT64_MIN : -(int64_t)n.ival;
        p->depth--;
        return (emit_const(p, v_long(v)) || next(p)) ? p->rc : S_NUM;
    }
    if ((ty = parse_unary(p)) < 0)
        return ty;
    p->depth--;
    if (ty != S_NUM && ty != S_ANY)
        return fail(p, t.col, "sign before a non-number");
    if (t.t == T_MINUS && emit(p, OP_NEG, 0, 0, 1) != 0)
        return p->rc;
    return S_NUM;
}

/* Left-associative binary levels: `ops` maps tokens to op codes. */
static int parse_arith(parser_t *p, bool mul)
{
    int ty = mul ? parse_unary(p) : parse_arith(p, true);

    while (ty >= 0) {
        int t = p->tok.t;
        size_t col = p->tok.col;
        uint8_t code;
        int rt;

        if (mul ? (t != T_STAR && t != T_SLASH) : (t != T_PLUS && t != T_MINUS))
            return ty;
        code = t == T_STAR ? OP_MUL : t == T_SLASH ? OP_DIV : t == T_PLUS ? OP_ADD : OP_SUB;
        if (ty != S_NUM && ty != S_ANY)
            return fail(p, col, "arithmetic on a non-number");
        if (next(p) != 0 || (rt = mul ? parse_unary(p) : parse_arith(p, true)) < 0)
            return p->rc;
        if (rt != S_NUM && rt != S_ANY)
            return fail(p, col, "arithmetic on a non-number");
        if (emit(p, code, 0, 0, 2) != 0)
            return p->rc;
        ty = S_NUM;
    }
    return ty;
}

static int parse_add(parser_t *p)
{
    return parse_arith(p, false);
}

static bool orderable(int ty)
{
    return ty == S_NUM || ty == S_ANY;
}

static int parse_between(parser_t *p, int lty, bool neg, size_t col)
{
    int a, b;

    if ((a = parse_add(p)) < 0)
        return a;
    if (p->tok.t != T_AND)
        return unexpected(p, "AND");
    if (next(p) != 0 || (b = parse_add(p)) < 0)
        return p->rc;
    if (!orderable(lty) || !orderable(a) || !orderable(b))
        return fail(p, col, "BETWEEN needs numbers");
    return emit(p, neg ? OP_NBETWEEN : OP_BETWEEN, 0, 0, 3) ? p->rc : S_BOOL;
}

static int parse_in(parser_t *p, bool neg)
{
    uint32_t first = (uint32_t)p->sel->nconsts, idx;

    if (p->tok.t != T_LP)
        return unexpected(p, "'(' after IN");
    do {
        sval_t v;
        if (next(p) != 0)
            return p->rc;
        if (p->tok.t == T_STR)
            v = pool_str(p, &p->tok);
        else if (p->tok.t == T_INT && p->tok.ival <= INT64_MAX)
            v = v_long((int64_t)p->tok.ival);
        else if (p->tok.t == T_DEC)
            v = v_double(p->tok.dval);
        else
            return unexpected(p, "a string or number in the IN list");
        if (p->sel->nconsts - first >= MQD_SELECTOR_MAX_IN)
            return fail(p, p->tok.col, "IN list longer than %d", MQD_SELECTOR_MAX_IN);
        if (add_const(p, v, &idx) != 0 || next(p) != 0)
            return p->rc;
    } while (p->tok.t == T_COMMA);
    if (p->tok.t != T_RP)
        return unexpected(p, "',' or ')' in the IN list");
    if (next(p) != 0)
        return p->rc;
    return emit(p, neg ? OP_NIN : OP_IN, first, (uint32_t)p->sel->nconsts - first, 1)
               ? p->rc : S_BOOL;
}

/* Compiles the pattern into PAT_* elements; escape < 0 means none. */
static int compile_pattern(parser_t *p, const tok_t *pt, int escape)
{
    mqd_selector_t *sel = p->sel;
    const uint8_t *s = sel->pool + pt->soff;

    /* + 1: an empty first pattern still needs a non-NULL base for sel->pat + a */
    if (grow((void **)&sel->pat, &sel->cappat, sel->npat + pt->slen + 1, sizeof(uint16_t)) != 0)
        return oom(p);
    for (size_t i = 0; i < pt->slen; i++) {
        uint16_t e = s[i];
        if (escape >= 0 && s[i] == escape) {
            if (i + 1 >= pt->slen || (s[i + 1] != '%' && s[i + 1] != '_' && s[i + 1] != escape))
                return fail(p, pt->col, "escape character not followed by %%, _ or itself");
            e = s[++i];
        } else if (s[i] == '%') {
            e = PAT_ANY;
        } else if (s[i] == '_') {
            e = PAT_ONE;
        }
        sel->pat[sel->npat++] = e;
    }
    return 0;
}

static int parse_like(parser_t *p, int lty, bool neg, size_t col)
{
    tok_t pt = p->tok;
    int escape = -1;
    size_t first = p->sel->npat;

    if (pt.t != T_STR)
        return unexpected(p, "a pattern string after LIKE");
    if (lty != S_STR && lty != S_ANY)
        return fail(p, col, "LIKE needs a string");
    if (next(p) != 0)
        return p->rc;
    if (p->tok.t == T_ESCAPE) {
        if (next(p) != 0)
            return p->rc;
        if (p->tok.t != T_STR)
            return unexpected(p, "a string after ESCAPE");
        if (p->tok.slen != 1 || p->sel->pool[p->tok.soff] >= 0x80)
            return fail(p, p->tok.col, "ESCAPE needs one ASCII character");
        escape = p->sel->pool[p->tok.soff];
        if (next(p) != 0)
            return p->rc;
    }
    if (compile_pattern(p, &pt, escape) != 0)
        return p->rc;
    return emit(p, neg ? OP_NLIKE : OP_LIKE, (uint32_t)first, (uint32_t)(p->sel->npat - first), 1)
               ? p->rc : S_BOOL;
}

static int parse_is(parser_t *p)
{
    bool neg = false;

    if (next(p) != 0)
        return p->rc;
    if (p->tok.t == T_NOT) {
        neg = true;
        if (next(p) != 0)
            return p->rc;
    }
    if (p->tok.t != T_NULL)
        return unexpected(p, "NULL");
    if (next(p) != 0)
        return p->rc;
    return emit(p, neg ? OP_NOTNULL : OP_ISNULL, 0, 0, 1) ? p->rc : S_BOOL;
}

static int parse_cmp(parser_t *p)
{
    static const int cmp_tok[] = { T_EQ, T_NE, T_LT, T_GT, T_LE, T_GE };
    static const uint8_t cmp_op[] = { OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE };
    int lty = parse_add(p), rty;
    size_t col = p->tok.col;
    bool neg = false;

    if (lty < 0)
        return lty;
    for (size_t k = 0; k < MQD_ARRAY_LEN(cmp_tok); k++) {
        if (p->tok.t != cmp_tok[k])
            continue;
        if (next(p) != 0 || (rty = parse_add(p)) < 0)
            return p->rc;
        if (k >= 2 && (!orderable(lty) || !orderable(rty)))
            return fail(p, col, "only numbers can be ordered");
        return emit(p, cmp_op[k], 0, 0, 2) ? p->rc : S_BOOL;
    }
    if (p->tok.t == T_IS)
        return parse_is(p);
    if (p->tok.t == T_NOT) {
        neg = true;
        if (next(p) != 0)
            return p->rc;
        if (p->tok.t != T_BETWEEN && p->tok.t != T_IN && p->tok.t != T_LIKE)
            return unexpected(p, "BETWEEN, IN or LIKE after NOT");
    }
    switch (p->tok.t) {
    case T_BETWEEN: return next(p) ? p->rc : parse_between(p, lty, neg, col);
    case T_IN:
        if (lty == S_BOOL)
            return fail(p, col, "IN needs a string or number");
        return next(p) ? p->rc : parse_in(p, neg);
    case T_LIKE: return next(p) ? p->rc : parse_like(p, lty, neg, col);
    default: return lty;
    }
}

static bool logical(int ty)
{
    return ty == S_BOOL || ty == S_ANY;
}

static int parse_not(parser_t *p)
{
    size_t col = p->tok.col;
    int ty;

    if (p->tok.t != T_NOT)
        return parse_cmp(p);
    if (enter(p) != 0 || next(p) != 0 || (ty = parse_not(p)) < 0)
        return p->rc;
    p->depth--;
    if (!logical(ty))
        return fail(p, col, "NOT needs a boolean expression");
    return emit(p, OP_NOT, 0, 0, 1) ? p->rc : S_BOOL;
}

static int parse_logic(parser_t *p, bool is_or)
{
    int ty = is_or ? parse_logic(p, false) : parse_not(p), rt;

    while (ty >= 0 && p->tok.t == (is_or ? T_OR : T_AND)) {
        size_t col = p->tok.col;
        if (next(p) != 0 || (rt = is_or ? parse_logic(p, false) : parse_not(p)) < 0)
            return p->rc;
        if (!logical(ty) || !logical(rt))
            return fail(p, col, "%s needs boolean expressions", is_or ? "OR" : "AND");
        if (emit(p, is_or ? OP_OR : OP_AND, 0, 0, 2) != 0)
            return p->rc;
        ty = S_BOOL;
    }
    return ty;
}

static int parse_or(parser_t *p)
{
    return parse_logic(p, true);
}

int mqd_selector_compile(const char *expr, size_t len, mqd_selector_t **out, char *err,
                         size_t errlen)
{
    parser_t p = { .s = expr, .n = len, .err = err, .errlen = errlen };
    int ty;

    if (errlen > 0)
        err[0] = '\0';
    if (expr == NULL || out == NULL)
        return MQD_EINVAL;
    if (len > MQD_SELECTOR_MAX_LEN)
        return fail(&p, MQD_SELECTOR_MAX_LEN, "selector longer than %d bytes",
                    MQD_SELECTOR_MAX_LEN);
    p.sel = calloc(1, sizeof(*p.sel));
    /* unescaped literals and names never exceed the text they come from */
    if (p.sel == NULL || (p.sel->pool = malloc(len + 1)) == NULL) {
        mqd_selector_free(p.sel);
        return oom(&p);
    }
    if (next(&p) == 0) {
        if (p.tok.t == T_END)
            fail(&p, p.tok.col, "empty selector");
        else if ((ty = parse_or(&p)) >= 0 && p.tok.t != T_END)
            p.tok.t == T_RP ? fail(&p, p.tok.col, "')' without '('") : unexpected(&p, "an operator");
        else if (ty >= 0 && !logical(ty))
            fail(&p, 0, "a selector must be a boolean expression");
    }
    if (p.rc != 0) {
        mqd_selector_free(p.sel);
        return p.rc;
    }
    *out = p.sel;
    return 0;
}

/* ---- reading the message ---- */

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t be64(const uint8_t *p)
{
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

/* Width of a constructor's fixed data (var = false) or of its size field (var = true);
 * -1 for codes we cannot skip (the same table as msg.c's ctor_info). */
static int ctor_width(uint8_t c, bool *var)
{
    *var = false;
    switch (c >> 4) {
    case 0x4: return c <= 0x45 ? 0 : -1;
    case 0x5: return c <= 0x56 ? 1 : -1;
    case 0x6: return c <= 0x61 ? 2 : -1;
    case 0x7: return c <= 0x74 ? 4 : -1;
    case 0x8: return c <= 0x84 ? 8 : -1;
    case 0x9: return (c == 0x94 || c == 0x98) ? 16 : -1;
    case 0xa: *var = true; return (c == 0xa0 || c == 0xa1 || c == 0xa3) ? 1 : -1;
    case 0xb: *var = true; return (c == 0xb0 || c == 0xb1 || c == 0xb3) ? 4 : -1;
    case 0xc: *var = true; return c <= 0xc1 ? 1 : -1;
    case 0xd: *var = true; return c <= 0xd1 ? 4 : -1;
    case 0xe: *var = true; return c == 0xe0 ? 1 : -1;
    case 0xf: *var = true; return c == 0xf0 ? 4 : -1;
    default: return -1;
    }
}

/* Steps over one value at *pos. Compounds and arrays are skipped by their size field, so
 * only descriptor chains need counting, and each step eats a byte. */
static int skip_one(const uint8_t *p, size_t *pos, size_t end)
{
    size_t at = *pos;
    unsigned pending = 1;

    while (pending > 0) {
        bool var;
        int w;
        uint8_t c;

        if (at >= end)
            return MQD_EINVAL;
        c = p[at++];
        if (c == 0x00) {
            if (++pending > MQD_MSG_MAX_DEPTH) /* a descriptor, then the value */
                return MQD_EINVAL;
            continue;
        }
        if ((w = ctor_width(c, &var)) < 0 || end - at < (size_t)w)
            return MQD_EINVAL;
        if (var) {
            size_t sz = (w == 1) ? p[at] : be32(p + at);
            at += (size_t)w;
            if (end - at < sz)
                return MQD_EINVAL;
            at += sz;
        } else {
            at += (size_t)w;
        }
        pending--;
    }
    *pos = at;
    return 0;
}

/* A span of mi, checked against the buffer. */
static bool span_ok(mqd_span_t sp, size_t n)
{
    return sp.len > 0 && sp.off <= n && sp.len <= n - sp.off;
}

/* Opens a section (descriptor, then a list or map): *at is its first item, *end the end
 * of its items, *count how many. */
static bool open_section(const uint8_t *p, size_t n, mqd_span_t sp, size_t *at, size_t *end,
                         uint32_t *count)
{
    size_t pos, send, sz;
    uint8_t c;

    if (!span_ok(sp, n))
        return false;
    pos = sp.off;
    send = sp.off + sp.len;
    if (p[pos++] != 0x00 || skip_one(p, &pos, send) != 0 || pos >= send)
        return false;
    c = p[pos++];
    if (c == 0x45) {
        *at = *end = pos;
        *count = 0;
        return true;
    }
    if (c == 0xc0 || c == 0xc1) {
        if (send - pos < 2)
            return false;
        sz = p[pos];
        *count = p[pos + 1];
        pos += 1;
    } else if (c == 0xd0 || c == 0xd1) {
        if (send - pos < 8)
            return false;
        sz = be32(p + pos);
        *count = be32(p + pos + 4);
        pos += 4;
    } else {
        return false;
    }
    if (sz > send - pos)
        return false;
    *end = pos + sz;
    *at = pos + (c >= 0xd0 ? 4 : 1);
    return *at <= *end;
}

static bool is_strsym(uint8_t c)
{
    return c == 0xa1 || c == 0xb1 || c == 0xa3 || c == 0xb3;
}

/* The bytes of a string/symbol/binary value at [off, end) (already skipped whole). */
static void var_bytes(const uint8_t *p, size_t off, size_t end, const uint8_t **b, size_t *bl)
{
    size_t h = (p[off] & 0xf0) == 0xa0 ? 2 : 5;
    *b = p + off + h;
    *bl = end - off - h;
}

static sval_t utf8_char(uint32_t cp)
{
    sval_t v = { .t = V_STR };

    if (cp < 0x80) {
        v.inl[v.ilen++] = (uint8_t)cp;
    } else if (cp < 0x800) {
        v.inl[v.ilen++] = (uint8_t)(0xc0 | (cp >> 6));
        v.inl[v.ilen++] = (uint8_t)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        v.inl[v.ilen++] = (uint8_t)(0xe0 | (cp >> 12));
        v.inl[v.ilen++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        v.inl[v.ilen++] = (uint8_t)(0x80 | (cp & 0x3f));
    } else if (cp < 0x110000) {
        v.inl[v.ilen++] = (uint8_t)(0xf0 | (cp >> 18));
        v.inl[v.ilen++] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        v.inl[v.ilen++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        v.inl[v.ilen++] = (uint8_t)(0x80 | (cp & 0x3f));
    } else {
        return v_null();
    }
    return v;
}

/* Decodes a simple value at [off, end); anything else (lists, maps, binary, uuid,
 * decimals, described values) is NULL to a selector. */
static sval_t decode(const uint8_t *p, size_t off, size_t end)
{
    const uint8_t *d = p + off + 1;
    uint64_t u;
    uint32_t f32;
    float f;
    double dv;

    switch (p[off]) {
    case 0x41: return v_bool(true);
    case 0x42: return v_bool(false);
    case 0x56: return v_bool(d[0] != 0);
    case 0x43: case 0x44: return v_long(0);
    case 0x50: case 0x52: case 0x53: return v_long(d[0]);
    case 0x51: case 0x54: case 0x55: return v_long((int8_t)d[0]);
    case 0x60: return v_long((uint16_t)((d[0] << 8) | d[1]));
    case 0x61: return v_long((int16_t)(uint16_t)((d[0] << 8) | d[1]));
    case 0x70: return v_long(be32(d));
    case 0x71: return v_long((int32_t)be32(d));
    case 0x80:
        u = be64(d);
        return u > INT64_MAX ? v_double((double)u) : v_long((int64_t)u);
    case 0x81: case 0x83: return v_long((int64_t)be64(d));
    case 0x72:
        f32 = be32(d);
        memcpy(&f, &f32, sizeof(f));
        return v_double(f);
    case 0x82:
        u = be64(d);
        memcpy(&dv, &u, sizeof(dv));
        return v_double(dv);
    case 0x73: return utf8_char(be32(d));
    default:
        if (is_strsym(p[off])) {
            const uint8_t *b;
            size_t bl;
            var_bytes(p, off, end, &b, &bl);
            return v_str(b, bl);
        }
        return v_null();
    }
}

/* The value of application property `key`, or NULL; the first entry wins. */
static sval_t app_prop(const uint8_t *p, size_t n, const mqd_msg_info_t *mi,
                       const uint8_t *key, size_t kl)
{
    size_t at, end, koff, voff;
    uint32_t count;

    if (!open_section(p, n, mi->app_props, &at, &end, &count))
        return v_null();
    for (uint32_t i = 0; i + 1 < count; i += 2) {
        const uint8_t *b;
        size_t bl;

        koff = at;
        if (skip_one(p, &at, end) != 0)
            return v_null();
        voff = at;
        if (skip_one(p, &at, end) != 0)
            return v_null();
        if (!is_strsym(p[koff]))
            continue;
        var_bytes(p, koff, voff, &b, &bl);
        if (bl == kl && memcmp(b, key, kl) == 0)
            return decode(p, voff, at);
    }
    return v_null();
}

/* Field `idx` of the properties list as a string, or NULL. */
static sval_t prop_string(const uint8_t *p, size_t n, const mqd_msg_info_t *mi, uint32_t idx)
{
    size_t at, end, voff = 0;
    uint32_t count;

    if (!open_section(p, n, mi->properties, &at, &end, &count) || idx >= count)
        return v_null();
    for (uint32_t i = 0; i <= idx; i++) {
        voff = at;
        if (skip_one(p, &at, end) != 0)
            return v_null();
    }
    return is_strsym(p[voff]) ? decode(p, voff, at) : v_null();
}

typedef struct ectx {
    const uint8_t *p;
    size_t n;
    const mqd_msg_info_t *mi;
    char ids[2][72]; /* string forms of message-id [0] and correlation-id [1] */
} ectx_t;

static void hex(char *out, const uint8_t *b, size_t bl)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < bl; i++) {
        *out++ = digits[b[i] >> 4];
        *out++ = digits[b[i] & 15];
    }
    *out = '\0';
}

/* The string form of an encoded message-id / correlation-id (see selector.h). */
static sval_t id_string(ectx_t *c, mqd_span_t sp, char *buf)
{
    const uint8_t *v;
    size_t at, bl;
    const uint8_t *b;
    int k;

    if (!span_ok(sp, c->n))
        return v_null();
    at = sp.off;
    if (skip_one(c->p, &at, sp.off + sp.len) != 0)
        return v_null();
    v = c->p + sp.off;
    switch (v[0]) {
    case 0x80: case 0x53: case 0x44:
        k = snprintf(buf, 72, "%llu",
                     (unsigned long long)(v[0] == 0x80 ? be64(v + 1) : v[0] == 0x53 ? v[1] : 0));
        return v_str(buf, (size_t)k);
    case 0x98:
        hex(buf, v + 1, 4), buf[8] = '-';
        hex(buf + 9, v + 5, 2), buf[13] = '-';
        hex(buf + 14, v + 7, 2), buf[18] = '-';
        hex(buf + 19, v + 9, 2), buf[23] = '-';
        hex(buf + 24, v + 11, 6);
        return v_str(buf, 36);
    case 0xa0: case 0xb0:
        var_bytes(c->p, sp.off, at, &b, &bl);
        if (bl > 32)
            return v_null();
        hex(buf, b, bl);
        return v_str(buf, bl * 2);
    default:
        return is_strsym(v[0]) ? decode(c->p, sp.off, at) : v_null();
    }
}

static sval_t str_or_null(const ectx_t *c, mqd_span_t sp)
{
    return span_ok(sp, c->n) ? v_str(c->p + sp.off, sp.len) : v_null();
}

static sval_t long_or_null(int64_t v)
{
    return v != 0 ? v_long(v) : v_null();
}

static sval_t field_value(ectx_t *c, const mqd_selector_t *sel, const field_t *f)
{
    const mqd_msg_info_t *mi = c->mi;

    switch (f->kind) {
    case F_JMS_MSGID: case F_MSGID: return id_string(c, mi->message_id, c->ids[0]);
    case F_JMS_CORRID: case F_CORRID: return id_string(c, mi->correlation_id, c->ids[1]);
    case F_JMS_PRIORITY: case F_PRIORITY: return v_long(mi->priority);
    case F_JMS_MODE:
        return mi->durable ? v_str("PERSISTENT", 10) : v_str("NON_PERSISTENT", 14);
    case F_JMS_TIMESTAMP: return v_long(mi->creation_time);
    case F_JMS_EXPIRATION: return v_long(mi->absolute_expiry_time);
    case F_JMS_TYPE: case F_SUBJECT: return str_or_null(c, mi->subject);
    case F_JMSX_GROUP: case F_GROUP: return str_or_null(c, mi->group_id);
    case F_JMSX_COUNT: return v_long((int64_t)mi->delivery_count + 1);
    case F_TO: return str_or_null(c, mi->to);
    case F_REPLY_TO: return str_or_null(c, mi->reply_to);
    case F_CTYPE: return prop_string(c->p, c->n, mi, 6);
    case F_CENCODING: return prop_string(c->p, c->n, mi, 7);
    case F_DURABLE: return v_bool(mi->durable);
    case F_CTIME: return long_or_null(mi->creation_time);
    case F_EXPIRY: return long_or_null(mi->absolute_expiry_time);
    case F_DCOUNT: return v_long(mi->delivery_count);
    default: return app_prop(c->p, c->n, mi, sel->pool + f->off, f->len);
    }
}

/* ---- evaluation ---- */

enum { TV_FALSE, TV_TRUE, TV_UNKNOWN };

static int truth(const sval_t *v)
{
    return v->t == V_BOOL ? (v->u.b ? TV_TRUE : TV_FALSE) : TV_UNKNOWN;
}

static sval_t from_truth(int tv)
{
    return tv == TV_UNKNOWN ? v_null() : v_bool(tv == TV_TRUE);
}

static bool is_num(const sval_t *v)
{
    return v->t == V_LONG || v->t == V_DOUBLE;
}

static double as_double(const sval_t *v)
{
    return v->t == V_LONG ? (double)v->u.i : v->u.d;
}

static sval_t arith(uint8_t code, const sval_t *a, const sval_t *b)
{
    int64_t r;
    double x, y;

    if (!is_num(a) || !is_num(b))
        return v_null();
    if (a->t == V_LONG && b->t == V_LONG) {
        int64_t l = a->u.i, m = b->u.i;
        bool ovf;
        switch (code) {
        case OP_ADD: ovf = __builtin_add_overflow(l, m, &r); break;
        case OP_SUB: ovf = __builtin_sub_overflow(l, m, &r); break;
        case OP_MUL: ovf = __builtin_mul_overflow(l, m, &r); break;
        default:
            if (m == 0)
                return v_null();
            ovf = (l == INT64_MIN && m == -1);
            r = ovf ? 0 : l / m;
            break;
        }
        if (!ovf)
            return v_long(r);
    }
    x = as_double(a), y = as_double(b);
    switch (code) {
    case OP_ADD: return v_double(x + y);
    case OP_SUB: return v_double(x - y);
    case OP_MUL: return v_double(x * y);
    default: return y == 0 ? v_null() : v_double(x / y);
    }
}

/* -1, 0, 1, or 2 for "unordered" (NaN). Both must be numbers. */
static int num_cmp(const sval_t *a, const sval_t *b)
{
    double x, y;

    if (a->t == V_LONG && b->t == V_LONG)
        return (a->u.i > b->u.i) - (a->u.i < b->u.i);
    x = as_double(a), y = as_double(b);
    if (x < y)
        return -1;
    if (x > y)
        return 1;
    return x == y ? 0 : 2;
}

static bool str_eq(const sval_t *a, const sval_t *b)
{
    return str_len(a) == str_len(b) && memcmp(str_ptr(a), str_ptr(b), str_len(a)) == 0;
}

/* = and <>: NULL gives UNKNOWN, unlike types FALSE (JMS 3.8.1.2). */
static int equality(const sval_t *a, const sval_t *b, bool ne)
{
    bool eq;

    if (a->t == V_NULL || b->t == V_NULL)
        return TV_UNKNOWN;
    if (is_num(a) && is_num(b)) {
        int c = num_cmp(a, b);
        return (ne ? c != 0 : c == 0) ? TV_TRUE : TV_FALSE;
    }
    if (a->t != b->t)
        return TV_FALSE;
    eq = a->t == V_BOOL ? a->u.b == b->u.b : str_eq(a, b);
    return eq != ne ? TV_TRUE : TV_FALSE;
}

static int order(uint8_t code, const sval_t *a, const sval_t *b)
{
    int c;

    if (a->t == V_NULL || b->t == V_NULL)
        return TV_UNKNOWN;
    if (!is_num(a) || !is_num(b))
        return TV_FALSE;
    c = num_cmp(a, b);
    if (c == 2)
        return TV_FALSE;
    switch (code) {
    case OP_LT: return c < 0;
    case OP_GT: return c > 0;
    case OP_LE: return c <= 0;
    default: return c >= 0;
    }
}

static int tv_and(int a, int b)
{
    if (a == TV_FALSE || b == TV_FALSE)
        return TV_FALSE;
    return (a == TV_TRUE && b == TV_TRUE) ? TV_TRUE : TV_UNKNOWN;
}

static int tv_not(int a)
{
    return a == TV_UNKNOWN ? a : !a;
}

static int tv_or(int a, int b)
{
    return tv_not(tv_and(tv_not(a), tv_not(b)));
}

static int in_list(const mqd_selector_t *sel, const op_t *o, const sval_t *v)
{
    if (v->t == V_NULL)
        return TV_UNKNOWN;
    for (uint32_t i = 0; i < o->b; i++) {
        if (equality(v, &sel->consts[o->a + i], false) == TV_TRUE)
            return TV_TRUE;
    }
    return TV_FALSE;
}

/* Bytes of the UTF-8 character at s[i] (1 for a stray byte, so bad input still ends). */
static size_t utf8_len(const uint8_t *s, size_t i, size_t n)
{
    size_t k = s[i] >= 0xf0 ? 4 : s[i] >= 0xe0 ? 3 : s[i] >= 0xc0 ? 2 : 1;

    if (k > n - i)
        return 1;
    for (size_t j = 1; j < k; j++) {
        if ((s[i + j] & 0xc0) != 0x80)
            return 1;
    }
    return k;
}

/* Wildcard match, backtracking only to the last %: O(len * pattern) at worst, and no
 * recursion. Literals compare byte for byte; _ eats one UTF-8 character. */
static bool like_match(const uint16_t *pat, size_t pn, const uint8_t *s, size_t sn)
{
    size_t pi = 0, si = 0, star = SIZE_MAX, mark = 0;

    while (si < sn) {
        if (pi < pn && pat[pi] == PAT_ANY) {
            star = ++pi;
            mark = si;
        } else if (pi < pn && pat[pi] == PAT_ONE) {
            pi++;
            si += utf8_len(s, si, sn);
        } else if (pi < pn && pat[pi] == s[si]) {
            pi++;
            si++;
        } else if (star != SIZE_MAX) {
            pi = star;
            mark += utf8_len(s, mark, sn);
            si = mark;
        } else {
            return false;
        }
    }
    while (pi < pn && pat[pi] == PAT_ANY)
        pi++;
    return pi == pn;
}

static int like(const mqd_selector_t *sel, const op_t *o, const sval_t *v)
{
    if (v->t == V_NULL)
        return TV_UNKNOWN;
    if (v->t != V_STR)
        return TV_FALSE;
    return like_match(sel->pat + o->a, o->b, str_ptr(v), str_len(v)) ? TV_TRUE : TV_FALSE;
}

/* One op on the stack st[0..*sp); the compiler guaranteed the operands are there. */
static void step(ectx_t *c, const mqd_selector_t *sel, const op_t *o, sval_t *st, size_t *sp)
{
    sval_t *top;
    int tv;

    if (o->code == OP_CONST || o->code == OP_FIELD) {
        st[*sp] = o->code == OP_CONST ? sel->consts[o->a] : field_value(c, sel, &sel->fields[o->a]);
        (*sp)++;
        return;
    }
    top = &st[*sp - 1];
    switch (o->code) {
    case OP_NEG:
        if (top->t == V_LONG && top->u.i != INT64_MIN)
            top->u.i = -top->u.i;
        else
            *top = is_num(top) ? v_double(-as_double(top)) : v_null();
        return;
    case OP_NOT: *top = from_truth(tv_not(truth(top))); return;
    case OP_ISNULL: case OP_NOTNULL:
        *top = v_bool((top->t == V_NULL) == (o->code == OP_ISNULL));
        return;
    case OP_IN: case OP_NIN:
        tv = in_list(sel, o, top);
        *top = from_truth(o->code == OP_IN ? tv : tv_not(tv));
        return;
    case OP_LIKE: case OP_NLIKE:
        tv = like(sel, o, top);
        *top = from_truth(o->code == OP_LIKE ? tv : tv_not(tv));
        return;
    case OP_BETWEEN: case OP_NBETWEEN:
        *sp -= 2;
        tv = tv_and(order(OP_GE, &st[*sp - 1], &st[*sp]), order(OP_LE, &st[*sp - 1], &st[*sp + 1]));
        st[*sp - 1] = from_truth(o->code == OP_BETWEEN ? tv : tv_not(tv));
        return;
    default:
        break;
    }
    /* binary ops */
    (*sp)--;
    top = &st[*sp - 1];
    switch (o->code) {
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: *top = arith(o->code, top, top + 1); return;
    case OP_EQ: case OP_NE: tv = equality(top, top + 1, o->code == OP_NE); break;
    case OP_AND: tv = tv_and(truth(top), truth(top + 1)); break;
    case OP_OR: tv = tv_or(truth(top), truth(top + 1)); break;
    default: tv = order(o->code, top, top + 1); break;
    }
    *top = from_truth(tv);
}

bool mqd_selector_match(const mqd_selector_t *sel, const uint8_t *msg, size_t len,
                        const mqd_msg_info_t *mi)
{
    sval_t st[MAX_STACK];
    size_t sp = 0;
    ectx_t c = { .p = msg, .n = len, .mi = mi };

    if (sel == NULL || msg == NULL || mi == NULL)
        return false;
    for (size_t i = 0; i < sel->nops; i++)
        step(&c, sel, &sel->ops[i], st, &sp);
    return sp == 1 && truth(&st[0]) == TV_TRUE;
}

/* ---- start position ---- */

static const struct {
    const char *name;
    mqd_start_kind_t kind;
} start_names[] = {
    { "amqp.annotation.x-opt-offset", MQD_START_OFFSET },
    { "amqp.annotation.x-opt-sequence-number", MQD_START_OFFSET },
    { "amqp.annotation.x-opt-enqueued-time", MQD_START_TIME },
};

static size_t skip_ws(const char *s, size_t i, size_t n)
{
    while (i < n && is_space((unsigned char)s[i]))
        i++;
    return i;
}

/* Reads the value: '...' or a bare token up to whitespace. */
static int start_value(const char *s, size_t *i, size_t n, const char **v, size_t *vl)
{
    size_t at = *i;

    if (at < n && s[at] == '\'') {
        const char *q = memchr(s + at + 1, '\'', n - at - 1);
        if (q == NULL)
            return MQD_EINVAL;
        *v = s + at + 1;
        *vl = (size_t)(q - *v);
        *i = (size_t)(q - s) + 1;
        return 0;
    }
    while (at < n && !is_space((unsigned char)s[at]))
        at++;
    *v = s + *i;
    *vl = at - *i;
    *i = at;
    return *vl > 0 ? 0 : MQD_EINVAL;
}

/* A non-negative decimal int64, or -1. */
static int start_number(const char *v, size_t vl, int64_t *out)
{
    bool neg = vl > 0 && v[0] == '-';
    uint64_t x = 0;
    size_t i = neg ? 1 : 0;

    if (i == vl)
        return MQD_EINVAL;
    for (; i < vl; i++) {
        uint64_t d = (uint64_t)(v[i] - '0');
        if (!is_digit((unsigned char)v[i]) || x > ((uint64_t)INT64_MAX - d) / 10)
            return MQD_EINVAL;
        x = x * 10 + d;
    }
    if (neg && x != 1)
        return MQD_EINVAL;
    *out = neg ? -1 : (int64_t)x;
    return 0;
}

int mqd_selector_start_parse(const char *expr, size_t len, mqd_start_t *out)
{
    mqd_start_t r = { .kind = MQD_START_NONE };
    size_t i, nl = 0;
    const char *v;
    size_t vl;
    int64_t num;

    if (expr == NULL || out == NULL)
        return MQD_EINVAL;
    i = skip_ws(expr, 0, len);
    for (size_t k = 0; k < MQD_ARRAY_LEN(start_names); k++) {
        nl = strlen(start_names[k].name);
        if (len - i >= nl && strncasecmp(expr + i, start_names[k].name, nl) == 0 &&
            (len - i == nl || !is_id_part((unsigned char)expr[i + nl]) ||
             expr[i + nl] == '.')) {
            r.kind = start_names[k].kind;
            break;
        }
    }
    /* a longer name (x-opt-offset-foo) is some other annotation: not ours */
    if (r.kind == MQD_START_NONE || (i + nl < len && (expr[i + nl] == '-' || expr[i + nl] == '.')))
        return MQD_ENOENT;
    i = skip_ws(expr, i + nl, len);
    if (i >= len || expr[i] != '>')
        return MQD_EINVAL;
    i++;
    if (i < len && expr[i] == '=') {
        r.inclusive = true;
        i++;
    }
    i = skip_ws(expr, i, len);
    if (start_value(expr, &i, len, &v, &vl) != 0 || skip_ws(expr, i, len) != len)
        return MQD_EINVAL;
    if (r.kind == MQD_START_OFFSET && vl == 7 && memcmp(v, "@latest", 7) == 0) {
        r.kind = MQD_START_LAST;
    } else {
        if (start_number(v, vl, &num) != 0 || (num < 0 && r.kind == MQD_START_TIME))
            return MQD_EINVAL;
        if (num < 0)
            r.kind = MQD_START_FIRST;
        else
            r.value = num;
    }
    *out = r;
    return 0;
}
