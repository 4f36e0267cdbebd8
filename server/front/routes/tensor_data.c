/* tensor_data.c — GET /v1/tensors/{id}/data: a tensor's bytes, as .npy or raw
 * (docs/tensors.md).
 *
 * The worker fills a memfd (npy header + bytes) and libmicrohttpd sends it; from 8 MiB on
 * the front makes the memfd and sends each part as soon as the worker has filled it (the
 * fill and the send overlap: "streamed download" below). Either way one info line logs the
 * phases' times and rates (queue, fill, send), and Server-Timing gives them to the client.
 */
#include "server/front/routes/routes.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/npy.h"
#include "common/proto.h"
#include "server/front/pool/pool.h"
#include "server/front/tensors/tensor_io.h"
#include "server/front/tensors/tensor_table.h"

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
            d->started_s - d->sent_s, d->fill_s, tensor_gbps((double)d->total, d->fill_s), d->bytes_sent,
            (unsigned long long)d->total, send_s, tensor_gbps((double)d->bytes_sent, send_s),
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
    d->ok = status == 200 && proto_type_parse(cJSON_GetStringValue(type)) == PROTO_TENSOR_RESULT;
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
            if (tensor_pread_all(d->fd, buf, n, pos) != 0) {
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
        tensor_reply_error(d->reply, d->status, &e);
        tensor_table_settle_gone(t->id, &e);
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
    const char *format = http_query_param(req, "format");
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
    if (tensor_table_lookup(req->id, "id", &t, &e) != 0) {
        http_send_error(req, &e);
        return;
    }
    msg = cJSON_CreateObject();
    cJSON_AddStringToObject(msg, "type", proto_type_name(PROTO_TENSOR_GET));
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
    if (tensor_exchange(t.device, msg, -1, &reply, &reply_fd, &gen, &e) != 0) {
        cJSON_Delete(msg);
        tensor_table_settle_gone(t.id, &e);
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
             format ? format : "npy", t.device, queue_s, fill_s, tensor_gbps(bytes->valuedouble, fill_s));
    http_send_fd(req, 200, "application/octet-stream", reply_fd, (size_t)bytes->valuedouble, note);
    cJSON_Delete(reply);
}
