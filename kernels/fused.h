/* fused.h — our own fused attention kernels: one launch per forward, scores never in
 * global memory, no workspace.
 *
 *   efficient (efficient.cu): the general memory-efficient kernel. fp32 (CUDA cores, FFMA),
 *     fp16 and bf16 (mma.sync m16n8k16, fp32 accumulate); any head_dim ≤ 256 that is a
 *     multiple of 8 (runs the next bucket of 32 with zero-filled columns); any mask.
 *   flash (flash.cu + flash_kernel.cuh): FlashAttention-2 style for fp16 and bf16: 128-row
 *     query tiles (4 warps x 32 rows), K/V in a 2-stage cp.async pipeline with an XOR
 *     swizzle, ldmatrix feeding mma.sync; head_dim 32, 64, 96, 128, 256 exactly.
 *
 * Both need sm_80 or newer, 16-byte aligned tensors (cudaMalloc gives 256) and follow the
 * variants.h contract: enqueue on ctx->stream, no allocation, no synchronisation.
 * *_check returns 0, or -1 with a message naming the limit.
 */
#ifndef FUSED_H
#define FUSED_H

#include <stddef.h>

#include "attn.h"
#include "exec_context.h"

#ifdef __cplusplus
extern "C" {
#endif

int efficient_check(const attn_problem *p, char *why, size_t why_len);
size_t efficient_workspace_bytes(const attn_problem *p);
int efficient_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace);

int flash_check(const attn_problem *p, char *why, size_t why_len);
size_t flash_workspace_bytes(const attn_problem *p);
int flash_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace);

#ifdef __cplusplus
}
#endif
#endif
