/* The console's HTTP side: its own evhttp listener (console_listen), the routes, the
 * compiled-in ui/ files and the JSON replies. Handlers run on the broker's event loop
 * and read broker state without locks, as the metrics endpoint does.
 *   /            302 to /ui/
 *   /ui/[FILE]   the pages (public: they hold no data; the data is behind /api/)
 *   /api/login   POST {"user","password"} -> session cookie + CSRF token
 *   /api/login/scram  the same with SCRAM-SHA-256 in two POSTs (scram.c)
 *   /api/...     everything else needs the session cookie; a POST also the session's
 *                CSRF token in X-CSRF-Token, and no foreign Origin (api.c, login.c) */
#include "config.h"
#include "console/console_int.h"
#include "core/core.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BODY 16384
#define MAX_SEGS 8

/* ---------------------------------------------------------------- replies */

static void common_headers(struct evhttp_request *req, const char *type)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", type);
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "Referrer-Policy", "no-referrer");
    evhttp_add_header(h, "X-Frame-Options", "DENY");
    evhttp_add_header(h, "Content-Security-Policy",
                      "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
                      "form-action 'self'; base-uri 'none'");
}

static const char *reason(int code)
{
    switch (code) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 302: return "Found";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return code >= 500 ? "Internal Server Error" : "Error";
    }
}

void mqd_console_reply_json(struct evhttp_request *req, int code, json_t *body)
{
    struct evbuffer *b = evbuffer_new();
    if (!body)
        body = json_object();
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    common_headers(req, "application/json; charset=utf-8");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-store");
    if (b && text)
        evbuffer_add(b, text, strlen(text));
    free(text);
    evhttp_send_reply(req, code, reason(code), b);
    if (b)
        evbuffer_free(b);
}

void mqd_console_reply_error(struct evhttp_request *req, int code, const char *desc)
{
    mqd_console_reply_json(req, code,
                           json_pack("{s:s, s:s, s:i}", "error", reason(code), "description",
                                     desc ? desc : reason(code), "status", code));
}

void mqd_console_set_cookie(struct evhttp_request *req, const mqd_console_sess_t *ss)
{
    char c[200];
    /* the console speaks plain HTTP; behind a TLS proxy that says so the cookie is Secure
     * (a forged header only makes the browser withhold it on plain HTTP) */
    const char *proto =
        evhttp_find_header(evhttp_request_get_input_headers(req), "X-Forwarded-Proto");
    bool tls = proto && strcmp(proto, "https") == 0;
    snprintf(c, sizeof c, "mqd_session=%s; Path=/; HttpOnly; SameSite=Strict%s%s", ss ? ss->id : "",
             tls ? "; Secure" : "", ss ? "" : "; Max-Age=0");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Set-Cookie", c);
}

json_t *mqd_console_body_json(struct evhttp_request *req, bool wipe)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (n == 0 || n > MAX_BODY)
        return NULL;
    char *p = (char *)evbuffer_pullup(in, (ssize_t)n);
    json_t *v = p ? json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
    if (p && wipe)
        OPENSSL_cleanse(p, n); /* a password: not left in the connection's buffer */
    if (!json_is_object(v)) {
        json_decref(v);
        return NULL;
    }
    return v;
}

/* ---------------------------------------------------------------- static files */

static void serve_file(struct evhttp_request *req, const char *name)
{
    for (size_t i = 0; i < mqd_console_n_files; i++) {
        const mqd_console_file_t *f = &mqd_console_files[i];
        if (strcmp(f->path, name) != 0)
            continue;
        struct evbuffer *b = evbuffer_new();
        common_headers(req, f->type);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Cache-Control", "no-cache");
        if (b)
            evbuffer_add_reference(b, f->data, f->len, NULL, NULL);
        evhttp_send_reply(req, 200, "OK", b);
        if (b)
            evbuffer_free(b);
        return;
    }
    mqd_console_reply_error(req, 404, "no such file");
}

static void redirect(struct evhttp_request *req, const char *to)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Location", to);
    evhttp_send_reply(req, 302, "Found", NULL);
}

/* ---------------------------------------------------------------- checks */

/* A cross-site request announces itself (Origin, Sec-Fetch-Site); one from the console's
 * own pages carries the console's own origin, or none (scripts, curl). */
static bool same_origin(struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *site = evhttp_find_header(h, "Sec-Fetch-Site");
    const char *origin = evhttp_find_header(h, "Origin");
    const char *host = evhttp_find_header(h, "Host");
    if (site && strcmp(site, "same-origin") != 0 && strcmp(site, "none") != 0)
        return false;
    if (!origin)
        return true;
    /* https too: behind a TLS proxy the page's origin is https://HOST */
    if (!host)
        return false;
    const char *rest = strncmp(origin, "http://", 7) == 0    ? origin + 7
                       : strncmp(origin, "https://", 8) == 0 ? origin + 8
                                                             : NULL;
    return rest && strcmp(rest, host) == 0;
}

static bool csrf_ok(struct evhttp_request *req, const mqd_console_sess_t *ss)
{
    const char *t = evhttp_find_header(evhttp_request_get_input_headers(req), "X-CSRF-Token");
    return t && mqd_console_token_ok(t) && CRYPTO_memcmp(t, ss->csrf, MQD_CONSOLE_TOKEN_HEX) == 0;
}

static void on_api(mqd_console_t *k, struct evhttp_request *req, const char **segs, int n)
{
    bool post = evhttp_request_get_command(req) == EVHTTP_REQ_POST;
    if (post && !same_origin(req))
        return mqd_console_reply_error(req, 403, "cross-site request refused");
    if (n == 2 && strcmp(segs[1], "login") == 0) {
        if (!post)
            return mqd_console_reply_error(req, 405, "POST {\"user\", \"password\"}");
        return mqd_console_login(k, req);
    }
    if (n == 3 && strcmp(segs[1], "login") == 0 && strcmp(segs[2], "scram") == 0) {
        if (!post)
            return mqd_console_reply_error(req, 405, "POST {\"client_first\"}");
        return mqd_console_login_scram(k, req);
    }
    mqd_console_sess_t *ss = mqd_console_sess_of(k, req);
    if (!ss)
        return mqd_console_reply_error(req, 401, "log in first (POST /api/login)");
    if (post && !csrf_ok(req, ss))
        return mqd_console_reply_error(req, 403, "missing or wrong X-CSRF-Token");
    if (n == 2 && strcmp(segs[1], "logout") == 0 && post)
        return mqd_console_logout(k, req, ss);
    if (n == 2 && strcmp(segs[1], "session") == 0)
        return mqd_console_session_info(k, req, ss);
    mqd_console_api(k, req, ss, segs, n);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    mqd_console_t *k = arg;
    mqd_console_conn_request(k, req); /* its deadlines end here */
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    const char *segs[MAX_SEGS];
    char buf[2048];
    int n = path ? mqd_console_path_split(path, segs, MAX_SEGS, buf, sizeof buf) : MQD_EINVAL;
    if (n < 0)
        return mqd_console_reply_error(req, 400, "bad path");
    if (n == 0)
        return redirect(req, "/ui/");
    if (strcmp(segs[0], "ui") == 0 && n <= 2) {
        if (n == 1 && path[strlen(path) - 1] != '/')
            return redirect(req, "/ui/");
        return serve_file(req, n == 1 ? "index.html" : segs[1]);
    }
    if (strcmp(segs[0], "api") == 0 && n >= 2)
        return on_api(k, req, segs, n);
    mqd_console_reply_error(req, 404, "not found");
}

/* ---------------------------------------------------------------- start / stop */

int mqd_console_start(struct mqd_server *s)
{
    const char *hp = mqd_srv_conf(s)->console_listen;
    if (!hp || !*hp)
        return 0;
    char host[256];
    uint16_t port;
    if (mqd_conf_parse_hostport(hp, host, sizeof host, &port) != 0) {
        MQD_ERR("console", "console_listen %s: not HOST:PORT", hp);
        return MQD_EINVAL;
    }
    mqd_console_t *k = calloc(1, sizeof *k);
    if (!k || !(k->http = evhttp_new(mqd_srv_base(s)))) {
        free(k);
        return MQD_ENOMEM;
    }
    k->srv = s;
    evhttp_set_allowed_methods(k->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST);
    evhttp_set_timeout(k->http, 30);
    evhttp_set_max_body_size(k->http, MAX_BODY);
    evhttp_set_max_headers_size(k->http, 16384);
    evhttp_set_gencb(k->http, on_request, k);
    int rc = mqd_console_conns_start(k, host, port);
    if (rc != 0) {
        MQD_ERR("console", "console_listen %s: %s", hp,
                rc == MQD_EIO ? "cannot bind" : mqd_strerror(rc));
        evhttp_free(k->http);
        mqd_console_conns_free(k);
        free(k);
        return rc;
    }
    mqd_srv_set_console(s, k);
    MQD_NOTICE("console", "web console on http://%s/ui/", hp);
    return 0;
}

void mqd_console_stop(struct mqd_server *s)
{
    mqd_console_t *k = mqd_srv_console(s);
    if (!k)
        return;
    evhttp_free(k->http); /* closes connections: pending logins lose their request */
    mqd_console_conns_free(k);
    mqd_console_logins_drop(k);
    mqd_console_scram_drop(k);
    OPENSSL_cleanse(k->sess, sizeof k->sess);
    free(k);
    mqd_srv_set_console(s, NULL);
}
