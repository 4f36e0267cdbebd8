/* batch_summary.c — the grid's points over the plan's repeats (batch_summary.h). A plan has
 * at most BATCH_PLAN_MAX_RUNS runs, so a linear search per run over the points is cheap. */
#include "server/front/batch/batch_summary.h"

#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

typedef struct summary_point {
    char *label;
    double *medians; /* of its done runs */
    int n, runs;
    size_t cap;
} summary_point;

struct batch_summary {
    summary_point *points;
    size_t n, cap;
};

batch_summary *batch_summary_new(void) { return calloc(1, sizeof(batch_summary)); }

void batch_summary_free(batch_summary *s)
{
    size_t i;

    if (!s) return;
    for (i = 0; i < s->n; i++) {
        free(s->points[i].label);
        free(s->points[i].medians);
    }
    free(s->points);
    free(s);
}

void batch_summary_add(batch_summary *s, const char *label, double median_us)
{
    summary_point *p;
    size_t i;

    if (!s) return;
    for (i = 0; i < s->n && strcmp(s->points[i].label, label); i++) continue;
    if (i == s->n) {
        if (grow_array(&s->points, &s->cap, s->n + 1, sizeof *s->points, 16) != 0) return;
        memset(&s->points[i], 0, sizeof s->points[i]);
        if (!(s->points[i].label = strdup(label))) return;
        s->n++;
    }
    p = &s->points[i];
    p->runs++;
    if (median_us < 0) return;
    if (grow_array(&p->medians, &p->cap, (size_t)p->n + 1, sizeof *p->medians, 8) != 0) return;
    p->medians[p->n++] = median_us;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void batch_summary_print(const batch_summary *s, FILE *out)
{
    size_t i, width = 5;

    if (!s || s->n == 0) return;
    for (i = 0; i < s->n; i++)
        if (strlen(s->points[i].label) > width) width = strlen(s->points[i].label);
    fprintf(out, "attnd batch: summary, one line per point of the grid: its done runs, the median of their medians "
                 "and their range\n");
    fprintf(out, "%-*s  %9s  %12s  %12s  %12s\n", (int)width, "point", "done", "median_us", "min_us", "max_us");
    for (i = 0; i < s->n; i++) {
        summary_point *p = &s->points[i];
        char done[24];
        snprintf(done, sizeof done, "%d/%d", p->n, p->runs);
        if (p->n == 0) {
            fprintf(out, "%-*s  %9s  %12s  %12s  %12s\n", (int)width, p->label, done, "-", "-", "-");
            continue;
        }
        qsort(p->medians, (size_t)p->n, sizeof *p->medians, cmp_double);
        fprintf(out, "%-*s  %9s  %12.4g  %12.4g  %12.4g\n", (int)width, p->label, done,
                p->n % 2 ? p->medians[p->n / 2] : 0.5 * (p->medians[p->n / 2 - 1] + p->medians[p->n / 2]),
                p->medians[0], p->medians[p->n - 1]);
    }
}
