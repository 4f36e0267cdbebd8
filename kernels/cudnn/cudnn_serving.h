/* cudnn_serving.h — what the `cudnn` variant needs of a serving batch (a paged K/V cache, a
 * ragged batch: common/attn.h, docs/cudnn.md "Serving batches") besides the graph itself,
 * which cudnn_sdpa.c builds: the rules cuDNN states for them, and the per-sequence arrays
 * the graph reads (lengths, ragged offsets), made on the device every forward.
 */
#ifndef CUDNN_SERVING_H
#define CUDNN_SERVING_H

#include <stddef.h>
#include <stdint.h>

#include "common/attn.h"
#include "kernels/exec_context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether p is a serving batch: its graph has a padding mask with per-sequence lengths. */
static inline int cudnn_serving(const attn_problem *p) { return p->ragged != 0 || p->page_size > 0; }

/* The block table's row length as the kernels read it: an uploaded table may be wider than
 * the ⌈seq_kv / page_size⌉ entries a row needs (p->seqs says); 0 when p is not paged. */
int64_t cudnn_serving_table_width(const attn_problem *p);

/* The rules of a serving batch that depend on the cuDNN release `version` (cudnn_version())
 * and the GPU's compute capability cc (0: unknown, its rules skipped), from cudnn-frontend's
 * support surface: paged caches need 9.5.0, head dims up to 128 before 9.10, 9.8.0 with
 * ragged queries; ragged offsets (THD) need Hopper before 9.18.1. And, when p->seqs is there
 * (or p is paged only, every sequence of the bounds), no sequence may leave a query row
 * without a key under p's mask and window: cuDNN's fused SDPA does not support fully masked
 * rows, as for a dense batch. 0 for a dense problem; else 0, or -1 with why. Pure. */
int cudnn_serving_check(const attn_problem *p, size_t version, int cc, char *why, size_t why_len);

/* Write p's per-sequence arrays (common/variant_info.h cudnn_meta_layout) at `meta` on the
 * device, on ctx->stream: seq_len_q/kv from t->cu_seqlens_q/kv (the bounds seq_q, seq_kv when
 * p is not ragged), the ragged offsets cu_seqlens·(heads·head dim) of Q, K, V and O. One small
 * kernel, no allocation, no synchronisation (graph-capturable). 0, or -1 with ctx->error. */
int cudnn_serving_meta_fill(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *meta);

#ifdef __cplusplus
}
#endif
#endif
