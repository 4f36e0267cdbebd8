/* output_stats.cu — the "output" summary and the GPU-reference "verify" of an output, where
 * the output lives (output_stats.h).
 *
 * Versions:
 *   v1 (this one): one grid-stride pass over the output in 16-byte chunks (two 8-byte
 *      fingerprint words; vector loads when the pointer is 16-byte aligned, byte loads
 *      otherwise and for the zero-padded last word), per-block partials written to a
 *      scratch array, then one single-block kernel that folds the partials in a fixed
 *      order. The grid depends on n only, so sum and abs_sum are bit-identical run to run
 *      and GPU to GPU (a double atomicAdd would not be); the fingerprint is an integer sum
 *      mod 2^64 and exact in any order.
 *
 * Scratch (partials and the result) is allocated once per worker process on first use and
 * kept: it happens outside any timed or captured region, and a worker runs one job at a
 * time, so one buffer serves every call. The process exit frees it.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/dtype_convert.h"
#include "kernels/fingerprint.h"
#include "server/worker/output_stats.h"

#define OUTPUT_THREADS 256
#define OUTPUT_MAX_BLOCKS 1024 /* partials are folded by one block: keep them few */

struct output_partial {
    double sum, abs_sum;
    unsigned long long nan, inf, fp_terms;
};

struct verify_partial {
    double max_abs, err2, ref2;
    unsigned long long bad; /* NaN or Inf in the output */
};

/* Worker-lifetime scratch: partials for OUTPUT_MAX_BLOCKS blocks plus one folded result,
 * and a pinned host copy of the result. */
static void *output_d_scratch;
static void *output_h_result;
#define OUTPUT_PARTIAL_BYTES (sizeof(struct output_partial) > sizeof(struct verify_partial) \
                                  ? sizeof(struct output_partial) : sizeof(struct verify_partial))
#define OUTPUT_SCRATCH_BYTES ((OUTPUT_MAX_BLOCKS + 1) * OUTPUT_PARTIAL_BYTES)

static int output_scratch(exec_context *ctx)
{
    if (!output_d_scratch) CUDA_TRY(ctx, cudaMalloc(&output_d_scratch, OUTPUT_SCRATCH_BYTES));
    if (!output_h_result) CUDA_TRY(ctx, cudaMallocHost(&output_h_result, OUTPUT_PARTIAL_BYTES));
    return 0;
}

/* ------------------------------------------------------------ element decoding -------- */

/* Element j of an 8-byte little-endian word holding 8/elem_bytes elements of dtype. */
__device__ __forceinline__ float output_word_elem(uint64_t w, attn_dtype dtype, int j)
{
    if (dtype == ATTN_FP32) return dtype_bits_f32((uint32_t)(w >> (32 * j)));
    uint16_t h = (uint16_t)(w >> (16 * j));
    return dtype == ATTN_BF16 ? dtype_bf16_to_f32(h) : dtype_fp16_to_f32(h);
}

/* Word `i` of the n_bytes at p, byte by byte, zero-padded past the end (the fingerprint's
 * rule for a length that is not a multiple of 8). */
__device__ __forceinline__ uint64_t output_load_word_bytes(const unsigned char *p, uint64_t i, uint64_t n_bytes)
{
    uint64_t w = 0, base = i * 8;
    for (int b = 0; b < 8; b++)
        if (base + b < n_bytes) w |= (uint64_t)p[base + b] << (8 * b);
    return w;
}

/* ------------------------------------------------------------ block reduction --------- */

template <typename T> struct output_ops;

template <> struct output_ops<output_partial> {
    __device__ static void add(output_partial &a, const output_partial &b)
    {
        a.sum += b.sum;
        a.abs_sum += b.abs_sum;
        a.nan += b.nan;
        a.inf += b.inf;
        a.fp_terms += b.fp_terms;
    }
    __device__ static output_partial shfl_down(const output_partial &a, int off)
    {
        output_partial r;
        r.sum = __shfl_down_sync(0xffffffffu, a.sum, off);
        r.abs_sum = __shfl_down_sync(0xffffffffu, a.abs_sum, off);
        r.nan = __shfl_down_sync(0xffffffffu, a.nan, off);
        r.inf = __shfl_down_sync(0xffffffffu, a.inf, off);
        r.fp_terms = __shfl_down_sync(0xffffffffu, a.fp_terms, off);
        return r;
    }
    __device__ static output_partial zero() { return output_partial{0.0, 0.0, 0ull, 0ull, 0ull}; }
};

template <> struct output_ops<verify_partial> {
    __device__ static void add(verify_partial &a, const verify_partial &b)
    {
        a.max_abs = fmax(a.max_abs, b.max_abs);
        a.err2 += b.err2;
        a.ref2 += b.ref2;
        a.bad += b.bad;
    }
    __device__ static verify_partial shfl_down(const verify_partial &a, int off)
    {
        verify_partial r;
        r.max_abs = __shfl_down_sync(0xffffffffu, a.max_abs, off);
        r.err2 = __shfl_down_sync(0xffffffffu, a.err2, off);
        r.ref2 = __shfl_down_sync(0xffffffffu, a.ref2, off);
        r.bad = __shfl_down_sync(0xffffffffu, a.bad, off);
        return r;
    }
    __device__ static verify_partial zero() { return verify_partial{0.0, 0.0, 0.0, 0ull}; }
};

/* Fixed-order block reduction (shuffles, then one warp over the warp results); the block's
 * total lands in thread 0. blockDim.x is OUTPUT_THREADS. */
template <typename T> __device__ T output_block_reduce(T v)
{
    __shared__ T warp_totals[OUTPUT_THREADS / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int off = 16; off > 0; off >>= 1) output_ops<T>::add(v, output_ops<T>::shfl_down(v, off));
    if (lane == 0) warp_totals[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < OUTPUT_THREADS / 32 ? warp_totals[lane] : output_ops<T>::zero();
        for (int off = 16; off > 0; off >>= 1) output_ops<T>::add(v, output_ops<T>::shfl_down(v, off));
    }
    return v;
}

/* One block folds the partials of the first pass, in a fixed order, into partials[nparts]. */
template <typename T> __global__ void output_fold_kernel(T *partials, int nparts)
{
    T v = output_ops<T>::zero();
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) output_ops<T>::add(v, partials[i]);
    v = output_block_reduce(v);
    if (threadIdx.x == 0) partials[nparts] = v;
}

/* ------------------------------------------------------------ output summary ---------- */

__device__ __forceinline__ void output_accumulate_word(output_partial &acc, uint64_t w, uint64_t word_index,
                                                       uint64_t n_bytes, attn_dtype dtype)
{
    int elem_bytes = dtype == ATTN_FP32 ? 4 : 2;
    uint64_t valid = n_bytes - word_index * 8; /* bytes of this word inside the output */
    int nelem = (valid >= 8 ? 8 : (int)valid) / elem_bytes;
    acc.fp_terms += fingerprint_term(w, word_index);
    for (int j = 0; j < nelem; j++) {
        float x = output_word_elem(w, dtype, j);
        if (isnan(x)) acc.nan++;
        else if (isinf(x)) acc.inf++;
        else {
            acc.sum += (double)x;
            acc.abs_sum += fabs((double)x);
        }
    }
}

__global__ void output_summary_kernel(const unsigned char *out, uint64_t n_bytes, attn_dtype dtype, int aligned16,
                                      output_partial *partials)
{
    output_partial acc = output_ops<output_partial>::zero();
    uint64_t n_words = (n_bytes + 7) / 8, n_chunks = (n_words + 1) / 2;
    for (uint64_t c = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; c < n_chunks;
         c += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t w0, w1;
        if (aligned16 && (c + 1) * 16 <= n_bytes) {
            ulonglong2 v = __ldg(reinterpret_cast<const ulonglong2 *>(out) + c);
            w0 = v.x;
            w1 = v.y;
        } else {
            w0 = output_load_word_bytes(out, 2 * c, n_bytes);
            w1 = 2 * c + 1 < n_words ? output_load_word_bytes(out, 2 * c + 1, n_bytes) : 0;
        }
        output_accumulate_word(acc, w0, 2 * c, n_bytes, dtype);
        if (2 * c + 1 < n_words) output_accumulate_word(acc, w1, 2 * c + 1, n_bytes, dtype);
    }
    acc = output_block_reduce(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

/* Blocks for `units` grid-stride units: enough to fill any GPU, no more than the fold
 * handles, and a function of the size only (so the summation order is too). */
static int output_blocks(uint64_t units)
{
    uint64_t b = (units + OUTPUT_THREADS - 1) / OUTPUT_THREADS;
    if (b < 1) b = 1;
    if (b > OUTPUT_MAX_BLOCKS) b = OUTPUT_MAX_BLOCKS;
    return (int)b;
}

int output_summarize_gpu(exec_context *ctx, const void *d_out, attn_dtype dtype, int64_t n, output_summary *s)
{
    uint64_t n_bytes = (uint64_t)(n > 0 ? n : 0) * attn_dtype_bytes(dtype);
    uint64_t n_chunks = ((n_bytes + 7) / 8 + 1) / 2;
    output_partial *d_parts, *h;
    int blocks = output_blocks(n_chunks);

    memset(s, 0, sizeof *s);
    TRY(output_scratch(ctx));
    d_parts = static_cast<output_partial *>(output_d_scratch);
    h = static_cast<output_partial *>(output_h_result);
    output_summary_kernel<<<blocks, OUTPUT_THREADS, 0, ctx->stream>>>(
        static_cast<const unsigned char *>(d_out), n_bytes, dtype, (reinterpret_cast<uintptr_t>(d_out) & 15) == 0,
        d_parts);
    LAUNCH_TRY(ctx);
    output_fold_kernel<output_partial><<<1, OUTPUT_THREADS, 0, ctx->stream>>>(d_parts, blocks);
    LAUNCH_TRY(ctx);
    CUDA_TRY(ctx, cudaMemcpyAsync(h, d_parts + blocks, sizeof *h, cudaMemcpyDeviceToHost, ctx->stream));
    CUDA_TRY(ctx, cudaStreamSynchronize(ctx->stream));
    s->sum = h->sum;
    s->abs_sum = h->abs_sum;
    s->nan = (int64_t)h->nan;
    s->inf = (int64_t)h->inf;
    s->fingerprint = fingerprint_finish(h->fp_terms, n_bytes);
    return 0;
}

/* ------------------------------------------------------------ verify ------------------ */

__global__ void verify_compare_kernel(const void *out, attn_dtype dtype, const float *ref, int64_t n,
                                      verify_partial *partials)
{
    verify_partial acc = output_ops<verify_partial>::zero();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double o = (double)dtype_load_f32(out, dtype, i), r = (double)__ldg(ref + i);
        acc.ref2 += r * r;
        if (!isfinite(o)) {
            acc.bad++;
        } else {
            double e = fabs(o - r);
            acc.max_abs = fmax(acc.max_abs, e);
            acc.err2 += e * e;
        }
    }
    acc = output_block_reduce(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

int verify_compare_gpu(exec_context *ctx, const void *d_out, attn_dtype dtype, const float *d_ref, int64_t n,
                       const char *reference, verify_result *v)
{
    verify_partial *d_parts, *h;
    int blocks = output_blocks((uint64_t)(n > 0 ? n : 0));

    memset(v, 0, sizeof *v);
    snprintf(v->reference, sizeof v->reference, "%s", reference ? reference : "");
    verify_tolerance(dtype, &v->tol_abs, &v->tol_rel_l2);
    TRY(output_scratch(ctx));
    d_parts = static_cast<verify_partial *>(output_d_scratch);
    h = static_cast<verify_partial *>(output_h_result);
    verify_compare_kernel<<<blocks, OUTPUT_THREADS, 0, ctx->stream>>>(d_out, dtype, d_ref, n, d_parts);
    LAUNCH_TRY(ctx);
    output_fold_kernel<verify_partial><<<1, OUTPUT_THREADS, 0, ctx->stream>>>(d_parts, blocks);
    LAUNCH_TRY(ctx);
    CUDA_TRY(ctx, cudaMemcpyAsync(h, d_parts + blocks, sizeof *h, cudaMemcpyDeviceToHost, ctx->stream));
    CUDA_TRY(ctx, cudaStreamSynchronize(ctx->stream));
    v->nan = (int64_t)h->bad;
    if (h->bad) {
        v->max_abs_err = NAN;
        v->rel_l2_err = NAN;
    } else {
        v->max_abs_err = h->max_abs;
        v->rel_l2_err = h->ref2 > 0.0 ? sqrt(h->err2 / h->ref2) : (h->err2 > 0.0 ? INFINITY : 0.0);
    }
    v->pass = v->nan == 0 && v->max_abs_err <= v->tol_abs && v->rel_l2_err <= v->tol_rel_l2;
    return 0;
}
