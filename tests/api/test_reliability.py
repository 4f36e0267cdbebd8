"""Reliability on the cpu device: workers killed mid-job, malformed and hostile requests,
a full queue, restarts and SIGTERM with a job running, connection floods (slowloris from one
address and from many, heads that trickle), and a bounded soak with the front's memory flat.
Every accepted job must end done or failed with a reason, nothing stored may be lost or
duplicated, and the server must keep answering.

ATTND_SOAK_S sets the soak's length (default 120 s, the issue's minimum).
"""
import json
import os
import random
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import requests

from attnd_api_helpers import AttndServer, Api, MemfdSampler, child_pids, error_of, tiny

TOKEN = "tok-reliability-5d1e"
PROMPT_S = 1.0  # what "keeps answering" means under a flood: each answer within this

# A job of a few seconds on the cpu reference (≈2.5 s on 2 idle cores of an EPYC).
SLOW = tiny(heads=8, seq=1024, head_dim=64, iters=12, profile="false")
SOAK_S = float(os.environ.get("ATTND_SOAK_S", "120"))
SOAK_WARMUP_S = 20.0
RSS_GROWTH_LIMIT_KB = 10 * 1024


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
    deadline = time.monotonic() + 30  # the job is on the worker once it is stored running
    while not api.get("/v1/runs", params={"status": "running"}).json()["runs"] and time.monotonic() < deadline:
        time.sleep(0.02)
    kids = child_pids(srv.proc.pid)
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
    assert not set(child_pids(srv.proc.pid)) & set(kids)


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


# ---------------------------------------------------------------- connection floods

def raise_nofile(n):
    """Raise this process's soft limit on open files to n (or the hard limit); the server
    started after it inherits it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n if hard == resource.RLIM_INFINITY else min(n, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def port_of(srv):
    return int(srv.url.rsplit(":", 1)[1])


# The attacker: its own interpreter (it must not hold the test's GIL between a client's
# connect and its send, and a fork of the multi-threaded test process could inherit a held
# lock). argv: port, period_s, per_source, mode, sources...; stops when stdin closes, then
# prints {"open_peak", "reopened"} as JSON. mode "head": odd sockets trickle a head that never
# ends; "body": every socket sends a whole head announcing a body, then trickles the body.
FLOOD_SRC = r"""
import json, select, socket, sys, threading
port, period_s, per_source, mode, sources = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100000
BODY_HEAD = b"%s HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" % mode.split(":", 1)[-1].encode()
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()

def open_one(slot):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((sources[slot % len(sources)], 0))
        if mode.startswith("body"):  # the whole head with the connect, as a real client sends it
            s.settimeout(1.0)
            s.connect(("127.0.0.1", port))
            s.sendall(BODY_HEAD)
        s.setblocking(False)
        if not mode.startswith("body"):
            s.connect_ex(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    return s

def trickle(k, s):
    sent = socks[k][1]
    if mode.startswith("body"):  # the head went with the connect: a byte of body a period
        data = b"x"
    elif k % 2 == 1:    # one more byte of a head that never ends
        data = HEAD[sent % len(HEAD):sent % len(HEAD) + 1]
    else:
        return
    socks[k][1] = sent + s.send(data)

socks = {k: [open_one(k), 0] for k in range(len(sources) * per_source)}
open_peak = reopened = 0
while not stop.is_set():
    live = [(k, v[0]) for k, v in socks.items() if v[0] is not None]
    # readable: the server closed it (EOF or reset); it never sends anything else
    gone = set(select.select([s for _, s in live], [], [], 0)[0]) if live else set()
    for k, s in live:
        if s not in gone:
            try:
                trickle(k, s)
            except BlockingIOError:
                pass  # the connect is not through yet
            except OSError:
                gone.add(s)
    for k, s in live:
        if s in gone:
            s.close()
            socks[k] = [None, 0]
    open_peak = max(open_peak, len(live) - len(gone))
    for k, v in socks.items():
        if v[0] is None:
            v[0] = open_one(k)
            reopened += 1
    stop.wait(period_s)
print(json.dumps({"open_peak": open_peak, "reopened": reopened}))
"""


class Flood:
    """Attacker sockets from the given source addresses (loopback takes any 127/8 one), n per
    address, kept open: every period_s, a socket the server closed is opened again, and (mode
    "head") every other one sends one more byte of a request head that never ends, the rest
    nothing, or (mode "body:METHOD PATH") each sends a whole head announcing a 1 MB body and
    then one byte of it a period. Runs in its own process (FLOOD_SRC) while the with block runs; then open_peak (most
    sockets held at once, connects in flight included) and reopened (how many the server
    closed) are set."""

    def __init__(self, port, sources, per_source, period_s=1.0, mode="head"):
        self.argv = [sys.executable, "-c", FLOOD_SRC, str(port), str(period_s), str(per_source), mode] + list(sources)
        self.open_peak = self.reopened = 0

    def __enter__(self):
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc):
        try:
            out, _ = self.proc.communicate(input="", timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        stats = json.loads(out)
        self.open_peak, self.reopened = stats["open_peak"], stats["reopened"]


def timed(fn):
    t0 = time.monotonic()
    r = fn()
    return r, time.monotonic() - t0


def token_server(start_server, tmp_path, extra=()):
    path = tmp_path / "tokens"
    path.write_text(TOKEN + "\n")
    return start_server(extra=["--token-file", str(path), "--cpu-threads", "1"] + list(extra))


def test_slowloris_from_one_address(start_server, tmp_path):
    """1 000 sockets from 127.0.0.2, half silent and half trickling a header byte a second,
    reopened as the server closes them; meanwhile /healthz and an authenticated run from
    127.0.0.1 each answer within PROMPT_S, again and again. max_connections_per_ip (64)
    keeps the flood to 64 of the 512 connections."""
    assert raise_nofile(4096) >= 2048, "the test needs ~1 100 open files"
    srv = token_server(start_server, tmp_path)
    auth = {"Authorization": "Bearer " + TOKEN}
    worst = {"healthz": 0.0, "run": 0.0}
    with Flood(port_of(srv), ["127.0.0.2"], 1000) as flood:
        time.sleep(2.0)  # the flood is on: 1 000 connects, 64 held
        t_end = time.monotonic() + 8.0
        n = 0
        while time.monotonic() < t_end:
            r, dt = timed(lambda: requests.get(srv.url + "/healthz", timeout=5))
            assert r.status_code == 200 and dt < PROMPT_S, (r.status_code, dt)
            worst["healthz"] = max(worst["healthz"], dt)
            if n % 3 == 0:
                r, dt = timed(lambda: requests.post(srv.url + "/v1/runs", params=tiny(profile="false"), headers=auth,
                                                    timeout=5))
                assert r.status_code == 200 and r.json()["status"] == "done", (r.status_code, r.text[:300])
                assert dt < PROMPT_S, dt
                worst["run"] = max(worst["run"], dt)
            n += 1
            time.sleep(0.2)
    assert flood.open_peak >= 50, "the flood never held its connections: %d" % flood.open_peak
    assert flood.reopened >= 900, "the server did not refuse the flood past the per-IP limit: %d" % flood.reopened
    print("slowloris from one address: worst healthz %.3f s, run %.3f s over %d rounds; flood held %d, reopened %d"
          % (worst["healthz"], worst["run"], n, flood.open_peak, flood.reopened))


def test_many_addresses_shed_waiting_connections(start_server):
    """39 addresses (127.0.0.2..40) each open their per-IP limit (8), 312 silent sockets
    against max_connections 64: past 90% open, the oldest connections still waiting for a
    head are shed, so /healthz keeps answering within PROMPT_S."""
    assert raise_nofile(4096) >= 1024
    srv = start_server(extra=["--max-connections", "64", "--max-connections-per-ip", "8", "--cpu-threads", "1"])
    sources = ["127.0.0.%d" % i for i in range(2, 41)]
    worst = 0.0
    with Flood(port_of(srv), sources, 8, period_s=0.2) as flood:
        time.sleep(1.5)
        t_end = time.monotonic() + 6.0
        n = 0
        while time.monotonic() < t_end:
            r, dt = timed(lambda: requests.get(srv.url + "/healthz", timeout=5))
            assert r.status_code == 200 and dt < PROMPT_S, (r.status_code, dt)
            worst = max(worst, dt)
            n += 1
            time.sleep(0.1)
    assert flood.open_peak >= 40, flood.open_peak
    assert flood.reopened >= 250, "nothing was shed: %d reopened" % flood.reopened
    print("many addresses: worst healthz %.3f s over %d; flood held up to %d, reopened %d"
          % (worst, n, flood.open_peak, flood.reopened))


def closed_after(port, data, trickle=None, limit_s=10.0):
    """Connect, send data, then one byte of trickle every 0.3 s; seconds until the server
    closed the connection, and what it answered."""
    s = socket.create_connection(("127.0.0.1", port), timeout=limit_s)
    t0 = time.monotonic()
    got = b""
    try:
        s.sendall(data)
        i = 0
        while time.monotonic() - t0 < limit_s:
            r, _, _ = select.select([s], [], [], 0.3)
            if r:
                try:
                    b = s.recv(65536)
                except ConnectionResetError:
                    break
                if not b:
                    break
                got += b
                continue
            if trickle is not None:
                try:
                    s.send(trickle[i % len(trickle):i % len(trickle) + 1])
                except OSError:
                    break
                i += 1
        return time.monotonic() - t0, got
    finally:
        s.close()


def test_head_deadline(start_server):
    """header_timeout_s 2: a head that trickles, garbage that libmicrohttpd takes for empty
    lines, and an idle keep-alive connection after its answer are all closed ~2 s after they
    began waiting; a slow head that completes in time is served. Run side by side."""
    srv = start_server(extra=["--header-timeout-s", "2", "--idle-timeout-s", "30", "--cpu-threads", "1"])
    port = port_of(srv)
    out = {}

    def run(name, *args):
        out[name] = closed_after(port, *args)

    def slow_but_in_time():
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        for i in range(0, len(head), 8):  # ~1 s for the whole head
            s.sendall(head[i:i + 8])
            time.sleep(0.15)
        ans = s.recv(65536)
        s.close()
        out["slow_in_time"] = ans

    jobs = [threading.Thread(target=run, args=("trickle", b"GET /healthz HTTP/1.1\r\n", b"X-Slow: aaaaaaaa")),
            threading.Thread(target=run, args=("silent", b"")),
            threading.Thread(target=run, args=("garbage", b"\x00\xff\xfe\r\n\r\n")),
            threading.Thread(target=run, args=("keepalive", b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")),
            threading.Thread(target=slow_but_in_time)]
    for j in jobs:
        j.start()
    for j in jobs:
        j.join(20)
    for name in ("trickle", "silent", "garbage"):
        secs, got = out[name]
        assert 1.8 <= secs <= 3.5 and got == b"", (name, secs, got[:200])
    secs, got = out["keepalive"]
    assert got.startswith(b"HTTP/1.1 200") and 1.8 <= secs <= 3.5, (secs, got[:200])
    assert out["slow_in_time"].startswith(b"HTTP/1.1 200"), out["slow_in_time"][:200]
    print("head deadline 2 s: " + ", ".join("%s closed at %.2f s" % (k, out[k][0])
                                            for k in ("trickle", "silent", "garbage", "keepalive")))
    alive(Api(srv.url))


def test_body_deadline(start_server):
    """body_timeout_s 2 at 1024 bytes/s: a body trickled a byte at a time is closed ~2 s after
    its head, however steadily it trickles; a body that keeps the rate is served."""
    srv = start_server(extra=["--body-timeout-s", "2", "--body-min-rate-bytes", "1024", "--cpu-threads", "1"])
    port = port_of(srv)
    secs, got = closed_after(port, b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{",
                             trickle=b"x")
    assert 1.8 <= secs <= 3.5 and got == b"", (secs, got[:200])
    body = b'{"backend":"reference","batch":1,"heads":1,"seq":8,"head_dim":8,"iters":1,"warmup":0' + b" " * 3000 + b"}"
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    try:  # 3 KB over ~3 s: past body_timeout_s, but above 1024 bytes/s for the time past it
        s.sendall(b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), 300):
            s.sendall(body[i:i + 300])
            time.sleep(0.3)
        ans = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            ans += b
    finally:
        s.close()
    assert ans.startswith(b"HTTP/1.1 200"), ans[:300]
    alive(Api(srv.url))


def test_routes_without_a_body_refuse_one_at_once(start_server):
    """GET, HEAD and DELETE announcing a body are answered 400 body_not_allowed before a byte
    of it is read, and the connection closes: nobody holds a connection with a GET."""
    srv = start_server(extra=["--cpu-threads", "1"])
    for method in (b"GET", b"HEAD", b"DELETE"):
        path = b"/v1/runs/1" if method == b"DELETE" else b"/healthz"
        for framing in (b"Content-Length: 1000000", b"Transfer-Encoding: chunked"):
            secs, got = closed_after(port_of(srv), method + b" " + path + b" HTTP/1.1\r\nHost: x\r\n" + framing +
                                     b"\r\n\r\n", trickle=b"x", limit_s=5.0)
            assert secs < PROMPT_S and got.startswith(b"HTTP/1.1 400"), (method, framing, secs, got[:300])
            if method != b"HEAD":
                assert b'"code":"body_not_allowed"' in got, got[:300]
    alive(Api(srv.url))


@pytest.mark.parametrize("request_line,tokens", [("GET /healthz", True), ("POST /v1/runs", False)],
                         ids=["healthz_with_tokens", "runs_without_tokens"])
def test_slow_bodies_from_many_addresses(start_server, tmp_path, request_line, tokens):
    """1 000 connections from 127.0.0.2..60 (17 each, under the per-address limit) send a whole
    head announcing a 1 MB body, then a byte a second: to /healthz, which needs no token (its
    body is refused before a byte is read), or to POST /v1/runs on a server without tokens
    (past 90% of max_connections the connections still sending a body are shed like those
    still sending a head, and those that stay are cut at body_timeout_s). /healthz and a run
    from 127.0.0.1 answer within PROMPT_S every time."""
    assert raise_nofile(4096) >= 2048, "the test needs ~1 100 open files"
    srv = token_server(start_server, tmp_path) if tokens else start_server(extra=["--cpu-threads", "1"])
    sources = ["127.0.0.%d" % i for i in range(2, 61)]
    worst, n = 0.0, 0
    with Flood(port_of(srv), sources, 17, period_s=1.0, mode="body:" + request_line) as flood:
        time.sleep(2.0)
        t_end = time.monotonic() + 8.0
        while time.monotonic() < t_end:
            r, dt = timed(lambda: requests.get(srv.url + "/healthz", timeout=5))
            assert r.status_code == 200 and dt < PROMPT_S, (r.status_code, dt)
            r, dt2 = timed(lambda: requests.post(srv.url + "/v1/runs", params=tiny(seed=n), timeout=30,
                                                 headers={"Authorization": "Bearer " + TOKEN}))
            assert r.status_code == 200 and dt2 < PROMPT_S + 2, (r.status_code, dt2, r.text[:300])
            worst = max(worst, dt, dt2)
            n += 1
    if not tokens:  # bodies the server reads: the flood fills it, and is shed
        assert flood.open_peak >= 400, flood.open_peak
    assert flood.reopened >= 100, "nothing was refused, shed or cut: %d reopened" % flood.reopened
    print("slow bodies: worst probe %.3f s over %d rounds; flood held up to %d, reopened %d"
          % (worst, n, flood.open_peak, flood.reopened))


def test_idle_timeout_cuts_a_stalled_body(start_server):
    """idle_timeout_s 2: a body that stops arriving is closed ~2 s after its last byte."""
    srv = start_server(extra=["--idle-timeout-s", "2", "--cpu-threads", "1"])
    secs, got = closed_after(port_of(srv), b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\"")
    assert 1.8 <= secs <= 4.0 and got == b"", (secs, got[:200])
    alive(Api(srv.url))


# ---------------------------------------------------------------- uploads over the memory budget

BUDGET = 32 << 20


def upload_exchange(port, head, body_piece=None, body_bytes=0, end=b""):
    """Send an upload's head, then up to body_bytes of body_piece and end, until the server
    answers or closes. Returns (answer, body bytes sent, seconds from the head to the close)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    sent, got = 0, b""
    try:
        t0 = time.monotonic()
        s.sendall(head)
        try:
            while sent < body_bytes:
                s.sendall(body_piece)
                sent += len(body_piece)
            s.sendall(end)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                got += b
        except (ConnectionResetError, socket.timeout):
            pass
        return got, sent, time.monotonic() - t0
    finally:
        s.close()


def test_upload_over_budget_refused_before_its_body(start_server):
    """memory_budget_bytes 32 MiB on the cpu device. A declared 1 GiB upload, with
    Expect: 100-continue, is answered 507 JSON as soon as its head is in (no 100 Continue,
    no body read). A chunked one is refused once it passes the budget: the server never holds
    more of it than the budget (plus one piece), throws the rest away and answers 507."""
    srv = start_server(extra=["--memory-budget-bytes", str(BUDGET), "--cpu-threads", "1"])
    port = port_of(srv)
    head = b"POST /v1/tensors?device=cpu&dtype=fp32&shape=%d HTTP/1.1\r\nHost: x\r\n" % (1 << 28)
    expect = b"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n" % (1 << 30)
    ans, _, declared_s = upload_exchange(port, head + expect)
    assert status_of(ans) == 507 and b"100 Continue" not in ans, ans[:300]
    err = json.loads(ans.partition(b"\r\n\r\n")[2])["error"]
    assert err["code"] and err["field"] is None, err
    assert declared_s < PROMPT_S, declared_s
    piece = b"10000\r\n" + b"\0" * 65536 + b"\r\n"
    chunked = b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    with MemfdSampler(srv.proc.pid, interval_s=0.002) as mem:
        ans, sent, secs = upload_exchange(port, head + chunked, piece, 4 * BUDGET, end=b"0\r\n\r\n")
    assert status_of(ans) == 507, ans[:300]
    assert mem.peak_memfd <= BUDGET + (256 << 10), mem.peak_memfd
    assert secs < 20, secs
    print("over budget: declared answered in %.3f s; chunked answered after %.1f MiB sent, peak memfd %.1f MiB"
          % (declared_s, sent / 2 ** 20, mem.peak_memfd / 2 ** 20))
    alive(Api(srv.url))
