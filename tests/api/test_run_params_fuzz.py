"""Seeded random run parameters against the real binary on the cpu device: every answer is a
record of the Run schema, the one GET /v1/runs/ID then gives back, or a refusal of the Error
schema with its field; none is a 5xx, and the server stays up. The first test draws the
parameters of a generated problem (serving layouts, models, masks, windows, wild values); the
second brings resident tensors: block tables and lengths of random entries, q and k of right
and wrong shapes. ATTND_FUZZ_SEED draws another sequence; a failure prints the parameters that
caused it."""
import collections
import json
import os
import random
import time

import numpy as np
import pytest

from attnd_api_helpers import Api, check_against_openapi, error_of, upload_raw

SEED = int(os.environ.get("ATTND_FUZZ_SEED", "7"))
# a background run may fail as its problem is refused (the worker's checks of the data it
# holds, the device's size), never with what a synchronous run would answer 5xx for
FAULTS = {"internal", "run_failed", "worker_crashed", "timeout", "tensor_op_failed", "store_error"}


def wild(rnd):
    return rnd.choice([0, -1, 2**31 - 1, 2**31, 2**63, "x", 1.5, None, True, [], {}, "", " 4", "1e3"])


def lengths(rnd, batch):
    roll = rnd.random()
    if roll < 0.5:
        n = batch if rnd.random() < 0.9 else batch + rnd.choice([-1, 1])
        return [rnd.choice([0, 1, 2, 3, 5, 16, 17, 40]) for _ in range(n)]
    if roll < 0.85:
        return {"dist": rnd.choice(["uniform", "uniform", "x"]), "min": rnd.choice([0, 1, 4, 16]),
                "max": rnd.choice([0, 1, 8, 33, 64])}
    return wild(rnd)


def generated_problem(rnd):
    batch = rnd.choice([1, 2, 3, 4, 5, 7, 8, 16, 17, 33])
    p = {"backend": rnd.choice(["reference"] * 8 + ["naive", "math", "flash", "bogus"]),
         "device": rnd.choice(["cpu"] * 9 + ["cuda:0"]), "batch": batch,
         "heads": rnd.choice([1, 2, 4, 8]), "seq_q": rnd.choice([1, 2, 3, 5, 8, 17]),
         "seq_kv": rnd.choice([1, 2, 3, 5, 8, 17, 64, 130]),
         "head_dim": rnd.choice([3, 8, 16, 32, 64, 96, 128, 192, 256]),
         "iters": 1, "warmup": 0, "profile": False}
    optional = [
        (0.4, "kv_heads", lambda: rnd.choice([1, 2, 3, 4])),
        (0.2, "head_dim_v", lambda: rnd.choice([1, 8, 64, 128, 129])),
        (0.3, "mask", lambda: rnd.choice(["none", "causal", "causal_bottom_right", "bad"])),
        (0.2, "window", lambda: rnd.choice([0, 1, 2, 5, 1000])),
        (0.3, "page_size", lambda: rnd.choice([0, 1, 2, 3, 16, 64, 256, 2**20 + 1])),
        (0.15, "num_pages", lambda: rnd.choice([1, 2, 5, 100, 2**31 - 1])),
        (0.3, "seqlens_q", lambda: lengths(rnd, batch)),
        (0.3, "seqlens_kv", lambda: lengths(rnd, batch)),
        (0.2, "dtype", lambda: rnd.choice(["bf16", "fp16", "fp32", "fp8"])),
        (0.2, "scale", lambda: rnd.choice([0, 1e-3, 1, 1e4, 1e5, -1, "nan"])),
        (0.1, "verify", lambda: True),
        (0.1, "keep_output", lambda: True),
        (0.1, "model", lambda: rnd.choice(["llama-3.1-8b", "mistral-7b-v0.1", "gemma-2-9b-local", "bogus"])),
        (0.1, "impl", lambda: rnd.choice(["splitkv", "tma", "w4", "x"])),
    ]
    for chance, name, value in optional:
        if rnd.random() < chance:
            p[name] = value()
    if rnd.random() < 0.05:
        p[rnd.choice(sorted(p))] = wild(rnd)
    return p


def check_answer(api, r, params, background):
    """The answer's shape, whatever the parameters; a done run's record is what the history
    keeps; background runs are collected for later. Returns the status."""
    where = "params %s answered %d: %s" % (json.dumps(params), r.status_code, r.text[:600])
    # 503 no_device: a GPU variant or device asked of this GPU-less server
    assert r.status_code < 500 or (r.status_code == 503 and error_of(r)["code"] == "no_device"), where
    if r.status_code >= 400:
        check_against_openapi(r.json(), "Error")
        error_of(r)
    elif r.status_code == 202:
        background.append((r.json()["id"], params))
    else:
        assert r.status_code == 200, where
        rec = r.json()
        check_against_openapi(rec, "Run")
        assert rec["status"] == "done" and rec["output"]["fingerprint"], where
        assert api.get("/v1/runs/%d" % rec["id"]).json() == rec, where
    return r.status_code


def check_background(api, background):
    for run_id, params in background:
        deadline = time.monotonic() + 60
        rec = api.get("/v1/runs/%d" % run_id).json()
        while rec["status"] in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.05)
            rec = api.get("/v1/runs/%d" % run_id).json()
        where = "params %s: %s" % (json.dumps(params), json.dumps(rec)[:600])
        assert rec["status"] in ("done", "failed"), where
        if rec["status"] == "failed":
            assert rec["error"]["code"] not in FAULTS, where


def drive(api, rnd, draw, count):
    """count runs of drawn parameters (a tenth in the background), each answer checked; the
    draw must keep reaching both the runs and the refusals."""
    background, answers = [], collections.Counter()
    for _ in range(count):
        params = draw()
        if rnd.random() < 0.1:
            params["async"] = True
        answers[check_answer(api, api.run(body=params), params, background)] += 1
    check_background(api, background)
    assert api.get("/healthz").status_code == 200
    ran = answers[200] + answers[202]
    assert count / 10 <= ran <= count * 9 / 10, "the draw ran %d of %d: %s" % (ran, count, dict(answers))


def test_random_generated_problems(start_server):
    srv = start_server(extra=["--devices", "none", "--cpu-threads", "2"])
    rnd = random.Random(SEED)
    drive(Api(srv.url), rnd, lambda: generated_problem(rnd), 1000)


def upload(api, arr, dtype):
    return upload_raw(api, arr.tobytes(), arr.shape, dtype)


def entries(rnd, rng, n, bound):
    """n int32 entries below bound, or now and then out of range or at int32's ends."""
    roll = rnd.random()
    if roll < 0.7:
        return rng.integers(0, max(bound, 1), n, dtype=np.int32)
    if roll < 0.85:
        return rng.integers(-3, bound + 3, n, dtype=np.int32)
    return np.array([rnd.choice([0, -1, 2**31 - 1, -2**31, bound, bound - 1]) for _ in range(n)], dtype=np.int32)


def resident_problem(api, rnd, rng):
    batch, heads = rnd.choice([1, 2, 3, 5]), rnd.choice([1, 2, 4])
    kv_heads, head_dim = rnd.choice([heads, 1, max(heads // 2, 1)]), rnd.choice([8, 16, 64])
    seq_q, seq_kv = rnd.choice([1, 2, 5]), rnd.choice([1, 7, 16, 33])
    p = {"backend": "reference", "device": "cpu", "iters": 1, "warmup": 0, "profile": False, "batch": batch,
         "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim, "seq_q": seq_q, "seq_kv": seq_kv}
    if rnd.random() < 0.3:
        p["mask"] = rnd.choice(["none", "causal", "causal_bottom_right"])
    if rnd.random() < 0.2:
        p["window"] = rnd.choice([0, 1, 3])
    layout = rnd.choice(["paged", "ragged", "both", "dense"])
    if layout in ("paged", "both"):
        page = rnd.choice([1, 2, 5, 16])
        per_seq = max(1, -(-seq_kv // page) + rnd.choice([0, 0, 1, -1]))
        p["page_size"], p["num_pages"] = page, max(1, batch * per_seq + rnd.choice([0, 2, -1]))
        if rnd.random() < 0.8:
            p["block_table"] = upload(api, entries(rnd, rng, batch * per_seq, p["num_pages"]).reshape(batch, per_seq), "int32")
        if rnd.random() < 0.5:
            width = head_dim if rnd.random() < 0.85 else head_dim + 8
            p["k"] = upload(api, rng.standard_normal((p["num_pages"], page, kv_heads, width)).astype(np.float32), "fp32")
            p["dtype"] = "fp32"
    if layout in ("ragged", "both"):
        lens_q = entries(rnd, rng, batch if rnd.random() < 0.9 else batch + 1, seq_q + 1)
        lens_kv = entries(rnd, rng, batch, seq_kv + 1)
        p["seqlens_q"] = upload(api, lens_q, "int32") if rnd.random() < 0.5 else [int(x) for x in lens_q]
        p["seqlens_kv"] = upload(api, lens_kv, "int32") if rnd.random() < 0.5 else [int(x) for x in lens_kv]
        if rnd.random() < 0.4:
            tokens = min(int(np.clip(lens_q, 0, None).sum()), 4096) + rnd.choice([0, 0, 1])
            p["q"] = upload(api, rng.standard_normal((max(tokens, 1), heads, head_dim)).astype(np.float32), "fp32")
            p["dtype"] = "fp32"
    if layout == "dense" and rnd.random() < 0.7:
        q = rng.standard_normal((batch, heads, seq_q, head_dim)).astype(np.float32)
        p["q"] = upload(api, q.view(np.int32) if rnd.random() < 0.3 else q, "int32" if rnd.random() < 0.3 else "fp32")
    if rnd.random() < 0.2:
        p["keep_output"] = True
    return p


def test_random_resident_tensors(start_server):
    srv = start_server(extra=["--devices", "none", "--cpu-threads", "2"])
    api, rnd, rng = Api(srv.url), random.Random(SEED), np.random.default_rng(SEED)
    drive(api, rnd, lambda: resident_problem(api, rnd, rng), 400)
