/* host_threads.c — parked helper threads (kernels/cpu/host_threads.h).
 *
 * A call hands its job to the first n − 1 helpers by raising each one's ticket, runs fn on
 * the calling thread too, then waits until the last helper to finish says so. Waiting, on
 * either side, spins for HOST_THREADS_SPIN_S before it sleeps on a semaphore: the forwards
 * of a run follow each other within microseconds, and waking a sleeping thread costs tens
 * of them on a virtual machine (its idle core halted), measured as 10-15% of a 80-500 us
 * forward. Whoever goes to sleep says so first (`sleeping`), and whoever wakes it swaps
 * that flag back, so exactly one of them decides whether a semaphore post is owed.
 *
 * Helpers are started as calls first need them and live as long as the process; one call
 * runs at a time (call_lock), so the job's fields are written only while no helper reads
 * them.
 */
#include "kernels/cpu/host_threads.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#define HOST_THREADS_MAX_HELPERS 255
#define HOST_THREADS_SPIN_S 200e-6

/* One side of a handoff: a ticket that the other side raises, and how to wake this side
 * when it sleeps. */
typedef struct host_waiter {
    atomic_uint ticket;
    atomic_int sleeping;
    sem_t wake;
} host_waiter;

typedef struct host_helper {
    pthread_t thread;
    host_waiter waiter;
} host_helper;

static pthread_mutex_t call_lock = PTHREAD_MUTEX_INITIALIZER;
static host_helper helpers[HOST_THREADS_MAX_HELPERS];
static int helpers_started;
static host_waiter caller; /* the calling thread, waiting for the last helper */
static int caller_ready;

/* The call under way: set before its helpers' tickets are raised. */
static void (*job_fn)(void *);
static void *job_arg;
static atomic_int job_left; /* helpers of the call still running fn */
static atomic_int thread_limit; /* host_threads_set_limit's cap; 0: none */

static double host_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline void host_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int host_waiter_init(host_waiter *w)
{
    atomic_init(&w->ticket, 0);
    atomic_init(&w->sleeping, 0);
    return sem_init(&w->wake, 0, 0);
}

/* Wait until w's ticket is no longer `seen`: spin, then sleep. */
static void host_waiter_wait(host_waiter *w, unsigned seen)
{
    double give_up = host_now_s() + HOST_THREADS_SPIN_S;

    while (atomic_load(&w->ticket) == seen) {
        if (host_now_s() > give_up) {
            atomic_store(&w->sleeping, 1);
            /* Raised meanwhile, and the raiser did not see us asleep: no post is coming. */
            if (atomic_load(&w->ticket) != seen && atomic_exchange(&w->sleeping, 0) == 1) return;
            while (sem_wait(&w->wake) != 0 && errno == EINTR) {
            }
            return;
        }
        host_cpu_relax();
    }
}

/* Raise w's ticket; post its semaphore when it went to sleep. */
static void host_waiter_raise(host_waiter *w)
{
    atomic_fetch_add(&w->ticket, 1);
    if (atomic_exchange(&w->sleeping, 0) == 1) sem_post(&w->wake);
}

static void *host_helper_main(void *arg)
{
    host_helper *h = arg;
    unsigned seen = 0;

    for (;;) {
        host_waiter_wait(&h->waiter, seen);
        seen = atomic_load(&h->waiter.ticket);
        job_fn(job_arg);
        if (atomic_fetch_sub(&job_left, 1) == 1) host_waiter_raise(&caller);
    }
    return NULL;
}

int host_threads_cores(void)
{
    static atomic_int cores;
    int n = atomic_load(&cores);

    if (n > 0) return n;
    n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0) n = 1;
    atomic_store(&cores, n);
    return n;
}

void host_threads_set_limit(int n)
{
    atomic_store(&thread_limit, n > 0 ? n : 0);
}

/* n, or the limit when there is one below it. */
static int host_threads_capped(int n)
{
    int limit = atomic_load(&thread_limit);
    return limit > 0 && n > limit ? limit : n;
}

int host_threads_for_work(int wanted, double units, double min_units_per_thread)
{
    double deserved = min_units_per_thread > 0 ? units / min_units_per_thread : (double)wanted;
    int n = host_threads_capped(wanted > 0 ? wanted : host_threads_cores());

    if (deserved < (double)n) n = (int)deserved;
    return n >= 1 ? n : 1;
}

int host_threads_run(int n, void (*fn)(void *arg), void *arg)
{
    int want = host_threads_capped(n) - 1, i;
    unsigned seen;

    if (want <= 0) {
        fn(arg);
        return 1;
    }
    if (want > HOST_THREADS_MAX_HELPERS) want = HOST_THREADS_MAX_HELPERS;
    pthread_mutex_lock(&call_lock);
    if (!caller_ready) caller_ready = host_waiter_init(&caller) == 0;
    if (!caller_ready) want = 0;
    while (helpers_started < want) {
        host_helper *h = &helpers[helpers_started];
        if (host_waiter_init(&h->waiter) != 0) break;
        if (pthread_create(&h->thread, NULL, host_helper_main, h) != 0) {
            sem_destroy(&h->waiter.wake);
            break;
        }
        pthread_detach(h->thread);
        helpers_started++;
    }
    if (want > helpers_started) want = helpers_started; /* fewer helpers: the others share their work */
    job_fn = fn, job_arg = arg;
    atomic_store(&job_left, want);
    seen = atomic_load(&caller.ticket);
    for (i = 0; i < want; i++) host_waiter_raise(&helpers[i].waiter);
    fn(arg);
    if (want > 0) host_waiter_wait(&caller, seen);
    pthread_mutex_unlock(&call_lock);
    return want + 1;
}
