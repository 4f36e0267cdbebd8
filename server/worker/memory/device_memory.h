/* device_memory.h — the GPU worker's device allocations: its runs' buffers and its resident
 * tensors, through one device_cache (device_cache.h) over cudaMalloc and cudaFree, so a small
 * run reuses the blocks of the one before it.
 */
#ifndef DEVICE_MEMORY_H
#define DEVICE_MEMORY_H

#include <stddef.h>

/* *p: device memory of at least bytes (0 bytes: NULL). Returns a cudaError_t as int:
 * cudaErrorMemoryAllocation when the device cannot hold it even without the idle blocks. */
int device_memory_alloc(void **p, size_t bytes);

/* Give back what device_memory_alloc returned (NULL allowed). The device is synchronised first,
 * as cudaFree does, so no queued work of its owner writes a block the next one gets. Returns a
 * cudaError_t as int. */
int device_memory_free(void *p);

/* Bytes the worker keeps idle: free for its next allocation, though cudaMemGetInfo counts
 * them used. */
size_t device_memory_idle_bytes(void);

/* cudaMemGetInfo's free bytes plus the idle ones. Returns a cudaError_t as int. */
int device_memory_free_bytes(size_t *free_b, size_t *total_b);

/* Free the idle blocks (the worker's exit, before its context goes). */
void device_memory_release(void);

#endif
