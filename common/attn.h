/* attn.h — the one description of an attention problem that crosses every boundary.
 *
 * HTTP parsing fills an attn_problem, the variants read it, the store and the JSON answer
 * are written from it. Plain C, usable from .c and .cu files (host and device).
 *
 * Layout everywhere: q [B,H,Sq,D], k [B,Hkv,Skv,D], v [B,Hkv,Skv,Dv], out [B,H,Sq,Dv],
 * row-major, contiguous; query head h reads K/V head h / (H/Hkv) (grouped-query attention,
 * as FlashAttention and PyTorch's repeat_interleave do). Mask alignment follows PyTorch:
 * `causal` is SDPA's is_causal (top-left: query row i sees keys 0..i); `causal_bottom_right`
 * is FlashAttention-2's (row i sees keys 0..i+Skv-Sq), which leaves whole rows masked when
 * Sq > Skv. A row's position is i (top-left, and `none`) or i+Skv-Sq (bottom-right); a
 * sliding window of W keys hides every key more than W-1 before it (FlashAttention's
 * window_size=(W-1, 0) with a causal mask; HF's sliding_window=W; cuDNN's left bound W).
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* What is computed, never where: out = softmax(scale · q·kᵀ + mask) · v. kv_heads, head_dim_v
 * and window_keys are today's models: zero in each is the dense multi-head problem. */
typedef struct attn_problem {
    int64_t batch, heads, seq_q, seq_kv, head_dim;
    attn_dtype dtype;
    attn_mask mask;
    double scale;        /* multiplies q·kᵀ; 1/sqrt(head_dim) unless the client sets it */
    int64_t kv_heads;    /* heads of k and v, dividing heads (1: multi-query); 0: heads */
    int64_t head_dim_v;  /* head dim of v and out; 0: head_dim */
    int64_t window_keys; /* a query sees at most this many keys, ending at its position; 0: no window */
    int impl;            /* the variant's kernel family (`impl`): 1 + its index in variant_info.impls, or ATTN_IMPL_DEFAULT */
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

/* How many keys (a prefix 0..n-1) query row `row` may attend to under a mask without a
 * window; 0 means a fully masked row, whose output every variant that follows SDPA's safe
 * softmax defines as zeros. */
ATTN_HD int64_t attn_visible_keys(attn_mask mask, int64_t seq_q, int64_t seq_kv, int64_t row)
{
    int64_t n;
    if (mask == ATTN_MASK_NONE) return seq_kv;
    n = (mask == ATTN_MASK_CAUSAL) ? row + 1 : row + seq_kv - seq_q + 1;
    if (n < 0) n = 0;
    if (n > seq_kv) n = seq_kv;
    return n;
}

/* The keys [*lo, *hi) query row `row` of p may attend to, the window included; *lo == *hi
 * for a fully masked row. */
ATTN_HD void attn_visible_range(const attn_problem *p, int64_t row, int64_t *lo, int64_t *hi)
{
    int64_t pos = row + (p->mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT ? p->seq_kv - p->seq_q : 0);
    int64_t h = attn_visible_keys(p->mask, p->seq_q, p->seq_kv, row);
    int64_t l = p->window_keys > 0 ? pos - p->window_keys + 1 : 0;
    if (l < 0) l = 0;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

/* The dense multi-head problem: no grouped K/V heads, value head dim or window of its own. */
ATTN_HD attn_problem attn_mha(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, int64_t head_dim,
                              attn_dtype dtype, attn_mask mask, double scale)
{
    attn_problem p;
    memset(&p, 0, sizeof p); /* every field not set here: its default */
    p.batch = batch, p.heads = heads, p.seq_q = seq_q, p.seq_kv = seq_kv, p.head_dim = head_dim;
    p.dtype = dtype, p.mask = mask, p.scale = scale;
    return p;
}

/* K/V heads and the value head dim, defaults applied. */
ATTN_HD int64_t attn_kv_heads(const attn_problem *p) { return p->kv_heads > 0 ? p->kv_heads : p->heads; }
ATTN_HD int64_t attn_dv(const attn_problem *p) { return p->head_dim_v > 0 ? p->head_dim_v : p->head_dim; }
/* The K/V head that query head h (0..heads-1) reads. */
ATTN_HD int64_t attn_kv_head_of(const attn_problem *p, int64_t h) { return h / (p->heads / attn_kv_heads(p)); }

ATTN_HD int64_t attn_q_elems(const attn_problem *p) { return p->batch * p->heads * p->seq_q * p->head_dim; }
ATTN_HD int64_t attn_k_elems(const attn_problem *p) { return p->batch * attn_kv_heads(p) * p->seq_kv * p->head_dim; }
ATTN_HD int64_t attn_v_elems(const attn_problem *p) { return p->batch * attn_kv_heads(p) * p->seq_kv * attn_dv(p); }
ATTN_HD int64_t attn_out_elems(const attn_problem *p) { return p->batch * p->heads * p->seq_q * attn_dv(p); }
ATTN_HD int64_t attn_scores_elems(const attn_problem *p) { return p->batch * p->heads * p->seq_q * p->seq_kv; }
/* Whether p is the dense multi-head problem of equal head dims without a window, the only
 * one some variants run. */
ATTN_HD int attn_is_dense_mha(const attn_problem *p)
{
    return attn_kv_heads(p) == p->heads && attn_dv(p) == p->head_dim && p->window_keys <= 0;
}

/* Names as the API spells them ("bf16", "fp16", "fp32"; "none", "causal",
 * "causal_bottom_right"). Parsers return 0 on success, -1 on an unknown name. */
const char *attn_dtype_name(attn_dtype t);
int attn_dtype_parse(const char *name, attn_dtype *out);
const char *attn_mask_name(attn_mask m);
int attn_mask_parse(const char *name, attn_mask *out);

/* FLOPs of one forward: 2·B·H·(D+Dv) per visible (query, key) pair; without a window,
 * causal square attention counts exactly half of Sq·Skv (the FlashAttention convention). */
double attn_flops(const attn_problem *p);

/* The fewest bytes one forward must move: q, k, v read once, out written once. */
double attn_min_bytes(const attn_problem *p);

/* Visible (query, key) pairs of one head, the window included: the exact work of a masked
 * forward. */
double attn_visible_pairs(const attn_problem *p);

#ifdef __cplusplus
}
#endif
#endif
