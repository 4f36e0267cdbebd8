/* pool_hooks.h — the functions the rest of the front hands the pool (pool.h): called at the
 * end of each run, and when a worker is lost. Apart from pool.h so that the pool's own
 * files can hold them without including the API they implement.
 */
#ifndef POOL_HOOKS_H
#define POOL_HOOKS_H

#include <cjson/cJSON.h>

#include "common/run_request.h"

/* Called after a worker was lost and before its replacement starts (not at shutdown), with
 * the device and its new generation (pool_device_generation): what the lost worker held is
 * gone. Set once, before pool_start; called without the pool's lock held. */
typedef void (*pool_restart_fn)(const char *device, int generation);

/* How a run ended, as its end hook sees it (pool_run). */
typedef enum pool_run_outcome {
    POOL_RUN_DONE,      /* the worker answered a result: stored "done" */
    POOL_RUN_FAILED,    /* it ran and broke, or an async run was refused after its 202: stored "failed" */
    POOL_RUN_CANCELLED, /* pool_cancel while it waited: stored "cancelled" */
    POOL_RUN_REFUSED    /* it never ran and no record is kept (a synchronous refusal, or refused before queueing) */
} pool_run_outcome;

/* The end hook of one run: what the front set up for the run before queueing it (resident
 * tensors: the inputs' pins, the budget reservation, the kept output's id) is completed or
 * released here, in one place for synchronous and async runs alike.
 *
 * Called exactly once per pool_run call, whatever the outcome (refusals before queueing
 * included), on the thread that ends the run, and before that end is visible: before the
 * final record is stored and before a synchronous caller wakes (so a kept output is
 * registered before anyone can read "done"). record: the final run record (the worker's
 * result merged in when done), NULL when the run was refused (POOL_RUN_REFUSED: no record is
 * kept); borrowed. generation: the worker generation (pool_device_generation) the run ran
 * on, -1 when it never reached a worker. It may be called with the pool's lock held (a
 * device that goes down refuses its queue under it): it must not call pool_* functions, and
 * must be quick. The stored hook (pool_run's on_stored) has this type and these rules too,
 * and is called once after the end hook, when the final record is stored (or the refused
 * run's row deleted): from then on GET /v1/runs/ID reads the end. */
typedef void (*pool_run_end_fn)(const run_request *r, pool_run_outcome outcome, const cJSON *record,
                                int generation);

/* Has the client of a waiting synchronous run gone away? 1 gone, 0 still there; must not
 * block. client: what the caller passed to pool_run_watched. */
typedef int (*pool_client_gone_fn)(const void *client);

#endif
