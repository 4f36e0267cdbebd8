/* math.cu — PyTorch SDPA's math backend (_scaled_dot_product_attention_math, PyTorch 2.11, CUDA,
 * 16-bit inputs upcast), kernel for kernel. One forward of a causal bf16/fp16 problem:
 *
 *   upcast             3 × ew_map_kernel<T,f32>        q, k, v → fp32            (skipped for fp32)
 *   mask_build         ew_fill_kernel<bool>            ones(Sq, Skv)
 *                      math_tril_kernel                .tril(Skv − Sq for bottom-right, else 0)
 *                      ew_map_kernel<bool,bool,not>    .logical_not()
 *                      ew_fill_kernel<f32> (1 elem)    scalar_tensor(0.0) on the device
 *                      ew_map_kernel<bool,f32,where>   where(¬mask, −inf, 0) → fp32 bias [Sq, Skv]
 *   scale              2 × ew_map_kernel<f32,f32,mul>  q·√scale, k·√scale (−√|scale| on q if scale < 0)
 *   qk_matmul          cublasGemmStridedBatchedEx fp32, COMPUTE_32F, default math: FFMA, no TF32
 *   mask_add           math_add_bias_kernel            attn += bias (broadcast over B·H), in place
 *   softmax            softmax_*_kernel<f32,f32>       fp32 → fp32
 *   safe_softmax_fixup ew_fill_kernel<f32> (1 elem)    scalar_tensor(−inf)
 *                      ew_map_kernel<f32,bool,eq>      attn == −inf
 *                      math_row_all_kernel             .all(dim=−1) → one bool per row
 *                      ew_fill_kernel<f32> (1 elem)    scalar_tensor(0.0)
 *                      math_where_rows_kernel          where(all_masked_row, 0, softmax)
 *   pv_matmul          cublasGemmStridedBatchedEx fp32 (as qk_matmul)
 *   downcast           ew_map_kernel<f32,T>            out32 → T                 (skipped for fp32)
 * = 20 launches for causal 16-bit (PyTorch: 20), 14 without a mask (PyTorch: 14).
 *
 * Today's models, as SDPA's users call it:
 *   - grouped-query attention is enable_gqa=True: after the upcasts and q's scaling,
 *     repeat_interleave(H/Hkv, dim=-3) of k and v (an expand and a contiguous copy: one
 *     ew_repeat_heads each, fp32), and k is scaled as the repeated tensor;
 *   - a sliding window is a bool attn_mask (causal AND window, [Sq, Skv]) that the caller
 *     builds once (math_prepare, outside the timed forward) with is_causal=False; SDPA turns
 *     it into an additive mask in the input dtype on every call (logical_not, scalar_tensor,
 *     where: 3 launches instead of the causal path's 5), which attn.add_() then reads.
 *
 * Expected cost on an H200 at B8 H16 S1024 D64 bf16 causal (n = 134 M scores; fp32 scores =
 * 537 MB; 4.3 TB/s; fp32 FFMA GEMMs ≈ 50 TFLOP/s):
 *   upcast      3 × (16.8 MB read + 33.5 MB write)                       ≈ 3 × 12 = 36 us
 *   mask_build  5 launches over 1 M elements (≤ 4 MB each)                ≈ 5 × 3 = 15 us (launch bound)
 *   scale       2 × (33.5 + 33.5 MB)                                      ≈ 2 × 16 = 32 us
 *   qk_matmul   17.2 GFLOP on CUDA cores, 537 MB written                  ≈ 350 us
 *   mask_add    537 MB read + 537 MB written (bias 4 MB stays in L2)      ≈ 250 us
 *   softmax     537 + 537 MB                                              ≈ 250 us
 *   fixup       eq 537 + 134 MB ≈ 156, all 134 MB ≈ 31, where 537 + 537 MB ≈ 250, 2 fills ≈ 4
 *   pv_matmul   17.2 GFLOP, reads 537 MB                                  ≈ 350 us
 *   downcast    33.5 + 16.8 MB                                            ≈ 12 us
 * Predicted total ≈ 1.75 ms (PyTorch: 2.605 ms).
 * Measured on an H200 (2026-12-02), us: upcasts 3 × 22, mask_build 12, scale 19 + 20,
 *   qk sgemm 540, mask_add 295, softmax 268, eq 165, all 37, where 280, 3 fills 3, pv sgemm
 *   417, downcast 12; total 2184 (PyTorch 2605). The cuBLAS FFMA GEMMs are slower than
 *   predicted and are the same kernels PyTorch runs. S1024 D128: 2872 (3296); S4096 D64:
 *   16334 (20990); S8192 D128: 42296 (54908); S512 D64 no mask: 2064 (2338).
 *
 * Deviations from PyTorch, and why:
 *   - Order: PyTorch scales q before building the mask and k after it; here the mask is built
 *     first, then q and k are scaled (one NVTX "scale" range). Same kernels, same bytes.
 *   - Buffers are reused where PyTorch's caching allocator would hand out fresh ones: the two
 *     mask bool buffers ping-pong, and the final where() writes into the pre-softmax scores
 *     buffer (dead after eq). Same launches, same bytes moved, less workspace.
 *   - Bottom-right causal is not an is_causal mode of PyTorch's math backend; it is built the
 *     same way with tril(diagonal = Skv − Sq), which leaves rows with no visible key when
 *     Sq > Skv: the safe-softmax fixup turns those into zeros.
 *   - eq() compares with the −inf scalar tensor read from device memory, as PyTorch's
 *     TensorIterator does with a 0-dim CUDA tensor; where() reads the 0 scalar likewise.
 */
#include <type_traits>

#include "kernels/decomposed.h"
#include "kernels/elementwise.cuh"
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

/* attn[u] += bias[u mod plane] in units of W elements (W = 16 bytes of the bias when both
 * pointers are 16-aligned and plane % W == 0, else 1): PyTorch's attn.add_(attn_mask) with the
 * [Sq, Skv] mask (fp32, or the input dtype of a caller's mask) broadcast over B·H.
 * units = n / W, plane_units = Sq·Skv / W. */
template <typename TB, int W>
__global__ void __launch_bounds__(EW_THREADS)
    math_add_bias_kernel(float *attn, const TB *__restrict__ bias, int64_t units, int64_t plane_units)
{
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (tid >= units) return;
    math_divmod pos(tid, stride, plane_units);
    for (int64_t u = tid; u < units; u += stride * EW_UNROLL) {
        float a[EW_UNROLL][W], b[EW_UNROLL][W];
        int64_t bu[EW_UNROLL];
#pragma unroll
        for (int k = 0; k < EW_UNROLL; k++) {
            bu[k] = pos.r;
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

/* out[r, j] = flag[r] ? *zero : smx[r, j], in units of W floats (W = 4 when the pointers are
 * 16-aligned and L % 4 == 0, else 1): where(masked_rows, zero, softmax) of _safe_softmax.
 * units = n / W, row_units = L / W. Reads smx everywhere, as PyTorch's where does. */
template <int W>
__global__ void __launch_bounds__(EW_THREADS)
    math_where_rows_kernel(const ew_bool *__restrict__ flag, const float *__restrict__ zero,
                           const float *__restrict__ smx, float *__restrict__ out, int64_t units, int64_t row_units)
{
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (tid >= units) return;
    const float z = *zero;
    math_divmod pos(tid, stride, row_units);
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
struct math_op_not {   /* logical_not: 1 where 0 */
    __device__ __forceinline__ float operator()(float x) const { return x == 0.f ? 1.f : 0.f; }
};
template <typename Z> struct math_op_bias { /* where(cond, −inf, *zero): cond is ¬mask; zero of the bias dtype */
    const Z *zero;
    __device__ __forceinline__ float operator()(float c) const { return c != 0.f ? -INFINITY : ew_load1(zero, 0); }
};
struct math_op_eq {    /* eq(x, *ref) → bool */
    const float *ref;
    __device__ __forceinline__ float operator()(float x) const { return x == *ref ? 1.f : 0.f; }
};

/* ---------------------------------------------------------------- launchers -------- */

static int math_tril(exec_context *ctx, const ew_bool *in, ew_bool *out, int64_t sq, int64_t skv, int64_t diag)
{
    const unsigned grid = ew_grid(ctx, sq, EW_THREADS / 32, EW_BLOCKS_PER_SM);
    math_tril_kernel<<<grid, EW_THREADS, 0, ctx->stream>>>(in, out, sq, skv, diag);
    LAUNCH_TRY(ctx);
    return 0;
}

template <typename TB> static int math_add_bias(exec_context *ctx, float *attn, const TB *bias, int64_t n, int64_t plane)
{
    constexpr int W = 16 / (int)sizeof(typename ew_io<TB>::raw);
    if (ew_aligned16(attn) && ew_aligned16(bias) && plane % W == 0) {
        const unsigned grid = ew_grid(ctx, n / W, EW_THREADS, EW_BLOCKS_PER_SM);
        math_add_bias_kernel<TB, W><<<grid, EW_THREADS, 0, ctx->stream>>>(attn, bias, n / W, plane / W);
    } else {
        const unsigned grid = ew_grid(ctx, n, EW_THREADS, EW_BLOCKS_PER_SM);
        math_add_bias_kernel<TB, 1><<<grid, EW_THREADS, 0, ctx->stream>>>(attn, bias, n, plane);
    }
    LAUNCH_TRY(ctx);
    return 0;
}

/* The caller's bool attn_mask of a windowed problem: mask[i, j] = 1 where row i sees key j. */
__global__ void __launch_bounds__(EW_THREADS) math_window_mask_kernel(ew_bool *mask, attn_problem p)
{
    const int lane = threadIdx.x & 31;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; i < p.seq_q; i += nwarps) {
        int64_t lo, hi;
        attn_visible_range(&p, i, &lo, &hi);
        for (int64_t j = lane; j < p.seq_kv; j += 32) mask[i * p.seq_kv + j] = j >= lo && j < hi;
    }
}

static int math_row_all(exec_context *ctx, const ew_bool *eq, ew_bool *flag, int64_t rows, int64_t L)
{
    const int vec_ok = ew_aligned16(eq) && L % 16 == 0;
    const unsigned grid = ew_grid(ctx, rows, EW_THREADS / 32, EW_BLOCKS_PER_SM);
    math_row_all_kernel<<<grid, EW_THREADS, 0, ctx->stream>>>(eq, flag, rows, L, vec_ok);
    LAUNCH_TRY(ctx);
    return 0;
}

static int math_where_rows(exec_context *ctx, const ew_bool *flag, const float *zero, const float *smx, float *out,
                           int64_t n, int64_t L)
{
    if (ew_aligned16(smx) && ew_aligned16(out) && L % 4 == 0) {
        const unsigned grid = ew_grid(ctx, n / 4, EW_THREADS, EW_BLOCKS_PER_SM);
        math_where_rows_kernel<4><<<grid, EW_THREADS, 0, ctx->stream>>>(flag, zero, smx, out, n / 4, L / 4);
    } else {
        const unsigned grid = ew_grid(ctx, n, EW_THREADS, EW_BLOCKS_PER_SM);
        math_where_rows_kernel<1><<<grid, EW_THREADS, 0, ctx->stream>>>(flag, zero, smx, out, n, L);
    }
    LAUNCH_TRY(ctx);
    return 0;
}

/* ---------------------------------------------------------------- workspace -------- */

/* Where everything lives in the workspace; every buffer starts on a 256-byte boundary.
 * Pointers are NULL when base is NULL (sizing only) or the buffer is not needed. */
typedef struct math_layout {
    float *q32, *k32, *v32;     /* upcast inputs (16-bit dtypes only) */
    float *k32r, *v32r;         /* repeat_interleave of k and v over the query heads (grouped K/V only) */
    float *q32s, *k32s;         /* q·√scale, k·√scale (k repeated: [B,H,Skv,D]) */
    float *scalars;             /* [0] 0 for the bias, [1] −inf and [2] 0 for safe softmax */
    void *bias_zero;            /* the scalar 0 of a caller's mask's bias, in the input dtype (windowed only) */
    ew_bool *user_mask;         /* [Sq, Skv] the caller's bool attn_mask (windowed only; math_prepare) */
    ew_bool *mask_a, *mask_b;   /* [Sq, Skv] bools: ones/not, tril (masked problems only) */
    void *bias;                 /* [Sq, Skv] additive mask: fp32 (causal), input dtype (a caller's mask) */
    float *attn;                /* [B·H·Sq, Skv] scores; reused for the safe-softmax result */
    float *smx;                 /* [B·H·Sq, Skv] softmax output */
    ew_bool *eq;                /* [B·H·Sq, Skv] attn == −inf */
    ew_bool *rowflag;           /* [B·H·Sq] rows that are all −inf */
    float *out32;               /* [B,H,Sq,D] fp32 output before the downcast (16-bit only) */
    size_t bytes;
} math_layout;

static void math_plan(const attn_problem *p, void *base, math_layout *l)
{
    size_t off = 0;
    auto take = [&](size_t bytes) -> void * {
        void *r = base ? (void *)((char *)base + off) : NULL;
        off += ew_align256(bytes);
        return r;
    };
    const bool up = p->dtype != ATTN_FP32;
    const bool windowed = p->window_keys > 0;
    const bool masked = p->mask != ATTN_MASK_NONE || windowed;
    const bool grouped = attn_kv_heads(p) != p->heads;
    const size_t plane = (size_t)(p->seq_q * p->seq_kv);
    const size_t n = (size_t)attn_scores_elems(p);
    const size_t rows = (size_t)(p->batch * p->heads * p->seq_q);
    const size_t k_rep = (size_t)(p->batch * p->heads * p->seq_kv * p->head_dim);
    const size_t v_rep = (size_t)(p->batch * p->heads * p->seq_kv * attn_dv(p));
    *l = math_layout{};
    l->q32 = up ? (float *)take((size_t)attn_q_elems(p) * 4) : NULL;
    l->k32 = up ? (float *)take((size_t)attn_k_elems(p) * 4) : NULL;
    l->v32 = up ? (float *)take((size_t)attn_v_elems(p) * 4) : NULL;
    l->k32r = grouped ? (float *)take(k_rep * 4) : NULL;
    l->v32r = grouped ? (float *)take(v_rep * 4) : NULL;
    l->q32s = (float *)take((size_t)attn_q_elems(p) * 4);
    l->k32s = (float *)take(k_rep * 4);
    l->scalars = (float *)take(3 * sizeof(float));
    l->bias_zero = windowed ? take(sizeof(float)) : NULL;
    l->user_mask = windowed ? (ew_bool *)take(plane) : NULL;
    l->mask_a = masked ? (ew_bool *)take(plane) : NULL;
    l->mask_b = masked && !windowed ? (ew_bool *)take(plane) : NULL;
    l->bias = masked ? take(plane * (windowed ? attn_dtype_bytes(p->dtype) : 4)) : NULL;
    l->attn = (float *)take(n * 4);
    l->smx = (float *)take(n * 4);
    l->eq = (ew_bool *)take(n);
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

int math_prepare(exec_context *ctx, const attn_problem *p, void *workspace)
{
    math_layout l;

    if (p->window_keys <= 0) return 0;
    if (workspace == NULL)
        return exec_fail(ctx, __FILE__, __LINE__, "math_prepare", "no workspace (needs math_workspace_bytes)");
    math_plan(p, workspace, &l);
    const unsigned grid = ew_grid(ctx, p->seq_q, EW_THREADS / 32, EW_BLOCKS_PER_SM);
    math_window_mask_kernel<<<grid, EW_THREADS, 0, ctx->stream>>>(l.user_mask, *p);
    LAUNCH_TRY(ctx);
    return 0;
}

/* ---------------------------------------------------------------- forward ---------- */

/* The whole path. d_out_f32 != NULL: stop before the downcast and write the fp32 result there
 * (math_forward_f32); else write t->out in p->dtype. */
template <typename T>
static int math_run(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace,
                    float *d_out_f32)
{
    constexpr bool up = !std::is_same<T, float>::value;
    ew_nvtx range("attn_fwd");
    TRY(ew_check_problem(ctx, p, "math"));
    if (p->mask < ATTN_MASK_NONE || p->mask >= ATTN_MASK_COUNT)
        return exec_fail(ctx, __FILE__, __LINE__, "math_forward", "unknown mask");
    if (workspace == NULL)
        return exec_fail(ctx, __FILE__, __LINE__, "math_forward", "no workspace (needs math_workspace_bytes)");

    math_layout l;
    math_plan(p, workspace, &l);
    const int64_t sq = p->seq_q, skv = p->seq_kv;
    const int64_t rows = p->batch * p->heads * sq;
    const int64_t n = rows * skv;
    const int64_t nq = attn_q_elems(p), nk = attn_k_elems(p), nv = attn_v_elems(p);
    const int64_t nk_rep = p->batch * p->heads * skv * p->head_dim;

    if (p->window_keys > 0) {
        /* SDPA's convert_boolean_attn_mask of the caller's mask: where(¬mask, −inf, 0) in the input dtype */
        ew_nvtx r("mask_convert");
        TRY(ew_map(ctx, (const ew_bool *)l.user_mask, l.mask_a, sq * skv, math_op_not{}));
        TRY(ew_fill(ctx, (T *)l.bias_zero, 1, 0.f));
        TRY(ew_map(ctx, (const ew_bool *)l.mask_a, (T *)l.bias, sq * skv, math_op_bias<T>{(const T *)l.bias_zero}));
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
    if (p->mask != ATTN_MASK_NONE && p->window_keys <= 0) {
        /* attn_mask = ones(L, S, bool).tril(diag); bias = where(attn_mask.logical_not(), −inf, 0) */
        ew_nvtx r("mask_build");
        const int64_t diag = p->mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT ? skv - sq : 0;
        TRY(ew_fill(ctx, l.mask_a, sq * skv, 1.f));
        TRY(math_tril(ctx, l.mask_a, l.mask_b, sq, skv, diag));
        TRY(ew_map(ctx, (const ew_bool *)l.mask_b, l.mask_a, sq * skv, math_op_not{}));
        TRY(ew_fill(ctx, l.scalars + 0, 1, 0.f));
        TRY(ew_map(ctx, (const ew_bool *)l.mask_a, (float *)l.bias, sq * skv, math_op_bias<float>{l.scalars + 0}));
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
    if (p->window_keys > 0) {
        ew_nvtx r("mask_add");
        TRY(math_add_bias(ctx, l.attn, (const T *)l.bias, n, sq * skv));
    } else if (p->mask != ATTN_MASK_NONE) {
        ew_nvtx r("mask_add");
        TRY(math_add_bias(ctx, l.attn, (const float *)l.bias, n, sq * skv));
    }
    {
        ew_nvtx r("softmax");
        TRY((softmax_launch<float, float>(ctx, l.attn, l.smx, rows, skv)));
    }
    {
        /* _safe_softmax: where(all(attn == −inf, −1, keepdim), 0, softmax) */
        ew_nvtx r("safe_softmax_fixup");
        TRY(ew_fill(ctx, l.scalars + 1, 1, -INFINITY));
        TRY(ew_map(ctx, (const float *)l.attn, l.eq, n, math_op_eq{l.scalars + 1}));
        TRY(math_row_all(ctx, l.eq, l.rowflag, rows, skv));
        TRY(ew_fill(ctx, l.scalars + 2, 1, 0.f));
        TRY(math_where_rows(ctx, l.rowflag, l.scalars + 2, l.smx, l.attn, n, skv));
    }
    float *out32 = d_out_f32 ? d_out_f32 : (up ? l.out32 : (float *)t->out);
    {
        ew_nvtx r("pv_matmul");
        TRY(ew_gemm_pv(ctx, p, l.attn, v32, CUDA_R_32F, 4, out32, CUDA_R_32F, 4));
    }
    if (up && d_out_f32 == NULL) {
        ew_nvtx r("downcast");
        TRY(ew_map(ctx, (const float *)out32, (T *)t->out, attn_out_elems(p), ew_op_copy{}));
    }
    return 0;
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
