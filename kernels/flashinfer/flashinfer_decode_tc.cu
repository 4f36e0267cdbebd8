/* flashinfer_decode_tc.cu — FlashInfer's tensor-core decode for one head dim
 * (ATTND_FI_HEAD_DIM): PrefillPlan of attention/scheduler.cuh once per job, then FA2's
 * BatchPrefillWithPagedKVCacheDispatched of attention/prefill.cuh per forward, one query row
 * per sequence, as flashinfer.BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True)
 * .plan() and .run() call them (csrc/batch_prefill.cu and batch_prefill_paged.cuh).
 *
 * Why this route: vLLM's FlashInfer backend builds its decode wrapper with
 * use_tensor_cores=True for every group (it once did so above 4 query heads per K/V head,
 * SGLang's rule still), and the packed rows (group × 1 query) fill an mma tile where the
 * CUDA-core decode gives each query head a row of threads. flashinfer_module.cu routes every
 * decode here but those of impl cuda_cores (decode_kernel ATTND_FI_DECODE_CUDA_CORES).
 *
 * Why FA2 and not the Hopper (sm90) batch prefill: with backend="auto" and 16-bit q and K/V,
 * the wrapper's plan() sets the backend to "fa2" on every architecture (flashinfer/decode.py;
 * only fp8 asks determine_attention_backend), and refuses "fa3" for q_len_per_req > 1, so FA2
 * is what vLLM runs on an H100 too. FA2 is plain mma.sync and cp.async, so this file is
 * compiled for every architecture of the module (sm_90a and sm_80), like the decode.
 *
 * The cache is the paged view of flashinfer_pages.h (dense, paged or ragged), the same pages
 * the CUDA-core decode reads. q [B,H,1,D] (or a ragged decode's [B,H,D]) is the token-major
 * [rows,H,D] q of the batch prefill with q_indptr 0, 1, …, B, and out likewise. The plan
 * mirrors the wrapper's: split-KV on, no fixed split size, uniform_q_len 1, no CUDA-graph
 * plan; when it splits, VariableLengthMergeStates combines the chunks. The mask is kNone,
 * as the wrapper's for one query row: a causal row's keys are already the table's.
 */
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/flashinfer/flashinfer_module.h"
#include "kernels/flashinfer/flashinfer_pages.h"

/* One namespace per head dim, named (see flashinfer_decode.cu). */
namespace ATTND_FI_NAME(fi_decode_tc_d) {

using namespace flashinfer;

using Variant = DefaultAttention</*use_custom_mask=*/false, /*use_sliding_window=*/false,
                                 /*use_logits_soft_cap=*/false, /*use_alibi=*/false>;

cudaError_t plan(const attnd_fi_case &c, void *workspace, cudaStream_t s, attnd_fi_ragged_plan *out)
{
    const attnd_fi_decode_layout l = attnd_fi_decode_tc_layout_of(&c);
    const attnd_fi_page_table pt = attnd_fi_page_table_of(c, l.page);
    std::vector<int32_t> qo_indptr((size_t)c.batch + 1), kv_indptr(pt.indptr);
    char *ws = (char *)workspace;
    PrefillPlanInfo info;
    cudaError_t e;
    void *pinned;

    for (int64_t b = 0; b <= c.batch; b++) qo_indptr[(size_t)b] = (int32_t)b;
    e = cudaMemcpyAsync(ws + l.qo_indptr_off, qo_indptr.data(), qo_indptr.size() * 4, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = attnd_fi_upload_page_table(pt, l, workspace, s); /* synchronises */
    if (e != cudaSuccess) return e;
    pinned = attnd_fi_pinned_buffer(l.int_bytes, &e);
    if (!pinned) return e;
    /* kv_indptr counts pages, as the wrapper's paged_kv_indptr does */
    e = PrefillPlan<int32_t>(ws + l.float_off, l.float_bytes, ws + l.int_off, pinned, l.int_bytes, info,
                             qo_indptr.data(), kv_indptr.data(), /*total_num_rows=*/(uint32_t)c.batch,
                             (uint32_t)c.batch, (uint32_t)c.heads, (uint32_t)c.kv_heads, ATTND_FI_HEAD_DIM,
                             ATTND_FI_HEAD_DIM, (uint32_t)l.page, /*enable_cuda_graph=*/false, /*sizeof_dtype_o=*/2,
                             /*window_left=*/-1, /*fixed_split_size=*/-1, /*disable_split_kv=*/false,
                             /*num_colocated_ctas=*/0, /*uniform_q_len=*/1, /*fixed_uniform_q_len=*/true, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s); /* the plan's copy out of the pinned buffer */
    if (e != cudaSuccess) return e;
    std::vector<int64_t> v = info.ToVector();
    std::fill(out->info, out->info + 16, 0);
    std::copy(v.begin(), v.begin() + std::min<size_t>(v.size(), 16), out->info);
    out->ctas = info.padded_batch_size;
    out->split = info.split_kv;
    return cudaSuccess;
}

template <typename DType>
cudaError_t run(const attnd_fi_case &c, const attnd_fi_tensors &t, const attnd_fi_ragged_plan &pl, cudaStream_t s)
{
    constexpr uint32_t D = ATTND_FI_HEAD_DIM;
    using Params = BatchPrefillPagedParams<DType, DType, DType, int32_t>;
    const attnd_fi_decode_layout l = attnd_fi_decode_tc_layout_of(&c);
    char *ws = (char *)t.workspace, *int_buf = ws + l.int_off, *float_buf = ws + l.float_off;
    PrefillPlanInfo info;
    DType *tmp_v = nullptr;
    float *tmp_s = nullptr;
    cudaError_t e = cudaSuccess;

    info.FromVector(std::vector<int64_t>(pl.info, pl.info + 15));
    paged_kv_t<DType, int32_t> kv = attnd_fi_paged_kv_of<DType, D>(c, l, t);
    Params p((DType *)t.q, kv, /*maybe_custom_mask=*/nullptr, (int32_t *)(ws + l.qo_indptr_off),
             /*maybe_mask_indptr=*/nullptr, /*maybe_q_rope_offset=*/nullptr, (DType *)t.out, /*lse=*/nullptr,
             /*maybe_alibi_slopes=*/nullptr, (uint32_t)c.heads, /*q_stride_n=*/(int32_t)(c.heads * D),
             /*q_stride_h=*/(int32_t)D, /*window_left=*/-1, /*logits_soft_cap=*/0.0f, (float)c.sm_scale,
             /*rope_scale=*/1.0f, /*rope_theta=*/1e4f);
    p.request_indices = GetPtrFromBaseOffset<int32_t>(int_buf, info.request_indices_offset);
    p.qo_tile_indices = GetPtrFromBaseOffset<int32_t>(int_buf, info.qo_tile_indices_offset);
    p.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(int_buf, info.kv_tile_indices_offset);
    p.o_indptr = GetPtrFromBaseOffset<int32_t>(int_buf, info.o_indptr_offset);
    p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int32_t>(int_buf, info.kv_chunk_size_ptr_offset);
    if (info.split_kv) {
        p.merge_indptr = GetPtrFromBaseOffset<int32_t>(int_buf, info.merge_indptr_offset);
        tmp_v = GetPtrFromBaseOffset<DType>(float_buf, info.v_offset);
        tmp_s = GetPtrFromBaseOffset<float>(float_buf, info.s_offset);
    }
    p.padded_batch_size = (uint32_t)info.padded_batch_size;
    p.max_total_num_rows = (uint32_t)info.total_num_rows;
    /* The tiles FA2DetermineCtaTileQ picks for 16-bit K/V and head_dim <= 256 (FlashInfer's own
     * paged instantiations are these three); k and v share their strides. PDL as run()'s
     * default: compute capability 9 or newer. */
    switch (info.cta_tile_q) {
#define ATTND_FI_TC_LAUNCH(TILE)                                                                                 \
    case TILE:                                                                                                   \
        e = BatchPrefillWithPagedKVCacheDispatched</*SAME_KV_STRIDES=*/true, TILE, D, D, PosEncodingMode::kNone, \
                                                   /*USE_FP16_QK_REDUCTION=*/false, MaskMode::kNone,             \
                                                   /*USE_TOKEN_HEAD_SF=*/false, Variant, Params>(                \
            p, tmp_v, tmp_s, /*enable_pdl=*/c.cc >= 90, s);                                                      \
        break;
        ATTND_FI_TC_LAUNCH(16)
        ATTND_FI_TC_LAUNCH(64)
#if ATTND_FI_HEAD_DIM < 256
        ATTND_FI_TC_LAUNCH(128)
#endif
#undef ATTND_FI_TC_LAUNCH
    default:
        FLASHINFER_ERROR("PrefillPlan chose cta_tile_q " + std::to_string(info.cta_tile_q) +
                         ", which attnd's module does not instantiate");
    }
    return e;
}

} // namespace ATTND_FI_NAME(fi_decode_tc_d)

cudaError_t ATTND_FI_NAME(attnd_fi_decode_tc_plan_d)(const attnd_fi_case &c, void *workspace, cudaStream_t s,
                                                     attnd_fi_ragged_plan *plan_out)
{
    return ATTND_FI_NAME(fi_decode_tc_d)::plan(c, workspace, s, plan_out);
}

cudaError_t ATTND_FI_NAME(attnd_fi_decode_tc_run_d)(const attnd_fi_case &c, const attnd_fi_tensors &t,
                                                    const attnd_fi_ragged_plan &pl, cudaStream_t s)
{
    using namespace ATTND_FI_NAME(fi_decode_tc_d);
    return c.dtype == 0 ? run<nv_bfloat16>(c, t, pl, s) : run<half>(c, t, pl, s);
}
