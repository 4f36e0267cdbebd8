/* tensor_upload.c — POST /v1/tensors: admission of the body from its head, then the upload
 * itself (docs/tensors.md).
 *
 * Who holds what: when the headers are in, route_tensor_upload_admit checks the query and
 * reserves the declared body's bytes on the device (budget, device and host memory) and a
 * table entry, before any byte is read; libmicrohttpd then hands the body to http.c piece
 * by piece, which writes it to a memfd (the route streams; a chunked body is reserved as it
 * grows, route_tensor_upload_grow). The handler parses the header bytes (tensor_upload_parse.c),
 * then passes the memfd to the device's worker through its queue (pool_tensor_op), which
 * copies each tensor out of it into device (or host) memory. A declared body of 64 MiB or more
 * is copied while it arrives (route_tensor_upload_landing starts a tensors/tensor_stage.h
 * stage): the worker's put then copies only the rest. The body exists once, in the memfd. The
 * upload logs one info line with its phases' times and rates (receive, queue, copy,
 * fingerprint, what was staged), and its answer carries them as "timing".
 */
#include "server/front/routes/routes.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/host_memory.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/run_request.h"
#include "server/front/pool/pool.h"
#include "server/front/tensors/tensor_io.h"
#include "server/front/tensors/tensor_stage.h"
#include "server/front/tensors/tensor_table.h"
#include "server/front/tensors/tensor_upload_parse.h"

/* ---------------------------------------------------------------- admission ------------- */

/* What an upload holds from its headers to its end (route_tensor_upload_admit … _release): its
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
    double reserved_bytes;        /* this upload's part of device's reservation (tensor_table.h) */
    int slots;                    /* this upload's promised table entries (tensor_table_take_slots_locked) */
    unsigned long long body_bytes; /* the declared length; 0 when chunked */
    tensor_stage *stage;          /* a large body copied to its GPU while it arrives; NULL */
    int stage_put_sent;           /* the handler's tensor_put named the stage (the worker took it) */
} tensor_upload_hold;

/* A chunked body is reserved up to its next MiB (so its growth takes the lock once a MiB,
 * not once a 64 KiB piece), or to the byte when that does not fit. MemAvailable is read
 * again after each 64 MiB it grows. */
#define TENSORS_GROW_STEP_BYTES ((double)(1 << 20))
#define TENSORS_HOST_READ_BYTES ((double)(64 << 20))

/* The device of an upload: ?device=, else the first GPU, else cpu. 0, or -1 with e. */
static int tensors_pick_device(const http_request *req, char *device, size_t len, api_error *e)
{
    const char *d = http_query_param(req, "device");
    if (!d) d = pool_default_device(0);
    if (!d) d = "cpu";
    if (!run_request_device_valid(d))
        return api_fail(e, 400, "bad_device", "device", "device must be cpu or cuda:N, got '%.40s'", d);
    if (pool_device_generation(d) < 0)
        return api_fail(e, 503, "no_device", "device", "device %s is not served here or is down (see GET /v1/device)", d);
    snprintf(device, len, "%s", d);
    return 0;
}

/* May h's body grow to total bytes (more than it has reserved)? 0, or -1 with e: 507 past the
 * budget, the device's memory or the host's (where the body waits). Under the table's lock; gen:
 * the device's worker generation (its live tensors count). */
static int tensors_fits_locked(const tensor_upload_hold *h, int gen, double total, api_error *e)
{
    double others = tensor_table_reserved_locked(h->device) - h->reserved_bytes; /* other uploads' and runs' */
    double resident = tensor_table_resident_locked(h->device, gen), free_bytes;
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
 * 0, or -1 with e. Under the table's lock. */
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
    if (tensor_table_reserve_add_locked(h->device, target - h->reserved_bytes) != 0)
        return api_fail(e, 500, "internal", "", "no room to account for device %s's reservations", h->device);
    h->reserved_bytes = target;
    return 0;
}

int route_tensor_upload_admit(const http_request *req, unsigned long long declared, void **hold, api_error *e)
{
    tensor_upload_hold *h;
    int chunked = declared == HTTP_LENGTH_CHUNKED, gen, rc;
    const cJSON *total, *free_b;
    cJSON *dev;

    *hold = NULL;
    if (tensor_upload_check_query(req->query, chunked || declared > (unsigned long long)LLONG_MAX ? -1 : (long long)declared, e) != 0)
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
    h->body_bytes = chunked ? 0 : declared;
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

    tensor_table_lock();
    rc = tensor_table_take_slots_locked(1, 0, "an upload needs", e);
    if (rc == 0) h->slots = 1;
    if (rc == 0 && !chunked) rc = tensors_grow_locked(h, gen, (double)declared, e);
    tensor_table_publish_locked(h->device, gen); /* also catches up after a worker restart */
    tensor_table_unlock();
    if (rc != 0) {
        route_tensor_upload_release(h);
        return -1;
    }
    *hold = h;
    return 0;
}

int route_tensor_upload_grow(void *hold, unsigned long long total, api_error *e)
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
    tensor_table_lock();
    rc = tensors_grow_locked(h, gen, (double)total, e);
    tensor_table_unlock();
    return rc;
}

void route_tensor_upload_landing(void *hold, const http_request *req, int fd)
{
    tensor_upload_hold *h = hold;

    if (!h || h->body_bytes < TENSOR_STAGE_MIN_BYTES) return;
    h->stage = tensor_stage_start(h->device, req->query, fd, h->body_bytes, h->budget_bytes);
}

void route_tensor_upload_release(void *hold)
{
    tensor_upload_hold *h = hold;

    if (!h) return;
    tensor_stage_drop(h->stage, h->stage_put_sent);
    tensor_table_lock();
    tensor_table_unreserve_locked(h->device, h->reserved_bytes);
    tensor_table_return_slots_locked(h->slots);
    tensor_table_unlock();
    free(h);
}

/* ---------------------------------------------------------------- the upload ------------ */

/* Where an upload's time went, in seconds (docs/tensors.md, "timing"). */
typedef struct upload_timing {
    double receive_s;     /* the body's arrival: headers in → last byte in the memfd */
    double queue_s;       /* waiting for the device's worker (jobs ahead of it) and the messages */
    double copy_s;        /* the worker's time on the put but the fingerprint's: map, allocate, copy, unmap */
    double fingerprint_s; /* the worker fingerprinting what it stored */
    double total_s;       /* headers in → the answer */
    double staged_bytes;  /* a large body: the bytes the worker had copied before it was whole */
    double staged_s;      /* the worker's time on them, while the body arrived */
} upload_timing;

static cJSON *upload_timing_json(const upload_timing *t)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddNumberToObject(o, "receive_s", t->receive_s) || !cJSON_AddNumberToObject(o, "queue_s", t->queue_s) ||
        !cJSON_AddNumberToObject(o, "copy_s", t->copy_s) || !cJSON_AddNumberToObject(o, "fingerprint_s", t->fingerprint_s) ||
        !cJSON_AddNumberToObject(o, "total_s", t->total_s) || !cJSON_AddNumberToObject(o, "staged_bytes", t->staged_bytes) ||
        !cJSON_AddNumberToObject(o, "staged_s", t->staged_s)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The upload's body was admitted (route_tensor_upload_admit: the query checked, its bytes and
 * one table entry reserved on its device); here it is parsed, the rest of its entries are
 * promised (a safetensors file holds several), and it goes to the worker. */
/* The front's copy of a batch's lengths (tensor_entry.values): an int32 tensor of one
 * dimension and 1..RUN_MAX_SEQS entries, read from the body before it goes; a run that names
 * it as seqlens_q or seqlens_kv is checked against them before it is queued. NULL otherwise. */
static int32_t *upload_lengths_copy(int fd, const upload_spec *s)
{
    int32_t *v;

    if (s->dtype != ATTN_INT32 || s->ndim != 1 || s->shape[0] < 1 || s->shape[0] > RUN_MAX_SEQS) return NULL;
    v = malloc((size_t)s->bytes);
    if (v && pread(fd, v, (size_t)s->bytes, (off_t)s->offset) != (ssize_t)s->bytes) {
        log_warn("tensors: reading an upload's %llu bytes of lengths back failed", (unsigned long long)s->bytes);
        free(v);
        v = NULL;
    }
    return v;
}

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
    tensor_stage_report staged;

    memset(&e, 0, sizeof e);
    memset(&timing, 0, sizeof timing);
    /* http.c admits every upload before its body; a caller that did not gets it done here. */
    if (!hold) {
        if (route_tensor_upload_admit(req, req->body_fd >= 0 ? req->body_len : 0, &own, &e) != 0) {
            http_send_error(req, &e);
            return;
        }
        hold = own;
    }
    device = hold->device;
    tensor_stage_finish(hold->stage, &staged); /* nothing more is staged: the put copies the rest */
    timing.staged_bytes = (double)staged.staged_bytes;
    timing.staged_s = staged.staged_s;
    if (req->body_fd < 0 || req->body_len == 0) {
        api_fail(&e, 400, "missing_body", "", "POST /v1/tensors needs a body (raw bytes, .npy or safetensors)");
        goto out;
    }
    if (tensor_upload_parse_body(req->query, req->body_fd, req->body_len, &specs, &count, &multi, &e) != 0) goto out;
    for (i = 0; i < count; i++) total += (double)specs[i].bytes;
    /* The body is reserved (the tensors lie inside it: total <= body_len); its table entries
     * are promised before the worker stores anything, so every tensor it stores is listed. */
    snprintf(what, sizeof what, "the file's %d tensors need", count);
    gen = pool_device_generation(device);
    tensor_table_lock();
    rc = tensors_grow_locked(hold, gen, (double)req->body_len, &e);
    if (rc == 0) rc = tensor_table_take_slots_locked(count, hold->slots, what, &e);
    if (rc == 0 && count > hold->slots) hold->slots = count;
    tensor_table_unlock();
    if (rc != 0) goto out;

    entries = calloc((size_t)count, sizeof *entries);
    msg = cJSON_CreateObject();
    if (!entries || !msg) {
        api_fail(&e, 500, "internal", "", "out of memory");
        goto out;
    }
    tensor_table_lock();
    for (i = 0; i < count; i++) tensor_table_new_id_locked(entries[i].id, sizeof entries[i].id, device);
    tensor_table_unlock();
    cJSON_AddStringToObject(msg, "type", proto_type_name(PROTO_TENSOR_PUT));
    cJSON_AddNumberToObject(msg, "budget", (double)req->settings->memory_budget_bytes);
    if (staged.key[0]) cJSON_AddStringToObject(msg, "stage", staged.key);
    list = cJSON_AddArrayToObject(msg, "tensors");
    for (i = 0; i < count; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "id", entries[i].id);
        cJSON_AddNumberToObject(t, "offset", (double)specs[i].offset);
        cJSON_AddNumberToObject(t, "bytes", (double)specs[i].bytes);
        cJSON_AddItemToArray(list, t);
    }
    sent_s = clock_monotonic_s();
    hold->stage_put_sent = staged.key[0] != 0;
    if (tensor_exchange(device, msg, req->body_fd, &reply, &reply_fd, &gen, &e) != 0) goto out;
    if (reply_fd >= 0) close(reply_fd);
    worker_copy_s = cJSON_GetObjectItem(reply, "copy_s");
    worker_fingerprint_s = cJSON_GetObjectItem(reply, "fingerprint_s");
    timing.receive_s = req->received_s - req->arrived_s;
    timing.copy_s = cJSON_IsNumber(worker_copy_s) ? worker_copy_s->valuedouble : 0.0;
    timing.fingerprint_s = cJSON_IsNumber(worker_fingerprint_s) ? worker_fingerprint_s->valuedouble : 0.0;
    timing.queue_s = clock_monotonic_s() - sent_s - timing.copy_s - timing.fingerprint_s;
    if (timing.queue_s < 0) timing.queue_s = 0.0;

    arr = cJSON_GetObjectItem(reply, "tensors");
    answer = multi ? cJSON_CreateObject() : NULL;
    /* Listed, and their bytes moved from the upload's reservation to the table, at once. */
    now_gen = pool_device_generation(device); /* the gauge: what the worker holds now */
    for (i = 0; i < count; i++) entries[i].values = upload_lengths_copy(req->body_fd, &specs[i]);
    tensor_table_lock();
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
        if (tensor_table_add_locked(t) != 0) /* cannot happen: the slot's room was made when it was promised */
            log_error("tensor table: no room for tensor %s, which is on %s but not listed", t->id, device);
    }
    tensor_table_return_slots_locked(count);
    hold->slots -= count;
    moved = total < hold->reserved_bytes ? total : hold->reserved_bytes;
    tensor_table_unreserve_locked(device, moved);
    hold->reserved_bytes -= moved;
    tensor_table_publish_locked(device, now_gen);
    tensor_table_unlock();
    if (multi) {
        cJSON *items = cJSON_AddArrayToObject(answer, "tensors");
        for (i = 0; i < count; i++) cJSON_AddItemToArray(items, tensor_entry_json(&entries[i], 0));
    } else {
        answer = tensor_entry_json(&entries[0], 0);
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
    log_info("tensors: %s%s uploaded to %s, %.0f bytes: received in %.3f s (%.2f GB/s; %.0f bytes copied meanwhile "
             "in %.3f s), queued %.3f s, copied %.3f s, fingerprinted %.3f s; %.3f s in all (%.2f GB/s)",
             entries[0].id, count > 1 ? " and more" : "", device, (double)req->body_len, timing.receive_s,
             tensor_gbps((double)req->body_len, timing.receive_s), timing.staged_bytes, timing.staged_s, timing.queue_s,
             timing.copy_s, timing.fingerprint_s, timing.total_s, tensor_gbps((double)req->body_len, timing.total_s));

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
    route_tensor_upload_release(own); /* http.c releases the hold it admitted, after this returns */
}
