"""Paged and ragged batches in the mma.sync kernel's SERVING instantiation (kernels/flash_kernel.cuh)
through the API on a GPU: `efficient` (its 16-bit v1 kernel) and `flash` with impl legacy (v3),
the A100 path (offered since this passed on an H100). The module runs on the pytest run's server
(ATTND_URL) where that one offers them, else starts its own (with --pending-features true, for a
build where they are pending); it skips where the server has no cuda:0 (fails with
ATTND_REQUIRE_GPU=1).

- verify=true against the fp64 reference (or the GPU fp32 one above verify_cpu_max_macs), every
  mask, bf16 at head_dim 128 and fp16 at 64 and 96: a sequence of 1 token, an empty one, Skv ≠ Sq
  per sequence both ways, pages of 1, 16 and 48 tokens (any size: one table read a row), a
  window, grouped K/V heads; impl_used names v1 (efficient `legacy`) or v3 (flash `legacy`), one
  kernel a forward;
- a paged run gives its ragged twin's fingerprint (the same kernel: a page lookup changes
  addresses, not arithmetic);
- efficient refuses fp32 serving batches by its reason.
"""
import pytest

from attnd_gpu_helpers import case_id, error_of, fresh_seed, offers_serving_features, post_run_ok, server_offering

BASE = dict(heads=8, kv_heads=2, warmup=1, iters=2, device="cuda:0")
VARIANTS = [dict(backend="efficient"), dict(backend="flash", impl="legacy")]
CASES = [
    dict(seqlens_q=[1, 0, 130, 257, 64], seqlens_kv=[1, 0, 130, 257, 64]),
    dict(seqlens_q=[17, 300, 0, 129, 5], seqlens_kv=[40, 200, 50, 700, 0]),
    dict(seqlens_q=[40, 0, 200, 77], seqlens_kv=[300, 5, 17, 1000], page_size=16),
    dict(batch=2, seq_q=100, seq_kv=333, page_size=48, window=50),
    dict(seqlens_q=[1, 16, 3], seqlens_kv=[300, 700, 7], page_size=1, num_pages=1100),   # decode
]
DIMS = [dict(dtype="bf16", head_dim=128), dict(dtype="fp16", head_dim=64), dict(dtype="fp16", head_dim=96)]


@pytest.fixture(scope="module")
def gapi():
    with server_offering(lambda api: offers_serving_features(api, "efficient")) as api:
        yield api


def kernel_names(rec):
    assert rec["kernels"] is not None, "profile=true gave no kernel table"
    return [r["name"] for r in rec["kernels"]["table"] if r["kind"] == "kernel"]


@pytest.mark.parametrize("dims", DIMS, ids=lambda d: "%s-d%d" % (d["dtype"], d["head_dim"]))
@pytest.mark.parametrize("mask", ["causal", "causal_bottom_right", "none"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v["backend"])
def test_matches_the_reference(gapi, variant, case, mask, dims):
    body = dict(BASE, **variant, **case, **dims, mask=mask, seed=fresh_seed(), verify=True, profile=True)
    rec = post_run_ok(gapi, body)
    assert rec["verify"] is not None and rec["verify"]["pass"], (body, rec["verify"])
    assert rec["output"]["nan"] == 0 and rec["output"]["inf"] == 0, rec["output"]
    assert rec["impl_used"] == "legacy", rec.get("impl_used")
    names = kernel_names(rec)
    assert len(names) == 1 and "flash_fwd_kernel" in names[0], names


@pytest.mark.parametrize("page_size", [1, 16, 48])
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v["backend"])
def test_paged_gives_the_ragged_twin_fingerprint(gapi, variant, page_size):
    body = dict(BASE, **variant, dtype="bf16", head_dim=128, mask="causal", seed=fresh_seed(),
                seqlens_q=[130, 0, 17, 600], seqlens_kv=[700, 5, 17, 1300])
    flat = post_run_ok(gapi, body)
    paged = post_run_ok(gapi, dict(body, page_size=page_size))
    assert paged["output"]["fingerprint"] == flat["output"]["fingerprint"], (variant, page_size)


def test_efficient_refuses_fp32_serving(gapi):
    r = gapi.run(body=dict(BASE, backend="efficient", dtype="fp32", head_dim=64, seqlens_q=[3, 4]))
    assert r.status_code == 422 and "16-bit" in error_of(r)["message"], r.text
