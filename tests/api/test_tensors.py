"""Resident tensors on the cpu device (docs/tensors.md): upload in the three formats, run
`reference` on uploaded q/k/v and compare with numpy, keep and download the output, round
trips bit for bit, fingerprints, and the refusals (400, 404, 410, 422, 507)."""
import io
import struct
import threading

import numpy as np
import pytest
import requests

from attnd_api_helpers import (HTTP_TIMEOUT_S, RUN_TIMEOUT_S, Api, child_pids, error_of, load_gen, npy_bytes,
                               safetensors_bytes, tiny)

B, H, S, D = 1, 2, 16, 8


# ---------------------------------------------------------------- helpers

def bf16_bits(x):
    return load_gen().round_bf16_bits(np.asarray(x, dtype=np.float32))


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def upload(api, body, **params):
    r = api.post("/v1/tensors", params=params, data=body, timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 201, "upload %r: %d %s" % (params, r.status_code, r.text[:1000])
    return r.json()


def download(api, tid, fmt=None):
    r = api.get("/v1/tensors/%s/data" % tid, params={"format": fmt} if fmt else None)
    assert r.status_code == 200, r.text[:500]
    return r.content


def tensor_count(api):
    r = api.get("/v1/tensors")
    assert r.status_code == 200
    return len(r.json()["tensors"])


def run_params(**over):
    p = dict(backend="reference", device="cpu", warmup=0, iters=1)
    p.update(over)
    return p


# ---------------------------------------------------------------- uploads and runs

def test_npy_fp32_run_matches_numpy_and_output_downloads(api):
    gen = load_gen()
    q, k, v = rand((B, H, S, D), 1), rand((B, H, S, D), 2), rand((B, H, S, D), 3)
    ids = {n: upload(api, npy_bytes(a), name=n, device="cpu") for n, a in (("q", q), ("k", k), ("v", v))}
    for n, a in (("q", q), ("k", k), ("v", v)):
        t = ids[n]
        assert t["name"] == n and t["shape"] == [B, H, S, D] and t["dtype"] == "fp32" and t["device"] == "cpu"
        assert t["bytes"] == a.nbytes
        assert t["fingerprint"] == gen.fingerprint_hex(a.tobytes())
    r = api.run(params=run_params(q=ids["q"]["id"], k=ids["k"]["id"], v=ids["v"]["id"], keep_output="true",
                                  verify="true"))
    assert r.status_code == 200, r.text[:2000]
    rec = r.json()
    assert rec["status"] == "done", rec
    assert rec["params"]["batch"] == B and rec["params"]["seq_q"] == S and rec["params"]["dtype"] == "fp32"
    assert rec["verify"]["pass"] is True
    out_id = rec["output"]["tensor"]
    data = download(api, out_id)
    out = np.load(io.BytesIO(data))
    assert out.shape == (B, H, S, D) and out.dtype == np.float32
    ref = gen.reference_attention(q, k, v, mask="causal")
    assert np.max(np.abs(out.astype(np.float64) - ref)) < 1e-5
    raw = download(api, out_id, "raw")
    assert raw == out.tobytes()
    assert rec["output"]["fingerprint"] == gen.fingerprint_hex(raw)
    meta = api.get("/v1/tensors/%s" % out_id).json()
    assert meta["shape"] == [B, H, S, D] and meta["fingerprint"] == rec["output"]["fingerprint"]


def test_safetensors_bf16_run_matches_numpy(api):
    gen = load_gen()
    arrays = {n: bf16_bits(rand((B, H, S, D), 10 + i)) for i, n in enumerate("qkv")}
    body = safetensors_bytes([("attn.q", "BF16", arrays["q"]), ("attn.k", "BF16", arrays["k"]),
                              ("attn.v", "BF16", arrays["v"])])
    r = api.post("/v1/tensors", params={"device": "cpu"}, data=body, timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 201, r.text
    got = {t["name"]: t for t in r.json()["tensors"]}
    assert set(got) == {"attn.q", "attn.k", "attn.v"}
    for n in "qkv":
        t = got["attn." + n]
        assert t["dtype"] == "bf16" and t["shape"] == [B, H, S, D]
        assert t["fingerprint"] == gen.fingerprint_hex(arrays[n].tobytes())
        assert download(api, t["id"], "raw") == arrays[n].tobytes()
    rec = api.run_ok(**run_params(q=got["attn.q"]["id"], k=got["attn.k"]["id"], v=got["attn.v"]["id"],
                                  causal="false", keep_output="true"))
    out = np.load(io.BytesIO(download(api, rec["output"]["tensor"])))
    assert out.dtype == np.dtype("<u2")
    ref = gen.reference_attention(arrays["q"], arrays["k"], arrays["v"], mask="none")
    cmp = gen.compare(out, ref, "bf16")
    assert cmp["pass"], cmp


def test_raw_fp16_run_and_mixed_with_generated(api):
    gen = load_gen()
    q = rand((B, H, S, D), 20).astype(np.float16)
    t = upload(api, q.tobytes(), dtype="fp16", shape="%d,%d,%d,%d" % q.shape, name="q16", device="cpu")
    assert t["dtype"] == "fp16" and t["shape"] == list(q.shape) and t["name"] == "q16"
    # q resident, k and v generated from the seed: shapes follow q.
    rec = api.run_ok(**run_params(q=t["id"], seed=7, keep_output="true"))
    _, k, v = gen.inputs(7, B, H, S, S, D, "fp16")
    out = np.load(io.BytesIO(download(api, rec["output"]["tensor"])))
    cmp = gen.compare(out, gen.reference_attention(q, k, v, mask="causal"), "fp16")
    assert cmp["pass"], cmp


@pytest.mark.parametrize("kind", ["raw_bf16", "npy_u2_bf16", "npy_v2_bf16", "npy_fp16", "npy_fp32", "npy_v2", "npy_v3"])
def test_round_trip_bit_for_bit(api, kind):
    gen = load_gen()
    shape = (2, 3, 5)
    x = rand(shape, 30)
    if kind == "raw_bf16":
        a = bf16_bits(x)
        t = upload(api, a.tobytes(), dtype="bf16", shape="2,3,5", device="cpu")
    elif kind == "npy_u2_bf16":
        a = bf16_bits(x)
        t = upload(api, npy_bytes(a), dtype="bf16", device="cpu")
    elif kind == "npy_v2_bf16":
        a = bf16_bits(x)
        t = upload(api, npy_bytes(a.view("V2")), dtype="bf16", device="cpu")
    elif kind == "npy_fp16":
        a = x.astype(np.float16)
        t = upload(api, npy_bytes(a), device="cpu")
    else:
        a = x
        body = npy_bytes(a)
        if kind in ("npy_v2", "npy_v3"):  # the same header in format 2.0 / 3.0 (4-byte length)
            hl = struct.unpack("<H", body[8:10])[0]
            header = body[10:10 + hl]
            body = b"\x93NUMPY" + bytes([2 if kind == "npy_v2" else 3, 0]) + struct.pack("<I", hl) + header + body[10 + hl:]
        t = upload(api, body, device="cpu")
    assert t["shape"] == list(shape)
    assert t["fingerprint"] == gen.fingerprint_hex(a.tobytes())
    assert download(api, t["id"], "raw") == a.tobytes()
    back = np.load(io.BytesIO(download(api, t["id"])))
    assert back.tobytes() == a.tobytes() and back.shape == shape


def test_safetensors_mixed_dtypes_names_kept(api):
    a32, a16, abf = rand((4,), 40), rand((2, 2), 41).astype(np.float16), bf16_bits(rand((3, 1), 42))
    r = api.post("/v1/tensors", params={"device": "cpu"},
                 data=safetensors_bytes([("x.f32", "F32", a32), ("y/f16", "F16", a16), ("z", "BF16", abf)]))
    assert r.status_code == 201, r.text
    by = {t["name"]: t for t in r.json()["tensors"]}
    assert by["x.f32"]["dtype"] == "fp32" and by["y/f16"]["dtype"] == "fp16" and by["z"]["dtype"] == "bf16"
    assert download(api, by["y/f16"]["id"], "raw") == a16.tobytes()


def test_list_get_delete_404(api):
    t = upload(api, np.zeros(4, np.float32).tobytes(), dtype="fp32", shape="4", device="cpu")
    listed = api.get("/v1/tensors").json()["tensors"]
    assert any(x["id"] == t["id"] and x["state"] == "resident" for x in listed)
    assert api.get("/v1/tensors/%s" % t["id"]).json()["bytes"] == 16
    r = api.request("DELETE", "/v1/tensors/%s" % t["id"])
    assert r.status_code == 200 and r.json()["deleted"] == t["id"]
    for path in ("/v1/tensors/%s" % t["id"], "/v1/tensors/%s" % t["id"] + "/data", "/v1/tensors/t999999"):
        r = api.get(path)
        assert r.status_code == 404 and error_of(r)["code"] == "not_found"
    assert api.request("DELETE", "/v1/tensors/%s" % t["id"]).status_code == 404
    r = api.run(params=run_params(q="t999999"))
    assert r.status_code == 404 and error_of(r)["field"] == "q"
    assert api.get("/v1/tensors/nosuch").status_code == 404
    r = api.run(params=run_params(q="nosuch"))
    assert r.status_code == 400 and error_of(r)["field"] == "q"


def download_meets_delete(url, tid):
    """A download and a DELETE of tid sent at the same moment, each on its own connection:
    (the download's answer, the DELETE's status)."""
    answers, start = {}, threading.Barrier(2)

    def send(what, method, path):
        with requests.Session() as s:
            start.wait()
            answers[what] = s.request(method, url + path, timeout=HTTP_TIMEOUT_S)

    threads = [threading.Thread(target=send, args=("download", "GET", "/v1/tensors/%s/data?format=raw" % tid)),
               threading.Thread(target=send, args=("delete", "DELETE", "/v1/tensors/%s" % tid))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers["download"], answers["delete"].status_code


@pytest.mark.parametrize("floats, rounds", [(4, 150), ((9 << 20) // 4, 8)], ids=["small", "streamed"])
def test_download_meeting_a_delete_is_its_bytes_or_404(api, floats, rounds):
    """Whichever reaches the worker first, the download answers the bytes or 404 not_found,
    never 410 gone, which says the worker restarted."""
    for i in range(rounds):
        a = np.full(floats, i, np.float32)
        tid = upload(api, a.tobytes(), dtype="fp32", shape=str(floats), device="cpu")["id"]
        got, deleted = download_meets_delete(api.url, tid)
        assert deleted == 200
        if got.status_code == 200:
            assert got.content == a.tobytes()
        else:
            assert got.status_code == 404 and error_of(got)["code"] == "not_found", got.text[:300]


# ---------------------------------------------------------------- refusals

def test_mismatches_are_422_naming_tensors(api):
    q = upload(api, npy_bytes(rand((B, H, S, D), 50)), device="cpu")["id"]
    k16 = upload(api, npy_bytes(rand((B, H, S, D), 51).astype(np.float16)), device="cpu")["id"]
    v_short = upload(api, npy_bytes(rand((B, H, S - 1, D), 52)), device="cpu")["id"]
    k = upload(api, npy_bytes(rand((B, H, S, D), 53)), device="cpu")["id"]
    flat = upload(api, npy_bytes(rand((S, D), 54)), device="cpu")["id"]

    r = api.run(params=run_params(q=q, k=k16, v=k))
    assert r.status_code == 422 and str(q) in error_of(r)["message"] and str(k16) in error_of(r)["message"]
    r = api.run(params=run_params(q=q, k=k, v=v_short))
    assert r.status_code == 422 and str(v_short) in error_of(r)["message"]
    r = api.run(params=run_params(q=flat))
    assert r.status_code == 422 and str(flat) in error_of(r)["message"]
    r = api.run(params=run_params(q=q, k=k, v=k, batch=2))  # disagrees with the tensors
    assert r.status_code == 422 and error_of(r)["field"] == "batch"
    r = api.run(params=run_params(q=q, k=k, v=k, dtype="bf16"))
    assert r.status_code == 422 and error_of(r)["field"] == "dtype"
    api.run_ok(**run_params(q=q, k=k, v=k, batch=B, heads=H, seq=S, head_dim=D, dtype="fp32"))  # agree: fine


BAD_NPY_HEADER = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"


def npy_with(header, data=b"\0" * 8, version=1):
    h = header + b" " * (-(len(header) + 11) % 64) + b"\n"
    ln = struct.pack("<H", len(h)) if version == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes([version, 0]) + ln + h + data


BAD_BODIES = {
    "npy_bad_version": (b"\x93NUMPY\x07\x00" + b"\0" * 40, {"format": "npy"}),
    "npy_truncated": (b"\x93NUMPY\x01", {"format": "npy"}),
    "npy_len_past_body": (b"\x93NUMPY\x01\x00\xff\x7f{'descr'", {}),
    "npy_fortran": (npy_with(BAD_NPY_HEADER.replace(b"False", b"True")), {}),
    "npy_big_endian": (npy_with(BAD_NPY_HEADER.replace(b"<f4", b">f4")), {}),
    "npy_unknown_dtype": (npy_with(BAD_NPY_HEADER.replace(b"<f4", b"<f8"), b"\0" * 16), {}),
    "npy_size_disagrees": (npy_with(BAD_NPY_HEADER, b"\0" * 12), {}),
    "npy_garbage_dict": (npy_with(b"{'descr': <f4 ]"), {}),
    "npy_overflow": (npy_with(BAD_NPY_HEADER.replace(b"(2,)", b"(4294967296, 4294967296, 4294967296)")), {}),
    "npy_u2_without_bf16": (npy_with(BAD_NPY_HEADER.replace(b"<f4", b"<u2"), b"\0" * 4), {}),
    "st_dup_names": (struct.pack("<Q", 0) + b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                     b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}' + b"\0" * 8, "fix_len"),
    "st_unknown_dtype": (struct.pack("<Q", 0) + b'{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}' + b"\0" * 8,
                         "fix_len"),
    "st_len_past_body": (struct.pack("<Q", 1 << 20) + b"{}", {}),
    "st_not_json": (struct.pack("<Q", 5) + b"{nope" + b"\0" * 4, {}),
    "st_size_disagrees": (struct.pack("<Q", 0) + b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}' + b"\0" * 4,
                          "fix_len"),
    "st_trailing_bytes": (struct.pack("<Q", 0) + b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' + b"\0" * 8,
                          "fix_len"),
    "st_huge_shape": (struct.pack("<Q", 0) + b'{"a":{"dtype":"F32","shape":[1e300],"data_offsets":[0,4]}}' + b"\0" * 4,
                      "fix_len"),
    "raw_size_disagrees": (b"\0" * 10, {"dtype": "fp32", "shape": "2,2"}),
    "raw_bad_dtype": (b"\0" * 8, {"dtype": "int8", "shape": "8"}),
    "raw_bad_shape": (b"\0" * 8, {"dtype": "fp32", "shape": "2,x"}),
    "raw_overflow": (b"\0" * 8, {"dtype": "fp32", "shape": "1099511627776,1099511627776,1099511627776"}),
    "bad_format": (b"\0" * 8, {"format": "pickle"}),
}


def _fix_len(body):
    """Set the safetensors header length to the JSON's length (the JSON ends at the last '}')."""
    j = body[8:]
    end = j.rindex(b"}") + 1
    return struct.pack("<Q", end) + j


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_bad_uploads_are_400_and_store_nothing(api, case):
    body, params = BAD_BODIES[case]
    if params == "fix_len":
        body, params = _fix_len(body), {}
    before = tensor_count(api)
    r = api.post("/v1/tensors", params=dict(params, device="cpu"), data=body, timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 400, "%s: %d %s" % (case, r.status_code, r.text[:500])
    assert error_of(r)["message"]
    assert tensor_count(api) == before


def test_empty_upload_is_400(api):
    r = api.post("/v1/tensors", params={"device": "cpu"}, data=b"", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 400


# ---------------------------------------------------------------- budget and restarts

def test_budget_507(start_server):
    from attnd_api_helpers import Api
    srv = start_server(extra=["--memory-budget-bytes", "4096", "--cpu-threads", "2"])
    api = Api(srv.url)
    a = upload(api, b"\0" * 3000, dtype="fp32", shape="750", device="cpu")
    r = api.post("/v1/tensors", params={"dtype": "fp32", "shape": "500", "device": "cpu"}, data=b"\0" * 2000)
    assert r.status_code == 507, r.text
    assert "1096" in error_of(r)["message"]  # says how much is free
    assert tensor_count(api) == 1
    r = api.run(params=tiny(seq=64, head_dim=16))  # 4 × 4 KiB of inputs and output
    assert r.status_code == 507 and "free" in error_of(r)["message"]
    assert api.request("DELETE", "/v1/tensors/%s" % a["id"]).status_code == 200
    upload(api, b"\0" * 2000, dtype="fp32", shape="500", device="cpu")


def test_worker_restart_410(start_server):
    from attnd_api_helpers import Api
    srv = start_server(extra=["--enable-fault-injection", "true", "--cpu-threads", "2"])
    api = Api(srv.url)
    q = upload(api, npy_bytes(rand((B, H, S, D), 60)), device="cpu")["id"]
    api.run_ok(**run_params(q=q))
    r = api.run(params=tiny(fault="crash"), timeout=RUN_TIMEOUT_S)
    assert r.status_code == 500
    for method, path in (("GET", "/v1/tensors/%s" % q), ("GET", "/v1/tensors/%s/data" % q)):
        r = api.request(method, path)
        assert r.status_code == 410 and error_of(r)["code"] == "gone", r.text
    r = api.run(params=run_params(q=q))
    assert r.status_code == 410 and error_of(r)["field"] == "q"
    assert [t["state"] for t in api.get("/v1/tensors").json()["tensors"]] == ["gone"]
    assert api.request("DELETE", "/v1/tensors/%s" % q).status_code == 410
    assert api.get("/v1/tensors/%s" % q).status_code == 404
    # The new worker takes uploads again.
    q2 = upload(api, npy_bytes(rand((B, H, S, D), 61)), device="cpu")["id"]
    api.run_ok(**run_params(q=q2))


def test_server_restart_410(start_server, tmp_path):
    """Resident tensors die with the server; their ids do not come back as other tensors:
    after a restart on the same data dir they answer 410 until deleted, then 404, and new
    uploads get new ids."""
    from attnd_api_helpers import Api
    data = str(tmp_path)  # the fixture wants an existing directory
    srv = start_server(extra=["--cpu-threads", "2"], data_dir=data)
    api = Api(srv.url)
    q = upload(api, npy_bytes(rand((B, H, S, D), 62)), device="cpu")["id"]
    srv.stop_checked()

    srv2 = start_server(extra=["--cpu-threads", "2"], data_dir=data)
    api2 = Api(srv2.url)
    r = api2.get("/v1/tensors/%s" % q)
    assert r.status_code == 410 and error_of(r)["code"] == "gone", r.text
    assert "restart" in error_of(r)["message"], r.text
    r = api2.run(params=run_params(q=q))
    assert r.status_code == 410 and error_of(r)["field"] == "q", r.text
    q2 = upload(api2, npy_bytes(rand((B, H, S, D), 63)), device="cpu")["id"]
    assert q2 != q
    assert api2.request("DELETE", "/v1/tensors/%s" % q).status_code == 410
    assert api2.get("/v1/tensors/%s" % q).status_code == 404
    assert api2.get("/v1/tensors/%s" % q2).status_code == 200
    srv2.stop_checked()


def test_upload_larger_than_max_body_bytes_streams(api):
    """The upload route streams into a memfd: max_body_bytes (1 MiB by default) does not
    apply, and the bytes come back intact."""
    gen = load_gen()
    a = np.arange(3 << 18, dtype=np.float32)  # 3 MiB
    t = upload(api, a.tobytes(), dtype="fp32", shape=str(a.size), device="cpu")
    assert t["bytes"] == a.nbytes and t["fingerprint"] == gen.fingerprint_hex(a.tobytes())
    assert download(api, t["id"], "raw") == a.tobytes()
    assert api.request("DELETE", "/v1/tensors/%s" % t["id"]).status_code == 200


# ---------------------------------------------------------------- timing

TIMING_KEYS = {"receive_s", "queue_s", "copy_s", "fingerprint_s", "total_s", "staged_bytes", "staged_s"}


def check_timing(timing):
    assert set(timing) == TIMING_KEYS, timing
    assert all(isinstance(v, (int, float)) and v >= 0 for v in timing.values()), timing
    parts = timing["receive_s"] + timing["queue_s"] + timing["copy_s"] + timing["fingerprint_s"]
    assert parts <= timing["total_s"] + 1e-6, timing  # the phases are disjoint parts of the whole


def test_upload_answer_has_timing_and_the_log_has_both_lines(start_server):
    """The upload's answer says where its time went ("timing", docs/tensors.md), a download's
    Server-Timing header its phases before the first byte; the front logs one line per upload
    and per download at info level, the download's once it is sent."""
    srv = start_server(extra=["--log-level", "info", "--cpu-threads", "2"])
    api = Api(srv.url)
    a = np.arange(1 << 20, dtype=np.float32)  # 4 MiB: several pieces of the body
    t = upload(api, a.tobytes(), dtype="fp32", shape=str(a.size), device="cpu")
    check_timing(t["timing"])
    assert t["timing"]["total_s"] > 0 and t["timing"]["copy_s"] > 0
    assert "timing" not in api.get("/v1/tensors/%s" % t["id"]).json()  # only the upload's answer
    assert all("timing" not in x for x in api.get("/v1/tensors").json()["tensors"])
    r = api.post("/v1/tensors", params={"device": "cpu"},
                 data=safetensors_bytes([("a", "F32", rand((4,), 70)), ("b", "F16", rand((2,), 71).astype(np.float16))]))
    assert r.status_code == 201, r.text
    body = r.json()
    check_timing(body["timing"])  # one for the whole file, beside the list
    assert all("timing" not in x for x in body["tensors"])
    r = api.get("/v1/tensors/%s/data" % t["id"], params={"format": "raw"})
    assert r.status_code == 200 and r.content == a.tobytes()
    st = dict(part.strip().split(";dur=") for part in r.headers["Server-Timing"].split(","))
    assert set(st) == {"queue", "fill"} and all(float(v) >= 0 for v in st.values()), r.headers["Server-Timing"]
    srv.stop_checked()  # flushes the log: the download's line is written once its last byte left
    log = srv.stderr_text()
    assert "tensors: %s uploaded to cpu, %d bytes: received in" % (t["id"], a.nbytes) in log, log[-2000:]
    assert "tensors: %s downloaded (raw) from cpu: queued" % t["id"] in log, log[-2000:]
    assert "sent %d bytes in" % a.nbytes in log, log[-2000:]


def _worker_upload_mappings(srv):
    """{mapping size in bytes: count} of the cpu worker's mappings of upload memfds."""
    sizes = {}
    for pid in child_pids(srv.proc.pid):
        try:
            with open("/proc/%d/maps" % pid) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            if "/memfd:attnd-upload" in line:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                sizes[hi - lo] = sizes.get(hi - lo, 0) + 1
    return sizes


def test_cpu_upload_of_one_tensor_is_kept_in_its_pages(start_server):
    """A one-tensor upload to the cpu device is not copied: the worker keeps a private mapping of
    the upload's memfd as the tensor (docs/tensors.md), gone with the tensor. A file of several
    tensors is copied as before. The bytes and the runs on them are the same either way."""
    srv = start_server()
    api = Api(srv.url)
    a = rand((B, H, 4096, D), 80)  # 256 KiB: 64 pages
    raw = upload(api, a.tobytes(), dtype="fp32", shape="%d,%d,%d,%d" % a.shape, device="cpu")
    npy = upload(api, npy_bytes(a), device="cpu")
    held = _worker_upload_mappings(srv)
    assert held.get(a.nbytes) == 1, held                 # raw: the body is the tensor, page-aligned
    assert held.get(a.nbytes + 4096) == 1, held          # npy: the header's page too
    assert download(api, raw["id"], "raw") == a.tobytes() and download(api, npy["id"], "raw") == a.tobytes()
    r = api.run(params=run_params(q=raw["id"], k=npy["id"], v=raw["id"]))
    assert r.status_code == 200, r.text[:500]

    one = upload(api, safetensors_bytes([("x", "F32", a)]), device="cpu")["tensors"][0]
    assert sum(_worker_upload_mappings(srv).values()) == 3, "a safetensors file of one tensor is kept too"
    assert download(api, one["id"], "raw") == a.tobytes()
    two = upload(api, safetensors_bytes([("x", "F32", a), ("y", "F32", a)]), device="cpu")
    assert sum(_worker_upload_mappings(srv).values()) == 3, "several tensors in one file are copied"
    for t in [raw, npy, one] + two["tensors"]:
        assert api.request("DELETE", "/v1/tensors/%s" % t["id"]).status_code == 200
    assert _worker_upload_mappings(srv) == {}, "a deleted tensor's pages are let go"
