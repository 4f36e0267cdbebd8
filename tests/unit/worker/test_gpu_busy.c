/* test_gpu_busy.c — gpu_busy_us: a forward's GPU busy time as the union of its activities,
 * so a dependent launch that starts before the kernel it waits for ends, or two streams,
 * count the shared time once; serial kernels sum, gaps and empty records count nothing. */
#include <math.h>

#include "tests/unit/check.h"
#include "server/worker/gpu_busy.h"

static int near(double a, double b) { return fabs(a - b) < 1e-9; }

int main(void)
{
    /* Serial kernels with a gap: the sum of their lengths. */
    gpu_interval serial[] = {{1000, 3000}, {5000, 6000}};
    CHECK(near(gpu_busy_us(serial, 2), 3.0), "serial: 2 + 1 us");

    /* A split kernel, then its combine launched as a dependent while the split ends: the
     * combine's wait inside the split counts once (records arrive in any order). */
    gpu_interval dependent[] = {{350000, 354600}, {0, 352000}};
    CHECK(near(gpu_busy_us(dependent, 2), 354.6), "overlap counted once: %g", gpu_busy_us(dependent, 2));

    /* One interval inside another, one touching the run's end, one apart. */
    gpu_interval nested[] = {{0, 10000}, {2000, 3000}, {10000, 12000}, {20000, 21000}};
    CHECK(near(gpu_busy_us(nested, 4), 13.0), "nested and touching: %g", gpu_busy_us(nested, 4));

    /* Empty or reversed records (a clock read both ends alike) add nothing, nothing is zero. */
    gpu_interval odd[] = {{5000, 5000}, {9000, 8000}, {100, 1100}};
    CHECK(near(gpu_busy_us(odd, 3), 1.0), "empty and reversed: %g", gpu_busy_us(odd, 3));
    CHECK(gpu_busy_us(odd, 0) == 0.0, "no records: 0");

    /* Large timestamps (CUPTI's are ns since boot) keep their precision. */
    gpu_interval late[] = {{4000000000000000000ull, 4000000000000000250ull}};
    CHECK(near(gpu_busy_us(late, 1), 0.25), "late: %g", gpu_busy_us(late, 1));
    return CHECK_DONE();
}
