/* worker_tensors.c — the worker's resident tensors (worker_tensors.h).
 *
 * A small array of {id, pointer, bytes}: a worker holds tens of tensors, not thousands,
 * and one thread (the worker's loop) touches it, so there is no lock.
 *
 * Uploads are copied straight out of the front's memfd (mapped read-only) into the
 * buffer: on a GPU one cudaMemcpy per tensor from the mapping (pageable, so the driver
 * stages it), then a device synchronise so no later kernel on the worker's non-blocking
 * stream can see a copy still in flight. Downloads go the other way into a memfd sized
 * up front and mapped writable.
 */
#include "worker_tensors.h"

#include "host_memory.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "../kernels/fingerprint.h"
#include "log.h"
#include "npy.h"
#include "run_request.h"

typedef struct wt_entry {
    char id[32];
    void *ptr;
    size_t bytes;
} wt_entry;

static wt_entry *wt_table;
static int wt_count, wt_cap;
static int wt_on_gpu;

void worker_tensors_init(int on_gpu) { wt_on_gpu = on_gpu; }

/* ---------------------------------------------------------------- memory ---------------- */

double worker_tensors_free_bytes(void)
{
    if (wt_on_gpu) {
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0.0;
        }
        return (double)free_b;
    } else {
        return host_memory_available_bytes();
    }
}

/* Allocate bytes the worker's way. 0, or -1 with e (507 out of memory, 500 otherwise). */
static int wt_alloc(void **p, size_t bytes, const char *id, api_error *e)
{
    *p = NULL;
    if (wt_on_gpu) {
        cudaError_t ce = cudaMalloc(p, bytes ? bytes : 1);
        if (ce == cudaSuccess) return 0;
        *p = NULL;
        (void)cudaGetLastError();
        return api_fail(e, ce == cudaErrorMemoryAllocation ? 507 : 500,
                        ce == cudaErrorMemoryAllocation ? "insufficient_storage" : "cuda_error", "",
                        "cudaMalloc of tensor %s (%zu bytes) failed: %s", id, bytes, cudaGetErrorString(ce));
    }
    *p = malloc(bytes ? bytes : 1);
    if (*p) return 0;
    return api_fail(e, 507, "insufficient_storage", "", "host allocation of tensor %s (%zu bytes) failed", id, bytes);
}

static void wt_release(void *p)
{
    if (!p) return;
    if (wt_on_gpu) {
        cudaError_t ce = cudaFree(p);
        if (ce != cudaSuccess) log_warn("cudaFree of a tensor failed at %s:%d: %s", __FILE__, __LINE__, cudaGetErrorString(ce));
    } else {
        free(p);
    }
}

/* dst ← src, bytes; to_device: host→device, else device→host (plain memcpy on the cpu). */
static int wt_copy(void *dst, const void *src, size_t bytes, int to_device, api_error *e)
{
    cudaError_t ce;
    if (!wt_on_gpu) {
        memcpy(dst, src, bytes);
        return 0;
    }
    ce = cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    if (ce == cudaSuccess) ce = cudaDeviceSynchronize();
    if (ce == cudaSuccess) return 0;
    (void)cudaGetLastError();
    return api_fail(e, 500, "cuda_error", "", "cudaMemcpy %s (%zu bytes) failed at %s:%d: %s",
                    to_device ? "HtoD" : "DtoH", bytes, __FILE__, __LINE__, cudaGetErrorString(ce));
}

/* ---------------------------------------------------------------- the table ------------- */

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

int worker_tensors_adopt(const char *id, void *ptr, size_t bytes)
{
    if (!id || strlen(id) >= sizeof wt_table[0].id || wt_index(id) >= 0) return -1;
    if (wt_count == wt_cap) {
        int cap = wt_cap ? 2 * wt_cap : 16;
        wt_entry *grown = realloc(wt_table, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        wt_table = grown;
        wt_cap = cap;
    }
    snprintf(wt_table[wt_count].id, sizeof wt_table[0].id, "%s", id);
    wt_table[wt_count].ptr = ptr;
    wt_table[wt_count].bytes = bytes;
    wt_count++;
    return 0;
}

static void wt_remove(int i)
{
    wt_release(wt_table[i].ptr);
    wt_table[i] = wt_table[--wt_count];
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
    want[1] = want[2] = (size_t)attn_kv_elems(p) * esz;
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

int worker_tensors_keep_output(const run_request *r, void *out, size_t bytes, cJSON *output, api_error *e)
{
    if (!r->keep_output || !r->output_tensor[0]) return api_fail(e, 500, "internal", "", "no output tensor id");
    if (worker_tensors_adopt(r->output_tensor, out, bytes) != 0)
        return api_fail(e, 500, "internal", "", "cannot keep the output as tensor %s", r->output_tensor);
    if (output) cJSON_AddStringToObject(output, "tensor", r->output_tensor);
    return 0;
}

/* ---------------------------------------------------------------- messages -------------- */

static cJSON *wt_put(const cJSON *msg, int fd, api_error *e)
{
    const cJSON *list = cJSON_GetObjectItem(msg, "tensors"), *t;
    const cJSON *budget = cJSON_GetObjectItem(msg, "budget");
    struct stat st;
    void *map = MAP_FAILED;
    size_t map_bytes = 0;
    double need = 0.0, avail;
    int n = 0, added = 0, i;
    cJSON *out = NULL, *arr;

    if (fd < 0 || !cJSON_IsArray(list) || fstat(fd, &st) != 0) {
        api_fail(e, 400, "bad_message", "", "tensor_put needs a memfd and a tensors list");
        return NULL;
    }
    map_bytes = (size_t)st.st_size;
    cJSON_ArrayForEach(t, list) {
        const cJSON *id = cJSON_GetObjectItem(t, "id"), *off = cJSON_GetObjectItem(t, "offset"),
                    *b = cJSON_GetObjectItem(t, "bytes");
        if (!cJSON_IsString(id) || !cJSON_IsNumber(off) || !cJSON_IsNumber(b) || off->valuedouble < 0 ||
            b->valuedouble < 0 || off->valuedouble + b->valuedouble > (double)map_bytes) {
            api_fail(e, 400, "bad_message", "", "tensor_put: a tensor span lies outside the %zu-byte memfd", map_bytes);
            return NULL;
        }
        if (wt_index(id->valuestring) >= 0) {
            api_fail(e, 409, "conflict", "", "tensor %s already exists on this worker", id->valuestring);
            return NULL;
        }
        need += b->valuedouble;
        n++;
    }
    /* The front checked a configured budget; with none, the device's free memory is the limit. */
    if (!cJSON_IsNumber(budget) || budget->valuedouble <= 0) {
        avail = worker_tensors_free_bytes();
        if (need > avail) {
            api_fail(e, 507, "insufficient_storage", "",
                     "the upload needs %.0f bytes; the device has %.0f bytes free (memory_budget_bytes=0: free memory)",
                     need, avail);
            return NULL;
        }
    }
    if (map_bytes > 0) {
        map = mmap(NULL, map_bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0); /* no fault per page */
        if (map == MAP_FAILED) {
            api_fail(e, 500, "internal", "", "mmap of the upload (%zu bytes) failed: %s", map_bytes, strerror(errno));
            return NULL;
        }
    }
    out = cJSON_CreateObject();
    arr = out ? cJSON_AddArrayToObject(out, "tensors") : NULL;
    if (!arr) {
        api_fail(e, 500, "internal", "", "out of memory");
        goto fail;
    }
    cJSON_ArrayForEach(t, list) {
        const char *id = cJSON_GetObjectItem(t, "id")->valuestring;
        size_t off = (size_t)cJSON_GetObjectItem(t, "offset")->valuedouble;
        size_t bytes = (size_t)cJSON_GetObjectItem(t, "bytes")->valuedouble;
        const uint8_t *src = (const uint8_t *)map + off;
        void *p = NULL;
        char fp[20];
        cJSON *o;

        if (wt_alloc(&p, bytes, id, e) != 0) goto fail;
        if ((bytes && wt_copy(p, src, bytes, 1, e) != 0) || worker_tensors_adopt(id, p, bytes) != 0) {
            if (!e->status) api_fail(e, 500, "internal", "", "out of memory for the tensor table");
            wt_release(p);
            goto fail;
        }
        added++;
        snprintf(fp, sizeof fp, "%016llx", (unsigned long long)fingerprint_bytes(bytes ? src : (const void *)"", bytes));
        o = cJSON_CreateObject();
        if (!o || !cJSON_AddStringToObject(o, "id", id) || !cJSON_AddStringToObject(o, "fingerprint", fp) ||
            !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            api_fail(e, 500, "internal", "", "out of memory");
            goto fail;
        }
    }
    if (map != MAP_FAILED) munmap(map, map_bytes);
    return out;

fail:
    /* All or nothing: drop what this message added (the newest entries). */
    for (i = 0; i < added; i++) wt_remove(wt_count - 1);
    if (map != MAP_FAILED) munmap(map, map_bytes);
    cJSON_Delete(out);
    return NULL;
}

static cJSON *wt_get(const cJSON *msg, int *out_fd, api_error *e)
{
    const cJSON *id = cJSON_GetObjectItem(msg, "id"), *shape = cJSON_GetObjectItem(msg, "npy_shape"),
                *dtype = cJSON_GetObjectItem(msg, "npy_dtype"), *d;
    size_t plen = 0, bytes = 0, total;
    void *src = cJSON_IsString(id) ? worker_tensors_find(id->valuestring, &bytes) : NULL;
    char prefix[512];
    uint8_t *map;
    cJSON *out;
    int fd;

    if (!src) {
        api_fail(e, 410, "gone", "id", "tensor %s is not on this worker (it restarted)",
                 cJSON_IsString(id) ? id->valuestring : "?");
        return NULL;
    }
    if (cJSON_IsArray(shape) && cJSON_IsString(dtype)) { /* download as .npy: the header first */
        int64_t dims[NPY_MAX_DIMS];
        int ndim = 0;
        attn_dtype dt;
        cJSON_ArrayForEach(d, shape) if (ndim < NPY_MAX_DIMS) dims[ndim++] = (int64_t)d->valuedouble;
        if (attn_dtype_parse(dtype->valuestring, &dt) != 0 ||
            (plen = npy_write_header(prefix, sizeof prefix, dt, ndim, dims)) == 0) {
            api_fail(e, 400, "bad_message", "", "tensor_get: cannot write an npy header for that shape and dtype");
            return NULL;
        }
    }
    total = plen + bytes;
    fd = memfd_create("attnd-download", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)total) != 0) {
        api_fail(e, 500, "internal", "", "memfd for the download (%zu bytes): %s", total, strerror(errno));
        if (fd >= 0) close(fd);
        return NULL;
    }
    if (total > 0) {
        map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        if (map == MAP_FAILED) {
            api_fail(e, 500, "internal", "", "mmap of the download memfd failed: %s", strerror(errno));
            close(fd);
            return NULL;
        }
        memcpy(map, prefix, plen);
        if (bytes && wt_copy(map + plen, src, bytes, 0, e) != 0) {
            munmap(map, total);
            close(fd);
            return NULL;
        }
        munmap(map, total);
    }
    out = cJSON_CreateObject();
    if (!out || !cJSON_AddNumberToObject(out, "bytes", (double)total)) {
        cJSON_Delete(out);
        close(fd);
        api_fail(e, 500, "internal", "", "out of memory");
        return NULL;
    }
    *out_fd = fd;
    return out;
}

static cJSON *wt_delete(const cJSON *msg, api_error *e)
{
    const cJSON *id = cJSON_GetObjectItem(msg, "id");
    int i = cJSON_IsString(id) ? wt_index(id->valuestring) : -1;

    if (i < 0) {
        api_fail(e, 410, "gone", "id", "tensor %s is not on this worker (it restarted)",
                 cJSON_IsString(id) ? id->valuestring : "?");
        return NULL;
    }
    wt_remove(i);
    return cJSON_CreateObject();
}

cJSON *worker_tensors_handle(const char *type, const cJSON *msg, int fd, int *out_fd, api_error *e)
{
    *out_fd = -1;
    if (strcmp(type, "tensor_put") == 0) return wt_put(msg, fd, e);
    if (strcmp(type, "tensor_get") == 0) return wt_get(msg, out_fd, e);
    if (strcmp(type, "tensor_delete") == 0) return wt_delete(msg, e);
    api_fail(e, 400, "bad_message", "", "unknown tensor message %s", type);
    return NULL;
}
