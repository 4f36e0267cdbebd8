/* flash_tma_serving.cuh — what v6's SERVING instantiation (flash_tma.cuh) adds to run paged and
 * ragged prefill (docs/serving.md has the layouts), as FlashAttention-3 runs varlen and paged
 * K/V by TMA (its seqlen.h, paged_kv.h, epilogue_fwd.hpp):
 *   - A tile's sequence is b = bh / H. Its lengths and first tokens come from cu_seqlens (a
 *     ragged batch) or are the bounds (a paged batch of equal lengths). The tile works on a
 *     copy of flash_params holding that sequence's seq_q and seq_kv, so the key range, the
 *     masks and the window are the sequence's own, and keys past its end (in the packed
 *     layout, the next sequence's tokens) are masked by index, as a dense row's tail is.
 *   - The tensor maps view the packed [tokens, heads, dim] tensors (K/V: the cache's [pages ·
 *     page_size, Hkv, dim] when paged). A tile's Q box starts at the sequence's first token plus
 *     the tile's first row; key block j at the sequence's first key plus j·BN, or, paged, at
 *     block j % (page_size / BN) of page block_table[b][j / (page_size / BN)]: the page size is
 *     a multiple of BN, so a key block never straddles two pages.
 *   - The grid covers the longest sequence's query tiles (B·H·⌈seq_q / BM⌉); the producer skips
 *     the tiles that start past their sequence's end before it hands a tile over, so the
 *     consumers never see one (flash_tma_claim).
 *   - The epilogue's 16-byte row stores keep their row predicate, against the sequence's
 *     length: a tile that crosses the end must not write the next sequence's rows.
 */
#ifndef FLASH_TMA_SERVING_CUH
#define FLASH_TMA_SERVING_CUH

#include "kernels/flash_tma_traits.cuh"

/* Query head bh's sequence, as a tile of it needs it. */
struct flash_tma_seq {
    int seq_q, seq_kv; /* its lengths */
    int q_row, q_head; /* the Q map's coordinates of its row 0 */
    int b, kvh;        /* the sequence; its K/V head in the K and V maps */
    int64_t o_off;     /* out: the element offset of its row 0 */
    int o_stride;      /* out: elements from one of its rows to the next */
};

/* Query head bh's sequence (b = bh / H, h = bh % H); whatever a caller does not read the
 * compiler drops. */
template <class TR> __device__ __forceinline__ flash_tma_seq flash_tma_seq_of(const flash_tma_work &a, int bh)
{
    const flash_tma_serving &sv = a.sv;
    const int b = bh / sv.heads, h = bh - b * sv.heads;
    flash_tma_seq s;
    s.b = b, s.kvh = h / a.p.group;
    if (sv.cu_q) { /* ragged: q, out and (unless paged) k, v token-major */
        const int q0 = __ldg(sv.cu_q + b);
        s.seq_q = __ldg(sv.cu_q + b + 1) - q0, s.seq_kv = __ldg(sv.cu_kv + b + 1) - __ldg(sv.cu_kv + b);
        s.q_row = q0, s.q_head = h;
        s.o_off = ((int64_t)q0 * sv.heads + h) * TR::DV, s.o_stride = sv.heads * TR::DV;
    } else { /* paged with equal lengths: q and out as a dense batch's */
        s.seq_q = a.p.seq_q, s.seq_kv = a.p.seq_kv;
        s.q_row = 0, s.q_head = bh;
        s.o_off = (int64_t)bh * a.p.seq_q * TR::DV, s.o_stride = TR::DV;
    }
    return s;
}

/* The problem as one tile of sequence s sees it: its own lengths. */
__device__ __forceinline__ flash_params flash_tma_seq_params(const flash_params &p, const flash_tma_seq &s)
{
    flash_params q = p;
    q.seq_q = s.seq_q;
    q.seq_kv = s.seq_kv;
    return q;
}

/* The first row of key block j in the K and V maps: a dense head's (j·BN of its own rows), and a
 * serving sequence's (its packed keys, or its page's slots). */
template <class TR> struct flash_tma_dense_keys {
    __device__ __forceinline__ int operator()(int j) const { return j * TR::BN; }
};
template <class TR> struct flash_tma_seq_keys {
    const flash_tma_serving &sv; /* the kernel's parameter: read where used, not held in registers */
    const int32_t *at; /* paged: the sequence's row of the block table; packed: its cu_seqlens_kv entry,
                          read again per block (L1 keeps it): the producer's 24 registers hold little else */
    __device__ __forceinline__ int operator()(int j) const
    {
        if (!sv.block_table) return __ldg(at) + j * TR::BN;
        const int pj = j / sv.blocks_per_page;
        return (__ldg(at + pj) * sv.blocks_per_page + (j - pj * sv.blocks_per_page)) * TR::BN;
    }
};

/* flash_tma_seq_keys's `at` for sequence b. */
__device__ __forceinline__ const int32_t *flash_tma_seq_keys_at(const flash_tma_serving &sv, int b)
{
    return sv.block_table ? sv.block_table + (int64_t)b * sv.pages_per_seq : sv.cu_kv + b;
}

/* `tile` or the first tile after it in this CTA's draw whose rows start inside their sequence
 * (≥ n_tiles: none left). Each skipped tile costs one draw (an atomic under DYNAMIC) and two
 * loads of cu_seqlens, which L1 keeps. */
template <class TR> __device__ __forceinline__ int flash_tma_claim(const flash_tma_work &a, int tile)
{
    if (!a.sv.cu_q) return tile; /* equal lengths: no tile starts past its sequence */
    for (; tile < a.n_tiles; tile = flash_tma_next_tile<TR>(a, tile)) {
        int bh, m_block;
        flash_tma_tile<true>(a, tile, bh, m_block);
        const int b = bh / a.sv.heads;
        if (m_block * TR::BM < __ldg(a.sv.cu_q + b + 1) - __ldg(a.sv.cu_q + b)) break;
    }
    return tile;
}

#endif
