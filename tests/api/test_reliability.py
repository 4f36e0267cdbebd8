"""Reliability on the cpu device: workers killed mid-job, malformed and hostile requests,
a full queue, restarts and SIGTERM with a job running, and a bounded soak with the front's
memory flat. Every accepted job must end done or failed with a reason, nothing stored may be
lost or duplicated, and the server must keep answering.

ATTND_SOAK_S sets the soak's length (default 120 s, the issue's minimum).
"""
import json
import os
import random
import signal
import socket
import threading
import time

import pytest
import requests

from attnd_api_helpers import AttndServer, Api, error_of, tiny

# A job of a few seconds on the cpu reference (≈2.5 s on 2 idle cores of an EPYC).
SLOW = tiny(heads=8, seq=1024, head_dim=64, iters=12, profile="false")
SOAK_S = float(os.environ.get("ATTND_SOAK_S", "120"))
SOAK_WARMUP_S = 20.0
RSS_GROWTH_LIMIT_KB = 10 * 1024


def children(pid):
    """Child pids of pid (the server we started: only its workers)."""
    out = []
    task_dir = "/proc/%d/task" % pid
    for tid in os.listdir(task_dir):
        try:
            with open(os.path.join(task_dir, tid, "children")) as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


def raw(url, data, read_timeout=10.0):
    """Send raw bytes to the server; the answer's bytes (b"" when it closed without one)."""
    host, port = url.replace("http://", "").rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=read_timeout)
    try:
        s.sendall(data)
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        s.close()


def status_of(answer):
    if not answer.startswith(b"HTTP/1."):
        return None
    return int(answer.split(b" ", 2)[1])


def alive(api):
    r = api.get("/healthz", timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def ended_with_reason(rec):
    assert rec["status"] in ("done", "failed"), rec
    if rec["status"] == "failed":
        assert rec["error"]["code"] and rec["error"]["message"], rec


@pytest.fixture
def fresh(start_server):
    srv = start_server(extra=["--cpu-threads", "2", "--queue-depth", "2", "--job-timeout-s", "60"])
    return srv, Api(srv.url)


def test_worker_killed_mid_job(fresh):
    srv, api = fresh
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", api.run(params=SLOW, timeout=120)))
    t.start()
    time.sleep(1.0)  # the job is on the worker now
    kids = children(srv.proc.pid)
    assert kids, "the server has no worker child"
    for k in kids:
        os.kill(k, signal.SIGKILL)
    t.join(120)
    r = out["r"]
    assert r.status_code == 500, r.text[:500]
    rec = r.json()
    assert rec["status"] == "failed" and rec["error"]["code"] == "worker_crashed", rec
    assert api.get("/v1/runs/%d" % rec["id"]).json() == rec
    ok = api.run_ok(**tiny(seed=3))  # a new worker took over
    assert ok["id"] == rec["id"] + 1
    assert not set(children(srv.proc.pid)) & set(kids)


def test_hostile_requests(fresh):
    srv, api = fresh
    u = srv.url
    # huge header: refused (431/413/400) or the connection closed; never a crash
    ans = raw(u, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
    assert status_of(ans) in (None, 400, 413, 431), ans[:200]
    # many headers
    ans = raw(u, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(5000)) + b"\r\n")
    assert status_of(ans) in (None, 200, 400, 413, 431), ans[:200]
    # a very long URL
    ans = raw(u, b"GET /v1/runs/" + b"9" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(ans) in (None, 400, 404, 414, 431), ans[:200]
    alive(api)
    # Content-Length shorter than the body: the body is cut there (bad JSON), the rest is junk
    ans = raw(u, b'POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\n'
                 b'{"backend":"reference"}')
    assert status_of(ans) == 400, ans[:300]
    # Content-Length longer than the body, then the client hangs up
    ans = raw(u, b'POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"backend"', read_timeout=1.0)
    assert status_of(ans) is None
    # Content-Length that is not a number / negative / past 2^64
    for cl in (b"abc", b"-5", b"99999999999999999999999"):
        ans = raw(u, b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: " + cl + b"\r\nConnection: close\r\n\r\n{}")
        assert status_of(ans) in (None, 400, 413), (cl, ans[:200])
    alive(api)
    # invalid UTF-8 inside a JSON string, and raw bytes outside one
    r = api.post("/v1/runs", data=b'{"backend":"ref\xff\xfeerence","device":"cpu"}',
                 headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text[:300]
    error_of(r)
    r = api.post("/v1/runs", data=b"\xff\xfe\x00\x01{", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and error_of(r)["code"] == "bad_json"
    r = api.post("/v1/runs", data=b'{"backend":"reference","device":"cpu","seed":"\x00"}')
    assert r.status_code == 400
    # deep nesting: cJSON stops at CJSON_NESTING_LIMIT (1000): 400, no stack overflow
    for depth in (1001, 100000):
        r = api.post("/v1/runs", data=b"[" * depth + b"]" * depth)
        assert r.status_code == 400 and error_of(r)["code"] == "bad_json", (depth, r.text[:200])
        r = api.post("/v1/runs", data=b'{"a":' * depth + b"1" + b"}" * depth)
        assert r.status_code == 400, (depth, r.text[:200])
    # a body over max_body_bytes is refused before it is read
    r = api.post("/v1/runs", data=b" " * (2 << 20))
    assert r.status_code == 413 and error_of(r)["code"] == "body_too_large"
    # wrong method, unknown path, garbage request line
    assert api.request("DELETE", "/healthz").status_code == 405
    assert api.get("/../../etc/passwd").status_code in (400, 404)
    ans = raw(u, b"\x16\x03\x01\x02\x00garbage\r\n\r\n", read_timeout=3.0)
    assert status_of(ans) in (None, 400, 505)
    alive(api)
    api.run_ok(**tiny())


def test_slow_body_does_not_block_others(fresh):
    srv, api = fresh
    host, port = srv.url.replace("http://", "").rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    body = json.dumps(tiny()).encode()
    s.sendall(b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(body))
    t0 = time.monotonic()
    for i, b in enumerate(body[:20]):
        s.sendall(bytes([b]))
        if i % 5 == 0:  # others are served while this one trickles in
            t1 = time.monotonic()
            alive(api)
            assert time.monotonic() - t1 < 2.0
        time.sleep(0.05)
    s.sendall(body[20:])
    s.settimeout(60)
    ans = b""
    while b"\r\n\r\n" not in ans or not ans.rstrip().endswith(b"}"):
        chunk = s.recv(65536)
        if not chunk:
            break
        ans += chunk
    s.close()
    assert status_of(ans) == 200, ans[:300]
    assert time.monotonic() - t0 < 60
    # a slow client that gives up half-way: nothing is stored, nothing hangs
    before = api.run_ok(**tiny())["id"]
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:10])
    time.sleep(0.3)
    s.close()
    after = api.run_ok(**tiny())["id"]
    assert after == before + 1


def test_full_queue_every_accepted_job_ends(fresh):
    srv, api = fresh  # queue_depth 2
    results = []
    lock = threading.Lock()

    def one(i):
        r = requests.post(srv.url + "/v1/runs", params=dict(SLOW, iters=3, seed=i), timeout=120)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    codes = sorted(r.status_code for r in results)
    assert len(results) == 8 and set(codes) <= {200, 429}, codes
    refused = [r for r in results if r.status_code == 429]
    assert refused, "8 jobs on a queue of 2 and one worker: some must get 429 (%s)" % codes
    for r in refused:
        assert error_of(r)["code"] == "queue_full"
        assert int(r.headers["Retry-After"]) >= 1
    ids = sorted(r.json()["id"] for r in results if r.status_code == 200)
    assert len(ids) == len(set(ids))
    for i in ids:
        ended_with_reason(api.get("/v1/runs/%d" % i).json())
    # refused jobs left no row behind: the next id follows the accepted ones
    nxt = api.run_ok(**tiny())["id"]
    assert nxt > ids[-1]
    for i in range(1, nxt):
        r = api.get("/v1/runs/%d" % i)
        if r.status_code != 404:
            ended_with_reason(r.json())


def test_restart_keeps_everything(tmp_path):
    data = str(tmp_path / "data")
    os.makedirs(data)
    srv = AttndServer(data_dir=data, extra=["--cpu-threads", "2"]).start()
    try:
        api = Api(srv.url)
        recs = [api.run_ok(**tiny(seed=s)) for s in range(5)]
        recs.append(api.run(params=tiny(batch=0)).json())  # a refusal stores nothing
        assert srv.stop_checked() < 10
        srv2 = AttndServer(data_dir=data, extra=["--cpu-threads", "2"]).start()
        try:
            api2 = Api(srv2.url)
            for rec in recs[:5]:
                assert api2.get("/v1/runs/%d" % rec["id"]).json() == rec
            new = api2.run_ok(**tiny(seed=99))
            assert new["id"] == recs[4]["id"] + 1  # no id reused
        finally:
            srv2.stop_checked()
            srv2.cleanup()
    finally:
        srv.cleanup()


def test_sigterm_finishes_the_running_job(tmp_path):
    """SIGTERM with an async job running: it finishes, is stored done, and attnd exits 0."""
    data = str(tmp_path / "data")
    os.makedirs(data)
    srv = AttndServer(data_dir=data, extra=["--cpu-threads", "2"]).start()
    try:
        api = Api(srv.url)
        r = api.post("/v1/runs", json=dict(SLOW, **{"async": True}))
        if (r.status_code == 400 and error_of(r).get("field") == "async") or r.status_code == 200:
            pytest.skip("async runs are not served yet (issue 5): answered %d" % r.status_code)
        assert r.status_code == 202, r.text[:300]
        job = r.json()["id"]
        deadline = time.monotonic() + 30
        while api.get("/v1/runs/%d" % job).json().get("status") != "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        srv.proc.send_signal(signal.SIGTERM)
        rc = srv.proc.wait(timeout=90)
        assert rc == 0, srv.stderr_text()
    finally:
        srv.kill()
    srv2 = AttndServer(data_dir=data, extra=["--cpu-threads", "2"]).start()
    try:
        rec = Api(srv2.url).get("/v1/runs/%d" % job).json()
        assert rec["status"] == "done", rec
        assert rec["timing"]["iters"] == SLOW["iters"]
    finally:
        srv2.stop_checked()
        srv2.cleanup()
        srv.cleanup()


def test_sigterm_answers_the_running_sync_job(tmp_path):
    """SIGTERM with a synchronous run in flight: it is answered 200 done and stored; exit 0."""
    data = str(tmp_path / "data")
    os.makedirs(data)
    srv = AttndServer(data_dir=data, extra=["--cpu-threads", "2"]).start()
    out = {}
    try:
        api = Api(srv.url)
        t = threading.Thread(target=lambda: out.setdefault("r", api.run(params=SLOW, timeout=120)))
        t.start()
        time.sleep(1.0)
        srv.proc.send_signal(signal.SIGTERM)
        rc = srv.proc.wait(timeout=90)
        t.join(30)
        assert rc == 0, srv.stderr_text()
    finally:
        srv.kill()
    r = out["r"]
    assert r.status_code == 200 and r.json()["status"] == "done", r.text[:300]
    srv2 = AttndServer(data_dir=data, extra=["--cpu-threads", "2"]).start()
    try:
        assert Api(srv2.url).get("/v1/runs/%d" % r.json()["id"]).json() == r.json()
    finally:
        srv2.stop_checked()
        srv2.cleanup()
        srv.cleanup()


def test_soak_rss_flat(start_server):
    """SOAK_S seconds of mixed valid and invalid requests from several clients; the front's
    RSS after SOAK_WARMUP_S and at the end differ by less than RSS_GROWTH_LIMIT_KB."""
    srv = start_server(extra=["--cpu-threads", "1", "--queue-depth", "4"])
    pid = srv.proc.pid
    stop = threading.Event()
    counts = {"ok": 0, "refused": 0, "5xx": []}
    lock = threading.Lock()
    ids = []

    def client(seed):
        rnd = random.Random(seed)
        s = requests.Session()
        u = srv.url
        while not stop.is_set():
            k = rnd.randrange(10)
            try:
                if k == 0:
                    r = s.post(u + "/v1/runs", json=tiny(seed=rnd.randrange(1000), profile=False), timeout=60)
                    if r.status_code == 200:
                        with lock:
                            ids.append(r.json()["id"])
                elif k == 1:
                    r = s.get(u + "/healthz", timeout=10)
                elif k == 2:
                    r = s.get(u + "/v1/variants", timeout=10)
                elif k == 3:
                    r = s.post(u + "/v1/runs", params=tiny(batch=rnd.choice([0, -1, "x"])), timeout=10)
                elif k == 4:
                    r = s.post(u + "/v1/runs", data=b'{"backend":' + os.urandom(rnd.randrange(1, 64)), timeout=10)
                elif k == 5:
                    r = s.get(u + "/v1/runs/%d" % rnd.randrange(1, 1 << 20), timeout=10)
                elif k == 6:
                    r = s.get(u + "/no/such/%d" % rnd.randrange(100), timeout=10)
                elif k == 7:
                    r = s.request("PUT", u + "/v1/device", timeout=10)
                elif k == 8:
                    r = s.post(u + "/v1/runs", data=b"[" * rnd.randrange(1, 3000), timeout=10)
                else:
                    r = s.get(u + "/v1/device", timeout=10)
            except requests.RequestException as exc:
                with lock:
                    counts["5xx"].append(repr(exc))
                continue
            with lock:
                if r.status_code >= 500:
                    counts["5xx"].append("%d %s" % (r.status_code, r.text[:200]))
                elif r.status_code >= 400:
                    counts["refused"] += 1
                else:
                    counts["ok"] += 1

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(6)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(min(SOAK_WARMUP_S, SOAK_S / 4))
    rss_warm = rss_kb(pid)
    time.sleep(max(0.0, SOAK_S - (time.monotonic() - t0)))
    stop.set()
    for t in threads:
        t.join(90)
    rss_end = rss_kb(pid)
    assert not counts["5xx"], counts["5xx"][:10]
    assert counts["ok"] > 100 and counts["refused"] > 100, counts
    assert rss_end - rss_warm < RSS_GROWTH_LIMIT_KB, "front RSS grew from %d kB to %d kB" % (rss_warm, rss_end)
    api = Api(srv.url)
    alive(api)
    assert len(ids) == len(set(ids))
    for i in ids[-20:]:
        assert api.get("/v1/runs/%d" % i).json()["status"] == "done"
