/* cpu_job.h — the cpu device: the fp64 reference, runs of the `reference` variant, and
 * `verify` of GPU outputs. Plain C; works on any machine. */
#ifndef CPU_WORKER_H
#define CPU_WORKER_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "server/worker/phases.h"

#include "common/api_error.h"
#include "common/run_request.h"

/* The cpu device object: id "cpu", name (the CPU model from /proc/cpuinfo), cores. */
cJSON *cpu_device_json(void);

/* Run a cpu variant (timing with a monotonic clock, output summary, verify against the
 * unrounded fp64 result). Result object as gpu_worker_run; NULL with e on failure. */
cJSON *cpu_worker_run(const run_request *r, int threads, phases *ph, api_error *e);

/* Regenerate r's inputs, compute the fp64 reference and compare with the `bytes` output
 * bytes (dtype r->problem.dtype) read from fd. Returns the "verify" object, or NULL with e. */
cJSON *cpu_worker_verify(const run_request *r, int fd, size_t bytes, int threads, api_error *e);

#endif
