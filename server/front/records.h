/* records.h — one run's record: built once, when the run is queued, from its request and
 * the device it will run on; given the device again when it runs and the worker's result
 * (or an error) when it ends. Serialized once per state change into the JSON that
 * GET /v1/runs/{id} answers, and written to the store once per state change. Nothing here
 * reads that JSON back: counters and hooks take the numbers from the struct.
 *
 * Not thread-safe: a record belongs to one thread at a time (the pool hands it over).
 */
#ifndef RECORDS_H
#define RECORDS_H

#include <cjson/cJSON.h>

#include "common/run_request.h"

typedef enum run_status { RUN_QUEUED, RUN_RUNNING, RUN_DONE, RUN_FAILED, RUN_CANCELLED } run_status;

typedef struct run_record {
    long long id;           /* the store's id; 0 until run_record_store first writes it */
    run_status status;
    char created[32];       /* UTC ISO-8601 with milliseconds */
    char finished[32];      /* "" until the run ends (null in the JSON) */
    run_request request;    /* as the client asked ("params") */
    cJSON *device;          /* the device object of the worker's hello; NULL: unknown (owned) */
    cJSON *result;          /* the worker's result members (timing, kernels, output, verify, perf,
                               energy); NULL until done (owned) */
    cJSON *trace;           /* a profiled run's Chrome trace, stored apart from the record (owned) */
    double median_us;       /* the result's timing.median_us; < 0 when there is none */
    char *error_code;       /* failed or cancelled: why (owned; NULL when none) */
    char *error_message;
    int client_gone;        /* its synchronous client left before the answer */
    double queue_wait_s;    /* seconds in its device's queue before a worker took it; < 0 until then */
} run_record;

/* The wire name of a status ("queued", "done"). */
const char *run_status_name(run_status s);

/* A queued record of r, created now; device: the hello's device object (taken; NULL: none). */
void run_record_init(run_record *rec, const run_request *r, cJSON *device);

/* Free what rec owns (not rec itself). */
void run_record_free(run_record *rec);

/* Replace the device object (taken). */
void run_record_set_device(run_record *rec, cJSON *device);

/* The worker's result (taken): its trace moves to rec->trace, its median to rec->median_us. */
void run_record_set_result(run_record *rec, cJSON *result);

/* Why the run failed or was cancelled: code and message are copied. */
void run_record_set_error(run_record *rec, const char *code, const char *message);

/* The run's last state: status, and finished set to now. */
void run_record_finish(run_record *rec, run_status status);

/* The record as the API answers it (caller deletes); NULL when out of memory. Fields in this
 * order: id, status, created, finished, node, backend, build, params, model and study (when
 * set), device, the result's members,
 * error, and client_gone (only in a final record whose client left). */
cJSON *run_record_to_json(const run_record *rec);

/* Write json (rec's current state, from run_record_to_json) to the store: the first write
 * inserts the row and sets rec->id, later ones replace it; a final one stores the trace
 * first. 0, or -1 (logged). */
int run_record_store(run_record *rec, const cJSON *json);

/* run_record_to_json, then run_record_store. 0, or -1. */
int run_record_save(run_record *rec);

/* Remove rec's row: the run was refused before it ran, so a refused request changes
 * nothing. */
void run_record_delete(run_record *rec);

#endif
