/* test_host_threads.c — parked helper threads (kernels/cpu/host_threads.c): a call runs fn on
 * the caller and n − 1 helpers at the same time (each waits for all the others to arrive
 * before it leaves), calls reuse the same helpers instead of starting new ones, n ≤ 1 runs
 * on the caller alone, calls from two threads take turns without losing work, the thread
 * count a piece of work deserves, and the limit (a worker's cpu_threads) that caps them all. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/host_threads.h"
#include "tests/unit/check.h"

#define MAX_SEEN 64

typedef struct rendezvous {
    int n;                 /* threads expected */
    atomic_int arrived;    /* threads that have entered fn */
    atomic_int timed_out;  /* threads that gave up waiting for the others */
    atomic_long work_done; /* units of shared work done, by any thread */
    pthread_t seen[MAX_SEEN];
    atomic_int seen_count;
} rendezvous;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Records its thread, then waits (up to 5 s) until all n threads are inside at once. */
static void meet(void *arg)
{
    rendezvous *r = arg;
    int slot = atomic_fetch_add(&r->seen_count, 1);
    double give_up = now_s() + 5.0;

    if (slot < MAX_SEEN) r->seen[slot] = pthread_self();
    atomic_fetch_add(&r->arrived, 1);
    while (atomic_load(&r->arrived) < r->n)
        if (now_s() > give_up) {
            atomic_fetch_add(&r->timed_out, 1);
            return;
        } else {
            sched_yield(); /* more threads than cores: let the others arrive */
        }
}

/* Shares 10,000 units out by an atomic counter, as the reference shares its items. */
typedef struct shared_work {
    atomic_long next;
    atomic_long done;
} shared_work;

static void share(void *arg)
{
    shared_work *w = arg;
    while (atomic_fetch_add(&w->next, 1) < 10000) atomic_fetch_add(&w->done, 1);
}

static int distinct_threads(const rendezvous *r, pthread_t *all, int *count)
{
    int i, j, k = atomic_load(&r->seen_count) < MAX_SEEN ? atomic_load(&r->seen_count) : MAX_SEEN;
    for (i = 0; i < k; i++) {
        for (j = 0; j < *count && !pthread_equal(all[j], r->seen[i]); j++) {
        }
        if (j == *count && *count < MAX_SEEN) all[(*count)++] = r->seen[i];
    }
    return *count;
}

static void test_runs_at_once_and_reuses_helpers(void)
{
    pthread_t all[MAX_SEEN];
    int count = 0, call, ran_all = 1, met = 1;

    for (call = 0; call < 200; call++) {
        rendezvous r;
        memset(&r, 0, sizeof r);
        r.n = 4;
        ran_all &= host_threads_run(4, meet, &r) == 4;
        met &= atomic_load(&r.timed_out) == 0 && atomic_load(&r.seen_count) == 4;
        distinct_threads(&r, all, &count);
    }
    CHECK(ran_all, "every call ran on 4 threads");
    CHECK(met, "the 4 threads of each call were inside fn at the same time");
    CHECK(count == 4, "200 calls ran on the caller and the same 3 helpers (%d threads seen)", count);
}

static void test_one_thread_is_the_caller(void)
{
    rendezvous r;
    memset(&r, 0, sizeof r);
    r.n = 1;
    CHECK(host_threads_run(1, meet, &r) == 1, "n = 1 runs once");
    CHECK(atomic_load(&r.seen_count) == 1 && pthread_equal(r.seen[0], pthread_self()), "on the calling thread");
    memset(&r, 0, sizeof r);
    r.n = 1;
    CHECK(host_threads_run(0, meet, &r) == 1 && atomic_load(&r.seen_count) == 1, "n = 0 runs once too");
}

static void *caller(void *arg)
{
    int i, *bad = arg;
    for (i = 0; i < 300; i++) {
        shared_work w;
        atomic_init(&w.next, 0);
        atomic_init(&w.done, 0);
        host_threads_run(3, share, &w);
        if (atomic_load(&w.done) != 10000) (*bad)++;
    }
    return NULL;
}

static void test_callers_take_turns(void)
{
    pthread_t a, b;
    int bad_a = 0, bad_b = 0;

    CHECK(pthread_create(&a, NULL, caller, &bad_a) == 0 && pthread_create(&b, NULL, caller, &bad_b) == 0, "two callers");
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    CHECK(bad_a == 0 && bad_b == 0, "every call's work was done whole (%d and %d calls short)", bad_a, bad_b);
}

static void test_threads_for_work(void)
{
    int cores = host_threads_cores();

    CHECK(cores >= 1, "at least one core");
    CHECK(host_threads_for_work(8, 100.0, 1000.0) == 1, "little work: the caller alone");
    CHECK(host_threads_for_work(8, 3500.0, 1000.0) == 3, "3.5 threads' worth: 3");
    CHECK(host_threads_for_work(8, 1e9, 1000.0) == 8, "much work: all that were asked for");
    CHECK(host_threads_for_work(0, 1e9, 1000.0) == cores, "0 asks for one per core");
    CHECK(host_threads_for_work(-1, 0.0, 1000.0) == 1, "no work: still one");
}

static void test_limit_caps_every_call(void)
{
    rendezvous r;
    shared_work w;
    int cores = host_threads_cores();

    host_threads_set_limit(2);
    memset(&r, 0, sizeof r);
    r.n = 2;
    CHECK(host_threads_run(4, meet, &r) == 2, "a limit of 2: a call that asks for 4 runs on 2");
    CHECK(atomic_load(&r.seen_count) == 2 && atomic_load(&r.timed_out) == 0, "fn ran twice, at once (%d)",
          atomic_load(&r.seen_count));
    atomic_init(&w.next, 0);
    atomic_init(&w.done, 0);
    CHECK(host_threads_run(8, share, &w) == 2 && atomic_load(&w.done) == 10000, "its work done whole on 2");
    CHECK(host_threads_for_work(8, 1e9, 1000.0) == 2, "much work deserves the limit, not 8");
    CHECK(host_threads_for_work(0, 1e9, 1000.0) == (cores < 2 ? cores : 2), "one per core, capped");
    host_threads_set_limit(1);
    memset(&r, 0, sizeof r);
    r.n = 1;
    CHECK(host_threads_run(4, meet, &r) == 1 && pthread_equal(r.seen[0], pthread_self()), "a limit of 1: the caller alone");
    host_threads_set_limit(0);
    memset(&r, 0, sizeof r);
    r.n = 4;
    CHECK(host_threads_run(4, meet, &r) == 4 && atomic_load(&r.timed_out) == 0, "no limit: 4 again");
}

int main(void)
{
    test_runs_at_once_and_reuses_helpers();
    test_one_thread_is_the_caller();
    test_callers_take_turns();
    test_threads_for_work();
    test_limit_caps_every_call();
    return CHECK_DONE();
}
