/* history.c — run history (GET /v1/runs: a page of records, as JSON or CSV, or an
 * aggregate; history_query.c reads its parameters), cancelling a queued run, and a profiled
 * run's trace. */
#include "server/front/routes/history.h"
#include "server/front/routes/routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/parse_int.h"
#include "server/front/pool/pool.h"
#include "server/front/routes/history_csv.h"
#include "server/front/routes/history_query.h"
#include "server/front/store/store.h"

/* group_by: {"groups": [...], "group_by": [names], "more": bool}. */
static void history_send_groups(http_request *req, const history_request *h)
{
    int more = 0, i;
    char *groups = store_group_runs(&h->q, &more), *out;
    size_t n, len;

    if (!groups) {
        routes_store_read_failed(req, "the run history");
        return;
    }
    n = strlen(groups) + 64 + (size_t)h->q.n_group_by * 24;
    out = malloc(n);
    if (!out) {
        free(groups);
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    len = (size_t)snprintf(out, n, "{\"groups\":%s,\"group_by\":[", groups);
    for (i = 0; i < h->q.n_group_by; i++)
        len += (size_t)snprintf(out + len, n - len, "%s\"%s\"", i ? "," : "", store_fields[h->q.group_by[i]].name);
    snprintf(out + len, n - len, "],\"more\":%s}", more ? "true" : "false");
    free(groups);
    http_send_json_text(req, 200, out, strlen(out));
    free(out);
}

/* A page as CSV; the next cursor in a header (the body has no place for it). */
/* Whether an Accept header asks for CSV before JSON (format= wins over it): text/csv named,
 * and not after application/json. Quality values are not weighed. */
static int history_accepts_csv(const char *accept)
{
    const char *csv = accept ? strcasestr(accept, "text/csv") : NULL, *json;

    if (!csv) return 0;
    json = strcasestr(accept, "application/json");
    return !json || csv < json;
}

static void history_send_csv(http_request *req, const history_request *h, const char *rows, long long last,
                             int has_last)
{
    size_t len = 0;
    char *csv = history_csv(rows, &len), cursor[24];

    if (!csv) {
        http_fail(req, 500, "internal", "", "out of memory writing the CSV");
        return;
    }
    snprintf(cursor, sizeof cursor, "%lld", last);
    if (has_last && http_add_header(req, h->q.newest_first ? "Attnd-Next-Before" : "Attnd-Next-After", cursor) != 0)
        log_warn("cannot add the next cursor header");
    http_send_bytes(req, 200, "text/csv; charset=utf-8", csv, len);
    free(csv);
}

void route_list_runs(http_request *req)
{
    history_request h;
    api_error e;
    char *rows, *out;
    long long first = 0, last = 0;
    int has_last;
    size_t n;

    switch (history_query_parse(req->query, &h, &e)) {
    case 0: break;
    case -2: routes_store_read_failed(req, "the run history"); return;
    default: http_send_error(req, &e); return;
    }
    if (h.q.n_group_by > 0) {
        history_send_groups(req, &h);
        return;
    }
    if (!http_query_param(req, "format") && history_accepts_csv(http_header(req, "Accept"))) h.format = HISTORY_CSV;
    rows = store_query_runs(&h.q, &first, &last);
    if (!rows) {
        routes_store_read_failed(req, "the run history");
        return;
    }
    /* Oldest first there is always a cursor to go on from (the given after when nothing
     * came); newest first there is none when nothing came and no `before` was given. */
    has_last = !h.q.newest_first || last > 0;
    if (h.format == HISTORY_CSV) {
        history_send_csv(req, &h, rows, last, has_last);
        free(rows);
        return;
    }
    n = strlen(rows) + 96;
    out = malloc(n);
    if (!out) {
        free(rows);
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    if (!h.q.newest_first) {
        snprintf(out, n, "{\"runs\":%s,\"next_after\":%lld}", rows, last);
    } else {
        /* Newest first also says where the newest run listed is: following next_after from
         * there polls for the runs that come after the page. */
        char before[24] = "null";
        if (has_last) snprintf(before, sizeof before, "%lld", last);
        snprintf(out, n, "{\"runs\":%s,\"next_before\":%s,\"next_after\":%lld}", rows, before,
                 first > 0 ? first : h.q.after);
    }
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
    long long id = http_id_segment(req, "a run id");
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
    long long id = http_id_segment(req, "a run id");
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

