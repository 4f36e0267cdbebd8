/* exec_context.h — what a worker hands every variant: its stream, its library handles, the
 * device's properties, and one place to put the reason a call failed.
 *
 * One per worker process, created at start (worker owns and frees it). Variants never
 * allocate, synchronise or create handles: everything they need is here or in the
 * workspace they are given, so a forward can be captured into a CUDA graph.
 *
 * The check macros below are the only way kernels and the worker call CUDA, cuBLAS and
 * cuDNN: on failure they record "call failed at file:line: reason" in ctx->error and make
 * the enclosing function return -1. A sticky CUDA error (the context is unusable) also sets
 * ctx->sticky, after which the worker answers and exits so the front restarts it.
 */
#ifndef EXEC_CONTEXT_H
#define EXEC_CONTEXT_H

#include <stddef.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct exec_context {
    int device;                /* CUDA ordinal; -1 on the cpu device */
    int cc;                    /* compute capability, major·10 + minor */
    int sm_count;
    size_t l2_bytes;
    size_t smem_optin_bytes;   /* per-block opt-in shared memory limit */
    cudaStream_t stream;       /* every variant enqueues here, never on stream 0 */
    cublasHandle_t cublas;     /* bound to `stream`, workspace set, default math (no TF32) */
    void *d_cublas_workspace;  /* given to cuBLAS so it never allocates during capture */
    size_t cublas_workspace_bytes;
    int sticky;                /* a sticky CUDA error happened: the worker must exit */
    char error[512];           /* the first failure of the current job */
} exec_context;

/* Record a failure (keeps the first one of a job), return -1. */
int exec_fail(exec_context *ctx, const char *file, int line, const char *call, const char *reason);

/* Same for a CUDA error code; marks the context sticky when the code is one that
 * poisons the CUDA context (illegal address, launch failure, …). */
int exec_fail_cuda(exec_context *ctx, const char *file, int line, const char *call, cudaError_t err);

/* Clear the error text before a new job (sticky stays). */
void exec_clear_error(exec_context *ctx);

const char *exec_cublas_status_name(cublasStatus_t s);

#define CUDA_TRY(ctx, call)                                                                    \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) return exec_fail_cuda((ctx), __FILE__, __LINE__, #call, e_);    \
    } while (0)

/* After every <<<>>> launch: a bad configuration shows up here, not later. */
#define LAUNCH_TRY(ctx) CUDA_TRY((ctx), cudaGetLastError())

#define CUBLAS_TRY(ctx, call)                                                                  \
    do {                                                                                       \
        cublasStatus_t s_ = (call);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                       \
            return exec_fail((ctx), __FILE__, __LINE__, #call, exec_cublas_status_name(s_));   \
    } while (0)

/* Propagate a -1 from a callee that already recorded why. */
#define TRY(call)                                                                              \
    do {                                                                                       \
        if ((call) != 0) return -1;                                                            \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
