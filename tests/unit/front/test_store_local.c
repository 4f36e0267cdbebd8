/* test_store_local.c — the local SQLite store's fleet parts: the outbox written in the same
 * transaction as each change (and read back with the run's latest state), the id base of a
 * fleet instance, the instance's facts, the heartbeat table, the interrupted runs' outbox
 * rows, and the migration of a file made before schema version 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "tests/unit/check.h"
#include "server/front/store/store_local.h"
#include "server/front/store/store_local_outbox.h"

static const char *UUID_A = "8a1e7f6c-3b2d-4c5e-9f10-112233445566";

/* Make a schema-version-1 file (what attnd wrote before the fleet) with one done run. */
static int make_v1_file(const char *dir)
{
    char path[300];
    sqlite3 *db;
    int rc;

    snprintf(path, sizeof path, "%s/attnd.db", dir);
    if (sqlite3_open(path, &db) != SQLITE_OK) return -1;
    rc = sqlite3_exec(db,
                      "CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, created TEXT NOT NULL, backend TEXT,"
                      " device TEXT, status TEXT, record TEXT NOT NULL);"
                      "CREATE TABLE traces (run_id INTEGER PRIMARY KEY, json TEXT NOT NULL);"
                      "CREATE TABLE tensor_ids (id INTEGER PRIMARY KEY AUTOINCREMENT, device TEXT NOT NULL,"
                      " created TEXT NOT NULL);"
                      "INSERT INTO runs(created, backend, device, status, record) VALUES"
                      " ('2026-01-01T00:00:00.000Z', 'math', 'cuda:0', 'done', '{\"id\":1,\"status\":\"done\"}');",
                      NULL, NULL, NULL);
    sqlite3_close(db);
    return rc == SQLITE_OK ? 0 : -1;
}

int main(void)
{
    char dir[] = "/tmp/attnd-test-store-local-XXXXXX", err[512] = "", cmd[300], value[64];
    store_local_outbox_entry e[16];
    long long a, b, base = 3LL << 32;
    char *rec, *nodes;
    int n, i;

    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    CHECK(make_v1_file(dir) == 0, "a version-1 file");

    /* Migration keeps the old run and adds the fleet's columns and tables. */
    CHECK(store_local_open(dir, 1, err, sizeof err) == 0, "open with the outbox: %s", err);
    rec = store_local_get_run(1);
    CHECK(rec && strstr(rec, "\"done\""), "the old run survived the migration: %s", rec ? rec : "(null)");
    free(rec);
    CHECK(store_local_outbox_depth() == 0, "an old done run is not sent");

    /* Instance facts and the id base. */
    CHECK(store_local_state_get("instance", value, sizeof value) == 0, "no instance yet");
    CHECK(store_local_state_set("instance", "3") == 0 && store_local_state_get("instance", value, sizeof value) == 1 &&
              !strcmp(value, "3"),
          "instance kept");
    CHECK(store_local_set_id_base(base) == 0, "id base");
    a = store_local_insert_run("2026-12-03T10:00:00.000Z", "flash", "cuda:0", "queued", -1, "{\"id\":0,\"status\":\"queued\"}",
                         UUID_A, "gpu-7");
    CHECK(a == base + 1, "the first id of instance 3 is 3·2^32 + 1: %lld", a);
    CHECK(store_local_tensor_issue("cuda:0") == base + 1, "tensor ids too");
    CHECK(store_local_set_id_base(1) == 0, "a lower base changes nothing");
    rec = store_local_get_run(a);
    CHECK(rec && !strncmp(rec, "{\"id\":12884901889,", 18), "the record got its id: %s", rec ? rec : "(null)");
    free(rec);

    /* Three changes: three outbox rows, each read with the run as it is now. */
    CHECK(store_local_update_run(a, "running", -1, "{\"id\":12884901889,\"status\":\"running\"}") == 0, "running");
    CHECK(store_local_update_run(a, "done", 42.5, "{\"id\":12884901889,\"status\":\"done\"}") == 0, "done");
    CHECK(store_local_put_trace(a, "{\"traceEvents\":[]}") == 0, "trace");
    CHECK(store_local_outbox_depth() == 4, "four writes waiting: %lld", store_local_outbox_depth());
    n = store_local_outbox_peek(e, 16);
    CHECK(n == 4, "peek: %d", n);
    for (i = 0; i < 3 && i < n; i++)
        CHECK(e[i].kind == OUTBOX_RUN && e[i].has_run && e[i].version == 3 && !strcmp(e[i].status, "done") &&
                  !strcmp(e[i].uuid, UUID_A) && !strcmp(e[i].node, "gpu-7") && !strcmp(e[i].backend, "flash"),
              "entry %d: the run's latest state (version %d, %s)", i, e[i].version, e[i].status ? e[i].status : "-");
    CHECK(n >= 1 && e[0].median_us == 42.5, "the median travels as a column, not read from the record: %g",
          n >= 1 ? e[0].median_us : 0.0);
    CHECK(n == 4 && e[3].kind == OUTBOX_TRACE && e[3].trace && !strcmp(e[3].trace, "{\"traceEvents\":[]}"),
          "the trace entry carries it");
    CHECK(n >= 2 && e[0].seq < e[1].seq, "oldest first");
    if (n >= 2) CHECK(store_local_outbox_drop_through(e[1].seq) == 0, "drop the first two");
    store_local_outbox_entries_free(e, n > 0 ? n : 0);
    CHECK(store_local_outbox_depth() == 2, "two left");

    /* A refused run: inserted and deleted, the delete travels with its uuid. */
    b = store_local_insert_run("2026-12-03T10:00:01.000Z", "flash", "cuda:0", "queued", -1, "{\"id\":0}",
                         "00000000-0000-4000-8000-000000000001", "gpu-7");
    CHECK(b == base + 2, "next id");
    CHECK(store_local_delete_run(b) == 0, "delete");
    n = store_local_outbox_peek(e, 16);
    CHECK(n == 4 && e[2].kind == OUTBOX_RUN && !e[2].has_run, "the insert of a deleted run has nothing to send");
    CHECK(n == 4 && e[3].kind == OUTBOX_DELETE && e[3].uuid && !strcmp(e[3].uuid, "00000000-0000-4000-8000-000000000001"),
          "the delete names its uuid");
    store_local_outbox_entries_free(e, n > 0 ? n : 0);

    /* Node filter of the local history. */
    {
        store_run_query q = {.limit = 100};
        q.value[STORE_FIELD_NODE] = "gpu-7";
        rec = store_local_query_runs(&q, NULL, NULL);
    }
    CHECK(rec && strstr(rec, "12884901889") && !strstr(rec, "\"id\":1,"), "node=gpu-7: %s", rec ? rec : "(null)");
    free(rec);
    {
        store_run_query q = {.limit = 100};
        q.value[STORE_FIELD_STATUS] = "done";
        q.value[STORE_FIELD_NODE] = "other";
        rec = store_local_query_runs(&q, NULL, NULL);
    }
    CHECK(rec && !strcmp(rec, "[]"), "node=other: %s", rec ? rec : "(null)");
    free(rec);

    /* Heartbeat. */
    CHECK(store_local_heartbeat(3, "gpu-7", "0.1.0 (abc)", "[{\"id\":\"cuda:0\"}]", "2026-12-03T09:59:00.000Z") == 0, "beat");
    CHECK(store_local_heartbeat(3, "gpu-7", "0.1.0 (abc)", "[{\"id\":\"cuda:0\"}]", "2026-12-03T09:59:00.000Z") == 0, "again");
    nodes = store_local_nodes_json();
    {
        cJSON *o = nodes ? cJSON_Parse(nodes) : NULL, *first = cJSON_GetArrayItem(o, 0);
        CHECK(cJSON_GetArraySize(o) == 1, "one node: %s", nodes ? nodes : "(null)");
        CHECK(first && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(first, "node")), "gpu-7") &&
                  cJSON_GetArraySize(cJSON_GetObjectItem(first, "devices")) == 1 &&
                  cJSON_GetNumberValue(cJSON_GetObjectItem(first, "heartbeat_age_s")) < 60,
              "its fields: %s", nodes ? nodes : "(null)");
        cJSON_Delete(o);
    }
    free(nodes);

    /* A run left running is failed at the next open, and that change is sent too. */
    CHECK(store_local_update_run(a, "running", -1, "{\"id\":12884901889,\"status\":\"running\",\"finished\":null}") == 0,
          "back to running");
    store_local_close();
    CHECK(store_local_open(dir, 1, err, sizeof err) == 0, "reopen: %s", err);
    CHECK(store_local_mark_interrupted(NULL) == 0, "mark the interrupted runs");
    n = store_local_outbox_peek(e, 16);
    CHECK(n == 6 && e[5].kind == OUTBOX_RUN && !strcmp(e[5].status, "failed") && e[5].version == 5,
          "interrupted: failed, version 5, in the outbox (%d entries)", n);
    store_local_outbox_entries_free(e, n > 0 ? n : 0);
    CHECK(store_local_insert_run("2026-12-03T10:01:00.000Z", "flash", "cuda:0", "queued", -1, "{\"id\":0}",
                           "00000000-0000-4000-8000-000000000002", "gpu-7") == base + 3,
          "ids go on in the instance's range after a reopen");

    /* Studies: ids from the instance's range (the same numbers as runs': the outbox must not
     * join a study's row to a run), their outbox rows, the list, and an interrupted one. */
    {
        long long s1, s2, last = 0;
        int count = 0, before = (int)store_local_outbox_depth();
        store_study_query q = {.limit = 10};
        char *page;

        s1 = store_local_insert_study("2026-12-03T10:02:00.000Z", "queued", "{\"id\":0,\"status\":\"queued\",\"tags\":[\"x\"]}",
                                      "00000000-0000-4000-8000-000000000011", "gpu-7");
        CHECK(s1 == base + 1, "the first study id is the instance's first: %lld", s1);
        rec = store_local_get_study(s1);
        CHECK(rec && !strncmp(rec, "{\"id\":12884901889,", 18), "the study got its id: %s", rec ? rec : "(null)");
        free(rec);
        CHECK(store_local_update_study(s1, "running", "{\"id\":12884901889,\"status\":\"running\",\"tags\":[\"x\"]}") == 0,
              "running");
        CHECK(store_local_update_study(999, "done", "{}") == 1, "no such study");
        s2 = store_local_insert_study("2026-12-03T10:03:00.000Z", "done", "{\"id\":0,\"status\":\"done\",\"tags\":[]}",
                                      "00000000-0000-4000-8000-000000000012", "gpu-7");
        n = store_local_outbox_peek(e, 16);
        CHECK(n == before + 3 && e[n - 3].kind == OUTBOX_STUDY && e[n - 3].has_run && e[n - 3].version == 2 &&
                  !strcmp(e[n - 3].status, "running") && !strcmp(e[n - 3].uuid, "00000000-0000-4000-8000-000000000011") &&
                  e[n - 3].backend == NULL && strstr(e[n - 3].record, "\"running\""),
              "a study's outbox rows carry the study, not the run of the same id (%d entries)", n);
        store_local_outbox_entries_free(e, n > 0 ? n : 0);
        page = store_local_list_studies(&q, &last, &count);
        CHECK(page && count == 2 && last == s1 && strstr(page, "12884901890") < strstr(page, "12884901889"),
              "newest first: %s", page ? page : "(null)");
        free(page);
        q.tag = "x";
        page = store_local_list_studies(&q, &last, &count);
        CHECK(page && count == 1 && strstr(page, "12884901889"), "by tag: %s", page ? page : "(null)");
        free(page);
        q.tag = NULL;
        q.status = "done";
        page = store_local_list_studies(&q, &last, &count);
        CHECK(page && count == 1 && last == s2, "by status: %s", page ? page : "(null)");
        free(page);
        CHECK(store_local_mark_studies_interrupted() == 0, "mark");
        rec = store_local_get_study(s1);
        CHECK(rec && strstr(rec, "\"failed\"") && strstr(rec, "server_restarted") && strstr(rec, "\"finished\":"),
              "the running study failed with server_restarted: %s", rec ? rec : "(null)");
        free(rec);
        rec = store_local_get_study(s2);
        CHECK(rec && strstr(rec, "\"done\"") && !strstr(rec, "server_restarted"), "a done one stays: %s", rec ? rec : "");
        free(rec);
    }
    store_local_close();

    /* Without the outbox (store=sqlite), nothing is queued. */
    CHECK(store_local_open(dir, 0, err, sizeof err) == 0, "open without outbox: %s", err);
    n = (int)store_local_outbox_depth();
    CHECK(store_local_update_run(a, "done", -1, "{\"id\":12884901889,\"status\":\"done\"}") == 0, "update");
    CHECK(store_local_outbox_depth() == n, "no new outbox row");
    store_local_close();

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return CHECK_DONE();
}
