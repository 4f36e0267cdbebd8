/* store_local_outbox.h — the outbox of a fleet member's SQLite file: the writes that still have
 * to reach the fleet's PostgreSQL, oldest first (store_outbox.c sends them). A row says only
 * which run (or trace) changed; the run's state is read when it is sent, so a run written
 * several times while the database was away travels once, in its last state.
 */
#ifndef STORE_LOCAL_OUTBOX_H
#define STORE_LOCAL_OUTBOX_H

typedef enum store_local_outbox_kind { OUTBOX_RUN, OUTBOX_DELETE, OUTBOX_TRACE, OUTBOX_STUDY } store_local_outbox_kind;

/* One pending write, with the run's (OUTBOX_STUDY: the study's, run_id its id, backend and
 * device NULL) state as it is now (a run written three times while
 * the database was away is sent once, in its last state; the two older rows then find the
 * fleet already at that version). Strings malloc'd; has_run 0 when the run is gone. */
typedef struct store_local_outbox_entry {
    long long seq;
    store_local_outbox_kind kind;
    long long run_id;
    char *uuid;
    int has_run;
    char *node, *created, *backend, *device, *status, *record;
    double median_us; /* < 0 when the run has none */
    int version;
    char *trace; /* OUTBOX_TRACE: the trace, NULL when gone */
} store_local_outbox_entry;

/* The oldest max entries into out; returns how many (0: empty), -1 on failure. */
int store_local_outbox_peek(store_local_outbox_entry *out, int max);
void store_local_outbox_entries_free(store_local_outbox_entry *e, int n);

/* Remove every entry up to and including seq (they reached the fleet). 0, or -1. */
int store_local_outbox_drop_through(long long seq);

/* Entries waiting; -1 on failure. */
long long store_local_outbox_depth(void);

#endif
