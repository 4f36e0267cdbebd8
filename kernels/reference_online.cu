/* reference_online.cu — the GPU verify's reference for problems whose scores do not fit
 * (decomposed.h). SDPA's math path in fp32 keeps every score, B·H·Sq·Skv floats three times
 * over (83 GiB for a 16 × 4160 causal prefill at 32 heads); this keeps none.
 *
 * One warp per query row (sequence, head, token), four rows of one head a CTA so that their
 * K/V reads meet in L1. A lane owns head_dim/32 dims of q and head_dim_v/32 of the output; per
 * visible key the warp sums q·k with shuffles and folds the key in with the online softmax
 * (fp32, natural exp). Nothing it shares with the kernels it checks but the layouts: dense, GQA,
 * paged caches through the block table and ragged batches through cu_seqlens, as attn.h
 * defines them, and the masks and windows of attn_visible_range_seq.
 */
#include "kernels/decomposed.h"

#include <math.h>

#include "kernels/dtype_convert.h"

#define REF_ONLINE_WARPS 4
#define REF_ONLINE_MAX_PER_LANE 8 /* head dims up to 256 */

struct ref_online_params {
    attn_problem dense; /* the mask and window; lengths are per sequence */
    const void *q, *k, *v;
    float *out;
    const int32_t *cu_q, *cu_kv, *block_table; /* ragged: cu_q non-NULL; paged: block_table non-NULL */
    int64_t page_size, pages_per_seq;
};

/* Row (in elements of one head, before × dims) of key `key` of K/V head hk, sequence b. */
__device__ static int64_t ref_online_kv_row(const ref_online_params &P, int64_t b, int64_t hk, int64_t kv0, int64_t key)
{
    const attn_problem &p = P.dense;
    const int64_t hkv = attn_kv_heads(&p);
    if (P.block_table) {
        const int64_t page = P.block_table[b * P.pages_per_seq + key / P.page_size];
        return (page * P.page_size + key % P.page_size) * hkv + hk;
    }
    if (P.cu_q) return (kv0 + key) * hkv + hk;
    return (b * hkv + hk) * p.seq_kv + key;
}

__global__ void __launch_bounds__(32 * REF_ONLINE_WARPS) ref_online_kernel(const ref_online_params P)
{
    const attn_problem &p = P.dense;
    const int lane = threadIdx.x & 31;
    const int64_t token = (int64_t)blockIdx.x * REF_ONLINE_WARPS + (threadIdx.x >> 5);
    const int64_t head = blockIdx.y, b = blockIdx.z;
    const int64_t d = p.head_dim, dv = attn_dv(&p), hk = head / (p.heads / attn_kv_heads(&p));
    int64_t sq = p.seq_q, skv = p.seq_kv, q0 = 0, kv0 = 0;
    if (P.cu_q) q0 = P.cu_q[b], sq = P.cu_q[b + 1] - q0, kv0 = P.cu_kv[b], skv = P.cu_kv[b + 1] - kv0;
    if (token >= sq) return;
    const int64_t row = P.cu_q ? (q0 + token) * p.heads + head : (b * p.heads + head) * p.seq_q + token;

    float q[REF_ONLINE_MAX_PER_LANE], acc[REF_ONLINE_MAX_PER_LANE];
    for (int i = 0; i < REF_ONLINE_MAX_PER_LANE; ++i) {
        const int64_t c = lane + 32 * i;
        q[i] = c < d ? dtype_load_f32(P.q, p.dtype, row * d + c) : 0.f;
        acc[i] = 0.f;
    }
    const float scale = (float)p.scale;
    float m = -INFINITY, l = 0.f;
    int64_t lo, hi;
    attn_visible_range_seq(&p, sq, skv, token, &lo, &hi);
    for (int64_t key = lo; key < hi; ++key) {
        const int64_t kr = ref_online_kv_row(P, b, hk, kv0, key);
        float s = 0.f;
        for (int i = 0; i < REF_ONLINE_MAX_PER_LANE; ++i) {
            const int64_t c = lane + 32 * i;
            if (c < d) s += q[i] * dtype_load_f32(P.k, p.dtype, kr * d + c);
        }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        s *= scale;
        const float m_new = fmaxf(m, s), keep = expf(m - m_new), w = expf(s - m_new);
        l = l * keep + w;
        for (int i = 0; i < REF_ONLINE_MAX_PER_LANE; ++i) {
            const int64_t c = lane + 32 * i;
            if (c < dv) acc[i] = acc[i] * keep + w * dtype_load_f32(P.v, p.dtype, kr * dv + c);
        }
        m = m_new;
    }
    for (int i = 0; i < REF_ONLINE_MAX_PER_LANE; ++i) {
        const int64_t c = lane + 32 * i;
        if (c < dv) P.out[row * dv + c] = l > 0.f ? acc[i] / l : 0.f; /* no visible key: zeros, as SDPA's */
    }
}

const char *reference_online_refuses(const attn_problem *p)
{
    if (p->head_dim > 32 * REF_ONLINE_MAX_PER_LANE || attn_dv(p) > 32 * REF_ONLINE_MAX_PER_LANE)
        return "head dims above 256";
    if (p->batch > 65535 || p->heads > 65535) return "batch or heads above 65535";
    return NULL;
}

int reference_online_f32(exec_context *ctx, const attn_problem *p, const attn_tensors *t, float *d_out_f32)
{
    if (const char *missing = attn_serving_arrays_missing(p, t))
        return exec_fail(ctx, __FILE__, __LINE__, "reference_online_f32", missing);
    if (const char *why = reference_online_refuses(p)) return exec_fail(ctx, __FILE__, __LINE__, "reference_online_f32", why);
    ref_online_params P;
    P.dense = attn_padded(p);
    P.q = t->q, P.k = t->k, P.v = t->v, P.out = d_out_f32;
    P.cu_q = p->ragged ? t->cu_seqlens_q : NULL, P.cu_kv = p->ragged ? t->cu_seqlens_kv : NULL;
    P.block_table = p->page_size > 0 ? t->block_table : NULL;
    P.page_size = p->page_size, P.pages_per_seq = p->page_size > 0 ? p->seqs->pages_per_seq : 0;
    const dim3 grid((unsigned)((p->seq_q + REF_ONLINE_WARPS - 1) / REF_ONLINE_WARPS), (unsigned)p->heads,
                    (unsigned)p->batch);
    if (grid.x > 0) {
        ref_online_kernel<<<grid, 32 * REF_ONLINE_WARPS, 0, ctx->stream>>>(P);
        LAUNCH_TRY(ctx);
    }
    return 0;
}
