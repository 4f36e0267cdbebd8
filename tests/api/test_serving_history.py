"""The history of serving runs: GET /v1/runs filters and groups by page_size (0: a contiguous
cache), num_pages and ragged (the run had per-sequence lengths), and the CSV has their columns
(docs/api.md, History). Runs under both stores.

A history written before these columns existed (SQLite schema version 5, fleet schema version 3:
tests/api/data, dumps of what attnd wrote then, four runs: contiguous, paged, ragged, paged and
ragged) is migrated when attnd opens it: the new filters find the old runs as they find new ones."""
import csv
import io
import json
import os
import sqlite3
import subprocess
import sys

import pytest

import attnd_api_helpers as helpers
from attnd_api_helpers import REPO, Api, AttndServer, check_against_openapi, error_of, tiny

DATA = os.path.join(REPO, "tests", "api", "data")
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
import attnd  # noqa: E402
from attnd import cli  # noqa: E402

# (run parameters, page_size, num_pages, ragged): tiny cpu reference runs
DECODE = dict(seq_q=1, mask="causal_bottom_right")
RUNS = [
    (dict(seq=16), 0, None, False),
    (dict(DECODE, batch=2, seq_kv=40, page_size=16), 16, 8, False),  # 2 x 3 pages and a quarter more
    (dict(DECODE, seq_kv=20, page_size=8, num_pages=16), 8, 16, False),
    (dict(DECODE, seqlens_kv="16,0,7"), 0, None, True),
    (dict(mask="causal_bottom_right", seqlens_q="1,2", seqlens_kv="33,17", page_size=8, num_pages=16), 8, 16, True),
]


def serving_run(params):
    p = tiny(**params)
    if "seq_q" in params or "seqlens_q" in params:
        p.pop("seq")
    if "seqlens_kv" in params:
        p.pop("batch")
    return p


@pytest.fixture(scope="module")
def hist():
    srv = AttndServer(extra=["--cpu-threads", "2"]).start()
    try:
        api = Api(srv.url)
        recs = [api.run_ok(**serving_run(params)) for params, _, _, _ in RUNS]
        yield api, recs
        srv.stop_checked()
    finally:
        srv.cleanup()


def ids(api, **params):
    r = api.get("/v1/runs", params=dict(params, limit=1000))
    assert r.status_code == 200, (params, r.text[:300])
    return [rec["id"] for rec in r.json()["runs"]]


def test_the_runs_are_what_the_table_says(hist):
    _, recs = hist
    for rec, (_, page_size, num_pages, ragged) in zip(recs, RUNS):
        p = rec["params"]
        assert p.get("page_size", 0) == page_size and p.get("num_pages") == num_pages, p
        assert ("seqlens_q" in p or "seqlens_kv" in p) == ragged, p


def test_page_size_num_pages_and_ragged_filter(hist):
    """page_size=16&ragged=true was a 400 unknown_parameter."""
    api, recs = hist
    every = [r["id"] for r in recs]
    for k, field in ((1, "page_size"), (2, "num_pages"), (3, "ragged")):
        for value in {row[k] for row in RUNS} - {None}:
            want = [rec["id"] for rec, row in zip(recs, RUNS) if row[k] == value]
            asked = str(value).lower() if field == "ragged" else value
            assert ids(api, **{field: asked}) == want, (field, value)
            assert ids(api, order="newest", **{field: asked}) == want[::-1], (field, value)
    assert ids(api, page_size=0, ragged="false") == [every[0]]
    assert ids(api, page_size=8, ragged="true", num_pages=16) == [every[4]]
    assert ids(api, page_size=8, seq_kv=20) == [every[2]]
    assert ids(api, page_size=1) == [] and ids(api, num_pages=7) == []


def test_group_by_page_size_and_ragged(hist):
    api, recs = hist
    r = api.get("/v1/runs", params={"group_by": "page_size,ragged"})
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    check_against_openapi(body, "RunGroups")
    got = [(g["page_size"], g["ragged"], g["count"]) for g in body["groups"]]
    assert got == [(0, False, 1), (0, True, 1), (8, False, 1), (8, True, 1), (16, False, 1)], got
    groups = api.get("/v1/runs", params={"group_by": "num_pages"}).json()["groups"]
    assert [(g["num_pages"], g["count"]) for g in groups] == [(8, 1), (16, 2), (None, 2)], groups


def test_csv_has_the_serving_columns(hist):
    api, recs = hist
    r = api.get("/v1/runs", params={"format": "csv"})
    rows = list(csv.DictReader(io.StringIO(r.text, newline="")))
    got = [(int(x["id"]), x["page_size"], x["num_pages"], x["ragged"]) for x in rows]
    want = [(rec["id"], str(row[1]), "" if row[2] is None else str(row[2]), str(row[3]).lower())
            for rec, row in zip(recs, RUNS)]
    assert got == want
    # the client's flat rows (attnd.to_dataframe's) say the same
    flat = [attnd.flatten_record(rec) for rec in recs]
    assert [(f["page_size"], f["num_pages"], f["ragged"]) for f in flat] == [row[1:] for row in RUNS]


@pytest.mark.parametrize("params,field", [
    ({"page_size": "-1"}, "page_size"), ({"page_size": "1048577"}, "page_size"), ({"page_size": "x"}, "page_size"),
    ({"num_pages": "0"}, "num_pages"), ({"num_pages": "2147483648"}, "num_pages"), ({"ragged": "yes"}, "ragged"),
    ({"ragged": "1"}, "ragged"), ({"ragged": ""}, "ragged"), ({"group_by": "ragged,ragged"}, "group_by")])
def test_bad_serving_filters_are_400(api, params, field):
    r = api.get("/v1/runs", params=params)
    assert r.status_code == 400, (params, r.text[:300])
    assert (error_of(r)["code"], error_of(r)["field"]) == ("bad_value", field), error_of(r)


def test_group_by_names_the_serving_fields_when_refused(api):
    r = api.get("/v1/runs", params={"group_by": "colour"})
    assert r.status_code == 400 and "page_size, num_pages, ragged" in error_of(r)["message"], r.text[:400]


def test_client_and_cli_take_the_serving_filters(hist):
    """The client spells a Python bool as the server does; attnd-cli runs has the flags."""
    api, recs = hist
    client = attnd.Client(api.url)
    assert [r["id"] for r in client.runs(ragged=True, limit=100)["runs"]] == [recs[3]["id"], recs[4]["id"]]
    assert [g["ragged"] for g in client.aggregate("ragged", page_size=8)["groups"]] == [False, True]
    out = io.StringIO()
    rc = cli.main(["runs", "--url", api.url, "--json", "--ragged", "false", "--page-size", "16", "--num-pages", "8"],
                  out=out)
    assert rc == 0 and [json.loads(line)["id"] for line in out.getvalue().splitlines()] == [recs[1]["id"]]


# ---------------------------------------------------------------- migrations

def check_old_runs(api):
    """The four runs of the dumps (tagged old), found by the filters the migration added."""
    old = api.get("/v1/runs", params={"tag": "old"}).json()["runs"]
    assert len(old) == 4 and all(r["node"] == "old-node" for r in old), old
    a, b, c, d = [r["id"] for r in old]
    assert ids(api, page_size=0) == [a, c] and ids(api, page_size=16) == [b] and ids(api, page_size=8) == [d]
    assert ids(api, num_pages=8) == [b] and ids(api, num_pages=16) == [d]
    assert ids(api, ragged="true") == [c, d] and ids(api, ragged="false") == [a, b]
    assert ids(api, ragged="true", page_size=8, order="newest") == [d]
    groups = api.get("/v1/runs", params={"group_by": "ragged,page_size"}).json()["groups"]
    assert [(g["ragged"], g["page_size"], g["count"]) for g in groups] == [
        (False, 0, 1), (False, 16, 1), (True, 0, 1), (True, 8, 1)], groups
    rows = list(csv.DictReader(io.StringIO(api.get("/v1/runs", params={"format": "csv"}).text, newline="")))
    assert [(x["page_size"], x["num_pages"], x["ragged"]) for x in rows] == [
        ("0", "", "false"), ("16", "8", "false"), ("0", "", "true"), ("8", "16", "true")], rows
    # a new run beside them
    new = api.run_ok(**serving_run(dict(DECODE, seqlens_kv="5,9", page_size=4, tags="new")))
    assert ids(api, page_size=4, ragged="true") == [new["id"]] and ids(api, ragged="true") == [c, d, new["id"]]


@pytest.mark.sqlite_only  # it writes attnd.db itself
def test_sqlite_history_of_version_5_is_migrated(start_server, tmp_path):
    data = str(tmp_path / "data")
    os.makedirs(data)
    db = sqlite3.connect(os.path.join(data, "attnd.db"))
    with open(os.path.join(DATA, "history-v5.sqlite.sql")) as f:
        db.executescript(f.read())
    assert db.execute("PRAGMA user_version").fetchone() == (5,)
    db.close()
    srv = start_server(extra=["--cpu-threads", "1"], data_dir=data)
    check_old_runs(Api(srv.url))
    db = sqlite3.connect(os.path.join(data, "attnd.db"))
    assert db.execute("PRAGMA user_version").fetchone() == (7,)  # the newest
    # the filters walk their indexes
    plan = db.execute("EXPLAIN QUERY PLAN SELECT id FROM runs WHERE ragged = 1 ORDER BY id").fetchall()
    assert "runs_ragged_id" in str(plan), plan
    db.close()


def test_postgresql_history_of_version_3_is_migrated(start_server, tmp_path):
    helpers.test_pg()
    data = str(tmp_path / "data")
    os.makedirs(data)
    conninfo = helpers.pg_database_from_dump(data + "-v3", os.path.join(DATA, "history-v3.postgresql.sql"))
    srv = start_server(extra=["--cpu-threads", "1", "--store", conninfo], data_dir=data)
    check_old_runs(Api(srv.url))
    r = subprocess.run(["psql", "-X", "-At", "-d", conninfo, "-c", "SELECT version FROM attnd_schema"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "4", r.stdout + r.stderr  # the newest
