/* flashinfer_ragged_sm90.cu — FlashInfer's Hopper batch prefill over a ragged batch for one head
 * dim (ATTND_FI_HEAD_DIM): PrefillSM90Plan of attention/scheduler.cuh once per job, then
 * BatchPrefillWithRaggedKVCacheDispatched of attention/hopper/prefill_sm90.cuh (the FA3
 * template) per forward, as csrc/batch_prefill_sm90.cu calls them for
 * flashinfer.BatchPrefillWithRaggedKVCacheWrapper(backend="fa3").plan() and .run(). sm_90a only.
 *
 * attnd's ragged q [total_q,H,D], k and v [total_kv,Hkv,D] and out [total_q,H,D] are the
 * token-major tensors this entry point takes: one launch for the whole batch. The plan gets
 * each sequence's key count apart from kv_indptr (kv_len_arr), so top-left causal is
 * FlashInfer's bottom-right mask over a sequence's first qo_len keys, as for a dense batch.
 */
#include <flashinfer/attention/hopper/default_params.cuh>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/cutlass_utils.cuh>

#include <algorithm>
#include <vector>

#include "kernels/flashinfer/flashinfer_module.h"

/* One namespace per head dim, named (see flashinfer_prefill_sm90.cu). */
namespace ATTND_FI_NAME(fi_ragged_sm90_d) {

using namespace flashinfer;

cudaError_t plan(const attnd_fi_case &c, void *workspace, cudaStream_t s, attnd_fi_ragged_plan *out)
{
    const attnd_fi_ragged_layout l = attnd_fi_ragged_layout_of(&c, 1);
    std::vector<int32_t> qo_indptr((size_t)c.batch + 1), kv_indptr((size_t)c.batch + 1), kv_len((size_t)c.batch);
    PrefillPlanSM90Info info;
    int device = 0, sms = 0;
    cudaError_t e;
    void *pinned;

    if ((e = cudaGetDevice(&device)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
        return e;
    if (sms > ATTND_FI_MAX_SMS) FLASHINFER_ERROR("more SMs than attnd's plan buffer bound (ATTND_FI_MAX_SMS)");
    for (int64_t b = 0; b <= c.batch; b++) qo_indptr[(size_t)b] = c.cu_seqlens_q[b], kv_indptr[(size_t)b] = c.cu_seqlens_kv[b];
    for (int64_t b = 0; b < c.batch; b++) kv_len[(size_t)b] = (int32_t)attnd_fi_kv_seen(c, b);
    pinned = attnd_fi_pinned_buffer(l.int_bytes, &e);
    if (!pinned) return e;
    e = PrefillSM90Plan<int32_t>(/*float_buffer=*/nullptr, 0, (char *)workspace + l.int_off, pinned, l.int_bytes, info,
                                 qo_indptr.data(), kv_indptr.data(), kv_len.data(), (uint32_t)c.total_q,
                                 (uint32_t)c.batch, (uint32_t)c.heads, (uint32_t)c.kv_heads, ATTND_FI_HEAD_DIM,
                                 ATTND_FI_HEAD_DIM, /*page_size=*/1, c.causal != 0, /*enable_cuda_graph=*/false,
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
    using Params = BatchPrefillRaggedParams<DType, DType, DType, int32_t>;
    const attnd_fi_ragged_layout l = attnd_fi_ragged_layout_of(&c, 1);
    char *int_buf = (char *)t.workspace + l.int_off;
    PrefillPlanSM90Info info;
    Params p;

    info.FromVector(std::vector<int64_t>(pl.info, pl.info + 9));
    p.q_ptr = (DType *)t.q;
    p.k_ptr = (DType *)t.k;
    p.v_ptr = (DType *)t.v;
    p.o_ptr = (DType *)t.out;
    p.lse_ptr = nullptr;
    p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(int_buf, info.qo_tile_indices_offset);
    p.qo_indptr = GetPtrFromBaseOffset<int32_t>(int_buf, info.qo_indptr_offset);
    p.kv_indptr = GetPtrFromBaseOffset<int32_t>(int_buf, info.kv_indptr_offset);
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
    p.k_stride_n = p.v_stride_n = c.kv_heads * D;
    p.k_stride_h = p.v_stride_h = D;
    p.nnz_qo = c.total_q;
    p.nnz_kv = c.total_kv;
    p.num_qo_heads = (int)c.heads;
    p.num_kv_heads = (int)c.kv_heads;
    p.group_size = (int)(c.heads / c.kv_heads);
    p.window_left = -1;
    p.causal = MASK == MaskMode::kCausal;
    return BatchPrefillWithRaggedKVCacheDispatched<D, D, MASK, /*LEFT_SLIDING_WINDOW=*/false, SAME_SCHEDULE,
                                                   DefaultAttention</*use_logits_soft_cap=*/false>, Params>(
        p, /*enable_pdl=*/true, s);
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

} // namespace ATTND_FI_NAME(fi_ragged_sm90_d)

cudaError_t ATTND_FI_NAME(attnd_fi_ragged_sm90_plan_d)(const attnd_fi_case &c, void *workspace, cudaStream_t s,
                                                       attnd_fi_ragged_plan *plan_out)
{
    return ATTND_FI_NAME(fi_ragged_sm90_d)::plan(c, workspace, s, plan_out);
}

cudaError_t ATTND_FI_NAME(attnd_fi_ragged_sm90_run_d)(const attnd_fi_case &c, const attnd_fi_tensors &t,
                                                      const attnd_fi_ragged_plan &pl, cudaStream_t s)
{
    using namespace ATTND_FI_NAME(fi_ragged_sm90_d);
    return c.dtype == 0 ? run<cutlass::bfloat16_t>(c, t, pl, s) : run<cutlass::half_t>(c, t, pl, s);
}
