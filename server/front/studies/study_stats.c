/* study_stats.c — order statistics, Student's t quantile and the Welch interval of a ratio
 * (study_stats.h). The t distribution's CDF is the regularized incomplete beta function,
 * evaluated by its continued fraction (Lentz's method); the quantile is found by bisection,
 * which is plenty for the few intervals a request asks for.
 */
#include "server/front/studies/study_stats.h"

#include <math.h>
#include <stdlib.h>

/* A normal sample's p90 lies 1.2816 σ above its median (p10 as far below); a median's
 * standard error is √(π/2) σ / √n. */
#define STATS_P90_SIGMAS 1.2815515655446004
#define STATS_MEDIAN_SE_FACTOR 1.2533141373155003
/* Above this many degrees of freedom t is the normal quantile to 4 digits and more. */
#define STATS_DF_NORMAL 1e7

static int stats_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void stats_sort(double *x, int n)
{
    if (n > 1) qsort(x, (size_t)n, sizeof *x, stats_cmp);
}

double stats_percentile(const double *sorted, int n, double q)
{
    double pos, frac;
    int lo;

    if (n <= 0) return NAN;
    if (n == 1 || q <= 0) return sorted[0];
    if (q >= 1) return sorted[n - 1];
    pos = q * (n - 1);
    lo = (int)floor(pos);
    frac = pos - lo;
    return lo + 1 < n ? sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]) : sorted[lo];
}

/* The continued fraction of the incomplete beta function (modified Lentz). */
static double stats_beta_cf(double a, double b, double x)
{
    const double tiny = 1e-300;
    double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0), h;
    int m;

    if (fabs(d) < tiny) d = tiny;
    d = 1.0 / d;
    h = d;
    for (m = 1; m <= 500; m++) {
        double m2 = 2.0 * m, num, delta;
        num = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
        d = 1.0 + num * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1.0 + num / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        h *= d * c;
        num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
        d = 1.0 + num * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1.0 + num / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        delta = d * c;
        h *= delta;
        if (fabs(delta - 1.0) < 1e-15) break;
    }
    return h;
}

/* The regularized incomplete beta function I_x(a, b). */
static double stats_beta_inc(double a, double b, double x)
{
    double front;

    if (x <= 0) return 0;
    if (x >= 1) return 1;
    front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x));
    if (x < (a + 1.0) / (a + b + 2.0)) return front * stats_beta_cf(a, b, x) / a;
    return 1.0 - front * stats_beta_cf(b, a, 1.0 - x) / b;
}

/* P(T ≤ t) for Student's t with df degrees of freedom (the normal CDF past STATS_DF_NORMAL). */
static double stats_t_cdf(double t, double df)
{
    double tail;

    if (!(df < STATS_DF_NORMAL)) return 0.5 * erfc(-t / sqrt(2.0));
    tail = 0.5 * stats_beta_inc(df / 2.0, 0.5, df / (df + t * t));
    return t > 0 ? 1.0 - tail : tail;
}

double stats_t_quantile(double p, double df)
{
    double lo = 0, hi = 1, mid;
    int i;

    if (!(p > 0 && p < 1) || !(df > 0)) return NAN;
    if (p < 0.5) return -stats_t_quantile(1.0 - p, df);
    while (stats_t_cdf(hi, df) < p && hi < 1e12) hi *= 2;
    for (i = 0; i < 200; i++) {
        mid = 0.5 * (lo + hi);
        if (stats_t_cdf(mid, df) < p)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

int stats_side_of_run(double median_us, double p10_us, double p90_us, long long iters, double noise_floor,
                      stats_side *out)
{
    double sigma, within, within_sq, floor_sq;

    if (!(median_us > 0)) return -1;
    out->center_us = median_us;
    out->runs = 1;
    floor_sq = noise_floor > 0 ? noise_floor * noise_floor : 0;
    if (iters < 2 || !isfinite(p10_us) || !isfinite(p90_us)) {
        /* One sample says nothing of its own noise: only a floor can stand for it. */
        out->se = floor_sq > 0 ? noise_floor : NAN;
        out->df = INFINITY;
        return 0;
    }
    /* σ from the narrower half of p10..p90: timings have one long tail (a preemption, a clock
     * dip) that would widen the other half, and stdev more, while a median's error depends
     * on how densely the samples lie around it. */
    sigma = (median_us - p10_us < p90_us - median_us ? median_us - p10_us : p90_us - median_us) / STATS_P90_SIGMAS;
    within = STATS_MEDIAN_SE_FACTOR * (sigma > 0 ? sigma : 0) / (median_us * sqrt((double)iters));
    within_sq = within * within;
    out->se = sqrt(within_sq + floor_sq);
    /* Welch–Satterthwaite with the floor as a known variance: only the samples' part has a
     * finite df (iters − 1). */
    out->df = within_sq > 0 ? (within_sq + floor_sq) * (within_sq + floor_sq) / (within_sq * within_sq / (iters - 1))
                            : INFINITY;
    return 0;
}

int stats_side_of_runs(const double *medians_us, int n, stats_side *out)
{
    double sorted[1024], mean = 0, ss = 0;
    int i;

    if (n < 2 || n > (int)(sizeof sorted / sizeof sorted[0])) return -1;
    for (i = 0; i < n; i++) {
        if (!(medians_us[i] > 0)) return -1;
        sorted[i] = medians_us[i];
        mean += log(medians_us[i]);
    }
    mean /= n;
    for (i = 0; i < n; i++) ss += (log(medians_us[i]) - mean) * (log(medians_us[i]) - mean);
    stats_sort(sorted, n);
    out->center_us = stats_percentile(sorted, n, 0.5);
    out->se = sqrt(ss / (n - 1) / n);
    out->df = n - 1;
    out->runs = n;
    return 0;
}

void stats_compare(const stats_side *base, const stats_side *run, double confidence, stats_ratio *out)
{
    double var_b = base->se * base->se, var_r = run->se * run->se, var = var_b + var_r, denom = 0, t;

    out->ratio = run->center_us / base->center_us;
    out->low = out->high = out->df = NAN;
    out->significant = 0;
    if (!isfinite(var)) return;
    if (isfinite(base->df)) denom += var_b * var_b / base->df;
    if (isfinite(run->df)) denom += var_r * var_r / run->df;
    out->df = denom > 0 ? var * var / denom : INFINITY;
    t = stats_t_quantile(0.5 + confidence / 2.0, out->df);
    out->low = out->ratio * exp(-t * sqrt(var));
    out->high = out->ratio * exp(t * sqrt(var));
    out->significant = out->low > 1.0 || out->high < 1.0;
}
