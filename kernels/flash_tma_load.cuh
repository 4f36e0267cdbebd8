/* flash_tma_load.cuh — v6's producer (flash_tma.cuh; FA3's mainloop `load`): one thread issues
 * every load of a tile as a TMA bulk tensor copy (tma.cuh) and hands each buffer over through an
 * mbarrier ("full": its bytes landed), once the consumers have released it ("empty"). Q first,
 * then per key block, walked from the first up, its K and the previous block's V (K first: S_j
 * needs K_j while P·V still reads the previous V), then the last V. Causal tiles that start
 * together so read the same K/V blocks at the same moment, as equal tiles always do
 * (docs/fused.md, "L2 lookups and the key walk"). The kernel hands the tiles over.
 */
#ifndef FLASH_TMA_LOAD_CUH
#define FLASH_TMA_LOAD_CUH

#include "kernels/flash_tma_traits.cuh"

/* Key block j of head bh (its first row in the map: key_row(j)) from `map` into ring stage
 * it % STAGES (BYTES a stage, PANELS 64-column panels a row: K's or V's), once the consumers
 * have released it (a fresh "empty" barrier passes parity 1 at once: the first pass never
 * waits). */
template <class TR, uint32_t BYTES, int PANELS, class KeyRow>
__device__ __forceinline__ void flash_tma_load_kv(const flash_tma_smem &sm, const CUtensorMap *map, uint32_t ring,
                                                  int full, int empty, uint32_t it, int j, int bh,
                                                  const KeyRow &key_row)
{
    const int st = (int)(it % TR::STAGES);
    tma_mbar_wait(sm.bar(empty + st), ((it / TR::STAGES) & 1) ^ 1);
    tma_mbar_expect_tx(sm.bar(full + st), BYTES);
#pragma unroll
    for (int h = 0; h < PANELS; ++h) {
        const uint32_t dst = ring + st * BYTES + h * TR::BN * 128;
        tma_load_3d(dst, map, sm.bar(full + st), 64 * h, key_row(j), bh); /* per panel: the dense SASS's order */
    }
}
template <class TR, class KeyRow>
__device__ __forceinline__ void flash_tma_load_k(const flash_tma_maps &maps, const flash_tma_smem &sm, uint32_t it,
                                                 int j, int kvh, const KeyRow &key_row)
{
    flash_tma_load_kv<TR, TR::K_BYTES, TR::PANELS>(sm, &maps.k, sm.k, TR::BAR_K_FULL, TR::BAR_K_EMPTY, it, j, kvh,
                                                   key_row);
}
template <class TR, class KeyRow>
__device__ __forceinline__ void flash_tma_load_v(const flash_tma_maps &maps, const flash_tma_smem &sm, uint32_t it,
                                                 int j, int kvh, const KeyRow &key_row)
{
    flash_tma_load_kv<TR, TR::V_BYTES, TR::PANELS_V>(sm, &maps.v, sm.v, TR::BAR_V_FULL, TR::BAR_V_EMPTY, it, j, kvh,
                                                     key_row);
}

/* One tile's loads (the Q box at row q_row of map head q_head; key blocks n_min.. n_min +
 * n_blocks − 1, at least one, of K/V head kvh, block j at map row key_row(j):
 * flash_tma_serving.cuh): Q, then per key block its K and the previous block's V, then the
 * last V; kv_iter counts the ring stages used (advanced past them). */
template <class TR, class KeyRow>
__device__ __forceinline__ void flash_tma_load(const flash_tma_maps &maps, const flash_tma_smem &sm, int q_row,
                                               int q_head, int kvh, const KeyRow &key_row, int n_min, int n_blocks,
                                               uint32_t &kv_iter)
{
    tma_mbar_expect_tx(sm.bar(TR::BAR_Q_FULL), TR::Q_BYTES);
#pragma unroll
    for (int h = 0; h < TR::PANELS; ++h)
        tma_load_3d(sm.q + h * TR::BM * 128, &maps.q, sm.bar(TR::BAR_Q_FULL), 64 * h, q_row, q_head);
    /* not unrolled: the producer has 24 registers, and ptxas spilled this loop unrolled */
#pragma unroll 1
    for (int j = 0; j < n_blocks; ++j, ++kv_iter) {
        flash_tma_load_k<TR>(maps, sm, kv_iter, n_min + j, kvh, key_row);
        if (j > 0) flash_tma_load_v<TR>(maps, sm, kv_iter - 1, n_min + j - 1, kvh, key_row);
    }
    flash_tma_load_v<TR>(maps, sm, kv_iter - 1, n_min + n_blocks - 1, kvh, key_row);
}

#endif
