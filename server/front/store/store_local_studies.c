/* store_local_studies.c — the studies in this machine's SQLite file (store_local.h): insert,
 * replace, read, list newest first, and the ones an earlier process left unfinished.
 *
 * A study's row holds its whole record as the API answers it (docs/api.md, Studies); its id,
 * status and created time are columns for paging and filtering. Like a run, a record inserted
 * as {"id":0,… gets its id in the insert's transaction, and every change appends an outbox
 * row (kind "study") when the history is the fleet's.
 */
#include "server/front/store/store_local.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/clock.h"
#include "common/grow.h"
#include "common/log.h"
#include "server/front/store/store_sqlite.h"

long long store_local_insert_study(const char *created, const char *status, const char *record_json, const char *uuid,
                                   const char *node)
{
    const char *texts[5] = {created, status, record_json ? record_json : "{}", uuid, node};
    sqlite3_stmt *st = NULL;
    long long id = -1;

    pthread_mutex_lock(&store_sqlite_mu);
    if (!store_sqlite_db || store_sqlite_begin() != 0) goto out;
    if (store_sqlite_run_once(&st, "INSERT INTO studies(created, status, record, uuid, node) VALUES (?1, ?2, ?3, ?4, ?5)",
                              texts, 5, NULL, 0) != SQLITE_DONE)
        goto fail;
    id = (long long)sqlite3_last_insert_rowid(store_sqlite_db);
    sqlite3_finalize(st);
    /* As a run's (store_local_insert_run): no reader ever sees the study without its id. */
    if (store_sqlite_run_once(&st,
                              "UPDATE studies SET record = '{\"id\":' || id || ',' || substr(record, 9)"
                              " WHERE id = ?1 AND substr(record, 1, 8) = '{\"id\":0,'",
                              NULL, 0, &id, 1) != SQLITE_DONE ||
        store_sqlite_outbox_append("study", id, uuid) != 0 || store_sqlite_commit() != 0)
        goto fail;
    goto done;
fail:
    store_sqlite_rollback();
    id = -1;
done:
    sqlite3_finalize(st);
out:
    pthread_mutex_unlock(&store_sqlite_mu);
    return id;
}

int store_local_update_study(long long id, const char *status, const char *record_json)
{
    const char *texts[2] = {status, record_json ? record_json : "{}"};
    sqlite3_stmt *st = NULL;
    int rc = -1;

    pthread_mutex_lock(&store_sqlite_mu);
    if (!store_sqlite_db || store_sqlite_begin() != 0) goto out;
    if (store_sqlite_run_once(&st, "UPDATE studies SET status = ?1, record = ?2, version = version + 1 WHERE id = ?3",
                              texts, 2, &id, 1) != SQLITE_DONE) {
        store_sqlite_rollback();
    } else if (sqlite3_changes(store_sqlite_db) != 1) {
        store_sqlite_rollback();
        rc = 1;
    } else if (store_sqlite_outbox_append("study", id, NULL) != 0 || store_sqlite_commit() != 0) {
        store_sqlite_rollback();
    } else {
        rc = 0;
    }
    sqlite3_finalize(st);
out:
    pthread_mutex_unlock(&store_sqlite_mu);
    return rc;
}

char *store_local_get_study(long long id)
{
    sqlite3_stmt *st = NULL;
    char *text = NULL;

    pthread_mutex_lock(&store_sqlite_mu);
    if (store_sqlite_db && store_sqlite_run_once(&st, "SELECT record FROM studies WHERE id = ?1", NULL, 0, &id, 1) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        if (t) text = strdup((const char *)t);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    return text;
}

char *store_local_list_studies(const store_study_query *q, long long *last, int *count)
{
    /* Few rows (a study per tens of runs): the tag is looked for in each record of the page's
     * walk, not in an index. */
    static const char *const sql =
        "SELECT record, id FROM studies WHERE (?1 IS NULL OR status = ?1)"
        " AND (?2 IS NULL OR EXISTS (SELECT 1 FROM json_each(studies.record, '$.tags') WHERE value = ?2))"
        " AND (?3 = 0 OR id < ?3) ORDER BY id DESC LIMIT ?4";
    sqlite3_stmt *st = NULL;
    char *out = NULL;
    size_t len = 0, cap = 4096;
    int step = -1;

    *last = q->before;
    *count = 0;
    pthread_mutex_lock(&store_sqlite_mu);
    if (!store_sqlite_db || SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, sql, -1, &st, NULL)) < 0 ||
        store_sqlite_bind_text(st, 1, q->status) < 0 || store_sqlite_bind_text(st, 2, q->tag) < 0 ||
        SQL_CHECK(sqlite3_bind_int64(st, 3, q->before)) < 0 || SQL_CHECK(sqlite3_bind_int(st, 4, q->limit)) < 0 ||
        !(out = malloc(cap)))
        goto done;
    out[len++] = '[';
    while ((step = SQL_CHECK(sqlite3_step(st))) == SQLITE_ROW) {
        const unsigned char *text = sqlite3_column_text(st, 0);
        size_t n = text ? strlen((const char *)text) : 0;
        *last = sqlite3_column_int64(st, 1);
        if (!n) continue;
        (*count)++;
        if (grow_array(&out, &cap, len + n + 3, 1, 4096) != 0) {
            step = -1;
            break;
        }
        if (len > 1) out[len++] = ',';
        memcpy(out + len, text, n);
        len += n;
    }
    if (step == SQLITE_DONE) {
        out[len++] = ']';
        out[len] = '\0';
    }
done:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    if (step != SQLITE_DONE) {
        free(out);
        return NULL;
    }
    return out;
}

/* The record of a study an earlier process left queued or running, now failed: malloc'd
 * text, NULL when out of memory. */
static char *store_interrupted_study(long long id, const char *record, const char *finished)
{
    cJSON *rec = cJSON_Parse(record), *error;
    char *text, *copy;

    if (!rec || !cJSON_IsObject(rec)) {
        cJSON_Delete(rec);
        rec = cJSON_CreateObject();
        cJSON_AddNumberToObject(rec, "id", (double)id);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(rec, "status");
    cJSON_AddStringToObject(rec, "status", "failed");
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(rec, "finished"))) {
        cJSON_DeleteItemFromObjectCaseSensitive(rec, "finished");
        cJSON_AddStringToObject(rec, "finished", finished);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(rec, "error");
    error = cJSON_AddObjectToObject(rec, "error");
    cJSON_AddStringToObject(error, "code", "server_restarted");
    cJSON_AddStringToObject(error, "message", "server restarted before the study finished");
    text = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    copy = text ? strdup(text) : NULL;
    cJSON_free(text);
    return copy;
}

int store_local_mark_studies_interrupted(void)
{
    sqlite3_stmt *st = NULL;
    long long *ids = NULL;
    char **records = NULL, finished[40];
    size_t n = 0, id_cap = 0, rec_cap = 0, i;
    int rc = -1, step;

    pthread_mutex_lock(&store_sqlite_mu);
    if (!store_sqlite_db ||
        SQL_CHECK(sqlite3_prepare_v2(store_sqlite_db, "SELECT id, record FROM studies WHERE status IN ('queued','running')",
                                     -1, &st, NULL)) < 0)
        goto out;
    while ((step = SQL_CHECK(sqlite3_step(st))) == SQLITE_ROW) {
        const unsigned char *text = sqlite3_column_text(st, 1);
        if (grow_array(&ids, &id_cap, n + 1, sizeof *ids, 8) != 0 ||
            grow_array(&records, &rec_cap, n + 1, sizeof *records, 8) != 0)
            goto out;
        ids[n] = sqlite3_column_int64(st, 0);
        if (!(records[n] = strdup(text ? (const char *)text : "{}"))) goto out;
        n++;
    }
    if (step != SQLITE_DONE) goto out;
    SQL_CHECK(sqlite3_finalize(st));
    st = NULL;
    clock_text_now_iso(finished, sizeof finished);
    for (i = 0; i < n; i++) {
        char *text = store_interrupted_study(ids[i], records[i], finished);
        const char *texts[2] = {"failed", text};
        int ok = text && store_sqlite_begin() == 0 &&
                 store_sqlite_run_once(&st, "UPDATE studies SET status = ?1, record = ?2, version = version + 1"
                                            " WHERE id = ?3", texts, 2, &ids[i], 1) == SQLITE_DONE &&
                 store_sqlite_outbox_append("study", ids[i], NULL) == 0 && store_sqlite_commit() == 0;
        sqlite3_finalize(st);
        st = NULL;
        free(text);
        if (!ok) {
            store_sqlite_rollback();
            goto out;
        }
    }
    if (n) log_warn("store: %zu study(ies) left queued/running by an earlier process marked failed", n);
    rc = 0;
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&store_sqlite_mu);
    for (i = 0; i < n; i++) free(records[i]);
    free(records);
    free(ids);
    return rc;
}
