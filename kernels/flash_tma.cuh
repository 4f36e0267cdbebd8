/* flash_tma.cuh — the `flash` kernel v6 for Hopper (sm_90a): FlashAttention-3's structure, head
 * dim 64 and 128. v5 (flash_wgmma.cuh) put both products on wgmma but kept FA2's machine: every
 * thread copies K/V with cp.async and one CTA-wide barrier per key block holds the warpgroups
 * in step, so softmax and the tensor cores take turns. Here the roles are split:
 *
 *   warpgroup 0, the producer: one thread issues every load as a TMA bulk tensor copy (tma.cuh;
 *     Q once per tile, per key block its K then the previous block's V, into STAGES-deep rings)
 *     and hands each buffer over through an mbarrier ("full": the bytes landed); it picks the tiles and
 *     passes each tile's number to the consumers in shared memory under the Q barrier. Its
 *     warps give their registers up (setmaxnreg.dec) and all but that thread leave.
 *   warpgroups 1..WGS, the consumers, 64 query rows each (BM = 64·WGS), take the registers
 *     (setmaxnreg.inc) and release each buffer through another mbarrier ("empty": every
 *     consumer warp's wgmma reading it has retired). No CTA barrier in the loop.
 *
 * Per key block j (walked from the first block up: causal tiles of one head that start together
 * then read the same K/V blocks at the same moment, as equal tiles always do; the masked blocks
 * come last. Against walking down: 2-3% faster in interleaved sustained windows, 0.3% in
 * isolated ones, bench/NOTES.md), each consumer warpgroup:
 *   1. issues S_j = Q·K_jᵀ (wgmma; K from shared memory, Q from registers where Q_IN_REGS,
 *      loaded once a tile) and O += P_j-1·V_j-1 (P from registers: the previous block's
 *      softmax) as two groups, without waiting;
 *   2. waits for S_j only, releases K_j, runs the online softmax of block j (scale folded into
 *      one FFMA per score before exp2) while P·V is still on the tensor cores;
 *   3. waits for P·V, releases V_j-1, rescales O (only when a row max outgrew by 2^8 the max P
 *      was taken against: rare after the first blocks), packs P_j.
 * With PINGPONG the issues of step 1 are a critical section passed round the consumer
 * warpgroups by named barriers (bar.sync own, bar.arrive next): one warpgroup's softmax runs
 * while the other's products run.
 *
 * Tiles: persistent grid (one CTA per SM) or one CTA per tile; the tile order is heads-fastest
 * within L2 sections of heads, query blocks descending (the longest causal tiles first):
 * sections of heads whose K and V fit in 16 MB when causal, one head when not (equal tiles that
 * run in step then read the same K/V blocks at the same moment, and the L2 serves them
 * together). A persistent CTA takes tile blockIdx.x + k·gridDim.x (STATIC: best when tiles are
 * equal, non-causal) or the next from a counter (DYNAMIC: best for causal). Blocks
 * above the causal diagonal are never loaded; only blocks reaching past the first row's visible
 * keys are masked.
 *
 * Shared memory (1024-byte aligned tiles, 128-byte swizzle, 64-column panels): Q BM·D·2,
 * K and V STAGES x BN·D·2 each, O staging BM·D·2 when O_SMEM (the epilogue packs O to 16 bits
 * there, each warp its own 16 rows, and stores them as 16-byte rows; Q stays free for the next
 * tile's load), 256 bytes of barriers and the tile slot. Measurements: bench/NOTES.md.
 *
 * Contract (flash_tma_launch checks): head_dim == TR::D, 16-bit types, q,k,v,out 16-byte
 * aligned contiguous [B,H,S,D], scale ≠ 0 and finite, sm_90 and a binary with sm_90a code.
 */
#ifndef FLASH_TMA_CUH
#define FLASH_TMA_CUH

#include <algorithm>
#include <atomic>
#include <cmath>

#include "kernels/flash_wgmma.cuh"
#include "kernels/tma.cuh"

/* The K and V bytes of the heads one L2 section holds (the tile order walks a section's heads
 * before the next's, so their K/V stay in L2 while every query block reads them). 16 MB, not
 * the 32 that would fit the 50 MB L2 on paper: at 32 the 132 CTAs spread over 16 heads of
 * S4096 D128 and K/V were read from DRAM 2.5 times over (678 MB a non-causal forward, L2 hit
 * 74%); at 16, 294 MB and 87%, 2% faster (bench/NOTES.md, "L2 sections"). The causal
 * (DYNAMIC) order keeps it: smaller sections start a section's longest tile late and leave a
 * tail (4 MB: 4-5% slower). STATIC uses sections of one head (L2_SECTION_BYTES 0): at S4096
 * D128 non-causal the 32 query blocks of a head run in step, their K/V reads take 43% fewer L2
 * lookups (69 M, cuDNN 84 M) and sustained forwards run 4-6% faster (bench/NOTES.md, fifth
 * session). */
#ifndef FLASH_TMA_L2_SECTION_BYTES
#define FLASH_TMA_L2_SECTION_BYTES (16ll << 20)
#endif

/* How the CTAs of a persistent grid take tiles: STATIC tile = blockIdx.x + k·gridDim.x;
 * DYNAMIC the next tile from a counter (atomicAdd) once a tile's loads are issued, so CTAs
 * that drew short causal tiles take more. */
enum { FLASH_TMA_STATIC = 0, FLASH_TMA_DYNAMIC = 1 };

/* D head dim, WGS consumer warpgroups (64 rows each), BN keys per block, STAGES of the K and V
 * rings, SCHED (above); TREE: the softmax's row max and row sum as pairwise trees (5 dependent
 * steps for a thread's 32 values of a row instead of 16: a shorter softmax, which bounds short
 * D64 tiles). */
template <int D_, int WGS_, int BN_, int STAGES_, int SCHED_ = FLASH_TMA_STATIC, bool TREE_ = false>
struct flash_tma_traits {
    static constexpr int D = D_, WGS = WGS_, BN = BN_, STAGES = STAGES_, SCHED = SCHED_;
    static constexpr bool TREE = TREE_;
    /* The L2 section above (0: one head); a configuration derived from this one may redefine
     * it (tests/gpu/fused_check.cu times other sizes side by side). */
    static constexpr long long L2_SECTION_BYTES = SCHED == FLASH_TMA_STATIC ? 0 : FLASH_TMA_L2_SECTION_BYTES;
    /* How far (log2 units) the row max may outgrow the one P is taken against before O is
     * rescaled (flash_wg_new_max; 0: at every move of the max). */
    static constexpr int RESCALE_SLACK = 8;
    /* Q·Kᵀ takes Q from registers (loaded by ldmatrix once a tile; its buffer is then free for
     * the next tile's Q at once) rather than from shared memory at every key block: 32 KB less
     * shared-memory reading a block at D128, 14% of what the products and TMA move there. Costs
     * D/4 registers a thread, so only the 240-register split of 2 consumer warpgroups has it
     * (with 3 and 160 registers ptxas spills and serializes the wgmma). */
    static constexpr bool Q_IN_REGS = WGS_ == 2 && BN_ == 128;
    static constexpr int BM = 64 * WGS, THREADS = 128 * (WGS + 1);
    static constexpr int PANELS = D / 64; /* 64-column swizzled panels per row */
    static constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2, O_BYTES = BM * D * 2;
    /* registers per thread after setmaxnreg: producer / consumers (FA3's split; 65536 in all) */
    static constexpr int PRODUCER_REGS = WGS == 2 ? 24 : 32, CONSUMER_REGS = WGS == 2 ? 240 : 160;
    static constexpr uint32_t BARS_BYTES = 256; /* the mbarriers and the tile slot, after the tiles */
    static constexpr uint32_t TILE_SLOT = BARS_BYTES - 8;
    static constexpr size_t SMEM_BYTES = 1024 + Q_BYTES + 2 * STAGES * (size_t)KV_BYTES + O_BYTES + BARS_BYTES;
    static_assert(D == 64 || D == 128, "head_dim 64 or 128");
    static_assert(BN == 64 || BN == 128, "key blocks of 64 or 128");
    static_assert(WGS == 2 || WGS == 3, "2 or 3 consumer warpgroups");
    static_assert(8 * (2 + 4 * STAGES) <= (int)TILE_SLOT, "barriers fit");
    static_assert(128 * PRODUCER_REGS + 128 * WGS * CONSUMER_REGS <= 65536, "register split");
};

/* What the host hands over besides the three tensor maps. */
struct flash_tma_params {
    flash_params p;
    int bh;        /* batch·heads */
    int m_tiles;   /* query tiles per head */
    int sec_heads; /* heads per L2 section */
    int n_tiles;   /* bh · m_tiles */
    int ctr_slot;  /* DYNAMIC: this launch's counter in flash_tma_tile_ctr */
};

/* DYNAMIC's tile counters, zero between launches: the CTA that draws the last value resets its
 * slot. Launches rotate over the slots, so launches that overlap on different streams use
 * different counters (no allocation, no memset per launch). One array per translation unit. */
#define FLASH_TMA_CTR_SLOTS 64
static __device__ unsigned flash_tma_tile_ctr[FLASH_TMA_CTR_SLOTS];
static std::atomic<unsigned> flash_tma_ctr_next(0); /* the host's rotation over the slots */

/* Tile `tile` of the order described above: its head and query block. */
__device__ __forceinline__ void flash_tma_tile(const flash_tma_params &a, int tile, int &bh, int &m_block)
{
    const int per_sec = a.sec_heads * a.m_tiles;
    const int sec = tile / per_sec, r = tile - sec * per_sec;
    const int h0 = sec * a.sec_heads, hn = min(a.sec_heads, a.bh - h0);
    m_block = a.m_tiles - 1 - r / hn;
    bh = h0 + r % hn;
}

/* v[0] = v[0] op v[1] op ... op v[2W-1] as a tree of depth log2(2W): v[i] op= v[i+W], then
 * W/2, ... (compile-time indices throughout, so v stays in registers). */
template <int W, class Op> __device__ __forceinline__ void flash_tma_fold(float *v, Op op)
{
    if constexpr (W >= 1) {
#pragma unroll
        for (int i = 0; i < W; ++i) v[i] = op(v[i], v[i + W]);
        flash_tma_fold<W / 2>(v, op);
    }
}

/* Online softmax of one block in place, the scale folded into the exponent: with scale > 0
 * (POS) the row max of the raw scores gives the max of the scaled ones, with scale < 0 the row
 * min; masked scores become the value that scales to −inf. alpha = the factor O must be
 * rescaled by; the sums are this lane's partial sums. */
template <int BN, bool POS, bool TREE, int SLACK>
__device__ __forceinline__ void flash_tma_softmax(float (&s)[BN / 2], flash_wg_rows &st, float (&alpha)[2],
                                                  const flash_params &p, int row0, int n0, bool need_mask, int t)
{
    const float lost = POS ? -INFINITY : INFINITY;
    if (need_mask) flash_wg_mask<BN>(s, p, row0, n0, t, lost);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float mx = lost, v[BN / 8];
        if constexpr (TREE) {
#pragma unroll
            for (int i = 0; i < BN / 8; ++i)
                v[i] = POS ? fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]) : fminf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]);
            flash_tma_fold<BN / 16>(v, [](float x, float y) { return POS ? fmaxf(x, y) : fminf(x, y); });
            mx = v[0];
        } else {
#pragma unroll
            for (int i = 0; i < BN / 8; ++i) {
                if (POS) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
                else mx = fminf(mx, fminf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
            }
        }
        const float o1 = __shfl_xor_sync(0xffffffffu, mx, 1);
        mx = POS ? fmaxf(mx, o1) : fminf(mx, o1);
        const float o2 = __shfl_xor_sync(0xffffffffu, mx, 2);
        mx = POS ? fmaxf(mx, o2) : fminf(mx, o2);
        const float m_use = flash_wg_new_max<SLACK>(st, r, mx * p.scale_log2, alpha[r]); /* ±inf·scale = −inf: nothing visible */
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < BN / 8; ++i) {
            s[4 * i + 2 * r] = flash_exp2(fmaf(s[4 * i + 2 * r], p.scale_log2, -m_use));
            s[4 * i + 2 * r + 1] = flash_exp2(fmaf(s[4 * i + 2 * r + 1], p.scale_log2, -m_use));
            if constexpr (TREE) v[i] = s[4 * i + 2 * r] + s[4 * i + 2 * r + 1];
            else sum += s[4 * i + 2 * r] + s[4 * i + 2 * r + 1];
        }
        if constexpr (TREE) {
            flash_tma_fold<BN / 16>(v, [](float x, float y) { return x + y; });
            sum = v[0];
        }
        st.sum[r] = st.sum[r] * alpha[r] + sum;
    }
}

template <class TR>
__device__ __forceinline__ void flash_tma_softmax_any(float (&s)[TR::BN / 2], flash_wg_rows &st, float (&alpha)[2],
                                                      const flash_params &p, int row0, int n0, bool need_mask, int t)
{
    if (p.scale_log2 > 0.f)
        flash_tma_softmax<TR::BN, true, TR::TREE, TR::RESCALE_SLACK>(s, st, alpha, p, row0, n0, need_mask, t);
    else
        flash_tma_softmax<TR::BN, false, TR::TREE, TR::RESCALE_SLACK>(s, st, alpha, p, row0, n0, need_mask, t);
}

/* Issue S = Q·Kᵀ (one group) from this warpgroup's Q rows at s_qw and the K tile at s_kt: one
 * m64nBNk16 per 16 columns of D (32 bytes into a 128-byte row, then the next 64-column panel).
 * Each descriptor is encoded once and advanced by constants: the issue, which the ping-pong
 * passes round, is the products and little else. */
template <class TR, bool BF16>
__device__ __forceinline__ void flash_tma_issue_s(float (&s)[TR::BN / 2], const uint32_t (&qf)[TR::D / 16][4],
                                                  uint32_t s_qw, uint32_t s_kt)
{
    const uint64_t qa = wgmma_desc_sw128(s_qw, 16, 1024), kb = wgmma_desc_sw128(s_kt, 16, 1024);
#pragma unroll
    for (int ks = 0; ks < TR::D / 16; ++ks) {
        const uint32_t col = (ks & 3) * 32, panel = ks >> 2;
        const uint64_t kd = wgmma_desc_advance(kb, panel * TR::BN * 128 + col);
        if constexpr (TR::Q_IN_REGS)
            wgmma_rs128<BF16>(s, qf[ks], kd, ks > 0);
        else
            wgmma_ss<TR::BN, BF16>(s, wgmma_desc_advance(qa, panel * TR::BM * 128 + col), kd, ks > 0);
    }
    wgmma_commit();
}

/* This warp's Q rows as the A fragments of Q·Kᵀ (Q_IN_REGS), one ldmatrix.x4 per k16 step from
 * the swizzled Q tile: lane l addresses row 8·((l/8)%2) + l%8 of the warp's 16, 16-byte chunk
 * 2·(k step % 4) + l/16 of panel k step / 4, stored at chunk ^ (row % 8). */
template <class TR>
__device__ __forceinline__ void flash_tma_load_q(uint32_t (&qf)[TR::D / 16][4], uint32_t s_q, int warp_row0, int lane)
{
    const int row = warp_row0 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
    for (int ks = 0; ks < TR::D / 16; ++ks) {
        const int chunk = (ks & 3) * 2 + (lane >> 4);
        const uint32_t addr = s_q + (ks >> 2) * TR::BM * 128 + row * 128 + ((chunk ^ (lane & 7)) << 4);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(qf[ks][0]), "=r"(qf[ks][1]), "=r"(qf[ks][2]), "=r"(qf[ks][3])
                     : "r"(addr));
    }
}

/* Issue O += P·V (one group) from the V tile at s_vt: one m64nDk16 per 16 keys (D 128: the
 * product spans both 64-column panels, whose distance is the descriptor's leading offset). */
template <class TR, bool BF16>
__device__ __forceinline__ void flash_tma_issue_pv(float (&o)[TR::D / 2], const uint32_t (&pa)[TR::BN / 16][4],
                                                   uint32_t s_vt)
{
    const uint64_t vb = wgmma_desc_sw128(s_vt, TR::D == 128 ? TR::BN * 128 : 1024, 1024);
#pragma unroll
    for (int kk = 0; kk < TR::BN / 16; ++kk) {
        if constexpr (TR::D == 128)
            wgmma_rs_tb128<BF16>(o, pa[kk], wgmma_desc_advance(vb, kk * 16 * 128));
        else
            wgmma_rs_tb<BF16>(o, pa[kk], wgmma_desc_advance(vb, kk * 16 * 128));
    }
    wgmma_commit();
}

template <int N> __device__ __forceinline__ void flash_tma_fence(float (&x)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i) wgmma_fence_operand(x[i]);
}

/* O *= alpha per row, skipped when no row of the warp got a new max (warp-uniform branch). */
template <int D> __device__ __forceinline__ void flash_tma_rescale(float (&o)[D / 2], const float (&alpha)[2])
{
    if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
        o[4 * i] *= alpha[0];
        o[4 * i + 1] *= alpha[0];
        o[4 * i + 2] *= alpha[1];
        o[4 * i + 3] *= alpha[1];
    }
}

template <int BN, bool BF16>
__device__ __forceinline__ void flash_tma_pack_p(const float (&s)[BN / 2], uint32_t (&pa)[BN / 16][4])
{
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
        for (int q = 0; q < 4; ++q) pa[kk][q] = flash_pack2<BF16>(s[8 * kk + 2 * q], s[8 * kk + 2 * q + 1]);
}

/* Barrier slots (8 bytes each) after the tiles. */
enum { FLASH_TMA_Q_FULL = 0, FLASH_TMA_Q_EMPTY = 1, FLASH_TMA_KV = 2 };

template <class TR, class T, bool BF16>
__global__ void __launch_bounds__(TR::THREADS, 1)
    flash_tma_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                     const __grid_constant__ CUtensorMap map_v, const flash_tma_params a)
{
#if WGMMA_AVAILABLE && TMA_AVAILABLE
    constexpr int D = TR::D, BM = TR::BM, BN = TR::BN, STAGES = TR::STAGES, WGS = TR::WGS;
    extern __shared__ uint8_t flash_tma_smem[];
    const uint32_t raw = flash_smem_addr(flash_tma_smem);
    const uint32_t s_q = (raw + 1023u) & ~1023u;
    const uint32_t s_k = s_q + TR::Q_BYTES;             /* STAGES x K */
    const uint32_t s_v = s_k + STAGES * TR::KV_BYTES;   /* STAGES x V */
    const uint32_t s_o = s_v + STAGES * TR::KV_BYTES;   /* O staging */
    const uint32_t s_bar = s_o + TR::O_BYTES;           /* mbarriers */
    uint8_t *o_ptr = flash_tma_smem + (s_o - raw);
    volatile int *tile_slot = reinterpret_cast<volatile int *>(flash_tma_smem + (s_bar - raw) + TR::TILE_SLOT);
    /* K ring: full[s] = bar(2+s), empty[s] = bar(2+STAGES+s); V ring after it */
    auto bar = [&](int i) { return s_bar + 8u * (uint32_t)i; };
    const int k_full = FLASH_TMA_KV, k_empty = FLASH_TMA_KV + STAGES, v_full = FLASH_TMA_KV + 2 * STAGES,
              v_empty = FLASH_TMA_KV + 3 * STAGES;
    const flash_params &p = a.p;

    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    if (tid == 0) {
        tma_mbar_init(bar(FLASH_TMA_Q_FULL), 1);
        tma_mbar_init(bar(FLASH_TMA_Q_EMPTY), 4 * WGS); /* lane 0 of every consumer warp */
        for (int s = 0; s < STAGES; ++s) {
            tma_mbar_init(bar(k_full + s), 1);
            tma_mbar_init(bar(k_empty + s), 4 * WGS); /* every consumer warp */
            tma_mbar_init(bar(v_full + s), 1);
            tma_mbar_init(bar(v_empty + s), 4 * WGS);
        }
        tma_fence_mbar_init();
    }
    __syncthreads(); /* the last CTA-wide barrier: the producer's warps leave below */

    if (wg == 0) {
        /* ------------------------------------------------ producer
         * Per tile: wait until every consumer warp is done with Q (Q empty), write the tile's
         * number into the tile slot, load Q (or, for a tile without visible keys and for the
         * final "no more tiles" message, arrive on Q full without data), then per key block in
         * visiting order its K and the previous block's V (K first: S_j needs K_j while P·V
         * still reads the previous V), then the last V. The slot is read by the consumers
         * after Q full. */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(TR::PRODUCER_REGS));
        if (warp != 0 || lane != 0) return;
        tma_prefetch_map(&map_q);
        tma_prefetch_map(&map_k);
        tma_prefetch_map(&map_v);
        uint32_t kv_iter = 0, tile_iter = 0;
        auto load_kv = [&](const CUtensorMap *map, uint32_t ring, int full, int empty, uint32_t it, int j, int bh) {
            const int st = (int)(it % STAGES);
            tma_mbar_wait(bar(empty + st), ((it / STAGES) & 1) ^ 1);
            tma_mbar_expect_tx(bar(full + st), TR::KV_BYTES);
#pragma unroll
            for (int h = 0; h < TR::PANELS; ++h) {
                const uint32_t dst = ring + st * TR::KV_BYTES + h * BN * 128;
                tma_load_3d(dst, map, bar(full + st), 64 * h, j * BN, bh);
            }
        };
        for (int tile = blockIdx.x;;) {
            tma_mbar_wait(bar(FLASH_TMA_Q_EMPTY), (tile_iter & 1) ^ 1); /* last tile's Q read */
            *tile_slot = tile;
            if (tile >= a.n_tiles) {
                tma_mbar_arrive(bar(FLASH_TMA_Q_FULL)); /* "no more tiles" */
                break;
            }
            int bh, m_block;
            flash_tma_tile(a, tile, bh, m_block);
            const int m0 = m_block * BM;
            const int n_blocks = flash_tile_keys_of(p, m0, BM, BN).n_blocks;
            if (n_blocks == 0) {
                tma_mbar_arrive(bar(FLASH_TMA_Q_FULL)); /* the consumers write zeros */
            } else {
                tma_mbar_expect_tx(bar(FLASH_TMA_Q_FULL), TR::Q_BYTES);
#pragma unroll
                for (int h = 0; h < TR::PANELS; ++h)
                    tma_load_3d(s_q + h * BM * 128, &map_q, bar(FLASH_TMA_Q_FULL), 64 * h, m0, bh);
                /* not unrolled: the producer has 24 registers, and ptxas spilled this loop
                 * unrolled */
#pragma unroll 1
                for (int j = 0; j < n_blocks; ++j, ++kv_iter) {
                    load_kv(&map_k, s_k, k_full, k_empty, kv_iter, j, bh);
                    if (j > 0) load_kv(&map_v, s_v, v_full, v_empty, kv_iter - 1, j - 1, bh);
                }
                load_kv(&map_v, s_v, v_full, v_empty, kv_iter - 1, n_blocks - 1, bh);
            }
            ++tile_iter;
            if constexpr (TR::SCHED == FLASH_TMA_DYNAMIC) {
                const unsigned f = atomicAdd(&flash_tma_tile_ctr[a.ctr_slot], 1u);
                if (f == (unsigned)a.n_tiles - 1) flash_tma_tile_ctr[a.ctr_slot] = 0; /* the last draw of the launch */
                tile = (int)min((unsigned)a.n_tiles, gridDim.x + f);
            } else {
                tile += gridDim.x;
            }
        }
        return;
    }

    /* ---------------------------------------------------- consumers */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(TR::CONSUMER_REGS));
    const int wgi = wg - 1, g = lane >> 2, t = lane & 3;
    const int wg_row0 = wgi * 64, my_row0 = wg_row0 + warp * 16 + g;
    const uint32_t s_qw = s_q + wg_row0 * 128;
    const int sched_me = 1 + wgi, sched_next = 1 + (wgi + 1) % WGS; /* named barrier ids */
    auto turn_begin = [&]() { tma_bar_sync(sched_me, 256); };
    auto turn_end = [&]() { tma_bar_arrive(sched_next, 256); };
    auto release = [&](int b) {
        if (lane == 0) tma_mbar_arrive(bar(b));
    };
    if (wgi == 0) tma_bar_arrive(sched_me, 256); /* the first turn is warpgroup 1's */

    uint32_t kv_iter = 0;
    for (uint32_t tile_iter = 0;; ++tile_iter) {
        tma_mbar_wait(bar(FLASH_TMA_Q_FULL), tile_iter & 1);
        const int tile = *tile_slot;
        if (tile >= a.n_tiles) break;
        int bh, m_block;
        flash_tma_tile(a, tile, bh, m_block);
        const int m0 = m_block * BM;
        const flash_tile_keys keys = flash_tile_keys_of(p, m0, BM, BN);
        const int n_blocks = keys.n_blocks, vis_min = keys.vis_min;
        T *g_o = static_cast<T *>(p.out) + (int64_t)bh * p.seq_q * D;
        if (n_blocks == 0) { /* no row sees a key: zeros (this warpgroup's rows) */
            for (int i = tid - 128 * wg; i < 64 * (D / 8); i += 128) {
                const int row = m0 + wg_row0 + i / (D / 8);
                if (row < p.seq_q) *reinterpret_cast<uint4 *>(g_o + (int64_t)row * D + (i % (D / 8)) * 8) = make_uint4(0, 0, 0, 0);
            }
            __syncwarp(); /* every lane has read the tile slot */
            release(FLASH_TMA_Q_EMPTY);
            continue;
        }
        uint32_t qf[D / 16][4];
        if constexpr (TR::Q_IN_REGS) {
            flash_tma_load_q<TR>(qf, s_q, wg_row0 + warp * 16, lane);
            __syncwarp(); /* every lane has read Q and the tile slot */
            release(FLASH_TMA_Q_EMPTY);
        }
        float o[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
        uint32_t pa[BN / 16][4];
        flash_wg_rows st = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
        float s[BN / 2], alpha[2];

        /* the first block visited (masked when it reaches past vis_min) */
        int kst = (int)(kv_iter % STAGES);
        tma_mbar_wait(bar(k_full + kst), (kv_iter / STAGES) & 1);
        turn_begin();
        wgmma_fence();
        flash_tma_issue_s<TR, BF16>(s, qf, s_qw, s_k + kst * TR::KV_BYTES);
        turn_end();
        wgmma_wait<0>();
        flash_tma_fence(s);
        release(k_empty + kst);
        if (!TR::Q_IN_REGS && n_blocks == 1) release(FLASH_TMA_Q_EMPTY);
        flash_tma_softmax_any<TR>(s, st, alpha, p, m0 + my_row0, 0, BN > vis_min, t); /* keys 0..BN-1 */
        flash_tma_pack_p<BN, BF16>(s, pa);
        int vst = kst; /* V stage of the block P belongs to */
        uint32_t vph = (kv_iter / STAGES) & 1;
        ++kv_iter;

        for (int i = 1; i < n_blocks; ++i, ++kv_iter) {
            kst = (int)(kv_iter % STAGES);
            tma_mbar_wait(bar(k_full + kst), (kv_iter / STAGES) & 1);
            tma_mbar_wait(bar(v_full + vst), vph);
            turn_begin();
            wgmma_fence();
            flash_tma_issue_s<TR, BF16>(s, qf, s_qw, s_k + kst * TR::KV_BYTES);
            flash_tma_issue_pv<TR, BF16>(o, pa, s_v + vst * TR::KV_BYTES);
            turn_end();
            wgmma_wait<1>(); /* S_j; the previous block's P·V still running */
            flash_tma_fence(s);
            release(k_empty + kst);
            if (!TR::Q_IN_REGS && i == n_blocks - 1) release(FLASH_TMA_Q_EMPTY); /* the tile's last read of Q */
            const int n0 = i * BN;
            flash_tma_softmax_any<TR>(s, st, alpha, p, m0 + my_row0, n0, n0 + BN > vis_min, t);
            wgmma_wait<0>(); /* that P·V: O and P free, its V read */
            flash_tma_fence(o);
            release(v_empty + vst);
            flash_tma_rescale<D>(o, alpha);
            flash_tma_pack_p<BN, BF16>(s, pa);
            vst = kst;
            vph = (kv_iter / STAGES) & 1;
        }
        /* the last block's P·V */
        tma_mbar_wait(bar(v_full + vst), vph);
        turn_begin();
        wgmma_fence();
        flash_tma_issue_pv<TR, BF16>(o, pa, s_v + vst * TR::KV_BYTES);
        turn_end();
        wgmma_wait<0>();
        flash_tma_fence(o);
        release(v_empty + vst);

        /* epilogue: O / l, then 16-byte rows through this warp's 16 rows of the staging tile */
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float inv = flash_row_inv(st.sum[r]); /* no visible key: zeros */
            const int lr = my_row0 + 8 * r;
#pragma unroll
            for (int i = 0; i < D / 8; ++i)
                *reinterpret_cast<uint32_t *>(o_ptr + flash_wg_off<BM>(lr, i) + 4 * t) =
                    flash_pack2<BF16>(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
        }
        __syncwarp();
        constexpr int CH = D / 8, WARP_CHUNKS = 16 * CH;
#pragma unroll
        for (int it = 0; it < WARP_CHUNKS / 32; ++it) {
            const int idx = it * 32 + lane;
            const int lr = wg_row0 + warp * 16 + idx / CH, c = idx % CH;
            const int row = m0 + lr;
            if (row < p.seq_q)
                *reinterpret_cast<uint4 *>(g_o + (int64_t)row * D + c * 8) =
                    *reinterpret_cast<const uint4 *>(o_ptr + flash_wg_off<BM>(lr, c));
        }
        __syncwarp(); /* the next tile's epilogue overwrites these rows */
    }
    if (wgi == 0) tma_bar_sync(sched_me, 256); /* take back the last warpgroup's final arrive */
#else
    __trap(); /* not compiled for sm_90a: flash_tma_launch never launches it */
#endif
}

/* The tensor maps of the last problem this host thread launched (encoding costs a few µs of
 * host time; a benchmark repeats one problem). Keyed by everything the maps encode. */
struct flash_tma_maps {
    const void *q, *k, *v;
    int64_t bh, seq_q, seq_kv;
    int d, bm, bn;
    bool bf16, valid;
    CUtensorMap mq, mk, mv;
};

/* Host side: enqueue one forward of configuration TR on ctx->stream: a persistent grid, one
 * CTA per SM looping over tiles. */
template <class TR, class T, bool BF16>
static int flash_tma_launch(exec_context *ctx, const attn_problem *pr, const attn_tensors *t, const char *who)
{
    if (pr->head_dim != TR::D) return exec_fail(ctx, __FILE__, __LINE__, who, "head_dim differs from the kernel's");
    if (ctx->cc != 90) return exec_fail(ctx, __FILE__, __LINE__, who, "the TMA kernel runs on sm_90 only");
    flash_tma_params a;
    const int rc = flash_prepare_launch(ctx, pr, t, TR::SMEM_BYTES, who, &a.p);
    if (rc != 0) return rc < 0 ? rc : 0;
    if (!(a.p.scale_log2 != 0.f && std::isfinite(a.p.scale_log2)))
        return exec_fail(ctx, __FILE__, __LINE__, who, "the TMA kernel needs a finite nonzero scale");
    const int64_t bh = pr->batch * pr->heads, m_tiles = (pr->seq_q + TR::BM - 1) / TR::BM;
    if (bh * m_tiles > INT32_MAX) return exec_fail(ctx, __FILE__, __LINE__, who, "too many tiles");
    a.bh = (int)bh;
    a.m_tiles = (int)m_tiles;
    a.n_tiles = (int)(bh * m_tiles);
    const int64_t kv_head_bytes = 2 * pr->seq_kv * TR::D * 2;
    a.sec_heads = (int)std::max<int64_t>(1, std::min<int64_t>(bh, TR::L2_SECTION_BYTES / std::max<int64_t>(kv_head_bytes, 1)));

    static thread_local flash_tma_maps maps = {};
    if (!(maps.valid && maps.q == t->q && maps.k == t->k && maps.v == t->v && maps.bh == bh &&
          maps.seq_q == pr->seq_q && maps.seq_kv == pr->seq_kv && maps.d == TR::D && maps.bm == TR::BM &&
          maps.bn == TR::BN && maps.bf16 == BF16)) {
        maps.valid = false;
        const uint64_t skv_rows = (uint64_t)std::max<int64_t>(pr->seq_kv, 1);
        int e = tma_encode_3d(&maps.mq, t->q, BF16, TR::D, (uint64_t)pr->seq_q, (uint64_t)bh, TR::BM);
        if (e == 0) e = tma_encode_3d(&maps.mk, t->k, BF16, TR::D, skv_rows, (uint64_t)bh, TR::BN);
        if (e == 0) e = tma_encode_3d(&maps.mv, t->v, BF16, TR::D, skv_rows, (uint64_t)bh, TR::BN);
        if (e != 0) {
            char why[96];
            snprintf(why, sizeof why, "cuTensorMapEncodeTiled failed (CUresult %d)", e);
            return exec_fail(ctx, __FILE__, __LINE__, who, why);
        }
        maps.q = t->q, maps.k = t->k, maps.v = t->v, maps.bh = bh, maps.seq_q = pr->seq_q, maps.seq_kv = pr->seq_kv;
        maps.d = TR::D, maps.bm = TR::BM, maps.bn = TR::BN, maps.bf16 = BF16, maps.valid = true;
    }
    a.ctr_slot = (int)(flash_tma_ctr_next.fetch_add(1, std::memory_order_relaxed) % FLASH_TMA_CTR_SLOTS);
    static std::atomic<unsigned long long> smem_set(0);
    auto kernel = flash_tma_kernel<TR, T, BF16>;
    if (flash_kernel_smem_once(ctx, kernel, TR::SMEM_BYTES, smem_set) != 0) return -1;
    const int grid = std::min(a.n_tiles, std::max(ctx->sm_count, 1));
    kernel<<<grid, TR::THREADS, TR::SMEM_BYTES, ctx->stream>>>(maps.mq, maps.mk, maps.mv, a);
    LAUNCH_TRY(ctx);
    return 0;
}

#endif
