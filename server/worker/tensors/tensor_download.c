/* tensor_download.c — tensor_get: a resident tensor's bytes into a memfd (tensor_download.h).
 *
 * Small downloads are written into a fresh memfd with pwrite: straight from the buffer on the
 * cpu device, through a pinned staging buffer (DL_STAGING_BYTES at a time) from a GPU. pwrite
 * lets the kernel allocate each page of the memfd as it copies into it; the earlier
 * mmap(MAP_POPULATE) + memcpy zeroed every page first and then copied over it, and took 2-3x as
 * long (1 GiB on the cpu device: 0.7-2.3 s against 0.35 s on the 2-core test machine). A
 * streamed download (the front sends while the worker fills) is written into the front's
 * memfd, in order, piece by piece, with the bytes filled so far published in a shared page past
 * the body (tensor_download_progress); its pieces go through a mapping, on several threads
 * (dl_copy_parallel). The reply's "fill_s" is the worker's part: the memfd made and filled.
 */
#include "server/worker/tensors/tensor_download.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "common/clock.h"
#include "common/npy.h"
#include "common/log.h"
#include "kernels/cpu/host_threads.h"
#include "server/worker/tensors/tensor_memory.h"
#include "server/worker/tensors/tensors.h"

/* Downloads from a GPU: device → this buffer (page-locked, so the DMA goes straight into
 * it) → pwrite into the memfd, one piece at a time. Allocated at the first download, kept
 * for the worker's life; plain malloc when cudaMallocHost refuses (the copy is then staged
 * by the driver, slower but correct). 32 MiB: a piece's DMA takes ~1 ms at H200 PCIe rates,
 * small beside its pwrite (~5-10 ms at 3-6 GB/s). */
#define DL_STAGING_BYTES ((size_t)32 << 20)
static void *dl_staging;
static int dl_staging_pinned;

/* The download staging buffer, made at the first download. 0, or -1 with e. */
static int dl_staging_ready(api_error *e)
{
    cudaError_t ce;

    if (dl_staging) return 0;
    ce = cudaMallocHost(&dl_staging, DL_STAGING_BYTES);
    dl_staging_pinned = ce == cudaSuccess;
    if (ce == cudaSuccess) return 0;
    (void)cudaGetLastError();
    log_warn("cudaMallocHost of the %zu-byte download staging buffer failed at %s:%d: %s; using pageable memory",
             DL_STAGING_BYTES, __FILE__, __LINE__, cudaGetErrorString(ce));
    dl_staging = malloc(DL_STAGING_BYTES);
    if (dl_staging) return 0;
    return api_fail(e, 500, "internal", "", "no memory for the download staging buffer (%zu bytes)", DL_STAGING_BYTES);
}

/* All n bytes of src into fd at offset off. 0, or -1 with errno. */
static int dl_pwrite_all(int fd, const void *src, size_t n, uint64_t off)
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
static int dl_write_failed(size_t bytes, api_error *e)
{
    int full = errno == ENOSPC || errno == ENOMEM;
    return api_fail(e, full ? 507 : 500, full ? "insufficient_storage" : "internal", "",
                    "writing the download (%zu bytes) to its memfd: %s", bytes, strerror(errno));
}

/* A streamed download's pieces on the cpu device: each piece's copy into the memfd is
 * followed by a progress store the front can send up to. 16 MiB: a few ms of copying, so the
 * front waits little for the first piece, and the extra atomics and cancel checks cost
 * nothing measurable. */
#define DL_STREAM_PIECE_BYTES ((size_t)16 << 20)

/* A streamed download's progress (p NULL when the download is not streamed): publish that
 * [0, filled) is in the memfd. 0, or -1 when the front asked to stop (cancel). */
static int dl_publish(tensor_download_progress *p, uint64_t filled)
{
    if (!p) return 0;
    __atomic_store_n(&p->filled, filled, __ATOMIC_RELEASE);
    return __atomic_load_n(&p->cancel, __ATOMIC_ACQUIRE) ? -1 : 0;
}

/* The front cancelled a streamed download (its client went away). Returns -1. */
static int dl_cancelled(api_error *e)
{
    return api_fail(e, 499, "cancelled", "", "the download was cancelled: the client went away");
}

/* A failed copy of bytes from the GPU (ce) as the download's error. Returns -1. */
static int dl_copy_failed(cudaError_t ce, size_t bytes, api_error *e)
{
    (void)cudaGetLastError();
    return api_fail(e, 500, "cuda_error", "", "cudaMemcpy DtoH (%zu bytes%s) failed at %s:%d: %s", bytes,
                    dl_staging_pinned ? "" : ", pageable", __FILE__, __LINE__, cudaGetErrorString(ce));
}

/* A streamed download is written through a shared mapping of the front's memfd, each piece by
 * several threads at once. What a fill costs is the kernel allocating the memfd's pages, and
 * pwrite does that on one thread (a tmpfs file's writes hold its lock, so parallel pwrites
 * take turns); faults on a mapping are taken in parallel. Each thread populates its slice
 * (MADV_POPULATE_WRITE: a failed allocation is an error, not a SIGBUS) and copies into it. On
 * an H100's VM, 1 GiB: pwrite 2.6-3.0 GB/s, the mapping on 8 threads 4.4-5.0; a GPU download's
 * fill 0.29 s against 0.43 (bench/served_transfers.py). */
#define DL_SLICE_BYTES ((size_t)1 << 20)
#define DL_FILL_THREADS 8

typedef struct dl_parallel_copy {
    uint8_t *dst;
    const uint8_t *src;
    size_t bytes;
    size_t next;  /* the next slice's offset, taken atomically */
    int err;      /* the first errno of a failed population, taken atomically */
    uintptr_t page_mask;
} dl_parallel_copy;

static void dl_copy_slices(void *arg)
{
    dl_parallel_copy *c = arg;
    size_t at;

    while ((at = __atomic_fetch_add(&c->next, DL_SLICE_BYTES, __ATOMIC_RELAXED)) < c->bytes) {
        const size_t n = c->bytes - at < DL_SLICE_BYTES ? c->bytes - at : DL_SLICE_BYTES;
        /* from the slice's first page (an npy body starts mid-page; a page two slices share is
         * populated twice, which costs nothing the second time) */
        uint8_t *first = (uint8_t *)((uintptr_t)(c->dst + at) & c->page_mask);
        if (madvise(first, (size_t)(c->dst + at + n - first), MADV_POPULATE_WRITE) != 0 &&
            errno != EINVAL) { /* EINVAL: a kernel before 5.14 */
            int none = 0;
            __atomic_compare_exchange_n(&c->err, &none, errno, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
            return;
        }
        memcpy(c->dst + at, c->src + at, n);
    }
}

/* Host bytes [from, from + bytes) to dst in the mapping, on up to DL_FILL_THREADS threads.
 * 0, or an errno. */
static int dl_copy_parallel(uint8_t *dst, const void *from, size_t bytes)
{
    dl_parallel_copy c = {dst, from, bytes, 0, 0, ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1)};
    const int cores = host_threads_cores();
    const int threads = host_threads_for_work(cores < DL_FILL_THREADS ? cores : DL_FILL_THREADS, (double)bytes,
                                              (double)(4 * DL_SLICE_BYTES));

    host_threads_run(threads, dl_copy_slices, &c);
    return c.err;
}

/* The bytes of a tensor (src: device or host pointer, as the worker is) into fd at off, a
 * piece at a time: from a GPU through the staging buffer, each piece written through a
 * mapping of the memfd when the download is streamed (it has its final size then) and with
 * pwrite otherwise or when it cannot be mapped; progress is published after each piece when
 * p is not NULL. 0, or -1 with e. */
static int dl_write_out(int fd, uint64_t off, const void *src, size_t bytes, tensor_download_progress *p,
                        api_error *e)
{
    const int gpu = tensor_mem_on_gpu();
    const size_t piece_max = gpu ? DL_STAGING_BYTES : p ? DL_STREAM_PIECE_BYTES : bytes;
    const uint64_t map_off = off - off % (uint64_t)sysconf(_SC_PAGESIZE);
    const size_t lead = (size_t)(off - map_off);
    uint8_t *map = NULL;
    size_t done, piece;
    int rc = 0, err;

    if (gpu) {
        cudaError_t ce;
        if (dl_staging_ready(e) != 0) return -1;
        /* Whatever wrote the tensor (a run's kernels on the worker's non-blocking stream, which
         * the legacy stream of cudaMemcpy does not wait for) has finished before it is read. */
        if ((ce = cudaDeviceSynchronize()) != cudaSuccess) return dl_copy_failed(ce, bytes, e);
    }
    if (p) {
        map = mmap(NULL, lead + bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)map_off);
        if (map == MAP_FAILED) map = NULL; /* pwrite instead */
    }
    for (done = 0; done < bytes && rc == 0; done += piece) {
        const void *from = (const uint8_t *)src + done;
        piece = bytes - done < piece_max ? bytes - done : piece_max;
        if (gpu) { /* synchronous: returns once the piece is in the staging buffer */
            cudaError_t ce = cudaMemcpy(dl_staging, from, piece, cudaMemcpyDeviceToHost);
            if (ce != cudaSuccess) {
                rc = dl_copy_failed(ce, piece, e);
                break;
            }
            from = dl_staging;
        }
        err = map ? dl_copy_parallel(map + lead + done, from, piece)
                  : dl_pwrite_all(fd, from, piece, off + done) != 0 ? errno : 0;
        if (err != 0) {
            errno = err;
            rc = dl_write_failed(bytes, e);
        } else if (dl_publish(p, off + done + piece) != 0) {
            rc = dl_cancelled(e);
        }
    }
    if (map) munmap(map, lead + bytes);
    return rc;
}

/* ---------------------------------------------------------------- the table ------------- */

/* A streamed download (common/proto.h): map the progress page of the front's memfd fd at
 * offset "progress_offset" for a body of total bytes. The mapping, or NULL with e (400:
 * the memfd or the offset do not fit). */
static tensor_download_progress *dl_map_progress(int fd, const cJSON *offset, size_t total, api_error *e)
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
cJSON *tensor_download_get(const cJSON *msg, int in_fd, int *out_fd, api_error *e)
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
        progress = dl_map_progress(in_fd, offset, total, e);
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
    if (plen && dl_pwrite_all(fd, prefix, plen, 0) != 0)
        api_fail(e, 500, "internal", "", "writing the download's npy header to its memfd: %s", strerror(errno));
    else if (plen && dl_publish(progress, plen) != 0)
        dl_cancelled(e);
    else if (!bytes || dl_write_out(fd, plen, src, bytes, progress, e) == 0)
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
