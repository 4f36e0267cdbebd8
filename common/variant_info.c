/* variant_info.c — the variants' descriptions and problem limits (variant_info.h). A new
 * variant adds its row here and its code behind kernels/variants.c.
 */
#include "common/variant_info.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define ALL_DTYPES (VARIANT_DTYPE(ATTN_BF16) | VARIANT_DTYPE(ATTN_FP16) | VARIANT_DTYPE(ATTN_FP32))
#define HALF_DTYPES (VARIANT_DTYPE(ATTN_BF16) | VARIANT_DTYPE(ATTN_FP16))

/* The pending_features setting (variant_info_offer_pending): it offers the variants' pending bits. */
static int pending_offered;

/* Limits shared by the fused kernels: K/V heads that divide the query heads (query head h
 * reads K/V head h / (heads / kv_heads)), a value head dim that the bucketed bodies hold
 * (8..256 in multiples of 8; the features bits decide whether it is offered), one CTA row per
 * query tile (gridDim.y ≤ 65535), 32-bit sequence indices and batch·heads. */
static int fused_limits_check(const char *name, const attn_problem *p, int64_t query_tile, char *why, size_t why_len)
{
    const int64_t hkv = attn_kv_heads(p);
    if (p->kv_heads < 0 || (hkv > 0 && p->heads % hkv != 0)) {
        snprintf(why, why_len, "%s needs kv_heads dividing heads; got kv_heads %lld, heads %lld", name,
                 (long long)p->kv_heads, (long long)p->heads);
        return -1;
    }
    if (attn_dv(p) < 8 || attn_dv(p) > 256 || attn_dv(p) % 8 != 0) {
        snprintf(why, why_len, "%s supports head_dim_v 8..256 in multiples of 8, not %lld", name, (long long)attn_dv(p));
        return -1;
    }
    if (p->seq_q > INT32_MAX || p->seq_kv > INT32_MAX || (p->seq_q + query_tile - 1) / query_tile > 65535) {
        snprintf(why, why_len, "%s supports seq_q up to %lld and seq_kv up to %d", name,
                 (long long)(65535 * query_tile), INT32_MAX);
        return -1;
    }
    if (p->batch * p->heads > INT32_MAX) {
        snprintf(why, why_len, "%s supports batch*heads up to %d", name, INT32_MAX);
        return -1;
    }
    return 0;
}

int variant_check_efficient(const attn_problem *p, char *why, size_t why_len)
{
    if (p->head_dim < 8 || p->head_dim > EFFICIENT_MAX_HEAD_DIM || p->head_dim % 8 != 0) {
        snprintf(why, why_len, "efficient supports head_dim 8..%d in multiples of 8, not %lld", EFFICIENT_MAX_HEAD_DIM,
                 (long long)p->head_dim);
        return -1;
    }
    if ((p->ragged || p->page_size > 0) && p->dtype == ATTN_FP32) {
        snprintf(why, why_len, "efficient runs paged and ragged batches in its 16-bit kernel only (fp16, bf16), not "
                 "fp32");
        return -1;
    }
    return fused_limits_check("efficient", p, p->dtype == ATTN_FP32 ? EFFICIENT_FP32_QUERY_TILE : 64, why, why_len);
}

int variant_check_flash(const attn_problem *p, char *why, size_t why_len)
{
    const int64_t d = p->head_dim;
    if (p->dtype != ATTN_FP16 && p->dtype != ATTN_BF16) {
        snprintf(why, why_len, "flash supports dtypes fp16 and bf16, not %s", attn_dtype_name(p->dtype));
        return -1;
    }
    if (d != 32 && d != 64 && d != 96 && d != 128 && d != 192 && d != 256) {
        snprintf(why, why_len, "flash supports head_dim 32, 64, 96, 128, 192, 256, not %lld (use efficient)",
                 (long long)d);
        return -1;
    }
    if ((p->ragged || p->page_size > 0) && !flash_splitkv_is(p) && !flash_serving_prefill_is(p) &&
        !flash_serving_generic_is(p)) {
        const char *impl = variant_info_impl_name(&variant_info_flash, p->impl);
        if (p->seq_q > FLASH_SPLITKV_MAX_SEQ_Q)
            snprintf(why, why_len, "flash runs paged and ragged prefill (seq_q above %d) in v6 only (impl tma, the "
                     "default for them), not impl %s", FLASH_SPLITKV_MAX_SEQ_Q, impl ? impl : "?");
        else
            snprintf(why, why_len, "flash runs paged and ragged batches in its split-KV decode kernel only (impl "
                     "splitkv, the default for them), not impl %s", impl ? impl : "?");
        return -1;
    }
    if (flash_splitkv_is(p) && flash_splitkv_check(p, why, why_len) != 0) return -1;
    if (flash_serving_prefill_is(p) && flash_serving_prefill_check(p, why, why_len) != 0) return -1;
    return fused_limits_check("flash", p, 64, why, why_len);
}

/* Whether p runs flash's split-KV decode: impl names it (impl is 1 + its index in flash_impls),
 * or impl is the default and p is a paged or ragged batch that is a decode (or whose prefill is
 * not offered: then the split-KV kernel's check refuses it, naming its limit), or a dense decode
 * the kernel takes. With grouped queries the prefill kernels would read each K/V head once per
 * query head of its group (2.05x slower, GQA B64 H32 Hkv8 Skv8192 on an H100); with one query
 * head a K/V head they do not split the keys, and at B64 H32 Skv4096 ran 1.017x its time on an
 * H100, 1.054x on an H200 (1.9x and 2.7x at B1 Skv32768). */
int flash_splitkv_is(const attn_problem *p)
{
    const int splitkv = variant_info_impl_find(&variant_info_flash, "splitkv") + 1;
    if (p->impl != ATTN_IMPL_DEFAULT) return p->impl == splitkv;
    if (p->ragged || p->page_size > 0) return !flash_serving_prefill_is(p);
    return p->seq_q <= FLASH_SPLITKV_MAX_SEQ_Q && flash_splitkv_check(p, NULL, 0) == 0;
}

/* A paged or ragged prefill that v6's SERVING kernel runs: impl tma or the default. */
int flash_serving_prefill_is(const attn_problem *p)
{
    const int tma = variant_info_impl_find(&variant_info_flash, "tma") + 1;
    return (p->ragged || p->page_size > 0) && p->seq_q > FLASH_SPLITKV_MAX_SEQ_Q &&
           (p->impl == ATTN_IMPL_DEFAULT || p->impl == tma);
}

/* A paged or ragged batch named to v3 (impl legacy): its SERVING instantiation, any head dim. */
int flash_serving_generic_is(const attn_problem *p)
{
    const int legacy = variant_info_impl_find(&variant_info_flash, "legacy") + 1;
    return (p->ragged || p->page_size > 0) && p->impl == legacy;
}

int flash_serving_prefill_check(const attn_problem *p, char *why, size_t why_len)
{
    const double scale_log2 = p->scale * 1.4426950408889634;
    if ((p->head_dim != 64 && p->head_dim != 128) || attn_dv(p) != p->head_dim) {
        snprintf(why, why_len, "flash runs paged and ragged prefill in v6 at head_dim 64 and 128 with head_dim_v "
                 "equal, not %lld/%lld", (long long)p->head_dim, (long long)attn_dv(p));
        return -1;
    }
    if (p->page_size > 0 && p->page_size % FLASH_SERVING_KEY_BLOCK != 0) {
        snprintf(why, why_len, "flash runs paged prefill (seq_q above %d) where a page holds whole %d-key blocks: "
                 "page_size a multiple of %d, got %lld (its split-KV decode takes any page size)",
                 FLASH_SPLITKV_MAX_SEQ_Q, FLASH_SERVING_KEY_BLOCK, FLASH_SERVING_KEY_BLOCK, (long long)p->page_size);
        return -1;
    }
    if (p->page_size > 0 && p->num_pages * p->page_size > INT32_MAX) {
        snprintf(why, why_len, "flash runs paged prefill over caches of fewer than 2^31 slots (num_pages * "
                 "page_size), got %lld", (long long)(p->num_pages * p->page_size));
        return -1;
    }
    if (!(scale_log2 != 0.0 && scale_log2 > -3.4e38 && scale_log2 < 3.4e38)) {
        snprintf(why, why_len, "flash runs paged and ragged prefill with a nonzero scale finite in fp32, got %g",
                 p->scale);
        return -1;
    }
    return 0;
}

int flash_splitkv_check(const attn_problem *p, char *why, size_t why_len)
{
    const double scale_log2 = p->scale * 1.4426950408889634;
    if (p->seq_q > FLASH_SPLITKV_MAX_SEQ_Q) {
        snprintf(why, why_len, "flash impl splitkv is the decode kernel: seq_q up to %d (decode and speculative "
                 "decode), got %lld%s; %s", FLASH_SPLITKV_MAX_SEQ_Q, (long long)p->seq_q,
                 p->ragged ? " (the longest sequence's queries)" : "",
                 p->ragged || p->page_size > 0 ? "the default impl runs paged and ragged prefill"
                                               : "the other impls run longer queries");
        return -1;
    }
    if (p->head_dim != 64 && p->head_dim != 128 && p->head_dim != 256) {
        snprintf(why, why_len, "flash impl splitkv supports head_dim 64, 128 and 256, not %lld (its accumulators stay "
                 "in registers; the other impls run the rest)", (long long)p->head_dim);
        return -1;
    }
    if (attn_dv(p) != p->head_dim) {
        snprintf(why, why_len, "flash impl splitkv runs head_dim_v equal to head_dim only; got %lld and %lld (the "
                 "default impl runs both)", (long long)attn_dv(p), (long long)p->head_dim);
        return -1;
    }
    if (p->dtype != ATTN_BF16 && p->dtype != ATTN_FP16) {
        snprintf(why, why_len, "flash impl splitkv supports dtypes fp16 and bf16, not %s", attn_dtype_name(p->dtype));
        return -1;
    }
    if (p->seq_kv > INT32_MAX - 64 || p->heads > INT32_MAX / FLASH_SPLITKV_MAX_SEQ_Q) {
        snprintf(why, why_len, "flash impl splitkv supports seq_kv below 2^31 - 64 and heads below 2^27");
        return -1;
    }
    if (p->page_size > 0 && p->num_pages * p->page_size > INT32_MAX) {
        snprintf(why, why_len, "flash impl splitkv reads caches of fewer than 2^31 slots (num_pages * page_size), "
                 "got %lld", (long long)(p->num_pages * p->page_size));
        return -1;
    }
    if (!(scale_log2 > -3.4e38 && scale_log2 < 3.4e38)) {
        snprintf(why, why_len, "flash impl splitkv needs a scale finite in fp32, got %g", p->scale);
        return -1;
    }
    return 0;
}

int flash_splitkv_tile_rows(const attn_problem *p)
{
    const int64_t hkv = attn_kv_heads(p), rows = (hkv > 0 ? p->heads / hkv : 1) * p->seq_q;
    return rows <= 8 || p->head_dim > 128 ? 8 : 16;
}

int64_t flash_splitkv_max_splits(const attn_problem *p)
{
    const int64_t hkv = attn_kv_heads(p), group = hkv > 0 ? p->heads / hkv : 1, tile = flash_splitkv_tile_rows(p);
    const int64_t row_tiles = (group * p->seq_q + tile - 1) / tile, ctas = p->batch * hkv * row_tiles;
    int64_t s = FLASH_SPLITKV_MAX_SPLITS;
    const int64_t by_keys = (p->seq_kv + FLASH_SPLITKV_MIN_SPLIT_KEYS - 1) / FLASH_SPLITKV_MIN_SPLIT_KEYS;
    const int64_t by_ctas = ctas > 0 ? (FLASH_SPLITKV_TARGET_CTAS + ctas - 1) / ctas : 1;
    if (s > by_keys) s = by_keys;
    if (s > by_ctas) s = by_ctas;
    return s < 1 ? 1 : s;
}

/* Keys a windowed graph may have: cuDNN computes the window's bound as FLOAT col + L (the
 * frontend's fixed-length form), exact for integers up to 2^24. */
#define CUDNN_SDPA_MAX_WINDOW_SEQ_KV ((int64_t)1 << 24)

/* The serving layouts as cuDNN takes them (docs/cudnn.md, "Serving batches"): ragged offsets
 * are INT32 element counts, and cuDNN documents a paged cache's block size as a power of 2.
 * Whether a sequence leaves a query row without keys needs the lengths: the worker's check
 * (kernels/cudnn/cudnn_serving.cu). */
static int cudnn_check_serving(const attn_problem *p, char *why, size_t why_len)
{
    const int paged = p->page_size > 0;
    if (paged && (p->page_size & (p->page_size - 1)) != 0) {
        snprintf(why, why_len, "backend cudnn needs page_size a power of 2 (cuDNN's paged attention documents the "
                 "block size as one); got %lld", (long long)p->page_size);
        return -1;
    }
    if (p->ragged && (attn_q_elems(p) > INT32_MAX || attn_out_elems(p) > INT32_MAX ||
                      (!paged && (attn_k_elems(p) > INT32_MAX || attn_v_elems(p) > INT32_MAX)))) {
        snprintf(why, why_len, "backend cudnn needs each packed q, k, v and out below 2^31 elements in a ragged batch "
                 "(cuDNN's ragged offsets are INT32 element counts)");
        return -1;
    }
    return 0;
}

/* cuDNN 9's fp16/bf16 SDPA forward as cudnn-frontend's sdpa_support_surface.h states it, for
 * the graphs cudnn_sdpa.c builds; the rules of particular cuDNN releases are
 * cudnn_sdpa_version_check's, and those of each sequence cudnn_serving_check's, in the
 * worker. A serving batch's graph has a padding mask, which lifts the rules on the bounds
 * seq_q > seq_kv (each sequence is checked instead). */
int variant_check_cudnn(const attn_problem *p, char *why, size_t why_len)
{
    const int64_t hkv = attn_kv_heads(p), dv = attn_dv(p);
    const int serving = p->ragged || p->page_size > 0;
    if (p->dtype != ATTN_BF16 && p->dtype != ATTN_FP16) {
        snprintf(why, why_len, "backend cudnn supports dtype bf16 and fp16; got %s", attn_dtype_name(p->dtype));
        return -1;
    }
    if (p->head_dim <= 0 || p->head_dim % CUDNN_SDPA_HEAD_DIM_MULTIPLE != 0 ||
        p->head_dim > CUDNN_SDPA_MAX_HEAD_DIM) {
        snprintf(why, why_len, "backend cudnn needs head_dim a multiple of %d up to %d (cuDNN %s support surface); "
                 "got %lld", CUDNN_SDPA_HEAD_DIM_MULTIPLE, CUDNN_SDPA_MAX_HEAD_DIM, "9.x fp16/bf16",
                 (long long)p->head_dim);
        return -1;
    }
    /* cuDNN checks d_qk and d_v alike (multiples of 8; up to 256 on Hopper, the most any
     * GPU it runs takes); (192, 128) is DeepSeek-V3's. */
    if (p->head_dim_v < 0 || dv % CUDNN_SDPA_HEAD_DIM_MULTIPLE != 0 || dv > CUDNN_SDPA_MAX_HEAD_DIM) {
        snprintf(why, why_len, "backend cudnn needs head_dim_v a multiple of %d up to %d (cuDNN %s support surface); "
                 "got %lld", CUDNN_SDPA_HEAD_DIM_MULTIPLE, CUDNN_SDPA_MAX_HEAD_DIM, "9.x fp16/bf16",
                 (long long)p->head_dim_v);
        return -1;
    }
    if (p->batch <= 0 || p->heads <= 0 || p->seq_q <= 0 || p->seq_kv <= 0) {
        snprintf(why, why_len, "backend cudnn needs batch, heads, seq_q and seq_kv ≥ 1");
        return -1;
    }
    if (p->kv_heads < 0 || p->heads % hkv != 0) {
        snprintf(why, why_len, "backend cudnn needs kv_heads dividing heads (cuDNN: the key and value heads must be "
                 "a factor of the query heads); got kv_heads %lld, heads %lld", (long long)p->kv_heads,
                 (long long)p->heads);
        return -1;
    }
    /* Without a padding mask cuDNN takes a left bound only when no query row lies past the
     * keys: every windowed row then sees its own position. */
    if (p->window_keys > 0 && p->seq_q > p->seq_kv && !serving) {
        snprintf(why, why_len, "backend cudnn runs window_keys only with seq_q <= seq_kv (cuDNN: \"sliding window "
                 "attention is only supported with max_s_q <= max_s_kv\"); got %lld > %lld", (long long)p->seq_q,
                 (long long)p->seq_kv);
        return -1;
    }
    if (p->window_keys > 0 && p->seq_kv > CUDNN_SDPA_MAX_WINDOW_SEQ_KV) {
        snprintf(why, why_len, "backend cudnn runs window_keys only with seq_kv up to %lld: cuDNN's window bound is "
                 "FLOAT arithmetic, exact only to 2^24", (long long)CUDNN_SDPA_MAX_WINDOW_SEQ_KV);
        return -1;
    }
    /* The mask's row shift and GEN_INDEX are INT32 in the graph. */
    if (p->seq_q > INT32_MAX || p->seq_kv > INT32_MAX) {
        snprintf(why, why_len, "backend cudnn needs seq_q and seq_kv below 2^31");
        return -1;
    }
    if (p->mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT && p->seq_q > p->seq_kv && !serving) {
        snprintf(why, why_len,
                 "backend cudnn supports causal_bottom_right only with seq_q <= seq_kv (got seq_q %lld > seq_kv "
                 "%lld): cuDNN's fused SDPA does not support fully masked rows",
                 (long long)p->seq_q, (long long)p->seq_kv);
        return -1;
    }
    /* Measured (tests/gpu/fused_check.cu, H200, cuDNN 9.19): with scale -0.3 every output
     * element was NaN or Inf, masked or not; 0.7 was exact. Refused, never silently wrong. */
    if (!(p->scale > 0.0)) {
        snprintf(why, why_len,
                 "backend cudnn needs a positive scale (got %g): cuDNN's fused SDPA returns NaN for a negative one",
                 p->scale);
        return -1;
    }
    if ((unsigned)p->mask >= ATTN_MASK_COUNT) {
        snprintf(why, why_len, "backend cudnn: unknown mask %d", (int)p->mask);
        return -1;
    }
    return serving ? cudnn_check_serving(p, why, why_len) : 0;
}

/* flashinfer's impls name the decode kernel (kernels/flashinfer/flashinfer_abi.h
 * ATTND_FI_DECODE_*), so one named is a decode's: one query row a sequence, over a cache the
 * module's paged view takes (int32 rows of keys); cuda_cores takes the groups FlashInfer's
 * CUDA-core decode is compiled for (flashinfer_layout.h attnd_fi_cuda_cores_group). */
static int flashinfer_impl_check(const attn_problem *p, char *why, size_t why_len)
{
    const char *impl = variant_info_impl_name(&variant_info_flashinfer, p->impl);
    const int64_t g = p->heads / attn_kv_heads(p);
    if (p->seq_q > 1) {
        snprintf(why, why_len, "flashinfer impl %s chooses the decode kernel: seq_q 1 only (one query row a "
                 "sequence), got %lld%s; without impl FlashInfer's prefill kernels run it", impl ? impl : "?",
                 (long long)p->seq_q, p->ragged ? " (the longest sequence's queries)" : "");
        return -1;
    }
    if (!p->ragged && p->page_size == 0 && p->batch * attn_kv_heads(p) * p->seq_kv > INT32_MAX) {
        snprintf(why, why_len, "flashinfer impl %s runs a decode over a paged view of the cache with 32-bit page "
                 "ids: batch*kv_heads*seq_kv below 2^31, got %lld; without impl FlashInfer's prefill kernel runs it",
                 impl ? impl : "?", (long long)(p->batch * attn_kv_heads(p) * p->seq_kv));
        return -1;
    }
    if (impl && !strcmp(impl, "cuda_cores") &&
        !(g == 1 || g == 2 || g == 3 || g == 4 || g == 6 || g == 8 || g == 16)) {
        snprintf(why, why_len, "flashinfer impl cuda_cores (FlashInfer's CUDA-core decode) is compiled for 1, 2, 3, "
                 "4, 6, 8 and 16 query heads per K/V head, not %lld (heads / kv_heads); impl tensor_cores, the "
                 "default, runs any group", (long long)g);
        return -1;
    }
    return 0;
}

/* attnd's FlashInfer module: the head dims its files are compiled for, FlashInfer's 32-bit
 * head strides (seq·head_dim), and its causal mask, which is bottom-right aligned: a row sees
 * keys up to its position plus seq_kv - seq_q. causal_bottom_right is that mask; top-left
 * causal is that mask over the first seq_q keys (kernels/flashinfer_attn.c). Either needs
 * seq_q <= seq_kv: FlashInfer's prefill refuses kv_len < qo_len under kCausal. */
int variant_check_flashinfer(const attn_problem *p, char *why, size_t why_len)
{
    const int64_t d = p->head_dim, hkv = attn_kv_heads(p);
    if (d != 64 && d != 128 && d != 256) {
        snprintf(why, why_len, "flashinfer (attnd's FlashInfer module) is built for head_dim 64, 128 and 256, not %lld",
                 (long long)d);
        return -1;
    }
    if (p->kv_heads < 0 || p->heads % hkv != 0) {
        snprintf(why, why_len, "flashinfer needs kv_heads dividing heads; got kv_heads %lld, heads %lld",
                 (long long)p->kv_heads, (long long)p->heads);
        return -1;
    }
    if (attn_dv(p) != d) {
        snprintf(why, why_len, "flashinfer runs head_dim_v equal to head_dim only; got %lld and %lld",
                 (long long)attn_dv(p), (long long)d);
        return -1;
    }
    if (p->mask != ATTN_MASK_NONE && p->seq_q > p->seq_kv) {
        snprintf(why, why_len, "flashinfer runs %s only with seq_q <= seq_kv (got %lld > %lld): FlashInfer's causal "
                 "mask is bottom-right aligned and needs kv_len >= qo_len", attn_mask_name(p->mask),
                 (long long)p->seq_q, (long long)p->seq_kv);
        return -1;
    }
    if (p->seq_q > INT32_MAX || p->seq_kv > INT32_MAX || p->seq_q * d > UINT32_MAX || p->seq_kv * d > UINT32_MAX) {
        snprintf(why, why_len, "flashinfer needs seq_q*head_dim and seq_kv*head_dim below 2^32 (FlashInfer's head "
                 "strides are 32-bit)");
        return -1;
    }
    if (p->impl != ATTN_IMPL_DEFAULT && flashinfer_impl_check(p, why, why_len) != 0) return -1;
    return 0;
}

/* ---- workspace bounds: the formulas of the kernels' layouts, each buffer 256-byte aligned */

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }

/* flash_splitkv_workspace_bytes's layout (variant_info.h). */
size_t flash_splitkv_lse_offset(const attn_problem *p)
{
    const int64_t s = flash_splitkv_max_splits(p);
    return s > 1 ? align256((size_t)(s * p->batch * p->heads * p->seq_q * p->head_dim) * sizeof(float)) : 0;
}

size_t flash_splitkv_workspace_bytes(const attn_problem *p)
{
    const int64_t s = flash_splitkv_max_splits(p);
    if (s <= 1) return 0;
    return flash_splitkv_lse_offset(p) + align256((size_t)(s * p->batch * p->heads * p->seq_q) * sizeof(float));
}

/* flash: the split-KV decode's partials when impl asks for it; the other families need none. */
static size_t flash_bound(const attn_problem *p)
{
    return flash_splitkv_is(p) && flash_splitkv_check(p, NULL, 0) == 0 ? flash_splitkv_workspace_bytes(p) : 0;
}

static size_t reference_bound(const attn_problem *p) { return (size_t)attn_out_elems(p) * sizeof(double); }

/* kernels/serving_pad.cuh: a serving batch's padded tensors in front of the dense problem's
 * workspace: q and out (ragged; out in elements of out_bytes), k and v (paged or ragged). */
static size_t serving_pad_bound(const attn_problem *p, size_t out_bytes)
{
    const attn_problem d = attn_padded(p);
    const size_t esz = attn_dtype_bytes(p->dtype);
    size_t b = 0;
    if (p->ragged)
        b += align256((size_t)attn_q_elems(&d) * esz) + align256((size_t)attn_out_elems(&d) * out_bytes);
    if (p->ragged || p->page_size > 0)
        b += align256((size_t)attn_k_elems(&d) * esz) + align256((size_t)attn_v_elems(&d) * esz);
    return b;
}

/* naive.cu: the scaled scores and their masked copy, in the problem's dtype, and repeat_kv's
 * copies of k and v under grouped-query attention; a serving batch's padded tensors first. */
static size_t naive_bound(const attn_problem *serving)
{
    const attn_problem dense = attn_padded(serving), *p = &dense;
    size_t b = serving_pad_bound(serving, attn_dtype_bytes(serving->dtype)) +
               2 * align256((size_t)attn_scores_elems(p) * attn_dtype_bytes(p->dtype));
    if (attn_kv_heads(p) != p->heads)
        b += align256((size_t)(p->batch * p->heads * p->seq_kv * p->head_dim) * attn_dtype_bytes(p->dtype)) +
             align256((size_t)(p->batch * p->heads * p->seq_kv * attn_dv(p)) * attn_dtype_bytes(p->dtype));
    return b;
}

/* math.cu's math_plan: a serving batch's padded tensors (out in fp32 room), then fp32 copies
 * of q, k, v (16-bit only), their repeats (grouped K/V), q and k times √scale, a caller's mask
 * (a window's, or a ragged batch's one plane per sequence and its lengths) and its zero, the
 * mask planes (masked only), scores, softmax, the -inf flags, the row flags, fp32 out (16-bit). */
static size_t math_bound(const attn_problem *serving)
{
    const attn_problem dense = attn_padded(serving), *p = &dense;
    const int up = p->dtype != ATTN_FP32, windowed = p->window_keys > 0 || serving->ragged;
    const int masked = p->mask != ATTN_MASK_NONE || windowed, grouped = attn_kv_heads(p) != p->heads;
    const size_t planes = serving->ragged ? (size_t)p->batch : 1;
    const size_t plane = planes * (size_t)(p->seq_q * p->seq_kv), n = (size_t)attn_scores_elems(p);
    const size_t q4 = (size_t)attn_q_elems(p) * 4;
    const size_t k_rep4 = (size_t)(p->batch * p->heads * p->seq_kv * p->head_dim) * 4;
    const size_t v_rep4 = (size_t)(p->batch * p->heads * p->seq_kv * attn_dv(p)) * 4;
    size_t b = serving_pad_bound(serving, sizeof(float)) + align256(q4) + align256(k_rep4) +
               2 * align256(3 * sizeof(float));
    if (up)
        b += align256(q4) + align256((size_t)attn_k_elems(p) * 4) + align256((size_t)attn_v_elems(p) * 4) +
             align256((size_t)attn_out_elems(p) * 4);
    if (grouped) b += align256(k_rep4) + align256(v_rep4);
    if (masked) b += 3 * align256(plane) + align256(plane * 4);
    if (serving->ragged) b += 2 * align256((size_t)(p->batch + 1) * sizeof(int32_t));
    b += 2 * align256(n * 4) + align256(n) + align256((size_t)(p->batch * p->heads * p->seq_q));
    return b;
}

size_t cudnn_meta_layout(const attn_problem *p, size_t offset[CUDNN_META_ARRAYS])
{
    size_t at = 0;
    int i;
    for (i = 0; i < CUDNN_META_ARRAYS; i++) {
        const size_t n = i <= CUDNN_META_SEQ_LEN_KV ? (size_t)p->batch : (size_t)p->batch + 1;
        offset[i] = at;
        if (p->ragged || p->page_size > 0) at += align256(n * sizeof(int32_t));
    }
    return at;
}

/* cudnn_sdpa.c: the softmax stats (fp32 per query row of every query head: B·H·Sq, the
 * same with grouped K/V heads, another value head dim or a window), what cuDNN's plan
 * asks, at most 16 MiB for the fused SDPA engines seen so far, and a serving batch's
 * per-sequence arrays. cudnn_sdpa.c answers this bound too when it cannot build a plan. */
static size_t cudnn_bound(const attn_problem *p)
{
    size_t offset[CUDNN_META_ARRAYS];
    return align256((size_t)(p->batch * p->heads * p->seq_q) * sizeof(float)) + ((size_t)16 << 20) +
           cudnn_meta_layout(p, offset);
}

/* kernels/flashinfer/: on 8.x, the FA2 prefill's token-major output before its transpose;
 * on Hopper, for the paged prefill (a paged batch of more than one query row, a contiguous one
 * of 2-16), PrefillSM90Plan's schedule (7 int32 per query tile of 128 rows and head), the page
 * table, and a [B,H,Sq,D] q's and out's token-major copies;
 * for a decode (seq_q 1), the plan's buffers at their largest (each sequence split into at
 * most ⌈pages/max(128/page, 1)⌉ chunks of pages of page_size keys, or 16 for a contiguous
 * cache) and the page table: for impl cuda_cores DecodePlan's (a partial output of
 * head_dim + 1 floats per head and chunk), else the tensor-core decode's PrefillPlan (3 int32
 * per CTA, a CTA per query tile of 16, 64 or 128 packed rows and chunk, and
 * ⌈CTAs·tile/group⌉ partial rows of head_dim + 1 floats per head); for a ragged batch, the batch prefill's plan
 * (Hopper: 7 int32 per query tile of 128 rows and head; FA2: 3 per tile of 16 packed rows,
 * and the two indptrs). Looser than the module's own layouts (flashinfer_layout.h), which
 * the worker allocates. */
static size_t flashinfer_bound(const attn_problem *p)
{
    const int64_t g = p->heads / attn_kv_heads(p);
    const size_t staged = p->ragged || p->page_size > 0
                              ? 0
                              : align256((size_t)attn_out_elems(p) * attn_dtype_bytes(p->dtype));
    const size_t page = p->page_size > 0 ? (size_t)p->page_size : 16, min_pages = 128 / page > 1 ? 128 / page : 1;
    const size_t rows = (size_t)(p->batch * p->seq_q), b1 = (size_t)p->batch + 1; /* rows bound total_q */
    size_t pages, chunks, decode = 0, ragged = 0, paged = 0, bound = staged;

    if (p->seq_q == 1) {
        pages = ((size_t)p->seq_kv + page - 1) / page;
        chunks = (size_t)p->batch * (pages > min_pages ? (pages + min_pages - 1) / min_pages : 1);
        if (p->impl != variant_info_impl_find(&variant_info_flashinfer, "cuda_cores") + 1) {
            const size_t tile = g > 64 && p->head_dim < 256 ? 128 : g > 16 ? 64 : 16;
            const size_t ctas = chunks * (((size_t)g + tile - 1) / tile), rows = (ctas * tile + (size_t)g - 1) / (size_t)g;
            decode = (size_t)p->heads * rows * ((size_t)p->head_dim + 1) * 4 + 12 * ctas +
                     4 * (size_t)p->batch * (pages + 4) + 8192;
        } else {
            decode = (size_t)p->heads * chunks * ((size_t)p->head_dim + 1) * 4 + 16 * chunks +
                     4 * (size_t)p->batch * (pages + 2) + 8192;
        }
    }
    if (p->ragged)
        ragged = 28 * (size_t)p->heads * (rows / 128 + b1) + 12 * (rows * (size_t)g / 16 + b1) + 8 * b1 + 8192;
    if (p->seq_q > 1 && (p->page_size > 0 || p->seq_q <= 16)) {
        pages = ((size_t)p->seq_kv + page - 1) / page;
        paged = 28 * (size_t)p->heads * (rows / 128 + b1) + 4 * (size_t)p->batch * (pages + 2) + 8192 +
                (p->ragged ? 0 : 2 * align256(rows * (size_t)(p->heads * p->head_dim) * attn_dtype_bytes(p->dtype)));
    }
    if (decode > bound) bound = decode;
    if (ragged > bound) bound = ragged;
    return paged > bound ? paged : bound;
}

const variant_info variant_info_reference = {
    .name = "reference",
    .summary = "plain C fp64 reference on the cpu device: the oracle for verify",
    .on_cpu = 1,
    .dtypes = ALL_DTYPES,
    .head_dim_multiple = 1,
    .features = VARIANT_GQA | VARIANT_HEAD_DIM_V | VARIANT_WINDOW | VARIANT_PAGED | VARIANT_RAGGED,
    .workspace_bound = reference_bound,
};

const variant_info variant_info_naive = {
    .name = "naive",
    .summary = "PyTorch eager naive attention: 2 cuBLAS GEMMs, out-of-place scale, out-of-place "
               "masked_fill (its hidden DtoD Memcpy), softmax",
    .dtypes = ALL_DTYPES,
    .head_dim_multiple = 1, /* cuBLAS and plain CUDA kernels: any GPU the worker runs on */
    /* serving batches by PyTorch's padded route (kernels/serving_pad.cuh) */
    .features = VARIANT_GQA | VARIANT_HEAD_DIM_V | VARIANT_WINDOW | VARIANT_PAGED | VARIANT_RAGGED,
    .workspace_bound = naive_bound,
};

const variant_info variant_info_naive_inplace = {
    .name = "naive_inplace",
    .summary = "PyTorch eager naive attention with in-place masked_fill_: 2 cuBLAS GEMMs, "
               "out-of-place scale, in-place mask (no DtoD Memcpy), softmax",
    .dtypes = ALL_DTYPES,
    .head_dim_multiple = 1,
    .features = VARIANT_GQA | VARIANT_HEAD_DIM_V | VARIANT_WINDOW | VARIANT_PAGED | VARIANT_RAGGED,
    .workspace_bound = naive_bound,
};

const variant_info variant_info_math = {
    .name = "math",
    .summary = "PyTorch SDPA math backend: upcast to fp32, mask built per call, sqrt(scale) on q "
               "and k, fp32 CUDA-core GEMMs, safe softmax, downcast",
    .dtypes = ALL_DTYPES,
    .head_dim_multiple = 1,
    .features = VARIANT_GQA | VARIANT_HEAD_DIM_V | VARIANT_WINDOW | VARIANT_PAGED | VARIANT_RAGGED,
    .workspace_bound = math_bound,
};

/* ---- implementations: the kernel families `impl` chooses (kernels/fused.h, same order) */

#define HOPPER_KERNELS "compute capability 9.0 and a worker built with sm_90a code"

static const variant_impl efficient_impls[] = {
    {"exact", "v2: head_dim 128 compiled in, 2-stage K/V ring, one barrier per key block; 16-bit "
              "head_dim 128 only, the default there", NULL},
    {"legacy", "v1: the bucket kernel (64x64 tiles, one shared-memory stage); what every other "
               "problem runs", NULL},
};

static const variant_impl flash_impls[] = {
    {"tma", "v6, FA3's structure: TMA loads, a producer warp, ping-ponged wgmma consumer "
            "warpgroups; head_dim 64, 96, 128 and 256, and 192 with head_dim_v 128; the default on sm_90a",
     HOPPER_KERNELS},
    {"wgmma", "v5: both products on wgmma from swizzled shared memory, cp.async K/V ring; head_dim "
              "64 and 128 (96 runs w4, the others legacy)", HOPPER_KERNELS},
    {"w4", "v4, FA2's tile: mma.sync, 4 warps x 32 query rows, one barrier per key block; head_dim "
           "96 and 128 (64 runs legacy), the default without sm_90a", NULL},
    {"w8", "v4 with 8 warps x 16 query rows, Q in registers; head_dim 96 and 128 (64 runs legacy), "
           "the default on sm_86 and sm_89", NULL},
    {"legacy", "v3: mma.sync from a 2-stage cp.async ring, head_dim 32/64/256 compiled in; the only "
               "kernel at head_dim 32, and at 192 and 256 without sm_90a", NULL},
    {"splitkv", "decode (FlashDecoding): seq_q up to 16, head_dim 64, 128 and 256; the key range split across "
                "CTAs of 4 warps that share each K/V load among a group's query heads, then a combine "
                "kernel; the default for every decode it takes: dense, paged and ragged", NULL},
};

/* Which of FlashInfer's decodes runs a decode (kernels/flashinfer_attn.h FLASHINFER_IMPL_*,
 * same order); a prefill takes no impl. */
static const variant_impl flashinfer_impls[] = {
    {"tensor_cores", "FlashInfer's tensor-core decode: FA2's batch prefill over the pages, one query row per "
                     "sequence; what vLLM runs for every group (use_tensor_cores=True); the default", NULL},
    {"cuda_cores", "FlashInfer's CUDA-core batch decode, a row of threads per query head; SGLang's choice up to 4 "
                   "query heads per K/V head, vLLM's before it moved to tensor cores; groups 1, 2, 3, 4, 6, 8 and 16",
     NULL},
};

#define IMPLS(a) .impls = (a), .impl_count = sizeof(a) / sizeof((a)[0])

const variant_info variant_info_efficient = {
    .name = "efficient",
    .summary = "attnd's memory-efficient fused attention (the role of xformers/CUTLASS in SDPA): "
               "tiled, online softmax, no scores in memory; tensor cores for 16-bit, FFMA for fp32",
    .dtypes = ALL_DTYPES,
    .min_cc = 80,
    .max_head_dim = EFFICIENT_MAX_HEAD_DIM,
    .head_dim_multiple = 8,
    /* Validated on the H200 (bench/results/nvidia-h200/2026-12-05-717cfd2-models-serving.md):
     * fused_check's grouped-K/V, window and head_dim_v rows in every dtype, and
     * tests/gpu/test_models.py. */
    /* Paged and ragged batches natively in v1 (flash_kernel.cuh's SERVING instantiation, 16-bit),
     * validated on an H100 (fused_check's serving rows, tests/gpu/test_serving_generic.py;
     * bench/results/nvidia-h100/2026-12-06-102c30b-serving-offered.md). */
    .features = VARIANT_GQA | VARIANT_WINDOW | VARIANT_HEAD_DIM_V | VARIANT_PAGED | VARIANT_RAGGED,
    .check = variant_check_efficient,
    IMPLS(efficient_impls),
};

const variant_info variant_info_flash = {
    .name = "flash",
    .summary = "attnd's FlashAttention kernels: on Hopper TMA loads, wgmma and warp-specialised "
               "ping-pong consumers (FA3's structure); elsewhere mma.sync with a cp.async pipeline "
               "(FA2's); causal tiles skipped",
    .dtypes = HALF_DTYPES,
    .min_cc = 80,
    .max_head_dim = 256,
    .head_dim_multiple = 32,
    /* Validated on the H200 (as efficient's): grouped K/V heads and windows in every family, a
     * value head dim of its own in v3, and paged and ragged decode batches in the split-KV
     * kernel (tests/gpu/test_splitkv.py's serving cases). */
    .features = VARIANT_GQA | VARIANT_WINDOW | VARIANT_HEAD_DIM_V | VARIANT_PAGED | VARIANT_RAGGED,
    .check = variant_check_flash,
    .workspace_bound = flash_bound,
    IMPLS(flash_impls),
};

const variant_info variant_info_cudnn = {
    .name = "cudnn",
    .summary = "PyTorch SDPA cuDNN backend: cuDNN 9 fused flash attention through the graph API "
               "(composite SDPA graph, plans cached per shape, one cudnnBackendExecute per forward)",
    .dtypes = HALF_DTYPES,
    .min_cc = 80,
    .max_head_dim = CUDNN_SDPA_MAX_HEAD_DIM,
    .head_dim_multiple = CUDNN_SDPA_HEAD_DIM_MULTIPLE,
    /* Paged caches (PAGED_CACHE_LOAD) and ragged batches (ragged offsets, padding mask) in the
     * composite graph (docs/cudnn.md), validated on an H100 (tests/gpu/test_cudnn_serving.py,
     * the unit test's GPU cases; the results file named at efficient's). */
    .features = VARIANT_GQA | VARIANT_HEAD_DIM_V | VARIANT_WINDOW | VARIANT_PAGED | VARIANT_RAGGED,
    .check = variant_check_cudnn,
    .workspace_bound = cudnn_bound,
    .library = "cuDNN",
};

const variant_info variant_info_flashinfer = {
    .name = "flashinfer",
    .summary = "FlashInfer, the attention library of vLLM and SGLang, built from its wheel's headers into a "
               "module loaded at run time: decode (seq_q 1) over a paged view of the cache (or a paged cache's "
               "block table) through its tensor-core decode (the batch prefill over the pages, as vLLM runs "
               "every decode) or, with impl cuda_cores, its CUDA-core batch decode (SGLang's up to 4 query heads "
               "per K/V head), prefill through its single-request kernels (the FA3 template on Hopper, FA2 "
               "elsewhere), a ragged batch through its batch prefill",
    .dtypes = HALF_DTYPES,
    .min_cc = 80,
    .max_head_dim = 256,
    .head_dim_multiple = 64,
    /* Paged decode through the block table, ragged batches through the batch prefill
     * (kernels/flashinfer/): tests/gpu/test_flashinfer_serving.py passed on the H200. */
    .features = VARIANT_GQA | VARIANT_PAGED | VARIANT_RAGGED,
    .check = variant_check_flashinfer,
    .workspace_bound = flashinfer_bound,
    .library = "FlashInfer",
    IMPLS(flashinfer_impls),
};

const variant_info *const variant_infos[] = {
    &variant_info_reference, &variant_info_naive, &variant_info_naive_inplace, &variant_info_math,
    &variant_info_efficient, &variant_info_flash, &variant_info_cudnn, &variant_info_flashinfer,
};
const size_t variant_infos_count = sizeof variant_infos / sizeof variant_infos[0];

const variant_info *variant_info_find(const char *name)
{
    size_t i;
    if (!name) return NULL;
    for (i = 0; i < variant_infos_count; i++)
        if (strcmp(variant_infos[i]->name, name) == 0) return variant_infos[i];
    return NULL;
}

int variant_info_impl_find(const variant_info *v, const char *name)
{
    size_t i;
    for (i = 0; name && i < v->impl_count; i++)
        if (strcmp(v->impls[i].name, name) == 0) return (int)i;
    return -1;
}

const char *variant_info_impl_name(const variant_info *v, int impl)
{
    return impl >= 1 && (size_t)impl <= v->impl_count ? v->impls[impl - 1].name : NULL;
}

int variant_info_impl_check(const variant_info *v, const char *impl, char *why, size_t why_len)
{
    char list[200];
    size_t i, n = 0;

    if (variant_info_impl_find(v, impl) >= 0) return 0;
    list[0] = '\0';
    if (v->impl_count == 0) {
        for (i = 0; i < variant_infos_count && n < sizeof list; i++)
            if (variant_infos[i]->impl_count)
                n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "", variant_infos[i]->name);
        snprintf(why, why_len, "backend %s has one implementation: impl applies to %s only", v->name, list);
        return -1;
    }
    for (i = 0; i < v->impl_count && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", v->impls[i].name);
    snprintf(why, why_len, "backend %s has no implementation '%.40s'; it has %s", v->name, impl, list);
    return -1;
}

/* "bf16, fp16" from the dtype bits. */
static void variant_dtype_list(unsigned dtypes, char *buf, size_t len)
{
    size_t used = 0;
    int t;
    buf[0] = '\0';
    for (t = 0; t < ATTN_DTYPE_COUNT; t++) {
        if (!(dtypes & VARIANT_DTYPE(t))) continue;
        int n = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", attn_dtype_name((attn_dtype)t));
        if (n < 0 || (size_t)n >= len - used) return;
        used += (size_t)n;
    }
}

int variant_info_check_arch(const variant_info *v, int cc, char *why, size_t why_len)
{
    if (cc > 0 && cc < v->min_cc) {
        snprintf(why, why_len, "backend %s needs compute capability %d.%d or newer; the device has %d.%d", v->name,
                 v->min_cc / 10, v->min_cc % 10, cc / 10, cc % 10);
        return -1;
    }
    return 0;
}

void variant_info_offer_pending(int on) { pending_offered = on != 0; }

unsigned variant_info_features(const variant_info *v)
{
    return v->features | (pending_offered ? v->pending_features : 0u);
}

/* Limits in the order a client fixes them: dtype, head_dim, then the device, then what only
 * the variant knows. */
int variant_info_check(const variant_info *v, const attn_problem *p, int cc, char *why, size_t why_len)
{
    const unsigned offered = variant_info_features(v);
    if ((unsigned)p->dtype >= ATTN_DTYPE_COUNT || !(v->dtypes & VARIANT_DTYPE(p->dtype))) {
        char list[64];
        variant_dtype_list(v->dtypes, list, sizeof list);
        snprintf(why, why_len, "backend %s does not support dtype %s (supports %s)", v->name,
                 attn_dtype_name(p->dtype), list);
        return -1;
    }
    if (v->max_head_dim > 0 && p->head_dim > v->max_head_dim) {
        snprintf(why, why_len, "backend %s supports head_dim up to %d; got %lld", v->name, v->max_head_dim,
                 (long long)p->head_dim);
        return -1;
    }
    if (v->head_dim_multiple > 1 && p->head_dim % v->head_dim_multiple != 0) {
        snprintf(why, why_len, "backend %s needs head_dim a multiple of %d; got %lld", v->name,
                 v->head_dim_multiple, (long long)p->head_dim);
        return -1;
    }
    if (attn_kv_heads(p) != p->heads && !(offered & VARIANT_GQA)) {
        snprintf(why, why_len, "backend %s does not run grouped-query attention yet (kv_heads %lld < heads %lld)",
                 v->name, (long long)attn_kv_heads(p), (long long)p->heads);
        return -1;
    }
    if (attn_dv(p) != p->head_dim && !(offered & VARIANT_HEAD_DIM_V)) {
        snprintf(why, why_len, "backend %s does not run a value head dim of its own yet (head_dim_v %lld, head_dim %lld)",
                 v->name, (long long)attn_dv(p), (long long)p->head_dim);
        return -1;
    }
    if (p->window_keys > 0 && !(offered & VARIANT_WINDOW)) {
        snprintf(why, why_len, "backend %s does not run a sliding window yet", v->name);
        return -1;
    }
    /* The serving layouts: docs/serving.md says how each variant will run them. */
    if (p->ragged && !(offered & VARIANT_RAGGED)) {
        snprintf(why, why_len, "backend %s does not run ragged batches yet (%s: lengths per sequence); the reference "
                 "on the cpu device does", v->name, (p->ragged & ATTN_RAGGED_KV) ? "seqlens_kv" : "seqlens_q");
        return -1;
    }
    if (p->page_size > 0 && !(offered & VARIANT_PAGED)) {
        snprintf(why, why_len, "backend %s does not run a paged K/V cache yet (page_size %lld); the reference on the "
                 "cpu device does", v->name, (long long)p->page_size);
        return -1;
    }
    if (variant_info_check_arch(v, cc, why, why_len) != 0) return -1;
    if (v->check && v->check(p, why, why_len) != 0) return -1;
    return 0;
}
