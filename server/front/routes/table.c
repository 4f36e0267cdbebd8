/* table.c — every route of the front: method, path, handler, and the line GET / lists. The
 * metrics' route labels come from this table only (http_request_observer). */
#include "server/front/routes/routes.h"

static const http_route routes[] = {
    {"GET", "/healthz", route_healthz, "the process is alive"},
    {"GET", "/readyz", route_readyz, "every worker is up (503 while not)"},
    {"GET", "/v1/device", route_device, "the devices served: cpu and GPUs"},
    {"GET", "/v1/variants", route_variants, "the variants, what each supports, available or why not"},
    {"GET", "/v1/models", route_models, "model presets (model=NAME): heads, kv_heads, head dims, window, source"},
    {"POST", "/v1/runs", route_run, "run a job (synchronously, or async=true: 202 and poll)"},
    {"POST", "/run", route_run, "alias of POST /v1/runs"},
    {"GET", "/v1/runs/{id}", route_get_run, "one stored run"},
    {"GET", "/v1/runs", route_list_runs, "run history: ?after=POSITION&limit=N&backend&status&device&node&since"},
    {"DELETE", "/v1/runs/{id}", route_cancel_run, "cancel a queued run (409 once it runs)"},
    {"GET", "/v1/runs/{id}/trace", route_run_trace, "Chrome trace-event JSON of a profiled GPU run"},
    {"POST", "/v1/studies", route_study_create, "a study: variants on one problem, interleaved over rounds (202)"},
    {"GET", "/v1/studies", route_study_list, "the studies, newest first: ?limit&before&tag&status"},
    {"GET", "/v1/studies/{id}", route_study_get, "one study: status, progress, table (?wait=S)"},
    {"DELETE", "/v1/studies/{id}", route_study_cancel, "cancel a study (its queued run too)"},
    {"GET", "/v1/compare", route_compare, "the ratio of two runs, groups of runs or studies, with its interval"},
    {"GET", "/v1/nodes", route_nodes, "the fleet's nodes: devices, version, last heartbeat"},
    {"GET", "/metrics", route_metrics, "Prometheus text exposition"},
    {"GET", "/openapi.json", route_openapi, "the OpenAPI 3.0 document of this API"},
    {"GET", "/", route_dashboard, "the dashboard page"},
    {"GET", "/dashboard/{id}", route_dashboard_file, "the dashboard's static files"},
    /* resident tensors (server/front/tensors/tensors.h); the upload streams its body into a memfd */
    {"POST", "/v1/tensors", route_tensor_upload, "upload a tensor: raw, .npy or safetensors (streamed)"},
    {"GET", "/v1/tensors", route_tensor_list, "the resident tensors"},
    {"GET", "/v1/tensors/{id}", route_tensor_get, "one tensor's metadata"},
    {"GET", "/v1/tensors/{id}/data", route_tensor_data, "download a tensor: npy (default) or ?format=raw"},
    {"DELETE", "/v1/tensors/{id}", route_tensor_delete, "free a tensor"},
};

/* POST bodies written to a memfd as they arrive (http.h): tensor uploads. */
static const http_stream_route stream_routes[] = {
    {"/v1/tensors", route_tensor_upload_admit, route_tensor_upload_grow, route_tensor_upload_landing, route_tensor_upload_release},
    {NULL, NULL, NULL, NULL, NULL},
};

const http_route_table routes_table = {routes, sizeof routes / sizeof routes[0], stream_routes};
