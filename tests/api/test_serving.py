"""Serving batches on the cpu device: paged K/V caches (page_size, num_pages) and ragged batches
(seqlens_q, seqlens_kv), run by the fp64 reference.

- a paged cache gives the fingerprint of its contiguous twin, exactly (page_size 1, 16 and
  odd ones; seq_kv not a multiple of the page; ragged or not);
- the output against a numpy fp64 re-computation of the same layout (clients/python/attnd_ref),
  empty and one-token sequences among them;
- distributions drawn from seed as attnd_ref draws them; params keep what was given and post
  back to the same run;
- FLOPs, bytes and the cpu cost count real tokens;
- refusals name their field: 400 for malformed lengths and limits, 422 for every GPU variant
  (feature bits `page_size`, `seqlens` in GET /v1/variants); resident inputs take the layouts.
"""
import os

import numpy as np
import pytest

from attnd_api_helpers import check_against_openapi, error_of, load_gen

GQA = {"heads": 4, "kv_heads": 2, "head_dim": 8, "warmup": 0, "iters": 1, "backend": "reference", "device": "cpu"}


def run_ok(api, body):
    r = api.run(body=body)
    assert r.status_code == 200, (body, r.status_code, r.text[:1000])
    rec = r.json()
    assert rec["status"] == "done", rec
    return rec


def refused(api, body, status, code, field):
    r = api.run(body=body)
    assert r.status_code == status, (body, r.status_code, r.text[:500])
    err = error_of(r)
    assert err["code"] == code and err["field"] == field, (body, err)
    return err


def output_of(api, rec):
    """The kept output's bytes as the record's dtype."""
    r = api.get("/v1/tensors/%s/data" % rec["output"]["tensor"], params={"format": "raw"})
    assert r.status_code == 200, r.text[:300]
    dt = {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16}[rec["params"]["dtype"]]
    return np.frombuffer(r.content, dtype=dt)


def layout_of(gen, rec):
    p = rec["params"]
    return gen.serving_layout(p["seed"], batch=p["batch"], seq_q=p["seq_q"], seq_kv=p["seq_kv"],
                              seqlens_q=p.get("seqlens_q"), seqlens_kv=p.get("seqlens_kv"),
                              page_size=p.get("page_size", 0), num_pages=p.get("num_pages"))


@pytest.mark.parametrize("page_size", [1, 16, 5])
def test_paged_cache_gives_the_contiguous_fingerprint(api, page_size):
    """batch 3, GQA, seq_kv 33 (not a multiple of 16 or 5): the paged run's output is its
    contiguous twin's, bit for bit; its params keep page_size and the cache's num_pages."""
    base = dict(GQA, batch=3, seq_q=5, seq_kv=33, mask="causal_bottom_right", seed=4)
    flat = run_ok(api, base)
    paged = run_ok(api, dict(base, page_size=page_size))
    assert paged["output"]["fingerprint"] == flat["output"]["fingerprint"]
    assert paged["output"]["shape"] == flat["output"]["shape"] == [3, 4, 5, 8]
    pages = 3 * -(-33 // page_size)
    assert paged["params"]["page_size"] == page_size
    assert paged["params"]["num_pages"] == pages + -(-pages // 4)  # a quarter more than needed
    assert "page_size" not in flat["params"] and "num_pages" not in flat["params"]
    # the same work; the bytes add the block table entries read, never the unused pages
    assert paged["perf"]["flops"] == flat["perf"]["flops"]
    assert paged["perf"]["bytes"] == flat["perf"]["bytes"] + 4 * pages
    assert paged["perf"]["tokens_q"] == 15 and paged["perf"]["tokens_kv"] == 99
    assert "tokens_q" not in flat["perf"]
    check_against_openapi(paged, "Run")


@pytest.mark.parametrize("page_size", [1, 16])
def test_ragged_paged_gives_the_ragged_contiguous_fingerprint(api, page_size):
    base = dict(GQA, seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 1], mask="causal_bottom_right", window=3,
                head_dim_v=4, seed=9)
    flat = run_ok(api, base)
    paged = run_ok(api, dict(base, page_size=page_size, num_pages=200))
    assert paged["output"]["fingerprint"] == flat["output"]["fingerprint"]
    assert flat["output"]["shape"] == [13, 4, 4]  # packed, token-major: [total_q, heads, head_dim_v]
    assert paged["params"]["num_pages"] == 200


CASES = [
    # ragged both sides, empty and one-token sequences, GQA, a value head dim of its own
    dict(seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 1], mask="causal_bottom_right"),
    dict(seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 1], mask="causal", window=4, page_size=16),
    dict(seqlens_q=[1, 1, 3], seqlens_kv=[0, 1, 2], mask="none", page_size=1),
    # decode: one query a sequence over ragged caches, drawn from seed
    dict(seq_q=1, seqlens_kv="uniform:0:40", batch=5, mask="causal_bottom_right", page_size=16),
    # ragged queries over equal caches (chunked prefill)
    dict(seqlens_q="4,0,9", seq_kv=12, mask="causal_bottom_right", page_size=5),
    # dense, paged
    dict(batch=2, seq_q=6, seq_kv=19, mask="causal", page_size=4),
]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_output_against_numpy(api, case):
    """The kept fp32 output against attnd_ref's fp64 re-computation over the layout it rebuilds
    from the record's params (lengths, block table, the paged cache's values)."""
    gen = load_gen()
    body = dict(GQA, head_dim_v=4, dtype="fp32", seed=11, keep_output=True, verify=True, **case)
    rec = run_ok(api, body)
    assert rec["verify"]["pass"], rec["verify"]
    lay = layout_of(gen, rec)
    q, k, v = gen.serving_inputs(11, lay, 4, 8, "fp32", kv_heads=2, head_dim_v=4)
    want = gen.serving_reference(q, k, v, lay, 4, mask=case["mask"], window=case.get("window"), kv_heads=2)
    got = output_of(api, rec)
    assert list(want.shape) == rec["output"]["shape"]
    assert got.size == want.size
    np.testing.assert_allclose(got, want.ravel(), rtol=0, atol=2e-6)
    if lay["ragged"]:  # rows of empty-cache sequences are zeros (safe softmax), not NaN
        for b in range(lay["batch"]):
            if lay["seqlens_kv"][b] == 0:
                c0, c1 = lay["cu_seqlens_q"][b], lay["cu_seqlens_q"][b + 1]
                assert not np.any(want[c0:c1]) and not np.any(got.reshape(want.shape)[c0:c1])
    # the work of the real tokens
    tq, tkv = int(lay["cu_seqlens_q"][-1]), int(lay["cu_seqlens_kv"][-1])
    if rec["perf"].get("tokens_q") is not None:
        assert rec["perf"]["tokens_q"] == tq and rec["perf"]["tokens_kv"] == tkv
    check_against_openapi(rec, "Run")


def test_distribution_is_drawn_from_seed(api):
    gen = load_gen()
    body = dict(GQA, batch=16, seq_q=1, seqlens_kv={"dist": "uniform", "min": 1, "max": 64}, seed=3)
    rec = run_ok(api, body)
    lens = gen.draw_seqlens(3, "kv", 16, 1, 64)
    assert rec["params"]["seqlens_kv"] == {"dist": "uniform", "min": 1, "max": 64}
    assert rec["params"]["seq_kv"] == int(lens.max())
    assert rec["perf"]["tokens_kv"] == int(lens.sum()) and rec["output"]["shape"] == [16, 4, 8]
    # the query-string form draws the same; another seed draws others
    again = api.run(params={"seqlens_kv": "uniform:1:64"}, body=dict(body, seqlens_kv=None)).json()
    assert again["output"]["fingerprint"] == rec["output"]["fingerprint"]
    other = run_ok(api, dict(body, seed=4))
    assert other["perf"]["tokens_kv"] == int(gen.draw_seqlens(4, "kv", 16, 1, 64).sum())
    # params posted back: the same run
    back = run_ok(api, {k: v for k, v in rec["params"].items()})
    assert back["output"]["fingerprint"] == rec["output"]["fingerprint"] and back["params"] == rec["params"]


def test_flops_count_real_tokens(api):
    """Per sequence as the dense problem counts it: a ragged batch of equal lengths has the dense
    problem's FLOPs; lengths 3,0,1,7 over 5,0,17,7 count theirs alone."""
    dense = run_ok(api, dict(GQA, batch=3, seq=9))
    equal = run_ok(api, dict(GQA, seqlens_q=[9, 9, 9], seqlens_kv="9,9,9"))
    assert equal["perf"]["flops"] == dense["perf"]["flops"]
    rec = run_ok(api, dict(GQA, seqlens_q=[3, 0, 1, 7], seqlens_kv=[5, 0, 17, 7], mask="causal"))
    pairs = (1 + 2 + 3) + 0 + 1 + 7 * 7 / 2  # top-left causal; the square sequence counts half
    assert rec["perf"]["flops"] == 2 * 4 * (8 + 8) * pairs


def test_cpu_cost_counts_real_tokens(api):
    """Padded to its bounds (seq_q 20000, seq_kv 200000) this batch would cost 6.4·10^10 MACs a
    forward, over the cpu device's limit; its real tokens cost 1.8·10^6."""
    rec = run_ok(api, dict(GQA, heads=1, kv_heads=1, seqlens_q=[1, 20000], seqlens_kv=[200000, 1], mask="none"))
    assert rec["params"]["seq_q"] == 20000 and rec["params"]["seq_kv"] == 200000
    assert rec["perf"]["flops"] == 2 * 16 * (200000 + 20000)


@pytest.mark.parametrize("page_size", [0, 16])
def test_bytes_count_only_the_keys_a_forward_reads(api, page_size):
    """A sequence without queries reads none of its keys and values (nor its pages): perf.bytes
    counted them, and a batch whose query lengths are all 0 moved its whole cache."""
    paged = {"page_size": page_size, "num_pages": 16} if page_size else {}
    twin = run_ok(api, dict(GQA, seqlens_q=[2], seqlens_kv=[17], mask="causal_bottom_right", **paged))
    mixed = run_ok(api, dict(GQA, seqlens_q=[0, 2], seqlens_kv=[33, 17], mask="causal_bottom_right", **paged))
    # one more sequence: two more cu_seqlens entries (int32), and nothing of its 33 keys or pages
    assert mixed["perf"]["bytes"] == twin["perf"]["bytes"] + 2 * 4, (mixed["perf"], twin["perf"])
    assert mixed["perf"]["tokens_kv"] == 50, "the real tokens are still counted as tokens"
    empty = run_ok(api, dict(GQA, seqlens_q=[0, 0], seqlens_kv=[33, 17], mask="causal_bottom_right", **paged))
    assert empty["perf"]["bytes"] == 2 * 3 * 4, empty["perf"]  # cu_seqlens_q and _kv alone


def test_too_costly_names_the_ragged_lengths_to_shrink(start_server):
    """A ragged batch over cpu_max_macs was told "it fits with seq_q=… and seq_kv=…", sizes it
    does not have. It is told its lengths: how many times shorter, the longest each would be,
    its real tokens counted; and the suggestion runs."""
    from attnd_api_helpers import Api
    import re
    api = Api(start_server(extra=["--cpu-threads", "1", "--cpu-max-macs", "1000000"]).url)
    tiny = dict(GQA, heads=2, kv_heads=2, mask="none")  # 2 forwards: iters 1 and the output
    # one side given: 2·8·(40000 + 1000 + 30000) = 1136000 MACs a forward, 2272000 in all
    err = refused(api, dict(tiny, seq_q=1, seqlens_kv=[40000, 1000, 30000]), 422, "too_costly", None)
    msg = err["message"]
    assert "of 1136000 each" in msg and "real tokens" in msg and "batch*heads" not in msg, msg
    assert not re.search(r"\bseq(_q|_kv)?=", msg), msg
    assert "it fits with seqlens_kv 3 times shorter (the longest 13333 tokens, now 40000)" in msg, msg
    run_ok(api, dict(tiny, seq_q=1, seqlens_kv=[40000 // 3, 1000 // 3, 30000 // 3]))
    # both sides: 2·8·(100·2000 + 50·1000) = 4·10^6 a forward: each side 3 times shorter
    err = refused(api, dict(tiny, seqlens_q=[100, 50], seqlens_kv=[2000, 1000]), 422, "too_costly", None)
    assert ("seqlens_q and seqlens_kv each 3 times shorter (the longest 33 and 666 tokens, now 100 and 2000)"
            in err["message"]), err["message"]
    run_ok(api, dict(tiny, seqlens_q=[33, 16], seqlens_kv=[666, 333]))
    # nothing shorter fits: fewer sequences
    err = refused(api, dict(tiny, seq_q=1, seqlens_kv=[1] * 4096, iters=1000), 422, "too_costly", None)
    assert "fewer sequences" in err["message"] and not re.search(r"\bseq(_q|_kv)?=", err["message"]), err


@pytest.mark.parametrize("body,code,field", [
    ({"seqlens_kv": "1,,2"}, "bad_value", "seqlens_kv"),
    ({"seqlens_kv": "1,-2"}, "out_of_range", "seqlens_kv"),
    ({"seqlens_kv": [1, 2.5]}, "bad_value", "seqlens_kv"),
    ({"seqlens_kv": []}, "bad_value", "seqlens_kv"),
    ({"seqlens_q": "normal:1:4"}, "bad_value", "seqlens_q"),
    ({"seqlens_q": {"dist": "uniform", "min": 9, "max": 2}}, "out_of_range", "seqlens_q"),
    ({"seqlens_q": {"dist": "uniform", "min": 1}}, "bad_value", "seqlens_q"),
    ({"batch": 2, "seqlens_kv": [1, 2, 3]}, "conflict", "seqlens_kv"),
    ({"seq_kv": 10, "seqlens_kv": [5, 11]}, "out_of_range", "seqlens_kv"),
    ({"seqlens_kv": [2147483647, 1]}, "out_of_range", "seqlens_kv"),
    ({"batch": 4097, "seqlens_kv": "uniform:1:2"}, "out_of_range", "batch"),
    ({"num_pages": 3}, "conflict", "num_pages"),
    ({"batch": 2, "seq_kv": 33, "page_size": 16, "num_pages": 5}, "out_of_range", "num_pages"),
    ({"page_size": 1048577}, "out_of_range", "page_size"),
    ({"page_size": -1}, "out_of_range", "page_size"),
])
def test_bad_values_name_their_field(api, body, code, field):
    refused(api, dict(GQA, **body), 400, code, field)


def test_every_variant_takes_the_serving_layouts(api):
    """Every variant lists both features (the GPU ones validated on a GPU), so a ragged batch or
    a paged cache gets past the front's checks to the device, which this server lacks: 503
    no_device, never a refusal of the layout."""
    variants = api.get("/v1/variants").json()["variants"]
    for v in variants:
        assert {"page_size", "seqlens"} <= set(v["features"]), v
    for name in [v["name"] for v in variants if v["device"] == "cuda"]:
        base = {"backend": name, "dtype": "bf16", "heads": 4, "kv_heads": 2, "head_dim": 64, "seq_q": 1,
                "mask": "causal_bottom_right"}
        for extra in ({"seqlens_kv": [3, 4]}, {"page_size": 16, "seq_kv": 40}):
            refused(api, dict(base, **extra), 503, "no_device", "device")


def test_resident_inputs_take_a_serving_layout(api):
    """A resident q with a generated paged cache runs (its contiguous twin's fingerprint, the
    generated side following q's length as in a dense run); a ragged batch wants q token-major
    (tests/api/test_serving_resident.py has the rest of the uploaded case)."""
    q = np.random.default_rng(3).standard_normal((1, 2, 16, 8)).astype(np.float32)
    r = api.post("/v1/tensors", params={"dtype": "fp32", "shape": "1,2,16,8", "device": "cpu"}, data=q.tobytes())
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    try:
        body = {"backend": "reference", "q": tid, "warmup": 0, "iters": 1, "seed": 5}
        flat = run_ok(api, body)
        paged = run_ok(api, dict(body, page_size=4))
        assert paged["output"]["fingerprint"] == flat["output"]["fingerprint"]
        assert paged["params"]["seq_kv"] == 16 and paged["params"]["num_pages"] == 5
        err = refused(api, {"backend": "reference", "q": tid, "seqlens_kv": [16]}, 422, "shape_mismatch", "q")
        assert "[total_q, heads, head_dim]" in err["message"], err
    finally:
        api.request("DELETE", "/v1/tensors/%s" % tid)


@pytest.mark.parametrize("ragged", [True, False])
def test_kept_output_shape(api, ragged):
    """A kept output's tensor has the output's shape: packed [total_q, heads, head_dim_v] for a
    ragged batch, [batch, heads, seq_q, head_dim_v] otherwise: head_dim_v, not head_dim."""
    body, shape = ((dict(GQA, seqlens_q=[2, 0, 3], seq_kv=4, head_dim_v=4), [5, 4, 4]) if ragged
                   else (dict(GQA, batch=1, seq=4, head_dim_v=4), [1, 4, 4, 4]))
    rec = run_ok(api, dict(body, keep_output=True))
    t = api.get("/v1/tensors/%s" % rec["output"]["tensor"]).json()
    assert rec["output"]["shape"] == shape and t["shape"] == shape, (rec["output"], t)
    assert t["bytes"] == 2 * int(np.prod(shape))
    api.request("DELETE", "/v1/tensors/%s" % rec["output"]["tensor"])


def test_plan_runs_serving_batches(tmp_path):
    """`attnd batch` takes the serving parameters in a plan's params (a list, a distribution):
    the paged grid gives the fingerprints of the contiguous one, run for run."""
    import json
    import subprocess

    from attnd_api_helpers import REPO, attnd_bin, pg_database_for, store_under_test

    def run_plan(name, params):
        path = tmp_path / (name + ".json")
        path.write_text(json.dumps({"backends": ["reference"], "head_dim": [4, 8], "params": params}))
        data = tmp_path / name
        store = ["--store", pg_database_for(os.path.realpath(str(data)))] if store_under_test() == "postgresql" else []
        p = subprocess.run([attnd_bin(), "batch", str(path), "--devices", "none", "--data-dir", str(data),
                            "--cpu-threads", "2", "--log-level", "warn"] + store, cwd=REPO, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]

    base = {"heads": 2, "warmup": 0, "iters": 1, "seq_q": 2, "seqlens_kv": [5, 0, 3],
            "mask": "causal_bottom_right"}
    flat = run_plan("flat", base)
    paged = run_plan("paged", dict(base, page_size=2))
    drawn = run_plan("drawn", dict(base, seqlens_kv={"dist": "uniform", "min": 0, "max": 9}, batch=4))
    assert [r["status"] for r in flat + paged + drawn] == ["done"] * 6
    assert [r["output"]["fingerprint"] for r in paged] == [r["output"]["fingerprint"] for r in flat]
    assert [r["params"]["page_size"] for r in paged] == [2, 2]
    assert drawn[0]["params"]["seqlens_kv"] == {"dist": "uniform", "min": 0, "max": 9}
