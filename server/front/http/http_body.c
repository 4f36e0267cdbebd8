/* http_body.c — request bodies: the framing of the head (Content-Length, chunked), and the
 * body itself, either held in memory up to max_body_bytes (413 past it) or, for the routes
 * of http_stream_routes, admitted by the route before any byte is read and written to a
 * memfd as it arrives, bounded by max_upload_bytes and the route's grow.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/log.h"
#include "server/front/http/http.h"
#include "server/front/http/http_conn.h"

/* The framing headers: every Content-Length and the Transfer-Encoding, the Host headers, and
 * the first header whose name is no token. */
typedef struct framing_ctx {
    const char *length, *encoding; /* the first of each; NULL when absent */
    int lengths_differ;
    int hosts;
    const char *bad_name;          /* a name with a byte no header name has (RFC 9110 tchar) */
} framing_ctx;

/* Whether name is an RFC 9110 token: no white space (so none before the colon), no separators. */
static int http_token(const char *name, size_t len)
{
    size_t i;

    if (len == 0) return 0;
    for (i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch <= ' ' || ch >= 127 || strchr("\"(),/:;<=>?@[\\]{}", ch)) return 0;
    }
    return 1;
}

static enum MHD_Result http_framing_add(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_len,
                                        const char *value, size_t value_len)
{
    framing_ctx *f = cls;

    if (!key) return MHD_YES;
    if (!f->bad_name && !http_token(key, key_len)) f->bad_name = key;
    if (!strcasecmp(key, MHD_HTTP_HEADER_HOST)) f->hosts++;
    if (!value) return MHD_YES;
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
 * 2^64, and reads by the first one; a head a proxy in front could read another way is
 * refused here (RFC 9112's MUSTs): a header name that is no token (white space before its
 * colon: "Content-Length : 5" names another header to libmicrohttpd, a length to some
 * proxies), no Host or two in HTTP/1.1, two Content-Lengths that differ, both framings.
 * 0, or -1 with e filled. */
static int http_declared_length(struct MHD_Connection *conn, const char *version, unsigned long long *declared,
                                api_error *e)
{
    framing_ctx f;

    memset(&f, 0, sizeof f);
    *declared = 0;
    if (MHD_get_connection_values_n(conn, MHD_HEADER_KIND, http_framing_add, &f) < 0)
        return api_fail(e, 500, "internal", "", "cannot read the request headers");
    if (f.bad_name)
        return api_fail(e, 400, "bad_header", "", "header name '%.40s' is not a token (white space before a colon, "
                        "or a folded line)", f.bad_name);
    if (f.hosts > 1 || (f.hosts == 0 && version && !strcmp(version, MHD_HTTP_VERSION_1_1)))
        return api_fail(e, 400, "bad_header", "", "an HTTP/1.1 request has exactly one Host header; this one has %d",
                        f.hosts);
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

void http_body_frame(struct MHD_Connection *conn, const char *version, http_conn *c)
{
    if (http_declared_length(conn, version, &c->declared_length, &c->refusal) != 0) c->close_after = 1;
}

/* The head is in, framed, its query parsed and a token, if needed, valid: admit a streamed
 * body (http_stream_route.admit) or bound a held one, before any body byte is read. A
 * refusal is left in c->refusal. */
void http_body_admit(struct MHD_Connection *conn, const char *url, const char *method, http_conn *c)
{
    const settings *cfg = c->cfg;
    const http_stream_route *route = http_streaming_route(c->routes, method, url);
    unsigned long long declared = c->declared_length;
    http_request req;
    api_error e;

    /* A method without a body (GET, HEAD, DELETE) that announces one is refused before a byte
     * of it is read: there is nothing it could be for, and reading it would let a client hold a
     * connection at no cost. */
    if (declared != 0 && (!strcmp(method, "GET") || !strcmp(method, "HEAD") || !strcmp(method, "DELETE"))) {
        api_fail(&c->refusal, 400, "body_not_allowed", "", "%s requests carry no body; this one announces %s", method,
                 declared == HTTP_LENGTH_CHUNKED ? "a chunked one" : "one");
        return;
    }
    c->expects_body = declared != 0;
    if (!route) {
        if (declared != HTTP_LENGTH_CHUNKED && declared > (unsigned long long)cfg->max_body_bytes)
            c->too_large = 1; /* answered 413 now; the connection closes after it */
        return;
    }
    if (declared != HTTP_LENGTH_CHUNKED && declared > (unsigned long long)cfg->max_upload_bytes) {
        api_fail(&c->refusal, 413, "body_too_large", "",
                 "the upload's %llu bytes are over max_upload_bytes (%lld bytes)", declared, cfg->max_upload_bytes);
        return;
    }
    http_request_view(&req, conn, url, method, c);
    memset(&e, 0, sizeof e);
    if (route->admit(&req, declared, &c->hold, &e) != 0) {
        c->refusal = e;
        if (!c->refusal.status) api_fail(&c->refusal, 500, "internal", "", "the upload was refused without a reason");
        return;
    }
    c->stream = route; /* release(hold) in http_body_end, whatever happens next */
    c->declared_bytes = declared == HTTP_LENGTH_CHUNKED ? 0 : declared;
    c->fd = memfd_create("attnd-upload", MFD_CLOEXEC);
    if (c->fd < 0) {
        log_error("memfd_create for an upload: %s", strerror(errno));
        api_fail(&c->refusal, 500, "internal", "", "cannot hold the upload: %s", strerror(errno));
    }
}

/* Cut off a streamed body that may not grow: libmicrohttpd (up to 1.0) cannot queue an
 * answer while a body is arriving, so the connection is closed at once, without one. The
 * reason stays in c->cut for http.c to report. */
static enum MHD_Result http_cut_upload(const char *method, const char *url, http_conn *c, const api_error *e)
{
    log_warn("%s %.200s: upload cut off after %zu bytes, connection closed: %d %s: %s", method, url, c->len, e->status,
             e->code, e->message);
    c->cut = *e;
    if (ftruncate(c->fd, 0) != 0) log_warn("ftruncate of an upload: %s", strerror(errno));
    return MHD_NO;
}

/* A piece of a streamed body: straight to the memfd, never accumulated. */
static enum MHD_Result http_stream_piece(const char *method, const char *url, http_conn *c, const char *data,
                                         size_t n)
{
    const settings *cfg = c->cfg;
    unsigned long long total = (unsigned long long)c->len + n;
    api_error e;

    memset(&e, 0, sizeof e);
    if (total > (unsigned long long)cfg->max_upload_bytes) { /* only a chunked body gets here */
        api_fail(&e, 413, "body_too_large", "", "the upload passed max_upload_bytes (%lld bytes)",
                 cfg->max_upload_bytes);
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

/* A piece of a held body: appended to c->body (NUL-terminated), or dropped once the body
 * has passed max_body_bytes (answered 413 at its end). */
static enum MHD_Result http_held_piece(http_conn *c, const char *data, size_t n)
{
    unsigned long long max = (unsigned long long)c->cfg->max_body_bytes;

    if (c->len + n > max) {
        c->too_large = 1;
        free(c->body);
        c->body = NULL;
        c->len = c->cap = 0;
        return MHD_YES;
    }
    if (c->len + n + 1 > c->cap) { /* doubling, but never past max_body_bytes + 1 */
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
    memcpy(c->body + c->len, data, n);
    c->len += n;
    c->body[c->len] = '\0';
    return MHD_YES;
}

enum MHD_Result http_body_piece(const char *method, const char *url, http_conn *c, const char *data, size_t n)
{
    if (c->too_large) return MHD_YES;
    if (c->fd >= 0) return http_stream_piece(method, url, c, data, n);
    return http_held_piece(c, data, n);
}

void http_body_end(http_conn *c)
{
    if (c->fd >= 0) close(c->fd); /* the upload's memory goes before its budget does */
    if (c->stream) c->stream->release(c->hold);
    free(c->body);
}
