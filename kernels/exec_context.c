/* exec_context.c — the failure bookkeeping behind CUDA_TRY / CUBLAS_TRY (exec_context.h).
 *
 * A job keeps its first failure: later ones are usually consequences of it (a sticky error
 * makes every following call fail too) and would hide the cause.
 */
#include "kernels/exec_context.h"

#include <stdio.h>

int exec_fail(exec_context *ctx, const char *file, int line, const char *call, const char *reason)
{
    if (ctx && ctx->error[0] == '\0')
        snprintf(ctx->error, sizeof ctx->error, "%s failed at %s:%d: %s", call, file, line,
                 reason ? reason : "unknown error");
    return -1;
}

/* Errors after which the CUDA context is unusable: every later call in this process fails
 * with the same code, so the worker must exit and be restarted (CUDA runtime docs: "the
 * process must be terminated and relaunched"). */
static int exec_cuda_error_is_sticky(cudaError_t err)
{
    switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorExternalDevice:
    case cudaErrorContextIsDestroyed:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorUnknown:
        return 1;
    default:
        return 0;
    }
}

int exec_fail_cuda(exec_context *ctx, const char *file, int line, const char *call, cudaError_t err)
{
    char reason[256];
    snprintf(reason, sizeof reason, "%s: %s", cudaGetErrorName(err), cudaGetErrorString(err));
    if (ctx && exec_cuda_error_is_sticky(err)) ctx->sticky = 1;
    return exec_fail(ctx, file, line, call, reason);
}

void exec_clear_error(exec_context *ctx)
{
    if (ctx) ctx->error[0] = '\0';
}

const char *exec_cublas_status_name(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED: cuBLAS was not initialised";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED: resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE: an unsupported value or parameter";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH: feature absent on this architecture";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR: access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED: the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR: an internal cuBLAS operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED: the functionality is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR: license error";
    default: return "CUBLAS_STATUS_UNKNOWN: unknown cuBLAS status";
    }
}
