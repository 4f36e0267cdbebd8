/* study_exec.c — running a study (study.h's study_execute): its runs one after another in
 * their interleaved order, each an ordinary async run through its device's queue, and the
 * study's record stored at each change.
 *
 * A run is submitted as an async run so that its id is known while it waits in its queue (a
 * cancel of the study cancels it there); the pool's stored hook (study_run_stored) hands its
 * final record to this thread, which waits for it: once the run's end is readable, so a study
 * is never final before its runs are. One study executes at a time in a process (the
 * server's runner thread, or attnd batch's), so the hook finds it without a search.
 */
#include "server/front/studies/study.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/front/pool/pool.h"
#include "server/front/store/store.h"
#include "server/front/tensors/tensors.h"

/* A run refused for a passing reason (its queue full, its worker restarting) is tried again
 * this often, for at most this long, before it counts as refused. */
#define STUDY_RETRY_MS 500
#define STUDY_RETRY_LIMIT_MS 60000

static pthread_mutex_t study_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t study_cv; /* on the monotonic clock (study_cv_init) */
static pthread_once_t study_cv_once = PTHREAD_ONCE_INIT;
/* Under study_mu: the study executing, and the end of its run in progress. */
static study *exec_current;
static int exec_ended;
static cJSON *exec_record; /* the ended run's final record (a copy), NULL when refused */

static void study_cv_init(void) { clock_cond_init(&study_cv); }

void study_lock(void)
{
    pthread_once(&study_cv_once, study_cv_init);
    pthread_mutex_lock(&study_mu);
}
void study_unlock(void) { pthread_mutex_unlock(&study_mu); }

/* The pool's end hook of a study's run (pool_run_end_fn): its resident inputs released as for
 * any run, and its final record handed to the executing study. Quick and without pool calls:
 * the pool may hold its lock. */
/* The stored hook of a study's run (pool_run): its end is readable now, so the study may go
 * on (its own end hook is tensors_finish_run, as for any run). */
static void study_run_stored(const run_request *r, pool_run_outcome outcome, const cJSON *record, int generation)
{
    (void)outcome;
    (void)generation;
    study_lock();
    if (exec_current && exec_current->id == r->study_id) {
        cJSON_Delete(exec_record);
        exec_record = record ? cJSON_Duplicate(record, 1) : NULL;
        exec_ended = 1;
        pthread_cond_broadcast(&study_cv);
    }
    study_unlock();
}

int study_store_new(study *s)
{
    cJSON *json;
    char *text;

    clock_text_now_iso(s->created, sizeof s->created);
    s->status = STUDY_QUEUED;
    s->id = 0; /* the record starts {"id":0,… and the store fills its id in */
    json = study_to_json(s);
    text = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    s->id = text ? store_insert_study(s->created, "queued", text) : -1;
    cJSON_free(text);
    if (s->id <= 0) {
        s->id = 0;
        return -1;
    }
    return 0;
}

void study_store(const study *s)
{
    cJSON *json;
    char *text;
    char status[16];

    study_lock();
    json = study_to_json(s);
    snprintf(status, sizeof status, "%s", study_status_name(s->status));
    study_unlock();
    text = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    if (!text || store_update_study(s->id, status, text) != 0)
        log_error("study %lld: its %s record could not be stored", s->id, status);
    cJSON_free(text);
}

static void study_tell(study *s, const study_hooks *hooks)
{
    study_store(s);
    if (hooks && hooks->changed) hooks->changed(s, hooks->arg);
}

/* The error code of a refusal body {"error": {"code", "message"}} into code and message. */
static void study_error_of(const cJSON *body, char *code, size_t code_len, char *message, size_t message_len)
{
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(body, "error");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(error, "code");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(error, "message");

    snprintf(code, code_len, "%s", cJSON_IsString(c) ? c->valuestring : "refused");
    snprintf(message, message_len, "%s", cJSON_IsString(m) ? m->valuestring : "");
}

static int study_cancelled(study *s)
{
    int cancel;
    study_lock();
    cancel = s->cancel_requested;
    study_unlock();
    return cancel;
}

/* Submit run k and wait for its end. Returns 1 when the study must stop (the server is
 * stopping), else 0; run k's state is taken either way. */
static int study_run_one(study *s, int k, const study_hooks *hooks)
{
    study_run *run = &s->runs[k];
    char code[32] = "", message[300] = "";
    cJSON *response = NULL, *record;
    int status = 0, waited_ms = 0, stop = 0;
    run_request r;
    api_error e;

    for (;;) {
        r = s->requests[run->variant];
        r.study_id = s->id;
        r.study_round = run->round;
        snprintf(r.study_variant, sizeof r.study_variant, "%s", s->variants[run->variant]);
        r.async_run = 1; /* its id comes at once: a cancel of the study finds it in its queue */
        if (tensors_prepare_run(&r, s->memory_budget_bytes, &e) != 0) {
            snprintf(code, sizeof code, "%.31s", e.code);
            snprintf(message, sizeof message, "%.299s", e.message);
            status = e.status;
            break;
        }
        study_lock();
        exec_ended = 0;
        study_unlock();
        status = pool_run(&r, tensors_finish_run, study_run_stored, &response);
        if (status == 202) break;
        study_error_of(response, code, sizeof code, message, sizeof message);
        cJSON_Delete(response);
        response = NULL;
        /* A full queue or a worker between lives passes; anything else is this run's answer. */
        if (!(status == 429 || (status == 503 && !strcmp(code, "no_device"))) || waited_ms >= STUDY_RETRY_LIMIT_MS ||
            study_cancelled(s))
            break;
        usleep(STUDY_RETRY_MS * 1000);
        waited_ms += STUDY_RETRY_MS;
    }
    if (status != 202) {
        study_lock();
        if (!strcmp(code, "shutting_down")) {
            stop = 1;
            s->cancel_requested = 1;
            snprintf(s->cancel_code, sizeof s->cancel_code, "shutting_down");
        } else {
            study_take_record(s, k, NULL, code, message);
        }
        study_unlock();
        if (!stop && hooks && hooks->run_ended) hooks->run_ended(s, k, NULL, hooks->arg);
        return stop;
    }

    study_lock();
    run->id = (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(response, "id"));
    study_unlock();
    cJSON_Delete(response);
    study_tell(s, hooks); /* its run id is in the record while it waits */

    study_lock();
    while (!exec_ended) pthread_cond_wait(&study_cv, &study_mu);
    record = exec_record;
    exec_record = NULL;
    study_take_record(s, k, record, NULL, NULL);
    if (!strcmp(run->error_code, "shutting_down")) { /* cancelled in its queue by the stop */
        stop = 1;
        s->cancel_requested = 1;
        snprintf(s->cancel_code, sizeof s->cancel_code, "shutting_down");
    }
    study_unlock();
    if (hooks && hooks->run_ended) hooks->run_ended(s, k, record, hooks->arg);
    cJSON_Delete(record);
    return stop;
}

void study_execute(study *s, const study_hooks *hooks)
{
    int k;

    study_lock();
    if (exec_current) log_error("study %lld starts while study %lld executes", s->id, exec_current->id);
    exec_current = s;
    s->status = STUDY_RUNNING;
    s->queue_position = 0;
    clock_text_now_iso(s->started, sizeof s->started);
    study_unlock();
    study_tell(s, hooks);

    for (k = 0; k < s->n_runs && !study_cancelled(s); k++) {
        study_lock();
        s->next_run = k + 1;
        study_unlock();
        if (study_run_one(s, k, hooks)) break;
        study_tell(s, hooks);
    }

    study_lock();
    if (s->cancel_requested) {
        s->status = STUDY_CANCELLED;
        snprintf(s->error_code, sizeof s->error_code, "%s", s->cancel_code[0] ? s->cancel_code : "cancelled");
        snprintf(s->error_message, sizeof s->error_message, "%s after %d of %d runs",
                 !strcmp(s->error_code, "shutting_down") ? "the server stopped" : "cancelled (DELETE /v1/studies/ID)",
                 k, s->n_runs);
    } else {
        s->status = STUDY_DONE;
    }
    clock_text_now_iso(s->finished, sizeof s->finished);
    exec_current = NULL;
    cJSON_Delete(exec_record);
    exec_record = NULL;
    study_unlock();
    study_tell(s, hooks);
    log_info("study %lld %s: %d runs", s->id, study_status_name(s->status), s->n_runs);
}

long long study_current_run_locked(const study *s)
{
    const study_run *run;

    if (exec_current != s || s->next_run == 0) return 0;
    run = &s->runs[s->next_run - 1];
    return run->ended ? 0 : run->id;
}

void study_wait_locked(int ms)
{
    struct timespec until = clock_deadline(ms);
    pthread_cond_timedwait(&study_cv, &study_mu, &until);
}

void study_wake(void)
{
    study_lock();
    pthread_cond_broadcast(&study_cv);
    study_unlock();
}
