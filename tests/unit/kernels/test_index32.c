/* test_index32.c — kernels/index32.h, PyTorch's 32-bit indexing split planned on the host.
 *
 * The limits themselves (a bf16 tensor of 2^30 elements sits exactly at INT32_MAX bytes and
 * fits; one element more, or fp32, does not; 2^31 one-byte elements fail on numel alone),
 * the order and coverage of the parts (ascending, lower half first, odd sizes split as
 * size/2 and the rest), and the part counts of every pass naive and math split at the bench
 * shapes and at the study shape. The per-forward totals rebuilt from those counts are the
 * ones torch.profiler recorded for PyTorch 2.11 on an H200 (bench/results/nvidia-h200/
 * 2026-12-03-aa16f8d-bench.json): naive 8 + 2 cuBLAS Memsets = 10 at B2 H16 S8192 causal, 6 + 2
 * at B4 H16 S4096 causal, 4 + 2 without a mask; math 33, 24 and 17; the study shape 20. */
#include <stdint.h>

#include "kernels/index32.h"
#include "tests/unit/check.h"

static int64_t parts(index32_iter it) { return index32_count(&it); }

static void test_limits(void)
{
    const int64_t g = INT64_C(1) << 30;

    CHECK(parts(index32_flat_op(g, 2, 2)) == 1, "bf16 2^30: the last offset is 2^31 - 2, plus one is INT32_MAX");
    CHECK(parts(index32_flat_op(g + 1, 2, 2)) == 2, "bf16 2^30 + 1 does not fit");
    CHECK(parts(index32_flat_op(g / 2, 4, 4)) == 1, "fp32 2^29 fits");
    CHECK(parts(index32_flat_op(g / 2 + 1, 4, 4)) == 2, "fp32 2^29 + 1 does not");
    CHECK(parts(index32_flat_op(g, 4, 2)) == 2, "a cast is bound by its wider operand");
    CHECK(parts(index32_flat_op(2 * g - 1, 1, 1)) == 1, "2^31 - 1 bools fit");
    CHECK(parts(index32_flat_op(2 * g, 1, 1)) == 2, "2^31 bools: numel above INT32_MAX");
    CHECK(parts(index32_flat_op(1, 4, 4)) == 1 && parts(index32_flat_op(1024, 2, 2)) == 1, "small: one part");
    CHECK(parts(index32_flat_op(INT64_C(1) << 36, 4, 4)) == 128, "2^36 fp32 (256 GiB): 128 parts of 2 GiB");
}

/* Parts come out lower half first, cover the iteration once, and split odd sizes as
 * TensorIteratorBase::split does (the lower half gets size / 2). */
static void test_order(void)
{
    const int64_t n = 3 * (INT64_C(1) << 29) + 1; /* fp32: 6 GiB and one element */
    index32_iter it = index32_flat_op(n, 4, 4);
    index32_walk w;
    index32_part p;
    int64_t next = 0, k = 0, first = -1;
    int ordered = 1, flat_ok = 1;

    index32_start(&w, &it);
    while (index32_next(&w, &p) == 1) {
        int64_t b = 0, c = 0;
        if (index32_flat(&it, &p, &b, &c) != 0) flat_ok = 0;
        if (b != next) ordered = 0;
        if (first < 0) first = c;
        next = b + c;
        k++;
    }
    CHECK(flat_ok && ordered && next == n, "parts are runs in ascending order that cover [0, n)");
    CHECK(k == 4, "6 GiB of fp32: halves of 3 GiB do not fit, quarters do (got %lld)", (long long)k);
    CHECK(first == (n / 2) / 2, "the first part is the lower half of the lower half (%lld)", (long long)first);

    /* A broadcast mask: the outer (B·H) dimension goes first, whole planes per part. */
    index32_iter m = index32_blocks_op(INT64_C(1) << 26, 32, 2, 1, 0);
    int whole = 1;
    index32_start(&w, &m);
    k = 0;
    while (index32_next(&w, &p) == 1) {
        if (p.size[0] != m.shape[0] || p.begin[0] != 0) whole = 0;
        k++;
    }
    CHECK(k == 2 && whole, "masked_fill at B2 H16 S8192 bf16: two parts of 16 whole planes");

    /* A single huge row splits along the row (a part that cuts a dimension is still a run). */
    index32_iter row = index32_blocks_op(INT64_C(1) << 30, 1, 4, 1, 1);
    int64_t b, c;
    index32_start(&w, &row);
    CHECK(index32_next(&w, &p) == 1 && index32_flat(&row, &p, &b, &c) == 0 && b == 0 && c == INT64_C(1) << 29,
          "one fp32 row of 2^30: its lower half first");
}

typedef struct shape {
    const char *name;
    int64_t b, h, s, d;
    int causal;
    int naive_ops, math_ops; /* torch.profiler, PyTorch 2.11, H200 (kernels + Memcpy + Memsets) */
    int memsets;             /* of those, the cuBLAS Memsets (naive only; math's sgemm has none) */
} shape;

/* The launches of naive's forward (bf16), cuBLAS Memsets left out: GEMM, mul, [Memcpy,
 * masked_fill], softmax, GEMM. */
static int64_t naive_launches(const shape *x, int64_t *mul_parts, int64_t *fill_parts)
{
    const int64_t plane = x->s * x->s, n = x->b * x->h * plane;
    *mul_parts = parts(index32_flat_op(n, 2, 2));
    *fill_parts = x->causal ? parts(index32_blocks_op(plane, x->b * x->h, 2, 1, 0)) : 0;
    return 2 + *mul_parts + (x->causal ? 1 + *fill_parts : 0) + 1;
}

/* The launches of math's forward (bf16, PyTorch 2.11's order). */
static int64_t math_launches(const shape *x, int64_t *add, int64_t *isneginf, int64_t *all, int64_t *where,
                             int64_t *weights)
{
    const int64_t plane = x->s * x->s, rows = x->b * x->h * x->s, n = rows * x->s, nq = x->b * x->h * x->s * x->d;
    int64_t k = 3 * parts(index32_flat_op(nq, 4, 2));           /* q, k, v .to(float) */
    k += 2 * parts(index32_flat_op(nq, 4, 4));                  /* q and k times √scale */
    if (x->causal) {
        k += parts(index32_flat_op(plane, 1, 1)) + 1;           /* ones, tril (never split) */
        k += 2 + parts(index32_flat_op(plane, 4, 1));           /* two scalar fills, where */
    }
    k += 2 + 1;                                                 /* two GEMMs, softmax (never split) */
    *add = x->causal ? parts(index32_blocks_op(plane, x->b * x->h, 4, 4, 0)) : 0;
    *isneginf = parts(index32_flat_op(n, 1, 4));
    *all = parts(index32_row_reduce(x->s, rows, 1, 1));
    *where = parts(index32_blocks_op(x->s, rows, 4, 1, 1));
    *weights = parts(index32_flat_op(n, 2, 4));                 /* attn.to(bf16) */
    k += *add + *isneginf + *all + 1 + *where + *weights;       /* + the zero's fill */
    k += parts(index32_flat_op(nq, 2, 4));                      /* out.to(bf16) */
    return k;
}

static void test_bench_shapes(void)
{
    static const shape shapes[] = {
        {"study B8 H16 S1024 D64 causal", 8, 16, 1024, 64, 1, 7, 20, 1},
        {"B2 H16 S8192 D128 causal", 2, 16, 8192, 128, 1, 10, 33, 2},
        {"B4 H16 S4096 D128 causal", 4, 16, 4096, 128, 1, 8, 24, 2},
        {"B4 H16 S4096 D128 none", 4, 16, 4096, 128, 0, 6, 17, 2},
    };
    /* Expected parts: mul, masked_fill | add, isneginf, all, where, weights' downcast. */
    static const int64_t want[][7] = {
        {1, 1, 1, 1, 1, 1, 1},
        {2, 2, 4, 4, 2, 4, 4},
        {1, 1, 2, 2, 1, 2, 2},
        {1, 0, 0, 2, 1, 2, 2},
    };
    for (int i = 0; i < (int)(sizeof shapes / sizeof shapes[0]); i++) {
        const shape *x = &shapes[i];
        int64_t mul, fill, add, neg, all, where, weights;
        const int64_t naive = naive_launches(x, &mul, &fill);
        const int64_t math = math_launches(x, &add, &neg, &all, &where, &weights);
        const int64_t got[7] = {mul, fill, add, neg, all, where, weights};
        for (int j = 0; j < 7; j++)
            CHECK(got[j] == want[i][j], "%s: pass %d has %lld parts, want %lld", x->name, j, (long long)got[j],
                  (long long)want[i][j]);
        CHECK(naive + x->memsets == x->naive_ops, "%s: naive %lld + %d Memsets, PyTorch %d", x->name,
              (long long)naive, x->memsets, x->naive_ops);
        CHECK(math == x->math_ops, "%s: math %lld, PyTorch %d", x->name, (long long)math, x->math_ops);
    }
}

/* A padded batch's [B, 1, Sq, Skv] mask over [B, H, Sq, Skv] scores: three dimensions, fewer
 * where heads or batch is 1 (coalesced as TensorIterator does); split on the batch first. */
static void test_batched_mask(void)
{
    index32_iter it = index32_batched_mask_op(100, 4, 3, 2, 1);
    CHECK(it.ndim == 3 && it.shape[0] == 100 && it.shape[1] == 4 && it.shape[2] == 3 && it.stride_bytes[2][1] == 0 &&
              it.stride_bytes[2][2] == 100,
          "B3 H4: three dims, the mask broadcast over the heads");
    it = index32_batched_mask_op(100, 1, 3, 2, 1);
    CHECK(it.ndim == 1 && it.shape[0] == 300, "one head: one dimension of 300, got %d dims", it.ndim);
    it = index32_batched_mask_op(100, 4, 1, 2, 1);
    CHECK(it.ndim == 2 && it.shape[0] == 100 && it.shape[1] == 4, "one sequence: the [Sq, Skv] mask broadcast");
    it = index32_batched_mask_op(1, 1, 1, 2, 1);
    CHECK(it.ndim == 1 && it.shape[0] == 1 && parts(it) == 1, "one element");
    /* 2^31 bf16 scores: B4 H16 Sq1 Skv 2^25 splits into parts of whole sequences */
    it = index32_batched_mask_op((int64_t)1 << 25, 16, 4, 2, 1);
    CHECK(parts(it) == 2, "B4 H16 Skv 2^25 bf16: %lld parts, want 2 (two sequences each)", (long long)parts(it));
}

int main(void)
{
    test_limits();
    test_order();
    test_bench_shapes();
    test_batched_mask();
    return CHECK_DONE();
}
