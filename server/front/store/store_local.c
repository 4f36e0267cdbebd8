/* store_local.c — this machine's history in its SQLite file (store_local.h): the runs,
 * traces, tensor ids, the instance's state and the heartbeat of GET /v1/nodes. The file itself
 * (open, schema, the connection and its lock) is store_sqlite.c's; the outbox's reads are
 * store_local_outbox.c's.
 *
 * `record` is the run object exactly as the API answers it; the other columns are copies of
 * its fields for filtering and paging, and median_us the run's median forward time, written
 * from the record's struct. Every public function holds store_sqlite_mu for its whole
 * bind/step/reset sequence and returns its documented failure value when a call fails.
 */
#include "server/front/store/store_local.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "common/clock.h"
#include "common/grow.h"
#include "common/log.h"
#include "server/front/store/store_query.h"
#include "server/front/store/store_sqlite.h"

static sqlite3_stmt *st_insert, *st_update, *st_delete, *st_get, *st_count;
static sqlite3_stmt *st_fill_id, *st_trace_put, *st_trace_get; /* history, traces */
static sqlite3_stmt *st_land;                                   /* a record that waited */

/* ------------------------------------------------------------------------ open/close -- */

static void store_finalize_all(void)
{
    sqlite3_stmt **all[] = {&st_insert, &st_update,    &st_delete,    &st_get, &st_count,
                            &st_fill_id, &st_trace_put, &st_trace_get, &st_land};
    size_t i;

    for (i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (*all[i]) SQL_CHECK(sqlite3_finalize(*all[i]));
        *all[i] = NULL;
    }
}

/* Set member key of obj to item (taken), in its place when it is there. */
static void store_set_member(cJSON *obj, const char *key, cJSON *item)
{
    if (cJSON_GetObjectItem(obj, key))
        cJSON_ReplaceItemInObject(obj, key, item);
    else
        cJSON_AddItemToObject(obj, key, item);
}

/* The record of an interrupted run, marked failed: malloc'd text, NULL when out of memory. */
static char *store_interrupted_record(long long id, const char *record, const char *finished)
{
    cJSON *rec = cJSON_Parse(record), *error;
    char *text, *copy;

    if (!rec || !cJSON_IsObject(rec)) { /* unreadable: keep what can be said */
        cJSON_Delete(rec);
        rec = cJSON_CreateObject();
        cJSON_AddNumberToObject(rec, "id", (double)id);
    }
    store_set_member(rec, "status", cJSON_CreateString("failed"));
    /* A live record carries "finished": null until its end, and null is not a time. */
    if (!cJSON_IsString(cJSON_GetObjectItem(rec, "finished")))
        store_set_member(rec, "finished", cJSON_CreateString(finished));
    cJSON_DeleteItemFromObject(rec, "error");
    error = cJSON_AddObjectToObject(rec, "error");
    cJSON_AddStringToObject(error, "code", "server_restarted");
    cJSON_AddStringToObject(error, "message", "server restarted before the job finished");
    text = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    copy = text ? strdup(text) : NULL;
    cJSON_free(text);
    return copy;
}

int store_local_open(const char *data_dir, int outbox, char *err, size_t err_len)
{
    int rc = -1;

    pthread_mutex_lock(&store_sqlite_mu);
    if (store_sqlite_open(data_dir, outbox, err, err_len) != 0) goto out;
    if (SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db,
                                     "INSERT INTO runs(created, backend, device, status, record, uuid, node, version,"
                                     " median_us, params) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1, ?8,"
                                     " json_extract(?5, '$.params'))",
                                     -1, &st_insert, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db,
                                     "UPDATE runs SET status = ?1, record = ?2, median_us = ?4, version = version + 1"
                                     " WHERE id = ?3",
                                     -1, &st_update, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, "DELETE FROM runs WHERE id = ?1 RETURNING uuid", -1, &st_delete,
                                     NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, "SELECT record, status FROM runs WHERE id = ?1", -1, &st_get,
                                     NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, "SELECT COUNT(*) FROM runs", -1, &st_count, NULL)) < 0 ||
        /* The serializer writes "id" first: a record inserted before its id was known starts
         * {"id":0, and gets the number in the insert's transaction (store_local_insert_run). */
        SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db,
                                     "UPDATE runs SET record = '{\"id\":' || id || ',' || substr(record, 9)"
                                     " WHERE id = ?1 AND substr(record, 1, 8) = '{\"id\":0,'",
                                     -1, &st_fill_id, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, "INSERT OR REPLACE INTO traces(run_id, json) VALUES (?1, ?2)", -1,
                                     &st_trace_put, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, "SELECT json FROM traces WHERE run_id = ?1", -1, &st_trace_get,
                                     NULL)) < 0 ||
        /* Landing a final record that waited (store_pending.h) moves only a run that is not
         * final yet: a record landed twice (read back after a crash) changes nothing. */
        SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db,
                                     "UPDATE runs SET status = ?1, record = ?2, median_us = ?4, version = version + 1"
                                     " WHERE id = ?3 AND status IN ('queued','running')",
                                     -1, &st_land, NULL)) < 0) {
        snprintf(err, err_len, "%s: %s", store_sqlite_path(), store_sqlite_last_error());
        store_finalize_all();
        store_sqlite_close();
        goto out;
    }
    log_info("store: %s open", store_sqlite_path());
    rc = 0;
out:
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

void store_local_close(void)
{
    pthread_mutex_lock(&store_sqlite_mu);
    if (store_sqlite_db) {
        store_finalize_all();
        store_sqlite_close();
    }
    pthread_mutex_unlock(&store_sqlite_mu);
}

int store_local_mark_interrupted(int (*spare)(long long id))
{
    sqlite3_stmt *sel = NULL;
    long long *ids = NULL;
    char **records = NULL;
    size_t n = 0, cap = 0, id_cap = 0, i;
    char finished[40];
    int rc = -1;

    pthread_mutex_lock(&store_sqlite_mu);
    if (!store_sqlite_db || SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db,
                                                         "SELECT id, record FROM runs WHERE status IN ('queued','running')",
                                                         -1, &sel, NULL)) < 0) {
        pthread_mutex_unlock(&store_sqlite_mu);
        return -1;
    }
    for (;;) {
        int step = SQL_CHECK(sqlite3_step(sel));
        const unsigned char *text;
        if (step < 0) goto done;
        if (step == SQLITE_DONE) break;
        if (spare && spare(sqlite3_column_int64(sel, 0))) continue; /* its final record waits elsewhere */
        if (grow_array(&ids, &id_cap, n + 1, sizeof *ids, 16) != 0 ||
            grow_array(&records, &cap, n + 1, sizeof *records, 16) != 0)
            goto done;
        ids[n] = sqlite3_column_int64(sel, 0);
        text = sqlite3_column_text(sel, 1);
        records[n] = strdup(text ? (const char *)text : "{}");
        if (!records[n]) goto done;
        n++;
    }

    clock_text_now_iso(finished, sizeof finished);
    for (i = 0; i < n; i++) {
        char *text = store_interrupted_record(ids[i], records[i], finished);
        int ok;
        if (!text) goto done;
        ok = store_sqlite_begin() == 0 && store_sqlite_bind_text(st_update, 1, "failed") >= 0 &&
             store_sqlite_bind_text(st_update, 2, text) >= 0 && SQL_CHECK(sqlite3_bind_int64(st_update, 3, ids[i])) >= 0 &&
             SQL_CHECK(sqlite3_step(st_update)) == SQLITE_DONE &&
             store_sqlite_outbox_append("run", ids[i], NULL) == 0 && store_sqlite_commit() == 0;
        free(text);
        store_sqlite_reset(st_update);
        if (!ok) {
            store_sqlite_rollback();
            goto done;
        }
    }
    if (n) log_warn("store: %zu run(s) left queued/running by an earlier process marked failed", n);
    rc = 0;

done:
    SQL_CHECK(sqlite3_finalize(sel));
    pthread_mutex_unlock(&store_sqlite_mu);
    for (i = 0; i < n; i++) free(records[i]);
    free(records);
    free(ids);
    return rc;
}

/* ------------------------------------------------------------------------------ rows -- */

/* Bind a median (< 0: none) as a REAL or NULL. */
static int store_bind_median(sqlite3_stmt *st, int index, double median_us)
{
    return median_us >= 0 ? SQL_CHECK(sqlite3_bind_double(st, index, median_us)) : SQL_CHECK(sqlite3_bind_null(st, index));
}

long long store_local_insert_run(const char *created, const char *backend, const char *device, const char *status,
                                 double median_us, const char *record_json, const char *uuid, const char *node)
{
    long long id = -1;

    pthread_mutex_lock(&store_sqlite_mu);
    if (!store_sqlite_db || store_sqlite_begin() != 0) goto out;
    if (store_sqlite_bind_text(st_insert, 1, created ? created : "") < 0 || store_sqlite_bind_text(st_insert, 2, backend) < 0 ||
        store_sqlite_bind_text(st_insert, 3, device) < 0 || store_sqlite_bind_text(st_insert, 4, status) < 0 ||
        store_sqlite_bind_text(st_insert, 5, record_json ? record_json : "{}") < 0 || store_sqlite_bind_text(st_insert, 6, uuid) < 0 ||
        store_sqlite_bind_text(st_insert, 7, node) < 0 || store_bind_median(st_insert, 8, median_us) < 0 ||
        SQL_CHECK(sqlite3_step(st_insert)) != SQLITE_DONE)
        goto fail;
    id = (long long)sqlite3_last_insert_rowid(store_sqlite_db);
    /* A record that starts {"id":0, gets its id in the same transaction, so no reader (a
     * poller of GET /v1/runs) ever sees a run without its id. */
    if (SQL_CHECK(sqlite3_bind_int64(st_fill_id, 1, id)) < 0 || SQL_CHECK(sqlite3_step(st_fill_id)) != SQLITE_DONE)
        goto fail;
    if (store_sqlite_outbox_append("run", id, uuid) != 0) goto fail;
    if (store_sqlite_commit() != 0) goto fail;
    goto reset;
fail:
    store_sqlite_rollback();
    id = -1;
reset:
    store_sqlite_reset(st_fill_id);
    store_sqlite_reset(st_insert);
out:
    pthread_mutex_unlock(&store_sqlite_mu);
    return id;
}

/* Run st, an UPDATE of (status, record, id, median): 0 when it ran, -1 when it failed.
 * Under store_sqlite_mu, in a transaction. */
static int store_local_step_update(sqlite3_stmt *st, long long id, const char *status, double median_us,
                                   const char *record_json)
{
    if (store_sqlite_bind_text(st, 1, status) < 0 || store_sqlite_bind_text(st, 2, record_json ? record_json : "{}") < 0 ||
        SQL_CHECK(sqlite3_bind_int64(st, 3, id)) < 0 || store_bind_median(st, 4, median_us) < 0 ||
        SQL_CHECK(sqlite3_step(st)) != SQLITE_DONE)
        return -1;
    return 0;
}

int store_local_update_run(long long id, const char *status, double median_us, const char *record_json)
{
    int rc = -1;

    pthread_mutex_lock(&store_sqlite_mu);
    if (!store_sqlite_db || store_sqlite_begin() != 0) goto out;
    if (store_local_step_update(st_update, id, status, median_us, record_json) != 0) {
        store_sqlite_rollback();
    } else if (sqlite3_changes(store_sqlite_db) != 1) { /* no such run: nothing to write */
        store_sqlite_rollback();
        rc = 1;
    } else if (store_sqlite_outbox_append("run", id, NULL) != 0 || store_sqlite_commit() != 0) {
        store_sqlite_rollback();
    } else {
        rc = 0;
    }
    store_sqlite_reset(st_update);
out:
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

int store_local_land_final(long long id, const char *status, double median_us, const char *record_json)
{
    int rc = -1;

    pthread_mutex_lock(&store_sqlite_mu);
    if (!store_sqlite_db || store_sqlite_begin() != 0) goto out;
    if (store_local_step_update(st_land, id, status, median_us, record_json) != 0 ||
        (sqlite3_changes(store_sqlite_db) == 1 && store_sqlite_outbox_append("run", id, NULL) != 0) ||
        store_sqlite_commit() != 0)
        store_sqlite_rollback();
    else
        rc = 0;
    store_sqlite_reset(st_land);
out:
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

int store_local_delete_run(long long id)
{
    char uuid[64] = "";
    int rc = -1, step;

    pthread_mutex_lock(&store_sqlite_mu);
    if (!store_sqlite_db || store_sqlite_begin() != 0) goto out;
    if (SQL_CHECK(sqlite3_bind_int64(st_delete, 1, id)) < 0) goto fail;
    step = SQL_CHECK(sqlite3_step(st_delete));
    if (step == SQLITE_DONE) rc = 1; /* no such run */
    if (step != SQLITE_ROW) goto fail;
    if (sqlite3_column_text(st_delete, 0))
        snprintf(uuid, sizeof uuid, "%s", (const char *)sqlite3_column_text(st_delete, 0));
    while (step == SQLITE_ROW) step = SQL_CHECK(sqlite3_step(st_delete));
    if (step != SQLITE_DONE) goto fail;
    sqlite3_reset(st_delete);
    if (uuid[0] && store_sqlite_outbox_append("delete", id, uuid) != 0) goto fail;
    if (store_sqlite_commit() != 0) goto fail;
    rc = 0;
    goto reset;
fail:
    store_sqlite_rollback();
reset:
    store_sqlite_reset(st_delete);
out:
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

/* The first column of st's first row as malloc'd text, with st bound to id; NULL if none. */
static char *store_text_by_id(sqlite3_stmt *st, long long id)
{
    char *text = NULL;

    pthread_mutex_lock(&store_sqlite_mu);
    if (store_sqlite_db && SQL_CHECK(sqlite3_bind_int64(st, 1, id)) >= 0 && SQL_CHECK(sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        if (t) text = strdup((const char *)t);
    }
    if (store_sqlite_db) store_sqlite_reset(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    return text;
}

char *store_local_get_run(long long id) { return store_text_by_id(st_get, id); }

int store_local_get_run_status(long long id, char *out, size_t len)
{
    int rc = -1, step;

    pthread_mutex_lock(&store_sqlite_mu);
    if (store_sqlite_db && SQL_CHECK(sqlite3_bind_int64(st_get, 1, id)) >= 0) {
        step = SQL_CHECK(sqlite3_step(st_get));
        rc = step == SQLITE_ROW ? 1 : step == SQLITE_DONE ? 0 : -1;
        if (rc == 1) snprintf(out, len, "%s", sqlite3_column_text(st_get, 1) ? (const char *)sqlite3_column_text(st_get, 1) : "");
    }
    if (store_sqlite_db) store_sqlite_reset(st_get);
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

long long store_local_count_runs(void)
{
    long long n = -1;

    pthread_mutex_lock(&store_sqlite_mu);
    if (!store_sqlite_db) goto out;
    if (SQL_CHECK(sqlite3_step(st_count)) == SQLITE_ROW) n = sqlite3_column_int64(st_count, 0);
    sqlite3_reset(st_count);
out:
    pthread_mutex_unlock(&store_sqlite_mu);
    return n;
}

/* Prepare sql's text and bind its parameters (integers as integers: a text bound against an
 * INTEGER column would compare by affinity, but the planner only matches the index on an
 * integer). The statement, or NULL (logged). Under store_sqlite_mu. */
static sqlite3_stmt *store_prepare_query(const store_sql *sql)
{
    sqlite3_stmt *st = NULL;
    int i;

    if (SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, sql->text, -1, &st, NULL)) < 0) return NULL;
    for (i = 0; i < sql->n; i++) {
        int rc = sql->integer[i] ? SQL_CHECK(sqlite3_bind_int64(st, i + 1, strtoll(sql->value[i], NULL, 10)))
                                 : store_sqlite_bind_text(st, i + 1, sql->value[i]);
        if (rc < 0) {
            SQL_CHECK(sqlite3_finalize(st));
            return NULL;
        }
    }
    return st;
}

char *store_local_query_runs(const store_run_query *q, long long *first, long long *last)
{
    char *out = NULL;
    size_t len = 0, cap = 4096;
    sqlite3_stmt *st = NULL;
    store_sql sql;
    int step;

    if (first) *first = 0;
    if (last) *last = q->newest_first ? q->before : q->after;
    if (store_sql_list(q, STORE_SQL_SQLITE, &sql) != 0) {
        log_error("store: the history query does not fit its statement");
        return NULL;
    }
    pthread_mutex_lock(&store_sqlite_mu);
    if (!store_sqlite_db || !(st = store_prepare_query(&sql))) goto out;
    out = malloc(cap);
    if (!out) goto done;
    out[len++] = '[';
    while ((step = SQL_CHECK(sqlite3_step(st))) == SQLITE_ROW) {
        const unsigned char *text = sqlite3_column_text(st, 0);
        size_t n = text ? strlen((const char *)text) : 0;
        if (last) *last = sqlite3_column_int64(st, 1);
        if (first && !*first) *first = sqlite3_column_int64(st, 1);
        if (!n) continue;
        if (grow_array(&out, &cap, len + n + 3, 1, 4096) != 0) goto fail; /* separator, closing bracket, NUL */
        if (len > 1) out[len++] = ',';
        memcpy(out + len, text, n);
        len += n;
    }
    if (step != SQLITE_DONE) goto fail;
    out[len++] = ']';
    out[len] = '\0';
    goto done;
fail:
    free(out);
    out = NULL;
done:
    SQL_CHECK(sqlite3_finalize(st));
out:
    pthread_mutex_unlock(&store_sqlite_mu);
    return out;
}

/* Column c of st as JSON: an integer, a number, a string, or null. */
static cJSON *store_column_json(sqlite3_stmt *st, int c)
{
    switch (sqlite3_column_type(st, c)) {
    case SQLITE_INTEGER: return cJSON_CreateNumber((double)sqlite3_column_int64(st, c));
    case SQLITE_FLOAT: return cJSON_CreateNumber(sqlite3_column_double(st, c));
    case SQLITE_NULL: return cJSON_CreateNull();
    default: return cJSON_CreateString((const char *)sqlite3_column_text(st, c));
    }
}

/* Column c of st, the group value of field f: a boolean field's 0 and 1 as false and true. */
static cJSON *store_group_json(sqlite3_stmt *st, int c, store_field f)
{
    if (store_fields[f].boolean && sqlite3_column_type(st, c) == SQLITE_INTEGER)
        return cJSON_CreateBool(sqlite3_column_int64(st, c) != 0);
    return store_column_json(st, c);
}

char *store_local_group_runs(const store_run_query *q, int *more)
{
    static const char *const stats[] = {"count", "median_us", "min_us", "max_us"};
    sqlite3_stmt *st = NULL;
    cJSON *all = NULL;
    char *text = NULL, *copy = NULL;
    store_sql sql;
    int step = -1, rows = 0, i;

    *more = 0;
    if (store_sql_groups(q, STORE_SQL_SQLITE, &sql) != 0) {
        log_error("store: the history aggregate does not fit its statement");
        return NULL;
    }
    pthread_mutex_lock(&store_sqlite_mu);
    if (store_sqlite_db && (all = cJSON_CreateArray()) && (st = store_prepare_query(&sql))) {
        while ((step = SQL_CHECK(sqlite3_step(st))) == SQLITE_ROW) {
            cJSON *group;
            if (++rows > q->limit) { /* the one row past the limit: there are more */
                *more = 1;
                continue;
            }
            group = cJSON_CreateObject();
            cJSON_AddItemToArray(all, group);
            for (i = 0; i < q->n_group_by; i++)
                cJSON_AddItemToObject(group, store_fields[q->group_by[i]].name, store_group_json(st, i, q->group_by[i]));
            for (i = 0; i < 4; i++) cJSON_AddItemToObject(group, stats[i], store_column_json(st, q->n_group_by + i));
        }
    }
    SQL_CHECK(sqlite3_finalize(st));
    pthread_mutex_unlock(&store_sqlite_mu);
    if (step == SQLITE_DONE) text = cJSON_PrintUnformatted(all);
    cJSON_Delete(all);
    if (text) copy = strdup(text);
    cJSON_free(text);
    return copy;
}

int store_local_node_known(const char *node)
{
    const char *texts[1] = {node};
    sqlite3_stmt *st;
    int rc;

    pthread_mutex_lock(&store_sqlite_mu);
    rc = store_sqlite_run_once(&st, "SELECT EXISTS (SELECT 1 FROM runs WHERE node = ?1)"
                                    " OR EXISTS (SELECT 1 FROM nodes WHERE node = ?1)", texts, 1, NULL, 0);
    rc = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) != 0 : -1;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

/* ------------------------------------------------------------------------ traces -- */

int store_local_put_trace(long long run_id, const char *json)
{
    int rc = -1;

    pthread_mutex_lock(&store_sqlite_mu);
    if (!store_sqlite_db || !json || store_sqlite_begin() != 0) goto out;
    if (SQL_CHECK(sqlite3_bind_int64(st_trace_put, 1, run_id)) < 0 || store_sqlite_bind_text(st_trace_put, 2, json) < 0 ||
        SQL_CHECK(sqlite3_step(st_trace_put)) != SQLITE_DONE ||
        store_sqlite_outbox_append("trace", run_id, NULL) != 0 || store_sqlite_commit() != 0)
        store_sqlite_rollback();
    else
        rc = 0;
    store_sqlite_reset(st_trace_put);
out:
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

char *store_local_get_trace(long long run_id) { return store_text_by_id(st_trace_get, run_id); }

/* ---------------------------------------------------------------- one-off statements -- */

/* ------------------------------------------------------------------------ tensor ids -- */

/* Resident tensors live in worker memory and die with the process; their ids are issued
 * here so that they stay unique across restarts and an id of an earlier process answers
 * 410 rather than 404 or, worse, naming a new tensor. */

long long store_local_tensor_issue(const char *device)
{
    sqlite3_stmt *st;
    char created[32];
    const char *texts[2] = {device, created};
    long long id = -1;

    clock_text_now_iso(created, sizeof created);
    pthread_mutex_lock(&store_sqlite_mu);
    if (store_sqlite_run_once(&st, "INSERT INTO tensor_ids(device, created) VALUES (?1, ?2)", texts, 2, NULL, 0) == SQLITE_DONE)
        id = (long long)sqlite3_last_insert_rowid(store_sqlite_db);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    return id;
}

int store_local_tensor_known(long long id)
{
    sqlite3_stmt *st;
    int rc, step;

    pthread_mutex_lock(&store_sqlite_mu);
    step = store_sqlite_run_once(&st, "SELECT 1 FROM tensor_ids WHERE id = ?1", NULL, 0, &id, 1);
    rc = step < 0 ? -1 : step == SQLITE_ROW;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

int store_local_tensor_forget(long long id)
{
    sqlite3_stmt *st;
    int rc;

    pthread_mutex_lock(&store_sqlite_mu);
    rc = store_sqlite_run_once(&st, "DELETE FROM tensor_ids WHERE id = ?1", NULL, 0, &id, 1) == SQLITE_DONE ? 0 : -1;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

/* ------------------------------------------------------------------ instance facts -- */

int store_local_set_id_base(long long base)
{
    static const char *const tables[] = {"runs", "tensor_ids", "studies"};
    sqlite3_stmt *st;
    int rc = 0;
    size_t i;

    /* AUTOINCREMENT takes max(sqlite_sequence.seq, largest id) + 1: raising seq is enough. */
    pthread_mutex_lock(&store_sqlite_mu);
    for (i = 0; i < sizeof tables / sizeof tables[0] && rc == 0; i++) {
        const char *name[1] = {tables[i]};
        long long both[1] = {base};
        if (store_sqlite_run_once(&st, "UPDATE sqlite_sequence SET seq = ?2 WHERE name = ?1 AND seq < ?2", name, 1, both, 1) !=
            SQLITE_DONE)
            rc = -1;
        sqlite3_finalize(st);
        if (rc == 0 && store_sqlite_run_once(&st,
                                      "INSERT INTO sqlite_sequence(name, seq) SELECT ?1, ?2"
                                      " WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = ?1)",
                                      name, 1, both, 1) != SQLITE_DONE)
            rc = -1;
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

int store_local_state_get(const char *key, char *value, size_t len)
{
    sqlite3_stmt *st;
    int rc, step;

    pthread_mutex_lock(&store_sqlite_mu);
    step = store_sqlite_run_once(&st, "SELECT value FROM node_state WHERE key = ?1", &key, 1, NULL, 0);
    rc = step < 0 ? -1 : step == SQLITE_ROW;
    if (rc == 1) snprintf(value, len, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

int store_local_state_set(const char *key, const char *value)
{
    const char *texts[2] = {key, value};
    sqlite3_stmt *st;
    int rc;

    pthread_mutex_lock(&store_sqlite_mu);
    rc = store_sqlite_run_once(&st, "INSERT OR REPLACE INTO node_state(key, value) VALUES (?1, ?2)", texts, 2, NULL, 0) ==
                 SQLITE_DONE
             ? 0
             : -1;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

/* ------------------------------------------------------------------------ heartbeat -- */

int store_local_heartbeat(long long instance, const char *node, const char *version, const char *devices_json,
                    const char *started)
{
    sqlite3_stmt *st = NULL;
    char now[40];
    int rc = -1;

    clock_text_now_iso(now, sizeof now);
    pthread_mutex_lock(&store_sqlite_mu);
    if (store_sqlite_db &&
        SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db,
                                     "INSERT OR REPLACE INTO nodes(instance, node, version, devices, started,"
                                     " last_heartbeat) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                                     -1, &st, NULL)) >= 0 &&
        SQL_CHECK(sqlite3_bind_int64(st, 1, instance)) >= 0 && store_sqlite_bind_text(st, 2, node) >= 0 &&
        store_sqlite_bind_text(st, 3, version) >= 0 && store_sqlite_bind_text(st, 4, devices_json) >= 0 &&
        store_sqlite_bind_text(st, 5, started) >= 0 && store_sqlite_bind_text(st, 6, now) >= 0 &&
        SQL_CHECK(sqlite3_step(st)) == SQLITE_DONE)
        rc = 0;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

char *store_local_nodes_json(void)
{
    sqlite3_stmt *st = NULL;
    cJSON *all = cJSON_CreateArray();
    char *text = NULL, *copy = NULL;
    int step = -1;

    pthread_mutex_lock(&store_sqlite_mu);
    if (store_sqlite_db && all &&
        SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db,
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
    pthread_mutex_unlock(&store_sqlite_mu);
    if (step == SQLITE_DONE) text = cJSON_PrintUnformatted(all);
    cJSON_Delete(all);
    if (text) copy = strdup(text);
    cJSON_free(text);
    return copy;
}
