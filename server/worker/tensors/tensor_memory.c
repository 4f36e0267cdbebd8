/* tensor_memory.c — the resident tensors' memory and the copies into it (tensor_memory.h).
 *
 * From TENSOR_MEM_PIN_MIN_BYTES on, a GPU worker page-locks its read-only mapping of an upload's
 * memfd (cudaHostRegister) and the copy is a DMA straight out of the memfd's pages, queued on
 * the copy stream while the CPU computes the fingerprint, then synchronised (so no later
 * kernel can see it in flight) and the mapping unlocked. Smaller uploads, and any the driver
 * refuses to lock, are one cudaMemcpy from the pageable mapping, which the driver stages. On
 * the H200 (1 GiB) that staged copy took 0.27 s, the page-locked one 0.11 s; a pread through a
 * pinned double buffer took 0.34 s, worse than the driver: one thread copies memory at ~3 GB/s
 * on that VM, so the copy that costs nothing is the one not made.
 */
#include "server/worker/tensors/tensor_memory.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "common/host_memory.h"
#include "common/log.h"
#include "server/worker/memory/device_memory.h"

static int tm_on_gpu;
/* The copies from page-locked uploads: queued here, so the fingerprint can run meanwhile. */
static cudaStream_t tm_copy_stream;

void tensor_mem_init(int on_gpu) { tm_on_gpu = on_gpu; }

int tensor_mem_on_gpu(void) { return tm_on_gpu; }

double tensor_mem_free_bytes(void)
{
    if (tm_on_gpu) {
        size_t free_b = 0, total_b = 0;
        if (device_memory_free_bytes(&free_b, &total_b) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0.0;
        }
        return (double)free_b;
    } else {
        return host_memory_available_bytes();
    }
}

int tensor_mem_alloc(void **p, size_t bytes, const char *id, api_error *e)
{
    *p = NULL;
    if (tm_on_gpu) {
        cudaError_t ce = (cudaError_t)device_memory_alloc(p, bytes ? bytes : 1);
        if (ce == cudaSuccess) return 0;
        *p = NULL;
        return api_fail(e, ce == cudaErrorMemoryAllocation ? 507 : 500,
                        ce == cudaErrorMemoryAllocation ? "insufficient_storage" : "cuda_error", "",
                        "cudaMalloc of tensor %s (%zu bytes) failed: %s", id, bytes, cudaGetErrorString(ce));
    }
    *p = malloc(bytes ? bytes : 1);
    if (*p) return 0;
    return api_fail(e, 507, "insufficient_storage", "", "host allocation of tensor %s (%zu bytes) failed", id, bytes);
}

void tensor_mem_release(void *p)
{
    if (!p) return;
    if (tm_on_gpu) {
        cudaError_t ce = (cudaError_t)device_memory_free(p);
        if (ce != cudaSuccess) log_warn("freeing a tensor failed at %s:%d: %s", __FILE__, __LINE__, cudaGetErrorString(ce));
    } else {
        free(p);
    }
}

int tensor_mem_cuda_failed(int ce, const char *what, size_t bytes, api_error *e)
{
    (void)cudaGetLastError();
    return api_fail(e, 500, "cuda_error", "", "%s (%zu bytes) failed: %s", what, bytes,
                    cudaGetErrorString((cudaError_t)ce));
}

/* The copy stream, made at the first page-locked upload. 0, or -1 with e. */
static int tm_copy_stream_ready(api_error *e)
{
    cudaError_t ce;

    if (tm_copy_stream) return 0;
    ce = cudaStreamCreateWithFlags(&tm_copy_stream, cudaStreamNonBlocking);
    if (ce == cudaSuccess) return 0;
    tm_copy_stream = NULL;
    return tensor_mem_cuda_failed(ce, "creating the upload copy stream", 0, e);
}

int tensor_mem_pin(void *map, size_t bytes)
{
    static int said;
    cudaError_t ce = cudaHostRegister(map, bytes, cudaHostRegisterReadOnly);

    if (ce == cudaSuccess) return 1;
    (void)cudaGetLastError();
    if (!said++)
        log_info("cudaHostRegister of an upload's read-only mapping (%zu bytes) failed: %s; uploads are staged "
                 "by the driver", bytes, cudaGetErrorString(ce));
    return 0;
}

void tensor_mem_unpin(void *map)
{
    cudaError_t ce = cudaHostUnregister(map);
    if (ce == cudaSuccess) return;
    (void)cudaGetLastError();
    log_warn("cudaHostUnregister of an upload's mapping failed at %s:%d: %s", __FILE__, __LINE__, cudaGetErrorString(ce));
}

int tensor_mem_copy_in(void *dst, const void *src, int src_pinned, size_t bytes, api_error *e)
{
    cudaError_t ce;

    if (!tm_on_gpu) {
        memcpy(dst, src, bytes);
        return 0;
    }
    if (src_pinned) { /* only queued: the caller fingerprints while it runs, then tensor_mem_copies_done */
        if (tm_copy_stream_ready(e) != 0) return -1;
        ce = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, tm_copy_stream);
        return ce == cudaSuccess ? 0 : tensor_mem_cuda_failed(ce, "cudaMemcpyAsync HtoD from the page-locked upload", bytes, e);
    }
    /* Pageable: the driver stages it. The synchronise orders it before any later kernel on
     * the worker's non-blocking stream. */
    ce = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    if (ce == cudaSuccess) ce = cudaDeviceSynchronize();
    return ce == cudaSuccess ? 0 : tensor_mem_cuda_failed(ce, "cudaMemcpy HtoD", bytes, e);
}

int tensor_mem_copies_done(api_error *e)
{
    cudaError_t ce = tm_copy_stream ? cudaStreamSynchronize(tm_copy_stream) : cudaSuccess;
    return ce == cudaSuccess ? 0 : tensor_mem_cuda_failed(ce, "the upload's copies (cudaStreamSynchronize)", 0, e);
}

void tensor_mem_copies_drain(void)
{
    if (tm_copy_stream && cudaStreamSynchronize(tm_copy_stream) != cudaSuccess) (void)cudaGetLastError();
}
