/* test_reference.c — the fp64 reference (kernels/reference.c) against the most direct
 * implementation there is: the full score matrix with -inf where masked, then softmax,
 * then p·v, all in double. Small random shapes over every mask; Sq ≠ Skv both ways; D = 1;
 * S = 1; fully masked rows; more rows than one work item; any thread count gives the same
 * bits; and the `reference` variant's rounding. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/decomposed.h"
#include "kernels/dtype_convert.h"
#include "kernels/inputs.h"
#include "tests/unit/check.h"

static void naive_attention(const attn_problem *p, const void *q, const void *k, const void *v, double *out)
{
    int64_t sq = p->seq_q, skv = p->seq_kv, d = p->head_dim;
    double *s = malloc((size_t)skv * sizeof(double));
    for (int64_t bh = 0; bh < p->batch * p->heads; bh++)
        for (int64_t i = 0; i < sq; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < skv; j++) {
                int masked = (p->mask == ATTN_MASK_CAUSAL && j > i) ||
                             (p->mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT && j > i + skv - sq);
                double dot = 0;
                for (int64_t c = 0; c < d; c++)
                    dot += (double)dtype_load_f32(q, p->dtype, (bh * sq + i) * d + c) *
                           (double)dtype_load_f32(k, p->dtype, (bh * skv + j) * d + c);
                s[j] = masked ? -INFINITY : p->scale * dot;
                if (s[j] > mx) mx = s[j];
            }
            for (int64_t j = 0; j < skv; j++) {
                s[j] = (mx == -INFINITY) ? 0 : exp(s[j] - mx);
                sum += s[j];
            }
            for (int64_t c = 0; c < d; c++) {
                double acc = 0;
                for (int64_t j = 0; j < skv; j++) acc += s[j] * (double)dtype_load_f32(v, p->dtype, (bh * skv + j) * d + c);
                out[(bh * sq + i) * d + c] = sum > 0 ? acc / sum : 0.0; /* safe softmax: zeros */
            }
        }
    free(s);
}

typedef struct case_data {
    attn_problem p;
    void *q, *k, *v;
    double *ref, *want;
} case_data;

static void case_make(case_data *c, attn_problem p, uint64_t seed)
{
    size_t esz = attn_dtype_bytes(p.dtype);
    c->p = p;
    c->q = malloc((size_t)attn_q_elems(&p) * esz);
    c->k = malloc((size_t)attn_kv_elems(&p) * esz);
    c->v = malloc((size_t)attn_kv_elems(&p) * esz);
    c->ref = malloc((size_t)attn_out_elems(&p) * sizeof(double));
    c->want = malloc((size_t)attn_out_elems(&p) * sizeof(double));
    inputs_generate_cpu(c->q, p.dtype, attn_q_elems(&p), seed, INPUTS_TENSOR_Q);
    inputs_generate_cpu(c->k, p.dtype, attn_kv_elems(&p), seed, INPUTS_TENSOR_K);
    inputs_generate_cpu(c->v, p.dtype, attn_kv_elems(&p), seed, INPUTS_TENSOR_V);
    naive_attention(&p, c->q, c->k, c->v, c->want);
}

static void case_free(case_data *c) { free(c->q), free(c->k), free(c->v), free(c->ref), free(c->want); }

static double max_rel_diff(const double *a, const double *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]) / (fabs(b[i]) + 1e-300);
        if (a[i] == b[i]) d = 0;
        if (d > m || isnan(a[i])) m = isnan(a[i]) ? INFINITY : d;
    }
    return m;
}

static void test_random_shapes(void)
{
    uint64_t rng = 99;
    for (int it = 0; it < 60; it++) {
        case_data c;
        attn_problem p;
        rng = inputs_mix64(rng + 1);
        p.batch = 1 + (int64_t)(rng % 2);
        p.heads = 1 + (int64_t)((rng >> 8) % 3);
        p.seq_q = 1 + (int64_t)((rng >> 16) % 40);
        p.seq_kv = 1 + (int64_t)((rng >> 24) % 40);
        p.head_dim = 1 + (int64_t)((rng >> 32) % 24);
        p.dtype = (attn_dtype)((rng >> 40) % 3);
        p.mask = (attn_mask)((rng >> 44) % 3);
        p.scale = ((rng >> 48) % 4 == 0) ? 0.7 : 1.0 / sqrt((double)p.head_dim);
        case_make(&c, p, rng);
        CHECK(reference_attention_f64(&p, c.q, c.k, c.v, c.ref, 1 + it % 4) == 0, "runs");
        double e = max_rel_diff(c.ref, c.want, attn_out_elems(&p));
        CHECK(e < 1e-12, "B%lld H%lld Sq%lld Skv%lld D%lld %s %s: rel diff %g", (long long)p.batch,
              (long long)p.heads, (long long)p.seq_q, (long long)p.seq_kv, (long long)p.head_dim,
              attn_dtype_name(p.dtype), attn_mask_name(p.mask), e);
        case_free(&c);
    }
}

static void test_edges(void)
{
    case_data c;
    attn_problem p;

    /* S = 1, D = 1: out = v exactly (one key, weight 1). */
    p = (attn_problem){1, 1, 1, 1, 1, ATTN_FP32, ATTN_MASK_CAUSAL, 1.0, ATTN_IMPL_DEFAULT};
    case_make(&c, p, 7);
    CHECK(reference_attention_f64(&p, c.q, c.k, c.v, c.ref, 0) == 0 && c.ref[0] == (double)((float *)c.v)[0],
          "S=1, D=1 gives v");
    case_free(&c);

    /* Bottom-right with Sq > Skv: the first Sq - Skv rows are fully masked → zeros. */
    p = (attn_problem){2, 2, 9, 4, 3, ATTN_BF16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0.5, ATTN_IMPL_DEFAULT};
    case_make(&c, p, 8);
    CHECK(reference_attention_f64(&p, c.q, c.k, c.v, c.ref, 3) == 0, "runs");
    {
        int zeros = 1, nonzero = 1;
        for (int64_t bh = 0; bh < 4; bh++)
            for (int64_t i = 0; i < 9; i++)
                for (int64_t d = 0; d < 3; d++) {
                    double x = c.ref[(bh * 9 + i) * 3 + d];
                    if (i < 5 && x != 0.0) zeros = 0;
                    if (i >= 5 && x == 0.0) nonzero = 0;
                }
        CHECK(zeros && nonzero, "fully masked rows are zeros, the others are not");
        CHECK(max_rel_diff(c.ref, c.want, attn_out_elems(&p)) < 1e-12, "matches naive");
    }
    case_free(&c);

    /* Many rows (several work items per head), Sq < Skv, every thread count the same bits. */
    p = (attn_problem){1, 3, 100, 130, 16, ATTN_FP16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0.25, ATTN_IMPL_DEFAULT};
    case_make(&c, p, 9);
    {
        int64_t n = attn_out_elems(&p);
        double *other = malloc((size_t)n * sizeof(double));
        CHECK(reference_attention_f64(&p, c.q, c.k, c.v, c.ref, 1) == 0, "1 thread");
        CHECK(max_rel_diff(c.ref, c.want, n) < 1e-12, "matches naive");
        for (int th = 0; th < 12; th += 5) {
            CHECK(reference_attention_f64(&p, c.q, c.k, c.v, other, th) == 0, "%d threads", th);
            CHECK(memcmp(other, c.ref, (size_t)n * sizeof(double)) == 0, "%d threads: same bits", th);
        }
        free(other);
    }
    case_free(&c);

    /* Large scores: the max subtraction keeps exp finite. */
    p = (attn_problem){1, 1, 5, 7, 4, ATTN_FP32, ATTN_MASK_NONE, 500.0, ATTN_IMPL_DEFAULT};
    case_make(&c, p, 10);
    CHECK(reference_attention_f64(&p, c.q, c.k, c.v, c.ref, 2) == 0, "runs");
    CHECK(max_rel_diff(c.ref, c.want, attn_out_elems(&p)) < 1e-12, "scale 500 stays finite and matches");
    case_free(&c);
}

static void test_variant_forward(void)
{
    for (int t = 0; t < ATTN_DTYPE_COUNT; t++) {
        attn_problem p = {2, 2, 33, 17, 8, (attn_dtype)t, ATTN_MASK_CAUSAL, 1.0 / sqrt(8.0), ATTN_IMPL_DEFAULT};
        case_data c;
        exec_context ctx;
        int64_t n = attn_out_elems(&p), bad = 0;
        size_t ws = reference_workspace_bytes(&p);
        double *w = malloc(ws);
        void *out = malloc((size_t)n * attn_dtype_bytes(p.dtype));
        attn_tensors tt;

        case_make(&c, p, 11);
        memset(&ctx, 0, sizeof ctx);
        ctx.device = -1;
        tt.q = c.q, tt.k = c.k, tt.v = c.v, tt.out = out;
        CHECK(ws == (size_t)n * 8, "workspace is the fp64 output");
        reference_set_threads(2);
        CHECK(reference_forward(&ctx, &p, &tt, w) == 0, "forward %s", attn_dtype_name(p.dtype));
        for (int64_t i = 0; i < n; i++) {
            float want = (float)w[i]; /* the contract: double → float → dtype */
            uint16_t h = 0;
            if (p.dtype == ATTN_FP32) bad += ((float *)out)[i] != want;
            else {
                h = p.dtype == ATTN_BF16 ? dtype_f32_to_bf16(want) : dtype_f32_to_fp16(want);
                bad += ((uint16_t *)out)[i] != h;
            }
            bad += fabs(w[i] - c.want[i]) > 1e-12 * (fabs(c.want[i]) + 1e-30);
        }
        CHECK(bad == 0, "%s: %lld elements not the rounded reference", attn_dtype_name(p.dtype), (long long)bad);
        free(w), free(out);
        case_free(&c);
    }
    reference_set_threads(0);
}

int main(void)
{
    test_random_shapes();
    test_edges();
    test_variant_forward();
    return CHECK_DONE();
}
