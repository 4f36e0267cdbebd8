/* flash_tma_mainloop.cuh — v6's consumers (flash_tma.cuh; FA3's mainloop `mma`): per tile, each
 * consumer warpgroup (64 query rows) runs Q·Kᵀ, the online softmax and P·V over the key blocks
 * the producer (flash_tma_load.cuh) hands it. Per key block j it
 *   1. issues S_j = Q·K_jᵀ (wgmma; K from shared memory, Q from registers where Q_IN_REGS,
 *      loaded once a tile) and O += P_j-1·V_j-1 (P from registers: the previous block's
 *      softmax) as two groups, without waiting;
 *   2. waits for S_j only, releases K_j, runs the online softmax of block j (scale folded into
 *      one FFMA per score before exp2) while P·V is still on the tensor cores;
 *   3. waits for P·V, releases V_j-1, rescales O (only when a row max outgrew by 2^RESCALE_SLACK
 *      the max P was taken against: rare after the first blocks), packs P_j.
 * The issues of step 1 are a critical section passed round the consumer warpgroups by named
 * barriers 1..WGS (bar.sync own, bar.arrive next: the ping-pong), so one warpgroup's softmax
 * runs while another's products run. A buffer is released by lane 0 of each warp once the
 * wgmma reading it has retired. Blocks above the causal diagonal and left of every row's window
 * are never loaded; only blocks reaching past the first row's visible keys, or starting left of
 * the last row's window edge, are masked (flash_tile_keys_of).
 */
#ifndef FLASH_TMA_MAINLOOP_CUH
#define FLASH_TMA_MAINLOOP_CUH

#include <cmath>

#include "kernels/flash_tma_traits.cuh"

/* A consumer thread's place (flash_tma_kernel fills it in): its warpgroup wgi among the
 * consumers, warp, lane (g = lane / 4, t = lane % 4: the accumulator layout, wgmma.cuh), its
 * rows of the tile, its Q rows and the named barriers of its ping-pong turn. */
struct flash_tma_consumer {
    int wgi, warp, lane, g, t;
    int wg_row0, my_row0;     /* the warpgroup's first row; this thread's rows: my_row0, my_row0 + 8 */
    uint32_t s_qw;            /* the warpgroup's rows of the Q tile */
    int sched_me, sched_next; /* named barrier ids: this warpgroup's turn, the next one's */
};

/* What a consumer thread carries through a tile, in registers: O (unnormalised) and the online
 * softmax's row state, which the epilogue reads, and the scores of the key block in hand. The
 * kernel holds them, as FA3's holds tOrO and softmax; S too, because declared inside
 * flash_tma_mma it compiles to other SASS (register allocation) than the measured kernel's. */
template <class TR> struct flash_tma_regs {
    float o[TR::DV / 2];
    flash_wg_rows st;
    float s[TR::BN / 2];
};

/* A consumer warp is done with the buffer of barrier `bar`. */
__device__ __forceinline__ void flash_tma_release(const flash_tma_consumer &c, uint32_t bar)
{
    if (c.lane == 0) tma_mbar_arrive(bar);
}
__device__ __forceinline__ void flash_tma_turn_begin(const flash_tma_consumer &c) { tma_bar_sync(c.sched_me, 256); }
__device__ __forceinline__ void flash_tma_turn_end(const flash_tma_consumer &c) { tma_bar_arrive(c.sched_next, 256); }

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
template <int BN, bool POS, bool TREE, int SLACK, bool GQA_WINDOW>
__device__ __forceinline__ void flash_tma_softmax(float (&s)[BN / 2], flash_wg_rows &st, float (&alpha)[2],
                                                  const flash_params &p, int row0, int n0, bool need_mask, int t)
{
    const float lost = POS ? -INFINITY : INFINITY;
    if (need_mask) flash_wg_mask<BN, GQA_WINDOW>(s, p, row0, n0, t, lost);
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

template <class TR, bool GQA_WINDOW>
__device__ __forceinline__ void flash_tma_softmax_any(float (&s)[TR::BN / 2], flash_wg_rows &st, float (&alpha)[2],
                                                      const flash_params &p, int row0, int n0, bool need_mask, int t)
{
    constexpr int BN = TR::BN, SLACK = TR::RESCALE_SLACK;
    if (p.scale_log2 > 0.f)
        flash_tma_softmax<BN, true, TR::TREE, SLACK, GQA_WINDOW>(s, st, alpha, p, row0, n0, need_mask, t);
    else
        flash_tma_softmax<BN, false, TR::TREE, SLACK, GQA_WINDOW>(s, st, alpha, p, row0, n0, need_mask, t);
}

/* Issue S = Q·Kᵀ (one group) from this warpgroup's Q rows at s_qw and the K tile at s_kt: one
 * m64nBNk16 per 16 columns of D (32 bytes into a 128-byte row, then the next 64-column panel;
 * at D 96 the last panel's second half, TMA's zeros, is never read).
 * Each descriptor is encoded once and advanced by constants: the issue, which the ping-pong
 * passes round, is the products and little else. */
template <class TR, bool BF16>
__device__ __forceinline__ void flash_tma_issue_s(float (&s)[TR::BN / 2], const uint32_t (&qf)[TR::D / 16][4],
                                                  uint32_t s_qw, uint32_t s_kt)
{
    uint64_t qa = wgmma_desc_sw128(s_qw, 16, 1024);
    const uint64_t kb = wgmma_desc_sw128(s_kt, 16, 1024);
    /* Past D128 the compiler would hold every k step's Q descriptor across the key loop, and
     * spill: encoded again per block, each costs an add where it is used */
    if constexpr (TR::D > 128) asm volatile("" : "+l"(qa));
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

/* Issue O += P·V (one group) from the V tile at s_vt: one m64nDVk16 per 16 keys. Past 64
 * columns the product spans several 64-column panels, whose distance is the descriptor's
 * leading offset; DV 256 is two n128 products, the second on O's columns 128.. from the third
 * panel on (an accumulator of n128 is the first or second half of an n256 one, wgmma.cuh). */
template <class TR, bool BF16>
__device__ __forceinline__ void flash_tma_issue_pv(float (&o)[TR::DV / 2], const uint32_t (&pa)[TR::BN / 16][4],
                                                   uint32_t s_vt)
{
    constexpr int DV = TR::DV, PANEL = TR::BN * 128;
    const uint64_t vb = wgmma_desc_sw128(s_vt, DV > 64 ? PANEL : 1024, 1024);
#pragma unroll
    for (int kk = 0; kk < TR::BN / 16; ++kk) {
        const uint64_t vd = wgmma_desc_advance(vb, kk * 16 * 128);
        if constexpr (DV == 256) {
            wgmma_rs_tb128<BF16>(*reinterpret_cast<float(*)[64]>(&o[0]), pa[kk], vd);
            wgmma_rs_tb128<BF16>(*reinterpret_cast<float(*)[64]>(&o[64]), pa[kk], wgmma_desc_advance(vd, 2 * PANEL));
        } else if constexpr (DV == 128) {
            wgmma_rs_tb128<BF16>(o, pa[kk], vd);
        } else if constexpr (DV == 96) {
            wgmma_rs_tb96<BF16>(o, pa[kk], vd);
        } else {
            wgmma_rs_tb<BF16>(o, pa[kk], vd);
        }
    }
    wgmma_commit();
}

/* After a wgmma wait: ordinary accesses to x stay below it (wgmma.cuh, wgmma_fence_operand). */
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

/* One tile's mainloop for this thread's rows m0 + my_row0 (+8): r.o (unnormalised) and r.st
 * over the key blocks `keys` names, from ring stage kv_iter on (advanced past them). Releases Q
 * once it is read. */
template <class TR, bool BF16, bool GQA_WINDOW>
__device__ __forceinline__ void flash_tma_mma(flash_tma_regs<TR> &r, const flash_tma_smem &sm, const flash_params &p,
                                              const flash_tma_consumer &c, int m0, const flash_tile_keys &keys,
                                              uint32_t &kv_iter)
{
    constexpr int D = TR::D, DV = TR::DV, BN = TR::BN, STAGES = TR::STAGES;
    float(&o)[DV / 2] = r.o, (&s)[BN / 2] = r.s;
    flash_wg_rows &st = r.st;
    const int n_blocks = keys.n_blocks, kn0 = keys.n_min * BN; /* kn0: the first key this tile reads */
    uint32_t qf[D / 16][4];
    if constexpr (TR::Q_IN_REGS) {
        flash_tma_load_q<TR>(qf, sm.q, c.wg_row0 + c.warp * 16, c.lane);
        __syncwarp(); /* every lane has read Q */
        flash_tma_release(c, sm.bar(TR::BAR_Q_EMPTY));
    }
#pragma unroll
    for (int i = 0; i < DV / 2; ++i) o[i] = 0.f;
    uint32_t pa[BN / 16][4];
    st = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
    float alpha[2];

    /* the first block visited (masked when it reaches past vis_min) */
    int kst = (int)(kv_iter % STAGES);
    tma_mbar_wait(sm.bar(TR::BAR_K_FULL + kst), (kv_iter / STAGES) & 1);
    flash_tma_turn_begin(c);
    wgmma_fence();
    flash_tma_issue_s<TR, BF16>(s, qf, c.s_qw, sm.k + kst * TR::K_BYTES);
    flash_tma_turn_end(c);
    wgmma_wait<0>();
    flash_tma_fence(s);
    flash_tma_release(c, sm.bar(TR::BAR_K_EMPTY + kst));
    if (!TR::Q_IN_REGS && n_blocks == 1) flash_tma_release(c, sm.bar(TR::BAR_Q_EMPTY));
    flash_tma_softmax_any<TR, GQA_WINDOW>(s, st, alpha, p, m0 + c.my_row0, kn0, /* keys kn0..kn0+BN-1 */
                                          flash_block_masked<GQA_WINDOW>(p, keys, m0, TR::BM, kn0, BN), c.t);
    flash_tma_pack_p<BN, BF16>(s, pa);
    int vst = kst; /* V stage of the block P belongs to */
    uint32_t vph = (kv_iter / STAGES) & 1;
    ++kv_iter;

    for (int i = 1; i < n_blocks; ++i, ++kv_iter) {
        kst = (int)(kv_iter % STAGES);
        tma_mbar_wait(sm.bar(TR::BAR_K_FULL + kst), (kv_iter / STAGES) & 1);
        tma_mbar_wait(sm.bar(TR::BAR_V_FULL + vst), vph);
        flash_tma_turn_begin(c);
        wgmma_fence();
        flash_tma_issue_s<TR, BF16>(s, qf, c.s_qw, sm.k + kst * TR::K_BYTES);
        flash_tma_issue_pv<TR, BF16>(o, pa, sm.v + vst * TR::V_BYTES);
        flash_tma_turn_end(c);
        wgmma_wait<1>(); /* S_j; the previous block's P·V still running */
        flash_tma_fence(s);
        flash_tma_release(c, sm.bar(TR::BAR_K_EMPTY + kst));
        if (!TR::Q_IN_REGS && i == n_blocks - 1) flash_tma_release(c, sm.bar(TR::BAR_Q_EMPTY)); /* the tile's last read of Q */
        const int n0 = kn0 + i * BN;
        flash_tma_softmax_any<TR, GQA_WINDOW>(s, st, alpha, p, m0 + c.my_row0, n0,
                                              flash_block_masked<GQA_WINDOW>(p, keys, m0, TR::BM, n0, BN), c.t);
        wgmma_wait<0>(); /* that P·V: O and P free, its V read */
        flash_tma_fence(o);
        flash_tma_release(c, sm.bar(TR::BAR_V_EMPTY + vst));
        flash_tma_rescale<DV>(o, alpha);
        flash_tma_pack_p<BN, BF16>(s, pa);
        vst = kst;
        vph = (kv_iter / STAGES) & 1;
    }
    /* the last block's P·V */
    tma_mbar_wait(sm.bar(TR::BAR_V_FULL + vst), vph);
    flash_tma_turn_begin(c);
    wgmma_fence();
    flash_tma_issue_pv<TR, BF16>(o, pa, sm.v + vst * TR::V_BYTES);
    flash_tma_turn_end(c);
    wgmma_wait<0>();
    flash_tma_fence(o);
    flash_tma_release(c, sm.bar(TR::BAR_V_EMPTY + vst));
}

#endif
