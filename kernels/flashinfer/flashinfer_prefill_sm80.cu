/* flashinfer_prefill_sm80.cu — FlashInfer's FA2 prefill for one head dim (ATTND_FI_HEAD_DIM):
 * SinglePrefillWithKVCacheDispatched of attention/prefill.cuh (mma.sync, cp.async), what
 * flashinfer.single_prefill_with_kv_cache runs on GPUs before Hopper; compiled for sm_80
 * (its cubin runs on every 8.x part).
 *
 * As on Hopper, one call per sequence with q, k and v read in place through strides. The FA2
 * kernel writes its output token-major ([Sq,H,D]: its o strides are fixed), so each
 * sequence's output lands in the workspace and one transpose kernel of this file writes
 * attnd's [B,H,Sq,D] out: an attnd cost, not FlashInfer's, and it shows in the kernel table
 * as attnd_fi_nhd_to_bhsd_kernel. No split-KV buffer is passed (FlashInfer's Python passes 32 MiB):
 * a split would need one sized from the device's occupancy.
 */
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/variants.cuh>

#include "kernels/flashinfer/flashinfer_module.h"

/* One namespace per head dim: the templates below bake ATTND_FI_HEAD_DIM in, and the three
 * objects of this file are linked into one module. Named, not anonymous: nvcc's registration
 * stubs cannot name a type of an anonymous namespace in a kernel's template arguments. */
namespace ATTND_FI_NAME(fi_sm80_d) {

using namespace flashinfer;

using Variant = DefaultAttention</*use_custom_mask=*/false, /*use_sliding_window=*/false,
                                 /*use_logits_soft_cap=*/false, /*use_alibi=*/false>;

/* out[b,h,i,:] = staged[b,i,h,:], 16 bytes per thread. */
template <typename DType>
__global__ void attnd_fi_nhd_to_bhsd_kernel(const DType *staged, DType *out, int64_t heads, int64_t seq_q, int64_t rows)
{
    constexpr int64_t vec = 16 / sizeof(DType), per_row = ATTND_FI_HEAD_DIM / vec;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * per_row) return;
    const int64_t row = i / per_row, part = i % per_row; /* row of out: (b, h, s) */
    const int64_t s = row % seq_q, h = (row / seq_q) % heads, b = row / (seq_q * heads);
    const int64_t from = ((b * seq_q + s) * heads + h) * ATTND_FI_HEAD_DIM + part * vec;
    reinterpret_cast<uint4 *>(out)[(row * ATTND_FI_HEAD_DIM + part * vec) / vec] =
        reinterpret_cast<const uint4 *>(staged)[from / vec];
}

template <typename DType, MaskMode MASK>
cudaError_t prefill_sm80(const attnd_fi_case &c, const attnd_fi_tensors &t, cudaStream_t stream)
{
    constexpr uint32_t D = ATTND_FI_HEAD_DIM;
    using Params = SinglePrefillParams<DType, DType, DType>;
    const int64_t q_seq = c.heads * c.seq_q * D, kv_seq = c.kv_heads * c.seq_kv * D;
    DType *staged = (DType *)t.workspace;

    for (int64_t b = 0; b < c.batch; b++) {
        Params p((DType *)t.q + b * q_seq, (DType *)t.k + b * kv_seq, (DType *)t.v + b * kv_seq,
                 /*maybe_custom_mask=*/nullptr, staged + b * q_seq, /*lse=*/nullptr, /*maybe_alibi_slopes=*/nullptr,
                 (uint32_t)c.heads, (uint32_t)c.kv_heads, (uint32_t)c.seq_q, (uint32_t)c.kv_len,
                 /*q_stride_n=*/D, /*q_stride_h=*/(uint32_t)(c.seq_q * D), /*kv_stride_n=*/D,
                 /*kv_stride_h=*/(uint32_t)(c.seq_kv * D), D, /*window_left=*/-1, /*logits_soft_cap=*/0.0f,
                 (float)c.sm_scale, /*rope_scale=*/1.0f, /*rope_theta=*/1e4f);
        cudaError_t e = SinglePrefillWithKVCacheDispatched<D, D, PosEncodingMode::kNone, /*USE_FP16_QK_REDUCTION=*/false,
                                                           MASK, /*USE_TOKEN_HEAD_SF=*/false, Variant, Params>(
            p, /*tmp=*/nullptr, stream);
        if (e != cudaSuccess) return e;
    }
    const int64_t rows = c.batch * c.heads * c.seq_q, threads = rows * (D * sizeof(DType) / 16);
    attnd_fi_nhd_to_bhsd_kernel<DType><<<(unsigned)((threads + 255) / 256), 256, 0, stream>>>(staged, (DType *)t.out,
                                                                                     c.heads, c.seq_q, rows);
    return cudaGetLastError();
}

template <typename DType>
cudaError_t prefill_sm80_masked(const attnd_fi_case &c, const attnd_fi_tensors &t, cudaStream_t stream)
{
    return c.causal ? prefill_sm80<DType, MaskMode::kCausal>(c, t, stream)
                    : prefill_sm80<DType, MaskMode::kNone>(c, t, stream);
}

} // namespace ATTND_FI_NAME(fi_sm80_d)

cudaError_t ATTND_FI_NAME(attnd_fi_prefill_sm80_d)(const attnd_fi_case &c, const attnd_fi_tensors &t, cudaStream_t s)
{
    using namespace ATTND_FI_NAME(fi_sm80_d);
    return c.dtype == 0 ? prefill_sm80_masked<nv_bfloat16>(c, t, s) : prefill_sm80_masked<half>(c, t, s);
}
