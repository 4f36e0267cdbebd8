"""Fixtures of the API tests: the real attnd binary, started on a free port, spoken to
over HTTP. Everything here has a timeout, so a broken server fails a test instead of
hanging CI (pytest-timeout is not installed).

    ATTND_BIN   absolute path of the binary (make test-api sets it); default build/test/attnd
                or build/attnd under the repository root.
    ATTND_TEST_PG     conninfo of a throwaway PostgreSQL server (tests/pg/pg_server.py run sets
                it; make test does): the fleet tests use it.
    ATTND_TEST_STORE  "postgresql": every server keeps its history there, one database per
                data_dir (a restart on the same data_dir finds the same database); make test
                runs the history, async, persistence and fault tests so, after the whole suite
                on SQLite. Tests marked sqlite_only (they open attnd.db themselves) are left out.

The session server (`server`) runs on the cpu device only (--devices none); tests that need
other settings start their own with `start_server(...)`, which stops it at teardown.

Test modules import the helpers below as `attnd_api_helpers` (this module under a unique
name: pytest imports every conftest.py as "conftest", so that name is ambiguous).
"""
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import requests

sys.modules.setdefault("attnd_api_helpers", sys.modules[__name__])

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

READY_LINE_TIMEOUT_S = 20.0   # the one stdout line must come within this
READY_POLL_TIMEOUT_S = 20.0   # /readyz must say ready within this
STOP_TIMEOUT_S = 10.0         # SIGTERM → exit 0 within this
HTTP_TIMEOUT_S = 10.0         # any quick request
RUN_TIMEOUT_S = 90.0          # a run on the cpu device (tiny shapes; generous for slow CI)

PG_DIR = os.path.join(REPO, "tests", "pg")
if PG_DIR not in sys.path:
    sys.path.insert(0, PG_DIR)


def test_pg():
    """The conninfo of the tests' PostgreSQL server, or a test failure that says how to get one."""
    conninfo = os.environ.get("ATTND_TEST_PG")
    if not conninfo:
        pytest.fail("ATTND_TEST_PG is not set: run the tests through `make test`, or under "
                    "`python3 tests/pg/pg_server.py run DIR -- python3 -m pytest ...`", pytrace=False)
    return conninfo


_pg_databases = {}


def pg_database_for(key):
    """The conninfo of the database of `key` (a data_dir, or a fleet's name), created on first use."""
    import hashlib
    import pg_server

    if key not in _pg_databases:
        name = "attnd_" + hashlib.sha1(key.encode()).hexdigest()[:16]
        _pg_databases[key] = pg_server.create_database(test_pg(), name)
    return _pg_databases[key]


def pg_database_from_dump(key, dump_path):
    """pg_database_for(key), loaded from a psql dump (an older attnd's database, for migrations)."""
    conninfo = pg_database_for(key)
    r = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-f", dump_path],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return conninfo


def store_under_test():
    return os.environ.get("ATTND_TEST_STORE", "sqlite")


LISTEN_RE = re.compile(r"^attnd listening on (http://127\.0\.0\.1:(\d+))\s*$")

# Shapes small enough for the fp64 reference on a 2-core CI machine.
TINY = {"batch": 1, "heads": 2, "seq": 16, "head_dim": 8, "warmup": 0, "iters": 1}


def attnd_bin():
    """The binary under test, or a test failure that says how to get one."""
    path = os.environ.get("ATTND_BIN")
    if not path:
        for cand in ("build/test/attnd", "build/attnd"):
            if os.path.exists(os.path.join(REPO, cand)):
                path = os.path.join(REPO, cand)
                break
    if not path or not os.path.exists(path):
        pytest.fail("attnd binary not found: set ATTND_BIN (make test-api does) or build build/test/attnd",
                    pytrace=False)
    return os.path.abspath(path)


class AttndServer:
    """One attnd process. start() returns once it printed its listening line and /readyz
    answered ready; stop() sends SIGTERM and checks it exits 0 in time."""

    def __init__(self, data_dir=None, extra=(), env=None, devices="none"):
        self.own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="attnd-test-")
        self.extra = list(extra)
        self.env = dict(os.environ)
        self.env.update(env or {})
        self.devices = devices
        self.proc = None
        self.url = None
        self.stderr_path = os.path.join(self.data_dir, "stderr.log")
        self._stderr = None
        self._lines = queue.Queue()
        self.stdout_rest = []

    def argv(self):
        store = []
        if store_under_test() == "postgresql" and "--store" not in self.extra:
            store = ["--store", pg_database_for(os.path.realpath(self.data_dir))]
        return [attnd_bin(), "--listen", "127.0.0.1:0", "--data-dir", self.data_dir, "--devices", self.devices,
                "--log-level", "warn"] + store + self.extra

    def stderr_text(self):
        try:
            with open(self.stderr_path, "r", errors="replace") as f:
                return f.read()[-8000:]
        except OSError:
            return ""

    def _drain_stdout(self):
        # Read stdout to its end so the server can never block on a full pipe.
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def start(self):
        self._stderr = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(self.argv(), cwd=REPO, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self._stderr, text=True, bufsize=1)
        threading.Thread(target=self._drain_stdout, daemon=True).start()
        try:
            line = self._lines.get(timeout=READY_LINE_TIMEOUT_S)
        except queue.Empty:
            line = "<no line>"
        m = LISTEN_RE.match(line or "")
        if not m:
            self.kill()
            pytest.fail("attnd did not print 'attnd listening on http://127.0.0.1:PORT' within %.0f s; "
                        "first stdout line: %r; exit code %r; argv %s\nstderr:\n%s"
                        % (READY_LINE_TIMEOUT_S, line, self.proc.poll(), " ".join(self.argv()), self.stderr_text()),
                        pytrace=False)
        self.url = m.group(1)
        self.wait_ready()
        return self

    def wait_ready(self):
        deadline = time.monotonic() + READY_POLL_TIMEOUT_S
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                r = requests.get(self.url + "/readyz", timeout=2)
                last = "%d %s" % (r.status_code, r.text[:200])
                if r.status_code == 200 and r.json().get("ready") is True:
                    return
            except (requests.RequestException, ValueError) as exc:
                last = repr(exc)
            time.sleep(0.1)
        self.kill()
        pytest.fail("attnd at %s not ready within %.0f s (last /readyz: %s; exit code %r)\nstderr:\n%s"
                    % (self.url, READY_POLL_TIMEOUT_S, last, self.proc.poll(), self.stderr_text()), pytrace=False)

    def stop(self):
        """SIGTERM; returns (exit code, seconds it took). Kills it when it overstays."""
        if self.proc is None or self.proc.poll() is not None:
            return (self.proc.returncode if self.proc else 0), 0.0
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = None
        return rc, time.monotonic() - t0

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def cleanup(self):
        self.kill()
        if self._stderr:
            self._stderr.close()
            self._stderr = None
        if self.own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def stop_checked(self):
        """stop() and fail the test when the exit was not clean and in time."""
        rc, secs = self.stop()
        if rc != 0:
            pytest.fail("attnd did not exit 0 within %.0f s of SIGTERM (exit %r after %.1f s)\nstderr:\n%s"
                        % (STOP_TIMEOUT_S, rc, secs, self.stderr_text()), pytrace=False)
        return secs


class Api:
    """Thin requests wrapper: a base URL and a timeout on every call."""

    def __init__(self, url):
        self.url = url
        self.s = requests.Session()

    def get(self, path, timeout=HTTP_TIMEOUT_S, **kw):
        return self.s.get(self.url + path, timeout=timeout, **kw)

    def post(self, path, timeout=RUN_TIMEOUT_S, **kw):
        return self.s.post(self.url + path, timeout=timeout, **kw)

    def request(self, method, path, timeout=HTTP_TIMEOUT_S, **kw):
        return self.s.request(method, self.url + path, timeout=timeout, **kw)

    def run(self, params=None, body=None, path="/v1/runs", timeout=RUN_TIMEOUT_S):
        """POST a run: params in the query string, body as JSON (None: no body)."""
        if body is None:
            return self.post(path, params=params, timeout=timeout)
        return self.post(path, params=params, json=body, timeout=timeout)

    def run_ok(self, **params):
        """A run that must succeed; returns the record."""
        r = self.run(params=params)
        assert r.status_code == 200, "run %r answered %d: %s" % (params, r.status_code, r.text[:2000])
        rec = r.json()
        assert rec.get("status") == "done", rec
        return rec


def error_of(r):
    """The {"error":{code,message,field}} of a refusal, checked for shape."""
    try:
        body = r.json()
    except ValueError:
        raise AssertionError("refusal %d is not JSON: %r" % (r.status_code, r.text[:500]))
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    err = body["error"]
    assert isinstance(err.get("code"), str) and err["code"], err
    assert isinstance(err.get("message"), str) and err["message"], err
    assert "field" in err, err
    return err


def openapi_json_schema(name):
    """components.schemas[name] of docs/openapi.json as plain JSON Schema (draft 4, for
    jsonschema.Draft4Validator): $refs inlined, OpenAPI's `nullable: true` turned into a
    "null" type."""
    import json

    with open(os.path.join(REPO, "docs", "openapi.json")) as f:
        doc = json.load(f)

    def conv(node):
        if isinstance(node, list):
            return [conv(x) for x in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return conv(doc["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]])
        out = {k: conv(v) for k, v in node.items() if k not in ("nullable", "example", "format")}
        if node.get("nullable"):
            if "type" in out:
                out["type"] = [out["type"], "null"]
            if "enum" in out:
                out["enum"] = out["enum"] + [None]
        return out
    return conv(doc["components"]["schemas"][name])


def check_against_openapi(instance, name):
    """Assert instance conforms to components.schemas[name]: with jsonschema (pip) where it
    is installed, else with the subset of JSON Schema the document uses (type, enum,
    required, properties, additionalProperties, items, oneOf, bounds) — the lent GPU machine
    has no jsonschema, and its records must be checked all the same."""
    schema = openapi_json_schema(name)
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    if jsonschema is not None:
        jsonschema.Draft4Validator(schema).validate(instance)
        return
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}

    def ok_type(v, t):
        if t == "integer":
            return isinstance(v, int) and not isinstance(v, bool)
        if t == "number":
            return isinstance(v, (int, float)) and not isinstance(v, bool)
        return isinstance(v, kinds[t])

    def check(v, sc, where):
        if "oneOf" in sc:
            fits = 0
            for alt in sc["oneOf"]:
                try:
                    check(v, alt, where)
                    fits += 1
                except AssertionError:
                    pass
            assert fits == 1, "%s: %r fits %d of oneOf" % (where, v, fits)
        types = sc.get("type")
        if types is not None:
            types = types if isinstance(types, list) else [types]
            assert any(ok_type(v, t) for t in types), "%s: %r is not %s" % (where, v, types)
        if "enum" in sc:
            assert v in sc["enum"], "%s: %r not in %s" % (where, v, sc["enum"])
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            assert "minimum" not in sc or v >= sc["minimum"], "%s: %r < %r" % (where, v, sc["minimum"])
            assert "maximum" not in sc or v <= sc["maximum"], "%s: %r > %r" % (where, v, sc["maximum"])
        if isinstance(v, str) and "pattern" in sc:
            assert re.search(sc["pattern"], v), "%s: %r does not match %s" % (where, v, sc["pattern"])
        if isinstance(v, dict):
            for key in sc.get("required", []):
                assert key in v, "%s: %s is required" % (where, key)
            props = sc.get("properties", {})
            for key, item in v.items():
                if key in props:
                    check(item, props[key], where + "." + key)
                else:
                    assert sc.get("additionalProperties", True) is not False, "%s: %s is not in the schema" % (where, key)
        if isinstance(v, list) and "items" in sc:
            for i, item in enumerate(v):
                check(item, sc["items"], "%s[%d]" % (where, i))

    check(instance, schema, name)


def pytest_configure(config):
    config.addinivalue_line("markers", "sqlite_only: the test reads or writes attnd.db itself, so it runs "
                            "only against the SQLite store")


def tiny(**over):
    """Parameters of a tiny reference run on the cpu device, with overrides."""
    p = dict(TINY, backend="reference", device="cpu")
    p.update(over)
    return p


@pytest.fixture(scope="session")
def server():
    srv = AttndServer(extra=["--cpu-threads", "2"]).start()
    yield srv
    try:
        srv.stop_checked()
    finally:
        srv.cleanup()


@pytest.fixture(scope="session")
def api(server):
    return Api(server.url)


@pytest.fixture
def start_server():
    """Factory: start_server(extra=[...], env={...}, data_dir=...) → a started AttndServer,
    stopped (and checked for a clean exit) at teardown."""
    started = []

    def _start(extra=(), env=None, data_dir=None):
        srv = AttndServer(data_dir=data_dir, extra=list(extra), env=env)
        started.append(srv)
        return srv.start()

    yield _start
    failures = []
    for srv in started:
        try:
            if srv.proc is not None and srv.proc.poll() is None:
                rc, secs = srv.stop()
                if rc != 0:
                    failures.append("exit %r after %.1f s\n%s" % (rc, secs, srv.stderr_text()))
        finally:
            srv.cleanup()
    if failures:
        pytest.fail("a server did not stop cleanly on SIGTERM: " + "\n".join(failures), pytrace=False)


def load_gen():
    """clients/python/attnd_ref/gen.py (the numpy input generator), or skip when absent."""
    path = os.path.join(REPO, "clients", "python")
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        from attnd_ref import gen  # noqa: WPS433
    except ImportError as exc:
        pytest.skip("clients/python/attnd_ref/gen.py not importable: %s" % exc)
    return gen


# ---------------------------------------------------------------- tensor files (tests/api and tests/gpu)

def upload_raw(api, data, shape, dtype="fp32"):
    """data (the bytes of a dtype tensor of shape: a length or a tuple) uploaded raw to the cpu
    device: the tensor's id."""
    dims = ",".join(map(str, shape)) if isinstance(shape, (tuple, list)) else str(shape)
    r = api.post("/v1/tensors", params={"device": "cpu", "format": "raw", "dtype": dtype, "shape": dims},
                 data=data, timeout=120)
    assert r.status_code == 201, r.text   # a raw upload makes one tensor: 201 and its record
    return r.json()["id"]


def download(api, tid, fmt=None, timeout=120):
    """GET /v1/tensors/ID/data, checked whole (200, the body as long as its Content-Length)."""
    r = api.get("/v1/tensors/%s/data" % tid, params={"format": fmt} if fmt else None, timeout=timeout)
    assert r.status_code == 200, r.text[:300]
    assert int(r.headers["Content-Length"]) == len(r.content)
    return r


def npy_bytes(a):
    """numpy array → the bytes of its .npy file."""
    import io
    import numpy as np
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def slow_upload(url, body, device, piece, pause_s, stop_after=None):
    """POST /v1/tensors?device=DEVICE with body sent piece by piece, pause_s apart (a client on a
    slow link, so that a large upload is staged while it arrives): (status, answer JSON), or None
    when stop_after bytes were sent and the socket closed (a client that went away)."""
    import json
    import socket
    import time
    host, port = url.replace("http://", "").rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=120)
    s.sendall(b"POST /v1/tensors?device=%s HTTP/1.1\r\nHost: attnd\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n" % (device.encode(), len(body)))
    view = memoryview(body)
    for off in range(0, len(body), piece):
        if stop_after is not None and off >= stop_after:
            s.close()
            return None
        s.sendall(view[off:off + piece])
        time.sleep(pause_s)
    data = b""
    while True:  # Connection: close: the answer ends with the connection
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(rest)


def safetensors_bytes(tensors):
    """tensors: list of (name, dtype "BF16"/"F16"/"F32", numpy array): a safetensors file."""
    import json
    import struct
    import numpy as np
    header, data, off = {}, b"", 0
    for name, dt, a in tensors:
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


# ---------------------------------------------------------------- process memory (tests/api and tests/gpu)

def _proc_status_bytes(pid, key):
    """A kB line of /proc/PID/status (VmHWM, VmRSS) in bytes."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no %s in /proc/%d/status" % (key, pid))


def peak_rss_bytes(pid):
    """VmHWM of process pid: its peak resident set since it started, or since reset_peak_rss."""
    return _proc_status_bytes(pid, "VmHWM")


# A CUDA library's file name: what the front must neither link nor map.
CUDA_LIBRARY = re.compile(r"lib(cuda|cudart|cublas|cublasLt|cupti|cudnn\w*|nvidia-ml|nvrtc)\.so")


def vm_rss_bytes(pid):
    """VmRSS of process pid: what it has resident now."""
    return _proc_status_bytes(pid, "VmRSS")


def mapped_libraries(pid):
    """The shared objects process pid has mapped (paths from /proc/PID/maps)."""
    with open("/proc/%d/maps" % pid) as f:
        return {line.split()[-1] for line in f if ".so" in line}


def child_pids(pid):
    """The children of process pid (its workers, for attnd's front)."""
    kids = []
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                kids += [int(k) for k in f.read().split()]
        except OSError:
            pass  # a connection thread that ended between the listing and the open
    return kids


def reset_peak_rss(pid):
    """Set pid's VmHWM back to its current RSS ("5" to /proc/PID/clear_refs, Linux >= 4.0), so
    that a later peak_rss_bytes covers only what came after. False when the kernel refused:
    VmHWM then stays the lifetime peak, still an upper bound."""
    try:
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class MemfdSampler:
    """While running, polls the memfds process pid holds open (attnd names them "attnd-…")
    every interval_s: the peak of their allocated bytes, and of VmRSS plus those bytes.
    Pages written to a memfd and not mapped are not in VmRSS or VmHWM, yet they are memory
    the process holds (an upload's body lives in one). A sampled peak is a lower bound."""

    def __init__(self, pid, interval_s=0.01):
        self.pid, self.interval_s = pid, interval_s
        self.peak_memfd = self.peak_total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _memfd_bytes(self):
        held, fd_dir = {}, "/proc/%d/fd" % self.pid
        for name in os.listdir(fd_dir):
            try:
                if os.readlink(os.path.join(fd_dir, name)).startswith("/memfd:attnd"):
                    st = os.stat(os.path.join(fd_dir, name))
                    held[st.st_ino] = st.st_blocks * 512  # a memfd open twice holds its bytes once
            except OSError:  # closed between the listing and the look
                pass
        return sum(held.values())

    def _rss_bytes(self):
        with open("/proc/%d/status" % self.pid) as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))

    def _run(self):
        while not self._stop.is_set():
            try:
                m = self._memfd_bytes()
                self.peak_memfd = max(self.peak_memfd, m)
                self.peak_total = max(self.peak_total, self._rss_bytes() + m)
            except (OSError, StopIteration):  # the process is gone: nothing more to see
                return
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)
