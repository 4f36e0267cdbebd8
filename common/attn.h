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
 *
 * A serving batch (docs/serving.md) changes where tokens are, not what is computed. Ragged
 * (lengths per sequence, `ragged`): q [total_q, H, D], k [total_kv, Hkv, D], v [total_kv, Hkv,
 * Dv], out [total_q, H, Dv], token-major and packed, sequence b's tokens at rows
 * cu_seqlens[b] .. cu_seqlens[b+1]-1 (FlashAttention's varlen layout, cuDNN's THD with ragged
 * offsets). Paged (`page_size`): k [num_pages, page_size, Hkv, D] and v likewise with Dv,
 * key j of sequence b in slot j % page_size of page block_table[b][j / page_size] (vLLM's and
 * FlashInfer's NHD cache); q and out stay as they are without paging. The masks and the
 * window apply per sequence, with that sequence's Sq and Skv.
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

/* The element types attention runs in (the first ATTN_DTYPE_COUNT), then int32: the block
 * tables and lengths a client uploads as resident tensors, which no run computes in. */
typedef enum attn_dtype {
    ATTN_BF16 = 0,
    ATTN_FP16 = 1,
    ATTN_FP32 = 2,
    ATTN_DTYPE_COUNT,
    ATTN_INT32 = ATTN_DTYPE_COUNT
} attn_dtype;

typedef enum attn_mask {
    ATTN_MASK_NONE = 0,
    ATTN_MASK_CAUSAL = 1,              /* top-left aligned, PyTorch SDPA is_causal=True */
    ATTN_MASK_CAUSAL_BOTTOM_RIGHT = 2, /* bottom-right aligned, FlashAttention-2 */
    ATTN_MASK_COUNT
} attn_mask;

/* Which lengths vary per sequence (attn_problem.ragged); the other side's are all seq_q or seq_kv. */
#define ATTN_RAGGED_Q 1u  /* `seqlens_q` */
#define ATTN_RAGGED_KV 2u /* `seqlens_kv` */

/* The host arrays of a ragged or paged problem, as FlashAttention's varlen and paged-KV API
 * (cu_seqlens_q/k, page_table), cuDNN's ragged offsets and page tables and FlashInfer's
 * paged_kv_t take them. Owned by whoever built them (kernels/seq_layout.c); a GPU variant
 * gets device copies in attn_tensors. */
typedef struct attn_seqs {
    /* Ragged: [batch + 1] each, both sides (a side of equal lengths steps by its bound);
     * sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1. Else NULL. */
    const int32_t *cu_seqlens_q, *cu_seqlens_kv;
    const int32_t *block_table;   /* paged: [batch, pages_per_seq] page ids; the entries past a sequence's pages are 0 */
    int64_t pages_per_seq;        /* paged: ⌈seq_kv / page_size⌉, the block table's width */
} attn_seqs;

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
    /* A serving batch: zero in each is the dense problem. seq_q and seq_kv bound every
     * sequence (FlashAttention's max_seqlen_q/k). */
    unsigned ragged;          /* ATTN_RAGGED_* bits: the lengths given per sequence; nonzero: the packed layout */
    int64_t total_q, total_kv; /* ragged: tokens of all sequences (Σ lengths), below 2^31 */
    int64_t page_size;        /* K/V in pages of this many tokens; 0: contiguous */
    int64_t num_pages;        /* paged: pages the cache holds, at least the sequences need */
    const attn_seqs *seqs;    /* ragged or paged: the per-sequence arrays (host); NULL until built */
} attn_problem;

#define ATTN_IMPL_DEFAULT 0 /* attn_problem.impl of a zeroed problem: the variant's default family */

/* Pointers of one forward: device pointers on a GPU, host pointers on the cpu device.
 * Who owns them: the worker that allocated them; variants only read q,k,v and write out. */
typedef struct attn_tensors {
    const void *q, *k, *v;
    void *out;
    /* A ragged or paged problem's attn_seqs arrays where the variant reads them (device
     * copies on a GPU); NULL otherwise. */
    const int32_t *cu_seqlens_q, *cu_seqlens_kv, *block_table;
} attn_tensors;

/* Bytes of one element. */
ATTN_HD size_t attn_dtype_bytes(attn_dtype t) { return t == ATTN_FP32 || t == ATTN_INT32 ? 4u : 2u; }

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

/* The keys [*lo, *hi) query row `row` of a sequence of sq queries and skv keys may attend to
 * under p's mask and window; *lo == *hi for a fully masked row. */
ATTN_HD void attn_visible_range_seq(const attn_problem *p, int64_t sq, int64_t skv, int64_t row, int64_t *lo,
                                    int64_t *hi)
{
    int64_t pos = row + (p->mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT ? skv - sq : 0);
    int64_t h = attn_visible_keys(p->mask, sq, skv, row);
    int64_t l = p->window_keys > 0 ? pos - p->window_keys + 1 : 0;
    if (l < 0) l = 0;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

/* The same for a sequence of the problem's own lengths, seq_q and seq_kv. */
ATTN_HD void attn_visible_range(const attn_problem *p, int64_t row, int64_t *lo, int64_t *hi)
{
    attn_visible_range_seq(p, p->seq_q, p->seq_kv, row, lo, hi);
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

/* Query and key tokens of the whole batch: the real ones, Σ of the lengths, when ragged. */
ATTN_HD int64_t attn_tokens_q(const attn_problem *p) { return p->ragged ? p->total_q : p->batch * p->seq_q; }
ATTN_HD int64_t attn_tokens_kv(const attn_problem *p) { return p->ragged ? p->total_kv : p->batch * p->seq_kv; }
/* Tokens the K/V tensors hold: the whole cache when paged, unused pages included. */
ATTN_HD int64_t attn_kv_slots(const attn_problem *p)
{
    return p->page_size > 0 ? p->num_pages * p->page_size : attn_tokens_kv(p);
}

/* Elements of each tensor as stored (the layouts above). */
ATTN_HD int64_t attn_q_elems(const attn_problem *p) { return attn_tokens_q(p) * p->heads * p->head_dim; }
ATTN_HD int64_t attn_k_elems(const attn_problem *p) { return attn_kv_slots(p) * attn_kv_heads(p) * p->head_dim; }
ATTN_HD int64_t attn_v_elems(const attn_problem *p) { return attn_kv_slots(p) * attn_kv_heads(p) * attn_dv(p); }
ATTN_HD int64_t attn_out_elems(const attn_problem *p) { return attn_tokens_q(p) * p->heads * attn_dv(p); }
/* The score matrix of every head, padded to seq_q × seq_kv in a ragged batch (what a padded
 * route such as PyTorch's materialises). */
ATTN_HD int64_t attn_scores_elems(const attn_problem *p) { return p->batch * p->heads * p->seq_q * p->seq_kv; }
/* Whether p is the dense multi-head problem of equal head dims without a window, the only
 * one some variants run. */
ATTN_HD int attn_is_dense_mha(const attn_problem *p)
{
    return attn_kv_heads(p) == p->heads && attn_dv(p) == p->head_dim && p->window_keys <= 0 && !p->ragged &&
           p->page_size <= 0;
}

/* What a paged or ragged problem lacks of the arrays its kernels read (cu_seqlens for a ragged
 * batch; the block table, and p->seqs for its width, for a paged cache), for a launcher's
 * error; NULL when nothing is missing, as for every dense problem. */
ATTN_HD const char *attn_serving_arrays_missing(const attn_problem *p, const attn_tensors *t)
{
    if (p->ragged && (!t->cu_seqlens_q || !t->cu_seqlens_kv)) return "a ragged batch without its cu_seqlens";
    if (p->page_size > 0 && (!t->block_table || !p->seqs)) return "a paged cache without its block table";
    return NULL;
}

/* The dense twin of a serving batch padded to its bounds: q [B,H,seq_q,D], k and v [B,Hkv,seq_kv,·]
 * contiguous, out [B,H,seq_q,Dv]. What a padded route (PyTorch's gather of pages, pad_sequence)
 * runs its dense kernels on; p itself for a dense problem. */
ATTN_HD attn_problem attn_padded(const attn_problem *p)
{
    attn_problem d = *p;
    d.ragged = 0, d.total_q = 0, d.total_kv = 0, d.page_size = 0, d.num_pages = 0, d.seqs = NULL;
    return d;
}

/* Sequence b's query and key lengths (a ragged problem needs p->seqs). */
ATTN_HD int64_t attn_seqlen_q(const attn_problem *p, int64_t b)
{
    return p->ragged ? (int64_t)p->seqs->cu_seqlens_q[b + 1] - p->seqs->cu_seqlens_q[b] : p->seq_q;
}
ATTN_HD int64_t attn_seqlen_kv(const attn_problem *p, int64_t b)
{
    return p->ragged ? (int64_t)p->seqs->cu_seqlens_kv[b + 1] - p->seqs->cu_seqlens_kv[b] : p->seq_kv;
}

/* The sequence that packed token t (0 <= t < cu[batch]) belongs to: the last b with cu[b] <= t,
 * which skips the empty sequences before it. A binary search, for a kernel's thread. */
ATTN_HD int64_t attn_seq_of(const int32_t *cu, int64_t batch, int64_t t)
{
    int64_t lo = 0, hi = batch;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (cu[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Where rows live, in elements from the tensor's start: query row i of sequence b, head h, in
 * q (dim = head_dim) or out (dim = head_dim_v); key j of sequence b, K/V head g, in k (dim =
 * head_dim) or v (dim = head_dim_v), through the block table when paged. */
ATTN_HD int64_t attn_q_row(const attn_problem *p, int64_t b, int64_t h, int64_t i, int64_t dim)
{
    if (p->ragged) return (((int64_t)p->seqs->cu_seqlens_q[b] + i) * p->heads + h) * dim;
    return ((b * p->heads + h) * p->seq_q + i) * dim;
}
ATTN_HD int64_t attn_kv_row(const attn_problem *p, int64_t b, int64_t g, int64_t j, int64_t dim)
{
    const int64_t hkv = attn_kv_heads(p);
    if (p->page_size > 0) {
        int64_t page = p->seqs->block_table[b * p->seqs->pages_per_seq + j / p->page_size];
        return ((page * p->page_size + j % p->page_size) * hkv + g) * dim;
    }
    if (p->ragged) return (((int64_t)p->seqs->cu_seqlens_kv[b] + j) * hkv + g) * dim;
    return ((b * hkv + g) * p->seq_kv + j) * dim;
}

/* Names as the API spells them ("bf16", "fp16", "fp32"; "none", "causal",
 * "causal_bottom_right"). Parsers return 0 on success, -1 on an unknown name. */
const char *attn_dtype_name(attn_dtype t);
int attn_dtype_parse(const char *name, attn_dtype *out);
const char *attn_mask_name(attn_mask m);
int attn_mask_parse(const char *name, attn_mask *out);

/* FLOPs of one forward: 2·H·(D+Dv) per visible (query, key) pair of every sequence; without
 * a window, causal square attention counts exactly half of Sq·Skv (the FlashAttention
 * convention), sequence by sequence in a ragged batch. Real tokens only: a ragged problem
 * counts its lengths, not its bounds (it needs p->seqs; without them NAN). */
double attn_flops(const attn_problem *p);

/* The fewest bytes one forward must move: q, k, v of the real tokens read once, out written
 * once, and the index arrays a ragged or paged layout reads (cu_seqlens, the block table's
 * entries in use); never a cache's unused pages. Ragged: needs p->seqs (else NAN). */
double attn_min_bytes(const attn_problem *p);

/* Visible (query, key) pairs of one head of one sequence of p's lengths (seq_q, seq_kv), the
 * window included: the exact work of a masked forward. */
double attn_visible_pairs(const attn_problem *p);

/* The same for a sequence of sq queries and skv keys under p's mask and window. */
double attn_visible_pairs_seq(const attn_problem *p, int64_t sq, int64_t skv);

#ifdef __cplusplus
}
#endif
#endif
