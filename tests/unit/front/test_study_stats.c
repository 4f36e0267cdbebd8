/* test_study_stats.c — the statistics of studies and comparisons: percentiles as numpy takes
 * them, Student's t quantiles against their tables, and the Welch interval of a ratio (a
 * side of one run, of several runs, with and without the noise floor). */
#include <math.h>
#include <stdio.h>

#include "tests/unit/check.h"
#include "server/front/studies/study_stats.h"

static int near(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b); }

static void test_percentiles(void)
{
    double x[] = {5, 1, 4, 2, 3};
    stats_sort(x, 5);
    CHECK(x[0] == 1 && x[4] == 5, "sorted %g..%g", x[0], x[4]);
    CHECK(stats_percentile(x, 5, 0.5) == 3, "median %g", stats_percentile(x, 5, 0.5));
    CHECK(near(stats_percentile(x, 5, 0.1), 1.4, 1e-12), "p10 %g (numpy: 1.4)", stats_percentile(x, 5, 0.1));
    CHECK(near(stats_percentile(x, 5, 0.9), 4.6, 1e-12), "p90 %g (numpy: 4.6)", stats_percentile(x, 5, 0.9));
    CHECK(stats_percentile(x, 1, 0.9) == 1, "one value is every percentile");
    double even[] = {1, 2, 3, 4};
    CHECK(stats_percentile(even, 4, 0.5) == 2.5, "median of four: the mean of the middle two");
}

static void test_t_quantiles(void)
{
    /* two-sided 95%: the table's values */
    CHECK(near(stats_t_quantile(0.975, 1), 12.7062, 1e-4), "df 1: %g", stats_t_quantile(0.975, 1));
    CHECK(near(stats_t_quantile(0.975, 2), 4.3027, 1e-4), "df 2: %g", stats_t_quantile(0.975, 2));
    CHECK(near(stats_t_quantile(0.975, 10), 2.2281, 1e-4), "df 10: %g", stats_t_quantile(0.975, 10));
    CHECK(near(stats_t_quantile(0.975, 30), 2.0423, 1e-4), "df 30: %g", stats_t_quantile(0.975, 30));
    CHECK(near(stats_t_quantile(0.975, INFINITY), 1.95996, 1e-4), "normal: %g", stats_t_quantile(0.975, INFINITY));
    CHECK(near(stats_t_quantile(0.995, 5), 4.0321, 1e-4), "99%% df 5: %g", stats_t_quantile(0.995, 5));
    CHECK(near(stats_t_quantile(0.975, 2.5), 3.5747, 1e-4), "fractional df 2.5: %g", stats_t_quantile(0.975, 2.5));
    CHECK(near(stats_t_quantile(0.025, 10), -2.2281, 1e-4), "lower tail: %g", stats_t_quantile(0.025, 10));
}

static void test_sides_and_ratio(void)
{
    stats_side a, b, c;
    stats_ratio r;
    double same[] = {100, 101, 99}, slower[] = {200, 202, 198};

    /* one run: σ from the narrower half (median − p10 = 2.5632 → σ 2), se 1.2533·2/(100·√100) */
    CHECK(stats_side_of_run(100, 97.4369, 110, 100, 0, &a) == 0, "a side of one run");
    CHECK(near(a.se, 1.2533141 * 2.0 / (100 * 10), 1e-4), "se %g", a.se);
    CHECK(near(a.df, 99, 1e-9), "df %g (no floor: iters - 1)", a.df);
    CHECK(stats_side_of_run(100, 97.4369, 110, 100, 0.01, &a) == 0 && near(a.se, sqrt(0.0025066 * 0.0025066 + 1e-4), 1e-3),
          "the floor adds in quadrature: se %g", a.se);
    CHECK(a.df > 99, "a known floor raises the df: %g", a.df);
    CHECK(stats_side_of_run(100, 100, 100, 1, 0, &a) == 0 && isnan(a.se), "one sample and no floor: se unknown");
    CHECK(stats_side_of_run(0, 1, 2, 10, 0, &a) != 0, "a median of 0 is refused");

    /* several runs: the spread of their log medians */
    CHECK(stats_side_of_runs(same, 3, &b) == 0 && b.center_us == 100 && b.df == 2, "three runs: center %g df %g",
          b.center_us, b.df);
    CHECK(stats_side_of_runs(slower, 3, &c) == 0, "three more");
    stats_compare(&b, &c, 0.95, &r);
    CHECK(near(r.ratio, 2.0, 1e-12) && r.significant && r.low > 1.9 && r.high < 2.1, "2x: ratio %g [%g, %g]", r.ratio,
          r.low, r.high);
    stats_compare(&b, &b, 0.95, &r);
    CHECK(r.ratio == 1 && !r.significant && r.low < 1 && r.high > 1, "the same runs: no significant difference [%g, %g]",
          r.low, r.high);
    /* se of each ≈ 0.00577 (log sd 0.01 / √3), df 2 each → Welch df 4: t 2.776 */
    CHECK(near(r.df, 4, 1e-6), "Welch df %g", r.df);
    CHECK(near(log(r.high), 2.7764 * sqrt(2) * b.se, 1e-3), "half width %g", log(r.high));
    stats_side_of_run(100, 100, 100, 1, 0, &a);
    stats_compare(&a, &c, 0.95, &r);
    CHECK(isnan(r.low) && !r.significant, "an unknown se leaves the interval unknown");
}

int main(void)
{
    test_percentiles();
    test_t_quantiles();
    test_sides_and_ratio();
    return CHECK_DONE();
}
