/* test_cudnn_serving.c — the `cudnn` variant's serving batches: paged K/V caches and ragged
 * batches (kernels/cudnn/cudnn_serving.cu, the serving graph of kernels/cudnn/cudnn_sdpa.c).
 *
 * Without a GPU: every tensor and operation of each serving graph (padding mask, ragged
 * offsets on Q/K/V/O, paged cache loads, the bands shifted by each sequence's lengths) is
 * accepted and finalized by cuDNN itself, with the operations counted; the plan key tells
 * the layouts apart; the front's check and cudnn_serving_check refuse what cuDNN does not
 * run (release floors, page sizes, INT32 offsets, query rows without keys); the workspace
 * bound covers the per-sequence arrays.
 *
 * With a GPU: forwards against reference_attention_f64 (the fp64 oracle, which reads the
 * serving layouts) for odd batches — page_size 1 and 16, sequences of length 0 and 1, seq_kv
 * not a multiple of the page, GQA, windows, both causal alignments — and each paged batch
 * against its contiguous twin. Run on the lent GPU by scripts/gpu-session.sh's `unit` phase
 * (UNIT_GPU names this binary).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels/cudnn/cudnn_loader.h"
#include "kernels/cudnn/cudnn_sdpa.h"
#include "kernels/cudnn/cudnn_serving.h"
#include "kernels/decomposed.h"
#include "kernels/dtype_convert.h"
#include "kernels/seq_layout.h"
#include "tests/unit/check.h"

/* A serving batch of `batch` sequences: lengths len_q/len_kv (NULL: every sequence the bound),
 * pages of page_size tokens (0: contiguous) in a cache of that many pages and 3 spare. Builds
 * the layout into *l (seq_layout_free it). */
static attn_problem serving(seq_layout *l, int64_t batch, int64_t heads, int64_t kv_heads, int64_t d,
                            const int32_t *len_q, const int32_t *len_kv, int64_t seq_q, int64_t seq_kv,
                            int64_t page_size, attn_mask mask, int64_t window, attn_dtype t)
{
    attn_problem p = attn_mha(batch, heads, seq_q, seq_kv, d, t, mask, 1.0 / sqrt((double)d));
    int64_t b;
    p.kv_heads = kv_heads, p.window_keys = window;
    p.ragged = (len_q ? ATTN_RAGGED_Q : 0u) | (len_kv ? ATTN_RAGGED_KV : 0u);
    if (p.ragged) {
        p.seq_q = p.seq_kv = 0, p.total_q = p.total_kv = 0;
        for (b = 0; b < batch; b++) {
            int64_t q = len_q ? len_q[b] : seq_q, kv = len_kv ? len_kv[b] : seq_kv;
            p.total_q += q, p.total_kv += kv;
            if (q > p.seq_q) p.seq_q = q;
            if (kv > p.seq_kv) p.seq_kv = kv;
        }
    }
    p.page_size = page_size;
    if (page_size > 0) {
        p.num_pages = 3;
        for (b = 0; b < batch; b++) p.num_pages += ((len_kv ? len_kv[b] : p.seq_kv) + page_size - 1) / page_size;
    }
    memset(l, 0, sizeof *l);
    CHECK(seq_layout_build(l, &p, len_q, len_kv, 7) == 0, "seq_layout_build");
    return p;
}

/* ---- without a GPU ---------------------------------------------------------------------- */

static void test_graph_descriptors(void)
{
    static const int32_t lq[4] = {5, 0, 1, 7}, lkv[4] = {33, 0, 17, 9};
    static const struct {
        int ragged, page_size;
        attn_mask mask;
        int64_t window;
        int ops;
    } cases[] = {
        /* dense 10; padding: gen_index ×2, cmp_lt ×2, and, select (+6); each paged load +1 */
        {0, 16, ATTN_MASK_NONE, 0, 18},
        {0, 1, ATTN_MASK_CAUSAL, 0, 22},              /* + the causal band (4) */
        {0, 16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0, 24}, /* + add seq_len_kv, sub seq_len_q */
        {1, 0, ATTN_MASK_NONE, 0, 16},
        {1, 0, ATTN_MASK_CAUSAL, 7, 25},               /* + the window's FLOAT band (5) */
        {1, 0, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 7, 29},  /* + INT32 band: add L, sub skv, add sq (7) */
        {1, 16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0, 24},
        {1, 1, ATTN_MASK_NONE, 4, 23},
    };
    size_t i;
    int stats_real;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (stats_real = 0; stats_real < 2; stats_real++) {
            seq_layout l;
            attn_problem p = serving(&l, 4, 8, 2, 64, cases[i].ragged ? lq : NULL, cases[i].ragged ? lkv : NULL, 6,
                                     40, cases[i].page_size, cases[i].mask, cases[i].window, ATTN_BF16);
            char err[512] = "";
            int n_ops = -1, rc;
            rc = cudnn_sdpa_graph_selftest(&p, stats_real, 0, &n_ops, err, sizeof err);
            CHECK(rc == 0, "case %zu stats_real=%d: %s", i, stats_real, err);
            CHECK(n_ops == cases[i].ops, "case %zu: %d ops, want %d", i, n_ops, cases[i].ops);
            seq_layout_free(&l);
        }
}

static void test_keys(void)
{
    static const int32_t lq[3] = {4, 0, 9}, lkv[3] = {12, 3, 12};
    seq_layout l1, l2;
    attn_problem dense = attn_mha(3, 8, 9, 12, 64, ATTN_BF16, ATTN_MASK_CAUSAL, 0.125);
    attn_problem ragged = serving(&l1, 3, 8, 8, 64, lq, lkv, 0, 0, 0, ATTN_MASK_CAUSAL, 0, ATTN_BF16);
    attn_problem paged = serving(&l2, 3, 8, 8, 64, lq, lkv, 0, 0, 16, ATTN_MASK_CAUSAL, 0, ATTN_BF16);
    attn_problem q;
    attn_seqs wide;
    cudnn_sdpa_key a, b;

    cudnn_sdpa_key_make(&dense, 0, &a);
    cudnn_sdpa_key_make(&ragged, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "a ragged batch of the dense bounds has its own plan");
    cudnn_sdpa_key_make(&paged, 0, &a);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "paging is part of the key");
    q = paged, q.page_size = 1, q.num_pages = 30, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "page_size is part of the key");
    q = paged, q.num_pages += 1, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "num_pages (the container) is part of the key");
    wide = *paged.seqs, wide.pages_per_seq += 2;
    q = paged, q.seqs = &wide, cudnn_sdpa_key_make(&q, 0, &b);
    CHECK(!cudnn_sdpa_key_equal(&a, &b), "the block table's row stride is part of the key");
    q = ragged, q.ragged = ATTN_RAGGED_KV, cudnn_sdpa_key_make(&q, 0, &a), cudnn_sdpa_key_make(&ragged, 0, &b);
    CHECK(cudnn_sdpa_key_equal(&a, &b), "which side is ragged changes the lengths, not the graph");
    seq_layout_free(&l1), seq_layout_free(&l2);
}

static void test_checks(void)
{
    static const int32_t lq[3] = {4, 0, 9}, lkv[3] = {12, 0, 12};
    char why[512];
    seq_layout l;
    attn_problem p = serving(&l, 3, 8, 2, 128, lq, lkv, 0, 0, 16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0, ATTN_BF16);
    attn_problem q = p;
    attn_seqs s = *p.seqs;
    int32_t cu_q[4], cu_kv[4];

    CHECK(variant_check_cudnn(&p, why, sizeof why) == 0, "paged ragged bottom-right: %s", why);
    CHECK(cudnn_serving_check(&p, 91900, 90, why, sizeof why) == 0, "9.19: %s", why);
    CHECK(cudnn_serving_check(&p, 90400, 90, why, sizeof why) == -1 && strstr(why, "9.5.0"), "9.4: %s", why);
    CHECK(cudnn_serving_check(&p, 90700, 90, why, sizeof why) == -1 && strstr(why, "ragged"), "9.7: %s", why);
    q.head_dim = 192;
    CHECK(cudnn_serving_check(&q, 90900, 90, why, sizeof why) == -1 && strstr(why, "128"), "9.9 d192: %s", why);
    q = p, q.page_size = 0;
    CHECK(cudnn_serving_check(&q, 91800, 80, why, sizeof why) == -1 && strstr(why, "Hopper"), "sm80 9.18.0: %s", why);
    CHECK(cudnn_serving_check(&q, 91801, 80, why, sizeof why) == 0, "sm80 9.18.1: %s", why);
    CHECK(cudnn_serving_check(&q, 91800, 0, why, sizeof why) == 0, "unknown device: %s", why);

    /* query rows without keys, sequence by sequence */
    q = p, q.seqs = &s, s.cu_seqlens_q = cu_q, s.cu_seqlens_kv = cu_kv;
    cu_q[0] = 0, cu_q[1] = 4, cu_q[2] = 5, cu_q[3] = 14; /* lengths 4 1 9 */
    cu_kv[0] = 0, cu_kv[1] = 12, cu_kv[2] = 12, cu_kv[3] = 24; /* 12 0 12: sequence 1 has a query, no key */
    CHECK(cudnn_serving_check(&q, 91900, 90, why, sizeof why) == -1 && strstr(why, "sequence 1"), "empty keys: %s",
          why);
    cu_kv[2] = 15, cu_kv[3] = 20; /* 12 3 5: sequence 2 has 9 queries, 5 keys, bottom-right */
    CHECK(cudnn_serving_check(&q, 91900, 90, why, sizeof why) == -1 && strstr(why, "sequence 2"), "br sq>skv: %s",
          why);
    q.mask = ATTN_MASK_CAUSAL; /* top-left: row i sees min(i+1, skv) keys */
    CHECK(cudnn_serving_check(&q, 91900, 90, why, sizeof why) == 0, "top-left sq>skv: %s", why);
    q.window_keys = 3; /* top-left row 8 of sequence 2: keys 6..8, none below 5 */
    CHECK(cudnn_serving_check(&q, 91900, 90, why, sizeof why) == -1 && strstr(why, "window_keys 3"), "window: %s",
          why);
    q.mask = ATTN_MASK_CAUSAL_BOTTOM_RIGHT, cu_kv[3] = 24, q.window_keys = 1;
    CHECK(cudnn_serving_check(&q, 91900, 90, why, sizeof why) == 0, "br window 1: %s", why);
    cu_q[1] = 0, cu_q[2] = 0, cu_q[3] = 0, cu_kv[1] = 0, cu_kv[2] = 0, cu_kv[3] = 0; /* empty sequences */
    CHECK(cudnn_serving_check(&q, 91900, 90, why, sizeof why) == 0, "empty sequences: %s", why);

    /* the front's */
    q = p, q.page_size = 48;
    CHECK(variant_check_cudnn(&q, why, sizeof why) == -1 && strstr(why, "power of 2"), "page 48: %s", why);
    q = p, q.total_q = (int64_t)1 << 22, q.heads = 8, q.head_dim = 128; /* 2^32 elements of q */
    CHECK(variant_check_cudnn(&q, why, sizeof why) == -1 && strstr(why, "2^31"), "INT32 offsets: %s", why);
    q = p, q.window_keys = 4;
    CHECK(variant_check_cudnn(&q, why, sizeof why) == 0, "window with seq_q 9 <= seq_kv 12: %s", why);
    q.seq_q = 20; /* the bounds may cross: each sequence is checked */
    CHECK(variant_check_cudnn(&q, why, sizeof why) == 0, "ragged bounds sq > skv: %s", why);
    q = attn_mha(2, 8, 20, 12, 64, ATTN_BF16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0.1);
    CHECK(variant_check_cudnn(&q, why, sizeof why) == -1, "dense bottom-right sq > skv still refused");
    {
        size_t off[CUDNN_META_ARRAYS];
        attn_problem d = attn_padded(&p);
        CHECK(cudnn_meta_layout(&d, off) == 0, "a dense batch has no per-sequence arrays");
        CHECK(cudnn_meta_layout(&p, off) == 6 * 256 && off[CUDNN_META_OFFSET_O] == 5 * 256, "arrays 256-aligned");
        CHECK(variant_info_cudnn.workspace_bound(&p) >= variant_info_cudnn.workspace_bound(&d) + 6 * 256,
              "the bound covers them");
    }
    seq_layout_free(&l);
}

/* ---- GPU part ------------------------------------------------------------------------- */

static void fill(uint16_t *h, int64_t n, attn_dtype t, unsigned *seed)
{
    int64_t i;
    for (i = 0; i < n; i++) dtype_store_f32(h, t, i, (float)((rand_r(seed) % 2001) - 1000) / 1000.0f);
}

static void *to_device(const void *h, size_t bytes)
{
    void *d = NULL;
    CHECK(cudaMalloc(&d, bytes ? bytes : 16) == cudaSuccess, "cudaMalloc %zu", bytes);
    if (bytes && h) cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice); /* a failed copy would stay cudaGetLastError's */
    return d;
}

/* One forward of p (its layout built) on q, k, v (host, p's layouts) into out (host). 0, or
 * 1 when cuDNN refused p (why printed), -1 on a failure (checked). */
static int forward(exec_context *ctx, const attn_problem *p, const uint16_t *hq, const uint16_t *hk,
                   const uint16_t *hv, uint16_t *ho)
{
    const size_t esz = 2, no = (size_t)attn_out_elems(p);
    void *dq = to_device(hq, (size_t)attn_q_elems(p) * esz), *dk = to_device(hk, (size_t)attn_k_elems(p) * esz);
    void *dv = to_device(hv, (size_t)attn_v_elems(p) * esz), *dout = to_device(NULL, no * esz), *ws = NULL;
    void *dcq = NULL, *dckv = NULL, *dtable = NULL;
    char why[1024] = "";
    attn_tensors t;
    int rc;

    memset(&t, 0, sizeof t);
    if (p->ragged) {
        dcq = to_device(p->seqs->cu_seqlens_q, (size_t)(p->batch + 1) * 4);
        dckv = to_device(p->seqs->cu_seqlens_kv, (size_t)(p->batch + 1) * 4);
    }
    if (p->page_size > 0) dtable = to_device(p->seqs->block_table, (size_t)(p->batch * p->seqs->pages_per_seq) * 4);
    cudaMemset(dout, 0xff, no * esz); /* NaN bytes: an element never written shows */
    rc = cudnn_sdpa_plan_check(p, why, sizeof why);
    if (rc == 0) {
        size_t ws_bytes = cudnn_sdpa_workspace_bytes(p);
        if (ws_bytes) CHECK(cudaMalloc(&ws, ws_bytes) == cudaSuccess, "workspace");
        t.q = dq, t.k = dk, t.v = dv, t.out = dout;
        t.cu_seqlens_q = (const int32_t *)dcq, t.cu_seqlens_kv = (const int32_t *)dckv;
        t.block_table = (const int32_t *)dtable;
        exec_clear_error(ctx);
        CHECK(cudnn_sdpa_forward(ctx, p, &t, ws) == 0, "forward: %s", ctx->error);
        CHECK(cudaStreamSynchronize(ctx->stream) == cudaSuccess, "sync");
        cudaMemcpy(ho, dout, no * esz, cudaMemcpyDeviceToHost);
        printf("    %s\n", cudnn_sdpa_engine_desc(p) ? cudnn_sdpa_engine_desc(p) : "(no engine)");
    } else {
        printf("    refused (%d): %s\n", rc, why);
        rc = rc > 0 ? 1 : -1;
    }
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(ws);
    cudaFree(dcq), cudaFree(dckv), cudaFree(dtable);
    return rc;
}

/* p (layout built) against the fp64 reference and, when paged, against its contiguous twin
 * (the same tokens without pages): max abs error 2e-2 bf16, 5e-3 fp16, and no NaN. A
 * refusal is a failure unless may_refuse (then it must name cuDNN). */
static void gpu_case(exec_context *ctx, attn_problem p, int may_refuse, const char *label)
{
    const int64_t nq = attn_q_elems(&p), nk = attn_k_elems(&p), nv = attn_v_elems(&p), no = attn_out_elems(&p);
    const double tol = p.dtype == ATTN_BF16 ? 2e-2 : 5e-3;
    uint16_t *hq = calloc((size_t)nq + 1, 2), *hk = calloc((size_t)nk + 1, 2), *hv = calloc((size_t)nv + 1, 2);
    uint16_t *ho = calloc((size_t)no + 1, 2);
    double *ref = calloc((size_t)no + 1, sizeof(double)), err = 0.0;
    unsigned seed = 99u + (unsigned)(p.batch * 7 + p.seq_kv + p.page_size);
    int64_t i, nan = 0;
    int rc;

    printf("  %s\n", label);
    fill(hq, nq, p.dtype, &seed), fill(hk, nk, p.dtype, &seed), fill(hv, nv, p.dtype, &seed);
    rc = forward(ctx, &p, hq, hk, hv, ho);
    if (rc == 1 && may_refuse) goto done;
    CHECK(rc == 0, "%s: refused or failed", label);
    if (rc != 0) goto done;
    CHECK(reference_attention_f64(&p, hq, hk, hv, ref, 0) == 0, "reference");
    for (i = 0; i < no; i++) {
        double got = (double)dtype_load_f32(ho, p.dtype, i);
        if (isnan(got)) nan++;
        else if (fabs(got - ref[i]) > err) err = fabs(got - ref[i]);
    }
    printf("    max abs error %.3g, NaN %lld\n", err, (long long)nan);
    CHECK(nan == 0 && err < tol, "%s: max abs error %g, %lld NaN", label, err, (long long)nan);
    if (p.page_size > 0) {
        /* The contiguous twin: the same keys, read without the block table. */
        attn_problem flat = p;
        uint16_t *fk = calloc((size_t)(attn_tokens_kv(&p) * attn_kv_heads(&p) * p.head_dim) + 1, 2);
        uint16_t *fv = calloc((size_t)(attn_tokens_kv(&p) * attn_kv_heads(&p) * attn_dv(&p)) + 1, 2);
        uint16_t *fo = calloc((size_t)no + 1, 2);
        double twin = 0.0;
        flat.page_size = 0, flat.num_pages = 0;
        seq_layout_from_pages(&p, hk, fk, p.head_dim, 2);
        seq_layout_from_pages(&p, hv, fv, attn_dv(&p), 2);
        CHECK(forward(ctx, &flat, hq, fk, fv, fo) == 0, "%s: contiguous twin", label);
        for (i = 0; i < no; i++) {
            double e = fabs((double)dtype_load_f32(fo, p.dtype, i) - (double)dtype_load_f32(ho, p.dtype, i));
            if (!(e <= twin)) twin = isnan(e) ? INFINITY : e;
        }
        printf("    paged vs contiguous: max abs difference %.3g\n", twin);
        CHECK(twin <= tol / 2, "%s: paged and contiguous differ by %g", label, twin);
        free(fk), free(fv), free(fo);
    }
done:
    free(hq), free(hk), free(hv), free(ho), free(ref);
}

static void test_gpu(void)
{
    const attn_dtype bf = ATTN_BF16, fp = ATTN_FP16;
    const attn_mask none = ATTN_MASK_NONE, tl = ATTN_MASK_CAUSAL, br = ATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    static const int32_t lq[4] = {5, 0, 1, 7}, lkv[4] = {33, 0, 17, 9}, one[4] = {1, 1, 1, 1};
    static const int32_t dq[4] = {1, 1, 1, 1}, dkv[4] = {1, 16, 17, 40};
    exec_context ctx;
    seq_layout l;
    attn_problem p;
    char label[160];
    int ps, m, t;
    const int page_sizes[3] = {0, 1, 16};
    const attn_mask masks[3] = {none, tl, br};

    memset(&ctx, 0, sizeof ctx);
    ctx.device = 0;
    CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice");
    for (t = 0; t < 2; t++)
        for (ps = 0; ps < 3; ps++)
            for (m = 0; m < 3; m++) {
                const attn_dtype dt = t ? fp : bf;
                /* ragged: an empty sequence, one of one query, every sequence sq <= skv */
                p = serving(&l, 4, 4, 2, 64, lq, lkv, 0, 0, page_sizes[ps], masks[m], 0, dt);
                snprintf(label, sizeof label, "%s ragged q 5,0,1,7 kv 33,0,17,9 page %d %s", attn_dtype_name(dt),
                         page_sizes[ps], attn_mask_name(masks[m]));
                gpu_case(&ctx, p, 0, label);
                seq_layout_free(&l);
                if (page_sizes[ps] == 0) continue;
                /* paged, every sequence the bounds: seq_kv 33 not a multiple of the page */
                p = serving(&l, 3, 4, 2, 64, NULL, NULL, 5, 33, page_sizes[ps], masks[m], 0, dt);
                snprintf(label, sizeof label, "%s paged B3 Sq5 Skv33 page %d %s", attn_dtype_name(dt), page_sizes[ps],
                         attn_mask_name(masks[m]));
                gpu_case(&ctx, p, 0, label);
                seq_layout_free(&l);
            }
    /* decode over a paged cache: one query a sequence, lengths 1..40 */
    p = serving(&l, 4, 8, 1, 128, dq, dkv, 0, 0, 16, br, 0, bf);
    gpu_case(&ctx, p, 0, "bf16 paged decode MQA d128 kv 1,16,17,40 page 16 bottom-right");
    seq_layout_free(&l);
    p = serving(&l, 4, 8, 2, 64, one, dkv, 0, 0, 1, none, 0, bf);
    gpu_case(&ctx, p, 0, "bf16 paged decode kv 1,16,17,40 page 1 none");
    seq_layout_free(&l);
    /* windows per sequence (bottom-right: the INT32 band) */
    p = serving(&l, 4, 4, 2, 64, lq, lkv, 0, 0, 0, br, 4, bf);
    gpu_case(&ctx, p, 0, "bf16 ragged bottom-right window 4");
    seq_layout_free(&l);
    p = serving(&l, 4, 4, 2, 64, lq, lkv, 0, 0, 16, tl, 3, bf);
    gpu_case(&ctx, p, 0, "bf16 ragged paged top-left window 3");
    seq_layout_free(&l);
    /* head_dim_v of its own, paged */
    p = serving(&l, 2, 8, 2, 192, NULL, NULL, 3, 70, 16, tl, 0, bf);
    p.head_dim_v = 128;
    gpu_case(&ctx, p, 1, "bf16 paged d192/128 page 16 causal");
    seq_layout_free(&l);
    cudnn_sdpa_release();
}

int main(void)
{
    int gpus = 0;
    char why[512];
    if (getenv("ATTND_CUDNN_LIBRARY")) cudnn_set_library(getenv("ATTND_CUDNN_LIBRARY"));
    if (cudnn_load(why, sizeof why) != 0) {
        printf("cuDNN not loadable here (%s): nothing to test\n", why);
        return CHECK_DONE();
    }
    test_graph_descriptors();
    test_keys();
    test_checks();
    if (cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0) {
        printf("GPU present: serving batches end to end\n");
        test_gpu();
    } else {
        (void)cudaGetLastError();
        printf("no GPU: forwards skipped\n");
    }
    cudnn_sdpa_release();
    return CHECK_DONE();
}
