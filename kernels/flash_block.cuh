/* flash_block.cuh — one key block of the mma.sync flash bodies, step by step: S = Q·Kᵀ, scale
 * into log2 space and mask, the online-softmax update of a row, P packed to 16 bits, O += P·V,
 * and the final 1/l. Shared by the generic body (flash_kernel.cuh) and the exact-head-dim
 * body (flash_exact.cuh), which differ in how they pipeline, stage and store, not in this
 * arithmetic. The wgmma body (flash_wgmma.cuh) has other fragment layouts and its own.
 *
 * Every helper works on one warp's fragments (flash_mma.cuh has the layouts; g = lane/4,
 * t = lane%4): S and O as [MI][n/8][4] C tiles over MI m16 row tiles. All are force-inlined
 * loops over compile-time bounds, so a body compiles to what it did with the loops written
 * in place (ptxas -v: the same registers and spills for every configuration).
 *
 * head_dim: the generic body's k-steps and P·V column steps at or past head_dim are
 * skipped (a padded bucket's zero columns); the exact body passes D, so the test folds away.
 */
#ifndef FLASH_BLOCK_CUH
#define FLASH_BLOCK_CUH

#include <math.h>
#include <stdint.h>

#include "kernels/flash_mma.cuh"

/* S = Q·K_jᵀ for this warp's MI x 16 rows and BN keys. Q comes from q_frag (QM = MI, QK = KS:
 * fragments held in registers) or, when TR::Q_IN_REGS is false, is re-read from s_q at each
 * k-step. a_row/a_chunk, k_row/k_chunk: this lane's ldmatrix row and chunk for Q and K. */
template <class TR, int MI, int BN, int KS, bool BF16, int QM, int QK, class T>
__device__ __forceinline__ void flash_block_qk(float (&s)[MI][BN / 8][4], const uint32_t (&q_frag)[QM][QK][4],
                                               const T *s_q, const T *s_kj, int a_row, int a_chunk, int k_row,
                                               int k_chunk, int head_dim)
{
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int i = 0; i < BN / 8; ++i) s[mi][i][0] = s[mi][i][1] = s[mi][i][2] = s[mi][i][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
        if (ks * 16 < head_dim) {
            uint32_t a_loc[TR::Q_IN_REGS ? 1 : MI][4];
            if constexpr (!TR::Q_IN_REGS) {
#pragma unroll
                for (int mi = 0; mi < MI; ++mi)
                    flash_ldmatrix_x4(a_loc[mi], s_q + flash_smem_off<TR>(a_row + mi * 16, ks * 2 + a_chunk));
            }
#pragma unroll
            for (int np = 0; np < BN / 16; ++np) {
                uint32_t b[4];
                flash_ldmatrix_x4(b, s_kj + flash_smem_off<TR>(np * 16 + k_row, ks * 2 + k_chunk));
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    const uint32_t *a;
                    if constexpr (TR::Q_IN_REGS) a = q_frag[mi][ks];
                    else a = a_loc[mi];
                    flash_mma<BF16>(s[mi][2 * np], a, b[0], b[1]);
                    flash_mma<BF16>(s[mi][2 * np + 1], a, b[2], b[3]);
                }
            }
        }
    }
}

/* One m16 row tile of S (rows row and row + 8, keys n0..n0+BN-1): scaled into log2 space,
 * and, when the block needs it (need_mask: flash_block_masked), every key a row must not see
 * set to -inf: past its visible keys and, with GQA_WINDOW, left of its window's edge. The
 * visible-key counts and edges are recomputed here rather than held across the loop:
 * registers are what the bodies are short of. */
template <int BN, bool GQA_WINDOW>
__device__ __forceinline__ void flash_block_scale_mask(float (&s)[BN / 8][4], const flash_params &p, int row, int n0,
                                                       bool need_mask, int t)
{
#pragma unroll
    for (int i = 0; i < BN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[i][e] *= p.scale_log2;
    if (need_mask) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if constexpr (GQA_WINDOW) {
                const flash_key_range kr = flash_key_range_of(p, row + 8 * r, n0 + 2 * t);
#pragma unroll
                for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (kr.base + (unsigned)(i * 8 + e) >= kr.range) s[i][2 * r + e] = -INFINITY;
            } else {
                const int vis = flash_visible(p.mask, p.seq_q, p.seq_kv, row + 8 * r);
#pragma unroll
                for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (n0 + i * 8 + 2 * t + e >= vis) s[i][2 * r + e] = -INFINITY;
            }
        }
    }
}

/* The online-softmax step of row r (0: g, 1: g + 8) of one m16 tile: the block's max over the
 * quad's columns, the exponentials in place (S becomes P, unnormalised), and the running
 * sum of this lane's columns. Returns alpha = 2^(old max - new max), exactly 1 when the max
 * holds, by which O's row must be rescaled. A row with nothing visible yet keeps max -inf
 * and uses 0 in its place (no -inf - -inf). */
template <int BN>
__device__ __forceinline__ float flash_block_softmax_row(float (&s)[BN / 8][4], int r, float &row_max, float &row_sum)
{
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) mx = fmaxf(mx, fmaxf(s[i][2 * r], s[i][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(row_max, mx);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    const float alpha = flash_exp2(row_max - m_use);
    row_max = m_new;
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
        s[i][2 * r] = flash_exp2(s[i][2 * r] - m_use);
        s[i][2 * r + 1] = flash_exp2(s[i][2 * r + 1] - m_use);
        sum += s[i][2 * r] + s[i][2 * r + 1];
    }
    row_sum = row_sum * alpha + sum; /* partial over this lane's columns */
    return alpha;
}

/* O += P·V_j: P (the block's S after the softmax) packed to 16 bits k-step by k-step (two C
 * tiles are one A fragment), V read transposed from s_vj. v_row/v_chunk: this lane's
 * ldmatrix row and chunk for V. */
template <class TR, int MI, int BN, int D, bool BF16, class T>
__device__ __forceinline__ void flash_block_pv(float (&o)[MI][D / 8][4], const float (&s)[MI][BN / 8][4],
                                               const T *s_vj, int v_row, int v_chunk, int head_dim)
{
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t a[MI][4];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            a[mi][0] = flash_pack2<BF16>(s[mi][2 * kk][0], s[mi][2 * kk][1]);
            a[mi][1] = flash_pack2<BF16>(s[mi][2 * kk][2], s[mi][2 * kk][3]);
            a[mi][2] = flash_pack2<BF16>(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
            a[mi][3] = flash_pack2<BF16>(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
            if (dp * 16 < head_dim) {
                uint32_t b[4];
                flash_ldmatrix_x4_trans(b, s_vj + flash_smem_off<TR>(kk * 16 + v_row, dp * 2 + v_chunk));
#pragma unroll
                for (int mi = 0; mi < MI; ++mi) {
                    flash_mma<BF16>(o[mi][2 * dp], a[mi], b[0], b[1]);
                    flash_mma<BF16>(o[mi][2 * dp + 1], a[mi], b[2], b[3]);
                }
            }
        }
    }
}

/* 1/l for a row from this lane's partial sum (the quad's four lanes hold its columns): 0
 * for a row that saw no key, whose output is zeros (SDPA's safe softmax). */
__device__ __forceinline__ float flash_row_inv(float partial_sum)
{
    float l = partial_sum;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    return l > 0.f ? 1.f / l : 0.f;
}

#endif
