"""Large uploads are copied while they arrive (docs/tensors.md, "Large uploads are copied while
they arrive"): the worker copies each 32 MiB that landed, the put only the rest, and what it
stores is what was sent. On the cpu device a file of several tensors is staged (one tensor is
kept in its pages instead), so the whole path runs here without a GPU."""
import re
import time

import numpy as np

from attnd_api_helpers import Api, load_gen, safetensors_bytes, slow_upload

STEP = 32 << 20


def _files(seed, mib):
    """A safetensors file of three tensors, about mib MiB in all, and the arrays."""
    rng = np.random.default_rng(seed)
    n = (mib << 20) // 2 // 4
    arrays = {"a": rng.standard_normal(n, dtype=np.float32),
              "b": rng.standard_normal(n - 3, dtype=np.float32),  # spans that end mid-word and mid-page
              "c": rng.integers(-1000, 1000, size=7, dtype=np.int32)}
    return safetensors_bytes([(k, "F32" if v.dtype == np.float32 else "I32", v) for k, v in arrays.items()]), arrays


def test_large_upload_is_staged_and_stored_intact(start_server):
    gen = load_gen()
    srv = start_server(extra=["--log-level", "info"])
    api = Api(srv.url)
    body, arrays = _files(91, 112)
    status, answer = slow_upload(srv.url, body, "cpu", 8 << 20, 0.05)
    assert status == 201, answer
    timing = answer["timing"]
    # most of the body was copied before it was whole, in steps of the landed bytes
    assert timing["staged_bytes"] >= 2 * STEP, timing
    assert timing["staged_bytes"] < len(body) and timing["staged_s"] > 0, timing
    got = {t["name"]: t for t in answer["tensors"]}
    assert set(got) == set(arrays)
    for name, a in arrays.items():
        assert got[name]["fingerprint"] == gen.fingerprint_hex(a), name  # summed in pieces = the whole
        r = api.get("/v1/tensors/%s/data" % got[name]["id"], params={"format": "raw"})
        assert r.status_code == 200 and r.content == a.tobytes(), name
    srv.stop_checked()
    logged = re.search(r"uploaded to cpu, %d bytes: received in [0-9.]+ s \([0-9.]+ GB/s; ([0-9]+) bytes copied meanwhile"
                       % len(body), srv.stderr_text())
    assert logged and int(logged.group(1)) == timing["staged_bytes"], srv.stderr_text()[-2000:]


def test_small_or_single_uploads_are_not_staged(start_server):
    """Under 64 MiB the worker copies at the end; one tensor for the cpu device is kept in its
    pages, never copied, so it is not staged either."""
    srv = start_server()
    api = Api(srv.url)
    small, _ = _files(92, 16)
    r = api.post("/v1/tensors", params={"device": "cpu"}, data=small)
    assert r.status_code == 201 and r.json()["timing"]["staged_bytes"] == 0, r.text[:300]
    one = np.arange(20 << 20, dtype=np.float32)  # 80 MiB, one tensor
    status, answer = slow_upload(srv.url, safetensors_bytes([("x", "F32", one)]), "cpu", 8 << 20, 0.02)
    assert status == 201 and answer["timing"]["staged_bytes"] == 0, answer


def test_an_upload_cut_off_after_staging_is_dropped_on_the_worker(start_server):
    """The client goes away after 96 MiB were staged: the worker drops its staged copy, the
    tensor table holds nothing of it, and the same file uploads whole afterwards."""
    srv = start_server(extra=["--log-level", "info"])
    api = Api(srv.url)
    body, arrays = _files(93, 128)
    assert slow_upload(srv.url, body, "cpu", 8 << 20, 0.05, stop_after=96 << 20) is None
    deadline = time.time() + 30
    while "staged upload stage-" not in srv.stderr_text() and time.time() < deadline:
        time.sleep(0.1)
    log = srv.stderr_text()
    assert "staged upload stage-" in log and "dropped after" in log, log[-3000:]
    assert api.get("/v1/tensors").json()["tensors"] == []
    status, answer = slow_upload(srv.url, body, "cpu", 16 << 20, 0.01)
    assert status == 201, answer
    assert sorted(t["name"] for t in answer["tensors"]) == sorted(arrays)
