/* store_sqlite.h — this machine's SQLite file (data_dir/attnd.db): opening it, its schema and
 * migrations, the one connection and the mutex that every user holds for a whole
 * bind/step/reset sequence, the checks, transactions and the outbox row that a change of a
 * fleet member appends in its own transaction. For the store's local files (store_local.c,
 * store_local_outbox.c); the rest of the front goes through store.h.
 */
#ifndef STORE_SQLITE_H
#define STORE_SQLITE_H

#include <pthread.h>
#include <stddef.h>

#include <sqlite3.h>

extern pthread_mutex_t store_sqlite_mu;
extern sqlite3 *store_sqlite_db;   /* NULL while closed */
extern int store_sqlite_outbox_on; /* every change also appends an outbox row */

/* rc when it is SQLITE_OK, SQLITE_ROW or SQLITE_DONE; else logs (call, file, line,
 * sqlite3_errmsg), keeps that line for store_sqlite_open's err, and returns -1. */
int store_sqlite_check(int rc, const char *call, const char *file, int line);
#define SQL_CHECK(call) store_sqlite_check((call), #call, __FILE__, __LINE__)

/* Create data_dir (and its parents) and open data_dir/attnd.db: WAL journal, 5 s busy
 * timeout, the schema migrated to its newest version. outbox: whether changes append outbox
 * rows. Under store_sqlite_mu. 0, or -1 with err filled (nothing left open). */
int store_sqlite_open(const char *data_dir, int outbox, char *err, size_t err_len);
/* Close the connection (the callers' statements finalized first). Under store_sqlite_mu. */
void store_sqlite_close(void);
/* The path of the open file ("" when closed), and the last failure's text, for messages. */
const char *store_sqlite_path(void);
const char *store_sqlite_last_error(void);

/* The last failure as "cannot write PATH: MESSAGE" into reason, for /readyz (takes
 * store_sqlite_mu: call it after the failed sequence). Returns 1 when it was a lack of space
 * (a full disk, a quota, a file-size limit), else 0. */
int store_sqlite_failure(char *reason, size_t len);

/* Bind a possibly-NULL string; reset a statement for its next user. */
int store_sqlite_bind_text(sqlite3_stmt *st, int index, const char *text);
void store_sqlite_reset(sqlite3_stmt *st);

/* A write transaction (BEGIN IMMEDIATE … COMMIT), under store_sqlite_mu: 0, or -1. */
int store_sqlite_begin(void);
int store_sqlite_commit(void);
void store_sqlite_rollback(void);

/* Append an outbox row (kind "run", "delete", "trace" or "study") for run_id (a study's id), when the outbox is on:
 * under store_sqlite_mu, inside the caller's transaction. 0, or -1. */
int store_sqlite_outbox_append(const char *kind, long long run_id, const char *uuid);

/* Prepare sql, bind the texts (NULL: SQL NULL) and the integers after them, step it once.
 * Returns the step's result (SQLITE_ROW, SQLITE_DONE) with *out left prepared for a row read
 * (the caller finalizes it, also on failure), or -1. Under store_sqlite_mu. For rare
 * statements (uploads, state, heartbeats). */
int store_sqlite_run_once(sqlite3_stmt **out, const char *sql, const char *const *texts, int n_texts,
                          const long long *ints, int n_ints);

#endif
