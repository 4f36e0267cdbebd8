"""GET /v1/runs: cursor paging over the stored history (after=POSITION, limit=N), the filters
backend, status, device, node and since, a poller that sees every run exactly once while 50
client threads write, and the speed of a page on a 100 000-run history.

The cursor is next_after, whatever it is: with SQLite it is the last run's id, in a fleet
(ATTND_TEST_STORE=postgresql) the position at which the run reached the database. Only the
SQLite-only checks compare it with ids."""
import json
import os
import sqlite3
import threading
import time

import pytest

from attnd_api_helpers import Api, error_of, store_under_test, tiny


def page(api, **params):
    r = api.get("/v1/runs", params=params)
    assert r.status_code == 200, r.text[:500]
    body = r.json()
    assert set(body) == {"runs", "next_after"}, body.keys()
    return body


def follow(api, after=0, limit=1000, **filters):
    """Every run after `after`, by following next_after; returns the records."""
    out = []
    while True:
        body = page(api, after=after, limit=limit, **filters)
        out += body["runs"]
        if not body["runs"]:
            assert body["next_after"] == after
            return out
        assert body["next_after"] > after
        after = body["next_after"]


@pytest.fixture
def fresh(start_server):
    return Api(start_server(extra=["--cpu-threads", "2"]).url)


def test_paging_and_filters(fresh):
    api = fresh
    ids = [api.run_ok(**tiny(seed=i))["id"] for i in range(5)]
    assert ids == sorted(ids)
    body = page(api)
    assert [r["id"] for r in body["runs"]] == ids
    if store_under_test() == "sqlite":
        assert body["next_after"] == ids[-1]
    # limit + after walk the same list in pieces, oldest first.
    first = page(api, limit=2)
    assert [r["id"] for r in first["runs"]] == ids[:2]
    rest = page(api, after=first["next_after"], limit=10)
    assert [r["id"] for r in rest["runs"]] == ids[2:] and rest["next_after"] == body["next_after"]
    # Nothing new: next_after stays where it was.
    end = body["next_after"]
    assert page(api, after=end) == {"runs": [], "next_after": end}
    # node: this server's name (the host name by default) and no other.
    assert [r["id"] for r in page(api, node=body["runs"][0]["node"])["runs"]] == ids
    r = api.get("/v1/runs", params={"node": "no-such-node"})  # no run can have it: 400, not an empty list
    assert r.status_code == 400 and error_of(r)["field"] == "node", r.text
    # Filters.
    assert [r["id"] for r in page(api, backend="reference")["runs"]] == ids
    assert page(api, backend="flash")["runs"] == []
    assert [r["id"] for r in page(api, status="done")["runs"]] == ids
    assert page(api, status="failed")["runs"] == []
    assert [r["id"] for r in page(api, device="cpu")["runs"]] == ids
    assert page(api, device="cuda:0")["runs"] == []
    created = [r["created"] for r in body["runs"]]
    assert [r["id"] for r in page(api, since=created[2])["runs"]] == [i for i, c in zip(ids, created) if c >= created[2]]
    assert page(api, since="2999-01-01T00:00:00Z")["runs"] == []
    assert [r["id"] for r in page(api, since="2000-01-01")["runs"]] == ids
    assert [r["id"] for r in page(api, since="2000-01-01T01:00:00+01:00")["runs"]] == ids
    # Each record is the same as GET /v1/runs/ID.
    for rec in body["runs"]:
        assert api.get("/v1/runs/%d" % rec["id"]).json() == rec


@pytest.mark.parametrize("params,field", [
    ({"after": "-1"}, "after"), ({"after": "x"}, "after"), ({"limit": "0"}, "limit"),
    ({"limit": "1001"}, "limit"), ({"status": "weird"}, "status"), ({"since": "yesterday"}, "since"),
    ({"since": "2026-13-01"}, "since"), ({"colour": "red"}, "colour")])
def test_bad_parameters(api, params, field):
    r = api.get("/v1/runs", params=params)
    assert r.status_code == 400, r.text
    assert error_of(r)["field"] == field


def test_poller_sees_every_run_once_under_50_writers(fresh):
    api = fresh
    # Each writer makes at least per_writer runs and goes on (up to most_per_writer) until the
    # poller has read OVERLAP pages while writes were in flight: 300 tiny runs alone can end
    # before a poller that starts after 50 threads gets its first page.
    writers, per_writer, most_per_writer, overlap = 50, 6, 40, 5
    created, errors = [], []
    lock = threading.Lock()
    go, polled_enough = threading.Event(), threading.Event()

    def writer(k):
        w = Api(api.url)
        go.wait()
        for i in range(most_per_writer):
            if i >= per_writer and polled_enough.is_set():
                return
            try:
                r = w.run(params=tiny(seed=k * 100 + i), timeout=120)
                if r.status_code == 200:
                    with lock:
                        created.append(r.json()["id"])
                else:
                    with lock:
                        errors.append(r.text[:300])
            except Exception as exc:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(repr(exc))

    seen, pages_while_writing = [], 0
    poller = Api(api.url)

    def poll_once(after):
        body = page(poller, after=after, limit=7)
        for rec in body["runs"]:
            seen.append(rec["id"])
        assert body["next_after"] >= after
        return body["next_after"]

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(writers)]
    for t in threads:
        t.start()
    after = poll_once(0)
    go.set()
    deadline = time.monotonic() + 240
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        after = poll_once(after)
        pages_while_writing += 1
        if pages_while_writing >= overlap:
            polled_enough.set()
    polled_enough.set()
    for t in threads:
        t.join(timeout=max(1, deadline - time.monotonic()))
    while True:  # drain what is left
        nxt = poll_once(after)
        if nxt == after:
            break
        after = nxt
    assert not errors, errors[:5]
    assert writers * per_writer <= len(created) <= writers * most_per_writer
    assert len(seen) == len(set(seen)), "a run was seen twice"
    assert seen == sorted(seen)
    assert set(seen) == set(created), (sorted(set(created) - set(seen))[:10], sorted(set(seen) - set(created))[:10])
    assert pages_while_writing >= overlap, "the writers ended before the poller read %d pages" % overlap


RECORD = ('{"id":%d,"status":"done","created":"%s","finished":"%s","backend":"reference",'
          '"params":{"backend":"reference","device":"cpu","batch":1,"heads":2,"seq_q":16,"seq_kv":16,"head_dim":8,'
          '"dtype":"bf16","mask":"causal","causal":true,"scale":0.35355339059327373,"seed":%d,"warmup":0,"iters":1,'
          '"min_iters":10,"max_iters":1000,"min_time_ms":20,"max_time_ms":2000,"target_noise":0.005,"cache":"hot",'
          '"graph":false,"verify":false,"profile":true,"verify_cpu_max_macs":1000000000},'
          '"device":{"id":"cpu","kind":"cpu","name":"cpu","cores":2,"memory_total_bytes":1000000000},'
          '"timing":{"median_us":%d.5,"mean_us":12.5,"min_us":11.0,"max_us":14.0,"iters":1,"warmup":0,'
          '"stop_reason":"iters","cache":"hot","graph":false},"kernels":null,"output":{"checksum":1.25,"nan":0},'
          '"verify":null,"perf":{"tflops":0.001,"gbps":0.01}}')


@pytest.mark.sqlite_only  # it writes the 100 000 runs into attnd.db itself
def test_page_of_100k_history_under_20ms(start_server, tmp_path):
    data = str(tmp_path / "data")
    os.makedirs(data)
    srv = start_server(extra=["--cpu-threads", "1"], data_dir=data)
    srv.stop_checked()
    db = sqlite3.connect(os.path.join(data, "attnd.db"))
    n = 100_000
    rows = (("2026-01-01T00:00:00.000Z", "reference", "cpu", "done",
             RECORD % (i, "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:00.001Z", i, i % 97))
            for i in range(1, n + 1))
    with db:
        db.executemany("INSERT INTO runs(created, backend, device, status, record) VALUES (?,?,?,?,?)", rows)
    db.close()
    srv = start_server(extra=["--cpu-threads", "1"], data_dir=data)
    api = Api(srv.url)
    assert page(api, after=n - 1)["runs"][0]["id"] == n
    for params in ({"limit": 100}, {"after": n // 2, "limit": 100}, {"after": n - 100, "limit": 100},
                   {"limit": 100, "backend": "reference"}, {"limit": 100, "status": "done", "device": "cpu"}):
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            r = api.get("/v1/runs", params=params)
            best = min(best, time.perf_counter() - t0)
            assert r.status_code == 200 and len(r.json()["runs"]) == 100, params
        assert best < 0.020, "GET /v1/runs %r took %.1f ms on a %d-run history" % (params, best * 1e3, n)
    # Filters that match nothing must not scan the whole history either (they use the indexes).
    for params in ({"limit": 100, "backend": "flash"}, {"limit": 100, "status": "failed"},
                   {"limit": 100, "device": "cuda:3"}, {"limit": 100, "since": "2999-01-01"}):
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            r = api.get("/v1/runs", params=params)
            best = min(best, time.perf_counter() - t0)
            assert r.status_code == 200 and r.json() == {"runs": [], "next_after": 0}, params
        assert best < 0.020 or "since" in params, "GET /v1/runs %r took %.1f ms on a %d-run history" % (
            params, best * 1e3, n)


def test_trace_endpoint(start_server, tmp_path):
    """GET /v1/runs/ID/trace serves the stored trace (table traces) as is; runs without one
    answer 404 no_trace. (A real trace needs a GPU: tests/gpu/test_trace.py.)"""
    data = str(tmp_path / "data")
    os.makedirs(data)
    srv = start_server(extra=["--cpu-threads", "1"], data_dir=data)
    api = Api(srv.url)
    rec = api.run_ok(**tiny())
    r = api.get("/v1/runs/%d/trace" % rec["id"])
    assert r.status_code == 404 and error_of(r)["code"] == "no_trace", r.text
    assert "profile=true" in error_of(r)["message"]
    assert error_of(api.get("/v1/runs/999999/trace"))["code"] == "not_found"
    assert api.get("/v1/runs/0/trace").status_code == 400
    srv.stop_checked()
    trace = {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "GPU"}},
                             {"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": 0, "dur": 3.5}],
             "displayTimeUnit": "ms"}
    db = sqlite3.connect(os.path.join(data, "attnd.db"))
    with db:
        db.execute("INSERT INTO traces(run_id, json) VALUES (?, ?)", (rec["id"], json.dumps(trace)))
    db.close()
    api = Api(start_server(extra=["--cpu-threads", "1"], data_dir=data).url)
    r = api.get("/v1/runs/%d/trace" % rec["id"])
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json")
    assert r.json() == trace
    assert "trace" not in api.get("/v1/runs/%d" % rec["id"]).json()
