/* host_threads.h — run one function on several host threads at once, with helper threads
 * that are started once and parked between calls (the cpu reference's parallel forwards).
 *
 * Starting a thread costs tens of microseconds; a tiny forward costs less than that, and
 * a run makes one forward per iteration. Parked helpers are woken instead (a semaphore
 * post each), and calls that have little work use fewer threads (host_threads_for_work).
 */
#ifndef ATTND_HOST_THREADS_H
#define ATTND_HOST_THREADS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The host's online cores, read once (sysconf reads /sys each time). At least 1. */
int host_threads_cores(void);

/* How many of at most `wanted` threads (≤ 0: one per core), and of the limit, work of `units`
 * deserves, when each thread should get at least `min_units_per_thread`: at least 1. */
int host_threads_for_work(int wanted, double units, double min_units_per_thread);

/* Every later call runs on at most n threads (n ≤ 0: no cap but what callers ask): a worker's
 * cpu_threads setting, which the reference, the fingerprints and the download's fills all keep. */
void host_threads_set_limit(int n);

/* fn(arg) on n threads at once: the caller's and n − 1 helpers. Returns once every one of
 * them has returned; the number of threads that ran it (fewer than n when helpers could
 * not be started: fn must share its work out, e.g. by an atomic counter). Calls from
 * several threads take turns, so fn must not call host_threads_run itself. */
int host_threads_run(int n, void (*fn)(void *arg), void *arg);

#ifdef __cplusplus
}
#endif
#endif
