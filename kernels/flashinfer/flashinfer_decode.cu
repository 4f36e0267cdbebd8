/* flashinfer_decode.cu — FlashInfer's batch decode for one head dim (ATTND_FI_HEAD_DIM): the
 * plan (DecodePlan of attention/scheduler.cuh) and the run (BatchDecodeWithPagedKVCacheDispatched
 * of attention/decode.cuh), as csrc/batch_decode.cu calls them for
 * flashinfer.BatchDecodeWithPagedKVCacheWrapper.plan() and .run().
 *
 * The cache is paged in FlashInfer's API. attnd's paged cache [num_pages,page_size,Hkv,D] is
 * its NHD layout, read through the block table. attnd's contiguous k and v [B,Hkv,Skv,D] are
 * handed over as a paged cache over the same memory (nothing is copied): HND pages of
 * ATTND_FI_DECODE_PAGE keys, page ids counted in rows of the [B·Hkv·Skv, D] view (the page
 * stride is D, the head stride Skv·D), so sequence b's page j is row b·Hkv·Skv + j·page; a
 * ragged [total_kv,Hkv,D] likewise as NHD pages whose ids count tokens (the page stride is
 * one token, Hkv·D), so sequence b's page j is token cu_seqlens_kv[b] + j·page. The table
 * (indptr, ids, each last page's keys) is built on the host in prepare and uploaded
 * (flashinfer_pages.h, shared with the tensor-core decode).
 * FlashInfer's plan then splits long sequences into chunks of pages when batch × kv_heads
 * CTAs would leave SMs idle, and a merge kernel combines the chunks.
 *
 * The kernel is FlashInfer's CUDA-core decode: one CTA row of threads per query head of a
 * group, so the group shares every K/V load (groups 1, 2, 3, 4, 6, 8 and 16). attnd runs it
 * for impl cuda_cores (SGLang's choice up to 4 query heads per K/V head); by default a decode
 * takes the tensor-core one (flashinfer_decode_tc.cu), as vLLM does. q [B,H,1,D] is its [B,H,D] query (strides H·D, D) and out its [B,H,D] output.
 */
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <algorithm>
#include <vector>

#include "kernels/flashinfer/flashinfer_module.h"
#include "kernels/flashinfer/flashinfer_pages.h"

/* One namespace per head dim: the templates below bake ATTND_FI_HEAD_DIM in, and the three
 * objects of this file are linked into one module. Named, not anonymous: nvcc's registration
 * stubs cannot name a type of an anonymous namespace in a kernel's template arguments. */
namespace ATTND_FI_NAME(fi_decode_d) {

using namespace flashinfer;

using Variant = DefaultAttention</*use_custom_mask=*/false, /*use_sliding_window=*/false,
                                 /*use_logits_soft_cap=*/false, /*use_alibi=*/false>;
template <typename DType>
using Params = BatchDecodeParams<DType, DType, DType, int32_t>;

template <typename DType>
cudaError_t plan(const attnd_fi_case &c, void *workspace, cudaStream_t s, attnd_fi_decode_plan *out)
{
    constexpr uint32_t D = ATTND_FI_HEAD_DIM;
    const attnd_fi_decode_layout l = attnd_fi_decode_layout_of(&c);
    char *ws = (char *)workspace;
    attnd_fi_page_table pt = attnd_fi_page_table_of(c, l.page); /* DecodePlan takes a mutable indptr */
    DecodePlanInfo info;
    cudaError_t e = attnd_fi_upload_page_table(pt, l, ws, s);
    void *pinned;

    if (e != cudaSuccess) return e;
    pinned = attnd_fi_pinned_buffer(l.int_bytes, &e);
    if (!pinned) return e;
    DISPATCH_GQA_GROUP_SIZE(c.heads / c.kv_heads, GROUP_SIZE, {
        auto work_estimation = BatchDecodeWithPagedKVCacheWorkEstimationDispatched<
            GROUP_SIZE, D, PosEncodingMode::kNone, Variant, Params<DType>>;
        e = DecodePlan<D, PosEncodingMode::kNone, Variant, Params<DType>>(
            ws + l.float_off, l.float_bytes, ws + l.int_off, pinned, l.int_bytes, info, pt.indptr.data(),
            (uint32_t)c.batch, (uint32_t)c.heads, (uint32_t)l.page, /*enable_cuda_graph=*/false, s,
            work_estimation);
    });
    if (e == cudaSuccess) e = cudaStreamSynchronize(s); /* the plan's copy out of the pinned buffer */
    if (e != cudaSuccess) return e;
    std::vector<int64_t> v = info.ToVector();
    std::copy(v.begin(), v.end(), out->info);
    out->chunks = info.padded_batch_size;
    out->split = info.split_kv;
    return cudaSuccess;
}

template <typename DType>
cudaError_t run(const attnd_fi_case &c, const attnd_fi_tensors &t, const attnd_fi_decode_plan &pl, cudaStream_t s)
{
    constexpr uint32_t D = ATTND_FI_HEAD_DIM;
    const attnd_fi_decode_layout l = attnd_fi_decode_layout_of(&c);
    char *ws = (char *)t.workspace, *int_buf = ws + l.int_off, *float_buf = ws + l.float_off;
    DecodePlanInfo info;
    DType *tmp_v = nullptr;
    float *tmp_s = nullptr;

    info.FromVector(std::vector<int64_t>(pl.info, pl.info + 10));
    paged_kv_t<DType, int32_t> kv = attnd_fi_paged_kv_of<DType, D>(c, l, t);
    Params<DType> p((DType *)t.q, /*q_rope_offset=*/nullptr, kv, (DType *)t.out, /*lse=*/nullptr,
                    /*maybe_alibi_slopes=*/nullptr, (uint32_t)c.heads, (int32_t)(c.heads * D), (int32_t)D,
                    /*window_left=*/-1, /*logits_soft_cap=*/0.0f, (float)c.sm_scale, /*rope_scale=*/1.0f,
                    /*rope_theta=*/1e4f);
    p.request_indices = GetPtrFromBaseOffset<int32_t>(int_buf, info.request_indices_offset);
    p.kv_tile_indices = GetPtrFromBaseOffset<int32_t>(int_buf, info.kv_tile_indices_offset);
    p.o_indptr = GetPtrFromBaseOffset<int32_t>(int_buf, info.o_indptr_offset);
    p.kv_chunk_size_ptr = GetPtrFromBaseOffset<int32_t>(int_buf, info.kv_chunk_size_ptr_offset);
    if (info.split_kv) {
        tmp_v = GetPtrFromBaseOffset<DType>(float_buf, info.v_offset);
        tmp_s = GetPtrFromBaseOffset<float>(float_buf, info.s_offset);
    }
    p.padded_batch_size = (uint32_t)info.padded_batch_size;
    /* Programmatic dependent launch where the GPU has it: flashinfer's run() default
     * (device_support_pdl: compute capability 9 or newer). */
    return BatchDecodeWithPagedKVCacheDispatched<D, PosEncodingMode::kNone, Variant>(p, tmp_v, tmp_s,
                                                                                    /*enable_pdl=*/c.cc >= 90, s);
}

} // namespace ATTND_FI_NAME(fi_decode_d)

cudaError_t ATTND_FI_NAME(attnd_fi_decode_plan_d)(const attnd_fi_case &c, void *workspace, cudaStream_t s,
                                                  attnd_fi_decode_plan *plan_out)
{
    using namespace ATTND_FI_NAME(fi_decode_d);
    return c.dtype == 0 ? plan<nv_bfloat16>(c, workspace, s, plan_out) : plan<half>(c, workspace, s, plan_out);
}

cudaError_t ATTND_FI_NAME(attnd_fi_decode_run_d)(const attnd_fi_case &c, const attnd_fi_tensors &t,
                                                 const attnd_fi_decode_plan &pl, cudaStream_t s)
{
    using namespace ATTND_FI_NAME(fi_decode_d);
    return c.dtype == 0 ? run<nv_bfloat16>(c, t, pl, s) : run<half>(c, t, pl, s);
}
