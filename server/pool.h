/* pool.h — the front's side of the workers: one child process per GPU plus the cpu one,
 * each with its bounded queue and one dispatcher thread. The front never touches CUDA: it
 * learns the GPUs from `attnd --probe` and each worker's hello.
 *
 * A worker that crashes, reports a sticky CUDA error or outlives job_timeout_s is ended
 * (SIGKILL) and started again; its job ends `failed` with the reason; queued jobs go on.
 */
#ifndef POOL_H
#define POOL_H

#include <cjson/cJSON.h>

#include "run_request.h"
#include "settings.h"

/* Probe GPUs, start workers, wait for their hellos. 0, or -1 with err filled. A machine
 * without GPUs is not an error: only the cpu worker starts. */
int pool_start(const settings *s, char *err, size_t err_len);

/* Stop accepting, end the workers. */
void pool_stop(void);

/* 1 when every worker is up (readyz). */
int pool_ready(void);

/* The /v1/device answer: {"devices":[{"id":"cpu",…},{"id":"cuda:0",…}]}. Caller deletes. */
cJSON *pool_devices_json(void);

/* The default device for a backend: "cuda:0" for GPU variants (NULL when no GPU is up),
 * "cpu" for cpu variants. */
const char *pool_default_device(int on_cpu);

/* Compute capability (major·10 + minor) of a device: 0 for cpu, -1 when unknown. */
int pool_device_cc(const char *device);

/* Run r synchronously on r->device: queue it (429 when the queue is full, 503 when the
 * device is down), store it, wait for its end, store the result. Returns the HTTP status
 * and sets *response: the run record (200 done, 500 failed), or {"error":…} when it was
 * refused before running (nothing stored). Caller deletes *response. */
int pool_run_sync(const run_request *r, cJSON **response);

#endif
