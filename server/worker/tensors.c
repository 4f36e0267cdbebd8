/* tensors.c — the worker's resident tensors (server/worker/tensors.h).
 *
 * A small array of {id, pointer, bytes}, grown as needed (no fixed size to overflow: the
 * front bounds how many tensors there are, max_tensors, before it sends a tensor_put); a
 * worker holds tens of tensors, not thousands, and one thread (the worker's loop) touches
 * it, so there is no lock.
 *
 * Uploads are copied out of the front's memfd into the buffer: on the cpu device one
 * memcpy from the mapping, except an upload of one tensor, which is kept where it is (a
 * private mapping of the memfd, wt_map_kept); on a GPU, from WT_PIN_MIN_BYTES on, the worker page-locks its
 * read-only mapping of the memfd (cudaHostRegister) and the copy is a DMA straight out of
 * the memfd's pages, queued on the worker's copy stream while the CPU computes the
 * fingerprint, then synchronised (so no later kernel can see it in flight) and the mapping
 * unlocked. Smaller uploads, and any the driver refuses to lock, are one cudaMemcpy from the
 * pageable mapping, which the driver stages. On the H200 (1 GiB) that staged copy took
 * 0.27 s, the page-locked one 0.11 s; a pread through a pinned double buffer took 0.34 s,
 * worse than the driver: one thread copies memory at ~3 GB/s on that VM, so the copy that
 * costs nothing is the one not made.
 *
 * Downloads are written into a fresh memfd with pwrite: straight from the buffer on the cpu
 * device, through a pinned staging buffer (WT_STAGING_BYTES at a time) from a GPU. (They are
 * at curl's loopback ceiling already: bench/loopback_ceiling.py.) pwrite lets the kernel
 * allocate each page of the memfd as it copies into it; the earlier mmap(MAP_POPULATE) +
 * memcpy zeroed every page first and then copied over it, and took 2-3x as long (1 GiB on the
 * cpu device: 0.7-2.3 s against 0.35 s on the 2-core test machine). A streamed download (the
 * front sends while the worker fills) is written into the front's memfd, in order, piece by
 * piece, with the bytes filled so far published in a shared page past the body
 * (tensor_download_progress).
 *
 * Each reply says how long the worker's part took (seconds, CLOCK_MONOTONIC): tensor_put
 * "copy_s" (map the memfd, allocate, copy) and "fingerprint_s"; tensor_get "fill_s" (the
 * memfd made and filled). The front logs them and puts the upload's in its
 * answer ("timing", docs/tensors.md), so a slow transfer can be attributed to its phase.
 */
#include "server/worker/tensors.h"

#include "common/clock.h"
#include "common/grow.h"
#include "common/host_memory.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "kernels/fingerprint.h"
#include "common/log.h"
#include "common/npy.h"
#include "common/run_request.h"

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
static int wt_on_gpu;

/* Downloads from a GPU: device → this buffer (page-locked, so the DMA goes straight into
 * it) → pwrite into the memfd, one piece at a time. Allocated at the first download, kept
 * for the worker's life; plain malloc when cudaMallocHost refuses (the copy is then staged
 * by the driver, slower but correct). 32 MiB: a piece's DMA takes ~1 ms at H200 PCIe rates,
 * small beside its pwrite (~5-10 ms at 3-6 GB/s). */
#define WT_STAGING_BYTES ((size_t)32 << 20)
static void *wt_staging;
static int wt_staging_pinned;
/* Uploads from this size on are copied from their page-locked mapping (wt_pin_upload);
 * smaller ones with one driver-staged cudaMemcpy, where locking and unlocking the pages
 * would cost more than the copy. */
#define WT_PIN_MIN_BYTES ((size_t)4 << 20)
/* The copies from page-locked uploads: queued here, so the fingerprint can run meanwhile. */
static cudaStream_t wt_copy_stream;

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

/* The download staging buffer, made at the first download. 0, or -1 with e. */
static int wt_staging_ready(api_error *e)
{
    cudaError_t ce;

    if (wt_staging) return 0;
    ce = cudaMallocHost(&wt_staging, WT_STAGING_BYTES);
    wt_staging_pinned = ce == cudaSuccess;
    if (ce == cudaSuccess) return 0;
    (void)cudaGetLastError();
    log_warn("cudaMallocHost of the %zu-byte download staging buffer failed at %s:%d: %s; using pageable memory",
             WT_STAGING_BYTES, __FILE__, __LINE__, cudaGetErrorString(ce));
    wt_staging = malloc(WT_STAGING_BYTES);
    if (wt_staging) return 0;
    return api_fail(e, 500, "internal", "", "no memory for the download staging buffer (%zu bytes)", WT_STAGING_BYTES);
}

static int wt_cuda_failed(cudaError_t ce, const char *what, size_t bytes, api_error *e)
{
    (void)cudaGetLastError();
    return api_fail(e, 500, "cuda_error", "", "%s (%zu bytes) failed: %s", what, bytes, cudaGetErrorString(ce));
}

/* The copy stream, made at the first page-locked upload. 0, or -1 with e. */
static int wt_copy_stream_ready(api_error *e)
{
    cudaError_t ce;

    if (wt_copy_stream) return 0;
    ce = cudaStreamCreateWithFlags(&wt_copy_stream, cudaStreamNonBlocking);
    if (ce == cudaSuccess) return 0;
    wt_copy_stream = NULL;
    return wt_cuda_failed(ce, "creating the upload copy stream", 0, e);
}

/* Page-lock an upload's mapping so its copies are DMA straight out of the memfd's pages:
 * no CPU copy at all. 1 when it is registered (unregister it after the copies), 0 when
 * the driver refused (the copies are then staged by the driver; said once). */
static int wt_pin_upload(void *map, size_t bytes)
{
    static int said;
    cudaError_t ce = cudaHostRegister(map, bytes, cudaHostRegisterReadOnly);

    if (ce == cudaSuccess) return 1;
    (void)cudaGetLastError();
    if (!said++)
        log_info("cudaHostRegister of an upload's read-only mapping (%zu bytes) failed: %s; uploads are staged "
                 "by the driver", bytes, cudaGetErrorString(ce));
    return 0;
}

static void wt_unpin_upload(void *map)
{
    cudaError_t ce = cudaHostUnregister(map);
    if (ce == cudaSuccess) return;
    (void)cudaGetLastError();
    log_warn("cudaHostUnregister of an upload's mapping failed at %s:%d: %s", __FILE__, __LINE__, cudaGetErrorString(ce));
}

/* An upload's bytes at src (the mapping of its memfd; src_pinned: page-locked) into dst
 * (device memory on a GPU, host memory on the cpu device). 0, or -1 with e. From a
 * page-locked mapping the copy is only queued on wt_copy_stream: wt_copies_done waits for it. */
static int wt_copy_in(void *dst, const void *src, int src_pinned, size_t bytes, api_error *e)
{
    cudaError_t ce;

    if (!wt_on_gpu) {
        memcpy(dst, src, bytes);
        return 0;
    }
    if (src_pinned) { /* only queued: the caller fingerprints while it runs, then wt_copies_done */
        if (wt_copy_stream_ready(e) != 0) return -1;
        ce = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, wt_copy_stream);
        return ce == cudaSuccess ? 0 : wt_cuda_failed(ce, "cudaMemcpyAsync HtoD from the page-locked upload", bytes, e);
    }
    /* Pageable: the driver stages it. The synchronise orders it before any later kernel on
     * the worker's non-blocking stream. */
    ce = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    if (ce == cudaSuccess) ce = cudaDeviceSynchronize();
    return ce == cudaSuccess ? 0 : wt_cuda_failed(ce, "cudaMemcpy HtoD", bytes, e);
}

/* The copies wt_copy_in queued from a pinned upload have ended. 0, or -1 with e. */
static int wt_copies_done(api_error *e)
{
    cudaError_t ce = cudaStreamSynchronize(wt_copy_stream);
    return ce == cudaSuccess ? 0 : wt_cuda_failed(ce, "the upload's copies (cudaStreamSynchronize)", 0, e);
}

/* All n bytes of src into fd at offset off. 0, or -1 with errno. */
static int wt_pwrite_all(int fd, const void *src, size_t n, uint64_t off)
{
    const uint8_t *p = src;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        p += w, n -= (size_t)w, off += (uint64_t)w;
    }
    return 0;
}

/* A failed pwrite of a download (errno): 507 when memory ran out, else 500. Returns -1. */
static int wt_write_failed(size_t bytes, api_error *e)
{
    int full = errno == ENOSPC || errno == ENOMEM;
    return api_fail(e, full ? 507 : 500, full ? "insufficient_storage" : "internal", "",
                    "writing the download (%zu bytes) to its memfd: %s", bytes, strerror(errno));
}

/* A streamed download's pieces on the cpu device: each pwrite is followed by a progress
 * store the front can send up to. 16 MiB: ~5 ms of pwrite, so the front waits little for
 * the first piece, and the extra atomics and cancel checks cost nothing measurable. */
#define WT_STREAM_PIECE_BYTES ((size_t)16 << 20)

/* A streamed download's progress (p NULL when the download is not streamed): publish that
 * [0, filled) is in the memfd. 0, or -1 when the front asked to stop (cancel). */
static int wt_publish(tensor_download_progress *p, uint64_t filled)
{
    if (!p) return 0;
    __atomic_store_n(&p->filled, filled, __ATOMIC_RELEASE);
    return __atomic_load_n(&p->cancel, __ATOMIC_ACQUIRE) ? -1 : 0;
}

/* The front cancelled a streamed download (its client went away). Returns -1. */
static int wt_cancelled(api_error *e)
{
    return api_fail(e, 499, "cancelled", "", "the download was cancelled: the client went away");
}

/* The bytes of a tensor (src: device or host pointer, as the worker is) into fd at off,
 * publishing progress after each piece when p is not NULL. 0, or -1 with e. */
static int wt_write_out(int fd, uint64_t off, const void *src, size_t bytes, tensor_download_progress *p,
                        api_error *e)
{
    size_t done, piece;
    cudaError_t ce;

    if (!wt_on_gpu) {
        size_t step = p ? WT_STREAM_PIECE_BYTES : bytes;
        for (done = 0; done < bytes; done += piece) {
            piece = bytes - done < step ? bytes - done : step;
            if (wt_pwrite_all(fd, (const uint8_t *)src + done, piece, off + done) != 0) return wt_write_failed(bytes, e);
            if (wt_publish(p, off + done + piece) != 0) return wt_cancelled(e);
        }
        return 0;
    }
    if (wt_staging_ready(e) != 0) return -1;
    /* Whatever wrote the tensor (a run's kernels on the worker's non-blocking stream, which
     * the legacy stream of cudaMemcpy does not wait for) has finished before it is read. */
    ce = cudaDeviceSynchronize();
    for (done = 0; ce == cudaSuccess && done < bytes; done += piece) {
        piece = bytes - done < WT_STAGING_BYTES ? bytes - done : WT_STAGING_BYTES;
        /* Synchronous: returns once the piece is in wt_staging (pinned or pageable alike). */
        ce = cudaMemcpy(wt_staging, (const uint8_t *)src + done, piece, cudaMemcpyDeviceToHost);
        if (ce == cudaSuccess && wt_pwrite_all(fd, wt_staging, piece, off + done) != 0)
            return wt_write_failed(bytes, e);
        if (ce == cudaSuccess && wt_publish(p, off + done + piece) != 0) return wt_cancelled(e);
    }
    if (ce == cudaSuccess) return 0;
    (void)cudaGetLastError();
    return api_fail(e, 500, "cuda_error", "", "cudaMemcpy DtoH (%zu bytes%s) failed at %s:%d: %s", bytes,
                    wt_staging_pinned ? "" : ", pageable", __FILE__, __LINE__, cudaGetErrorString(ce));
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
    if (grow_array(&wt_table, &wt_cap, (size_t)wt_count + 1, sizeof *wt_table, 16) != 0) return -1;
    snprintf(wt_table[wt_count].id, sizeof wt_table[0].id, "%s", id);
    wt_table[wt_count].ptr = ptr;
    wt_table[wt_count].bytes = bytes;
    wt_count++;
    return 0;
}

static void wt_remove(int i)
{
    if (wt_table[i].map_base) munmap(wt_table[i].map_base, wt_table[i].map_len);
    else wt_release(wt_table[i].ptr);
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
    if (!wt_on_gpu) return 0;
    *copy = malloc(bytes ? bytes : 1);
    if (!*copy) return api_fail(e, 500, "internal", "", "out of memory copying %zu bytes of an int32 tensor", bytes);
    ce = bytes ? cudaMemcpy(*copy, t, bytes, cudaMemcpyDeviceToHost) : cudaSuccess;
    if (ce != cudaSuccess) {
        free(*copy);
        *copy = NULL;
        return wt_cuda_failed(ce, "copying an int32 tensor to the host", bytes, e);
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

/* ---------------------------------------------------------------- messages -------------- */

/* An upload of one tensor to the cpu device, kept where it already is: the tensor is a private
 * mapping of the upload's memfd (its pages the memfd's until written), so nothing is copied.
 * The front closes its memfd at the end of the request; the mapping keeps the pages. Only for
 * a span that starts 8-byte aligned, past any element's alignment (raw bytes at 0, an npy's
 * data at 64 or 128, a safetensors file's at its 8-byte padded header). The tensor's bytes,
 * with the mapping in *base and *len (munmap them with the tensor); NULL: copy it instead. */
static uint8_t *wt_map_kept(int fd, size_t off, size_t bytes, void **base, size_t *len)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t base_off;

    if (wt_on_gpu || bytes == 0 || off % 8 != 0 || page <= 0) return NULL;
    base_off = off - off % (size_t)page;
    *len = off + bytes - base_off;
    /* Populated read-only, then made writable: populating a writable private mapping would
     * break copy-on-write for every page, which is the very copy this avoids. */
    *base = mmap(NULL, *len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, (off_t)base_off);
    if (*base == MAP_FAILED) return NULL;
    if (mprotect(*base, *len, PROT_READ | PROT_WRITE) != 0) {
        munmap(*base, *len);
        return NULL;
    }
    return (uint8_t *)*base + (off - base_off);
}

static cJSON *wt_put(const cJSON *msg, int fd, api_error *e)
{
    const cJSON *list = cJSON_GetObjectItem(msg, "tensors"), *t;
    const cJSON *budget = cJSON_GetObjectItem(msg, "budget");
    struct stat st;
    void *map = MAP_FAILED;
    size_t map_bytes = 0;
    double need = 0.0, avail, t0 = clock_monotonic_s(), fingerprint_s = 0.0, fp_start;
    int n = 0, added = 0, i, map_pinned = 0;
    uint8_t *kept = NULL; /* the one tensor's bytes, kept in the memfd's pages (wt_map_kept) */
    void *kept_base = NULL;
    size_t kept_len = 0;
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
    if (n == 1) {
        const cJSON *only = cJSON_GetArrayItem(list, 0);
        kept = wt_map_kept(fd, (size_t)cJSON_GetObjectItem(only, "offset")->valuedouble,
                           (size_t)cJSON_GetObjectItem(only, "bytes")->valuedouble, &kept_base, &kept_len);
    }
    if (!kept && map_bytes > 0) {
        /* Populated (no fault per page during the copy), unless it is to be page-locked,
         * which faults it in itself (wt_pin_upload). */
        const int to_pin = wt_on_gpu && map_bytes >= WT_PIN_MIN_BYTES;
        map = mmap(NULL, map_bytes, PROT_READ, MAP_SHARED | (to_pin ? 0 : MAP_POPULATE), fd, 0);
        if (map == MAP_FAILED) {
            api_fail(e, 500, "internal", "", "mmap of the upload (%zu bytes) failed: %s", map_bytes, strerror(errno));
            return NULL;
        }
        if (to_pin) map_pinned = wt_pin_upload(map, map_bytes);
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
        const uint8_t *src = kept ? kept : (const uint8_t *)map + off;
        void *p = NULL;
        char fp[20];
        cJSON *o;

        if (kept) {
            if (worker_tensors_adopt(id, kept, bytes) != 0) {
                api_fail(e, 500, "internal", "", "out of memory for the tensor table");
                goto fail;
            }
            wt_table[wt_count - 1].map_base = kept_base, wt_table[wt_count - 1].map_len = kept_len;
        } else if (wt_alloc(&p, bytes, id, e) != 0) {
            goto fail;
        } else if ((bytes && wt_copy_in(p, src, map_pinned, bytes, e) != 0) || worker_tensors_adopt(id, p, bytes) != 0) {
            if (!e->status) api_fail(e, 500, "internal", "", "out of memory for the tensor table");
            if (map_pinned) (void)cudaStreamSynchronize(wt_copy_stream); /* no copy still writes p */
            wt_release(p);
            goto fail;
        }
        added++;
        fp_start = clock_monotonic_s();
        snprintf(fp, sizeof fp, "%016llx", (unsigned long long)fingerprint_bytes(bytes ? src : (const void *)"", bytes));
        fingerprint_s += clock_monotonic_s() - fp_start;
        o = cJSON_CreateObject();
        if (!o || !cJSON_AddStringToObject(o, "id", id) || !cJSON_AddStringToObject(o, "fingerprint", fp) ||
            !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            api_fail(e, 500, "internal", "", "out of memory");
            goto fail;
        }
    }
    if (map_pinned && wt_copies_done(e) != 0) goto fail;
    if (map_pinned) wt_unpin_upload(map);
    if (map != MAP_FAILED) munmap(map, map_bytes);
    /* copy_s: the worker's time not spent fingerprinting. From a pinned mapping the DMA runs
     * while the fingerprint is computed, so it is what the copy added, not its duration. */
    if (!cJSON_AddNumberToObject(out, "copy_s", clock_monotonic_s() - t0 - fingerprint_s) ||
        !cJSON_AddNumberToObject(out, "fingerprint_s", fingerprint_s)) {
        api_fail(e, 500, "internal", "", "out of memory");
        map = MAP_FAILED;
        goto fail;
    }
    return out;

fail:
    /* All or nothing: drop what this message added (the newest entries). */
    if (map_pinned && map != MAP_FAILED) { /* no copy may still read the mapping or write a buffer */
        (void)cudaStreamSynchronize(wt_copy_stream);
        wt_unpin_upload(map);
    }
    for (i = 0; i < added; i++) wt_remove(wt_count - 1); /* a kept tensor's mapping with it */
    if (kept && added == 0) munmap(kept_base, kept_len);
    if (map != MAP_FAILED) munmap(map, map_bytes);
    cJSON_Delete(out);
    return NULL;
}

/* A streamed download (common/proto.h): map the progress page of the front's memfd fd at
 * offset "progress_offset" for a body of total bytes. The mapping, or NULL with e (400:
 * the memfd or the offset do not fit). */
static tensor_download_progress *wt_map_progress(int fd, const cJSON *offset, size_t total, api_error *e)
{
    struct stat st;
    long page = sysconf(_SC_PAGESIZE);
    double p = offset->valuedouble;
    void *map;

    if (fd < 0 || page <= 0 || fstat(fd, &st) != 0 || p < (double)total || p > 1e18 ||
        (uint64_t)p % (uint64_t)page != 0 || (double)st.st_size < p + (double)sizeof(tensor_download_progress)) {
        api_fail(e, 400, "bad_message", "", "tensor_get: a streamed download needs a memfd with its progress page "
                                            "past the %zu-byte body", total);
        return NULL;
    }
    map = mmap(NULL, sizeof(tensor_download_progress), PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)p);
    if (map == MAP_FAILED) {
        api_fail(e, 500, "internal", "", "mapping the download's progress page: %s", strerror(errno));
        return NULL;
    }
    return map;
}

/* tensor_get: into a fresh memfd (answered with it), or, with "progress_offset", into the
 * front's memfd in_fd while publishing progress (a streamed download). */
static cJSON *wt_get(const cJSON *msg, int in_fd, int *out_fd, api_error *e)
{
    const cJSON *id = cJSON_GetObjectItem(msg, "id"), *shape = cJSON_GetObjectItem(msg, "npy_shape"),
                *dtype = cJSON_GetObjectItem(msg, "npy_dtype"), *offset = cJSON_GetObjectItem(msg, "progress_offset"),
                *d;
    size_t plen = 0, bytes = 0, total;
    void *src = cJSON_IsString(id) ? worker_tensors_find(id->valuestring, &bytes) : NULL;
    char prefix[512];
    cJSON *out;
    int fd, failed = 1;
    tensor_download_progress *progress = NULL;
    double t0 = clock_monotonic_s();

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
    if (cJSON_IsNumber(offset)) {
        progress = wt_map_progress(in_fd, offset, total, e);
        if (!progress) return NULL;
        fd = in_fd;
        __atomic_store_n(&progress->total, (uint64_t)total, __ATOMIC_RELAXED);
        __atomic_store_n(&progress->state, TENSOR_DOWNLOAD_STARTED, __ATOMIC_RELEASE);
    } else {
        fd = memfd_create("attnd-download", MFD_CLOEXEC);
        if (fd < 0) {
            api_fail(e, 500, "internal", "", "memfd for the download (%zu bytes): %s", total, strerror(errno));
            return NULL;
        }
    }
    if (plen && wt_pwrite_all(fd, prefix, plen, 0) != 0)
        api_fail(e, 500, "internal", "", "writing the download's npy header to its memfd: %s", strerror(errno));
    else if (plen && wt_publish(progress, plen) != 0)
        wt_cancelled(e);
    else if (!bytes || wt_write_out(fd, plen, src, bytes, progress, e) == 0)
        failed = 0;
    out = failed ? NULL : cJSON_CreateObject();
    if (!failed && (!out || !cJSON_AddNumberToObject(out, "bytes", (double)total) ||
                    !cJSON_AddNumberToObject(out, "fill_s", clock_monotonic_s() - t0))) {
        cJSON_Delete(out);
        out = NULL;
        failed = 1;
        api_fail(e, 500, "internal", "", "out of memory");
    }
    if (progress) { /* the front learns the end from the reply too; this is only sooner */
        if (!failed) __atomic_store_n(&progress->filled, (uint64_t)total, __ATOMIC_RELEASE);
        __atomic_store_n(&progress->state, failed ? TENSOR_DOWNLOAD_FAILED : TENSOR_DOWNLOAD_DONE, __ATOMIC_RELEASE);
        munmap(progress, sizeof *progress);
        return out; /* the memfd stays the front's */
    }
    if (failed) {
        close(fd);
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

cJSON *worker_tensors_handle(proto_type type, const cJSON *msg, int fd, int *out_fd, api_error *e)
{
    *out_fd = -1;
    switch (type) {
    case PROTO_TENSOR_PUT: return wt_put(msg, fd, e);
    case PROTO_TENSOR_GET: return wt_get(msg, fd, out_fd, e);
    case PROTO_TENSOR_DELETE: return wt_delete(msg, e);
    default: api_fail(e, 400, "bad_message", "", "%s is not a tensor message", proto_type_name(type)); return NULL;
    }
}
