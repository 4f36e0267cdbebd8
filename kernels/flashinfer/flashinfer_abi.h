/* flashinfer_abi.h — the C interface of libattnd_flashinfer.so, attnd's FlashInfer module.
 *
 * The module is built apart (`make flashinfer`) from the headers FlashInfer's
 * flashinfer-python wheel ships; the worker dlopens it (kernels/flashinfer_loader.c) and
 * calls only the functions named here, so attnd builds, tests and runs without it. Plain C:
 * no CUDA or C++ type crosses (a stream is a void *), and every function catches
 * FlashInfer's C++ exceptions and answers -1 with their message.
 *
 * Tensors are attnd's (common/attn.h): q [B,H,Sq,D], k and v [B,Hkv,Skv,D], out [B,H,Sq,D],
 * contiguous, bf16 or fp16, device pointers. The problem is FlashInfer's: every query row
 * of a sequence sees keys 0..kv_len-1 of it, and with `causal` FlashInfer's mask, which is
 * bottom-right aligned (row i sees keys 0..i+kv_len-Sq). kernels/flashinfer_attn.c maps
 * attnd's masks onto that.
 *
 * A serving batch (docs/serving.md) keeps attnd's layouts too: ragged, q [total_q,H,D], k and v
 * [total_kv,Hkv,D], out [total_q,H,D], token-major and packed by cu_seqlens; paged, k and v
 * [num_pages,page_size,Hkv,D] (NHD) and a block table [B, pages_per_seq]. The case carries the
 * host copies of those arrays: the module plans and builds FlashInfer's own index arrays from
 * them in attnd_fi_prepare and uploads them into the workspace.
 */
#ifndef FLASHINFER_ABI_H
#define FLASHINFER_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raised whenever a function or the case below changes: the loader refuses another number. */
#define ATTND_FI_ABI 3

/* The module is compiled with hidden visibility: these functions are all it exports. */
#define ATTND_FI_EXPORT __attribute__((visibility("default")))

/* The module's file name, as the Makefile writes it into $(BUILD)/lib. */
#define ATTND_FI_LIBRARY "libattnd_flashinfer.so"

/* One forward as the module runs it. */
typedef struct attnd_fi_case {
    int dtype;        /* 0 bf16, 1 fp16 (common/attn.h's attn_dtype numbers) */
    int causal;       /* FlashInfer's MaskMode::kCausal: bottom-right, needs seq_q <= kv_len */
    int64_t batch, heads, kv_heads, seq_q, seq_kv, head_dim;
    int64_t kv_len;   /* keys each row may see, from key 0 (at most seq_kv; k/v keep seq_kv rows) */
    double sm_scale;
    int cc;           /* the device's compute capability, major*10 + minor */
    int decode_kernel; /* a decode's kernel: ATTND_FI_DECODE_TENSOR_CORES (0, the default) or _CUDA_CORES */
    /* A serving batch: all zero (NULL) for a dense problem, whose kv_len above says what a
     * causal row sees. seq_q and seq_kv are then the bounds of every sequence. */
    int ragged;                  /* lengths per sequence: q, k, v, out token-major, packed by cu_seqlens */
    int top_left;                /* attnd's causal (top-left): sequence b's rows see its first qo_len(b) keys */
    int64_t page_size, num_pages; /* paged: k, v [num_pages, page_size, kv_heads, D] (NHD) */
    int64_t total_q, total_kv;   /* ragged: Σ lengths */
    const int32_t *cu_seqlens_q, *cu_seqlens_kv; /* host, [batch + 1] each (ragged) */
    const int32_t *block_table;  /* host, [batch, pages_per_seq] (paged) */
    int64_t pages_per_seq;
} attnd_fi_case;

/* attnd_fi_case.decode_kernel: which of FlashInfer's decodes runs a case of one query row a
 * sequence. The tensor-core decode is what vLLM runs for every group (use_tensor_cores=True);
 * the CUDA-core one is SGLang's up to 4 query heads per K/V head, and is compiled for groups 1,
 * 2, 3, 4, 6, 8 and 16 only. It is asked for by name: the module refuses it on a case that
 * takes another kernel (a prefill), where the default is ignored. */
#define ATTND_FI_DECODE_TENSOR_CORES 0
#define ATTND_FI_DECODE_CUDA_CORES 1

/* The FlashInfer entry point a case calls (attnd_fi_route). */
#define ATTND_FI_ROUTE_PREFILL_SM90 1 /* hopper/prefill_sm90.cuh SinglePrefillWithKVCacheDispatched, per sequence */
#define ATTND_FI_ROUTE_PREFILL_SM80 2 /* prefill.cuh SinglePrefillWithKVCacheDispatched (FA2), per sequence */
#define ATTND_FI_ROUTE_DECODE 3       /* decode.cuh BatchDecodeWithPagedKVCacheDispatched after DecodePlan: a
                                       * decode of decode_kernel ATTND_FI_DECODE_CUDA_CORES */
#define ATTND_FI_ROUTE_RAGGED_SM90 4  /* hopper/prefill_sm90.cuh BatchPrefillWithRaggedKVCacheDispatched after PrefillSM90Plan */
#define ATTND_FI_ROUTE_RAGGED_SM80 5  /* prefill.cuh BatchPrefillWithRaggedKVCacheDispatched (FA2) after PrefillPlan */
#define ATTND_FI_ROUTE_DECODE_TC 6    /* prefill.cuh BatchPrefillWithPagedKVCacheDispatched (FA2) after PrefillPlan: a
                                       * decode of decode_kernel ATTND_FI_DECODE_TENSOR_CORES */
#define ATTND_FI_ROUTE_PAGED_SM90 7   /* hopper/prefill_sm90.cuh BatchPrefillWithPagedKVCacheDispatched after
                                       * PrefillSM90Plan: more than one query row a sequence over a paged cache,
                                       * or 2-16 over a contiguous one (vLLM's chunked prefill and speculative
                                       * decode on Hopper) */

/* ATTND_FI_ABI of the module. */
ATTND_FI_EXPORT int attnd_fi_abi(void);

/* FlashInfer's version, from the wheel the module was built from: "0.7.4". */
ATTND_FI_EXPORT const char *attnd_fi_version(void);

/* What the module was built from and for: "flashinfer-python 0.7.4 (git 77039051b0be), sm_90a". */
ATTND_FI_EXPORT const char *attnd_fi_build(void);

/* The route of c (ATTND_FI_ROUTE_*), or 0 with why: a limit of FlashInfer's entry points or of
 * the architectures the module was built for. */
ATTND_FI_EXPORT int attnd_fi_route(const attnd_fi_case *c, char *why, size_t why_len);

/* Device bytes one forward of c needs besides q, k, v and out (FlashInfer's plan buffers,
 * the page table, the ragged indptrs, the FA2 output's staging), at most; 0 on a refused
 * case. A bound from c's sizes alone, never from its per-sequence arrays. */
ATTND_FI_EXPORT size_t attnd_fi_workspace_bytes(const attnd_fi_case *c);

/* Once per job, after the workspace is allocated and before the first forward: FlashInfer's
 * plan (DecodePlan and the page table, or the batch prefill's plan and indptrs, copied into
 * the workspace). Synchronises stream. 0, or -1 with why. */
ATTND_FI_EXPORT int attnd_fi_prepare(const attnd_fi_case *c, void *workspace, size_t workspace_bytes, void *stream,
                                     char *why, size_t why_len);

/* One forward of c on stream: launches only, no allocation or synchronisation, so it can be
 * captured into a CUDA graph. The decode and ragged routes need the attnd_fi_prepare of the
 * same case and workspace. 0, or -1 with why. */
ATTND_FI_EXPORT int attnd_fi_forward(const attnd_fi_case *c, const void *q, const void *k, const void *v, void *out,
                                     void *workspace, void *stream, char *why, size_t why_len);

/* One line for the run record: the entry point of c's route and what its plan chose
 * ("BatchDecodeWithPagedKVCacheDispatched, pages of 16 keys, split into 96 chunks");
 * valid until the next call of the module. */
ATTND_FI_EXPORT const char *attnd_fi_describe(const attnd_fi_case *c);

#ifdef __cplusplus
}
#endif
#endif
