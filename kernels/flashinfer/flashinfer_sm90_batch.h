/* flashinfer_sm90_batch.h — inside libattnd_flashinfer.so: what Hopper's two batch prefills
 * (ragged, flashinfer_ragged_sm90.cu; paged, flashinfer_paged_sm90.cu) share: PrefillSM90Plan
 * into the workspace once per job, the plan's schedule into their params per forward, and the
 * choice of template (mask, one schedule for all heads) from the case and the plan. Needs
 * ATTND_FI_HEAD_DIM, like the files that include it.
 */
#ifndef FLASHINFER_SM90_BATCH_H
#define FLASHINFER_SM90_BATCH_H

#include <flashinfer/attention/scheduler.cuh>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/flashinfer/flashinfer_module.h"

/* PrefillSM90Plan over sequences starting at qo_indptr (query rows) and kv_indptr (keys, or
 * pages for a paged cache), each seeing kv_len keys, into int_bytes at int_buf; the plan's
 * numbers into out. Synchronises s. */
static inline cudaError_t attnd_fi_sm90_plan(const attnd_fi_case &c, void *int_buf, size_t int_bytes,
                                             std::vector<int32_t> &qo_indptr, std::vector<int32_t> &kv_indptr,
                                             std::vector<int32_t> &kv_len, uint32_t page_size, cudaStream_t s,
                                             attnd_fi_ragged_plan *out)
{
    flashinfer::PrefillPlanSM90Info info;
    int device = 0, sms = 0;
    cudaError_t e;
    void *pinned;

    if ((e = cudaGetDevice(&device)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
        return e;
    if (sms > ATTND_FI_MAX_SMS) FLASHINFER_ERROR("more SMs than attnd's plan buffer bound (ATTND_FI_MAX_SMS)");
    pinned = attnd_fi_pinned_buffer(int_bytes, &e);
    if (!pinned) return e;
    e = flashinfer::PrefillSM90Plan<int32_t>(/*float_buffer=*/nullptr, 0, int_buf, pinned, int_bytes, info,
                                             qo_indptr.data(), kv_indptr.data(), kv_len.data(),
                                             (uint32_t)qo_indptr.back(), (uint32_t)c.batch, (uint32_t)c.heads,
                                             (uint32_t)c.kv_heads, ATTND_FI_HEAD_DIM, ATTND_FI_HEAD_DIM, page_size,
                                             c.causal != 0, /*enable_cuda_graph=*/false, /*sizeof_dtype_o=*/2, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s); /* the plan's copy out of the pinned buffer */
    if (e != cudaSuccess) return e;
    std::vector<int64_t> v = info.ToVector();
    std::fill(out->info, out->info + 16, 0);
    std::copy(v.begin(), v.end(), out->info);
    out->ctas = 0;
    out->split = 0;
    return cudaSuccess;
}

/* The plan's schedule (at int_buf) and what the case fixes into p, as FlashInfer's
 * csrc/batch_prefill_sm90.cu sets them: token-major q and out of c.heads heads, no soft-cap,
 * no window, the case's scale and mask. The tensors and K/V strides are the caller's. */
template <typename Params>
static inline void attnd_fi_sm90_schedule(Params &p, const attnd_fi_case &c, char *int_buf,
                                          const flashinfer::PrefillPlanSM90Info &info)
{
    using flashinfer::GetPtrFromBaseOffset;
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
    p.q_stride_n = p.o_stride_n = c.heads * ATTND_FI_HEAD_DIM;
    p.q_stride_h = p.o_stride_h = ATTND_FI_HEAD_DIM;
    p.num_qo_heads = (int)c.heads;
    p.num_kv_heads = (int)c.kv_heads;
    p.group_size = (int)(c.heads / c.kv_heads);
    p.window_left = -1;
    p.causal = c.causal != 0;
}

/* run(mask, same) with the template arguments the case and its plan choose: MaskMode::kCausal
 * or kNone, and whether the plan made one schedule for all heads (its same_schedule_for_all_heads). */
template <typename Run>
static inline cudaError_t attnd_fi_sm90_dispatch(const attnd_fi_case &c, const attnd_fi_ragged_plan &pl, Run &&run)
{
    using flashinfer::MaskMode;
    using Causal = std::integral_constant<MaskMode, MaskMode::kCausal>;
    using None = std::integral_constant<MaskMode, MaskMode::kNone>;
    const bool same = pl.info[8] != 0;
    if (c.causal) return same ? run(Causal{}, std::true_type{}) : run(Causal{}, std::false_type{});
    return same ? run(None{}, std::true_type{}) : run(None{}, std::false_type{});
}

#endif
