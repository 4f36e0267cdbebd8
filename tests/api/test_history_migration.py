"""A history written before the history columns existed (SQLite schema version 3, fleet
schema version 1: tests/api/data, dumps of what attnd wrote then) is migrated when attnd
opens it: every filter, the aggregate and the CSV then work on the old runs as on new ones."""
import os
import sqlite3
import subprocess

import pytest

import attnd_api_helpers as helpers
from attnd_api_helpers import REPO, Api, tiny

DATA = os.path.join(REPO, "tests", "api", "data")


def check_old_runs(api):
    """The four runs of the dumps, found by the filters the migration added."""
    old = api.get("/v1/runs", params={"limit": 1000}).json()["runs"]
    assert len(old) == 4 and all(r["node"] == "old-node" for r in old), old

    def ids(**params):
        r = api.get("/v1/runs", params=dict(params, limit=1000))
        assert r.status_code == 200, (params, r.text[:300])
        return [rec["id"] for rec in r.json()["runs"]]

    a, b, c, d = [r["id"] for r in old]
    assert ids(kv_heads=2) == [a, b, c, d] and ids(heads=4) == [b] and ids(batch=2) == [b]  # kv_heads: else heads
    assert ids(seq_q=8) == [b] and ids(seq=16) == [a, c, d] and ids(seq_kv=16) == [a, b, c, d]
    assert ids(head_dim_v=4) == [c] and ids(head_dim_v=8) == [a, b, d] and ids(window=3) == [c]
    assert ids(dtype="fp16") == [c] and ids(mask="none") == [d] and ids(mask="causal") == [a, b, c]
    assert ids(node="old-node") == [a, b, c, d] and ids(status="done", backend="reference") == [a, b, c, d]
    assert ids(gpu=old[0]["device"]["name"]) == [a, b, c, d] and ids(commit=old[0]["build"]["commit"]) == [a, b, c, d]
    assert ids(order="newest") == [d, c, b, a] and ids(tag="x") == []
    groups = api.get("/v1/runs", params={"group_by": "seq_q,dtype"}).json()["groups"]
    assert [(g["seq_q"], g["dtype"], g["count"]) for g in groups] == [(8, "bf16", 1), (16, "bf16", 2), (16, "fp16", 1)]
    csv = api.get("/v1/runs", params={"format": "csv"}).text.splitlines()
    assert len(csv) == 5 and csv[3].split(",")[15] == "3", csv  # the window column of run c
    # a new run beside them, with tags
    new = api.run_ok(**tiny(tags="after-migration"))
    assert ids(tag="after-migration") == [new["id"]] and len(ids()) == 5


@pytest.mark.sqlite_only  # it writes attnd.db itself
def test_sqlite_history_of_version_3_is_migrated(start_server, tmp_path):
    data = str(tmp_path / "data")
    os.makedirs(data)
    db = sqlite3.connect(os.path.join(data, "attnd.db"))
    with open(os.path.join(DATA, "history-v3.sqlite.sql")) as f:
        db.executescript(f.read())
    assert db.execute("PRAGMA user_version").fetchone() == (3,)
    db.close()
    srv = start_server(extra=["--cpu-threads", "1"], data_dir=data)
    check_old_runs(Api(srv.url))
    db = sqlite3.connect(os.path.join(data, "attnd.db"))
    assert db.execute("PRAGMA user_version").fetchone() == (7,)  # the newest
    db.close()


def test_postgresql_history_of_version_1_is_migrated(start_server, tmp_path):
    helpers.test_pg()
    data = str(tmp_path / "data")
    os.makedirs(data)
    conninfo = helpers.pg_database_from_dump(data + "-v1", os.path.join(DATA, "history-v1.postgresql.sql"))
    srv = start_server(extra=["--cpu-threads", "1", "--store", conninfo], data_dir=data)
    check_old_runs(Api(srv.url))
    r = subprocess.run(["psql", "-X", "-At", "-d", conninfo, "-c", "SELECT version FROM attnd_schema"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "4", r.stdout + r.stderr  # the newest
