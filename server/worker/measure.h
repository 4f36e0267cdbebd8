/* measure.h — timing one forward the way careful GPU benchmarks do (nvbench's discipline).
 *
 * Warm-up forwards first (module load, cuBLAS heuristics and first-touch stay out), then
 * timed forwards, each between its own pair of CUDA events, until the stopping rule says
 * enough: at least min_iters and min_time_ms, then stop when the relative standard error
 * of the mean (rse) falls to target_noise, or at max_iters / max_time_ms. `iters` > 0 times
 * exactly that many. Cold mode flushes L2 (a memset of a buffer twice the L2, allocated
 * once per worker) before each timed forward, outside its events. Graph mode captures one
 * forward into a CUDA graph and times its replays. The SM clock is sampled through NVML
 * while timing; a minimum below 75% of the card's maximum marks the run throttled. The
 * board's energy comes from NVML's counter, polled on a thread of its own (energy_sampler.h).
 */
#ifndef MEASURE_H
#define MEASURE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "kernels/exec_context.h"
#include "common/run_request.h"
#include "server/worker/energy_sampler.h"
#include "server/worker/phases.h"

/* One forward of the job at hand, closed over its buffers. Returns 0 or -1 (ctx->error). */
typedef int (*forward_fn)(exec_context *ctx, void *arg);

typedef struct timing_stats {
    double median_us, mean_us, min_us, max_us, p10_us, p90_us, stdev_us;
    double spread;         /* stdev / mean: how far one sample strays; NAN (null) for one sample */
    double rse;            /* relative standard error of the mean, spread / sqrt(iters): the
                              statistic target_noise bounds; NAN (null) for one sample */
    int iters, warmup;
    const char *stop_reason; /* "iters" (fixed count), "rse", "max_iters", "max_time",
                                "max_time_before_min_iters" (docs/measurement.md) */
    double host_us;        /* median CPU time to enqueue one forward (graph: one replay) */
    double total_ms;       /* wall time spent timing */
    int cache_cold, graph;
    double sm_clock_min_mhz, sm_clock_max_mhz; /* sampled during timing; 0 when NVML is absent */
    double sm_clock_limit_mhz; /* the card's maximum SM clock; 0 when unknown */
    int throttled;         /* min sample < 75% of the limit */
    double power_min_w, power_max_w; /* board power sampled during timing; 0 when unknown */
    unsigned long long clock_reasons; /* why clocks were held down, OR of the samples */
    int have_clock_reasons;  /* clock_reasons was read (NVML has it) */
    /* The board's energy over the timed window (measure_stats_average_power_w × the window); NAN
     * with energy_why when unknown, too short to be read or implausible. */
    double energy_j, energy_window_ms;
    const char *energy_why;
    /* The least and most power NVML's instantaneous field read while the sampler ran; 0 when
     * unknown (no sampler, or no such field). */
    double instant_power_min_w, instant_power_max_w;
} timing_stats;

/* The least time between the first and the last step of NVML's energy counter for an energy
 * reading: the counter steps about every 100 ms (docs/measurement.md, "Energy"). */
#define MEASURE_ENERGY_MIN_SPAN_MS 200.0
/* A step seen more than this after the poll before it (the sampler was held off the CPU) is
 * timed too loosely to bound the interval: at most half of it off at each end, ≤ 5% of the
 * shortest span. */
#define MEASURE_ENERGY_MAX_STEP_GAP_MS 10.0
/* An average power above the board's enforced limit by more than this factor, and above the
 * most it was seen drawing by more than MEASURE_ENERGY_MAX_OVER_INSTANT, is a misreading. A
 * board at its cap draws over it while its controller catches up: an H100 capped at 700 W
 * drew 770-820 W (nvidia-smi's instantaneous power) for the first half second of a load, and
 * its counter read 806 W over that window (docs/measurement.md, "Energy"). */
#define MEASURE_ENERGY_MAX_OVER_LIMIT 1.2
#define MEASURE_ENERGY_MAX_OVER_INSTANT 1.1

/* Pure statistics and the stopping rule (measure_stats.c, unit-tested without a GPU). */

/* Fill the sample statistics of s from n samples (microseconds; the array is sorted in
 * place). */
void measure_stats_summarize(double *samples_us, int n, timing_stats *s);

/* NULL to keep going, else the stop reason. elapsed_ms: wall time since timing began. */
const char *measure_stats_stop_reason(const run_request *r, const double *samples_us, int n, double elapsed_ms);

/* The board's average power in W while timing, from the n steps of NVML's energy counter the
 * sampler saw (oldest first): the least-squares rate of the counter over the well-timed steps
 * (the first and last of them at least MEASURE_ENERGY_MIN_SPAN_MS apart). NAN with the reason written to why (why_len bytes) when they are
 * fewer than two or closer than MEASURE_ENERGY_MIN_SPAN_MS, or when the power exceeds both
 * power_limit_w by more than MEASURE_ENERGY_MAX_OVER_LIMIT and instant_max_w, the most the board
 * was read drawing while timing, by more than MEASURE_ENERGY_MAX_OVER_INSTANT (either 0:
 * unknown; both 0: not checked). window_ms, the timed window, only goes into the reason. */
double measure_stats_average_power_w(const energy_step *steps, int n, double window_ms, double power_limit_w,
                                     double instant_max_w, char *why, size_t why_len);

/* Why the timed window cannot give an energy reading (it will be shorter than
 * MEASURE_ENERGY_MIN_SPAN_MS), written to why (why_len bytes): a max_time_ms below it, or a fixed
 * iters whose window, at the warm-up's pace (warmup_ms over warmup forwards, launches and all:
 * an overestimate), comes under a quarter of it. NULL when it may: then the energy sampler runs.
 * Short runs so skip its NVML reads and its thread. */
const char *measure_stats_energy_skip_why(const run_request *r, double warmup_ms, int warmup, char *why, size_t why_len);

/* The "timing" object of the result. */
cJSON *measure_stats_timing_json(const timing_stats *s);

/* The "energy" object: joules_per_forward, avg_power_w, tflop_per_joule (flops: one
 * forward's), window_ms, forwards, and why (null when measured; else every number is null).
 * price_per_hour > 0 adds cost_per_million_forwards (and currency, when not "") at that
 * price, for forwards at the median time. */
cJSON *measure_stats_energy_json(const timing_stats *s, double flops, double price_per_hour, const char *currency);

/* The "perf" object: flops (attn_flops), tflops at the median, bytes (attn_min_bytes),
 * gbps at the median; for a ragged or paged problem also tokens_q and tokens_kv, the real
 * tokens those count (p->seqs needed when ragged). */
cJSON *measure_stats_perf_json(const attn_problem *p, double median_us);

/* GPU timing (measure.c). d_flush is the worker's L2 flush buffer of flush_bytes. ph gets its
 * phases: measure_setup (events, the energy sampler's start), warmup, timed,
 * measure_end (the sampler's stop, the statistics, the events freed). Returns 0, or -1 with
 * ctx->error set. */
int measure_gpu(exec_context *ctx, forward_fn fn, void *arg, const run_request *r, void *d_flush,
                size_t flush_bytes, timing_stats *out, phases *ph);

/* CPU timing for the cpu device: the same rule with a monotonic clock (measure_stats.c). */
int measure_cpu(exec_context *ctx, forward_fn fn, void *arg, const run_request *r, timing_stats *out);

#endif
