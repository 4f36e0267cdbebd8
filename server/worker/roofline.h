/* roofline.h — how fast a GPU could go at most: the dense peak of its arithmetic for a dtype
 * at a given SM clock, and the peak of its memory, so that a result can say what fraction
 * of the machine it used (docs/measurement.md, "perf"). Pure C, no CUDA: unit-tested anywhere.
 *
 * The per-architecture constants live in one table in roofline.c (sm_80, 86, 89, 90; a new
 * architecture is one row). Peaks are products of constants and measured clocks, never
 * marketing figures: FLOP per clock per SM × SMs × the SM clock measured while timing.
 */
#ifndef ROOFLINE_H
#define ROOFLINE_H

#include <cjson/cJSON.h>

#include "common/attn.h"

typedef struct roofline_peak {
    double tflops;           /* dense peak for the dtype, TFLOP/s; NAN when unknown */
    double gbps;             /* memory peak, GB/s; NAN when unknown */
    char tflops_basis[192];  /* how tflops was computed, or why it is unknown */
    char gbps_basis[160];    /* how gbps was computed, or why it is unknown */
} roofline_peak;

/* FLOP per clock per SM of compute capability major.minor for dtype: the tensor cores'
 * dense rate for bf16/fp16 (fp32 accumulate), the CUDA cores' FFMA rate for fp32 (no TF32).
 * 0 for an architecture not in the table. *what names the unit ("tensor-core dense bf16"). */
double roofline_flop_per_clk_sm(int cc_major, int cc_minor, attn_dtype dtype, const char **what);

/* The peaks of one device: sm_mhz is the SM clock under load (0: unknown), mem_mhz the
 * memory clock as NVML reports it and bus_bits the memory bus width (0: unknown). */
void roofline_peak_of(int cc_major, int cc_minor, int sm_count, double sm_mhz, attn_dtype dtype, double mem_mhz,
                      int bus_bits, roofline_peak *out);

/* Add to a "perf" object (measure_stats_perf_json: its tflops and gbps) peak_tflops, peak_gbps, their
 * bases, fraction_of_peak {compute, bandwidth}, and suspect (true when a fraction is above
 * 1: the measurement, not the machine, is wrong) with suspect_reason. peak NULL: the device
 * has no peak table (the cpu): the peaks are null with that reason. 0, or -1 out of memory. */
int roofline_add_to_perf(cJSON *perf, const roofline_peak *peak, const char *why_none);

#endif
