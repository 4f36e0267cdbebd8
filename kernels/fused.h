/* fused.h — our own fused attention kernels: one launch per forward, scores never in
 * global memory, no workspace.
 *
 *   efficient (efficient.cu): the general memory-efficient kernel. fp32 (CUDA cores, FFMA),
 *     fp16 and bf16 (mma.sync m16n8k16, fp32 accumulate); any head_dim ≤ 256 that is a
 *     multiple of 8 (runs the next bucket of 32 with zero-filled columns); any mask.
 *   flash (flash.cu + flash_kernel.cuh, flash_exact.cuh for head_dim 96/128):
 *     FlashAttention-2 style for fp16 and bf16: 128-row query tiles (4 warps x 32 rows), K/V
 *     in a 2-stage cp.async pipeline with an XOR swizzle, ldmatrix feeding mma.sync;
 *     head_dim 32, 64, 96, 128, 256 exactly.
 *
 * Both need sm_80 or newer, 16-byte aligned tensors (cudaMalloc gives 256) and follow the
 * variants.h contract: enqueue on ctx->stream, no allocation, no synchronisation.
 * Their problem limits are common/variant_info.c's (variant_check_efficient, _flash).
 */
#ifndef FUSED_H
#define FUSED_H

#include <stddef.h>

#include "common/attn.h"
#include "common/variant_info.h"
#include "kernels/exec_context.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t efficient_workspace_bytes(const attn_problem *p);
int efficient_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace);

size_t flash_workspace_bytes(const attn_problem *p);
int flash_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace);

/* Which `flash` kernel runs head_dim 64, 96 and 128 (benchmarks and tests/gpu/fused_check.cu):
 * FLASH_IMPL_TMA (v6, Hopper TMA + mbarriers + warp specialisation, head_dim 64/128 on sm_90
 * in a binary built with sm_90a; 96 runs w4), FLASH_IMPL_WGMMA (v5, Hopper wgmma, same
 * conditions), FLASH_IMPL_W4 (v4, 4 warps x 32 rows), FLASH_IMPL_W8 (v4, 8 warps x 16 rows),
 * FLASH_IMPL_LEGACY (v3, flash_kernel.cuh; the only one for 32 and 256, and for 64 off the
 * wgmma path). FLASH_IMPL_ENV (the initial state) follows the environment, read once:
 * ATTND_FLASH_IMPL=tma|wgmma|w4|w8|legacy, or ATTND_FLASH_LEGACY=1; unset: the per-problem
 * default of kernels/flash.cu on sm_90a (v6 or v5), else w4, w8 on sm_86/sm_89. tma or wgmma
 * asked for where they cannot run means the default. */
enum {
    FLASH_IMPL_ENV = -1,
    FLASH_IMPL_W8 = 0,
    FLASH_IMPL_LEGACY = 1,
    FLASH_IMPL_W4 = 2,
    FLASH_IMPL_WGMMA = 3,
    FLASH_IMPL_TMA = 4
};
void flash_set_impl(int impl);
/* Same for `efficient` at head_dim 128 in 16 bits: EFFICIENT_IMPL_EXACT (v2, the default) or
 * EFFICIENT_IMPL_LEGACY (v1); environment: ATTND_EFFICIENT_LEGACY=1. */
enum { EFFICIENT_IMPL_ENV = -1, EFFICIENT_IMPL_EXACT = 0, EFFICIENT_IMPL_LEGACY = 1 };
void efficient_set_impl(int impl);

#ifdef __cplusplus
}
#endif
#endif
