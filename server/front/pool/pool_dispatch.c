/* pool_dispatch.c — the dispatcher of each slot (pool_dispatch.h).
 *
 * The dispatcher drops queue_mu for all I/O (socket, store, fork). A crash, a fatal (sticky)
 * error or a timeout ends the child (SIGKILL for a timeout); the dispatcher reaps it, starts a
 * new one and goes on with the queue.
 *
 * GPU outputs verified against the fp64 reference: the GPU worker answers its result with a
 * memfd of the output; the GPU slot's dispatcher puts a verify job at the front of the cpu
 * slot's queue (ahead of waiting runs, so a verify never waits behind a long queue and is
 * never refused for a full one), waits for it, and puts its answer in result.verify.
 */
#include "server/front/pool/pool_dispatch.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/ipc.h"
#include "common/log.h"
#include "common/proto.h"
#include "server/front/pool/children.h"
#include "server/front/pool/pool_finish.h"
#include "server/front/pool/queue.h"

#define POOL_HELLO_TRIES 3       /* failed hellos in a row before a slot is marked down */
/* A run is stored "running" once its worker has held it this long without answering: most
 * small runs answer first, and their final record is then their only store write after the
 * queued one (each write rewrites the record's indexes; docs/operations.md, "Throughput"). */
#define POOL_RUNNING_AFTER_MS 20
#define POOL_RETRY_PAUSE_MS 1000 /* between failed hellos */

static pool_restart_fn dispatch_restart_hook;

void pool_dispatch_on_restart(pool_restart_fn fn) { dispatch_restart_hook = fn; }

/* ------------------------------------------------------------------------ processes -- */

/* Start the slot's child and wait for its hello. 0 with the slot's sock, pid and device
 * set; -1 with why filled and no child left. */
static int slot_spawn(worker_slot *w, char *why, size_t why_len)
{
    cJSON *device, *variants;
    pid_t pid;
    int sock = children_start(w->name, &pid, why, why_len);

    if (sock < 0) return -1;
    pthread_mutex_lock(&queue_mu);
    w->sock = sock;
    w->pid = pid;
    if (queue_stopping) shutdown(w->sock, SHUT_RDWR); /* pool_stop wakes a hello wait so */
    pthread_mutex_unlock(&queue_mu);

    if (children_await_hello(sock, pid, &device, &variants, why, why_len) == 0) {
        pthread_mutex_lock(&queue_mu);
        cJSON_Delete(w->device);
        w->device = device;
        cJSON_Delete(w->variants);
        w->variants = variants;
        pthread_mutex_unlock(&queue_mu);
        return 0;
    }
    pthread_mutex_lock(&queue_mu);
    close(w->sock);
    w->sock = -1;
    w->pid = 0;
    pthread_mutex_unlock(&queue_mu);
    return -1;
}

/* The child is gone or must go: kill it with sig (0: it is ending by itself), reap it, and
 * mark the slot for a restart. Returns the wait status (for the failure message). */
static int slot_lose_worker(worker_slot *w, int sig)
{
    int status, stopping, generation;

    /* At shutdown a worker busy on the device does not read its EOF: SIGTERM it. */
    if (sig == 0 && queue_is_stopping()) sig = SIGTERM;
    status = children_reap(w->pid, sig, CHILDREN_STOP_GRACE_MS);

    pthread_mutex_lock(&queue_mu);
    close(w->sock);
    w->sock = -1;
    w->pid = 0;
    stopping = queue_stopping;
    if (!stopping) {
        w->state = SLOT_STARTING;
        w->restarts++;
    }
    generation = w->restarts;
    pthread_cond_broadcast(&w->state_cond);
    pthread_mutex_unlock(&queue_mu);
    if (!stopping && dispatch_restart_hook) dispatch_restart_hook(w->name, generation);
    return status;
}

/* ------------------------------------------------------------------------- exchanges -- */

typedef enum exchange_outcome {
    EXCHANGE_REPLY,   /* *reply is the worker's answer to this job */
    EXCHANGE_TIMEOUT, /* no answer within job_timeout_s: the worker was killed */
    EXCHANGE_LOST     /* the socket broke or the worker crashed: it was reaped */
} exchange_outcome;

/* A run the worker holds: stored "running" after POOL_RUNNING_AFTER_MS without an answer.
 * Returns the milliseconds the store write took (0: none was needed). */
static double slot_store_running(worker_slot *w, pool_job *run)
{
    struct pollfd pfd = {w->sock, POLLIN, 0};
    double t0;

    if (poll(&pfd, 1, POOL_RUNNING_AFTER_MS) != 0) return 0.0; /* answered (or broke): no write */
    t0 = clock_monotonic_s();
    run_record_save(&run->rec);
    return (clock_monotonic_s() - t0) * 1e3;
}

/* The second half of an exchange (slot_exchange): rc is the send's result, sent_s when it was
 * made (the job's job_timeout_s counts from it). Waits for the answer with this job's id.
 * On TIMEOUT and LOST the worker is already gone (killed/reaped, slot marked for restart) and
 * how describes it ("crashed (signal 11, Segmentation fault)"). */
static exchange_outcome slot_answer(worker_slot *w, long long job_id, int rc, double sent_s, cJSON **reply,
                                    int *reply_fd, char *how, size_t how_len)
{
    int status;

    *reply = NULL;
    *reply_fd = -1;
    if (rc == IPC_OK) {
        int left_ms = queue_settings.job_timeout_s * 1000 - (int)((clock_monotonic_s() - sent_s) * 1e3);
        rc = ipc_recv_json(w->sock, reply, reply_fd, left_ms > 0 ? left_ms : 0);
    }
    if (rc == IPC_OK) {
        const cJSON *job = cJSON_GetObjectItem(*reply, "job");
        if (cJSON_IsNumber(job) && (long long)job->valuedouble == job_id) return EXCHANGE_REPLY;
        log_error("worker %s answered for job %.0f while running job %lld; restarting it", w->name,
                  cJSON_IsNumber(job) ? job->valuedouble : -1.0, job_id);
        cJSON_Delete(*reply);
        *reply = NULL;
        if (*reply_fd >= 0) close(*reply_fd);
        *reply_fd = -1;
        slot_lose_worker(w, SIGKILL);
        snprintf(how, how_len, "broke the protocol");
        return EXCHANGE_LOST;
    }
    if (rc == IPC_TIMEOUT) {
        slot_lose_worker(w, SIGKILL);
        snprintf(how, how_len, "killed");
        return EXCHANGE_TIMEOUT;
    }
    /* EOF or a broken frame: the worker died, or is dying; give it the grace to end. */
    status = slot_lose_worker(w, rc == IPC_EOF ? 0 : SIGKILL);
    children_describe_status(status, how, how_len);
    return EXCHANGE_LOST;
}

/* Send msg (+fd) and wait for the answer with this job's id, under job_timeout_s
 * (slot_answer). */
static exchange_outcome slot_exchange(worker_slot *w, long long job_id, cJSON *msg, int fd, cJSON **reply,
                                      int *reply_fd, char *how, size_t how_len)
{
    double sent_s = clock_monotonic_s();
    return slot_answer(w, job_id, ipc_send_json(w->sock, msg, fd), sent_s, reply, reply_fd, how, how_len);
}

/* A message of type t for job id: {"type","job"}; caller deletes. */
static cJSON *dispatch_message(proto_type t, long long id)
{
    cJSON *msg = cJSON_CreateObject();
    cJSON_AddStringToObject(msg, "type", proto_type_name(t));
    cJSON_AddNumberToObject(msg, "job", (double)id);
    return msg;
}

static proto_type reply_type(const cJSON *reply)
{
    return proto_type_parse(cJSON_GetStringValue(cJSON_GetObjectItem(reply, "type")));
}

/* A lost worker's message for a job's error. */
static void lost_message(const worker_slot *w, exchange_outcome out, const char *how, char *buf, size_t len)
{
    if (out == EXCHANGE_TIMEOUT)
        snprintf(buf, len, "job exceeded job_timeout_s=%d s; worker %s killed%s", queue_settings.job_timeout_s,
                 w->name, queue_is_stopping() ? " (the server is stopping)" : " and restarted");
    else if (queue_is_stopping())
        snprintf(buf, len, "the server stopped while the job ran on worker %s", w->name);
    else
        snprintf(buf, len, "worker %s %s while running the job; restarted", w->name, how);
}

/* -------------------------------------------------------------------------- verifies -- */

/* Queue a verify of run's output (fd) at the front of the cpu slot and wait for its answer.
 * Returns the verify object or {"error":"…"}; caller deletes. */
static cJSON *verify_on_cpu(const pool_job *run, int fd)
{
    worker_slot *cpu = &queue_slots[0];
    pool_job v;
    struct stat st;
    cJSON *answer;

    memset(&v, 0, sizeof v);
    v.kind = JOB_VERIFY;
    v.id = run->id;
    v.checked = &run->rec;
    v.fd = fd;
    v.bytes = fstat(fd, &st) == 0 ? (size_t)st.st_size : 0;
    clock_cond_init(&v.cond);

    pthread_mutex_lock(&queue_mu);
    if (cpu->state == SLOT_DOWN || queue_stopping)
        queue_refuse_locked(&v, 503, "no_device",
                          cpu->state == SLOT_DOWN ? "the cpu device is down" : "the server is stopping", "");
    else
        queue_push_front_locked(cpu, &v);
    while (!v.finished) pthread_cond_wait(&v.cond, &queue_mu);
    pthread_mutex_unlock(&queue_mu);
    pthread_cond_destroy(&v.cond);
    answer = v.verify;
    if (!answer) {
        answer = cJSON_CreateObject();
        cJSON_AddStringToObject(answer, "error", "the cpu verify gave no answer");
    }
    return answer;
}

/* On the cpu slot's dispatcher: the exchange of one verify job. */
static void slot_run_verify(worker_slot *w, pool_job *v)
{
    cJSON *msg = dispatch_message(PROTO_VERIFY, v->id), *reply = NULL, *answer = NULL;
    char how[160], text[600];
    int reply_fd = -1;
    exchange_outcome out;

    cJSON_AddItemToObject(msg, "request", run_request_to_json(&v->checked->request));
    cJSON_AddNumberToObject(msg, "bytes", (double)v->bytes);
    out = slot_exchange(w, v->id, msg, v->fd, &reply, &reply_fd, how, sizeof how);
    cJSON_Delete(msg);
    if (reply_fd >= 0) close(reply_fd);

    if (out == EXCHANGE_REPLY && reply_type(reply) == PROTO_VERIFY_RESULT &&
        cJSON_IsObject(cJSON_GetObjectItem(reply, "verify"))) {
        answer = cJSON_DetachItemFromObject(reply, "verify");
    } else {
        const cJSON *m = cJSON_GetObjectItem(reply, "message");
        const cJSON *e = cJSON_GetObjectItem(cJSON_GetObjectItem(reply, "error"), "message");

        if (out != EXCHANGE_REPLY)
            lost_message(w, out, how, text, sizeof text);
        else if (cJSON_IsString(e))
            snprintf(text, sizeof text, "%s", e->valuestring);
        else if (cJSON_IsString(m))
            snprintf(text, sizeof text, "%s", m->valuestring);
        else
            snprintf(text, sizeof text, "unexpected answer from worker %s", w->name);
        answer = cJSON_CreateObject();
        cJSON_AddStringToObject(answer, "error", text);
        if (out == EXCHANGE_REPLY && cJSON_IsTrue(cJSON_GetObjectItem(reply, "fatal"))) slot_lose_worker(w, 0);
    }
    cJSON_Delete(reply);
    pthread_mutex_lock(&queue_mu);
    v->verify = answer;
    queue_finish_locked(v, 200, NULL);
    pthread_mutex_unlock(&queue_mu);
}

/* ------------------------------------------------------------------------------ runs -- */

/* The error object of a worker "error" reply as an api answer: 4xx + {"error":…}; -1 when
 * it is not a 4xx. */
static int refusal_from_reply(const cJSON *reply, cJSON **body)
{
    const cJSON *e = cJSON_GetObjectItem(reply, "error");
    const cJSON *status = cJSON_GetObjectItem(e, "status");
    const cJSON *code = cJSON_GetObjectItem(e, "code");
    const cJSON *message = cJSON_GetObjectItem(e, "message");
    const cJSON *field = cJSON_GetObjectItem(e, "field");
    int http = cJSON_IsNumber(status) ? (int)status->valuedouble : 0;

    if (http < 400 || http > 499) return -1;
    *body = queue_error_body(cJSON_IsString(code) ? code->valuestring : "refused",
                            cJSON_IsString(message) ? message->valuestring : "the worker refused the job",
                            cJSON_IsString(field) ? field->valuestring : "");
    return http;
}

static void job_failed(pool_job *j, const char *code, const char *message)
{
    cJSON *record = queue_end_run_with_error(j, POOL_RUN_FAILED, code, message);

    log_warn("run %lld failed: %s: %s", j->id, code, message);
    pthread_mutex_lock(&queue_mu);
    queue_finish_locked(j, 500, record);
    pthread_mutex_unlock(&queue_mu);
}

/* The worker refused the run (an "error" reply): a synchronous run with a 4xx is answered
 * so and forgotten; an async one (or another status) is kept, failed with the worker's code
 * (e.g. 410 "gone": a resident input's worker restarted). */
static void job_refused_by_worker(pool_job *j, const cJSON *reply)
{
    cJSON *body = NULL;
    int http, detached;

    pthread_mutex_lock(&queue_mu); /* a waiter may detach the job meanwhile (its client left) */
    detached = j->detached;
    pthread_mutex_unlock(&queue_mu);
    http = detached ? -1 : refusal_from_reply(reply, &body);
    if (http > 0) {
        queue_end_hook(j, POOL_RUN_REFUSED, NULL);
        pthread_mutex_lock(&queue_mu);
        run_record_delete(&j->rec);
        queue_stored_hook(j, POOL_RUN_REFUSED, NULL);
        queue_finish_locked(j, http, body);
        pthread_mutex_unlock(&queue_mu);
    } else {
        const cJSON *e = cJSON_GetObjectItem(reply, "error");
        const cJSON *m = cJSON_GetObjectItem(e, "message"), *code = cJSON_GetObjectItem(e, "code");
        job_failed(j, cJSON_IsString(code) && code->valuestring[0] ? code->valuestring : "job_failed",
                   cJSON_IsString(m) ? m->valuestring : "the worker reported an error");
    }
}

/* The record's "service": where the run's time went from its queue to its answer, the
 * worker's phases (its result's worker_ms) included (docs/api.md). */
static void add_service(cJSON *result, const pool_job *j, double taken_s, double store_running_ms, double answered_s,
                        double verified_s)
{
    cJSON *service = cJSON_CreateObject(), *worker = cJSON_DetachItemFromObject(result, "worker_ms");

    if (!service) {
        cJSON_Delete(worker);
        return;
    }
    cJSON_AddNumberToObject(service, "queued_ms", (taken_s - j->queued_s) * 1e3);
    cJSON_AddNumberToObject(service, "store_running_ms", store_running_ms);
    cJSON_AddNumberToObject(service, "exchange_ms", (answered_s - taken_s) * 1e3 - store_running_ms);
    if (verified_s > answered_s) cJSON_AddNumberToObject(service, "cpu_verify_ms", (verified_s - answered_s) * 1e3);
    cJSON_AddItemToObject(service, "worker_ms", worker ? worker : cJSON_CreateNull());
    cJSON_AddItemToObject(result, "service", service);
}

static void slot_run_job(worker_slot *w, pool_job *j)
{
    cJSON *msg, *reply = NULL, *device;
    char how[160], text[600];
    int reply_fd = -1;
    exchange_outcome out;
    proto_type type;
    double taken_s = clock_monotonic_s(), sent_s, store_running_ms = 0.0, answered_s, verified_s = 0.0;
    int rc;

    j->rec.queue_wait_s = taken_s - j->queued_s;
    /* running: the device as it said hello this time, and the generation it runs on */
    pthread_mutex_lock(&queue_mu);
    device = w->device ? cJSON_Duplicate(w->device, 1) : NULL;
    j->generation = w->restarts;
    pthread_mutex_unlock(&queue_mu);
    run_record_set_device(&j->rec, device);
    j->rec.status = RUN_RUNNING; /* stored once the worker has held it a while (slot_store_running) */

    msg = dispatch_message(PROTO_RUN, j->id);
    cJSON_AddItemToObject(msg, "request", run_request_to_json(&j->rec.request));
    sent_s = clock_monotonic_s();
    rc = ipc_send_json(w->sock, msg, -1);
    if (rc == IPC_OK) store_running_ms = slot_store_running(w, j); /* while the worker runs it */
    out = slot_answer(w, j->id, rc, sent_s, &reply, &reply_fd, how, sizeof how);
    cJSON_Delete(msg);
    answered_s = clock_monotonic_s();
    if (out != EXCHANGE_REPLY) {
        lost_message(w, out, how, text, sizeof text);
        log_warn("worker %s: %s", w->name, text);
        job_failed(j, out == EXCHANGE_TIMEOUT ? "timeout" : queue_is_stopping() ? "server_stopping" : "worker_crashed",
                   text);
        return;
    }

    type = reply_type(reply);
    if (type == PROTO_RESULT && cJSON_IsObject(cJSON_GetObjectItem(reply, "result"))) {
        cJSON *result = cJSON_DetachItemFromObject(reply, "result");
        if (reply_fd >= 0) { /* the GPU worker wants its output checked by the fp64 reference */
            cJSON *verify;
            if (w == &queue_slots[0]) {
                verify = cJSON_CreateObject();
                cJSON_AddStringToObject(verify, "error", "the cpu device cannot verify its own output");
            } else {
                verify = verify_on_cpu(j, reply_fd);
                verified_s = clock_monotonic_s();
            }
            close(reply_fd);
            reply_fd = -1;
            if (cJSON_GetObjectItem(result, "verify"))
                cJSON_ReplaceItemInObject(result, "verify", verify);
            else
                cJSON_AddItemToObject(result, "verify", verify);
        }
        add_service(result, j, taken_s, store_running_ms, answered_s, verified_s);
        pool_finish_done(j, result); /* stored and answered there: this thread takes the next job */
    } else if (type == PROTO_ERROR) {
        job_refused_by_worker(j, reply);
    } else if (type == PROTO_FAILED) {
        const cJSON *m = cJSON_GetObjectItem(reply, "message");
        if (cJSON_IsTrue(cJSON_GetObjectItem(reply, "fatal"))) {
            int status = slot_lose_worker(w, 0); /* it exits by itself (status 3) */
            children_describe_status(status, how, sizeof how);
            log_warn("worker %s: fatal error; it %s; restarting", w->name, how);
        }
        job_failed(j, "job_failed", cJSON_IsString(m) ? m->valuestring : "the job failed");
    } else {
        slot_lose_worker(w, SIGKILL);
        snprintf(text, sizeof text, "worker %s sent an unexpected answer; killed and restarted", w->name);
        job_failed(j, "worker_crashed", text);
    }
    if (reply_fd >= 0) close(reply_fd);
    cJSON_Delete(reply);
}

/* One tensor_* exchange. The answer (tensor_result, or the worker's error/failed message)
 * goes to the waiter untouched; a lost worker is a 500 with the reason. */
static void slot_run_tensor(worker_slot *w, pool_job *j)
{
    cJSON *reply = NULL;
    char how[160], text[600];
    int reply_fd = -1, status = 200;
    exchange_outcome out;

    pthread_mutex_lock(&queue_mu);
    j->generation = w->restarts;
    pthread_mutex_unlock(&queue_mu);
    out = slot_exchange(w, j->id, j->msg, j->fd, &reply, &reply_fd, how, sizeof how);
    if (out != EXCHANGE_REPLY) {
        lost_message(w, out, how, text, sizeof text);
        log_warn("worker %s: %s", w->name, text);
        reply = queue_error_body("worker_crashed", text, "");
        status = 500;
    } else if (reply_type(reply) == PROTO_FAILED && cJSON_IsTrue(cJSON_GetObjectItem(reply, "fatal"))) {
        slot_lose_worker(w, 0);
    }
    pthread_mutex_lock(&queue_mu);
    j->reply_fd = reply_fd;
    queue_finish_locked(j, status, reply);
    pthread_mutex_unlock(&queue_mu);
}

/* ------------------------------------------------------------------------ the thread -- */

/* (Re)start w's worker; after POOL_HELLO_TRIES failed hellos in a row the slot is down and
 * its queue refused. Called without queue_mu. */
static void slot_start_worker(worker_slot *w, int *failures)
{
    char why[512];

    if (slot_spawn(w, why, sizeof why) == 0) {
        *failures = 0;
        pthread_mutex_lock(&queue_mu);
        w->state = SLOT_UP;
        w->reason[0] = '\0';
        pthread_cond_broadcast(&w->state_cond);
        pthread_mutex_unlock(&queue_mu);
        log_info("worker %s: up", w->name);
        return;
    }
    (*failures)++;
    log_warn("worker %s: hello failed (%d of %d): %s", w->name, *failures, POOL_HELLO_TRIES, why);
    pthread_mutex_lock(&queue_mu);
    snprintf(w->reason, sizeof w->reason, "%s", why);
    if (*failures >= POOL_HELLO_TRIES && !queue_stopping) {
        char message[700];
        w->state = SLOT_DOWN;
        snprintf(message, sizeof message, "device %s is down: %s", w->name, why);
        log_error("worker %s: marked down after %d failed hellos: %s", w->name, *failures, why);
        queue_refuse_all_locked(w, "no_device", message);
        pthread_cond_broadcast(&w->state_cond);
    } else if (!queue_stopping) {
        struct timespec until = clock_deadline(POOL_RETRY_PAUSE_MS);
        pthread_cond_timedwait(&w->work_cond, &queue_mu, &until);
    }
    pthread_mutex_unlock(&queue_mu);
}

/* Stopping: end what still waits (pool_quiesce took the runs already), end the child. */
static void slot_stop(worker_slot *w)
{
    pthread_mutex_lock(&queue_mu);
    queue_shutdown_locked(w, 1);
    pthread_mutex_unlock(&queue_mu);
    if (w->pid > 0) {
        int status = children_reap(w->pid, SIGTERM, CHILDREN_STOP_GRACE_MS);
        char how[128];
        if (status >= 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)
            snprintf(how, sizeof how, "ended on SIGTERM");
        else
            children_describe_status(status, how, sizeof how);
        log_info("worker %s: stopped; it %s", w->name, how);
    }
    pthread_mutex_lock(&queue_mu);
    if (w->sock >= 0) close(w->sock);
    w->sock = -1;
    w->pid = 0;
    w->state = SLOT_DOWN;
    snprintf(w->reason, sizeof w->reason, "stopped");
    pthread_cond_broadcast(&w->state_cond);
    pthread_mutex_unlock(&queue_mu);
}

void *pool_dispatch_thread(void *slot)
{
    worker_slot *w = slot;
    int failures = 0;

    for (;;) {
        pool_job *j;

        pthread_mutex_lock(&queue_mu);
        if (queue_stopping) {
            pthread_mutex_unlock(&queue_mu);
            break;
        }
        if (w->state == SLOT_DOWN || (w->sock < 0 && queue_draining && !w->head)) {
            /* down: nothing more to do until pool_stop; stopping: a restart would serve nothing */
            pthread_cond_wait(&w->work_cond, &queue_mu);
            pthread_mutex_unlock(&queue_mu);
            continue;
        }
        if (w->sock < 0) {
            pthread_mutex_unlock(&queue_mu);
            slot_start_worker(w, &failures);
            continue;
        }
        while (!w->head && !queue_stopping) pthread_cond_wait(&w->work_cond, &queue_mu);
        if (queue_stopping) {
            pthread_mutex_unlock(&queue_mu);
            break;
        }
        j = queue_pop_locked(w);
        if (j->kind == JOB_RUN) {
            w->current_run = j->id;
            w->current_req = j->rec.request;
        }
        w->running = 1;
        pthread_mutex_unlock(&queue_mu);

        if (j->kind == JOB_VERIFY)
            slot_run_verify(w, j);
        else if (j->kind == JOB_TENSOR)
            slot_run_tensor(w, j);
        else
            slot_run_job(w, j);
        pthread_mutex_lock(&queue_mu);
        w->running = 0;
        w->current_run = 0;
        pthread_mutex_unlock(&queue_mu);
    }
    slot_stop(w);
    return NULL;
}
