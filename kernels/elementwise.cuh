/* elementwise.cuh — device and host helpers shared by naive.cu and math.cu (included by those
 * two files only; everything here is static or a template, so each includer gets its own copy).
 *
 *   ew_io<T>          storage type T (bf16, fp16, fp32, uint8 "bool") ⇄ float in registers
 *   ew_load/ew_store  N elements of T as 16-byte vector accesses (address must be 16-aligned)
 *   ew_map_kernel     out[i] = op(in[i]) in one vectorized grid-stride pass: PyTorch's
 *                     TensorIterator unary/scalar kernels (mul by a scalar, casts, eq, not, where)
 *   ew_fill_kernel    out[i] = value: PyTorch's fill_ (ones, zeros, scalar_tensor)
 *   ew_repeat_heads   K/V heads copied for every query head of their group: transformers'
 *                     repeat_kv and SDPA's repeat_interleave(dim=-3), one copy kernel each
 *   ew_warp_*         warp reductions;  ew_grid: grid size from ctx->sm_count
 *   ew_gemm_batched   row-major batched GEMM through cublasGemmStridedBatchedEx, split into
 *                     batch chunks cuBLAS accepts, int-range checked
 *   ew_for_parts      one launch per part of PyTorch's 32-bit indexing split (kernels/index32.h):
 *                     ew_map and ew_fill use it, so a pass over more than 2^31 bytes launches as
 *                     often as PyTorch's TensorIterator kernel does
 *   ew_nvtx           RAII NVTX range, so an early `return -1` from a check macro still pops
 *
 * Why 16-byte accesses and unroll 2: these kernels stream tensors of up to GBs; an H200 needs
 * ~20 KB in flight per SM to reach its 4.3 TB/s, i.e. 2048 threads × 2 × 16 B.
 * Vector paths need 16-aligned base pointers (cudaMalloc and 256-aligned workspace give that);
 * any other pointer takes the scalar path of the same kernel, so correctness never depends on it.
 */
#ifndef ELEMENTWISE_CUH
#define ELEMENTWISE_CUH

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include "common/attn.h"
#include "kernels/exec_context.h"
#include "kernels/index32.h"

#define EW_THREADS 256       /* threads per block of the flat and row kernels */
#define EW_BLOCKS_PER_SM 8   /* 8 × 256 = 2048 threads: a full H100/H200 SM */
#define EW_UNROLL 2          /* independent 16-byte vectors in flight per thread */
#define EW_CUBLAS_MAX_BATCH 65535

typedef uint8_t ew_bool; /* torch.bool storage: one byte holding 0 or 1 */

/* ---------------------------------------------------------------- storage types ---- */

template <typename T> struct ew_io;

template <> struct ew_io<__nv_bfloat16> {
    typedef uint16_t raw;
    static __device__ __forceinline__ float to_f32(raw r) { return __uint_as_float((uint32_t)r << 16); }
    static __device__ __forceinline__ raw from_f32(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
};

template <> struct ew_io<__half> {
    typedef uint16_t raw;
    static __device__ __forceinline__ float to_f32(raw r) { return __half2float(__ushort_as_half(r)); }
    static __device__ __forceinline__ raw from_f32(float f) { return __half_as_ushort(__float2half_rn(f)); }
};

template <> struct ew_io<float> {
    typedef float raw;
    static __device__ __forceinline__ float to_f32(raw r) { return r; }
    static __device__ __forceinline__ raw from_f32(float f) { return f; }
};

/* bool: read as 0.f / 1.f, written as 1 for any non-zero float (NaN included, as torch does). */
template <> struct ew_io<ew_bool> {
    typedef ew_bool raw;
    static __device__ __forceinline__ float to_f32(raw r) { return (float)r; }
    static __device__ __forceinline__ raw from_f32(float f) { return f != 0.f ? (raw)1 : (raw)0; }
};

/* Elements per thread-vector of a map from Tin to Tout: the narrower side moves 16 bytes. */
template <typename Tin, typename Tout> __host__ __device__ constexpr int ew_width()
{
    return 16 / (int)(sizeof(typename ew_io<Tin>::raw) < sizeof(typename ew_io<Tout>::raw)
                          ? sizeof(typename ew_io<Tin>::raw)
                          : sizeof(typename ew_io<Tout>::raw));
}

/* N elements of T in registers, viewed as 16-byte words for the memory access. */
template <typename T, int N> union ew_pack {
    typedef typename ew_io<T>::raw raw;
    static constexpr int WORDS = (int)(N * sizeof(raw)) / 16;
    static_assert(N * sizeof(raw) % 16 == 0, "ew_pack must be a whole number of 16-byte words");
    uint4 u[WORDS];
    raw r[N];
};

/* Load N elements at p (16-byte aligned) as floats. */
template <typename T, int N> __device__ __forceinline__ void ew_load(const T *p, float (&f)[N])
{
    ew_pack<T, N> x;
    const uint4 *src = reinterpret_cast<const uint4 *>(p);
#pragma unroll
    for (int w = 0; w < ew_pack<T, N>::WORDS; w++) x.u[w] = src[w];
#pragma unroll
    for (int j = 0; j < N; j++) f[j] = ew_io<T>::to_f32(x.r[j]);
}

/* Store N floats rounded to T at p (16-byte aligned). */
template <typename T, int N> __device__ __forceinline__ void ew_store(T *p, const float (&f)[N])
{
    ew_pack<T, N> x;
#pragma unroll
    for (int j = 0; j < N; j++) x.r[j] = ew_io<T>::from_f32(f[j]);
    uint4 *dst = reinterpret_cast<uint4 *>(p);
#pragma unroll
    for (int w = 0; w < ew_pack<T, N>::WORDS; w++) dst[w] = x.u[w];
}

template <typename T> __device__ __forceinline__ float ew_load1(const T *p, int64_t i)
{
    return ew_io<T>::to_f32(reinterpret_cast<const typename ew_io<T>::raw *>(p)[i]);
}

template <typename T> __device__ __forceinline__ void ew_store1(T *p, int64_t i, float f)
{
    reinterpret_cast<typename ew_io<T>::raw *>(p)[i] = ew_io<T>::from_f32(f);
}

/* ---------------------------------------------------------------- reductions ------- */

/* Reduce over groups of `width` consecutive lanes (a power of two ≤ 32); every lane of the
 * group gets the result. All 32 lanes of the warp must call it. */
__device__ __forceinline__ float ew_warp_max(float v, int width = 32)
{
    for (int o = width >> 1; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o, width));
    return v;
}

__device__ __forceinline__ float ew_warp_sum(float v, int width = 32)
{
    for (int o = width >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, width);
    return v;
}

/* ---------------------------------------------------------------- host helpers ----- */

static inline bool ew_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

static inline size_t ew_align256(size_t n) { return (n + 255u) & ~(size_t)255u; }

/* Blocks for `items` units of work at `per_block` units per block, capped at what fills the
 * GPU (grid-stride loops do the rest). Never 0, never above the 1-D grid limit. */
static inline unsigned ew_grid(const exec_context *ctx, int64_t items, int64_t per_block, int blocks_per_sm)
{
    int64_t b = (items + per_block - 1) / per_block;
    int64_t cap = (int64_t)(ctx->sm_count > 0 ? ctx->sm_count : 1) * blocks_per_sm;
    if (b > cap) b = cap;
    if (b < 1) b = 1;
    return (unsigned)b;
}

/* An NVTX range for the enclosing scope. */
struct ew_nvtx {
    explicit ew_nvtx(const char *name) { nvtxRangePushA(name); }
    ~ew_nvtx() { nvtxRangePop(); }
    ew_nvtx(const ew_nvtx &) = delete;
    ew_nvtx &operator=(const ew_nvtx &) = delete;
};

/* Shape checks every decomposed variant makes before it enqueues anything. */
static inline int ew_check_problem(exec_context *ctx, const attn_problem *p, const char *who)
{
    char why[200];
    if (p->batch < 1 || p->heads < 1 || p->seq_q < 1 || p->seq_kv < 1 || p->head_dim < 1) {
        snprintf(why, sizeof why, "%s needs batch, heads, seq_q, seq_kv, head_dim >= 1", who);
        return exec_fail(ctx, __FILE__, __LINE__, "ew_check_problem", why);
    }
    if (p->seq_q * p->seq_kv > (int64_t)INT_MAX || p->head_dim > (int64_t)INT_MAX) {
        snprintf(why, sizeof why,
                 "%s: one score matrix seq_q*seq_kv = %lld elements (head_dim %lld) exceeds cuBLAS's int range",
                 who, (long long)(p->seq_q * p->seq_kv), (long long)p->head_dim);
        return exec_fail(ctx, __FILE__, __LINE__, "ew_check_problem", why);
    }
    return 0;
}

/* Row-major batched GEMM expressed in cuBLAS's column-major terms by the caller:
 * C[b] (m×n, ldc) = op(A[b]) · op(B[b]) for b < batch, alpha 1, beta 0, fp32 accumulation
 * (CUBLAS_COMPUTE_32F: tensor cores for 16-bit types, plain FFMA for fp32 in the default math
 * mode, never TF32). Strides are in elements; sizes of one element in bytes. */
static inline int ew_gemm_batched(exec_context *ctx, cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                                  int64_t n, int64_t k, const void *A, cudaDataType_t a_type, int64_t lda,
                                  int64_t stride_a, const void *B, cudaDataType_t b_type, int64_t ldb,
                                  int64_t stride_b, void *C, cudaDataType_t c_type, int64_t ldc, int64_t stride_c,
                                  int64_t batch, size_t elem_bytes_ab, size_t elem_bytes_c)
{
    const float alpha = 1.f, beta = 0.f;
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
        return exec_fail(ctx, __FILE__, __LINE__, "ew_gemm_batched", "GEMM dimension exceeds cuBLAS's int range");
    for (int64_t b0 = 0; b0 < batch; b0 += EW_CUBLAS_MAX_BATCH) {
        int64_t nb = batch - b0 < EW_CUBLAS_MAX_BATCH ? batch - b0 : EW_CUBLAS_MAX_BATCH;
        const char *a = (const char *)A + (size_t)b0 * (size_t)stride_a * elem_bytes_ab;
        const char *b = (const char *)B + (size_t)b0 * (size_t)stride_b * elem_bytes_ab;
        char *c = (char *)C + (size_t)b0 * (size_t)stride_c * elem_bytes_c;
        CUBLAS_TRY(ctx, cublasGemmStridedBatchedEx(ctx->cublas, ta, tb, (int)m, (int)n, (int)k, &alpha, a, a_type,
                                                   (int)lda, (long long)stride_a, b, b_type, (int)ldb,
                                                   (long long)stride_b, &beta, c, c_type, (int)ldc,
                                                   (long long)stride_c, (int)nb, CUBLAS_COMPUTE_32F,
                                                   CUBLAS_GEMM_DEFAULT));
    }
    return 0;
}

/* scores[bh] (Sq×Skv, row-major) = q[bh] · k[bh]ᵀ. Column-major view: scoresᵀ (Skv×Sq) =
 * K (op T of the D×Skv view of k) · Qᵀ (the D×Sq view of q, op N). */
static inline int ew_gemm_qk(exec_context *ctx, const attn_problem *p, const void *q, const void *k,
                             cudaDataType_t in_type, size_t in_bytes, void *scores, cudaDataType_t s_type,
                             size_t s_bytes)
{
    const int64_t sq = p->seq_q, skv = p->seq_kv, d = p->head_dim;
    return ew_gemm_batched(ctx, CUBLAS_OP_T, CUBLAS_OP_N, skv, sq, d, k, in_type, d, skv * d, q, in_type, d,
                           sq * d, scores, s_type, skv, sq * skv, p->batch * p->heads, in_bytes, s_bytes);
}

/* out[bh] (Sq×Dv, row-major) = probs[bh] (Sq×Skv) · v[bh] (Skv×Dv). Column-major view:
 * outᵀ (Dv×Sq) = Vᵀ (the Dv×Skv view of v, op N) · Pᵀ (the Skv×Sq view of probs, op N). */
static inline int ew_gemm_pv(exec_context *ctx, const attn_problem *p, const void *probs, const void *v,
                             cudaDataType_t in_type, size_t in_bytes, void *out, cudaDataType_t out_type,
                             size_t out_bytes)
{
    const int64_t sq = p->seq_q, skv = p->seq_kv, d = attn_dv(p);
    return ew_gemm_batched(ctx, CUBLAS_OP_N, CUBLAS_OP_N, d, sq, skv, v, in_type, d, skv * d, probs, in_type, skv,
                           sq * skv, out, out_type, d, sq * d, p->batch * p->heads, in_bytes, out_bytes);
}

template <typename T> struct ew_cuda_type;
template <> struct ew_cuda_type<__nv_bfloat16> { static constexpr cudaDataType_t value = CUDA_R_16BF; };
template <> struct ew_cuda_type<__half> { static constexpr cudaDataType_t value = CUDA_R_16F; };
template <> struct ew_cuda_type<float> { static constexpr cudaDataType_t value = CUDA_R_32F; };

/* ---------------------------------------------------------------- flat kernels ----- */

/* out[i] = Op(in[i]) for i < n. vec_ok: both pointers are 16-byte aligned, so the body moves
 * W-element vectors and only the n % W tail goes element by element. Op: a copyable functor
 * with `__device__ float operator()(float) const`. */
template <typename Tin, typename Tout, typename Op>
__global__ void __launch_bounds__(EW_THREADS)
    ew_map_kernel(const Tin *__restrict__ in, Tout *__restrict__ out, int64_t n, int vec_ok, Op op)
{
    constexpr int W = ew_width<Tin, Tout>();
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t done = 0;
    if (vec_ok) {
        const int64_t nv = n / W;
        /* Inputs stay packed in registers until used: half the registers for 16-bit types. */
        for (int64_t i = tid; i < nv; i += stride * EW_UNROLL) {
            ew_pack<Tin, W> a[EW_UNROLL];
#pragma unroll
            for (int u = 0; u < EW_UNROLL; u++) {
                if (i + u * stride < nv) {
                    const uint4 *src = reinterpret_cast<const uint4 *>(in + (i + u * stride) * W);
#pragma unroll
                    for (int w = 0; w < ew_pack<Tin, W>::WORDS; w++) a[u].u[w] = src[w];
                }
            }
#pragma unroll
            for (int u = 0; u < EW_UNROLL; u++) {
                if (i + u * stride < nv) {
                    ew_pack<Tout, W> b;
#pragma unroll
                    for (int j = 0; j < W; j++) b.r[j] = ew_io<Tout>::from_f32(op(ew_io<Tin>::to_f32(a[u].r[j])));
                    uint4 *dst = reinterpret_cast<uint4 *>(out + (i + u * stride) * W);
#pragma unroll
                    for (int w = 0; w < ew_pack<Tout, W>::WORDS; w++) dst[w] = b.u[w];
                }
            }
        }
        done = nv * W;
    }
    for (int64_t i = done + tid; i < n; i += stride) ew_store1(out, i, op(ew_load1(in, i)));
}

/* out[i] = value for i < n (value rounded to T). */
template <typename T> __global__ void __launch_bounds__(EW_THREADS) ew_fill_kernel(T *out, int64_t n, float value, int vec_ok)
{
    constexpr int W = 16 / (int)sizeof(typename ew_io<T>::raw);
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t done = 0;
    if (vec_ok) {
        float f[W];
#pragma unroll
        for (int j = 0; j < W; j++) f[j] = value;
        const int64_t nv = n / W;
        for (int64_t i = tid; i < nv; i += stride) ew_store<T, W>(out + i * W, f);
        done = nv * W;
    }
    for (int64_t i = done + tid; i < n; i += stride) ew_store1(out, i, value);
}

/* out[b, hkv·G + g, :] = in[b, hkv, :] for every g < G, over rows of `inner` elements (S·D):
 * the contiguous copy of k[:, :, None].expand(B, Hkv, G, S, D).reshape(B, Hkv·G, S, D), which
 * is both transformers' repeat_kv and SDPA's repeat_interleave(G, dim=-3). One thread per
 * 16-byte vector when vec_ok (in, out 16-aligned and inner % W == 0). */
template <typename T>
__global__ void __launch_bounds__(EW_THREADS)
    ew_repeat_heads_kernel(const T *__restrict__ in, T *__restrict__ out, int64_t outer, int64_t group,
                           int64_t inner, int vec_ok)
{
    typedef typename ew_io<T>::raw raw;
    constexpr int W = 16 / (int)sizeof(raw);
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t unit = vec_ok ? W : 1, units = inner / unit, n = outer * group * units;
    for (int64_t i = tid; i < n; i += stride) {
        const int64_t x = i % units, og = i / units, o = og / group; /* out row og reads in row o */
        if (vec_ok)
            reinterpret_cast<uint4 *>(out)[og * units + x] = reinterpret_cast<const uint4 *>(in)[o * units + x];
        else
            reinterpret_cast<raw *>(out)[og * inner + x] = reinterpret_cast<const raw *>(in)[o * inner + x];
    }
}

/* Launch ew_repeat_heads_kernel: in [outer, inner] → out [outer·group, inner]. */
template <typename T>
static int ew_repeat_heads(exec_context *ctx, const T *in, T *out, int64_t outer, int64_t group, int64_t inner)
{
    constexpr int W = 16 / (int)sizeof(typename ew_io<T>::raw);
    const int vec_ok = ew_aligned16(in) && ew_aligned16(out) && inner % W == 0;
    const int64_t n = outer * group * (vec_ok ? inner / W : inner);
    if (n <= 0) return 0;
    const unsigned grid = ew_grid(ctx, n, EW_THREADS, EW_BLOCKS_PER_SM);
    ew_repeat_heads_kernel<T><<<grid, EW_THREADS, 0, ctx->stream>>>(in, out, outer, group, inner, vec_ok);
    LAUNCH_TRY(ctx);
    return 0;
}

/* Call launch(begin, count) once per part of `it` that PyTorch's with_32bit_indexing would
 * launch separately, in its order; begin and count are in elements of the iteration's dense
 * order (kernels/index32.h). One call with (0, all) when the iteration fits 32-bit indexing:
 * the common case, and every problem below 2^31 bytes per tensor. */
template <typename Launch> static int ew_for_parts(exec_context *ctx, const index32_iter &it, Launch launch)
{
    index32_walk walk; /* ~16 KB of host stack */
    index32_part part;
    int rc;
    index32_start(&walk, &it);
    while ((rc = index32_next(&walk, &part)) == 1) {
        int64_t begin, count;
        if (index32_flat(&it, &part, &begin, &count) != 0)
            return exec_fail(ctx, __FILE__, __LINE__, "ew_for_parts", "a 32-bit indexing part is not one run");
        TRY(launch(begin, count));
    }
    if (rc < 0) return exec_fail(ctx, __FILE__, __LINE__, "ew_for_parts", "cannot split into 32-bit indexable parts");
    return 0;
}

/* Launch ew_map_kernel on ctx->stream: once, or once per 32-bit indexing part as PyTorch's
 * gpu_kernel does for the same op (casts, mul by a scalar, isneginf, where over a mask). */
template <typename Tin, typename Tout, typename Op>
static int ew_map(exec_context *ctx, const Tin *in, Tout *out, int64_t n, Op op)
{
    constexpr int W = ew_width<Tin, Tout>();
    if (n <= 0) return 0;
    const index32_iter it = index32_flat_op(n, (int)sizeof(typename ew_io<Tout>::raw), (int)sizeof(typename ew_io<Tin>::raw));
    return ew_for_parts(ctx, it, [&](int64_t begin, int64_t count) {
        const Tin *i = in + begin;
        Tout *o = out + begin;
        const int vec_ok = ew_aligned16(i) && ew_aligned16(o);
        const unsigned grid = ew_grid(ctx, vec_ok ? (count + W - 1) / W : count, EW_THREADS, EW_BLOCKS_PER_SM);
        ew_map_kernel<Tin, Tout, Op><<<grid, EW_THREADS, 0, ctx->stream>>>(i, o, count, vec_ok, op);
        LAUNCH_TRY(ctx);
        return 0;
    });
}

/* Launch ew_fill_kernel on ctx->stream (once per 32-bit indexing part, as fill_). */
template <typename T> static int ew_fill(exec_context *ctx, T *out, int64_t n, float value)
{
    constexpr int W = 16 / (int)sizeof(typename ew_io<T>::raw);
    constexpr int B = (int)sizeof(typename ew_io<T>::raw);
    if (n <= 0) return 0;
    const index32_iter it = index32_flat_op(n, B, B);
    return ew_for_parts(ctx, it, [&](int64_t begin, int64_t count) {
        T *o = out + begin;
        const int vec_ok = ew_aligned16(o);
        const unsigned grid = ew_grid(ctx, vec_ok ? (count + W - 1) / W : count, EW_THREADS, EW_BLOCKS_PER_SM);
        ew_fill_kernel<T><<<grid, EW_THREADS, 0, ctx->stream>>>(o, count, value, vec_ok);
        LAUNCH_TRY(ctx);
        return 0;
    });
}

/* The functors of the flat passes. */
struct ew_op_mul {      /* x * s: PyTorch's mul by a Python scalar, in float (opmath) */
    float s;
    __device__ __forceinline__ float operator()(float x) const { return x * s; }
};
struct ew_op_copy {     /* dtype cast: the conversion is in the load and the store */
    __device__ __forceinline__ float operator()(float x) const { return x; }
};

#endif
