/* device_cache.c — the idle list of a GPU worker's device blocks (device_cache.h). */
#include "server/worker/memory/device_cache.h"

#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

void device_cache_init(device_cache *c, device_raw_alloc raw_alloc, device_raw_free raw_free, void *arg,
                       int no_memory_code, size_t granule, size_t max_block, size_t max_idle)
{
    memset(c, 0, sizeof *c);
    c->raw_alloc = raw_alloc;
    c->raw_free = raw_free;
    c->arg = arg;
    c->no_memory_code = no_memory_code;
    c->granule = granule ? granule : 1;
    c->max_block = max_block;
    c->max_idle = max_idle;
}

static int device_blocks_push(device_block **a, int *n, size_t *cap, device_block b)
{
    if (grow_array(a, cap, (size_t)*n + 1, sizeof **a, 16) != 0) return -1;
    (*a)[(*n)++] = b;
    return 0;
}

static void device_blocks_remove(device_block *a, int *n, int i) { a[i] = a[--*n]; }

/* What a block of bytes is allocated as: a power of two from 512 bytes up to the granule, then
 * whole granules, so that the blocks of runs of nearby sizes serve each other; a small resident
 * tensor is not blown up to a whole granule. Past max_block, as asked. */
static size_t device_cache_rounded(const device_cache *c, size_t bytes)
{
    if (bytes > c->max_block) return bytes;
    if (bytes >= c->granule) return (bytes + c->granule - 1) / c->granule * c->granule;
    size_t r = 512;
    while (r < bytes) r *= 2;
    return r;
}

int device_cache_alloc(device_cache *c, void **p, size_t bytes)
{
    const size_t want = device_cache_rounded(c, bytes);
    int best = -1, rc;
    *p = NULL;
    if (bytes == 0) return 0;
    /* the smallest idle block that holds it, at most twice its size */
    for (int i = 0; i < c->nidle; i++)
        if (c->idle[i].bytes >= want && c->idle[i].bytes / 2 <= want &&
            (best < 0 || c->idle[i].bytes < c->idle[best].bytes))
            best = i;
    if (best >= 0 && device_blocks_push(&c->live, &c->nlive, &c->live_cap, c->idle[best]) == 0) {
        *p = c->idle[best].ptr;
        c->idle_bytes -= c->idle[best].bytes;
        device_blocks_remove(c->idle, &c->nidle, best);
        c->reused++;
        return 0;
    }
    rc = c->raw_alloc(p, want, c->arg);
    if (rc == c->no_memory_code && c->nidle > 0) { /* the idle blocks may be what the device misses */
        (void)device_cache_release(c);
        rc = c->raw_alloc(p, want, c->arg);
    }
    if (rc != 0) {
        *p = NULL;
        return rc;
    }
    /* untracked, it would be freed raw and never kept: the same as before the cache */
    (void)device_blocks_push(&c->live, &c->nlive, &c->live_cap, (device_block){*p, want});
    return 0;
}

int device_cache_free(device_cache *c, void *p)
{
    int i;
    if (!p) return 0;
    for (i = c->nlive - 1; i >= 0 && c->live[i].ptr != p; i--) {
    }
    if (i < 0) return c->raw_free(p, c->arg);
    device_block b = c->live[i];
    device_blocks_remove(c->live, &c->nlive, i);
    if (b.bytes <= c->max_block && c->idle_bytes + b.bytes <= c->max_idle &&
        device_blocks_push(&c->idle, &c->nidle, &c->idle_cap, b) == 0) {
        c->idle_bytes += b.bytes;
        return 0;
    }
    return c->raw_free(b.ptr, c->arg);
}

size_t device_cache_idle_bytes(const device_cache *c) { return c->idle_bytes; }

int device_cache_release(device_cache *c)
{
    int rc = 0;
    for (int i = 0; i < c->nidle; i++) {
        int r = c->raw_free(c->idle[i].ptr, c->arg);
        if (r != 0 && rc == 0) rc = r;
    }
    c->nidle = 0;
    c->idle_bytes = 0;
    return rc;
}

void device_cache_destroy(device_cache *c)
{
    (void)device_cache_release(c);
    free(c->live);
    free(c->idle);
    c->live = c->idle = NULL;
    c->nlive = c->nidle = 0;
    c->live_cap = c->idle_cap = 0;
}
