/* runs.c — POST /v1/runs (and its alias POST /run): validate, choose the device, reserve
 * resident tensors, hand the run to the pool; GET /v1/runs/{id}: one stored run. */
#include "server/front/routes/routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/variant_info.h"
#include "server/front/http/http.h"
#include "common/log.h"
#include "common/parse_int.h"
#include "server/front/pool/pool.h"
#include "common/run_request.h"
#include "server/front/routes/history.h"
#include "server/front/pool/run_device.h"
#include "server/front/store/store.h"
#include "server/front/tensors/tensors.h" /* resident tensors */

void route_run(http_request *req)
{
    const settings *s = req->settings;
    cJSON *resp = NULL;
    const variant_info *v;
    run_request r;
    api_error e;
    int status;

    if (run_request_parse_body(&r, req->query, req->body, req->body_len, s->enable_fault_injection, &e) != 0) {
        http_send_error(req, &e);
        return;
    }
    v = variant_info_find(r.backend);
    if (!v) { /* parse found it; the table does not change */
        http_fail(req, 500, "internal", "backend", "backend %s vanished from the variants table", r.backend);
        return;
    }
    /* q/k/v ids set the shape (server/front/tensors/tensor_runs.c); then the problem is checked, once, and the
     * device chosen and checked */
    if (tensors_apply_run(&r, &e) != 0 || run_request_check(&r, 0, &e) != 0 || run_device_resolve(&r, v, &e) != 0) {
        http_send_error(req, &e);
        return;
    }
    r.verify_cpu_max_macs = s->verify_cpu_max_macs;
    if (tensors_prepare_run(&r, s->memory_budget_bytes, &e) != 0) { /* 507, input pins, keep_output id */
        http_send_error(req, &e);
        return;
    }

    /* From here the pool owns the run's end: it calls tensors_finish_run (release the pins
     * and the budget, register a kept output) once, when the run ends, sync or async. */
    status = pool_run_watched(&r, tensors_finish_run, routes_history_client_gone, req, &resp);
    if (!resp) {
        http_fail(req, 500, "internal", "", "the run ended without an answer (status %d)", status);
        return;
    }
    if (status == 429 && http_add_header(req, "Retry-After", "1") != 0) log_warn("cannot add Retry-After");
    if (status == 202) { /* async: where to follow it */
        char location[64];
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(resp, "id");
        snprintf(location, sizeof location, "/v1/runs/%.0f", cJSON_IsNumber(id) ? id->valuedouble : 0.0);
        if (http_add_header(req, "Location", location) != 0) log_warn("cannot add Location");
    }
    http_send_json(req, status, resp);
    cJSON_Delete(resp);
}

void route_get_run(http_request *req)
{
    cJSON *live;
    char *record;
    long long id = http_id_segment(req, "a run id");

    if (id < 0) return;
    live = pool_queued_record_json(id); /* while it waits here: with its queue_position */
    if (live) {
        http_send_json(req, 200, live);
        cJSON_Delete(live);
        return;
    }
    record = store_get_run(id);
    if (!record) {
        http_fail(req, 404, "not_found", "id", "there is no run %lld", id);
        return;
    }
    http_send_json_text(req, 200, record, strlen(record));
    free(record);
}

