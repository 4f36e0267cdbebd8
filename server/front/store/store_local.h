/* store_local.h — this machine's SQLite database (data_dir/attnd.db, WAL mode): every run
 * of this attnd, the traces of profiled runs, the resident-tensor ids it issued, its own
 * small state (the fleet instance it is), its heartbeat, and, when the fleet's history
 * lives in PostgreSQL, the outbox of writes that still have to reach it.
 *
 * Table runs(id, created, backend, device, status, record, uuid, node, version, median_us,
 * and the columns of store_fields that SQLite computes from the record): `record` is the
 * whole run object as answered, the other columns copies of its fields for filtering and
 * paging; `version` counts the row's writes (1 for the insert), which makes a replayed
 * write to PostgreSQL recognisable. A record inserted as {"id":0,… gets its id filled in.
 * ids only grow, so `after=ID` paging sees each run once. Thread-safe.
 *
 * With `outbox` set, every change of a run or trace also appends an outbox row (kind,
 * run id, uuid) in the same transaction, so a change is never stored locally without its
 * way to the fleet, nor the other way round (store_local_outbox.h reads them; store_outbox.c
 * drains them in order).
 */
#ifndef STORE_LOCAL_H
#define STORE_LOCAL_H

#include <stddef.h>

#include "server/front/store/store_query.h"

/* Open or create (migrating an older file). 0, or -1 with err filled. */
int store_local_open(const char *data_dir, int outbox, char *err, size_t err_len);
void store_local_close(void);

/* Mark the rows an earlier process left queued or running failed, with "server restarted
 * before the job finished" (through the outbox too when outbox): their worker died with it.
 * spare(id) (NULL: none) names the runs whose final record waits to be landed instead
 * (store_pending.h). 0, or -1. */
int store_local_mark_interrupted(int (*spare)(long long id));

/* A new run in state `status` with its record so far, its uuid and node; returns its id
 * (> 0), or -1. */
long long store_local_insert_run(const char *created, const char *backend, const char *device, const char *status,
                                 double median_us, const char *record_json, const char *uuid, const char *node);

/* Replace status, median (< 0: none) and record of run id (its version goes up by one). 0;
 * 1 when there is no run id (nothing written); -1 when the file refused the write. */
int store_local_update_run(long long id, const char *status, double median_us, const char *record_json);

/* Land a final record that waited (store_pending.h): like store_local_update_run, but only
 * while the run is still queued or running, so landing it twice changes nothing. 0 (landed,
 * or nothing to do), or -1. */
int store_local_land_final(long long id, const char *status, double median_us, const char *record_json);

/* Remove a run that was refused before it ran. 0; 1 when there is no run id; -1 when the
 * file refused the write. */
int store_local_delete_run(long long id);

/* The record of run id, malloc'd; NULL when there is none. */
char *store_local_get_run(long long id);

/* The status of run id into out: 1 found, 0 none, -1 on failure. */
int store_local_get_run_status(long long id, char *out, size_t len);

/* History queries (store.h's store_query_runs, store_group_runs, store_node_known) over
 * this machine's runs; a position is the run id. */
char *store_local_query_runs(const store_run_query *q, long long *first, long long *last);
char *store_local_group_runs(const store_run_query *q, int *more);
int store_local_node_known(const char *node);

/* Studies (store_local_studies.c): like runs, a record inserted as {"id":0,… gets its id;
 * insert returns it (> 0) or -1; update 0, 1 (no such study), -1; get malloc'd or NULL; list:
 * a JSON array text of the page (malloc'd; NULL on failure), *last the cursor of its last
 * row (q->before when none) and *count its rows; mark: the studies an earlier process left queued or running,
 * failed with server_restarted. 0, or -1. */
long long store_local_insert_study(const char *created, const char *status, const char *record_json, const char *uuid,
                                   const char *node);
int store_local_update_study(long long id, const char *status, const char *record_json);
char *store_local_get_study(long long id);
char *store_local_list_studies(const store_study_query *q, long long *last, int *count);
int store_local_mark_studies_interrupted(void);

/* A profiled run's Chrome trace. put: 0, or -1. get: malloc'd, NULL if none. */
int store_local_put_trace(long long run_id, const char *json);
char *store_local_get_trace(long long run_id);

/* Number of runs stored. */
long long store_local_count_runs(void);

/* Resident-tensor ids: issue one for `device` (> 0; -1 on failure); whether id was issued
 * and not forgotten (1, 0; -1 on failure); forget it (0, or -1). */
long long store_local_tensor_issue(const char *device);
int store_local_tensor_known(long long id);
int store_local_tensor_forget(long long id);

/* Make every later run id and tensor id greater than base (a fleet instance's ids start at
 * instance · 2^32). Ids already above it stay. 0, or -1. */
int store_local_set_id_base(long long base);

/* This attnd's own small facts (key → text): get 1 (found), 0 (none), -1; set 0, or -1. */
int store_local_state_get(const char *key, char *value, size_t len);
int store_local_state_set(const char *key, const char *value);

/* This node's heartbeat, for GET /v1/nodes when there is no fleet database. put 0, or -1;
 * nodes: the same JSON array text as the fleet's (store.h), malloc'd, NULL on failure. */
int store_local_heartbeat(long long instance, const char *node, const char *version, const char *devices_json,
                    const char *started);
char *store_local_nodes_json(void);

#endif
