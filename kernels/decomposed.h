/* decomposed.h — entry points of the decomposed (multi-kernel) variants and the cpu
 * reference, for the variants table and for verification. */
#ifndef DECOMPOSED_H
#define DECOMPOSED_H

#include "common/attn.h"
#include "kernels/exec_context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* naive.cu — PyTorch eager naive attention, kernel for kernel:
 *   scores = q @ kᵀ (cuBLAS), scores = scores * scale (out of place),
 *   masked = scores.masked_fill(mask, -inf) (out of place: a DtoD Memcpy, then the fill),
 *   p = softmax(masked, -1), out = p @ v (cuBLAS).
 * naive_inplace does masked_fill_ in place: the same without the Memcpy. The scale and the
 * fill launch once per part of PyTorch's 32-bit indexing split (kernels/index32.h). A paged or
 * ragged batch is padded to its bounds first and unpadded after (kernels/serving_pad.cuh): t's
 * cu_seqlens and block table are device arrays then. */
size_t naive_workspace_bytes(const attn_problem *p);
int naive_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace);
int naive_inplace_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace);

/* math.cu — PyTorch SDPA's math backend (_scaled_dot_product_attention_math): upcast q,k,v
 * to fp32; for a causal mask build ones → tril → where(mask, 0, −inf) every call; scale q
 * and k by √scale; fp32 GEMMs on CUDA cores (no TF32); add the bias; safe softmax
 * (softmax, isneginf, all, where: fully masked rows give 0); the weights' downcast; fp32 GEMM
 * with v; downcast. Passes over more than 2^31 bytes launch once per part, as PyTorch's. */
size_t math_workspace_bytes(const attn_problem *p);
int math_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace);
/* Once per job, before the first forward (not timed): a windowed problem's or a ragged batch's
 * bool attn_mask, which SDPA's callers build once and pass on every call (a ragged batch's from
 * p->seqs, the host lengths; may synchronise). 0, or -1 with ctx->error. */
int math_prepare(exec_context *ctx, const attn_problem *p, void *workspace);

/* The math path stopped before its downcast: writes the fp32 output [B,H,Sq,D] to d_out_f32.
 * The GPU reference for `verify` when a problem is too large for the cpu device.
 * Needs math_workspace_bytes(p) of workspace. */
int math_forward_f32(exec_context *ctx, const attn_problem *p, const attn_tensors *t, float *d_out_f32,
                     void *workspace);

/* reference_online.cu — the same fp32 output without the scores (online softmax, one warp a
 * query row, no workspace): the GPU reference where math_forward_f32's workspace does not fit.
 * Every layout (dense, GQA, paged, ragged), mask and window; head dims up to 256. */
int reference_online_f32(exec_context *ctx, const attn_problem *p, const attn_tensors *t, float *d_out_f32);
/* Why reference_online_f32 cannot take p (head dims above 256, batch or heads above 65535), or NULL. */
const char *reference_online_refuses(const attn_problem *p);

/* reference.c — plain C, fp64 accumulation: the oracle.
 * reference_attention_f64 reads q, k, v stored in p->dtype and writes the fp64 output
 * [B,H,Sq,D]; fully masked rows are zeros (SDPA's safe softmax). `threads` ≤ 0: one per
 * core. Returns 0, or -1 when out of memory. */
int reference_attention_f64(const attn_problem *p, const void *q, const void *k, const void *v, double *out,
                            int threads);
/* The `reference` variant: the same, rounded to p->dtype into t->out. */
int reference_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace);
size_t reference_workspace_bytes(const attn_problem *p);
/* Threads reference_forward uses (settings.cpu_threads; ≤ 0, the default: one per core).
 * Set once by the cpu worker before its first job. */
void reference_set_threads(int n);

#ifdef __cplusplus
}
#endif
#endif
