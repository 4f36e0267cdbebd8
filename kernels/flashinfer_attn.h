/* flashinfer_attn.h — the `flashinfer` variant: FlashInfer's kernels, the attention library of
 * vLLM and SGLang, through attnd's module libattnd_flashinfer.so (flashinfer_loader.h).
 *
 * Which FlashInfer entry point an attnd problem calls (docs/flashinfer.md has the table):
 *   seq_q 1 (decode), impl tensor_cores (the default, as vLLM runs every decode): PrefillPlan
 *       once per job (prepare), then FA2's BatchPrefillWithPagedKVCacheDispatched per forward,
 *       one query row a sequence, over the cache as HND pages of 16 keys (nothing copied);
 *   seq_q 1, impl cuda_cores (SGLang's up to 4 query heads per K/V head): DecodePlan once per
 *       job, then BatchDecodeWithPagedKVCacheDispatched over the same pages;
 *   else, compute capability 9.0: the Hopper SinglePrefillWithKVCacheDispatched (FA3 template),
 *       once per sequence;
 *   else (8.x): the FA2 SinglePrefillWithKVCacheDispatched once per sequence, then a transpose
 *       of its token-major output.
 * A serving batch (docs/serving.md) hands the module its host cu_seqlens and block table:
 *   one query row in every sequence: the same decodes (by the impl) over the paged cache
 *       through its block table (NHD), or over a ragged cache as pages of 16 tokens;
 *   any other ragged batch: BatchPrefillWithRaggedKVCacheDispatched (Hopper or FA2) after its
 *       plan, one launch for the batch; a paged prefill is refused.
 * Masks: FlashInfer's causal mask is bottom-right aligned. causal_bottom_right is it; causal
 * (top-left) is it over the first seq_q keys, which are all a top-left row may see when
 * seq_q <= seq_kv; both need seq_q <= seq_kv (common/variant_info.c refuses the rest).
 */
#ifndef FLASHINFER_ATTN_H
#define FLASHINFER_ATTN_H

#include <stddef.h>

#include "common/attn.h"
#include "kernels/exec_context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* attn_problem.impl of flashinfer: 1 + the index in common/variant_info.c's flashinfer_impls. */
#define FLASHINFER_IMPL_TENSOR_CORES 1
#define FLASHINFER_IMPL_CUDA_CORES 2

/* variants.h `workspace_bytes`: FlashInfer's plan buffers and the page table (decode), the
 * FA2 output's staging (8.x prefill), for the current CUDA device; 0 when the module is not
 * loaded or refuses p (library_check says why first). */
size_t flashinfer_workspace_bytes(const attn_problem *p);

/* variants.h `prepare`: the decode plan (DecodePlan, the page table into the workspace); a
 * prefill plans nothing. Synchronises ctx->stream. */
int flashinfer_prepare(exec_context *ctx, const attn_problem *p, void *workspace);

/* variants.h `forward`: FlashInfer's launches on ctx->stream, graph-capturable. */
int flashinfer_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace);

/* variants.h `library_check`: 0 when the module runs p on the current device; 1 with the
 * module's reason (a limit of FlashInfer's entry points, or of the architectures it was built
 * for); -1 when the module is not loaded or there is no device. */
int flashinfer_library_check(const attn_problem *p, char *why, size_t why_len);

/* variants.h `engine_desc`: the entry point p calls and what its plan chose. */
const char *flashinfer_engine_desc(const attn_problem *p);

/* variants.h `impl_runnable`: both decodes run wherever the variant does (8.0 and newer). */
int flashinfer_impl_runnable(int impl, int cc);

/* variants.h `impl_used`: FLASHINFER_IMPL_* of the decode the module routes p to on the
 * current device; ATTN_IMPL_DEFAULT (no impl_used) for the prefill routes or without the module. */
int flashinfer_impl_used(int cc, const attn_problem *p);

#ifdef __cplusplus
}
#endif
#endif
