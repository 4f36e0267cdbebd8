"""cudnn over paged K/V caches and ragged batches (kernels/cudnn/cudnn_serving.cu, the serving graph of
kernels/cudnn/cudnn_sdpa.c, docs/cudnn.md "Serving batches"), offered since this passed on an H100. The
module runs on the pytest run's server (ATTND_URL) where that one offers them, else starts its own
(with --pending-features true, for a build where they are pending); it skips where the server has
no cuda:0 (fails with ATTND_REQUIRE_GPU=1) or cudnn is unavailable.

- verify=true against the fp64 reference, bf16 and fp16, every mask: page_size 1 and 16, seq_kv
  not a multiple of the page, more pages than used, sequences of length 0 and 1 (an empty
  sequence in a ragged batch), decode, GQA and MQA, windows, head_dim 128;
- a paged run and its contiguous twin agree within half the verify tolerance (downloaded
  outputs, compared in numpy): the page lookup must change addresses, not the answer;
- the uploaded case (lengths and block table as resident int32 tensors) gives the generated
  run's fingerprint;
- what cuDNN does not run is a 422 naming cuDNN's reason, never a wrong answer: a query row with
  no key (an empty cache under a query, bottom-right with more queries than keys).
"""
import io

import numpy as np
import pytest

from attnd_gpu_helpers import case_id, error_of, fact, fresh_seed, offers_serving_features, post_run_ok, server_offering

BASE = dict(backend="cudnn", heads=8, kv_heads=2, head_dim=64, warmup=1, iters=2, device="cuda:0")
MASKS = ["none", "causal", "causal_bottom_right"]
CASES = [
    dict(batch=3, seq_q=5, seq_kv=33, page_size=1),
    dict(batch=3, seq_q=5, seq_kv=33, page_size=16),
    dict(batch=2, seq_q=6, seq_kv=19, page_size=16, num_pages=9, head_dim_v=32),
    dict(batch=4, seq_q=1, seq_kv=300, page_size=16, kv_heads=1, head_dim=128),    # MQA decode
    dict(seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 9]),                      # an empty sequence
    dict(seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 9], page_size=16),
    dict(seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 9], page_size=1, num_pages=70),
    dict(seq_q=1, seqlens_kv=[1, 16, 17, 40], page_size=16),                         # decode, lengths 1..40
    dict(seqlens_q=[64, 1, 30, 7], seqlens_kv=[200, 9, 30, 77], head_dim=128),
    dict(seqlens_q=[1, 1, 1], seqlens_kv=[1, 1, 1], page_size=1),                  # everything of length 1
]
WINDOWS = [
    dict(seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 9], window=4),
    dict(seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 9], page_size=16, window=1),
    dict(batch=3, seq_q=5, seq_kv=33, page_size=16, window=8),
]


@pytest.fixture(scope="module")
def capi():
    with server_offering(lambda api: offers_serving_features(api, "cudnn")) as api:
        row = next(v for v in api.get("/v1/variants").json()["variants"] if v["name"] == "cudnn")
        if not row.get("available", False):
            pytest.skip("cudnn is unavailable here: %s" % row.get("why"))
        yield api


def run_verified(api, body):
    rec = post_run_ok(api, dict(BASE, seed=fresh_seed(), verify=True, **body))
    assert rec["verify"] is not None and rec["verify"]["pass"], (body, rec["verify"])
    assert rec["output"]["nan"] == 0 and rec["output"]["inf"] == 0, (body, rec["output"])
    return rec


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_verify_against_the_reference(capi, case, mask, dtype):
    rec = run_verified(capi, dict(case, mask=mask, dtype=dtype))
    names = [k["name"] for k in rec["kernels"]["table"]] if rec.get("kernels") else []
    if names:  # the per-sequence arrays' kernel, then cuDNN's
        assert any("cudnn_serving_meta" in n for n in names), names


@pytest.mark.parametrize("mask", ["causal", "causal_bottom_right", "none"])
@pytest.mark.parametrize("case", WINDOWS, ids=[case_id(c) for c in WINDOWS])
def test_windows_per_sequence(capi, case, mask):
    run_verified(capi, dict(case, mask=mask, dtype="bf16"))


def download(api, tid):
    r = api.get("/v1/tensors/%s/data" % tid, timeout=120)
    assert r.status_code == 200, r.text[:500]
    api.request("DELETE", "/v1/tensors/%s" % tid)
    a = np.load(io.BytesIO(r.content))
    if a.dtype == np.uint16:  # bf16 comes as its bit patterns (docs/api.md)
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("twin", [dict(batch=3, seq_q=5, seq_kv=33, mask="causal"),
                                  dict(seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 9], mask="none"),
                                  dict(seqlens_q=[4, 0, 9], seqlens_kv=[12, 3, 12], mask="causal_bottom_right")],
                         ids=["dense", "ragged", "ragged-br"])
def test_paged_run_matches_the_contiguous_twin(capi, twin, page_size):
    """The same keys through the block table: the output within half of verify's bf16 tolerance
    of the contiguous twin's (cuDNN may choose another engine for the paged graph, so not bit
    for bit; an indexing error would be far off)."""
    body = dict(BASE, dtype="bf16", seed=fresh_seed(), keep_output=True, **twin)
    flat = post_run_ok(capi, body)
    paged = post_run_ok(capi, dict(body, page_size=page_size))
    a, b = download(capi, flat["output"]["tensor"]), download(capi, paged["output"]["tensor"])
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    fact("cudnn paged-vs-contiguous max abs diff %s page %d" % (case_id(twin), page_size), diff)
    assert diff <= 1e-2, (twin, page_size, diff)
    if diff == 0.0:
        assert paged["output"]["fingerprint"] == flat["output"]["fingerprint"]


def test_fully_masked_rows_are_refused(capi):
    """cuDNN's fused SDPA does not support a query row with no key: refused 422 before anything
    runs, sequence named, never an answer that differs from the reference's zeros."""
    for extra in (dict(seqlens_q=[1, 1, 3], seqlens_kv=[0, 1, 2], page_size=1, mask="causal_bottom_right"),
                  dict(seqlens_q=[2, 9], seqlens_kv=[4, 5], mask="causal_bottom_right"),
                  dict(seqlens_q=[1, 1], seqlens_kv=[5, 0], mask="none")):
        r = capi.run(body=dict(BASE, dtype="bf16", **extra))
        assert r.status_code == 422, (extra, r.text[:500])
        err = error_of(r)
        assert err["code"] == "unsupported" and "fully masked rows" in err["message"], (extra, err)


def test_uploaded_case_gives_the_generated_fingerprint(capi):
    """Lengths and a block table as resident int32 tensors (the table 16-byte aligned by
    cudaMalloc; the generated one after cu_seqlens, aligned by the worker): the same output."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "api"))
    from attnd_api_helpers import load_gen
    from attnd_gpu_helpers import upload

    gen = load_gen()
    seed = fresh_seed() % (2 ** 62)
    spec = dict(seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 9], page_size=16, num_pages=12)
    lay = gen.serving_layout(seed, **spec)
    q, k, v = gen.serving_inputs(seed, lay, 8, 64, "bf16", kv_heads=2)
    ids = [upload(capi, a, "bf16") for a in (q, k, v)]
    extra = [upload(capi, lay["block_table"].astype(np.int32), "int32"),
             upload(capi, np.asarray(lay["seqlens_q"], np.int32), "int32"),
             upload(capi, np.asarray(lay["seqlens_kv"], np.int32), "int32")]
    try:
        base = dict(BASE, dtype="bf16", mask="causal", seed=seed, warmup=0, iters=1)
        want = post_run_ok(capi, dict(base, **spec))
        got = post_run_ok(capi, dict(base, q=ids[0], k=ids[1], v=ids[2], block_table=extra[0], seqlens_q=extra[1],
                                     seqlens_kv=extra[2], page_size=16, num_pages=12))
        assert got["output"]["fingerprint"] == want["output"]["fingerprint"]
    finally:
        for tid in ids + extra:
            capi.request("DELETE", "/v1/tensors/%s" % tid)
