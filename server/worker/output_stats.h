/* output_stats.h — the "output" and "verify" objects of a result.
 *
 * Summaries are computed where the output lives (one reduction kernel on a GPU), so a
 * 1-iteration run does not copy its output to the host.
 */
#ifndef OUTPUT_STATS_H
#define OUTPUT_STATS_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/attn.h"
#include "kernels/exec_context.h"

/* C linkage also when included from output_stats.cu (compiled as C++). */
#ifdef __cplusplus
extern "C" {
#endif

typedef struct output_summary {
    double sum, abs_sum;       /* fp64 accumulation over the elements as stored */
    int64_t nan, inf;
    uint64_t fingerprint;      /* fingerprint.h over the output bytes */
} output_summary;

typedef struct verify_result {
    char reference[32];        /* "cpu_fp64", "gpu_math_fp32" or "gpu_online_fp32" */
    double max_abs_err, rel_l2_err; /* vs the reference; NaN when the output has NaN */
    double tol_abs, tol_rel_l2;
    int64_t nan;               /* elements that are NaN or Inf in the output */
    int pass;                  /* both errors within tolerance and no NaN/Inf */
} verify_result;

/* Summaries of n elements of dtype. gpu: d_out is device memory, on ctx->stream, returns
 * after synchronising; 0 or -1 (ctx->error). cpu: host memory. */
int output_summarize_gpu(exec_context *ctx, const void *d_out, attn_dtype dtype, int64_t n, output_summary *s);
void output_summarize_cpu(const void *out, attn_dtype dtype, int64_t n, output_summary *s);

/* The tolerance of each dtype against an fp64 reference (documented in docs/verify.md). */
void verify_tolerance(attn_dtype dtype, double *tol_abs, double *tol_rel_l2);

/* Compare n output elements (dtype) with a reference. host: ref in fp64 host memory.
 * gpu: both on the device, ref in fp32; returns 0 or -1 (ctx->error). */
void verify_compare_host(const void *out, attn_dtype dtype, const double *ref, int64_t n, const char *reference,
                         verify_result *v);
int verify_compare_gpu(exec_context *ctx, const void *d_out, attn_dtype dtype, const float *d_ref, int64_t n,
                       const char *reference, verify_result *v);

/* shape is [B,H,Sq,D]. */
cJSON *output_to_json(const output_summary *s, const attn_problem *p);
cJSON *verify_to_json(const verify_result *v);

#ifdef __cplusplus
}
#endif
#endif
