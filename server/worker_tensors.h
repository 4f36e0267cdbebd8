/* worker_tensors.h — the resident tensors a worker holds (docs/tensors.md).
 *
 * The worker owns the bytes: device memory (cudaMalloc) on a cuda worker, host memory
 * (malloc) on the cpu worker. They live as long as the worker process: a worker that
 * restarts has none, and the front answers 410 for the ones it had. The front keeps the
 * metadata (id, name, shape, dtype) and checks the budget; the worker stores bytes by id.
 *
 * Messages (ipc.h), all answered {"type":"tensor_result","job":J,…} or an error/failed:
 *   {"type":"tensor_put","job":J,"budget":B,"tensors":[{"id","offset","bytes"}]} + memfd
 *       copies each span of the memfd into a new buffer; answers "tensors":[{"id",
 *       "fingerprint"}], "copy_s" and "fingerprint_s" (seconds the worker spent mapping,
 *       allocating and copying, and fingerprinting). All or nothing: on any failure what
 *       this message allocated is freed. 507 when the bytes exceed the device's free memory
 *       (budget 0) before allocating.
 *   {"type":"tensor_get","job":J,"id":ID,"npy_shape":[…],"npy_dtype":D}
 *       answers "bytes":N + a memfd holding the tensor (after an npy header when npy_shape
 *       and npy_dtype are given), and "fill_s" (seconds spent making and filling it).
 *   {"type":"tensor_get",…,"progress_offset":P} + memfd   (a streamed download)
 *       fills the front's memfd instead (N bytes from offset 0; it must be at least P +
 *       sizeof(tensor_download_progress) long, P page-aligned and ≥ N), publishing its
 *       progress in the tensor_download_progress at P as it goes (below), so the front can
 *       send what is filled while the rest is written. Answers "bytes" and "fill_s", no fd;
 *       499 `cancelled` when the front set "cancel" (its client went away).
 *   {"type":"tensor_delete","job":J,"id":ID}
 * Unknown ids answer 410 (the front knew it, so this worker must have restarted).
 */
#ifndef WORKER_TENSORS_H
#define WORKER_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "api_error.h"

/* The progress of a streamed download, shared by the front and the worker through a page
 * of the download's memfd past its body (both map it MAP_SHARED). Read and written with
 * __atomic builtins: the worker stores "filled" with release order after each piece is in
 * the memfd, so a reader that loads it with acquire order may pread [0, filled). */
typedef struct tensor_download_progress {
    uint64_t filled;  /* worker: bytes [0, filled) of the body are in the memfd */
    uint64_t total;   /* worker: the body's size, N (set before state becomes STARTED) */
    uint32_t state;   /* worker: TENSOR_DOWNLOAD_* (0 until the worker starts) */
    uint32_t cancel;  /* front: nobody will read the rest (the client went away): stop */
} tensor_download_progress;

enum { TENSOR_DOWNLOAD_WAITING = 0, TENSOR_DOWNLOAD_STARTED = 1, TENSOR_DOWNLOAD_DONE = 2, TENSOR_DOWNLOAD_FAILED = 3 };

/* Set once at worker start: on_gpu selects cudaMalloc/cudaMemcpy over malloc/memcpy. */
void worker_tensors_init(int on_gpu);

/* Handle one tensor_* message. Returns the reply members to add to "tensor_result" (caller
 * deletes) with *out_fd set for tensor_get; NULL with e filled on failure (4xx: refused,
 * nothing changed; 5xx: failed). */
cJSON *worker_tensors_handle(const char *type, const cJSON *msg, int fd, int *out_fd, api_error *e);

/* The buffer of a resident tensor (device or host pointer as the worker is), NULL when
 * this worker has none by that id. *bytes its size. Stays owned by the table. */
void *worker_tensors_find(const char *id, size_t *bytes);

/* Keep ptr (allocated as this worker allocates: cudaMalloc or malloc) as tensor id; the
 * table owns it from now on. 0, or -1 (id taken or out of memory: ptr not taken). */
int worker_tensors_adopt(const char *id, void *ptr, size_t bytes);

/* The resident inputs a run names (r->q_tensor, …): *q, *k, *v point at them, or NULL
 * where the run generates that input. 0, or -1 with e: 410 when one is not on this worker,
 * 422 when its size is not the run's. */
struct run_request;
int worker_tensors_inputs(const struct run_request *r, const void **q, const void **k, const void **v, api_error *e);

/* After a successful run with r->keep_output: keep out (allocated the worker's way) as
 * r->output_tensor and add "tensor": id to the output object. 0 (out is the table's), or -1
 * with e (out stays the caller's). */
int worker_tensors_keep_output(const struct run_request *r, void *out, size_t bytes, cJSON *output, api_error *e);

/* Bytes free on this worker's device now (cudaMemGetInfo, or MemAvailable). */
double worker_tensors_free_bytes(void);

#endif
