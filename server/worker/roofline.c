/* roofline.c — peaks of arithmetic and memory from per-architecture constants and measured
 * clocks (roofline.h). Each row's rate is checked against the vendor's datasheet figure at
 * that figure's clock, in the row's comment. */
#include "server/worker/roofline.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct roofline_arch {
    int major, minor;
    double tensor_16bit_flop_per_clk_sm; /* dense bf16/fp16 MMA with fp32 accumulate */
    double fp32_flop_per_clk_sm;         /* FFMA: 2 FLOP per FP32 lane per clock */
} roofline_arch;

/* A new architecture is one row (sm_100 when it is measured here). */
static const roofline_arch roofline_table[] = {
    /* A100: 312 TFLOP/s at 1410 MHz on 108 SMs; 19.5 TFLOP/s FP32 (64 lanes). */
    {8, 0, 2048.0, 128.0},
    /* A10/A40: 149.7 TFLOP/s at 1740 MHz on 84 SMs (GeForce parts accumulate fp32 at half
     * this rate); 128 FP32 lanes. */
    {8, 6, 1024.0, 256.0},
    /* L4/L40S: 362 TFLOP/s at 2520 MHz on 142 SMs; 128 FP32 lanes. */
    {8, 9, 1024.0, 256.0},
    /* H100/H200: 989 TFLOP/s at 1830 MHz on 132 SMs; 67 TFLOP/s FP32 at 1980 MHz (128 lanes). */
    {9, 0, 4096.0, 256.0},
};

double roofline_flop_per_clk_sm(int cc_major, int cc_minor, attn_dtype dtype, const char **what)
{
    size_t i;
    static const char *const names[] = {"tensor-core dense bf16", "tensor-core dense fp16", "CUDA-core fp32 FFMA"};

    if (what) *what = dtype < ATTN_DTYPE_COUNT ? names[dtype] : "?";
    for (i = 0; i < sizeof roofline_table / sizeof roofline_table[0]; i++) {
        const roofline_arch *a = &roofline_table[i];
        if (a->major != cc_major || a->minor != cc_minor) continue;
        return dtype == ATTN_FP32 ? a->fp32_flop_per_clk_sm : a->tensor_16bit_flop_per_clk_sm;
    }
    return 0.0;
}

void roofline_peak_of(int cc_major, int cc_minor, int sm_count, double sm_mhz, attn_dtype dtype, double mem_mhz,
                      int bus_bits, roofline_peak *out)
{
    const char *what;
    double per_clk = roofline_flop_per_clk_sm(cc_major, cc_minor, dtype, &what);

    memset(out, 0, sizeof *out);
    out->tflops = out->gbps = NAN;
    if (per_clk <= 0.0)
        snprintf(out->tflops_basis, sizeof out->tflops_basis, "sm_%d%d is not in the peak table", cc_major, cc_minor);
    else if (sm_mhz <= 0.0 || sm_count <= 0)
        snprintf(out->tflops_basis, sizeof out->tflops_basis, "the SM clock is unknown (no NVML)");
    else {
        out->tflops = per_clk * sm_count * sm_mhz * 1e6 / 1e12;
        snprintf(out->tflops_basis, sizeof out->tflops_basis, "sm_%d%d %s: %.0f FLOP/clock/SM x %d SMs x %.0f MHz",
                 cc_major, cc_minor, what, per_clk, sm_count, sm_mhz);
    }
    /* Double data rate: NVML's memory clock times two transfers per clock, times the bus. */
    if (mem_mhz <= 0.0 || bus_bits <= 0)
        snprintf(out->gbps_basis, sizeof out->gbps_basis, "the memory clock or bus width is unknown (no NVML)");
    else {
        out->gbps = mem_mhz * 1e6 * 2.0 * (bus_bits / 8.0) / 1e9;
        snprintf(out->gbps_basis, sizeof out->gbps_basis, "%.0f MHz x 2 (double data rate) x %d-bit bus", mem_mhz,
                 bus_bits);
    }
}

/* value / peak, or NAN when either is unknown. */
static double roofline_fraction(double value, double peak)
{
    return isfinite(value) && isfinite(peak) && peak > 0.0 ? value / peak : NAN;
}

static cJSON *roofline_number_or_null(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

int roofline_add_to_perf(cJSON *perf, const roofline_peak *peak, const char *why_none)
{
    const cJSON *tf = cJSON_GetObjectItem(perf, "tflops"), *gb = cJSON_GetObjectItem(perf, "gbps");
    double tflops = cJSON_IsNumber(tf) ? tf->valuedouble : NAN, gbps = cJSON_IsNumber(gb) ? gb->valuedouble : NAN;
    double peak_tflops = peak ? peak->tflops : NAN, peak_gbps = peak ? peak->gbps : NAN;
    double compute = roofline_fraction(tflops, peak_tflops), bandwidth = roofline_fraction(gbps, peak_gbps);
    char reason[160] = "";
    cJSON *frac;
    int ok = 1;

    if (isfinite(compute) && compute > 1.0)
        snprintf(reason, sizeof reason, "%.2f of the compute peak: the timing or the FLOP count is wrong", compute);
    else if (isfinite(bandwidth) && bandwidth > 1.0)
        snprintf(reason, sizeof reason, "%.2f of the memory peak: the timing or the byte count is wrong", bandwidth);
    ok = ok && cJSON_AddItemToObject(perf, "peak_tflops", roofline_number_or_null(peak_tflops));
    ok = ok && cJSON_AddStringToObject(perf, "peak_tflops_basis", peak ? peak->tflops_basis : why_none) != NULL;
    ok = ok && cJSON_AddItemToObject(perf, "peak_gbps", roofline_number_or_null(peak_gbps));
    ok = ok && cJSON_AddStringToObject(perf, "peak_gbps_basis", peak ? peak->gbps_basis : why_none) != NULL;
    frac = ok ? cJSON_AddObjectToObject(perf, "fraction_of_peak") : NULL;
    ok = ok && frac && cJSON_AddItemToObject(frac, "compute", roofline_number_or_null(compute));
    ok = ok && cJSON_AddItemToObject(frac, "bandwidth", roofline_number_or_null(bandwidth));
    ok = ok && cJSON_AddBoolToObject(perf, "suspect", reason[0] != '\0') != NULL;
    ok = ok && cJSON_AddItemToObject(perf, "suspect_reason", reason[0] ? cJSON_CreateString(reason) : cJSON_CreateNull());
    return ok ? 0 : -1;
}
