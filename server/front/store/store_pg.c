/* store_pg.c — the fleet history in PostgreSQL through libpq (store_pg.h).
 *
 * One connection, serialized by pg_mu: a libpq connection runs one query at a time, and a
 * transaction (store_pg_apply) must not interleave with another thread's statements. Every
 * public function enters through pg_enter (take pg_mu; connect, migrate and prepare when no
 * connection is there), runs the named statements of server/front/store/store_pg_schema.c and leaves
 * through pg_leave, which records whether the database was found and releases pg_mu.
 *
 * Every libpq result is checked where it is made (pg_exec, pg_simple, the runs query); a
 * failure logs the reason with the statement's name and, when the reason is a lost
 * connection, drops it so that the next call connects again.
 */
#include "server/front/store/store_pg.h"

#include "common/clock.h"
#include "common/log.h"
#include "server/front/store/store_pg_schema.h"
#include "server/front/store/store_query.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <libpq-fe.h>

/* After a connect that failed by timing out (an unreachable host, not a refusal), calls
 * fail at once for this long: otherwise every request would wait connect_timeout in turn. */
#define PG_RETRY_AFTER_MS 2000
#define PG_SLOW_CONNECT_MS 1000

static pthread_mutex_t pg_mu = PTHREAD_MUTEX_INITIALIZER;
static PGconn *pg_conn;             /* NULL: the next call connects */
static char *pg_conninfo;           /* the `store` setting as given; NULL: not open */
static long long pg_retry_at_ms;    /* clock_monotonic_ms before which no connect is tried */
static char pg_connect_error[512];  /* why the last connect failed, for calls in the pause */
static int pg_found;                /* store_pg_connected(); read without pg_mu (atomic) */
static _Thread_local char pg_error[512];

/* ----------------------------------------------------------------------- errors -- */

/* An outage repeats one failure at every retry, heartbeat and read: the same text is logged
 * once a minute at most (the repeats at debug level, counted in the next line). */
#define PG_LOG_REPEAT_MS 60000
static pthread_mutex_t pg_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char pg_logged[512];
static double pg_logged_ms;
static long pg_log_repeats;

static void pg_log_failure(const char *text)
{
    double now = clock_monotonic_ms();

    pthread_mutex_lock(&pg_log_mu);
    if (!strcmp(text, pg_logged) && now - pg_logged_ms < PG_LOG_REPEAT_MS) {
        pg_log_repeats++;
        log_debug("store_pg: %s", text);
    } else {
        if (pg_log_repeats) log_error("store_pg: %s (and %ld times more since the last line)", text, pg_log_repeats);
        else log_error("store_pg: %s", text);
        snprintf(pg_logged, sizeof pg_logged, "%s", text);
        pg_logged_ms = now;
        pg_log_repeats = 0;
    }
    pthread_mutex_unlock(&pg_log_mu);
}

/* Set the calling thread's reason, on one line (libpq's messages end in newlines and may
 * continue with a tab-indented hint), and log it. */
static void pg_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void pg_fail(const char *fmt, ...)
{
    va_list ap;
    char *from, *to;

    va_start(ap, fmt);
    vsnprintf(pg_error, sizeof pg_error, fmt, ap);
    va_end(ap);
    for (from = to = pg_error; *from; from++) { /* each run of blanks becomes one space */
        int blank = *from == ' ' || *from == '\n' || *from == '\t';
        if (!blank)
            *to++ = *from;
        else if (to > pg_error && to[-1] != ' ')
            *to++ = ' ';
    }
    if (to > pg_error && to[-1] == ' ') to--;
    *to = '\0';
    pg_log_failure(pg_error);
}

/* Where conn points, for messages: never the conninfo, which may hold a password. */
static void pg_where(PGconn *conn, char *buf, size_t len)
{
    const char *host = conn ? PQhost(conn) : NULL, *port = conn ? PQport(conn) : NULL;
    const char *db = conn ? PQdb(conn) : NULL;

    snprintf(buf, len, "host %s port %s database %s", host && *host ? host : "(default)",
             port && *port ? port : "(default)", db && *db ? db : "(default)");
}

static void pg_drop(void)
{
    if (pg_conn) PQfinish(pg_conn);
    pg_conn = NULL;
}

/* libpq prints notices ("relation already exists, skipping") on stderr unless told. */
static void pg_notice(void *arg, const char *message)
{
    log_debug("store_pg: %s", message);
}

/* Record the failure of what (a statement's name) and drop the connection when it is lost:
 * libpq says so, or the error is libpq's own (no SQLSTATE: "server closed the connection
 * unexpectedly" comes while PQstatus still says CONNECTION_OK), or the server reported a
 * connection exception (class 08) or its own shutdown (57P01..57P03). */
static void pg_fail_result(const char *what, PGresult *res)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    char where[300];

    pg_where(pg_conn, where, sizeof where);
    pg_fail("%s failed (%s): %s", what, where, res ? PQresultErrorMessage(res) : PQerrorMessage(pg_conn));
    if (PQstatus(pg_conn) != CONNECTION_OK || !state || strncmp(state, "08", 2) == 0 || strncmp(state, "57P0", 4) == 0)
        pg_drop();
}

/* Run prepared statement s with text parameters (NULL: SQL NULL). The result on success
 * (the caller clears it), else NULL with the failure recorded. */
static PGresult *pg_exec(store_pg_statement s, int n, const char *const *values)
{
    PGresult *res = PQexecPrepared(pg_conn, store_pg_statement_name(s), n, values, NULL, NULL, 0);
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;

    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return res;
    pg_fail_result(store_pg_statement_name(s), res);
    PQclear(res);
    return NULL;
}

/* BEGIN, COMMIT, ROLLBACK. 0, or -1 with the failure recorded. */
static int pg_simple(const char *sql)
{
    PGresult *res = PQexec(pg_conn, sql);
    int ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;

    if (!ok) pg_fail_result(sql, res);
    PQclear(res);
    return ok ? 0 : -1;
}

/* --------------------------------------------------------------------- connection -- */

/* "postgresql" and "postgres" alone name no database: libpq then reads PGHOST, PGDATABASE… */
static int pg_environment_only(const char *conninfo)
{
    return !*conninfo || strcmp(conninfo, "postgresql") == 0 || strcmp(conninfo, "postgres") == 0;
}

/* Connect to pg_conninfo, migrate and prepare. 0, or -1 with the failure recorded. */
static int pg_connect(void)
{
    /* Listed before the expanded dbname, so the same words in the user's string win. */
    const char *keys[] = {"connect_timeout", "tcp_user_timeout", "keepalives", "keepalives_idle",
                          "keepalives_interval", "keepalives_count", "fallback_application_name", "dbname", NULL};
    const char *values[] = {"3", "5000", "1", "30", "10", "3", "attnd", pg_conninfo, NULL};
    long long started_ms = clock_monotonic_ms();
    char where[300], why[400];
    PGconn *conn;
    int version;

    if (pg_environment_only(pg_conninfo)) keys[7] = NULL; /* no dbname: all from PG* */
    conn = PQconnectdbParams(keys, values, 1);
    pg_where(conn, where, sizeof where);
    if (!conn || PQstatus(conn) != CONNECTION_OK) {
        pg_fail("cannot connect to %s: %s", where, conn ? PQerrorMessage(conn) : "out of memory");
        if (conn) PQfinish(conn);
        snprintf(pg_connect_error, sizeof pg_connect_error, "%s", pg_error);
        if (clock_monotonic_ms() - started_ms >= PG_SLOW_CONNECT_MS)
            pg_retry_at_ms = clock_monotonic_ms() + PG_RETRY_AFTER_MS;
        return -1;
    }
    PQsetNoticeProcessor(conn, pg_notice, NULL);
    if (store_pg_schema_migrate(conn, &version, why, sizeof why) < 0 ||
        store_pg_schema_prepare(conn, why, sizeof why) < 0) {
        pg_fail("%s: %s", where, why);
        snprintf(pg_connect_error, sizeof pg_connect_error, "%s", pg_error);
        PQfinish(conn);
        return -1;
    }
    pg_conn = conn;
    pg_connect_error[0] = '\0';
    pthread_mutex_lock(&pg_log_mu);
    pg_logged[0] = '\0'; /* the next outage's first failure is logged at once */
    pg_log_repeats = 0;
    pthread_mutex_unlock(&pg_log_mu);
    log_info("store_pg: connected to %s (schema version %d)", where, version);
    return 0;
}

/* Lock pg_mu and make sure a connection is there. 0, or -1 (pg_mu held either way). */
static int pg_enter(void)
{
    pthread_mutex_lock(&pg_mu);
    pg_error[0] = '\0';
    if (!pg_conninfo) {
        snprintf(pg_error, sizeof pg_error, "the PostgreSQL store is not open");
        return -1;
    }
    if (pg_conn && PQstatus(pg_conn) == CONNECTION_OK) return 0;
    pg_drop();
    if (clock_monotonic_ms() < pg_retry_at_ms) {
        snprintf(pg_error, sizeof pg_error, "%s", pg_connect_error);
        return -1;
    }
    return pg_connect();
}

static void pg_leave(void)
{
    __atomic_store_n(&pg_found, pg_conn != NULL, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pg_mu);
}

int store_pg_open(const char *conninfo, char *err, size_t err_len)
{
    char *copy = strdup(conninfo ? conninfo : "");
    int rc;

    if (!copy) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    pthread_mutex_lock(&pg_mu);
    pg_drop();
    free(pg_conninfo);
    pg_conninfo = copy;
    pg_retry_at_ms = 0;
    pthread_mutex_unlock(&pg_mu);

    rc = pg_enter();
    if (rc < 0) snprintf(err, err_len, "%s", pg_error);
    pg_leave();
    return rc;
}

void store_pg_close(void)
{
    pthread_mutex_lock(&pg_mu);
    pg_drop();
    free(pg_conninfo);
    pg_conninfo = NULL;
    pg_leave();
}

int store_pg_connected(void)
{
    return __atomic_load_n(&pg_found, __ATOMIC_RELAXED);
}

const char *store_pg_last_error(void)
{
    return pg_error;
}

/* ----------------------------------------------------------------------- instances -- */

long long store_pg_register_instance(const char *instance_uuid, const char *node)
{
    const char *values[] = {instance_uuid, node};
    long long instance = -1;
    PGresult *res;

    if (pg_enter() == 0 && (res = pg_exec(PG_INSTANCE_PUT, 2, values))) {
        if (PQntuples(res) == 1) instance = atoll(PQgetvalue(res, 0, 0));
        PQclear(res);
    }
    pg_leave();
    return instance;
}

int store_pg_instance_node(long long instance, char *node, size_t len)
{
    char number[24];
    const char *values[] = {number};
    PGresult *res;
    int rc = -1;

    snprintf(number, sizeof number, "%lld", instance);
    if (pg_enter() == 0 && (res = pg_exec(PG_INSTANCE_NODE, 1, values))) {
        rc = PQntuples(res) == 1;
        if (rc) snprintf(node, len, "%s", PQgetvalue(res, 0, 0));
        PQclear(res);
    }
    pg_leave();
    return rc;
}

/* -------------------------------------------------------------------------- writes -- */

/* One write of store_pg_apply, inside its transaction. 0, or -1 with the failure recorded. */
static int pg_apply_one(const store_pg_write *w)
{
    char id[24], version[16], median[32];
    const char *median_value = NULL;
    PGresult *res;

    snprintf(id, sizeof id, "%lld", w->id);
    switch (w->kind) {
    case STORE_PG_RUN: {
        snprintf(version, sizeof version, "%d", w->version);
        if (w->median_us >= 0) { /* NaN fails the test too: stored NULL */
            snprintf(median, sizeof median, "%.17g", w->median_us);
            median_value = median;
        }
        const char *update[] = {w->uuid, w->status, w->text, version, median_value};
        const char *insert[] = {id, w->uuid, w->node, w->created, w->backend, w->device, w->status, version,
                                median_value, w->text};
        int changed;

        /* Most writes are state changes of a known run: try the update first. Zero rows: a
         * new run, or a replay of a version already stored, which the insert leaves alone. */
        if (!(res = pg_exec(PG_RUN_UPDATE, 5, update))) return -1;
        changed = strcmp(PQcmdTuples(res), "0") != 0;
        PQclear(res);
        if (changed) return 0;
        if (!(res = pg_exec(PG_RUN_INSERT, 10, insert))) return -1;
        PQclear(res);
        return 0;
    }
    case STORE_PG_DELETE: {
        const char *values[] = {w->uuid};
        if (!(res = pg_exec(PG_RUN_DELETE, 1, values))) return -1;
        PQclear(res);
        return 0;
    }
    case STORE_PG_STUDY: {
        snprintf(version, sizeof version, "%d", w->version);
        const char *values[] = {id, w->uuid, w->node, w->created, w->status, version, w->text};
        if (!(res = pg_exec(PG_STUDY_PUT, 7, values))) return -1;
        PQclear(res);
        return 0;
    }
    case STORE_PG_TRACE: {
        const char *values[] = {id, w->text};
        if (!(res = pg_exec(PG_TRACE_PUT, 2, values))) return -1;
        PQclear(res);
        return 0;
    }
    }
    pg_fail("apply: unknown write kind %d", (int)w->kind);
    return -1;
}

int store_pg_apply(const store_pg_write *w, size_t n)
{
    size_t i;
    int rc = -1;

    if (pg_enter() < 0 || pg_simple("BEGIN") < 0) goto out;
    for (i = 0; i < n; i++)
        if (pg_apply_one(&w[i]) < 0) goto rollback;
    /* A COMMIT that fails has rolled back, unless the connection was lost: then nobody knows,
     * and the caller's replay settles it. */
    if (pg_simple("COMMIT") == 0) rc = 0;
    goto out;
rollback:
    if (pg_conn) {
        char why[sizeof pg_error];
        snprintf(why, sizeof why, "%s", pg_error); /* keep the first reason, not ROLLBACK's */
        pg_simple("ROLLBACK");
        snprintf(pg_error, sizeof pg_error, "%s", why);
    }
out:
    pg_leave();
    return rc;
}

/* --------------------------------------------------------------------------- reads -- */

/* The one text of statement s for one bigint parameter: 1 found (*out malloc'd), 0, -1. */
static int pg_get_text(store_pg_statement s, long long key, char **out)
{
    char number[24];
    const char *values[] = {number};
    PGresult *res;
    int rc = -1;

    *out = NULL;
    snprintf(number, sizeof number, "%lld", key);
    if (pg_enter() == 0 && (res = pg_exec(s, 1, values))) {
        rc = 0;
        if (PQntuples(res) == 1) {
            *out = strdup(PQgetvalue(res, 0, 0));
            rc = *out ? 1 : -1;
            if (!*out) pg_fail("%s: out of memory", store_pg_statement_name(s));
        }
        PQclear(res);
    }
    pg_leave();
    return rc;
}

int store_pg_get_run(long long id, char **record)
{
    return pg_get_text(PG_RUN_GET, id, record);
}

int store_pg_get_run_status(long long id, char **status)
{
    return pg_get_text(PG_RUN_STATUS, id, status);
}

int store_pg_get_trace(long long run_id, char **json)
{
    return pg_get_text(PG_TRACE_GET, run_id, json);
}

int store_pg_get_study(long long id, char **record)
{
    return pg_get_text(PG_STUDY_GET, id, record);
}

/* The records of column 0 of res joined as a JSON array ("[a,b]"); the ids of column 1 of its
 * first and last rows into *first and *last (each may be NULL; untouched when res is empty).
 * NULL, reported as `what`, out of memory. */
static char *pg_records_array(PGresult *res, const char *what, long long *first, long long *last)
{
    int i, rows = PQntuples(res);
    size_t len = 0, total = 2;
    char *out;

    for (i = 0; i < rows; i++) total += (size_t)PQgetlength(res, i, 0) + 1;
    if (!(out = malloc(total + 1))) {
        pg_fail("%s: out of memory for %d records", what, rows);
        return NULL;
    }
    out[len++] = '[';
    for (i = 0; i < rows; i++) {
        size_t n_text = (size_t)PQgetlength(res, i, 0);
        if (i > 0) out[len++] = ',';
        memcpy(out + len, PQgetvalue(res, i, 0), n_text);
        len += n_text;
    }
    out[len++] = ']';
    out[len] = '\0';
    if (rows > 0 && first) *first = atoll(PQgetvalue(res, 0, 1));
    if (rows > 0 && last) *last = atoll(PQgetvalue(res, rows - 1, 1));
    return out;
}

char *store_pg_list_studies(const store_study_query *q, long long *last, int *count)
{
    char before[24], limit[16];
    const char *values[] = {q->status, q->tag, before, limit};
    char *out = NULL;
    PGresult *res = NULL;

    *last = q->before;
    *count = 0;
    snprintf(before, sizeof before, "%lld", q->before);
    snprintf(limit, sizeof limit, "%d", q->limit);
    if (pg_enter() < 0 || !(res = pg_exec(PG_STUDY_LIST, 4, values))) goto out;
    if ((out = pg_records_array(res, "studies query", NULL, last))) *count = PQntuples(res);
out:
    PQclear(res);
    pg_leave();
    return out;
}

long long store_pg_count_runs(void)
{
    long long n = -1;
    PGresult *res;

    if (pg_enter() == 0 && (res = pg_exec(PG_RUN_COUNT, 0, NULL))) {
        if (PQntuples(res) == 1) n = atoll(PQgetvalue(res, 0, 0));
        PQclear(res);
    }
    pg_leave();
    return n;
}

/* Run a history statement (store_query.c). Planned on each call with its values (an
 * unnamed statement): a cached generic plan estimates "backend = $4" by the average value
 * and scans the seq index instead, 41 ms against 0.8 ms on 200 000 runs where one in a
 * thousand matched. The result, or NULL with the failure recorded. Under pg_mu. */
static PGresult *pg_query(const store_sql *sql, const char *what)
{
    PGresult *res = PQexecParams(pg_conn, sql->text, sql->n, NULL, sql->value, NULL, NULL, 0);

    if (res && PQresultStatus(res) == PGRES_TUPLES_OK) return res;
    pg_fail_result(what, res);
    PQclear(res);
    return NULL;
}

char *store_pg_query_runs(const store_run_query *q, long long *first, long long *last)
{
    char *out = NULL;
    PGresult *res = NULL;
    store_sql sql;

    if (first) *first = 0;
    if (last) *last = q->newest_first ? q->before : q->after;
    if (store_sql_list(q, STORE_SQL_POSTGRESQL, &sql) != 0) {
        pg_fail("runs query: it does not fit its statement");
        return NULL;
    }
    if (pg_enter() < 0 || !(res = pg_query(&sql, "runs query"))) goto out;
    out = pg_records_array(res, "runs query", first, last);
out:
    PQclear(res);
    pg_leave();
    return out;
}

/* Cell (r, c) as JSON: null, or as kind says (a group column's, or a statistic's number). */
enum pg_cell { PG_CELL_TEXT, PG_CELL_NUMBER, PG_CELL_BOOLEAN };
static cJSON *pg_json_cell(PGresult *res, int r, int c, enum pg_cell kind)
{
    if (PQgetisnull(res, r, c)) return cJSON_CreateNull();
    switch (kind) {
    case PG_CELL_NUMBER: return cJSON_CreateNumber(atof(PQgetvalue(res, r, c)));
    case PG_CELL_BOOLEAN: return cJSON_CreateBool(atoll(PQgetvalue(res, r, c)) != 0);
    default: return cJSON_CreateString(PQgetvalue(res, r, c));
    }
}

static enum pg_cell pg_cell_of(store_field f)
{
    return store_fields[f].boolean ? PG_CELL_BOOLEAN : store_fields[f].integer ? PG_CELL_NUMBER : PG_CELL_TEXT;
}

char *store_pg_group_runs(const store_run_query *q, int *more)
{
    static const char *const stats[] = {"count", "median_us", "min_us", "max_us"};
    cJSON *all = NULL;
    PGresult *res = NULL;
    char *out = NULL;
    store_sql sql;
    int r, i, rows;

    *more = 0;
    if (store_sql_groups(q, STORE_SQL_POSTGRESQL, &sql) != 0) {
        pg_fail("runs aggregate: it does not fit its statement");
        return NULL;
    }
    if (pg_enter() < 0 || !(res = pg_query(&sql, "runs aggregate"))) goto out;
    rows = PQntuples(res);
    if (rows > q->limit) {
        *more = 1;
        rows = q->limit;
    }
    all = cJSON_CreateArray();
    for (r = 0; all && r < rows; r++) {
        cJSON *group = cJSON_CreateObject();
        cJSON_AddItemToArray(all, group);
        for (i = 0; i < q->n_group_by; i++)
            cJSON_AddItemToObject(group, store_fields[q->group_by[i]].name,
                                  pg_json_cell(res, r, i, pg_cell_of(q->group_by[i])));
        for (i = 0; i < 4; i++) cJSON_AddItemToObject(group, stats[i], pg_json_cell(res, r, q->n_group_by + i, PG_CELL_NUMBER));
    }
    out = all ? cJSON_PrintUnformatted(all) : NULL;
    if (!out) pg_fail("runs aggregate: out of memory");
out:
    cJSON_Delete(all);
    PQclear(res);
    pg_leave();
    return out;
}

int store_pg_node_known(const char *node)
{
    const char *values[] = {node};
    PGresult *res;
    int rc = -1;

    if (pg_enter() == 0 && (res = pg_exec(PG_NODE_KNOWN, 1, values))) {
        rc = PQntuples(res) == 1 && !strcmp(PQgetvalue(res, 0, 0), "t");
        PQclear(res);
    }
    pg_leave();
    return rc;
}

/* --------------------------------------------------------------------------- nodes -- */

int store_pg_heartbeat(long long instance, const char *node, const char *version, const char *devices_json,
                       const char *started)
{
    char number[24];
    const char *values[] = {number, node, version, devices_json, started};
    PGresult *res;
    int rc = -1;

    snprintf(number, sizeof number, "%lld", instance);
    if (pg_enter() == 0 && (res = pg_exec(PG_HEARTBEAT, 5, values))) {
        rc = 0;
        PQclear(res);
    }
    pg_leave();
    return rc;
}

/* Column c of row r as a JSON string, or null when SQL NULL. */
static cJSON *pg_json_text(PGresult *res, int r, int c)
{
    return PQgetisnull(res, r, c) ? cJSON_CreateNull() : cJSON_CreateString(PQgetvalue(res, r, c));
}

char *store_pg_nodes_json(void)
{
    cJSON *all = NULL;
    PGresult *res = NULL;
    char *out = NULL;
    int r;

    if (pg_enter() < 0 || !(res = pg_exec(PG_NODES, 0, NULL))) goto out;
    all = cJSON_CreateArray();
    for (r = 0; all && r < PQntuples(res); r++) {
        cJSON *node = cJSON_CreateObject();
        /* devices is the instance's own JSON text: parsed, so it nests; null if unreadable. */
        cJSON *devices = PQgetisnull(res, r, 3) ? NULL : cJSON_Parse(PQgetvalue(res, r, 3));

        if (!node) {
            cJSON_Delete(devices);
            goto out;
        }
        cJSON_AddItemToArray(all, node);
        cJSON_AddItemToObject(node, "node", pg_json_text(res, r, 0));
        cJSON_AddNumberToObject(node, "instance", (double)atoll(PQgetvalue(res, r, 1)));
        cJSON_AddItemToObject(node, "version", pg_json_text(res, r, 2));
        cJSON_AddItemToObject(node, "devices", devices ? devices : cJSON_CreateNull());
        cJSON_AddItemToObject(node, "started", pg_json_text(res, r, 4));
        cJSON_AddItemToObject(node, "last_heartbeat", pg_json_text(res, r, 5));
        cJSON_AddNumberToObject(node, "heartbeat_age_s", atof(PQgetvalue(res, r, 6)));
    }
    out = all ? cJSON_PrintUnformatted(all) : NULL;
    if (!out) pg_fail("nodes: out of memory");
out:
    cJSON_Delete(all);
    PQclear(res);
    pg_leave();
    return out;
}
