"""Async runs on resident tensors (docs/tensors.md#runs-in-the-background):
`async=true` with q/k/v tensor ids and keep_output answers 202; the finished record names
the kept output, which downloads and matches a numpy attention. A run holds its inputs from
its POST to its end: DELETE of an input answers 409 `in_use` naming the runs while one is
queued or running, and works once they end. Cancelling a queued run releases what it held
(pins, budget reservation, the output's id); a worker restart ends queued and running runs
`failed` with the reason, and their tensors answer 410 as before."""
import io
import time

import numpy as np

from attnd_api_helpers import HTTP_TIMEOUT_S, Api, error_of, npy_bytes

B, H, S, D = 1, 2, 16, 8
JOB_TIMEOUT_S = 4  # the hanging run that keeps the queue busy is killed after this


# ---------------------------------------------------------------- helpers

def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def attention(q, k, v, causal=True):
    """Scaled dot-product attention in float64, numpy only: softmax(q·kᵀ/√D + mask)·v."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        sq, skv = s.shape[-2], s.shape[-1]
        s = np.where(np.triu(np.ones((sq, skv), bool), k=1), -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def upload_qkv(api, seed):
    arrays = {n: rand((B, H, S, D), seed + i) for i, n in enumerate("qkv")}
    ids = {}
    for n, a in arrays.items():
        r = api.post("/v1/tensors", params={"device": "cpu", "name": n}, data=npy_bytes(a), timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 201, r.text
        ids[n] = r.json()["id"]
    return arrays, ids


def run_params(ids, **over):
    p = dict(backend="reference", device="cpu", warmup=0, iters=1, q=ids["q"], k=ids["k"], v=ids["v"])
    p.update(over)
    return p


def submit(api, **params):
    r = api.run(params=dict(params, **{"async": "true"}))
    assert r.status_code == 202, r.text[:1000]
    body = r.json()
    assert body["status"] == "queued" and r.headers["Location"] == "/v1/runs/%d" % body["id"]
    return body


def record(api, run_id):
    r = api.get("/v1/runs/%d" % run_id)
    assert r.status_code == 200, r.text
    return r.json()


def wait_final(api, run_id, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = record(api, run_id)
        if rec["status"] in ("done", "failed", "cancelled"):
            return rec
        time.sleep(0.05)
    raise AssertionError("run %d not final within %d s: %s" % (run_id, timeout, rec))


def wait_status(api, run_id, status, timeout=10):
    deadline = time.monotonic() + timeout
    while record(api, run_id)["status"] != status:
        assert time.monotonic() < deadline, "run %d never became %s" % (run_id, status)
        time.sleep(0.02)


def delete(api, tid):
    return api.request("DELETE", "/v1/tensors/%s" % tid)


def download(api, tid):
    r = api.get("/v1/tensors/%s/data" % tid)
    assert r.status_code == 200, r.text[:500]
    return np.load(io.BytesIO(r.content))


def listed_ids(api):
    return [t["id"] for t in api.get("/v1/tensors").json()["tensors"]]


# A run that keeps the cpu worker busy for BUSY_MS without harming it (the stopping rule
# times forwards until max_time_ms), so the runs submitted next wait behind it. Its budget
# reservation: output, generated q, k, v (bf16) and the fp64 workspace, 2048 elements each.
# It is bounded by time, not forwards: its servers lift cpu_max_macs, which counts every
# forward a run may make (BUSY_FLAGS).
BUSY_MS = 3000
BUSY = dict(backend="reference", device="cpu", batch=1, heads=1, seq=64, head_dim=32, warmup=0,
            min_time_ms=BUSY_MS, max_time_ms=BUSY_MS, max_iters=100000)
BUSY_RESERVED = 2048 * (4 * 2 + 8)
BUSY_FLAGS = ["--cpu-max-macs", "0"]


def busy_queue(api):
    busy = submit(api, **BUSY)
    wait_status(api, busy["id"], "running")
    return busy


# ---------------------------------------------------------------- done

def test_async_keep_output_matches_numpy(api):
    arrays, ids = upload_qkv(api, 100)
    body = submit(api, **run_params(ids, keep_output="true", verify="true"))
    rec = wait_final(api, body["id"])
    assert rec["status"] == "done", rec
    out_id = rec["output"]["tensor"]
    assert rec["params"]["output_tensor"] == out_id and rec["params"]["keep_output"] is True
    assert rec["verify"]["pass"] is True

    out = download(api, out_id)
    assert out.shape == (B, H, S, D) and out.dtype == np.float32
    assert np.max(np.abs(out - attention(arrays["q"], arrays["k"], arrays["v"]))) < 1e-5
    meta = api.get("/v1/tensors/%s" % out_id).json()
    assert meta["name"] == "output of run %d" % body["id"] and meta["state"] == "resident"
    assert meta["fingerprint"] == rec["output"]["fingerprint"] and meta["shape"] == [B, H, S, D]
    assert out_id in listed_ids(api)

    # The run has ended: its inputs are free to delete, and so is the output.
    for tid in list(ids.values()) + [out_id]:
        r = delete(api, tid)
        assert r.status_code == 200 and r.json()["deleted"] == tid, r.text


def test_many_async_runs_share_inputs_and_release_them(api):
    """k and v the same tensor (two pins from one run), six runs at once: every pin taken is
    dropped, so the deletes afterwards succeed; every kept output is its own tensor."""
    arrays, ids = upload_qkv(api, 200)
    runs = [submit(api, **run_params(ids, v=ids["k"], keep_output="true", causal="false")) for _ in range(6)]
    want = attention(arrays["q"], arrays["k"], arrays["k"], causal=False)
    outs = set()
    for body in runs:
        rec = wait_final(api, body["id"])
        assert rec["status"] == "done", rec
        outs.add(rec["output"]["tensor"])
        assert np.max(np.abs(download(api, rec["output"]["tensor"]) - want)) < 1e-5
    assert len(outs) == 6
    for tid in [ids["q"], ids["k"], ids["v"]] + sorted(outs):
        assert delete(api, tid).status_code == 200, tid


def test_sync_run_still_keeps_output_and_releases_inputs(api):
    arrays, ids = upload_qkv(api, 300)
    r = api.run(params=run_params(ids, keep_output="true"))
    assert r.status_code == 200, r.text[:1000]
    rec = r.json()
    out = download(api, rec["output"]["tensor"])
    assert np.max(np.abs(out - attention(arrays["q"], arrays["k"], arrays["v"]))) < 1e-5
    for tid in list(ids.values()) + [rec["output"]["tensor"]]:
        assert delete(api, tid).status_code == 200


def test_async_refusals_before_queueing_store_nothing(api):
    _, ids = upload_qkv(api, 400)
    before = api.get("/v1/runs", params={"limit": 1000}).json()["runs"]
    r = api.run(params=dict(run_params(ids, q="t999999"), **{"async": "true"}))
    assert r.status_code == 404 and error_of(r)["field"] == "q", r.text
    r = api.run(params=dict(run_params(ids, batch=2), **{"async": "true"}))
    assert r.status_code == 422 and error_of(r)["field"] == "batch", r.text
    assert api.get("/v1/runs", params={"limit": 1000}).json()["runs"] == before
    for tid in ids.values():  # refused runs hold nothing
        assert delete(api, tid).status_code == 200


# ---------------------------------------------------------------- queued: delete, cancel

def test_queued_run_holds_its_inputs_until_cancelled(start_server):
    # Inputs 3 × 1 KiB; the queued run reserves its output (1 KiB) and the reference's fp64
    # workspace (2 KiB), the busy run BUSY_RESERVED: 512 bytes are left while both wait.
    budget = 3 * 1024 + BUSY_RESERVED + 3 * 1024 + 512
    api = Api(start_server(extra=["--memory-budget-bytes", str(budget), "--cpu-threads", "2"] + BUSY_FLAGS).url)
    _, ids = upload_qkv(api, 500)
    busy = busy_queue(api)
    body = submit(api, **run_params(ids, keep_output="true"))
    assert body["queue_position"] == 1
    queued = record(api, body["id"])
    assert queued["status"] == "queued"
    out_id = queued["params"]["output_tensor"]

    # DELETE of an input while the run waits: 409 in_use naming the run; nothing changes.
    for n in "qkv":
        r = delete(api, ids[n])
        assert r.status_code == 409, r.text
        err = error_of(r)
        assert err["code"] == "in_use" and err["field"] == "id"
        assert ids[n] in err["message"] and str(body["id"]) in err["message"], err
    assert api.get("/v1/tensors/%s" % ids["q"]).json()["state"] == "resident"
    # The output's id is reserved, not a tensor yet: 404, and not listed.
    r = api.get("/v1/tensors/%s" % out_id)
    assert r.status_code == 404 and "not finished" in error_of(r)["message"], r.text
    assert out_id not in listed_ids(api)
    # The run's budget reservation holds while it waits.
    r = api.post("/v1/tensors", params={"device": "cpu", "dtype": "fp32", "shape": "256"}, data=b"\0" * 1024)
    assert r.status_code == 507, r.text

    # Cancel: the run releases its pins, its reservation and its output's id. (Uploads and
    # deletes still go through the device's queue: these wait for the busy run to end.)
    r = api.request("DELETE", "/v1/runs/%d" % body["id"])
    assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    r = api.get("/v1/tensors/%s" % out_id)
    assert r.status_code == 404 and "not finished" not in error_of(r)["message"], r.text
    r = api.post("/v1/tensors", params={"device": "cpu", "dtype": "fp32", "shape": "256"}, data=b"\0" * 1024)
    assert r.status_code == 201, r.text
    assert delete(api, r.json()["id"]).status_code == 200
    for tid in ids.values():
        r = delete(api, tid)
        assert r.status_code == 200 and r.json()["deleted"] == tid, r.text
    assert record(api, busy["id"])["status"] == "done"
    assert record(api, body["id"])["status"] == "cancelled"


# ---------------------------------------------------------------- worker restarts

def test_worker_restart_fails_running_and_queued_tensor_runs(start_server):
    """A run on resident tensors that hangs is killed (job_timeout_s); the worker restarts
    and its tensors are gone. The hanging run ends failed (timeout); the one queued behind it
    reaches the new worker and ends failed with code gone (what a synchronous run answers
    410); both release their pins and their outputs' ids."""
    api = Api(start_server(extra=["--enable-fault-injection", "true", "--job-timeout-s", str(JOB_TIMEOUT_S),
                                  "--cpu-threads", "2"]).url)
    _, ids = upload_qkv(api, 600)
    hang = submit(api, **run_params(ids, fault="hang", keep_output="true"))
    wait_status(api, hang["id"], "running")
    queued = submit(api, **run_params(ids, keep_output="true"))
    r = delete(api, ids["v"])
    assert r.status_code == 409 and error_of(r)["code"] == "in_use", r.text
    msg = error_of(r)["message"]
    assert str(hang["id"]) in msg and str(queued["id"]) in msg, msg

    rec = wait_final(api, hang["id"], timeout=30)
    assert rec["status"] == "failed" and rec["error"]["code"] == "timeout", rec
    rec2 = wait_final(api, queued["id"], timeout=30)
    assert rec2["status"] == "failed" and rec2["error"]["code"] == "gone", rec2
    assert ids["q"] in rec2["error"]["message"] and "restarted" in rec2["error"]["message"], rec2
    for out_id in (rec["params"]["output_tensor"], rec2["params"]["output_tensor"]):
        assert api.get("/v1/tensors/%s" % out_id).status_code == 404

    # The tensors are gone with the worker (410, once), then forgotten (404).
    for tid in ids.values():
        r = delete(api, tid)
        assert r.status_code == 410 and error_of(r)["code"] == "gone", r.text
        assert api.get("/v1/tensors/%s" % tid).status_code == 404
    # The new worker takes uploads and async runs again.
    arrays, ids2 = upload_qkv(api, 700)
    rec = wait_final(api, submit(api, **run_params(ids2, keep_output="true"))["id"])
    assert rec["status"] == "done", rec
    out = download(api, rec["output"]["tensor"])
    assert np.max(np.abs(out - attention(arrays["q"], arrays["k"], arrays["v"]))) < 1e-5
