/* store_pg.h — the fleet history in PostgreSQL: every attnd of a fleet writes its runs to one
 * database, and any of them answers for all (GET /v1/runs, /v1/nodes).
 *
 * One libpq connection, serialized by a mutex: every function is thread-safe. A call that
 * finds the connection gone drops it and the next call connects again (schema check and
 * statements included), so a database outage costs failed calls, never a restart. Failures
 * return the documented value and leave a one-line reason in store_pg_last_error().
 *
 * The tables (server/front/store/store_pg_schema.c): instances, runs (with `seq`, the fleet position,
 * and the columns of store_fields that a trigger fills from the record), run_tags,
 * fleet_position, traces, nodes, attnd_schema.
 */
#ifndef STORE_PG_H
#define STORE_PG_H

#include <stddef.h>

#include "server/front/store/store_query.h"

/* Connect, migrate and prepare. conninfo: a postgresql:// URI, libpq key=value words, or the
 * bare word "postgresql" (or "postgres": everything from the PG* environment variables).
 * connect_timeout=3, tcp_user_timeout=5000 and keepalives are added unless conninfo sets
 * them. 0, or -1 with err filled; conninfo is kept either way, and later calls retry it. */
int store_pg_open(const char *conninfo, char *err, size_t err_len);

/* Disconnect and forget conninfo: later calls fail until the next open. */
void store_pg_close(void);

/* 1 when the last call (of any thread) found the database, else 0. */
int store_pg_connected(void);

/* The reason for the calling thread's last failure, one line without the password; "" if
 * none. The text belongs to the thread and stays until its next call here. */
const char *store_pg_last_error(void);

/* The instance number (> 0) of an attnd process known by instance_uuid: new, or the one it
 * already has (its node then updated). -1 on failure. */
long long store_pg_register_instance(const char *instance_uuid, const char *node);

/* The node of an instance number into node (len bytes). 1 found, 0 none, -1 error. */
int store_pg_instance_node(long long instance, char *node, size_t len);

typedef enum store_pg_write_kind { STORE_PG_RUN, STORE_PG_DELETE, STORE_PG_TRACE, STORE_PG_STUDY } store_pg_write_kind;

/* One change to the history. Strings are the caller's; NULL backend or device is stored NULL. */
typedef struct store_pg_write {
    store_pg_write_kind kind;
    long long id;                                           /* run id (RUN, TRACE), study id (STUDY) */
    const char *uuid;                                       /* run uuid (RUN, DELETE), study uuid (STUDY) */
    const char *node, *created, *backend, *device, *status; /* RUN (STUDY: node, created, status) */
    int version;      /* RUN, STUDY: the record's state counter, 1 for the first write */
    double median_us; /* RUN: < 0 for none (NULL) */
    const char *text; /* RUN, STUDY: the record JSON; TRACE: the trace JSON */
} store_pg_write;

/* Apply w[0..n) in order in ONE transaction, idempotently: a RUN whose uuid exists replaces
 * status, record, version and median_us only when its version is greater than the stored
 * one (a replay after a lost acknowledgement changes nothing); a new uuid takes the next
 * fleet position; DELETE removes the run and its trace; TRACE upserts. 0: all committed;
 * -1: none. A connection lost during COMMIT also answers -1 although the writes may have
 * committed: replay them, which is why they are idempotent. */
int store_pg_apply(const store_pg_write *w, size_t n);

/* STUDY: a new uuid is inserted (taking the next study position), a known one replaced
 * when its version is greater, as a RUN. */

/* The record / the status of run id / the trace of run run_id: 1 found (*out malloc'd,
 * caller frees), 0 none, -1 error. */
int store_pg_get_run(long long id, char **record);
int store_pg_get_run_status(long long id, char **status);
int store_pg_get_trace(long long run_id, char **json);

/* History queries over the fleet (store.h's store_query_runs, store_group_runs,
 * store_node_known): a position is the fleet position (runs.seq), assigned in commit order,
 * so a poller following next_after never misses a run by moving past it. NULL / -1 on error. */
char *store_pg_query_runs(const store_run_query *q, long long *first, long long *last);
char *store_pg_group_runs(const store_run_query *q, int *more);
int store_pg_node_known(const char *node);

/* Studies: the record of study id (1 found, *record malloc'd; 0 none; -1 error), and a page
 * of GET /v1/studies newest first by fleet study position (a JSON array text, malloc'd, NULL
 * on error; *last the position of its last row, q->before when none; *count its rows). */
int store_pg_get_study(long long id, char **record);
char *store_pg_list_studies(const store_study_query *q, long long *last, int *count);

/* Number of runs in the fleet history; -1 on error. */
long long store_pg_count_runs(void);

/* Record that instance is alive (last_heartbeat = the database's now()), with what it
 * reports: version, devices (a JSON array text), started (ISO-8601). 0, or -1. */
int store_pg_heartbeat(long long instance, const char *node, const char *version, const char *devices_json,
                       const char *started);

/* Every node that has beaten: JSON array text [{"node","instance","version","devices":<the
 * devices JSON, or null>,"started","last_heartbeat":"…Z" (UTC, ms),"heartbeat_age_s":s}]
 * ordered by node, instance; malloc'd (caller frees); NULL on error. */
char *store_pg_nodes_json(void);

#endif
