/* study.h — a study (docs/api.md, Studies): several variants run on the same problem and the
 * same inputs, interleaved over rounds (ABC, CBA, ABC, …) as ordinary runs through the
 * device queues, and summarized one row per variant with its ratio to a baseline.
 *
 * One struct per study, built once from the request (study_parse), filled as its runs end
 * (study_execute, from each run's final record), and written whole to the JSON the API
 * answers (study_to_json) and to the store once per state change. Nothing reads that JSON
 * back. The server runs studies one at a time on a thread of its own (study_queue.c); `attnd
 * batch` runs a plan's studies on its own thread, through the same study_execute.
 */
#ifndef STUDY_H
#define STUDY_H

#include <cjson/cJSON.h>

#include "common/api_error.h"
#include "common/run_request.h"
#include "server/front/records.h" /* run_status */

#define STUDY_MAX_VARIANTS 16
#define STUDY_MAX_ROUNDS 100
#define STUDY_DEFAULT_ROUNDS 3
#define STUDY_MAX_RUNS 1000
#define STUDY_NAME_MAX 48 /* "backend:impl" */
#define STUDY_TOP_KERNELS 5

/* The variants of a study that names none: the six of the profiling study. */
#define STUDY_DEFAULT_VARIANTS "naive,naive_inplace,math,efficient,flash,cudnn"

typedef enum study_status { STUDY_QUEUED, STUDY_RUNNING, STUDY_DONE, STUDY_FAILED, STUDY_CANCELLED } study_status;

/* One run of a study, and what its final record said that the table needs (taken from the
 * record once, when the run ends). Numbers are < 0 (or NAN where negative values are
 * possible) when the record lacks them. */
typedef struct study_run {
    int variant;            /* index into study.variants */
    int round;              /* 1-based */
    long long id;           /* its run id; 0 until queued, and for a run refused before it was stored */
    run_status status;      /* RUN_QUEUED until it ends */
    int ended;
    double median_us, p10_us, p90_us, host_us, rse, target_noise;
    int stopped_on_limit;   /* the stopping rule ended on max_iters or max_time, not on its noise target */
    long long iters;
    int kernels, memops;    /* per forward; < 0: no kernel table (cpu, profile=false) */
    cJSON *top_kernels;     /* [{name, calls, gpu_us, share}] up to STUDY_TOP_KERNELS, or NULL (owned) */
    double tflops, fraction_of_peak, joules_per_forward;
    char energy_why[160];
    int verified;           /* the record had a verify object */
    int verify_pass;
    double rel_l2_err, max_abs_err;
    char verify_reference[24];
    char fingerprint[24];
    char impl_used[16];
    char device[16], gpu[128];
    char error_code[32], error_message[300];
} study_run;

typedef struct study {
    long long id;           /* the store's; 0 until stored */
    study_status status;
    char created[32], started[32], finished[32]; /* "" until then */
    int n_variants;
    char variants[STUDY_MAX_VARIANTS][STUDY_NAME_MAX];
    run_request requests[STUDY_MAX_VARIANTS]; /* each variant's run, parsed and checked */
    int baseline;           /* index into variants */
    int rounds;
    int n_runs;             /* n_variants · rounds */
    study_run *runs;        /* n_runs in the order they run (owned) */
    int next_run;           /* runs started so far */
    char error_code[32], error_message[300]; /* cancelled or failed: why; "" otherwise */
    int cancel_requested;   /* DELETE or a stop: start no more runs (study_queue.c sets it) */
    char cancel_code[32];   /* "cancelled" or "shutting_down" */
    int queue_position;     /* while queued: 1 is next (0 otherwise) */
    long long memory_budget_bytes; /* the setting: resident inputs' reservations (tensors.h) */
} study;

const char *study_status_name(study_status s);

/* ---- study_params.c ---- */

/* Read a study request: `query` (an object of strings) and `body` (an object, or NULL), a key
 * in both: the query wins. The study's own keys (variants, rounds, baseline), then every
 * variant's run parsed as POST /v1/runs parses one, with its backend (and impl), and verify
 * true unless given. s is filled (its runs laid out in their interleaved order; s->runs
 * malloc'd: study_free). 0, or -1 with e (400; nothing kept). allow_faults: as for runs. */
int study_parse(study *s, const cJSON *query, const cJSON *body, int allow_faults, api_error *e);

/* Fill s from variants parsed elsewhere (a plan's, server/front/batch/): the n names
 * ("backend" or "backend:impl") and their runs, the rounds, the baseline's index; the runs
 * laid out in their interleaved order. 0, or -1 with e (s->runs malloc'd: study_free). */
int study_init(study *s, const char *const *names, const run_request *requests, int n, int rounds, int baseline,
               api_error *e);

/* Free what s owns (not s). */
void study_free(study *s);

/* ---- study_table.c ---- */

/* Take what the table needs from run k's final record (borrowed; NULL for a run refused
 * before it was stored, with code and message saying why). */
void study_take_record(study *s, int k, const cJSON *record, const char *code, const char *message);

/* The study as the API answers it (caller deletes); NULL when out of memory. */
cJSON *study_to_json(const study *s);

/* The study's table as lines of text for a terminal (attnd batch's stderr), malloc'd. */
char *study_table_text(const study *s);

/* ---- study_exec.c ---- */

/* What study_execute tells its caller as the study goes (each may be NULL). */
typedef struct study_hooks {
    /* record NULL: refused. It may ask the study to stop: s->cancel_requested under study_lock. */
    void (*run_ended)(study *s, int k, const cJSON *record, void *arg);
    void (*changed)(const study *s, void *arg);                             /* a state worth storing */
    void *arg;
} study_hooks;

/* Store s as queued (its id set). 0, or -1. */
int study_store_new(study *s);

/* Write s's current state to the store (logged on failure). */
void study_store(const study *s);

/* Run s's runs one after another in their order, each through its device's queue, until the
 * last or a cancel (s->cancel_requested, read under study_lock()). s->status goes
 * running → done | cancelled, and is stored at each change; hooks are told after each run. */
void study_execute(study *s, const study_hooks *hooks);

/* The lock over every live study's fields that another thread reads (the runner's and the
 * pool's end hook): held briefly, never while calling the pool. */
void study_lock(void);
void study_unlock(void);

/* Under study_lock: the id of s's run waiting for its end while s executes (0: none); wait
 * until a study changes state or ms pass; and, without the lock, wake every such waiter. */
long long study_current_run_locked(const study *s);
void study_wait_locked(int ms);
void study_wake(void);

/* ---- study_queue.c: the server's studies, one at a time on a thread of its own ---- */

#define STUDY_QUEUE_MAX 64 /* studies waiting; more: 429 */

/* Start the thread. 0, or -1. */
int studies_start(void);

/* Take s (malloc'd, parsed): store it queued and queue it. 202 with *response
 * {"id", "status", "runs_total", "queue_position"}, or a refusal (429 full, 503 stopping,
 * 507/503/500 the store) with *response the error body and s freed. Caller deletes *response. */
int studies_submit(study *s, cJSON **response);

/* The JSON of study id while it is queued or running here (queue_position while queued);
 * NULL when it is not (caller deletes). */
cJSON *studies_live_json(long long id);

/* Cancel study id while it is queued or running here: 0 with *record its JSON (cancelled
 * when it was queued; a running one stops after its run in progress, its queued run
 * cancelled), 1 when it is not live here. */
int studies_cancel(long long id, cJSON **record);

/* Wait until study id is no longer live here, or seconds passed, or the server stops. */
void studies_wait(long long id, int seconds);

/* Stop: no new studies (503 shutting_down); the queued ones and the running one end
 * cancelled (error shutting_down) once its run in progress ends. Wakes every waiter. */
void studies_quiesce(void);

/* studies_quiesce, and wait for the thread to end. */
void studies_stop(void);

#endif
