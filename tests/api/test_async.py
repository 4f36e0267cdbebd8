"""Async jobs: async=true answers 202 with id, status queued, queue_position and a Location
header; the run moves queued → running → done | failed (with reason) | cancelled; DELETE
/v1/runs/ID cancels a queued run (409 once it runs or is finished); the queue position shows
in GET /v1/runs/ID while it waits."""
import time

import pytest

from attnd_api_helpers import Api, error_of, tiny


def wait_final(api, run_id, timeout=60):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        rec = api.get("/v1/runs/%d" % run_id).json()
        if not seen or seen[-1] != rec["status"]:
            seen.append(rec["status"])
        if rec["status"] in ("done", "failed", "cancelled"):
            return rec, seen
        time.sleep(0.05)
    raise AssertionError("run %d not final within %d s (states %s)" % (run_id, timeout, seen))


def submit(api, **params):
    r = api.run(params=dict(params, **{"async": "true"}))
    assert r.status_code == 202, r.text[:500]
    body = r.json()
    assert set(body) == {"id", "status", "queue_position"}, body
    assert body["status"] == "queued" and body["queue_position"] >= 1
    assert r.headers["Location"] == "/v1/runs/%d" % body["id"]
    return body


def test_async_run_completes(api):
    body = submit(api, **tiny(seed=7))
    rec, states = wait_final(api, body["id"])
    assert rec["status"] == "done", rec
    assert rec["id"] == body["id"] and rec["timing"]["median_us"] > 0
    assert set(states) <= {"queued", "running", "done"}
    assert "queue_position" not in rec
    # Also through the body, and the history has it once.
    r = api.run(params={"async": "true"}, body=tiny(seed=8))
    assert r.status_code == 202
    wait_final(api, r.json()["id"])
    ids, after = [], 0
    while True:  # the whole history, by its cursor (a run id with SQLite, a position in a fleet)
        page = api.get("/v1/runs", params={"after": after, "limit": 1000}).json()
        ids += [x["id"] for x in page["runs"]]
        if not page["runs"]:
            break
        after = page["next_after"]
    assert ids.count(body["id"]) == 1


def test_async_refused_before_queueing_is_not_stored(api):
    r = api.run(params=dict(tiny(), backend="no_such_backend", **{"async": "true"}))
    assert r.status_code == 400
    r = api.run(params=dict(tiny(), **{"async": "maybe"}))
    assert r.status_code == 400 and error_of(r)["field"] == "async"
    # Resident tensors are checked before queueing too (async runs on them: test_async_tensors.py).
    r = api.run(params=dict(tiny(), q="t999999", **{"async": "true"}))
    assert r.status_code == 404 and error_of(r)["field"] == "q", r.text


@pytest.fixture
def hang_api(start_server):
    return Api(start_server(extra=["--enable-fault-injection", "true", "--job-timeout-s", "3",
                                   "--cpu-threads", "2"]).url)


def test_queue_positions_cancel_and_failure(hang_api):
    api = hang_api
    hang = submit(api, **tiny(fault="hang"))
    deadline = time.monotonic() + 10
    while api.get("/v1/runs/%d" % hang["id"]).json()["status"] != "running":
        assert time.monotonic() < deadline, "the hanging run never started"
        time.sleep(0.02)
    a = submit(api, **tiny(seed=1))
    b = submit(api, **tiny(seed=2))
    c = submit(api, **tiny(seed=3))
    assert (a["queue_position"], b["queue_position"], c["queue_position"]) == (1, 2, 3)
    assert api.get("/v1/runs/%d" % b["id"]).json()["queue_position"] == 2

    # Cancel b while it waits: 200 + the cancelled record; c moves up.
    r = api.request("DELETE", "/v1/runs/%d" % b["id"])
    assert r.status_code == 200, r.text
    rec = r.json()
    assert rec["status"] == "cancelled" and rec["error"]["code"] == "cancelled" and rec["finished"]
    assert api.get("/v1/runs/%d" % b["id"]).json()["status"] == "cancelled"
    assert api.get("/v1/runs/%d" % c["id"]).json()["queue_position"] == 2
    # Cancelling again, or the running one: 409; an unknown one: 404; a bad id: 400.
    r = api.request("DELETE", "/v1/runs/%d" % b["id"])
    assert r.status_code == 409 and error_of(r)["code"] == "not_queued"
    r = api.request("DELETE", "/v1/runs/%d" % hang["id"])
    assert r.status_code == 409 and "running" in error_of(r)["message"]
    assert api.request("DELETE", "/v1/runs/999999").status_code == 404
    assert api.request("DELETE", "/v1/runs/abc").status_code == 400

    # The hanging run fails with its reason (job timeout); the others then run.
    rec, _ = wait_final(api, hang["id"], timeout=30)
    assert rec["status"] == "failed" and rec["error"]["code"] == "timeout" and rec["error"]["message"], rec
    for x in (a, c):
        rec, _ = wait_final(api, x["id"], timeout=60)
        assert rec["status"] == "done", rec
    assert api.get("/v1/runs/%d" % b["id"]).json()["status"] == "cancelled"
    statuses = {x["id"]: x["status"] for x in api.get("/v1/runs").json()["runs"]}
    assert statuses == {hang["id"]: "failed", a["id"]: "done", b["id"]: "cancelled", c["id"]: "done"}
    # The metrics counted each final state.
    text = api.get("/metrics").text
    assert 'attnd_runs_total{backend="reference",status="cancelled"} 1' in text


def test_sync_run_cancelled_while_queued_gets_409(hang_api):
    import threading
    api = hang_api
    hang = submit(api, **tiny(fault="hang"))
    result = {}
    # a run is stored running once its worker has held it 20 ms: till then it lists as queued
    deadline = time.monotonic() + 10
    while api.get("/v1/runs/%d" % hang["id"]).json()["status"] != "running":
        assert time.monotonic() < deadline, "the hanging run never started"
        time.sleep(0.02)

    def sync_run():
        result["r"] = Api(api.url).run(params=tiny(seed=5), timeout=60)

    t = threading.Thread(target=sync_run)
    t.start()
    deadline = time.monotonic() + 10
    queued = []
    while not queued:
        assert time.monotonic() < deadline
        queued = api.get("/v1/runs", params={"status": "queued"}).json()["runs"]
        time.sleep(0.02)
    r = api.request("DELETE", "/v1/runs/%d" % queued[0]["id"])
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    t.join(timeout=30)
    assert result["r"].status_code == 409 and error_of(result["r"])["code"] == "cancelled"
    wait_final(api, hang["id"], timeout=30)
