/* test_measure_stats.c — sample statistics, the stopping rule, the timing/perf JSON, cpu timing
 * (server/worker/measure_stats.c) and a job's phases (phases.h), without a GPU. */
#include <math.h>
#include <string.h>

#include "server/worker/measure.h"
#include "tests/unit/check.h"

static int near(double a, double b, double tol) { return fabs(a - b) <= tol; }

static void test_summarize(void)
{
    /* 1..10, shuffled: numpy.percentile(linear) gives p10 1.9, p50 5.5, p90 9.1. */
    double x[10] = {7, 3, 10, 1, 5, 9, 2, 8, 4, 6};
    timing_stats s;
    memset(&s, 0, sizeof s);
    measure_stats_summarize(x, 10, &s);
    CHECK(s.iters == 10, "iters %d", s.iters);
    CHECK(near(s.median_us, 5.5, 1e-12), "median %g", s.median_us);
    CHECK(near(s.mean_us, 5.5, 1e-12), "mean %g", s.mean_us);
    CHECK(s.min_us == 1 && s.max_us == 10, "min %g max %g", s.min_us, s.max_us);
    CHECK(near(s.p10_us, 1.9, 1e-12), "p10 %g", s.p10_us);
    CHECK(near(s.p90_us, 9.1, 1e-12), "p90 %g", s.p90_us);
    CHECK(near(s.stdev_us, sqrt(55.0 / 6.0), 1e-12), "stdev %g", s.stdev_us); /* sample stdev */
    CHECK(near(s.spread, s.stdev_us / 5.5, 1e-12), "spread %g", s.spread);
    CHECK(near(s.rse, s.spread / sqrt(10.0), 1e-12), "rse %g", s.rse);
    CHECK(x[0] == 1 && x[9] == 10, "sorted in place");

    {
        double one[1] = {42};
        measure_stats_summarize(one, 1, &s);
        CHECK(s.median_us == 42 && s.p10_us == 42 && s.p90_us == 42, "one sample");
        CHECK(s.stdev_us == 0 && isnan(s.spread) && isnan(s.rse), "one sample: spread and rse unknown (NaN, null in JSON)");
    }
    {
        double odd[5] = {5, 1, 4, 2, 3};
        measure_stats_summarize(odd, 5, &s);
        CHECK(s.median_us == 3, "odd median %g", s.median_us);
        CHECK(near(s.p10_us, 1.4, 1e-12), "odd p10 %g", s.p10_us);
    }
    measure_stats_summarize(NULL, 0, &s);
    CHECK(s.iters == 0 && s.median_us == 0, "empty");
}

static void test_stop_rule(void)
{
    run_request r;
    double flat[200], noisy[200];
    int i;
    memset(&r, 0, sizeof r);
    r.min_iters = 10;
    r.max_iters = 100;
    r.min_time_ms = 5;
    r.max_time_ms = 1000;
    r.target_noise = 0.01;
    for (i = 0; i < 200; i++) {
        flat[i] = 100.0 + (i % 2) * 0.1;     /* rse ≪ 1% */
        noisy[i] = (i % 2) ? 50.0 : 150.0;   /* spread 50%: rse ≥ 1% until n > 2500 */
    }

    CHECK(measure_stats_stop_reason(&r, flat, 5, 100) == NULL, "below min_iters keeps going");
    CHECK(measure_stats_stop_reason(&r, flat, 20, 1) == NULL, "below min_time keeps going");
    CHECK(measure_stats_stop_reason(&r, flat, 20, 6) && !strcmp(measure_stats_stop_reason(&r, flat, 20, 6), "rse"),
          "settled: rse at target_noise");
    CHECK(measure_stats_stop_reason(&r, noisy, 20, 6) == NULL, "noisy keeps going");
    CHECK(measure_stats_stop_reason(&r, noisy, 100, 6) && !strcmp(measure_stats_stop_reason(&r, noisy, 100, 6), "max_iters"),
          "max_iters");
    CHECK(measure_stats_stop_reason(&r, noisy, 30, 1000) && !strcmp(measure_stats_stop_reason(&r, noisy, 30, 1000), "max_time"),
          "max_time");
    CHECK(measure_stats_stop_reason(&r, noisy, 1, 5000) &&
              !strcmp(measure_stats_stop_reason(&r, noisy, 1, 5000), "max_time_before_min_iters"),
          "max_time with one sample (a slow forward) says min_iters was not reached");
    CHECK(measure_stats_stop_reason(&r, noisy, 10, 5000) && !strcmp(measure_stats_stop_reason(&r, noisy, 10, 5000), "max_time"),
          "max_time at min_iters");
    CHECK(measure_stats_stop_reason(&r, noisy, 0, 5000) == NULL, "max_time needs a sample");
    {
        run_request one = r;
        one.min_iters = 1;
        one.min_time_ms = 0;
        CHECK(measure_stats_stop_reason(&one, flat, 1, 10) == NULL, "one sample never settles on rse");
    }

    r.iters = 7;
    CHECK(measure_stats_stop_reason(&r, noisy, 6, 5000) == NULL, "fixed count ignores max_time");
    CHECK(measure_stats_stop_reason(&r, noisy, 7, 0) && !strcmp(measure_stats_stop_reason(&r, noisy, 7, 0), "iters"), "iters");
    CHECK(measure_stats_stop_reason(&r, flat, 150, 0) && !strcmp(measure_stats_stop_reason(&r, flat, 150, 0), "iters"),
          "fixed count beyond max_iters");
}

static const char *const timing_keys[] = {"median_us", "mean_us", "min_us", "max_us", "p10_us", "p90_us",
                                          "stdev_us",  "spread",  "rse",    "iters",  "warmup", "stop_reason",
                                          "cache",     "graph",   "host_us", "total_ms", "clocks"};

static void test_json(void)
{
    timing_stats s;
    cJSON *j, *c;
    attn_problem p;
    size_t i;
    memset(&s, 0, sizeof s);
    s.median_us = 100;
    s.iters = 12;
    s.warmup = 5;
    s.stop_reason = "rse";
    s.cache_cold = 1;
    s.graph = 0;
    s.spread = NAN; /* non-finite: null */
    s.sm_clock_min_mhz = 1500;
    s.sm_clock_max_mhz = 1980;
    s.sm_clock_limit_mhz = 1980;
    s.throttled = 0;
    j = measure_stats_timing_json(&s);
    CHECK(j != NULL, "timing json");
    for (i = 0; i < sizeof timing_keys / sizeof timing_keys[0]; i++)
        CHECK(cJSON_GetObjectItem(j, timing_keys[i]) != NULL, "timing key %s", timing_keys[i]);
    CHECK(!strcmp(cJSON_GetObjectItem(j, "cache")->valuestring, "cold"), "cache cold");
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(j, "graph")), "graph false");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "spread")), "NaN is null");
    CHECK(!cJSON_GetObjectItem(j, "noise"), "no field named noise: spread and rse say which statistic");
    CHECK(!strcmp(cJSON_GetObjectItem(j, "stop_reason")->valuestring, "rse"), "stop_reason");
    CHECK(cJSON_GetObjectItem(j, "iters")->valuedouble == 12, "iters");
    c = cJSON_GetObjectItem(j, "clocks");
    CHECK(c && cJSON_GetObjectItem(c, "sm_min_mhz") && cJSON_GetObjectItem(c, "sm_max_mhz") &&
              cJSON_GetObjectItem(c, "sm_limit_mhz") && cJSON_IsFalse(cJSON_GetObjectItem(c, "throttled")),
          "clocks object");
    cJSON_Delete(j);
    /* No clock readings (the cpu device): null, not 0 MHz and not "not throttled". */
    s.sm_clock_min_mhz = s.sm_clock_max_mhz = s.sm_clock_limit_mhz = 0;
    j = measure_stats_timing_json(&s);
    c = cJSON_GetObjectItem(j, "clocks");
    CHECK(c && cJSON_IsNull(cJSON_GetObjectItem(c, "sm_min_mhz")) && cJSON_IsNull(cJSON_GetObjectItem(c, "sm_max_mhz")) &&
              cJSON_IsNull(cJSON_GetObjectItem(c, "sm_limit_mhz")) && cJSON_IsNull(cJSON_GetObjectItem(c, "throttled")),
          "no clock readings are null");
    cJSON_Delete(j);

    /* The study shape: 4·8·16·1024·1024·64 / 2 (causal) = 2^34 FLOPs. */
    memset(&p, 0, sizeof p);
    p.batch = 8, p.heads = 16, p.seq_q = 1024, p.seq_kv = 1024, p.head_dim = 64;
    p.dtype = ATTN_BF16, p.mask = ATTN_MASK_CAUSAL;
    j = measure_stats_perf_json(&p, 1000.0);
    CHECK(j != NULL, "perf json");
    CHECK(near(cJSON_GetObjectItem(j, "flops")->valuedouble, 17179869184.0, 1), "flops %g",
          cJSON_GetObjectItem(j, "flops")->valuedouble);
    CHECK(near(cJSON_GetObjectItem(j, "tflops")->valuedouble, 17.179869184, 1e-9), "tflops");
    CHECK(near(cJSON_GetObjectItem(j, "bytes")->valuedouble, 4.0 * 8 * 16 * 1024 * 64 * 2, 1), "bytes");
    CHECK(near(cJSON_GetObjectItem(j, "gbps")->valuedouble, 4.0 * 8 * 16 * 1024 * 64 * 2 / 1e-3 / 1e9, 1e-6), "gbps");
    cJSON_Delete(j);
    j = measure_stats_perf_json(&p, 0.0);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "tflops")), "no time: tflops null");
    cJSON_Delete(j);
}

static int calls;
static int count_forward(exec_context *ctx, void *arg)
{
    volatile double x = 0;
    (void)ctx, (void)arg;
    for (int i = 0; i < 1000; i++) x += i;
    calls++;
    return 0;
}

static int failing_forward(exec_context *ctx, void *arg)
{
    (void)arg;
    return exec_fail(ctx, "test", 1, "failing_forward", "on purpose");
}

static void test_measure_cpu(void)
{
    exec_context ctx;
    run_request r;
    timing_stats s;
    memset(&ctx, 0, sizeof ctx);
    ctx.device = -1;
    memset(&r, 0, sizeof r);
    r.warmup = 3;
    r.iters = 25;
    calls = 0;
    CHECK(measure_cpu(&ctx, count_forward, NULL, &r, &s) == 0, "measure_cpu");
    CHECK(calls == 28, "3 warm-up + 25 timed, got %d", calls);
    CHECK(s.iters == 25 && s.warmup == 3, "iters %d warmup %d", s.iters, s.warmup);
    CHECK(s.stop_reason && !strcmp(s.stop_reason, "iters"), "stop iters");
    CHECK(s.median_us > 0 && s.host_us == s.median_us, "host_us is the forward's time");
    CHECK(s.min_us <= s.p10_us && s.p10_us <= s.median_us && s.median_us <= s.p90_us && s.p90_us <= s.max_us,
          "ordered percentiles");

    r.iters = 0;
    r.min_iters = 5;
    r.max_iters = 40;
    r.min_time_ms = 0;
    r.max_time_ms = 10000;
    r.target_noise = 1e-12; /* never settles */
    CHECK(measure_cpu(&ctx, count_forward, NULL, &r, &s) == 0 && s.iters == 40 &&
              !strcmp(s.stop_reason, "max_iters"),
          "max_iters stop (%d)", s.iters);

    CHECK(measure_cpu(&ctx, failing_forward, NULL, &r, &s) == -1, "a failing forward fails the timing");
    CHECK(strstr(ctx.error, "failing_forward failed at test:1: on purpose") != NULL, "error text: %s", ctx.error);
}

static void test_energy_json(void)
{
    timing_stats s;
    cJSON *j;

    memset(&s, 0, sizeof s);
    s.iters = 100;
    s.median_us = 1000.0;
    s.energy_j = 50.0;           /* 0.5 J a forward over 250 ms: 200 W */
    s.energy_window_ms = 250.0;
    j = measure_stats_energy_json(&s, 2e12, 3.6, "USD");
    CHECK(fabs(cJSON_GetObjectItem(j, "joules_per_forward")->valuedouble - 0.5) < 1e-12, "J/forward");
    CHECK(fabs(cJSON_GetObjectItem(j, "avg_power_w")->valuedouble - 200.0) < 1e-9, "average power");
    CHECK(fabs(cJSON_GetObjectItem(j, "tflop_per_joule")->valuedouble - 4.0) < 1e-12, "TFLOP/J");
    /* 3.6 an hour is 0.001 a second; a million forwards of 1 ms take 1000 s. */
    CHECK(fabs(cJSON_GetObjectItem(j, "cost_per_million_forwards")->valuedouble - 1.0) < 1e-12, "cost");
    CHECK(!strcmp(cJSON_GetObjectItem(j, "currency")->valuestring, "USD"), "currency");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "why")), "measured: why is null");
    cJSON_Delete(j);

    s.energy_j = NAN;
    s.energy_why = "NVML is not available in this container";
    j = measure_stats_energy_json(&s, 2e12, 0.0, "");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "joules_per_forward")) && cJSON_IsNull(cJSON_GetObjectItem(j, "avg_power_w")) &&
              cJSON_IsNull(cJSON_GetObjectItem(j, "tflop_per_joule")), "unknown: null numbers");
    CHECK(!strcmp(cJSON_GetObjectItem(j, "why")->valuestring, "NVML is not available in this container"), "why");
    CHECK(!cJSON_GetObjectItem(j, "cost_per_million_forwards"), "no price: no cost");
    cJSON_Delete(j);
}

/* A job's phases: in order, each once; a phase marked again adds to its time; the total is the
 * sum (phases.h). */
static void test_phases(void)
{
    phases ph;
    cJSON *o;
    phases_begin(&ph);
    phases_mark(&ph, "setup");
    phases_mark(&ph, "warmup");
    phases_mark(&ph, "setup");
    phases_mark(&ph, "timed");
    CHECK(ph.n == 3 && !strcmp(ph.name[0], "setup") && !strcmp(ph.name[1], "warmup") && !strcmp(ph.name[2], "timed"),
          "three phases, in first-mark order: %d", ph.n);
    o = phases_json(&ph);
    CHECK(o && cJSON_GetArraySize(o) == 4 && cJSON_GetObjectItem(o, "total"), "one key a phase, and total");
    CHECK(near(ph.ms[0] + ph.ms[1] + ph.ms[2], cJSON_GetObjectItem(o, "total")->valuedouble, 1e-9),
          "the phases sum to the total");
    cJSON_Delete(o);
}

/* The energy sampler runs only where the window may give a reading: not under a max_time_ms
 * below MEASURE_ENERGY_MIN_SPAN_MS, nor for fixed iters whose window, at the warm-up's pace,
 * is under a quarter of it. */
static void test_energy_skip(void)
{
    run_request r;
    char why[400];
    memset(&r, 0, sizeof r);
    r.max_time_ms = 2000, r.min_time_ms = 20;
    CHECK(measure_stats_energy_skip_why(&r, 1.0, 5, why, sizeof why) == NULL, "the stopping rule: may run long");
    r.max_time_ms = 150;
    CHECK(measure_stats_energy_skip_why(&r, 1.0, 5, why, sizeof why) == why && strstr(why, "max_time_ms=150"),
          "max_time_ms 150: %s", why);
    r.max_time_ms = 2000, r.iters = 10; /* 0.2 ms a forward: a 2 ms window */
    CHECK(measure_stats_energy_skip_why(&r, 1.0, 5, why, sizeof why) == why && strstr(why, "iters=10"),
          "iters 10 of 0.2 ms: %s", why);
    r.iters = 300; /* 60 ms: above a quarter of 200, the sampler runs */
    CHECK(measure_stats_energy_skip_why(&r, 1.0, 5, why, sizeof why) == NULL, "iters 300 of 0.2 ms");
    CHECK(measure_stats_energy_skip_why(&r, 0.0, 0, why, sizeof why) == NULL, "no warm-up: no estimate, it runs");
}

int main(void)
{
    test_summarize();
    test_phases();
    test_energy_skip();
    test_energy_json();
    test_stop_rule();
    test_json();
    test_measure_cpu();
    return CHECK_DONE();
}
