/* http_route.c — where a request goes: the request as a handler sees it, its query string
 * parsed into an object of strings (http_request.query), the route of the table that its
 * method and path match (404 unknown path, 405 wrong method with Allow), and the labels the
 * request observer counts it under.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <microhttpd.h>

#include "common/log.h"
#include "common/parse_int.h"
#include "server/front/http/http.h"
#include "server/front/http/http_conn.h"

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
void http_parse_query(struct MHD_Connection *conn, http_conn *c)
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

void http_request_view(http_request *req, struct MHD_Connection *conn, const char *url, const char *method,
                       http_conn *c)
{
    memset(req, 0, sizeof *req);
    req->conn = conn;
    req->method = method;
    req->path = url;
    req->query = c->query;
    req->settings = c->cfg;
    req->body_fd = -1;
    req->conn_state = c;
    req->arrived_s = c->arrived_s;
    req->received_s = c->received_s;
    req->hold = c->hold;
}

const char *http_query_param(const http_request *req, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req->query, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

long long http_id_segment(http_request *req, const char *what)
{
    const char *t = req->id ? req->id : "";
    long long id;

    if (parse_int_in(t, 1, LLONG_MAX, &id) != 0) {
        http_fail(req, 400, "bad_value", "id", "%s is a positive integer, got '%.40s'", what, t);
        return -1;
    }
    return id;
}

const char *http_header(const http_request *req, const char *name)
{
    return MHD_lookup_connection_value((struct MHD_Connection *)req->conn, MHD_HEADER_KIND, name);
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

const http_stream_route *http_streaming_route(const http_route_table *routes, const char *method, const char *url)
{
    char id_buf[128];
    const char *id;
    size_t i;

    if (strcmp(method, "POST") != 0) return NULL;
    for (i = 0; routes->stream[i].pattern; i++)
        if (http_route_match(routes->stream[i].pattern, url, &id, id_buf, sizeof id_buf)) return &routes->stream[i];
    return NULL;
}

void http_route_labels(const http_route_table *routes, const char *method, const char *route,
                       const char **method_label, const char **route_label)
{
    const char *known = NULL;
    size_t i;

    *route_label = "unmatched";
    if (!method) method = "";
    for (i = 0; route && i < routes->count; i++)
        if (!strcmp(route, routes->routes[i].pattern)) *route_label = routes->routes[i].pattern;
    for (i = 0; i < routes->count && !known; i++) {
        const http_route *r = &routes->routes[i];
        if (!strcmp(method, r->method))
            known = r->method;
        else if (!strcmp(method, "HEAD") && !strcmp(r->method, "GET"))
            known = "HEAD";
    }
    *method_label = known ? known : "other";
}

void http_route_request(http_request *req)
{
    const http_route_table *routes = ((const http_conn *)req->conn_state)->routes;
    const char *method = strcmp(req->method, "HEAD") == 0 ? "GET" : req->method;
    char allow[96];
    size_t i, n = 0;

    allow[0] = '\0';
    for (i = 0; i < routes->count; i++) {
        const http_route *r = &routes->routes[i];
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

