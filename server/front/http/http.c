/* http.c — libmicrohttpd glue: listen, take each request from its head to its end, and
 * dispatch it (http.h). Its route is found by http_route.c, its body read by http_body.c,
 * its answer queued by http_send.c (what they share: http_conn.h).
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
 * under pressure) are http_guard.c's. Who counts the requests is not this file's business:
 * it reports each one to the observer set with http_set_request_observer.
 *
 * Every libmicrohttpd call is checked (MHD_FAILED, mhd_check.h): a failure is logged with
 * the call, file and line, and the connection is closed rather than the front crashing.
 */
#include "server/front/http/http.h"

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
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/front/http/auth.h"
#include "server/front/http/http_conn.h"
#include "server/front/http/http_guard.h"
#include "server/front/http/mhd_check.h"
#include "server/front/http/tls.h"

#define HTTP_MAX_QUERY_PARAMS 100   /* more get 400 too_many_parameters (the run has ~30) */
#define HTTP_MHD_LOG_PER_S 20       /* libmicrohttpd lines logged per second; the rest counted */
#define HTTP_SPARE_FDS 256          /* file descriptors besides connections: memfds, SQLite, workers */

/* libmicrohttpd's own connection limit: max_connections, which http.c enforces on the
 * connections it has not cut, plus room for the cut ones until libmicrohttpd has closed
 * them (its count includes them; at its limit it refuses every new connection). A flood
 * turns its connections over faster than a loaded machine runs the cut ones' threads to
 * their end: with max/4 of room, 64 connections under 2 busy cores refused the probe 3
 * times in 5 runs (tests/api/test_reliability.py); one max of room keeps them apart. */
#define HTTP_MHD_CONNECTION_LIMIT(max) (2 * (max) + 16)

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
static const http_route_table *http_table;
static atomic_int http_requests_in_flight; /* live http_conn states */

static http_request_observer http_observer; /* set before http_start, read by every request */

void http_set_request_observer(http_request_observer observer) { http_observer = observer; }

/* Tell the observer that a request ended, in the table's labels. */
static void http_report_request(const char *method, const char *route, int status, const http_conn *c)
{
    const char *method_label, *route_label;

    if (!http_observer) return;
    http_route_labels(http_table, method, route, &method_label, &route_label);
    http_observer(method_label, route_label, status, clock_monotonic_s() - c->arrived_s);
}

/* What http_uri_seen hands the access handler as con_cls instead of an http_conn: a
 * refusal decided from the raw request line. */
static char http_mark_many_params, http_mark_nul_path;

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

/* The request's Authorization header; NULL when it has none. */
static const char *http_authorization(struct MHD_Connection *conn)
{
    return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
}

/* Is req allowed (auth.h)? 1: go on. 0: it was answered 401, with WWW-Authenticate. */
static int http_authorized(http_request *req)
{
    const char *authorization = http_authorization(req->conn);

    if (auth_check(req->method, req->path, authorization)) return 1;
    if (http_add_header(req, MHD_HTTP_HEADER_WWW_AUTHENTICATE, AUTH_CHALLENGE) != 0) {
        http_fail(req, 500, "internal", "", "cannot set the WWW-Authenticate header");
        return 0;
    }
    http_fail(req, 401, "unauthorized", "", "%s", auth_refusal_message(authorization));
    return 0;
}

/* Answer the request: c->refusal when set, else auth (401) and the route. */
static enum MHD_Result http_dispatch(struct MHD_Connection *conn, const char *url, const char *method,
                                     http_conn *c)
{
    http_request req;

    http_body_complete(c);
    c->received_s = clock_monotonic_s();
    if (c->expects_body) http_guard_body_ends(conn);
    http_request_view(&req, conn, url, method, c);
    if (c->too_large && !c->refusal.status)
        api_fail(&c->refusal, 413, "body_too_large", "", "the request body is larger than max_body_bytes (%lld bytes)",
                 http_cfg->max_body_bytes);
    if (c->refusal.status) {
        if (c->close_after && http_add_header(&req, MHD_HTTP_HEADER_CONNECTION, "close") != 0)
            log_warn("%s %.200s: cannot set Connection: close", method, url);
        http_send_error(&req, &c->refusal);
    } else if (http_authorized(&req)) { /* else answered 401 */
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
    http_report_request(method, req.route, req.status, c);
    return req.queue_failed ? MHD_NO : MHD_YES;
}

/* Answer a request whose announced body is left unread: the connection closes after the
 * answer, lingering so that a client still sending reads it (http_linger.h). */
static enum MHD_Result http_dispatch_unread(struct MHD_Connection *conn, const char *url, const char *method,
                                            http_conn *c)
{
    if (c->declared_length != 0 || c->close_after) http_guard_linger(conn);
    return http_dispatch(conn, url, method, c);
}

/* The access handler: called once when the headers are in, once per piece of body, and
 * once more at the end of the request, when it is dispatched. */
static enum MHD_Result http_access(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                   const char *version, const char *upload_data, size_t *upload_data_size,
                                   void **con_cls)
{
    http_conn *c = *con_cls;

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
        c->cfg = http_cfg;
        c->routes = http_table;
        c->fd = -1;
        c->arrived_s = clock_monotonic_s();
        /* A head that could be framed two ways is refused first, whoever sent it; then a
         * request that needs a token and lacks a valid one is answered 401 now, before any of
         * its body is read: an upload must not stream gigabytes unauthenticated (auth.c). */
        http_frame(conn, version, c);
        if (c->refusal.status || !auth_check(method, url, http_authorization(conn)))
            return http_dispatch_unread(conn, url, method, c);
        if (mark == &http_mark_many_params)
            api_fail(&c->refusal, 400, "too_many_parameters", "", "the query string has more than %d parameters",
                     HTTP_MAX_QUERY_PARAMS);
        else if (mark == &http_mark_nul_path)
            api_fail(&c->refusal, 404, "not_found", "", "no such endpoint: the path holds a NUL byte (%%00)");
        else
            http_parse_query(conn, c);
        if (!c->refusal.status) http_body_admit(conn, url, method, c);
        /* Answered now, the body is never read and the connection closes after the answer;
         * libmicrohttpd sends no 100 Continue once an answer is queued. */
        if (c->refusal.status || c->too_large) return http_dispatch_unread(conn, url, method, c);
        if (c->expects_body) http_guard_body_begins(conn);
        return MHD_YES;
    }

    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        enum MHD_Result more;
        *upload_data_size = 0;
        http_guard_body_piece(conn, n);
        more = http_body_piece(method, url, c, upload_data, n);
        if (c->cut.status) http_report_request(method, c->stream ? c->stream->pattern : NULL, c->cut.status, c);
        return more;
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
    http_body_end(c);
    cJSON_Delete(c->query);
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

int http_start(const settings *s, const http_route_table *routes, char *err, size_t err_len)
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
    http_table = routes;
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
