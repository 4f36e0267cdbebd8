/* profile.c — the kernels one forward launched, from CUPTI activity records (profile.h).
 *
 * How: CUPTI hands us activity buffers through two callbacks registered once per worker
 * (profile_init). profile_forward enables CONCURRENT_KERNEL (KERNEL would serialise every
 * kernel), MEMCPY, MEMSET, RUNTIME, DRIVER and MARKER, runs the forward once, synchronises,
 * force-flushes, disables them again and reads what the completion callback parsed. GPU
 * records are joined to the API call that launched them by correlation id; only launch and
 * memory-operation calls count (libraries add many incidental driver calls such as
 * cuCtxGetCurrent). Rows group GPU activity by (kind, name) in order of first launch.
 *
 * NVTX: CUPTI receives NVTX ranges only when NVTX_INJECTION64_PATH names the libcupti the
 * process loaded, before the first NVTX call. profile_init sets it unless the setting
 * nvtx_to_cupti is false (see profile_nvtx_injection).
 *
 * API tracing inflates host time: this forward is never a timed one.
 */
#include "server/worker/profile.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_occupancy.h>
#include <cupti.h>
#include <nvtx3/nvToolsExt.h>

#include "common/clock.h"
#include "common/grow.h"
#include "common/log.h"
#include "server/worker/gpu_busy.h"

/* In libstdc++ (attnd links with g++): demangles C++ kernel names. */
extern char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

#define PROFILE_BUFFER_BYTES (4u << 20)

/* One check per CUPTI call: records "call failed at file:line: CUPTI_ERROR_…" in ctx. */
#define CUPTI_TRY(ctx, call)                                                                   \
    do {                                                                                       \
        CUptiResult r_ = (call);                                                               \
        if (r_ != CUPTI_SUCCESS) return profile_fail_cupti((ctx), __FILE__, __LINE__, #call, r_); \
    } while (0)

static int profile_fail_cupti(exec_context *ctx, const char *file, int line, const char *call, CUptiResult r)
{
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown CUPTI error";
    return exec_fail(ctx, file, line, call, s);
}

/* ------------------------------------------------------------ raw records ------------- */

enum { RAW_KERNEL, RAW_MEMCPY, RAW_MEMSET, RAW_API_RUNTIME, RAW_API_DRIVER, RAW_MARKER_START, RAW_MARKER_END };

/* What the completion callback keeps of one record (CUPTI reuses its buffers). */
typedef struct profile_raw {
    int kind;
    uint64_t start_ns, end_ns;
    uint32_t correlation, runtime_correlation, stream, thread, cbid, marker_id;
    int grid[3], block[3], regs, smem_static, smem_dynamic, smem_optin;
    int carveout; /* requested shared-memory carveout in percent, -1 when none */
    int copy_kind;
    uint64_t bytes;
    char *name; /* strdup'd: kernel (mangled) or NVTX range name; NULL otherwise */
} profile_raw;

static struct {
    pthread_mutex_t mu;
    int collecting;
    profile_raw *raw;
    int nraw;
    size_t cap;
    uint64_t dropped; /* reported by CUPTI, plus records we could not keep */
    int init_ok;
    char init_error[512];
    cudaOccDeviceProp occ_prop;
    int occ_ok;
} profile_g = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, 0, 0, 0, "", {0}, 0};

static char *profile_strdup(const char *s) { return s ? strdup(s) : NULL; }

static void profile_free_raw(profile_raw *raw, int n)
{
    for (int i = 0; i < n; i++) free(raw[i].name);
    free(raw);
}

/* Called with profile_g.mu held. */
static void profile_keep(const CUpti_Activity *rec)
{
    profile_raw r;
    memset(&r, 0, sizeof r);
    r.carveout = -1;
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        r.kind = RAW_KERNEL;
        r.start_ns = k->start;
        r.end_ns = k->end;
        r.correlation = k->correlationId;
        r.stream = k->streamId;
        r.grid[0] = k->gridX, r.grid[1] = k->gridY, r.grid[2] = k->gridZ;
        r.block[0] = k->blockX, r.block[1] = k->blockY, r.block[2] = k->blockZ;
        r.regs = k->registersPerThread;
        r.smem_static = k->staticSharedMemory;
        r.smem_dynamic = k->dynamicSharedMemory;
        r.smem_optin = k->shmemLimitConfig == CUPTI_FUNC_SHMEM_LIMIT_OPTIN;
        if (k->isSharedMemoryCarveoutRequested) r.carveout = k->sharedMemoryCarveoutRequested;
        r.name = profile_strdup(k->name);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
        r.kind = RAW_MEMCPY;
        r.start_ns = m->start;
        r.end_ns = m->end;
        r.correlation = m->correlationId;
        r.runtime_correlation = m->runtimeCorrelationId;
        r.stream = m->streamId;
        r.copy_kind = m->copyKind;
        r.bytes = m->bytes;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
        r.kind = RAW_MEMSET;
        r.start_ns = m->start;
        r.end_ns = m->end;
        r.correlation = m->correlationId;
        r.stream = m->streamId;
        r.bytes = m->bytes;
        break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
        const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;
        r.kind = rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? RAW_API_RUNTIME : RAW_API_DRIVER;
        r.start_ns = a->start;
        r.end_ns = a->end;
        r.correlation = a->correlationId;
        r.thread = a->threadId;
        r.cbid = a->cbid;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
        const CUpti_ActivityMarker2 *m = (const CUpti_ActivityMarker2 *)rec;
        if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) r.kind = RAW_MARKER_START;
        else if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) r.kind = RAW_MARKER_END;
        else return; /* instantaneous marks: nothing to draw as a range */
        r.start_ns = r.end_ns = m->timestamp;
        r.marker_id = m->id;
        r.thread = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m->objectId.pt.threadId : 0;
        r.name = profile_strdup(m->name);
        break;
    }
    default:
        return; /* kinds we did not ask for (e.g. left enabled by a tool) */
    }
    if (grow_array(&profile_g.raw, &profile_g.cap, (size_t)profile_g.nraw + 1, sizeof *profile_g.raw, 1024) != 0) {
        free(r.name);
        profile_g.dropped++;
        return;
    }
    profile_g.raw[profile_g.nraw++] = r;
}

/* Activity buffers kept for the next profiled forward, zeroed where CUPTI wrote. CUPTI
 * zeroes a buffer it is not told is zero on the launching thread: 4 MiB of fresh pages, a
 * millisecond of every small run (docs/measurement.md, "Kernels"). */
#define PROFILE_SPARE_BUFFERS 4
static struct {
    pthread_mutex_t mu;
    uint8_t *spare[PROFILE_SPARE_BUFFERS];
    int n;
    long out; /* buffers CUPTI holds: requested and not yet completed */
} profile_buffers = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0};

/* CUPTI wants a buffer: a few MB, 8-byte aligned and zero (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER),
 * filled with as many records as fit. */
static void CUPTIAPI profile_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    uint8_t *b = NULL;
    pthread_mutex_lock(&profile_buffers.mu);
    if (profile_buffers.n > 0) b = profile_buffers.spare[--profile_buffers.n];
    pthread_mutex_unlock(&profile_buffers.mu);
    if (!b) b = calloc(1, PROFILE_BUFFER_BYTES); /* fresh pages: zero until written */
    if (b) __atomic_add_fetch(&profile_buffers.out, 1, __ATOMIC_SEQ_CST);
    *buffer = b;
    *size = b ? PROFILE_BUFFER_BYTES : 0; /* no buffer: CUPTI drops and counts records */
    *max_records = 0;
}

/* A buffer CUPTI is done with, zeroed again where it wrote (a page past its records for
 * good measure) and kept, or freed when enough are kept. */
static void profile_buffer_keep(uint8_t *buffer, size_t size, size_t valid_size)
{
    size_t written = valid_size + 4096 < size ? valid_size + 4096 : size;
    memset(buffer, 0, written);
    pthread_mutex_lock(&profile_buffers.mu);
    if (profile_buffers.n < PROFILE_SPARE_BUFFERS) profile_buffers.spare[profile_buffers.n++] = buffer, buffer = NULL;
    pthread_mutex_unlock(&profile_buffers.mu);
    free(buffer);
}

/* CUPTI is done with a buffer (possibly on its own thread): parse, count drops, keep it for
 * the next. */
static void CUPTIAPI profile_buffer_completed(CUcontext context, uint32_t stream_id, uint8_t *buffer, size_t size,
                                              size_t valid_size)
{
    CUpti_Activity *rec = NULL;
    size_t dropped = 0;
    pthread_mutex_lock(&profile_g.mu);
    if (buffer && valid_size > 0) {
        for (;;) {
            CUptiResult r = cuptiActivityGetNextRecord(buffer, valid_size, &rec);
            if (r != CUPTI_SUCCESS) break; /* CUPTI_ERROR_MAX_LIMIT_REACHED: end of buffer */
            if (profile_g.collecting) profile_keep(rec);
        }
    }
    if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS)
        profile_g.dropped += dropped;
    pthread_mutex_unlock(&profile_g.mu);
    if (buffer) {
        profile_buffer_keep(buffer, size, valid_size);
        __atomic_sub_fetch(&profile_buffers.out, 1, __ATOMIC_SEQ_CST);
    }
}

/* ------------------------------------------------------------ init -------------------- */

/* Point NVTX at the libcupti this process loaded, so ranges reach the MARKER records and
 * the trace shows the variants' phases (setting nvtx_to_cupti). It costs no
 * measurable host time: on the H200, naive's host_us was 49–55 µs with and without it
 * (bench/results/nvidia-h200/2026-12-02-a2d5da5-host-cost.md). Nsight tools set
 * NVTX_INJECTION64_PATH themselves, and then win. */
static void profile_nvtx_injection(void)
{
    Dl_info info;
    void *sym;
    CUptiResult (*fn)(CUpti_ActivityKind) = cuptiActivityEnable;
    memcpy(&sym, &fn, sizeof sym);
    if (getenv("NVTX_INJECTION64_PATH")) return; /* a tool (nsys) is already injected */
    if (dladdr(sym, &info) && info.dli_fname) setenv("NVTX_INJECTION64_PATH", info.dli_fname, 0);
}

static int profile_init_inner(exec_context *ctx, int nvtx_to_cupti)
{
    struct cudaDeviceProp prop;
    cudaOccDeviceProp *o = &profile_g.occ_prop;

    CUDA_TRY(ctx, cudaGetDeviceProperties(&prop, ctx->device));
    memset(o, 0, sizeof *o);
    o->computeMajor = prop.major;
    o->computeMinor = prop.minor;
    o->maxThreadsPerBlock = prop.maxThreadsPerBlock;
    o->maxThreadsPerMultiprocessor = prop.maxThreadsPerMultiProcessor;
    o->regsPerBlock = prop.regsPerBlock;
    o->regsPerMultiprocessor = prop.regsPerMultiprocessor;
    o->warpSize = prop.warpSize;
    o->sharedMemPerBlock = prop.sharedMemPerBlock;
    o->sharedMemPerMultiprocessor = prop.sharedMemPerMultiprocessor;
    o->numSms = prop.multiProcessorCount;
    o->sharedMemPerBlockOptin = prop.sharedMemPerBlockOptin;
    o->reservedSharedMemPerBlock = prop.reservedSharedMemPerBlock;
    profile_g.occ_ok = 1;

    if (nvtx_to_cupti) profile_nvtx_injection();
    {
        uint8_t zeroed = 1; /* the buffers come zeroed (profile_buffer_requested) */
        size_t len = sizeof zeroed;
        CUPTI_TRY(ctx, cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &len, &zeroed));
    }
    CUPTI_TRY(ctx, cuptiActivityRegisterCallbacks(profile_buffer_requested, profile_buffer_completed));
    return 0;
}

int profile_init(exec_context *ctx, int nvtx_to_cupti)
{
    char saved[sizeof ctx->error];
    int rc;
    if (profile_g.init_ok) return 0;
    /* Record this failure apart from the job's error text, for every later profile
     * request, without losing an error already recorded. */
    memcpy(saved, ctx->error, sizeof saved);
    ctx->error[0] = '\0';
    rc = profile_init_inner(ctx, nvtx_to_cupti);
    if (rc == 0) profile_g.init_ok = 1;
    else snprintf(profile_g.init_error, sizeof profile_g.init_error, "%s", ctx->error);
    if (saved[0]) memcpy(ctx->error, saved, sizeof saved);
    return rc;
}

/* ------------------------------------------------------------ one profiled forward ---- */

static const CUpti_ActivityKind profile_kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_MARKER,
};
#define PROFILE_NKINDS ((int)(sizeof profile_kinds / sizeof profile_kinds[0]))

/* The API name without CUPTI's version and stream-mode suffixes:
 * "cuMemcpyDtoDAsync_v2_ptsz" → "cuMemcpyDtoDAsync", "__cudaLaunchKernel_v13000" →
 * "__cudaLaunchKernel". */
static void profile_api_name(int raw_kind, uint32_t cbid, char *out, size_t len)
{
    const char *name = NULL;
    CUpti_CallbackDomain dom = raw_kind == RAW_API_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
    int changed = 1;
    if (cuptiGetCallbackName(dom, cbid, &name) != CUPTI_SUCCESS || !name) name = "";
    snprintf(out, len, "%s", name);
    while (changed) {
        char *us = strrchr(out, '_');
        changed = 0;
        if (!us || us == out) break;
        if (!strcmp(us, "_ptsz") || !strcmp(us, "_ptds")) {
            *us = '\0';
            changed = 1;
        } else if (us[1] == 'v' && us[2] >= '0' && us[2] <= '9' && strspn(us + 2, "0123456789") == strlen(us + 2)) {
            *us = '\0';
            changed = 1;
        }
    }
}

/* Calls that put work on the GPU: what a kernel or memop is attributed to. */
static int profile_is_launch_api(const char *name)
{
    static const char *const exact[] = {
        "cudaLaunchKernel",  "cudaLaunchKernelExC", "__cudaLaunchKernel", "cudaLaunchCooperativeKernel",
        "cuLaunchKernel",    "cuLaunchKernelEx",    "cuLaunchCooperativeKernel", "cudaGraphLaunch",
        "cuGraphLaunch",
    };
    static const char *const prefix[] = {"cudaMemcpy", "cudaMemset", "cuMemcpy", "cuMemset"};
    size_t i;
    for (i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (!strcmp(name, exact[i])) return 1;
    for (i = 0; i < sizeof prefix / sizeof prefix[0]; i++)
        if (!strncmp(name, prefix[i], strlen(prefix[i]))) return 1;
    return 0;
}

typedef struct profile_api {
    uint32_t correlation;
    int runtime; /* 1: runtime API, 0: driver */
    char name[48];
} profile_api;

static int profile_api_cmp(const void *a, const void *b)
{
    const profile_api *x = a, *y = b;
    if (x->correlation != y->correlation) return x->correlation < y->correlation ? -1 : 1;
    return y->runtime - x->runtime; /* runtime first: the call the user's code made */
}

/* The launch call of correlation id c: runtime preferred, then driver; NULL when none. */
static const profile_api *profile_find_api(const profile_api *apis, int n, uint32_t c)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (apis[mid].correlation < c) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && apis[lo].correlation == c ? &apis[lo] : NULL;
}

static const char *profile_copy_kind_name(int k)
{
    switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return "HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return "AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return "AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD: return "AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return "DtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    default: return "Unknown";
    }
}

/* The display name of a GPU record: demangled kernel name (raw when demangling fails, as
 * for cuDNN's generated kernels), "Memcpy DtoD", "Memset". */
static void profile_gpu_name(const profile_raw *r, char *out, size_t len)
{
    if (r->kind == RAW_MEMCPY) {
        snprintf(out, len, "Memcpy %s", profile_copy_kind_name(r->copy_kind));
    } else if (r->kind == RAW_MEMSET) {
        snprintf(out, len, "Memset");
    } else {
        int status = -1;
        char *d = r->name ? __cxa_demangle(r->name, NULL, NULL, &status) : NULL;
        snprintf(out, len, "%s", status == 0 && d ? d : (r->name ? r->name : "?"));
        free(d);
    }
}

/* Theoretical occupancy of a kernel record: active warps per SM over the maximum. */
static double profile_occupancy(const profile_raw *r)
{
    const cudaOccDeviceProp *prop = &profile_g.occ_prop;
    cudaOccFuncAttributes attr;
    cudaOccDeviceState state;
    cudaOccResult res;
    int threads = r->block[0] * r->block[1] * r->block[2];
    if (!profile_g.occ_ok || threads <= 0) return 0.0;
    memset(&attr, 0, sizeof attr);
    memset(&state, 0, sizeof state);
    memset(&res, 0, sizeof res);
    attr.maxThreadsPerBlock = prop->maxThreadsPerBlock; /* the function's own limit is unknown here */
    attr.numRegs = r->regs;
    attr.sharedSizeBytes = (size_t)r->smem_static;
    attr.partitionedGCConfig = PARTITIONED_GC_OFF;
    attr.shmemLimitConfig = r->smem_optin ? FUNC_SHMEM_LIMIT_OPTIN : FUNC_SHMEM_LIMIT_DEFAULT;
    {
        size_t limit = r->smem_optin ? prop->sharedMemPerBlockOptin : prop->sharedMemPerBlock;
        size_t st = (size_t)r->smem_static;
        attr.maxDynamicSharedSizeBytes = limit > st ? limit - st : 0;
        if (attr.maxDynamicSharedSizeBytes < (size_t)r->smem_dynamic)
            attr.maxDynamicSharedSizeBytes = (size_t)r->smem_dynamic;
    }
    attr.numBlockBarriers = 1;
    state.cacheConfig = CACHE_PREFER_NONE;
    /* A zeroed state would mean "maximum L1" and halve the answer for big-smem kernels. */
    state.carveoutConfig = r->carveout >= 0 ? r->carveout : SHAREDMEM_CARVEOUT_DEFAULT;
    if (cudaOccMaxActiveBlocksPerMultiprocessor(&res, prop, &attr, &state, threads, (size_t)r->smem_dynamic) !=
        CUDA_OCC_SUCCESS)
        return 0.0;
    return (double)res.activeBlocksPerMultiprocessor * threads / prop->maxThreadsPerMultiprocessor;
}

static int profile_raw_gpu_cmp(const void *a, const void *b)
{
    const profile_raw *x = *(profile_raw *const *)a, *y = *(profile_raw *const *)b;
    if (x->correlation != y->correlation) return x->correlation < y->correlation ? -1 : 1;
    return (x->start_ns > y->start_ns) - (x->start_ns < y->start_ns);
}

static int profile_event_cmp(const void *a, const void *b)
{
    const profile_event *x = a, *y = b;
    return (x->start_ns > y->start_ns) - (x->start_ns < y->start_ns);
}

static profile_kind profile_kind_of(int raw_kind)
{
    return raw_kind == RAW_KERNEL ? PROFILE_KERNEL : raw_kind == RAW_MEMCPY ? PROFILE_MEMCPY : PROFILE_MEMSET;
}

/* Turn the raw records of one forward into rows and events. */
static int profile_build(exec_context *ctx, profile_raw *raw, int nraw, profile_result *out)
{
    profile_api *apis = NULL;
    profile_raw **gpu = NULL;
    gpu_interval *busy = NULL;
    int napi = 0, ngpu = 0, i, j, rc = -1;
    char name[384];

    apis = calloc((size_t)nraw + 1, sizeof *apis);
    gpu = calloc((size_t)nraw + 1, sizeof *gpu);
    busy = calloc((size_t)nraw + 1, sizeof *busy);
    out->rows = calloc((size_t)nraw + 1, sizeof *out->rows);
    out->events = calloc((size_t)nraw + 1, sizeof *out->events);
    if (!apis || !gpu || !busy || !out->rows || !out->events) {
        exec_fail(ctx, __FILE__, __LINE__, "calloc(profile rows)", "out of memory");
        goto done;
    }

    for (i = 0; i < nraw; i++) {
        profile_raw *r = &raw[i];
        if (r->kind == RAW_API_RUNTIME || r->kind == RAW_API_DRIVER) {
            char api[48];
            profile_api_name(r->kind, r->cbid, api, sizeof api);
            /* Kept for the trace: every runtime call, and the driver calls that launched
             * something (libraries make many incidental ones). */
            if (profile_is_launch_api(api)) {
                apis[napi].correlation = r->correlation;
                apis[napi].runtime = r->kind == RAW_API_RUNTIME;
                snprintf(apis[napi].name, sizeof apis[napi].name, "%s", api);
                napi++;
            } else if (r->kind == RAW_API_DRIVER) {
                continue;
            }
            {
                profile_event *e = &out->events[out->nevents++];
                e->kind = PROFILE_API;
                snprintf(e->name, sizeof e->name, "%s", api);
                e->start_ns = r->start_ns;
                e->end_ns = r->end_ns;
                e->correlation = r->correlation;
                e->thread = r->thread;
            }
        } else if (r->kind == RAW_MARKER_START) {
            /* An NVTX range: its end record has the same id. */
            for (j = 0; j < nraw; j++)
                if (raw[j].kind == RAW_MARKER_END && raw[j].marker_id == r->marker_id) break;
            if (j < nraw) {
                profile_event *e = &out->events[out->nevents++];
                e->kind = PROFILE_NVTX;
                snprintf(e->name, sizeof e->name, "%s", r->name ? r->name : "");
                e->start_ns = r->start_ns;
                e->end_ns = raw[j].start_ns;
                e->thread = r->thread;
            }
        } else if (r->kind == RAW_KERNEL || r->kind == RAW_MEMCPY || r->kind == RAW_MEMSET) {
            gpu[ngpu++] = r;
        }
    }
    qsort(apis, (size_t)napi, sizeof *apis, profile_api_cmp);
    qsort(gpu, (size_t)ngpu, sizeof *gpu, profile_raw_gpu_cmp); /* launch order */

    for (i = 0; i < ngpu; i++) {
        const profile_raw *r = gpu[i];
        const profile_api *api = profile_find_api(apis, napi, r->correlation);
        profile_kind kind = profile_kind_of(r->kind);
        double us = (double)(r->end_ns - r->start_ns) * 1e-3;
        kernel_row *row = NULL;
        profile_event *e = &out->events[out->nevents++];

        if (!api && r->runtime_correlation) api = profile_find_api(apis, napi, r->runtime_correlation);
        profile_gpu_name(r, name, sizeof name);

        e->kind = kind;
        snprintf(e->name, sizeof e->name, "%s", name);
        e->start_ns = r->start_ns;
        e->end_ns = r->end_ns;
        e->correlation = r->correlation;
        e->stream = r->stream;

        if (kind == PROFILE_KERNEL) out->kernels_per_forward++;
        else out->memops_per_forward++;
        busy[i].start_ns = r->start_ns;
        busy[i].end_ns = r->end_ns;

        for (j = 0; j < out->nrows; j++)
            if (out->rows[j].kind == kind && !strcmp(out->rows[j].name, name)) {
                row = &out->rows[j];
                break;
            }
        if (!row) {
            row = &out->rows[out->nrows++];
            row->kind = kind;
            snprintf(row->name, sizeof row->name, "%s", name);
            snprintf(row->launch_api, sizeof row->launch_api, "%s", api ? api->name : "");
            memcpy(row->grid, r->grid, sizeof row->grid);
            memcpy(row->block, r->block, sizeof row->block);
            row->regs = r->regs;
            row->smem_static = r->smem_static;
            row->smem_dynamic = r->smem_dynamic;
            row->occupancy = kind == PROFILE_KERNEL ? profile_occupancy(r) : 0.0;
        }
        row->calls++;
        row->gpu_us += us;
        row->bytes += r->bytes;
    }
    out->gpu_us = gpu_busy_us(busy, ngpu);
    qsort(out->events, (size_t)out->nevents, sizeof *out->events, profile_event_cmp);
    rc = 0;
done:
    free(apis);
    free(gpu);
    free(busy);
    return rc;
}

/* When each step of a profiled forward ended (clock_monotonic_s), for the debug log: what the
 * profile phase of a small run is made of. */
typedef struct profile_steps {
    double begin, enabled, ran, flushed, disabled, built;
} profile_steps;

/* Enable the kinds, run, synchronise, flush. The kinds are disabled by the caller on
 * every path. */
static int profile_run(exec_context *ctx, forward_fn fn, void *arg, int *enabled, profile_steps *at)
{
    for (*enabled = 0; *enabled < PROFILE_NKINDS; (*enabled)++)
        CUPTI_TRY(ctx, cuptiActivityEnable(profile_kinds[*enabled]));
    at->enabled = clock_monotonic_s();
    TRY(fn(ctx, arg));
    CUDA_TRY(ctx, cudaStreamSynchronize(ctx->stream));
    at->ran = clock_monotonic_s();
    /* After the synchronisation every record is complete, so a plain flush returns every
     * buffer. A forced one would too, but makes CUPTI's next recorded launch cost 0.16-0.20 ms
     * on an H100 (docs/measurement.md); it is kept for a buffer the plain flush left out. */
    CUPTI_TRY(ctx, cuptiActivityFlushAll(0));
    if (__atomic_load_n(&profile_buffers.out, __ATOMIC_SEQ_CST) > 0)
        CUPTI_TRY(ctx, cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    at->flushed = clock_monotonic_s();
    return 0;
}

static int profile_disable(exec_context *ctx, int enabled)
{
    int rc = 0;
    for (int i = 0; i < enabled; i++) {
        CUptiResult r = cuptiActivityDisable(profile_kinds[i]);
        if (r != CUPTI_SUCCESS)
            rc = profile_fail_cupti(ctx, __FILE__, __LINE__, "cuptiActivityDisable(kind)", r);
    }
    return rc;
}

int profile_forward(exec_context *ctx, forward_fn fn, void *arg, profile_result *out)
{
    profile_raw *raw;
    int nraw, enabled = 0, rc;
    profile_steps at;

    memset(out, 0, sizeof *out);
    if (!profile_g.init_ok)
        return exec_fail(ctx, __FILE__, __LINE__, "profile_forward",
                         profile_g.init_error[0] ? profile_g.init_error : "CUPTI was not initialised");

    pthread_mutex_lock(&profile_g.mu);
    profile_free_raw(profile_g.raw, profile_g.nraw);
    profile_g.raw = NULL;
    profile_g.nraw = profile_g.cap = 0;
    profile_g.dropped = 0;
    profile_g.collecting = 1;
    pthread_mutex_unlock(&profile_g.mu);

    memset(&at, 0, sizeof at);
    at.begin = clock_monotonic_s();
    nvtxRangePushA("profile");
    rc = profile_run(ctx, fn, arg, &enabled, &at);
    nvtxRangePop();
    if (rc != 0) {
        (void)cudaStreamSynchronize(ctx->stream);
        (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    }
    if (profile_disable(ctx, enabled) != 0) rc = -1;
    at.disabled = clock_monotonic_s();

    pthread_mutex_lock(&profile_g.mu);
    profile_g.collecting = 0;
    raw = profile_g.raw;
    nraw = profile_g.nraw;
    out->dropped = profile_g.dropped;
    profile_g.raw = NULL;
    profile_g.nraw = profile_g.cap = 0;
    pthread_mutex_unlock(&profile_g.mu);

    if (rc == 0) rc = profile_build(ctx, raw, nraw, out);
    profile_free_raw(raw, nraw);
    if (rc != 0) profile_free(out);
    at.built = clock_monotonic_s();
    if (rc == 0)
        log_debug("profile: %d records; ms enabling %.3f, forward and sync %.3f, flush %.3f, disabling %.3f, table %.3f",
                  nraw, (at.enabled - at.begin) * 1e3, (at.ran - at.enabled) * 1e3, (at.flushed - at.ran) * 1e3,
                  (at.disabled - at.flushed) * 1e3, (at.built - at.disabled) * 1e3);
    return rc;
}

void profile_free(profile_result *p)
{
    if (!p) return;
    free(p->rows);
    free(p->events);
    p->rows = NULL;
    p->events = NULL;
    p->nrows = p->nevents = 0;
}

/* ------------------------------------------------------------ JSON -------------------- */

static cJSON *profile_int3(const int v[3])
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < 3; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

cJSON *profile_to_json(const profile_result *p)
{
    cJSON *o = cJSON_CreateObject(), *table;
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "per_forward", p->kernels_per_forward);
    cJSON_AddNumberToObject(o, "memops_per_forward", p->memops_per_forward);
    cJSON_AddNumberToObject(o, "gpu_us", p->gpu_us);
    cJSON_AddNumberToObject(o, "dropped", (double)p->dropped);
    table = cJSON_AddArrayToObject(o, "table");
    for (int i = 0; table && i < p->nrows; i++) {
        const kernel_row *r = &p->rows[i];
        cJSON *row = cJSON_CreateObject(), *smem;
        int kernel = r->kind == PROFILE_KERNEL;
        if (!row) break;
        cJSON_AddStringToObject(row, "name", r->name);
        cJSON_AddStringToObject(row, "kind", kernel ? "kernel" : r->kind == PROFILE_MEMCPY ? "memcpy" : "memset");
        cJSON_AddNumberToObject(row, "calls", r->calls);
        cJSON_AddNumberToObject(row, "gpu_us", r->gpu_us);
        if (r->launch_api[0]) cJSON_AddStringToObject(row, "launch_api", r->launch_api);
        else cJSON_AddNullToObject(row, "launch_api");
        if (kernel) {
            cJSON_AddItemToObject(row, "grid", profile_int3(r->grid));
            cJSON_AddItemToObject(row, "block", profile_int3(r->block));
            cJSON_AddNumberToObject(row, "regs", r->regs);
            smem = cJSON_AddObjectToObject(row, "smem");
            if (smem) {
                cJSON_AddNumberToObject(smem, "static", r->smem_static);
                cJSON_AddNumberToObject(smem, "dynamic", r->smem_dynamic);
            }
            cJSON_AddNumberToObject(row, "occupancy", r->occupancy);
            cJSON_AddNullToObject(row, "bytes");
        } else {
            cJSON_AddNullToObject(row, "grid");
            cJSON_AddNullToObject(row, "block");
            cJSON_AddNullToObject(row, "regs");
            cJSON_AddNullToObject(row, "smem");
            cJSON_AddNullToObject(row, "occupancy");
            cJSON_AddNumberToObject(row, "bytes", (double)r->bytes);
        }
        cJSON_AddItemToArray(table, row);
    }
    return o;
}
