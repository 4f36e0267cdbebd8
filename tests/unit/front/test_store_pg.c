/* test_store_pg.c — the fleet history in a real PostgreSQL (ATTND_TEST_PG, which `make test`
 * sets by running the tests under tests/pg/pg_server.py): migrations that run once, instance
 * numbers, idempotent writes, fleet positions in commit order, deletes, traces, the filtered
 * cursor, heartbeats, a reconnect after the server cut the connection, and an unreachable
 * database that fails fast without showing the password. Each run uses a database of its own. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "common/clock.h"
#include "server/front/store/store_pg.h"

#include <cjson/cJSON.h>
#include <libpq-fe.h>

/* A side connection (not the store's) that checks what the store wrote. */
static PGconn *side;

/* The first cell of sql on the side connection, malloc'd; NULL on error or no row. */
static char *side_value(const char *sql)
{
    PGresult *res = PQexec(side, sql);
    char *v = NULL;

    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0 && !PQgetisnull(res, 0, 0))
        v = strdup(PQgetvalue(res, 0, 0));
    else if (!res || PQresultStatus(res) != PGRES_TUPLES_OK)
        fprintf(stderr, "side query %s: %s", sql, PQerrorMessage(side));
    PQclear(res);
    return v;
}

static long long side_number(const char *sql)
{
    char *v = side_value(sql);
    long long n = v ? atoll(v) : -1;
    free(v);
    return n;
}

/* A RUN write of run `id` (uuid built from it) at version, with a small record. */
static store_pg_write run_write(long long id, int version, const char *backend, const char *status,
                                const char *node, const char *created, char *uuid, char *record)
{
    store_pg_write w = {.kind = STORE_PG_RUN};

    sprintf(uuid, "00000000-0000-4000-8000-%012lld", id % 1000000000000LL); /* 12 digits, 37 bytes */
    sprintf(record, "{\"id\":%lld,\"status\":\"%s\",\"v\":%d}", id, status, version);
    w.id = id;
    w.uuid = uuid;
    w.node = node;
    w.created = created;
    w.backend = backend;
    w.device = strcmp(backend, "math") == 0 ? "cpu" : "cuda:0";
    w.status = status;
    w.version = version;
    w.median_us = -1;
    w.text = record;
    return w;
}

static int apply_run(long long id, int version, const char *backend, const char *status, const char *node,
                     const char *created)
{
    char uuid[40], record[128];
    store_pg_write w = run_write(id, version, backend, status, node, created, uuid, record);
    return store_pg_apply(&w, 1);
}

/* The ids in a JSON array of records, in order, as "101,102"; "" for none, "?" unparsable. */
static void ids_of(const char *json, char *out, size_t len)
{
    cJSON *a = json ? cJSON_Parse(json) : NULL, *r;
    size_t n = 0;

    out[0] = '\0';
    if (!cJSON_IsArray(a)) {
        snprintf(out, len, "?");
        cJSON_Delete(a);
        return;
    }
    cJSON_ArrayForEach(r, a) n += (size_t)snprintf(out + n, len - n, "%s%d", n ? "," : "",
                                                    (int)cJSON_GetNumberValue(cJSON_GetObjectItem(r, "id")));
    cJSON_Delete(a);
}

/* The ids the cursor query answers, with its next cursor in *last. */
static void query_ids(char *out, size_t len, long long after, int limit, const char *backend, const char *status,
                      const char *device, const char *node, const char *since, long long *last)
{
    store_run_query q = {.after = after, .limit = limit, .since = since && *since ? since : NULL};
    char *json;

    q.value[STORE_FIELD_BACKEND] = backend && *backend ? backend : NULL;
    q.value[STORE_FIELD_STATUS] = status && *status ? status : NULL;
    q.value[STORE_FIELD_DEVICE] = device && *device ? device : NULL;
    q.value[STORE_FIELD_NODE] = node && *node ? node : NULL;
    json = store_pg_query_runs(&q, NULL, last);
    ids_of(json, out, len);
    free(json);
}

/* Many threads writing new runs at once: each gets its own position. */
#define WRITER_THREADS 4
#define WRITES_PER_THREAD 25
static void *writer(void *arg)
{
    long long base = 1000 + 100 * (long long)(size_t)arg, i;
    for (i = 0; i < WRITES_PER_THREAD; i++)
        if (apply_run(base + i, 1, "naive", "queued", "node-c", "2026-12-03T09:00:00.000Z") != 0) return (void *)1;
    return NULL;
}

int main(void)
{
    const char *server = getenv("ATTND_TEST_PG");
    char dbname[64], conninfo[1024], err[512] = "", ids[512], sql[256], node[64];
    long long a, b, last, seq1;
    char *rec, *v;

    if (!server || !*server) {
        fprintf(stderr, "test_store_pg: ATTND_TEST_PG is not set: run it through `make test`, which starts a "
                        "PostgreSQL (tests/pg/pg_server.py run DIR -- CMD)\n");
        CHECK(0, "ATTND_TEST_PG set");
        return CHECK_DONE();
    }
    side = PQconnectdb(server);
    CHECK(PQstatus(side) == CONNECTION_OK, "connect %s: %s", server, PQerrorMessage(side));
    snprintf(dbname, sizeof dbname, "attnd_unit_store_pg_%d", (int)getpid());
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", dbname);
    {
        PGresult *res = PQexec(side, sql);
        CHECK(PQresultStatus(res) == PGRES_COMMAND_OK, "%s: %s", sql, PQerrorMessage(side));
        PQclear(res);
    }
    PQfinish(side);
    /* A later keyword wins in a conninfo string. */
    snprintf(conninfo, sizeof conninfo, "%s dbname=%s", server, dbname);
    side = PQconnectdb(conninfo);

    /* ---- open, migrations once */
    CHECK(store_pg_open(conninfo, err, sizeof err) == 0, "open: %s", err);
    CHECK(store_pg_connected() == 1, "connected");
    CHECK(side_number("SELECT version FROM attnd_schema") == 4, "schema version 4");
    CHECK(store_pg_open(conninfo, err, sizeof err) == 0, "open again: %s", err);
    CHECK(side_number("SELECT count(*) FROM attnd_schema") == 1, "one schema row");
    CHECK(side_number("SELECT version FROM attnd_schema") == 4, "schema version unchanged");
    CHECK(side_number("SELECT n FROM fleet_position") == 0, "positions start at 0");

    /* ---- instances */
    a = store_pg_register_instance("11111111-1111-4111-8111-111111111111", "node-a");
    b = store_pg_register_instance("22222222-2222-4222-8222-222222222222", "node-b");
    CHECK(a > 0 && b > 0 && a != b, "two instances: %lld %lld", a, b);
    CHECK(store_pg_register_instance("11111111-1111-4111-8111-111111111111", "node-a2") == a, "same uuid, same number");
    CHECK(store_pg_instance_node(a, node, sizeof node) == 1 && strcmp(node, "node-a2") == 0, "node updated: %s", node);
    CHECK(store_pg_instance_node(987654, node, sizeof node) == 0, "unknown instance");
    CHECK(store_pg_register_instance("not-a-uuid", "x") == -1 && store_pg_last_error()[0], "bad uuid: %s",
          store_pg_last_error());

    /* ---- runs: insert, replay, newer, older */
    CHECK(apply_run(101, 1, "flash", "queued", "node-a", "2026-12-03T10:00:00.000Z") == 0, "insert: %s",
          store_pg_last_error());
    seq1 = side_number("SELECT seq FROM runs WHERE id = 101");
    CHECK(seq1 == 1, "first position 1: %lld", seq1);
    {
        char uuid[40], record[128];
        store_pg_write w = run_write(101, 1, "flash", "running", "node-a", "2026-12-03T10:00:00.000Z", uuid, record);
        CHECK(store_pg_apply(&w, 1) == 0, "replay");
        CHECK(store_pg_get_run(101, &rec) == 1 && strstr(rec, "\"queued\""), "replay changes nothing: %s", rec);
        free(rec);
        w = run_write(101, 2, "flash", "done", "node-a", "2026-12-03T10:00:00.000Z", uuid, record);
        w.median_us = 12.5;
        CHECK(store_pg_apply(&w, 1) == 0, "newer version");
        CHECK(store_pg_get_run(101, &rec) == 1 && strstr(rec, "\"done\""), "newer version stored: %s", rec);
        free(rec);
        w = run_write(101, 1, "flash", "queued", "node-a", "2026-12-03T10:00:00.000Z", uuid, record);
        CHECK(store_pg_apply(&w, 1) == 0, "older version");
    }
    CHECK(store_pg_get_run(101, &rec) == 1 && strstr(rec, "\"done\""), "older version ignored: %s", rec);
    free(rec);
    v = side_value("SELECT status || ' ' || version || ' ' || median_us || ' ' || seq FROM runs WHERE id = 101");
    CHECK(v && strcmp(v, "done 2 12.5 1") == 0, "columns follow, position kept: %s", v ? v : "(null)");
    free(v);
    CHECK(store_pg_get_run(999, &rec) == 0 && rec == NULL, "missing run");
    CHECK(side_number("SELECT n FROM fleet_position") == 1, "updates and replays take no position");

    /* ---- positions in apply order; one transaction per apply */
    {
        char u[3][40], r[3][128];
        store_pg_write batch[3] = {
            run_write(102, 1, "math", "done", "node-b", "2026-12-03T11:00:00.000Z", u[0], r[0]),
            run_write(103, 1, "flash", "failed", "node-a", "2026-12-03T12:00:00.000Z", u[1], r[1]),
            run_write(104, 1, "flash", "done", "node-b", "2026-12-03T13:00:00.000Z", u[2], r[2]),
        };
        CHECK(store_pg_apply(batch, 3) == 0, "batch: %s", store_pg_last_error());
        CHECK(apply_run(105, 1, "naive", "done", "node-a", "2026-12-03T14:00:00.000Z") == 0, "single");
        batch[1] = run_write(106, 1, "flash", "done", "node-a", "2026-12-03T15:00:00.000Z", u[1], r[1]);
        batch[2] = run_write(107, 1, "flash", "done", "node-a", "2026-12-03T15:00:00.000Z", u[2], r[2]);
        batch[2].uuid = "not-a-uuid";
        batch[0].version = 2; /* an update of 102 that must roll back with the rest */
        batch[0].status = "failed";
        CHECK(store_pg_apply(batch, 3) == -1, "batch with a bad write fails");
        CHECK(strstr(store_pg_last_error(), "uuid") != NULL, "reason: %s", store_pg_last_error());
        CHECK(store_pg_get_run(106, &rec) == 0, "none of it committed");
        CHECK(side_number("SELECT count(*) FROM runs WHERE id = 102 AND status = 'done'") == 1, "update rolled back");
    }
    v = side_value("SELECT string_agg(id::text, ',' ORDER BY seq) FROM runs");
    CHECK(v && strcmp(v, "101,102,103,104,105") == 0, "positions follow the applies: %s", v ? v : "(null)");
    free(v);
    CHECK(side_number("SELECT count(DISTINCT seq) FROM runs WHERE seq BETWEEN 1 AND 5") == 5, "positions 1..5");
    CHECK(store_pg_count_runs() == 5, "count 5");

    /* ---- traces and deletes */
    {
        store_pg_write t = {.kind = STORE_PG_TRACE}, d = {.kind = STORE_PG_DELETE};
        char *json;
        t.id = 103;
        t.text = "{\"traceEvents\":[]}";
        CHECK(store_pg_apply(&t, 1) == 0, "trace");
        t.text = "{\"traceEvents\":[1]}";
        CHECK(store_pg_apply(&t, 1) == 0, "trace again");
        CHECK(store_pg_get_trace(103, &json) == 1 && strcmp(json, "{\"traceEvents\":[1]}") == 0, "trace replaced: %s",
              json);
        free(json);
        CHECK(store_pg_get_trace(104, &json) == 0, "no trace");
        d.uuid = "00000000-0000-4000-8000-000000000103";
        CHECK(store_pg_apply(&d, 1) == 0, "delete");
        CHECK(store_pg_get_run(103, &rec) == 0, "deleted run gone");
        CHECK(store_pg_get_trace(103, &json) == 0, "its trace gone");
        CHECK(store_pg_apply(&d, 1) == 0, "delete again: nothing to do");
        CHECK(store_pg_count_runs() == 4, "count 4");
    }

    /* ---- studies: insert, a newer version, a replay of an older one; read and list */
    {
        store_pg_write s = {.kind = STORE_PG_STUDY, .id = 201, .uuid = "00000000-0000-4000-8000-000000000201",
                            .node = "node-a", .created = "2026-12-02T10:00:00.000Z", .status = "queued", .version = 1,
                            .text = "{\"id\":201,\"status\":\"queued\",\"tags\":[\"nightly\"]}"};
        store_pg_write other = s;
        store_study_query q = {.limit = 10};
        long long last = 0;
        int count = 0;
        char *json;

        CHECK(store_pg_apply(&s, 1) == 0, "study: %s", store_pg_last_error());
        s.version = 3;
        s.status = "done";
        s.text = "{\"id\":201,\"status\":\"done\",\"tags\":[\"nightly\"]}";
        CHECK(store_pg_apply(&s, 1) == 0, "study, newer");
        s.version = 2;
        s.status = "running";
        s.text = "{\"id\":201,\"status\":\"running\",\"tags\":[\"nightly\"]}";
        CHECK(store_pg_apply(&s, 1) == 0, "study, an older version replayed");
        CHECK(store_pg_get_study(201, &json) == 1 && strstr(json, "\"done\"") != NULL, "the newest kept: %s", json);
        free(json);
        CHECK(store_pg_get_study(202, &json) == 0, "no such study");
        other.id = 202;
        other.uuid = "00000000-0000-4000-8000-000000000202";
        other.text = "{\"id\":202,\"status\":\"queued\",\"tags\":[]}";
        CHECK(store_pg_apply(&other, 1) == 0, "a second study");
        json = store_pg_list_studies(&q, &last, &count);
        CHECK(json && count == 2 && strstr(json, "202") < strstr(json, "201"), "newest first: %s", json ? json : "");
        free(json);
        q.tag = "nightly";
        json = store_pg_list_studies(&q, &last, &count);
        CHECK(json && count == 1 && strstr(json, "201"), "by tag: %s", json ? json : "");
        free(json);
        q.tag = NULL;
        q.status = "queued";
        json = store_pg_list_studies(&q, &last, &count);
        CHECK(json && count == 1 && strstr(json, "202"), "by status: %s", json ? json : "");
        free(json);
        q.status = NULL;
        q.before = last; /* 202's position: the older one comes */
        json = store_pg_list_studies(&q, &last, &count);
        CHECK(json && count == 1 && strstr(json, "201"), "before 202: %s", json ? json : "");
        free(json);
        q.before = last;
        json = store_pg_list_studies(&q, &last, &count);
        CHECK(json && count == 0 && strcmp(json, "[]") == 0, "before the oldest: nothing: %s", json ? json : "");
        free(json);
    }

    /* ---- the cursor and its filters */
    query_ids(ids, sizeof ids, 0, 100, NULL, NULL, NULL, NULL, NULL, &last);
    CHECK(strcmp(ids, "101,102,104,105") == 0 && last == 5, "all: %s last %lld", ids, last);
    query_ids(ids, sizeof ids, 0, 2, "", "", "", "", "", &last);
    CHECK(strcmp(ids, "101,102") == 0 && last == 2, "limit 2: %s last %lld", ids, last);
    query_ids(ids, sizeof ids, last, 2, NULL, NULL, NULL, NULL, NULL, &last);
    CHECK(strcmp(ids, "104,105") == 0 && last == 5, "next page: %s last %lld", ids, last);
    query_ids(ids, sizeof ids, last, 2, NULL, NULL, NULL, NULL, NULL, &last);
    CHECK(strcmp(ids, "") == 0 && last == 5, "past the end: %s last %lld", ids, last);
    query_ids(ids, sizeof ids, 0, 100, "flash", NULL, NULL, NULL, NULL, &last);
    CHECK(strcmp(ids, "101,104") == 0 && last == 4, "backend: %s", ids);
    query_ids(ids, sizeof ids, 0, 100, NULL, "done", "cuda:0", NULL, NULL, NULL);
    CHECK(strcmp(ids, "101,104,105") == 0, "status + device: %s", ids);
    query_ids(ids, sizeof ids, 0, 100, NULL, NULL, "cpu", NULL, NULL, NULL);
    CHECK(strcmp(ids, "102") == 0, "device: %s", ids);
    query_ids(ids, sizeof ids, 0, 100, NULL, NULL, NULL, "node-b", NULL, NULL);
    CHECK(strcmp(ids, "102,104") == 0, "node: %s", ids);
    query_ids(ids, sizeof ids, 0, 100, "flash", "done", "cuda:0", "node-b", "2026-12-03T12:30:00.000Z", NULL);
    CHECK(strcmp(ids, "104") == 0, "every filter: %s", ids);
    query_ids(ids, sizeof ids, 1, 100, NULL, NULL, NULL, NULL, "2026-12-03T13:00:00.000Z", &last);
    CHECK(strcmp(ids, "104,105") == 0 && last == 5, "since (inclusive): %s", ids);
    query_ids(ids, sizeof ids, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL);
    CHECK(strcmp(ids, "101") == 0, "limit clamped to 1: %s", ids);

    /* ---- concurrent writers: one position each */
    {
        pthread_t t[WRITER_THREADS];
        void *bad;
        size_t i;
        int failed = 0;
        for (i = 0; i < WRITER_THREADS; i++) pthread_create(&t[i], NULL, writer, (void *)i);
        for (i = 0; i < WRITER_THREADS; i++) failed += pthread_join(t[i], &bad) != 0 || bad != NULL;
        CHECK(failed == 0, "writers");
        CHECK(store_pg_count_runs() == 4 + WRITER_THREADS * WRITES_PER_THREAD, "all written");
        CHECK(side_number("SELECT count(DISTINCT seq) FROM runs") == 4 + WRITER_THREADS * WRITES_PER_THREAD,
              "distinct positions");
    }

    /* ---- heartbeats */
    CHECK(store_pg_heartbeat(a, "node-a", "0.1.0", "[{\"name\":\"cuda:0\"}]", "2026-12-03T09:00:00.000Z") == 0,
          "heartbeat a: %s", store_pg_last_error());
    CHECK(store_pg_heartbeat(b, "node-b", "0.1.0", NULL, "2026-12-03T09:00:01.000Z") == 0, "heartbeat b");
    CHECK(store_pg_heartbeat(a, "node-a", "0.1.1", "[{\"name\":\"cuda:0\"}]", "2026-12-03T09:00:00.000Z") == 0,
          "heartbeat a again");
    CHECK(store_pg_heartbeat(987654, "ghost", "0.1.0", "[]", "2026-12-03T09:00:00.000Z") == -1,
          "heartbeat of an unknown instance");
    {
        char *json = store_pg_nodes_json();
        cJSON *all = json ? cJSON_Parse(json) : NULL, *n0 = cJSON_GetArrayItem(all, 0), *n1 = cJSON_GetArrayItem(all, 1);
        const char *beat = cJSON_GetStringValue(cJSON_GetObjectItem(n0, "last_heartbeat"));
        double age = cJSON_GetNumberValue(cJSON_GetObjectItem(n0, "heartbeat_age_s"));
        CHECK(cJSON_GetArraySize(all) == 2, "two nodes: %s", json ? json : "(null)");
        CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(n0, "node")), "node-a") == 0 &&
                  cJSON_GetNumberValue(cJSON_GetObjectItem(n0, "instance")) == (double)a,
              "ordered by node: %s", json);
        CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(n0, "version")), "0.1.1") == 0, "latest beat: %s", json);
        CHECK(cJSON_IsArray(cJSON_GetObjectItem(n0, "devices")) &&
                  cJSON_GetArraySize(cJSON_GetObjectItem(n0, "devices")) == 1,
              "devices nested: %s", json);
        CHECK(cJSON_IsNull(cJSON_GetObjectItem(n1, "devices")), "no devices: null: %s", json);
        CHECK(beat && strlen(beat) == 24 && beat[10] == 'T' && beat[23] == 'Z', "heartbeat time: %s", beat);
        CHECK(age >= 0 && age < 60, "heartbeat age: %g", age);
        cJSON_Delete(all);
        free(json);
    }

    /* ---- the server cuts the connection: one call fails, the next reconnects */
    snprintf(sql, sizeof sql,
             "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
             " WHERE datname = '%s' AND application_name = 'attnd'",
             dbname);
    CHECK(side_number(sql) == 1, "the store's backend terminated");
    store_pg_count_runs(); /* finds the connection gone */
    CHECK(store_pg_count_runs() == 104, "reconnected: %s", store_pg_last_error());
    CHECK(store_pg_connected() == 1, "connected again");
    CHECK(side_number("SELECT version FROM attnd_schema") == 4, "still version 4");

    /* ---- the PG* environment alone: the bare word */
    {
        PQconninfoOption *opts = PQconninfoParse(conninfo, NULL), *o;
        for (o = opts; o && o->keyword; o++) {
            if (!o->val) continue;
            if (strcmp(o->keyword, "host") == 0) setenv("PGHOST", o->val, 1);
            if (strcmp(o->keyword, "port") == 0) setenv("PGPORT", o->val, 1);
            if (strcmp(o->keyword, "user") == 0) setenv("PGUSER", o->val, 1);
            if (strcmp(o->keyword, "dbname") == 0) setenv("PGDATABASE", o->val, 1);
        }
        PQconninfoFree(opts);
        CHECK(store_pg_open("postgresql", err, sizeof err) == 0, "open from the environment: %s", err);
        CHECK(store_pg_count_runs() == 104, "same database");
    }

    /* ---- nobody there: fails fast, names the place, hides the password */
    {
        char none[] = "/tmp/attnd-no-server-XXXXXX", bad[512];
        double t0;
        CHECK(mkdtemp(none) != NULL, "mkdtemp");
        snprintf(bad, sizeof bad, "host=%s port=5432 user=attnd password=sekrit dbname=x", none);
        t0 = clock_monotonic_s();
        CHECK(store_pg_open(bad, err, sizeof err) == -1, "open of nothing fails");
        CHECK(clock_monotonic_s() - t0 < 5, "within 5 s: %.1f s", clock_monotonic_s() - t0);
        CHECK(strstr(err, none) && strstr(store_pg_last_error(), none), "names the host: %s", err);
        CHECK(!strstr(err, "sekrit"), "no password: %s", err);
        CHECK(store_pg_connected() == 0, "not connected");
        CHECK(store_pg_count_runs() == -1 && strstr(store_pg_last_error(), none), "calls fail: %s",
              store_pg_last_error());
        rmdir(none);
    }
    store_pg_close();
    CHECK(store_pg_count_runs() == -1, "closed");

    PQfinish(side);
    side = PQconnectdb(server);
    snprintf(sql, sizeof sql, "DROP DATABASE %s WITH (FORCE)", dbname);
    PQclear(PQexec(side, sql));
    PQfinish(side);
    return CHECK_DONE();
}
