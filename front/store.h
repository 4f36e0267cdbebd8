/* store.h — every run, in an embedded SQLite database (data_dir/attnd.db), WAL mode.
 *
 * Table runs(id INTEGER PRIMARY KEY AUTOINCREMENT, created, backend, device, status,
 * record): `record` is the whole run object as answered; table traces(run_id, json) holds
 * the Chrome traces of profiled runs. A record inserted as {"id":0,… gets its id filled in. ids only grow, so `after=ID`
 * paging sees each run once. Thread-safe (one connection, serialized mode).
 */
#ifndef STORE_H
#define STORE_H

#include <stddef.h>

/* Open or create; rows left queued/running by an earlier process are marked failed with
 * "server restarted before the job finished". Returns 0, or -1 with err filled. */
int store_open(const char *data_dir, char *err, size_t err_len);
void store_close(void);

/* A new run in state `status` with its record so far; returns its id (> 0), or -1. */
long long store_insert_run(const char *created, const char *backend, const char *device, const char *status,
                           const char *record_json);

/* Replace status and record of run id. 0, or -1. */
int store_update_run(long long id, const char *status, const char *record_json);

/* Remove a run that was refused before it ran (so a failed request changes nothing). */
int store_delete_run(long long id);

/* The record of run id, malloc'd (caller frees); NULL when there is none. */
char *store_get_run(long long id);

/* History for pollers (GET /v1/runs?after=ID&limit=N): the records of runs with id > after_id,
 * oldest first, at most limit (clamped to 1..1000), only those of `backend` and `status`
 * when given (NULL or "": any). Returns a JSON array text "[{…},{…}]", malloc'd (caller
 * frees); NULL on failure. */
char *store_list_runs(long long after_id, int limit, const char *backend, const char *status);

/* store_list_runs plus the filters device and since (created >= since, both ISO-8601 UTC
 * "YYYY-MM-DDTHH:MM:SS.mmmZ"; NULL or "": any). *last_id (when not NULL) gets the id of the
 * last row returned, or after_id when none: the next cursor. */
char *store_query_runs(long long after_id, int limit, const char *backend, const char *status, const char *device,
                       const char *since, long long *last_id);

/* The Chrome trace of a profiled run (table traces(run_id, json)), kept apart from the
 * record so the history stays small. put: 0, or -1. get: malloc'd JSON text, NULL if none. */
int store_put_trace(long long run_id, const char *json);
char *store_get_trace(long long run_id);

/* Number of runs stored (for tests and /metrics). */
long long store_count_runs(void);

/* Resident-tensor ids (front/tensor_table.c): issue a new one for `device` (> 0, unique across
 * restarts; -1 on failure); whether id was issued and not forgotten (1, 0; -1 on failure);
 * forget it once deleted (0, or -1). */
long long store_tensor_issue(const char *device);
int store_tensor_known(long long id);
int store_tensor_forget(long long id);

#endif
