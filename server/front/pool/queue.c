/* queue.c — the pool's slots, queues and job endings (queue.h).
 *
 * Every accepted job ends exactly once, in one of these ways:
 *   done      the worker answered a result           → 200 + record, stored "done"
 *   failed    it ran and broke: worker failure, crash, timeout, shutdown mid-run
 *                                                     → 500 + record, stored "failed"
 *   refused   it never ran: the worker refused it (4xx), its device went down, the server
 *             stopped while it was queued            → the status + {"error":…}, row deleted
 *   cancelled it never ran and its record stays: DELETE while queued, its synchronous client
 *             went away while queued (client_gone), an async run queued when the server
 *             stops (shutting_down)                   → stored "cancelled" with that code
 * (an async run keeps a refusal after its 202 as "failed"). Whichever way a run ends, its
 * end hook is called once, by queue_end_hook, before the end is stored or handed to a waiter,
 * and its stored hook once, by queue_stored_hook, after it is stored (or its row deleted).
 */
#include "server/front/pool/queue.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/front/metrics.h"

pthread_mutex_t queue_mu = PTHREAD_MUTEX_INITIALIZER;
settings queue_settings;
worker_slot *queue_slots;
int queue_nslots;
int queue_started, queue_stopping;
int queue_draining;

/* ---------------------------------------------------------------------------- queues -- */

int queue_is_stopping(void)
{
    int stopping;
    pthread_mutex_lock(&queue_mu);
    stopping = queue_stopping;
    pthread_mutex_unlock(&queue_mu);
    return stopping;
}

worker_slot *queue_find_slot_locked(const char *device)
{
    int i;
    if (!device) return NULL;
    for (i = 0; i < queue_nslots; i++)
        if (strcmp(queue_slots[i].name, device) == 0) return &queue_slots[i];
    return NULL;
}

void queue_push_locked(worker_slot *w, pool_job *j)
{
    j->queued_s = clock_monotonic_s();
    j->next = NULL;
    if (w->tail)
        w->tail->next = j;
    else
        w->head = j;
    w->tail = j;
    pthread_cond_signal(&w->work_cond);
}

void queue_push_front_locked(worker_slot *w, pool_job *j)
{
    j->queued_s = clock_monotonic_s();
    j->next = w->head;
    w->head = j;
    if (!w->tail) w->tail = j;
    pthread_cond_signal(&w->work_cond);
}

pool_job *queue_pop_locked(worker_slot *w)
{
    pool_job *j = w->head;

    if (!j) return NULL;
    w->head = j->next;
    if (!w->head) w->tail = NULL;
    j->next = NULL;
    if (j->kind == JOB_RUN) w->queued--;
    return j;
}

void queue_unlink_locked(worker_slot *w, pool_job *j)
{
    pool_job **link;

    for (link = &w->head; *link != j; link = &(*link)->next) {
    }
    *link = j->next;
    if (w->tail == j) {
        pool_job *last = w->head;
        while (last && last->next) last = last->next;
        w->tail = last;
    }
    j->next = NULL;
    if (j->kind == JOB_RUN) w->queued--;
}

int queue_position_locked(const worker_slot *w, const pool_job *j)
{
    const pool_job *q;
    int n = 0;

    for (q = w->head; q; q = q->next) {
        if (q->kind != JOB_RUN) continue; /* verify and tensor jobs do not count */
        n++;
        if (q == j) return n;
    }
    return -1;
}

pool_job *queue_find_run_locked(long long id, worker_slot **slot)
{
    int i;

    for (i = 0; i < queue_nslots; i++) {
        pool_job *q;
        for (q = queue_slots[i].head; q; q = q->next)
            if (q->kind == JOB_RUN && q->id == id) {
                *slot = &queue_slots[i];
                return q;
            }
    }
    return NULL;
}

/* ------------------------------------------------------------------------------ jobs -- */

pool_job *queue_new_run_job(const run_request *r, cJSON *device)
{
    pool_job *j = calloc(1, sizeof *j);

    if (!j) return NULL;
    j->kind = JOB_RUN;
    j->fd = -1;
    j->reply_fd = -1;
    j->generation = -1;
    run_record_init(&j->rec, r, device);
    clock_cond_init(&j->cond);
    return j;
}

void queue_free_job(pool_job *j)
{
    run_record_free(&j->rec);
    pthread_cond_destroy(&j->cond);
    free(j);
}

cJSON *queue_error_body(const char *code, const char *message, const char *field)
{
    cJSON *body = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(body, "error");
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", message);
    if (field && field[0])
        cJSON_AddStringToObject(e, "field", field);
    else
        cJSON_AddNullToObject(e, "field");
    return body;
}

void queue_end_hook(pool_job *j, pool_run_outcome outcome, const cJSON *record)
{
    pool_run_end_fn fn = j->on_end;

    if (j->kind != JOB_RUN || !fn) return;
    j->on_end = NULL;
    fn(&j->rec.request, outcome, record, j->generation);
}

void queue_stored_hook(pool_job *j, pool_run_outcome outcome, const cJSON *record)
{
    pool_run_end_fn fn = j->on_stored;

    if (j->kind != JOB_RUN || !fn) return;
    j->on_stored = NULL;
    fn(&j->rec.request, outcome, record, j->generation);
}

cJSON *queue_end_run(pool_job *j, pool_run_outcome outcome)
{
    cJSON *record;

    run_record_finish(&j->rec, outcome == POOL_RUN_DONE        ? RUN_DONE
                               : outcome == POOL_RUN_CANCELLED ? RUN_CANCELLED
                                                               : RUN_FAILED);
    j->rec.client_gone = __atomic_load_n(&j->client_gone, __ATOMIC_ACQUIRE);
    record = run_record_to_json(&j->rec);
    queue_end_hook(j, outcome, record); /* a kept output is registered before "done" is readable */
    run_record_store(&j->rec, record);
    queue_stored_hook(j, outcome, record);
    metrics_observe_run(&j->rec);
    return record;
}

cJSON *queue_end_run_with_error(pool_job *j, pool_run_outcome outcome, const char *code, const char *message)
{
    run_record_set_error(&j->rec, code, message);
    return queue_end_run(j, outcome);
}

void queue_finish_locked(pool_job *j, int http_status, cJSON *response)
{
    if (j->detached) {
        cJSON_Delete(response);
        queue_free_job(j);
        return;
    }
    j->http_status = http_status;
    j->response = response;
    j->finished = 1;
    pthread_cond_broadcast(&j->cond);
}

void queue_refuse_locked(pool_job *j, int http_status, const char *code, const char *message, const char *field)
{
    if (j->kind == JOB_TENSOR) { /* resident tensors: no run row */
        queue_finish_locked(j, http_status, queue_error_body(code, message, field));
        return;
    }
    if (j->kind == JOB_VERIFY) {
        j->verify = cJSON_CreateObject();
        cJSON_AddStringToObject(j->verify, "error", message);
        queue_finish_locked(j, 500, NULL);
        return;
    }
    if (j->detached) { /* the client holds its id (202): keep the run, failed with the reason */
        queue_finish_locked(j, http_status, queue_end_run_with_error(j, POOL_RUN_FAILED, code, message));
        return;
    }
    queue_end_hook(j, POOL_RUN_REFUSED, NULL);
    run_record_delete(&j->rec);
    queue_stored_hook(j, POOL_RUN_REFUSED, NULL);
    queue_finish_locked(j, http_status, queue_error_body(code, message, field));
}

void queue_refuse_all_locked(worker_slot *w, const char *code, const char *message)
{
    pool_job *j;

    while ((j = queue_pop_locked(w)) != NULL) queue_refuse_locked(j, 503, code, message, "device");
}

/* End a job that waits in a queue (already unlinked) because the server stops. */
static void job_shutdown_locked(pool_job *j)
{
    if (j->kind == JOB_RUN && j->detached) {
        queue_finish_locked(j, 503, queue_end_run_with_error(j, POOL_RUN_CANCELLED, "shutting_down", POOL_SHUTDOWN_MESSAGE));
        return;
    }
    queue_refuse_locked(j, 503, "shutting_down", POOL_SHUTDOWN_MESSAGE, NULL);
}

void queue_shutdown_locked(worker_slot *w, int all)
{
    pool_job *j = w->head, *keep = NULL, **keep_tail = &keep;

    w->head = w->tail = NULL;
    while (j) {
        pool_job *next = j->next;
        j->next = NULL;
        if (all || j->kind == JOB_RUN) {
            if (j->kind == JOB_RUN) w->queued--;
            job_shutdown_locked(j);
        } else { /* a verify of a running job, or a tensor operation: it goes on */
            *keep_tail = j;
            keep_tail = &j->next;
            w->tail = j;
        }
        j = next;
    }
    w->head = keep;
}

void queue_cancel_run_locked(worker_slot *w, pool_job *j, const char *code, const char *message)
{
    cJSON *record;

    /* Unlinked, it is ours alone: neither the dispatcher nor a refusal sees it, and its
     * waiter, if any, waits for our end. */
    queue_unlink_locked(w, j);
    j->ending = 1;
    pthread_mutex_unlock(&queue_mu);
    record = queue_end_run_with_error(j, POOL_RUN_CANCELLED, code, message); /* what it held is released */
    pthread_mutex_lock(&queue_mu);
    if (j->detached) {
        queue_finish_locked(j, 200, record); /* frees both */
    } else { /* a synchronous caller waits for it: tell it why */
        cJSON_Delete(record);
        queue_finish_locked(j, 409, queue_error_body(code, message, NULL));
    }
}
