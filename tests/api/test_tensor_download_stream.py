"""Streamed downloads (docs/tensors.md, "Download"): from 8 MiB on, GET /v1/tensors/ID/data
sends while the worker fills. Bit for bit equal bodies (npy and raw), concurrent downloads,
a client that goes away mid-stream, and a worker killed mid-fill (the client sees a body
shorter than its Content-Length; the server stays up and leaks no memfd)."""
import glob
import io
import os
import signal
import socket
import threading
import time
from urllib.parse import urlparse

import numpy as np
import pytest

from attnd_api_helpers import Api, HTTP_TIMEOUT_S, child_pids, download, npy_bytes, upload_raw

MIB = 1 << 20


def download_memfds(pid):
    """How many download memfds process pid holds open."""
    n = 0
    for fd in glob.glob("/proc/%d/fd/*" % pid):
        try:
            n += "attnd-download" in os.readlink(fd)
        except OSError:
            pass
    return n


def wait_no_download_memfds(srv, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if download_memfds(srv.proc.pid) == 0 and all(download_memfds(p) == 0 for p in child_pids(srv.proc.pid)):
            return
        time.sleep(0.1)
    pytest.fail("download memfds still open: front %d, workers %s" % (
        download_memfds(srv.proc.pid), {p: download_memfds(p) for p in child_pids(srv.proc.pid)}))


def raw_get(url, path):
    """A socket that has sent GET path and read the answer's headers: (sock, headers, first body bytes)."""
    u = urlparse(url)
    s = socket.create_connection((u.hostname, u.port), timeout=60)
    s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, "connection closed before the headers: %r" % buf
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    assert lines[0].split()[1] == "200", lines[0]
    return s, headers, rest


def read_to_eof(s, have):
    n = have
    while True:
        try:
            chunk = s.recv(4 * MIB)
        except ConnectionResetError:
            break
        if not chunk:
            break
        n += len(chunk)
    return n


@pytest.fixture
def stream_server(start_server):
    return start_server(extra=["--cpu-threads", "2", "--log-level", "info"])


def log_text(srv):
    with open(srv.stderr_path, "r", errors="replace") as f:
        return f.read()


def wait_log(srv, text, timeout=30.0):
    deadline = time.time() + timeout
    while text not in log_text(srv) and time.time() < deadline:
        time.sleep(0.1)
    assert text in log_text(srv), log_text(srv)[-3000:]


def test_big_download_bit_for_bit(stream_server):
    api = Api(stream_server.url)
    n = 256 * MIB
    data = np.random.default_rng(1).integers(0, 2**32, size=n // 4, dtype=np.uint32).view(np.float32)
    tid = upload_raw(api, data.tobytes(), data.size)
    r = download(api, tid, "raw")
    assert r.content == data.tobytes()
    timing = r.headers["Server-Timing"]
    assert "queue;dur=" in timing and "ttfb;dur=" in timing, timing
    r = download(api, tid)  # npy: the header, then the same bytes
    back = np.load(io.BytesIO(r.content))
    assert back.dtype == np.float32 and back.shape == (data.size,)
    assert back.tobytes() == data.tobytes()
    wait_log(stream_server, "downloaded (raw, streamed)")
    wait_no_download_memfds(stream_server)


def test_small_download_keeps_fill_then_send(stream_server):
    api = Api(stream_server.url)
    a = np.arange(1024, dtype=np.float32).reshape(4, 256)
    r = api.post("/v1/tensors", params={"device": "cpu"}, data=npy_bytes(a), timeout=HTTP_TIMEOUT_S)
    body = r.json()
    tid = body["tensors"][0]["id"] if "tensors" in body else body["id"]
    r = download(api, tid)
    assert np.array_equal(np.load(io.BytesIO(r.content)), a)
    assert "fill;dur=" in r.headers["Server-Timing"]


def test_concurrent_downloads_same_and_different(stream_server):
    api = Api(stream_server.url)
    blobs = [os.urandom(24 * MIB), os.urandom(40 * MIB)]
    ids = [upload_raw(api, b, len(b) // 4) for b in blobs]
    results, errors = {}, []

    def get(k, i):
        try:
            results[k] = (i, download(api, ids[i], "raw").content)
        except Exception as exc:  # reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=get, args=(k, k % 2)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    assert len(results) == 6
    for k, (i, content) in results.items():
        assert content == blobs[i], "download %d of tensor %d differs" % (k, i)
    wait_no_download_memfds(stream_server)


def test_client_goes_away_mid_stream(stream_server):
    api = Api(stream_server.url)
    blob = os.urandom(256 * MIB)
    tid = upload_raw(api, blob, len(blob) // 4)
    for _ in range(2):
        s, headers, rest = raw_get(stream_server.url, "/v1/tensors/%s/data?format=raw" % tid)
        assert int(headers["content-length"]) == len(blob)
        got = len(rest)
        while got < 2 * MIB:
            got += len(s.recv(MIB))
        s.close()  # gone, with most of the body unsent
    # The server stays up, the worker is free, and the next download is whole.
    assert download(api, tid, "raw").content == blob
    assert api.get("/healthz").status_code == 200
    wait_log(stream_server, "cut short: the client went away")
    wait_no_download_memfds(stream_server)


def test_worker_killed_mid_fill(stream_server):
    """No test fault can hit a fill (faults are run parameters), so the worker is killed
    (SIGKILL) right after the answer's headers arrive: the fill of 512 MiB takes ~0.2 s,
    the headers come once it has started."""
    api = Api(stream_server.url)
    blob = os.urandom(512 * MIB)
    tid = upload_raw(api, blob, len(blob) // 4)
    (worker,) = child_pids(stream_server.proc.pid)
    s, headers, rest = raw_get(stream_server.url, "/v1/tensors/%s/data?format=raw" % tid)
    os.kill(worker, signal.SIGKILL)
    total = int(headers["content-length"])
    got = read_to_eof(s, len(rest))
    s.close()
    assert total == len(blob)
    assert got < total, "the body was whole: the fill ended before the kill"
    wait_log(stream_server, "cut short: the fill failed")
    # Up again: the tensor is gone with its worker, a new one downloads whole.
    deadline = time.time() + 30
    while api.get("/readyz").status_code != 200 and time.time() < deadline:
        time.sleep(0.2)
    assert api.get("/v1/tensors/%s/data" % tid).status_code == 410
    blob2 = os.urandom(16 * MIB)
    tid2 = upload_raw(api, blob2, len(blob2) // 4)
    assert download(api, tid2, "raw").content == blob2
    wait_no_download_memfds(stream_server)
