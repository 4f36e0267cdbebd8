/* inputs.h — the counter-based generator behind `seed`: documented in docs/inputs.md.
 *
 * Element i of tensor t (0 = q, 1 = k, 2 = v) for a given seed is a pure function of
 * (seed, t, i), so any element can be made by any thread in any order, and a client can
 * regenerate the inputs bit for bit (clients/python has a numpy version).
 *
 *   key  = mix64(seed ^ ((t + 1) · 0xD1B54A32D192ED03))
 *   h    = mix64(key + (i + 1) · 0x9E3779B97F4A7C15)            (all arithmetic mod 2^64)
 *   s    = Σ of the four 16-bit lanes of h − 131070               (Irwin–Hall, 4 terms)
 *   x    = float32(s) · 0x1.bb67aep-16f                           (≈ 1/37837.23: unit variance)
 *   elem = x rounded to the tensor's dtype, nearest even
 *
 * mix64 is SplitMix64's finaliser. Every step is exact integer arithmetic or one correctly
 * rounded float32 multiply, so CUDA, C and numpy agree exactly. Values lie in ±3.47 with
 * mean 0 and variance 1: close enough to a standard normal for attention to behave as it
 * does on real activations, and never zeros.
 */
#ifndef INPUTS_H
#define INPUTS_H

#include <stdint.h>

#include "common/attn.h"
#include "common/seeded.h"

#define INPUTS_TENSOR_Q 0
#define INPUTS_TENSOR_K 1
#define INPUTS_TENSOR_V 2

/* The hash and the stream keys are common/seeded.h's (the tensors are its streams 0..2). */
ATTN_HD uint64_t inputs_mix64(uint64_t z) { return seeded_mix64(z); }

ATTN_HD uint64_t inputs_tensor_key(uint64_t seed, int tensor) { return seeded_stream_key(seed, tensor); }

ATTN_HD float inputs_value(uint64_t key, uint64_t index)
{
    uint64_t h = seeded_draw(key, index);
    int32_t s = (int32_t)(h & 0xffff) + (int32_t)((h >> 16) & 0xffff) + (int32_t)((h >> 32) & 0xffff) +
                (int32_t)(h >> 48) - 131070;
    return (float)s * 0x1.bb67aep-16f;
}

#ifdef __cplusplus
extern "C" {
#endif

struct exec_context;

/* Fill n elements of tensor `tensor` into d_buf (device memory) on ctx's stream.
 * Returns 0, or -1 with ctx->error set. */
int inputs_generate_gpu(struct exec_context *ctx, void *d_buf, attn_dtype dtype, int64_t n, uint64_t seed,
                        int tensor);

/* The inputs of problem p as inputs_generate_problem_cpu makes them (the same bytes), on the
 * GPU on ctx's stream. A paged k or v reads its layout from the device copies in `seqs` (the
 * block table, and cu_seqlens_kv when ragged: attn_tensors' fields); p->seqs gives the table's
 * width. Any of q, k, v may be NULL (not made). Returns 0, or -1 with ctx->error set. */
int inputs_generate_problem_gpu(struct exec_context *ctx, const attn_problem *p, const attn_tensors *seqs,
                                uint64_t seed, void *q, void *k, void *v);

/* The same on the host, into buf (n elements of dtype). */
void inputs_generate_cpu(void *buf, attn_dtype dtype, int64_t n, uint64_t seed, int tensor);

/* The inputs of problem p as a run stores them (docs/inputs.md#serving-batches), on the host.
 * q, and k and v unless paged, are the first attn_*_elems(p) elements of their streams, as
 * for a dense problem (a ragged batch packs them: that is its layout). A paged k or v holds
 * in each token's slot the element its contiguous twin has there, and in every other slot the
 * element of the filler stream (SEEDED_STREAM_K_FILL, _V_FILL) at that slot's index. Any of
 * q, k, v may be NULL (not made). A paged problem needs p->seqs. */
void inputs_generate_problem_cpu(const attn_problem *p, uint64_t seed, void *q, void *k, void *v);

#ifdef __cplusplus
}
#endif
#endif
