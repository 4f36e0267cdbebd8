"""GET /v1/runs on a history of a million runs, in SQLite and in PostgreSQL: every filter
answers in under 50 ms (the median of a few, the HTTP round trip on loopback included),
for a common value and for a rare one (ten runs of the million), oldest and newest first.
A rare value is what proves the indexes: without one the database reads every run.

The runs go in through the real schema (the binary creates it, then stops): one INSERT …
SELECT per store, so the database's own columns, triggers and indexes do their work on every
row, as they do for attnd's writes. The two stores load at the same time (one core each) and
the whole test takes about a minute on a two-core machine, most of it the PostgreSQL load."""
import json
import os
import sqlite3
import statistics
import subprocess
import time

import pytest

import attnd_api_helpers as helpers
from attnd_api_helpers import Api, pg_database_for

N = 1_000_000
LIMIT_MS = 50.0
REPEATS = 3
NEEDLE = "i % 100000 = 777"  # ten runs of the million carry every rare value
RARE = {"backend": "naive_inplace", "status": "cancelled", "device": "cuda:7", "node": "rare-node", "batch": 3,
        "heads": 5, "kv_heads": 1, "seq_q": 333, "seq_kv": 334, "head_dim": 48, "head_dim_v": 40, "window": 17,
        "page_size": 1, "num_pages": 7, "ragged": "true", "dtype": "fp32", "mask": "causal_bottom_right", "impl": "w8", "gpu": "NVIDIA A100", "commit": "0ddba11c0ffe",
        "tag": "needle"}
COMMON = {"backend": "flash", "status": "done", "device": "cuda:1", "node": "bulk-node", "batch": 4, "heads": 16,
          "kv_heads": 8, "seq_q": 1024, "seq_kv": 1024, "head_dim": 128, "head_dim_v": 128, "window": 255,
          "page_size": 16, "num_pages": 1024, "ragged": "false", "dtype": "bf16", "mask": "causal", "impl": "tma", "gpu": "NVIDIA H200", "commit": "c0de00000003",
          "tag": "nightly"}


def _case(common_sql, rare_sql):
    return "CASE WHEN " + NEEDLE + " THEN " + rare_sql + " ELSE " + common_sql + " END"


def _q(v):
    return "'" + v + "'"


def row_values(pg):
    """The SQL of one generated run i, for PostgreSQL (pg) or SQLite: (the columns, as
    "expression AS name, …", and the record built from them). The common values vary with i,
    so that each is one of several."""
    obj, arr = ("json_build_object", "json_build_array") if pg else ("json_object", "json_array")
    cols = {
        "backend": _case("CASE i % 4 WHEN 0 THEN 'flash' WHEN 1 THEN 'cudnn' WHEN 2 THEN 'efficient' ELSE 'math' END",
                         _q(RARE["backend"])),
        "status": _case("CASE WHEN i % 100 = 0 THEN 'failed' ELSE 'done' END", _q(RARE["status"])),
        "device": _case("'cuda:' || (i % 4)", _q(RARE["device"])),
        "node": _case(_q(COMMON["node"]), _q(RARE["node"])),
        "batch": _case("(1 << (i % 5))", str(RARE["batch"])),
        "heads": _case("(16 << (i % 2))", str(RARE["heads"])),
        "kv_heads": _case("(8 << (i % 3))", str(RARE["kv_heads"])),
        "seq_q": _case("(512 << (i % 4))", str(RARE["seq_q"])),
        "seq_kv": _case("(512 << (i % 4))", str(RARE["seq_kv"])),
        "head_dim": _case("(64 << (i % 2))", str(RARE["head_dim"])),
        "head_dim_v": _case("(64 << (i % 2))", str(RARE["head_dim_v"])),
        "win": _case("(255 + 256 * (i % 3))", str(RARE["window"])),
        # a run in three is paged; the rare ones are paged and ragged (the others have no lengths)
        "page_size": _case("CASE WHEN i % 3 = 0 THEN 16 END", str(RARE["page_size"])),
        "num_pages": _case("CASE WHEN i % 3 = 0 THEN (1024 << (i % 2)) END", str(RARE["num_pages"])),
        "seqlens": _case("NULL", arr + "(1, 2, 3)"),
        "dtype": _case("CASE WHEN i % 3 = 0 THEN 'fp16' ELSE 'bf16' END", _q(RARE["dtype"])),
        "mask": _case("CASE WHEN i % 2 = 0 THEN 'none' ELSE 'causal' END", _q(RARE["mask"])),
        "impl": _case("CASE WHEN i % 2 = 0 THEN 'wgmma' ELSE 'tma' END", _q(RARE["impl"])),
        "gpu": _case("CASE WHEN i % 2 = 0 THEN 'NVIDIA H100' ELSE 'NVIDIA H200' END", _q(RARE["gpu"])),
        "git": _case("'c0de0000000' || (i % 8)", _q(RARE["commit"])),
        # one run in four carries the common tag; the rare ones carry both
        "tags": _case("CASE WHEN i % 4 = 1 THEN " + arr + "('nightly', 'x' || (i % 7)) END",
                      arr + "('needle', 'nightly')"),
        "median": "(100.0 + i % 997)",
        "created": ("to_char(timestamp '2026-01-01' + i * interval '1 second', 'YYYY-MM-DD\"T\"HH24:MI:SS.\"000Z\"')"
                    if pg else "strftime('%Y-%m-%dT%H:%M:%S.000Z', 1767225600 + i, 'unixepoch')"),
    }
    tags, seqlens = ("tags", "seqlens") if pg else ("json(tags)", "json(seqlens)")  # SQLite: a JSON value loses
    # its type through a subquery. A run without a member has it null here (the columns read null as absent).
    params = (obj + "('backend', backend, 'device', device, 'batch', batch, 'heads', heads, 'kv_heads', kv_heads,"
              " 'seq_q', seq_q, 'seq_kv', seq_kv, 'head_dim', head_dim, 'head_dim_v', head_dim_v, 'window', win,"
              " 'page_size', page_size, 'num_pages', num_pages, 'seqlens_kv', " + seqlens + ","
              " 'dtype', dtype, 'mask', mask, 'impl', impl, 'tags', " + tags + ")")
    record = (obj + "('id', i, 'status', status, 'created', created, 'node', node, 'backend', backend, 'build', "
              + obj + "('commit', git), 'params', " + params + ", 'device', " + obj + "('name', gpu), 'timing', "
              + obj + "('median_us', median), 'impl_used', impl)")
    return ", ".join(expr + " AS " + name for name, expr in cols.items()), record


def sqlite_load(path):
    columns, record = row_values(pg=False)
    db = sqlite3.connect(path)
    with db:
        # params: the copy of the record's params the filters' columns are computed from (schema 7)
        db.execute("INSERT INTO runs(id, created, backend, device, status, record, uuid, node, version, median_us,"
                   " params) SELECT i, created, backend, device, status, rec, NULL, node, 3, median,"
                   " json_extract(rec, '$.params') FROM"
                   " (SELECT i, created, backend, device, status, node, median, " + record + " AS rec FROM"
                   " (WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < " + str(N) + ")"
                   "  SELECT i, " + columns + " FROM c))")
    db.close()


def pg_load_command(conninfo):
    columns, record = row_values(pg=True)
    # As pg_restore loads a table: its plain indexes set aside and built again afterwards from
    # their own definitions (a build sorts once; inserting a million keys into eighteen
    # indexes through the test server's 32 MB of buffers takes three times as long). The
    # triggers work on every row, and the constraints stay.
    plain = ("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
             " AND tablename IN ('runs', 'run_tags') AND indexname NOT IN (SELECT conname FROM pg_constraint)")
    sql = ("BEGIN; CREATE TEMP TABLE load_indexes AS " + plain + ";"
           " DO $$ DECLARE x record; BEGIN FOR x IN SELECT indexname FROM load_indexes LOOP"
           "  EXECUTE 'DROP INDEX ' || quote_ident(x.indexname); END LOOP; END $$;"
           " INSERT INTO runs(id, uuid, seq, node, created, backend, device, status, version, median_us, record)"
           " SELECT i, ('00000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid, i, node, created, backend, device, status, 3, median, (" + record + ")::text"
           " FROM (SELECT i, " + columns + " FROM generate_series(1, " + str(N) + ") i) g;"
           " DO $$ DECLARE x record; BEGIN FOR x IN SELECT indexdef FROM load_indexes LOOP"
           "  EXECUTE x.indexdef; END LOOP; END $$;"
           " UPDATE fleet_position SET n = " + str(N) + "; COMMIT;"
           # What autovacuum does after a load this size, within a minute: without statistics
           # the planner guesses one row for two filters together and sorts all their matches.
           " ANALYZE runs; ANALYZE run_tags;")
    return ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-c", sql]


def median_ms(api, params):
    times, body = [], None
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        r = api.get("/v1/runs", params=params)
        times.append((time.perf_counter() - t0) * 1e3)
        assert r.status_code == 200, (params, r.text[:300])
        body = r.json()
    return statistics.median(times), body


def check_store(api, store):
    slow = []
    for field in RARE:
        for value, rare in ((COMMON[field], False), (RARE[field], True)):
            for order in ("oldest", "newest"):
                params = {field: value, "limit": 100, "order": order}
                ms, body = median_ms(api, params)
                runs = body["runs"]
                if rare:
                    assert len(runs) == 10, (store, params, len(runs))
                else:
                    assert len(runs) == 100, (store, params, len(runs))
                if ms >= LIMIT_MS:
                    slow.append("%s %s: %.1f ms" % (store, json.dumps(params), ms))
    # composed filters, a window of cursors, time, and an aggregate of the rare runs
    for params in ({"tag": "nightly", "dtype": "bf16", "status": "done", "limit": 100},
                   {"batch": 3, "gpu": "NVIDIA A100", "order": "newest"},
                   {"page_size": 0, "ragged": "false", "order": "newest", "limit": 100},
                   {"ragged": "true", "page_size": 1, "num_pages": 7},
                   {"order": "newest", "before": N // 2, "limit": 100},
                   {"after": N // 2, "limit": 100, "head_dim": 64},
                   {"since": "2026-01-06T00:00:00Z", "limit": 100, "seq": 1024, "order": "newest"},
                   {"group_by": "backend,seq_q", "tag": "needle"}):
        ms, body = median_ms(api, params)
        if ms >= LIMIT_MS:
            slow.append("%s %s: %.1f ms" % (store, json.dumps(params), ms))
    assert body["groups"] == [{"backend": "naive_inplace", "seq_q": 333, "count": 10, "median_us": pytest.approx(
        statistics.median(100.0 + i % 997 for i in range(777, N, 100000))), "min_us": pytest.approx(
        min(100.0 + i % 997 for i in range(777, N, 100000))), "max_us": pytest.approx(
        max(100.0 + i % 997 for i in range(777, N, 100000)))}], body
    assert not slow, "over %.0f ms on %d runs:\n%s" % (LIMIT_MS, N, "\n".join(slow))


@pytest.mark.sqlite_only  # it writes attnd.db itself; the PostgreSQL half is its own
def test_every_filter_fast_on_a_million_runs(start_server, tmp_path):
    t0 = time.monotonic()
    sqlite_dir, pg_dir = str(tmp_path / "sqlite"), str(tmp_path / "pg")
    os.makedirs(sqlite_dir)
    os.makedirs(pg_dir)
    helpers.test_pg()  # a clear failure when there is no PostgreSQL to load
    conninfo = pg_database_for(pg_dir + "-million")
    pg_store = ["--store", conninfo]
    # The binary creates both schemas, then stops.
    start_server(extra=["--cpu-threads", "1"], data_dir=sqlite_dir).stop_checked()
    start_server(extra=["--cpu-threads", "1"] + pg_store, data_dir=pg_dir).stop_checked()
    pg = subprocess.Popen(pg_load_command(conninfo), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sqlite_load(os.path.join(sqlite_dir, "attnd.db"))
        t_sqlite = time.monotonic() - t0
        out, err = pg.communicate(timeout=600)
    finally:
        if pg.poll() is None:
            pg.kill()
    assert pg.returncode == 0, err[-3000:]
    t_loaded = time.monotonic() - t0
    print("\n%d runs loaded: SQLite %.1f s, both %.1f s" % (N, t_sqlite, t_loaded))
    for store, extra, data in (("sqlite", [], sqlite_dir), ("postgresql", pg_store, pg_dir)):
        t1 = time.monotonic()
        srv = start_server(extra=["--cpu-threads", "1"] + extra, data_dir=data)
        api = Api(srv.url)
        assert len(api.get("/v1/runs", params={"after": N - 3}).json()["runs"]) == 3
        check_store(api, store)
        srv.stop_checked()
        print("%s: queries %.1f s" % (store, time.monotonic() - t1))
    print("whole test %.1f s" % (time.monotonic() - t0))
