/* batch.h — `attnd batch PLAN.json [--out FILE] [settings flags]`: run a plan of runs
 * (batch_plan.h, docs/plan.md) on this machine's devices with the server's workers,
 * measurement and store, without an HTTP listener; for CI jobs and batch schedulers.
 */
#ifndef BATCH_H
#define BATCH_H

/* The exit statuses of `attnd batch` (docs/plan.md). */
#define BATCH_EXIT_OK 0        /* every run done, no verify failed */
#define BATCH_EXIT_RUN_FAILED 1 /* a run failed, was refused or failed verify; the rest still ran */
#define BATCH_EXIT_USAGE 2     /* bad flags or a bad plan: nothing ran */

/* argv as main() got it, argv[1] being "batch". Writes one JSON record per run, one a line,
 * to stdout or --out; progress to stderr. SIGINT/SIGTERM: stops after the run in progress,
 * returns 128 + the signal. Returns the process's exit status. */
int batch_main(int argc, char **argv);

#endif
