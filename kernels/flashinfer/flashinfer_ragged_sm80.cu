/* flashinfer_ragged_sm80.cu — FlashInfer's FA2 batch prefill over a ragged batch for one head dim
 * (ATTND_FI_HEAD_DIM): PrefillPlan of attention/scheduler.cuh once per job, then
 * BatchPrefillWithRaggedKVCacheDispatched of attention/prefill.cuh per forward, as
 * csrc/batch_prefill.cu calls them for flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
 * backend="fa2").plan() and .run(); compiled for sm_80 (its cubin runs on every 8.x part).
 *
 * attnd's ragged q [total_q,H,D], k and v [total_kv,Hkv,D] and out [total_q,H,D] are the
 * token-major tensors it takes, so nothing is staged or transposed: one launch for the batch.
 * The plan is made with split-KV off (disable_split_kv), so its buffers are bounded by the
 * query tiles alone (flashinfer_layout.h). q_indptr and kv_indptr, the kernel's offsets and
 * lengths, are attnd's cu_seqlens, copied into the workspace in prepare; a sequence's keys are
 * all of kv_indptr[b]..kv_indptr[b+1], so top-left causal needs qo_len = kv_len in each
 * sequence (the module refuses the rest).
 */
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <algorithm>
#include <vector>

#include "kernels/flashinfer/flashinfer_module.h"

/* One namespace per head dim, named (see flashinfer_prefill_sm90.cu). */
namespace ATTND_FI_NAME(fi_ragged_sm80_d) {

using namespace flashinfer;

using Variant = DefaultAttention</*use_custom_mask=*/false, /*use_sliding_window=*/false,
                                 /*use_logits_soft_cap=*/false, /*use_alibi=*/false>;

cudaError_t plan(const attnd_fi_case &c, void *workspace, cudaStream_t s, attnd_fi_ragged_plan *out)
{
    const attnd_fi_ragged_layout l = attnd_fi_ragged_layout_of(&c, 0);
    std::vector<int32_t> qo_indptr(c.cu_seqlens_q, c.cu_seqlens_q + c.batch + 1),
        kv_indptr(c.cu_seqlens_kv, c.cu_seqlens_kv + c.batch + 1);
    char *ws = (char *)workspace;
    PrefillPlanInfo info;
    cudaError_t e;
    void *pinned;

    e = cudaMemcpyAsync(ws + l.qo_indptr_off, qo_indptr.data(), qo_indptr.size() * 4, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(ws + l.kv_indptr_off, kv_indptr.data(), kv_indptr.size() * 4, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s); /* the host vectors die here */
    if (e != cudaSuccess) return e;
    pinned = attnd_fi_pinned_buffer(l.int_bytes, &e);
    if (!pinned) return e;
    e = PrefillPlan<int32_t>(/*float_buffer=*/nullptr, 0, ws + l.int_off, pinned, l.int_bytes, info, qo_indptr.data(),
                             kv_indptr.data(), (uint32_t)c.total_q, (uint32_t)c.batch, (uint32_t)c.heads,
                             (uint32_t)c.kv_heads, ATTND_FI_HEAD_DIM, ATTND_FI_HEAD_DIM, /*page_size=*/1,
                             /*enable_cuda_graph=*/false, /*sizeof_dtype_o=*/2, /*window_left=*/-1,
                             /*fixed_split_size=*/-1, /*disable_split_kv=*/true, /*num_colocated_ctas=*/0,
                             /*uniform_q_len=*/-1, /*fixed_uniform_q_len=*/false, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s); /* the plan's copy out of the pinned buffer */
    if (e != cudaSuccess) return e;
    std::vector<int64_t> v = info.ToVector();
    std::fill(out->info, out->info + 16, 0);
    std::copy(v.begin(), v.begin() + std::min<size_t>(v.size(), 16), out->info);
    out->ctas = info.padded_batch_size;
    out->split = info.split_kv;
    return cudaSuccess;
}

template <typename DType, MaskMode MASK>
cudaError_t run_masked(const attnd_fi_case &c, const attnd_fi_tensors &t, const attnd_fi_ragged_plan &pl,
                       cudaStream_t s)
{
    constexpr uint32_t D = ATTND_FI_HEAD_DIM;
    using Params = BatchPrefillRaggedParams<DType, DType, DType, int32_t>;
    const attnd_fi_ragged_layout l = attnd_fi_ragged_layout_of(&c, 0);
    char *ws = (char *)t.workspace, *int_buf = ws + l.int_off;
    PrefillPlanInfo info;
    cudaError_t e = cudaSuccess;

    info.FromVector(std::vector<int64_t>(pl.info, pl.info + 15));
    Params p((DType *)t.q, (DType *)t.k, (DType *)t.v, /*maybe_custom_mask=*/nullptr, (int32_t *)(ws + l.qo_indptr_off),
             (int32_t *)(ws + l.kv_indptr_off), /*maybe_mask_indptr=*/nullptr, /*maybe_q_rope_offset=*/nullptr,
             /*maybe_k_rope_offset=*/nullptr, (DType *)t.out, /*lse=*/nullptr, /*maybe_alibi_slopes=*/nullptr,
             (uint32_t)c.heads, (uint32_t)c.kv_heads, /*q_stride_n=*/(uint32_t)(c.heads * D), /*q_stride_h=*/D,
             /*kv_stride_n=*/(uint32_t)(c.kv_heads * D), /*kv_stride_h=*/D, /*window_left=*/-1,
             /*logits_soft_cap=*/0.0f, (float)c.sm_scale, /*rope_scale=*/1.0f, /*rope_theta=*/1e4f);
    p.request_indices = GetPtrFromBaseOffset<int32_t>(int_buf, info.request_indices_offset);
    p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(int_buf, info.qo_tile_indices_offset);
    p.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(int_buf, info.kv_tile_indices_offset);
    p.o_indptr = GetPtrFromBaseOffset<int32_t>(int_buf, info.o_indptr_offset);
    p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int32_t>(int_buf, info.kv_chunk_size_ptr_offset);
    p.padded_batch_size = (uint32_t)info.padded_batch_size;
    p.max_total_num_rows = (uint32_t)info.total_num_rows;
    DISPATCH_CTA_TILE_Q(info.cta_tile_q, CTA_TILE_Q, {
        e = BatchPrefillWithRaggedKVCacheDispatched<CTA_TILE_Q, D, D, PosEncodingMode::kNone,
                                                    /*USE_FP16_QK_REDUCTION=*/false, MASK,
                                                    /*USE_TOKEN_HEAD_SF=*/false, Variant, Params>(
            p, /*tmp_v=*/nullptr, /*tmp_s=*/nullptr, /*enable_pdl=*/c.cc >= 90, s);
    });
    return e;
}

template <typename DType>
cudaError_t run(const attnd_fi_case &c, const attnd_fi_tensors &t, const attnd_fi_ragged_plan &pl, cudaStream_t s)
{
    return c.causal ? run_masked<DType, MaskMode::kCausal>(c, t, pl, s) : run_masked<DType, MaskMode::kNone>(c, t, pl, s);
}

} // namespace ATTND_FI_NAME(fi_ragged_sm80_d)

cudaError_t ATTND_FI_NAME(attnd_fi_ragged_sm80_plan_d)(const attnd_fi_case &c, void *workspace, cudaStream_t s,
                                                       attnd_fi_ragged_plan *plan_out)
{
    return ATTND_FI_NAME(fi_ragged_sm80_d)::plan(c, workspace, s, plan_out);
}

cudaError_t ATTND_FI_NAME(attnd_fi_ragged_sm80_run_d)(const attnd_fi_case &c, const attnd_fi_tensors &t,
                                                      const attnd_fi_ragged_plan &pl, cudaStream_t s)
{
    using namespace ATTND_FI_NAME(fi_ragged_sm80_d);
    return c.dtype == 0 ? run<nv_bfloat16>(c, t, pl, s) : run<half>(c, t, pl, s);
}
