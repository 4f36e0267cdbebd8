/* tensors.c — the worker's resident tensors and what runs read of them (tensors.h).
 *
 * A small array of {id, pointer, bytes}, grown as needed (no fixed size to overflow: the
 * front bounds how many tensors there are, max_tensors, before it sends a tensor_put); a
 * worker holds tens of tensors, not thousands, and one thread (the worker's loop) touches
 * it, so there is no lock.
 */
#include "server/worker/tensors/tensors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda_runtime_api.h>

#include "common/grow.h"
#include "common/run_request.h"
#include "server/worker/tensors/tensor_memory.h"

typedef struct wt_entry {
    char id[32];
    void *ptr;
    size_t bytes;
    void *map_base; /* the tensor lives in a private mapping of its upload's memfd (cpu device): unmapped, not freed */
    size_t map_len;
} wt_entry;

static wt_entry *wt_table;
static int wt_count;
static size_t wt_cap;

void worker_tensors_init(int on_gpu) { tensor_mem_init(on_gpu); }

double worker_tensors_free_bytes(void) { return tensor_mem_free_bytes(); }

static int wt_index(const char *id)
{
    int i;
    for (i = 0; i < wt_count; i++)
        if (strcmp(wt_table[i].id, id) == 0) return i;
    return -1;
}

void *worker_tensors_find(const char *id, size_t *bytes)
{
    int i = id ? wt_index(id) : -1;
    if (i < 0) return NULL;
    if (bytes) *bytes = wt_table[i].bytes;
    return wt_table[i].ptr;
}

int worker_tensors_adopt_mapped(const char *id, void *ptr, size_t bytes, void *map_base, size_t map_len)
{
    if (!id || strlen(id) >= sizeof wt_table[0].id || wt_index(id) >= 0) return -1;
    if (grow_array(&wt_table, &wt_cap, (size_t)wt_count + 1, sizeof *wt_table, 16) != 0) return -1;
    memset(&wt_table[wt_count], 0, sizeof wt_table[0]);
    snprintf(wt_table[wt_count].id, sizeof wt_table[0].id, "%s", id);
    wt_table[wt_count].ptr = ptr;
    wt_table[wt_count].bytes = bytes;
    wt_table[wt_count].map_base = map_base, wt_table[wt_count].map_len = map_len;
    wt_count++;
    return 0;
}

int worker_tensors_adopt(const char *id, void *ptr, size_t bytes)
{
    return worker_tensors_adopt_mapped(id, ptr, bytes, NULL, 0);
}

int worker_tensors_drop(const char *id)
{
    int i = id ? wt_index(id) : -1;

    if (i < 0) return -1;
    if (wt_table[i].map_base) munmap(wt_table[i].map_base, wt_table[i].map_len);
    else tensor_mem_release(wt_table[i].ptr);
    wt_table[i] = wt_table[--wt_count];
    return 0;
}

/* ---------------------------------------------------------------- runs ------------------ */

int worker_tensors_inputs(const run_request *r, const void **q, const void **k, const void **v, api_error *e)
{
    const attn_problem *p = &r->problem;
    size_t esz = attn_dtype_bytes(p->dtype);
    const char *ids[3] = {r->q_tensor, r->k_tensor, r->v_tensor}, *names[3] = {"q", "k", "v"};
    size_t want[3];
    const void **out[3] = {q, k, v};
    int i;

    want[0] = (size_t)attn_q_elems(p) * esz;
    want[1] = (size_t)attn_k_elems(p) * esz;
    want[2] = (size_t)attn_v_elems(p) * esz;
    for (i = 0; i < 3; i++) {
        size_t bytes = 0;
        *out[i] = NULL;
        if (!ids[i][0]) continue;
        *out[i] = worker_tensors_find(ids[i], &bytes);
        if (!*out[i])
            return api_fail(e, 410, "gone", names[i], "tensor %s (%s) is no longer on this worker (it restarted)", ids[i],
                            names[i]);
        if (bytes != want[i])
            return api_fail(e, 422, "shape_mismatch", names[i], "tensor %s (%s) has %zu bytes; the run needs %zu", ids[i],
                            names[i], bytes, want[i]);
    }
    return 0;
}

/* A resident int32 tensor's first n entries on the host: the tensor itself on the cpu device,
 * else copied from the device into *copy (freed by the caller; NULL on the cpu device). Small
 * next to K/V (lengths, a block table): copied once per run. 0, or -1 with e (500). */
static int wt_host_int32(const int32_t *t, int64_t n, int32_t **copy, const int32_t **host, api_error *e)
{
    size_t bytes = (size_t)(n > 0 ? n : 0) * sizeof *t;
    cudaError_t ce;

    *copy = NULL, *host = t;
    if (!tensor_mem_on_gpu()) return 0;
    *copy = malloc(bytes ? bytes : 1);
    if (!*copy) return api_fail(e, 500, "internal", "", "out of memory copying %zu bytes of an int32 tensor", bytes);
    ce = bytes ? cudaMemcpy(*copy, t, bytes, cudaMemcpyDeviceToHost) : cudaSuccess;
    if (ce != cudaSuccess) {
        free(*copy);
        *copy = NULL;
        return tensor_mem_cuda_failed(ce, "copying an int32 tensor to the host", bytes, e);
    }
    *host = *copy;
    return 0;
}

int worker_tensors_lengths(run_request *r, api_error *e)
{
    run_seqlens *sides[2] = {&r->seqlens_q, &r->seqlens_kv};
    const char *names[2] = {"seqlens_q", "seqlens_kv"};
    int i;

    if (!run_request_lengths_pending(r)) return 0;
    for (i = 0; i < 2; i++) {
        size_t bytes = 0;
        const int32_t *len, *host;
        int32_t *copy;
        int64_t n;
        int rc;
        if (sides[i]->kind != RUN_SEQLENS_TENSOR) continue;
        len = worker_tensors_find(sides[i]->tensor, &bytes);
        if (!len)
            return api_fail(e, 410, "gone", names[i], "tensor %s (%s) is no longer on this worker (it restarted)",
                            sides[i]->tensor, names[i]);
        /* Lengths are planned on the host: a GPU worker's are copied (no more than a batch holds;
         * a longer tensor is refused by its count before any entry is read). */
        n = (int64_t)(bytes / sizeof *len);
        if (wt_host_int32(len, n <= RUN_MAX_SEQS ? n : 0, &copy, &host, e) != 0) return -1;
        rc = run_request_tensor_lengths(r, sides[i], host, n, e);
        free(copy);
        if (rc != 0) return -1;
    }
    return run_request_resolve_serving(r, e);
}

int worker_tensors_block_table(const run_request *r, const attn_problem *p, const int32_t **table, int64_t *width,
                               const int32_t **resident, int32_t **host_copy, api_error *e)
{
    size_t bytes = 0;
    const int32_t *d = worker_tensors_find(r->block_table_tensor, &bytes), *t;
    int64_t n, w, b, j;

    *table = NULL, *width = 0, *resident = NULL, *host_copy = NULL;
    if (!d)
        return api_fail(e, 410, "gone", "block_table", "tensor %s (block_table) is no longer on this worker (it "
                        "restarted)", r->block_table_tensor);
    n = (int64_t)(bytes / sizeof *d);
    if (wt_host_int32(d, n, host_copy, &t, e) != 0) return -1; /* checked and planned on the host */
    w = n / p->batch;
    if (bytes % sizeof *t || n % p->batch || w < (p->seq_kv + p->page_size - 1) / p->page_size) {
        api_fail(e, 422, "shape_mismatch", "block_table", "block_table (tensor %s) has %zu bytes; batch %lld rows of "
                 "at least %lld int32 pages are needed", r->block_table_tensor, bytes, (long long)p->batch,
                 (long long)((p->seq_kv + p->page_size - 1) / p->page_size));
        goto refused;
    }
    /* Every entry, used or not: a kernel that reads a whole row stays inside the cache. */
    for (b = 0; b < p->batch; b++)
        for (j = 0; j < w; j++)
            if (t[b * w + j] < 0 || t[b * w + j] >= p->num_pages) {
                api_fail(e, 400, "out_of_range", "block_table", "block_table (tensor %s) [%lld][%lld] is %d, outside "
                         "the cache's pages 0..%lld", r->block_table_tensor, (long long)b, (long long)j,
                         (int)t[b * w + j], (long long)p->num_pages - 1);
                goto refused;
            }
    *table = t, *width = w, *resident = d;
    return 0;
refused:
    free(*host_copy);
    *host_copy = NULL;
    return -1;
}

int worker_tensors_keep_output(const run_request *r, void *out, size_t bytes, cJSON *output, api_error *e)
{
    if (!r->keep_output || !r->output_tensor[0]) return api_fail(e, 500, "internal", "", "no output tensor id");
    if (worker_tensors_adopt(r->output_tensor, out, bytes) != 0)
        return api_fail(e, 500, "internal", "", "cannot keep the output as tensor %s", r->output_tensor);
    if (output) cJSON_AddStringToObject(output, "tensor", r->output_tensor);
    return 0;
}
