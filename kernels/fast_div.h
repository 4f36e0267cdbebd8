/* fast_div.h — division by a divisor fixed for a whole launch (a paged cache's page_size) as a
 * multiply-high and a shift, where the GPU's integer division is a sequence of ~20 instructions.
 *
 * Granlund and Montgomery, "Division by invariant integers using multiplication" (PLDI 1994):
 * with l = ⌈log2 d⌉ and m = ⌈2^(31+l) / d⌉ (below 2^32 for d ≥ 2), n / d = (n·m) >> (31 + l)
 * for every 0 ≤ n < 2^31: the error n·(m·d − 2^(31+l)) / (d·2^(31+l)) stays below 2^−l ≤ 1/d,
 * too little to reach the next multiple of d. The high word of n·m (mul.hi) is (n·m) >> 32, so
 * the device divides with mul.hi and a shift by l − 1.
 *
 * Header-only, plain C for the host (the launch finds m once; tests/unit/kernels/test_fast_div.c
 * checks the quotients) and CUDA for the device. */
#ifndef FAST_DIV_H
#define FAST_DIV_H

#include <stdint.h>

typedef struct fast_div {
    uint32_t mul;   /* m = ⌈2^(31+l) / d⌉ */
    uint32_t shift; /* l − 1 */
} fast_div;

/* The multiplier and shift for divisor d, 2 ≤ d < 2^31. */
static inline fast_div fast_div_of(uint32_t d)
{
    uint32_t l = 1;
    while (((uint32_t)1 << l) < d) l++;
    fast_div f = {(uint32_t)((((uint64_t)1 << (31 + l)) + d - 1) / d), l - 1};
    return f;
}

/* n / d for 0 ≤ n < 2^31, as the device computes it. */
static inline uint32_t fast_div_host(uint32_t n, fast_div f)
{
    return (uint32_t)(((uint64_t)n * f.mul) >> 32) >> f.shift;
}

#ifdef __CUDACC__
__device__ __forceinline__ uint32_t fast_div_device(uint32_t n, fast_div f)
{
    return __umulhi(n, f.mul) >> f.shift;
}
#endif

#endif
