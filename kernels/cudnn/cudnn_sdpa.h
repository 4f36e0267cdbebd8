/* cudnn_sdpa.h — the `cudnn` variant: PyTorch SDPA's cuDNN backend, rebuilt on cuDNN's graph
 * (backend) C API, loaded at run time (cudnn_loader.h).
 *
 * One forward is one cudnnBackendExecute of a cached execution plan of the composite SDPA
 * graph (docs/cudnn.md): MATMUL(Q,Kᵀ) → MUL(scale) → [padding mask] → [causal mask] →
 * [window's left bound] → softmax as MAX, SUB, EXP, ADD-reduce, LOG+ADD (stats, virtual),
 * DIV → MATMUL(P,V). A serving batch (paged K/V: PAGED_CACHE_LOAD before each MATMUL;
 * ragged: offsets on Q, K, V, O) adds the padding mask and a small kernel before the execute
 * that writes its per-sequence lengths and offsets (cudnn_serving.h).
 * cuDNN fuses the graph into one flash-attention kernel. Grouped K/V heads and a value head
 * dim of its own are tensor shapes (Kᵀ [b,hkv,d,skv], V [b,hkv,skv,dv], O [b,h,sq,dv]);
 * cuDNN broadcasts each K/V head over its h/hkv query heads.
 *
 * Its limits: common/variant_info.c (cuDNN 9's fp16/bf16 SDPA support surface, cudnn-frontend
 * sdpa_support_surface.h: head_dim and head_dim_v multiples of 8 up to 256 on sm80+, kv_heads
 * dividing heads, windows with seq_q ≤ seq_kv), plus cudnn_sdpa_version_check's rules for
 * the cuDNN release loaded.
 *
 * Threading: the plan cache and the per-device cuDNN handles are process-wide and guarded by
 * one mutex; a worker runs one job at a time, so the lock is never contended in practice.
 */
#ifndef CUDNN_SDPA_H
#define CUDNN_SDPA_H

#include <stddef.h>
#include <stdint.h>

#include "common/attn.h"
#include "common/variant_info.h"
#include "kernels/exec_context.h"

#ifdef __cplusplus
extern "C" {
#endif


/* Plans cached per cudnn_sdpa_key; the least recently used is evicted and its descriptors
 * destroyed. */
#define CUDNN_SDPA_CACHE_ENTRIES 32

/* cuDNN loadable, the problem within common/variant_info.c's variant_check_cudnn (dtype
 * bf16/fp16, head dims multiples of 8 up to 256, …) and within cudnn_sdpa_version_check for
 * the loaded release. Touches no GPU. */
int cudnn_sdpa_check(const attn_problem *p, char *why, size_t why_len);

/* Whether cuDNN runs p on the current CUDA device: builds (or finds) p's plan, as
 * workspace_bytes does, so it costs nothing the forward would not pay. 0: it runs. 1: cuDNN
 * refuses p (cudnn_sdpa_check's limits, or no engine finalizes a plan for the graph, or a
 * NOT_SUPPORTED status), why = "cuDNN 9.19.0 has no engine for <problem>: <cuDNN's reason>",
 * an answer for 422 `unsupported`. -1: something else failed (no device, out of memory), why
 * says what. */
int cudnn_sdpa_plan_check(const attn_problem *p, char *why, size_t why_len);

/* variants.h `workspace_bytes`. Builds (or finds) the plan for p on the current CUDA device,
 * which is why it must be called on the worker, before allocation, with the device current:
 * the plan's workspace is only known once cuDNN has chosen an engine. Returns the plan's
 * workspace (plus a stats buffer when cuDNN insisted on a real one); when the plan cannot
 * be built, a conservative bound, and cudnn_sdpa_forward reports the real error. */
size_t cudnn_sdpa_workspace_bytes(const attn_problem *p);

/* variants.h `forward`: one cudnnBackendExecute on ctx->stream. The first call for a shape
 * builds the plan (0.2–1 s of runtime compilation) unless workspace_bytes already did;
 * after that the host cost is cudnnSetStream when the stream changed, a variant pack when
 * the pointers or the scale changed, and cudnnBackendExecute. No allocation, no
 * synchronisation: graph-capturable once the plan exists. workspace must hold
 * cudnn_sdpa_workspace_bytes(p) bytes (may be NULL when that is 0). */
int cudnn_sdpa_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace);

/* cuDNN's engine choice for p on the current device, for the run result: e.g.
 * "engine 8 (knobs KERNEL_CFG=7), heuristics mode A choice 1 of 3, workspace 0 B, cuDNN
 * 9.19.0". NULL when no plan for p is cached. The string is a per-thread copy, valid until
 * the next call on the same thread. Call it after cudnn_sdpa_forward. */
const char *cudnn_sdpa_engine_desc(const attn_problem *p);

/* Destroy every cached plan and every cuDNN handle (worker shutdown, tests). Safe to call
 * when nothing was built or cuDNN is absent. */
void cudnn_sdpa_release(void);

/* ---- exposed for tests/unit/kernels/test_cudnn_loader.c ------------------------------------- */

/* What identifies a plan, defaults applied (kv_heads 0 is heads, head_dim_v 0 is head_dim,
 * window_keys ≤ 0 is 0: the same graph, the same plan). Scale is deliberately absent: it is
 * a by-value input given in the variant pack at execute time, so one plan serves every
 * scale. The window's bound is a by-value input too, but keyed: each plan's variant pack
 * holds one value. */
typedef struct cudnn_sdpa_key {
    int device;
    int dtype, mask;
    int64_t batch, heads, seq_q, seq_kv, head_dim;
    int64_t kv_heads, head_dim_v, window_keys;
    /* A serving batch's graph (0 when dense): ragged offsets on Q, K, V, O (1); the paged
     * cache's container [num_pages, ·, page_size, ·] and the block table's row stride. */
    int ragged;
    int64_t page_size, num_pages, table_width;
} cudnn_sdpa_key;

void cudnn_sdpa_key_make(const attn_problem *p, int device, cudnn_sdpa_key *out);
int cudnn_sdpa_key_equal(const cudnn_sdpa_key *a, const cudnn_sdpa_key *b);

/* The rules of cuDNN releases before `version` (cudnn_version(): 91900 for 9.19.0) that
 * cudnn-frontend's support surface states for the graphs built here: known-bad releases,
 * version floors of windows and bottom-right alignment. 0, or -1 with why naming the
 * release and the parameter. Pure: cudnn_sdpa_check applies it to the loaded release. */
int cudnn_sdpa_version_check(const attn_problem *p, size_t version, char *why, size_t why_len);

/* Build every tensor and operation descriptor of p's graph and finalize each, then the
 * operation graph when `with_graph` (that step needs a cuDNN handle, hence a GPU); destroy
 * them all. Proves cuDNN accepts every attribute without running anything. Returns 0 with
 * *n_ops = operations built, or -1 with the failure in err. */
int cudnn_sdpa_graph_selftest(const attn_problem *p, int stats_real, int with_graph, int *n_ops, char *err,
                              size_t err_len);

/* The LRU itself, without cuDNN: tests insert keys and watch what is evicted. */
typedef struct cudnn_sdpa_lru {
    cudnn_sdpa_key keys[CUDNN_SDPA_CACHE_ENTRIES];
    uint64_t last_used[CUDNN_SDPA_CACHE_ENTRIES];
    int used[CUDNN_SDPA_CACHE_ENTRIES];
    uint64_t clock;
} cudnn_sdpa_lru;

/* Index of key in the cache (and marks it used), or -1. */
int cudnn_sdpa_lru_find(cudnn_sdpa_lru *c, const cudnn_sdpa_key *key);
/* The slot a new key goes to: a free one, else the least recently used (*evicted = 1). */
int cudnn_sdpa_lru_slot(const cudnn_sdpa_lru *c, int *evicted);
/* Put key into slot i and mark it used. */
void cudnn_sdpa_lru_put(cudnn_sdpa_lru *c, int i, const cudnn_sdpa_key *key);

#ifdef __cplusplus
}
#endif
#endif
