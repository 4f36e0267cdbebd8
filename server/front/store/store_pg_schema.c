/* store_pg_schema.c — the fleet store's tables, their migrations and the named statements
 * (store_pg_schema.h).
 *
 * attnd_schema holds one row: the number of migrations applied. A migration is appended to
 * store_pg_migrations and never edited once released, so every database, whatever version
 * it was left at, reaches the same tables.
 */
#include "server/front/store/store_pg_schema.h"

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------ migrations -- */

static const char *const store_pg_migrations[] = {
    /* 1: instances, the fleet history (runs, in fleet-position order), traces, nodes. */
    "CREATE TABLE instances ("
    " instance bigserial PRIMARY KEY,"
    " uuid uuid UNIQUE NOT NULL,"
    " node text NOT NULL,"
    " created timestamptz NOT NULL DEFAULT now());"
    "CREATE TABLE runs ("
    " id bigint PRIMARY KEY,"
    " uuid uuid UNIQUE NOT NULL,"
    " seq bigint UNIQUE NOT NULL," /* the unique constraint is the (seq) index */
    " node text NOT NULL,"
    " created text NOT NULL,"
    " backend text,"
    " device text,"
    " status text NOT NULL,"
    " version integer NOT NULL,"
    " median_us double precision,"
    " record text NOT NULL);"
    "CREATE INDEX runs_node_seq ON runs(node, seq);"
    "CREATE INDEX runs_backend_seq ON runs(backend, seq);"
    "CREATE INDEX runs_status_seq ON runs(status, seq);"
    "CREATE INDEX runs_device_seq ON runs(device, seq);"
    "CREATE INDEX runs_created ON runs(created);"
    "CREATE TABLE fleet_position (n bigint NOT NULL);"
    "INSERT INTO fleet_position VALUES (0);"
    "CREATE TABLE traces (run_id bigint PRIMARY KEY, json text NOT NULL);"
    "CREATE TABLE nodes ("
    " instance bigint PRIMARY KEY REFERENCES instances,"
    " node text NOT NULL,"
    " version text,"
    " devices text,"
    " started text,"
    " last_heartbeat timestamptz NOT NULL);",
    /* 2: what GET /v1/runs filters and groups by (store.h's store_fields), as columns that a
     * trigger fills from the record on every write, so no write names them and none disagrees
     * with the record; each with a (column, seq) index. The record is parsed once per write
     * (generated columns would parse it once per column). Tags, several per run, are rows of
     * run_tags (tag, seq), kept by triggers from the tags column. The UPDATE fills the columns
     * of the rows already there. */
    "ALTER TABLE runs ADD COLUMN batch bigint, ADD COLUMN heads bigint, ADD COLUMN kv_heads bigint,"
    " ADD COLUMN seq_q bigint, ADD COLUMN seq_kv bigint, ADD COLUMN head_dim bigint, ADD COLUMN head_dim_v bigint,"
    " ADD COLUMN window_size bigint, ADD COLUMN dtype text, ADD COLUMN mask text, ADD COLUMN impl text,"
    " ADD COLUMN device_name text, ADD COLUMN build_commit text, ADD COLUMN tags text[];"
    "CREATE FUNCTION attnd_json_integer(v jsonb) RETURNS bigint LANGUAGE sql IMMUTABLE AS"
    " $$ SELECT CASE WHEN jsonb_typeof(v) = 'number' THEN (v #>> '{}')::numeric::bigint END $$;"
    "CREATE FUNCTION attnd_run_columns() RETURNS trigger LANGUAGE plpgsql AS $$"
    " DECLARE r jsonb := NEW.record::jsonb; p jsonb := r -> 'params';"
    " BEGIN"
    "  NEW.batch := attnd_json_integer(p -> 'batch');"
    "  NEW.heads := attnd_json_integer(p -> 'heads');"
    "  NEW.kv_heads := coalesce(attnd_json_integer(p -> 'kv_heads'), NEW.heads);"
    "  NEW.seq_q := attnd_json_integer(p -> 'seq_q');"
    "  NEW.seq_kv := attnd_json_integer(p -> 'seq_kv');"
    "  NEW.head_dim := attnd_json_integer(p -> 'head_dim');"
    "  NEW.head_dim_v := coalesce(attnd_json_integer(p -> 'head_dim_v'), NEW.head_dim);"
    "  NEW.window_size := attnd_json_integer(p -> 'window');"
    "  NEW.dtype := p ->> 'dtype';"
    "  NEW.mask := p ->> 'mask';"
    "  NEW.impl := coalesce(r ->> 'impl_used', p ->> 'impl');"
    "  NEW.device_name := r -> 'device' ->> 'name';"
    "  NEW.build_commit := r -> 'build' ->> 'commit';"
    "  NEW.tags := CASE WHEN jsonb_typeof(p -> 'tags') = 'array'"
    "   THEN ARRAY(SELECT jsonb_array_elements_text(p -> 'tags')) END;"
    "  RETURN NEW;"
    " END $$;"
    "CREATE TRIGGER runs_columns BEFORE INSERT OR UPDATE OF record ON runs"
    " FOR EACH ROW EXECUTE FUNCTION attnd_run_columns();"
    "CREATE TABLE run_tags (tag text NOT NULL, seq bigint NOT NULL, PRIMARY KEY (tag, seq));"
    "CREATE FUNCTION attnd_run_tags() RETURNS trigger LANGUAGE plpgsql AS $$"
    " BEGIN"
    "  IF TG_OP <> 'INSERT' AND OLD.tags IS NOT NULL THEN"
    "   DELETE FROM run_tags WHERE seq = OLD.seq AND tag = ANY (OLD.tags);"
    "  END IF;"
    "  IF TG_OP <> 'DELETE' AND NEW.tags IS NOT NULL THEN"
    "   INSERT INTO run_tags(tag, seq) SELECT DISTINCT t, NEW.seq FROM unnest(NEW.tags) t ON CONFLICT DO NOTHING;"
    "  END IF;"
    "  RETURN NULL;"
    " END $$;"
    "CREATE TRIGGER runs_tags_insert AFTER INSERT ON runs FOR EACH ROW WHEN (NEW.tags IS NOT NULL)"
    " EXECUTE FUNCTION attnd_run_tags();"
    "CREATE TRIGGER runs_tags_update AFTER UPDATE ON runs FOR EACH ROW WHEN (OLD.tags IS DISTINCT FROM NEW.tags)"
    " EXECUTE FUNCTION attnd_run_tags();"
    "CREATE TRIGGER runs_tags_delete AFTER DELETE ON runs FOR EACH ROW WHEN (OLD.tags IS NOT NULL)"
    " EXECUTE FUNCTION attnd_run_tags();"
    "UPDATE runs SET record = record;"
    "CREATE INDEX runs_batch_seq ON runs(batch, seq);"
    "CREATE INDEX runs_heads_seq ON runs(heads, seq);"
    "CREATE INDEX runs_kv_heads_seq ON runs(kv_heads, seq);"
    "CREATE INDEX runs_seq_q_seq ON runs(seq_q, seq);"
    "CREATE INDEX runs_seq_kv_seq ON runs(seq_kv, seq);"
    "CREATE INDEX runs_head_dim_seq ON runs(head_dim, seq);"
    "CREATE INDEX runs_head_dim_v_seq ON runs(head_dim_v, seq);"
    "CREATE INDEX runs_window_size_seq ON runs(window_size, seq);"
    "CREATE INDEX runs_dtype_seq ON runs(dtype, seq);"
    "CREATE INDEX runs_mask_seq ON runs(mask, seq);"
    "CREATE INDEX runs_impl_seq ON runs(impl, seq);"
    "CREATE INDEX runs_device_name_seq ON runs(device_name, seq);"
    "CREATE INDEX runs_build_commit_seq ON runs(build_commit, seq);",
    /* 3: studies (docs/api.md, Studies): the whole record of each, with the columns a page
     * filters by. `seq` orders GET /v1/studies newest first across the fleet; studies are few,
     * so a tag is looked for in the records of the page's walk. */
    "CREATE TABLE studies ("
    " id bigint PRIMARY KEY,"
    " uuid uuid UNIQUE NOT NULL,"
    " seq bigserial UNIQUE NOT NULL,"
    " node text NOT NULL,"
    " created text NOT NULL,"
    " status text NOT NULL,"
    " version integer NOT NULL,"
    " record text NOT NULL);"
    "CREATE INDEX studies_status_seq ON studies(status, seq);",
    /* 4: the serving layout as filter columns (store.h's store_fields): page_size (0 for a
     * contiguous cache), num_pages, and ragged (1 when the run had per-sequence lengths; a
     * JSON null is none). The trigger's function is 2's with three more lines. The defaults
     * are the values of a run without the layout, so only the records that have one are
     * rewritten. */
    "ALTER TABLE runs ADD COLUMN page_size bigint NOT NULL DEFAULT 0, ADD COLUMN num_pages bigint,"
    " ADD COLUMN ragged bigint NOT NULL DEFAULT 0;"
    "CREATE OR REPLACE FUNCTION attnd_run_columns() RETURNS trigger LANGUAGE plpgsql AS $$"
    " DECLARE r jsonb := NEW.record::jsonb; p jsonb := r -> 'params';"
    " BEGIN"
    "  NEW.batch := attnd_json_integer(p -> 'batch');"
    "  NEW.heads := attnd_json_integer(p -> 'heads');"
    "  NEW.kv_heads := coalesce(attnd_json_integer(p -> 'kv_heads'), NEW.heads);"
    "  NEW.seq_q := attnd_json_integer(p -> 'seq_q');"
    "  NEW.seq_kv := attnd_json_integer(p -> 'seq_kv');"
    "  NEW.head_dim := attnd_json_integer(p -> 'head_dim');"
    "  NEW.head_dim_v := coalesce(attnd_json_integer(p -> 'head_dim_v'), NEW.head_dim);"
    "  NEW.window_size := attnd_json_integer(p -> 'window');"
    "  NEW.page_size := coalesce(attnd_json_integer(p -> 'page_size'), 0);"
    "  NEW.num_pages := attnd_json_integer(p -> 'num_pages');"
    "  NEW.ragged := CASE WHEN coalesce(jsonb_typeof(p -> 'seqlens_q'), 'null') <> 'null'"
    "   OR coalesce(jsonb_typeof(p -> 'seqlens_kv'), 'null') <> 'null' THEN 1 ELSE 0 END;"
    "  NEW.dtype := p ->> 'dtype';"
    "  NEW.mask := p ->> 'mask';"
    "  NEW.impl := coalesce(r ->> 'impl_used', p ->> 'impl');"
    "  NEW.device_name := r -> 'device' ->> 'name';"
    "  NEW.build_commit := r -> 'build' ->> 'commit';"
    "  NEW.tags := CASE WHEN jsonb_typeof(p -> 'tags') = 'array'"
    "   THEN ARRAY(SELECT jsonb_array_elements_text(p -> 'tags')) END;"
    "  RETURN NEW;"
    " END $$;"
    "UPDATE runs SET record = record"
    " WHERE record::jsonb -> 'params' ?| ARRAY['page_size', 'num_pages', 'seqlens_q', 'seqlens_kv'];"
    "CREATE INDEX runs_page_size_seq ON runs(page_size, seq);"
    "CREATE INDEX runs_num_pages_seq ON runs(num_pages, seq);"
    "CREATE INDEX runs_ragged_seq ON runs(ragged, seq);",
};

#define STORE_PG_SCHEMA_LATEST ((int)(sizeof store_pg_migrations / sizeof store_pg_migrations[0]))

/* The key of the advisory lock that serializes migrations: "attnd" in ASCII. Any number
 * works as long as every attnd uses the same one. */
#define STORE_PG_MIGRATION_LOCK "418581327460"

/* Run sql (no parameters); 0, or -1 with err filled. *res_out, when given, keeps the result. */
static int schema_exec(PGconn *conn, const char *sql, PGresult **res_out, char *err, size_t err_len)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;

    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        snprintf(err, err_len, "migration: %.60s…: %s", sql, res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
        PQclear(res);
        return -1;
    }
    if (res_out)
        *res_out = res;
    else
        PQclear(res);
    return 0;
}

int store_pg_schema_migrate(PGconn *conn, int *version, char *err, size_t err_len)
{
    PGresult *res = NULL;
    char sql[80];
    int stored, i;

    if (schema_exec(conn, "BEGIN", NULL, err, err_len) < 0) return -1;
    /* The lock is taken before anything is read, and held until COMMIT: a second attnd
     * waits here and then finds the migrations done. */
    if (schema_exec(conn, "SELECT pg_advisory_xact_lock(" STORE_PG_MIGRATION_LOCK ")", NULL, err, err_len) < 0 ||
        schema_exec(conn, "CREATE TABLE IF NOT EXISTS attnd_schema (version integer NOT NULL)", NULL, err, err_len) <
            0 ||
        schema_exec(conn, "SELECT version FROM attnd_schema", &res, err, err_len) < 0)
        goto rollback;
    if (PQntuples(res) > 1) {
        snprintf(err, err_len, "attnd_schema holds %d rows, not one", PQntuples(res));
        goto rollback;
    }
    stored = PQntuples(res) == 1 ? atoi(PQgetvalue(res, 0, 0)) : -1;
    PQclear(res);
    res = NULL;
    if (stored < 0) {
        if (schema_exec(conn, "INSERT INTO attnd_schema VALUES (0)", NULL, err, err_len) < 0) goto rollback;
        stored = 0;
    }
    if (stored > STORE_PG_SCHEMA_LATEST) {
        /* A newer attnd migrated this database: its tables may mean something else now. */
        snprintf(err, err_len, "database schema version %d is newer than this attnd knows (%d)", stored,
                 STORE_PG_SCHEMA_LATEST);
        goto rollback;
    }
    for (i = stored; i < STORE_PG_SCHEMA_LATEST; i++)
        if (schema_exec(conn, store_pg_migrations[i], NULL, err, err_len) < 0) goto rollback;
    if (stored < STORE_PG_SCHEMA_LATEST) {
        snprintf(sql, sizeof sql, "UPDATE attnd_schema SET version = %d", STORE_PG_SCHEMA_LATEST);
        if (schema_exec(conn, sql, NULL, err, err_len) < 0) goto rollback;
    }
    if (schema_exec(conn, "COMMIT", NULL, err, err_len) < 0) return -1;
    *version = STORE_PG_SCHEMA_LATEST;
    return 0;

rollback:
    PQclear(res);
    PQclear(PQexec(conn, "ROLLBACK")); /* may fail on a lost connection: the server rolls back then */
    return -1;
}

/* ------------------------------------------------------------------------ statements -- */

/* Parameters are sent as text and cast where the column alone would not type them. */
static const struct {
    const char *name, *sql;
} store_pg_statements[PG_STATEMENT_COUNT] = {
    [PG_RUN_UPDATE] = {"attnd_run_update",
                       "UPDATE runs SET status = $2, record = $3, version = $4, median_us = $5"
                       " WHERE uuid = $1 AND version < $4"},
    /* The position is taken in the inserting transaction: fleet_position's row stays locked
     * until COMMIT, so positions become visible in the order they were taken and a poller
     * past position n never later finds a smaller one. A sequence would not promise that.
     * NOT EXISTS keeps a replayed first write from taking a second position. */
    [PG_RUN_INSERT] = {"attnd_run_insert",
                       "WITH position AS (UPDATE fleet_position SET n = n + 1"
                       " WHERE NOT EXISTS (SELECT 1 FROM runs WHERE uuid = $2::uuid) RETURNING n)"
                       " INSERT INTO runs(id, uuid, seq, node, created, backend, device, status, version,"
                       " median_us, record)"
                       " SELECT $1::bigint, $2::uuid, n, $3::text, $4::text, $5::text, $6::text, $7::text,"
                       " $8::integer, $9::double precision, $10::text FROM position"
                       " ON CONFLICT (uuid) DO NOTHING"},
    [PG_RUN_DELETE] = {"attnd_run_delete",
                       "WITH gone AS (DELETE FROM runs WHERE uuid = $1 RETURNING id)"
                       " DELETE FROM traces WHERE run_id IN (SELECT id FROM gone)"},
    [PG_TRACE_PUT] = {"attnd_trace_put",
                      "INSERT INTO traces(run_id, json) VALUES ($1, $2)"
                      " ON CONFLICT (run_id) DO UPDATE SET json = EXCLUDED.json"},
    [PG_RUN_GET] = {"attnd_run_get", "SELECT record FROM runs WHERE id = $1"},
    [PG_RUN_STATUS] = {"attnd_run_status", "SELECT status FROM runs WHERE id = $1"},
    [PG_TRACE_GET] = {"attnd_trace_get", "SELECT json FROM traces WHERE run_id = $1"},
    [PG_RUN_COUNT] = {"attnd_run_count", "SELECT count(*) FROM runs"},
    [PG_INSTANCE_PUT] = {"attnd_instance_put",
                         "INSERT INTO instances(uuid, node) VALUES ($1, $2)"
                         " ON CONFLICT (uuid) DO UPDATE SET node = EXCLUDED.node RETURNING instance"},
    [PG_INSTANCE_NODE] = {"attnd_instance_node", "SELECT node FROM instances WHERE instance = $1"},
    [PG_HEARTBEAT] = {"attnd_heartbeat",
                      "INSERT INTO nodes(instance, node, version, devices, started, last_heartbeat)"
                      " VALUES ($1, $2, $3, $4, $5, now())"
                      " ON CONFLICT (instance) DO UPDATE SET node = EXCLUDED.node, version = EXCLUDED.version,"
                      " devices = EXCLUDED.devices, started = EXCLUDED.started, last_heartbeat = now()"},
    /* The age is measured by the database's clock, the same one that stamped the beat. */
    [PG_NODES] = {"attnd_nodes",
                  "SELECT node, instance, version, devices, started,"
                  " to_char(last_heartbeat AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),"
                  " extract(epoch FROM now() - last_heartbeat)"
                  " FROM nodes ORDER BY node, instance"},
    /* One statement for both: a replay of a version already stored changes nothing. */
    [PG_STUDY_PUT] = {"attnd_study_put",
                      "INSERT INTO studies(id, uuid, node, created, status, version, record)"
                      " VALUES ($1::bigint, $2::uuid, $3, $4, $5, $6::integer, $7)"
                      " ON CONFLICT (uuid) DO UPDATE SET status = EXCLUDED.status, record = EXCLUDED.record,"
                      " version = EXCLUDED.version WHERE studies.version < EXCLUDED.version"},
    [PG_STUDY_GET] = {"attnd_study_get", "SELECT record FROM studies WHERE id = $1"},
    [PG_STUDY_LIST] = {"attnd_study_list",
                       "SELECT record, seq FROM studies WHERE ($1::text IS NULL OR status = $1)"
                       " AND ($2::text IS NULL OR record::jsonb -> 'tags' ? $2)"
                       " AND ($3::bigint = 0 OR seq < $3) ORDER BY seq DESC LIMIT $4::integer"},
    [PG_NODE_KNOWN] = {"attnd_node_known",
                       "SELECT EXISTS (SELECT 1 FROM runs WHERE node = $1) OR EXISTS (SELECT 1 FROM nodes WHERE node = $1)"},
};

const char *store_pg_statement_name(store_pg_statement s)
{
    return store_pg_statements[s].name;
}

int store_pg_schema_prepare(PGconn *conn, char *err, size_t err_len)
{
    int i;

    for (i = 0; i < PG_STATEMENT_COUNT; i++) {
        PGresult *res = PQprepare(conn, store_pg_statements[i].name, store_pg_statements[i].sql, 0, NULL);
        int ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;

        if (!ok)
            snprintf(err, err_len, "prepare %s: %s", store_pg_statements[i].name,
                     res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
        PQclear(res);
        if (!ok) return -1;
    }
    return 0;
}
