/* flashinfer_attn.c — the `flashinfer` variant (flashinfer_attn.h): an attnd problem as the
 * module's case, and the variants.h hooks that hand it over. Everything FlashInfer does is in
 * the module (kernels/flashinfer/); this file only maps and reports.
 */
#include "kernels/flashinfer_attn.h"

#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels/flashinfer_loader.h"

/* Compute capability of the current CUDA device; 0 when there is none. */
static int flashinfer_current_cc(void)
{
    int device = -1, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major * 10 + minor;
}

/* p as FlashInfer's problem: its causal mask is bottom-right; top-left causal is the same mask
 * over the first seq_q keys (row i sees keys 0..i either way), which is all of them a
 * top-left row may see. impl names the decode kernel (tensor cores when not given). A serving
 * batch hands over its host arrays (p->seqs, built before the worker asks) and leaves the cut
 * per sequence to the module (top_left). */
static attnd_fi_case flashinfer_case(const attn_problem *p, int cc)
{
    attnd_fi_case c;
    memset(&c, 0, sizeof c);
    c.dtype = (int)p->dtype;
    c.causal = p->mask != ATTN_MASK_NONE;
    c.batch = p->batch;
    c.heads = p->heads;
    c.kv_heads = attn_kv_heads(p);
    c.seq_q = p->seq_q;
    c.seq_kv = p->seq_kv;
    c.head_dim = p->head_dim;
    c.kv_len = p->mask == ATTN_MASK_CAUSAL && p->seq_q < p->seq_kv ? p->seq_q : p->seq_kv;
    c.sm_scale = p->scale;
    c.cc = cc;
    c.decode_kernel = p->impl == FLASHINFER_IMPL_CUDA_CORES ? ATTND_FI_DECODE_CUDA_CORES : ATTND_FI_DECODE_TENSOR_CORES;
    if (p->ragged || p->page_size > 0) {
        c.kv_len = p->seq_kv;
        c.ragged = p->ragged != 0;
        c.top_left = p->mask == ATTN_MASK_CAUSAL;
        c.page_size = p->page_size, c.num_pages = p->num_pages;
        c.total_q = p->total_q, c.total_kv = p->total_kv;
        if (p->seqs) {
            c.cu_seqlens_q = p->seqs->cu_seqlens_q, c.cu_seqlens_kv = p->seqs->cu_seqlens_kv;
            c.block_table = p->seqs->block_table, c.pages_per_seq = p->seqs->pages_per_seq;
        }
    }
    return c;
}

size_t flashinfer_workspace_bytes(const attn_problem *p)
{
    const flashinfer_api *api = flashinfer_api_get();
    attnd_fi_case c;
    if (!api) return 0;
    c = flashinfer_case(p, flashinfer_current_cc());
    return api->workspace_bytes(&c);
}

int flashinfer_library_check(const attn_problem *p, char *why, size_t why_len)
{
    const flashinfer_api *api;
    attnd_fi_case c;
    int cc;

    if (flashinfer_load(why, why_len) != 0) return -1; /* the variant is unavailable, not the problem */
    api = flashinfer_api_get();
    cc = flashinfer_current_cc();
    if (cc == 0) {
        snprintf(why, why_len, "flashinfer needs a CUDA device");
        return -1;
    }
    c = flashinfer_case(p, cc);
    return api->route(&c, why, why_len) > 0 ? 0 : 1;
}

int flashinfer_prepare(exec_context *ctx, const attn_problem *p, void *workspace)
{
    const flashinfer_api *api = flashinfer_api_get();
    attnd_fi_case c = flashinfer_case(p, ctx->cc);
    char why[512];

    if (!api) return exec_fail(ctx, __FILE__, __LINE__, "flashinfer_load", "libattnd_flashinfer.so is not loaded");
    if (api->prepare(&c, workspace, api->workspace_bytes(&c), (void *)ctx->stream, why, sizeof why) != 0)
        return exec_fail(ctx, __FILE__, __LINE__, "attnd_fi_prepare", why);
    return 0;
}

int flashinfer_forward(exec_context *ctx, const attn_problem *p, const attn_tensors *t, void *workspace)
{
    const flashinfer_api *api = flashinfer_api_get();
    attnd_fi_case c = flashinfer_case(p, ctx->cc);
    char why[512];

    if (!api) return exec_fail(ctx, __FILE__, __LINE__, "flashinfer_load", "libattnd_flashinfer.so is not loaded");
    if (api->forward(&c, t->q, t->k, t->v, t->out, workspace, (void *)ctx->stream, why, sizeof why) != 0)
        return exec_fail(ctx, __FILE__, __LINE__, "attnd_fi_forward", why);
    return 0;
}

const char *flashinfer_engine_desc(const attn_problem *p)
{
    const flashinfer_api *api = flashinfer_api_get();
    attnd_fi_case c;
    const char *d;
    if (!api) return NULL;
    c = flashinfer_case(p, flashinfer_current_cc());
    d = api->describe(&c);
    return d && d[0] ? d : NULL;
}

int flashinfer_impl_runnable(int impl, int cc)
{
    return (impl == FLASHINFER_IMPL_TENSOR_CORES || impl == FLASHINFER_IMPL_CUDA_CORES) && cc >= 80;
}

int flashinfer_impl_used(int cc, const attn_problem *p)
{
    const flashinfer_api *api = flashinfer_api_get();
    attnd_fi_case c;
    if (!api) return ATTN_IMPL_DEFAULT;
    c = flashinfer_case(p, cc);
    switch (api->route(&c, NULL, 0)) {
    case ATTND_FI_ROUTE_DECODE_TC: return FLASHINFER_IMPL_TENSOR_CORES;
    case ATTND_FI_ROUTE_DECODE: return FLASHINFER_IMPL_CUDA_CORES;
    default: return ATTN_IMPL_DEFAULT;
    }
}
