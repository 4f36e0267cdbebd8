/* test_dtype.c — bf16/fp16 conversions of kernels/dtype_convert.h.
 *
 * Exhaustive where it can be: every one of the 65536 bit patterns round-trips, and every
 * boundary between two adjacent finite values is probed at its exact midpoint (must go to
 * the even neighbour) and one float ulp either side of it (must go to the nearer one).
 * Together those pin round-to-nearest-even down everywhere, subnormals included. Where the
 * compiler has _Float16, its conversion is a second oracle on random floats. */
#include <math.h>
#include <stdint.h>

#include "kernels/dtype_convert.h"
#include "tests/unit/check.h"

static int is_nan_bf16(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }
static int is_nan_fp16(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

static uint64_t rng_state = 0x1234567;
static uint32_t rng32(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}

static void test_bf16(void)
{
    int bad = 0, bad_tie = 0;
    uint32_t h;

    for (h = 0; h < 65536; h++) {
        float f = dtype_bf16_to_f32((uint16_t)h);
        uint16_t back = dtype_f32_to_bf16(f);
        if (is_nan_bf16((uint16_t)h)) {
            if (!is_nan_bf16(back) || (back & 0x8000) != (h & 0x8000) || !(back & 0x40)) bad++;
        } else if (back != h) {
            bad++;
        }
    }
    CHECK(bad == 0, "%d bf16 bit patterns do not round-trip", bad);

    /* Midpoints between adjacent finite magnitudes h, h+1 (h+1 may be inf: 0x7f80). */
    for (h = 0; h < 0x7f80; h++) {
        for (int s = 0; s < 2; s++) {
            uint32_t sign = s ? 0x80000000u : 0;
            uint32_t mid = sign | (h << 16) | 0x8000u;
            uint16_t lo = (uint16_t)((sign >> 16) | h), hi = (uint16_t)((sign >> 16) | (h + 1));
            uint16_t even = (h & 1) ? hi : lo;
            if (dtype_f32_to_bf16(dtype_bits_f32(mid)) != even) bad_tie++;
            if (dtype_f32_to_bf16(dtype_bits_f32(mid + 1)) != hi) bad_tie++;
            if (dtype_f32_to_bf16(dtype_bits_f32(mid - 1)) != lo) bad_tie++;
        }
    }
    CHECK(bad_tie == 0, "%d bf16 rounding boundaries wrong", bad_tie);

    CHECK(dtype_f32_to_bf16(3.4028235e38f) == 0x7f80, "FLT_MAX rounds up to inf in bf16");
    CHECK(dtype_f32_to_bf16(-INFINITY) == 0xff80, "-inf stays -inf");
    CHECK(dtype_f32_to_bf16(1.0f) == 0x3f80, "1.0");
    CHECK(dtype_f32_to_bf16(1e-45f) == 0x0000, "the smallest float subnormal rounds to +0");
    CHECK(dtype_f32_to_bf16(-0.0f) == 0x8000, "-0 keeps its sign");
    CHECK(is_nan_bf16(dtype_f32_to_bf16(dtype_bits_f32(0x7f800001u))), "a signalling NaN stays NaN (not inf)");
}

static void test_fp16(void)
{
    int bad = 0, bad_tie = 0;
    uint32_t h;

    for (h = 0; h < 65536; h++) {
        float f = dtype_fp16_to_f32((uint16_t)h);
        uint16_t back = dtype_f32_to_fp16(f);
        if (is_nan_fp16((uint16_t)h)) {
            if (!isnan(f) || !is_nan_fp16(back) || (back & 0x8000) != (h & 0x8000)) bad++;
        } else if (back != h) {
            bad++;
        }
    }
    CHECK(bad == 0, "%d fp16 bit patterns do not round-trip", bad);

    /* Every adjacent pair of magnitudes h, h+1 up to the last finite one and inf (0x7c00).
     * The midpoint needs 12 significant bits: exact in float. For h = 0x7bff the "next"
     * value is 2^16, where binary16 would continue if it had the exponent. */
    for (h = 0; h < 0x7c00; h++) {
        double a = dtype_fp16_to_f32((uint16_t)h);
        double b = (h + 1 == 0x7c00) ? 65536.0 : dtype_fp16_to_f32((uint16_t)(h + 1));
        float mid = (float)((a + b) / 2);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        if ((double)mid != (a + b) / 2) bad_tie++; /* the probe itself must be exact */
        for (int s = 0; s < 2; s++) {
            float sg = s ? -1.0f : 1.0f;
            uint16_t sb = s ? 0x8000 : 0;
            if (dtype_f32_to_fp16(sg * mid) != (sb | even)) bad_tie++;
            if (dtype_f32_to_fp16(sg * nextafterf(mid, INFINITY)) != (sb | (h + 1))) bad_tie++;
            if (dtype_f32_to_fp16(sg * nextafterf(mid, 0.0f)) != (sb | h)) bad_tie++;
        }
    }
    CHECK(bad_tie == 0, "%d fp16 rounding boundaries wrong", bad_tie);

    CHECK(dtype_f32_to_fp16(65504.0f) == 0x7bff, "65504 is the largest half");
    CHECK(dtype_f32_to_fp16(65519.996f) == 0x7bff, "just below 65520 stays finite");
    CHECK(dtype_f32_to_fp16(65520.0f) == 0x7c00, "65520 rounds to inf");
    CHECK(dtype_f32_to_fp16(1e10f) == 0x7c00, "overflow to inf");
    CHECK(dtype_f32_to_fp16(-1e10f) == 0xfc00, "overflow to -inf");
    CHECK(dtype_f32_to_fp16(INFINITY) == 0x7c00, "inf");
    CHECK(dtype_f32_to_fp16(ldexpf(1.0f, -24)) == 0x0001, "2^-24 is the smallest subnormal");
    CHECK(dtype_f32_to_fp16(ldexpf(1.0f, -25)) == 0x0000, "2^-25 is a tie to even: 0");
    CHECK(dtype_f32_to_fp16(nextafterf(ldexpf(1.0f, -25), 1.0f)) == 0x0001, "just above 2^-25: 1");
    CHECK(dtype_f32_to_fp16(ldexpf(3.0f, -25)) == 0x0002, "1.5 · 2^-24 ties to 2");
    CHECK(dtype_f32_to_fp16(ldexpf(1.0f, -14)) == 0x0400, "2^-14 is the smallest normal");
    CHECK(dtype_f32_to_fp16(1e-45f) == 0x0000, "float subnormals flush to +0");
    CHECK(dtype_f32_to_fp16(-0.0f) == 0x8000, "-0");
    CHECK(is_nan_fp16(dtype_f32_to_fp16(NAN)), "NaN");
    CHECK(is_nan_fp16(dtype_f32_to_fp16(dtype_bits_f32(0x7f800001u))), "a NaN with a low payload stays NaN");

#ifdef __FLT16_MAX__
    {
        int diff = 0, i;
        for (i = 0; i < 1000000; i++) {
            float f = dtype_bits_f32(rng32());
            _Float16 r = (_Float16)f;
            uint16_t rb;
            memcpy(&rb, &r, 2);
            if (isnan(f)) continue;
            if (dtype_f32_to_fp16(f) != rb) diff++;
        }
        CHECK(diff == 0, "%d of 1M random floats round differently from _Float16", diff);
    }
#endif
}

static void test_load_store(void)
{
    uint16_t b[3];
    float f[3];
    dtype_store_f32(b, ATTN_BF16, 1, 1.5f);
    dtype_store_f32(f, ATTN_FP32, 2, -2.25f);
    CHECK(b[1] == 0x3fc0 && dtype_load_f32(b, ATTN_BF16, 1) == 1.5f, "bf16 store/load");
    dtype_store_f32(b, ATTN_FP16, 2, 1.5f);
    CHECK(b[2] == 0x3e00 && dtype_load_f32(b, ATTN_FP16, 2) == 1.5f, "fp16 store/load");
    CHECK(dtype_load_f32(f, ATTN_FP32, 2) == -2.25f, "fp32 store/load");
}

int main(void)
{
    test_bf16();
    test_fp16();
    test_load_store();
    return CHECK_DONE();
}
