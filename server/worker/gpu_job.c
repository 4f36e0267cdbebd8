/* gpu_job.c — one job on one GPU, inside a worker process (gpu_job.h).
 *
 * The worker owns everything long-lived: the CUDA context, one non-blocking stream, the
 * cuBLAS handle and its workspace, the CUPTI subscription, NVML, and the L2 flush buffer.
 * A job allocates its own tensors and frees them on every path (a worker lives for many
 * jobs: a leak would end it with "out of memory" hours later); the small blocks go back to
 * the worker's idle list (server/worker/memory/), not to the driver.
 *
 * Order inside a job, and why:
 *   refuse early (variant, arch, memory) → 4xx, nothing allocated, nothing ran;
 *   a serving batch's layout on the host (cu_seqlens, block table: as the cpu device builds
 *   it), then its device copies;
 *   allocate, generate the inputs from the seed on the GPU (a paged cache as the cpu device
 *   makes it, byte for byte);
 *   time (measure.c: warm-up, events, stopping rule);
 *   poison the output with 0xFF bytes (NaN in bf16, fp16 and fp32) and run one more
 *   forward, profiled or plain: an element the variant never writes shows up as NaN in the
 *   summary instead of a stale value from the timed forwards;
 *   summarise that output on the GPU; verify (cpu fp64 reference through the front when
 *   the problem is small enough, else the fp32 math path on the GPU).
 */
#include "server/worker/gpu_job.h"


#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#include "common/attn.h"
#include "kernels/cudnn/cudnn_loader.h"
#include "kernels/cudnn/cudnn_sdpa.h"
#include "kernels/decomposed.h"
#include "kernels/exec_context.h"
#include "kernels/flashinfer_loader.h"
#include "kernels/inputs.h"
#include "kernels/seq_layout.h"
#include "kernels/variants.h"
#include "server/worker/clocks.h"
#include "server/worker/memory/device_memory.h"
#include "common/ipc.h"
#include "common/log.h"
#include "server/worker/measure.h"
#include "server/worker/output_stats.h"
#include "server/worker/profile.h"
#include "server/worker/profile_trace.h"
#include "server/worker/roofline.h"
#include "server/worker/tensors/tensors.h"
#include "server/worker/variants_report.h"
#include "server/worker/json_fields.h"

#define GPU_CUBLAS_WORKSPACE_BYTES ((size_t)32 << 20)
#define GIB (1024.0 * 1024.0 * 1024.0)

struct gpu_worker {
    exec_context ctx;
    struct cudaDeviceProp prop;
    void *d_flush;        /* L2 flush buffer for cache=cold, 2 × L2 bytes */
    size_t flush_bytes;
    int profile_ok;       /* CUPTI subscribed; else profile requests fail with profile_error */
    double price_per_hour; /* settings.price_per_hour; 0: not reported */
    char currency[4];
    char profile_error[512];
};

/* ------------------------------------------------------------ open / close ------------ */

/* "perf" with the roofline of this GPU at the SM clock measured while timing, and "energy". */
static int gpu_add_perf(gpu_worker *w, cJSON *res, const attn_problem *p, const timing_stats *ts)
{
    roofline_peak peak;
    cJSON *perf = measure_stats_perf_json(p, ts->median_us), *energy;

    roofline_peak_of(w->prop.major, w->prop.minor, w->prop.multiProcessorCount, ts->sm_clock_max_mhz, p->dtype,
                     clocks_mem_max_mhz(), (int)clocks_bus_bits(), &peak);
    if (!perf || roofline_add_to_perf(perf, &peak, NULL) != 0 || !cJSON_AddItemToObject(res, "perf", perf)) {
        cJSON_Delete(perf);
        return -1;
    }
    energy = measure_stats_energy_json(ts, attn_flops(p), w->price_per_hour, w->currency);
    return energy && cJSON_AddItemToObject(res, "energy", energy) ? 0 : (cJSON_Delete(energy), -1);
}

static int gpu_open_inner(gpu_worker *w, int device, const settings *s)
{
    exec_context *ctx = &w->ctx;

    CUDA_TRY(ctx, cudaSetDevice(device));
    CUDA_TRY(ctx, cudaFree(0)); /* creates the primary context now, not inside the first job */
    CUDA_TRY(ctx, cudaGetDeviceProperties(&w->prop, device));
    ctx->cc = w->prop.major * 10 + w->prop.minor;
    ctx->sm_count = w->prop.multiProcessorCount;
    ctx->l2_bytes = (size_t)w->prop.l2CacheSize;
    ctx->smem_optin_bytes = w->prop.sharedMemPerBlockOptin;
    CUDA_TRY(ctx, cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));

    /* Before any NVTX call (cuBLAS makes some): CUPTI sets up NVTX injection here. */
    if (!s->cupti) { /* host-cost studies: CUPTI never loaded */
        snprintf(w->profile_error, sizeof w->profile_error, "CUPTI is off (setting cupti=false)");
    } else if (profile_init(ctx, s->nvtx_to_cupti) == 0) {
        w->profile_ok = 1;
    } else {
        snprintf(w->profile_error, sizeof w->profile_error, "%s", ctx->error);
        log_warn("CUPTI unavailable, profile=true runs will fail: %s", w->profile_error);
        exec_clear_error(ctx);
    }
    if (clocks_open(device) != 0) log_info("NVML unavailable: SM clocks are reported as 0");

    CUBLAS_TRY(ctx, cublasCreate(&ctx->cublas));
    CUBLAS_TRY(ctx, cublasSetStream(ctx->cublas, ctx->stream));
    /* cuBLAS given its own workspace never allocates, so forwards are graph-capturable. */
    CUDA_TRY(ctx, cudaMalloc(&ctx->d_cublas_workspace, GPU_CUBLAS_WORKSPACE_BYTES));
    ctx->cublas_workspace_bytes = GPU_CUBLAS_WORKSPACE_BYTES;
    CUBLAS_TRY(ctx, cublasSetWorkspace(ctx->cublas, ctx->d_cublas_workspace, ctx->cublas_workspace_bytes));
    CUBLAS_TRY(ctx, cublasSetMathMode(ctx->cublas, CUBLAS_DEFAULT_MATH)); /* no TF32: as PyTorch's default */

    w->flush_bytes = 2 * ctx->l2_bytes;
    if (w->flush_bytes == 0) w->flush_bytes = (size_t)64 << 20;
    CUDA_TRY(ctx, cudaMalloc(&w->d_flush, w->flush_bytes));
    return 0;
}

gpu_worker *gpu_worker_open(int device, const settings *s, char *err, size_t err_len)
{
    gpu_worker *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    w->ctx.device = device;
    if (settings_price(s, &w->price_per_hour, w->currency) != 0) w->price_per_hour = 0.0;
    if (gpu_open_inner(w, device, s) != 0) {
        snprintf(err, err_len, "cuda:%d: %s", device, w->ctx.error);
        gpu_worker_close(w);
        return NULL;
    }
    return w;
}

/* Teardown failures are only logged: nothing can be done about them, and the process is
 * usually about to exit. */
#define GPU_CLOSE_CHECK(call)                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) log_warn("%s failed at %s:%d: %s", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
    } while (0)

void gpu_worker_close(gpu_worker *w)
{
    if (!w) return;
    cudnn_sdpa_release(); /* its plans and handle belong to this device's context */
    device_memory_release();
    if (w->ctx.cublas) {
        cublasStatus_t s = cublasDestroy(w->ctx.cublas);
        if (s != CUBLAS_STATUS_SUCCESS) log_warn("cublasDestroy failed: %s", exec_cublas_status_name(s));
    }
    if (w->ctx.d_cublas_workspace) GPU_CLOSE_CHECK(cudaFree(w->ctx.d_cublas_workspace));
    if (w->d_flush) GPU_CLOSE_CHECK(cudaFree(w->d_flush));
    if (w->ctx.stream) GPU_CLOSE_CHECK(cudaStreamDestroy(w->ctx.stream));
    free(w);
}

int gpu_worker_cc(const gpu_worker *w) { return w->ctx.cc; }

/* ------------------------------------------------------------ device object ----------- */

/* "13.0" from CUDA's 13000 encoding. */
static void gpu_version_text(int v, char *out, size_t len) { snprintf(out, len, "%d.%d", v / 1000, (v % 1000) / 10); }

/* cuDNN's version when its library loads here ("9.19.0"), else "" (cuDNN is optional). */
static void gpu_cudnn_version(char *out, size_t len)
{
    char why[256];
    out[0] = '\0';
    if (cudnn_load(why, sizeof why) == 0) cudnn_version_string(out, len);
}

/* FlashInfer's version when attnd's module loads here ("0.7.4"), else "" (it is optional). */
static void gpu_flashinfer_version(char *out, size_t len)
{
    char why[512];
    out[0] = '\0';
    if (flashinfer_load(why, sizeof why) == 0) snprintf(out, len, "%s", flashinfer_version());
}

/* "library": {"name", "requested", "version", "path"} of what v loaded in this worker (the
 * cuDNN that made the numbers), as GET /v1/variants shows it. */
static void gpu_add_library(cJSON *res, const variant *v)
{
    variant_library lib;
    cJSON *o = cJSON_AddObjectToObject(res, "library");

    if (!o) return;
    memset(&lib, 0, sizeof lib);
    v->library_info(&lib);
    cJSON_AddStringToObject(o, "name", lib.name ? lib.name : "");
    cJSON_AddStringToObject(o, "requested", lib.requested);
    json_add_string_or_null(o, "version", lib.version);
    json_add_string_or_null(o, "path", lib.path);
}

cJSON *gpu_worker_device_json(gpu_worker *w)
{
    cJSON *o = cJSON_CreateObject();
    char buf[64];
    size_t free_b = 0, total_b = 0;
    int v = 0, major = 0, minor = 0, patch = 0, khz = 0;
    cudaError_t ce;
    if (!o) return NULL;

    snprintf(buf, sizeof buf, "cuda:%d", w->ctx.device);
    cJSON_AddStringToObject(o, "id", buf);
    cJSON_AddStringToObject(o, "name", w->prop.name);
    snprintf(buf, sizeof buf, "%d.%d", w->prop.major, w->prop.minor);
    cJSON_AddStringToObject(o, "compute_capability", buf);
    cJSON_AddNumberToObject(o, "sms", w->prop.multiProcessorCount);
    cJSON_AddNumberToObject(o, "memory_total_bytes", (double)w->prop.totalGlobalMem);
    ce = (cudaError_t)device_memory_free_bytes(&free_b, &total_b); /* with the blocks kept idle */
    if (ce == cudaSuccess) cJSON_AddNumberToObject(o, "memory_free_bytes", (double)free_b);
    else {
        log_warn("cudaMemGetInfo failed at %s:%d: %s", __FILE__, __LINE__, cudaGetErrorString(ce));
        cJSON_AddNullToObject(o, "memory_free_bytes");
    }
    cJSON_AddNumberToObject(o, "l2_bytes", (double)w->prop.l2CacheSize);

    if (clocks_sm_max_mhz() > 0) cJSON_AddNumberToObject(o, "sm_clock_max_mhz", clocks_sm_max_mhz());
    else if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, w->ctx.device) == cudaSuccess && khz > 0)
        cJSON_AddNumberToObject(o, "sm_clock_max_mhz", khz / 1000);
    else cJSON_AddNullToObject(o, "sm_clock_max_mhz");
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, w->ctx.device) == cudaSuccess && khz > 0)
        cJSON_AddNumberToObject(o, "mem_clock_max_mhz", khz / 1000);
    else cJSON_AddNullToObject(o, "mem_clock_max_mhz");

    json_add_string_or_null(o, "driver", clocks_driver_version());
    buf[0] = '\0';
    if (cudaDriverGetVersion(&v) == cudaSuccess) gpu_version_text(v, buf, sizeof buf);
    json_add_string_or_null(o, "cuda_driver", buf);
    buf[0] = '\0';
    if (cudaRuntimeGetVersion(&v) == cudaSuccess) gpu_version_text(v, buf, sizeof buf);
    json_add_string_or_null(o, "cuda_runtime", buf);
    buf[0] = '\0';
    if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
        snprintf(buf, sizeof buf, "%d.%d.%d", major, minor, patch);
    json_add_string_or_null(o, "cublas", buf);
    gpu_cudnn_version(buf, sizeof buf);
    json_add_string_or_null(o, "cudnn", buf);
    gpu_flashinfer_version(buf, sizeof buf);
    json_add_string_or_null(o, "flashinfer", buf);
    return o;
}

int gpu_device_count(char *err, size_t err_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cudaGetDeviceCount: %s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
        return 0;
    }
    if (n == 0) snprintf(err, err_len, "no CUDA device");
    return n;
}

/* ------------------------------------------------------------ one job ----------------- */

typedef struct gpu_job {
    const variant *v;
    const attn_problem *p;
    attn_tensors t;
    void *d_ws;
} gpu_job;

static int gpu_forward(exec_context *ctx, void *arg)
{
    gpu_job *j = arg;
    return j->v->forward(ctx, j->p, &j->t, j->d_ws);
}

/* The implementation v runs for p (p->impl, fallbacks applied): what the result reports as
 * impl_used. NULL for variants with one implementation. */
static const char *gpu_impl_used(const variant *v, int cc, const attn_problem *p)
{
    return variant_info_impl_name(v->info, v->impl_used ? v->impl_used(cc, p) : ATTN_IMPL_DEFAULT);
}

/* Device buffers of one job; all NULL until allocated, freed by gpu_job_free. */
typedef struct gpu_buffers {
    void *d_q, *d_k, *d_v, *d_out, *d_ws, *d_math_ws;
    float *d_ref;
    int32_t *d_seqs; /* a serving batch's cu_seqlens_q, cu_seqlens_kv and seeded block table */
} gpu_buffers;

/* A serving batch's layout (docs/serving.md): the host arrays every plan reads (p->seqs points
 * at them), and where the kernels read them. Empty for a dense problem. */
typedef struct gpu_layout {
    seq_layout lay;
    int32_t *table_copy;           /* an uploaded block table's host copy (checked, planned on) */
    const int32_t *resident_table; /* that table on the device: kernels read it, nothing is copied */
    size_t device_bytes;           /* the device copies of the rest (d_seqs) */
} gpu_layout;

static void gpu_layout_free(gpu_layout *g)
{
    seq_layout_free(&g->lay);
    free(g->table_copy);
    memset(g, 0, sizeof *g);
}

/* The two cu_seqlens arrays in d_seqs, rounded up to 16 bytes so that the block table after
 * them is as aligned as cuDNN's tensors are declared (kernels/cudnn/cudnn_sdpa.c). */
static size_t gpu_cu_seqlens_bytes(const attn_problem *p)
{
    return (2 * (size_t)(p->batch + 1) * sizeof(int32_t) + 15) / 16 * 16;
}

/* Build p's layout from r (seq_layout_build, as the cpu device does), an uploaded block table
 * (block_table=tN) in place of the seeded one. 0, or -1 with e (413; the table's 410, 422,
 * 400); g holds nothing then. */
static int gpu_layout_build(const run_request *r, attn_problem *p, gpu_layout *g, api_error *e)
{
    const int32_t *table, *resident;
    int64_t width;

    memset(g, 0, sizeof *g);
    if (seq_layout_build(&g->lay, p, r->seqlens_q.len, r->seqlens_kv.len, r->seed) != 0)
        return api_fail(e, 413, "too_large_for_device", "", "host allocation of the block table and cu_seqlens "
                        "(%.3g GB) failed", seq_layout_bytes(p) / 1e9);
    if (p->ragged) g->device_bytes += gpu_cu_seqlens_bytes(p);
    if (p->page_size <= 0) return 0;
    if (!r->block_table_tensor[0]) {
        g->device_bytes += (size_t)(p->batch * g->lay.seqs.pages_per_seq) * sizeof(int32_t);
        return 0;
    }
    if (worker_tensors_block_table(r, p, &table, &width, &resident, &g->table_copy, e) != 0) {
        gpu_layout_free(g);
        p->seqs = NULL;
        return -1;
    }
    free(g->lay.block_table); /* the seeded one: the upload's stands in for it */
    g->lay.block_table = NULL;
    g->lay.seqs.block_table = table, g->lay.seqs.pages_per_seq = width;
    g->resident_table = resident;
    return 0;
}

/* An allocation (device_memory.h, which leaves no last error for a later launch check to see)
 * that reports an out-of-memory as 413: the request, not the worker, is at fault. */
static int gpu_alloc(gpu_worker *w, void **d, size_t bytes, const char *what, api_error *e)
{
    cudaError_t ce;
    *d = NULL;
    if (bytes == 0) return 0;
    ce = (cudaError_t)device_memory_alloc(d, bytes);
    if (ce == cudaSuccess) return 0;
    *d = NULL;
    if (ce == cudaErrorMemoryAllocation)
        return api_fail(e, 413, "too_large_for_device", "", "allocating %s (%.2f GiB) on cuda:%d failed: out of memory",
                        what, (double)bytes / GIB, w->ctx.device);
    exec_fail_cuda(&w->ctx, __FILE__, __LINE__, "device_memory_alloc", ce);
    return api_fail(e, 500, "cuda_error", "", "%s", w->ctx.error);
}

static void gpu_free(gpu_worker *w, void *d)
{
    cudaError_t ce;
    if (!d) return;
    ce = (cudaError_t)device_memory_free(d);
    if (ce != cudaSuccess) exec_fail_cuda(&w->ctx, __FILE__, __LINE__, "device_memory_free", ce);
}

static void gpu_buffers_free(gpu_worker *w, gpu_buffers *b)
{
    /* device_memory_free synchronises the device, as cudaFree: queued work of a failed job ends
     * first. */
    gpu_free(w, b->d_q), gpu_free(w, b->d_k), gpu_free(w, b->d_v), gpu_free(w, b->d_out);
    gpu_free(w, b->d_ws), gpu_free(w, b->d_math_ws), gpu_free(w, b->d_ref), gpu_free(w, b->d_seqs);
    memset(b, 0, sizeof *b);
}

/* The layout's arrays where the kernels read them (t's cu_seqlens_q/kv, block_table): copied
 * into b->d_seqs (g->device_bytes) on the worker's stream, so the kernels after them find them
 * (the host arrays live as long as the job); the resident table as it is. */
static int gpu_layout_upload(exec_context *ctx, const attn_problem *p, const gpu_layout *g, const gpu_buffers *b,
                             attn_tensors *t)
{
    int32_t *d = b->d_seqs;
    size_t cu = (size_t)(p->batch + 1) * sizeof(int32_t);

    t->cu_seqlens_q = t->cu_seqlens_kv = t->block_table = NULL;
    if (p->ragged) {
        CUDA_TRY(ctx, cudaMemcpyAsync(d, p->seqs->cu_seqlens_q, cu, cudaMemcpyHostToDevice, ctx->stream));
        CUDA_TRY(ctx, cudaMemcpyAsync(d + p->batch + 1, p->seqs->cu_seqlens_kv, cu, cudaMemcpyHostToDevice,
                                      ctx->stream));
        t->cu_seqlens_q = d, t->cu_seqlens_kv = d + p->batch + 1;
        d += gpu_cu_seqlens_bytes(p) / sizeof *d;
    }
    if (p->page_size <= 0) return 0;
    if (g->resident_table) {
        t->block_table = g->resident_table;
        return 0;
    }
    CUDA_TRY(ctx, cudaMemcpyAsync(d, p->seqs->block_table,
                                  (size_t)(p->batch * p->seqs->pages_per_seq) * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, ctx->stream));
    t->block_table = d;
    return 0;
}

/* Whether two sequences of p (or two entries of one row) use the same page: an uploaded table
 * may share pages (docs/api.md). Then tokens meet in a slot, and the cpu path's order (the
 * later sequence's token stays) is what the cache must hold. 1, 0, or -1 out of memory. */
static int gpu_pages_shared(const attn_problem *p)
{
    unsigned char *seen = calloc((size_t)(p->num_pages > 0 ? p->num_pages : 1), 1);
    int64_t b, j, w = p->seqs->pages_per_seq;
    int shared = 0;

    if (!seen) return -1;
    for (b = 0; b < p->batch && !shared; b++)
        for (j = 0; j < (attn_seqlen_kv(p, b) + p->page_size - 1) / p->page_size && !shared; j++)
            shared = seen[p->seqs->block_table[b * w + j]]++ != 0;
    free(seen);
    return shared;
}

/* A paged k and v made on the host by the cpu path itself and copied up: for a cache whose
 * pages are shared, where the GPU's threads would race for a slot. */
static int gpu_paged_from_host(exec_context *ctx, const run_request *r, const attn_problem *p, gpu_buffers *b)
{
    size_t esz = attn_dtype_bytes(p->dtype);
    size_t kb = (size_t)attn_k_elems(p) * esz, vb = (size_t)attn_v_elems(p) * esz;
    void *h = malloc(kb > vb ? kb : vb);
    cudaError_t ce = cudaSuccess;

    if (!h) return exec_fail(ctx, __FILE__, __LINE__, "malloc(paged cache)", "out of memory");
    /* On the worker's stream, each copy done before h is reused: ordered with the kernels */
    if (b->d_k) {
        inputs_generate_problem_cpu(p, r->seed, NULL, h, NULL);
        ce = cudaMemcpyAsync(b->d_k, h, kb, cudaMemcpyHostToDevice, ctx->stream);
        if (ce == cudaSuccess) ce = cudaStreamSynchronize(ctx->stream);
    }
    if (ce == cudaSuccess && b->d_v) {
        inputs_generate_problem_cpu(p, r->seed, NULL, NULL, h);
        ce = cudaMemcpyAsync(b->d_v, h, vb, cudaMemcpyHostToDevice, ctx->stream);
        if (ce == cudaSuccess) ce = cudaStreamSynchronize(ctx->stream);
    }
    free(h);
    if (ce != cudaSuccess) return exec_fail_cuda(ctx, __FILE__, __LINE__, "cudaMemcpy(paged cache, HtoD)", ce);
    return 0;
}

/* Inputs from the seed, on the worker's stream, in p's layout (the layout's arrays in t): the
 * bytes inputs_generate_problem_cpu makes. */
static int gpu_make_inputs(exec_context *ctx, const run_request *r, const attn_problem *p, const attn_tensors *t,
                           gpu_buffers *b)
{
    int shared = p->page_size > 0 && r->block_table_tensor[0] && (b->d_k || b->d_v) ? gpu_pages_shared(p) : 0;

    if (shared < 0) return exec_fail(ctx, __FILE__, __LINE__, "gpu_pages_shared", "out of memory");
    /* A resident input has no buffer here: it is not generated. */
    TRY(inputs_generate_problem_gpu(ctx, p, t, r->seed, b->d_q, shared ? NULL : b->d_k, shared ? NULL : b->d_v));
    CUDA_TRY(ctx, cudaStreamSynchronize(ctx->stream));
    return shared ? gpu_paged_from_host(ctx, r, p, b) : 0;
}

/* Poison, then the one forward whose output is summarised: profiled when asked. */
static int gpu_final_forward(exec_context *ctx, gpu_job *job, size_t out_bytes, int profile, profile_result *prof)
{
    CUDA_TRY(ctx, cudaMemsetAsync(job->t.out, 0xFF, out_bytes, ctx->stream));
    if (profile) return profile_forward(ctx, gpu_forward, job, prof);
    TRY(gpu_forward(ctx, job));
    CUDA_TRY(ctx, cudaStreamSynchronize(ctx->stream));
    return 0;
}

/* The output to the host and into a memfd, for the front to hand to the cpu worker. */
static int gpu_output_memfd(exec_context *ctx, const void *d_out, size_t out_bytes, int *fd)
{
    void *h = malloc(out_bytes ? out_bytes : 1);
    int rc = -1;
    cudaError_t ce;
    if (!h) return exec_fail(ctx, __FILE__, __LINE__, "malloc(output copy)", "out of memory");
    ce = cudaMemcpyAsync(h, d_out, out_bytes, cudaMemcpyDeviceToHost, ctx->stream);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(ctx->stream);
    if (ce != cudaSuccess) {
        exec_fail_cuda(ctx, __FILE__, __LINE__, "cudaMemcpyAsync(host, d_out, DtoH) + sync", ce);
    } else {
        *fd = ipc_memfd_from("attnd-output", h, out_bytes);
        if (*fd < 0) exec_fail(ctx, __FILE__, __LINE__, "ipc_memfd_from", "cannot create the output memfd");
        else rc = 0;
    }
    free(h);
    return rc;
}

/* 500 from a failure recorded in ctx: cuda_error unless the caller names another code. */
static void gpu_fail_500(gpu_worker *w, api_error *e, const char *code)
{
    api_fail(e, 500, code, "", "%s", w->ctx.error[0] ? w->ctx.error : "the job failed (no reason recorded)");
}

cJSON *gpu_worker_run(gpu_worker *w, const run_request *r, phases *ph, api_error *e, int *output_fd, int *fatal)
{
    exec_context *ctx = &w->ctx;
    attn_problem problem = r->problem; /* with r->impl's kernel family, below */
    const attn_problem *p = &problem;
    const variant *v = variant_find(r->backend);
    gpu_buffers b;
    gpu_layout lay;
    gpu_job job;
    timing_stats ts;
    profile_result prof;
    output_summary os;
    verify_result vr;
    char range[160];
    size_t esz = attn_dtype_bytes(p->dtype);
    size_t q_bytes = (size_t)attn_q_elems(p) * esz, k_bytes = (size_t)attn_k_elems(p) * esz;
    size_t v_bytes = (size_t)attn_v_elems(p) * esz;
    size_t out_bytes = (size_t)attn_out_elems(p) * esz, ws_bytes, ref_bytes = 0, math_ws_bytes = 0;
    size_t free_b = 0, total_b = 0;
    const void *res_q = NULL, *res_k = NULL, *res_v = NULL; /* resident inputs (docs/tensors.md) */
    const char *impl_used = NULL;
    double need;
    int verify_gpu, verify_online = 0, have_prof = 0, have_verify = 0;
    cJSON *res = NULL;
    cudaError_t ce;

    *output_fd = -1;
    *fatal = 0;
    memset(&b, 0, sizeof b);
    memset(&lay, 0, sizeof lay);
    memset(&job, 0, sizeof job);
    memset(&prof, 0, sizeof prof);
    exec_clear_error(ctx);
    (void)cudaGetLastError(); /* nothing stale from an earlier job reaches this one's checks */

    /* Refusals: nothing allocated, nothing ran. */
    if (!v) {
        api_fail(e, 422, "unknown_backend", "backend", "no backend named '%s'", r->backend);
        return NULL;
    }
    if (v->info->on_cpu) {
        api_fail(e, 422, "unsupported", "device", "backend %s runs on the cpu device only", v->info->name);
        return NULL;
    }
    if (run_request_check(r, ctx->cc, e) != 0) return NULL; /* the same check as the front's, with the arch */
    problem.impl = r->impl[0] ? variant_info_impl_find(v->info, r->impl) + 1 : ATTN_IMPL_DEFAULT;
    if (r->impl[0] && !worker_impl_runnable(v, problem.impl, ctx->cc)) { /* the front checked it, from our hello */
        api_fail(e, 422, "unsupported", "impl", "impl %s of backend %s cannot run on cuda:%d (compute capability "
                 "%d.%d)", r->impl, v->info->name, ctx->device, ctx->cc / 10, ctx->cc % 10);
        return NULL;
    }
    if (r->profile && !w->profile_ok) {
        api_fail(e, 500, "profile_unavailable", "profile", "CUPTI is unavailable on cuda:%d: %s", ctx->device,
                 w->profile_error);
        return NULL;
    }
    if (worker_tensors_inputs(r, &res_q, &res_k, &res_v, e) != 0) return NULL;
    if (gpu_layout_build(r, &problem, &lay, e) != 0) return NULL; /* from here on, lay is freed at refused */
    if (v->library_check) { /* the library's own verdict, before anything is allocated; after the
                             * layout, whose per-sequence lengths and block table it may judge */
        char why[512];
        int rc = v->library_check(p, why, sizeof why);
        if (rc != 0) {
            api_fail(e, rc > 0 ? 422 : 500, rc > 0 ? "unsupported" : "library_error", "", "%s", why);
            goto refused;
        }
    }
    if (res_q) q_bytes = 0; /* nothing to allocate for a resident input */
    ws_bytes = v->workspace_bytes ? v->workspace_bytes(p) : 0;
    verify_gpu = r->verify && run_request_macs(r) > r->verify_cpu_max_macs;
    if (verify_gpu) {
        ref_bytes = (size_t)attn_out_elems(p) * sizeof(float);
        math_ws_bytes = math_workspace_bytes(p);
    }
    /* In double: a request near the bounds must not wrap size_t before it is refused. */
    need = (res_q ? 0.0 : (double)attn_q_elems(p) * esz) + (res_k ? 0.0 : (double)attn_k_elems(p) * esz) +
           (res_v ? 0.0 : (double)attn_v_elems(p) * esz) + (double)attn_out_elems(p) * esz + (double)ws_bytes +
           (double)ref_bytes + (double)math_ws_bytes + (double)lay.device_bytes;
    ce = (cudaError_t)device_memory_free_bytes(&free_b, &total_b); /* with the blocks kept idle */
    if (ce != cudaSuccess) {
        exec_fail_cuda(ctx, __FILE__, __LINE__, "cudaMemGetInfo(&free_b, &total_b)", ce);
        gpu_fail_500(w, e, "cuda_error");
        *fatal = ctx->sticky;
        goto refused;
    }
    if (verify_gpu && need > (double)free_b && !reference_online_refuses(p)) {
        /* the scores of SDPA's math path do not fit beside the run: the reference without them */
        need -= (double)math_ws_bytes;
        math_ws_bytes = 0;
        verify_online = 1;
    }
    if (need > (double)free_b) {
        api_fail(e, 413, "too_large_for_device", "", "needs %.2f GiB, cuda:%d has %.2f GiB free", need / GIB,
                 ctx->device, (double)free_b / GIB);
        goto refused;
    }

    snprintf(range, sizeof range, "run %s B%lld H%lld Sq%lld Skv%lld D%lld %s %s", v->info->name, (long long)p->batch,
             (long long)p->heads, (long long)p->seq_q, (long long)p->seq_kv, (long long)p->head_dim,
             attn_dtype_name(p->dtype), attn_mask_name(p->mask));
    nvtxRangePushA(range);
    phases_mark(ph, "checks");

    if (gpu_alloc(w, &b.d_q, q_bytes, "q", e) || gpu_alloc(w, &b.d_k, res_k ? 0 : k_bytes, "k", e) ||
        gpu_alloc(w, &b.d_v, res_v ? 0 : v_bytes, "v", e) || gpu_alloc(w, &b.d_out, out_bytes, "out", e) ||
        gpu_alloc(w, &b.d_ws, ws_bytes, "the workspace", e) ||
        gpu_alloc(w, (void **)&b.d_ref, ref_bytes, "the fp32 reference", e) ||
        gpu_alloc(w, &b.d_math_ws, math_ws_bytes, "the reference workspace", e) ||
        gpu_alloc(w, (void **)&b.d_seqs, lay.device_bytes, "cu_seqlens and the block table", e))
        goto cleanup;
    phases_mark(ph, "alloc");

    if (gpu_layout_upload(ctx, p, &lay, &b, &job.t) != 0 || gpu_make_inputs(ctx, r, p, &job.t, &b) != 0) {
        gpu_fail_500(w, e, "cuda_error");
        goto cleanup;
    }
    job.v = v;
    job.p = p;
    job.t.q = res_q ? res_q : b.d_q;
    job.t.k = res_k ? res_k : b.d_k;
    job.t.v = res_v ? res_v : b.d_v;
    job.t.out = b.d_out;
    job.d_ws = b.d_ws;

    if ((v->prepare && v->prepare(ctx, p, b.d_ws) != 0) ||
        (verify_gpu && !verify_online && math_prepare(ctx, p, b.d_math_ws) != 0)) { /* what a caller builds once */
        gpu_fail_500(w, e, "cuda_error");
        goto cleanup;
    }
    impl_used = gpu_impl_used(v, ctx->cc, p);
    phases_mark(ph, "inputs");
    if (measure_gpu(ctx, gpu_forward, &job, r, w->d_flush, w->flush_bytes, &ts, ph) != 0) {
        gpu_fail_500(w, e, "cuda_error");
        goto cleanup;
    }
    if (gpu_final_forward(ctx, &job, out_bytes, r->profile, &prof) != 0) {
        gpu_fail_500(w, e, "cuda_error");
        goto cleanup;
    }
    have_prof = r->profile;
    phases_mark(ph, r->profile ? "profile" : "final_forward");
    if (output_summarize_gpu(ctx, b.d_out, p->dtype, attn_out_elems(p), &os) != 0) {
        gpu_fail_500(w, e, "cuda_error");
        goto cleanup;
    }
    phases_mark(ph, "output");
    if (r->verify && !verify_gpu) {
        if (gpu_output_memfd(ctx, b.d_out, out_bytes, output_fd) != 0) {
            gpu_fail_500(w, e, "cuda_error");
            goto cleanup;
        }
    } else if (verify_gpu) {
        attn_tensors ref_t = job.t;
        int rc = verify_online ? reference_online_f32(ctx, p, &ref_t, b.d_ref)
                               : math_forward_f32(ctx, p, &ref_t, b.d_ref, b.d_math_ws);
        if (rc != 0 || verify_compare_gpu(ctx, b.d_out, p->dtype, b.d_ref, attn_out_elems(p),
                                          verify_online ? "gpu_online_fp32" : "gpu_math_fp32", &vr) != 0) {
            gpu_fail_500(w, e, "cuda_error");
            goto cleanup;
        }
        have_verify = 1;
    }
    if (r->verify) phases_mark(ph, "verify");

    res = cJSON_CreateObject();
    if (!res) {
        api_fail(e, 500, "internal", "", "out of memory building the result");
        goto cleanup;
    }
    cJSON_AddItemToObject(res, "timing", measure_stats_timing_json(&ts));
    if (have_prof) cJSON_AddItemToObject(res, "kernels", profile_to_json(&prof));
    else cJSON_AddNullToObject(res, "kernels");
    /* The Chrome trace of the profiled forward: the front stores it apart (traces table,
     * GET /v1/runs/ID/trace) and strips it from the record. */
    if (have_prof) cJSON_AddItemToObject(res, "trace", profile_trace_json(&prof, w->prop.name));
    cJSON_AddItemToObject(res, "output", output_to_json(&os, p));
    /* With an output memfd the front fills "verify" from the cpu worker's answer. */
    if (have_verify) cJSON_AddItemToObject(res, "verify", verify_to_json(&vr));
    else cJSON_AddNullToObject(res, "verify");
    if (gpu_add_perf(w, res, p, &ts) != 0) {
        api_fail(e, 500, "internal", "", "out of memory building the result");
        cJSON_Delete(res);
        res = NULL;
        goto cleanup;
    }
    if (impl_used) cJSON_AddStringToObject(res, "impl_used", impl_used);
    if (v->engine_desc) json_add_string_or_null(res, "engine", v->engine_desc(p));
    if (v->library_info) gpu_add_library(res, v);
    if (r->keep_output) { /* the output becomes a resident tensor: not freed below */
        if (worker_tensors_keep_output(r, b.d_out, out_bytes, cJSON_GetObjectItem(res, "output"), e) != 0) {
            cJSON_Delete(res);
            res = NULL;
            goto cleanup;
        }
        b.d_out = NULL;
    }
    phases_mark(ph, "report");

cleanup:
    profile_free(&prof);
    gpu_buffers_free(w, &b);
    gpu_layout_free(&lay);
    nvtxRangePop();
    phases_mark(ph, "free");
    if (res) cJSON_AddItemToObject(res, "worker_ms", phases_json(ph));
    *fatal = ctx->sticky;
    if (!res && *output_fd >= 0) {
        close(*output_fd);
        *output_fd = -1;
    }
    return res;

refused: /* after the layout, before anything was allocated or pushed */
    gpu_layout_free(&lay);
    return NULL;
}

/* ------------------------------------------------------------ fault injection --------- */

/* A kernel that stores through its pointer argument, as PTX: gpu_job.c is plain C and
 * the runtime's library API JIT-compiles this for whatever GPU is present. */
static const char gpu_fault_ptx[] =
    ".version 7.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    ".visible .entry attnd_fault_kernel(.param .u64 attnd_fault_p)\n"
    "{\n"
    "    .reg .b64 %rd<2>;\n"
    "    .reg .b32 %r<2>;\n"
    "    ld.param.u64 %rd1, [attnd_fault_p];\n"
    "    mov.u32 %r1, 1;\n"
    "    st.global.u32 [%rd1], %r1;\n"
    "    ret;\n"
    "}\n";

static int gpu_fault_inner(gpu_worker *w, cudaLibrary_t *lib)
{
    exec_context *ctx = &w->ctx;
    cudaKernel_t kernel;
    void *bad = (void *)(uintptr_t)0x8; /* never mapped: an illegal address */
    void *args[1] = {&bad};
    dim3 one = {1, 1, 1};
    CUDA_TRY(ctx, cudaLibraryLoadData(lib, gpu_fault_ptx, NULL, NULL, 0, NULL, NULL, 0));
    CUDA_TRY(ctx, cudaLibraryGetKernel(&kernel, *lib, "attnd_fault_kernel"));
    CUDA_TRY(ctx, cudaLaunchKernel((const void *)kernel, one, one, args, 0, ctx->stream));
    CUDA_TRY(ctx, cudaStreamSynchronize(ctx->stream));
    return 0;
}

int gpu_worker_fault_sticky(gpu_worker *w, char *err, size_t err_len)
{
    cudaLibrary_t lib = NULL;
    int rc;
    exec_clear_error(&w->ctx);
    rc = gpu_fault_inner(w, &lib);
    if (lib) (void)cudaLibraryUnload(lib); /* fails on a broken context: nothing to do then */
    if (rc == 0) {
        snprintf(err, err_len, "the faulting kernel completed without an error");
        return 0;
    }
    snprintf(err, err_len, "%s", w->ctx.error);
    return -1;
}
