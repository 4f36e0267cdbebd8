/* test_cudnn_loader.c — cuDNN loaded at run time (cudnn_loader.c) and the `cudnn` variant's
 * host logic (cudnn_sdpa.c).
 *
 * Without a GPU: the library loads, reports 9.x, every function resolves; a failed cuDNN
 * call is reported with its status and cuDNN's own text; every tensor and operation
 * descriptor of each graph (no mask, causal, bottom-right causal, each with and without a
 * window; grouped K/V heads; a value head dim of its own; virtual and real stats) is
 * accepted and finalized by cuDNN itself; the plan-cache key and LRU behave; check()
 * refuses what cuDNN cannot run, plan_check() answers such a refusal as one, and the
 * release rules (cudnn_sdpa_version_check) hold for the releases they name.
 *
 * With a GPU (cudaGetDeviceCount > 0) it also builds the operation graph, plans and runs
 * forwards against reference_attention_f64 (kernels/cpu/reference.c, the fp64 oracle) — the
 * quickest end-to-end check of the variant on a lent machine (tests/gpu covers it through
 * the server): dense, grouped-query (MQA and H/2), windows under every mask (W = 1, 7,
 * past the keys), head_dim_v (192/128, and 64/128 and 128/64 where cuDNN takes them), odd
 * and decode shapes.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "kernels/cudnn/cudnn_loader.h"
#include "kernels/cudnn/cudnn_sdpa.h"
#include "kernels/decomposed.h"
#include "kernels/dtype_convert.h"
#include "tests/unit/check.h"

static attn_problem problem(int64_t b, int64_t h, int64_t sq, int64_t skv, int64_t d, attn_dtype t, attn_mask m)
{
    return attn_mha(b, h, sq, skv, d, t, m, 1.0 / sqrt((double)d));
}

/* The problem with grouped K/V heads (0: heads), a value head dim (0: head_dim) and a
 * window (0: none). */
static attn_problem model(int64_t b, int64_t h, int64_t hkv, int64_t sq, int64_t skv, int64_t d, int64_t dv,
                          int64_t window, attn_dtype t, attn_mask m)
{
    attn_problem p = problem(b, h, sq, skv, d, t, m);
    p.kv_heads = hkv;
    p.head_dim_v = dv;
    p.window_keys = window;
    return p;
}

/* "bf16 causal B1 H8/2 Sq77 Skv300 D192/128 W7" for the log. */
static const char *label(const attn_problem *p)
{
    static char buf[160];
    snprintf(buf, sizeof buf, "%s %s B%lld H%lld/%lld Sq%lld Skv%lld D%lld/%lld W%lld", attn_dtype_name(p->dtype),
             attn_mask_name(p->mask), (long long)p->batch, (long long)p->heads, (long long)attn_kv_heads(p),
             (long long)p->seq_q, (long long)p->seq_kv, (long long)p->head_dim, (long long)attn_dv(p),
             (long long)p->window_keys);
    return buf;
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
        int64_t hkv, sq, skv, d, dv, window;
        int ops;
    } cases[] = {
        {ATTN_MASK_NONE, 0, 128, 256, 64, 0, 0, 10},                /* bmm1 mul max sub exp sum log add div bmm2 */
        {ATTN_MASK_CAUSAL, 0, 256, 256, 64, 0, 0, 14},              /* + gen_index ×2, cmp_ge, binary_select */
        {ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0, 128, 256, 64, 0, 0, 16}, /* + add skv, sub sq */
        /* + the window: gen_index ×2, add L, cmp_gt, binary_select */
        {ATTN_MASK_NONE, 0, 128, 256, 64, 0, 7, 15},
        {ATTN_MASK_CAUSAL, 0, 256, 256, 64, 0, 7, 19},
        {ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0, 128, 256, 64, 0, 7, 21},
        {ATTN_MASK_CAUSAL, 1, 256, 256, 64, 0, 0, 14},              /* MQA: K and V [2,1,·,·] */
        {ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 2, 1, 300, 128, 0, 0, 16},  /* GQA decode */
        {ATTN_MASK_CAUSAL, 0, 128, 128, 192, 128, 0, 14},           /* DeepSeek-V3: V and O [·,·,·,128] */
        {ATTN_MASK_CAUSAL, 2, 77, 333, 192, 128, 4096, 19},         /* all three, odd lengths */
        {ATTN_MASK_NONE, 1, 1, 300, 64, 128, 1, 15},
    };
    size_t i;
    int stats_real;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (stats_real = 0; stats_real < 2; stats_real++) {
            attn_problem p = model(2, 4, cases[i].hkv, cases[i].sq, cases[i].skv, cases[i].d, cases[i].dv,
                                   cases[i].window, ATTN_BF16, cases[i].mask);
            char err[512] = "";
            int n_ops = -1;
            int rc = cudnn_sdpa_graph_selftest(&p, stats_real, with_graph, &n_ops, err, sizeof err);
            CHECK(rc == 0, "graph %s stats_real=%d with_graph=%d: %s", label(&p), stats_real, with_graph, err);
            CHECK(n_ops == cases[i].ops, "graph %s: %d ops, want %d", label(&p), n_ops, cases[i].ops);
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

/* Grouped K/V heads, a value head dim and windows: what cuDNN takes, and what it refuses
 * by name (a 422 from the front's and the worker's run_request_check). */
static void test_check_models(void)
{
    char why[512];
    attn_problem p;
    int m;

    p = model(2, 32, 8, 4096, 4096, 128, 0, 0, ATTN_BF16, ATTN_MASK_CAUSAL); /* Llama 3.1 70B */
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "GQA 32/8: %s", why);
    p.kv_heads = 1;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "MQA: %s", why);
    p.kv_heads = 32;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "kv_heads = heads: %s", why);
    p.kv_heads = 3;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1 && strstr(why, "kv_heads 3") && strstr(why, "cuDNN"),
          "kv_heads 3 of 32: %s", why);
    p.kv_heads = 64;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1 && strstr(why, "kv_heads"), "kv_heads > heads: %s", why);
    p.kv_heads = -2;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1 && strstr(why, "kv_heads"), "kv_heads < 0: %s", why);

    p = model(1, 128, 0, 4096, 4096, 192, 128, 0, ATTN_BF16, ATTN_MASK_CAUSAL); /* DeepSeek-V3 prefill */
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "192/128: %s", why);
    p.head_dim = 64, p.head_dim_v = 128;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "64/128 is cuDNN's to take or refuse: %s", why);
    p.head_dim_v = 256;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "64/256: %s", why);
    p.head_dim_v = 264;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1 && strstr(why, "head_dim_v") && strstr(why, "264"),
          "head_dim_v 264: %s", why);
    p.head_dim_v = 100;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1 && strstr(why, "head_dim_v") && strstr(why, "100"),
          "head_dim_v 100: %s", why);
    p.head_dim_v = -8;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1 && strstr(why, "head_dim_v"), "head_dim_v < 0: %s", why);
    p.head_dim = 60, p.head_dim_v = 64;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1 && strstr(why, "head_dim a multiple") && strstr(why, "60"),
          "head_dim 60 still refused with head_dim_v 64: %s", why);

    for (m = 0; m < ATTN_MASK_COUNT; m++) {
        /* cuDNN 9.14.0's wrong answers with a window, no causal mask and more than 1024 keys:
         * refused under that release only (test_version_rules checks the rule itself) */
        int want = m == ATTN_MASK_NONE && cudnn_version() == 91400 ? -1 : 0;
        p = model(1, 32, 8, 4096, 4096, 128, 0, 4096, ATTN_BF16, (attn_mask)m); /* Mistral 7B */
        CHECK(cudnn_sdpa_check(&p, why, sizeof why) == want, "window %s: %s", attn_mask_name(p.mask), why);
        p.window_keys = 1;
        CHECK(cudnn_sdpa_check(&p, why, sizeof why) == want, "window 1 %s: %s", attn_mask_name(p.mask), why);
        p.window_keys = 1 << 20; /* past every key */
        CHECK(cudnn_sdpa_check(&p, why, sizeof why) == want, "window past the keys %s: %s", attn_mask_name(p.mask),
              why);
        p.seq_q = 1;
        CHECK(cudnn_sdpa_check(&p, why, sizeof why) == want, "window decode %s: %s", attn_mask_name(p.mask), why);
        p.window_keys = 7, p.seq_q = 4097;
        CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1 && strstr(why, "window_keys") && strstr(why, "seq_q <= "
              "seq_kv") && strstr(why, "cuDNN"), "window with seq_q > seq_kv, %s: %s", attn_mask_name(p.mask), why);
        p.window_keys = 0;
        CHECK(cudnn_sdpa_check(&p, why, sizeof why) == (m == ATTN_MASK_CAUSAL_BOTTOM_RIGHT ? -1 : 0),
              "no window, seq_q > seq_kv, %s: %s", attn_mask_name(p.mask), why);
        p.window_keys = -1; /* ≤ 0: no window (attn.h) */
        CHECK(cudnn_sdpa_check(&p, why, sizeof why) == (m == ATTN_MASK_CAUSAL_BOTTOM_RIGHT ? -1 : 0),
              "window -1 is none, %s: %s", attn_mask_name(p.mask), why);
    }
    p = model(1, 8, 8, 1, (int64_t)1 << 24, 128, 0, 4096, ATTN_BF16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT);
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "window with 2^24 keys: %s", why);
    p.seq_kv++;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == -1 && strstr(why, "window_keys") && strstr(why, "2^24"),
          "window past 2^24 keys: %s", why);
    p.window_keys = 0;
    CHECK(cudnn_sdpa_check(&p, why, sizeof why) == 0, "2^24+1 keys without a window: %s", why);

    /* What the table says the variant runs, and the same problems through the table's check. */
    CHECK(variant_info_cudnn.features ==
                  (VARIANT_GQA | VARIANT_HEAD_DIM_V | VARIANT_WINDOW | VARIANT_PAGED | VARIANT_RAGGED) &&
              variant_info_cudnn.pending_features == 0,
          "features %#x, pending %#x", variant_info_cudnn.features, variant_info_cudnn.pending_features);
    p = model(2, 8, 2, 256, 256, 192, 128, 64, ATTN_FP16, ATTN_MASK_CAUSAL);
    CHECK(variant_info_check(&variant_info_cudnn, &p, 90, why, sizeof why) == 0, "table check, all three: %s", why);
    p.kv_heads = 3;
    CHECK(variant_info_check(&variant_info_cudnn, &p, 90, why, sizeof why) == -1 && strstr(why, "kv_heads"),
          "table check, kv_heads 3: %s", why);
}

/* cudnn-frontend's release rules, for releases other than the one loaded here. */
static void test_version_rules(void)
{
    static const struct {
        attn_mask mask;
        int64_t sq, skv, window;
        size_t version;
        int ok;
        const char *words;
    } cases[] = {
        {ATTN_MASK_CAUSAL, 128, 128, 0, 91000, 0, "9.10.0"},
        {ATTN_MASK_CAUSAL, 128, 128, 0, 91001, 0, "9.10.1"},
        {ATTN_MASK_CAUSAL, 128, 128, 0, 91002, 1, NULL},
        {ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 100, 256, 0, 90500, 0, "multiples of 64"},
        {ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 128, 256, 0, 90500, 1, NULL},
        {ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 100, 256, 0, 90600, 1, NULL},
        {ATTN_MASK_CAUSAL, 1, 256, 0, 90900, 0, "seq_q 1"},
        {ATTN_MASK_NONE, 1, 256, 0, 90900, 1, NULL},
        {ATTN_MASK_CAUSAL, 1, 256, 0, 91002, 1, NULL},
        {ATTN_MASK_CAUSAL, 128, 256, 64, 90100, 0, "9.2.0"},
        {ATTN_MASK_CAUSAL, 128, 256, 64, 90200, 1, NULL},
        {ATTN_MASK_NONE, 128, 256, 64, 91001, 0, "9.10"},
        {ATTN_MASK_NONE, 128, 256, 64, 90900, 0, "causal mask"},
        {ATTN_MASK_NONE, 128, 256, 64, 91002, 1, NULL},
        {ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 128, 256, 64, 90500, 0, "seq_q == seq_kv"},
        {ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 128, 256, 64, 90600, 1, NULL},
        {ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 256, 256, 64, 90900, 0, "Hopper"},
        {ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 256, 256, 64, 91002, 1, NULL},
        {ATTN_MASK_NONE, 128, 2048, 64, 91400, 0, "9.14.0"},
        {ATTN_MASK_NONE, 128, 1024, 64, 91400, 1, NULL},
        {ATTN_MASK_CAUSAL, 128, 2048, 64, 91400, 1, NULL},
        {ATTN_MASK_NONE, 128, 2048, 64, 91401, 1, NULL},
        {ATTN_MASK_NONE, 128, 2048, 64, 91900, 1, NULL},
        {ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 1, 300, 4, 91900, 1, NULL},
    };
    size_t i;
    char why[512];
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_problem p = model(1, 8, 2, cases[i].sq, cases[i].skv, 128, 0, cases[i].window, ATTN_BF16, cases[i].mask);
        int rc;
        why[0] = '\0';
        rc = cudnn_sdpa_version_check(&p, cases[i].version, why, sizeof why);
        CHECK(rc == (cases[i].ok ? 0 : -1), "%s on %zu: rc %d: %s", label(&p), cases[i].version, rc, why);
        if (!cases[i].ok)
            CHECK(strstr(why, cases[i].words) && strstr(why, "cuDNN"), "%s on %zu names '%s': %s", label(&p),
                  cases[i].version, cases[i].words, why);
    }
    /* The loaded release (9.19 here) takes everything the unit tests run. */
    {
        attn_problem p = model(1, 8, 2, 128, 2048, 128, 0, 64, ATTN_BF16, ATTN_MASK_NONE);
        CHECK(cudnn_version() < 91900 || cudnn_sdpa_version_check(&p, cudnn_version(), why, sizeof why) == 0,
              "loaded release: %s", why);
    }
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
    q = p, q.kv_heads = 4, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "kv_heads is part of the key");
    q = p, q.kv_heads = 1, cudnn_sdpa_key_make(&q, 0, &a);
    q = p, q.kv_heads = 2, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "kv_heads 1 and 2 differ");
    cudnn_sdpa_key_make(&p, 0, &a);
    q = p, q.kv_heads = p.heads, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(cudnn_sdpa_key_equal(&a, &b), "kv_heads 0 is heads: the same plan");
    q = p, q.head_dim_v = 128, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "head_dim_v is part of the key");
    q = p, q.head_dim_v = p.head_dim, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(cudnn_sdpa_key_equal(&a, &b), "head_dim_v 0 is head_dim: the same plan");
    q = p, q.window_keys = 7, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "window_keys is part of the key");
    q = p, q.window_keys = 7, cudnn_sdpa_key_make(&q, 0, &a);
    q = p, q.window_keys = 8, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "each window its own plan (its bound is in the plan's variant pack)");
    cudnn_sdpa_key_make(&p, 0, &a);
    q = p, q.window_keys = -1, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(cudnn_sdpa_key_equal(&a, &b), "window -1 is none: the same plan");
    {
        /* Two problems differing only in a new field never share a cache slot. */
        q = p, q.head_dim_v = 128, cudnn_sdpa_key_make(&q, 0, &b);
        memset(&lru, 0, sizeof lru);
        cudnn_sdpa_lru_put(&lru, 0, &a);
        CHECK(cudnn_sdpa_lru_find(&lru, &b) == -1 && cudnn_sdpa_lru_find(&lru, &a) == 0, "lru tells them apart");
    }

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

/* The workspace: the front's bound (variant_info.c) follows the stats, B·H·Sq floats, and
 * workspace_bytes answers it when no plan can be built (no GPU here). */
static void test_workspace_bound(void)
{
    attn_problem p = problem(4, 32, 1000, 4096, 128, ATTN_BF16, ATTN_MASK_CAUSAL), q;
    size_t base = variant_info_cudnn.workspace_bound(&p), stats = (size_t)4 * 32 * 1000 * sizeof(float);
    CHECK(base >= stats + ((size_t)16 << 20) && base < stats + ((size_t)16 << 20) + 256, "bound %zu for stats %zu",
          base, stats);
    q = p, q.kv_heads = 8;
    CHECK(variant_info_cudnn.workspace_bound(&q) == base, "GQA: the stats follow the query heads");
    q = p, q.head_dim_v = 64;
    CHECK(variant_info_cudnn.workspace_bound(&q) == base, "head_dim_v does not change the stats");
    q = p, q.window_keys = 256;
    CHECK(variant_info_cudnn.workspace_bound(&q) == base, "a window does not change the stats");
    q = p, q.seq_q = 2000;
    CHECK(variant_info_cudnn.workspace_bound(&q) > base, "the stats grow with seq_q");
    q = p, q.heads = 64, q.kv_heads = 8;
    CHECK(variant_info_cudnn.workspace_bound(&q) > base, "the stats grow with the query heads");
}

/* plan_check without a GPU: cuDNN's static refusals answer 1 (a 422), the rest -1. */
static void test_plan_check_no_gpu(void)
{
    char why[512];
    attn_problem p = model(1, 8, 3, 64, 64, 64, 0, 0, ATTN_BF16, ATTN_MASK_NONE);
    CHECK(cudnn_sdpa_plan_check(&p, why, sizeof why) == 1 && strstr(why, "kv_heads"), "kv_heads 3 of 8: %s", why);
    p = model(1, 8, 2, 65, 64, 64, 0, 16, ATTN_BF16, ATTN_MASK_CAUSAL);
    CHECK(cudnn_sdpa_plan_check(&p, why, sizeof why) == 1 && strstr(why, "window_keys"), "window sq > skv: %s", why);
    p = model(1, 8, 2, 64, 64, 64, 128, 16, ATTN_BF16, ATTN_MASK_CAUSAL);
    CHECK(cudnn_sdpa_plan_check(&p, why, sizeof why) == -1 && strstr(why, "device"), "no device: %s", why);
    (void)cudaGetLastError();
}

/* ---- GPU part ------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Uniform in [-1, 1], rounded to p's dtype. */
static void fill(uint16_t *h, size_t n, attn_dtype t, unsigned *seed)
{
    size_t i;
    for (i = 0; i < n; i++) dtype_store_f32(h, t, (int64_t)i, (float)((rand_r(seed) % 2001) - 1000) / 1000.0f);
}

/* One forward on the GPU against reference_attention_f64 of the same bf16/fp16 inputs, at the
 * tolerance every case here uses (2e-2 bf16, 5e-3 fp16, absolute). A causal window of one
 * key is also checked without the oracle: each output row is its K/V head's value row at
 * the row's position, so the alignment and the head mapping are pinned down twice. (Without
 * a causal mask a window has no right bound: row i sees keys i..skv-1.) */
static void gpu_case(exec_context *ctx, attn_problem p, double plan_s)
{
    const size_t nq = (size_t)attn_q_elems(&p), nk = (size_t)attn_k_elems(&p), nv = (size_t)attn_v_elems(&p);
    const size_t no = (size_t)attn_out_elems(&p), dv = (size_t)attn_dv(&p);
    uint16_t *hq = malloc(nq * 2), *hk = malloc(nk * 2), *hv = malloc(nv * 2), *ho = malloc(no * 2);
    double *ref = malloc(no * sizeof(double));
    void *dq = NULL, *dk = NULL, *dv_ = NULL, *dout = NULL, *ws = NULL;
    size_t ws_bytes, i;
    attn_tensors t = {0}; /* no block table: a dense problem */
    double t1, t2, max_err = 0.0, w1_err = 0.0;
    int64_t nan_count = 0;
    unsigned seed = 12345u + (unsigned)(p.seq_q * 31 + p.seq_kv * 7 + p.head_dim + attn_dv(&p) + p.window_keys);
    const char *desc;

    if (!hq || !hk || !hv || !ho || !ref) {
        CHECK(0, "%s: out of host memory", label(&p));
        free(hq), free(hk), free(hv), free(ho), free(ref);
        return;
    }
    fill(hq, nq, p.dtype, &seed);
    fill(hk, nk, p.dtype, &seed);
    fill(hv, nv, p.dtype, &seed);
    CHECK(cudaMalloc(&dq, nq * 2) == cudaSuccess && cudaMalloc(&dk, nk * 2) == cudaSuccess &&
              cudaMalloc(&dv_, nv * 2) == cudaSuccess && cudaMalloc(&dout, no * 2) == cudaSuccess,
          "cudaMalloc");
    cudaMemcpy(dq, hq, nq * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dk, hk, nk * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dv_, hv, nv * 2, cudaMemcpyHostToDevice);
    cudaMemset(dout, 0xff, no * 2); /* NaN bytes: an element never written shows */

    ws_bytes = cudnn_sdpa_workspace_bytes(&p); /* the plan exists: plan_check built it */
    t1 = now_s();
    CHECK(ws_bytes <= variant_info_cudnn.workspace_bound(&p), "%s: workspace %zu B above the front's bound %zu B",
          label(&p), ws_bytes, variant_info_cudnn.workspace_bound(&p));
    if (ws_bytes) CHECK(cudaMalloc(&ws, ws_bytes) == cudaSuccess, "workspace");
    t.q = dq, t.k = dk, t.v = dv_, t.out = dout;
    exec_clear_error(ctx);
    CHECK(cudnn_sdpa_forward(ctx, &p, &t, ws) == 0, "forward %s: %s", label(&p), ctx->error);
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
        printf("  %s: plan %.3f s, first forward %.3f s, enqueue %.1f us; workspace %zu B; %s\n", label(&p), plan_s,
               t2 - t1, (b - a) / 20 * 1e6, ws_bytes, desc ? desc : "(no engine description)");
        CHECK(desc != NULL, "engine description");
    }
    {
        /* The worker's graph mode: capture one forward, replay it into a poisoned output. */
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        cudaMemset(dout, 0xff, no * 2);
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
    cudaMemcpy(ho, dout, no * 2, cudaMemcpyDeviceToHost);

    CHECK(reference_attention_f64(&p, hq, hk, hv, ref, 0) == 0, "reference out of memory");
    for (i = 0; i < no; i++) {
        double got = (double)dtype_load_f32(ho, p.dtype, (int64_t)i);
        if (isnan(got)) nan_count++;
        else if (fabs(got - ref[i]) > max_err) max_err = fabs(got - ref[i]);
    }
    if (p.window_keys == 1 && p.mask != ATTN_MASK_NONE) {
        const int64_t shift = p.mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT ? p.seq_kv - p.seq_q : 0;
        int64_t b, h, r;
        size_t x;
        for (b = 0; b < p.batch; b++)
            for (h = 0; h < p.heads; h++)
                for (r = 0; r < p.seq_q; r++) {
                    const int64_t kvh = b * attn_kv_heads(&p) + attn_kv_head_of(&p, h);
                    const size_t orow = (size_t)((b * p.heads + h) * p.seq_q + r) * dv;
                    const size_t vrow = (size_t)(kvh * p.seq_kv + r + shift) * dv;
                    for (x = 0; x < dv; x++) {
                        double e = fabs((double)dtype_load_f32(ho, p.dtype, (int64_t)(orow + x)) -
                                        (double)dtype_load_f32(hv, p.dtype, (int64_t)(vrow + x)));
                        if (!(e <= w1_err)) w1_err = isnan(e) ? INFINITY : e;
                    }
                }
        /* softmax over one key is exactly 1, so out is v itself; one last-bit step of slack */
        CHECK(w1_err <= (p.dtype == ATTN_BF16 ? 4e-3 : 1e-3), "%s: window of 1 key, out differs from v[pos] by %g",
              label(&p), w1_err);
    }
    printf("    max abs error %.3g, NaN %lld%s\n", max_err, (long long)nan_count,
           p.window_keys == 1 && p.mask != ATTN_MASK_NONE ? " (and out == v[pos])" : "");
    CHECK(nan_count == 0, "%s: %lld NaN outputs", label(&p), (long long)nan_count);
    CHECK(max_err < (p.dtype == ATTN_BF16 ? 2e-2 : 5e-3), "%s: max abs error %g", label(&p), max_err);

    cudaFree(dq), cudaFree(dk), cudaFree(dv_), cudaFree(dout), cudaFree(ws);
    free(hq), free(hk), free(hv), free(ho), free(ref);
}

/* plan_check first: a problem cuDNN must run is run; one it may refuse (`may_refuse`: a
 * head-dim pair outside its documented matrix, a release with a known bug) is either run
 * and checked the same way, or refused with a reason naming cuDNN (what the worker answers
 * 422), never a wrong answer. */
static void gpu_run(exec_context *ctx, attn_problem p, int may_refuse)
{
    char why[512] = "";
    double t0 = now_s();
    int rc = cudnn_sdpa_plan_check(&p, why, sizeof why);
    double plan_s = now_s() - t0;
    if (rc == 1 && may_refuse) {
        printf("  %s: refused by cuDNN, as allowed: %s\n", label(&p), why);
        CHECK(strstr(why, "cuDNN") != NULL, "%s: a refusal names cuDNN: %s", label(&p), why);
        {
            /* The forward refuses it the same way, before touching the (absent) tensors. */
            attn_tensors t = {0};
            exec_clear_error(ctx);
            CHECK(cudnn_sdpa_forward(ctx, &p, &t, NULL) == -1 && strstr(ctx->error, "cuDNN"),
                  "%s: forward of a refused problem: %s", label(&p), ctx->error);
        }
        return;
    }
    CHECK(rc == 0, "%s: plan_check %d: %s", label(&p), rc, why);
    if (rc == 0) gpu_case(ctx, p, plan_s);
}

static void test_gpu(void)
{
    const attn_dtype bf = ATTN_BF16, fp = ATTN_FP16;
    const attn_mask none = ATTN_MASK_NONE, tl = ATTN_MASK_CAUSAL, br = ATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    const int bug_91400 = cudnn_version() == 91400; /* window, no causal mask, skv > 1024 */
    exec_context ctx;
    int w;
    memset(&ctx, 0, sizeof ctx);
    ctx.device = 0;
    CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice");
    CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
    test_graph_descriptors(1);

    printf("dense multi-head:\n");
    gpu_run(&ctx, problem(1, 2, 256, 256, 64, bf, none), 0);
    gpu_run(&ctx, problem(1, 2, 256, 256, 64, bf, tl), 0);
    gpu_run(&ctx, problem(1, 2, 200, 328, 64, bf, tl), 0);
    gpu_run(&ctx, problem(1, 2, 136, 328, 64, bf, br), 0);
    gpu_run(&ctx, problem(2, 2, 128, 128, 128, fp, tl), 0);
    gpu_run(&ctx, problem(1, 1, 64, 64, 256, bf, none), 0);
    gpu_run(&ctx, problem(1, 2, 328, 200, 64, bf, tl), 0); /* top-left, sq > skv */
    gpu_run(&ctx, problem(2, 4, 1, 300, 64, bf, br), 0);   /* decode */
    {
        attn_problem p = problem(1, 2, 256, 256, 64, bf, tl);
        p.scale = 0.3; /* cached plan, new by-value scale */
        gpu_run(&ctx, p, 0);
    }

    printf("grouped-query (kv_heads < heads):\n");
    gpu_run(&ctx, model(2, 8, 1, 128, 128, 64, 0, 0, bf, none), 0);     /* MQA */
    gpu_run(&ctx, model(2, 8, 1, 128, 128, 64, 0, 0, bf, tl), 0);
    gpu_run(&ctx, model(2, 8, 4, 128, 256, 128, 0, 0, bf, tl), 0);      /* H/2 */
    gpu_run(&ctx, model(2, 8, 8, 128, 256, 128, 0, 0, bf, tl), 0);      /* same shape, kv_heads = heads: its own plan */
    gpu_run(&ctx, model(2, 8, 2, 128, 256, 128, 0, 0, bf, tl), 0);      /* and back to grouped */
    gpu_run(&ctx, model(1, 8, 2, 136, 328, 64, 0, 0, bf, br), 0);
    gpu_run(&ctx, model(2, 8, 1, 1, 300, 128, 0, 0, bf, br), 0);        /* MQA decode */
    gpu_run(&ctx, model(3, 32, 8, 1, 513, 128, 0, 0, bf, none), 0);     /* Llama decode, odd skv */
    gpu_run(&ctx, model(1, 4, 2, 77, 77, 64, 0, 0, fp, tl), 0);
    gpu_run(&ctx, model(1, 6, 3, 333, 77, 64, 0, 0, bf, tl), 0);        /* top-left, sq > skv */
    gpu_run(&ctx, model(1, 16, 2, 512, 512, 256, 0, 0, bf, tl), 0);     /* head_dim 256 */

    printf("sliding windows (W = 1, 7, past the keys; every mask):\n");
    for (w = 0; w < 3; w++) {
        const int64_t wk[3] = {1, 7, 500}; /* 500 > skv below: a window that hides nothing */
        gpu_run(&ctx, model(1, 2, 0, 128, 128, 64, 0, wk[w], bf, tl), 0);
        gpu_run(&ctx, model(1, 2, 0, 200, 328, 64, 0, wk[w], bf, tl), 0);     /* top-left, sq < skv */
        gpu_run(&ctx, model(1, 2, 0, 136, 328, 64, 0, wk[w], bf, br), 0);
        gpu_run(&ctx, model(1, 2, 0, 256, 256, 64, 0, wk[w], bf, br), 0);     /* sq == skv */
        gpu_run(&ctx, model(1, 2, 0, 128, 256, 64, 0, wk[w], bf, none), 0);
        gpu_run(&ctx, model(1, 2, 0, 77, 333, 64, 0, wk[w], bf, none), 0);
        gpu_run(&ctx, model(2, 8, 2, 1, 300, 128, 0, wk[w], bf, br), 0);      /* decode: the last W keys */
        gpu_run(&ctx, model(2, 8, 2, 1, 300, 128, 0, wk[w], bf, none), 0);    /* no right bound: hides nothing */
        gpu_run(&ctx, model(1, 4, 1, 77, 77, 64, 0, wk[w], fp, tl), 0);
    }
    /* Two windows of one shape back to back: a shared plan would keep the first one's bound. */
    gpu_run(&ctx, model(1, 2, 0, 200, 328, 64, 0, 7, bf, tl), 0);
    gpu_run(&ctx, model(1, 2, 0, 200, 328, 64, 0, 8, bf, tl), 0);
    gpu_run(&ctx, model(1, 2, 0, 200, 328, 64, 0, 328, bf, br), 0);           /* W = skv */
    gpu_run(&ctx, model(1, 2, 0, 200, 328, 64, 0, 327, bf, br), 0);           /* skv - 1: the last row loses key 0 */
    gpu_run(&ctx, model(2, 8, 2, 1024, 1024, 128, 0, 128, bf, tl), 0);       /* Mistral-like, GQA + window */
    gpu_run(&ctx, model(1, 8, 2, 512, 2048, 128, 0, 256, bf, none), bug_91400); /* skv > 1024, no causal mask */
    gpu_run(&ctx, model(1, 8, 2, 512, 2048, 128, 0, 256, bf, br), 0);
    gpu_run(&ctx, model(3, 6, 3, 65, 129, 72, 0, 33, bf, tl), 0);            /* head_dim 72, odd everything */

    printf("value head dim of its own:\n");
    gpu_run(&ctx, model(1, 4, 0, 128, 128, 192, 128, 0, bf, tl), 0);         /* DeepSeek-V3 */
    gpu_run(&ctx, model(1, 4, 0, 128, 128, 192, 128, 0, fp, none), 0);
    gpu_run(&ctx, model(2, 8, 0, 77, 333, 192, 128, 0, bf, br), 0);
    gpu_run(&ctx, model(2, 8, 0, 1, 256, 192, 128, 0, bf, none), 0);         /* decode */
    gpu_run(&ctx, model(1, 8, 2, 256, 256, 192, 128, 64, bf, tl), 0);        /* all three */
    gpu_run(&ctx, model(1, 8, 2, 136, 328, 192, 128, 7, fp, br), 0);
    gpu_run(&ctx, model(1, 8, 1, 1, 300, 192, 128, 1, bf, br), 0);
    gpu_run(&ctx, model(1, 4, 0, 128, 256, 64, 128, 0, bf, tl), 1);          /* outside the documented pairs */
    gpu_run(&ctx, model(1, 4, 2, 128, 256, 64, 128, 7, bf, br), 1);
    gpu_run(&ctx, model(1, 4, 0, 128, 256, 128, 64, 0, bf, tl), 1);
    gpu_run(&ctx, model(1, 4, 0, 128, 256, 128, 256, 0, bf, none), 1);

    printf("odd sizes:\n");
    gpu_run(&ctx, model(1, 2, 0, 1, 1, 64, 0, 0, bf, none), 1);              /* cudnn-frontend refuses it in training */
    gpu_run(&ctx, model(1, 2, 0, 1, 1, 64, 0, 0, bf, br), 1);
    gpu_run(&ctx, model(1, 2, 2, 77, 77, 64, 0, 0, bf, none), 0);
    gpu_run(&ctx, model(2, 3, 1, 77, 200, 64, 0, 0, bf, br), 0);
    gpu_run(&ctx, model(1, 2, 1, 333, 77, 64, 0, 0, bf, tl), 0);
    gpu_run(&ctx, model(1, 2, 0, 1, 17, 64, 0, 0, bf, tl), 0);               /* top-left decode: key 0 only */
    gpu_run(&ctx, model(5, 3, 1, 129, 1000, 40, 0, 0, fp, br), 0);

    gpu_run(&ctx, problem(8, 16, 1024, 1024, 64, bf, tl), 0); /* the study's shape */
    cudnn_sdpa_release();
    cudaStreamDestroy(ctx.stream);
}

int main(void)
{
    int gpus = 0;
    /* The cuDNN to test, as the `cudnn_library` setting names one (scripts/gpu-session.sh: the
     * one PyTorch loads); unset: the loader's own search. */
    if (getenv("ATTND_CUDNN_LIBRARY")) cudnn_set_library(getenv("ATTND_CUDNN_LIBRARY"));
    test_load();
    test_descriptor_and_errors();
    test_try_macro();
    test_check();
    test_check_models();
    test_version_rules();
    test_keys_and_lru();
    test_graph_descriptors(0);
    test_workspace_bound();
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
        test_plan_check_no_gpu();
        CHECK(cudnn_sdpa_workspace_bytes(&p) == variant_info_cudnn.workspace_bound(&p), "bound without a GPU");
        CHECK(cudnn_sdpa_engine_desc(&p) == NULL, "no engine without a plan");
    }
    cudnn_sdpa_release();
    return CHECK_DONE();
}
