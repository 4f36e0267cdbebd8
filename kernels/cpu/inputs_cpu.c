/* inputs_cpu.c — the seed generator (kernels/inputs.h) on the host: the same values as
 * inputs.cu bit for bit, because both call inputs_value and dtype_convert.h. */
#include "kernels/dtype_convert.h"
#include "kernels/inputs.h"

/* Element `index` of the stream with that key, stored at buf[at]. */
static void inputs_put(void *buf, attn_dtype dtype, int64_t at, uint64_t key, uint64_t index)
{
    float x = inputs_value(key, index);
    if (dtype == ATTN_FP32)
        ((float *)buf)[at] = x;
    else if (dtype == ATTN_BF16)
        ((uint16_t *)buf)[at] = dtype_f32_to_bf16(x);
    else
        ((uint16_t *)buf)[at] = dtype_f32_to_fp16(x);
}

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

/* A paged k (tensor 1, dim head_dim) or v (tensor 2, dim head_dim_v): the filler everywhere,
 * then every token's row with its contiguous twin's elements (made where they go: no copy). */
static void inputs_generate_paged_cpu(const attn_problem *p, uint64_t seed, void *cache, int tensor, int64_t dim)
{
    uint64_t key = inputs_tensor_key(seed, tensor);
    attn_problem flat = *p; /* the contiguous twin: where each element comes from */
    int64_t b, g, j, c, hkv = attn_kv_heads(p);

    inputs_generate_cpu(cache, p->dtype, attn_kv_slots(p) * hkv * dim, seed,
                        tensor == INPUTS_TENSOR_K ? SEEDED_STREAM_K_FILL : SEEDED_STREAM_V_FILL);
    flat.page_size = 0, flat.num_pages = 0;
    for (b = 0; b < p->batch; b++)
        for (j = 0; j < attn_seqlen_kv(p, b); j++)
            for (g = 0; g < hkv; g++) {
                int64_t at = attn_kv_row(p, b, g, j, dim), from = attn_kv_row(&flat, b, g, j, dim);
                for (c = 0; c < dim; c++) inputs_put(cache, p->dtype, at + c, key, (uint64_t)(from + c));
            }
}

void inputs_generate_problem_cpu(const attn_problem *p, uint64_t seed, void *q, void *k, void *v)
{
    if (q) inputs_generate_cpu(q, p->dtype, attn_q_elems(p), seed, INPUTS_TENSOR_Q);
    if (p->page_size > 0) {
        if (k) inputs_generate_paged_cpu(p, seed, k, INPUTS_TENSOR_K, p->head_dim);
        if (v) inputs_generate_paged_cpu(p, seed, v, INPUTS_TENSOR_V, attn_dv(p));
        return;
    }
    if (k) inputs_generate_cpu(k, p->dtype, attn_k_elems(p), seed, INPUTS_TENSOR_K);
    if (v) inputs_generate_cpu(v, p->dtype, attn_v_elems(p), seed, INPUTS_TENSOR_V);
}
