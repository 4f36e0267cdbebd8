/* test_energy.c — the average power from NVML's energy-counter steps (measure_stats_average_power_w
 * in server/worker/measure_stats.c) over fake counter sequences, and the sampler without NVML. */
#include <math.h>
#include <string.h>

#include "server/worker/measure.h"
#include "tests/unit/check.h"

#define LIMIT_W 700.0

/* A board drawing power_w whose counter is published every 72–125 ms (as NVML's is on the
 * H200), polled every poll_ms for window_ms: the steps a sampler with that poll records. */
static int simulate(double power_w, double poll_ms, double window_ms, energy_step *steps, int cap)
{
    unsigned seed = 12345;
    double next_update_ms = 37.0, published_ms = -1.0, prev_poll_ms = 0.0, t;
    unsigned long long last_mj = 0;
    int n = 0;
    for (t = poll_ms; t <= window_ms; t += poll_ms) {
        while (next_update_ms <= t) { /* the counter holds the energy up to its last update */
            published_ms = next_update_ms;
            seed = seed * 1103515245u + 12345u;
            next_update_ms += 72.0 + (double)((seed >> 16) % 5300) * 0.01; /* not on the poll grid */
        }
        if (published_ms >= 0.0) {
            unsigned long long mj = 1000000ULL + (unsigned long long)llround(power_w * published_ms); /* W·ms = mJ */
            if (mj != last_mj && n < cap) {
                steps[n].before_ms = prev_poll_ms;
                steps[n].seen_ms = t;
                steps[n].mj = mj;
                n++;
                last_mj = mj;
            }
        }
        prev_poll_ms = t;
    }
    return n;
}

/* The estimate from a simulated board's steps; n: how many steps the sampler saw. */
static double simulated_power_w(double power_w, double poll_ms, double window_ms, int *n, char *why, size_t why_len)
{
    energy_step steps[64];
    *n = simulate(power_w, poll_ms, window_ms, steps, 64);
    return measure_stats_average_power_w(steps, *n, window_ms, LIMIT_W, 0.0, why, why_len);
}

static void test_sampled_often(void)
{
    char why[300];
    int n;
    double w = simulated_power_w(620.0, 1.0, 1000.0, &n, why, sizeof why);
    CHECK(n >= 8, "a 1 s window holds %d steps", n);
    CHECK(fabs(w - 620.0) <= 620.0 * 0.005, "1 ms polls: %g W for 620 W (within 0.5%%)", w);

    w = simulated_power_w(620.0, 1.0, 300.0, &n, why, sizeof why);
    CHECK(isnan(w) || fabs(w - 620.0) <= 620.0 * 0.02, "300 ms: null or within 2%%: %g W", w);
}

/* Read once a batch (here every 150 ms), each step is known only to within a batch: the
 * estimate refuses it rather than report a skewed power. */
static void test_sampled_once_a_batch(void)
{
    char why[300];
    int n;
    double w = simulated_power_w(620.0, 150.0, 1500.0, &n, why, sizeof why);
    CHECK(n >= 2, "steps %d", n);
    CHECK(isnan(w), "loosely timed steps give no reading: %g W", w);
    CHECK(strstr(why, "held off the CPU") != NULL, "why: %s", why);
}

static void test_exact_arithmetic(void)
{
    char why[300];
    /* Midpoints 100 ms and 600 ms, 350 J apart: 700 W. The middle step changes nothing. */
    energy_step s[3] = {{99.0, 101.0, 1000}, {349.5, 350.5, 176000}, {599.5, 600.5, 351000}};
    double w = measure_stats_average_power_w(s, 3, 800.0, LIMIT_W, 0.0, why, sizeof why);
    CHECK(fabs(w - 700.0) < 1e-9, "700 W: %.12g", w);

    /* A first step seen 40 ms after the poll before it is skipped: the second one bounds it. */
    {
        energy_step loose[4] = {{10.0, 50.0, 1000}, {149.5, 150.5, 51000}, {399.5, 400.5, 176000},
                                {649.5, 650.5, 301000}};
        w = measure_stats_average_power_w(loose, 4, 800.0, LIMIT_W, 0.0, why, sizeof why);
        CHECK(fabs(w - 500.0) < 1e-9, "500 W from steps 2 to 4: %.12g", w);
    }
    /* power_limit_w 0: unknown, not checked. */
    {
        energy_step hot[2] = {{0.0, 1.0, 0}, {500.0, 501.0, 1000000}}; /* 2000 W */
        w = measure_stats_average_power_w(hot, 2, 600.0, 0.0, 0.0, why, sizeof why);
        CHECK(fabs(w - 2000.0) < 1e-9, "no limit known: %g", w);
    }
}

/* Steps every 100 ms at 700 W, the first published 30 ms late: its two ends alone say 745 W;
 * the fit over all six steps stays within 5%. */
static void test_late_step_spread_by_the_fit(void)
{
    char why[300];
    energy_step s[6];
    double w;
    for (int i = 0; i < 6; i++) {
        double t = 100.0 * (i + 1) + (i == 0 ? 30.0 : 0.0);
        s[i] = (energy_step){t - 0.5, t + 0.5, (unsigned long long)(700.0 * 100.0 * (i + 1))};
    }
    w = measure_stats_average_power_w(s, 6, 700.0, 0.0, 0.0, why, sizeof why);
    CHECK(fabs(w - 700.0) < 35.0 && fabs(w - 700.0) < fabs(350000.0 / 470.0 - 700.0), "fit: %g W for 700 W", w);
}

static void test_too_few_steps(void)
{
    char why[300];
    energy_step one[1] = {{10.0, 11.0, 5000}};
    energy_step close[2] = {{10.0, 11.0, 5000}, {160.0, 161.0, 95000}}; /* 150 ms apart */
    double w;

    w = measure_stats_average_power_w(NULL, 0, 670.0, LIMIT_W, 0.0, why, sizeof why);
    CHECK(isnan(w) && strstr(why, "stepped 0 time(s) in the 670 ms") && strstr(why, "min_time_ms"), "none: %s", why);
    w = measure_stats_average_power_w(one, 1, 120.0, LIMIT_W, 0.0, why, sizeof why);
    CHECK(isnan(w) && strstr(why, "stepped 1 time(s)"), "one: %s", why);
    w = measure_stats_average_power_w(close, 2, 180.0, LIMIT_W, 0.0, why, sizeof why);
    CHECK(isnan(w) && strstr(why, "150 ms from the first step to the last"), "150 ms apart: %s", why);
}

static void test_power_limit_guard(void)
{
    char why[300];
    energy_step misread[2] = {{0.0, 1.0, 0}, {500.0, 501.0, 437500}}; /* 875 W: a misreading seen once */
    energy_step capped[2] = {{0.0, 1.0, 0}, {500.0, 501.0, 403000}};  /* 806 W: a board catching up with its cap */
    energy_step back[2] = {{0.0, 1.0, 9000}, {500.0, 501.0, 1000}};
    double w;

    w = measure_stats_average_power_w(misread, 2, 600.0, LIMIT_W, 0.0, why, sizeof why);
    CHECK(isnan(w) && strstr(why, "875 W") && strstr(why, "700 W") && !strstr(why, "read drawing"),
          "875 W over a 700 W limit: %s", why);
    w = measure_stats_average_power_w(capped, 2, 600.0, LIMIT_W, 0.0, why, sizeof why);
    CHECK(fabs(w - 806.0) < 1e-9, "806 W is within 20%% of 700 W: %g", w);
    /* the board was read drawing 820 W: 875 W is within 10% of that */
    w = measure_stats_average_power_w(misread, 2, 600.0, LIMIT_W, 820.0, why, sizeof why);
    CHECK(fabs(w - 875.0) < 1e-9, "875 W beside an 820 W reading: %g", w);
    /* read drawing 700 W at most: the limit's bound holds, and the reason names both */
    w = measure_stats_average_power_w(misread, 2, 600.0, LIMIT_W, 700.0, why, sizeof why);
    CHECK(isnan(w) && strstr(why, "limit of 700 W") && strstr(why, "read drawing (700 W)"), "both named: %s", why);
    /* no limit known: the instantaneous reads alone */
    w = measure_stats_average_power_w(capped, 2, 600.0, 0.0, 500.0, why, sizeof why);
    CHECK(isnan(w) && strstr(why, "806 W") && !strstr(why, "limit"), "over 550 W: %s", why);
    w = measure_stats_average_power_w(back, 2, 600.0, LIMIT_W, 0.0, why, sizeof why);
    CHECK(isnan(w) && strstr(why, "backwards"), "backwards: %s", why);
}

/* Nothing opened NVML in this process: the sampler says so instead of starting. */
static void test_sampler_without_nvml(void)
{
    const char *why = NULL;
    energy_sampler *s = energy_sampler_start(&why);
    CHECK(s == NULL && why && strstr(why, "NVML"), "no sampler without NVML: %s", why ? why : "(null)");
    energy_sampler_free(s);
}

int main(void)
{
    test_sampled_often();
    test_sampled_once_a_batch();
    test_exact_arithmetic();
    test_late_step_spread_by_the_fit();
    test_too_few_steps();
    test_power_limit_guard();
    test_sampler_without_nvml();
    return CHECK_DONE();
}
