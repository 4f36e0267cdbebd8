/* attn.c — names, parsers and the work measures of an attention problem (attn.h).
 *
 * Work measures are closed forms, never loops over rows: seq_q may be 2^31, and /v1/runs
 * validation calls these for every request.
 */
#include "common/attn.h"

#include <string.h>

static const char *const attn_dtype_names[ATTN_DTYPE_COUNT] = {"bf16", "fp16", "fp32"};
static const char *const attn_mask_names[ATTN_MASK_COUNT] = {"none", "causal", "causal_bottom_right"};

const char *attn_dtype_name(attn_dtype t)
{
    return ((unsigned)t < ATTN_DTYPE_COUNT) ? attn_dtype_names[t] : "unknown";
}

int attn_dtype_parse(const char *name, attn_dtype *out)
{
    int i;
    if (!name) return -1;
    for (i = 0; i < ATTN_DTYPE_COUNT; i++) {
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

/* Visible pairs of one head. Row i sees clamp(i + c, 0, Skv) keys with c = 1 (causal,
 * top-left) or Skv - Sq + 1 (bottom-right). With a = i + c over [c, c + Sq - 1]:
 *   Σ clamp(a, 0, S) = Σ_{a ∈ [max(lo,1), min(hi,S-1)]} a  +  S · #{a ∈ [max(lo,S), hi]}. */
double attn_visible_pairs(const attn_problem *p)
{
    int64_t sq = p->seq_q, skv = p->seq_kv, lo, hi, a0, a1, sum = 0;

    if (sq <= 0 || skv <= 0) return 0.0;
    if (p->mask != ATTN_MASK_CAUSAL && p->mask != ATTN_MASK_CAUSAL_BOTTOM_RIGHT) return (double)sq * (double)skv;
    lo = (p->mask == ATTN_MASK_CAUSAL) ? 1 : skv - sq + 1;
    hi = lo + sq - 1;
    a0 = lo > 1 ? lo : 1;               /* the partly visible rows: a keys each */
    a1 = hi < skv - 1 ? hi : skv - 1;
    if (a0 <= a1) sum += attn_sum_range(a0, a1);
    a0 = lo > skv ? lo : skv;           /* the rows that see every key */
    if (a0 <= hi) sum += skv * (hi - a0 + 1);
    return (double)sum;
}

double attn_flops(const attn_problem *p)
{
    double bhd = 4.0 * (double)p->batch * (double)p->heads * (double)p->head_dim;

    if (p->mask == ATTN_MASK_NONE) return bhd * (double)p->seq_q * (double)p->seq_kv;
    /* FlashAttention's convention for square causal attention: exactly half the full
     * count (not the (S+1)/2S the diagonal adds), so our TFLOP/s compare with theirs. */
    if (p->seq_q == p->seq_kv) return 0.5 * bhd * (double)p->seq_q * (double)p->seq_kv;
    return bhd * attn_visible_pairs(p);
}

double attn_min_bytes(const attn_problem *p)
{
    double elems = 2.0 * (double)attn_q_elems(p) + 2.0 * (double)attn_kv_elems(p);
    return elems * (double)attn_dtype_bytes(p->dtype);
}
