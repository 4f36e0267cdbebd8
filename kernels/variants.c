/* variants.c — the table of attention variants (variants.h): the single place that lists
 * what attnd can run. A new variant family adds its rows here and nowhere else; the front
 * answers /v1/variants and validates requests from this table alone.
 */
#include "variants.h"

#include <stdio.h>
#include <string.h>

#include "cudnn_loader.h"
#include "cudnn_sdpa.h"
#include "decomposed.h"
#include "fused.h"

#define ALL_DTYPES (VARIANT_DTYPE(ATTN_BF16) | VARIANT_DTYPE(ATTN_FP16) | VARIANT_DTYPE(ATTN_FP32))

/* The `cudnn` row's library_ready: loaded, and nothing loaded from another cuDNN since
 * (cudnn_check_loaded: the engines load at the first plan). */
static int cudnn_ready(char *why, size_t why_len)
{
    if (cudnn_load(why, why_len) != 0) return -1;
    return cudnn_check_loaded(why, why_len);
}

static void cudnn_library_info(variant_library *out)
{
    out->name = "cuDNN";
    snprintf(out->requested, sizeof out->requested, "%s", cudnn_library_requested());
    cudnn_version_string(out->version, sizeof out->version);
    snprintf(out->path, sizeof out->path, "%s", cudnn_library_path());
}

const variant variants[] = {
    {
        .name = "reference",
        .summary = "plain C fp64 reference on the cpu device: the oracle for verify",
        .on_cpu = 1,
        .dtypes = ALL_DTYPES,
        .min_cc = 0,
        .max_head_dim = 0,
        .head_dim_multiple = 1,
        .check = NULL,
        .workspace_bytes = reference_workspace_bytes,
        .forward = reference_forward,
    },
    {
        .name = "naive",
        .summary = "PyTorch eager naive attention: 2 cuBLAS GEMMs, out-of-place scale, out-of-place "
                   "masked_fill (its hidden DtoD Memcpy), softmax",
        .on_cpu = 0,
        .dtypes = ALL_DTYPES,
        .min_cc = 0, /* cuBLAS and plain CUDA kernels: any GPU the binary runs on */
        .max_head_dim = 0,
        .head_dim_multiple = 1,
        .check = NULL,
        .workspace_bytes = naive_workspace_bytes,
        .forward = naive_forward,
    },
    {
        .name = "naive_inplace",
        .summary = "PyTorch eager naive attention with in-place masked_fill_: 2 cuBLAS GEMMs, "
                   "out-of-place scale, in-place mask (no DtoD Memcpy), softmax",
        .on_cpu = 0,
        .dtypes = ALL_DTYPES,
        .min_cc = 0,
        .max_head_dim = 0,
        .head_dim_multiple = 1,
        .check = NULL,
        /* decomposed.h has one workspace function for both naive forms; the in-place one
         * uses a part of it (no masked copy), so the larger size is always enough. */
        .workspace_bytes = naive_workspace_bytes,
        .forward = naive_inplace_forward,
    },
    {
        .name = "math",
        .summary = "PyTorch SDPA math backend: upcast to fp32, mask built per call, sqrt(scale) on q "
                   "and k, fp32 CUDA-core GEMMs, safe softmax, downcast",
        .on_cpu = 0,
        .dtypes = ALL_DTYPES,
        .min_cc = 0,
        .max_head_dim = 0,
        .head_dim_multiple = 1,
        .check = NULL,
        .workspace_bytes = math_workspace_bytes,
        .forward = math_forward,
    },
    {
        .name = "efficient",
        .summary = "attnd's memory-efficient fused attention (the role of xformers/CUTLASS in SDPA): "
                   "tiled, online softmax, no scores in memory; tensor cores for 16-bit, FFMA for fp32",
        .on_cpu = 0,
        .dtypes = ALL_DTYPES,
        .min_cc = 80,
        .max_head_dim = 256,
        .head_dim_multiple = 8,
        .check = efficient_check,
        .workspace_bytes = efficient_workspace_bytes,
        .forward = efficient_forward,
    },
    {
        .name = "flash",
        .summary = "attnd's FlashAttention-2-style kernel: mma.sync tensor cores, cp.async pipeline, "
                   "one CTA per query tile, causal tiles skipped",
        .on_cpu = 0,
        .dtypes = VARIANT_DTYPE(ATTN_BF16) | VARIANT_DTYPE(ATTN_FP16),
        .min_cc = 80,
        .max_head_dim = 256,
        .head_dim_multiple = 32,
        .check = flash_check,
        .workspace_bytes = flash_workspace_bytes,
        .forward = flash_forward,
    },
    {
        .name = "cudnn",
        .summary = "PyTorch SDPA cuDNN backend: cuDNN 9 fused flash attention through the graph API "
                   "(composite SDPA graph, plans cached per shape, one cudnnBackendExecute per forward)",
        .on_cpu = 0,
        .dtypes = VARIANT_DTYPE(ATTN_BF16) | VARIANT_DTYPE(ATTN_FP16),
        .min_cc = 80,
        .max_head_dim = 256,
        .head_dim_multiple = 8,
        .check = cudnn_sdpa_check,
        .workspace_bytes = cudnn_sdpa_workspace_bytes,
        .forward = cudnn_sdpa_forward,
        .engine_desc = cudnn_sdpa_engine_desc,
        .library_ready = cudnn_ready,
        .library_info = cudnn_library_info,
    },
};

const size_t variants_count = sizeof variants / sizeof variants[0];

const variant *variant_find(const char *name)
{
    size_t i;
    if (!name) return NULL;
    for (i = 0; i < variants_count; i++)
        if (strcmp(variants[i].name, name) == 0) return &variants[i];
    return NULL;
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

/* Limits in the order a client fixes them: dtype, head_dim, then the device, then what
 * only the variant knows. cc ≤ 0 skips the architecture check: the cpu device, or
 * validation before a device is chosen. Whether v runs on the cpu device (on_cpu) is the
 * caller's check, since only it knows which device it is. */
int variant_check(const variant *v, const attn_problem *p, int cc, char *why, size_t why_len)
{
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
    if (cc > 0 && cc < v->min_cc) {
        snprintf(why, why_len, "backend %s needs compute capability %d.%d or newer; the device has %d.%d", v->name,
                 v->min_cc / 10, v->min_cc % 10, cc / 10, cc % 10);
        return -1;
    }
    if (v->check) return v->check(p, why, why_len);
    return 0;
}
