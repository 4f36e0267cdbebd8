/* batch_summary.h — the table `attnd batch` ends with (docs/plan.md): one line per point of
 * the plan's grid, its runs over the plan's repeats summed up (how many were done, the
 * median of their medians and the range), so that a repeated grid reads as one number per
 * point and its spread. */
#ifndef BATCH_SUMMARY_H
#define BATCH_SUMMARY_H

#include <stdio.h>

typedef struct batch_summary batch_summary;

/* An empty summary (NULL when out of memory); batch_summary_free frees it. */
batch_summary *batch_summary_new(void);
void batch_summary_free(batch_summary *s);

/* One run of the point labelled label (batch_plan_label): its median in µs when it was done
 * (< 0: it was not). */
void batch_summary_add(batch_summary *s, const char *label, double median_us);

/* The table, points in the order they first came, to out. */
void batch_summary_print(const batch_summary *s, FILE *out);

#endif
