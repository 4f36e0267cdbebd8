"""Resident tensors on cuda:0 (docs/tensors.md): upload q/k/v, run every available GPU
variant on them, keep the output, download it and check it in numpy against the fp64
reference; round trips bit for bit; a 1 GiB upload/download for the throughput target and
the front's memory (ATTND_PID); 410 after the GPU worker restarts; an upload over
memory_budget_bytes or the GPU's memory refused from its headers, before its body is sent."""
import contextlib
import io
import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time

import numpy as np
import pytest
import requests

from attnd_gpu_helpers import error_of, fact, fresh_seed

import attnd_api_helpers
from attnd_api_helpers import (MemfdSampler, npy_bytes, peak_rss_bytes, reset_peak_rss, safetensors_bytes,
                               slow_upload)

B, H, S, D = 2, 4, 128, 64


def gen():
    return attnd_api_helpers.load_gen()


def upload(api, body, timeout=120, **params):
    r = api.post("/v1/tensors", params=dict(params, device="cuda:0"), data=body, timeout=timeout)
    assert r.status_code == 201, r.text[:1000]
    return r.json()


def download(api, tid, fmt=None, timeout=120):
    r = api.get("/v1/tensors/%s/data" % tid, params={"format": fmt} if fmt else None, timeout=timeout)
    assert r.status_code == 200, r.text[:500]
    return r.content


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def resident(gapi):
    """q, k, v in each dtype on cuda:0: {dtype: (ids, arrays)}."""
    g = gen()
    out = {}
    base = [rand((B, H, S, D), i) for i in range(3)]
    # bf16 through safetensors, fp16 through npy, fp32 raw
    bf = [g.round_bf16_bits(a) for a in base]
    r = gapi.post("/v1/tensors", params={"device": "cuda:0"},
                  data=safetensors_bytes([(n, "BF16", a) for n, a in zip("qkv", bf)]), timeout=120)
    assert r.status_code == 201, r.text
    by = {t["name"]: t["id"] for t in r.json()["tensors"]}
    out["bf16"] = ([by["q"], by["k"], by["v"]], bf)
    f16 = [a.astype(np.float16) for a in base]
    out["fp16"] = ([upload(gapi, npy_bytes(a))["id"] for a in f16], f16)
    out["fp32"] = ([upload(gapi, a.tobytes(), dtype="fp32", shape="%d,%d,%d,%d" % a.shape)["id"] for a in base], base)
    for ids, arrays in out.values():
        for tid, a in zip(ids, arrays):
            meta = gapi.get("/v1/tensors/%s" % tid).json()
            assert meta["device"] == "cuda:0" and meta["fingerprint"] == g.fingerprint_hex(a.tobytes())
            assert download(gapi, tid, "raw") == a.tobytes()
    return out


def gpu_variants(variants):
    return [v for v in variants.values() if v["device"] == "cuda"]


def test_every_gpu_variant_on_resident_tensors(gapi, variants, resident):
    g = gen()
    ran = 0
    for v in gpu_variants(variants):
        if not v["available"]:
            print("skip %s: %s" % (v["name"], v["why"]))
            continue
        for dtype in v["dtypes"]:
            ids, arrays = resident[dtype]
            for mask in ("none", "causal"):
                r = gapi.run(params=dict(backend=v["name"], device="cuda:0", q=ids[0], k=ids[1], v=ids[2],
                                         mask=mask, warmup=1, iters=2, verify="true", keep_output="true"))
                if r.status_code == 422:  # e.g. a variant without this mask or head_dim: say why
                    print("422 %s %s %s: %s" % (v["name"], dtype, mask, error_of(r)["message"]))
                    continue
                assert r.status_code == 200, "%s %s %s: %s" % (v["name"], dtype, mask, r.text[:1500])
                rec = r.json()
                assert rec["status"] == "done", rec
                assert rec["verify"]["pass"] is True, rec["verify"]
                tid = rec["output"]["tensor"]
                data = download(gapi, tid)
                out = np.load(io.BytesIO(data))
                raw = download(gapi, tid, "raw")
                assert raw == out.tobytes()
                assert rec["output"]["fingerprint"] == g.fingerprint_hex(raw)
                ref = g.reference_attention(arrays[0], arrays[1], arrays[2], mask=mask)
                cmp = g.compare(out, ref, dtype)
                assert cmp["pass"], "%s %s %s: %r" % (v["name"], dtype, mask, cmp)
                assert gapi.request("DELETE", "/v1/tensors/%s" % tid).status_code == 200
                ran += 1
    fact("tensors: GPU runs on resident inputs checked in numpy", ran)
    assert ran > 0


def test_mixed_resident_and_generated(gapi, variants, resident):
    g = gen()
    ids, arrays = resident["fp16"]
    rec = gapi.run_ok(backend="math", q=ids[0], seed=11, warmup=0, iters=1, keep_output="true", mask="none")
    _, k, v = g.inputs(11, B, H, S, S, D, "fp16")
    out = np.load(io.BytesIO(download(gapi, rec["output"]["tensor"])))
    cmp = g.compare(out, g.reference_attention(arrays[0], k, v, mask="none"), "fp16")
    assert cmp["pass"], cmp


def test_kept_outputs_keep_their_bytes_while_later_runs_reuse_blocks(gapi):
    """The worker keeps a run's device blocks idle for the next run (server/worker/memory/). A
    kept output's block belongs to its tensor: runs of the same shape after it, which allocate
    the very sizes it has, must neither get it nor write it, and a deleted tensor's block is
    handed out again without harm. Each run is verified against the fp64 reference."""
    shape = dict(backend="flash", device="cuda:0", batch=1, heads=2, seq=128, head_dim=64, dtype="bf16",
                 mask="causal", warmup=1, iters=3, verify="true")
    first = gapi.run_ok(seed=fresh_seed(), keep_output="true", **shape)
    kept = first["output"]["tensor"]
    before = download(gapi, kept, "raw")
    assert gen().fingerprint_hex(before) == first["output"]["fingerprint"]
    others = []
    for i in range(12):
        rec = gapi.run_ok(seed=fresh_seed(), keep_output="true" if i % 3 == 0 else "false", **shape)
        assert rec["verify"]["pass"] is True, rec["verify"]
        if rec["output"].get("tensor"):
            others.append(rec["output"]["tensor"])
        if len(others) == 2:  # a kept output let go mid-way: its block may serve the next runs
            assert gapi.request("DELETE", "/v1/tensors/%s" % others.pop(0)).status_code == 200
    assert download(gapi, kept, "raw") == before, "a later run wrote the kept output's block"
    assert gapi.get("/v1/tensors/%s" % kept).json()["fingerprint"] == first["output"]["fingerprint"]
    for tid in [kept] + others:
        assert gapi.request("DELETE", "/v1/tensors/%s" % tid).status_code == 200


ROUND_TRIP_GBPS = {}
def test_large_safetensors_at_unaligned_offsets(gapi):
    """A safetensors upload of 6 MiB: the worker copies uploads from 4 MiB on straight out of
    its page-locked mapping of the body (server/worker/tensors.c), smaller ones through its
    staging buffer (the resident fixture's). A 6-byte tensor first puts q, k and v at offsets
    that are not even 8-byte aligned in the body. Each comes back bit for bit with the
    documented fingerprint, and a run on them verifies against the fp64 reference."""
    g = gen()
    shape = (1, 8, 512, 128)  # fp32: 2 MiB each
    qkv = [rand(shape, 40 + i) for i in range(3)]
    odd = np.arange(3, dtype=np.float16)
    body = safetensors_bytes([("odd", "F16", odd)] + [(n, "F32", a) for n, a in zip("qkv", qkv)])
    r = gapi.post("/v1/tensors", params={"device": "cuda:0"}, data=body, timeout=120)
    assert r.status_code == 201, r.text[:1000]
    by = {t["name"]: t for t in r.json()["tensors"]}
    try:
        for name, a in [("odd", odd)] + list(zip("qkv", qkv)):
            assert by[name]["fingerprint"] == g.fingerprint_hex(a.tobytes()), name
            assert download(gapi, by[name]["id"], "raw") == a.tobytes(), name
        rec = gapi.run_ok(backend="math", device="cuda:0", q=by["q"]["id"], k=by["k"]["id"], v=by["v"]["id"],
                          mask="causal", warmup=0, iters=1, verify="true")
        assert rec["verify"]["pass"] is True, rec["verify"]
    finally:
        for t in by.values():
            gapi.request("DELETE", "/v1/tensors/%s" % t["id"])


MIB = 1 << 20
ROUND_TRIPS = 5  # medians: one 1 GiB round trip varies by ±20% on the lent machine (the first is cold)


def server_timing(headers):
    """{'queue': ms, 'ttfb': ms} (streamed downloads; small ones: 'fill') from a download's
    Server-Timing header (docs/tensors.md)."""
    out = {}
    for line in headers.splitlines():
        if line.lower().startswith("server-timing:"):
            for part in line.split(":", 1)[1].split(","):
                name, _, dur = part.strip().partition(";dur=")
                if dur:
                    out[name.strip()] = float(dur)
    return out


def median_phases(rows):
    keys = sorted({k for r in rows for k, v in r.items() if isinstance(v, (int, float))})
    return {k: round(statistics.median(r[k] for r in rows if k in r), 4) for k in keys}


def test_streamed_downloads_from_the_gpu_are_exact(gapi):
    """Downloads from 8 MiB on are streamed: the worker fills the memfd 32 MiB at a time (into
    its staging buffer, then through a mapping on several threads) while the front sends. A
    tensor over several pieces and not a whole number of pages, raw (the body at offset 0) and
    npy (behind the header, mid-page), several at once, and after clients that went away
    mid-stream."""
    n = (40 << 20) // 4 + 3
    a = np.random.default_rng(fresh_seed()).standard_normal(n).astype(np.float32)
    tid = upload(gapi, a.tobytes(), dtype="fp32", shape=str(n))["id"]
    assert download(gapi, tid, "raw") == a.tobytes()
    assert np.load(io.BytesIO(download(gapi, tid))).tobytes() == a.tobytes()
    for _ in range(2):  # clients that go away after a few MiB
        with gapi.get("/v1/tensors/%s/data" % tid, params={"format": "raw"}, stream=True, timeout=120) as r:
            assert r.status_code == 200
            next(r.iter_content(4 << 20))
    got = {}

    def get(k):
        got[k] = download(gapi, tid, "raw" if k % 2 else None)

    threads = [threading.Thread(target=get, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(got) == [0, 1, 2, 3]
    for k, body in got.items():
        assert (body if k % 2 else np.load(io.BytesIO(body)).tobytes()) == a.tobytes(), k
    assert gapi.request("DELETE", "/v1/tensors/%s" % tid).status_code == 200


def test_one_gib_round_trip(gapi, front_pid, tmp_path, request):
    """1 GiB up and down through loopback with curl (requests' own copies cap a download near
    0.25-0.45 GB/s on this repo's CPU machine, where curl reads the same at 0.72), bit for bit;
    the rates feed the target test. The upload streams from the file (-T): --data-binary @file
    reads the whole file into curl first, and curl refuses that at 1 GiB ("out of memory").
    The front's peak RSS (VmHWM, reset first: the server has served the other tests) must stay
    under 2x the upload; the memfds it holds, not in VmRSS, are recorded beside it."""
    n = 1 << 30
    body = np.arange(n // 4, dtype=np.uint32).tobytes()
    # the client's files in memory (tmpfs) where there is one: the rate is loopback's and the
    # server's, not the client disk's (the lent machine's /tmp writes ~0.7 GB/s)
    files = pathlib.Path(tempfile.mkdtemp(dir="/dev/shm")) if os.path.isdir("/dev/shm") else tmp_path
    request.addfinalizer(lambda: files != tmp_path and shutil.rmtree(files, ignore_errors=True))
    src, dst = files / "up.bin", files / "down.bin"
    src.write_bytes(body)
    url = "%s/v1/tensors?dtype=fp32&shape=%d&device=cuda:0" % (gapi.url, n // 4)
    reset = front_pid is not None and reset_peak_rss(front_pid)
    ups, downs, nulls, up_phases, down_phases = [], [], [], [], []
    with (MemfdSampler(front_pid) if front_pid else contextlib.nullcontext()) as held:
        for rep in range(ROUND_TRIPS):
            t0 = time.monotonic()
            up = subprocess.run(["curl", "-sS", "--fail-with-body", "-X", "POST", "-T", str(src),
                                 "-H", "Content-Type: application/octet-stream", url], capture_output=True, timeout=300)
            ups.append(n / (time.monotonic() - t0) / 1e9)
            assert up.returncode == 0, up.stdout[:500] + up.stderr[:500]
            t = json.loads(up.stdout)
            up_phases.append(t.get("timing") or {})
            t0 = time.monotonic()
            down = subprocess.run(["curl", "-sS", "--fail", "-D", str(tmp_path / "headers"), "-o", str(dst),
                                   "%s/v1/tensors/%s/data?format=raw" % (gapi.url, t["id"])],
                                  capture_output=True, timeout=300)
            downs.append(n / (time.monotonic() - t0) / 1e9)
            down_phases.append(server_timing((tmp_path / "headers").read_text(errors="replace")))
            assert down.returncode == 0, down.stderr[:500]
            # the same bytes to /dev/null: curl's writes to the file are its own cost, not the server's
            t0 = time.monotonic()
            null = subprocess.run(["curl", "-sS", "--fail", "-o", "/dev/null", "-w", "%{size_download}",
                                   "%s/v1/tensors/%s/data?format=raw" % (gapi.url, t["id"])],
                                  capture_output=True, text=True, timeout=300)
            nulls.append(n / (time.monotonic() - t0) / 1e9)
            assert null.returncode == 0 and null.stdout == str(n), null.stdout[:200] + null.stderr[:500]
            if rep == 0:
                assert dst.read_bytes() == body
                assert t["fingerprint"] == gen().fingerprint_hex(body)
            assert gapi.request("DELETE", "/v1/tensors/%s" % t["id"]).status_code == 200
    ROUND_TRIP_GBPS["up"], ROUND_TRIP_GBPS["down"] = statistics.median(ups), statistics.median(downs)
    fact("tensors: 1 GiB upload GB/s (curl, each of %d)" % ROUND_TRIPS, [round(x, 3) for x in ups])
    fact("tensors: 1 GiB download GB/s (curl, each of %d)" % ROUND_TRIPS, [round(x, 3) for x in downs])
    fact("tensors: 1 GiB download to /dev/null GB/s (curl, each of %d)" % ROUND_TRIPS, [round(x, 3) for x in nulls])
    fact("tensors: 1 GiB upload phases s (median)", median_phases(up_phases))
    fact("tensors: 1 GiB download phases ms (median, Server-Timing)", median_phases(down_phases))
    peak = peak_rss_bytes(front_pid) if front_pid else None
    fact("tensors: 1 GiB upload GB/s (curl, median)", ROUND_TRIP_GBPS["up"])
    fact("tensors: 1 GiB download GB/s (curl, median)", ROUND_TRIP_GBPS["down"])
    fact("tensors: 1 GiB download to /dev/null GB/s (curl, median)", statistics.median(nulls))
    if peak is None:
        fact("tensors: front peak RSS MiB during 1 GiB round trip", "not measured: ATTND_URL without ATTND_PID")
    else:
        fact("tensors: front peak RSS MiB during 1 GiB round trip",
             round(peak / MIB, 1) if reset else "%.1f (lifetime peak: clear_refs refused)" % (peak / MIB))
        fact("tensors: front memfd MiB held during 1 GiB round trip (sampled)", round(held.peak_memfd / MIB, 1))
    if peak is not None:
        assert peak < 2 * n, "front VmHWM %.0f MiB over 2x the 1 GiB upload" % (peak / MIB)
        assert held.peak_total < 2 * n, "front VmRSS + memfds %.0f MiB over 2x the upload" % (held.peak_total / MIB)


def test_staged_upload_to_the_gpu_is_intact(gapi):
    """A large upload is copied to the GPU while it arrives (docs/tensors.md): page-locked a
    range at a time, tensors whose spans end mid-word and mid-page, fingerprints summed in
    pieces; what is stored is what was sent. A client that goes away after some steps leaves
    nothing behind, and the same file uploads whole afterwards."""
    rng = np.random.default_rng(95)
    arrays = {"a": rng.standard_normal((50 << 20) // 4, dtype=np.float32),
              "b": rng.standard_normal((40 << 20) // 4 - 3, dtype=np.float32),
              "c": rng.integers(-9, 9, size=5, dtype=np.int32)}
    body = safetensors_bytes([(k, "F32" if v.dtype == np.float32 else "I32", v) for k, v in arrays.items()])
    before = {t["id"] for t in gapi.get("/v1/tensors").json()["tensors"]}
    assert slow_upload(gapi.url, body, "cuda:0", 8 << 20, 0.03, stop_after=64 << 20) is None
    status, answer = slow_upload(gapi.url, body, "cuda:0", 8 << 20, 0.03)
    assert status == 201, answer
    t = answer["timing"]
    fact("tensors: staged 90 MiB upload (8 MiB every 30 ms): staged MiB, staged s, tail copy s",
         [round(t["staged_bytes"] / MIB, 1), round(t["staged_s"], 4), round(t["copy_s"], 4)])
    assert t["staged_bytes"] >= 32 * MIB, t
    got = {x["name"]: x for x in answer["tensors"]}
    for name, a in arrays.items():
        assert got[name]["fingerprint"] == gen().fingerprint_hex(a), name
        assert download(gapi, got[name]["id"], "raw") == a.tobytes(), name
    after = {x["id"] for x in gapi.get("/v1/tensors").json()["tensors"]} - before
    assert after == {x["id"] for x in answer["tensors"]}, "the cut-off upload left a tensor behind"
    for x in answer["tensors"]:
        assert gapi.request("DELETE", "/v1/tensors/%s" % x["id"]).status_code == 200


def test_one_gib_round_trip_target():
    """The transfer target: 1 GB/s each way through loopback for 1 GiB (medians of ROUND_TRIPS).
    On the H200: upload 1.41 (0dc0055) and 1.17 (9537dd7), download 1.37 and 1.36 GB/s;
    curl alone reaches 2.36 / 1.50 there (bench/loopback_ceiling.py)."""
    if not ROUND_TRIP_GBPS:
        pytest.skip("test_one_gib_round_trip did not run")
    up, down = ROUND_TRIP_GBPS["up"], ROUND_TRIP_GBPS["down"]
    assert up >= 1.0 and down >= 1.0, "target 1 GB/s: up %.2f, down %.2f GB/s" % (up, down)


def test_gpu_worker_restart_410(gapi):
    t = upload(gapi, np.zeros((B, H, S, D), np.float32).tobytes(), dtype="fp32", shape="%d,%d,%d,%d" % (B, H, S, D))
    r = gapi.run(params=dict(backend="math", device="cuda:0", batch=1, heads=1, seq=16, head_dim=16, fault="crash"))
    if r.status_code == 400 and "fault" in r.text:
        pytest.skip("the server was started without --enable-fault-injection")
    assert r.status_code == 500, r.text[:500]
    r = gapi.get("/v1/tensors/%s" % t["id"])
    assert r.status_code == 410 and error_of(r)["code"] == "gone"
    r = gapi.run(params=dict(backend="math", device="cuda:0", q=t["id"]))
    assert r.status_code == 410


def _head_only_upload(url, declared, query):
    """Send only the head of an upload (Content-Length declared, Expect: 100-continue) and read
    the answer: (status, error object or None, seconds to the answer, 100 Continue seen). The
    client never sends a body byte."""
    host, port = url.replace("http://", "").rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=30)
    try:
        head = ("POST /v1/tensors?%s HTTP/1.1\r\nHost: attnd\r\nContent-Length: %d\r\n"
                "Expect: 100-continue\r\n\r\n" % (query, declared)).encode()
        t0 = time.monotonic()
        s.sendall(head)
        buf = b""
        while b"\r\n\r\n" not in buf:
            b = s.recv(65536)
            if not b:
                break
            buf += b
        answer_s = time.monotonic() - t0
        top, _, rest = buf.partition(b"\r\n\r\n")
        status = int(top.split()[1]) if top else None
        if status == 100:
            return status, None, answer_s, True
        length = int(next((ln.split(b":")[1] for ln in top.split(b"\r\n") if ln.lower().startswith(b"content-length:")),
                          b"0"))
        while len(rest) < length:
            b = s.recv(65536)
            if not b:
                break
            rest += b
        return status, json.loads(rest[:length])["error"], answer_s, False
    finally:
        s.close()


def test_over_budget_upload_is_refused_before_its_bytes(gapi):
    """On a server of its own with memory_budget_bytes = 1 GiB: an upload to cuda:0 that
    declares 8 GiB is answered 507 from its headers alone, before the client sends a byte of
    its body (it waits for a 100 Continue that never comes); one that declares more than the
    GPU's whole memory is refused too; the front holds no memfd for either; and an upload
    within the budget is still taken."""
    budget = 1 << 30
    device = next(d for d in gapi.get("/v1/device").json()["devices"] if d["id"] == "cuda:0")
    srv = attnd_api_helpers.AttndServer(devices="all", extra=["--memory-budget-bytes", str(budget),
                                                              "--max-upload-bytes", str(1 << 40)]).start()
    try:
        with MemfdSampler(srv.proc.pid, interval_s=0.002) as front:
            status, err, answer_s, continued = _head_only_upload(srv.url, 8 << 30,
                                                                 "device=cuda:0&dtype=bf16&shape=%d" % (4 << 30))
            fact("over_budget_upload_answer_ms", round(answer_s * 1e3, 2))
            assert status == 507 and not continued, (status, err)
            assert err["code"] == "insufficient_storage" and "memory_budget_bytes=%d" % budget in err["message"], err
            assert answer_s < 1.0, "answered after %.3f s" % answer_s

            total = int(device["memory_total_bytes"])
            declared = (total + (1 << 30)) // 2 * 2
            status, err, answer_s, continued = _head_only_upload(srv.url, declared,
                                                                 "device=cuda:0&dtype=bf16&shape=%d" % (declared // 2))
            fact("over_device_memory_upload_answer_ms", round(answer_s * 1e3, 2))
            assert status == 507 and not continued, (status, err)
            assert "memory in all" in err["message"], err
            assert answer_s < 1.0
        assert front.peak_memfd == 0, "the front held %d bytes of refused uploads" % front.peak_memfd

        body = np.zeros((64 << 20) // 4, np.float32).tobytes()
        r = requests.post(srv.url + "/v1/tensors", data=body, timeout=120,
                          params={"device": "cuda:0", "dtype": "fp32", "shape": str(len(body) // 4)})
        assert r.status_code == 201, r.text[:500]
        assert requests.delete(srv.url + "/v1/tensors/%s" % r.json()["id"], timeout=60).status_code == 200
        srv.stop_checked()
    finally:
        srv.cleanup()
