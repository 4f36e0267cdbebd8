/* attn.h — the one description of an attention problem that crosses every boundary.
 *
 * HTTP parsing fills an attn_problem, the variants read it, the store and the JSON answer
 * are written from it. Plain C, usable from .c and .cu files (host and device).
 *
 * Layout everywhere: q [B,H,Sq,D], k and v [B,H,Skv,D], out [B,H,Sq,D], row-major,
 * contiguous. Mask alignment follows PyTorch: `causal` is SDPA's is_causal (top-left:
 * query row i sees keys 0..i); `causal_bottom_right` is FlashAttention-2's (row i sees keys
 * 0..i+Skv-Sq), which leaves whole rows masked when Sq > Skv.
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define ATTN_HD __host__ __device__ __forceinline__
#else
#define ATTN_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attn_dtype { ATTN_BF16 = 0, ATTN_FP16 = 1, ATTN_FP32 = 2, ATTN_DTYPE_COUNT } attn_dtype;

typedef enum attn_mask {
    ATTN_MASK_NONE = 0,
    ATTN_MASK_CAUSAL = 1,              /* top-left aligned, PyTorch SDPA is_causal=True */
    ATTN_MASK_CAUSAL_BOTTOM_RIGHT = 2, /* bottom-right aligned, FlashAttention-2 */
    ATTN_MASK_COUNT
} attn_mask;

/* What is computed, never where: out = softmax(scale · q·kᵀ + mask) · v. */
typedef struct attn_problem {
    int64_t batch, heads, seq_q, seq_kv, head_dim;
    attn_dtype dtype;
    attn_mask mask;
    double scale; /* multiplies q·kᵀ; 1/sqrt(head_dim) unless the client sets it */
    int impl;     /* the variant's kernel family (`impl`): 1 + its index in variant_info.impls, or ATTN_IMPL_DEFAULT */
} attn_problem;

#define ATTN_IMPL_DEFAULT 0 /* attn_problem.impl of a zeroed problem: the variant's default family */

/* Pointers of one forward: device pointers on a GPU, host pointers on the cpu device.
 * Who owns them: the worker that allocated them; variants only read q,k,v and write out. */
typedef struct attn_tensors {
    const void *q, *k, *v;
    void *out;
} attn_tensors;

/* Bytes of one element. */
ATTN_HD size_t attn_dtype_bytes(attn_dtype t) { return t == ATTN_FP32 ? 4u : 2u; }

/* How many keys (a prefix 0..n-1) query row `row` may attend to; 0 means a fully masked row,
 * whose output every variant that follows SDPA's safe softmax defines as zeros. */
ATTN_HD int64_t attn_visible_keys(attn_mask mask, int64_t seq_q, int64_t seq_kv, int64_t row)
{
    int64_t n;
    if (mask == ATTN_MASK_NONE) return seq_kv;
    n = (mask == ATTN_MASK_CAUSAL) ? row + 1 : row + seq_kv - seq_q + 1;
    if (n < 0) n = 0;
    if (n > seq_kv) n = seq_kv;
    return n;
}

ATTN_HD int64_t attn_q_elems(const attn_problem *p) { return p->batch * p->heads * p->seq_q * p->head_dim; }
ATTN_HD int64_t attn_kv_elems(const attn_problem *p) { return p->batch * p->heads * p->seq_kv * p->head_dim; }
ATTN_HD int64_t attn_out_elems(const attn_problem *p) { return attn_q_elems(p); }
ATTN_HD int64_t attn_scores_elems(const attn_problem *p) { return p->batch * p->heads * p->seq_q * p->seq_kv; }

/* Names as the API spells them ("bf16", "fp16", "fp32"; "none", "causal",
 * "causal_bottom_right"). Parsers return 0 on success, -1 on an unknown name. */
const char *attn_dtype_name(attn_dtype t);
int attn_dtype_parse(const char *name, attn_dtype *out);
const char *attn_mask_name(attn_mask m);
int attn_mask_parse(const char *name, attn_mask *out);

/* FLOPs of one forward: 4·B·H·Sq·Skv·D, halved for causal square attention (the
 * FlashAttention convention); for non-square masks, 4·B·H·D·(visible pairs). */
double attn_flops(const attn_problem *p);

/* The fewest bytes one forward must move: q, k, v read once, out written once. */
double attn_min_bytes(const attn_problem *p);

/* Visible (query, key) pairs of one head: the exact work of a masked forward. */
double attn_visible_pairs(const attn_problem *p);

#ifdef __cplusplus
}
#endif
#endif
