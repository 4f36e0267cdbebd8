/* store_outbox.c — carrying writes onward (store_outbox.h): the records the SQLite file
 * refused into it, then, in a fleet, the outbox to PostgreSQL.
 *
 * One sender at a time (send_mu), so the writes reach the database in the order they were
 * made here. The thread sleeps until kicked; after a failure it retries on its own, pausing
 * 250 ms, then twice as long each time up to OUTBOX_RETRY_MAX_MS. Both stages are one
 * pipeline: a record landed in the file appends its outbox row in the same transaction, so
 * the second stage carries it to the fleet like any other write. */
#include "server/front/store/store_outbox.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/front/store/store_local.h"
#include "server/front/store/store_local_outbox.h"
#include "server/front/store/store_pending.h"
#include "server/front/store/store_pg.h"
#include "server/front/store/store_sqlite.h"

#define OUTBOX_BATCH 64
#define OUTBOX_RETRY_MAX_MS 5000

static pthread_mutex_t send_mu = PTHREAD_MUTEX_INITIALIZER;  /* one sender at a time */
static pthread_mutex_t state_mu = PTHREAD_MUTEX_INITIALIZER; /* what follows */
static pthread_cond_t state_cv; /* on the monotonic clock: store_outbox_start */
static pthread_once_t state_cv_once = PTHREAD_ONCE_INIT;
static pthread_t outbox_thread;
static int outbox_running, outbox_kicked, outbox_stopping;
static int outbox_to_fleet; /* the second stage runs: the history is in PostgreSQL */
static int database_up = 1;
static long long sent_total, failures_total;
static char last_error[256];

/* The database write of an outbox entry; 0 when there is nothing left to send (the run was
 * deleted since, or a row from before runs had uuids). */
static int outbox_write_of(const store_local_outbox_entry *e, store_pg_write *w)
{
    memset(w, 0, sizeof *w);
    w->id = e->run_id;
    w->uuid = e->uuid;
    switch (e->kind) {
    case OUTBOX_RUN:
        if (!e->has_run || !e->uuid || !e->record) return 0;
        w->kind = STORE_PG_RUN;
        w->node = e->node ? e->node : "";
        w->created = e->created ? e->created : "";
        w->backend = e->backend;
        w->device = e->device;
        w->status = e->status ? e->status : "";
        w->version = e->version;
        w->median_us = e->median_us;
        w->text = e->record;
        return 1;
    case OUTBOX_DELETE:
        if (!e->uuid) return 0;
        w->kind = STORE_PG_DELETE;
        return 1;
    case OUTBOX_STUDY:
        if (!e->has_run || !e->uuid || !e->record) return 0;
        w->kind = STORE_PG_STUDY;
        w->node = e->node ? e->node : "";
        w->created = e->created ? e->created : "";
        w->status = e->status ? e->status : "";
        w->version = e->version;
        w->text = e->record;
        return 1;
    case OUTBOX_TRACE:
        if (!e->trace) return 0;
        w->kind = STORE_PG_TRACE;
        w->text = e->trace;
        return 1;
    }
    return 0;
}

static void outbox_note(int ok, long long sent)
{
    pthread_mutex_lock(&state_mu);
    if (ok && !database_up) log_info("store: the fleet database is back; the outbox is moving");
    if (!ok && database_up) log_warn("store: the fleet database is away (%s); runs wait in the outbox", store_pg_last_error());
    database_up = ok;
    sent_total += sent;
    if (!ok) {
        failures_total++;
        snprintf(last_error, sizeof last_error, "%s", store_pg_last_error());
    } else {
        last_error[0] = '\0';
    }
    pthread_mutex_unlock(&state_mu);
}

int store_outbox_flush(void)
{
    store_local_outbox_entry entries[OUTBOX_BATCH];
    store_pg_write writes[OUTBOX_BATCH];
    int rc = 0;

    pthread_mutex_lock(&send_mu);
    for (;;) {
        int n = store_local_outbox_peek(entries, OUTBOX_BATCH), i, m = 0;
        if (n < 0) {
            rc = -1;
            break;
        }
        if (n == 0) break;
        for (i = 0; i < n; i++) m += outbox_write_of(&entries[i], &writes[m]);
        if (m > 0 && store_pg_apply(writes, (size_t)m) != 0) {
            store_local_outbox_entries_free(entries, n);
            outbox_note(0, 0);
            rc = -1;
            break;
        }
        /* Committed there: a failure to drop them here only sends them again, harmlessly. */
        if (store_local_outbox_drop_through(entries[n - 1].seq) != 0) rc = -1;
        store_local_outbox_entries_free(entries, n);
        outbox_note(1, n);
        if (rc != 0) break;
    }
    pthread_mutex_unlock(&send_mu);
    return rc;
}

/* The first stage's writes into the SQLite file (store_pending.h's callbacks). */
static int outbox_land(long long id, const char *status, double median_us, const char *record, char *err, size_t err_len,
                       int *no_space)
{
    if (store_local_land_final(id, status, median_us, record) == 0) return 0;
    *no_space = store_sqlite_failure(err, err_len);
    return -1;
}

static int outbox_probe(char *err, size_t err_len, int *no_space)
{
    char now[40];

    clock_text_now_iso(now, sizeof now);
    if (store_local_state_set("write_probe", now) == 0) return 0;
    *no_space = store_sqlite_failure(err, err_len);
    return -1;
}

int store_outbox_land_pending(void) { return store_pending_retry(outbox_land, outbox_probe); }

/* One pass of both stages. 0 when nothing is left to do, -1 when something waits. */
static int outbox_pass(void)
{
    int rc = store_outbox_land_pending();

    if (outbox_to_fleet && store_outbox_flush() != 0) rc = -1;
    return rc;
}

static void *outbox_main(void *arg)
{
    int pause_ms = 0;

    (void)arg;
    pthread_mutex_lock(&state_mu);
    while (!outbox_stopping) {
        struct timespec until;
        int rc;

        if (!outbox_kicked) {
            if (pause_ms == 0) {
                pthread_cond_wait(&state_cv, &state_mu);
            } else {
                until = clock_deadline(pause_ms);
                pthread_cond_timedwait(&state_cv, &state_mu, &until);
            }
        }
        if (outbox_stopping) break;
        outbox_kicked = 0;
        pthread_mutex_unlock(&state_mu);
        rc = outbox_pass();
        pthread_mutex_lock(&state_mu);
        if (rc == 0)
            pause_ms = 0;
        else
            pause_ms = pause_ms == 0 ? 250 : (pause_ms * 2 > OUTBOX_RETRY_MAX_MS ? OUTBOX_RETRY_MAX_MS : pause_ms * 2);
    }
    pthread_mutex_unlock(&state_mu);
    return NULL;
}

static void state_cv_init(void) { clock_cond_init(&state_cv); }

int store_outbox_start(int to_fleet)
{
    int rc;

    pthread_once(&state_cv_once, state_cv_init);
    pthread_mutex_lock(&state_mu);
    outbox_to_fleet = to_fleet;
    outbox_stopping = 0;
    outbox_kicked = 1; /* what an earlier process left waits too */
    rc = pthread_create(&outbox_thread, NULL, outbox_main, NULL);
    outbox_running = rc == 0;
    pthread_mutex_unlock(&state_mu);
    if (rc != 0) log_error("store: outbox thread: %s", strerror(rc));
    return rc == 0 ? 0 : -1;
}

void store_outbox_kick(void)
{
    pthread_mutex_lock(&state_mu);
    outbox_kicked = 1;
    pthread_cond_signal(&state_cv);
    pthread_mutex_unlock(&state_mu);
}

void store_outbox_stop(void)
{
    long long left;

    pthread_mutex_lock(&state_mu);
    if (!outbox_running) {
        pthread_mutex_unlock(&state_mu);
        return;
    }
    outbox_stopping = 1;
    pthread_cond_signal(&state_cv);
    pthread_mutex_unlock(&state_mu);
    pthread_join(outbox_thread, NULL);
    outbox_running = 0;
    /* One last try; what still waits is sent by the next start on this data_dir. */
    store_outbox_land_pending();
    if (outbox_to_fleet && store_outbox_flush() != 0 && (left = store_local_outbox_depth()) > 0)
        log_warn("store: %lld write(s) wait in the outbox for the next start (%s)", left, last_error);
}

int store_outbox_database_up(void)
{
    int up;
    pthread_mutex_lock(&state_mu);
    up = database_up;
    pthread_mutex_unlock(&state_mu);
    return up;
}

void store_outbox_get_state(store_outbox_state *st)
{
    st->depth = store_local_outbox_depth();
    pthread_mutex_lock(&state_mu);
    st->database_up = database_up;
    st->sent = sent_total;
    st->failures = failures_total;
    snprintf(st->last_error, sizeof st->last_error, "%s", last_error);
    pthread_mutex_unlock(&state_mu);
}
