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

#include <vector>

#include "kernels/flashinfer/flashinfer_module.h"
#include "kernels/flashinfer/flashinfer_pages.h"
#include "kernels/flashinfer/flashinfer_sm90_batch.h"

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
    cudaError_t e;

    for (int64_t b = 0; b < c.batch; b++)
        kv_len[(size_t)b] = (int32_t)(attnd_fi_is_serving(c) ? attnd_fi_kv_seen(c, b) : c.kv_len);
    if ((e = attnd_fi_upload_page_table(pt, l, workspace, s)) != cudaSuccess) return e; /* synchronises */
    /* kv_indptr counts pages, as the wrapper's paged_kv_indptr does */
    return attnd_fi_sm90_plan(c, (char *)workspace + l.int_off, l.int_bytes, qo_indptr, kv_indptr, kv_len,
                              (uint32_t)l.page, s, out);
}

template <typename DType, MaskMode MASK, bool SAME_SCHEDULE>
cudaError_t run_masked(const attnd_fi_case &c, const attnd_fi_tensors &t, const attnd_fi_ragged_plan &pl,
                       cudaStream_t s)
{
    constexpr uint32_t D = ATTND_FI_HEAD_DIM;
    using Params = BatchPrefillPagedParams<DType, DType, DType, int32_t>;
    const attnd_fi_decode_layout l = attnd_fi_paged_prefill_layout_of(&c);
    const attnd_fi_page_strides ps = attnd_fi_page_strides_of(c);
    char *ws = (char *)t.workspace;
    const int64_t rows = attnd_fi_total_rows(&c), pieces = rows * c.heads * (D * 2 / 16);
    const unsigned blocks = (unsigned)((pieces + 255) / 256);
    PrefillPlanSM90Info info;
    Params p;
    cudaError_t e;

    info.FromVector(std::vector<int64_t>(pl.info, pl.info + 9));
    attnd_fi_sm90_schedule(p, c, ws + l.int_off, info);
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
    p.kv_indices = (int32_t *)(ws + l.indices_off);
    /* the page table's strides: {page, head, key} for the contiguous cache's HND pages, {page,
     * key, head} for NHD ones (flashinfer_pages.h) */
    p.k_page_stride = p.v_page_stride = ps.s[0];
    p.k_stride_n = p.v_stride_n = ps.layout == QKVLayout::kHND ? ps.s[2] : ps.s[1];
    p.k_stride_h = p.v_stride_h = ps.layout == QKVLayout::kHND ? ps.s[1] : ps.s[2];
    p.nnz_qo = rows;
    p.page_size = (int)l.page;
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
    return attnd_fi_sm90_dispatch(c, pl, [&](auto mask, auto same) {
        return run_masked<DType, decltype(mask)::value, decltype(same)::value>(c, t, pl, s);
    });
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
