/* dtype_convert.h — bit-exact conversions between float and the 16-bit storage types.
 *
 * The same code runs on host and device so that inputs generated on the GPU and on the
 * cpu device are identical bit for bit. Rounding is IEEE round-to-nearest-even, which is
 * what __float2bfloat16_rn / __float2half_rn do and what numpy does for float16.
 * NaN stays NaN (quiet), infinities stay infinities.
 */
#ifndef DTYPE_CONVERT_H
#define DTYPE_CONVERT_H

#include <stdint.h>
#include <string.h>

#include "common/attn.h"

ATTN_HD uint32_t dtype_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
ATTN_HD float dtype_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* float -> bfloat16 bits, round to nearest even. */
ATTN_HD uint16_t dtype_f32_to_bf16(float f)
{
    uint32_t u = dtype_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

ATTN_HD float dtype_bf16_to_f32(uint16_t h) { return dtype_bits_f32((uint32_t)h << 16); }

/* float -> IEEE binary16 bits, round to nearest even, subnormals and overflow handled. */
ATTN_HD uint16_t dtype_f32_to_fp16(float f)
{
    uint32_t u = dtype_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);        /* NaN */
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);       /* rounds to >= 65520: inf */
    if (abs < 0x38800000u) {                                         /* below 2^-14: subnormal */
        /* value = abs_float; subnormal half = round(value / 2^-24) */
        uint32_t mant = (abs & 0x007fffffu) | 0x00800000u;
        int exp = (int)(abs >> 23);                                  /* biased float exponent */
        int shift = 126 - exp;                                       /* 113 - exp + 13 */
        if (abs < 0x33000000u) return (uint16_t)sign;                /* below half the smallest subnormal */
        {
            uint32_t half_mant = mant >> shift;
            uint32_t rem = mant & ((1u << shift) - 1u);
            uint32_t halfway = 1u << (shift - 1);
            if (rem > halfway || (rem == halfway && (half_mant & 1u))) half_mant++;
            return (uint16_t)(sign | half_mant);
        }
    }
    {
        uint32_t r = abs - 0x38000000u;                              /* rebias exponent 127 -> 15 */
        r += 0x0fffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
}

ATTN_HD float dtype_fp16_to_f32(uint16_t h)
{
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t mant = (uint32_t)h & 0x3ffu;
    if (exp == 0x1fu) return dtype_bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        /* subnormal or zero: mant · 2^-24, exact in float */
        float v = (float)mant * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return dtype_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* Read element i of a buffer of dtype t as float. */
ATTN_HD float dtype_load_f32(const void *buf, attn_dtype t, int64_t i)
{
    if (t == ATTN_FP32) return ((const float *)buf)[i];
    if (t == ATTN_BF16) return dtype_bf16_to_f32(((const uint16_t *)buf)[i]);
    return dtype_fp16_to_f32(((const uint16_t *)buf)[i]);
}

/* Write float v, rounded to dtype t, as element i. */
ATTN_HD void dtype_store_f32(void *buf, attn_dtype t, int64_t i, float v)
{
    if (t == ATTN_FP32) ((float *)buf)[i] = v;
    else if (t == ATTN_BF16) ((uint16_t *)buf)[i] = dtype_f32_to_bf16(v);
    else ((uint16_t *)buf)[i] = dtype_f32_to_fp16(v);
}

#endif
