/* tensors.h — resident tensors, the front's side (docs/tensors.md): the tensor table and
 * the /v1/tensors routes, and the hooks that let a run use tensors as q, k, v and keep its
 * output.
 *
 * The front keeps the metadata of every tensor (id → name, shape, dtype, bytes, device,
 * fingerprint, worker generation); the worker of the device holds the bytes
 * (worker_tensors.h). A worker that restarts loses its tensors: the table still knows
 * them, and answers 410 for any whose generation is older than the worker's, until they
 * are deleted. A per-device budget (memory_budget_bytes; 0: the device's free memory,
 * checked by the worker) refuses uploads and runs with 507 before anything is allocated.
 */
#ifndef TENSORS_H
#define TENSORS_H

#include <cjson/cJSON.h>

#include "api_error.h"
#include "http.h"
#include "run_request.h"

/* Routes (routes.c table). POST streams its body (http_route.streaming_body). */
void route_tensor_upload(http_request *req);
void route_tensor_list(http_request *req);
void route_tensor_get(http_request *req);
void route_tensor_data(http_request *req);
void route_tensor_delete(http_request *req);

/* Before the device is resolved: take shape and dtype from r's q/k/v tensors and check them
 * (404 unknown, 410 gone, 422 mismatched shapes, dtypes, devices or explicit parameters);
 * set r->device to the tensors' device when the client gave none. 0, or -1 with e. */
int tensors_apply_run(run_request *r, api_error *e);

/* Once the run is ready to queue: the budget check (507), the output tensor's id when
 * keep_output, and the GPU fp32 verify for resident inputs (the cpu reference regenerates
 * inputs from the seed). s: the server's settings. 0, or -1 with e. */
int tensors_prepare_run(run_request *r, long long budget_bytes, api_error *e);

/* After the run answered (status, record): register a kept output; release the budget
 * reservation of tensors_prepare_run. Call exactly once per successful prepare. */
void tensors_finish_run(const run_request *r, int status, const cJSON *record);

#endif
