/* tensors.c — resident tensors, the front's side (tensors.h, docs/tensors.md).
 *
 * Upload path, and who holds what: when the headers are in, tensors_upload_admit checks the
 * query and reserves the declared body's bytes on the device (budget, device and host
 * memory) and a table entry, before any byte is read; libmicrohttpd then hands the body to
 * http.c piece by piece, which writes it to a memfd (the route streams; a chunked body is
 * reserved as it grows, tensors_upload_grow). This file reads only the header bytes back
 * (pread), parses them (npy.c, safetensors.c: pure parsers), then passes the memfd to the
 * device's worker through its queue (pool_tensor_op), which copies each tensor out of it
 * into device (or host) memory. The body exists once, in the memfd.
 * Download: the worker fills a memfd (npy header + bytes) and libmicrohttpd sends it; from
 * 8 MiB on the front makes the memfd and sends each part as soon as the worker has filled
 * it (the fill and the send overlap; "streamed download" below).
 * Both log one info line with their phases' times and rates (upload: receive, queue, copy,
 * fingerprint; download: queue, fill, send), and the upload's answer carries its "timing".
 *
 * Runs hold what they read: tensors_prepare_run pins each resident input (readers++) and
 * reserves the kept output's id as a pending entry; tensors_finish_run, the pool's end hook
 * of the run, undoes both whichever way the run ended, so an async run is covered from its
 * 202 to its end exactly as a synchronous one is. A pinned tensor cannot be deleted (409):
 * refusing is predictable for scripts, where a DELETE waiting behind a long queue is not.
 *
 * One mutex guards the table and the reservations; it is never held across a pool call
 * (the pool may call tensors_finish_run with its own lock held: the order is pool, then
 * tensors, never the other way).
 */
#include "front/tensors.h"

#include "common/clock.h"
#include "common/run_request.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/variant_info.h"
#include "common/host_memory.h"
#include "common/log.h"
#include "front/metrics.h"
#include "common/npy.h"
#include "front/pool.h"
#include "front/safetensors.h"
#include "front/store.h"
#include "common/proto.h"

#define TENSOR_MAX_DIMS 8
#define TENSOR_NAME_MAX 128

typedef struct tensor_entry {
    char id[32];
    char name[TENSOR_NAME_MAX];
    char device[16];
    int generation; /* the worker generation that holds it (pool_device_generation) */
    attn_dtype dtype;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    uint64_t bytes;
    char fingerprint[20];
    char created[32];
    int readers;  /* runs queued or running that read it (tensors_prepare_run pins): DELETE answers 409 */
    int deleting; /* a DELETE is under way: new runs may not pin it */
    int pending;  /* a kept output whose run has not ended: not listed, lookups answer 404 */
} tensor_entry;

static pthread_mutex_t tensors_mu = PTHREAD_MUTEX_INITIALIZER;
static tensor_entry *tensors_table;
static int tensors_count, tensors_cap;
static int tensors_slots_held; /* entries promised to uploads under way (tensors_take_slots_locked) */
static long long tensors_next_id = 1;

/* Bytes promised to uploads and runs in flight, per device (budget checks count them). */
typedef struct tensor_reservation {
    char device[16];
    double bytes;
} tensor_reservation;
static tensor_reservation tensors_reserved[64];

/* Entries the table may hold, gone ones and pending outputs included (max_tensors). */
static int tensors_max_entries(void)
{
    const settings *s = http_settings();
    return s && s->max_tensors > 0 ? s->max_tensors : 4096;
}

/* ---------------------------------------------------------------- the table ------------- */

static int tensors_index_locked(const char *id)
{
    int i;
    for (i = 0; i < tensors_count; i++)
        if (strcmp(tensors_table[i].id, id) == 0) return i;
    return -1;
}

/* Ids are "t" and a number the store issues: never reused, across restarts too (an id of
 * an earlier process answers 410), and not to be confused with run ids. Should the store
 * fail, a counter above every id seen keeps this process's ids unique. */
static void tensors_new_id_locked(char *out, size_t len, const char *device)
{
    long long n = store_tensor_issue(device);
    if (n > 0 && n >= tensors_next_id) tensors_next_id = n + 1;
    if (n <= 0) n = tensors_next_id++;
    snprintf(out, len, "t%lld", n);
}

static int tensors_add_locked(const tensor_entry *t)
{
    if (tensors_count == tensors_cap) {
        int cap = tensors_cap ? 2 * tensors_cap : 64;
        tensor_entry *grown = realloc(tensors_table, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        tensors_table = grown;
        tensors_cap = cap;
    }
    tensors_table[tensors_count++] = *t;
    return 0;
}

static void tensors_remove_locked(int i) { memmove(&tensors_table[i], &tensors_table[i + 1], (size_t)(tensors_count - i - 1) * sizeof *tensors_table), tensors_count--; }

/* Promise entries for an upload's need tensors, of which it holds held already, before its
 * body goes to the worker: 507 when the table would pass max_tensors, counting gone entries,
 * pending outputs and the entries promised to other uploads. The array is grown now, so
 * adding the promised entries later cannot fail: a tensor the worker stored is always
 * listed. what: who needs them, for the message. 0, or -1 with e. */
static int tensors_take_slots_locked(int need, int held, const char *what, api_error *e)
{
    int max = tensors_max_entries(), taken = tensors_count + tensors_slots_held, n = need - held;

    if (n <= 0) return 0;
    if (n > max - taken)
        return api_fail(e, 507, "insufficient_storage", "",
                        "the tensor table is full: %s %d entr%s, and %d of max_tensors=%d %s free (gone tensors and "
                        "uploads under way count); delete some (DELETE /v1/tensors/ID)",
                        what, need, need == 1 ? "y" : "ies", max - taken + held, max,
                        max - taken + held == 1 ? "is" : "are");
    if (taken + n > tensors_cap) {
        int cap = tensors_cap ? tensors_cap : 64;
        tensor_entry *grown;
        while (cap < taken + n) cap *= 2;
        grown = realloc(tensors_table, (size_t)cap * sizeof *grown);
        if (!grown) return api_fail(e, 500, "internal", "", "out of memory for the tensor table");
        tensors_table = grown;
        tensors_cap = cap;
    }
    tensors_slots_held += n;
    return 0;
}

/* Bytes held on device by live tensors (the worker's current generation). */
static double tensors_resident_locked(const char *device, int generation)
{
    double used = 0.0;
    int i;
    for (i = 0; i < tensors_count; i++) /* a pending output is inside its run's reservation */
        if (!strcmp(tensors_table[i].device, device) && tensors_table[i].generation == generation &&
            !tensors_table[i].pending)
            used += (double)tensors_table[i].bytes;
    return used;
}

/* Bytes reserved on device by uploads and runs under way. */
static double tensors_reserved_locked(const char *device)
{
    int i;
    for (i = 0; i < (int)(sizeof tensors_reserved / sizeof tensors_reserved[0]); i++)
        if (!strcmp(tensors_reserved[i].device, device)) return tensors_reserved[i].bytes;
    return 0.0;
}

/* Bytes held on device by live tensors plus reservations. */
static double tensors_used_locked(const char *device, int generation)
{
    return tensors_resident_locked(device, generation) + tensors_reserved_locked(device);
}

/* Add bytes to device's reservation. 0, or -1 when no row is left for another device
 * (never with the devices one machine has: 64 rows). */
static int tensors_reserve_add_locked(const char *device, double bytes)
{
    int i, slot = -1;
    for (i = 0; i < (int)(sizeof tensors_reserved / sizeof tensors_reserved[0]); i++) {
        if (!strcmp(tensors_reserved[i].device, device)) {
            slot = i;
            break;
        }
        if (slot < 0 && !tensors_reserved[i].device[0]) slot = i;
    }
    if (slot < 0) return -1;
    snprintf(tensors_reserved[slot].device, sizeof tensors_reserved[slot].device, "%s", device);
    tensors_reserved[slot].bytes += bytes;
    return 0;
}

/* The gauge attnd_resident_tensor_bytes of device (metrics.h): what its worker of
 * generation holds. Called wherever that changes: uploads, deletes, kept outputs, restarts. */
static void tensors_publish_locked(const char *device, int generation)
{
    metrics_set_tensor_bytes(device, tensors_resident_locked(device, generation));
}

/* Reserve bytes on device under budget (> 0). 0, or -1 with e (507 and how much is free). */
static int tensors_reserve(const char *device, double bytes, long long budget, const char *what, api_error *e)
{
    int gen = pool_device_generation(device), rc = 0;
    double used;

    pthread_mutex_lock(&tensors_mu);
    used = tensors_used_locked(device, gen);
    if (budget > 0 && used + bytes > (double)budget)
        rc = api_fail(e, 507, "insufficient_storage", "",
                      "%s needs %.0f bytes on %s; %.0f of memory_budget_bytes=%lld are free", what, bytes, device,
                      (double)budget - used > 0 ? (double)budget - used : 0.0, budget);
    else if (tensors_reserve_add_locked(device, bytes) != 0)
        rc = api_fail(e, 500, "internal", "", "no room to account for device %s's reservations", device);
    pthread_mutex_unlock(&tensors_mu);
    return rc;
}

static void tensors_unreserve_locked(const char *device, double bytes)
{
    int i;
    for (i = 0; i < (int)(sizeof tensors_reserved / sizeof tensors_reserved[0]); i++)
        if (!strcmp(tensors_reserved[i].device, device)) {
            tensors_reserved[i].bytes -= bytes;
            if (tensors_reserved[i].bytes < 0.5) tensors_reserved[i].bytes = 0.0;
            break;
        }
}

static cJSON *tensor_json(const tensor_entry *t, int gone)
{
    cJSON *o = cJSON_CreateObject(), *shape;
    int i;

    if (!o) return NULL;
    cJSON_AddStringToObject(o, "id", t->id);
    cJSON_AddStringToObject(o, "name", t->name);
    shape = cJSON_AddArrayToObject(o, "shape");
    for (i = 0; shape && i < t->ndim; i++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[i]));
    cJSON_AddStringToObject(o, "dtype", attn_dtype_name(t->dtype));
    cJSON_AddNumberToObject(o, "bytes", (double)t->bytes);
    cJSON_AddStringToObject(o, "device", t->device);
    cJSON_AddStringToObject(o, "fingerprint", t->fingerprint);
    cJSON_AddStringToObject(o, "created", t->created);
    cJSON_AddStringToObject(o, "state", gone ? "gone" : "resident");
    return o;
}

/* Look id up: 0 with *out a copy; else -1 with e (404 unknown, 410 its worker restarted). */
static int tensors_lookup(const char *id, const char *field, tensor_entry *out, api_error *e)
{
    int i, gen;

    if (id[0] != 't' || !isdigit((unsigned char)id[1]) || strspn(id + 1, "0123456789") != strlen(id + 1) || strlen(id) > 20)
        return api_fail(e, 404, "not_found", field, "there is no tensor %.40s (tensor ids look like t4)", id);
    pthread_mutex_lock(&tensors_mu);
    i = tensors_index_locked(id);
    if (i >= 0) *out = tensors_table[i];
    pthread_mutex_unlock(&tensors_mu);
    if (i < 0 && store_tensor_known(strtoll(id + 1, NULL, 10)) == 1)
        return api_fail(e, 410, "gone", field,
                        "tensor %s is gone: it was resident in an earlier run of the server, and resident tensors "
                        "do not survive a restart (upload it again)", id);
    if (i < 0) return api_fail(e, 404, "not_found", field, "there is no tensor %.40s", id);
    if (out->pending)
        return api_fail(e, 404, "not_found", field,
                        "there is no tensor %s yet: it will be the kept output of a run that has not finished "
                        "(it appears in the run's output.tensor once the run is done)", id);
    gen = pool_device_generation(out->device);
    if (gen != out->generation)
        return api_fail(e, 410, "gone", field,
                        "tensor %s is gone: the worker of %s restarted since it was uploaded (upload it again)", id,
                        out->device);
    return 0;
}

/* ---------------------------------------------------------------- upload ---------------- */

/* bytes / seconds in GB/s, for the log lines (0 when no time passed). */
static double tensors_gbps(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0.0; }

/* Where an upload's time went, in seconds (docs/tensors.md, "timing"). */
typedef struct upload_timing {
    double receive_s;     /* the body's arrival: headers in → last byte in the memfd */
    double queue_s;       /* waiting for the device's worker (jobs ahead of it) and the messages */
    double copy_s;        /* the worker mapping the memfd, allocating and copying to the device */
    double fingerprint_s; /* the worker fingerprinting what it stored */
    double total_s;       /* headers in → the answer */
} upload_timing;

static cJSON *upload_timing_json(const upload_timing *t)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddNumberToObject(o, "receive_s", t->receive_s) || !cJSON_AddNumberToObject(o, "queue_s", t->queue_s) ||
        !cJSON_AddNumberToObject(o, "copy_s", t->copy_s) || !cJSON_AddNumberToObject(o, "fingerprint_s", t->fingerprint_s) ||
        !cJSON_AddNumberToObject(o, "total_s", t->total_s)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

typedef struct upload_spec {
    char name[TENSOR_NAME_MAX];
    attn_dtype dtype;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    uint64_t offset, bytes;
} upload_spec;

static int tensors_pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

/* "2,4,128,64" → shape. 0, or -1. */
static int tensors_parse_shape(const char *s, int64_t *shape, int *ndim)
{
    *ndim = 0;
    if (!*s) return 0; /* a scalar */
    for (;;) {
        char *end;
        long long v;
        if (!isdigit((unsigned char)*s) || *ndim >= TENSOR_MAX_DIMS) return -1;
        errno = 0;
        v = strtoll(s, &end, 10);
        if (errno || v < 0 || v > (1LL << 40)) return -1;
        shape[(*ndim)++] = v;
        if (*end == '\0') return 0;
        if (*end != ',') return -1;
        s = end + 1;
    }
}

static const char *query_str(const http_request *req, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(req->query, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Parse the body into specs (*specs malloc'd; caller frees). 0, or -1 with e (400). */
static int tensors_parse_body(http_request *req, upload_spec **specs, int *count, int *multi, api_error *e)
{
    const char *format = query_str(req, "format"), *dtype = query_str(req, "dtype"),
               *shape = query_str(req, "shape"), *name = query_str(req, "name");
    uint64_t size = req->body_len, header_len = 0;
    uint8_t prefix[16];
    size_t np = size < sizeof prefix ? (size_t)size : sizeof prefix;
    uint8_t *header = NULL;
    char err[300];
    upload_spec *s;

    *specs = NULL, *count = 0, *multi = 0; /* the query was checked at admission (tensors_check_query) */
    if (np && tensors_pread_all(req->body_fd, prefix, np, 0) != 0)
        return api_fail(e, 500, "internal", "", "cannot read the upload back: %s", strerror(errno));
    if (!format) { /* by content: the npy magic, else raw when a shape is given, else safetensors */
        if (np >= 6 && memcmp(prefix, "\x93NUMPY", 6) == 0) format = "npy";
        else if (shape) format = "raw";
        else format = "safetensors";
    }
    if (strcmp(format, "raw") == 0) {
        attn_dtype dt;
        uint64_t elems = 1;
        int i;
        s = calloc(1, sizeof *s);
        if (!s) return api_fail(e, 500, "internal", "", "out of memory");
        if (!dtype || attn_dtype_parse(dtype, &dt) != 0) {
            free(s);
            return api_fail(e, 400, "bad_value", "dtype", "a raw upload needs dtype=bf16, fp16 or fp32");
        }
        if (!shape || tensors_parse_shape(shape, s->shape, &s->ndim) != 0) {
            free(s);
            return api_fail(e, 400, "bad_value", "shape", "a raw upload needs shape=D0,D1,… (at most %d non-negative integers)",
                            TENSOR_MAX_DIMS);
        }
        for (i = 0; i < s->ndim; i++)
            if (__builtin_mul_overflow(elems, (uint64_t)s->shape[i], &elems)) {
                free(s);
                return api_fail(e, 400, "size_mismatch", "shape", "shape [%s]: the element count overflows", shape);
            }
        s->dtype = dt;
        if (__builtin_mul_overflow(elems, (uint64_t)attn_dtype_bytes(dt), &s->bytes) || s->bytes != size) {
            free(s);
            return api_fail(e, 400, "size_mismatch", "shape", "shape [%s] of %s needs %llu elements of %zu bytes; the body has %llu bytes",
                            shape, dtype, (unsigned long long)elems, attn_dtype_bytes(dt), (unsigned long long)size);
        }
        snprintf(s->name, sizeof s->name, "%s", name ? name : "");
        *specs = s, *count = 1;
        return 0;
    }
    if (strcmp(format, "npy") == 0) {
        npy_info info;
        if (shape) return api_fail(e, 400, "conflict", "shape", "an npy upload carries its own shape; drop shape=");
        if (npy_header_length(prefix, np, size, &header_len, err, sizeof err) != 0)
            return api_fail(e, 400, "bad_npy", "", "%s", err);
        header = malloc((size_t)header_len);
        if (!header) return api_fail(e, 500, "internal", "", "out of memory");
        if (tensors_pread_all(req->body_fd, header, (size_t)header_len, 0) != 0) {
            free(header);
            return api_fail(e, 500, "internal", "", "cannot read the upload back");
        }
        if (npy_parse(header, (size_t)header_len, size, dtype, &info, err, sizeof err) != 0) {
            free(header);
            return api_fail(e, err[0] == 'd' ? 400 : 400, "bad_npy", "", "%s", err);
        }
        free(header);
        s = calloc(1, sizeof *s);
        if (!s) return api_fail(e, 500, "internal", "", "out of memory");
        s->dtype = info.dtype;
        s->ndim = info.ndim;
        memcpy(s->shape, info.shape, sizeof info.shape);
        s->offset = info.data_offset;
        s->bytes = info.data_bytes;
        snprintf(s->name, sizeof s->name, "%s", name ? name : "");
        *specs = s, *count = 1;
        return 0;
    }
    if (strcmp(format, "safetensors") == 0) {
        st_tensor *t = NULL;
        int n = 0, i;
        if (shape || dtype || name)
            return api_fail(e, 400, "conflict", shape ? "shape" : dtype ? "dtype" : "name",
                            "a safetensors upload names and shapes its own tensors; drop shape, dtype and name");
        if (st_header_length(prefix, np, size, &header_len, err, sizeof err) != 0)
            return api_fail(e, 400, "bad_safetensors", "", "%s%s", err,
                            np >= 6 && memcmp(prefix, "\x93NUMPY", 6) != 0 && !shape
                                ? " (raw uploads need dtype= and shape=; npy files start with \\x93NUMPY)"
                                : "");
        header = malloc((size_t)header_len);
        if (!header) return api_fail(e, 500, "internal", "", "out of memory");
        if (tensors_pread_all(req->body_fd, header, (size_t)header_len, 0) != 0) {
            free(header);
            return api_fail(e, 500, "internal", "", "cannot read the upload back");
        }
        if (st_parse(header, (size_t)header_len, size, &t, &n, err, sizeof err) != 0) {
            free(header);
            return api_fail(e, 400, "bad_safetensors", "", "%s", err);
        }
        free(header);
        if (n == 0) {
            free(t);
            return api_fail(e, 400, "bad_safetensors", "", "safetensors: the file holds no tensor");
        }
        s = calloc((size_t)n, sizeof *s);
        if (!s) {
            free(t);
            return api_fail(e, 500, "internal", "", "out of memory");
        }
        for (i = 0; i < n; i++) {
            snprintf(s[i].name, sizeof s[i].name, "%s", t[i].name);
            s[i].dtype = t[i].dtype;
            s[i].ndim = t[i].ndim;
            memcpy(s[i].shape, t[i].shape, sizeof t[i].shape);
            s[i].offset = t[i].offset;
            s[i].bytes = t[i].bytes;
        }
        free(t);
        *specs = s, *count = n, *multi = 1;
        return 0;
    }
    return api_fail(e, 400, "bad_value", "format", "format must be raw, npy or safetensors, got '%.40s'", format);
}

/* The device of an upload: ?device=, else the first GPU, else cpu. 0, or -1 with e. */
static int tensors_pick_device(const http_request *req, char *device, size_t len, api_error *e)
{
    const char *d = query_str(req, "device");
    if (!d) d = pool_default_device(0);
    if (!d) d = "cpu";
    if (!run_request_device_valid(d))
        return api_fail(e, 400, "bad_device", "device", "device must be cpu or cuda:N, got '%.40s'", d);
    if (pool_device_generation(d) < 0)
        return api_fail(e, 503, "no_device", "device", "device %s is not served here or is down (see GET /v1/device)", d);
    snprintf(device, len, "%s", d);
    return 0;
}

/* ---------------------------------------------------------------- admission ------------- */

/* What an upload holds from its headers to its end (tensors_upload_admit … _release): its
 * device, the bytes reserved there for its body (as declared, or as a chunked body grows)
 * and its entries promised in the table. The reservation covers the body while it arrives
 * and the tensors while the worker copies them; the handler moves the tensors' bytes from it
 * to the table when it lists them, under the same lock, so the budget never counts a byte
 * twice or not at all.
 *
 * What the front knows of a device's memory, read once at admission: the worker's hello
 * says the device's total memory and, on a GPU, the free memory when the worker started
 * (before it held any tensor); the cpu device's free memory is the host's MemAvailable, read
 * by the front itself (same host). The body is also staged in host memory (the memfd) on
 * its way to any device, so it must fit in MemAvailable as well. */
typedef struct tensor_upload_hold {
    char device[16];
    int on_cpu, chunked;
    long long budget_bytes;       /* memory_budget_bytes; 0: the device's free memory */
    long long max_upload_bytes;
    double device_total_bytes;    /* the hello's memory_total_bytes; 0 when unknown */
    double device_free_bytes;     /* a GPU's memory_free_bytes at its hello; < 0 when unknown */
    double host_avail_bytes;      /* MemAvailable at the last reading */
    double host_counted_bytes;    /* this body's bytes in the memfd at that reading */
    double reserved_bytes;        /* this upload's part of tensors_reserved[device] */
    int slots;                    /* this upload's part of tensors_slots_held */
} tensor_upload_hold;

/* A chunked body is reserved up to its next MiB (so its growth takes the lock once a MiB,
 * not once a 64 KiB piece), or to the byte when that does not fit. MemAvailable is read
 * again after each 64 MiB it grows. */
#define TENSORS_GROW_STEP_BYTES ((double)(1 << 20))
#define TENSORS_HOST_READ_BYTES ((double)(64 << 20))

static const char *const tensors_upload_params[] = {"device", "format", "dtype", "shape", "name"};

/* The query of an upload, as far as it can be judged without the body: unknown parameters,
 * a bad name, format, dtype or shape, parameters that conflict with the format, and a raw
 * body whose declared length (>= 0; -1 unknown) is not shape × dtype. 0, or -1 with e (400). */
static int tensors_check_query(const http_request *req, long long declared, api_error *e)
{
    const char *format = query_str(req, "format"), *dtype = query_str(req, "dtype"),
               *shape = query_str(req, "shape"), *name = query_str(req, "name");
    const cJSON *item;
    char why[80];
    int64_t dims[TENSOR_MAX_DIMS];
    int ndim = 0, i, n_params = (int)(sizeof tensors_upload_params / sizeof tensors_upload_params[0]);
    attn_dtype dt;

    cJSON_ArrayForEach(item, req->query) {
        const char *key = item->string ? item->string : "";
        for (i = 0; i < n_params && strcmp(key, tensors_upload_params[i]) != 0; i++) continue;
        if (i == n_params)
            return api_fail(e, 400, "unknown_parameter", key,
                            "unknown parameter '%.60s'; known: device, format, dtype, shape, name", key);
    }
    if (name && strlen(name) >= TENSOR_NAME_MAX)
        return api_fail(e, 400, "bad_value", "name", "name is longer than %d bytes", TENSOR_NAME_MAX - 1);
    if (name && st_name_check(name, strlen(name), why, sizeof why) != 0)
        return api_fail(e, 400, "bad_value", "name", "name is refused: %s (names must be UTF-8 without control characters)",
                        why);
    if (format && strcmp(format, "raw") && strcmp(format, "npy") && strcmp(format, "safetensors"))
        return api_fail(e, 400, "bad_value", "format", "format must be raw, npy or safetensors, got '%.40s'", format);
    if (format && !strcmp(format, "safetensors") && (shape || dtype || name))
        return api_fail(e, 400, "conflict", shape ? "shape" : dtype ? "dtype" : "name",
                        "a safetensors upload names and shapes its own tensors; drop shape, dtype and name");
    if (format && !strcmp(format, "npy") && shape)
        return api_fail(e, 400, "conflict", "shape", "an npy upload carries its own shape; drop shape=");
    if (dtype && attn_dtype_parse(dtype, &dt) != 0)
        return api_fail(e, 400, "bad_value", "dtype", "dtype must be bf16, fp16 or fp32, got '%.40s'", dtype);
    if (shape && tensors_parse_shape(shape, dims, &ndim) != 0)
        return api_fail(e, 400, "bad_value", "shape", "shape must be D0,D1,… (at most %d non-negative integers), got '%.40s'",
                        TENSOR_MAX_DIMS, shape);
    if (format && !strcmp(format, "raw") && !dtype)
        return api_fail(e, 400, "bad_value", "dtype", "a raw upload needs dtype=bf16, fp16 or fp32");
    if (format && !strcmp(format, "raw") && !shape)
        return api_fail(e, 400, "bad_value", "shape", "a raw upload needs shape=D0,D1,… (at most %d non-negative integers)",
                        TENSOR_MAX_DIMS);
    /* Raw (given, or implied by shape=): the declared length must be shape × dtype. (A body
     * that turns out to be npy with shape= is refused either way.) */
    if ((!format || !strcmp(format, "raw")) && shape && dtype && declared >= 0) {
        uint64_t bytes = attn_dtype_bytes(dt);
        for (i = 0; i < ndim; i++)
            if (__builtin_mul_overflow(bytes, (uint64_t)dims[i], &bytes))
                return api_fail(e, 400, "size_mismatch", "shape", "shape [%s]: the byte count overflows", shape);
        if (bytes != (uint64_t)declared)
            return api_fail(e, 400, "size_mismatch", "shape", "shape [%s] of %s needs %llu bytes; the body has %lld bytes",
                            shape, dtype, (unsigned long long)bytes, declared);
    }
    return 0;
}

/* May h's body grow to total bytes (more than it has reserved)? 0, or -1 with e: 507 past the
 * budget, the device's memory or the host's (where the body waits). Under tensors_mu; gen:
 * the device's worker generation (its live tensors count). */
static int tensors_fits_locked(const tensor_upload_hold *h, int gen, double total, api_error *e)
{
    double others = tensors_reserved_locked(h->device) - h->reserved_bytes; /* other uploads' and runs' */
    double resident = tensors_resident_locked(h->device, gen), free_bytes;
    const char *cut = h->chunked ? " (a chunked body: cut off there)" : "";

    if (h->device_total_bytes > 0 && total > h->device_total_bytes)
        return api_fail(e, 507, "insufficient_storage", "", "the upload needs %.0f bytes%s; %s has %.0f bytes of memory in all",
                        total, cut, h->device, h->device_total_bytes);
    if (h->budget_bytes > 0) {
        free_bytes = (double)h->budget_bytes - resident - others;
        if (total > free_bytes)
            return api_fail(e, 507, "insufficient_storage", "",
                            "the upload needs %.0f bytes%s on %s; %.0f of memory_budget_bytes=%lld are free", total, cut,
                            h->device, free_bytes > 0 ? free_bytes : 0.0, h->budget_bytes);
    } else if (h->on_cpu) { /* resident tensors are already out of MemAvailable */
        free_bytes = h->host_avail_bytes + h->host_counted_bytes - others;
        if (total > free_bytes)
            return api_fail(e, 507, "insufficient_storage", "",
                            "the upload needs %.0f bytes%s on cpu; %.0f bytes of host memory are free (MemAvailable, less "
                            "the uploads and runs under way; memory_budget_bytes=0)",
                            total, cut, free_bytes > 0 ? free_bytes : 0.0);
    } else if (h->device_free_bytes >= 0) {
        free_bytes = h->device_free_bytes - resident - others;
        if (total > free_bytes)
            return api_fail(e, 507, "insufficient_storage", "",
                            "the upload needs %.0f bytes%s on %s; about %.0f bytes are free there (memory_budget_bytes=0: "
                            "the device's free memory when its worker started, less its tensors and the uploads and runs "
                            "under way)", total, cut, h->device, free_bytes > 0 ? free_bytes : 0.0);
    }
    if (total - h->host_counted_bytes > h->host_avail_bytes)
        return api_fail(e, 507, "insufficient_storage", "",
                        "the upload needs %.0f bytes%s; its body waits in host memory until it is copied to %s, and the "
                        "host has %.0f bytes available", total, cut, h->device, h->host_avail_bytes);
    return 0;
}

/* Reserve h's body up to total bytes (to the next TENSORS_GROW_STEP_BYTES when that fits).
 * 0, or -1 with e. Under tensors_mu. */
static int tensors_grow_locked(tensor_upload_hold *h, int gen, double total, api_error *e)
{
    double target = total;

    if (total <= h->reserved_bytes) return 0;
    if (h->chunked) {
        double step = ceil(total / TENSORS_GROW_STEP_BYTES) * TENSORS_GROW_STEP_BYTES;
        if (h->max_upload_bytes > 0 && step > (double)h->max_upload_bytes) step = (double)h->max_upload_bytes;
        if (step > total && tensors_fits_locked(h, gen, step, e) == 0) target = step;
    }
    if (target == total && tensors_fits_locked(h, gen, total, e) != 0) return -1;
    if (tensors_reserve_add_locked(h->device, target - h->reserved_bytes) != 0)
        return api_fail(e, 500, "internal", "", "no room to account for device %s's reservations", h->device);
    h->reserved_bytes = target;
    return 0;
}

int tensors_upload_admit(const http_request *req, unsigned long long declared, void **hold, api_error *e)
{
    tensor_upload_hold *h;
    int chunked = declared == HTTP_LENGTH_CHUNKED, gen, rc;
    const cJSON *total, *free_b;
    cJSON *dev;

    *hold = NULL;
    if (tensors_check_query(req, chunked || declared > (unsigned long long)LLONG_MAX ? -1 : (long long)declared, e) != 0)
        return -1;
    if (!chunked && declared == 0)
        return api_fail(e, 400, "missing_body", "", "POST /v1/tensors needs a body (raw bytes, .npy or safetensors)");
    h = calloc(1, sizeof *h);
    if (!h) return api_fail(e, 500, "internal", "", "out of memory");
    if (tensors_pick_device(req, h->device, sizeof h->device, e) != 0) {
        free(h);
        return -1;
    }
    h->on_cpu = !strcmp(h->device, "cpu");
    h->chunked = chunked;
    h->budget_bytes = req->settings->memory_budget_bytes;
    h->max_upload_bytes = req->settings->max_upload_bytes;
    if (!chunked && h->max_upload_bytes > 0 && declared > (unsigned long long)h->max_upload_bytes) {
        free(h);
        return api_fail(e, 413, "body_too_large", "", "the upload's %llu bytes are over max_upload_bytes=%lld", declared,
                        req->settings->max_upload_bytes);
    }
    dev = pool_device_json(h->device);
    total = cJSON_GetObjectItemCaseSensitive(dev, "memory_total_bytes");
    free_b = cJSON_GetObjectItemCaseSensitive(dev, "memory_free_bytes");
    h->device_total_bytes = cJSON_IsNumber(total) && total->valuedouble > 0 ? total->valuedouble : 0.0;
    h->device_free_bytes = cJSON_IsNumber(free_b) ? free_b->valuedouble : -1.0;
    cJSON_Delete(dev);
    h->host_avail_bytes = host_memory_available_bytes();
    gen = pool_device_generation(h->device);

    pthread_mutex_lock(&tensors_mu);
    rc = tensors_take_slots_locked(1, 0, "an upload needs", e);
    if (rc == 0) h->slots = 1;
    if (rc == 0 && !chunked) rc = tensors_grow_locked(h, gen, (double)declared, e);
    tensors_publish_locked(h->device, gen); /* also catches up after a worker restart */
    pthread_mutex_unlock(&tensors_mu);
    if (rc != 0) {
        tensors_upload_release(h);
        return -1;
    }
    *hold = h;
    return 0;
}

int tensors_upload_grow(void *hold, unsigned long long total, api_error *e)
{
    tensor_upload_hold *h = hold;
    int gen, rc;

    if (!h || (double)total <= h->reserved_bytes) return 0;
    if (h->max_upload_bytes > 0 && total > (unsigned long long)h->max_upload_bytes)
        return api_fail(e, 413, "body_too_large", "", "the upload passed max_upload_bytes=%lld (a chunked body: cut off there)",
                        h->max_upload_bytes);
    if ((double)total - h->host_counted_bytes > TENSORS_HOST_READ_BYTES) { /* read again, with what is in the memfd */
        h->host_avail_bytes = host_memory_available_bytes();
        h->host_counted_bytes = h->reserved_bytes;
    }
    gen = pool_device_generation(h->device);
    pthread_mutex_lock(&tensors_mu);
    rc = tensors_grow_locked(h, gen, (double)total, e);
    pthread_mutex_unlock(&tensors_mu);
    return rc;
}

void tensors_upload_release(void *hold)
{
    tensor_upload_hold *h = hold;

    if (!h) return;
    pthread_mutex_lock(&tensors_mu);
    tensors_unreserve_locked(h->device, h->reserved_bytes);
    tensors_slots_held -= h->slots;
    pthread_mutex_unlock(&tensors_mu);
    free(h);
}

/* The worker's error/failed reply as an api_error. */
static void tensors_reply_error(const cJSON *reply, int status, api_error *e)
{
    const cJSON *err = cJSON_GetObjectItem(reply, "error"), *type = cJSON_GetObjectItem(reply, "type");
    const cJSON *st = cJSON_GetObjectItem(err, "status"), *code = cJSON_GetObjectItem(err, "code"),
                *msg = cJSON_GetObjectItem(err, "message"), *field = cJSON_GetObjectItem(err, "field");
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "failed")) {
        const cJSON *m = cJSON_GetObjectItem(reply, "message");
        api_fail(e, 500, "tensor_op_failed", "", "%s", cJSON_IsString(m) ? m->valuestring : "the worker failed");
        return;
    }
    api_fail(e, cJSON_IsNumber(st) ? (int)st->valuedouble : status >= 400 ? status : 500,
             cJSON_IsString(code) ? code->valuestring : "tensor_op_failed", cJSON_IsString(field) ? field->valuestring : "",
             "%s", cJSON_IsString(msg) ? msg->valuestring : "the worker refused the tensor operation");
}

/* Send msg to device; 0 with *reply a tensor_result (caller deletes), or -1 with e. */
static int tensors_exchange(const char *device, cJSON *msg, int fd, cJSON **reply, int *reply_fd, int *gen, api_error *e)
{
    int status = pool_tensor_op(device, msg, fd, reply, reply_fd, gen);
    const cJSON *type = cJSON_GetObjectItem(*reply, "type");

    if (status == 200 && cJSON_IsString(type) && !strcmp(type->valuestring, "tensor_result")) return 0;
    tensors_reply_error(*reply, status, e);
    cJSON_Delete(*reply);
    *reply = NULL;
    if (*reply_fd >= 0) close(*reply_fd);
    *reply_fd = -1;
    return -1;
}

/* The upload's body was admitted (tensors_upload_admit: the query checked, its bytes and
 * one table entry reserved on its device); here it is parsed, the rest of its entries are
 * promised (a safetensors file holds several), and it goes to the worker. */
void route_tensor_upload(http_request *req)
{
    upload_spec *specs = NULL;
    int count = 0, multi = 0, i, j, gen = -1, now_gen, reply_fd = -1, rc;
    const char *device;
    char what[64];
    double total = 0.0, moved, sent_s;
    upload_timing timing;
    api_error e;
    cJSON *msg = NULL, *list, *reply = NULL, *answer = NULL, *arr, *timing_json;
    const cJSON *worker_copy_s, *worker_fingerprint_s;
    tensor_entry *entries = NULL;
    tensor_upload_hold *hold = req->hold;
    void *own = NULL; /* a hold admitted here, released at the end */

    memset(&e, 0, sizeof e);
    /* http.c admits every upload before its body; a caller that did not gets it done here. */
    if (!hold) {
        if (tensors_upload_admit(req, req->body_fd >= 0 ? req->body_len : 0, &own, &e) != 0) {
            http_send_error(req, &e);
            return;
        }
        hold = own;
    }
    device = hold->device;
    if (req->body_fd < 0 || req->body_len == 0) {
        api_fail(&e, 400, "missing_body", "", "POST /v1/tensors needs a body (raw bytes, .npy or safetensors)");
        goto out;
    }
    if (tensors_parse_body(req, &specs, &count, &multi, &e) != 0) goto out;
    for (i = 0; i < count; i++) total += (double)specs[i].bytes;
    /* The body is reserved (the tensors lie inside it: total <= body_len); its table entries
     * are promised before the worker stores anything, so every tensor it stores is listed. */
    snprintf(what, sizeof what, "the file's %d tensors need", count);
    gen = pool_device_generation(device);
    pthread_mutex_lock(&tensors_mu);
    rc = tensors_grow_locked(hold, gen, (double)req->body_len, &e);
    if (rc == 0) rc = tensors_take_slots_locked(count, hold->slots, what, &e);
    if (rc == 0 && count > hold->slots) hold->slots = count;
    pthread_mutex_unlock(&tensors_mu);
    if (rc != 0) goto out;

    entries = calloc((size_t)count, sizeof *entries);
    msg = cJSON_CreateObject();
    if (!entries || !msg) {
        api_fail(&e, 500, "internal", "", "out of memory");
        goto out;
    }
    pthread_mutex_lock(&tensors_mu);
    for (i = 0; i < count; i++) tensors_new_id_locked(entries[i].id, sizeof entries[i].id, device);
    pthread_mutex_unlock(&tensors_mu);
    cJSON_AddStringToObject(msg, "type", "tensor_put");
    cJSON_AddNumberToObject(msg, "budget", (double)req->settings->memory_budget_bytes);
    list = cJSON_AddArrayToObject(msg, "tensors");
    for (i = 0; i < count; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "id", entries[i].id);
        cJSON_AddNumberToObject(t, "offset", (double)specs[i].offset);
        cJSON_AddNumberToObject(t, "bytes", (double)specs[i].bytes);
        cJSON_AddItemToArray(list, t);
    }
    sent_s = clock_monotonic_s();
    if (tensors_exchange(device, msg, req->body_fd, &reply, &reply_fd, &gen, &e) != 0) goto out;
    if (reply_fd >= 0) close(reply_fd);
    worker_copy_s = cJSON_GetObjectItem(reply, "copy_s");
    worker_fingerprint_s = cJSON_GetObjectItem(reply, "fingerprint_s");
    memset(&timing, 0, sizeof timing);
    timing.receive_s = req->received_s - req->arrived_s;
    timing.copy_s = cJSON_IsNumber(worker_copy_s) ? worker_copy_s->valuedouble : 0.0;
    timing.fingerprint_s = cJSON_IsNumber(worker_fingerprint_s) ? worker_fingerprint_s->valuedouble : 0.0;
    timing.queue_s = clock_monotonic_s() - sent_s - timing.copy_s - timing.fingerprint_s;
    if (timing.queue_s < 0) timing.queue_s = 0.0;

    arr = cJSON_GetObjectItem(reply, "tensors");
    answer = multi ? cJSON_CreateObject() : NULL;
    /* Listed, and their bytes moved from the upload's reservation to the table, at once. */
    now_gen = pool_device_generation(device); /* the gauge: what the worker holds now */
    pthread_mutex_lock(&tensors_mu);
    for (i = 0; i < count; i++) {
        tensor_entry *t = &entries[i];
        const cJSON *r = cJSON_GetArrayItem(arr, i), *fp = cJSON_GetObjectItem(r, "fingerprint");
        snprintf(t->name, sizeof t->name, "%s", specs[i].name[0] ? specs[i].name : t->id);
        snprintf(t->device, sizeof t->device, "%s", device);
        t->generation = gen;
        t->dtype = specs[i].dtype;
        t->ndim = specs[i].ndim;
        for (j = 0; j < t->ndim; j++) t->shape[j] = specs[i].shape[j];
        t->bytes = specs[i].bytes;
        snprintf(t->fingerprint, sizeof t->fingerprint, "%s", cJSON_IsString(fp) ? fp->valuestring : "");
        clock_text_now_iso(t->created, sizeof t->created);
        if (tensors_add_locked(t) != 0) /* cannot happen: the slot's room was made when it was promised */
            log_error("tensor table: no room for tensor %s, which is on %s but not listed", t->id, device);
    }
    tensors_slots_held -= count;
    hold->slots -= count;
    moved = total < hold->reserved_bytes ? total : hold->reserved_bytes;
    tensors_unreserve_locked(device, moved);
    hold->reserved_bytes -= moved;
    tensors_publish_locked(device, now_gen);
    pthread_mutex_unlock(&tensors_mu);
    if (multi) {
        cJSON *items = cJSON_AddArrayToObject(answer, "tensors");
        for (i = 0; i < count; i++) cJSON_AddItemToArray(items, tensor_json(&entries[i], 0));
    } else {
        answer = tensor_json(&entries[0], 0);
    }
    timing.total_s = clock_monotonic_s() - req->arrived_s;
    timing_json = upload_timing_json(&timing);
    if (!answer || !timing_json || !cJSON_AddItemToObject(answer, "timing", timing_json)) {
        cJSON_Delete(timing_json);
        cJSON_Delete(answer); /* the tensors are stored and listed: only the answer is lost */
        answer = NULL;
        api_fail(&e, 500, "internal", "", "out of memory for the answer (the upload is stored: GET /v1/tensors)");
        goto out;
    }
    log_info("tensors: %s%s uploaded to %s, %.0f bytes: received in %.3f s (%.2f GB/s), queued %.3f s, "
             "copied %.3f s (%.2f GB/s), fingerprinted %.3f s (%.2f GB/s); %.3f s in all (%.2f GB/s)",
             entries[0].id, count > 1 ? " and more" : "", device, (double)req->body_len, timing.receive_s,
             tensors_gbps((double)req->body_len, timing.receive_s), timing.queue_s, timing.copy_s,
             tensors_gbps(total, timing.copy_s), timing.fingerprint_s, tensors_gbps(total, timing.fingerprint_s),
             timing.total_s, tensors_gbps((double)req->body_len, timing.total_s));

out:
    if (answer) {
        char loc[64];
        if (!multi) {
            snprintf(loc, sizeof loc, "/v1/tensors/%s", entries[0].id);
            http_add_header(req, "Location", loc);
        }
        http_send_json(req, 201, answer);
    } else {
        http_send_error(req, &e);
    }
    cJSON_Delete(answer);
    cJSON_Delete(reply);
    cJSON_Delete(msg);
    free(entries);
    free(specs);
    tensors_upload_release(own); /* http.c releases the hold it admitted, after this returns */
}

/* ---------------------------------------------------------------- reads, delete --------- */

void route_tensor_list(http_request *req)
{
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "tensors");
    tensor_entry *copy = NULL;
    int n, i;

    pthread_mutex_lock(&tensors_mu);
    n = tensors_count;
    if (n) copy = malloc((size_t)n * sizeof *copy);
    if (copy) memcpy(copy, tensors_table, (size_t)n * sizeof *copy);
    else n = 0;
    pthread_mutex_unlock(&tensors_mu);
    for (i = 0; i < n; i++)
        if (!copy[i].pending)
            cJSON_AddItemToArray(arr, tensor_json(&copy[i], pool_device_generation(copy[i].device) != copy[i].generation));
    free(copy);
    http_send_json(req, 200, o);
    cJSON_Delete(o);
}

void route_tensor_get(http_request *req)
{
    tensor_entry t;
    api_error e;
    cJSON *o;

    if (tensors_lookup(req->id, "id", &t, &e) != 0) {
        http_send_error(req, &e);
        return;
    }
    o = tensor_json(&t, 0);
    http_send_json(req, 200, o);
    cJSON_Delete(o);
}

/* ---------------------------------------------------------------- streamed download ----- */

/* Downloads from this size on are sent while the worker fills them; smaller ones are
 * filled, then sent with sendfile (their fill takes a few ms, and sendfile copies less). */
#define TENSORS_STREAM_MIN_BYTES ((uint64_t)8 << 20)
/* Bytes per call of the answer's reader: one pread into libmicrohttpd's buffer, one send. */
#define TENSORS_STREAM_BLOCK_BYTES ((size_t)4 << 20)

/* A download sent while the worker fills it. The front makes the memfd with its final size
 * plus one page past the body (tensor_download_progress, common/proto.h), passes it with
 * the tensor_get message, and one thread waits for the worker's answer (pool_tensor_op)
 * while the connection's thread sends what the worker has published as filled. Freed by
 * whichever of the two lets go last (refs). */
typedef struct tensor_download {
    pthread_mutex_t mu;
    int refs;                             /* the exchange's thread, the answer (or the route) */
    int fd;                               /* the memfd: body [0, total), then the progress page */
    tensor_download_progress *progress;   /* the front's mapping of that page */
    uint64_t total;
    char id[32], device[16], format[8];
    cJSON *msg;                           /* the tensor_get message, the exchange's thread's */
    double arrived_s, sent_s, started_s, queued_s;
    /* The exchange's end, written by its thread before it stores done (release). */
    int done, ok, status;
    cJSON *reply;
    double fill_s;                        /* the worker's, or 0 when it did not say (see ended_s) */
    double ended_s;
    /* The answer's end (http_stream_done). */
    int answered;
    int fill_failed;                      /* the reader cut the answer because the fill failed */
    unsigned long long bytes_sent;
    int complete;
    double answered_s;
} tensor_download;

static void tensors_download_release(tensor_download *d)
{
    int last;

    pthread_mutex_lock(&d->mu);
    last = --d->refs == 0;
    pthread_mutex_unlock(&d->mu);
    if (!last) return;
    if (d->answered) { /* the download's line: its phases, how much left, and why it stopped short */
        double send_s = d->answered_s - d->queued_s;
        const cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(d->reply, "error"), "message");
        const char *why = d->fill_failed ? " — cut short: the fill failed: "
                          : !d->complete ? " — cut short: the client went away"
                          : !d->ok ? " — the fill failed after its last byte: " : "";
        int failed = d->fill_failed || (d->complete && !d->ok); /* a client that left is no fault: info */

        if (!m) m = cJSON_GetObjectItem(d->reply, "message"); /* a "failed" answer */
        if (d->fill_s <= 0) d->fill_s = d->ended_s - d->started_s; /* it did not say: until its answer */
        log_msg(failed ? LOG_WARN : LOG_INFO,
            "tensors: %s downloaded (%s, streamed) from %s: queued %.3f s, filled %.3f s (%.2f GB/s); sent %llu of "
            "%llu bytes in %.3f s (%.2f GB/s), %.3f s from the request%s%s", d->id, d->format, d->device,
            d->started_s - d->sent_s, d->fill_s, tensors_gbps((double)d->total, d->fill_s), d->bytes_sent,
            (unsigned long long)d->total, send_s, tensors_gbps((double)d->bytes_sent, send_s),
            d->answered_s - d->arrived_s,
            why, failed ? (cJSON_IsString(m) ? m->valuestring : "the worker was lost") : "");
    }
    munmap(d->progress, sizeof *d->progress);
    close(d->fd);
    cJSON_Delete(d->msg);
    cJSON_Delete(d->reply);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* The exchange's thread: the worker's answer comes once the fill has ended (or failed, or
 * the worker was lost: crash, job timeout, stop). */
static void *tensors_download_exchange(void *arg)
{
    tensor_download *d = arg;
    cJSON *reply = NULL;
    int reply_fd = -1, gen, status;
    const cJSON *type, *fill;

    status = pool_tensor_op(d->device, d->msg, d->fd, &reply, &reply_fd, &gen);
    if (reply_fd >= 0) close(reply_fd); /* a streamed tensor_get answers none */
    type = cJSON_GetObjectItem(reply, "type");
    fill = cJSON_GetObjectItem(reply, "fill_s");
    d->reply = reply;
    d->status = status;
    d->ok = status == 200 && cJSON_IsString(type) && !strcmp(type->valuestring, "tensor_result");
    d->fill_s = d->ok && cJSON_IsNumber(fill) ? fill->valuedouble : 0.0;
    d->ended_s = clock_monotonic_s();
    __atomic_store_n(&d->done, 1, __ATOMIC_RELEASE);
    tensors_download_release(d);
    return NULL;
}

/* Sleep a little longer each time a waiter finds nothing new (50 µs up to 2 ms). */
static void tensors_backoff(long *ns)
{
    struct timespec ts = {0, *ns};
    nanosleep(&ts, NULL);
    if (*ns < 2000000) *ns *= 2;
}

/* The answer's reader (http_stream_reader): what the worker has filled past pos, waiting
 * for it when the send has caught up with the fill; -1 once the fill failed. */
static long tensors_download_read(void *cls, unsigned long long pos, char *buf, size_t max)
{
    tensor_download *d = cls;
    long ns = 50000;

    for (;;) {
        uint64_t filled = __atomic_load_n(&d->progress->filled, __ATOMIC_ACQUIRE);
        int done = __atomic_load_n(&d->done, __ATOMIC_ACQUIRE);
        if ((done && !d->ok) || __atomic_load_n(&d->progress->state, __ATOMIC_ACQUIRE) == TENSOR_DOWNLOAD_FAILED) {
            d->fill_failed = 1;
            return -1;
        }
        if (done) filled = d->total;
        if (filled > d->total) filled = d->total;
        if (filled > pos) {
            size_t n = filled - pos < max ? (size_t)(filled - pos) : max;
            if (tensors_pread_all(d->fd, buf, n, pos) != 0) {
                log_error("tensors: reading download %s from its memfd: %s", d->id, strerror(errno));
                return -1;
            }
            return (long)n;
        }
        tensors_backoff(&ns);
    }
}

/* The answer is done with (http_stream_done): when it stopped short, tell the worker to
 * stop filling (it checks between pieces), so a client that went away frees its slot. */
static void tensors_download_answered(void *cls, unsigned long long sent, int complete)
{
    tensor_download *d = cls;

    d->answered_s = clock_monotonic_s();
    d->bytes_sent = sent;
    d->complete = complete;
    if (!complete) __atomic_store_n(&d->progress->cancel, 1, __ATOMIC_RELEASE);
    tensors_download_release(d);
}

/* Send t (total bytes: the npy header, if any, and the data) while its worker fills it.
 * msg: the tensor_get message (taken). Answers the request whatever happens. */
static void tensors_download_streamed(http_request *req, const tensor_entry *t, const char *format, cJSON *msg,
                                      uint64_t total)
{
    long page = sysconf(_SC_PAGESIZE), ns = 50000;
    uint64_t progress_off;
    tensor_download *d = calloc(1, sizeof *d);
    pthread_t thread;
    pthread_attr_t attr;
    api_error e;
    char timing[80];
    int err;

    if (!d || page <= 0) {
        free(d);
        cJSON_Delete(msg);
        http_fail(req, 500, "internal", "", "out of memory for the download of %s", t->id);
        return;
    }
    progress_off = (total + (uint64_t)page - 1) / (uint64_t)page * (uint64_t)page;
    d->fd = memfd_create("attnd-download", MFD_CLOEXEC);
    if (d->fd < 0 || ftruncate(d->fd, (off_t)(progress_off + (uint64_t)page)) != 0 ||
        (d->progress = mmap(NULL, sizeof *d->progress, PROT_READ | PROT_WRITE, MAP_SHARED, d->fd,
                            (off_t)progress_off)) == MAP_FAILED) {
        int saved = errno;
        if (d->fd >= 0) close(d->fd);
        free(d);
        cJSON_Delete(msg);
        http_fail(req, 500, "internal", "", "memfd for the download of %s (%llu bytes): %s", t->id,
                  (unsigned long long)total, strerror(saved));
        return;
    }
    cJSON_AddNumberToObject(msg, "progress_offset", (double)progress_off);
    pthread_mutex_init(&d->mu, NULL);
    d->refs = 2;
    d->msg = msg;
    d->total = total;
    snprintf(d->id, sizeof d->id, "%s", t->id);
    snprintf(d->device, sizeof d->device, "%s", t->device);
    snprintf(d->format, sizeof d->format, "%s", format ? format : "npy");
    d->arrived_s = req->arrived_s;
    d->sent_s = clock_monotonic_s();
    err = pthread_attr_init(&attr);
    if (!err) {
        (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        err = pthread_create(&thread, &attr, &tensors_download_exchange, d);
        pthread_attr_destroy(&attr);
    }
    if (err) {
        d->refs = 1;
        tensors_download_release(d);
        http_fail(req, 500, "internal", "", "cannot start the download of %s: %s", t->id, strerror(err));
        return;
    }
    /* Wait for the worker to start the fill (jobs ahead of it in its queue first), or to
     * refuse: until then the answer can still be an error with its status. */
    while (__atomic_load_n(&d->progress->state, __ATOMIC_ACQUIRE) == TENSOR_DOWNLOAD_WAITING &&
           !__atomic_load_n(&d->done, __ATOMIC_ACQUIRE))
        tensors_backoff(&ns);
    d->started_s = clock_monotonic_s();
    if (__atomic_load_n(&d->done, __ATOMIC_ACQUIRE) && !d->ok) {
        tensors_reply_error(d->reply, d->status, &e);
        tensors_download_release(d);
        http_send_error(req, &e);
        return;
    }
    if (__atomic_load_n(&d->progress->total, __ATOMIC_ACQUIRE) != total) { /* the worker sized it otherwise */
        unsigned long long worker_total = __atomic_load_n(&d->progress->total, __ATOMIC_ACQUIRE);
        __atomic_store_n(&d->progress->cancel, 1, __ATOMIC_RELEASE);
        tensors_download_release(d);
        http_fail(req, 500, "internal", "", "the worker filled %llu bytes for tensor %s, the front expected %llu",
                  worker_total, t->id, (unsigned long long)total);
        return;
    }
    /* For clients (curl -D), in ms: the wait for the worker, and the time to the first
     * byte. The fill overlaps the send, so it is no longer a phase before the first byte. */
    snprintf(timing, sizeof timing, "queue;dur=%.1f, ttfb;dur=%.1f", (d->started_s - d->sent_s) * 1e3,
             (clock_monotonic_s() - req->arrived_s) * 1e3);
    (void)http_add_header(req, "Server-Timing", timing); /* logs when it cannot; the bytes go without it */
    d->answered = 1;
    d->queued_s = clock_monotonic_s();
    http_send_stream(req, 200, "application/octet-stream", total, TENSORS_STREAM_BLOCK_BYTES, &tensors_download_read,
                     &tensors_download_answered, d);
}

void route_tensor_data(http_request *req)
{
    const char *format = query_str(req, "format");
    tensor_entry t;
    api_error e;
    cJSON *msg, *reply = NULL;
    int reply_fd = -1, gen;
    const cJSON *bytes, *fill;
    double sent_s, exchange_s, fill_s, queue_s;
    char note[256], timing[80];

    if (format && strcmp(format, "npy") && strcmp(format, "raw")) {
        http_fail(req, 400, "bad_value", "format", "format must be npy or raw, got '%.40s'", format);
        return;
    }
    if (tensors_lookup(req->id, "id", &t, &e) != 0) {
        http_send_error(req, &e);
        return;
    }
    msg = cJSON_CreateObject();
    cJSON_AddStringToObject(msg, "type", "tensor_get");
    cJSON_AddStringToObject(msg, "id", t.id);
    if (!format || !strcmp(format, "npy")) { /* the worker writes the header (npy.h) */
        cJSON *shape = cJSON_AddArrayToObject(msg, "npy_shape");
        int i;
        for (i = 0; i < t.ndim; i++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t.shape[i]));
        cJSON_AddStringToObject(msg, "npy_dtype", attn_dtype_name(t.dtype));
    }
    if (t.bytes >= TENSORS_STREAM_MIN_BYTES) {
        char prefix[512];
        size_t plen = 0;
        if (!format || !strcmp(format, "npy")) plen = npy_write_header(prefix, sizeof prefix, t.dtype, t.ndim, t.shape);
        if (plen || (format && !strcmp(format, "raw"))) {
            tensors_download_streamed(req, &t, format, msg, plen + t.bytes);
            return;
        }
    }
    sent_s = clock_monotonic_s();
    if (tensors_exchange(t.device, msg, -1, &reply, &reply_fd, &gen, &e) != 0) {
        cJSON_Delete(msg);
        http_send_error(req, &e);
        return;
    }
    exchange_s = clock_monotonic_s() - sent_s;
    cJSON_Delete(msg);
    bytes = cJSON_GetObjectItem(reply, "bytes");
    fill = cJSON_GetObjectItem(reply, "fill_s");
    fill_s = cJSON_IsNumber(fill) ? fill->valuedouble : 0.0;
    if (reply_fd < 0 || !cJSON_IsNumber(bytes)) {
        cJSON_Delete(reply);
        if (reply_fd >= 0) close(reply_fd);
        http_fail(req, 500, "internal", "", "the worker sent no data for tensor %s", t.id);
        return;
    }
    queue_s = exchange_s - fill_s > 0 ? exchange_s - fill_s : 0.0;
    /* The phases before the first byte, for clients (curl -D): Server-Timing, in ms. */
    snprintf(timing, sizeof timing, "queue;dur=%.1f, fill;dur=%.1f", queue_s * 1e3, fill_s * 1e3);
    (void)http_add_header(req, "Server-Timing", timing); /* logs when it cannot; the bytes go without it */
    /* http.c logs it with the send's time once the last byte has left. */
    snprintf(note, sizeof note, "tensors: %s downloaded (%s) from %s: queued %.3f s, filled %.3f s (%.2f GB/s)", t.id,
             format ? format : "npy", t.device, queue_s, fill_s, tensors_gbps(bytes->valuedouble, fill_s));
    http_send_fd(req, 200, "application/octet-stream", reply_fd, (size_t)bytes->valuedouble, note);
    cJSON_Delete(reply);
}

/* Mark tensor id as being deleted, unless runs read it. 0; or -1 with e: 409 `in_use`
 * naming the runs (queued or running) that read it, 404 when another DELETE has it. */
static int tensors_begin_delete(const char *id, api_error *e)
{
    long long runs[8];
    char list[200];
    size_t used = 0;
    int i, readers = 0, claimed = 0, n, k;

    pthread_mutex_lock(&tensors_mu);
    i = tensors_index_locked(id);
    if (i >= 0 && !tensors_table[i].deleting) {
        readers = tensors_table[i].readers;
        claimed = !readers;
        if (claimed) tensors_table[i].deleting = 1;
    }
    pthread_mutex_unlock(&tensors_mu);
    if (claimed) return 0;
    if (!readers) /* it left the table since the lookup, or another DELETE has it */
        return api_fail(e, 404, "not_found", "id", "there is no tensor %.40s (another request deleted it)", id);
    /* Name the runs (best effort: the pins decide; a run may end between the two looks). */
    n = pool_runs_reading_tensor(id, runs, (int)(sizeof runs / sizeof runs[0]));
    list[0] = '\0';
    for (k = 0; k < n && k < (int)(sizeof runs / sizeof runs[0]) && used < sizeof list; k++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%lld", k ? ", " : "", runs[k]);
    if (n > k && used < sizeof list) snprintf(list + used, sizeof list - used, ", …");
    if (n == 0) /* the pins say a run holds it, but it is ending right now */
        return api_fail(e, 409, "in_use", "id", "tensor %s is read by a run that is ending; retry the DELETE", id);
    return api_fail(e, 409, "in_use", "id",
                    "tensor %s is read by %d run%s queued or running (%s %s); delete it once they end, or cancel "
                    "the queued ones (DELETE /v1/runs/ID)",
                    id, n, n == 1 ? "" : "s", n == 1 ? "run" : "runs", list);
}

/* A DELETE that did not go through: the tensor may be pinned and deleted again. */
static void tensors_end_delete(const char *id)
{
    int i;
    pthread_mutex_lock(&tensors_mu);
    i = tensors_index_locked(id);
    if (i >= 0) tensors_table[i].deleting = 0;
    pthread_mutex_unlock(&tensors_mu);
}

void route_tensor_delete(http_request *req)
{
    tensor_entry t;
    api_error e;
    cJSON *msg, *reply = NULL, *o;
    int reply_fd = -1, gen, i, rc;

    rc = tensors_lookup(req->id, "id", &t, &e);
    if (rc != 0 && e.status != 410) {
        http_send_error(req, &e);
        return;
    }
    if (rc == 0 && tensors_begin_delete(t.id, &e) != 0) { /* 409 while runs read it */
        http_send_error(req, &e);
        return;
    }
    if (rc == 0) {
        msg = cJSON_CreateObject();
        cJSON_AddStringToObject(msg, "type", "tensor_delete");
        cJSON_AddStringToObject(msg, "id", t.id);
        rc = tensors_exchange(t.device, msg, -1, &reply, &reply_fd, &gen, &e);
        cJSON_Delete(msg);
        cJSON_Delete(reply);
        if (reply_fd >= 0) close(reply_fd);
        if (rc != 0 && e.status != 410) {
            tensors_end_delete(t.id);
            http_send_error(req, &e);
            return;
        }
    }
    /* Deleted, or gone with its worker or an earlier server: either way it leaves the table
     * and the store's ids (later requests answer 404). */
    gen = rc == 0 ? pool_device_generation(t.device) : -1;
    pthread_mutex_lock(&tensors_mu);
    i = tensors_index_locked(req->id);
    if (i >= 0) tensors_remove_locked(i);
    if (gen >= 0) tensors_publish_locked(t.device, gen);
    pthread_mutex_unlock(&tensors_mu);
    store_tensor_forget(strtoll(req->id + 1, NULL, 10));
    if (rc != 0) {
        http_send_error(req, &e);
        return;
    }
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "deleted", t.id);
    http_send_json(req, 200, o);
    cJSON_Delete(o);
}

/* ---------------------------------------------------------------- runs ------------------ */

static void tensors_shape_text(const tensor_entry *t, char *buf, size_t len)
{
    size_t n = 0;
    int i;
    n += (size_t)snprintf(buf, len, "[");
    for (i = 0; i < t->ndim && n < len; i++) n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

int tensors_apply_run(run_request *r, api_error *e)
{
    const char *ids[3] = {r->q_tensor, r->k_tensor, r->v_tensor}, *names[3] = {"q", "k", "v"};
    tensor_entry t[3];
    int have[3], i, first = -1;
    char a[96], b[96];
    attn_problem *p = &r->problem;

    r->output_tensor[0] = '\0'; /* the front chooses it (tensors_prepare_run) */
    for (i = 0; i < 3; i++) {
        have[i] = ids[i][0] != '\0';
        if (!have[i]) continue;
        if (tensors_lookup(ids[i], names[i], &t[i], e) != 0) return -1;
        if (t[i].ndim != 4) {
            tensors_shape_text(&t[i], a, sizeof a);
            return api_fail(e, 422, "shape_mismatch", names[i], "%s (tensor %s) has shape %s; a run needs [batch, heads, seq, head_dim]",
                            names[i], t[i].id, a);
        }
        if (first < 0) {
            first = i;
            continue;
        }
        if (strcmp(t[i].device, t[first].device) != 0)
            return api_fail(e, 422, "device_mismatch", names[i], "%s (tensor %s) is on %s but %s (tensor %s) is on %s", names[first],
                            t[first].id, t[first].device, names[i], t[i].id, t[i].device);
        if (t[i].dtype != t[first].dtype)
            return api_fail(e, 422, "dtype_mismatch", names[i], "%s (tensor %s) is %s but %s (tensor %s) is %s", names[first], t[first].id,
                            attn_dtype_name(t[first].dtype), names[i], t[i].id, attn_dtype_name(t[i].dtype));
    }
    if (first < 0) return 0;
    if (r->device[0] && strcmp(r->device, t[first].device) != 0)
        return api_fail(e, 422, "device_mismatch", "device", "device=%s but tensor %s (tensor %s) is on %s", r->device,
                        t[first].id, names[first], t[first].device);
    snprintf(r->device, sizeof r->device, "%s", t[first].device);
    if (have[1] && have[2]) {
        for (i = 0; i < 4; i++)
            if (t[1].shape[i] != t[2].shape[i]) {
                tensors_shape_text(&t[1], a, sizeof a), tensors_shape_text(&t[2], b, sizeof b);
                return api_fail(e, 422, "shape_mismatch", "v", "k (tensor %s) has shape %s but v (tensor %s) has shape %s", t[1].id, a, t[2].id, b);
            }
    }
    if (have[0]) {
        int kv = have[1] ? 1 : have[2] ? 2 : -1;
        if (kv > 0 && (t[0].shape[0] != t[kv].shape[0] || t[0].shape[1] != t[kv].shape[1] || t[0].shape[3] != t[kv].shape[3])) {
            tensors_shape_text(&t[0], a, sizeof a), tensors_shape_text(&t[kv], b, sizeof b);
            return api_fail(e, 422, "shape_mismatch", names[kv],
                            "q (tensor %s) has shape %s but %s (tensor %s) has shape %s: batch, heads and head_dim must agree", t[0].id, a,
                            names[kv], t[kv].id, b);
        }
    }
    {
        /* The problem from the tensors; parameters the client gave must agree. */
        const tensor_entry *src = &t[first];
        int kvi = have[1] ? 1 : have[2] ? 2 : -1;
        int64_t B = src->shape[0], H = src->shape[1], D = src->shape[3];
        int64_t Sq = have[0] ? t[0].shape[2] : -1, Skv = kvi >= 0 ? t[kvi].shape[2] : -1;
        struct {
            unsigned bit;
            const char *name;
            int64_t *field, value;
        } dims[] = {
            {RUN_GIVEN_BATCH, "batch", &p->batch, B},     {RUN_GIVEN_HEADS, "heads", &p->heads, H},
            {RUN_GIVEN_SEQ_Q, "seq_q", &p->seq_q, Sq},   {RUN_GIVEN_SEQ_KV, "seq_kv", &p->seq_kv, Skv},
            {RUN_GIVEN_HEAD_DIM, "head_dim", &p->head_dim, D},
        };
        /* A generated side follows the other's length unless given. */
        if (Sq < 0) Sq = (r->given & RUN_GIVEN_SEQ_Q) ? p->seq_q : Skv;
        if (Skv < 0) Skv = (r->given & RUN_GIVEN_SEQ_KV) ? p->seq_kv : Sq;
        dims[2].value = Sq, dims[3].value = Skv;
        for (i = 0; i < 5; i++) {
            if ((r->given & dims[i].bit) && *dims[i].field != dims[i].value)
                return api_fail(e, 422, "shape_mismatch", dims[i].name, "%s=%lld disagrees with the tensors (%s %lld)",
                                dims[i].name, (long long)*dims[i].field, dims[i].name, (long long)dims[i].value);
            *dims[i].field = dims[i].value;
        }
        if ((r->given & RUN_GIVEN_DTYPE) && p->dtype != src->dtype)
            return api_fail(e, 422, "dtype_mismatch", "dtype", "dtype=%s disagrees with tensor %s (tensor %s), which is %s",
                            attn_dtype_name(p->dtype), src->id, names[first], attn_dtype_name(src->dtype));
        p->dtype = src->dtype;
        if (!r->scale_given) p->scale = 1.0 / sqrt((double)p->head_dim);
    }
    return 0;
}

/* Bytes a run allocates on its device beyond the resident tensors it reads. */
static double tensors_run_bytes(const run_request *r)
{
    const attn_problem *p = &r->problem;
    const variant_info *v = variant_info_find(r->backend);
    double esz = (double)attn_dtype_bytes(p->dtype);
    double need = (double)attn_out_elems(p) * esz;
    if (!r->q_tensor[0]) need += (double)attn_q_elems(p) * esz;
    if (!r->k_tensor[0]) need += (double)attn_kv_elems(p) * esz;
    if (!r->v_tensor[0]) need += (double)attn_kv_elems(p) * esz;
    if (v && v->workspace_bound) need += (double)v->workspace_bound(p);
    return need;
}

/* Drop the pins tensors_prepare_run took on r's inputs (bit i of mask: q, k, v). A tensor
 * that left the table meanwhile (deleted as gone) has none to drop. Under tensors_mu. */
static void tensors_unpin_locked(const run_request *r, unsigned mask)
{
    const char *ids[3] = {r->q_tensor, r->k_tensor, r->v_tensor};
    int i, at;

    for (i = 0; i < 3; i++) {
        if (!(mask & (1u << i)) || !ids[i][0]) continue;
        at = tensors_index_locked(ids[i]);
        if (at >= 0 && tensors_table[at].readers > 0) tensors_table[at].readers--;
    }
}

int tensors_prepare_run(run_request *r, long long budget_bytes, api_error *e)
{
    const char *ids[3] = {r->q_tensor, r->k_tensor, r->v_tensor}, *names[3] = {"q", "k", "v"};
    double need = tensors_run_bytes(r);
    unsigned pinned = 0;
    int i, rc = 0, out_issued = 0;

    if (ids[0][0] || ids[1][0] || ids[2][0]) r->verify_cpu_max_macs = 0; /* GPU fp32 reference */
    if (tensors_reserve(r->device, need, budget_bytes, "the run", e) != 0) return -1;
    pthread_mutex_lock(&tensors_mu);
    /* Pin the inputs: from here to the run's end (tensors_finish_run) DELETE answers 409. A
     * tensor deleted since tensors_apply_run looked it up is not pinned: the run is refused. */
    for (i = 0; i < 3 && rc == 0; i++) {
        int at;
        if (!ids[i][0]) continue;
        at = tensors_index_locked(ids[i]);
        if (at < 0 || tensors_table[at].deleting || tensors_table[at].pending) {
            rc = api_fail(e, 404, "not_found", names[i], "tensor %s (%s) was deleted while the run was being checked",
                          ids[i], names[i]);
            break;
        }
        tensors_table[at].readers++;
        pinned |= 1u << i;
    }
    if (rc == 0 && r->keep_output) { /* the output's id, held as a pending (unlisted) entry */
        tensor_entry t;
        memset(&t, 0, sizeof t);
        tensors_new_id_locked(r->output_tensor, sizeof r->output_tensor, r->device);
        out_issued = 1;
        snprintf(t.id, sizeof t.id, "%s", r->output_tensor);
        snprintf(t.name, sizeof t.name, "output of a run not finished yet");
        snprintf(t.device, sizeof t.device, "%s", r->device);
        t.generation = -1;
        t.pending = 1;
        if (tensors_take_slots_locked(1, 0, "keeping the output needs", e) != 0) {
            snprintf(e->field, sizeof e->field, "keep_output");
            rc = -1;
        } else { /* the room was made: the add cannot fail */
            tensors_slots_held--;
            (void)tensors_add_locked(&t);
        }
    }
    if (rc != 0) {
        tensors_unpin_locked(r, pinned);
        tensors_unreserve_locked(r->device, need);
    }
    pthread_mutex_unlock(&tensors_mu);
    if (rc != 0 && out_issued) {
        store_tensor_forget(strtoll(r->output_tensor + 1, NULL, 10));
        r->output_tensor[0] = '\0';
    }
    return rc;
}

void tensors_finish_run(const run_request *r, pool_run_outcome outcome, const cJSON *record, int generation)
{
    const cJSON *out = cJSON_GetObjectItem(record, "output");
    const cJSON *tensor = cJSON_GetObjectItem(out, "tensor"), *fp = cJSON_GetObjectItem(out, "fingerprint");
    const cJSON *id = cJSON_GetObjectItem(record, "id");
    const attn_problem *p = &r->problem;
    int has_output = r->keep_output && r->output_tensor[0];
    int kept = has_output && outcome == POOL_RUN_DONE && cJSON_IsString(tensor) &&
               !strcmp(tensor->valuestring, r->output_tensor);
    int at;

    pthread_mutex_lock(&tensors_mu);
    tensors_unreserve_locked(r->device, tensors_run_bytes(r));
    tensors_unpin_locked(r, 7u);
    at = has_output ? tensors_index_locked(r->output_tensor) : -1;
    if (kept) { /* the worker holds it now: fill in the pending entry (re-add it if it went) */
        tensor_entry t;
        memset(&t, 0, sizeof t);
        snprintf(t.id, sizeof t.id, "%s", r->output_tensor);
        snprintf(t.name, sizeof t.name, "output of run %.0f", cJSON_IsNumber(id) ? id->valuedouble : 0.0);
        snprintf(t.device, sizeof t.device, "%s", r->device);
        t.generation = generation; /* the worker that ran it holds it */
        t.dtype = p->dtype;
        t.ndim = 4;
        t.shape[0] = p->batch, t.shape[1] = p->heads, t.shape[2] = p->seq_q, t.shape[3] = p->head_dim;
        t.bytes = (uint64_t)attn_out_elems(p) * attn_dtype_bytes(p->dtype);
        snprintf(t.fingerprint, sizeof t.fingerprint, "%s", cJSON_IsString(fp) ? fp->valuestring : "");
        clock_text_now_iso(t.created, sizeof t.created);
        if (at >= 0)
            tensors_table[at] = t;
        else if (tensors_add_locked(&t) != 0)
            log_error("tensor table: no room for output tensor %s", t.id);
        tensors_publish_locked(r->device, generation);
    } else if (at >= 0 && tensors_table[at].pending) { /* not done, or no output: its id is released */
        tensors_remove_locked(at);
    }
    pthread_mutex_unlock(&tensors_mu);
    if (has_output && !kept) store_tensor_forget(strtoll(r->output_tensor + 1, NULL, 10));
}

void tensors_worker_restarted(const char *device, int generation)
{
    pthread_mutex_lock(&tensors_mu);
    tensors_publish_locked(device, generation);
    pthread_mutex_unlock(&tensors_mu);
}
