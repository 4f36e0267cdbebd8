/* bench/cupti_cost.cu — what one profiled forward's CUPTI steps cost the calling thread.
 *
 * The worker profiles one forward per run: it enables six activity kinds, launches, waits for
 * the stream, flushes CUPTI's buffers and disables the kinds (server/worker/profile.c). On a
 * small run that cycle costs more than the forward. This program times each step around one
 * tiny kernel (or five distinct ones), 200 cycles a mode, so the worker's choices (which kinds,
 * which flush) rest on measurements: the median microseconds of each step, the records each
 * cycle delivered and the buffers CUPTI still held after its flush.
 *
 *   make BUILD=build/test build/test/cupti_cost && build/test/cupti_cost [--cycles 200]
 */
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

static double now_us()
{
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

template <int N> __global__ void tiny(float *x) { x[threadIdx.x] += (float)N; }

/* buffers as the worker hands them out: 4 MiB, zeroed, reused */
static std::vector<uint8_t *> spare;
static long records, buffers_out;
static const size_t BUFFER_BYTES = 4u << 20;

static void CUPTIAPI buffer_requested(uint8_t **b, size_t *size, size_t *max_records)
{
    if (!spare.empty()) *b = spare.back(), spare.pop_back();
    else *b = (uint8_t *)calloc(1, BUFFER_BYTES);
    *size = *b ? BUFFER_BYTES : 0;
    *max_records = 0;
    if (*b) buffers_out++;
}

static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t *b, size_t size, size_t valid)
{
    CUpti_Activity *r = NULL;
    while (cuptiActivityGetNextRecord(b, valid, &r) == CUPTI_SUCCESS) records++;
    memset(b, 0, valid + 4096 < size ? valid + 4096 : size);
    spare.push_back(b);
    buffers_out--;
}

static const CUpti_ActivityKind ALL[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME,
                                         CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_MARKER};
enum flush_kind { FLUSH_NONE, FLUSH_PLAIN, FLUSH_FORCED };

struct mode {
    const char *name;
    int first, nkinds; /* ALL[first, first + nkinds) */
    bool kept;         /* enabled once for all cycles, not per cycle */
    bool five;         /* five distinct kernels, not one */
    flush_kind flush;
};

static void launch(const mode &m, float *x, cudaStream_t st)
{
    if (!m.five) {
        tiny<0><<<1, 32, 0, st>>>(x);
        return;
    }
    tiny<1><<<1, 32, 0, st>>>(x), tiny<2><<<1, 32, 0, st>>>(x), tiny<3><<<1, 32, 0, st>>>(x);
    tiny<4><<<1, 32, 0, st>>>(x), tiny<5><<<1, 32, 0, st>>>(x);
}

int main(int argc, char **argv)
{
    int cycles = 200;
    for (int i = 1; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--cycles")) cycles = atoi(argv[i + 1]);
    float *x;
    cudaStream_t st;
    if (cudaMalloc(&x, 4096) != cudaSuccess || cudaStreamCreate(&st) != cudaSuccess) {
        fprintf(stderr, "no CUDA device\n");
        return 1;
    }
    uint8_t zeroed = 1;
    size_t len = sizeof zeroed;
    cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &len, &zeroed);
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
        fprintf(stderr, "CUPTI unavailable\n");
        return 1;
    }
    const mode modes[] = {
        {"no CUPTI", 0, 0, false, false, FLUSH_NONE},
        {"six kinds, forced flush (the worker before)", 0, 6, false, false, FLUSH_FORCED},
        {"six kinds, plain flush", 0, 6, false, false, FLUSH_PLAIN},
        {"six kinds, 5 kernels, forced flush", 0, 6, false, true, FLUSH_FORCED},
        {"six kinds, 5 kernels, plain flush", 0, 6, false, true, FLUSH_PLAIN},
        {"kernels only, forced flush", 0, 1, false, false, FLUSH_FORCED},
        {"API kinds only, forced flush", 3, 2, false, false, FLUSH_FORCED},
        {"six kinds kept enabled, forced flush", 0, 6, true, false, FLUSH_FORCED},
        {"six kinds kept enabled, plain flush", 0, 6, true, false, FLUSH_PLAIN},
        {"no CUPTI, 5 kernels", 0, 0, false, true, FLUSH_NONE},
    };
    for (int w = 0; w < 50; w++) launch(modes[3], x, st);
    cudaStreamSynchronize(st);
    printf("%-44s %7s %7s %7s %7s %7s %7s  %s\n", "median us of each step", "enable", "launch", "sync", "flush",
           "disable", "total", "records a cycle, buffers held after the flush");
    for (const mode &m : modes) {
        std::vector<double> t[6];
        long rec_min = -1, rec_max = -1, out_max = 0;
        if (m.kept)
            for (int k = 0; k < m.nkinds; k++) cuptiActivityEnable(ALL[m.first + k]);
        for (int c = 0; c < cycles; c++) {
            const long r0 = records;
            const double a = now_us();
            if (!m.kept)
                for (int k = 0; k < m.nkinds; k++) cuptiActivityEnable(ALL[m.first + k]);
            const double b = now_us();
            launch(m, x, st);
            const double l = now_us();
            cudaStreamSynchronize(st);
            const double s = now_us();
            if (m.flush != FLUSH_NONE)
                cuptiActivityFlushAll(m.flush == FLUSH_FORCED ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
            const double f = now_us();
            const long out = buffers_out;
            if (!m.kept)
                for (int k = 0; k < m.nkinds; k++) cuptiActivityDisable(ALL[m.first + k]);
            const double d = now_us();
            const double step[6] = {b - a, l - b, s - l, f - s, d - f, d - a};
            for (int i = 0; i < 6; i++) t[i].push_back(step[i]);
            if (c > 0) { /* the first cycle may deliver the mode before's leftovers */
                const long r = records - r0;
                rec_min = rec_min < 0 || r < rec_min ? r : rec_min;
                rec_max = r > rec_max ? r : rec_max;
                out_max = out > out_max ? out : out_max;
            }
        }
        if (m.kept)
            for (int k = 0; k < m.nkinds; k++) cuptiActivityDisable(ALL[m.first + k]);
        cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); /* nothing carried into the next mode */
        printf("%-44s", m.name);
        for (auto &v : t) {
            std::sort(v.begin(), v.end());
            printf(" %7.1f", v[v.size() / 2]);
        }
        if (m.nkinds) printf("  %ld-%ld, %ld\n", rec_min, rec_max, out_max);
        else printf("\n");
    }
    return 0;
}
