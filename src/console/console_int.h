/* console internals: sessions, the request parsers (pure, tests/fuzz/fuzz_console.c),
 * the compiled-in ui/ files and the HTTP helpers the handlers share. */
#ifndef MQD_CONSOLE_INT_H
#define MQD_CONSOLE_INT_H

#include "console/console.h"

#include <jansson.h>
#include <stddef.h>

struct event;
struct evconnlistener;
struct evhttp;
struct evhttp_request;
struct mqd_server;

/* ---- parse.c (pure) ---- */

#define MQD_CONSOLE_TOKEN_HEX 64 /* session ids and CSRF tokens: 32 random bytes, hex */

/* The value of cookie `name` in a Cookie header ("a=1; b=2") into out[outlen]. 0;
 * MQD_ENOENT when absent; MQD_EINVAL when the value does not fit or holds a byte outside
 * the RFC 6265 cookie-octet set. Only the first cookie of that name counts. */
int mqd_console_cookie_get(const char *header, const char *name, char *out, size_t outlen);

/* Splits a request path ("/api/topics/a%2Fb/partitions/0") at '/' into at most max
 * segments, each percent-decoded into buf[buflen] (NUL-separated): segs[i] point into buf.
 * The query (from '?') is not part of it. Returns the count, or MQD_EINVAL for a path that
 * does not start with '/', an empty or "." / ".." segment, a bad or NUL escape, too many
 * segments or too little room. */
int mqd_console_path_split(const char *path, const char **segs, int max, char *buf, size_t buflen);

/* True when s is exactly MQD_CONSOLE_TOKEN_HEX lowercase hex digits. */
bool mqd_console_token_ok(const char *s);

/* Where a request's head (its line and headers) ends, fed the bytes as they arrive:
 * at the first empty line after a non-empty one, with lines ended by CRLF or a bare LF
 * as evhttp reads them (conn.c's header deadline). Leading empty lines are skipped. */
typedef struct mqd_console_head {
    bool bol;       /* at the start of a line */
    bool cr;        /* a CR at the start of this line */
    bool seen_line; /* a non-empty line came */
} mqd_console_head_t;
/* Starts a head (a new request). */
void mqd_console_head_reset(mqd_console_head_t *h);
/* Feeds p[0..n): true once the head has ended within them (the rest is the body). */
bool mqd_console_head_scan(mqd_console_head_t *h, const char *p, size_t n);

/* ---- session.c ---- */

#define MQD_CONSOLE_SESSIONS 256 /* at once; the least recently used goes when full */

typedef struct mqd_console_sess {
    bool used;
    char id[MQD_CONSOLE_TOKEN_HEX + 1];
    char csrf[MQD_CONSOLE_TOKEN_HEX + 1];
    char user[256];
    uint64_t last_ms; /* monotonic */
} mqd_console_sess_t;

typedef struct mqd_console_login mqd_console_login_t;

#define MQD_CONSOLE_SCRAMS 64 /* SCRAM exchanges between their two requests, at once */

#define MQD_CONSOLE_HOST_MAX 48 /* an address as text (INET6_ADDRSTRLEN, rounded up) */

typedef struct mqd_console_xchg {
    bool used;
    char id[MQD_CONSOLE_TOKEN_HEX + 1];
    char host[MQD_CONSOLE_HOST_MAX]; /* the address that started it (auth_queue_per_ip) */
    struct mqd_scram *st; /* owned (mqd_auth_scram_free) */
    uint64_t started_ms;  /* monotonic; an exchange lives 30 s */
} mqd_console_xchg_t;

typedef struct mqd_console_conn mqd_console_conn_t;

/* Log lines of a kind that may repeat at every connection: one a second, with a count. */
typedef struct mqd_console_quiet {
    int64_t logged_ms;
    uint64_t n; /* since the last line */
} mqd_console_quiet_t;
/* conn.c: counts one more; true when it is to be logged now (then q->n says how many
 * came since the last line, this one included, and the caller zeroes it). */
bool mqd_console_quiet_due(mqd_console_quiet_t *q);

typedef struct mqd_console {
    struct mqd_server *srv;
    struct evhttp *http;
    mqd_console_sess_t sess[MQD_CONSOLE_SESSIONS];
    mqd_console_login_t *logins; /* password checks on the pool (login.c) */
    mqd_console_xchg_t xchg[MQD_CONSOLE_SCRAMS]; /* scram.c */
    /* conn.c: the HTTP connections, bounded and timed */
    struct evconnlistener *listener; /* evhttp's (it frees it) */
    struct event *ev_admit;          /* admits what was accepted (conn.c) */
    struct event *ev_watch;          /* every CONSOLE_WATCH_MS: resumes a paused listener */
    mqd_console_conn_t *fresh;       /* accepted, not yet admitted */
    mqd_console_conn_t *conns;       /* admitted */
    size_t n_conns;
    bool paused;                     /* the listener is off after accept() failed */
    int64_t pause_since_ms;          /* 0: accepting; else when the pauses began */
    uint64_t pauses;                 /* since then */
    int pause_errno;
    mqd_console_quiet_t q_refused, q_deadline, q_scram;
} mqd_console_t;

/* Random hex into out (MQD_CONSOLE_TOKEN_HEX + 1); MQD_EIO if the RNG fails. */
int mqd_console_random_hex(char *out);
/* Monotonic milliseconds. */
uint64_t mqd_console_now_ms(void);
/* A new session for user (fresh id and CSRF token); NULL if the RNG fails. */
mqd_console_sess_t *mqd_console_sess_new(mqd_console_t *k, const char *user);
/* The live session the request's cookie names (idle ones expire here), or NULL. */
mqd_console_sess_t *mqd_console_sess_of(mqd_console_t *k, struct evhttp_request *req);
void mqd_console_sess_end(mqd_console_sess_t *ss);

/* ---- conn.c: the HTTP connections ----
 * Every connection evhttp accepts gets a record here (evhttp_set_bevcb: the console
 * makes its bufferevent) and is admitted in a deferred pass: closed at once past
 * console_max_connections, console_max_connections_per_ip or the descriptors kept for
 * partition files (core's mqd_fd_admit). Its request's head must arrive within
 * console_header_timeout_ms of the accept (or of the next request's first byte) and the
 * body within console_body_timeout_ms of the head, however steadily bytes trickle in:
 * the input is watched as it arrives (mqd_console_head_scan). accept() failing for lack
 * of descriptors pauses the listener instead of spinning on it. */

/* Sets up the listener on host:port (bound by the caller's evhttp) and the connection
 * hooks. 0, MQD_EIO when it cannot bind, MQD_ENOMEM. */
int mqd_console_conns_start(mqd_console_t *k, const char *host, uint16_t port);
/* After evhttp_free (which closed every connection): frees what is left. */
void mqd_console_conns_free(mqd_console_t *k);
/* The request's connection has delivered a whole request (console.c's handler): no
 * deadline until its next request begins. */
void mqd_console_conn_request(mqd_console_t *k, struct evhttp_request *req);
/* The record of req's connection, or NULL (not one the console admitted). */
mqd_console_conn_t *mqd_console_conn_of(mqd_console_t *k, struct evhttp_request *req);
/* The client's address of kc (text), never NULL. */
const char *mqd_console_conn_host(const mqd_console_conn_t *kc);
/* login.c: l is checking a password for kc's connection (NULL: no more); when the
 * connection closes first, mqd_console_login_conn_gone(l) is called. */
void mqd_console_conn_set_login(mqd_console_conn_t *kc, mqd_console_login_t *l);
void mqd_console_login_conn_gone(mqd_console_login_t *l);

/* ---- console.c: replies ---- */

/* Sends `body` (stolen; NULL = {}) as JSON with the given status. */
void mqd_console_reply_json(struct evhttp_request *req, int code, json_t *body);
/* Sends {"error": code's reason, "description": desc}. */
void mqd_console_reply_error(struct evhttp_request *req, int code, const char *desc);
/* Sets the session cookie (empty value and Max-Age=0 when ss is NULL: logout). */
void mqd_console_set_cookie(struct evhttp_request *req, const mqd_console_sess_t *ss);
/* The request body as a JSON object (NULL: not JSON, not an object, or too large);
 * wipe: the body's bytes are zeroed after parsing (it holds a password). */
json_t *mqd_console_body_json(struct evhttp_request *req, bool wipe);

/* ---- login.c ---- */

void mqd_console_login(mqd_console_t *k, struct evhttp_request *req);
void mqd_console_logout(mqd_console_t *k, struct evhttp_request *req, mqd_console_sess_t *ss);
/* GET /api/session: who is logged in, the CSRF token and the rights. */
void mqd_console_session_info(mqd_console_t *k, struct evhttp_request *req, mqd_console_sess_t *ss);
/* Forgets the pending logins (stop: their requests are freed with the connections). */
void mqd_console_logins_drop(mqd_console_t *k);
/* The reply to a login that succeeded for user: a new session, its cookie, 200 with
 * {user, csrf, monitor, manage, mechanism} plus `extra`'s keys (stolen, may be NULL);
 * 403 when the user has neither monitor nor manage. */
void mqd_console_login_ok(mqd_console_t *k, struct evhttp_request *req, const char *user,
                          const char *mechanism, json_t *extra);

/* ---- scram.c ---- */

/* POST /api/login/scram: {"client_first"} -> {"exchange", "server_first"}, then
 * {"exchange", "client_final"} -> the session, with "server_final" to verify. */
void mqd_console_login_scram(mqd_console_t *k, struct evhttp_request *req);
/* Frees every exchange (stop). */
void mqd_console_scram_drop(mqd_console_t *k);

/* ---- api.c ---- */

/* Answers /api/<segs[1..n)> for a logged-in session (rights checked per route). */
void mqd_console_api(mqd_console_t *k, struct evhttp_request *req, mqd_console_sess_t *ss,
                     const char **segs, int n);

/* ---- ui_files.c (generated from ui/ by scripts/embed-ui.sh) ---- */

typedef struct mqd_console_file {
    const char *path; /* "index.html", "app.js", ... */
    const char *type; /* Content-Type */
    const unsigned char *data;
    size_t len;
} mqd_console_file_t;

extern const mqd_console_file_t mqd_console_files[];
extern const size_t mqd_console_n_files;

#endif
