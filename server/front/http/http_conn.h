/* http_conn.h — what the files of the HTTP front door share, private to them: one request's
 * state from its head to its end, and the step each file takes on it. http.c owns the
 * daemon and a request's life and calls down: http_framing.c frames its head, http_body.c
 * reads its body, http_route.c finds its route, http_send.c queues its answer (each calls
 * only the ones after it).
 */
#ifndef HTTP_CONN_H
#define HTTP_CONN_H

#include <stddef.h>

#include <microhttpd.h>

#include "server/front/http/body_writer.h"
#include "server/front/http/http.h"

/* Per-request state (con_cls), from the access handler's first call to http_completed. */
typedef struct http_conn {
    const settings *cfg;              /* what http_start was given */
    const http_route_table *routes;
    char *body;
    size_t len, cap;
    int fd;        /* streaming routes: the memfd the body goes to; -1 otherwise */
    body_writer *writer; /* writes the body to fd on a thread of its own; NULL: written here */
    int writer_tried;    /* body_writer_start was called (once per body) */
    int too_large; /* the body passed max_body_bytes: dropped, answered 413 */
    int discarding; /* a streamed body refused mid-way: the rest dropped, c->refusal answered */
    unsigned long long discarded_bytes; /* dropped so far (too_large or discarding) */
    int released;  /* the stream route's release ran (http_body_release) */
    cJSON *query;  /* the query string, parsed when the head is in; NULL when refused before */
    api_error refusal; /* status != 0: answered this instead of routing */
    api_error cut;     /* status != 0: a body was cut off mid-way (closed, unanswered) */
    const http_stream_route *stream; /* admitted by this streaming route: release(hold) at the end */
    void *hold;
    unsigned long long declared_length; /* Content-Length, HTTP_LENGTH_CHUNKED, or 0 (http_body_frame) */
    unsigned long long declared_bytes; /* a streamed body's Content-Length; 0 when chunked */
    int close_after;   /* answer with Connection: close (a head framed two ways) */
    int expects_body;  /* a body was announced and admitted: its deadline runs until dispatch */
    double arrived_s, received_s; /* clock_monotonic_s: headers in; last body byte in */
    /* An answer from a file (http_send_fd) with a log note: logged once it has been sent. */
    double answer_queued_s;
    size_t answer_bytes;
    char answer_note[256];
} http_conn;

/* http_route.c: the request as a handler (or a streaming route's admit) sees it. */
void http_request_view(http_request *req, struct MHD_Connection *conn, const char *url, const char *method,
                       http_conn *c);
/* http_route.c: parse the query string into c->query; a refusal goes to c->refusal. */
void http_parse_query(struct MHD_Connection *conn, http_conn *c);
/* http_route.c: the streaming route of routes for method and url; NULL when its body is held. */
const http_stream_route *http_streaming_route(const http_route_table *routes, const char *method, const char *url);
/* http_route.c: call the handler of req's route, or answer 404 / 405. */
void http_route_request(http_request *req);
/* http_route.c: the observer's labels of a request (http_request_observer): *method_label and
 * *route_label point into the table or at constant strings. */
void http_route_labels(const http_route_table *routes, const char *method, const char *route,
                       const char **method_label, const char **route_label);

/* http_framing.c: once the head is in, before anything else: the body's declared length to
 * c->declared_length, or a head that could be framed two ways refused in c->refusal (and the
 * connection closed after the answer: what follows it cannot be trusted to be a request). */
void http_frame(struct MHD_Connection *conn, const char *version, http_conn *c);
/* http_body.c: framed, its query parsed, before any body byte: bound or admit the body. A
 * refusal goes to c->refusal. */
void http_body_admit(struct MHD_Connection *conn, const char *url, const char *method, http_conn *c);
/* http_body.c: n bytes of body, to the memfd or held in memory, or dropped once the body is
 * refused (its answer waits for its end). MHD_NO closes the connection (a body cut off leaves
 * its reason in c->cut). */
enum MHD_Result http_body_piece(const char *method, const char *url, http_conn *c, const char *data, size_t n);
/* http_body.c: the body's last byte is in: a streamed one written whole to its memfd before
 * the handler reads it (a failed write becomes c->refusal). */
void http_body_complete(http_conn *c);
/* http_body.c: release the stream route's hold, once (when its body is refused, or at the end). */
void http_body_release(http_conn *c);
/* http_body.c: the request ended: close the memfd, release the route's hold, free the body. */
void http_body_end(http_conn *c);

#endif
