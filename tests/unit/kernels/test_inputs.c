/* test_inputs.c — the seed generator (kernels/inputs.h, inputs_cpu.c) and the fingerprint
 * (fingerprint.c).
 *
 * The golden values below came from running this C code once; docs/inputs.md,
 * docs/fingerprint.md and tests/api/test_numpy_generator.py show the same constants, so the
 * docs, the C and the numpy port (clients/python/attnd_ref) are held to one another. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dtype_convert.h"
#include "kernels/fingerprint.h"
#include "kernels/inputs.h"
#include "kernels/seq_layout.h"
#include "tests/unit/check.h"

/* First 8 elements of q, k, v for seed 0. */
static const uint16_t gold_bf16[3][8] = {
    {0xbe35, 0x3f95, 0xc01e, 0x3d56, 0xbfeb, 0x3e8d, 0xbf5a, 0xbf5a},
    {0x3eef, 0xba80, 0xbf2c, 0x3fa0, 0x3f3b, 0x3fc8, 0x3f44, 0x3fd6},
    {0xbde0, 0x3ed0, 0xbfc8, 0x3fc5, 0xbf31, 0x3f42, 0x3fa9, 0xbf03},
};
static const uint16_t gold_fp16[3][8] = {
    {0xb1a9, 0x3cac, 0xc0f1, 0x2ab3, 0xbf5b, 0x3466, 0xbace, 0xbacc},
    {0x3778, 0x9401, 0xb962, 0x3d04, 0x39d7, 0x3e3d, 0x3a23, 0x3eb0},
    {0xaefd, 0x367c, 0xbe41, 0x3e2c, 0xb984, 0x3a11, 0x3d44, 0xb817},
};
static const uint32_t gold_fp32[3][8] = {
    {0xbe352277, 0x3f95779a, 0xc01e163b, 0x3d56575e, 0xbfeb6051, 0x3e8cc196, 0xbf59c8fc, 0xbf598e18},
    {0x3eef026d, 0xba802bf8, 0xbf2c4735, 0x3fa077ea, 0x3f3ada0c, 0x3fc7993b, 0x3f4459d8, 0x3fd5f8f9},
    {0xbddfa6ac, 0x3ecf8576, 0xbfc82210, 0x3fc575e7, 0xbf3088ab, 0x3f422377, 0x3fa88275, 0xbf02d134},
};
/* The serving batch of test_serving_golden: its block table and its tensors' fingerprints. */
#define SERVING_GOLD_TABLE 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 5, 6, 3, 2, 0
#define SERVING_GOLD_Q 0x716b0699d4c23b1cull
#define SERVING_GOLD_K 0xbb2825a8f6cbd178ull
#define SERVING_GOLD_V 0xb99c7c3cc01966a1ull

static const uint64_t gold_key[3] = {0x8209b480faed1b10ull, 0x6c23aacca1387409ull, 0x608ef4ca05464192ull};

static void test_golden(void)
{
    uint16_t h[8];
    float f[8];
    int t, i;

    CHECK(inputs_mix64(0) == 0 && inputs_mix64(1) == 0x5692161d100b05e5ull, "mix64 is SplitMix64's finaliser");
    for (t = 0; t < 3; t++) {
        CHECK(inputs_tensor_key(0, t) == gold_key[t], "key of tensor %d: %016llx", t,
              (unsigned long long)inputs_tensor_key(0, t));
        inputs_generate_cpu(h, ATTN_BF16, 8, 0, t);
        for (i = 0; i < 8; i++) CHECK(h[i] == gold_bf16[t][i], "bf16 t%d[%d] = 0x%04x", t, i, h[i]);
        inputs_generate_cpu(h, ATTN_FP16, 8, 0, t);
        for (i = 0; i < 8; i++) CHECK(h[i] == gold_fp16[t][i], "fp16 t%d[%d] = 0x%04x", t, i, h[i]);
        inputs_generate_cpu(f, ATTN_FP32, 8, 0, t);
        for (i = 0; i < 8; i++)
            CHECK(dtype_f32_bits(f[i]) == gold_fp32[t][i], "fp32 t%d[%d] = 0x%08x", t, i, dtype_f32_bits(f[i]));
    }
    /* bf16/fp16 are the fp32 value rounded once, nearest even. */
    for (t = 0; t < 3; t++)
        for (i = 0; i < 8; i++) {
            float x = dtype_bits_f32(gold_fp32[t][i]);
            CHECK(dtype_f32_to_bf16(x) == gold_bf16[t][i] && dtype_f32_to_fp16(x) == gold_fp16[t][i],
                  "t%d[%d] rounds consistently", t, i);
        }
}

static void test_fingerprint(void)
{
    unsigned char b[256 + 8];
    const char *s = "attnd fingerprint";
    int i;

    for (i = 0; i < 256; i++) b[i] = (unsigned char)i;
    CHECK(fingerprint_bytes("", 0) == 0, "empty input: mix64(0) = 0");
    CHECK(fingerprint_bytes(s, strlen(s)) == 0x29d49204022d5dc6ull, "fingerprint of \"%s\"", s);
    CHECK(fingerprint_bytes(b, 256) == 0xfa7b60c60a11a9a3ull, "fingerprint of bytes 0..255");
    CHECK(fingerprint_bytes(b, 13) == 0x60ea6102d2be1f62ull, "fingerprint of bytes 0..12 (a partial word)");
    /* Zero padding is explicit: 13 bytes + 3 zeros hash like 16 bytes only up to n_bytes. */
    {
        unsigned char c[16] = {0};
        memcpy(c, b, 13);
        CHECK(fingerprint_bytes(c, 16) != fingerprint_bytes(b, 13), "n_bytes is part of the hash");
        CHECK(fingerprint_finish(fingerprint_term(0x0706050403020100ull, 0) + fingerprint_term(0x0c0b0a0908ull, 1),
                                 13) == fingerprint_bytes(b, 13),
              "partial word read little-endian, zero-padded");
    }
    /* Unaligned reads give the same answer. */
    memmove(b + 1, b, 256);
    CHECK(fingerprint_bytes(b + 1, 256) == 0xfa7b60c60a11a9a3ull, "unaligned buffer");
    /* Order sensitivity: swapping two words changes it. */
    {
        uint64_t w[4] = {1, 2, 3, 4}, x[4] = {2, 1, 3, 4};
        CHECK(fingerprint_bytes(w, 32) != fingerprint_bytes(x, 32), "swapped words change the fingerprint");
    }
}

/* Above 32 MiB the sum is split across threads (fingerprint.c): the same value as the
 * one-word-at-a-time definition, also with a partial last word and an unaligned start. */
static void test_fingerprint_parallel(void)
{
    const size_t n = ((size_t)40 << 20) + 5;
    unsigned char *raw = malloc(n + 1), *b = raw + 1;
    uint64_t state = 1, sum = 0;
    size_t i;

    CHECK(raw != NULL, "40 MiB for the parallel fingerprint test");
    if (!raw) return;
    for (i = 0; i < n; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (unsigned char)(state >> 56);
    }
    for (i = 0; i < n / 8; i++) {
        uint64_t w;
        memcpy(&w, b + 8 * i, 8); /* little-endian host (the CI machines) */
        sum += fingerprint_term(w, i);
    }
    {
        uint64_t w = 0;
        memcpy(&w, b + 8 * (n / 8), n % 8);
        sum += fingerprint_term(w, n / 8);
    }
    CHECK(fingerprint_bytes(b, n) == fingerprint_finish(sum, n), "40 MiB + 5 bytes, threads = the serial definition");
    /* Summed in pieces as a staged upload lands (whole words, the last one partial), on one
     * thread or several, in any order: the same fingerprint. */
    {
        const size_t cut1 = (size_t)1 << 20, cut2 = ((size_t)35 << 20) + 8;
        uint64_t pieces = fingerprint_piece_sum(b + cut2, n - cut2, cut2 / 8) + fingerprint_piece_sum(b, cut1, 0) +
                          fingerprint_piece_sum(b + cut1, cut2 - cut1, cut1 / 8);
        CHECK(fingerprint_finish(pieces, n) == fingerprint_finish(sum, n), "three pieces, out of order = the whole");
        CHECK(fingerprint_finish(fingerprint_piece_sum(b + 8, n - 8, 0) + fingerprint_piece_sum(b, 8, 1), n) !=
                  fingerprint_finish(sum, n),
              "a piece summed at the wrong word index changes it");
    }
    b[n / 2] ^= 1;
    CHECK(fingerprint_bytes(b, n) != fingerprint_finish(sum, n), "one flipped bit in the middle changes it");
    free(raw);
}

static void test_statistics(void)
{
    const int64_t n = 1 << 20;
    float *x[3];
    double mean[3], var[3], cross = 0;
    float lo = 0, hi = 0;
    int t, same = 0;
    int64_t i;

    for (t = 0; t < 3; t++) {
        double s = 0, s2 = 0;
        x[t] = malloc((size_t)n * sizeof(float));
        inputs_generate_cpu(x[t], ATTN_FP32, n, 12345, t);
        for (i = 0; i < n; i++) {
            s += x[t][i];
            s2 += (double)x[t][i] * x[t][i];
            if (x[t][i] < lo) lo = x[t][i];
            if (x[t][i] > hi) hi = x[t][i];
            if (x[t][i] == 0.0f) same++;
        }
        mean[t] = s / n;
        var[t] = s2 / n - mean[t] * mean[t];
        /* standard error of the mean over 2^20 samples is 0.001 */
        CHECK(fabs(mean[t]) < 0.005, "tensor %d mean %g", t, mean[t]);
        CHECK(fabs(var[t] - 1.0) < 0.01, "tensor %d variance %g", t, var[t]);
    }
    CHECK(lo >= -3.47f && hi <= 3.47f && lo < -2.5f && hi > 2.5f, "range [%g, %g] within ±3.47", lo, hi);
    CHECK(same < 64, "%d exact zeros in 3M values (a zero needs s = 0 exactly)", same);

    /* q, k, v are different streams: no shared values at the same index, uncorrelated. */
    same = 0;
    for (i = 0; i < n; i++) {
        if (x[0][i] == x[1][i] || x[1][i] == x[2][i] || x[0][i] == x[2][i]) same++;
        cross += (double)x[0][i] * x[1][i];
    }
    CHECK(same < n / 1000, "%d positions where two tensors agree", same);
    CHECK(fabs(cross / n) < 0.005, "q·k correlation %g", cross / n);

    /* Counter-based: a prefix is a prefix, and a different seed is a different stream. */
    {
        float a[100], b[100];
        inputs_generate_cpu(a, ATTN_FP32, 100, 12345, 0);
        CHECK(memcmp(a, x[0], sizeof a) == 0, "a shorter tensor is a prefix of a longer one");
        inputs_generate_cpu(b, ATTN_FP32, 100, 12346, 0);
        CHECK(memcmp(a, b, sizeof a) != 0, "seed 12346 differs from 12345");
    }
    for (t = 0; t < 3; t++) free(x[t]);
}

/* A serving batch's seeded parts (docs/inputs.md#serving-batches): the page order, the block
 * table, and a paged cache's bytes (filler and scattered tokens), against golden values that
 * tests/api/test_numpy_generator.py holds the numpy port to. The problem: seed 5, bf16, batch
 * 3, heads 2, kv_heads 1, head_dim 4, head_dim_v 3, seq_q 2, seqlens_kv 5,0,17, page_size 4
 * (7 pages needed, 9 in the cache). */
static void test_serving_golden(void)
{
    static const int32_t want_order[12] = {0, 7, 6, 11, 4, 8, 5, 3, 9, 1, 2, 10};
    static const int32_t want_table[3 * 5] = {SERVING_GOLD_TABLE};
    int32_t order[12], len_q[3] = {2, 2, 2}, len_kv[3] = {5, 0, 17};
    attn_problem p = attn_mha(3, 2, 2, 17, 4, ATTN_BF16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0.5);
    seq_layout lay;
    uint16_t *q, *k, *v;
    int i;

    CHECK(seq_layout_page_order(0, 12, order) == 0, "page order");
    for (i = 0; i < 12; i++) CHECK(order[i] == want_order[i], "page order of seed 0: [%d] = %d", i, order[i]);

    p.kv_heads = 1, p.head_dim_v = 3, p.ragged = ATTN_RAGGED_KV, p.total_q = 6, p.total_kv = 22;
    p.page_size = 4, p.num_pages = 9;
    CHECK(seq_layout_build(&lay, &p, len_q, len_kv, 5) == 0 && p.seqs == &lay.seqs, "layout");
    CHECK(lay.seqs.pages_per_seq == 5, "block table width %lld", (long long)lay.seqs.pages_per_seq);
    CHECK(lay.cu_seqlens_q[3] == 6 && lay.cu_seqlens_kv[1] == 5 && lay.cu_seqlens_kv[2] == 5 && lay.cu_seqlens_kv[3] == 22,
          "cu_seqlens");
    for (i = 0; i < 15; i++) CHECK(lay.block_table[i] == want_table[i], "block table [%d] = %d", i, lay.block_table[i]);
    q = malloc((size_t)attn_q_elems(&p) * 2), k = malloc((size_t)attn_k_elems(&p) * 2);
    v = malloc((size_t)attn_v_elems(&p) * 2);
    CHECK(attn_q_elems(&p) == 6 * 2 * 4 && attn_k_elems(&p) == 9 * 4 * 1 * 4 && attn_v_elems(&p) == 9 * 4 * 3, "sizes");
    inputs_generate_problem_cpu(&p, 5, q, k, v);
    CHECK(fingerprint_bytes(q, (size_t)attn_q_elems(&p) * 2) == SERVING_GOLD_Q, "q: %016llx",
          (unsigned long long)fingerprint_bytes(q, (size_t)attn_q_elems(&p) * 2));
    CHECK(fingerprint_bytes(k, (size_t)attn_k_elems(&p) * 2) == SERVING_GOLD_K, "paged k: %016llx",
          (unsigned long long)fingerprint_bytes(k, (size_t)attn_k_elems(&p) * 2));
    CHECK(fingerprint_bytes(v, (size_t)attn_v_elems(&p) * 2) == SERVING_GOLD_V, "paged v: %016llx",
          (unsigned long long)fingerprint_bytes(v, (size_t)attn_v_elems(&p) * 2));
    free(q), free(k), free(v);
    seq_layout_free(&lay);
}

int main(void)
{
    test_golden();
    test_fingerprint();
    test_fingerprint_parallel();
    test_statistics();
    test_serving_golden();
    return CHECK_DONE();
}
