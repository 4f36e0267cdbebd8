/* study_queue.c — the server's studies (study.h): a FIFO of those waiting and one thread that
 * executes them one at a time, so that two studies never interleave their runs and each
 * measures its variants side by side; their cancel, their live state and the waits of
 * GET /v1/studies/ID?wait=S.
 *
 * Every field here and every live study's fields are read and written under study_lock(),
 * which is never held while calling the pool (the pool's end hook takes it).
 */
#include "server/front/studies/study.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/front/metrics.h"
#include "server/front/pool/pool.h"
#include "server/front/store/store.h"

static study *waiting[STUDY_QUEUE_MAX]; /* in arrival order */
static int n_waiting;
static study *running;
static int stopping, thread_started;
static pthread_t runner;

/* The error body {"error": {"code", "message", "field": null}}. */
static cJSON *study_error_body(const char *code, const char *message)
{
    cJSON *body = cJSON_CreateObject(), *error = cJSON_AddObjectToObject(body, "error");

    cJSON_AddStringToObject(error, "code", code);
    cJSON_AddStringToObject(error, "message", message);
    cJSON_AddNullToObject(error, "field");
    return body;
}

/* Under the lock: number the waiting studies (1: next) and tell the gauges. */
static void study_renumber_locked(void)
{
    int i;

    for (i = 0; i < n_waiting; i++) waiting[i]->queue_position = i + 1;
    metrics_set_studies(n_waiting, running != NULL);
}

/* Under the lock: take waiting study i out of the queue. */
static study *study_unqueue_locked(int i)
{
    study *s = waiting[i];

    memmove(&waiting[i], &waiting[i + 1], (size_t)(n_waiting - i - 1) * sizeof waiting[0]);
    n_waiting--;
    s->queue_position = 0;
    study_renumber_locked();
    return s;
}

/* A study that never ran ends cancelled with code (its record stored): a DELETE, a stop. */
static void study_end_unrun(study *s, const char *code, const char *message)
{
    study_lock();
    s->status = STUDY_CANCELLED;
    snprintf(s->error_code, sizeof s->error_code, "%s", code);
    snprintf(s->error_message, sizeof s->error_message, "%s", message);
    clock_text_now_iso(s->finished, sizeof s->finished);
    study_unlock();
    study_store(s);
    metrics_observe_study("cancelled");
}

static void study_destroy(study *s)
{
    study_free(s);
    free(s);
}

static void *study_runner_main(void *arg)
{
    (void)arg;
    study_lock();
    for (;;) {
        study *s;
        while (n_waiting == 0 && !stopping) study_wait_locked(1000);
        if (n_waiting == 0) break; /* stopping, and nothing waits */
        s = study_unqueue_locked(0);
        running = s;
        study_renumber_locked();
        study_unlock();

        study_execute(s, NULL);
        metrics_observe_study(study_status_name(s->status));

        study_lock();
        running = NULL;
        study_renumber_locked();
        study_unlock();
        study_wake(); /* its waiters see it final */
        study_destroy(s);
        study_lock();
    }
    study_unlock();
    return NULL;
}

int studies_start(void)
{
    int rc;

    study_lock();
    stopping = 0;
    rc = pthread_create(&runner, NULL, study_runner_main, NULL);
    thread_started = rc == 0;
    study_unlock();
    if (rc != 0) log_error("studies: cannot start their thread: %s", strerror(rc));
    return rc == 0 ? 0 : -1;
}

int studies_submit(study *s, cJSON **response)
{
    char code[32], message[400];
    int status, position;

    study_lock();
    status = stopping ? 503 : n_waiting >= STUDY_QUEUE_MAX ? 429 : 0;
    study_unlock();
    if (status == 503) {
        *response = study_error_body("shutting_down", "the server is stopping; it takes no new studies");
        goto refused;
    }
    if (status == 429) {
        snprintf(message, sizeof message, "%d studies wait already (at most %d); retry later", STUDY_QUEUE_MAX,
                 STUDY_QUEUE_MAX);
        *response = study_error_body("queue_full", message);
        goto refused;
    }
    /* A store that cannot keep runs cannot keep the study's either. */
    if ((status = store_refusal(code, sizeof code, message, sizeof message)) != 0) {
        *response = study_error_body(code, message);
        goto refused;
    }
    if (study_store_new(s) != 0) {
        status = store_refusal(code, sizeof code, message, sizeof message);
        *response = status ? study_error_body(code, message) : study_error_body("store_error", "the study could not be stored");
        if (!status) status = 500;
        goto refused;
    }

    study_lock();
    if (stopping || n_waiting >= STUDY_QUEUE_MAX) { /* it changed while the study was stored */
        status = stopping ? 503 : 429;
        study_unlock();
        study_end_unrun(s, stopping ? "shutting_down" : "queue_full", "refused before it ran");
        *response = study_error_body(status == 503 ? "shutting_down" : "queue_full",
                                     status == 503 ? "the server is stopping; it takes no new studies"
                                                   : "too many studies wait; retry later");
        goto refused;
    }
    waiting[n_waiting++] = s;
    study_renumber_locked();
    position = s->queue_position;
    *response = cJSON_CreateObject();
    cJSON_AddNumberToObject(*response, "id", (double)s->id);
    cJSON_AddStringToObject(*response, "status", "queued");
    cJSON_AddNumberToObject(*response, "runs_total", s->n_runs);
    cJSON_AddNumberToObject(*response, "queue_position", position);
    study_unlock();
    study_wake();
    log_info("study %lld queued: %d variants x %d rounds", s->id, s->n_variants, s->rounds);
    return 202;
refused:
    study_destroy(s);
    return status;
}

/* Under the lock: the live study id (waiting or running), or NULL; *at its queue index. */
static study *study_find_locked(long long id, int *at)
{
    int i;

    *at = -1;
    if (running && running->id == id) return running;
    for (i = 0; i < n_waiting; i++)
        if (waiting[i]->id == id) {
            *at = i;
            return waiting[i];
        }
    return NULL;
}

cJSON *studies_live_json(long long id)
{
    cJSON *json = NULL;
    study *s;
    int at;

    study_lock();
    s = study_find_locked(id, &at);
    if (s) json = study_to_json(s);
    study_unlock();
    return json;
}

int studies_cancel(long long id, cJSON **record)
{
    long long run_id = 0;
    study *s;
    int at, waited_ms;

    study_lock();
    s = study_find_locked(id, &at);
    if (!s) {
        study_unlock();
        return 1;
    }
    if (at >= 0) { /* it never started: it ends here */
        study_unqueue_locked(at);
        study_unlock();
        study_end_unrun(s, "cancelled", "cancelled (DELETE /v1/studies/ID) while it was queued");
        *record = study_to_json(s);
        study_destroy(s);
        study_wake();
        log_info("study %lld cancelled while queued", id);
        return 0;
    }
    s->cancel_requested = 1;
    snprintf(s->cancel_code, sizeof s->cancel_code, "cancelled");
    run_id = study_current_run_locked(s);
    study_unlock();
    /* Its run waiting in a queue is cancelled there; one that runs finishes and counts. */
    if (run_id > 0) pool_cancel(run_id);
    log_info("study %lld cancelled while running", id);
    /* Most cancels end the study at once (its run was queued): answer its final record. */
    for (waited_ms = 0; waited_ms < 5000; waited_ms += 100) {
        study_lock();
        s = study_find_locked(id, &at);
        if (!s) {
            study_unlock();
            break;
        }
        study_wait_locked(100);
        study_unlock();
    }
    study_lock();
    s = study_find_locked(id, &at);
    *record = s ? study_to_json(s) : NULL;
    study_unlock();
    if (!*record) {
        char *text = store_get_study(id);
        *record = text ? cJSON_Parse(text) : NULL;
        free(text);
    }
    return 0;
}

void studies_wait(long long id, int seconds)
{
    long long until = clock_monotonic_ms() + (long long)seconds * 1000;
    int at;

    study_lock();
    while (!stopping && study_find_locked(id, &at)) {
        long long left = until - clock_monotonic_ms();
        if (left <= 0) break;
        study_wait_locked(left > 1000 ? 1000 : (int)left);
    }
    study_unlock();
}

void studies_quiesce(void)
{
    study *ended[STUDY_QUEUE_MAX];
    int n, i;

    study_lock();
    stopping = 1;
    n = n_waiting;
    memcpy(ended, waiting, (size_t)n * sizeof ended[0]);
    n_waiting = 0;
    if (running) {
        running->cancel_requested = 1;
        snprintf(running->cancel_code, sizeof running->cancel_code, "shutting_down");
    }
    study_renumber_locked();
    study_unlock();
    for (i = 0; i < n; i++) {
        study_end_unrun(ended[i], "shutting_down", "the server stopped before the study ran");
        study_destroy(ended[i]);
    }
    study_wake();
}

void studies_stop(void)
{
    int joinable;

    studies_quiesce();
    study_lock();
    joinable = thread_started;
    thread_started = 0;
    study_unlock();
    if (joinable) pthread_join(runner, NULL);
}
