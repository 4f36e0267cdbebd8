/* naive.cu — the study's naive attention as PyTorch eager runs it, kernel for kernel:
 *
 *     scores = q @ k.transpose(-2, -1)              # cuBLAS GEMM, output in the input dtype
 *     scores = scores * scale                       # mul kernel, out of place
 *     scores = scores.masked_fill(mask, -inf)       # DtoD Memcpy (out of place) + fill kernel
 *     p = softmax(scores, -1)                       # softmax kernel, fp32 inside
 *     out = p @ v                                   # cuBLAS GEMM
 *
 * naive_inplace uses masked_fill_ (in place): the same launches without the Memcpy. Without a
 * mask or window neither copies nor fills. A serving batch (paged, ragged) runs the same on the
 * batch padded to its bounds, PyTorch's way (serving_pad.cuh: pages gathered by one index kernel
 * per tensor, sequences padded by a fill and an index_put_, the padding folded into the one
 * masked_fill, the output's real rows picked by one index kernel; docs/serving.md has the code
 * and the counts). Grouped-query attention is transformers' eager path:
 * key_states = repeat_kv(k), value_states = repeat_kv(v) first (an expand and a reshape: one copy
 * kernel each, ew_repeat_heads), then the above over every query head. A sliding window is
 * part of the same mask. All tensors in the input dtype (bf16, fp16 or fp32; fp32
 * GEMMs without TF32, as PyTorch's default allow_tf32=False). Fully masked rows (bottom-right
 * mask, Sq > Skv) give NaN, as PyTorch's softmax does: naive is not safe.
 *
 * Launches of one causal forward, and what each should cost on an H200 at the study shape
 * B8 H16 S1024 D64 bf16 (n = B·H·Sq·Skv = 134 M scores = 268 MB; 4.3 TB/s):
 *   qk_matmul  cublasGemmStridedBatchedEx (nvjet, tensor cores)  writes 268 MB      ≥  62 us, ~75
 *   scale      ew_map_kernel<T,T,mul>   reads 268 MB, writes 268 MB                 ≈ 125 us, ~135
 *   mask_copy  cudaMemcpyAsync DtoD     (naive only) 268 + 268 MB                   ≈ 125 us, ~130
 *   mask_fill  naive_mask_fill_kernel   writes the masked half only: 134 MB         ≈  31 us, ~35
 *   softmax    softmax_warp_kernel      reads 268 MB, writes 268 MB                 ≈ 125 us, ~140
 *   pv_matmul  cublasGemmStridedBatchedEx                       reads 268 MB        ≥  62 us, ~75
 * Predicted total ≈ 590 us naive, ≈ 460 us naive_inplace (PyTorch: 1062 / 935 us).
 *
 * Deviations from PyTorch, and why:
 *   - masked_fill reads a bool mask tensor and rewrites every element (read + write of the
 *     scores); mask_fill here computes the mask from indices (attn_visible_range) and only
 *     writes −inf where a row is masked (the causal tail, the window's head): one kernel, as
 *     PyTorch, about ¼ of its bytes for a causal mask: the one place naive is cheaper than
 *     eager, by design.
 *   - Workspace: two score buffers for both variants, not three. A dead buffer is reused
 *     (scale reads A and writes B; the Memcpy copies B back into A, whose scores are no longer
 *     needed; softmax writes into whichever buffer is free). Same launches, same bytes moved.
 *   (cuBLAS itself still launches a 0.7 us Memset before the first GEMM, as under PyTorch, so
 *   a profile shows 7 / 6 ops for causal naive / naive_inplace, the same as peers-h200.md.)
 *   - Above 2^31 bytes of scores the scale and mask_fill launch once per part of PyTorch's
 *     32-bit indexing split (kernels/index32.h): twice each at B2 H16 S8192 (bf16 scores of
 *     2^31 elements), as PyTorch's mul and masked_fill_; attnd's kernels themselves index
 *     with 64 bits and would not need it. The Memcpy and softmax are never split (PyTorch's
 *     copy_ is a cudaMemcpyAsync, its softmax indexes with int64).
 *
 * Measured on an H200 (helper harness via ctypes, CUDA-event median, 2026-12-02), us:
 *   qk 86, scale 135, memcpy 129, mask_fill 62 (ragged tails write at ~half bandwidth),
 *   softmax 153, pv 86; total naive 673 (PyTorch 1062), naive_inplace 544 (PyTorch 935).
 *   S4096 D64: 5315 / 4273 (PyTorch 10079 / 9074); S8192 D128: 10443 / 8425 (21654 / 19665).
 */
#include "kernels/decomposed.h"
#include "kernels/elementwise.cuh"
#include "kernels/serving_pad.cuh"
#include "kernels/softmax.cuh"

/* −inf into columns [from, to) of row r (row 16-aligned when vec_ok): the aligned middle as
 * 16-byte vectors, the unaligned ends element by element; one warp. */
template <typename T>
__device__ __forceinline__ void naive_fill_range(T *r, int64_t from, int64_t to, int vec_ok, int lane)
{
    typedef typename ew_io<T>::raw raw;
    constexpr int W = 16 / (int)sizeof(raw);
    const raw ninf = ew_io<T>::from_f32(-INFINITY);
    raw *e = reinterpret_cast<raw *>(r);
    int64_t a = to, b = to;
    if (vec_ok) {
        a = (from + W - 1) / W * W; /* first aligned column */
        b = to / W * W;             /* end of the last whole vector */
        if (a > b) a = b = to;
    }
    for (int64_t i = from + lane; i < a && i < to; i += 32) e[i] = ninf;
    if (vec_ok && a < b) {
        float vec[W];
#pragma unroll
        for (int j = 0; j < W; j++) vec[j] = -INFINITY;
        for (int64_t i = a + (int64_t)lane * W; i < b; i += 32 * W) ew_store<T, W>(r + i, vec);
    }
    for (int64_t i = b + lane; i < to; i += 32) e[i] = ninf;
}

/* masked_fill(mask, −inf) over the elements [e0, e1) of scores [B·H·Sq, Skv] (rows × skv): one
 * warp per row writes −inf at the columns outside attn_visible_range(row) (the causal tail and
 * the window's head), clipped to [e0, e1) in the first and last row. A padded ragged batch
 * (cu_q, cu_kv: the device cu_seqlens; else NULL) takes each row's sequence lengths, so its
 * padding is masked too (serving_visible). vec_ok: s is 16-aligned and Skv % W == 0, so every
 * row starts aligned. */
template <typename T>
__global__ void __launch_bounds__(EW_THREADS)
    naive_mask_fill_kernel(T *s, int64_t e0, int64_t e1, attn_problem p, const int32_t *cu_q, const int32_t *cu_kv,
                           int vec_ok)
{
    const int lane = threadIdx.x & 31;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5, skv = p.seq_kv;
    const int64_t first = e0 / skv, end = (e1 + skv - 1) / skv;
    for (int64_t row = first + (((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5); row < end; row += nwarps) {
        int64_t lo, hi;
        const int64_t from = e0 > row * skv ? e0 - row * skv : 0, to = e1 < (row + 1) * skv ? e1 - row * skv : skv;
        serving_visible(p, cu_q, cu_kv, row / (p.heads * p.seq_q), row % p.seq_q, &lo, &hi);
        naive_fill_range(s + row * skv, from, lo < to ? lo : to, vec_ok, lane);
        naive_fill_range(s + row * skv, hi > from ? hi : from, to, vec_ok, lane);
    }
}

/* One launch, or one per part of PyTorch's 32-bit indexing split of masked_fill_'s iteration
 * (the scores, and the [Sq, Skv] bool mask broadcast over B·H, or a padded batch's [B, 1, Sq,
 * Skv] one): two at B2 H16 S8192 bf16. */
template <typename T>
static int naive_mask_fill(exec_context *ctx, const attn_problem *p, T *d_scores, const int32_t *cu_q,
                           const int32_t *cu_kv)
{
    constexpr int W = 16 / (int)sizeof(typename ew_io<T>::raw);
    const int64_t plane = p->seq_q * p->seq_kv;
    const int vec_ok = ew_aligned16(d_scores) && p->seq_kv % W == 0;
    const index32_iter it = cu_q ? index32_batched_mask_op(plane, p->heads, p->batch, (int)sizeof(T), 1)
                                 : index32_blocks_op(plane, p->batch * p->heads, (int)sizeof(T), 1, 0);
    return ew_for_parts(ctx, it, [&](int64_t begin, int64_t count) {
        const int64_t rows = (begin + count + p->seq_kv - 1) / p->seq_kv - begin / p->seq_kv;
        const unsigned grid = ew_grid(ctx, rows, EW_THREADS / 32, EW_BLOCKS_PER_SM);
        naive_mask_fill_kernel<T>
            <<<grid, EW_THREADS, 0, ctx->stream>>>(d_scores, begin, begin + count, *p, cu_q, cu_kv, vec_ok);
        LAUNCH_TRY(ctx);
        return 0;
    });
}

static size_t naive_buffer_bytes(const attn_problem *p)
{
    return ew_align256((size_t)attn_scores_elems(p) * attn_dtype_bytes(p->dtype));
}

/* repeat_kv's copies of k and v, [B,H,Skv,D] and [B,H,Skv,Dv] (grouped K/V heads only). */
static size_t naive_repeat_bytes(const attn_problem *p, int64_t head_dim)
{
    if (attn_kv_heads(p) == p->heads) return 0;
    return ew_align256((size_t)(p->batch * p->heads * p->seq_kv * head_dim) * attn_dtype_bytes(p->dtype));
}

/* A serving batch's padded tensors first (serving_pad.cuh), then the dense problem's buffers. */
size_t naive_workspace_bytes(const attn_problem *p)
{
    serving_pad sp;
    serving_pad_plan(p, NULL, attn_dtype_bytes(p->dtype), &sp);
    const attn_problem *d = &sp.dense;
    return sp.bytes + 2 * naive_buffer_bytes(d) + naive_repeat_bytes(d, d->head_dim) +
           naive_repeat_bytes(d, attn_dv(d));
}

/* A serving batch (paged, ragged) takes PyTorch's padded route (serving_pad.cuh): its pages
 * gathered and its sequences padded into dense tensors, the padding masked with the causal mask
 * and the window in one masked_fill, the output's real rows picked out at the end. */
template <typename T>
static int naive_run(exec_context *ctx, const attn_problem *serving, const attn_tensors *st, void *workspace,
                     bool inplace)
{
    ew_nvtx range("attn_fwd");
    if (serving->mask < ATTN_MASK_NONE || serving->mask >= ATTN_MASK_COUNT)
        return exec_fail(ctx, __FILE__, __LINE__, "naive_forward", "unknown mask");
    if (workspace == NULL)
        return exec_fail(ctx, __FILE__, __LINE__, "naive_forward", "no workspace (needs naive_workspace_bytes)");
    if ((serving->ragged || serving->page_size > 0) && !serving->seqs)
        return exec_fail(ctx, __FILE__, __LINE__, "naive_forward", "a serving batch without its layout (seqs)");

    serving_pad sp;
    attn_tensors padded;
    serving_pad_plan(serving, workspace, sizeof(T), &sp);
    const attn_problem *p = &sp.dense;
    const attn_tensors *t = &padded;
    TRY(ew_check_problem(ctx, p, inplace ? "naive_inplace" : "naive"));
    TRY(serving_pad_inputs<T>(ctx, serving, st, &sp, &padded));
    workspace = (char *)workspace + sp.bytes;
    const int32_t *cu_q = serving->ragged ? st->cu_seqlens_q : NULL, *cu_kv = serving->ragged ? st->cu_seqlens_kv : NULL;

    const int64_t rows = p->batch * p->heads * p->seq_q;
    const int64_t n = rows * p->seq_kv;
    const cudaDataType_t dt = ew_cuda_type<T>::value;
    T *d_a = (T *)workspace;
    T *d_b = (T *)((char *)workspace + naive_buffer_bytes(p));
    const void *k = t->k, *v = t->v;

    if (attn_kv_heads(p) != p->heads) {
        ew_nvtx r("repeat_kv");
        T *d_k = (T *)((char *)workspace + 2 * naive_buffer_bytes(p));
        T *d_v = (T *)((char *)d_k + naive_repeat_bytes(p, p->head_dim));
        const int64_t outer = p->batch * attn_kv_heads(p), group = p->heads / attn_kv_heads(p);
        TRY(ew_repeat_heads(ctx, (const T *)t->k, d_k, outer, group, p->seq_kv * p->head_dim));
        TRY(ew_repeat_heads(ctx, (const T *)t->v, d_v, outer, group, p->seq_kv * attn_dv(p)));
        k = d_k, v = d_v;
    }
    {
        ew_nvtx r("qk_matmul");
        TRY(ew_gemm_qk(ctx, p, t->q, k, dt, sizeof(T), d_a, dt, sizeof(T)));
    }
    {
        ew_nvtx r("scale");
        TRY(ew_map(ctx, (const T *)d_a, d_b, n, ew_op_mul{(float)p->scale}));
    }
    T *d_masked = d_b;
    if (p->mask != ATTN_MASK_NONE || p->window_keys > 0 || cu_q) {
        if (!inplace) {
            ew_nvtx r("mask_copy");
            CUDA_TRY(ctx, cudaMemcpyAsync(d_a, d_b, (size_t)n * sizeof(T), cudaMemcpyDeviceToDevice, ctx->stream));
            d_masked = d_a;
        }
        ew_nvtx r("mask_fill");
        TRY(naive_mask_fill(ctx, p, d_masked, cu_q, cu_kv));
    }
    T *d_probs = d_masked == d_a ? d_b : d_a;
    {
        ew_nvtx r("softmax");
        TRY((softmax_launch<T, T>(ctx, d_masked, d_probs, rows, p->seq_kv)));
    }
    {
        ew_nvtx r("pv_matmul");
        TRY(ew_gemm_pv(ctx, p, d_probs, v, dt, sizeof(T), t->out, dt, sizeof(T)));
    }
    return serving_unpad_output(ctx, serving, t->out, st->out, st->cu_seqlens_q, sizeof(T));
}

static int naive_dispatch(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace,
                          bool inplace)
{
    switch (p->dtype) {
    case ATTN_BF16: return naive_run<__nv_bfloat16>(ctx, p, t, workspace, inplace);
    case ATTN_FP16: return naive_run<__half>(ctx, p, t, workspace, inplace);
    case ATTN_FP32: return naive_run<float>(ctx, p, t, workspace, inplace);
    default: return exec_fail(ctx, __FILE__, __LINE__, "naive_forward", "unknown dtype");
    }
}

int naive_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace)
{
    return naive_dispatch(ctx, p, t, workspace, false);
}

int naive_inplace_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace)
{
    return naive_dispatch(ctx, p, t, workspace, true);
}
