/* efficient.cu — the `efficient` variant: the general memory-efficient fused forward.
 * One launch, tiles over query rows and key blocks, online softmax (running max and sum in
 * fp32), no scores in global memory, no workspace. Any head_dim ≤ 256 that is a multiple
 * of 8 (compiled for buckets of 32: head_dim 72 runs the 96 kernel, extra columns read as
 * zeros), a value head dim of its own (the bucket holds both), Sq ≠ Skv, every mask, any B·H
 * (in gridDim.x), grouped K/V heads and sliding windows.
 *
 * Versions:
 *   v1  fp16/bf16: flash_kernel.cuh in its simple shape — 64-row query tiles (4 warps x 16
 *       rows), 64-key blocks (32 for D > 128), one smem stage (load, wait, compute: no
 *       copy/compute overlap), mma.sync m16n8k16 fp32. The cost structure of CUTLASS's
 *       64x64 mem-efficient kernel that PyTorch's `efficient` runs. Predicted: 55-65% of
 *       `flash` (PyTorch: efficient 3322 us vs flash 1720 us at B2 H16 S8192 D128 causal),
 *       so ~150-200 TFLOP/s on the H200.
 *       fp32: CUDA cores (FFMA). 32-row tiles, 128 threads (4 per query row), 32-key blocks
 *       (16 for D > 128) of fp32 K and V in smem (pitch D+4: float4 reads without bank
 *       conflicts), each thread 8 (4) keys of a row for S and D/4 output columns for P·V,
 *       P through smem within the warp. Predicted: 10-20 TFLOP/s (FFMA peak ≈ 67, and two
 *       LDS.128 per 4 FMAs in the QKᵀ loop bound it by shared-memory bandwidth).
 *       Measured on the H200 (bf16): 117-141 TFLOP/s: 143 us at B8 H16 S1024 D64 causal
 *       (PyTorch efficient 179), 4468 us at B2 H16 S8192 D128 causal (PyTorch 3322). fp32
 *       passes rel_l2 ≤ 1e-5 on every case; not timed yet.
 *   v2  fp16/bf16 at head_dim exactly 128 (1.13-1.43x PyTorch with v1): flash_exact.cuh in
 *       the same 64x64 tile (4 warps x 16 rows, Q in registers) with D compiled in, a 2-stage
 *       K/V ring (one barrier per block), conditional O rescale and 16-byte stores; 209
 *       registers, 80 KB, 2 CTAs/SM. v1 stays selectable (impl=legacy).
 *       Predicted ~1.5-1.8x v1 (the D64 EXACT_D step gave flash +50%; the ring overlaps the
 *       copies v1 waits for): 190-230 TFLOP/s at B2 H16 S8192 D128 causal, ratio 0.7-0.85.
 *   GQA, windows  v1, v2 and the fp32 kernel, as a second instantiation of each (GQA_WINDOW,
 *       flash_kernel.cuh): K/V heads read in place, key blocks left of every row's window never
 *       loaded, the window's edge masked. Problems with neither run the dense kernels,
 *       instruction for instruction those above. Not timed yet.
 *   serving  paged K/V caches and ragged batches natively in v1, 16-bit (flash_kernel.cuh's
 *       SERVING instantiation: each CTA in its own sequence, rows through cu_seqlens or the
 *       block table, any page size). The dense kernels' PTX is unchanged. Validated on an H100
 *       (fused_check's serving rows, tests/gpu/test_serving_generic.py); not timed yet.
 */
#include "kernels/fused.h"

#include <stdio.h>
#include <type_traits>

#include "kernels/flash_exact.cuh"
#include "kernels/flash_kernel.cuh"


/* ---------------------------------------------------------------- fp16 / bf16 */

template <int D> struct efficient_cfg {
    typedef flash_traits<D, 64, (D <= 128 ? 64 : 32), 4, 1, (D <= 128)> type;
};

/* v2, head_dim exactly 128: flash_exact.cuh in the `efficient` tile (64-row query tiles,
 * 4 warps x 16 rows, Q in registers, 64-key blocks) with the head dim compiled in and K/V in
 * a 2-stage ring, one barrier per block; 209 registers (sm_90; 188 sm_80), no spills, 80 KB
 * smem, 2 CTAs per SM. The v1 bucket kernel stays selectable (impl=legacy). */
typedef flash_exact_traits<128, 64, 4, 1, true, 2> efficient_exact_cfg_d128;

/* v2 serves head_dim 128 (with V's the same) in 16 bits unless p->impl asks for v1; v1 (or the
 * fp32 kernel) the rest, and every paged or ragged batch (v1's SERVING instantiation). */
int efficient_impl_used(const attn_problem *p)
{
    const bool exact_applies = p->head_dim == 128 && attn_dv(p) == 128 && p->dtype != ATTN_FP32 && !p->ragged &&
                               p->page_size <= 0;
    return exact_applies && p->impl != EFFICIENT_IMPL_BUCKET ? EFFICIENT_IMPL_EXACT : EFFICIENT_IMPL_BUCKET;
}

/* The compiled head dim (in 32s) that holds both of p's: Q/K's and V's. */
static int efficient_bucket(const attn_problem *p)
{
    const int64_t d = p->head_dim > attn_dv(p) ? p->head_dim : attn_dv(p);
    return (int)((d + 31) / 32);
}

template <bool BF16> static int efficient_dispatch16(exec_context *ctx, const attn_problem *p, const attn_tensors *t)
{
    typedef typename std::conditional<BF16, __nv_bfloat16, __half>::type T;
    const char *who = "efficient_forward";
    if (efficient_impl_used(p) == EFFICIENT_IMPL_EXACT)
        return flash_exact_launch<efficient_exact_cfg_d128, T, BF16>(ctx, p, t, who);
    switch (efficient_bucket(p)) {
    case 1: return flash_launch<efficient_cfg<32>::type, T, BF16>(ctx, p, t, who);
    case 2: return flash_launch<efficient_cfg<64>::type, T, BF16>(ctx, p, t, who);
    case 3: return flash_launch<efficient_cfg<96>::type, T, BF16>(ctx, p, t, who);
    case 4: return flash_launch<efficient_cfg<128>::type, T, BF16>(ctx, p, t, who);
    case 5: return flash_launch<efficient_cfg<160>::type, T, BF16>(ctx, p, t, who);
    case 6: return flash_launch<efficient_cfg<192>::type, T, BF16>(ctx, p, t, who);
    case 7: return flash_launch<efficient_cfg<224>::type, T, BF16>(ctx, p, t, who);
    case 8: return flash_launch<efficient_cfg<256>::type, T, BF16>(ctx, p, t, who);
    default: return exec_fail(ctx, __FILE__, __LINE__, who, "unsupported head_dim");
    }
}

/* ---------------------------------------------------------------- fp32 */

#define EFF32_BM EFFICIENT_FP32_QUERY_TILE
#define EFF32_THREADS 128

template <int D> struct efficient_f32_traits {
    static constexpr int BN = D <= 128 ? 32 : 16;
    static constexpr int PITCH = D + 4;             /* floats; rows stay 16-byte aligned */
    static constexpr int KEYS_PER_THREAD = BN / 4;
    static constexpr int COL4_PER_THREAD = D / 16;  /* float4 output groups per thread */
    static constexpr size_t SMEM_BYTES = (size_t)(EFF32_BM * PITCH + 2 * BN * PITCH + EFF32_BM * (BN + 1)) * 4;
};

/* rows x head_dim fp32 tile into smem (pitch PITCH), zeros past rows_total / head_dim. */
template <int D, int ROWS>
__device__ __forceinline__ void efficient_f32_load(float *s, const float *g, int row0, int rows_total, int head_dim)
{
    constexpr int PITCH = efficient_f32_traits<D>::PITCH;
    for (int i = threadIdx.x; i < ROWS * (D / 4); i += EFF32_THREADS) {
        int r = i / (D / 4), c4 = i % (D / 4);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (row0 + r < rows_total && c4 * 4 < head_dim)
            v = *reinterpret_cast<const float4 *>(g + (int64_t)(row0 + r) * head_dim + c4 * 4);
        *reinterpret_cast<float4 *>(s + r * PITCH + c4 * 4) = v;
    }
}

template <int D, bool GQA_WINDOW>
__global__ void __launch_bounds__(EFF32_THREADS) efficient_f32_kernel(const flash_params p)
{
    typedef efficient_f32_traits<D> TR;
    constexpr int BN = TR::BN, PITCH = TR::PITCH;
    extern __shared__ float4 eff_smem4[];
    float *s_q = reinterpret_cast<float *>(eff_smem4);
    float *s_k = s_q + EFF32_BM * PITCH;
    float *s_v = s_k + BN * PITCH;
    float *s_p = s_v + BN * PITCH; /* [EFF32_BM][BN+1] */

    /* a value head dim of its own only in the general instantiation (flash_bucket_general) */
    const int head_dim = p.head_dim, head_dim_v = GQA_WINDOW ? p.head_dim_v : head_dim;
    const flash_tile<float> tile = flash_tile_of<float, GQA_WINDOW>(p, EFF32_BM, head_dim, head_dim_v);
    const int m0 = tile.m0, seq_q = p.seq_q, seq_kv = p.seq_kv;
    const float *g_q = tile.q, *g_k = tile.k, *g_v = tile.v;
    float *g_o = tile.o;

    const int tid = threadIdx.x, r_loc = tid >> 2, quad = tid & 3;
    const int row = m0 + r_loc;
    const int vis = flash_visible(p.mask, seq_q, seq_kv, row);
    const flash_key_range kr = flash_key_range_of(p, row, 0); /* GQA_WINDOW: this row's keys */
    const flash_tile_keys keys = flash_tile_keys_of<GQA_WINDOW>(p, m0, EFF32_BM, BN);
    const int n_blocks = keys.n_blocks, kn0 = keys.n_min * BN;

    efficient_f32_load<D, EFF32_BM>(s_q, g_q, m0, seq_q, head_dim);

    float4 o[TR::COL4_PER_THREAD];
#pragma unroll
    for (int i = 0; i < TR::COL4_PER_THREAD; ++i) o[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    float row_max = -INFINITY, row_sum = 0.f;

    for (int j = 0; j < n_blocks; ++j) {
        const int n0 = kn0 + j * BN;
        efficient_f32_load<D, BN>(s_k, g_k, n0, seq_kv, head_dim);
        efficient_f32_load<D, BN>(s_v, g_v, n0, seq_kv, head_dim_v);
        __syncthreads();

        float s[TR::KEYS_PER_THREAD];
#pragma unroll
        for (int i = 0; i < TR::KEYS_PER_THREAD; ++i) s[i] = 0.f;
        const float *q_row = s_q + r_loc * PITCH;
#pragma unroll 4
        for (int d4 = 0; d4 < D / 4; ++d4) {
            if (d4 * 4 >= head_dim) break;
            const float4 qv = *reinterpret_cast<const float4 *>(q_row + d4 * 4);
#pragma unroll
            for (int i = 0; i < TR::KEYS_PER_THREAD; ++i) {
                const float4 kv = *reinterpret_cast<const float4 *>(s_k + (quad + 4 * i) * PITCH + d4 * 4);
                s[i] = fmaf(qv.x, kv.x, fmaf(qv.y, kv.y, fmaf(qv.z, kv.z, fmaf(qv.w, kv.w, s[i]))));
            }
        }
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < TR::KEYS_PER_THREAD; ++i) {
            const int key = n0 + quad + 4 * i;
            const bool seen = GQA_WINDOW ? kr.base + (unsigned)key < kr.range : key < vis;
            s[i] = seen ? s[i] * p.scale_log2 : -INFINITY;
            mx = fmaxf(mx, s[i]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(row_max, mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = exp2f(row_max - m_use);
        row_max = m_new;
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < TR::KEYS_PER_THREAD; ++i) {
            const float e = exp2f(s[i] - m_use);
            sum += e;
            s_p[r_loc * (BN + 1) + quad + 4 * i] = e;
        }
        row_sum = row_sum * alpha + sum;
#pragma unroll
        for (int i = 0; i < TR::COL4_PER_THREAD; ++i) {
            o[i].x *= alpha; o[i].y *= alpha; o[i].z *= alpha; o[i].w *= alpha;
        }
        __syncwarp(); /* a row's P is written and read by the 4 lanes of one warp */
#pragma unroll 4
        for (int k = 0; k < BN; ++k) {
            const float pk = s_p[r_loc * (BN + 1) + k];
            const float *v_row = s_v + k * PITCH;
#pragma unroll
            for (int i = 0; i < TR::COL4_PER_THREAD; ++i) {
                const float4 vv = *reinterpret_cast<const float4 *>(v_row + (quad + 4 * i) * 4);
                o[i].x = fmaf(pk, vv.x, o[i].x); o[i].y = fmaf(pk, vv.y, o[i].y);
                o[i].z = fmaf(pk, vv.z, o[i].z); o[i].w = fmaf(pk, vv.w, o[i].w);
            }
        }
        __syncthreads(); /* s_k, s_v, s_p are overwritten next block */
    }

    row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
    row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 2);
    const float inv = row_sum > 0.f ? 1.f / row_sum : 0.f; /* fully masked row: zeros */
    if (row < seq_q) {
#pragma unroll
        for (int i = 0; i < TR::COL4_PER_THREAD; ++i) {
            const int c = (quad + 4 * i) * 4;
            if (c < head_dim_v)
                *reinterpret_cast<float4 *>(g_o + (int64_t)row * head_dim_v + c) =
                    make_float4(o[i].x * inv, o[i].y * inv, o[i].z * inv, o[i].w * inv);
        }
    }
}

template <int D> static int efficient_launch_f32(exec_context *ctx, const attn_problem *pr, const attn_tensors *t)
{
    const size_t smem = efficient_f32_traits<D>::SMEM_BYTES;
    const int64_t bh = pr->batch * pr->heads;
    flash_params kp;
    const int rc = flash_prepare_launch(ctx, pr, t, smem, "efficient_forward", &kp);
    if (rc != 0) return rc < 0 ? rc : 0;
    auto kernel = flash_bucket_general(pr) ? efficient_f32_kernel<D, true> : efficient_f32_kernel<D, false>;
    CUDA_TRY(ctx, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)bh, (unsigned)((pr->seq_q + EFF32_BM - 1) / EFF32_BM));
    kernel<<<grid, EFF32_THREADS, smem, ctx->stream>>>(kp);
    LAUNCH_TRY(ctx);
    return 0;
}

static int efficient_dispatch32(exec_context *ctx, const attn_problem *p, const attn_tensors *t)
{
    switch (efficient_bucket(p)) {
    case 1: return efficient_launch_f32<32>(ctx, p, t);
    case 2: return efficient_launch_f32<64>(ctx, p, t);
    case 3: return efficient_launch_f32<96>(ctx, p, t);
    case 4: return efficient_launch_f32<128>(ctx, p, t);
    case 5: return efficient_launch_f32<160>(ctx, p, t);
    case 6: return efficient_launch_f32<192>(ctx, p, t);
    case 7: return efficient_launch_f32<224>(ctx, p, t);
    case 8: return efficient_launch_f32<256>(ctx, p, t);
    default: return exec_fail(ctx, __FILE__, __LINE__, "efficient_forward", "unsupported head_dim");
    }
}

/* ---------------------------------------------------------------- entry points */

size_t efficient_workspace_bytes(const attn_problem *p)
{
    (void)p;
    return 0;
}

int efficient_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace)
{
    char why[200];
    (void)workspace;
    if (variant_check_efficient(p, why, sizeof why) != 0) return exec_fail(ctx, __FILE__, __LINE__, "efficient_check", why);
    if (ctx->cc < 80) return exec_fail(ctx, __FILE__, __LINE__, "efficient_forward", "needs compute capability 8.0+");
    switch (p->dtype) {
    case ATTN_BF16: return efficient_dispatch16<true>(ctx, p, t);
    case ATTN_FP16: return efficient_dispatch16<false>(ctx, p, t);
    case ATTN_FP32: return efficient_dispatch32(ctx, p, t);
    default: return exec_fail(ctx, __FILE__, __LINE__, "efficient_forward", "unknown dtype");
    }
}
