/* variants.c — the variants' code (variants.h), one row per row of common/variant_info.c. */
#include "kernels/variants.h"

#include <stdio.h>
#include <string.h>

#include "kernels/cudnn/cudnn_loader.h"
#include "kernels/cudnn/cudnn_sdpa.h"
#include "kernels/decomposed.h"
#include "kernels/flashinfer_attn.h"
#include "kernels/flashinfer_loader.h"
#include "kernels/fused.h"

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

/* The `flashinfer` row's library: attnd's FlashInfer module (flashinfer_loader.h). */
static int flashinfer_ready(char *why, size_t why_len) { return flashinfer_load(why, why_len); }

static void flashinfer_library_info(variant_library *out)
{
    out->name = "FlashInfer";
    snprintf(out->requested, sizeof out->requested, "%s", flashinfer_library_requested());
    snprintf(out->version, sizeof out->version, "%s", flashinfer_version());
    snprintf(out->path, sizeof out->path, "%s", flashinfer_library_path());
}

static int efficient_impl_runnable(int impl, int cc) { return impl != EFFICIENT_IMPL_DEFAULT && cc >= 80; } /* both */
static int efficient_impl_used_on(int cc, const attn_problem *p) { return efficient_impl_used(p); }

const variant variants[] = {
    {.info = &variant_info_reference, .workspace_bytes = reference_workspace_bytes, .forward = reference_forward},
    {.info = &variant_info_naive, .workspace_bytes = naive_workspace_bytes, .forward = naive_forward},
    /* decomposed.h has one workspace function for both naive forms; the in-place one uses a
     * part of it (no masked copy), so the larger size is always enough. */
    {.info = &variant_info_naive_inplace, .workspace_bytes = naive_workspace_bytes, .forward = naive_inplace_forward},
    {.info = &variant_info_math, .workspace_bytes = math_workspace_bytes, .forward = math_forward, .prepare = math_prepare},
    {
        .info = &variant_info_efficient,
        .workspace_bytes = efficient_workspace_bytes,
        .forward = efficient_forward,
        .impl_runnable = efficient_impl_runnable,
        .impl_used = efficient_impl_used_on,
    },
    {
        .info = &variant_info_flash,
        .workspace_bytes = flash_workspace_bytes,
        .forward = flash_forward,
        .impl_runnable = flash_impl_runnable,
        .impl_used = flash_impl_used,
    },
    {
        .info = &variant_info_cudnn,
        .workspace_bytes = cudnn_sdpa_workspace_bytes,
        .forward = cudnn_sdpa_forward,
        .library_check = cudnn_sdpa_plan_check,
        .engine_desc = cudnn_sdpa_engine_desc,
        .library_ready = cudnn_ready,
        .library_info = cudnn_library_info,
    },
    {
        .info = &variant_info_flashinfer,
        .workspace_bytes = flashinfer_workspace_bytes,
        .forward = flashinfer_forward,
        .prepare = flashinfer_prepare,
        .library_check = flashinfer_library_check,
        .engine_desc = flashinfer_engine_desc,
        .library_ready = flashinfer_ready,
        .library_info = flashinfer_library_info,
        .impl_runnable = flashinfer_impl_runnable,
        .impl_used = flashinfer_impl_used,
    },
};

const size_t variants_count = sizeof variants / sizeof variants[0];

const variant *variant_find(const char *name)
{
    size_t i;
    if (!name) return NULL;
    for (i = 0; i < variants_count; i++)
        if (strcmp(variants[i].info->name, name) == 0) return &variants[i];
    return NULL;
}
