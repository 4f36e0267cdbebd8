/* store.c — every run in one SQLite table (store.h).
 *
 * One connection opened in serialized mode (SQLITE_OPEN_FULLMUTEX), WAL journal so readers
 * never wait on the writer. The prepared statements are shared, and a bind/step/reset
 * sequence on one statement is not atomic even in serialized mode, so every public function
 * also holds store_mu for its whole sequence. `record` is the run object exactly as the API
 * answers it; the other columns are copies of its fields for filtering and paging.
 *
 * Every sqlite3 call goes through SQL_CHECK, which logs the call, file, line and
 * sqlite3_errmsg; functions then return their documented failure value.
 */
#include "front/store.h"

#include "common/clock.h"
#include "common/grow.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "common/log.h"

static pthread_mutex_t store_mu = PTHREAD_MUTEX_INITIALIZER;
static sqlite3 *store_db;
static sqlite3_stmt *st_insert, *st_update, *st_delete, *st_get, *st_count, *st_list;
static sqlite3_stmt *st_fill_id, *st_trace_put, *st_trace_get; /* history, traces */

/* The text of the last failure, for store_open's err. Written under store_mu. */
static char store_last_error[512];

/* Returns rc when it is SQLITE_OK, SQLITE_ROW or SQLITE_DONE; else logs and returns -1. */
static int store_check(int rc, const char *call, const char *file, int line)
{
    if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return rc;
    snprintf(store_last_error, sizeof store_last_error, "sqlite: %s failed at %s:%d: %s (%d)", call,
             file, line, store_db ? sqlite3_errmsg(store_db) : sqlite3_errstr(rc), rc);
    log_error("%s", store_last_error);
    return -1;
}

#define SQL_CHECK(call) store_check((call), #call, __FILE__, __LINE__)

/* ------------------------------------------------------------------------ open/close -- */

static const char *const store_schema =
    "CREATE TABLE IF NOT EXISTS runs ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " created TEXT NOT NULL,"
    " backend TEXT,"
    " device TEXT,"
    " status TEXT,"
    " record TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS runs_backend_id ON runs(backend, id);"
    "CREATE INDEX IF NOT EXISTS runs_status_id ON runs(status, id);"
    "CREATE INDEX IF NOT EXISTS runs_device_id ON runs(device, id);"
    "CREATE TABLE IF NOT EXISTS traces (run_id INTEGER PRIMARY KEY, json TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS tensor_ids ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, device TEXT NOT NULL, created TEXT NOT NULL);";

static void store_finalize_all(void)
{
    sqlite3_stmt **all[] = {&st_insert,  &st_update,    &st_delete,   &st_get,      &st_count,
                            &st_list,    &st_fill_id,   &st_trace_put, &st_trace_get};
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

/* Rows that an earlier process left queued or running can never finish: their worker died
 * with it. Mark them failed, editing the stored record so GET answers the same. */
static int store_mark_interrupted(void)
{
    sqlite3_stmt *sel = NULL;
    long long *ids = NULL;
    char **records = NULL;
    size_t n = 0, cap = 0, id_cap = 0, i;
    char finished[40];
    int rc = -1;

    if (SQL_CHECK(sqlite3_prepare_v2(store_db,
                                     "SELECT id, record FROM runs WHERE status IN ('queued','running')",
                                     -1, &sel, NULL)) < 0)
        return -1;
    for (;;) {
        int step = SQL_CHECK(sqlite3_step(sel));
        const unsigned char *text;
        if (step < 0) goto done;
        if (step == SQLITE_DONE) break;
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
        cJSON *rec = cJSON_Parse(records[i]);
        cJSON *error;
        char *text;

        if (!rec || !cJSON_IsObject(rec)) { /* unreadable: keep what can be said */
            cJSON_Delete(rec);
            rec = cJSON_CreateObject();
            cJSON_AddNumberToObject(rec, "id", (double)ids[i]);
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
        if (!text) goto done;
        if (SQL_CHECK(sqlite3_bind_text(st_update, 1, "failed", -1, SQLITE_STATIC)) < 0 ||
            SQL_CHECK(sqlite3_bind_text(st_update, 2, text, -1, SQLITE_TRANSIENT)) < 0 ||
            SQL_CHECK(sqlite3_bind_int64(st_update, 3, ids[i])) < 0 ||
            SQL_CHECK(sqlite3_step(st_update)) < 0) {
            cJSON_free(text);
            sqlite3_reset(st_update);
            goto done;
        }
        cJSON_free(text);
        SQL_CHECK(sqlite3_reset(st_update));
        SQL_CHECK(sqlite3_clear_bindings(st_update));
    }
    if (n) log_warn("store: %zu run(s) left queued/running by an earlier process marked failed", n);
    rc = 0;

done:
    SQL_CHECK(sqlite3_finalize(sel));
    for (i = 0; i < n; i++) free(records[i]);
    free(records);
    free(ids);
    return rc;
}

int store_open(const char *data_dir, char *err, size_t err_len)
{
    char path[1024];
    int rc = -1;

    pthread_mutex_lock(&store_mu);
    if (store_db) {
        snprintf(err, err_len, "store already open");
        goto out;
    }
    store_last_error[0] = '\0';
    if (mkdir(data_dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, err_len, "cannot create data_dir %s: %s", data_dir, strerror(errno));
        goto out;
    }
    if ((size_t)snprintf(path, sizeof path, "%s/attnd.db", data_dir) >= sizeof path) {
        snprintf(err, err_len, "data_dir path too long: %s", data_dir);
        goto out;
    }
    if (SQL_CHECK(sqlite3_open_v2(path, &store_db, SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_CREATE | SQLITE_OPEN_READWRITE,
                                  NULL)) < 0)
        goto fail;
    if (SQL_CHECK(sqlite3_busy_timeout(store_db, 5000)) < 0 ||
        SQL_CHECK(sqlite3_exec(store_db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL)) < 0 ||
        SQL_CHECK(sqlite3_exec(store_db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL)) < 0 ||
        SQL_CHECK(sqlite3_exec(store_db, store_schema, NULL, NULL, NULL)) < 0)
        goto fail;
    if (SQL_CHECK(sqlite3_prepare_v2(store_db,
                                     "INSERT INTO runs(created, backend, device, status, record) "
                                     "VALUES (?1, ?2, ?3, ?4, ?5)",
                                     -1, &st_insert, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_db, "UPDATE runs SET status = ?1, record = ?2 WHERE id = ?3", -1,
                                     &st_update, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_db, "DELETE FROM runs WHERE id = ?1", -1, &st_delete, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_db, "SELECT record FROM runs WHERE id = ?1", -1, &st_get, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_db, "SELECT COUNT(*) FROM runs", -1, &st_count, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_db,
                                     "SELECT record, id FROM runs WHERE id > ?1"
                                     " AND (?2 IS NULL OR backend = ?2) AND (?3 IS NULL OR status = ?3)"
                                     " AND (?5 IS NULL OR device = ?5) AND (?6 IS NULL OR created >= ?6)"
                                     " ORDER BY id LIMIT ?4",
                                     -1, &st_list, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_db,
                                     "UPDATE runs SET record = '{\"id\":' || id || ',' || substr(record, 9)"
                                     " WHERE id = ?1 AND substr(record, 1, 8) = '{\"id\":0,'",
                                     -1, &st_fill_id, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_db, "INSERT OR REPLACE INTO traces(run_id, json) VALUES (?1, ?2)", -1,
                                     &st_trace_put, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_db, "SELECT json FROM traces WHERE run_id = ?1", -1, &st_trace_get,
                                     NULL)) < 0)
        goto fail;
    if (store_mark_interrupted() < 0) goto fail;
    log_info("store: %s open", path);
    rc = 0;
    goto out;

fail:
    snprintf(err, err_len, "%s: %s", path, store_last_error[0] ? store_last_error : "cannot open");
    store_finalize_all();
    if (store_db) SQL_CHECK(sqlite3_close(store_db));
    store_db = NULL;
out:
    pthread_mutex_unlock(&store_mu);
    return rc;
}

void store_close(void)
{
    pthread_mutex_lock(&store_mu);
    if (store_db) {
        store_finalize_all();
        SQL_CHECK(sqlite3_close(store_db));
        store_db = NULL;
    }
    pthread_mutex_unlock(&store_mu);
}

/* ------------------------------------------------------------------------------ rows -- */

/* Bind a possibly-NULL string. */
static int store_bind_text(sqlite3_stmt *st, int index, const char *text)
{
    if (!text) return SQL_CHECK(sqlite3_bind_null(st, index));
    return SQL_CHECK(sqlite3_bind_text(st, index, text, -1, SQLITE_TRANSIENT));
}

/* Reset a shared statement for its next user (its result codes were reported by step). */
static void store_reset(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    SQL_CHECK(sqlite3_clear_bindings(st));
}

long long store_insert_run(const char *created, const char *backend, const char *device, const char *status,
                           const char *record_json)
{
    long long id = -1;

    pthread_mutex_lock(&store_mu);
    if (!store_db) goto out;
    if (store_bind_text(st_insert, 1, created ? created : "") < 0 || store_bind_text(st_insert, 2, backend) < 0 ||
        store_bind_text(st_insert, 3, device) < 0 || store_bind_text(st_insert, 4, status) < 0 ||
        store_bind_text(st_insert, 5, record_json ? record_json : "{}") < 0)
        goto reset;
    if (SQL_CHECK(sqlite3_step(st_insert)) != SQLITE_DONE) goto reset;
    id = (long long)sqlite3_last_insert_rowid(store_db);
    /* A record that starts {"id":0, gets its id before store_mu is released, so no reader
     * (a poller of GET /v1/runs) ever sees a run without its id. */
    if (SQL_CHECK(sqlite3_bind_int64(st_fill_id, 1, id)) < 0 || SQL_CHECK(sqlite3_step(st_fill_id)) != SQLITE_DONE) {
        store_reset(st_fill_id);
        SQL_CHECK(sqlite3_exec(store_db, "DELETE FROM runs WHERE id = last_insert_rowid()", NULL, NULL, NULL));
        id = -1;
        goto reset;
    }
    store_reset(st_fill_id);
reset:
    store_reset(st_insert);
out:
    pthread_mutex_unlock(&store_mu);
    return id;
}

int store_update_run(long long id, const char *status, const char *record_json)
{
    int rc = -1;

    pthread_mutex_lock(&store_mu);
    if (!store_db) goto out;
    if (store_bind_text(st_update, 1, status) < 0 || store_bind_text(st_update, 2, record_json ? record_json : "{}") < 0 ||
        SQL_CHECK(sqlite3_bind_int64(st_update, 3, id)) < 0)
        goto reset;
    if (SQL_CHECK(sqlite3_step(st_update)) != SQLITE_DONE) goto reset;
    rc = sqlite3_changes(store_db) == 1 ? 0 : -1;
reset:
    store_reset(st_update);
out:
    pthread_mutex_unlock(&store_mu);
    return rc;
}

int store_delete_run(long long id)
{
    int rc = -1;

    pthread_mutex_lock(&store_mu);
    if (!store_db) goto out;
    if (SQL_CHECK(sqlite3_bind_int64(st_delete, 1, id)) < 0) goto reset;
    if (SQL_CHECK(sqlite3_step(st_delete)) != SQLITE_DONE) goto reset;
    rc = sqlite3_changes(store_db) == 1 ? 0 : -1;
reset:
    store_reset(st_delete);
out:
    pthread_mutex_unlock(&store_mu);
    return rc;
}

char *store_get_run(long long id)
{
    char *record = NULL;

    pthread_mutex_lock(&store_mu);
    if (!store_db) goto out;
    if (SQL_CHECK(sqlite3_bind_int64(st_get, 1, id)) < 0) goto reset;
    if (SQL_CHECK(sqlite3_step(st_get)) == SQLITE_ROW) {
        const unsigned char *text = sqlite3_column_text(st_get, 0);
        if (text) record = strdup((const char *)text);
    }
reset:
    store_reset(st_get);
out:
    pthread_mutex_unlock(&store_mu);
    return record;
}

long long store_count_runs(void)
{
    long long n = -1;

    pthread_mutex_lock(&store_mu);
    if (!store_db) goto out;
    if (SQL_CHECK(sqlite3_step(st_count)) == SQLITE_ROW) n = sqlite3_column_int64(st_count, 0);
    sqlite3_reset(st_count);
out:
    pthread_mutex_unlock(&store_mu);
    return n;
}

char *store_list_runs(long long after_id, int limit, const char *backend, const char *status)
{
    return store_query_runs(after_id, limit, backend, status, NULL, NULL, NULL);
}

char *store_query_runs(long long after_id, int limit, const char *backend, const char *status, const char *device,
                       const char *since, long long *last_id)
{
    char *out = NULL, sql[400];
    size_t len = 0, cap = 0;
    sqlite3_stmt *st = st_list, *own = NULL;
    int step;

    if (limit < 1) limit = 1;
    if (limit > 1000) limit = 1000;
    if (backend && !backend[0]) backend = NULL;
    if (status && !status[0]) status = NULL;
    if (device && !device[0]) device = NULL;
    if (since && !since[0]) since = NULL;
    if (last_id) *last_id = after_id;

    pthread_mutex_lock(&store_mu);
    if (!store_db) goto out;
    /* With backend, status or device, a statement naming only those lets SQLite walk the
     * (column, id) index: the shared one's "?2 IS NULL OR …" forces a scan of every row
     * after `after` when few match (40 ms on 100 000 runs, against < 1 ms). */
    if (backend || status || device) {
        snprintf(sql, sizeof sql, "SELECT record, id FROM runs WHERE id > ?1%s%s%s"
                 " AND (?6 IS NULL OR created >= ?6) ORDER BY id LIMIT ?4",
                 backend ? " AND backend = ?2" : "", status ? " AND status = ?3" : "", device ? " AND device = ?5" : "");
        if (SQL_CHECK(sqlite3_prepare_v2(store_db, sql, -1, &own, NULL)) < 0) goto out;
        st = own;
    }
    if (SQL_CHECK(sqlite3_bind_int64(st, 1, after_id)) < 0 || store_bind_text(st, 2, backend) < 0 ||
        store_bind_text(st, 3, status) < 0 || SQL_CHECK(sqlite3_bind_int(st, 4, limit)) < 0 ||
        store_bind_text(st, 5, device) < 0 || store_bind_text(st, 6, since) < 0)
        goto reset;
    cap = 4096;
    out = malloc(cap);
    if (!out) goto reset;
    out[len++] = '[';
    while ((step = SQL_CHECK(sqlite3_step(st))) == SQLITE_ROW) {
        const unsigned char *text = sqlite3_column_text(st, 0);
        size_t n = text ? strlen((const char *)text) : 0;
        if (last_id) *last_id = sqlite3_column_int64(st, 1);
        if (!n) continue;
        if (grow_array(&out, &cap, len + n + 3, 1, 4096) != 0) goto fail; /* separator, closing bracket, NUL */
        if (len > 1) out[len++] = ',';
        memcpy(out + len, text, n);
        len += n;
    }
    if (step != SQLITE_DONE) goto fail;
    out[len++] = ']';
    out[len] = '\0';
    goto reset;
fail:
    free(out);
    out = NULL;
reset:
    if (own)
        SQL_CHECK(sqlite3_finalize(own));
    else
        store_reset(st_list);
out:
    pthread_mutex_unlock(&store_mu);
    return out;
}

/* ------------------------------------------------------------------------ traces -- */

int store_put_trace(long long run_id, const char *json)
{
    int rc = -1;

    pthread_mutex_lock(&store_mu);
    if (!store_db || !json) goto out;
    if (SQL_CHECK(sqlite3_bind_int64(st_trace_put, 1, run_id)) < 0 || store_bind_text(st_trace_put, 2, json) < 0)
        goto reset;
    if (SQL_CHECK(sqlite3_step(st_trace_put)) != SQLITE_DONE) goto reset;
    rc = 0;
reset:
    store_reset(st_trace_put);
out:
    pthread_mutex_unlock(&store_mu);
    return rc;
}

char *store_get_trace(long long run_id)
{
    char *json = NULL;

    pthread_mutex_lock(&store_mu);
    if (!store_db) goto out;
    if (SQL_CHECK(sqlite3_bind_int64(st_trace_get, 1, run_id)) < 0) goto reset;
    if (SQL_CHECK(sqlite3_step(st_trace_get)) == SQLITE_ROW) {
        const unsigned char *text = sqlite3_column_text(st_trace_get, 0);
        if (text) json = strdup((const char *)text);
    }
reset:
    store_reset(st_trace_get);
out:
    pthread_mutex_unlock(&store_mu);
    return json;
}

/* ------------------------------------------------------------------------ tensor ids -- */

/* Resident tensors live in worker memory and die with the process; their ids are issued
 * here so that they stay unique across restarts and an id of an earlier process answers
 * 410 rather than 404 or, worse, naming a new tensor. Uploads are rare: each call prepares
 * its statement. */

long long store_tensor_issue(const char *device)
{
    sqlite3_stmt *st = NULL;
    char created[32];
    long long id = -1;

    clock_text_now_iso(created, sizeof created);
    pthread_mutex_lock(&store_mu);
    if (store_db &&
        SQL_CHECK(sqlite3_prepare_v2(store_db, "INSERT INTO tensor_ids(device, created) VALUES (?1, ?2)", -1, &st,
                                     NULL)) >= 0 &&
        SQL_CHECK(sqlite3_bind_text(st, 1, device, -1, SQLITE_TRANSIENT)) >= 0 &&
        SQL_CHECK(sqlite3_bind_text(st, 2, created, -1, SQLITE_TRANSIENT)) >= 0 &&
        SQL_CHECK(sqlite3_step(st)) == SQLITE_DONE)
        id = (long long)sqlite3_last_insert_rowid(store_db);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_mu);
    return id;
}

int store_tensor_known(long long id)
{
    sqlite3_stmt *st = NULL;
    int rc = -1, step;

    pthread_mutex_lock(&store_mu);
    if (store_db && SQL_CHECK(sqlite3_prepare_v2(store_db, "SELECT 1 FROM tensor_ids WHERE id = ?1", -1, &st, NULL)) >= 0 &&
        SQL_CHECK(sqlite3_bind_int64(st, 1, id)) >= 0) {
        step = SQL_CHECK(sqlite3_step(st));
        if (step >= 0) rc = step == SQLITE_ROW;
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_mu);
    return rc;
}

int store_tensor_forget(long long id)
{
    sqlite3_stmt *st = NULL;
    int rc = -1;

    pthread_mutex_lock(&store_mu);
    if (store_db && SQL_CHECK(sqlite3_prepare_v2(store_db, "DELETE FROM tensor_ids WHERE id = ?1", -1, &st, NULL)) >= 0 &&
        SQL_CHECK(sqlite3_bind_int64(st, 1, id)) >= 0 && SQL_CHECK(sqlite3_step(st)) == SQLITE_DONE)
        rc = 0;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_mu);
    return rc;
}
