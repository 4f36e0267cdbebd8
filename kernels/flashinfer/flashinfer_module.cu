/* flashinfer_module.cu — the C interface of libattnd_flashinfer.so (flashinfer_abi.h): which
 * FlashInfer entry point a case takes, its workspace, its plan, its forward. Every call into
 * FlashInfer's templates happens inside a try block: FlashInfer reports errors by throwing
 * flashinfer::Error, and no exception may cross into attnd's C.
 *
 * What the Makefile tells this file (-D): ATTND_FI_VERSION and ATTND_FI_COMMIT, read from the
 * wheel's flashinfer/_build_meta.py; ATTND_FI_ARCHS ("sm_80 sm_90a"); ATTND_FI_HAVE_SM90 and
 * ATTND_FI_HAVE_SM80, 1 for each architecture whose files were compiled.
 */
#include <stdio.h>
#include <string.h>

#include <exception>
#include <mutex>

#include "kernels/flashinfer/flashinfer_module.h"

#ifndef ATTND_FI_VERSION
#error "ATTND_FI_VERSION comes from the Makefile (make flashinfer)"
#endif
#ifndef ATTND_FI_HAVE_SM90
#define ATTND_FI_HAVE_SM90 0
#endif
#ifndef ATTND_FI_HAVE_SM80
#define ATTND_FI_HAVE_SM80 0
#endif

namespace {

/* The last prepared plan (decode or ragged): prepare and the forwards of one job run on one
 * worker thread, but the lock keeps a stray caller from reading a half-written plan. */
std::mutex plan_lock;
attnd_fi_case planned_case;
void *planned_workspace;
attnd_fi_decode_plan planned;
attnd_fi_ragged_plan planned_ragged;
int have_plan;
char described[384];

void say(char *why, size_t why_len, const char *text)
{
    if (why && why_len) snprintf(why, why_len, "%s", text);
}

int same_case(const attnd_fi_case &a, const attnd_fi_case &b)
{
    return a.dtype == b.dtype && a.causal == b.causal && a.batch == b.batch && a.heads == b.heads &&
           a.kv_heads == b.kv_heads && a.seq_q == b.seq_q && a.seq_kv == b.seq_kv && a.head_dim == b.head_dim &&
           a.kv_len == b.kv_len && a.sm_scale == b.sm_scale && a.cc == b.cc && a.decode_kernel == b.decode_kernel &&
           a.ragged == b.ragged &&
           a.top_left == b.top_left && a.page_size == b.page_size && a.num_pages == b.num_pages &&
           a.total_q == b.total_q && a.total_kv == b.total_kv && a.cu_seqlens_q == b.cu_seqlens_q &&
           a.cu_seqlens_kv == b.cu_seqlens_kv && a.block_table == b.block_table && a.pages_per_seq == b.pages_per_seq;
}

int is_serving(const attnd_fi_case &c) { return c.ragged || c.page_size > 0; }

/* A decode's route, as the case's decode_kernel names it: the batch prefill over the pages
 * (what vLLM runs for every group, use_tensor_cores=True), or FlashInfer's CUDA-core decode,
 * which is compiled for some groups only; 0 with why for another group. */
int decode_route_of(const attnd_fi_case &c, char *why, size_t why_len)
{
    char text[320];
    if (c.decode_kernel != ATTND_FI_DECODE_CUDA_CORES) return ATTND_FI_ROUTE_DECODE_TC;
    if (attnd_fi_cuda_cores_group(c.heads / c.kv_heads)) return ATTND_FI_ROUTE_DECODE;
    snprintf(text, sizeof text, "FlashInfer's CUDA-core decode (impl cuda_cores) is compiled for 1, 2, 3, 4, 6, 8 "
             "and 16 query heads per K/V head, not %lld (heads %lld / kv_heads %lld); its tensor-core decode "
             "(impl tensor_cores, the default) runs any group", (long long)(c.heads / c.kv_heads),
             (long long)c.heads, (long long)c.kv_heads);
    say(why, why_len, text);
    return 0;
}

int is_decode_route(int route) { return route == ATTND_FI_ROUTE_DECODE || route == ATTND_FI_ROUTE_DECODE_TC; }

/* The routes whose forward needs prepare's plan. */
int is_planned_route(int route)
{
    return is_decode_route(route) || route == ATTND_FI_ROUTE_RAGGED_SM90 || route == ATTND_FI_ROUTE_RAGGED_SM80 ||
           route == ATTND_FI_ROUTE_PAGED_SM90;
}

/* Whether the module holds code for compute capability cc: an sm_90a cubin runs on 9.0 only,
 * an sm_80 cubin on every 8.x. */
int have_code_for(int cc)
{
    if (cc == 90) return ATTND_FI_HAVE_SM90;
    if (cc >= 80 && cc < 90) return ATTND_FI_HAVE_SM80;
    return 0;
}

/* A serving batch's route, or 0 with why: decode when every sequence has one query row
 * (over a paged cache through its block table, over a ragged one as pages of its tokens),
 * else the batch prefill over the ragged tensors; its per-sequence limits. */
int serving_route_of(const attnd_fi_case &c, char *why, size_t why_len)
{
    char text[320];
    int decode = 1, same_lengths = 1;

    if ((c.ragged && (!c.cu_seqlens_q || !c.cu_seqlens_kv)) || (c.page_size > 0 && !c.block_table)) {
        say(why, why_len, "FlashInfer's module plans a serving batch from its cu_seqlens and block table, which "
                          "this case lacks");
        return 0;
    }
    if (c.page_size > 0 && c.page_size * c.kv_heads * c.head_dim > UINT32_MAX) {
        say(why, why_len, "FlashInfer's paged_kv_t takes a 32-bit page stride: page_size*kv_heads*head_dim must "
                          "stay below 2^32");
        return 0;
    }
    for (int64_t b = 0; b < c.batch; b++) {
        const int64_t q = attnd_fi_qo_len(c, b), kv = attnd_fi_kv_len(c, b);
        if (c.causal && q > kv) {
            snprintf(text, sizeof text, "FlashInfer's causal mask is bottom-right aligned and needs each sequence's "
                     "queries <= its keys (sequence %lld: %lld > %lld)", (long long)b, (long long)q, (long long)kv);
            say(why, why_len, text);
            return 0;
        }
        if (q > 0 && attnd_fi_kv_seen(c, b) == 0) {
            snprintf(text, sizeof text, "sequence %lld has queries and no keys: FlashInfer's kernels define no "
                     "output for a row that sees no key", (long long)b);
            say(why, why_len, text);
            return 0;
        }
        decode = decode && q == 1;
        same_lengths = same_lengths && q == kv;
    }
    if (decode && c.heads * c.head_dim <= INT32_MAX) return decode_route_of(c, why, why_len);
    if (c.page_size > 0) {
        if (c.cc == 90) return ATTND_FI_ROUTE_PAGED_SM90;
        say(why, why_len, "flashinfer runs a paged batch of more than one query row a sequence on compute capability "
                          "9.0 only, by Hopper's BatchPrefillWithPagedKVCacheDispatched (what vLLM runs there); FA2's "
                          "paged prefill for 8.x is not wired in attnd's module");
        return 0;
    }
    if (c.cc == 90) return ATTND_FI_ROUTE_RAGGED_SM90;
    if (c.top_left && !same_lengths) {
        say(why, why_len, "FlashInfer's FA2 ragged prefill takes each sequence's keys as all of kv_indptr[b]..[b+1] "
                          "and a bottom-right causal mask: top-left causal needs equal query and key lengths in every "
                          "sequence before compute capability 9.0");
        return 0;
    }
    return ATTND_FI_ROUTE_RAGGED_SM80;
}

/* The route, or 0 with why. */
int case_route_of(const attnd_fi_case &c, char *why, size_t why_len)
{
    char text[320];
    const int64_t d = c.head_dim;

    if (c.dtype != 0 && c.dtype != 1) {
        say(why, why_len, "FlashInfer's module runs bf16 and fp16");
        return 0;
    }
    if (d != 64 && d != 128 && d != 256) {
        snprintf(text, sizeof text, "FlashInfer's module is built for head_dim 64, 128 and 256, not %lld", (long long)d);
        say(why, why_len, text);
        return 0;
    }
    if (c.batch < 1 || c.heads < 1 || c.kv_heads < 1 || c.seq_q < 1 || c.kv_len < 1 || c.kv_len > c.seq_kv ||
        c.heads % c.kv_heads != 0) {
        say(why, why_len, "FlashInfer's module needs batch, heads, seq_q, kv_len >= 1, kv_len <= seq_kv and kv_heads "
                          "dividing heads");
        return 0;
    }
    if (c.causal && c.seq_q > c.kv_len) {
        snprintf(text, sizeof text, "FlashInfer's causal mask is bottom-right aligned and needs seq_q <= kv_len (got %lld "
                 "> %lld)", (long long)c.seq_q, (long long)c.kv_len);
        say(why, why_len, text);
        return 0;
    }
    if (c.seq_q * d > UINT32_MAX || c.seq_kv * d > UINT32_MAX || c.seq_kv > INT32_MAX) {
        say(why, why_len, "FlashInfer's kernels take 32-bit head strides: seq_q*head_dim and seq_kv*head_dim must stay "
                          "below 2^32");
        return 0;
    }
    if (!have_code_for(c.cc)) {
        snprintf(text, sizeof text, "libattnd_flashinfer.so holds code for %s only, not for compute capability %d.%d "
                 "(make flashinfer FLASHINFER_GENCODE=...)", ATTND_FI_ARCHS, c.cc / 10, c.cc % 10);
        say(why, why_len, text);
        return 0;
    }
    if (is_serving(c)) return serving_route_of(c, why, why_len);
    /* Decode: one query row over the cache, in the paged view (page ids are int32 rows); a
     * speculative decode's few rows on Hopper: the paged prefill over the same view. */
    if (c.seq_q == 1 && c.batch * c.kv_heads * c.seq_kv <= INT32_MAX && c.heads * d <= INT32_MAX)
        return decode_route_of(c, why, why_len);
    if (c.cc == 90 && c.seq_q <= ATTND_FI_PAGED_ROWS && c.batch * c.kv_heads * c.seq_kv <= INT32_MAX)
        return ATTND_FI_ROUTE_PAGED_SM90;
    return c.cc == 90 ? ATTND_FI_ROUTE_PREFILL_SM90 : ATTND_FI_ROUTE_PREFILL_SM80;
}

/* case_route_of, and the CUDA-core decode only where a decode runs: it is asked for by name
 * (impl cuda_cores), so a case that takes another kernel is refused, not run by that one. */
int route_of(const attnd_fi_case &c, char *why, size_t why_len)
{
    int route;
    if (c.decode_kernel != ATTND_FI_DECODE_TENSOR_CORES && c.decode_kernel != ATTND_FI_DECODE_CUDA_CORES) {
        say(why, why_len, "attnd_fi_case.decode_kernel is neither ATTND_FI_DECODE_TENSOR_CORES nor _CUDA_CORES");
        return 0;
    }
    route = case_route_of(c, why, why_len);
    if (route && c.decode_kernel == ATTND_FI_DECODE_CUDA_CORES && route != ATTND_FI_ROUTE_DECODE) {
        say(why, why_len, "FlashInfer's CUDA-core decode (impl cuda_cores) runs decodes only: one query row in every "
                          "sequence, and a contiguous cache of fewer than 2^31 rows of keys (batch*kv_heads*seq_kv); "
                          "this case takes another of FlashInfer's kernels");
        return 0;
    }
    return route;
}

/* FlashInfer's launchers for c's head dim; NULL where the Makefile compiled none. */
typedef cudaError_t (*prefill_fn)(const attnd_fi_case &, const attnd_fi_tensors &, cudaStream_t);
typedef cudaError_t (*plan_fn)(const attnd_fi_case &, void *, cudaStream_t, attnd_fi_decode_plan *);
typedef cudaError_t (*run_fn)(const attnd_fi_case &, const attnd_fi_tensors &, const attnd_fi_decode_plan &,
                              cudaStream_t);

prefill_fn prefill_of(const attnd_fi_case &c, int route)
{
#if ATTND_FI_HAVE_SM90
    if (route == ATTND_FI_ROUTE_PREFILL_SM90)
        return c.head_dim == 64 ? attnd_fi_prefill_sm90_d64
               : c.head_dim == 128 ? attnd_fi_prefill_sm90_d128 : attnd_fi_prefill_sm90_d256;
#endif
#if ATTND_FI_HAVE_SM80
    if (route == ATTND_FI_ROUTE_PREFILL_SM80)
        return c.head_dim == 64 ? attnd_fi_prefill_sm80_d64
               : c.head_dim == 128 ? attnd_fi_prefill_sm80_d128 : attnd_fi_prefill_sm80_d256;
#endif
    (void)c;
    (void)route;
    return nullptr;
}

plan_fn plan_of(const attnd_fi_case &c)
{
    return c.head_dim == 64 ? attnd_fi_decode_plan_d64 : c.head_dim == 128 ? attnd_fi_decode_plan_d128 : attnd_fi_decode_plan_d256;
}

run_fn run_of(const attnd_fi_case &c)
{
    return c.head_dim == 64 ? attnd_fi_decode_run_d64 : c.head_dim == 128 ? attnd_fi_decode_run_d128 : attnd_fi_decode_run_d256;
}

typedef cudaError_t (*ragged_plan_fn)(const attnd_fi_case &, void *, cudaStream_t, attnd_fi_ragged_plan *);
typedef cudaError_t (*ragged_run_fn)(const attnd_fi_case &, const attnd_fi_tensors &, const attnd_fi_ragged_plan &,
                                     cudaStream_t);

/* The tensor-core decode: compiled for every architecture of the module, like the decode. */
ragged_plan_fn tc_plan_of(const attnd_fi_case &c)
{
    return c.head_dim == 64 ? attnd_fi_decode_tc_plan_d64
           : c.head_dim == 128 ? attnd_fi_decode_tc_plan_d128 : attnd_fi_decode_tc_plan_d256;
}

ragged_run_fn tc_run_of(const attnd_fi_case &c)
{
    return c.head_dim == 64 ? attnd_fi_decode_tc_run_d64
           : c.head_dim == 128 ? attnd_fi_decode_tc_run_d128 : attnd_fi_decode_tc_run_d256;
}

ragged_plan_fn ragged_plan_of(const attnd_fi_case &c, int route)
{
    if (route == ATTND_FI_ROUTE_DECODE_TC) return tc_plan_of(c);
#if ATTND_FI_HAVE_SM90
    if (route == ATTND_FI_ROUTE_PAGED_SM90)
        return c.head_dim == 64 ? attnd_fi_paged_sm90_plan_d64
               : c.head_dim == 128 ? attnd_fi_paged_sm90_plan_d128 : attnd_fi_paged_sm90_plan_d256;
    if (route == ATTND_FI_ROUTE_RAGGED_SM90)
        return c.head_dim == 64 ? attnd_fi_ragged_sm90_plan_d64
               : c.head_dim == 128 ? attnd_fi_ragged_sm90_plan_d128 : attnd_fi_ragged_sm90_plan_d256;
#endif
#if ATTND_FI_HAVE_SM80
    if (route == ATTND_FI_ROUTE_RAGGED_SM80)
        return c.head_dim == 64 ? attnd_fi_ragged_sm80_plan_d64
               : c.head_dim == 128 ? attnd_fi_ragged_sm80_plan_d128 : attnd_fi_ragged_sm80_plan_d256;
#endif
    (void)c;
    (void)route;
    return nullptr;
}

ragged_run_fn ragged_run_of(const attnd_fi_case &c, int route)
{
    if (route == ATTND_FI_ROUTE_DECODE_TC) return tc_run_of(c);
#if ATTND_FI_HAVE_SM90
    if (route == ATTND_FI_ROUTE_PAGED_SM90)
        return c.head_dim == 64 ? attnd_fi_paged_sm90_run_d64
               : c.head_dim == 128 ? attnd_fi_paged_sm90_run_d128 : attnd_fi_paged_sm90_run_d256;
    if (route == ATTND_FI_ROUTE_RAGGED_SM90)
        return c.head_dim == 64 ? attnd_fi_ragged_sm90_run_d64
               : c.head_dim == 128 ? attnd_fi_ragged_sm90_run_d128 : attnd_fi_ragged_sm90_run_d256;
#endif
#if ATTND_FI_HAVE_SM80
    if (route == ATTND_FI_ROUTE_RAGGED_SM80)
        return c.head_dim == 64 ? attnd_fi_ragged_sm80_run_d64
               : c.head_dim == 128 ? attnd_fi_ragged_sm80_run_d128 : attnd_fi_ragged_sm80_run_d256;
#endif
    (void)c;
    (void)route;
    return nullptr;
}

/* "call: FlashInfer's message" into why; -1. */
int failed(char *why, size_t why_len, const char *call, const char *message)
{
    if (why && why_len) snprintf(why, why_len, "%s: %s", call, message);
    return -1;
}

int cuda_failed(char *why, size_t why_len, const char *call, cudaError_t e)
{
    return failed(why, why_len, call, cudaGetErrorString(e));
}

} // namespace

void *attnd_fi_pinned_buffer(size_t bytes, cudaError_t *e)
{
    static void *buf;
    static size_t have;
    *e = cudaSuccess;
    if (bytes <= have) return buf;
    if (buf) cudaFreeHost(buf);
    buf = nullptr;
    have = 0;
    *e = cudaMallocHost(&buf, bytes);
    if (*e != cudaSuccess) return nullptr;
    have = bytes;
    return buf;
}

extern "C" {

int attnd_fi_abi(void) { return ATTND_FI_ABI; }

const char *attnd_fi_version(void) { return ATTND_FI_VERSION; }

const char *attnd_fi_build(void)
{
    return "flashinfer-python " ATTND_FI_VERSION " (git " ATTND_FI_COMMIT "), " ATTND_FI_ARCHS;
}

int attnd_fi_route(const attnd_fi_case *c, char *why, size_t why_len)
{
    if (!c) return 0;
    return route_of(*c, why, why_len);
}

size_t attnd_fi_workspace_bytes(const attnd_fi_case *c)
{
    if (!c) return 0;
    switch (route_of(*c, NULL, 0)) {
    case ATTND_FI_ROUTE_DECODE:
        return attnd_fi_decode_layout_of(c).total;
    case ATTND_FI_ROUTE_DECODE_TC:
        return attnd_fi_decode_tc_layout_of(c).total;
    case ATTND_FI_ROUTE_RAGGED_SM90:
        return attnd_fi_ragged_layout_of(c, 1).total;
    case ATTND_FI_ROUTE_PAGED_SM90:
        return attnd_fi_paged_prefill_layout_of(c).total;
    case ATTND_FI_ROUTE_RAGGED_SM80:
        return attnd_fi_ragged_layout_of(c, 0).total;
    case ATTND_FI_ROUTE_PREFILL_SM80: /* the FA2 output, token-major, before the transpose */
        return attnd_fi_align256((size_t)(c->batch * c->heads * c->seq_q * c->head_dim) * 2);
    default:
        return 0;
    }
}

int attnd_fi_prepare(const attnd_fi_case *c, void *workspace, size_t workspace_bytes, void *stream, char *why,
                     size_t why_len)
{
    char reason[320];
    attnd_fi_decode_plan p;
    attnd_fi_ragged_plan rp;
    const char *call = "DecodePlan";
    cudaError_t e;
    int route;

    if (!c || (route = route_of(*c, reason, sizeof reason)) == 0)
        return failed(why, why_len, "attnd_fi_prepare", c ? reason : "no case");
    if (workspace_bytes < attnd_fi_workspace_bytes(c))
        return failed(why, why_len, "attnd_fi_prepare", "the workspace is smaller than attnd_fi_workspace_bytes");
    if (route == ATTND_FI_ROUTE_PREFILL_SM90 || route == ATTND_FI_ROUTE_PREFILL_SM80) return 0; /* plans nothing */
    memset(&p, 0, sizeof p);
    memset(&rp, 0, sizeof rp);
    try {
        if (route == ATTND_FI_ROUTE_DECODE) {
            e = plan_of(*c)(*c, workspace, (cudaStream_t)stream, &p);
        } else {
            ragged_plan_fn fn = ragged_plan_of(*c, route);
            call = route == ATTND_FI_ROUTE_RAGGED_SM90 || route == ATTND_FI_ROUTE_PAGED_SM90
                       ? "PrefillSM90Plan"
                       : "PrefillPlan"; /* the tensor-core decode's too */
            if (!fn) return failed(why, why_len, call, "not compiled into this module");
            e = fn(*c, workspace, (cudaStream_t)stream, &rp);
        }
    } catch (const std::exception &ex) {
        return failed(why, why_len, call, ex.what());
    }
    if (e != cudaSuccess) return cuda_failed(why, why_len, call, e);
    std::lock_guard<std::mutex> hold(plan_lock);
    planned_case = *c;
    planned_workspace = workspace;
    planned = p;
    planned_ragged = rp;
    have_plan = 1;
    return 0;
}

int attnd_fi_forward(const attnd_fi_case *c, const void *q, const void *k, const void *v, void *out, void *workspace,
                     void *stream, char *why, size_t why_len)
{
    const attnd_fi_tensors t = {q, k, v, out, workspace};
    char reason[320];
    const char *entry = "SinglePrefillWithKVCacheDispatched";
    cudaError_t e;
    int route;

    if (!c || (route = route_of(*c, reason, sizeof reason)) == 0)
        return failed(why, why_len, "attnd_fi_forward", c ? reason : "no case");
    try {
        if (is_planned_route(route)) {
            attnd_fi_decode_plan p;
            attnd_fi_ragged_plan rp;
            {
                std::lock_guard<std::mutex> hold(plan_lock);
                if (!have_plan || planned_workspace != workspace || !same_case(planned_case, *c))
                    return failed(why, why_len, "attnd_fi_forward",
                                  "no plan for this case and workspace: call attnd_fi_prepare first");
                p = planned;
                rp = planned_ragged;
            }
            if (route == ATTND_FI_ROUTE_DECODE) {
                entry = "BatchDecodeWithPagedKVCacheDispatched";
                e = run_of(*c)(*c, t, p, (cudaStream_t)stream);
            } else {
                ragged_run_fn fn = ragged_run_of(*c, route);
                entry = route == ATTND_FI_ROUTE_DECODE_TC || route == ATTND_FI_ROUTE_PAGED_SM90
                            ? "BatchPrefillWithPagedKVCacheDispatched"
                            : "BatchPrefillWithRaggedKVCacheDispatched";
                if (!fn) return failed(why, why_len, entry, "not compiled into this module");
                e = fn(*c, t, rp, (cudaStream_t)stream);
            }
        } else {
            prefill_fn fn = prefill_of(*c, route);
            if (!fn) return failed(why, why_len, entry, "not compiled into this module");
            e = fn(*c, t, (cudaStream_t)stream);
        }
    } catch (const std::exception &ex) {
        return failed(why, why_len, entry, ex.what());
    }
    if (e != cudaSuccess) return cuda_failed(why, why_len, entry, e);
    return 0;
}

const char *attnd_fi_describe(const attnd_fi_case *c)
{
    std::lock_guard<std::mutex> hold(plan_lock);
    switch (c ? route_of(*c, NULL, 0) : 0) {
    case ATTND_FI_ROUTE_DECODE:
        if (have_plan && same_case(planned_case, *c))
            snprintf(described, sizeof described,
                     "decode.cuh BatchDecodeWithPagedKVCacheDispatched (FlashInfer %s): %s pages of %lld keys%s, "
                     "%lld CTAs per kv head (sequences x chunks)%s", ATTND_FI_VERSION, is_serving(*c) ? "NHD" : "HND",
                     (long long)(c->page_size > 0 ? c->page_size : ATTND_FI_DECODE_PAGE),
                     c->page_size > 0 ? " through the block table" : c->ragged ? " over the ragged cache" : "",
                     (long long)planned.chunks,
                     planned.split ? ", split-KV with VariableLengthMergeStates" : ", no split");
        else
            snprintf(described, sizeof described, "decode.cuh BatchDecodeWithPagedKVCacheDispatched (FlashInfer %s)",
                     ATTND_FI_VERSION);
        break;
    case ATTND_FI_ROUTE_DECODE_TC:
        if (have_plan && same_case(planned_case, *c))
            snprintf(described, sizeof described,
                     "prefill.cuh BatchPrefillWithPagedKVCacheDispatched, FA2 (FlashInfer %s) after PrefillPlan: "
                     "tensor-core decode (%lld query heads per kv head, vLLM's use_tensor_cores=True), %s pages of "
                     "%lld keys%s, %lld CTAs per kv head (query tiles x chunks)%s", ATTND_FI_VERSION,
                     (long long)(c->heads / c->kv_heads), is_serving(*c) ? "NHD" : "HND",
                     (long long)(c->page_size > 0 ? c->page_size : ATTND_FI_DECODE_PAGE),
                     c->page_size > 0 ? " through the block table" : c->ragged ? " over the ragged cache" : "",
                     (long long)planned_ragged.ctas,
                     planned_ragged.split ? ", split-KV with VariableLengthMergeStates" : ", no split");
        else
            snprintf(described, sizeof described, "prefill.cuh BatchPrefillWithPagedKVCacheDispatched, FA2 (FlashInfer "
                     "%s): tensor-core decode", ATTND_FI_VERSION);
        break;
    case ATTND_FI_ROUTE_PREFILL_SM90:
        snprintf(described, sizeof described, "hopper/prefill_sm90.cuh SinglePrefillWithKVCacheDispatched (FlashInfer "
                 "%s), %lld call(s)", ATTND_FI_VERSION, (long long)c->batch);
        break;
    case ATTND_FI_ROUTE_RAGGED_SM90:
        snprintf(described, sizeof described, "hopper/prefill_sm90.cuh BatchPrefillWithRaggedKVCacheDispatched "
                 "(FlashInfer %s) after PrefillSM90Plan: one launch for %lld sequences", ATTND_FI_VERSION,
                 (long long)c->batch);
        break;
    case ATTND_FI_ROUTE_PAGED_SM90:
        snprintf(described, sizeof described, "hopper/prefill_sm90.cuh BatchPrefillWithPagedKVCacheDispatched "
                 "(FlashInfer %s) after PrefillSM90Plan: one launch for %lld sequences, %s pages of %lld keys%s%s",
                 ATTND_FI_VERSION, (long long)c->batch, c->page_size > 0 ? "NHD" : "HND",
                 (long long)(c->page_size > 0 ? c->page_size : ATTND_FI_DECODE_PAGE),
                 c->page_size > 0 ? " through the block table" : " over the contiguous cache",
                 c->ragged ? "" : "; q and out through token-major copies (two transposes)");
        break;
    case ATTND_FI_ROUTE_RAGGED_SM80:
        snprintf(described, sizeof described, "prefill.cuh BatchPrefillWithRaggedKVCacheDispatched, FA2 (FlashInfer "
                 "%s) after PrefillPlan: one launch for %lld sequences", ATTND_FI_VERSION, (long long)c->batch);
        break;
    case ATTND_FI_ROUTE_PREFILL_SM80:
        snprintf(described, sizeof described, "prefill.cuh SinglePrefillWithKVCacheDispatched, FA2 (FlashInfer %s), "
                 "%lld call(s) and a transpose", ATTND_FI_VERSION, (long long)c->batch);
        break;
    default:
        described[0] = '\0';
    }
    return described;
}

} /* extern "C" */
