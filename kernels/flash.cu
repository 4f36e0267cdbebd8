/* flash.cu — the `flash` variant: fused forward for fp16/bf16 (kernel bodies in
 * flash_kernel.cuh, flash_exact.cuh for head_dim 96/128 and, on Hopper, flash_tma.cuh (with
 * flash_tma_{traits,load,mainloop,epilogue}.cuh) for 64/96/128/256 and 192 with a value head dim
 * of 128, and flash_wgmma.cuh for 64/128; primitives in
 * flash_mma.cuh, wgmma.cuh and tma.cuh). This file
 * picks the kernel and its configuration per problem.
 *
 * Versions (bf16, H200, tests/gpu/fused_check.cu; PyTorch flash = FA2: 94 / 157 / 520 / 902 /
 * 1720 / 1555 / 134 us on the shapes of bench/shapes.json's recorded PyTorch peer):
 *   v1  128-row query tiles, 8 warps x 16 rows, Q fragments in registers, K/V blocks of 64
 *       (128 for D ≤ 64) streamed by cp.async into a 2-stage smem ring (XOR swizzle for
 *       D % 64 == 0, one-chunk row padding otherwise), ldmatrix(.trans for V) -> mma.sync
 *       m16n8k16 fp32, online softmax in log2 space with ex2.approx, causal blocks above the
 *       diagonal skipped, reverse tile order. Predicted 260-320 TFLOP/s at B2 H16 S8192 D128
 *       causal. Measured: 151 TFLOP/s (3635 us), 108-151 TFLOP/s across the shapes: each
 *       ldmatrix'd K/V fragment fed only 2 mma (256 B of smem per mma): shared-memory
 *       bandwidth bound, not mma bound.
 *   v2  FA2's warp shape: each warp owns 2 m16 tiles (32 rows), so every K/V fragment feeds 4
 *       mma (128-192 B of smem per mma); 128-row tiles with 4 warps, 2 CTAs per SM; Q read
 *       from smem per k-step for D ≥ 96 (registers: 128 fp32 O accumulators at D128); key
 *       blocks of 48 at D128 (64 spilled 16 bytes). Measured: 188 TFLOP/s (2920 us) at S8192
 *       D128 causal, 122 us at S1024 D64 causal (PyTorch 94).
 *   v3  head_dim == D compiled in (EXACT_D) where it does not push ptxas into spills (D 32,
 *       64, 256): column checks fold away and loads can be hoisted across k-steps.
 *       Predicted +5-10% at D64. Measured: D64 +45-55% (85 us at B8 S1024 causal, PyTorch
 *       94; 491 us = 280 TFLOP/s at B4 S4096 causal, PyTorch 520; 145 us at B16 H32 S512,
 *       PyTorch 134); D128 unchanged: 187 TFLOP/s at S8192 causal (PyTorch 320).
 *   v4  D96/D128 only (flash_exact.cuh; v3 stays selectable: impl=legacy): head dim
 *       compiled in, K/V ring with ONE barrier per key block (wait, barrier, issue block
 *       j+1, compute block j: warps drift apart between barriers, so softmax overlaps other
 *       warps' mma), O rescaled only when a row max changed (warp vote), O staged through
 *       smem for 16-byte row stores, copy addresses as one pointer + immediates. With one
 *       barrier instead of two, ptxas fits FA2's exact tile — 128x64, 4 warps x 32 rows, Q
 *       from smem per k-step, 2 CTAs/SM — in 252 registers without spills on sm_90 (w4;
 *       sm_80..89 spill 28 B there, so they get BN 48). w8 = v1's shape (8 warps x 16 rows,
 *       Q in registers) with the v4 body, kept for comparison and for sm_86/89.
 *       Predicted: w4 290-340 TFLOP/s at B2 H16 S8192 D128 causal.
 *       Measured: 359 (w4); 342 at B4 S4096 D128 non-causal, a tie with FA2
 *       (bench/results/nvidia-h200/2026-12-02-04cadee-flash-v4.md).
 *   v5  sm_90a, head_dim 64/128 (flash_wgmma.cuh): both products on wgmma — Q, K and V read
 *       by the tensor cores from 128-byte-swizzled smem, P from registers; 2-3 warpgroups x
 *       64 rows; 3-stage ring with P·V left in flight across the barrier where smem allows.
 *       Predicted 430-520 TFLOP/s at D128; measured 446 (non-causal S4096), 459-485 (causal
 *       S8192), D64 331 at S4096 causal (v3 278). mma.sync kernels stay for sm_80..89, D96
 *       and builds without sm_90a.
 *   v6  sm_90a, head_dim 64/128 (flash_tma.cuh, tma.cuh): FlashAttention-3's structure — a
 *       producer warp loading Q/K/V by TMA into mbarrier-guarded rings, setmaxnreg, consumer
 *       warpgroups overlapping softmax_j with S_j-1/P·V_j+1 and ping-ponged by named
 *       barriers, persistent CTAs with a static or dynamic tile order (longest causal tiles
 *       first, L2 sections of heads). Predicted 520-600 TFLOP/s causal S8192 D128, 540-620
 *       non-causal. Measured (H200, against attnd's cudnn in the same binary): 597 TFLOP/s
 *       causal S8192 (0.91 of cudnn's time), 624 non-causal S4096 (0.99), 0.84-0.99 on the
 *       other timed shapes; 1.15-1.5x v5. v5 stays selectable (impl=wgmma). Since then
 *       (docs/fused.md, each step measured against the build before it): one-head L2 sections
 *       for static tiles, key blocks walked upward, lazy rescaling (FA4's), descriptors
 *       advanced by constants, Q in registers with 2 consumer warpgroups: 642-647 TFLOP/s
 *       causal S8192 (0.81 of cudnn's time), 651-657 non-causal S4096 (0.93-0.94), in bursts.
 *   GQA, windows  every family (v3-v6), as a second instantiation of each kernel (GQA_WINDOW,
 *       flash_kernel.cuh): grouped K/V heads read in place (query head bh reads K/V head
 *       bh / group), sliding windows whose key blocks left of every row of a tile are never
 *       loaded (FA3's n_block_min) and whose edge blocks are masked with one unsigned compare
 *       per score; v6 keeps the query heads of a K/V group adjacent in its tile order and takes
 *       windowed tiles longest first. Problems with neither run the dense kernels, instruction
 *       for instruction those above (cuobjdump -sass; v6's differ in constant-bank offsets of
 *       the work struct only). Measured (H200, sustained, against cudnn in the same call):
 *       GQA B2 H64 Hkv8 S8192 D128 causal 0.895 of cudnn's time, B4 H32 Hkv8 S4096 full 0.921,
 *       a 4096-key window over S16384 0.873 (bench/results/nvidia-h200/2026-12-05-717cfd2-models-serving.md).
 *   serving  paged and ragged prefill (seq_q > 16) in v6, compiled a third time with SERVING
 *       (flash_tma_serving.cuh): FA3's varlen and paged-KV-by-TMA — each tile in its own
 *       sequence through cu_seqlens and the block table, pages of whole 128-key blocks, the
 *       grid over the longest sequence's tiles with the ones past a sequence's end skipped, row
 *       stores with the sequence's length. Predicted on 16 sequences of 128-8192 tokens, H32
 *       Hkv8 D128 causal: 0.93-0.98 of the TFLOP/s (real tokens) of the dense batch of the same
 *       total (the skipped tiles ~1%, each sequence's partial last tile 1-3%), so about 0.9 of
 *       cudnn's time where cudnn runs such a batch as fast as a dense one.
 *       Validated on an H100 (fused_check's serving section, tests/gpu/test_flash_prefill.py) and
 *       offered; not yet timed. Off Hopper, v3's SERVING instantiation (flash_kernel.cuh) runs
 *       it (validated with impl legacy on an H100: tests/gpu/test_serving_generic.py). The dense
 *       kernels are instruction for instruction those above (cuobjdump -sass).
 *   head_dim_v  a value head dim of its own runs v3, in the bucket that holds both dims, except
 *       DeepSeek-V3's 192/128 on Hopper (v6 below).
 *   v6 at 96, 192/128 and 256  K and V rings of their own widths, a last 64-column panel half
 *       filled at 96 (TMA's zero fill; Q·Kᵀ reads only the columns that exist, P·V is one n96
 *       product), O stored from the accumulators where the rings leave no room for its staging
 *       tile, FA3's tiles (80-key blocks at 256). Before: v4 at 96 (1.52x cudnn's time, causal
 *       B4 H32 S4096), v3 at 256 (2.42x causal, 2.84x full, B4 H16 S4096) and 192. Measured
 *       (H100): D256 full 0.967 of cudnn's time (bench/results/nvidia-h100/2026-12-05-b86fb2b-v6-head-dims-serving.md).
 *
 * The mma.sync configurations are the same on sm_80..sm_90 (except v4 w4 at D128: BN 64 on
 * sm_90, 48 before): every one needs ≤ 96 KB of shared memory, which fits sm_86/sm_89's 99 KB
 * opt-in as well as sm_80's 163 KB and sm_90's 227 KB. v5 and v6 need up to 225 KB: sm_90
 * only.
 */
#include "kernels/fused.h"

#include <cmath>
#include <stdio.h>
#include <type_traits>

#include "kernels/flash_exact.cuh"
#include "kernels/flash_kernel.cuh"
#include "kernels/flash_tma.cuh"
#include "kernels/flash_wgmma.cuh"

/* v3 (flash_kernel.cuh), the generic kernel: every head_dim, the only one at 32 and, off
 * Hopper, at 192 and 256 and for a value head dim of its own (in the bucket that holds both
 * dims: the configurations without head_dim==D).
 * D   BM   BN  warps stages Q-in-regs  m16-tiles-per-warp  head_dim==D (variant_check_flash) */
typedef flash_traits<32, 128, 128, 4, 2, true, 2, true> flash_generic_cfg_d32;
typedef flash_traits<64, 128, 64, 4, 2, true, 2, true> flash_generic_cfg_d64;
typedef flash_traits<96, 128, 64, 4, 2, false, 2, false> flash_generic_cfg_d96;
typedef flash_traits<128, 128, 48, 4, 2, false, 2, false> flash_generic_cfg_d128;
typedef flash_traits<192, 64, 32, 4, 2, false, 1, false> flash_generic_cfg_d192; /* 72 KB */
typedef flash_traits<256, 64, 32, 4, 2, false, 1, true> flash_generic_cfg_d256;
/* the buckets of 64 and 256 for a value head dim of its own (those above compile head_dim in) */
typedef flash_traits<64, 128, 64, 4, 2, true, 2, false> flash_generic_cfg_d64_dv;
typedef flash_traits<256, 64, 32, 4, 2, false, 1, false> flash_generic_cfg_d256_dv;

/* v4 (flash_exact.cuh), head_dim 96 and 128 only. ptxas, bf16, zero spills everywhere:
 *         D   BN  warps MI Q-in-regs CTAs/SM  regs sm_90 / sm_80   smem
 *   w4:   128 64  4     2  no        2        252 / (sm_90 only)   96 KB  FA2's tile and warp shape
 *         128 48  4     2  no        2        246 / 253            80 KB  (w4 before sm_90: 64 spills 28 B)
 *         96  64  4     2  no        2        255 / 252            80 KB
 *   w8:   128 64  8     1  yes       1        207 / 194            96 KB
 *         96  64  8     1  yes       1        171 / 165            78 KB
 * BM is 128 everywhere. Default: w4, except sm_86/sm_89 (≤ 100 KB of smem per SM: one CTA
 * whatever the tile, so 8 warps beat 4 there). */
typedef flash_exact_traits<128, 64, 4, 2, false, 2, true> flash_exact_cfg_d128_w4_sm90;
typedef flash_exact_traits<128, 48, 4, 2, false, 2> flash_exact_cfg_d128_w4;
typedef flash_exact_traits<96, 64, 4, 2, false, 2> flash_exact_cfg_d96_w4;
typedef flash_exact_traits<128, 64, 8, 1, true, 1> flash_exact_cfg_d128_w8;
typedef flash_exact_traits<96, 64, 8, 1, true, 1> flash_exact_cfg_d96_w8;

/* v5 (flash_wgmma.cuh), sm_90a only, head_dim 64 and 128, 1 CTA per SM. Measured on the H200
 * (bench/results/nvidia-h200/2026-12-02-a922188-flash-v5.md, fused_check, bf16): 3 warpgroups (BM 192) win at long sequences — D128
 * non-causal S4096 446 TFLOP/s, causal S8192 459 (2 warpgroups, 2 stages: 399 / 408) — but
 * lose on short causal ones, where the taller tile wastes more of the diagonal: S1024 causal
 * D128 254 vs 289 with 2 warpgroups, 3 stages and P·V deferred. So: flash_wg_cfg_*_short for
 * causal problems of seq_q ≤ 1536, *_long otherwise.
 *                                    D    BN   WGs stages defer-P·V   smem
 */
typedef flash_wg_traits<128, 128, 3, 2, FLASH_WG_SERIAL> flash_wg_cfg_d128_long; /* 177 KB */
typedef flash_wg_traits<128, 128, 2, 3, FLASH_WG_DEFER> flash_wg_cfg_d128_short; /* 225 KB */
typedef flash_wg_traits<64, 128, 3, 3, FLASH_WG_DEFER> flash_wg_cfg_d64_long;    /* 121 KB */
typedef flash_wg_traits<64, 128, 2, 3, FLASH_WG_DEFER> flash_wg_cfg_d64_short;   /* 113 KB */

static bool flash_wg_short(const attn_problem *p) { return p->mask != ATTN_MASK_NONE && p->seq_q <= 1536; }

/* v6 (flash_tma.cuh), sm_90a only, head_dim 64 and 128, 1 CTA per SM, FA3's tiles, 2-stage K
 * and V rings. Measured on the H200
 * (bench/results/nvidia-h200/2026-12-03-c48fa40-v6-configurations.md): the
 * dynamic tile counter wins on causal problems (S8192 D128 921 vs 994 us static, S1024 D128
 * 81 vs 91), the static round-robin on non-causal ones (881 vs 948 us at S4096 D128); at D64
 * 3 consumer warpgroups (192-row tiles) win on long causal problems (325 vs 368 us at S4096),
 * 2 with a third stage on short ones (66 vs 75 us at S1024), whose softmax bounds them: there the
 * tree reductions (TREE) take 4% off (61.5–62.6 vs 64.0–64.7 us;
 * bench/results/nvidia-h200/2026-12-03-ffa302c-tree-reductions.md).
 *                                    D    WGs  BN  stages scheduler         TREE  smem */
typedef flash_tma_traits<128, 2, 128, 2, FLASH_TMA_STATIC> flash_tma_cfg_d128;               /* 193 KB */
typedef flash_tma_traits<128, 2, 128, 2, FLASH_TMA_DYNAMIC> flash_tma_cfg_d128_causal;       /* 193 KB */
typedef flash_tma_traits<64, 3, 128, 2, FLASH_TMA_STATIC> flash_tma_cfg_d64;                 /* 113 KB */
typedef flash_tma_traits<64, 3, 128, 2, FLASH_TMA_DYNAMIC> flash_tma_cfg_d64_causal;         /* 113 KB */
typedef flash_tma_traits<64, 2, 128, 3, FLASH_TMA_DYNAMIC, true> flash_tma_cfg_d64_short;    /* 129 KB */
/* The other head dims cuDNN runs, FA3's tiles for them (its tile_size_fwd_sm90): 128 query rows
 * in 2 consumer warpgroups, Q read from shared memory past D128 (no registers left for it), O
 * stored from the accumulators where the rings leave no room for its staging tile (192, 256).
 * D256: 80-key blocks, the most that fit two stages (225 KB), FA3's choice.
 *                                    D    WGs  BN  stages scheduler       TREE   DV   smem */
typedef flash_tma_traits<256, 2, 80, 2, FLASH_TMA_STATIC> flash_tma_cfg_d256;                   /* 225 KB */
typedef flash_tma_traits<256, 2, 80, 2, FLASH_TMA_DYNAMIC> flash_tma_cfg_d256_causal;           /* 225 KB */
typedef flash_tma_traits<192, 2, 128, 2, FLASH_TMA_DYNAMIC, false, 128> flash_tma_cfg_d192_v128; /* 209 KB */
typedef flash_tma_traits<96, 2, 128, 2, FLASH_TMA_DYNAMIC> flash_tma_cfg_d96;                   /* 193 KB */

/* The head dims v6 is built for: 64, 96, 128, 256 with V's the same, and DeepSeek-V3's 192/128. */
static bool flash_tma_dims(int64_t d, int64_t dv)
{
    return (d == dv && (d == 64 || d == 96 || d == 128 || d == 256)) || (d == 192 && dv == 128);
}
/* Whether v6 serves this problem (its head dims; a finite nonzero scale). */
static bool flash_tma_applies(const attn_problem *p)
{
    const double sl2 = p->scale * 1.4426950408889634;
    return flash_tma_dims(p->head_dim, attn_dv(p)) && sl2 != 0.0 && std::isfinite((float)sl2);
}
/* A paged or ragged prefill: v6's SERVING instantiation (flash_tma_serving.cuh) in the dynamic
 * configurations, whose counter evens out tiles of unequal cost, as a ragged batch's sequences
 * are (a paged batch without a mask pays the dynamic order's few percent: fewer
 * instantiations). At D64 not the short-causal one (2 warpgroups, 3 stages): its producer, at
 * 24 registers, spilled the page lookups. */
template <class T, bool BF16> static int flash_tma_serving_dispatch(exec_context *ctx, const attn_problem *p,
                                                                    const attn_tensors *t)
{
    static_assert(flash_tma_cfg_d128_causal::BN == FLASH_SERVING_KEY_BLOCK &&
                      flash_tma_cfg_d64_causal::BN == FLASH_SERVING_KEY_BLOCK,
                  "variant_info's page check names the key block");
    if (p->head_dim == 128) return flash_tma_launch<flash_tma_cfg_d128_causal, T, BF16, true>(ctx, p, t, "flash_forward");
    return flash_tma_launch<flash_tma_cfg_d64_causal, T, BF16, true>(ctx, p, t, "flash_forward");
}

/* v6's launch for this problem (persistent grid in every configuration). Tiles of unequal cost,
 * causal or windowed, take the dynamic tile counter (a window without a causal mask: the first
 * query blocks see the most keys, flash_tma_tile takes them first). */
template <class T, bool BF16> static int flash_tma_dispatch(exec_context *ctx, const attn_problem *p, const attn_tensors *t)
{
    if (p->ragged || p->page_size > 0) return flash_tma_serving_dispatch<T, BF16>(ctx, p, t);
    const bool dynamic = p->mask != ATTN_MASK_NONE || flash_window_keys(p) > 0;
    if (p->head_dim == 256)
        return dynamic ? flash_tma_launch<flash_tma_cfg_d256_causal, T, BF16>(ctx, p, t, "flash_forward")
                       : flash_tma_launch<flash_tma_cfg_d256, T, BF16>(ctx, p, t, "flash_forward");
    if (p->head_dim == 192) return flash_tma_launch<flash_tma_cfg_d192_v128, T, BF16>(ctx, p, t, "flash_forward");
    if (p->head_dim == 96) return flash_tma_launch<flash_tma_cfg_d96, T, BF16>(ctx, p, t, "flash_forward");
    if (p->head_dim == 128)
        return dynamic ? flash_tma_launch<flash_tma_cfg_d128_causal, T, BF16>(ctx, p, t, "flash_forward")
                       : flash_tma_launch<flash_tma_cfg_d128, T, BF16>(ctx, p, t, "flash_forward");
    if (flash_wg_short(p)) return flash_tma_launch<flash_tma_cfg_d64_short, T, BF16>(ctx, p, t, "flash_forward");
    return dynamic ? flash_tma_launch<flash_tma_cfg_d64_causal, T, BF16>(ctx, p, t, "flash_forward")
                   : flash_tma_launch<flash_tma_cfg_d64, T, BF16>(ctx, p, t, "flash_forward");
}

/* Whether this binary carries the sm_90a code of the wgmma kernel: the Makefile defines
 * FLASH_HAVE_SM90A when GENCODE builds sm_90a (without it the kernel body is a trap). */
#ifdef FLASH_HAVE_SM90A
static const bool flash_have_wgmma = true;
#else
static const bool flash_have_wgmma = false;
#endif

/* Only the split-KV decode has one: its partial outputs (flash_splitkv.cu). */
size_t flash_workspace_bytes(const attn_problem *p)
{
    return flash_splitkv_is(p) && flash_splitkv_check(p, NULL, 0) == 0 ? flash_splitkv_workspace_bytes(p) : 0;
}

static bool flash_hopper(int cc) { return cc == 90 && flash_have_wgmma; }

int flash_impl_runnable(int impl, int cc)
{
    if (cc < 80) return 0;
    if (impl == FLASH_IMPL_TMA || impl == FLASH_IMPL_WGMMA) return flash_hopper(cc);
    return impl == FLASH_IMPL_W4 || impl == FLASH_IMPL_W8 || impl == FLASH_IMPL_GENERIC || impl == FLASH_IMPL_SPLITKV;
}

/* The kernel family for this problem: the one p->impl asks for, else the default (on sm_90a v6,
 * measured 1.15-1.5x v5 on every shape of fused_check). TMA where v6 does not apply runs v5. */
static int flash_impl(int cc, const attn_problem *p)
{
    const bool hopper = flash_hopper(cc);
    int f = p->impl;
    if (flash_splitkv_is(p)) return FLASH_IMPL_SPLITKV; /* named, or the default of a serving or GQA decode */
    if (flash_serving_prefill_is(p)) /* v6's SERVING kernel; elsewhere v3's */
        return hopper ? FLASH_IMPL_TMA : FLASH_IMPL_GENERIC;
    if (!flash_impl_runnable(f, cc)) f = FLASH_IMPL_DEFAULT; /* unknown, or not here: the default */
    if (f == FLASH_IMPL_DEFAULT && hopper) f = FLASH_IMPL_TMA;
    if (f == FLASH_IMPL_TMA && !flash_tma_applies(p)) f = FLASH_IMPL_WGMMA;
    if (attn_dv(p) != p->head_dim && f != FLASH_IMPL_TMA) return FLASH_IMPL_GENERIC; /* v6 (192/128) or v3 */
    if (f != FLASH_IMPL_DEFAULT) return f;
    return cc == 86 || cc == 89 ? FLASH_IMPL_W8 : FLASH_IMPL_W4;
}

/* What flash_dispatch below launches for each family and head_dim. */
int flash_impl_used(int cc, const attn_problem *p)
{
    const int f = flash_impl(cc, p);
    if (f == FLASH_IMPL_SPLITKV || f == FLASH_IMPL_GENERIC || f == FLASH_IMPL_TMA) return f;
    switch (p->head_dim) {
    case 64: return f == FLASH_IMPL_WGMMA ? f : FLASH_IMPL_GENERIC;
    case 96: return f == FLASH_IMPL_W8 || f == FLASH_IMPL_GENERIC ? f : FLASH_IMPL_W4;
    case 128: return f;
    default: return FLASH_IMPL_GENERIC;
    }
}

/* A value head dim of its own: v3 in the smallest bucket that holds both dims. */
template <class T, bool BF16> static int flash_dispatch_dv(exec_context *ctx, const attn_problem *p, const attn_tensors *t)
{
    const int64_t d = p->head_dim > attn_dv(p) ? p->head_dim : attn_dv(p);
    if (d <= 64) return flash_launch<flash_generic_cfg_d64_dv, T, BF16>(ctx, p, t, "flash_forward");
    if (d <= 96) return flash_launch<flash_generic_cfg_d96, T, BF16>(ctx, p, t, "flash_forward");
    if (d <= 128) return flash_launch<flash_generic_cfg_d128, T, BF16>(ctx, p, t, "flash_forward");
    if (d <= 192) return flash_launch<flash_generic_cfg_d192, T, BF16>(ctx, p, t, "flash_forward");
    return flash_launch<flash_generic_cfg_d256_dv, T, BF16>(ctx, p, t, "flash_forward");
}

template <bool BF16> static int flash_dispatch(exec_context *ctx, const attn_problem *p, const attn_tensors *t)
{
    typedef typename std::conditional<BF16, __nv_bfloat16, __half>::type T;
    const int impl = flash_impl(ctx->cc, p);
    if (impl == FLASH_IMPL_TMA) return flash_tma_dispatch<T, BF16>(ctx, p, t);
    if (attn_dv(p) != p->head_dim) return flash_dispatch_dv<T, BF16>(ctx, p, t);
    switch (p->head_dim) {
    case 32: return flash_launch<flash_generic_cfg_d32, T, BF16>(ctx, p, t, "flash_forward");
    case 64:
        if (impl == FLASH_IMPL_WGMMA && flash_wg_short(p))
            return flash_wg_launch<flash_wg_cfg_d64_short, T, BF16>(ctx, p, t, "flash_forward");
        if (impl == FLASH_IMPL_WGMMA) return flash_wg_launch<flash_wg_cfg_d64_long, T, BF16>(ctx, p, t, "flash_forward");
        return flash_launch<flash_generic_cfg_d64, T, BF16>(ctx, p, t, "flash_forward");
    case 96:
        if (impl == FLASH_IMPL_W8) return flash_exact_launch<flash_exact_cfg_d96_w8, T, BF16>(ctx, p, t, "flash_forward");
        /* no v5 kernel at 96: v4 */
        if (impl == FLASH_IMPL_W4 || impl == FLASH_IMPL_WGMMA)
            return flash_exact_launch<flash_exact_cfg_d96_w4, T, BF16>(ctx, p, t, "flash_forward");
        return flash_launch<flash_generic_cfg_d96, T, BF16>(ctx, p, t, "flash_forward");
    case 128:
        if (impl == FLASH_IMPL_WGMMA && flash_wg_short(p))
            return flash_wg_launch<flash_wg_cfg_d128_short, T, BF16>(ctx, p, t, "flash_forward");
        if (impl == FLASH_IMPL_WGMMA) return flash_wg_launch<flash_wg_cfg_d128_long, T, BF16>(ctx, p, t, "flash_forward");
        if (impl == FLASH_IMPL_W8) return flash_exact_launch<flash_exact_cfg_d128_w8, T, BF16>(ctx, p, t, "flash_forward");
        if (impl == FLASH_IMPL_W4 && ctx->cc >= 90)
            return flash_exact_launch<flash_exact_cfg_d128_w4_sm90, T, BF16>(ctx, p, t, "flash_forward");
        if (impl == FLASH_IMPL_W4) return flash_exact_launch<flash_exact_cfg_d128_w4, T, BF16>(ctx, p, t, "flash_forward");
        return flash_launch<flash_generic_cfg_d128, T, BF16>(ctx, p, t, "flash_forward");
    case 192: return flash_launch<flash_generic_cfg_d192, T, BF16>(ctx, p, t, "flash_forward");
    case 256: return flash_launch<flash_generic_cfg_d256, T, BF16>(ctx, p, t, "flash_forward");
    default: return exec_fail(ctx, __FILE__, __LINE__, "flash_forward", "unsupported head_dim");
    }
}

int flash_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace)
{
    char why[200];
    if (variant_check_flash(p, why, sizeof why) != 0) return exec_fail(ctx, __FILE__, __LINE__, "flash_check", why);
    if (ctx->cc < 80) return exec_fail(ctx, __FILE__, __LINE__, "flash_forward", "needs compute capability 8.0+");
    if (flash_impl(ctx->cc, p) == FLASH_IMPL_SPLITKV) return flash_splitkv_forward(ctx, p, t, workspace);
    return p->dtype == ATTN_BF16 ? flash_dispatch<true>(ctx, p, t) : flash_dispatch<false>(ctx, p, t);
}
