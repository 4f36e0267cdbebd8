/* inputs.cu — the seed generator (inputs.h) on the GPU.
 *
 * Versions:
 *   1. one element per thread, 2-byte stores.
 *   2. (this) 16 bytes per thread per step of a grid-stride loop: 8 bf16/fp16 or 4 fp32
 *      elements, one 16-byte store; a scalar tail for the last n % width elements and a
 *      scalar path for a buffer that is not 16-byte aligned. The generator is integer
 *      hashing (a few dozen 64-bit multiplies per element), so the store width matters
 *      less than a full grid; both are cheap next to one forward.
 *
 * Bit-exactness with the host: the value is inputs_value (integer arithmetic plus one
 * correctly rounded float32 multiply, which is what sm_xx does without fast-math flags)
 * and the rounding is dtype_f32_to_bf16 / dtype_f32_to_fp16 from dtype_convert.h, the
 * very functions the host uses — no CUDA conversion intrinsics, so there is nothing to
 * prove equal. tests/gpu compares a GPU-generated tensor's fingerprint with the host's.
 */
#include <stdint.h>

#include "kernels/dtype_convert.h"
#include "kernels/exec_context.h"
#include "kernels/inputs.h"

namespace {

constexpr int INPUTS_BLOCK = 256;

template <attn_dtype T>
__device__ __forceinline__ uint32_t inputs_bits(uint64_t key, uint64_t i)
{
    float x = inputs_value(key, i);
    if (T == ATTN_FP32) return dtype_f32_bits(x);
    if (T == ATTN_BF16) return dtype_f32_to_bf16(x);
    return dtype_f32_to_fp16(x);
}

/* Vector path: buf is 16-byte aligned; each step writes one uint4 (16 bytes). */
template <attn_dtype T>
__global__ void inputs_vec_kernel(void *buf, int64_t n_vec, uint64_t key)
{
    constexpr int per_vec = (T == ATTN_FP32) ? 4 : 8;
    uint4 *out = static_cast<uint4 *>(buf);
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < n_vec; v += stride) {
        uint64_t base = (uint64_t)v * per_vec;
        uint32_t w[4];
        if (per_vec == 4) {
#pragma unroll
            for (int j = 0; j < 4; j++) w[j] = inputs_bits<T>(key, base + j);
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++)
                w[j] = inputs_bits<T>(key, base + 2 * j) | (inputs_bits<T>(key, base + 2 * j + 1) << 16);
        }
        out[v] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* Scalar path: elements [first, n), for the tail or an unaligned buffer. */
template <attn_dtype T>
__global__ void inputs_scalar_kernel(void *buf, int64_t first, int64_t n, uint64_t key)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = first + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint32_t b = inputs_bits<T>(key, (uint64_t)i);
        if (T == ATTN_FP32) static_cast<uint32_t *>(buf)[i] = b;
        else static_cast<uint16_t *>(buf)[i] = (uint16_t)b;
    }
}

/* Enough blocks to fill the device a few times over; the grid-stride loop does the rest. */
unsigned inputs_grid(const exec_context *ctx, int64_t items)
{
    int64_t want = (items + INPUTS_BLOCK - 1) / INPUTS_BLOCK;
    int64_t cap = (ctx->sm_count > 0 ? ctx->sm_count : 132) * 8;
    if (want > cap) want = cap;
    return (unsigned)(want > 0 ? want : 1);
}

template <attn_dtype T>
int inputs_launch(exec_context *ctx, void *d_buf, int64_t n, uint64_t key)
{
    constexpr int per_vec = (T == ATTN_FP32) ? 4 : 8;
    int64_t n_vec = ((uintptr_t)d_buf % 16 == 0) ? n / per_vec : 0;
    int64_t tail = n_vec * per_vec;
    if (n_vec > 0) {
        inputs_vec_kernel<T><<<inputs_grid(ctx, n_vec), INPUTS_BLOCK, 0, ctx->stream>>>(d_buf, n_vec, key);
        LAUNCH_TRY(ctx);
    }
    if (tail < n) {
        inputs_scalar_kernel<T><<<inputs_grid(ctx, n - tail), INPUTS_BLOCK, 0, ctx->stream>>>(d_buf, tail, n, key);
        LAUNCH_TRY(ctx);
    }
    return 0;
}

} // namespace

extern "C" int inputs_generate_gpu(exec_context *ctx, void *d_buf, attn_dtype dtype, int64_t n, uint64_t seed,
                                   int tensor)
{
    uint64_t key = inputs_tensor_key(seed, tensor);
    if (n <= 0) return 0;
    switch (dtype) {
    case ATTN_BF16: return inputs_launch<ATTN_BF16>(ctx, d_buf, n, key);
    case ATTN_FP16: return inputs_launch<ATTN_FP16>(ctx, d_buf, n, key);
    case ATTN_FP32: return inputs_launch<ATTN_FP32>(ctx, d_buf, n, key);
    default: return exec_fail(ctx, __FILE__, __LINE__, "inputs_generate_gpu", "unknown dtype");
    }
}
