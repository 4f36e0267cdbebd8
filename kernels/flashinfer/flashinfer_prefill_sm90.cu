/* flashinfer_prefill_sm90.cu — FlashInfer's Hopper prefill for one head dim
 * (ATTND_FI_HEAD_DIM): SinglePrefillWithKVCacheDispatched of attention/hopper/prefill_sm90.cuh,
 * its FA3 template (TMA loads, warp-specialised wgmma consumers), compiled for sm_90a only.
 *
 * Why the single-request entry point, once per sequence: it takes q, k, v and out through
 * strides (what flashinfer.single_prefill_with_kv_cache passes from tensor.stride()), so
 * attnd's [B,H,S,D] tensors are read and written in place. FlashInfer's batch entry points
 * take token-major (NHD) ragged q and out, which [B,H,S,D] is not for B > 1; a PyTorch user
 * would copy them first.
 */
#include <flashinfer/attention/hopper/default_params.cuh>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>
#include <flashinfer/cutlass_utils.cuh>

#include "kernels/flashinfer/flashinfer_module.h"

/* One namespace per head dim: the templates below bake ATTND_FI_HEAD_DIM in, and the three
 * objects of this file are linked into one module. Named, not anonymous: nvcc's registration
 * stubs cannot name a type of an anonymous namespace in a kernel's template arguments. */
namespace ATTND_FI_NAME(fi_sm90_d) {

using namespace flashinfer;

/* One call per sequence b; each reads its [H,Sq,D] block of q with strides (D, Sq·D). */
template <typename DType, MaskMode MASK>
cudaError_t prefill_sm90(const attnd_fi_case &c, const attnd_fi_tensors &t, cudaStream_t stream)
{
    constexpr uint32_t D = ATTND_FI_HEAD_DIM;
    using Params = SinglePrefillParams<DType, DType, DType, int32_t>;
    const int64_t q_seq = c.heads * c.seq_q * D, kv_seq = c.kv_heads * c.seq_kv * D;

    for (int64_t b = 0; b < c.batch; b++) {
        Params p;
        p.q_ptr = (DType *)t.q + b * q_seq;
        p.k_ptr = (DType *)t.k + b * kv_seq;
        p.v_ptr = (DType *)t.v + b * kv_seq;
        p.o_ptr = (DType *)t.out + b * q_seq;
        p.lse_ptr = nullptr;
        p.additional_params.logits_soft_cap = 0.0f;
        p.additional_params.sm_scale = (float)c.sm_scale;
        p.additional_params.scale_q = p.additional_params.scale_k = p.additional_params.scale_v = nullptr;
        p.q_stride_n = p.o_stride_n = D;
        p.q_stride_h = p.o_stride_h = c.seq_q * D;
        p.k_stride_n = p.v_stride_n = D;
        p.k_stride_h = p.v_stride_h = c.seq_kv * D;
        p.qo_len = (int)c.seq_q;
        p.kv_len = (int)c.kv_len;
        p.num_qo_heads = (int)c.heads;
        p.num_kv_heads = (int)c.kv_heads;
        p.group_size = (int)(c.heads / c.kv_heads);
        p.window_left = -1;
        p.causal = MASK == MaskMode::kCausal;
        cudaError_t e = SinglePrefillWithKVCacheDispatched<D, D, MASK, /*LEFT_SLIDING_WINDOW=*/false,
                                                           DefaultAttention</*use_logits_soft_cap=*/false>, Params>(
            p, stream);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

template <typename DType>
cudaError_t prefill_sm90_masked(const attnd_fi_case &c, const attnd_fi_tensors &t, cudaStream_t stream)
{
    return c.causal ? prefill_sm90<DType, MaskMode::kCausal>(c, t, stream)
                    : prefill_sm90<DType, MaskMode::kNone>(c, t, stream);
}

} // namespace ATTND_FI_NAME(fi_sm90_d)

cudaError_t ATTND_FI_NAME(attnd_fi_prefill_sm90_d)(const attnd_fi_case &c, const attnd_fi_tensors &t, cudaStream_t s)
{
    return c.dtype == 0 ? ATTND_FI_NAME(fi_sm90_d)::prefill_sm90_masked<cutlass::bfloat16_t>(c, t, s)
                        : ATTND_FI_NAME(fi_sm90_d)::prefill_sm90_masked<cutlass::half_t>(c, t, s);
}
