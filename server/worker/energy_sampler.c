/* energy_sampler.c — a thread that polls NVML's energy counter while timing (energy_sampler.h).
 *
 * Each poll reads the counter (clocks_energy_mj) and, when the value moved, records a step
 * with the times of this poll and the one before; every ENERGY_SAMPLER_POWER_EVERY polls it
 * also reads the board's power, NVML's one-second average and its instantaneous reading.
 * Polls are paced on absolute CLOCK_MONOTONIC deadlines; a thread more than a poll behind them
 * (held off the CPU) starts again from now rather than catching up in a burst. What polling
 * cost is logged at debug level when it stops.
 */
#include "server/worker/energy_sampler.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/worker/clocks.h"

/* The least and the most of a power read while polling, in W; 0 until a reading above 0. */
typedef struct watt_range {
    double min_w, max_w;
} watt_range;

static void watt_range_add(watt_range *r, double w)
{
    if (w > 0.0 && (r->min_w == 0.0 || w < r->min_w)) r->min_w = w;
    if (w > r->max_w) r->max_w = w;
}

struct energy_sampler {
    pthread_t thread;
    int running;          /* the thread was started and not yet joined (calling thread only) */
    atomic_int stop;      /* set by the calling thread, read by the sampler */
    pthread_mutex_t mu;   /* with stop_cv: the sampler's sleep between polls, cut short by a stop */
    pthread_cond_t stop_cv;
    const char *why;      /* a failed read while polling; written by the sampler before it exits */
    unsigned long long last_mj;
    double last_poll_ms;  /* when the last read returned */
    energy_step steps[ENERGY_SAMPLER_MAX_STEPS];
    int nsteps, steps_seen; /* held, and seen in all */
    watt_range power;   /* NVML's power reading, a one-second average */
    watt_range instant; /* NVML's instantaneous power field; 0 when it has none */
    /* What polling costs: reads, the time spent inside NVML, and the widest gap between polls. */
    long polls;
    double read_ms, widest_gap_ms, first_poll_ms;
};

static double energy_sampler_now_ms(void) { return clock_monotonic_s() * 1e3; }

static void energy_sampler_add_ns(struct timespec *t, long ns)
{
    t->tv_nsec += ns;
    while (t->tv_nsec >= 1000000000L) t->tv_nsec -= 1000000000L, t->tv_sec++;
}

/* One read of the counter; a step is recorded when the value moved. 0, or -1 on a failed read. */
static int energy_sampler_poll(energy_sampler *s)
{
    unsigned long long mj;
    double t0 = energy_sampler_now_ms(), t1;
    if (clocks_energy_mj(&mj, &s->why) != 0) return -1;
    t1 = energy_sampler_now_ms();
    s->polls++;
    s->read_ms += t1 - t0;
    if (t1 - s->last_poll_ms > s->widest_gap_ms) s->widest_gap_ms = t1 - s->last_poll_ms;
    if (mj != s->last_mj) {
        int slot = s->nsteps < ENERGY_SAMPLER_MAX_STEPS ? s->nsteps++ : ENERGY_SAMPLER_MAX_STEPS - 1;
        s->steps[slot].before_ms = s->last_poll_ms;
        s->steps[slot].seen_ms = t1;
        s->steps[slot].mj = mj;
        s->steps_seen++;
        s->last_mj = mj;
    }
    s->last_poll_ms = t1;
    if (s->polls % ENERGY_SAMPLER_POWER_EVERY == 0) {
        watt_range_add(&s->power, clocks_power_mw() * 1e-3);
        watt_range_add(&s->instant, clocks_power_instant_mw() * 1e-3);
    }
    return 0;
}

/* The sleep's mutex and condition variable, timed on CLOCK_MONOTONIC as the polls are. */
static int energy_sampler_sync_init(energy_sampler *s)
{
    pthread_condattr_t attr;
    int rc;

    if (pthread_condattr_init(&attr) != 0) return -1;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(&s->stop_cv, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0) return -1;
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        pthread_cond_destroy(&s->stop_cv);
        return -1;
    }
    return 0;
}

static void energy_sampler_sync_destroy(energy_sampler *s)
{
    pthread_cond_destroy(&s->stop_cv);
    pthread_mutex_destroy(&s->mu);
}

static void *energy_sampler_main(void *arg)
{
    energy_sampler *s = arg;
    struct timespec next, now;
    sigset_t all;
    sigfillset(&all); /* signals are the main thread's business */
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
        energy_sampler_add_ns(&next, ENERGY_SAMPLER_POLL_US * 1000L);
        /* Asleep until the next poll or a stop, whichever comes first: a stop does not wait
         * out the poll (up to ENERGY_SAMPLER_POLL_US on every run's path). */
        pthread_mutex_lock(&s->mu);
        while (!atomic_load_explicit(&s->stop, memory_order_relaxed) &&
               pthread_cond_timedwait(&s->stop_cv, &s->mu, &next) != ETIMEDOUT) {
        }
        pthread_mutex_unlock(&s->mu);
        if (atomic_load_explicit(&s->stop, memory_order_relaxed)) break;
        if (energy_sampler_poll(s) != 0) break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - next.tv_sec) * 1000000000L + (now.tv_nsec - next.tv_nsec) > ENERGY_SAMPLER_POLL_US * 1000L)
            next = now; /* a whole poll behind: start again from now */
    }
    return NULL;
}

energy_sampler *energy_sampler_start(const char **why)
{
    energy_sampler *s = calloc(1, sizeof *s);
    if (!s) return *why = "out of memory for the energy sampler", NULL;
    if (clocks_energy_mj(&s->last_mj, why) != 0) return free(s), NULL;
    s->last_poll_ms = s->first_poll_ms = energy_sampler_now_ms();
    atomic_init(&s->stop, 0);
    if (energy_sampler_sync_init(s) != 0) {
        free(s);
        return *why = "could not make the energy sampler's condition variable", NULL;
    }
    if (pthread_create(&s->thread, NULL, energy_sampler_main, s) != 0) {
        energy_sampler_sync_destroy(s);
        free(s);
        return *why = "could not start the energy sampler thread", NULL;
    }
    s->running = 1;
    return s;
}

int energy_sampler_stop(energy_sampler *s, const char **why)
{
    if (s->running) {
        pthread_mutex_lock(&s->mu);
        atomic_store_explicit(&s->stop, 1, memory_order_relaxed);
        pthread_cond_signal(&s->stop_cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL); /* the join orders the sampler's writes before our reads */
        s->running = 0;
        log_debug("energy sampler: %ld polls over %.0f ms, %.1f us a read, widest gap %.2f ms, %d steps",
                  s->polls, s->last_poll_ms - s->first_poll_ms, s->polls ? s->read_ms * 1e3 / s->polls : 0.0,
                  s->widest_gap_ms, s->steps_seen);
    }
    if (s->why) return *why = s->why, -1;
    return 0;
}

const energy_step *energy_sampler_steps(const energy_sampler *s, int *n)
{
    *n = s->nsteps;
    return s->steps;
}

void energy_sampler_power_w(const energy_sampler *s, double *min_w, double *max_w)
{
    *min_w = s->power.min_w;
    *max_w = s->power.max_w;
}

void energy_sampler_instant_power_w(const energy_sampler *s, double *min_w, double *max_w)
{
    *min_w = s->instant.min_w;
    *max_w = s->instant.max_w;
}

void energy_sampler_free(energy_sampler *s)
{
    const char *why;
    if (!s) return;
    (void)energy_sampler_stop(s, &why);
    energy_sampler_sync_destroy(s);
    free(s);
}
