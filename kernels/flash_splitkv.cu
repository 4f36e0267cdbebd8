/* flash_splitkv.cu — flash's split-KV decode (impl "splitkv", FlashDecoding): a few query
 * rows (seq_q ≤ 16) over a long K/V cache, where the plain grid of one CTA per 128-row query
 * tile leaves most SMs idle and the work is streaming K and V from memory.
 *
 * Design (docs/fused.md, "Split-KV decode"):
 *   - A CTA owns one K/V head of one sequence, a tile of 8 or 16 query rows and a chunk of the
 *     keys (its split). Its rows are the query heads of the K/V head's group times the query
 *     tokens, packed as FlashAttention-3's PackGQA does (row p = token p / G, head p % G of the
 *     group): every K/V element is read from global memory once per split and row tile, and
 *     serves every query head of the group. Its SPLITKV_WARPS warps take the split's 16-key
 *     blocks in turn and merge their partial rows in shared memory at the end: the CTA streams
 *     64 contiguous keys at a time, as cuDNN's decode does, and a batch that fills the GPU
 *     needs no split (one launch). One-warp CTAs ran 1.7-1.8% slower (more, narrower streams).
 *   - The products are transposed, Sᵀ = K·Qᵀ and Oᵀ = Vᵀ·Pᵀ: keys and head dims take the 16-row
 *     side of mma.sync m16n8k16, the query rows its 8-column side (one n8 tile for up to 8 rows,
 *     two sharing each K and V fragment beyond). A decode's few rows (4 at GQA B64) waste less
 *     of 8 columns than of 16 rows: half the mma and half the fp32 accumulators of S = Q·Kᵀ.
 *     Sᵀ's accumulators become Pᵀ's B fragment by two movmatrix transposes.
 *   - K and V skip shared memory: each lane loads its part of a 16-key block with 16-byte loads
 *     straight into the registers mma reads (flash_mma.cuh's fragment layouts). The dot
 *     products do not care about the order of head dims, nor P·V about the order of keys, so
 *     the dims are permuted to make K's A fragments contiguous 16-byte chunks (Q's B fragments,
 *     kept in shared memory, use the same permutation) and V's A fragments are pairs of rows
 *     joined by one byte_perm. The next block's K and V loads are issued right after a
 *     block's Sᵀ: they stay in flight through its softmax and P·V.
 *   - Online softmax per row in log2 space (FA2's); the CTA writes its normalised partial O
 *     (fp32) and log2-sum-exp to the workspace, and flash_splitkv_combine merges the splits
 *     (a warp a row, two round trips to memory; on sm_90+ a dependent launch, scheduled
 *     while the split CTAs finish). With one split the CTA writes O itself: one launch.
 *   - The key range split is the union of what the rows see (a top-left causal decode sees
 *     only its first seq_q keys); the split count fills the GPU's CTA slots in near-whole
 *     waves (flash_splitkv_splits), at most flash_splitkv_max_splits, which sizes the
 *     workspace (common/variant_info.c).
 *   - Serving batches (the SERVING instantiation): a paged K/V cache, each key's row found
 *     through the block table (vLLM's and FlashInfer's NHD pages, any page size; where pages
 *     hold whole 16-key blocks, a block's page id is read a block ahead of its loads), and ragged
 *     batches, token-major and located by cu_seqlens (FlashAttention's varlen), each sequence
 *     with its own lengths, mask and window. Every sequence's keys are split over the same
 *     bound (seq_kv); a split past a short sequence's keys writes an empty partial. Dense
 *     problems run the instantiation without it.
 * Head dims 64, 128 and 256 (at 256, tiles of 8 rows and one V buffer: a block of K, one of V
 * and the 64 accumulators take 64 registers a lane each). Compiled for every architecture of
 * the build (sm_80 and up: mma.sync and movmatrix, 15-29 KB of shared memory a CTA).
 */
#include "kernels/fused.h"

#include <cmath>
#include <stdint.h>
#include <type_traits>

#include "kernels/fast_div.h"
#include "kernels/flash_mma.cuh"

#define SPLITKV_NROWS 8       /* query rows of one n8 tile: mma's n side (keys and dims take its m16 side) */
#define SPLITKV_KEYS 16       /* keys per step: two n8 tiles of Q·Kᵀ, one k16 step of P·V */
#define SPLITKV_COMBINE_WARPS 4
/* Warps an SM keeps. A warp's registers come from one of the SM's four 16K-register quarters:
 * 8 warps allow 255 registers, 12 only 168. With the load pipeline below, 8 warps that never
 * spill kept more bytes in flight than 12 that spill (docs/fused.md). Both counts may be set with
 * -D for an experiment build. */
#ifndef SPLITKV_SM_WARPS
#define SPLITKV_SM_WARPS 8
#endif
/* Warps of a CTA: they take a split's 16-key blocks in turn (warp w blocks w, w + W, …), so the
 * CTA reads W·16 contiguous keys at a time, and merge their partial rows in shared memory
 * before the CTA writes. As cuDNN's decode does: fewer, wider streams than one-warp CTAs
 * (H100: 4 warps 0.983 and 0.982 of 1 warp's time on the two GQA decodes, 2 warps 0.987 and
 * 0.980). */
#ifndef SPLITKV_WARPS
#define SPLITKV_WARPS 4
#endif

struct splitkv_params {
    const void *q, *k, *v;
    void *out;
    float *part_o;   /* [splits, out_rows, D] normalised partial outputs (splits > 1) */
    float *part_lse; /* [splits, out_rows] their log2-sum-exp of the scaled scores; -inf: no key */
    attn_problem prob; /* for attn_visible_range_seq: the mask and window (lengths are per sequence) */
    /* SERVING only (attn.h's layouts): cu_q non-NULL for a ragged batch (q, out, and k, v unless
     * paged, token-major), block_table for a paged cache of page_size tokens a page */
    const int32_t *cu_q, *cu_kv, *block_table;
    int page_size, pages_per_seq;
    int page_shift;    /* log2(page_size) where it is a power of 2 (a shift and a mask for the division), else -1 */
    fast_div page_div; /* page_size's multiply-high divider where it is not */
    int heads, kv_heads, group, seq_q, seq_kv, rows, row_tiles, splits;
    int key_begin, split_keys; /* split s covers [key_begin + s·split_keys, + split_keys) ∩ [0, seq_kv) */
    int64_t out_rows;          /* batch·heads·seq_q */
    float scale_log2;
};

__device__ __forceinline__ uint4 splitkv_load(const uint4 *base, int64_t i, bool ok)
{
    return ok ? base[i] : make_uint4(0, 0, 0, 0);
}

/* The keys [lo, hi) packed row p of the tile sees within [k0, k1), for a sequence of sq queries
 * and skv keys; empty for a padding row (p ≥ rows). */
__device__ __forceinline__ void splitkv_row_range(const splitkv_params &P, int sq, int skv, int rows, int p, int k0,
                                                  int k1, int &lo, int &hi)
{
    lo = k0, hi = k0;
    if (p >= rows) return;
    int64_t l, h;
    attn_visible_range_seq(&P.prob, sq, skv, p / P.group, &l, &h);
    lo = (int)(l > k0 ? l : k0);
    hi = (int)(h < k1 ? h : k1);
    if (hi < lo) hi = lo;
}

/* Sequence b's lengths and where its tokens start (SERVING: a ragged batch's cu_seqlens). */
struct splitkv_seq {
    int seq_q, seq_kv;
    int64_t q0, kv0; /* its first query and key token in the packed layout */
};

template <bool SERVING> __device__ __forceinline__ splitkv_seq splitkv_seq_of(const splitkv_params &P, int64_t b)
{
    splitkv_seq s = {P.seq_q, P.seq_kv, 0, 0};
    if constexpr (SERVING) {
        if (P.cu_q) {
            s.q0 = P.cu_q[b], s.seq_q = (int)(P.cu_q[b + 1] - s.q0);
            s.kv0 = P.cu_kv[b], s.seq_kv = (int)(P.cu_kv[b + 1] - s.kv0);
        }
    }
    return s;
}

/* The page of key `key` (0 ≤ key < 2^31): a shift for a power-of-2 page_size, else a multiply-high
 * and a shift (kernels/fast_div.h) where the hardware's division takes ~20 instructions. */
__device__ __forceinline__ int splitkv_page_of(const splitkv_params &P, int key)
{
    return P.page_shift >= 0 ? key >> P.page_shift : (int)fast_div_device((uint32_t)key, P.page_div);
}

/* The paged cache's token (page · page_size + slot) holding key `key` of sequence b. */
__device__ __forceinline__ int64_t splitkv_page_token(const splitkv_params &P, int64_t b, int key)
{
    const int page = splitkv_page_of(P, key);
    return (int64_t)P.block_table[b * P.pages_per_seq + page] * P.page_size + (key - page * P.page_size);
}

/* The row (in 16-byte units, VPR a row) of key `key` (< the sequence's seq_kv) of K/V head hk
 * of sequence b: SERVING through the block table or the packed tokens. */
template <bool SERVING>
__device__ __forceinline__ int64_t splitkv_kv_row(const splitkv_params &P, int64_t b, int hk, const splitkv_seq &s,
                                                  int key)
{
    if constexpr (SERVING) {
        if (P.page_size > 0) return splitkv_page_token(P, b, key) * P.kv_heads + hk;
        if (P.cu_q) return (s.kv0 + key) * P.kv_heads + hk;
    }
    return (b * P.kv_heads + hk) * P.seq_kv + key;
}

/* The output row (and Q's: the same layout) of query token `token`, head `head` of sequence b. */
template <bool SERVING>
__device__ __forceinline__ int64_t splitkv_out_row(const splitkv_params &P, int64_t b, const splitkv_seq &s, int head,
                                                   int token)
{
    if (SERVING && P.cu_q) return (s.q0 + token) * P.heads + head;
    return (b * P.heads + head) * P.seq_q + token;
}

/* An 8x8 matrix of 16-bit values, one register a lane (row lane/4, columns 2·(lane%4) and +1),
 * transposed across the warp: Sᵀ's accumulators become Pᵀ's B fragment. */
__device__ __forceinline__ uint32_t splitkv_transpose8x8(uint32_t a)
{
    uint32_t d;
    asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
    return d;
}

/* The CTAs an SM holds, as the kernel's registers are bounded: at D64 one tile takes 128
 * registers, 16 warps an SM, where the serving kernel took 135 and fitted 12 (H100, paged D64
 * decodes: 0.887-0.959 of the time with 12). */
template <int D, int NT> constexpr int splitkv_sm_ctas()
{
    return D == 64 && NT == 1 ? 4 : SPLITKV_SM_WARPS / SPLITKV_WARPS;
}

/* NT n8 tiles of query rows a CTA (1 for a decode's ≤ 8 rows, 2 beyond): they share each K fragment
 * and each V fragment, so 16 rows read K/V once. */
template <int D, bool BF16, bool SERVING, int NT>
__global__ void __launch_bounds__(32 * SPLITKV_WARPS, splitkv_sm_ctas<D, NT>()) flash_splitkv_kernel(const splitkv_params P)
{
    constexpr int ROWS = SPLITKV_NROWS * NT;
    typedef typename std::conditional<BF16, __nv_bfloat16, __half>::type T;
    constexpr int KCH = D / 32; /* 16-byte chunks of a K (and Q) row per lane: dims c·32 + 8t .. +7 */
    constexpr int VG = D / 64;  /* 64-dim groups of a V row: a lane loads dims 64·j + 8g .. +7 */
    constexpr int VPR = D / 8;  /* uint4 per row */
    constexpr int STRIDE = SPLITKV_KEYS * SPLITKV_WARPS; /* keys from one of a warp's blocks to its next */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;

    /* row tiles of one split adjacent in launch order: they read the same K/V (from L2) */
    int64_t idx = blockIdx.x;
    const int tile = (int)(idx % P.row_tiles);
    idx /= P.row_tiles;
    const int split = (int)(idx % P.splits);
    idx /= P.splits;
    const int hk = (int)(idx % P.kv_heads);
    const int64_t b = idx / P.kv_heads;
    const splitkv_seq sq = splitkv_seq_of<SERVING>(P, b); /* the sequence's lengths */
    const int rows = SERVING ? P.group * sq.seq_q : P.rows;
    const int k0 = P.key_begin + split * P.split_keys;
    const int k1 = min(sq.seq_kv, k0 + P.split_keys);

    /* Q's B fragments wait in shared memory, lane-major (conflict-free 16-byte reads): lane
     * (g, t) holds chunks c·4 + t of row g of each n8 tile */
    __shared__ uint4 qs[NT][KCH][32];
    #pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int p = tile * ROWS + SPLITKV_NROWS * nt + g;
        const int64_t qr = p < rows ? splitkv_out_row<SERVING>(P, b, sq, hk * P.group + p % P.group, p / P.group) : 0;
        const uint4 *qrow = reinterpret_cast<const uint4 *>(P.q) + qr * VPR;
        if (warp == 0) /* one copy for the CTA's warps: the same rows */
            #pragma unroll
            for (int c = 0; c < KCH; ++c) qs[nt][c][lane] = splitkv_load(qrow, c * 4 + t, p < rows);
    }
    /* this lane's rows of the accumulators (2t and 2t + 1 of each n8 tile) and the keys they see
     * (their output rows are found after the loop: no registers held through it) */
    auto row_of = [&](int nt, int e) { return tile * ROWS + SPLITKV_NROWS * nt + 2 * t + e; };
    int lo[NT][2], hi[NT][2];
    int first = INT32_MAX, last = INT32_MIN;
    #pragma unroll
    for (int nt = 0; nt < NT; ++nt)
        #pragma unroll
        for (int e = 0; e < 2; ++e) {
            splitkv_row_range(P, sq.seq_q, sq.seq_kv, rows, row_of(nt, e), k0, k1, lo[nt][e], hi[nt][e]);
            if (lo[nt][e] < hi[nt][e]) first = min(first, lo[nt][e]), last = max(last, hi[nt][e]);
        }
    __syncthreads();
    /* the keys any row of the tile sees, in whole 16-key blocks */
    for (int off = 16; off > 0; off >>= 1) {
        first = min(first, __shfl_xor_sync(0xffffffffu, first, off));
        last = max(last, __shfl_xor_sync(0xffffffffu, last, off));
    }

    const int64_t kv_head = b * P.kv_heads + hk;
    /* dense: K/V rows from these bases; SERVING: from the tensors' starts, row by row */
    const uint4 *kbase = reinterpret_cast<const uint4 *>(P.k) + (SERVING ? 0 : kv_head * P.seq_kv * VPR);
    const uint4 *vbase = reinterpret_cast<const uint4 *>(P.v) + (SERVING ? 0 : kv_head * P.seq_kv * VPR);
    /* Oᵀ's m16 tiles, 4j + h: dims 64j + 8g + 2h (o[nt][·][0], [1]: rows 2t, 2t + 1 of n8 tile nt)
     * and + 1 ([2], [3]) */
    float o[NT][D / 16][4], m[NT][2], l[NT][2];
    #pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        #pragma unroll
        for (int n = 0; n < D / 16; ++n) o[nt][n][0] = o[nt][n][1] = o[nt][n][2] = o[nt][n][3] = 0.f;
        m[nt][0] = m[nt][1] = -INFINITY, l[nt][0] = l[nt][1] = 0.f;
    }

    /* A pipeline one block deep: as soon as a block's Kᵀ product has read kf, the next block's K
     * and V are loaded (V into the buffer this block's P·V does not read), so each warp keeps a
     * block of loads in flight through its softmax and P·V. K needs one buffer, V two (K two
     * blocks ahead in a second buffer ran no faster, H100). */
    /* At D256 a block of V is 64 registers a lane, as its K and its 64 accumulators are: one V
     * buffer, refilled once P·V has read it (K's load still overlaps the softmax and P·V). */
    constexpr int V_BUFS = D > 128 ? 1 : 2;
    uint4 kf[2][KCH], va[4][VG], vb[4][VG];
    /* A paged cache whose pages hold whole blocks (page_size a multiple of 16): a block's keys
     * share one page, whose id is read from the block table a block before its K and V loads
     * (row_next), so they do not wait for it, and a key's row is the block's plus its place in
     * the block: no division by page_size a key (H100: 0.990-0.997 of the time it took with one).
     * Smaller pages look each key's page up. */
    const bool block_pages = SERVING && P.page_size >= SPLITKV_KEYS && P.page_size % SPLITKV_KEYS == 0;
    auto block_row = [&](int kb) -> int64_t { /* the K/V row of block kb's first key, head hk */
        if (kb < 0 || kb >= sq.seq_kv) return 0; /* a tile that sees no key of its split has kb_first INT32_MIN */
        return splitkv_page_token(P, b, kb) * P.kv_heads + hk;
    };
    int64_t row_next = 0; /* block_pages: block_row of the next block to load */
    /* Other pages (1-15 keys, or not a multiple of 16): each of a lane's six keys of a block may
     * lie in a page of its own, so its cache token is looked up a block ahead too (the cache's
     * tokens are fewer than 2^31; H100, pages of 1: 0.955-0.962 of the time with a lookup at each
     * load); not at D256, whose registers have no room for the six. A power-of-2 page shifts and
     * masks (H100, pages of 1-8: 0.982-0.993 of the time with a division), others multiply-high. */
    const bool key_pages = SERVING && D <= 128 && P.page_size > 0 && !block_pages;
    int tok_k[2], tok_v[4]; /* key_pages: the next block's tokens of load_k's and load_v's keys */
    auto key_token = [&](int key) -> int { /* page · page_size + slot */
        if (key < 0 || key >= sq.seq_kv) return 0;
        const int32_t *table = P.block_table + b * P.pages_per_seq; /* in int: the tokens are fewer than 2^31 */
        if (P.page_shift >= 0) return (table[key >> P.page_shift] << P.page_shift) + (key & (P.page_size - 1));
        const int page = (int)fast_div_device((uint32_t)key, P.page_div);
        return table[page] * P.page_size + (key - page * P.page_size);
    };
    auto key_tokens = [&](int kb) {
        #pragma unroll
        for (int n = 0; n < 2; ++n) tok_k[n] = key_token(kb + 8 * n + g);
        #pragma unroll
        for (int i = 0; i < 4; ++i) tok_v[i] = key_token(kb + 2 * t + (i & 1) + 8 * (i >> 1));
    };
    auto kv_row = [&](int key, bool ok, int token) -> int64_t {
        if (!SERVING) return key;
        if (!ok) return 0;
        if (block_pages) return row_next + (int64_t)(key & (SPLITKV_KEYS - 1)) * P.kv_heads;
        if (key_pages) return (int64_t)token * P.kv_heads + hk;
        return splitkv_kv_row<SERVING>(P, b, hk, sq, key);
    };
    auto load_k = [&](int kb) { /* keys kb + g (A's rows g) and kb + 8 + g (rows g + 8) */
        #pragma unroll
        for (int n = 0; n < 2; ++n) {
            const int key = kb + 8 * n + g;
            const bool ok = key < sq.seq_kv;
            const int64_t row = kv_row(key, ok, tok_k[n]);
            #pragma unroll
            for (int c = 0; c < KCH; ++c) kf[n][c] = splitkv_load(kbase, row * VPR + c * 4 + t, ok);
        }
    };
    auto load_v = [&](int kb, uint4(&vf)[4][VG]) {
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int key = kb + 2 * t + (i & 1) + 8 * (i >> 1); /* rows 2t, 2t+1, 2t+8, 2t+9 */
            const bool ok = key < sq.seq_kv;
            const int64_t row = kv_row(key, ok, tok_v[i]);
            #pragma unroll
            for (int j = 0; j < VG; ++j) vf[i][j] = splitkv_load(vbase, row * VPR + j * 8 + g, ok);
        }
        if (block_pages) row_next = block_row(kb + STRIDE); /* in flight until this warp's next block's loads */
        if (key_pages) key_tokens(kb + STRIDE);
    };
    const int kb_first = first < last ? (first & ~(SPLITKV_KEYS - 1)) + SPLITKV_KEYS * warp : last; /* this warp's first */
    /* One block's step, keys and dims on mma's m16 side and the tile's rows on its n8 side (a
     * decode's few rows waste less of n8 than of m16): Sᵀ = K·Qᵀ from kf, then the next block's
     * K and V on their way, softmax down Sᵀ's columns, Oᵀ += Vᵀ·Pᵀ from vf. */
    auto step = [&](int kb, uint4(&vf)[4][VG], uint4(&v_next)[4][VG]) {
        const bool more = kb + STRIDE < last;
        /* s[nt][0], [1] = (key kb + g; rows 2t, 2t + 1 of n8 tile nt), [2], [3] = (key kb + 8 + g; the same) */
        float s[NT][4] = {};
        #pragma unroll
        for (int c = 0; c < KCH; ++c) {
            const uint32_t a_lo[4] = {kf[0][c].x, kf[1][c].x, kf[0][c].y, kf[1][c].y};
            const uint32_t a_hi[4] = {kf[0][c].z, kf[1][c].z, kf[0][c].w, kf[1][c].w};
            #pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const uint4 q = qs[nt][c][lane];
                flash_mma<BF16>(s[nt], a_lo, q.x, q.y);
                flash_mma<BF16>(s[nt], a_hi, q.z, q.w);
            }
        }
        if (more) {
            load_k(kb + STRIDE); /* kf's last reader was Sᵀ */
            if constexpr (V_BUFS == 2) load_v(kb + STRIDE, v_next);
        }
        /* online softmax, log2 space; keys outside a row's range are -inf. A row's 16 keys lie
         * over the 8 lanes of one t, two a lane. */
        float alpha[NT][2];
        uint32_t pb[NT][2];
        #pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            #pragma unroll
            for (int e = 0; e < 2; ++e) {
                float &x0 = s[nt][e], &x1 = s[nt][2 + e];
                const int key0 = kb + g, key1 = kb + 8 + g;
                x0 = key0 >= lo[nt][e] && key0 < hi[nt][e] ? x0 * P.scale_log2 : -INFINITY;
                x1 = key1 >= lo[nt][e] && key1 < hi[nt][e] ? x1 * P.scale_log2 : -INFINITY;
                float mx = fmaxf(x0, x1);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
                const float m_new = fmaxf(m[nt][e], mx), base = m_new == -INFINITY ? 0.f : m_new;
                alpha[nt][e] = flash_exp2(m[nt][e] - base); /* 0 while the row had no key */
                m[nt][e] = m_new;
                x0 = flash_exp2(x0 - base);
                x1 = flash_exp2(x1 - base);
                l[nt][e] = l[nt][e] * alpha[nt][e] + x0 + x1;
            }
            /* Pᵀ's B fragment: (keys 2t, 2t + 1 | 2t + 8, 2t + 9; row g), Sᵀ's two 8x8 halves transposed */
            pb[nt][0] = splitkv_transpose8x8(flash_pack2<BF16>(s[nt][0], s[nt][1]));
            pb[nt][1] = splitkv_transpose8x8(flash_pack2<BF16>(s[nt][2], s[nt][3]));
        }
        #pragma unroll
        for (int j = 0; j < VG; ++j) {
            const uint32_t w0[4] = {vf[0][j].x, vf[0][j].y, vf[0][j].z, vf[0][j].w};
            const uint32_t w1[4] = {vf[1][j].x, vf[1][j].y, vf[1][j].z, vf[1][j].w};
            const uint32_t w2[4] = {vf[2][j].x, vf[2][j].y, vf[2][j].z, vf[2][j].w};
            const uint32_t w3[4] = {vf[3][j].x, vf[3][j].y, vf[3][j].z, vf[3][j].w};
            #pragma unroll
            for (int h = 0; h < 4; ++h) { /* Vᵀ's A fragment: dims 2h (rows g) and 2h + 1 (g + 8) of the lane's 8 */
                const uint32_t a[4] = {__byte_perm(w0[h], w1[h], 0x5410u), __byte_perm(w0[h], w1[h], 0x7632u),
                                       __byte_perm(w2[h], w3[h], 0x5410u), __byte_perm(w2[h], w3[h], 0x7632u)};
                #pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    float *acc = o[nt][4 * j + h];
                    acc[0] *= alpha[nt][0], acc[1] *= alpha[nt][1], acc[2] *= alpha[nt][0], acc[3] *= alpha[nt][1];
                    flash_mma<BF16>(acc, a, pb[nt][0], pb[nt][1]);
                }
            }
        }
        if constexpr (V_BUFS == 1) {
            if (more) load_v(kb + STRIDE, vf); /* vf's last reader was P·V */
        }
    };
    if (block_pages && kb_first < last) row_next = block_row(kb_first);
    if (key_pages && kb_first < last) key_tokens(kb_first);
    if (kb_first < last) load_k(kb_first), load_v(kb_first, va);
    for (int kb = kb_first; kb < last; kb += 2 * STRIDE) { /* two steps, the V buffers swapped */
        if constexpr (V_BUFS == 1) {
            step(kb, va, va);
            if (kb + STRIDE < last) step(kb + STRIDE, va, va);
        } else {
            step(kb, va, vb);
            if (kb + STRIDE < last) step(kb + STRIDE, vb, va);
        }
    }
    /* a split decode's combine kernel may be scheduled now (it waits for this grid to finish
     * before reading): its launch overlaps the tail of this one (Hopper's dependent launch) */
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif

    /* the row sums over the 8 lanes of a t, then this split's normalised O and log2-sum-exp */
    #pragma unroll
    for (int nt = 0; nt < NT; ++nt)
        #pragma unroll
        for (int e = 0; e < 2; ++e)
            for (int off = 4; off < 32; off <<= 1) l[nt][e] += __shfl_xor_sync(0xffffffffu, l[nt][e], off);
    if constexpr (SPLITKV_WARPS > 1) {
        /* The warps' partial rows merged into warp 0's: O = Σ_w 2^(m_w − M)·O_w, l likewise,
         * M = max_w m_w (O and l unnormalised, each relative to its warp's m). */
        __shared__ float part_o[SPLITKV_WARPS - 1][ROWS][D];
        __shared__ float part_m[SPLITKV_WARPS - 1][ROWS], part_l[SPLITKV_WARPS - 1][ROWS];
        if (warp > 0) {
            #pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                #pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int row = SPLITKV_NROWS * nt + 2 * t + e;
                    float *po = part_o[warp - 1][row];
                    #pragma unroll
                    for (int j = 0; j < VG; ++j)
                        #pragma unroll
                        for (int h = 0; h < 4; ++h) {
                            const int d = 64 * j + 8 * g + 2 * h;
                            po[d] = o[nt][4 * j + h][e], po[d + 1] = o[nt][4 * j + h][2 + e];
                        }
                    if (g == 0) part_m[warp - 1][row] = m[nt][e], part_l[warp - 1][row] = l[nt][e];
                }
        }
        __syncthreads();
        if (warp > 0) return;
        #pragma unroll
        for (int nt = 0; nt < NT; ++nt)
            #pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int row = SPLITKV_NROWS * nt + 2 * t + e;
                float mx = m[nt][e];
                #pragma unroll
                for (int w = 0; w < SPLITKV_WARPS - 1; ++w) mx = fmaxf(mx, part_m[w][row]);
                const float base = mx == -INFINITY ? 0.f : mx, own = flash_exp2(m[nt][e] - base);
                l[nt][e] *= own;
                #pragma unroll
                for (int n = 0; n < D / 16; ++n) o[nt][n][e] *= own, o[nt][n][2 + e] *= own;
                #pragma unroll
                for (int w = 0; w < SPLITKV_WARPS - 1; ++w) {
                    const float f = flash_exp2(part_m[w][row] - base); /* 0 for a warp that saw no key */
                    const float *po = part_o[w][row];
                    l[nt][e] += f * part_l[w][row];
                    #pragma unroll
                    for (int j = 0; j < VG; ++j)
                        #pragma unroll
                        for (int h = 0; h < 4; ++h) {
                            const int d = 64 * j + 8 * g + 2 * h;
                            o[nt][4 * j + h][e] += f * po[d], o[nt][4 * j + h][2 + e] += f * po[d + 1];
                        }
                }
                m[nt][e] = mx;
            }
    }
    /* each lane holds 8 contiguous dims (64j + 8g ..) of each of its rows: one 16-byte store each */
    #pragma unroll
    for (int nt = 0; nt < NT; ++nt)
        #pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int p = row_of(nt, e);
            if (p >= rows) continue;
            const int64_t orow = splitkv_out_row<SERVING>(P, b, sq, hk * P.group + p % P.group, p / P.group);
            const float inv = l[nt][e] > 0.f ? 1.f / l[nt][e] : 0.f; /* no visible key: zeros (SDPA's safe softmax) */
            #pragma unroll
            for (int j = 0; j < VG; ++j) {
                float x[8];
                #pragma unroll
                for (int h = 0; h < 4; ++h) x[2 * h] = o[nt][4 * j + h][e] * inv, x[2 * h + 1] = o[nt][4 * j + h][2 + e] * inv;
                const int d = 64 * j + 8 * g;
                if (P.splits == 1) {
                    const uint4 packed = make_uint4(flash_pack2<BF16>(x[0], x[1]), flash_pack2<BF16>(x[2], x[3]),
                                                    flash_pack2<BF16>(x[4], x[5]), flash_pack2<BF16>(x[6], x[7]));
                    *reinterpret_cast<uint4 *>(reinterpret_cast<T *>(P.out) + orow * D + d) = packed;
                } else {
                    float4 *po = reinterpret_cast<float4 *>(P.part_o + ((int64_t)split * P.out_rows + orow) * D + d);
                    po[0] = make_float4(x[0], x[1], x[2], x[3]);
                    po[1] = make_float4(x[4], x[5], x[6], x[7]);
                }
            }
            if (P.splits > 1 && g == 0)
                P.part_lse[(int64_t)split * P.out_rows + orow] = l[nt][e] > 0.f ? m[nt][e] + log2f(l[nt][e]) : -INFINITY;
        }
}

/* One warp per output row: O = Σ_s 2^(lse_s − L)·O_s / Σ_s 2^(lse_s − L), L = max_s lse_s;
 * a row no split saw a key of is zeros. Two round trips to memory, not one per split: lane s
 * reads split s's log2-sum-exp, the warp agrees on L and the weights by shuffles, then every
 * split's partial row is loaded at once (D/32 dims a lane, one vector load each). */
template <int D, class T> __global__ void __launch_bounds__(32 * SPLITKV_COMBINE_WARPS) flash_splitkv_combine(const splitkv_params P)
{
    constexpr int E = D / 32; /* dims a lane */
    typedef typename std::conditional<E == 2, float2, float4>::type vec;
    constexpr int NV = E == 2 ? 1 : E / 4; /* vector loads a lane */
    constexpr int SLOTS = (FLASH_SPLITKV_MAX_SPLITS + 31) / 32; /* splits a lane holds */
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory"); /* the split kernel done, its partials visible */
#endif
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * SPLITKV_COMBINE_WARPS + (threadIdx.x >> 5);
    if (row >= P.out_rows) return;
    float lse[SLOTS], L = -INFINITY;
#pragma unroll
    for (int c = 0; c < SLOTS; ++c) {
        const int s = 32 * c + lane;
        lse[c] = s < P.splits ? P.part_lse[(int64_t)s * P.out_rows + row] : -INFINITY;
        L = fmaxf(L, lse[c]);
    }
    for (int o = 16; o > 0; o >>= 1) L = fmaxf(L, __shfl_xor_sync(0xffffffffu, L, o));
    float acc[E] = {}, sum = 0.f;
#pragma unroll
    for (int c = 0; c < SLOTS; ++c) {
        if (32 * c >= P.splits) break;
        const float own = L == -INFINITY ? 0.f : exp2f(lse[c] - L); /* 0 past the last split */
        const int n = min(32, P.splits - 32 * c);
#pragma unroll 8
        for (int j = 0; j < n; ++j) {
            const float wt = __shfl_sync(0xffffffffu, own, j);
            const vec *src = reinterpret_cast<const vec *>(P.part_o + ((int64_t)(32 * c + j) * P.out_rows + row) * D) + lane * NV;
            vec x[NV];
#pragma unroll
            for (int v = 0; v < NV; ++v) x[v] = src[v];
            const float *xe = reinterpret_cast<const float *>(x);
            sum += wt;
            /* a split of weight 0 (no key seen) adds exact zeros, whatever its partial holds */
            for (int e = 0; e < E; ++e) acc[e] = fmaf(wt, wt != 0.f ? xe[e] : 0.f, acc[e]);
        }
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    T *out = reinterpret_cast<T *>(P.out) + row * D + lane * E;
    for (int e = 0; e < E; ++e) out[e] = (T)(acc[e] * inv);
}

/* The smallest split count whose CTAs fill the device's slots in near-whole waves (the last
 * wave ≥ 90% full), else the fullest; FlashAttention-3's num_splits_heuristic, with 0.9. */
static int flash_splitkv_splits(int64_t ctas, int64_t slots, int64_t max_splits)
{
    int best = 1;
    double best_eff = 0;
    for (int64_t s = 1; s <= max_splits; ++s) {
        const double w = (double)(ctas * s) / (double)slots, eff = w / ceil(w);
        if (eff >= 0.9) return (int)s;
        if (eff > best_eff) best = (int)s, best_eff = eff;
    }
    return best;
}

template <int D, bool BF16, int NT>
static int flash_splitkv_launch(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace)
{
    typedef typename std::conditional<BF16, __nv_bfloat16, __half>::type T;
    const bool serving = p->ragged || p->page_size > 0;
    splitkv_params P;
    P.q = t->q, P.k = t->k, P.v = t->v, P.out = t->out;
    P.prob = attn_padded(p);
    P.cu_q = p->ragged ? t->cu_seqlens_q : NULL, P.cu_kv = p->ragged ? t->cu_seqlens_kv : NULL;
    P.block_table = p->page_size > 0 ? t->block_table : NULL;
    P.page_size = (int)p->page_size, P.pages_per_seq = p->seqs ? (int)p->seqs->pages_per_seq : 0;
    P.page_shift = P.page_size > 0 && (P.page_size & (P.page_size - 1)) == 0 ? __builtin_ctz((unsigned)P.page_size) : -1;
    P.page_div = P.page_shift < 0 && P.page_size > 0 ? fast_div_of((uint32_t)P.page_size) : fast_div{0, 0};
    if (const char *missing = attn_serving_arrays_missing(p, t)) return exec_fail(ctx, __FILE__, __LINE__, "flash_splitkv", missing);
    P.heads = (int)p->heads, P.kv_heads = (int)attn_kv_heads(p), P.group = P.heads / P.kv_heads;
    P.seq_q = (int)p->seq_q, P.seq_kv = (int)p->seq_kv;
    P.rows = P.group * P.seq_q;
    P.row_tiles = (P.rows + SPLITKV_NROWS * NT - 1) / (SPLITKV_NROWS * NT);
    P.out_rows = attn_tokens_q(p) * p->heads;
    P.scale_log2 = (float)(p->scale * 1.4426950408889634);

    /* the keys some row sees: the range to split (whole blocks); a serving batch's sequences
     * differ, so there every key up to the bound */
    int64_t first = p->seq_kv, last = 0;
    for (int64_t i = 0; i < p->seq_q && !serving; ++i) {
        int64_t lo, hi;
        attn_visible_range(p, i, &lo, &hi);
        if (lo < hi) first = first < lo ? first : lo, last = last > hi ? last : hi;
    }
    if (serving) first = 0, last = p->seq_kv;
    if (last <= first) first = 0, last = 0;
    P.key_begin = (int)(first & ~(int64_t)(SPLITKV_KEYS - 1));
    const int64_t span = last - P.key_begin, blocks = (span + SPLITKV_KEYS - 1) / SPLITKV_KEYS;

    auto kernel = serving ? flash_splitkv_kernel<D, BF16, true, NT> : flash_splitkv_kernel<D, BF16, false, NT>;
    /* per (D, dtype, NT) and serving or not (their registers differ: at D64 the serving kernel
     * fits 3 CTAs an SM where the dense one fits 4); the same on every device of one architecture */
    static int ctas_per_sm_of[2] = {0, 0};
    int &ctas_per_sm = ctas_per_sm_of[serving];
    if (ctas_per_sm == 0)
        CUDA_TRY(ctx, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas_per_sm, kernel, 32 * SPLITKV_WARPS, 0));
    const int64_t base = p->batch * P.kv_heads * P.row_tiles;
    int64_t max_splits = flash_splitkv_max_splits(p);
    if (max_splits > blocks) max_splits = blocks > 0 ? blocks : 1;
    int splits = workspace ? flash_splitkv_splits(base, (int64_t)ctx->sm_count * (ctas_per_sm > 0 ? ctas_per_sm : 1), max_splits) : 1;
    P.split_keys = (int)((blocks + splits - 1) / splits) * SPLITKV_KEYS;
    P.splits = splits = P.split_keys > 0 ? (int)((span + P.split_keys - 1) / P.split_keys) : 1;
    if (splits < 1) P.splits = splits = 1;
    P.part_o = (float *)workspace;
    P.part_lse = workspace ? (float *)((char *)workspace + flash_splitkv_lse_offset(p)) : NULL;

    const int64_t grid = base * splits;
    if (grid > INT32_MAX)
        return exec_fail(ctx, __FILE__, __LINE__, "flash_splitkv", "more CTAs than one launch takes (2^31 - 1)");
    kernel<<<(unsigned)grid, 32 * SPLITKV_WARPS, 0, ctx->stream>>>(P);
    LAUNCH_TRY(ctx);
    if (splits == 1) return 0;
    const int64_t combine = (P.out_rows + SPLITKV_COMBINE_WARPS - 1) / SPLITKV_COMBINE_WARPS;
    /* on sm_90+ a programmatic dependent launch: scheduled once every split CTA has passed its
     * key loop, so the launch latency hides behind their last stores */
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)combine), cfg.blockDim = dim3(32 * SPLITKV_COMBINE_WARPS), cfg.stream = ctx->stream;
    cudaLaunchAttribute dependent;
    dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    dependent.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &dependent, cfg.numAttrs = ctx->cc >= 90 ? 1 : 0;
    CUDA_TRY(ctx, cudaLaunchKernelEx(&cfg, flash_splitkv_combine<D, T>, P));
    return 0;
}

/* One n8 tile of query rows a CTA or two (flash_splitkv_tile_rows): 16 rows in two tiles read
 * each K/V block once, where two CTAs of 8 would read it twice (the second from L2). */
template <int D, bool BF16>
static int flash_splitkv_launch_rows(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace)
{
    if constexpr (D <= 128) /* at D256 two tiles' 128 accumulators would not fit: never instantiated */
        if (flash_splitkv_tile_rows(p) == 2 * SPLITKV_NROWS) return flash_splitkv_launch<D, BF16, 2>(ctx, p, t, workspace);
    return flash_splitkv_launch<D, BF16, 1>(ctx, p, t, workspace);
}

int flash_splitkv_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace)
{
    char why[200];
    if (flash_splitkv_check(p, why, sizeof why) != 0) return exec_fail(ctx, __FILE__, __LINE__, "flash_splitkv", why);
    if (flash_splitkv_max_splits(p) > 1 && !workspace)
        return exec_fail(ctx, __FILE__, __LINE__, "flash_splitkv", "no workspace (needs flash_workspace_bytes)");
    const bool bf16 = p->dtype == ATTN_BF16;
    if (p->head_dim == 256)
        return bf16 ? flash_splitkv_launch_rows<256, true>(ctx, p, t, workspace)
                    : flash_splitkv_launch_rows<256, false>(ctx, p, t, workspace);
    if (p->head_dim == 64)
        return bf16 ? flash_splitkv_launch_rows<64, true>(ctx, p, t, workspace)
                    : flash_splitkv_launch_rows<64, false>(ctx, p, t, workspace);
    return bf16 ? flash_splitkv_launch_rows<128, true>(ctx, p, t, workspace)
                : flash_splitkv_launch_rows<128, false>(ctx, p, t, workspace);
}
