/* profile.h — what one forward launched, measured with CUPTI activity tracing.
 *
 * profile_forward runs one separate forward (never a timed one) with CONCURRENT_KERNEL,
 * MEMCPY, MEMSET, RUNTIME, DRIVER (and MARKER for NVTX) activity enabled, flushes, and
 * joins GPU records to the API call that launched them by correlation id. Rows group GPU
 * activities by (kind, name); the raw events are kept for the trace.
 */
#ifndef PROFILE_H
#define PROFILE_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "kernels/exec_context.h"
#include "server/worker/measure.h"

typedef enum profile_kind {
    PROFILE_NVTX = -2,   /* profile_event only: an NVTX range */
    PROFILE_API = -1,    /* profile_event only: a runtime/driver API call */
    PROFILE_KERNEL = 0,
    PROFILE_MEMCPY = 1,
    PROFILE_MEMSET = 2
} profile_kind;

typedef struct kernel_row {
    profile_kind kind;
    char name[384];         /* demangled kernel name; "Memcpy DtoD", "Memset" for memops */
    int calls;
    double gpu_us;          /* summed over calls */
    char launch_api[48];    /* cudaLaunchKernel, cuLaunchKernelEx, cudaMemcpyAsync, … */
    int grid[3], block[3];  /* of the first call */
    int regs;               /* registers per thread */
    int smem_static, smem_dynamic; /* bytes per block */
    double occupancy;       /* theoretical, 0..1 (cuda_occupancy.h); 0 for memops */
    uint64_t bytes;         /* memops: bytes moved or set, summed */
} kernel_row;

typedef struct profile_event {
    profile_kind kind;       /* or PROFILE_API (-1) for an API call, PROFILE_NVTX (-2) for an NVTX range */
    char name[384];
    uint64_t start_ns, end_ns;
    uint32_t correlation, stream;
    uint32_t thread;          /* API / NVTX: the CPU thread */
} profile_event;

typedef struct profile_result {
    int kernels_per_forward;
    int memops_per_forward;
    double gpu_us;            /* time the GPU ran at least one of the forward's activities */
    kernel_row *rows;         /* malloc'd, nrows long, in order of first launch */
    int nrows;
    profile_event *events;    /* malloc'd raw records, for the trace */
    int nevents;
    uint64_t dropped;         /* records CUPTI dropped (0 or the table is incomplete) */
} profile_result;

/* Subscribe to CUPTI once per worker, at start, before any NVTX call; nvtx_to_cupti (the
 * setting): route NVTX ranges into the trace. Returns 0, or -1 with ctx->error set (the
 * worker then answers profile requests with that reason). */
int profile_init(exec_context *ctx, int nvtx_to_cupti);

/* Run fn(arg) once under tracing and fill out (caller frees with profile_free).
 * Returns 0, or -1 with ctx->error set. */
int profile_forward(exec_context *ctx, forward_fn fn, void *arg, profile_result *out);

void profile_free(profile_result *p);

/* The "kernels" object: per_forward, memops_per_forward, gpu_us, table. */
cJSON *profile_to_json(const profile_result *p);

#endif
