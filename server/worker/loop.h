/* loop.h — the worker process (`attnd-worker --device DEVICE --ipc-fd N …settings flags`).
 *
 * Owns one device ("cpu" or "cuda:N"), says hello with its device object, then serves one
 * message at a time from the front (ipc.h) until the socket closes. Dies with its parent
 * (PR_SET_PDEATHSIG). A sticky CUDA error: answer "failed" with fatal=true, then exit 3.
 */
#ifndef WORKER_H
#define WORKER_H

#include "common/settings.h"

/* The worker process's main loop. Returns the process exit status. */
int worker_main(const settings *s, const char *device, int ipc_fd);

/* `attnd --probe`: print {"gpus":N} or {"gpus":0,"error":"why"} on stdout; exit status 0. */
int worker_probe_main(void);

#endif
