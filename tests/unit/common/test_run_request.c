/* test_run_request.c — run_request_parse, run_request_parse_body (the raw body: integers
 * written 1e3), the JSON codec and run_request_macs.
 *
 * Runs against whatever variants table it is linked with: backends are taken from
 * variant_infos[] (a GPU one and the cpu one), and the 422 case only runs when some variant has
 * a limit (a dtype it lacks, a head_dim maximum or multiple). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/variant_info.h"
#include "common/run_request.h"
#include "tests/unit/check.h"

/* The lengths seed 0 draws for 6 sequences from uniform:1:8 (seqlens_q) and uniform:100:199
 * (seqlens_kv); docs/inputs.md and tests/api/test_numpy_generator.py have them too. */
#define SEQLENS_GOLD_Q 1, 7, 6, 2, 7, 2
#define SEQLENS_GOLD_KV 121, 148, 124, 170, 111, 179

static const char *gpu_backend, *cpu_backend;

/* A query string "a=1&b=2" (no escaping) as the object of strings http.c makes of one. */
static cJSON *query_object(const char *query)
{
    cJSON *q = cJSON_CreateObject();
    char buf[1024], *save = NULL, *pair;

    if (query) {
        snprintf(buf, sizeof buf, "%s", query);
        for (pair = strtok_r(buf, "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
            char *eq = strchr(pair, '=');
            if (eq) *eq = '\0';
            cJSON_AddStringToObject(q, pair, eq ? eq + 1 : "");
        }
    }
    return q;
}

/* Parse a query string plus an optional JSON body text. */
static int parse(run_request *r, const char *query, const char *body_text, int allow_faults, api_error *e)
{
    cJSON *q = query_object(query), *b = NULL;
    int rc;

    if (body_text) {
        b = cJSON_Parse(body_text);
        if (!b) {
            fprintf(stderr, "bad test body: %s\n", body_text);
            exit(2);
        }
    }
    memset(e, 0, sizeof *e);
    rc = run_request_parse(r, q, b, allow_faults, e);
    if (rc == 0) rc = run_request_check(r, 0, e); /* as the front does next */
    cJSON_Delete(q);
    cJSON_Delete(b);
    return rc;
}

/* Expect a refusal with this status, code and field. */
static void expect_fail(const char *query, const char *body, int status, const char *code, const char *field)
{
    run_request r;
    api_error e;
    int rc = parse(&r, query, body, 0, &e);

    CHECK(rc == -1, "query '%s' body '%s' was accepted", query ? query : "", body ? body : "");
    CHECK(e.status == status, "query '%s' body '%s': status %d, want %d (%s)", query ? query : "",
          body ? body : "", e.status, status, e.message);
    CHECK(!strcmp(e.code, code), "query '%s' body '%s': code %s, want %s", query ? query : "", body ? body : "",
          e.code, code);
    CHECK(!strcmp(e.field, field), "query '%s' body '%s': field '%s', want '%s'", query ? query : "",
          body ? body : "", e.field, field);
    CHECK(e.message[0] != '\0', "query '%s': empty message", query ? query : "");
}

static void expect_ok(const char *query, const char *body, run_request *r)
{
    api_error e;
    int rc = parse(r, query, body, 0, &e);
    CHECK(rc == 0, "query '%s' body '%s' refused: %d %s %s (%s)", query ? query : "", body ? body : "", e.status,
          e.code, e.field, e.message);
}

static void test_defaults(void)
{
    char q[128];
    run_request r;

    snprintf(q, sizeof q, "backend=%s", gpu_backend);
    expect_ok(q, NULL, &r);
    CHECK(!strcmp(r.backend, gpu_backend), "backend %s", r.backend);
    CHECK(r.device[0] == '\0', "device '%s'", r.device);
    CHECK(r.problem.batch == 8 && r.problem.heads == 16, "batch/heads");
    CHECK(r.problem.seq_q == 1024 && r.problem.seq_kv == 1024, "seq");
    CHECK(r.problem.head_dim == 64, "head_dim");
    CHECK(r.problem.dtype == ATTN_BF16, "dtype");
    CHECK(r.problem.mask == ATTN_MASK_CAUSAL, "mask");
    CHECK(r.problem.scale == 0.125 && !r.scale_given, "scale %g", r.problem.scale);
    CHECK(r.seed == 0 && r.warmup == 5 && r.iters == 0, "seed/warmup/iters");
    CHECK(r.min_iters == 10 && r.max_iters == 1000, "min/max iters");
    CHECK(r.min_time_ms == 20.0 && r.max_time_ms == 2000.0, "times");
    CHECK(r.target_noise == 0.005, "target_noise");
    CHECK(!r.cache_cold && !r.graph && !r.verify && r.profile, "flags");
    CHECK(r.fault[0] == '\0', "fault");
    CHECK(run_request_macs(&r) == 8LL * 16 * 1024 * 1024 * 64, "macs %lld", run_request_macs(&r));
}

static void test_values(void)
{
    char q[512];
    run_request r;

    snprintf(q, sizeof q,
             "backend=%s&batch=2&heads=3&seq=100&seq_kv=77&head_dim=32&dtype=fp32&causal=false&seed=42"
             "&warmup=0&iters=7&cache=cold&graph=true&verify=true&profile=false&device=cuda:1&min_time_ms=0.5"
             "&max_time_ms=10&target_noise=0.01&min_iters=3&max_iters=9",
             gpu_backend);
    expect_ok(q, NULL, &r);
    CHECK(r.problem.batch == 2 && r.problem.heads == 3, "b/h");
    CHECK(r.problem.seq_q == 100 && r.problem.seq_kv == 77, "seq_q %lld seq_kv %lld", (long long)r.problem.seq_q,
          (long long)r.problem.seq_kv);
    CHECK(r.problem.head_dim == 32 && r.problem.dtype == ATTN_FP32, "d/dtype");
    CHECK(r.problem.mask == ATTN_MASK_NONE, "mask");
    CHECK(fabs(r.problem.scale - 1.0 / sqrt(32.0)) < 1e-15, "scale follows head_dim");
    CHECK(r.seed == 42 && r.warmup == 0 && r.iters == 7, "seed/warmup/iters");
    CHECK(r.cache_cold && r.graph && r.verify && !r.profile, "flags");
    CHECK(!strcmp(r.device, "cuda:1"), "device");
    CHECK(r.min_time_ms == 0.5 && r.max_time_ms == 10 && r.target_noise == 0.01, "times");
    CHECK(r.min_iters == 3 && r.max_iters == 9, "iters bounds");

    /* JSON body: numbers, booleans; the query wins over the body. */
    snprintf(q, sizeof q, "backend=%s&batch=4", gpu_backend);
    expect_ok(q, "{\"batch\": 5, \"heads\": 2, \"causal\": true, \"mask\": \"causal_bottom_right\", \"scale\": 0.5,"
                 " \"verify\": true, \"seed\": \"18446744073709551615\", \"seq_q\": \"64\"}",
              &r);
    CHECK(r.problem.batch == 4, "query wins: batch %lld", (long long)r.problem.batch);
    CHECK(r.problem.heads == 2 && r.problem.seq_q == 64 && r.problem.seq_kv == 1024, "body values");
    CHECK(r.problem.mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT, "mask");
    CHECK(r.problem.scale == 0.5 && r.scale_given, "scale");
    CHECK(r.verify == 1, "verify");
    CHECK(r.seed == UINT64_MAX, "seed 2^64-1");

    /* mask=none alone; seed from the query at its maximum. */
    snprintf(q, sizeof q, "backend=%s&mask=none&seed=18446744073709551615&scale=-2e-1", gpu_backend);
    expect_ok(q, NULL, &r);
    CHECK(r.problem.mask == ATTN_MASK_NONE && r.seed == UINT64_MAX && r.problem.scale == -0.2, "mask/seed/scale");

    /* A JSON null counts as not given. */
    snprintf(q, sizeof q, "{\"backend\": \"%s\", \"seed\": null, \"scale\": null}", cpu_backend);
    expect_ok(NULL, q, &r);
    CHECK(!r.scale_given, "null scale");

    /* Faults only when allowed. */
    {
        api_error e;
        snprintf(q, sizeof q, "backend=%s&fault=crash", gpu_backend);
        CHECK(parse(&r, q, NULL, 1, &e) == 0 && !strcmp(r.fault, "crash"), "fault accepted when allowed: %s",
              e.message);
        snprintf(q, sizeof q, "backend=%s&fault=boom", gpu_backend);
        CHECK(parse(&r, q, NULL, 1, &e) == -1 && e.status == 400 && !strcmp(e.field, "fault"), "bad fault value");
    }
}

static void test_refusals(void)
{
    char q[256], b[256];

#define Q(fmt) (snprintf(q, sizeof q, "backend=%s&" fmt, gpu_backend), q)
    expect_fail("batch=2", NULL, 400, "missing_parameter", "backend");
    expect_fail("backend=nosuch", NULL, 400, "unknown_backend", "backend");
    expect_fail("backend=", NULL, 400, "unknown_backend", "backend");
    expect_fail(Q("bogus=1"), NULL, 400, "unknown_parameter", "bogus");
    expect_fail(Q("fault=crash"), NULL, 400, "unknown_parameter", "fault");
    expect_fail(Q("qq=5"), NULL, 400, "unknown_parameter", "qq"); /* q is a tensor id */
    expect_fail(Q("batch=abc"), NULL, 400, "bad_value", "batch");
    expect_fail(Q("batch=1e3"), NULL, 400, "bad_value", "batch");
    expect_fail(Q("batch=8x"), NULL, 400, "bad_value", "batch");
    expect_fail(Q("batch= 8"), NULL, 400, "bad_value", "batch");
    expect_fail(Q("batch="), NULL, 400, "bad_value", "batch");
    expect_fail(Q("batch=0"), NULL, 400, "out_of_range", "batch");
    expect_fail(Q("heads=-1"), NULL, 400, "out_of_range", "heads");
    expect_fail(Q("seq=99999999999999999999"), NULL, 400, "out_of_range", "seq");
    expect_fail(Q("head_dim=2147483649"), NULL, 400, "out_of_range", "head_dim");
    expect_fail(Q("seq=2147483648&batch=2147483648&heads=2147483648"), NULL, 400, "out_of_range", "seq_q");
    expect_fail(Q("seq_q=1048576&seq_kv=1048576&batch=2"), NULL, 400, "out_of_range", "seq_kv");
    expect_fail(Q("batch=1048576&heads=1048576&head_dim=2"), NULL, 400, "out_of_range", "seq_q");
    expect_fail(Q("dtype=fp8"), NULL, 400, "bad_value", "dtype");
    expect_fail(Q("mask=diagonal"), NULL, 400, "bad_value", "mask");
    expect_fail(Q("causal=maybe"), NULL, 400, "bad_value", "causal");
    expect_fail(Q("causal=false&mask=causal"), NULL, 400, "conflict", "causal");
    expect_fail(Q("causal=true&mask=none"), NULL, 400, "conflict", "causal");
    expect_fail(Q("scale=nan"), NULL, 400, "bad_value", "scale"); /* no JSON number */
    expect_fail(Q("scale=1e308"), NULL, 400, "out_of_range", "scale");
    expect_fail(Q("scale=-1e308"), NULL, 400, "out_of_range", "scale");
    expect_fail(Q("scale=10000.001"), NULL, 400, "out_of_range", "scale");
    expect_fail(Q("scale=-0"), NULL, 400, "out_of_range", "scale");
    expect_fail(Q("scale=inf"), NULL, 400, "bad_value", "scale");
    expect_fail(Q("scale=1e999"), NULL, 400, "out_of_range", "scale");
    expect_fail(Q("scale=0"), NULL, 400, "out_of_range", "scale");
    expect_fail(Q("scale=0.1x"), NULL, 400, "bad_value", "scale");
    expect_fail(Q("seed=-1"), NULL, 400, "bad_value", "seed");
    expect_fail(Q("seed=18446744073709551616"), NULL, 400, "out_of_range", "seed");
    expect_fail(Q("seed=1.5"), NULL, 400, "bad_value", "seed");
    expect_fail(Q("warmup=10001"), NULL, 400, "out_of_range", "warmup");
    expect_fail(Q("iters=-1"), NULL, 400, "out_of_range", "iters");
    expect_fail(Q("iters=100001"), NULL, 400, "out_of_range", "iters");
    expect_fail(Q("min_iters=0"), NULL, 400, "out_of_range", "min_iters");
    expect_fail(Q("min_iters=50&max_iters=20"), NULL, 400, "out_of_range", "min_iters");
    expect_fail(Q("max_time_ms=600001"), NULL, 400, "out_of_range", "max_time_ms");
    expect_fail(Q("min_time_ms=3000"), NULL, 400, "out_of_range", "min_time_ms");
    expect_fail(Q("target_noise=0"), NULL, 400, "out_of_range", "target_noise");
    expect_fail(Q("target_noise=1"), NULL, 400, "out_of_range", "target_noise");
    expect_fail(Q("cache=warm"), NULL, 400, "bad_value", "cache");
    expect_fail(Q("graph=yes please"), NULL, 400, "bad_value", "graph");
    expect_fail(Q("device=cuda:0123456789abcdef"), NULL, 400, "bad_device", "device");
    /* One spelling of a number, in the query as in a body: JSON's, and for an integer no
     * '+', no leading zero, no -0; booleans are true or false. */
    expect_fail(Q("batch=+1"), NULL, 400, "bad_value", "batch");
    expect_fail(Q("batch=01"), NULL, 400, "bad_value", "batch");
    expect_fail(Q("window=-0"), NULL, 400, "bad_value", "window");
    expect_fail(Q("iters=00"), NULL, 400, "bad_value", "iters");
    expect_fail(Q("seed=+12"), NULL, 400, "bad_value", "seed");
    expect_fail(Q("seed=012"), NULL, 400, "bad_value", "seed");
    expect_fail(Q("verify_cpu_max_macs=+5"), NULL, 400, "bad_value", "verify_cpu_max_macs");
    expect_fail(Q("scale=+0.5"), NULL, 400, "bad_value", "scale");
    expect_fail(Q("scale=.5"), NULL, 400, "bad_value", "scale");
    expect_fail(Q("scale=5."), NULL, 400, "bad_value", "scale");
    expect_fail(Q("scale=0x10"), NULL, 400, "bad_value", "scale");
    expect_fail(Q("min_time_ms=01.5"), NULL, 400, "bad_value", "min_time_ms");
    expect_fail(Q("verify=1"), NULL, 400, "bad_value", "verify");
    expect_fail(Q("profile=0"), NULL, 400, "bad_value", "profile");
    expect_fail(Q("causal=TRUE"), NULL, 400, "bad_value", "causal");
    expect_fail(Q("heads=-3"), NULL, 400, "out_of_range", "heads"); /* spelled right, below 1 */
#undef Q

    /* Body types. */
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"batch\": 2.5}", gpu_backend);
    expect_fail(NULL, b, 400, "bad_value", "batch");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"batch\": true}", gpu_backend);
    expect_fail(NULL, b, 400, "bad_value", "batch");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"batch\": 1e300}", gpu_backend);
    expect_fail(NULL, b, 400, "out_of_range", "batch");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"dtype\": 16}", gpu_backend);
    expect_fail(NULL, b, 400, "bad_value", "dtype");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"verify\": 2}", gpu_backend);
    expect_fail(NULL, b, 400, "bad_value", "verify");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"verify\": 1}", gpu_backend);
    expect_fail(NULL, b, 400, "bad_value", "verify");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"verify\": \"1\"}", gpu_backend);
    expect_fail(NULL, b, 400, "bad_value", "verify");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"batch\": \"+1\"}", gpu_backend);
    expect_fail(NULL, b, 400, "bad_value", "batch");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"seed\": \"+12\"}", gpu_backend);
    expect_fail(NULL, b, 400, "bad_value", "seed");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"seed\": 18446744073709551615}", gpu_backend);
    expect_fail(NULL, b, 400, "out_of_range", "seed");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"heads\": 2, \"heads\": 3}", gpu_backend);
    expect_fail(NULL, b, 400, "duplicate_parameter", "heads");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"shape\": [1,2]}", gpu_backend);
    expect_fail(NULL, b, 400, "unknown_parameter", "shape");
    expect_fail(NULL, "{\"backend\": 3}", 400, "bad_value", "backend");
}

/* 422 for a limit of some variant in the table (skipped when no variant has one). */
static void test_unsupported(void)
{
    size_t i;
    char q[256];
    int t;

    for (i = 0; i < variant_infos_count; i++) {
        const variant_info *v = variant_infos[i];
        for (t = 0; t < ATTN_DTYPE_COUNT; t++)
            if (!(v->dtypes & VARIANT_DTYPE(t))) {
                snprintf(q, sizeof q, "backend=%s&dtype=%s", v->name, attn_dtype_name((attn_dtype)t));
                expect_fail(q, NULL, 422, "unsupported", "dtype");
            }
        if (v->max_head_dim > 0) {
            snprintf(q, sizeof q, "backend=%s&head_dim=%d", v->name, v->max_head_dim + v->head_dim_multiple);
            expect_fail(q, NULL, 422, "unsupported", "head_dim");
        }
        if (v->head_dim_multiple > 1) {
            snprintf(q, sizeof q, "backend=%s&head_dim=%d", v->name, v->head_dim_multiple + 1);
            expect_fail(q, NULL, 422, "unsupported", "head_dim");
        }
    }
}

/* to_json then from_json gives the same request and the same JSON. */
static void round_trip(const char *query, const char *body, int allow_faults)
{
    run_request a, b;
    api_error e;
    cJSON *ja, *jb;
    char *ta, *tb;

    CHECK(parse(&a, query, body, allow_faults, &e) == 0, "round trip parse '%s': %s", query, e.message);
    a.verify_cpu_max_macs = 123456789012LL;
    ja = run_request_to_json(&a);
    CHECK(ja != NULL, "to_json");
    if (!ja) return;
    ta = cJSON_PrintUnformatted(ja);
    CHECK(run_request_from_json(&b, ja, &e) == 0, "from_json of %s: %s", ta, e.message);
    jb = run_request_to_json(&b);
    tb = cJSON_PrintUnformatted(jb);
    CHECK(!strcmp(ta, tb), "JSON differs:\n  %s\n  %s", ta, tb);
    CHECK(!strcmp(a.backend, b.backend) && !strcmp(a.device, b.device) && !strcmp(a.fault, b.fault) &&
              !strcmp(a.impl, b.impl),
          "strings");
    CHECK(!memcmp(&a.problem, &b.problem, sizeof a.problem), "problem differs for %s", ta);
    CHECK(a.scale_given == b.scale_given, "scale_given %d vs %d", a.scale_given, b.scale_given);
    CHECK(a.seed == b.seed && a.warmup == b.warmup && a.iters == b.iters && a.min_iters == b.min_iters &&
              a.max_iters == b.max_iters,
          "ints");
    CHECK(a.min_time_ms == b.min_time_ms && a.max_time_ms == b.max_time_ms && a.target_noise == b.target_noise,
          "doubles");
    CHECK(a.cache_cold == b.cache_cold && a.graph == b.graph && a.verify == b.verify && a.profile == b.profile,
          "flags");
    CHECK(a.verify_cpu_max_macs == b.verify_cpu_max_macs, "verify_cpu_max_macs");
    free(ta);
    free(tb);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
}

/* Parse query "a=1&b=2" (no escaping) and a raw body text with run_request_parse_body. */
static int parse_text(run_request *r, const char *query, const char *body, api_error *e)
{
    cJSON *q = query_object(query);
    int rc;

    memset(e, 0, sizeof *e);
    rc = run_request_parse_body(r, q, body, body ? strlen(body) : 0, 0, e);
    cJSON_Delete(q);
    return rc;
}

static void expect_text_fail(const char *query, const char *body, const char *code, const char *field)
{
    run_request r;
    api_error e;
    int rc = parse_text(&r, query, body, &e);
    CHECK(rc == -1 && e.status == 400 && !strcmp(e.code, code) && !strcmp(e.field, field),
          "body %s: %d %s '%s' (%s), want 400 %s '%s'", body, e.status, e.code, e.field, e.message, code, field);
}

static void test_body_text(void)
{
    static const char *const integers[] = {"batch", "heads", "seq", "seq_q", "seq_kv", "head_dim", "seed",
                                           "warmup", "iters", "min_iters", "max_iters", "verify_cpu_max_macs"};
    static const char *const written[] = {"1e3", "8.0", "1E1", "-2.5e0", "10e-1"};
    char b[512], q[128];
    run_request r;
    api_error e;
    size_t i, k;

    /* An integer written with an exponent or a fraction: refused, whichever parameter. */
    for (i = 0; i < sizeof integers / sizeof integers[0]; i++)
        for (k = 0; k < sizeof written / sizeof written[0]; k++) {
            snprintf(b, sizeof b, "{\"backend\": \"%s\", \"%s\": %s}", cpu_backend, integers[i], written[k]);
            expect_text_fail(NULL, b, "bad_value", integers[i]);
        }
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"batch\": 1e300}", cpu_backend);
    expect_text_fail(NULL, b, "bad_value", "batch");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"batch\": 1e3}", cpu_backend);
    CHECK(parse_text(&r, NULL, b, &e) == -1 && strstr(e.message, "1e3"), "the message shows the text: %s", e.message);
    /* A UTF-8 byte order mark, which cJSON skips, hides nothing. */
    snprintf(b, sizeof b, "\xEF\xBB\xBF{\"backend\": \"%s\", \"batch\": 1e3}", cpu_backend);
    expect_text_fail(NULL, b, "bad_value", "batch");
    /* Member names are compared decoded, as the parsed body has them. */
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"b\\u0061tch\": 2.0}", cpu_backend);
    expect_text_fail(NULL, b, "bad_value", "batch");
    /* Nested values and strings that look like numbers are skipped over (integers are
     * checked before the other values). */
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"device\": \"1e3\", \"mask\": \"x\\\"y\", \"batch\": 1.5}",
             cpu_backend);
    expect_text_fail(NULL, b, "bad_value", "batch");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"device\": \"1e3\", \"mask\": \"x\\\"y\", \"batch\": 1}",
             cpu_backend);
    expect_text_fail(NULL, b, "bad_value", "mask");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"shape\": [1e3, {\"a\": 2.0}], \"batch\": 2}", cpu_backend);
    expect_text_fail(NULL, b, "unknown_parameter", "shape");
    /* The same values written as integers, and reals with exponents, are fine. */
    snprintf(b, sizeof b,
             " {\"backend\": \"%s\", \"batch\": 3, \"heads\": -0, \"seq\": 1000, \"scale\": 2.5e-1,"
             " \"min_time_ms\": 1e1, \"target_noise\": 5E-3, \"verify\": true, \"dtype\": null} \n",
             cpu_backend);
    CHECK(parse_text(&r, NULL, b, &e) == -1 && !strcmp(e.field, "heads") && !strcmp(e.code, "bad_value"),
          "heads -0 is no integer's spelling: %s %s", e.code, e.field);
    snprintf(b, sizeof b,
             "{\"backend\": \"%s\", \"batch\": 3, \"seq\": 1000, \"scale\": 2.5e-1, \"min_time_ms\": 1e1,"
             " \"target_noise\": 5E-3, \"verify\": true, \"dtype\": null}",
             cpu_backend);
    CHECK(parse_text(&r, NULL, b, &e) == 0, "reals with exponents: %s", e.message);
    CHECK(r.problem.batch == 3 && r.problem.scale == 0.25 && r.min_time_ms == 10.0 && r.target_noise == 0.005,
          "values");
    /* The query wins, so its integer is the one checked. */
    snprintf(q, sizeof q, "backend=%s&batch=4", cpu_backend);
    CHECK(parse_text(&r, q, "{\"batch\": 1e3}", &e) == 0 && r.problem.batch == 4, "query wins: %s", e.message);
    /* No body, an empty one. */
    CHECK(parse_text(&r, q, NULL, &e) == 0, "no body");
    CHECK(run_request_parse_body(&r, NULL, "", 0, 0, &e) == -1 && !strcmp(e.code, "missing_parameter"), "empty");
    /* Not JSON, not an object, junk after it, a NUL byte: bad_json, no field. */
    expect_text_fail(NULL, "{\"batch\": 1", "bad_json", "");
    expect_text_fail(NULL, "[1]", "bad_json", "");
    expect_text_fail(NULL, "{} {}", "bad_json", "");
    CHECK(run_request_parse_body(&r, NULL, "{}\0{}", 5, 0, &e) == -1 && !strcmp(e.code, "bad_json") &&
              strstr(e.message, "NUL"),
          "NUL byte");
    expect_text_fail(NULL, "{\"batch\": 1x}", "bad_json", "");
    CHECK(parse_text(&r, NULL, "{\"batch\": 1x}", &e) == -1 && strstr(e.message, "at byte 11 of 13"),
          "offset: %s", e.message);
    /* What cJSON reads loosely (json_text_parse): numbers JSON does not write, control bytes,
     * and junk after a NUL. */
    expect_text_fail(NULL, "{\"batch\": 01}", "bad_value", "batch");
    expect_text_fail(NULL, "{\"scale\": 1.}", "bad_value", "scale");
    expect_text_fail(NULL, "{\"scale\": -01.5}", "bad_value", "scale");
    expect_text_fail(NULL, "{\"batch\":\x01 1}", "bad_json", "");
    expect_text_fail(NULL, "{\"device\": \"cpu\n\"}", "bad_json", "");
    expect_text_fail(NULL, "{}\x01", "bad_json", "");

    /* \u0000 in a name or a value: cJSON would cut the string there ("iters\u0000junk" read
     * as iters). bad_value naming the member, as written. */
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"iters\\u0000junk\": 3}", cpu_backend);
    expect_text_fail(NULL, b, "bad_value", "iters\\u0000junk");
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"iters\": 1, \"warmup\": 0, \"device\": \"cpu\\u0000x\"}", cpu_backend);
    expect_text_fail(NULL, b, "bad_value", "device");
    CHECK(parse_text(&r, NULL, b, &e) == -1 && strstr(e.message, "\\u0000"), "says why: %s", e.message);
    snprintf(b, sizeof b, "{\"backend\": \"%s\\u0000\"}", cpu_backend);
    expect_text_fail(NULL, b, "bad_value", "backend");
    expect_text_fail(NULL, "{\"backend\": [\"a\\u0000\"]}", "bad_value", "backend");
    /* A backslash before u0000 is an escaped backslash, not an escape: an unknown name. */
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"iters\\\\u0000\": 3}", cpu_backend);
    expect_text_fail(NULL, b, "unknown_parameter", "iters\\u0000");
    /* A key given twice, escaped the second time, is still the same parameter. */
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"iters\": 3, \"it\\u0065rs\": 4}", cpu_backend);
    expect_text_fail(NULL, b, "duplicate_parameter", "iters");

    /* unknown_parameter lists every name accepted, those posted back from a stored params
     * object included (and fault only with allow_faults). */
    snprintf(b, sizeof b, "{\"backend\": \"%s\", \"bogus\": 1}", cpu_backend);
    CHECK(parse_text(&r, NULL, b, &e) == -1 && !strcmp(e.code, "unknown_parameter"), "unknown");
    CHECK(strstr(e.message, "verify_cpu_max_macs") && strstr(e.message, "output_tensor") &&
              strstr(e.message, "keep_output") && strstr(e.message, "target_noise") && !strstr(e.message, "fault") &&
              strstr(e.message, "bogus"),
          "the known list: %s", e.message);
    CHECK(strlen(e.message) < sizeof e.message - 1, "not truncated: %zu chars", strlen(e.message));
}

/* A stored "params" object, printed as the store has it, posts back as a body: integers
 * cJSON would print with an exponent (10^15 and up) are written as decimal strings. */
static void test_params_post_back(void)
{
    static const uint64_t seeds[] = {0, 999999999999999ULL, 1000000000000000ULL, 4000000000000000ULL,
                                     9007199254740993ULL, UINT64_MAX};
    static const long long macs[] = {0, 1000000000LL, 999999999999999LL, 1000000000000000LL};
    char q[128];
    size_t i, k;

    for (i = 0; i < sizeof seeds / sizeof seeds[0]; i++)
        for (k = 0; k < sizeof macs / sizeof macs[0]; k++) {
            run_request a, b;
            api_error e;
            cJSON *j;
            char *text;

            snprintf(q, sizeof q, "backend=%s&seed=%llu", cpu_backend, (unsigned long long)seeds[i]);
            CHECK(parse(&a, q, NULL, 0, &e) == 0, "parse %s", q);
            a.verify_cpu_max_macs = macs[k];
            j = run_request_to_json(&a);
            text = cJSON_PrintUnformatted(j);
            CHECK(text && !strstr(text, "e+"), "no exponent in %s", text ? text : "");
            CHECK(run_request_parse_body(&b, NULL, text, strlen(text), 0, &e) == 0, "post back %s: %s", text,
                  e.message);
            CHECK(b.seed == a.seed && b.verify_cpu_max_macs == a.verify_cpu_max_macs, "same values from %s", text);
            free(text);
            cJSON_Delete(j);
        }
}

static void test_round_trip(void)
{
    char q[512];
    run_request r;
    api_error e;
    cJSON *j, *item;

    snprintf(q, sizeof q, "backend=%s", gpu_backend);
    round_trip(q, NULL, 0);
    snprintf(q, sizeof q,
             "backend=%s&batch=3&heads=5&seq_q=7&seq_kv=11&head_dim=13&dtype=fp16&mask=causal_bottom_right"
             "&scale=0.3&seed=18446744073709551615&warmup=1&iters=2&min_iters=4&max_iters=6&min_time_ms=0.25"
             "&max_time_ms=1.75&target_noise=0.123456789&cache=cold&graph=true&verify=true&profile=false"
             "&device=cuda:3&fault=hang",
             gpu_backend);
    round_trip(q, NULL, 1);
    snprintf(q, sizeof q, "backend=%s&seed=9007199254740991&causal=false&device=cpu", cpu_backend);
    round_trip(q, NULL, 0);
    snprintf(q, sizeof q, "backend=%s&seed=9007199254740992", cpu_backend);
    round_trip(q, NULL, 0);

    /* Seeds: a number below 2^53, a string from there on. */
    snprintf(q, sizeof q, "backend=%s&seed=18446744073709551615", gpu_backend);
    CHECK(parse(&r, q, NULL, 0, &e) == 0, "parse");
    j = run_request_to_json(&r);
    item = cJSON_GetObjectItemCaseSensitive(j, "seed");
    CHECK(cJSON_IsString(item) && !strcmp(item->valuestring, "18446744073709551615"), "big seed as string");
    CHECK(cJSON_GetObjectItemCaseSensitive(j, "fault") == NULL, "no fault key when unset");
    item = cJSON_GetObjectItemCaseSensitive(j, "causal");
    CHECK(cJSON_IsTrue(item), "causal true for the default mask");
    cJSON_Delete(j);

    /* from_json refuses what parse refuses. */
    j = cJSON_Parse("{\"backend\":\"nosuch\"}");
    CHECK(run_request_from_json(&r, j, &e) == -1 && e.status == 400, "from_json bad backend");
    cJSON_Delete(j);
    j = cJSON_Parse("[1]");
    CHECK(run_request_from_json(&r, j, &e) == -1 && e.status == 400, "from_json array");
    cJSON_Delete(j);
}

/* `impl`: one of the backend's implementations (variant_info.impls), kept in params only when
 * given; a name the backend lacks, or any name for a backend with one implementation, is 400
 * bad_value naming what exists. Skipped when no variant of the linked table has any. */
static void test_impl(void)
{
    const variant_info *multi = NULL, *single = NULL;
    char q[256], body[256];
    run_request r;
    api_error e;
    cJSON *j;
    size_t i, k;

    for (i = 0; i < variant_infos_count; i++) {
        const variant_info *v = variant_infos[i];
        if (v->impl_count && !multi) multi = v;
        if (!v->impl_count && !single) single = v;
        for (k = 0; k < v->impl_count; k++) {
            CHECK(v->impls[k].name && strlen(v->impls[k].name) < sizeof r.impl, "%s: impl %zu's name", v->name, k);
            CHECK(v->impls[k].summary && v->impls[k].summary[0], "%s %s: a summary", v->name, v->impls[k].name);
            CHECK(variant_info_impl_find(v, v->impls[k].name) == (int)k, "%s %s: names are unique", v->name,
                  v->impls[k].name);
        }
        CHECK(variant_info_impl_find(v, NULL) == -1 && variant_info_impl_find(v, "") == -1, "%s: no name", v->name);
    }
    if (!multi) return;

    for (k = 0; k < multi->impl_count; k++) {
        snprintf(q, sizeof q, "backend=%s&impl=%s", multi->name, multi->impls[k].name);
        expect_ok(q, NULL, &r);
        CHECK(!strcmp(r.impl, multi->impls[k].name), "impl '%s' kept as '%s'", multi->impls[k].name, r.impl);
        j = run_request_to_json(&r);
        CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "impl")), multi->impls[k].name),
              "params.impl %s", multi->impls[k].name);
        cJSON_Delete(j);
        round_trip(q, NULL, 0);
    }
    snprintf(body, sizeof body, "{\"backend\":\"%s\",\"impl\":\"%s\"}", multi->name, multi->impls[0].name);
    expect_ok(NULL, body, &r);
    CHECK(!strcmp(r.impl, multi->impls[0].name), "impl from the body");

    /* Not given, or null: the default, and no key in params. */
    snprintf(body, sizeof body, "{\"backend\":\"%s\",\"impl\":null}", multi->name);
    expect_ok(NULL, body, &r);
    CHECK(r.impl[0] == '\0', "impl null is the default");
    j = run_request_to_json(&r);
    CHECK(cJSON_GetObjectItemCaseSensitive(j, "impl") == NULL, "no impl key for the default");
    cJSON_Delete(j);

    snprintf(q, sizeof q, "backend=%s&impl=nosuch", multi->name);
    expect_fail(q, NULL, 400, "bad_value", "impl");
    CHECK(parse(&r, q, NULL, 0, &e) == -1, "unknown impl");
    for (k = 0; k < multi->impl_count; k++)
        CHECK(strstr(e.message, multi->impls[k].name) != NULL, "the message names %s: %s", multi->impls[k].name,
              e.message);
    snprintf(q, sizeof q, "backend=%s&impl=", multi->name);
    expect_fail(q, NULL, 400, "bad_value", "impl");
    snprintf(body, sizeof body, "{\"backend\":\"%s\",\"impl\":3}", multi->name);
    expect_fail(NULL, body, 400, "bad_value", "impl");
    snprintf(q, sizeof q, "backend=%s&impl=%s%s", multi->name, multi->impls[0].name, "xxxxxxxxxxxxxxxxxxxxxxxxxxx");
    expect_fail(q, NULL, 400, "bad_value", "impl");

    if (!single) return;
    snprintf(q, sizeof q, "backend=%s&impl=%s", single->name, multi->impls[0].name);
    expect_fail(q, NULL, 400, "bad_value", "impl");
    CHECK(parse(&r, q, NULL, 0, &e) == -1 && strstr(e.message, multi->name) != NULL,
          "the message names the backends that have implementations: %s", e.message);
}

/* Ragged batches and paged caches: every form of seqlens_q / seqlens_kv, what they resolve
 * (batch, the bounds, the totals, the drawn lengths), page_size and num_pages, the refusals
 * naming their field, params as given and posted back, and the GPU variants' 422. */
/* Lengths and block tables in resident tensors: the ids parse, the checks that need the
 * values wait for them, and once filled in a tensor's lengths resolve as a list's do. */
static void test_serving_tensors(void)
{
    char q[256];
    run_request r, listed;
    api_error e;
    cJSON *j;
    const int32_t kv[3] = {5, 0, 17}, bad[2] = {3, -1};

    snprintf(q, sizeof q, "backend=%s&heads=2&head_dim=4&seqlens_q=3,0,1&seqlens_kv=t12&page_size=4&block_table=t13",
             cpu_backend);
    expect_ok(q, NULL, &r);
    CHECK(r.seqlens_kv.kind == RUN_SEQLENS_TENSOR && !strcmp(r.seqlens_kv.tensor, "t12") &&
              !strcmp(r.block_table_tensor, "t13") && run_request_lengths_pending(&r),
          "ids read, values pending");
    CHECK(run_request_tensor_lengths(&r, &r.seqlens_kv, kv, 3, &e) == 0 && !run_request_lengths_pending(&r) &&
              run_request_resolve_serving(&r, &e) == 0,
          "filled in: %s", e.message);
    snprintf(q, sizeof q, "backend=%s&heads=2&head_dim=4&seqlens_q=3,0,1&seqlens_kv=5,0,17&page_size=4", cpu_backend);
    expect_ok(q, NULL, &listed);
    CHECK(r.problem.batch == 3 && r.problem.total_kv == listed.problem.total_kv &&
              r.problem.seq_kv == listed.problem.seq_kv && r.problem.num_pages == listed.problem.num_pages &&
              r.problem.ragged == listed.problem.ragged,
          "as the list resolves: total_kv %lld num_pages %lld", (long long)r.problem.total_kv,
          (long long)r.problem.num_pages);
    j = run_request_to_json(&r); /* params keep the ids; read back, the values are pending again */
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "seqlens_kv")), "t12") &&
              !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "block_table")), "t13"),
          "params.seqlens_kv, params.block_table the ids");
    CHECK(run_request_from_json(&listed, j, &e) == 0 && run_request_lengths_pending(&listed), "read back: pending");
    cJSON_Delete(j);
    CHECK(run_request_tensor_lengths(&r, &r.seqlens_kv, bad, 2, &e) != 0 && e.status == 400 &&
              !strcmp(e.field, "seqlens_kv"),
          "a negative length: %s", e.message);
    CHECK(run_request_tensor_lengths(&r, &r.seqlens_kv, kv, 0, &e) != 0 && !strcmp(e.code, "out_of_range"), "none");
    snprintf(q, sizeof q, "backend=%s&block_table=t4", cpu_backend);
    expect_fail(q, NULL, 400, "conflict", "block_table");
    snprintf(q, sizeof q, "backend=%s&page_size=4&block_table=4", cpu_backend);
    expect_fail(q, NULL, 400, "bad_value", "block_table");
}

static void test_serving(void)
{
    char q[512], body[512];
    run_request r;
    cJSON *j, *item;
    size_t i;
    int b;

    /* A list gives batch; the bounds are the longest; totals; the packed layout's sizes. */
    snprintf(q, sizeof q, "backend=%s&heads=2&head_dim=4&seqlens_q=3,0,1&seqlens_kv=5,0,17", cpu_backend);
    expect_ok(q, NULL, &r);
    CHECK(r.problem.batch == 3 && r.problem.seq_q == 3 && r.problem.seq_kv == 17, "batch %lld seq_q %lld seq_kv %lld",
          (long long)r.problem.batch, (long long)r.problem.seq_q, (long long)r.problem.seq_kv);
    CHECK(r.problem.ragged == (ATTN_RAGGED_Q | ATTN_RAGGED_KV) && r.problem.total_q == 4 && r.problem.total_kv == 22,
          "ragged %u totals %lld %lld", r.problem.ragged, (long long)r.problem.total_q, (long long)r.problem.total_kv);
    CHECK(attn_q_elems(&r.problem) == 4 * 2 * 4 && attn_k_elems(&r.problem) == 22 * 2 * 4, "packed sizes");
    CHECK(run_request_macs(&r) == (3LL * 5 + 0 + 17) * 2 * 4, "macs %lld: real lengths", run_request_macs(&r));
    round_trip(q, NULL, 0);
    j = run_request_to_json(&r);
    item = cJSON_GetObjectItemCaseSensitive(j, "seqlens_kv");
    CHECK(cJSON_IsArray(item) && cJSON_GetArraySize(item) == 3 && cJSON_GetArrayItem(item, 2)->valueint == 17,
          "params.seqlens_kv as given");
    CHECK(!cJSON_GetObjectItemCaseSensitive(j, "page_size") && !cJSON_GetObjectItemCaseSensitive(j, "num_pages"),
          "no paging keys unpaged");
    cJSON_Delete(j);

    /* The same from a body: an array, and the query's text in a string. */
    snprintf(body, sizeof body, "{\"backend\":\"%s\",\"seqlens_q\":[3,0,1],\"seqlens_kv\":\"5,0,17\",\"seq_kv\":20}",
             cpu_backend);
    expect_ok(NULL, body, &r);
    CHECK(r.problem.batch == 3 && r.problem.seq_kv == 20 && r.problem.total_kv == 22, "body lists, seq_kv a bound");

    /* One side only: the other is every sequence its bound, packed all the same. */
    snprintf(q, sizeof q, "backend=%s&seq_q=1&seqlens_kv=128,7&page_size=16", cpu_backend);
    expect_ok(q, NULL, &r);
    CHECK(r.problem.ragged == ATTN_RAGGED_KV && r.problem.total_q == 2 && r.problem.seq_kv == 128 &&
              r.seqlens_q.len[0] == 1 && r.seqlens_q.len[1] == 1,
          "decode: total_q %lld", (long long)r.problem.total_q);
    CHECK(r.problem.page_size == 16 && r.problem.num_pages == 9 + 3, "num_pages %lld: 9 needed and a quarter more",
          (long long)r.problem.num_pages);
    CHECK(attn_k_elems(&r.problem) == 12LL * 16 * 16 * 64, "the cache whole: %lld", (long long)attn_k_elems(&r.problem));
    round_trip(q, NULL, 0);

    /* A distribution: drawn from seed, the same every time, different for another seed;
     * params keep the distribution. */
    snprintf(q, sizeof q, "backend=%s&batch=64&seqlens_kv=uniform:0:40&seed=7", cpu_backend);
    expect_ok(q, NULL, &r);
    {
        int lo = 99, hi = -1, same = 1;
        run_request r2;
        for (b = 0; b < 64; b++) lo = r.seqlens_kv.len[b] < lo ? r.seqlens_kv.len[b] : lo,
                                hi = r.seqlens_kv.len[b] > hi ? r.seqlens_kv.len[b] : hi;
        CHECK(lo >= 0 && hi <= 40 && hi > lo + 20, "uniform 0..40 drew %d..%d", lo, hi);
        CHECK(r.problem.seq_kv == (hi > 0 ? hi : 1), "seq_kv the longest drawn");
        expect_ok(q, NULL, &r2);
        CHECK(!memcmp(r.seqlens_kv.len, r2.seqlens_kv.len, 64 * sizeof(int32_t)), "drawn alike");
        snprintf(q, sizeof q, "backend=%s&batch=64&seqlens_kv=uniform:0:40&seed=8", cpu_backend);
        expect_ok(q, NULL, &r2);
        for (b = 0; b < 64; b++) same &= r.seqlens_kv.len[b] == r2.seqlens_kv.len[b];
        CHECK(!same, "another seed, other lengths");
    }
    j = run_request_to_json(&r);
    item = cJSON_GetObjectItemCaseSensitive(j, "seqlens_kv");
    CHECK(cJSON_IsObject(item) && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(item, "dist")), "uniform") &&
              cJSON_GetObjectItem(item, "max")->valueint == 40,
          "params.seqlens_kv the distribution");
    cJSON_Delete(j);
    snprintf(q, sizeof q, "backend=%s&batch=64&seqlens_kv=uniform:0:40&seed=7", cpu_backend);
    round_trip(q, NULL, 0);
    /* Golden draws of seed 0 (docs/inputs.md, tests/api/test_numpy_generator.py). */
    snprintf(q, sizeof q, "backend=%s&batch=6&seqlens_q=uniform:1:8&seqlens_kv=uniform:100:199", cpu_backend);
    expect_ok(q, NULL, &r);
    {
        static const int32_t want_q[6] = {SEQLENS_GOLD_Q}, want_kv[6] = {SEQLENS_GOLD_KV};
        for (b = 0; b < 6; b++)
            CHECK(r.seqlens_q.len[b] == want_q[b] && r.seqlens_kv.len[b] == want_kv[b], "draw %d: %d %d", b,
                  r.seqlens_q.len[b], r.seqlens_kv.len[b]);
    }
    snprintf(body, sizeof body, "{\"backend\":\"%s\",\"batch\":6,\"seqlens_q\":{\"dist\":\"uniform\",\"min\":1,"
             "\"max\":8},\"seqlens_kv\":{\"max\":199,\"min\":\"100\",\"dist\":\"uniform\"}}", cpu_backend);
    {
        run_request r2;
        expect_ok(NULL, body, &r2);
        CHECK(!memcmp(r.seqlens_q.len, r2.seqlens_q.len, 6 * sizeof(int32_t)) &&
                  !memcmp(r.seqlens_kv.len, r2.seqlens_kv.len, 6 * sizeof(int32_t)),
              "the object form draws what the text form draws");
    }

    /* Paged without ragged: num_pages given, Skv not a multiple of the page. */
    snprintf(q, sizeof q, "backend=%s&batch=3&seq_kv=33&page_size=16&num_pages=9", cpu_backend);
    expect_ok(q, NULL, &r);
    CHECK(r.problem.num_pages == 9 && !r.problem.ragged, "num_pages as given");
    CHECK(attn_q_elems(&r.problem) == 3LL * 16 * 1024 * 64, "q stays dense");
    round_trip(q, NULL, 0);

    /* Refusals, each naming its field. */
    static const struct {
        const char *query, *body, *code, *field;
    } bad[] = {
        {"seqlens_kv=1,,2", NULL, "bad_value", "seqlens_kv"},
        {"seqlens_kv=", NULL, "bad_value", "seqlens_kv"},
        {"seqlens_kv=1,-2", NULL, "out_of_range", "seqlens_kv"},
        {"seqlens_kv=1,2.0", NULL, "bad_value", "seqlens_kv"},
        {"seqlens_kv=1,02", NULL, "bad_value", "seqlens_kv"},
        {"seqlens_kv=1,2147483648", NULL, "out_of_range", "seqlens_kv"},
        {"seqlens_q=normal:1:2", NULL, "bad_value", "seqlens_q"},
        {"seqlens_q=uniform:1", NULL, "bad_value", "seqlens_q"},
        {"seqlens_q=uniform:1:2:3", NULL, "bad_value", "seqlens_q"},
        {"seqlens_q=uniform:9:2", NULL, "out_of_range", "seqlens_q"},
        {"seqlens_q=uniform:x:2", NULL, "bad_value", "seqlens_q"},
        {"batch=2&seqlens_kv=1,2,3", NULL, "conflict", "seqlens_kv"},
        {"seqlens_q=1,2&seqlens_kv=1,2,3", NULL, "conflict", "seqlens_kv"},
        {"batch=4097&seqlens_kv=uniform:1:2", NULL, "out_of_range", "batch"},
        {"seq_kv=10&seqlens_kv=5,11", NULL, "out_of_range", "seqlens_kv"},
        {"seqlens_kv=2147483647,2147483647", NULL, "out_of_range", "seqlens_kv"},
        {"batch=4096&seq_q=1048576&seqlens_kv=1", NULL, "conflict", "seqlens_kv"},
        {"batch=4096&seq_q=1048576&seqlens_kv=uniform:1:1", NULL, "out_of_range", "seq_q"},
        {"num_pages=4", NULL, "conflict", "num_pages"},
        {"batch=2&seq_kv=33&page_size=16&num_pages=5", NULL, "out_of_range", "num_pages"},
        {"page_size=1048577", NULL, "out_of_range", "page_size"},
        {"batch=65536&seq_kv=65536&heads=1&head_dim=1&page_size=1", NULL, "out_of_range", "page_size"},
        {NULL, "\"seqlens_kv\":[1,\"2\"]", "bad_value", "seqlens_kv"},
        {NULL, "\"seqlens_kv\":[]", "bad_value", "seqlens_kv"},
        {NULL, "\"seqlens_kv\":[1.5]", "bad_value", "seqlens_kv"},
        {NULL, "\"seqlens_kv\":5", "bad_value", "seqlens_kv"},
        {NULL, "\"seqlens_kv\":true", "bad_value", "seqlens_kv"},
        {NULL, "\"seqlens_kv\":{\"dist\":\"normal\",\"min\":1,\"max\":2}", "bad_value", "seqlens_kv"},
        {NULL, "\"seqlens_kv\":{\"dist\":\"uniform\",\"min\":1}", "bad_value", "seqlens_kv"},
        {NULL, "\"seqlens_kv\":{\"dist\":\"uniform\",\"min\":1,\"max\":2,\"seed\":3}", "bad_value", "seqlens_kv"},
        {NULL, "\"seqlens_kv\":{\"dist\":\"uniform\",\"min\":-1,\"max\":2}", "out_of_range", "seqlens_kv"},
    };
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bad[i].query) {
            snprintf(q, sizeof q, "backend=%s&%s", cpu_backend, bad[i].query);
            expect_fail(q, NULL, 400, bad[i].code, bad[i].field);
        } else {
            snprintf(body, sizeof body, "{\"backend\":\"%s\",%s}", cpu_backend, bad[i].body);
            expect_fail(NULL, body, 400, bad[i].code, bad[i].field);
        }
    }
    /* 4097 lengths in a list: too many sequences, said before batch is compared. */
    {
        static char big[4097 * 2 + 64];
        size_t n = (size_t)snprintf(big, sizeof big, "{\"backend\":\"%s\",\"seqlens_kv\":[", cpu_backend);
        for (i = 0; i < 4097; i++) n += (size_t)snprintf(big + n, sizeof big - n, "%s1", i ? "," : "");
        snprintf(big + n, sizeof big - n, "]}");
        expect_fail(NULL, big, 400, "out_of_range", "seqlens_kv");
    }

    /* Every variant runs both (the GPU ones as decode here: seq_q 1); the pending_features bits
     * would be refused naming the parameter, and none is pending. */
    for (i = 0; i < variant_infos_count; i++) {
        const variant_info *v = variant_infos[i];
        const char *decode = v->on_cpu ? "" : "&seq_q=1&mask=causal_bottom_right";
        CHECK((v->features & VARIANT_PAGED) && (v->features & VARIANT_RAGGED) && v->pending_features == 0,
              "%s: paged and ragged batches offered", v->name);
        snprintf(q, sizeof q, "backend=%s&seqlens_kv=3,4&dtype=bf16&head_dim=64%s", v->name, decode);
        expect_ok(q, NULL, &r);
        snprintf(q, sizeof q, "backend=%s&page_size=16&dtype=bf16&head_dim=64%s", v->name, decode);
        expect_ok(q, NULL, &r);
    }
}

int main(void)
{
    size_t i;

    for (i = 0; i < variant_infos_count; i++) {
        if (!gpu_backend && !variant_infos[i]->on_cpu) gpu_backend = variant_infos[i]->name;
        if (!cpu_backend && variant_infos[i]->on_cpu) cpu_backend = variant_infos[i]->name;
    }
    CHECK(gpu_backend && cpu_backend, "the variants table needs a GPU and a cpu variant");
    if (!gpu_backend || !cpu_backend) return CHECK_DONE();

    test_defaults();
    test_values();
    test_refusals();
    test_unsupported();
    test_round_trip();
    test_body_text();
    test_params_post_back();
    test_impl();
    test_serving();
    test_serving_tensors();
    return CHECK_DONE();
}
