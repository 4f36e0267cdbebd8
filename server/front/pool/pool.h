/* pool.h — the front's side of the workers: one child process per GPU plus the cpu one,
 * each with its bounded queue and one dispatcher thread. The front never touches CUDA: it
 * learns the GPUs from `attnd-worker --probe` and each worker's hello.
 *
 * A worker that crashes, reports a sticky CUDA error or outlives job_timeout_s is ended
 * (SIGKILL) and started again; its job ends `failed` with the reason; queued jobs go on.
 *
 * Implemented by pool.c (start, stop, devices), pool_runs.c (runs, cancel, queues) and
 * pool_tensors.c, over queue.h (slots, jobs), pool_dispatch.h and children.h; the hooks
 * the front hands in are in pool_hooks.h.
 */
#ifndef POOL_H
#define POOL_H

#include <cjson/cJSON.h>

#include "common/run_request.h"
#include "common/settings.h"
#include "server/front/pool/pool_hooks.h"

/* Start workers from path instead of attnd-worker beside this executable (a test that names
 * the build's worker). Before pool_start. */
void pool_set_worker_exe(const char *path);

/* The settings flags workers are started with, so that they load the front's settings: the
 * front's own command line without argv[0]. argv must live until pool_stop. Before pool_start. */
void pool_set_worker_flags(int argc, char *const *argv);

/* Probe GPUs, start workers, wait for their hellos. 0, or -1 with err filled. A machine
 * without GPUs is not an error: only the cpu worker starts. */
int pool_start(const settings *s, char *err, size_t err_len);

/* Called after a worker was lost and before its replacement starts (pool_restart_fn). */
void pool_on_worker_restart(pool_restart_fn fn);

/* Shutdown, first step: take no new runs (503 shutting_down) and end every queued run at
 * once: a synchronous one is answered 503 shutting_down and not stored, an async one is
 * stored "cancelled" (error shutting_down). Running jobs go on (and the verify and tensor
 * jobs they need). Idempotent. */
void pool_quiesce(void);

/* Runs being run by a worker now (at most one per device). */
int pool_runs_running(void);

/* Stop: pool_quiesce, wait for the running jobs (each bounded by job_timeout_s), end the
 * workers. */
void pool_stop(void);

/* 1 when every worker is up (readyz). */
int pool_ready(void);

/* The /v1/device answer: {"devices":[{"id":"cpu",…},{"id":"cuda:0",…}]}. Caller deletes. */
cJSON *pool_devices_json(void);

/* The ids of the devices served, "cpu, cuda:0", for messages. */
void pool_device_list(char *out, size_t len);

/* The default device for a backend: "cuda:0" for GPU variants (NULL when no GPU is up),
 * "cpu" for cpu variants. */
const char *pool_default_device(int on_cpu);

/* Compute capability (major·10 + minor) of a device: 0 for cpu, -1 when unknown. */
int pool_device_cc(const char *device);

/* Run r synchronously on r->device: queue it (422 too_costly over cpu_max_macs on the cpu
 * device, 429 when the queue is full, 503 when the device is down or the server stops),
 * store it, wait for its end, store the result. Returns the HTTP status and sets *response:
 * the run record (200 done, 500 failed), or {"error":…} when it was refused before running
 * (nothing stored) or cancelled (409). Caller deletes *response. */
int pool_run_sync(const run_request *r, cJSON **response);

/* Queue r and answer at once (async=true): 202 + {"id","status":"queued","queue_position"}
 * once stored and queued, or the refusal pool_run_sync would give (nothing stored). The run
 * then moves queued → running → done | failed (refusals after 202 are stored as failed with
 * the reason) | cancelled (pool_cancel). Caller deletes *response. */
int pool_run_async(const run_request *r, cJSON **response);

/* Whether r could be queued on its device apart from the queue's room: 422 too_costly on the
 * cpu device over cpu_max_macs, 503 no_device when its device is not served or down, with
 * *response the error body (caller deletes); 0 when it could. For a study, which checks
 * every run before it stores anything. */
int pool_run_admissible(const run_request *r, cJSON **response);

/* pool_run_async when r->async_run, else pool_run_sync, with on_end (NULL: none) called at
 * the run's end before it is visible (pool_run_end_fn, pool_hooks.h), and on_stored (NULL:
 * none) once after, when GET /v1/runs/ID reads the end: for a caller that goes on from it. */
int pool_run(const run_request *r, pool_run_end_fn on_end, pool_run_end_fn on_stored, cJSON **response);

/* pool_run, and while a synchronous run waits, gone(client) is asked every 200 ms. A client
 * gone while its run is queued cancels it at once: its queue slot is freed, it is stored
 * "cancelled" with error code client_gone, and this returns 409 client_gone. A client gone
 * while its run runs: the run goes on unattended, its final record gets "client_gone":
 * true, and this returns 409 client_gone at once (nobody reads it). */
int pool_run_watched(const run_request *r, pool_run_end_fn on_end, pool_client_gone_fn gone, const void *client,
                     cJSON **response);

/* Cancel run id while it waits in a queue: stored "cancelled" with an error object; a
 * synchronous caller waiting on it gets 409 {"error":{"code":"cancelled"}}. 0, or -1 when
 * it is not waiting in any queue (running, finished or unknown). */
int pool_cancel(long long id);

/* The record of run id while it waits in a queue here, as GET /v1/runs/{id} answers it,
 * written from its struct with "queue_position" (1: next). NULL when it is not waiting here
 * (caller deletes). */
cJSON *pool_queued_record_json(long long id);

/* Runs waiting (or reserved) on device; 0 for an unknown device. */
int pool_queue_depth(const char *device);

/* The runs that read resident tensor tensor_id as q, k or v and have not ended: the one
 * running, then those waiting, in queue order. Writes up to max run ids to ids; returns how
 * many there are (may exceed max). For messages: the tensor table's pins decide. */
int pool_runs_reading_tensor(const char *tensor_id, long long *ids, int max);

/* ---- resident tensors (docs/tensors.md) ---- */

/* Send a tensor_* message (common/proto.h) to device's worker through its queue (after
 * the jobs already waiting), with fd (≥ 0) passed along, and wait for the answer. The
 * message's "job" is set here. Returns 200 with *reply the worker's message (tensor_result,
 * error or failed); or 503 (device down, stopping) / 500 (the worker was lost) with *reply
 * an {"error":…} body. *reply_fd: the answer's descriptor or -1 (caller closes);
 * *generation: the generation of the worker that answered. Caller deletes *reply. */
int pool_tensor_op(const char *device, cJSON *msg, int fd, cJSON **reply, int *reply_fd, int *generation);

/* The worker generation of device: how many times its worker restarted (a tensor uploaded
 * at an older generation is gone). -1 when the device is unknown or down. */
int pool_device_generation(const char *device);

/* The device object of the last hello (caller deletes), NULL when unknown. */
cJSON *pool_device_json(const char *device);

/* Variant `name`'s report in device's last hello: {"name","ready","why","library","impls"}
 * (server/worker/variants_report.h). Caller deletes; NULL when unknown. */
cJSON *pool_device_variant(const char *device, const char *name);

#endif
