"""Studies and compare on the GPU: the profiling study's table in one request, in agreement with
separate runs of each variant, and the ratio of two backends with its interval.

    POST /v1/studies?seq=1024        the six variants on the study's shape, interleaved
    GET /v1/compare?base=A&run=B     flash against cudnn at B2 H16 S8192 D128 causal

The records and the CLI's compare text go to $OUT (studies-gpu.json) for the dashboard's
screenshot and the notes."""
import io
import json
import os
import sys
import time

from attnd_gpu_helpers import fact, fresh_seed, need_variant

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))
from attnd import cli  # noqa: E402

SIX = ["naive", "naive_inplace", "math", "efficient", "flash", "cudnn"]
STUDY_WAIT_S = 600


def wait_study(api, study_id):
    deadline = time.monotonic() + STUDY_WAIT_S
    while True:
        r = api.get("/v1/studies/%d" % study_id, params={"wait": 30}, timeout=60)
        assert r.status_code == 200, r.text[:500]
        rec = r.json()
        if rec["status"] in ("done", "failed", "cancelled"):
            return rec
        assert time.monotonic() < deadline, "study %d still %s after %d s" % (study_id, rec["status"], STUDY_WAIT_S)


def save(name, value):
    out = os.environ.get("OUT")
    if not out:
        return
    path = os.path.join(out, "studies-gpu.json")
    saved = {}
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
    saved[name] = value
    with open(path, "w") as f:
        json.dump(saved, f, indent=1)


def test_the_six_variant_study_agrees_with_separate_runs(gapi, variants):
    for name in SIX:
        need_variant(variants, name)
    seed = fresh_seed()
    r = gapi.post("/v1/studies?seq=1024&seed=%d" % seed, timeout=60)  # the curl, with a fresh seed
    assert r.status_code == 202, r.text[:1000]
    study = wait_study(gapi, r.json()["id"])
    save("study", study)
    assert study["status"] == "done", study.get("error")
    assert [row["variant"] for row in study["table"]] == SIX
    for row in study["table"]:
        assert row["status"] == "done" and row["rounds_done"] == 3, row
        assert row["verify"]["pass"] is True, row
        assert row["kernels_per_forward"] >= 1 and row["top_kernels"], row
        vs = row["vs_baseline"]
        if row["variant"] == study["baseline"]:  # itself: 1, no interval
            assert vs["ratio"] == 1 and vs["low"] is None and vs["high"] is None, row
        else:
            assert vs["low"] <= vs["ratio"] <= vs["high"], row
    # Each row against a separate run of its variant, on the same inputs, after the study.
    for row in study["table"]:
        run = gapi.run_ok(backend=row["variant"], seq=1024, seed=seed)
        assert run["output"]["fingerprint"] == row["fingerprint"] or not row["deterministic"], (run["output"], row)
        c = gapi.get("/v1/compare", params={"base": "study:%d:%s" % (study["id"], row["variant"]), "run": run["id"],
                                            "confidence": 0.99}, timeout=30)
        assert c.status_code == 200, c.text[:500]
        (cmp_row,) = c.json()["rows"]
        fact("study_vs_run_%s" % row["variant"], round(cmp_row["ratio"], 4))
        assert cmp_row["verdict"] == "no significant difference", (row["variant"], cmp_row)


def test_compare_flash_with_cudnn_gives_the_ratio_and_its_interval(gapi, variants):
    need_variant(variants, "flash")
    need_variant(variants, "cudnn")
    shape = dict(batch=2, heads=16, seq=8192, head_dim=128, mask="causal", min_time_ms=300)
    cudnn = gapi.run_ok(backend="cudnn", **shape)
    flash = gapi.run_ok(backend="flash", **shape)
    c = gapi.get("/v1/compare", params={"base": cudnn["id"], "run": flash["id"]}, timeout=30)
    assert c.status_code == 200, c.text[:500]
    body = c.json()
    (row,) = body["rows"]
    assert row["low"] is not None and row["low"] < row["ratio"] < row["high"], row
    assert row["verdict"] in ("faster", "slower", "no significant difference"), row
    fact("compare_flash_vs_cudnn_s8192_causal", [round(row["ratio"], 4), round(row["low"], 4), round(row["high"], 4),
                                                 row["verdict"]])
    text = io.StringIO()
    rc = cli.main(["compare", "--url", gapi.url, str(cudnn["id"]), str(flash["id"])], out=text)
    assert rc == 0 and "ratio %s [" % cli._fmt(row["ratio"]) in text.getvalue(), text.getvalue()
    save("compare_flash_vs_cudnn", {"answer": body, "cli": text.getvalue()})
