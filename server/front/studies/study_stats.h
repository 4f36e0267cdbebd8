/* study_stats.h — the statistics of studies and comparisons (docs/api.md, Compare): order
 * statistics over a few numbers, Student's t quantile, and the Welch interval of a ratio of
 * two timings, each side summarized by a relative standard error and its degrees of freedom.
 * Pure functions of their arguments.
 */
#ifndef STUDY_STATS_H
#define STUDY_STATS_H

/* One side of a comparison: its central time and the relative standard error of it (the
 * standard error of its logarithm), with degrees of freedom (INFINITY: known). se is NAN
 * when it cannot be known (one sample and no noise floor). */
typedef struct stats_side {
    double center_us;
    double se;
    double df;
    int runs; /* how many runs it summarizes */
} stats_side;

/* Sort x[0..n) ascending. */
void stats_sort(double *x, int n);

/* The q-quantile (0 ≤ q ≤ 1) of sorted[0..n), n ≥ 1, by linear interpolation between
 * closest ranks (numpy's default, as a run's p10 and p90). */
double stats_percentile(const double *sorted, int n, double q);

/* Student's t quantile: the t with P(T ≤ t) = p for df degrees of freedom (df > 0; INFINITY
 * or very large: the normal quantile). 0 < p < 1. */
double stats_t_quantile(double p, double df);

/* The side of one run, from its record's median, p10, p90 and samples: the standard error of
 * a median, 1.2533 σ / √iters with σ = min(median − p10, p90 − median) / 1.2816 (robust to
 * the one long tail timings have), relative to the median, combined
 * with noise_floor (the run-to-run noise one run cannot show) in quadrature; df from
 * Welch–Satterthwaite (the floor counts as known). Fewer than 2 samples and no floor: se NAN.
 * 0, or -1 when median_us is not a positive number. */
int stats_side_of_run(double median_us, double p10_us, double p90_us, long long iters, double noise_floor,
                      stats_side *out);

/* The side of several runs of one configuration, from their medians (n ≥ 2): the median of
 * them, and the standard error of the mean of their logarithms (df = n − 1): the run-to-run
 * spread, measured. 0, or -1 when a median is not a positive number. */
int stats_side_of_runs(const double *medians_us, int n, stats_side *out);

/* run / base: the ratio of the centers, and its interval at `confidence` (0 < c < 1):
 * ratio · exp(± t · √(se_base² + se_run²)), t at the Welch–Satterthwaite degrees of freedom.
 * low and high NAN when an se is. significant: the interval leaves out 1. */
typedef struct stats_ratio {
    double ratio, low, high, df;
    int significant;
} stats_ratio;
void stats_compare(const stats_side *base, const stats_side *run, double confidence, stats_ratio *out);

#endif
