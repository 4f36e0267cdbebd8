/* test_store.c — runs in SQLite: insert, update, get, delete, persistence across a reopen,
 * and the marking of runs an earlier process left queued or running (with a finished time,
 * also where the record held "finished": null, as every live record does). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "server/front/store/store.h"

#include <cjson/cJSON.h>

/* The string member `key` of a stored record, compared with want (NULL: absent). */
static int record_has(const char *record, const char *key, const char *want)
{
    cJSON *o = record ? cJSON_Parse(record) : NULL;
    cJSON *v = o ? cJSON_GetObjectItem(o, key) : NULL;
    int ok = want ? (cJSON_IsString(v) && strcmp(v->valuestring, want) == 0) : v == NULL;
    cJSON_Delete(o);
    return ok;
}

int main(void)
{
    char dir[] = "/tmp/attnd-test-store-XXXXXX", sub[256], err[512] = "", cmd[300];
    long long a, b, c, d;
    char *rec;

    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(sub, sizeof sub, "%s/data", dir); /* not there yet: store_open creates it */

    CHECK(store_open(sub, err, sizeof err) == 0, "open: %s", err);
    CHECK(store_count_runs() == 0, "empty");
    a = store_insert_run("2026-12-02T10:31:05.123Z", "math", "cpu", "queued", -1, "{\"status\":\"queued\"}");
    b = store_insert_run("2026-12-02T10:31:06.000Z", "naive", "cuda:0", "running", -1, "{\"status\":\"running\"}");
    c = store_insert_run("2026-12-02T10:31:07.000Z", "flash", "cuda:0", "queued", -1, "{\"status\":\"queued\"}");
    CHECK(a > 0 && b > a && c > b, "ids grow: %lld %lld %lld", a, b, c);
    CHECK(store_count_runs() == 3, "three rows");

    CHECK(store_update_run(a, "done", 12.5, "{\"id\":1,\"status\":\"done\"}") == 0, "update");
    {
        char *all = store_list_runs(0, 100, NULL, NULL), *queued = store_list_runs(0, 100, NULL, "queued");
        char *after = store_list_runs(a, 1, "", ""), *none = store_list_runs(c, 10, NULL, NULL);
        cJSON *pa = all ? cJSON_Parse(all) : NULL, *pq = queued ? cJSON_Parse(queued) : NULL;
        cJSON *pf = after ? cJSON_Parse(after) : NULL;
        CHECK(cJSON_GetArraySize(pa) == 3, "list all: %s", all ? all : "(null)");
        CHECK(cJSON_GetArraySize(pq) == 1, "list queued: %s", queued ? queued : "(null)");
        CHECK(cJSON_GetArraySize(pf) == 1 &&
                  strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(pf, 0), "status")),
                         "running") == 0,
              "list after a, limit 1: %s", after ? after : "(null)");
        CHECK(none && strcmp(none, "[]") == 0, "list past the end: %s", none ? none : "(null)");
        cJSON_Delete(pa);
        cJSON_Delete(pq);
        cJSON_Delete(pf);
        free(all);
        free(queued);
        free(after);
        free(none);
    }
    rec = store_get_run(a);
    CHECK(record_has(rec, "status", "done"), "updated record: %s", rec ? rec : "(null)");
    free(rec);
    CHECK(store_update_run(9999, "done", -1, "{}") == -1, "update of a missing run fails");
    CHECK(store_get_run(9999) == NULL, "get of a missing run is NULL");
    {
        char status[16] = "";
        CHECK(store_get_run_status(a, status, sizeof status) == 1 && !strcmp(status, "done"), "status column: %s",
              status);
        CHECK(store_get_run_status(9999, status, sizeof status) == 0, "status of a missing run");
    }

    /* As the pool writes a live run: "finished" is null until the end. */
    d = store_insert_run("2026-12-02T10:31:08.000Z", "reference", "cpu", "running", -1,
                         "{\"id\":0,\"status\":\"running\",\"created\":\"2026-12-02T10:31:08.000Z\",\"finished\":null}");
    CHECK(d > c, "id of a live run");
    CHECK(store_delete_run(c) == 0, "delete");
    CHECK(store_get_run(c) == NULL, "deleted run gone");
    CHECK(store_delete_run(c) == -1, "second delete fails");
    CHECK(store_count_runs() == 3, "three rows");
    store_close();

    /* Reopen: persisted; b was left running, so it is failed now with the reason. */
    CHECK(store_open(sub, err, sizeof err) == 0, "reopen: %s", err);
    CHECK(store_count_runs() == 3, "three rows after reopen");
    rec = store_get_run(a);
    CHECK(record_has(rec, "status", "done"), "done run untouched: %s", rec ? rec : "(null)");
    free(rec);
    rec = store_get_run(b);
    CHECK(record_has(rec, "status", "failed"), "running run failed: %s", rec ? rec : "(null)");
    if (rec) {
        cJSON *o = cJSON_Parse(rec), *e = cJSON_GetObjectItem(o, "error");
        cJSON *code = cJSON_GetObjectItem(e, "code"), *msg = cJSON_GetObjectItem(e, "message");
        CHECK(cJSON_IsString(code) && strcmp(code->valuestring, "server_restarted") == 0, "error code");
        CHECK(cJSON_IsString(msg) && strcmp(msg->valuestring, "server restarted before the job finished") == 0,
              "error message");
        cJSON_Delete(o);
    }
    free(rec);
    /* A live record's "finished": null becomes the time it was marked, in the same place, so
     * a poller waiting for "finished" stops. */
    rec = store_get_run(d);
    CHECK(record_has(rec, "status", "failed"), "live run failed: %s", rec ? rec : "(null)");
    if (rec) {
        cJSON *o = cJSON_Parse(rec), *f = cJSON_GetObjectItem(o, "finished");
        CHECK(cJSON_IsString(f) && strlen(f->valuestring) == 24 && f->valuestring[23] == 'Z',
              "finished set: %s", rec);
        CHECK(o && o->child && o->child->next && o->child->next->next && o->child->next->next->next == f,
              "finished kept its place (4th member): %s", rec);
        cJSON_Delete(o);
    }
    free(rec);
    rec = store_get_run(b);
    {
        cJSON *o = rec ? cJSON_Parse(rec) : NULL;
        CHECK(cJSON_IsString(cJSON_GetObjectItem(o, "finished")), "finished added where absent: %s", rec ? rec : "");
        cJSON_Delete(o);
    }
    free(rec);
    /* ids keep growing past deleted ones (AUTOINCREMENT). */
    CHECK(store_insert_run("2026-12-02T10:32:00.000Z", "math", "cpu", "queued", -1, "{}") > c, "id after reopen");
    store_close();

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return CHECK_DONE();
}
