/* tensor_stage.c — an upload staged on its GPU while it arrives (tensor_stage.h).
 *
 * The stage's thread is detached: the request's end (tensor_stage_drop) only tells it so, and
 * the thread drops what the worker staged, if anything, and frees the stage itself; a request
 * never waits for the worker's queue to end. Until then the thread polls the memfd's size
 * every TENSOR_STAGE_POLL_MS (the body is written in order, so its size is what has landed).
 * The worker's staged buffers are counted in the upload's reservation while the request lasts;
 * after a dropped request they are freed once the worker reaches the tensor_unstage.
 */
#include "server/front/tensors/tensor_stage.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/proto.h"
#include "server/front/tensors/tensor_io.h"
#include "server/front/tensors/tensor_upload_parse.h"

#define TENSOR_STAGE_POLL_MS 2

struct tensor_stage {
    char key[32], device[16];
    cJSON *query;
    int fd;                 /* the stage's own dup of the memfd */
    uint64_t body_bytes;
    long long budget;
    cJSON *spans;           /* [{offset, bytes}, …] once the header is parsed; NULL before */
    uint64_t parsed_at;     /* the body's size at the last parse that could not read the header */

    pthread_mutex_t mu;
    pthread_cond_t wake;    /* finish or drop asked; a message ended */
    int finishing, dropped, put_sent, busy;
    int given_up;           /* a message or the header failed: nothing more is staged */
    uint64_t staged_bytes;  /* the worker holds a staged copy of [0, staged_bytes) */
    double staged_s;
};

static unsigned long long tensor_stage_keys;

static uint64_t stage_landed(const tensor_stage *s)
{
    struct stat st;
    if (fstat(s->fd, &st) != 0 || st.st_size < 0) return 0;
    return (uint64_t)st.st_size < s->body_bytes ? (uint64_t)st.st_size : s->body_bytes;
}

/* The header's spans, once enough of the body has landed to read it. 0 when they are known
 * (or cannot be yet), -1 when the body is not to be staged: it cannot be parsed (its handler
 * will say why), or it is one tensor for the cpu device. */
static int stage_parse(tensor_stage *s, uint64_t landed)
{
    upload_spec *specs = NULL;
    int count = 0, multi = 0, i;
    api_error e;

    if (s->spans || landed <= s->parsed_at || landed < (s->body_bytes < 4096 ? s->body_bytes : 4096)) return 0;
    memset(&e, 0, sizeof e);
    if (tensor_upload_parse_body(s->query, s->fd, s->body_bytes, &specs, &count, &multi, &e) != 0) {
        s->parsed_at = landed; /* 500: the header reaches past what has landed; try again when more has */
        return e.status == 500 && landed < s->body_bytes ? 0 : -1;
    }
    s->spans = cJSON_CreateArray();
    for (i = 0; s->spans && i < count; i++) {
        cJSON *t = cJSON_CreateObject();
        if (!t || !cJSON_AddNumberToObject(t, "offset", (double)specs[i].offset) ||
            !cJSON_AddNumberToObject(t, "bytes", (double)specs[i].bytes) || !cJSON_AddItemToArray(s->spans, t)) {
            cJSON_Delete(t);
            cJSON_Delete(s->spans);
            s->spans = NULL;
        }
    }
    free(specs);
    /* The cpu device keeps a one-tensor upload where it landed, copying nothing: nothing to stage. */
    if (count == 1 && !strcmp(s->device, "cpu")) return -1;
    return s->spans ? 0 : -1;
}

/* One tensor_stage message: the worker copies what the memfd holds. 0, or -1 (the worker holds
 * nothing staged). */
static int stage_send(tensor_stage *s)
{
    cJSON *msg = cJSON_CreateObject(), *reply = NULL;
    const cJSON *staged, *copy_s, *fp_s;
    int reply_fd = -1, gen, rc;
    api_error e;

    memset(&e, 0, sizeof e);
    if (!msg || !cJSON_AddStringToObject(msg, "type", proto_type_name(PROTO_TENSOR_STAGE)) ||
        !cJSON_AddStringToObject(msg, "key", s->key) || !cJSON_AddNumberToObject(msg, "body_bytes", (double)s->body_bytes) ||
        !cJSON_AddNumberToObject(msg, "budget", (double)s->budget) ||
        !cJSON_AddItemReferenceToObject(msg, "tensors", s->spans)) {
        cJSON_Delete(msg);
        return -1;
    }
    rc = tensor_exchange(s->device, msg, s->fd, &reply, &reply_fd, &gen, &e);
    cJSON_Delete(msg);
    if (reply_fd >= 0) close(reply_fd);
    if (rc != 0) {
        log_info("tensors: staging an upload to %s stopped (%d %s: %s); it is copied at its end", s->device, e.status,
                 e.code, e.message);
        return -1;
    }
    staged = cJSON_GetObjectItem(reply, "staged");
    copy_s = cJSON_GetObjectItem(reply, "copy_s");
    fp_s = cJSON_GetObjectItem(reply, "fingerprint_s");
    pthread_mutex_lock(&s->mu);
    s->staged_bytes = cJSON_IsNumber(staged) ? (uint64_t)staged->valuedouble : s->staged_bytes;
    s->staged_s += (cJSON_IsNumber(copy_s) ? copy_s->valuedouble : 0.0) + (cJSON_IsNumber(fp_s) ? fp_s->valuedouble : 0.0);
    pthread_mutex_unlock(&s->mu);
    cJSON_Delete(reply);
    return 0;
}

/* A staged copy the worker holds, of a request that ended without its put: dropped. */
static void stage_unstage(tensor_stage *s)
{
    cJSON *msg = cJSON_CreateObject(), *reply = NULL;
    int reply_fd = -1, gen;
    api_error e;

    memset(&e, 0, sizeof e);
    if (msg && cJSON_AddStringToObject(msg, "type", proto_type_name(PROTO_TENSOR_UNSTAGE)) &&
        cJSON_AddStringToObject(msg, "key", s->key) &&
        tensor_exchange(s->device, msg, -1, &reply, &reply_fd, &gen, &e) != 0)
        log_warn("tensors: dropping a staged upload on %s failed: %d %s: %s", s->device, e.status, e.code, e.message);
    if (reply_fd >= 0) close(reply_fd);
    cJSON_Delete(reply);
    cJSON_Delete(msg);
}

static void stage_free(tensor_stage *s)
{
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    cJSON_Delete(s->spans);
    cJSON_Delete(s->query);
    if (s->fd >= 0) close(s->fd);
    free(s);
}

static void *stage_main(void *arg)
{
    tensor_stage *s = arg;
    uint64_t sent_at = 0; /* the body's size when the last message went */

    pthread_mutex_lock(&s->mu);
    while (!s->dropped) {
        if (!s->finishing && !s->given_up) {
            uint64_t landed;
            int failed = 0;
            pthread_mutex_unlock(&s->mu);
            landed = stage_landed(s);
            if (stage_parse(s, landed) != 0) failed = 1;
            pthread_mutex_lock(&s->mu);
            if (!failed && s->spans && !s->finishing && !s->dropped && landed < s->body_bytes &&
                landed - sent_at >= TENSOR_STAGE_STEP_BYTES) {
                s->busy = 1;
                pthread_mutex_unlock(&s->mu);
                failed = stage_send(s) != 0;
                sent_at = landed;
                pthread_mutex_lock(&s->mu);
                s->busy = 0;
                pthread_cond_broadcast(&s->wake);
            }
            if (failed) {
                s->given_up = 1;
                s->staged_bytes = 0; /* the worker dropped what it had (or never had any) */
                close(s->fd);        /* the body is the request's alone again */
                s->fd = -1;
            }
            if (!s->finishing && !s->dropped && !s->given_up) {
                struct timespec until = clock_deadline(TENSOR_STAGE_POLL_MS);
                pthread_cond_timedwait(&s->wake, &s->mu, &until);
            }
        } else {
            pthread_cond_wait(&s->wake, &s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (!s->put_sent && s->staged_bytes > 0) stage_unstage(s);
    stage_free(s);
    return NULL;
}

tensor_stage *tensor_stage_start(const char *device, const cJSON *query, int fd, uint64_t body_bytes, long long budget)
{
    tensor_stage *s = calloc(1, sizeof *s);
    pthread_t thread;

    if (!s) return NULL;
    s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    s->query = query ? cJSON_Duplicate(query, 1) : cJSON_CreateObject();
    if (s->fd < 0 || !s->query) {
        if (s->fd >= 0) close(s->fd);
        cJSON_Delete(s->query);
        free(s);
        return NULL;
    }
    snprintf(s->key, sizeof s->key, "stage-%llu", __atomic_add_fetch(&tensor_stage_keys, 1, __ATOMIC_RELAXED));
    snprintf(s->device, sizeof s->device, "%s", device);
    s->body_bytes = body_bytes, s->budget = budget;
    pthread_mutex_init(&s->mu, NULL);
    clock_cond_init(&s->wake);
    if (pthread_create(&thread, NULL, stage_main, s) != 0) {
        log_warn("tensors: no thread to stage an upload (%s); it is copied at its end", strerror(errno));
        stage_free(s);
        return NULL;
    }
    pthread_detach(thread);
    return s;
}

void tensor_stage_finish(tensor_stage *s, tensor_stage_report *report)
{
    memset(report, 0, sizeof *report);
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->finishing = 1;
    pthread_cond_broadcast(&s->wake);
    while (s->busy) pthread_cond_wait(&s->wake, &s->mu);
    if (s->staged_bytes > 0) snprintf(report->key, sizeof report->key, "%s", s->key);
    report->staged_bytes = s->staged_bytes;
    report->staged_s = s->staged_s;
    pthread_mutex_unlock(&s->mu);
}

void tensor_stage_drop(tensor_stage *s, int put_sent)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->dropped = 1;
    s->put_sent = put_sent;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->mu);
}
