/* routes.c — the route table and the handlers of the front (http.h).
 *
 * Handlers validate, then hand work to the pool (pool.h) or read the store (store.h); they
 * never touch CUDA. Each answers exactly once, through http_send_*.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/variants.h"
#include "http.h"
#include "log.h"
#include "pool.h"
#include "run_request.h"
#include "routes_runs.h"
#include "store.h"
#include "tensors.h" /* resident tensors */

/* ---------------------------------------------------------------- health ---------------- */

static void route_healthz(http_request *req)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "status", "ok")) {
        cJSON_Delete(o);
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    http_send_json(req, 200, o);
    cJSON_Delete(o);
}

static void route_readyz(http_request *req)
{
    int ready = pool_ready();
    cJSON *o = cJSON_CreateObject();
    int ok = o && cJSON_AddBoolToObject(o, "ready", ready);

    if (ok && !ready) ok = cJSON_AddStringToObject(o, "message", "not every worker is up yet (or one is restarting)") != NULL;
    if (!ok) {
        cJSON_Delete(o);
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    http_send_json(req, ready ? 200 : 503, o);
    cJSON_Delete(o);
}

/* ---------------------------------------------------------------- devices, variants ----- */

static void route_device(http_request *req)
{
    cJSON *o = pool_devices_json();
    if (!o) {
        http_fail(req, 500, "internal", "", "the device list is not available");
        return;
    }
    http_send_json(req, 200, o);
    cJSON_Delete(o);
}

/* The ids of the devices served, "cpu, cuda:0", for messages. */
static void device_list(char *out, size_t len)
{
    cJSON *o = pool_devices_json(), *list = o ? cJSON_GetObjectItemCaseSensitive(o, "devices") : NULL, *d;
    size_t n = 0;

    out[0] = '\0';
    cJSON_ArrayForEach(d, list) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(d, "id");
        if (cJSON_IsString(id) && n < len)
            n += (size_t)snprintf(out + n, len - n, "%s%s", n ? ", " : "", id->valuestring);
    }
    if (!out[0]) snprintf(out, len, "cpu");
    cJSON_Delete(o);
}

/* Can v run on this server, and if not, why (why_len bytes)? */
static int variant_available(const variant *v, char *why, size_t why_len)
{
    const char *dev = pool_default_device(v->on_cpu);
    int cc;

    why[0] = '\0';
    if (v->library_ready && v->library_ready(why, why_len) != 0) return 0;
    if (!dev) {
        snprintf(why, why_len, v->on_cpu ? "the cpu device is not up" : "no GPU device is up on this server");
        return 0;
    }
    cc = pool_device_cc(dev);
    if (cc < 0) {
        snprintf(why, why_len, "device %s is not up", dev);
        return 0;
    }
    if (!v->on_cpu && cc < v->min_cc) {
        snprintf(why, why_len, "needs compute capability %d.%d; %s has %d.%d", v->min_cc / 10, v->min_cc % 10, dev,
                 cc / 10, cc % 10);
        return 0;
    }
    return 1;
}

/* {"name", "requested", "version", "path"} of the library v opens at run time, as this
 * process loaded it (the workers load the same: same settings); null when v opens none. */
static cJSON *variant_library_json(const variant *v)
{
    variant_library lib;
    cJSON *o;
    int ok;

    if (!v->library_info) return cJSON_CreateNull();
    o = cJSON_CreateObject();
    memset(&lib, 0, sizeof lib);
    v->library_info(&lib);
    ok = o && cJSON_AddStringToObject(o, "name", lib.name ? lib.name : "") != NULL;
    ok = ok && cJSON_AddStringToObject(o, "requested", lib.requested) != NULL;
    ok = ok && (lib.version[0] ? cJSON_AddStringToObject(o, "version", lib.version) != NULL
                               : cJSON_AddNullToObject(o, "version") != NULL);
    ok = ok && (lib.path[0] ? cJSON_AddStringToObject(o, "path", lib.path) != NULL
                            : cJSON_AddNullToObject(o, "path") != NULL);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *variant_json(const variant *v)
{
    cJSON *o = cJSON_CreateObject(), *dtypes, *masks, *hd, *lib;
    char why[1024], cc[16];
    int ok = o != NULL, available, t;

    ok = ok && cJSON_AddStringToObject(o, "name", v->name);
    ok = ok && cJSON_AddStringToObject(o, "summary", v->summary ? v->summary : "");
    ok = ok && cJSON_AddStringToObject(o, "device", v->on_cpu ? "cpu" : "cuda");
    ok = ok && (dtypes = cJSON_AddArrayToObject(o, "dtypes")) != NULL;
    for (t = 0; ok && t < ATTN_DTYPE_COUNT; t++)
        if (v->dtypes & VARIANT_DTYPE(t))
            ok = cJSON_AddItemToArray(dtypes, cJSON_CreateString(attn_dtype_name((attn_dtype)t)));
    ok = ok && (masks = cJSON_AddArrayToObject(o, "masks")) != NULL;
    for (t = 0; ok && t < ATTN_MASK_COUNT; t++)
        ok = cJSON_AddItemToArray(masks, cJSON_CreateString(attn_mask_name((attn_mask)t)));
    ok = ok && (hd = cJSON_AddObjectToObject(o, "head_dim")) != NULL;
    ok = ok && (v->max_head_dim > 0 ? cJSON_AddNumberToObject(hd, "max", v->max_head_dim) != NULL
                                    : cJSON_AddNullToObject(hd, "max") != NULL);
    ok = ok && cJSON_AddNumberToObject(hd, "multiple", v->head_dim_multiple > 0 ? v->head_dim_multiple : 1);
    snprintf(cc, sizeof cc, "%d.%d", v->min_cc / 10, v->min_cc % 10);
    ok = ok && (v->min_cc > 0 ? cJSON_AddStringToObject(o, "min_compute_capability", cc) != NULL
                              : cJSON_AddNullToObject(o, "min_compute_capability") != NULL);
    available = variant_available(v, why, sizeof why);
    ok = ok && cJSON_AddBoolToObject(o, "available", available);
    ok = ok && (available ? cJSON_AddNullToObject(o, "why") != NULL : cJSON_AddStringToObject(o, "why", why) != NULL);
    if (ok && (lib = variant_library_json(v)) != NULL && !cJSON_AddItemToObject(o, "library", lib)) cJSON_Delete(lib);
    ok = ok && cJSON_GetObjectItemCaseSensitive(o, "library") != NULL;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static void route_variants(http_request *req)
{
    cJSON *o = cJSON_CreateObject(), *list = o ? cJSON_AddArrayToObject(o, "variants") : NULL;
    size_t i;
    int ok = list != NULL;

    for (i = 0; ok && i < variants_count; i++) {
        cJSON *v = variant_json(&variants[i]);
        ok = v && cJSON_AddItemToArray(list, v);
        if (!ok) cJSON_Delete(v);
    }
    if (!ok) {
        cJSON_Delete(o);
        http_fail(req, 500, "internal", "", "out of memory");
        return;
    }
    http_send_json(req, 200, o);
    cJSON_Delete(o);
}

/* ---------------------------------------------------------------- runs ------------------ */

/* Choose and check the device of r (r->backend already validated). 0, or -1 with e. */
static int resolve_device(run_request *r, const variant *v, api_error *e)
{
    char devices[200], why[300];
    const char *dev;
    int cc;

    if (r->device[0]) {
        if (!run_request_device_valid(r->device))
            return api_fail(e, 400, "bad_device", "device", "device must be cpu or cuda:N, got '%s'", r->device);
        if (v->on_cpu && strcmp(r->device, "cpu") != 0)
            return api_fail(e, 422, "unsupported", "device", "backend %s runs on the cpu device only, not on %s",
                            v->name, r->device);
        if (!v->on_cpu && !strcmp(r->device, "cpu"))
            return api_fail(e, 422, "unsupported", "device", "backend %s needs a GPU; it cannot run on the cpu device",
                            v->name);
    } else {
        dev = pool_default_device(v->on_cpu);
        if (!dev) {
            device_list(devices, sizeof devices);
            return api_fail(e, 503, "no_device", "device", "backend '%s' needs a GPU and this server has none (devices: %s)",
                            v->name, devices);
        }
        snprintf(r->device, sizeof r->device, "%s", dev);
    }
    cc = pool_device_cc(r->device);
    if (cc < 0) {
        device_list(devices, sizeof devices);
        return api_fail(e, 503, "no_device", "device", "device %s is not served here (devices: %s)", r->device,
                        devices);
    }
    /* Nothing asked for is silently dropped: the cpu device times plain calls, so an L2
     * flush or a CUDA graph would be echoed in params yet not happen. */
    if (!strcmp(r->device, "cpu") && r->graph)
        return api_fail(e, 422, "not_applicable", "graph",
                        "graph=true times CUDA graph replays; the cpu device has no graphs (drop graph)");
    if (!strcmp(r->device, "cpu") && r->cache_cold)
        return api_fail(e, 422, "not_applicable", "cache",
                        "cache=cold flushes a GPU's L2 between forwards; the cpu device has none to flush (drop cache)");
    why[0] = '\0';
    if (variant_check(v, &r->problem, cc, why, sizeof why) != 0)
        return api_fail(e, 422, "unsupported", "device", "%s (device %s)", why[0] ? why : "unsupported here",
                        r->device);
    return 0;
}

static void route_run(http_request *req)
{
    const settings *s = req->settings;
    cJSON *resp = NULL;
    const variant *v;
    run_request r;
    api_error e;
    int status;

    if (run_request_parse_body(&r, req->query, req->body, req->body_len, s->enable_fault_injection, &e) != 0) {
        http_send_error(req, &e);
        return;
    }
    v = variant_find(r.backend);
    if (!v) { /* parse found it; the table does not change */
        http_fail(req, 500, "internal", "backend", "backend %s vanished from the variants table", r.backend);
        return;
    }
    if (tensors_apply_run(&r, &e) != 0 || resolve_device(&r, v, &e) != 0) { /* q/k/v ids: tensors.c */
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
    status = pool_run_watched(&r, tensors_finish_run, routes_runs_client_gone, req, &resp);
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

static void route_get_run(http_request *req)
{
    const char *id_text = req->id;
    char *end, *record;
    long long id;

    errno = 0;
    id = strtoll(id_text, &end, 10);
    if (!isdigit((unsigned char)id_text[0]) || errno != 0 || *end != '\0' || id <= 0) {
        http_fail(req, 400, "bad_value", "id", "a run id is a positive integer, got '%.40s'", id_text);
        return;
    }
    record = routes_runs_with_position(id, store_get_run(id)); /* queued: + queue_position */
    if (!record) {
        http_fail(req, 404, "not_found", "id", "there is no run %lld", id);
        return;
    }
    http_send_json_text(req, 200, record, strlen(record));
    free(record);
}

/* ---------------------------------------------------------------- the table ------------- */

const http_route http_routes[] = {
    {"GET", "/healthz", route_healthz, "the process is alive"},
    {"GET", "/readyz", route_readyz, "every worker is up (503 while not)"},
    {"GET", "/v1/device", route_device, "the devices served: cpu and GPUs"},
    {"GET", "/v1/variants", route_variants, "the variants, what each supports, available or why not"},
    {"POST", "/v1/runs", route_run, "run a job (synchronously, or async=true: 202 and poll)"},
    {"POST", "/run", route_run, "alias of POST /v1/runs"},
    {"GET", "/v1/runs/{id}", route_get_run, "one stored run"},
    /* history, async jobs, traces, metrics, dashboard (routes_runs.c) */
    {"GET", "/v1/runs", route_list_runs, "run history: ?after=ID&limit=N&backend&status&device&since"},
    {"DELETE", "/v1/runs/{id}", route_cancel_run, "cancel a queued run (409 once it runs)"},
    {"GET", "/v1/runs/{id}/trace", route_run_trace, "Chrome trace-event JSON of a profiled GPU run"},
    {"GET", "/metrics", route_metrics, "Prometheus text exposition"},
    {"GET", "/openapi.json", route_openapi, "the OpenAPI 3.0 document of this API"},
    {"GET", "/", route_dashboard, "the dashboard page"},
    {"GET", "/dashboard/{id}", route_dashboard_file, "the dashboard's static files"},
    /* resident tensors (tensors.c); the upload streams its body into a memfd */
    {"POST", "/v1/tensors", route_tensor_upload, "upload a tensor: raw, .npy or safetensors (streamed)"},
    {"GET", "/v1/tensors", route_tensor_list, "the resident tensors"},
    {"GET", "/v1/tensors/{id}", route_tensor_get, "one tensor's metadata"},
    {"GET", "/v1/tensors/{id}/data", route_tensor_data, "download a tensor: npy (default) or ?format=raw"},
    {"DELETE", "/v1/tensors/{id}", route_tensor_delete, "free a tensor"},
};
const size_t http_routes_count = sizeof http_routes / sizeof http_routes[0];

/* POST bodies written to a memfd as they arrive (http.h): tensor uploads. */
const http_stream_route http_stream_routes[] = {
    {"/v1/tensors", tensors_upload_admit, tensors_upload_grow, tensors_upload_release},
    {NULL, NULL, NULL, NULL},
};
