/* variant_info.h — what each attention variant is and which problems it accepts, without its
 * code: the front validates requests and answers /v1/variants from this table, the worker
 * checks the same problem with the same function before it runs the variant's kernels
 * (kernels/variants.h, whose rows point here). No CUDA types.
 */
#ifndef VARIANT_INFO_H
#define VARIANT_INFO_H

#include <stddef.h>

#include "common/attn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VARIANT_DTYPE(t) (1u << (t))

/* What a variant runs beyond dense multi-head attention (variant_info.features). */
#define VARIANT_GQA (1u << 0)        /* kv_heads < heads */
#define VARIANT_HEAD_DIM_V (1u << 1) /* head_dim_v != head_dim */
#define VARIANT_WINDOW (1u << 2)     /* a sliding window */
#define VARIANT_PAGED (1u << 3)      /* a paged K/V cache (page_size) */
#define VARIANT_RAGGED (1u << 4)     /* a ragged batch (seqlens_q, seqlens_kv) */

/* Kernel limits the checks below state (the kernels are built to them). */
#define EFFICIENT_MAX_HEAD_DIM 256
#define EFFICIENT_FP32_QUERY_TILE 32 /* efficient's smallest query tile (fp32); 64 in 16 bits */
#define CUDNN_SDPA_MAX_HEAD_DIM 256
#define CUDNN_SDPA_HEAD_DIM_MULTIPLE 8

/* One kernel family of a variant, as the `impl` run parameter chooses it. */
typedef struct variant_impl {
    const char *name;     /* as `impl` spells it: "tma" */
    const char *summary;  /* one line: the kernel, and the problems where it differs */
    const char *needs;    /* what a device needs beyond the variant's own limits; NULL: nothing */
} variant_impl;

typedef struct variant_info {
    const char *name;     /* as the API spells it: "naive", "math", … */
    const char *summary;  /* one line: what it does and whose cost structure it copies */
    int on_cpu;           /* 1: runs on the cpu device only; 0: needs a GPU */
    unsigned dtypes;      /* VARIANT_DTYPE bits */
    int min_cc;           /* lowest compute capability (major·10 + minor); 0: any */
    int max_head_dim;     /* 0: any */
    int head_dim_multiple;/* head_dim must be a multiple of this (1: any) */
    unsigned features;    /* VARIANT_GQA, _HEAD_DIM_V, _WINDOW, _PAGED, _RAGGED bits: the others are refused */
    /* Bits whose kernels are written but not yet validated on a GPU: offered only where the
     * pending_features setting is on (scripts/gpu-session.sh's pending phase), else refused. */
    unsigned pending_features;
    /* Further limits of this variant; NULL when there are none. 0 when p is supported, else
     * -1 with a message that names the limit. */
    int (*check)(const attn_problem *p, char *why, size_t why_len);
    /* Device bytes one forward needs besides q, k, v and out, at most: what the front
     * reserves against the memory budget before queueing (the worker allocates the exact
     * size, kernels/variants.h). NULL: none. */
    size_t (*workspace_bound)(const attn_problem *p);
    /* The library the worker opens at run time for it ("cuDNN"); NULL: its kernels are attnd's. */
    const char *library;
    /* Its kernel families, in the order of kernels/fused.h's *_IMPL_* values; NULL when the
     * variant has one. */
    const variant_impl *impls;
    size_t impl_count;
} variant_info;

/* The table, in the order /v1/variants lists it. */
extern const variant_info *const variant_infos[];
extern const size_t variant_infos_count;

extern const variant_info variant_info_reference, variant_info_naive, variant_info_naive_inplace,
    variant_info_math, variant_info_efficient, variant_info_flash, variant_info_cudnn;
extern const variant_info variant_info_flashinfer;

/* NULL when no variant has that name. */
const variant_info *variant_info_find(const char *name);

/* Turn the variants' pending_features on (1) or off (0, the default): the pending_features
 * setting, applied once at start in every process that checks problems. */
void variant_info_offer_pending(int on);

/* The features v offers here: its features, and its pending ones when those are on. */
unsigned variant_info_features(const variant_info *v);

/* 0 when variant v can run problem p on a device of compute capability cc (0 or less: the
 * cpu device, or before a device is chosen: no architecture check); else -1 and a message
 * naming the limit (dtype, head_dim, arch, …). Whether v runs on the cpu device (on_cpu) is
 * the caller's check, since only it knows the device. */
int variant_info_check(const variant_info *v, const attn_problem *p, int cc, char *why, size_t why_len);

/* Index of implementation `name` of v, -1 when v has none of that name. */
int variant_info_impl_find(const variant_info *v, const char *name);

/* The name of attn_problem.impl value `impl` of v (1 + its index), NULL for the default (0) or
 * a value v has no implementation for. */
const char *variant_info_impl_name(const variant_info *v, int impl);

/* 0 when `impl` names one of v's implementations; else -1 and a message that names the ones
 * v has, or the variants that have any (v has none). The device check is the caller's: the
 * workers' hellos say which implementations each device runs. */
int variant_info_impl_check(const variant_info *v, const char *impl, char *why, size_t why_len);

/* The architecture part of variant_info_check alone: for the front, which checked the problem
 * when it parsed the request (run_request_parse) and learns the device only afterwards. */
int variant_info_check_arch(const variant_info *v, int cc, char *why, size_t why_len);

/* The problem limits of the fused variants, as the table's `check` (the kernels call them
 * too, to refuse a problem that bypassed the table). */
int variant_check_efficient(const attn_problem *p, char *why, size_t why_len);
int variant_check_flash(const attn_problem *p, char *why, size_t why_len);
int variant_check_cudnn(const attn_problem *p, char *why, size_t why_len);
/* The cudnn variant's per-sequence arrays of a serving batch, in its workspace after the
 * plan's own bytes (kernels/cudnn/cudnn_serving.cu fills them on the device every forward): the
 * lengths seq_len_q and seq_len_kv (int32 [batch]) and the ragged offsets of Q, K, V and O
 * (int32 [batch + 1], in elements), each 256-byte aligned. Writes each array's offset from
 * the first and returns the bytes of all; 0 (offsets 0) for a dense problem. */
enum {
    CUDNN_META_SEQ_LEN_Q,
    CUDNN_META_SEQ_LEN_KV,
    CUDNN_META_OFFSET_Q,
    CUDNN_META_OFFSET_K,
    CUDNN_META_OFFSET_V,
    CUDNN_META_OFFSET_O,
    CUDNN_META_ARRAYS
};
size_t cudnn_meta_layout(const attn_problem *p, size_t offset[CUDNN_META_ARRAYS]);
/* flash's split-KV decode (impl "splitkv", kernels/flash_splitkv.cu): its limits (seq_q up to
 * FLASH_SPLITKV_MAX_SEQ_Q, head_dim 64, 128 and 256), which variant_check_flash applies when
 * p->impl names it; the most splits of the key range it may use for p (each at least
 * FLASH_SPLITKV_MIN_SPLIT_KEYS keys; no more than fill FLASH_SPLITKV_TARGET_CTAS CTAs); and its
 * workspace for that many: partial outputs [splits, batch·heads·seq_q, head_dim] fp32, then
 * their log-sum-exps [splits, batch·heads·seq_q] fp32 at flash_splitkv_lse_offset, each
 * 256-byte aligned; 0 bytes when it never splits. */
#define FLASH_SPLITKV_MAX_SEQ_Q 16
#define FLASH_SPLITKV_MIN_SPLIT_KEYS 256
#define FLASH_SPLITKV_TARGET_CTAS 8192 /* a bound, far past need: 4-warp CTAs fill an H200 at 264 */
#define FLASH_SPLITKV_MAX_SPLITS 64
int flash_splitkv_is(const attn_problem *p);
int flash_splitkv_check(const attn_problem *p, char *why, size_t why_len);
/* The query rows one of its CTAs takes: 8 (one n8 tile) where a group's rows (heads/kv_heads ×
 * seq_q) are 8 or fewer and at head_dim 256, else 16 (two n8 tiles sharing each K/V load). */
int flash_splitkv_tile_rows(const attn_problem *p);
/* flash's paged and ragged prefill (seq_q above FLASH_SPLITKV_MAX_SEQ_Q, impl tma or the
 * default): v6's SERVING instantiation (kernels/flash_tma_serving.cuh) on sm_90a. Its limits:
 * head_dim 64 and 128 with head_dim_v equal, pages of whole FLASH_SERVING_KEY_BLOCK-key blocks,
 * a finite nonzero scale. Off Hopper v3's SERVING instantiation (kernels/flash_kernel.cuh) runs
 * it. flash_serving_generic_is: a paged or ragged batch with impl legacy (v3's SERVING
 * instantiation, any head dim and page size). */
#define FLASH_SERVING_KEY_BLOCK 128 /* v6's key block at head_dim 64 and 128 */
int flash_serving_prefill_is(const attn_problem *p);
int flash_serving_prefill_check(const attn_problem *p, char *why, size_t why_len);
int flash_serving_generic_is(const attn_problem *p);
int64_t flash_splitkv_max_splits(const attn_problem *p);
size_t flash_splitkv_lse_offset(const attn_problem *p);
size_t flash_splitkv_workspace_bytes(const attn_problem *p);
/* What attnd's FlashInfer module (kernels/flashinfer/) is built for and how attnd's masks map
 * onto FlashInfer's; the module answers for the device (kernels/flashinfer_attn.h). */
int variant_check_flashinfer(const attn_problem *p, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
