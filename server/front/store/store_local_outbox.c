/* store_local_outbox.c — reading and draining the outbox of this machine's SQLite file
 * (store_local_outbox.h); its rows are appended by the writes themselves (store_sqlite.h). */
#include "server/front/store/store_local_outbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/front/store/store_sqlite.h"

/* A column's text, malloc'd; NULL for SQL NULL (or out of memory). */
static char *column_dup(sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    return t ? strdup((const char *)t) : NULL;
}

static store_local_outbox_kind outbox_kind_of(const char *kind)
{
    if (kind && !strcmp(kind, "delete")) return OUTBOX_DELETE;
    if (kind && !strcmp(kind, "trace")) return OUTBOX_TRACE;
    if (kind && !strcmp(kind, "study")) return OUTBOX_STUDY;
    return OUTBOX_RUN;
}

int store_local_outbox_peek(store_local_outbox_entry *out, int max)
{
    /* A study's row names the study in run_id: the runs table is not joined for it (a run
     * may have the same number). */
    static const char *const sql =
        "SELECT o.seq, o.kind, o.run_id, coalesce(o.uuid, r.uuid, s.uuid), coalesce(r.id, s.id),"
        " coalesce(r.node, s.node), coalesce(r.created, s.created), r.backend, r.device,"
        " coalesce(r.status, s.status), coalesce(r.record, s.record), coalesce(r.version, s.version), t.json, r.median_us"
        " FROM outbox o LEFT JOIN runs r ON o.kind <> 'study' AND r.id = o.run_id"
        " LEFT JOIN studies s ON o.kind = 'study' AND s.id = o.run_id"
        " LEFT JOIN traces t ON o.kind = 'trace' AND t.run_id = o.run_id"
        " ORDER BY o.seq LIMIT ?1";
    sqlite3_stmt *st = NULL;
    int n = 0, step = -1;

    pthread_mutex_lock(&store_sqlite_mu);
    if (!store_sqlite_db || SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, sql, -1, &st, NULL)) < 0 ||
        SQL_CHECK(sqlite3_bind_int(st, 1, max)) < 0)
        goto out;
    while (n < max && (step = SQL_CHECK(sqlite3_step(st))) == SQLITE_ROW) {
        store_local_outbox_entry *e = &out[n++];
        memset(e, 0, sizeof *e);
        e->seq = sqlite3_column_int64(st, 0);
        e->kind = outbox_kind_of((const char *)sqlite3_column_text(st, 1));
        e->run_id = sqlite3_column_int64(st, 2);
        e->uuid = column_dup(st, 3);
        e->has_run = sqlite3_column_type(st, 4) != SQLITE_NULL;
        e->node = column_dup(st, 5);
        e->created = column_dup(st, 6);
        e->backend = column_dup(st, 7);
        e->device = column_dup(st, 8);
        e->status = column_dup(st, 9);
        e->record = column_dup(st, 10);
        e->version = sqlite3_column_int(st, 11);
        e->trace = column_dup(st, 12);
        e->median_us = sqlite3_column_type(st, 13) == SQLITE_NULL ? -1.0 : sqlite3_column_double(st, 13);
    }
    if (n == max) step = SQLITE_DONE;
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    if (step != SQLITE_DONE) {
        store_local_outbox_entries_free(out, n);
        return -1;
    }
    return n;
}

void store_local_outbox_entries_free(store_local_outbox_entry *e, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        free(e[i].uuid);
        free(e[i].node);
        free(e[i].created);
        free(e[i].backend);
        free(e[i].device);
        free(e[i].status);
        free(e[i].record);
        free(e[i].trace);
        memset(&e[i], 0, sizeof e[i]);
    }
}

int store_local_outbox_drop_through(long long seq)
{
    sqlite3_stmt *st = NULL;
    int rc = -1;

    pthread_mutex_lock(&store_sqlite_mu);
    if (store_sqlite_db && SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, "DELETE FROM outbox WHERE seq <= ?1", -1, &st, NULL)) >= 0 &&
        SQL_CHECK(sqlite3_bind_int64(st, 1, seq)) >= 0 && SQL_CHECK(sqlite3_step(st)) == SQLITE_DONE)
        rc = 0;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

long long store_local_outbox_depth(void)
{
    sqlite3_stmt *st = NULL;
    long long n = -1;

    pthread_mutex_lock(&store_sqlite_mu);
    if (store_sqlite_db && SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, "SELECT COUNT(*) FROM outbox", -1, &st, NULL)) >= 0 &&
        SQL_CHECK(sqlite3_step(st)) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    return n;
}
