/* queue.h — the pool's shared state (pool.h is its API): one worker_slot per device, each
 * with its bounded FIFO of jobs; the one lock that guards every slot, queue and job
 * hand-over; and how a job ends once it was queued (done, failed, cancelled, refused).
 * Internal to the pool's files (pool.c, pool_runs.c, pool_tensors.c, pool_dispatch.c,
 * pool_finish.c).
 *
 * Every accepted job ends exactly once, through queue_finish_locked; a run's end goes through
 * queue_end_run first (the end hook, then the final record stored and counted).
 */
#ifndef QUEUE_H
#define QUEUE_H

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "common/settings.h"
#include "server/front/pool/pool_hooks.h"
#include "server/front/records.h"

typedef enum slot_state { SLOT_STARTING, SLOT_UP, SLOT_DOWN } slot_state;
typedef enum job_kind { JOB_RUN, JOB_VERIFY, JOB_TENSOR } job_kind;

typedef struct pool_job {
    job_kind kind;
    long long id;          /* the exchange's "job": a run's id, the checked run's id, or < 0 (tensors) */
    run_record rec;        /* JOB_RUN: its record; the dispatcher's while it runs */
    const run_record *checked; /* JOB_VERIFY: the run whose output it checks (the GPU dispatcher's) */
    int fd;                /* JOB_VERIFY: the output bytes; JOB_TENSOR: the message's descriptor, or -1 */
    size_t bytes;
    cJSON *verify;         /* JOB_VERIFY answer: the verify object, or {"error":"…"} */
    cJSON *msg;            /* JOB_TENSOR: the message to send (the caller's) */
    int reply_fd;          /* JOB_TENSOR: the descriptor of the answer, or -1 (the waiter's) */
    int generation;        /* JOB_TENSOR, JOB_RUN: the worker generation (slot restarts) it ran on; -1 before */
    double queued_s;       /* clock_monotonic_s when it joined its queue (the record's service.queued_ms) */
    pool_run_end_fn on_end; /* JOB_RUN: the end hook, NULL once called or when none */
    pool_run_end_fn on_stored; /* JOB_RUN: the hook once the end is stored, NULL once called or when none */
    /* The end, handed to the waiter under queue_mu. */
    int finished;
    int http_status;
    cJSON *response;
    int detached; /* async (set once queued), or a synchronous run whose client left while it ran:
                     no waiter; the end frees the job */
    int ending;   /* unlinked from its queue by a cancel that ends it outside queue_mu: its waiter
                     must wait for that end, not detach */
    int client_gone; /* the synchronous client left before the answer. Atomic (__atomic_*): the
                        dispatcher reads it while storing, without queue_mu */
    pthread_cond_t cond;
    struct pool_job *next;
} pool_job;

typedef struct worker_slot {
    char name[16]; /* "cpu" or "cuda:N" */
    pid_t pid;     /* 0 when no child */
    int sock;      /* the front's end; -1 when no child */
    slot_state state;
    char reason[512]; /* why it is down, or the last failure */
    cJSON *device;    /* the last hello's device object; NULL before the first */
    cJSON *variants;  /* the last hello's variant reports; NULL before */
    pool_job *head, *tail;
    int queued;   /* JOB_RUN jobs waiting or reserved (queue_depth applies to these) */
    int restarts; /* the worker generation */
    int running;  /* the dispatcher is between taking a job and its end, or handing a finished run
                     to pool_finish.c, which pool_stop drains after the dispatchers */
    long long current_run;   /* the JOB_RUN being run (its id), 0 when none */
    run_request current_req; /* its request (a copy: a detached job is freed at its end) */
    pthread_t thread;
    int thread_started;
    pthread_cond_t work_cond;  /* a job arrived, or stopping */
    pthread_cond_t state_cond; /* state changed, or stopping */
} worker_slot;

/* Slots are allocated once per pool_start and never freed, so a thread still waiting on a
 * slot's condition variable during shutdown never touches freed memory. The cpu is slot 0. */
extern pthread_mutex_t queue_mu;
extern settings queue_settings;
extern worker_slot *queue_slots;
extern int queue_nslots;
extern int queue_started, queue_stopping;
extern int queue_draining; /* pool_quiesce: no new runs; the running ones go on */

#define POOL_SHUTDOWN_MESSAGE "the server is stopping; the run was not started"

/* Every condition variable of the pool waits on the monotonic clock: clock_cond_init and
 * clock_deadline (common/clock.h). */

/* ---- slots and their queues (under queue_mu unless said) ---- */

int queue_is_stopping(void); /* takes queue_mu */
worker_slot *queue_find_slot_locked(const char *device);
void queue_push_locked(worker_slot *w, pool_job *j);       /* at the end; signals the dispatcher */
void queue_push_front_locked(worker_slot *w, pool_job *j); /* ahead of the waiting runs (verify) */
pool_job *queue_pop_locked(worker_slot *w);                /* the next job, NULL when none */
void queue_unlink_locked(worker_slot *w, pool_job *j);     /* j must be in w's queue */
int queue_position_locked(const worker_slot *w, const pool_job *j); /* 1-based among runs; -1 */
pool_job *queue_find_run_locked(long long id, worker_slot **slot); /* a waiting run; NULL */

/* ---- how jobs end ---- */

/* A new JOB_RUN with its queued record (device: taken), no end hook yet; NULL when out of
 * memory. */
pool_job *queue_new_run_job(const run_request *r, cJSON *device);
void queue_free_job(pool_job *j); /* a JOB_RUN from queue_new_run_job, and its record */

/* The run's end hook, once (pool_hooks.h): record is the final record, NULL when refused. */
void queue_end_hook(pool_job *j, pool_run_outcome outcome, const cJSON *record);
/* The run's stored hook, once: after its final record is stored (or its row deleted, refused). */
void queue_stored_hook(pool_job *j, pool_run_outcome outcome, const cJSON *record);

/* The run's final state (outcome DONE, FAILED or CANCELLED; an error set before for the last
 * two): finished now, the end hook, stored, counted in the metrics. Returns the final record
 * (caller deletes: the waiter's answer). Under queue_mu or not (see pool_run_end_fn). */
cJSON *queue_end_run(pool_job *j, pool_run_outcome outcome);

/* queue_end_run with the error {code, message} set first. */
cJSON *queue_end_run_with_error(pool_job *j, pool_run_outcome outcome, const char *code, const char *message);

/* An {"error":{"code","message","field"}} body (field null when NULL or ""). */
cJSON *queue_error_body(const char *code, const char *message, const char *field);

/* Hand the end to the waiter; a detached job has none and is freed here (with response),
 * so the caller must not touch j afterwards. Under queue_mu. */
void queue_finish_locked(pool_job *j, int http_status, cJSON *response);

/* Refuse a job that never ran: a synchronous run's row is deleted and it is answered
 * http_status + {"error":…}; an async one is kept, failed with the reason; a verify job
 * answers {"error":message}. Under queue_mu. */
void queue_refuse_locked(pool_job *j, int http_status, const char *code, const char *message, const char *field);

/* Refuse every job in w's queue: the device went down. Under queue_mu. */
void queue_refuse_all_locked(worker_slot *w, const char *code, const char *message);

/* End the jobs of w's queue that a shutdown ends (every run; with all, every job): a
 * synchronous run is answered 503 shutting_down and not stored, an async one is stored
 * "cancelled"; verify and tensor jobs are refused (all) or kept. Under queue_mu. */
void queue_shutdown_locked(worker_slot *w, int all);

/* End a run that waits in w's queue as cancelled with code and message: unlinked, stored
 * "cancelled", its waiter (if any) answered 409 {"error":{code,…}}; a detached one is freed.
 * Called and returns with queue_mu held, dropped meanwhile (for the end hook and the store). */
void queue_cancel_run_locked(worker_slot *w, pool_job *j, const char *code, const char *message);

#endif
