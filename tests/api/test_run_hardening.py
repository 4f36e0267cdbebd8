"""Runs, the job queue, the store and the metrics under hostile or careless clients:

- SIGTERM ends the queued runs at once (sync: 503 shutting_down, not stored; async: stored
  cancelled), finishes the running one (its client gets its answer) and exits in time;
- a synchronous client that hangs up while its run is queued frees its slot (the run is
  stored cancelled, client_gone); one that hangs up while it runs leaves a record that says so;
- junk requests (made-up methods, no token) cannot fill the request-metrics table;
- a run cut off by kill -9 of the front is failed with `finished` set after the restart;
- integer parameters written 1e3 in a JSON body, out-of-range scales, and the error fields;
- one spelling of numbers and booleans in the query string and a body alike (no +1, 01, -0,
  verify=1), and \u0000 in a body's names and strings refused, naming the member;
- a run on the cpu device over cpu_max_macs, counting every forward it may make, is refused
  422 before it queues, saying what would fit.
"""
import os
import signal
import socket
import threading
import time

import pytest
import requests

from attnd_api_helpers import Api, AttndServer, child_pids, error_of, tiny


# dwell() is bounded by time, not by forwards: its max_iters far exceeds any cpu_max_macs a
# server should default to (the cost counts every forward the run may make), so the servers
# that run it lift the limit.
DWELL_FLAGS = ["--cpu-max-macs", "0"]


def dwell(ms, **over):
    """A tiny cpu run that lasts about ms milliseconds whatever the machine's load: the
    stopping rule times forwards for at least min_time_ms (one forward ≈ 0.1–1 ms, far
    from max_iters). Its server needs DWELL_FLAGS."""
    p = tiny(heads=2, seq=128, head_dim=16, warmup=0, iters=0, min_iters=1, max_iters=100000,
             min_time_ms=ms, max_time_ms=ms, profile="false")
    p.update(over)
    return p


def runs(api, **filters):
    return api.get("/v1/runs", params=dict(limit=1000, **filters)).json()["runs"]


def wait_for(what, check, timeout=20.0, every=0.05):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, "timed out after %.0f s waiting for %s" % (timeout, what)
        time.sleep(every)


def wait_final(api, run_id, timeout=60.0):
    def final():
        rec = api.get("/v1/runs/%d" % run_id).json()
        return rec if rec["status"] in ("done", "failed", "cancelled") else None
    return wait_for("run %d to end" % run_id, final, timeout)


def submit_async(api, params):
    r = api.run(params=dict(params, **{"async": "true"}))
    assert r.status_code == 202, r.text[:500]
    return r.json()["id"]


class RawClient:
    """A POST /v1/runs over a socket of our own, so the test decides when the client hangs up."""

    def __init__(self, url, params):
        host, port = url.replace("http://", "").rsplit(":", 1)
        query = "&".join("%s=%s" % (k, v) for k, v in params.items())
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.sendall(("POST /v1/runs?%s HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n"
                           % (query, host)).encode())

    def hang_up(self):
        self.sock.close()


# ---------------------------------------------------------------- SIGTERM

def test_sigterm_ends_queued_runs_at_once(tmp_path):
    """7 runs wait behind a running one. SIGTERM: the synchronous ones waiting are answered 503
    shutting_down at once and not stored, the async ones are stored cancelled (with finished),
    the running one is answered 200 done and stored, and attnd exits 0 well within
    job_timeout_s plus a few seconds (it used to run every queued job first)."""
    job_timeout_s = 20
    data = str(tmp_path / "data")
    os.makedirs(data)
    srv = AttndServer(data_dir=data, extra=["--cpu-threads", "1", "--job-timeout-s", str(job_timeout_s)]
                      + DWELL_FLAGS).start()
    answers, lock = {}, threading.Lock()

    def sync_run(name, params):
        r = Api(srv.url).run(params=params, timeout=60)
        with lock:
            answers[name] = (r, time.monotonic())

    threads = []
    try:
        api = Api(srv.url)
        t = threading.Thread(target=sync_run, args=("running", dwell(3000, seed=1)))
        t.start()
        threads.append(t)
        wait_for("the first run to run", lambda: runs(api, status="running"))
        for i in range(4):
            t = threading.Thread(target=sync_run, args=("sync%d" % i, tiny(seed=10 + i)))
            t.start()
            threads.append(t)
        async_ids = [submit_async(api, tiny(seed=20 + i)) for i in range(3)]
        wait_for("7 runs queued", lambda: len(runs(api, status="queued")) == 7)

        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        rc = srv.proc.wait(timeout=job_timeout_s + 10)
        exit_s = time.monotonic() - t0
        for t in threads:
            t.join(timeout=30)
        assert rc == 0, srv.stderr_text()
    finally:
        srv.kill()
    assert exit_s < job_timeout_s + 5, "exit took %.1f s" % exit_s
    assert exit_s < 3.0 + 5, "exit took %.1f s: queued runs were run" % exit_s

    r, _ = answers["running"]
    assert r.status_code == 200 and r.json()["status"] == "done", r.text[:300]
    running_id = r.json()["id"]
    for i in range(4):
        r, at = answers["sync%d" % i]
        assert r.status_code == 503, r.text[:300]
        err = error_of(r)
        assert err["code"] == "shutting_down" and err["field"] is None, err
        assert at - t0 < 2.0, "a queued run was answered %.1f s after SIGTERM" % (at - t0)

    srv2 = AttndServer(data_dir=data, extra=["--cpu-threads", "1"]).start()
    try:
        api2 = Api(srv2.url)
        stored = {rec["id"]: rec for rec in runs(api2)}
        assert set(stored) == {running_id} | set(async_ids), "only the running and the async runs are stored"
        assert stored[running_id]["status"] == "done"
        for i in async_ids:
            rec = stored[i]
            assert rec["status"] == "cancelled" and rec["error"]["code"] == "shutting_down", rec
            assert isinstance(rec["finished"], str) and rec["finished"].endswith("Z"), rec
            assert "timing" not in rec, "a cancelled run never ran"
    finally:
        srv2.stop_checked()
        srv2.cleanup()
        srv.cleanup()


# ---------------------------------------------------------------- clients that hang up

def test_client_gone_frees_queue_slots(start_server):
    """queue_depth 4, filled by synchronous clients: the next POST gets 429 (field null). The
    clients hang up: their runs leave the queue within a poll or two, are stored cancelled
    (client_gone) and never run; a new run is then accepted. A client that hangs up while its
    run runs: the run finishes and its record says client_gone."""
    srv = start_server(extra=["--cpu-threads", "1", "--queue-depth", "4", "--job-timeout-s", "30"] + DWELL_FLAGS)
    api = Api(srv.url)
    busy = submit_async(api, dwell(2500, seed=1))
    wait_for("the first run to run", lambda: api.get("/v1/runs/%d" % busy).json()["status"] == "running")

    clients = [RawClient(srv.url, tiny(seed=10 + i)) for i in range(4)]
    queued = wait_for("4 runs queued", lambda: (lambda q: q if len(q) == 4 else None)(runs(api, status="queued")))
    r = api.run(params=tiny(seed=99))
    assert r.status_code == 429 and r.headers.get("Retry-After"), r.text[:300]
    err = error_of(r)
    assert err["code"] == "queue_full" and err["field"] is None, err

    t0 = time.monotonic()
    for c in clients:
        c.hang_up()
    wait_for("the queue to empty", lambda: not runs(api, status="queued"), timeout=5)
    assert time.monotonic() - t0 < 2.0, "abandoned runs kept their slots for %.1f s" % (time.monotonic() - t0)
    for q in queued:
        rec = api.get("/v1/runs/%d" % q["id"]).json()
        assert rec["status"] == "cancelled" and rec["error"]["code"] == "client_gone", rec
        assert rec["client_gone"] is True and isinstance(rec["finished"], str), rec
    after = submit_async(api, tiny(seed=100))  # the slots are free again

    assert wait_final(api, busy)["status"] == "done"
    assert wait_final(api, after)["status"] == "done"
    for q in queued:  # they never ran
        rec = api.get("/v1/runs/%d" % q["id"]).json()
        assert rec["status"] == "cancelled" and "timing" not in rec, rec

    # Hung up while running: it finishes unattended and says so.
    c = RawClient(srv.url, dwell(1500, seed=2))
    rec = wait_for("the run to run", lambda: (runs(api, status="running") or [None])[0])
    c.hang_up()
    rec = wait_final(api, rec["id"])
    assert rec["status"] == "done" and rec["client_gone"] is True, rec
    # A client that stays gets no such member.
    assert "client_gone" not in api.run_ok(**tiny(seed=3))


# ---------------------------------------------------------------- metrics

def test_junk_requests_cannot_fill_request_metrics(start_server, tmp_path):
    """300 unauthenticated requests with made-up methods all land in one series (method other,
    route unmatched, 401); real requests are still counted, nothing is dropped."""
    parser = pytest.importorskip("prometheus_client.parser", reason="pip prometheus_client")
    token = "tok-metrics-0123456789"
    path = tmp_path / "tokens"
    path.write_text(token + "\n")
    srv = start_server(extra=["--cpu-threads", "1", "--token-file", str(path)])
    auth = {"Authorization": "Bearer " + token}
    s = requests.Session()
    for i in range(300):
        r = s.request("X%03d" % i, srv.url + "/v1/runs", timeout=10)
        assert r.status_code == 401, (i, r.status_code)
    for path_ in ("/v1/runs/1", "/no/such/%d" % 7):
        assert s.get(srv.url + path_, timeout=10).status_code == 401
    for _ in range(3):
        assert s.get(srv.url + "/v1/variants", headers=auth, timeout=10).status_code == 200
    assert s.head(srv.url + "/v1/device", headers=auth, timeout=10).status_code == 200
    assert s.request("PATCH", srv.url + "/v1/runs", headers=auth, timeout=10).status_code == 405

    text = s.get(srv.url + "/metrics", headers=auth, timeout=10).text
    fams = {f.name: f for f in parser.text_string_to_metric_families(text)}
    http = [x for x in fams["attnd_http_requests"].samples if x.name == "attnd_http_requests_total"]

    def count(method, route, status):
        got = [x.value for x in http if x.labels == {"method": method, "route": route, "status": status}]
        return got[0] if got else 0

    assert count("other", "unmatched", "401") == 300, http
    assert count("GET", "unmatched", "401") == 2, http
    assert count("GET", "/v1/variants", "200") == 3, http
    assert count("HEAD", "/v1/device", "200") == 1, http
    assert count("other", "unmatched", "405") == 1, http  # PATCH is in no route
    assert len(http) <= 6, "junk made series: %s" % [x.labels for x in http]
    assert not any(x.labels["method"].startswith("X") for x in http)
    assert fams["attnd_metrics_dropped"].samples[0].value == 0


# ---------------------------------------------------------------- restart mid-run

def test_run_cut_by_kill_gets_finished(tmp_path):
    """kill -9 of the front while a run runs: after the restart the run is failed
    (server_restarted) with `finished` a time, not null, so a poller waiting for it stops."""
    data = str(tmp_path / "data")
    os.makedirs(data)
    srv = AttndServer(data_dir=data, extra=["--cpu-threads", "1"] + DWELL_FLAGS).start()
    try:
        api = Api(srv.url)
        run_id = submit_async(api, dwell(3000))
        wait_for("the run to run", lambda: api.get("/v1/runs/%d" % run_id).json()["status"] == "running")
        assert api.get("/v1/runs/%d" % run_id).json()["finished"] is None
        workers = child_pids(srv.proc.pid)
        srv.proc.kill()
        srv.proc.wait(timeout=10)
        for pid in workers:  # orphans would burn a core until their job ends
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    finally:
        srv.kill()
    srv2 = AttndServer(data_dir=data, extra=["--cpu-threads", "1"]).start()
    try:
        rec = Api(srv2.url).get("/v1/runs/%d" % run_id).json()
        assert rec["status"] == "failed" and rec["error"]["code"] == "server_restarted", rec
        assert isinstance(rec["finished"], str) and rec["finished"].endswith("Z"), rec
        assert rec["finished"] >= rec["created"], rec
    finally:
        srv2.stop_checked()
        srv2.cleanup()
        srv.cleanup()


# ---------------------------------------------------------------- parameters

INTEGERS = ("batch", "heads", "seq", "seq_q", "seq_kv", "head_dim", "seed", "warmup", "iters", "min_iters",
            "max_iters", "verify_cpu_max_macs")


def test_integer_written_as_real_number_is_refused(api):
    """An integer parameter in a JSON body written with an exponent or a fraction is refused
    as in the query string; real-valued ones accept any JSON number."""
    for name in INTEGERS:
        for text in ("1e3", "2.0", "1E1", "10e-1"):
            body = '{"backend": "reference", "device": "cpu", "%s": %s}' % (name, text)
            r = api.post("/v1/runs", data=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 400, (name, text, r.text[:300])
            err = error_of(r)
            assert err["code"] == "bad_value" and err["field"] == name, (name, text, err)
            assert text in err["message"], err
    # Escaped member names are the same parameters.
    r = api.post("/v1/runs", data='{"backend": "reference", "b\\u0061tch": 1e0}')
    assert r.status_code == 400 and error_of(r)["field"] == "batch", r.text
    # The query string wins, as for any value: its integer is the one used.
    p = tiny(seed=5)
    r = api.post("/v1/runs", params=p, data='{"batch": 1e0}')
    assert r.status_code == 200, r.text[:300]
    # Real-valued parameters take exponents; a stored params object posts back as it is.
    body = '{"backend": "reference", "device": "cpu", "batch": 1, "heads": 2, "seq": 16, "head_dim": 8, ' \
           '"warmup": 0, "iters": 1, "min_time_ms": 1e1, "max_time_ms": 2.5e3, "target_noise": 5e-3, "scale": 2.5e-1}'
    r = api.post("/v1/runs", data=body)
    assert r.status_code == 200, r.text[:300]
    params = r.json()["params"]
    assert params["min_time_ms"] == 10 and params["scale"] == 0.25
    again = api.post("/v1/runs", json=params)
    assert again.status_code == 200, again.text[:300]
    assert again.json()["output"]["fingerprint"] == r.json()["output"]["fingerprint"]
    # Not JSON, not an object, trailing junk: bad_json with a null field.
    for bad in ('{"batch": 1', '[1, 2]', '{"backend": "reference"} x'):
        r = api.post("/v1/runs", data=bad)
        err = error_of(r)
        assert r.status_code == 400 and err["code"] == "bad_json" and err["field"] is None, (bad, err)


def test_one_spelling_of_numbers_and_booleans(api):
    """Integers are digits with no '+', no leading zero and no -0; reals are JSON numbers;
    booleans are true or false. The same in the query string, in a body's strings and in a
    body's JSON values (cJSON reads 01 as 1, so the body's text is checked)."""
    base = tiny()
    for name, text in (("batch", "+1"), ("batch", "01"), ("seed", "+12"), ("seed", "012"), ("iters", "001"),
                       ("window", "-0"), ("scale", "+0.5"), ("scale", ".5"), ("scale", "0x1p-2"),
                       ("verify", "1"), ("verify", "0"), ("profile", "yes"), ("causal", "True")):
        for how in ("query", "body string"):
            if how == "query":
                r = api.run(params=dict(base, **{name: text}))
            else:
                r = api.post("/v1/runs", json=dict(base, **{name: text}))
            assert r.status_code == 400, (name, text, how, r.text[:300])
            err = error_of(r)
            assert err["code"] == "bad_value" and err["field"] == name, (name, text, how, err)
    for name, text in (("batch", "01"), ("window", "-0"), ("verify", "1"), ("verify", "0"), ("profile", "1"),
                       ("scale", "1."), ("iters", "-01")):
        body = '{"backend": "reference", "device": "cpu", "heads": 2, "seq": 16, "head_dim": 8, "%s": %s}' % (name, text)
        r = api.post("/v1/runs", data=body)
        assert r.status_code == 400, (body, r.text[:300])
        err = error_of(r)
        assert err["code"] == "bad_value" and err["field"] == name, (body, err)
    # What the rule keeps: plain integers, JSON reals, true and false, as text or JSON.
    rec = api.run_ok(**dict(base, batch="1", seed="0", window="0", scale="-2.5e-1", verify="true", profile="false"))
    assert rec["params"]["window"] == 0 and rec["params"]["scale"] == -0.25 and rec["verify"] is not None
    r = api.post("/v1/runs", json=dict(base, seed=12, scale=0.5, verify=False, causal=True))
    assert r.status_code == 200, r.text[:300]


def test_escaped_nul_in_a_body_is_refused_naming_the_member(api):
    """cJSON decodes \u0000 into a C string that ends there: "iters\u0000junk" would read as
    iters, "reference\u0000x" as reference. 400 bad_value, field naming the member."""
    cases = [
        ('"iters\\u0000junk": 3', "iters\\u0000junk"),
        ('"iters": 1, "device": "cpu\\u0000junk"', "device"),
        ('"iters": 1, "seed": "1\\u00002"', "seed"),
        ('"iters": 1, "mask": "causal\\u0000"', "mask"),
    ]
    for members, field in cases:
        body = '{"backend": "reference", "heads": 2, "seq": 16, "head_dim": 8, "warmup": 0, %s}' % members
        if '"device"' not in members:
            body = body.replace('"heads"', '"device": "cpu", "heads"')
        r = api.post("/v1/runs", data=body)
        assert r.status_code == 400, (body, r.text[:300])
        err = error_of(r)
        assert err["code"] == "bad_value" and err["field"] == field, (body, err)
        assert "\\u0000" in err["message"], err
    r = api.post("/v1/runs", data='{"backend": "reference\\u0000x", "device": "cpu"}')
    assert r.status_code == 400 and error_of(r)["field"] == "backend", r.text[:300]
    # An escaped backslash before u0000 is text, not a NUL: an unknown parameter, named whole.
    r = api.post("/v1/runs", data='{"backend": "reference", "iters\\\\u0000": 1}')
    assert r.status_code == 400 and error_of(r)["code"] == "unknown_parameter", r.text[:300]
    assert error_of(r)["field"] == "iters\\u0000", r.text[:300]


def test_scale_is_bounded(api):
    for v in ("1e308", "-1e308", "10000.5", "-1e5", "0", "-0.0", "1e-400"):
        r = api.run(params=tiny(scale=v))
        assert r.status_code == 400, (v, r.text[:300])
        err = error_of(r)
        assert err["field"] == "scale" and err["code"] == "out_of_range", (v, err)
    r = api.post("/v1/runs", json=dict(tiny(), scale=-1e308))
    assert r.status_code == 400 and error_of(r)["field"] == "scale", r.text[:300]
    for v in (1e4, -1e4, 1e-30):
        rec = api.run_ok(**tiny(scale=v))
        assert rec["params"]["scale"] == v
        assert rec["output"]["nan"] == 0 and rec["output"]["inf"] == 0, rec["output"]


def test_unknown_parameter_lists_every_accepted_name(api):
    r = api.run(params=tiny(bogus="1"))
    err = error_of(r)
    assert r.status_code == 400 and err["code"] == "unknown_parameter" and err["field"] == "bogus", err
    listed = err["message"].split("known: ", 1)[1]
    names = [n.strip() for part in listed.split(";") for n in part.split(":")[-1].split(",")]
    for must in ("backend", "seq", "verify", "async", "q", "keep_output", "verify_cpu_max_macs", "output_tensor"):
        assert must in names, (must, err["message"])
    assert "fault" not in names, "fault is unknown without enable_fault_injection"
    for name in names:  # each one listed is accepted (no backend: missing_parameter, not unknown)
        r = api.post("/v1/runs", json={name: "x"} if name != "backend" else {"backend": "x"})
        assert error_of(r)["code"] != "unknown_parameter", (name, r.text[:300])


# ---------------------------------------------------------------- cpu cost

def test_cpu_run_over_cpu_max_macs_is_refused(start_server):
    srv = start_server(extra=["--cpu-threads", "1", "--cpu-max-macs", "1000000"])
    api = Api(srv.url)
    big = tiny(heads=2, seq=1024, head_dim=8)  # 1*2*1024*1024*8 = 16777216 MACs per forward
    for extra in ({}, {"async": "true"}):
        r = api.run(params=dict(big, **extra))
        assert r.status_code == 422, r.text[:300]
        err = error_of(r)
        assert err["code"] == "too_costly" and err["field"] is None, err
        assert "16777216" in err["message"] and "cpu_max_macs=1000000" in err["message"], err
    assert runs(api) == [], "a refused run is not stored"
    api.run_ok(**tiny())  # 2*16*16*8 = 4096 MACs: under the limit


def test_default_cpu_limit_refuses_a_huge_reference_run(api):
    r = api.run(params=tiny(heads=1, seq=131072, head_dim=8))  # 1.4e11 MACs a forward > 1e10
    assert r.status_code == 422 and error_of(r)["code"] == "too_costly", r.text[:300]
    # the study's default shape (8.6e9 MACs a forward, 1006 forwards under the stopping rule)
    # is refused at once, saying what it would cost, instead of holding the cpu worker
    r = api.run(params={"backend": "reference", "device": "cpu"})
    assert r.status_code == 422 and error_of(r)["code"] == "too_costly", r.text[:300]
    msg = error_of(r)["message"]
    assert "8589934592 each" in msg and "1006 forwards" in msg and "cpu_max_macs=10000000000" in msg, msg
    assert "it fits with seq=34" in msg, msg  # 8*16*34*34*64 = 9469952 a forward, 1006 of them


def test_default_cpu_limit_refuses_a_cheap_shape_asked_for_100000_iters(api):
    """A cheap shape asked for 100000 iterations costs 100001 forwards, not one."""
    r = api.run(params=tiny(heads=2, seq=64, head_dim=16, iters=100000))  # 131072 MACs a forward
    assert r.status_code == 422 and error_of(r)["code"] == "too_costly", r.text[:300]
    assert "100001 forwards" in error_of(r)["message"] and "iters=76292" in error_of(r)["message"], r.text[:500]


def test_cpu_cost_counts_every_forward_and_names_what_fits(start_server):
    """cpu_max_macs bounds the whole run: warmup + iters + 1 forwards, or warmup + max_iters
    + 1 under the stopping rule. The refusal names the iters that fit, and the seq at which
    the run as asked fits; both then run."""
    api = Api(start_server(extra=["--cpu-threads", "1", "--cpu-max-macs", "10000000"]).url)
    r = api.run(params=tiny(iters=100000))  # 4096 MACs a forward: cheap, but 100001 of them
    assert r.status_code == 422, r.text[:300]
    err = error_of(r)
    assert err["code"] == "too_costly" and err["field"] is None, err
    assert "409604096" in err["message"] and "100001 forwards" in err["message"], err  # 4096 * 100001
    assert "it fits with iters=2440" in err["message"] and "it fits with seq=2" in err["message"], err
    assert api.run_ok(**tiny(iters=2440))["timing"]["iters"] == 2440  # 2441 * 4096 <= 10^7
    assert api.run_ok(**tiny(seq=2, iters=100000))["timing"]["iters"] == 100000
    # The stopping rule: counted at max_iters, however soon time may stop it.
    rule = tiny(heads=2, seq=256, head_dim=8, iters=0, min_iters=2)  # 1048576 MACs a forward
    r = api.run(params=rule)
    assert r.status_code == 422, r.text[:300]
    msg = error_of(r)["message"]
    assert "up to max_iters 1000" in msg and "1001 forwards" in msg, msg
    assert "it fits with iters=8 (or max_iters of at most that)" in msg, msg  # 9 forwards fit
    assert api.run_ok(**dict(rule, max_iters=8))["timing"]["iters"] <= 8
    assert api.run_ok(**dict(rule, iters=8))["timing"]["iters"] == 8
    r = api.run(params=dict(rule, iters=9))
    assert r.status_code == 422 and error_of(r)["code"] == "too_costly", r.text[:300]
