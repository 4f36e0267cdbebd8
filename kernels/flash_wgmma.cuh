/* flash_wgmma.cuh — the `flash` kernel for Hopper (sm_90a): FlashAttention-2's algorithm with
 * both matrix products on wgmma (wgmma.cuh) instead of mma.sync, head_dim 64 and 128.
 *
 * Why: on sm_90 mma.sync reaches about half of the tensor cores' rate; v4 (flash_exact.cuh)
 * tops out near 360 TFLOP/s at head_dim 128. wgmma reads its B operand (and here A for Q·Kᵀ)
 * straight from shared memory through a descriptor — no ldmatrix, no fragment registers —
 * and runs asynchronously while the warp goes on.
 *
 * Shape: a CTA = 2 warpgroups (8 warps, 256 threads) x 64 query rows each = 128 rows (BM).
 * Per key block of BN keys, each warpgroup:
 *   S = Q·K_jᵀ        wgmma m64nBNk16, A = Q and B = K_j from shared memory (K-major),
 *                     D/16 k steps, one group, waited for;
 *   online softmax    on S in registers, exactly as flash_exact.cuh (log2 space, ex2.approx,
 *                     conditional O rescale, safe for rows with no visible key);
 *   O += P·V_j        wgmma m64n64k16 per 64 columns of O, A = P packed to 16 bits in registers (the accumulator
 *                     layout is the A layout), B = V_j from shared memory with the transpose
 *                     bit (V is [key][d], d contiguous: MN-major), BN/16 k steps.
 * The two warpgroups share K/V and drift apart between barriers, so one's softmax overlaps the
 * other's matrix products (FA3 schedules that "ping-pong" explicitly; this does not).
 *
 * Pipeline: K/V in a 2-stage ring filled by cp.async (all 256 threads, 16-byte chunks, written
 * pre-swizzled in the 128-byte pattern wgmma reads), one barrier per key block as in v4:
 * wait for K_j/V_j, fence to the async proxy, barrier, issue K_j+1/V_j+1 into the other
 * stage, compute block j. Every wgmma is waited for within its block, so when a warpgroup
 * reaches the next barrier it no longer reads the stage the loads overwrite.
 *
 * Shared memory: Q BM·D·2 + 2 stages x (K + V) BN·D·2 (+1 KB to align the tiles to 1024 bytes):
 * 161 KB at D128/BN128 (1 CTA per SM), 81 KB at D64/BN128.
 * Epilogue: O / l packed to 16 bits into this warpgroup's own Q rows (swizzled the same way:
 * conflict-free), then each warp stores its 16 rows with 16-byte coalesced stores.
 *
 * Contract (flash_wg_launch checks): head_dim == head_dim_v == TR::D, 16-bit types, q,k,v,out 16-byte
 * aligned, contiguous (q, out [B,H,Sq,D], k, v [B,Hkv,Skv,D]); sm_90 and a binary with sm_90a
 * code (FLASH_HAVE_SM90A).
 */
#ifndef FLASH_WGMMA_CUH
#define FLASH_WGMMA_CUH

#include <atomic>

#include "kernels/flash_kernel.cuh"
#include "kernels/wgmma.cuh"

/* How a warpgroup orders its two products within a key block j:
 *   SERIAL   S_j, wait, softmax, P·V_j, wait (2 or 3 stages);
 *   DEFER    as SERIAL, but P·V_j stays in flight until S_j+1 is waited for: the tensor
 *            cores run P·V_j and S_j+1 back to back while the warps pass the barrier. P·V
 *            then reads stage j-1 while the loads of block j+1 land: 3 stages.
 * (FA3's overlap within a warpgroup, softmax_j under P·V_j-1, is v6's: flash_tma.cuh.) */
enum { FLASH_WG_SERIAL = 0, FLASH_WG_DEFER = 1 };

/* D head dim, BN keys per block, WARPGROUPS x 64 query rows per CTA, STAGES of the K/V ring,
 * SCHEDULE (above). */
template <int D_, int BN_, int WARPGROUPS_, int STAGES_, int SCHEDULE_>
struct flash_wg_traits {
    static constexpr int D = D_, BN = BN_, WARPGROUPS = WARPGROUPS_, STAGES = STAGES_;
    static constexpr int SCHEDULE = SCHEDULE_;
    static constexpr int THREADS = WARPGROUPS * 128, BM = WARPGROUPS * 64;
    static constexpr int CHUNKS = D / 8;    /* 16-byte chunks per row */
    static constexpr int SUBTILES = D / 64; /* 64-column (128-byte) swizzle sub-tiles per row */
    static constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static constexpr size_t SMEM_BYTES = Q_BYTES + 2 * STAGES * (size_t)KV_BYTES + 1024;
    static_assert(D == 64 || D == 128, "wgmma tiles: head_dim 64 or 128");
    static_assert(BN == 64 || BN == 128, "key blocks of 64 or 128");
    static_assert(STAGES == 2 || STAGES == 3, "2 or 3 stages");
    static_assert(SCHEDULE == FLASH_WG_SERIAL || STAGES == 3, "P·V in flight across blocks needs a third stage");
};

/* Byte offset of 16-byte chunk c of row r in a ROWS-row tile stored as 64-column swizzled
 * sub-tiles (wgmma.cuh). */
template <int ROWS> __device__ __forceinline__ uint32_t flash_wg_off(int r, int c)
{
    return (uint32_t)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

__device__ __forceinline__ void flash_wg_cp_async16(uint32_t smem_dst, const void *gmem_src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(gmem_src), "r"(src_bytes));
}

/* ROWS x D tile from global rows row0.. into the swizzled tile at shared address `dst`; rows
 * ≥ rows_total become zeros (their V rows meet P = 0: zeros keep NaN garbage out). Every
 * thread copies the same chunk column of rows r0, r0 + RPI, ...: RPI is a multiple of 8, so
 * the swizzle of its chunk is the same in every iteration. */
template <class TR, int ROWS, class T>
__device__ __forceinline__ void flash_wg_load(uint32_t dst, const T *gbase, int row0, int rows_total)
{
    constexpr int D = TR::D, CH = TR::CHUNKS, RPI = TR::THREADS / CH, ITERS = (ROWS + RPI - 1) / RPI;
    static_assert(TR::THREADS % CH == 0 && RPI % 8 == 0, "copy pattern");
    const int r0 = (int)threadIdx.x / CH, c = (int)threadIdx.x % CH;
    const T *src0 = gbase + ((int64_t)row0 + r0) * D + c * 8;
    const uint32_t dst0 = dst + flash_wg_off<ROWS>(r0, c);
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        if (ROWS % RPI != 0 && r0 + it * RPI >= ROWS) break;
        const bool ok = row0 + r0 + it * RPI < rows_total;
        flash_wg_cp_async16(dst0 + it * RPI * 128, ok ? src0 + (int64_t)it * RPI * D : gbase, ok ? 16 : 0);
    }
}

/* After a wgmma wait: keeps the compiler from moving ordinary accesses to O above the wait. */
template <class TR> __device__ __forceinline__ void flash_wg_fence_o(float (&o)[TR::SUBTILES][32])
{
#pragma unroll
    for (int h = 0; h < TR::SUBTILES; ++h)
#pragma unroll
        for (int i = 0; i < 32; ++i) wgmma_fence_operand(o[h][i]);
}

/* Issue O += P·V (one group): P (16-bit, registers) times the V tile at shared address s_vt.
 * No operand fence on O here: the asm's "+f" operands already order the writes before it, and
 * an empty asm "defining" O between wgmma_fence and this issue makes ptxas serialize every
 * wgmma of the stage (warning C7515). */
template <class TR, bool BF16>
__device__ __forceinline__ void flash_wg_issue_pv(float (&o)[TR::SUBTILES][32], const uint32_t (&pa)[TR::BN / 16][4],
                                                  uint32_t s_vt)
{
#pragma unroll
    for (int kk = 0; kk < TR::BN / 16; ++kk)
#pragma unroll
        for (int h = 0; h < TR::SUBTILES; ++h) {
            /* keys 16kk.. = 16 rows of 128 bytes into sub-tile h (wgmma.cuh: both offsets 1024,
             * since one 64-column sub-tile is all an n64 product reads) */
            const uint64_t dv = wgmma_desc_sw128(s_vt + h * TR::BN * 128 + kk * 16 * 128, 1024, 1024);
            wgmma_rs_tb<BF16>(o[h], pa[kk], dv);
        }
    wgmma_commit();
}

/* Issue S = Q·K_jᵀ (one group) for this warpgroup's 64 rows: D/16 k steps, each reading the
 * Q rows at s_qw and the K tile at s_kt (k step ks: sub-tile ks/4, 32 bytes into its rows). */
template <class TR, bool BF16>
__device__ __forceinline__ void flash_wg_issue_s(float (&s)[TR::BN / 2], uint32_t s_qw, uint32_t s_kt)
{
#pragma unroll
    for (int ks = 0; ks < TR::D / 16; ++ks) {
        const uint32_t koff = (ks & 3) << 5;
        const uint64_t da = wgmma_desc_sw128(s_qw + (ks >> 2) * TR::BM * 128 + koff, 16, 1024);
        const uint64_t db = wgmma_desc_sw128(s_kt + (ks >> 2) * TR::BN * 128 + koff, 16, 1024);
        wgmma_ss<TR::BN, BF16>(s, da, db, ks > 0);
    }
    wgmma_commit();
}

/* The running softmax state of this thread's two rows (row r: my_row0 + 8r). */
struct flash_wg_rows {
    float max[2], sum[2];
};

/* Row r's new running max from its block max (log2 units): alpha, the factor O and the sum
 * are rescaled by, is exactly 1 where the max held. Returns the max to subtract (0 for a row
 * that has seen no key yet: no −inf − −inf). SLACK > 0 (log2 units): the max is kept until a
 * block's exceeds it by more than SLACK, so after the first blocks O is almost never rescaled
 * (FlashAttention-4's lazy rescaling); P then reaches 2^SLACK at most, which 16-bit P (fp16 to
 * 65504) and the fp32 sums hold without loss. */
template <int SLACK = 0>
__device__ __forceinline__ float flash_wg_new_max(flash_wg_rows &st, int r, float block_max, float &alpha)
{
    const float m_new = SLACK == 0 ? fmaxf(st.max[r], block_max)
                                   : block_max > st.max[r] + (float)SLACK ? block_max : st.max[r]; /* −inf + SLACK = −inf */
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    alpha = flash_exp2(st.max[r] - m_use);
    st.max[r] = m_new;
    return m_use;
}

/* Set the scores of keys this thread's two rows must not see (row r: row0 + 8r; the
 * accumulator layout of wgmma: element 4i + 2r + e is key n0 + 8i + 2t + e) to `lost`: past
 * the row's visible keys and, with GQA_WINDOW, left of its window's edge. */
template <int BN, bool GQA_WINDOW>
__device__ __forceinline__ void flash_wg_mask(float (&s)[BN / 2], const flash_params &p, int row0, int n0, int t,
                                              float lost)
{
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if constexpr (GQA_WINDOW) {
            const flash_key_range kr = flash_key_range_of(p, row0 + 8 * r, n0 + 2 * t);
#pragma unroll
            for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    if (kr.base + (unsigned)(i * 8 + e) >= kr.range) s[4 * i + 2 * r + e] = lost;
        } else {
            const int vis = flash_visible(p.mask, p.seq_q, p.seq_kv, row0 + 8 * r);
#pragma unroll
            for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    if (n0 + i * 8 + 2 * t + e >= vis) s[4 * i + 2 * r + e] = lost;
        }
    }
}

/* Online softmax of block j (keys n0..n0+BN-1) in place: S scaled into log2 space, masked,
 * exponentiated against the new row max; the row sums updated; alpha = the factor O must be
 * rescaled by (exactly 1 where the max held). flash_exact.cuh explains each step. */
template <class TR, bool GQA_WINDOW>
__device__ __forceinline__ void flash_wg_softmax(float (&s)[TR::BN / 2], flash_wg_rows &st, float (&alpha)[2],
                                                 const flash_params &p, int row0, int n0, bool need_mask, int t)
{
    constexpr int BN = TR::BN;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) s[i] *= p.scale_log2;
    if (need_mask) flash_wg_mask<BN, GQA_WINDOW>(s, p, row0, n0, t, -INFINITY);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < BN / 8; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_use = flash_wg_new_max(st, r, mx, alpha[r]);
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < BN / 8; ++i) {
            s[4 * i + 2 * r] = flash_exp2(s[4 * i + 2 * r] - m_use);
            s[4 * i + 2 * r + 1] = flash_exp2(s[4 * i + 2 * r + 1] - m_use);
            sum += s[4 * i + 2 * r] + s[4 * i + 2 * r + 1];
        }
        st.sum[r] = st.sum[r] * alpha[r] + sum; /* partial over this lane's columns */
    }
}

/* O *= alpha per row, skipped when no row of the warp got a new max (warp-uniform branch). */
template <class TR> __device__ __forceinline__ void flash_wg_rescale(float (&o)[TR::SUBTILES][32], const float (&alpha)[2])
{
    if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;
#pragma unroll
    for (int h = 0; h < TR::SUBTILES; ++h)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            o[h][4 * i] *= alpha[0];
            o[h][4 * i + 1] *= alpha[0];
            o[h][4 * i + 2] *= alpha[1];
            o[h][4 * i + 3] *= alpha[1];
        }
}

/* P packed to 16 bits: the A operand of P·V (k step kk = keys 16kk..16kk+15; wgmma.cuh). */
template <class TR, bool BF16>
__device__ __forceinline__ void flash_wg_pack_p(const float (&s)[TR::BN / 2], uint32_t (&pa)[TR::BN / 16][4])
{
#pragma unroll
    for (int kk = 0; kk < TR::BN / 16; ++kk) {
        pa[kk][0] = flash_pack2<BF16>(s[8 * kk + 0], s[8 * kk + 1]);
        pa[kk][1] = flash_pack2<BF16>(s[8 * kk + 2], s[8 * kk + 3]);
        pa[kk][2] = flash_pack2<BF16>(s[8 * kk + 4], s[8 * kk + 5]);
        pa[kk][3] = flash_pack2<BF16>(s[8 * kk + 6], s[8 * kk + 7]);
    }
}

template <class TR> __device__ __forceinline__ void flash_wg_fence_s(float (&s)[TR::BN / 2])
{
#pragma unroll
    for (int i = 0; i < TR::BN / 2; ++i) wgmma_fence_operand(s[i]);
}

template <class TR, class T, bool BF16, bool GQA_WINDOW>
__global__ void __launch_bounds__(TR::THREADS, 1) flash_wg_kernel(const flash_params p)
{
#if WGMMA_AVAILABLE
    constexpr int D = TR::D, BM = TR::BM, BN = TR::BN;
    extern __shared__ uint8_t flash_wg_smem[];
    /* tiles on 1024-byte boundaries (the swizzle pattern repeats every 1024 bytes) */
    const uint32_t raw = flash_smem_addr(flash_wg_smem);
    const uint32_t s_q = (raw + 1023u) & ~1023u;
    const uint32_t s_k = s_q + TR::Q_BYTES;                /* STAGES x K */
    const uint32_t s_v = s_k + TR::STAGES * TR::KV_BYTES; /* STAGES x V */
    uint8_t *q_ptr = flash_wg_smem + (s_q - raw); /* the same bytes, for the epilogue's ordinary accesses */

    const int seq_q = p.seq_q, seq_kv = p.seq_kv;
    flash_cta<T> cta;
    if (!flash_cta_begin<T, TR::THREADS, GQA_WINDOW>(p, BM, BN, D, cta)) return;
    const T *g_q = cta.tile.q, *g_k = cta.tile.k, *g_v = cta.tile.v;
    T *g_o = cta.tile.o;
    const int m0 = cta.tile.m0, n_min = cta.keys.n_min, n_max = n_min + cta.keys.n_blocks;
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;

    /* prologue: one group (Q and the first key block, n_min) */
    flash_wg_load<TR, BM>(s_q, g_q, m0, seq_q);
    flash_wg_load<TR, BN>(s_k, g_k, n_min * BN, seq_kv);
    flash_wg_load<TR, BN>(s_v, g_v, n_min * BN, seq_kv);
    flash_cp_async_commit();

    const int wg_row0 = wg * 64;                 /* this warpgroup's rows of the tile */
    const int my_row0 = wg_row0 + warp * 16 + g; /* this thread's rows: my_row0 and my_row0 + 8 */

    /* O in 64-column halves (o[h][4i + e]: column 64h + 8i + 2t + e%2, row + 8·(e/2)): P·V
     * runs as one m64n64 wgmma per half, each reading one 64-column sub-tile of V */
    float o[TR::SUBTILES][32];
#pragma unroll
    for (int h = 0; h < TR::SUBTILES; ++h)
#pragma unroll
        for (int i = 0; i < 32; ++i) o[h][i] = 0.f;

    constexpr int SCHED = TR::SCHEDULE;
    const uint32_t s_qw = s_q + wg_row0 * 128; /* this warpgroup's Q rows */
    uint32_t pa[BN / 16][4];                   /* P of the last softmax: the A operand of its P·V */
    flash_wg_rows st = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
    int stage = 0; /* (j - n_min) % STAGES */
    for (int j = n_min; j < n_max; ++j) {
        const int next = stage + 1 == TR::STAGES ? 0 : stage + 1;

        flash_cp_async_wait<0>(); /* K_j, V_j (and Q) landed: the only group in flight */
        fence_proxy_async();      /* ... and are visible to wgmma once the barrier is passed */
        __syncthreads();          /* every warpgroup is past block j-1 and has waited for every
                                     product reading stage `next` (j-2 with 3 stages) */
        if (j + 1 < n_max) {
            flash_wg_load<TR, BN>(s_k + next * TR::KV_BYTES, g_k, (j + 1) * BN, seq_kv);
            flash_wg_load<TR, BN>(s_v + next * TR::KV_BYTES, g_v, (j + 1) * BN, seq_kv);
            flash_cp_async_commit();
        }

        float s[BN / 2], alpha[2];
        const int n0 = j * BN;
        /* also every block reaching past seq_kv */
        const bool need_mask = flash_block_masked<GQA_WINDOW>(p, cta.keys, m0, BM, n0, BN);
        wgmma_fence(); /* O and P were last written by ordinary code */
        flash_wg_issue_s<TR, BF16>(s, s_qw, s_k + stage * TR::KV_BYTES);
        wgmma_wait<0>(); /* S_j, and with DEFER the P·V_j-1 issued before it */
        flash_wg_fence_s<TR>(s);
        if constexpr (SCHED == FLASH_WG_DEFER) flash_wg_fence_o<TR>(o);
        flash_wg_softmax<TR, GQA_WINDOW>(s, st, alpha, p, m0 + my_row0, n0, need_mask, t);
        flash_wg_rescale<TR>(o, alpha);
        flash_wg_pack_p<TR, BF16>(s, pa);
        wgmma_fence();
        flash_wg_issue_pv<TR, BF16>(o, pa, s_v + stage * TR::KV_BYTES);
        if constexpr (SCHED == FLASH_WG_SERIAL) {
            wgmma_wait<0>();
            flash_wg_fence_o<TR>(o);
        }
        stage = next;
    }
    if constexpr (SCHED == FLASH_WG_DEFER) {
        wgmma_wait<0>();
        flash_wg_fence_o<TR>(o);
    }
    /* Nothing is in flight here: the last block issued no loads, every wgmma was waited for. */

    /* Epilogue: O / l into this warpgroup's own Q rows (only its own wgmmas read them, and
     * they have completed), then each warp stores its 16 rows as 16-byte chunks. */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float inv = flash_row_inv(st.sum[r]); /* no visible key: zeros */
        const int lr = my_row0 + 8 * r;
#pragma unroll
        for (int i = 0; i < D / 8; ++i)
            *reinterpret_cast<uint32_t *>(q_ptr + flash_wg_off<BM>(lr, i) + 4 * t) =
                flash_pack2<BF16>(o[i / 8][4 * (i % 8) + 2 * r] * inv, o[i / 8][4 * (i % 8) + 2 * r + 1] * inv);
    }
    __syncwarp();
    constexpr int WARP_CHUNKS = 16 * TR::CHUNKS;
#pragma unroll
    for (int it = 0; it < WARP_CHUNKS / 32; ++it) {
        const int idx = it * 32 + lane;
        const int lr = wg_row0 + warp * 16 + idx / TR::CHUNKS, c = idx % TR::CHUNKS;
        const int row = m0 + lr;
        if (row < seq_q)
            *reinterpret_cast<uint4 *>(g_o + (int64_t)row * D + c * 8) =
                *reinterpret_cast<const uint4 *>(q_ptr + flash_wg_off<BM>(lr, c));
    }
#else
    __trap(); /* not compiled for sm_90a: flash_wg_launch never launches it */
#endif
}

/* Host side: enqueue one forward of configuration TR on ctx->stream (the caller checked dtype,
 * head_dim and shape limits, and that this binary carries sm_90a code). */
template <class TR, class T, bool BF16>
static int flash_wg_launch(exec_context *ctx, const attn_problem *pr, const attn_tensors *t, const char *who)
{
    if (pr->head_dim != TR::D || attn_dv(pr) != TR::D)
        return exec_fail(ctx, __FILE__, __LINE__, who, "head_dim or head_dim_v differs from the kernel's");
    if (ctx->cc != 90) return exec_fail(ctx, __FILE__, __LINE__, who, "the wgmma kernel runs on sm_90 only");
    static std::atomic<unsigned long long> smem_set(0), smem_set_gw(0);
    if (flash_gqa_window(pr))
        return flash_launch_tiles(ctx, pr, t, who, flash_wg_kernel<TR, T, BF16, true>, TR::BM, TR::THREADS,
                                  TR::SMEM_BYTES, smem_set_gw);
    return flash_launch_tiles(ctx, pr, t, who, flash_wg_kernel<TR, T, BF16, false>, TR::BM, TR::THREADS,
                              TR::SMEM_BYTES, smem_set);
}

#endif
