/* store_pending.h — the records this machine's SQLite file could not take yet, and whether it
 * takes writes now.
 *
 * A write of a run that the file refuses (a full disk, an I/O error) is kept here, the run's
 * latest state only, and retried (store_outbox.c's thread) until the file takes it. A final
 * record (done, failed, cancelled) is also appended to data_dir/attnd.pending, a journal whose
 * STORE_PENDING_RESERVE_BYTES are allocated when the store opens, so that a disk that filled
 * up since still has room for it: a client told "done" reads "done", now (from here) and
 * after a restart (the next open reads the journal back, and the run is not called
 * interrupted). A journal entry is a header with a checksum and the record; the journal is
 * emptied once everything in it reached the file. Thread-safe.
 *
 * Nothing here knows SQLite: the caller hands the function that writes a record into the file.
 */
#ifndef STORE_PENDING_H
#define STORE_PENDING_H

#include <stddef.h>

/* Room kept for final records that wait: ~600 records of the largest kind (about 7 KB), as
 * many as the runs a server holds at once with its default queues on 8 GPUs and the cpu
 * (9 · 65); new runs are refused while records wait, so no more can end. */
#define STORE_PENDING_RESERVE_BYTES (4L << 20)

/* Open (create) data_dir/attnd.pending, allocate its reserve, and read back the final records
 * an earlier process left in it. A reserve that cannot be allocated (a full disk) is not fatal:
 * the store says it is failing until a retry allocates it. 0, or -1 with err filled (the file
 * cannot be opened or read). */
int store_pending_open(const char *data_dir, char *err, size_t err_len);
void store_pending_close(void);

/* Keep the record of run id that the file refused: its latest state replaces an older one.
 * final: also append it to the journal. Returns 1 journaled, 0 kept in memory only (not
 * final, or the journal is full or failed: lost at a restart), -1 out of memory. */
int store_pending_keep(long long id, const char *status, double median_us, const char *record, int final);

/* A newer state of run id reached the file: forget what waits for it. */
void store_pending_forget(long long id);

/* What waits for run id: its record (malloc'd) or its status (into out, 1; 0 when nothing
 * waits). NULL / 0 when nothing waits. */
char *store_pending_record(long long id);
int store_pending_status(long long id, char *out, size_t len);

/* Whether a final record of run id waits (the restart must not call it interrupted). */
int store_pending_holds_final(long long id);

/* Writes a record into the file: 0, or -1 with err filled and *no_space set when the file
 * lacked room. */
typedef int (*store_pending_land_fn)(long long id, const char *status, double median_us, const char *record, char *err,
                                     size_t err_len, int *no_space);
/* A small write that says whether the file takes writes again: 0, or -1 as above. */
typedef int (*store_pending_probe_fn)(char *err, size_t err_len, int *no_space);

/* One retry: allocate a missing reserve, land what waits (oldest first, stopping at the first
 * refusal), or, with nothing waiting after a failed write, probe. The journal is emptied once
 * nothing final waits. 0 when the file takes writes and nothing waits, else -1. */
int store_pending_retry(store_pending_land_fn land, store_pending_probe_fn probe);

/* The result of a write to the file, from its caller: ok, or the error and whether it was a
 * lack of space (SQLITE_FULL). */
void store_pending_note_write(int ok, const char *error, int no_space);

/* Whether the store cannot promise to keep a new run's result now: a write failed since the
 * last one that worked, records wait, or the reserve is missing. */
int store_pending_failing(void);

/* For /readyz and /metrics. */
typedef struct store_pending_state {
    int failing;                /* store_pending_failing() */
    int no_space;               /* the failure is a lack of space (507 rather than 503) */
    long long waiting;          /* records waiting for the file */
    long long waiting_memory;   /* of them, kept in memory only */
    long long write_failures;   /* writes the file refused since start */
    long long reserve_bytes;    /* the journal's allocated room, 0 when missing */
    char journal[1024];         /* the journal's path */
    char error[400];            /* why it fails, "" when it does not */
} store_pending_state;
void store_pending_get_state(store_pending_state *st);

#endif
