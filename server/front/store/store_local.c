/* store_local.c — this machine's SQLite database (store_local.h): opening and migrating it,
 * the runs, traces, tensor ids and the instance's state. The outbox and heartbeat tables are
 * in store_local_outbox.c; both share the connection through store_local_db.h.
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
#include "server/front/store/store_local.h"
#include "server/front/store/store_local_db.h"

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

pthread_mutex_t store_mu = PTHREAD_MUTEX_INITIALIZER;
sqlite3 *store_db;
int store_outbox_on;
static sqlite3_stmt *st_insert, *st_update, *st_delete, *st_get, *st_count, *st_list;
static sqlite3_stmt *st_fill_id, *st_trace_put, *st_trace_get; /* history, traces */

/* The text of the last failure, for local_open's err. Written under store_mu. */
static char store_last_error[512];

int store_check(int rc, const char *call, const char *file, int line)
{
    if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return rc;
    snprintf(store_last_error, sizeof store_last_error, "sqlite: %s failed at %s:%d: %s (%d)", call,
             file, line, store_db ? sqlite3_errmsg(store_db) : sqlite3_errstr(rc), rc);
    log_error("%s", store_last_error);
    return -1;
}

/* ------------------------------------------------------------------------ open/close -- */

/* Version 1: the runs, traces and tensor ids of a single machine. */
static const char *const store_schema_v1 =
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

/* Version 2: a fleet member's columns and tables (node, uuid, write counter, outbox, state,
 * heartbeat). PRAGMA user_version says which ran; each step runs once, in a transaction. */
static const char *const store_schema_v2 =
    "ALTER TABLE runs ADD COLUMN uuid TEXT;"
    "ALTER TABLE runs ADD COLUMN node TEXT;"
    "ALTER TABLE runs ADD COLUMN version INTEGER NOT NULL DEFAULT 1;"
    "CREATE INDEX IF NOT EXISTS runs_node_id ON runs(node, id);"
    "CREATE TABLE IF NOT EXISTS outbox ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, run_id INTEGER NOT NULL, uuid TEXT);"
    "CREATE TABLE IF NOT EXISTS node_state (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS nodes ("
    " instance INTEGER PRIMARY KEY, node TEXT NOT NULL, version TEXT, devices TEXT, started TEXT,"
    " last_heartbeat TEXT NOT NULL);"
    "PRAGMA user_version = 2;";

static int store_migrate(void)
{
    sqlite3_stmt *st = NULL;
    int version = -1;

    if (SQL_CHECK(sqlite3_exec(store_db, store_schema_v1, NULL, NULL, NULL)) < 0) return -1;
    if (SQL_CHECK(sqlite3_prepare_v2(store_db, "PRAGMA user_version", -1, &st, NULL)) < 0) return -1;
    if (SQL_CHECK(sqlite3_step(st)) == SQLITE_ROW) version = sqlite3_column_int(st, 0);
    SQL_CHECK(sqlite3_finalize(st));
    if (version < 0) return -1;
    if (version < 2) {
        if (store_begin() != 0) return -1;
        if (SQL_CHECK(sqlite3_exec(store_db, store_schema_v2, NULL, NULL, NULL)) < 0) {
            store_rollback();
            return -1;
        }
        if (store_commit() != 0) return -1;
        log_info("store: %s migrated to schema version 2", sqlite3_db_filename(store_db, "main"));
    }
    return 0;
}

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

int store_begin(void) { return SQL_CHECK(sqlite3_exec(store_db, "BEGIN IMMEDIATE", NULL, NULL, NULL)) < 0 ? -1 : 0; }
int store_commit(void) { return SQL_CHECK(sqlite3_exec(store_db, "COMMIT", NULL, NULL, NULL)) < 0 ? -1 : 0; }
void store_rollback(void) { sqlite3_exec(store_db, "ROLLBACK", NULL, NULL, NULL); }

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
        char *text = store_interrupted_record(ids[i], records[i], finished);
        int ok;
        if (!text) goto done;
        ok = store_begin() == 0 && store_bind_text(st_update, 1, "failed") >= 0 &&
             store_bind_text(st_update, 2, text) >= 0 && SQL_CHECK(sqlite3_bind_int64(st_update, 3, ids[i])) >= 0 &&
             SQL_CHECK(sqlite3_step(st_update)) == SQLITE_DONE &&
             (!store_outbox_on || store_outbox_append("run", ids[i], NULL) == 0) && store_commit() == 0;
        free(text);
        store_reset(st_update);
        if (!ok) {
            store_rollback();
            goto done;
        }
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

/* mkdir -p: data_dir and its missing parents (a CI job points it at a fresh path). 0, or -1
 * with err filled. */
static int store_make_dirs(const char *path, char *err, size_t err_len)
{
    char buf[512];
    size_t i, n = strlen(path);

    if (n == 0 || n >= sizeof buf) {
        snprintf(err, err_len, "data_dir '%.100s' is empty or too long", path);
        return -1;
    }
    memcpy(buf, path, n + 1);
    for (i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            snprintf(err, err_len, "cannot create directory %s: %s", buf, strerror(errno));
            return -1;
        }
        buf[i] = path[i];
    }
    return 0;
}

int local_open(const char *data_dir, int outbox, char *err, size_t err_len)
{
    char path[1024];
    int rc = -1;

    pthread_mutex_lock(&store_mu);
    if (store_db) {
        snprintf(err, err_len, "store already open");
        goto out;
    }
    store_last_error[0] = '\0';
    store_outbox_on = outbox;
    if (store_make_dirs(data_dir, err, err_len) != 0) goto out;
    if ((size_t)snprintf(path, sizeof path, "%s/attnd.db", data_dir) >= sizeof path) {
        snprintf(err, err_len, "data_dir path too long: %s", data_dir);
        goto out;
    }
    if (SQL_CHECK(sqlite3_open_v2(path, &store_db, SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_CREATE | SQLITE_OPEN_READWRITE,
                                  NULL)) < 0)
        goto fail;
    if (SQL_CHECK(sqlite3_busy_timeout(store_db, 5000)) < 0 ||
        SQL_CHECK(sqlite3_exec(store_db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL)) < 0 ||
        SQL_CHECK(sqlite3_exec(store_db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL)) < 0 || store_migrate() < 0)
        goto fail;
    if (SQL_CHECK(sqlite3_prepare_v2(store_db,
                                     "INSERT INTO runs(created, backend, device, status, record, uuid, node, version) "
                                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1)",
                                     -1, &st_insert, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_db,
                                     "UPDATE runs SET status = ?1, record = ?2, version = version + 1 WHERE id = ?3",
                                     -1, &st_update, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_db, "DELETE FROM runs WHERE id = ?1 RETURNING uuid", -1, &st_delete,
                                     NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_db, "SELECT record FROM runs WHERE id = ?1", -1, &st_get, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_db, "SELECT COUNT(*) FROM runs", -1, &st_count, NULL)) < 0 ||
        SQL_CHECK(sqlite3_prepare_v2(store_db,
                                     "SELECT record, id FROM runs WHERE id > ?1"
                                     " AND (?2 IS NULL OR backend = ?2) AND (?3 IS NULL OR status = ?3)"
                                     " AND (?5 IS NULL OR device = ?5) AND (?6 IS NULL OR created >= ?6)"
                                     " AND (?7 IS NULL OR node = ?7)"
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

void local_close(void)
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

int store_bind_text(sqlite3_stmt *st, int index, const char *text)
{
    if (!text) return SQL_CHECK(sqlite3_bind_null(st, index));
    return SQL_CHECK(sqlite3_bind_text(st, index, text, -1, SQLITE_TRANSIENT));
}

void store_reset(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    SQL_CHECK(sqlite3_clear_bindings(st));
}

long long local_insert_run(const char *created, const char *backend, const char *device, const char *status,
                           const char *record_json, const char *uuid, const char *node)
{
    long long id = -1;

    pthread_mutex_lock(&store_mu);
    if (!store_db || store_begin() != 0) goto out;
    if (store_bind_text(st_insert, 1, created ? created : "") < 0 || store_bind_text(st_insert, 2, backend) < 0 ||
        store_bind_text(st_insert, 3, device) < 0 || store_bind_text(st_insert, 4, status) < 0 ||
        store_bind_text(st_insert, 5, record_json ? record_json : "{}") < 0 || store_bind_text(st_insert, 6, uuid) < 0 ||
        store_bind_text(st_insert, 7, node) < 0 || SQL_CHECK(sqlite3_step(st_insert)) != SQLITE_DONE)
        goto fail;
    id = (long long)sqlite3_last_insert_rowid(store_db);
    /* A record that starts {"id":0, gets its id in the same transaction, so no reader (a
     * poller of GET /v1/runs) ever sees a run without its id. */
    if (SQL_CHECK(sqlite3_bind_int64(st_fill_id, 1, id)) < 0 || SQL_CHECK(sqlite3_step(st_fill_id)) != SQLITE_DONE)
        goto fail;
    if (store_outbox_on && store_outbox_append("run", id, uuid) != 0) goto fail;
    if (store_commit() != 0) goto fail;
    goto reset;
fail:
    store_rollback();
    id = -1;
reset:
    store_reset(st_fill_id);
    store_reset(st_insert);
out:
    pthread_mutex_unlock(&store_mu);
    return id;
}

int local_update_run(long long id, const char *status, const char *record_json)
{
    int rc = -1;

    pthread_mutex_lock(&store_mu);
    if (!store_db || store_begin() != 0) goto out;
    if (store_bind_text(st_update, 1, status) < 0 || store_bind_text(st_update, 2, record_json ? record_json : "{}") < 0 ||
        SQL_CHECK(sqlite3_bind_int64(st_update, 3, id)) < 0 || SQL_CHECK(sqlite3_step(st_update)) != SQLITE_DONE ||
        sqlite3_changes(store_db) != 1 || (store_outbox_on && store_outbox_append("run", id, NULL) != 0) ||
        store_commit() != 0)
        store_rollback();
    else
        rc = 0;
    store_reset(st_update);
out:
    pthread_mutex_unlock(&store_mu);
    return rc;
}

int local_delete_run(long long id)
{
    char uuid[64] = "";
    int rc = -1, step;

    pthread_mutex_lock(&store_mu);
    if (!store_db || store_begin() != 0) goto out;
    if (SQL_CHECK(sqlite3_bind_int64(st_delete, 1, id)) < 0) goto fail;
    step = SQL_CHECK(sqlite3_step(st_delete));
    if (step != SQLITE_ROW) goto fail; /* no such run */
    if (sqlite3_column_text(st_delete, 0))
        snprintf(uuid, sizeof uuid, "%s", (const char *)sqlite3_column_text(st_delete, 0));
    while (step == SQLITE_ROW) step = SQL_CHECK(sqlite3_step(st_delete));
    if (step != SQLITE_DONE) goto fail;
    sqlite3_reset(st_delete);
    if (store_outbox_on && uuid[0] && store_outbox_append("delete", id, uuid) != 0) goto fail;
    if (store_commit() != 0) goto fail;
    rc = 0;
    goto reset;
fail:
    store_rollback();
reset:
    store_reset(st_delete);
out:
    pthread_mutex_unlock(&store_mu);
    return rc;
}

/* The first column of st's first row as malloc'd text, with st bound to id; NULL if none. */
static char *store_text_by_id(sqlite3_stmt *st, long long id)
{
    char *text = NULL;

    pthread_mutex_lock(&store_mu);
    if (store_db && SQL_CHECK(sqlite3_bind_int64(st, 1, id)) >= 0 && SQL_CHECK(sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        if (t) text = strdup((const char *)t);
    }
    if (store_db) store_reset(st);
    pthread_mutex_unlock(&store_mu);
    return text;
}

char *local_get_run(long long id) { return store_text_by_id(st_get, id); }

long long local_count_runs(void)
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

char *local_query_runs(long long after_id, int limit, const char *backend, const char *status, const char *device,
                       const char *node, const char *since, long long *last_id)
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
    if (node && !node[0]) node = NULL;
    if (since && !since[0]) since = NULL;
    if (last_id) *last_id = after_id;

    pthread_mutex_lock(&store_mu);
    if (!store_db) goto out;
    /* With backend, status, device or node, a statement naming only those lets SQLite walk
     * the (column, id) index: the shared one's "?2 IS NULL OR …" forces a scan of every row
     * after `after` when few match (40 ms on 100 000 runs, against < 1 ms). */
    if (backend || status || device || node) {
        snprintf(sql, sizeof sql, "SELECT record, id FROM runs WHERE id > ?1%s%s%s%s"
                 " AND (?6 IS NULL OR created >= ?6) ORDER BY id LIMIT ?4",
                 backend ? " AND backend = ?2" : "", status ? " AND status = ?3" : "", device ? " AND device = ?5" : "",
                 node ? " AND node = ?7" : " AND ?7 IS NULL"); /* ?7 is bound either way */
        if (SQL_CHECK(sqlite3_prepare_v2(store_db, sql, -1, &own, NULL)) < 0) goto out;
        st = own;
    }
    if (SQL_CHECK(sqlite3_bind_int64(st, 1, after_id)) < 0 || store_bind_text(st, 2, backend) < 0 ||
        store_bind_text(st, 3, status) < 0 || SQL_CHECK(sqlite3_bind_int(st, 4, limit)) < 0 ||
        store_bind_text(st, 5, device) < 0 || store_bind_text(st, 6, since) < 0 || store_bind_text(st, 7, node) < 0)
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

int local_put_trace(long long run_id, const char *json)
{
    int rc = -1;

    pthread_mutex_lock(&store_mu);
    if (!store_db || !json || store_begin() != 0) goto out;
    if (SQL_CHECK(sqlite3_bind_int64(st_trace_put, 1, run_id)) < 0 || store_bind_text(st_trace_put, 2, json) < 0 ||
        SQL_CHECK(sqlite3_step(st_trace_put)) != SQLITE_DONE ||
        (store_outbox_on && store_outbox_append("trace", run_id, NULL) != 0) || store_commit() != 0)
        store_rollback();
    else
        rc = 0;
    store_reset(st_trace_put);
out:
    pthread_mutex_unlock(&store_mu);
    return rc;
}

char *local_get_trace(long long run_id) { return store_text_by_id(st_trace_get, run_id); }

/* ---------------------------------------------------------------- one-off statements -- */

/* Prepare sql, bind the texts (NULL: SQL NULL) and the integers after them, step it once.
 * Returns the step's result (SQLITE_ROW, SQLITE_DONE) with *out left prepared for a row
 * read, or -1. Under store_mu. Rare statements (uploads, state, heartbeats) take this path. */
static int store_run_once(sqlite3_stmt **out, const char *sql, const char *const *texts, int n_texts,
                          const long long *ints, int n_ints)
{
    int i, step;

    *out = NULL;
    if (!store_db || SQL_CHECK(sqlite3_prepare_v2(store_db, sql, -1, out, NULL)) < 0) return -1;
    for (i = 0; i < n_texts; i++)
        if (store_bind_text(*out, i + 1, texts[i]) < 0) return -1;
    for (i = 0; i < n_ints; i++)
        if (SQL_CHECK(sqlite3_bind_int64(*out, n_texts + i + 1, ints[i])) < 0) return -1;
    step = SQL_CHECK(sqlite3_step(*out));
    return step;
}

/* ------------------------------------------------------------------------ tensor ids -- */

/* Resident tensors live in worker memory and die with the process; their ids are issued
 * here so that they stay unique across restarts and an id of an earlier process answers
 * 410 rather than 404 or, worse, naming a new tensor. */

long long local_tensor_issue(const char *device)
{
    sqlite3_stmt *st;
    char created[32];
    const char *texts[2] = {device, created};
    long long id = -1;

    clock_text_now_iso(created, sizeof created);
    pthread_mutex_lock(&store_mu);
    if (store_run_once(&st, "INSERT INTO tensor_ids(device, created) VALUES (?1, ?2)", texts, 2, NULL, 0) == SQLITE_DONE)
        id = (long long)sqlite3_last_insert_rowid(store_db);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_mu);
    return id;
}

int local_tensor_known(long long id)
{
    sqlite3_stmt *st;
    int rc, step;

    pthread_mutex_lock(&store_mu);
    step = store_run_once(&st, "SELECT 1 FROM tensor_ids WHERE id = ?1", NULL, 0, &id, 1);
    rc = step < 0 ? -1 : step == SQLITE_ROW;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_mu);
    return rc;
}

int local_tensor_forget(long long id)
{
    sqlite3_stmt *st;
    int rc;

    pthread_mutex_lock(&store_mu);
    rc = store_run_once(&st, "DELETE FROM tensor_ids WHERE id = ?1", NULL, 0, &id, 1) == SQLITE_DONE ? 0 : -1;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_mu);
    return rc;
}

/* ------------------------------------------------------------------ instance facts -- */

int local_set_id_base(long long base)
{
    static const char *const tables[] = {"runs", "tensor_ids"};
    sqlite3_stmt *st;
    int rc = 0;
    size_t i;

    /* AUTOINCREMENT takes max(sqlite_sequence.seq, largest id) + 1: raising seq is enough. */
    pthread_mutex_lock(&store_mu);
    for (i = 0; i < 2 && rc == 0; i++) {
        const char *name[1] = {tables[i]};
        long long both[1] = {base};
        if (store_run_once(&st, "UPDATE sqlite_sequence SET seq = ?2 WHERE name = ?1 AND seq < ?2", name, 1, both, 1) !=
            SQLITE_DONE)
            rc = -1;
        sqlite3_finalize(st);
        if (rc == 0 && store_run_once(&st,
                                      "INSERT INTO sqlite_sequence(name, seq) SELECT ?1, ?2"
                                      " WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = ?1)",
                                      name, 1, both, 1) != SQLITE_DONE)
            rc = -1;
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&store_mu);
    return rc;
}

int local_state_get(const char *key, char *value, size_t len)
{
    sqlite3_stmt *st;
    int rc, step;

    pthread_mutex_lock(&store_mu);
    step = store_run_once(&st, "SELECT value FROM node_state WHERE key = ?1", &key, 1, NULL, 0);
    rc = step < 0 ? -1 : step == SQLITE_ROW;
    if (rc == 1) snprintf(value, len, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_mu);
    return rc;
}

int local_state_set(const char *key, const char *value)
{
    const char *texts[2] = {key, value};
    sqlite3_stmt *st;
    int rc;

    pthread_mutex_lock(&store_mu);
    rc = store_run_once(&st, "INSERT OR REPLACE INTO node_state(key, value) VALUES (?1, ?2)", texts, 2, NULL, 0) ==
                 SQLITE_DONE
             ? 0
             : -1;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_mu);
    return rc;
}
