/* test_device_cache.c — the idle list a GPU worker keeps its run buffers in, over a host
 * allocator that counts calls and can be told the device is full: a small run's blocks serve
 * the next, larger blocks and overflow go back at once, a full device releases the idle blocks
 * and retries, and nothing is leaked or freed twice. */
#include <stdlib.h>

#include "tests/unit/check.h"
#include "server/worker/memory/device_cache.h"

#define NO_MEMORY 2
#define MIB ((size_t)1 << 20)

static struct {
    int allocs, frees, live;
    size_t live_bytes, capacity; /* capacity 0: no limit */
} fake;

static int fake_alloc(void **p, size_t bytes, void *arg)
{
    (void)arg;
    if (fake.capacity && fake.live_bytes + bytes > fake.capacity) return NO_MEMORY;
    size_t *b = malloc(sizeof(size_t) + 16);
    if (!b) return 1;
    *b = bytes;
    *p = b;
    fake.allocs++, fake.live++, fake.live_bytes += bytes;
    return 0;
}

static int fake_free(void *p, void *arg)
{
    (void)arg;
    fake.frees++, fake.live--, fake.live_bytes -= *(size_t *)p;
    free(p);
    return 0;
}

int main(void)
{
    device_cache c;
    void *a, *b, *q, *big, *x;
    device_cache_init(&c, fake_alloc, fake_free, NULL, NO_MEMORY, 2 * MIB, 64 * MIB, 8 * MIB);

    /* Two buffers, rounded to a power of two below the 2 MiB granule and to whole granules
     * above, kept idle when freed, then served again. */
    CHECK(device_cache_alloc(&c, &a, 300000) == 0 && a && *(size_t *)a == 512 * 1024, "300000 as 512 KiB");
    CHECK(device_cache_alloc(&c, &b, 5 * MIB) == 0 && *(size_t *)b == 6 * MIB, "5 MiB as 6 MiB");
    CHECK(device_cache_free(&c, a) == 0 && device_cache_free(&c, b) == 0, "freed");
    CHECK(fake.frees == 0 && device_cache_idle_bytes(&c) == 6 * MIB + 512 * 1024, "both idle: %zu",
          device_cache_idle_bytes(&c));
    CHECK(device_cache_alloc(&c, &q, 400000) == 0 && q == a, "the 512 KiB block serves 400000 bytes");
    CHECK(device_cache_alloc(&c, &x, 1 * MIB) == 0 && x != b && fake.allocs == 3,
          "the 6 MiB block is more than twice 1 MiB: left idle, a new block");
    CHECK(device_cache_idle_bytes(&c) == 6 * MIB && c.reused == 1, "6 MiB idle, one reuse");
    CHECK(device_cache_free(&c, x) == 0 && device_cache_idle_bytes(&c) == 7 * MIB, "x idle too");

    /* Over the idle limit (8 MiB), a freed block goes back to the device. */
    CHECK(device_cache_alloc(&c, &big, 10 * MIB) == 0 && fake.allocs == 4, "10 MiB: no idle block holds it");
    CHECK(device_cache_free(&c, big) == 0 && fake.frees == 1 && device_cache_idle_bytes(&c) == 7 * MIB,
          "the idle list would pass 8 MiB: freed");

    /* A tiny block is not blown up to the granule. */
    CHECK(device_cache_alloc(&c, &x, 100) == 0 && *(size_t *)x == 512 && device_cache_free(&c, x) == 0, "100 as 512");

    /* Blocks over max_block are neither rounded nor kept. */
    device_cache c2;
    int frees = fake.frees;
    device_cache_init(&c2, fake_alloc, fake_free, NULL, NO_MEMORY, 2 * MIB, 4 * MIB, 64 * MIB);
    CHECK(device_cache_alloc(&c2, &big, 5 * MIB + 3) == 0 && *(size_t *)big == 5 * MIB + 3, "not rounded");
    CHECK(device_cache_free(&c2, big) == 0 && fake.frees == frees + 1 && device_cache_idle_bytes(&c2) == 0, "not kept");
    device_cache_destroy(&c2);

    /* A full device: the idle blocks are released and the allocation tried again. */
    fake.capacity = fake.live_bytes + 6 * MIB; /* the 7 MiB kept idle are in the way of 12 */
    CHECK(device_cache_alloc(&c, &big, 12 * MIB) == 0 && device_cache_idle_bytes(&c) == 0, "released, then fits");
    CHECK(device_cache_alloc(&c, &a, 64 * MIB) == NO_MEMORY && a == NULL, "still full: the device's answer");
    fake.capacity = 0;

    /* A pointer the cache never gave is freed raw; zero bytes is NULL. */
    void *foreign = NULL;
    frees = fake.frees;
    CHECK(fake_alloc(&foreign, 1000, NULL) == 0 && device_cache_free(&c, foreign) == 0 && fake.frees == frees + 1,
          "foreign pointer freed raw");
    CHECK(device_cache_alloc(&c, &a, 0) == 0 && a == NULL && device_cache_free(&c, NULL) == 0, "zero bytes");

    /* Everything given back and destroyed: nothing left on the device. */
    CHECK(device_cache_free(&c, q) == 0 && device_cache_free(&c, big) == 0, "freed");
    device_cache_destroy(&c);
    CHECK(fake.live == 0 && fake.live_bytes == 0, "no leak: %d blocks, %zu bytes", fake.live, fake.live_bytes);
    return CHECK_DONE();
}
