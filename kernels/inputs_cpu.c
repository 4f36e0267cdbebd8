/* inputs_cpu.c — the seed generator (inputs.h) on the host: the same values as
 * inputs.cu bit for bit, because both call inputs_value and dtype_convert.h. */
#include "kernels/dtype_convert.h"
#include "kernels/inputs.h"

void inputs_generate_cpu(void *buf, attn_dtype dtype, int64_t n, uint64_t seed, int tensor)
{
    uint64_t key = inputs_tensor_key(seed, tensor);
    int64_t i;

    if (dtype == ATTN_FP32) {
        float *out = buf;
        for (i = 0; i < n; i++) out[i] = inputs_value(key, (uint64_t)i);
    } else if (dtype == ATTN_BF16) {
        uint16_t *out = buf;
        for (i = 0; i < n; i++) out[i] = dtype_f32_to_bf16(inputs_value(key, (uint64_t)i));
    } else {
        uint16_t *out = buf;
        for (i = 0; i < n; i++) out[i] = dtype_f32_to_fp16(inputs_value(key, (uint64_t)i));
    }
}
