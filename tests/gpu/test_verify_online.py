"""verify on problems whose scores do not fit on the GPU: SDPA's math path in fp32 would keep
B·H·Sq·Skv floats three times over, so the worker checks against the online reference instead
(kernels/reference_online.cu, docs/verify.md), and the run is served, not refused with 413.

fused_check's `reference@online` rows hold that reference to the fp64 one on every layout; here
it is the whole path a user takes: a ragged prefill of 16 sequences up to 8192 tokens and a
paged prefill over 8192-token caches, verified, for flash and cudnn (where offered). A corrupt
reference would fail every variant at once: each must pass with a small error.
"""
import pytest

from attnd_gpu_helpers import fact, fresh_seed, need_variant

LENGTHS = [128 + (8192 - 128) * i // 15 for i in range(16)]  # the serving study's ragged prefill
CASES = {
    "ragged": dict(seqlens_q=LENGTHS, seqlens_kv=LENGTHS),
    "paged": dict(batch=16, seq=8192, page_size=256),
}


@pytest.mark.parametrize("variant", ["flash", "cudnn"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_scores_too_large_verify_online(gapi, variants, variant, case):
    need_variant(variants, variant)
    body = dict(backend=variant, dtype="bf16", heads=32, kv_heads=8, head_dim=128, mask="causal",
                device="cuda:0", warmup=0, iters=1, seed=fresh_seed(), verify=True, **CASES[case])
    r = gapi.run(body=body, timeout=300)
    if r.status_code == 422:  # this variant does not take the layout here: its reason, not a 413
        pytest.skip("%s: %s" % (variant, r.json()["error"]["message"]))
    assert r.status_code == 200, (r.status_code, r.text[:1500])
    rec = r.json()
    assert rec["status"] == "done", rec
    v = rec["verify"]
    assert v["reference"] == "gpu_online_fp32", v
    assert v["pass"] and v["rel_l2_err"] < 0.01, v
    assert rec["output"]["nan"] == 0
    fact("verify online %s %s rel_l2_err" % (variant, case), v["rel_l2_err"])
