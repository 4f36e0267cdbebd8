/* flash_exact.cuh — the v4 `flash` kernel for head_dim 96 and 128: the head dim compiled in
 * (no run-time column checks anywhere), K/V in a 2-stage cp.async ring with one barrier per
 * key block, O rescaled only when a row max changes, and an epilogue that stages O through
 * shared memory for 16-byte coalesced stores. The generic kernel (flash_kernel.cuh) stays
 * selectable (run parameter impl=legacy). `efficient` runs this one too at head_dim 128
 * (64-row tiles; impl=legacy runs its v1, the bucket kernel).
 *
 * Why a separate body: with D = 128 compiled into flash_kernel.cuh's loop, ptxas spilled
 * 28-132 bytes at every 4-warp x 32-row tile (128 fp32 O accumulators + 64 S + fragments).
 * This body keeps the per-thread state small on purpose:
 *   - one barrier per key block instead of two (see Pipeline): the decisive change;
 *   - copy addresses: one 64-bit source pointer per tile and thread, the other rows at
 *     constant offsets (LDGSTS immediates) when THREADS is a multiple of D/8 (D128);
 *   - the mask's per-row visible-key count recomputed where needed (a few integer ops)
 *     rather than held across the loop.
 *
 * Register budget per thread (fp32 unless said), BN keys per block, MI m16 tiles per warp:
 *   O: MI·D/2   S/P: MI·BN/2   Q fragments: MI·D/4 b32 held (Q_IN_REGS) or MI·4 re-read
 *   from smem per k-step   K/V fragment: 4   softmax state: 4·MI   addresses, indices,
 *   mask and loop state: ~25.
 *   w4 (D128, BN 64, MI 2, Q from smem): 128 + 64 + 8 + 4 + 8 + ~25 ≈ 240 live at the peak
 *     (inside S = Q·Kᵀ) against 255 with 2 CTAs of 128 threads per SM: ptxas 252, no spill
 *     on sm_90 only with one barrier per block (two barriers spilled 16-80 B).
 *   w8 (D128, BN 64, MI 1, Q in registers): 64 + 32 + 32 + 4 + 4 + ~25 ≈ 160: ptxas 207,
 *     1 CTA of 256 threads per SM.
 *   efficient (D128, BM 64, MI 1, Q in registers): as w8 at 4 warps: ptxas 209, 2 CTAs/SM.
 *
 * Pipeline, per key block j: wait_group 0 (K_j and V_j, issued one block earlier, landed);
 *   __syncthreads (they are visible, and every warp is past block j-1, so ring stage
 *   (j+1)&1 is free); issue K_j+1 and V_j+1 into it as one group; S = Q·K_jᵀ; online
 *   softmax; O += P·V_j. One barrier per block: between barriers the warps drift apart, so
 *   one warp's softmax overlaps another's mma even with one CTA per SM (w8). Splitting K
 *   and V into separate groups would need a second barrier per block (V_j visible before
 *   P·V) and only helps the first block, whose loads nothing overlaps anyway.
 *
 * Everything else (masks, causal block skipping, reverse tile order, safe softmax for rows
 * with no visible key, fragment layouts) is as in flash_kernel.cuh, whose header states it.
 *
 * Contract: head_dim == TR::D exactly; q,k,v,out 16-byte aligned, contiguous (q, out
 * [B,H,Sq,D], k, v [B,Hkv,Skv,D]); gridDim.x = B·H, gridDim.y = ceil(Sq/BM) ≤ 65535.
 */
#ifndef FLASH_EXACT_CUH
#define FLASH_EXACT_CUH

#include <atomic>

#include "kernels/flash_kernel.cuh"

/* SM90_ONLY: the configuration spills on sm_80..sm_89 (ptxas allocates differently there),
 * so its kernel is compiled empty (a trap) for those and the host never launches it there. */
template <int D_, int BN_, int WARPS_, int MI_, bool Q_IN_REGS_, int MIN_BLOCKS_, bool SM90_ONLY_ = false>
struct flash_exact_traits {
    static constexpr int D = D_, BN = BN_, WARPS = WARPS_, MI = MI_, MIN_BLOCKS = MIN_BLOCKS_;
    static constexpr bool Q_IN_REGS = Q_IN_REGS_, SM90_ONLY = SM90_ONLY_;
    static constexpr int THREADS = WARPS * 32;
    static constexpr int BM = WARPS * 16 * MI;
    static constexpr bool SWIZZLE = (D % 64) == 0;
    static constexpr int CHUNKS = D / 8;               /* 16-byte chunks of one row */
    static constexpr int PITCH = SWIZZLE ? D : D + 8;  /* elements per smem row */
    static constexpr int Q_ELEMS = BM * PITCH;
    static constexpr int KV_ELEMS = BN * PITCH;
    static constexpr size_t SMEM_BYTES = (size_t)(Q_ELEMS + 4 * KV_ELEMS) * 2; /* Q, 2 x K, 2 x V */
    static_assert(D % 32 == 0 && BN % 16 == 0, "D multiple of 32, BN multiple of 16");
};

/* ROWS x D tile from global rows row0.. into smem; rows ≥ rows_total become zeros (cp.async
 * src-size 0). Issues cp.async only (caller commits). ROW_STRIDED: every thread copies one
 * chunk column of rows r0, r0 + RPI, ... (one source pointer and smem offset, the rest
 * immediates); when THREADS is not a multiple of the chunks per row (D96) the last
 * THREADS % CHUNKS threads copy nothing. Otherwise chunk i of the tile goes to thread i % THREADS. */
template <class TR, int ROWS, bool ROW_STRIDED, class T>
__device__ __forceinline__ void flash_exact_load(T *smem, const T *gbase, int row0, int rows_total)
{
    constexpr int D = TR::D, CH = TR::CHUNKS, TOTAL = ROWS * CH;
    constexpr int ITERS = (TOTAL + TR::THREADS - 1) / TR::THREADS;
    if constexpr (ROW_STRIDED) {
        constexpr int RPI = TR::THREADS / CH, ROW_ITERS = (ROWS + RPI - 1) / RPI;
        if (TR::THREADS % CH != 0 && (int)threadIdx.x >= RPI * CH) return;
        const int r0 = (int)threadIdx.x / CH, c = (int)threadIdx.x % CH;
        const T *src0 = gbase + ((int64_t)row0 + r0) * D + c * 8;
#pragma unroll
        for (int it = 0; it < ROW_ITERS; ++it) {
            const int r = r0 + it * RPI;
            if (ROWS % RPI == 0 || r < ROWS) {
                const bool ok = row0 + r < rows_total;
                flash_cp_async16(smem + flash_smem_off<TR>(r, c), ok ? src0 + it * RPI * D : gbase, ok ? 16 : 0);
            }
        }
    } else {
#pragma unroll
        for (int it = 0; it < ITERS; ++it) {
            const int i = it * TR::THREADS + (int)threadIdx.x;
            if (TOTAL % TR::THREADS == 0 || i < TOTAL) {
                const int r = i / CH, c = i % CH;
                const bool ok = row0 + r < rows_total;
                const T *src = ok ? gbase + ((int64_t)row0 + r) * D + c * 8 : gbase;
                flash_cp_async16(smem + flash_smem_off<TR>(r, c), src, ok ? 16 : 0);
            }
        }
    }
}

template <class TR, class T, bool BF16, bool GQA_WINDOW>
__global__ void __launch_bounds__(TR::THREADS, TR::MIN_BLOCKS) flash_exact_kernel(const flash_params p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    if constexpr (TR::SM90_ONLY) { /* never launched here (flash_exact_launch refuses); the rest is dead code */
        __trap();
        return;
    }
#endif
    constexpr int D = TR::D, BM = TR::BM, BN = TR::BN, MI = TR::MI, KS = D / 16;
    /* the GQA_WINDOW kernels copy in row strides at D96 too: fewer address registers, which
     * the window's bookkeeping needs (w4 spilled otherwise) */
    constexpr bool ROW_STRIDED = TR::THREADS % TR::CHUNKS == 0 || GQA_WINDOW;
    extern __shared__ uint4 flash_exact_smem[];
    T *s_q = reinterpret_cast<T *>(flash_exact_smem);
    T *s_k = s_q + TR::Q_ELEMS;
    T *s_v = s_k + 2 * TR::KV_ELEMS;

    flash_cta<T> cta;
    if (!flash_cta_begin<T, TR::THREADS, GQA_WINDOW>(p, BM, BN, D, cta)) return;
    const T *g_q = cta.tile.q, *g_k = cta.tile.k, *g_v = cta.tile.v;
    T *g_o = cta.tile.o;
    const int m0 = cta.tile.m0, n_min = cta.keys.n_min, n_max = n_min + cta.keys.n_blocks;
    const int seq_q = p.seq_q, seq_kv = p.seq_kv;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

    const int warp_row0 = warp * 16 * MI; /* this warp's rows: warp_row0 + mi*16 + (g, g+8) */

    /* prologue: one group (Q and the first key block, n_min, into its ring stage n_min & 1) */
    flash_exact_load<TR, BM, ROW_STRIDED>(s_q, g_q, m0, seq_q);
    flash_exact_load<TR, BN, ROW_STRIDED>(s_k + (n_min & 1) * TR::KV_ELEMS, g_k, n_min * BN, seq_kv);
    flash_exact_load<TR, BN, ROW_STRIDED>(s_v + (n_min & 1) * TR::KV_ELEMS, g_v, n_min * BN, seq_kv);
    flash_cp_async_commit();

    float o[MI][D / 8][4], row_max[MI][2], row_sum[MI][2];
    flash_acc_init<MI, D>(o, row_max, row_sum);

    /* ldmatrix row/chunk of this lane, see flash_mma.cuh for the fragment layouts */
    const int a_row = warp_row0 + (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4; /* Q (A), + mi*16 */
    const int k_row = (lane & 7) + (lane >> 4) * 8, k_chunk = (lane >> 3) & 1;            /* K (B) */
    const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_chunk = lane >> 4;            /* V (B, trans) */

    uint32_t q_frag[TR::Q_IN_REGS ? MI : 1][TR::Q_IN_REGS ? KS : 1][4];
    if constexpr (TR::Q_IN_REGS) {
        flash_cp_async_wait<0>(); /* Q and the first K, V landed */
        __syncthreads();
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ks = 0; ks < KS; ++ks)
                flash_ldmatrix_x4(q_frag[mi][ks], s_q + flash_smem_off<TR>(a_row + mi * 16, ks * 2 + a_chunk));
    }

    for (int j = n_min; j < n_max; ++j) {
        const int stage = j & 1;
        const T *s_kj = s_k + stage * TR::KV_ELEMS;
        const T *s_vj = s_v + stage * TR::KV_ELEMS;

        flash_cp_async_wait<0>(); /* K_j, V_j landed (the only group in flight) */
        __syncthreads();          /* K_j, V_j visible; every warp is past block j-1: stage^1 is free */
        if (j + 1 < n_max) {
            flash_exact_load<TR, BN, ROW_STRIDED>(s_k + (stage ^ 1) * TR::KV_ELEMS, g_k, (j + 1) * BN, seq_kv);
            flash_exact_load<TR, BN, ROW_STRIDED>(s_v + (stage ^ 1) * TR::KV_ELEMS, g_v, (j + 1) * BN, seq_kv);
            flash_cp_async_commit();
        }

        /* S = Q·K_jᵀ for this warp's MI x 16 rows x BN keys */
        float s[MI][BN / 8][4];
        flash_block_qk<TR, MI, BN, KS, BF16>(s, q_frag, s_q, s_kj, a_row, a_chunk, k_row, k_chunk, D);

        /* scale into log2 space, mask, online softmax. (Folding the scale into the exponent's
         * FFMA, FA2-style, would save BN·MI/2 FMULs per block but tips w4 at sm_90 into a
         * 4-12 byte spill; the scale may also be negative.) */
        const int n0 = j * BN;
        /* also every block reaching past seq_kv */
        const bool need_mask = flash_block_masked<GQA_WINDOW>(p, cta.keys, m0, BM, n0, BN);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            flash_block_scale_mask<BN, GQA_WINDOW>(s[mi], p, m0 + warp_row0 + mi * 16 + g, n0, need_mask, t);
            float alpha[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) alpha[r] = flash_block_softmax_row<BN>(s[mi], r, row_max[mi][r], row_sum[mi][r]);
            /* rescale O only when some row of the warp got a new max (warp-uniform branch):
             * past the first few blocks of a row that is most blocks, D/4 FMULs saved each */
            if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
                for (int i = 0; i < D / 8; ++i) {
                    o[mi][i][0] *= alpha[0];
                    o[mi][i][1] *= alpha[0];
                    o[mi][i][2] *= alpha[1];
                    o[mi][i][3] *= alpha[1];
                }
            }
        }

        /* O += P·V_j */
        flash_block_pv<TR, MI, BN, D, BF16>(o, s, s_vj, v_row, v_chunk, D);
    }
    /* Nothing is in flight here: the last block issued no loads. */

    /* Epilogue: O /= l into this warp's own rows of s_q (only this warp ever read them: the
     * Q fragments of row warp_row0.. come from those rows alone), then 16-byte stores of
     * whole rows. Same swizzle as the loads: the 4-byte writes of one instruction hit rows
     * g (8 distinct XOR patterns) x 4 lanes t: 32 distinct banks. */
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float inv = flash_row_inv(row_sum[mi][r]);
            const int lr = warp_row0 + mi * 16 + g + 8 * r;
#pragma unroll
            for (int i = 0; i < D / 8; ++i)
                *reinterpret_cast<uint32_t *>(s_q + flash_smem_off<TR>(lr, i) + 2 * t) =
                    flash_pack2<BF16>(o[mi][i][2 * r] * inv, o[mi][i][2 * r + 1] * inv);
        }
    __syncwarp();
    constexpr int WARP_CHUNKS = 16 * MI * TR::CHUNKS;
#pragma unroll
    for (int it = 0; it < (WARP_CHUNKS + 31) / 32; ++it) {
        const int idx = it * 32 + lane;
        if (WARP_CHUNKS % 32 == 0 || idx < WARP_CHUNKS) {
            const int lr = warp_row0 + idx / TR::CHUNKS, c = idx % TR::CHUNKS;
            const int row = m0 + lr;
            if (row < seq_q)
                *reinterpret_cast<uint4 *>(g_o + (int64_t)row * D + c * 8) =
                    *reinterpret_cast<const uint4 *>(s_q + flash_smem_off<TR>(lr, c));
        }
    }
}

/* Host side: enqueue one forward of configuration TR on ctx->stream. The caller has checked
 * dtype, head_dim == TR::D and the shape limits. */
template <class TR, class T, bool BF16>
static int flash_exact_launch(exec_context *ctx, const attn_problem *pr, const attn_tensors *t, const char *who)
{
    if (pr->head_dim != TR::D) return exec_fail(ctx, __FILE__, __LINE__, who, "head_dim differs from the kernel's");
    if (TR::SM90_ONLY && ctx->cc < 90) return exec_fail(ctx, __FILE__, __LINE__, who, "configuration is sm_90 only");
    static std::atomic<unsigned long long> smem_set(0), smem_set_gw(0);
    if (flash_gqa_window(pr))
        return flash_launch_tiles(ctx, pr, t, who, flash_exact_kernel<TR, T, BF16, true>, TR::BM, TR::THREADS,
                                  TR::SMEM_BYTES, smem_set_gw);
    return flash_launch_tiles(ctx, pr, t, who, flash_exact_kernel<TR, T, BF16, false>, TR::BM, TR::THREADS,
                              TR::SMEM_BYTES, smem_set);
}

#endif
