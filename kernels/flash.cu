/* flash.cu — the `flash` variant: FlashAttention-2 style fused forward for fp16/bf16
 * (kernel body in flash_kernel.cuh, primitives in flash_mma.cuh).
 *
 * Versions:
 *   v1  128-row query tiles, 8 warps x 16 rows, Q fragments in registers, K/V blocks of 64
 *       (128 for D ≤ 64) streamed by cp.async into a 2-stage smem ring (XOR swizzle for
 *       D % 64 == 0, one-chunk row padding otherwise), ldmatrix(.trans for V) -> mma.sync
 *       m16n8k16 fp32, online softmax in log2 space with ex2.approx, causal blocks above the
 *       diagonal skipped, reverse tile order. D = 256: 64-row tiles, 4 warps, 32-key
 *       blocks, Q re-read from smem (128 fp32 accumulators per thread leave no room).
 *       Predicted (bench/NOTES.md, "fused kernels"): ~250-330 TFLOP/s bf16 at B2 H16 S8192
 *       D128 causal on the H200, i.e. within ±25% of PyTorch's FA2 (1720 us); 15-25% behind
 *       FA2 on short sequences (S=1024) where the 4-byte-store epilogue and the
 *       non-overlapped first block weigh more.
 *
 * Configurations are the same on sm_80..sm_90: every one needs ≤ 96 KB of shared memory,
 * which fits sm_86/sm_89's 99 KB opt-in as well as sm_80's 163 KB and sm_90's 227 KB.
 */
#include "kernels/fused.h"

#include <stdio.h>
#include <type_traits>

#include "kernels/flash_kernel.cuh"

/*                          D   BM   BN  warps stages Q in regs  m16 tiles per warp */
typedef flash_traits<32, 128, 128, 4, 2, true, 2> flash_cfg_d32;
typedef flash_traits<64, 128, 64, 4, 2, true, 2> flash_cfg_d64;
typedef flash_traits<96, 128, 64, 4, 2, false, 2> flash_cfg_d96;
typedef flash_traits<128, 128, 64, 4, 2, false, 2> flash_cfg_d128;
typedef flash_traits<256, 64, 32, 4, 2, false, 1> flash_cfg_d256;

#define FLASH_HEAD_DIMS "32, 64, 96, 128, 256"

int flash_check(const attn_problem *p, char *why, size_t why_len)
{
    const int64_t d = p->head_dim;
    if (p->dtype != ATTN_FP16 && p->dtype != ATTN_BF16) {
        snprintf(why, why_len, "flash supports dtypes fp16 and bf16, not %s", attn_dtype_name(p->dtype));
        return -1;
    }
    if (d != 32 && d != 64 && d != 96 && d != 128 && d != 256) {
        snprintf(why, why_len, "flash supports head_dim " FLASH_HEAD_DIMS ", not %lld (use efficient)",
                 (long long)d);
        return -1;
    }
    if (p->seq_q > INT32_MAX || p->seq_kv > INT32_MAX || (p->seq_q + 63) / 64 > 65535) {
        snprintf(why, why_len, "flash supports seq_q up to %d and seq_kv up to %d", 65535 * 64, INT32_MAX);
        return -1;
    }
    if (p->batch * p->heads > INT32_MAX) {
        snprintf(why, why_len, "flash supports batch*heads up to %d", INT32_MAX);
        return -1;
    }
    return 0;
}

size_t flash_workspace_bytes(const attn_problem *p)
{
    (void)p;
    return 0;
}

template <bool BF16> static int flash_dispatch(exec_context *ctx, const attn_problem *p, const attn_tensors *t)
{
    typedef typename std::conditional<BF16, __nv_bfloat16, __half>::type T;
    switch (p->head_dim) {
    case 32: return flash_launch<flash_cfg_d32, T, BF16>(ctx, p, t, "flash_forward");
    case 64: return flash_launch<flash_cfg_d64, T, BF16>(ctx, p, t, "flash_forward");
    case 96: return flash_launch<flash_cfg_d96, T, BF16>(ctx, p, t, "flash_forward");
    case 128: return flash_launch<flash_cfg_d128, T, BF16>(ctx, p, t, "flash_forward");
    case 256: return flash_launch<flash_cfg_d256, T, BF16>(ctx, p, t, "flash_forward");
    default: return exec_fail(ctx, __FILE__, __LINE__, "flash_forward", "unsupported head_dim");
    }
}

int flash_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace)
{
    char why[200];
    (void)workspace;
    if (flash_check(p, why, sizeof why) != 0) return exec_fail(ctx, __FILE__, __LINE__, "flash_check", why);
    if (ctx->cc < 80) return exec_fail(ctx, __FILE__, __LINE__, "flash_forward", "needs compute capability 8.0+");
    return p->dtype == ATTN_BF16 ? flash_dispatch<true>(ctx, p, t) : flash_dispatch<false>(ctx, p, t);
}
