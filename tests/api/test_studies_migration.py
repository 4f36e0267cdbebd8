"""A history written before studies existed (SQLite schema version 4, fleet schema version 2:
tests/api/data, dumps of what attnd wrote then) is migrated when attnd opens it: its runs
stay as they were, a study runs and is listed beside them, and compare reads old and new runs
alike."""
import os
import sqlite3
import subprocess
import time

import pytest

import attnd_api_helpers as helpers
from attnd_api_helpers import REPO, Api, tiny

DATA = os.path.join(REPO, "tests", "api", "data")


def check_history_with_a_study(api):
    old = api.get("/v1/runs", params={"tag": "old"}).json()["runs"]
    assert [r["params"]["seq_q"] for r in old] == [16, 32] and all(r["node"] == "old-node" for r in old), old
    assert api.get("/v1/studies").json() == {"studies": [], "next_before": None}
    r = api.post("/v1/studies", json={"variants": ["reference"], "batch": 1, "heads": 2, "seq": 16, "head_dim": 8,
                                      "warmup": 0, "iters": 5, "rounds": 2, "tags": ["new"]}, timeout=30)
    assert r.status_code == 202, r.text
    sid = r.json()["id"]
    deadline = time.monotonic() + 120
    while True:
        rec = api.get("/v1/studies/%d" % sid, params={"wait": 10}, timeout=30).json()
        if rec["status"] != "queued" and rec["status"] != "running":
            break
        assert time.monotonic() < deadline
    assert rec["status"] == "done" and rec["table"][0]["rounds_done"] == 2, rec
    assert min(run["id"] for run in rec["runs"]) > max(r["id"] for r in old)  # ids go on after the old ones
    assert [s["id"] for s in api.get("/v1/studies", params={"tag": "new"}).json()["studies"]] == [sid]
    r = api.get("/v1/compare", params={"base": old[0]["id"], "run": "study:%d:reference" % sid})
    assert r.status_code == 200 and r.json()["rows"][0]["base"]["runs"] == [old[0]["id"]], r.text


@pytest.mark.sqlite_only  # it writes attnd.db itself
def test_sqlite_history_of_version_4_is_migrated(start_server, tmp_path):
    data = str(tmp_path / "data")
    os.makedirs(data)
    db = sqlite3.connect(os.path.join(data, "attnd.db"))
    with open(os.path.join(DATA, "history-v4.sqlite.sql")) as f:
        db.executescript(f.read())
    assert db.execute("PRAGMA user_version").fetchone() == (4,)
    db.close()
    srv = start_server(extra=["--cpu-threads", "1"], data_dir=data)
    check_history_with_a_study(Api(srv.url))
    db = sqlite3.connect(os.path.join(data, "attnd.db"))
    assert db.execute("PRAGMA user_version").fetchone() == (7,)  # the newest
    assert db.execute("SELECT count(*) FROM studies").fetchone() == (1,)
    db.close()


def test_postgresql_history_of_version_2_is_migrated(start_server, tmp_path):
    helpers.test_pg()
    data = str(tmp_path / "data")
    os.makedirs(data)
    conninfo = helpers.pg_database_from_dump(data + "-v2", os.path.join(DATA, "history-v2.postgresql.sql"))
    srv = start_server(extra=["--cpu-threads", "1", "--store", conninfo], data_dir=data)
    check_history_with_a_study(Api(srv.url))
    r = subprocess.run(["psql", "-X", "-At", "-d", conninfo, "-c",
                        "SELECT version FROM attnd_schema; SELECT count(*) FROM studies"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == ["4", "1"], r.stdout + r.stderr
