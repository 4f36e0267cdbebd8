/* http.c — libmicrohttpd glue: listen, read requests, dispatch through http_routes[],
 * answer JSON (http.h).
 *
 * One thread per connection: a handler may block (a synchronous run waits for its job)
 * without holding up other clients; max_connections bounds the threads. A request body is
 * accumulated up to settings.max_body_bytes: a larger Content-Length is answered 413 before
 * any of the body is read; a chunked body that grows past the limit is dropped as it
 * arrives and answered 413 at its end. Routes listed in http_stream_routes (tensor uploads)
 * are admitted by the route when their head is in, before any body byte is read (refused
 * at once otherwise, and no 100 Continue is sent), and their body is written to a memfd as
 * it arrives (http_request.body_fd), bounded by max_upload_bytes and the route's grow.
 * How large the pieces of a body are that libmicrohttpd hands over, and what that costs per
 * connection: HTTP_CONNECTION_MEMORY_BYTES below.
 *
 * Connection guards that libmicrohttpd lacks (a deadline for each request's head, shedding
 * under pressure) are http_guard.c's.
 *
 * Every libmicrohttpd call is checked (MHD_CHECK): a failure is logged with the call, file
 * and line, and the connection is closed rather than the front crashing.
 */
#include "front/http.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "front/auth.h"
#include "common/clock.h"
#include "front/http_guard.h"
#include "common/log.h"
#include "front/mhd_check.h"
#include "front/metrics.h"
#include "front/tls.h"

#define HTTP_MAX_QUERY_PARAMS 100   /* more get 400 too_many_parameters (the run has ~30) */
#define HTTP_MHD_LOG_PER_S 20       /* libmicrohttpd lines logged per second; the rest counted */
#define HTTP_SPARE_FDS 256          /* file descriptors besides connections: memfds, SQLite, workers */

/* libmicrohttpd's own connection limit: max_connections, which http.c enforces on the
 * connections it has not cut, plus room for the cut ones until libmicrohttpd has closed
 * them (its count includes them; at its limit it refuses every new connection). */
#define HTTP_MHD_CONNECTION_LIMIT(max) ((max) + (max) / 4 + 16)

/* Each connection's libmicrohttpd memory pool (MHD_OPTION_CONNECTION_MEMORY_LIMIT): the
 * request's headers, the read buffer and the answer's headers. The read buffer is half of
 * it, and sets the size of the pieces a body arrives in: each piece is one poll, one recv
 * and one call of http_access (one write to the upload's memfd). The default, 32 KiB, cut
 * a 1 GiB upload into ~65,000 16 KiB pieces (strace: as many pselect + recvfrom + write).
 *
 * What a larger pool costs: libmicrohttpd mmaps it per connection (untouched pages cost
 * nothing) but zeroes all of it after every request of a keep-alive connection, so an idle
 * keep-alive connection that has made a request holds the whole pool, and every request
 * pays the memset. Measured on the 2-core test machine (receive: a 512 MiB upload from a
 * sender that costs less than curl, two runs of 5; 200 idle keep-alive connections after
 * one GET /healthz each; GET /healthz on one keep-alive connection):
 *
 *   pool     receive         front CPU/upload   VmRSS of the 200 idle   GET /healthz
 *   32 KiB   0.76-0.91 GB/s  0.61-0.70 s        +31 MiB                 22 us
 *   128 KiB  1.01-1.20 GB/s  0.42-0.50 s        +51 MiB                 19 us
 *   256 KiB  1.18-1.31 GB/s  0.40-0.42 s        +76 MiB                 26-29 us
 *   1 MiB    1.25-1.38 GB/s  0.38 s             +226 MiB                79-108 us
 *
 * It also bounds a request's headers: they must fit in the pool (a larger block is
 * answered 431; tests/api/test_reliability.py sends a 200 KB header and expects a refusal:
 * with 128 KiB, 100 KB passes and 140 KB is refused). 128 KiB takes most of the gain, keeps
 * that bound, and costs +0.125 MiB per idle keep-alive connection: at most 64 MiB at the
 * default max_connections, freed as connections close (header_timeout_s, idle_timeout_s).
 * Connections that have sent nothing cost the same at every size (~0.13 MiB each, their
 * thread). Uploads with curl send 64 KiB at a time anyway (its upload buffer). */
#define HTTP_CONNECTION_MEMORY_BYTES ((size_t)128 << 10)


static struct MHD_Daemon *http_daemon;
static const settings *http_cfg;
static atomic_int http_requests_in_flight; /* live http_conn states */

const settings *http_settings(void) { return http_cfg; }

/* Per-request state (con_cls), from the access handler's first call to http_completed. */
typedef struct http_conn {
    char *body;
    size_t len, cap;
    int fd;        /* streaming routes: the memfd the body goes to; -1 otherwise */
    int too_large; /* the body passed max_body_bytes: dropped, answered 413 */
    cJSON *query;  /* the query string, parsed when the head is in; NULL when refused before */
    api_error refusal; /* status != 0: answered this instead of routing */
    const http_stream_route *stream; /* admitted by this streaming route: release(hold) at the end */
    void *hold;
    unsigned long long declared_bytes; /* a streamed body's Content-Length; 0 when chunked */
    double arrived_s, received_s; /* clock_monotonic_s: headers in; last body byte in */
    /* An answer from a file (http_send_fd) with a log note: logged once it has been sent. */
    double answer_queued_s;
    size_t answer_bytes;
    char answer_note[256];
} http_conn;

/* What http_uri_seen hands the access handler as con_cls instead of an http_conn: a
 * refusal decided from the raw request line. */
static char http_mark_many_params, http_mark_nul_path;

/* ---------------------------------------------------------------- answers --------------- */

int http_add_header(http_request *req, const char *name, const char *value)
{
    if (req->n_headers >= HTTP_MAX_EXTRA_HEADERS || strlen(name) >= sizeof req->header_name[0] ||
        strlen(value) >= sizeof req->header_value[0]) {
        log_error("http_add_header: no room for header %s", name);
        return -1;
    }
    snprintf(req->header_name[req->n_headers], sizeof req->header_name[0], "%s", name);
    snprintf(req->header_value[req->n_headers], sizeof req->header_value[0], "%s", value);
    req->n_headers++;
    return 0;
}

/* Add Content-Type and the request's extra headers to resp, queue it, and drop our reference
 * (libmicrohttpd keeps the response until it is sent). Failures mark req->queue_failed. */
static void http_queue_response(http_request *req, int status, const char *content_type, struct MHD_Response *resp)
{
    int i;

    if (MHD_FAILED(MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type) == MHD_YES,
                   "MHD_add_response_header(Content-Type)"))
        req->queue_failed = 1;
    for (i = 0; i < req->n_headers; i++)
        if (MHD_FAILED(MHD_add_response_header(resp, req->header_name[i], req->header_value[i]) == MHD_YES,
                       "MHD_add_response_header"))
            req->queue_failed = 1;
    if (!req->queue_failed &&
        MHD_FAILED(MHD_queue_response(req->conn, (unsigned)status, resp) == MHD_YES, "MHD_queue_response"))
        req->queue_failed = 1;
    MHD_destroy_response(resp);
}

/* Queue buf (malloc'd, len bytes; ownership passes to libmicrohttpd) as the answer. */
static void http_send_typed(http_request *req, int status, const char *content_type, char *buf, size_t len)
{
    struct MHD_Response *resp;

    if (req->answered) {
        log_error("%s %s: a second answer (%d) was dropped", req->method, req->path, status);
        free(buf);
        return;
    }
    req->answered = 1;
    req->status = status;
    resp = MHD_create_response_from_buffer_with_free_callback(len, buf, &free);
    if (MHD_FAILED(resp != NULL, "MHD_create_response_from_buffer_with_free_callback")) {
        free(buf);
        req->queue_failed = 1;
        return;
    }
    http_queue_response(req, status, content_type, resp);
    if (status >= 500 && status != 503) /* 503: no such device here, the client's to fix */
        log_warn("%s %s -> %d", req->method, req->path, status);
    else
        log_debug("%s %s -> %d", req->method, req->path, status);
}

static void http_send_buffer(http_request *req, int status, char *buf, size_t len)
{
    http_send_typed(req, status, "application/json", buf, len);
}

void http_send_bytes(http_request *req, int status, const char *content_type, const void *data, size_t len)
{
    char *buf = malloc(len ? len : 1);

    if (!buf) {
        log_error("%s %s: out of memory for a %zu-byte answer", req->method, req->path, len);
        req->answered = req->queue_failed = 1;
        return;
    }
    if (len) memcpy(buf, data, len);
    http_send_typed(req, status, content_type, buf, len);
}

void http_send_fd(http_request *req, int status, const char *content_type, int fd, size_t size,
                  const char *log_note)
{
    struct MHD_Response *resp;
    http_conn *c = req->conn_state;

    if (req->answered) {
        log_error("%s %s: a second answer (%d) was dropped", req->method, req->path, status);
        close(fd);
        return;
    }
    req->answered = 1;
    req->status = status;
    resp = MHD_create_response_from_fd64(size, fd); /* owns fd once created; not when NULL */
    if (MHD_FAILED(resp != NULL, "MHD_create_response_from_fd64")) {
        close(fd);
        req->queue_failed = 1;
        return;
    }
    http_queue_response(req, status, content_type, resp); /* closes fd once the answer is sent */
    if (log_note && c && !req->queue_failed) { /* http_completed logs it with the send's time */
        snprintf(c->answer_note, sizeof c->answer_note, "%s", log_note);
        c->answer_bytes = size;
        c->answer_queued_s = clock_monotonic_s();
    }
}

/* A streamed answer (http_send_stream) as libmicrohttpd's content reader sees it. */
typedef struct http_stream {
    http_stream_reader reader;
    http_stream_done done;
    void *cls;
    unsigned long long size, sent;
} http_stream;

static ssize_t http_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    http_stream *st = cls;
    long n = st->reader(st->cls, pos, buf, max);

    if (n <= 0) return MHD_CONTENT_READER_END_WITH_ERROR; /* closes the connection: a short body */
    if (pos + (uint64_t)n > st->sent) st->sent = pos + (uint64_t)n;
    return (ssize_t)n;
}

/* libmicrohttpd is done with the response (sent, cut, or never queued). */
static void http_stream_free(void *cls)
{
    http_stream *st = cls;

    st->done(st->cls, st->sent, st->sent == st->size);
    free(st);
}

void http_send_stream(http_request *req, int status, const char *content_type, unsigned long long size,
                      size_t block_size, http_stream_reader reader, http_stream_done done, void *cls)
{
    struct MHD_Response *resp;
    http_stream *st;

    if (req->answered) {
        log_error("%s %s: a second answer (%d) was dropped", req->method, req->path, status);
        done(cls, 0, 0);
        return;
    }
    req->answered = 1;
    req->status = status;
    st = calloc(1, sizeof *st);
    if (!st) {
        log_error("%s %s: out of memory for a streamed answer", req->method, req->path);
        req->queue_failed = 1;
        done(cls, 0, 0);
        return;
    }
    st->reader = reader, st->done = done, st->cls = cls, st->size = size;
    /* The response owns a block_size buffer: each reader call fills it and the connection
     * sends it (one pread + one send per block, not per pool-sized piece). */
    resp = MHD_create_response_from_callback(size, block_size, &http_stream_read, st, &http_stream_free);
    if (MHD_FAILED(resp != NULL, "MHD_create_response_from_callback")) {
        http_stream_free(st);
        req->queue_failed = 1;
        return;
    }
    http_queue_response(req, status, content_type, resp); /* http_stream_free runs once it is done with */
}

void http_send_json_text(http_request *req, int status, const char *text, size_t len)
{
    char *buf = malloc(len + 2);

    if (!buf) {
        log_error("%s %s: out of memory for a %zu-byte answer", req->method, req->path, len);
        req->answered = req->queue_failed = 1;
        return;
    }
    memcpy(buf, text, len);
    buf[len] = '\n';
    buf[len + 1] = '\0';
    http_send_buffer(req, status, buf, len + 1);
}

void http_send_json(http_request *req, int status, const cJSON *body)
{
    char *text = cJSON_PrintUnformatted(body);

    if (!text) {
        log_error("%s %s: cannot print the answer (out of memory)", req->method, req->path);
        req->answered = req->queue_failed = 1;
        return;
    }
    http_send_json_text(req, status, text, strlen(text));
    cJSON_free(text);
}

/* Copy s into out (len bytes) as valid UTF-8: each byte that does not start a complete,
 * well-formed sequence becomes '?'. Messages quote client input, cut with %.40s, which can
 * split a character or hold arbitrary bytes; cJSON does not check, and JSON must be UTF-8. */
static const char *http_utf8(const char *s, char *out, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0;

    while (*p && n + 5 < len) {
        int k = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 && *p >= 0xC2 ? 2 : (*p & 0xF0) == 0xE0 ? 3
                : (*p & 0xF8) == 0xF0 && *p <= 0xF4 ? 4 : 0;
        int i, good = k > 0;
        for (i = 1; good && i < k; i++) good = (p[i] & 0xC0) == 0x80;
        if (good && k == 3) good = !(p[0] == 0xE0 && p[1] < 0xA0) && !(p[0] == 0xED && p[1] >= 0xA0);
        if (good && k == 4) good = !(p[0] == 0xF0 && p[1] < 0x90) && !(p[0] == 0xF4 && p[1] >= 0x90);
        if (!good) {
            out[n++] = '?';
            p++;
            continue;
        }
        memcpy(out + n, p, (size_t)k);
        n += (size_t)k;
        p += k;
    }
    out[n] = '\0';
    return out;
}

cJSON *http_error_json(const api_error *e)
{
    cJSON *root = cJSON_CreateObject(), *err = root ? cJSON_AddObjectToObject(root, "error") : NULL;
    char message[sizeof e->message + 8], field[sizeof e->field + 8];
    int ok = err != NULL;

    ok = ok && cJSON_AddStringToObject(err, "code", e->code[0] ? e->code : "internal");
    ok = ok && cJSON_AddStringToObject(err, "message", http_utf8(e->message, message, sizeof message));
    ok = ok && (e->field[0] ? cJSON_AddStringToObject(err, "field", http_utf8(e->field, field, sizeof field)) != NULL
                            : cJSON_AddNullToObject(err, "field") != NULL);
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

void http_send_error(http_request *req, const api_error *e)
{
    cJSON *body = http_error_json(e);

    if (!body) {
        log_error("%s %s: out of memory for an error answer", req->method, req->path);
        req->answered = req->queue_failed = 1;
        return;
    }
    http_send_json(req, e->status, body);
    cJSON_Delete(body);
}

void http_fail(http_request *req, int status, const char *code, const char *field, const char *fmt, ...)
{
    api_error e;
    va_list ap;

    api_fail(&e, status, code, field, "%s", "");
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    http_send_error(req, &e);
}

/* ---------------------------------------------------------------- requests -------------- */

/* The request line, as libmicrohttpd saw it (MHD_OPTION_URI_LOG_CALLBACK), before it parses
 * the query string into its per-connection pool. What this returns becomes con_cls: NULL,
 * or a mark of a refusal that the access handler answers once the head is in.
 *
 * libmicrohttpd gives every parameter a record in the pool and, when thousands do not fit,
 * closes the connection without an answer (0.9.75, 0.9.77). So a query string of more than
 * HTTP_MAX_QUERY_PARAMS parameters is cut here, in the connection's read buffer that uri
 * points into and that libmicrohttpd parses right after this call; it is refused 400. */
static void *http_uri_seen(void *cls, const char *uri, struct MHD_Connection *conn)
{
    char *qmark = strchr(uri, '?');
    size_t path_len = qmark ? (size_t)(qmark - uri) : strlen(uri), i, n = 1;

    for (i = 0; i + 2 < path_len; i++) /* "%00" would end the path early once unescaped: 404 */
        if (uri[i] == '%' && uri[i + 1] == '0' && uri[i + 2] == '0') return &http_mark_nul_path;
    if (!qmark || !qmark[1]) return NULL;
    for (i = 1; qmark[i]; i++) n += qmark[i] == '&';
    if (n <= HTTP_MAX_QUERY_PARAMS) return NULL;
    qmark[1] = '\0';
    return &http_mark_many_params;
}

typedef struct query_ctx {
    cJSON *obj;
    api_error *e; /* the first refusal; e->status != 0 stops the walk */
} query_ctx;

static enum MHD_Result http_query_add(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_len,
                                      const char *value, size_t value_len)
{
    query_ctx *q = cls;

    if (!key || q->e->status) return MHD_YES;
    /* libmicrohttpd unescapes %00 into the value: strlen would see a shorter one. */
    if (strlen(key) != key_len || (value && strlen(value) != value_len)) {
        api_fail(q->e, 400, "bad_value", key, "query parameter '%.40s' holds a NUL byte (%%00)", key);
        return MHD_YES;
    }
    if (cJSON_GetObjectItemCaseSensitive(q->obj, key)) {
        api_fail(q->e, 400, "duplicate_parameter", key, "query parameter '%.40s' is given more than once", key);
        return MHD_YES;
    }
    /* "?verify" (no '=') arrives as NULL: an empty string, which no parameter accepts. */
    if (!cJSON_AddStringToObject(q->obj, key, value ? value : ""))
        api_fail(q->e, 500, "internal", "", "out of memory reading the query string");
    return MHD_YES;
}

/* Parse the query string into c->query; a refusal goes to c->refusal. */
static void http_parse_query(struct MHD_Connection *conn, http_conn *c)
{
    query_ctx q;

    q.obj = c->query = cJSON_CreateObject();
    q.e = &c->refusal;
    if (!q.obj) {
        api_fail(&c->refusal, 500, "internal", "", "out of memory reading the query string");
        return;
    }
    if (MHD_get_connection_values_n(conn, MHD_GET_ARGUMENT_KIND, http_query_add, &q) < 0) {
        log_error("MHD_get_connection_values_n failed at %s:%d", __FILE__, __LINE__);
        api_fail(&c->refusal, 500, "internal", "", "cannot read the query string");
    }
}

/* The framing headers: every Content-Length and the Transfer-Encoding. */
typedef struct framing_ctx {
    const char *length, *encoding; /* the first of each; NULL when absent */
    int lengths_differ;
} framing_ctx;

static enum MHD_Result http_framing_add(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_len,
                                        const char *value, size_t value_len)
{
    framing_ctx *f = cls;

    if (!key || !value) return MHD_YES;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (!f->length) f->length = value;
        else if (strcmp(f->length, value) != 0) f->lengths_differ = 1;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) && !f->encoding) {
        f->encoding = value;
    }
    return MHD_YES;
}

/* The body's declared length: its Content-Length, HTTP_LENGTH_CHUNKED, or 0 without a body.
 * libmicrohttpd has refused (400/413, HTML) a Content-Length that is not a number below
 * 2^64, and reads by the first one; framing it could read two ways is refused here. 0, or
 * -1 with e filled. */
static int http_declared_length(struct MHD_Connection *conn, unsigned long long *declared, api_error *e)
{
    framing_ctx f;

    memset(&f, 0, sizeof f);
    *declared = 0;
    if (MHD_get_connection_values_n(conn, MHD_HEADER_KIND, http_framing_add, &f) < 0)
        return api_fail(e, 500, "internal", "", "cannot read the request headers");
    if (f.lengths_differ)
        return api_fail(e, 400, "bad_header", "", "two different Content-Length headers");
    if (f.encoding && f.length)
        return api_fail(e, 400, "bad_header", "", "both Transfer-Encoding and Content-Length are given");
    if (f.encoding) {
        /* libmicrohttpd would read any other coding until the connection closes. */
        if (strcasecmp(f.encoding, "chunked") != 0)
            return api_fail(e, 400, "bad_header", "", "Transfer-Encoding '%.40s' is not supported; only chunked",
                            f.encoding);
        *declared = HTTP_LENGTH_CHUNKED;
    } else if (f.length) {
        *declared = strtoull(f.length, NULL, 10);
    }
    return 0;
}

/* Does path match pattern? A pattern "/a/{id}" matches "/a/X" for one non-empty segment X,
 * and "/a/{id}/b" matches "/a/X/b". X is copied into id_buf (id_len bytes; a longer X does
 * not match) so that *id is NUL-terminated. */
static int http_route_match(const char *pattern, const char *path, const char **id, char *id_buf, size_t id_len)
{
    const char *brace = strstr(pattern, "/{"), *close, *seg_end;
    size_t prefix, seg;

    *id = NULL;
    if (!brace) return strcmp(pattern, path) == 0;
    prefix = (size_t)(brace - pattern) + 1;
    if (strncmp(pattern, path, prefix) != 0) return 0;
    close = strchr(brace, '}');
    if (!close) return 0;
    seg_end = strchr(path + prefix, '/');
    if (!seg_end) seg_end = path + strlen(path);
    seg = (size_t)(seg_end - (path + prefix));
    if (seg == 0 || seg >= id_len || strcmp(close + 1, seg_end) != 0) return 0;
    memcpy(id_buf, path + prefix, seg);
    id_buf[seg] = '\0';
    *id = id_buf;
    return 1;
}

/* The streaming route (http_stream_routes) for method and url; NULL when its body is held. */
static const http_stream_route *http_streaming_route(const char *method, const char *url)
{
    char id_buf[128];
    const char *id;
    size_t i;

    if (strcmp(method, "POST") != 0) return NULL;
    for (i = 0; http_stream_routes[i].pattern; i++)
        if (http_route_match(http_stream_routes[i].pattern, url, &id, id_buf, sizeof id_buf))
            return &http_stream_routes[i];
    return NULL;
}

static void http_route_request(http_request *req)
{
    const char *method = strcmp(req->method, "HEAD") == 0 ? "GET" : req->method;
    char allow[96];
    size_t i, n = 0;

    allow[0] = '\0';
    for (i = 0; i < http_routes_count; i++) {
        const http_route *r = &http_routes[i];
        const char *id;
        if (!http_route_match(r->pattern, req->path, &id, req->id_buf, sizeof req->id_buf)) continue;
        if (strcmp(r->method, method) == 0) {
            req->id = id;
            req->route = r->pattern;
            r->handler(req);
            return;
        }
        if (n < sizeof allow)
            n += (size_t)snprintf(allow + n, sizeof allow - n, "%s%s%s", n ? ", " : "", r->method,
                                  strcmp(r->method, "GET") == 0 ? ", HEAD" : "");
    }
    if (n == 0) {
        http_fail(req, 404, "not_found", "", "no such endpoint: %s %.200s (see docs/api.md)", req->method, req->path);
        return;
    }
    if (http_add_header(req, MHD_HTTP_HEADER_ALLOW, allow) != 0) {
        http_fail(req, 500, "internal", "", "cannot set the Allow header");
        return;
    }
    http_fail(req, 405, "method_not_allowed", "", "%s is not allowed on %.200s; allowed: %s", req->method, req->path,
              allow);
}

/* A request as a handler (or a streaming route's admit) sees it. */
static void http_request_view(http_request *req, struct MHD_Connection *conn, const char *url, const char *method,
                              http_conn *c)
{
    memset(req, 0, sizeof *req);
    req->conn = conn;
    req->method = method;
    req->path = url;
    req->query = c->query;
    req->settings = http_cfg;
    req->body_fd = -1;
    req->conn_state = c;
    req->arrived_s = c->arrived_s;
    req->received_s = c->received_s;
    req->hold = c->hold;
}

/* Answer the request: c->refusal when set, else auth (401) and the route. */
static enum MHD_Result http_dispatch(struct MHD_Connection *conn, const char *url, const char *method,
                                     http_conn *c)
{
    http_request req;

    c->received_s = clock_monotonic_s();
    http_request_view(&req, conn, url, method, c);
    if (c->too_large && !c->refusal.status)
        api_fail(&c->refusal, 413, "body_too_large", "", "the request body is larger than max_body_bytes (%lld bytes)",
                 http_cfg->max_body_bytes);
    if (c->refusal.status) {
        http_send_error(&req, &c->refusal);
    } else if (auth_allow(&req)) { /* else auth.c answered 401 */
        if (c->fd >= 0) {
            req.body_fd = c->fd;
            req.body_len = c->len;
        } else if (c->len > 0) {
            req.body = c->body;
            req.body_len = c->len;
        }
        if (c->query) http_route_request(&req);
        else http_fail(&req, 500, "internal", "", "the query of %s %.200s was not read", method, url);
    }
    if (!req.answered) http_fail(&req, 500, "internal", "", "the handler of %s %.200s gave no answer", method, url);
    metrics_http_request(method, req.route, req.status);
    return req.queue_failed ? MHD_NO : MHD_YES;
}

/* The head is in and a token, if needed, is valid: parse the query, check the framing, and
 * admit a streamed body (http_stream_route.admit) or bound a held one, all before any body
 * byte is read. A refusal is left in c->refusal. */
static void http_admit(struct MHD_Connection *conn, const char *url, const char *method, http_conn *c)
{
    const http_stream_route *route = http_streaming_route(method, url);
    unsigned long long declared;
    http_request req;
    api_error e;

    http_parse_query(conn, c);
    if (c->refusal.status || http_declared_length(conn, &declared, &c->refusal) != 0) return;
    if (!route) {
        if (declared != HTTP_LENGTH_CHUNKED && declared > (unsigned long long)http_cfg->max_body_bytes)
            c->too_large = 1; /* answered 413 now; the connection closes after it */
        return;
    }
    if (declared != HTTP_LENGTH_CHUNKED && declared > (unsigned long long)http_cfg->max_upload_bytes) {
        api_fail(&c->refusal, 413, "body_too_large", "",
                 "the upload's %llu bytes are over max_upload_bytes (%lld bytes)", declared, http_cfg->max_upload_bytes);
        return;
    }
    http_request_view(&req, conn, url, method, c);
    memset(&e, 0, sizeof e);
    if (route->admit(&req, declared, &c->hold, &e) != 0) {
        c->refusal = e;
        if (!c->refusal.status) api_fail(&c->refusal, 500, "internal", "", "the upload was refused without a reason");
        return;
    }
    c->stream = route; /* release(hold) in http_completed, whatever happens next */
    c->declared_bytes = declared == HTTP_LENGTH_CHUNKED ? 0 : declared;
    c->fd = memfd_create("attnd-upload", MFD_CLOEXEC);
    if (c->fd < 0) {
        log_error("memfd_create for an upload: %s", strerror(errno));
        api_fail(&c->refusal, 500, "internal", "", "cannot hold the upload: %s", strerror(errno));
    }
}

/* Cut off a streamed body that may not grow: libmicrohttpd (up to 1.0) cannot queue an
 * answer while a body is arriving, so the connection is closed at once, without one. */
static enum MHD_Result http_cut_upload(const char *method, const char *url, http_conn *c, const api_error *e)
{
    log_warn("%s %.200s: upload cut off after %zu bytes, connection closed: %d %s: %s", method, url, c->len, e->status,
             e->code, e->message);
    metrics_http_request(method, c->stream->pattern, e->status);
    if (ftruncate(c->fd, 0) != 0) log_warn("ftruncate of an upload: %s", strerror(errno));
    return MHD_NO;
}

/* A piece of a streamed body: straight to the memfd, never accumulated. */
static enum MHD_Result http_stream_piece(const char *method, const char *url, http_conn *c, const char *data,
                                         size_t n)
{
    unsigned long long total = (unsigned long long)c->len + n;
    api_error e;

    memset(&e, 0, sizeof e);
    if (total > (unsigned long long)http_cfg->max_upload_bytes) { /* only a chunked body gets here */
        api_fail(&e, 413, "body_too_large", "", "the upload passed max_upload_bytes (%lld bytes)",
                 http_cfg->max_upload_bytes);
        return http_cut_upload(method, url, c, &e);
    }
    if (total > c->declared_bytes && c->stream->grow && c->stream->grow(c->hold, total, &e) != 0) {
        if (!e.status) api_fail(&e, 500, "internal", "", "the upload was cut off without a reason");
        return http_cut_upload(method, url, c, &e);
    }
    while (n > 0) {
        ssize_t w = write(c->fd, data, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            log_error("writing an upload to its memfd: %s", strerror(errno));
            return MHD_NO;
        }
        data += w, n -= (size_t)w, c->len += (size_t)w;
    }
    return MHD_YES;
}

/* The access handler: called once when the headers are in, once per piece of body, and
 * once more at the end of the request, when it is dispatched. */
static enum MHD_Result http_access(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                   const char *version, const char *upload_data, size_t *upload_data_size,
                                   void **con_cls)
{
    http_conn *c = *con_cls;
    unsigned long long max = (unsigned long long)http_cfg->max_body_bytes;

    if (!c || *con_cls == &http_mark_many_params || *con_cls == &http_mark_nul_path) {
        void *mark = *con_cls;
        http_guard_head_in(conn);
        c = calloc(1, sizeof *c);
        if (!c) {
            log_error("out of memory for a request");
            *con_cls = NULL;
            return MHD_NO;
        }
        *con_cls = c;
        atomic_fetch_add(&http_requests_in_flight, 1);
        c->fd = -1;
        c->arrived_s = clock_monotonic_s();
        /* A request that needs a token and lacks a valid one is answered 401 now, before any
         * of its body is read: an upload must not stream gigabytes unauthenticated (auth.c). */
        if (!auth_check(method, url, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                                 MHD_HTTP_HEADER_AUTHORIZATION)))
            return http_dispatch(conn, url, method, c);
        if (mark == &http_mark_many_params)
            api_fail(&c->refusal, 400, "too_many_parameters", "", "the query string has more than %d parameters",
                     HTTP_MAX_QUERY_PARAMS);
        else if (mark == &http_mark_nul_path)
            api_fail(&c->refusal, 404, "not_found", "", "no such endpoint: the path holds a NUL byte (%%00)");
        else
            http_admit(conn, url, method, c);
        /* Answered now, the body is never read and the connection closes after the answer;
         * libmicrohttpd sends no 100 Continue once an answer is queued. */
        if (c->refusal.status || c->too_large) return http_dispatch(conn, url, method, c);
        return MHD_YES;
    }

    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (c->too_large) return MHD_YES;
        if (c->fd >= 0) return http_stream_piece(method, url, c, upload_data, n);
        if (c->len + n > max) {
            c->too_large = 1;
            free(c->body);
            c->body = NULL;
            c->len = c->cap = 0;
            return MHD_YES;
        }
        if (c->len + n + 1 > c->cap) {
            size_t cap = c->cap ? c->cap : 4096;
            char *grown;
            while (cap < c->len + n + 1) cap *= 2;
            if (cap > max + 1) cap = (size_t)max + 1;
            grown = realloc(c->body, cap);
            if (!grown) {
                log_error("out of memory for a %zu-byte request body", c->len + n);
                return MHD_NO;
            }
            c->body = grown;
            c->cap = cap;
        }
        memcpy(c->body + c->len, upload_data, n);
        c->len += n;
        c->body[c->len] = '\0';
        return MHD_YES;
    }

    return http_dispatch(conn, url, method, c);
}

static void http_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe)
{
    http_conn *c = *con_cls;

    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) http_guard_waiting(conn);
    *con_cls = NULL;
    if (!c || (void *)c == &http_mark_many_params || (void *)c == &http_mark_nul_path) return;
    if (c->answer_note[0]) {
        double now = clock_monotonic_s(), send_s = now - c->answer_queued_s;
        log_info("%s; sent %zu bytes in %.3f s (%.2f GB/s), %.3f s from the request%s", c->answer_note,
                 c->answer_bytes, send_s, send_s > 0 ? (double)c->answer_bytes / send_s / 1e9 : 0.0,
                 now - c->arrived_s,
                 toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? ""
                 : toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT ? " — cut short: the client went away"
                 : toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? " — cut short: the connection timed out"
                 : toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN ? " — cut short: the server is stopping"
                                                                   : " — cut short by an error");
    }
    if (c->fd >= 0) close(c->fd); /* the upload's memory goes before its budget does */
    if (c->stream) c->stream->release(c->hold);
    cJSON_Delete(c->query);
    free(c->body);
    free(c);
    atomic_fetch_sub(&http_requests_in_flight, 1);
}

/* libmicrohttpd's messages (one per refused connection, bad request, …): at most
 * HTTP_MHD_LOG_PER_S a second, so that a flood cannot fill the disk with them. */
static void http_mhd_log(void *cls, const char *fmt, va_list ap)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static double second_s;
    static unsigned long in_second, dropped;
    unsigned long dropped_before = 0;
    double now = clock_monotonic_s();
    char line[512];
    size_t n;
    int show;

    pthread_mutex_lock(&mu);
    if (now - second_s >= 1.0) {
        dropped_before = dropped;
        dropped = in_second = 0;
        second_s = now;
    }
    show = ++in_second <= HTTP_MHD_LOG_PER_S;
    if (!show) dropped++;
    pthread_mutex_unlock(&mu);
    if (dropped_before) log_warn("libmicrohttpd: %lu more messages not shown", dropped_before);
    if (!show) return;
    vsnprintf(line, sizeof line, fmt, ap);
    n = strlen(line);
    while (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
    log_warn("libmicrohttpd: %s", line);
}

/* Raise the soft limit on open files to what max_connections needs, when the hard one allows. */
static void http_fit_fd_limit(const settings *s)
{
    rlim_t need = (rlim_t)HTTP_MHD_CONNECTION_LIMIT(s->max_connections) + HTTP_SPARE_FDS;
    struct rlimit r;

    if (getrlimit(RLIMIT_NOFILE, &r) != 0) {
        log_warn("getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
        return;
    }
    if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < need) {
        r.rlim_cur = r.rlim_max == RLIM_INFINITY || r.rlim_max >= need ? need : r.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &r) != 0) log_warn("setrlimit(RLIMIT_NOFILE): %s", strerror(errno));
    }
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < need)
        log_warn("max_connections=%d needs about %llu open files; the limit is %llu: connections past it are refused",
                 s->max_connections, (unsigned long long)need, (unsigned long long)r.rlim_cur);
}

/* ---------------------------------------------------------------- start / stop ---------- */

/* Split "host:port" or "[v6]:port" into host (no brackets) and port text. */
static int http_split_listen(const char *listen, char *host, size_t host_len, char *port, size_t port_len)
{
    const char *sep;
    size_t hn;

    if (listen[0] == '[') {
        const char *close = strchr(listen, ']');
        if (!close || close[1] != ':') return -1;
        hn = (size_t)(close - listen - 1);
        if (hn == 0 || hn >= host_len) return -1;
        memcpy(host, listen + 1, hn);
        sep = close + 1;
    } else {
        sep = strrchr(listen, ':');
        if (!sep) return -1;
        hn = (size_t)(sep - listen);
        if (hn == 0 || hn >= host_len) return -1;
        memcpy(host, listen, hn);
    }
    host[hn] = '\0';
    if (!sep[1] || strlen(sep + 1) >= port_len) return -1;
    snprintf(port, port_len, "%s", sep + 1);
    return 0;
}

int http_start(const settings *s, char *err, size_t err_len)
{
    struct addrinfo hints, *ai = NULL;
    const union MHD_DaemonInfo *info;
    char host[128], port[16];
    /* MHD_USE_ITC: MHD_quiesce_daemon needs it in this threading mode. MHD_USE_POLL: select
     * would refuse every connection whose socket is past FD_SETSIZE (1024). */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG |
                     MHD_USE_ITC | MHD_USE_POLL;
    unsigned bound_port;
    int rc, v6, tls_on;
    struct MHD_OptionItem tls_opts[TLS_OPTIONS_MAX]; /* tls.c: empty without TLS */

    if (http_split_listen(s->listen, host, sizeof host, port, sizeof port) != 0) {
        snprintf(err, err_len, "listen '%s' is not host:port or [IPv6]:port", s->listen);
        return -1;
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0 || !ai) {
        snprintf(err, err_len, "cannot resolve listen address '%s': %s", s->listen,
                 rc ? gai_strerror(rc) : "no address");
        return -1;
    }
    v6 = ai->ai_family == AF_INET6;
    if (v6) flags |= MHD_USE_IPv6;

    if (tls_prepare(s, tls_opts, &flags, &tls_on, err, err_len) != 0) {
        freeaddrinfo(ai);
        return -1;
    }
    http_cfg = s;
    http_fit_fd_limit(s);
    if (http_guard_start(s, err, err_len) != 0) {
        freeaddrinfo(ai);
        http_cfg = NULL;
        tls_release();
        return -1;
    }
    errno = 0;
    http_daemon = MHD_start_daemon(flags, (uint16_t)atoi(port), NULL, NULL, &http_access, NULL,
                                   MHD_OPTION_EXTERNAL_LOGGER, &http_mhd_log, NULL, /* first: see MHD docs */
                                   MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                   MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MHD_CONNECTION_LIMIT(s->max_connections),
                                   MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->max_connections_per_ip,
                                   MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->idle_timeout_s,
                                   MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONNECTION_MEMORY_BYTES,
                                   MHD_OPTION_NOTIFY_CONNECTION, &http_guard_notify, NULL,
                                   MHD_OPTION_URI_LOG_CALLBACK, &http_uri_seen, NULL,
                                   MHD_OPTION_NOTIFY_COMPLETED, &http_completed, NULL,
                                   MHD_OPTION_ARRAY, tls_opts,
                                   MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!http_daemon) {
        snprintf(err, err_len, "cannot listen on %s%s%s", s->listen, errno ? ": " : " (see the log above)",
                 errno ? strerror(errno) : "");
        http_guard_stop();
        http_cfg = NULL;
        tls_release();
        return -1;
    }

    info = MHD_get_daemon_info(http_daemon, MHD_DAEMON_INFO_BIND_PORT);
    if (MHD_FAILED(info != NULL && info->port != 0, "MHD_get_daemon_info(MHD_DAEMON_INFO_BIND_PORT)")) {
        snprintf(err, err_len, "listening on %s, but libmicrohttpd does not say which port", s->listen);
        http_stop();
        return -1;
    }
    bound_port = info->port;

    /* Tests and scripts wait for exactly this line. */
    printf("attnd listening on http%s://%s%s%s:%u\n", tls_on ? "s" : "", v6 ? "[" : "", host, v6 ? "]" : "",
           bound_port);
    fflush(stdout);
    log_info("listening on http%s://%s%s%s:%u", tls_on ? "s" : "", v6 ? "[" : "", host, v6 ? "]" : "", bound_port);
    return 0;
}

void http_quiesce(void)
{
    MHD_socket fd;

    if (!http_daemon) return;
    fd = MHD_quiesce_daemon(http_daemon);
    if (MHD_FAILED(fd != MHD_INVALID_SOCKET, "MHD_quiesce_daemon")) return;
    if (close(fd) != 0) log_warn("closing the listening socket: %s", strerror(errno));
}

int http_in_flight(void) { return atomic_load(&http_requests_in_flight); }

int http_client_gone(const http_request *req)
{
    const union MHD_ConnectionInfo *info =
        req->conn ? MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
    struct pollfd p;

    if (!info) return 0;
    p.fd = info->connect_fd;
    p.events = POLLRDHUP;
    p.revents = 0;
    /* The peer closed its side (POLLRDHUP) or the socket failed: nobody will read the answer. */
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

void http_stop(void)
{
    if (!http_daemon) return;
    MHD_stop_daemon(http_daemon); /* every connection CLOSED: the peer table is empty */
    http_daemon = NULL;
    http_guard_stop();
    tls_release();
}
