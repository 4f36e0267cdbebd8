/* test_attn.c — names, parsers and work measures of common/attn.c, and the variants
 * tables' checks (common/variant_info.c, kernels/variants.c): closed forms against brute force on small shapes. */
#include <math.h>
#include <string.h>

#include "common/attn.h"
#include "kernels/fused.h"
#include "kernels/variants.h"
#include "tests/unit/check.h"

static double brute_pairs(attn_mask m, int64_t sq, int64_t skv)
{
    double n = 0;
    for (int64_t i = 0; i < sq; i++)
        for (int64_t j = 0; j < skv; j++) {
            int visible = m == ATTN_MASK_NONE || (m == ATTN_MASK_CAUSAL && j <= i) ||
                          (m == ATTN_MASK_CAUSAL_BOTTOM_RIGHT && j <= i + skv - sq);
            n += visible;
        }
    return n;
}

static void test_names(void)
{
    attn_dtype t;
    attn_mask m;
    for (int i = 0; i < ATTN_DTYPE_COUNT; i++)
        CHECK(attn_dtype_parse(attn_dtype_name((attn_dtype)i), &t) == 0 && t == (attn_dtype)i, "dtype %d", i);
    for (int i = 0; i < ATTN_MASK_COUNT; i++)
        CHECK(attn_mask_parse(attn_mask_name((attn_mask)i), &m) == 0 && m == (attn_mask)i, "mask %d", i);
    CHECK(strcmp(attn_dtype_name(ATTN_BF16), "bf16") == 0 && strcmp(attn_dtype_name(ATTN_FP32), "fp32") == 0,
          "dtype names");
    CHECK(strcmp(attn_mask_name(ATTN_MASK_CAUSAL_BOTTOM_RIGHT), "causal_bottom_right") == 0, "mask name");
    CHECK(attn_dtype_parse("float16", &t) == -1 && attn_dtype_parse("", &t) == -1 && attn_dtype_parse(NULL, &t) == -1,
          "unknown dtypes");
    CHECK(attn_mask_parse("Causal", &m) == -1 && attn_mask_parse(NULL, &m) == -1, "unknown masks");
}

static void test_pairs_and_flops(void)
{
    int bad = 0;
    for (int m = 0; m < ATTN_MASK_COUNT; m++)
        for (int64_t sq = 1; sq <= 24; sq++)
            for (int64_t skv = 1; skv <= 24; skv++) {
                attn_problem p = attn_mha(2, 3, sq, skv, 5, ATTN_BF16, (attn_mask)m, 1.0);
                double pairs = brute_pairs((attn_mask)m, sq, skv);
                double want = 4.0 * 2 * 3 * 5 * ((m != ATTN_MASK_NONE && sq == skv) ? sq * skv / 2.0 : pairs);
                double rows = 0;
                for (int64_t i = 0; i < sq; i++) rows += (double)attn_visible_keys((attn_mask)m, sq, skv, i);
                if (attn_visible_pairs(&p) != pairs || rows != pairs) bad++;
                if (attn_flops(&p) != want) bad++;
            }
    CHECK(bad == 0, "%d shapes with wrong pairs or flops", bad);

    {
        /* The study's shape: 8·16·1024·1024·64·4 / 2 */
        attn_problem p = attn_mha(8, 16, 1024, 1024, 64, ATTN_BF16, ATTN_MASK_CAUSAL, 0.125);
        CHECK(attn_flops(&p) == 4.0 * 8 * 16 * 1024 * 1024 * 64 / 2, "study flops %g", attn_flops(&p));
        CHECK(attn_visible_pairs(&p) == 1024.0 * 1025 / 2, "study pairs");
        CHECK(attn_min_bytes(&p) == 4.0 * 8 * 16 * 1024 * 64 * 2, "study bytes %g", attn_min_bytes(&p));
        p.dtype = ATTN_FP32, p.seq_kv = 4096;
        CHECK(attn_min_bytes(&p) == (2.0 * 8 * 16 * 1024 * 64 + 2.0 * 8 * 16 * 4096 * 64) * 4, "fp32 Sq≠Skv bytes");
    }
    {
        /* Huge rows: closed forms stay exact and fast (a loop over 2^31 rows would not). */
        int64_t s = (int64_t)1 << 31;
        attn_problem p = attn_mha(1, 1, s, s, 1, ATTN_FP16, ATTN_MASK_CAUSAL, 1.0);
        CHECK(attn_visible_pairs(&p) == (double)s * (double)(s + 1) / 2, "pairs at 2^31");
        p.seq_q = 3, p.mask = ATTN_MASK_CAUSAL_BOTTOM_RIGHT;
        CHECK(attn_visible_pairs(&p) == 3.0 * (double)s - 3.0, "bottom-right, 3 rows against 2^31 keys");
        p.mask = ATTN_MASK_CAUSAL;
        CHECK(attn_visible_pairs(&p) == 6.0, "top-left, 3 rows against 2^31 keys");
        p.seq_q = s, p.seq_kv = 5, p.mask = ATTN_MASK_CAUSAL_BOTTOM_RIGHT;
        CHECK(attn_visible_pairs(&p) == 15.0, "bottom-right, 2^31 rows against 5 keys: all but 5 rows masked");
    }
}

static void test_variants(void)
{
    char why[256];
    const variant *ref = variant_find("reference");
    attn_problem p = attn_mha(1, 2, 64, 64, 64, ATTN_BF16, ATTN_MASK_CAUSAL, 0.125);

    CHECK(ref && ref->info->on_cpu && ref->forward && ref->workspace_bytes, "reference variant");
    CHECK(variant_find("nope") == NULL && variant_find(NULL) == NULL, "unknown variant");
    CHECK(variant_info_find("nope") == NULL && variant_info_find(NULL) == NULL, "unknown variant info");
    /* The code table and the description table hold the same variants, in the same order. */
    CHECK(variants_count == variant_infos_count, "%zu code rows, %zu descriptions", variants_count, variant_infos_count);
    for (size_t i = 0; i < variants_count; i++) {
        const variant *v = &variants[i];
        const variant_info *vi = v->info;
        CHECK(vi == variant_infos[i], "row %zu: the same variant in both tables", i);
        CHECK(variant_find(vi->name) == v && variant_info_find(vi->name) == vi, "find %s", vi->name);
        CHECK(vi->summary && vi->summary[0] && v->forward && v->workspace_bytes && vi->dtypes &&
                  vi->head_dim_multiple >= 1,
              "%s is complete", vi->name);
        CHECK(!vi->library == !v->library_ready && !vi->library == !v->library_info,
              "%s: a library in the description iff the code opens one", vi->name);
        for (size_t j = 0; j < i; j++) CHECK(strcmp(vi->name, variants[j].info->name) != 0, "unique name %s", vi->name);
    }
    CHECK(variant_find("naive") && variant_find("naive_inplace") && variant_find("math"), "the GPU rows");
    CHECK(variant_info_check(ref->info, &p, 0, why, sizeof why) == 0, "reference runs bf16: %s", why);

    {
        /* A made-up row exercises every message. */
        variant_info v = *ref->info;
        v.name = "x", v.dtypes = VARIANT_DTYPE(ATTN_BF16) | VARIANT_DTYPE(ATTN_FP16), v.min_cc = 80;
        v.max_head_dim = 128, v.head_dim_multiple = 8;
        p.dtype = ATTN_FP32;
        CHECK(variant_info_check(&v, &p, 90, why, sizeof why) == -1 &&
                  strcmp(why, "backend x does not support dtype fp32 (supports bf16, fp16)") == 0,
              "dtype message: %s", why);
        p.dtype = ATTN_FP16, p.head_dim = 256;
        CHECK(variant_info_check(&v, &p, 90, why, sizeof why) == -1 && strstr(why, "head_dim up to 128"), "max: %s", why);
        p.head_dim = 60;
        CHECK(variant_info_check(&v, &p, 90, why, sizeof why) == -1 && strstr(why, "multiple of 8"), "multiple: %s", why);
        p.head_dim = 64;
        CHECK(variant_info_check(&v, &p, 75, why, sizeof why) == -1 &&
                  strcmp(why, "backend x needs compute capability 8.0 or newer; the device has 7.5") == 0,
              "cc message: %s", why);
        CHECK(variant_info_check(&v, &p, 80, why, sizeof why) == 0, "cc 8.0 is enough");
        CHECK(variant_info_check(&v, &p, 0, why, sizeof why) == 0, "cc 0: no architecture check");
    }
}

/* The front reserves workspace_bound before queueing; the worker allocates workspace_bytes:
 * the bound must never be below what the worker takes (cudnn's plan needs a GPU: its bound
 * is checked on the GPU, tests/gpu). */
static void test_workspace_bounds(void)
{
    static const char *const names[] = {"reference", "naive", "naive_inplace", "math", "efficient", "flash"};
    static const int64_t seqs[][2] = {{1, 1}, {7, 13}, {64, 64}, {129, 31}, {1000, 1024}};
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
        const variant *v = variant_find(names[n]);
        for (size_t s = 0; s < sizeof seqs / sizeof seqs[0]; s++)
            for (int dt = 0; dt < ATTN_DTYPE_COUNT; dt++)
                for (int m = 0; m < ATTN_MASK_COUNT; m++)
                    for (int shape = 0; shape < 4; shape++) {
                        /* dense; grouped K/V; a value head dim of its own; a window, all three */
                        attn_problem p = attn_mha(2, 4, seqs[s][0], seqs[s][1], 64, (attn_dtype)dt, (attn_mask)m, 0.125);
                        p.kv_heads = shape == 1 || shape == 3 ? 1 : 0;
                        p.head_dim_v = shape >= 2 ? 128 : 0;
                        p.window_keys = shape == 3 ? 5 : 0;
                        char why[256];
                        if (variant_info_check(v->info, &p, 0, why, sizeof why) != 0) continue; /* refused: no workspace */
                        size_t exact = v->workspace_bytes(&p);
                        size_t bound = v->info->workspace_bound ? v->info->workspace_bound(&p) : 0;
                        CHECK(bound >= exact, "%s Sq%lld Skv%lld %s %s shape %d: bound %zu < workspace %zu", names[n],
                              (long long)p.seq_q, (long long)p.seq_kv, attn_dtype_name(p.dtype),
                              attn_mask_name(p.mask), shape, bound, exact);
                    }
    }
    /* Serving batches: the padded route's tensors (naive, naive_inplace, math) come on top of the
     * dense problem's workspace; flash's split-KV decode and efficient's SERVING kernel read them
     * in place; ragged, paged, both. */
    for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
        const variant *v = variant_find(names[n]);
        for (int dt = 0; dt < ATTN_DTYPE_COUNT; dt++)
            for (int m = 0; m < ATTN_MASK_COUNT; m++)
                for (int layout = 1; layout < 4; layout++)
                    for (int shape = 0; shape < 2; shape++) {
                        attn_problem p = attn_mha(3, 4, 9, 33, 64, (attn_dtype)dt, (attn_mask)m, 0.125);
                        char why[256];
                        p.kv_heads = shape ? 2 : 0, p.head_dim_v = shape ? 32 : 0, p.window_keys = shape ? 4 : 0;
                        if (layout & 1) p.ragged = ATTN_RAGGED_Q | ATTN_RAGGED_KV, p.total_q = 13, p.total_kv = 50;
                        if (layout & 2) p.page_size = 16, p.num_pages = 12;
                        if (variant_info_check(v->info, &p, 0, why, sizeof why) != 0) continue;
                        size_t exact = v->workspace_bytes(&p);
                        size_t bound = v->info->workspace_bound ? v->info->workspace_bound(&p) : 0;
                        attn_problem dense = attn_padded(&p);
                        CHECK(bound >= exact, "%s serving layout %d %s %s shape %d: bound %zu < workspace %zu", names[n],
                              layout, attn_dtype_name(p.dtype), attn_mask_name(p.mask), shape, bound, exact);
                        if (strcmp(names[n], "efficient") == 0)
                            CHECK(exact == 0 && dt != ATTN_FP32, "efficient layout %d: in place, 16-bit only", layout);
                        else if (strcmp(names[n], "reference") != 0 && strcmp(names[n], "flash") != 0)
                            CHECK(exact > v->workspace_bytes(&dense), "%s layout %d: the padded tensors take room",
                                  names[n], layout);
                        if (strcmp(names[n], "flash") == 0)
                            CHECK(flash_splitkv_is(&p) && exact == flash_splitkv_workspace_bytes(&p),
                                  "flash layout %d: the split-KV decode, its partials only", layout);
                    }
    }
}

/* A packed token's sequence: the last one starting at or before it, past the empty ones. */
static void test_seq_of(void)
{
    static const int32_t cu[6] = {0, 3, 3, 3, 4, 11}; /* lengths 3, 0, 0, 1, 7 */
    static const int64_t want[11] = {0, 0, 0, 3, 4, 4, 4, 4, 4, 4, 4};
    for (int64_t t = 0; t < 11; t++)
        CHECK(attn_seq_of(cu, 5, t) == want[t], "token %lld: sequence %lld, want %lld", (long long)t,
              (long long)attn_seq_of(cu, 5, t), (long long)want[t]);
}

/* `impl`: the kernels number their families as attn_problem.impl does (1 + the index of the
 * name in the description table), a zeroed problem runs the default, and the family a forward
 * runs is the problem's, fallbacks applied (compute capabilities below 9.0: no sm_90a needed). */
static void test_impls(void)
{
    const variant *flash = variant_find("flash"), *efficient = variant_find("efficient");
    attn_problem p;

    CHECK(variant_info_flash.impl_count == 6 && !strcmp(variant_info_flash.impls[FLASH_IMPL_TMA - 1].name, "tma") &&
              !strcmp(variant_info_flash.impls[FLASH_IMPL_WGMMA - 1].name, "wgmma") &&
              !strcmp(variant_info_flash.impls[FLASH_IMPL_W4 - 1].name, "w4") &&
              !strcmp(variant_info_flash.impls[FLASH_IMPL_W8 - 1].name, "w8") &&
              !strcmp(variant_info_flash.impls[FLASH_IMPL_GENERIC - 1].name, "legacy") &&
              !strcmp(variant_info_flash.impls[FLASH_IMPL_SPLITKV - 1].name, "splitkv"),
          "flash's impls follow FLASH_IMPL_*");
    CHECK(variant_info_efficient.impl_count == 2 &&
              !strcmp(variant_info_efficient.impls[EFFICIENT_IMPL_EXACT - 1].name, "exact") &&
              !strcmp(variant_info_efficient.impls[EFFICIENT_IMPL_BUCKET - 1].name, "legacy"),
          "efficient's impls follow EFFICIENT_IMPL_*");

    memset(&p, 0, sizeof p);
    p.batch = 1, p.heads = 2, p.seq_q = p.seq_kv = 256, p.head_dim = 128, p.dtype = ATTN_BF16, p.scale = 0.125;
    CHECK(flash && flash->impl_used && flash->impl_runnable && efficient && efficient->impl_used, "impl hooks");
    CHECK(flash->impl_used(80, &p) == FLASH_IMPL_W4 && flash->impl_used(86, &p) == FLASH_IMPL_W8,
          "a zeroed impl runs the default: w4 on sm_80, w8 on sm_86");
    CHECK(efficient->impl_used(80, &p) == EFFICIENT_IMPL_EXACT, "efficient's default at head_dim 128");
    p.impl = FLASH_IMPL_GENERIC;
    CHECK(flash->impl_used(80, &p) == FLASH_IMPL_GENERIC && flash->impl_used(86, &p) == FLASH_IMPL_GENERIC,
          "the problem's family runs");
    p.impl = FLASH_IMPL_W8;
    CHECK(flash->impl_used(80, &p) == FLASH_IMPL_W8, "w8 forced on sm_80");
    p.impl = FLASH_IMPL_TMA;
    CHECK(!flash->impl_runnable(FLASH_IMPL_TMA, 80) && flash->impl_used(80, &p) == FLASH_IMPL_W4,
          "tma off Hopper: the default");
    CHECK(!flash->impl_runnable(FLASH_IMPL_DEFAULT, 80) && flash->impl_runnable(FLASH_IMPL_GENERIC, 80),
          "0 is no family");
    p.impl = FLASH_IMPL_W4, p.head_dim = 32;
    CHECK(flash->impl_used(80, &p) == FLASH_IMPL_GENERIC, "head_dim 32 has one kernel");
    p.impl = FLASH_IMPL_SPLITKV, p.head_dim = 128;
    CHECK(flash->impl_runnable(FLASH_IMPL_SPLITKV, 80) && flash->impl_used(80, &p) == FLASH_IMPL_SPLITKV &&
              flash->impl_used(90, &p) == FLASH_IMPL_SPLITKV,
          "splitkv runs where it is asked for, on sm_80 and sm_90 alike");
    p.impl = FLASH_IMPL_DEFAULT, p.seq_q = 16;
    CHECK(flash->impl_used(80, &p) == FLASH_IMPL_SPLITKV && flash->impl_used(90, &p) == FLASH_IMPL_SPLITKV,
          "a decode of up to 16 queries runs splitkv by default, on sm_80 and sm_90 alike");
    p.seq_q = 17;
    CHECK(flash->impl_used(80, &p) == FLASH_IMPL_W4 && flash->impl_used(90, &p) == FLASH_IMPL_TMA,
          "17 queries: the prefill families");
    p.impl = EFFICIENT_IMPL_BUCKET, p.head_dim = 128, p.seq_q = 256;
    CHECK(efficient->impl_used(80, &p) == EFFICIENT_IMPL_BUCKET, "efficient's bucket kernel forced");
    p.impl = EFFICIENT_IMPL_DEFAULT, p.dtype = ATTN_FP32;
    CHECK(efficient->impl_used(80, &p) == EFFICIENT_IMPL_BUCKET, "fp32 runs the bucket kernel");

    /* A value head dim of its own: the bucketed kernels only, whatever impl asks for. */
    char why[256];
    p.impl = EFFICIENT_IMPL_DEFAULT, p.dtype = ATTN_BF16, p.head_dim = 192, p.head_dim_v = 128;
    CHECK(efficient->impl_used(80, &p) == EFFICIENT_IMPL_BUCKET, "efficient: 192/128 in the bucket kernel");
    p.head_dim = 128, p.head_dim_v = 64;
    CHECK(efficient->impl_used(80, &p) == EFFICIENT_IMPL_BUCKET, "efficient: 128/64 not the exact kernel");
    for (int impl = FLASH_IMPL_DEFAULT; impl <= FLASH_IMPL_GENERIC; ++impl) {
        p.impl = impl;
        CHECK(flash->impl_used(90, &p) == FLASH_IMPL_GENERIC && flash->impl_used(80, &p) == FLASH_IMPL_GENERIC,
              "flash 128/64 impl %d: legacy", impl);
    }
    /* DeepSeek-V3's 192/128: v6 on Hopper where this binary has it (its default, and when named),
     * v3 elsewhere and for every other family */
    const int hopper = flash_impl_runnable(FLASH_IMPL_TMA, 90);
    p.impl = FLASH_IMPL_DEFAULT, p.head_dim = 192, p.head_dim_v = 128;
    why[0] = '\0';
    CHECK(variant_check_flash(&p, why, sizeof why) == 0 &&
              flash->impl_used(90, &p) == (hopper ? FLASH_IMPL_TMA : FLASH_IMPL_GENERIC) &&
              flash->impl_used(80, &p) == FLASH_IMPL_GENERIC,
          "flash runs DeepSeek-V3's 192/128: %s", why);
    for (int impl = FLASH_IMPL_WGMMA; impl <= FLASH_IMPL_GENERIC; ++impl) {
        p.impl = impl;
        CHECK(flash->impl_used(90, &p) == FLASH_IMPL_GENERIC, "flash 192/128 impl %d: legacy", impl);
    }
    /* v6's other head dims: 96 and 256 by default on Hopper; 96 v4 and 256 v3 elsewhere */
    p.head_dim_v = 0;
    for (int d = 96; d <= 256; d += 160) {
        p.head_dim = d, p.impl = FLASH_IMPL_DEFAULT;
        CHECK(flash->impl_used(90, &p) == (hopper ? FLASH_IMPL_TMA : d == 96 ? FLASH_IMPL_W4 : FLASH_IMPL_GENERIC) &&
                  flash->impl_used(80, &p) == (d == 96 ? FLASH_IMPL_W4 : FLASH_IMPL_GENERIC),
              "flash D%d default: %d on sm_90, %d on sm_80", d, flash->impl_used(90, &p), flash->impl_used(80, &p));
        p.impl = FLASH_IMPL_WGMMA;
        CHECK(flash->impl_used(90, &p) == (d == 96 ? FLASH_IMPL_W4 : FLASH_IMPL_GENERIC), "flash D%d wgmma falls back", d);
    }
    p.impl = FLASH_IMPL_DEFAULT, p.head_dim = 192, p.head_dim_v = 128;
    p.head_dim_v = 0;
    CHECK(variant_check_flash(&p, why, sizeof why) == 0, "flash runs head_dim 192: %s", why);
    p.head_dim_v = 260;
    CHECK(variant_check_flash(&p, why, sizeof why) != 0 && strstr(why, "head_dim_v 8..256"), "dv 260: %s", why);
    p.head_dim_v = 36;
    CHECK(variant_check_efficient(&p, why, sizeof why) != 0 && strstr(why, "multiples of 8"), "dv 36: %s", why);
    p.head_dim = 128, p.head_dim_v = 64, p.impl = FLASH_IMPL_SPLITKV, p.seq_q = 1;
    CHECK(variant_check_flash(&p, why, sizeof why) != 0 && strstr(why, "head_dim_v equal"), "splitkv: %s", why);
}

/* flash's split-KV decode: its limits only when impl names it; the most splits (at least 256
 * keys each, at most 64, no more than fill 8192 CTAs) and its workspace for them, which is
 * also the front's bound; 0 bytes where it never splits. */
static void test_splitkv(void)
{
    const variant *flash = variant_find("flash");
    char why[256];
    attn_problem p = attn_mha(64, 32, 1, 4096, 128, ATTN_BF16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0.088);

    CHECK(flash_splitkv_is(&p) && flash->impl_used(90, &p) == FLASH_IMPL_SPLITKV &&
              flash->impl_used(80, &p) == FLASH_IMPL_SPLITKV,
          "MHA decode: split-KV by default");
    p.dtype = ATTN_FP32; /* a dtype it does not take: the default family, no workspace */
    CHECK(!flash_splitkv_is(&p) && flash->workspace_bytes(&p) == 0, "fp32 MHA decode: the default family");
    p.dtype = ATTN_BF16;
    {
        attn_problem g = p; /* a grouped-query decode the kernel takes: split-KV by default */
        g.kv_heads = 8;
        CHECK(flash_splitkv_is(&g) && flash->impl_used(90, &g) == FLASH_IMPL_SPLITKV &&
                  flash->impl_used(80, &g) == FLASH_IMPL_SPLITKV && flash->workspace_bytes(&g) > 0 &&
                  variant_info_flash.workspace_bound(&g) == flash->workspace_bytes(&g),
              "GQA decode: split-KV by default");
        g.head_dim = 256; /* a Gemma-sized head: split-KV too */
        CHECK(flash_splitkv_is(&g) && flash->impl_used(90, &g) == FLASH_IMPL_SPLITKV &&
                  variant_info_flash.workspace_bound(&g) == flash->workspace_bytes(&g),
              "GQA decode at D256: split-KV by default");
        g.head_dim = 96; /* one it does not take: the default family */
        CHECK(!flash_splitkv_is(&g) && variant_check_flash(&g, why, sizeof why) == 0, "GQA decode at D96: %s", why);
        g.head_dim = 128, g.seq_q = 17;
        CHECK(!flash_splitkv_is(&g), "GQA with 17 queries: prefill");
        g.seq_q = 2; /* a group of 4: 8 rows, one n8 tile; 12 rows, two; at D256 always one */
        CHECK(flash_splitkv_tile_rows(&g) == 8, "8 rows: a tile of 8");
        g.seq_q = 3;
        CHECK(flash_splitkv_tile_rows(&g) == 16, "12 rows: a tile of 16");
        g.head_dim = 256;
        CHECK(flash_splitkv_tile_rows(&g) == 8, "12 rows at D256: tiles of 8");
    }
    p.impl = FLASH_IMPL_SPLITKV;
    CHECK(flash_splitkv_is(&p) && variant_check_flash(&p, why, sizeof why) == 0, "MHA decode: %s", why);
    /* 64·32 CTAs of one row tile: ⌈8192 / 2048⌉ = 4 splits at most */
    CHECK(flash_splitkv_max_splits(&p) == 4, "MHA B64 H32 Skv4096: %lld splits", (long long)flash_splitkv_max_splits(&p));
    CHECK(flash_splitkv_lse_offset(&p) == (size_t)4 * 64 * 32 * 128 * 4 &&
              flash->workspace_bytes(&p) == (size_t)4 * 64 * 32 * 129 * 4 &&
              variant_info_flash.workspace_bound(&p) == flash->workspace_bytes(&p),
          "partials of 4 splits: %zu bytes", flash->workspace_bytes(&p));
    p.kv_heads = 8, p.seq_kv = 8192; /* GQA: 64·8 CTAs: 16 splits */
    CHECK(flash_splitkv_max_splits(&p) == 16, "GQA B64 H32 Hkv8 Skv8192: %lld", (long long)flash_splitkv_max_splits(&p));
    p.batch = 1, p.kv_heads = 1, p.heads = 8, p.seq_kv = 1000000; /* one CTA: capped at 64 */
    CHECK(flash_splitkv_max_splits(&p) == FLASH_SPLITKV_MAX_SPLITS, "one K/V head: the cap");
    p.seq_kv = 256; /* one split's worth of keys: one launch, no workspace */
    CHECK(flash_splitkv_max_splits(&p) == 1 && flash->workspace_bytes(&p) == 0 &&
              variant_info_flash.workspace_bound(&p) == 0,
          "256 keys: no split");
    p.seq_kv = 257, p.seq_q = 16, p.heads = 64, p.kv_heads = 8; /* 8 x 16 rows: 8 row tiles */
    CHECK(flash_splitkv_max_splits(&p) == 2 && variant_check_flash(&p, why, sizeof why) == 0, "257 keys: 2 splits");

    p.seq_q = 17;
    CHECK(variant_check_flash(&p, why, sizeof why) != 0 && strstr(why, "seq_q up to 16") &&
              flash->workspace_bytes(&p) == 0 && variant_info_flash.workspace_bound(&p) == 0,
          "seq_q 17 refused, no workspace: %s", why);
    p.impl = FLASH_IMPL_DEFAULT;
    CHECK(variant_check_flash(&p, why, sizeof why) == 0, "the other families run it: %s", why);
    p.impl = FLASH_IMPL_SPLITKV, p.seq_q = 1;
    for (int64_t d = 32; d <= 256; d += 32) {
        p.head_dim = d;
        const int ok = variant_check_flash(&p, why, sizeof why) == 0;
        CHECK(ok == (d == 64 || d == 128 || d == 256), "head_dim %lld: %s", (long long)d, ok ? "runs" : why);
    }
    p.head_dim = 128, p.scale = 1e300;
    CHECK(variant_check_flash(&p, why, sizeof why) != 0 && strstr(why, "scale"), "a scale past fp32: %s", why);

    /* Serving batches: the split-KV decode is their default, and the only flash kernel for them. */
    p.scale = 0.088, p.impl = FLASH_IMPL_DEFAULT, p.page_size = 16, p.num_pages = 300;
    CHECK(flash_splitkv_is(&p) && variant_check_flash(&p, why, sizeof why) == 0 &&
              flash->impl_used(90, &p) == FLASH_IMPL_SPLITKV && flash->impl_used(80, &p) == FLASH_IMPL_SPLITKV,
          "a paged decode runs splitkv by default: %s", why);
    p.page_size = 1, p.num_pages = (int64_t)1 << 31; /* a cache token the kernel's int32 cannot index */
    CHECK(variant_check_flash(&p, why, sizeof why) != 0 && strstr(why, "2^31 slots"), "2^31 cache slots: %s", why);
    p.num_pages = INT32_MAX;
    CHECK(variant_check_flash(&p, why, sizeof why) == 0, "2^31 - 1 cache slots: %s", why);
    p.page_size = 16, p.num_pages = 300;
    p.impl = FLASH_IMPL_TMA;
    CHECK(!flash_splitkv_is(&p) && variant_check_flash(&p, why, sizeof why) != 0 && strstr(why, "not impl tma"),
          "a paged batch with impl tma: %s", why);
    p.impl = FLASH_IMPL_DEFAULT, p.page_size = 0, p.num_pages = 0;
    p.ragged = ATTN_RAGGED_Q | ATTN_RAGGED_KV, p.total_q = 40, p.total_kv = 5000, p.seq_q = 17;
    CHECK(!flash_splitkv_is(&p) && variant_check_flash(&p, why, sizeof why) == 0 && flash->impl_used(90, &p) == FLASH_IMPL_TMA,
          "a ragged prefill runs v6: %s", why);
    p.seq_q = 16;
    CHECK(flash_splitkv_is(&p) && variant_check_flash(&p, why, sizeof why) == 0, "a ragged decode: %s", why);
}

/* flash's paged and ragged prefill (seq_q above 16): v6 (impl tma or the default) on compute
 * capability 9.0, at head_dim 64/128, with pages of whole 128-key blocks, v3 elsewhere; decode
 * stays on split-KV. */
static void test_serving_prefill(void)
{
    const variant *flash = variant_find("flash");
    char why[512];
    attn_problem p = attn_mha(4, 8, 300, 1000, 128, ATTN_BF16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0.088);
    p.kv_heads = 2, p.ragged = ATTN_RAGGED_Q | ATTN_RAGGED_KV, p.total_q = 700, p.total_kv = 2500;

    CHECK(flash_serving_prefill_is(&p) && !flash_splitkv_is(&p) &&
              variant_info_check(&variant_info_flash, &p, 90, why, sizeof why) == 0 &&
              variant_info_check(&variant_info_flash, &p, 0, why, sizeof why) == 0 &&
              flash->impl_used(90, &p) == FLASH_IMPL_TMA && flash->workspace_bytes(&p) == 0 &&
              variant_info_flash.workspace_bound(&p) == 0,
          "v6 on sm_90, no workspace: %s", why);
    CHECK(variant_info_check(&variant_info_flash, &p, 80, why, sizeof why) == 0 &&
              flash->impl_used(80, &p) == FLASH_IMPL_GENERIC,
          "v3 on sm_80: %s", why);
    p.page_size = 256, p.num_pages = 40;
    CHECK(variant_info_check(&variant_info_flash, &p, 90, why, sizeof why) == 0, "pages of 256: %s", why);
    p.page_size = 16, p.num_pages = 300;
    CHECK(variant_info_check(&variant_info_flash, &p, 90, why, sizeof why) != 0 &&
              strstr(why, "page_size a multiple of 128"),
          "pages of 16: %s", why);
    p.seq_q = 16, p.total_q = 40; /* a decode: split-KV, any page size */
    CHECK(flash_splitkv_is(&p) && variant_info_check(&variant_info_flash, &p, 80, why, sizeof why) == 0 &&
              flash->impl_used(90, &p) == FLASH_IMPL_SPLITKV,
          "paged decode: %s", why);
    p.seq_q = 300, p.total_q = 700, p.page_size = 128, p.num_pages = 30, p.ragged = 0; /* paged, equal lengths */
    CHECK(variant_info_check(&variant_info_flash, &p, 90, why, sizeof why) == 0 &&
              flash->impl_used(90, &p) == FLASH_IMPL_TMA,
          "a paged prefill of equal lengths: %s", why);
    p.impl = FLASH_IMPL_WGMMA;
    CHECK(variant_check_flash(&p, why, sizeof why) != 0 && strstr(why, "in v6 only") && strstr(why, "not impl wgmma"),
          "another impl: %s", why);
    p.impl = FLASH_IMPL_TMA;
    CHECK(variant_check_flash(&p, why, sizeof why) == 0, "impl tma named: %s", why);
    p.impl = FLASH_IMPL_DEFAULT, p.head_dim = 96;
    CHECK(variant_check_flash(&p, why, sizeof why) != 0 && strstr(why, "head_dim 64 and 128"), "head_dim 96: %s", why);
    p.head_dim = 64, p.scale = 0;
    CHECK(variant_check_flash(&p, why, sizeof why) != 0 && strstr(why, "nonzero scale"), "scale 0: %s", why);
}

/* v3's SERVING instantiation: efficient's paged and ragged batches (16-bit, v1), flash's with
 * impl legacy named (any head dim, any page size), and flash's prefill off Hopper. */
static void test_serving_generic(void)
{
    const variant *flash = variant_find("flash"), *efficient = variant_find("efficient");
    char why[512];
    attn_problem p = attn_mha(4, 8, 300, 1000, 128, ATTN_BF16, ATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0.088);
    p.kv_heads = 2, p.ragged = ATTN_RAGGED_Q | ATTN_RAGGED_KV, p.total_q = 700, p.total_kv = 2500;

    CHECK(variant_info_check(&variant_info_efficient, &p, 80, why, sizeof why) == 0 &&
              efficient->impl_used(80, &p) == EFFICIENT_IMPL_BUCKET && efficient->workspace_bytes(&p) == 0,
          "efficient: v1, in place: %s", why);
    p.impl = EFFICIENT_IMPL_EXACT; /* v2 has no serving instantiation: v1 runs it */
    CHECK(efficient->impl_used(90, &p) == EFFICIENT_IMPL_BUCKET, "efficient impl exact falls back to v1");
    p.impl = ATTN_IMPL_DEFAULT, p.dtype = ATTN_FP32;
    CHECK(variant_info_check(&variant_info_efficient, &p, 80, why, sizeof why) != 0 && strstr(why, "16-bit"),
          "efficient fp32: %s", why);
    p.dtype = ATTN_BF16, p.page_size = 16, p.num_pages = 200; /* ragged and paged, pages of 16 */
    CHECK(variant_info_check(&variant_info_efficient, &p, 80, why, sizeof why) == 0, "efficient paged: %s", why);

    p.impl = FLASH_IMPL_GENERIC; /* pages of 16, head_dim 96: v3 takes what v6 does not */
    p.head_dim = 96;
    CHECK(flash_serving_generic_is(&p) && !flash_splitkv_is(&p) &&
              variant_info_check(&variant_info_flash, &p, 90, why, sizeof why) == 0 &&
              flash->impl_used(90, &p) == FLASH_IMPL_GENERIC && flash->workspace_bytes(&p) == 0,
          "flash impl legacy: v3 on any device: %s", why);
    p.seq_q = 4, p.total_q = 12; /* a decode named legacy: v3 too */
    CHECK(variant_check_flash(&p, why, sizeof why) == 0 && flash->impl_used(80, &p) == FLASH_IMPL_GENERIC,
          "a decode with impl legacy: %s", why);
    p.seq_q = 300, p.total_q = 700, p.head_dim = 128, p.page_size = 128, p.num_pages = 30;
    p.impl = FLASH_IMPL_DEFAULT; /* the default prefill off Hopper: v3, within v6's limits */
    CHECK(variant_info_check(&variant_info_flash, &p, 80, why, sizeof why) == 0 &&
              flash->impl_used(80, &p) == FLASH_IMPL_GENERIC && flash->impl_used(90, &p) == FLASH_IMPL_TMA,
          "flash prefill on sm_80: v3 (v6 on sm_90): %s", why);
    p.impl = FLASH_IMPL_W4; /* another family has no serving kernel: refused by name */
    CHECK(!flash_serving_generic_is(&p) && variant_check_flash(&p, why, sizeof why) != 0 && strstr(why, "not impl w4"),
          "flash impl w4: %s", why);
}

/* The feature gate: a layout a variant lacks is refused naming the parameter; a pending bit is
 * refused until the pending_features setting offers it. */
static void test_feature_gate(void)
{
    variant_info row = variant_info_efficient;
    char why[512];
    attn_problem p = attn_mha(2, 4, 1, 64, 64, ATTN_BF16, ATTN_MASK_NONE, 0.125);
    p.ragged = ATTN_RAGGED_KV, p.total_q = 2, p.total_kv = 70;
    row.features &= ~(unsigned)(VARIANT_PAGED | VARIANT_RAGGED);
    CHECK(variant_info_check(&row, &p, 90, why, sizeof why) != 0 && strstr(why, "ragged") && strstr(why, "seqlens_kv"),
          "no ragged bit: %s", why);
    p.ragged = 0, p.total_q = p.total_kv = 0, p.page_size = 16, p.num_pages = 10;
    CHECK(variant_info_check(&row, &p, 90, why, sizeof why) != 0 && strstr(why, "page_size 16"), "no paged bit: %s", why);
    row.pending_features = VARIANT_PAGED;
    CHECK(variant_info_check(&row, &p, 90, why, sizeof why) != 0, "pending, not offered: %s", why);
    variant_info_offer_pending(1);
    CHECK(variant_info_check(&row, &p, 90, why, sizeof why) == 0, "pending, offered: %s", why);
    variant_info_offer_pending(0);
}

/* A ragged batch's and a paged cache's work: FLOPs and bytes count each sequence's real
 * tokens, with the dense problem's rule per sequence; a batch of equal lengths counts what
 * the dense problem counts; a paged cache's unused pages are never counted. */
static void test_serving_work(void)
{
    static const int32_t cu_q[5] = {0, 3, 3, 4, 11}, cu_kv[5] = {0, 5, 5, 22, 29}; /* lengths 3,0,1,7 and 5,0,17,7 */
    static const int32_t table[4 * 5] = {0};
    attn_seqs seqs = {cu_q, cu_kv, NULL, 0};
    attn_problem p = attn_mha(4, 6, 7, 17, 8, ATTN_BF16, ATTN_MASK_CAUSAL, 0.3);
    const int64_t sq[4] = {3, 0, 1, 7}, skv[4] = {5, 0, 17, 7};
    double pairs = 0, want_bytes;
    int64_t b;

    p.head_dim_v = 4, p.kv_heads = 2, p.ragged = ATTN_RAGGED_Q | ATTN_RAGGED_KV, p.total_q = 11, p.total_kv = 29;
    CHECK(isnan(attn_flops(&p)) && isnan(attn_min_bytes(&p)), "ragged without its lengths: NAN, never the bounds");
    p.seqs = &seqs;
    for (int m = 0; m < ATTN_MASK_COUNT; m++) {
        p.mask = (attn_mask)m;
        pairs = 0;
        for (b = 0; b < 4; b++) /* the square causal sequence (7, 7) counts half, FlashAttention's way */
            pairs += m != ATTN_MASK_NONE && sq[b] == skv[b] ? 0.5 * sq[b] * skv[b] : brute_pairs(p.mask, sq[b], skv[b]);
        CHECK(attn_flops(&p) == 2.0 * 6 * (8 + 4) * pairs, "%s: ragged flops %g, want %g", attn_mask_name(p.mask),
              attn_flops(&p), 2.0 * 6 * (8 + 4) * pairs);
        CHECK(attn_seqlen_q(&p, 3) == 7 && attn_seqlen_kv(&p, 2) == 17 && attn_seqlen_kv(&p, 1) == 0, "lengths");
    }
    want_bytes = (11.0 * 6 * (8 + 4) + 29.0 * 2 * (8 + 4)) * 2 + 2.0 * 5 * 4;
    CHECK(attn_min_bytes(&p) == want_bytes, "ragged bytes %g, want %g (q, out, k, v of real tokens, cu_seqlens)",
          attn_min_bytes(&p), want_bytes);
    CHECK(attn_q_elems(&p) == 11 * 6 * 8 && attn_out_elems(&p) == 11 * 6 * 4 && attn_k_elems(&p) == 29 * 2 * 8 &&
              attn_v_elems(&p) == 29 * 2 * 4,
          "packed sizes");

    /* Paged: the cache's elements are all its pages; the bytes only the pages in use. */
    seqs.block_table = table, seqs.pages_per_seq = 5;
    p.page_size = 4, p.num_pages = 40;
    CHECK(attn_k_elems(&p) == 40 * 4 * 2 * 8 && attn_v_elems(&p) == 40 * 4 * 2 * 4, "the cache whole");
    CHECK(attn_min_bytes(&p) == want_bytes + (2 + 0 + 5 + 2) * 4.0, "paged bytes %g: + the block table entries read",
          attn_min_bytes(&p));

    /* Equal lengths: ragged counts what dense counts; dense paged moves what dense moves but the table. */
    {
        static const int32_t cq[4] = {0, 9, 18, 27}, ckv[4] = {0, 9, 18, 27};
        attn_seqs eq = {cq, ckv, NULL, 0};
        attn_problem d = attn_mha(3, 4, 9, 9, 16, ATTN_FP16, ATTN_MASK_CAUSAL, 0.25), r = d;
        r.ragged = ATTN_RAGGED_KV, r.total_q = r.total_kv = 27, r.seqs = &eq;
        CHECK(attn_flops(&r) == attn_flops(&d), "equal lengths: flops %g vs dense %g", attn_flops(&r), attn_flops(&d));
        CHECK(attn_min_bytes(&r) == attn_min_bytes(&d) + 2.0 * 4 * 4, "equal lengths: bytes + cu_seqlens");
        r = d;
        r.page_size = 4, r.num_pages = 100;
        CHECK(attn_flops(&r) == attn_flops(&d) && attn_min_bytes(&r) == attn_min_bytes(&d) + 3.0 * 3 * 4,
              "dense paged: flops equal, bytes + 3 x 3 table entries");
        CHECK(attn_q_elems(&r) == attn_q_elems(&d) && attn_k_elems(&r) == 100 * 4 * 4 * 16, "dense paged sizes");
        CHECK(!attn_is_dense_mha(&r), "paged is not the dense problem");
    }
}

/* The arrays a launcher needs before it reads a serving batch: each missing one named. */
static void test_serving_arrays_missing(void)
{
    static const int32_t cu[3] = {0, 2, 5}, table[2 * 3] = {0};
    attn_seqs seqs = {cu, cu, table, 3};
    attn_problem p = attn_mha(2, 4, 3, 3, 64, ATTN_BF16, ATTN_MASK_NONE, 0.125);
    attn_tensors t;
    const char *why;

    memset(&t, 0, sizeof t);
    CHECK(attn_serving_arrays_missing(&p, &t) == NULL, "a dense problem needs no arrays");
    p.ragged = ATTN_RAGGED_Q | ATTN_RAGGED_KV, p.total_q = p.total_kv = 5, p.seqs = &seqs;
    why = attn_serving_arrays_missing(&p, &t);
    CHECK(why && strstr(why, "cu_seqlens"), "ragged without cu_seqlens: %s", why ? why : "(nothing)");
    t.cu_seqlens_q = cu;
    CHECK(attn_serving_arrays_missing(&p, &t) != NULL, "ragged with cu_seqlens_q alone");
    t.cu_seqlens_kv = cu;
    CHECK(attn_serving_arrays_missing(&p, &t) == NULL, "ragged with both cu_seqlens");
    p.page_size = 16, p.num_pages = 8;
    why = attn_serving_arrays_missing(&p, &t);
    CHECK(why && strstr(why, "block table"), "paged without its table: %s", why ? why : "(nothing)");
    t.block_table = table;
    CHECK(attn_serving_arrays_missing(&p, &t) == NULL, "paged with its table");
    p.seqs = NULL;
    CHECK(attn_serving_arrays_missing(&p, &t) != NULL, "paged without p->seqs (the table's width)");
}

int main(void)
{
    test_names();
    test_pairs_and_flops();
    test_variants();
    test_workspace_bounds();
    test_seq_of();
    test_impls();
    test_splitkv();
    test_serving_prefill();
    test_serving_generic();
    test_feature_gate();
    test_serving_work();
    test_serving_arrays_missing();
    return CHECK_DONE();
}
