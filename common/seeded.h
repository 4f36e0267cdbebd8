/* seeded.h — the counter-based hash behind everything a run's `seed` makes (docs/inputs.md):
 * the input values (kernels/inputs.h), the per-sequence lengths a distribution draws
 * (common/run_request.c) and the order of a paged cache's pages (kernels/seq_layout.c).
 *
 * Draw i of stream s for a seed is a pure function of (seed, s, i): integer arithmetic mod
 * 2^64 only, so C, CUDA and numpy (clients/python/attnd_ref) make the same bits in any order.
 * Header only: the front (lengths) and the kernels (values, pages) both need it.
 */
#ifndef SEEDED_H
#define SEEDED_H

#include <stdint.h>

#include "common/attn.h"

/* The streams. 0..2 are the tensors q, k, v (kernels/inputs.h); the rest are a serving
 * batch's (docs/inputs.md#serving-batches). */
#define SEEDED_STREAM_K_FILL 3      /* paged K cache slots that hold no token */
#define SEEDED_STREAM_V_FILL 4      /* paged V cache slots that hold no token */
#define SEEDED_STREAM_PAGES 5       /* the order of the cache's pages */
#define SEEDED_STREAM_SEQLENS_Q 6   /* seqlens_q drawn from a distribution */
#define SEEDED_STREAM_SEQLENS_KV 7  /* seqlens_kv drawn from a distribution */

/* SplitMix64's finaliser. */
ATTN_HD uint64_t seeded_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The key of stream s: mix64(seed ^ ((s + 1) · 0xD1B54A32D192ED03)). */
ATTN_HD uint64_t seeded_stream_key(uint64_t seed, int stream)
{
    return seeded_mix64(seed ^ ((uint64_t)(stream + 1) * 0xD1B54A32D192ED03ull));
}

/* Draw i (0, 1, …) of the stream with that key: mix64(key + (i + 1) · 0x9E3779B97F4A7C15). */
ATTN_HD uint64_t seeded_draw(uint64_t key, uint64_t i) { return seeded_mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull); }

#endif
