/* gpu_busy.h — how long a forward kept the GPU busy: the length of the union of its GPU
 * activities' [start, end) intervals. Activities that overlap (a programmatic dependent launch
 * scheduled while the kernel before it finishes, work on two streams) count once where they
 * overlap, so the total stays a lower bound of the forward's time. Pure C: unit-tested anywhere.
 */
#ifndef GPU_BUSY_H
#define GPU_BUSY_H

#include <stdint.h>

typedef struct gpu_interval {
    uint64_t start_ns, end_ns;
} gpu_interval;

/* Microseconds covered by at least one of the n intervals; sorts them by start in place.
 * An interval whose end is not after its start covers nothing. */
double gpu_busy_us(gpu_interval *intervals, int n);

#endif
