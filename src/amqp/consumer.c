/* Consumer links: attach (address forms, filters, epoch), delivery of stored records with
 * mqd's annotations, dispositions, browsing, dead-lettering and expiry.
 *
 * A delivery's tag is its position, partition (u32) + offset (u64), so a disposition
 * finds its record without any per-delivery allocation. */
#include "config.h"
#include "amqp/amqp_int.h"

#include <proton/condition.h>
#include <proton/disposition.h>
#include <proton/terminus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SELECTOR_SYM "apache.org:selector-filter:string"
#define SELECTOR_CODE 0x0000468C00000004ull
#define STREAM_SPEC_SYM "rabbitmq:stream-offset-spec"
#define EPOCH_SYM "com.microsoft:epoch"
#define LOCAL_ONLY_SYM "mqd:fwd-local-only"
#define DLQ_SUFFIX "/$DeadLetterQueue"

static void tag_decode(pn_delivery_t *d, uint32_t *part, uint64_t *off)
{
    pn_delivery_tag_t t = pn_delivery_tag(d);
    *part = UINT32_MAX;
    *off = 0;
    if (t.size == 12) {
        memcpy(part, t.start, 4);
        memcpy(off, t.start + 4, 8);
    }
}

/* A local-only link's delivery of partition part made while this node led it: the
 * lead's generation then, kept as the delivery's context (deliver). */
static void *lead_mark(const mqd_lstate_t *ls, uint32_t part)
{
    return (void *)(uintptr_t)(mqd_part_led_gen(mqd_topic_part(mqd_ls_topic(ls), part)) + 1);
}

/* A delivery of a local-only link from a lead this node has left since (the partition
 * moved away, maybe back): its record is the group's on the partition's leader now,
 * which delivers it again from the group's committed offset; its settlement here only
 * settles it. */
static bool from_old_lead(const mqd_lstate_t *ls, pn_delivery_t *d, uint32_t part)
{
    if (!mqd_ls_local_only(ls) || part >= mqd_topic_nparts(mqd_ls_topic(ls)))
        return false;
    return !mqd_part_led(mqd_topic_part(mqd_ls_topic(ls), part)) ||
           pn_delivery_get_context(d) != lead_mark(ls, part);
}

/* Gives back every unsettled delivery of a consumer link to its group. */
static void release_unsettled(mqd_lstate_t *ls)
{
    mqd_group_t *g = mqd_ls_group(ls);
    if (!g)
        return;
    for (pn_delivery_t *d = pn_unsettled_head(mqd_ls_link(ls)); d; d = pn_unsettled_next(d)) {
        uint32_t part;
        uint64_t off;
        tag_decode(d, &part, &off);
        /* an unsuccessful attempt (3.2.1) */
        if (part < mqd_group_nparts(g) && !pn_delivery_settled(d) && !from_old_lead(ls, d, part))
            mqd_cursor_release(mqd_group_cursor(g, part), off, true);
    }
}

void mqd_consumer_free(mqd_lstate_t *ls)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_topic_t *t = mqd_ls_topic(ls);
    if (mqd_ls_group(ls)) {
        release_unsettled(ls);
        mqd_group_leave(mqd_ls_group(ls), ls);
        /* a clean detach keeps its acks across a crash */
        if (t && !mqd_topic_temporary(t))
            mqd_topics_persist(mqd_topic_srv(t), true);
    }
    if (t)
        mqd_topic_dispatch_soon(t);
    if (al->sel)
        mqd_selector_free(al->sel);
    free(al->browse_next);
    free(al->sel_gen);
    free(al->sel_looked);
    if (al->brd) {
        mqd_read_free(al->brd);
        free(al->brd);
    }
}

void mqd_consumer_detach(mqd_lstate_t *ls, const char *cond, const char *desc)
{
    pn_link_t *l = mqd_ls_link(ls);
    pn_condition_t *c = pn_link_condition(l);
    pn_condition_set_name(c, cond);
    pn_condition_set_description(c, desc);
    pn_link_set_context(l, NULL);
    mqd_conn_t *conn = mqd_ls_conn(ls);
    mqd_lstate_free(ls);
    pn_link_close(l);
    mqd_conn_mark_dirty(conn);
}

/* ---------------------------------------------------------------- attach */

static int dynamic_topic(mqd_conn_t *c, pn_terminus_t *src, mqd_topic_t **out)
{
    mqd_server_t *s = mqd_conn_srv(c);
    char name[64];
    uint64_t seq = mqd_srv_tmp_seq(s) + 1;
    mqd_srv_set_tmp_seq(s, seq);
    snprintf(name, sizeof name, "$tmp.%llx.%x", (unsigned long long)seq,
             (unsigned)(mqd_mono_ns() & 0xffffff));
    int rc = mqd_topic_get(s, name, true, 1, out);
    if (rc == 0) {
        mqd_topic_set_temporary(*out, true);
        mqd_topic_set_owner(*out, mqd_conn_serial(c)); /* read by this connection only */
        pn_terminus_set_address(src, name);
    }
    return rc;
}

static bool sym_eq(pn_bytes_t b, const char *s)
{
    size_t n = strlen(s);
    return b.size == n && strncasecmp(b.start, s, n) == 0;
}

/* A filter value: a scalar of one of the types the filters below use. */
typedef struct fval {
    pn_type_t type;
    pn_bytes_t b; /* string / symbol (points into Proton's data) */
    int64_t i;    /* long, int, timestamp */
    uint64_t u;   /* ulong, uint */
} fval_t;

static bool read_scalar(pn_data_t *d, fval_t *v)
{
    v->type = pn_data_type(d);
    switch (v->type) {
    case PN_STRING: v->b = pn_data_get_string(d); return true;
    case PN_SYMBOL: v->b = pn_data_get_symbol(d); return true;
    case PN_ULONG: v->u = pn_data_get_ulong(d); return true;
    case PN_UINT: v->u = pn_data_get_uint(d); return true;
    case PN_LONG: v->i = pn_data_get_long(d); return true;
    case PN_INT: v->i = pn_data_get_int(d); return true;
    case PN_TIMESTAMP: v->i = pn_data_get_timestamp(d); return true;
    default: return false;
    }
}

static void put_scalar(pn_data_t *d, const fval_t *v)
{
    switch (v->type) {
    case PN_STRING: pn_data_put_string(d, v->b); break;
    case PN_SYMBOL: pn_data_put_symbol(d, v->b); break;
    case PN_ULONG: pn_data_put_ulong(d, v->u); break;
    case PN_UINT: pn_data_put_uint(d, (uint32_t)v->u); break;
    case PN_LONG: pn_data_put_long(d, v->i); break;
    case PN_INT: pn_data_put_int(d, (int32_t)v->i); break;
    case PN_TIMESTAMP: pn_data_put_timestamp(d, v->i); break;
    default: pn_data_put_null(d); break;
    }
}

/* Reads a filter entry's value (rf positioned on it): descriptor and scalar. */
static bool filter_value(pn_data_t *rf, fval_t *desc, fval_t *val)
{
    desc->type = PN_NULL;
    if (pn_data_type(rf) != PN_DESCRIBED)
        return read_scalar(rf, val);
    pn_data_enter(rf);
    bool ok = pn_data_next(rf) && read_scalar(rf, desc) && pn_data_next(rf) && read_scalar(rf, val);
    pn_data_exit(rf);
    return ok;
}

/* rabbitmq:stream-offset-spec: "first" | "last" | "next" | ulong offset | timestamp. */
static int stream_spec(const fval_t *v, mqd_start_t *st)
{
    switch (v->type) {
    case PN_STRING:
    case PN_SYMBOL:
        if (sym_eq(v->b, "first"))
            *st = (mqd_start_t){.kind = MQD_START_FIRST};
        else if (sym_eq(v->b, "next"))
            *st = (mqd_start_t){.kind = MQD_START_LAST};
        else if (sym_eq(v->b, "last"))
            *st = (mqd_start_t){.kind = MQD_START_LAST, .value = 1}; /* the last record itself */
        else
            return MQD_EINVAL;
        return 0;
    case PN_ULONG:
    case PN_UINT: *st = (mqd_start_t){MQD_START_OFFSET, true, (int64_t)v->u}; return 0;
    case PN_LONG:
    case PN_INT: *st = (mqd_start_t){MQD_START_OFFSET, true, v->i}; return 0;
    case PN_TIMESTAMP: *st = (mqd_start_t){MQD_START_TIME, true, v->i}; return 0;
    default: return MQD_EINVAL;
    }
}

static bool is_selector(pn_bytes_t key, const fval_t *desc)
{
    return (desc->type == PN_SYMBOL && sym_eq(desc->b, SELECTOR_SYM)) ||
           (desc->type == PN_ULONG && desc->u == SELECTOR_CODE) || sym_eq(key, SELECTOR_SYM);
}

/* One filter entry; `applied` true when mqd honours it (then it is echoed). */
static int filter_entry(mqd_lstate_t *ls, pn_bytes_t key, const fval_t *desc, const fval_t *val,
                        bool *applied, char *err, size_t errlen)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    *applied = false;
    if (is_selector(key, desc)) {
        if (val->type != PN_STRING)
            return MQD_EINVAL;
        int rc = mqd_selector_start_parse(val->b.start, val->b.size, &al->start);
        if (rc == MQD_ENOENT) {
            if (al->sel)
                mqd_selector_free(al->sel);
            al->sel = NULL;
            rc = mqd_selector_compile(val->b.start, val->b.size, &al->sel, err, errlen);
        }
        *applied = rc == 0;
        return rc;
    }
    if ((desc->type == PN_SYMBOL && sym_eq(desc->b, STREAM_SPEC_SYM)) ||
        sym_eq(key, STREAM_SPEC_SYM)) {
        int rc = stream_spec(val, &al->start);
        *applied = rc == 0;
        return rc;
    }
    return 0; /* not ours: not echoed, so the client can tell */
}

static void echo_entry(pn_data_t *lf, pn_bytes_t key, const fval_t *desc, const fval_t *val)
{
    pn_data_put_symbol(lf, key);
    if (desc->type == PN_NULL) {
        put_scalar(lf, val);
        return;
    }
    pn_data_put_described(lf);
    pn_data_enter(lf);
    put_scalar(lf, desc);
    put_scalar(lf, val);
    pn_data_exit(lf);
}

/* Reads the source filter-set; writes the filters applied into the local source. */
static int parse_filters(mqd_lstate_t *ls, pn_terminus_t *rs, pn_terminus_t *local, char *err,
                         size_t errlen)
{
    pn_data_t *rf = pn_terminus_filter(rs), *lf = pn_terminus_filter(local);
    int rc = 0;
    if (!rf || !lf)
        return 0;
    pn_data_clear(lf);
    pn_data_rewind(rf);
    if (!pn_data_next(rf) || pn_data_type(rf) != PN_MAP)
        return 0;
    size_t n = pn_data_get_map(rf);
    pn_data_put_map(lf);
    pn_data_enter(lf);
    pn_data_enter(rf);
    for (size_t i = 0; i + 1 < n && rc == 0; i += 2) {
        if (!pn_data_next(rf))
            break;
        pn_bytes_t key = pn_data_type(rf) == PN_SYMBOL   ? pn_data_get_symbol(rf)
                         : pn_data_type(rf) == PN_STRING ? pn_data_get_string(rf)
                                                         : pn_bytes(0, NULL);
        if (!pn_data_next(rf))
            break;
        fval_t desc, val;
        bool applied = false;
        if (filter_value(rf, &desc, &val))
            rc = filter_entry(ls, key, &desc, &val, &applied, err, errlen);
        if (applied)
            echo_entry(lf, key, &desc, &val);
    }
    pn_data_exit(rf);
    pn_data_exit(lf);
    if (rc != 0 && err[0] == '\0')
        snprintf(err, errlen, "unsupported filter value");
    return rc;
}

/* The value of the attach's link property `key` (a symbol), positioned in the remote
 * properties it returns; NULL when the peer sent none. The last one counts. */
static pn_data_t *link_prop(pn_link_t *l, const char *key)
{
    pn_data_t *p = pn_link_remote_properties(l);
    if (!p)
        return NULL; /* the peer sent no link properties */
    pn_data_rewind(p);
    if (!pn_data_next(p) || pn_data_type(p) != PN_MAP)
        return NULL;
    size_t n = pn_data_get_map(p), at = SIZE_MAX;
    pn_data_enter(p);
    for (size_t i = 0; i + 1 < n; i += 2) {
        if (!pn_data_next(p))
            break;
        bool is = pn_data_type(p) == PN_SYMBOL && sym_eq(pn_data_get_symbol(p), key);
        if (!pn_data_next(p))
            break;
        if (is)
            at = i + 1;
    }
    pn_data_rewind(p);
    if (at == SIZE_MAX || !pn_data_next(p))
        return NULL;
    pn_data_enter(p);
    for (size_t i = 0; i <= at; i++)
        pn_data_next(p);
    return p;
}

static int read_epoch(pn_link_t *l, mqd_lstate_t *ls)
{
    pn_data_t *p = link_prop(l, EPOCH_SYM);
    if (p && pn_data_type(p) == PN_LONG)
        mqd_ls_set_epoch(ls, pn_data_get_long(p));
    else if (p && pn_data_type(p) == PN_INT)
        mqd_ls_set_epoch(ls, pn_data_get_int(p));
    else
        return 0;
    mqd_ls_set_has_epoch(ls, true);
    return 0;
}

/* mqd:fwd-local-only = true (issue 33: one leg of a receiver another node merges over
 * the partitions' leaders): read only the partitions this node leads. 1 when asked, 0
 * when not (or false), -1 when the value is not a boolean. */
static int wants_local_only(pn_link_t *l)
{
    pn_data_t *p = link_prop(l, LOCAL_ONLY_SYM);
    if (!p)
        return 0;
    return pn_data_type(p) != PN_BOOL ? -1 : pn_data_get_bool(p);
}

/* Tells the peer the link reads only the partitions led here (its attach's properties). */
static void echo_local_only(pn_link_t *l)
{
    pn_data_t *d = pn_link_properties(l);
    pn_data_clear(d);
    pn_data_put_map(d);
    pn_data_enter(d);
    pn_data_put_symbol(d, pn_bytes(strlen(LOCAL_ONLY_SYM), LOCAL_ONLY_SYM));
    pn_data_put_bool(d, true);
    pn_data_exit(d);
}

/* The offset of partition i where a start position points. */
static uint64_t start_offset(const mqd_start_t *st, const mqd_part_t *p)
{
    mqd_plog_t *log = mqd_part_log(p);
    uint64_t first = mqd_plog_start_offset(log), off = first;
    uint64_t end = mqd_part_visible_end(p, MQD_READ_UNCOMMITTED);
    switch (st->kind) {
    case MQD_START_FIRST: off = first; break;
    case MQD_START_LAST: off = st->value == 1 && end > first ? end - 1 : end; break;
    case MQD_START_OFFSET:
        if (st->value < 0)
            off = first; /* '-1': the beginning */
        else
            off = (uint64_t)st->value + (st->inclusive ? 0 : 1);
        break;
    case MQD_START_TIME:
        if (mqd_plog_offset_for_time(log, st->value + (st->inclusive ? 0 : 1), &off) != 0)
            off = end;
        break;
    default: break;
    }
    return off < first ? first : off > end ? end : off;
}

/* Applies the link's start position to the partitions it will read. A group that
 * already has members keeps its position: a filter only moves a group nobody reads. */
static void apply_start(mqd_lstate_t *ls)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_topic_t *t = mqd_ls_topic(ls);
    bool manual = mqd_ls_manual(ls);
    uint32_t part = mqd_ls_part(ls);
    if (al->start.kind == MQD_START_NONE)
        return;
    if (mqd_ls_kind(ls) == MQD_LS_BROWSER) {
        for (uint32_t i = 0; i < al->browse_n; i++)
            if (!manual || i == part)
                al->browse_next[i] = start_offset(&al->start, mqd_topic_part(t, i));
        return;
    }
    mqd_group_t *g = mqd_ls_group(ls);
    if (mqd_group_members(g) > 1 && !manual)
        return;
    for (uint32_t i = 0; i < mqd_group_nparts(g); i++) {
        mqd_part_t *p = mqd_topic_part(t, i);
        /* a local-only link moves only the partitions led here: the others' positions
           are their leaders' (where the other legs of its reader apply the filter) */
        if ((!manual || i == part) && (!mqd_ls_local_only(ls) || mqd_part_led(p)))
            mqd_cursor_seek(mqd_group_cursor(g, i), p, start_offset(&al->start, p));
    }
}

/* A receiver whose partitions are led by other nodes (route said redirect): served by
 * fwd/recv.c through links to their leaders, the client's link attached here. False:
 * no forwarding here (a single node, fwd not set up): redirect as before. A link another
 * node forwarded is never forwarded again (no loops): refused, so that its entry node
 * looks for the leader again. */
static bool forward(mqd_conn_t *c, pn_link_t *l, const mqd_addr_t *a, bool browse)
{
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(mqd_conn_srv(c));
    if (link_prop(l, "mqd:fwd-node")) {
        mqd_link_refuse(l, "amqp:link:detach-forced",
                        "this node does not lead the partitions of '%s' (a forwarded link is "
                        "not forwarded again)",
                        a->topic);
        return true;
    }
    if (!fh->recv_attach || mqd_link_wants_redirect(l))
        return false; /* single node, or the client asked for a redirect (redirect.c) */
    if (a->kind != MQD_ADDR_TOPIC && strcmp(a->group, MQD_SHARED_GROUP) == 0) {
        mqd_link_refuse(l, "amqp:resource-locked", "group $shared is in shared mode: '%s'",
                        a->topic);
        return true;
    }
    mqd_lstate_t *ls = mqd_lstate_new(c, l, MQD_LS_FWD);
    char *name = ls ? strdup(a->topic) : NULL;
    if (!name) {
        if (ls) {
            pn_link_set_context(l, NULL);
            mqd_lstate_free(ls);
        }
        mqd_link_refuse(l, "amqp:resource-limit-exceeded", "out of memory%s", "");
        return true;
    }
    mqd_ls_set_tmp_name(ls, name); /* what a reload's ACL check names (auth/recheck.c) */
    mqd_ls_set_acl_perm(ls, browse ? MQD_PERM_BROWSE : MQD_PERM_RECEIVE);
    mqd_ls_set_manual(ls, a->kind == MQD_ADDR_GROUP_PARTITION);
    mqd_ls_set_part(ls, a->partition);
    char lname[256];
    snprintf(lname, sizeof lname, "%s/%s", mqd_conn_peer(c), pn_link_name(l));
    mqd_ls_set_name(ls, lname);
    fh->recv_attach(fh->arg, ls, a->topic,
                    a->kind == MQD_ADDR_GROUP_PARTITION ? (int64_t)a->partition : -1,
                    mqd_auth_principal(c));
    return true;
}

/* The link state ls's successor copies (what the ACL recheck and logs name). */
typedef struct fwd_ident {
    char *topic, *tmp_name, *name;
    uint8_t perm;
    bool manual;
    uint32_t part;
} fwd_ident_t;

static void ident_free(fwd_ident_t *id)
{
    free(id->topic);
    free(id->tmp_name);
    free(id->name);
}

/* A group member's or a browser's link (not a leg another node forwards, nor a
 * local-only one: those follow the leads themselves; not one that asked for redirects)
 * goes to fwd/recv.c when its leader here steps down: the group here forgets it (its
 * unsettled deliveries go back to the cursor of a lead this node no longer has), and a
 * new MQD_LS_FWD state on the same link reads from the new leader, where the group's
 * committed offset (replicated in the log, gstate.c) is its position. A browser's
 * position is its own: what it was sent (below browse_next) is not sent again. */
bool mqd_consumer_forward(mqd_lstate_t *ls)
{
    mqd_conn_t *c = mqd_ls_conn(ls);
    pn_link_t *l = mqd_ls_link(ls);
    mqd_fwd_hooks_t *fh = mqd_srv_fwd(mqd_conn_srv(c));
    mqd_group_t *g = mqd_ls_group(ls);
    const mqd_alink_t *al = mqd_ls_amqp(ls);
    bool browser = mqd_ls_kind(ls) == MQD_LS_BROWSER;
    if (!fh->recv_adopt || (!browser && (mqd_ls_kind(ls) != MQD_LS_CONSUMER || !g)) ||
        mqd_ls_local_only(ls) || mqd_link_wants_redirect(l) || link_prop(l, "mqd:fwd-node"))
        return false;
    uint32_t n = browser ? al->browse_n : mqd_group_nparts(g);
    uint64_t *floor = calloc(n ? n : 1, sizeof *floor);
    fwd_ident_t id = {.topic = strdup(mqd_topic_name(mqd_ls_topic(ls))),
                      .tmp_name = strdup(mqd_topic_name(mqd_ls_topic(ls))),
                      .name = strdup(mqd_ls_name(ls)),
                      .perm = mqd_ls_acl_perm(ls),
                      .manual = mqd_ls_manual(ls),
                      .part = mqd_ls_part(ls)};
    if (!floor || !id.topic || !id.tmp_name || !id.name) {
        free(floor);
        ident_free(&id);
        return false; /* out of memory: detached as before */
    }
    for (uint32_t i = 0; i < n; i++)
        floor[i] = browser ? al->browse_next[i] : mqd_cursor_floor(mqd_group_cursor(g, i));
    mqd_lstate_free(ls); /* leaves the group; the link and its deliveries stay */
    pn_link_set_context(l, NULL);
    mqd_lstate_t *nls = mqd_lstate_new(c, l, MQD_LS_FWD);
    if (!nls) {
        pn_condition_set_name(pn_link_condition(l), "amqp:resource-limit-exceeded");
        pn_link_close(l);
        mqd_conn_mark_dirty(c);
    } else {
        mqd_ls_set_tmp_name(nls, id.tmp_name);
        id.tmp_name = NULL;
        mqd_ls_set_acl_perm(nls, id.perm);
        mqd_ls_set_manual(nls, id.manual);
        mqd_ls_set_part(nls, id.part);
        mqd_ls_set_name(nls, id.name);
        fh->recv_adopt(fh->arg, nls, id.topic, id.manual ? (int64_t)id.part : -1,
                       mqd_auth_principal(c), floor, n);
    }
    free(floor);
    ident_free(&id);
    return true;
}

/* Resolves the source address into topic, group and partition; 0 or refuses. */
static int resolve_source(mqd_conn_t *c, pn_link_t *l, const char *addr, bool browse,
                          bool local_only, mqd_topic_t **t, mqd_addr_t *a, bool *fwd_in)
{
    /* $management and $cbs in another spelling (a URL) name no topic either */
    if (mqd_addr_parse(addr, strlen(addr), a) != 0 || a->kind == MQD_ADDR_PARTITION ||
        a->kind == MQD_ADDR_MANAGEMENT || a->kind == MQD_ADDR_CBS) {
        mqd_link_refuse(l, "amqp:not-found", "cannot receive from address '%s'", addr);
        return MQD_EINVAL;
    }
    if (!mqd_reply_may_read(c, a->topic)) {
        mqd_link_refuse(l, "amqp:unauthorized-access",
                        "'%s' is another connection's temporary node", addr);
        return MQD_EINVAL;
    }
    char fu_buf[MQD_NAME_MAX + 1];
    bool present;
    const char *fu = mqd_link_fwd_user(c, l, fu_buf, sizeof fu_buf, &present);
    *fwd_in = fu != NULL;
    mqd_perm_t perm = browse ? MQD_PERM_BROWSE : MQD_PERM_RECEIVE;
    if (fu ? !mqd_auth_user_may(mqd_conn_srv(c), fu, perm, a->topic)
           : !mqd_auth_allowed(c, perm, a->topic)) {
        mqd_link_refuse(l, "amqp:unauthorized-access", "not allowed to receive from '%s'", addr);
        return MQD_EINVAL;
    }
    *t = mqd_topic_find(mqd_conn_srv(c), a->topic);
    int64_t part = a->kind == MQD_ADDR_GROUP_PARTITION ? (int64_t)a->partition
                   : local_only                        ? MQD_ROUTE_PART_LED
                                                       : -1;
    mqd_route_ans_t ans;
    int how = mqd_link_route_ask(c, a->topic, part, *t, &ans);
    if (how == MQD_ROUTE_REDIRECT && forward(c, l, a, browse))
        return MQD_EAGAIN; /* fwd/ serves it (or it was refused) */
    if (how != MQD_ROUTE_HERE) {
        mqd_link_route_act(c, l, a->topic, how, &ans);
        return MQD_EAGAIN; /* refused, redirected, or waiting for the cluster */
    }
    bool create = mqd_may_create(c, a->topic);
    int trc = mqd_topic_get_as(c, a->topic, create, t);
    if (trc == MQD_ENOENT && mqd_create_forbidden(c, a->topic)) {
        mqd_link_refuse(l, "amqp:unauthorized-access", MQD_CREATE_FORBIDDEN, a->topic);
        return MQD_ENOENT;
    }
    if (trc != 0) {
        mqd_link_refuse(l, mqd_topic_get_condition(trc), mqd_topic_get_desc(trc), a->topic);
        return MQD_ENOENT;
    }
    if (a->kind == MQD_ADDR_GROUP_PARTITION && a->partition >= mqd_topic_nparts(*t)) {
        mqd_link_refuse(l, "amqp:not-found", "no such partition: '%s'", addr);
        return MQD_ENOENT;
    }
    if (a->kind != MQD_ADDR_TOPIC && strcmp(a->group, MQD_SHARED_GROUP) == 0) {
        mqd_link_refuse(l, "amqp:resource-locked", "group $shared is in shared mode: '%s'", addr);
        return MQD_EINVAL;
    }
    return 0;
}

static int consumer_join(mqd_lstate_t *ls, mqd_addr_t *a)
{
    const char *gname = a->kind == MQD_ADDR_TOPIC ? MQD_SHARED_GROUP : a->group;
    mqd_group_t *g;
    pn_link_t *l = mqd_ls_link(ls);
    int rc = mqd_group_get(mqd_ls_topic(ls), gname, &g);
    if (rc != 0) {
        mqd_link_refuse(l, "amqp:internal-error", "cannot open group of '%s'", mqd_ls_name(ls));
        return rc;
    }
    rc = mqd_group_join(g, ls);
    if (rc == MQD_EEXIST)
        mqd_link_refuse(l, "amqp:link:stolen",
                        "a receiver with a higher epoch reads this partition%s", "");
    else if (rc == MQD_EAGAIN)
        mqd_link_refuse(l, "amqp:resource-locked",
                        "another receiver of this group reads this partition%s", "");
    return rc;
}

/* The sender settle mode a consumer's attach is answered with: what it asked for (mqd
 * does each), mixed when it asked for nothing known. */
static void consumer_settle_mode(pn_link_t *l)
{
    pn_snd_settle_mode_t m = pn_link_remote_snd_settle_mode(l);
    pn_link_set_snd_settle_mode(l, m == PN_SND_SETTLED || m == PN_SND_UNSETTLED ? m : PN_SND_MIXED);
}

void mqd_consumer_attach(mqd_conn_t *c, pn_link_t *l)
{
    pn_terminus_t *rs = pn_link_remote_source(l), *src = pn_link_source(l);
    mqd_topic_t *t = NULL;
    mqd_addr_t a = {.kind = MQD_ADDR_TOPIC};
    bool fwd_in = false; /* another node's link for its client: authorized as that user */
    pn_terminus_copy(src, rs);
    pn_terminus_copy(pn_link_target(l), pn_link_remote_target(l));
    bool browse = pn_terminus_get_distribution_mode(rs) == PN_DIST_MODE_COPY;
    int local_only = wants_local_only(l);
    const char *addr = pn_terminus_get_address(rs);
    if (local_only < 0) {
        return mqd_link_refuse(l, "amqp:invalid-field",
                               "link property " LOCAL_ONLY_SYM " must be a boolean%s", "");
    } else if (pn_terminus_is_dynamic(rs)) {
        if (dynamic_topic(c, src, &t) != 0)
            return mqd_link_refuse(l, "amqp:internal-error", "cannot create a dynamic node%s", "");
    } else if (!addr) {
        return mqd_link_refuse(l, "amqp:not-found", "a receiver needs a source address%s", "");
    } else if (strncmp(addr, "$repl/", 6) == 0) {
        mqd_repl_hooks_t *rh = mqd_srv_repl(mqd_conn_srv(c));
        if (!rh->attach)
            return mqd_link_refuse(l, "amqp:not-found", "not a cluster node: '%s'", addr);
        return rh->attach(rh->arg, c, l, addr); /* a follower's fetch */
    } else if (strcasecmp(addr, "$management") == 0 || strcasecmp(addr, "$cbs") == 0 ||
               mqd_reply_entity_node(addr, NULL, 0)) {
        if (mqd_reply_attach(c, l, strcasecmp(addr, "$cbs") == 0, &t) != 0)
            return;
    } else if (resolve_source(c, l, addr, browse, local_only == 1, &t, &a, &fwd_in) != 0) {
        return;
    } else if (local_only) {
        echo_local_only(l);
    }
    mqd_lstate_t *ls = mqd_lstate_new(c, l, browse ? MQD_LS_BROWSER : MQD_LS_CONSUMER);
    if (!ls)
        return mqd_link_refuse(l, "amqp:resource-limit-exceeded", "out of memory%s", "");
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_ls_set_topic(ls, t);
    /* what resolve_source checked (a temporary node is the connection's own: dynamic, or
       the reply node of a $management / $cbs receiver) */
    if (!mqd_topic_temporary(t) && !fwd_in)
        mqd_ls_set_acl_perm(ls, browse ? MQD_PERM_BROWSE : MQD_PERM_RECEIVE);
    bool manual = a.kind == MQD_ADDR_GROUP_PARTITION;
    mqd_ls_set_manual(ls, manual);
    /* a replicated topic (repl gave it its registration's identity) in a cluster: on a
       single node, or a node's own topic, this node leads every partition */
    bool replicated = mqd_srv_repl(mqd_conn_srv(c))->route && mqd_topic_uid(t)[0] != '\0';
    mqd_ls_set_local_only(ls, local_only == 1 && !manual && replicated);
    mqd_ls_set_part(ls, a.partition);
    char lname[256]; /* cut to the link state's room by mqd_ls_set_name */
    snprintf(lname, sizeof lname, "%s/%s", mqd_conn_peer(c), pn_link_name(l));
    mqd_ls_set_name(ls, lname);
    char err[256] = "";
    if (parse_filters(ls, rs, src, err, sizeof err) != 0)
        return mqd_link_refuse(l, "amqp:invalid-field", "bad filter: %s", err);
    read_epoch(l, ls);
    if (browse) {
        pn_link_set_snd_settle_mode(
            l, pn_link_remote_snd_settle_mode(l) == PN_SND_SETTLED ? PN_SND_SETTLED : PN_SND_MIXED);
        uint32_t nparts = mqd_topic_nparts(t);
        al->browse_next = calloc(nparts, sizeof *al->browse_next);
        al->browse_n = al->browse_next ? nparts : 0;
        for (uint32_t i = 0; i < al->browse_n; i++)
            al->browse_next[i] = manual && i != mqd_ls_part(ls)
                                     ? UINT64_MAX
                                     : mqd_plog_start_offset(mqd_part_log(mqd_topic_part(t, i)));
    } else if (consumer_join(ls, &a) != 0) {
        return;
    } else {
        consumer_settle_mode(l);
    }
    al->queue_view = browse && a.kind == MQD_ADDR_TOPIC && al->start.kind == MQD_START_NONE &&
                     !mqd_topic_temporary(t);
    apply_start(ls);
    mqd_dlist_push(mqd_topic_consumers(t), mqd_ls_tnode(ls));
    pn_link_set_max_message_size(l, mqd_srv_conf(mqd_conn_srv(c))->max_message_size);
    pn_link_open(l);
    mqd_topic_dispatch_soon(t);
}

/* ---------------------------------------------------------------- delivery */

/* The header delivery-count a delivery carries: the stored one (a message forwarded by
 * another broker may have one) plus mqd's failed attempts, saturating. */
static uint32_t total_count(const mqd_msg_info_t *mi, uint32_t dcount)
{
    uint32_t n = MQD_DC_COUNT(dcount);
    return mi->delivery_count > UINT32_MAX - n ? UINT32_MAX : mi->delivery_count + n;
}

/* A consumer that attached with snd-settle-mode settled (at-most-once: Proton's
 * AtMostOnce, the Erlang client's `settled`) gets each delivery pre-settled, and the
 * record is taken off the queue (done in its group) as it is sent, as RabbitMQ does: it
 * is not delivered again, whatever becomes of the link. */
static void presettled_consumed(mqd_lstate_t *ls, uint32_t part, uint64_t off)
{
    mqd_group_t *g = mqd_ls_group(ls);
    if (mqd_ls_kind(ls) != MQD_LS_CONSUMER || !g || part >= mqd_group_nparts(g))
        return;
    mqd_cursor_done(mqd_group_cursor(g, part), off);
    mqd_group_settled(g, part);
}

static int deliver(mqd_lstate_t *ls, uint32_t part, const mqd_rec_t *rec, const mqd_msg_info_t *mi,
                   uint32_t dcount)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_conn_t *c = mqd_ls_conn(ls);
    pn_link_t *l = mqd_ls_link(ls);
    mqd_buf_t *out = mqd_srv_scratch(mqd_conn_srv(c));
    mqd_msg_ann_t ann = {
        .partition_id = (int32_t)part,
        .offset = (int64_t)rec->offset,
        .enqueued_ms = rec->timestamp_ms,
        .pkey = mi->partition_key.len ? rec->data + mi->partition_key.off : NULL,
        .pkey_len = mi->partition_key.len,
        .delivery_count = total_count(mi, dcount),
        .redelivered = (dcount & MQD_DC_SEEN) != 0,
    };
    int rc = mqd_msg_annotate(rec->data, rec->len, mi, &ann, out);
    if (rc != 0)
        return rc;
    char tag[12];
    memcpy(tag, &part, 4);
    memcpy(tag + 4, &rec->offset, 8);
    pn_delivery_t *d = pn_delivery(l, pn_dtag(tag, sizeof tag));
    if (mqd_ls_local_only(ls))
        pn_delivery_set_context(d, lead_mark(ls, part));
    pn_link_send(l, (const char *)out->p, out->len);
    pn_link_advance(l);
    mqd_topic_count_out(mqd_ls_topic(ls), out->len);
    /* A copy goes out unsettled, as ActiveMQ and Artemis send it (clients settle what they
     * browse and fail on a pre-settled delivery), unless the receiver asked for settled;
     * so does a consumer's delivery (presettled_consumed). */
    if (pn_link_snd_settle_mode(l) == PN_SND_SETTLED) {
        pn_delivery_settle(d);
        presettled_consumed(ls, part, rec->offset);
    } else {
        al->unsettled++;
    }
    mqd_conn_mark_dirty(c);
    return 0;
}

static bool expired(const mqd_rec_t *rec, const mqd_msg_info_t *mi, int64_t now)
{
    if (mi->absolute_expiry_time > 0 && mi->absolute_expiry_time <= now)
        return true;
    return mi->has_ttl && mi->ttl_ms > 0 && rec->timestamp_ms + (int64_t)mi->ttl_ms <= now;
}

/* Copies a record to T/$DeadLetterQueue with annotations naming its origin. */
static void dead_letter(mqd_topic_t *t, uint32_t part, const mqd_rec_t *rec,
                        const mqd_msg_info_t *mi, const char *reason, const mqd_sbus_dl_t *sb)
{
    mqd_server_t *s = mqd_topic_srv(t);
    const char *tname = mqd_topic_name(t);
    char name[MQD_NAME_MAX + 1], origin[MQD_NAME_MAX + 48];
    if (strstr(tname, DLQ_SUFFIX) ||
        snprintf(name, sizeof name, "%s%s", tname, DLQ_SUFFIX) >= (int)sizeof name)
        return; /* a dead-letter queue does not dead-letter again */
    mqd_topic_t *dlq;
    if (mqd_topic_get(s, name, true, 1, &dlq) != 0)
        return;
    snprintf(origin, sizeof origin, "%s/Partitions/%u@%llu", tname, part,
             (unsigned long long)rec->offset);
    mqd_msg_ann_t ann = {.partition_id = (int32_t)part,
                         .offset = (int64_t)rec->offset,
                         .enqueued_ms = rec->timestamp_ms,
                         .delivery_count = mi->delivery_count,
                         .dlq_reason = sb && sb->reason[0] ? sb->reason : reason,
                         .dlq_origin = origin};
    mqd_buf_t *out = mqd_srv_scratch(s), sbuf = {0};
    int rc = mqd_msg_annotate(rec->data, rec->len, mi, &ann, out);
    if (rc == 0 && sb && (rc = mqd_sbus_dead_letter_props(out, sb, &sbuf)) == 0)
        out = &sbuf; /* with the Service Bus reason and description as properties */
    if (rc == 0)
        rc = mqd_part_append(mqd_topic_part(dlq, 0), out->p, out->len, NULL, NULL, NULL);
    mqd_buf_free(&sbuf);
    if (rc != 0) /* the record stays in its own log: lost to the dead-letter topic only */
        MQD_WARN_RL("amqp", "%s: not dead-lettered to %s: %s", origin, name, mqd_strerror(rc));
}

/* A stored record's sections: the cheap scan (the record was checked on its way in and
 * by the store's CRC), or the full one before a selector decodes application
 * properties. */
static int scan_record(const mqd_lstate_t *ls, const mqd_rec_t *rec, mqd_msg_info_t *mi)
{
    const mqd_alink_t *al = mqd_ls_amqp(ls);
    return al->sel ? mqd_msg_scan(rec->data, rec->len, mi)
                   : mqd_msg_scan_stored(rec->data, rec->len, mi);
}

/* A browser's next record of partition i from its read-ahead buffer, reading up to
 * BROWSE_BATCH records at once when the buffer has none for browse_next[i]. One pread
 * then serves many deliveries (reading one record per call cost a 64 KiB pread per
 * message). Records stay valid: they were below the partition's last stable offset when
 * read. NULL when nothing is readable; *err on a read error. */
#define BROWSE_BATCH 128
#define BROWSE_BYTES (256u << 10)

static const mqd_rec_t *browse_next_rec(mqd_lstate_t *ls, uint32_t i)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_topic_t *t = mqd_ls_topic(ls);
    mqd_read_t *rd = al->brd;
    if (rd && al->brd_part == i && al->brd_i < rd->n &&
        rd->recs[al->brd_i].offset == al->browse_next[i])
        return &rd->recs[al->brd_i++];
    /* Caught up: nothing to read, and the buffer stays for the next record (a live-tail
     * browser would otherwise allocate and free it around every message). */
    mqd_part_t *p = mqd_topic_part(t, i);
    mqd_plog_t *log = mqd_part_log(p);
    uint64_t visible = mqd_part_visible_end(p, MQD_READ_COMMITTED);
    if (al->browse_next[i] >= visible && al->browse_next[i] >= mqd_plog_start_offset(log))
        return NULL;
    if (!rd) {
        if (!(rd = al->brd = malloc(sizeof *rd)))
            return NULL;
        mqd_read_init(rd);
    }
    uint32_t prefetch = mqd_srv_conf(mqd_topic_srv(t))->prefetch_bytes;
    size_t max_bytes = prefetch < BROWSE_BYTES ? prefetch : BROWSE_BYTES;
    al->brd_part = i;
    al->brd_i = 0;
    int rc = mqd_plog_read(log, al->browse_next[i], visible, BROWSE_BATCH, max_bytes, rd);
    if (rc == MQD_ERANGE) /* retention passed it: go on from the log's start */
        al->browse_next[i] = mqd_plog_start_offset(log);
    if (rc != 0 || rd->n == 0) {
        mqd_read_free(rd); /* rare now (errors, retention): start afresh next time */
        free(rd);
        al->brd = NULL;
        return NULL;
    }
    return &rd->recs[al->brd_i++];
}

/* A browser of a queue (distribution-mode copy on T, no start filter) shows what is still
 * on the queue: each partition from the $shared group's committed offset, and nothing the
 * group settled above it (held, unsettled deliveries are still on the queue and shown).
 * The group is looked up per call: a browser is not one of its members. A start filter
 * makes the browser a replay of the log instead (queue_view false). */
static mqd_cursor_t *queue_cursor(mqd_lstate_t *ls, uint32_t i)
{
    const mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_group_t *g;
    if (!al->queue_view ||
        mqd_group_get(mqd_ls_topic(ls), MQD_SHARED_GROUP, &g) != 0)
        return NULL;
    return mqd_group_cursor(g, i);
}

static void queue_view_floor(mqd_lstate_t *ls, uint32_t i)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_cursor_t *cur = queue_cursor(ls, i);
    if (cur && al->browse_next[i] != UINT64_MAX && al->browse_next[i] < mqd_cursor_floor(cur))
        al->browse_next[i] = mqd_cursor_floor(cur);
}

static bool queue_view_settled(mqd_lstate_t *ls, uint32_t i, uint64_t off)
{
    mqd_cursor_t *cur = queue_cursor(ls, i);
    return cur && mqd_cursor_settled(cur, off);
}

static size_t browse_pump(mqd_lstate_t *ls)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_topic_t *t = mqd_ls_topic(ls);
    mqd_server_t *s = mqd_topic_srv(t);
    /* Finish the partition whose records are read ahead before moving on. */
    uint32_t first = al->brd && al->brd_i < al->brd->n && al->brd_part < al->browse_n
                         ? al->brd_part
                         : mqd_topic_rr_part(t) % (al->browse_n ? al->browse_n : 1);
    for (uint32_t k = 0; k < al->browse_n; k++) {
        uint32_t i = (first + k) % al->browse_n;
        if (al->browse_next[i] == UINT64_MAX ||
            (mqd_ls_local_only(ls) && !mqd_part_led(mqd_topic_part(t, i))))
            continue;
        queue_view_floor(ls, i);
        const mqd_rec_t *rec = browse_next_rec(ls, i);
        if (!rec)
            continue;
        mqd_msg_info_t mi;
        al->browse_next[i] = rec->offset + 1;
        if ((rec->flags & MQD_REC_KIND_MASK) != MQD_REC_DATA ||
            ((rec->flags & MQD_REC_TXN) && !mqd_txn_committed(s, rec->txn)) ||
            queue_view_settled(ls, i, rec->offset) || scan_record(ls, rec, &mi) != 0 ||
            (al->sel && !mqd_selector_match(al->sel, rec->data, rec->len, &mi)))
            return 1; /* skipped: counts as progress so the caller tries again */
        deliver(ls, i, rec, &mi, 0);
        mqd_topic_set_rr_part(t, i + 1);
        return 1;
    }
    return 0;
}

/* What to do with a scanned record before it goes out: 0 deliver, 1 consumed without
 * delivery (expired, or dead-lettered at max_delivery_count, which sees the count the
 * delivery would carry). */
static int admit(mqd_lstate_t *ls, uint32_t i, const mqd_rec_t *rec, const mqd_msg_info_t *mi,
                 uint32_t dc)
{
    mqd_topic_t *t = mqd_ls_topic(ls);
    if (expired(rec, mi, mqd_now_ms())) {
        mqd_topic_count_expired(t);
        return 1;
    }
    uint32_t max_dc = mqd_topic_conf(t)->max_delivery_count;
    if (max_dc && total_count(mi, dc) >= max_dc) {
        dead_letter(t, i, rec, mi, "max_delivery_count reached", NULL);
        mqd_topic_count_dead(t);
        return 1;
    }
    return 0;
}

static int scan_or_warn(mqd_lstate_t *ls, uint32_t i, const mqd_rec_t *rec, mqd_msg_info_t *mi)
{
    if (scan_record(ls, rec, mi) == 0)
        return 0;
    MQD_WARN_RL("link", "skipping unparseable record %s/%u@%llu", mqd_topic_name(mqd_ls_topic(ls)),
                i, (unsigned long long)rec->offset);
    return 1;
}

/* An exclusive group's link or an unfiltered one: a selector skips for the whole group
 * (Kafka style: what this link does not select counts as consumed by the group). */
static int screen(mqd_lstate_t *ls, uint32_t i, const mqd_rec_t *rec, mqd_msg_info_t *mi,
                  uint32_t dc)
{
    if (scan_or_warn(ls, i, rec, mi) != 0 || admit(ls, i, rec, mi, dc) != 0)
        return 1;
    const mqd_alink_t *al = mqd_ls_amqp(ls);
    if (al->sel && !mqd_selector_match(al->sel, rec->data, rec->len, mi))
        return 1;
    return 0;
}

/* A selective link takes a free record it selects: 1 if it went out. 0 otherwise: the
 * record stays for the others (not selected), or it was consumed without delivery
 * (control record, aborted, unparseable, expired, dead-lettered) and the scan goes on. */
static int sel_take(mqd_lstate_t *ls, uint32_t i, const mqd_rec_t *rec)
{
    const mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_cursor_t *cur = mqd_group_cursor(mqd_ls_group(ls), i);
    mqd_msg_info_t mi;
    if ((rec->flags & MQD_REC_KIND_MASK) != MQD_REC_DATA ||
        ((rec->flags & MQD_REC_TXN) &&
         !mqd_txn_committed(mqd_topic_srv(mqd_ls_topic(ls)), rec->txn)) ||
        scan_or_warn(ls, i, rec, &mi) != 0) {
        mqd_cursor_skip(cur, rec->offset); /* never delivered to anyone */
        return 0;
    }
    if (!mqd_selector_match(al->sel, rec->data, rec->len, &mi) ||
        ((rec->flags & MQD_REC_SCHEDULED) && mqd_cursor_sched_hide(cur, rec)))
        return 0; /* not selected, or scheduled ahead (offered again when due) */
    uint32_t dc = mqd_cursor_take(cur, rec->offset);
    if (admit(ls, i, rec, &mi, dc) == 0 && deliver(ls, i, rec, &mi, dc) == 0)
        return 1;
    mqd_cursor_done(cur, rec->offset);
    return 0;
}

/* Released records this link selects, up to SEL_REDELIVER of the list per call, from
 * where the last call stopped (the list may hold many records other links want). */
#define SEL_REDELIVER 32

static int sel_redelivery(mqd_lstate_t *ls, uint32_t i)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_topic_t *t = mqd_ls_topic(ls);
    mqd_cursor_t *cur = mqd_group_cursor(mqd_ls_group(ls), i);
    mqd_plog_t *log = mqd_part_log(mqd_topic_part(t, i));
    mqd_read_t *rd = mqd_srv_browse_rd(mqd_topic_srv(t));
    size_t n_red;
    uint64_t gen;
    const uint64_t *red = mqd_cursor_redeliver(cur, &n_red, &gen);
    if (al->sel_gen[i] != gen) {
        al->sel_gen[i] = gen; /* new entries: look at the list again */
        al->sel_looked[i] = 0;
    }
    for (size_t k = 0; k < SEL_REDELIVER && al->sel_looked[i] < n_red; k++) {
        uint64_t off = red[al->sel_rdi++ % n_red];
        al->sel_looked[i]++;
        if (off >= al->browse_next[i] || !mqd_cursor_free_at(cur, off))
            continue; /* the scan reaches it, or it is someone else's */
        if (mqd_plog_read(log, off, off + 1, 1, 1, rd) != 0 || rd->n != 1 ||
            rd->recs[0].offset != off)
            continue;
        if (sel_take(ls, i, &rd->recs[0]))
            return 1;
    }
    return 0;
}

/* Scan state for partitions [browse_n, ncur): added partitions start at the floor. */
static int sel_grow(mqd_lstate_t *ls, uint32_t ncur)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    uint64_t *nb = realloc(al->browse_next, ncur * sizeof *nb);
    if (!nb)
        return MQD_ENOMEM;
    al->browse_next = nb;
    uint64_t *ng = realloc(al->sel_gen, ncur * sizeof *ng);
    if (!ng)
        return MQD_ENOMEM;
    al->sel_gen = ng;
    size_t *nl = realloc(al->sel_looked, ncur * sizeof *nl);
    if (!nl)
        return MQD_ENOMEM;
    al->sel_looked = nl;
    for (uint32_t i = al->browse_n; i < ncur; i++) {
        nb[i] = 0;
        ng[i] = UINT64_MAX;
        nl[i] = 0;
    }
    al->browse_n = ncur;
    return 0;
}

/* A link with a selector on the shared group (a queue) takes only what it selects, from
 * its own scan position per partition (browse_next) and from the group's released
 * records; what it passes over stays free, in order, for the group's other links, and
 * the committed floor stays below it. Positions persist across calls, so a long run of
 * records it does not select is read once: SEL_SCAN records per call at most, and
 * SEL_TURN per loop turn, after which the topic is dispatched again in a later turn. */
#define SEL_SCAN 256
#define SEL_TURN 4096

static size_t selective_pump(mqd_lstate_t *ls)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_topic_t *t = mqd_ls_topic(ls);
    mqd_group_t *g = mqd_ls_group(ls);
    size_t work = 0;
    if (al->sel_work >= SEL_TURN) {
        mqd_topic_dispatch_later(t); /* enough for this turn */
        return 0;
    }
    if (al->browse_n < mqd_group_nparts(g) && sel_grow(ls, mqd_group_nparts(g)) != 0)
        return 0;
    for (uint32_t k = 0; k < mqd_group_nparts(g); k++) {
        uint32_t i = (mqd_topic_rr_part(t) + k) % mqd_group_nparts(g);
        mqd_cursor_t *cur = mqd_group_cursor(g, i);
        if (!mqd_group_may_deliver(g, ls, i))
            continue; /* a local-only link: not led here */
        if (al->browse_next[i] < mqd_cursor_floor(cur))
            al->browse_next[i] = mqd_cursor_floor(cur);
        int sent = sel_redelivery(ls, i);
        size_t before = work;
        const mqd_rec_t *rec;
        while (!sent && work < SEL_SCAN && (rec = browse_next_rec(ls, i)) != NULL) {
            work++;
            al->browse_next[i] = rec->offset + 1;
            sent = mqd_cursor_free_at(cur, rec->offset) && sel_take(ls, i, rec);
        }
        al->sel_work += (uint32_t)(work - before) + 1;
        if (sent) {
            mqd_topic_set_rr_part(t, i + 1);
            return 1;
        }
        if (work >= SEL_SCAN || al->sel_work >= SEL_TURN)
            return 1; /* more to look at: the dispatcher calls again (or defers, above) */
    }
    return 0;
}

static size_t group_pump(mqd_lstate_t *ls)
{
    const mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_topic_t *t = mqd_ls_topic(ls);
    mqd_group_t *g = mqd_ls_group(ls);
    if (al->sel && mqd_group_mode(g) == MQD_GROUP_SHARED)
        return selective_pump(ls);
    for (uint32_t k = 0; k < mqd_group_nparts(g); k++) {
        uint32_t i = (mqd_topic_rr_part(t) + k) % mqd_group_nparts(g);
        if (!mqd_group_may_deliver(g, ls, i))
            continue;
        mqd_rec_t rec;
        mqd_msg_info_t mi;
        uint32_t dc;
        mqd_part_t *p = mqd_topic_part(t, i);
        for (int n = 0; n < 256 && mqd_cursor_next(mqd_group_cursor(g, i), p, &rec, &dc); n++) {
            if (screen(ls, i, &rec, &mi, dc) == 0 && deliver(ls, i, &rec, &mi, dc) == 0) {
                mqd_topic_set_rr_part(t, i + 1);
                return 1;
            }
            mqd_cursor_done(mqd_group_cursor(g, i), rec.offset);
        }
    }
    return 0;
}

/* One delivery if the link has credit and a record is ready; honours drain. */
size_t mqd_consumer_pump(mqd_lstate_t *ls)
{
    const mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_conn_t *c = mqd_ls_conn(ls);
    pn_link_t *l = mqd_ls_link(ls);
    uint32_t max_unsettled = mqd_srv_conf(mqd_conn_srv(c))->max_unsettled_per_link;
    if (mqd_conn_closed(c) || pn_link_credit(l) <= 0 ||
        pn_link_state(l) != (PN_LOCAL_ACTIVE | PN_REMOTE_ACTIVE) ||
        (max_unsettled && al->unsettled >= max_unsettled) ||
        mqd_budget_send_blocked(c, pn_link_session(l)))
        return 0;
    size_t n = mqd_ls_kind(ls) == MQD_LS_BROWSER ? browse_pump(ls)
               : mqd_ls_group(ls)                ? group_pump(ls)
                                                 : 0;
    /* a selective link out of budget for this turn may have more: not drained yet */
    if (n == 0 && pn_link_get_drain(l) && al->sel_work < SEL_TURN) {
        pn_link_drained(l);
        mqd_conn_mark_dirty(c);
    }
    return n;
}

/* Reads record `off` of partition `part` and dead-letters it. */
static void dead_letter_at(mqd_topic_t *t, uint32_t part, uint64_t off, const mqd_sbus_dl_t *sb)
{
    mqd_read_t *rd = mqd_srv_browse_rd(mqd_topic_srv(t));
    mqd_msg_info_t mi;
    if (mqd_plog_read(mqd_part_log(mqd_topic_part(t, part)), off, off + 1, 1, 1, rd) == 0 &&
        rd->n == 1 && mqd_msg_scan_stored(rd->recs[0].data, rd->recs[0].len, &mi) == 0)
        dead_letter(t, part, &rd->recs[0], &mi, "rejected", sb);
}

void mqd_consumer_dead_letter(mqd_topic_t *t, uint32_t part, uint64_t off, const char *reason,
                              const char *desc)
{
    mqd_sbus_dl_t sb;
    snprintf(sb.reason, sizeof sb.reason, "%s", reason ? reason : "");
    snprintf(sb.desc, sizeof sb.desc, "%s", desc ? desc : "");
    mqd_topic_count_rejected(t);
    dead_letter_at(t, part, off, &sb);
}

/* A rejected record goes to the dead-letter queue when the topic asks for it, or the
 * rejection does (Service Bus' com.microsoft:dead-letter: sbus.c). */
static void rejected(mqd_lstate_t *ls, pn_delivery_t *d, uint32_t part, uint64_t off)
{
    mqd_topic_t *t = mqd_ls_topic(ls);
    mqd_sbus_dl_t sb;
    bool asked = mqd_sbus_dead_letter_of(d, &sb);
    mqd_topic_count_rejected(t);
    if (mqd_topic_conf(t)->dead_letter || asked)
        dead_letter_at(t, part, off, asked ? &sb : NULL);
}

/* A disposition inside a transaction: staged; the transaction owns the record now. */
static void transactional_disposition(mqd_lstate_t *ls, pn_delivery_t *d, uint32_t part,
                                      uint64_t off)
{
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_server_t *s = mqd_conn_srv(mqd_ls_conn(ls));
    mqd_group_t *g = mqd_ls_group(ls);
    bool unknown, failed;
    mqd_txn_t *txn = mqd_txn_of_delivery(s, d, &unknown);
    if (!txn || !g || part >= mqd_group_nparts(g)) {
        mqd_consumer_detach(ls, mqd_txn_unknown_condition(s, d),
                            "a disposition names a transaction that is not open");
        return;
    }
    uint64_t outcome = mqd_txn_outcome(d, &failed);
    if (mqd_txn_add_ack(txn, g, part, off, outcome, failed) != 0)
        return;
    if (al->unsettled)
        al->unsettled--;
    pn_delivery_settle(d);
}

/* Service Bus' deferMessage: `modified` with undeliverable-here, not failed, on the queue
 * ($shared): the record leaves delivery (docs/servicebus.md, docs/conformance.md). */
static bool deferral(mqd_group_t *g, pn_delivery_t *d)
{
    pn_disposition_t *rd = pn_delivery_remote(d);
    return mqd_group_mode(g) == MQD_GROUP_SHARED && pn_disposition_is_undeliverable(rd) &&
           !pn_disposition_is_failed(rd);
}

/* Deferred, and saved before the settlement answers it (durable). */
static void deferred(mqd_lstate_t *ls, mqd_group_t *g, mqd_cursor_t *cur, uint32_t part,
                     uint64_t off)
{
    if (mqd_cursor_defer(cur, off) == 0 && mqd_group_save_now(g, "defer") != 0)
        MQD_WARN_RL("amqp", "%s/%u@%llu: deferral not saved: a restart redelivers it",
                    mqd_topic_name(mqd_ls_topic(ls)), part, (unsigned long long)off);
}

void mqd_consumer_disposition(mqd_lstate_t *ls, pn_delivery_t *d)
{
    uint64_t state = pn_delivery_remote_state(d);
    if (!pn_delivery_settled(d) && state == 0)
        return; /* nothing decided yet */
    mqd_alink_t *al = mqd_ls_amqp(ls);
    mqd_ls_kind_t kind = mqd_ls_kind(ls);
    mqd_group_t *g = mqd_ls_group(ls);
    uint32_t part;
    uint64_t off;
    tag_decode(d, &part, &off);
    if (from_old_lead(ls, d, part)) {
        g = NULL; /* the record is the partition's leader's now: only settled here */
    } else if (state == MQD_TXN_STATE && kind == MQD_LS_CONSUMER) {
        return transactional_disposition(ls, d, part, off);
    }
    if (kind == MQD_LS_CONSUMER && g && part < mqd_group_nparts(g)) {
        mqd_cursor_t *cur = mqd_group_cursor(g, part);
        if (state == PN_RELEASED) {
            mqd_cursor_release(cur, off, false);
        } else if (state == PN_MODIFIED && deferral(g, d)) {
            deferred(ls, g, cur, part, off);
        } else if (state == PN_MODIFIED) {
            mqd_cursor_release(cur, off, pn_disposition_is_failed(pn_delivery_remote(d)));
        } else {
            if (state == PN_REJECTED)
                rejected(ls, d, part, off);
            mqd_cursor_done(cur, off); /* accepted, rejected, or settled without outcome */
        }
        if (al->unsettled)
            al->unsettled--;
        mqd_group_settled(g, part);
        mqd_topic_dispatch_soon(mqd_ls_topic(ls));
    }
    if ((kind == MQD_LS_BROWSER || !g) && al->unsettled)
        al->unsettled--; /* a copy (any outcome only settles it), or from an old lead */
    if (!pn_delivery_settled(d))
        pn_delivery_update(d, state);
    pn_delivery_settle(d);
}
