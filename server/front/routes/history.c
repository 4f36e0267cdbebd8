/* history.c — run history (GET /v1/runs with its cursor and filters), cancelling a queued
 * run, and a profiled run's trace. */
#include "server/front/routes/history.h"
#include "server/front/routes/routes.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/parse_int.h"
#include "server/front/metrics.h"
#include "server/front/pool/pool.h"
#include "server/front/http/static_files.h"
#include "server/front/store/store.h"

#define RUNS_DEFAULT_LIMIT 100
#define RUNS_MAX_LIMIT 1000

static const char *const run_statuses[] = {"queued", "running", "done", "failed", "cancelled"};

/* A run id from the {id} segment: > 0, or -1 after answering 400. */
static long long runs_id(http_request *req)
{
    const char *t = req->id ? req->id : "";
    long long id;

    if (parse_int_in(t, 1, LLONG_MAX, &id) != 0) {
        http_fail(req, 400, "bad_value", "id", "a run id is a positive integer, got '%.40s'", t);
        return -1;
    }
    return id;
}

/* A query parameter as a string, NULL when absent. */
static const char *qs(const http_request *req, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req->query, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A non-negative integer parameter in [lo, hi]. 0 (with *out, or dflt when absent), or -1
 * after answering 400. */
static int q_int(http_request *req, const char *key, long long lo, long long hi, long long dflt, long long *out)
{
    const char *t = qs(req, key);
    long long v;

    *out = dflt;
    if (!t) return 0;
    if (parse_int_in(t, lo, hi, &v) != 0) {
        http_fail(req, 400, "bad_value", key, "%s must be an integer in %lld..%lld, got '%.40s'", key, lo, hi, t);
        return -1;
    }
    *out = v;
    return 0;
}

int routes_history_parse_since(const char *text, char *out, size_t len)
{
    struct tm tm;
    int y, mo, d, h = 0, mi = 0, sec = 0, ms = 0, n = 0, digits;
    long offset = 0;
    const char *p = text;
    time_t t;

    if (!text || sscanf(p, "%4d-%2d-%2d%n", &y, &mo, &d, &n) != 3 || n != 10) return -1;
    p += n;
    if (*p == 'T' || *p == 't' || *p == ' ') {
        n = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &h, &mi, &n) != 2 || n != 5) return -1;
        p += 1 + n;
        if (*p == ':') {
            n = 0;
            if (sscanf(p + 1, "%2d%n", &sec, &n) != 1 || n != 2) return -1;
            p += 1 + n;
            if (*p == '.') {
                p++;
                for (digits = 0; isdigit((unsigned char)*p); p++, digits++)
                    if (digits < 3) ms = ms * 10 + (*p - '0');
                if (digits == 0) return -1;
                for (; digits < 3; digits++) ms *= 10;
            }
        }
        if (*p == 'Z' || *p == 'z') {
            p++;
        } else if (*p == '+' || *p == '-') {
            int oh, om;
            n = 0;
            if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &n) != 2 || n != 5 || oh > 23 || om > 59) return -1;
            offset = (*p == '-' ? -1 : 1) * (oh * 3600L + om * 60L);
            p += 1 + n;
        }
    }
    if (*p != '\0' || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 || y < 1970)
        return -1;
    memset(&tm, 0, sizeof tm);
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    t = timegm(&tm) - offset;
    if (!gmtime_r(&t, &tm)) return -1;
    n = (int)strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
    if (n <= 0 || (size_t)snprintf(out + n, len - (size_t)n, ".%03dZ", ms) >= len - (size_t)n) return -1;
    return 0;
}

void route_list_runs(http_request *req)
{
    static const char *const known[] = {"after", "limit", "backend", "status", "device", "node", "since"};
    const char *status = qs(req, "status"), *since_text = qs(req, "since");
    char since[40] = "", *rows, *out;
    long long after, limit, last;
    const cJSON *item;
    size_t i, n;

    cJSON_ArrayForEach(item, req->query) {
        for (i = 0; i < sizeof known / sizeof known[0]; i++)
            if (!strcmp(item->string, known[i])) break;
        if (i == sizeof known / sizeof known[0]) {
            http_fail(req, 400, "unknown_parameter", item->string,
                      "unknown parameter '%.60s'; GET /v1/runs takes after, limit, backend, status, device, node, since",
                      item->string);
            return;
        }
    }
    if (q_int(req, "after", 0, (1LL << 62), 0, &after) != 0) return;
    if (q_int(req, "limit", 1, RUNS_MAX_LIMIT, RUNS_DEFAULT_LIMIT, &limit) != 0) return;
    if (status) {
        for (i = 0; i < sizeof run_statuses / sizeof run_statuses[0]; i++)
            if (!strcmp(status, run_statuses[i])) break;
        if (i == sizeof run_statuses / sizeof run_statuses[0]) {
            http_fail(req, 400, "bad_value", "status",
                      "status must be queued, running, done, failed or cancelled, got '%.40s'", status);
            return;
        }
    }
    if (since_text && routes_history_parse_since(since_text, since, sizeof since) != 0) {
        http_fail(req, 400, "bad_value", "since",
                  "since must be an ISO-8601 time such as 2026-12-02T10:31:05Z, got '%.60s'", since_text);
        return;
    }
    rows = store_query_runs(after, (int)limit, qs(req, "backend"), status, qs(req, "device"), qs(req, "node"), since,
                            &last);
    if (!rows) {
        routes_store_read_failed(req, "the run history");
        return;
    }
    n = strlen(rows) + 64;
    out = malloc(n);
    if (!out) {
        free(rows);
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    snprintf(out, n, "{\"runs\":%s,\"next_after\":%lld}", rows, last);
    free(rows);
    http_send_json_text(req, 200, out, strlen(out));
    free(out);
}

void routes_store_read_failed(http_request *req, const char *what)
{
    store_health h;

    if (store_available()) {
        http_fail(req, 500, "store_error", "", "%s could not be read", what);
        return;
    }
    store_get_health(&h);
    if (http_add_header(req, "Retry-After", "2") != 0) log_warn("cannot add Retry-After");
    http_fail(req, 503, "store_unavailable", "",
              "the fleet's database is away (%s): %s cannot be read now; runs still execute and wait in this node's "
              "outbox (%lld write(s)); ask again shortly", h.last_error, what, h.outbox_depth);
}

int routes_history_client_gone(const void *req) { return http_client_gone((const http_request *)req); }

void route_cancel_run(http_request *req)
{
    long long id = runs_id(req);
    char *record, status[16];

    if (id < 0) return;
    if (pool_cancel(id) == 0) {
        record = store_get_run(id);
        if (record) {
            http_send_json_text(req, 200, record, strlen(record));
            free(record);
        } else {
            http_fail(req, 500, "store_error", "id", "run %lld was cancelled but its record cannot be read", id);
        }
        return;
    }
    if (store_get_run_status(id, status, sizeof status) != 1) {
        http_fail(req, 404, "not_found", "id", "there is no run %lld", id);
        return;
    }
    http_fail(req, 409, "not_queued", "id", "run %lld is %s; only a queued run can be cancelled", id, status);
}

void route_run_trace(http_request *req)
{
    long long id = runs_id(req);
    char *trace, *record;

    if (id < 0) return;
    trace = store_get_trace(id);
    if (trace) {
        http_send_json_text(req, 200, trace, strlen(trace));
        free(trace);
        return;
    }
    record = store_get_run(id);
    if (!record) {
        http_fail(req, 404, "not_found", "id", "there is no run %lld", id);
        return;
    }
    free(record);
    http_fail(req, 404, "no_trace", "id",
              "run %lld has no trace: only a run profiled on a GPU (profile=true on a cuda device) that finished "
              "has one; cpu runs and profile=false runs do not", id);
}

