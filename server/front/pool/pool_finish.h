/* pool_finish.h — the thread that ends finished runs: it stores each run's final record, runs
 * its hooks and hands the answer to its waiter, while the run's dispatcher (pool_dispatch.c)
 * goes on to its device's next job. Store writes then overlap the next exchange instead of
 * adding to it (docs/operations.md, "Throughput of small runs").
 */
#ifndef POOL_FINISH_H
#define POOL_FINISH_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "server/front/pool/queue.h"

/* Start the thread (pool_start, before the dispatchers). 0, or -1 with err filled. */
int pool_finish_start(char *err, size_t err_len);

/* Run j ended with its worker's result (taken over): ended as done by the thread, in the order
 * handed over. The caller gives j up. */
void pool_finish_done(pool_job *j, cJSON *result);

/* End every run handed over, then stop the thread (pool_stop, after the dispatchers ended). */
void pool_finish_stop(void);

#endif
