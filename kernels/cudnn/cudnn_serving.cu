/* cudnn_serving.cu — a serving batch's rules and per-sequence arrays for the `cudnn` variant
 * (cudnn_serving.h); the graph that reads them is cudnn_sdpa.c's.
 *
 * The arrays are made on the device from the cu_seqlens the kernels already read, every
 * forward, by one small kernel before cudnnBackendExecute. Not on the host: the lengths may be
 * a resident tensor a client uploaded, and a host copy per forward would synchronise and
 * break graph capture; not once per job: the forward contract takes t as it is, so a plan
 * reused by another batch of the same bounds must not read the previous batch's lengths.
 * PyTorch's cuDNN path for nested tensors likewise derives them from cu_seqlens every call
 * (at::diff and a multiply per array: six small kernels where this is one).
 */
#include "kernels/cudnn/cudnn_serving.h"

#include <stdio.h>

#include <cuda_runtime_api.h>

#include "common/variant_info.h"

int64_t cudnn_serving_table_width(const attn_problem *p)
{
    if (p->page_size <= 0) return 0;
    if (p->seqs && p->seqs->pages_per_seq > 0) return p->seqs->pages_per_seq;
    return (p->seq_kv + p->page_size - 1) / p->page_size;
}

/* The first sequence with a query row that sees no key, or -1: the rows that do are a prefix
 * (bottom-right, more queries than keys) and a suffix (a window past the keys), so the first
 * and the last row of each sequence tell. */
static int64_t cudnn_serving_masked_row_seq(const attn_problem *p, int64_t *sq, int64_t *skv)
{
    int64_t b, lo, hi;
    for (b = 0; b < p->batch; b++) {
        *sq = attn_seqlen_q(p, b), *skv = attn_seqlen_kv(p, b);
        if (*sq == 0) continue;
        attn_visible_range_seq(p, *sq, *skv, 0, &lo, &hi);
        if (lo >= hi) return b;
        attn_visible_range_seq(p, *sq, *skv, *sq - 1, &lo, &hi);
        if (lo >= hi) return b;
    }
    return -1;
}

int cudnn_serving_check(const attn_problem *p, size_t version, int cc, char *why, size_t why_len)
{
    const int paged = p->page_size > 0, ragged = p->ragged != 0;
    char ver[32];
    int64_t b, sq = 0, skv = 0;

    if (!cudnn_serving(p)) return 0;
    snprintf(ver, sizeof ver, "%zu.%zu.%zu", version / 10000, version / 100 % 100, version % 100);
    if (paged && version < 90500) {
        snprintf(why, why_len, "backend cudnn: a paged K/V cache needs cuDNN 9.5.0 or newer (paged cache load); "
                 "loaded %s", ver);
        return -1;
    }
    if (paged && version < 91000 && (p->head_dim > 128 || attn_dv(p) > 128)) {
        snprintf(why, why_len, "backend cudnn: cuDNN %s runs a paged K/V cache only with head_dim and head_dim_v up "
                 "to 128 (9.10 lifts it)", ver);
        return -1;
    }
    /* cudnn-frontend's support surface says 9.7; its own paged prefill sample skips below 9.8. */
    if (paged && ragged && version < 90800) {
        snprintf(why, why_len, "backend cudnn: cuDNN %s does not run a paged K/V cache with ragged queries (9.8.0 "
                 "does)", ver);
        return -1;
    }
    if (ragged && cc > 0 && cc < 90 && version < 91801) {
        snprintf(why, why_len, "backend cudnn: cuDNN %s runs ragged batches (THD with ragged offsets) only on Hopper "
                 "and newer (9.18.1 lifts it); the device has compute capability %d.%d", ver, cc / 10, cc % 10);
        return -1;
    }
    if (ragged && !p->seqs) return 0; /* the lengths are the worker's to check */
    b = cudnn_serving_masked_row_seq(p, &sq, &skv);
    if (b >= 0) {
        snprintf(why, why_len, "backend cudnn: sequence %lld (seq_q %lld, seq_kv %lld) has query rows that see no key "
                 "under mask %s window_keys %lld; cuDNN's fused SDPA does not support fully masked rows",
                 (long long)b, (long long)sq, (long long)skv, attn_mask_name(p->mask),
                 (long long)(p->window_keys > 0 ? p->window_keys : 0));
        return -1;
    }
    return 0;
}

/* Element i of the four offset arrays and the two length arrays (i < batch for those), from
 * the prefix sums when given, else the bounds: one thread an entry. */
__global__ void cudnn_serving_meta_kernel(const int32_t *cu_q, const int32_t *cu_kv, int32_t batch, int32_t seq_q,
                                          int32_t seq_kv, int64_t q_token, int64_t k_token, int64_t v_token,
                                          int64_t o_token, int32_t *len_q, int32_t *len_kv, int32_t *off_q,
                                          int32_t *off_k, int32_t *off_v, int32_t *off_o)
{
    const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    int64_t tq, tkv;
    if (i > batch) return;
    tq = cu_q ? cu_q[i] : (int64_t)i * seq_q;
    tkv = cu_kv ? cu_kv[i] : (int64_t)i * seq_kv;
    /* Below 2^31 each: variant_check_cudnn refuses a ragged batch whose tensors are larger. */
    off_q[i] = (int32_t)(tq * q_token);
    off_k[i] = (int32_t)(tkv * k_token);
    off_v[i] = (int32_t)(tkv * v_token);
    off_o[i] = (int32_t)(tq * o_token);
    if (i == batch) return;
    len_q[i] = cu_q ? cu_q[i + 1] - cu_q[i] : seq_q;
    len_kv[i] = cu_kv ? cu_kv[i + 1] - cu_kv[i] : seq_kv;
}

int cudnn_serving_meta_fill(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *meta)
{
    size_t off[CUDNN_META_ARRAYS];
    char *m = (char *)meta;
    const int threads = 128, blocks = (int)((p->batch + 1 + threads - 1) / threads);
    const int64_t hkv = attn_kv_heads(p), dv = attn_dv(p);
    const int32_t *cu_q = p->ragged ? t->cu_seqlens_q : NULL, *cu_kv = p->ragged ? t->cu_seqlens_kv : NULL;

    if (!cudnn_serving(p)) return 0;
    if (const char *missing = attn_serving_arrays_missing(p, t))
        return exec_fail(ctx, __FILE__, __LINE__, "cudnn_serving_meta_fill", missing);
    (void)cudnn_meta_layout(p, off);
    cudnn_serving_meta_kernel<<<blocks, threads, 0, ctx->stream>>>(
        cu_q, cu_kv, (int32_t)p->batch, (int32_t)p->seq_q, (int32_t)p->seq_kv, p->heads * p->head_dim,
        hkv * p->head_dim, hkv * dv, p->heads * dv, (int32_t *)(m + off[CUDNN_META_SEQ_LEN_Q]),
        (int32_t *)(m + off[CUDNN_META_SEQ_LEN_KV]), (int32_t *)(m + off[CUDNN_META_OFFSET_Q]),
        (int32_t *)(m + off[CUDNN_META_OFFSET_K]), (int32_t *)(m + off[CUDNN_META_OFFSET_V]),
        (int32_t *)(m + off[CUDNN_META_OFFSET_O]));
    LAUNCH_TRY(ctx);
    return 0;
}
