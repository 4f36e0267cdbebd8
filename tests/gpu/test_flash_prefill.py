"""flash's paged and ragged prefill (seq_q above 16: v6's SERVING kernel, kernels/flash_tma_serving.cuh)
through the API on a GPU (passed on an H100 before it was offered). The module runs on the pytest
run's server (ATTND_URL) where that one offers it, else starts its own; it skips where the server has no cuda:0 (fails with
ATTND_REQUIRE_GPU=1), and needs the H100/H200 (sm_90a) worker.

- verify=true against the fp64 reference (or the GPU fp32 one above verify_cpu_max_macs), bf16
  and fp16, head dims 64 and 128, every mask: a sequence of 1 token, an empty one, lengths not
  multiples of 128, Skv ≠ Sq per sequence, a window; impl_used tma and the kernel table's one
  flash_tma_kernel launch;
- a paged run (pages of 128 and 256 tokens) gives its contiguous twin's fingerprint where both run
  the same kernel arithmetic (a ragged twin always; a paged batch of equal lengths at head_dim 128
  with a causal mask and grouped K/V heads, whose dense twin runs the same configuration);
- what stays refused: pages that do not hold whole 128-key blocks, another impl.
The timing against cudnn (or flash's dense prefill of the same total) is fused_check's
(--shape B,H,LO-HI,D,MASK,Hkv: docs/serving.md).
"""
import pytest

from attnd_gpu_helpers import error_of, fact, fresh_seed, post_run_ok, server_offering

GQA = dict(heads=8, kv_heads=2, warmup=1, iters=2, device="cuda:0")
# ragged prefill: odd lengths, an empty sequence and one of 1 token, Skv ≠ Sq both ways, a window;
# paged prefill: a batch of equal lengths (q dense), ragged and paged together
CASES = [
    dict(seqlens_q=[1, 0, 130, 257, 64, 1000], seqlens_kv=[1, 0, 130, 257, 64, 1000]),
    dict(seqlens_q=[17, 300, 0, 129, 5, 300], seqlens_kv=[40, 200, 50, 700, 0, 1000]),
    dict(seqlens_q=[1000, 77, 513], seqlens_kv=[1000, 77, 513], window=33),
    dict(batch=3, seq_q=200, seq_kv=700, page_size=128),
    dict(seqlens_q=[130, 0, 17, 600], seqlens_kv=[700, 5, 17, 1300], page_size=256),
    dict(seqlens_q=[333, 40, 900], seqlens_kv=[333, 1000, 900], page_size=128, window=100),
]


def offers_prefill(api):
    """Whether api's server has cuda:0 and runs flash's ragged prefill rather than refusing it
    (a build without the serving kernels refuses it: no GPU job)."""
    devs = [d.get("id") for d in api.get("/v1/device").json()["devices"]]
    if "cuda:0" not in devs:
        return False
    r = api.run(body=dict(backend="flash", dtype="bf16", heads=2, head_dim=64, seqlens_q=[17], seqlens_kv=[17],
                          device="cuda:0", warmup=0, iters=1))
    return r.status_code == 200


@pytest.fixture(scope="module")
def papi():
    with server_offering(offers_prefill) as api:
        (dev,) = [d for d in api.get("/v1/device").json()["devices"] if d.get("id") == "cuda:0"]
        if dev.get("compute_capability") != "9.0":  # elsewhere v3 runs it: test_serving_generic.py
            pytest.skip("this module checks v6's serving kernel (compute capability 9.0), cuda:0 is %s"
                        % dev.get("compute_capability"))
        yield api


def kernel_names(rec):
    assert rec["kernels"] is not None, "profile=true gave no kernel table"
    return [r["name"] for r in rec["kernels"]["table"] if r["kind"] == "kernel"]


def case_id(c):
    return "-".join("%s%s" % (k, v) for k, v in sorted(c.items())).replace(" ", "")


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("mask", ["causal", "causal_bottom_right", "none"])
@pytest.mark.parametrize("head_dim", [128, 64])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_prefill_matches_the_reference(papi, case, head_dim, mask, dtype):
    rec = post_run_ok(papi, dict(GQA, backend="flash", dtype=dtype, mask=mask, head_dim=head_dim, seed=fresh_seed(),
                                 verify=True, profile=True, **case))
    assert rec["verify"] is not None and rec["verify"]["pass"], (case, rec["verify"])
    assert rec["output"]["nan"] == 0 and rec["output"]["inf"] == 0, rec["output"]
    assert rec["impl_used"] == "tma", rec.get("impl_used")
    names = kernel_names(rec)
    assert len(names) == 1 and "flash_tma_kernel" in names[0], names


@pytest.mark.parametrize("page_size", [128, 256])
@pytest.mark.parametrize("mask", ["causal", "none"])
def test_ragged_paged_gives_the_contiguous_fingerprint(papi, page_size, mask):
    """A ragged batch's paged cache read through its block table: the packed twin's output bit for
    bit (the same kernel; a page lookup changes addresses, not arithmetic; keys past a sequence's
    end are masked in both, whatever their slots hold)."""
    body = dict(GQA, backend="flash", dtype="bf16", head_dim=128, mask=mask, seed=fresh_seed(),
                seqlens_q=[130, 0, 17, 600], seqlens_kv=[700, 5, 17, 1300])
    flat = post_run_ok(papi, body)
    paged = post_run_ok(papi, dict(body, page_size=page_size))
    assert paged["output"]["fingerprint"] == flat["output"]["fingerprint"], (page_size, mask)


def test_paged_batch_gives_the_dense_fingerprint(papi):
    """A paged batch of equal lengths and its dense twin (q and out alike): at head_dim 128, causal,
    grouped K/V heads both run v6's 128x128 dynamic configuration with the same masks, so the
    outputs agree bit for bit; each also verifies."""
    body = dict(GQA, backend="flash", dtype="bf16", head_dim=128, mask="causal", seed=fresh_seed(), batch=3,
                seq_q=200, seq_kv=700, verify=True)
    flat = post_run_ok(papi, body)
    paged = post_run_ok(papi, dict(body, page_size=128))
    assert flat["verify"]["pass"] and paged["verify"]["pass"], (flat["verify"], paged["verify"])
    assert paged["impl_used"] == "tma" and flat["impl_used"] == "tma"
    assert paged["output"]["fingerprint"] == flat["output"]["fingerprint"]


def test_prefill_refusals(papi):
    """Pages that split a 128-key block (decode still takes them: the split-KV kernel), and
    another impl, are refused with the reason."""
    body = dict(GQA, backend="flash", dtype="bf16", head_dim=128, seqlens_q=[40, 17], seqlens_kv=[100, 300])
    r = papi.run(body=dict(body, page_size=16))
    assert r.status_code == 422 and "page_size a multiple of 128" in error_of(r)["message"], r.text
    r = papi.run(body=dict(body, impl="wgmma"))
    assert r.status_code == 422 and "not impl wgmma" in error_of(r)["message"], r.text
    decode = post_run_ok(papi, dict(body, seqlens_q=[1, 16], page_size=16))
    assert decode["impl_used"] == "splitkv"


def test_ragged_prefill_serving_shape(papi):
    """The serving target's shape (16 sequences of 128-8192 tokens, H32 Hkv8 D128 causal), timed
    through the API beside flash's dense prefill of the same total tokens: facts for the summary,
    not a pass mark (fused_check's --shape times it against cudnn in isolated windows)."""
    lens = [128 + (8192 - 128) * b // 15 for b in range(16)]
    base = dict(backend="flash", dtype="bf16", heads=32, kv_heads=8, head_dim=128, mask="causal", warmup=3,
                iters=10, device="cuda:0", seed=fresh_seed())
    ragged = post_run_ok(papi, dict(base, seqlens_q=lens, seqlens_kv=lens))
    dense = post_run_ok(papi, dict(base, batch=16, seq=sum(lens) // 16))
    fact("flash ragged prefill 16x128-8192 H32/8 D128 causal median_us", ragged["timing"]["median_us"])
    fact("flash ragged prefill TFLOP/s (real tokens)", ragged["perf"]["tflops"])
    fact("flash dense prefill of the same total TFLOP/s", dense["perf"]["tflops"])
