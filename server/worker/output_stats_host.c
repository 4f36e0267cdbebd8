/* output_stats_host.c — the host side of output_stats.h: the summary of an output in host
 * memory (cpu device, tests), the tolerances, the comparison with an fp64 reference, and
 * the "output" / "verify" JSON objects.
 *
 * The GPU summary (output_stats.cu) computes the same numbers: element values as stored,
 * accumulated in fp64, NaN and Inf counted and left out of the sums, and the fingerprint
 * of kernels/fingerprint.h over the raw bytes.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/dtype_convert.h"
#include "kernels/fingerprint.h"
#include "server/worker/output_stats.h"
#include "server/worker/json_fields.h"

void output_summarize_cpu(const void *out, attn_dtype dtype, int64_t n, output_summary *s)
{
    int64_t i;
    memset(s, 0, sizeof *s);
    if (n < 0) n = 0;
    for (i = 0; i < n; i++) {
        double x = (double)dtype_load_f32(out, dtype, i);
        if (isnan(x)) s->nan++;
        else if (isinf(x)) s->inf++;
        else {
            s->sum += x;
            s->abs_sum += fabs(x);
        }
    }
    s->fingerprint = fingerprint_bytes(out, (size_t)n * attn_dtype_bytes(dtype));
}

/* Against an fp64 reference computed from the same rounded inputs, so the error measured
 * is the variant's own: the rounding of its output to the dtype (half an ulp: 2^-9 relative
 * for bf16, 2^-12 for fp16) plus its internal rounding (probabilities rounded to the dtype
 * before the second matmul, fp32 accumulation). A wrong mask, scale or a skipped row is
 * off by far more (errors of order 1 on unit-variance values). docs/measurement.md. */
void verify_tolerance(attn_dtype dtype, double *tol_abs, double *tol_rel_l2)
{
    switch (dtype) {
    case ATTN_BF16:
        *tol_abs = 4e-2;
        *tol_rel_l2 = 1.6e-2;
        break;
    case ATTN_FP16:
        *tol_abs = 5e-3;
        *tol_rel_l2 = 2e-3;
        break;
    default:
        *tol_abs = 1e-4;
        *tol_rel_l2 = 1e-5;
        break;
    }
}

void verify_compare_host(const void *out, attn_dtype dtype, const double *ref, int64_t n, const char *reference,
                         verify_result *v)
{
    double max_abs = 0.0, err2 = 0.0, ref2 = 0.0;
    int64_t i;
    memset(v, 0, sizeof *v);
    snprintf(v->reference, sizeof v->reference, "%s", reference ? reference : "");
    verify_tolerance(dtype, &v->tol_abs, &v->tol_rel_l2);
    for (i = 0; i < n; i++) {
        double o = (double)dtype_load_f32(out, dtype, i), r = ref[i];
        ref2 += r * r;
        if (!isfinite(o)) {
            v->nan++;
        } else {
            double e = fabs(o - r);
            if (e > max_abs) max_abs = e;
            err2 += e * e;
        }
    }
    if (v->nan) {
        v->max_abs_err = NAN;
        v->rel_l2_err = NAN;
    } else {
        v->max_abs_err = max_abs;
        v->rel_l2_err = ref2 > 0.0 ? sqrt(err2 / ref2) : (err2 > 0.0 ? INFINITY : 0.0);
    }
    v->pass = v->nan == 0 && v->max_abs_err <= v->tol_abs && v->rel_l2_err <= v->tol_rel_l2;
}

cJSON *output_to_json(const output_summary *s, const attn_problem *p)
{
    cJSON *o = cJSON_CreateObject(), *shape;
    char hex[17];
    if (!o) return NULL;
    shape = cJSON_AddArrayToObject(o, "shape");
    if (shape && p->ragged) { /* packed, token-major: [total_q, H, Dv] */
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)p->total_q));
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)p->heads));
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)attn_dv(p)));
    } else if (shape) {
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)p->batch));
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)p->heads));
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)p->seq_q));
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)attn_dv(p)));
    }
    cJSON_AddStringToObject(o, "dtype", attn_dtype_name(p->dtype));
    json_add_number_or_null(o, "sum", s->sum);
    json_add_number_or_null(o, "abs_sum", s->abs_sum);
    cJSON_AddNumberToObject(o, "nan", (double)s->nan);
    cJSON_AddNumberToObject(o, "inf", (double)s->inf);
    /* A string: 64 bits do not survive a JSON number (a double) in most clients. */
    snprintf(hex, sizeof hex, "%016" PRIx64, s->fingerprint);
    cJSON_AddStringToObject(o, "fingerprint", hex);
    return o;
}

cJSON *verify_to_json(const verify_result *v)
{
    cJSON *o = cJSON_CreateObject(), *tol;
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "reference", v->reference);
    json_add_number_or_null(o, "max_abs_err", v->max_abs_err);
    json_add_number_or_null(o, "rel_l2_err", v->rel_l2_err);
    tol = cJSON_AddObjectToObject(o, "tol");
    if (tol) {
        json_add_number_or_null(tol, "abs", v->tol_abs);
        json_add_number_or_null(tol, "rel_l2", v->tol_rel_l2);
    }
    cJSON_AddNumberToObject(o, "nan", (double)v->nan);
    cJSON_AddBoolToObject(o, "pass", v->pass != 0);
    return o;
}
