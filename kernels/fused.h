/* fused.h — our own fused attention kernels: one launch per forward, scores never in
 * global memory, no workspace.
 *
 *   efficient (efficient.cu): the general memory-efficient kernel. fp32 (CUDA cores, FFMA),
 *     fp16 and bf16 (mma.sync m16n8k16, fp32 accumulate); any head_dim ≤ 256 that is a
 *     multiple of 8 (runs the next bucket of 32 with zero-filled columns); any mask.
 *   flash (flash.cu): fp16 and bf16, head_dim 32, 64, 96, 128, 192, 256 exactly. Its split-KV decode
 *     (flash_splitkv.cu, impl splitkv) is the one kernel here with a workspace and two launches. On sm_90a
 *     TMA + wgmma kernels with warp-specialised consumers (FA3's structure, flash_tma.cuh) or
 *     wgmma alone (flash_wgmma.cuh); elsewhere FA2's: mma.sync fed by ldmatrix from a
 *     cp.async K/V ring (flash_exact.cuh, flash_kernel.cuh). The families are listed below.
 *
 * Both run grouped K/V heads (kv_heads < heads, read in place) and sliding windows in every
 * kernel family, and a value head dim of its own (head_dim_v ≠ head_dim, 8..256) in their
 * bucketed kernels (flash's v3, efficient's v1 and fp32), in the bucket that holds both dims.
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

/* The kernel families of `flash`, numbered as attn_problem.impl numbers them: 1 + the index of
 * their name in variant_info_flash.impls (common/variant_info.c), which the `impl` run parameter
 * takes. 32 always runs GENERIC (v3, the generic mma.sync kernel of flash_kernel.cuh; its API
 * name is "legacy"). TMA (v6: 64, 96, 128, 256, 192 with a value head dim of 128) and WGMMA
 * (v5: 64, 128) need compute capability 9.0 and a binary built with sm_90a; W4/W8 (v4, 4 warps
 * x 32 rows or 8 x 16) exist at 96 and 128 only.
 * SPLITKV is the decode kernel (flash_splitkv.cu: seq_q ≤ 16, head_dim 64/128/256, any sm_80+),
 * chosen by name, and the default for every decode it takes, dense, paged or ragged
 * (flash_splitkv_is). Paged and ragged prefill runs TMA's
 * SERVING instantiation (flash_tma_serving.cuh) on sm_90a
 * (flash_serving_prefill_is), and GENERIC's elsewhere or with impl legacy
 * (flash_serving_generic_is).
 * FLASH_IMPL_DEFAULT: the per-problem default (v6, else v5, on sm_90a; else w4, w8 on
 * sm_86/sm_89). */
enum {
    FLASH_IMPL_DEFAULT = ATTN_IMPL_DEFAULT,
    FLASH_IMPL_TMA = 1,
    FLASH_IMPL_WGMMA = 2,
    FLASH_IMPL_W4 = 3,
    FLASH_IMPL_W8 = 4,
    FLASH_IMPL_GENERIC = 5,
    FLASH_IMPL_SPLITKV = 6
};
/* 1 when family impl can run on a device of compute capability cc in this binary. */
int flash_impl_runnable(int impl, int cc);
/* The family flash_forward runs for p on cc: p->impl, fallbacks applied (a family that cannot
 * run here means the default; tma at head_dim 96 runs w4, w4 at 64 runs legacy, …). */
int flash_impl_used(int cc, const attn_problem *p);

/* The split-KV decode (flash_splitkv.cu), which flash_forward runs for impl SPLITKV: its
 * workspace is common/variant_info.h's flash_splitkv_workspace_bytes. */
int flash_splitkv_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace);

/* Same for `efficient` (variant_info_efficient.impls): EXACT (v2, head dim compiled in) at
 * head_dim 128 in 16 bits, the default; BUCKET (v1, head_dim rounded up to a bucket of 32; its
 * API name is "legacy") everywhere else. */
enum { EFFICIENT_IMPL_DEFAULT = ATTN_IMPL_DEFAULT, EFFICIENT_IMPL_EXACT = 1, EFFICIENT_IMPL_BUCKET = 2 };
int efficient_impl_used(const attn_problem *p);

#ifdef __cplusplus
}
#endif
#endif
