/* fused_check.cu — standalone correctness + timing harness for the fused variants
 * (`efficient`, `flash`; kernels/fused.h). Needs a GPU of compute capability 8.0+.
 *
 * Build (from the repository root; tests/gpu/fused_check.sh does this and runs it):
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -DFLASH_HAVE_SM90A -I. \
 *        -o build/fused_check tests/gpu/fused_check.cu kernels/efficient.cu kernels/flash.cu \
 *        kernels/exec_context.c kernels/attn.c -lcublas
 * plus -DFUSED_CHECK_CUDNN -D_GNU_SOURCE kernels/cudnn/cudnn_loader.c kernels/cudnn/cudnn_sdpa.c -ldl for the `cudnn`
 * row (attnd's cudnn variant, enabled at run time with --cudnn DIR: the directory of the
 * libcudnn.so.9 to load, e.g. PyTorch's nvidia/cudnn/lib).
 * Options: --quick (no timing), --timing-only (only the timed shapes, still verified), --small
 * (only small correctness cases: for compute-sanitizer),
 * --only name,prefix*,... (those variants), --sections dense,models,head_dim_v,decode,serving,scales
 * (those correctness sections), --dtype NAME (that dtype's cases), --repeats N (each timing N times: median, range;
 * the repeats go round the variants, A B then B A), --shape B,H,S,D,MASK (time that shape
 * only; bf16; MASK none, causal or causal_bottom_right; S may be Sq:Skv, e.g. 1:4096 for a
 * decode), --window-ms N (each timing the mean over an N ms window of back-to-back
 * forwards: sustained load at the power limit, not a burst); --shape takes ,Hkv[,W[,Dv]] after the mask
 * for grouped K/V heads, a window of W keys and a value head dim (B,H,S,D,causal,Hkv,W,Dv; Hkv 0:
 * H, W −1: none, Dv 0: D); S written LO-HI is a ragged batch of B sequences of LO to HI tokens
 * (evenly spaced; queries and keys alike), and a ninth field P pages its K/V cache in pages of P
 * tokens (B,H,LO-HI,D,causal,Hkv,W,Dv,P; P 0: not paged).
 *
 * What it does:
 *   1. For many cases (dtypes, head dims, masks, S = 1, 63, 64, 65, 1000, 4097, Sq ≠ Skv both
 *      ways, B·H = 70000; grouped K/V heads and sliding windows) it draws standard-normal
 *      inputs, poisons the output with NaN, runs
 *      each variant that accepts the problem, and compares with an fp64 reference: on the
 *      CPU for small cases, else a naive one-block-per-row fp64 GPU kernel (obviously
 *      correct: dot products, max, exp, sum, weighted sum of V) over sampled rows.
 *      Prints max abs error and rel L2 error; PASS when rel_l2 ≤ 1.6e-2 (bf16), 2e-3 (fp16),
 *      1e-5 (fp32) and no NaN survived (NaN left = an element never written).
 *      Serving batches (the serving section: ragged and paged, docs/serving.md) are checked the
 *      same way against an fp64 reference that reads each row through the layout (attn_q_row,
 *      attn_kv_row), and a paged run against its contiguous twin.
 *   2. Times each variant on the shapes of bench/shapes.json (bf16): CUDA events,
 *      median of 20 after 5 warm-ups, inputs hot in L2; TFLOP/s = 4·B·H·S²·D, halved for
 *      causal. Those shapes are verified too (sampled rows) before they are timed.
 * Exit status: 0 when everything passed, 1 on any FAIL, 2 on a CUDA error.
 */
#include <algorithm>
#include <iterator>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <thread>
#include <vector>

#include "common/attn.h"
#include "kernels/decomposed.h"
#include "kernels/dtype_convert.h"
#include "kernels/exec_context.h"
#include "kernels/flash_tma.cuh"
#include "kernels/flash_wgmma.cuh"
#include "kernels/fused.h"
#include "kernels/seq_layout.h"

#define CHECK_CUDA(call)                                                                              \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) {                                                                      \
            fprintf(stderr, "%s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(2);                                                                                  \
        }                                                                                             \
    } while (0)

typedef int (*check_fn)(const attn_problem *, char *, size_t);
typedef int (*forward_fn)(exec_context *, const attn_problem *, const attn_tensors *, void *);
typedef size_t (*workspace_fn)(const attn_problem *);
struct fused_variant {
    const char *name;
    check_fn check;
    forward_fn forward;
    workspace_fn workspace; /* NULL: none */
};
/* Every selectable kernel of kernels/fused.h is checked and timed in one run: "flash" and
 * "efficient" are the defaults (on an H200 built with sm_90a, flash is the TMA kernel at
 * head_dim 64/128); "flash@w8", "flash@w4", "flash@legacy" and "efficient@legacy" force one
 * kernel where it differs from the others (head_dim 96/128, legacy also 64; efficient: 128), and
 * skip other problems silently (same kernel as the default). A family is forced as the server
 * forces it: through attn_problem.impl. */
template <int IMPL> static int flash_fwd_impl(exec_context *c, const attn_problem *p, const attn_tensors *t, void *w)
{
    attn_problem q = *p;
    q.impl = IMPL;
    return flash_forward(c, &q, t, w);
}
static int flash_check_d96_128(const attn_problem *p, char *why, size_t why_len)
{
    if (p->head_dim != 96 && p->head_dim != 128) {
        why[0] = '\0'; /* silent skip */
        return -1;
    }
    return variant_check_flash(p, why, why_len);
}
/* The split-KV decode (flash_splitkv.cu): only where it runs (seq_q ≤ 16, head_dim 64/128);
 * its workspace is the partial outputs of its splits. */
static int flash_check_splitkv(const attn_problem *p, char *why, size_t why_len)
{
    attn_problem q = *p;
    q.impl = FLASH_IMPL_SPLITKV;
    if (flash_splitkv_check(&q, why, why_len) != 0) {
        why[0] = '\0'; /* silent skip */
        return -1;
    }
    return variant_check_flash(&q, why, why_len);
}
static size_t flash_splitkv_ws(const attn_problem *p)
{
    attn_problem q = *p;
    q.impl = FLASH_IMPL_SPLITKV;
    return flash_workspace_bytes(&q);
}
/* "reference@online": the GPU verify's fallback reference (kernels/reference_online.cu) held to
 * the fp64 reference like a kernel, every layout: its fp32 output in the workspace, then
 * rounded to the dtype. */
static int online_ref_check(const attn_problem *p, char *why, size_t why_len)
{
    const char *refused = reference_online_refuses(p);
    if (refused) snprintf(why, why_len, "%s", refused);
    return refused ? -1 : 0;
}
static size_t online_ref_ws(const attn_problem *p) { return (size_t)attn_out_elems(p) * sizeof(float); }
__global__ void online_ref_round(const float *src, void *dst, attn_dtype t, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dtype_store_f32(dst, t, i, src[i]);
}
static int online_ref_forward(exec_context *c, const attn_problem *p, const attn_tensors *t, void *w)
{
    if (reference_online_f32(c, p, t, (float *)w) != 0) return -1;
    online_ref_round<<<1024, 256, 0, c->stream>>>((const float *)w, t->out, p->dtype, attn_out_elems(p));
    LAUNCH_TRY(c);
    return 0;
}
/* v3 by name, checked as the forward will be: with that impl (a serving batch: v3's SERVING
 * instantiation, pending). */
static int flash_check_d64_96_128(const attn_problem *p, char *why, size_t why_len)
{
    if (p->head_dim != 64 && p->head_dim != 96 && p->head_dim != 128) {
        why[0] = '\0'; /* silent skip */
        return -1;
    }
    attn_problem q = *p;
    q.impl = FLASH_IMPL_GENERIC;
    return variant_check_flash(&q, why, why_len);
}
template <int IMPL> static int efficient_fwd_impl(exec_context *c, const attn_problem *p, const attn_tensors *t, void *w)
{
    attn_problem q = *p;
    q.impl = IMPL;
    return efficient_forward(c, &q, t, w);
}
static int efficient_check_d128_16(const attn_problem *p, char *why, size_t why_len)
{
    if (p->head_dim != 128 || p->dtype == ATTN_FP32) {
        why[0] = '\0'; /* silent skip */
        return -1;
    }
    return variant_check_efficient(p, why, why_len);
}
/* Each wgmma configuration forced on every problem (kernels/flash.cu picks one per problem:
 * the "flash" rows), so that each is checked on every case and timed side by side:
 * "flash@wgW sS [d] [_bnN]" = W warpgroups, S stages, d: P·V deferred (flash_wgmma.cuh:
 * FLASH_WG_DEFER), N keys per block (default 128). Only in a build with sm_90a code, on sm_90;
 * otherwise skipped silently. */
static int fused_cc = 0;
/* DV: the value head dim the configuration holds (v5 has one head dim for K and V: flash.cu
 * sends a value head dim of its own to v3) */
template <class TR, int DV = TR::D> static int flash_wg_check(const attn_problem *p, char *why, size_t why_len)
{
#ifdef FLASH_HAVE_SM90A
    if (p->head_dim == TR::D && attn_dv(p) == DV && fused_cc == 90) return variant_check_flash(p, why, why_len);
#endif
    why[0] = '\0';
    return -1;
}
template <class TR> static int flash_wg_fwd(exec_context *c, const attn_problem *p, const attn_tensors *t, void *)
{
    return p->dtype == ATTN_BF16 ? flash_wg_launch<TR, __nv_bfloat16, true>(c, p, t, "flash_wg")
                                 : flash_wg_launch<TR, __half, false>(c, p, t, "flash_wg");
}
typedef flash_wg_traits<128, 128, 2, 3, FLASH_WG_DEFER> wg_d128_w2s3d;
typedef flash_wg_traits<128, 128, 3, 2, FLASH_WG_SERIAL> wg_d128_w3s2;
typedef flash_wg_traits<128, 64, 3, 3, FLASH_WG_DEFER> wg_d128_w3s3d_bn64;
typedef flash_wg_traits<64, 128, 2, 3, FLASH_WG_DEFER> wg_d64_w2s3d;
typedef flash_wg_traits<64, 128, 3, 3, FLASH_WG_DEFER> wg_d64_w3s3d;
#define WG_VARIANT(name, TR) {name, flash_wg_check<TR>, flash_wg_fwd<TR>}
/* v6 (flash_tma.cuh) configurations forced likewise: "flash@tD wW [sS] [d] [_tree]" = head dim
 * D, W consumer warpgroups, S stages (default 2), d: the dynamic tile counter (default: static
 * round-robin), _tree: the softmax's reductions as trees (TREE). The shipped ones (kernels/
 * flash.cu) are t128w2, t128w2d, t64w3, t64w3d and t64w2s3d_tree; "flash@tma" and "flash@wgmma"
 * are flash.cu's own choice within v6 and v5. */
template <class TR> static int flash_tma_fwd(exec_context *c, const attn_problem *p, const attn_tensors *t, void *)
{
    return p->dtype == ATTN_BF16 ? flash_tma_launch<TR, __nv_bfloat16, true>(c, p, t, "flash_tma")
                                 : flash_tma_launch<TR, __half, false>(c, p, t, "flash_tma");
}
template <class TR> static int flash_tma_check(const attn_problem *p, char *why, size_t why_len)
{
    if (p->scale == 0.0) { /* v6 needs a nonzero scale (flash.cu routes 0 to v5) */
        why[0] = '\0';
        return -1;
    }
    return flash_wg_check<TR, TR::DV>(p, why, why_len);
}
typedef flash_tma_traits<128, 2, 128, 2, FLASH_TMA_STATIC> tma_d128_w2;
typedef flash_tma_traits<128, 2, 128, 2, FLASH_TMA_DYNAMIC> tma_d128_w2d;
typedef flash_tma_traits<64, 3, 128, 2, FLASH_TMA_STATIC> tma_d64_w3;
typedef flash_tma_traits<64, 3, 128, 2, FLASH_TMA_DYNAMIC> tma_d64_w3d;
typedef flash_tma_traits<64, 2, 128, 2, FLASH_TMA_STATIC> tma_d64_w2;
typedef flash_tma_traits<64, 2, 128, 2, FLASH_TMA_DYNAMIC> tma_d64_w2d;
typedef flash_tma_traits<64, 2, 128, 3, FLASH_TMA_DYNAMIC> tma_d64_w2s3d;
typedef flash_tma_traits<128, 2, 128, 2, FLASH_TMA_STATIC, true> tma_d128_w2_tree;
typedef flash_tma_traits<128, 2, 128, 2, FLASH_TMA_DYNAMIC, true> tma_d128_w2d_tree;
typedef flash_tma_traits<64, 3, 128, 2, FLASH_TMA_DYNAMIC, true> tma_d64_w3d_tree;
typedef flash_tma_traits<64, 2, 128, 3, FLASH_TMA_DYNAMIC, true> tma_d64_w2s3d_tree;
/* head dims 96, 192 with V's 128, 256 (flash.cu ships t96w2d, t192v128w2d, t256w2_bn80 and
 * t256w2d_bn80); 64-key blocks at 256 for comparison */
typedef flash_tma_traits<96, 2, 128, 2, FLASH_TMA_DYNAMIC> tma_d96_w2d;
typedef flash_tma_traits<96, 2, 128, 2, FLASH_TMA_STATIC> tma_d96_w2;
typedef flash_tma_traits<192, 2, 128, 2, FLASH_TMA_DYNAMIC, false, 128> tma_d192_v128_w2d;
typedef flash_tma_traits<256, 2, 80, 2, FLASH_TMA_STATIC> tma_d256_w2_bn80;
typedef flash_tma_traits<256, 2, 80, 2, FLASH_TMA_DYNAMIC> tma_d256_w2d_bn80;
typedef flash_tma_traits<256, 2, 64, 2, FLASH_TMA_DYNAMIC> tma_d256_w2d_bn64;
/* The traits' derived constants redefined: "_l2sN" L2 sections of N MB (the defaults: one head
 * for static tiles, 16 MB for dynamic), "_eager" O rescaled whenever a row max moves (no
 * slack, v5's rule), "_qs" Q read from shared memory by every Q·Kᵀ (not held in registers, as
 * with 3 warpgroups). */
template <class TR, long long MB> struct tma_l2 : TR {
    static constexpr long long L2_SECTION_BYTES = MB << 20;
};
template <class TR> struct tma_eager : TR {
    static constexpr int RESCALE_SLACK = 0;
};
template <class TR> struct tma_q_smem : TR {
    static constexpr bool Q_IN_REGS = false;
};
typedef tma_l2<tma_d128_w2, 16> tma_d128_w2_l2s16;
typedef tma_l2<tma_d64_w3, 16> tma_d64_w3_l2s16;
typedef tma_l2<tma_d128_w2d, 4> tma_d128_w2d_l2s4;
typedef tma_eager<tma_d128_w2> tma_d128_w2_eager;
typedef tma_eager<tma_d128_w2d> tma_d128_w2d_eager;
typedef tma_eager<tma_d64_w3> tma_d64_w3_eager;
typedef tma_eager<tma_d64_w3d> tma_d64_w3d_eager;
typedef tma_eager<tma_d64_w2s3d_tree> tma_d64_w2s3d_tree_eager;
typedef tma_q_smem<tma_d128_w2> tma_d128_w2_qs;
typedef tma_q_smem<tma_d128_w2d> tma_d128_w2d_qs;
typedef tma_q_smem<tma_d64_w2s3d_tree> tma_d64_w2s3d_tree_qs;
#define TMA_VARIANT(name, TR) {name, flash_tma_check<TR>, flash_tma_fwd<TR>}
/* flash's check with p's impl set to impl, as the forward will see it; -1 in a binary without
 * sm_90a code, where neither Hopper kernel exists. */
static int flash_check_as(const attn_problem *p, int impl, char *why, size_t why_len)
{
#ifdef FLASH_HAVE_SM90A
    attn_problem q = *p;
    q.impl = impl;
    return variant_check_flash(&q, why, why_len);
#else
    (void)p, (void)impl, (void)why, (void)why_len;
    return -1;
#endif
}
/* v6 or v5 by name (IMPL), on sm_90 with its code (a serving batch takes v6 for prefill only). */
template <int IMPL> static int flash_check_hopper_64_128(const attn_problem *p, char *why, size_t why_len)
{
    why[0] = '\0';
    if (fused_cc != 90 || (p->head_dim != 64 && p->head_dim != 128)) return -1;
    return flash_check_as(p, IMPL, why, why_len);
}
/* v6's other head dims (flash.cu's flash_tma_dims): 96, 256 and 192 with V's 128 */
static int flash_check_hopper_tma(const attn_problem *p, char *why, size_t why_len)
{
    why[0] = '\0';
    const int64_t d = p->head_dim, dv = attn_dv(p);
    if (fused_cc != 90 || p->scale == 0.0) return -1;
    if (!((d == dv && (d == 64 || d == 96 || d == 128 || d == 256)) || (d == 192 && dv == 128))) return -1;
    return flash_check_as(p, FLASH_IMPL_TMA, why, why_len);
}

static const fused_variant check_variants[] = {
    {"efficient", variant_check_efficient, efficient_fwd_impl<EFFICIENT_IMPL_DEFAULT>},
    {"efficient@legacy", efficient_check_d128_16, efficient_fwd_impl<EFFICIENT_IMPL_BUCKET>},
    {"flash", variant_check_flash, flash_fwd_impl<FLASH_IMPL_DEFAULT>, flash_workspace_bytes}, /* split-KV: serving decode */
    {"flash@w8", flash_check_d96_128, flash_fwd_impl<FLASH_IMPL_W8>},
    {"flash@w4", flash_check_d96_128, flash_fwd_impl<FLASH_IMPL_W4>},
    {"flash@legacy", flash_check_d64_96_128, flash_fwd_impl<FLASH_IMPL_GENERIC>},
    {"flash@splitkv", flash_check_splitkv, flash_fwd_impl<FLASH_IMPL_SPLITKV>, flash_splitkv_ws},
    {"reference@online", online_ref_check, online_ref_forward, online_ref_ws},
    WG_VARIANT("flash@wg2s3d", wg_d128_w2s3d),
    WG_VARIANT("flash@wg3s2", wg_d128_w3s2),
    WG_VARIANT("flash@wg3s3d_bn64", wg_d128_w3s3d_bn64),
    WG_VARIANT("flash@wg2s3d", wg_d64_w2s3d),
    WG_VARIANT("flash@wg3s3d", wg_d64_w3s3d),
    {"flash@wgmma", flash_check_hopper_64_128<FLASH_IMPL_WGMMA>, flash_fwd_impl<FLASH_IMPL_WGMMA>},
    {"flash@tma", flash_check_hopper_tma, flash_fwd_impl<FLASH_IMPL_TMA>},
    TMA_VARIANT("flash@t128w2", tma_d128_w2),
    TMA_VARIANT("flash@t128w2d", tma_d128_w2d),
    TMA_VARIANT("flash@t64w3", tma_d64_w3),
    TMA_VARIANT("flash@t64w3d", tma_d64_w3d),
    TMA_VARIANT("flash@t64w2s3d_tree", tma_d64_w2s3d_tree),
    TMA_VARIANT("flash@t64w2", tma_d64_w2),
    TMA_VARIANT("flash@t64w2d", tma_d64_w2d),
    TMA_VARIANT("flash@t64w2s3d", tma_d64_w2s3d),
    TMA_VARIANT("flash@t128w2_tree", tma_d128_w2_tree),
    TMA_VARIANT("flash@t128w2d_tree", tma_d128_w2d_tree),
    TMA_VARIANT("flash@t64w3d_tree", tma_d64_w3d_tree),
    TMA_VARIANT("flash@t128w2_l2s16", tma_d128_w2_l2s16),
    TMA_VARIANT("flash@t64w3_l2s16", tma_d64_w3_l2s16),
    TMA_VARIANT("flash@t128w2d_l2s4", tma_d128_w2d_l2s4),
    TMA_VARIANT("flash@t128w2_eager", tma_d128_w2_eager),
    TMA_VARIANT("flash@t128w2d_eager", tma_d128_w2d_eager),
    TMA_VARIANT("flash@t64w3_eager", tma_d64_w3_eager),
    TMA_VARIANT("flash@t64w3d_eager", tma_d64_w3d_eager),
    TMA_VARIANT("flash@t64w2s3d_tree_eager", tma_d64_w2s3d_tree_eager),
    TMA_VARIANT("flash@t128w2_qs", tma_d128_w2_qs),
    TMA_VARIANT("flash@t128w2d_qs", tma_d128_w2d_qs),
    TMA_VARIANT("flash@t64w2s3d_tree_qs", tma_d64_w2s3d_tree_qs),
    TMA_VARIANT("flash@t96w2d", tma_d96_w2d),
    TMA_VARIANT("flash@t96w2", tma_d96_w2),
    TMA_VARIANT("flash@t192v128w2d", tma_d192_v128_w2d),
    TMA_VARIANT("flash@t256w2_bn80", tma_d256_w2_bn80),
    TMA_VARIANT("flash@t256w2d_bn80", tma_d256_w2d_bn80),
    TMA_VARIANT("flash@t256w2d_bn64", tma_d256_w2d_bn64),
};

#ifdef FUSED_CHECK_CUDNN
/* attnd's `cudnn` variant (kernels/cudnn/cudnn_sdpa.c, cuDNN loaded at run time from the directory
 * given with --cudnn DIR), checked and timed beside the fused kernels: the comparator of the
 * flash targets. Built only when FUSED_CHECK_CUDNN is defined (tests/gpu/fused_check.sh). */
#include "kernels/cudnn/cudnn_loader.h"
#include "kernels/cudnn/cudnn_sdpa.h"
static bool cudnn_row = false;
static int cudnn_row_check(const attn_problem *p, char *why, size_t why_len)
{
    if (!cudnn_row) {
        why[0] = '\0';
        return -1;
    }
    return cudnn_sdpa_check(p, why, why_len);
}
static const fused_variant cudnn_variant = {"cudnn", cudnn_row_check, cudnn_sdpa_forward, cudnn_sdpa_workspace_bytes};
#endif

/* --small: only the correctness cases of at most SMALL_SCORES scores a problem (under
 * compute-sanitizer, which runs kernels ~100 times slower); many-tile cases stay. */
static bool small_only = false;
#define SMALL_SCORES 4000000
static bool too_big(int64_t B, int64_t H, int64_t Sq, int64_t Skv) { return small_only && B * H * Sq * Skv > SMALL_SCORES; }

/* --only a,b*,...: run only the variants named a, or whose names start with b. */
static const char *only_list = NULL;
static bool variant_selected(const char *name)
{
    if (!only_list) return true;
    const char *s = only_list;
    while (*s) {
        const char *e = strchr(s, ',');
        const size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n > 0 && s[n - 1] == '*' && strncmp(name, s, n - 1) == 0) return true;
        if (n > 0 && s[n - 1] != '*' && strlen(name) == n && strncmp(name, s, n) == 0) return true;
        if (!e) break;
        s = e + 1;
    }
    return false;
}

/* ------------------------------------------------------------------ inputs */

/* Standard-normal inputs: Box–Muller over a counter-based hash (element i of fill number k), so
 * every host thread makes its own slice: a decode's gigabytes of K/V in seconds, where one
 * sequential generator took minutes a problem. */
static uint64_t fill_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull; /* splitmix64's finaliser */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void fill_normal_slice(uint8_t *buf, attn_dtype t, int64_t begin, int64_t end, uint64_t fill)
{
    for (int64_t i = begin; i < end; ++i) {
        const uint64_t a = fill_mix(fill * 0xd1b54a32d192ed03ull ^ (uint64_t)i), b = fill_mix(a);
        const double u1 = ((double)(a >> 11) + 0.5) * (1.0 / 9007199254740992.0), u2 = (double)(b >> 11) * (1.0 / 9007199254740992.0);
        dtype_store_f32(buf, t, i, (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)));
    }
}

static uint64_t fills = 0;
static void fill_normal(std::vector<uint8_t> &buf, attn_dtype t, int64_t n)
{
    buf.resize((size_t)n * attn_dtype_bytes(t));
    const uint64_t fill = ++fills;
    const int64_t workers = n < (1 << 20) ? 1 : std::max(1u, std::min(64u, std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    for (int64_t w = 0; w < workers; ++w)
        threads.emplace_back(fill_normal_slice, buf.data(), t, n * w / workers, n * (w + 1) / workers, fill);
    for (std::thread &th : threads) th.join();
}

/* ------------------------------------------------------------------ references */

/* fp64 reference for the listed rows of every head: out_ref[bh][i][d] (d < head_dim_v). Query
 * head bh (b·H + h) reads K/V head bh / (H / Hkv) = b·Hkv + h / (H / Hkv); row i sees keys
 * [lo, hi) (attn_visible_range: the mask and the window); none: zeros. */
static void reference_cpu(const attn_problem *p, const void *q, const void *k, const void *v,
                          const std::vector<int> &rows, std::vector<double> &ref)
{
    const int64_t BH = p->batch * p->heads, Sq = p->seq_q, Skv = p->seq_kv, D = p->head_dim, DV = attn_dv(p);
    const int64_t group = p->heads / attn_kv_heads(p);
    ref.assign((size_t)(BH * rows.size() * DV), 0.0);
    std::vector<double> sc((size_t)std::max<int64_t>(Skv, 1));
    for (int64_t bh = 0; bh < BH; ++bh)
        for (size_t ri = 0; ri < rows.size(); ++ri) {
            const int64_t i = rows[ri], kvh = bh / group;
            int64_t lo, hi;
            attn_visible_range(p, i, &lo, &hi);
            double *o = &ref[(size_t)((bh * rows.size() + ri) * DV)];
            if (hi == lo) continue;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = lo; j < hi; ++j) {
                double s = 0;
                for (int64_t d = 0; d < D; ++d)
                    s += (double)dtype_load_f32(q, p->dtype, (bh * Sq + i) * D + d) *
                         (double)dtype_load_f32(k, p->dtype, (kvh * Skv + j) * D + d);
                sc[j] = s * p->scale;
                mx = std::max(mx, sc[j]);
            }
            for (int64_t j = lo; j < hi; ++j) {
                double e = exp(sc[j] - mx);
                sum += e;
                for (int64_t d = 0; d < DV; ++d)
                    o[d] += e * (double)dtype_load_f32(v, p->dtype, (kvh * Skv + j) * DV + d);
            }
            for (int64_t d = 0; d < DV; ++d) o[d] /= sum;
        }
}

#define REF_THREADS 128
#define REF_SMEM_MAX ((size_t)160 << 10) /* an A100 CTA holds 163 KB */
/* One block per (sampled row, b·h); fp64 throughout. The row's scores live in dynamic shared
 * memory, or in `scratch` (n_rows·BH rows of seq_kv) when a row outgrows it (a decode over 32K
 * keys). K/V heads and visible keys as reference_cpu. */
__global__ void reference_gpu_kernel(attn_problem p, const void *q, const void *k, const void *v, const int *rows,
                                     int n_rows, double *out, double *scratch)
{
    extern __shared__ double ref_smem[];
    __shared__ double red[REF_THREADS];
    const int64_t bh = blockIdx.y, kvh = bh / (p.heads / attn_kv_heads(&p));
    const int ri = blockIdx.x, tid = threadIdx.x;
    const int64_t i = rows[ri], Sq = p.seq_q, Skv = p.seq_kv, D = p.head_dim, DV = attn_dv(&p);
    double *ref_sc = scratch ? scratch + (bh * n_rows + ri) * Skv : ref_smem;
    int64_t lo, hi;
    attn_visible_range(&p, i, &lo, &hi);
    double *o = out + (bh * n_rows + ri) * DV;
    double mx = -INFINITY;
    for (int64_t j = lo + tid; j < hi; j += REF_THREADS) {
        double s = 0;
        for (int64_t d = 0; d < D; ++d)
            s += (double)dtype_load_f32(q, p.dtype, (bh * Sq + i) * D + d) *
                 (double)dtype_load_f32(k, p.dtype, (kvh * Skv + j) * D + d);
        ref_sc[j] = s * p.scale;
        mx = fmax(mx, ref_sc[j]);
    }
    red[tid] = mx;
    __syncthreads();
    for (int s = REF_THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] = fmax(red[tid], red[tid + s]);
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    double sum = 0;
    for (int64_t j = lo + tid; j < hi; j += REF_THREADS) {
        ref_sc[j] = exp(ref_sc[j] - mx);
        sum += ref_sc[j];
    }
    red[tid] = sum;
    __syncthreads();
    for (int s = REF_THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    sum = red[0];
    for (int64_t d = tid; d < DV; d += REF_THREADS) {
        double acc = 0;
        for (int64_t j = lo; j < hi; ++j)
            acc += ref_sc[j] * (double)dtype_load_f32(v, p.dtype, (kvh * Skv + j) * DV + d);
        o[d] = hi > lo ? acc / sum : 0.0;
    }
}

/* ------------------------------------------------------------------ harness */

static exec_context ctx;
static int failures = 0;

struct device_problem {
    attn_problem p;
    void *d_q, *d_k, *d_v, *d_out;
    std::vector<uint8_t> h_q, h_k, h_v;
};

/* kv_heads 0: heads; window_keys 0: none; head_dim_v 0: head_dim. */
static void problem_setup(device_problem &dp, int64_t B, int64_t H, int64_t Sq, int64_t Skv, int64_t D, attn_dtype t,
                          attn_mask m, int64_t kv_heads = 0, int64_t window_keys = 0, int64_t head_dim_v = 0)
{
    dp.p = attn_mha(B, H, Sq, Skv, D, t, m, 1.0 / sqrt((double)D));
    dp.p.kv_heads = kv_heads, dp.p.window_keys = window_keys, dp.p.head_dim_v = head_dim_v;
    fill_normal(dp.h_q, t, attn_q_elems(&dp.p));
    fill_normal(dp.h_k, t, attn_k_elems(&dp.p));
    fill_normal(dp.h_v, t, attn_v_elems(&dp.p));
    CHECK_CUDA(cudaMalloc(&dp.d_q, dp.h_q.size() + 16));
    CHECK_CUDA(cudaMalloc(&dp.d_k, dp.h_k.size() + 16));
    CHECK_CUDA(cudaMalloc(&dp.d_v, dp.h_v.size() + 16));
    CHECK_CUDA(cudaMalloc(&dp.d_out, (size_t)attn_out_elems(&dp.p) * attn_dtype_bytes(t) + 16));
    CHECK_CUDA(cudaMemcpy(dp.d_q, dp.h_q.data(), dp.h_q.size(), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dp.d_k, dp.h_k.data(), dp.h_k.size(), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dp.d_v, dp.h_v.data(), dp.h_v.size(), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaDeviceSynchronize()); /* a pageable copy may return before its DMA lands */
}

static void problem_free(device_problem &dp)
{
    CHECK_CUDA(cudaFree(dp.d_q));
    CHECK_CUDA(cudaFree(dp.d_k));
    CHECK_CUDA(cudaFree(dp.d_v));
    CHECK_CUDA(cudaFree(dp.d_out));
}

static const char *shape_str(const attn_problem *p)
{
    static char s[200];
    int n = snprintf(s, sizeof s, "%s %-19s B%-5lld H%-3lld Sq%-5lld Skv%-5lld D%-3lld", attn_dtype_name(p->dtype),
                     attn_mask_name(p->mask), (long long)p->batch, (long long)p->heads, (long long)p->seq_q,
                     (long long)p->seq_kv, (long long)p->head_dim);
    if (attn_kv_heads(p) != p->heads || p->window_keys > 0)
        n += snprintf(s + n, sizeof s - n, " Hkv%-3lld W%lld", (long long)attn_kv_heads(p), (long long)p->window_keys);
    if (attn_dv(p) != p->head_dim) snprintf(s + n, sizeof s - n, " Dv%lld", (long long)attn_dv(p));
    return s;
}

/* The variant's workspace for p (grown, never shrunk; NULL when it needs none). */
static void *variant_workspace(const fused_variant &v, const attn_problem *p)
{
    static void *d_ws = NULL;
    static size_t ws_bytes = 0;
    const size_t need = v.workspace ? v.workspace(p) : 0;
    if (need == 0) return NULL;
    if (need > ws_bytes) {
        if (d_ws) CHECK_CUDA(cudaFree(d_ws));
        CHECK_CUDA(cudaMalloc(&d_ws, need));
        ws_bytes = need;
    }
    return d_ws;
}

/* Every variant of this run: the table, plus the cudnn row when built with it. */
static std::vector<fused_variant> run_variants()
{
    std::vector<fused_variant> v(std::begin(check_variants), std::end(check_variants));
#ifdef FUSED_CHECK_CUDNN
    v.push_back(cudnn_variant);
#endif
    return v;
}

/* Verify every variant that accepts dp.p; rows sampled with step row_step (plus the last). */
static void verify(device_problem &dp, int row_step)
{
    const attn_problem *p = &dp.p;
    std::vector<int> rows;
    for (int64_t i = 0; i < p->seq_q; i += row_step) rows.push_back((int)i);
    if (rows.back() != p->seq_q - 1) rows.push_back((int)(p->seq_q - 1));
    const int64_t BH = p->batch * p->heads, D = attn_dv(p);
    std::vector<double> ref;
    const double work = (double)BH * rows.size() * p->seq_kv * (p->head_dim + D) / 2;
    if (work <= 3e8) {
        reference_cpu(p, dp.h_q.data(), dp.h_k.data(), dp.h_v.data(), rows, ref);
    } else {
        int *d_rows;
        double *d_ref;
        ref.resize((size_t)(BH * rows.size() * D));
        CHECK_CUDA(cudaMalloc(&d_rows, rows.size() * sizeof(int)));
        CHECK_CUDA(cudaMalloc(&d_ref, ref.size() * sizeof(double)));
        CHECK_CUDA(cudaMemcpy(d_rows, rows.data(), rows.size() * sizeof(int), cudaMemcpyHostToDevice));
        size_t smem = (size_t)std::max<int64_t>(p->seq_kv, 1) * sizeof(double);
        double *d_scratch = NULL;
        if (smem > REF_SMEM_MAX) { /* past what any supported GPU's CTA holds: the scores go to global memory */
            CHECK_CUDA(cudaMalloc(&d_scratch, smem * rows.size() * (size_t)BH));
            smem = 0;
        }
        CHECK_CUDA(cudaFuncSetAttribute(reference_gpu_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        reference_gpu_kernel<<<dim3((unsigned)rows.size(), (unsigned)BH), REF_THREADS, smem>>>(
            *p, dp.d_q, dp.d_k, dp.d_v, d_rows, (int)rows.size(), d_ref, d_scratch);
        CHECK_CUDA(cudaGetLastError());
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK_CUDA(cudaMemcpy(ref.data(), d_ref, ref.size() * sizeof(double), cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaFree(d_rows));
        CHECK_CUDA(cudaFree(d_ref));
        CHECK_CUDA(cudaFree(d_scratch));
    }
    const double tol = p->dtype == ATTN_BF16 ? 1.6e-2 : p->dtype == ATTN_FP16 ? 2e-3 : 1e-5;
    std::vector<uint8_t> h_out((size_t)attn_out_elems(p) * attn_dtype_bytes(p->dtype));
    for (const fused_variant &v : run_variants()) {
        char why[256] = "";
        if (!variant_selected(v.name)) continue;
        if (v.check(p, why, sizeof why) != 0) {
            if (why[0]) printf("  %-16s %s  unsupported: %s\n", v.name, shape_str(p), why);
            continue;
        }
        /* on the forward's stream: a non-blocking stream is not ordered after a plain cudaMemset */
        CHECK_CUDA(cudaMemsetAsync(dp.d_out, 0xff, h_out.size(), ctx.stream)); /* all-ones bits: NaN in every dtype */
        attn_tensors t = {dp.d_q, dp.d_k, dp.d_v, dp.d_out};
        exec_clear_error(&ctx);
        void *ws = variant_workspace(v, p);
        if (v.forward(&ctx, p, &t, ws) != 0) {
            printf("  %-16s %s  FAIL forward: %s\n", v.name, shape_str(p), ctx.error);
            failures++;
            continue;
        }
        CHECK_CUDA(cudaStreamSynchronize(ctx.stream));
        CHECK_CUDA(cudaMemcpy(h_out.data(), dp.d_out, h_out.size(), cudaMemcpyDeviceToHost));
        double max_abs = 0, err2 = 0, ref2 = 0;
        int64_t nan_count = 0;
        for (int64_t bh = 0; bh < BH; ++bh)
            for (size_t ri = 0; ri < rows.size(); ++ri)
                for (int64_t d = 0; d < D; ++d) {
                    double r = ref[(size_t)((bh * rows.size() + ri) * D + d)];
                    double o = dtype_load_f32(h_out.data(), p->dtype, (bh * p->seq_q + rows[ri]) * D + d);
                    if (!(o == o)) { nan_count++; continue; }
                    max_abs = std::max(max_abs, fabs(o - r));
                    err2 += (o - r) * (o - r);
                    ref2 += r * r;
                }
        /* unsampled rows must be written too */
        for (int64_t i = 0; i < attn_out_elems(p); ++i) {
            float o = dtype_load_f32(h_out.data(), p->dtype, i);
            if (!(o == o)) { nan_count++; }
        }
        const double rel = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
        const bool ok = nan_count == 0 && rel <= tol;
        if (!ok) failures++;
        printf("  %-16s %s  max_abs %.3e rel_l2 %.3e nan %lld (%s ref, %zu rows/head)  %s\n", v.name, shape_str(p),
               max_abs, rel, (long long)nan_count, work <= 3e8 ? "cpu" : "gpu", rows.size(), ok ? "PASS" : "FAIL");
    }
}

/* ------------------------------------------------------------------ serving batches */

/* A paged or ragged batch (docs/serving.md): its layout (kernels/seq_layout.c) and its tensors as
 * the variants read them — q and out token-major when ragged; k and v packed, or in a paged cache
 * whose unused slots hold finite values too — on the host and the device, with the contiguous K/V
 * the cache was made from (its twin: the same tokens without pages). */
struct serving_problem {
    attn_problem p;
    seq_layout lay;
    std::vector<uint8_t> h_q, h_k, h_v, h_k_flat, h_v_flat;
    void *d_q, *d_k, *d_v, *d_out, *d_k_flat, *d_v_flat, *d_out_flat;
    int32_t *d_cu_q, *d_cu_kv, *d_table;
};

/* The variants that take serving batches: flash's default (split-KV decode for seq_q ≤ 16, v6's
 * SERVING kernel for prefill), its v6, v3 and split-KV decode by name, and efficient (v1's
 * SERVING instantiation, 16-bit). Every other row would run the dense layout on them. */
static bool serving_variant(const char *name)
{
    return strcmp(name, "flash") == 0 || strcmp(name, "flash@tma") == 0 || strcmp(name, "flash@splitkv") == 0 ||
           strcmp(name, "flash@legacy") == 0 || strcmp(name, "efficient") == 0 || strcmp(name, "reference@online") == 0;
}

template <class T> static T *device_copy(const void *host, size_t bytes)
{
    void *d = NULL;
    CHECK_CUDA(cudaMalloc(&d, bytes + 16));
    if (bytes) CHECK_CUDA(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaDeviceSynchronize()); /* a pageable copy may return before its DMA lands */
    return static_cast<T *>(d);
}

/* lq, lkv: the sequences' lengths (ragged: the packed layout; else all equal, the dense one);
 * page > 0: K/V in a paged cache of that page size with three pages more than the sequences use. */
static void serving_setup(serving_problem &sp, int64_t H, int64_t Hkv, int64_t D, attn_dtype t, attn_mask m, int64_t W,
                          const std::vector<int32_t> &lq, const std::vector<int32_t> &lkv, bool ragged, int64_t page)
{
    const int64_t B = (int64_t)lq.size();
    const int64_t sq = *std::max_element(lq.begin(), lq.end()), skv = *std::max_element(lkv.begin(), lkv.end());
    sp.p = attn_mha(B, H, sq, skv, D, t, m, 1.0 / sqrt((double)D));
    sp.p.kv_heads = Hkv, sp.p.window_keys = W;
    if (ragged) {
        sp.p.ragged = ATTN_RAGGED_Q | ATTN_RAGGED_KV;
        for (int64_t b = 0; b < B; ++b) sp.p.total_q += lq[b], sp.p.total_kv += lkv[b];
    }
    if (page > 0) {
        sp.p.page_size = page;
        for (int64_t b = 0; b < B; ++b) sp.p.num_pages += (lkv[b] + page - 1) / page;
        sp.p.num_pages += 3;
    }
    if (seq_layout_build(&sp.lay, &sp.p, lq.data(), lkv.data(), 0x5eed0000ull + fills) != 0) {
        fprintf(stderr, "seq_layout_build: out of memory\n");
        exit(2);
    }
    const size_t esz = attn_dtype_bytes(t);
    attn_problem flat = sp.p; /* the contiguous twin */
    flat.page_size = 0, flat.num_pages = 0;
    fill_normal(sp.h_q, t, attn_q_elems(&sp.p));
    fill_normal(sp.h_k_flat, t, attn_k_elems(&flat));
    fill_normal(sp.h_v_flat, t, attn_v_elems(&flat));
    if (page > 0) { /* the whole cache finite, then every token at its slot */
        fill_normal(sp.h_k, t, attn_k_elems(&sp.p));
        fill_normal(sp.h_v, t, attn_v_elems(&sp.p));
        seq_layout_to_pages(&sp.p, sp.h_k_flat.data(), sp.h_k.data(), D, esz);
        seq_layout_to_pages(&sp.p, sp.h_v_flat.data(), sp.h_v.data(), attn_dv(&sp.p), esz);
    } else {
        sp.h_k = sp.h_k_flat, sp.h_v = sp.h_v_flat;
    }
    const size_t out_bytes = (size_t)attn_out_elems(&sp.p) * esz;
    sp.d_q = device_copy<void>(sp.h_q.data(), sp.h_q.size());
    sp.d_k = device_copy<void>(sp.h_k.data(), sp.h_k.size());
    sp.d_v = device_copy<void>(sp.h_v.data(), sp.h_v.size());
    sp.d_k_flat = device_copy<void>(sp.h_k_flat.data(), sp.h_k_flat.size());
    sp.d_v_flat = device_copy<void>(sp.h_v_flat.data(), sp.h_v_flat.size());
    CHECK_CUDA(cudaMalloc(&sp.d_out, out_bytes + 16));
    CHECK_CUDA(cudaMalloc(&sp.d_out_flat, out_bytes + 16));
    sp.d_cu_q = ragged ? device_copy<int32_t>(sp.lay.cu_seqlens_q, (size_t)(B + 1) * 4) : NULL;
    sp.d_cu_kv = ragged ? device_copy<int32_t>(sp.lay.cu_seqlens_kv, (size_t)(B + 1) * 4) : NULL;
    sp.d_table = page > 0 ? device_copy<int32_t>(sp.lay.block_table, (size_t)(B * sp.lay.seqs.pages_per_seq) * 4) : NULL;
}

static void serving_free(serving_problem &sp)
{
    for (void *d : {sp.d_q, sp.d_k, sp.d_v, sp.d_out, sp.d_k_flat, sp.d_v_flat, sp.d_out_flat,
                    (void *)sp.d_cu_q, (void *)sp.d_cu_kv, (void *)sp.d_table})
        if (d) CHECK_CUDA(cudaFree(d));
    seq_layout_free(&sp.lay);
}

static const char *serving_str(const attn_problem *p)
{
    static char s[200];
    int n = snprintf(s, sizeof s, "%s %-19s B%-3lld H%lld/%lld Sq<=%lld Skv<=%lld D%lld", attn_dtype_name(p->dtype),
                     attn_mask_name(p->mask), (long long)p->batch, (long long)p->heads, (long long)attn_kv_heads(p),
                     (long long)p->seq_q, (long long)p->seq_kv, (long long)p->head_dim);
    if (p->ragged) n += snprintf(s + n, sizeof s - n, " ragged %lld:%lld", (long long)p->total_q, (long long)p->total_kv);
    if (p->page_size > 0) n += snprintf(s + n, sizeof s - n, " page%lld", (long long)p->page_size);
    if (p->window_keys > 0) snprintf(s + n, sizeof s - n, " W%lld", (long long)p->window_keys);
    return s;
}

/* fp64 reference of rows[b] of every sequence b and head, each row read through the layout
 * (attn_q_row, attn_kv_row: the block table when paged) and masked by the sequence's own lengths
 * (attn_visible_range_seq); ref[(k-th sampled row, h, d)], sampled rows in sequence order. The
 * sequences are shared among host threads. */
static void serving_reference(const serving_problem &sp, const std::vector<std::vector<int>> &rows,
                              std::vector<size_t> &first, std::vector<double> &ref)
{
    const attn_problem *p = &sp.p;
    const int64_t H = p->heads, D = p->head_dim, DV = attn_dv(p), group = H / attn_kv_heads(p);
    first.assign(rows.size() + 1, 0);
    for (size_t b = 0; b < rows.size(); ++b) first[b + 1] = first[b] + rows[b].size();
    ref.assign(first.back() * H * DV, 0.0);
    auto one_seq = [&](int64_t b) {
        const int64_t sq = attn_seqlen_q(p, b), skv = attn_seqlen_kv(p, b);
        std::vector<double> sc((size_t)std::max<int64_t>(skv, 1));
        for (size_t ri = 0; ri < rows[b].size(); ++ri)
            for (int64_t h = 0; h < H; ++h) {
                const int64_t i = rows[b][ri], g = h / group, qr = attn_q_row(p, b, h, i, D);
                int64_t lo, hi;
                attn_visible_range_seq(p, sq, skv, i, &lo, &hi);
                double *o = &ref[((first[b] + ri) * H + h) * DV];
                if (hi == lo) continue;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = lo; j < hi; ++j) {
                    const int64_t kr = attn_kv_row(p, b, g, j, D);
                    double s = 0;
                    for (int64_t d = 0; d < D; ++d)
                        s += (double)dtype_load_f32(sp.h_q.data(), p->dtype, qr + d) *
                             (double)dtype_load_f32(sp.h_k.data(), p->dtype, kr + d);
                    sc[j] = s * p->scale;
                    mx = std::max(mx, sc[j]);
                }
                for (int64_t j = lo; j < hi; ++j) {
                    const double e = exp(sc[j] - mx);
                    const int64_t vr = attn_kv_row(p, b, g, j, DV);
                    sum += e;
                    for (int64_t d = 0; d < DV; ++d) o[d] += e * (double)dtype_load_f32(sp.h_v.data(), p->dtype, vr + d);
                }
                for (int64_t d = 0; d < DV; ++d) o[d] /= sum;
            }
    };
    const int64_t workers = std::max(1u, std::min(64u, std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    for (int64_t w = 0; w < workers; ++w)
        threads.emplace_back([&, w] {
            for (int64_t b = w; b < p->batch; b += workers) one_seq(b);
        });
    for (std::thread &th : threads) th.join();
}

/* Verify every serving variant on sp: rows 0, row_step, ... and the last of each sequence
 * against the reference; every element of out written (out holds real rows only); a paged run
 * against its contiguous twin, which must match bit for bit when it runs the same kernel (a
 * ragged twin: the page lookup changes addresses, not arithmetic). */
static void verify_serving(serving_problem &sp, int row_step)
{
    const attn_problem *p = &sp.p;
    const int64_t H = p->heads, DV = attn_dv(p);
    std::vector<std::vector<int>> rows((size_t)p->batch);
    for (int64_t b = 0; b < p->batch; ++b) {
        const int64_t sq = attn_seqlen_q(p, b);
        for (int64_t i = 0; i < sq; i += row_step) rows[b].push_back((int)i);
        if (sq > 0 && rows[b].back() != sq - 1) rows[b].push_back((int)(sq - 1));
    }
    std::vector<size_t> first;
    std::vector<double> ref;
    serving_reference(sp, rows, first, ref);
    const double tol = p->dtype == ATTN_BF16 ? 1.6e-2 : 2e-3;
    const size_t out_bytes = (size_t)attn_out_elems(p) * attn_dtype_bytes(p->dtype);
    std::vector<uint8_t> h_out(out_bytes), h_flat(out_bytes);
    attn_problem flat = *p;
    flat.page_size = 0, flat.num_pages = 0;
    for (const fused_variant &v : run_variants()) {
        char why[256] = "";
        if (!variant_selected(v.name) || !serving_variant(v.name)) continue;
        if (v.check(p, why, sizeof why) != 0) {
            if (why[0]) printf("  %-16s %s  unsupported: %s\n", v.name, serving_str(p), why);
            continue;
        }
        CHECK_CUDA(cudaMemsetAsync(sp.d_out, 0xff, out_bytes, ctx.stream)); /* NaN in every dtype, stream-ordered */
        attn_tensors t = {sp.d_q, sp.d_k, sp.d_v, sp.d_out, sp.d_cu_q, sp.d_cu_kv, sp.d_table};
        exec_clear_error(&ctx);
        if (v.forward(&ctx, p, &t, variant_workspace(v, p)) != 0) {
            printf("  %-16s %s  FAIL forward: %s\n", v.name, serving_str(p), ctx.error);
            failures++;
            continue;
        }
        CHECK_CUDA(cudaStreamSynchronize(ctx.stream));
        CHECK_CUDA(cudaMemcpy(h_out.data(), sp.d_out, out_bytes, cudaMemcpyDeviceToHost));
        double max_abs = 0, err2 = 0, ref2 = 0;
        int64_t nan_count = 0, n_rows = 0;
        for (int64_t b = 0; b < p->batch; ++b)
            for (size_t ri = 0; ri < rows[b].size(); ++ri, ++n_rows)
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t d = 0; d < DV; ++d) {
                        const double r = ref[((first[b] + ri) * H + h) * DV + d];
                        const double o = dtype_load_f32(h_out.data(), p->dtype, attn_q_row(p, b, h, rows[b][ri], DV) + d);
                        if (!(o == o)) continue; /* counted below */
                        max_abs = std::max(max_abs, fabs(o - r));
                        err2 += (o - r) * (o - r);
                        ref2 += r * r;
                    }
        for (int64_t i = 0; i < attn_out_elems(p); ++i)
            if (!(dtype_load_f32(h_out.data(), p->dtype, i) == dtype_load_f32(h_out.data(), p->dtype, i))) nan_count++;
        const double rel = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
        bool ok = nan_count == 0 && rel <= tol;
        char twin[96] = "";
        if (p->page_size > 0) { /* the same logical cache without pages */
            CHECK_CUDA(cudaMemsetAsync(sp.d_out_flat, 0xff, out_bytes, ctx.stream));
            attn_tensors tf = {sp.d_q, sp.d_k_flat, sp.d_v_flat, sp.d_out_flat, sp.d_cu_q, sp.d_cu_kv, NULL};
            if (v.check(&flat, why, sizeof why) != 0 || v.forward(&ctx, &flat, &tf, variant_workspace(v, &flat)) != 0) {
                snprintf(twin, sizeof twin, ", twin FAIL: %.60s", why[0] ? why : ctx.error);
                ok = false;
            } else {
                CHECK_CUDA(cudaStreamSynchronize(ctx.stream));
                CHECK_CUDA(cudaMemcpy(h_flat.data(), sp.d_out_flat, out_bytes, cudaMemcpyDeviceToHost));
                int64_t differ = 0;
                for (int64_t i = 0; i < attn_out_elems(p); ++i)
                    differ += dtype_load_f32(h_out.data(), p->dtype, i) != dtype_load_f32(h_flat.data(), p->dtype, i);
                /* a ragged twin runs the same kernel: bit for bit; a dense one may run another */
                if (differ > 0 && p->ragged) ok = false;
                snprintf(twin, sizeof twin, ", twin %s", differ == 0 ? "identical" : "differs");
                if (differ > 0) snprintf(twin + strlen(twin), sizeof twin - strlen(twin), " in %lld", (long long)differ);
            }
        }
        if (!ok) failures++;
        printf("  %-16s %s  max_abs %.3e rel_l2 %.3e nan %lld (%lld rows%s)  %s\n", v.name, serving_str(p), max_abs, rel,
               (long long)nan_count, (long long)n_rows, twin, ok ? "PASS" : "FAIL");
    }
}

/* Evenly spaced lengths lo..hi of n sequences: the --shape LO-HI batches. */
static std::vector<int32_t> spaced_lengths(int64_t n, int64_t lo, int64_t hi)
{
    std::vector<int32_t> len((size_t)n);
    for (int64_t b = 0; b < n; ++b) len[b] = (int32_t)(n > 1 ? lo + (hi - lo) * b / (n - 1) : hi);
    return len;
}

static int time_repeats = 1; /* --repeats N: each variant timed N times (median of 20 each) */
/* --shape B,H,S,D,MASK[,Hkv[,W[,Dv[,P]]]]: time this shape only (default: the seven of docs/fused.md),
 * with Hkv K/V heads and a window of W keys when given; S is Sq:Skv for a decode, LO-HI for a
 * ragged batch (Lo its shortest sequence, S its longest), P its pages' tokens */
static struct {
    long long B, H, Sq, S, D, Hkv, W, DV, Lo, P;
    attn_mask mask;
} one_shape = {0, 0, 0, 0, 0, 0, -1, 0, -1, 0, ATTN_MASK_NONE}; /* Lo −1: not ragged */
/* --window-ms N: each timing is a sustained window instead (below). */
static int window_ms = 0;
/* n forwards between one event pair: their milliseconds (< 0: a forward failed). */
static float time_forwards(const fused_variant &v, const attn_problem *p, attn_tensors *t, void *ws, cudaEvent_t e0,
                           cudaEvent_t e1, int n)
{
    CHECK_CUDA(cudaEventRecord(e0, ctx.stream));
    for (int it = 0; it < n; ++it)
        if (v.forward(&ctx, p, t, ws) != 0) {
            printf("| %s | forward failed: %s |\n", v.name, ctx.error);
            failures++;
            return -1.f;
        }
    CHECK_CUDA(cudaEventRecord(e1, ctx.stream));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float x;
    CHECK_CUDA(cudaEventElapsedTime(&x, e0, e1));
    return x;
}
/* A sustained window: forwards back to back for about window_ms (the count sized from a short
 * burst), one event pair around them all; the mean per forward in microseconds. Long enough
 * to meet the board's power limit, as a user's long run does; a burst of 20 mostly does not. */
static double time_window(const fused_variant &v, const attn_problem *p, attn_tensors *t, void *ws, cudaEvent_t e0,
                          cudaEvent_t e1)
{
    if (time_forwards(v, p, t, ws, e0, e1, 1) < 0) return -1; /* a warm-up */
    const float est = time_forwards(v, p, t, ws, e0, e1, 5);
    if (est < 0) return -1;
    const int n = std::max(10, (int)(window_ms / std::max(est / 5.0, 1e-3)));
    const float ms = time_forwards(v, p, t, ws, e0, e1, n);
    return ms < 0 ? -1 : ms * 1e3 / n;
}
/* One timing: the median of 20 forwards after 5 warm-ups, in microseconds (< 0: failed). */
static double time_once(const fused_variant &v, const attn_problem *p, attn_tensors *t, void *ws, cudaEvent_t e0,
                        cudaEvent_t e1)
{
    if (window_ms > 0) return time_window(v, p, t, ws, e0, e1);
    std::vector<float> ms;
    for (int it = 0; it < 25; ++it) {
        const float x = time_forwards(v, p, t, ws, e0, e1, 1);
        if (x < 0) return -1;
        if (it >= 5) ms.push_back(x);
    }
    std::sort(ms.begin(), ms.end());
    return 0.5 * (ms[9] + ms[10]) * 1e3;
}
/* The repeats go round the variants, in reverse order every other round (A B, B A, A B, ...):
 * a variant timed right after another inherits its heat and its clock, so timing each
 * variant's repeats back to back, always in the same order, favoured whichever came first. */
/* window: keys before a query that stay visible; < 0: none. kv_heads 0: heads. Sq 0: S (else
 * S is the keys); the last column is the bytes of q, k, v and out over the time: what a decode,
 * which streams K and V once, is bounded by. */
/* Time every selected variant that takes p (serving: serving_variant's only) on tensors t and
 * print a row each: cols, the table's first five cells; flops and bytes per forward. */
static void time_rows(const attn_problem *p, attn_tensors *t, bool serving, const char *cols, double flops, double bytes)
{
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    const std::vector<fused_variant> all = run_variants();
    std::vector<const fused_variant *> timed;
    for (const fused_variant &v : all) {
        char why[256];
        if (variant_selected(v.name) && (!serving || serving_variant(v.name)) && v.check(p, why, sizeof why) == 0)
            timed.push_back(&v);
    }
    std::vector<std::vector<double>> reps(timed.size());
    std::vector<bool> failed(timed.size(), false);
    for (int rep = 0; rep < time_repeats; ++rep)
        for (size_t k = 0; k < timed.size(); ++k) {
            const size_t i = rep % 2 == 0 ? k : timed.size() - 1 - k;
            if (failed[i]) continue;
            const double us = time_once(*timed[i], p, t, variant_workspace(*timed[i], p), e0, e1);
            if (us < 0) failed[i] = true;
            else reps[i].push_back(us);
        }
    for (size_t i = 0; i < timed.size(); ++i) {
        if (failed[i]) continue;
        std::vector<double> &r = reps[i];
        std::sort(r.begin(), r.end());
        const double us = r[r.size() / 2];
        printf("| %s | %s | %.1f | %.1f–%.1f | %.1f | %.2f |\n", cols, timed[i]->name, us, r.front(), r.back(),
               flops / (us * 1e-6) / 1e12, bytes / (us * 1e-6) / 1e12);
    }
    CHECK_CUDA(cudaEventDestroy(e0));
    CHECK_CUDA(cudaEventDestroy(e1));
}

static void time_shape(int64_t B, int64_t H, int64_t S, int64_t D, attn_mask m, int64_t kv_heads = 0,
                       int64_t window = -1, int64_t Sq = 0, int64_t head_dim_v = 0)
{
    device_problem dp;
    problem_setup(dp, B, H, Sq > 0 ? Sq : S, S, D, ATTN_BF16, m, kv_heads, window >= 0 ? window + 1 : 0, head_dim_v);
    verify(dp, 97);
    const attn_problem *p = &dp.p;
    const double flops = attn_flops(p); /* the visible pairs: windows and masks counted */
    const double bytes = (double)(attn_q_elems(p) + attn_k_elems(p) + attn_v_elems(p) + attn_out_elems(p)) * 2;
    char heads[48], mask[48], seq[48], dims[48], cols[256];
    snprintf(dims, sizeof dims, head_dim_v > 0 && head_dim_v != D ? "%lld/%lld" : "%lld", (long long)D,
             (long long)head_dim_v);
    snprintf(seq, sizeof seq, Sq > 0 ? "%lld:%lld" : "%lld", (long long)(Sq > 0 ? Sq : S), (long long)S);
    snprintf(heads, sizeof heads, kv_heads > 0 && kv_heads != H ? "%lld/%lld" : "%lld", (long long)H,
             (long long)kv_heads);
    snprintf(mask, sizeof mask, window >= 0 ? "%s w%lld" : "%s", attn_mask_name(m), (long long)window);
    snprintf(cols, sizeof cols, "%lld | %s | %s | %s | %s", (long long)B, heads, seq, dims, mask);
    attn_tensors t = {dp.d_q, dp.d_k, dp.d_v, dp.d_out};
    time_rows(p, &t, false, cols, flops, bytes);
    problem_free(dp);
}

/* A ragged batch of B sequences of lo..hi tokens (evenly spaced, queries and keys alike), its K/V
 * paged in pages of `page` tokens when page > 0, verified, then timed as time_shape does. FLOP/s
 * and bytes count real tokens (attn_flops, attn_min_bytes). The dense batch of the same total
 * tokens, whose TFLOP/s the ragged batch's are held to, is named as a --shape to time alike. */
static void time_serving_shape(int64_t B, int64_t H, int64_t lo, int64_t hi, int64_t D, attn_mask m,
                               int64_t kv_heads, int64_t window, int64_t page)
{
    serving_problem sp;
    const std::vector<int32_t> len = spaced_lengths(B, lo, hi);
    serving_setup(sp, H, kv_heads > 0 ? kv_heads : H, D, ATTN_BF16, m, window >= 0 ? window + 1 : 0, len, len, true,
                  page);
    verify_serving(sp, 397);
    const attn_problem *p = &sp.p;
    char heads[48], mask[48], cols[256];
    snprintf(heads, sizeof heads, kv_heads > 0 && kv_heads != H ? "%lld/%lld" : "%lld", (long long)H,
             (long long)kv_heads);
    snprintf(mask, sizeof mask, window >= 0 ? "%s w%lld" : "%s", attn_mask_name(m), (long long)window);
    snprintf(cols, sizeof cols, "%lld | %s | %lld-%lld%s | %lld | %s", (long long)B, heads, (long long)lo, (long long)hi,
             page > 0 ? " paged" : "", (long long)D, mask);
    attn_tensors t = {sp.d_q, sp.d_k, sp.d_v, sp.d_out, sp.d_cu_q, sp.d_cu_kv, sp.d_table};
    time_rows(p, &t, true, cols, attn_flops(p), attn_min_bytes(p));
    printf("(%lld tokens: the dense batch of the same total is --shape %lld,%lld,%lld,%lld,%s,%lld,%lld)\n",
           (long long)p->total_q, (long long)B, (long long)H, (long long)((p->total_q + B / 2) / B), (long long)D,
           attn_mask_name(m), (long long)kv_heads, (long long)window);
    serving_free(sp);
}

/* --sections a,b,...: the correctness sections to run (dense, models, head_dim_v, decode,
 * scales; default all); --dtype NAME: only that dtype's cases. A GPU call short of time runs
 * the sections a change touched. */
static const char *sections_list = NULL;
static int dtype_only = -1;

static bool section_on(const char *name)
{
    if (!sections_list) return true;
    const size_t n = strlen(name);
    for (const char *p = sections_list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == sections_list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return true;
    return false;
}

static bool dtype_on(attn_dtype t) { return dtype_only < 0 || dtype_only == (int)t; }

int main(int argc, char **argv)
{
    bool quick = false;       /* --quick: skip timing */
    bool timing_only = false; /* --timing-only: skip the correctness cases (the timed shapes are still verified) */
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--quick") == 0) quick = true;
        else if (strcmp(argv[i], "--timing-only") == 0) timing_only = true;
        else if (strcmp(argv[i], "--small") == 0) small_only = true;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only_list = argv[++i];
        else if (strcmp(argv[i], "--sections") == 0 && i + 1 < argc) sections_list = argv[++i];
        else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            attn_dtype t;
            if (attn_dtype_parse(argv[++i], &t) != 0) {
                fprintf(stderr, "--dtype %s: bf16, fp16 or fp32\n", argv[i]);
                return 2;
            }
            dtype_only = (int)t;
        }
        else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) time_repeats = std::max(1, atoi(argv[++i]));
        else if (strcmp(argv[i], "--window-ms") == 0 && i + 1 < argc) window_ms = std::max(0, atoi(argv[++i]));
        else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
            char mask[32] = "", seq[64] = "";
            const char *arg = argv[++i];
            int used = 0;
            if (sscanf(arg, "%lld,%lld,%63[0-9:-],%lld,%31[a-z_]%n", &one_shape.B, &one_shape.H, seq, &one_shape.D,
                       mask, &used) != 5 ||
                (strchr(seq, ':')   ? sscanf(seq, "%lld:%lld", &one_shape.Sq, &one_shape.S) != 2 || one_shape.Sq < 1
                 : strchr(seq, '-') ? sscanf(seq, "%lld-%lld", &one_shape.Lo, &one_shape.S) != 2 || one_shape.Lo < 0 ||
                                          one_shape.Lo > one_shape.S
                                    : sscanf(seq, "%lld", &one_shape.S) != 1) ||
                one_shape.B < 1 || one_shape.H < 1 || one_shape.S < 1 || one_shape.D < 1 ||
                attn_mask_parse(mask, &one_shape.mask) != 0 ||
                (arg[used] == ',' && sscanf(arg + used + 1, "%lld,%lld,%lld,%lld", &one_shape.Hkv, &one_shape.W,
                                            &one_shape.DV, &one_shape.P) < 1) ||
                (arg[used] != ',' && arg[used] != '\0') || one_shape.Hkv < 0 ||
                (one_shape.Hkv > 0 && one_shape.H % one_shape.Hkv != 0) || one_shape.DV < 0 || one_shape.P < 0 ||
                (one_shape.P > 0 && !strchr(seq, '-')) || (strchr(seq, '-') && one_shape.DV > 0)) {
                fprintf(stderr, "--shape %s: want B,H,S,D,MASK[,Hkv[,W[,Dv[,P]]]] (S, Sq:Skv or LO-HI: a ragged batch; "
                        "MASK none, causal or causal_bottom_right; Hkv dividing H, 0: H; W < 0: no window; Dv 0: D; "
                        "P: the ragged batch's page size, 0: not paged)\n", arg);
                return 2;
            }
        }
#ifdef FUSED_CHECK_CUDNN
        else if (strcmp(argv[i], "--cudnn") == 0 && i + 1 < argc) {
            char why[512] = "cudnn_set_library refused it";
            if (cudnn_set_library(argv[++i]) != 0 || cudnn_load(why, sizeof why) != 0) {
                fprintf(stderr, "--cudnn %s: %s\n", argv[i], why);
                return 2;
            }
            cudnn_row = true;
        }
#endif
        else {
            fprintf(stderr,
                    "usage: %s [--quick] [--timing-only] [--small] [--only name,prefix*,...] [--sections dense,models,head_dim_v,decode,serving,scales] [--dtype NAME] [--repeats N] [--shape B,H,S|Sq:Skv|LO-HI,D,MASK[,Hkv[,W[,Dv[,P]]]]]"
                    " [--window-ms N] [--cudnn DIR]\n",
                    argv[0]);
            return 2;
        }
    }
    cudaDeviceProp prop;
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    memset(&ctx, 0, sizeof ctx);
    ctx.device = 0;
    ctx.cc = prop.major * 10 + prop.minor;
    fused_cc = ctx.cc;
    ctx.sm_count = prop.multiProcessorCount;
    ctx.l2_bytes = (size_t)prop.l2CacheSize;
    ctx.smem_optin_bytes = prop.sharedMemPerBlockOptin;
    CHECK_CUDA(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
    /* the kernels not yet validated on a GPU (variant_info's pending features, e.g. cudnn's
     * serving batches) are what this harness validates: offered here as a server with the
     * pending_features setting offers them */
    variant_info_offer_pending(1);
    printf("fused_check on %s (cc %d, %d SMs, %zu B smem opt-in)\n", prop.name, ctx.cc, ctx.sm_count,
           ctx.smem_optin_bytes);

    struct shape { int64_t B, H, Sq, Skv, D; };
    const shape shapes[] = {
        {1, 2, 1, 1, 64},      {2, 3, 63, 63, 64},    {1, 2, 64, 64, 128},   {2, 2, 65, 65, 32},
        {1, 2, 1000, 1000, 128}, {1, 2, 100, 300, 96}, {1, 2, 300, 100, 128}, {1, 1, 1, 200, 256},
        {1, 2, 130, 130, 256}, {1, 2, 77, 77, 72},    {1, 1, 90, 90, 8},     {1, 2, 50, 50, 200},
        {1, 2, 70, 70, 160},   {1, 1, 200, 129, 224}, {70000, 1, 5, 5, 64},  {1, 1, 4097, 4097, 64},
        {1, 2, 4097, 4097, 128}, {1, 1, 1000, 1000, 256}, {1, 1, 129, 1000, 192},
        /* the exact-D kernels (flash_exact.cuh) at 96/128: S = 1, partial tiles and blocks,
         * Sq < Skv (bottom-right rows see many blocks), Sq > Skv (rows with no key), many CTAs */
        {1, 1, 1, 1, 128},     {1, 1, 255, 255, 96},  {1, 2, 200, 1000, 128}, {1, 2, 1000, 200, 96},
        {1, 1, 4097, 4097, 96}, {2500, 1, 17, 33, 128},
        /* the wgmma kernel (flash_wgmma.cuh) at 64/128: the same cases at 64 */
        {1, 1, 255, 255, 64},  {1, 2, 200, 1000, 64}, {1, 2, 1000, 200, 64}, {2500, 1, 17, 33, 64},
        /* v6 (flash_tma.cuh): persistent CTAs looping over several many-block tiles, Sq ≠ Skv,
         * and L2 sections of heads with a partial last one (11 heads of 4.6 MB K+V: 7 + 4;
         * 19 of 2.3 MB: 14 + 5) */
        {3, 5, 1500, 2100, 128}, {3, 5, 2100, 1500, 64}, {1, 11, 9000, 9000, 128}, {1, 19, 9000, 9000, 64},
        /* v6 at 96 and 256 likewise (256: 80-key blocks, O stored from the accumulators) */
        {3, 5, 1500, 2100, 256}, {3, 5, 2100, 1500, 96}, {1, 3, 4097, 4097, 256},
    };
    const attn_dtype dtypes[] = {ATTN_BF16, ATTN_FP16, ATTN_FP32};
    printf("correctness (tolerances rel_l2: bf16 1.6e-2, fp16 2e-3, fp32 1e-5)\n");
    if (!timing_only && section_on("dense"))
    for (attn_dtype t : dtypes)
        for (const shape &s : shapes)
            for (int m = 0; m < ATTN_MASK_COUNT; ++m) {
                if (!dtype_on(t) || (t == ATTN_FP32 && s.B * s.H * s.Sq * s.Skv > 20000000)) continue; /* fp32 is slow-ish */
                if (too_big(s.B, s.H, s.Sq, s.Skv)) continue;
                device_problem dp;
                problem_setup(dp, s.B, s.H, s.Sq, s.Skv, s.D, t, (attn_mask)m);
                verify(dp, s.Sq > 1000 ? 7 : 1);
                problem_free(dp);
            }

    /* Grouped K/V heads (kv_heads 1 and H/2) and sliding windows (W = 1, 33, longer than the
     * keys; every mask) in every family: the GQA_WINDOW kernels. Odd sizes, S = 1, 77, 1000,
     * Sq ≠ Skv both ways (Sq > Skv: rows whose window lies past the keys, fully masked, under
     * `none` and `causal` too); head dims for each family (32/256 legacy, 64/128 v5/v6, 96 and
     * 128 w4/w8, 72/200 efficient's buckets); v6's persistent tiles, its L2 sections of whole
     * K/V groups (16 heads of 4.6 MB K+V at D128 in groups of 4: sections of 12 + 4) and a long
     * window under `none` (dynamic tiles, ascending). W 500 > every position: the dense kernel. */
    struct model_shape { int64_t B, H, Hkv, Sq, Skv, D, W; };
    const model_shape models[] = {
        {2, 4, 1, 77, 77, 64, 0},       {1, 4, 2, 1, 1000, 128, 0},    {1, 6, 3, 1000, 1000, 128, 0},
        {1, 4, 1, 1000, 77, 96, 0},     {2, 4, 2, 77, 1000, 32, 0},    {1, 2, 1, 300, 300, 256, 0},
        {1, 2, 2, 1000, 1000, 64, 1},   {1, 2, 2, 77, 77, 128, 1},     {1, 4, 2, 1000, 1000, 128, 33},
        {1, 2, 1, 77, 1000, 96, 33},    {1, 2, 2, 1000, 77, 64, 33},   {1, 2, 1, 1, 77, 128, 33},
        {1, 2, 2, 1, 1, 64, 1},         {1, 2, 1, 300, 100, 128, 150}, {1, 2, 2, 77, 77, 96, 500},
        {1, 2, 1, 1000, 1000, 32, 33},  {1, 2, 2, 200, 1000, 256, 33}, {1, 4, 2, 77, 1000, 72, 33},
        {1, 2, 1, 1000, 1000, 200, 1},  {1, 4, 2, 1000, 1000, 96, 1},  {2500, 2, 1, 17, 33, 128, 5},
        {3, 8, 2, 1500, 2100, 128, 300}, {3, 8, 1, 2100, 1500, 64, 700}, {1, 16, 4, 9000, 9000, 128, 0},
        {1, 16, 2, 9000, 9000, 64, 2000},
    };
    if (!timing_only && section_on("models"))
    for (attn_dtype t : dtypes)
        for (const model_shape &s : models)
            for (int m = 0; m < ATTN_MASK_COUNT; ++m) {
                if (!dtype_on(t) || (t == ATTN_FP32 && s.B * s.H * s.Sq * s.Skv > 20000000)) continue;
                if (too_big(s.B, s.H, s.Sq, s.Skv)) continue;
                device_problem dp;
                problem_setup(dp, s.B, s.H, s.Sq, s.Skv, s.D, t, (attn_mask)m, s.Hkv, s.W);
                verify(dp, s.Sq > 1000 ? 7 : 1);
                problem_free(dp);
            }

    /* A value head dim of its own (head_dim_v ≠ head_dim): the bucketed kernels' general
     * instantiation (flash v3, efficient v1 and fp32). DeepSeek-V3's 192/128, V wider than Q/K,
     * buckets from 64 to 256 (72/40 in the 64 one; 256/64 in the 256 one), with grouped heads
     * and windows, odd sizes and Sq ≠ Skv both ways. */
    struct dv_shape { int64_t B, H, Hkv, Sq, Skv, D, DV, W; };
    const dv_shape dv_shapes[] = {
        {1, 4, 4, 77, 77, 192, 128, 0},   {1, 4, 1, 1000, 1000, 192, 128, 0}, {2, 2, 2, 1, 300, 64, 128, 0},
        {1, 2, 2, 300, 100, 128, 64, 0},  {1, 2, 1, 77, 1000, 32, 40, 33},     {1, 2, 2, 130, 130, 256, 64, 0},
        {1, 4, 2, 1000, 77, 96, 128, 1},  {1, 2, 2, 200, 200, 128, 256, 0},   {2500, 1, 1, 17, 33, 192, 128, 5},
        {3, 5, 5, 1500, 2100, 192, 128, 0}, {1, 8, 2, 2100, 1500, 192, 128, 300}, {1, 6, 6, 4097, 4097, 192, 128, 0},
    };
    if (!timing_only && section_on("head_dim_v"))
        for (attn_dtype t : dtypes)
            for (const dv_shape &s : dv_shapes)
                for (int m = 0; m < ATTN_MASK_COUNT; ++m) {
                    if (!dtype_on(t) || too_big(s.B, s.H, s.Sq, s.Skv)) continue;
                    device_problem dp;
                    problem_setup(dp, s.B, s.H, s.Sq, s.Skv, s.D, t, (attn_mask)m, s.Hkv, s.W, s.DV);
                    verify(dp, s.Sq > 1000 ? 7 : 1);
                    problem_free(dp);
                }

    /* Decode and speculative decode (flash@splitkv, kernels/flash_splitkv.cu): Sq 1, 2, 4, 16
     * over keys that end mid-block, span one block, or many splits; groups of 1-8 query heads
     * per K/V head (8 x 16 = 128 packed rows: 8 row tiles); every mask (top-left causal sees
     * only the first Sq keys; bottom-right is decode's own) and a window of 33. One key (one
     * split: one launch) up to 9000 (many splits and the combine). */
    if (!timing_only && section_on("decode"))
        for (attn_dtype t : {ATTN_BF16, ATTN_FP16})
            for (int64_t D : {128, 64})
                for (int64_t G : {1, 2, 4, 8})
                    for (int64_t Sq : {1, 2, 4, 16})
                        for (int64_t Skv : {1, 63, 64, 65, 1000, 4097, 9000})
                            for (int64_t W : {0, 33})
                                for (int m = 0; m < ATTN_MASK_COUNT; ++m) {
                                    if (!dtype_on(t) || (D == 64 && (G == 2 || G == 8 || W > 0))) continue; /* D64: fewer */
                                    if (too_big(2, 2 * G, Sq, Skv)) continue;
                                    device_problem dp;
                                    problem_setup(dp, 2, 2 * G, Sq, Skv, D, t, (attn_mask)m, 2, W);
                                    verify(dp, 1);
                                    problem_free(dp);
                                }

    /* Serving batches (docs/serving.md): ragged prefill (v6's SERVING kernel) and paged prefill
     * with pages of whole 128-key blocks (128, 256), each sequence with its own lengths, mask and
     * window: a sequence of 1 token, an empty one, lengths not multiples of the tile, Sq ≠ Skv
     * per sequence both ways (bottom-right rows with no key; a sequence with queries and no
     * keys: zeros), grouped K/V heads (MQA too), windows of 33 and 300, many tiles and tiles
     * past the shorter sequences' ends (the skipped ones), a paged batch of equal lengths (q and
     * out dense), paged and ragged together; and decode rows (seq_q ≤ 16: the split-KV kernel's
     * SERVING instantiation) over a paged cache of 16-token pages. Every mask, both 16-bit
     * dtypes, head dims 128 and 64. A paged run is compared with its contiguous twin. Prefill
     * over pages that split a key block (16, 48: v3's and efficient's SERVING kernels only; v6
     * refuses them). */
    struct serving_shape {
        int64_t H, Hkv, W, page;
        bool ragged;
        std::vector<int32_t> lq, lkv;
    };
    const serving_shape serving_shapes[] = {
        {4, 2, 0, 0, true, {1, 0, 130, 257, 64, 1000}, {1, 0, 130, 257, 64, 1000}},
        {4, 1, 0, 0, true, {17, 300, 0, 129, 5, 300}, {40, 200, 50, 700, 0, 1000}},
        {4, 2, 33, 0, true, {1000, 77, 513}, {1000, 77, 513}},
        {8, 2, 300, 0, true, {600, 1, 1500}, {1400, 9, 1500}},
        {4, 2, 0, 128, false, {200, 200, 200}, {700, 700, 700}},
        {4, 4, 0, 256, true, {130, 0, 17, 600}, {700, 5, 17, 1300}},
        {6, 2, 100, 128, true, {333, 40, 900}, {333, 1000, 900}},
        {8, 2, 0, 0, true, {4097, 2000, 3000, 128}, {4097, 2000, 3000, 128}},
        {8, 2, 0, 16, true, {1, 16, 0, 4}, {300, 5000, 7, 0}},
        {4, 2, 0, 16, true, {40, 0, 200, 77}, {300, 5, 17, 1000}},
        {4, 1, 50, 48, false, {100, 100}, {333, 333}},
        /* small enough for --small (compute-sanitizer) */
        {4, 2, 0, 0, true, {1, 0, 130, 257}, {1, 0, 130, 257}},
        {4, 2, 0, 128, true, {40, 0, 200}, {300, 5, 17}},
    };
    if (!timing_only && section_on("serving"))
        for (attn_dtype t : {ATTN_BF16, ATTN_FP16})
            for (int64_t D : {128, 64})
                for (const serving_shape &c : serving_shapes)
                    for (int m = 0; m < ATTN_MASK_COUNT; ++m) {
                        const int64_t sq = *std::max_element(c.lq.begin(), c.lq.end());
                        const int64_t skv = *std::max_element(c.lkv.begin(), c.lkv.end());
                        if (!dtype_on(t) || too_big((int64_t)c.lq.size(), c.H, sq, skv)) continue;
                        serving_problem sp;
                        serving_setup(sp, c.H, c.Hkv, D, t, (attn_mask)m, c.W, c.lq, c.lkv, c.ragged, c.page);
                        verify_serving(sp, sq > 1000 ? 7 : 1);
                        serving_free(sp);
                    }

    /* a client-given scale: negative, and larger than 1/sqrt(D) (the online max must follow
     * the scaled scores; an exponent far above 0 would overflow the sums), and large enough
     * that most exponentials underflow */
    const double scales[] = {-0.3, 0.7, 8.0};
    if (!timing_only && section_on("scales"))
    for (attn_dtype t : dtypes)
        for (int64_t D : {96, 128, 64})
            for (double sc : scales)
                for (int m = 0; m < ATTN_MASK_COUNT; ++m) {
                    if (!dtype_on(t)) continue;
                    device_problem dp;
                    problem_setup(dp, 1, 2, 300, 260, D, t, (attn_mask)m);
                    dp.p.scale = sc;
                    verify(dp, 1);
                    problem_free(dp);
                    problem_setup(dp, 1, 4, 300, 260, D, t, (attn_mask)m, 2, 33); /* the GQA_WINDOW masks */
                    dp.p.scale = sc;
                    verify(dp, 1);
                    problem_free(dp);
                    if (t == ATTN_FP32) continue;
                    problem_setup(dp, 3, 8, 4, 1000, D, t, (attn_mask)m, 2); /* a split decode (splitkv) */
                    dp.p.scale = sc;
                    verify(dp, 1);
                    problem_free(dp);
                }

    if (!quick) {
        if (window_ms > 0)
            printf("\ntiming (bf16, mean per forward over a %d ms window, CUDA events, hot L2; %d repeat(s): median, range)\n",
                   window_ms, time_repeats);
        else
            printf("\ntiming (bf16, median of 20 after 5 warm-ups, CUDA events, hot L2; %d repeat(s): median, range)\n",
                   time_repeats);
        printf("| B | H | S | D | mask | variant | gpu us | range us | TFLOP/s | TB/s |\n"
               "|---|---|---|---|---|---|---|---|---|---|\n");
        if (one_shape.B > 0 && one_shape.Lo >= 0) {
            time_serving_shape(one_shape.B, one_shape.H, one_shape.Lo, one_shape.S, one_shape.D, one_shape.mask,
                               one_shape.Hkv, one_shape.W, one_shape.P);
        } else if (one_shape.B > 0) {
            time_shape(one_shape.B, one_shape.H, one_shape.S, one_shape.D, one_shape.mask, one_shape.Hkv, one_shape.W,
                       one_shape.Sq, one_shape.DV);
        } else {
            time_shape(8, 16, 1024, 64, ATTN_MASK_CAUSAL);
            time_shape(8, 16, 1024, 128, ATTN_MASK_CAUSAL);
            time_shape(4, 16, 4096, 64, ATTN_MASK_CAUSAL);
            time_shape(4, 16, 4096, 128, ATTN_MASK_CAUSAL);
            time_shape(2, 16, 8192, 128, ATTN_MASK_CAUSAL);
            time_shape(4, 16, 4096, 128, ATTN_MASK_NONE);
            time_shape(16, 32, 512, 64, ATTN_MASK_NONE);
        }
    }
    CHECK_CUDA(cudaStreamDestroy(ctx.stream));
    printf("\n%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
