/* routes.h — the front's request handlers, one file per resource (the files of front/routes/), and the
 * table that maps method and path to them (table.c; http.h reads it).
 *
 * Handlers validate, then hand work to the pool (pool.h) or read the store (store.h); they
 * never touch CUDA. Each answers exactly once, through http_send_*.
 */
#ifndef ROUTES_H
#define ROUTES_H

#include <stddef.h>

#include "server/front/http/http.h"

/* health.c */
void route_healthz(http_request *req);        /* GET /healthz */
void route_readyz(http_request *req);         /* GET /readyz */

/* device.c */
void route_device(http_request *req);         /* GET /v1/device */
/* The ids of the devices served, "cpu, cuda:0", for messages. */
void routes_device_list(char *out, size_t len);

/* variants.c */
void route_variants(http_request *req);       /* GET /v1/variants */

/* runs.c */
void route_run(http_request *req);            /* POST /v1/runs, POST /run */
void route_get_run(http_request *req);        /* GET /v1/runs/{id} */

/* history.c */
void route_list_runs(http_request *req);      /* GET /v1/runs?after=&limit=&backend=&status=&device=&node=&since= */
void route_cancel_run(http_request *req);     /* DELETE /v1/runs/{id} */
void route_run_trace(http_request *req);      /* GET /v1/runs/{id}/trace */
/* A store read came back empty-handed: 503 store_unavailable (Retry-After) while the fleet's
 * database is away, else 500 store_error; what names the thing, "the run history". */
void routes_store_read_failed(http_request *req, const char *what);

/* nodes.c */
void route_nodes(http_request *req);          /* GET /v1/nodes */

/* metrics.c */
void route_metrics(http_request *req);        /* GET /metrics */

/* static.c */
void route_dashboard(http_request *req);      /* GET / */
void route_dashboard_file(http_request *req); /* GET /dashboard/{id} */
void route_openapi(http_request *req);        /* GET /openapi.json */

#endif
