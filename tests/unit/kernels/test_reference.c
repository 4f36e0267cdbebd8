/* test_reference.c — the fp64 reference (kernels/cpu/reference.c) against the most direct
 * implementation there is: the full score matrix with -inf where masked, then softmax,
 * then p·v, all in double. Small random shapes over every mask, with and without grouped K/V
 * heads, a sliding window and a value head dim of its own; Sq ≠ Skv both ways; D = 1; S = 1;
 * fully masked rows; more rows than one work item; any thread count gives the same bits; the
 * work measures (attn_visible_pairs) against a count; and the `reference` variant's rounding.
 * Serving batches: ragged (empty and one-token sequences among them) and paged (page_size 1,
 * 16 and odd ones, Skv not a multiple of the page), each sequence checked against the direct
 * implementation on its own rows, found by index arithmetic written out here; a paged cache
 * gives the very bits of its contiguous twin. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/decomposed.h"
#include "kernels/dtype_convert.h"
#include "kernels/inputs.h"
#include "kernels/seq_layout.h"
#include "tests/unit/check.h"

/* Is key j hidden from query row i? The definitions, written out: the causal masks as SDPA
 * (top-left) and FlashAttention (bottom-right) state them, and the window as "more than W-1
 * keys before the row's position". */
static int masked(const attn_problem *p, int64_t i, int64_t j)
{
    int64_t pos = p->mask == ATTN_MASK_CAUSAL_BOTTOM_RIGHT ? i + p->seq_kv - p->seq_q : i;
    if (p->mask != ATTN_MASK_NONE && j > pos) return 1;
    return p->window_keys > 0 && j < pos - (p->window_keys - 1);
}

static void naive_attention(const attn_problem *p, const void *q, const void *k, const void *v, double *out)
{
    int64_t sq = p->seq_q, skv = p->seq_kv, d = p->head_dim, dv = p->head_dim_v ? p->head_dim_v : d;
    int64_t hkv = p->kv_heads ? p->kv_heads : p->heads, group = p->heads / hkv;
    double *s = malloc((size_t)skv * sizeof(double));
    for (int64_t bh = 0; bh < p->batch * p->heads; bh++) {
        int64_t kvh = (bh / p->heads) * hkv + (bh % p->heads) / group; /* repeat_interleave */
        for (int64_t i = 0; i < sq; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < skv; j++) {
                double dot = 0;
                for (int64_t c = 0; c < d; c++)
                    dot += (double)dtype_load_f32(q, p->dtype, (bh * sq + i) * d + c) *
                           (double)dtype_load_f32(k, p->dtype, (kvh * skv + j) * d + c);
                s[j] = masked(p, i, j) ? -INFINITY : p->scale * dot;
                if (s[j] > mx) mx = s[j];
            }
            for (int64_t j = 0; j < skv; j++) {
                s[j] = (mx == -INFINITY) ? 0 : exp(s[j] - mx);
                sum += s[j];
            }
            for (int64_t c = 0; c < dv; c++) {
                double acc = 0;
                for (int64_t j = 0; j < skv; j++)
                    acc += s[j] * (double)dtype_load_f32(v, p->dtype, (kvh * skv + j) * dv + c);
                out[(bh * sq + i) * dv + c] = sum > 0 ? acc / sum : 0.0; /* safe softmax: zeros */
            }
        }
    }
    free(s);
}

/* Visible pairs of one head, counted. */
static double counted_pairs(const attn_problem *p)
{
    double n = 0;
    for (int64_t i = 0; i < p->seq_q; i++)
        for (int64_t j = 0; j < p->seq_kv; j++) n += !masked(p, i, j);
    return n;
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
    c->k = malloc((size_t)attn_k_elems(&p) * esz);
    c->v = malloc((size_t)attn_v_elems(&p) * esz);
    c->ref = malloc((size_t)attn_out_elems(&p) * sizeof(double));
    c->want = malloc((size_t)attn_out_elems(&p) * sizeof(double));
    inputs_generate_cpu(c->q, p.dtype, attn_q_elems(&p), seed, INPUTS_TENSOR_Q);
    inputs_generate_cpu(c->k, p.dtype, attn_k_elems(&p), seed, INPUTS_TENSOR_K);
    inputs_generate_cpu(c->v, p.dtype, attn_v_elems(&p), seed, INPUTS_TENSOR_V);
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
    for (int it = 0; it < 120; it++) {
        case_data c;
        attn_problem p;
        static const int64_t heads[][2] = {{1, 1}, {2, 2}, {3, 3}, {4, 2}, {4, 1}, {6, 3}};
        rng = inputs_mix64(rng + 1);
        memset(&p, 0, sizeof p);
        p.batch = 1 + (int64_t)(rng % 2);
        p.heads = heads[(rng >> 8) % 6][0];
        p.kv_heads = it % 3 == 0 ? 0 : heads[(rng >> 8) % 6][1]; /* 0: the default, heads */
        p.seq_q = 1 + (int64_t)((rng >> 16) % 40);
        p.seq_kv = 1 + (int64_t)((rng >> 24) % 40);
        p.head_dim = 1 + (int64_t)((rng >> 32) % 24);
        p.dtype = (attn_dtype)((rng >> 40) % 3);
        p.mask = (attn_mask)((rng >> 44) % 3);
        p.scale = ((rng >> 48) % 4 == 0) ? 0.7 : 1.0 / sqrt((double)p.head_dim);
        p.window_keys = it % 2 ? 1 + (int64_t)((rng >> 52) % 12) : 0;
        p.head_dim_v = it % 4 == 1 ? 1 + (int64_t)((rng >> 56) % 20) : 0;
        case_make(&c, p, rng);
        CHECK(attn_visible_pairs(&p) == counted_pairs(&p), "visible pairs Sq%lld Skv%lld %s window %lld: %g, counted %g",
              (long long)p.seq_q, (long long)p.seq_kv, attn_mask_name(p.mask), (long long)p.window_keys,
              attn_visible_pairs(&p), counted_pairs(&p));
        CHECK(reference_attention_f64(&p, c.q, c.k, c.v, c.ref, 1 + it % 4) == 0, "runs");
        double e = max_rel_diff(c.ref, c.want, attn_out_elems(&p));
        CHECK(e < 1e-12, "B%lld H%lld Hkv%lld Sq%lld Skv%lld D%lld Dv%lld %s %s window %lld: rel diff %g",
              (long long)p.batch, (long long)p.heads, (long long)attn_kv_heads(&p), (long long)p.seq_q,
              (long long)p.seq_kv, (long long)p.head_dim, (long long)attn_dv(&p), attn_dtype_name(p.dtype),
              attn_mask_name(p.mask), (long long)p.window_keys, e);
        case_free(&c);
    }
}

static void test_edges(void)
{
    case_data c;
    attn_problem p;

    /* S = 1, D = 1: out = v exactly (one key, weight 1). */
    p = attn_mha(1, 1, 1, 1, 1, ATTN_FP32, ATTN_MASK_CAUSAL, 1.0);
    case_make(&c, p, 7);
    CHECK(reference_attention_f64(&p, c.q, c.k, c.v, c.ref, 0) == 0 && c.ref[0] == (double)((float *)c.v)[0],
          "S=1, D=1 gives v");
    case_free(&c);

    /* Bottom-right with Sq > Skv: the first Sq - Skv rows are fully masked → zeros. */
    p = attn_mha(2, 2, 9, 4, 3, ATTN_BF16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0.5);
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
    p = attn_mha(1, 3, 100, 130, 16, ATTN_FP16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0.25);
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
    p = attn_mha(1, 1, 5, 7, 4, ATTN_FP32, ATTN_MASK_NONE, 500.0);
    case_make(&c, p, 10);
    CHECK(reference_attention_f64(&p, c.q, c.k, c.v, c.ref, 2) == 0, "runs");
    CHECK(max_rel_diff(c.ref, c.want, attn_out_elems(&p)) < 1e-12, "scale 500 stays finite and matches");
    case_free(&c);
}

static void test_variant_forward(void)
{
    for (int t = 0; t < ATTN_DTYPE_COUNT; t++) {
        attn_problem p = attn_mha(2, 2, 33, 17, 8, (attn_dtype)t, ATTN_MASK_CAUSAL, 1.0 / sqrt(8.0));
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

/* ---- serving batches */

typedef struct serving_case {
    attn_problem p;
    seq_layout lay;
    int32_t len_q[8], len_kv[8];
    void *q, *k, *v;
    double *ref;
} serving_case;

/* p's inputs in its layout and the reference's output; p describes everything but the arrays. */
static void serving_make(serving_case *c, uint64_t seed)
{
    size_t esz = attn_dtype_bytes(c->p.dtype);
    CHECK(seq_layout_build(&c->lay, &c->p, c->len_q, c->len_kv, seed) == 0, "layout");
    c->q = malloc((size_t)attn_q_elems(&c->p) * esz + 1);
    c->k = malloc((size_t)attn_k_elems(&c->p) * esz + 1);
    c->v = malloc((size_t)attn_v_elems(&c->p) * esz + 1);
    c->ref = malloc((size_t)attn_out_elems(&c->p) * sizeof(double) + 1);
    inputs_generate_problem_cpu(&c->p, seed, c->q, c->k, c->v);
}

static void serving_free(serving_case *c)
{
    free(c->q), free(c->k), free(c->v), free(c->ref);
    seq_layout_free(&c->lay);
}

/* Element `at` of src (p's dtype) into the double array. */
static double load(const attn_problem *p, const void *src, int64_t at) { return (double)dtype_load_f32(src, p->dtype, at); }

/* Sequence b of c as a dense problem of its own, its tensors copied out of c's layout by the
 * layout's definitions (attn.h, seq_layout.h) written out; run naive_attention on it and
 * compare with c's reference rows of that sequence. The worst relative difference. */
static double serving_check_sequence(const serving_case *c, int64_t b)
{
    const attn_problem *p = &c->p;
    const int64_t H = p->heads, Hkv = attn_kv_heads(p), D = p->head_dim, Dv = attn_dv(p);
    const int64_t sq = p->ragged ? c->lay.cu_seqlens_q[b + 1] - c->lay.cu_seqlens_q[b] : p->seq_q;
    const int64_t skv = p->ragged ? c->lay.cu_seqlens_kv[b + 1] - c->lay.cu_seqlens_kv[b] : p->seq_kv;
    attn_problem one = *p;
    double *q, *k, *v, *want, worst = 0.0;
    int64_t h, i, j, d;

    one.batch = 1, one.seq_q = sq, one.seq_kv = skv, one.dtype = ATTN_FP32; /* copied as float: exact */
    one.ragged = 0, one.page_size = 0, one.num_pages = 0, one.seqs = NULL;
    if (sq == 0) return 0.0;
    q = calloc((size_t)(H * sq * D) + 1, sizeof *q), k = calloc((size_t)(Hkv * skv * D) + 1, sizeof *k);
    v = calloc((size_t)(Hkv * skv * Dv) + 1, sizeof *v), want = calloc((size_t)(H * sq * Dv) + 1, sizeof *want);
    for (h = 0; h < H; h++)
        for (i = 0; i < sq; i++)
            for (d = 0; d < D; d++)
                q[(h * sq + i) * D + d] = load(p, c->q, p->ragged ? ((c->lay.cu_seqlens_q[b] + i) * H + h) * D + d
                                                                  : ((b * H + h) * sq + i) * D + d);
    for (h = 0; h < Hkv; h++)
        for (j = 0; j < skv; j++) {
            int64_t slot; /* the token's row of the stored K/V, [.., Hkv, dim] */
            if (p->page_size > 0)
                slot = (int64_t)c->lay.block_table[b * c->lay.seqs.pages_per_seq + j / p->page_size] * p->page_size +
                       j % p->page_size;
            else
                slot = c->lay.cu_seqlens_kv ? c->lay.cu_seqlens_kv[b] + j : -1;
            for (d = 0; d < D; d++)
                k[(h * skv + j) * D + d] = load(p, c->k, slot >= 0 ? (slot * Hkv + h) * D + d : ((b * Hkv + h) * skv + j) * D + d);
            for (d = 0; d < Dv; d++)
                v[(h * skv + j) * Dv + d] = load(p, c->v, slot >= 0 ? (slot * Hkv + h) * Dv + d : ((b * Hkv + h) * skv + j) * Dv + d);
        }
    {
        float *qf = malloc((size_t)(H * sq * D) * 4 + 4), *kf = malloc((size_t)(Hkv * skv * D) * 4 + 4);
        float *vf = malloc((size_t)(Hkv * skv * Dv) * 4 + 4);
        for (i = 0; i < H * sq * D; i++) qf[i] = (float)q[i];
        for (i = 0; i < Hkv * skv * D; i++) kf[i] = (float)k[i];
        for (i = 0; i < Hkv * skv * Dv; i++) vf[i] = (float)v[i];
        naive_attention(&one, qf, kf, vf, want);
        free(qf), free(kf), free(vf);
    }
    for (h = 0; h < H; h++)
        for (i = 0; i < sq; i++)
            for (d = 0; d < Dv; d++) {
                double got = c->ref[p->ragged ? ((c->lay.cu_seqlens_q[b] + i) * H + h) * Dv + d : ((b * H + h) * sq + i) * Dv + d];
                double w = want[(h * sq + i) * Dv + d], r = got == w ? 0.0 : fabs(got - w) / (fabs(w) + 1e-300);
                if (!(r <= worst)) worst = isnan(got) ? INFINITY : r;
            }
    free(q), free(k), free(v), free(want);
    return worst;
}

static void test_serving(void)
{
    uint64_t rng = 1234;
    static const int64_t pages[] = {0, 1, 16, 3, 5, 7};
    for (int it = 0; it < 90; it++) {
        serving_case c, flat;
        static const int64_t heads[][2] = {{1, 1}, {2, 2}, {4, 2}, {4, 1}, {6, 3}};
        int64_t b, longest_q = 0, longest_kv = 0;
        rng = inputs_mix64(rng + 7);
        memset(&c, 0, sizeof c);
        c.p.batch = 1 + (int64_t)(rng % 5);
        c.p.heads = heads[(rng >> 4) % 5][0];
        c.p.kv_heads = heads[(rng >> 4) % 5][1];
        c.p.head_dim = 1 + (int64_t)((rng >> 8) % 12);
        c.p.head_dim_v = it % 3 == 1 ? 1 + (int64_t)((rng >> 12) % 9) : 0;
        c.p.dtype = (attn_dtype)((rng >> 16) % 3);
        c.p.mask = (attn_mask)((rng >> 18) % 3);
        c.p.scale = 1.0 / sqrt((double)c.p.head_dim);
        c.p.window_keys = it % 4 == 3 ? 1 + (int64_t)((rng >> 20) % 6) : 0;
        c.p.ragged = (unsigned)(it % 4); /* 0: dense and paged, then each side, then both */
        for (b = 0; b < c.p.batch; b++) { /* 0, 1, and longer; an empty sequence now and then */
            uint64_t x = inputs_mix64(rng + (uint64_t)b);
            c.len_q[b] = (int32_t)(x % 4 == 0 ? x % 2 : x % 23);
            c.len_kv[b] = (int32_t)((x >> 8) % 5 == 0 ? (x >> 12) % 2 : (x >> 12) % 41);
            longest_q = c.len_q[b] > longest_q ? c.len_q[b] : longest_q;
            longest_kv = c.len_kv[b] > longest_kv ? c.len_kv[b] : longest_kv;
        }
        c.p.seq_q = (c.p.ragged & ATTN_RAGGED_Q) ? (longest_q > 0 ? longest_q : 1) : 1 + (int64_t)((rng >> 24) % 9);
        c.p.seq_kv = (c.p.ragged & ATTN_RAGGED_KV) ? (longest_kv > 0 ? longest_kv : 1) : 1 + (int64_t)((rng >> 28) % 37);
        c.p.total_q = c.p.total_kv = 0;
        for (b = 0; b < c.p.batch; b++) {
            c.p.total_q += (c.p.ragged & ATTN_RAGGED_Q) ? c.len_q[b] : c.p.seq_q;
            c.p.total_kv += (c.p.ragged & ATTN_RAGGED_KV) ? c.len_kv[b] : c.p.seq_kv;
        }
        if (!c.p.ragged) c.p.total_q = c.p.total_kv = 0;
        flat = c; /* the contiguous twin, before paging */
        c.p.page_size = pages[(it / 4) % 6];
        if (c.p.page_size == 0) c.p.page_size = 2;
        {
            int64_t need = 0;
            for (b = 0; b < c.p.batch; b++)
                need += ((c.p.ragged & ATTN_RAGGED_KV ? c.len_kv[b] : c.p.seq_kv) + c.p.page_size - 1) / c.p.page_size;
            c.p.num_pages = need + 1 + (int64_t)((rng >> 40) % 5); /* unused pages among the used ones */
        }
        serving_make(&c, rng);
        serving_make(&flat, rng);
        CHECK(reference_attention_f64(&c.p, c.q, c.k, c.v, c.ref, 1 + it % 3) == 0, "paged runs");
        CHECK(reference_attention_f64(&flat.p, flat.q, flat.k, flat.v, flat.ref, 2) == 0, "contiguous runs");
        for (b = 0; b < c.p.batch; b++) {
            double e = serving_check_sequence(&c, b), ef = serving_check_sequence(&flat, b);
            CHECK(e < 1e-12 && ef < 1e-12, "case %d sequence %lld (ragged %u, page_size %lld, H%lld Hkv%lld D%lld Dv%lld "
                  "%s %s window %lld): rel diff %g paged, %g contiguous", it, (long long)b, c.p.ragged,
                  (long long)c.p.page_size, (long long)c.p.heads, (long long)attn_kv_heads(&c.p), (long long)c.p.head_dim,
                  (long long)attn_dv(&c.p), attn_dtype_name(c.p.dtype), attn_mask_name(c.p.mask),
                  (long long)c.p.window_keys, e, ef);
        }
        CHECK(attn_out_elems(&c.p) == attn_out_elems(&flat.p) &&
                  !memcmp(c.ref, flat.ref, (size_t)attn_out_elems(&c.p) * sizeof(double)),
              "case %d: the paged cache gives its contiguous twin's bits", it);
        { /* the cache holds the twin's K and V: gathered back, they are its bytes */
            size_t esz = attn_dtype_bytes(c.p.dtype), kb = (size_t)attn_k_elems(&flat.p) * esz;
            size_t vb = (size_t)attn_v_elems(&flat.p) * esz;
            void *k = calloc(kb + 1, 1), *v = calloc(vb + 1, 1);
            seq_layout_from_pages(&c.p, c.k, k, c.p.head_dim, esz);
            seq_layout_from_pages(&c.p, c.v, v, attn_dv(&c.p), esz);
            CHECK(!memcmp(k, flat.k, kb) && !memcmp(v, flat.v, vb), "case %d: pages gathered are the twin's K, V", it);
            memset(k, 0, kb);
            seq_layout_to_pages(&c.p, flat.k, c.k, c.p.head_dim, esz); /* and scattered back: unchanged */
            seq_layout_from_pages(&c.p, c.k, k, c.p.head_dim, esz);
            CHECK(!memcmp(k, flat.k, kb), "case %d: to_pages then from_pages", it);
            free(k), free(v);
        }
        { /* any thread count: the same bits */
            double *other = malloc((size_t)attn_out_elems(&c.p) * sizeof(double) + 1);
            CHECK(reference_attention_f64(&c.p, c.q, c.k, c.v, other, 4) == 0 &&
                      !memcmp(other, c.ref, (size_t)attn_out_elems(&c.p) * sizeof(double)),
                  "case %d: 4 threads, same bits", it);
            free(other);
        }
        serving_free(&c);
        serving_free(&flat);
    }
}

int main(void)
{
    test_random_shapes();
    test_edges();
    test_variant_forward();
    test_serving();
    return CHECK_DONE();
}
