/* store.h — where every run's record goes: the one door of the front to its history.
 *
 * With store=sqlite (the default) the history is this machine's SQLite file
 * (server/front/store/store_local.c). With a PostgreSQL connection string it is the fleet's: every change
 * is written to the local file first, with an outbox row in the same transaction, and a
 * thread (server/front/store/store_outbox.c) carries the outbox to PostgreSQL (server/front/store/store_pg.c) in order,
 * idempotently by the run's uuid and write counter, so an outage of the database loses and
 * duplicates nothing. Run and tensor ids are then global: instance · 2^32 + a local number,
 * the instance number issued once per data_dir by the database. docs/architecture.md
 * ("The fleet store") gives the design; the history's cursor is a fleet position that
 * commits in order.
 */
#ifndef STORE_H
#define STORE_H

#include <stddef.h>

#include "common/settings.h"
#include "server/front/store/store_query.h" /* store_run_query */

/* Open the store s names (data_dir, store, node). PostgreSQL: a data_dir that has never
 * met the database waits up to STORE_REGISTER_WAIT_S for it (its instance number); one that
 * has starts at once and queues in the outbox. 0, or -1 with err filled. */
int store_open_settings(const settings *s, char *err, size_t err_len);

/* The SQLite store in data_dir alone, this host as node (tests, tools). 0, or -1. */
int store_open(const char *data_dir, char *err, size_t err_len);

/* Stop the outbox thread (one last attempt to send what waits) and close. */
void store_close(void);

/* This attnd's node name and fleet instance (0 with SQLite). */
const char *store_node(void);
long long store_instance(void);

/* A new run in state `status` with its record so far; returns its id (> 0), or -1. A record
 * inserted as {"id":0,… gets its id filled in before anyone can read it. median_us: the
 * record's timing.median_us, < 0 when it has none (a column, so nothing reads it back out of
 * the record). */
long long store_insert_run(const char *created, const char *backend, const char *device, const char *status,
                           double median_us, const char *record_json);

/* Replace status, median and record of run id. When the local file refuses it (a full disk),
 * the record is kept and written later (store_pending.h): a final one also in data_dir's
 * journal, so it outlives a restart; store_get_run answers it meanwhile. 0 (stored or kept),
 * or -1 (out of memory). */
int store_update_run(long long id, const char *status, double median_us, const char *record_json);

/* Remove a run that was refused before it ran (so a failed request changes nothing). */
int store_delete_run(long long id);

/* The record of run id, malloc'd (caller frees); NULL when there is none anywhere (this
 * machine first, then the fleet). */
char *store_get_run(long long id);

/* The status of run id ("queued", …) into out: 1 found, 0 none (or the fleet database is
 * away), -1 on failure. */
int store_get_run_status(long long id, char *out, size_t len);

/* ---------------------------------------------------------------- history queries -- */

/* History (GET /v1/runs): the records q (store_query.h) selects, in position order (oldest
 * or newest first), at most q->limit. *first and *last (when not NULL) get the positions of
 * the first and the last row returned; when none, *first 0 and *last q->after (oldest first)
 * or q->before (newest first): the next cursor. With SQLite a position is the run id; in a
 * fleet it is the order in which runs first reached the database, which commits in order,
 * so following next_after sees every run of every node exactly once. Returns a JSON array
 * text, malloc'd; NULL on failure (store_available() says whether the database is away). */
char *store_query_runs(const store_run_query *q, long long *first, long long *last);

/* The aggregate of the runs q selects that have a median (finished and timed), grouped by
 * q->group_by: a JSON array text [{"FIELD": value…, "count", "median_us" (the median of the
 * runs' medians), "min_us", "max_us"}] in the order of the group values (nulls last), at most
 * q->limit groups; *more = 1 when there were more. malloc'd; NULL on failure. */
char *store_group_runs(const store_run_query *q, int *more);

/* Whether node has written to this history (runs or a heartbeat), this node included: 1, 0,
 * or -1 on failure. */
int store_node_known(const char *node);

/* History after position `after`, oldest first, filtered by backend and status only (tests). */
char *store_list_runs(long long after, int limit, const char *backend, const char *status);

/* ---------------------------------------------------------------- studies -- */

/* A new study in state `status` with its record so far (inserted as {"id":0,… it gets its id
 * filled in); returns its id (> 0, in the same fleet range as run ids), or -1. */
long long store_insert_study(const char *created, const char *status, const char *record_json);

/* Replace status and record of study id. 0, or -1 (no such study, or the file refused it). */
int store_update_study(long long id, const char *status, const char *record_json);

/* The record of study id, malloc'd (caller frees); NULL when there is none (this machine
 * first, then the fleet). */
char *store_get_study(long long id);

/* GET /v1/studies: the page q selects, newest first, as a JSON array text (malloc'd; NULL on
 * failure, store_available() says whether the database is away); *last: the cursor of its
 * last row, q->before when none; *count: its rows. */
char *store_list_studies(const store_study_query *q, long long *last, int *count);

/* The Chrome trace of a profiled run, kept apart from the record so the history stays
 * small. put: 0, or -1. get: malloc'd JSON text, NULL if none. */
int store_put_trace(long long run_id, const char *json);
char *store_get_trace(long long run_id);

/* Number of runs stored on this machine (tests, /metrics). */
long long store_count_runs(void);

/* Resident-tensor ids (server/front/tensors/tensor_table.c): issue a new one for `device` (> 0, unique
 * across restarts and nodes; -1 on failure); whether id was issued here and not forgotten
 * (1, 0; -1 on failure); forget it once deleted (0, or -1). */
long long store_tensor_issue(const char *device);
int store_tensor_known(long long id);
int store_tensor_forget(long long id);

/* Whether tensor id was issued by another node of the fleet: 1 with its node's name in node
 * ("instance N" when the database cannot say), 0 when it is this node's or unknown. */
int store_tensor_elsewhere(long long id, char *node, size_t len);

/* This node's heartbeat: devices (a JSON array text) and version, with the time. 0, or -1. */
int store_heartbeat(const char *devices_json);

/* GET /v1/nodes: every node's name, instance, version, devices, start and last heartbeat
 * (JSON array text, malloc'd); NULL on failure. */
char *store_nodes_json(void);

/* What /readyz and /metrics say of the store. */
typedef struct store_health {
    const char *backend;        /* "sqlite" or "postgresql" */
    int database_up;            /* 1: the last exchange with PostgreSQL worked (sqlite: writable) */
    long long outbox_depth;     /* writes waiting for the database (sqlite: 0) */
    long long outbox_sent;      /* writes the outbox delivered since start */
    long long outbox_failures;  /* attempts that found the database away */
    char last_error[256];       /* why the database was away, "" when it is not */
    /* This machine's file, which every write goes to first (both backends): */
    int writable;               /* it takes writes and nothing waits for it: runs are accepted */
    int no_space;               /* when not: for lack of space */
    long long pending_records;  /* run records it refused, waiting to be written (GET answers them) */
    long long pending_in_memory; /* of them, not in the journal (lost at a restart) */
    long long write_failures;   /* writes it refused since start */
    long long reserve_bytes;    /* the journal's allocated room for waiting records, 0 when missing */
    char file[1024];            /* its path */
    char journal[1024];         /* the journal's path (data_dir/attnd.pending) */
    char write_error[400];      /* why it is not writable, "" when it is */
} store_health;
void store_get_health(store_health *h);

/* Whether a new run may start: 0 when the store can promise to keep its result, else the HTTP
 * status (507 for lack of space, 503 otherwise) with code ("store_full", "store_failing") and
 * message filled. A run refused here has stored nothing. */
int store_refusal(char *code, size_t code_len, char *message, size_t message_len);

/* Whether the history can be read now: 0 when the fleet database is away. */
int store_available(void);

#endif
