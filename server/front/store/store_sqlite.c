/* store_sqlite.c — this machine's SQLite file (store_sqlite.h): open, migrate, close, and
 * the helpers every statement sequence of the local store goes through.
 *
 * One connection opened in serialized mode (SQLITE_OPEN_FULLMUTEX), WAL journal so readers
 * never wait on the writer. Prepared statements are shared, and a bind/step/reset sequence on
 * one statement is not atomic even in serialized mode, so every user also holds
 * store_sqlite_mu for its whole sequence. Every sqlite3 call goes through SQL_CHECK, which
 * logs the call, file, line and sqlite3_errmsg.
 */
#include "server/front/store/store_sqlite.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"

pthread_mutex_t store_sqlite_mu = PTHREAD_MUTEX_INITIALIZER;
sqlite3 *store_sqlite_db;
int store_sqlite_outbox_on;

/* The text of the last failure (with the call and line, for the log), its message alone (for
 * /readyz) and whether it was a lack of space, and the open file's path. Written under
 * store_sqlite_mu. */
static char store_sqlite_error[512];
static char store_sqlite_reason[256];
static int store_sqlite_no_space;
static char store_sqlite_file[1024];

int store_sqlite_check(int rc, const char *call, const char *file, int line)
{
    int sys = store_sqlite_db ? sqlite3_system_errno(store_sqlite_db) : 0;

    if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return rc;
    snprintf(store_sqlite_reason, sizeof store_sqlite_reason, "%s",
             store_sqlite_db ? sqlite3_errmsg(store_sqlite_db) : sqlite3_errstr(rc));
    snprintf(store_sqlite_error, sizeof store_sqlite_error, "sqlite: %s failed at %s:%d: %s (%d)", call, file, line,
             store_sqlite_reason, rc);
    /* A full disk is SQLITE_FULL; a file-size limit (EFBIG) or a quota can come as an I/O error. */
    store_sqlite_no_space = (rc & 0xff) == SQLITE_FULL || sys == ENOSPC || sys == EDQUOT || sys == EFBIG;
    log_error("%s", store_sqlite_error);
    return -1;
}

int store_sqlite_failure(char *reason, size_t len)
{
    int no_space;

    pthread_mutex_lock(&store_sqlite_mu);
    snprintf(reason, len, "cannot write %s: %s", store_sqlite_file, store_sqlite_reason[0] ? store_sqlite_reason : "unknown error");
    no_space = store_sqlite_no_space;
    pthread_mutex_unlock(&store_sqlite_mu);
    return no_space;
}

const char *store_sqlite_last_error(void) { return store_sqlite_error; }
const char *store_sqlite_path(void) { return store_sqlite_db ? store_sqlite_file : ""; }

/* ------------------------------------------------------------------------ schema -- */

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

/* Version 3: the median forward time as a column, so that the outbox never reads it out of
 * the record (older rows: taken from their record once, here). */
static const char *const store_schema_v3 =
    "ALTER TABLE runs ADD COLUMN median_us REAL;"
    "UPDATE runs SET median_us = json_extract(record, '$.timing.median_us') WHERE status = 'done';"
    "PRAGMA user_version = 3;";

/* Version 4: what GET /v1/runs filters and groups by, as columns the database computes from
 * the record (virtual generated columns: computed when read or indexed, stored only in their
 * indexes), so no write names them and none disagrees with the record; each with a
 * (column, id) index. Tags, several per run, are rows of run_tags kept by triggers. Rows
 * already there are indexed by the CREATE INDEX statements themselves. store.h's
 * store_fields names these columns. */
static const char *const store_schema_v4 =
    "ALTER TABLE runs ADD COLUMN batch INTEGER GENERATED ALWAYS AS (json_extract(record, '$.params.batch')) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN heads INTEGER GENERATED ALWAYS AS (json_extract(record, '$.params.heads')) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN kv_heads INTEGER GENERATED ALWAYS AS"
    " (coalesce(json_extract(record, '$.params.kv_heads'), json_extract(record, '$.params.heads'))) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN seq_q INTEGER GENERATED ALWAYS AS (json_extract(record, '$.params.seq_q')) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN seq_kv INTEGER GENERATED ALWAYS AS (json_extract(record, '$.params.seq_kv')) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN head_dim INTEGER GENERATED ALWAYS AS"
    " (json_extract(record, '$.params.head_dim')) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN head_dim_v INTEGER GENERATED ALWAYS AS"
    " (coalesce(json_extract(record, '$.params.head_dim_v'), json_extract(record, '$.params.head_dim'))) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN window_size INTEGER GENERATED ALWAYS AS"
    " (json_extract(record, '$.params.window')) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN dtype TEXT GENERATED ALWAYS AS (json_extract(record, '$.params.dtype')) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN mask TEXT GENERATED ALWAYS AS (json_extract(record, '$.params.mask')) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN impl TEXT GENERATED ALWAYS AS"
    " (coalesce(json_extract(record, '$.impl_used'), json_extract(record, '$.params.impl'))) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN device_name TEXT GENERATED ALWAYS AS (json_extract(record, '$.device.name')) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN build_commit TEXT GENERATED ALWAYS AS"
    " (json_extract(record, '$.build.commit')) VIRTUAL;"
    "CREATE INDEX runs_batch_id ON runs(batch, id);"
    "CREATE INDEX runs_heads_id ON runs(heads, id);"
    "CREATE INDEX runs_kv_heads_id ON runs(kv_heads, id);"
    "CREATE INDEX runs_seq_q_id ON runs(seq_q, id);"
    "CREATE INDEX runs_seq_kv_id ON runs(seq_kv, id);"
    "CREATE INDEX runs_head_dim_id ON runs(head_dim, id);"
    "CREATE INDEX runs_head_dim_v_id ON runs(head_dim_v, id);"
    "CREATE INDEX runs_window_size_id ON runs(window_size, id);"
    "CREATE INDEX runs_dtype_id ON runs(dtype, id);"
    "CREATE INDEX runs_mask_id ON runs(mask, id);"
    "CREATE INDEX runs_impl_id ON runs(impl, id);"
    "CREATE INDEX runs_device_name_id ON runs(device_name, id);"
    "CREATE INDEX runs_build_commit_id ON runs(build_commit, id);"
    "CREATE TABLE run_tags (tag TEXT NOT NULL, run_id INTEGER NOT NULL, PRIMARY KEY (tag, run_id)) WITHOUT ROWID;"
    "CREATE TRIGGER runs_tags_insert AFTER INSERT ON runs WHEN json_type(new.record, '$.params.tags') = 'array' BEGIN"
    " INSERT OR IGNORE INTO run_tags(tag, run_id) SELECT value, new.id FROM json_each(new.record, '$.params.tags');"
    " END;"
    "CREATE TRIGGER runs_tags_update AFTER UPDATE OF record ON runs"
    " WHEN json_extract(old.record, '$.params.tags') IS NOT json_extract(new.record, '$.params.tags') BEGIN"
    " DELETE FROM run_tags WHERE run_id = old.id;"
    " INSERT OR IGNORE INTO run_tags(tag, run_id) SELECT value, new.id FROM json_each(new.record, '$.params.tags')"
    "  WHERE json_type(new.record, '$.params.tags') = 'array';"
    " END;"
    "CREATE TRIGGER runs_tags_delete AFTER DELETE ON runs WHEN json_type(old.record, '$.params.tags') = 'array' BEGIN"
    " DELETE FROM run_tags WHERE run_id = old.id"
    "  AND tag IN (SELECT value FROM json_each(old.record, '$.params.tags'));"
    " END;"
    "PRAGMA user_version = 4;";

/* Version 5: studies (docs/api.md, Studies): one row per study, its whole record as the API
 * answers it, with the columns a list filters by; tags are read out of the record, as studies
 * are few (one per tens of runs). Ids come from the same fleet range as run ids
 * (store_local_set_id_base). */
static const char *const store_schema_v5 =
    "CREATE TABLE studies ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " uuid TEXT,"
    " node TEXT,"
    " created TEXT NOT NULL,"
    " status TEXT NOT NULL,"
    " version INTEGER NOT NULL DEFAULT 1,"
    " record TEXT NOT NULL);"
    "CREATE INDEX studies_status_id ON studies(status, id);"
    "PRAGMA user_version = 5;";

/* Version 6: the serving layout as columns GET /v1/runs filters and groups by, computed from
 * the record as version 4's are: page_size (0 for a contiguous cache, so that "contiguous" is
 * a value an index finds), num_pages, and ragged (1 when the run had per-sequence lengths;
 * a JSON null is none, as an absent member is). */
static const char *const store_schema_v6 =
    "ALTER TABLE runs ADD COLUMN page_size INTEGER GENERATED ALWAYS AS"
    " (coalesce(json_extract(record, '$.params.page_size'), 0)) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN num_pages INTEGER GENERATED ALWAYS AS"
    " (json_extract(record, '$.params.num_pages')) VIRTUAL;"
    "ALTER TABLE runs ADD COLUMN ragged INTEGER GENERATED ALWAYS AS"
    " (coalesce(json_type(record, '$.params.seqlens_q'), 'null') <> 'null'"
    " OR coalesce(json_type(record, '$.params.seqlens_kv'), 'null') <> 'null') VIRTUAL;"
    "CREATE INDEX runs_page_size_id ON runs(page_size, id);"
    "CREATE INDEX runs_num_pages_id ON runs(num_pages, id);"
    "CREATE INDEX runs_ragged_id ON runs(ragged, id);"
    "PRAGMA user_version = 6;";

/* Version 7: the columns of version 4 and 6 that come from the request, computed from params,
 * a copy of the record's params written once at insert, instead of from the record itself. An
 * UPDATE of the record (running, done) then leaves their 13 indexes alone: computed from the
 * record, every store write of a run rewrote each of their pages. impl, device_name and
 * build_commit, which the run fills in or the record alone holds, stay computed from it. */
static const char *const store_schema_v7 =
    "ALTER TABLE runs ADD COLUMN params TEXT;"
    "UPDATE runs SET params = json_extract(record, '$.params');"
    "DROP INDEX runs_batch_id; ALTER TABLE runs DROP COLUMN batch;"
    "ALTER TABLE runs ADD COLUMN batch INTEGER GENERATED ALWAYS AS (json_extract(params, '$.batch')) VIRTUAL;"
    "CREATE INDEX runs_batch_id ON runs(batch, id);"
    "DROP INDEX runs_heads_id; ALTER TABLE runs DROP COLUMN heads;"
    "ALTER TABLE runs ADD COLUMN heads INTEGER GENERATED ALWAYS AS (json_extract(params, '$.heads')) VIRTUAL;"
    "CREATE INDEX runs_heads_id ON runs(heads, id);"
    "DROP INDEX runs_kv_heads_id; ALTER TABLE runs DROP COLUMN kv_heads;"
    "ALTER TABLE runs ADD COLUMN kv_heads INTEGER GENERATED ALWAYS AS"
    " (coalesce(json_extract(params, '$.kv_heads'), json_extract(params, '$.heads'))) VIRTUAL;"
    "CREATE INDEX runs_kv_heads_id ON runs(kv_heads, id);"
    "DROP INDEX runs_seq_q_id; ALTER TABLE runs DROP COLUMN seq_q;"
    "ALTER TABLE runs ADD COLUMN seq_q INTEGER GENERATED ALWAYS AS (json_extract(params, '$.seq_q')) VIRTUAL;"
    "CREATE INDEX runs_seq_q_id ON runs(seq_q, id);"
    "DROP INDEX runs_seq_kv_id; ALTER TABLE runs DROP COLUMN seq_kv;"
    "ALTER TABLE runs ADD COLUMN seq_kv INTEGER GENERATED ALWAYS AS (json_extract(params, '$.seq_kv')) VIRTUAL;"
    "CREATE INDEX runs_seq_kv_id ON runs(seq_kv, id);"
    "DROP INDEX runs_head_dim_id; ALTER TABLE runs DROP COLUMN head_dim;"
    "ALTER TABLE runs ADD COLUMN head_dim INTEGER GENERATED ALWAYS AS (json_extract(params, '$.head_dim')) VIRTUAL;"
    "CREATE INDEX runs_head_dim_id ON runs(head_dim, id);"
    "DROP INDEX runs_head_dim_v_id; ALTER TABLE runs DROP COLUMN head_dim_v;"
    "ALTER TABLE runs ADD COLUMN head_dim_v INTEGER GENERATED ALWAYS AS"
    " (coalesce(json_extract(params, '$.head_dim_v'), json_extract(params, '$.head_dim'))) VIRTUAL;"
    "CREATE INDEX runs_head_dim_v_id ON runs(head_dim_v, id);"
    "DROP INDEX runs_window_size_id; ALTER TABLE runs DROP COLUMN window_size;"
    "ALTER TABLE runs ADD COLUMN window_size INTEGER GENERATED ALWAYS AS (json_extract(params, '$.window')) VIRTUAL;"
    "CREATE INDEX runs_window_size_id ON runs(window_size, id);"
    "DROP INDEX runs_dtype_id; ALTER TABLE runs DROP COLUMN dtype;"
    "ALTER TABLE runs ADD COLUMN dtype TEXT GENERATED ALWAYS AS (json_extract(params, '$.dtype')) VIRTUAL;"
    "CREATE INDEX runs_dtype_id ON runs(dtype, id);"
    "DROP INDEX runs_mask_id; ALTER TABLE runs DROP COLUMN mask;"
    "ALTER TABLE runs ADD COLUMN mask TEXT GENERATED ALWAYS AS (json_extract(params, '$.mask')) VIRTUAL;"
    "CREATE INDEX runs_mask_id ON runs(mask, id);"
    "DROP INDEX runs_page_size_id; ALTER TABLE runs DROP COLUMN page_size;"
    "ALTER TABLE runs ADD COLUMN page_size INTEGER GENERATED ALWAYS AS"
    " (coalesce(json_extract(params, '$.page_size'), 0)) VIRTUAL;"
    "CREATE INDEX runs_page_size_id ON runs(page_size, id);"
    "DROP INDEX runs_num_pages_id; ALTER TABLE runs DROP COLUMN num_pages;"
    "ALTER TABLE runs ADD COLUMN num_pages INTEGER GENERATED ALWAYS AS (json_extract(params, '$.num_pages')) VIRTUAL;"
    "CREATE INDEX runs_num_pages_id ON runs(num_pages, id);"
    "DROP INDEX runs_ragged_id; ALTER TABLE runs DROP COLUMN ragged;"
    "ALTER TABLE runs ADD COLUMN ragged INTEGER GENERATED ALWAYS AS"
    " (coalesce(json_type(params, '$.seqlens_q'), 'null') <> 'null'"
    " OR coalesce(json_type(params, '$.seqlens_kv'), 'null') <> 'null') VIRTUAL;"
    "CREATE INDEX runs_ragged_id ON runs(ragged, id);"
    "PRAGMA user_version = 7;";

/* One migration step, in a transaction. 0, or -1. */
static int store_migrate_step(const char *sql, int version)
{
    if (store_sqlite_begin() != 0) return -1;
    if (SQL_CHECK(sqlite3_exec(store_sqlite_db, sql, NULL, NULL, NULL)) < 0) {
        store_sqlite_rollback();
        return -1;
    }
    if (store_sqlite_commit() != 0) return -1;
    log_info("store: %s migrated to schema version %d", sqlite3_db_filename(store_sqlite_db, "main"), version);
    return 0;
}

static int store_migrate(void)
{
    sqlite3_stmt *st = NULL;
    int version = -1;

    if (SQL_CHECK(sqlite3_exec(store_sqlite_db, store_schema_v1, NULL, NULL, NULL)) < 0) return -1;
    if (SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, "PRAGMA user_version", -1, &st, NULL)) < 0) return -1;
    if (SQL_CHECK(sqlite3_step(st)) == SQLITE_ROW) version = sqlite3_column_int(st, 0);
    SQL_CHECK(sqlite3_finalize(st));
    if (version < 0) return -1;
    if (version < 2 && store_migrate_step(store_schema_v2, 2) != 0) return -1;
    if (version < 3 && store_migrate_step(store_schema_v3, 3) != 0) return -1;
    if (version < 4 && store_migrate_step(store_schema_v4, 4) != 0) return -1;
    if (version < 5 && store_migrate_step(store_schema_v5, 5) != 0) return -1;
    if (version < 6 && store_migrate_step(store_schema_v6, 6) != 0) return -1;
    if (version < 7 && store_migrate_step(store_schema_v7, 7) != 0) return -1;
    return 0;
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

int store_sqlite_open(const char *data_dir, int outbox, char *err, size_t err_len)
{
    if (store_sqlite_db) {
        snprintf(err, err_len, "store already open");
        return -1;
    }
    store_sqlite_error[0] = '\0';
    store_sqlite_outbox_on = outbox;
    if (store_make_dirs(data_dir, err, err_len) != 0) return -1;
    if ((size_t)snprintf(store_sqlite_file, sizeof store_sqlite_file, "%s/attnd.db", data_dir) >=
        sizeof store_sqlite_file) {
        snprintf(err, err_len, "data_dir path too long: %s", data_dir);
        return -1;
    }
    if (SQL_CHECK(sqlite3_open_v2(store_sqlite_file, &store_sqlite_db,
                                  SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_CREATE | SQLITE_OPEN_READWRITE, NULL)) < 0 ||
        SQL_CHECK(sqlite3_busy_timeout(store_sqlite_db, 5000)) < 0 ||
        SQL_CHECK(sqlite3_exec(store_sqlite_db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL)) < 0 ||
        SQL_CHECK(sqlite3_exec(store_sqlite_db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL)) < 0 ||
        /* a run's update journals its statement (the tag triggers): in memory, not in a file
         * created and unlinked in /var/tmp per statement */
        SQL_CHECK(sqlite3_exec(store_sqlite_db, "PRAGMA temp_store=MEMORY", NULL, NULL, NULL)) < 0 ||
        store_migrate() < 0) {
        snprintf(err, err_len, "%s: %s", store_sqlite_file, store_sqlite_error[0] ? store_sqlite_error : "cannot open");
        store_sqlite_close();
        return -1;
    }
    return 0;
}

void store_sqlite_close(void)
{
    if (store_sqlite_db) SQL_CHECK(sqlite3_close(store_sqlite_db));
    store_sqlite_db = NULL;
}

/* ------------------------------------------------------------------ statements -- */

int store_sqlite_bind_text(sqlite3_stmt *st, int index, const char *text)
{
    if (!text) return SQL_CHECK(sqlite3_bind_null(st, index));
    return SQL_CHECK(sqlite3_bind_text(st, index, text, -1, SQLITE_TRANSIENT));
}

void store_sqlite_reset(sqlite3_stmt *st)
{
    sqlite3_reset(st);
    SQL_CHECK(sqlite3_clear_bindings(st));
}

int store_sqlite_begin(void) { return SQL_CHECK(sqlite3_exec(store_sqlite_db, "BEGIN IMMEDIATE", NULL, NULL, NULL)) < 0 ? -1 : 0; }
int store_sqlite_commit(void) { return SQL_CHECK(sqlite3_exec(store_sqlite_db, "COMMIT", NULL, NULL, NULL)) < 0 ? -1 : 0; }
void store_sqlite_rollback(void) { sqlite3_exec(store_sqlite_db, "ROLLBACK", NULL, NULL, NULL); }


int store_sqlite_outbox_append(const char *kind, long long run_id, const char *uuid)
{
    if (!store_sqlite_outbox_on) return 0;
    sqlite3_stmt *st = NULL;
    int rc = -1;

    if (SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, "INSERT INTO outbox(kind, run_id, uuid) VALUES (?1, ?2, ?3)", -1, &st,
                                     NULL)) >= 0 &&
        store_sqlite_bind_text(st, 1, kind) >= 0 && SQL_CHECK(sqlite3_bind_int64(st, 2, run_id)) >= 0 &&
        store_sqlite_bind_text(st, 3, uuid) >= 0 && SQL_CHECK(sqlite3_step(st)) == SQLITE_DONE)
        rc = 0;
    sqlite3_finalize(st);
    return rc;
}

int store_sqlite_run_once(sqlite3_stmt **out, const char *sql, const char *const *texts, int n_texts,
                          const long long *ints, int n_ints)
{
    int i, step;

    *out = NULL;
    if (!store_sqlite_db || SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, sql, -1, out, NULL)) < 0) return -1;
    for (i = 0; i < n_texts; i++)
        if (store_sqlite_bind_text(*out, i + 1, texts[i]) < 0) return -1;
    for (i = 0; i < n_ints; i++)
        if (SQL_CHECK(sqlite3_bind_int64(*out, n_texts + i + 1, ints[i])) < 0) return -1;
    step = SQL_CHECK(sqlite3_step(*out));
    return step;
}

