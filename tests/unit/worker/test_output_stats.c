/* test_output_stats.c — host output summary, tolerances, host verify and their JSON
 * (server/worker/output_stats_host.c), without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dtype_convert.h"
#include "kernels/fingerprint.h"
#include "server/worker/output_stats.h"
#include "tests/unit/check.h"

static void test_summary(void)
{
    float f[7] = {1.5f, -2.25f, 0.0f, NAN, INFINITY, -INFINITY, 3.0f};
    uint16_t b[7], h[7];
    output_summary s;
    int i;

    output_summarize_cpu(f, ATTN_FP32, 7, &s);
    CHECK(s.sum == 2.25, "fp32 sum %g", s.sum);
    CHECK(s.abs_sum == 6.75, "fp32 abs_sum %g", s.abs_sum);
    CHECK(s.nan == 1 && s.inf == 2, "fp32 nan %lld inf %lld", (long long)s.nan, (long long)s.inf);
    CHECK(s.fingerprint == fingerprint_bytes(f, sizeof f), "fp32 fingerprint (28 bytes: padded last word)");

    for (i = 0; i < 7; i++) {
        b[i] = dtype_f32_to_bf16(f[i]);
        h[i] = dtype_f32_to_fp16(f[i]);
    }
    output_summarize_cpu(b, ATTN_BF16, 7, &s);
    CHECK(s.sum == 2.25 && s.abs_sum == 6.75 && s.nan == 1 && s.inf == 2, "bf16 summary");
    CHECK(s.fingerprint == fingerprint_bytes(b, sizeof b), "bf16 fingerprint (14 bytes)");
    output_summarize_cpu(h, ATTN_FP16, 7, &s);
    CHECK(s.sum == 2.25 && s.abs_sum == 6.75 && s.nan == 1 && s.inf == 2, "fp16 summary");
    CHECK(s.fingerprint == fingerprint_bytes(h, sizeof h), "fp16 fingerprint");

    /* The poison pattern the GPU worker writes before the final forward reads as NaN. */
    memset(b, 0xFF, sizeof b);
    output_summarize_cpu(b, ATTN_BF16, 7, &s);
    CHECK(s.nan == 7 && s.sum == 0, "0xFF bytes are NaN in bf16");
    memset(f, 0xFF, sizeof f);
    output_summarize_cpu(f, ATTN_FP32, 7, &s);
    CHECK(s.nan == 7, "0xFF bytes are NaN in fp32");

    output_summarize_cpu(f, ATTN_FP32, 0, &s);
    CHECK(s.nan == 0 && s.sum == 0 && s.fingerprint == fingerprint_bytes(f, 0), "empty output");
}

static void test_tolerance(void)
{
    double a, r;
    verify_tolerance(ATTN_BF16, &a, &r);
    CHECK(a == 4e-2 && r == 1.6e-2, "bf16 %g %g", a, r);
    verify_tolerance(ATTN_FP16, &a, &r);
    CHECK(a == 5e-3 && r == 2e-3, "fp16 %g %g", a, r);
    verify_tolerance(ATTN_FP32, &a, &r);
    CHECK(a == 1e-4 && r == 1e-5, "fp32 %g %g", a, r);
}

static void test_verify(void)
{
    enum { N = 1000 };
    double ref[N];
    uint16_t out[N];
    verify_result v;
    cJSON *j, *tol;
    int i;

    for (i = 0; i < N; i++) {
        ref[i] = sin(0.37 * i);
        out[i] = dtype_f32_to_bf16((float)ref[i]); /* only the rounding to bf16 */
    }
    verify_compare_host(out, ATTN_BF16, ref, N, "cpu_fp64", &v);
    CHECK(v.pass, "bf16 rounding passes (max %g rel %g)", v.max_abs_err, v.rel_l2_err);
    CHECK(v.max_abs_err > 0 && v.max_abs_err <= 1.0 / 256, "max abs err is half a bf16 ulp at most: %g",
          v.max_abs_err);
    CHECK(v.rel_l2_err > 0 && v.rel_l2_err < 4e-3, "rel l2 %g", v.rel_l2_err);
    CHECK(!strcmp(v.reference, "cpu_fp64") && v.nan == 0, "reference name");

    out[17] = dtype_f32_to_bf16((float)ref[17] + 0.1f); /* one element off by 0.1 */
    verify_compare_host(out, ATTN_BF16, ref, N, "cpu_fp64", &v);
    CHECK(!v.pass && v.max_abs_err > 4e-2, "one bad element fails on max abs (%g)", v.max_abs_err);

    for (i = 0; i < N; i++) out[i] = dtype_f32_to_bf16((float)(ref[i] * 1.05)); /* 5% scale error */
    verify_compare_host(out, ATTN_BF16, ref, N, "cpu_fp64", &v);
    CHECK(!v.pass && v.rel_l2_err > 1.6e-2, "a wrong scale fails on rel l2 (%g, max %g)", v.rel_l2_err,
          v.max_abs_err);

    for (i = 0; i < N; i++) out[i] = dtype_f32_to_bf16((float)ref[i]);
    out[3] = 0xFFFF; /* NaN */
    verify_compare_host(out, ATTN_BF16, ref, N, "cpu_fp64", &v);
    CHECK(!v.pass && v.nan == 1 && isnan(v.max_abs_err) && isnan(v.rel_l2_err), "NaN fails, errors NaN");
    j = verify_to_json(&v);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "max_abs_err")) && cJSON_IsNull(cJSON_GetObjectItem(j, "rel_l2_err")),
          "NaN errors are null in JSON");
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(j, "pass")) && cJSON_GetObjectItem(j, "nan")->valuedouble == 1,
          "pass false, nan 1");
    tol = cJSON_GetObjectItem(j, "tol");
    CHECK(tol && cJSON_GetObjectItem(tol, "abs")->valuedouble == 4e-2 &&
              cJSON_GetObjectItem(tol, "rel_l2")->valuedouble == 1.6e-2,
          "tol object");
    CHECK(!strcmp(cJSON_GetObjectItem(j, "reference")->valuestring, "cpu_fp64"), "reference");
    cJSON_Delete(j);

    {
        float f32[4] = {1.0f, 2.0f, 3.0f, 4.0f};
        double r32[4] = {1.0, 2.0, 3.0, 4.0 + 2e-4};
        verify_compare_host(f32, ATTN_FP32, r32, 4, "gpu_math_fp32", &v);
        CHECK(!v.pass && fabs(v.max_abs_err - 2e-4) < 1e-9, "fp32 tolerance is tight (%g)", v.max_abs_err);
        r32[3] = 4.0 + 1e-6;
        verify_compare_host(f32, ATTN_FP32, r32, 4, "gpu_math_fp32", &v);
        CHECK(v.pass, "fp32 within tolerance");
    }
}

static void test_output_json(void)
{
    output_summary s;
    attn_problem p;
    cJSON *j, *shape;
    memset(&p, 0, sizeof p);
    p.batch = 2, p.heads = 3, p.seq_q = 5, p.seq_kv = 7, p.head_dim = 8, p.dtype = ATTN_FP16;
    memset(&s, 0, sizeof s);
    s.sum = 1.25, s.abs_sum = 3.5, s.nan = 2, s.inf = 1;
    s.fingerprint = 0x00ab00000000cd01ull;
    j = output_to_json(&s, &p);
    shape = cJSON_GetObjectItem(j, "shape");
    CHECK(cJSON_GetArraySize(shape) == 4 && cJSON_GetArrayItem(shape, 0)->valuedouble == 2 &&
              cJSON_GetArrayItem(shape, 2)->valuedouble == 5 && cJSON_GetArrayItem(shape, 3)->valuedouble == 8,
          "shape [B,H,Sq,D]");
    CHECK(!strcmp(cJSON_GetObjectItem(j, "dtype")->valuestring, "fp16"), "dtype");
    CHECK(cJSON_GetObjectItem(j, "sum")->valuedouble == 1.25 && cJSON_GetObjectItem(j, "abs_sum")->valuedouble == 3.5,
          "sums");
    CHECK(cJSON_GetObjectItem(j, "nan")->valuedouble == 2 && cJSON_GetObjectItem(j, "inf")->valuedouble == 1,
          "counts");
    CHECK(!strcmp(cJSON_GetObjectItem(j, "fingerprint")->valuestring, "00ab00000000cd01"),
          "fingerprint: 16 lowercase hex digits, got %s", cJSON_GetObjectItem(j, "fingerprint")->valuestring);
    cJSON_Delete(j);
}

int main(void)
{
    test_summary();
    test_tolerance();
    test_verify();
    test_output_json();
    return CHECK_DONE();
}
