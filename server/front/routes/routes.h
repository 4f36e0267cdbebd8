/* routes.h — the front's request handlers, one file per resource (the files of routes/), and
 * the table that maps method and path to them (table.c; main.c hands it to http_start).
 *
 * Handlers validate, then hand work to the pool (pool.h) or read the store (store.h); they
 * never touch CUDA. Each answers exactly once, through http_send_*.
 */
#ifndef ROUTES_H
#define ROUTES_H

#include <stddef.h>

#include "server/front/http/http.h"

/* table.c: every route, and the POST routes whose body streams. */
extern const http_route_table routes_table;

/* health.c */
void route_healthz(http_request *req);        /* GET /healthz */
void route_readyz(http_request *req);         /* GET /readyz */

/* device.c */
void route_device(http_request *req);         /* GET /v1/device */

/* variants.c */
void route_variants(http_request *req);       /* GET /v1/variants */

/* models.c */
void route_models(http_request *req);         /* GET /v1/models */

/* runs.c */
void route_run(http_request *req);            /* POST /v1/runs, POST /run */
void route_get_run(http_request *req);        /* GET /v1/runs/{id} */

/* history.c */
void route_list_runs(http_request *req);      /* GET /v1/runs?after=&before=&order=&limit=&<filters>&group_by=&format= */
void route_cancel_run(http_request *req);     /* DELETE /v1/runs/{id} */
void route_run_trace(http_request *req);      /* GET /v1/runs/{id}/trace */
/* A store read came back empty-handed: 503 store_unavailable (Retry-After) while the fleet's
 * database is away, else 500 store_error; what names the thing, "the run history". */
void routes_store_read_failed(http_request *req, const char *what);

/* studies.c: studies (server/front/studies/) and comparisons */
void route_study_create(http_request *req);   /* POST /v1/studies */
void route_study_list(http_request *req);     /* GET /v1/studies?limit=&before=&tag=&status= */
void route_study_get(http_request *req);      /* GET /v1/studies/{id}?wait=S */
void route_study_cancel(http_request *req);   /* DELETE /v1/studies/{id} */
void route_compare(http_request *req);        /* GET /v1/compare?base=&run=&confidence=&noise_floor= */

/* nodes.c */
void route_nodes(http_request *req);          /* GET /v1/nodes */

/* metrics.c */
void route_metrics(http_request *req);        /* GET /metrics */

/* tensors.c, tensor_upload.c, tensor_data.c: resident tensors (docs/tensors.md) */
void route_tensor_upload(http_request *req);  /* POST /v1/tensors (its body streams) */
void route_tensor_list(http_request *req);    /* GET /v1/tensors */
void route_tensor_get(http_request *req);     /* GET /v1/tensors/{id} */
void route_tensor_data(http_request *req);    /* GET /v1/tensors/{id}/data */
void route_tensor_delete(http_request *req);  /* DELETE /v1/tensors/{id} */

/* POST /v1/tensors' admission control (http_stream_route), before any body byte is read: the
 * query is checked (400: unknown parameters, bad values, a declared length that a raw
 * shape × dtype rules out; an empty body), the device picked (400/503), and the declared
 * length checked against max_upload_bytes (413), the device's memory and memory_budget_bytes
 * and the host memory the body waits in (507), then reserved on the device with one table
 * entry (507 when max_tensors is reached). A chunked body is reserved as it grows, and cut
 * off (507) the moment it would pass. The handler finds the hold in req->hold, and promises
 * the rest of a safetensors file's entries before the worker stores anything; release gives
 * back whatever the upload did not turn into listed tensors. landing starts copying a large
 * body to its GPU while it arrives (tensors/tensor_stage.h). */
int route_tensor_upload_admit(const http_request *req, unsigned long long declared, void **hold, api_error *e);
int route_tensor_upload_grow(void *hold, unsigned long long total, api_error *e);
void route_tensor_upload_landing(void *hold, const http_request *req, int fd);
void route_tensor_upload_release(void *hold);

/* static.c */
void route_dashboard(http_request *req);      /* GET / */
void route_dashboard_file(http_request *req); /* GET /dashboard/{id} */
void route_openapi(http_request *req);        /* GET /openapi.json */

#endif
