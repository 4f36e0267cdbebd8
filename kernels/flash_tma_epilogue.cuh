/* flash_tma_epilogue.cuh — v6's epilogue (flash_tma.cuh; FA3's epilogue `store`): a consumer
 * warp's O / l packed to 16 bits into its own 16 rows of the O staging tile (the 128-byte swizzle
 * of the other tiles: conflict-free), then stored as 16-byte row pieces (head dims whose rings
 * leave no room for the tile store from the accumulators). Each warp touches only
 * its own rows, so __syncwarp is all the ordering it needs, and Q's buffer stays free for the
 * producer's next load. Every store has a row predicate, never a TMA store: a serving tile that
 * crosses its sequence's end leaves the next sequence's rows to their own tile (FA3's varlen
 * epilogue does the same).
 */
#ifndef FLASH_TMA_EPILOGUE_CUH
#define FLASH_TMA_EPILOGUE_CUH

#include "kernels/flash_tma_mainloop.cuh"

/* This thread's rows of O (rows m0 + my_row0, + 8 of the head at g_o, o_stride elements apart:
 * DV dense, H·DV token-major; rows ≥ seq_q are left alone, another tile's or another sequence's),
 * normalised by the row sums; a row that saw no key is written as zeros. */
template <class TR, class T, bool BF16>
__device__ __forceinline__ void flash_tma_store(const flash_tma_regs<TR> &r, const flash_tma_smem &sm, T *g_o, int m0,
                                                int seq_q, int o_stride, const flash_tma_consumer &c)
{
    constexpr int DV = TR::DV, BM = TR::BM;
    const float(&o)[DV / 2] = r.o;
    const flash_wg_rows &st = r.st;
    if constexpr (!TR::STAGE_O) {
        /* no room for the staging tile: each quad of threads writes 16 contiguous bytes of a row
         * per 8 columns, and L2 merges the row's pieces before they reach memory */
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float inv = flash_row_inv(st.sum[r]);
            const int row = m0 + c.my_row0 + 8 * r;
            if (row >= seq_q) continue;
            T *g_row = g_o + (int64_t)row * o_stride + 2 * c.t;
#pragma unroll
            for (int i = 0; i < DV / 8; ++i)
                *reinterpret_cast<uint32_t *>(g_row + 8 * i) =
                    flash_pack2<BF16>(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
        }
    } else {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float inv = flash_row_inv(st.sum[r]); /* no visible key: zeros */
            const int lr = c.my_row0 + 8 * r;
#pragma unroll
            for (int i = 0; i < DV / 8; ++i)
                *reinterpret_cast<uint32_t *>(sm.o_ptr + flash_wg_off<BM>(lr, i) + 4 * c.t) =
                    flash_pack2<BF16>(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
        }
        __syncwarp();
        constexpr int CH = DV / 8, WARP_CHUNKS = 16 * CH;
#pragma unroll
        for (int it = 0; it < WARP_CHUNKS / 32; ++it) {
            const int idx = it * 32 + c.lane;
            const int lr = c.wg_row0 + c.warp * 16 + idx / CH, ch = idx % CH;
            const int row = m0 + lr;
            if (row < seq_q)
                *reinterpret_cast<uint4 *>(g_o + (int64_t)row * o_stride + ch * 8) =
                    *reinterpret_cast<const uint4 *>(sm.o_ptr + flash_wg_off<BM>(lr, ch));
        }
        __syncwarp(); /* the next tile's epilogue overwrites these rows */
    }
}

/* A tile whose rows see no key: this warpgroup's 64 rows of O as zeros (wg_thread: this
 * thread's index in the warpgroup; rows o_stride elements apart, as flash_tma_store's). */
template <class TR, class T>
__device__ __forceinline__ void flash_tma_store_zeros(T *g_o, int m0, int seq_q, int o_stride,
                                                      const flash_tma_consumer &c, int wg_thread)
{
    constexpr int DV = TR::DV;
    for (int i = wg_thread; i < 64 * (DV / 8); i += 128) {
        const int row = m0 + c.wg_row0 + i / (DV / 8);
        if (row < seq_q)
            *reinterpret_cast<uint4 *>(g_o + (int64_t)row * o_stride + (i % (DV / 8)) * 8) = make_uint4(0, 0, 0, 0);
    }
}

#endif
