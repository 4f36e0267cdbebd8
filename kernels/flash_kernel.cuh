/* flash_kernel.cuh — the tensor-core fused attention kernel body shared by `flash` (2-stage
 * cp.async pipeline, 128-row tiles, 4 warps x 32 rows) and the 16-bit path of `efficient` (1 stage, 64-row tiles).
 *
 * One CTA = one (query tile of BM rows, b·h). Each warp owns MI x 16 query rows (MI m16 tiles:
 * every K/V fragment read from smem then feeds MI mma, which sets the smem bytes per mma). Per key block of
 * BN keys: S = Q·Kᵀ (mma.sync, fp32), scale into log2 space, mask, online softmax (running
 * max m and sum l per row, fp32), P packed to 16 bits in registers, O += P·V (mma.sync).
 * Scores never leave registers. At the end O /= l; a row with l = 0 (no visible key: only
 * possible with causal_bottom_right and Sq > Skv) is written as zeros (SDPA's safe softmax).
 *
 * Masks: key j is visible to row i iff j < attn_visible_keys(mask, Sq, Skv, i). The number
 * is nondecreasing in i, so a tile needs key blocks 0..ceil(vis(last row)/BN)-1 (blocks
 * above the causal diagonal are never loaded) and only blocks reaching past vis(first row)
 * pay for per-element masking. Tails (S not a multiple of the tile) are the same rule.
 * A sliding window of W keys also hides the keys j < pos(i) − W + 1, a left edge that is
 * nondecreasing in i too: the tile's key blocks start at the first row's edge (blocks wholly
 * left of every row's window are never loaded, FA3's n_block_min) and only blocks starting
 * left of the last row's edge pay for it (flash_tile_keys_of).
 *
 * Grouped K/V heads and windows (GQA_WINDOW, a template flag of every flash body): query
 * head bh reads K/V head bh / group (group = heads / kv_heads: bh = b·H + h and H = group ·
 * Hkv, so this is b·Hkv + h / group), and the window's edge is masked. Problems with neither
 * (flash_gqa_window) run the bodies compiled with the flag false: none of it is in their code.
 * In this body (and efficient's fp32 one) the same instantiation also runs a value head dim of
 * its own (flash_bucket_general): V and O rows of head_dim_v, inside the same bucket D ≥ both
 * dims; V's columns past head_dim_v are zero-filled like Q/K's past head_dim, so O's are zeros
 * and are not stored.
 *
 * Head dims: D is the compiled bucket; head_dim ≤ D, a multiple of 8. Columns ≥ head_dim
 * are zero-filled by cp.async (src size 0), so Q·Kᵀ and P·V stay exact; k-steps wholly past
 * head_dim are skipped at run time.
 *
 * Shared memory: rows of D 16-bit values, addressed in 16-byte chunks. When D is a multiple
 * of 64 the chunk index is XOR-swizzled with (row & 7): the 8 rows one ldmatrix phase reads
 * land in 8 distinct 128-byte bank groups. Other D (32, 96, 160, 224) pad each row by one
 * chunk instead (pitch D/8+1 chunks, odd since D%16 == 0): also conflict-free.
 *
 * Pipeline (STAGES 2): K,V of block j+1 are in flight (cp.async) while block j computes;
 * one __syncthreads after the wait (data visible) and one after the compute (the buffer
 * may be overwritten). STAGES 1 loads, waits, computes: no overlap (the `efficient` shape).
 *
 * Serving batches (SERVING, the generic body only; docs/serving.md): a paged K/V cache and
 * ragged batches, as flash's split-KV and v6's SERVING kernels take them. A CTA's sequence is
 * b = bh / H; it works on a copy of flash_params holding that sequence's lengths, so the key
 * range, the masks and the window are its own; its rows come through flash_rows (packed
 * tokens, or slots of the block table's pages: one table read a row); the grid covers the
 * longest sequence's tiles and a tile past its sequence's end returns at once.
 *
 * Contract: q,k,v,out 16-byte aligned, contiguous (q [B,H,Sq,head_dim], k [B,Hkv,Skv,head_dim],
 * v [B,Hkv,Skv,head_dim_v], out [B,H,Sq,head_dim_v]); gridDim.x = B·H,
 * gridDim.y = ceil(Sq/BM) ≤ 65535; tiles are taken in reverse order of blockIdx.y so the
 * heaviest causal tiles (last rows) start first and the short ones fill the tail.
 */
#ifndef FLASH_KERNEL_CUH
#define FLASH_KERNEL_CUH

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <atomic>

#include "common/attn.h"
#include "kernels/flash_mma.cuh"

/* What crosses from host to kernel. Element offsets are int64 (B·H·S·D may pass 2^31). */
typedef struct flash_params {
    const void *q, *k, *v;
    void *out;
    int seq_q, seq_kv, head_dim;
    int mask;         /* attn_mask */
    float scale_log2; /* scale · log2(e): exp(scale·s − m) = 2^(scale_log2·s − m') */
    /* read only by the GQA_WINDOW kernels: */
    int group;  /* query heads per K/V head (heads / kv_heads) */
    int window; /* keys a row sees at most, ending at its position; 0: no window (flash_window_keys) */
    /* read only by the GQA_WINDOW instantiation of the bucketed bodies (flash_bucket_general): */
    int head_dim_v; /* V's and O's row length */
} flash_params;

/* A serving batch where the generic body reads it (attn.h's layouts; the SERVING instantiation
 * only): cu_q non-NULL for a ragged batch (q, out and, unless paged, k, v token-major, sequence
 * b's tokens from cu[b]), block_table for a paged cache of page_size tokens a page. */
typedef struct flash_seqs {
    const int32_t *cu_q, *cu_kv, *block_table;
    int heads, kv_heads, page_size, pages_per_seq;
} flash_seqs;

/* The window the kernels take: window_keys when it hides a key from some row, else 0. A row's
 * left edge is pos − W + 1 and the last row has the largest pos (Skv − 1 bottom-right, else
 * Sq − 1), so W > that pos hides nothing and the problem runs as the dense one. */
static inline int flash_window_keys(const attn_problem *pr)
{
    const int64_t pos_max = pr->mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT ? pr->seq_kv - 1 : pr->seq_q - 1;
    return pr->window_keys > 0 && pr->window_keys <= pos_max ? (int)pr->window_keys : 0;
}

/* Whether pr needs the GQA_WINDOW kernels: grouped K/V heads or a window that hides a key. */
static inline bool flash_gqa_window(const attn_problem *pr)
{
    return attn_kv_heads(pr) != pr->heads || flash_window_keys(pr) > 0;
}

/* Whether pr needs the general instantiation of a bucketed body (the generic flash body, efficient's
 * 16-bit and fp32 ones): grouped K/V heads, a window, or a value head dim of its own, which only
 * those bodies run. */
static inline bool flash_bucket_general(const attn_problem *pr)
{
    return flash_gqa_window(pr) || attn_dv(pr) != pr->head_dim;
}

/* What every fused launch checks before it launches: the kernel's shared memory fits the
 * device, the tensors are 16-byte aligned. Returns -1 after exec_fail, 1 when there is nothing
 * to write (B·H or seq_q is 0), else 0 with *kp filled in. */
static inline int flash_prepare_launch(exec_context *ctx, const attn_problem *pr, const attn_tensors *t, size_t smem,
                                       const char *who, flash_params *kp)
{
    char why[160];
    if (smem > ctx->smem_optin_bytes) {
        snprintf(why, sizeof why, "needs %zu bytes of shared memory per block, the device allows %zu", smem,
                 ctx->smem_optin_bytes);
        return exec_fail(ctx, __FILE__, __LINE__, who, why);
    }
    if (((uintptr_t)t->q | (uintptr_t)t->k | (uintptr_t)t->v | (uintptr_t)t->out) & 15u)
        return exec_fail(ctx, __FILE__, __LINE__, who, "q, k, v and out must be 16-byte aligned");
    if (pr->batch * pr->heads == 0 || pr->seq_q == 0) return 1;
    kp->q = t->q;
    kp->k = t->k;
    kp->v = t->v;
    kp->out = t->out;
    kp->seq_q = (int)pr->seq_q;
    kp->seq_kv = (int)pr->seq_kv;
    kp->head_dim = (int)pr->head_dim;
    kp->mask = (int)pr->mask;
    kp->scale_log2 = (float)(pr->scale * 1.4426950408889634);
    kp->group = (int)(pr->heads / attn_kv_heads(pr));
    kp->window = flash_window_keys(pr);
    kp->head_dim_v = (int)attn_dv(pr);
    return 0;
}

/* Raise `kernel`'s dynamic shared memory limit to smem bytes and ask for all of the unified
 * L1/shared memory as shared memory (MIN_BLOCKS CTAs side by side). Function attributes are
 * per device and stay set, so each kernel does this once per device (`done` holds one bit per
 * device; a race only sets them twice; devices >= 64 set them on every call). */
template <class Kernel>
static inline int flash_kernel_smem_once(exec_context *ctx, Kernel *kernel, size_t smem,
                                         std::atomic<unsigned long long> &done)
{
    const unsigned long long bit = ctx->device >= 0 && ctx->device < 64 ? 1ull << ctx->device : 0;
    if (bit && (done.load(std::memory_order_relaxed) & bit)) return 0;
    CUDA_TRY(ctx, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CUDA_TRY(ctx, cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       (int)cudaSharedmemCarveoutMaxShared));
    done.fetch_or(bit);
    return 0;
}

/* Launch `kernel` on ctx->stream over (B·H) x ceil(seq_q / bm) CTAs of `threads` threads and
 * smem bytes each, after flash_prepare_launch's checks (smem_set: flash_kernel_smem_once's
 * per-kernel record). The kernels take their rows' tile from blockIdx.y (< 65536). */
template <class Kernel>
static inline int flash_launch_tiles(exec_context *ctx, const attn_problem *pr, const attn_tensors *t, const char *who,
                                     Kernel *kernel, int bm, int threads, size_t smem,
                                     std::atomic<unsigned long long> &smem_set)
{
    const int64_t m_tiles = (pr->seq_q + bm - 1) / bm;
    if (m_tiles > 65535) return exec_fail(ctx, __FILE__, __LINE__, who, "seq_q too long for this tile");
    flash_params kp;
    const int rc = flash_prepare_launch(ctx, pr, t, smem, who, &kp);
    if (rc != 0) return rc < 0 ? rc : 0;
    if (flash_kernel_smem_once(ctx, kernel, smem, smem_set) != 0) return -1;
    dim3 grid((unsigned)(pr->batch * pr->heads), (unsigned)m_tiles);
    kernel<<<grid, threads, smem, ctx->stream>>>(kp);
    LAUNCH_TRY(ctx);
    return 0;
}

template <int D_, int BM_, int BN_, int WARPS_, int STAGES_, bool Q_IN_REGS_, int MI_ = 1, bool EXACT_D_ = false>
struct flash_traits {
    static constexpr int D = D_, BM = BM_, BN = BN_, WARPS = WARPS_, STAGES = STAGES_, MI = MI_;
    /* EXACT_D: head_dim == D is guaranteed by the caller; every column check folds away */
    static constexpr bool EXACT_D = EXACT_D_;
    static constexpr int THREADS = WARPS * 32;
    static constexpr int MIN_BLOCKS = MI > 1 ? 2 : 1; /* 2 CTAs of 4 warps at ≤ 255 registers */
    static constexpr bool Q_IN_REGS = Q_IN_REGS_;
    static constexpr bool SWIZZLE = (D % 64) == 0;
    static constexpr int CHUNKS = D / 8;                 /* 16-byte chunks of one row */
    static constexpr int PITCH = SWIZZLE ? D : D + 8;   /* elements per smem row */
    static constexpr int Q_ELEMS = BM * PITCH;
    static constexpr int KV_ELEMS = BN * PITCH;
    static constexpr size_t SMEM_BYTES = (size_t)(Q_ELEMS + 2 * STAGES * KV_ELEMS) * 2;
    /* MI m16 tiles per warp: each K/V fragment read from smem feeds MI mma instead of 1 */
    static_assert(BM == WARPS * 16 * MI, "each warp owns MI x 16 query rows");
    static_assert(D % 32 == 0 && BN % 16 == 0, "D multiple of 32, BN multiple of 16");
    static_assert(STAGES == 1 || STAGES == 2, "1 or 2 stages");
};

/* One head's rows in global memory: row r at base + r·stride, or, through its sequence's row
 * of the block table, at slot r % page_size of page table[r / page_size] (stride: from one
 * cache slot to the next). */
template <class T> struct flash_rows {
    const T *base;
    int64_t stride;
    const int32_t *table;
    int page_size;
    __device__ __forceinline__ const T *row(int r) const
    {
        if (!table) return base + (int64_t)r * stride;
        const int pg = r / page_size;
        return base + ((int64_t)__ldg(table + pg) * page_size + (r - pg * page_size)) * stride;
    }
};

template <class T>
__device__ __forceinline__ flash_rows<T> flash_rows_of(const T *base, int64_t stride, const int32_t *table = NULL,
                                                       int page_size = 0)
{
    flash_rows<T> r;
    r.base = base, r.stride = stride, r.table = table, r.page_size = page_size;
    return r;
}

/* Element offset of 16-byte chunk c of row r. */
template <class TR> __device__ __forceinline__ int flash_smem_off(int r, int c)
{
    if constexpr (TR::SWIZZLE) return r * TR::PITCH + ((c ^ (r & 7)) << 3);
    else return r * TR::PITCH + (c << 3);
}

/* ROWS x D tile from global rows row0.. (row stride head_dim) into smem; rows ≥ rows_total
 * and columns ≥ head_dim become zeros. Issues cp.async only (caller commits). */
template <class TR, int ROWS, class T>
__device__ __forceinline__ void flash_load_tile(T *smem, const T *gbase, int row0, int rows_total, int head_dim)
{
    constexpr int TOTAL = ROWS * TR::CHUNKS;
    constexpr int ITERS = (TOTAL + TR::THREADS - 1) / TR::THREADS;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        int i = it * TR::THREADS + (int)threadIdx.x;
        if (TOTAL % TR::THREADS == 0 || i < TOTAL) {
            int r = i / TR::CHUNKS, c = i % TR::CHUNKS;
            int grow = row0 + r;
            bool ok = grow < rows_total && c * 8 < head_dim;
            const T *src = ok ? gbase + (int64_t)grow * head_dim + c * 8 : gbase;
            flash_cp_async16(smem + flash_smem_off<TR>(r, c), src, ok ? 16 : 0);
        }
    }
}

/* flash_load_tile through flash_rows (SERVING): rows ≥ rows_total and columns ≥ head_dim
 * become zeros. A loop of its own: flash_load_tile written over a dense flash_rows compiles to
 * other PTX (its adds reassociated), and the dense kernels stay instruction for instruction. */
template <class TR, int ROWS, class T>
__device__ __forceinline__ void flash_load_rows(T *smem, const flash_rows<T> &g, int row0, int rows_total, int head_dim)
{
    constexpr int TOTAL = ROWS * TR::CHUNKS;
    constexpr int ITERS = (TOTAL + TR::THREADS - 1) / TR::THREADS;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        int i = it * TR::THREADS + (int)threadIdx.x;
        if (TOTAL % TR::THREADS == 0 || i < TOTAL) {
            int r = i / TR::CHUNKS, c = i % TR::CHUNKS;
            int grow = row0 + r;
            bool ok = grow < rows_total && c * 8 < head_dim;
            const T *src = ok ? g.row(grow) + c * 8 : g.base;
            flash_cp_async16(smem + flash_smem_off<TR>(r, c), src, ok ? 16 : 0);
        }
    }
}

__device__ __forceinline__ int flash_visible(int mask, int seq_q, int seq_kv, int row)
{
    return (int)attn_visible_keys((attn_mask)mask, seq_q, seq_kv, row);
}

/* The window's left edge for row `row`: keys below it are hidden (pos − W + 1, negative when
 * it hides nothing, past the visible keys for a row the window leaves none). Without a window
 * INT_MIN: nothing is left of it. */
__device__ __forceinline__ int flash_window_start(const flash_params &p, int row)
{
    const int pos = row + (p.mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT ? p.seq_kv - p.seq_q : 0);
    return p.window > 0 ? pos - p.window + 1 : INT_MIN;
}

/* A row's visible keys [lo, vis) as one unsigned comparison per key: key k is visible iff
 * base + (k − key0) < range, with base = key0 − lo and range = vis − lo (lo clipped to vis;
 * unsigned wrap-around makes keys left of lo huge). Two values per row, one compare per key:
 * the GQA_WINDOW masks' form (two compares per key, against two bounds, took more registers). */
struct flash_key_range {
    unsigned base, range;
};

__device__ __forceinline__ flash_key_range flash_key_range_of(const flash_params &p, int row, int key0)
{
    const int vis = flash_visible(p.mask, p.seq_q, p.seq_kv, row), lo = min(flash_window_start(p, row), vis);
    return {(unsigned)key0 - (unsigned)lo, (unsigned)vis - (unsigned)lo};
}

/* The K/V head query head bh (b·H + h) reads: bh / group (see the header). */
template <bool GQA_WINDOW> __device__ __forceinline__ int64_t flash_kv_head(const flash_params &p, int64_t bh)
{
    if constexpr (GQA_WINDOW) return (int64_t)((uint32_t)bh / (uint32_t)p.group);
    else return bh;
}

/* This CTA's tile: query rows [m0, m0 + BM) of head blockIdx.x (b·h), that head's Q and O and
 * its K/V head's K and V in global memory (row stride head_dim; V and O head_dim_v). Tiles are taken in reverse
 * order of blockIdx.y, so the heaviest causal tiles (the last rows) start first and the short
 * ones fill the tail; under `none` with GQA_WINDOW in order, since there a window leaves the
 * first rows the most keys. */
template <class T> struct flash_tile {
    const T *q, *k, *v;
    T *o;
    int m0;
};

/* This CTA's query block in that order. */
template <bool GQA_WINDOW> __device__ __forceinline__ int flash_m_block(const flash_params &p)
{
    return GQA_WINDOW && p.mask == ATTN_MASK_NONE ? (int)blockIdx.y : (int)(gridDim.y - 1 - blockIdx.y);
}

template <class T, bool GQA_WINDOW>
__device__ __forceinline__ flash_tile<T> flash_tile_of(const flash_params &p, int BM, int head_dim, int head_dim_v)
{
    const int64_t bh = blockIdx.x, kvh = flash_kv_head<GQA_WINDOW>(p, bh);
    const int m_block = flash_m_block<GQA_WINDOW>(p);
    return {static_cast<const T *>(p.q) + bh * p.seq_q * head_dim,
            static_cast<const T *>(p.k) + kvh * p.seq_kv * head_dim,
            static_cast<const T *>(p.v) + kvh * p.seq_kv * head_dim_v,
            static_cast<T *>(p.out) + bh * p.seq_q * head_dim_v, m_block * BM};
}

template <class T, bool GQA_WINDOW>
__device__ __forceinline__ flash_tile<T> flash_tile_of(const flash_params &p, int BM, int head_dim)
{
    return flash_tile_of<T, GQA_WINDOW>(p, BM, head_dim, head_dim);
}

/* The keys a tile of query rows [m0, m0 + BM) reads, shared by every flash body: the key blocks
 * n_min .. n_min + n_blocks − 1, from the block holding its first row's window edge (0 without
 * a window) up to its last row's visible end (causal tiles stop early; n_blocks 0 when every
 * row of the tile is fully masked), and vis_min, the visible keys of its first row (blocks
 * ending at or below it need no right-edge mask). Without GQA_WINDOW n_min is the constant 0,
 * and the code that reads it folds away. */
struct flash_tile_keys {
    int vis_min, n_blocks, n_min;
};

template <bool GQA_WINDOW>
__device__ __forceinline__ flash_tile_keys flash_tile_keys_of(const flash_params &p, int m0, int BM, int BN)
{
    const int row_last = min(m0 + BM, p.seq_q) - 1;
    const int vis_max = flash_visible(p.mask, p.seq_q, p.seq_kv, row_last);
    const int vis_min = flash_visible(p.mask, p.seq_q, p.seq_kv, m0);
    if constexpr (!GQA_WINDOW) {
        return {vis_min, (vis_max + BN - 1) / BN, 0};
    } else {
        /* every row with a visible key sees [its edge, its end) ⊆ [first row's edge, vis_max):
         * empty when the first edge is already past vis_max (every row fully masked) */
        const int lo_min = max(flash_window_start(p, m0), 0), n_min = lo_min / BN;
        return {vis_min, lo_min < vis_max ? (vis_max + BN - 1) / BN - n_min : 0, n_min};
    }
}

/* Whether key block n0..n0+BN-1 of the tile of rows [m0, m0 + BM) needs the per-element mask:
 * it reaches past the first row's visible keys (the causal diagonal, the sequence's end), or,
 * with GQA_WINDOW, starts left of the last row's window edge (recomputed here rather than held
 * across the loop: registers are what the bodies are short of). */
template <bool GQA_WINDOW>
__device__ __forceinline__ bool flash_block_masked(const flash_params &p, const flash_tile_keys &keys, int m0, int BM,
                                                   int n0, int BN)
{
    if constexpr (GQA_WINDOW) return n0 + BN > keys.vis_min || n0 < flash_window_start(p, min(m0 + BM, p.seq_q) - 1);
    else return n0 + BN > keys.vis_min;
}

/* A tile whose rows see no key at all: its output rows are zeros (safe softmax), stored by
 * all THREADS threads in 16-byte pieces, row r at g_o + r·stride; rows past seq_q are left alone. */
template <int THREADS, class T>
__device__ __forceinline__ void flash_store_zero_rows_at(T *g_o, int m0, int BM, int seq_q, int head_dim,
                                                         int64_t stride, int tid)
{
    const int chunks = head_dim / 8;
    for (int i = tid; i < BM * chunks; i += THREADS) {
        const int r = i / chunks, c = i % chunks;
        if (m0 + r < seq_q) *reinterpret_cast<uint4 *>(g_o + (int64_t)(m0 + r) * stride + c * 8) = make_uint4(0, 0, 0, 0);
    }
}

/* The same for a dense head's rows (stride head_dim). */
template <int THREADS, class T>
__device__ __forceinline__ void flash_store_zero_rows(T *g_o, int m0, int BM, int seq_q, int head_dim, int tid)
{
    flash_store_zero_rows_at<THREADS>(g_o, m0, BM, seq_q, head_dim, head_dim, tid);
}

/* The start of every one-tile-per-CTA flash body: the CTA's tile and the key blocks it reads.
 * When it reads none, its rows are written as zeros and it returns false: the CTA is done. */
template <class T> struct flash_cta {
    flash_tile<T> tile;
    flash_tile_keys keys;
};

template <class T, int THREADS, bool GQA_WINDOW>
__device__ __forceinline__ bool flash_cta_begin(const flash_params &p, int BM, int BN, int head_dim, int head_dim_v,
                                                flash_cta<T> &c)
{
    c.tile = flash_tile_of<T, GQA_WINDOW>(p, BM, head_dim, head_dim_v);
    c.keys = flash_tile_keys_of<GQA_WINDOW>(p, c.tile.m0, BM, BN);
    if (c.keys.n_blocks > 0) return true;
    flash_store_zero_rows<THREADS>(c.tile.o, c.tile.m0, BM, p.seq_q, head_dim_v, (int)threadIdx.x);
    return false;
}

template <class T, int THREADS, bool GQA_WINDOW>
__device__ __forceinline__ bool flash_cta_begin(const flash_params &p, int BM, int BN, int head_dim, flash_cta<T> &c)
{
    return flash_cta_begin<T, THREADS, GQA_WINDOW>(p, BM, BN, head_dim, head_dim, c);
}

/* A serving CTA's tile (SERVING): its sequence's lengths, Q, K, V as flash_rows, O's first row
 * and row stride, and its rows [m0, m0 + BM) in the order flash_tile_of takes them. */
template <class T> struct flash_seq_tile {
    flash_rows<T> q, k, v;
    T *o;
    int64_t o_stride;
    int m0, seq_q, seq_kv;
};

template <class T>
__device__ __forceinline__ flash_seq_tile<T> flash_seq_tile_of(const flash_params &p, const flash_seqs &sv, int BM,
                                                               int head_dim, int head_dim_v)
{
    const int bh = (int)blockIdx.x, b = bh / sv.heads, h = bh - b * sv.heads, kvh = h / p.group;
    const int m_block = flash_m_block<true>(p); /* the general instantiation's order */
    const T *q = static_cast<const T *>(p.q), *k = static_cast<const T *>(p.k), *v = static_cast<const T *>(p.v);
    T *o = static_cast<T *>(p.out);
    const int64_t k_stride = (int64_t)sv.kv_heads * head_dim, v_stride = (int64_t)sv.kv_heads * head_dim_v;
    flash_seq_tile<T> s;
    s.m0 = m_block * BM;
    if (sv.cu_q) { /* ragged: q, out token-major; k, v too unless paged */
        const int q0 = __ldg(sv.cu_q + b), kv0 = __ldg(sv.cu_kv + b);
        s.seq_q = __ldg(sv.cu_q + b + 1) - q0, s.seq_kv = __ldg(sv.cu_kv + b + 1) - kv0;
        s.q = flash_rows_of(q + ((int64_t)q0 * sv.heads + h) * head_dim, (int64_t)sv.heads * head_dim);
        s.o = o + ((int64_t)q0 * sv.heads + h) * head_dim_v, s.o_stride = (int64_t)sv.heads * head_dim_v;
        s.k = flash_rows_of(k + ((int64_t)kv0 * sv.kv_heads + kvh) * head_dim, k_stride);
        s.v = flash_rows_of(v + ((int64_t)kv0 * sv.kv_heads + kvh) * head_dim_v, v_stride);
    } else { /* paged with equal lengths: q and out as a dense batch's */
        s.seq_q = p.seq_q, s.seq_kv = p.seq_kv;
        s.q = flash_rows_of(q + (int64_t)bh * p.seq_q * head_dim, head_dim);
        s.o = o + (int64_t)bh * p.seq_q * head_dim_v, s.o_stride = head_dim_v;
    }
    if (sv.block_table) {
        const int32_t *table = sv.block_table + (int64_t)b * sv.pages_per_seq;
        s.k = flash_rows_of(k + (int64_t)kvh * head_dim, k_stride, table, sv.page_size);
        s.v = flash_rows_of(v + (int64_t)kvh * head_dim_v, v_stride, table, sv.page_size);
    }
    return s;
}

/* The start of the online softmax: O = 0, each row's running max −inf and sum 0. */
template <int MI, int D>
__device__ __forceinline__ void flash_acc_init(float (&o)[MI][D / 8][4], float (&row_max)[MI][2], float (&row_sum)[MI][2])
{
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int i = 0; i < D / 8; ++i) o[mi][i][0] = o[mi][i][1] = o[mi][i][2] = o[mi][i][3] = 0.f;
        row_max[mi][0] = row_max[mi][1] = -INFINITY;
        row_sum[mi][0] = row_sum[mi][1] = 0.f;
    }
}

/* The per-block arithmetic both mma.sync bodies share; it needs flash_params,
 * flash_smem_off, flash_visible and flash_window_start above. */
#include "kernels/flash_block.cuh"

template <class TR, class T, bool BF16, bool GQA_WINDOW, bool SERVING = false>
__global__ void __launch_bounds__(TR::THREADS, TR::MIN_BLOCKS)
    flash_fwd_kernel(const flash_params p_in, const flash_seqs sv)
{
    constexpr int D = TR::D, BM = TR::BM, BN = TR::BN;
    static_assert(!SERVING || GQA_WINDOW, "a serving batch runs the general instantiation");
    extern __shared__ uint4 flash_smem[];
    T *s_q = reinterpret_cast<T *>(flash_smem);
    T *s_k = s_q + TR::Q_ELEMS;
    T *s_v = s_k + TR::STAGES * TR::KV_ELEMS;

    const int head_dim = TR::EXACT_D ? D : p_in.head_dim;
    /* a value head dim of its own only in the general instantiation (flash_bucket_general) */
    const int head_dim_v = GQA_WINDOW && !TR::EXACT_D ? p_in.head_dim_v : head_dim;
    flash_seq_tile<T> st; /* SERVING: the tile's sequence, seq_p its lengths */
    flash_params seq_p;
    if constexpr (SERVING) {
        st = flash_seq_tile_of<T>(p_in, sv, BM, head_dim, head_dim_v);
        if (st.m0 >= st.seq_q) return; /* past its sequence's end */
        seq_p = p_in, seq_p.seq_q = st.seq_q, seq_p.seq_kv = st.seq_kv;
    }
    const flash_params &p = SERVING ? seq_p : p_in;
    const int seq_q = p.seq_q, seq_kv = p.seq_kv;
    flash_cta<T> cta;
    if constexpr (SERVING) {
        cta.tile.q = cta.tile.k = cta.tile.v = NULL; /* st's rows instead */
        cta.tile.o = st.o, cta.tile.m0 = st.m0;
        cta.keys = flash_tile_keys_of<GQA_WINDOW>(p, st.m0, BM, BN);
        if (cta.keys.n_blocks == 0) {
            flash_store_zero_rows_at<TR::THREADS>(st.o, st.m0, BM, seq_q, head_dim_v, st.o_stride, (int)threadIdx.x);
            return;
        }
    } else {
        if (!flash_cta_begin<T, TR::THREADS, GQA_WINDOW>(p, BM, BN, head_dim, head_dim_v, cta)) return;
    }
    const T *g_q = cta.tile.q, *g_k = cta.tile.k, *g_v = cta.tile.v;
    T *g_o = cta.tile.o;
    const int m0 = cta.tile.m0, n_blocks = cta.keys.n_blocks;
    const int kn0 = cta.keys.n_min * BN; /* the first key this tile reads */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    /* key block key0.. of K and V into dk, dv: a dense head's rows, or its sequence's */
    auto load_kv = [&](T *dk, T *dv, int key0) {
        if constexpr (SERVING) {
            flash_load_rows<TR, BN>(dk, st.k, key0, seq_kv, head_dim);
            flash_load_rows<TR, BN>(dv, st.v, key0, seq_kv, head_dim_v);
        } else {
            flash_load_tile<TR, BN>(dk, g_k, key0, seq_kv, head_dim);
            flash_load_tile<TR, BN>(dv, g_v, key0, seq_kv, head_dim_v);
        }
    };

    constexpr int MI = TR::MI;
    const int warp_row0 = warp * 16 * MI; /* this warp's rows: warp_row0 + mi*16 + (g, g+8) */

    if constexpr (SERVING) flash_load_rows<TR, BM>(s_q, st.q, m0, seq_q, head_dim);
    else flash_load_tile<TR, BM>(s_q, g_q, m0, seq_q, head_dim);
    load_kv(s_k, s_v, kn0);
    flash_cp_async_commit();

    float o[MI][D / 8][4], row_max[MI][2], row_sum[MI][2];
    flash_acc_init<MI, D>(o, row_max, row_sum);
    uint32_t q_frag[TR::Q_IN_REGS ? MI : 1][TR::Q_IN_REGS ? D / 16 : 1][4];

    /* ldmatrix row/chunk of this lane, see flash_mma.cuh for the fragment layouts */
    const int a_row = warp_row0 + (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4; /* Q (A), + mi*16 */
    const int k_row = (lane & 7) + (lane >> 4) * 8, k_chunk = (lane >> 3) & 1;            /* K (B) */
    const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_chunk = lane >> 4;            /* V (B, trans) */

    for (int j = 0; j < n_blocks; ++j) {
        const int stage = TR::STAGES == 2 ? (j & 1) : 0;
        const T *s_kj = s_k + stage * TR::KV_ELEMS;
        const T *s_vj = s_v + stage * TR::KV_ELEMS;
        if constexpr (TR::STAGES == 2) {
            if (j + 1 < n_blocks) {
                const int nxt = (j + 1) & 1;
                load_kv(s_k + nxt * TR::KV_ELEMS, s_v + nxt * TR::KV_ELEMS, kn0 + (j + 1) * BN);
                flash_cp_async_commit();
                flash_cp_async_wait<1>();
            } else {
                flash_cp_async_wait<0>();
            }
        } else {
            if (j > 0) {
                load_kv(s_k, s_v, kn0 + j * BN);
                flash_cp_async_commit();
            }
            flash_cp_async_wait<0>();
        }
        __syncthreads();

        if constexpr (TR::Q_IN_REGS) {
            if (j == 0) {
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
#pragma unroll
                    for (int ks = 0; ks < D / 16; ++ks)
                        flash_ldmatrix_x4(q_frag[mi][ks], s_q + flash_smem_off<TR>(a_row + mi * 16, ks * 2 + a_chunk));
            }
        }

        /* S = Q·Kᵀ for this warp's MI x 16 rows x BN keys */
        float s[MI][BN / 8][4];
        flash_block_qk<TR, MI, BN, D / 16, BF16>(s, q_frag, s_q, s_kj, a_row, a_chunk, k_row, k_chunk, head_dim);

        /* scale into log2 space, mask, online softmax */
        const int n0 = kn0 + j * BN;
        const bool need_mask = flash_block_masked<GQA_WINDOW>(p, cta.keys, m0, BM, n0, BN);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            flash_block_scale_mask<BN, GQA_WINDOW>(s[mi], p, m0 + warp_row0 + mi * 16 + g, n0, need_mask, t);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float alpha = flash_block_softmax_row<BN>(s[mi], r, row_max[mi][r], row_sum[mi][r]);
#pragma unroll
                for (int i = 0; i < D / 8; ++i) {
                    o[mi][i][2 * r] *= alpha;
                    o[mi][i][2 * r + 1] *= alpha;
                }
            }
        }

        /* O += P·V */
        flash_block_pv<TR, MI, BN, D, BF16>(o, s, s_vj, v_row, v_chunk, head_dim_v);
        __syncthreads();
    }

    /* O /= l, store (rows < Sq, columns < head_dim_v) */
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float inv = flash_row_inv(row_sum[mi][r]);
            const int row = m0 + warp_row0 + mi * 16 + g + 8 * r;
            if (row < seq_q) {
                int64_t o_stride = head_dim_v;
                if constexpr (SERVING) o_stride = st.o_stride;
                T *dst = g_o + (int64_t)row * o_stride + 2 * t;
#pragma unroll
                for (int i = 0; i < D / 8; ++i)
                    if (i * 8 < head_dim_v)
                        *reinterpret_cast<uint32_t *>(dst + i * 8) =
                            flash_pack2<BF16>(o[mi][i][2 * r] * inv, o[mi][i][2 * r + 1] * inv);
            }
        }
}

/* Host side: enqueue one forward of configuration TR on ctx->stream. The caller has
 * already checked dtype, head_dim and head_dim_v ≤ TR::D (both == D when TR::EXACT_D) and the
 * shape limits. */
#include "kernels/exec_context.h"

/* A serving batch's arrays for the SERVING instantiation (all zero for a dense problem);
 * -1 after exec_fail when a paged or ragged problem comes without them. */
static inline int flash_seqs_of(exec_context *ctx, const attn_problem *pr, const attn_tensors *t, const char *who,
                                flash_seqs *sv)
{
    memset(sv, 0, sizeof *sv);
    if (!pr->ragged && pr->page_size <= 0) return 0;
    sv->cu_q = pr->ragged ? t->cu_seqlens_q : NULL, sv->cu_kv = pr->ragged ? t->cu_seqlens_kv : NULL;
    sv->block_table = pr->page_size > 0 ? t->block_table : NULL;
    sv->heads = (int)pr->heads, sv->kv_heads = (int)attn_kv_heads(pr);
    sv->page_size = (int)pr->page_size, sv->pages_per_seq = pr->seqs ? (int)pr->seqs->pages_per_seq : 0;
    const char *missing = attn_serving_arrays_missing(pr, t);
    return missing ? exec_fail(ctx, __FILE__, __LINE__, who, missing) : 0;
}

/* The grid covers B·H heads and the longest sequence's query tiles (seq_q is a serving batch's
 * bound); the SERVING instantiation for a paged or ragged batch. */
template <class TR, class T, bool BF16>
static int flash_launch(exec_context *ctx, const attn_problem *pr, const attn_tensors *t, const char *who)
{
    const size_t smem = TR::SMEM_BYTES;
    const int64_t m_tiles = (pr->seq_q + TR::BM - 1) / TR::BM;
    const int64_t bh = pr->batch * pr->heads;
    flash_params kp;
    flash_seqs sv;
    const int rc = flash_prepare_launch(ctx, pr, t, smem, who, &kp);
    if (rc != 0) return rc < 0 ? rc : 0;
    if (flash_seqs_of(ctx, pr, t, who, &sv) != 0) return -1;
    if (m_tiles > 65535) return exec_fail(ctx, __FILE__, __LINE__, who, "seq_q too long for this tile");
    auto kernel = sv.heads ? flash_fwd_kernel<TR, T, BF16, true, true>
                  : flash_bucket_general(pr) ? flash_fwd_kernel<TR, T, BF16, true>
                                             : flash_fwd_kernel<TR, T, BF16, false>;
    CUDA_TRY(ctx, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)bh, (unsigned)m_tiles);
    kernel<<<grid, TR::THREADS, smem, ctx->stream>>>(kp, sv);
    LAUNCH_TRY(ctx);
    return 0;
}

#endif
