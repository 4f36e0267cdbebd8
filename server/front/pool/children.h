/* children.h — the front's worker processes: finding attnd-worker, the GPU probe
 * (`attnd-worker --probe`), starting a worker for one device and reading its hello, and
 * ending and reaping a child. Knows nothing of queues or jobs (queue.h, pool_dispatch.h).
 */
#ifndef CHILDREN_H
#define CHILDREN_H

#include <stddef.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#define CHILDREN_HELLO_LIMIT_MS 60000 /* CUDA context creation can take seconds; 60 s is generous */
#define CHILDREN_STOP_GRACE_MS 2000   /* SIGTERM, then SIGKILL after this */

/* Start workers from path instead of attnd-worker beside this executable. Before
 * children_find_worker. */
void children_set_worker_exe(const char *path);

/* The settings flags every worker is started with, after --device and --ipc-fd (the front's
 * own, so that workers load the same settings). argv must live until the pool stops. */
void children_set_worker_flags(int argc, char *const *argv);

/* Resolve the worker executable once, before any fork. 0, or -1 with err filled. */
int children_find_worker(char *err, size_t err_len);

/* The number of GPUs the probe found: 0 with why filled when none, or when the probe
 * crashed or hung (the front never initialises CUDA itself). */
int children_probe_gpus(char *why, size_t why_len);

/* Fork and exec the worker of device with the front's own flags, its socket as fd 3.
 * Returns the front's end of the socket with *pid set, or -1 with why filled. */
int children_start(const char *device, pid_t *pid, char *why, size_t why_len);

/* Wait for the hello of the child pid on sock: 0 with *device and *variants (caller
 * deletes; *variants may be NULL). -1 with why filled: the child is reaped (sock stays open,
 * the caller closes it). */
int children_await_hello(int sock, pid_t pid, cJSON **device, cJSON **variants, char *why, size_t why_len);

/* Wait up to grace_ms for pid to end (after sending sig when sig > 0), then SIGKILL it and
 * wait for good. Returns its wait status, or -1 when it could not be reaped. */
int children_reap(pid_t pid, int sig, int grace_ms);

/* How a child ended, for people: "crashed (signal 11, Segmentation fault)". */
void children_describe_status(int status, char *buf, size_t len);

#endif
