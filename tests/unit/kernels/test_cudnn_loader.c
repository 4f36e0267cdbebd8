/* test_cudnn_loader.c — cuDNN loaded at run time (cudnn_loader.c) and the `cudnn` variant's
 * host logic (cudnn_sdpa.c).
 *
 * Without a GPU: the library loads, reports 9.x, every function resolves; a failed cuDNN
 * call is reported with its status and cuDNN's own text; every tensor and operation
 * descriptor of the three graphs (no mask, causal, bottom-right causal; virtual and real
 * stats) is accepted and finalized by cuDNN itself; the plan-cache key and LRU behave;
 * check() refuses what cuDNN cannot run.
 *
 * With a GPU (cudaGetDeviceCount > 0) it also builds the operation graph, plans and runs
 * forwards against an fp64 reference computed here — the quickest end-to-end check of the
 * variant on a lent machine (tests/gpu covers it through the server).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "kernels/cudnn_loader.h"
#include "kernels/cudnn_sdpa.h"
#include "tests/unit/check.h"

static attn_problem problem(int64_t b, int64_t h, int64_t sq, int64_t skv, int64_t d, attn_dtype t, attn_mask m)
{
    attn_problem p;
    memset(&p, 0, sizeof p);
    p.batch = b;
    p.heads = h;
    p.seq_q = sq;
    p.seq_kv = skv;
    p.head_dim = d;
    p.dtype = t;
    p.mask = m;
    p.scale = 1.0 / sqrt((double)d);
    return p;
}

static void test_load(void)
{
    char why[256] = "";
    const cudnn_api *api;
    char ver[32];
    int rc = cudnn_load(why, sizeof why);
    CHECK(rc == 0, "cudnn_load failed: %s", why);
    if (rc != 0) return;
    CHECK(cudnn_load(why, sizeof why) == 0, "second cudnn_load differs");
    CHECK(cudnn_version() >= 90000 && cudnn_version() < 100000, "version %zu", cudnn_version());
    cudnn_version_string(ver, sizeof ver);
    CHECK(strncmp(ver, "9.", 2) == 0, "version string %s", ver);
    printf("cuDNN %s loaded (%zu)\n", ver, cudnn_version());
    api = cudnn_api_get();
    CHECK(api != NULL, "no api table");
    if (!api) return;
    CHECK(api->Create && api->Destroy && api->SetStream && api->GetVersion && api->GetErrorString &&
              api->GetLastErrorString && api->BackendCreateDescriptor && api->BackendDestroyDescriptor &&
              api->BackendSetAttribute && api->BackendGetAttribute && api->BackendFinalize && api->BackendExecute,
          "a function pointer is NULL");
}

/* A descriptor by hand, as cudnn_sdpa.c makes them, and a failure's message. */
static void test_descriptor_and_errors(void)
{
    const cudnn_api *api = cudnn_api_get();
    cudnnBackendDescriptor_t t = NULL;
    cudnnDataType_t type = CUDNN_DATA_BFLOAT16;
    int64_t dims[4] = {1, 2, 3, 8}, strides[4] = {48, 24, 8, 1}, uid = 1, align = 16;
    cudnnStatus_t st;
    exec_context ctx;
    if (!api) return;

    CHECK(api->BackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t) == CUDNN_STATUS_SUCCESS, "create");
    /* Finalizing before the attributes are set must fail, with cuDNN's text in the error. */
    st = api->BackendFinalize(t);
    CHECK(st != CUDNN_STATUS_SUCCESS, "finalize of an empty tensor succeeded");
    memset(&ctx, 0, sizeof ctx);
    CHECK(cudnn_fail(&ctx, "f.c", 7, "cudnnBackendFinalize(t)", st) == -1, "cudnn_fail returns -1");
    CHECK(strstr(ctx.error, "cudnnBackendFinalize(t) failed at f.c:7: CUDNN_STATUS_") != NULL, "error: %s", ctx.error);
    printf("an expected failure reads: %s\n", ctx.error);

    CHECK(api->BackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type) == 0, "type");
    CHECK(api->BackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims) == 0, "dims");
    CHECK(api->BackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides) == 0, "strides");
    CHECK(api->BackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) == 0, "uid");
    CHECK(api->BackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align) == 0, "align");
    st = api->BackendFinalize(t);
    CHECK(st == CUDNN_STATUS_SUCCESS, "finalize tensor: %d", (int)st);
    CHECK(api->BackendDestroyDescriptor(t) == CUDNN_STATUS_SUCCESS, "destroy");

    /* The CUDNN_TRY macro returns -1 and keeps the first failure. */
    memset(&ctx, 0, sizeof ctx);
    {
        int rc = cudnn_fail(&ctx, "a.c", 1, "first", CUDNN_STATUS_BAD_PARAM);
        rc = cudnn_fail(&ctx, "b.c", 2, "second", CUDNN_STATUS_NOT_SUPPORTED);
        CHECK(rc == -1 && strstr(ctx.error, "first failed at a.c:1") && strstr(ctx.error, "CUDNN_STATUS_BAD_PARAM"),
              "first failure kept: %s", ctx.error);
    }
}

static int try_macro(exec_context *ctx, cudnnStatus_t st)
{
    CUDNN_TRY(ctx, st);
    return 0;
}

static void test_try_macro(void)
{
    exec_context ctx;
    memset(&ctx, 0, sizeof ctx);
    CHECK(try_macro(&ctx, CUDNN_STATUS_SUCCESS) == 0 && ctx.error[0] == '\0', "success passes");
    CHECK(try_macro(&ctx, CUDNN_STATUS_NOT_SUPPORTED) == -1, "failure returns -1");
    CHECK(strstr(ctx.error, "st failed at") && strstr(ctx.error, "test_cudnn_loader.c") &&
              strstr(ctx.error, "CUDNN_STATUS_NOT_SUPPORTED"),
          "message: %s", ctx.error);
}

/* Every tensor and operation of each graph, finalized by cuDNN (no GPU needed). */
static void test_graph_descriptors(int with_graph)
{
    static const struct {
        attn_mask mask;
        int64_t sq, skv;
        int ops;
    } cases[] = {
        {ATTN_MASK_NONE, 128, 256, 10},               /* bmm1 mul max sub exp sum log add div bmm2 */
        {ATTN_MASK_CAUSAL, 256, 256, 14},             /* + gen_index ×2, cmp_ge, binary_select */
        {ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 128, 256, 16}, /* + add skv, sub sq */
    };
    size_t i;
    int stats_real;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (stats_real = 0; stats_real < 2; stats_real++) {
            attn_problem p = problem(2, 4, cases[i].sq, cases[i].skv, 64, ATTN_BF16, cases[i].mask);
            char err[512] = "";
            int n_ops = -1;
            int rc = cudnn_sdpa_graph_selftest(&p, stats_real, with_graph, &n_ops, err, sizeof err);
            CHECK(rc == 0, "graph %s stats_real=%d with_graph=%d: %s", attn_mask_name(cases[i].mask), stats_real,
                  with_graph, err);
            CHECK(n_ops == cases[i].ops, "graph %s: %d ops, want %d", attn_mask_name(cases[i].mask), n_ops,
                  cases[i].ops);
        }
    }
    {
        attn_problem p = problem(1, 1, 64, 64, 128, ATTN_FP16, ATTN_MASK_CAUSAL);
        char err[512] = "";
        int n_ops = 0;
        CHECK(cudnn_sdpa_graph_selftest(&p, 0, with_graph, &n_ops, err, sizeof err) == 0, "fp16: %s", err);
    }
}

static void test_check(void)
{
    char why[256];
    attn_problem p = problem(8, 16, 1024, 1024, 64, ATTN_BF16, ATTN_MASK_CAUSAL);
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "study shape: %s", why);
    p.dtype = ATTN_FP16;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "fp16: %s", why);
    p.dtype = ATTN_FP32;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1 && strstr(why, "dtype"), "fp32 refused: %s", why);
    p.dtype = ATTN_BF16;
    p.head_dim = 72;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "head_dim 72: %s", why);
    p.head_dim = 60;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1 && strstr(why, "head_dim"), "head_dim 60: %s", why);
    p.head_dim = 256;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "head_dim 256: %s", why);
    p.head_dim = 264;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1, "head_dim 264 refused");
    p.head_dim = 64;
    p.mask = ATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    p.seq_q = 512;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "bottom-right sq<skv: %s", why);
    p.seq_q = 2048;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1 && strstr(why, "seq_q"), "bottom-right sq>skv: %s", why);
    p.mask = ATTN_MASK_CAUSAL;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "top-left sq>skv: %s", why);
    p.scale = -0.3; /* cuDNN's fused SDPA answers NaN (fused_check, H200): refused */
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1 && strstr(why, "positive scale"), "negative scale: %s", why);
    p.scale = 0.7;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "scale 0.7: %s", why);
}

static void test_keys_and_lru(void)
{
    attn_problem p = problem(8, 16, 1024, 1024, 64, ATTN_BF16, ATTN_MASK_CAUSAL);
    attn_problem q = p;
    cudnn_sdpa_key a, b;
    cudnn_sdpa_lru lru;
    int i, evicted, slot;

    cudnn_sdpa_key_make(&p, 0, &a);
    q.scale = 0.5;
    cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(cudnn_sdpa_key_equal(&a, &b), "scale is not part of the key");
    cudnn_sdpa_key_make(&p, 1, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "device is part of the key");
    q = p, q.mask = ATTN_MASK_NONE, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "mask is part of the key");
    q = p, q.dtype = ATTN_FP16, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "dtype is part of the key");
    q = p, q.seq_kv = 2048, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "seq_kv is part of the key");
    q = p, q.batch = 4, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "batch is part of the key");
    q = p, q.heads = 8, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "heads is part of the key");
    q = p, q.seq_q = 512, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "seq_q is part of the key");
    q = p, q.head_dim = 128, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "head_dim is part of the key");

    memset(&lru, 0, sizeof lru);
    CHECK(cudnn_sdpa_lru_find(&lru, &a) == -1, "empty cache finds nothing");
    for (i = 0; i < CUDNN_SDPA_CACHE_ENTRIES; i++) {
        q = p, q.seq_q = 64 * (i + 1), cudnn_sdpa_key_make(&q, 0, &b);
        slot = cudnn_sdpa_lru_slot(&lru, &evicted);
        CHECK(slot == i && !evicted, "fill: slot %d evicted %d at %d", slot, evicted, i);
        cudnn_sdpa_lru_put(&lru, slot, &b);
    }
    /* Touch the first entry: the second becomes the least recently used. */
    q = p, q.seq_q = 64, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(cudnn_sdpa_lru_find(&lru, &b) == 0, "find first");
    slot = cudnn_sdpa_lru_slot(&lru, &evicted);
    CHECK(slot == 1 && evicted, "evicts the least recently used: slot %d evicted %d", slot, evicted);
    cudnn_sdpa_lru_put(&lru, slot, &a);
    CHECK(cudnn_sdpa_lru_find(&lru, &a) == 1, "new key found where it went");
    q = p, q.seq_q = 128, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(cudnn_sdpa_lru_find(&lru, &b) == -1, "evicted key gone");
    slot = cudnn_sdpa_lru_slot(&lru, &evicted);
    CHECK(slot == 2 && evicted, "next victim is slot 2: %d", slot);
}

/* ---- GPU part ------------------------------------------------------------------------- */

static uint16_t to_half_bits(float f, attn_dtype t)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (t == ATTN_BF16) {
        u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
        return (uint16_t)(u >> 16);
    }
    /* fp16, for |f| in the normal range used here */
    {
        uint32_t sign = (u >> 16) & 0x8000u;
        int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
        uint32_t m = u & 0x7fffffu;
        if (e <= 0) return (uint16_t)sign;
        m += 0xfffu + ((m >> 13) & 1u);
        if (m & 0x800000u) m = 0, e++;
        return (uint16_t)(sign | ((uint32_t)e << 10) | (m >> 13));
    }
}

static float from_half_bits(uint16_t h, attn_dtype t)
{
    uint32_t u;
    float f;
    if (t == ATTN_BF16) {
        u = (uint32_t)h << 16;
    } else {
        uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
        if (e == 0) {
            f = ldexpf((float)m, -24);
            return sign ? -f : f;
        }
        if (e == 31) u = sign | 0x7f800000u | (m << 13);
        else u = sign | ((e - 15 + 127) << 23) | (m << 13);
    }
    memcpy(&f, &u, 4);
    return f;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One forward on the GPU against an fp64 reference of the bf16/fp16-rounded inputs. */
static void gpu_case(exec_context *ctx, attn_problem p)
{
    size_t nq = (size_t)attn_q_elems(&p), nkv = (size_t)attn_kv_elems(&p), i;
    uint16_t *hq = malloc(nq * 2), *hk = malloc(nkv * 2), *hv = malloc(nkv * 2), *ho = malloc(nq * 2);
    double *sc = malloc((size_t)p.seq_kv * sizeof(double));
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *ws = NULL;
    size_t ws_bytes;
    attn_tensors t;
    double t0, t1, t2, max_err = 0.0;
    int64_t bh, r, c, x, nan_count = 0;
    unsigned seed = 12345;
    const char *desc;

    for (i = 0; i < nq; i++) hq[i] = to_half_bits((float)((rand_r(&seed) % 2001) - 1000) / 1000.0f, p.dtype);
    for (i = 0; i < nkv; i++) hk[i] = to_half_bits((float)((rand_r(&seed) % 2001) - 1000) / 1000.0f, p.dtype);
    for (i = 0; i < nkv; i++) hv[i] = to_half_bits((float)((rand_r(&seed) % 2001) - 1000) / 1000.0f, p.dtype);
    CHECK(cudaMalloc(&dq, nq * 2) == cudaSuccess && cudaMalloc(&dk, nkv * 2) == cudaSuccess &&
              cudaMalloc(&dv, nkv * 2) == cudaSuccess && cudaMalloc(&dout, nq * 2) == cudaSuccess,
          "cudaMalloc");
    cudaMemcpy(dq, hq, nq * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dk, hk, nkv * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, hv, nkv * 2, cudaMemcpyHostToDevice);
    cudaMemset(dout, 0xff, nq * 2); /* NaN bytes: an element never written shows */

    t0 = now_s();
    ws_bytes = cudnn_sdpa_workspace_bytes(&p);
    t1 = now_s();
    if (ws_bytes) CHECK(cudaMalloc(&ws, ws_bytes) == cudaSuccess, "workspace");
    t.q = dq, t.k = dk, t.v = dv, t.out = dout;
    exec_clear_error(ctx);
    CHECK(cudnn_sdpa_forward(ctx, &p, &t, ws) == 0, "forward %s: %s", attn_mask_name(p.mask), ctx->error);
    CHECK(cudaStreamSynchronize(ctx->stream) == cudaSuccess, "sync");
    t2 = now_s();
    {
        /* Host cost of a cached forward. */
        double a = now_s(), b;
        int k;
        for (k = 0; k < 20; k++) (void)cudnn_sdpa_forward(ctx, &p, &t, ws);
        b = now_s();
        cudaStreamSynchronize(ctx->stream);
        desc = cudnn_sdpa_engine_desc(&p);
        printf("  %s %s B%lld H%lld Sq%lld Skv%lld D%lld: plan %.3f s, first forward %.3f s, enqueue %.1f us; "
               "workspace %zu B; %s\n",
               attn_dtype_name(p.dtype), attn_mask_name(p.mask), (long long)p.batch, (long long)p.heads,
               (long long)p.seq_q, (long long)p.seq_kv, (long long)p.head_dim, t1 - t0, t2 - t1, (b - a) / 20 * 1e6,
               ws_bytes, desc ? desc : "(no engine description)");
        CHECK(desc != NULL, "engine description");
    }
    {
        /* The worker's graph mode: capture one forward, replay it into a poisoned output. */
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        cudaMemset(dout, 0xff, nq * 2);
        cudaDeviceSynchronize();
        CHECK(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "capture");
        CHECK(cudnn_sdpa_forward(ctx, &p, &t, ws) == 0, "captured forward: %s", ctx->error);
        CHECK(cudaStreamEndCapture(ctx->stream, &graph) == cudaSuccess, "end capture");
        CHECK(graph && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
        if (exec) CHECK(cudaGraphLaunch(exec, ctx->stream) == cudaSuccess, "graph launch");
        CHECK(cudaStreamSynchronize(ctx->stream) == cudaSuccess, "graph sync");
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
    }
    cudaMemcpy(ho, dout, nq * 2, cudaMemcpyDeviceToHost);

    for (bh = 0; bh < p.batch * p.heads; bh++) {
        const uint16_t *qb = hq + bh * p.seq_q * p.head_dim, *kb = hk + bh * p.seq_kv * p.head_dim,
                       *vb = hv + bh * p.seq_kv * p.head_dim, *ob = ho + bh * p.seq_q * p.head_dim;
        for (r = 0; r < p.seq_q; r++) {
            int64_t visible = attn_visible_keys(p.mask, p.seq_q, p.seq_kv, r);
            double mx = -INFINITY, sum = 0.0;
            for (c = 0; c < visible; c++) {
                double s = 0.0;
                for (x = 0; x < p.head_dim; x++)
                    s += (double)from_half_bits(qb[r * p.head_dim + x], p.dtype) *
                         (double)from_half_bits(kb[c * p.head_dim + x], p.dtype);
                sc[c] = s * p.scale;
                if (sc[c] > mx) mx = sc[c];
            }
            for (c = 0; c < visible; c++) sum += (sc[c] = exp(sc[c] - mx));
            for (x = 0; x < p.head_dim; x++) {
                double o = 0.0, got;
                for (c = 0; c < visible; c++) o += sc[c] / sum * (double)from_half_bits(vb[c * p.head_dim + x], p.dtype);
                got = (double)from_half_bits(ob[r * p.head_dim + x], p.dtype);
                if (isnan(got)) nan_count++;
                else if (fabs(got - o) > max_err) max_err = fabs(got - o);
            }
        }
    }
    printf("  max abs error %.3g, NaN %lld\n", max_err, (long long)nan_count);
    CHECK(nan_count == 0, "%lld NaN outputs", (long long)nan_count);
    CHECK(max_err < (p.dtype == ATTN_BF16 ? 2e-2 : 5e-3), "max abs error %g", max_err);

    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(ws);
    free(hq), free(hk), free(hv), free(ho), free(sc);
}

static void test_gpu(void)
{
    exec_context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.device = 0;
    CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice");
    CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
    test_graph_descriptors(1);
    gpu_case(&ctx, problem(1, 2, 256, 256, 64, ATTN_BF16, ATTN_MASK_NONE));
    gpu_case(&ctx, problem(1, 2, 256, 256, 64, ATTN_BF16, ATTN_MASK_CAUSAL));
    gpu_case(&ctx, problem(1, 2, 200, 328, 64, ATTN_BF16, ATTN_MASK_CAUSAL));
    gpu_case(&ctx, problem(1, 2, 136, 328, 64, ATTN_BF16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT));
    gpu_case(&ctx, problem(2, 2, 128, 128, 128, ATTN_FP16, ATTN_MASK_CAUSAL));
    gpu_case(&ctx, problem(1, 1, 64, 64, 256, ATTN_BF16, ATTN_MASK_NONE));
    gpu_case(&ctx, problem(1, 2, 328, 200, 64, ATTN_BF16, ATTN_MASK_CAUSAL)); /* top-left, sq > skv */
    gpu_case(&ctx, problem(2, 4, 1, 300, 64, ATTN_BF16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT)); /* decode */
    {
        attn_problem p = problem(1, 2, 256, 256, 64, ATTN_BF16, ATTN_MASK_CAUSAL);
        p.scale = 0.3; /* cached plan, new by-value scale */
        gpu_case(&ctx, p);
    }
    gpu_case(&ctx, problem(8, 16, 1024, 1024, 64, ATTN_BF16, ATTN_MASK_CAUSAL)); /* the study's shape */
    cudnn_sdpa_release();
    cudaStreamDestroy(ctx.stream);
}

int main(void)
{
    int gpus = 0;
    test_load();
    test_descriptor_and_errors();
    test_try_macro();
    test_check();
    test_keys_and_lru();
    test_graph_descriptors(0);
    {
        /* No plan without a GPU: an engine description is absent, forward fails cleanly. */
        attn_problem p = problem(1, 1, 64, 64, 64, ATTN_BF16, ATTN_MASK_NONE);
        exec_context ctx;
        attn_tensors t = {0};
        memset(&ctx, 0, sizeof ctx);
        ctx.device = -1;
        CHECK(cudnn_sdpa_forward(&ctx, &p, &t, NULL) == -1 && ctx.error[0], "forward on the cpu device refuses");
    }
    if (cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0) {
        printf("GPU present: running cuDNN SDPA end to end\n");
        test_gpu();
    } else {
        attn_problem p = problem(1, 1, 64, 64, 64, ATTN_BF16, ATTN_MASK_NONE);
        cudaGetLastError();
        printf("no GPU: plan building and forwards skipped\n");
        CHECK(cudnn_sdpa_workspace_bytes(&p) > 0, "workspace bound without a GPU");
        CHECK(cudnn_sdpa_engine_desc(&p) == NULL, "no engine without a plan");
    }
    cudnn_sdpa_release();
    return CHECK_DONE();
}
