/* tensor_upload.c — an upload's tensors out of the front's memfd into the worker's memory
 * (tensor_upload.h): all at once (tensor_put), or while the body still arrives (tensor_stage
 * messages, then the tensor_put that finishes them).
 *
 * Either way an upload is an up_stage: its spans, a buffer for each, and how far the body has
 * been copied. Each step takes the body's bytes from where the last step stopped to what is in
 * the memfd now: it page-locks that range of the mapping (from TENSOR_MEM_PIN_MIN_BYTES on),
 * queues each tensor's part of it on the copy stream, sums the part's fingerprint terms on
 * the CPU meanwhile (fingerprint_piece_sum: a fingerprint is a sum over words, so pieces add
 * up), waits for the copies and unlocks the range. A put is one step over the whole body; a
 * staged upload takes one step per tensor_stage, while the front is still receiving, and its
 * put only the last piece. The worker never waits for bytes that are not there: a step copies
 * what has landed and returns, so a slow client cannot hold the device.
 */
#include "server/worker/tensors/tensor_upload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/grow.h"
#include "common/log.h"
#include "kernels/fingerprint.h"
#include "server/worker/tensors/tensor_memory.h"
#include "server/worker/tensors/tensors.h"

/* One tensor of an upload on its way in. */
typedef struct up_tensor {
    size_t off, bytes; /* its span in the body */
    void *buf;         /* its memory (tensor_mem_alloc) */
    size_t copied;     /* bytes [0, copied) copied (or queued) into buf */
    size_t summed;     /* bytes [0, summed) in sum: a multiple of 8 until the last piece */
    uint64_t sum;      /* their fingerprint terms (fingerprint_piece_sum) */
} up_tensor;

/* An upload between its first step and its put (or tensor_unstage). */
typedef struct up_stage {
    char key[32];         /* the front's name for a staged upload; "" for a put's own */
    int n;
    up_tensor *t;
    int fd;               /* the memfd (a staged upload's own dup): its size is what has landed */
    const uint8_t *map;   /* read-only shared mapping of the body's body_bytes */
    size_t body_bytes, landed;          /* the body's bytes [0, landed) are copied and summed */
    size_t unmapped;                    /* a staged upload's [0, unmapped) are let go already */
    double fingerprint_s;               /* the worker's time summing fingerprints in this message */
} up_stage;

/* Staged uploads waiting for their put: as many as uploads are arriving at once. */
static up_stage **up_staged;
static int up_staged_count;
static size_t up_staged_cap;

/* ---------------------------------------------------------------- one upload ------------ */

static void up_free(up_stage *s)
{
    int i;

    if (!s) return;
    for (i = 0; i < s->n; i++) tensor_mem_release(s->t[i].buf);
    if (s->map && s->unmapped < s->body_bytes) munmap((void *)(s->map + s->unmapped), s->body_bytes - s->unmapped);
    if (s->key[0] && s->fd >= 0) close(s->fd);
    free(s->t);
    free(s);
}

/* An upload of the spans in list ([{offset, bytes}, …]) of a body_bytes body in fd, each given its
 * buffer, nothing copied yet. budget > 0: the front checked it; else the device's free memory is
 * the limit. NULL with e (400 a span outside the body, 507, 500). */
static up_stage *up_new(const cJSON *list, const cJSON *budget, int fd, size_t body_bytes, api_error *e)
{
    const cJSON *item;
    up_stage *s;
    double need = 0.0, avail;
    int i = 0;
    char what[32];

    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) < 1) {
        api_fail(e, 400, "bad_message", "", "an upload message needs a tensors list");
        return NULL;
    }
    s = calloc(1, sizeof *s);
    if (s) s->t = calloc((size_t)cJSON_GetArraySize(list), sizeof *s->t);
    if (!s || !s->t) {
        free(s);
        api_fail(e, 500, "internal", "", "out of memory");
        return NULL;
    }
    s->fd = fd, s->body_bytes = body_bytes;
    cJSON_ArrayForEach(item, list) {
        const cJSON *off = cJSON_GetObjectItem(item, "offset"), *b = cJSON_GetObjectItem(item, "bytes");
        if (!cJSON_IsNumber(off) || !cJSON_IsNumber(b) || off->valuedouble < 0 || b->valuedouble < 0 ||
            off->valuedouble + b->valuedouble > (double)body_bytes) {
            up_free(s);
            api_fail(e, 400, "bad_message", "", "a tensor span lies outside the %zu-byte body", body_bytes);
            return NULL;
        }
        s->t[i].off = (size_t)off->valuedouble, s->t[i].bytes = (size_t)b->valuedouble;
        need += b->valuedouble;
        i++;
    }
    s->n = i;
    if (!cJSON_IsNumber(budget) || budget->valuedouble <= 0) {
        avail = worker_tensors_free_bytes();
        if (need > avail) {
            up_free(s);
            api_fail(e, 507, "insufficient_storage", "",
                     "the upload needs %.0f bytes; the device has %.0f bytes free (memory_budget_bytes=0: free memory)",
                     need, avail);
            return NULL;
        }
    }
    for (i = 0; i < s->n; i++) {
        snprintf(what, sizeof what, "%d of the upload", i);
        if (tensor_mem_alloc(&s->t[i].buf, s->t[i].bytes, what, e) != 0) {
            up_free(s);
            return NULL;
        }
    }
    return s;
}

/* Map the body: read-only and shared, so the page-locked DMA reads the memfd's own pages. A
 * staged body is mapped whole while only part of it has landed: the step touches only what
 * has (a page past the memfd's end would fault). 0, or -1 with e. */
static int up_map(up_stage *s, int populate, api_error *e)
{
    void *map;

    if (s->map || s->body_bytes == 0) return 0;
    map = mmap(NULL, s->body_bytes, PROT_READ, MAP_SHARED | (populate ? MAP_POPULATE : 0), s->fd, 0);
    if (map == MAP_FAILED)
        return api_fail(e, 500, "internal", "", "mmap of the upload (%zu bytes) failed: %s", s->body_bytes, strerror(errno));
    s->map = map;
    return 0;
}

/* Copy and sum every tensor's bytes in the body's [s->landed, to). 0, or -1 with e (the copies
 * ended either way). */
static int up_step(up_stage *s, size_t to, api_error *e)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t lo = s->landed, pin_lo, pin_hi;
    double fp_s = 0.0;
    int pinned = 0, rc = 0, i;

    if (to <= lo) return 0;
    /* the pages of [lo, to): the last is partly in the memfd, the step reads only its landed part */
    pin_lo = lo - lo % page;
    pin_hi = (to + page - 1) / page * page;
    if (tensor_mem_on_gpu() && to - lo >= TENSOR_MEM_PIN_MIN_BYTES)
        pinned = tensor_mem_pin((void *)(s->map + pin_lo), pin_hi - pin_lo);
    for (i = 0; i < s->n && rc == 0; i++) { /* queued copies first, the CPU's sums while they run */
        up_tensor *t = &s->t[i];
        size_t end = to > t->off ? to - t->off : 0;
        if (end > t->bytes) end = t->bytes;
        if (end > t->copied)
            rc = tensor_mem_copy_in((uint8_t *)t->buf + t->copied, s->map + t->off + t->copied, pinned, end - t->copied, e);
        if (rc == 0) t->copied = end > t->copied ? end : t->copied;
    }
    for (i = 0; i < s->n && rc == 0; i++) {
        up_tensor *t = &s->t[i];
        size_t end = t->copied == t->bytes ? t->bytes : t->copied / 8 * 8; /* whole words until the last piece */
        if (end > t->summed) {
            double f0 = clock_monotonic_s();
            t->sum += fingerprint_piece_sum(s->map + t->off + t->summed, end - t->summed, t->summed / 8);
            fp_s += clock_monotonic_s() - f0;
            t->summed = end;
        }
    }
    if (pinned) {
        if (rc == 0) rc = tensor_mem_copies_done(e);
        else tensor_mem_copies_drain(); /* no copy still reads the range it unlocks */
        tensor_mem_unpin((void *)(s->map + pin_lo));
    }
    if (rc == 0) s->landed = to;
    s->fingerprint_s += fp_s;
    return rc;
}

/* A staged upload lets go of the pages no step will read again (each tensor's bytes up to its
 * summed mark): unmapping a 1 GiB body at its end took 0.044 s on an H100 machine, a tenth of
 * the upload, and here it is done while the body arrives. */
static void up_unmap_done(up_stage *s)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t keep = s->landed;
    int i;

    for (i = 0; i < s->n; i++) {
        const up_tensor *t = &s->t[i];
        if (t->summed < t->bytes && t->off + t->summed < keep) keep = t->off + t->summed;
    }
    keep -= keep % page;
    if (keep <= s->unmapped) return;
    munmap((void *)(s->map + s->unmapped), keep - s->unmapped);
    s->unmapped = keep;
}

/* How much of s's body is in its memfd now (no more than the body). */
static size_t up_in_memfd(const up_stage *s)
{
    struct stat st;
    if (fstat(s->fd, &st) != 0 || st.st_size < 0) return s->landed;
    return (size_t)st.st_size < s->body_bytes ? (size_t)st.st_size : s->body_bytes;
}

/* The id of list's tensor i (a put's list). */
static const char *up_id(const cJSON *list, int i)
{
    return cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(list, i), "id"));
}

/* s's tensors kept as the ids of list (its put's, in the same order) with their fingerprints,
 * into out's "tensors": all of them, the table's from then on, or none (s's still). 0, or -1
 * with e. */
static int up_keep(up_stage *s, const cJSON *list, cJSON *out, api_error *e)
{
    cJSON *arr = cJSON_AddArrayToObject(out, "tensors");
    int i, added;

    for (added = 0; added < s->n; added++) {
        const char *id = up_id(list, added);
        char fp[20];
        cJSON *o = cJSON_CreateObject();
        snprintf(fp, sizeof fp, "%016llx", (unsigned long long)fingerprint_finish(s->t[added].sum, s->t[added].bytes));
        if (!arr || !o || !id || !cJSON_AddStringToObject(o, "id", id) || !cJSON_AddStringToObject(o, "fingerprint", fp) ||
            worker_tensors_adopt(id, s->t[added].buf, s->t[added].bytes) != 0) {
            cJSON_Delete(o);
            break;
        }
        cJSON_AddItemToArray(arr, o);
        s->t[added].buf = NULL; /* the table's now */
    }
    if (added == s->n) return 0;
    for (i = 0; i < added; i++) (void)worker_tensors_drop(up_id(list, i)); /* all or nothing */
    return api_fail(e, 500, "internal", "", "out of memory for the tensor table");
}

/* The reply's timing members: the worker's time in this message, copy_s all of it but the
 * fingerprint's (mapping, page-locking, allocating, copying, letting go). 0, or -1 with e. */
static int up_timing(cJSON *out, double copy_s, double fingerprint_s, api_error *e)
{
    if (cJSON_AddNumberToObject(out, "copy_s", copy_s) && cJSON_AddNumberToObject(out, "fingerprint_s", fingerprint_s))
        return 0;
    return api_fail(e, 500, "internal", "", "out of memory");
}

/* ---------------------------------------------------------------- staged uploads -------- */

static int up_staged_index(const char *key)
{
    int i;
    for (i = 0; key && i < up_staged_count; i++)
        if (strcmp(up_staged[i]->key, key) == 0) return i;
    return -1;
}

/* The staged upload key, taken out of the list (the caller frees it); NULL when there is none. */
static up_stage *up_staged_take(const char *key)
{
    int i = up_staged_index(key);
    up_stage *s;

    if (i < 0) return NULL;
    s = up_staged[i];
    up_staged[i] = up_staged[--up_staged_count];
    return s;
}

cJSON *tensor_upload_stage(const cJSON *msg, int fd, api_error *e)
{
    const cJSON *key = cJSON_GetObjectItem(msg, "key"), *body = cJSON_GetObjectItem(msg, "body_bytes");
    int i = up_staged_index(cJSON_GetStringValue(key)), own_fd;
    up_stage *s;
    cJSON *out;
    double t0 = clock_monotonic_s();

    if (i >= 0) {
        s = up_staged[i];
    } else {
        if (!cJSON_IsString(key) || !key->valuestring[0] || strlen(key->valuestring) >= sizeof s->key || fd < 0 ||
            !cJSON_IsNumber(body) || body->valuedouble <= 0 || body->valuedouble > 1e18) {
            api_fail(e, 400, "bad_message", "", "tensor_stage needs a key, the body's size and its memfd");
            return NULL;
        }
        own_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (own_fd < 0) {
            api_fail(e, 500, "internal", "", "keeping the upload's memfd: %s", strerror(errno));
            return NULL;
        }
        s = up_new(cJSON_GetObjectItem(msg, "tensors"), cJSON_GetObjectItem(msg, "budget"), own_fd, (size_t)body->valuedouble, e);
        if (!s) {
            close(own_fd);
            return NULL;
        }
        snprintf(s->key, sizeof s->key, "%s", key->valuestring);
        if (up_map(s, 0, e) != 0 ||
            grow_array(&up_staged, &up_staged_cap, (size_t)up_staged_count + 1, sizeof *up_staged, 4) != 0) {
            if (!e->status) api_fail(e, 500, "internal", "", "out of memory");
            up_free(s);
            return NULL;
        }
        up_staged[up_staged_count++] = s;
    }
    s->fingerprint_s = 0.0;
    if (up_step(s, up_in_memfd(s), e) != 0) { /* a staged upload that failed is dropped: its put starts over */
        up_free(up_staged_take(s->key));
        return NULL;
    }
    up_unmap_done(s);
    out = cJSON_CreateObject();
    if (!out || !cJSON_AddNumberToObject(out, "staged", (double)s->landed) ||
        up_timing(out, clock_monotonic_s() - t0 - s->fingerprint_s, s->fingerprint_s, e) != 0) {
        cJSON_Delete(out);
        if (!e->status) api_fail(e, 500, "internal", "", "out of memory");
        return NULL;
    }
    return out;
}

cJSON *tensor_upload_unstage(const cJSON *msg, api_error *e)
{
    up_stage *s = up_staged_take(cJSON_GetStringValue(cJSON_GetObjectItem(msg, "key")));

    (void)e;
    if (s) log_info("tensors: staged upload %s dropped after %zu of its %zu bytes (its request ended)", s->key, s->landed,
                    s->body_bytes);
    up_free(s);
    return cJSON_CreateObject();
}

/* ---------------------------------------------------------------- put ------------------- */

/* An upload of one tensor to the cpu device, kept where it already is: the tensor is a private
 * mapping of the upload's memfd (its pages the memfd's until written), so nothing is copied.
 * The front closes its memfd at the end of the request; the mapping keeps the pages. Only for
 * a span that starts 8-byte aligned, past any element's alignment (raw bytes at 0, an npy's
 * data at 64 or 128, a safetensors file's at its 8-byte padded header). The tensor's bytes,
 * with the mapping in *base and *len (munmap them with the tensor); NULL: copy it instead. */
static uint8_t *up_map_kept(int fd, size_t off, size_t bytes, void **base, size_t *len)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t base_off;

    if (tensor_mem_on_gpu() || bytes == 0 || off % 8 != 0 || page <= 0) return NULL;
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

/* The cpu device's upload of one tensor, kept in its memfd's pages (up_map_kept): the reply, or
 * NULL with *declined set when it cannot be kept that way (copy it instead) or e. */
static cJSON *up_put_kept(const cJSON *list, int fd, int *declined, api_error *e)
{
    const cJSON *only = cJSON_GetArrayItem(list, 0);
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(only, "id"));
    double t0 = clock_monotonic_s(), fp_s;
    size_t off = (size_t)cJSON_GetNumberValue(cJSON_GetObjectItem(only, "offset"));
    size_t bytes = (size_t)cJSON_GetNumberValue(cJSON_GetObjectItem(only, "bytes")), len = 0;
    void *base = NULL;
    uint8_t *kept = cJSON_GetArraySize(list) == 1 && id ? up_map_kept(fd, off, bytes, &base, &len) : NULL;
    cJSON *out, *arr, *o;
    char fp[20];

    *declined = !kept;
    if (!kept) return NULL;
    fp_s = clock_monotonic_s();
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)fingerprint_bytes(kept, bytes));
    fp_s = clock_monotonic_s() - fp_s;
    out = cJSON_CreateObject();
    arr = out ? cJSON_AddArrayToObject(out, "tensors") : NULL;
    o = arr ? cJSON_CreateObject() : NULL;
    if (!o || !cJSON_AddStringToObject(o, "id", id) || !cJSON_AddStringToObject(o, "fingerprint", fp) ||
        !cJSON_AddItemToArray(arr, o) || !cJSON_AddNumberToObject(out, "copy_s", clock_monotonic_s() - t0 - fp_s) ||
        !cJSON_AddNumberToObject(out, "fingerprint_s", fp_s) || worker_tensors_adopt_mapped(id, kept, bytes, base, len) != 0) {
        cJSON_Delete(out);
        munmap(base, len);
        api_fail(e, 500, "internal", "", "out of memory for the tensor table");
        return NULL;
    }
    return out;
}

/* Does the put's list name the staged upload's spans, in order? */
static int up_same_spans(const up_stage *s, const cJSON *list)
{
    int i;
    if (cJSON_GetArraySize(list) != s->n) return 0;
    for (i = 0; i < s->n; i++) {
        const cJSON *t = cJSON_GetArrayItem(list, i);
        if (cJSON_GetNumberValue(cJSON_GetObjectItem(t, "offset")) != (double)s->t[i].off ||
            cJSON_GetNumberValue(cJSON_GetObjectItem(t, "bytes")) != (double)s->t[i].bytes)
            return 0;
    }
    return 1;
}

cJSON *tensor_upload_put(const cJSON *msg, int fd, api_error *e)
{
    const cJSON *list = cJSON_GetObjectItem(msg, "tensors"), *t;
    up_stage *s = up_staged_take(cJSON_GetStringValue(cJSON_GetObjectItem(msg, "stage")));
    struct stat st;
    cJSON *out;
    int declined = 1;
    double t0 = clock_monotonic_s(), t_kept, t_end, fingerprint_s;
    size_t staged, body;

    if (fd < 0 || !cJSON_IsArray(list) || cJSON_GetArraySize(list) < 1 || fstat(fd, &st) != 0 || st.st_size < 0) {
        up_free(s);
        api_fail(e, 400, "bad_message", "", "tensor_put needs a memfd and a tensors list");
        return NULL;
    }
    cJSON_ArrayForEach(t, list) {
        const cJSON *id = cJSON_GetObjectItem(t, "id");
        if (!cJSON_IsString(id))
            api_fail(e, 400, "bad_message", "", "tensor_put: a tensor without an id");
        else if (worker_tensors_find(id->valuestring, NULL))
            api_fail(e, 409, "conflict", "", "tensor %s already exists on this worker", id->valuestring);
        if (e->status) {
            up_free(s);
            return NULL;
        }
    }
    /* a staged upload whose body is whole and whose spans are the put's goes on where it stopped */
    if (s && (s->body_bytes != (size_t)st.st_size || !up_same_spans(s, list))) {
        log_warn("tensors: a staged upload did not match its put (%zu-byte body, %d tensors); copied again", s->body_bytes, s->n);
        up_free(s);
        s = NULL;
    }
    if (!s) {
        out = up_put_kept(list, fd, &declined, e);
        if (!declined || e->status) return out;
        s = up_new(list, cJSON_GetObjectItem(msg, "budget"), fd, (size_t)st.st_size, e);
        /* populated unless page-locked, which faults the pages in itself */
        if (!s || up_map(s, !(tensor_mem_on_gpu() && s->body_bytes >= TENSOR_MEM_PIN_MIN_BYTES), e) != 0) {
            up_free(s);
            return NULL;
        }
    }
    s->fingerprint_s = 0.0;
    staged = s->landed;
    out = cJSON_CreateObject();
    if (!out) api_fail(e, 500, "internal", "", "out of memory");
    if (!out || up_step(s, s->body_bytes, e) != 0 || up_keep(s, list, out, e) != 0) {
        cJSON_Delete(out);
        out = NULL;
    }
    t_kept = clock_monotonic_s();
    body = s->body_bytes, fingerprint_s = s->fingerprint_s;
    up_free(s); /* the rest of the body's mapping goes: part of the worker's time, so of copy_s */
    t_end = clock_monotonic_s();
    if (out && up_timing(out, t_end - t0 - fingerprint_s, fingerprint_s, e) != 0) {
        cJSON_Delete(out);
        out = NULL;
    }
    if (out && body >= TENSOR_MEM_PIN_MIN_BYTES)
        log_info("tensors: put of %zu bytes (%zu staged before): %.4f s in all, the rest copied and kept in %.4f s "
                 "(fingerprint %.4f s), the mapping let go in %.4f s", body, staged, t_end - t0, t_kept - t0,
                 fingerprint_s, t_end - t_kept);
    return out;
}
