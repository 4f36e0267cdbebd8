/* pool_dispatch.h — each slot's dispatcher thread: it owns the slot's worker process (start,
 * hello, restart after a loss) and runs the slot's jobs one at a time over its socket: runs,
 * verifies of GPU outputs on the cpu worker, and resident-tensor exchanges.
 */
#ifndef POOL_DISPATCH_H
#define POOL_DISPATCH_H

#include "server/front/pool/pool_hooks.h"

/* The thread of one slot (a worker_slot *, queue.h); returns at pool_stop. */
void *pool_dispatch_thread(void *slot);

/* Called after a worker was lost, before its restart (pool_on_worker_restart). */
void pool_dispatch_on_restart(pool_restart_fn fn);

#endif
