/* device_memory.c — the GPU worker's device_cache over cudaMalloc and cudaFree (device_memory.h). */
#include "server/worker/memory/device_memory.h"

#include <cuda_runtime_api.h>

#include "server/worker/memory/device_cache.h"

/* The driver hands out device memory in 2 MiB pages; blocks up to 64 MiB are kept, 256 MiB of
 * them at most (a few small runs' worth; larger runs do not feel 0.2 ms). */
#define DEVICE_GRANULE ((size_t)2 << 20)
#define DEVICE_MAX_KEPT_BLOCK ((size_t)64 << 20)
#define DEVICE_MAX_IDLE ((size_t)256 << 20)

static int device_raw_cuda_alloc(void **p, size_t bytes, void *arg)
{
    (void)arg;
    cudaError_t ce = cudaMalloc(p, bytes);
    if (ce != cudaSuccess) (void)cudaGetLastError(); /* not left for a later launch check */
    return (int)ce;
}

static int device_raw_cuda_free(void *p, void *arg)
{
    (void)arg;
    return (int)cudaFree(p);
}

static device_cache device_memory_cache;
static int device_memory_ready;

static device_cache *device_memory_get(void)
{
    if (!device_memory_ready) {
        device_cache_init(&device_memory_cache, device_raw_cuda_alloc, device_raw_cuda_free, NULL,
                          (int)cudaErrorMemoryAllocation, DEVICE_GRANULE, DEVICE_MAX_KEPT_BLOCK, DEVICE_MAX_IDLE);
        device_memory_ready = 1;
    }
    return &device_memory_cache;
}

int device_memory_alloc(void **p, size_t bytes) { return device_cache_alloc(device_memory_get(), p, bytes); }

int device_memory_free(void *p)
{
    cudaError_t ce;
    if (!p) return 0;
    ce = cudaDeviceSynchronize();
    if (ce != cudaSuccess) return (int)ce; /* a broken context: the worker exits, the driver frees */
    return device_cache_free(device_memory_get(), p);
}

size_t device_memory_idle_bytes(void) { return device_cache_idle_bytes(device_memory_get()); }

int device_memory_free_bytes(size_t *free_b, size_t *total_b)
{
    cudaError_t ce = cudaMemGetInfo(free_b, total_b);
    if (ce == cudaSuccess) *free_b += device_memory_idle_bytes();
    return (int)ce;
}

void device_memory_release(void)
{
    if (device_memory_ready) device_cache_destroy(&device_memory_cache);
    device_memory_ready = 0;
}
