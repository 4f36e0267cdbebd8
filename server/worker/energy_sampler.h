/* energy_sampler.h — NVML's energy counter (and, less often, the board's power), polled on a
 * thread of its own while timing.
 *
 * The counter steps about every 100 ms; a step read once a batch is timestamped up to a batch
 * late, which skews the power between two steps (docs/measurement.md, "Energy"). Polled every
 * ENERGY_SAMPLER_POLL_US, each step is timed to within about that. The thread makes no CUDA
 * call and sleeps between polls, so the GPU timing on the calling thread is left alone.
 */
#ifndef ENERGY_SAMPLER_H
#define ENERGY_SAMPLER_H

/* One NVML call costs ~10–50 µs: a 1 ms poll keeps the sampler under ~5% of one core. */
#define ENERGY_SAMPLER_POLL_US 1000
/* ~100 s of steps; past that the newest replaces the last (the estimate uses the ends). */
#define ENERGY_SAMPLER_MAX_STEPS 1024
/* The board's power is read every this many polls: across the whole window, where the
 * once-a-batch reads of a slow forward all fall near its start. */
#define ENERGY_SAMPLER_POWER_EVERY 20

/* One step of the counter: its new value and when it was first seen. It happened after the
 * poll before (before_ms) and by the poll that saw it (seen_ms); clock_monotonic_s in ms. */
typedef struct energy_step {
    double before_ms, seen_ms;
    unsigned long long mj;
} energy_step;

typedef struct energy_sampler energy_sampler;

/* Read the counter once and start polling it. Returns the sampler (the caller frees it with
 * energy_sampler_free), or NULL with *why (static text) when there is no counter or no thread. */
energy_sampler *energy_sampler_start(const char **why);

/* Stop polling and wait for the thread; idempotent. 0, or -1 with *why (static text) when a
 * read of the counter failed while polling. */
int energy_sampler_stop(energy_sampler *s, const char **why);

/* The steps seen, oldest first, owned by s: valid after energy_sampler_stop, until
 * energy_sampler_free. */
const energy_step *energy_sampler_steps(const energy_sampler *s, int *n);

/* The least and the most board power read while polling, in W; both 0 when none was read. */
void energy_sampler_power_w(const energy_sampler *s, double *min_w, double *max_w);

/* The same from NVML's instantaneous power field (clocks_power_instant_mw): what the board drew
 * at those moments, where the power above trails by up to a second. Both 0 when it has none. */
void energy_sampler_instant_power_w(const energy_sampler *s, double *min_w, double *max_w);

/* Stop (when still running) and free. NULL is a no-op. */
void energy_sampler_free(energy_sampler *s);

#endif
