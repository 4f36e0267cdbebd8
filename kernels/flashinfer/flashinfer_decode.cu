/* flashinfer_decode.cu — FlashInfer's batch decode for one head dim (ATTND_FI_HEAD_DIM): the
 * plan (DecodePlan of attention/scheduler.cuh) and the run (BatchDecodeWithPagedKVCacheDispatched
 * of attention/decode.cuh), as csrc/batch_decode.cu calls them for
 * flashinfer.BatchDecodeWithPagedKVCacheWrapper.plan() and .run().
 *
 * The cache is paged in FlashInfer's API, so attnd's contiguous k and v [B,Hkv,Skv,D] are
 * handed over as a paged cache over the same memory (nothing is copied): HND pages of
 * ATTND_FI_DECODE_PAGE keys, page ids counted in rows of the [B·Hkv·Skv, D] view (the page
 * stride is D, the head stride Skv·D), so sequence b's page j is row b·Hkv·Skv + j·page.
 * FlashInfer's plan then splits long sequences into chunks of pages when batch × kv_heads
 * CTAs would leave SMs idle, and a merge kernel combines the chunks.
 *
 * The kernel is FlashInfer's CUDA-core decode: one CTA row of threads per query head of a
 * group, so the group shares every K/V load (group sizes 1, 2, 3, 4, 6, 8, 16). q [B,H,1,D] is
 * its [B,H,D] query (strides H·D, D) and out its [B,H,D] output.
 */
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <algorithm>
#include <vector>

#include "kernels/flashinfer/flashinfer_module.h"

/* One namespace per head dim: the templates below bake ATTND_FI_HEAD_DIM in, and the three
 * objects of this file are linked into one module. Named, not anonymous: nvcc's registration
 * stubs cannot name a type of an anonymous namespace in a kernel's template arguments. */
namespace ATTND_FI_NAME(fi_decode_d) {

using namespace flashinfer;

using Variant = DefaultAttention</*use_custom_mask=*/false, /*use_sliding_window=*/false,
                                 /*use_logits_soft_cap=*/false, /*use_alibi=*/false>;
template <typename DType>
using Params = BatchDecodeParams<DType, DType, DType, int32_t>;

/* The paged view's indptr (pages per sequence, prefix sums) on the host, for the plan. */
std::vector<int32_t> decode_indptr(const attnd_fi_case &c, const attnd_fi_decode_layout &l)
{
    std::vector<int32_t> indptr((size_t)c.batch + 1);
    for (int64_t b = 0; b <= c.batch; b++) indptr[(size_t)b] = (int32_t)(b * l.pages_per_seq);
    return indptr;
}

/* The page table into the workspace: indptr, the page ids, the keys on each last page. */
cudaError_t upload_page_table(const attnd_fi_case &c, const attnd_fi_decode_layout &l, char *ws, cudaStream_t s)
{
    const int64_t page = ATTND_FI_DECODE_PAGE, last = c.kv_len - (l.pages_per_seq - 1) * page;
    std::vector<int32_t> indptr = decode_indptr(c, l), indices, last_page_len((size_t)c.batch, (int32_t)last);
    cudaError_t e;

    indices.reserve((size_t)(c.batch * l.pages_per_seq));
    for (int64_t b = 0; b < c.batch; b++)
        for (int64_t j = 0; j < l.pages_per_seq; j++) indices.push_back((int32_t)(b * c.kv_heads * c.seq_kv + j * page));
    e = cudaMemcpyAsync(ws + l.indptr_off, indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(ws + l.indices_off, indices.data(), indices.size() * 4, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(ws + l.last_page_len_off, last_page_len.data(), last_page_len.size() * 4,
                            cudaMemcpyHostToDevice, s);
    /* The host vectors die here: the copies must have read them. */
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    return e;
}

/* The pinned buffer DecodePlan fills before copying it into the int buffer; kept for the
 * process, grown when a plan needs more. Prepare synchronises after each plan, so it is free
 * again when the next one writes it. */
void *pinned_plan_buffer(size_t bytes, cudaError_t *e)
{
    static void *buf;
    static size_t have;
    *e = cudaSuccess;
    if (bytes <= have) return buf;
    if (buf) cudaFreeHost(buf);
    buf = nullptr;
    have = 0;
    *e = cudaMallocHost(&buf, bytes);
    if (*e != cudaSuccess) return nullptr;
    have = bytes;
    return buf;
}

template <typename DType>
cudaError_t plan(const attnd_fi_case &c, void *workspace, cudaStream_t s, attnd_fi_decode_plan *out)
{
    constexpr uint32_t D = ATTND_FI_HEAD_DIM;
    const attnd_fi_decode_layout l = attnd_fi_decode_layout_of(&c);
    char *ws = (char *)workspace;
    std::vector<int32_t> indptr = decode_indptr(c, l);
    DecodePlanInfo info;
    cudaError_t e = upload_page_table(c, l, ws, s);
    void *pinned;

    if (e != cudaSuccess) return e;
    pinned = pinned_plan_buffer(l.int_bytes, &e);
    if (!pinned) return e;
    DISPATCH_GQA_GROUP_SIZE(c.heads / c.kv_heads, GROUP_SIZE, {
        auto work_estimation = BatchDecodeWithPagedKVCacheWorkEstimationDispatched<
            GROUP_SIZE, D, PosEncodingMode::kNone, Variant, Params<DType>>;
        e = DecodePlan<D, PosEncodingMode::kNone, Variant, Params<DType>>(
            ws + l.float_off, l.float_bytes, ws + l.int_off, pinned, l.int_bytes, info, indptr.data(),
            (uint32_t)c.batch, (uint32_t)c.heads, ATTND_FI_DECODE_PAGE, /*enable_cuda_graph=*/false, s,
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
    /* Strides of the paged view: page (in rows of D), head, key within the page. */
    const int64_t strides[3] = {D, c.seq_kv * D, D};
    DecodePlanInfo info;
    DType *tmp_v = nullptr;
    float *tmp_s = nullptr;

    info.FromVector(std::vector<int64_t>(pl.info, pl.info + 10));
    paged_kv_t<DType, int32_t> kv((uint32_t)c.kv_heads, ATTND_FI_DECODE_PAGE, D, (uint32_t)c.batch, QKVLayout::kHND,
                                  (DType *)t.k, (DType *)t.v, strides, (int32_t *)(ws + l.indices_off),
                                  (int32_t *)(ws + l.indptr_off), (int32_t *)(ws + l.last_page_len_off));
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
