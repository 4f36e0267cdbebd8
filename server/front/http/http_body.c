/* http_body.c — request bodies, once http_framing.c has framed the head: held in memory up to max_body_bytes (413 past it) or, for the routes
 * of http_stream_routes, admitted by the route before any byte is read and written to a
 * memfd as it arrives (by body_writer.c's thread), bounded by max_upload_bytes and the
 * route's grow.
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
    } else if (declared != HTTP_LENGTH_CHUNKED && route->landing) {
        route->landing(c->hold, &req, c->fd);
    }
}

/* The most body bytes thrown away so that a refused request's client can read its answer
 * (nginx's lingering close, here before the answer: libmicrohttpd up to 1.0 cannot queue an
 * answer while a body arrives). The body's deadline bounds the time. */
#define HTTP_DISCARD_BYTES (1ull << 30)

/* Cut off a body past HTTP_DISCARD_BYTES of discarding: the connection is closed at once,
 * without an answer. The reason stays in c->cut for http.c to report. */
static enum MHD_Result http_cut_upload(const char *method, const char *url, http_conn *c, const api_error *e)
{
    log_warn("%s %.200s: body cut off after %llu bytes thrown away, connection closed: %d %s: %s", method, url,
             c->discarded_bytes, e->status, e->code, e->message);
    c->cut = *e;
    return MHD_NO;
}

/* A streamed body that may not grow: its memory and hold go now, the rest of it is read and
 * thrown away (http_discard_piece), and e is answered at its end. */
static enum MHD_Result http_refuse_rest(const char *method, const char *url, http_conn *c, const api_error *e)
{
    log_warn("%s %.200s: upload refused after %zu bytes, the rest thrown away: %d %s: %s", method, url, c->len,
             e->status, e->code, e->message);
    c->refusal = *e;
    c->discarding = 1;
    body_writer_abort(c->writer);
    c->writer = NULL;
    close(c->fd); /* the upload's memory goes before its budget does */
    c->fd = -1;
    http_body_release(c);
    return MHD_YES;
}

/* A piece of a body that is refused already: counted and dropped, up to HTTP_DISCARD_BYTES. */
static enum MHD_Result http_discard_piece(const char *method, const char *url, http_conn *c, size_t n)
{
    api_error e;

    c->discarded_bytes += n;
    if (c->discarded_bytes <= HTTP_DISCARD_BYTES) return MHD_YES;
    e = c->refusal;
    if (!e.status) api_fail(&e, 413, "body_too_large", "", "the request body is larger than max_body_bytes");
    return http_cut_upload(method, url, c, &e);
}

/* A streamed body gets its writer thread (body_writer.h) once this much of it is in: a small
 * upload, or one that trickles, costs no thread and no ring. */
#define HTTP_WRITER_AFTER_BYTES ((size_t)1 << 20)

/* A piece of a streamed body: to the memfd, never accumulated; past HTTP_WRITER_AFTER_BYTES
 * through the writer's ring, written on its thread. */
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
        return http_refuse_rest(method, url, c, &e);
    }
    if (total > c->declared_bytes && c->stream->grow && c->stream->grow(c->hold, total, &e) != 0) {
        if (!e.status) api_fail(&e, 500, "internal", "", "the upload was refused without a reason");
        return http_refuse_rest(method, url, c, &e);
    }
    if (!c->writer && !c->writer_tried && c->len >= HTTP_WRITER_AFTER_BYTES) {
        c->writer_tried = 1;
        c->writer = body_writer_start(c->fd); /* NULL: written on this thread, as before */
        if (!c->writer) log_warn("no writer thread for an upload: the rest of its body is written as it is received");
    }
    if (c->writer) {
        char err[128];
        if (body_writer_put(c->writer, data, n, err, sizeof err) != 0) {
            log_error("writing an upload to its memfd: %s", err);
            return MHD_NO;
        }
        c->len += n;
        return MHD_YES;
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
    if (c->too_large || c->discarding) return http_discard_piece(method, url, c, n);
    if (c->fd >= 0) return http_stream_piece(method, url, c, data, n);
    return http_held_piece(c, data, n);
}

void http_body_complete(http_conn *c)
{
    char err[128];
    body_writer *w = c->writer;

    if (!w) return;
    c->writer = NULL;
    if (body_writer_finish(w, err, sizeof err) == 0 || c->refusal.status) return;
    log_error("writing an upload to its memfd: %s", err);
    api_fail(&c->refusal, 500, "internal", "", "cannot hold the upload: %s", err);
}

void http_body_release(http_conn *c)
{
    if (c->stream && !c->released) c->stream->release(c->hold);
    c->released = 1;
}

void http_body_end(http_conn *c)
{
    body_writer_abort(c->writer); /* a body that never ended: the client went away */
    c->writer = NULL;
    if (c->fd >= 0) close(c->fd); /* the upload's memory goes before its budget does */
    http_body_release(c);
    free(c->body);
}
