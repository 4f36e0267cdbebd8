"""Uploads that try to exhaust or confuse the server (docs/tensors.md, "Admission"), on the cpu
device: a declared body over the budget is refused before it is read, a chunked one is cut
off as it passes the budget, concurrent uploads cannot together pass it, the tensor table
refuses (507) before the worker stores anything, names must be UTF-8 without control
characters, the resident-bytes gauge follows the tensors, and the query is checked up front.

The bounds asserted are the server's memory (the front's VmRSS plus the upload memfds it
holds, the cpu worker's VmRSS), the time to the answer, and how many body bytes the client
had sent when the answer came. Sizes are kept small where the bound shows with them."""
import glob
import json
import os
import socket
import struct
import threading
import time

import numpy as np
import pytest

from attnd_api_helpers import (Api, HTTP_TIMEOUT_S, MemfdSampler, child_pids, error_of, safetensors_bytes, tiny,
                               vm_rss_bytes)

MIB = 1 << 20
BUDGET = 100 * MIB
ANSWER_LIMIT_S = 2.0   # an answer given from the headers alone comes within this (2 busy cores)
GROWTH_LIMIT = 16 * MIB  # what a refused upload may add to a process's memory


# ---------------------------------------------------------------- helpers

def memfd_bytes(pid):
    total = 0
    for fd in glob.glob("/proc/%d/fd/*" % pid):
        try:
            if os.readlink(fd).startswith("/memfd:attnd"):
                total += os.stat(fd).st_blocks * 512
        except OSError:
            pass
    return total


def held_bytes(srv):
    """{pid: VmRSS + attnd memfds} of the front and its worker."""
    return {p: vm_rss_bytes(p) + memfd_bytes(p) for p in [srv.proc.pid] + child_pids(srv.proc.pid)}


def grew(before, after):
    return max(after[p] - before.get(p, after[p]) for p in after)


def connect(srv, timeout=10.0):
    host, port = srv.url.replace("http://", "").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)


def head(query, headers):
    lines = ["POST /v1/tensors?%s HTTP/1.1" % query, "Host: attnd"]
    lines += ["%s: %s" % kv for kv in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class Answer:
    """One HTTP answer read from a socket: status, headers, body; interim 100s counted."""

    def __init__(self, sock, timeout):
        self.continues, self.status, self.headers, self.body = 0, None, {}, b""
        sock.settimeout(timeout)
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                b = sock.recv(65536)
                if not b:
                    raise AssertionError("connection closed before an answer (%r)" % buf[:200])
                buf += b
            top, buf = buf.split(b"\r\n\r\n", 1)
            lines = top.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            if status == 100:
                self.continues += 1
                if buf == b"":
                    return  # only the interim answer so far
                continue
            self.status = status
            self.headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
            n = int(self.headers.get("content-length", "0"))
            while len(buf) < n:
                b = sock.recv(65536)
                if not b:
                    break
                buf += b
            self.body = buf[:n]
            return

    def error(self):
        return json.loads(self.body.decode("utf-8"))["error"]


def wait_continue(sock, timeout=ANSWER_LIMIT_S):
    """The 100 Continue that says the upload was admitted; fails on anything else."""
    a = Answer(sock, timeout)
    assert a.continues == 1 and a.status is None, "expected 100 Continue, got %r %r" % (a.status, a.body[:300])


def upload(api, body, **params):
    r = api.post("/v1/tensors", params=dict({"device": "cpu"}, **params), data=body, timeout=60)
    return r


def raw_params(nbytes):
    return {"dtype": "fp32", "shape": str(nbytes // 4)}


def listed(api):
    r = api.get("/v1/tensors")
    assert r.status_code == 200
    return {t["id"]: t for t in json.loads(r.content.decode("utf-8"))["tensors"]}


def gauge(api, device="cpu"):
    for line in api.get("/metrics").text.splitlines():
        if line.startswith('attnd_resident_tensor_bytes{device="%s"}' % device):
            return float(line.split()[-1])
    return 0.0


# ---------------------------------------------------------------- the budget, before the body

@pytest.mark.parametrize("expect", [True, False], ids=["expect-100-continue", "head-only"])
def test_declared_4_gib_over_the_budget_is_refused_before_its_body(start_server, expect):
    srv = start_server(extra=["--memory-budget-bytes", str(BUDGET)])
    declared = 4 << 30
    before = held_bytes(srv)
    s = connect(srv)
    try:
        headers = [("Content-Length", declared), ("Content-Type", "application/octet-stream")]
        if expect:
            headers.append(("Expect", "100-continue"))
        t0 = time.monotonic()
        s.sendall(head("device=cpu&dtype=fp32&shape=%d" % (declared // 4), headers))
        a = Answer(s, ANSWER_LIMIT_S * 5)
        answer_s = time.monotonic() - t0
    finally:
        s.close()
    after = held_bytes(srv)
    print("4 GiB declared, %s: answered %d in %.3f s, memory grew %.1f MiB at most"
          % ("Expect: 100-continue" if expect else "head only", a.status, answer_s, grew(before, after) / MIB))
    assert a.status == 507 and a.continues == 0, (a.status, a.continues, a.body[:300])
    err = a.error()
    assert err["code"] == "insufficient_storage" and "memory_budget_bytes=%d" % BUDGET in err["message"], err
    assert "%d of memory_budget_bytes" % BUDGET in err["message"], err  # says how much is free
    assert answer_s < ANSWER_LIMIT_S, "answered after %.2f s" % answer_s
    assert grew(before, after) < GROWTH_LIMIT
    assert listed(Api(srv.url)) == {}


def test_declared_over_the_hosts_memory_is_refused_with_no_budget(start_server):
    """memory_budget_bytes 0: the cpu device's limit is the host's memory."""
    with open("/proc/meminfo") as f:
        mem_total = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemTotal:"))
    declared = (mem_total + (1 << 30)) // 4 * 4
    srv = start_server(extra=["--max-upload-bytes", str(1 << 40)])
    s = connect(srv)
    try:
        t0 = time.monotonic()
        s.sendall(head("device=cpu&dtype=fp32&shape=%d" % (declared // 4),
                       [("Content-Length", declared), ("Expect", "100-continue")]))
        a = Answer(s, ANSWER_LIMIT_S * 5)
        answer_s = time.monotonic() - t0
    finally:
        s.close()
    assert a.status == 507 and a.continues == 0, (a.status, a.body[:300])
    assert "memory in all" in a.error()["message"], a.error()
    assert answer_s < ANSWER_LIMIT_S
    # Under the host's memory but over what is available: refused too (MemAvailable).
    with open("/proc/meminfo") as f:
        avail = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemAvailable:"))
    declared = min(mem_total - 4096, avail + (1 << 30)) // 4 * 4
    if declared > avail:
        s = connect(srv)
        try:
            s.sendall(head("device=cpu&dtype=fp32&shape=%d" % (declared // 4),
                           [("Content-Length", declared), ("Expect", "100-continue")]))
            a = Answer(s, ANSWER_LIMIT_S * 5)
        finally:
            s.close()
        assert a.status == 507 and "host memory" in a.error()["message"], (a.status, a.body[:300])


def answer_reader(s, sent, timeout_s):
    """A thread (not started) that waits for the answer on s while the test sends a body:
    its dict gets "a" (the Answer) or "exc", then "sent" (sent[0] by then) and "at"."""
    answered = {}

    def read():
        try:
            answered["a"] = Answer(s, timeout_s)
        except (OSError, AssertionError) as exc:
            answered["exc"] = exc
        answered["sent"] = sent[0]
        answered["at"] = time.monotonic()

    return answered, threading.Thread(target=read, daemon=True)


def test_body_sent_anyway_is_not_read(start_server):
    """A client that sends its body without waiting: the answer comes from the headers, and
    the server does not take the body (the client can push no more than socket buffers)."""
    srv = start_server(extra=["--memory-budget-bytes", str(BUDGET)])
    declared = 4 << 30
    before = held_bytes(srv)
    s = connect(srv)
    sent = [0]
    answered, reader = answer_reader(s, sent, 10)
    piece = b"\0" * MIB
    with MemfdSampler(srv.proc.pid) as front:
        t0 = time.monotonic()
        s.sendall(head("device=cpu&dtype=fp32&shape=%d" % (declared // 4), [("Content-Length", declared)]))
        reader.start()
        try:
            while sent[0] < 512 * MIB and "at" not in answered:
                s.sendall(piece)
                sent[0] += len(piece)
        except OSError:
            pass
        reader.join(10)
    s.close()
    after = held_bytes(srv)
    print("body sent anyway: %.0f MiB sent by the answer (%s) after %.3f s; front memfds at most %.1f MiB; "
          "memory grew %.1f MiB at most"
          % (answered.get("sent", sent[0]) / MIB, answered.get("a") and answered["a"].status or answered.get("exc"),
             answered.get("at", time.monotonic()) - t0, front.peak_memfd / MIB, grew(before, after) / MIB))
    if "a" in answered:
        assert answered["a"].status == 507, answered["a"].body[:300]
    assert answered.get("sent", sent[0]) < 64 * MIB, "the server read %d MiB of a refused body" % (sent[0] // MIB)
    assert front.peak_memfd < MIB
    assert grew(before, after) < GROWTH_LIMIT


def test_chunked_upload_is_refused_as_it_passes_the_budget(start_server):
    """libmicrohttpd cannot answer while a body arrives: past the budget the upload's memory
    goes and the rest of its body is read and thrown away; at its end it is answered 507, and
    the front logs why."""
    srv = start_server(extra=["--memory-budget-bytes", str(BUDGET)])
    before = held_bytes(srv)
    s = connect(srv)
    sent = [0]
    answered, reader = answer_reader(s, sent, 30)
    piece = b"\0" * MIB
    chunk = b"%x\r\n" % len(piece) + piece + b"\r\n"
    with MemfdSampler(srv.proc.pid, interval_s=0.002) as front:
        s.sendall(head("device=cpu&dtype=fp32&shape=%d" % (3 * BUDGET // 4),
                       [("Transfer-Encoding", "chunked"), ("Content-Type", "application/octet-stream")]))
        reader.start()
        try:
            while sent[0] < 3 * BUDGET and "sent" not in answered:
                s.sendall(chunk)
                sent[0] += len(piece)
            s.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        reader.join(30)
    s.close()
    after = held_bytes(srv)
    print("chunked: %.0f MiB sent by the answer (%s); front memfds at most %.1f MiB (budget %d MiB); memory grew "
          "%.1f MiB at most" % (answered.get("sent", sent[0]) / MIB,
                                answered.get("a") and answered["a"].status or answered.get("exc"),
                                front.peak_memfd / MIB, BUDGET // MIB, grew(before, after) / MIB))
    assert "a" in answered, answered.get("exc")
    assert answered["a"].status == 507 and answered["a"].error()["code"] == "insufficient_storage"
    log = [ln for ln in srv.stderr_text().splitlines() if "upload refused after" in ln]
    assert log and "507 insufficient_storage" in log[-1] and "chunked" in log[-1], log
    refused_at = int(log[-1].split("upload refused after ")[1].split()[0])
    assert refused_at <= BUDGET, "the front took %d bytes of a body over its %d-byte budget" % (refused_at, BUDGET)
    assert front.peak_memfd <= BUDGET + MIB, "the front held %.1f MiB of the body" % (front.peak_memfd / MIB)
    assert grew(before, after) < GROWTH_LIMIT
    assert listed(Api(srv.url)) == {}


def test_two_uploads_that_together_pass_the_budget_cannot_both_pass(start_server):
    srv = start_server(extra=["--memory-budget-bytes", str(BUDGET)])
    api = Api(srv.url)
    size = 60 * MIB
    q = "device=cpu&dtype=fp32&shape=%d" % (size // 4)
    a, b = connect(srv), connect(srv)
    try:
        a.sendall(head(q, [("Content-Length", size), ("Expect", "100-continue")]))
        wait_continue(a)  # admitted: its 60 MiB are reserved before any is sent
        t0 = time.monotonic()
        b.sendall(head(q, [("Content-Length", size), ("Expect", "100-continue")]))
        refused = Answer(b, ANSWER_LIMIT_S * 5)
        assert time.monotonic() - t0 < ANSWER_LIMIT_S
        assert refused.status == 507 and refused.continues == 0, refused.body[:300]
        assert "%d of memory_budget_bytes" % (BUDGET - size) in refused.error()["message"]
        a.sendall(b"\0" * size)
        stored = Answer(a, 30)
        assert stored.status == 201, stored.body[:300]
    finally:
        a.close()
        b.close()
    tid = json.loads(stored.body)["id"]
    # Stored, the first one's bytes count as resident instead: still no room for the second.
    assert upload(api, b"\0" * size, **raw_params(size)).status_code == 507
    assert api.request("DELETE", "/v1/tensors/%s" % tid).status_code == 200
    assert upload(api, b"\0" * size, **raw_params(size)).status_code == 201

    # Racing: 4 clients at once, 40 MiB each: at most 2 fit in 100 MiB.
    for t in listed(api):
        api.request("DELETE", "/v1/tensors/%s" % t)
    codes = []

    def one():
        codes.append(Api(srv.url).post("/v1/tensors", params=dict(raw_params(40 * MIB), device="cpu"),
                                       data=b"\0" * (40 * MIB), timeout=60).status_code)
    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    print("4 racing 40 MiB uploads against 100 MiB: %s" % sorted(codes))
    assert sorted(codes) == [201, 201, 507, 507], codes
    assert sum(t["bytes"] for t in listed(api).values()) <= BUDGET


# ---------------------------------------------------------------- the table and the budget under load

def test_20_uploads_of_32_mib_against_512_mib(start_server):
    size, budget = 32 * MIB, 512 * MIB
    srv = start_server(extra=["--memory-budget-bytes", str(budget)])
    api = Api(srv.url)
    (worker,) = child_pids(srv.proc.pid)
    base = vm_rss_bytes(worker)
    ids, refused, peak = [], 0, 0
    body = np.arange(size // 4, dtype=np.float32).tobytes()
    t0 = time.monotonic()
    for _ in range(20):
        r = upload(api, body, **raw_params(size))
        assert r.status_code in (201, 507), r.text[:300]
        if r.status_code == 201:
            ids.append(r.json()["id"])
        else:
            refused += 1
            assert error_of(r)["code"] == "insufficient_storage"
        peak = max(peak, vm_rss_bytes(worker))
    up_s = time.monotonic() - t0
    table = listed(api)
    print("20 x 32 MiB against 512 MiB: %d stored, %d refused in %.1f s; worker RSS %.0f -> peak %.0f MiB"
          % (len(ids), refused, up_s, base / MIB, peak / MIB))
    assert len(ids) == budget // size and refused == 20 - budget // size
    assert set(ids) == set(table), "every 201 is listed"
    assert all(t["state"] == "resident" for t in table.values())
    assert sum(t["bytes"] for t in table.values()) <= budget
    assert peak - base <= budget + 32 * MIB, "worker grew %.0f MiB" % ((peak - base) / MIB)
    for tid in ids:
        r = api.request("DELETE", "/v1/tensors/%s" % tid)
        assert r.status_code == 200, r.text[:300]
    time.sleep(0.2)
    freed = vm_rss_bytes(worker)
    print("after deleting all: worker RSS %.0f MiB" % (freed / MIB))
    assert listed(api) == {}
    assert freed - base < 48 * MIB, "deleting everything left the worker %.0f MiB above its start" % ((freed - base) / MIB)
    assert upload(api, body, **raw_params(size)).status_code == 201  # the budget is whole again


def test_max_tensors_refuses_before_storing(start_server):
    srv = start_server(extra=["--max-tensors", "8", "--cpu-threads", "2"])
    api = Api(srv.url)
    (worker,) = child_pids(srv.proc.pid)
    ids = []
    for i in range(8):
        r = upload(api, struct.pack("<f", i), **raw_params(4))
        assert r.status_code == 201, r.text[:300]
        ids.append(r.json()["id"])
    before = vm_rss_bytes(worker)
    r = upload(api, b"\0" * (4 * MIB), **raw_params(4 * MIB))
    assert r.status_code == 507, r.text[:300]
    err = error_of(r)
    assert err["code"] == "insufficient_storage" and "0 of max_tensors=8 are free" in err["message"], err
    assert vm_rss_bytes(worker) - before < 2 * MIB, "the worker stored the refused upload"
    assert set(listed(api)) == set(ids)
    for tid in ids:
        assert api.get("/v1/tensors/%s" % tid).status_code == 200

    # A safetensors file counts all its tensors: 3 do not fit in 1 free entry.
    assert api.request("DELETE", "/v1/tensors/%s" % ids.pop()).status_code == 200
    three = safetensors_bytes([(n, "F32", np.zeros(4, np.float32)) for n in "abc"])
    r = api.post("/v1/tensors", params={"device": "cpu"}, data=three, timeout=HTTP_TIMEOUT_S)
    err = error_of(r)
    assert r.status_code == 507 and "3 tensors need 3 entries, and 1 of max_tensors=8 is free" in err["message"], err
    assert set(listed(api)) == set(ids)
    # A run's kept output needs an entry too.
    ids.append(upload(api, b"\0" * 4, **raw_params(4)).json()["id"])
    r = api.run(params=tiny(keep_output="true"))
    assert r.status_code == 507 and error_of(r)["field"] == "keep_output", r.text[:300]

    for tid in ids:
        r = api.request("DELETE", "/v1/tensors/%s" % tid)
        assert r.status_code == 200, "%s: %d %s" % (tid, r.status_code, r.text[:300])
    assert listed(api) == {}
    r = api.post("/v1/tensors", params={"device": "cpu"}, data=three, timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 201 and len(r.json()["tensors"]) == 3


# ---------------------------------------------------------------- names

BAD_NAMES = {
    "not_utf8": "%ff%fe",
    "cut_sequence": "ab%e2%82",
    "overlong": "%c0%af",
    "surrogate": "%ed%a0%80",
    "nul": "a%00b",
    "c0_control": "a%01b",
    "newline": "a%0ab",
    "escape": "%1b%5b2J",
    "del": "a%7f",
    "c1_control": "a%c2%85",
    # Invisible format characters: bidi controls make a name display as another, zero-width
    # ones hide in it.
    "right_to_left_override": "evil%e2%80%aegpj.exe",  # U+202E
    "left_to_right_embedding": "a%e2%80%aab",  # U+202A
    "right_to_left_isolate": "a%e2%81%a7b",  # U+2067
    "pop_directional_isolate": "a%e2%81%a9b",  # U+2069
    "right_to_left_mark": "a%e2%80%8fb",  # U+200F
    "arabic_letter_mark": "a%d8%9cb",  # U+061C
    "zero_width_space": "a%e2%80%8bb",  # U+200B
    "zero_width_joiner": "a%e2%80%8db",  # U+200D
    "byte_order_mark": "%ef%bb%bfa",  # U+FEFF
    "soft_hyphen": "a%c2%adb",  # U+00AD
    "tag_letter": "a%f3%a0%81%81",  # U+E0041
    "line_separator": "a%e2%80%a8b",  # U+2028
}


@pytest.mark.parametrize("case", sorted(BAD_NAMES))
def test_names_that_are_not_printable_utf8_are_400(api, case):
    before = listed(api)
    r = api.post("/v1/tensors?device=cpu&dtype=fp32&shape=1&name=" + BAD_NAMES[case], data=b"\0" * 4,
                 timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 400, r.text[:300]
    err = error_of(r)  # the refusal itself is valid JSON
    assert err["code"] == "bad_value" and err["field"] == "name", err
    assert listed(api) == before


def test_utf8_names_are_kept_and_the_list_stays_json(api):
    name = "q\u00e9\u2713\U0001F600 layer 3"
    r = api.post("/v1/tensors", params={"device": "cpu", "dtype": "fp32", "shape": "1", "name": name},
                 data=b"\0" * 4, timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 201, r.text[:300]
    tid = r.json()["id"]
    assert listed(api)[tid]["name"] == name  # strict UTF-8 decode of the whole list
    assert api.request("DELETE", "/v1/tensors/%s" % tid).status_code == 200


def st_file(header_json, data=b"\0" * 4):
    h = header_json + b" " * (-len(header_json) % 8)
    return struct.pack("<Q", len(h)) + h + data


BAD_KEYS = {
    "not_utf8": b'{"\xff\xfe":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "raw_control": b'{"a\x01":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "escaped_control": b'{"a\\u0001":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "escaped_nul": b'{"a\\u0000b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "c1_control": b'{"a\\u0085":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "metadata_not_utf8": b'{"__metadata__":{"k":"\xc3"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "escaped_bidi_override": b'{"a\\u202eb":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "raw_bidi_isolate": b'{"a\xe2\x81\xa6b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
}


@pytest.mark.parametrize("case", sorted(BAD_KEYS))
def test_safetensors_names_that_are_not_printable_utf8_are_400(api, case):
    before = listed(api)
    r = api.post("/v1/tensors", params={"device": "cpu"}, data=st_file(BAD_KEYS[case]), timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 400, r.text[:300]
    err = error_of(r)
    assert err["code"] == "bad_safetensors", err
    assert ("UTF-8" in err["message"] or "control character" in err["message"]
            or "format character" in err["message"] or "NUL" in err["message"]), err["message"]
    assert listed(api) == before


# ---------------------------------------------------------------- the resident-bytes gauge

def test_resident_bytes_gauge_follows_the_tensors(start_server):
    srv = start_server(extra=["--enable-fault-injection", "true", "--cpu-threads", "2"])
    api = Api(srv.url)
    assert gauge(api) == 0
    a = upload(api, b"\0" * 4096, **raw_params(4096)).json()
    b = api.post("/v1/tensors", params={"device": "cpu"}, timeout=HTTP_TIMEOUT_S,
                 data=safetensors_bytes([("x", "F32", np.zeros(256, np.float32)),
                                         ("y", "F16", np.zeros(256, np.float16))])).json()
    assert gauge(api) == 4096 + 1024 + 512
    run = api.run_ok(**tiny(keep_output="true"))
    out_bytes = api.get("/v1/tensors/%s" % run["output"]["tensor"]).json()["bytes"]
    assert gauge(api) == 4096 + 1536 + out_bytes
    assert api.request("DELETE", "/v1/tensors/%s" % a["id"]).status_code == 200
    assert api.request("DELETE", "/v1/tensors/%s" % run["output"]["tensor"]).status_code == 200
    assert gauge(api) == 1536


def test_resident_bytes_gauge_drops_when_the_worker_restarts(start_server):
    srv = start_server(extra=["--enable-fault-injection", "true", "--cpu-threads", "2"])
    api = Api(srv.url)
    b = api.post("/v1/tensors", params={"device": "cpu"}, timeout=HTTP_TIMEOUT_S,
                 data=safetensors_bytes([("x", "F32", np.zeros(256, np.float32))])).json()
    assert gauge(api) == 1024
    # A worker restart loses the tensors: the gauge follows without any tensor request.
    r = api.run(params=tiny(fault="crash"))
    assert r.status_code == 500
    deadline = time.monotonic() + 10
    while gauge(api) != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gauge(api) == 0
    assert {t["state"] for t in listed(api).values()} == {"gone"}
    for t in b["tensors"]:
        api.request("DELETE", "/v1/tensors/%s" % t["id"])


# ---------------------------------------------------------------- the query, up front

def test_unknown_parameters_are_400_before_the_body(server):
    s = connect(server)
    try:
        s.sendall(head("device=cpu&dtype=fp32&shape=4&nmae=q", [("Content-Length", 16), ("Expect", "100-continue")]))
        a = Answer(s, ANSWER_LIMIT_S * 5)
    finally:
        s.close()
    assert a.status == 400 and a.continues == 0
    err = a.error()
    assert err["code"] == "unknown_parameter" and err["field"] == "nmae", err
    assert "'nmae'" in err["message"] and "known: device, format, dtype, shape, name" in err["message"], err


@pytest.mark.parametrize("query", [
    "dtype=fp32&shape=3",        # 12 bytes, 16 declared
    "format=raw&shape=4",        # raw without dtype
    "format=raw&dtype=fp32",     # raw without shape
    "dtype=fp64&shape=4",
    "dtype=fp32&shape=4,x",
    "format=pickle",
    "format=safetensors&name=q",
    "format=npy&shape=4",
])
def test_bad_queries_are_400_before_the_body(server, query):
    s = connect(server)
    try:
        s.sendall(head("device=cpu&" + query, [("Content-Length", 16), ("Expect", "100-continue")]))
        a = Answer(s, ANSWER_LIMIT_S * 5)
    finally:
        s.close()
    assert a.status == 400 and a.continues == 0, (a.status, a.body[:300])
    assert a.error()["code"] in ("bad_value", "conflict", "size_mismatch"), a.error()


@pytest.mark.parametrize("query", [{"shape": "0", "dtype": "fp32"}, {}, {"format": "npy"}])
def test_empty_body_is_400_missing_body(api, query):
    r = api.post("/v1/tensors", params=dict(query, device="cpu"), data=b"", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 400 and error_of(r)["code"] == "missing_body", r.text[:300]
    # chunked, with no chunk at all
    r = api.post("/v1/tensors", params=dict(query, device="cpu"), data=iter([]), timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 400 and error_of(r)["code"] == "missing_body", r.text[:300]


def test_413_names_max_upload_bytes(start_server):
    srv = start_server(extra=["--max-upload-bytes", str(MIB)])
    s = connect(srv)
    try:
        s.sendall(head("device=cpu&dtype=fp32&shape=%d" % (2 * MIB // 4),
                       [("Content-Length", 2 * MIB), ("Expect", "100-continue")]))
        a = Answer(s, ANSWER_LIMIT_S * 5)
    finally:
        s.close()
    assert a.status == 413 and a.continues == 0, (a.status, a.body[:300])
    msg = a.error()["message"]
    assert "max_upload_bytes" in msg and "max_body_bytes" not in msg, msg
    # At the limit it is fine.
    r = upload(Api(srv.url), b"\0" * MIB, **raw_params(MIB))
    assert r.status_code == 201, r.text[:300]
