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
 * Contract (flash_tma_launch checks): head_dim == TR::D, head_dim_v == TR::DV, 16-bit types,
 * q,k,v,out 16-byte aligned contiguous (q [B,H,Sq,D], k [B,Hkv,Skv,D], v [B,Hkv,Skv,DV], out
 * [B,H,Sq,DV]), scale ≠ 0 and finite, sm_90 and a binary with sm_90a code.
 */
#ifndef FLASH_TMA_CUH
#define FLASH_TMA_CUH

#include <algorithm>
#include <atomic>
#include <cmath>

#include "kernels/flash_tma_epilogue.cuh"
#include "kernels/flash_tma_load.cuh"
#include "kernels/flash_tma_mainloop.cuh"
#include "kernels/flash_tma_traits.cuh"

template <class TR, class T, bool BF16, bool GQA_WINDOW>
__global__ void __launch_bounds__(TR::THREADS, 1)
    flash_tma_kernel(const __grid_constant__ flash_tma_maps maps, const flash_tma_work a)
{
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
            const flash_tile_keys keys = flash_tile_keys_of<GQA_WINDOW>(a.p, m0, TR::BM, TR::BN);
            if (keys.n_blocks == 0) tma_mbar_arrive(sm.bar(TR::BAR_Q_FULL)); /* no data: the consumers write zeros */
            else
                flash_tma_load<TR>(maps, sm, bh, (int)flash_kv_head<GQA_WINDOW>(a.p, bh), m0, keys.n_min, keys.n_blocks,
                                   kv_iter);
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
        const flash_tile_keys keys = flash_tile_keys_of<GQA_WINDOW>(a.p, m0, TR::BM, TR::BN);
        T *g_o = static_cast<T *>(a.p.out) + (int64_t)bh * a.p.seq_q * TR::DV;
        if (keys.n_blocks == 0) { /* no row sees a key */
            flash_tma_store_zeros<TR>(g_o, m0, a.p.seq_q, c, tid - 128 * wg);
            flash_tma_release(c, sm.bar(TR::BAR_Q_EMPTY));
            continue;
        }
        flash_tma_regs<TR> r;
        flash_tma_mma<TR, BF16, GQA_WINDOW>(r, sm, a.p, c, m0, keys, kv_iter);
        flash_tma_store<TR, T, BF16>(r, sm, g_o, m0, a.p.seq_q, c);
    }
    if (c.wgi == 0) tma_bar_sync(c.sched_me, 256); /* take back the last warpgroup's final arrive */
#else
    __trap(); /* not compiled for sm_90a: flash_tma_launch never launches it */
#endif
}

/* The tensor maps of the last problem this host thread launched (encoding costs a few µs of
 * host time; a benchmark repeats one problem), keyed by everything they encode. */
struct flash_tma_map_cache {
    const void *q, *k, *v;
    int64_t bh, kv_bh, seq_q, seq_kv;
    int d, dv, bm, bn;
    bool bf16, valid;
    flash_tma_maps maps;
};

/* Host side: enqueue one forward of configuration TR on ctx->stream: a persistent grid, one
 * CTA per SM looping over tiles. */
template <class TR, class T, bool BF16>
static int flash_tma_launch(exec_context *ctx, const attn_problem *pr, const attn_tensors *t, const char *who)
{
    if (pr->head_dim != TR::D) return exec_fail(ctx, __FILE__, __LINE__, who, "head_dim differs from the kernel's");
    if (attn_dv(pr) != TR::DV) return exec_fail(ctx, __FILE__, __LINE__, who, "head_dim_v differs from the kernel's");
    if (ctx->cc != 90) return exec_fail(ctx, __FILE__, __LINE__, who, "the TMA kernel runs on sm_90 only");
    flash_tma_params params;
    flash_tma_work &a = params.work;
    const int rc = flash_prepare_launch(ctx, pr, t, TR::SMEM_BYTES, who, &a.p);
    if (rc != 0) return rc < 0 ? rc : 0;
    if (!(a.p.scale_log2 != 0.f && std::isfinite(a.p.scale_log2)))
        return exec_fail(ctx, __FILE__, __LINE__, who, "the TMA kernel needs a finite nonzero scale");
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

    static thread_local flash_tma_map_cache cache = {};
    if (!(cache.valid && cache.q == t->q && cache.k == t->k && cache.v == t->v && cache.bh == bh &&
          cache.kv_bh == kv_bh && cache.seq_q == pr->seq_q && cache.seq_kv == pr->seq_kv && cache.d == TR::D && cache.dv == TR::DV &&
          cache.bm == TR::BM && cache.bn == TR::BN && cache.bf16 == BF16)) {
        cache.valid = false;
        const uint64_t skv_rows = (uint64_t)std::max<int64_t>(pr->seq_kv, 1);
        int e = tma_encode_3d(&cache.maps.q, t->q, BF16, TR::D, (uint64_t)pr->seq_q, (uint64_t)bh, TR::BM);
        if (e == 0) e = tma_encode_3d(&cache.maps.k, t->k, BF16, TR::D, skv_rows, (uint64_t)kv_bh, TR::BN);
        if (e == 0) e = tma_encode_3d(&cache.maps.v, t->v, BF16, TR::DV, skv_rows, (uint64_t)kv_bh, TR::BN);
        if (e != 0) {
            char why[96];
            snprintf(why, sizeof why, "cuTensorMapEncodeTiled failed (CUresult %d)", e);
            return exec_fail(ctx, __FILE__, __LINE__, who, why);
        }
        cache.q = t->q, cache.k = t->k, cache.v = t->v, cache.bh = bh, cache.kv_bh = kv_bh, cache.seq_q = pr->seq_q;
        cache.seq_kv = pr->seq_kv, cache.d = TR::D, cache.dv = TR::DV, cache.bm = TR::BM, cache.bn = TR::BN, cache.bf16 = BF16;
        cache.valid = true;
    }
    params.maps = cache.maps;
    a.ctr_slot = (int)(flash_tma_ctr_next.fetch_add(1, std::memory_order_relaxed) % FLASH_TMA_CTR_SLOTS);
    static std::atomic<unsigned long long> smem_set(0), smem_set_gw(0);
    const bool gw = flash_gqa_window(pr);
    auto kernel = gw ? flash_tma_kernel<TR, T, BF16, true> : flash_tma_kernel<TR, T, BF16, false>;
    if (flash_kernel_smem_once(ctx, kernel, TR::SMEM_BYTES, gw ? smem_set_gw : smem_set) != 0) return -1;
    const int grid = std::min(a.n_tiles, std::max(ctx->sm_count, 1));
    kernel<<<grid, TR::THREADS, TR::SMEM_BYTES, ctx->stream>>>(params.maps, params.work);
    LAUNCH_TRY(ctx);
    return 0;
}

#endif
