/* math.cu — PyTorch SDPA's math backend (_scaled_dot_product_attention_math, PyTorch 2.11, CUDA,
 * 16-bit inputs upcast), kernel for kernel. One forward of a causal bf16/fp16 problem:
 *
 *   upcast             3 × ew_map_kernel<T,f32>        q, k, v → fp32            (skipped for fp32)
 *   mask_build         ew_fill_kernel<bool>            ones(Sq, Skv)
 *                      math_tril_kernel                .tril(Skv − Sq for bottom-right, else 0)
 *                      2 × ew_fill_kernel<f32> (1 elem) scalar_tensor(−inf), the 0.0 on the device
 *                      ew_map_kernel<bool,f32,bias>    where(mask, 0, −inf) → fp32 bias [Sq, Skv]
 *   scale              2 × ew_map_kernel<f32,f32,mul>  q·√scale, k·√scale (−√|scale| on q if scale < 0)
 *   qk_matmul          cublasGemmStridedBatchedEx fp32, COMPUTE_32F, default math: FFMA, no TF32
 *   mask_add           math_add_bias_kernel            attn += bias (broadcast over B·H), in place
 *   softmax            softmax_*_kernel<f32,f32>       fp32 → fp32
 *   safe_softmax_fixup ew_map_kernel<f32,bool,isneginf> isneginf(attn)
 *                      math_row_all_kernel             .all(dim=−1) → one bool per row
 *                      ew_fill_kernel<f32> (1 elem)    scalar_tensor(0.0)
 *                      math_where_rows_kernel          where(all_masked_row, 0, softmax)
 *   weights_downcast   ew_map_kernel<f32,T>            attn.to(T): the weights SDPA math returns
 *   pv_matmul          cublasGemmStridedBatchedEx fp32 (as qk_matmul)
 *   downcast           ew_map_kernel<f32,T>            out32 → T                 (skipped for fp32)
 * = 20 launches for causal 16-bit (PyTorch: 20), 14 without a mask (PyTorch: 14), while every
 * tensor is below 2^31 bytes. Above, the passes over the scores split as PyTorch's
 * TensorIterator splits them (kernels/index32.h, one launch per 32-bit indexable part): at
 * B4 H16 S4096 (fp32 scores of 4 GiB) add_, isneginf, where and the weights' downcast launch
 * twice: 24 (no mask 17); at B2 H16 S8192 (8 GiB) four times each and all() twice: 33.
 *
 * Today's models, as SDPA's users call it:
 *   - grouped-query attention is enable_gqa=True: after the upcasts and q's scaling,
 *     repeat_interleave(H/Hkv, dim=-3) of k and v (an expand and a contiguous copy: one
 *     ew_repeat_heads each, fp32), and k is scaled as the repeated tensor;
 *   - a sliding window is a bool attn_mask (causal AND window, [Sq, Skv]) that the caller
 *     builds once (math_prepare, outside the timed forward) with is_causal=False; SDPA turns
 *     it into an additive mask in the input dtype on every call (two scalar fills and where:
 *     3 launches instead of the causal path's 5), which attn.add_() then reads;
 *   - a serving batch (paged, ragged) is padded to its bounds around SDPA, PyTorch's way
 *     (serving_pad.cuh, docs/serving.md): pages gathered, sequences padded, and a ragged
 *     batch's padding a bool attn_mask [B, 1, Sq, Skv] (causal and window folded in) built
 *     once as a window's is, converted per call and added with one plane per sequence.
 *
 * Expected cost on an H200 at B8 H16 S1024 D64 bf16 causal (n = 134 M scores; fp32 scores =
 * 537 MB; 4.3 TB/s; fp32 FFMA GEMMs ≈ 50 TFLOP/s):
 *   upcast      3 × (16.8 MB read + 33.5 MB write)                       ≈ 3 × 12 = 36 us
 *   mask_build  5 launches over 1 M elements (≤ 4 MB each)                ≈ 5 × 3 = 15 us (launch bound)
 *   scale       2 × (33.5 + 33.5 MB)                                      ≈ 2 × 16 = 32 us
 *   qk_matmul   17.2 GFLOP on CUDA cores, 537 MB written                  ≈ 350 us
 *   mask_add    537 MB read + 537 MB written (bias 4 MB stays in L2)      ≈ 250 us
 *   softmax     537 + 537 MB                                              ≈ 250 us
 *   fixup       isneginf 537 + 134 MB ≈ 156, all 134 MB ≈ 31, where 537 + 537 MB ≈ 250, fill ≈ 2
 *   weights     the downcast of the weights: 537 + 268 MB                 ≈ 190 us
 *   pv_matmul   17.2 GFLOP, reads 537 MB                                  ≈ 350 us
 *   downcast    33.5 + 16.8 MB                                            ≈ 12 us
 * Predicted total ≈ 1.94 ms (PyTorch: 2.605 ms).
 * Measured on an H200 (2026-12-02, before the weights' downcast and isneginf were copied from
 *   PyTorch 2.11: logical_not, a −inf fill and eq stood in their place), us: upcasts 3 × 22,
 *   mask_build 12, scale 19 + 20,
 *   qk sgemm 540, mask_add 295, softmax 268, eq 165, all 37, where 280, 3 fills 3, pv sgemm
 *   417, downcast 12; total 2184 (PyTorch 2605). The cuBLAS FFMA GEMMs are slower than
 *   predicted and are the same kernels PyTorch runs. S1024 D128: 2872 (3296); S4096 D64:
 *   16334 (20990); S8192 D128: 42296 (54908); S512 D64 no mask: 2064 (2338).
 *
 * Deviations from PyTorch, and why:
 *   - Order: PyTorch scales q before building the mask and k after it; here the mask is built
 *     first, then q and k are scaled (one NVTX "scale" range). Same kernels, same bytes.
 *   - Buffers are reused where PyTorch's caching allocator would hand out fresh ones: the
 *     final where() writes into the pre-softmax scores buffer (dead after isneginf), and the
 *     weights' downcast into the softmax buffer (dead after where). Same launches, same bytes
 *     moved, less workspace.
 *   - Bottom-right causal is not an is_causal mode of PyTorch's math backend; it is built the
 *     same way with tril(diagonal = Skv − Sq), which leaves rows with no visible key when
 *     Sq > Skv: the safe-softmax fixup turns those into zeros.
 *   - The mask's where() reads its 0 and −inf from the two 0-dim device tensors, as PyTorch's
 *     TensorIterator does; the fixup's where() reads its 0 likewise.
 *   - The 32-bit indexing split is copied for its launch count only: attnd's kernels index
 *     with 64 bits. The GQA copies (ew_repeat_heads) are not split: they pass 2^31 bytes only
 *     at K/V sizes no bench shape reaches.
 */
#include <type_traits>

#include "kernels/decomposed.h"
#include "kernels/elementwise.cuh"
#include "kernels/serving_pad.cuh"
#include "kernels/softmax.cuh"

/* ---------------------------------------------------------------- kernels ---------- */

/* out[i, j] = j − i ≤ diag ? in[i, j] : 0 over [sq, skv] bools: torch.tril. One warp per row. */
__global__ void __launch_bounds__(EW_THREADS)
    math_tril_kernel(const ew_bool *__restrict__ in, ew_bool *__restrict__ out, int64_t sq, int64_t skv,
                     int64_t diag)
{
    const int lane = threadIdx.x & 31;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; i < sq; i += nwarps) {
        const ew_bool *r_in = in + i * skv;
        ew_bool *r_out = out + i * skv;
        for (int64_t j = lane; j < skv; j += 32) r_out[j] = j - i <= diag ? r_in[j] : (ew_bool)0;
    }
}

/* Tracks u / d and u % d while u grows by a fixed stride: one 64-bit division per thread
 * instead of one per element. */
struct math_divmod {
    int64_t q, r, dq, dr, d;
    __device__ __forceinline__ math_divmod(int64_t u0, int64_t stride, int64_t d_)
        : q(u0 / d_), r(u0 % d_), dq(stride / d_), dr(stride % d_), d(d_)
    {
    }
    __device__ __forceinline__ void advance()
    {
        q += dq;
        r += dr;
        if (r >= d) {
            r -= d;
            q++;
        }
    }
};

/* attn[u] += bias[(phase + u) mod plane] in units of W elements (W = 16 bytes of the bias when
 * both pointers are 16-aligned and plane % W == 0, else 1): PyTorch's attn.add_(attn_mask) with
 * the [Sq, Skv] mask (fp32, or the input dtype of a caller's mask) broadcast over B·H.
 * units = this part's n / W, plane_units = Sq·Skv / W, phase_units: where in the plane attn[0] is.
 * BATCHED: a padded batch's [B, 1, Sq, Skv] mask, one plane per sequence broadcast over its
 * `heads` heads; phase_units is then attn[0]'s place in the whole [B, H, Sq, Skv] tensor. */
template <typename TB, int W, bool BATCHED>
__global__ void __launch_bounds__(EW_THREADS)
    math_add_bias_kernel(float *attn, const TB *__restrict__ bias, int64_t units, int64_t plane_units,
                         int64_t phase_units, int64_t heads)
{
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (tid >= units) return;
    math_divmod pos(phase_units + tid, stride, plane_units);
    for (int64_t u = tid; u < units; u += stride * EW_UNROLL) {
        float a[EW_UNROLL][W], b[EW_UNROLL][W];
        int64_t bu[EW_UNROLL];
#pragma unroll
        for (int k = 0; k < EW_UNROLL; k++) {
            bu[k] = BATCHED ? pos.q / heads * plane_units + pos.r : pos.r;
            pos.advance();
        }
#pragma unroll
        for (int k = 0; k < EW_UNROLL; k++) {
            const int64_t uk = u + k * stride;
            if (uk < units) {
                if constexpr (W > 1) {
                    ew_load<float, W>(attn + uk * W, a[k]);
                    ew_load<TB, W>(bias + bu[k] * W, b[k]);
                } else {
                    a[k][0] = attn[uk];
                    b[k][0] = ew_load1(bias, bu[k]);
                }
            }
        }
#pragma unroll
        for (int k = 0; k < EW_UNROLL; k++) {
            const int64_t uk = u + k * stride;
            if (uk < units) {
#pragma unroll
                for (int j = 0; j < W; j++) a[k][j] += b[k][j];
                if constexpr (W > 1) ew_store<float, W>(attn + uk * W, a[k]);
                else attn[uk] = a[k][0];
            }
        }
    }
}

/* flag[r] = all(eq[r, :]) over rows of L bools: torch.all(dim=-1). One warp per row; 16-byte
 * loads when vec_ok (eq 16-aligned, L % 16 == 0). Reads every byte, as PyTorch's reduction. */
__global__ void __launch_bounds__(EW_THREADS)
    math_row_all_kernel(const ew_bool *__restrict__ eq, ew_bool *__restrict__ flag, int64_t rows, int64_t L,
                        int vec_ok)
{
    const int lane = threadIdx.x & 31;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < rows; row += nwarps) {
        const ew_bool *r = eq + row * L;
        bool all = true;
        if (vec_ok) {
            /* No short-circuit: `all && load` would serialise the loads of a lane. */
            const uint4 *r4 = reinterpret_cast<const uint4 *>(r);
#pragma unroll 4
            for (int64_t c = lane; c < L / 16; c += 32) {
                const uint4 w = r4[c];
                /* __vcmpeq4(x, 0): 0xff in each byte of x that is 0 */
                all &= (__vcmpeq4(w.x, 0u) | __vcmpeq4(w.y, 0u) | __vcmpeq4(w.z, 0u) | __vcmpeq4(w.w, 0u)) == 0u;
            }
        } else {
#pragma unroll 4
            for (int64_t c = lane; c < L; c += 32) all &= r[c] != 0;
        }
        all = __all_sync(0xffffffffu, all);
        if (lane == 0) flag[row] = all ? 1 : 0;
    }
}

/* out[u] = flag[(phase + u) / L] ? *zero : smx[u], in units of W floats (W = 4 when the pointers
 * are 16-aligned and L % 4 == 0, else 1): where(masked_rows, zero, softmax) of _safe_softmax.
 * units = this part's n / W, row_units = L / W, phase_units: where in its row smx[0] is (flag
 * points at that row's flag). Reads smx everywhere, as PyTorch's where does. */
template <int W>
__global__ void __launch_bounds__(EW_THREADS)
    math_where_rows_kernel(const ew_bool *__restrict__ flag, const float *__restrict__ zero,
                           const float *__restrict__ smx, float *__restrict__ out, int64_t units, int64_t row_units,
                           int64_t phase_units)
{
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (tid >= units) return;
    const float z = *zero;
    math_divmod pos(phase_units + tid, stride, row_units);
    for (int64_t u = tid; u < units; u += stride * EW_UNROLL) {
        float x[EW_UNROLL][W];
        bool f[EW_UNROLL];
#pragma unroll
        for (int k = 0; k < EW_UNROLL; k++) {
            const int64_t uk = u + k * stride;
            f[k] = false;
            if (uk < units) {
                f[k] = flag[pos.q] != 0;
                if constexpr (W > 1) ew_load<float, W>(smx + uk * W, x[k]);
                else x[k][0] = smx[uk];
            }
            pos.advance();
        }
#pragma unroll
        for (int k = 0; k < EW_UNROLL; k++) {
            const int64_t uk = u + k * stride;
            if (uk < units) {
#pragma unroll
                for (int j = 0; j < W; j++) x[k][j] = f[k] ? z : x[k][j];
                if constexpr (W > 1) ew_store<float, W>(out + uk * W, x[k]);
                else out[uk] = x[k][0];
            }
        }
    }
}

/* Functors of the flat passes. */
template <typename Z> struct math_op_bias { /* where(mask, *zero, *neg_inf): the two scalar tensors, of the bias dtype */
    const Z *neg_inf, *zero;
    __device__ __forceinline__ float operator()(float m) const { return ew_load1(m != 0.f ? zero : neg_inf, 0); }
};
struct math_op_isneginf { /* isneginf(x) → bool */
    __device__ __forceinline__ float operator()(float x) const { return x == -INFINITY ? 1.f : 0.f; }
};

/* ---------------------------------------------------------------- launchers -------- */

static int math_tril(exec_context *ctx, const ew_bool *in, ew_bool *out, int64_t sq, int64_t skv, int64_t diag)
{
    const unsigned grid = ew_grid(ctx, sq, EW_THREADS / 32, EW_BLOCKS_PER_SM);
    math_tril_kernel<<<grid, EW_THREADS, 0, ctx->stream>>>(in, out, sq, skv, diag);
    LAUNCH_TRY(ctx);
    return 0;
}

/* attn [n / plane, plane] += bias [plane]: once, or once per part of PyTorch's 32-bit indexing
 * split of add_'s iteration (fp32 scores, the bias broadcast over B·H): two parts at B4 H16
 * S4096, four at B2 H16 S8192. batched_heads > 0: the bias is a padded batch's [B, 1, plane],
 * broadcast over that many heads (n = B·heads·plane). */
template <typename TB>
static int math_add_bias(exec_context *ctx, float *attn, const TB *bias, int64_t n, int64_t plane, int64_t batched_heads)
{
    constexpr int W = 16 / (int)sizeof(typename ew_io<TB>::raw);
    const int bias_bytes = (int)sizeof(typename ew_io<TB>::raw);
    const bool batched = batched_heads > 0;
    const index32_iter it = batched ? index32_batched_mask_op(plane, batched_heads, n / plane / batched_heads, 4, bias_bytes)
                                    : index32_blocks_op(plane, n / plane, 4, bias_bytes, 0);
    return ew_for_parts(ctx, it, [&](int64_t begin, int64_t count) {
        float *a = attn + begin;
        const int64_t phase = batched ? begin : begin % plane;
        if (ew_aligned16(a) && ew_aligned16(bias) && plane % W == 0 && phase % W == 0 && count % W == 0) {
            const unsigned grid = ew_grid(ctx, count / W, EW_THREADS, EW_BLOCKS_PER_SM);
            if (batched)
                math_add_bias_kernel<TB, W, true>
                    <<<grid, EW_THREADS, 0, ctx->stream>>>(a, bias, count / W, plane / W, phase / W, batched_heads);
            else
                math_add_bias_kernel<TB, W, false>
                    <<<grid, EW_THREADS, 0, ctx->stream>>>(a, bias, count / W, plane / W, phase / W, 1);
        } else {
            const unsigned grid = ew_grid(ctx, count, EW_THREADS, EW_BLOCKS_PER_SM);
            if (batched)
                math_add_bias_kernel<TB, 1, true>
                    <<<grid, EW_THREADS, 0, ctx->stream>>>(a, bias, count, plane, phase, batched_heads);
            else
                math_add_bias_kernel<TB, 1, false><<<grid, EW_THREADS, 0, ctx->stream>>>(a, bias, count, plane, phase, 1);
        }
        LAUNCH_TRY(ctx);
        return 0;
    });
}

/* The caller's bool attn_mask of a windowed problem or a padded batch: mask[b, i, j] = 1 where
 * row i of sequence b sees key j, over `planes` planes [Sq, Skv] (one, or one per sequence:
 * HF's [B, 1, Sq, Skv] padding AND causal AND window, cu_q/cu_kv the lengths). */
__global__ void __launch_bounds__(EW_THREADS)
    math_user_mask_kernel(ew_bool *mask, attn_problem p, int64_t planes, const int32_t *cu_q, const int32_t *cu_kv)
{
    const int lane = threadIdx.x & 31;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < planes * p.seq_q; r += nwarps) {
        int64_t lo, hi;
        serving_visible(p, cu_q, cu_kv, r / p.seq_q, r % p.seq_q, &lo, &hi);
        for (int64_t j = lane; j < p.seq_kv; j += 32) mask[r * p.seq_kv + j] = j >= lo && j < hi;
    }
}

/* all(dim=−1) over rows × L bools: once, or once per part of the reduction's 32-bit indexing
 * split (gpu_reduce_kernel; whole rows: two parts at B2 H16 S8192). */
static int math_row_all(exec_context *ctx, const ew_bool *eq, ew_bool *flag, int64_t rows, int64_t L)
{
    const index32_iter it = index32_row_reduce(L, rows, 1, 1);
    return ew_for_parts(ctx, it, [&](int64_t begin, int64_t count) {
        if (begin % L != 0 || count % L != 0)
            return exec_fail(ctx, __FILE__, __LINE__, "math_row_all", "a 32-bit indexing part splits a row");
        const ew_bool *e = eq + begin;
        const int vec_ok = ew_aligned16(e) && L % 16 == 0;
        const unsigned grid = ew_grid(ctx, count / L, EW_THREADS / 32, EW_BLOCKS_PER_SM);
        math_row_all_kernel<<<grid, EW_THREADS, 0, ctx->stream>>>(e, flag + begin / L, count / L, L, vec_ok);
        LAUNCH_TRY(ctx);
        return 0;
    });
}

/* where(masked_rows, zero, softmax) over rows × L floats: once, or once per part of where's
 * 32-bit indexing split (fp32 rows, one flag per row): as math_add_bias. */
static int math_where_rows(exec_context *ctx, const ew_bool *flag, const float *zero, const float *smx, float *out,
                           int64_t n, int64_t L)
{
    const index32_iter it = index32_blocks_op(L, n / L, 4, 1, 1);
    return ew_for_parts(ctx, it, [&](int64_t begin, int64_t count) {
        const float *x = smx + begin;
        float *o = out + begin;
        const ew_bool *f = flag + begin / L;
        const int64_t phase = begin % L;
        if (ew_aligned16(x) && ew_aligned16(o) && L % 4 == 0 && phase % 4 == 0 && count % 4 == 0) {
            const unsigned grid = ew_grid(ctx, count / 4, EW_THREADS, EW_BLOCKS_PER_SM);
            math_where_rows_kernel<4><<<grid, EW_THREADS, 0, ctx->stream>>>(f, zero, x, o, count / 4, L / 4, phase / 4);
        } else {
            const unsigned grid = ew_grid(ctx, count, EW_THREADS, EW_BLOCKS_PER_SM);
            math_where_rows_kernel<1><<<grid, EW_THREADS, 0, ctx->stream>>>(f, zero, x, o, count, L, phase);
        }
        LAUNCH_TRY(ctx);
        return 0;
    });
}

/* ---------------------------------------------------------------- workspace -------- */

/* Where everything lives in the workspace; every buffer starts on a 256-byte boundary.
 * Pointers are NULL when base is NULL (sizing only) or the buffer is not needed. */
typedef struct math_layout {
    float *q32, *k32, *v32;     /* upcast inputs (16-bit dtypes only) */
    float *k32r, *v32r;         /* repeat_interleave of k and v over the query heads (grouped K/V only) */
    float *q32s, *k32s;         /* q·√scale, k·√scale (k repeated: [B,H,Skv,D]) */
    float *scalars;             /* [0] −inf and [1] 0 for the causal bias, [2] 0 for safe softmax */
    void *bias_scalars;         /* −inf and 0 of a caller's mask's bias, in the input dtype (user mask only) */
    ew_bool *user_mask;         /* [planes, Sq, Skv] the caller's bool attn_mask (windowed or ragged; math_prepare) */
    int32_t *cu_q, *cu_kv;      /* [B + 1] each: the ragged batch's lengths that mask is built from (math_prepare) */
    ew_bool *mask_a, *mask_b;   /* [Sq, Skv] bools: ones, tril (causal problems only) */
    void *bias;                 /* [planes, Sq, Skv] additive mask: fp32 (causal), input dtype (a caller's mask) */
    float *attn;                /* [B·H·Sq, Skv] scores; reused for the safe-softmax result */
    float *smx;                 /* [B·H·Sq, Skv] softmax output; reused for the weights in the input dtype */
    ew_bool *neginf;            /* [B·H·Sq, Skv] isneginf(attn) */
    ew_bool *rowflag;           /* [B·H·Sq] rows that are all −inf */
    float *out32;               /* [B,H,Sq,D] fp32 output before the downcast (16-bit only) */
    serving_pad pad;            /* a serving batch's padded tensors, first (serving_pad.cuh); padded out in fp32 room */
    bool user_masked;           /* SDPA gets a bool attn_mask: a window, or a ragged batch's padding */
    int64_t planes;             /* planes of that mask: B for a ragged batch (padding per sequence), else 1 */
    size_t bytes;
} math_layout;

/* The layout of the serving problem sp (dense ones too): its padded tensors, then the dense
 * problem's buffers. */
static void math_plan(const attn_problem *sp, void *base, math_layout *l)
{
    *l = math_layout{};
    serving_pad_plan(sp, base, sizeof(float), &l->pad);
    const attn_problem *p = &l->pad.dense;
    size_t off = l->pad.bytes;
    auto take = [&](size_t bytes) -> void * {
        void *r = base ? (void *)((char *)base + off) : NULL;
        off += ew_align256(bytes);
        return r;
    };
    const bool up = p->dtype != ATTN_FP32;
    const bool ragged = sp->ragged != 0;
    const bool windowed = p->window_keys > 0 || ragged; /* a caller's mask */
    const bool masked = p->mask != ATTN_MASK_NONE || windowed;
    const bool grouped = attn_kv_heads(p) != p->heads;
    const size_t planes = ragged ? (size_t)p->batch : 1;
    const size_t plane = (size_t)(p->seq_q * p->seq_kv);
    const size_t n = (size_t)attn_scores_elems(p);
    const size_t rows = (size_t)(p->batch * p->heads * p->seq_q);
    const size_t k_rep = (size_t)(p->batch * p->heads * p->seq_kv * p->head_dim);
    const size_t v_rep = (size_t)(p->batch * p->heads * p->seq_kv * attn_dv(p));
    l->user_masked = windowed;
    l->planes = (int64_t)planes;
    l->q32 = up ? (float *)take((size_t)attn_q_elems(p) * 4) : NULL;
    l->k32 = up ? (float *)take((size_t)attn_k_elems(p) * 4) : NULL;
    l->v32 = up ? (float *)take((size_t)attn_v_elems(p) * 4) : NULL;
    l->k32r = grouped ? (float *)take(k_rep * 4) : NULL;
    l->v32r = grouped ? (float *)take(v_rep * 4) : NULL;
    l->q32s = (float *)take((size_t)attn_q_elems(p) * 4);
    l->k32s = (float *)take(k_rep * 4);
    l->scalars = (float *)take(3 * sizeof(float));
    l->bias_scalars = windowed ? take(2 * sizeof(float)) : NULL;
    l->user_mask = windowed ? (ew_bool *)take(planes * plane) : NULL;
    l->cu_q = ragged ? (int32_t *)take((size_t)(p->batch + 1) * sizeof(int32_t)) : NULL;
    l->cu_kv = ragged ? (int32_t *)take((size_t)(p->batch + 1) * sizeof(int32_t)) : NULL;
    l->mask_a = masked && !windowed ? (ew_bool *)take(plane) : NULL;
    l->mask_b = masked && !windowed ? (ew_bool *)take(plane) : NULL;
    l->bias = masked ? take(planes * plane * (windowed ? attn_dtype_bytes(p->dtype) : 4)) : NULL;
    l->attn = (float *)take(n * 4);
    l->smx = (float *)take(n * 4);
    l->neginf = (ew_bool *)take(n);
    l->rowflag = (ew_bool *)take(rows);
    l->out32 = up ? (float *)take((size_t)attn_out_elems(p) * 4) : NULL;
    l->bytes = off;
}

size_t math_workspace_bytes(const attn_problem *p)
{
    math_layout l;
    math_plan(p, NULL, &l);
    return l.bytes;
}

/* The caller's bool mask, built once: a window's, or a ragged batch's padding mask (HF builds
 * it once per batch from the lengths, which this copies next to it from the host layout). */
int math_prepare(exec_context *ctx, const attn_problem *sp, void *workspace)
{
    math_layout l;

    if (sp->window_keys <= 0 && !sp->ragged) return 0;
    if (workspace == NULL)
        return exec_fail(ctx, __FILE__, __LINE__, "math_prepare", "no workspace (needs math_workspace_bytes)");
    if (sp->ragged && !sp->seqs)
        return exec_fail(ctx, __FILE__, __LINE__, "math_prepare", "a ragged batch without its layout (seqs)");
    math_plan(sp, workspace, &l);
    if (sp->ragged) {
        const size_t bytes = (size_t)(sp->batch + 1) * sizeof(int32_t);
        CUDA_TRY(ctx, cudaMemcpyAsync(l.cu_q, sp->seqs->cu_seqlens_q, bytes, cudaMemcpyHostToDevice, ctx->stream));
        CUDA_TRY(ctx, cudaMemcpyAsync(l.cu_kv, sp->seqs->cu_seqlens_kv, bytes, cudaMemcpyHostToDevice, ctx->stream));
    }
    const attn_problem *p = &l.pad.dense;
    const unsigned grid = ew_grid(ctx, l.planes * p->seq_q, EW_THREADS / 32, EW_BLOCKS_PER_SM);
    math_user_mask_kernel<<<grid, EW_THREADS, 0, ctx->stream>>>(l.user_mask, *p, l.planes, l.cu_q, l.cu_kv);
    LAUNCH_TRY(ctx);
    CUDA_TRY(ctx, cudaStreamSynchronize(ctx->stream)); /* the host arrays may go before the copy ran */
    return 0;
}

/* ---------------------------------------------------------------- forward ---------- */

/* The whole path. d_out_f32 != NULL: stop before the downcast and write the fp32 result there
 * (math_forward_f32); else write st->out in the problem's dtype. A serving batch (paged,
 * ragged) takes PyTorch's padded route (serving_pad.cuh) around SDPA: pages gathered and
 * sequences padded into dense q, k, v; a ragged batch's padding a bool attn_mask [B, 1, Sq,
 * Skv] (causal mask and window folded in, math_prepare), converted per call as a window's is;
 * the output's real rows picked out at the end. */
template <typename T>
static int math_run(exec_context *ctx, const attn_problem *serving, const attn_tensors *st, void *workspace,
                    float *d_out_f32)
{
    constexpr bool up = !std::is_same<T, float>::value;
    ew_nvtx range("attn_fwd");
    if (serving->mask < ATTN_MASK_NONE || serving->mask >= ATTN_MASK_COUNT)
        return exec_fail(ctx, __FILE__, __LINE__, "math_forward", "unknown mask");
    if (workspace == NULL)
        return exec_fail(ctx, __FILE__, __LINE__, "math_forward", "no workspace (needs math_workspace_bytes)");
    if ((serving->ragged || serving->page_size > 0) && !serving->seqs)
        return exec_fail(ctx, __FILE__, __LINE__, "math_forward", "a serving batch without its layout (seqs)");

    math_layout l;
    attn_tensors padded;
    math_plan(serving, workspace, &l);
    const attn_problem *p = &l.pad.dense;
    const attn_tensors *t = &padded;
    TRY(ew_check_problem(ctx, p, "math"));
    TRY(serving_pad_inputs<T>(ctx, serving, st, &l.pad, &padded));
    const int64_t batched_heads = serving->ragged ? p->heads : 0; /* the mask's planes: one per sequence */
    const int64_t sq = p->seq_q, skv = p->seq_kv;
    const int64_t rows = p->batch * p->heads * sq;
    const int64_t n = rows * skv;
    const int64_t nq = attn_q_elems(p), nk = attn_k_elems(p), nv = attn_v_elems(p);
    const int64_t nk_rep = p->batch * p->heads * skv * p->head_dim;

    if (l.user_masked) {
        /* SDPA's convert_boolean_attn_mask of the caller's mask, in the input dtype:
         * where(mask, 0.0, scalar_tensor(−inf)); both scalars become device tensors (two fills) */
        ew_nvtx r("mask_convert");
        const T *neg_inf = (const T *)l.bias_scalars, *zero = neg_inf + 1;
        TRY(ew_fill(ctx, (T *)neg_inf, 1, -INFINITY));
        TRY(ew_fill(ctx, (T *)zero, 1, 0.f));
        TRY(ew_map(ctx, (const ew_bool *)l.user_mask, (T *)l.bias, l.planes * sq * skv,
                   math_op_bias<T>{neg_inf, zero}));
    }
    const float *q32 = (const float *)t->q, *k32 = (const float *)t->k, *v32 = (const float *)t->v;
    if (up) {
        ew_nvtx r("upcast");
        TRY(ew_map(ctx, (const T *)t->q, l.q32, nq, ew_op_copy{}));
        TRY(ew_map(ctx, (const T *)t->k, l.k32, nk, ew_op_copy{}));
        TRY(ew_map(ctx, (const T *)t->v, l.v32, nv, ew_op_copy{}));
        q32 = l.q32;
        k32 = l.k32;
        v32 = l.v32;
    }
    if (p->mask != ATTN_MASK_NONE && !l.user_masked) {
        /* attn_mask = ones(L, S, bool).tril(diag); bias = where(attn_mask, 0.0, scalar_tensor(−inf)) */
        ew_nvtx r("mask_build");
        const int64_t diag = p->mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT ? skv - sq : 0;
        TRY(ew_fill(ctx, l.mask_a, sq * skv, 1.f));
        TRY(math_tril(ctx, l.mask_a, l.mask_b, sq, skv, diag));
        TRY(ew_fill(ctx, l.scalars + 0, 1, -INFINITY));
        TRY(ew_fill(ctx, l.scalars + 1, 1, 0.f));
        TRY(ew_map(ctx, (const ew_bool *)l.mask_b, (float *)l.bias, sq * skv,
                   math_op_bias<float>{l.scalars + 0, l.scalars + 1}));
    }
    /* scaling_factor = sqrt(|scale|) in double, applied to q (negated when scale < 0) and k */
    const double root = sqrt(fabs(p->scale));
    const float q_factor = (float)(p->scale < 0 ? 0.0 - root : root), k_factor = (float)root;
    {
        ew_nvtx r("scale");
        TRY(ew_map(ctx, q32, l.q32s, nq, ew_op_mul{q_factor}));
    }
    if (attn_kv_heads(p) != p->heads) {
        /* enable_gqa: repeat_interleave(H/Hkv, dim=-3) of the fp32 k and v */
        ew_nvtx r("repeat_interleave");
        const int64_t outer = p->batch * attn_kv_heads(p), group = p->heads / attn_kv_heads(p);
        TRY(ew_repeat_heads(ctx, k32, l.k32r, outer, group, skv * p->head_dim));
        TRY(ew_repeat_heads(ctx, v32, l.v32r, outer, group, skv * attn_dv(p)));
        k32 = l.k32r;
        v32 = l.v32r;
    }
    {
        ew_nvtx r("scale");
        TRY(ew_map(ctx, k32, l.k32s, nk_rep, ew_op_mul{k_factor}));
    }
    {
        ew_nvtx r("qk_matmul");
        TRY(ew_gemm_qk(ctx, p, l.q32s, l.k32s, CUDA_R_32F, 4, l.attn, CUDA_R_32F, 4));
    }
    if (l.user_masked) {
        ew_nvtx r("mask_add");
        TRY(math_add_bias(ctx, l.attn, (const T *)l.bias, n, sq * skv, batched_heads));
    } else if (p->mask != ATTN_MASK_NONE) {
        ew_nvtx r("mask_add");
        TRY(math_add_bias(ctx, l.attn, (const float *)l.bias, n, sq * skv, 0));
    }
    {
        ew_nvtx r("softmax");
        TRY((softmax_launch<float, float>(ctx, l.attn, l.smx, rows, skv)));
    }
    {
        /* _safe_softmax: where(all(isneginf(attn), −1, keepdim), scalar_tensor(0), softmax) */
        ew_nvtx r("safe_softmax_fixup");
        TRY(ew_map(ctx, (const float *)l.attn, l.neginf, n, math_op_isneginf{}));
        TRY(math_row_all(ctx, l.neginf, l.rowflag, rows, skv));
        TRY(ew_fill(ctx, l.scalars + 2, 1, 0.f));
        TRY(math_where_rows(ctx, l.rowflag, l.scalars + 2, l.smx, l.attn, n, skv));
    }
    if (up && d_out_f32 == NULL) {
        /* The math backend returns (out, attn weights) as make_tuple(matmul(attn, v).to(dtype),
         * attn.to(dtype)); GCC evaluates the arguments right to left, so the weights' downcast
         * runs first. Nobody reads them; the launch is PyTorch's. */
        ew_nvtx r("weights_downcast");
        TRY(ew_map(ctx, (const float *)l.attn, (T *)l.smx, n, ew_op_copy{}));
    }
    /* fp32 for verify goes through the padded output's room when ragged, then is unpadded */
    float *out32 = d_out_f32 ? (serving->ragged ? (float *)l.pad.out : d_out_f32) : (up ? l.out32 : (float *)t->out);
    {
        ew_nvtx r("pv_matmul");
        TRY(ew_gemm_pv(ctx, p, l.attn, v32, CUDA_R_32F, 4, out32, CUDA_R_32F, 4));
    }
    if (up && d_out_f32 == NULL) {
        ew_nvtx r("downcast");
        TRY(ew_map(ctx, (const float *)out32, (T *)t->out, attn_out_elems(p), ew_op_copy{}));
    }
    if (d_out_f32) return serving_unpad_output(ctx, serving, out32, d_out_f32, st->cu_seqlens_q, sizeof(float));
    return serving_unpad_output(ctx, serving, t->out, st->out, st->cu_seqlens_q, sizeof(T));
}

static int math_dispatch(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace,
                         float *d_out_f32)
{
    switch (p->dtype) {
    case ATTN_BF16: return math_run<__nv_bfloat16>(ctx, p, t, workspace, d_out_f32);
    case ATTN_FP16: return math_run<__half>(ctx, p, t, workspace, d_out_f32);
    case ATTN_FP32: return math_run<float>(ctx, p, t, workspace, d_out_f32);
    default: return exec_fail(ctx, __FILE__, __LINE__, "math_forward", "unknown dtype");
    }
}

int math_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace)
{
    return math_dispatch(ctx, p, t, workspace, NULL);
}

int math_forward_f32(exec_context *ctx, const attn_problem *p, const attn_tensors *t, float *d_out_f32,
                     void *workspace)
{
    if (d_out_f32 == NULL) return exec_fail(ctx, __FILE__, __LINE__, "math_forward_f32", "d_out_f32 is NULL");
    return math_dispatch(ctx, p, t, workspace, d_out_f32);
}
