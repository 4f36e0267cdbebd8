/* flashinfer_paged_sm90.cu — FlashInfer's Hopper batch prefill over a paged cache for one head
 * dim (ATTND_FI_HEAD_DIM): PrefillSM90Plan of attention/scheduler.cuh once per job, then
 * BatchPrefillWithPagedKVCacheDispatched of attention/hopper/prefill_sm90.cuh (the FA3 template,
 * K and V gathered token by token through the page table) per forward, as csrc/batch_prefill_sm90.cu
 * calls them for flashinfer.BatchPrefillWithPagedKVCacheWrapper(backend="auto").plan() and
 * .run() on Hopper with 16-bit q and K/V. sm_90a only.
 *
 * Why this route: it is what vLLM runs on Hopper for every request of more than one query row
 * over its paged cache (a chunked prefill, a speculative decode), planned with causal=True.
 * attnd runs it for a paged batch of more than one query row, and for a contiguous cache with
 * 2-16 query rows a sequence, seen as the decode's pages (flashinfer_pages.h).
 *
 * The kernel takes q and out token-major ([rows,H,D], rows packed by qo_indptr). A ragged
 * batch's are; attnd's [B,H,Sq,D] ones are not, so a forward then copies q into the workspace
 * token-major and its output back: two small kernels of this file that show in the kernel
 * table (attnd_fi_bhsd_to_nhd_kernel, attnd_fi_nhd_to_bhsd_kernel), attnd's cost, not
 * FlashInfer's. The plan gets each sequence's key count (kv_len_arr) apart from the page
 * table, so top-left causal is FlashInfer's bottom-right mask over a sequence's first qo_len
 * keys, as for the ragged prefill.
 */
#include <flashinfer/attention/hopper/default_params.cuh>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/cutlass_utils.cuh>

#include <algorithm>
#include <vector>

#include "kernels/flashinfer/flashinfer_module.h"
#include "kernels/flashinfer/flashinfer_pages.h"

/* One namespace per head dim, named (see flashinfer_prefill_sm90.cu). */
namespace ATTND_FI_NAME(fi_paged_sm90_d) {

using namespace flashinfer;

/* One 16-byte piece of a row of D a thread: staged[(b·Sq + s)·H + h] ↔ bhsd[(b·H + h)·Sq + s]. */
__device__ __forceinline__ void bhsd_nhd_rows(int64_t i, int64_t heads, int64_t seq_q, int64_t *bhsd, int64_t *nhd)
{
    constexpr int64_t per_row = ATTND_FI_HEAD_DIM * 2 / 16;
    const int64_t row = i / per_row, part = i % per_row; /* row of bhsd: (b, h, s) */
    const int64_t s = row % seq_q, h = (row / seq_q) % heads, b = row / (seq_q * heads);
    *bhsd = row * per_row + part;
    *nhd = ((b * seq_q + s) * heads + h) * per_row + part;
}

__global__ void attnd_fi_bhsd_to_nhd_kernel(const uint4 *q, uint4 *staged, int64_t heads, int64_t seq_q, int64_t pieces)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t from, to;
    if (i >= pieces) return;
    bhsd_nhd_rows(i, heads, seq_q, &from, &to);
    staged[to] = q[from];
}

__global__ void attnd_fi_nhd_to_bhsd_kernel(const uint4 *staged, uint4 *out, int64_t heads, int64_t seq_q, int64_t pieces)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t to, from;
    if (i >= pieces) return;
    bhsd_nhd_rows(i, heads, seq_q, &to, &from);
    out[to] = staged[from];
}

/* Query rows of sequence b start at qo_indptr[b]: a ragged batch's cu_seqlens_q, else b·Sq. */
std::vector<int32_t> qo_indptr_of(const attnd_fi_case &c)
{
    std::vector<int32_t> v((size_t)c.batch + 1);
    for (int64_t b = 0; b <= c.batch; b++) v[(size_t)b] = c.ragged ? c.cu_seqlens_q[b] : (int32_t)(b * c.seq_q);
    return v;
}

cudaError_t plan(const attnd_fi_case &c, void *workspace, cudaStream_t s, attnd_fi_ragged_plan *out)
{
    const attnd_fi_decode_layout l = attnd_fi_paged_prefill_layout_of(&c);
    const attnd_fi_page_table pt = attnd_fi_page_table_of(c, l.page);
    std::vector<int32_t> qo_indptr = qo_indptr_of(c), kv_indptr(pt.indptr), kv_len((size_t)c.batch);
    PrefillPlanSM90Info info;
    int device = 0, sms = 0;
    cudaError_t e;
    void *pinned;

    if ((e = cudaGetDevice(&device)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
        return e;
    if (sms > ATTND_FI_MAX_SMS) FLASHINFER_ERROR("more SMs than attnd's plan buffer bound (ATTND_FI_MAX_SMS)");
    for (int64_t b = 0; b < c.batch; b++)
        kv_len[(size_t)b] = (int32_t)(attnd_fi_is_serving(c) ? attnd_fi_kv_seen(c, b) : c.kv_len);
    if ((e = attnd_fi_upload_page_table(pt, l, workspace, s)) != cudaSuccess) return e; /* synchronises */
    pinned = attnd_fi_pinned_buffer(l.int_bytes, &e);
    if (!pinned) return e;
    /* kv_indptr counts pages, as the wrapper's paged_kv_indptr does */
    e = PrefillSM90Plan<int32_t>(/*float_buffer=*/nullptr, 0, (char *)workspace + l.int_off, pinned, l.int_bytes, info,
                                 qo_indptr.data(), kv_indptr.data(), kv_len.data(), (uint32_t)qo_indptr.back(),
                                 (uint32_t)c.batch, (uint32_t)c.heads, (uint32_t)c.kv_heads, ATTND_FI_HEAD_DIM,
                                 ATTND_FI_HEAD_DIM, (uint32_t)l.page, c.causal != 0, /*enable_cuda_graph=*/false,
                                 /*sizeof_dtype_o=*/2, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s); /* the plan's copy out of the pinned buffer */
    if (e != cudaSuccess) return e;
    std::vector<int64_t> v = info.ToVector();
    std::fill(out->info, out->info + 16, 0);
    std::copy(v.begin(), v.end(), out->info);
    out->ctas = 0;
    out->split = 0;
    return cudaSuccess;
}

template <typename DType, MaskMode MASK, bool SAME_SCHEDULE>
cudaError_t run_masked(const attnd_fi_case &c, const attnd_fi_tensors &t, const attnd_fi_ragged_plan &pl,
                       cudaStream_t s)
{
    constexpr uint32_t D = ATTND_FI_HEAD_DIM;
    using Params = BatchPrefillPagedParams<DType, DType, DType, int32_t>;
    const attnd_fi_decode_layout l = attnd_fi_paged_prefill_layout_of(&c);
    const attnd_fi_page_strides ps = attnd_fi_page_strides_of(c);
    char *ws = (char *)t.workspace, *int_buf = ws + l.int_off;
    const int64_t rows = attnd_fi_total_rows(&c), pieces = rows * c.heads * (D * 2 / 16);
    const unsigned blocks = (unsigned)((pieces + 255) / 256);
    PrefillPlanSM90Info info;
    Params p;
    cudaError_t e;

    info.FromVector(std::vector<int64_t>(pl.info, pl.info + 9));
    p.q_ptr = (DType *)t.q;
    p.o_ptr = (DType *)t.out;
    if (!c.ragged) {
        p.q_ptr = (DType *)(ws + l.q_staged_off);
        p.o_ptr = (DType *)(ws + l.out_staged_off);
        attnd_fi_bhsd_to_nhd_kernel<<<blocks, 256, 0, s>>>((const uint4 *)t.q, (uint4 *)p.q_ptr, c.heads, c.seq_q, pieces);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    p.k_ptr = (DType *)t.k;
    p.v_ptr = (DType *)t.v;
    p.lse_ptr = nullptr;
    p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(int_buf, info.qo_tile_indices_offset);
    p.qo_indptr = GetPtrFromBaseOffset<int32_t>(int_buf, info.qo_indptr_offset);
    p.kv_indptr = GetPtrFromBaseOffset<int32_t>(int_buf, info.kv_indptr_offset);
    p.kv_indices = (int32_t *)(ws + l.indices_off);
    p.qo_lens = GetPtrFromBaseOffset<int32_t>(int_buf, info.qo_len_offset);
    p.kv_lens = GetPtrFromBaseOffset<int32_t>(int_buf, info.kv_len_offset);
    p.head_indices = GetPtrFromBaseOffset<int32_t>(int_buf, info.head_indices_offset);
    p.work_indptr = GetPtrFromBaseOffset<int32_t>(int_buf, info.work_indptr_offset);
    p.batch_indices = GetPtrFromBaseOffset<int32_t>(int_buf, info.batch_indices_offset);
    p.additional_params.logits_soft_cap = 0.0f;
    p.additional_params.sm_scale = (float)c.sm_scale;
    p.additional_params.maybe_prefix_len_ptr = nullptr;
    p.additional_params.maybe_token_pos_in_items_ptr = nullptr;
    p.additional_params.token_pos_in_items_len = 0;
    p.additional_params.maybe_max_item_len_ptr = nullptr;
    p.q_stride_n = p.o_stride_n = c.heads * D;
    p.q_stride_h = p.o_stride_h = D;
    /* the page table's strides: {page, head, key} for the contiguous cache's HND pages, {page,
     * key, head} for NHD ones (flashinfer_pages.h) */
    p.k_page_stride = p.v_page_stride = ps.s[0];
    p.k_stride_n = p.v_stride_n = ps.layout == QKVLayout::kHND ? ps.s[2] : ps.s[1];
    p.k_stride_h = p.v_stride_h = ps.layout == QKVLayout::kHND ? ps.s[1] : ps.s[2];
    p.nnz_qo = rows;
    p.num_qo_heads = (int)c.heads;
    p.num_kv_heads = (int)c.kv_heads;
    p.group_size = (int)(c.heads / c.kv_heads);
    p.page_size = (int)l.page;
    p.window_left = -1;
    p.causal = MASK == MaskMode::kCausal;
    e = BatchPrefillWithPagedKVCacheDispatched<D, D, MASK, /*LEFT_SLIDING_WINDOW=*/false, SAME_SCHEDULE,
                                               DefaultAttention</*use_logits_soft_cap=*/false>, Params>(
        p, /*enable_pdl=*/true, s);
    if (e != cudaSuccess || c.ragged) return e;
    attnd_fi_nhd_to_bhsd_kernel<<<blocks, 256, 0, s>>>((const uint4 *)p.o_ptr, (uint4 *)t.out, c.heads, c.seq_q, pieces);
    return cudaGetLastError();
}

template <typename DType>
cudaError_t run(const attnd_fi_case &c, const attnd_fi_tensors &t, const attnd_fi_ragged_plan &pl, cudaStream_t s)
{
    const bool same = pl.info[8] != 0; /* same_schedule_for_all_heads */
    if (c.causal)
        return same ? run_masked<DType, MaskMode::kCausal, true>(c, t, pl, s)
                    : run_masked<DType, MaskMode::kCausal, false>(c, t, pl, s);
    return same ? run_masked<DType, MaskMode::kNone, true>(c, t, pl, s)
                : run_masked<DType, MaskMode::kNone, false>(c, t, pl, s);
}

} // namespace ATTND_FI_NAME(fi_paged_sm90_d)

cudaError_t ATTND_FI_NAME(attnd_fi_paged_sm90_plan_d)(const attnd_fi_case &c, void *workspace, cudaStream_t s,
                                                      attnd_fi_ragged_plan *plan_out)
{
    return ATTND_FI_NAME(fi_paged_sm90_d)::plan(c, workspace, s, plan_out);
}

cudaError_t ATTND_FI_NAME(attnd_fi_paged_sm90_run_d)(const attnd_fi_case &c, const attnd_fi_tensors &t,
                                                     const attnd_fi_ragged_plan &pl, cudaStream_t s)
{
    using namespace ATTND_FI_NAME(fi_paged_sm90_d);
    return c.dtype == 0 ? run<cutlass::bfloat16_t>(c, t, pl, s) : run<cutlass::half_t>(c, t, pl, s);
}
