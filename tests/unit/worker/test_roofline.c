/* test_roofline.c — peaks from the per-architecture table against the datasheets' figures,
 * the fractions and the suspect flag of a "perf" object. */
#include <math.h>
#include <string.h>

#include "tests/unit/check.h"
#include "server/worker/roofline.h"

static int near(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b); }

static void test_peaks(void)
{
    roofline_peak pk;
    const char *what;

    /* H100 SXM: 989 TFLOP/s dense bf16 at 1830 MHz on 132 SMs; 3.35 TB/s (2619 MHz, 5120 bits). */
    roofline_peak_of(9, 0, 132, 1830, ATTN_BF16, 2619, 5120, &pk);
    CHECK(near(pk.tflops, 989.4, 0.001), "H100 bf16 %g", pk.tflops);
    CHECK(near(pk.gbps, 3352, 0.001), "H100 HBM3 %g", pk.gbps);
    CHECK(strstr(pk.tflops_basis, "4096 FLOP/clock/SM x 132 SMs x 1830 MHz") != NULL, "basis: %s", pk.tflops_basis);
    /* A100: 312 TFLOP/s at 1410 MHz on 108 SMs; 19.5 TFLOP/s fp32. */
    roofline_peak_of(8, 0, 108, 1410, ATTN_FP16, 1215, 5120, &pk);
    CHECK(near(pk.tflops, 311.9, 0.001), "A100 fp16 %g", pk.tflops);
    CHECK(near(pk.gbps, 1555, 0.001), "A100 HBM2 %g", pk.gbps);
    roofline_peak_of(8, 0, 108, 1410, ATTN_FP32, 0, 0, &pk);
    CHECK(near(pk.tflops, 19.49, 0.001), "A100 fp32 %g", pk.tflops);
    CHECK(isnan(pk.gbps) && strstr(pk.gbps_basis, "unknown"), "no memory clock: unknown (%s)", pk.gbps_basis);
    /* L40S: 362 TFLOP/s at 2520 MHz on 142 SMs. */
    roofline_peak_of(8, 9, 142, 2520, ATTN_BF16, 0, 0, &pk);
    CHECK(near(pk.tflops, 366.4, 0.002), "L40S bf16 %g", pk.tflops);
    CHECK(roofline_flop_per_clk_sm(9, 0, ATTN_FP32, &what) == 256.0 && strstr(what, "fp32"), "H100 fp32 rate");
    /* Unknown architecture, unknown clock: NAN with the reason. */
    roofline_peak_of(12, 0, 100, 2000, ATTN_BF16, 1000, 512, &pk);
    CHECK(isnan(pk.tflops) && strstr(pk.tflops_basis, "sm_120 is not in the peak table"), "%s", pk.tflops_basis);
    roofline_peak_of(9, 0, 132, 0, ATTN_BF16, 0, 0, &pk);
    CHECK(isnan(pk.tflops) && strstr(pk.tflops_basis, "clock is unknown"), "%s", pk.tflops_basis);
}

static void test_perf_object(void)
{
    roofline_peak pk;
    cJSON *perf = cJSON_CreateObject(), *frac;

    roofline_peak_of(9, 0, 132, 1980, ATTN_BF16, 3201, 6144, &pk); /* H200 */
    cJSON_AddNumberToObject(perf, "tflops", 642.0);
    cJSON_AddNumberToObject(perf, "gbps", 100.0);
    CHECK(roofline_add_to_perf(perf, &pk, NULL) == 0, "added");
    frac = cJSON_GetObjectItem(perf, "fraction_of_peak");
    CHECK(near(cJSON_GetObjectItem(frac, "compute")->valuedouble, 642.0 / 1070.5, 0.001), "compute fraction");
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(perf, "suspect")) && cJSON_IsNull(cJSON_GetObjectItem(perf, "suspect_reason")),
          "plausible: not suspect");
    cJSON_Delete(perf);

    perf = cJSON_CreateObject(); /* above the peak: flagged, with the reason */
    cJSON_AddNumberToObject(perf, "tflops", 1500.0);
    cJSON_AddNumberToObject(perf, "gbps", 100.0);
    CHECK(roofline_add_to_perf(perf, &pk, NULL) == 0, "added");
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(perf, "suspect")), "above the peak is suspect");
    CHECK(strstr(cJSON_GetObjectItem(perf, "suspect_reason")->valuestring, "of the compute peak"), "reason");
    cJSON_Delete(perf);

    perf = cJSON_CreateObject(); /* no peak table (the cpu device) */
    cJSON_AddNumberToObject(perf, "tflops", 0.01);
    CHECK(roofline_add_to_perf(perf, NULL, "the cpu device has no peak table") == 0, "added");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(perf, "peak_tflops")) &&
              !strcmp(cJSON_GetObjectItem(perf, "peak_tflops_basis")->valuestring, "the cpu device has no peak table"),
          "null with the reason");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(perf, "fraction_of_peak"), "compute")), "no fraction");
    cJSON_Delete(perf);
}

int main(void)
{
    test_peaks();
    test_perf_object();
    return CHECK_DONE();
}
