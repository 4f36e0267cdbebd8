/* read_ceiling.cu — what a plain streaming kernel reads a second from this GPU's memory: the
 * ceiling a decode, which streams K and V once, is held to (bench/README.md, "Read ceiling").
 *
 *   build/read_ceiling [--bytes N] [--window-ms MS] [--rounds R]
 *
 * Reads N bytes (default 2 GiB: a decode's K and V are 1-4 GB, far past L2) with 16-byte loads
 * in a grid-stride loop, each thread folding what it read into one word that it stores (so the
 * loads are not dropped). Several launch shapes are tried; each runs back to back for a window
 * (sustained, at the power cap like the decode it is compared with) and the best rate is the
 * ceiling. Prints one line per shape and the ceiling last, as `ceiling: X TB/s`.
 */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_CUDA(x)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* UNROLL independent 16-byte loads in flight a thread before their values are used. */
template <int UNROLL> __global__ void read_stream(const uint4 *src, int64_t n, uint32_t *sink)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t acc = 0;
    for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = __ldcs(src + i + u * stride); /* streaming: no reuse */
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) {
        const uint4 v = src[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    sink[(int64_t)blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

struct launch_shape {
    int ctas_per_sm, threads, unroll;
};

static void launch(const launch_shape &s, int sms, const uint4 *src, int64_t n, uint32_t *sink)
{
    const unsigned grid = (unsigned)(s.ctas_per_sm * sms);
    if (s.unroll == 4) read_stream<4><<<grid, s.threads>>>(src, n, sink);
    else read_stream<8><<<grid, s.threads>>>(src, n, sink);
}

int main(int argc, char **argv)
{
    int64_t bytes = (int64_t)2 << 30;
    double window_ms = 1000;
    int rounds = 2;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc) bytes = atoll(argv[++i]);
        else if (strcmp(argv[i], "--window-ms") == 0 && i + 1 < argc) window_ms = atof(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--bytes N] [--window-ms MS] [--rounds R]\n", argv[0]);
            return 2;
        }
    }
    bytes &= ~(int64_t)15;
    if (bytes <= 0 || window_ms <= 0 || rounds < 1) {
        fprintf(stderr, "read_ceiling: --bytes, --window-ms and --rounds must be positive\n");
        return 2;
    }
    cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    const int64_t n = bytes / 16;
    uint4 *src;
    uint32_t *sink;
    CHECK_CUDA(cudaMalloc(&src, bytes));
    CHECK_CUDA(cudaMemset(src, 0x5a, bytes));
    const launch_shape shapes[] = {{2, 1024, 4}, {4, 512, 4}, {8, 256, 4}, {4, 512, 8}, {8, 256, 8}, {16, 128, 8}};
    size_t sink_words = 0;
    for (const launch_shape &s : shapes)
        if ((size_t)s.ctas_per_sm * sms * s.threads > sink_words) sink_words = (size_t)s.ctas_per_sm * sms * s.threads;
    CHECK_CUDA(cudaMalloc(&sink, sink_words * sizeof(uint32_t)));
    printf("read_ceiling on %s (%d SMs): %.2f GB, windows of %.0f ms, %d rounds\n", prop.name, sms, bytes / 1e9,
           window_ms, rounds);

    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    double best = 0;
    for (int r = 0; r < rounds; ++r)
        for (const launch_shape &s : shapes) {
            for (int w = 0; w < 3; ++w) launch(s, sms, src, n, sink); /* warm-up */
            CHECK_CUDA(cudaDeviceSynchronize());
            /* one launch's time, then enough launches back to back to fill the window */
            CHECK_CUDA(cudaEventRecord(e0));
            launch(s, sms, src, n, sink);
            CHECK_CUDA(cudaEventRecord(e1));
            CHECK_CUDA(cudaEventSynchronize(e1));
            float one_ms;
            CHECK_CUDA(cudaEventElapsedTime(&one_ms, e0, e1));
            const int reps = one_ms > 0 ? (int)(window_ms / one_ms) + 1 : 1;
            CHECK_CUDA(cudaEventRecord(e0));
            for (int k = 0; k < reps; ++k) launch(s, sms, src, n, sink);
            CHECK_CUDA(cudaEventRecord(e1));
            CHECK_CUDA(cudaEventSynchronize(e1));
            CHECK_CUDA(cudaGetLastError());
            float ms;
            CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
            const double tbs = (double)bytes * reps / (ms * 1e-3) / 1e12;
            printf("round %d: %2d CTAs/SM x %4d threads, %d loads in flight a thread: %.1f us a read, %.3f TB/s\n", r + 1,
                   s.ctas_per_sm, s.threads, s.unroll, ms * 1e3 / reps, tbs);
            if (tbs > best) best = tbs;
        }
    printf("ceiling: %.3f TB/s\n", best);
    CHECK_CUDA(cudaFree(src));
    CHECK_CUDA(cudaFree(sink));
    return 0;
}
