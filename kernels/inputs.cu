/* inputs.cu — the seed generator (inputs.h) on the GPU.
 *
 * Versions:
 *   1. one element per thread, 2-byte stores.
 *   2. (this) 16 bytes per thread per step of a grid-stride loop: 8 bf16/fp16 or 4 fp32
 *      elements, one 16-byte store; a scalar tail for the last n % width elements and a
 *      scalar path for a buffer that is not 16-byte aligned. The generator is integer
 *      hashing (a few dozen 64-bit multiplies per element), so the store width matters
 *      less than a full grid; both are cheap next to one forward.
 *
 * Bit-exactness with the host: the value is inputs_value (integer arithmetic plus one
 * correctly rounded float32 multiply, which is what sm_xx does without fast-math flags)
 * and the rounding is dtype_f32_to_bf16 / dtype_f32_to_fp16 from dtype_convert.h, the
 * very functions the host uses — no CUDA conversion intrinsics, so there is nothing to
 * prove equal. tests/gpu compares a GPU-generated tensor's fingerprint with the host's.
 */
#include <stdint.h>

#include "kernels/dtype_convert.h"
#include "kernels/exec_context.h"
#include "kernels/inputs.h"

namespace {

constexpr int INPUTS_BLOCK = 256;

template <attn_dtype T>
__device__ __forceinline__ uint32_t inputs_bits(uint64_t key, uint64_t i)
{
    float x = inputs_value(key, i);
    if (T == ATTN_FP32) return dtype_f32_bits(x);
    if (T == ATTN_BF16) return dtype_f32_to_bf16(x);
    return dtype_f32_to_fp16(x);
}

/* Vector path: buf is 16-byte aligned; each step writes one uint4 (16 bytes). */
template <attn_dtype T>
__global__ void inputs_vec_kernel(void *buf, int64_t n_vec, uint64_t key)
{
    constexpr int per_vec = (T == ATTN_FP32) ? 4 : 8;
    uint4 *out = static_cast<uint4 *>(buf);
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < n_vec; v += stride) {
        uint64_t base = (uint64_t)v * per_vec;
        uint32_t w[4];
        if (per_vec == 4) {
#pragma unroll
            for (int j = 0; j < 4; j++) w[j] = inputs_bits<T>(key, base + j);
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++)
                w[j] = inputs_bits<T>(key, base + 2 * j) | (inputs_bits<T>(key, base + 2 * j + 1) << 16);
        }
        out[v] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* Scalar path: elements [first, n), for the tail or an unaligned buffer. */
template <attn_dtype T>
__global__ void inputs_scalar_kernel(void *buf, int64_t first, int64_t n, uint64_t key)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = first + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint32_t b = inputs_bits<T>(key, (uint64_t)i);
        if (T == ATTN_FP32) static_cast<uint32_t *>(buf)[i] = b;
        else static_cast<uint16_t *>(buf)[i] = (uint16_t)b;
    }
}

/* Enough blocks to fill the device a few times over; the grid-stride loop does the rest. */
unsigned inputs_grid(const exec_context *ctx, int64_t items)
{
    int64_t want = (items + INPUTS_BLOCK - 1) / INPUTS_BLOCK;
    int64_t cap = (ctx->sm_count > 0 ? ctx->sm_count : 132) * 8;
    if (want > cap) want = cap;
    return (unsigned)(want > 0 ? want : 1);
}

template <attn_dtype T>
int inputs_launch(exec_context *ctx, void *d_buf, int64_t n, uint64_t key)
{
    constexpr int per_vec = (T == ATTN_FP32) ? 4 : 8;
    int64_t n_vec = ((uintptr_t)d_buf % 16 == 0) ? n / per_vec : 0;
    int64_t tail = n_vec * per_vec;
    if (n_vec > 0) {
        inputs_vec_kernel<T><<<inputs_grid(ctx, n_vec), INPUTS_BLOCK, 0, ctx->stream>>>(d_buf, n_vec, key);
        LAUNCH_TRY(ctx);
    }
    if (tail < n) {
        inputs_scalar_kernel<T><<<inputs_grid(ctx, n - tail), INPUTS_BLOCK, 0, ctx->stream>>>(d_buf, tail, n, key);
        LAUNCH_TRY(ctx);
    }
    return 0;
}

/* Every token's row of a paged k or v (tensor key `key`, rows of dim elements): the element of
 * its contiguous twin at the twin's index, stored at the token's slot in the cache (the rest of
 * the cache holds the filler, generated before). One thread per element of the real tokens,
 * n = tokens · hkv · dim; token t is sequence b's key j (ragged: cu_kv; else t = b·skv + j). */
template <attn_dtype T>
__global__ void inputs_paged_kernel(void *cache, uint64_t key, const int32_t *table, int64_t width, int64_t ps,
                                    const int32_t *cu_kv, int64_t batch, int64_t skv, int64_t hkv, int64_t dim,
                                    int64_t n)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t c = i % dim, row = i / dim, g = row % hkv, t = row / hkv;
        int64_t b, j, from;
        if (cu_kv) { /* the twin is token-major: its row is the token's */
            b = attn_seq_of(cu_kv, batch, t), j = t - cu_kv[b];
            from = i;
        } else {
            b = t / skv, j = t % skv;
            from = ((b * hkv + g) * skv + j) * dim + c;
        }
        const int64_t page = table[b * width + j / ps], at = ((page * ps + j % ps) * hkv + g) * dim + c;
        const uint32_t bits = inputs_bits<T>(key, (uint64_t)from);
        if (T == ATTN_FP32) static_cast<uint32_t *>(cache)[at] = bits;
        else static_cast<uint16_t *>(cache)[at] = (uint16_t)bits;
    }
}

template <attn_dtype T>
int inputs_paged_launch(exec_context *ctx, const attn_problem *p, const attn_tensors *seqs, void *cache, uint64_t key,
                        int64_t dim)
{
    const int64_t hkv = attn_kv_heads(p), n = attn_tokens_kv(p) * hkv * dim;
    if (n <= 0) return 0;
    inputs_paged_kernel<T><<<inputs_grid(ctx, n), INPUTS_BLOCK, 0, ctx->stream>>>(
        cache, key, seqs->block_table, p->seqs->pages_per_seq, p->page_size, p->ragged ? seqs->cu_seqlens_kv : NULL,
        p->batch, p->seq_kv, hkv, dim, n);
    LAUNCH_TRY(ctx);
    return 0;
}

/* A paged k (tensor 1) or v (tensor 2): the filler stream over the whole cache, then the rows. */
int inputs_paged(exec_context *ctx, const attn_problem *p, const attn_tensors *seqs, uint64_t seed, void *cache,
                 int tensor, int64_t dim)
{
    const uint64_t key = inputs_tensor_key(seed, tensor);
    TRY(inputs_generate_gpu(ctx, cache, p->dtype, attn_kv_slots(p) * attn_kv_heads(p) * dim, seed,
                            tensor == INPUTS_TENSOR_K ? SEEDED_STREAM_K_FILL : SEEDED_STREAM_V_FILL));
    switch (p->dtype) {
    case ATTN_BF16: return inputs_paged_launch<ATTN_BF16>(ctx, p, seqs, cache, key, dim);
    case ATTN_FP16: return inputs_paged_launch<ATTN_FP16>(ctx, p, seqs, cache, key, dim);
    case ATTN_FP32: return inputs_paged_launch<ATTN_FP32>(ctx, p, seqs, cache, key, dim);
    default: return exec_fail(ctx, __FILE__, __LINE__, "inputs_generate_problem_gpu", "unknown dtype");
    }
}

} // namespace

extern "C" int inputs_generate_problem_gpu(exec_context *ctx, const attn_problem *p, const attn_tensors *seqs,
                                           uint64_t seed, void *q, void *k, void *v)
{
    if (q) TRY(inputs_generate_gpu(ctx, q, p->dtype, attn_q_elems(p), seed, INPUTS_TENSOR_Q));
    if (p->page_size > 0) {
        if ((k || v) && (!p->seqs || !seqs || !seqs->block_table))
            return exec_fail(ctx, __FILE__, __LINE__, "inputs_generate_problem_gpu", "a paged cache without its table");
        if (k) TRY(inputs_paged(ctx, p, seqs, seed, k, INPUTS_TENSOR_K, p->head_dim));
        if (v) TRY(inputs_paged(ctx, p, seqs, seed, v, INPUTS_TENSOR_V, attn_dv(p)));
        return 0;
    }
    if (k) TRY(inputs_generate_gpu(ctx, k, p->dtype, attn_k_elems(p), seed, INPUTS_TENSOR_K));
    if (v) TRY(inputs_generate_gpu(ctx, v, p->dtype, attn_v_elems(p), seed, INPUTS_TENSOR_V));
    return 0;
}

extern "C" int inputs_generate_gpu(exec_context *ctx, void *d_buf, attn_dtype dtype, int64_t n, uint64_t seed,
                                   int tensor)
{
    uint64_t key = inputs_tensor_key(seed, tensor);
    if (n <= 0) return 0;
    switch (dtype) {
    case ATTN_BF16: return inputs_launch<ATTN_BF16>(ctx, d_buf, n, key);
    case ATTN_FP16: return inputs_launch<ATTN_FP16>(ctx, d_buf, n, key);
    case ATTN_FP32: return inputs_launch<ATTN_FP32>(ctx, d_buf, n, key);
    default: return exec_fail(ctx, __FILE__, __LINE__, "inputs_generate_gpu", "unknown dtype");
    }
}
