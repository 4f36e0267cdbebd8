/* store_local_outbox.c — the outbox and the heartbeat in this machine's SQLite database
 * (store_local.h). An outbox row says only which run (or trace) changed; the row's current
 * state is read when it is sent, so a run written several times while the fleet database
 * was away travels once, in its last state. */
#include "server/front/store/store_local.h"
#include "server/front/store/store_local_db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/clock.h"

int store_outbox_append(const char *kind, long long run_id, const char *uuid)
{
    sqlite3_stmt *st = NULL;
    int rc = -1;

    if (SQL_CHECK(sqlite3_prepare_v2(store_db, "INSERT INTO outbox(kind, run_id, uuid) VALUES (?1, ?2, ?3)", -1, &st,
                                     NULL)) >= 0 &&
        store_bind_text(st, 1, kind) >= 0 && SQL_CHECK(sqlite3_bind_int64(st, 2, run_id)) >= 0 &&
        store_bind_text(st, 3, uuid) >= 0 && SQL_CHECK(sqlite3_step(st)) == SQLITE_DONE)
        rc = 0;
    sqlite3_finalize(st);
    return rc;
}

/* A column's text, malloc'd; NULL for SQL NULL (or out of memory). */
static char *column_dup(sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    return t ? strdup((const char *)t) : NULL;
}

static local_outbox_kind outbox_kind_of(const char *kind)
{
    if (kind && !strcmp(kind, "delete")) return OUTBOX_DELETE;
    if (kind && !strcmp(kind, "trace")) return OUTBOX_TRACE;
    return OUTBOX_RUN;
}

int local_outbox_peek(local_outbox_entry *out, int max)
{
    static const char *const sql =
        "SELECT o.seq, o.kind, o.run_id, coalesce(o.uuid, r.uuid), r.id, r.node, r.created, r.backend, r.device,"
        " r.status, r.record, r.version, t.json"
        " FROM outbox o LEFT JOIN runs r ON r.id = o.run_id"
        " LEFT JOIN traces t ON o.kind = 'trace' AND t.run_id = o.run_id"
        " ORDER BY o.seq LIMIT ?1";
    sqlite3_stmt *st = NULL;
    int n = 0, step = -1;

    pthread_mutex_lock(&store_mu);
    if (!store_db || SQL_CHECK(sqlite3_prepare_v2(store_db, sql, -1, &st, NULL)) < 0 ||
        SQL_CHECK(sqlite3_bind_int(st, 1, max)) < 0)
        goto out;
    while (n < max && (step = SQL_CHECK(sqlite3_step(st))) == SQLITE_ROW) {
        local_outbox_entry *e = &out[n++];
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
    }
    if (n == max) step = SQLITE_DONE;
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_mu);
    if (step != SQLITE_DONE) {
        local_outbox_entries_free(out, n);
        return -1;
    }
    return n;
}

void local_outbox_entries_free(local_outbox_entry *e, int n)
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

int local_outbox_drop_through(long long seq)
{
    sqlite3_stmt *st = NULL;
    int rc = -1;

    pthread_mutex_lock(&store_mu);
    if (store_db && SQL_CHECK(sqlite3_prepare_v2(store_db, "DELETE FROM outbox WHERE seq <= ?1", -1, &st, NULL)) >= 0 &&
        SQL_CHECK(sqlite3_bind_int64(st, 1, seq)) >= 0 && SQL_CHECK(sqlite3_step(st)) == SQLITE_DONE)
        rc = 0;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_mu);
    return rc;
}

long long local_outbox_depth(void)
{
    sqlite3_stmt *st = NULL;
    long long n = -1;

    pthread_mutex_lock(&store_mu);
    if (store_db && SQL_CHECK(sqlite3_prepare_v2(store_db, "SELECT COUNT(*) FROM outbox", -1, &st, NULL)) >= 0 &&
        SQL_CHECK(sqlite3_step(st)) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_mu);
    return n;
}

/* ------------------------------------------------------------------------ heartbeat -- */

int local_heartbeat(long long instance, const char *node, const char *version, const char *devices_json,
                    const char *started)
{
    sqlite3_stmt *st = NULL;
    char now[40];
    int rc = -1;

    clock_text_now_iso(now, sizeof now);
    pthread_mutex_lock(&store_mu);
    if (store_db &&
        SQL_CHECK(sqlite3_prepare_v2(store_db,
                                     "INSERT OR REPLACE INTO nodes(instance, node, version, devices, started,"
                                     " last_heartbeat) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                                     -1, &st, NULL)) >= 0 &&
        SQL_CHECK(sqlite3_bind_int64(st, 1, instance)) >= 0 && store_bind_text(st, 2, node) >= 0 &&
        store_bind_text(st, 3, version) >= 0 && store_bind_text(st, 4, devices_json) >= 0 &&
        store_bind_text(st, 5, started) >= 0 && store_bind_text(st, 6, now) >= 0 &&
        SQL_CHECK(sqlite3_step(st)) == SQLITE_DONE)
        rc = 0;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_mu);
    return rc;
}

char *local_nodes_json(void)
{
    sqlite3_stmt *st = NULL;
    cJSON *all = cJSON_CreateArray();
    char *text = NULL, *copy = NULL;
    int step = -1;

    pthread_mutex_lock(&store_mu);
    if (store_db && all &&
        SQL_CHECK(sqlite3_prepare_v2(store_db,
                                     "SELECT node, instance, version, devices, started, last_heartbeat,"
                                     " (julianday('now') - julianday(last_heartbeat)) * 86400.0"
                                     " FROM nodes ORDER BY node, instance",
                                     -1, &st, NULL)) >= 0) {
        while ((step = SQL_CHECK(sqlite3_step(st))) == SQLITE_ROW) {
            cJSON *o = cJSON_CreateObject(), *devices;
            const char *dev = (const char *)sqlite3_column_text(st, 3);
            cJSON_AddStringToObject(o, "node", (const char *)sqlite3_column_text(st, 0));
            cJSON_AddNumberToObject(o, "instance", (double)sqlite3_column_int64(st, 1));
            cJSON_AddStringToObject(o, "version", sqlite3_column_text(st, 2) ? (const char *)sqlite3_column_text(st, 2) : "");
            devices = dev ? cJSON_Parse(dev) : NULL;
            cJSON_AddItemToObject(o, "devices", devices ? devices : cJSON_CreateNull());
            cJSON_AddStringToObject(o, "started", sqlite3_column_text(st, 4) ? (const char *)sqlite3_column_text(st, 4) : "");
            cJSON_AddStringToObject(o, "last_heartbeat", (const char *)sqlite3_column_text(st, 5));
            cJSON_AddNumberToObject(o, "heartbeat_age_s", sqlite3_column_double(st, 6));
            cJSON_AddItemToArray(all, o);
        }
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_mu);
    if (step == SQLITE_DONE) text = cJSON_PrintUnformatted(all);
    cJSON_Delete(all);
    if (text) copy = strdup(text);
    cJSON_free(text);
    return copy;
}
