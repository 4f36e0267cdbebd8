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

/* The last prepared decode plan: prepare and the forwards of one job run on one worker
 * thread, but the lock keeps a stray caller from reading a half-written plan. */
std::mutex plan_lock;
attnd_fi_case planned_case;
void *planned_workspace;
attnd_fi_decode_plan planned;
int have_plan;
char described[256];

void say(char *why, size_t why_len, const char *text)
{
    if (why && why_len) snprintf(why, why_len, "%s", text);
}

int same_case(const attnd_fi_case &a, const attnd_fi_case &b)
{
    return a.dtype == b.dtype && a.causal == b.causal && a.batch == b.batch && a.heads == b.heads &&
           a.kv_heads == b.kv_heads && a.seq_q == b.seq_q && a.seq_kv == b.seq_kv && a.head_dim == b.head_dim &&
           a.kv_len == b.kv_len && a.sm_scale == b.sm_scale && a.cc == b.cc;
}

/* FlashInfer's CUDA-core decode kernel is compiled for these query heads per K/V head
 * (utils.cuh DISPATCH_GQA_GROUP_SIZE); others throw "Unsupported group_size". */
int decode_group_ok(int64_t g) { return g == 1 || g == 2 || g == 3 || g == 4 || g == 6 || g == 8 || g == 16; }

/* Whether the module holds code for compute capability cc: an sm_90a cubin runs on 9.0 only,
 * an sm_80 cubin on every 8.x. */
int have_code_for(int cc)
{
    if (cc == 90) return ATTND_FI_HAVE_SM90;
    if (cc >= 80 && cc < 90) return ATTND_FI_HAVE_SM80;
    return 0;
}

/* The route, or 0 with why. */
int route_of(const attnd_fi_case &c, char *why, size_t why_len)
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
    /* Decode: one query row over the cache, in the paged view (page ids are int32 rows). */
    if (c.seq_q == 1 && decode_group_ok(c.heads / c.kv_heads) && c.batch * c.kv_heads * c.seq_kv <= INT32_MAX &&
        c.heads * d <= INT32_MAX)
        return ATTND_FI_ROUTE_DECODE;
    return c.cc == 90 ? ATTND_FI_ROUTE_PREFILL_SM90 : ATTND_FI_ROUTE_PREFILL_SM80;
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
    cudaError_t e;

    if (!c || route_of(*c, reason, sizeof reason) == 0) return failed(why, why_len, "attnd_fi_prepare", c ? reason : "no case");
    if (workspace_bytes < attnd_fi_workspace_bytes(c))
        return failed(why, why_len, "attnd_fi_prepare", "the workspace is smaller than attnd_fi_workspace_bytes");
    if (route_of(*c, NULL, 0) != ATTND_FI_ROUTE_DECODE) return 0; /* prefill plans nothing */
    memset(&p, 0, sizeof p);
    try {
        e = plan_of(*c)(*c, workspace, (cudaStream_t)stream, &p);
    } catch (const std::exception &ex) {
        return failed(why, why_len, "DecodePlan", ex.what());
    }
    if (e != cudaSuccess) return cuda_failed(why, why_len, "DecodePlan", e);
    std::lock_guard<std::mutex> hold(plan_lock);
    planned_case = *c;
    planned_workspace = workspace;
    planned = p;
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
        if (route == ATTND_FI_ROUTE_DECODE) {
            attnd_fi_decode_plan p;
            {
                std::lock_guard<std::mutex> hold(plan_lock);
                if (!have_plan || planned_workspace != workspace || !same_case(planned_case, *c))
                    return failed(why, why_len, "attnd_fi_forward",
                                  "no DecodePlan for this case and workspace: call attnd_fi_prepare first");
                p = planned;
            }
            entry = "BatchDecodeWithPagedKVCacheDispatched";
            e = run_of(*c)(*c, t, p, (cudaStream_t)stream);
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
                     "decode.cuh BatchDecodeWithPagedKVCacheDispatched (FlashInfer %s): HND pages of %d keys, %lld "
                     "CTAs per kv head (sequences x chunks)%s", ATTND_FI_VERSION, ATTND_FI_DECODE_PAGE,
                     (long long)planned.chunks,
                     planned.split ? ", split-KV with VariableLengthMergeStates" : ", no split");
        else
            snprintf(described, sizeof described, "decode.cuh BatchDecodeWithPagedKVCacheDispatched (FlashInfer %s)",
                     ATTND_FI_VERSION);
        break;
    case ATTND_FI_ROUTE_PREFILL_SM90:
        snprintf(described, sizeof described, "hopper/prefill_sm90.cuh SinglePrefillWithKVCacheDispatched (FlashInfer "
                 "%s), %lld call(s)", ATTND_FI_VERSION, (long long)c->batch);
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
