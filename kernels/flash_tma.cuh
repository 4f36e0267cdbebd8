/* flash_tma.cuh — the `flash` kernel v6 for Hopper (sm_90a), head dims 64, 96, 128, 192 (with a
 * value head dim of 128) and 256:
 * FlashAttention-3's structure (its flash_fwd_kernel_sm90.h; versions and measurements:
 * kernels/flash.cu, docs/fused.md). v5 (flash_wgmma.cuh) put both products on wgmma but kept
 * FA2's machine: every thread copies K/V with cp.async and one CTA barrier per key block holds
 * the warpgroups in step, so softmax and the tensor cores take turns. Here the roles are split,
 * and this file only sets them up and runs them:
 *   warpgroup 0, the producer, gives its registers up (setmaxnreg.dec); one of its threads
 *     picks the tiles and loads Q, K and V by TMA (flash_tma_load.cuh);
 *   warpgroups 1..WGS, the consumers, 64 query rows each, take the registers; per tile each
 *     runs the mainloop — Q·Kᵀ, softmax, P·V over the key blocks, ping-ponged against the other
 *     warpgroups (flash_tma_mainloop.cuh) — and the epilogue (flash_tma_epilogue.cuh).
 * They meet at mbarriers ("full": a buffer's bytes landed; "empty": every consumer warp is done
 * with it) and the tile slot in shared memory; after the set-up no CTA barrier. The traits,
 * the params struct, the shared-memory layout and the tile order: flash_tma_traits.cuh.
 *
 * Grouped K/V heads and windows (GQA_WINDOW, flash_kernel.cuh): the K and V maps span the
 * B·Hkv K/V heads and the producer loads a tile's key blocks n_min.. of its query head's K/V
 * head; the consumers mask the window's edge.
 *
 * Paged and ragged batches (SERVING, a third instantiation: flash_tma_serving.cuh): each tile in
 * its own sequence, found through cu_seqlens and the block table; the dense instantiations are
 * instruction for instruction what they were without it (cuobjdump -sass).
 *
 * Contract (flash_tma_launch checks): head_dim == TR::D, head_dim_v == TR::DV, 16-bit types,
 * q,k,v,out 16-byte aligned contiguous (q [B,H,Sq,D], k [B,Hkv,Skv,D], v [B,Hkv,Skv,DV], out
 * [B,H,Sq,DV]; SERVING: common/attn.h's serving layouts, pages of whole key blocks), scale ≠ 0
 * and finite, sm_90 and a binary with sm_90a code.
 */
#ifndef FLASH_TMA_CUH
#define FLASH_TMA_CUH

#include <algorithm>
#include <atomic>
#include <cmath>

#include "kernels/flash_tma_epilogue.cuh"
#include "kernels/flash_tma_load.cuh"
#include "kernels/flash_tma_mainloop.cuh"
#include "kernels/flash_tma_serving.cuh"
#include "kernels/flash_tma_traits.cuh"

/* SERVING (flash_tma_serving.cuh): a paged or ragged batch, every tile in its own sequence;
 * always with GQA_WINDOW's masks and K/V head mapping. */
template <class TR, class T, bool BF16, bool GQA_WINDOW, bool SERVING = false>
__global__ void __launch_bounds__(TR::THREADS, 1)
    flash_tma_kernel(const __grid_constant__ flash_tma_maps maps, const flash_tma_work a)
{
    static_assert(!SERVING || GQA_WINDOW, "a serving batch takes the GQA_WINDOW masks");
#if WGMMA_AVAILABLE && TMA_AVAILABLE
    extern __shared__ uint8_t flash_tma_smem_base[];
    const uint32_t raw = flash_smem_addr(flash_tma_smem_base);
    flash_tma_smem sm; /* (flash_tma_traits.cuh) */
    sm.q = (raw + 1023u) & ~1023u;
    sm.k = sm.q + TR::Q_BYTES;
    sm.v = sm.k + TR::STAGES * TR::K_BYTES;
    sm.o = sm.v + TR::STAGES * TR::V_BYTES;
    sm.bars = sm.o + TR::O_BYTES;
    sm.o_ptr = flash_tma_smem_base + (sm.o - raw);
    sm.tile_slot = reinterpret_cast<volatile int *>(flash_tma_smem_base + (sm.bars - raw) + TR::TILE_SLOT);
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    if (tid == 0) flash_tma_init_barriers<TR>(sm);
    __syncthreads(); /* the last CTA-wide barrier: the producer's warps leave below */

    if (wg == 0) { /* the producer: one thread; the others give their registers up and leave */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(TR::PRODUCER_REGS));
        if (warp != 0 || lane != 0) return;
        tma_prefetch_map(&maps.q);
        tma_prefetch_map(&maps.k);
        tma_prefetch_map(&maps.v);
        uint32_t kv_iter = 0, tile_iter = 0;
        for (int tile = blockIdx.x;;) {
            if constexpr (SERVING) tile = flash_tma_claim<TR>(a, tile); /* skip the tiles past their sequence's end */
            /* the tile's number goes to the consumers in the tile slot, under Q full */
            tma_mbar_wait(sm.bar(TR::BAR_Q_EMPTY), (tile_iter & 1) ^ 1); /* the last tile's Q is read */
            *sm.tile_slot = tile;
            if (tile >= a.n_tiles) {
                tma_mbar_arrive(sm.bar(TR::BAR_Q_FULL)); /* "no more tiles" */
                break;
            }
            int bh, m_block;
            flash_tma_tile<GQA_WINDOW>(a, tile, bh, m_block);
            const int m0 = m_block * TR::BM;
            if constexpr (SERVING) {
                const flash_tma_seq s = flash_tma_seq_of<TR>(a, bh);
                const flash_tile_keys keys = flash_tile_keys_of<true>(flash_tma_seq_params(a.p, s), m0, TR::BM, TR::BN);
                if (keys.n_blocks == 0) tma_mbar_arrive(sm.bar(TR::BAR_Q_FULL)); /* no data: the consumers write zeros */
                else
                    flash_tma_load<TR>(maps, sm, s.q_row + m0, s.q_head, s.kvh,
                                       flash_tma_seq_keys<TR>{a.sv, flash_tma_seq_keys_at(a.sv, s.b)}, keys.n_min,
                                       keys.n_blocks, kv_iter);
            } else {
                const flash_tile_keys keys = flash_tile_keys_of<GQA_WINDOW>(a.p, m0, TR::BM, TR::BN);
                if (keys.n_blocks == 0) tma_mbar_arrive(sm.bar(TR::BAR_Q_FULL)); /* no data: the consumers write zeros */
                else
                    flash_tma_load<TR>(maps, sm, m0, bh, (int)flash_kv_head<GQA_WINDOW>(a.p, bh),
                                       flash_tma_dense_keys<TR>{}, keys.n_min, keys.n_blocks, kv_iter);
            }
            ++tile_iter;
            tile = flash_tma_next_tile<TR>(a, tile);
        }
        return;
    }

    /* the consumers: per tile the mainloop, then the epilogue */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(TR::CONSUMER_REGS));
    const int wgi = wg - 1, g = lane >> 2, wg_row0 = wgi * 64;
    const flash_tma_consumer c = {wgi, warp, lane, g, lane & 3, wg_row0, wg_row0 + warp * 16 + g,
                                  sm.q + wg_row0 * 128, 1 + wgi, 1 + (wgi + 1) % TR::WGS};
    if (c.wgi == 0) tma_bar_arrive(c.sched_me, 256); /* the first turn is warpgroup 1's */
    uint32_t kv_iter = 0;
    for (uint32_t tile_iter = 0;; ++tile_iter) {
        tma_mbar_wait(sm.bar(TR::BAR_Q_FULL), tile_iter & 1);
        /* Lane 0 reads the slot and hands the number on in registers: the warp's arrive on
         * Q empty (lane 0's, a release) then orders every read of the slot before the
         * producer's next write, which a read by each lane would not be (racecheck). */
        const int tile = __shfl_sync(0xffffffffu, c.lane == 0 ? *sm.tile_slot : 0, 0);
        if (tile >= a.n_tiles) break;
        int bh, m_block;
        flash_tma_tile<GQA_WINDOW>(a, tile, bh, m_block);
        const int m0 = m_block * TR::BM;
        flash_tma_seq s = {}; /* SERVING: the tile's sequence, p its lengths */
        flash_params seq_p;
        if constexpr (SERVING) s = flash_tma_seq_of<TR>(a, bh), seq_p = flash_tma_seq_params(a.p, s);
        const flash_params &p = SERVING ? seq_p : a.p;
        const flash_tile_keys keys = flash_tile_keys_of<GQA_WINDOW>(p, m0, TR::BM, TR::BN);
        T *const g_o = static_cast<T *>(a.p.out) + (SERVING ? s.o_off : (int64_t)bh * a.p.seq_q * TR::DV);
        const int o_stride = SERVING ? s.o_stride : TR::DV;
        if (keys.n_blocks == 0) { /* no row sees a key */
            flash_tma_store_zeros<TR>(g_o, m0, p.seq_q, o_stride, c, tid - 128 * wg);
            flash_tma_release(c, sm.bar(TR::BAR_Q_EMPTY));
            continue;
        }
        flash_tma_regs<TR> r;
        flash_tma_mma<TR, BF16, GQA_WINDOW>(r, sm, p, c, m0, keys, kv_iter);
        flash_tma_store<TR, T, BF16>(r, sm, g_o, m0, p.seq_q, o_stride, c);
    }
    if (c.wgi == 0) tma_bar_sync(c.sched_me, 256); /* take back the last warpgroup's final arrive */
#else
    __trap(); /* not compiled for sm_90a: flash_tma_launch never launches it */
#endif
}

/* What one tensor map encodes: a [heads][rows][cols] view of a tensor, rows row_stride and heads
 * head_stride elements apart (tma_encode_3d_strided). */
struct flash_tma_view {
    const void *base;
    int64_t cols, rows, heads, row_stride, head_stride;
    bool operator==(const flash_tma_view &o) const
    {
        return base == o.base && cols == o.cols && rows == o.rows && heads == o.heads && row_stride == o.row_stride &&
               head_stride == o.head_stride;
    }
};

/* A contiguous [heads][rows][cols] tensor (at least one row: a map has no empty dimension). */
static inline flash_tma_view flash_tma_view_dense(const void *base, int64_t cols, int64_t rows, int64_t heads)
{
    rows = std::max<int64_t>(rows, 1);
    return {base, cols, rows, heads, cols, rows * cols};
}
/* A token-major [tokens, heads, cols] tensor: a ragged batch's q, k, v, a paged cache. */
static inline flash_tma_view flash_tma_view_tokens(const void *base, int64_t cols, int64_t tokens, int64_t heads)
{
    return {base, cols, std::max<int64_t>(tokens, 1), heads, heads * cols, cols};
}

/* The tensor maps of the last problem this host thread launched (encoding costs a few µs of
 * host time; a benchmark repeats one problem), keyed by everything they encode. */
struct flash_tma_map_cache {
    flash_tma_view q, k, v;
    int bm, bn;
    bool bf16, valid;
    flash_tma_maps maps;
};

/* The maps of q, k, v as views say (from the host thread's cache when they are the last ones);
 * a CUresult, 0 on success. */
template <class TR, bool BF16>
static int flash_tma_maps_of(const flash_tma_view &q, const flash_tma_view &k, const flash_tma_view &v,
                             flash_tma_maps *out)
{
    static thread_local flash_tma_map_cache cache = {};
    if (!(cache.valid && cache.q == q && cache.k == k && cache.v == v && cache.bm == TR::BM && cache.bn == TR::BN &&
          cache.bf16 == BF16)) {
        cache.valid = false;
        const flash_tma_view *views[3] = {&q, &k, &v};
        CUtensorMap *maps[3] = {&cache.maps.q, &cache.maps.k, &cache.maps.v};
        for (int i = 0; i < 3; ++i) {
            const flash_tma_view &w = *views[i];
            const int e = tma_encode_3d_strided(maps[i], w.base, BF16, (uint64_t)w.cols, (uint64_t)w.rows,
                                                (uint64_t)w.heads, (uint64_t)w.row_stride, (uint64_t)w.head_stride,
                                                i == 0 ? TR::BM : TR::BN);
            if (e != 0) return e;
        }
        cache.q = q, cache.k = k, cache.v = v, cache.bm = TR::BM, cache.bn = TR::BN, cache.bf16 = BF16;
        cache.valid = true;
    }
    *out = cache.maps;
    return 0;
}

/* SERVING's own checks and fields (flash_tma_serving.cuh): the device arrays, a page size that
 * holds whole key blocks, 32-bit map rows. 0, or -1 after exec_fail. */
template <class TR>
static int flash_tma_serving_of(exec_context *ctx, const attn_problem *pr, const attn_tensors *t, const char *who,
                                flash_tma_serving *sv)
{
    *sv = {};
    if (const char *missing = attn_serving_arrays_missing(pr, t)) return exec_fail(ctx, __FILE__, __LINE__, who, missing);
    if (pr->page_size > 0 && (pr->page_size % TR::BN != 0 || pr->num_pages * pr->page_size > INT32_MAX))
        return exec_fail(ctx, __FILE__, __LINE__, who,
                         "the TMA kernel reads pages that hold whole key blocks (page_size a multiple of 128), "
                         "fewer than 2^31 slots");
    if (pr->total_q > INT32_MAX || pr->total_kv > INT32_MAX || pr->heads > INT32_MAX)
        return exec_fail(ctx, __FILE__, __LINE__, who, "a serving batch of 2^31 tokens or heads");
    sv->cu_q = pr->ragged ? t->cu_seqlens_q : nullptr;
    sv->cu_kv = pr->ragged ? t->cu_seqlens_kv : nullptr;
    sv->block_table = pr->page_size > 0 ? t->block_table : nullptr;
    sv->heads = (int)pr->heads;
    sv->pages_per_seq = pr->page_size > 0 ? (int)pr->seqs->pages_per_seq : 0;
    sv->blocks_per_page = pr->page_size > 0 ? (int)(pr->page_size / TR::BN) : 0;
    return 0;
}

/* Host side: enqueue one forward of configuration TR on ctx->stream: a persistent grid, one
 * CTA per SM looping over tiles. SERVING: a paged or ragged batch (its own instantiation; the
 * dense kernels refuse one). */
template <class TR, class T, bool BF16, bool SERVING = false>
static int flash_tma_launch(exec_context *ctx, const attn_problem *pr, const attn_tensors *t, const char *who)
{
    if (pr->head_dim != TR::D) return exec_fail(ctx, __FILE__, __LINE__, who, "head_dim differs from the kernel's");
    if (attn_dv(pr) != TR::DV) return exec_fail(ctx, __FILE__, __LINE__, who, "head_dim_v differs from the kernel's");
    if (ctx->cc != 90) return exec_fail(ctx, __FILE__, __LINE__, who, "the TMA kernel runs on sm_90 only");
    if (SERVING != (pr->ragged || pr->page_size > 0))
        return exec_fail(ctx, __FILE__, __LINE__, who,
                         SERVING ? "the serving kernel takes paged and ragged batches only" : "a paged or ragged batch "
                                                                                             "needs the serving kernel");
    flash_tma_params params = {};
    flash_tma_work &a = params.work;
    const int rc = flash_prepare_launch(ctx, pr, t, TR::SMEM_BYTES, who, &a.p);
    if (rc != 0) return rc < 0 ? rc : 0;
    if (!(a.p.scale_log2 != 0.f && std::isfinite(a.p.scale_log2)))
        return exec_fail(ctx, __FILE__, __LINE__, who, "the TMA kernel needs a finite nonzero scale");
    a.sv = {};
    if (SERVING && flash_tma_serving_of<TR>(ctx, pr, t, who, &a.sv) != 0) return -1;
    const int64_t bh = pr->batch * pr->heads, m_tiles = (pr->seq_q + TR::BM - 1) / TR::BM;
    const int64_t group = pr->heads / attn_kv_heads(pr), kv_bh = bh / group;
    if (bh * m_tiles > INT32_MAX) return exec_fail(ctx, __FILE__, __LINE__, who, "too many tiles");
    a.bh = (int)bh;
    a.m_tiles = (int)m_tiles;
    a.n_tiles = (int)(bh * m_tiles);
    /* L2 sections of whole K/V groups (FLASH_TMA_L2_SECTION_BYTES); a STATIC section is one
     * query head, and the group's next query head follows it in the order at once */
    const int64_t kv_head_bytes = std::max<int64_t>(pr->seq_kv * (TR::D + TR::DV) * 2, 1);
    const int64_t kv_heads_per_sec = std::max<int64_t>(1, TR::L2_SECTION_BYTES / kv_head_bytes);
    a.sec_heads = TR::L2_SECTION_BYTES == 0 ? 1 : (int)std::min<int64_t>(bh, group * kv_heads_per_sec);
    a.m_ascending = pr->mask == ATTN_MASK_NONE;
    if (SERVING && pr->ragged) {
        /* One section: query blocks descending across every sequence (the tiles of the longest
         * sequences' last rows first, the costliest under a causal mask), skipping the tiles
         * past a shorter sequence's end (flash_tma_claim). Sections of heads would take the
         * sequences one after another and leave the last long one for the tail. */
        a.sec_heads = (int)bh;
        a.m_ascending = 0;
    }

    flash_tma_view vq, vk, vv;
    if (!SERVING) {
        vq = flash_tma_view_dense(t->q, TR::D, pr->seq_q, bh);
        vk = flash_tma_view_dense(t->k, TR::D, pr->seq_kv, kv_bh);
        vv = flash_tma_view_dense(t->v, TR::DV, pr->seq_kv, kv_bh);
    } else {
        const int64_t hkv = attn_kv_heads(pr), kv_rows = pr->page_size > 0 ? pr->num_pages * pr->page_size : pr->total_kv;
        vq = pr->ragged ? flash_tma_view_tokens(t->q, TR::D, pr->total_q, pr->heads)
                        : flash_tma_view_dense(t->q, TR::D, pr->seq_q, bh);
        vk = flash_tma_view_tokens(t->k, TR::D, kv_rows, hkv);
        vv = flash_tma_view_tokens(t->v, TR::DV, kv_rows, hkv);
    }
    const int e = flash_tma_maps_of<TR, BF16>(vq, vk, vv, &params.maps);
    if (e != 0) {
        char why[96];
        snprintf(why, sizeof why, "cuTensorMapEncodeTiled failed (CUresult %d)", e);
        return exec_fail(ctx, __FILE__, __LINE__, who, why);
    }
    a.ctr_slot = (int)(flash_tma_ctr_next.fetch_add(1, std::memory_order_relaxed) % FLASH_TMA_CTR_SLOTS);
    static std::atomic<unsigned long long> smem_set(0), smem_set_gw(0);
    const bool gw = SERVING || flash_gqa_window(pr);
    void (*kernel)(const flash_tma_maps, const flash_tma_work);
    if constexpr (SERVING) kernel = flash_tma_kernel<TR, T, BF16, true, true>;
    else kernel = gw ? flash_tma_kernel<TR, T, BF16, true> : flash_tma_kernel<TR, T, BF16, false>;
    if (flash_kernel_smem_once(ctx, kernel, TR::SMEM_BYTES, gw ? smem_set_gw : smem_set) != 0) return -1;
    const int grid = std::min(a.n_tiles, std::max(ctx->sm_count, 1));
    kernel<<<grid, TR::THREADS, TR::SMEM_BYTES, ctx->stream>>>(params.maps, params.work);
    LAUNCH_TRY(ctx);
    return 0;
}

#endif
