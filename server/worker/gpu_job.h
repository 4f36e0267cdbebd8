/* gpu_job.h — one run on one GPU, inside a worker process (the only code that uses CUDA
 * at job level).
 *
 * gpu_worker_run: check the problem against the device's free memory before allocating
 * (413 when it cannot fit), allocate q, k, v, out and the variant's workspace, generate the
 * inputs from the seed on the GPU, warm up, time (measure.h), poison the output with NaN
 * bytes, run one profiled forward (profile.h) and summarise that output (so an element the
 * variant never wrote shows as NaN), optionally verify, free, answer.
 */
#ifndef GPU_WORKER_H
#define GPU_WORKER_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "server/worker/phases.h"

#include "common/api_error.h"
#include "common/run_request.h"
#include "common/settings.h"

typedef struct gpu_worker gpu_worker;

/* Create the context of CUDA device `device`: stream, cuBLAS handle and workspace, CUPTI
 * subscription, NVML, L2 flush buffer. s: the settings (price_per_hour, cupti,
 * nvtx_to_cupti). NULL with err filled on failure. */
gpu_worker *gpu_worker_open(int device, const settings *s, char *err, size_t err_len);
void gpu_worker_close(gpu_worker *w);

/* The device's compute capability, major·10 + minor. */
int gpu_worker_cc(const gpu_worker *w);

/* The device object of /v1/device: id, name, compute_capability, sms, memory_total_bytes,
 * memory_free_bytes, l2_bytes, sm_clock_max_mhz, mem_clock_max_mhz, driver, cuda_driver,
 * cuda_runtime, cublas, cudnn (null when not loadable). Caller deletes. */
cJSON *gpu_worker_device_json(gpu_worker *w);

/* Number of CUDA devices, for `attnd --probe`; 0 when there is no driver or no GPU (why in
 * err). */
int gpu_device_count(char *err, size_t err_len);

/* Run one job with r->impl's kernel family. Returns the result
 * object {timing, kernels, output, verify, perf, energy; impl_used for flash, efficient and
 * flashinfer's decodes: the family that ran}; or NULL with e filled: 4xx when refused before anything ran (nothing
 * to store), 500 when it failed while running. *output_fd: a memfd holding the output bytes when r->verify and the
 * problem is small enough for the cpu reference (the front sends it there and fills
 * "verify"); else -1 and "verify" is the GPU fp32 math comparison (or absent). *fatal: the
 * CUDA context is broken (sticky error); the worker must answer and exit. */
cJSON *gpu_worker_run(gpu_worker *w, const run_request *r, phases *ph, api_error *e, int *output_fd, int *fatal);

/* Test hook (settings.enable_fault_injection, fault=sticky): launch a kernel that writes
 * through an invalid address, so the context takes a sticky error as a buggy kernel would.
 * Returns -1 with the CUDA error text in err. */
int gpu_worker_fault_sticky(gpu_worker *w, char *err, size_t err_len);

#endif
