/* flash_tma_traits.cuh — what v6 (flash_tma.cuh) is built from: its configuration (traits), the
 * one struct the host hands the kernel (params), where everything lives in shared memory, and
 * the order in which the CTAs of the persistent grid take tiles (FA3's kernel traits, params and
 * tile scheduler).
 */
#ifndef FLASH_TMA_TRAITS_CUH
#define FLASH_TMA_TRAITS_CUH

#include <atomic>

#include "kernels/flash_wgmma.cuh"
#include "kernels/tma.cuh"

/* How the CTAs take tiles: STATIC tile = blockIdx.x + k·gridDim.x (best when tiles are equal:
 * non-causal); DYNAMIC the next tile from a counter (atomicAdd) once a tile's loads are issued,
 * so CTAs that drew short causal tiles take more. */
enum { FLASH_TMA_STATIC = 0, FLASH_TMA_DYNAMIC = 1 };

/* The K and V bytes of the heads one L2 section holds under DYNAMIC tiles (STATIC: one head).
 * Why 16 MB and one head: docs/fused.md ("How fast", "L2 lookups and the key walk"). Under
 * grouped K/V heads a section holds whole groups: the bytes count K/V heads, and the query
 * heads of one group, adjacent in the section, take a query block one after the other. */
#define FLASH_TMA_L2_SECTION_BYTES (16ll << 20)

/* D head dim of Q and K, DV of V and O (DeepSeek-V3's 192 / 128), WGS consumer warpgroups (64
 * rows each), BN keys per block, STAGES of the K and V rings, SCHED (above); TREE: the softmax's
 * row max and row sum as pairwise trees (5 dependent steps for a thread's 32 values of a row
 * instead of 16: a shorter softmax, which bounds short D64 tiles; BN a power of two). A head
 * dim that is not a multiple of 64 (96) fills its last 64-column panel partly: TMA writes zeros
 * past the row's end, and the products read only the columns that exist. */
template <int D_, int WGS_, int BN_, int STAGES_, int SCHED_ = FLASH_TMA_STATIC, bool TREE_ = false, int DV_ = D_>
struct flash_tma_traits {
    static constexpr int D = D_, DV = DV_, WGS = WGS_, BN = BN_, STAGES = STAGES_, SCHED = SCHED_;
    static constexpr bool TREE = TREE_;
    /* Constants that tests/gpu/fused_check.cu redefines in configurations of its own: the L2
     * section (0: one head); how far (log2 units) a row max may outgrow the one P is taken
     * against before O is rescaled (flash_wg_new_max); Q·Kᵀ with Q from registers, loaded once a
     * tile, which only the 240-register split of 2 consumer warpgroups has room for, and only up
     * to head dim 128 (docs/fused.md, "Fewer instructions"). */
    static constexpr long long L2_SECTION_BYTES = SCHED == FLASH_TMA_STATIC ? 0 : FLASH_TMA_L2_SECTION_BYTES;
    static constexpr int RESCALE_SLACK = 8;
    static constexpr bool Q_IN_REGS = WGS_ == 2 && BN_ == 128 && D_ <= 128;
    static constexpr int BM = 64 * WGS, THREADS = 128 * (WGS + 1);
    /* 64-column swizzled panels per row of Q and K, and of V and O */
    static constexpr int PANELS = (D + 63) / 64, PANELS_V = (DV + 63) / 64;
    static constexpr uint32_t Q_BYTES = BM * PANELS * 128, K_BYTES = BN * PANELS * 128, V_BYTES = BN * PANELS_V * 128;
    /* registers per thread after setmaxnreg: producer / consumers (FA3's split; 65536 in all) */
    static constexpr int PRODUCER_REGS = WGS == 2 ? 24 : 32, CONSUMER_REGS = WGS == 2 ? 240 : 160;
    /* The mbarriers (8 bytes each, after the tiles): Q full and empty, then full[STAGES] and
     * empty[STAGES] of the K ring, then of the V ring. The tile slot is the last 8 bytes. */
    static constexpr int BAR_Q_FULL = 0, BAR_Q_EMPTY = 1, BAR_K_FULL = 2, BAR_K_EMPTY = 2 + STAGES,
                         BAR_V_FULL = 2 + 2 * STAGES, BAR_V_EMPTY = 2 + 3 * STAGES;
    static constexpr uint32_t BARS_BYTES = 256;
    static constexpr uint32_t TILE_SLOT = BARS_BYTES - 8;
    static constexpr size_t SMEM_MAX = 232448; /* sm_90's opt-in per CTA (227 KB) */
    static constexpr size_t SMEM_NO_O = 1024 + Q_BYTES + (size_t)STAGES * (K_BYTES + V_BYTES) + BARS_BYTES;
    /* O staged in shared memory for 16-byte row stores where it fits (not at head dim 192 and
     * 256, whose rings fill the rest); otherwise stored from the accumulators */
    static constexpr bool STAGE_O = SMEM_NO_O + (size_t)BM * PANELS_V * 128 <= SMEM_MAX;
    static constexpr uint32_t O_BYTES = STAGE_O ? BM * PANELS_V * 128 : 0;
    static constexpr size_t SMEM_BYTES = SMEM_NO_O + O_BYTES;
    static_assert(D == 64 || D == 96 || D == 128 || D == 192 || D == 256, "head_dim 64, 96, 128, 192 or 256");
    static_assert(DV == 64 || DV == 96 || DV == 128 || DV == 256, "head_dim_v 64, 96, 128 or 256");
    static_assert(BN == 64 || BN == 80 || BN == 128, "key blocks of 64, 80 or 128");
    static_assert(!TREE || (BN & (BN - 1)) == 0, "tree reductions over a power of two");
    static_assert(WGS == 2 || WGS == 3, "2 or 3 consumer warpgroups");
    static_assert(8 * (2 + 4 * STAGES) <= (int)TILE_SLOT, "barriers fit");
    static_assert(128 * PRODUCER_REGS + 128 * WGS * CONSUMER_REGS <= 65536, "register split");
    static_assert(SMEM_BYTES <= SMEM_MAX, "shared memory");
};

/* The tensor maps of Q, K and V (tma.cuh), which TMA reads where they are: in the kernel's
 * parameter space. */
struct flash_tma_maps {
    CUtensorMap q, k, v;
};

/* Where a serving batch's sequences lie (read by the SERVING kernels only, flash_tma_serving.cuh;
 * docs/serving.md has the layouts). */
struct flash_tma_serving {
    const int32_t *cu_q, *cu_kv; /* ragged: [B + 1] token offsets; NULL: every sequence seq_q and seq_kv long */
    const int32_t *block_table;  /* paged: [B, pages_per_seq] page ids; NULL: K/V packed by cu_kv */
    int heads;                   /* H (bh = b·H + h) */
    int pages_per_seq;           /* the block table's width */
    int blocks_per_page;         /* paged: page_size / BN (a multiple of BN: a key block lies in one page) */
};

/* The problem and its tiles. */
struct flash_tma_work {
    flash_params p;
    int bh;          /* batch·heads */
    int m_tiles;     /* query tiles per head */
    int sec_heads;   /* heads per L2 section */
    int n_tiles;     /* bh · m_tiles */
    int ctr_slot;    /* DYNAMIC: this launch's counter in flash_tma_tile_ctr */
    int m_ascending; /* GQA_WINDOW kernels: query blocks ascending (the longest tiles first under a
                        window without a causal mask, whose first rows see the most keys) */
    flash_tma_serving sv; /* last: the dense kernels' parameters keep their offsets */
};

/* All that crosses from host to kernel. The kernel takes its two halves as two parameters: the
 * maps __grid_constant__ (TMA takes their address), the work by value. As one __grid_constant__
 * struct, whose address then escapes, the work compiles to other SASS than the measured kernel's. */
struct flash_tma_params {
    flash_tma_maps maps;
    flash_tma_work work;
};

/* Shared memory (flash_tma_kernel lays it out): 1024-byte aligned tiles, 128-byte swizzle,
 * 64-column panels: Q BM·D·2, K STAGES x BN·D·2, V STAGES x BN·DV·2, O's staging tile BM·DV·2
 * (the epilogue's, where STAGE_O), then the barriers. */
struct flash_tma_smem {
    uint32_t q, k, v, o, bars; /* shared-window addresses */
    uint8_t *o_ptr;            /* the O tile for ordinary stores and loads */
    volatile int *tile_slot;   /* the tile the producer hands the consumers (under Q full) */
    __device__ __forceinline__ uint32_t bar(int i) const { return bars + 8u * (uint32_t)i; }
};

/* One thread sets the barriers up; a CTA barrier must follow before any other thread uses them.
 * "empty" barriers count one arrival per consumer warp (lane 0 of each). */
template <class TR> __device__ __forceinline__ void flash_tma_init_barriers(const flash_tma_smem &sm)
{
    tma_mbar_init(sm.bar(TR::BAR_Q_FULL), 1);
    tma_mbar_init(sm.bar(TR::BAR_Q_EMPTY), 4 * TR::WGS);
    for (int s = 0; s < TR::STAGES; ++s) {
        tma_mbar_init(sm.bar(TR::BAR_K_FULL + s), 1);
        tma_mbar_init(sm.bar(TR::BAR_K_EMPTY + s), 4 * TR::WGS);
        tma_mbar_init(sm.bar(TR::BAR_V_FULL + s), 1);
        tma_mbar_init(sm.bar(TR::BAR_V_EMPTY + s), 4 * TR::WGS);
    }
    tma_fence_mbar_init();
}

/* DYNAMIC's tile counters, zero between launches: the CTA that draws the last value resets its
 * slot. Launches rotate over the slots, so launches that overlap on different streams use
 * different counters (no allocation, no memset per launch). One array per translation unit. */
#define FLASH_TMA_CTR_SLOTS 64
static __device__ unsigned flash_tma_tile_ctr[FLASH_TMA_CTR_SLOTS];
static std::atomic<unsigned> flash_tma_ctr_next(0); /* the host's rotation over the slots */

/* Tile `tile` of the order: heads fastest within L2 sections of sec_heads heads, query blocks
 * descending (the longest causal tiles first; a tile's cost is its key blocks, and under a
 * causal mask, window or not, they do not decrease with the query block), or ascending where
 * m_ascending says so. Its head and query block. */
template <bool GQA_WINDOW>
__device__ __forceinline__ void flash_tma_tile(const flash_tma_work &a, int tile, int &bh, int &m_block)
{
    const int per_sec = a.sec_heads * a.m_tiles;
    const int sec = tile / per_sec, r = tile - sec * per_sec;
    const int h0 = sec * a.sec_heads, hn = min(a.sec_heads, a.bh - h0);
    m_block = GQA_WINDOW && a.m_ascending ? r / hn : a.m_tiles - 1 - r / hn;
    bh = h0 + r % hn;
}

/* The producer's next tile after `tile` (≥ n_tiles: none left). */
template <class TR> __device__ __forceinline__ int flash_tma_next_tile(const flash_tma_work &a, int tile)
{
    if constexpr (TR::SCHED == FLASH_TMA_DYNAMIC) {
        const unsigned f = atomicAdd(&flash_tma_tile_ctr[a.ctr_slot], 1u);
        if (f == (unsigned)a.n_tiles - 1) flash_tma_tile_ctr[a.ctr_slot] = 0; /* the last draw of the launch */
        return (int)min((unsigned)a.n_tiles, gridDim.x + f);
    } else {
        return tile + gridDim.x;
    }
}

#endif
