/* tensor_memory.h — where a worker's resident tensors live and how bytes get there: device
 * memory (server/worker/memory/device_memory.h) on a GPU worker, host memory on the cpu
 * worker, and the copies into it from an upload's memfd, straight out of its page-locked pages
 * where the driver allows.
 * For the files of server/worker/tensors/.
 */
#ifndef TENSOR_MEMORY_H
#define TENSOR_MEMORY_H

#include <stddef.h>

#include "common/api_error.h"

/* Uploads from this size on are copied from their page-locked mapping (tensor_mem_pin);
 * smaller ones with one driver-staged cudaMemcpy, where locking and unlocking the pages
 * would cost more than the copy. */
#define TENSOR_MEM_PIN_MIN_BYTES ((size_t)4 << 20)

/* Once, at the worker's start: device memory and copies to the device (1), or host memory (0). */
void tensor_mem_init(int on_gpu);
int tensor_mem_on_gpu(void);

/* Bytes free where tensors go now (cudaMemGetInfo, or MemAvailable). */
double tensor_mem_free_bytes(void);

/* Allocate bytes the worker's way for tensor id. 0, or -1 with e (507 out of memory, 500
 * otherwise). */
int tensor_mem_alloc(void **p, size_t bytes, const char *id, api_error *e);

/* Free what tensor_mem_alloc gave (NULL allowed). */
void tensor_mem_release(void *p);

/* A failed CUDA call as e (500 cuda_error, "what (bytes) failed: why"). Returns -1.
 * ce is a cudaError_t, passed as int so this header needs no CUDA. */
int tensor_mem_cuda_failed(int ce, const char *what, size_t bytes, api_error *e);

/* Page-lock the mapping [map, map + bytes) of an upload (page-aligned) so copies from it are
 * DMA straight out of its pages. 1 when it is registered (tensor_mem_unpin it after the
 * copies), 0 when the driver refused (the copies are then staged by the driver; said once). */
int tensor_mem_pin(void *map, size_t bytes);
void tensor_mem_unpin(void *map);

/* An upload's bytes at src (src_pinned: inside a tensor_mem_pin'd range) into dst (device
 * memory on a GPU, host memory on the cpu worker). 0, or -1 with e. From a page-locked
 * range the copy is only queued: tensor_mem_copies_done waits for it. */
int tensor_mem_copy_in(void *dst, const void *src, int src_pinned, size_t bytes, api_error *e);

/* Every copy tensor_mem_copy_in queued has ended. 0, or -1 with e. */
int tensor_mem_copies_done(api_error *e);

/* The same wait on a failure path: no queued copy may still read an upload or write a buffer
 * once this returns. */
void tensor_mem_copies_drain(void);

#endif
