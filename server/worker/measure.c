/* measure.c — GPU timing of one forward with CUDA events (measure.h).
 *
 * How one run is timed:
 *   1. warm-up: r->warmup plain forwards, then a stream sync (module load, cuBLAS
 *      heuristics, first touch of the buffers stay out of the samples);
 *   2. graph mode: one forward is captured (thread-local capture mode) into a graph,
 *      instantiated and uploaded, and replayed once untimed; every timed forward is then
 *      one cudaGraphLaunch;
 *   3. timed loop, in batches of up to MEASURE_EVENT_POOL iterations: per iteration
 *      [cold: memset of the flush buffer] → start event → fn (host timer around the
 *      enqueue) → end event. After each batch: sync on its last event, read every pair's
 *      elapsed time, ask the stopping rule (measure_stats.c). The SM clock, power and
 *      clock-event reasons are sampled once per batch, after the batch is enqueued, while
 *      the GPU is running it; NVML's energy counter is polled every millisecond or so by the
 *      energy sampler's thread, from just before the first batch to just after the last.
 *
 * Batches keep the GPU busy back to back (no sync between iterations, which would add a
 * launch gap to every sample) while the stopping rule still sees samples often. The first
 * batch is one iteration, so a forward of seconds does not overshoot max_time_ms by 64×;
 * later batches are sized from the wall time per iteration seen so far.
 *
 * Profiling is never done here: CUPTI's API tracing inflates host time (profile.c runs its
 * own separate forward).
 */
#include "server/worker/measure.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nvtx3/nvToolsExt.h>

#include "common/grow.h"
#include "common/clock.h"
#include "server/worker/clocks.h"

#define MEASURE_EVENT_POOL 64

/* Everything measure_gpu creates, so that one cleanup path frees it whatever failed. */
typedef struct measure_state {
    cudaEvent_t start[MEASURE_EVENT_POOL], end[MEASURE_EVENT_POOL];
    int nevents;
    cudaGraph_t graph;
    cudaGraphExec_t graph_exec;
    double *gpu_us, *host_us; /* growable sample arrays (common/grow.h) */
    size_t gpu_cap, host_cap;
    int n;
    /* Polls NVML's energy counter during the timed window; NULL (energy_why says why) when
     * there is no counter. */
    energy_sampler *energy;
    const char *energy_why;
} measure_state;

static double measure_now_ms(void) { return clock_monotonic_s() * 1e3; }

/* Room for `more` samples in both arrays. */
static int measure_reserve(exec_context *ctx, measure_state *st, int more)
{
    const size_t need = (size_t)(st->n + more);
    if (grow_array(&st->gpu_us, &st->gpu_cap, need, sizeof *st->gpu_us, 256) != 0 ||
        grow_array(&st->host_us, &st->host_cap, need, sizeof *st->host_us, 256) != 0)
        return exec_fail(ctx, __FILE__, __LINE__, "grow_array(samples)", "out of memory");
    return 0;
}

/* One forward as timed: a graph replay or a plain call. */
static int measure_one(exec_context *ctx, measure_state *st, forward_fn fn, void *arg)
{
    if (st->graph_exec) {
        CUDA_TRY(ctx, cudaGraphLaunch(st->graph_exec, ctx->stream));
        return 0;
    }
    return fn(ctx, arg);
}

/* Capture one forward into st->graph / st->graph_exec. */
static int measure_capture(exec_context *ctx, measure_state *st, forward_fn fn, void *arg)
{
    int rc;
    cudaError_t end_err;
    CUDA_TRY(ctx, cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
    rc = fn(ctx, arg);
    /* End the capture whatever fn did, or the stream stays in capture mode. */
    end_err = cudaStreamEndCapture(ctx->stream, &st->graph);
    if (rc != 0) return -1;
    if (end_err != cudaSuccess)
        return exec_fail_cuda(ctx, __FILE__, __LINE__, "cudaStreamEndCapture(ctx->stream, &graph)", end_err);
    CUDA_TRY(ctx, cudaGraphInstantiate(&st->graph_exec, st->graph, 0));
    CUDA_TRY(ctx, cudaGraphUpload(st->graph_exec, ctx->stream));
    return 0;
}

/* Iterations of the next batch: the pool, capped by the fixed count or max_iters, and by
 * what fits into the time left at the wall time per iteration seen so far. */
static int measure_batch_size(const run_request *r, int n, double elapsed_ms)
{
    int batch = MEASURE_EVENT_POOL;
    if (n == 0) return 1;
    if (r->iters > 0 && r->iters - n < batch) batch = r->iters - n;
    if (r->iters <= 0 && r->max_iters > 0 && r->max_iters - n < batch) batch = r->max_iters - n;
    if (r->iters <= 0 && r->max_time_ms > 0.0) {
        double per_iter_ms = elapsed_ms / n, left_ms = r->max_time_ms - elapsed_ms;
        if (per_iter_ms > 0.0 && left_ms / per_iter_ms < batch) batch = (int)(left_ms / per_iter_ms);
    }
    return batch < 1 ? 1 : batch;
}

/* One reading of the board's power into its range; 0 (unknown) is left out. */
static void measure_note_power_w(timing_stats *out, double w)
{
    if (w <= 0.0) return;
    if (out->power_min_w == 0.0 || w < out->power_min_w) out->power_min_w = w;
    if (w > out->power_max_w) out->power_max_w = w;
}

/* Clocks, power and clock-event reasons, read while a batch runs (the GPU under load). */
static void measure_sample_board(timing_stats *out)
{
    unsigned mhz = clocks_sm_mhz();
    unsigned long long reasons;

    if (mhz > 0) {
        if (out->sm_clock_min_mhz == 0.0 || mhz < out->sm_clock_min_mhz) out->sm_clock_min_mhz = mhz;
        if (mhz > out->sm_clock_max_mhz) out->sm_clock_max_mhz = mhz;
    }
    measure_note_power_w(out, clocks_power_mw() * 1e-3);
    if (clocks_event_reasons(&reasons) == 0) {
        out->clock_reasons |= reasons;
        out->have_clock_reasons = 1;
    }
}

/* The event pairs r's batches can use, made before the timed window: the pool's 64, or fewer
 * when the run has fewer iterations (a run of 10 makes 10 pairs: each create and destroy is a
 * driver call). measure_batch_size never asks for more. */
static int measure_events(exec_context *ctx, measure_state *st, const run_request *r)
{
    int n = MEASURE_EVENT_POOL, i;

    if (r->iters > 0 && r->iters < n) n = r->iters;
    if (r->iters <= 0 && r->max_iters > 0 && r->max_iters < n) n = r->max_iters;
    for (i = 0; i < n; i++) {
        CUDA_TRY(ctx, cudaEventCreate(&st->start[i]));
        st->nevents = i + 1; /* from here on start[i] (and end[i] once made) are destroyed */
        CUDA_TRY(ctx, cudaEventCreate(&st->end[i]));
    }
    return 0;
}

/* Enqueue one batch of timed iterations, wait for it, append its samples. */
static int measure_batch(exec_context *ctx, measure_state *st, forward_fn fn, void *arg, int batch, int cold,
                         void *d_flush, size_t flush_bytes, timing_stats *out)
{
    int i;
    TRY(measure_reserve(ctx, st, batch));
    for (i = 0; i < batch; i++) {
        double h0, h1;
        int iter = st->n + i;
        /* Outside the events: writing twice the L2's size evicts q, k, v and out. The byte
         * changes per iteration so that no layer can elide the write. */
        if (cold) CUDA_TRY(ctx, cudaMemsetAsync(d_flush, iter & 0xff, flush_bytes, ctx->stream));
        CUDA_TRY(ctx, cudaEventRecord(st->start[i], ctx->stream));
        h0 = measure_now_ms();
        TRY(measure_one(ctx, st, fn, arg));
        h1 = measure_now_ms();
        CUDA_TRY(ctx, cudaEventRecord(st->end[i], ctx->stream));
        st->host_us[iter] = (h1 - h0) * 1e3;
    }
    /* The batch is enqueued and the GPU is running it: a clock read now is a clock under
     * load (after the sync the GPU would be idle and may already be clocking down). */
    measure_sample_board(out);
    CUDA_TRY(ctx, cudaEventSynchronize(st->end[batch - 1]));
    for (i = 0; i < batch; i++) {
        float ms = 0.0f;
        CUDA_TRY(ctx, cudaEventElapsedTime(&ms, st->start[i], st->end[i]));
        st->gpu_us[st->n + i] = (double)ms * 1e3;
    }
    st->n += batch;
    return 0;
}

static int measure_warmup(exec_context *ctx, measure_state *st, forward_fn fn, void *arg, const run_request *r,
                          int warmup)
{
    int i;
    for (i = 0; i < warmup; i++) TRY(fn(ctx, arg));
    /* Graph mode: never capture a forward that has not run once (lazy module loading and
     * library initialisation must not happen inside a capture). */
    if (r->graph && warmup == 0) TRY(fn(ctx, arg));
    CUDA_TRY(ctx, cudaStreamSynchronize(ctx->stream));
    if (r->graph) {
        TRY(measure_capture(ctx, st, fn, arg));
        TRY(measure_one(ctx, st, fn, arg)); /* the first replay pays for setup: untimed */
        CUDA_TRY(ctx, cudaStreamSynchronize(ctx->stream));
    }
    return 0;
}

/* Stop the sampler; then the energy of the timed window: the counter's average power over its
 * steps (measure_stats_average_power_w), times the whole window; or why there is none. Its power reads
 * join the once-a-batch ones. */
static void measure_energy(measure_state *st, timing_stats *out)
{
    static char why[300]; /* one job at a time per worker: never shared */
    const energy_step *steps;
    int n, stopped;
    double watts, min_w, max_w, instant_min_w, instant_max_w;

    out->energy_j = NAN;
    out->energy_window_ms = out->total_ms;
    out->energy_why = NULL;
    if (!st->energy) {
        out->energy_why = st->energy_why;
        return;
    }
    stopped = energy_sampler_stop(st->energy, &st->energy_why);
    energy_sampler_power_w(st->energy, &min_w, &max_w);
    measure_note_power_w(out, min_w);
    measure_note_power_w(out, max_w);
    if (stopped != 0) {
        out->energy_why = st->energy_why;
        return;
    }
    steps = energy_sampler_steps(st->energy, &n);
    energy_sampler_instant_power_w(st->energy, &instant_min_w, &instant_max_w);
    out->instant_power_min_w = instant_min_w, out->instant_power_max_w = instant_max_w;
    watts = measure_stats_average_power_w(steps, n, out->total_ms, clocks_power_limit_mw() * 1e-3, instant_max_w, why,
                                          sizeof why);
    if (isnan(watts)) out->energy_why = why;
    else out->energy_j = watts * out->total_ms * 1e-3;
}

static int measure_run(exec_context *ctx, measure_state *st, forward_fn fn, void *arg, const run_request *r,
                       void *d_flush, size_t flush_bytes, timing_stats *out, phases *ph)
{
    static char skip_why[400]; /* one job at a time per worker: never shared */
    const char *reason = NULL;
    double t_begin, t_warm;
    int rc;

    TRY(measure_events(ctx, st, r));
    phases_mark(ph, "measure_setup");
    t_warm = measure_now_ms();
    nvtxRangePushA("warmup");
    rc = measure_warmup(ctx, st, fn, arg, r, out->warmup);
    nvtxRangePop();
    if (rc != 0) return -1;
    phases_mark(ph, "warmup");

    /* the sampler only where the window may be long enough for a reading */
    st->energy_why =
        measure_stats_energy_skip_why(r, measure_now_ms() - t_warm, out->warmup, skip_why, sizeof skip_why);
    if (!st->energy_why) st->energy = energy_sampler_start(&st->energy_why);
    phases_mark(ph, "measure_setup"); /* the sampler's start joins the events' phase */
    nvtxRangePushA("timed");
    t_begin = measure_now_ms();
    while (!reason) {
        int batch = measure_batch_size(r, st->n, measure_now_ms() - t_begin);
        if (measure_batch(ctx, st, fn, arg, batch, out->cache_cold, d_flush, flush_bytes, out)) {
            nvtxRangePop();
            return -1;
        }
        reason = measure_stats_stop_reason(r, st->gpu_us, st->n, measure_now_ms() - t_begin);
    }
    out->total_ms = measure_now_ms() - t_begin;
    nvtxRangePop();
    phases_mark(ph, "timed");
    measure_energy(st, out);

    out->stop_reason = reason;
    measure_stats_summarize(st->host_us, st->n, out); /* host samples first: only their median is kept */
    out->host_us = out->median_us;
    measure_stats_summarize(st->gpu_us, st->n, out);
    out->throttled = out->sm_clock_min_mhz > 0.0 && out->sm_clock_limit_mhz > 0.0 &&
                     out->sm_clock_min_mhz < 0.75 * out->sm_clock_limit_mhz;
    return 0;
}

int measure_gpu(exec_context *ctx, forward_fn fn, void *arg, const run_request *r, void *d_flush,
                size_t flush_bytes, timing_stats *out, phases *ph)
{
    measure_state st;
    int rc, i;

    memset(out, 0, sizeof *out);
    memset(&st, 0, sizeof st);
    out->warmup = r->warmup > 0 ? r->warmup : 0;
    out->cache_cold = r->cache_cold != 0;
    out->graph = r->graph != 0;
    out->sm_clock_limit_mhz = clocks_sm_max_mhz();
    if (out->cache_cold && (!d_flush || flush_bytes == 0))
        return exec_fail(ctx, __FILE__, __LINE__, "measure_gpu", "cache=cold without an L2 flush buffer");

    rc = measure_run(ctx, &st, fn, arg, r, d_flush, flush_bytes, out, ph);

    /* Cleanup on every path. A failure here is recorded (the first error of the job wins)
     * and fails the measurement too: a leaked event or graph would grow with every job. */
    if (rc != 0) (void)cudaStreamSynchronize(ctx->stream); /* let queued work finish before freeing */
    for (i = 0; i < st.nevents; i++) {
        cudaError_t e1 = st.start[i] ? cudaEventDestroy(st.start[i]) : cudaSuccess;
        cudaError_t e2 = st.end[i] ? cudaEventDestroy(st.end[i]) : cudaSuccess;
        if (e1 != cudaSuccess) rc = exec_fail_cuda(ctx, __FILE__, __LINE__, "cudaEventDestroy(start[i])", e1);
        if (e2 != cudaSuccess) rc = exec_fail_cuda(ctx, __FILE__, __LINE__, "cudaEventDestroy(end[i])", e2);
    }
    if (st.graph_exec) {
        cudaError_t e = cudaGraphExecDestroy(st.graph_exec);
        if (e != cudaSuccess) rc = exec_fail_cuda(ctx, __FILE__, __LINE__, "cudaGraphExecDestroy(graph_exec)", e);
    }
    if (st.graph) {
        cudaError_t e = cudaGraphDestroy(st.graph);
        if (e != cudaSuccess) rc = exec_fail_cuda(ctx, __FILE__, __LINE__, "cudaGraphDestroy(graph)", e);
    }
    energy_sampler_free(st.energy); /* stops its thread on a failed run too */
    free(st.gpu_us);
    free(st.host_us);
    phases_mark(ph, "measure_end");
    return rc;
}
