/* attn.c — names, parsers and the work measures of an attention problem (attn.h).
 *
 * Work measures are closed forms, never loops over rows: seq_q may be 2^31, and /v1/runs
 * validation calls these for every request. A ragged batch sums them over its sequences (at
 * most RUN_MAX_SEQS).
 */
#include "common/attn.h"

#include <math.h>
#include <string.h>

static const char *const attn_dtype_names[ATTN_INT32 + 1] = {"bf16", "fp16", "fp32", "int32"};
static const char *const attn_mask_names[ATTN_MASK_COUNT] = {"none", "causal", "causal_bottom_right"};

const char *attn_dtype_name(attn_dtype t)
{
    return ((unsigned)t <= ATTN_INT32) ? attn_dtype_names[t] : "unknown";
}

int attn_dtype_parse(const char *name, attn_dtype *out)
{
    int i;
    if (!name) return -1;
    for (i = 0; i <= ATTN_INT32; i++) {
        if (strcmp(name, attn_dtype_names[i]) == 0) {
            *out = (attn_dtype)i;
            return 0;
        }
    }
    return -1;
}

const char *attn_mask_name(attn_mask m)
{
    return ((unsigned)m < ATTN_MASK_COUNT) ? attn_mask_names[m] : "unknown";
}

int attn_mask_parse(const char *name, attn_mask *out)
{
    int i;
    if (!name) return -1;
    for (i = 0; i < ATTN_MASK_COUNT; i++) {
        if (strcmp(name, attn_mask_names[i]) == 0) {
            *out = (attn_mask)i;
            return 0;
        }
    }
    return -1;
}

/* Σ a for a in [lo, hi] (lo ≤ hi, both ≥ 0 and < 2^32), without overflowing int64:
 * of n = hi - lo + 1 and lo + hi one is even, so halve that one before multiplying. */
static int64_t attn_sum_range(int64_t lo, int64_t hi)
{
    int64_t n = hi - lo + 1, ends = lo + hi;
    return (n % 2 == 0) ? (n / 2) * ends : n * (ends / 2);
}

/* Σ clamp(a, 0, S) for a = a0 … a0 + n - 1 (|a0| and n below 2^33):
 *   Σ_{a ∈ [max(a0,1), min(a1,S-1)]} a  +  S · #{a ∈ [max(a0,S), a1]}. */
static int64_t attn_sum_clamped(int64_t a0, int64_t n, int64_t s)
{
    int64_t a1 = a0 + n - 1, lo = a0 > 1 ? a0 : 1, hi = a1 < s - 1 ? a1 : s - 1, sum = 0;

    if (n <= 0) return 0;
    if (lo <= hi) sum += attn_sum_range(lo, hi);
    lo = a0 > s ? a0 : s;
    if (lo <= a1) sum += s * (a1 - lo + 1);
    return sum;
}

/* Visible pairs of one head of one sequence. Row i sees the keys [lo_i, hi_i) clamped to
 * [0, Skv) (attn_visible_range_seq), both ends of the form i + constant, so the sum is
 * Σ clamp(hi_i, 0, Skv) - Σ clamp(lo_i, 0, Skv), each in closed form. */
double attn_visible_pairs_seq(const attn_problem *p, int64_t sq, int64_t skv)
{
    int64_t pos0, hi;

    if (sq <= 0 || skv <= 0) return 0.0;
    pos0 = p->mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT ? skv - sq : 0; /* row 0's position */
    hi = p->mask == ATTN_MASK_NONE ? sq * skv : attn_sum_clamped(pos0 + 1, sq, skv);
    if (p->window_keys > 0) hi -= attn_sum_clamped(pos0 - p->window_keys + 1, sq, skv);
    return (double)hi;
}

double attn_visible_pairs(const attn_problem *p) { return attn_visible_pairs_seq(p, p->seq_q, p->seq_kv); }

/* The pairs FLOPs count for one head of one sequence: every pair without a mask or window,
 * exactly half of Sq·Skv for causal square attention (FlashAttention's convention, not the
 * (S+1)/2S the diagonal adds, so our TFLOP/s compare with theirs), else the visible ones. */
static double attn_counted_pairs(const attn_problem *p, int64_t sq, int64_t skv)
{
    if (p->window_keys <= 0 && p->mask == ATTN_MASK_NONE) return (double)sq * (double)skv;
    if (p->window_keys <= 0 && sq == skv) return 0.5 * (double)sq * (double)skv;
    return attn_visible_pairs_seq(p, sq, skv);
}

double attn_flops(const attn_problem *p)
{
    double per_pair = 2.0 * (double)p->batch * (double)p->heads * (double)(p->head_dim + attn_dv(p)), pairs = 0.0;
    int64_t b;

    if (!p->ragged) { /* attn_counted_pairs, multiplied in this order since FLOPs were first reported */
        if (p->window_keys <= 0 && p->mask == ATTN_MASK_NONE) return per_pair * (double)p->seq_q * (double)p->seq_kv;
        if (p->window_keys <= 0 && p->seq_q == p->seq_kv) return 0.5 * per_pair * (double)p->seq_q * (double)p->seq_kv;
        return per_pair * attn_visible_pairs(p);
    }
    if (!p->seqs) return NAN; /* the lengths are not known here */
    for (b = 0; b < p->batch; b++) pairs += attn_counted_pairs(p, attn_seqlen_q(p, b), attn_seqlen_kv(p, b));
    return 2.0 * (double)p->heads * (double)(p->head_dim + attn_dv(p)) * pairs;
}

/* Keys (and values) a forward reads: every sequence's, but a sequence without queries reads
 * none (nothing asks for them), however long its cache. */
static double attn_kv_tokens_read(const attn_problem *p)
{
    double tokens = 0.0;
    int64_t b;

    if (!p->ragged) return (double)attn_tokens_kv(p);
    for (b = 0; b < p->batch; b++)
        if (attn_seqlen_q(p, b) > 0) tokens += (double)attn_seqlen_kv(p, b);
    return tokens;
}

/* Block table entries a forward reads: the pages the keys it reads fill (a sequence without
 * queries reads none of its pages). */
static double attn_pages_used(const attn_problem *p)
{
    double pages = 0.0;
    int64_t b;

    if (!p->ragged) return (double)p->batch * (double)((p->seq_kv + p->page_size - 1) / p->page_size);
    for (b = 0; b < p->batch; b++)
        if (attn_seqlen_q(p, b) > 0) pages += (double)((attn_seqlen_kv(p, b) + p->page_size - 1) / p->page_size);
    return pages;
}

double attn_min_bytes(const attn_problem *p)
{
    double elems, bytes, index = 0.0;

    if (!p->ragged && p->page_size <= 0) {
        elems = (double)attn_q_elems(p) + (double)attn_k_elems(p) + (double)attn_v_elems(p) + (double)attn_out_elems(p);
        return elems * (double)attn_dtype_bytes(p->dtype);
    }
    if (p->ragged && !p->seqs) return NAN;
    /* Real tokens only: a paged cache's unused pages and slots are never read, nor the keys of
     * a sequence without queries. */
    elems = (double)attn_tokens_q(p) * (double)p->heads * (double)(p->head_dim + attn_dv(p)) +
            attn_kv_tokens_read(p) * (double)attn_kv_heads(p) * (double)(p->head_dim + attn_dv(p));
    bytes = elems * (double)attn_dtype_bytes(p->dtype);
    if (p->ragged) index += 2.0 * (double)(p->batch + 1); /* cu_seqlens_q and _kv */
    if (p->page_size > 0) index += attn_pages_used(p);
    return bytes + index * (double)sizeof(int32_t);
}
