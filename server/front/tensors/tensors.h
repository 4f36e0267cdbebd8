/* tensors.h — resident tensors, the front's side (docs/tensors.md): the hooks that let a run
 * use tensors as q, k, v and keep its output, and a worker restart's effect on the table.
 *
 * Where each lives: the table, the budget's reservations, pins and restarts in
 * tensor_table.c; parsing an upload in tensor_upload_parse.c (its route, admission and
 * handler are routes/tensor_upload.c; the download routes/tensor_data.c; list, get and delete
 * routes/tensors.c); the runs' hooks in tensor_runs.c.
 *
 * The front keeps the metadata of every tensor (id → name, shape, dtype, bytes, device,
 * fingerprint, worker generation); the worker of the device holds the bytes
 * (server/worker/tensors.h). A worker that restarts loses its tensors: the table still knows
 * them, and answers 410 for any whose generation is older than the worker's, until they
 * are deleted. A per-device budget (memory_budget_bytes; 0: the device's free memory, as
 * the front knows it and as the worker checks it again) refuses uploads (from their headers)
 * and runs with 507 before anything is allocated; max_tensors bounds the table.
 *
 * Runs, synchronous or async, hold their resident inputs from tensors_prepare_run until
 * their end (tensors_finish_run, the pool's end hook): while a run that reads a tensor is
 * queued or running, DELETE of that tensor answers 409 `in_use` naming the runs.
 */
#ifndef TENSORS_H
#define TENSORS_H

#include <cjson/cJSON.h>

#include "common/api_error.h"
#include "server/front/pool/pool.h"
#include "common/run_request.h"

/* Before the device is resolved: take shape and dtype from r's q/k/v tensors and check them
 * (404 unknown, 410 gone, 422 mismatched shapes, dtypes, devices or explicit parameters);
 * set r->device to the tensors' device when the client gave none. 0, or -1 with e. */
int tensors_apply_run(run_request *r, api_error *e);

/* Once the run is ready to queue (sync or async): the budget check and reservation (507),
 * a pin on each resident input (so DELETE answers 409 until the run ends; 404 when one was
 * deleted since tensors_apply_run), the output tensor's id when keep_output (reserved in the
 * table, not listed, until the run is done), and the GPU fp32 verify for resident inputs
 * (the cpu reference regenerates inputs from the seed). 0, or -1 with e (nothing held). */
int tensors_prepare_run(run_request *r, long long budget_bytes, api_error *e);

/* The run's end (a pool_run_end_fn: pass it to pool_run, which calls it exactly once, for
 * every outcome, before the end is stored): release the budget reservation and the pins;
 * when done with the output kept, register it (generation: the worker it ran on), else
 * forget its id. Takes only the table's lock, never calls the pool. */
void tensors_finish_run(const run_request *r, pool_run_outcome outcome, const cJSON *record, int generation);

/* device's worker was replaced by generation (its tensors are gone): sets the resident-bytes
 * gauge (metrics_set_tensor_bytes) to what generation holds. For the pool, once per restart;
 * takes only the table's lock, never calls the pool. */
void tensors_worker_restarted(const char *device, int generation);

#endif
