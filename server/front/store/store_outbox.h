/* store_outbox.h — the thread that carries writes onward, in two stages: the records this
 * machine's SQLite file refused (store_pending.h) into that file once it takes them, then,
 * in a fleet, the file's outbox (store_local.h) to the fleet's PostgreSQL (store_pg.h),
 * oldest first, in batches of one transaction each. What fails stays and is tried again with
 * a growing pause (up to OUTBOX_RETRY_MAX_MS); a batch that committed but whose removal here
 * was lost is sent again and changes nothing (the database keeps a run's write only when its
 * counter is higher). */
#ifndef STORE_OUTBOX_H
#define STORE_OUTBOX_H

/* Start the thread; to_fleet: the second stage too. 0, or -1. */
int store_outbox_start(int to_fleet);

/* One last attempt at what waits (bounded), then stop the thread. */
void store_outbox_stop(void);

/* Something was written, or a write failed: carry it, or retry, soon. */
void store_outbox_kick(void);

/* The first stage now, in the caller's thread: land the records that wait in the SQLite
 * file (or ask it whether it takes writes again). 0 when nothing waits and it does. */
int store_outbox_land_pending(void);

/* Send what waits now, in the caller's thread (after any send in progress). 0 when the
 * outbox is empty afterwards, -1 when the database was away. */
int store_outbox_flush(void);

/* Whether the last attempt reached the database (1 before any). */
int store_outbox_database_up(void);

/* How the outbox is doing. */
typedef struct store_outbox_state {
    int database_up;          /* the last attempt reached the database */
    long long depth;          /* writes waiting */
    long long sent;           /* writes delivered since start */
    long long failures;       /* attempts that found the database away */
    char last_error[256];     /* why, "" when up */
} store_outbox_state;
void store_outbox_get_state(store_outbox_state *st);

#endif
