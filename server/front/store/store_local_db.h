/* store_local_db.h — what the two files of the local store (store_local.c, the runs;
 * store_local_outbox.c, the outbox and heartbeat) share: the one connection, the mutex that
 * every public function holds for its whole bind/step/reset sequence, and the checks. Not
 * for anyone else: the rest of the front goes through store_local.h. */
#ifndef STORE_LOCAL_DB_H
#define STORE_LOCAL_DB_H

#include <pthread.h>

#include <sqlite3.h>

extern pthread_mutex_t store_mu;
extern sqlite3 *store_db;
extern int store_outbox_on; /* every change also appends an outbox row */

/* rc when it is SQLITE_OK, SQLITE_ROW or SQLITE_DONE; else logs (call, file, line,
 * sqlite3_errmsg) and returns -1. */
int store_check(int rc, const char *call, const char *file, int line);
#define SQL_CHECK(call) store_check((call), #call, __FILE__, __LINE__)

/* Bind a possibly-NULL string; reset a statement for its next user. */
int store_bind_text(sqlite3_stmt *st, int index, const char *text);
void store_reset(sqlite3_stmt *st);

/* Append an outbox row (kind "run", "delete" or "trace") for run_id: under store_mu, inside
 * the caller's transaction. 0, or -1. */
int store_outbox_append(const char *kind, long long run_id, const char *uuid);

/* A write transaction (BEGIN IMMEDIATE … COMMIT), under store_mu: 0, or -1. */
int store_begin(void);
int store_commit(void);
void store_rollback(void);

#endif
