/* tensors.h — the resident tensors a worker holds (docs/tensors.md).
 *
 * The worker owns the bytes: device memory (cudaMalloc) on a cuda worker, host memory
 * (malloc) on the cpu worker. They live as long as the worker process: a worker that
 * restarts has none, and the front answers 410 for the ones it had. The front keeps the
 * metadata (id, name, shape, dtype) and checks the budget; the worker stores bytes by id.
 *
 * Its messages (tensor_put, tensor_stage, tensor_unstage, tensor_get, tensor_delete) are
 * described in common/proto.h. The files of this folder: tensors.c (the table and what runs
 * read of it), tensor_memory.c (the memory and the copies into it), tensor_upload.c and
 * tensor_download.c (the bytes in and out), tensor_messages.c (which file answers which message).
 */
#ifndef WORKER_TENSORS_H
#define WORKER_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common/api_error.h"
#include "common/proto.h"

/* Set once at worker start: on_gpu selects cudaMalloc/cudaMemcpy over malloc/memcpy. */
void worker_tensors_init(int on_gpu);

/* Handle one tensor_* message. Returns the reply members to add to "tensor_result" (caller
 * deletes) with *out_fd set for tensor_get; NULL with e filled on failure (4xx: refused,
 * nothing changed; 5xx: failed). */
cJSON *worker_tensors_handle(proto_type type, const cJSON *msg, int fd, int *out_fd, api_error *e);

/* The buffer of a resident tensor (device or host pointer as the worker is), NULL when
 * this worker has none by that id. *bytes its size. Stays owned by the table. */
void *worker_tensors_find(const char *id, size_t *bytes);

/* Keep ptr (allocated as this worker allocates: cudaMalloc or malloc) as tensor id; the
 * table owns it from now on. 0, or -1 (id taken or out of memory: ptr not taken). */
int worker_tensors_adopt(const char *id, void *ptr, size_t bytes);

/* The same for a tensor that lies in a private mapping of its upload (the cpu device keeps a
 * one-tensor upload where it landed): [map_base, + map_len) is unmapped with it, not freed. */
int worker_tensors_adopt_mapped(const char *id, void *ptr, size_t bytes, void *map_base, size_t map_len);

/* Free tensor id and forget it. 0, or -1 when there is none by that id. */
int worker_tensors_drop(const char *id);

/* The resident inputs a run names (r->q_tensor, …): *q, *k, *v point at them, or NULL
 * where the run generates that input. 0, or -1 with e: 410 when one is not on this worker,
 * 422 when its size is not the run's. */
struct run_request;
int worker_tensors_inputs(const struct run_request *r, const void **q, const void **k, const void **v, api_error *e);

/* Lengths a run takes from resident int32 tensors (`seqlens_q=t4`, RUN_SEQLENS_TENSOR): read
 * here, where the bytes are (a GPU worker copies them to the host), into r, and the serving
 * checks run over them
 * (run_request_resolve_serving). 0 (nothing to do, or done), or -1 with e: 410 when a tensor
 * is not on this worker, 400 when a length or their sum is out of range. */
int worker_tensors_lengths(struct run_request *r, api_error *e);

/* A paged run's uploaded block table (r->block_table_tensor; p the run's problem, its lengths
 * in p->seqs): *table points at its entries on the host and *width is its row length, once
 * every entry is a page of the cache ([0, num_pages)) and each row has the pages its
 * sequence's keys need; *resident is the tensor where kernels read it (device memory on a GPU
 * worker). On the cpu device both are the tensor; a GPU worker copies it to the host once,
 * into *host_copy, which the caller frees (NULL on the cpu device, and on a refusal). 0, or -1
 * with e: 410 gone, 422 shape_mismatch, 400 out_of_range naming the first entry outside the
 * cache. */
struct attn_problem;
int worker_tensors_block_table(const struct run_request *r, const struct attn_problem *p, const int32_t **table,
                               int64_t *width, const int32_t **resident, int32_t **host_copy, api_error *e);

/* After a successful run with r->keep_output: keep out (allocated the worker's way) as
 * r->output_tensor and add "tensor": id to the output object. 0 (out is the table's), or -1
 * with e (out stays the caller's). */
int worker_tensors_keep_output(const struct run_request *r, void *out, size_t bytes, cJSON *output, api_error *e);

/* Bytes free on this worker's device now (cudaMemGetInfo, or MemAvailable). */
double worker_tensors_free_bytes(void);

#endif
