/* store_local.h — this machine's SQLite database (data_dir/attnd.db, WAL mode): every run
 * of this attnd, the traces of profiled runs, the resident-tensor ids it issued, its own
 * small state (the fleet instance it is), its heartbeat, and, when the fleet's history
 * lives in PostgreSQL, the outbox of writes that still have to reach it.
 *
 * Table runs(id, created, backend, device, status, record, uuid, node, version): `record`
 * is the whole run object as answered, the other columns copies of its fields for filtering
 * and paging; `version` counts the row's writes (1 for the insert), which makes a replayed
 * write to PostgreSQL recognisable. A record inserted as {"id":0,… gets its id filled in.
 * ids only grow, so `after=ID` paging sees each run once. Thread-safe.
 *
 * With `outbox` set, every change of a run or trace also appends an outbox row (kind,
 * run id, uuid) in the same transaction, so a change is never stored locally without its
 * way to the fleet, nor the other way round (server/front/store/store_outbox.c drains them in order).
 */
#ifndef STORE_LOCAL_H
#define STORE_LOCAL_H

#include <stddef.h>

/* Open or create (migrating an older file); rows left queued/running by an earlier process
 * are marked failed with "server restarted before the job finished" (through the outbox too
 * when outbox). 0, or -1 with err filled. */
int local_open(const char *data_dir, int outbox, char *err, size_t err_len);
void local_close(void);

/* A new run in state `status` with its record so far, its uuid and node; returns its id
 * (> 0), or -1. */
long long local_insert_run(const char *created, const char *backend, const char *device, const char *status,
                           const char *record_json, const char *uuid, const char *node);

/* Replace status and record of run id (its version goes up by one). 0, or -1. */
int local_update_run(long long id, const char *status, const char *record_json);

/* Remove a run that was refused before it ran. 0, or -1. */
int local_delete_run(long long id);

/* The record of run id, malloc'd; NULL when there is none. */
char *local_get_run(long long id);

/* The records of runs with id > after_id, oldest first, at most limit (1..1000), filtered by
 * backend, status, device and node when given (NULL or "": any) and created >= since. *last_id
 * (when not NULL) gets the last row's id, or after_id when none. A JSON array text,
 * malloc'd; NULL on failure. */
char *local_query_runs(long long after_id, int limit, const char *backend, const char *status, const char *device,
                       const char *node, const char *since, long long *last_id);

/* A profiled run's Chrome trace. put: 0, or -1. get: malloc'd, NULL if none. */
int local_put_trace(long long run_id, const char *json);
char *local_get_trace(long long run_id);

/* Number of runs stored. */
long long local_count_runs(void);

/* Resident-tensor ids: issue one for `device` (> 0; -1 on failure); whether id was issued
 * and not forgotten (1, 0; -1 on failure); forget it (0, or -1). */
long long local_tensor_issue(const char *device);
int local_tensor_known(long long id);
int local_tensor_forget(long long id);

/* Make every later run id and tensor id greater than base (a fleet instance's ids start at
 * instance · 2^32). Ids already above it stay. 0, or -1. */
int local_set_id_base(long long base);

/* This attnd's own small facts (key → text): get 1 (found), 0 (none), -1; set 0, or -1. */
int local_state_get(const char *key, char *value, size_t len);
int local_state_set(const char *key, const char *value);

/* This node's heartbeat, for GET /v1/nodes when there is no fleet database. put 0, or -1;
 * nodes: the same JSON array text as the fleet's (store.h), malloc'd, NULL on failure. */
int local_heartbeat(long long instance, const char *node, const char *version, const char *devices_json,
                    const char *started);
char *local_nodes_json(void);

/* ------------------------------------------------------------------------ outbox -- */

typedef enum local_outbox_kind { OUTBOX_RUN, OUTBOX_DELETE, OUTBOX_TRACE } local_outbox_kind;

/* One pending write, with the run's state as it is now (a run written three times while
 * the database was away is sent once, in its last state; the two older rows then find the
 * fleet already at that version). Strings malloc'd; has_run 0 when the run is gone. */
typedef struct local_outbox_entry {
    long long seq;
    local_outbox_kind kind;
    long long run_id;
    char *uuid;
    int has_run;
    char *node, *created, *backend, *device, *status, *record;
    int version;
    char *trace; /* OUTBOX_TRACE: the trace, NULL when gone */
} local_outbox_entry;

/* The oldest max entries into out; returns how many (0: empty), -1 on failure. */
int local_outbox_peek(local_outbox_entry *out, int max);
void local_outbox_entries_free(local_outbox_entry *e, int n);

/* Remove every entry up to and including seq (they reached the fleet). 0, or -1. */
int local_outbox_drop_through(long long seq);

/* Entries waiting; -1 on failure. */
long long local_outbox_depth(void);

#endif
