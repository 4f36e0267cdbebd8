/* device_cache.h — device blocks a GPU worker keeps between jobs instead of freeing them.
 *
 * A small run allocated and freed its four or five buffers every time: cudaMalloc and
 * cudaFree (which waits for the device) took about 0.2 ms of the 1.5 ms a tiny run spends in
 * the worker. Blocks up to max_block bytes, rounded up to a power of two below the granule and
 * to whole granules above, go back to an idle list of at most max_idle bytes and serve the
 * next allocation they fit (at most twice its size); larger ones are allocated and freed as
 * before. An allocation that finds the device full releases the idle blocks and tries once
 * more, so the cache never refuses what the device could hold.
 *
 * The policy only: the raw allocator comes in as two functions, so tests can run it without a
 * GPU (server/worker/memory/device_memory.c binds it to cudaMalloc and cudaFree). Not thread-safe:
 * a worker allocates from its job loop only.
 */
#ifndef DEVICE_CACHE_H
#define DEVICE_CACHE_H

#include <stddef.h>

/* The raw allocator: 0 on success, else its error code (no_memory_code when the device is full). */
typedef int (*device_raw_alloc)(void **p, size_t bytes, void *arg);
typedef int (*device_raw_free)(void *p, void *arg);

typedef struct device_block {
    void *ptr;
    size_t bytes; /* as allocated (rounded when cacheable) */
} device_block;

typedef struct device_cache {
    device_raw_alloc raw_alloc;
    device_raw_free raw_free;
    void *arg;
    int no_memory_code;
    size_t granule, max_block, max_idle;
    device_block *live, *idle;
    int nlive, nidle;
    size_t live_cap, idle_cap, idle_bytes;
    long long reused; /* allocations served from the idle list */
} device_cache;

void device_cache_init(device_cache *c, device_raw_alloc raw_alloc, device_raw_free raw_free, void *arg,
                       int no_memory_code, size_t granule, size_t max_block, size_t max_idle);

/* *p: a block of at least bytes (bytes 0: NULL, returns 0). 0, or the raw allocator's error
 * (no_memory_code once even the idle blocks are released), *p NULL. */
int device_cache_alloc(device_cache *c, void **p, size_t bytes);

/* Give back what device_cache_alloc returned (NULL allowed): kept idle when it fits, else freed.
 * A pointer the cache never gave is freed raw. 0, or the raw free's error. */
int device_cache_free(device_cache *c, void *p);

/* The idle blocks' bytes: free for the next allocation, though the device counts them used. */
size_t device_cache_idle_bytes(const device_cache *c);

/* Free every idle block. 0, or the first raw free error. */
int device_cache_release(device_cache *c);

/* Release, then forget the bookkeeping (blocks still live stay allocated: their owner frees them). */
void device_cache_destroy(device_cache *c);

#endif
