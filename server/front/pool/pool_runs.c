/* pool_runs.c — runs through the pool (pool.h): the refusals before a run queues, its
 * record stored "queued", the synchronous caller's wait (and its client leaving), cancel,
 * and what the queues tell about the runs in them.
 */
#include "server/front/pool/pool.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/front/pool/queue.h"
#include "server/front/store/store.h"

#define POOL_CLIENT_POLL_MS 200 /* how often a waiting synchronous run asks whether its client left */

/* A run refused before it became a job: its end and stored hooks, on the caller's thread (no
 * lock): nothing of it was stored. */
static void pool_end_unqueued(const run_request *r, pool_run_end_fn on_end, pool_run_end_fn on_stored)
{
    if (on_end) on_end(r, POOL_RUN_REFUSED, NULL, -1);
    if (on_stored) on_stored(r, POOL_RUN_REFUSED, NULL, -1);
}

/* The synchronous caller's wait for j's end (queue_mu held, and held again on return).
 * With gone, its client is asked every POOL_CLIENT_POLL_MS whether it left: while j waits
 * in the queue, j is cancelled (stored "cancelled", client_gone) and its slot freed at once;
 * while it runs, it goes on detached and its record will say client_gone. Returns 1 when
 * the end was handed over (j->http_status, j->response; the caller frees j), 0 when j was
 * detached (its end frees it; *response is set here). */
static int pool_wait_sync_locked(worker_slot *w, pool_job *j, pool_client_gone_fn gone, const void *client,
                                 cJSON **response, int *status)
{
    char message[200];

    while (!j->finished) {
        struct timespec until;
        int left;

        if (!gone) {
            pthread_cond_wait(&j->cond, &queue_mu);
            continue;
        }
        until = clock_deadline(POOL_CLIENT_POLL_MS);
        pthread_cond_timedwait(&j->cond, &queue_mu, &until);
        if (j->finished || j->ending) continue;
        pthread_mutex_unlock(&queue_mu); /* the poll is a syscall: not under the lock */
        left = gone(client);
        pthread_mutex_lock(&queue_mu);
        if (!left || j->finished || j->ending) continue;

        __atomic_store_n(&j->client_gone, 1, __ATOMIC_RELEASE);
        if (queue_position_locked(w, j) > 0) { /* still waiting: it never runs */
            snprintf(message, sizeof message, "run %lld was cancelled while queued: its client closed the connection",
                     j->id);
            log_info("run %lld cancelled while queued on %s: its client left", j->id, w->name);
            queue_cancel_run_locked(w, j, "client_gone", message);
            continue;
        }
        /* Running: let it finish and be stored; nobody waits for it any more. */
        j->detached = 1;
        log_info("run %lld: its client left while it ran on %s; it finishes unattended", j->id, w->name);
        snprintf(message, sizeof message, "run %lld goes on without its client (GET /v1/runs/%lld)", j->id, j->id);
        *status = 409;
        *response = queue_error_body("client_gone", message, NULL);
        return 0;
    }
    *status = j->http_status;
    *response = j->response;
    return 1;
}

/* The largest s ≥ 0 with s·s ≤ x. */
static long long pool_isqrt(long long x)
{
    long long s = (long long)sqrtl((long double)x);
    while (s > 0 && s > x / s) s--;
    while ((s + 1) <= x / (s + 1)) s++;
    return s;
}

/* The longest of side sl's batch lengths. */
static long long pool_longest(const run_seqlens *sl, int64_t batch)
{
    long long most = 0;
    int64_t b;
    for (b = 0; b < batch; b++)
        if (sl->len[b] > most) most = sl->len[b];
    return most;
}

/* What a ragged batch (per: its MACs a forward, over cap) shrinks to fit: the lengths it was
 * given, each side named, k times shorter (k whole, so the suggestion is one a client can
 * compute), with the longest each would then have. Both sides given: each k times shorter
 * divides the cost by k·k; one side: by k. Appends to message at n; the new n. */
static size_t pool_ragged_fit(const run_request *r, long long per, long long cap, char *message, size_t len, size_t n)
{
    const attn_problem *p = &r->problem;
    const int q = (p->ragged & ATTN_RAGGED_Q) != 0, kv = (p->ragged & ATTN_RAGGED_KV) != 0;
    const long double over = (long double)per / (long double)(cap > 0 ? cap : 1);
    const long long k = (long long)ceill(q && kv ? sqrtl(over) : over);
    const long long most_q = pool_longest(&r->seqlens_q, p->batch), most_kv = pool_longest(&r->seqlens_kv, p->batch);

    if (n >= len) return n;
    if ((q && most_q / k < 1) || (kv && most_kv / k < 1))
        return n + (size_t)snprintf(message + n, len - n,
                                    "; even the longest sequence of 1 token is over it: fewer sequences or heads");
    if (q && kv)
        return n + (size_t)snprintf(message + n, len - n,
                                    "; as asked, it fits with seqlens_q and seqlens_kv each %lld times shorter (the "
                                    "longest %lld and %lld tokens, now %lld and %lld), or with fewer sequences",
                                    k, most_q / k, most_kv / k, most_q, most_kv);
    return n + (size_t)snprintf(message + n, len - n,
                                "; as asked, it fits with %s %lld times shorter (the longest %lld tokens, now %lld), "
                                "or with fewer sequences",
                                q ? "seqlens_q" : "seqlens_kv", k, (q ? most_q : most_kv) / k, q ? most_q : most_kv);
}

/* Whether r, on the cpu device, costs more than limit multiply-accumulates in all: every
 * forward it may make (run_request_cpu_forwards), not one. 1 with message, which says what
 * would run: the most timed forwards of this shape that fit, and the shorter sequences with
 * which the run as asked fits (seq, or a ragged batch's lengths); 0 when it is within the
 * limit. */
static int pool_cpu_too_costly(const run_request *r, long long limit, char *message, size_t len)
{
    const attn_problem *p = &r->problem;
    long long per = run_request_macs(r), forwards = run_request_cpu_forwards(r), total, fit, timed, cap, bhd;
    int64_t d = p->head_dim > attn_dv(p) ? p->head_dim : attn_dv(p);
    size_t n;

    if (__builtin_mul_overflow(per, forwards, &total)) total = LLONG_MAX;
    if (limit <= 0 || total <= limit) return 0;
    n = (size_t)snprintf(message, len,
                         "this run costs about %lld multiply-accumulates on the cpu: %lld forwards (warmup %d, %s %d, "
                         "1 for the output) of %lld each (%s), over the cpu device's limit cpu_max_macs=%lld",
                         total, forwards, r->warmup, r->iters > 0 ? "iters" : "up to max_iters",
                         r->iters > 0 ? r->iters : r->max_iters, per,
                         p->ragged ? "heads*head_dim times the sum over the sequences of seq_q*seq_kv, their real tokens"
                                   : "batch*heads*seq_q*seq_kv*head_dim",
                         limit);
    /* Fewer forwards of this shape: the timed ones that fit beside the warmup and the output. */
    fit = limit / (per > 0 ? per : 1);
    timed = fit - r->warmup - 1;
    if (timed >= 1 && n < len)
        n += (size_t)snprintf(message + n, len - n, "; it fits with iters=%lld%s", timed,
                              r->iters == 0 && r->min_iters <= timed ? " (or max_iters of at most that)" : "");
    else if (fit - 1 >= 1 && n < len)
        n += (size_t)snprintf(message + n, len - n, "; it fits with warmup=0 and iters=%lld", fit - 1);
    /* As many forwards of shorter sequences: a ragged batch's lengths, else seq_q and seq_kv
     * scaled alike. */
    cap = limit / forwards;
    if (p->ragged) {
        n = pool_ragged_fit(r, per, cap, message, len, n);
    } else if (!__builtin_mul_overflow((long long)p->batch, (long long)p->heads, &bhd) && !__builtin_mul_overflow(bhd, d, &bhd) &&
        n < len) {
        long long sq = 0, skv = 0;
        if (p->seq_q == p->seq_kv) {
            sq = skv = pool_isqrt(cap / bhd);
        } else {
            long double f = sqrtl((long double)cap / ((long double)bhd * p->seq_q * p->seq_kv));
            sq = (long long)(p->seq_q * f), skv = (long long)(p->seq_kv * f);
            while (sq > 0 && skv > 0 && (long double)bhd * sq * skv > (long double)cap) sq--, skv--;
        }
        if (sq >= 1 && skv >= 1 && sq == skv)
            n += (size_t)snprintf(message + n, len - n, "; as asked, it fits with seq=%lld", sq);
        else if (sq >= 1 && skv >= 1)
            n += (size_t)snprintf(message + n, len - n, "; as asked, it fits with seq_q=%lld and seq_kv=%lld", sq, skv);
        else
            n += (size_t)snprintf(message + n, len - n, "; even seq=1 is over it: fewer heads or a smaller batch");
    }
    if (n < len) snprintf(message + n, len - n, "; or run it on a GPU");
    return 1;
}

/* Why r cannot queue (the slot is w, NULL when unknown): a status with *response set, or
 * 0 when it may. Under queue_mu. */
static int pool_refusal_locked(const run_request *r, worker_slot *w, cJSON **response)
{
    char message[700];

    /* A forward on the cpu costs seconds per 10^10 MACs: a run past the limit would hold the
     * only cpu worker (verifies included) for minutes. Refused before it queues. */
    if (!strcmp(r->device, "cpu") && pool_cpu_too_costly(r, queue_settings.cpu_max_macs, message, sizeof message)) {
        *response = queue_error_body("too_costly", message, NULL);
        return 422;
    }
    if (!queue_started || queue_stopping || queue_draining) {
        *response = queue_error_body("shutting_down", "the server is stopping; it takes no new runs", NULL);
        return 503;
    }
    if (!w || w->state == SLOT_DOWN) {
        if (!w)
            snprintf(message, sizeof message, "device %s is not served here (see GET /v1/device)",
                     r->device[0] ? r->device : "(none)");
        else
            snprintf(message, sizeof message, "device %s is down: %s", w->name, w->reason);
        *response = queue_error_body("no_device", message, "device");
        return 503;
    }
    if (w->queued >= queue_settings.queue_depth) {
        snprintf(message, sizeof message, "the queue of device %s is full (queue_depth=%d jobs waiting); retry later",
                 w->name, queue_settings.queue_depth);
        *response = queue_error_body("queue_full", message, NULL);
        return 429;
    }
    return 0;
}

int pool_run_admissible(const run_request *r, cJSON **response)
{
    char message[700];
    worker_slot *w;
    int status = 0;

    *response = NULL;
    pthread_mutex_lock(&queue_mu);
    w = queue_find_slot_locked(r->device);
    if (!strcmp(r->device, "cpu") && pool_cpu_too_costly(r, queue_settings.cpu_max_macs, message, sizeof message)) {
        *response = queue_error_body("too_costly", message, NULL);
        status = 422;
    } else if (!w || w->state == SLOT_DOWN) {
        if (!w)
            snprintf(message, sizeof message, "device %s is not served here (see GET /v1/device)",
                     r->device[0] ? r->device : "(none)");
        else
            snprintf(message, sizeof message, "device %s is down: %s", w->name, w->reason);
        *response = queue_error_body("no_device", message, "device");
        status = 503;
    }
    pthread_mutex_unlock(&queue_mu);
    return status;
}

/* Queue r (pool_run). detach: answer 202 once it is queued. on_end, on_stored: its hooks or
 * NULL. gone/client: the synchronous caller's client (pool_run_watched), NULL when none. */
static int pool_submit(const run_request *r, cJSON **response, int detach, pool_run_end_fn on_end,
                       pool_run_end_fn on_stored, pool_client_gone_fn gone, const void *client)
{
    worker_slot *w;
    pool_job *j;
    cJSON *device;
    char message[700], code[32];
    int status;

    *response = NULL;
    /* A store that cannot take writes (a full disk) could not keep this run's result: refused
     * before anything is stored or queued. */
    status = store_refusal(code, sizeof code, message, sizeof message);
    if (status) {
        pool_end_unqueued(r, on_end, on_stored);
        *response = queue_error_body(code, message, NULL);
        return status;
    }
    pthread_mutex_lock(&queue_mu);
    w = queue_find_slot_locked(r->device);
    status = pool_refusal_locked(r, w, response);
    if (status) {
        pthread_mutex_unlock(&queue_mu);
        pool_end_unqueued(r, on_end, on_stored);
        return status;
    }
    w->queued++; /* reserved now, so concurrent requests cannot overfill the queue */
    device = w->device ? cJSON_Duplicate(w->device, 1) : NULL;
    pthread_mutex_unlock(&queue_mu);

    j = queue_new_run_job(r, device);
    if (!j || run_record_save(&j->rec) != 0) {
        if (j)
            queue_free_job(j);
        else
            cJSON_Delete(device);
        pthread_mutex_lock(&queue_mu);
        w->queued--;
        pthread_mutex_unlock(&queue_mu);
        pool_end_unqueued(r, on_end, on_stored);
        if (!j) {
            *response = queue_error_body("out_of_memory", "out of memory", NULL);
            return 500;
        }
        /* The insert failed: the store now says why (a full disk: 507 store_full). */
        status = store_refusal(code, sizeof code, message, sizeof message);
        *response = status ? queue_error_body(code, message, NULL)
                           : queue_error_body("store_error", "the run could not be stored", NULL);
        return status ? status : 500;
    }
    j->id = j->rec.id;
    j->on_end = on_end; /* from here every end of j calls them (queue_end_hook, queue_stored_hook) */
    j->on_stored = on_stored;

    pthread_mutex_lock(&queue_mu);
    if (queue_stopping || queue_draining) { /* the server began to stop while we stored */
        w->queued--;
        queue_refuse_locked(j, 503, "shutting_down", POOL_SHUTDOWN_MESSAGE, NULL); /* not detached yet: row deleted */
    } else if (w->state == SLOT_DOWN) { /* it went down while we stored */
        w->queued--;
        snprintf(message, sizeof message, "device %s is down: %s", w->name, w->reason);
        queue_refuse_locked(j, 503, "no_device", message, "device");
    } else { /* the reservation becomes the job */
        queue_push_locked(w, j);
        if (detach) { /* from here the dispatcher (or a cancel) owns j: never touch it after unlock */
            long long id = j->id;
            int position = queue_position_locked(w, j);
            j->detached = 1;
            pthread_mutex_unlock(&queue_mu);
            *response = cJSON_CreateObject();
            cJSON_AddNumberToObject(*response, "id", (double)id);
            cJSON_AddStringToObject(*response, "status", "queued");
            cJSON_AddNumberToObject(*response, "queue_position", position);
            return 202;
        }
    }
    if (!pool_wait_sync_locked(w, j, gone, client, response, &status)) {
        pthread_mutex_unlock(&queue_mu); /* detached: the dispatcher frees j */
        return status;
    }
    pthread_mutex_unlock(&queue_mu);
    queue_free_job(j);
    return status;
}

int pool_run_sync(const run_request *r, cJSON **response)
{
    return pool_submit(r, response, 0, NULL, NULL, NULL, NULL);
}

int pool_run_async(const run_request *r, cJSON **response)
{
    return pool_submit(r, response, 1, NULL, NULL, NULL, NULL);
}

int pool_run(const run_request *r, pool_run_end_fn on_end, pool_run_end_fn on_stored, cJSON **response)
{
    return pool_submit(r, response, r->async_run ? 1 : 0, on_end, on_stored, NULL, NULL);
}

int pool_run_watched(const run_request *r, pool_run_end_fn on_end, pool_client_gone_fn gone, const void *client,
                     cJSON **response)
{
    return pool_submit(r, response, r->async_run ? 1 : 0, on_end, NULL, r->async_run ? NULL : gone, client);
}

int pool_cancel(long long id)
{
    worker_slot *w = NULL;
    pool_job *j;
    char message[160];

    pthread_mutex_lock(&queue_mu);
    j = queue_find_run_locked(id, &w);
    if (!j) {
        pthread_mutex_unlock(&queue_mu);
        return -1;
    }
    snprintf(message, sizeof message, "run %lld was cancelled (DELETE /v1/runs/%lld) while it was queued", id, id);
    log_info("run %lld cancelled while queued on %s", id, w->name);
    queue_cancel_run_locked(w, j, "cancelled", message);
    pthread_mutex_unlock(&queue_mu);
    return 0;
}

/* ------------------------------------------------------------------------- queues -- */

cJSON *pool_queued_record_json(long long id)
{
    worker_slot *w = NULL;
    pool_job *j;
    cJSON *record = NULL;

    pthread_mutex_lock(&queue_mu);
    j = queue_find_run_locked(id, &w);
    if (j && (record = run_record_to_json(&j->rec)) != NULL)
        cJSON_AddNumberToObject(record, "queue_position", queue_position_locked(w, j));
    pthread_mutex_unlock(&queue_mu);
    return record;
}

int pool_queue_depth(const char *device)
{
    worker_slot *w;
    int n = 0;

    pthread_mutex_lock(&queue_mu);
    w = queue_find_slot_locked(device);
    if (w) n = w->queued;
    pthread_mutex_unlock(&queue_mu);
    return n;
}

int pool_runs_running(void)
{
    int i, n = 0;

    pthread_mutex_lock(&queue_mu);
    for (i = 0; i < queue_nslots; i++) n += queue_slots[i].current_run > 0;
    pthread_mutex_unlock(&queue_mu);
    return n;
}

/* 1 when run request q reads resident tensor id: as q, k or v, its block table or its lengths. */
static int pool_reads_tensor(const run_request *q, const char *id)
{
    return !strcmp(q->q_tensor, id) || !strcmp(q->k_tensor, id) || !strcmp(q->v_tensor, id) ||
           !strcmp(q->block_table_tensor, id) ||
           (q->seqlens_q.kind == RUN_SEQLENS_TENSOR && !strcmp(q->seqlens_q.tensor, id)) ||
           (q->seqlens_kv.kind == RUN_SEQLENS_TENSOR && !strcmp(q->seqlens_kv.tensor, id));
}

int pool_runs_reading_tensor(const char *tensor_id, long long *ids, int max)
{
    int i, n = 0;

    if (!tensor_id || !tensor_id[0]) return 0;
    pthread_mutex_lock(&queue_mu);
    for (i = 0; i < queue_nslots; i++) {
        const worker_slot *w = &queue_slots[i];
        const pool_job *q;
        if (w->current_run > 0 && pool_reads_tensor(&w->current_req, tensor_id)) {
            if (n < max) ids[n] = w->current_run;
            n++;
        }
        for (q = w->head; q; q = q->next)
            if (q->kind == JOB_RUN && pool_reads_tensor(&q->rec.request, tensor_id)) {
                if (n < max) ids[n] = q->id;
                n++;
            }
    }
    pthread_mutex_unlock(&queue_mu);
    return n;
}
