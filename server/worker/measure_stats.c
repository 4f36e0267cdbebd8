/* measure_stats.c — the pure part of measurement: sample statistics, the stopping rule,
 * the average power from the energy counter's steps, the "timing", "energy" and "perf" JSON
 * objects, and timing on the cpu device (measure.h).
 *
 * No CUDA here, so all of it is unit-tested on machines without a GPU
 * (tests/unit/worker/test_measure_stats.c). measure.c drives the same rule with CUDA events.
 */
#include "server/worker/measure.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/attn.h"
#include "common/clock.h"
#include "common/grow.h"
#include "server/worker/clocks.h"
#include "server/worker/json_fields.h"

/* ---------------------------------------------------------------- statistics ---------- */

static int measure_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Percentile q (0..1) of n sorted samples, linear interpolation between closest ranks
 * (numpy's default "linear" method). */
static double measure_percentile_sorted(const double *sorted, int n, double q)
{
    double pos, frac;
    int lo;
    if (n <= 0) return 0.0;
    if (n == 1) return sorted[0];
    pos = q * (double)(n - 1);
    lo = (int)floor(pos);
    if (lo >= n - 1) return sorted[n - 1];
    frac = pos - (double)lo;
    return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

/* Mean and sample standard deviation (n − 1 in the denominator; 0 for one sample). */
static void measure_mean_stdev(const double *x, int n, double *mean, double *stdev)
{
    double m = 0.0, ss = 0.0;
    int i;
    for (i = 0; i < n; i++) m += x[i];
    m = n > 0 ? m / n : 0.0;
    for (i = 0; i < n; i++) ss += (x[i] - m) * (x[i] - m);
    *mean = m;
    *stdev = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
}

void measure_stats_summarize(double *samples_us, int n, timing_stats *s)
{
    double mean, stdev;
    if (n <= 0 || !samples_us) {
        s->median_us = s->mean_us = s->min_us = s->max_us = s->p10_us = s->p90_us = s->stdev_us = 0.0;
        s->spread = s->rse = NAN;
        s->iters = 0;
        return;
    }
    qsort(samples_us, (size_t)n, sizeof *samples_us, measure_cmp_double);
    measure_mean_stdev(samples_us, n, &mean, &stdev);
    s->iters = n;
    s->min_us = samples_us[0];
    s->max_us = samples_us[n - 1];
    s->median_us = measure_percentile_sorted(samples_us, n, 0.5);
    s->p10_us = measure_percentile_sorted(samples_us, n, 0.1);
    s->p90_us = measure_percentile_sorted(samples_us, n, 0.9);
    s->mean_us = mean;
    s->stdev_us = stdev;
    /* One sample has no spread to speak of: unknown (null), not 0. */
    s->spread = n > 1 && mean > 0.0 ? stdev / mean : NAN;
    s->rse = s->spread / sqrt((double)n);
}

/* ---------------------------------------------------------------- stopping rule ------- */

const char *measure_stats_stop_reason(const run_request *r, const double *samples_us, int n, double elapsed_ms)
{
    double mean, stdev, rse;
    if (r->iters > 0) return n >= r->iters ? "iters" : NULL;
    if (r->max_iters > 0 && n >= r->max_iters) return "max_iters";
    if (r->max_time_ms > 0.0 && elapsed_ms >= r->max_time_ms && n >= 1)
        return n < r->min_iters ? "max_time_before_min_iters" : "max_time";
    /* A spread needs two samples: one sample has stdev 0 and would "converge" at once. */
    if (n < 2 || n < r->min_iters || elapsed_ms < r->min_time_ms) return NULL;
    measure_mean_stdev(samples_us, n, &mean, &stdev);
    if (mean <= 0.0) return NULL;
    rse = (stdev / mean) / sqrt((double)n);
    return rse <= r->target_noise ? "rse" : NULL;
}

/* ---------------------------------------------------------------- energy -------------- */

/* A step happened between the poll before and the one that saw it: their midpoint is off by
 * at most half their gap. */
static double energy_step_ms(const energy_step *s) { return 0.5 * (s->before_ms + s->seen_ms); }

static int energy_step_well_timed(const energy_step *s)
{
    return s->seen_ms - s->before_ms <= MEASURE_ENERGY_MAX_STEP_GAP_MS;
}

/* The counter's rate over the well-timed steps first..last: the least-squares slope of mJ
 * against ms. The counter is published every 45–125 ms, its value a little older than the
 * publication; with the two ends alone one step published early or late moves a 500 ms
 * reading by up to ±10% (740 W seen on a 700 W board), the fit spreads it over every step. */
static double energy_slope_mj_per_ms(const energy_step *steps, int first, int last)
{
    double t0 = energy_step_ms(&steps[first]), st = 0.0, se = 0.0, stt = 0.0, ste = 0.0, k = 0.0;
    int i;

    for (i = first; i <= last; i++) {
        double t, e;
        if (!energy_step_well_timed(&steps[i])) continue;
        t = energy_step_ms(&steps[i]) - t0;
        e = (double)steps[i].mj - (double)steps[first].mj;
        st += t, se += e, stt += t * t, ste += t * e, k += 1.0;
    }
    return (ste - st * se / k) / (stt - st * st / k);
}

const char *measure_stats_energy_skip_why(const run_request *r, double warmup_ms, int warmup, char *why, size_t why_len)
{
    if (r->max_time_ms > 0.0 && r->max_time_ms < MEASURE_ENERGY_MIN_SPAN_MS) {
        snprintf(why, why_len, "max_time_ms=%g bounds the timed window below the %.0f ms an energy reading needs "
                 "(NVML's counter steps about every 100 ms): ask for min_time_ms=%.0f or more",
                 r->max_time_ms, MEASURE_ENERGY_MIN_SPAN_MS, MEASURE_ENERGY_MIN_SPAN_MS + 300.0);
        return why;
    }
    if (r->iters > 0 && warmup > 0 && warmup_ms / warmup * r->iters < MEASURE_ENERGY_MIN_SPAN_MS / 4) {
        snprintf(why, why_len, "iters=%d at the warm-up's %.3f ms a forward is a timed window of about %.1f ms, short "
                 "of the %.0f ms an energy reading needs (NVML's counter steps about every 100 ms): ask for "
                 "min_time_ms=%.0f or more instead of iters", r->iters, warmup_ms / warmup,
                 warmup_ms / warmup * r->iters, MEASURE_ENERGY_MIN_SPAN_MS, MEASURE_ENERGY_MIN_SPAN_MS + 300.0);
        return why;
    }
    return NULL;
}

double measure_stats_average_power_w(const energy_step *steps, int n, double window_ms, double power_limit_w,
                                     double instant_max_w, char *why, size_t why_len)
{
    int first = 0, last = n - 1, timed = 0, i;
    double span_ms = 0.0, watts, bound;

    for (i = 0; i < n; i++) timed += energy_step_well_timed(&steps[i]);
    while (first < n && !energy_step_well_timed(&steps[first])) first++;
    while (last > first && !energy_step_well_timed(&steps[last])) last--;
    if (timed >= 2) span_ms = energy_step_ms(&steps[last]) - energy_step_ms(&steps[first]);

    if (timed < 2 || span_ms < MEASURE_ENERGY_MIN_SPAN_MS) {
        if (timed < n)
            snprintf(why, why_len,
                     "NVML's energy counter stepped %d time(s) in the %.0f ms timed window, but only %d of the steps "
                     "were timed to within %.0f ms (the sampler thread was held off the CPU); a reading needs two "
                     "such steps %.0f ms apart",
                     n, window_ms, timed, MEASURE_ENERGY_MAX_STEP_GAP_MS, MEASURE_ENERGY_MIN_SPAN_MS);
        else
            snprintf(why, why_len,
                     "NVML's energy counter stepped %d time(s) in the %.0f ms timed window, %.0f ms from the first "
                     "step to the last; a reading needs %.0f ms between two (it steps about every 100 ms): ask for "
                     "min_time_ms=%.0f or more",
                     n, window_ms, span_ms, MEASURE_ENERGY_MIN_SPAN_MS, MEASURE_ENERGY_MIN_SPAN_MS + 300.0);
        return NAN;
    }
    if (steps[last].mj < steps[first].mj) {
        snprintf(why, why_len, "NVML's energy counter went backwards while timing");
        return NAN;
    }
    watts = energy_slope_mj_per_ms(steps, first, last);
    bound = fmax(MEASURE_ENERGY_MAX_OVER_LIMIT * power_limit_w, MEASURE_ENERGY_MAX_OVER_INSTANT * instant_max_w);
    if (bound > 0.0 && watts > bound) {
        char limit[96] = "", seen[96] = "";
        if (power_limit_w > 0.0)
            snprintf(limit, sizeof limit, ", more than %.0f%% above the board's enforced power limit of %.0f W",
                     (MEASURE_ENERGY_MAX_OVER_LIMIT - 1.0) * 100.0, power_limit_w);
        if (instant_max_w > 0.0)
            snprintf(seen, sizeof seen, "%s more than %.0f%% above the most it was read drawing (%.0f W)",
                     limit[0] ? " and" : ",", (MEASURE_ENERGY_MAX_OVER_INSTANT - 1.0) * 100.0, instant_max_w);
        snprintf(why, why_len, "NVML's energy counter gives %.0f W between its steps%s%s: not a plausible reading",
                 watts, limit, seen);
        return NAN;
    }
    return watts;
}

/* ---------------------------------------------------------------- JSON ---------------- */

cJSON *measure_stats_timing_json(const timing_stats *s)
{
    cJSON *o = cJSON_CreateObject(), *clocks;
    if (!o) return NULL;
    json_add_number_or_null(o, "median_us", s->median_us);
    json_add_number_or_null(o, "mean_us", s->mean_us);
    json_add_number_or_null(o, "min_us", s->min_us);
    json_add_number_or_null(o, "max_us", s->max_us);
    json_add_number_or_null(o, "p10_us", s->p10_us);
    json_add_number_or_null(o, "p90_us", s->p90_us);
    json_add_number_or_null(o, "stdev_us", s->stdev_us);
    json_add_number_or_null(o, "spread", s->spread);
    json_add_number_or_null(o, "rse", s->rse);
    cJSON_AddNumberToObject(o, "iters", s->iters);
    cJSON_AddNumberToObject(o, "warmup", s->warmup);
    if (s->stop_reason) cJSON_AddStringToObject(o, "stop_reason", s->stop_reason);
    else cJSON_AddNullToObject(o, "stop_reason");
    cJSON_AddStringToObject(o, "cache", s->cache_cold ? "cold" : "hot");
    cJSON_AddBoolToObject(o, "graph", s->graph != 0);
    json_add_number_or_null(o, "host_us", s->host_us);
    json_add_number_or_null(o, "total_ms", s->total_ms);
    clocks = cJSON_AddObjectToObject(o, "clocks");
    if (clocks) { /* 0 MHz is no reading (the cpu device, no NVML): null, never a clock of 0 */
        int read = s->sm_clock_max_mhz > 0;
        json_add_number_or_null(clocks, "sm_min_mhz", s->sm_clock_min_mhz > 0 ? s->sm_clock_min_mhz : NAN);
        json_add_number_or_null(clocks, "sm_max_mhz", read ? s->sm_clock_max_mhz : NAN);
        json_add_number_or_null(clocks, "sm_limit_mhz", s->sm_clock_limit_mhz > 0 ? s->sm_clock_limit_mhz : NAN);
        if (read || s->have_clock_reasons) cJSON_AddBoolToObject(clocks, "throttled", s->throttled != 0);
        else cJSON_AddNullToObject(clocks, "throttled");
        json_add_number_or_null(clocks, "power_min_w", s->power_min_w > 0 ? s->power_min_w : NAN);
        json_add_number_or_null(clocks, "power_max_w", s->power_max_w > 0 ? s->power_max_w : NAN);
        if (s->have_clock_reasons) cJSON_AddItemToObject(clocks, "event_reasons", clocks_reasons_json(s->clock_reasons));
        else cJSON_AddNullToObject(clocks, "event_reasons");
    }
    return o;
}

cJSON *measure_stats_energy_json(const timing_stats *s, double flops, double price_per_hour, const char *currency)
{
    cJSON *o = cJSON_CreateObject();
    int known = isfinite(s->energy_j) && s->energy_j > 0.0 && s->iters > 0 && s->energy_window_ms > 0.0;
    double per_forward = known ? s->energy_j / s->iters : NAN;

    if (!o) return NULL;
    json_add_number_or_null(o, "joules_per_forward", per_forward);
    json_add_number_or_null(o, "avg_power_w", known ? s->energy_j / (s->energy_window_ms * 1e-3) : NAN);
    json_add_number_or_null(o, "tflop_per_joule", known ? flops / per_forward / 1e12 : NAN);
    json_add_number_or_null(o, "window_ms", s->energy_window_ms);
    cJSON_AddNumberToObject(o, "forwards", s->iters);
    /* what the board was read drawing meanwhile: whether an avg_power_w above the cap was the board's */
    json_add_number_or_null(o, "instant_power_min_w", s->instant_power_min_w > 0 ? s->instant_power_min_w : NAN);
    json_add_number_or_null(o, "instant_power_max_w", s->instant_power_max_w > 0 ? s->instant_power_max_w : NAN);
    /* The box is paid by the hour: a million forwards at the median take median_us seconds. */
    if (price_per_hour > 0.0) {
        json_add_number_or_null(o, "cost_per_million_forwards", s->iters > 0 ? price_per_hour / 3600.0 * s->median_us : NAN);
        if (currency && currency[0]) cJSON_AddStringToObject(o, "currency", currency);
    }
    if (known) cJSON_AddNullToObject(o, "why");
    else cJSON_AddStringToObject(o, "why", s->energy_why ? s->energy_why : "not measured");
    return o;
}

cJSON *measure_stats_perf_json(const attn_problem *p, double median_us)
{
    cJSON *o = cJSON_CreateObject();
    double flops = attn_flops(p), bytes = attn_min_bytes(p);
    double seconds = median_us * 1e-6;
    if (!o) return NULL;
    json_add_number_or_null(o, "flops", flops);
    json_add_number_or_null(o, "tflops", seconds > 0.0 ? flops / seconds / 1e12 : NAN);
    json_add_number_or_null(o, "bytes", bytes);
    json_add_number_or_null(o, "gbps", seconds > 0.0 ? bytes / seconds / 1e9 : NAN);
    if (p->ragged || p->page_size > 0) { /* a serving batch: the real tokens flops and bytes count */
        cJSON_AddNumberToObject(o, "tokens_q", (double)attn_tokens_q(p));
        cJSON_AddNumberToObject(o, "tokens_kv", (double)attn_tokens_kv(p));
    }
    return o;
}

/* ---------------------------------------------------------------- cpu timing ---------- */

static double measure_now_ms(void) { return clock_monotonic_s() * 1e3; }

int measure_cpu(exec_context *ctx, forward_fn fn, void *arg, const run_request *r, timing_stats *out)
{
    double *samples = NULL, t_begin, t0, t1;
    size_t cap = 0;
    int n = 0, i, rc = -1;
    const char *reason = NULL;

    memset(out, 0, sizeof *out);
    out->warmup = r->warmup > 0 ? r->warmup : 0;

    for (i = 0; i < out->warmup; i++)
        if (fn(ctx, arg) != 0) return -1;

    t_begin = measure_now_ms();
    while (!reason) {
        if (grow_array(&samples, &cap, (size_t)n + 1, sizeof *samples, 64) != 0) {
            exec_fail(ctx, __FILE__, __LINE__, "grow_array(samples)", "out of memory");
            goto done;
        }
        t0 = measure_now_ms();
        if (fn(ctx, arg) != 0) goto done;
        t1 = measure_now_ms();
        samples[n++] = (t1 - t0) * 1e3;
        reason = measure_stats_stop_reason(r, samples, n, t1 - t_begin);
    }
    out->total_ms = measure_now_ms() - t_begin;
    out->stop_reason = reason;
    /* On the cpu the forward runs to completion inside fn: its host time is its time. */
    measure_stats_summarize(samples, n, out);
    out->host_us = out->median_us;
    out->cache_cold = 0; /* nothing to flush deliberately on the cpu device */
    out->graph = 0;
    rc = 0;
done:
    free(samples);
    return rc;
}
