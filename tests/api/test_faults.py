"""Fault injection (--enable-fault-injection true) on the cpu device: a crashing worker, a
hanging one past --job-timeout-s, a full queue. The front stays up, fails the job with the
reason, restarts the worker, and loses no accepted job."""
import re
import threading
import time

import pytest
import requests

from attnd_api_helpers import Api, error_of, tiny


def failed_record(r, code):
    assert r.status_code == 500, "expected 500 failed, got %d: %s" % (r.status_code, r.text[:1000])
    rec = r.json()
    assert rec.get("status") == "failed", rec
    assert isinstance(rec.get("id"), int), rec
    err = rec.get("error")
    assert isinstance(err, dict), rec
    assert err.get("code") == code, err
    assert isinstance(err.get("message"), str) and err["message"], err
    return rec


def stored(api, rec):
    """GET of a run answers the record the POST answered."""
    r = api.get("/v1/runs/%d" % rec["id"])
    assert r.status_code in (200, 500), r.text[:500]
    got = r.json()
    assert got == rec
    return got


@pytest.fixture
def fault_api(start_server):
    srv = start_server(extra=["--enable-fault-injection", "true", "--job-timeout-s", "2", "--cpu-threads", "2"])
    return Api(srv.url)


def test_crash_then_next_run_succeeds(fault_api):
    api = fault_api
    r = api.run(params=tiny(fault="crash"), timeout=60)
    rec = failed_record(r, "worker_crashed")
    assert re.search(r"SIG[A-Z]+|signal", rec["error"]["message"]), rec["error"]
    assert rec["backend"] == "reference"
    stored(api, rec)
    ok = api.run_ok(**tiny(seed=2))
    assert ok["id"] > rec["id"]
    assert ok["device"]["id"] == "cpu"
    assert api.get("/readyz").json().get("ready") is True


def test_two_crashes_in_a_row(fault_api):
    api = fault_api
    for _ in range(2):
        failed_record(api.run(params=tiny(fault="crash"), timeout=60), "worker_crashed")
    api.run_ok(**tiny())


def test_hang_times_out(fault_api):
    api = fault_api
    t0 = time.monotonic()
    r = api.run(params=tiny(fault="hang"), timeout=60)
    took = time.monotonic() - t0
    rec = failed_record(r, "timeout")
    assert 1.5 <= took <= 10.0, "a hang with --job-timeout-s 2 ended after %.1f s" % took
    stored(api, rec)
    api.run_ok(**tiny(seed=3))


def test_bad_fault_value(fault_api):
    r = fault_api.run(params=tiny(fault="explode"))
    assert r.status_code == 400, r.text[:500]
    assert error_of(r)["field"] == "fault"


def test_queue_full_429(start_server):
    """--queue-depth 1: a hanging job runs, one more waits, a third is refused with 429 and
    Retry-After. Both accepted jobs end (failed by timeout, then done)."""
    srv = start_server(extra=["--enable-fault-injection", "true", "--job-timeout-s", "4", "--queue-depth", "1"])
    results = {}

    def post(name, params):
        try:
            results[name] = requests.post(srv.url + "/v1/runs", params=params, timeout=60)
        except requests.RequestException as exc:
            results[name] = exc

    hang = threading.Thread(target=post, args=("hang", tiny(fault="hang")))
    hang.start()
    time.sleep(1.0)   # the worker has taken it
    waiting = threading.Thread(target=post, args=("queued", tiny(seed=4)))
    waiting.start()
    time.sleep(1.0)   # it waits in the queue
    third = requests.post(srv.url + "/v1/runs", params=tiny(seed=5), timeout=30)
    hang.join(60)
    waiting.join(60)
    assert not hang.is_alive() and not waiting.is_alive(), "accepted jobs never answered"

    assert third.status_code == 429, "third job: %d %s" % (third.status_code, third.text[:500])
    error_of(third)
    ra = third.headers.get("Retry-After")
    assert ra is not None and ra.strip().isdigit() and int(ra) >= 1, third.headers

    api = Api(srv.url)
    r_hang, r_queued = results["hang"], results["queued"]
    assert isinstance(r_hang, requests.Response), r_hang
    assert isinstance(r_queued, requests.Response), r_queued
    rec_hang = failed_record(r_hang, "timeout")
    assert r_queued.status_code == 200, r_queued.text[:1000]
    rec_queued = r_queued.json()
    assert rec_queued["status"] == "done"
    stored(api, rec_hang)
    stored(api, rec_queued)
    # The queue drained: a new job runs at once.
    api.run_ok(**tiny(seed=6))
