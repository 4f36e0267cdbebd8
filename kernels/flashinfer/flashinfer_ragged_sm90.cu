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

#include <vector>

#include "kernels/flashinfer/flashinfer_module.h"
#include "kernels/flashinfer/flashinfer_sm90_batch.h"

/* One namespace per head dim, named (see flashinfer_prefill_sm90.cu). */
namespace ATTND_FI_NAME(fi_ragged_sm90_d) {

using namespace flashinfer;

cudaError_t plan(const attnd_fi_case &c, void *workspace, cudaStream_t s, attnd_fi_ragged_plan *out)
{
    const attnd_fi_ragged_layout l = attnd_fi_ragged_layout_of(&c, 1);
    std::vector<int32_t> qo_indptr((size_t)c.batch + 1), kv_indptr((size_t)c.batch + 1), kv_len((size_t)c.batch);

    for (int64_t b = 0; b <= c.batch; b++) qo_indptr[(size_t)b] = c.cu_seqlens_q[b], kv_indptr[(size_t)b] = c.cu_seqlens_kv[b];
    for (int64_t b = 0; b < c.batch; b++) kv_len[(size_t)b] = (int32_t)attnd_fi_kv_seen(c, b);
    return attnd_fi_sm90_plan(c, (char *)workspace + l.int_off, l.int_bytes, qo_indptr, kv_indptr, kv_len,
                              /*page_size=*/1, s, out);
}

template <typename DType, MaskMode MASK, bool SAME_SCHEDULE>
cudaError_t run_masked(const attnd_fi_case &c, const attnd_fi_tensors &t, const attnd_fi_ragged_plan &pl,
                       cudaStream_t s)
{
    constexpr uint32_t D = ATTND_FI_HEAD_DIM;
    using Params = BatchPrefillRaggedParams<DType, DType, DType, int32_t>;
    const attnd_fi_ragged_layout l = attnd_fi_ragged_layout_of(&c, 1);
    PrefillPlanSM90Info info;
    Params p;

    info.FromVector(std::vector<int64_t>(pl.info, pl.info + 9));
    attnd_fi_sm90_schedule(p, c, (char *)t.workspace + l.int_off, info);
    p.q_ptr = (DType *)t.q;
    p.k_ptr = (DType *)t.k;
    p.v_ptr = (DType *)t.v;
    p.o_ptr = (DType *)t.out;
    p.k_stride_n = p.v_stride_n = c.kv_heads * D;
    p.k_stride_h = p.v_stride_h = D;
    p.nnz_qo = c.total_q;
    p.nnz_kv = c.total_kv;
    return BatchPrefillWithRaggedKVCacheDispatched<D, D, MASK, /*LEFT_SLIDING_WINDOW=*/false, SAME_SCHEDULE,
                                                   DefaultAttention</*use_logits_soft_cap=*/false>, Params>(
        p, /*enable_pdl=*/true, s);
}

template <typename DType>
cudaError_t run(const attnd_fi_case &c, const attnd_fi_tensors &t, const attnd_fi_ragged_plan &pl, cudaStream_t s)
{
    return attnd_fi_sm90_dispatch(c, pl, [&](auto mask, auto same) {
        return run_masked<DType, decltype(mask)::value, decltype(same)::value>(c, t, pl, s);
    });
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
