/* gpu_busy.c — the union of a forward's GPU intervals (gpu_busy.h). */
#include "server/worker/gpu_busy.h"

#include <stdlib.h>

static int gpu_interval_cmp(const void *a, const void *b)
{
    const gpu_interval *x = a, *y = b;
    return (x->start_ns > y->start_ns) - (x->start_ns < y->start_ns);
}

double gpu_busy_us(gpu_interval *intervals, int n)
{
    uint64_t busy_ns = 0, run_start = 0, run_end = 0;
    int i, open = 0;

    qsort(intervals, (size_t)n, sizeof *intervals, gpu_interval_cmp);
    /* Sweep by start: extend the current run while the next interval begins inside it. */
    for (i = 0; i < n; i++) {
        const gpu_interval *iv = &intervals[i];
        if (iv->end_ns <= iv->start_ns) continue;
        if (open && iv->start_ns <= run_end) {
            if (iv->end_ns > run_end) run_end = iv->end_ns;
            continue;
        }
        if (open) busy_ns += run_end - run_start;
        run_start = iv->start_ns;
        run_end = iv->end_ns;
        open = 1;
    }
    if (open) busy_ns += run_end - run_start;
    return (double)busy_ns * 1e-3;
}
