/* softmax.cuh — row softmax over the last dimension, fp32 inside, Tin in and Tout out: the
 * kernel PyTorch's softmax(x, -1) launches (naive.cu: T → T; math.cu: fp32 → fp32).
 * Included by naive.cu and math.cu only.
 *
 *   y[r, j] = exp(x[r, j] − max_r) / Σ_j exp(x[r, j] − max_r)
 *
 * A row that is all −inf gives NaN, as PyTorch's softmax does (max = −inf, x − max = NaN):
 * callers that want SDPA's safe softmax fix those rows afterwards (math.cu does, with the
 * same eq/all/where kernels PyTorch uses). NaN inputs propagate.
 *
 * Versions, by row length L (W = elements per vector access: 16 bytes of Tin when both
 * pointers are 16-aligned and L % W == 0, else 1):
 *   softmax_warp_kernel     L ≤ 1024: TPR = min(32, pow2 ≥ L/W) lanes per row (several rows
 *                           per warp for short rows), row held in registers (≤ 32 floats per
 *                           lane), shuffle reductions. Reads each byte once, writes once.
 *   softmax_block_kernel    1024 < L ≤ 16384 (8192 when W = 1): one block (≤ 512 threads) per
 *                           row, row in registers (≤ 32 floats per thread), shared-memory
 *                           reductions.
 *   softmax_online_kernel   longer rows: one 512-thread block per row, an online max/sum pass
 *                           then a write pass: reads the row twice (the second read mostly
 *                           hits L2: 132 SMs × ≤ 4 rows × 64 KB ≪ 50 MB).
 * Division: one IEEE reciprocal of the sum per row, then a multiply (≤ 1.5 ulp vs PyTorch's
 * divide; the instruction budget of a bf16 row at 4.3 TB/s is ~30 per element).
 */
#ifndef SOFTMAX_CUH
#define SOFTMAX_CUH

#include <type_traits>

#include "kernels/elementwise.cuh"

#define SOFTMAX_WARP_THREADS 128   /* block size of the warp kernel */
#define SOFTMAX_BLOCK_MAX 512      /* largest block of the register block kernel */
#define SOFTMAX_ONLINE_THREADS 512
#define SOFTMAX_MAX_PER_THREAD 32  /* floats a thread keeps in registers */

/* Block-wide reduction; every thread gets the result. `sh` holds ≥ 32 floats and is free
 * again when this returns. All threads of the block must call it. */
template <bool IS_MAX> __device__ __forceinline__ float softmax_block_reduce(float v, float *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    v = IS_MAX ? ew_warp_max(v) : ew_warp_sum(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? sh[lane] : (IS_MAX ? -INFINITY : 0.f);
    r = IS_MAX ? ew_warp_max(r) : ew_warp_sum(r);
    __syncthreads();
    return r;
}

/* f(it, col, in) for each of this thread's ITERS vectors of W elements of a row: vector it
 * starts at column (it·step + idx)·W, and `in` says whether it holds row elements (live and
 * col < L). Register paths only: L ≤ 16384 and step·ITERS·W < 2·L, so int columns cannot
 * overflow. */
template <int W, int ITERS, class F>
__device__ __forceinline__ void softmax_for_vectors(int L, int idx, int step, bool live, F f)
{
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
        const int col = (it * step + idx) * W;
        f(it, col, live && col < L);
    }
}

/* Loads the row's vectors into x; columns ≥ L (and every column when !live) read as −inf. */
template <typename Tin, int W, int ITERS>
__device__ __forceinline__ void softmax_load_row(const Tin *r_in, int L, int idx, int step, bool live,
                                                 float (&x)[ITERS * W])
{
    softmax_for_vectors<W, ITERS>(L, idx, step, live, [&](int it, int col, bool in) {
        float f[W];
        if constexpr (W > 1) {
            if (in) ew_load<Tin, W>(r_in + col, f);
        } else {
            if (in) f[0] = ew_load1(r_in, col);
        }
#pragma unroll
        for (int j = 0; j < W; j++) x[it * W + j] = in ? f[j] : -INFINITY;
    });
}

/* Stores x's vectors into the row, only the columns below L (none when !live). */
template <typename Tout, int W, int ITERS>
__device__ __forceinline__ void softmax_store_row(Tout *r_out, int L, int idx, int step, bool live,
                                                  const float (&x)[ITERS * W])
{
    softmax_for_vectors<W, ITERS>(L, idx, step, live, [&](int it, int col, bool in) {
        if (!in) return;
        if constexpr (W > 1) {
            float f[W];
#pragma unroll
            for (int j = 0; j < W; j++) f[j] = x[it * W + j];
            ew_store<Tout, W>(r_out + col, f);
        } else {
            ew_store1(r_out, col, x[it * W]);
        }
    });
}

/* exp(x − m) in place, returns the sum. Padding (−inf) adds 0 unless m is −inf, in which case
 * the row is all −inf and NaN is the answer anyway. */
template <int N> __device__ __forceinline__ float softmax_exp_sum(float (&x)[N], float m)
{
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < N; j++) {
        x[j] = expf(x[j] - m);
        s += x[j];
    }
    return s;
}

/* L ≤ 1024: TPR lanes per row, SOFTMAX_WARP_THREADS / TPR rows per block per step. Every lane
 * of a warp runs the same number of steps (row groups are warp-uniform), so the shuffles
 * always see all 32 lanes. */
template <typename Tin, typename Tout, int W, int ITERS, int TPR>
__global__ void __launch_bounds__(SOFTMAX_WARP_THREADS)
    softmax_warp_kernel(const Tin *__restrict__ in, Tout *__restrict__ out, int64_t rows, int64_t L)
{
    constexpr int ROWS_PER_BLOCK = SOFTMAX_WARP_THREADS / TPR;
    const int sub = threadIdx.x % TPR;
    for (int64_t base = (int64_t)blockIdx.x * ROWS_PER_BLOCK; base < rows; base += (int64_t)gridDim.x * ROWS_PER_BLOCK) {
        const int64_t row = base + threadIdx.x / TPR;
        const bool live = row < rows;
        const int64_t off = live ? row * L : 0;
        float x[ITERS * W];
        softmax_load_row<Tin, W, ITERS>(in + off, (int)L, sub, TPR, live, x);
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < ITERS * W; j++) m = fmaxf(m, x[j]);
        m = ew_warp_max(m, TPR);
        float s = softmax_exp_sum(x, m);
        s = ew_warp_sum(s, TPR);
        const float inv = __frcp_rn(s);
#pragma unroll
        for (int j = 0; j < ITERS * W; j++) x[j] *= inv;
        softmax_store_row<Tout, W, ITERS>(out + off, (int)L, sub, TPR, live, x);
    }
}

/* 1024 < L ≤ 16384: one block per row, blockDim.x · ITERS · W ≥ L. */
template <typename Tin, typename Tout, int W, int ITERS>
__global__ void __launch_bounds__(SOFTMAX_BLOCK_MAX)
    softmax_block_kernel(const Tin *__restrict__ in, Tout *__restrict__ out, int64_t rows, int64_t L)
{
    __shared__ float sh[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        float x[ITERS * W];
        softmax_load_row<Tin, W, ITERS>(in + row * L, (int)L, threadIdx.x, blockDim.x, true, x);
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < ITERS * W; j++) m = fmaxf(m, x[j]);
        m = softmax_block_reduce<true>(m, sh);
        float s = softmax_exp_sum(x, m);
        s = softmax_block_reduce<false>(s, sh);
        const float inv = __frcp_rn(s);
#pragma unroll
        for (int j = 0; j < ITERS * W; j++) x[j] *= inv;
        softmax_store_row<Tout, W, ITERS>(out + row * L, (int)L, threadIdx.x, blockDim.x, true, x);
    }
}

/* Online (max, sum) of one more value, starting from (−inf, 0). x > m: m − x is −inf or
 * finite (never NaN), so the rescale is exact and keeps a NaN sum NaN. x ≤ m = −inf: x is
 * −inf and adds nothing (no −inf − −inf). NaN x: s becomes NaN, as PyTorch's row would. */
__device__ __forceinline__ void softmax_online_add(float &m, float &s, float x)
{
    if (x > m) {
        s = s * expf(m - x) + 1.f;
        m = x;
    } else if (m != -INFINITY || x != x) {
        s += expf(x - m);
    }
}

/* Merge two partial (max, sum) pairs. Both maxima −inf: the sums are 0 (or NaN) and add. */
__device__ __forceinline__ void softmax_online_merge(float &m, float &s, float m2, float s2)
{
    const float mm = fmaxf(m, m2);
    if (mm == -INFINITY) s = s + s2;
    else s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
}

/* L > 16384: one block per row, pass 1 online max/sum, pass 2 write. */
template <typename Tin, typename Tout, int W>
__global__ void __launch_bounds__(SOFTMAX_ONLINE_THREADS)
    softmax_online_kernel(const Tin *__restrict__ in, Tout *__restrict__ out, int64_t rows, int64_t L)
{
    __shared__ float sh_m[32], sh_s[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    const int64_t nvec = L / W;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const Tin *r_in = in + row * L;
        Tout *r_out = out + row * L;
        float m = -INFINITY, s = 0.f;
        for (int64_t c = threadIdx.x; c < nvec; c += blockDim.x) {
            float f[W];
            if constexpr (W > 1) ew_load<Tin, W>(r_in + c * W, f);
            else f[0] = ew_load1(r_in, c);
#pragma unroll
            for (int j = 0; j < W; j++) softmax_online_add(m, s, f[j]);
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
            softmax_online_merge(m, s, m2, s2);
        }
        if (lane == 0) {
            sh_m[warp] = m;
            sh_s[warp] = s;
        }
        __syncthreads();
        m = lane < nwarps ? sh_m[lane] : -INFINITY;
        s = lane < nwarps ? sh_s[lane] : 0.f;
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
            softmax_online_merge(m, s, m2, s2);
        }
        __syncthreads(); /* sh_m/sh_s free for the next row */
        /* All −inf row: m = −inf, s = 0 → exp(NaN)·inf = NaN, as PyTorch. */
        const float inv = __frcp_rn(s);
        for (int64_t c = threadIdx.x; c < nvec; c += blockDim.x) {
            float f[W];
            if constexpr (W > 1) ew_load<Tin, W>(r_in + c * W, f);
            else f[0] = ew_load1(r_in, c);
#pragma unroll
            for (int j = 0; j < W; j++) f[j] = expf(f[j] - m) * inv;
            if constexpr (W > 1) ew_store<Tout, W>(r_out + c * W, f);
            else ew_store1(r_out, c, f[0]);
        }
    }
}

/* ---------------------------------------------------------------- dispatch --------- */

static inline int softmax_pow2_at_least(int64_t n)
{
    int p = 1;
    while (p < n) p <<= 1;
    return p;
}

template <typename Tin, typename Tout, int W, int ITERS>
static int softmax_launch_warp(exec_context *ctx, const Tin *in, Tout *out, int64_t rows, int64_t L, int tpr)
{
    const int64_t rows_per_block = SOFTMAX_WARP_THREADS / tpr;
    const unsigned grid = ew_grid(ctx, rows, rows_per_block, 2048 / SOFTMAX_WARP_THREADS);
#define SOFTMAX_WARP_CASE(T)                                                                                   \
    case T:                                                                                                    \
        softmax_warp_kernel<Tin, Tout, W, ITERS, T><<<grid, SOFTMAX_WARP_THREADS, 0, ctx->stream>>>(in, out,   \
                                                                                                     rows, L); \
        break;
    if constexpr (ITERS > 1) { /* rows longer than a warp's vector: always a full warp */
        if (tpr != 32) return exec_fail(ctx, __FILE__, __LINE__, "softmax_launch_warp", "bad lanes per row");
        softmax_warp_kernel<Tin, Tout, W, ITERS, 32><<<grid, SOFTMAX_WARP_THREADS, 0, ctx->stream>>>(in, out, rows, L);
    } else {
        switch (tpr) {
            SOFTMAX_WARP_CASE(1)
            SOFTMAX_WARP_CASE(2)
            SOFTMAX_WARP_CASE(4)
            SOFTMAX_WARP_CASE(8)
            SOFTMAX_WARP_CASE(16)
            SOFTMAX_WARP_CASE(32)
        default:
            return exec_fail(ctx, __FILE__, __LINE__, "softmax_launch_warp", "bad lanes per row");
        }
    }
#undef SOFTMAX_WARP_CASE
    LAUNCH_TRY(ctx);
    return 0;
}

template <typename Tin, typename Tout, int W, int ITERS>
static int softmax_launch_block(exec_context *ctx, const Tin *in, Tout *out, int64_t rows, int64_t L, int threads)
{
    const unsigned grid = ew_grid(ctx, rows, 1, 2048 / threads);
    softmax_block_kernel<Tin, Tout, W, ITERS><<<grid, threads, 0, ctx->stream>>>(in, out, rows, L);
    LAUNCH_TRY(ctx);
    return 0;
}

/* launch(std::integral_constant<int, iters>) for iters a power of two up to MAX (each a
 * separate kernel instantiation); SOFTMAX_NO_ITERS when iters is not one of them. */
#define SOFTMAX_NO_ITERS (-2)
template <int MAX, class Launch> static int softmax_with_iters(int iters, Launch launch)
{
    switch (iters) {
    case 1: return launch(std::integral_constant<int, 1>{});
    case 2: return launch(std::integral_constant<int, 2>{});
    case 4: return launch(std::integral_constant<int, 4>{});
    case 8: if constexpr (8 <= MAX) return launch(std::integral_constant<int, 8>{}); break;
    case 16: if constexpr (16 <= MAX) return launch(std::integral_constant<int, 16>{}); break;
    case 32: if constexpr (32 <= MAX) return launch(std::integral_constant<int, 32>{}); break;
    default: break;
    }
    return SOFTMAX_NO_ITERS;
}

/* Pick the version for rows of length L with W-element accesses. */
template <typename Tin, typename Tout, int W>
static int softmax_launch_w(exec_context *ctx, const Tin *in, Tout *out, int64_t rows, int64_t L)
{
    constexpr int MAX_ITERS = SOFTMAX_MAX_PER_THREAD / W;
    const int64_t nvec = (L + W - 1) / W;
    if (nvec <= 32 * MAX_ITERS) { /* warp version */
        const int tpr = nvec <= 32 ? softmax_pow2_at_least(nvec) : 32;
        const int iters = nvec <= 32 ? 1 : softmax_pow2_at_least((nvec + 31) / 32);
        const int rc = softmax_with_iters<MAX_ITERS>(iters, [&](auto it) {
            return softmax_launch_warp<Tin, Tout, W, decltype(it)::value>(ctx, in, out, rows, L, tpr);
        });
        if (rc != SOFTMAX_NO_ITERS) return rc;
        return exec_fail(ctx, __FILE__, __LINE__, "softmax_launch", "no warp softmax for this row length");
    }
    /* Scalar accesses (W = 1) cost a 64-bit address each: 32 of them spill at 128 registers. */
    constexpr int MAX_BLOCK_ITERS = W == 1 ? MAX_ITERS / 2 : MAX_ITERS;
    if (nvec <= (int64_t)SOFTMAX_BLOCK_MAX * MAX_BLOCK_ITERS) { /* block version, row in registers */
        /* Prefer ≤ 256 threads with 16–32 floats each over 512 threads with 8: more bytes in
         * flight per thread between the block's barriers, and two rows per SM slot. */
        int iters = 1;
        while ((nvec + iters - 1) / iters > SOFTMAX_BLOCK_MAX / 2 && iters < MAX_BLOCK_ITERS) iters <<= 1;
        while ((nvec + iters - 1) / iters > SOFTMAX_BLOCK_MAX) iters <<= 1;
        int threads = (int)((nvec + iters - 1) / iters);
        threads = (threads + 31) & ~31;
        const int rc = softmax_with_iters<MAX_BLOCK_ITERS>(iters, [&](auto it) {
            return softmax_launch_block<Tin, Tout, W, decltype(it)::value>(ctx, in, out, rows, L, threads);
        });
        if (rc != SOFTMAX_NO_ITERS) return rc;
        return exec_fail(ctx, __FILE__, __LINE__, "softmax_launch", "no block softmax for this row length");
    }
    {
        const unsigned grid = ew_grid(ctx, rows, 1, 2048 / SOFTMAX_ONLINE_THREADS);
        softmax_online_kernel<Tin, Tout, W><<<grid, SOFTMAX_ONLINE_THREADS, 0, ctx->stream>>>(in, out, rows, L);
        LAUNCH_TRY(ctx);
        return 0;
    }
}

/* out[r, :] = softmax(in[r, :]) for `rows` contiguous rows of L elements, on ctx->stream.
 * in and out may not overlap. */
template <typename Tin, typename Tout>
static int softmax_launch(exec_context *ctx, const Tin *in, Tout *out, int64_t rows, int64_t L)
{
    constexpr int W = ew_width<Tin, Tout>();
    if (rows <= 0 || L <= 0) return 0;
    if (ew_aligned16(in) && ew_aligned16(out) && L % W == 0) return softmax_launch_w<Tin, Tout, W>(ctx, in, out, rows, L);
    return softmax_launch_w<Tin, Tout, 1>(ctx, in, out, rows, L);
}

#endif
