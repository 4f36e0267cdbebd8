/* test_fast_div.c — kernels/fast_div.h, division by a launch's fixed divisor as a multiply-high
 * and a shift: its quotients against C's division for every divisor the split-KV hands it (the
 * page sizes that are no power of 2: 3 to 2^31 − 1), over the dividends where a wrong multiplier
 * shows first (each multiple of d and its neighbours, near 0 and near 2^31 − 1) and a seeded
 * spread between. */
#include <stdint.h>

#include "kernels/fast_div.h"
#include "tests/unit/check.h"

/* Counts the dividends n (0 ≤ n < 2^31) around k·d, for the k given, whose quotient is wrong. */
static int64_t wrong_around_multiples(uint32_t d, uint32_t k0, uint32_t k1)
{
    const fast_div f = fast_div_of(d);
    int64_t wrong = 0;
    for (uint64_t k = k0; k <= k1; k++)
        for (int delta = -1; delta <= 1; delta++) {
            const int64_t n = (int64_t)(k * d) + delta;
            if (n < 0 || n > INT32_MAX) continue;
            wrong += fast_div_host((uint32_t)n, f) != (uint32_t)n / d;
        }
    return wrong;
}

static void test_small_divisors(void)
{
    /* every divisor up to 4096 (pages of 1-16 keys, SGLang's 1 among them, are powers of 2 or
     * small), each dividend up to 65536 and the 64 multiples below 2^31 */
    for (uint32_t d = 2; d <= 4096; d++) {
        const fast_div f = fast_div_of(d);
        int64_t wrong = 0;
        for (uint32_t n = 0; n <= 65536; n++) wrong += fast_div_host(n, f) != n / d;
        const uint32_t top = (uint32_t)(INT32_MAX / d);
        wrong += wrong_around_multiples(d, top > 64 ? top - 64 : 0, top + 1);
        CHECK(wrong == 0, "d = %u: %lld quotients wrong", d, (long long)wrong);
        if (wrong) return;
    }
}

static void test_large_divisors(void)
{
    /* the divisors where m is largest (just above a power of 2) and the largest of all */
    static const uint32_t ds[] = {(1u << 20) + 1, (1u << 24) - 1, (1u << 30) + 1, INT32_MAX - 1, INT32_MAX, 100003};
    for (unsigned i = 0; i < sizeof ds / sizeof ds[0]; i++) {
        const uint32_t d = ds[i], top = (uint32_t)(INT32_MAX / d);
        const int64_t wrong = wrong_around_multiples(d, 0, top < 100000 ? top + 1 : 100000) +
                              wrong_around_multiples(d, top > 100000 ? top - 100000 : 0, top + 1);
        CHECK(wrong == 0, "d = %u: %lld quotients wrong", d, (long long)wrong);
    }
}

static void test_spread(void)
{
    /* a seeded spread of (n, d) over the whole range (xorshift: the same pairs every run) */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int64_t wrong = 0;
    for (int i = 0; i < 2000000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const uint32_t n = (uint32_t)(x & INT32_MAX), d = 2 + (uint32_t)((x >> 32) % (INT32_MAX - 2));
        wrong += fast_div_host(n, fast_div_of(d)) != n / d;
    }
    CHECK(wrong == 0, "%lld of 2e6 random quotients wrong", (long long)wrong);
}

static void test_multiplier(void)
{
    /* d = 7: l = 3, m = ⌈2^34 / 7⌉ = 2454267027, shift 2; a power of 2 (not handed to it, but
     * exact): d = 16 gives m = 2^31 */
    const fast_div seven = fast_div_of(7), sixteen = fast_div_of(16);
    CHECK(seven.mul == 2454267027u && seven.shift == 2, "d = 7: m %u, shift %u", seven.mul, seven.shift);
    CHECK(sixteen.mul == 1u << 31 && sixteen.shift == 3, "d = 16: m %u, shift %u", sixteen.mul, sixteen.shift);
    CHECK(fast_div_host(INT32_MAX, seven) == INT32_MAX / 7, "2^31 - 1 by 7");
}

int main(void)
{
    test_multiplier();
    test_small_divisors();
    test_large_divisors();
    test_spread();
    return CHECK_DONE();
}
