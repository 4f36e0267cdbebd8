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
 * Contract (flash_wg_launch checks): head_dim == TR::D, 16-bit types, q,k,v,out 16-byte
 * aligned, contiguous [B,H,S,D]; sm_90 and a binary with sm_90a code (FLASH_HAVE_SM90A).
 */
#ifndef FLASH_WGMMA_CUH
#define FLASH_WGMMA_CUH

#include <atomic>

#include "kernels/flash_kernel.cuh"
#include "kernels/wgmma.cuh"

/* D head dim, BN keys per block, WARPGROUPS x 64 query rows per CTA, STAGES of the K/V ring;
 * DEFER_PV: leave P·V_j in flight until the next block's S is waited for (needs 3 stages: the
 * loads issued during block j+1 must not land in the stage P·V_j still reads). */
template <int D_, int BN_, int WARPGROUPS_, int STAGES_, bool DEFER_PV_, int MIN_BLOCKS_ = 1>
struct flash_wg_traits {
    static constexpr int D = D_, BN = BN_, WARPGROUPS = WARPGROUPS_, STAGES = STAGES_, MIN_BLOCKS = MIN_BLOCKS_;
    static constexpr bool DEFER_PV = DEFER_PV_;
    static constexpr int THREADS = WARPGROUPS * 128, BM = WARPGROUPS * 64;
    static constexpr int CHUNKS = D / 8;    /* 16-byte chunks per row */
    static constexpr int SUBTILES = D / 64; /* 64-column (128-byte) swizzle sub-tiles per row */
    static constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static constexpr size_t SMEM_BYTES = Q_BYTES + 2 * STAGES * (size_t)KV_BYTES + 1024;
    static_assert(D == 64 || D == 128, "wgmma tiles: head_dim 64 or 128");
    static_assert(BN == 64 || BN == 128, "key blocks of 64 or 128");
    static_assert(STAGES == 2 || STAGES == 3, "2 or 3 stages");
    static_assert(!DEFER_PV || STAGES == 3, "a deferred P·V needs a third stage");
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

/* Keeps the compiler from moving ordinary accesses to O across a wgmma issue or wait. */
template <class TR> __device__ __forceinline__ void flash_wg_fence_o(float (&o)[TR::SUBTILES][32])
{
#pragma unroll
    for (int h = 0; h < TR::SUBTILES; ++h)
#pragma unroll
        for (int i = 0; i < 32; ++i) wgmma_fence_operand(o[h][i]);
}

template <class TR, class T, bool BF16>
__global__ void __launch_bounds__(TR::THREADS, TR::MIN_BLOCKS) flash_wg_kernel(const flash_params p)
{
#if WGMMA_AVAILABLE
    constexpr int D = TR::D, BM = TR::BM, BN = TR::BN, KS = D / 16;
    extern __shared__ uint8_t flash_wg_smem[];
    /* tiles on 1024-byte boundaries (the swizzle pattern repeats every 1024 bytes) */
    const uint32_t raw = flash_smem_addr(flash_wg_smem);
    const uint32_t s_q = (raw + 1023u) & ~1023u;
    const uint32_t s_k = s_q + TR::Q_BYTES;                /* STAGES x K */
    const uint32_t s_v = s_k + TR::STAGES * TR::KV_BYTES; /* STAGES x V */
    uint8_t *q_ptr = flash_wg_smem + (s_q - raw); /* the same bytes, for the epilogue's ordinary accesses */

    const int64_t bh = blockIdx.x;
    const int m_block = (int)(gridDim.y - 1 - blockIdx.y);
    const int m0 = m_block * BM;
    const int seq_q = p.seq_q, seq_kv = p.seq_kv;
    const T *g_q = static_cast<const T *>(p.q) + bh * seq_q * D;
    const T *g_k = static_cast<const T *>(p.k) + bh * seq_kv * D;
    const T *g_v = static_cast<const T *>(p.v) + bh * seq_kv * D;
    T *g_o = static_cast<T *>(p.out) + bh * seq_q * D;

    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;

    const int row_last = min(m0 + BM, seq_q) - 1;
    const int vis_max = flash_visible(p.mask, seq_q, seq_kv, row_last);
    const int vis_min = flash_visible(p.mask, seq_q, seq_kv, m0);
    const int n_blocks = (vis_max + BN - 1) / BN;

    if (n_blocks == 0) { /* every row of the tile is fully masked: zeros */
        for (int i = tid; i < BM * TR::CHUNKS; i += TR::THREADS) {
            const int r = i / TR::CHUNKS, c = i % TR::CHUNKS;
            if (m0 + r < seq_q)
                *reinterpret_cast<uint4 *>(g_o + (int64_t)(m0 + r) * D + c * 8) = make_uint4(0, 0, 0, 0);
        }
        return;
    }

    /* prologue: one group (Q, K_0, V_0) */
    flash_wg_load<TR, BM>(s_q, g_q, m0, seq_q);
    flash_wg_load<TR, BN>(s_k, g_k, 0, seq_kv);
    flash_wg_load<TR, BN>(s_v, g_v, 0, seq_kv);
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
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

    int stage = 0; /* j % STAGES */
    for (int j = 0; j < n_blocks; ++j) {
        const int next = stage + 1 == TR::STAGES ? 0 : stage + 1;
        const uint32_t s_kj = s_k + stage * TR::KV_BYTES, s_vj = s_v + stage * TR::KV_BYTES;

        flash_cp_async_wait<0>(); /* K_j, V_j (and Q) landed: the only group in flight */
        fence_proxy_async();      /* ... and are visible to wgmma once the barrier is passed */
        __syncthreads();          /* every warpgroup is past block j-1 (and, deferred, has
                                     waited for P·V_j-2): stage `next` is free */
        if (j + 1 < n_blocks) {
            flash_wg_load<TR, BN>(s_k + next * TR::KV_BYTES, g_k, (j + 1) * BN, seq_kv);
            flash_wg_load<TR, BN>(s_v + next * TR::KV_BYTES, g_v, (j + 1) * BN, seq_kv);
            flash_cp_async_commit();
        }

        /* S = Q·K_jᵀ: this warpgroup's 64 rows x BN keys */
        float s[BN / 2];
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            /* k step ks: sub-tile ks/4, 32 bytes per step into its 128-byte rows */
            const uint32_t koff = (ks & 3) << 5;
            const uint64_t da = wgmma_desc_sw128(s_q + (ks >> 2) * BM * 128 + wg_row0 * 128 + koff, 16, 1024);
            const uint64_t db = wgmma_desc_sw128(s_kj + (ks >> 2) * BN * 128 + koff, 16, 1024);
            wgmma_ss<BN, BF16>(s, da, db, ks > 0);
        }
        wgmma_commit();
        wgmma_wait<0>(); /* S_j, and a deferred P·V_j-1 before it */
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) wgmma_fence_operand(s[i]);
        if constexpr (TR::DEFER_PV) flash_wg_fence_o<TR>(o);

        /* scale into log2 space, mask, online softmax (flash_exact.cuh explains each step) */
        const int n0 = j * BN;
        const bool need_mask = n0 + BN > vis_min; /* also every block reaching past seq_kv */
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) s[i] *= p.scale_log2;
        if (need_mask) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int vis = flash_visible(p.mask, seq_q, seq_kv, m0 + my_row0 + 8 * r);
#pragma unroll
                for (int i = 0; i < BN / 8; ++i)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        if (n0 + i * 8 + 2 * t + e >= vis) s[4 * i + 2 * r + e] = -INFINITY;
            }
        }
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < BN / 8; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(row_max[r], mx);
            const float m_use = m_new == -INFINITY ? 0.f : m_new; /* no −inf − −inf */
            alpha[r] = flash_exp2(row_max[r] - m_use);            /* exactly 1 when the max holds */
            row_max[r] = m_new;
            float sum = 0.f;
#pragma unroll
            for (int i = 0; i < BN / 8; ++i) {
                s[4 * i + 2 * r] = flash_exp2(s[4 * i + 2 * r] - m_use);
                s[4 * i + 2 * r + 1] = flash_exp2(s[4 * i + 2 * r + 1] - m_use);
                sum += s[4 * i + 2 * r] + s[4 * i + 2 * r + 1];
            }
            row_sum[r] = row_sum[r] * alpha[r] + sum; /* partial over this lane's columns */
        }
        if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
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

        /* O += P·V_j: P packed to 16 bits is the A operand (k step kk = keys 16kk..16kk+15) */
        uint32_t pa[BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            pa[kk][0] = flash_pack2<BF16>(s[8 * kk + 0], s[8 * kk + 1]);
            pa[kk][1] = flash_pack2<BF16>(s[8 * kk + 2], s[8 * kk + 3]);
            pa[kk][2] = flash_pack2<BF16>(s[8 * kk + 4], s[8 * kk + 5]);
            pa[kk][3] = flash_pack2<BF16>(s[8 * kk + 6], s[8 * kk + 7]);
        }
        flash_wg_fence_o<TR>(o);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
            for (int h = 0; h < TR::SUBTILES; ++h) {
                /* keys 16kk.. = 16 rows of 128 bytes into sub-tile h (wgmma.cuh: both offsets
                 * 1024, since one 64-column sub-tile is all an n64 product reads) */
                const uint64_t dv = wgmma_desc_sw128(s_vj + h * BN * 128 + kk * 16 * 128, 1024, 1024);
                wgmma_rs_tb<BF16>(o[h], pa[kk], dv);
            }
        wgmma_commit();
        if constexpr (!TR::DEFER_PV) {
            wgmma_wait<0>();
            flash_wg_fence_o<TR>(o);
        }
        stage = next;
    }
    if constexpr (TR::DEFER_PV) {
        wgmma_wait<0>();
        flash_wg_fence_o<TR>(o);
    }
    /* Nothing is in flight here: the last block issued no loads, every wgmma was waited for. */

    /* Epilogue: O / l into this warpgroup's own Q rows (only its own wgmmas read them, and
     * they have completed), then each warp stores its 16 rows as 16-byte chunks. */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = row_sum[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.f ? 1.f / l : 0.f; /* no visible key: zeros */
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
    char why[160];
    const size_t smem = TR::SMEM_BYTES;
    const int64_t m_tiles = (pr->seq_q + TR::BM - 1) / TR::BM;
    const int64_t bh = pr->batch * pr->heads;
    if (pr->head_dim != TR::D) return exec_fail(ctx, __FILE__, __LINE__, who, "head_dim differs from the kernel's");
    if (ctx->cc != 90) return exec_fail(ctx, __FILE__, __LINE__, who, "the wgmma kernel runs on sm_90 only");
    if (smem > ctx->smem_optin_bytes) {
        snprintf(why, sizeof why, "needs %zu bytes of shared memory per block, the device allows %zu", smem,
                 ctx->smem_optin_bytes);
        return exec_fail(ctx, __FILE__, __LINE__, who, why);
    }
    if (((uintptr_t)t->q | (uintptr_t)t->k | (uintptr_t)t->v | (uintptr_t)t->out) & 15u)
        return exec_fail(ctx, __FILE__, __LINE__, who, "q, k, v and out must be 16-byte aligned");
    if (bh == 0 || pr->seq_q == 0) return 0; /* nothing to write */
    if (m_tiles > 65535) return exec_fail(ctx, __FILE__, __LINE__, who, "seq_q too long for this tile");
    flash_params kp;
    kp.q = t->q;
    kp.k = t->k;
    kp.v = t->v;
    kp.out = t->out;
    kp.seq_q = (int)pr->seq_q;
    kp.seq_kv = (int)pr->seq_kv;
    kp.head_dim = (int)pr->head_dim;
    kp.mask = (int)pr->mask;
    kp.scale_log2 = (float)(pr->scale * 1.4426950408889634);
    /* function attributes are per device and stay set: once per device (see flash_x_launch) */
    static std::atomic<unsigned long long> attrs_set(0);
    const unsigned long long bit = ctx->device >= 0 && ctx->device < 64 ? 1ull << ctx->device : 0;
    if (!bit || !(attrs_set.load(std::memory_order_relaxed) & bit)) {
        CUDA_TRY(ctx, cudaFuncSetAttribute(flash_wg_kernel<TR, T, BF16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)smem));
        CUDA_TRY(ctx, cudaFuncSetAttribute(flash_wg_kernel<TR, T, BF16>,
                                           cudaFuncAttributePreferredSharedMemoryCarveout,
                                           (int)cudaSharedmemCarveoutMaxShared));
        attrs_set.fetch_or(bit);
    }
    dim3 grid((unsigned)bh, (unsigned)m_tiles);
    flash_wg_kernel<TR, T, BF16><<<grid, TR::THREADS, smem, ctx->stream>>>(kp);
    LAUNCH_TRY(ctx);
    return 0;
}

#endif
