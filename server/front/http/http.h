/* http.h — the HTTP front door: libmicrohttpd glue (http.c, http_route.c, http_body.c,
 * http_send.c). The routes are the caller's: http_start is handed the table.
 *
 * One thread per connection (MHD_USE_THREAD_PER_CONNECTION): a synchronous run blocks its
 * handler while the job runs, and other connections go on. http.c reads the request (body
 * up to max_body_bytes, else 413), parses the query string, finds the route in the table
 * (404 unknown path, 405 wrong method with Allow) and calls its handler,
 * which answers through exactly one http_send_* call. Whatever it refuses before a handler
 * (a bad query, framing or upload size, 401) is the same JSON error; connections are bounded
 * per address, in number, and in how long a request head may take (http.c, and
 * docs/operations.md "Security model").
 */
#ifndef HTTP_H
#define HTTP_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "common/api_error.h"
#include "common/settings.h"

#define HTTP_MAX_EXTRA_HEADERS 4

/* One request, as a handler sees it. Everything is owned by http.c and valid until the
 * handler returns. */
typedef struct http_request {
    const char *method;      /* "GET", "POST", … (HEAD is routed as GET) */
    const char *path;        /* without the query string */
    const char *id;          /* the {id} segment when the route pattern ends in /{id}, else NULL */
    const cJSON *query;      /* query-string parameters: an object of strings, never NULL */
    const char *body;        /* NUL-terminated copy of the body; NULL when there is none */
    size_t body_len;         /* bytes of body, the terminating NUL not counted */
    int body_fd;             /* streaming routes: a memfd holding the body_len bytes (body is
                                NULL); -1 otherwise. Owned by http.c: dup it to keep it */
    double arrived_s;        /* CLOCK_MONOTONIC seconds (clock_monotonic_s) when the headers were in */
    double received_s;       /* … when the last body byte was in (≈ arrived_s without a
                                body): received_s - arrived_s is the body's arrival time */
    const settings *settings;

    /* private to http.c and its http_*.c companions */
    void *conn;              /* struct MHD_Connection * */
    void *conn_state;        /* http.c's per-request state (http_conn.h) */
    int answered;            /* an http_send_* call queued the answer (or failed to) */
    int status;              /* the status answered (for /metrics) */
    const char *route;       /* the pattern of the route that handled it; NULL when none */
    char id_buf[128];        /* the {id} segment, NUL-terminated */
    int queue_failed;        /* libmicrohttpd refused the answer: close the connection */
    void *hold;              /* streaming routes: what the route's admit set (http_stream_route) */
    int n_headers;
    char header_name[HTTP_MAX_EXTRA_HEADERS][32];
    char header_value[HTTP_MAX_EXTRA_HEADERS][96];
} http_request;

/* A handler answers with exactly one http_send_* call. */
typedef void (*http_handler)(http_request *req);

/* A route: method and path pattern, either exact ("/v1/variants") or with one parameter
 * segment ("/v1/runs/{id}", "/v1/runs/{id}/trace": one non-empty segment without '/',
 * under 128 bytes), followed by an optional literal suffix. */
typedef struct http_route {
    const char *method;
    const char *pattern;
    http_handler handler;
    const char *summary;     /* one line, for docs and logs */
} http_route;

/* A POST route whose body streams: it is written to a memfd as it arrives
 * (http_request.body_fd), never held in memory, and bounded by max_upload_bytes and by the
 * route's own admission control instead of max_body_bytes. */
#define HTTP_LENGTH_CHUNKED (~0ULL) /* admit's declared length of a chunked body */
typedef struct http_stream_route {
    const char *pattern;
    /* When the headers are in, before any body byte is read (req has method, path, query and
     * settings; no body). declared: the Content-Length, or HTTP_LENGTH_CHUNKED. 0 to admit,
     * with *hold set (NULL allowed); -1 with e to refuse: e is answered at once, the body is
     * never read and the connection closes. */
    int (*admit)(const http_request *req, unsigned long long declared, void **hold, api_error *e);
    /* Before the body grows to total bytes, when that is more than was declared (a chunked
     * body: every piece). 0 to go on; -1 with e to refuse it: the hold is released, the rest
     * of the body read and thrown away (1 GiB at most, else the connection is closed
     * unanswered) and e answered. NULL: only max_upload_bytes bounds it. */
    int (*grow)(void *hold, unsigned long long total, api_error *e);
    /* Once the memfd of a body of declared length exists, before its first byte lands: fd stays
     * http's (closed when the request ends; dup it to keep it), and its size is how much of the
     * body has landed, written in order. The route may read what has while the rest arrives; it
     * must return at once. NULL: only the handler reads the body. */
    void (*landing)(void *hold, const http_request *req, int fd);
    /* Once, when the request ends, whatever happened; after the handler when it ran. */
    void (*release)(void *hold);
} http_stream_route;

/* What http_start serves: the routes, and the POST routes whose body streams (ended by an
 * entry whose pattern is NULL). Both must outlive the daemon. */
typedef struct http_route_table {
    const http_route *routes;
    size_t count;
    const http_stream_route *stream;
} http_route_table;

/* Told of every request once it ends, with labels taken from the route table only, never
 * from what the client sent: method the method of the route that answered (HEAD for a GET
 * route), else one of the table's methods, else "other"; route the pattern of the route that
 * handled it, else "unmatched" (an unknown path, a wrong method, or refused before routing,
 * such as a 401); status the one answered (0 when nothing was sent; a streamed upload cut
 * off mid-body reports the status of its refusal); seconds from its head in to its answer
 * queued (the body's arrival included). So junk shares a handful of label sets.
 * Called on the connection's thread, so it must be thread-safe and must not block. */
typedef void (*http_request_observer)(const char *method, const char *route, int status, double seconds);

/* Set the observer (NULL: none). Set it before http_start: it is read without a lock. */
void http_set_request_observer(http_request_observer observer);

/* The positive integer in the route's {id} segment (a run or study id), or -1 after answering
 * 400 bad_value that says it is `what` ("a run id"). */
long long http_id_segment(http_request *req, const char *what);

/* The query parameter key of req as a string; NULL when absent. */
const char *http_query_param(const http_request *req, const char *key);

/* The request header name of req (the first, case-insensitive name); NULL when absent. */
const char *http_header(const http_request *req, const char *name);

/* Has the client of req gone away (closed or reset its connection)? For handlers that wait
 * (a queued synchronous run): 1 gone, 0 still there. Never blocks, never reads request bytes. */
int http_client_gone(const http_request *req);

/* Listen on s->listen and serve routes until http_stop. Prints one line on stdout once
 * listening:
 *   attnd listening on http://HOST:PORT
 * (the real port when s->listen asks for port 0). s and routes must outlive the daemon. 0, or
 * -1 with err filled. */
int http_start(const settings *s, const http_route_table *routes, char *err, size_t err_len);

/* Stop accepting connections; requests in flight go on (shutdown, first step). */
void http_quiesce(void);

/* Requests between their headers and the end of their answer (idle keep-alive
 * connections do not count). */
int http_in_flight(void);

/* Stop: close every connection and wait for the handlers in flight to return (an answer
 * not yet sent is lost: call http_quiesce and wait for http_in_flight() == 0 first). */
void http_stop(void);

/* Add a header to the coming answer (e.g. Retry-After). 0, or -1 when there is no room. */
int http_add_header(http_request *req, const char *name, const char *value);

/* Answer with a JSON value: Content-Type application/json, printed unformatted plus "\n".
 * Does not take ownership of body. */
void http_send_json(http_request *req, int status, const cJSON *body);

/* Answer with text that already is JSON (e.g. a stored record), sent as is plus "\n". */
void http_send_json_text(http_request *req, int status, const char *text, size_t len);

/* Answer with bytes of any type (a static file, /metrics text). Copies data. */
void http_send_bytes(http_request *req, int status, const char *content_type, const void *data, size_t len);

/* Answer with the size bytes of fd from its start (a memfd: libmicrohttpd sends it with
 * sendfile, never copying it into memory; read + send under TLS). Takes ownership of fd,
 * whatever happens. log_note, when not NULL, is logged at info level once the last byte has
 * left (or the client went away), followed by how long the send took and its rate. */
void http_send_fd(http_request *req, int status, const char *content_type, int fd, size_t size,
                  const char *log_note);

/* The reader of a streamed answer (http_send_stream): up to max bytes of the body from
 * offset pos into buf. Returns how many (> 0; it may block until some are ready), or -1
 * when the body cannot be completed: the connection is then closed, so the client sees a
 * body shorter than its Content-Length. Called on the connection's thread. */
typedef long (*http_stream_reader)(void *cls, unsigned long long pos, char *buf, size_t max);

/* Called once libmicrohttpd is done with a streamed answer: sent = bytes the reader gave
 * (all size of them when complete = 1; complete = 0: the client went away, the reader
 * failed, or the answer could not be queued). cls may be freed here. */
typedef void (*http_stream_done)(void *cls, unsigned long long sent, int complete);

/* Answer with size bytes that the reader produces as the connection sends them (a body
 * that is still being written), block_size bytes per call at most. Content-Length is
 * size. done(cls, …) is called exactly once, whatever happens (also when this fails). */
void http_send_stream(http_request *req, int status, const char *content_type, unsigned long long size,
                      size_t block_size, http_stream_reader reader, http_stream_done done, void *cls);

/* Answer {"error":{"code","message","field"}} with e->status; field null when empty. */
void http_send_error(http_request *req, const api_error *e);

/* api_fail + http_send_error in one call. */
void http_fail(http_request *req, int status, const char *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
