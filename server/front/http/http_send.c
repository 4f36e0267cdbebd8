/* http_send.c — the answers of http.h: a buffer, JSON, an error, a file (sendfile) or a
 * body produced while it is sent. Each queues exactly one libmicrohttpd response; a second
 * answer to the same request is dropped and logged, and a response libmicrohttpd refuses
 * closes the connection (http_request.queue_failed).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/front/http/http.h"
#include "server/front/http/http_conn.h"
#include "server/front/http/mhd_check.h"

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

/* Claim req's one answer, with status. 1: go on and queue it. 0: it was answered already;
 * the second answer is dropped and logged (the caller frees what it would have sent). */
static int http_claim_answer(http_request *req, int status)
{
    if (req->answered) {
        log_error("%s %s: a second answer (%d) was dropped", req->method, req->path, status);
        return 0;
    }
    req->answered = 1;
    req->status = status;
    return 1;
}

/* Queue buf (malloc'd, len bytes; ownership passes to libmicrohttpd) as the answer. */
static void http_send_typed(http_request *req, int status, const char *content_type, char *buf, size_t len)
{
    struct MHD_Response *resp;

    if (!http_claim_answer(req, status)) {
        free(buf);
        return;
    }
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

    if (!http_claim_answer(req, status)) {
        close(fd);
        return;
    }
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

    if (!http_claim_answer(req, status)) {
        done(cls, 0, 0);
        return;
    }
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

void http_send_error(http_request *req, const api_error *e)
{
    cJSON *body = api_error_json(e);

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
