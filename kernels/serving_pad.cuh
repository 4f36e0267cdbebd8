/* serving_pad.cuh — the padded route of naive and math over a serving batch (docs/serving.md),
 * as a PyTorch user writes it: the dense kernels run on the batch padded to its bounds
 * (attn_padded), and these kernels move the tensors in and out. Included by naive.cu and math.cu
 * only, after elementwise.cuh; everything here is static or a template.
 *
 * The PyTorch code mirrored, one kernel per line that launches (kernels/NOTES-decomposed.md has
 * the counts per variant):
 *
 *   # once per batch, the caller's metadata (not timed): the index tensors
 *   pos = torch.arange(Skv); page = block_table[:, pos // page_size]; slot = pos % page_size
 *   g = torch.arange(Hkv)[:, None]
 *   b_q, s_q = per packed query token, its sequence and its row (likewise b_kv, s_kv)
 *   # every forward
 *   k = key_cache[page[:, None, :], slot, g]            # paged: index, [B, Hkv, Skv, D]
 *   k = k_packed.new_zeros(B, Hkv, Skv, D)              # ragged, not paged: fill ...
 *   k.transpose(1, 2)[b_kv, s_kv] = k_packed            #   ... and index_put_
 *   (v likewise; q, when ragged, as k: new_zeros + index_put_ into [B, H, Sq, D])
 *   out = <the variant's dense code>(q, k, v, mask)     # [B, H, Sq, Dv]
 *   out = out.transpose(1, 2)[b_q, s_q]                 # ragged: index, [total_q, H, Dv]
 *
 * Deviations from PyTorch, and why: PyTorch's index kernels read the int64 index tensors
 * (16 bytes per gathered row of K/V); these compute a row's page and slot from the block table
 * and its sequence from cu_seqlens (a binary search). Same launches, fewer bytes. A slot past a
 * sequence's keys in its last page (or a page of the table's zeros) is gathered as PyTorch
 * gathers it, and masked: a NaN a client left in an unused slot of an uploaded V reaches the
 * output through 0·NaN, as it would in PyTorch.
 */
#ifndef SERVING_PAD_CUH
#define SERVING_PAD_CUH

#include "kernels/elementwise.cuh"

/* The padded tensors of one forward, in the front of the workspace: NULL where the run's own
 * tensor is already dense (q and out unless ragged; k and v unless paged or ragged). */
typedef struct serving_pad {
    attn_problem dense;   /* attn_padded(p): what the variant's dense code runs */
    void *q, *k, *v, *out;
    size_t bytes;         /* the part of the workspace they take; the variant's own follows */
} serving_pad;

/* Plan the padded buffers of p at base (NULL: sizes only). out_bytes: bytes of one element of
 * the padded output (math's verify path keeps it in fp32). */
static inline void serving_pad_plan(const attn_problem *p, void *base, size_t out_bytes, serving_pad *s)
{
    const size_t esz = attn_dtype_bytes(p->dtype);
    const int kv_padded = p->ragged || p->page_size > 0;
    size_t off = 0;
    auto take = [&](bool need, size_t bytes) -> void * {
        void *r = need && base ? (void *)((char *)base + off) : NULL;
        if (need) off += ew_align256(bytes);
        return r;
    };
    s->dense = attn_padded(p);
    s->q = take(p->ragged != 0, (size_t)attn_q_elems(&s->dense) * esz);
    s->k = take(kv_padded, (size_t)attn_k_elems(&s->dense) * esz);
    s->v = take(kv_padded, (size_t)attn_v_elems(&s->dense) * esz);
    s->out = take(p->ragged != 0, (size_t)attn_out_elems(&s->dense) * out_bytes);
    s->bytes = off;
}

/* A row of `dim` elements of `esz` bytes moves as 16-byte words when every row and both
 * pointers allow it, else element by element. */
static inline bool serving_rows_vec(const void *a, const void *b, int64_t dim, size_t esz)
{
    return ew_aligned16(a) && ew_aligned16(b) && ((size_t)dim * esz) % 16 == 0;
}

/* ---------------------------------------------------------------- kernels ---------- */

/* k[b, g, j, :] = cache[block_table[b][j / ps], j % ps, g, :] for j < skv: the one index kernel
 * of key_cache[page[:, None, :], slot, g]. upr: units of U per row. */
template <typename U>
__global__ void __launch_bounds__(EW_THREADS)
    serving_gather_pages_kernel(const U *__restrict__ cache, U *__restrict__ out, const int32_t *__restrict__ table,
                                int64_t width, int64_t ps, int64_t hkv, int64_t skv, int64_t upr, int64_t n)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t c = i % upr, row = i / upr, j = row % skv, bg = row / skv, g = bg % hkv, b = bg / hkv;
        const int64_t page = table[b * width + j / ps];
        out[i] = cache[((page * ps + j % ps) * hkv + g) * upr + c];
    }
}

/* padded[b, h, s, :] = packed[cu[b] + s, h, :] (to_padded), or the other way round: the
 * index_put_ of a pad and the index of an unpad. One thread per unit of the packed tensor
 * [total, heads, upr]; its sequence by binary search over cu. */
template <typename U, bool to_padded>
__global__ void __launch_bounds__(EW_THREADS)
    serving_pack_kernel(const U *__restrict__ in, U *__restrict__ out, const int32_t *__restrict__ cu, int64_t batch,
                        int64_t heads, int64_t bound, int64_t upr, int64_t n)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t c = i % upr, row = i / upr, h = row % heads, t = row / heads;
        const int64_t b = attn_seq_of(cu, batch, t), s = t - cu[b];
        const int64_t padded = ((b * heads + h) * bound + s) * upr + c;
        if (to_padded) out[padded] = in[i];
        else out[i] = in[padded];
    }
}

/* ---------------------------------------------------------------- launchers -------- */

/* One of k or v ([B, Hkv, Skv, dim]) gathered from p's paged cache through the device table. */
static int serving_gather_pages(exec_context *ctx, const attn_problem *p, const void *cache, void *out,
                                const int32_t *d_table, int64_t dim)
{
    const size_t esz = attn_dtype_bytes(p->dtype);
    const int64_t hkv = attn_kv_heads(p), rows = p->batch * hkv * p->seq_kv;
    const int64_t width = p->seqs->pages_per_seq;
    if (rows == 0) return 0;
    if (serving_rows_vec(cache, out, dim, esz)) {
        const int64_t upr = (int64_t)((size_t)dim * esz / 16), n = rows * upr;
        serving_gather_pages_kernel<uint4><<<ew_grid(ctx, n, EW_THREADS, EW_BLOCKS_PER_SM), EW_THREADS, 0,
                                             ctx->stream>>>((const uint4 *)cache, (uint4 *)out, d_table, width,
                                                            p->page_size, hkv, p->seq_kv, upr, n);
    } else if (esz == 4) {
        const int64_t n = rows * dim;
        serving_gather_pages_kernel<uint32_t><<<ew_grid(ctx, n, EW_THREADS, EW_BLOCKS_PER_SM), EW_THREADS, 0,
                                                ctx->stream>>>((const uint32_t *)cache, (uint32_t *)out, d_table,
                                                               width, p->page_size, hkv, p->seq_kv, dim, n);
    } else {
        const int64_t n = rows * dim;
        serving_gather_pages_kernel<uint16_t><<<ew_grid(ctx, n, EW_THREADS, EW_BLOCKS_PER_SM), EW_THREADS, 0,
                                                ctx->stream>>>((const uint16_t *)cache, (uint16_t *)out, d_table,
                                                               width, p->page_size, hkv, p->seq_kv, dim, n);
    }
    LAUNCH_TRY(ctx);
    return 0;
}

/* Packed [total, heads, dim] ⇄ padded [B, heads, bound, dim] through the device cu_seqlens
 * (elements of esz bytes): one launch, none for an empty side (PyTorch launches nothing for
 * an index of no elements). */
template <bool to_padded>
static int serving_pack(exec_context *ctx, const void *in, void *out, const int32_t *d_cu, int64_t batch,
                        int64_t total, int64_t heads, int64_t bound, int64_t dim, size_t esz)
{
    const int64_t rows = total * heads;
    if (rows == 0 || dim == 0) return 0;
    if (serving_rows_vec(in, out, dim, esz)) {
        const int64_t upr = (int64_t)((size_t)dim * esz / 16), n = rows * upr;
        serving_pack_kernel<uint4, to_padded><<<ew_grid(ctx, n, EW_THREADS, EW_BLOCKS_PER_SM), EW_THREADS, 0,
                                                ctx->stream>>>((const uint4 *)in, (uint4 *)out, d_cu, batch, heads,
                                                               bound, upr, n);
    } else if (esz == 4) {
        const int64_t n = rows * dim;
        serving_pack_kernel<uint32_t, to_padded><<<ew_grid(ctx, n, EW_THREADS, EW_BLOCKS_PER_SM), EW_THREADS, 0,
                                                   ctx->stream>>>((const uint32_t *)in, (uint32_t *)out, d_cu, batch,
                                                                  heads, bound, dim, n);
    } else {
        const int64_t n = rows * dim;
        serving_pack_kernel<uint16_t, to_padded><<<ew_grid(ctx, n, EW_THREADS, EW_BLOCKS_PER_SM), EW_THREADS, 0,
                                                   ctx->stream>>>((const uint16_t *)in, (uint16_t *)out, d_cu, batch,
                                                                  heads, bound, dim, n);
    }
    LAUNCH_TRY(ctx);
    return 0;
}

/* new_zeros(B, heads, bound, dim) then padded.transpose(1, 2)[b_idx, s_idx] = packed: a fill
 * and an index_put_, in T. */
template <typename T>
static int serving_pad_ragged(exec_context *ctx, const T *packed, T *padded, const int32_t *d_cu, int64_t batch,
                              int64_t total, int64_t heads, int64_t bound, int64_t dim)
{
    TRY(ew_fill(ctx, padded, batch * heads * bound * dim, 0.f));
    return serving_pack<true>(ctx, packed, padded, d_cu, batch, total, heads, bound, dim, sizeof(T));
}

/* The inputs of p as the dense code reads them, into s (serving_pad_plan's, at the workspace):
 * *dt the tensors to run on. t's arrays are the device copies (cu_seqlens, block table). */
template <typename T>
static int serving_pad_inputs(exec_context *ctx, const attn_problem *p, const attn_tensors *t, const serving_pad *s,
                              attn_tensors *dt)
{
    const int64_t hkv = attn_kv_heads(p), dv = attn_dv(p);
    *dt = *t;
    if (!p->ragged && p->page_size <= 0) return 0;
    ew_nvtx r("pad_inputs");
    if (p->ragged) {
        TRY(serving_pad_ragged<T>(ctx, (const T *)t->q, (T *)s->q, t->cu_seqlens_q, p->batch, p->total_q, p->heads,
                                  p->seq_q, p->head_dim));
        dt->q = s->q;
    }
    if (p->page_size > 0) {
        TRY(serving_gather_pages(ctx, p, t->k, s->k, t->block_table, p->head_dim));
        TRY(serving_gather_pages(ctx, p, t->v, s->v, t->block_table, dv));
    } else {
        TRY(serving_pad_ragged<T>(ctx, (const T *)t->k, (T *)s->k, t->cu_seqlens_kv, p->batch, p->total_kv, hkv,
                                  p->seq_kv, p->head_dim));
        TRY(serving_pad_ragged<T>(ctx, (const T *)t->v, (T *)s->v, t->cu_seqlens_kv, p->batch, p->total_kv, hkv,
                                  p->seq_kv, dv));
    }
    dt->k = s->k, dt->v = s->v;
    dt->out = p->ragged ? s->out : t->out;
    return 0;
}

/* out.transpose(1, 2)[b_q, s_q]: the padded output's real rows into the packed [total_q, H, Dv]
 * (a ragged batch only; elements of esz bytes). */
static int serving_unpad_output(exec_context *ctx, const attn_problem *p, const void *padded, void *packed,
                                const int32_t *d_cu_q, size_t esz)
{
    if (!p->ragged) return 0;
    ew_nvtx r("unpad_output");
    return serving_pack<false>(ctx, padded, packed, d_cu_q, p->batch, p->total_q, p->heads, p->seq_q, attn_dv(p), esz);
}

/* The keys row `i` of the padded batch may see, in sequence b = row / (heads·seq_q) of a ragged
 * batch (its own lengths from the device cu_seqlens; NULL: the bounds): the padding mask folded
 * into the causal mask and the window (HF's 4-D mask: padding AND causal AND window). */
__device__ __forceinline__ void serving_visible(const attn_problem &p, const int32_t *cu_q, const int32_t *cu_kv,
                                                int64_t b, int64_t i, int64_t *lo, int64_t *hi)
{
    const int64_t sq = cu_q ? (int64_t)(cu_q[b + 1] - cu_q[b]) : p.seq_q;
    const int64_t skv = cu_kv ? (int64_t)(cu_kv[b + 1] - cu_kv[b]) : p.seq_kv;
    attn_visible_range_seq(&p, sq, skv, i, lo, hi);
}

#endif
